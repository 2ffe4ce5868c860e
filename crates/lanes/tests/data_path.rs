//! Data moving between processes: a peer that waits for a segment and exchanges
//! checksummed data with its owner, segments shared by processes of one node, caller memory
//! registered as a segment, and a sparse 1 GiB segment.

mod support;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use support::{fnv64, pattern, Proc, TestDir, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

fn sum_of(bytes: &[u8]) -> String {
    format!("{:016x}", fnv64(bytes))
}

fn a_waiting_peer_and_the_owner_exchange_checksummed_data(t: &Topology) {
    const SEG: u32 = 0x1001;
    // Odd size, and large enough for copies above the 1 MiB non-temporal threshold.
    const SIZE: u64 = 3 * 1024 * 1024 + 4097;
    const SEED: u64 = 0xA11CE;
    const REPLY_SEED: u64 = 0xB0B;

    // The peer starts first and waits for a segment that does not exist yet.
    let mut peer = Proc::node(t, 12);
    assert!(!t.seg_path(8, SEG).exists());
    let connect = format!("connect r 8 {SEG} 10000");
    peer.start(&connect);
    std::thread::sleep(Duration::from_millis(100)); // let it poll a few times (not a bound)

    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok(&format!("map m s 0 {SIZE} rw"));
    owner.ok(&format!("wpat m 0 {SIZE} {SEED} 0"));
    owner.ok("rel64 m 0 0"); // the handshake word
    owner.ok("available s");
    assert_eq!(owner.ok("linfo s"), format!("id={SEG} size={SIZE} node=8 owner=true available=true"));

    let info = peer.finish(&connect).unwrap_or_else(|e| panic!("the waiting connect failed: {e}"));
    assert_eq!(info, format!("node=8 id={SEG} size={SIZE}"));
    assert_eq!(peer.ok("rinfo r"), info);
    assert_eq!(peer.ok("state r"), "Operational");
    assert_eq!(owner.ok("peers s"), format!("12:{}", t.seen_pid(8, 12, peer.pid())));
    assert_eq!(peer.ok(&format!("map m r 0 {SIZE} rw")), format!("len={SIZE} offset=0 writable=true"));

    let mut expected = pattern(SEED, 0, SIZE as usize);
    expected[..8].fill(0);
    assert_eq!(peer.ok(&format!("sum m 0 {SIZE}")), sum_of(&expected));
    // Windows at odd offsets and of odd sizes: each mapped on its own, and read at that
    // offset through the whole-segment map.
    for (off, len) in [
        (1u64, 1u64),
        (3, 4093),
        (4095, 2),
        (4097, 65537),
        (12345, 1_048_583),
        (1_000_003, 2_097_169),
        (SIZE - 3001, 3001),
        (SIZE - 1, 1),
    ] {
        let want = sum_of(&expected[off as usize..(off + len) as usize]);
        assert_eq!(peer.ok(&format!("map w r {off} {len} ro")), format!("len={len} offset={off} writable=false"));
        assert_eq!(peer.ok(&format!("sum w 0 {len}")), want, "window {off}+{len}");
        assert_eq!(peer.ok(&format!("sum m {off} {len}")), want, "bytes {off}+{len}");
        peer.ok("unmap w");
    }
    // Typed reads see the same bytes.
    let le = |off: usize, n: usize| expected[off..off + n].iter().rev().fold(0u64, |v, &b| (v << 8) | u64::from(b));
    assert_eq!(peer.ok("r8 m 12345"), le(12345, 1).to_string());
    assert_eq!(peer.ok("r16 m 4098"), le(4098, 2).to_string());
    assert_eq!(peer.ok("r32 m 65540"), le(65540, 4).to_string());
    assert_eq!(peer.ok("r64 m 1048576"), le(1048576, 8).to_string());
    assert_eq!(peer.ok("acq32 m 8"), le(8, 4).to_string());

    // The reply: odd offsets and sizes (one above the non-temporal threshold), then the
    // handshake word with a release store.
    peer.ok("seq q m");
    assert_eq!(peer.ok("seqstart q"), "Ok");
    let replies = [(9u64, 7u64), (4099, 5000), (1_500_001, 1_100_003), (SIZE - 2, 2)];
    for (off, len) in replies {
        peer.ok(&format!("wpat m {off} {len} {REPLY_SEED} {off}"));
        expected[off as usize..(off + len) as usize].copy_from_slice(&pattern(REPLY_SEED, off, len as usize));
    }
    peer.ok("w8 m 17 170");
    expected[17] = 170;
    peer.ok("w32 m 20000 3735928559");
    expected[20000..20004].copy_from_slice(&3735928559u32.to_le_bytes());
    peer.ok("rel64 m 0 1");
    expected[..8].copy_from_slice(&1u64.to_le_bytes());
    assert_eq!(peer.ok("seqcheck q"), "Ok");

    // The owner sees the reply once the handshake word flips.
    owner.ok("waitacq64 m 0 1 10000");
    for (off, len) in replies {
        owner.ok(&format!("vpat m {off} {len} {REPLY_SEED} {off}"));
    }
    assert_eq!(owner.ok(&format!("sum m 0 {SIZE}")), sum_of(&expected));
    assert_eq!(peer.ok(&format!("sum m 0 {SIZE}")), sum_of(&expected));
    owner.ok("map w s 4097 65537 ro");
    assert_eq!(owner.ok("sum w 0 65537"), sum_of(&expected[4097..4097 + 65537]));
    assert_eq!(owner.ok("r8 m 17"), "170");

    peer.exit();
    owner.exit();
}

// Single-host: several processes act as one node, which is one host by definition.
#[test]
fn processes_of_one_node_share_a_segment() {
    const SEG: u32 = 0x2001;
    const SIZE: u64 = 20000;
    let dir = TestDir::new("shared");
    let mut a = Proc::node(&dir, 8);
    let mut b = Proc::node(&dir, 8);
    let mut c = Proc::node(&dir, 12);
    a.ok(&format!("create s {SEG} {SIZE}"));
    a.ok("prepare s");
    a.ok(&format!("map m s 0 {SIZE} rw"));
    a.ok(&format!("wpat m 0 {SIZE} 5 0"));

    b.err_is(&format!("attach s {SEG}"), "IllegalOperation"); // not shared yet
    b.err_is("attach s 0x2002", "NoSuchSegment");
    a.ok("share s");
    c.err_is(&format!("attach s {SEG}"), "NoSuchSegment"); // node 12 has no such segment
    b.ok(&format!("attach s {SEG}"));
    assert_eq!(b.ok("linfo s"), format!("id={SEG} size={SIZE} node=8 owner=false available=false"));
    b.ok(&format!("map m s 0 {SIZE} rw"));
    b.ok(&format!("vpat m 0 {SIZE} 5 0"));
    b.ok("wpat m 1001 3333 6 1001");
    a.ok("vpat m 1001 3333 6 1001");
    a.ok("wpat m 17 9 7 17");
    b.ok("vpat m 17 9 7 17");

    // Only the owner controls the segment.
    for cmd in ["prepare s", "available s", "unavailable s", "share s"] {
        b.err_is(cmd, "IllegalOperation");
    }

    // A peer of another node sees what both wrote.
    a.ok("available s");
    c.ok(&format!("connect r 8 {SEG} imm"));
    c.ok(&format!("map m r 0 {SIZE} ro"));
    c.ok("vpat m 1001 3333 6 1001");
    c.ok("vpat m 17 9 7 17");
    assert_eq!(a.ok(&format!("sum m 0 {SIZE}")), c.ok(&format!("sum m 0 {SIZE}")));

    // Removing the attached handle only detaches, even with a peer connected.
    b.ok("remove s 0");
    assert!(dir.seg_path(8, SEG).exists());
    assert_eq!(c.ok("state r"), "Operational");
    assert!(lanes::status(&dir.fabric()).unwrap().segments.iter().any(|s| s.id == SEG && s.alive));
    b.ok(&format!("attach s2 {SEG}"));
    b.ok("w64 m 0 4242"); // b's earlier map outlives its detached handle
    assert_eq!(c.ok("r64 m 0"), "4242");

    // The owner's removal ends it for everyone.
    a.ok("remove s 1");
    assert_eq!(c.ok("state r"), "Lost(Removed)");
    b.err_is(&format!("attach s3 {SEG}"), "NoSuchSegment");
    a.exit();

    // A shared segment whose owner died cannot be attached.
    let mut a2 = Proc::node(&dir, 8);
    a2.ok("create s 0x2003 4096");
    a2.ok("share s");
    b.ok("attach s4 0x2003");
    a2.kill9();
    b.err_is("attach s5 0x2003", "NoSuchSegment");
    b.exit();
    c.exit();
}

fn caller_memory_registered_as_a_segment_is_shared_in_place(t: &Topology) {
    const SEG: u32 = 0x3001;
    const LEN: usize = 3 * 4096 - 5;
    let mut owner = Proc::node(t, 8);
    // A page-aligned heap buffer, filled with pattern 11, then registered.
    owner.ok(&format!("register b {SEG} {LEN} 11"));
    owner.ok("prepare b");
    owner.ok("available b");
    assert_eq!(owner.ok("linfo b"), format!("id={SEG} size={LEN} node=8 owner=true available=true"));
    owner.ok(&format!("bufvpat b 0 {LEN} 11 0"));

    let mut peer = Proc::node(t, 12);
    assert_eq!(peer.ok(&format!("connect r 8 {SEG} imm")), format!("node=8 id={SEG} size={LEN}"));
    peer.ok(&format!("map m r 0 {LEN} rw"));
    peer.ok(&format!("vpat m 0 {LEN} 11 0")); // the caller's data
    peer.err_is(&format!("map x r 0 {} ro", LEN + 1), "OutOfRange");

    // A registration that fails (the id is taken) changes nothing: the buffer still is the
    // registered segment's memory.
    owner.err_is(&format!("register_again again b {SEG}"), "SegmentIdInUse");
    owner.ok("create other 0x3002 4096");
    owner.err_is("register_again again b 0x3002", "SegmentIdInUse");

    // The peer's writes land in the caller's own buffer (by the flush at the latest) ...
    peer.ok("wpat m 4093 2000 12 4093");
    peer.ok("flush m");
    owner.ok("bufvpat b 4093 2000 12 4093");
    peer.ok(&format!("wpat m {} 5 15 {}", LEN - 5, LEN - 5));
    peer.ok("flush m");
    owner.ok(&format!("bufvpat b {} 5 15 {}", LEN - 5, LEN - 5));
    // ... and the caller's plain stores to its buffer reach the peer.
    owner.ok("bufwpat b 10001 2000 13 10001");
    peer.ok("vpat m 10001 2000 13 10001");
    owner.ok(&format!("map m b 0 {LEN} ro"));
    assert_eq!(owner.ok(&format!("sum m 0 {LEN}")), peer.ok(&format!("sum m 0 {LEN}")));

    // After removal the caller keeps its memory and its contents.
    owner.ok("unmap m");
    owner.ok("remove b 1");
    assert_eq!(peer.ok("rwait r 2000"), "Lost(Removed)");
    owner.ok("bufvpat b 4093 2000 12 4093");
    owner.ok("bufwpat b 0 100 14 0");
    owner.ok("bufvpat b 0 100 14 0");
    peer.exit();
    owner.exit();
}

// Single-host: it measures the blocks of the segment file on the fabric's file system.
// The memory is reserved at creation, so that a full file system is an error then, not
// SIGBUS at a later store.
#[test]
fn a_1_gib_segment_has_its_memory_reserved_at_creation() {
    const SEG: u32 = 0x4001;
    const GIB: u64 = 1 << 30;
    const STEP: u64 = 64 << 20;
    let dir = TestDir::new("gib");
    let mut owner = Proc::node(&dir, 8);
    owner.ok(&format!("create s {SEG} {GIB}"));
    owner.ok("prepare s");
    owner.ok("available s");
    owner.ok(&format!("map m s 0 {GIB} rw"));
    let spots: Vec<(u64, u64)> = (0..GIB / STEP).map(|k| (k * STEP + 7 * k + 3, 13)).chain([(GIB - 5, 5)]).collect();
    for &(off, len) in &spots {
        owner.ok(&format!("wpat m {off} {len} 21 {off}"));
    }

    let mut peer = Proc::node(&dir, 12);
    assert_eq!(peer.ok(&format!("connect r 8 {SEG} imm")), format!("node=8 id={SEG} size={GIB}"));
    peer.ok(&format!("map m r 0 {GIB} ro"));
    for &(off, len) in &spots {
        peer.ok(&format!("vpat m {off} {len} 21 {off}"));
    }
    assert_eq!(peer.ok(&format!("r64 m {}", STEP + 4096)), "0");

    let path = dir.seg_path(8, SEG);
    let meta = std::fs::metadata(&path).expect("segment file");
    assert!(meta.len() >= GIB, "file is only {} bytes", meta.len());
    let allocated = meta.blocks() * 512;
    assert!(allocated >= GIB, "a 1 GiB segment has only {allocated} bytes reserved");

    peer.ok("unmap m");
    peer.ok("disconnect r");
    owner.ok("unmap m");
    owner.ok("remove s 0");
    assert!(!path.exists());
    peer.exit();
    owner.exit();
}

support::topology_cases!(
    a_waiting_peer_and_the_owner_exchange_checksummed_data,
    caller_memory_registered_as_a_segment_is_shared_in_place,
    ;
    ofi: a_waiting_peer_and_the_owner_exchange_checksummed_data,
    caller_memory_registered_as_a_segment_is_shared_in_place,
);
