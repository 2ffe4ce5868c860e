//! Every benchmark (registry.rs lists them), and `lanes bench`: every path against the
//! kernel and the floor, in one run.
//!
//! Per message size (4 B to 1 MiB by default) and per path it measures latency (two-process
//! ping-pong, every round trip recorded) and throughput (one-way streaming for a time
//! slice, the receiver copying every message out, with the CPU time of both processes),
//! then prints a table with ratios against the baselines, and on request JSON, plots and
//! latency histograms. The peer is this executable re-run with the hidden `--peer` role.
//!
//! ```text
//! mod.rs          arguments and the command's flow
//! registry.rs     every benchmark: name, command, what it measures, its table
//! options.rs      durations, sizes, path selection, the time budget (Plan)
//! paths/          the path registry (mod.rs) and the traits (path.rs); floor, pio
//!                 (shared-memory protocols in shm.rs), socket (tcp and unix), sockets (tcp
//!                 under the accelerator); across hosts also interrupt and dma_stream
//! remote.rs       `--transport ofi --remote-node N` and `--serve`: two hosts, with
//!                 fi_pingpong and iperf3 as baselines
//! sockets/        `lanes bench sockets`: sockperf, iperf3, redis with and without it
//! udp_stream.rs   `lanes bench udp-stream`: the UDP streaming API against per-datagram calls
//! ip.rs           `lanes bench ip`: lanes0 (`lanes ip up`) against a veth pair, iperf3 and ping
//! dma.rs          `lanes bench dma`: DMA against PIO and memcpy
//! pingpong/       `lanes pingpong`: PIO round trips (paths/shm.rs's latency protocol) against
//!                 the floor; client, server, the mailboxes' command line
//! wakeup/         `lanes pingpong --mode interrupt|data-interrupt`: wake-ups against the kernel's
//! reflective.rs   `lanes pingpong --mode reflective`: one writer against group size
//! control.rs      the control channel and the peer's command loop
//! wait.rs         spinning waits with bounded, non-blocking liveness checks
//! runner.rs       the peer session, slices, rounds, the results
//! facts.rs        the run's parameters and details as the report records them
//! table.rs        the terminal table and --hist
//! plot.rs         --plot: PNG and SVG
//! compare.rs      --compare A.json B.json
//! floor_check.rs  --check-floor against the independent lanes-spin-floor program
//! progress.rs     the progress bar
//! ```

mod compare;
mod control;
mod dma;
mod facts;
mod floor_check;
mod ip;
mod options;
pub(crate) mod paths;
pub(crate) mod pingpong;
mod plot;
mod progress;
pub(crate) mod reflective;
pub(crate) mod registry;
mod remote;
mod runner;
mod sockets;
mod table;
mod udp_stream;
pub(crate) mod wait;
pub(crate) mod wakeup;

use std::path::PathBuf;
use std::time::Duration;

use crate::measure::affinity;
use crate::report::say;
use options::{PathChoice, Plan};

/// Arguments of `lanes bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// A measurement of its own instead of the path comparison.
    #[command(subcommand)]
    what: Option<BenchWhat>,
    /// A short run (about 15 s): sizes 4 B to 1 MiB in powers of 4.
    #[arg(long)]
    quick: bool,
    /// Total time: 90, 30s, 5m, 24h (default 60s, 15s with --quick). Runs over 2 minutes go
    /// in rounds of one minute and report the worst latency seen and when.
    #[arg(long, value_name = "TIME")]
    duration: Option<String>,
    /// Message sizes: a list (4,64,1K) or power-of-two ranges (4-1M); multiples of 4.
    #[arg(long, value_name = "SIZES")]
    sizes: Option<String>,
    /// Paths to measure, comma-separated (default: all available); `list` lists them.
    #[arg(long, value_name = "LIST")]
    paths: Option<String>,
    /// CPUs: `A,B` runs this process on A and the peer on B (default: the first two allowed).
    #[arg(long, value_name = "A,B")]
    cpu: Option<String>,
    /// Write the results as JSON to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write throughput and latency plots (PNG and SVG) into DIR.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// Print a latency histogram per path and size.
    #[arg(long)]
    hist: bool,
    /// Real-time mode: lock memory, pin both processes, SCHED_FIFO where permitted.
    #[arg(long)]
    rt: bool,
    /// Also measure the floor against an independent two-process spin (lanes-spin-floor)
    /// and print the ratio.
    #[arg(long)]
    check_floor: bool,
    /// Print two runs side by side (files written by --json), ratios B / A.
    #[arg(
        long,
        num_args = 2,
        value_names = ["A", "B"],
        conflicts_with_all = ["quick", "duration", "sizes", "paths", "cpu", "json", "plot", "hist", "rt", "check_floor"]
    )]
    compare: Option<Vec<PathBuf>>,
    /// Print the table (and with --plot write the plots) of a run saved with --json, instead
    /// of measuring; any benchmark's --json file prints that benchmark's table.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["quick", "duration", "sizes", "paths", "cpu", "json", "hist", "rt", "check_floor", "compare"]
    )]
    from: Option<PathBuf>,
    /// `local` (default: both processes on this host) or `ofi`: against `lanes bench
    /// --serve` on the host of `--remote-node`, with fi_pingpong and iperf3 as baselines.
    #[arg(long, value_name = "local|ofi", default_value = "local")]
    transport: String,
    /// With `--transport ofi`: the node (of another host of the cluster) whose host runs
    /// `lanes bench --serve`.
    #[arg(long, value_name = "N")]
    remote_node: Option<u32>,
    /// Serve `--transport ofi` runs of other hosts, as this process's node (LANES_NODE_ID).
    #[arg(long, conflicts_with_all = ["remote_node", "compare", "from", "peer"])]
    serve: bool,
    /// With `--serve`: exit after one client.
    #[arg(long, requires = "serve")]
    once: bool,
    /// The bench's TCP port on the server's host address (default: that host's daemon
    /// port + 1).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// With `--transport ofi`: rounds over every size (default 3, 1 with --quick).
    #[arg(long, value_name = "N")]
    rounds: Option<u64>,
    /// With `--transport ofi`: latency time per path, size and round (default 1s, 200ms
    /// with --quick).
    #[arg(long, value_name = "TIME")]
    slice: Option<String>,
    /// With `--transport ofi`: seconds of the DMA bandwidth and of iperf3 per round
    /// (default 3, 1 with --quick).
    #[arg(long, value_name = "SECS")]
    stream_secs: Option<u64>,
    /// With `--transport ofi`: fi_pingpong iterations per size (fewer above 52 KiB; default:
    /// as many round trips as the Lanes paths made at that size in their slice).
    #[arg(long, value_name = "N")]
    fi_iters: Option<u64>,
    /// (internal) run as the peer of a bench.
    #[arg(long, hide = true)]
    peer: bool,
    /// (internal) the peer's CPU.
    #[arg(long, hide = true, requires = "peer")]
    peer_cpu: Option<usize>,
}

/// Measurements other than the path comparison.
#[derive(clap::Subcommand, Debug)]
enum BenchWhat {
    /// DMA against PIO and memcpy: bandwidth, latency and CPU per size (64 B to 16 MiB), the
    /// small-packet scenario (naive against optimised engine), the PIO/DMA crossover.
    Dma(dma::DmaArgs),
    /// Unchanged programs over kernel TCP against liblanes_sockets.so on both ends,
    /// interleaved A/B: sockperf latency and 64 B msg/s, iperf3, redis-benchmark GET p50, a
    /// blocking ping-pong (also with a CPU hog per core), pgbench TPC-B and select-only, nginx
    /// with keep-alive and with a connection per request.
    Sockets(sockets::SocketsArgs),
    /// The UDP streaming API (UDP GSO/GRO, sendmmsg/recvmmsg) against per-datagram
    /// send/recv: MB/s, CPU% of both sides, system calls per GB and loss per datagram size.
    UdpStream(udp_stream::UdpStreamArgs),
    /// The IP interface (`lanes ip up`, lanes0) between two network namespaces against a
    /// veth pair between the same namespaces (root): iperf3 TCP throughput and ping
    /// latency, with and without offloads, in alternating rounds.
    Ip(ip::IpArgs),
}

/// `lanes bench --transport ofi --remote-node N`.
fn run_ofi(a: &BenchArgs) -> Result<(), String> {
    let node = a.remote_node.ok_or("--transport ofi needs --remote-node N (a node of another host)")?;
    for (set, name) in [
        (a.compare.is_some(), "--compare"),
        (a.from.is_some(), "--from"),
        (a.rt, "--rt"),
        (a.cpu.is_some(), "--cpu"),
        (a.check_floor, "--check-floor"),
        (a.duration.is_some(), "--duration (use --rounds, --slice, --stream-secs)"),
        (a.hist, "--hist"),
    ] {
        if set {
            return Err(format!("{name} is not supported with --transport ofi"));
        }
    }
    let sizes = options::parse_bench_sizes(a.sizes.as_deref().unwrap_or(if a.quick {
        options::QUICK_SIZES
    } else {
        options::DEFAULT_SIZES
    }))?;
    let slice = match &a.slice {
        Some(s) => options::parse_duration(s)?,
        None if a.quick => Duration::from_millis(200),
        None => Duration::from_secs(1),
    };
    let positive = |v: Option<u64>, name: &str, quick: u64, default: u64| match v {
        Some(0) => Err(format!("{name} must be at least 1")),
        Some(n) => Ok(n),
        None => Ok(if a.quick { quick } else { default }),
    };
    let o = remote::ClientOptions {
        remote_node: node,
        port: a.port,
        paths: remote::choose_paths(a.paths.as_deref())?,
        sizes,
        rounds: positive(a.rounds, "--rounds", 1, 3)?,
        lat_slice: slice,
        stream_secs: match positive(a.stream_secs, "--stream-secs", 1, 3)? {
            n if n > remote::MAX_STREAM_SECS => {
                return Err(format!("--stream-secs {n}: at most {}", remote::MAX_STREAM_SECS))
            }
            n => n,
        },
        fi_iters: match a.fi_iters {
            Some(0) => return Err("--fi-iters must be at least 1".into()),
            n => n,
        },
        quick: a.quick,
    };
    let report = remote::run(&o)?;
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let text = table::render(&report);
    if to_stdout {
        eprint!("{text}");
        say(&report.to_json()?)?;
    } else {
        say(&text)?;
        if let Some(p) = &a.json {
            report.write_json(p)?;
            say(&format!("JSON: {}\n", p.display()))?;
        }
    }
    if let Some(dir) = &a.plot {
        let files: Vec<String> = plot::write(&report, dir)?.iter().map(|f| f.display().to_string()).collect();
        say(&format!("plots: {}\n", files.join(", ")))?;
    }
    Ok(())
}

/// Runs `lanes bench`.
pub fn run(a: BenchArgs) -> Result<(), String> {
    match a.what {
        Some(BenchWhat::Dma(d)) => return dma::run_cmd(d),
        Some(BenchWhat::Sockets(s)) => return sockets::run(s),
        Some(BenchWhat::UdpStream(u)) => return udp_stream::run(u),
        Some(BenchWhat::Ip(i)) => return ip::run(i),
        None => {}
    }
    if a.peer {
        return control::serve(a.peer_cpu, a.rt);
    }
    if a.serve {
        return remote::serve(a.port, a.once);
    }
    match a.transport.as_str() {
        "local" => {
            if a.remote_node.is_some() {
                return Err("--remote-node needs --transport ofi".into());
            }
            for (set, name) in [
                (a.rounds.is_some(), "--rounds"),
                (a.slice.is_some(), "--slice"),
                (a.stream_secs.is_some(), "--stream-secs"),
                (a.fi_iters.is_some(), "--fi-iters"),
                (a.port.is_some(), "--port"),
            ] {
                if set {
                    return Err(format!("{name} is for --transport ofi (or --serve)"));
                }
            }
        }
        "ofi" => return run_ofi(&a),
        other => return Err(format!("--transport {other:?}: `local` or `ofi`")),
    }
    if let Some(files) = &a.compare {
        let [x, y] = files.as_slice() else {
            return Err("--compare takes two files".into());
        };
        return say(&compare::compare(x, y)?);
    }
    if let Some(file) = &a.from {
        let report = crate::report::Report::read_json(file)?;
        if report.rows.is_empty() {
            return Err(format!("{} holds no results", file.display()));
        }
        // Another benchmark's report: its own table.
        if !report.benchmark.is_empty() && report.benchmark != facts::BENCHMARK {
            if a.plot.is_some() {
                return Err(format!(
                    "--plot draws `lanes bench` runs; {} is a `{}` run",
                    file.display(),
                    report.benchmark
                ));
            }
            let b = registry::get(&report.benchmark).ok_or_else(|| {
                format!("{} holds results of an unknown benchmark {:?}", file.display(), report.benchmark)
            })?;
            (b.table)(&report);
            return Ok(());
        }
        say(&table::render(&report))?;
        if let Some(dir) = &a.plot {
            let files: Vec<String> = plot::write(&report, dir)?.iter().map(|f| f.display().to_string()).collect();
            say(&format!("plots: {}\n", files.join(", ")))?;
        }
        return Ok(());
    }
    let mut paths = match options::parse_paths(a.paths.as_deref())? {
        PathChoice::List => return say(&(options::list_paths() + &registry::list())),
        PathChoice::Run(p) => p,
    };
    // The sockets path needs this process and its peer under the library: re-run under it
    // (the line below returns only if that failed).
    let default_paths = a.paths.as_deref().is_none_or(|p| p.trim() == "all");
    if paths.iter().any(|p| p.name == "sockets") && paths::sockets::needs_reexec() {
        let why = paths::sockets::reexec();
        if !default_paths {
            return Err(format!("path sockets is not available: {why}"));
        }
        paths.retain(|p| p.name != "sockets");
    }
    if default_paths {
        if let Some(Err(why)) = paths::find("sockets").map(|d| d.setups()) {
            eprintln!("lanes bench: path sockets is not available ({why}); the other paths run");
        }
    }
    if paths.iter().any(|p| p.name == "sockets") {
        if let Some(line) = paths::sockets::describe() {
            eprintln!("{line}");
        }
    }
    let duration = match &a.duration {
        Some(d) => options::parse_duration(d)?,
        None if a.quick => options::QUICK_DURATION,
        None => options::DEFAULT_DURATION,
    };
    let sizes = options::parse_bench_sizes(a.sizes.as_deref().unwrap_or(if a.quick {
        options::QUICK_SIZES
    } else {
        options::DEFAULT_SIZES
    }))?;
    let cpus = affinity::distinct_pair_or_default(a.cpu.as_deref(), "the two processes")?;
    if let Some(dir) = &a.plot {
        if dir.exists() && !dir.is_dir() {
            return Err(format!("--plot {}: not a directory", dir.display()));
        }
    }
    let plan = Plan::new(paths, sizes, duration, cpus, a.rt, a.quick);
    if cpus.is_none() {
        eprintln!("lanes bench: only one CPU is available; both processes share it, so spinning paths yield");
    }
    let extra: Vec<&'static paths::PathDef> = if a.check_floor {
        floor_check::program()?;
        paths::find("floor").into_iter().collect()
    } else {
        Vec::new()
    };
    let est = plan.round_estimate();
    if !plan.rounds && est > duration + Duration::from_secs(2) {
        eprintln!(
            "lanes bench: {} paths x {} sizes need about {:.0} s at the shortest useful slices",
            plan.paths.len(),
            plan.sizes.len(),
            est.as_secs_f64()
        );
    }
    let json = a.json.clone();
    let mut floor_check = None;
    let measured = runner::run(
        &plan,
        &extra,
        |m| match &json {
            Some(p) if p.as_os_str() != "-" => m.report().write_json(p),
            _ => Ok(()),
        },
        |s| {
            if a.check_floor {
                eprintln!("lanes bench: checking the floor against lanes-spin-floor (about 5 s)");
                floor_check = Some(floor_check::run(s)?);
            }
            Ok(())
        },
    )?;
    let mut report = measured.report();
    if let Some(f) = &floor_check {
        report.set_detail("floor_check", f);
    }
    let to_stdout = a.json.as_deref().is_some_and(|p| p.as_os_str() == "-");
    let mut text = table::render(&report);
    if a.hist {
        text.push_str(&table::render_histograms(&measured));
    }
    // With `--json -` the JSON owns standard output and everything else goes to stderr.
    let tell = |s: &str| -> Result<(), String> {
        if to_stdout {
            eprint!("{s}");
            Ok(())
        } else {
            say(s)
        }
    };
    tell(&text)?;
    if let Some(p) = &a.json {
        if to_stdout {
            say(&report.to_json()?)?;
        } else {
            report.write_json(p)?;
            tell(&format!("JSON: {}\n", p.display()))?;
        }
    }
    if let Some(dir) = &a.plot {
        let files: Vec<String> = plot::write(&report, dir)?.iter().map(|f| f.display().to_string()).collect();
        tell(&format!("plots: {}\n", files.join(", ")))?;
    }
    if report.run_as::<facts::RunInfo>().interrupted {
        return Err("interrupted; the results above cover what was measured".into());
    }
    Ok(())
}
