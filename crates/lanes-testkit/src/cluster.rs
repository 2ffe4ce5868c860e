//! Three test hosts a, b and c (first nodes 8, 12 and 16; every node id the multi-process
//! cases use has a host, see [`host_of`](Cluster::host_of)), each with its own fabric
//! directory and its own cluster daemon, on 127.0.0.1 or in three network namespaces
//! ([`netns`]). Used by the control-plane tests and by the ofi topologies of
//! [`topology`](crate::topology).
//!
//! Every host has a host key (generated into the scratch directory, `LANES_KEY_FILE` in
//! its environment) and `lanes.toml` lists each host's public key, so the daemons' links are
//! authenticated and encrypted as in a real cluster (`lanes::cluster::link`).
//!
//! Daemons are children of the test ([`Proc`]): the test binary re-executed (through `ip
//! netns exec` in namespaces) in role `daemon`, whose body is [`run_daemon_role`]: it calls
//! `lanes::cluster::daemon::run`, as `lanes daemon` does. Timing is shortened (heartbeat
//! 50 ms; Suspect after 1 s, so that a daemon starved of the CPU for a few hundred
//! milliseconds on a loaded machine is not called Suspect, which fails every operation
//! towards its host; Lost after 2.5 s: long enough for a failure test to cut a link, check
//! what fails, and restore it before the host is Lost).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lanes::cluster::daemon::{self, DaemonOptions};
use lanes::cluster::identity::{HostKey, PublicKey, KEY_FILE_VAR};
use lanes::cluster::{Client, HostState};

use crate::netns::{self, Netns, HOSTS};
use crate::ports::free_ports;
use crate::process::Proc;
use crate::test_dir::TestDir;

/// The first node of each host, in the order of [`HOSTS`].
pub const NODES: [u32; 3] = [8, 12, 16];
/// The node ids the generated configuration places on hosts: every multiple of 4 up to
/// this (the ids the multi-process cases use), spread by [`Cluster::host_of`].
const LAST_NODE: u32 = 48;
pub const HEARTBEAT_MS: u64 = 50;
pub const SUSPECT_MS: u64 = 1000;
pub const LOST_MS: u64 = 2500;
/// Timeout of each client call.
pub const CALL: Duration = Duration::from_secs(2);
/// How long daemons may take to start and see each other.
const START: Duration = Duration::from_secs(10);
/// Overrides the libfabric provider written into the generated `lanes.toml`.
pub const PROVIDER_VAR: &str = "LANES_TEST_OFI_PROVIDER";
/// The provider when [`PROVIDER_VAR`] is not set.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// The body of role `daemon`: `daemon::run` until SIGTERM, which the child sends itself
/// once `wait_for_hang_up` returns (the test closed its stdin, or died).
pub fn run_daemon_role(wait_for_hang_up: impl FnOnce()) -> ! {
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
    wait_for_hang_up();
    // SAFETY: kill has no memory-safety preconditions; we signal ourselves.
    unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
    // The daemon thread exits the process once it has stopped.
    std::thread::sleep(Duration::from_secs(30));
    panic!("the daemon did not stop within 30 s of SIGTERM");
}

/// A child in role `daemon` (see [`run_daemon_role`]), run through `prefix`, with the
/// environment `envs`.
pub fn spawn_daemon(prefix: &[String], name: &str, envs: &[(&str, &str)]) -> Proc {
    Proc::spawn_in(prefix, name, "daemon", envs)
}

/// Three hosts, their daemons and fabric directories. Fields drop in order: daemons
/// first, namespaces last.
pub struct Cluster {
    daemons: Vec<Option<Proc>>,
    dirs: Vec<TestDir>,
    config: PathBuf,
    /// The hosts' addresses and key files, as the generated `lanes.toml` has them.
    addrs: Vec<String>,
    keys: Vec<PathBuf>,
    _scratch: TestDir,
    netns: Option<Netns>,
}

/// The text of a `lanes.toml` for the three hosts at `addrs` with public keys `keys`.
fn config_text(addrs: &[String], keys: &[PublicKey]) -> String {
    let provider = std::env::var(PROVIDER_VAR).ok().filter(|p| !p.is_empty());
    let provider = provider.as_deref().unwrap_or(DEFAULT_PROVIDER);
    let mut text = format!(
        "[cluster]\nprovider = \"{provider}\"\nheartbeat_ms = {HEARTBEAT_MS}\nsuspect_after_ms = {SUSPECT_MS}\nlost_after_ms = {LOST_MS}\n"
    );
    for node in (4..=LAST_NODE).step_by(4) {
        let k = Cluster::host_of(node).expect("every listed node has a host");
        text += &format!(
            "[[node]]\nid = {node}\nhost = \"{}\"\naddress = \"{}\"\npublic_key = \"{}\"\n",
            HOSTS[k], addrs[k], keys[k]
        );
    }
    text
}

impl Cluster {
    /// Three daemons on 127.0.0.1, each on a free port (no privilege needed).
    pub fn loopback(name: &str) -> Cluster {
        let addrs = free_ports(HOSTS.len()).into_iter().map(|p| format!("127.0.0.1:{p}")).collect();
        Cluster::start(name, addrs, None)
    }

    /// Three daemons in three network namespaces on 10.77.0.1-3; `None` (with the reason
    /// printed) when namespaces cannot be used here and `CI` is not set.
    pub fn netns(name: &str) -> Option<Cluster> {
        Self::netns_prepared(name, |_| {})
    }

    /// As [`Cluster::netns`], each host also having an IPv6 address ([`Netns::address6`])
    /// before its daemon starts (lanes.toml still names the IPv4 ones).
    pub fn netns_with_ipv6(name: &str) -> Option<Cluster> {
        Self::netns_prepared(name, Netns::add_ipv6)
    }

    /// As [`Cluster::netns`], each host also having a second link, the "Ethernet"
    /// ([`Netns::add_ethernet`]), before its daemon starts (lanes.toml names the fabric's
    /// addresses; the daemons learn the Ethernet ones at their hellos).
    pub fn netns_with_ethernet(name: &str) -> Option<Cluster> {
        Self::netns_prepared(name, Netns::add_ethernet)
    }

    /// [`Cluster::netns`], with `prepare` run on the namespaces before the daemons start.
    fn netns_prepared(name: &str, prepare: impl FnOnce(&Netns)) -> Option<Cluster> {
        netns::skip_reason(name).is_none().then(|| {
            let n = Netns::three();
            prepare(&n);
            let addrs = (0..HOSTS.len()).map(Netns::address).collect();
            Cluster::start(name, addrs, Some(n))
        })
    }

    fn start(name: &str, addrs: Vec<String>, netns: Option<Netns>) -> Cluster {
        // Directory names carry the case's name for people reading them, cut short: a
        // daemon's socket lives in its host's directory, and a Unix socket path must fit
        // in 108 bytes (the directories are unique without the name).
        let name: String = name.chars().take(24).collect();
        let name = name.as_str();
        let scratch = TestDir::new(name);
        let keys: Vec<PathBuf> = HOSTS.iter().map(|h| scratch.root().join(format!("{h}.key"))).collect();
        let public: Vec<PublicKey> = keys.iter().map(|f| *HostKey::create(f).expect("a host key").public()).collect();
        let config = scratch.root().join("lanes.toml");
        std::fs::write(&config, config_text(&addrs, &public)).expect("writing lanes.toml");
        let dirs = HOSTS.iter().map(|h| TestDir::new(&format!("{name}-{h}"))).collect();
        let mut c = Cluster {
            daemons: HOSTS.iter().map(|_| None).collect(),
            dirs,
            config,
            addrs,
            keys,
            _scratch: scratch,
            netns,
        };
        for k in 0..HOSTS.len() {
            c.start_daemon(k);
        }
        for k in 0..HOSTS.len() {
            for other in 0..HOSTS.len() {
                if other != k {
                    c.wait_state(k, other, HostState::Operational, START);
                }
            }
        }
        c
    }

    /// The host (index into [`HOSTS`]) of `node`, if the cluster lists it: node 8 (the
    /// cases' owner) on a; the other multiples of 4 up to 48 alternate between b (4, 12,
    /// 20, ..) and c (16, 24, ..), so a case's peers are on other hosts than its owner, and
    /// consecutive peers on different ones.
    pub fn host_of(node: u32) -> Option<usize> {
        match node {
            8 => Some(0),
            n if n % 4 != 0 || n == 0 || n > LAST_NODE => None,
            n if (n / 4) % 2 == 1 => Some(1),
            _ => Some(2),
        }
    }

    /// The generated `lanes.toml`.
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// The namespaces, when the hosts are namespaces.
    pub fn namespaces(&self) -> Option<&Netns> {
        self.netns.as_ref()
    }

    /// Host `k`'s fabric directory.
    pub fn fabric(&self, k: usize) -> PathBuf {
        self.dirs[k].fabric()
    }

    /// The command prefix that runs a program on host `k` (`ip netns exec ..`, or none).
    pub fn prefix(&self, k: usize) -> Vec<String> {
        self.netns.as_ref().map(|n| n.exec_prefix(k)).unwrap_or_default()
    }

    /// What a process of host `k` is told: `LANES_CONFIG`, `LANES_HOST`, `LANES_DIR` and
    /// `LANES_KEY_FILE` (read by the daemon only).
    pub fn env(&self, k: usize) -> Vec<(String, String)> {
        let utf8 = |p: &Path| p.to_str().expect("utf-8 path").to_string();
        vec![
            ("LANES_CONFIG".into(), utf8(&self.config)),
            ("LANES_HOST".into(), HOSTS[k].into()),
            ("LANES_DIR".into(), utf8(&self.fabric(k))),
            (KEY_FILE_VAR.into(), utf8(&self.keys[k])),
        ]
    }

    /// Host `k`'s key file.
    pub fn key_file(&self, k: usize) -> &Path {
        &self.keys[k]
    }

    /// Host `k`'s address as `lanes.toml` has it (`ip:port`).
    pub fn address(&self, k: usize) -> &str {
        &self.addrs[k]
    }

    /// A second daemon calling itself host `claim`, run on host `on` (its namespace, or
    /// 127.0.0.1) with its own fabric directory and a `lanes.toml` of its own in which
    /// `claim` has a free port on `on`'s address and the public key of `key` (a key file
    /// made here when None: the wrong key). Every other host is as in the real
    /// configuration, so it dials them as `claim` would. Returns the daemon and what must
    /// outlive it.
    pub fn impostor(&self, on: usize, claim: usize, key: Option<&Path>) -> (Proc, TestDir) {
        let scratch = TestDir::new(&format!("impostor-{}", HOSTS[claim]));
        let key_file = match key {
            Some(k) => k.to_path_buf(),
            None => {
                let f = scratch.root().join("impostor.key");
                HostKey::create(&f).expect("a host key");
                f
            }
        };
        let mut public: Vec<PublicKey> =
            self.keys.iter().map(|f| *HostKey::load(f).expect("a harness key").public()).collect();
        public[claim] = *HostKey::load(&key_file).expect("the impostor's key").public();
        let mut addrs = self.addrs.clone();
        let ip = self.addrs[on].rsplit_once(':').map_or(self.addrs[on].as_str(), |(ip, _)| ip);
        // A free port on that address: bound in the namespace by the daemon itself, so
        // pick one outside the harness's (the kernel's ephemeral range is not used there).
        addrs[claim] = format!("{ip}:{}", free_ports(1)[0]);
        let config = scratch.root().join("lanes.toml");
        std::fs::write(&config, config_text(&addrs, &public)).expect("writing the impostor's lanes.toml");
        let utf8 = |p: &Path| p.to_str().expect("utf-8 path").to_string();
        let env = [
            ("LANES_CONFIG".to_string(), utf8(&config)),
            ("LANES_HOST".to_string(), HOSTS[claim].to_string()),
            ("LANES_DIR".to_string(), utf8(&scratch.fabric())),
            (KEY_FILE_VAR.to_string(), utf8(&key_file)),
        ];
        let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let d = spawn_daemon(&self.prefix(on), &format!("impostor {} on {}", HOSTS[claim], HOSTS[on]), &envs);
        let deadline = Instant::now() + START;
        while Client::connect(&scratch.fabric(), CALL).is_err() {
            if Instant::now() > deadline {
                panic!("the impostor daemon never answered\n{}", d.output_snapshot());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (d, scratch)
    }

    /// Starts (or restarts) host `k`'s daemon and waits until it answers on its socket.
    pub fn start_daemon(&mut self, k: usize) {
        let env = self.env(k);
        let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        self.daemons[k] = Some(spawn_daemon(&self.prefix(k), &format!("daemon {}", HOSTS[k]), &envs));
        let dir = self.fabric(k);
        let deadline = Instant::now() + START;
        while Client::connect(&dir, CALL).is_err() {
            if Instant::now() > deadline {
                panic!("daemon {} never answered\n{}", HOSTS[k], self.logs());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Host `k`'s daemon process.
    pub fn daemon(&mut self, k: usize) -> &mut Proc {
        self.daemons[k].as_mut().expect("a daemon")
    }

    /// The pid of host `k`'s daemon.
    pub fn daemon_pid(&self, k: usize) -> u32 {
        self.daemons[k].as_ref().expect("a daemon").pid()
    }

    /// A client of host `k`'s daemon.
    pub fn client(&self, k: usize) -> Client {
        Client::connect(&self.fabric(k), CALL)
            .unwrap_or_else(|e| panic!("connecting to daemon {}: {e}\n{}", HOSTS[k], self.logs()))
    }

    /// Every daemon's output so far.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for d in self.daemons.iter().flatten() {
            out += &format!("--- {} ---\n{}", d.name(), d.output_snapshot());
        }
        out
    }

    /// The states host `from` sees.
    pub fn states(&self, from: usize) -> HashMap<String, HostState> {
        let hosts = self.client(from).cluster(CALL).unwrap_or_else(|e| panic!("cluster of {}: {e}", HOSTS[from]));
        hosts.into_iter().map(|h| (h.name, h.state)).collect()
    }

    /// Waits until `from` sees `host` in `want`; returns how long that took.
    pub fn wait_state(&self, from: usize, host: usize, want: HostState, bound: Duration) -> Duration {
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
}
