//! Bounds, alignment and access rights of maps, checked by the API and by the page tables.

mod support;

use std::os::unix::process::ExitStatusExt;

use support::{Proc, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

const SEG: u32 = 0x30;
const SIZE: u64 = 8192 + 100;

fn owner_with_segment(t: &Topology) -> Proc {
    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok("available s");
    owner.ok(&format!("map m s 0 {SIZE} rw"));
    owner.ok(&format!("wpat m 0 {SIZE} 9 0"));
    owner
}

fn maps_and_accesses_outside_the_segment_or_misaligned_are_refused(t: &Topology) {
    let mut owner = owner_with_segment(t);
    let mut peer = Proc::node(t, 12);
    peer.ok(&format!("connect r 8 {SEG} imm"));

    // Maps must lie inside the segment.
    for (off, len) in [(8000, 300), (0, SIZE + 1), (SIZE, 1), (SIZE + 4096, 8), (1, SIZE), (u64::MAX, 2), (8, u64::MAX)]
    {
        let e = peer.err_is(&format!("map x r {off} {len} rw"), "OutOfRange");
        assert!(e.debug.contains(&format!("size: {SIZE}")), "{off}+{len}: {e}");
    }
    peer.err_is("map x r 0 0 rw", "InvalidSize");
    owner.err_is(&format!("map x s {} 2 rw", SIZE - 1), "OutOfRange");
    assert_eq!(peer.ok(&format!("map edge r {} 1 ro", SIZE - 1)), format!("len=1 offset={} writable=false", SIZE - 1));
    peer.ok(&format!("vpat edge 0 1 9 {}", SIZE - 1));

    // A window at segment offset 100: its byte 4 is 8-aligned in memory.
    peer.ok("map m r 100 1000 rw");
    for cmd in ["r64 m 996", "r64 m 1000", "r32 m 998", "r8 m 1000", "w64 m 996 1", "w8 m 1000 1", "rbytes m 999 2"] {
        peer.err_is(cmd, "OutOfRange");
    }
    peer.err_is("wbytes m 999 0000", "OutOfRange");
    peer.err_is("fill m 1 1000 0", "OutOfRange");
    peer.err_is("rbytes m 18446744073709551615 1", "OutOfRange");
    peer.err_is("w64 m 18446744073709551615 1", "OutOfRange");
    peer.ok("r8 m 999");
    peer.ok("rbytes m 998 2");
    peer.ok("r64 m 4");
    peer.ok("r64 m 988");
    for cmd in
        ["r64 m 0", "r64 m 1", "r32 m 2", "r16 m 1", "w64 m 8 1", "w32 m 6 1", "acq64 m 0", "rel64 m 0 1", "acq32 m 2"]
    {
        let e = peer.err_is(cmd, "Misaligned");
        assert!(e.debug.contains("align"), "{cmd}: {e}");
    }
    peer.ok("w64 m 4 77");
    peer.ok("w32 m 12 66");
    peer.ok("w16 m 18 55");
    // Stores reach the owner by the flush at the latest (a direct map's at once).
    peer.ok("flush m");
    assert_eq!(owner.ok("r64 m 104"), "77");
    assert_eq!(owner.ok("r32 m 112"), "66");
    assert_eq!(owner.ok("r16 m 118"), "55");
    assert_eq!(peer.ok("acq64 m 4"), "77");

    // Read-only maps refuse every kind of write, and stay readable.
    assert_eq!(peer.ok(&format!("map ro r 0 {SIZE} ro")), format!("len={SIZE} offset=0 writable=false"));
    for cmd in ["w8 ro 0 1", "w64 ro 8 1", "wbytes ro 3 00", "fill ro 0 10 1", "rel64 ro 0 1", "rel32 ro 0 1"] {
        peer.err_is(cmd, "ReadOnly");
    }
    peer.ok("vpat ro 200 1000 9 200");
    owner.ok("map lro s 0 16 ro");
    owner.err_is("w8 lro 0 1", "ReadOnly");
    owner.err_is("wbytes lro 0 00", "ReadOnly");
    peer.ok("vpat ro 0 100 9 0");
    owner.ok("vpat m 200 1000 9 200");
    peer.exit();
    owner.exit();
}

fn a_read_only_map_is_read_only_in_the_page_tables(t: &Topology) {
    let mut owner = owner_with_segment(t);
    let mut peer = Proc::node(t, 12);
    peer.ok(&format!("connect r 8 {SEG} imm"));
    peer.ok(&format!("map ro r 0 {SIZE} ro"));
    peer.ok(&format!("map rw r 0 {SIZE} rw"));
    // Control: a raw store through a writable map works and reaches the owner.
    peer.ok("rawwrite rw 5000 171");
    assert_eq!(owner.ok("r8 m 5000"), "171");
    assert_eq!(peer.ok("rawread ro 5000"), "171");
    // A raw store through the read-only map kills the process with SIGSEGV.
    peer.ok("nocore");
    peer.start("rawwrite ro 5001 172");
    let st = peer.wait_exit();
    let out = peer.output();
    assert_eq!(st.signal(), Some(libc::SIGSEGV), "{st:?}\n--- child output ---\n{out}");
    assert_eq!(owner.ok("r8 m 5001"), support::pattern_byte(9, 5001).to_string());
    owner.ok(&format!("vpat m 5002 {} 9 5002", SIZE - 5002));

    // The same holds for a read-only map of a local segment.
    let mut other = Proc::node(t, 16);
    other.ok("create s 0x31 4096");
    other.ok("map ro s 0 4096 ro");
    other.ok("nocore");
    other.start("rawwrite ro 0 1");
    let st = other.wait_exit();
    let out = other.output();
    assert_eq!(st.signal(), Some(libc::SIGSEGV), "{st:?}\n--- child output ---\n{out}");
    owner.exit();
}

// Shm only: `a_read_only_map_is_read_only_in_the_page_tables`. A read-only map of another
// host's segment is a mirror window that the provider writes when it reads through, so it
// is not read-only in the page tables: raw stores to it stay local (design, section 6).
support::topology_cases!(
    maps_and_accesses_outside_the_segment_or_misaligned_are_refused,
    a_read_only_map_is_read_only_in_the_page_tables,
    ;
    ofi: maps_and_accesses_outside_the_segment_or_misaligned_are_refused,
);
