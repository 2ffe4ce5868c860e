//! Parking: a receiving direction whose ring does not pay is left to the kernel.
//!
//! While nobody can spin for the next bytes (more runnable threads than CPUs, or a receiver
//! that is never waiting when they come), the ring saves nothing, and its protocol costs on
//! every call: a receive that finds nothing counts itself a sleeper and uncounts itself (two
//! compare-and-swaps on the sender's cache line), a wait does the same for each of its
//! sockets and looks at each one's ring. So such a receiver *parks* the peer's direction
//! (`DirectionWord::park`: kernel mode with the ring read to the end, kept so) and flags its
//! own record ([`FLAG_RX_PARKED`]); its reads and waits then make the program's own system
//! call and touch nothing of the peer's. The sender sees kernel mode, as before.
//!
//! The parking ends ([`unpark`]) when the receiver would try the ring again (the back-off
//! of `stream::maybe_ring_mode`). A reader relying on it must not be left waiting in the
//! kernel for bytes that go to the ring instead: each one counts itself in
//! `Conn::parked_readers` before it checks the flag ([`hold`]), and [`unpark`] clears the
//! flag before it counts them, both sequentially consistent, so either the reader sees the
//! flag cleared (and takes the ring's path, which counts it a sleeper) or the receiver sees
//! the reader and stays parked. Readers in other processes are not counted here: only the
//! record's sole holder unparks (a process that gets the socket later adds itself as a
//! holder, sequentially consistent, before it reads).
//!
//! **Retiring.** A direction whose tries to take the ring back keep not paying (see
//! `stream::flip_due`) is retired ([`retire`], [`FLAG_RX_RETIRED`]): parked for good. Since it
//! is never unparked again, nobody needs a hold: receives and waits call the kernel at once,
//! the peer's sends too once it sees the flag, and with both directions retired the
//! connection is kernel TCP with the library's cost reduced to a table lookup per call.

use std::sync::atomic::Ordering;

use lanes::sockets::endpoint::{lock_shared, this_process, FLAG_RX_PARKED, FLAG_RX_RETIRED};
use lanes::sockets::Endpoint;

use crate::conn::Conn;

/// A reader counted in `Conn::parked_readers` (see [`hold`]); uncounted when dropped.
pub struct ParkedHold<'a> {
    conn: &'a Conn,
}

impl Drop for ParkedHold<'_> {
    fn drop(&mut self) {
        self.conn.parked_readers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether the peer's direction is parked (a hint: a reader acts on [`hold`] only).
#[inline]
pub fn is_parked(conn: &Conn) -> bool {
    conn.own.has_flag(FLAG_RX_PARKED)
}

/// If the peer's direction is parked, counts the caller a reader relying on it until the
/// hold drops: meanwhile the direction stays parked, so its bytes come through the kernel
/// and the caller may read and wait there alone. None: take the ring's path.
#[inline]
pub fn hold(conn: &Conn) -> Option<ParkedHold<'_>> {
    if !is_parked(conn) {
        return None;
    }
    conn.parked_readers.fetch_add(1, Ordering::SeqCst);
    // Dropped (uncounted) unless the flag is still set now that the reader is counted.
    let hold = ParkedHold { conn };
    (conn.own.flags().load(Ordering::SeqCst) & FLAG_RX_PARKED != 0).then_some(hold)
}

/// Parks the peer's direction if it is in kernel mode with the ring read to the end (after
/// a kernel read, when the ring would not pay).
pub fn park(conn: &Conn, peer: &Endpoint) {
    if is_parked(conn) {
        return;
    }
    let _lock = lock_shared(conn.own.rx_lock());
    if !is_parked(conn) && peer.tx_word().park(conn.own.rx_consumed().load(Ordering::Acquire)) {
        conn.own.set_flags(FLAG_RX_PARKED);
    }
}

/// Retires the peer's direction from the ring for good: parks it (if it is not parked
/// yet) and flags it [`FLAG_RX_RETIRED`], after which it is never unparked, so its bytes are
/// the kernel's alone and every reader and waiter may call the kernel directly, without a
/// hold. True if this call retired it.
pub fn retire(conn: &Conn, peer: &Endpoint) -> bool {
    park(conn, peer);
    let _lock = lock_shared(conn.own.rx_lock());
    is_parked(conn) && conn.own.set_flags(FLAG_RX_RETIRED) & FLAG_RX_RETIRED == 0
}

/// Ends the parking, unless a reader of this process relies on it or another process holds
/// the socket too, or the direction is retired; true if the direction is not parked now.
pub fn unpark(conn: &Conn, peer: &Endpoint) -> bool {
    if conn.rx_retired() {
        return false;
    }
    let word = peer.tx_word();
    if !is_parked(conn) && !word.load().parked() {
        return true;
    }
    let _lock = lock_shared(conn.own.rx_lock());
    conn.own.clear_flags(FLAG_RX_PARKED);
    // Under a seccomp filter /proc is not asked (the filter may kill for it): a holder
    // that died keeps the direction parked, which costs speed, never bytes.
    let sole = this_process().is_ok_and(|me| conn.own.held_only_by(me, !crate::sandbox::filtered()));
    if conn.parked_readers.load(Ordering::SeqCst) != 0 || !sole {
        if word.load().parked() {
            conn.own.set_flags(FLAG_RX_PARKED);
        }
        return false;
    }
    word.unpark();
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes::sockets::ConnectionKey;

    #[test]
    fn holds_count_readers_only_while_parked_and_give_every_count_back() {
        let dir = lanes_testkit::TestDir::new("park-holds");
        let c = crate::conn::test_conn(dir.root());
        let readers = |c: &Conn| c.parked_readers.load(Ordering::SeqCst);
        assert!(hold(&c).is_none(), "not parked");
        assert_eq!(readers(&c), 0, "a refused hold leaves no count behind");
        c.own.set_flags(FLAG_RX_PARKED);
        {
            let a = hold(&c).expect("parked");
            let b = hold(&c).expect("parked");
            assert_eq!(readers(&c), 2);
            drop((a, b));
        }
        assert_eq!(readers(&c), 0);
        c.own.clear_flags(FLAG_RX_PARKED);
        assert!(hold(&c).is_none());
        assert_eq!(readers(&c), 0);
    }

    #[test]
    fn only_a_sole_holder_without_parked_readers_unparks() {
        let dir = lanes_testkit::TestDir::new("park-unpark");
        let c = crate::conn::test_conn(dir.root());
        // The peer's record: its direction is the one parked.
        let key = ConnectionKey::new(1, "127.0.0.1:40000".parse().unwrap(), "127.0.0.1:5201".parse().unwrap());
        let peer = Endpoint::create(dir.root(), &key, 43, 4096).expect("record");
        let me = this_process().unwrap();
        assert!(c.own.add_holder(me));
        park(&c, &peer);
        assert!(is_parked(&c) && peer.tx_word().load().parked());
        // A reader relies on the parking: it stays.
        let h = hold(&c).expect("parked");
        assert!(!unpark(&c, &peer));
        assert!(is_parked(&c) && peer.tx_word().load().parked());
        drop(h);
        // Another live process holds the socket too (init): it stays.
        let init = lanes::platform::liveness::ProcessIdentity::of_pid(1).unwrap();
        assert!(c.own.add_holder(init));
        assert!(!unpark(&c, &peer));
        assert!(is_parked(&c));
        c.own.remove_holder(init);
        assert!(unpark(&c, &peer));
        assert!(!is_parked(&c) && !peer.tx_word().load().parked());
        assert!(unpark(&c, &peer), "not parked: nothing to do");
    }
}
