//! The fabric across hosts: node processes on hosts a (node 8) and b (node 12), each with
//! its own daemon and fabric directory, reaching each other's objects over libfabric
//! (`topology::ofi::lo::..` on loopback, `topology::ofi::netns::..` across network
//! namespaces). Single-host behaviour is the shm suite's; these cases check what only a
//! second host has: connections granted through the daemons, mirror windows written through
//! at flush and read through, and the owner seeing the remote peer come and go.

// Every case needs the ofi transport.
#![cfg(feature = "ofi")]

// Case names stay short: each host's daemon socket lives in a directory named after the
// case, and a Unix socket path must fit in 108 bytes.

mod support;

use support::{Proc, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

/// A peer on host b connects to a segment on host a, maps it, sees the owner's data, writes
/// its own (delivered by flush, the word of a release store after the data), reads what the
/// owner writes later (read-through), and the owner hears it connect and disconnect.
fn remote_segment_mapped_written_and_read(t: &Topology) {
    const SEG: u32 = 0x20;
    const SIZE: u64 = 256 * 1024 + 13;
    const SEED: u64 = 0x5eed;

    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok(&format!("map m s 0 {SIZE} rw"));
    owner.ok(&format!("wpat m 0 {SIZE} {SEED} 0"));
    owner.ok("available s");

    let mut peer = Proc::node(t, 12);
    assert_eq!(peer.ok(&format!("connect r 8 {SEG} 10000")), format!("node=8 id={SEG} size={SIZE}"));
    let ev = owner.ok("lwait s 5000");
    assert!(ev.starts_with("Connected { node: 12"), "the owner saw {ev:?}");
    assert!(owner.ok("peers s").starts_with("12:"), "a remote peer holds a slot as node 12");

    // The whole segment as the owner wrote it, and windows at odd offsets.
    peer.ok(&format!("map m r 0 {SIZE} rw"));
    peer.ok(&format!("vpat m 0 {SIZE} {SEED} 0"));
    peer.ok("map w r 4097 5000 ro");
    peer.ok(&format!("vpat w 0 5000 {SEED} 4097"));
    peer.err_is("w8 w 0 1", "ReadOnly");
    peer.err_is(&format!("map x r {SIZE} 1 ro"), "OutOfRange");

    // Writes of the peer reach the owner at flush; a release-stored word lands after them.
    peer.ok("wpat m 1000 70000 77 1000");
    peer.ok("rel64 m 80000 4242");
    peer.ok("flush m");
    owner.ok("waitacq64 m 80000 4242 5000");
    owner.ok("vpat m 1000 70000 77 1000");
    // Bytes the peer did not write stay the owner's.
    owner.ok(&format!("vpat m 0 1000 {SEED} 0"));
    owner.ok(&format!("vpat m 71000 9000 {SEED} 71000"));

    // Reads through the map see what the owner writes afterwards.
    owner.ok("wpat m 200000 3000 99 0");
    peer.ok("vpat m 200000 3000 99 0");
    assert_eq!(peer.ok("r64 m 80000"), "4242");

    peer.ok("disconnect r");
    let ev = owner.ok("lwait s 5000");
    assert!(ev.starts_with("Disconnected { node: 12"), "the owner saw {ev:?}");
    assert_eq!(owner.ok("peers s"), "");
}

/// Connecting to what another host does not have, or has not made available, gives the
/// same distinct errors as on one host, after the timeout.
fn refusals_across_hosts(t: &Topology) {
    let mut owner = Proc::node(t, 8);
    owner.ok("create u 0x31 4096");
    let mut peer = Proc::node(t, 12);
    peer.err_is("connect r 8 0x30 300", "Timeout");
    let e = peer.err_is("connect r 8 0x31 300", "Timeout");
    assert!(e.to_string().contains("not available"), "{e}");
    peer.err_is("connect r 8 0x30 imm", "NoSuchSegment");
    peer.err_is("connect r 8 0x31 imm", "NotAvailable");
    // A node no [[node]] lists, that no process acts as: said at once, not after the
    // 30-s timeout (10 s is a generous bound for "at once").
    let asked = Instant::now();
    let e = peer.err_is("connect r 100 0x30 30000", "Cluster");
    assert!(e.display.contains("node 100 is not in lanes.toml"), "{e}");
    assert!(asked.elapsed() < Duration::from_secs(10), "refused only after {:?}", asked.elapsed());
}

/// What the owner does to a connected segment reaches the peer as events, on one host and
/// across hosts: unavailable and available again, its death, a forced removal. Probing a
/// node answers whether a process acts as it, wherever it lives.
fn owner_changes_seen(t: &Topology) {
    let notice = t.bounds().notice;
    if t.cluster().is_none() {
        // One host: node events need a cluster, and say so.
        let mut p = Proc::node(t, 12);
        let e = p.err_is("nodeevents", "Cluster");
        assert!(e.display.contains("[cluster]"), "{e}");
    }
    let mut owner = Proc::node(t, 8);
    owner.ok("create s 0x50 8192");
    owner.ok("prepare s");
    owner.ok("map m s 0 8192 rw");
    owner.ok("wpat m 0 8192 5 0");
    owner.ok("available s");
    let mut peer = Proc::node(t, 12);
    peer.ok("connect r 8 0x50 10000");
    peer.ok("map m r 0 8192 ro");
    assert_eq!(peer.ok("probe 8"), "true");
    assert_eq!(peer.ok("probe 16"), "false", "no process acts as node 16");

    owner.ok("unavailable s");
    assert_eq!(peer.ok(&format!("rwait r {}", notice.as_millis())), "NotOperational");
    peer.ok("vpat m 0 8192 5 0"); // maps of an unavailable segment still work
    owner.ok("available s");
    assert_eq!(peer.ok(&format!("rwait r {}", notice.as_millis())), "Operational");

    // A forced removal while the peer is connected.
    owner.ok("create s2 0x51 4096");
    owner.ok("prepare s2");
    owner.ok("available s2");
    peer.ok("connect r2 8 0x51 10000");
    owner.ok("remove s2 1");
    assert_eq!(peer.ok(&format!("rwait r2 {}", notice.as_millis())), "Lost(Removed)");

    // The owner's death.
    let killed = std::time::Instant::now();
    owner.kill9();
    assert_eq!(peer.ok(&format!("rwait r {}", notice.as_millis())), "Lost(OwnerDied)");
    eprintln!("the peer saw the owner's death after {:?}", killed.elapsed());
    peer.err_is("check r", "SegmentLost");
    assert_eq!(peer.ok("probe 8"), "false", "nobody acts as node 8 any more");
}

support::topology_cases!(
    owner_changes_seen;
    ofi: remote_segment_mapped_written_and_read,
    refusals_across_hosts,
    owner_changes_seen,
);

// ---------------------------------------------------------------------------------------
// Failures of hosts and daemons: these need to cut links and kill daemons, so they hold
// their cluster mutably and are not conformance cases.
// ---------------------------------------------------------------------------------------

use std::time::{Duration, Instant};

use lanes::cluster::HostState;
use support::cluster::{LOST_MS, SUSPECT_MS};

const A: usize = 0;
const B: usize = 1;

/// An owner on host a (node 8) with segment 0x60 of `size` bytes, patterned with seed 1 and
/// available, and a peer on host b (node 12) connected to it as `r` and mapped as `m`.
fn owner_and_peer(t: &Topology, size: u64) -> (Proc, Proc) {
    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s 0x60 {size}"));
    owner.ok("prepare s");
    owner.ok(&format!("map m s 0 {size} rw"));
    owner.ok(&format!("wpat m 0 {size} 1 0"));
    owner.ok("available s");
    let mut peer = Proc::node(t, 12);
    peer.ok("connect r 8 0x60 10000");
    assert!(owner.ok("lwait s 5000").starts_with("Connected { node: 12"));
    peer.ok(&format!("map m r 0 {size} rw"));
    (owner, peer)
}

/// Runs `f` and checks it returned within `bound`.
fn within<T>(what: &str, bound: Duration, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    let took = started.elapsed();
    eprintln!("{what}: {took:?}");
    assert!(took <= bound, "{what} took {took:?}, more than {bound:?}");
    out
}

/// Host b's link is cut while its peer has a map of a segment on host a and a DMA transfer
/// to another in flight: within the bound the connection is NotOperational, the transfer
/// fails, writes and flushes fail with NodeUnreachable at once (nothing hangs); the link restored, it is Operational again and writes arrive. Cut past
/// `lost_after`, the connection is Lost(NodeLost), the owner sees its peer die, and a new
/// connection works once the link is back.
fn link_cut(t: &Topology) {
    let Topology::OfiNetns(c) = t else { unreachable!("a link cut needs namespaces") };
    let ns = c.namespaces().expect("namespaces");
    let bound = t.bounds().notice;
    let (mut owner, mut peer) = owner_and_peer(t, 65536);
    peer.ok("w64 m 0 11");
    peer.ok("flushc m");
    assert_eq!(owner.ok("r64 m 0"), "11");

    // A DMA transfer of 256 MiB in flight when the link goes down.
    const BIG: u64 = 256 << 20;
    owner.ok(&format!("create d 0x61 {BIG}"));
    owner.ok("prepare d");
    owner.ok("available d");
    peer.ok(&format!("create l 0x70 {BIG}"));
    peer.ok("connect rd 8 0x61 10000");
    peer.ok("dmaq q 16");
    peer.ok(&format!("dmastart q l rd write {BIG}:0:0"));

    ns.set_link(B, false);
    let ev = within("NotOperational after the cut", bound, || peer.ok(&format!("rwait r {}", bound.as_millis())));
    assert_eq!(ev, "NotOperational");
    let e = within("the DMA transfer failing after the cut", bound, || {
        peer.err_is(&format!("dmawait q {}", bound.as_millis()), "DmaFailed")
    });
    assert!(e.display.contains("does not respond") || e.display.contains("RMA"), "{e}");
    let e = peer.err_is("w64 m 8 22", "NodeUnreachable");
    assert!(e.display.contains("node 8"), "{e}");
    // A new connection to the silent host, retried within its timeout, says why it could
    // not be made.
    let e = peer.err_is("connect x 8 0x60 500", "Timeout");
    assert!(e.display.contains("host a unreachable"), "{e}");
    within("a flush towards a silent host", bound, || peer.err_is("flushc m", "NodeUnreachable"));
    ns.set_link(B, true);
    let ev = within("Operational after the restore", bound, || peer.ok(&format!("rwait r {}", bound.as_millis())));
    assert_eq!(ev, "Operational");
    peer.ok("w64 m 16 33");
    peer.ok("flushc m");
    assert_eq!(owner.ok("r64 m 16"), "33");
    assert_eq!(peer.ok("state rd"), "Operational");
    // DMA works again on a new queue, checked at the owner.
    peer.ok("map lm l 0 1048576 rw");
    peer.ok("wpat lm 0 1048576 9 0");
    peer.ok("dmaq q2 16");
    peer.ok("dma q2 l rd 0 1048576 0 write");
    owner.ok("map dm d 0 1048576 ro");
    owner.ok("vpat dm 0 1048576 9 0");
    // A write refused while the host was silent never arrives: the owner's pattern stays.
    owner.ok("vpat m 8 8 1 8");

    // Down past lost_after: lost for good; the owner's slot is released.
    ns.set_link(B, false);
    assert_eq!(peer.ok(&format!("rwait r {}", bound.as_millis())), "NotOperational");
    let lost_by = Duration::from_millis(LOST_MS) + bound;
    let ev = within("Lost after the cut", lost_by, || peer.ok(&format!("rwait r {}", lost_by.as_millis())));
    assert_eq!(ev, "Lost(NodeLost)");
    let ev = owner.ok(&format!("lwait s {}", lost_by.as_millis()));
    assert!(ev.starts_with("Disconnected { node: 12") && ev.contains("died: true"), "the owner saw {ev:?}");
    peer.err_is("check r", "SegmentLost");
    ns.set_link(B, true);
    c.wait_state(B, A, HostState::Operational, bound);
    peer.ok("disconnect r");
    peer.ok("connect r 8 0x60 10000");
    peer.ok("map v r 0 65536 ro");
    peer.ok("vpat v 24 1000 1 24");
}

/// Writes `rounds` values at offset 0 of the peer's map `m` of the owner's segment, each
/// flushed and read back at the owner: the data path from b to a works.
fn stream(owner: &mut Proc, peer: &mut Proc, value: &mut u64, rounds: usize) {
    for _ in 0..rounds {
        *value += 1;
        peer.ok(&format!("w64 m 0 {value}"));
        peer.ok("flushc m");
        assert_eq!(owner.ok("r64 m 0"), value.to_string());
    }
}

/// As [`stream`], for `how_long`.
fn stream_for(owner: &mut Proc, peer: &mut Proc, value: &mut u64, how_long: Duration) {
    let until = Instant::now() + how_long;
    while Instant::now() < until {
        stream(owner, peer, value, 5);
    }
}

/// Waits until the daemons' logs say `what` `n` times in all.
fn wait_log(c: &support::cluster::Cluster, what: &str, n: usize, bound: Duration) {
    let until = Instant::now() + bound;
    while c.logs().matches(what).count() < n {
        assert!(Instant::now() < until, "no {what:?} ({n}) within {bound:?}\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Neither side heard anything: no node event, no connection event, no owner event.
fn nothing_heard(owner: &mut Proc, peer: &mut Proc) {
    peer.err_is("rwait r 300", "Timeout");
    owner.err_is("lwait s 300", "Timeout");
    let e = peer.err_is("nodewait 8 300", "Test");
    assert!(e.display.contains("no event of node 8"), "{e}");
    assert_eq!(peer.ok("state r"), "Operational");
}

/// A killed daemon is a restart, not a loss (docs/design/multi-host.md, section 9): the data
/// goes from process to process, and the daemons reconcile the grants when the daemon is
/// back. While the owner's daemon is dead (longer than `suspect_after`: host a still
/// answers connects, refused) and after its restart, the peer on b keeps writing to the
/// owner's segment, each write checked at the owner, and neither side hears any event: no
/// NotOperational, no Lost, no Disconnected. The restarted daemon took the grant over from
/// the slot (b's daemon told it what b's processes hold). The same for the peer's own
/// daemon: the peer registers its grant with the new daemon. Finally the peer's disconnect
/// reaches the owner as a clean one, through both restarted daemons.
fn killed_daemon(t: &mut Topology) {
    let bound = t.bounds().notice;
    let (mut owner, mut peer) = owner_and_peer(t, 4096);
    peer.ok("nodeevents");
    let mut value = 100;
    stream(&mut owner, &mut peer, &mut value, 5);
    let c = t.cluster_mut().expect("an ofi topology");

    // The owner's daemon.
    c.daemon(A).kill9();
    stream_for(&mut owner, &mut peer, &mut value, Duration::from_millis(SUSPECT_MS * 6 / 5));
    assert_eq!(peer.ok("state r"), "Operational");
    c.start_daemon(A);
    wait_log(c, "holds 1 grants of this host: reconciled", 1, bound * 2);
    assert!(c.logs().contains("taken over from an earlier daemon"), "{}", c.logs());
    stream(&mut owner, &mut peer, &mut value, 20);
    nothing_heard(&mut owner, &mut peer);

    // The peer's own daemon.
    c.daemon(B).kill9();
    stream_for(&mut owner, &mut peer, &mut value, Duration::from_millis(SUSPECT_MS * 6 / 5));
    // A new connection needs the daemon, and says so.
    let e = peer.err_is("connect x 8 0x60 500", "Cluster");
    assert!(e.display.contains("no daemon on this host"), "{e}");
    assert_eq!(peer.ok("state r"), "Operational");
    c.start_daemon(B);
    wait_log(c, "registered again by its holder", 1, bound * 2);
    wait_log(c, "holds 1 grants of this host: reconciled", 2, bound * 2);
    // The program's own subscription (`Fabric::node_events`) ended with its daemon.
    let e = peer.err_is("nodewait 8 300", "Test");
    assert!(e.display.contains("the daemon closed the connection"), "{e}");
    peer.ok("nodeevents");
    stream(&mut owner, &mut peer, &mut value, 20);
    nothing_heard(&mut owner, &mut peer);

    // The grant lives on the peer's new daemon connection and in the owner's new daemon.
    peer.ok("disconnect r");
    let ev = owner.ok(&format!("lwait s {}", bound.as_millis()));
    assert!(ev.starts_with("Disconnected { node: 12") && ev.contains("died: false"), "the owner saw {ev:?}");
    peer.ok("connect r 8 0x60 10000");
    assert!(owner.ok("lwait s 5000").starts_with("Connected { node: 12"));
    peer.ok("map v r 0 4096 ro");
    assert_eq!(peer.ok("r64 v 0"), value.to_string());
}

/// A peer process killed while its host's daemon is dead goes unnoticed until the daemon
/// is back; then its grant is nobody's (it did not register again), and the owner sees it
/// die. A process that stays registers again, and its connection lives on.
fn killed_daemon_and_peer(t: &mut Topology) {
    let bound = t.bounds().notice;
    let (mut owner, mut peer) = owner_and_peer(t, 4096);
    let mut other = Proc::node(t, 12);
    other.ok("connect r 8 0x60 10000");
    other.ok("map m r 0 4096 rw");
    assert!(owner.ok("lwait s 5000").starts_with("Connected { node: 12"));
    let c = t.cluster_mut().expect("an ofi topology");
    c.daemon(B).kill9();
    other.kill9();
    c.start_daemon(B);
    let ev = owner.ok(&format!("lwait s {}", (bound * 2).as_millis()));
    assert!(ev.starts_with("Disconnected { node: 12") && ev.contains("died: true"), "the owner saw {ev:?}");
    let mut value = 7;
    stream(&mut owner, &mut peer, &mut value, 20);
    peer.err_is("rwait r 300", "Timeout");
    owner.err_is("lwait s 300", "Timeout");
}

/// A host that restarted (its epoch is new: here a fresh fabric directory instance, as
/// after a reboot, with its processes gone) is Lost, as before.
fn restarted_host(t: &mut Topology) {
    let bound = t.bounds().notice;
    let (mut owner, mut peer) = owner_and_peer(t, 4096);
    let c = t.cluster_mut().expect("an ofi topology");
    c.daemon(A).kill9();
    std::fs::remove_file(c.fabric(A).join("host-epoch")).expect("the host epoch file");
    c.start_daemon(A);
    let ev = peer.ok(&format!("rwait r {}", (bound * 2).as_millis()));
    assert_eq!(ev, "Lost(NodeLost)");
    let ev = owner.ok(&format!("lwait s {}", (bound * 2).as_millis()));
    assert!(ev.starts_with("Disconnected { node: 12") && ev.contains("died: true"), "the owner saw {ev:?}");
}

#[test]
fn netns_link_cut() {
    let Some(t) = Topology::ofi_netns("netns-cut") else { return };
    link_cut(&t);
}

/// A writer keeps writing right through the restart of its own host's daemon, also before
/// the restarted daemon has heard from the owner's host (its hello held back here by
/// stopping the owner's daemon): the restarted daemon reports that host Unknown, which
/// must not make the writer's connection NotOperational (a third-party SISCI ping-pong's
/// `SCIMemCpy` failed there with "the daemons call it suspect"). Once the hello goes
/// through, writes go on and neither side heard anything.
fn writes_through_own_daemon_restart_before_hello(t: &mut Topology) {
    let bound = t.bounds().notice;
    // The owner on host b (node 12), the writer on host a (node 8), whose daemon dials b.
    let mut owner = Proc::node(t, 12);
    owner.ok("create s 0x61 4096");
    owner.ok("prepare s");
    owner.ok("map m s 0 4096 rw");
    owner.ok("available s");
    let mut writer = Proc::node(t, 8);
    writer.ok("connect r 12 0x61 10000");
    assert!(owner.ok("lwait s 5000").starts_with("Connected { node: 8"));
    writer.ok("map m r 0 4096 rw");
    let mut value = 500;
    stream(&mut owner, &mut writer, &mut value, 5);
    let c = t.cluster_mut().expect("an ofi topology");

    c.daemon(A).kill9();
    c.daemon(B).signal(libc::SIGSTOP);
    c.start_daemon(A);
    // The writer's node watch subscribes to the new daemon within its retry (100 ms) and
    // registers its grant again; a's hello to b waits for b's daemon.
    std::thread::sleep(Duration::from_millis(300));
    stream_for(&mut owner, &mut writer, &mut value, Duration::from_millis(400));
    assert_eq!(writer.ok("state r"), "Operational");
    c.daemon(B).signal(libc::SIGCONT);
    c.wait_state(A, B, HostState::Operational, bound);
    stream(&mut owner, &mut writer, &mut value, 20);
    writer.err_is("rwait r 300", "Timeout");
    owner.err_is("lwait s 300", "Timeout");
    assert_eq!(writer.ok("state r"), "Operational");
}

#[test]
fn lo_writes_through_own_daemon_restart_before_hello() {
    writes_through_own_daemon_restart_before_hello(&mut Topology::ofi_loopback("lo-kdh"));
}

#[test]
fn netns_writes_through_own_daemon_restart_before_hello() {
    let Some(mut t) = Topology::ofi_netns("netns-kdh") else { return };
    writes_through_own_daemon_restart_before_hello(&mut t);
}

/// A connect whose question reached the owner's daemon, which died before answering it
/// (stopped, then killed, then restarted), still connects within its timeout: the
/// unanswered question is asked again of the restarted daemon (a third-party program's
/// `SCIConnectSegment` with `SCI_INFINITE_TIMEOUT` failed with `SCI_ERR_SYSTEM`, "host b did
/// not answer within 4950 ms", when the owner's daemon was killed during its connect).
fn connect_while_the_owners_daemon_dies(t: &mut Topology) {
    let mut owner = Proc::node(t, 8);
    owner.ok("create s 0x62 4096");
    owner.ok("prepare s");
    owner.ok("available s");
    let mut peer = Proc::node(t, 12);
    let c = t.cluster_mut().expect("an ofi topology");
    c.daemon(A).signal(libc::SIGSTOP);
    let cmd = "connect r 8 0x62 20000";
    peer.start(cmd);
    // b's daemon has sent the question to a's, which holds it unread.
    std::thread::sleep(Duration::from_millis(300));
    c.daemon(A).kill9();
    c.start_daemon(A);
    let got = peer.finish_within(cmd, Duration::from_secs(25));
    assert!(got.is_ok(), "{got:?}\n{}", c.logs());
    assert!(owner.ok("lwait s 5000").starts_with("Connected { node: 12"));
    peer.ok("map v r 0 4096 ro");
}

#[test]
fn lo_connect_while_the_owners_daemon_dies() {
    connect_while_the_owners_daemon_dies(&mut Topology::ofi_loopback("lo-cod"));
}

#[test]
fn netns_connect_while_the_owners_daemon_dies() {
    let Some(mut t) = Topology::ofi_netns("netns-cod") else { return };
    connect_while_the_owners_daemon_dies(&mut t);
}

#[test]
fn lo_killed_daemon() {
    killed_daemon(&mut Topology::ofi_loopback("lo-kd"));
}

#[test]
fn netns_killed_daemon() {
    let Some(mut t) = Topology::ofi_netns("netns-kd") else { return };
    killed_daemon(&mut t);
}

#[test]
fn lo_killed_daemon_and_peer() {
    killed_daemon_and_peer(&mut Topology::ofi_loopback("lo-kdp"));
}

#[test]
fn netns_killed_daemon_and_peer() {
    let Some(mut t) = Topology::ofi_netns("netns-kdp") else { return };
    killed_daemon_and_peer(&mut t);
}

#[test]
fn lo_restarted_host() {
    restarted_host(&mut Topology::ofi_loopback("lo-rh"));
}
