//! In-process checks of interrupts, data interrupts and events: two `Fabric`s acting as two
//! nodes in one process, talking across threads. The multi-process suites live in tests/.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::*;
use crate::config::{FabricConfig, NodeId};
use crate::error::Error;

struct TwoNodes {
    dir: std::path::PathBuf,
    a: Fabric,
    b: Fabric,
}

impl TwoNodes {
    fn new(name: &str) -> TwoNodes {
        let dir = std::env::temp_dir().join(format!("lanes-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(4).unwrap())).unwrap();
        let b = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(8).unwrap())).unwrap();
        TwoNodes { dir, a, b }
    }
}

impl Drop for TwoNodes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const T: Timeout = Timeout::After(Duration::from_secs(10));

#[test]
fn interrupt_triggers_are_counted_and_none_is_lost() {
    let n = TwoNodes::new("int");
    let li = n.a.create_interrupt(None).unwrap();
    let ri = n.b.connect_interrupt(4, li.number(), T).unwrap();
    // Triggers while nobody waits are kept, one wait each.
    for _ in 0..3 {
        ri.trigger().unwrap();
    }
    assert_eq!(li.pending(), 3);
    for _ in 0..3 {
        li.wait(Timeout::Immediate).unwrap();
    }
    assert!(matches!(li.wait(Timeout::Immediate), Err(Error::Timeout { .. })));
    // A sleeping waiter (no spin) is woken by every trigger.
    li.set_poll_time(Duration::ZERO);
    let count = 20_000;
    let t = std::thread::spawn(move || {
        for _ in 0..count {
            ri.trigger().unwrap();
        }
        ri
    });
    for _ in 0..count {
        li.wait(T).unwrap();
    }
    let ri = t.join().unwrap();
    assert_eq!(li.pending(), 0);
    // Removal: triggers fail, waiters get an error.
    li.remove().unwrap();
    assert!(matches!(ri.trigger(), Err(Error::InterruptLost { .. })));
    assert!(matches!(li.wait(Timeout::Immediate), Err(Error::InterruptRemoved { .. })));
    assert!(matches!(n.b.connect_interrupt(4, li.number(), Timeout::Immediate), Err(Error::NoSuchInterrupt { .. })));
}

#[test]
fn interrupt_removal_wakes_a_sleeping_waiter() {
    let n = TwoNodes::new("intrm");
    let li = Arc::new(n.a.create_interrupt(Some(7)).unwrap());
    assert!(matches!(n.a.create_interrupt(Some(7)), Err(Error::InterruptNumberInUse { .. })));
    li.set_poll_time(Duration::ZERO);
    let l2 = li.clone();
    let t = std::thread::spawn(move || l2.wait(Timeout::Infinite));
    std::thread::sleep(Duration::from_millis(50));
    li.remove().unwrap();
    let r = t.join().unwrap();
    assert!(matches!(r, Err(Error::InterruptRemoved { number: 7 })), "{r:?}");
}

#[test]
fn interrupt_callback_runs_per_trigger_and_cancels_itself() {
    let n = TwoNodes::new("intcb");
    let li = n.a.create_interrupt(None).unwrap();
    let ri = n.b.connect_interrupt(4, li.number(), T).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let (tx, rx) = mpsc::channel();
    li.on_trigger(move || {
        let k = c.fetch_add(1, Ordering::SeqCst) + 1;
        if k == 5 {
            tx.send(()).unwrap();
            CallbackAction::Cancel
        } else {
            CallbackAction::Continue
        }
    })
    .unwrap();
    for _ in 0..8 {
        ri.trigger().unwrap();
    }
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(calls.load(Ordering::SeqCst), 5, "cancelled after the fifth");
    assert_eq!(li.pending(), 3, "the rest stay queued");
}

#[test]
fn data_interrupts_arrive_whole_in_order_and_full_queues_fail_clearly() {
    let n = TwoNodes::new("dint");
    let ld = n.a.create_data_interrupt(None).unwrap();
    let rd = n.b.connect_data_interrupt(4, ld.number(), T).unwrap();
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    for len in [0usize, 1, 100, 4096] {
        let msg: Vec<u8> = (0..len).map(|i| (i * 31 + len) as u8).collect();
        rd.trigger(&msg, T).unwrap();
        let got = ld.wait(&mut buf, T).unwrap();
        assert_eq!(&buf[..got], &msg[..]);
    }
    assert!(matches!(rd.trigger(&[0; 4097], T), Err(Error::PayloadTooLarge { .. })));
    // Too small a buffer keeps the message.
    rd.trigger(b"hello world", T).unwrap();
    let mut small = [0u8; 4];
    assert!(matches!(ld.wait(&mut small, T), Err(Error::BufferTooSmall { needed: 11, given: 4 })));
    assert_eq!(ld.wait(&mut buf, T).unwrap(), 11);
    // A full queue: the trigger waits up to its timeout, then fails; nothing is dropped.
    for i in 0..crate::transport::shm::data_interrupt::RING_CAP {
        rd.trigger(&i.to_le_bytes(), T).unwrap();
    }
    let t0 = Instant::now();
    let r = rd.trigger(b"x", Timeout::After(Duration::from_millis(100)));
    assert!(matches!(r, Err(Error::QueueFull { .. })), "{r:?}");
    assert!(t0.elapsed() >= Duration::from_millis(100));
    for i in 0..crate::transport::shm::data_interrupt::RING_CAP {
        let got = ld.wait(&mut buf, T).unwrap();
        assert_eq!(&buf[..got], &i.to_le_bytes(), "in order");
    }
    // A sender blocked on a full queue is released by room.
    for i in 0..crate::transport::shm::data_interrupt::RING_CAP {
        rd.trigger(&i.to_le_bytes(), T).unwrap();
    }
    let t = std::thread::spawn(move || {
        rd.trigger(b"late", T).unwrap();
        rd
    });
    std::thread::sleep(Duration::from_millis(30));
    let mut seen = Vec::new();
    for _ in 0..=crate::transport::shm::data_interrupt::RING_CAP {
        let got = ld.wait(&mut buf, T).unwrap();
        seen.push(buf[..got].to_vec());
    }
    assert_eq!(seen.last().unwrap(), b"late");
    let rd = t.join().unwrap();
    ld.remove().unwrap();
    assert!(matches!(rd.trigger(b"x", T), Err(Error::InterruptLost { .. })));
}

#[test]
fn several_senders_with_checksums() {
    let n = TwoNodes::new("dintmany");
    let ld = n.a.create_data_interrupt(Some(3)).unwrap();
    let per = 2000u32;
    let mut senders = Vec::new();
    for s in 0..3u32 {
        let f = n.b.clone();
        senders.push(std::thread::spawn(move || {
            let rd = f.connect_data_interrupt(4, 3, T).unwrap();
            for k in 0..per {
                let len = 8 + ((k * 37 + s) % 500) as usize;
                let mut msg = vec![0u8; len];
                msg[..4].copy_from_slice(&s.to_le_bytes());
                msg[4..8].copy_from_slice(&k.to_le_bytes());
                for (i, b) in msg[8..].iter_mut().enumerate() {
                    *b = (i as u32 ^ k ^ s) as u8;
                }
                rd.trigger(&msg, T).unwrap();
            }
        }));
    }
    let mut next = [0u32; 3];
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    for _ in 0..3 * per {
        let len = ld.wait(&mut buf, T).unwrap();
        let s = u32::from_le_bytes(buf[..4].try_into().unwrap());
        let k = u32::from_le_bytes(buf[4..8].try_into().unwrap());
        assert_eq!(k, next[s as usize], "in order per sender");
        next[s as usize] += 1;
        assert_eq!(len, 8 + ((k * 37 + s) % 500) as usize);
        assert!(buf[8..len].iter().enumerate().all(|(i, &b)| b == (i as u32 ^ k ^ s) as u8), "checksum");
    }
    for t in senders {
        t.join().unwrap();
    }
    assert_eq!(next, [per; 3]);
}

#[test]
fn segment_events_report_connect_disconnect_and_availability() {
    let n = TwoNodes::new("events");
    let seg = n.a.create_segment(1, 4096).unwrap();
    seg.prepare().unwrap();
    seg.set_available().unwrap();
    let r = n.b.connect_segment(4, 1, T).unwrap();
    assert_eq!(seg.wait_event(T).unwrap(), LocalEvent::Connected { node: 8, pid: std::process::id() });
    seg.set_unavailable().unwrap();
    assert_eq!(r.wait_event(T).unwrap(), RemoteEvent::NotOperational);
    seg.set_available().unwrap();
    assert_eq!(r.wait_event(T).unwrap(), RemoteEvent::Operational);
    assert!(matches!(r.wait_event(Timeout::After(Duration::from_millis(20))), Err(Error::Timeout { .. })));
    let (tx, rx) = mpsc::channel();
    r.on_event(move |ev| {
        tx.send(ev).unwrap();
        CallbackAction::Continue
    })
    .unwrap();
    drop(r);
    assert_eq!(seg.wait_event(T).unwrap(), LocalEvent::Disconnected { node: 8, pid: std::process::id(), died: false });
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "no callback after disconnect");
    // Removal is reported to a connected peer as lost.
    let r = n.b.connect_segment(4, 1, T).unwrap();
    seg.remove(true).unwrap();
    assert_eq!(r.wait_event(T).unwrap(), RemoteEvent::Lost(LossReason::Removed));
    assert!(r.wait_event(Timeout::Immediate).is_err());
}

fn dma_pair(n: &TwoNodes, size: u64) -> (LocalSegment, LocalSegment, RemoteSegment) {
    let theirs = n.b.create_segment(0x44, size).unwrap();
    theirs.prepare().unwrap();
    theirs.set_available().unwrap();
    let mine = n.a.create_segment(0x45, size).unwrap();
    let remote = n.a.connect_segment(8, 0x44, T).unwrap();
    (mine, theirs, remote)
}

fn fill(seg: &LocalSegment, seed: u32) {
    let m = seg.map(0, seg.size(), MapAccess::ReadWrite).unwrap();
    let data: Vec<u8> = (0..seg.size() as u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 ^ seed as u8).collect();
    m.write_bytes(0, &data).unwrap();
}

fn bytes(seg: &LocalSegment, off: u64, len: usize) -> Vec<u8> {
    let m = seg.map(0, seg.size(), MapAccess::ReadOnly).unwrap();
    let mut v = vec![0u8; len];
    m.read_bytes(off as usize, &mut v).unwrap();
    v
}

#[test]
fn dma_moves_checksummed_data_both_ways_and_in_vectors() {
    let n = TwoNodes::new("dma");
    let (mine, theirs, remote) = dma_pair(&n, 3 << 20);
    fill(&mine, 1);
    fill(&theirs, 2);
    let mut q = n.a.create_dma_queue(64).unwrap();
    assert_eq!(q.state(), DmaQueueState::Idle);
    // Writes at odd offsets and sizes, from 1 byte to past the non-temporal threshold.
    for (lo, size, ro) in [(1u64, 1u64, 3u64), (5, 63, 1001), (4096, 4096, 7), (17, (1 << 20) + 13, 1 << 20)] {
        q.start(&mine, &remote, lo, size, ro, DmaDirection::Write, None).unwrap();
        assert_eq!(q.wait(T).unwrap(), DmaQueueState::Done);
        assert_eq!(bytes(&theirs, ro, size as usize), bytes(&mine, lo, size as usize), "write {lo} {size} {ro}");
    }
    // A read.
    q.start(&mine, &remote, 100, 5000, 2 << 20, DmaDirection::Read, None).unwrap();
    q.wait(T).unwrap();
    assert_eq!(bytes(&mine, 100, 5000), bytes(&theirs, 2 << 20, 5000));
    // A vector of scattered and contiguous entries, merged or not, gives the same bytes.
    for merge in [false, true] {
        fill(&mine, 3 + merge as u32);
        q.set_batching(if merge { 256 } else { 1 }, merge);
        let vec: Vec<DmaVec> = (0..40u64)
            .map(|i| DmaVec { size: 64 + i * 7, local_offset: i * 10_000 + 3, remote_offset: i * 10_000 + 9 })
            .chain((0..20u64).map(|i| DmaVec {
                size: 100,
                local_offset: 800_000 + i * 100,
                remote_offset: 900_000 + i * 100,
            }))
            .collect();
        q.start_vec(&mine, &remote, &vec, DmaDirection::Write, None).unwrap();
        q.wait(T).unwrap();
        for v in &vec {
            assert_eq!(bytes(&theirs, v.remote_offset, v.size as usize), bytes(&mine, v.local_offset, v.size as usize));
        }
    }
    // From and to ordinary memory.
    let mut buf: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    // SAFETY: buf lives and is untouched until the wait returns.
    unsafe { q.start_memory(buf.as_mut_ptr(), &remote, 10_000, 77, DmaDirection::Write, None).unwrap() };
    q.wait(T).unwrap();
    assert_eq!(bytes(&theirs, 77, 10_000), buf);
    let mut back = vec![0u8; 10_000];
    // SAFETY: as above.
    unsafe { q.start_memory(back.as_mut_ptr(), &remote, 10_000, 77, DmaDirection::Read, None).unwrap() };
    q.wait(T).unwrap();
    assert_eq!(back, buf);
}

#[test]
fn dma_rejects_bad_transfers_whole_and_reports_completion() {
    let n = TwoNodes::new("dmaerr");
    let (mine, _theirs, remote) = dma_pair(&n, 1 << 16);
    let mut q = n.a.create_dma_queue(4).unwrap();
    let size = 1 << 16;
    assert!(matches!(q.start(&mine, &remote, 1, size, 0, DmaDirection::Write, None), Err(Error::OutOfRange { .. })));
    assert!(matches!(
        q.start(&mine, &remote, 0, 10, size - 9, DmaDirection::Write, None),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(q.start(&mine, &remote, 0, 0, 0, DmaDirection::Write, None), Err(Error::InvalidSize { .. })));
    let five: Vec<DmaVec> = (0..5).map(|i| DmaVec { size: 8, local_offset: i * 8, remote_offset: i * 8 }).collect();
    assert!(matches!(q.start_vec(&mine, &remote, &five, DmaDirection::Write, None), Err(Error::TooManyEntries { .. })));
    let mut bad = five[..3].to_vec();
    bad.push(DmaVec { size: 8, local_offset: size, remote_offset: 0 });
    assert!(q.start_vec(&mine, &remote, &bad, DmaDirection::Write, None).is_err());
    assert_eq!(q.state(), DmaQueueState::Idle, "a rejected vector queues nothing");
    // Callbacks, once per start call, with the final state.
    let (tx, rx) = mpsc::channel();
    for i in 0..3u64 {
        let tx = tx.clone();
        q.start(
            &mine,
            &remote,
            i * 100,
            100,
            i * 100,
            DmaDirection::Write,
            Some(Box::new(move |s| tx.send((i, s)).unwrap())),
        )
        .unwrap();
    }
    for i in 0..3 {
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), (i, DmaQueueState::Done));
    }
    // The automatic path choice.
    q.set_pio_threshold(4096);
    assert_eq!(q.copy(&mine, &remote, 0, 4095, 0, DmaDirection::Write).unwrap(), CopyPath::Pio);
    assert_eq!(q.copy(&mine, &remote, 0, 4096, 0, DmaDirection::Read).unwrap(), CopyPath::Dma);
    // A lost peer puts the queue in error; nothing hangs.
    drop(_theirs);
    let r = q.start(&mine, &remote, 0, 8, 0, DmaDirection::Write, None);
    assert!(matches!(r, Err(Error::SegmentLost { .. })), "{r:?}");
}

#[test]
fn dma_abort_and_peer_loss_mid_transfer() {
    let n = TwoNodes::new("dmaabort");
    let (mine, theirs, remote) = dma_pair(&n, 64 << 20);
    let mut q = n.a.create_dma_queue(1024).unwrap();
    q.set_batching(1, false);
    let vec: Vec<DmaVec> =
        (0..1000u64).map(|i| DmaVec { size: 64 << 10, local_offset: (i % 900) * 65536, remote_offset: 0 }).collect();
    q.start_vec(&mine, &remote, &vec, DmaDirection::Write, None).unwrap();
    q.abort();
    let s = q.wait(T).unwrap();
    assert!(matches!(s, DmaQueueState::Aborted | DmaQueueState::Done), "{s:?}");
    // The queue works again after an abort.
    q.start(&mine, &remote, 0, 8, 0, DmaDirection::Write, None).unwrap();
    assert_eq!(q.wait(T).unwrap(), DmaQueueState::Done);
    // The remote owner removes its segment while transfers are queued: error, not a hang.
    q.start_vec(&mine, &remote, &vec, DmaDirection::Write, None).unwrap();
    theirs.remove(true).unwrap();
    match q.wait(T) {
        Err(Error::DmaFailed { reason }) => assert!(reason.contains("removed"), "{reason}"),
        Ok(DmaQueueState::Done) => {} // the engine finished before the removal
        other => panic!("{other:?}"),
    }
}
