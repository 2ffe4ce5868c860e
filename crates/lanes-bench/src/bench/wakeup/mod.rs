//! `lanes pingpong --mode interrupt|data-interrupt`: how fast one node wakes a thread of
//! another, with a spinning waiter and with a sleeping one, against the floor and the
//! kernel's sleeping wake-ups (eventfd, pipe, Unix datagram) measured in the same run.
//!
//! Each Lanes variant runs against its own peer process (this binary re-executed as a
//! `wakeup-peer`), whose interrupt echoes every trigger back. All paths are measured in
//! rounds, each round running every path once, so drift on a shared host hits all alike.

pub mod kernel;

use std::time::Duration;

use lanes::{Fabric, LocalDataInterrupt, LocalInterrupt, RemoteDataInterrupt, RemoteInterrupt, Timeout};
use serde::{Deserialize, Serialize};

use crate::measure::clock::{self, now_ticks, ticks_to_ns};
use crate::measure::stats::{Histogram, LatencySummary};
use crate::measure::{affinity, peer::Peer};
use crate::report::{Machine, Report, Row};
use kernel::Baseline;

/// Which kind of interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Interrupt,
    DataInterrupt,
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    /// Payload sizes (data interrupts only).
    pub sizes: Vec<usize>,
    pub iterations: usize,
    pub warmup: usize,
    pub cpus: Option<(usize, usize)>,
    /// Spin time of the spinning variant; 0 measures only the sleeping one.
    pub poll_us: u64,
    pub histograms: bool,
}

/// How a run was made: the report's `run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Run {
    mode: Mode,
    node: u32,
    remote_node: u32,
    /// CPUs of the client and the peers; none when unpinned.
    cpus: Option<(usize, usize)>,
    /// Round trips per path and size, over every round.
    iterations: usize,
    /// Spin time of the spinning variant, us.
    poll_us: u64,
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "wakeup";

const UNITS: [(&str, &str); 6] = [
    ("lat_ns", "one-way latency in ns: round trip / 2"),
    ("ratio", "average round trip over the baseline's (detail.baseline): spinning against the floor, sleeping against the kernel's sleeping wake-up of the same kind"),
    ("detail.ratio_p50", "the same ratio of medians"),
    ("detail.rtt_ns", "round-trip latency in ns"),
    ("detail.histogram", "with --hist: one-way latency buckets, [upper edge in ns, count]"),
    ("size", "payload bytes (data interrupts); interrupts carry none and have no size"),
];

const ROUNDS: usize = 5;
const T: Timeout = Timeout::After(Duration::from_secs(10));

/// Our own interrupt of a variant, before the peer's is connected.
enum Mine {
    Plain(LocalInterrupt),
    Data(LocalDataInterrupt),
}

/// The client's end of one Lanes variant: our interrupt, the peer's, and the peer process.
enum Pair {
    Plain { mine: LocalInterrupt, theirs: RemoteInterrupt },
    Data { mine: LocalDataInterrupt, theirs: RemoteDataInterrupt },
}

struct Variant {
    key: &'static str,
    label: String,
    pair: Pair,
    peer: Peer,
}

impl Variant {
    fn start(fabric: &Fabric, opts: &Options, key: &'static str, poll: Duration, tag: u32) -> Result<Variant, String> {
        let peer_node = fabric.node_id().next_after().get();
        let number = 0x4000_0000 | (std::process::id() << 2) | tag;
        let e = |e: lanes::Error| e.to_string();
        // Our interrupt first (the peer connects to it), the connection to the peer's after
        // the peer has started.
        let mine = match opts.mode {
            Mode::Interrupt => {
                let m = fabric.create_interrupt(None).map_err(e)?;
                m.set_poll_time(poll);
                Mine::Plain(m)
            }
            Mode::DataInterrupt => {
                let m = fabric.create_data_interrupt(None).map_err(e)?;
                m.set_poll_time(poll);
                Mine::Data(m)
            }
        };
        let mine_no = match &mine {
            Mine::Plain(m) => m.number(),
            Mine::Data(m) => m.number(),
        };
        let mut args = vec![
            "wakeup-peer".to_string(),
            "--mode".into(),
            match opts.mode {
                Mode::Interrupt => "interrupt".into(),
                Mode::DataInterrupt => "data-interrupt".into(),
            },
            "--client-node".into(),
            fabric.node_id().get().to_string(),
            "--client-number".into(),
            mine_no.to_string(),
            "--number".into(),
            number.to_string(),
            "--poll-us".into(),
            poll.as_micros().to_string(),
        ];
        if let Some((_, b)) = opts.cpus {
            args.push("--cpu".into());
            args.push(b.to_string());
        }
        let env = [("LANES_NODE_ID", peer_node.to_string()), ("LANES_DIR", fabric.dir().display().to_string())];
        let peer = Peer::spawn("wake-up peer", &args, &env).map_err(|e| format!("starting the peer: {e}"))?;
        let pair = match mine {
            Mine::Plain(mine) => {
                Pair::Plain { theirs: fabric.connect_interrupt(peer_node, number, T).map_err(e)?, mine }
            }
            Mine::Data(mine) => {
                Pair::Data { theirs: fabric.connect_data_interrupt(peer_node, number, T).map_err(e)?, mine }
            }
        };
        let what = match opts.mode {
            Mode::Interrupt => "interrupt",
            Mode::DataInterrupt => "data interrupt",
        };
        let label = if poll.is_zero() {
            format!("{what}, sleeping waiter")
        } else {
            format!("{what}, spinning waiter ({} us)", poll.as_micros())
        };
        Ok(Variant { key, label, pair, peer })
    }

    fn round_trips(&self, size: usize, n: usize, payload: &[u8], buf: &mut [u8]) -> Result<Vec<u64>, String> {
        let mut ticks = Vec::with_capacity(n);
        let e = |e: lanes::Error| e.to_string();
        for _ in 0..n {
            let t0 = now_ticks();
            match &self.pair {
                Pair::Plain { mine, theirs } => {
                    theirs.trigger().map_err(e)?;
                    mine.wait(T).map_err(e)?;
                }
                Pair::Data { mine, theirs } => {
                    theirs.trigger(&payload[..size], T).map_err(e)?;
                    let got = mine.wait(buf, T).map_err(e)?;
                    if got != size {
                        return Err(format!("echo of {got} bytes for a {size}-byte message"));
                    }
                }
            }
            ticks.push(now_ticks().wrapping_sub(t0));
        }
        Ok(ticks)
    }
}

/// Runs every path and returns the report.
pub fn run_client(fabric: &Fabric, opts: &Options) -> Result<Report, String> {
    let started = std::time::SystemTime::now();
    clock::calibrate();
    let sizes: Vec<usize> = match opts.mode {
        Mode::Interrupt => vec![0],
        Mode::DataInterrupt => opts.sizes.clone(),
    };
    if let Some(&s) = sizes.iter().find(|&&s| s > lanes::MAX_DATA_INTERRUPT_PAYLOAD) {
        return Err(format!("data interrupts carry at most {} bytes, not {s}", lanes::MAX_DATA_INTERRUPT_PAYLOAD));
    }
    if let Some((a, _)) = opts.cpus {
        affinity::pin_to(a).map_err(|e| format!("pinning to cpu {a}: {e}"))?;
    }
    let mut variants = Vec::new();
    if opts.poll_us > 0 {
        variants.push(Variant::start(fabric, opts, "spin", Duration::from_micros(opts.poll_us), 0)?);
    }
    variants.push(Variant::start(fabric, opts, "sleep", Duration::ZERO, 1)?);
    let child_cpu = opts.cpus.map(|c| c.1);
    let payload: Vec<u8> = (0..lanes::MAX_DATA_INTERRUPT_PAYLOAD).map(|i| (i * 7 + 3) as u8).collect();
    let mut buf = vec![0u8; lanes::MAX_DATA_INTERRUPT_PAYLOAD];
    let per_round = opts.iterations.div_ceil(ROUNDS).max(1);
    let mut report = Report::new(BENCHMARK, Machine::this(started));
    report.set_units(UNITS);
    for &size in &sizes {
        let baselines: Vec<Baseline> = [Baseline::Spin, Baseline::Eventfd, Baseline::Pipe, Baseline::UnixDatagram]
            .into_iter()
            .filter(|b| *b == Baseline::Spin || b.carries(size.max(1)))
            .collect();
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); variants.len() + baselines.len()];
        for v in &variants {
            v.round_trips(size, opts.warmup.max(1), &payload, &mut buf)?;
        }
        for _ in 0..ROUNDS {
            for (i, v) in variants.iter().enumerate() {
                samples[i].extend(v.round_trips(size, per_round, &payload, &mut buf)?.iter().map(|&t| ticks_to_ns(t)));
            }
            for (j, b) in baselines.iter().enumerate() {
                let bsize = if *b == Baseline::Spin { 8 } else { size };
                let t = kernel::round_trips(*b, bsize, per_round, child_cpu)
                    .map_err(|e| format!("{} baseline: {e}", b.name()))?;
                samples[variants.len() + j].extend(t.iter().map(|&t| ticks_to_ns(t)));
            }
        }
        let mut rows: Vec<Row> = Vec::new();
        let mut rtts: Vec<LatencySummary> = Vec::new();
        let names: Vec<(String, String)> = variants
            .iter()
            .map(|v| (v.key.to_string(), v.label.clone()))
            .chain(baselines.iter().map(|b| (b.key().to_string(), b.name().to_string())))
            .collect();
        for ((key, label), mut s) in names.iter().zip(samples) {
            let hist = opts.histograms.then(|| Histogram::from_samples(&s));
            let rtt = LatencySummary::from_samples(&mut s);
            let mut row = Row::new(key.as_str()).with_title(label.as_str()).with_lat(rtt.scaled(0.5));
            if opts.mode == Mode::DataInterrupt {
                row.size = Some(size);
            }
            row.set_detail("rtt_ns", &rtt);
            if let Some(h) = hist {
                let halved = Histogram {
                    buckets: h.buckets.iter().map(|&(e, c)| (if e == f64::MAX { e } else { e / 2.0 }, c)).collect(),
                };
                row.set_detail("histogram", &halved);
            }
            rtts.push(rtt);
            rows.push(row);
        }
        // Ratios: spinning against the floor, sleeping against the kernel's sleeping wake-up
        // of the same kind (eventfd for a bare interrupt, a datagram for a message).
        let stats: Vec<(f64, f64)> = rtts.iter().map(|r| (r.avg, r.p50)).collect();
        let base_of = |key: &str| names.iter().position(|(k, _)| k == key).map(|i| stats[i]);
        let sleeping_base = if opts.mode == Mode::Interrupt { "eventfd" } else { "unix-dgram" };
        for (i, (key, _)) in names.iter().enumerate() {
            let base = match key.as_str() {
                "spin" => Some("floor"),
                "sleep" => Some(sleeping_base),
                _ => None,
            };
            if let Some(b) = base {
                if let Some((bavg, bp50)) = base_of(b) {
                    rows[i].ratio = Some(rtts[i].avg / bavg.max(1e-9));
                    rows[i].set_detail("baseline", &b);
                    rows[i].set_detail("ratio_p50", &(rtts[i].p50 / bp50.max(1e-9)));
                }
            }
        }
        report.rows.extend(rows);
    }
    let remote_node = fabric.node_id().next_after().get();
    for v in variants {
        let Variant { pair, peer, .. } = v;
        drop(pair); // removing our interrupt ends the peer
        peer.finish(Duration::from_secs(10))?;
    }
    report.set_run(&Run {
        mode: opts.mode,
        node: fabric.node_id().get(),
        remote_node,
        cpus: opts.cpus,
        iterations: per_round * ROUNDS,
        poll_us: opts.poll_us,
    });
    Ok(report)
}

/// The peer: echoes every trigger (and payload) back until the client goes away.
pub fn run_peer(
    fabric: &Fabric,
    mode: Mode,
    client_node: u32,
    client_number: u32,
    number: u32,
    poll: Duration,
    cpu: Option<usize>,
) -> Result<(), String> {
    if let Some(c) = cpu {
        affinity::pin_to(c).map_err(|e| format!("pinning to cpu {c}: {e}"))?;
    }
    let e = |e: lanes::Error| e.to_string();
    let idle = Timeout::After(Duration::from_millis(500));
    match mode {
        Mode::Interrupt => {
            let mine = fabric.create_interrupt(Some(number)).map_err(e)?;
            mine.set_poll_time(poll);
            let client = fabric.connect_interrupt(client_node, client_number, T).map_err(e)?;
            loop {
                match mine.wait(idle) {
                    Ok(()) => {
                        if client.trigger().is_err() {
                            return Ok(());
                        }
                    }
                    Err(lanes::Error::Timeout { .. }) if client.check().is_ok() => {}
                    Err(lanes::Error::Timeout { .. }) => return Ok(()),
                    Err(other) => return Err(other.to_string()),
                }
            }
        }
        Mode::DataInterrupt => {
            let mine = fabric.create_data_interrupt(Some(number)).map_err(e)?;
            mine.set_poll_time(poll);
            let client = fabric.connect_data_interrupt(client_node, client_number, T).map_err(e)?;
            let mut buf = vec![0u8; lanes::MAX_DATA_INTERRUPT_PAYLOAD];
            loop {
                match mine.wait(&mut buf, idle) {
                    Ok(n) => {
                        if client.trigger(&buf[..n], T).is_err() {
                            return Ok(());
                        }
                    }
                    Err(lanes::Error::Timeout { .. }) if client.check().is_ok() => {}
                    Err(lanes::Error::Timeout { .. }) => return Ok(()),
                    Err(other) => return Err(other.to_string()),
                }
            }
        }
    }
}

/// Prints the report as a table (and the histograms, when measured).
pub fn print_table(r: &Report) {
    let Ok(run) = serde_json::from_value::<Run>(serde_json::Value::Object(r.run.clone())) else {
        return;
    };
    let cpus = match run.cpus {
        Some((a, b)) => format!("cpus {a},{b}"),
        None => "unpinned".into(),
    };
    let what = match run.mode {
        Mode::Interrupt => "interrupt",
        Mode::DataInterrupt => "data interrupt",
    };
    println!(
        "lanes pingpong: {what}, node {} <-> node {}, {cpus}, {} round trips per path in {ROUNDS} alternating rounds",
        run.node, run.remote_node, run.iterations
    );
    println!(
        "{:<36} {:>6}  {:>9} {:>9} {:>9} {:>9} {:>9} {:>10}  vs",
        "path", "size", "1-way avg", "min", "p50", "p99", "p99.9", "max"
    );
    for p in &r.rows {
        let o = &p.lat_ns;
        let vs = match (p.ratio, p.detail_as::<String>("baseline"), p.detail_as::<f64>("ratio_p50")) {
            (Some(avg), Some(b), Some(p50)) => format!("{avg:.2}x {b} (avg), {p50:.2}x (p50)"),
            _ => String::new(),
        };
        let size = p.size.map_or("-".to_string(), |s| s.to_string());
        println!(
            "{:<36} {:>6}  {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1}  {vs}",
            p.title.as_deref().unwrap_or(&p.key),
            size,
            o.avg,
            o.min,
            o.p50,
            o.p99,
            o.p999,
            o.max
        );
        if let Some(h) = p.detail_as::<Histogram>("histogram") {
            print!("{}", h.render("    "));
        }
    }
    println!("(one-way latency in ns = round trip / 2; kernel paths are sleeping wake-ups between two processes)");
}
