//! The library's process-wide locks, held across fork(2).
//!
//! A child has only the thread that forked. A lock another thread of the parent held at
//! that moment would stay held in the child for good, and the child's first call that
//! needs it (closing or accepting a socket of ours, waiting on an epoll set of ours) would
//! block forever. So the fork handlers take every such lock before the fork and give it
//! back after it, in the parent and in the child: the socket tables (one-host streams,
//! datagrams, other hosts) and the epoll sets' shadows.
//!
//! Other threads hold these locks for a lookup or a registration, never across a blocking
//! system call, so a fork waits microseconds for them. A fork made from a signal handler
//! that interrupted the library on the forking thread may find a lock held by that very
//! thread: it waits at most [`PATIENCE`] in all, and leaves a lock still held then as it is.

use std::any::Any;
use std::cell::RefCell;
use std::sync::{LockResult, Mutex, MutexGuard, RwLock, RwLockWriteGuard, TryLockError};
use std::time::{Duration, Instant};

/// The longest a fork waits for other threads to leave the library's locks.
const PATIENCE: Duration = Duration::from_millis(100);

/// A lock taken for the fork, given back when dropped.
pub type Held = Box<dyn Any>;

thread_local! {
    /// What the forking thread holds from `take_all` to `release_all` (the child runs on as
    /// the same thread, with this same storage).
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// Takes `lock` for writing, waiting for other threads to leave it (until `by`, if given;
/// None if they have not by then).
pub fn write_by<T>(lock: &RwLock<T>, by: Option<Instant>) -> Option<RwLockWriteGuard<'_, T>> {
    take_by(by, || lock.try_write(), || lock.write())
}

/// As [`write_by`], for a mutex.
pub fn lock_by<T>(lock: &Mutex<T>, by: Option<Instant>) -> Option<MutexGuard<'_, T>> {
    take_by(by, || lock.try_lock(), || lock.lock())
}

/// A guard from `block` (no `by`), or from `attempt` tried until `by`; a poisoned lock's
/// guard is as good (the fork only needs nobody inside).
fn take_by<G>(
    by: Option<Instant>,
    mut attempt: impl FnMut() -> Result<G, TryLockError<G>>,
    block: impl FnOnce() -> LockResult<G>,
) -> Option<G> {
    let Some(by) = by else { return Some(block().unwrap_or_else(|p| p.into_inner())) };
    loop {
        match attempt() {
            Ok(g) => return Some(g),
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < by => std::thread::yield_now(),
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

/// Before a fork: takes every lock of the library (in the order the library's own calls
/// nest them: an epoll set's shadow, then a socket table). `in_library`: the fork comes from
/// a signal handler that interrupted the library on this thread (see the module's doc).
pub fn take_all(in_library: bool) {
    let by = in_library.then(|| Instant::now() + PATIENCE);
    let mut held = crate::wait::hold_for_fork(by);
    held.extend(crate::conn::hold_for_fork(by));
    held.extend(crate::udp::hold_for_fork(by));
    held.extend(crate::remote::hold_for_fork(by));
    // Once this thread's thread-local storage is destroyed (a fork from an atexit handler)
    // the locks cannot be kept until after the fork: they are given back at once, as if
    // nobody had held them.
    let _ = HELD.try_with(|h| *h.borrow_mut() = held);
}

/// After a fork, in the parent or the child: gives back what [`take_all`] took.
pub fn release_all() {
    let held = HELD.try_with(|h| std::mem::take(&mut *h.borrow_mut())).unwrap_or_default();
    // In reverse order of taking.
    held.into_iter().rev().for_each(drop);
}
