//! `lanes bench ip`: unchanged programs over the IP interface (`lanes ip up`, lanes0)
//! against the same programs over a veth pair, between the same two network namespaces
//! (root).
//!
//! Two namespaces are joined by a veth pair (the namespaces' direct link, MTU `--veth-mtu`)
//! and each runs `lanes ip up` twice, over two private fabric directories: `lanes0` with
//! offloads (TSO, checksum) and `lanes1` without (both MTU `--mtu`). Per round and per
//! row, in alternating order: iperf3 TCP throughput (`--streams` streams for `--seconds`),
//! then ping round trips (`--pings` at 5 ms intervals). The figure of a row is the median
//! of its rounds; the ratios are against the veth row.

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
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "ip";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Row {
    Lanes0,
    Lanes0NoOffloads,
    Veth,
}

const ROWS: [Row; 3] = [Row::Lanes0, Row::Lanes0NoOffloads, Row::Veth];

impl Row {
    fn label(self) -> &'static str {
        match self {
            Row::Lanes0 => "lanes0 (offloads)",
            Row::Lanes0NoOffloads => "lanes1 (no offloads)",
            Row::Veth => "veth",
        }
    }

    /// The server's address on this row's link.
    fn server(self) -> &'static str {
        match self {
            Row::Lanes0 => "10.253.0.8",
            Row::Lanes0NoOffloads => "10.252.0.8",
            Row::Veth => "10.214.0.2",
        }
    }
}

/// One round of one row.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Sample {
    tcp_gbit_s: f64,
    tcp_retransmits: u64,
    ping_avg_us: f64,
    ping_min_us: f64,
    ping_max_us: f64,
    ping_lost: u32,
}

#[derive(Serialize)]
struct RunInfo {
    mtu: u32,
    veth_mtu: u32,
    streams: u32,
    seconds: u32,
    pings: u32,
    rounds: usize,
}

const UNITS: [(&str, &str); 4] = [
    ("key", "lanes0 (lanes ip up, offloads on), lanes0-no-offloads (a second interface, lanes1, offloads off), veth (the namespaces' veth pair)"),
    ("values.tcp_gbit_s", "iperf3 TCP, received, Gbit/s, median round"),
    ("values.ping_avg_us", "ping round trip, average of the round, microseconds, median round"),
    ("detail.median", "the median round (by throughput); samples.rounds: every round"),
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

/// Two namespaces, the veth pair between them, and the interfaces' processes; all gone
/// on drop.
struct Setup {
    ns: [String; 2],
    ups: Vec<Child>,
    tmp: PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        for c in &mut self.ups {
            // SAFETY: kill(2) on a child this process started and has not reaped.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        }
        for c in &mut self.ups {
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

    fn new(a: &IpArgs) -> Result<Setup, String> {
        let pid = std::process::id();
        let tmp = std::env::temp_dir().join(format!("lanes-bench-ip-{pid}"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut s = Setup { ns: [format!("lbip{pid}a"), format!("lbip{pid}b")], ups: Vec::new(), tmp };
        for n in &s.ns {
            ip(&["netns", "add", n])?;
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
        let exe = std::env::current_exe().map_err(|e| format!("finding the lanes executable: {e}"))?;
        let second = s.tmp.join("lanes1.toml");
        std::fs::write(
            &second,
            "[ip]\nname = \"lanes1\"\nipv4 = \"10.252.0.0/16\"\nipv6 = \"fd6c:616e:6574::/64\"\noffloads = false\n",
        )
        .map_err(|e| format!("{}: {e}", second.display()))?;
        for (fabric, config) in [("fabric0", None), ("fabric1", Some(&second))] {
            for k in 0..2 {
                let log = std::fs::File::create(s.tmp.join(format!("{fabric}-{k}.log"))).map_err(|e| e.to_string())?;
                let mut c = s.exec(k, exe.to_str().unwrap_or("lanes"), &["ip", "up", "--mtu", &a.mtu.to_string()]);
                c.env("LANES_DIR", s.tmp.join(fabric)).env("LANES_NODE_ID", (4 * (k + 1)).to_string());
                c.env_remove("LANES_CONFIG").env_remove("LANES_HOST");
                if let Some(p) = config {
                    c.env("LANES_CONFIG", p);
                }
                let child =
                    c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).spawn().map_err(|e| e.to_string())?;
                s.ups.push(child);
            }
        }
        for name in ["lanes0", "lanes1"] {
            for k in 0..2 {
                s.wait_carrier(k, name)?;
            }
        }
        Ok(s)
    }

    fn wait_carrier(&self, k: usize, dev: &str) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let out = ip(&["-n", &self.ns[k], "-o", "link", "show", dev]).unwrap_or_default();
            if out.contains("LOWER_UP") && !out.contains("NO-CARRIER") {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(15) {
                let log = std::fs::read_to_string(
                    self.tmp.join(format!("fabric{}-{k}.log", if dev == "lanes0" { 0 } else { 1 })),
                )
                .unwrap_or_default();
                return Err(format!("{dev} in {} has no carrier after 15 s: {out}\n{log}", self.ns[k]));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
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
    for (p, pkg) in [("iperf3", "iperf3"), ("ping", "iputils-ping"), ("ip", "iproute2")] {
        if Command::new(p).arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
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
    let title = format!(
        "lanes bench ip: two network namespaces, lanes0/lanes1 MTU {} against a veth pair MTU {}; iperf3 TCP \
         {} stream(s) for {secs} s, {pings} pings at 5 ms, {rounds} rounds\n",
        a.mtu, a.veth_mtu, a.streams
    );
    if a.json.as_deref().is_some_and(|p| p.as_os_str() == "-") {
        eprint!("{title}");
    } else {
        say(&title)?;
    }
    let setup = Setup::new(&a)?;
    let port = "5299";
    let mut server = setup
        .exec(1, "iperf3", &["-s", "-p", port])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("iperf3 -s: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    let mut by_row: Vec<(Row, Vec<Sample>)> = ROWS.iter().map(|&r| (r, Vec::new())).collect();
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let result = (|| -> Result<(), String> {
        for round in 0..rounds {
            let mut order = ROWS.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for row in order {
                if tty {
                    eprint!("\r\x1b[Kmeasuring {} round {}", row.label(), round + 1);
                }
                let (gbit, retr) = iperf3(&setup, row, secs, a.streams, port)?;
                let (avg, min, max, lost) = ping(&setup, row, pings)?;
                let s = Sample {
                    tcp_gbit_s: gbit,
                    tcp_retransmits: retr,
                    ping_avg_us: avg,
                    ping_min_us: min,
                    ping_max_us: max,
                    ping_lost: lost,
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
    report.set_units(UNITS);
    report.set_run(&RunInfo { mtu: a.mtu, veth_mtu: a.veth_mtu, streams: a.streams, seconds: secs, pings, rounds });
    report.rows = by_row
        .into_iter()
        .map(|(row, v)| {
            let (m, all) = median(v);
            report::Row::new(report::to_value(&row).as_str().unwrap_or_default())
                .with_title(row.label())
                .with_value("tcp_gbit_s", m.tcp_gbit_s)
                .with_value("ping_avg_us", m.ping_avg_us)
                .with_detail("median", &m)
                .with_samples("rounds", &all)
        })
        .collect();
    report::emit(&report, |r| drop(say(&table(r))), a.json.as_deref())
}

pub(crate) fn table(r: &Report) -> String {
    let mut t = format!(
        "{:<22} {:>9} {:>8} {:>10} {:>10} {:>10} {:>5}   {:>9} {:>9}\n",
        "row", "TCP", "retrans", "ping avg", "ping min", "ping max", "lost", "TCP", "ping avg"
    );
    t += &format!(
        "{:<22} {:>9} {:>8} {:>10} {:>10} {:>10} {:>5}   {:>19}\n",
        "", "Gbit/s", "", "us", "us", "us", "", "vs veth"
    );
    let veth = r.rows.iter().find(|x| x.key == "veth").and_then(|x| x.detail_as::<Sample>("median"));
    for row in &r.rows {
        let Some(m) = row.detail_as::<Sample>("median") else { continue };
        let ratios = match (&veth, row.key.as_str()) {
            (Some(v), k) if k != "veth" => format!(
                "{:>8.2}x {:>8.2}x",
                m.tcp_gbit_s / v.tcp_gbit_s.max(1e-9),
                m.ping_avg_us / v.ping_avg_us.max(1e-9)
            ),
            _ => String::new(),
        };
        t += &format!(
            "{:<22} {:>9.2} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>5}   {}\n",
            row.title.clone().unwrap_or_else(|| row.key.clone()),
            m.tcp_gbit_s,
            m.tcp_retransmits,
            m.ping_avg_us,
            m.ping_min_us,
            m.ping_max_us,
            m.ping_lost,
            ratios
        );
    }
    t += "TCP: iperf3's received rate, median round (by TCP); ping: that round's average, minimum and maximum\n";
    t += "round trip; ratios: this row's over the veth row's (TCP higher is better, ping lower is better).\n";
    t
}
