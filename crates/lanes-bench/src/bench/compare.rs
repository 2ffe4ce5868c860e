//! `lanes bench --compare A.json B.json`: two runs side by side, for regression checks.
//! Ratios are B / A; a latency ratio above 1.10 or a throughput ratio below 0.90 is marked
//! `worse`, the opposite `better`.

use std::fmt::Write as _;
use std::path::Path;

use crate::bench::table::{fmt_gbps, fmt_ratio};
use crate::measure::stats::fmt_ns;
use crate::report::Report;
use crate::sizes::fmt_size;

/// Beyond this relative change a figure is marked.
const THRESHOLD: f64 = 0.10;

pub(crate) fn compare(a_path: &Path, b_path: &Path) -> Result<String, String> {
    let a = Report::read_paths_json(a_path)?;
    let b = Report::read_paths_json(b_path)?;
    for (r, p) in [(&a, a_path), (&b, b_path)] {
        if r.rows.is_empty() {
            return Err(format!("{} holds no results", p.display()));
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "lanes bench --compare");
    let _ = writeln!(out, "  A: {}  ({})", a_path.display(), a.machine.title());
    let _ = writeln!(out, "  B: {}  ({})", b_path.display(), b.machine.title());
    if a.machine.cpu_model != b.machine.cpu_model || a.machine.hostname != b.machine.hostname {
        let _ = writeln!(out, "  note: the runs come from different machines");
    }
    let _ = writeln!(out, "  ratios are B / A: latency below 1 and throughput above 1 mean B is faster");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:>8}  {:<14} {:>9} {:>9} {:>6}   {:>9} {:>9} {:>6}   {:>8} {:>8} {:>6}   {:>5} {:>5}",
        "size", "path", "lat A", "lat B", "B/A", "p99 A", "p99 B", "B/A", "GB/s A", "GB/s B", "B/A", "CPU%A", "CPU%B"
    );
    let mut paths = a.keys();
    for p in b.keys() {
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    let mut sizes = a.sizes();
    sizes.extend(b.sizes());
    sizes.sort_unstable();
    sizes.dedup();
    let (mut common, mut worse, mut better) = (0, 0, 0);
    let mut only = Vec::new();
    for &size in &sizes {
        for p in &paths {
            let (x, y) = match (a.get(p, size), b.get(p, size)) {
                (Some(x), Some(y)) => (x, y),
                (Some(_), None) => {
                    only.push(format!("{p} {} only in A", fmt_size(size)));
                    continue;
                }
                (None, Some(_)) => {
                    only.push(format!("{p} {} only in B", fmt_size(size)));
                    continue;
                }
                (None, None) => continue,
            };
            common += 1;
            let lat = y.lat_ns.avg / x.lat_ns.avg;
            let p99 = y.lat_ns.p99 / x.lat_ns.p99;
            let tput = y.value("gbps") / x.value("gbps");
            let mut marks = Vec::new();
            if lat > 1.0 + THRESHOLD || tput < 1.0 - THRESHOLD {
                worse += 1;
                marks.push("worse");
            }
            if lat < 1.0 - THRESHOLD || tput > 1.0 + THRESHOLD {
                better += 1;
                marks.push("better");
            }
            let _ = writeln!(
                out,
                "{:>8}  {:<14} {:>9} {:>9} {:>6}   {:>9} {:>9} {:>6}   {:>8} {:>8} {:>6}   {:>5.0} {:>5.0}  {}",
                fmt_size(size),
                p,
                fmt_ns(x.lat_ns.avg),
                fmt_ns(y.lat_ns.avg),
                fmt_ratio(lat),
                fmt_ns(x.lat_ns.p99),
                fmt_ns(y.lat_ns.p99),
                fmt_ratio(p99),
                fmt_gbps(x.value("gbps")),
                fmt_gbps(y.value("gbps")),
                fmt_ratio(tput),
                x.value("cpu_pct"),
                y.value("cpu_pct"),
                marks.join(" ")
            );
        }
    }
    if common == 0 {
        return Err(format!(
            "{} and {} have no path and size in common (A: {}; B: {})",
            a_path.display(),
            b_path.display(),
            a.keys().join(", "),
            b.keys().join(", ")
        ));
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{common} path-size pairs compared: {worse} worse and {better} better by more than {:.0}% (latency avg or throughput)",
        THRESHOLD * 100.0
    );
    if !only.is_empty() {
        let _ = writeln!(out, "not compared: {}", only.join(", "));
    }
    Ok(out)
}
