//! `lanes pingpong`: PIO round trips between two processes acting as two nodes, measured
//! like the vendor's scipp, beside the floor (two processes spinning on one cache line).
//!
//! Each side exports a *mailbox* segment and maps the other's remotely. A message of `s`
//! bytes is written into the peer's mailbox with plain stores; its last word carries a
//! sequence number and is stored last (release), so the receiver, spinning on its own local
//! memory, sees the whole message once the word changes. The client drives the run through
//! a command line in the server's mailbox, so `--server` and `--client` can also run apart.

mod protocol;

use std::time::Duration;

use lanes::{Fabric, Timeout};
use serde::Serialize;

use crate::measure::affinity;
use crate::measure::clock::{self, ticks_to_ns};
use crate::measure::peer::Peer;
use crate::measure::stats::{Histogram, LatencySummary};
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

/// One message size's figures.
#[derive(Clone, Debug, Serialize)]
pub struct SizeResult {
    pub size: usize,
    pub one_way_ns: LatencySummary,
    pub rtt_ns: LatencySummary,
    /// Average latency over the floor's, both measured in alternating chunks.
    pub vs_floor: f64,
    /// The floor's average one-way latency measured beside this size.
    pub floor_one_way_avg_ns: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram: Option<Histogram>,
}

/// The floor's figures.
#[derive(Clone, Debug, Serialize)]
pub struct FloorResult {
    pub one_way_ns: LatencySummary,
    pub rtt_ns: LatencySummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram: Option<Histogram>,
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub node: u32,
    pub remote_node: u32,
    pub cpus: Option<(usize, usize)>,
    pub iterations: usize,
    pub results: Vec<SizeResult>,
    pub floor: FloorResult,
}

/// Runs the client side; starts the server too unless `opts.remote_node` is set.
pub fn run_client(fabric: &Fabric, opts: &Options) -> Result<Report, String> {
    if let Some((n, host)) = opts.remote_node.and_then(|n| Some((n, fabric.remote_host_of(n)?))) {
        // Its floor spins on a cache line both processes map, which only one host's memory
        // gives: across hosts it would wait forever.
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
    let mut cmd = Command::new(&theirs, &mine, spin);

    cmd.send(Kind::Hello { node: me, segment: mine.id() })?;
    // The floor is measured in chunks alternating with the PIO rounds of each size, and each
    // size is compared with the floor measured beside it: on a shared host the machine's
    // speed drifts (even jumps) within a run, and both must see the same machine.
    let payload: Vec<u8> = (0..max).map(|i| (i * 7 + 1) as u8).collect();
    let mut floor_rtt: Vec<f64> = Vec::new();
    let mut measured = Vec::new();
    for &size in &opts.sizes {
        let mut pio_ns = Vec::with_capacity(opts.iterations);
        let mut floor_ns = Vec::with_capacity(opts.iterations);
        // Warm-up rounds of both, unrecorded.
        cmd.floor(opts.warmup.max(1))?;
        cmd.pio(size, opts.warmup.max(1), &payload)?;
        let mut left = opts.iterations;
        while left > 0 {
            let n = left.min(CHUNK);
            floor_ns.extend(cmd.floor(n)?.iter().map(|&t| ticks_to_ns(t)));
            pio_ns.extend(cmd.pio(size, n, &payload)?.iter().map(|&t| ticks_to_ns(t)));
            left -= n;
        }
        let beside = floor_ns.iter().sum::<f64>() / floor_ns.len() as f64;
        floor_rtt.extend_from_slice(&floor_ns);
        measured.push((size, pio_ns, beside));
    }
    let floor_hist = opts.histograms.then(|| Histogram::from_samples(&floor_rtt));
    let floor_rtt_s = LatencySummary::from_samples(&mut floor_rtt);
    let floor = FloorResult {
        one_way_ns: floor_rtt_s.scaled(0.5),
        rtt_ns: floor_rtt_s,
        histogram: floor_hist.map(|h| halve(&h)),
    };
    let mut results = Vec::new();
    for (size, mut rtt, floor_rtt_avg) in measured {
        let hist = opts.histograms.then(|| Histogram::from_samples(&rtt));
        let rtt_s = LatencySummary::from_samples(&mut rtt);
        let one_way = rtt_s.scaled(0.5);
        results.push(SizeResult {
            size,
            vs_floor: rtt_s.avg / floor_rtt_avg.max(f64::MIN_POSITIVE),
            floor_one_way_avg_ns: floor_rtt_avg / 2.0,
            one_way_ns: one_way,
            rtt_ns: rtt_s,
            histogram: hist.map(|h| halve(&h)),
        });
    }
    cmd.send(Kind::Done)?;
    if let Some(p) = peer {
        p.finish(Duration::from_secs(10))?;
    }
    Ok(Report { node: me, remote_node, cpus: opts.cpus, iterations: opts.iterations, results, floor })
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

impl crate::output::Report for Report {
    /// Prints the report the way scipp does: per size, round trip and one-way latency (and
    /// the histograms, when measured).
    fn print_table(&self) {
        print_report(self)
    }
}

fn print_report(r: &Report) {
    let cpus = match r.cpus {
        Some((a, b)) => format!("cpus {a},{b}"),
        None => "unpinned".into(),
    };
    println!(
        "lanes pingpong: PIO, node {} <-> node {}, {cpus}, {} iterations per size",
        r.node, r.remote_node, r.iterations
    );
    let f = &r.floor.one_way_ns;
    println!(
        "floor (two processes, one shared cache line): one-way avg {:.0} ns, min {:.0}, p50 {:.0}, p99 {:.0}, max {:.0}",
        f.avg, f.min, f.p50, f.p99, f.max
    );
    if let Some(h) = &r.floor.histogram {
        print!("{}", h.render("    "));
    }
    println!();
    println!(
        "{:>8}  {:>9}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  {:>9} {:>9}",
        "size", "rtt avg", "1-way avg", "min", "p50", "p99", "p99.9", "max", "floor avg", "vs floor"
    );
    for s in &r.results {
        let o = &s.one_way_ns;
        println!(
            "{:>8}  {:>9.1}  {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}  {:>9.1} {:>8.2}x",
            s.size, s.rtt_ns.avg, o.avg, o.min, o.p50, o.p99, o.p999, o.max, s.floor_one_way_avg_ns, s.vs_floor
        );
        if let Some(h) = &s.histogram {
            print!("{}", h.render("    "));
        }
    }
    println!("(latencies in ns; one-way = round trip / 2; the floor is measured in chunks alternating with each size)");
}
