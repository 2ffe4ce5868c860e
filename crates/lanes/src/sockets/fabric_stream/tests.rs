//! The stream between two nodes of one host (the shm transport, where maps are direct):
//! the protocol's rules, byte-exact streams, request/response, the end of a stream and a
//! peer that vanishes. The same code between hosts over ofi is tested by
//! crates/lanes-sockets/tests/cross_host.rs.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicU64;

use super::*;
use crate::config::{FabricConfig, NodeId};
use crate::sockets::direction::DirectionState;

#[test]
fn requests_and_answers_round_trip_and_zero_is_none() {
    assert_eq!(Request::decode(0), None);
    for r in [Request::Kernel { seq: 1 }, Request::Ring { seq: u32::MAX, kernel_read: (1 << 28) + 5 }] {
        let back = Request::decode(r.encode()).unwrap();
        match (r, back) {
            (Request::Ring { seq, kernel_read }, Request::Ring { seq: s2, kernel_read: k2 }) => {
                assert_eq!((seq, kernel_read & COUNT_MASK), (s2, k2));
            }
            _ => assert_eq!(r, back),
        }
    }
    assert_eq!(Answer::decode(0), None);
    let a = Answer { seq: 7, accepted: true, count: 12345 };
    assert_eq!(Answer::decode(a.encode()), Some(a));
    let a = Answer { seq: 8, accepted: false, count: COUNT_MASK };
    assert_eq!(Answer::decode(a.encode()), Some(a));
}

#[test]
fn the_sender_switches_only_as_the_receiver_asks_and_only_when_caught_up() {
    let w = AtomicU64::new(DirectionState::INITIAL.0);
    let word = DirectionWord::new(&w);
    // Kernel bytes in flight: the ring is refused, and the answer says how many were reserved.
    let r = word.reserve_kernel(100);
    word.settle_kernel(r, 100);
    let a = carry_out(&word, Request::Ring { seq: 1, kernel_read: 40 }, false);
    assert_eq!(a, Answer { seq: 1, accepted: false, count: 100 });
    assert!(!word.load().ring_mode());
    // Caught up: accepted.
    let a = carry_out(&word, Request::Ring { seq: 2, kernel_read: 100 }, false);
    assert!(a.accepted && word.load().ring_mode());
    assert!(word.publish(30));
    // A kernel request answers with R at the switch; a sender that publishes after it fails.
    let a = carry_out(&word, Request::Kernel { seq: 3 }, false);
    assert_eq!(a, Answer { seq: 3, accepted: true, count: 30 });
    assert!(!word.publish(1), "no ring byte after the switch the receiver was told of");
    // Asked again while already in kernel mode: the same R.
    assert_eq!(carry_out(&word, Request::Kernel { seq: 4 }, false).count, 30);
    // A finished sender never takes the ring back.
    let a = carry_out(&word, Request::Ring { seq: 5, kernel_read: 100 }, true);
    assert!(!a.accepted && !word.load().ring_mode());
}

/// Two nodes of one fabric directory, a TCP connection between them on 127.0.0.1 and a
/// stream over both; the fabric directory is removed at the end.
struct Pair {
    a: Option<FabricStream>,
    b: Option<FabricStream>,
    _sockets: (TcpStream, TcpStream),
    dir: std::path::PathBuf,
}

impl Pair {
    fn new(name: &str, ring: usize) -> Pair {
        Self::counting_from(name, ring, 0)
    }

    fn counting_from(name: &str, ring: usize, start: u64) -> Pair {
        let dir = std::env::temp_dir().join(format!("lanes-fabric-stream-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let fa = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(4).unwrap())).unwrap();
        let fb = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(8).unwrap())).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let sa = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (sb, _) = l.accept().unwrap();
        let (ea, eb) = (StreamExports::create(&fa, ring).unwrap(), StreamExports::create(&fb, ring).unwrap());
        let (ha, hb) = (ea.handles(), eb.handles());
        let (fda, fdb) = (sa.as_raw_fd(), sb.as_raw_fd());
        let t = std::thread::spawn(move || {
            FabricStream::connect_counting_from(eb, ha, fdb, Duration::from_secs(5), start).unwrap()
        });
        let a = FabricStream::connect_counting_from(ea, hb, fda, Duration::from_secs(5), start).unwrap();
        let b = t.join().unwrap();
        Pair { a: Some(a), b: Some(b), _sockets: (sa, sb), dir }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.a = None;
        self.b = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits (10 s at most) until `sender`'s direction is in ring mode: its receiver asked for
/// the ring and was granted it.
fn wait_for_ring_mode(sender: &FabricStream) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sender.shared.word().load().ring_mode() {
        assert!(Instant::now() < deadline, "the receiver never took the ring");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn pattern(seed: u64, at: u64) -> u8 {
    (at.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8
}

/// Sends `total` bytes of the pattern in pieces of varying size.
fn send_pattern(s: &FabricStream, seed: u64, total: u64) {
    send_pattern_from(s, seed, 0, total)
}

/// Sends bytes `from..total` of the pattern.
fn send_pattern_from(s: &FabricStream, seed: u64, from: u64, total: u64) {
    let mut at = from;
    let mut piece = 1usize;
    let mut buf = vec![0u8; 300_000];
    while at < total {
        let n = (piece.min(buf.len()) as u64).min(total - at) as usize;
        for (i, b) in buf[..n].iter_mut().enumerate() {
            *b = pattern(seed, at + i as u64);
        }
        s.send_all(&buf[..n]).unwrap();
        at += n as u64;
        piece = piece * 7 % 299_993 + 1;
    }
}

/// Receives until the end of the stream, checking every byte; how many.
fn receive_pattern(s: &FabricStream, seed: u64) -> u64 {
    let mut at = 0u64;
    let mut buf = vec![0u8; 70_000];
    loop {
        let n = s.recv(&mut buf).unwrap();
        if n == 0 {
            return at;
        }
        for (i, b) in buf[..n].iter().enumerate() {
            assert_eq!(*b, pattern(seed, at + i as u64), "byte {} of the stream", at + i as u64);
        }
        at += n as u64;
    }
}

#[test]
fn streams_in_both_directions_at_once_are_byte_exact_and_use_the_ring() {
    let pair = Pair::new("both", 64 * 1024);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    // Receivers that spin 5 ms before they sleep: the directions still switch (a sender
    // descheduled that long on a loaded machine), but the ring carries bytes both ways.
    a.set_receive_spin(Duration::from_millis(5));
    b.set_receive_spin(Duration::from_millis(5));
    const TOTAL: u64 = 24 << 20;
    std::thread::scope(|s| {
        s.spawn(|| {
            send_pattern(a, 1, TOTAL);
            a.shutdown_write().unwrap();
        });
        s.spawn(|| {
            send_pattern(b, 2, TOTAL);
            b.shutdown_write().unwrap();
        });
        let got_b = s.spawn(|| receive_pattern(b, 1));
        assert_eq!(receive_pattern(a, 2), TOTAL);
        assert_eq!(got_b.join().unwrap(), TOTAL);
    });
    let (ca, cb) = (a.counts(), b.counts());
    eprintln!("a: {ca:?}\nb: {cb:?}");
    assert_eq!(ca.sent_fabric + ca.sent_kernel, TOTAL);
    assert_eq!(cb.received_fabric + cb.received_kernel, TOTAL);
    assert_eq!(ca.sent_fabric, cb.received_fabric, "what went into the ring came out of it");
    assert_eq!(cb.sent_fabric, ca.received_fabric);
    assert!(ca.sent_fabric > 0 && cb.sent_fabric > 0, "the ring carried bytes: {ca:?} {cb:?}");
}

#[test]
fn the_counts_wrap_around_at_two_to_the_28_byte_exact() {
    // Every count starts 1000 bytes short of the wrap: both paths cross it.
    let pair = Pair::counting_from("wrap", 4096, (1 << 28) - 1000);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    // Receivers that stay on the ring once there, however loaded the machine.
    a.set_receive_spin(Duration::from_secs(10));
    b.set_receive_spin(Duration::from_secs(10));
    const TOTAL: u64 = 4 << 20;
    // Before any receiver asks for the ring, both directions are in kernel mode: these
    // 2000 bytes take K (and then KR) across the wrap; the ring's R and H cross it after.
    const FIRST: u64 = 2000;
    send_pattern_from(a, 5, 0, FIRST);
    send_pattern_from(b, 6, 0, FIRST);
    std::thread::scope(|s| {
        s.spawn(|| {
            send_pattern_from(a, 5, FIRST, TOTAL);
            a.shutdown_write().unwrap();
        });
        s.spawn(|| {
            send_pattern_from(b, 6, FIRST, TOTAL);
            b.shutdown_write().unwrap();
        });
        let got_b = s.spawn(|| receive_pattern(b, 5));
        assert_eq!(receive_pattern(a, 6), TOTAL);
        assert_eq!(got_b.join().unwrap(), TOTAL);
    });
    let (ca, cb) = (a.counts(), b.counts());
    eprintln!("a: {ca:?}\nb: {cb:?}");
    for c in [ca, cb] {
        assert!(c.sent_fabric > 1000 && c.sent_kernel > 1000, "both paths crossed the wrap: {ca:?} {cb:?}");
    }
}

#[test]
fn request_and_response_alternate_through_the_ring_and_the_kernel() {
    let pair = Pair::new("rr", 4096);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    const ROUNDS: u64 = 3000;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = [0u8; 512];
            loop {
                let mut got = 0;
                let n = b.recv(&mut buf[..8]).unwrap();
                if n == 0 {
                    break;
                }
                got += n;
                while got < 8 {
                    got += b.recv(&mut buf[got..8]).unwrap();
                }
                let i = u64::from_le_bytes(buf[..8].try_into().unwrap());
                // Answers of varying size, bigger than the ring now and then.
                let len = (i % 17) as usize * 700 + 8;
                let answer: Vec<u8> = (0..len as u64).map(|k| pattern(i, k)).collect();
                b.send_all(&answer).unwrap();
            }
            b.shutdown_write().unwrap();
        });
        for i in 0..ROUNDS {
            a.send_all(&i.to_le_bytes()).unwrap();
            let len = (i % 17) as usize * 700 + 8;
            let mut got = vec![0u8; len];
            let mut at = 0;
            while at < len {
                let n = a.recv(&mut got[at..]).unwrap();
                assert!(n > 0, "end of stream in round {i}");
                at += n;
            }
            assert!(got.iter().enumerate().all(|(k, b)| *b == pattern(i, k as u64)), "round {i}");
            // Now and then the client thinks a while: the server's receiver sleeps in the kernel.
            if i % 500 == 499 {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        a.shutdown_write().unwrap();
        assert_eq!(a.recv(&mut [0u8; 16]).unwrap(), 0);
    });
    let (ca, cb) = (a.counts(), b.counts());
    eprintln!("a: {ca:?}\nb: {cb:?}");
    assert!(ca.sent_fabric + cb.sent_fabric > 0, "some requests or answers went through the ring");
    assert!(cb.kernel_requests > 0, "the server slept in the kernel now and then");
}

#[test]
fn a_peer_that_vanishes_without_finishing_is_a_reset_after_its_landed_bytes() {
    let mut pair = Pair::new("vanish", 64 * 1024);
    {
        let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
        // b takes the ring (its first receive asks) and spins there, then a sends through it.
        b.set_receive_spin(Duration::from_secs(20));
        let reader = std::thread::scope(|s| {
            let r = s.spawn(|| {
                let mut buf = [0u8; 1000];
                let n = b.recv(&mut buf).unwrap();
                buf[..n].to_vec()
            });
            // Sent once b's ring request made a's direction ring mode.
            wait_for_ring_mode(a);
            a.send_all(b"landed").unwrap();
            r.join().unwrap()
        });
        assert_eq!(reader, b"landed");
        assert!(b.counts().received_fabric > 0, "{:?}", b.counts());
        a.send_all(b"more").unwrap();
    }
    // a's process "dies": its inbound segment disappears, it finishes nothing, and its
    // kernel closes its end of the connection.
    let a = pair.a.take().unwrap();
    let _ = a.shared.exports.segment.remove(true);
    a.shared.stop.store(true, Ordering::Release);
    std::mem::forget(a);
    pair._sockets.0.shutdown(std::net::Shutdown::Both).unwrap();
    let b = pair.b.as_ref().unwrap();
    let mut buf = [0u8; 100];
    let n = b.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"more", "landed bytes first");
    let e = b.recv(&mut buf).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET), "{e}");
    assert_eq!(b.recv(&mut buf).unwrap(), 0, "then the end of the stream");
}

/// A small deterministic generator (xorshift64*) for the stress test's sizes and pauses.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// 0..n
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Now and then a pause of up to 300 us, or a yield: a thread descheduled at any point
    /// of the protocol.
    fn pause(&mut self) {
        match self.below(32) {
            0 => std::thread::sleep(Duration::from_micros(self.below(300))),
            1 => std::thread::yield_now(),
            _ => {}
        }
    }
}

const NONBLOCKING: CallMode = CallMode { nonblocking: true, kernel_flags: libc::MSG_DONTWAIT, interrupts: None };

/// Sends `total` bytes of the pattern in pieces of random size, blocking and non-blocking
/// calls mixed (a non-blocking one leaves the ring for the kernel when the ring is full),
/// with random pauses; then ends the direction.
fn send_switching(s: &FabricStream, seed: u64, total: u64) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut buf = vec![0u8; 20_000];
    let mut at = 0u64;
    while at < total {
        let n = (1 + rng.below(buf.len() as u64)).min(total - at) as usize;
        for (i, b) in buf[..n].iter_mut().enumerate() {
            *b = pattern(seed, at + i as u64);
        }
        let mode = if rng.below(2) == 0 { NONBLOCKING } else { CallMode::default() };
        let sent = match s.send_with(&buf[..n], mode) {
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Err(e) => panic!("send at {at}: {e}"),
        };
        at += sent as u64;
        rng.pause();
    }
    s.shutdown_write().unwrap();
}

/// Receives to the end of the stream in reads of random size, blocking and non-blocking
/// (a non-blocking one that finds nothing waits as a poll would: `prepare_to_wait`, then
/// the anchor's readiness), with random pauses, checking every byte; how many. A wrong
/// byte resets the connection (so that no thread of the test waits for good) before the
/// test fails.
fn receive_switching(s: &FabricStream, fd: RawFd, seed: u64, failed: &AtomicBool) -> u64 {
    let mut rng = Rng(seed.wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1);
    let mut buf = vec![0u8; 20_000];
    let mut at = 0u64;
    loop {
        let n = 1 + rng.below(buf.len() as u64) as usize;
        let mode = if rng.below(2) == 0 { NONBLOCKING } else { CallMode::default() };
        let got = match s.recv_with(&mut buf[..n], mode) {
            Ok(0) => return at,
            Ok(k) => k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !s.prepare_to_wait() {
                    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                    // SAFETY: poll on one pollfd that outlives the call.
                    unsafe { libc::poll(&mut p, 1, 10) };
                }
                continue;
            }
            Err(e) => panic!("receive at {at}: {e}"),
        };
        if let Some(k) = (0..got).find(|&k| buf[k] != pattern(seed, at + k as u64)) {
            failed.store(true, Ordering::Relaxed);
            reset_anchor(fd);
            panic!("byte {} of the stream differs (seed {seed})", at + k as u64);
        }
        at += got as u64;
        rng.pause();
    }
}

/// A receiver asking for the ring while its peer's sender finishes: the sender grants the
/// ring, puts bytes into it and finishes, all between the receiver's look at the answer
/// (none yet: the sender's serving lock is held a moment) and its look at the finish (a
/// pause there makes that order certain). The receiver takes the grant, not the finish's
/// refusal, and reads the ring bytes before the end of the stream.
#[test]
fn a_ring_granted_just_before_the_sender_finished_is_read() {
    let pair = Pair::new("granted-then-finished", MIN_RING);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    *lock(&a.shared.answer_look_pause) = Duration::from_secs(1);
    let (held_tx, held) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            // b serves no request for a moment: a's first look finds no answer.
            let serving = lock(&b.shared.serve_lock);
            held_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            drop(serving);
        });
        held.recv().unwrap();
        s.spawn(|| {
            // b's sender waits for the grant of a's ring request, then sends and finishes.
            let start = Instant::now();
            while !b.shared.word().load().ring_mode() {
                assert!(start.elapsed() < Duration::from_secs(20), "the ring request never came");
                std::thread::sleep(Duration::from_micros(100));
            }
            send_pattern(b, 5, 1000);
            b.shutdown_write().unwrap();
        });
        assert_eq!(receive_pattern(a, 5), 1000, "every byte the ring carried, then the end");
    });
    assert_eq!(b.counts().sent_fabric, 1000, "the bytes went through the ring: {:?}", b.counts());
}

/// The switching protocol shaken hard: both directions at once through the smallest ring,
/// receivers that never spin (an empty ring asks for kernel mode at once, a caught-up
/// receiver asks for the ring back), blocking and non-blocking sends and receives mixed
/// (a non-blocking send leaves a full ring for the kernel on its own), random pauses in
/// every thread, and a thread asking for readiness all along (`prepare_to_wait` switches
/// the receiving direction to kernel mode behind the receiver's back). Every byte arrives
/// in order, and the directions switched many times each way.
#[test]
fn switching_under_random_pauses_keeps_every_byte_in_order() {
    let pair = Pair::new("switching", MIN_RING);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    let (fda, fdb) = (pair._sockets.0.as_raw_fd(), pair._sockets.1.as_raw_fd());
    for s in [a, b] {
        s.set_receive_spin(Duration::ZERO);
        s.switch_eagerly();
    }
    const TOTAL: u64 = 6 << 20;
    let (done, failed) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| send_switching(a, 21, TOTAL));
        s.spawn(|| send_switching(b, 22, TOTAL));
        s.spawn(|| {
            let mut rng = Rng(23);
            while !done.load(Ordering::Relaxed) && !failed.load(Ordering::Relaxed) {
                let _ = (a.ring_readable(), b.readable_without_kernel());
                let _ = if rng.below(2) == 0 { a.prepare_to_wait() } else { b.prepare_to_wait() };
                std::thread::sleep(Duration::from_micros(50 + rng.below(500)));
            }
        });
        let got_b = s.spawn(|| receive_switching(b, fdb, 21, &failed));
        assert_eq!(receive_switching(a, fda, 22, &failed), TOTAL);
        assert_eq!(got_b.join().unwrap(), TOTAL);
        done.store(true, Ordering::Relaxed);
    });
    let (ca, cb) = (a.counts(), b.counts());
    eprintln!("a: {ca:?}\nb: {cb:?}");
    assert_eq!(ca.sent_fabric, cb.received_fabric, "what went into the ring came out of it");
    assert_eq!(cb.sent_fabric, ca.received_fabric);
    for c in [ca, cb] {
        assert!(c.sent_fabric > 0 && c.received_fabric > 0, "the ring carried bytes both ways: {ca:?} {cb:?}");
        assert!(c.kernel_requests >= 10 && c.ring_requests >= 10, "switches both ways: {ca:?} {cb:?}");
    }
}

/// The kernel's counts a stream starts from are exact on a connection with bytes in flight:
/// a sender on loopback writes bursts that a reader drains all along, and after each write
/// `kernel_history` gives exactly what was written and read. (An ack between its readings
/// would make the written count short if they were not repeated until stable; loopback
/// processes most acks within the sender's own call, so this rarely meets one.)
#[test]
fn the_kernel_history_is_exact_while_acks_arrive() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    let syn = syn_acked(a.as_raw_fd()).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = vec![0u8; 1 << 16];
            while !done.load(Ordering::Relaxed) {
                let _ = (&b).read(&mut buf);
            }
        });
        let mut rng = Rng(7);
        let buf = vec![7u8; 1 << 18];
        let mut written = 0u64;
        let mut short = 0;
        for _ in 0..5000 {
            let n = 1 + rng.below(buf.len() as u64) as usize;
            (&a).write_all(&buf[..n]).unwrap();
            written += n as u64;
            let h = kernel_history(a.as_raw_fd(), syn).expect("established");
            assert_eq!(h.read, 0);
            if h.written != written {
                short += 1;
                eprintln!("kernel_history says {} written, {written} were", h.written);
            }
        }
        done.store(true, Ordering::Relaxed);
        // The reader's blocking read returns on the end of the stream.
        a.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(short, 0, "counts off in {short} of 5000 readings");
    });
}

/// The switching stress of [`switching_under_random_pauses_keeps_every_byte_in_order`],
/// with the fabric cut on both ends `cut_after` into it (every write to the peer fails
/// from then on, as after a provider error): both directions fail over to the anchor
/// and every byte still arrives, in order, once.
fn fail_over_while_switching(name: &str, cut_after: Duration, seed: u64) -> u64 {
    let pair = Pair::new(name, MIN_RING);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    let (fda, fdb) = (pair._sockets.0.as_raw_fd(), pair._sockets.1.as_raw_fd());
    for s in [a, b] {
        s.set_receive_spin(Duration::ZERO);
        s.switch_eagerly();
    }
    const TOTAL: u64 = 4 << 20;
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| send_switching(a, seed, TOTAL));
        s.spawn(|| send_switching(b, seed + 1, TOTAL));
        s.spawn(|| {
            std::thread::sleep(cut_after);
            a.shared.cut.store(true, Ordering::Relaxed);
            b.shared.cut.store(true, Ordering::Relaxed);
        });
        let got_b = s.spawn(|| receive_switching(b, fdb, seed, &failed));
        assert_eq!(receive_switching(a, fda, seed + 1, &failed), TOTAL);
        assert_eq!(got_b.join().unwrap(), TOTAL);
    });
    let (ca, cb) = (a.counts(), b.counts());
    eprintln!("cut after {cut_after:?}\na: {ca:?}\nb: {cb:?}");
    assert!(ca.failovers > 0 && cb.failovers > 0, "both ends failed over: {ca:?} {cb:?}");
    ca.sent_fabric + cb.sent_fabric
}

#[test]
fn a_fabric_cut_while_the_directions_switch_fails_over_byte_exact() {
    let mut through_ring = 0;
    for (i, ms) in [0u64, 3, 20, 60].into_iter().enumerate() {
        through_ring += fail_over_while_switching(&format!("cut-{i}"), Duration::from_millis(ms), 40 + 2 * i as u64);
    }
    assert!(through_ring > 0, "the ring carried bytes before the cuts");
}

/// Bytes a sender published into the ring but that never landed (the write failed: the
/// fabric was cut as it wrote) reach the receiver through the anchor, in the sender's
/// fail-over record, before the bytes it sends after; then the end of the stream.
#[test]
fn ring_bytes_that_never_landed_come_through_the_anchor_first() {
    let pair = Pair::new("unlanded", 64 * 1024);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    // b takes the ring (its first receive asks) and spins there.
    b.set_receive_spin(Duration::from_secs(20));
    std::thread::scope(|s| {
        let r = s.spawn(|| receive_pattern(b, 9));
        wait_for_ring_mode(a);
        send_pattern(a, 9, 30_000);
        a.shared.cut.store(true, Ordering::Relaxed);
        b.shared.cut.store(true, Ordering::Relaxed);
        // Published, and the write fails: the record carries them.
        send_pattern_from(a, 9, 30_000, 50_000);
        send_pattern_from(a, 9, 50_000, 80_000);
        a.shutdown_write().unwrap();
        assert_eq!(r.join().unwrap(), 80_000, "every byte, then the end");
    });
    let (ca, cb) = (a.counts(), b.counts());
    eprintln!("a: {ca:?}\nb: {cb:?}");
    assert!(ca.failovers == 1 && cb.failovers == 1, "{ca:?} {cb:?}");
    assert!(cb.received_fabric >= 30_000, "the ring's landed bytes were read from it: {cb:?}");
}

/// A sender that sends nothing more after its ring bytes failed to land (the program
/// waits for the peer's answer) still fails over: its service thread sees the fabric
/// fail, and the record reaches the receiver, which answers.
#[test]
fn an_idle_sender_fails_over_on_its_own() {
    let pair = Pair::new("idle", 64 * 1024);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    b.set_receive_spin(Duration::from_secs(20));
    std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut buf = [0u8; 5];
            let mut got = 0;
            while got < 5 {
                got += b.recv(&mut buf[got..]).unwrap();
            }
            b.send_all(&buf).unwrap();
            buf
        });
        wait_for_ring_mode(a);
        // The ring's bytes are published, but the fabric fails before the count lands.
        let mut tx = lock(&a.shared.tx);
        assert!(a.shared.word().publish(5));
        keep_copy(&mut tx, a.shared.peer_ring_bytes, b"hello");
        tx.published += 5;
        tx.ring_since_kernel = true;
        a.shared.cut.store(true, Ordering::Relaxed);
        b.shared.cut.store(true, Ordering::Relaxed);
        drop(tx);
        let mut answer = [0u8; 5];
        let mut got = 0;
        while got < 5 {
            got += a.recv(&mut answer[got..]).unwrap();
        }
        assert_eq!(&answer, b"hello", "the echo of the record's bytes");
        assert_eq!(&r.join().unwrap(), b"hello");
    });
}

/// A fail-over record larger than the anchor takes at once (small socket buffers, a
/// receiver that is not reading): a non-blocking send that fails over is told `EAGAIN`
/// for its own bytes and sends them later, behind the record's rest; the receiver gets
/// every byte once, in order.
#[test]
fn a_record_the_anchor_cannot_take_at_once_goes_before_later_bytes() {
    let pair = Pair::new("big-record", 1 << 20);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    let (fda, fdb) = (pair._sockets.0.as_raw_fd(), pair._sockets.1.as_raw_fd());
    for (fd, option) in [(fda, libc::SO_SNDBUF), (fdb, libc::SO_RCVBUF)] {
        let size: libc::c_int = 16 * 1024;
        // SAFETY: an int option from a local.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&size as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as _,
            )
        };
        assert_eq!(r, 0);
    }
    b.set_receive_spin(Duration::from_secs(20));
    // b takes the ring and reads its first byte, then reads nothing for a while.
    let first = std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut one = [0u8; 1];
            b.recv(&mut one).unwrap();
            one[0]
        });
        wait_for_ring_mode(a);
        send_pattern(a, 11, 1);
        r.join().unwrap()
    });
    assert_eq!(first, pattern(11, 0));
    const IN_RING: u64 = 600_000;
    send_pattern_from(a, 11, 1, IN_RING);
    a.shared.cut.store(true, Ordering::Relaxed);
    b.shared.cut.store(true, Ordering::Relaxed);
    // Non-blocking sends: the first one's bytes go into the record; later ones wait
    // (EAGAIN) while the record fills the anchor.
    const TOTAL: u64 = 800_000;
    let mut again = 0;
    let received = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            let mut at = 1u64;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = b.recv(&mut buf).unwrap();
                if n == 0 {
                    return at;
                }
                for (k, byte) in buf[..n].iter().enumerate() {
                    assert_eq!(*byte, pattern(11, at + k as u64), "byte {} of the stream", at + k as u64);
                }
                at += n as u64;
            }
        });
        let mut at = IN_RING;
        let mut buf = vec![0u8; 10_000];
        while at < TOTAL {
            let n = (buf.len() as u64).min(TOTAL - at) as usize;
            for (k, byte) in buf[..n].iter_mut().enumerate() {
                *byte = pattern(11, at + k as u64);
            }
            match a.send_with(&buf[..n], NONBLOCKING) {
                Ok(k) => at += k as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    again += 1;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("send at {at}: {e}"),
            }
        }
        a.shutdown_write().unwrap();
        reader.join().unwrap()
    });
    assert_eq!(received, TOTAL, "every byte, then the end");
    assert!(again > 0, "the anchor was full for a while");
    assert_eq!(a.counts().failovers, 1);
}

/// A receiver that failed over (its own writes fail) while its peer's fabric works: the
/// peer's finish lands, then its kernel's end of the stream. The receiver waiting on the
/// anchor sees the end after its last look at the finish, and takes it as the clean end
/// the finish says it is, not as a killed peer's.
#[test]
fn a_finish_that_lands_while_a_failed_over_receiver_waits_is_a_clean_end() {
    let pair = Pair::new("finish-while-failed", 64 * 1024);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    b.set_receive_spin(Duration::from_secs(20));
    std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut one = [0u8; 1];
            b.recv(&mut one).unwrap()
        });
        wait_for_ring_mode(a);
        a.send_all(b"x").unwrap();
        assert_eq!(r.join().unwrap(), 1);
    });
    // Only b's writes fail from now on: b fails over at its next receive, a does not.
    b.shared.cut.store(true, Ordering::Relaxed);
    b.set_receive_spin(Duration::ZERO);
    std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut buf = [0u8; 16];
            b.recv(&mut buf)
        });
        std::thread::sleep(Duration::from_millis(200));
        a.shutdown_write().unwrap();
        let got = r.join().unwrap();
        assert_eq!(got.map_err(|e| e.to_string()), Ok(0), "the clean end");
    });
    assert!(b.counts().failovers > 0, "{:?}", b.counts());
}

/// Whether the test's stand-in for a signal handler "ran" (see the next test).
static HANDLER_RAN: AtomicBool = AtomicBool::new(false);

/// Puts a's direction to b in ring mode for good: b spins 10 s before it would sleep, so
/// once a stream of 1 MiB made it ask for the ring, it stays there.
fn ring_mode_for_good(a: &FabricStream, b: &FabricStream) {
    b.set_receive_spin(Duration::from_secs(10));
    std::thread::scope(|s| {
        s.spawn(|| send_pattern(a, 3, 1 << 20));
        receive_pattern_exactly(b, 3, 1 << 20);
    });
    wait_for_ring_mode(a);
}

/// Receives `len` bytes of the pattern, checking each (the stream goes on after them).
fn receive_pattern_exactly(s: &FabricStream, seed: u64, len: usize) {
    let mut buf = vec![0u8; len];
    let mut at = 0;
    while at < len {
        at += s.recv(&mut buf[at..]).unwrap();
    }
    assert!(buf.iter().enumerate().all(|(k, x)| *x == pattern(seed, k as u64)));
}

#[test]
fn a_handler_run_while_a_receive_spins_ends_it_with_eintr_and_the_stream_goes_on() {
    let pair = Pair::new("eintr", 64 * 1024);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    let mode = CallMode {
        interrupts: Some(Interrupts { since: 0, ran: |_, _| HANDLER_RAN.load(Ordering::SeqCst) }),
        ..CallMode::default()
    };
    // Only the handler can end a receive that finds the ring empty before 10 s.
    ring_mode_for_good(a, b);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            let r = b.recv_with(&mut [0u8; 64], mode);
            let _ = done.send(r.map_err(|e| e.raw_os_error()));
        });
        std::thread::sleep(Duration::from_millis(50));
        HANDLER_RAN.store(true, Ordering::SeqCst);
        let r = finished.recv_timeout(Duration::from_secs(5));
        if r.is_err() {
            a.send_all(b"unblock").unwrap(); // so that the scope ends before the test fails
        }
        assert_eq!(r, Ok(Err(Some(libc::EINTR))), "the receive did not end with the handler");
    });
    // Bytes there are the receive's answer, handler or not (an EINTR only while they are
    // on their way); and none was lost.
    a.send_all(b"after the signal").unwrap();
    let mut buf = [0u8; 64];
    let mut at = 0;
    while at < 16 {
        match b.recv_with(&mut buf[at..], mode) {
            Ok(n) => at += n,
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EINTR)),
        }
    }
    assert_eq!(&buf[..at], b"after the signal");
    HANDLER_RAN.store(false, Ordering::SeqCst);
}

/// Whether the next test's stand-in for a signal handler "ran".
static SEND_HANDLER_RAN: AtomicBool = AtomicBool::new(false);

#[test]
fn a_handler_run_while_a_send_waits_for_room_ends_it_with_eintr_and_nothing_is_lost() {
    let pair = Pair::new("eintr-send", 64 * 1024);
    let (a, b) = (pair.a.as_ref().unwrap(), pair.b.as_ref().unwrap());
    let mode = CallMode {
        interrupts: Some(Interrupts { since: 0, ran: |_, _| SEND_HANDLER_RAN.load(Ordering::SeqCst) }),
        ..CallMode::default()
    };
    ring_mode_for_good(a, b);
    // Nobody reads: the ring fills, then a send waits for room until the handler runs.
    let data = vec![7u8; 256 * 1024];
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut sent = 0;
            let r = loop {
                if sent == data.len() {
                    break None;
                }
                match a.send_with(&data[sent..], mode) {
                    Ok(n) => sent += n,
                    Err(e) => break e.raw_os_error(),
                }
            };
            let _ = done.send((sent, r));
        });
        std::thread::sleep(Duration::from_millis(50));
        SEND_HANDLER_RAN.store(true, Ordering::SeqCst);
        let r = finished.recv_timeout(Duration::from_secs(5));
        SEND_HANDLER_RAN.store(false, Ordering::SeqCst);
        if r.is_err() {
            // Take all of it, so that the sender ends and the scope with it, before the
            // test fails.
            let mut sink = vec![0u8; 256 * 1024];
            let mut at = 0;
            while at < sink.len() {
                at += b.recv(&mut sink[at..]).unwrap();
            }
        }
        let (sent, e) = r.expect("the send did not end with the handler");
        assert_eq!(e, Some(libc::EINTR));
        assert!(sent > 0 && sent < 256 * 1024, "the ring took part of it: {sent}");
        // What was sent arrives, and the stream goes on.
        let mut got = vec![0u8; sent + 3];
        let mut at = 0;
        while at < sent {
            at += b.recv(&mut got[at..sent]).unwrap();
        }
        a.send_all(b"end").unwrap();
        while at < got.len() {
            at += b.recv(&mut got[at..]).unwrap();
        }
        assert!(got[..sent].iter().all(|&x| x == 7) && &got[sent..] == b"end");
    });
}
