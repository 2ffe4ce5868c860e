//! `lanes bench ip`: unchanged programs over the IP interface (`lanes ip up`, lanes0)
//! against the same programs over a veth pair, between the same two network namespaces
//! (root).
//!
//! Two namespaces are joined by a veth pair (the namespaces' direct link, MTU `--veth-mtu`).
//! Per round and per row, in alternating order: iperf3 TCP throughput (`--streams` streams
//! for `--seconds`), then ping round trips (`--pings` at 5 ms intervals). The figure of a
//! row is the median of its rounds; the ratios are against the veth row (and, across
//! hosts, against the fabric's DMA).
//!
//! - On one host (default): each namespace runs `lanes ip up` twice, over two private
//!   fabric directories (shm): `lanes0` with offloads (TSO, checksum) and `lanes1` without
//!   (both MTU `--mtu`).
//! - Across hosts (`--hosts`): the namespaces are two hosts of a cluster, each with its own
//!   fabric directory, host key (`lanes keygen`), `lanes.toml` with `[cluster]` (provider
//!   `--provider`, over the veth link) and `lanes daemon`; each runs `lanes ip up` (lanes0,
//!   offloads on), and host b `lanes bench --serve`. The third row is the raw fabric between
//!   the same hosts: `lanes bench --transport ofi --paths ofi-dma` run from host a (its
//!   DMA bandwidth in 1 MiB writes, and libfabric's own `fi_pingpong` at 1 MiB beside it),
//!   the yardstick for lanes0 across hosts.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::report::{self, say, Machine, Report};

/// Arguments of `lanes bench ip`.
#[derive(clap::Args, Debug)]
pub struct IpArgs {
    /// A short run: 1 s of iperf3 and 50 pings per row, 2 rounds.
    #[arg(long)]
    quick: bool,
    /// Rounds (default 3; 2 with --quick).
    #[arg(long, value_name = "N")]
    rounds: Option<usize>,
    /// Seconds of iperf3 per row and round (default 3).
    #[arg(long, value_name = "S")]
    seconds: Option<u32>,
    /// iperf3 streams (-P).
    #[arg(long, default_value_t = 1)]
    streams: u32,
    /// Pings per row and round (default 200).
    #[arg(long, value_name = "N")]
    pings: Option<u32>,
    /// lanes0's and lanes1's MTU.
    #[arg(long, default_value_t = 65520)]
    mtu: u32,
    /// The veth pair's MTU.
    #[arg(long, default_value_t = 1500)]
    veth_mtu: u32,
    /// Write the results as JSON to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Across hosts: the two namespaces are hosts of a cluster (daemons, keys, libfabric
    /// over their link), and lanes0 is compared with the raw fabric's DMA between them.
    #[arg(long)]
    hosts: bool,
    /// With --hosts: the libfabric provider.
    #[arg(long, default_value = "tcp;ofi_rxm", requires = "hosts")]
    provider: String,
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "ip";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Row {
    Lanes0,
    Lanes0NoOffloads,
    FabricDma,
    Veth,
}

/// The rows on one host, and across hosts.
const ROWS: [Row; 3] = [Row::Lanes0, Row::Lanes0NoOffloads, Row::Veth];
const HOST_ROWS: [Row; 3] = [Row::Lanes0, Row::FabricDma, Row::Veth];

impl Row {
    fn label(self) -> &'static str {
        match self {
            Row::Lanes0 => "lanes0 (offloads)",
            Row::Lanes0NoOffloads => "lanes1 (no offloads)",
            Row::FabricDma => "fabric DMA",
            Row::Veth => "veth",
        }
    }

    /// The server's address on this row's link.
    fn server(self) -> &'static str {
        match self {
            Row::Lanes0 => "10.253.0.8",
            Row::Lanes0NoOffloads => "10.252.0.8",
            Row::FabricDma | Row::Veth => "10.214.0.2",
        }
    }
}

/// One round of one row.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Sample {
    /// iperf3's received rate; on the fabric-dma row, the DMA's.
    tcp_gbit_s: f64,
    tcp_retransmits: u64,
    ping_avg_us: f64,
    ping_min_us: f64,
    ping_max_us: f64,
    ping_lost: u32,
    /// On the fabric-dma row: `fi_pingpong` at 1 MiB in the same run (one way, Gbit/s).
    fi_pingpong_gbit_s: f64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct RunInfo {
    mtu: u32,
    veth_mtu: u32,
    streams: u32,
    seconds: u32,
    pings: u32,
    rounds: usize,
    /// Across hosts (`--hosts`), and their provider.
    hosts: bool,
    provider: String,
}

const UNITS: [(&str, &str); 4] = [
    ("key", "lanes0 (lanes ip up, offloads on), lanes0-no-offloads (a second interface, lanes1, offloads off), veth (the namespaces' veth pair)"),
    ("values.tcp_gbit_s", "iperf3 TCP, received, Gbit/s, median round"),
    ("values.ping_avg_us", "ping round trip, average of the round, microseconds, median round"),
    ("detail.median", "the median round (by throughput); samples.rounds: every round"),
];

const HOST_UNITS: [(&str, &str); 4] = [
    ("key", "lanes0 (lanes ip up on two hosts of a cluster, offloads on), fabric-dma (lanes bench --transport ofi --paths ofi-dma between the same hosts), veth (the hosts' direct link, which the fabric runs over)"),
    ("values.tcp_gbit_s", "iperf3 TCP, received, Gbit/s; fabric-dma: the DMA's bandwidth in 1 MiB writes, Gbit/s; median round"),
    ("values.ping_avg_us", "ping round trip, average of the round, microseconds, median round (none for fabric-dma)"),
    ("detail.median", "the median round (by throughput); samples.rounds: every round; fi_pingpong_gbit_s: libfabric's fi_pingpong at 1 MiB in the fabric-dma run"),
];

/// The hosts' daemon port on their link, and the bench server's.
const DAEMON_PORT: u16 = 7711;
const SERVE_PORT: u16 = 7712;
/// The nodes of hosts a and b.
const HOST_NODES: [u32; 2] = [4, 8];
/// What a `lanes` child must not inherit from the caller (its own are set).
const LANES_VARS: [&str; 8] = [
    "LANES_NODE_ID",
    "LANES_DIR",
    "LANES_CONFIG",
    "LANES_HOST",
    "LANES_KEY_FILE",
    "LANES_OFI_PROVIDER",
    "LANES_OFI_PROGRESS",
    "LANES_OFI_POLL_US",
];

/// Runs `cmd` to its end, at most `limit`; its standard output, or an error with stderr.
fn run_for(mut cmd: Command, limit: Duration) -> Result<String, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: {e}"))?;
    let start = Instant::now();
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{what}: no end within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("{what}: {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String, String> {
    let mut c = Command::new("ip");
    c.args(args);
    run_for(c, Duration::from_secs(10))
}

/// Two namespaces, the veth pair between them, and the processes run in them (interfaces,
/// daemons, the bench server); all gone on drop.
struct Setup {
    ns: [String; 2],
    /// Ended in reverse order: the interfaces and the server before the daemons.
    procs: Vec<Child>,
    tmp: PathBuf,
    exe: PathBuf,
    /// Across hosts: each host's environment (`LANES_CONFIG`, `LANES_HOST`, `LANES_DIR`,
    /// `LANES_KEY_FILE`).
    host_env: Option<[Vec<(String, String)>; 2]>,
}

impl Drop for Setup {
    fn drop(&mut self) {
        for c in self.procs.iter_mut().rev() {
            // SAFETY: kill(2) on a child this process started and has not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let start = Instant::now();
            while matches!(c.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

impl Setup {
    fn exec(&self, k: usize, prog: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[k], prog]).args(args);
        c
    }

    /// `lanes ARGS` in namespace `k`, as host `k` across hosts, with `node`.
    fn lanes(&self, k: usize, node: u32, args: &[&str]) -> Command {
        let mut c = self.exec(k, self.exe.to_str().unwrap_or("lanes"), args);
        for v in LANES_VARS {
            c.env_remove(v);
        }
        if let Some(env) = &self.host_env {
            c.envs(env[k].iter().map(|(k, v)| (k, v)));
        }
        c.env("LANES_NODE_ID", node.to_string());
        c
    }

    /// Starts `cmd` with its standard error into `log` (in the scratch directory).
    fn spawn(&mut self, mut cmd: Command, log: &str) -> Result<(), String> {
        let log = std::fs::File::create(self.tmp.join(log)).map_err(|e| format!("{log}: {e}"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {cmd:?}: {e}"))?;
        self.procs.push(child);
        Ok(())
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.tmp.join(name)).unwrap_or_default()
    }

    /// The namespaces and the veth pair between them.
    fn namespaces(a: &IpArgs) -> Result<Setup, String> {
        let pid = std::process::id();
        let tmp = std::env::temp_dir().join(format!("lanes-bench-ip-{pid}"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let exe = std::env::current_exe().map_err(|e| format!("finding the lanes executable: {e}"))?;
        let mut s = Setup { ns: [String::new(), String::new()], procs: Vec::new(), tmp, exe, host_env: None };
        for (k, n) in [format!("lbip{pid}a"), format!("lbip{pid}b")].into_iter().enumerate() {
            ip(&["netns", "add", &n])?;
            s.ns[k] = n;
        }
        let (a_ns, b_ns) = (&s.ns[0], &s.ns[1]);
        let mtu = a.veth_mtu.to_string();
        ip(&["-n", a_ns, "link", "add", "veth0", "mtu", &mtu, "type", "veth", "peer", "name", "veth1", "mtu", &mtu])?;
        ip(&["-n", a_ns, "link", "set", "veth1", "netns", b_ns])?;
        ip(&["-n", a_ns, "addr", "add", "10.214.0.1/24", "dev", "veth0"])?;
        ip(&["-n", b_ns, "addr", "add", "10.214.0.2/24", "dev", "veth1"])?;
        for (n, dev) in [(a_ns, "veth0"), (b_ns, "veth1")] {
            ip(&["-n", n, "link", "set", dev, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        Ok(s)
    }

    /// On one host: lanes0 (offloads) and lanes1 (none) in both namespaces, each pair over
    /// a fabric directory of its own.
    fn one_host(a: &IpArgs) -> Result<Setup, String> {
        let mut s = Setup::namespaces(a)?;
        let second = s.tmp.join("lanes1.toml");
        std::fs::write(
            &second,
            "[ip]\nname = \"lanes1\"\nipv4 = \"10.252.0.0/16\"\nipv6 = \"fd6c:616e:6574::/64\"\noffloads = false\n",
        )
        .map_err(|e| format!("{}: {e}", second.display()))?;
        for (fabric, config) in [("fabric0", None), ("fabric1", Some(&second))] {
            for (k, node) in HOST_NODES.into_iter().enumerate() {
                let mut c = s.lanes(k, node, &["ip", "up", "--mtu", &a.mtu.to_string()]);
                c.env("LANES_DIR", s.tmp.join(fabric));
                if let Some(p) = config {
                    c.env("LANES_CONFIG", p);
                }
                s.spawn(c, &format!("{fabric}-{k}.log"))?;
            }
        }
        for (name, fabric) in [("lanes0", "fabric0"), ("lanes1", "fabric1")] {
            for k in 0..2 {
                s.wait_carrier(k, name, &format!("{fabric}-{k}.log"))?;
            }
        }
        Ok(s)
    }

    /// Across hosts: keys, lanes.toml, a daemon per host, lanes0 on both, the bench server
    /// on b.
    fn hosts(a: &IpArgs) -> Result<Setup, String> {
        let mut s = Setup::namespaces(a)?;
        let hosts = ["a", "b"];
        let mut config = format!("[cluster]\nprovider = \"{}\"\n", a.provider.replace(['"', '\\'], ""));
        let mut envs: [Vec<(String, String)>; 2] = [Vec::new(), Vec::new()];
        let path = |p: &std::path::Path| p.to_string_lossy().into_owned();
        let conf = s.tmp.join("lanes.toml");
        for (k, h) in hosts.iter().enumerate() {
            let key = s.tmp.join(format!("{h}.key"));
            let mut kg = Command::new(&s.exe);
            kg.args(["keygen", "--out"]).arg(&key);
            let out = run_for(kg, Duration::from_secs(20))?;
            let public = out
                .lines()
                .find_map(|l| l.strip_prefix("public_key = "))
                .ok_or_else(|| format!("lanes keygen printed no public key: {out:?}"))?;
            config += &format!(
                "[[node]]\nid = {}\nhost = \"{h}\"\naddress = \"10.214.0.{}:{DAEMON_PORT}\"\npublic_key = {public}\n",
                HOST_NODES[k],
                k + 1
            );
            let fabric = s.tmp.join(format!("fabric-{h}"));
            std::fs::create_dir_all(&fabric).map_err(|e| format!("{}: {e}", fabric.display()))?;
            envs[k] = vec![
                ("LANES_CONFIG".into(), path(&conf)),
                ("LANES_HOST".into(), h.to_string()),
                ("LANES_DIR".into(), path(&fabric)),
                ("LANES_KEY_FILE".into(), path(&key)),
            ];
        }
        std::fs::write(&conf, config).map_err(|e| format!("{}: {e}", conf.display()))?;
        s.host_env = Some(envs);
        for (k, h) in hosts.iter().enumerate() {
            let c = s.lanes(k, HOST_NODES[k], &["daemon"]);
            s.spawn(c, &format!("daemon-{h}.log"))?;
        }
        for (k, h) in hosts.iter().enumerate() {
            s.wait_operational(k, hosts[1 - k], &format!("daemon-{h}.log"))?;
        }
        for (k, h) in hosts.iter().enumerate() {
            let c = s.lanes(k, HOST_NODES[k], &["ip", "up", "--mtu", &a.mtu.to_string()]);
            s.spawn(c, &format!("ip-{h}.log"))?;
        }
        for (k, h) in hosts.iter().enumerate() {
            s.wait_carrier(k, "lanes0", &format!("ip-{h}.log"))?;
        }
        let c = s.lanes(1, HOST_NODES[1], &["bench", "--serve", "--port", &SERVE_PORT.to_string()]);
        s.spawn(c, "serve-b.log")?;
        Ok(s)
    }

    /// Until host `k`'s daemon sees `other` operational (20 s at most).
    fn wait_operational(&self, k: usize, other: &str, log: &str) -> Result<(), String> {
        let dir = self.host_env.as_ref().map(|e| PathBuf::from(&e[k][2].1)).ok_or("not across hosts")?;
        let start = Instant::now();
        loop {
            let seen = lanes::cluster::Client::connect(&dir, Duration::from_secs(2))
                .and_then(|mut c| c.cluster(Duration::from_secs(2)))
                .map(|hosts| {
                    hosts.iter().any(|h| h.name == other && h.state == lanes::cluster::HostState::Operational)
                });
            if matches!(seen, Ok(true)) {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!(
                    "the daemon of {} does not see host {other} operational after 20 s ({seen:?})\n{}",
                    self.ns[k],
                    self.log(log)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_carrier(&self, k: usize, dev: &str, log: &str) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let out = ip(&["-n", &self.ns[k], "-o", "link", "show", dev]).unwrap_or_default();
            if out.contains("LOWER_UP") && !out.contains("NO-CARRIER") {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(15) {
                return Err(format!("{dev} in {} has no carrier after 15 s: {out}\n{}", self.ns[k], self.log(log)));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The raw fabric between the hosts: `lanes bench --transport ofi --paths ofi-dma` from
/// host a against the server on b; the DMA's and fi_pingpong's 1 MiB rates, Gbit/s.
fn fabric_dma(s: &Setup, secs: u32) -> Result<(f64, f64), String> {
    let secs = secs.to_string();
    #[rustfmt::skip]
    let args = [
        "bench", "--transport", "ofi", "--remote-node", "8", "--port", &SERVE_PORT.to_string(),
        "--paths", "ofi-dma", "--rounds", "1", "--stream-secs", &secs, "--json", "-",
    ];
    let mut last = String::new();
    // The server may still be starting (its first round) or closing the last client.
    for _ in 0..10 {
        match run_for(s.lanes(0, HOST_NODES[0], &args), Duration::from_secs(120)) {
            Ok(out) => {
                let v: serde_json::Value =
                    serde_json::from_str(&out).map_err(|e| format!("lanes bench --transport ofi JSON: {e}"))?;
                let rows = v["rows"].as_array().cloned().unwrap_or_default();
                let gbit = |key: &str| {
                    rows.iter()
                        .find(|r| r["key"] == key && r["size"].as_u64() == Some(1 << 20))
                        .and_then(|r| r["values"]["gbps"].as_f64())
                        .map(|gbyte| gbyte * 8.0)
                };
                let dma = gbit("ofi-dma").ok_or_else(|| format!("no ofi-dma row in {out}"))?;
                return Ok((dma, gbit("fi_pingpong").unwrap_or(0.0)));
            }
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(format!("the fabric's DMA: {last}\nserver: {}", s.log("serve-b.log")))
}

fn iperf3(s: &Setup, row: Row, secs: u32, streams: u32, port: &str) -> Result<(f64, u64), String> {
    let (secs, streams) = (secs.to_string(), streams.to_string());
    let args = ["-c", row.server(), "-p", port, "-t", &secs, "-P", &streams, "-J"];
    let mut last = String::new();
    // The server takes one client at a time and may still be closing the last one.
    for _ in 0..5 {
        match run_for(s.exec(0, "iperf3", &args), Duration::from_secs(secs.parse::<u64>().unwrap_or(3) + 20)) {
            Ok(out) => {
                let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("iperf3 JSON: {e}"))?;
                let end = &v["end"];
                let bps = end["sum_received"]["bits_per_second"].as_f64().unwrap_or(0.0);
                let retr = end["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
                return Ok((bps / 1e9, retr));
            }
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    Err(format!("iperf3 over {}: {last}", row.label()))
}

/// (avg, min, max, lost) of `n` pings, in microseconds.
fn ping(s: &Setup, row: Row, n: u32) -> Result<(f64, f64, f64, u32), String> {
    let count = n.to_string();
    let out = run_for(
        s.exec(0, "ping", &["-q", "-c", &count, "-i", "0.005", "-W", "1", row.server()]),
        Duration::from_secs(u64::from(n) / 50 + 15),
    )?;
    let received = out
        .lines()
        .find_map(|l| l.split(", ").find_map(|p| p.strip_suffix(" received")))
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(0);
    let rtt = out
        .lines()
        .find_map(|l| l.split(" = ").nth(1))
        .ok_or_else(|| format!("ping over {}: no round-trip line in {out:?}", row.label()))?;
    let v: Vec<f64> = rtt.trim_end_matches(" ms").split('/').filter_map(|x| x.parse().ok()).collect();
    if v.len() < 3 {
        return Err(format!("ping over {}: {rtt:?}", row.label()));
    }
    Ok((v[1] * 1e3, v[0] * 1e3, v[2] * 1e3, n.saturating_sub(received)))
}

fn median(mut v: Vec<Sample>) -> (Sample, Vec<Sample>) {
    let all = v.clone();
    v.sort_by(|a, b| a.tcp_gbit_s.total_cmp(&b.tcp_gbit_s));
    (v[v.len() / 2].clone(), all)
}

/// Runs `lanes bench ip`.
pub fn run(a: IpArgs) -> Result<(), String> {
    let started = std::time::SystemTime::now();
    let mut tools = vec![("iperf3", "iperf3"), ("ping", "iputils-ping"), ("ip", "iproute2")];
    if a.hosts {
        tools.push(("fi_pingpong", "libfabric-bin"));
        if !lanes::OFI_TRANSPORT {
            return Err(
                "lanes bench ip --hosts: this build has no ofi transport (build with --features lanes/ofi)".into()
            );
        }
    }
    for (p, pkg) in tools {
        let found = std::env::var_os("PATH").is_some_and(|v| std::env::split_paths(&v).any(|d| d.join(p).is_file()));
        if !found {
            return Err(format!("{p} is not installed (Debian: apt-get install {pkg})"));
        }
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("lanes bench ip makes network namespaces and TUN devices: run it as root".into());
    }
    let rounds = a.rounds.unwrap_or(if a.quick { 2 } else { 3 }).max(1);
    let secs = a.seconds.unwrap_or(if a.quick { 1 } else { 3 }).max(1);
    let pings = a.pings.unwrap_or(if a.quick { 50 } else { 200 }).max(1);
    let title = if a.hosts {
        format!(
            "lanes bench ip --hosts: two network namespaces as two hosts of a cluster ({}), lanes0 MTU {} against \
             the fabric's DMA and their veth link MTU {}; iperf3 TCP {} stream(s) for {secs} s, {pings} pings at \
             5 ms, {rounds} rounds\n",
            a.provider, a.mtu, a.veth_mtu, a.streams
        )
    } else {
        format!(
            "lanes bench ip: two network namespaces, lanes0/lanes1 MTU {} against a veth pair MTU {}; iperf3 TCP \
             {} stream(s) for {secs} s, {pings} pings at 5 ms, {rounds} rounds\n",
            a.mtu, a.veth_mtu, a.streams
        )
    };
    if a.json.as_deref().is_some_and(|p| p.as_os_str() == "-") {
        eprint!("{title}");
    } else {
        say(&title)?;
    }
    let (setup, rows) = if a.hosts { (Setup::hosts(&a)?, HOST_ROWS) } else { (Setup::one_host(&a)?, ROWS) };
    let port = "5299";
    let mut server = setup
        .exec(1, "iperf3", &["-s", "-p", port])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("iperf3 -s: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    let mut by_row: Vec<(Row, Vec<Sample>)> = rows.iter().map(|&r| (r, Vec::new())).collect();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let result = (|| -> Result<(), String> {
        for round in 0..rounds {
            let mut order = rows.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for row in order {
                if tty {
                    eprint!("\r\x1b[Kmeasuring {} round {}", row.label(), round + 1);
                }
                let s = if row == Row::FabricDma {
                    let (dma, fi) = fabric_dma(&setup, secs)?;
                    Sample { tcp_gbit_s: dma, fi_pingpong_gbit_s: fi, ..Sample::default() }
                } else {
                    let (gbit, retr) = iperf3(&setup, row, secs, a.streams, port)?;
                    let (avg, min, max, lost) = ping(&setup, row, pings)?;
                    Sample {
                        tcp_gbit_s: gbit,
                        tcp_retransmits: retr,
                        ping_avg_us: avg,
                        ping_min_us: min,
                        ping_max_us: max,
                        ping_lost: lost,
                        fi_pingpong_gbit_s: 0.0,
                    }
                };
                by_row.iter_mut().find(|(r, _)| *r == row).expect("row").1.push(s);
            }
        }
        Ok(())
    })();
    if tty {
        eprint!("\r\x1b[K");
    }
    let _ = server.kill();
    let _ = server.wait();
    drop(setup);
    result?;
    let mut report = Report::new(BENCHMARK, Machine::this(started));
    report.set_units(if a.hosts { HOST_UNITS } else { UNITS });
    report.set_run(&RunInfo {
        mtu: a.mtu,
        veth_mtu: a.veth_mtu,
        streams: a.streams,
        seconds: secs,
        pings,
        rounds,
        hosts: a.hosts,
        provider: if a.hosts { a.provider.clone() } else { String::new() },
    });
    report.rows = by_row
        .into_iter()
        .map(|(row, v)| {
            let (m, all) = median(v);
            let r = report::Row::new(report::to_value(&row).as_str().unwrap_or_default())
                .with_title(row.label())
                .with_value("tcp_gbit_s", m.tcp_gbit_s);
            let r = if row == Row::FabricDma { r } else { r.with_value("ping_avg_us", m.ping_avg_us) };
            r.with_detail("median", &m).with_samples("rounds", &all)
        })
        .collect();
    report::emit(&report, |r| drop(say(&table(r))), a.json.as_deref())
}

pub(crate) fn table(r: &Report) -> String {
    let run: RunInfo = r.run_as();
    let dma = r.rows.iter().find(|x| x.key == "fabric-dma").and_then(|x| x.detail_as::<Sample>("median"));
    let mut t = format!(
        "{:<22} {:>9} {:>8} {:>10} {:>10} {:>10} {:>5}   {:>9} {:>9}{}\n",
        "row",
        "Gbit/s",
        "retrans",
        "ping avg",
        "ping min",
        "ping max",
        "lost",
        "TCP",
        "ping avg",
        if dma.is_some() { "   TCP vs DMA" } else { "" }
    );
    t += &format!(
        "{:<22} {:>9} {:>8} {:>10} {:>10} {:>10} {:>5}   {:>19}\n",
        "", "", "", "us", "us", "us", "", "vs veth"
    );
    let veth = r.rows.iter().find(|x| x.key == "veth").and_then(|x| x.detail_as::<Sample>("median"));
    for row in &r.rows {
        let Some(m) = row.detail_as::<Sample>("median") else { continue };
        let title = row.title.clone().unwrap_or_else(|| row.key.clone());
        if row.key == "fabric-dma" {
            t += &format!("{title:<22} {:>9.2}\n", m.tcp_gbit_s);
            continue;
        }
        let mut ratios = match (&veth, row.key.as_str()) {
            (Some(v), k) if k != "veth" => format!(
                "{:>8.2}x {:>8.2}x",
                m.tcp_gbit_s / v.tcp_gbit_s.max(1e-9),
                m.ping_avg_us / v.ping_avg_us.max(1e-9)
            ),
            _ => format!("{:>19}", ""),
        };
        if let Some(d) = &dma {
            ratios += &format!("   {:>10.2}x", m.tcp_gbit_s / d.tcp_gbit_s.max(1e-9));
        }
        t += &format!(
            "{title:<22} {:>9.2} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>5}   {}\n",
            m.tcp_gbit_s, m.tcp_retransmits, m.ping_avg_us, m.ping_min_us, m.ping_max_us, m.ping_lost, ratios
        );
    }
    t += "TCP: iperf3's received rate, median round (by TCP); ping: that round's average, minimum and maximum\n";
    t += "round trip; ratios: this row's over the veth row's (TCP higher is better, ping lower is better).\n";
    if let Some(d) = &dma {
        t += &format!(
            "Across hosts ({}): fabric DMA is `lanes bench --transport ofi --paths ofi-dma` between the same hosts\n\
             (1 MiB writes); the issue's target for lanes0 is TCP vs DMA >= 0.80",
            if run.provider.is_empty() { "ofi" } else { run.provider.as_str() }
        );
        if let Some(l) = r.rows.iter().find(|x| x.key == "lanes0").and_then(|x| x.detail_as::<Sample>("median")) {
            let ratio = l.tcp_gbit_s / d.tcp_gbit_s.max(1e-9);
            t += &format!(": {ratio:.2}x, {}", if ratio >= 0.8 { "met" } else { "MISSED" });
        }
        t += ".\n";
    }
    t
}
