//! `lanes bench --transport ofi --remote-node N` and its server, `lanes bench --serve`:
//! the Lanes paths between two hosts of a cluster against libfabric's own `fi_pingpong` and
//! `iperf3` on the same link, in one run (docs/design/multi-host.md, section 13).
//!
//! The server runs on N's host as node N (`LANES_NODE_ID`, that host's `LANES_CONFIG` and
//! `LANES_HOST`) and listens on N's host address at the bench port (`--port`, default the
//! host's daemon port + 1). The client connects there; the connection carries the same
//! commands as a local bench's control channel (`control.rs`) plus the server's own:
//!
//! ```text
//! fi_pingpong <iters> <size>   -> ok <port>   starts `fi_pingpong -p PROV -e rdm -I iters -S size -B port`
//! fi_pingpong-done             -> ok          waits for it to exit (it serves one client)
//! iperf3                       -> ok <port>   starts `iperf3 -s -1 -p port -B addr`
//! iperf3-done                  -> ok          waits for it to exit
//! sockets-server <row> <mode> <remote>
//!                              -> ok <port>   starts the server of `lanes bench sockets
//!                                             --remote-node` row <row> on addr, over
//!                                             kernel TCP or the library (<mode>), the
//!                                             library's remote setting as configured or on
//! sockets-server-done          -> ok          waits a moment for it to exit, then stops it
//! ```
//!
//! Per round, for every size: each Lanes latency path (`ofi-interrupt`, `ofi-dataint`,
//! `ofi-pio`), then `fi_pingpong` at that size for as many round trips as they made
//! ([`matched_iters`]); then the DMA bandwidth (`ofi-dma`, 1 MiB transfers), `fi_pingpong`
//! at 1 MiB (unless a size of the run already measured it) and `iperf3 -l 1M`. The Lanes
//! paths are set up where they are measured and torn down before the baseline runs: every size gets new endpoints, and so new connections, as every
//! `fi_pingpong` run does (a connection that carried smaller messages stays slower for
//! larger ones), and no Lanes endpoint takes CPU time from a baseline. Only the baselines
//! something is compared with run: `fi_pingpong` at the sizes a chosen latency path is
//! measured at (and at 1 MiB for DMA), the DMA's baselines when `ofi-dma` is chosen. All
//! rounds' figures are pooled: Lanes round trips into one histogram per path and size, the
//! baselines' averages weighted by their iterations (fi_pingpong) or seconds (iperf3). The
//! report is the ordinary `lanes bench` report (table, JSON) with two baseline rows,
//! `fi_pingpong` and `iperf3`, and the targets of the design (`table.rs`).

use std::io::BufReader;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use lanes::cluster::IdleProgress;

use crate::bench::control::{self, Control};
use crate::bench::facts::{RemoteRun, RunInfo, DMA_SIZE};
use crate::bench::options::Plan;
use crate::bench::paths::{self, Kind, PathDef, Transport};
use crate::bench::runner::{Cell, Measured, Session};
use crate::bench::sockets::across_hosts;
use crate::bench::sockets::procs::{self, Launch, Mode, Server};
use crate::bench::sockets::tools::parse_iperf3;
use crate::bench::table;
use crate::bench::wait::Waiter;
use crate::measure::clock::{self, now_ticks};
use crate::measure::rt;
use crate::report::{Lat, Machine, Report, Row};
use crate::sizes::fmt_size;

const CONNECT: Duration = Duration::from_secs(10);
/// How long the server waits for a baseline server to exit after its client finished.
const DONE_WAIT: Duration = Duration::from_secs(30);
/// `fi_pingpong -I` where nothing else says (see [`matched_iters`]), and its bounds there.
const FI_ITERS: u64 = 10_000;
const MIN_FI_ITERS: u64 = 100;
const MAX_FI_ITERS: u64 = 1_000_000;
/// The longest `--stream-secs`.
pub(crate) const MAX_STREAM_SECS: u64 = 300;
/// How long the server waits for a client's next command before it drops the client.
const IDLE_CLIENT: Duration = Duration::from_secs(600);

/// What the client was asked for.
pub(crate) struct ClientOptions {
    pub remote_node: u32,
    pub port: Option<u16>,
    pub paths: Vec<&'static PathDef>,
    pub sizes: Vec<usize>,
    pub rounds: u64,
    /// Latency slice per path, size and round (a tenth of it warm-up).
    pub lat_slice: Duration,
    pub stream_secs: u64,
    /// `fi_pingpong -I` as given (`--fi-iters`); `None`: matched to the Lanes slice.
    pub fi_iters: Option<u64>,
    pub quick: bool,
}

/// The cluster this process is in, and the address of `node`'s host at the bench port.
pub(crate) fn locate(node: u32, port: Option<u16>) -> Result<(lanes::FabricConfig, SocketAddr), String> {
    let config = lanes::FabricConfig::from_env().map_err(|e| format!("fabric configuration: {e}"))?;
    let cluster = config.cluster.as_ref().ok_or(
        "this host is not in a cluster: `--transport ofi` needs a lanes.toml with [cluster] and [[node]] entries \
         naming this host (LANES_CONFIG, LANES_HOST)",
    )?;
    let id = lanes::NodeId::new(node).map_err(|e| format!("node {node}: {e}"))?;
    let host = cluster
        .config
        .host_of(id)
        .ok_or_else(|| format!("node {node} is not a node of any host in the cluster configuration"))?;
    let port = match port {
        Some(p) => p,
        None => host.address.port().checked_add(1).ok_or("the daemon port is 65535: give --port")?,
    };
    Ok((config.clone(), SocketAddr::new(host.address.ip(), port)))
}

/// A baseline program's command: kernel mode (no library), killed if we die.
fn command(program: &str, port: u16) -> Result<Command, String> {
    Launch { mode: Mode::Kernel, lib: None, port, cpu: None }.command(program)
}

pub(crate) fn need(program: &str, package: &str) -> Result<(), String> {
    let found = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    if found {
        Ok(())
    } else {
        Err(format!("{program} is not installed (apt-get install {package})"))
    }
}

/// `lanes bench --serve`: answers clients one at a time until killed.
pub(crate) fn serve(port: Option<u16>, once: bool) -> Result<(), String> {
    let config = lanes::FabricConfig::from_env().map_err(|e| format!("fabric configuration: {e}"))?;
    let node = config.node_id.get();
    let (_, addr) = locate(node, port)?;
    let me = config.cluster.as_ref().and_then(|c| c.me()).map(|h| h.name.clone()).unwrap_or_default();
    if config.cluster.as_ref().is_none_or(|c| c.is_remote(node)) {
        return Err(format!("node {node} is not a node of this host ({me}): set LANES_NODE_ID to one of its nodes"));
    }
    let provider = config.cluster.as_ref().map(|c| c.config.provider.clone()).unwrap_or_default();
    let listener = TcpListener::bind(addr).map_err(|e| format!("listening on {addr}: {e}"))?;
    eprintln!("lanes bench --serve: node {node} of host {me}, listening on {addr}, provider {provider}");
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    loop {
        let (stream, from) = listener.accept().map_err(|e| format!("accepting on {addr}: {e}"))?;
        eprintln!("lanes bench --serve: client {from}");
        if let Err(e) = serve_one(stream, addr.ip(), &provider) {
            eprintln!("lanes bench --serve: client {from}: {e}");
        } else {
            eprintln!("lanes bench --serve: client {from} done");
        }
        if once {
            return Ok(());
        }
    }
}

fn serve_one(stream: TcpStream, ip: IpAddr, provider: &str) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    // A client that says nothing for this long is gone (its host died or the link did):
    // the longest silence of a live client is one baseline run or DMA slice.
    stream.set_read_timeout(Some(IDLE_CLIENT)).map_err(|e| format!("the connection: {e}"))?;
    let fd = stream.as_raw_fd();
    let mut out = stream.try_clone().map_err(|e| format!("the connection: {e}"))?;
    let mut input = BufReader::new(stream);
    let wait = Waiter::new(Some(fd), crate::measure::affinity::allowed_cpus().len() < 2, false);
    let mut fi: Option<Server> = None;
    let mut iperf: Option<Server> = None;
    let mut sockets: Option<(Server, Duration)> = None;
    let provider = provider.to_string();
    let mut extra = |cmd: &str| -> Option<Result<String, String>> {
        let mut w = cmd.split_whitespace();
        let verb = w.next()?;
        let nums: Vec<u64> = w.filter_map(|x| x.parse().ok()).collect();
        Some(match verb {
            "fi_pingpong" => match nums.as_slice() {
                [iters, size] => start_fi_pingpong(&provider, *iters, *size).map(|(s, port)| {
                    fi = Some(s);
                    port.to_string()
                }),
                _ => Err(format!("fi_pingpong: expected iterations and size, got {cmd:?}")),
            },
            "fi_pingpong-done" => done(fi.take(), "fi_pingpong"),
            "iperf3" => start_iperf3(ip).map(|(s, port)| {
                iperf = Some(s);
                port.to_string()
            }),
            "iperf3-done" => done(iperf.take(), "iperf3"),
            "sockets-server" => match cmd.split_whitespace().collect::<Vec<_>>().as_slice() {
                [_, row, mode, remote] => across_hosts::start_server(ip, row, mode, remote).map(|(s, port, ends)| {
                    sockets = Some((s, ends));
                    port.to_string()
                }),
                _ => Err(format!("sockets-server: expected a row, a mode and a remote setting, got {cmd:?}")),
            },
            "sockets-server-done" => match sockets.take() {
                Some((s, ends)) => {
                    s.wait_exit(ends);
                    Ok(String::new())
                }
                None => Err("no sockets server was started".into()),
            },
            _ => return None,
        })
    };
    control::serve_on(&mut input, &mut out, &wait, None::<&rt::RtStatus>, &mut extra)
}

fn start_fi_pingpong(provider: &str, iters: u64, size: u64) -> Result<(Server, u16), String> {
    need("fi_pingpong", "libfabric-bin")?;
    let port = procs::free_port()?;
    let mut cmd = command("fi_pingpong", port)?;
    cmd.args(["-p", provider, "-e", "rdm", "-I", &iters.to_string(), "-S", &size.to_string()]);
    cmd.args(["-B", &port.to_string()]);
    Ok((Server::start(cmd, "fi_pingpong (server)", port)?, port))
}

fn start_iperf3(ip: IpAddr) -> Result<(Server, u16), String> {
    need("iperf3", "iperf3")?;
    let port = procs::free_port()?;
    let mut cmd = command("iperf3", port)?;
    cmd.args(["-s", "-1", "-p", &port.to_string(), "-B", &ip.to_string()]);
    Ok((Server::start(cmd, "iperf3 (server)", port)?, port))
}

fn done(server: Option<Server>, what: &str) -> Result<String, String> {
    let s = server.ok_or_else(|| format!("no {what} server was started"))?;
    s.wait_exit(DONE_WAIT);
    Ok(String::new())
}

/// One baseline's pooled figure.
#[derive(Clone, Copy, Debug, Default)]
struct Pooled {
    /// Sum of value x weight, and of weights.
    sum: f64,
    weight: f64,
}

impl Pooled {
    fn add(&mut self, value: f64, weight: f64) {
        self.sum += value * weight;
        self.weight += weight;
    }

    fn mean(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| self.sum / self.weight)
    }
}

/// `fi_pingpong`'s result line: `bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec`;
/// returns usec/xfer (one transfer = one way).
pub(crate) fn parse_fi_pingpong(out: &str) -> Result<f64, String> {
    let mut found = None;
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        // The size column is abbreviated (`4k`, `1m`): a line whose first word starts with a
        // digit is a result.
        if w.len() >= 8 && w[0].starts_with(|c: char| c.is_ascii_digit()) {
            found = w[6].parse::<f64>().ok();
        }
    }
    match found {
        Some(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("fi_pingpong printed no result line: {:?}", out.trim())),
    }
}

/// Iterations of `fi_pingpong` at `size`: `base`, fewer for large sizes (at most about 512
/// MiB moved each way).
pub(crate) fn fi_iters(base: u64, size: usize) -> u64 {
    (512u64 << 20).checked_div(size as u64).unwrap_or(base).clamp(100, base.max(100))
}

/// `fi_pingpong -I` where `--fi-iters` was not given: the mean of the round trips each
/// Lanes latency path made at this size in this round's slice (`trips`, recorded part), so
/// that both sides average over about the same stretch of time; a short run sees one
/// phase of a shared machine's speed, a long one several (10 000 iterations of 8 us took
/// 0.16 s against the Lanes path's 0.9 s, and their averages differed by 20% from size to
/// size that way). With no Lanes path at that size (1 MiB for DMA alone), `fi_iters` of
/// [`FI_ITERS`].
pub(crate) fn matched_iters(trips: &[u64], size: usize) -> u64 {
    match trips.len() as u64 {
        0 => fi_iters(FI_ITERS, size),
        n => (trips.iter().sum::<u64>() / n).clamp(MIN_FI_ITERS, MAX_FI_ITERS),
    }
}

/// Whether `def` measures latency at `size`.
fn carries_latency(def: &PathDef, size: usize) -> bool {
    def.kinds.contains(&Kind::Latency) && def.max_size.is_none_or(|max| size <= max)
}

/// The baselines a run compares with, and only those: `fi_pingpong` at each size some
/// latency path is measured at, and the DMA's baselines (`fi_pingpong` at 1 MiB, `iperf3`)
/// when a bandwidth path is chosen. (`--paths ofi-dma` over the default sizes would
/// otherwise spend most of its time on `fi_pingpong` at 18 sizes nothing is compared at.)
struct Baselines {
    /// Per size of the run.
    fi_pingpong_at: Vec<bool>,
    bandwidth: bool,
}

impl Baselines {
    fn of(paths: &[&PathDef], sizes: &[usize]) -> Baselines {
        let bandwidth = paths.iter().any(|d| d.kinds.contains(&Kind::Throughput));
        let fi_pingpong_at = sizes
            .iter()
            .map(|&size| paths.iter().any(|d| carries_latency(d, size)) || (bandwidth && size == DMA_SIZE))
            .collect();
        Baselines { fi_pingpong_at, bandwidth }
    }
}

/// The client: `lanes bench --transport ofi --remote-node N`.
pub(crate) fn run(o: &ClientOptions) -> Result<Report, String> {
    if !lanes::OFI_TRANSPORT {
        return Err(
            "`--transport ofi`: this build has no ofi transport (build lanes-cli with --features lanes/ofi)".into()
        );
    }
    need("fi_pingpong", "libfabric-bin")?;
    need("iperf3", "iperf3")?;
    let (config, addr) = locate(o.remote_node, o.port)?;
    let cluster = config.cluster.as_ref().ok_or("not in a cluster")?;
    if !cluster.is_remote(o.remote_node) {
        return Err(format!("node {} is on this host: `--remote-node` names a node of another host", o.remote_node));
    }
    let provider = cluster.config.provider.clone();
    let progress = IdleProgress::from_env(cluster.config.progress)?.to_string();
    clock::calibrate();
    let start_wall = SystemTime::now();
    let start_ticks = now_ticks();
    let started = Instant::now();
    let ctl = Control::connect(addr, CONNECT)?;
    let single_cpu = crate::measure::affinity::allowed_cpus().len() < 2;
    // Paths are set up where they are measured (below), none at first.
    let mut session = Session::over(ctl, &[], 0, single_cpu, None, None, false)?;
    let plan = Plan::new(o.paths.clone(), o.sizes.clone(), o.lat_slice, None, false, o.quick);
    let mut m = Measured {
        plan: Plan { lat_slice: o.lat_slice, tput_slice: Duration::from_secs(o.stream_secs), ..plan },
        machine: Machine::this(start_wall),
        cells: vec![vec![Cell::default(); o.sizes.len()]; o.paths.len()],
        rounds: 0,
        elapsed: Duration::ZERO,
        interrupted: false,
        start_wall,
        start_ticks,
        client_rt: None,
        peer_rt: session.peer_rt.clone(),
        cpus: None,
    };
    let mut dma_cell = Cell::default();
    let mut fi = vec![Pooled::default(); o.sizes.len()];
    let mut fi_dma = Pooled::default();
    let mut iperf = Pooled::default();
    let ip = addr.ip().to_string();
    // `trips`: the round trips each Lanes latency path made at `size` this round, which set
    // the iterations unless `--fi-iters` does.
    let fi_pingpong = |session: &mut Session, size: usize, trips: &[u64]| -> Result<(f64, u64), String> {
        let iters = o.fi_iters.map_or_else(|| matched_iters(trips, size), |base| fi_iters(base, size));
        let what = format!("fi_pingpong at {}", fmt_size(size));
        let port =
            session.call(&format!("fi_pingpong {iters} {size}"), CONNECT * 2).map_err(|e| format!("{what}: {e}"))?;
        let mut cmd = command("fi_pingpong", 0)?;
        cmd.args(["-p", &provider, "-e", "rdm", "-I", &iters.to_string(), "-S", &size.to_string(), "-P", &port, &ip]);
        let limit = Duration::from_secs(60) + Duration::from_micros(iters * 2 * 2000);
        let out = procs::run_client(cmd, "fi_pingpong", limit);
        let done = session.call("fi_pingpong-done", DONE_WAIT + CONNECT);
        let usec = parse_fi_pingpong(&out.map_err(|e| format!("{what}: {e}"))?)?;
        done.map_err(|e| format!("{what}: {e}"))?;
        Ok((usec, iters))
    };
    let need = Baselines::of(&o.paths, &o.sizes);
    let bandwidth: Vec<&'static PathDef> =
        o.paths.iter().copied().filter(|d| d.kinds.contains(&Kind::Throughput)).collect();
    for round in 1..=o.rounds {
        m.rounds = round;
        for (si, &size) in o.sizes.iter().enumerate() {
            let (at, latency): (Vec<usize>, Vec<&'static PathDef>) =
                o.paths.iter().copied().enumerate().filter(|(_, d)| carries_latency(d, size)).unzip();
            let mut trips = Vec::with_capacity(latency.len());
            if !latency.is_empty() {
                session.set_up(&latency, size)?;
                for (&pi, def) in at.iter().zip(&latency) {
                    eprintln!("lanes bench: round {round}: {} latency at {}", def.name, fmt_size(size));
                    let hist = &mut m.cells[pi][si].lat;
                    let before = hist.count();
                    session.latency(def.name, size, o.lat_slice, hist)?;
                    trips.push(hist.count() - before);
                }
                session.tear_down()?;
            }
            if !need.fi_pingpong_at[si] {
                continue;
            }
            eprintln!("lanes bench: round {round}: fi_pingpong at {}", fmt_size(size));
            let (usec, iters) = fi_pingpong(&mut session, size, &trips)?;
            fi[si].add(usec, iters as f64);
            if size == DMA_SIZE {
                fi_dma.add(usec, iters as f64);
            }
        }
        if !need.bandwidth {
            continue;
        }
        session.set_up(&bandwidth, DMA_SIZE)?;
        for def in &bandwidth {
            eprintln!("lanes bench: round {round}: {} bandwidth, {} transfers", def.name, fmt_size(DMA_SIZE));
            dma_cell.add(&session.throughput(def.name, DMA_SIZE, Duration::from_secs(o.stream_secs))?);
        }
        session.tear_down()?;
        if !o.sizes.contains(&DMA_SIZE) {
            eprintln!("lanes bench: round {round}: fi_pingpong at {}", fmt_size(DMA_SIZE));
            let (usec, iters) = fi_pingpong(&mut session, DMA_SIZE, &[])?;
            fi_dma.add(usec, iters as f64);
        }
        eprintln!("lanes bench: round {round}: iperf3 for {} s", o.stream_secs);
        let port = session.call("iperf3", CONNECT * 2)?;
        let mut cmd = command("iperf3", 0)?;
        cmd.args(["-c", &ip, "-p", &port, "-t", &o.stream_secs.to_string(), "-l", "1M", "-J"]);
        let out = procs::run_client(cmd, "iperf3", Duration::from_secs(5 * o.stream_secs + 30));
        let done = session.call("iperf3-done", DONE_WAIT + CONNECT);
        let gbit = parse_iperf3(&out.map_err(|e| format!("iperf3: {e}"))?)?.value;
        done?;
        iperf.add(gbit / 8.0, o.stream_secs as f64);
    }
    session.finish()?;
    m.elapsed = started.elapsed();
    let mut report = m.report();
    // The DMA path's cell is at 1 MiB whatever the latency sizes are.
    if let Some(def) = o.paths.iter().find(|d| d.kinds.contains(&Kind::Throughput)) {
        if dma_cell.msgs > 0 {
            let mut one = Measured {
                plan: Plan { sizes: vec![DMA_SIZE], paths: vec![def], ..m.plan.clone() },
                cells: vec![vec![dma_cell]],
                ..m
            };
            one.rounds = report.run_as::<RunInfo>().rounds;
            report.rows.extend(one.report().rows);
        }
    }
    let baseline = |path: &str, size: usize, usec: f64, samples: u64| {
        Row::new(path)
            .with_size(size)
            .with_lat(Lat { avg: usec * 1e3, samples, ..Lat::default() })
            .with_value("gbps", size as f64 / (usec * 1e3))
    };
    for (si, &size) in o.sizes.iter().enumerate() {
        if let Some(usec) = fi[si].mean() {
            report.rows.push(baseline("fi_pingpong", size, usec, fi[si].weight as u64));
        }
    }
    if !o.sizes.contains(&DMA_SIZE) {
        if let Some(usec) = fi_dma.mean() {
            report.rows.push(baseline("fi_pingpong", DMA_SIZE, usec, fi_dma.weight as u64));
        }
    }
    if let Some(gbps) = iperf.mean() {
        report.rows.push(Row::new("iperf3").with_size(DMA_SIZE).with_value("gbps", gbps));
    }
    let mut run: RunInfo = report.run_as();
    if need.fi_pingpong_at.contains(&true) || need.bandwidth {
        run.paths.push("fi_pingpong".to_string());
    }
    if need.bandwidth {
        run.paths.push("iperf3".to_string());
        if !run.sizes.contains(&DMA_SIZE) {
            run.sizes.push(DMA_SIZE);
        }
    }
    report.set_run(&run);
    report.set_detail(
        "remote",
        &RemoteRun {
            transport: "ofi".into(),
            provider,
            progress,
            client_node: config.node_id.get(),
            remote_node: o.remote_node,
            address: ip,
            fi_pingpong_iters: o.fi_iters.unwrap_or(0),
            stream_secs: o.stream_secs,
            rounds: o.rounds,
        },
    );
    let targets = table::targets(&report);
    report.set_detail("targets", &targets);
    Ok(report)
}

/// The paths of a remote run: `--paths` among the ofi paths, default all of them.
pub(crate) fn choose_paths(text: Option<&str>) -> Result<Vec<&'static PathDef>, String> {
    let ofi: Vec<&'static PathDef> = paths::REGISTRY.iter().filter(|p| p.transport == Transport::Ofi).collect();
    let names = || ofi.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
    let Some(text) = text.map(str::trim).filter(|t| *t != "all") else {
        return Ok(ofi);
    };
    let mut chosen = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let def = ofi
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| format!("unknown path {name:?} for --transport ofi; paths: {}", names()))?;
        if !chosen.iter().any(|c: &&PathDef| c.name == name) {
            chosen.push(*def);
        }
    }
    if chosen.is_empty() {
        return Err(format!("--paths names no path; paths: {}", names()));
    }
    chosen.sort_by_key(|c| ofi.iter().position(|r| r.name == c.name));
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fi_pingpong_output() {
        let out = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
                   64      1k      =1k      125k        1.51s      0.08     757.41       0.00\n";
        assert_eq!(parse_fi_pingpong(out).unwrap(), 757.41);
        let out = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec\n\
                   4k      2k      =2k      15m         0.08s    194.44      21.07       0.05\n";
        assert_eq!(parse_fi_pingpong(out).unwrap(), 21.07);
        assert!(parse_fi_pingpong("fi_getinfo(): -61 (No data available)").is_err());
        assert!(parse_fi_pingpong("").is_err());
    }

    #[test]
    fn iterations_shrink_with_size() {
        assert_eq!(fi_iters(10000, 4), 10000);
        assert_eq!(fi_iters(10000, 1 << 20), 512);
        assert_eq!(fi_iters(10000, 64 << 20), 100);
        assert_eq!(fi_iters(50, 4), 100);
    }

    #[test]
    fn fi_pingpong_matches_the_lanes_slice_unless_told() {
        // The mean of the Lanes paths' round trips at that size, within bounds.
        assert_eq!(matched_iters(&[70_000, 50_000], 4), 60_000);
        assert_eq!(matched_iters(&[700], 1 << 20), 700);
        assert_eq!(matched_iters(&[3], 1 << 20), MIN_FI_ITERS);
        assert_eq!(matched_iters(&[u64::MAX / 4], 4), MAX_FI_ITERS);
        // No Lanes path at that size: the fixed default, fewer for large sizes.
        assert_eq!(matched_iters(&[], 4), FI_ITERS);
        assert_eq!(matched_iters(&[], 1 << 20), 512);
    }

    #[test]
    fn baselines_only_where_a_path_is_compared() {
        let paths = |names: &str| choose_paths(Some(names)).unwrap();
        let sizes = [4, 64, 8192, DMA_SIZE];
        let dma = Baselines::of(&paths("ofi-dma"), &sizes);
        assert_eq!(dma.fi_pingpong_at, [false, false, false, true]);
        assert!(dma.bandwidth);
        let interrupt = Baselines::of(&paths("ofi-interrupt"), &sizes);
        assert_eq!(interrupt.fi_pingpong_at, [true, false, false, false], "interrupts carry at most 8 bytes");
        assert!(!interrupt.bandwidth);
        let pio = Baselines::of(&paths("ofi-pio"), &sizes);
        assert_eq!(pio.fi_pingpong_at, [true; 4]);
        assert!(!pio.bandwidth);
        let all = Baselines::of(&choose_paths(None).unwrap(), &sizes);
        assert_eq!(all.fi_pingpong_at, [true; 4]);
        assert!(all.bandwidth);
    }

    #[test]
    fn remote_paths() {
        let all = choose_paths(None).unwrap();
        assert!(all.iter().all(|p| p.transport == Transport::Ofi));
        assert_eq!(
            choose_paths(Some("ofi-dma,ofi-pio")).unwrap().iter().map(|p| p.name).collect::<Vec<_>>(),
            ["ofi-pio", "ofi-dma"]
        );
        assert!(choose_paths(Some("pio")).unwrap_err().contains("unknown path"));
    }
}
