//! `lanes bench sockets --remote-node N`: programs between this host and node N's host of
//! the cluster, over kernel TCP and through the socket accelerator on both hosts, in
//! alternating rounds. `lanes bench --serve` on N's host starts each server on its host's
//! address (`sockets-server`, `bench/remote.rs`), with or without the library; the client
//! runs here the same way. Rows: sockperf's TCP ping-pong (64 B, average one-way latency)
//! and iperf3 (one stream, 128 KiB writes, received). The library pairs a connection to
//! another host as its configuration says (`[sockets] remote`; `auto` pairs only on
//! providers that beat kernel TCP, so on the tcp provider both modes are kernel TCP and the
//! ratio says what the library costs when it stays out of the way); `--force-remote` turns
//! pairing on at both ends, to see what the fabric stream itself gives on this provider.

use std::time::{Duration, Instant, SystemTime};

use crate::bench::control::Control;
use crate::bench::progress::Progress;
use crate::bench::remote::{locate, need};
use crate::bench::sockets::procs::{self, run_client, Launch, Mode, Server};
use crate::bench::sockets::servers::{Params, Sample};
use crate::bench::sockets::tools::{parse_iperf3, parse_sockperf_pingpong, Tool};
use crate::bench::sockets::{conclude, finish_row, row_states, units, SampleOut, BENCHMARK};
use crate::preload;
use crate::report::{Machine, Report};

const CONNECT: Duration = Duration::from_secs(10);
/// sockperf's table of send times, as for the local row.
const SOCKPERF_MAX_RATE: &str = "3000000";

/// The rows: never slower than kernel TCP is the target.
pub(crate) static ROWS: &[Tool] = &[
    Tool {
        key: "sockperf-latency",
        title: "sockperf ping-pong 64 B between hosts",
        needs: &[("sockperf", "sockperf")],
        unit: "us",
        lower_is_better: true,
        target: 1.0,
        hog: false,
        run: measured_with_a_remote_server,
    },
    Tool {
        key: "iperf3",
        title: "iperf3 -l 128K between hosts, received",
        needs: &[("iperf3", "iperf3")],
        unit: "Gbit/s",
        lower_is_better: false,
        target: 1.0,
        hog: false,
        run: measured_with_a_remote_server,
    },
];

/// (The rows run against a server on another host: see [`run`].)
fn measured_with_a_remote_server(_: &Params, _: &Launch, _: &Launch) -> Result<Sample, String> {
    Err("measured against `lanes bench --serve` on another host".into())
}

/// The program a row runs, at both ends.
fn program(row: &str) -> Result<&'static str, String> {
    match row {
        "sockperf-latency" => Ok("sockperf"),
        "iperf3" => Ok("iperf3"),
        _ => Err(format!("unknown row {row:?} (rows across hosts: sockperf-latency, iperf3)")),
    }
}

fn mode_named(name: &str) -> Result<Mode, String> {
    match name {
        "kernel" => Ok(Mode::Kernel),
        "lanes" => Ok(Mode::Lanes),
        _ => Err(format!("unknown mode {name:?} (kernel, lanes)")),
    }
}

/// A command for `program` in `mode` on `port`; `force`: pairing with other hosts on.
fn command(program: &str, mode: Mode, port: u16, force: bool) -> Result<std::process::Command, String> {
    let lib = match mode {
        Mode::Lanes => Some(preload::find_library()?),
        Mode::Kernel => None,
    };
    let mut cmd = Launch { mode, lib, port, cpu: None }.command(program)?;
    if force && mode == Mode::Lanes {
        cmd.env("LANES_SOCKETS_REMOTE", "on");
    }
    Ok(cmd)
}

/// The server side (`sockets-server <row> <mode> <remote>` of `lanes bench --serve`): the
/// row's server on `ip`, a free port; with how long it may take to end by itself.
pub(crate) fn start_server(
    ip: std::net::IpAddr,
    row: &str,
    mode: &str,
    remote: &str,
) -> Result<(Server, u16, Duration), String> {
    let program = program(row)?;
    need(program, program)?;
    let force = match remote {
        "on" => true,
        "config" => false,
        _ => return Err(format!("unknown remote setting {remote:?} (config, on)")),
    };
    let port = procs::free_port()?;
    let mut cmd = command(program, mode_named(mode)?, port, force)?;
    let (ip, p) = (ip.to_string(), port.to_string());
    let ends = match row {
        "iperf3" => {
            cmd.args(["-s", "-1", "-p", &p, "-B", &ip]);
            Duration::from_secs(5)
        }
        _ => {
            cmd.args(["sr", "--tcp", "-i", &ip, "-p", &p]);
            Duration::ZERO
        }
    };
    Ok((Server::start(cmd, &format!("{program} (server, {mode})"), port)?, port, ends))
}

/// What `lanes bench sockets --remote-node` was asked for.
pub(crate) struct Options {
    pub node: u32,
    pub port: Option<u16>,
    pub force: bool,
    pub rows: Vec<&'static Tool>,
    pub rounds: usize,
    pub seconds: u64,
    pub json: Option<std::path::PathBuf>,
    pub strict: bool,
}

/// One measurement: the server on the other host, the client here, both in `mode`.
fn measure(ctl: &mut Control, ip: &str, row: &str, mode: Mode, o: &Options) -> Result<Sample, String> {
    let remote = if o.force { "on" } else { "config" };
    let port = ctl.call(&format!("sockets-server {row} {} {remote}", mode.name()), CONNECT * 2)?;
    let port_number: u16 = port.trim().parse().map_err(|_| format!("the server answered {port:?}, not a port"))?;
    let program = program(row)?;
    let mut cmd = command(program, mode, port_number, o.force)?;
    let secs = o.seconds.to_string();
    match row {
        "iperf3" => cmd.args(["-c", ip, "-p", &port, "-l", "128K", "-t", &secs, "--json"]),
        _ => cmd.args(["pp", "--tcp", "-i", ip, "-p", &port, "-t", &secs, "-m", "64", "--mps", SOCKPERF_MAX_RATE]),
    };
    let limit = Duration::from_secs(3 * o.seconds + 30);
    let out = run_client(cmd, &format!("{program} (client, {})", mode.name()), limit);
    let done = ctl.call("sockets-server-done", CONNECT * 2);
    let sample = match row {
        "iperf3" => parse_iperf3(&out?)?,
        _ => parse_sockperf_pingpong(&out?)?,
    };
    done?;
    Ok(sample)
}

/// Runs `lanes bench sockets --remote-node N`.
pub(crate) fn run(o: Options) -> Result<(), String> {
    let (config, addr) = locate(o.node, o.port)?;
    if !config.cluster.as_ref().is_some_and(|c| c.is_remote(o.node)) {
        return Err(format!("node {} is on this host: `--remote-node` names a node of another host", o.node));
    }
    let lib = preload::find_library()?;
    let to_stdout = o.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let tell = |s: &str| super::tell(s, to_stdout);
    let mut rows = row_states(&o.rows);
    tell(&format!(
        "lanes bench sockets --remote-node {}: {} row{} against `lanes bench --serve` at {addr}, {} round{} of {} s, \
         kernel TCP against {} on both hosts ({})\nlibrary: {}\n",
        o.node,
        rows.len(),
        if rows.len() == 1 { "" } else { "s" },
        o.rounds,
        if o.rounds == 1 { "" } else { "s" },
        o.seconds,
        preload::LIBRARY,
        if o.force { "pairing forced on at both ends" } else { "pairing as each host's configuration says" },
        lib.display()
    ))?;
    let start_wall = SystemTime::now();
    let started = Instant::now();
    procs::catch_signals();
    let mut ctl = Control::connect(addr, CONNECT)?;
    let ip = addr.ip().to_string();
    let active = rows.iter().filter(|r| r.skipped.is_none()).count();
    let total = (active * 2 * o.rounds).max(1);
    let mut progress = Progress::new(Duration::from_secs_f64(total as f64 * (o.seconds as f64 + 1.0)));
    let mut done = 0usize;
    let mut interrupted = false;
    'rounds: for round in 0..o.rounds {
        for r in rows.iter_mut().filter(|r| r.skipped.is_none() && r.error.is_none()) {
            let order = if round % 2 == 0 { [Mode::Kernel, Mode::Lanes] } else { [Mode::Lanes, Mode::Kernel] };
            for mode in order {
                if procs::stopped() {
                    interrupted = true;
                    break 'rounds;
                }
                done += 1;
                progress.show(
                    (done - 1) as f64 / total as f64,
                    &format!("round {} {} {}", round + 1, r.tool.key, mode.name()),
                );
                match measure(&mut ctl, &ip, r.tool.key, mode, &o) {
                    Ok(Sample { value, details }) => {
                        let s = SampleOut { round: round + 1, value, details };
                        match mode {
                            Mode::Kernel => r.kernel.push(s),
                            Mode::Lanes => r.lanes.push(s),
                        }
                    }
                    Err(e) => {
                        r.error = Some(format!("{} round {}: {e}", mode.name(), round + 1));
                        break;
                    }
                }
            }
        }
    }
    progress.clear();
    drop(progress);
    let _ = ctl.finish();
    interrupted |= procs::stopped();
    let mut report = Report::new(BENCHMARK, Machine::this(start_wall));
    report.set_run(&super::RunInfo {
        seconds: o.seconds,
        rounds: o.rounds,
        library: Some(lib.display().to_string()),
        elapsed_s: started.elapsed().as_secs_f64(),
        interrupted,
        ..Default::default()
    });
    report.set_detail("remote_node", &o.node);
    report.set_detail("remote_address", &addr.to_string());
    report.set_detail("pairing_forced", &o.force);
    report.units = units();
    report.rows = rows.into_iter().map(|r| finish_row(r, true, interrupted)).collect();
    conclude(&report, o.json.as_deref(), interrupted, o.strict)
}
