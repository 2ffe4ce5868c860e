//! Running a plan: the peer process, every path set up once, then slices of latency and
//! throughput per size and path, interleaved so that every path at a size is measured
//! within seconds of the others (the speed of a shared machine drifts and jumps). A run
//! across hosts (`remote.rs`) sets paths up and tears them down per size instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::bench::control::Control;
use crate::bench::facts::{units, RunInfo, BENCHMARK};
use crate::bench::options::{Plan, CELL_OVERHEAD, FIXED_OVERHEAD, MIN_CELL};
use crate::bench::paths::{ClientPath, Kind, PathDef, SetupEnv, Streamed};
use crate::bench::progress::Progress;
use crate::bench::wait::Waiter;
use crate::measure::clock::{self, now_ticks, ns_to_ticks, ticks_to_ns};
use crate::measure::rt::{self, RtStatus};
use crate::measure::stats::fmt_ns;
use crate::measure::ticks::TickHistogram;
use crate::measure::{affinity, cputime};
use crate::report::machine::{utc_iso_ms, Machine};
use crate::report::{Lat, Report, Row};
use crate::sizes::fmt_size;

const SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the peer may take to answer after a slice (it has finished by then).
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);
/// Share of each slice spent warming up, unrecorded.
const WARMUP_SHARE: u32 = 10;

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

/// Ctrl-C ends the run after the current slice, with the results so far; a second Ctrl-C
/// (the handler resets itself) ends it at once.
fn catch_interrupt() {
    // SAFETY: sigaction is plain data; zeroed is valid and sa_mask empty.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
    sa.sa_flags = libc::SA_RESETHAND | libc::SA_RESTART;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut()) };
}

pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

struct Active {
    name: &'static str,
    client: Box<dyn ClientPath>,
}

/// The peer and every path, set up.
pub(crate) struct Session {
    ctl: Control,
    active: Vec<Active>,
    waiter: Waiter,
    scratch: TickHistogram,
    pub client_rt: Option<RtStatus>,
    pub peer_rt: Option<RtStatus>,
    pub cpus: Option<(usize, usize)>,
}

/// One throughput slice's figures.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TputSample {
    pub streamed: Streamed,
    pub cpu_client_ns: u64,
    pub cpu_peer_ns: u64,
}

impl Session {
    /// Starts the peer and sets up `defs`, for messages up to `max_size`.
    pub(crate) fn start(
        defs: &[&'static PathDef],
        max_size: usize,
        cpus: Option<(usize, usize)>,
        realtime: bool,
    ) -> Result<Session, String> {
        let config = lanes::FabricConfig::from_env().map_err(|e| format!("fabric configuration: {e}"))?;
        let mut args = vec!["bench".to_string(), "--peer".into()];
        if let Some((_, b)) = cpus {
            args.extend(["--peer-cpu".into(), b.to_string()]);
        }
        if realtime {
            args.push("--rt".into());
        }
        let env = [
            ("LANES_NODE_ID", config.node_id.next_after().get().to_string()),
            ("LANES_DIR", config.dir.display().to_string()),
        ];
        let ctl = Control::spawn(&args, &env)?;
        if let Some((a, _)) = cpus {
            affinity::pin_to(a).map_err(|e| format!("pinning to cpu {a}: {e}"))?;
        }
        let client_rt = realtime.then(rt::enter);
        let single_cpu = cpus.is_none() && affinity::allowed_cpus().len() < 2;
        Session::over(ctl, defs, max_size, single_cpu, client_rt, cpus, realtime)
    }

    /// Sets up `defs` with a peer already at the other end of `ctl` (a local child, or
    /// `lanes bench --serve` on another host).
    pub(crate) fn over(
        mut ctl: Control,
        defs: &[&'static PathDef],
        max_size: usize,
        single_cpu: bool,
        client_rt: Option<RtStatus>,
        cpus: Option<(usize, usize)>,
        realtime: bool,
    ) -> Result<Session, String> {
        let hello = ctl.call("hello", SETUP_TIMEOUT)?;
        let peer_rt = serde_json::from_str::<RtStatus>(&hello).ok();
        let waiter = Waiter::new(Some(ctl.fd()), single_cpu, realtime);
        let mut session =
            Session { ctl, active: Vec::new(), waiter, scratch: TickHistogram::new(), client_rt, peer_rt, cpus };
        session.set_up(defs, max_size)?;
        Ok(session)
    }

    /// Sets up `defs` on both sides, for messages up to `max_size`.
    pub(crate) fn set_up(&mut self, defs: &[&'static PathDef], max_size: usize) -> Result<(), String> {
        let env = SetupEnv { max_size };
        for def in defs {
            let (client, _) = def.setups().map_err(|e| format!("path {}: {e}", def.name))?;
            let offer = client(&env)?;
            let reply = self
                .ctl
                .call(&format!("setup {} {max_size} {}", def.name, offer.offer()), SETUP_TIMEOUT)
                .map_err(|e| format!("setting up {}: {e}", def.name))?;
            let client = offer.accept(&reply).map_err(|e| format!("setting up {}: {e}", def.name))?;
            self.active.retain(|a| a.name != def.name);
            self.active.push(Active { name: def.name, client });
        }
        Ok(())
    }

    /// Ends every path on both sides, the peer's first. A path's fabric descriptors go with
    /// it, so once none is left a process holds no endpoint: the next set-up opens new
    /// ones, and with them new connections.
    pub(crate) fn tear_down(&mut self) -> Result<(), String> {
        let peer = self.ctl.call("teardown", SETUP_TIMEOUT).map_err(|e| format!("tearing the paths down: {e}"));
        self.active.clear();
        peer.map(drop)
    }

    /// A command of the peer's beyond the path protocol (the remote server's baselines).
    pub(crate) fn call(&mut self, line: &str, timeout: Duration) -> Result<String, String> {
        self.ctl.call(line, timeout)
    }

    fn index(&self, name: &str) -> Result<usize, String> {
        self.active.iter().position(|a| a.name == name).ok_or_else(|| format!("path {name} is not set up"))
    }

    /// A latency slice of `slice` (a tenth of it warm-up) on path `name`, into `rec`.
    pub(crate) fn latency(
        &mut self,
        name: &str,
        size: usize,
        slice: Duration,
        rec: &mut TickHistogram,
    ) -> Result<(), String> {
        let i = self.index(name)?;
        let Session { ctl, active, waiter, scratch, .. } = self;
        let a = &mut active[i];
        scratch.clear();
        latency_once(ctl, a, waiter, size, slice / WARMUP_SHARE, scratch)?;
        latency_once(ctl, a, waiter, size, slice - slice / WARMUP_SHARE, rec)
    }

    fn throughput_once(&mut self, i: usize, size: usize, dur: Duration) -> Result<TputSample, String> {
        let a = &mut self.active[i];
        let what = format!("{} throughput at {}", a.name, fmt_size(size));
        a.client.prepare(Kind::Throughput, size).map_err(|e| format!("{what}: {e}"))?;
        self.ctl.send(&format!("{} {} {size}", Kind::Throughput.word(), a.name))?;
        let cpu0 = cputime::process_cpu_ns();
        let until = now_ticks() + ns_to_ticks(dur.as_nanos() as f64);
        let streamed = match a.client.throughput(size, until, &self.waiter) {
            Ok(s) => s,
            Err(e) => return Err(self.ctl.explain(format!("{what}: {e}"))),
        };
        let cpu_client_ns = cputime::process_cpu_ns().saturating_sub(cpu0);
        let reply = self.ctl.recv(REPLY_TIMEOUT).map_err(|e| format!("{what}: {e}"))?;
        let mut words = reply.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(cpu_peer_ns)), Some(Ok(taken))) = (words.next(), words.next()) else {
            return Err(format!("{what}: the peer answered {reply:?}"));
        };
        if taken != streamed.msgs {
            return Err(format!("{what}: sent {} messages, the peer took {taken}", streamed.msgs));
        }
        Ok(TputSample { streamed, cpu_client_ns, cpu_peer_ns })
    }

    /// A throughput slice of `slice` (a tenth of it warm-up) on path `name`.
    pub(crate) fn throughput(&mut self, name: &str, size: usize, slice: Duration) -> Result<TputSample, String> {
        let i = self.index(name)?;
        self.throughput_once(i, size, slice / WARMUP_SHARE)?;
        self.throughput_once(i, size, slice - slice / WARMUP_SHARE)
    }

    /// Ends the peer.
    pub(crate) fn finish(self) -> Result<(), String> {
        self.ctl.finish()
    }
}

fn latency_once(
    ctl: &mut Control,
    a: &mut Active,
    waiter: &Waiter,
    size: usize,
    dur: Duration,
    rec: &mut TickHistogram,
) -> Result<(), String> {
    let what = format!("{} latency at {}", a.name, fmt_size(size));
    a.client.prepare(Kind::Latency, size).map_err(|e| format!("{what}: {e}"))?;
    ctl.send(&format!("{} {} {size}", Kind::Latency.word(), a.name))?;
    let until = now_ticks() + ns_to_ticks(dur.as_nanos() as f64);
    if let Err(e) = a.client.latency(size, until, rec, waiter) {
        return Err(ctl.explain(format!("{what}: {e}")));
    }
    ctl.recv(REPLY_TIMEOUT).map_err(|e| format!("{what}: {e}"))?;
    Ok(())
}

/// Everything measured for one path at one size, over all rounds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cell {
    pub lat: TickHistogram,
    pub msgs: u64,
    pub ticks: u64,
    pub cpu_client_ns: u64,
    pub cpu_peer_ns: u64,
}

impl Cell {
    pub(crate) fn add(&mut self, t: &TputSample) {
        self.msgs += t.streamed.msgs;
        self.ticks += t.streamed.ticks;
        self.cpu_client_ns += t.cpu_client_ns;
        self.cpu_peer_ns += t.cpu_peer_ns;
    }
}

/// A run's cells, with what is needed to turn them into a report.
pub(crate) struct Measured {
    pub plan: Plan,
    pub machine: Machine,
    /// Cells per path (plan order), per size (plan order).
    pub cells: Vec<Vec<Cell>>,
    pub rounds: u64,
    pub elapsed: Duration,
    pub interrupted: bool,
    pub start_wall: SystemTime,
    pub start_ticks: u64,
    pub client_rt: Option<RtStatus>,
    pub peer_rt: Option<RtStatus>,
    pub cpus: Option<(usize, usize)>,
}

impl Measured {
    /// Wall-clock time of a tick reading.
    pub(crate) fn wall(&self, ticks: u64) -> SystemTime {
        self.start_wall + Duration::from_nanos(ticks_to_ns(ticks.saturating_sub(self.start_ticks)) as u64)
    }

    pub(crate) fn report(&self) -> Report {
        let mut results = Vec::new();
        for (pi, def) in self.plan.paths.iter().enumerate() {
            for (si, &size) in self.plan.sizes.iter().enumerate() {
                let c = &self.cells[pi][si];
                // A path that measures one kind only has cells with half the figures.
                let wanted_lat = def.kinds.contains(&Kind::Latency);
                let wanted_tput = def.kinds.contains(&Kind::Throughput);
                if (wanted_lat && c.lat.is_empty()) || (wanted_tput && c.msgs == 0) || (c.lat.is_empty() && c.msgs == 0)
                {
                    continue;
                }
                results.push(result(def.name, size, c, self.wall(c.lat.max_at())));
            }
        }
        let p = &self.plan;
        let mut report = Report::new(BENCHMARK, self.machine.clone());
        report.set_run(&RunInfo {
            paths: p.paths.iter().map(|d| d.name.to_string()).collect(),
            sizes: p.sizes.clone(),
            duration_s: p.duration.as_secs_f64(),
            elapsed_s: self.elapsed.as_secs_f64(),
            rounds: self.rounds,
            quick: p.quick,
            interrupted: self.interrupted,
            cpus: self.cpus.map(|(a, b)| [a, b]),
            lat_slice_ms: p.lat_slice.as_secs_f64() * 1e3,
            tput_slice_ms: p.tput_slice.as_secs_f64() * 1e3,
            rt: p.rt,
            rt_client: self.client_rt.clone(),
            rt_peer: self.peer_rt.clone(),
        });
        report.units = units();
        report.rows = results;
        report
    }
}

/// One-way figures from round-trip ticks.
fn result(path: &str, size: usize, c: &Cell, max_at: SystemTime) -> Row {
    let ow = |t: f64| ticks_to_ns(1) * t / 2.0;
    let h = &c.lat;
    let secs = (ticks_to_ns(c.ticks) / 1e9).max(f64::MIN_POSITIVE);
    let pct = |ns: u64| ns as f64 / 1e9 / secs * 100.0;
    Row::new(path)
        .with_size(size)
        .with_lat(Lat {
            avg: ow(h.mean()),
            min: ow(h.min() as f64),
            p50: ow(h.percentile(50.0) as f64),
            p99: ow(h.percentile(99.0) as f64),
            p999: ow(h.percentile(99.9) as f64),
            max: ow(h.max() as f64),
            samples: h.count(),
            max_at: utc_iso_ms(max_at),
        })
        .with_value("gbps", c.msgs as f64 * size as f64 / secs / 1e9)
        .with_value("msgs_per_s", c.msgs as f64 / secs)
        .with_value("cpu_pct", pct(c.cpu_client_ns + c.cpu_peer_ns))
        .with_value("cpu_pct_client", pct(c.cpu_client_ns))
        .with_value("cpu_pct_peer", pct(c.cpu_peer_ns))
}

/// Runs `plan`; `extra` paths are set up too (for `--check-floor`) but not measured here.
/// `after_round` sees the report so far after each round of a long run.
pub(crate) fn run(
    plan: &Plan,
    extra: &[&'static PathDef],
    mut after_round: impl FnMut(&Measured) -> Result<(), String>,
    then: impl FnOnce(&mut Session) -> Result<(), String>,
) -> Result<Measured, String> {
    clock::calibrate();
    catch_interrupt();
    let start_wall = SystemTime::now();
    let start_ticks = now_ticks();
    let started = Instant::now();
    let mut defs = plan.paths.clone();
    defs.extend(extra.iter().filter(|e| !plan.paths.iter().any(|p| p.name == e.name)));
    let mut session = Session::start(&defs, plan.max_size(), plan.cpus, plan.rt)?;
    if let (Some(c), Some(p)) = (&session.client_rt, &session.peer_rt) {
        eprintln!("lanes bench: real-time mode: this process {}; the peer {}", c.describe(), p.describe());
    }
    let mut m = Measured {
        plan: plan.clone(),
        machine: Machine::this(start_wall),
        cells: vec![vec![Cell::default(); plan.sizes.len()]; plan.paths.len()],
        rounds: 0,
        elapsed: Duration::ZERO,
        interrupted: false,
        start_wall,
        start_ticks,
        client_rt: session.client_rt.clone(),
        peer_rt: session.peer_rt.clone(),
        cpus: session.cpus,
    };
    let per_round = plan.paths.len() * plan.sizes.len() * 2;
    let mut progress = Progress::new(if plan.rounds { plan.duration } else { plan.round_estimate() });
    let round_time = plan.round_estimate();
    let slice_overhead = CELL_OVERHEAD / 2;
    let min_slice = MIN_CELL / 2;
    'rounds: loop {
        m.rounds += 1;
        let mut done = 0usize;
        // Each slice gets an equal share of the time left in the round, so a slice that ran
        // long (a stall on a busy machine) shortens the rest instead of the run.
        let round_end = Instant::now() + plan.round.saturating_sub(FIXED_OVERHEAD);
        for (si, &size) in plan.sizes.iter().enumerate() {
            for kind in [Kind::Latency, Kind::Throughput] {
                for (pi, def) in plan.paths.iter().enumerate() {
                    if interrupted() {
                        m.interrupted = true;
                        break 'rounds;
                    }
                    if def.max_size.is_some_and(|max| size > max) || !def.kinds.contains(&kind) {
                        done += 1;
                        continue;
                    }
                    let fraction = if plan.rounds {
                        started.elapsed().as_secs_f64() / plan.duration.as_secs_f64()
                    } else {
                        done as f64 / per_round as f64
                    };
                    let label = format!(
                        "{}{} {} {}",
                        if plan.rounds { format!("round {} ", m.rounds) } else { String::new() },
                        def.name,
                        fmt_size(size),
                        if kind == Kind::Latency { "latency" } else { "throughput" }
                    );
                    progress.show(fraction, &label);
                    let left = (per_round - done) as u32;
                    let share = round_end.saturating_duration_since(Instant::now()) / left;
                    let slice = share.saturating_sub(slice_overhead).max(min_slice);
                    let cell = &mut m.cells[pi][si];
                    match kind {
                        Kind::Latency => session.latency(def.name, size, slice, &mut cell.lat)?,
                        Kind::Throughput => {
                            let t = session.throughput(def.name, size, slice)?;
                            cell.add(&t);
                        }
                    }
                    done += 1;
                }
            }
        }
        m.elapsed = started.elapsed();
        if !plan.rounds {
            break;
        }
        progress.clear();
        eprintln!("{}", round_summary(&m));
        after_round(&m)?;
        if m.elapsed + round_time.min(m.elapsed / m.rounds as u32) > plan.duration {
            break;
        }
    }
    progress.clear();
    drop(progress);
    if !m.interrupted {
        then(&mut session)?;
    }
    m.elapsed = started.elapsed();
    session.finish()?;
    Ok(m)
}

/// One line per round of a long run: the worst one-way latency so far per path, and when.
fn round_summary(m: &Measured) -> String {
    let mut parts = Vec::new();
    for (pi, def) in m.plan.paths.iter().enumerate() {
        let worst =
            m.cells[pi].iter().zip(&m.plan.sizes).filter(|(c, _)| !c.lat.is_empty()).max_by_key(|(c, _)| c.lat.max());
        if let Some((c, &size)) = worst {
            parts.push(format!(
                "{} {} at {} ({})",
                def.name,
                fmt_ns(ticks_to_ns(c.lat.max()) / 2.0),
                fmt_size(size),
                utc_iso_ms(m.wall(c.lat.max_at()))
            ));
        }
    }
    format!(
        "lanes bench: round {} done after {}; worst one-way so far: {}",
        m.rounds,
        crate::bench::progress::fmt_secs(m.elapsed.as_secs_f64()),
        parts.join(", ")
    )
}
