//! Hostile and unlucky local state: FIFOs, links and other users' files planted in the
//! fabric directory are refused by name and never waited on; a full tmpfs refuses memory
//! when it is promised instead of killing the program when it is touched.
//!
//! Single-host by nature (files planted in one fabric directory): not run per topology.

mod support;

use std::ffi::CString;
use std::mem::offset_of;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use lanes::transport::shm::layout::SegmentHeader;
use lanes::{Fabric, FabricConfig, MapAccess, NodeId};
use support::{Proc, TestDir};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

/// Runs `f` on a thread and fails the test if it does not return within `limit`: the
/// point of these tests is that nothing waits on a planted file.
fn bounded<T: Send + 'static>(what: &str, limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} did not return within {limit:?}: it waits on a planted file"))
}

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).expect("path without NUL");
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(rc, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn planted_fifos_links_and_foreign_files_are_refused_by_name_and_cleaned() {
    const GOOD: u32 = 0x10;
    let dir = TestDir::new("hostile");
    let mut owner = Proc::node(&dir, 8);
    let mut peer = Proc::node(&dir, 12);
    owner.ok(&format!("create s {GOOD} 8192"));
    owner.ok("prepare s");
    owner.ok("available s");
    let fabric = dir.fabric();

    // A FIFO where an object, a process record and an export record would be; a link to the
    // good segment's own file (a valid object, reached through a link); a regular file with a
    // valid header that belongs to another user (root only: it takes chown).
    let fifo_seg = dir.seg_path(8, 0x20);
    mkfifo(&fifo_seg);
    let fifo_int = dir.node_dir(8).join("int-00000030");
    mkfifo(&fifo_int);
    let link_seg = dir.seg_path(8, 0x21);
    std::os::unix::fs::symlink(dir.seg_path(8, GOOD), &link_seg).expect("symlink");
    let fifo_record = fabric.join("procs").join("12-4194000");
    mkfifo(&fifo_record);
    std::fs::create_dir_all(fabric.join("exports")).expect("exports dir");
    let fifo_export = fabric.join("exports").join(format!("segment-8-{GOOD:08x}.json"));
    mkfifo(&fifo_export);
    let foreign_seg = dir.seg_path(8, 0x22);
    let foreign = is_root().then(|| {
        let mut bytes = std::fs::read(dir.seg_path(8, GOOD)).expect("reading the good segment");
        let at = offset_of!(SegmentHeader, segment_id);
        bytes[at..at + 4].copy_from_slice(&0x22u32.to_le_bytes());
        std::fs::write(&foreign_seg, bytes).expect("writing");
        std::os::unix::fs::chown(&foreign_seg, Some(65534), Some(65534)).expect("chown");
    });

    // A connect names the file and what it is, at once (no wait for the planted file).
    let e = peer.err_is("connect r 8 0x20 imm", "CorruptSegment");
    assert!(e.display.contains(fifo_seg.to_str().unwrap()) && e.display.contains("FIFO"), "{e}");
    let e = peer.err_is("connect r 8 0x21 imm", "CorruptSegment");
    assert!(e.display.contains("symbolic link"), "{e}");
    if foreign.is_some() {
        let e = peer.err_is("connect r 8 0x22 imm", "CorruptSegment");
        assert!(e.display.contains("belongs to uid 65534"), "{e}");
    }
    // The good segment is unaffected.
    peer.ok(&format!("connect r 8 {GOOD} imm"));

    // Status lists each planted file with its reason; probing a node reads the process
    // records (the FIFO among them) and answers.
    let f = fabric.clone();
    let st = bounded("lanes::status", Duration::from_secs(20), move || lanes::status(&f)).expect("status");
    let reason = |id: u32| st.segments.iter().find(|s| s.node == 8 && s.id == id).and_then(|s| s.corrupt.clone());
    assert!(reason(0x20).is_some_and(|r| r.contains("FIFO")), "{st:?}");
    assert!(reason(0x21).is_some_and(|r| r.contains("symbolic link")), "{st:?}");
    assert!(reason(GOOD).is_none(), "{st:?}");
    let node12 = st.nodes.iter().find(|n| n.node == 12).expect("node 12 listed");
    assert_eq!((node12.pids.len(), node12.stale_records), (1, 1), "the FIFO record is stale: {node12:?}");
    let f = fabric.clone();
    let probed = bounded("probe_node", Duration::from_secs(20), move || {
        let me = Fabric::open_with(FabricConfig::new(&f, NodeId::new(16).expect("node id"))).expect("open");
        (me.probe_node(12), me.probe_node(20))
    });
    assert_eq!(probed, (true, false));

    // Cleanup removes every planted file and nothing of the live owner's.
    let f = fabric.clone();
    let report = bounded("lanes::cleanup", Duration::from_secs(20), move || lanes::cleanup(&f)).expect("cleanup");
    let removed: Vec<u32> = report.segments.iter().map(|s| s.1).collect();
    for id in [0x20, 0x21, 0x30] {
        assert!(removed.contains(&id), "{id:#x} not removed: {report:?}");
    }
    assert!(report.records.contains(&(12, 4194000)), "{report:?}");
    assert!(report.exports.iter().any(|(name, why)| fifo_export.ends_with(name) && why.contains("FIFO")), "{report:?}");
    for p in [&fifo_seg, &fifo_int, &link_seg, &fifo_record, &fifo_export] {
        assert!(std::fs::symlink_metadata(p).is_err(), "{} still there", p.display());
    }
    if foreign.is_some() {
        assert!(std::fs::symlink_metadata(&foreign_seg).is_err(), "the foreign file is still there");
    }
    assert!(dir.seg_path(8, GOOD).exists());
    peer.ok("disconnect r");
    peer.ok(&format!("connect r 8 {GOOD} imm"));
}

#[test]
fn a_fabric_directory_others_could_enter_is_made_private() {
    let dir = TestDir::new("private");
    let fabric = dir.fabric();
    std::fs::create_dir(&fabric).expect("mkdir");
    std::fs::set_permissions(&fabric, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let _f = Fabric::open_with(FabricConfig::new(&fabric, NodeId::new(8).expect("node id"))).expect("open");
    let mode = std::fs::metadata(&fabric).expect("stat").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "mode {mode:o}");
}

/// A tmpfs of `bytes` mounted on a fresh directory, unmounted when dropped.
struct SmallTmpfs {
    dir: PathBuf,
}

impl SmallTmpfs {
    fn mount(parent: &Path, bytes: u64) -> Option<SmallTmpfs> {
        let dir = parent.join("small-tmpfs");
        std::fs::create_dir(&dir).expect("mkdir");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes},mode=0700"), "lanes-test", dir.to_str()?])
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!("skipped: mount of a tmpfs failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        Some(SmallTmpfs { dir })
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

#[test]
fn a_full_tmpfs_refuses_memory_at_create_time_instead_of_killing_the_program() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let dir = TestDir::new("fulltmpfs");
    let Some(tmpfs) = SmallTmpfs::mount(dir.root(), 1 << 20) else { return };
    let fabric_dir = tmpfs.dir.join("fabric");
    {
        let fabric = Fabric::open_with(FabricConfig::new(&fabric_dir, NodeId::new(8).expect("node id"))).expect("open");
        // Each fits the free space alone; the two do not.
        let size: u64 = 600 << 10;
        let first = fabric.create_segment(0x10, size).expect("the first segment fits");
        let e = fabric.create_segment(0x11, size).expect_err("the second segment cannot have its memory");
        let text = e.to_string();
        assert!(text.contains("full"), "the error names the cause: {text}");
        // Every byte of the first segment can be stored to: its memory was reserved.
        let map = first.map(0, size, MapAccess::ReadWrite).expect("map");
        let page = vec![0xA5u8; 4096];
        for off in (0..size as usize).step_by(4096) {
            map.write_bytes(off, &page).expect("store");
        }
        let mut back = vec![0u8; 4096];
        map.read_bytes(size as usize - 4096, &mut back).expect("load");
        assert_eq!(back, page);
        // Interrupts and data interrupts need memory too: refused the same way, or served.
        let _ = fabric.create_data_interrupt(None);
        let _ = fabric.create_interrupt(None);
        drop(map);
        first.remove(true).expect("remove");
        drop(first);
        // Freed (unlinked and unmapped): the second fits now.
        fabric.create_segment(0x11, size).expect("fits once the first is gone");
    }
    drop(tmpfs);
}

#[test]
fn copies_under_other_names_are_not_the_originals() {
    let dir = TestDir::new("aliases");
    let mut owner = Proc::node(&dir, 8);
    owner.ok("create s 0x10 4096");
    let procs = dir.fabric().join("procs");
    let record = procs.join(format!("8-{}", owner.pid()));
    // A live process's record copied under another pid, and under another spelling of its
    // own name; its node directory copied under another spelling of the node.
    std::fs::copy(&record, procs.join("8-999")).expect("copy");
    std::fs::copy(&record, procs.join(format!("08-{}", owner.pid()))).expect("copy");
    let alias = dir.fabric().join("nodes").join("08");
    std::fs::create_dir(&alias).expect("mkdir");
    std::fs::copy(dir.seg_path(8, 0x10), alias.join("seg-00000010")).expect("copy");

    let st = lanes::status(&dir.fabric()).expect("status");
    let node8 = st.nodes.iter().find(|n| n.node == 8).expect("node 8");
    assert_eq!(node8.pids, vec![owner.pid()], "{st:?}");
    assert_eq!(node8.stale_records, 1, "the copy under pid 999 is a stale record: {st:?}");
    assert_eq!(st.segments.iter().filter(|s| s.id == 0x10).count(), 1, "{st:?}");
}
