//! `lanes pingpong`: PIO round trips between two processes acting as two nodes, measured
//! like the vendor's scipp, beside the floor (`lanes bench`'s floor path with 8-byte
//! messages: the same protocol on a plain shared mapping, no Lanes).
//!
//! Each side exports a *mailbox* segment and maps the other's remotely. The round trips are
//! `lanes bench`'s latency protocol (bench/paths/shm.rs, the code of its `pio` path) on the
//! mailboxes' message areas: a message of `s` bytes is written into the peer's mailbox with
//! plain stores; its last word carries a sequence number and is stored last (release), so
//! the receiver, spinning on its own local memory, sees the whole message once the word
//! changes, and copies it out. The floor runs the same code, with messages of the sequence
//! word alone, on the floor path's mapping (bench/paths/floor.rs), whose file the client
//! hands the server at the hello. The client drives the run through a command line in the
//! server's mailbox, so `--server` and `--client` can also run apart.

mod protocol;

use std::time::Duration;

use lanes::{Fabric, Timeout};
use serde::{Deserialize, Serialize};

use crate::measure::affinity;
use crate::measure::clock::{self, ticks_to_ns};
use crate::measure::peer::Peer;
use crate::measure::stats::{Histogram, LatencySummary};
use crate::report::{Machine, Report, Row};
use protocol::{Command, Kind, Mailbox, Spin};

pub use protocol::DEFAULT_SERVER_SEGMENT;

/// Round trips per alternating chunk of floor and PIO measurement.
const CHUNK: usize = 10_000;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    pub sizes: Vec<usize>,
    pub iterations: usize,
    pub warmup: usize,
    /// CPUs for this process and the peer.
    pub cpus: Option<(usize, usize)>,
    /// Connect to a separately started server on this node instead of starting one.
    pub remote_node: Option<u32>,
    /// The server's mailbox segment id.
    pub server_segment: u32,
    /// Keep every sample's histogram.
    pub histograms: bool,
    /// How long to wait for the peer to appear.
    pub connect_timeout: Duration,
}

/// How a run was made: the report's `run`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Run {
    node: u32,
    remote_node: u32,
    /// CPUs of the client and the server; none when unpinned.
    cpus: Option<(usize, usize)>,
    /// Measured round trips per size.
    iterations: usize,
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "pingpong";

const UNITS: [(&str, &str); 5] = [
    (
        "lat_ns",
        "one-way latency in ns: round trip / 2; row `floor`: the same protocol with 8-byte messages on a plain \
         shared mapping, no Lanes",
    ),
    ("ratio", "average round trip over the floor's, measured in chunks alternating with this size"),
    ("values.floor_one_way_avg_ns", "the floor's average one-way latency measured beside this size, ns"),
    ("detail.rtt_ns", "round-trip latency in ns"),
    ("detail.histogram", "with --hist: one-way latency buckets, [upper edge in ns, count]"),
];

/// Runs the client side; starts the server too unless `opts.remote_node` is set.
pub fn run_client(fabric: &Fabric, opts: &Options) -> Result<Report, String> {
    let started = std::time::SystemTime::now();
    if let Some((n, host)) = opts.remote_node.and_then(|n| Some((n, fabric.remote_host_of(n)?))) {
        // Its floor runs on a file both processes map, which only one host's memory gives:
        // across hosts the server could not even open it.
        return Err(format!(
            "node {n} is on host {host}: `lanes pingpong` measures shared memory between two processes of one \
             host; across hosts run `lanes bench --transport ofi --remote-node {n}` (with `lanes bench --serve` on \
             host {host})"
        ));
    }
    if opts.sizes.is_empty() {
        return Err("no message sizes".into());
    }
    for &s in &opts.sizes {
        if s < 4 || s % 4 != 0 {
            return Err(format!("message size {s}: sizes are multiples of 4, at least 4"));
        }
    }
    clock::calibrate();
    let max = *opts.sizes.iter().max().expect("non-empty");
    let mine = Mailbox::create(fabric, None, max)?;
    let me = fabric.node_id().get();
    let (remote_node, server_segment, peer) = match opts.remote_node {
        Some(n) => (n, opts.server_segment, None),
        None => {
            let node = fabric.node_id().next_after().get();
            let seg = 0x4000_0000 | std::process::id();
            let mut args = vec!["pingpong".to_string(), "--server".into(), "--segment-id".into(), seg.to_string()];
            args.push("--max-size".into());
            args.push(max.to_string());
            if let Some((_, b)) = opts.cpus {
                args.push("--cpu".into());
                args.push(b.to_string());
            }
            args.push("--exit-with-client".into());
            let env = [("LANES_NODE_ID", node.to_string()), ("LANES_DIR", fabric.dir().display().to_string())];
            let p = Peer::spawn("pingpong server", &args, &env).map_err(|e| format!("starting the server: {e}"))?;
            (node, seg, Some(p))
        }
    };
    if let Some((a, _)) = opts.cpus {
        affinity::pin_to(a).map_err(|e| format!("pinning to cpu {a}: {e}"))?;
    }
    let remote = fabric
        .connect_segment(remote_node, server_segment, Timeout::After(opts.connect_timeout))
        .map_err(|e| format!("connecting to the server's mailbox: {e}"))?;
    let theirs = Mailbox::connect(remote, max)?;
    let spin = Spin::new(opts.cpus.is_none());
    let mut cmd = Command::new(&theirs, &mine, spin, max);

    cmd.hello(me, mine.id())?;
    // The floor is measured in chunks alternating with the PIO rounds of each size, and each
    // size is compared with the floor measured beside it: on a shared host the machine's
    // speed drifts (even jumps) within a run, and both must see the same machine.
    let mut floor_rtt: Vec<f64> = Vec::new();
    let mut measured = Vec::new();
    for &size in &opts.sizes {
        let mut pio_ns = Vec::with_capacity(opts.iterations);
        let mut floor_ns = Vec::with_capacity(opts.iterations);
        // Warm-up rounds of both, unrecorded.
        cmd.floor(opts.warmup.max(1))?;
        cmd.pio(size, opts.warmup.max(1))?;
        let mut left = opts.iterations;
        while left > 0 {
            let n = left.min(CHUNK);
            floor_ns.extend(cmd.floor(n)?.iter().map(|&t| ticks_to_ns(t)));
            pio_ns.extend(cmd.pio(size, n)?.iter().map(|&t| ticks_to_ns(t)));
            left -= n;
        }
        let beside = floor_ns.iter().sum::<f64>() / floor_ns.len() as f64;
        floor_rtt.extend_from_slice(&floor_ns);
        measured.push((size, pio_ns, beside));
    }
    let mut report = Report::new(BENCHMARK, Machine::this(started));
    report.set_units(UNITS);
    let floor_hist = opts.histograms.then(|| Histogram::from_samples(&floor_rtt));
    let floor_rtt_s = LatencySummary::from_samples(&mut floor_rtt);
    let mut floor = Row::new("floor").with_lat(floor_rtt_s.scaled(0.5)).with_detail("rtt_ns", &floor_rtt_s);
    if let Some(h) = floor_hist {
        floor.set_detail("histogram", &halve(&h));
    }
    report.rows.push(floor);
    for (size, mut rtt, floor_rtt_avg) in measured {
        let hist = opts.histograms.then(|| Histogram::from_samples(&rtt));
        let rtt_s = LatencySummary::from_samples(&mut rtt);
        let mut row = Row::new("pio")
            .with_size(size)
            .with_lat(rtt_s.scaled(0.5))
            .with_value("floor_one_way_avg_ns", floor_rtt_avg / 2.0)
            .with_detail("rtt_ns", &rtt_s);
        row.ratio = Some(rtt_s.avg / floor_rtt_avg.max(f64::MIN_POSITIVE));
        if let Some(h) = hist {
            row.set_detail("histogram", &halve(&h));
        }
        report.rows.push(row);
    }
    cmd.send(Kind::Done)?;
    if let Some(p) = peer {
        p.finish(Duration::from_secs(10))?;
    }
    report.set_run(&Run { node: me, remote_node, cpus: opts.cpus, iterations: opts.iterations });
    Ok(report)
}

/// Histograms are collected over round trips; report them one-way like the summaries.
fn halve(h: &Histogram) -> Histogram {
    Histogram { buckets: h.buckets.iter().map(|&(e, c)| (if e == f64::MAX { e } else { e / 2.0 }, c)).collect() }
}

/// Serves one client: answers its commands until it says done or dies.
pub fn run_server(
    fabric: &Fabric,
    segment: u32,
    max_size: usize,
    cpu: Option<usize>,
    wait_for_client: Option<Duration>,
) -> Result<(), String> {
    if let Some(c) = cpu {
        affinity::pin_to(c).map_err(|e| format!("pinning to cpu {c}: {e}"))?;
    }
    let mine = Mailbox::create(fabric, Some(segment), max_size)?;
    protocol::serve(fabric, &mine, Spin::new(cpu.is_none() && affinity::allowed_cpus().len() < 2), wait_for_client)
}

/// Prints the report the way scipp does: per size, round trip and one-way latency (and
/// the histograms, when measured).
pub fn print_table(r: &Report) {
    let run: Run = r.run_as();
    let cpus = match run.cpus {
        Some((a, b)) => format!("cpus {a},{b}"),
        None => "unpinned".into(),
    };
    println!(
        "lanes pingpong: PIO, node {} <-> node {}, {cpus}, {} iterations per size",
        run.node, run.remote_node, run.iterations
    );
    if let Some(floor) = r.rows.iter().find(|x| x.key == "floor") {
        let f = &floor.lat_ns;
        println!(
            "floor (8 B messages on a plain shared mapping): one-way avg {:.0} ns, min {:.0}, p50 {:.0}, p99 {:.0}, \
             max {:.0}",
            f.avg, f.min, f.p50, f.p99, f.max
        );
        if let Some(h) = floor.detail_as::<Histogram>("histogram") {
            print!("{}", h.render("    "));
        }
    }
    println!();
    println!(
        "{:>8}  {:>9}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>9} {:>9}",
        "size", "rtt avg", "1-way avg", "min", "p50", "p99", "p99.9", "max", "floor avg", "vs floor"
    );
    for s in r.rows.iter().filter(|x| x.key == "pio") {
        let o = &s.lat_ns;
        let rtt: LatencySummary = s.detail_as("rtt_ns").unwrap_or_default();
        println!(
            "{:>8}  {:>9.1}  {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}  {:>9.1} {:>8.2}x",
            s.size(),
            rtt.avg,
            o.avg,
            o.min,
            o.p50,
            o.p99,
            o.p999,
            o.max,
            s.value("floor_one_way_avg_ns"),
            s.ratio.unwrap_or(f64::NAN)
        );
        if let Some(h) = s.detail_as::<Histogram>("histogram") {
            print!("{}", h.render("    "));
        }
    }
    println!("(latencies in ns; one-way = round trip / 2; the floor is measured in chunks alternating with each size)");
}
