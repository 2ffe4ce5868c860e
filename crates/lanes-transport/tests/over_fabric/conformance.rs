//! The transport conformance suite: what the fabric relies on from every [`Transport`],
//! checked through the traits alone. Each case is generic over a [`Rig`] (an owner that
//! creates objects, a peer's transport that reaches them); [`conformance!`] instantiates
//! every case for one transport. Objects are created through the public fabric API,
//! because local objects are shm files whatever transport reaches them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lanes::config::{FabricConfig, NodeId};
use lanes::error::Error;
use lanes::fabric::{Fabric, MapAccess, Timeout, MAX_DATA_INTERRUPT_PAYLOAD};
use lanes::platform::SharedSlice;
use lanes::transport::shm::layout::kind;
use lanes::transport::{LossReason, ObjectAddr, RemoteObject, RemoteState, Transport, Window};

const T: Timeout = Timeout::After(Duration::from_secs(10));
/// The node that owns every object of a case.
const OWNER: u32 = 4;

/// A transport under test, with an owner to create what it connects to.
trait Rig {
    type T: Transport;
    /// The owner's fabric (node [`OWNER`]).
    fn owner(&self) -> &Fabric;
    /// The transport of another node, which reaches the owner's objects.
    fn peer(&self) -> &Self::T;
}

fn addr(kind: u32, id: u32) -> ObjectAddr {
    ObjectAddr { kind, node: OWNER, id }
}

/// Copies `dst.len()` bytes out of `w` at `offset`, after checking the range.
fn read_window(w: &Window, offset: usize, dst: &mut [u8]) {
    assert!(offset + dst.len() <= w.len(), "a test read outside its window");
    raw_window(w).copy_to(offset, dst).expect("inside the window");
}

/// Copies `src` into `w` at `offset`, after checking the range.
fn write_window(w: &Window, offset: usize, src: &[u8]) {
    assert!(offset + src.len() <= w.len(), "a test write outside its window");
    raw_window(w).copy_from(offset, src).expect("inside the window");
}

/// The window as a program's own loads and stores reach it: through its raw pointer.
fn raw_window(w: &Window) -> SharedSlice<'_> {
    // SAFETY: the pointer names the window's `len()` bytes, valid while `w` lives (the cases
    // open their windows writable); touched here only through the slice.
    unsafe { SharedSlice::from_raw_parts(w.as_ptr(), w.len()) }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Connecting names the object; windows are bounded by it, with distinct errors.
fn bounds<R: Rig>(rig: &R) {
    let seg = rig.owner().create_segment(0x10, 8192).unwrap();
    let t = rig.peer();
    // Absent and unavailable objects refuse, and a bounded wait runs out only after waiting.
    assert!(matches!(t.connect(addr(kind::SEGMENT, 0x10), Timeout::Immediate), Err(Error::NotAvailable { .. })));
    assert!(matches!(t.connect(addr(kind::SEGMENT, 0x99), Timeout::Immediate), Err(Error::NoSuchSegment { .. })));
    let started = Instant::now();
    let r = t.connect(addr(kind::SEGMENT, 0x99), Timeout::After(Duration::from_millis(50)));
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    seg.prepare().unwrap();
    seg.set_available().unwrap();

    let r = t.connect(addr(kind::SEGMENT, 0x10), T).unwrap();
    assert_eq!(r.info().addr, addr(kind::SEGMENT, 0x10));
    assert_eq!(r.info().size, 8192);
    assert_eq!(r.state(), RemoteState::Operational);
    for (offset, len) in [(0, 8192), (8191, 1), (4096, 4096)] {
        let w = r.window(offset, len, MapAccess::ReadWrite).unwrap();
        assert_eq!(w.len() as u64, len);
    }
    for (offset, len) in [(8192, 1), (4096, 4097), (0, 8193), (u64::MAX, 2), (1 << 40, 8)] {
        match r.window(offset, len, MapAccess::ReadOnly) {
            Err(Error::OutOfRange { offset: o, len: l, size: 8192, .. }) => assert_eq!((o, l), (offset, len)),
            other => panic!("window({offset}, {len}): {other:?}"),
        }
    }
    assert!(matches!(r.window(0, 0, MapAccess::ReadOnly), Err(Error::InvalidSize { .. })));
}

/// What a peer writes and flushes, the owner reads; what the owner writes, a window opened
/// earlier reads (no stale copy).
fn writes_visible_after_flush_and_read_through<R: Rig>(rig: &R) {
    let seg = rig.owner().create_segment(0x11, 16384).unwrap();
    seg.prepare().unwrap();
    seg.set_available().unwrap();
    let own = seg.map(0, 16384, MapAccess::ReadWrite).unwrap();
    let r = rig.peer().connect(addr(kind::SEGMENT, 0x11), T).unwrap();
    let w = r.window(4096, 8192, MapAccess::ReadWrite).unwrap();

    let data = pattern(7, 5000);
    write_window(&w, 100, &data);
    w.flush();
    let mut got = vec![0u8; data.len()];
    own.read_bytes(4096 + 100, &mut got).unwrap();
    assert_eq!(got, data, "the peer's flushed writes, seen by the owner");

    let ro = r.window(0, 16384, MapAccess::ReadOnly).unwrap();
    for round in 0..3u8 {
        let data = pattern(round, 3000);
        own.write_bytes(9000, &data).unwrap();
        own.flush();
        let mut got = vec![0u8; data.len()];
        read_window(&ro, 9000, &mut got);
        assert_eq!(got, data, "round {round}: the owner's writes, read through a window");
    }
}

/// Every trigger counts: none is lost, none is doubled, and only interrupts take them.
fn trigger_counts<R: Rig>(rig: &R) {
    let li = rig.owner().create_interrupt(None).unwrap();
    let r = rig.peer().connect(addr(kind::INTERRUPT, li.number()), T).unwrap();
    let n = 1000;
    for _ in 0..n {
        r.trigger().unwrap();
    }
    assert_eq!(li.pending(), n);
    li.wait(Timeout::Immediate).unwrap();
    assert_eq!(li.pending(), n - 1);

    let seg = rig.owner().create_segment(0x12, 4096).unwrap();
    seg.prepare().unwrap();
    seg.set_available().unwrap();
    let s = rig.peer().connect(addr(kind::SEGMENT, 0x12), T).unwrap();
    assert!(matches!(s.trigger(), Err(Error::IllegalOperation(_))));
    assert!(matches!(s.send(b"x", T, Duration::ZERO), Err(Error::IllegalOperation(_))));
}

/// Messages of one connection arrive whole and in order, however senders interleave; a
/// full queue waits and then refuses, sending nothing.
fn data_interrupt_order_per_sender<R: Rig>(rig: &R) {
    let ld = rig.owner().create_data_interrupt(None).unwrap();
    let a = addr(kind::DATA_INTERRUPT, ld.number());
    let senders = [rig.peer().connect(a, T).unwrap(), rig.peer().connect(a, T).unwrap()];
    let per = 12u32; // below one ring's capacity, so nothing waits
    for k in 0..per {
        for (s, conn) in senders.iter().enumerate() {
            let len = 8 + (k as usize * 131 + s * 7) % (MAX_DATA_INTERRUPT_PAYLOAD - 8);
            let mut msg = vec![s as u8 ^ k as u8; len];
            msg[..4].copy_from_slice(&(s as u32).to_le_bytes());
            msg[4..8].copy_from_slice(&k.to_le_bytes());
            conn.send(&msg, T, Duration::ZERO).unwrap();
        }
    }
    let mut next = [0u32; 2];
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    for _ in 0..2 * per {
        let len = ld.wait(&mut buf, T).unwrap();
        let s = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
        let k = u32::from_le_bytes(buf[4..8].try_into().unwrap());
        assert_eq!(k, next[s], "sender {s}: in order");
        next[s] += 1;
        assert_eq!(len, 8 + (k as usize * 131 + s * 7) % (MAX_DATA_INTERRUPT_PAYLOAD - 8));
        assert!(buf[8..len].iter().all(|&b| b == s as u8 ^ k as u8), "sender {s}, message {k}: whole");
    }
    assert!(matches!(ld.wait(&mut buf, Timeout::Immediate), Err(Error::Timeout { .. })));
    let too_long = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD + 1];
    assert!(matches!(senders[0].send(&too_long, T, Duration::ZERO), Err(Error::PayloadTooLarge { .. })));

    // Fill one sender's queue: the next send waits its timeout, then refuses.
    let mut sent = 0u32;
    let started = Instant::now();
    let full = loop {
        match senders[0].send(&sent.to_le_bytes(), Timeout::After(Duration::from_millis(50)), Duration::ZERO) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
        assert!(sent < 10_000, "a queue that never fills");
    };
    assert!(matches!(full, Error::QueueFull { .. }), "{full:?}");
    assert!(started.elapsed() >= Duration::from_millis(50));
    for k in 0..sent {
        let len = ld.wait(&mut buf, T).unwrap();
        assert_eq!(&buf[..len], &k.to_le_bytes(), "nothing dropped, nothing half-sent");
    }
}

/// The owner's object going away is final for the connection, and wakes whoever waits on
/// its state; disconnecting is final too and frees the owner's slot.
fn loss_when_the_object_goes_away<R: Rig>(rig: &R) {
    let seg = rig.owner().create_segment(0x13, 4096).unwrap();
    seg.prepare().unwrap();
    seg.set_available().unwrap();
    let r = rig.peer().connect(addr(kind::SEGMENT, 0x13), T).unwrap();
    let w = r.window(0, 4096, MapAccess::ReadWrite).unwrap();
    r.check().unwrap();
    seg.set_unavailable().unwrap();
    assert_eq!(r.state(), RemoteState::NotOperational);
    r.check().unwrap();
    seg.set_available().unwrap();
    assert_eq!(r.state(), RemoteState::Operational);

    // A waiter on the state doorbell wakes for the loss.
    let woke = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let lost = || matches!(r.state(), RemoteState::Lost(_)).then_some(());
            let res = r.state_bell().wait(lost, || None::<()>, Duration::ZERO, T.deadline());
            woke.store(res.is_ok(), Ordering::Release);
        });
        std::thread::sleep(Duration::from_millis(20));
        seg.remove(true).unwrap();
    });
    assert!(woke.load(Ordering::Acquire), "the state doorbell rang for the loss");
    assert_eq!(r.state(), RemoteState::Lost(LossReason::Removed));
    match r.check() {
        Err(Error::SegmentLost { node: OWNER, segment: 0x13, reason }) => {
            assert!(reason.contains("removed"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // The window stays memory: reading it does not fault.
    let mut b = [0u8; 8];
    read_window(&w, 0, &mut b);

    // A removed interrupt refuses triggers.
    let li = rig.owner().create_interrupt(None).unwrap();
    let ri = rig.peer().connect(addr(kind::INTERRUPT, li.number()), T).unwrap();
    ri.trigger().unwrap();
    li.remove().unwrap();
    assert!(matches!(ri.trigger(), Err(Error::SegmentLost { .. })));

    // Disconnecting: final, and the owner's slot is free again.
    let seg = rig.owner().create_segment(0x14, 4096).unwrap();
    seg.prepare().unwrap();
    seg.set_available().unwrap();
    let r = rig.peer().connect(addr(kind::SEGMENT, 0x14), T).unwrap();
    assert_eq!(seg.connected_peers().len(), 1);
    r.disconnect();
    assert_eq!(r.state(), RemoteState::Lost(LossReason::Disconnected));
    assert!(seg.connected_peers().is_empty());
    // The loss reason that came first stays.
    seg.remove(true).unwrap();
    assert_eq!(r.state(), RemoteState::Lost(LossReason::Disconnected));
}

/// One `#[test]` per case of the suite, for the rig `$rig` (an expression of a [`Rig`]
/// built from the case name).
macro_rules! conformance {
    ($module:ident, $rig:path) => {
        mod $module {
            use super::*;
            conformance!(@cases $rig; bounds, writes_visible_after_flush_and_read_through, trigger_counts,
                data_interrupt_order_per_sender, loss_when_the_object_goes_away);
        }
    };
    (@cases $rig:path; $($case:ident),*) => {
        $(
            #[test]
            fn $case() {
                super::$case(&$rig(stringify!($case)));
            }
        )*
    };
}

/// Two nodes on one fabric directory: the shm transport.
struct ShmRig {
    dir: std::path::PathBuf,
    owner: Fabric,
    peer: Fabric,
}

impl ShmRig {
    fn new(case: &str) -> ShmRig {
        let dir = std::env::temp_dir().join(format!("lanes-transport-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let open = |node| Fabric::open_with(FabricConfig::new(&dir, NodeId::new(node).unwrap())).unwrap();
        ShmRig { owner: open(OWNER), peer: open(8), dir }
    }
}

impl Drop for ShmRig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Rig for ShmRig {
    type T = lanes::transport::shm::remote::ShmTransport;

    fn owner(&self) -> &Fabric {
        &self.owner
    }

    fn peer(&self) -> &Self::T {
        self.peer.shm_transport()
    }
}

conformance!(shm, ShmRig::new);
