//! `lanes pingpong --mode reflective --nodes N`: one writer and N-1 receivers that each
//! acknowledge, as the seed measures reflective memory (0.99 us for 3 nodes, 1.27 us for 8),
//! for every group size from 2 to N.
//!
//! The writer stores a round number into the group; each receiver, spinning on its read
//! map, stores the same number into its own acknowledgement line; the round ends when the
//! writer has seen every acknowledgement. One-way latency is reported as round trip / 2.

use std::time::Duration;

use lanes::{Fabric, Timeout};
use serde::{Deserialize, Serialize};

use crate::measure::clock::{self, now_ticks, ticks_to_ns};
use crate::measure::stats::LatencySummary;
use crate::measure::{affinity, peer::Peer};
use crate::report::{Machine, Report, Row};

/// Round number, written by the writer.
const ROUND: usize = 0;
/// Receiver k acknowledges at `ACK + 64 * k`, each on its own cache line.
const ACK: usize = 64;

/// Spins a receiver or the writer does between checks that the others still live.
const SPINS_PER_CHECK: u32 = 1 << 14;

/// How a run was made: the report's `run`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Run {
    /// CPUs this process may use.
    cpus: usize,
    /// Measured rounds per group size.
    rounds: usize,
    /// The largest group measured.
    nodes: usize,
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "reflective";

const UNITS: [(&str, &str); 4] = [
    ("lat_ns", "one-way latency in ns: time until every receiver acknowledged / 2"),
    ("detail.nodes", "members of the group: one writer, nodes - 1 receivers"),
    ("detail.rtt_ns", "the whole round in ns"),
    ("detail.oversubscribed", "more spinning processes than CPUs: the figures measure the scheduler"),
];

fn group_id() -> u32 {
    0x5246_0000 | (std::process::id() & 0xFFFF)
}

/// Spins until `ready`, yielding when the processes outnumber the CPUs; fails when `lost`.
fn spin(mut ready: impl FnMut() -> bool, lost: impl Fn() -> bool, share_cpu: bool) -> Result<(), String> {
    let mut n = 0u32;
    while !ready() {
        n = n.wrapping_add(1);
        if share_cpu {
            std::thread::yield_now();
        }
        if n % SPINS_PER_CHECK == 0 && lost() {
            return Err("a member of the group is gone".into());
        }
    }
    Ok(())
}

/// Measures groups of 2..=`max_nodes` members for `rounds` rounds each.
pub fn run(fabric: &Fabric, max_nodes: usize, rounds: usize, warmup: usize) -> Result<Report, String> {
    if !(2..=16).contains(&max_nodes) {
        return Err(format!("--nodes {max_nodes}: a group has 2 to 16 members here"));
    }
    let mut report = Report::new(BENCHMARK, Machine::this(std::time::SystemTime::now()));
    report.set_units(UNITS);
    clock::calibrate();
    let cpus = affinity::allowed_cpus();
    let _ = affinity::pin_to(cpus[0]);
    for n in 2..=max_nodes {
        let share_cpu = n > cpus.len();
        let group = group_id();
        let g = fabric
            .create_reflective_group(group, (ACK + 64 * n) as u64, &[])
            .map_err(|e| format!("creating the group: {e}"))?;
        let total = rounds + warmup;
        let mut peers = Vec::new();
        let mut node = fabric.node_id();
        for k in 0..n - 1 {
            node = node.next_after();
            let mut args = vec![
                "reflective-peer".to_string(),
                "--group".into(),
                group.to_string(),
                "--index".into(),
                k.to_string(),
                "--rounds".into(),
                total.to_string(),
            ];
            if share_cpu {
                args.push("--share-cpu".into());
            }
            if let Some(&c) = cpus.get(1 + k % (cpus.len().max(2) - 1)) {
                args.push("--cpu".into());
                args.push(c.to_string());
            }
            let env = [("LANES_NODE_ID", node.to_string()), ("LANES_DIR", fabric.dir().display().to_string())];
            peers.push(
                Peer::spawn("reflective receiver", &args, &env).map_err(|e| format!("starting a receiver: {e}"))?,
            );
        }
        // Wait until every receiver joined.
        let start = std::time::Instant::now();
        while g.members().len() < n - 1 {
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("only {} of {} receivers joined", g.members().len(), n - 1));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let (w, r) = (g.write_map(), g.read_map());
        let lost = || g.members().len() < n - 1;
        let mut ticks = Vec::with_capacity(total);
        for round in 1..=total as u64 {
            let t0 = now_ticks();
            w.store_release_u64(ROUND, round).map_err(|e| e.to_string())?;
            for k in 0..n - 1 {
                spin(|| r.load_acquire_u64(ACK + 64 * k).is_ok_and(|v| v == round), lost, share_cpu)?;
            }
            ticks.push(now_ticks().wrapping_sub(t0));
        }
        for p in peers {
            p.finish(Duration::from_secs(10))?;
        }
        drop(g);
        let mut rtt: Vec<f64> = ticks[warmup..].iter().map(|&t| ticks_to_ns(t)).collect();
        let rtt = LatencySummary::from_samples(&mut rtt);
        report.rows.push(
            Row::new("reflective")
                .with_lat(rtt.scaled(0.5))
                .with_detail("nodes", &n)
                .with_detail("rtt_ns", &rtt)
                .with_detail("oversubscribed", &share_cpu),
        );
    }
    report.set_run(&Run { cpus: cpus.len(), rounds, nodes: max_nodes });
    Ok(report)
}

/// A receiver: acknowledges every round, then leaves.
pub fn run_peer(
    fabric: &Fabric,
    group: u32,
    index: usize,
    rounds: u64,
    cpu: Option<usize>,
    share_cpu: bool,
) -> Result<(), String> {
    if let Some(c) = cpu {
        let _ = affinity::pin_to(c);
    }
    let m = fabric
        .join_reflective_group(group, Timeout::After(Duration::from_secs(10)))
        .map_err(|e| format!("joining group {group}: {e}"))?;
    let (r, w) = (m.read_map(), m.write_map());
    let lost = || m.segment().check().is_err();
    for round in 1..=rounds {
        spin(|| r.load_acquire_u64(ROUND).is_ok_and(|v| v >= round), lost, share_cpu)?;
        w.store_release_u64(ACK + 64 * index, round).map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub fn print_table(r: &Report) {
    let run: Run = r.run_as();
    println!(
        "lanes pingpong: reflective memory, one writer and N-1 acknowledging receivers, {} rounds per group size, {} CPUs",
        run.rounds, run.cpus
    );
    println!("{:>6}  {:>10} {:>10} {:>10} {:>10} {:>12}", "nodes", "1-way avg", "min", "p50", "p99", "max");
    let oversubscribed = |g: &Row| g.detail_as::<bool>("oversubscribed").unwrap_or(false);
    for g in &r.rows {
        let o = &g.lat_ns;
        println!(
            "{:>6}  {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>12.1}{}",
            g.detail_as::<usize>("nodes").unwrap_or(0),
            o.avg,
            o.min,
            o.p50,
            o.p99,
            o.max,
            if oversubscribed(g) { "  (more processes than CPUs: scheduling dominates)" } else { "" }
        );
    }
    println!("(ns; one-way = time until every receiver acknowledged / 2; the seed reports 990 ns for 3 nodes, 1270 ns for 8)");
    if r.rows.iter().any(oversubscribed) {
        println!(
            "note: with {} CPUs, groups of more than {} processes take turns on the CPUs, so their latency measures the scheduler, not the fabric",
            run.cpus, run.cpus
        );
    }
}
