//! DMA across processes: this test process is the node that queues transfers, a child
//! process owns the remote segment and checks what arrived.

mod support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use lanes::{DmaDirection, DmaQueueState, DmaVec, Error, Fabric, FabricConfig, MapAccess, NodeId, Timeout};
use support::{fnv64, pattern, Proc, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

const T: Timeout = Timeout::After(Duration::from_secs(10));

fn me(t: &Topology) -> Fabric {
    Fabric::open_with(FabricConfig::new(t.fabric(4), NodeId::new(4).unwrap())).unwrap()
}

fn dma_moves_checksummed_data_to_and_from_another_process(t: &Topology) {
    const SEG: u32 = 0x2001;
    const SIZE: u64 = 4 * 1024 * 1024 + 3;
    const REMOTE_SEED: u64 = 0xD3A;
    const LOCAL_SEED: u64 = 0x10CA1;
    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok(&format!("map m s 0 {SIZE} rw"));
    owner.ok(&format!("wpat m 0 {SIZE} {REMOTE_SEED} 0"));
    owner.ok("available s");

    // Transfers of 1 MiB and more take the non-temporal copy, whatever the cache size.
    lanes::platform::memory::set_nontemporal_threshold(1 << 20);
    let fabric = me(t);
    let local = fabric.create_segment(0x2002, SIZE).unwrap();
    let lmap = local.map(0, SIZE, MapAccess::ReadWrite).unwrap();
    lmap.write_bytes(0, &pattern(LOCAL_SEED, 0, SIZE as usize)).unwrap();
    let remote = fabric.connect_segment(8, SEG, T).unwrap();
    let mut q = fabric.create_dma_queue(256).unwrap();

    // Reads of the owner's pattern at odd offsets, including past the non-temporal threshold.
    for (lo, len, ro) in [(3u64, 1u64, 5u64), (1001, 4097, 77), (9, (1 << 20) + 11, 2 << 20)] {
        q.start(&local, &remote, lo, len, ro, DmaDirection::Read, None).unwrap();
        assert_eq!(q.wait(T).unwrap(), DmaQueueState::Done);
        let mut got = vec![0u8; len as usize];
        lmap.read_bytes(lo as usize, &mut got).unwrap();
        assert!(got == pattern(REMOTE_SEED, ro, len as usize), "read {lo}+{len} from {ro}");
    }
    // Writes of our pattern as a vector of scattered entries; the owner checks each range.
    lmap.write_bytes(0, &pattern(LOCAL_SEED, 0, SIZE as usize)).unwrap();
    let vec: Vec<DmaVec> = (0..50u64)
        .map(|i| DmaVec { size: 1 + i * 997, local_offset: i * 60_011 + 7, remote_offset: i * 80_021 + 13 })
        .collect();
    q.start_vec(&local, &remote, &vec, DmaDirection::Write, None).unwrap();
    assert_eq!(q.wait(T).unwrap(), DmaQueueState::Done);
    for v in &vec {
        let want = format!("{:016x}", fnv64(&pattern(LOCAL_SEED, v.local_offset, v.size as usize)));
        assert_eq!(owner.ok(&format!("sum m {} {}", v.remote_offset, v.size)), want, "{v:?}");
    }
    // The bytes around the written ranges are untouched.
    let first = &vec[1];
    let before = first.remote_offset - 1;
    let want = format!("{:016x}", fnv64(&pattern(REMOTE_SEED, before, 1)));
    assert_eq!(owner.ok(&format!("sum m {before} 1")), want);
    // Callbacks run when their transfers are done.
    let (tx, rx) = mpsc::channel();
    q.start(&local, &remote, 0, 4096, 0, DmaDirection::Write, Some(Box::new(move |s| tx.send(s).unwrap()))).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), DmaQueueState::Done);
    owner.exit();
}

fn the_owner_killed_mid_transfer_puts_the_queue_in_error_without_a_hang(t: &Topology) {
    const SEG: u32 = 0x2003;
    const SIZE: u64 = 64 << 20;
    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok("available s");
    let fabric = me(t);
    let local = fabric.create_segment(0x2004, SIZE).unwrap();
    let remote = fabric.connect_segment(8, SEG, T).unwrap();
    let mut q = fabric.create_dma_queue(1024).unwrap();
    q.set_batching(1, false);
    let chunk: Vec<DmaVec> =
        (0..256u64).map(|i| DmaVec { size: 256 << 10, local_offset: i * (256 << 10), remote_offset: 0 }).collect();
    q.start_vec(&local, &remote, &chunk, DmaDirection::Write, None).unwrap();
    owner.kill9();
    let killed = Instant::now();
    // Keep queueing until the loss shows: as a refused start or as a failed queue.
    let outcome = loop {
        assert!(killed.elapsed() < Duration::from_secs(2), "the loss was not noticed within 2 s");
        match q.wait(T) {
            Err(Error::DmaFailed { reason }) => break format!("failed: {reason}"),
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => {}
        }
        match q.start_vec(&local, &remote, &chunk, DmaDirection::Write, None) {
            Err(Error::SegmentLost { .. }) => break "refused".to_string(),
            Err(e) => panic!("unexpected {e}"),
            Ok(()) => {}
        }
    };
    println!("owner death noticed after {:?}: {outcome}", killed.elapsed());
    assert!(outcome.contains("died") || outcome == "refused", "{outcome}");
    // Nothing hangs afterwards either.
    assert!(q.start(&local, &remote, 0, 8, 0, DmaDirection::Write, None).is_err());
    assert!(matches!(q.state(), DmaQueueState::Done | DmaQueueState::Error));
}

support::topology_cases!(
    dma_moves_checksummed_data_to_and_from_another_process,
    the_owner_killed_mid_transfer_puts_the_queue_in_error_without_a_hang,
);
