//! Segment files that are not what this library wrote: refused with CorruptSegment, listed
//! as corrupt, replaced by a create of the same id, removed by cleanup.
//!
//! Single-host by nature (files forged in one fabric directory): not run per topology.

mod support;

use std::mem::offset_of;

use lanes::transport::shm::layout::SegmentHeader;
use support::{pattern, Proc, TestDir};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn corrupt_segment_files_are_refused_reported_and_replaced() {
    const GOOD: u32 = 0x80;
    let dir = TestDir::new("corrupt");
    let mut owner = Proc::node(&dir, 8);
    let mut peer = Proc::node(&dir, 12);

    // A real segment file, as a template for valid-looking ones.
    owner.ok(&format!("create s {GOOD} 8192"));
    owner.ok("prepare s");
    owner.ok("available s");
    let good = std::fs::read(dir.seg_path(8, GOOD)).expect("reading a segment file");
    assert_eq!(&good[..8], b"LANESSEG");
    assert_eq!(good.len(), 4096 + 8192);
    peer.ok(&format!("connect r 8 {GOOD} imm"));
    peer.ok("disconnect r");
    owner.ok("remove s 0");
    assert!(!dir.seg_path(8, GOOD).exists());

    // A copy of the real header renamed to `id`, then `edit`ed.
    let valid_looking = |id: u32, edit: &dyn Fn(&mut Vec<u8>)| {
        let mut f = good.clone();
        put_u32(&mut f, offset_of!(SegmentHeader, segment_id), id);
        edit(&mut f);
        f
    };
    let cases: Vec<(u32, Vec<u8>, &str)> = vec![
        (0x81, pattern(99, 0, 3 * 4096), "bad magic"),
        (0x82, pattern(98, 0, 100), "shorter than the header"),
        (0x83, Vec::new(), "shorter than the header"),
        (0x84, vec![0u8; 4096], "bad magic"),
        (0x85, valid_looking(0x85, &|f| f[0] ^= 0x20), "bad magic"),
        (
            0x86,
            valid_looking(0x86, &|f| put_u32(f, offset_of!(SegmentHeader, layout_version), 99)),
            "layout version 99",
        ),
        (0x87, good.clone(), "header names"),
        (
            0x88,
            valid_looking(0x88, &|f| put_u64(f, offset_of!(SegmentHeader, segment_size), 1 << 40)),
            "segment ends at byte",
        ),
        (0x89, valid_looking(0x89, &|f| put_u64(f, offset_of!(SegmentHeader, data_offset), 8)), "overlaps the header"),
        (0x8A, valid_looking(0x8A, &|f| put_u64(f, offset_of!(SegmentHeader, owner), 0)), "no owner"),
        (0x8B, valid_looking(0x8B, &|f| f.truncate(4096)), "segment ends at byte"),
        (0x8C, [b"LANESSEG".as_slice(), &pattern(97, 8, 8184)].concat(), "layout version"),
    ];
    for (id, bytes, _) in &cases {
        std::fs::write(dir.seg_path(8, *id), bytes).expect("writing a corrupt file");
    }

    let st = lanes::status(&dir.fabric()).expect("status of a fabric with corrupt files");
    for (id, _, why) in &cases {
        let path = dir.seg_path(8, *id);
        let path = path.to_str().expect("utf-8 path");
        for timeout in ["imm", "500"] {
            let e = peer.err_is(&format!("connect r 8 {id} {timeout}"), "CorruptSegment");
            assert!(e.display.contains(path) && e.display.contains(why), "{id:#x}: {e}");
        }
        let e = owner.err_is(&format!("attach a {id}"), "CorruptSegment");
        assert!(e.display.contains(why), "{id:#x}: {e}");
        let s = st.segments.iter().find(|s| s.node == 8 && s.id == *id).unwrap_or_else(|| panic!("{id:#x} not listed"));
        assert!(!s.alive, "{s:?}");
        assert!(s.corrupt.as_deref().is_some_and(|c| c.contains(why)), "{id:#x}: {s:?}");
    }

    // Creating the id replaces the corrupt file with a working segment (the last case is
    // left for cleanup).
    let (kept, _, kept_why) = cases.last().expect("cases");
    for (id, _, _) in &cases[..cases.len() - 1] {
        owner.ok(&format!("create s{id} {id} 4096"));
        owner.ok(&format!("prepare s{id}"));
        owner.ok(&format!("available s{id}"));
        assert_eq!(peer.ok(&format!("connect r{id} 8 {id} imm")), format!("node=8 id={id} size=4096"));
    }
    let st = lanes::status(&dir.fabric()).expect("status");
    for s in st.segments.iter().filter(|s| s.id != *kept) {
        assert!(s.alive && s.corrupt.is_none(), "{s:?}");
    }
    let report = lanes::cleanup(&dir.fabric()).expect("cleanup");
    assert_eq!(report.segments.len(), 1, "{report:?}");
    assert_eq!((report.segments[0].0, report.segments[0].1), (8, *kept), "{report:?}");
    assert!(report.segments[0].2.contains("corrupt") && report.segments[0].2.contains(kept_why), "{report:?}");
    assert!(!dir.seg_path(8, *kept).exists());
    assert_eq!(lanes::status(&dir.fabric()).expect("status").segments.len(), cases.len() - 1);

    // Nobody crashed.
    peer.exit();
    owner.exit();
}
