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
    for i in 0..data_interrupt::RING_CAP {
        rd.trigger(&i.to_le_bytes(), T).unwrap();
    }
    let t0 = Instant::now();
    let r = rd.trigger(b"x", Timeout::After(Duration::from_millis(100)));
    assert!(matches!(r, Err(Error::QueueFull { .. })), "{r:?}");
    assert!(t0.elapsed() >= Duration::from_millis(100));
    for i in 0..data_interrupt::RING_CAP {
        let got = ld.wait(&mut buf, T).unwrap();
        assert_eq!(&buf[..got], &i.to_le_bytes(), "in order");
    }
    // A sender blocked on a full queue is released by room.
    for i in 0..data_interrupt::RING_CAP {
        rd.trigger(&i.to_le_bytes(), T).unwrap();
    }
    let t = std::thread::spawn(move || {
        rd.trigger(b"late", T).unwrap();
        rd
    });
    std::thread::sleep(Duration::from_millis(30));
    let mut seen = Vec::new();
    for _ in 0..=data_interrupt::RING_CAP {
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
