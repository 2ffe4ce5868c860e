//! `lanes pingpong`: its arguments and its modes (PIO, interrupt, data interrupt,
//! reflective), and the hidden roles of the peers the modes start.

use std::path::PathBuf;
use std::time::Duration;

use lanes::Fabric;

use crate::bench::registry::emit;
use crate::bench::{pingpong, reflective, wakeup};
use crate::{measure, sizes};

pub use wakeup::Mode as WakeupMode;

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

/// Arguments of `lanes pingpong`.
#[derive(clap::Args)]
pub struct PingpongArgs {
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

fn open_fabric() -> Result<Fabric, String> {
    Fabric::open().map_err(|e| format!("opening the fabric: {e}"))
}

/// Runs `lanes pingpong`.
pub fn run(a: PingpongArgs) -> Result<(), String> {
    match a.mode {
        PingpongMode::Reflective => open_fabric().and_then(|f| {
            let r = reflective::run(&f, a.nodes, a.iterations.max(1), a.warmup)?;
            emit(&r, a.json.as_deref())
        }),
        PingpongMode::Pio => pio(a),
        PingpongMode::Interrupt | PingpongMode::DataInterrupt => wakeups(a),
    }
}

/// The hidden `reflective-peer`: a receiver of `pingpong --mode reflective`.
pub fn reflective_peer(
    group: u32,
    index: usize,
    rounds: u64,
    cpu: Option<usize>,
    share_cpu: bool,
) -> Result<(), String> {
    open_fabric().and_then(|f| reflective::run_peer(&f, group, index, rounds, cpu, share_cpu))
}

/// The hidden `wakeup-peer`: the peer of `pingpong --mode interrupt|data-interrupt`.
pub fn wakeup_peer(
    mode: WakeupMode,
    client_node: u32,
    client_number: u32,
    number: u32,
    poll_us: u64,
    cpu: Option<usize>,
) -> Result<(), String> {
    open_fabric().and_then(|f| {
        wakeup::run_peer(&f, mode, client_node, client_number, number, Duration::from_micros(poll_us), cpu)
    })
}
fn pio(a: PingpongArgs) -> Result<(), String> {
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
    emit(&report, a.json.as_deref())
}

fn wakeups(a: PingpongArgs) -> Result<(), String> {
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
    emit(&report, a.json.as_deref())
}
