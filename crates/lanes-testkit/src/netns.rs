//! Three test "hosts" as network namespaces on a bridge in a fourth (docs/design/multi-host.md,
//! section 12).
//!
//! `Netns::three()` creates `lt<pid>n<k>a`, `...b`, `...c` (the hosts) and `...s` (the
//! switch, holding bridge `br0`). Each host's `eth0` is one end of a veth pair created
//! directly inside the host's namespace, its peer `p<h>` directly inside the switch's, so no
//! interface, address or route ever appears in the caller's namespace. Hosts get
//! 10.77.0.1-3/24: every test reuses the range inside its own isolated namespaces.
//!
//! Dropping a `Netns` (also while unwinding from a panic) deletes its namespaces, which
//! deletes their interfaces. Names left behind by a killed test process are swept by
//! [`sweep_stale`] (the creating pid is part of the name), which every netns test calls
//! first and scripts/test.sh runs at the end.

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The hosts' names, as the cluster configuration and `LANES_HOST` call them.
pub const HOSTS: [&str; 3] = ["a", "b", "c"];
/// Longest an `ip` command may take.
const IP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why network namespaces cannot be used here, if they cannot.
pub fn unusable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let caps = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    if caps & (1 << CAP_NET_ADMIN) == 0 || caps & (1 << CAP_SYS_ADMIN) == 0 {
        return Some("network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root)".into());
    }
    if let Err(e) = ip(&["-V"]) {
        return Some(format!("the `ip` command (iproute2) is not usable: {e}"));
    }
    None
}

/// `Some(reason)` when the test must be skipped. Under CI (`CI` set) there is no skipping:
/// a missing privilege fails the test.
pub fn skip_reason(test: &str) -> Option<String> {
    let why = unusable()?;
    if std::env::var_os("CI").is_some() {
        panic!("{test}: {why}; CI must run the network-namespace tests");
    }
    eprintln!("skipping {test}: {why}");
    Some(why)
}

/// Runs `ip ARGS`, bounded by `IP_TIMEOUT`; the error carries its stderr.
pub fn ip(args: &[&str]) -> Result<String, String> {
    let mut child = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    let deadline = Instant::now() + IP_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("ip {}: no answer within {IP_TIMEOUT:?}", args.join(" ")));
            }
            Err(e) => return Err(format!("ip {}: {e}", args.join(" "))),
        }
    }
    let out = child.wait_with_output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("ip {}: {} {}", args.join(" "), out.status, String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Deletes test namespaces (`lt<pid>n<k><x>`) whose creating process is gone.
pub fn sweep_stale() {
    let Ok(list) = ip(&["netns", "list"]) else { return };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = creator_pid(name) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            match ip(&["netns", "del", name]) {
                Ok(_) => eprintln!("removed stale test namespace {name} (pid {pid} is gone)"),
                Err(e) => eprintln!("cannot remove stale test namespace {name}: {e}"),
            }
        }
    }
}

/// The pid in a test namespace's name `lt<pid>n<k><a|b|c|s>`.
pub fn creator_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("lt")?;
    let (pid, rest) = rest.split_once('n')?;
    let k = rest.strip_suffix(['a', 'b', 'c', 's'])?;
    if k.is_empty() || !k.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Three hosts and a switch; deleted on drop.
pub struct Netns {
    base: String,
    made: Vec<String>,
}

impl Netns {
    /// Builds the three hosts. Panics (after cleaning up what it made) if `ip` fails.
    pub fn three() -> Netns {
        sweep_stale();
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut n = Netns { base: format!("lt{}n{k}", std::process::id()), made: Vec::new() };
        if let Err(e) = n.build() {
            panic!("building the test namespaces: {e}"); // Drop deletes what was made
        }
        n
    }

    fn build(&mut self) -> Result<(), String> {
        let switch = self.switch();
        let names: Vec<String> = HOSTS.iter().map(|h| self.ns_of(h)).chain([switch.clone()]).collect();
        for name in names {
            ip(&["netns", "add", &name])?;
            self.made.push(name);
        }
        for h in HOSTS {
            ip(&["-n", &self.ns_of(h), "link", "set", "lo", "up"])?;
        }
        self.link_hosts("br0", "eth0", "p", Self::address)
    }

    /// Gives every host a second link, `eth1` on a bridge of its own (`br1`), with
    /// [`Netns::ethernet_address`]: the "Ethernet" beside the fabric's network (`eth0`,
    /// lanes.toml's addresses, which the provider and the daemons use), so that the fabric
    /// can be cut while connections over the Ethernet stand.
    pub fn add_ethernet(&self) {
        self.link_hosts("br1", "eth1", "q", Self::ethernet_address).expect("a second link for every host");
    }

    /// Bridge `bridge` in the switch, and on every host a link `dev` to it (a veth pair, its
    /// switch end named `port` and the host's letter) with `address(k)`/24, up.
    fn link_hosts(&self, bridge: &str, dev: &str, port: &str, address: fn(usize) -> String) -> Result<(), String> {
        let switch = self.switch();
        ip(&["-n", &switch, "link", "add", bridge, "type", "bridge"])?;
        ip(&["-n", &switch, "link", "set", bridge, "up"])?;
        for (k, h) in HOSTS.iter().enumerate() {
            let ns = self.ns_of(h);
            let port = format!("{port}{h}");
            ip(&["link", "add", dev, "netns", &ns, "type", "veth", "peer", "name", &port, "netns", &switch])?;
            ip(&["-n", &switch, "link", "set", &port, "master", bridge, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", address(k)), "dev", dev])?;
            ip(&["-n", &ns, "link", "set", dev, "up"])?;
        }
        for k in 0..HOSTS.len() {
            self.wait_operstate(k, dev, "UP")?;
        }
        Ok(())
    }

    /// Host `k`'s address on the second link ([`Netns::add_ethernet`]).
    pub fn ethernet_address(k: usize) -> String {
        format!("10.78.0.{}", k + 1)
    }

    fn switch(&self) -> String {
        format!("{}s", self.base)
    }

    fn ns_of(&self, host: &str) -> String {
        format!("{}{host}", self.base)
    }

    /// The namespace of host `k`.
    pub fn ns(&self, k: usize) -> String {
        self.ns_of(HOSTS[k])
    }

    /// Host `k`'s address.
    pub fn address(k: usize) -> String {
        format!("10.77.0.{}", k + 1)
    }

    /// The command prefix that runs a program on host `k`.
    pub fn exec_prefix(&self, k: usize) -> Vec<String> {
        vec!["ip".into(), "netns".into(), "exec".into(), self.ns(k)]
    }

    /// A machine on the hosts' network that is none of them: the switch's namespace, given
    /// the address [`Netns::OUTSIDER`] on its bridge (once). Returns the command prefix that
    /// runs a program there.
    pub fn outsider(&self) -> Vec<String> {
        let switch = self.switch();
        let have = ip(&["-n", &switch, "-o", "addr", "show", "dev", "br0"]).unwrap_or_default();
        if !have.contains(&format!("{} ", Self::OUTSIDER)) && !have.contains(&format!("{}/", Self::OUTSIDER)) {
            ip(&["-n", &switch, "addr", "add", &format!("{}/24", Self::OUTSIDER), "dev", "br0"])
                .expect("an address for the outsider");
        }
        vec!["ip".into(), "netns".into(), "exec".into(), switch]
    }

    /// Gives every host an IPv6 address too ([`Netns::address6`]; no duplicate address
    /// detection, so it is usable at once).
    pub fn add_ipv6(&self) {
        for k in 0..HOSTS.len() {
            let a = format!("{}/64", Self::address6(k));
            ip(&["-n", &self.ns(k), "addr", "add", &a, "dev", "eth0", "nodad"]).expect("an IPv6 address");
        }
    }

    /// Host `k`'s IPv6 address, once [`Netns::add_ipv6`] gave it.
    pub fn address6(k: usize) -> String {
        format!("fd77::{}", k + 1)
    }

    /// The outsider's address ([`Netns::outsider`]).
    pub const OUTSIDER: &'static str = "10.77.0.9";

    /// Takes host `k`'s link (the fabric's network) down or up (its switch port loses
    /// carrier too).
    pub fn set_link(&self, k: usize, up: bool) {
        self.set_device(k, "eth0", up);
    }

    /// Takes host `k`'s device `dev` down or up (`eth0`, or `eth1`: the second link of
    /// [`Netns::add_ethernet`]).
    pub fn set_device(&self, k: usize, dev: &str, up: bool) {
        let ns = self.ns(k);
        ip(&["-n", &ns, "link", "set", dev, if up { "up" } else { "down" }]).expect("ip link set");
        if up {
            self.wait_operstate(k, dev, "UP").unwrap_or_else(|e| panic!("{dev} comes up: {e}"));
        }
    }

    fn wait_operstate(&self, k: usize, dev: &str, want: &str) -> Result<(), String> {
        let ns = self.ns(k);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let out = ip(&["-n", &ns, "-o", "link", "show", dev])?;
            if out.contains(&format!("state {want}")) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("{dev} of {ns} not {want} after 5 s: {}", out.trim()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for name in self.made.iter().rev() {
            if let Err(e) = ip(&["netns", "del", name]) {
                eprintln!("cannot delete test namespace {name}: {e}");
            }
        }
    }
}
