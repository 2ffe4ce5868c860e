//! Owners and peers that die or leave: kill -9 of an owner, removal with and without
//! connected peers, and `lanes::status` / `lanes::cleanup` of what dead processes left.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use lanes::FabricStatus;
use support::{fnv64, pattern, Proc, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

fn segment(st: &FabricStatus, node: u32, id: u32) -> Option<&lanes::fabric::SegmentStatus> {
    st.segments.iter().find(|s| s.node == node && s.id == id)
}

/// The status of the fabric directory of the owner (node 8), where its files are.
fn status(t: &Topology) -> FabricStatus {
    lanes::status(&t.fabric(8)).expect("lanes::status")
}

fn kill_9_of_an_owner_is_noticed_and_its_leftovers_are_replaced_and_cleaned(t: &Topology) {
    const SEG: u32 = 0x40;
    const STALE: u32 = 0x41;
    const SIZE: u64 = 64 * 1024 + 13;
    const SEED: u64 = 7;

    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok("available s");
    owner.ok(&format!("map m s 0 {SIZE} rw"));
    owner.ok(&format!("wpat m 0 {SIZE} {SEED} 0"));
    owner.ok("w64 m 4096 12345");
    // A second segment that nobody re-creates: it stays behind as a stale segment.
    owner.ok(&format!("create s2 {STALE} 4096"));
    owner.ok("prepare s2");
    owner.ok("available s2");
    let old_pid = owner.pid();

    let mut peer = Proc::node(t, 12);
    peer.ok(&format!("connect r 8 {SEG} imm"));
    peer.ok(&format!("map m r 0 {SIZE} rw"));
    peer.ok("seq q m");
    assert_eq!(peer.ok("seqstart q"), "Ok");
    assert_eq!(peer.ok("seqcheck q"), "Ok");
    assert_eq!(peer.ok("state r"), "Operational");
    let seen = t.seen_pid(8, 12, peer.pid());
    assert_eq!(owner.ok("peers s"), format!("12:{seen}"));

    let st = status(t);
    let s = segment(&st, 8, SEG).expect("segment listed");
    assert!(s.alive, "{s:?}");
    assert_eq!(s.owner_pid, old_pid);
    assert_eq!(s.connections, vec![(12, seen)]);

    // The peer polls its sequence while the owner is killed.
    peer.start("waitlost q 10000");
    let killed_at = Instant::now();
    let exit = owner.kill9();
    assert_eq!(exit.signal(), Some(libc::SIGKILL), "{exit:?}");
    let waited = peer.finish("waitlost q 10000").unwrap_or_else(|e| panic!("the peer never saw the death: {e}"));
    let noticed = killed_at.elapsed();
    assert!(noticed < Duration::from_secs(2), "the peer took {noticed:?} to notice (child says {waited} ms)");

    assert_eq!(peer.ok("state r"), "Lost(OwnerDied)");
    assert_eq!(peer.ok("seqstart q"), "NotRetriable");
    assert_eq!(peer.ok("seqcheck q"), "NotRetriable");
    let e = peer.err_is("check r", "SegmentLost");
    assert!(e.display.contains("owner died"), "{e}");
    peer.err_is("map m2 r 0 8 ro", "SegmentLost");
    // The map stays readable (no SIGBUS) and holds the last data the owner wrote.
    let mut expected = pattern(SEED, 0, SIZE as usize);
    expected[4096..4104].copy_from_slice(&12345u64.to_le_bytes());
    assert_eq!(peer.ok("r64 m 4096"), "12345");
    assert_eq!(peer.ok(&format!("sum m 0 {SIZE}")), format!("{:016x}", fnv64(&expected)));
    // A new connection finds nothing usable.
    peer.err_is(&format!("connect r2 8 {SEG} imm"), "NoSuchSegment");
    let e = peer.err_is(&format!("connect r2 8 {SEG} 100"), "Timeout");
    assert!(e.display.contains("no segment"), "{e}");

    // status: both segments are there but not alive; the dead owner's record is stale.
    let st = status(t);
    for id in [SEG, STALE] {
        let s = segment(&st, 8, id).unwrap_or_else(|| panic!("segment {id:#x} not listed: {st:?}"));
        assert!(!s.alive, "{s:?}");
        assert_eq!(s.owner_pid, old_pid);
        assert!(s.corrupt.is_none(), "{s:?}");
    }
    let n8 = st.nodes.iter().find(|n| n.node == 8).expect("node 8 listed");
    assert!(n8.pids.is_empty(), "{n8:?}");
    assert_eq!(n8.stale_records, 1, "{n8:?}");
    assert!(t.record_path(8, old_pid).exists());

    // A new process of node 8 re-creates the id: the stale segment is replaced, and a peer
    // that was waiting for the id gets the new segment.
    let waiting = format!("connect r3 8 {SEG} 10000");
    peer.start(&waiting);
    let mut owner2 = Proc::node(t, 8);
    owner2.ok(&format!("create s {SEG} {SIZE}"));
    owner2.ok("prepare s");
    owner2.ok("available s");
    assert_eq!(
        peer.finish(&waiting).unwrap_or_else(|e| panic!("{waiting}: {e}")),
        format!("node=8 id={SEG} size={SIZE}")
    );
    assert_eq!(peer.ok("state r3"), "Operational");
    peer.ok("disconnect r3");
    owner2.ok(&format!("map m s 0 {SIZE} rw"));
    owner2.ok("w64 m 4096 777");
    let st = status(t);
    let s = segment(&st, 8, SEG).expect("re-created segment listed");
    assert!(s.alive && s.owner_pid == owner2.pid(), "{s:?}");
    // The old connection is still lost and still sees the old data; a new one sees the new.
    assert_eq!(peer.ok("state r"), "Lost(OwnerDied)");
    assert_eq!(peer.ok("r64 m 4096"), "12345");
    peer.ok(&format!("connect r2 8 {SEG} imm"));
    peer.ok(&format!("map m2 r2 0 {SIZE} ro"));
    assert_eq!(peer.ok("r64 m2 4096"), "777");
    assert_eq!(peer.ok("r64 m2 0"), "0");
    assert_eq!(peer.ok("state r2"), "Operational");

    // cleanup removes the stale segment and the dead owner's record, nothing else.
    let report = lanes::cleanup(&t.fabric(8)).expect("cleanup");
    assert_eq!(report.segments.len(), 1, "{report:?}");
    assert_eq!((report.segments[0].0, report.segments[0].1), (8, STALE), "{report:?}");
    assert!(report.segments[0].2.contains("dead"), "{report:?}");
    assert_eq!(report.records, vec![(8, old_pid)]);
    assert!(!t.seg_path(8, STALE).exists());
    assert!(!t.record_path(8, old_pid).exists());
    assert!(t.seg_path(8, SEG).exists());
    assert!(t.record_path(8, owner2.pid()).exists());
    assert!(t.record_path(12, peer.pid()).exists());
    let st = status(t);
    assert!(segment(&st, 8, STALE).is_none(), "{st:?}");
    assert!(segment(&st, 8, SEG).is_some_and(|s| s.alive), "{st:?}");
    assert!(st.nodes.iter().all(|n| n.stale_records == 0), "{st:?}");
    let again = lanes::cleanup(&t.fabric(8)).expect("cleanup");
    assert!(again.segments.is_empty() && again.records.is_empty(), "{again:?}");

    // The live segment is untouched.
    assert_eq!(peer.ok("state r2"), "Operational");
    owner2.ok("w64 m 4104 9");
    assert_eq!(peer.ok("r64 m2 4104"), "9");
    peer.exit();
    owner2.exit();
}

fn remove_is_refused_while_a_live_peer_is_connected(t: &Topology) {
    const SEG: u32 = 0x50;
    const SIZE: u64 = 8192;
    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok("available s");
    owner.ok(&format!("map m s 0 {SIZE} rw"));
    owner.ok(&format!("wpat m 0 {SIZE} 3 0"));

    let mut peer = Proc::node(t, 12);
    peer.ok(&format!("connect r 8 {SEG} imm"));
    peer.ok(&format!("map m r 0 {SIZE} ro"));
    peer.ok("seq q m");

    let e = owner.err_is("remove s 0", "SegmentBusy");
    assert!(e.debug.contains("connections: 1"), "{e}");
    // Refused means nothing happened: the peer is still connected, the segment still there.
    assert_eq!(peer.ok("state r"), "Operational");
    assert_eq!(peer.ok("seqcheck q"), "Ok");
    assert_eq!(owner.ok("peers s"), format!("12:{}", t.seen_pid(8, 12, peer.pid())));
    let st = status(t);
    let s = segment(&st, 8, SEG).expect("still listed");
    assert!(s.alive && s.state.contains("available"), "{s:?}");
    // ... and the owner's handle still works.
    owner.ok("unavailable s");
    assert_eq!(peer.ok("rwait r 2000"), "NotOperational");
    assert_eq!(peer.ok("seqcheck q"), "Ok");
    owner.ok("available s");
    assert_eq!(peer.ok("rwait r 2000"), "Operational");
    owner.err_is("remove s 0", "SegmentBusy");

    // Forced removal: the peer's sequence fails, its state says why, its map stays readable.
    // The owner's handle then refuses further use; removing again is harmless.
    owner.ok("remove_keep s 1");
    owner.err_is("map x s 0 8 ro", "IllegalOperation");
    owner.err_is("available s", "IllegalOperation");
    assert_eq!(owner.ok("r64 m 8"), u64::from_le_bytes(pattern(3, 8, 8).try_into().unwrap()).to_string());
    owner.ok("remove s 0");
    let waited = peer.ok("waitlost q 2000");
    assert!(!waited.is_empty());
    assert_eq!(peer.ok("state r"), "Lost(Removed)");
    assert_eq!(peer.ok("seqstart q"), "NotRetriable");
    let e = peer.err_is("check r", "SegmentLost");
    assert!(e.display.contains("removed"), "{e}");
    peer.ok(&format!("vpat m 0 {SIZE} 3 0"));
    assert!(!t.seg_path(8, SEG).exists());
    assert!(segment(&status(t), 8, SEG).is_none());
    peer.err_is(&format!("connect r2 8 {SEG} imm"), "NoSuchSegment");
    // The id is free again at once.
    owner.ok(&format!("create s {SEG} 4096"));
    assert_eq!(peer.ok("state r"), "Lost(Removed)");
    owner.ok("remove s 0");

    // After the peer disconnects, removal without force succeeds.
    owner.ok("create t 0x51 4096");
    owner.ok("prepare t");
    owner.ok("available t");
    peer.ok("connect rt 8 0x51 imm");
    owner.err_is("remove t 0", "SegmentBusy");
    peer.ok("disconnect rt");
    owner.ok("waitpeers t - 2000");
    owner.ok("remove t 0");
    assert!(!t.seg_path(8, 0x51).exists());

    // After the peer dies (kill -9, no disconnect), removal without force succeeds.
    owner.ok("create u 0x52 4096");
    owner.ok("prepare u");
    owner.ok("available u");
    let mut peer2 = Proc::node(t, 16);
    peer2.ok("connect ru 8 0x52 imm");
    peer2.ok("map mu ru 0 4096 rw");
    assert_eq!(owner.ok("peers u"), format!("16:{}", t.seen_pid(8, 16, peer2.pid())));
    owner.err_is("remove u 0", "SegmentBusy");
    peer2.kill9();
    owner.ok(&format!("waitpeers u - {}", t.bounds().notice.as_millis()));
    let st = status(t);
    assert!(segment(&st, 8, 0x52).is_some_and(|s| s.alive && s.connections.is_empty()), "{st:?}");
    owner.ok("remove u 0");
    assert!(!t.seg_path(8, 0x52).exists());

    peer.exit();
    owner.exit();
}

fn dropping_the_owner_handle_or_exiting_removes_the_segment(t: &Topology) {
    let mut owner = Proc::node(t, 8);
    let mut peer = Proc::node(t, 12);
    owner.ok("create s 0x60 4096");
    owner.ok("prepare s");
    owner.ok("available s");
    peer.ok("connect r 8 0x60 imm");
    peer.ok("map m r 0 4096 ro");
    peer.ok("seq q m");
    owner.ok("drop_local s");
    peer.ok("waitlost q 2000");
    assert_eq!(peer.ok("state r"), "Lost(Removed)");
    assert!(!t.seg_path(8, 0x60).exists());

    // A clean exit removes the segments and the process record.
    owner.ok("create s 0x61 4096");
    let pid = owner.pid();
    assert!(t.record_path(8, pid).exists());
    owner.exit();
    assert!(!t.seg_path(8, 0x61).exists());
    assert!(!t.record_path(8, pid).exists());
    peer.exit();
}

support::topology_cases!(
    kill_9_of_an_owner_is_noticed_and_its_leftovers_are_replaced_and_cleaned,
    remove_is_refused_while_a_live_peer_is_connected,
    dropping_the_owner_handle_or_exiting_removes_the_segment,
    ;
    ofi: kill_9_of_an_owner_is_noticed_and_its_leftovers_are_replaced_and_cleaned,
    remove_is_refused_while_a_live_peer_is_connected,
    dropping_the_owner_handle_or_exiting_removes_the_segment,
);
