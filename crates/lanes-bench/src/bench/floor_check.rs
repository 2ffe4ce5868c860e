//! `--check-floor`: the floor path against `lanes-spin-floor`, a two-process spin written
//! without Lanes, in alternating runs in the same session, reporting the ratio of medians.
//! This is the measuring stick's own check: if the floor is within a few percent of an
//! independent spin, the benchmark's machinery adds nothing that shows.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::facts::FloorCheck;
use crate::bench::runner::Session;
use crate::measure::clock::ticks_to_ns;
use crate::measure::ticks::TickHistogram;

/// The size compared: one 8-byte word each way, what the independent spin moves.
const SIZE: usize = crate::bench::paths::floor::ONE_WORD;
const RUNS: usize = 5;
const EACH: Duration = Duration::from_millis(400);
const PROGRAM: &str = "lanes-spin-floor";

/// The independent program: `$LANES_SPIN_FLOOR`, else beside this executable.
pub(crate) fn program() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("LANES_SPIN_FLOOR") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let dir = exe.parent().ok_or("this executable has no directory")?;
    let p = dir.join(PROGRAM);
    if p.is_file() {
        return Ok(p);
    }
    Err(format!(
        "{PROGRAM} is not beside {} (build it with `cargo build --release -p lanes-cli`, or set LANES_SPIN_FLOOR)",
        exe.display()
    ))
}

pub(crate) fn independent(exe: &PathBuf, cpus: Option<(usize, usize)>) -> Result<f64, String> {
    let mut cmd = Command::new(exe);
    cmd.arg("--seconds").arg(format!("{}", EACH.as_secs_f64()));
    if let Some((a, b)) = cpus {
        cmd.arg("--cpus").arg(format!("{a},{b}"));
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", exe.display()))?;
    let start = Instant::now();
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if start.elapsed() > EACH * 20 + Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{} did not finish; killed", exe.display()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{} failed: {}", exe.display(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    text.lines()
        .find_map(|l| l.strip_prefix("one_way_avg_ns ").and_then(|v| v.trim().parse::<f64>().ok()))
        .ok_or_else(|| format!("{} printed no one_way_avg_ns: {text:?}", exe.display()))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// Alternates the independent spin and the floor path (in ABBA order, so drift cancels).
pub(crate) fn run(session: &mut Session) -> Result<FloorCheck, String> {
    let exe = program()?;
    let mut floor = Vec::new();
    let mut indep = Vec::new();
    let mut rec = TickHistogram::new();
    for i in 0..RUNS {
        for first_floor in [i % 2 == 1, i % 2 == 0] {
            if first_floor {
                rec.clear();
                session.latency("floor", SIZE, EACH, &mut rec)?;
                floor.push(ticks_to_ns(1) * rec.mean() / 2.0);
            } else {
                indep.push(independent(&exe, session.cpus)?);
            }
        }
    }
    let (f, s) = (median(&floor), median(&indep));
    let spread = |v: &[f64]| {
        let (lo, hi) = v.iter().fold((f64::MAX, 0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        hi / lo.max(f64::MIN_POSITIVE)
    };
    let spread = spread(&floor).max(spread(&indep));
    Ok(FloorCheck {
        size: SIZE,
        floor_ns: f,
        independent_ns: s,
        ratio: f / s,
        runs: RUNS,
        floor_runs_ns: floor,
        independent_runs_ns: indep,
        spread,
    })
}
