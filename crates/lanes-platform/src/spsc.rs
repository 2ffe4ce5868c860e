//! A bounded single-producer single-consumer ring of plain values, lock-free, with the two
//! indices on separate cache lines. Both sides move whole batches with one index update.

use std::mem::MaybeUninit;

#[cfg(loom)]
use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicUsize, Ordering},
};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// `std`'s `UnsafeCell` with loom's access API, so the ring runs unchanged under loom.
#[cfg(not(loom))]
#[derive(Debug)]
struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(v: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(v))
    }

    fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Aligns a value to its own pair of cache lines (adjacent-line prefetch pulls pairs).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// The ring. `push` may be called by one thread at a time, `pop`/`peek` by one other.
pub struct SpscRing<T: Copy> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// Next slot to write; written by the producer only.
    tail: CachePadded<AtomicUsize>,
    /// Next slot to read; written by the consumer only.
    head: CachePadded<AtomicUsize>,
}

// SAFETY: slots are handed from the single producer to the single consumer through the
// release/acquire pair on `tail` (and back through `head`); T is Copy and Send.
unsafe impl<T: Copy + Send> Sync for SpscRing<T> {}
// SAFETY: as above.
unsafe impl<T: Copy + Send> Send for SpscRing<T> {}

impl<T: Copy> SpscRing<T> {
    /// A ring holding at least `capacity` values (rounded up to a power of two).
    pub fn new(capacity: usize) -> Self {
        let cap = capacity.max(1).next_power_of_two();
        let slots = (0..cap).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect();
        SpscRing {
            slots,
            mask: cap - 1,
            tail: CachePadded(AtomicUsize::new(0)),
            head: CachePadded(AtomicUsize::new(0)),
        }
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Values queued now (exact for either side, approximate for a third party).
    pub fn len(&self) -> usize {
        self.tail.load(Ordering::Acquire).wrapping_sub(self.head.load(Ordering::Acquire))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Producer: appends every value of `values` or none (false if they do not all fit).
    pub fn push_all(&self, values: &[T]) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        if self.capacity() - tail.wrapping_sub(head) < values.len() {
            return false;
        }
        for (i, v) in values.iter().enumerate() {
            let slot = &self.slots[tail.wrapping_add(i) & self.mask];
            // SAFETY: the slot lies between tail and head + capacity: the consumer does not
            // read it until the release store of tail below publishes it.
            slot.with_mut(|p| unsafe { (*p).write(*v) });
        }
        self.tail.store(tail.wrapping_add(values.len()), Ordering::Release);
        true
    }

    /// Consumer: copies up to `out.len()` queued values into `out` without consuming them;
    /// returns how many.
    pub fn peek(&self, out: &mut [T]) -> usize {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        let n = tail.wrapping_sub(head).min(out.len());
        for (i, o) in out.iter_mut().enumerate().take(n) {
            let slot = &self.slots[head.wrapping_add(i) & self.mask];
            // SAFETY: slots in head..tail were published by the producer's release store of
            // tail (acquired above) and are not rewritten until head passes them.
            *o = slot.with(|p| unsafe { (*p).assume_init() });
        }
        n
    }

    /// Consumer: drops `n` values previously returned by `peek`.
    pub fn consume(&self, n: usize) {
        let head = self.head.load(Ordering::Relaxed);
        self.head.store(head.wrapping_add(n), Ordering::Release);
    }
}

/// Every interleaving of one producer and one consumer on a two-slot ring (loom): values
/// arrive once each, in order, through wrap-around and a full ring.
/// `RUSTFLAGS="--cfg loom" cargo test -p lanes-platform --lib --release spsc::loom_tests`
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn producer_and_consumer_in_every_interleaving() {
        loom::model(|| {
            let r = Arc::new(SpscRing::<u32>::new(2));
            let p = r.clone();
            let producer = loom::thread::spawn(move || {
                let mut next = 0;
                while next < 3 {
                    if p.push_all(&[next]) {
                        next += 1;
                    } else {
                        loom::thread::yield_now();
                    }
                }
            });
            let mut expect = 0;
            let mut buf = [0u32; 2];
            while expect < 3 {
                let n = r.peek(&mut buf);
                for &v in &buf[..n] {
                    assert_eq!(v, expect);
                    expect += 1;
                }
                r.consume(n);
                if n == 0 {
                    loom::thread::yield_now();
                }
            }
            producer.join().unwrap();
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn values_cross_threads_in_order() {
        let r = Arc::new(SpscRing::<u64>::new(64));
        let total = 200_000u64;
        let p = r.clone();
        let producer = std::thread::spawn(move || {
            let mut next = 0;
            while next < total {
                let batch: Vec<u64> = (next..(next + 7).min(total)).collect();
                if p.push_all(&batch) {
                    next += batch.len() as u64;
                } else {
                    std::hint::spin_loop();
                }
            }
        });
        let mut expect = 0;
        let mut buf = [0u64; 16];
        while expect < total {
            let n = r.peek(&mut buf);
            for &v in &buf[..n] {
                assert_eq!(v, expect);
                expect += 1;
            }
            r.consume(n);
        }
        producer.join().unwrap();
        assert!(r.is_empty());
        assert!(!r.push_all(&[0; 65]), "more than capacity never fits");
    }
}
