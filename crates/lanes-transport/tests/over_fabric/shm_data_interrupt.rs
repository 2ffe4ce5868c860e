use std::sync::atomic::Ordering;

use lanes::config::{FabricConfig, NodeId};
use lanes::fabric::{Fabric, MapAccess};
use lanes::transport::shm::data_interrupt::*;
use lanes::transport::shm::layout::kind;
use lanes::transport::shm::layout::MAX_CONNECTIONS;
use lanes::transport::shm::remote::direct_mapping;
use lanes::transport::shm::segment_file::SegmentFile;
use lanes::transport::shm::FabricPaths;

const NODE: u32 = 4;

/// A data interrupt's rings (and the fabric and directory holding it).
fn rings(name: &str) -> (Rings, Fabric, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("lanes-unit-rings-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fabric = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(NODE).expect("node"))).expect("fabric");
    let ldi = fabric.create_data_interrupt(Some(1)).expect("data interrupt");
    let file = SegmentFile::open(&FabricPaths::new(&dir), kind::DATA_INTERRUPT, NODE, 1).expect("file");
    let rings = Rings::new(direct_mapping(&file, 0, OBJECT_BYTES, MapAccess::ReadWrite).expect("map"));
    std::mem::forget(ldi);
    (rings, fabric, dir)
}

/// What a remote sender that publishes by sequence word leaves: entry `n`'s sequence word.
fn place(r: &Rings, slot: usize, n: u64) {
    r.word64(Rings::entry(slot, n) + ENTRY_SEQ).store(n + 1, Ordering::SeqCst);
}

fn words(r: &Rings, slot: usize) -> (u64, u64, u32) {
    let base = Rings::ring(slot);
    (
        r.word64(base + RING_TAIL).load(Ordering::SeqCst),
        r.word64(base + RING_HEAD).load(Ordering::SeqCst),
        r.word32(BELL_SEQ).load(Ordering::SeqCst),
    )
}

#[test]
fn arrivals_move_the_recorded_tail_and_ring_only_when_an_entry_was_passed() {
    let (r, _fabric, dir) = rings("arrivals");
    let slot = 3;
    assert_eq!(r.settle(slot), (0, 0));
    r.advance_recorded_tails();
    assert_eq!(words(&r, slot), (0, 0, 0), "nothing arrived: nothing moved, nothing rung");
    place(&r, slot, 0);
    place(&r, slot, 1);
    place(&r, slot, 3);
    r.advance_recorded_tails();
    assert_eq!(words(&r, slot), (2, 0, 1), "past the contiguous entries, one ring");
    r.advance_recorded_tails();
    assert_eq!(words(&r, slot).2, 1, "no new entry, no ring");
    place(&r, slot, 2);
    r.advance_recorded_tails();
    assert_eq!(words(&r, slot), (4, 0, 2));
    // The receiver took everything and more arrived; a tail left behind the head (a
    // sender that does not record it) counts from the head.
    let base = Rings::ring(slot);
    r.word64(base + RING_HEAD).store(20, Ordering::SeqCst);
    r.advance_recorded_tails();
    assert_eq!(words(&r, slot), (20, 20, 2), "up to the head, passing no entry: no ring");
    place(&r, slot, 20);
    r.advance_recorded_tails();
    assert_eq!(words(&r, slot), (21, 20, 3));
    // A full ring: at most RING_CAP beyond the head.
    for n in 21..20 + RING_CAP {
        place(&r, slot, n);
    }
    r.advance_recorded_tails();
    assert_eq!(words(&r, slot).0, 20 + RING_CAP);
    // Bits past the last slot (memory peers can write) name no ring: nothing is looked
    // at outside the object (a debug build would panic on the word's bounds).
    r.word64(ACTIVE_MASK + 8).fetch_or(u64::MAX << (MAX_CONNECTIONS - 64), Ordering::SeqCst);
    r.advance_recorded_tails();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn settling_counts_from_the_head_when_the_recorded_tail_is_not_within_a_ring_of_it() {
    let (r, _fabric, dir) = rings("settle");
    let slot = 70;
    let base = Rings::ring(slot);
    for (recorded, what) in [(3u64, "behind the head"), (1_000_000, "far ahead: damaged")] {
        r.word64(base + RING_HEAD).store(20, Ordering::SeqCst);
        r.word64(base + RING_TAIL).store(recorded, Ordering::SeqCst);
        place(&r, slot, 20);
        place(&r, slot, 21);
        let rung = words(&r, slot).2;
        assert_eq!(r.settle(slot), (22, 20), "tail {what}");
        assert_ne!(words(&r, slot).2, rung, "settling past entries rings");
        assert_eq!(words(&r, slot).0, 22);
        r.word64(Rings::entry(slot, 20) + ENTRY_SEQ).store(0, Ordering::SeqCst);
        r.word64(Rings::entry(slot, 21) + ENTRY_SEQ).store(0, Ordering::SeqCst);
    }
    assert!(r.active_slots(0).any(|s| s == slot), "settling marks the ring active");
    let _ = std::fs::remove_dir_all(dir);
}
