//! The cluster control plane across three hosts a, b and c (first nodes 8, 12 and 16), each with
//! its own daemon and fabric directory, in two topologies:
//!
//! - *loopback*: three daemons on 127.0.0.1 with different ports (no privilege needed);
//! - *netns*: three network namespaces on a bridge (`lanes_testkit::netns`), daemons on
//!   10.77.0.1-3; needs root, skipped with a reason without it unless `CI` is set.
//!
//! The hosts and their daemons are `lanes_testkit::cluster::Cluster`,
//! shared with the ofi topologies of the conformance suite: daemons are children of the
//! test, the test binary re-executed (through `ip netns exec` for netns) in role `daemon`,
//! which calls `lanes::cluster::daemon::run`, as `lanes daemon` does. Timing is shortened
//! (heartbeat 50 ms, Suspect after 1 s, Lost after 2.5 s) and every change must be seen
//! within a generous bound.
//!
//! With the `ofi` feature, `harness_hosts_and_nodes` checks those topologies themselves
//! (`topology::ofi::lo::..` and `topology::ofi::netns::..`), without the data path.
//!
//! Connections to another host's objects (grants): the owner is a `node` child on host a
//! that publishes nothing itself; the test writes its export record (the daemon does not
//! interpret the endpoint). The owner sees the connection as node 12 acting through a's
//! daemon (the proxy record), so its events name a's daemon's pid.

mod support;

use std::time::{Duration, Instant};

use std::path::PathBuf;

use lanes::cluster::{exports, Client, Error, ExportRecord, HostState, NodeEvent, ObjectKind, Refusal};
use lanes::fabric::LocalEvent;
use lanes::platform::liveness::ProcessIdentity;
use lanes::NodeId;
use support::cluster::{Cluster, CALL, HEARTBEAT_MS, LOST_MS, NODES, SUSPECT_MS};
use support::netns::{self, HOSTS};
#[cfg(feature = "ofi")]
use support::Topology;
use support::{ChildIo, Proc};

/// How long a change may take to be noticed, beyond the configured timeouts (CI noise).
const BOUND: Duration = Duration::from_secs(2);

#[test]
fn child_entry() {
    // Roles `node` and `daemon` are support's.
    support::child_entry(|role, io| match role {
        "requester" => run_requester_child(io),
        _ => false,
    });
}

/// A node process on host `k`, on that host's fabric directory (opened with the directory
/// and node, not the cluster configuration: these tests are about the control plane).
fn node_on(c: &Cluster, k: usize) -> Proc {
    Proc::node_in(&c.prefix(k), &c.fabric(k), NODES[k])
}

/// The requester role: a process holding a grant through its daemon (`LANES_DIR`) for
/// `LANES_TEST_OBJECT` = "NODE ID PEER_NODE" (a segment), until it is killed or hung up on.
fn run_requester_child(io: &ChildIo) -> bool {
    let dir = PathBuf::from(std::env::var("LANES_DIR").expect("LANES_DIR"));
    let object = std::env::var("LANES_TEST_OBJECT").expect("LANES_TEST_OBJECT");
    let n: Vec<u32> = object.split_whitespace().map(|v| v.parse().expect("a number")).collect();
    let mut client = Client::connect(&dir, CALL).expect("connecting to the daemon");
    match client.connect_object(node(n[0]), ObjectKind::Segment, n[1], node(n[2]), CALL) {
        Ok(g) => io.send(&format!("GRANTED {}", g.slot)),
        Err(e) => io.send(&format!("REFUSED {e}")),
    }
    io.wait_for_hang_up();
    drop(client);
    true
}

fn node(id: u32) -> NodeId {
    NodeId::new(id).expect("a node id")
}

/// The next event of `sub` for `node`, skipping others, within `bound`.
fn next_event_of(sub: &mut lanes::cluster::Subscription, node: u32, bound: Duration, c: &Cluster) -> NodeEvent {
    let deadline = Instant::now() + bound;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match sub.next_event(left) {
            Ok(Some(ev)) if ev.node == node => return ev,
            Ok(Some(_)) => {}
            Ok(None) => panic!("no event for node {node} within {bound:?}\n{}", c.logs()),
            Err(e) => panic!("subscription failed: {e}\n{}", c.logs()),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Scenarios, each run on both topologies
// ---------------------------------------------------------------------------------------

/// Every daemon sees the others Operational; lookups from b of objects on a's fabric
/// directory give the right answers; probes count processes.
fn discovery_and_lookups(c: &Cluster) {
    for (k, host) in HOSTS.iter().enumerate() {
        let states = c.states(k);
        assert_eq!(states.len(), 3, "{states:?}");
        assert!(states.values().all(|s| *s == HostState::Operational), "{host} sees {states:?}");
    }
    let mut owner = node_on(c, 0);
    owner.ok("create s 0x10 8192");
    owner.ok("prepare s");
    owner.ok("available s");
    owner.ok("create t 0x12 4096"); // created, never made available

    let mut b = c.client(1);
    assert_eq!(b.host(), "b");
    let info = b.lookup(node(8), ObjectKind::Segment, 0x10, CALL).expect("segment 0x10 of node 8");
    assert_eq!((info.host.as_str(), info.node, info.id, info.size), ("a", 8, 0x10, 8192));
    assert!(info.available);
    assert_eq!(info.owner_pid, owner.pid());
    let info = b.lookup(node(8), ObjectKind::Segment, 0x12, CALL).expect("segment 0x12 of node 8");
    assert!(!info.available, "{info:?}");

    let missing = b.lookup(node(8), ObjectKind::Segment, 0x11, CALL).expect_err("no segment 0x11");
    assert!(missing.is_not_found(), "{missing:?}");
    assert_eq!(missing.to_string(), "no segment 0x11 on node 8 (host a)");
    let missing = b.lookup(node(8), ObjectKind::Interrupt, 0x10, CALL).expect_err("no interrupt 0x10");
    assert!(missing.is_not_found(), "{missing:?}");

    // After the owner exits, the segment is gone for lookups too.
    let mut probe = c.client(2).probe_node(node(8), CALL).expect("probe node 8 from c");
    assert!(probe.is_up() && probe.processes == 1 && probe.host == "a", "{probe:?}");
    owner.exit();
    let gone = b.lookup(node(8), ObjectKind::Segment, 0x10, CALL).expect_err("owner gone");
    assert!(gone.is_not_found(), "{gone:?}");
    probe = c.client(2).probe_node(node(8), CALL).expect("probe node 8 again");
    assert_eq!((probe.host_state, probe.processes), (HostState::Operational, 0), "{probe:?}");
    // A node no host lists is this host's (as on one host): b has no process as node 60
    // (the cluster lists nodes up to 48).
    let unlisted = c.client(1).probe_node(node(60), CALL).expect("probe node 60");
    assert_eq!((unlisted.host.as_str(), unlisted.processes), ("b", 0));
}

/// SIGKILL of b's daemon: b's host still answers (its kernel closed the connections and
/// refuses connects), so a and c keep b Operational while its daemon may restart, and
/// refuse questions for b's nodes at once with "host b daemon restarting"; still away after
/// lost_after, b is Lost; a restarted daemon is Operational again.
fn killed_daemon_is_noticed(c: &mut Cluster) {
    let mut sub = c.client(0).subscribe(CALL).expect("subscribing on a");
    assert!(sub.initial().iter().all(|h| h.state == HostState::Operational), "{:?}", sub.initial());
    let killed = Instant::now();
    c.daemon(1).kill9();
    let asked = Instant::now();
    let refused = loop {
        match c.client(2).lookup(node(12), ObjectKind::Segment, 1, CALL) {
            Err(e @ Error::Refused(Refusal::DaemonRestarting { .. })) => break e,
            other => assert!(asked.elapsed() < BOUND, "not refused as restarting: {other:?}\n{}", c.logs()),
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(refused.to_string().contains("host b daemon restarting"), "{refused}");
    // Past suspect_after, the probes' answers keep b Operational (looked at well before
    // lost_after, the bound for a daemon that does not come back).
    std::thread::sleep(Duration::from_millis(SUSPECT_MS + 4 * HEARTBEAT_MS).saturating_sub(killed.elapsed()));
    for from in [0, 2] {
        assert_eq!(c.states(from)["b"], HostState::Operational, "{}", c.logs());
    }

    let lost = Duration::from_millis(LOST_MS) + BOUND;
    for from in [0, 2] {
        c.wait_state(from, 1, HostState::Lost, lost.saturating_sub(killed.elapsed()) + BOUND);
    }
    assert!(killed.elapsed() >= Duration::from_millis(LOST_MS - HEARTBEAT_MS), "Lost too early");
    let ev = next_event_of(&mut sub, 12, BOUND, c);
    assert_eq!((ev.previous, ev.state), (HostState::Operational, HostState::Lost), "{ev:?}");

    c.start_daemon(1);
    for from in [0, 2] {
        c.wait_state(from, 1, HostState::Operational, BOUND);
        c.wait_state(1, from, HostState::Operational, BOUND);
    }
    let ev = next_event_of(&mut sub, 12, BOUND, c);
    assert_eq!((ev.previous, ev.state), (HostState::Lost, HostState::Operational), "{ev:?}");
}

/// A daemon that stops answering without closing anything (its link cut, or the process
/// stopped) is Suspect after suspect_after, Lost after lost_after, and Operational again
/// when it comes back. `cut(true)` silences host c, `cut(false)` restores it.
fn silent_host_goes_suspect_lost_and_returns(c: &mut Cluster, cut: impl Fn(&mut Cluster, bool)) {
    let mut sub = c.client(0).subscribe(CALL).expect("subscribing on a");
    let silenced = Instant::now();
    cut(c, true);
    for from in [0, 1] {
        let t = c.wait_state(from, 2, HostState::Suspect, BOUND);
        eprintln!("{} saw c Suspect {t:?} after the cut", HOSTS[from]);
    }
    assert!(silenced.elapsed() >= Duration::from_millis(SUSPECT_MS - HEARTBEAT_MS), "Suspect too early");
    let ev = next_event_of(&mut sub, 16, BOUND, c);
    assert_eq!((ev.previous, ev.state), (HostState::Operational, HostState::Suspect), "{ev:?}");
    assert!(ev.reason.contains("no heartbeat"), "{ev:?}");

    let lost_by = Duration::from_millis(LOST_MS) + BOUND;
    for from in [0, 1] {
        c.wait_state(from, 2, HostState::Lost, lost_by.saturating_sub(silenced.elapsed()) + BOUND);
    }
    let ev = next_event_of(&mut sub, 16, BOUND, c);
    assert_eq!((ev.previous, ev.state), (HostState::Suspect, HostState::Lost), "{ev:?}");
    // a and b still see each other.
    assert_eq!(c.states(0)["b"], HostState::Operational);

    let restored = Instant::now();
    cut(c, false);
    for from in [0, 1] {
        c.wait_state(from, 2, HostState::Operational, BOUND);
        c.wait_state(2, from, HostState::Operational, BOUND);
    }
    eprintln!("c Operational again {:?} after the restore", restored.elapsed());
    let ev = next_event_of(&mut sub, 16, BOUND, c);
    assert_eq!((ev.previous, ev.state), (HostState::Lost, HostState::Operational), "{ev:?}");
    // Lookups through c work again.
    let e = c.client(0).lookup(node(16), ObjectKind::Segment, 5, CALL).expect_err("nothing on c");
    assert!(e.is_not_found(), "{e:?}");
}

/// Stops all three daemons by hanging up on them; each must exit cleanly and remove its socket.
fn clean_stop(c: &mut Cluster) {
    for (k, host) in HOSTS.iter().enumerate() {
        let d = c.daemon(k);
        d.close_stdin();
        let st = d.wait_exit();
        assert!(st.success(), "daemon {host} exited with {st}\n{}", c.logs());
        let socket = Client::socket_path(&c.fabric(k));
        assert!(!socket.exists(), "{} left behind", socket.display());
    }
}

/// Writes the export record of segment `id` of `owner` (a node child on host `k`), as an
/// owner that registered the segment for remote access would.
fn publish_export(c: &Cluster, k: usize, owner: &Proc, id: u32, epoch: u64) -> ExportRecord {
    let identity = ProcessIdentity::of_pid(owner.pid()).expect("the owner's identity");
    let rec = ExportRecord {
        kind: ObjectKind::Segment,
        node: NODES[k],
        id,
        owner_pid: owner.pid(),
        owner_identity: identity.bits(),
        provider: "tcp;ofi_rxm".into(),
        endpoint: "0200a4c37f000001".into(),
        key: 0x1234,
        base: 0x7f12_3400_0000,
        len: 8192,
        handle: 0,
        epoch,
        in_place: false,
        slot_keys: Vec::new(),
    };
    exports::publish(&c.fabric(k), &rec).expect("publishing an export record");
    rec
}

fn connected(node: u32, pid: u32) -> String {
    format!("{:?}", LocalEvent::Connected { node, pid })
}

fn disconnected(node: u32, pid: u32, died: bool) -> String {
    format!("{:?}", LocalEvent::Disconnected { node, pid, died })
}

/// A process on b connects to segment 0x10 of node 8 on a: the grant carries the published
/// record and the owner sees node 12 connect (as a's daemon); disconnecting releases the
/// slot. A process of a connects through its own daemon. Refusals: missing, not available,
/// not exported, another host's node as the requester, every slot taken.
fn connect_grants_and_refusals(c: &Cluster) {
    let mut owner = node_on(c, 0);
    for cmd in ["create s 0x10 8192", "prepare s", "available s", "create t 0x12 4096"] {
        owner.ok(cmd);
    }
    for cmd in ["create u 0x14 4096", "prepare u", "available u"] {
        owner.ok(cmd); // available, never exported
    }
    let rec = publish_export(c, 0, &owner, 0x10, 0x5eed);
    let daemon_a = c.daemon_pid(0);

    let mut b = c.client(1);
    let g = b.connect_object(node(8), ObjectKind::Segment, 0x10, node(12), CALL).expect("a grant");
    assert_eq!(g.export, rec);
    assert_eq!((g.info.host.as_str(), g.info.node, g.info.size, g.info.owner_pid), ("a", 8, 8192, owner.pid()));
    assert_eq!(owner.ok("lwait s 2000"), connected(12, daemon_a));
    assert_eq!(owner.ok("peers s"), format!("12:{daemon_a}"));
    b.disconnect_object(g.grant, CALL).expect("disconnecting");
    assert_eq!(owner.ok("lwait s 2000"), disconnected(12, daemon_a, false));

    // A process of host a, through its own daemon: no forwarding.
    let mut a = c.client(0);
    let g = a.connect_object(node(8), ObjectKind::Segment, 0x10, node(8), CALL).expect("a local grant");
    assert_eq!(g.export, rec);
    assert_eq!(owner.ok("lwait s 2000"), connected(8, daemon_a));
    a.disconnect_object(g.grant, CALL).expect("disconnecting");
    assert_eq!(owner.ok("lwait s 2000"), disconnected(8, daemon_a, false));

    let refused =
        |b: &mut Client, kind, id, peer| b.connect_object(node(8), kind, id, node(peer), CALL).expect_err("refused");
    let e = refused(&mut b, ObjectKind::Segment, 0x11, 12);
    assert!(e.is_not_found(), "missing: {e:?}");
    let e = refused(&mut b, ObjectKind::Interrupt, 0x10, 12);
    assert!(e.is_not_found(), "no such interrupt: {e:?}");
    let e = refused(&mut b, ObjectKind::Segment, 0x12, 12);
    assert!(e.is_not_available(), "never made available: {e:?}");
    let e = refused(&mut b, ObjectKind::Segment, 0x14, 12);
    assert!(e.is_not_available(), "not exported: {e:?}");
    assert_eq!(e.to_string(), "segment 0x14 on node 8 (host a) is not available");
    let e = refused(&mut b, ObjectKind::Segment, 0x10, 16);
    assert!(matches!(&e, Error::Refused(Refusal::Failed { reason }) if reason.contains("host c")), "{e:?}");
    assert_eq!(owner.ok("peers s"), "", "refusals claim nothing");

    // Every slot taken, then given back when the holding connection closes.
    let mut many = c.client(1);
    let mut granted = 0;
    let e = loop {
        match many.connect_object(node(8), ObjectKind::Segment, 0x10, node(12), CALL) {
            Ok(_) => granted += 1,
            Err(e) => break e,
        }
        assert!(granted <= 1024, "slots without end");
    };
    assert!(matches!(e, Error::Refused(Refusal::TooManyConnections { node: 8, .. })), "{e:?}");
    assert!(granted > 0);
    eprintln!("{granted} grants before TooManyConnections");
    drop(many);
    let deadline = Instant::now() + BOUND;
    while !owner.ok("peers s").is_empty() {
        assert!(Instant::now() < deadline, "slots still held after the connection closed\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A grant is released when the requesting process dies (its connection to b's daemon
/// closes) and when b's daemon dies (a releases b's grants when b is Lost); the owner sees
/// its peer die both times. Meanwhile a
/// process on c asking for node 12 hears that b is unreachable.
fn grants_released_when_requester_or_its_daemon_dies(c: &mut Cluster) {
    let mut owner = node_on(c, 0);
    for cmd in ["create s 0x10 8192", "prepare s", "available s"] {
        owner.ok(cmd);
    }
    publish_export(c, 0, &owner, 0x10, 1);
    let daemon_a = c.daemon_pid(0);

    let dir_b = c.fabric(1);
    let envs = [("LANES_DIR", dir_b.to_str().expect("utf-8 path")), ("LANES_TEST_OBJECT", "8 16 12")];
    let mut requester = Proc::spawn_in(&c.prefix(1), "requester on b", "requester", &envs);
    let l = requester.line("the grant");
    assert!(l.starts_with("GRANTED"), "{l}\n{}", c.logs());
    assert_eq!(owner.ok("lwait s 2000"), connected(12, daemon_a));
    requester.kill9();
    // Within 2 s of the kill (lwait's own bound), as a death: it never disconnected.
    assert_eq!(owner.ok("lwait s 2000"), disconnected(12, daemon_a, true), "\n{}", c.logs());

    let mut b = c.client(1);
    b.connect_object(node(8), ObjectKind::Segment, 0x10, node(12), CALL).expect("a grant");
    assert_eq!(owner.ok("lwait s 2000"), connected(12, daemon_a));
    let killed = Instant::now();
    c.daemon(1).kill9();
    let e = loop {
        match c.client(2).connect_object(node(12), ObjectKind::Segment, 1, node(16), CALL) {
            Err(e @ Error::Refused(Refusal::DaemonRestarting { .. })) => break e,
            other => assert!(killed.elapsed() < BOUND, "not refused as restarting: {other:?}\n{}", c.logs()),
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(matches!(&e, Error::Refused(Refusal::DaemonRestarting { host, .. }) if host == "b"), "{e:?}");
    let bound = Duration::from_millis(LOST_MS) + BOUND;
    let ev = owner.ok(&format!("lwait s {}", bound.as_millis()));
    // Released for a lost host: the owner hears that its peer died.
    assert_eq!(ev, disconnected(12, daemon_a, true), "\n{}", c.logs());
    let took = killed.elapsed();
    eprintln!("slot released {took:?} after b's daemon was killed");
    assert!(took >= Duration::from_millis(LOST_MS - HEARTBEAT_MS), "released before b was Lost");
}

// ---------------------------------------------------------------------------------------
// Host identity: impostors, duplicated names, wrong sources, no keys
// ---------------------------------------------------------------------------------------

/// Transitions host `from` logged for host `host` ("host a operational -> ...").
fn transitions(c: &mut Cluster, from: usize, host: &str) -> usize {
    let log = c.daemon(from).output_snapshot();
    log.matches(&format!("host {host} operational -> ")).count()
}

/// A second daemon calling itself a, run on host `on` with `key` (None: a key of its own),
/// dials b and c for two seconds (40 heartbeats): both refuse it with `says` in their logs,
/// and neither changes its view of the real a (no Suspect, no Lost: the link stays up).
fn impostor_of_a_is_refused(c: &mut Cluster, on: usize, key: Option<&std::path::Path>, says: &str) {
    let before: Vec<usize> = (1..3).map(|k| transitions(c, k, "a")).collect();
    let (mut impostor, _dir) = c.impostor(on, 0, key);
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        for (k, host) in HOSTS.iter().enumerate().skip(1) {
            assert_eq!(c.states(k)["a"], HostState::Operational, "{host} lost a\n{}", c.logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for (k, host) in HOSTS.iter().enumerate().skip(1) {
        let log = c.daemon(k).output_snapshot();
        assert!(
            log.contains("refused a connection") && log.contains(says),
            "{host} did not refuse with {says:?}:\n{log}"
        );
        assert_eq!(transitions(c, k, "a"), before[k - 1], "{host} changed its view of a:\n{log}");
    }
    let theirs = impostor.output_snapshot();
    assert!(theirs.contains("refused"), "the impostor heard no refusal:\n{theirs}");
    assert!(!theirs.contains("-> operational"), "the impostor was let in:\n{theirs}");
    impostor.kill9();
    // The real a still talks to b and c.
    discovery_after_impostor(c);
}

fn discovery_after_impostor(c: &Cluster) {
    for k in 1..3 {
        let probe = c.client(k).probe_node(node(NODES[0]), CALL).expect("a probe of node 8");
        assert_eq!(probe.host_state, HostState::Operational, "{probe:?}");
    }
}

/// Errors that name their cause: a node lanes.toml does not list (at once, not a timeout),
/// a host whose link is down or that is silent ("host c unreachable", `cut`), a host
/// whose daemon is dead ("host c daemon restarting"), no daemon ("no daemon on this host").
fn errors_name_their_cause(c: &mut Cluster, cut: impl Fn(&mut Cluster, bool)) {
    let mut client = c.client(0);
    let started = Instant::now();
    let e = client.connect_object(node(100), ObjectKind::Segment, 1, node(NODES[0]), CALL).unwrap_err();
    assert!(e.to_string().contains("node 100 is not in lanes.toml"), "{e}");
    let e = client.lookup(node(100), ObjectKind::Segment, 1, CALL).unwrap_err();
    assert!(e.to_string().contains("node 100 is not in lanes.toml"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());

    cut(c, true);
    c.wait_state(0, 2, HostState::Suspect, Duration::from_millis(SUSPECT_MS) + BOUND);
    let e = client.connect_object(node(NODES[2]), ObjectKind::Segment, 1, node(NODES[0]), CALL).unwrap_err();
    assert!(matches!(&e, Error::Refused(Refusal::HostUnreachable { .. })), "{e:?}");
    assert!(e.to_string().contains("host c unreachable"), "{e}");
    cut(c, false);
    c.wait_state(0, 2, HostState::Operational, BOUND);

    c.daemon(2).kill9();
    let killed = Instant::now();
    let e = loop {
        match client.connect_object(node(NODES[2]), ObjectKind::Segment, 1, node(NODES[0]), CALL) {
            Err(e @ Error::Refused(Refusal::DaemonRestarting { .. })) => break e,
            other => assert!(killed.elapsed() < BOUND, "not refused as restarting: {other:?}\n{}", c.logs()),
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(e.to_string().contains("host c daemon restarting"), "{e}");

    let e = Client::connect(&c.fabric(2), CALL).unwrap_err();
    assert!(e.to_string().contains("no daemon on this host (start `lanes daemon`)"), "{e}");
}

#[test]
fn cluster_loopback_errors_name_their_cause() {
    let mut c = Cluster::loopback("cl-lo-errors");
    errors_name_their_cause(&mut c, |c, silent| {
        c.daemon(2).signal(if silent { libc::SIGSTOP } else { libc::SIGCONT });
    });
}

#[test]
fn cluster_netns_errors_name_their_cause() {
    let Some(mut c) = Cluster::netns("cluster_netns_errors") else { return };
    errors_name_their_cause(&mut c, |c, down| c.namespaces().expect("namespaces").set_link(2, !down));
}

#[test]
fn cluster_loopback_impostor_with_the_right_name_and_a_wrong_key_is_refused() {
    let mut c = Cluster::loopback("cl-lo-impostor");
    impostor_of_a_is_refused(&mut c, 2, None, "not host a's key in lanes.toml");
}

#[test]
fn cluster_netns_impostor_with_the_right_name_and_a_wrong_key_is_refused() {
    let Some(mut c) = Cluster::netns("cluster_netns_impostor_key") else { return };
    impostor_of_a_is_refused(&mut c, 2, None, "not host a's key in lanes.toml");
}

/// Two daemons claiming a, both with a's key: the second one (in c's namespace) connects
/// from c's address, is refused for it, and the real a's links stay up.
#[test]
fn cluster_netns_duplicated_host_name_from_another_address_is_refused() {
    let Some(mut c) = Cluster::netns("cluster_netns_duplicate_name") else { return };
    let key = c.key_file(0).to_path_buf();
    impostor_of_a_is_refused(&mut c, 2, Some(&key), "host a connects from 10.77.0.3, not from its address");
}

/// Without public keys in lanes.toml a daemon serves loopback only: it dials no other
/// address, and refuses a connection from one with a goodbye saying why (here from a daemon
/// whose own configuration has keys, in a's namespace); its log says what to do.
#[test]
fn cluster_netns_without_keys_a_daemon_serves_loopback_only() {
    let Some(c) = Cluster::netns("cluster_netns_no_keys") else { return };
    // A keyless daemon for b, in b's namespace on another port.
    let dir = support::TestDir::new("nokeys");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let keyless = format!(
        "[cluster]\nheartbeat_ms = {HEARTBEAT_MS}\nsuspect_after_ms = {SUSPECT_MS}\nlost_after_ms = {LOST_MS}\n\
         [[node]]\nid = 8\nhost = \"a\"\naddress = \"{}\"\n[[node]]\nid = 12\nhost = \"b\"\naddress = \"10.77.0.2:{port}\"\n",
        c.address(0)
    );
    let config = dir.root().join("lanes.toml");
    std::fs::write(&config, keyless).unwrap();
    let key = dir.root().join("b.key");
    let env = [
        ("LANES_CONFIG", config.to_str().unwrap().to_string()),
        ("LANES_HOST", "b".to_string()),
        ("LANES_DIR", dir.fabric().to_str().unwrap().to_string()),
        ("LANES_KEY_FILE", key.to_str().unwrap().to_string()),
    ];
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut d = support::spawn_daemon(&c.prefix(1), "keyless b", &envs);
    // Its peer: a keyed daemon calling itself a, in a's namespace, whose lanes.toml says b
    // is at the keyless daemon's port.
    let (mut a2, _a2dir) = {
        let a_key = c.key_file(0).to_path_buf();
        let b_pub = lanes::cluster::identity::HostKey::load(c.key_file(1)).unwrap();
        let a_pub = lanes::cluster::identity::HostKey::load(&a_key).unwrap();
        let dir2 = support::TestDir::new("nokeys-a");
        let port_a = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let text = format!(
            "[cluster]\nheartbeat_ms = {HEARTBEAT_MS}\nsuspect_after_ms = {SUSPECT_MS}\nlost_after_ms = {LOST_MS}\n\
             [[node]]\nid = 8\nhost = \"a\"\naddress = \"10.77.0.1:{port_a}\"\npublic_key = \"{}\"\n\
             [[node]]\nid = 12\nhost = \"b\"\naddress = \"10.77.0.2:{port}\"\npublic_key = \"{}\"\n",
            a_pub.public(),
            b_pub.public()
        );
        let config2 = dir2.root().join("lanes.toml");
        std::fs::write(&config2, text).unwrap();
        let env = [
            ("LANES_CONFIG", config2.to_str().unwrap().to_string()),
            ("LANES_HOST", "a".to_string()),
            ("LANES_DIR", dir2.fabric().to_str().unwrap().to_string()),
            ("LANES_KEY_FILE", a_key.to_str().unwrap().to_string()),
        ];
        let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        (support::spawn_daemon(&c.prefix(0), "keyed a", &envs), dir2)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (theirs, ours) = (d.output_snapshot(), a2.output_snapshot());
        let refused = ours.contains("host b refused: this daemon has no host keys");
        if theirs.contains("serving loopback only") && theirs.contains("host a") && refused {
            assert!(theirs.contains("not dialled") || !theirs.contains("-> operational"), "{theirs}");
            assert!(theirs.contains("public_key = \""), "no key to paste:\n{theirs}");
            assert!(key.exists(), "the first start made no host key");
            break;
        }
        assert!(Instant::now() < deadline, "keyless b:\n{theirs}\nkeyed a:\n{ours}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut local = Client::connect(&dir.fabric(), CALL).expect("loopback clients are served");
    let hosts = local.cluster(CALL).unwrap();
    assert!(hosts.iter().all(|h| h.local || h.state == HostState::Unknown), "{hosts:?}");
    d.kill9();
    a2.kill9();
}

// ---------------------------------------------------------------------------------------
// Loopback: no privilege needed
// ---------------------------------------------------------------------------------------

#[test]
fn cluster_loopback_discovery_and_lookups() {
    let mut c = Cluster::loopback("cl-lo-discovery");
    discovery_and_lookups(&c);
    clean_stop(&mut c);
}

#[test]
fn cluster_loopback_killed_daemon_is_noticed() {
    let mut c = Cluster::loopback("cl-lo-kill");
    killed_daemon_is_noticed(&mut c);
}

#[test]
fn cluster_loopback_connect_grants_and_refusals() {
    let c = Cluster::loopback("cl-lo-connect");
    connect_grants_and_refusals(&c);
}

#[test]
fn cluster_loopback_grants_released_when_requester_or_its_daemon_dies() {
    let mut c = Cluster::loopback("cl-lo-release");
    grants_released_when_requester_or_its_daemon_dies(&mut c);
}

#[test]
fn cluster_loopback_stopped_daemon_goes_suspect_lost_and_returns() {
    let mut c = Cluster::loopback("cl-lo-stop");
    silent_host_goes_suspect_lost_and_returns(&mut c, |c, silent| {
        c.daemon(2).signal(if silent { libc::SIGSTOP } else { libc::SIGCONT });
    });
}

// ---------------------------------------------------------------------------------------
// Network namespaces: root only (CI)
// ---------------------------------------------------------------------------------------

#[test]
fn cluster_netns_discovery_and_lookups() {
    let Some(mut c) = Cluster::netns("cluster_netns_discovery_and_lookups") else { return };
    discovery_and_lookups(&c);
    clean_stop(&mut c);
}

#[test]
fn cluster_netns_killed_daemon_is_noticed() {
    let Some(mut c) = Cluster::netns("cluster_netns_killed_daemon_is_noticed") else { return };
    killed_daemon_is_noticed(&mut c);
}

#[test]
fn cluster_netns_connect_grants_and_refusals() {
    let Some(c) = Cluster::netns("cluster_netns_connect_grants") else { return };
    connect_grants_and_refusals(&c);
}

#[test]
fn cluster_netns_grants_released_when_requester_or_its_daemon_dies() {
    let Some(mut c) = Cluster::netns("cluster_netns_grants_released") else {
        return;
    };
    grants_released_when_requester_or_its_daemon_dies(&mut c);
}

#[test]
fn cluster_netns_link_cut_goes_suspect_lost_and_returns() {
    let Some(mut c) = Cluster::netns("cluster_netns_link_cut_goes_suspect_lost_and_returns") else { return };
    silent_host_goes_suspect_lost_and_returns(&mut c, |c, down| {
        c.namespaces().expect("namespaces").set_link(2, !down);
    });
}

#[test]
fn cluster_test_namespace_names_carry_their_creator() {
    assert_eq!(netns::creator_pid("lt123n0a"), Some(123));
    assert_eq!(netns::creator_pid("lt123n10s"), Some(123));
    for other in ["lofi0a", "lt123n0", "lt123na", "lt123n0x", "ltxn0a"] {
        assert_eq!(netns::creator_pid(other), None, "{other}");
    }
}

// ---------------------------------------------------------------------------------------
// The ofi topologies of the conformance suite (`lanes_testkit::topology`)
// ---------------------------------------------------------------------------------------

/// The harness of the ofi topologies, needing no data path: every daemon sees the others
/// Operational; a node started on b opens its fabric from the per-node environment, on b's
/// fabric directory; b's daemon counts the process acting as node 8 on a while it lives.
#[cfg(feature = "ofi")]
fn harness_hosts_and_nodes(t: &Topology) {
    assert_eq!(t.transport(), "ofi");
    let c = t.cluster().expect("an ofi topology has hosts");
    for (k, host) in HOSTS.iter().enumerate() {
        let states = c.states(k);
        assert_eq!(states.len(), 3, "{host} sees {states:?}");
        assert!(states.values().all(|s| *s == HostState::Operational), "{host} sees {states:?}");
    }

    let mut on_b = Proc::node(t, 12);
    assert_eq!(on_b.ok("node_id"), "12");
    assert!(t.record_path(12, on_b.pid()).exists(), "node 12 has no record on b's fabric directory");
    assert_ne!(t.fabric(12), t.fabric(8));
    assert!(!t.fabric(8).join("procs").join(format!("12-{}", on_b.pid())).exists(), "node 12's record on a");

    let mut b = Client::connect(&t.fabric(12), CALL).unwrap_or_else(|e| panic!("daemon of b: {e}\n{}", c.logs()));
    assert_eq!(b.host(), "b");
    let probe = b.probe_node(node(8), CALL).expect("probe of node 8 from b");
    assert_eq!((probe.host.as_str(), probe.processes), ("a", 0), "{probe:?}");
    let mut on_a = Proc::node(t, 8);
    let probe = b.probe_node(node(8), CALL).expect("probe of node 8 from b");
    assert!(probe.is_up() && probe.host == "a" && probe.processes == 1, "{probe:?}");

    on_a.exit();
    let bound = t.bounds().notice;
    let exited = Instant::now();
    loop {
        let probe = b.probe_node(node(8), CALL).expect("probe of node 8 from b");
        if probe.processes == 0 {
            break;
        }
        assert!(exited.elapsed() < bound, "b still counts {probe:?} {bound:?} after node 8 exited");
        std::thread::sleep(Duration::from_millis(10));
    }
    on_b.exit();
}

support::topology_cases!(; ofi: harness_hosts_and_nodes);
