//! A run's results: what `--json` writes, what `--compare` reads, what the table and the
//! plots are drawn from.
//!
//! ```text
//! {"format": "lanes-bench/1",
//!  "machine": {"cpu_model", "cores", "kernel", "hostname", "date", "lanes_version"},
//!  "run": {...how it was measured...},
//!  "units": {...one line per figure...},
//!  "results": [{"path": "pio", "size": 8,
//!               "lat_ns": {"avg", "min", "p50", "p99", "p999", "max", "samples", "max_at"},
//!               "gbps", "msgs_per_s", "cpu_pct", "cpu_pct_client", "cpu_pct_peer"}, ...],
//!  "floor_check": {...}}           only with --check-floor
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::bench::machine::Machine;
use crate::measure::rt::RtStatus;

/// The version of this format.
pub(crate) const FORMAT: &str = "lanes-bench/1";

/// What each figure means; written into every JSON file.
pub(crate) fn units() -> BTreeMap<String, String> {
    [
        ("lat_ns", "one-way latency in nanoseconds: a ping-pong round trip / 2, every round trip recorded; percentiles within 1%"),
        ("lat_ns.max_at", "when the worst round trip happened, UTC"),
        ("gbps", "throughput in GB/s = 1e9 bytes of payload per second, one direction, every message copied out by the receiver"),
        ("msgs_per_s", "messages per second of the same throughput run"),
        ("cpu_pct", "CPU time (user + system) of both processes during the throughput run / wall time x 100: 100 = one core busy, 200 = two"),
        ("cpu_pct_client", "the sending process's share of cpu_pct"),
        ("cpu_pct_peer", "the receiving process's share of cpu_pct"),
        ("size", "message size in bytes"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Latency figures of one path and size, in ns, one-way.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Lat {
    pub avg: f64,
    pub min: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// Round trips measured.
    pub samples: u64,
    /// When the worst one happened (UTC, ISO 8601).
    pub max_at: String,
}

/// One path at one size.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct PathResult {
    pub path: String,
    pub size: usize,
    pub lat_ns: Lat,
    pub gbps: f64,
    pub msgs_per_s: f64,
    pub cpu_pct: f64,
    pub cpu_pct_client: f64,
    pub cpu_pct_peer: f64,
}

/// How the run was made.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct RunInfo {
    pub paths: Vec<String>,
    pub sizes: Vec<usize>,
    /// Time asked for, seconds.
    pub duration_s: f64,
    /// Time taken, seconds.
    pub elapsed_s: f64,
    /// Rounds over every path and size (runs over two minutes go in rounds of one).
    pub rounds: u64,
    pub quick: bool,
    /// Stopped early by Ctrl-C: the results cover what was measured.
    pub interrupted: bool,
    /// CPUs of the client and the peer; none when unpinned.
    pub cpus: Option<[usize; 2]>,
    /// Latency and throughput time planned per path, size and round, warm-up included, ms
    /// (each slice then gets an equal share of the time actually left).
    pub lat_slice_ms: f64,
    pub tput_slice_ms: f64,
    /// Real-time mode (`--rt`) and what it achieved on each side.
    pub rt: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rt_client: Option<RtStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rt_peer: Option<RtStatus>,
}

/// `--check-floor`: the floor against a two-process spin written without Lanes.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct FloorCheck {
    /// Message size compared, bytes.
    pub size: usize,
    /// Median of the floor's one-way averages, ns.
    pub floor_ns: f64,
    /// Median of the independent program's one-way averages, ns.
    pub independent_ns: f64,
    /// floor_ns / independent_ns.
    pub ratio: f64,
    /// Alternating runs of each.
    pub runs: usize,
    pub floor_runs_ns: Vec<f64>,
    pub independent_runs_ns: Vec<f64>,
    /// Largest max/min over the runs of either kind: above 1.5 the machine was too busy
    /// for the ratio to mean much.
    pub spread: f64,
}

impl FloorCheck {
    /// Whether the runs were steady enough for the ratio to be trusted.
    pub(crate) fn steady(&self) -> bool {
        self.spread <= 1.5
    }
}

/// The size of the DMA bandwidth measurement and of the baselines it is compared with.
pub(crate) const DMA_SIZE: usize = 1 << 20;

/// How the remote run is made, as the JSON records it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct RemoteRun {
    pub transport: String,
    pub provider: String,
    /// How the client's endpoint progresses while idle (`lanes::cluster::IdleProgress`).
    pub progress: String,
    pub client_node: u32,
    pub remote_node: u32,
    /// The server's host address the baselines ran against.
    pub address: String,
    /// `fi_pingpong -I` at the smallest size (fewer at large sizes, see `fi_iters`); 0: at
    /// each size as many round trips as the Lanes paths made there in their slice
    /// (`matched_iters`).
    pub fi_pingpong_iters: u64,
    /// `iperf3 -t` and the DMA slice, seconds.
    pub stream_secs: u64,
    /// Rounds over every size.
    pub rounds: u64,
}

/// A whole run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Report {
    #[serde(default)]
    pub format: String,
    #[serde(default)]
    pub machine: Machine,
    #[serde(default)]
    pub run: RunInfo,
    #[serde(default)]
    pub units: BTreeMap<String, String>,
    pub results: Vec<PathResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_check: Option<FloorCheck>,
    /// `--transport ofi`: how the run across hosts was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteRun>,
    /// `--transport ofi`: the design's targets, each with the figures it compares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<Target>>,
}

/// One target of a run across hosts: a Lanes figure against a baseline's, same run.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Target {
    /// The Lanes path and size.
    pub path: String,
    pub size: usize,
    /// `latency` (one-way average, ns; lower is better) or `bandwidth` (GB/s; higher is better).
    pub figure: String,
    pub lanes: f64,
    /// What it is compared with (`fi_pingpong`, or the better of `fi_pingpong` and `iperf3`)
    /// and that figure.
    pub baseline: String,
    pub baseline_value: f64,
    /// lanes / baseline_value.
    pub ratio: f64,
    /// The target: latency ratio at most this, bandwidth ratio at least this.
    pub limit: f64,
    pub met: bool,
}

impl Report {
    /// The result of `path` at `size`.
    pub(crate) fn get(&self, path: &str, size: usize) -> Option<&PathResult> {
        self.results.iter().find(|r| r.path == path && r.size == size)
    }

    /// Paths in the order they first appear.
    pub(crate) fn paths(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.results {
            if !v.contains(&r.path) {
                v.push(r.path.clone());
            }
        }
        v
    }

    /// Sizes, ascending.
    pub(crate) fn sizes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.results.iter().map(|r| r.size).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub(crate) fn to_json(&self) -> Result<String, String> {
        serde_json::to_string_pretty(self).map(|s| s + "\n").map_err(|e| format!("encoding JSON: {e}"))
    }

    /// Writes the JSON to the file `path`, atomically (a reader never sees half a file).
    pub(crate) fn write_json(&self, path: &std::path::Path) -> Result<(), String> {
        let text = self.to_json()?;
        let tmp = path.with_extension("json.part");
        std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// Reads a file written by `--json`.
    pub(crate) fn read_json(path: &std::path::Path) -> Result<Report, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let r: Report = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a `lanes bench --json` file: {e}", path.display()))?;
        if !r.format.is_empty() && !r.format.starts_with("lanes-bench/") {
            return Err(format!("{} is a {:?} file, not lanes-bench", path.display(), r.format));
        }
        Ok(r)
    }
}
