//! What `lanes bench` records about a run besides its rows (report::Row, one per path and
//! size): the run's parameters, the units, and the details of --check-floor and of a run
//! across hosts. They go into the report's `run`, `units` and `detail`.
//!
//! ```text
//! "run": {"paths", "sizes", "duration_s", "elapsed_s", "rounds", "quick", "interrupted",
//!         "cpus", "lat_slice_ms", "tput_slice_ms", "rt", "rt_client", "rt_peer"},
//! "rows": [{"key": "pio", "size": 8,
//!           "lat_ns": {"avg", "min", "p50", "p99", "p999", "max", "samples", "max_at"},
//!           "values": {"gbps", "msgs_per_s", "cpu_pct", "cpu_pct_client", "cpu_pct_peer"}}, ...],
//! "detail": {"floor_check": {...},     only with --check-floor
//!            "remote": {...},          only across hosts
//!            "targets": [...]}         only across hosts
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::measure::rt::RtStatus;

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "paths";

/// What each figure means; written into every JSON file.
pub(crate) fn units() -> BTreeMap<String, String> {
    [
        ("lat_ns", "one-way latency in nanoseconds: a ping-pong round trip / 2, every round trip recorded; percentiles within 1%"),
        ("lat_ns.max_at", "when the worst round trip happened, UTC"),
        ("values.gbps", "throughput in GB/s = 1e9 bytes of payload per second, one direction, every message copied out by the receiver"),
        ("values.msgs_per_s", "messages per second of the same throughput run"),
        ("values.cpu_pct", "CPU time (user + system) of both processes during the throughput run / wall time x 100: 100 = one core busy, 200 = two"),
        ("values.cpu_pct_client", "the sending process's share of values.cpu_pct"),
        ("values.cpu_pct_peer", "the receiving process's share of values.cpu_pct"),
        ("size", "message size in bytes"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
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
