//! The terminal report: one row per size and path, ratios against the baselines, the worst
//! cases, and with `--hist` a latency histogram per path and size.

use std::fmt::Write as _;

use crate::bench::facts::{FloorCheck, RemoteRun, RunInfo, Target, DMA_SIZE};
use crate::bench::paths::{self, Group};
use crate::bench::runner::Measured;
use crate::measure::clock::ticks_to_ns;
use crate::measure::stats::fmt_ns;
use crate::measure::stats::Histogram;
use crate::report::Report;
use crate::sizes::fmt_size;

/// Baselines every other path is compared with, in column order (a run has either the
/// local ones or, across hosts, libfabric's `fi_pingpong` and `iperf3`).
const BASELINES: [&str; 5] = ["floor", "tcp", "unix", "fi_pingpong", "iperf3"];

/// Latency target across hosts: Lanes one-way average at most this times fi_pingpong's.
pub(crate) const LATENCY_LIMIT: f64 = 1.2;
/// Bandwidth target across hosts: Lanes DMA at least this share of the better baseline.
pub(crate) const BANDWIDTH_LIMIT: f64 = 0.9;

/// A figure, or `-` where the row has none (a baseline that reports only an average, a
/// path that measures one kind only).
fn or_dash(v: f64, f: impl Fn(f64) -> String) -> String {
    if v > 0.0 && v.is_finite() {
        f(v)
    } else {
        "-".into()
    }
}

fn is_lanes_path(name: &str) -> bool {
    paths::find(name).is_some_and(|d| d.group == Group::Lanes)
}

/// `0.97x`, `12.3x`, `218x`.
pub(crate) fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() || r <= 0.0 {
        "-".into()
    } else if r >= 100.0 {
        format!("{r:.0}x")
    } else if r >= 10.0 {
        format!("{r:.1}x")
    } else {
        format!("{r:.2}x")
    }
}

/// GB/s with three significant digits or so.
pub(crate) fn fmt_gbps(g: f64) -> String {
    if g >= 100.0 {
        format!("{g:.0}")
    } else if g >= 10.0 {
        format!("{g:.1}")
    } else if g >= 0.01 {
        format!("{g:.3}")
    } else {
        format!("{g:.5}")
    }
}

/// The table.
pub(crate) fn render(r: &Report) -> String {
    let mut out = String::new();
    let paths = r.keys();
    let run: RunInfo = r.run_as();
    let baselines: Vec<&str> = BASELINES.iter().copied().filter(|b| paths.iter().any(|p| p == b)).collect();
    let ratios = !baselines.is_empty() && paths.iter().any(|p| is_lanes_path(p));
    let cpus = match run.cpus {
        Some([a, b]) => format!("cpus {a},{b}"),
        None => "unpinned".into(),
    };
    let _ = writeln!(
        out,
        "lanes bench: {} x {} sizes in {:.0} s{}, {cpus}{}",
        paths.join(", "),
        r.sizes().len(),
        run.elapsed_s,
        if run.rounds > 1 { format!(" ({} rounds)", run.rounds) } else { String::new() },
        if run.interrupted { ", interrupted" } else { "" }
    );
    let _ = writeln!(out, "machine: {} ({})", r.machine.title(), r.machine.hostname);
    let _ = writeln!(
        out,
        "latency: one-way = round trip / 2.  GB/s = 1e9 bytes/s of payload, one way, receiver copying out.  \
         CPU%: both processes, 100 = one core."
    );
    if ratios {
        let _ = writeln!(
            out,
            "ratios: times better than the baseline (latency: baseline / path; throughput: path / baseline)."
        );
    }
    let _ = writeln!(out);
    if let Some(remote) = r.detail_as::<RemoteRun>("remote") {
        let streams = if run.paths.iter().any(|p| p == "iperf3") {
            format!(", DMA and iperf3 {} s each", remote.stream_secs)
        } else {
            String::new()
        };
        let fi = match remote.fi_pingpong_iters {
            0 => "fi_pingpong as many round trips as the Lanes paths per slice".to_string(),
            n => format!("fi_pingpong -I {n} (fewer above 52 KiB)"),
        };
        let _ = writeln!(
            out,
            "across hosts: node {} -> node {} ({}) over {}, provider {}, progress {}; {} round(s); {fi}{streams}",
            remote.client_node,
            remote.remote_node,
            remote.address,
            remote.transport,
            remote.provider,
            remote.progress,
            remote.rounds,
        );
    }
    let mut header = format!(
        "{:>8}  {:<14} {:>9} {:>9} {:>9} {:>9}  {:>8} {:>9} {:>5}",
        "size", "path", "lat avg", "p50", "p99", "max", "GB/s", "Mmsg/s", "CPU%"
    );
    if ratios {
        let group = |title: &str| {
            let w = baselines.len() * 7 - 1;
            format!("  {title:^w$}")
        };
        let pre = " ".repeat(header.len());
        let _ = writeln!(out, "{pre}{}{}", group("latency vs"), group("throughput vs"));
        for _ in 0..2 {
            header.push(' ');
            for b in &baselines {
                let _ = write!(header, " {b:>6}");
            }
        }
    }
    let _ = writeln!(out, "{header}");
    for size in r.sizes() {
        let mut first = true;
        for p in &paths {
            let Some(x) = r.get(p, size) else { continue };
            let l = &x.lat_ns;
            let _ = write!(
                out,
                "{:>8}  {:<14} {:>9} {:>9} {:>9} {:>9}  {:>8} {:>9} {:>5}",
                if first { fmt_size(size) } else { String::new() },
                p,
                or_dash(l.avg, fmt_ns),
                or_dash(l.p50, fmt_ns),
                or_dash(l.p99, fmt_ns),
                or_dash(l.max, fmt_ns),
                or_dash(x.value("gbps"), fmt_gbps),
                or_dash(x.value("msgs_per_s"), |m| format!("{:.3}", m / 1e6)),
                or_dash(x.value("cpu_pct"), |c| format!("{c:.0}"))
            );
            first = false;
            if ratios && is_lanes_path(p) {
                out.push(' ');
                for b in &baselines {
                    let v = r.get(b, size).map_or(f64::NAN, |base| base.lat_ns.avg / l.avg);
                    let _ = write!(out, " {:>6}", fmt_ratio(v));
                }
                out.push(' ');
                for b in &baselines {
                    let v = r.get(b, size).map_or(f64::NAN, |base| x.value("gbps") / base.value("gbps"));
                    let _ = write!(out, " {:>6}", fmt_ratio(v));
                }
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "worst one-way latency observed, per path:");
    for p in &paths {
        let worst = r
            .rows
            .iter()
            .filter(|x| &x.key == p && x.lat_ns.max > 0.0)
            .max_by(|a, b| a.lat_ns.max.total_cmp(&b.lat_ns.max));
        if let Some(w) = worst {
            let samples: u64 = r.rows.iter().filter(|x| &x.key == p).map(|x| x.lat_ns.samples).sum();
            let _ = writeln!(
                out,
                "  {:<14} {:>9} at {} (size {}), {} round trips in all",
                p,
                fmt_ns(w.lat_ns.max),
                w.lat_ns.max_at,
                fmt_size(w.size()),
                samples
            );
        }
    }
    if let Some(f) = r.detail_as::<FloorCheck>("floor_check") {
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", floor_check_line(&f));
    }
    if let Some(t) = r.detail_as::<Vec<Target>>("targets") {
        out.push_str(&render_targets(&t));
    }
    out
}

/// The targets of a run across hosts (docs/design/multi-host.md, section 13): per size and
/// Lanes latency path, its one-way average over fi_pingpong's (at most 1.2); the DMA
/// bandwidth over the better of fi_pingpong's at 1 MiB and iperf3's (at least 0.9).
pub(crate) fn targets(r: &Report) -> Vec<Target> {
    let mut v = Vec::new();
    let lanes_paths: Vec<String> = r.keys().into_iter().filter(|p| is_lanes_path(p)).collect();
    for size in r.sizes() {
        let Some(fi) = r.get("fi_pingpong", size).filter(|f| f.lat_ns.avg > 0.0) else { continue };
        for p in &lanes_paths {
            let Some(x) = r.get(p, size).filter(|x| x.lat_ns.samples > 0) else { continue };
            let ratio = x.lat_ns.avg / fi.lat_ns.avg;
            v.push(Target {
                path: p.clone(),
                size,
                figure: "latency".into(),
                lanes: x.lat_ns.avg,
                baseline: "fi_pingpong".into(),
                baseline_value: fi.lat_ns.avg,
                ratio,
                limit: LATENCY_LIMIT,
                met: ratio <= LATENCY_LIMIT,
            });
        }
    }
    let size = DMA_SIZE;
    let fi = r.get("fi_pingpong", size).map_or(0.0, |f| f.value("gbps"));
    let iperf = r.get("iperf3", size).map_or(0.0, |f| f.value("gbps"));
    let (name, best) = if fi >= iperf { ("fi_pingpong", fi) } else { ("iperf3", iperf) };
    for p in &lanes_paths {
        let Some(x) = r.get(p, size).filter(|x| x.lat_ns.samples == 0 && x.value("gbps") > 0.0) else { continue };
        if best > 0.0 {
            let ratio = x.value("gbps") / best;
            v.push(Target {
                path: p.clone(),
                size,
                figure: "bandwidth".into(),
                lanes: x.value("gbps"),
                baseline: name.into(),
                baseline_value: best,
                ratio,
                limit: BANDWIDTH_LIMIT,
                met: ratio >= BANDWIDTH_LIMIT,
            });
        }
    }
    v
}

/// The targets as lines under the table.
pub(crate) fn render_targets(t: &[Target]) -> String {
    let mut out = String::new();
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "targets: latency = Lanes one-way avg / fi_pingpong's (at most {LATENCY_LIMIT}); bandwidth = Lanes DMA / \
         max(fi_pingpong at 1 MiB, iperf3) (at least {BANDWIDTH_LIMIT})"
    );
    let _ = writeln!(
        out,
        "{:>8}  {:<14} {:>10} {:>12} {:>12} {:>7}  target",
        "size", "path", "figure", "lanes", "baseline", "ratio"
    );
    for x in t {
        let (lanes, base, limit) = if x.figure == "latency" {
            (fmt_ns(x.lanes), format!("{} {}", fmt_ns(x.baseline_value), ""), format!("<= {}", x.limit))
        } else {
            (
                format!("{} GB/s", fmt_gbps(x.lanes)),
                format!("{} GB/s", fmt_gbps(x.baseline_value)),
                format!(">= {}", x.limit),
            )
        };
        let _ = writeln!(
            out,
            "{:>8}  {:<14} {:>10} {:>12} {:>12} {:>7.3}  {limit} {} ({})",
            fmt_size(x.size),
            x.path,
            x.figure,
            lanes,
            base.trim_end(),
            x.ratio,
            if x.met { "met" } else { "MISSED" },
            x.baseline
        );
    }
    if t.is_empty() {
        let _ = writeln!(out, "  (no Lanes figure had a baseline to compare with)");
    }
    out
}

/// The `--check-floor` verdict.
pub(crate) fn floor_check_line(f: &FloorCheck) -> String {
    let mut s = format!(
        "floor vs independent spin: {:.2}x (floor {:.1} ns, independent {:.1} ns one-way avg at {} B; medians of {} alternating runs)",
        f.ratio, f.floor_ns, f.independent_ns, f.size, f.runs
    );
    if !f.steady() {
        s.push_str(&format!(
            "\n  unsteady: runs of one kind varied up to {:.1}x, so the machine was busy; rerun on a quiet machine",
            f.spread
        ));
    }
    s
}

/// `--hist`: per path and size, the best, average and worst round trip, percentiles, and
/// the distribution (one-way, ns).
pub(crate) fn render_histograms(m: &Measured) -> String {
    let mut out = String::new();
    let r = m.report();
    for (pi, def) in m.plan.paths.iter().enumerate() {
        let _ = writeln!(out, "\n{} latency histograms (one-way):", def.name);
        for (si, &size) in m.plan.sizes.iter().enumerate() {
            let c = &m.cells[pi][si];
            let Some(x) = r.get(def.name, size) else { continue };
            let l = &x.lat_ns;
            let _ = writeln!(
                out,
                "  {}: best {}, average {}, worst {} (at {}); p50 {}, p99 {}, p99.9 {}; {} round trips",
                fmt_size(size),
                fmt_ns(l.min),
                fmt_ns(l.avg),
                fmt_ns(l.max),
                l.max_at,
                fmt_ns(l.p50),
                fmt_ns(l.p99),
                fmt_ns(l.p999),
                l.samples
            );
            let h = Histogram::from_weighted(c.lat.buckets().map(|(t, n)| (ticks_to_ns(t) / 2.0, n)));
            out.push_str(&h.render("    "));
        }
    }
    out
}
