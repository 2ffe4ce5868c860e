//! A bounded single-producer single-consumer ring of plain values, lock-free, with the two
//! indices on separate cache lines. Both sides move whole batches with one index update.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};

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
        SpscRing { slots, mask: cap - 1, tail: Default::default(), head: Default::default() }
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
            unsafe { (*slot.get()).write(*v) };
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
            *o = unsafe { (*slot.get()).assume_init() };
        }
        n
    }

    /// Consumer: drops `n` values previously returned by `peek`.
    pub fn consume(&self, n: usize) {
        let head = self.head.load(Ordering::Relaxed);
        self.head.store(head.wrapping_add(n), Ordering::Release);
    }
}

#[cfg(test)]
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
