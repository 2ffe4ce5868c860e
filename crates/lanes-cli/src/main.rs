//! `lanes`: benchmarks, status and clean-up for the Lanes fabric.

mod bench;
mod daemon_cmd;
mod dma_bench;
mod keygen_cmd;
mod measure;
mod pingpong;
mod preload;
mod reflective_bench;
mod run_cmd;
mod sdk_cmd;
mod sizes;
mod status_cmd;
mod wakeup;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lanes::Fabric;

#[derive(Parser)]
#[command(name = "lanes", version, about = "Lanes: a PCIe-style shared-memory fabric on ordinary Linux machines")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the fabric's nodes, segments, interrupts, reflective groups and accelerated sockets.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove what dead processes left behind (segments, interrupts, groups, process and
    /// socket records).
    Cleanup {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Throughput and latency per message size for every path, against kernel TCP, Unix
    /// sockets and the floor (`lanes bench dma`: DMA against PIO and memcpy; `lanes bench
    /// sockets`: sockperf, iperf3 and redis with and without liblanes_sockets.so).
    Bench(Box<bench::BenchArgs>),
    /// Ping-pong latency between processes acting as nodes: PIO against the floor, interrupts
    /// against the kernel's wake-ups, reflective memory against group size (--mode).
    Pingpong(PingpongArgs),
    /// Run a program with its local TCP accelerated: liblanes_sockets.so goes first in
    /// LD_PRELOAD, then the program replaces this process. Both ends of a connection need it.
    Run(run_cmd::RunArgs),
    /// Install or uninstall the SISCI SDK (headers, libsisci.so, pkg-config file).
    Sdk(sdk_cmd::SdkArgs),
    /// Run this host's cluster daemon in the foreground (needs [cluster] in lanes.toml):
    /// heartbeats with the other hosts, lookups, node events. Stops on SIGTERM/SIGINT.
    Daemon(daemon_cmd::DaemonArgs),
    /// Make this host's key for the cluster's daemons and print the public key to list in
    /// lanes.toml (`public_key` of the host's [[node]] entries).
    Keygen(keygen_cmd::KeygenArgs),
    /// (internal) a receiver of `pingpong --mode reflective`.
    #[command(hide = true)]
    ReflectivePeer {
        #[arg(long)]
        group: u32,
        #[arg(long)]
        index: usize,
        #[arg(long)]
        rounds: u64,
        #[arg(long)]
        cpu: Option<usize>,
        #[arg(long)]
        share_cpu: bool,
    },
    /// (internal) the peer of `pingpong --mode interrupt|data-interrupt`.
    #[command(hide = true)]
    WakeupPeer {
        #[arg(long, value_enum)]
        mode: wakeup::Mode,
        #[arg(long)]
        client_node: u32,
        #[arg(long)]
        client_number: u32,
        #[arg(long)]
        number: u32,
        #[arg(long)]
        poll_us: u64,
        #[arg(long)]
        cpu: Option<usize>,
    },
}

/// What `lanes pingpong` bounces between the two nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum PingpongMode {
    /// Stores into the peer's segment, spinning on our own (the default).
    Pio,
    /// Remote interrupts (doorbells without data).
    Interrupt,
    /// Data interrupts (doorbells with a message of --sizes bytes, at most 4K).
    DataInterrupt,
    /// Reflective memory: one writer, --nodes - 1 acknowledging receivers.
    Reflective,
}

#[derive(clap::Args)]
struct PingpongArgs {
    /// What to bounce: PIO messages, interrupts, data interrupts, or reflective memory.
    #[arg(long, value_enum, default_value = "pio")]
    mode: PingpongMode,
    /// With --mode reflective: the largest group measured (every size from 2 up).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// With interrupt modes: microseconds a waiter spins before it sleeps; the sleeping
    /// variant (0) is always measured too.
    #[arg(long, default_value_t = 1000)]
    poll_us: u64,
    /// Message sizes: a list (4,64,1K) or power-of-two ranges (4-8K); default 4-8K for PIO,
    /// 4-4K for data interrupts.
    #[arg(long)]
    sizes: Option<String>,
    /// Measured round trips per size.
    #[arg(long, default_value_t = 100_000)]
    iterations: usize,
    /// Unmeasured round trips before each size.
    #[arg(long, default_value_t = 10_000)]
    warmup: usize,
    /// CPUs: `A,B` pins this process to A and the peer it starts to B; with --server, one CPU.
    #[arg(long)]
    cpu: Option<String>,
    /// Print a latency histogram per size.
    #[arg(long)]
    hist: bool,
    /// Write the results as JSON to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run only the server side (start the client separately with --client).
    #[arg(long, conflicts_with = "client")]
    server: bool,
    /// Run only the client side against a server started separately on --remote-node.
    #[arg(long, requires = "remote_node")]
    client: bool,
    /// The server's node id (with --client).
    #[arg(long)]
    remote_node: Option<u32>,
    /// The server's mailbox segment id.
    #[arg(long, default_value_t = pingpong::DEFAULT_SERVER_SEGMENT)]
    segment_id: u32,
    /// Largest message the server accepts (with --server).
    #[arg(long, default_value = "1M")]
    max_size: String,
    /// Seconds to wait for the peer (0: for ever, servers only).
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// (internal) the server was started by a client and ends with it.
    #[arg(long, hide = true)]
    exit_with_client: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(a) => return run_cmd::run(a),
        Cmd::Status { json } => status_cmd::status(json),
        Cmd::Cleanup { json } => status_cmd::cleanup(json),
        Cmd::Pingpong(a) if a.mode == PingpongMode::Reflective => open_fabric().and_then(|f| {
            let r = reflective_bench::run(&f, a.nodes, a.iterations.max(1), a.warmup)?;
            emit(&r, a.json.as_deref(), || reflective_bench::print_report(&r))
        }),
        Cmd::Pingpong(a) if a.mode != PingpongMode::Pio => wakeup_cmd(a),
        Cmd::ReflectivePeer { group, index, rounds, cpu, share_cpu } => {
            open_fabric().and_then(|f| reflective_bench::run_peer(&f, group, index, rounds, cpu, share_cpu))
        }
        Cmd::Bench(a) => bench::run(*a),
        Cmd::Pingpong(a) => pingpong_cmd(a),
        Cmd::Sdk(a) => sdk_cmd::run(a),
        Cmd::Daemon(a) => daemon_cmd::run(a),
        Cmd::Keygen(a) => keygen_cmd::run(a),
        Cmd::WakeupPeer { mode, client_node, client_number, number, poll_us, cpu } => open_fabric().and_then(|f| {
            wakeup::run_peer(&f, mode, client_node, client_number, number, Duration::from_micros(poll_us), cpu)
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lanes: {e}");
            ExitCode::FAILURE
        }
    }
}

fn open_fabric() -> Result<Fabric, String> {
    Fabric::open().map_err(|e| format!("opening the fabric: {e}"))
}

fn pingpong_cmd(a: PingpongArgs) -> Result<(), String> {
    let fabric = open_fabric()?;
    if a.server {
        let cpu = match &a.cpu {
            Some(c) => {
                Some(c.trim().parse::<usize>().map_err(|_| format!("--cpu with --server takes one CPU, got {c:?}"))?)
            }
            None => None,
        };
        let max = sizes::parse_size(&a.max_size)?;
        let wait = (a.timeout > 0).then(|| Duration::from_secs(a.timeout));
        if !a.exit_with_client {
            eprintln!(
                "lanes pingpong: serving as node {} on segment {:#x}; start the client with --client --remote-node {}",
                fabric.node_id(),
                a.segment_id,
                fabric.node_id()
            );
        }
        return pingpong::run_server(&fabric, a.segment_id, max, cpu, wait);
    }
    let cpus = match &a.cpu {
        Some(c) => Some(measure::affinity::parse_pair(c)?),
        None => measure::affinity::default_pair(),
    };
    let opts = pingpong::Options {
        sizes: sizes::parse_sizes(a.sizes.as_deref().unwrap_or("4-8K"))?,
        iterations: a.iterations.max(1),
        warmup: a.warmup,
        cpus,
        remote_node: a.remote_node.filter(|_| a.client),
        server_segment: a.segment_id,
        histograms: a.hist,
        connect_timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let report = pingpong::run_client(&fabric, &opts)?;
    emit(&report, a.json.as_deref(), || pingpong::print_report(&report, a.hist))
}

/// Prints the table, and the JSON to a file or (`-`) to standard output instead.
pub(crate) fn emit<R: serde::Serialize>(
    report: &R,
    json: Option<&std::path::Path>,
    table: impl FnOnce(),
) -> Result<(), String> {
    match json {
        Some(p) if p.as_os_str() == "-" => {
            println!("{}", serde_json::to_string_pretty(report).map_err(|e| e.to_string())?);
        }
        Some(p) => {
            table();
            let text = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
            std::fs::write(p, text + "\n").map_err(|e| format!("writing {}: {e}", p.display()))?;
        }
        None => table(),
    }
    Ok(())
}

fn wakeup_cmd(a: PingpongArgs) -> Result<(), String> {
    if a.server || a.client {
        return Err("--server/--client run PIO ping-pong only; interrupt modes start their own peers".into());
    }
    let fabric = open_fabric()?;
    let cpus = match &a.cpu {
        Some(c) => Some(measure::affinity::parse_pair(c)?),
        None => measure::affinity::default_pair(),
    };
    let mode = match a.mode {
        PingpongMode::DataInterrupt => wakeup::Mode::DataInterrupt,
        _ => wakeup::Mode::Interrupt,
    };
    let opts = wakeup::Options {
        mode,
        sizes: sizes::parse_sizes(a.sizes.as_deref().unwrap_or("4-4K"))?,
        iterations: a.iterations.max(1),
        warmup: a.warmup,
        cpus,
        poll_us: a.poll_us,
        histograms: a.hist,
    };
    let report = wakeup::run_client(&fabric, &opts)?;
    emit(&report, a.json.as_deref(), || wakeup::print_report(&report, a.hist))
}
