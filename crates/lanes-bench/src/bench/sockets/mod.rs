//! `lanes bench sockets`: unchanged programs over kernel TCP and over the socket accelerator
//! (`liblanes_sockets.so` preloaded into both ends), interleaved A/B in one invocation.
//!
//! Each measurement is a server and a client on loopback, on a fresh port: sockperf
//! ping-pong over TCP and over UDP (average latency), sockperf 64-byte throughput over TCP
//! and UDP (messages/s), a UDP multicast fan-out to four local receivers (average delivery
//! latency, duplicates and losses), iperf3 with 128 KiB
//! writes (Gbit/s received), redis-benchmark GET (p50), both pinned to two different CPUs;
//! a blocking 100-byte ping-pong (round trips/s) pinned the same way, quiet and with a
//! busy-loop process on every CPU; and, floating over all CPUs, pgbench TPC-B and
//! select-only against a temporary PostgreSQL cluster (tps) and nginx with two workers under
//! wrk (requests/s). Every round runs each measurement once without and once with the
//! library, alternating which goes first; the figure of a mode is the median of its rounds,
//! and the ratio the median of the rounds' own ratios (each round's two runs are back to
//! back, so a machine that slows down between rounds moves both).
//!
//! With `--remote-node N`, two of the rows run between this host and N's host instead
//! (`across_hosts.rs`), against `lanes bench --serve` there.
//!
//! ```text
//! mod.rs      arguments, the rounds, the table and the JSON
//! across_hosts.rs  the rows between two hosts of a cluster (`--remote-node`)
//! tools.rs    the measurements' table; sockperf, iperf3, redis: command lines and parsers
//! fanout.rs   the multicast fan-out (this executable as sender and four receivers)
//! servers.rs  the blocking ping-pong (this executable), PostgreSQL and nginx
//! procs.rs    starting, pinning, time-limiting and always stopping the programs; CPU hogs
//! ```

pub(crate) mod across_hosts;
pub(crate) mod fanout;
pub(crate) mod procs;
pub(crate) mod servers;
pub(crate) mod tools;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use crate::bench::progress::Progress;
use crate::measure::affinity;
use crate::measure::stats::fmt_ns;
use crate::preload;
use crate::report::{say, to_value, Machine, Report, Row};
use procs::{Launch, Mode};
use servers::{Params, Sample};
use tools::{Tool, TOOLS};

/// Arguments of `lanes bench sockets`.
#[derive(clap::Args, Debug)]
pub struct SocketsArgs {
    /// Seconds per measurement (default 3; 1 with --quick).
    #[arg(long, value_name = "T")]
    seconds: Option<u64>,
    /// Rounds: each measures every row without and with the library, alternating which goes
    /// first (default 3; 2 with --quick).
    #[arg(long, value_name = "N")]
    rounds: Option<usize>,
    /// A short run: 1 s per measurement, 2 rounds (about a minute).
    #[arg(long)]
    quick: bool,
    /// Rows to run, comma-separated (default all): sockperf-latency, sockperf-throughput,
    /// sockperf-udp-latency, sockperf-udp-throughput, mcast-fanout, dds-pingpong, iperf3, redis-get,
    /// pingpong, pingpong-hog, pgbench-tpcb,
    /// pgbench-select, nginx, nginx-close.
    #[arg(long, value_name = "LIST")]
    only: Option<String>,
    /// Concurrent redis-benchmark clients (its -c).
    #[arg(long, value_name = "N", default_value_t = 50)]
    redis_clients: usize,
    /// CPUs: `A,B` runs the servers on A and the clients on B (default: the first two allowed).
    #[arg(long, value_name = "A,B")]
    cpu: Option<String>,
    /// Write the results as JSON to FILE (`-` for standard output; the table then goes to
    /// standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Exit with a failure if a target is missed or a row could not be measured.
    #[arg(long)]
    strict: bool,
    /// Run sockperf-latency and iperf3 between this host and node N's host of the cluster,
    /// against `lanes bench --serve` there (started as node N), instead of on loopback.
    #[arg(long, value_name = "N")]
    remote_node: Option<u32>,
    /// With --remote-node: the server's port (default: that host's daemon port + 1).
    #[arg(long, value_name = "PORT", requires = "remote_node")]
    port: Option<u16>,
    /// With --remote-node: pair connections with the other host at both ends whatever the
    /// configuration says (`LANES_SOCKETS_REMOTE=on`), to measure the fabric stream on a
    /// provider `auto` leaves alone (tcp).
    #[arg(long, requires = "remote_node")]
    force_remote: bool,
    /// (internal) the blocking ping-pong's server on this loopback port.
    #[arg(long, hide = true, value_name = "PORT")]
    pingpong_server: Option<u16>,
    /// (internal) the blocking ping-pong's client to this loopback port, for --seconds.
    #[arg(long, hide = true, value_name = "PORT")]
    pingpong_client: Option<u16>,
    /// (internal) a multicast fan-out receiver on this port.
    #[arg(long, hide = true, value_name = "PORT")]
    mcast_receiver: Option<u16>,
    /// (internal) the multicast fan-out's sender to this port, for --seconds.
    #[arg(long, hide = true, value_name = "PORT")]
    mcast_sender: Option<u16>,
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "sockets";

/// How a run was made: the report's `run`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct RunInfo {
    seconds: u64,
    rounds: usize,
    quick: bool,
    /// Servers' CPU, clients' CPU.
    cpus: Option<[usize; 2]>,
    /// The library preloaded for the `lanes` figures.
    library: Option<String>,
    /// Why there are no `lanes` figures, if there are none.
    library_missing: Option<String>,
    redis_clients: usize,
    redis_requests: Option<u64>,
    elapsed_s: f64,
    interrupted: bool,
    /// Socket records of exited programs removed at the end (as `lanes cleanup` does).
    stale_records_removed: usize,
}

#[derive(Serialize)]
struct SampleOut {
    round: usize,
    value: f64,
    #[serde(flatten)]
    details: BTreeMap<String, f64>,
}

fn units() -> BTreeMap<String, String> {
    [
        ("sockperf-latency", "one-way latency in microseconds (sockperf: half the round trip), average"),
        ("sockperf-throughput", "64-byte messages per second the client sent (sockperf tp)"),
        ("sockperf-udp-latency", "one-way UDP latency in microseconds (sockperf: half the round trip), average"),
        ("sockperf-udp-throughput", "64-byte UDP messages per second the client sent (sockperf tp)"),
        (
            "mcast-fanout",
            "microseconds from send to receive of a 64-byte multicast datagram, averaged over 4 receiver processes",
        ),
        (
            "dds-pingpong",
            "microseconds per round trip of Cyclone DDS's ddsperf ping against ddsperf pong (reliable, 12-byte samples), average",
        ),
        ("iperf3", "Gbit/s received by the server (iperf3 end.sum_received), 128 KiB writes, one stream"),
        ("redis-get", "GET latency p50 in microseconds as redis-benchmark reports it (64-byte values)"),
        ("pingpong", "blocking 100-byte round trips per second (write, then read the echo), one connection"),
        ("pingpong-hog", "the same with a busy-loop process pinned to every CPU during the measurement"),
        ("pgbench-tpcb", "pgbench TPC-B transactions per second, -c 8 -j 2, scale 1, fsync off"),
        ("pgbench-select", "pgbench select-only (-S) transactions per second, -c 8 -j 2, scale 1"),
        ("nginx", "HTTP requests per second wrk completed (-t 2 -c 16, a 612-byte page), nginx 2 workers"),
        (
            "nginx-close",
            "the same with `-H \"Connection: close\"`: every request on a new connection (its set-up and tear-down)",
        ),
        ("values.kernel", "median over the rounds, without the library"),
        ("values.lanes", "median over the rounds, with the library on both ends"),
        (
            "ratio",
            "times better with the library: the median over the rounds of each round's kernel / lanes for latency, \
             lanes / kernel for rates (a round's two runs are back to back)",
        ),
        ("detail.round_ratios", "each round's ratio, in round order (rounds that measured both modes)"),
        ("status", "pass, fail, kernel only (no library), skipped (programs missing), error, interrupted"),
        ("samples", "every round's figure per mode (kernel, lanes), with the tool's own details"),
        ("detail.target", "the ratio the library should reach, in the better direction"),
        ("detail.pass", "whether the ratio reached the target"),
        ("detail.floor_ns", "one-way latency of a raw shared-memory spin between the same two CPUs, ns"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

struct RowState {
    tool: &'static Tool,
    kernel: Vec<SampleOut>,
    lanes: Vec<SampleOut>,
    skipped: Option<String>,
    error: Option<String>,
}

fn median(v: &[SampleOut]) -> Option<f64> {
    median_of(v.iter().map(|x| x.value).collect())
}

fn median_of(mut s: Vec<f64>) -> Option<f64> {
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => None,
        n if n % 2 == 1 => Some(s[n / 2]),
        n => Some((s[n / 2 - 1] + s[n / 2]) / 2.0),
    }
}

/// Each round's ratio (kernel / lanes for latency, lanes / kernel for rates), for the rounds
/// that measured both modes, in round order.
fn round_ratios(kernel: &[SampleOut], lanes: &[SampleOut], lower_is_better: bool) -> Vec<f64> {
    kernel
        .iter()
        .filter_map(|k| {
            let l = lanes.iter().find(|l| l.round == k.round)?;
            let (num, den) = if lower_is_better { (k.value, l.value) } else { (l.value, k.value) };
            (den > 0.0 && num.is_finite()).then(|| num / den)
        })
        .collect()
}

/// Runs `lanes bench sockets`.
pub fn run(a: SocketsArgs) -> Result<(), String> {
    if let Some(port) = a.pingpong_server {
        return servers::pingpong_serve(port);
    }
    if let Some(port) = a.pingpong_client {
        return servers::pingpong_client(port, a.seconds.unwrap_or(3));
    }
    if let Some(port) = a.mcast_receiver {
        return fanout::receive(port);
    }
    if let Some(port) = a.mcast_sender {
        return fanout::send(port, a.seconds.unwrap_or(3));
    }
    let seconds = a.seconds.unwrap_or(if a.quick { 1 } else { 3 });
    let rounds = a.rounds.unwrap_or(if a.quick { 2 } else { 3 });
    if seconds == 0 || seconds > 3600 {
        return Err(format!("--seconds {seconds}: from 1 to 3600"));
    }
    if rounds == 0 || rounds > 1000 {
        return Err(format!("--rounds {rounds}: from 1 to 1000"));
    }
    if a.redis_clients == 0 {
        return Err("--redis-clients: at least 1".into());
    }
    if let Some(node) = a.remote_node {
        let rows = pick(across_hosts::ROWS, a.only.as_deref())?;
        let o = across_hosts::Options {
            node,
            port: a.port,
            force: a.force_remote,
            rows,
            rounds,
            seconds,
            json: a.json.clone(),
            strict: a.strict,
        };
        return across_hosts::run(o);
    }
    let tools = pick(TOOLS, a.only.as_deref())?;
    let cpus = affinity::distinct_pair_or_default(a.cpu.as_deref(), "servers and clients")?;
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let tell = |s: &str| tell(s, to_stdout);
    let (lib, lib_missing) = match preload::find_library() {
        Ok(l) => (Some(l), None),
        Err(e) => (None, Some(e)),
    };
    let start_wall = SystemTime::now();
    let started = Instant::now();
    procs::catch_signals();

    let mut rows = row_states(&tools);

    let mut header = format!(
        "lanes bench sockets: {} row{}, {rounds} round{} of {seconds} s per measurement, kernel TCP against {} on both ends{}\n",
        rows.len(),
        if rows.len() == 1 { "" } else { "s" },
        if rounds == 1 { "" } else { "s" },
        preload::LIBRARY,
        match cpus {
            Some((s, c)) => format!(", servers on cpu {s}, clients on cpu {c}"),
            None => ", one CPU: servers and clients share it".into(),
        }
    );
    match (&lib, &lib_missing) {
        (Some(l), _) => header.push_str(&format!("library: {}\n", l.display())),
        (None, Some(why)) => header.push_str(&format!("no lanes figures: {why}\n")),
        _ => {}
    }
    for r in rows.iter().filter(|r| r.skipped.is_some()) {
        header.push_str(&format!("skipping {}: {}\n", r.tool.key, r.skipped.as_deref().unwrap_or("")));
    }
    tell(&header)?;

    let mut params = Params {
        seconds,
        server_cpu: cpus.map(|c| c.0),
        client_cpu: cpus.map(|c| c.1),
        redis_clients: a.redis_clients,
        redis_requests: 0,
        exe: std::env::current_exe().ok(),
        pg: None,
    };
    let modes = if lib.is_some() { 2 } else { 1 };
    let active = rows.iter().filter(|r| r.skipped.is_none()).count();
    let planned = Duration::from_secs_f64((active * modes * rounds) as f64 * (seconds as f64 + 0.7) + 2.0);
    let mut progress = Progress::new(planned);
    let launch = |mode: Mode, port: u16, cpu: Option<usize>| Launch { mode, lib: lib.clone(), port, cpu };

    // The floor: what the machine itself takes to move a cache line between the two CPUs.
    progress.show(0.0, "floor");
    let floor_ns = crate::bench::floor_check::program()
        .ok()
        .and_then(|exe| crate::bench::floor_check::independent(&exe, cpus).ok());

    // redis-benchmark runs a number of requests, not a time: size it from a short kernel run.
    let mut redis_requests = None;
    if let Some(r) = rows.iter_mut().find(|r| r.tool.key == "redis-get" && r.skipped.is_none()) {
        progress.show(0.0, "redis-benchmark calibration");
        match calibrate_redis(&params, &launch, a.quick) {
            Ok(n) => {
                params.redis_requests = n;
                redis_requests = Some(n);
            }
            Err(e) => r.error = Some(format!("calibrating: {e}")),
        }
    }

    // pgbench needs a cluster with its tables: one for the whole run.
    if rows.iter().any(|r| r.tool.key.starts_with("pgbench") && r.skipped.is_none()) {
        progress.show(0.0, "PostgreSQL cluster (initdb, pgbench -i)");
        match servers::pg_setup((params.server_cpu, params.client_cpu)) {
            Ok(c) => params.pg = Some(std::sync::Arc::new(c)),
            Err(e) => {
                for r in rows.iter_mut().filter(|r| r.tool.key.starts_with("pgbench")) {
                    r.error = Some(format!("setting up PostgreSQL: {e}"));
                }
            }
        }
    }
    let hog_cpus = affinity::allowed_cpus();

    let mut interrupted = procs::stopped();
    let total = (active * modes * rounds).max(1);
    let mut done = 0usize;
    'rounds: for round in 0..rounds {
        for r in rows.iter_mut().filter(|r| r.skipped.is_none()) {
            let order = if round % 2 == 0 { [Mode::Kernel, Mode::Lanes] } else { [Mode::Lanes, Mode::Kernel] };
            for mode in order {
                if mode == Mode::Lanes && lib.is_none() {
                    continue;
                }
                done += 1;
                if procs::stopped() {
                    interrupted = true;
                    break 'rounds;
                }
                if r.error.is_some() {
                    continue;
                }
                let label = format!("round {}/{rounds} {} {}", round + 1, r.tool.key, mode.name());
                progress.show((done - 1) as f64 / total as f64, &label);
                let hogs = if r.tool.hog { Some(procs::Hogs::start(&hog_cpus)) } else { None };
                let result = procs::free_port().and_then(|port| {
                    if let Some(Err(e)) = &hogs {
                        return Err(e.clone());
                    }
                    (r.tool.run)(
                        &params,
                        &launch(mode, port, params.server_cpu),
                        &launch(mode, port, params.client_cpu),
                    )
                });
                drop(hogs);
                match result {
                    Ok(Sample { value, details }) => {
                        let s = SampleOut { round: round + 1, value, details };
                        match mode {
                            Mode::Kernel => r.kernel.push(s),
                            Mode::Lanes => r.lanes.push(s),
                        }
                    }
                    Err(_) if procs::stopped() => {
                        interrupted = true;
                        break 'rounds;
                    }
                    Err(e) => r.error = Some(format!("{} round {}: {e}", mode.name(), round + 1)),
                }
            }
        }
    }
    interrupted |= procs::stopped();
    params.pg = None; // removes the cluster's directory
    progress.clear();
    drop(progress);
    // Servers stopped by a signal leave their socket records behind; remove the ones no live
    // process holds (what `lanes cleanup` would), so the fabric is as tidy as before.
    let stale_records_removed = lanes::FabricConfig::from_env()
        .ok()
        .and_then(|c| lanes::sockets::registry::cleanup_connections(&c.dir).ok())
        .unwrap_or(0);

    let mut rows: Vec<Row> = rows.into_iter().map(|r| finish_row(r, lib.is_some(), interrupted)).collect();
    for r in rows.iter_mut().filter(|r| r.key == "redis-get") {
        let t = r.title.take().unwrap_or_default();
        r.title = Some(format!("{t}, {} client{}", a.redis_clients, if a.redis_clients == 1 { "" } else { "s" }));
    }
    let mut report = Report::new(BENCHMARK, Machine::this(start_wall));
    report.set_run(&RunInfo {
        seconds,
        rounds,
        quick: a.quick,
        cpus: cpus.map(|(x, y)| [x, y]),
        library: lib.as_ref().map(|l| l.display().to_string()),
        library_missing: lib_missing,
        redis_clients: a.redis_clients,
        redis_requests,
        elapsed_s: started.elapsed().as_secs_f64(),
        interrupted,
        stale_records_removed,
    });
    report.units = units();
    report.rows = rows;
    if let Some(f) = floor_ns {
        report.set_detail("floor_ns", &f);
    }
    conclude(&report, a.json.as_deref(), interrupted, a.strict)
}

/// Says `s` on standard output, or on standard error when the JSON owns standard output.
fn tell(s: &str, to_stdout: bool) -> Result<(), String> {
    if to_stdout {
        eprint!("{s}");
        Ok(())
    } else {
        say(s)
    }
}

/// A row's state before its first measurement: skipped if a program it needs is missing.
fn row_states(tools: &[&'static Tool]) -> Vec<RowState> {
    tools
        .iter()
        .map(|&tool| {
            let missing: Vec<String> = tool
                .needs
                .iter()
                .filter(|(prog, _)| procs::find_program(prog).is_none())
                .map(|(prog, pkg)| format!("{prog} (apt-get install {pkg})"))
                .collect();
            let skipped = (!missing.is_empty()).then(|| format!("not installed: {}", missing.join(", ")));
            RowState { tool, kernel: Vec::new(), lanes: Vec::new(), skipped, error: None }
        })
        .collect()
}

/// The end of a run: the table, the JSON (`-`: on standard output), and the exit's verdict
/// (interrupted; with `strict`, a target missed).
fn conclude(report: &Report, json: Option<&std::path::Path>, interrupted: bool, strict: bool) -> Result<(), String> {
    let to_stdout = json.is_some_and(|p| p.as_os_str() == "-");
    tell(&render(report), to_stdout)?;
    if let Some(p) = json {
        let text = report.to_json()?;
        if to_stdout {
            say(&text)?;
        } else {
            std::fs::write(p, text).map_err(|e| format!("writing {}: {e}", p.display()))?;
            tell(&format!("JSON: {}\n", p.display()), to_stdout)?;
        }
    }
    if interrupted {
        return Err("interrupted; the table above covers what was measured".into());
    }
    if strict {
        let bad: Vec<&str> = report.rows.iter().filter(|r| !passed(r)).map(|r| r.key.as_str()).collect();
        if !bad.is_empty() {
            return Err(format!("--strict: not passed: {}", bad.join(", ")));
        }
    }
    Ok(())
}

/// The rows of `all` that `--only` names (all of them without it).
fn pick(all: &'static [Tool], only: Option<&str>) -> Result<Vec<&'static Tool>, String> {
    let Some(list) = only else { return Ok(all.iter().collect()) };
    let mut v = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let t = all.iter().find(|t| t.key == name).ok_or_else(|| {
            format!("--only: unknown row {name:?}; rows: {}", all.iter().map(|t| t.key).collect::<Vec<_>>().join(", "))
        })?;
        if !v.iter().any(|x: &&Tool| x.key == t.key) {
            v.push(t);
        }
    }
    if v.is_empty() {
        return Err("--only names no row".into());
    }
    Ok(v)
}

/// The number of GETs for a redis-benchmark run of about `--seconds`, from a short kernel run.
fn calibrate_redis(
    p: &Params,
    launch: &impl Fn(Mode, u16, Option<usize>) -> Launch,
    quick: bool,
) -> Result<u64, String> {
    let port = procs::free_port()?;
    let _srv = tools::redis_server(&launch(Mode::Kernel, port, p.server_cpu))?;
    let probe = if quick { 5_000 } else { 20_000 };
    let s = tools::redis_benchmark(p, &launch(Mode::Kernel, port, p.client_cpu), probe)?;
    let rps = s.details.get("rps").copied().filter(|r| r.is_finite() && *r > 0.0).ok_or("no requests/s")?;
    Ok(((rps * p.seconds as f64) as u64).clamp(2_000, 50_000_000))
}

fn finish_row(r: RowState, have_lib: bool, interrupted: bool) -> Row {
    let t = r.tool;
    let (kernel, lanes) = (median(&r.kernel), median(&r.lanes));
    let per_round = round_ratios(&r.kernel, &r.lanes, t.lower_is_better);
    let ratio = median_of(per_round.clone());
    let pass = if r.error.is_some() { None } else { ratio.map(|x| x >= t.target) };
    let (status, note) = if let Some(why) = r.skipped {
        ("skipped", Some(why))
    } else if let Some(e) = r.error {
        ("error", Some(e))
    } else if interrupted && ratio.is_none() {
        ("interrupted", None)
    } else if !have_lib {
        ("kernel only", None)
    } else {
        match pass {
            Some(true) => ("pass", None),
            Some(false) => ("fail", None),
            None => ("error", Some("no figures".to_string())),
        }
    };
    let mut row = Row::new(t.key).with_title(t.title).with_detail("target", &t.target);
    row.unit = Some(t.unit.to_string());
    row.better = Some(if t.lower_is_better { "lower" } else { "higher" }.to_string());
    for (mode, v) in [("kernel", kernel), ("lanes", lanes)] {
        if let Some(v) = v {
            row.values.insert(mode.to_string(), v);
        }
    }
    row.ratio = ratio;
    row.status = Some(status.to_string());
    if let Some(p) = pass {
        row.set_detail("pass", &p);
    }
    if let Some(n) = note {
        row.set_detail("note", &n);
    }
    if !per_round.is_empty() {
        row.set_detail("round_ratios", &per_round);
    }
    row.samples = BTreeMap::from([
        ("kernel".to_string(), r.kernel.iter().map(to_value).collect()),
        ("lanes".to_string(), r.lanes.iter().map(to_value).collect()),
    ]);
    row
}

/// Whether the row met its target.
fn passed(r: &Row) -> bool {
    r.detail_as::<bool>("pass") == Some(true)
}

fn fmt_value(unit: &str, v: f64) -> String {
    match unit {
        "us" => fmt_ns(v * 1e3),
        "msg/s" if v >= 1e6 => format!("{:.2} M/s", v / 1e6),
        "msg/s" => format!("{:.1} k/s", v / 1e3),
        "Gbit/s" => format!("{v:.2} Gbit/s"),
        "rt/s" | "tps" | "req/s" if v >= 1e6 => format!("{:.2} M{unit}", v / 1e6),
        "rt/s" | "tps" | "req/s" if v >= 1e4 => format!("{:.1} k{unit}", v / 1e3),
        "rt/s" | "tps" | "req/s" => format!("{v:.0} {unit}"),
        _ => format!("{v:.3} {unit}"),
    }
}

fn fmt_ratio(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}x")
    } else if x >= 10.0 {
        format!("{x:.1}x")
    } else {
        format!("{x:.2}x")
    }
}

pub(crate) fn render(r: &Report) -> String {
    let run: RunInfo = r.run_as();
    let mut out =
        format!("\n{:<38} {:>14} {:>14} {:>8}  {:<14} result\n", "measurement", "kernel", "lanes", "ratio", "target");
    let opt = |unit: &str, v: Option<f64>| v.map_or("-".to_string(), |v| fmt_value(unit, v));
    for row in &r.rows {
        let unit = row.unit.as_deref().unwrap_or("");
        let target = format!(
            "{}x {}",
            row.detail_as::<f64>("target").unwrap_or(0.0),
            if row.better.as_deref() == Some("lower") { "lower" } else { "higher" }
        );
        let result = match row.status.as_deref().unwrap_or("") {
            "pass" => "PASS".to_string(),
            "fail" => "FAIL".to_string(),
            s => s.to_string(),
        };
        out.push_str(&format!(
            "{:<38} {:>14} {:>14} {:>8}  {:<14} {result}\n",
            row.title.as_deref().unwrap_or(&row.key),
            opt(unit, row.get("kernel")),
            opt(unit, row.get("lanes")),
            row.ratio.map_or("-".to_string(), fmt_ratio),
            target,
        ));
        let each = |v: &[serde_json::Value]| {
            v.iter().map(|s| fmt_value(unit, s["value"].as_f64().unwrap_or(f64::NAN))).collect::<Vec<_>>().join(", ")
        };
        let mut parts = Vec::new();
        for (mode, v) in &row.samples {
            if !v.is_empty() && run.rounds > 1 {
                parts.push(format!("{mode} {}", each(v)));
            }
        }
        if let Some(ratios) = row.detail_as::<Vec<f64>>("round_ratios").filter(|_| !parts.is_empty()) {
            parts.push(format!("ratios {}", ratios.iter().map(|&x| fmt_ratio(x)).collect::<Vec<_>>().join(", ")));
        }
        if !parts.is_empty() {
            out.push_str(&format!("    rounds: {}\n", parts.join("; ")));
        }
        if let Some(n) = row.detail_as::<String>("note") {
            out.push_str(&format!("    {n}\n"));
        }
    }
    if let Some(f) = r.detail_as::<f64>("floor_ns") {
        out.push_str(&format!(
            "floor: {} one-way (lanes-spin-floor: a raw shared-memory spin on the same CPUs)",
            fmt_ns(f)
        ));
        let pp = r.rows.iter().find(|x| x.key == "sockperf-latency").and_then(|x| x.get("lanes"));
        if let Some(l) = pp {
            out.push_str(&format!("; sockperf ping-pong with the library: {:.1}x the floor", l * 1e3 / f));
        }
        out.push('\n');
    }
    if run.stale_records_removed > 0 {
        out.push_str(&format!(
            "removed {} socket records the stopped programs left (as `lanes cleanup` would)\n",
            run.stale_records_removed
        ));
    }
    let passed = r.rows.iter().filter(|x| passed(x)).count();
    out.push_str(&format!(
        "{passed} of {} targets met, in {}\n",
        r.rows.len(),
        crate::bench::progress::fmt_secs(run.elapsed_s)
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: f64) -> SampleOut {
        SampleOut { round: 1, value: v, details: BTreeMap::new() }
    }

    fn rounds(values: Vec<f64>) -> Vec<SampleOut> {
        values
            .into_iter()
            .enumerate()
            .map(|(i, v)| SampleOut { round: i + 1, value: v, details: BTreeMap::new() })
            .collect()
    }

    #[test]
    fn a_rounds_ratio_pairs_its_own_two_runs() {
        // A machine twice as slow in round 2: the medians' ratio reads 1.5x where every
        // round measured 1x.
        let (k, l) = (rounds(vec![100.0, 50.0, 100.0]), rounds(vec![100.0, 50.0, 100.0]));
        assert_eq!(round_ratios(&k, &l, false), vec![1.0, 1.0, 1.0]);
        let (k, l) = (rounds(vec![100.0, 50.0]), rounds(vec![200.0]));
        assert_eq!(round_ratios(&k, &l, false), vec![2.0], "a round missing a mode pairs nothing");
        assert_eq!(round_ratios(&k, &rounds(vec![0.0, 25.0]), true), vec![2.0], "no division by 0");
    }

    #[test]
    fn medians_ratios_and_verdicts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[s(3.0), s(1.0), s(2.0)]), Some(2.0));
        assert_eq!(median(&[s(4.0), s(1.0)]), Some(2.5));
        let lat = &TOOLS[0];
        assert!(lat.lower_is_better);
        let row = |k: Vec<f64>, l: Vec<f64>| RowState {
            tool: lat,
            kernel: rounds(k),
            lanes: rounds(l),
            skipped: None,
            error: None,
        };
        let r = finish_row(row(vec![20.0, 22.0, 21.0], vec![0.5, 0.6, 0.7]), true, false);
        // The rounds' own ratios (40, 36.7, 30), not the ratio of the medians (35).
        assert_eq!(r.ratio, Some(22.0 / 0.6));
        assert_eq!(r.detail_as::<Vec<f64>>("round_ratios"), Some(vec![20.0 / 0.5, 22.0 / 0.6, 21.0 / 0.7]));
        assert_eq!((r.detail_as::<bool>("pass"), r.status.as_deref()), (Some(true), Some("pass")));
        let r = finish_row(row(vec![20.0], vec![2.0]), true, false);
        assert_eq!((r.detail_as::<bool>("pass"), r.status.as_deref()), (Some(false), Some("fail")));
        let r = finish_row(row(vec![20.0], vec![]), false, false);
        assert_eq!((r.detail_as::<bool>("pass"), r.status.as_deref()), (None, Some("kernel only")));
        let tput = &TOOLS[1];
        let r = finish_row(
            RowState { tool: tput, kernel: vec![s(100.0)], lanes: vec![s(2500.0)], skipped: None, error: None },
            true,
            false,
        );
        assert_eq!(r.ratio, Some(25.0));
        assert_eq!(fmt_value("rt/s", 2_700_000.0), "2.70 Mrt/s");
        assert_eq!(fmt_value("tps", 28_150.0), "28.1 ktps");
        assert_eq!(fmt_value("req/s", 950.0), "950 req/s");
        let mut report = Report::new(BENCHMARK, Machine::default());
        report.set_run(&RunInfo {
            seconds: 1,
            rounds: 2,
            quick: true,
            redis_clients: 50,
            elapsed_s: 1.0,
            ..RunInfo::default()
        });
        report.set_detail("floor_ns", &80.0);
        report.rows = vec![r];
        report.units = units();
        let text = render(&report);
        assert!(text.contains("25.0x") && text.contains("PASS") && text.contains("1 of 1"), "{text}");
    }
}
