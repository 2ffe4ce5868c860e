//! `lanes bench dma`: bandwidth and latency of DMA against PIO and the memcpy floor.
//!
//! One process acts as two nodes (the copies cost the same whichever process owns the
//! pages): it exports a local segment, connects to the other node's, and measures per size
//! PIO (the CPU copies), DMA on one channel with and without batching, and DMA on N channels
//! (each transfer split across N queues, one per channel); then the small-packet scenario
//! of the IEEE ESL 2024 paper (sizes uniformly random from 64 B to 4 KiB, laid back to back)
//! with the naive engine (one descriptor per pass, one channel) against the optimised one
//! (descriptor batches with merging, N channels); and single-thread memcpy as the floor.
//! Beside each throughput: the CPU time of the submitting thread over the wall time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lanes::{
    CopyPath, DmaChannel, DmaDirection, DmaQueue, DmaVec, Fabric, FabricConfig, LocalSegment, MapAccess, NodeId,
    RemoteSegment, Timeout,
};
use serde::{Deserialize, Serialize};

use crate::report::{Machine, Report, Row};

/// `lanes bench dma` arguments.
#[derive(clap::Args, Debug)]
pub struct DmaArgs {
    /// A short run (about 5 s).
    #[arg(long)]
    quick: bool,
    /// Transfer sizes (default 64 B to 16 MiB in powers of 4).
    #[arg(long, value_name = "SIZES")]
    sizes: Option<String>,
    /// Channels of the N-channel paths (default: the CPUs this process may use, at most 4).
    #[arg(long)]
    channels: Option<usize>,
    /// Write the results as JSON to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

/// Runs `lanes bench dma`.
pub fn run_cmd(a: DmaArgs) -> Result<(), String> {
    let sizes = crate::sizes::parse_sizes(a.sizes.as_deref().unwrap_or("64,256,1K,4K,16K,64K,256K,1M,4M,16M"))?;
    let channels = a.channels.unwrap_or_else(|| crate::measure::affinity::allowed_cpus().len().clamp(1, 4));
    if channels == 0 || channels > lanes::MAX_DMA_CHANNELS {
        return Err(format!("--channels {channels}: 1 to {}", lanes::MAX_DMA_CHANNELS));
    }
    let opts = Options { sizes, channels, point: Duration::from_millis(if a.quick { 40 } else { 200 }) };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let report = run(&opts, |what| {
        if tty {
            eprint!("\r\x1b[Kmeasuring {what}");
        }
    })?;
    if tty {
        eprint!("\r\x1b[K");
    }
    crate::report::emit(&report, print_table, a.json.as_deref())
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct Options {
    pub sizes: Vec<usize>,
    /// Channels for the N-channel paths.
    pub channels: usize,
    /// Time per measured point.
    pub point: Duration,
}

/// How a run was made: the report's `run`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Run {
    sizes: Vec<usize>,
    /// Channels of the N-channel paths.
    channels: usize,
    /// Time per measured point, ms.
    point_ms: f64,
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "dma";

const UNITS: [(&str, &str); 11] = [
    ("values.gbps", "bytes per second / 1e9"),
    ("values.lat_us", "one transfer, start to completion, us"),
    ("values.cpu_pct", "CPU time of the submitting thread / wall time, percent"),
    ("rows", "per size: pio, dma-1ch, dma-1ch-nobatch, dma-Nch; then random-small and memcpy (no size)"),
    ("random-small", "sizes uniformly random from 64 B to 4 KiB back to back: values naive_* (one descriptor per pass, one channel) and optimized_* (batched and merged); lat_us per vector of detail.vector_len transfers"),
    ("random-small.ratio", "optimized_gbps / naive_gbps"),
    ("random-small.detail.optimized_channels", "channels of the optimised engine's better run"),
    ("memcpy", "single-thread memcpy, the floor"),
    ("detail.crossover_bytes", "smallest size from which DMA completes a transfer no slower than PIO (null: never)"),
    ("size", "transfer size in bytes"),
    ("run.point_ms", "time per measured point"),
];

const SEG_BYTES: u64 = 64 << 20;
const SEG_ID: u32 = 0x444d_4100; // "DMA"

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is valid for writes; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall and submitting-thread CPU time of `f`.
fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(T, f64, f64), String> {
    let (t0, c0) = (Instant::now(), thread_cpu_ns());
    let v = f()?;
    Ok((v, t0.elapsed().as_secs_f64(), (thread_cpu_ns() - c0) as f64 / 1e9))
}

struct Rig {
    _owner: Fabric,
    _theirs: LocalSegment,
    mine: LocalSegment,
    remote: RemoteSegment,
    dir: std::path::PathBuf,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rig() -> Result<Rig, String> {
    let e = |e: lanes::Error| e.to_string();
    let dir = std::env::temp_dir().join(format!("lanes-bench-dma-{}", std::process::id()));
    let a = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(4).map_err(e)?)).map_err(e)?;
    let b = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(8).map_err(e)?)).map_err(e)?;
    let theirs = b.create_segment(SEG_ID, SEG_BYTES).map_err(e)?;
    theirs.prepare().and_then(|_| theirs.set_available()).map_err(e)?;
    let mine = a.create_segment(SEG_ID + 1, SEG_BYTES).map_err(e)?;
    // Touch every page once so first-touch faults are not measured.
    for s in [&mine, &theirs] {
        s.map(0, SEG_BYTES, MapAccess::ReadWrite).and_then(|m| m.fill(0, SEG_BYTES as usize, 1)).map_err(e)?;
    }
    let remote = a.connect_segment(8, SEG_ID, Timeout::After(Duration::from_secs(5))).map_err(e)?;
    Ok(Rig { _owner: b, _theirs: theirs, mine, remote, dir })
}

/// N queues, one per channel, batching as asked.
fn queues(n: usize, batch: bool) -> Result<Vec<DmaQueue>, String> {
    (0..n)
        .map(|i| {
            let mut q = DmaQueue::new(1024).map_err(|e| e.to_string())?;
            let ch = DmaChannel::request(Some(i as u32)).map_err(|e| e.to_string())?;
            q.assign_channel(&ch).map_err(|e| e.to_string())?;
            if batch {
                q.set_batching(256, true);
            } else {
                q.set_batching(1, false);
            }
            Ok(q)
        })
        .collect()
}

/// Moves `size` bytes per transfer, spreading each transfer over the queues (whole transfers
/// round robin when they are too small to split); returns transfers done.
fn dma_stream(rig: &Rig, qs: &mut [DmaQueue], size: usize, budget: Duration) -> Result<u64, String> {
    let e = |e: lanes::Error| e.to_string();
    let per_batch = ((8 << 20) / size).clamp(1, 64);
    let span = (SEG_BYTES as usize / size).max(1);
    let mut done = 0u64;
    let start = Instant::now();
    let mut slot = 0usize;
    while start.elapsed() < budget {
        let split = qs.len() > 1 && size >= qs.len() * 4096;
        for k in 0..per_batch {
            let off = ((slot + k) % span * size) as u64;
            if split {
                let nq = qs.len();
                let part = size / nq;
                for (i, q) in qs.iter_mut().enumerate() {
                    let len = if i + 1 == nq { size - part * i } else { part };
                    let o = off + (part * i) as u64;
                    q.start(&rig.mine, &rig.remote, o, len as u64, o, DmaDirection::Write, None).map_err(e)?;
                }
            } else {
                let n = qs.len();
                qs[k % n].start(&rig.mine, &rig.remote, off, size as u64, off, DmaDirection::Write, None).map_err(e)?;
            }
        }
        for q in qs.iter() {
            q.wait(Timeout::After(Duration::from_secs(30))).map_err(e)?;
        }
        slot += per_batch;
        done += per_batch as u64;
    }
    Ok(done)
}

/// One transfer of `size` bytes (split over the queues like the stream), start to done.
fn dma_once(rig: &Rig, qs: &mut [DmaQueue], size: usize) -> Result<(), String> {
    let e = |e: lanes::Error| e.to_string();
    let nq = qs.len();
    if nq > 1 && size >= nq * 4096 {
        let part = size / nq;
        for (i, q) in qs.iter_mut().enumerate() {
            let len = if i + 1 == nq { size - part * i } else { part };
            let o = (part * i) as u64;
            q.start(&rig.mine, &rig.remote, o, len as u64, o, DmaDirection::Write, None).map_err(e)?;
        }
    } else {
        qs[0].start(&rig.mine, &rig.remote, 0, size as u64, 0, DmaDirection::Write, None).map_err(e)?;
    }
    for q in qs.iter() {
        q.wait(Timeout::After(Duration::from_secs(30))).map_err(e)?;
    }
    Ok(())
}

fn pio_stream(rig: &Rig, q: &mut DmaQueue, size: usize, budget: Duration) -> Result<u64, String> {
    let span = (SEG_BYTES as usize / size).max(1);
    let mut done = 0u64;
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..16 {
            let off = (done as usize % span * size) as u64;
            let p = q
                .copy(&rig.mine, &rig.remote, off, size as u64, off, DmaDirection::Write)
                .map_err(|e| e.to_string())?;
            debug_assert_eq!(p, CopyPath::Pio);
            done += 1;
        }
    }
    Ok(done)
}

/// Latency of one transfer (start to completion), averaged over repetitions.
fn latency_us(mut one: impl FnMut() -> Result<(), String>, budget: Duration) -> Result<f64, String> {
    one()?;
    let start = Instant::now();
    let mut n = 0u32;
    while start.elapsed() < budget || n < 3 {
        one()?;
        n += 1;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(n))
}

/// Single-thread memcpy between two private 16 MiB buffers: the floor.
fn memcpy_gbps(budget: Duration) -> f64 {
    let n = 16 << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    dst.copy_from_slice(&src);
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < budget {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        bytes += n as u64;
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// xorshift64*: a reproducible source of transfer sizes.
fn random_sizes(n: usize) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            64 + (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) % (4096 - 64 + 1)
        })
        .collect()
}

/// A vector of `len` back-to-back random-size transfers starting at `*off` (wrapping).
fn random_vector(sizes: &[u64], cursor: &mut usize, off: &mut u64, len: usize) -> (Vec<DmaVec>, u64) {
    let mut vec = Vec::with_capacity(len);
    let mut bytes = 0;
    for _ in 0..len {
        let s = sizes[*cursor % sizes.len()];
        *cursor += 1;
        if *off + s > SEG_BYTES {
            *off = 0;
        }
        vec.push(DmaVec { size: s, local_offset: *off, remote_offset: *off });
        *off += s;
        bytes += s;
    }
    (vec, bytes)
}

/// The small-packet scenario on `qs`: vectors of back-to-back random-size transfers, as many
/// in flight per queue as it holds (the paper's "more outstanding requests"). Returns
/// (GB/s, latency of one vector alone in us, submitting CPU %).
fn random_small(
    rig: &Rig,
    qs: &mut [DmaQueue],
    sizes: &[u64],
    vector_len: usize,
    budget: Duration,
) -> Result<(f64, f64, f64), String> {
    let e = |e: lanes::Error| e.to_string();
    let (mut cursor, mut off, mut bytes) = (0usize, 0u64, 0u64);
    let ((), wall, cpu) = timed(|| {
        let start = Instant::now();
        while start.elapsed() < budget {
            let mut queued = false;
            for q in qs.iter_mut() {
                if q.outstanding() + vector_len <= q.max_entries() {
                    let (vec, b) = random_vector(sizes, &mut cursor, &mut off, vector_len);
                    q.start_vec(&rig.mine, &rig.remote, &vec, DmaDirection::Write, None).map_err(e)?;
                    bytes += b;
                    queued = true;
                }
            }
            if !queued {
                std::thread::yield_now();
            }
        }
        for q in qs.iter() {
            q.wait(Timeout::After(Duration::from_secs(30))).map_err(e)?;
        }
        Ok(())
    })?;
    // Latency: one vector per queue submitted alone and awaited.
    let lat = latency_us(
        || {
            for q in qs.iter_mut() {
                let (vec, _) = random_vector(sizes, &mut cursor, &mut off, vector_len);
                q.start_vec(&rig.mine, &rig.remote, &vec, DmaDirection::Write, None).map_err(e)?;
            }
            for q in qs.iter() {
                q.wait(Timeout::After(Duration::from_secs(30))).map_err(e)?;
            }
            Ok(())
        },
        budget / 4,
    )?;
    Ok((bytes as f64 / wall / 1e9, lat, 100.0 * cpu / wall))
}

/// Runs everything; `progress` is told what is being measured.
pub fn run(opts: &Options, mut progress: impl FnMut(&str)) -> Result<Report, String> {
    let started = std::time::SystemTime::now();
    let rig = rig()?;
    let n = opts.channels.max(1);
    let mut sweep = Vec::new();
    let mut pio_q = DmaQueue::new(16).map_err(|e| e.to_string())?;
    pio_q.set_pio_threshold(usize::MAX);
    let mut one = queues(1, true)?;
    let mut one_naive = queues(1, false)?;
    let mut many = queues(n, true)?;
    for &size in &opts.sizes {
        if size as u64 > SEG_BYTES {
            return Err(format!("size {size} exceeds the {SEG_BYTES}-byte test segment"));
        }
        progress(&format!("sweep {size} B"));
        let (done, wall, cpu) = timed(|| pio_stream(&rig, &mut pio_q, size, opts.point))?;
        let lat = latency_us(
            || {
                pio_q
                    .copy(&rig.mine, &rig.remote, 0, size as u64, 0, DmaDirection::Write)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
            opts.point / 4,
        )?;
        sweep.push(point("pio", size, done as f64 * size as f64 / wall / 1e9, lat, 100.0 * cpu / wall));
        for (name, qs) in [("dma-1ch", &mut one), ("dma-1ch-nobatch", &mut one_naive), ("dma-nch", &mut many)] {
            let (done, wall, cpu) = timed(|| dma_stream(&rig, qs, size, opts.point))?;
            let lat = latency_us(|| dma_once(&rig, qs, size), opts.point / 4)?;
            let path = if name == "dma-nch" { format!("dma-{n}ch") } else { name.to_string() };
            sweep.push(point(&path, size, done as f64 * size as f64 / wall / 1e9, lat, 100.0 * cpu / wall));
        }
    }
    progress("random small transfers");
    let sizes = random_sizes(1 << 16);
    let vector_len = 64;
    let (ng, nl, nc) = random_small(&rig, &mut one_naive, &sizes, vector_len, opts.point * 4)?;
    // The optimised engine batches and merges descriptors; more channels help only where
    // there are cores to run them, so both counts are tried and the better one is reported.
    let (og1, ol1, oc1) = random_small(&rig, &mut one, &sizes, vector_len, opts.point * 4)?;
    let (ogn, oln, ocn) = random_small(&rig, &mut many, &sizes, vector_len, opts.point * 4)?;
    let (og, ol, oc, ochan) = if ogn > og1 { (ogn, oln, ocn, n) } else { (og1, ol1, oc1, 1) };
    progress("memcpy floor");
    let memcpy = memcpy_gbps(opts.point * 2);
    let crossover = crossover(&sweep);
    let mut report = Report::new(BENCHMARK, Machine::this(started));
    report.set_units(UNITS);
    report.set_run(&Run { sizes: opts.sizes.clone(), channels: n, point_ms: opts.point.as_secs_f64() * 1e3 });
    report.rows = sweep;
    let mut rs = Row::new("random-small")
        .with_value("naive_gbps", ng)
        .with_value("optimized_gbps", og)
        .with_value("naive_lat_us", nl)
        .with_value("optimized_lat_us", ol)
        .with_value("naive_cpu_pct", nc)
        .with_value("optimized_cpu_pct", oc)
        .with_detail("vector_len", &vector_len)
        .with_detail("transfers", &sizes.len())
        .with_detail("optimized_channels", &ochan);
    rs.ratio = Some(og / ng.max(1e-12));
    report.rows.push(rs);
    report.rows.push(Row::new("memcpy").with_value("gbps", memcpy));
    report.set_detail("crossover_bytes", &crossover);
    Ok(report)
}

/// One point of the sweep.
fn point(path: &str, size: usize, gbps: f64, lat_us: f64, cpu_pct: f64) -> Row {
    Row::new(path).with_size(size).with_value("gbps", gbps).with_value("lat_us", lat_us).with_value("cpu_pct", cpu_pct)
}

/// The smallest size from which the best DMA path's latency is no worse than PIO's at that
/// size and every larger one.
fn crossover(sweep: &[Row]) -> Option<usize> {
    let mut sizes: Vec<usize> = sweep.iter().map(Row::size).collect();
    sizes.dedup();
    let better = |s: usize| {
        let pio = sweep.iter().find(|r| r.size() == s && r.key == "pio").map(|r| r.value("lat_us"));
        let dma = sweep
            .iter()
            .filter(|r| r.size() == s && r.key.starts_with("dma-"))
            .map(|r| r.value("lat_us"))
            .reduce(f64::min);
        matches!((pio, dma), (Some(p), Some(d)) if d <= p)
    };
    let mut found = None;
    for &s in sizes.iter().rev() {
        if better(s) {
            found = Some(s);
        } else {
            break;
        }
    }
    found
}

pub fn print_table(r: &Report) {
    let run: Run = r.run_as();
    println!("lanes bench dma: DMA against PIO and memcpy, {} channel(s) for the N-channel path", run.channels);
    println!("{:>10}  {:<16} {:>9} {:>11} {:>9}", "size", "path", "GB/s", "latency us", "cpu %");
    let sweep: Vec<&Row> = r.rows.iter().filter(|x| x.size.is_some()).collect();
    for row in &sweep {
        println!(
            "{:>10}  {:<16} {:>9.2} {:>11.2} {:>9.0}",
            row.size(),
            row.key,
            row.value("gbps"),
            row.value("lat_us"),
            row.value("cpu_pct")
        );
    }
    if let Some(rs) = r.rows.iter().find(|x| x.key == "random-small") {
        println!(
            "\nrandom small transfers (64 B - 4 KiB, vectors of {}, up to 16 vectors in flight per queue):\n  naive engine (1 descriptor per pass, 1 channel): {:.2} GB/s ({:.0}% submitting cpu), {:.1} us per vector alone\n  optimised (batched and merged, {} channel(s)):    {:.2} GB/s ({:.0}% submitting cpu), {:.1} us per vector alone\n  optimised / naive: {:.2}x bandwidth",
            rs.detail_as::<usize>("vector_len").unwrap_or(0),
            rs.value("naive_gbps"),
            rs.value("naive_cpu_pct"),
            rs.value("naive_lat_us"),
            rs.detail_as::<usize>("optimized_channels").unwrap_or(0),
            rs.value("optimized_gbps"),
            rs.value("optimized_cpu_pct"),
            rs.value("optimized_lat_us"),
            rs.ratio.unwrap_or(f64::NAN)
        );
    }
    let memcpy = r.rows.iter().find(|x| x.key == "memcpy").map_or(0.0, |x| x.value("gbps"));
    let best_large = sweep
        .iter()
        .filter(|x| x.key.starts_with("dma-") && x.size() >= 4 << 20)
        .map(|x| x.value("gbps"))
        .fold(0.0, f64::max);
    println!(
        "memcpy floor (one thread): {:.2} GB/s; best DMA at >= 4 MiB: {:.2} GB/s ({:.0}% of the floor)",
        memcpy,
        best_large,
        100.0 * best_large / memcpy.max(1e-12)
    );
    match r.detail_as::<Option<usize>>("crossover_bytes").flatten() {
        Some(c) => println!("PIO/DMA crossover: DMA is no slower than PIO from {c} bytes (set LANES_DMA_THRESHOLD)"),
        None => println!(
            "PIO/DMA crossover: none in this sweep: a synchronous copy is always faster by PIO here; DMA's gain is the submitting CPU it frees"
        ),
    }
}
