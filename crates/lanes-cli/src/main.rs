//! `lanes`: status, clean-up, `run`, the daemon, keys and the SDK for the Lanes fabric;
//! `bench` and `pingpong` (and the benchmarks' hidden peer roles) call into lanes-bench.

mod daemon_cmd;
mod ip_cmd;
mod keygen_cmd;
mod run_cmd;
mod sdk_cmd;
mod status_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Bench(Box<lanes_bench::BenchArgs>),
    /// Ping-pong latency between processes acting as nodes: PIO against the floor, interrupts
    /// against the kernel's wake-ups, reflective memory against group size (--mode).
    Pingpong(lanes_bench::PingpongArgs),
    /// Run a program with its local TCP accelerated: liblanes_sockets.so goes first in
    /// LD_PRELOAD, then the program replaces this process. Both ends of a connection need it.
    Run(run_cmd::RunArgs),
    /// Install or uninstall the SISCI SDK (headers, libsisci.so, pkg-config file).
    Sdk(sdk_cmd::SdkArgs),
    /// Run this host's cluster daemon in the foreground (needs `[cluster]` in lanes.toml):
    /// heartbeats with the other hosts, lookups, node events. Stops on SIGTERM/SIGINT.
    Daemon(daemon_cmd::DaemonArgs),
    /// The IP interface over the fabric: `ip up` creates lanes0 with this node's addresses
    /// and runs it (CAP_NET_ADMIN), `ip down` stops it.
    Ip(ip_cmd::IpArgs),
    /// Make this host's key for the cluster's daemons and print the public key to list in
    /// lanes.toml (`public_key` of the host's `[[node]]` entries).
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
        mode: lanes_bench::WakeupMode,
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

/// At exit, whichever way the program ends (a subcommand may call `process::exit`), before
/// libfabric is finalized: the fabric's background threads stop calling the provider,
/// whose destructor would free what they use.
extern "C" fn at_unload() {
    let _ = std::panic::catch_unwind(lanes::transport::quiesce_for_exit);
}

#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Run(a) => return run_cmd::run(a),
        Cmd::Status { json } => status_cmd::status(json),
        Cmd::Cleanup { json } => status_cmd::cleanup(json),
        Cmd::Pingpong(a) => lanes_bench::pingpong(a),
        Cmd::ReflectivePeer { group, index, rounds, cpu, share_cpu } => {
            lanes_bench::reflective_peer(group, index, rounds, cpu, share_cpu)
        }
        Cmd::Bench(a) => lanes_bench::bench(*a),
        Cmd::Sdk(a) => sdk_cmd::run(a),
        Cmd::Daemon(a) => daemon_cmd::run(a),
        Cmd::Keygen(a) => keygen_cmd::run(a),
        Cmd::Ip(a) => ip_cmd::run(a),
        Cmd::WakeupPeer { mode, client_node, client_number, number, poll_us, cpu } => {
            lanes_bench::wakeup_peer(mode, client_node, client_number, number, poll_us, cpu)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lanes: {e}");
            ExitCode::FAILURE
        }
    }
}
