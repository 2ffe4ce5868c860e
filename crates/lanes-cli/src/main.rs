//! `lanes`: benchmarks, status and clean-up for the Lanes fabric.

mod measure;
mod pingpong;
mod sizes;
mod status_cmd;

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
    /// List the fabric's nodes and segments.
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove what dead processes left behind (stale segments and process records).
    Cleanup {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// PIO ping-pong latency between two processes acting as two nodes, against the floor.
    Pingpong(PingpongArgs),
}

#[derive(clap::Args)]
struct PingpongArgs {
    /// Message sizes: a list (4,64,1K) or power-of-two ranges (4-8K).
    #[arg(long, default_value = "4-8K")]
    sizes: String,
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
        Cmd::Status { json } => status_cmd::status(json),
        Cmd::Cleanup { json } => status_cmd::cleanup(json),
        Cmd::Pingpong(a) => pingpong_cmd(a),
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
        sizes: sizes::parse_sizes(&a.sizes)?,
        iterations: a.iterations.max(1),
        warmup: a.warmup,
        cpus,
        remote_node: a.remote_node.filter(|_| a.client),
        server_segment: a.segment_id,
        histograms: a.hist,
        connect_timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let report = pingpong::run_client(&fabric, &opts)?;
    match a.json.as_deref() {
        Some(p) if p.as_os_str() == "-" => {
            println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
        }
        Some(p) => {
            pingpong::print_report(&report, a.hist);
            let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
            std::fs::write(p, text + "\n").map_err(|e| format!("writing {}: {e}", p.display()))?;
        }
        None => pingpong::print_report(&report, a.hist),
    }
    Ok(())
}
