//! The cluster control plane across three hosts a, b and c (nodes 8, 12 and 16), each with
//! its own daemon and fabric directory, in two topologies:
//!
//! - *loopback*: three daemons on 127.0.0.1 with different ports (no privilege needed);
//! - *netns*: three network namespaces on a bridge (support/netns.rs), daemons on
//!   10.77.0.1-3; needs root, skipped with a reason without it unless `CI` is set.
//!
//! The hosts and their daemons are `support::cluster::Cluster` (tests/common/cluster.rs),
//! shared with the ofi topologies of the conformance suite: daemons are children of the
//! test, the test binary re-executed (through `ip netns exec` for netns) in role `daemon`,
//! which calls `lanes::cluster::daemon::run`, as `lanes daemon` does. Timing is shortened
//! (heartbeat 50 ms, Suspect after 250 ms, Lost after 1.5 s) and every change must be seen
//! within a generous bound.
//!
//! With the `ofi` feature, `harness_hosts_and_nodes` checks those topologies themselves
//! (`topology::ofi::lo::..` and `topology::ofi::netns::..`), without the data path.

mod support;

use std::time::{Duration, Instant};

use lanes::cluster::{Client, Error, HostState, NodeEvent, ObjectKind, Refusal};
use lanes::NodeId;
use support::cluster::{Cluster, CALL, HEARTBEAT_MS, LOST_MS, NODES, SUSPECT_MS};
use support::netns::{self, HOSTS};
use support::Proc;
#[cfg(feature = "ofi")]
use support::Topology;

/// How long a change may take to be noticed, beyond the configured timeouts (CI noise).
const BOUND: Duration = Duration::from_secs(2);

#[test]
fn child_entry() {
    // Roles `node` and `daemon` are support's.
    support::child_entry(|_, _| false);
}

/// A node process on host `k`, on that host's fabric directory (opened with the directory
/// and node, not the cluster configuration: these tests are about the control plane).
fn node_on(c: &Cluster, k: usize) -> Proc {
    Proc::node_in(&c.prefix(k), &c.fabric(k), NODES[k])
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
    // A node no host lists is this host's (as on one host): b has no process as node 40.
    let unlisted = c.client(1).probe_node(node(40), CALL).expect("probe node 40");
    assert_eq!((unlisted.host.as_str(), unlisted.processes), ("b", 0));
}

/// SIGKILL of b's daemon: a and c see b Suspect within the bound (its connections close),
/// questions for b's nodes are refused at once, Lost after lost_after, and a restarted
/// daemon is Operational again.
fn killed_daemon_is_noticed(c: &mut Cluster) {
    let mut sub = c.client(0).subscribe(CALL).expect("subscribing on a");
    assert!(sub.initial().iter().all(|h| h.state == HostState::Operational), "{:?}", sub.initial());
    let killed = Instant::now();
    c.daemon(1).kill9();
    for from in [0, 2] {
        let t = c.wait_state(from, 1, HostState::Suspect, BOUND);
        eprintln!("{} saw b Suspect {:?} after the kill", HOSTS[from], t);
    }
    let ev = next_event_of(&mut sub, 12, BOUND, c);
    assert_eq!((ev.previous, ev.state, ev.host.as_str()), (HostState::Operational, HostState::Suspect, "b"), "{ev:?}");

    let asked = Instant::now();
    let refused = c.client(2).lookup(node(12), ObjectKind::Segment, 1, CALL).expect_err("b is down");
    assert!(matches!(refused, Error::Refused(Refusal::HostUnreachable { ref host, .. }) if host == "b"), "{refused:?}");
    assert!(asked.elapsed() < Duration::from_millis(500), "refused only after {:?}", asked.elapsed());

    let lost = Duration::from_millis(LOST_MS) + BOUND;
    for from in [0, 2] {
        c.wait_state(from, 1, HostState::Lost, lost.saturating_sub(killed.elapsed()) + BOUND);
    }
    assert!(killed.elapsed() >= Duration::from_millis(LOST_MS - HEARTBEAT_MS), "Lost too early");
    let ev = next_event_of(&mut sub, 12, BOUND, c);
    assert_eq!((ev.previous, ev.state), (HostState::Suspect, HostState::Lost), "{ev:?}");

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
// The ofi topologies of the conformance suite (tests/common/topology.rs)
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
