//! Connecting and creating: every refusal has its own error, queries on a connection, and
//! processes racing to create one segment id.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use support::{Proc, TestDir, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

/// The `waited_ms` field of a Timeout error's Debug form.
fn waited_ms(debug: &str) -> u64 {
    let rest = debug.split("waited_ms: ").nth(1).unwrap_or_else(|| panic!("no waited_ms in {debug}"));
    rest.trim_end_matches([' ', '}']).parse().unwrap_or_else(|_| panic!("bad waited_ms in {debug}"))
}

fn connect_refusals_are_distinct_errors(t: &Topology) {
    let mut owner = Proc::node(t, 8);
    let mut peer = Proc::node(t, 12);
    owner.ok("create s 0x10 12288"); // neither prepared nor available

    let e = peer.err_is("connect r 8 0x99 imm", "NoSuchSegment");
    assert!(e.debug.contains("node: 8") && e.debug.contains("segment: 153"), "{e}");
    peer.err_is("connect r 40 0x10 imm", "NoSuchSegment"); // a node nobody acts as
    let e = peer.err_is("connect r 8 0x10 imm", "NotAvailable");
    assert!(e.debug.contains("segment: 16"), "{e}");
    owner.ok("prepare s");
    peer.err_is("connect r 8 0x10 imm", "NotAvailable");

    // Short timeouts run out, and only after waiting.
    for (cmd, why, ms) in [("connect r 8 0x10 300", "not available", 300), ("connect r 8 0x99 200", "no segment", 200)]
    {
        let started = Instant::now();
        let e = peer.err_is(cmd, "Timeout");
        let elapsed = started.elapsed();
        assert!(e.display.contains(why), "{cmd}: {e}");
        assert!(waited_ms(&e.debug) >= ms, "{cmd}: {e}");
        assert!(elapsed >= Duration::from_millis(ms), "{cmd} returned after {elapsed:?}");
    }

    for bad in ["7", "0", "2", "252", "65536", "4294967292"] {
        let e = peer.err_is(&format!("connect r {bad} 0x10 imm"), "InvalidNodeId");
        assert!(e.display.contains(bad), "{e}");
    }

    // A connect waiting on an unavailable segment succeeds when it becomes available.
    let cmd = "connect r 8 0x10 10000";
    peer.start(cmd);
    std::thread::sleep(Duration::from_millis(50));
    owner.ok("available s");
    assert_eq!(peer.finish(cmd).unwrap_or_else(|e| panic!("{cmd}: {e}")), "node=8 id=16 size=12288");
    assert_eq!(peer.ok("rinfo r"), "node=8 id=16 size=12288");
    assert_eq!(peer.ok("state r"), "Operational");
    peer.ok("check r");
    let seen = t.seen_pid(8, 12, peer.pid());
    assert_eq!(owner.ok("peers s"), format!("12:{seen}"));

    // Unavailable refuses new connections but keeps the existing one working.
    owner.ok("unavailable s");
    assert_eq!(peer.ok("rwait r 2000"), "NotOperational");
    peer.ok("check r");
    peer.ok("map m r 8 16 rw");
    peer.ok("w64 m 0 5");
    peer.ok("flush m");
    owner.ok("map m s 0 24 ro");
    assert_eq!(owner.ok("r64 m 8"), "5");
    peer.err_is("connect r2 8 0x10 imm", "NotAvailable");
    owner.ok("available s");
    assert_eq!(peer.ok("rwait r 2000"), "Operational");
    peer.ok("connect r2 8 0x10 imm");
    assert_eq!(owner.ok("peers s"), format!("12:{seen},12:{seen}"));
    peer.ok("disconnect r2");
    owner.ok(&format!("waitpeers s 12:{seen} 2000"));

    // Creation refusals.
    owner.ok("create t 0x11 4096");
    owner.err_is("available t", "NotPrepared");
    let e = owner.err_is("create x 0x10 4096", "SegmentIdInUse");
    assert!(e.debug.contains("segment: 16"), "{e}");
    owner.err_is("create x 0x12 0", "InvalidSize");

    // Automatic ids are usable ids.
    let auto: u32 = owner.ok("create_auto a 4096").parse().expect("an id");
    owner.ok("prepare a");
    owner.ok("available a");
    assert_eq!(peer.ok(&format!("connect ra 8 {auto} imm")), format!("node=8 id={auto} size=4096"));
    let other: u32 = owner.ok("create_auto b 4096").parse().expect("an id");
    assert_ne!(auto, other);

    // The same id on another node is another segment.
    peer.ok("create s 0x10 100");
    peer.ok("prepare s");
    peer.ok("available s");
    assert_eq!(owner.ok("connect r 12 0x10 imm"), "node=12 id=16 size=100");
    owner.exit();
    peer.exit();
}

/// Sends `cmd` to every process at once, then collects the replies.
fn race(procs: &mut [Proc], cmd: &str) -> Vec<Result<String, support::ErrReply>> {
    for p in procs.iter_mut() {
        p.send(cmd);
    }
    procs
        .iter_mut()
        .map(|p| {
            assert_eq!(p.line("BEGIN"), "BEGIN");
            p.finish(cmd)
        })
        .collect()
}

fn single_winner(procs: &[Proc], results: &[Result<String, support::ErrReply>], cmd: &str) -> usize {
    let mut winners = Vec::new();
    for (i, r) in results.iter().enumerate() {
        match r {
            Ok(_) => winners.push(i),
            Err(e) => assert_eq!(e.variant, "SegmentIdInUse", "{}: {cmd}: {e}", procs[i].name()),
        }
    }
    assert_eq!(winners.len(), 1, "{cmd}: winners {winners:?}");
    winners[0]
}

// Single-host: eight processes act as node 8 and race on its directory, then corrupt a file.
#[test]
fn racing_creators_of_one_id_have_exactly_one_winner() {
    let dir = TestDir::new("race");
    let mut procs: Vec<Proc> = (0..8).map(|_| Proc::node(&dir, 8)).collect();
    let mut last_winner = 0;
    for round in 0..5u32 {
        let id = 0x7000 + round;
        let cmd = format!("create s{round} {id} 65536");
        let results = race(&mut procs, &cmd);
        let w = single_winner(&procs, &results, &cmd);
        let st = lanes::status(&dir.fabric()).expect("status");
        let segs: Vec<_> = st.segments.iter().filter(|s| s.id == id).collect();
        assert_eq!(segs.len(), 1, "{st:?}");
        assert!(segs[0].alive && segs[0].owner_pid == procs[w].pid(), "{:?}", segs[0]);
        last_winner = w;
    }

    // The last winner dies; all race to re-create its (now stale) id.
    let id = 0x7004;
    procs[last_winner].kill9();
    procs[last_winner] = Proc::node(&dir, 8);
    let cmd = format!("create t {id} 4096");
    let results = race(&mut procs, &cmd);
    let w = single_winner(&procs, &results, &cmd);
    let st = lanes::status(&dir.fabric()).expect("status");
    let segs: Vec<_> = st.segments.iter().filter(|s| s.id == id).collect();
    assert_eq!(segs.len(), 1, "{st:?}");
    assert!(segs[0].alive && segs[0].owner_pid == procs[w].pid(), "{:?}", segs[0]);

    // A corrupt file holding the id is replaced by exactly one of the racers.
    let id = 0x7010;
    std::fs::write(dir.seg_path(8, id), support::pattern(5, 0, 8192)).expect("writing a corrupt file");
    let cmd = format!("create c {id} 4096");
    let results = race(&mut procs, &cmd);
    let w = single_winner(&procs, &results, &cmd);
    let st = lanes::status(&dir.fabric()).expect("status");
    let segs: Vec<_> = st.segments.iter().filter(|s| s.id == id).collect();
    assert_eq!(segs.len(), 1, "{st:?}");
    assert!(segs[0].alive && segs[0].corrupt.is_none() && segs[0].owner_pid == procs[w].pid(), "{:?}", segs[0]);

    // Automatic ids never collide.
    let results = race(&mut procs, "create_auto a 4096");
    let ids: HashSet<String> = results.into_iter().map(|r| r.unwrap_or_else(|e| panic!("create_auto: {e}"))).collect();
    assert_eq!(ids.len(), procs.len(), "{ids:?}");

    for p in &mut procs {
        p.exit();
    }

    // Processes of different nodes creating the same id all succeed: one namespace per node.
    let mut nodes: Vec<Proc> = (0..8).map(|i| Proc::node(&dir, 8 + 4 * i)).collect();
    for r in race(&mut nodes, "create s 0x7777 4096") {
        r.unwrap_or_else(|e| panic!("create on distinct nodes: {e}"));
    }
    for p in &mut nodes {
        p.exit();
    }
}

support::topology_cases!(
    connect_refusals_are_distinct_errors,
    ;
    ofi: connect_refusals_are_distinct_errors,
);
