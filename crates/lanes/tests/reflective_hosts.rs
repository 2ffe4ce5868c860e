//! Reflective groups spanning hosts: a group created on host a (node 8), members on hosts b
//! (node 12) and c (node 16), each with its own daemon and fabric directory, reached over
//! libfabric (`topology::ofi::lo::..` on loopback, `topology::ofi::netns::..` across network
//! namespaces). Writers on two hosts, readers everywhere checking every record whole and in
//! order per writer, a late joiner that finds the current contents and then follows new
//! writes, a leave, DMA through a membership, and refusals of bad input. The single-host group semantics are
//! tests/reflective.rs.

// Every case needs the ofi transport.
#![cfg(feature = "ofi")]

mod support;

use std::time::{Duration, Instant};

use lanes::{Error, Fabric, FabricConfig, Map, MapAccess, ReflectiveGroup, ReflectiveMember, Timeout};
use support::records::{follow, write_record, GROUP_BYTES};
use support::{timeout, ChildIo, Proc, Topology};

const GROUP: u32 = 7;
/// How long a reader may take to see a writer's last record (liveness, not speed).
const FOLLOW: Duration = Duration::from_secs(40);

/// What a `refl` child holds: the group it created or its membership.
enum Role {
    None,
    Creator(ReflectiveGroup),
    Member(ReflectiveMember),
}

impl Role {
    /// A map of part of the group (`ReflectiveGroup::map`, `ReflectiveMember::map`).
    fn map(&self, offset: u64, len: u64, access: MapAccess) -> lanes::Result<Map> {
        match self {
            Role::None => Err(Error::IllegalOperation("no group")),
            Role::Creator(g) => g.map(offset, len, access),
            Role::Member(m) => m.map(offset, len, access),
        }
    }

    fn maps(&self) -> Option<(&Map, &Map)> {
        match self {
            Role::None => None,
            Role::Creator(g) => Some((g.read_map(), g.write_map())),
            Role::Member(m) => Some((m.read_map(), m.write_map())),
        }
    }
}

/// The `refl` role: opens the fabric of its node and host (the topology's environment),
/// then obeys one command per line, answering `OK ...` or `ERR <variant> <text>`.
fn refl(io: &ChildIo) {
    let fabric = FabricConfig::from_env().and_then(Fabric::open_with).expect("the node's fabric");
    io.send("READY");
    let mut role = Role::None;
    // Groups created after the first (or by a member): held, never mapped.
    let mut extra: Vec<ReflectiveGroup> = Vec::new();
    while let Some(line) = io.recv() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> u64 { w[i].parse().expect("a number") };
        let reply = match (w[0], role.maps()) {
            ("create", _) => match fabric.create_reflective_group(num(1) as u32, num(2), &[]) {
                Ok(g) => {
                    match role {
                        Role::None => role = Role::Creator(g),
                        _ => extra.push(g),
                    }
                    "OK".to_string()
                }
                Err(e) => err(e),
            },
            ("dropextra", _) => {
                extra.pop();
                "OK".to_string()
            }
            ("join", _) => match fabric.join_reflective_group(num(1) as u32, timeout(w[2])) {
                Ok(m) => {
                    let size = m.size();
                    role = Role::Member(m);
                    format!("OK {size}")
                }
                Err(e) => err(e),
            },
            ("leave", _) => {
                role = Role::None;
                "OK".to_string()
            }
            ("members", _) => {
                let mut nodes: Vec<u32> = match &role {
                    Role::None => Vec::new(),
                    Role::Creator(g) => g.members().into_iter().map(|(n, _)| n).collect(),
                    Role::Member(m) => m.members().into_iter().map(|(n, _)| n).collect(),
                };
                nodes.sort_unstable();
                format!("OK {nodes:?}")
            }
            ("write", Some((_, wm))) => {
                let (k, from, to) = (num(1) as usize, num(2), num(3));
                done((from..to).try_for_each(|n| write_record(wm, k, n)).and_then(|()| wm.flush_checked()))
            }
            ("follow", Some((rm, _))) => match follow(rm, num(1) as usize, num(2), FOLLOW) {
                Ok(n) => format!("OK {n}"),
                Err(e) => format!("FAIL {e}"),
            },
            ("sum", Some((rm, _))) => {
                let mut v = vec![0u8; num(2) as usize];
                match rm.read_bytes(num(1) as usize, &mut v) {
                    Ok(()) => format!("OK {:016x}", support::fnv64(&v)),
                    Err(e) => err(e),
                }
            }
            ("w64", Some((_, wm))) => done(wm.write::<u64>(num(1) as usize, num(2))),
            // A plain store through the write map's raw pointer, as a C program makes one.
            ("rawput", Some((_, wm))) => {
                raw_store(wm, num(1) as usize, num(2));
                "OK".to_string()
            }
            ("flush", Some((_, wm))) => done(wm.flush_checked()),
            ("rd64", Some((rm, _))) => value(rm.read::<u64>(num(1) as usize)),
            // A raw store, then at once a read through the same map's methods.
            ("rawthenread", Some((_, wm))) => {
                raw_store(wm, num(1) as usize, num(2));
                value(wm.read::<u64>(num(1) as usize))
            }
            // A raw store, a refresh of the range, the same value stored raw again, a flush.
            ("rawagain", Some((_, wm))) => {
                let at = num(1) as usize;
                raw_store(wm, at, num(2));
                done(wm.refresh(at, 8).and_then(|()| {
                    raw_store(wm, at, num(2));
                    wm.flush_checked()
                }))
            }
            // Waits (bounded) until the read map holds `value` at `offset`.
            ("await64", Some((rm, _))) => {
                let until = Instant::now() + Duration::from_millis(num(3));
                loop {
                    match rm.read::<u64>(num(1) as usize) {
                        Ok(v) if v == num(2) => break "OK".to_string(),
                        Ok(v) if Instant::now() >= until => break format!("FAIL still {v}"),
                        Ok(_) => std::thread::sleep(Duration::from_millis(1)),
                        Err(e) => break err(e),
                    }
                }
            }
            // A read-write map of `len` bytes at `offset`; a raw store at `at` in it; a flush.
            ("subraw", _) => done(role.map(num(1), num(2), MapAccess::ReadWrite).and_then(|m| {
                raw_store(&m, num(3) as usize, num(4));
                m.flush_checked()
            })),
            ("subread", _) => {
                value(role.map(num(1), num(2), MapAccess::ReadOnly).and_then(|m| m.read::<u64>(num(3) as usize)))
            }
            ("ro64", Some((rm, _))) => done(rm.write::<u64>(num(1) as usize, num(2))),
            ("segmap", _) => match &role {
                Role::Member(m) => match m.segment().map(0, 8, lanes::MapAccess::ReadWrite) {
                    Ok(_) => "OK".to_string(),
                    Err(e) => err(e),
                },
                _ => "FAIL segmap needs a membership".to_string(),
            },
            // DMA through the membership's connection: `dmaw` (a segment, two vector entries)
            // and `dmamem` (program memory) write `len` bytes of pattern `seed` at `offset`;
            // `dmar` reads `len` bytes at `offset` and answers their checksum; `dmaabort`
            // aborts four writes at once and answers the queue's final state; `dmalong`
            // queues four writes, says `STARTED`, then waits for them.
            ("dmaw" | "dmamem" | "dmar" | "dmaabort" | "dmalong", _) => match &role {
                Role::Member(m) => {
                    let seed = if w.len() > 3 { num(3) } else { 0 };
                    dma(&fabric, m, w[0], num(1), num(2), seed, &|| io.send("STARTED"))
                }
                _ => format!("FAIL {} needs a membership", w[0]),
            },
            ("dmathree", _) => match &role {
                Role::Member(m) => dma_on_one_channel(&fabric, m, num(1), num(2)),
                _ => "FAIL dmathree needs a membership".to_string(),
            },
            ("event", _) => match &role {
                Role::Member(m) => match m.wait_event(timeout(w[1])) {
                    Ok(lanes::GroupEvent::Lost(r)) => format!("OK lost {r:?}"),
                    Ok(other) => format!("OK {other:?}"),
                    Err(e) => err(e),
                },
                _ => "FAIL event needs a membership".to_string(),
            },
            ("exit", _) => break,
            (other, _) => format!("FAIL unknown or out-of-place command {other:?}"),
        };
        io.send(&reply);
    }
}

/// `len` bytes of pattern `seed` (not periodic at 256 bytes, different per seed).
fn pattern(len: u64, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131) ^ (i >> 8) ^ seed.wrapping_mul(0x9e)) as u8).collect()
}

/// The `dmaw`, `dmamem`, `dmar`, `dmaabort` and `dmalong` commands (see `refl`); each waits
/// for its transfers. `started` tells the parent that `dmalong`'s are queued.
fn dma(
    fabric: &Fabric,
    m: &ReflectiveMember,
    cmd: &str,
    offset: u64,
    len: u64,
    seed: u64,
    started: &dyn Fn(),
) -> String {
    use lanes::{DmaDirection, DmaVec};
    let run = || -> lanes::Result<String> {
        // Program memory for `dmamem`: untouched until the queue is done with it (declared
        // before the queue, so that it outlives the queue's drop, which waits for it).
        let mut memory = pattern(len, seed);
        let local = fabric.create_segment(0x99, len.max(4096))?;
        let lmap = local.map(0, len.max(4096), MapAccess::ReadWrite)?;
        let mut q = fabric.create_dma_queue(4)?;
        match cmd {
            "dmaw" => {
                lmap.write_bytes(0, &memory)?;
                // The second half first: two entries that do not continue each other.
                let half = len / 2;
                let both = [
                    DmaVec { size: len - half, local_offset: half, remote_offset: offset + half },
                    DmaVec { size: half, local_offset: 0, remote_offset: offset },
                ];
                let entries = if half == 0 { &both[..1] } else { &both[..] };
                q.start_vec(&local, m.segment(), entries, DmaDirection::Write, None)?;
            }
            // Four transfers of the same bytes, then at once an abort: the wait ends with
            // the queue aborted, or done if the channel was quicker.
            "dmaabort" => {
                let v = DmaVec { size: len, local_offset: 0, remote_offset: offset };
                q.start_vec(&local, m.segment(), &[v; 4], DmaDirection::Write, None)?;
                q.abort();
                return q.wait(Timeout::After(Duration::from_secs(60))).map(|s| format!("OK {s:?}"));
            }
            "dmalong" => {
                let v = DmaVec { size: len, local_offset: 0, remote_offset: offset };
                q.start_vec(&local, m.segment(), &[v; 4], DmaDirection::Write, None)?;
                started();
            }
            // SAFETY: `memory` holds `len` bytes and is neither used nor dropped until the
            // wait below returned (the transfer complete).
            "dmamem" => unsafe {
                q.start_memory(memory.as_mut_ptr(), m.segment(), len, offset, DmaDirection::Write, None)?
            },
            _ => q.start(&local, m.segment(), 0, len, offset, DmaDirection::Read, None)?,
        }
        q.wait(Timeout::After(Duration::from_secs(30)))?;
        if cmd != "dmar" {
            return Ok("OK".into());
        }
        let mut v = vec![0u8; len as usize];
        lmap.read_bytes(0, &mut v)?;
        Ok(format!("OK {:016x}", support::fnv64(&v)))
    };
    run().unwrap_or_else(err)
}

/// The `dmathree` command: three queues on one DMA channel at once, two writing `len` bytes
/// into the group through the membership (pattern 1 at `offset`, pattern 2 at `offset +
/// len`: each run flushed to the other copies while the channel serves the others) and one
/// copying between two segments of this node. Answers `OK` once all three are done and the
/// copy holds what was copied.
fn dma_on_one_channel(fabric: &Fabric, m: &ReflectiveMember, offset: u64, len: u64) -> String {
    use lanes::DmaDirection;
    let run = || -> lanes::Result<String> {
        let sources = [fabric.create_segment(0x9a, len)?, fabric.create_segment(0x9b, len)?];
        for (seed, seg) in (1..).zip(&sources) {
            seg.map(0, len, MapAccess::ReadWrite)?.write_bytes(0, &pattern(len, seed))?;
        }
        let target = fabric.create_segment(0x9c, len)?;
        target.prepare()?;
        target.set_available()?;
        let near = fabric.connect_segment(fabric.node_id().get(), 0x9c, Timeout::After(Duration::from_secs(10)))?;
        let mut queues = [fabric.create_dma_queue(4)?, fabric.create_dma_queue(4)?, fabric.create_dma_queue(4)?];
        let channel = queues[0].channel();
        for q in &mut queues[1..] {
            q.assign_channel(&channel)?;
        }
        queues[0].start(&sources[0], m.segment(), 0, len, offset, DmaDirection::Write, None)?;
        queues[1].start(&sources[1], m.segment(), 0, len, offset + len, DmaDirection::Write, None)?;
        queues[2].start(&sources[1], &near, 0, len, 0, DmaDirection::Write, None)?;
        for q in &queues {
            q.wait(Timeout::After(Duration::from_secs(30)))?;
        }
        let mut copied = vec![0u8; len as usize];
        target.map(0, len, MapAccess::ReadOnly)?.read_bytes(0, &mut copied)?;
        Ok(if copied == pattern(len, 2) { "OK".into() } else { "FAIL the copy between local segments differs".into() })
    };
    run().unwrap_or_else(err)
}

/// `ERR <variant> <text>`: a refusal as the parent matches it.
fn err(e: Error) -> String {
    format!("ERR {} {e}", support::variant_name(&e))
}

/// The answer to a command that yields nothing.
fn done(r: lanes::Result<()>) -> String {
    r.map_or_else(err, |()| "OK".to_string())
}

/// The answer to a command that reads a word.
fn value(r: lanes::Result<u64>) -> String {
    r.map_or_else(err, |v| format!("OK {v}"))
}

/// Stores `v` at `offset` of `map` through its raw pointer (`Map::as_ptr`), bypassing the
/// map's methods.
fn raw_store(map: &Map, offset: usize, v: u64) {
    assert!(offset + 8 <= map.len() && offset % 8 == 0, "a raw store inside the map");
    let p = map.as_ptr();
    assert!(!p.is_null(), "a raw pointer");
    // SAFETY: in bounds and aligned (asserted; a group write map's raw pointer is the start
    // of a page-aligned buffer); the pointer is valid while the map lives, and a volatile
    // store is how a program's own store looks.
    unsafe { std::ptr::write_volatile(p.add(offset).cast::<u64>(), v) };
}

#[test]
fn child_entry() {
    support::child_entry(|role, io| {
        if role != "refl" {
            return false;
        }
        refl(io);
        true
    });
}

/// A `refl` child acting as `node` on its host.
fn spawn(t: &Topology, node: u32, name: &str) -> Proc {
    let env = t.env(node);
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut p = Proc::spawn_in(&t.prefix(node), name, "refl", &envs);
    assert_eq!(p.line("READY"), "READY", "{name}");
    p
}

/// Sends `cmd`, returns the reply (`OK ...`, `ERR ...` or `FAIL ...`).
fn ask(p: &mut Proc, cmd: &str, limit: Duration) -> String {
    p.send(cmd);
    p.line_within(&format!("the answer to {cmd:?}"), limit)
}

fn ok(p: &mut Proc, cmd: &str) -> String {
    let r = ask(p, cmd, Duration::from_secs(30));
    assert!(r.starts_with("OK"), "{} answered {cmd:?} with {r}\n{}", p.name(), p.output_snapshot());
    r
}

/// A group of `bytes` created on host a (node 8), joined from b (node 12) and c (node 16),
/// once the creator lists both members.
fn three_members(t: &Topology, bytes: u64) -> (Proc, Proc, Proc) {
    let mut a = spawn(t, 8, "creator on a");
    ok(&mut a, &format!("create {GROUP} {bytes}"));
    let mut b = spawn(t, 12, "member on b");
    ok(&mut b, &format!("join {GROUP} 10000"));
    let mut c = spawn(t, 16, "member on c");
    ok(&mut c, &format!("join {GROUP} 10000"));
    members_become(&mut a, "OK [12, 16]");
    (a, b, c)
}

/// Whether reply `r` is how a write fails once the creator's copy is gone.
fn failed_for_loss(r: &str) -> bool {
    ["ERR SegmentLost", "ERR Ofi", "ERR NodeUnreachable"].iter().any(|v| r.starts_with(v))
}

/// [`failed_for_loss`], or a DMA queue's report of such a failure.
fn dma_failed_for_loss(r: &str) -> bool {
    failed_for_loss(r) || r.starts_with("ERR DmaFailed")
}

/// Waits until `p`'s member list is `want`.
fn members_become(p: &mut Proc, want: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let got = ok(p, "members");
        if got == want {
            return;
        }
        assert!(Instant::now() < until, "{}: members {got}, waiting for {want}", p.name());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A group created on host a, joined from b and c; writers on a and b, every other member
/// follows each writer's records (whole, in order); all copies end equal; a late joiner on c
/// finds the current contents and sees records written after it joined; it leaves.
fn group_across_hosts(t: &Topology) {
    let mut a = spawn(t, 8, "creator on a");
    ok(&mut a, &format!("create {GROUP} {GROUP_BYTES}"));
    let mut b = spawn(t, 12, "member on b");
    assert_eq!(ok(&mut b, &format!("join {GROUP} 10000")), format!("OK {GROUP_BYTES}"));
    let mut c = spawn(t, 16, "member on c");
    ok(&mut c, &format!("join {GROUP} 10000"));
    members_become(&mut a, "OK [12, 16]");
    assert_eq!(ok(&mut c, "members"), "OK [8, 12]");

    // Second processes of nodes 8 and 12 join and write at the same time: writer 0 on
    // host a, writer 1 on host b. The first processes follow the other host's writer while
    // it writes, c follows writer 0 and then checks writer 1's last record.
    let mut a2 = spawn(t, 8, "second process of a");
    ok(&mut a2, &format!("join {GROUP} 10000"));
    let mut b2 = spawn(t, 12, "second process of b");
    ok(&mut b2, &format!("join {GROUP} 10000"));
    members_become(&mut a, "OK [8, 12, 12, 16]");
    const COUNT: u64 = 600;
    let last = COUNT - 1;
    let live = FOLLOW + Duration::from_secs(5);
    a.send(&format!("follow 1 {last}"));
    b.send(&format!("follow 0 {last}"));
    c.send(&format!("follow 0 {last}"));
    a2.send(&format!("write 0 0 {COUNT}"));
    b2.send(&format!("write 1 0 {COUNT}"));
    for (p, what) in [
        (&mut a2, "writer 0's writes"),
        (&mut b2, "writer 1's writes"),
        (&mut a, "a's follow of writer 1"),
        (&mut b, "b's follow of writer 0"),
        (&mut c, "c's follow of writer 0"),
    ] {
        let r = p.line_within(what, live);
        assert!(r.starts_with("OK"), "{what}: {r}\n{}", p.output_snapshot());
    }
    ok(&mut c, &format!("follow 1 {last}"));

    // Every copy holds the same bytes.
    let sum = format!("sum 0 {GROUP_BYTES}");
    let want = ok(&mut a, &sum);
    for p in [&mut b, &mut c, &mut a2, &mut b2] {
        assert_eq!(ok(p, &sum), want, "{} differs from the creator's copy", p.name());
    }

    // A late joiner on c finds the current contents, then sees what is written after it.
    let mut late = spawn(t, 16, "late joiner on c");
    ok(&mut late, &format!("join {GROUP} 10000"));
    assert_eq!(ok(&mut late, &sum), want, "the late joiner's copy");
    ok(&mut late, &format!("follow 1 {last}"));
    late.send(&format!("follow 2 {}", COUNT + 99));
    ok(&mut b2, &format!("write 2 {COUNT} {}", COUNT + 100));
    let r = late.line_within("the late joiner's follow of writer 2", FOLLOW + Duration::from_secs(5));
    assert!(r.starts_with("OK"), "late joiner following writer 2: {r}");
    ok(&mut a, &format!("follow 2 {}", COUNT + 99));

    // It leaves: the creator's roster forgets it.
    members_become(&mut a, "OK [8, 12, 12, 16, 16]");
    ok(&mut late, "leave");
    members_become(&mut a, "OK [8, 12, 12, 16]");
    // Writes after the leave still reach everyone else, without an error at the writer.
    ok(&mut a2, "write 3 0 1");
    ok(&mut b, "follow 3 0");
    ok(&mut c, "follow 3 0");
    for p in [&mut a, &mut a2, &mut b, &mut b2, &mut c, &mut late] {
        p.send("exit");
    }
}

/// Bad input gets clear errors, promptly: a group nobody created (at once and after a
/// timeout), an offset past the group's end, a store through the read map, a second group
/// with the id of one that exists on another host, a fifth group in the cluster, and a
/// group created while a host is suspect.
fn group_refusals_across_hosts(t: &Topology) {
    let mut a = spawn(t, 8, "creator on a");
    ok(&mut a, &format!("create {GROUP} 4096"));
    let mut b = spawn(t, 12, "member on b");
    let started = Instant::now();
    let r = ask(&mut b, "join 99 imm", Duration::from_secs(10));
    assert!(r.starts_with("ERR NoSuchGroup"), "{r}");
    let r = ask(&mut b, "join 99 300", Duration::from_secs(10));
    assert!(r.starts_with("ERR Timeout"), "{r}");
    assert!(started.elapsed() < Duration::from_secs(8), "refusals took {:?}", started.elapsed());
    let r = ask(&mut b, &format!("create {GROUP} 4096"), Duration::from_secs(10));
    assert!(r.starts_with("ERR GroupInUse"), "a second group {GROUP} on another host: {r}");
    assert!(r.contains("node 8"), "{r}");
    ok(&mut b, &format!("join {GROUP} 10000"));
    let r = ask(&mut b, "w64 4096 1", Duration::from_secs(10));
    assert!(r.starts_with("ERR OutOfRange"), "{r}");
    let r = ask(&mut b, "w64 4092 1", Duration::from_secs(10));
    assert!(r.starts_with("ERR OutOfRange"), "{r}");
    let r = ask(&mut b, "ro64 0 1", Duration::from_secs(10));
    assert!(r.starts_with("ERR ReadOnly"), "{r}");
    // Plain maps of the member's connection would reach the creator's copy only.
    let r = ask(&mut b, "segmap", Duration::from_secs(10));
    assert!(r.starts_with("ERR IllegalOperation"), "{r}");
    // Four groups in the whole cluster, wherever they were created: a fifth is refused on
    // every host; removing one makes room.
    let mut c = spawn(t, 16, "creator on c");
    for id in [1, 2, 3] {
        ok(&mut c, &format!("create {id} 4096"));
    }
    for p in [&mut a, &mut b] {
        let r = ask(p, "create 4 4096", Duration::from_secs(10));
        assert!(r.starts_with("ERR TooManyGroups"), "{}: a fifth group: {r}", p.name());
    }
    ok(&mut c, "dropextra");
    ok(&mut b, "create 4 4096");
    // A host that cannot answer (its daemon stopped: Suspect) might hold the id: no group
    // is created meanwhile; joining a group elsewhere still works.
    let cluster = t.cluster().expect("ofi topologies have daemons");
    let daemon_c = cluster.daemon_pid(2) as libc::pid_t;
    // SAFETY: signals a daemon process this test started.
    assert_eq!(unsafe { libc::kill(daemon_c, libc::SIGSTOP) }, 0);
    cluster.wait_state(0, 2, lanes::cluster::HostState::Suspect, Duration::from_secs(10));
    let r = ask(&mut a, "create 5 4096", Duration::from_secs(10));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(daemon_c, libc::SIGCONT) }, 0);
    assert!(r.starts_with("ERR NodeUnreachable"), "creation while host c is suspect: {r}");
    cluster.wait_state(0, 2, lanes::cluster::HostState::Operational, Duration::from_secs(10));
    cluster.wait_state(1, 2, lanes::cluster::HostState::Operational, Duration::from_secs(10));
    ok(&mut b, "dropextra");
    // Heartbeats on a loaded machine may make a host suspect for a moment: retried.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let r = ask(&mut a, "create 5 4096", Duration::from_secs(10));
        if r.starts_with("OK") {
            break;
        }
        assert!(r.starts_with("ERR NodeUnreachable") && Instant::now() < until, "create 5 after resuming c: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.send("exit");

    // The refusals broke nothing: a write still arrives.
    ok(&mut b, "w64 0 5");
    a.send("follow 0 1");
    let r = ask(&mut b, "write 0 0 2", Duration::from_secs(30));
    assert!(r.starts_with("OK"), "{r}");
    assert!(a.line("follow").starts_with("OK"));
    // The creator removes the group (drops it): members on other hosts hear the loss, and
    // their writes fail.
    let r = ask(&mut b, "event 100", Duration::from_secs(10));
    assert!(r.starts_with("ERR Timeout"), "no event before the removal: {r}");
    ok(&mut a, "leave");
    assert_eq!(ok(&mut b, "event 5000"), "OK lost Removed");
    let r = ask(&mut b, "write 0 5 6", Duration::from_secs(10));
    assert!(r.starts_with("ERR SegmentLost"), "a write after the removal: {r}");
    for p in [&mut a, &mut b] {
        p.send("exit");
    }
}

/// A member killed with SIGKILL: writers on the other hosts go on without an error and
/// without stalling, and the creator's roster forgets the dead member. Then the creator
/// is killed: writes and DMA fail with an error instead of hanging, the member hears the
/// loss, and leaving is bounded.
fn group_member_killed(t: &Topology) {
    let (mut a, mut b, mut c) = three_members(t, GROUP_BYTES);
    ok(&mut b, "write 0 0 50");
    ok(&mut c, "follow 0 49");
    c.kill9();
    let started = Instant::now();
    members_become(&mut a, "OK [12]");
    println!("the creator forgot the dead member after {:?}", started.elapsed());
    a.send("follow 0 249");
    let r = ask(&mut b, "write 0 50 250", Duration::from_secs(30));
    assert!(r.starts_with("OK"), "a writer after a member's death: {r}");
    // A writer that still posts to the dead member gives it up within 2 s (a liveness
    // bound: below the 10 s any wait of a write map may take).
    let took = started.elapsed();
    println!("written after {took:?}");
    assert!(took < Duration::from_secs(8), "the writer stalled for {took:?}");
    assert!(a.line("follow").starts_with("OK"));
    // The creator is killed: a member's writes fail (its copy is unreachable) within the
    // bound of one wait, later ones without waiting again; leaving is bounded too.
    a.kill9();
    let killed = Instant::now();
    let r = ask(&mut b, "write 0 250 260", Duration::from_secs(60));
    println!("writing after the creator's death: {r} after {:?}", killed.elapsed());
    assert!(failed_for_loss(&r), "writes after the creator's death: {r}");
    let again = Instant::now();
    let r = ask(&mut b, "write 0 260 270", Duration::from_secs(60));
    println!("and again: {r} after {:?}", again.elapsed());
    assert!(failed_for_loss(&r), "{r}");
    // DMA into the group fails too (at its start, or in the queue), within the same bound.
    let dma = Instant::now();
    let r = ask(&mut b, "dmaw 0 4096 1", Duration::from_secs(60));
    println!("DMA after the creator's death: {r} after {:?}", dma.elapsed());
    assert!(dma_failed_for_loss(&r), "{r}");
    // The daemons relay the creator's death: the member hears it as the group's loss.
    assert_eq!(ok(&mut b, "event 5000"), "OK lost OwnerDied");
    let left = Instant::now();
    ok(&mut b, "leave");
    println!("left after {:?}", left.elapsed());
    assert!(killed.elapsed() < Duration::from_secs(30), "took {:?}", killed.elapsed());
    b.send("exit");
}

/// Stores through the write maps' raw pointers reach every member (as SISCI programs make
/// them through `SCIGetMapPointer`): flushed, or drained by the service thread; a method's
/// write and a raw store to the same bytes land in program order; a writer's raw stores do
/// not carry other members' writes back to them; maps of part of the group work both ways.
fn raw_stores_across_hosts(t: &Topology) {
    let (mut a, mut b, mut c) = three_members(t, 65536);
    let seen = |p: &mut Proc, at: u64, v: u64| ok(p, &format!("await64 {at} {v} 10000"));

    // The creator's raw store, flushed, reaches both members.
    ok(&mut a, "rawput 0 11");
    ok(&mut a, "flush");
    seen(&mut b, 0, 11);
    seen(&mut c, 0, 11);
    // A member's raw store without a flush: the service thread posts it.
    ok(&mut b, "rawput 8 22");
    seen(&mut a, 8, 22);
    seen(&mut c, 8, 22);
    // Its own loads through the map's methods see it at once.
    assert_eq!(ok(&mut b, "rawthenread 48 5"), "OK 5");
    // The same value stored again after another member overwrote it: sent again once the
    // map was refreshed (a map compares raw stores with what it last had there).
    ok(&mut a, "rawput 56 1");
    ok(&mut a, "flush");
    seen(&mut b, 56, 1);
    ok(&mut b, "w64 56 2");
    ok(&mut b, "flush");
    seen(&mut a, 56, 2);
    ok(&mut a, "rawagain 56 1");
    seen(&mut b, 56, 1);
    seen(&mut c, 56, 1);
    // Program order between a method's write and a raw store to the same bytes.
    ok(&mut b, "w64 16 33");
    ok(&mut b, "rawput 16 44");
    ok(&mut b, "rawput 24 55");
    ok(&mut b, "w64 24 66");
    ok(&mut b, "flush");
    seen(&mut a, 16, 44);
    seen(&mut a, 24, 66);
    assert_eq!(ok(&mut b, "rd64 24"), "OK 66");
    // c writes word 32; then b stores raw elsewhere: b's stale view of word 32 (0 in its raw
    // buffer) is not sent back over c's write.
    ok(&mut c, "w64 32 77");
    ok(&mut c, "flush");
    seen(&mut b, 32, 77);
    ok(&mut b, "rawput 40 88");
    ok(&mut b, "flush");
    seen(&mut a, 40, 88);
    seen(&mut c, 40, 88);
    for p in [&mut a, &mut b, &mut c] {
        assert_eq!(ok(p, "rd64 32"), "OK 77", "{}", p.name());
    }
    // Maps of part of the group: a raw store at offset 8 of a map from 4096 is group byte 4104.
    ok(&mut c, "subraw 4096 4096 8 99");
    seen(&mut a, 4104, 99);
    seen(&mut b, 4104, 99);
    assert_eq!(ok(&mut b, "subread 4096 4096 8"), "OK 99");
    ok(&mut a, "subraw 60000 8 0 7");
    seen(&mut c, 60000, 7);
    // A map past the group's end is refused.
    for p in [&mut a, &mut b] {
        assert!(ask(p, "subraw 61440 8192 0 1", Duration::from_secs(10)).starts_with("ERR OutOfRange"));
        assert!(ask(p, "subread 0 0 0", Duration::from_secs(10)).starts_with("ERR InvalidSize"));
    }
    for p in [&mut a, &mut b, &mut c] {
        p.send("exit");
    }
}

/// A member on another host hears the others join, leave and die (from the roster), and
/// then the group's removal; the creator's second process counts as a member.
fn member_events_across_hosts(t: &Topology) {
    let mut a = spawn(t, 8, "creator on a");
    ok(&mut a, &format!("create {GROUP} 4096"));
    let mut b = spawn(t, 12, "member on b");
    ok(&mut b, &format!("join {GROUP} 10000"));
    assert!(ask(&mut b, "event 200", Duration::from_secs(10)).starts_with("ERR Timeout"), "nobody else yet");
    let event = |b: &mut Proc| ok(b, "event 10000");
    let mut c = spawn(t, 16, "member on c");
    ok(&mut c, &format!("join {GROUP} 10000"));
    assert_eq!(event(&mut b), format!("OK Joined {{ node: 16, pid: {} }}", c.pid()));
    let mut c2 = spawn(t, 16, "second member on c");
    ok(&mut c2, &format!("join {GROUP} 10000"));
    assert_eq!(event(&mut b), format!("OK Joined {{ node: 16, pid: {} }}", c2.pid()));
    let mut a2 = spawn(t, 8, "second process of a");
    ok(&mut a2, &format!("join {GROUP} 10000"));
    assert_eq!(event(&mut b), format!("OK Joined {{ node: 8, pid: {} }}", a2.pid()));
    ok(&mut c, "leave");
    assert_eq!(event(&mut b), format!("OK Left {{ node: 16, pid: {}, died: false }}", c.pid()));
    let killed = Instant::now();
    let pid = c2.pid();
    c2.kill9();
    assert_eq!(event(&mut b), format!("OK Left {{ node: 16, pid: {pid}, died: true }}"));
    println!("a member on another host heard the death after {:?}", killed.elapsed());
    // The creator removes the group: the loss is the last event.
    ok(&mut a, "leave");
    assert_eq!(event(&mut b), "OK lost Removed");
    for p in [&mut a, &mut b, &mut c, &mut a2] {
        p.send("exit");
    }
}

/// DMA through a membership's connection reaches every member's copy: when a write's wait
/// returns, every member reads it at once; a read gives the member's copy; vectors and
/// program memory work; a range past the group (inside its object, which also holds the
/// roster) is refused; after the group's removal DMA fails.
fn dma_into_a_group_across_hosts(t: &Topology) {
    const DMA_GROUP: u64 = 8 << 20;
    let (mut a, mut b, mut c) = three_members(t, DMA_GROUP);
    let sum = |len: u64, seed: u64| format!("OK {:016x}", support::fnv64(&pattern(len, seed)));

    // b writes 40000 bytes from a segment in two entries: complete means everywhere.
    ok(&mut b, "dmaw 4096 40000 1");
    for p in [&mut a, &mut b, &mut c] {
        assert_eq!(ok(p, "sum 4096 40000"), sum(40000, 1), "{}", p.name());
    }
    // c writes from program memory, over part of b's bytes.
    ok(&mut c, "dmamem 4000 200 2");
    for p in [&mut a, &mut b, &mut c] {
        assert_eq!(ok(p, "sum 4000 200"), sum(200, 2), "{}", p.name());
    }
    // The whole group (large enough that its posts are still under way for a while after
    // they start), then a read of part of it through each member's connection.
    ok(&mut b, &format!("dmaw 0 {DMA_GROUP} 3"));
    for p in [&mut a, &mut c] {
        assert_eq!(ok(p, &format!("sum 0 {DMA_GROUP}")), sum(DMA_GROUP, 3), "{}", p.name());
    }
    let tail: Vec<u8> = pattern(DMA_GROUP, 3)[(DMA_GROUP - 5536) as usize..].to_vec();
    let tail = format!("OK {:016x}", support::fnv64(&tail));
    for p in [&mut b, &mut c] {
        assert_eq!(ok(p, &format!("dmar {} 5536", DMA_GROUP - 5536)), tail, "{}", p.name());
    }
    // An abort with group transfers queued ends the wait (bounded: at most the transfer
    // under way finishes).
    let started = Instant::now();
    let r = ok(&mut b, &format!("dmaabort 0 {DMA_GROUP}"));
    println!("four queued group writes aborted: {r} after {:?}", started.elapsed());
    assert!(r == "OK Aborted" || r == "OK Done", "{r}");
    assert!(started.elapsed() < Duration::from_secs(30), "the abort took {:?}", started.elapsed());
    // A method's write and a later DMA to the same bytes land in that order.
    ok(&mut c, "w64 128 5");
    ok(&mut c, "dmamem 128 8 4");
    let word = u64::from_ne_bytes(pattern(8, 4).try_into().expect("8 bytes"));
    ok(&mut a, &format!("await64 128 {word} 10000"));
    ok(&mut b, &format!("await64 128 {word} 10000"));
    // So do a raw store and a DMA: b's unflushed raw store goes out before b's DMA over
    // it (not later, by the drain, over the DMA), and storing that value again afterwards
    // is sent (the map's buffer took the DMA's bytes).
    ok(&mut b, "rawput 72 1");
    ok(&mut b, "dmamem 72 8 5");
    let word = u64::from_ne_bytes(pattern(8, 5).try_into().expect("8 bytes"));
    ok(&mut a, &format!("await64 72 {word} 10000"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(ok(&mut a, "rd64 72"), format!("OK {word}"), "a raw store made before the DMA came after it");
    ok(&mut b, "rawput 72 1");
    ok(&mut b, "flush");
    ok(&mut a, "await64 72 1 10000");
    // Past the group's bytes (the roster follows them in the object): refused.
    let past = [
        format!("dmaw {} 4096 1", DMA_GROUP - 4000),
        format!("dmamem {DMA_GROUP} 8 1"),
        format!("dmar {} 8192", DMA_GROUP - 4096),
    ];
    for cmd in past {
        let r = ask(&mut b, &cmd, Duration::from_secs(10));
        assert!(r.starts_with("ERR OutOfRange") && r.contains("reflective group"), "{cmd}: {r}");
    }
    // The creator removes the group: DMA through the lost connection fails.
    ok(&mut a, "leave");
    assert_eq!(ok(&mut b, "event 5000"), "OK lost Removed");
    let r = ask(&mut b, "dmaw 0 64 5", Duration::from_secs(30));
    assert!(r.starts_with("ERR SegmentLost") || r.starts_with("ERR DmaFailed"), "DMA after the removal: {r}");
    for p in [&mut a, &mut b, &mut c] {
        p.send("exit");
    }
}

/// Three queues on one DMA channel of member b at once: two group writes (each flushed to
/// the other copies by the channel) and a copy between two of b's own segments. All three
/// complete, and every member holds both writes' bytes as soon as b's waits returned.
fn several_queues_on_one_channel_during_a_flush(t: &Topology) {
    const DMA_GROUP: u64 = 8 << 20;
    const HALF: u64 = DMA_GROUP / 2;
    let (mut a, mut b, mut c) = three_members(t, DMA_GROUP);
    let sum = |seed: u64| format!("OK {:016x}", support::fnv64(&pattern(HALF, seed)));
    let started = Instant::now();
    assert_eq!(ask(&mut b, &format!("dmathree 0 {HALF}"), Duration::from_secs(90)), "OK");
    println!("two group writes of {HALF} bytes and a local copy on one channel: {:?}", started.elapsed());
    for p in [&mut a, &mut b, &mut c] {
        assert_eq!(ok(p, &format!("sum 0 {HALF}")), sum(1), "{}: the first queue's write", p.name());
        assert_eq!(ok(p, &format!("sum {HALF} {HALF}")), sum(2), "{}: the second queue's write", p.name());
    }
    for p in [&mut a, &mut b, &mut c] {
        p.send("exit");
    }
}

/// The creator is killed while a member's DMA into the group is under way (four 8 MiB
/// writes, each flushed to both other copies): the member's wait ends with an error within
/// the bound of a fan-out's wait, not with success and not never; its later DMA fails; the
/// surviving member hears the group's loss.
fn group_dma_when_the_creator_dies(t: &Topology) {
    const DMA_GROUP: u64 = 8 << 20;
    let (mut a, mut b, mut c) = three_members(t, DMA_GROUP);
    b.send(&format!("dmalong 0 {DMA_GROUP} 7"));
    assert_eq!(b.line_within("the writes queued", Duration::from_secs(30)), "STARTED");
    a.kill9();
    let killed = Instant::now();
    let r = b.line_within("the end of the writes", Duration::from_secs(60));
    println!("DMA under way when the creator died: {r} after {:?}", killed.elapsed());
    assert!(dma_failed_for_loss(&r), "four 8 MiB group writes when the creator died: {r}");
    assert!(killed.elapsed() < Duration::from_secs(25), "the wait ended after {:?}", killed.elapsed());
    let r = ask(&mut b, "dmaw 0 4096 1", Duration::from_secs(30));
    assert!(dma_failed_for_loss(&r), "DMA after the creator's death: {r}");
    assert_eq!(ok(&mut c, "event 5000"), "OK lost OwnerDied");
    for p in [&mut b, &mut c] {
        ok(p, "leave");
        p.send("exit");
    }
}

support::topology_cases!(
    ;
    ofi: group_across_hosts,
    dma_into_a_group_across_hosts,
    group_dma_when_the_creator_dies,
    several_queues_on_one_channel_during_a_flush,
    member_events_across_hosts,
    raw_stores_across_hosts,
    group_refusals_across_hosts,
    group_member_killed,
);
