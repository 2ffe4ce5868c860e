//! The cluster control plane across three hosts a, b and c (nodes 8, 12 and 16), each with
//! its own daemon and fabric directory, in two topologies:
//!
//! - *loopback*: three daemons on 127.0.0.1 with different ports (no privilege needed);
//! - *netns*: three network namespaces on a bridge (support/netns.rs), daemons on
//!   10.77.0.1-3; needs root, skipped with a reason without it unless `CI` is set.
//!
//! Daemons are children of the test: the test binary re-executed (through `ip netns exec`
//! for netns) in role `daemon`, which calls `lanes::cluster::daemon::run`, as `lanes daemon`
//! does. Timing is shortened (heartbeat 50 ms, Suspect after 250 ms, Lost after 1.5 s) and
//! every change must be seen within a generous bound.

mod support;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lanes::cluster::daemon::{self, DaemonOptions};
use lanes::cluster::{Client, Error, HostState, NodeEvent, ObjectKind, Refusal};
use lanes::NodeId;
use support::netns::{self, Netns, HOSTS};
use support::{ChildIo, Proc, TestDir};

const NODES: [u32; 3] = [8, 12, 16];
const HEARTBEAT_MS: u64 = 50;
const SUSPECT_MS: u64 = 250;
const LOST_MS: u64 = 1500;
/// How long a change may take to be noticed, beyond the configured timeouts (CI noise).
const BOUND: Duration = Duration::from_secs(2);
/// Timeout of each client call.
const CALL: Duration = Duration::from_secs(2);

#[test]
fn child_entry() {
    support::child_entry(|role, io| match role {
        "daemon" => run_daemon_child(io),
        _ => false,
    });
}

/// The daemon role: `daemon::run` until SIGTERM, which the test sends by hanging up (or
/// dying: then the stdin pipe closes too).
fn run_daemon_child(io: &ChildIo) -> bool {
    let options = match DaemonOptions::from_env() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("daemon child: {e}");
            std::process::exit(2);
        }
    };
    std::thread::spawn(move || {
        let code = match daemon::run(options) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("daemon child: {e}");
                1
            }
        };
        std::process::exit(code);
    });
    io.wait_for_hang_up();
    // SAFETY: kill has no memory-safety preconditions; we signal ourselves.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    // The daemon thread exits the process once it has stopped.
    std::thread::sleep(Duration::from_secs(30));
    panic!("the daemon did not stop within 30 s of SIGTERM");
}

/// Three hosts, their daemons and fabric directories. Fields drop in order: daemons
/// first, namespaces last.
struct Cluster {
    daemons: Vec<Option<Proc>>,
    dirs: Vec<TestDir>,
    config: PathBuf,
    _scratch: TestDir,
    netns: Option<Netns>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("an ephemeral port").local_addr().expect("its address").port()
}

impl Cluster {
    fn loopback(name: &str) -> Cluster {
        let addrs = HOSTS.iter().map(|_| format!("127.0.0.1:{}", free_port())).collect();
        Cluster::start(name, addrs, None)
    }

    /// `None` when network namespaces cannot be used here (and `CI` is not set).
    fn netns(name: &str) -> Option<Cluster> {
        netns::skip_reason(name).is_none().then(|| {
            let n = Netns::three();
            let addrs = (0..HOSTS.len()).map(Netns::address).collect();
            Cluster::start(name, addrs, Some(n))
        })
    }

    fn start(name: &str, addrs: Vec<String>, netns: Option<Netns>) -> Cluster {
        let scratch = TestDir::new(name);
        let mut text = format!(
            "[cluster]\nheartbeat_ms = {HEARTBEAT_MS}\nsuspect_after_ms = {SUSPECT_MS}\nlost_after_ms = {LOST_MS}\n"
        );
        for (k, h) in HOSTS.iter().enumerate() {
            text += &format!("[[node]]\nid = {}\nhost = \"{h}\"\naddress = \"{}\"\n", NODES[k], addrs[k]);
        }
        let config = scratch.root().join("lanes.toml");
        std::fs::write(&config, text).expect("writing lanes.toml");
        let dirs = HOSTS.iter().map(|h| TestDir::new(&format!("{name}-{h}"))).collect();
        let mut c = Cluster { daemons: HOSTS.iter().map(|_| None).collect(), dirs, config, _scratch: scratch, netns };
        for k in 0..HOSTS.len() {
            c.start_daemon(k);
        }
        for k in 0..HOSTS.len() {
            for other in 0..HOSTS.len() {
                if other != k {
                    c.wait_state(k, other, HostState::Operational, Duration::from_secs(10));
                }
            }
        }
        c
    }

    fn prefix(&self, k: usize) -> Vec<String> {
        self.netns.as_ref().map(|n| n.exec_prefix(k)).unwrap_or_default()
    }

    fn start_daemon(&mut self, k: usize) {
        let dir = self.dirs[k].fabric();
        let envs = [
            ("LANES_CONFIG", self.config.to_str().expect("utf-8 path")),
            ("LANES_HOST", HOSTS[k]),
            ("LANES_DIR", dir.to_str().expect("utf-8 path")),
        ];
        self.daemons[k] = Some(Proc::spawn_in(&self.prefix(k), &format!("daemon {}", HOSTS[k]), "daemon", &envs));
        // Ready when it answers on its socket.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Client::connect(&dir, CALL).is_err() {
            if Instant::now() > deadline {
                panic!("daemon {} never answered\n{}", HOSTS[k], self.logs());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn daemon(&mut self, k: usize) -> &mut Proc {
        self.daemons[k].as_mut().expect("a daemon")
    }

    fn client(&self, k: usize) -> Client {
        Client::connect(&self.dirs[k].fabric(), CALL)
            .unwrap_or_else(|e| panic!("connecting to daemon {}: {e}\n{}", HOSTS[k], self.logs()))
    }

    /// Every daemon's output so far.
    fn logs(&self) -> String {
        let mut out = String::new();
        for d in self.daemons.iter().flatten() {
            out += &format!("--- {} ---\n{}", d.name(), d.output_snapshot());
        }
        out
    }

    /// The states host `from` sees.
    fn states(&self, from: usize) -> HashMap<String, HostState> {
        let hosts = self.client(from).cluster(CALL).unwrap_or_else(|e| panic!("cluster of {}: {e}", HOSTS[from]));
        hosts.into_iter().map(|h| (h.name, h.state)).collect()
    }

    /// Waits until `from` sees `host` in `want`; returns how long that took.
    fn wait_state(&self, from: usize, host: usize, want: HostState, bound: Duration) -> Duration {
        let started = Instant::now();
        let mut client = self.client(from);
        loop {
            let seen = client.cluster(CALL).map(|hosts| hosts.into_iter().find(|h| h.name == HOSTS[host]));
            match seen {
                Ok(Some(h)) if h.state == want => return started.elapsed(),
                Ok(_) => {}
                Err(_) => client = self.client(from),
            }
            if started.elapsed() > bound {
                panic!(
                    "host {} did not see {} {want} within {bound:?}; it sees {:?}\n{}",
                    HOSTS[from],
                    HOSTS[host],
                    self.states(from),
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A node process on host `k`, on that host's fabric directory.
    fn node(&self, k: usize) -> Proc {
        Proc::node_in(&self.prefix(k), &self.dirs[k].fabric(), NODES[k])
    }
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
    let mut owner = c.node(0);
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
        let socket = Client::socket_path(&c.dirs[k].fabric());
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
        c.netns.as_ref().expect("namespaces").set_link(2, !down);
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
