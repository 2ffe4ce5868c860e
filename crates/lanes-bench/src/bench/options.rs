//! From the command line to a plan: which paths, which sizes, how long each slice runs.

use std::time::Duration;

use crate::bench::paths::{self, PathDef, Status, Transport, REGISTRY};
use crate::sizes;

/// Default total time of a run.
pub(crate) const DEFAULT_DURATION: Duration = Duration::from_secs(60);
/// `--quick` total time.
pub(crate) const QUICK_DURATION: Duration = Duration::from_secs(15);
/// Runs longer than this go in rounds of [`ROUND`], each covering every path and size.
const LONG_RUN: Duration = Duration::from_secs(120);
const ROUND: Duration = Duration::from_secs(60);
/// Time a run spends outside the slices: starting the peer, calibrating, setting paths up,
/// writing results.
pub(crate) const FIXED_OVERHEAD: Duration = Duration::from_millis(250);
/// Time each (path, size) cell spends outside its slices (control messages, connections,
/// warm-up hand-overs, draining the last messages).
pub(crate) const CELL_OVERHEAD: Duration = Duration::from_millis(10);
/// The shortest useful cell (latency plus throughput, warm-ups included).
pub(crate) const MIN_CELL: Duration = Duration::from_millis(10);
/// Largest message: the rings hold four, on both sides.
pub(crate) const MAX_SIZE: usize = 64 << 20;

/// Default sizes: every power of two from 4 B to 1 MiB.
pub(crate) const DEFAULT_SIZES: &str = "4-1M";
/// `--quick` sizes: every power of four from 4 B to 1 MiB.
pub(crate) const QUICK_SIZES: &str = "4,16,64,256,1K,4K,16K,64K,256K,1M";

/// What a run does.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub paths: Vec<&'static PathDef>,
    pub sizes: Vec<usize>,
    /// Total time asked for.
    pub duration: Duration,
    /// Whether the run goes in rounds until `duration` has passed.
    pub rounds: bool,
    /// The time one round is given (the whole duration unless the run goes in rounds).
    pub round: Duration,
    /// Latency slice per (path, size), warm-up included, as planned; the runner adjusts each
    /// slice to the time actually left, so that stalls on a busy machine do not add up.
    pub lat_slice: Duration,
    /// Throughput slice per (path, size), as planned.
    pub tput_slice: Duration,
    pub cpus: Option<(usize, usize)>,
    pub rt: bool,
    pub quick: bool,
}

impl Plan {
    pub(crate) fn new(
        paths: Vec<&'static PathDef>,
        sizes: Vec<usize>,
        duration: Duration,
        cpus: Option<(usize, usize)>,
        rt: bool,
        quick: bool,
    ) -> Plan {
        let rounds = duration > LONG_RUN;
        let round = if rounds { ROUND } else { duration };
        let cells = (paths.len() * sizes.len()).max(1) as u32;
        let usable = round.saturating_sub(FIXED_OVERHEAD).saturating_sub(CELL_OVERHEAD * cells);
        let cell = (usable / cells).max(MIN_CELL);
        Plan { paths, sizes, duration, rounds, round, lat_slice: cell / 2, tput_slice: cell / 2, cpus, rt, quick }
    }

    /// How long one round should take.
    pub(crate) fn round_estimate(&self) -> Duration {
        let cells = (self.paths.len() * self.sizes.len()) as u32;
        FIXED_OVERHEAD + (self.lat_slice + self.tput_slice + CELL_OVERHEAD) * cells
    }

    pub(crate) fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(8)
    }
}

/// Parses `90`, `30s`, `500ms`, `5m`, `24h`, `1d`, `1h30m`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("bad duration {text:?} (examples: 15s, 90s, 5m, 24h)");
    let s = text.trim();
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return positive(Duration::from_secs(secs), text);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "ms" => n / 1e3,
            "s" | "sec" => n,
            "m" | "min" => n * 60.0,
            "h" => n * 3600.0,
            "d" => n * 86400.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(secs).map_err(|_| bad())?;
    }
    positive(total, text)
}

fn positive(d: Duration, text: &str) -> Result<Duration, String> {
    if d < Duration::from_millis(100) {
        return Err(format!("duration {text:?} is too short (at least 100ms)"));
    }
    if d > Duration::from_secs(366 * 86400) {
        return Err(format!("duration {text:?} is too long (at most a year)"));
    }
    Ok(d)
}

/// Parses and checks message sizes: multiples of 4 from 4 B to 64 MiB, sorted, no repeats.
pub(crate) fn parse_bench_sizes(text: &str) -> Result<Vec<usize>, String> {
    let mut v = sizes::parse_sizes(text)?;
    for &s in &v {
        if s < 4 || s % 4 != 0 || s > MAX_SIZE {
            return Err(format!("bad message size {s}: sizes are multiples of 4 from 4 to 64M"));
        }
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// What `--paths` asked for.
#[derive(Debug)]
pub(crate) enum PathChoice {
    /// `--paths list`: print the registry.
    List,
    Run(Vec<&'static PathDef>),
}

/// Parses `--paths`: `all` (the default), `list`, or names separated by commas.
pub(crate) fn parse_paths(text: Option<&str>) -> Result<PathChoice, String> {
    let local = || REGISTRY.iter().filter(|p| p.transport == Transport::Local);
    let available = || local().filter(|p| p.available()).collect::<Vec<_>>();
    let names = |v: &[&PathDef]| v.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
    let text = match text.map(str::trim) {
        None | Some("all") => return Ok(PathChoice::Run(available())),
        Some("list") => return Ok(PathChoice::List),
        Some(t) => t,
    };
    let mut chosen: Vec<&'static PathDef> = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let def = paths::find(name).filter(|p| p.transport == Transport::Local).ok_or_else(|| {
            let across = if paths::find(name).is_some() { " (it runs with --transport ofi)" } else { "" };
            format!(
                "unknown path {name:?}{across}; paths: {} (see --paths list)",
                local().map(|p| p.name).collect::<Vec<_>>().join(", ")
            )
        })?;
        if let Err(why) = def.setups() {
            return Err(format!("path {name} is not available ({why}); available now: {}", names(&available())));
        }
        if !chosen.iter().any(|c| c.name == def.name) {
            chosen.push(def);
        }
    }
    if chosen.is_empty() {
        return Err("--paths names no path (see --paths list)".into());
    }
    // Registry order, whatever order they were given in.
    chosen.sort_by_key(|c| REGISTRY.iter().position(|r| r.name == c.name));
    Ok(PathChoice::Run(chosen))
}

/// The text of `--paths list`.
pub(crate) fn list_paths() -> String {
    let mut out = String::from(
        "paths of `lanes bench --paths a,b,...` (default: all available; group `ofi`, status `hosts`: between two hosts, with --transport ofi)\n",
    );
    for p in REGISTRY {
        let group = match (p.group, p.transport) {
            (paths::Group::Baseline, _) => "baseline",
            (paths::Group::Lanes, Transport::Local) => "lanes",
            (paths::Group::Lanes, Transport::Ofi) => "ofi",
        };
        let (status, about) = match (p.setups(), p.status) {
            // Measured only by `--transport ofi`, not by `--paths` of a local run.
            (Ok(_), _) if p.transport == Transport::Ofi => ("hosts", p.about.to_string()),
            (Ok(_), _) => ("available", p.about.to_string()),
            (Err(why), Status::Pending(_)) => ("not yet", format!("{} ({why})", p.about)),
            (Err(why), _) => ("not here", format!("{} (not available: {why})", p.about)),
        };
        out.push_str(&format!("  {:<15} {:<9} {:<10} {about}\n", p.name, group, status));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("24h").unwrap(), Duration::from_secs(86400));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        for bad in ["", "s", "10x", "-5s", "0", "0s", "1ms", "h1"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_and_paths() {
        assert_eq!(parse_bench_sizes("64,4,64").unwrap(), vec![4, 64]);
        assert_eq!(parse_bench_sizes(DEFAULT_SIZES).unwrap().len(), 19);
        assert!(parse_bench_sizes("6").is_err());
        assert!(parse_bench_sizes("0").is_err());
        assert!(parse_bench_sizes("128M").is_err());
        let PathChoice::Run(p) = parse_paths(Some("tcp,floor")).unwrap() else { panic!() };
        assert_eq!(p.iter().map(|p| p.name).collect::<Vec<_>>(), ["floor", "tcp"]);
        if let Err(e) = parse_paths(Some("sockets")) {
            assert!(e.contains("not available"), "{e}");
        }
        assert!(parse_paths(Some("bogus")).unwrap_err().contains("unknown path"));
        assert!(matches!(parse_paths(Some("list")).unwrap(), PathChoice::List));
        assert!(list_paths().contains("data-interrupt"));
        assert!(parse_paths(Some("ofi-pio")).unwrap_err().contains("--transport ofi"));
        let PathChoice::Run(all) = parse_paths(None).unwrap() else { panic!() };
        assert!(all.iter().all(|p| p.transport == Transport::Local));
    }

    #[test]
    fn budget_fits_the_duration() {
        let PathChoice::Run(p) = parse_paths(None).unwrap() else { panic!() };
        let plan = Plan::new(p, parse_bench_sizes(DEFAULT_SIZES).unwrap(), DEFAULT_DURATION, None, false, false);
        assert!(!plan.rounds);
        let est = plan.round_estimate();
        assert!(est <= DEFAULT_DURATION + Duration::from_millis(100) && est > DEFAULT_DURATION / 2, "{est:?}");
        let long = Plan::new(plan.paths.clone(), plan.sizes.clone(), Duration::from_secs(86400), None, false, false);
        assert!(long.rounds);
    }
}
