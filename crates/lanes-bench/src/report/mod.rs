//! The one report every benchmark fills: what `--json` writes, what `lanes bench --compare`
//! and `--from` read, what the tables and plots are drawn from.
//!
//! ```text
//! {"format": "lanes-bench/2",
//!  "benchmark": "paths" | "pingpong" | "wakeup" | "reflective" | "dma" | "sockets" | "udp-stream" | "ip",
//!  "machine": {"cpu_model", "cores", "kernel", "hostname", "date", "lanes_version"},
//!  "run": {...the run's parameters, per benchmark...},
//!  "units": {...what each figure means...},
//!  "rows": [{"key", "size", "title", "unit", "better",
//!            "lat_ns": {"avg", "min", "p50", "p99", "p999", "max", "samples", "max_at"},
//!            "values": {"name": number, ...}, "ratio", "status",
//!            "samples": {"series": [...]}, "detail": {...}}, ...],
//!  "detail": {...facts of the whole run, per benchmark...}}
//! ```
//!
//! A row is one thing measured (a path at a size, a program, a group size); it carries only
//! the fields that apply to it. The benchmarks' own facts go into `run`, the row's `detail`
//! and the report's `detail`, each written from a small typed struct and read back with
//! [`Report::run_as`], [`Row::detail_as`] and [`Report::detail_as`].

pub(crate) mod machine;

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub(crate) use machine::Machine;

use crate::measure::stats::LatencySummary;

/// The version of this format.
pub(crate) const FORMAT: &str = "lanes-bench/2";

/// Latency figures, in ns.
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
    /// When the worst one happened (UTC, ISO 8601), where recorded.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub max_at: String,
}

impl Lat {
    /// Nothing measured.
    pub(crate) fn is_empty(&self) -> bool {
        *self == Lat::default()
    }
}

impl From<LatencySummary> for Lat {
    fn from(s: LatencySummary) -> Lat {
        Lat {
            avg: s.avg,
            min: s.min,
            p50: s.p50,
            p99: s.p99,
            p999: s.p999,
            max: s.max,
            samples: s.samples as u64,
            max_at: String::new(),
        }
    }
}

/// One thing measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Row {
    /// What was measured: a path, a program, a variant.
    pub key: String,
    /// Message or transfer size in bytes, where the row has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<usize>,
    /// A longer name, for the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The unit of the row's main figures (`values`), where the row has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// `lower` or `higher`: which way is better.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub better: Option<String>,
    /// Latency, where measured.
    #[serde(skip_serializing_if = "Lat::is_empty")]
    pub lat_ns: Lat,
    /// Named figures.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, f64>,
    /// The row against what it is judged by (the units say which way round).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The verdict, where the row has one (`pass`, `fail`, `skipped`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Every measurement behind the figures, per series.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub samples: BTreeMap<String, Vec<Value>>,
    /// The benchmark's own facts about the row.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub detail: Map<String, Value>,
}

/// `v` as JSON; the benchmarks' facts are plain data that always encode.
pub(crate) fn to_value(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

impl Row {
    pub(crate) fn new(key: impl Into<String>) -> Row {
        Row { key: key.into(), ..Row::default() }
    }

    pub(crate) fn with_size(mut self, size: usize) -> Row {
        self.size = Some(size);
        self
    }

    pub(crate) fn with_title(mut self, title: impl Into<String>) -> Row {
        self.title = Some(title.into());
        self
    }

    pub(crate) fn with_lat(mut self, lat: impl Into<Lat>) -> Row {
        self.lat_ns = lat.into();
        self
    }

    pub(crate) fn with_value(mut self, name: &str, v: f64) -> Row {
        self.values.insert(name.to_string(), v);
        self
    }

    pub(crate) fn with_detail(mut self, name: &str, v: &impl Serialize) -> Row {
        self.set_detail(name, v);
        self
    }

    pub(crate) fn with_samples<T: Serialize>(mut self, series: &str, v: &[T]) -> Row {
        self.samples.insert(series.to_string(), v.iter().map(to_value).collect());
        self
    }

    pub(crate) fn set_detail(&mut self, name: &str, v: &impl Serialize) {
        self.detail.insert(name.to_string(), to_value(v));
    }

    /// The size, 0 where the row has none.
    pub(crate) fn size(&self) -> usize {
        self.size.unwrap_or(0)
    }

    /// The figure `name`, 0 where not measured.
    pub(crate) fn value(&self, name: &str) -> f64 {
        self.get(name).unwrap_or(0.0)
    }

    pub(crate) fn get(&self, name: &str) -> Option<f64> {
        self.values.get(name).copied()
    }

    /// The detail `name`, if there and of that type.
    pub(crate) fn detail_as<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.detail.get(name).and_then(|v| serde_json::from_value(v.clone()).ok())
    }
}

/// A whole run of one benchmark.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Report {
    pub format: String,
    /// Which benchmark measured (its name in the registry).
    pub benchmark: String,
    pub machine: Machine,
    /// How it was measured.
    pub run: Map<String, Value>,
    /// What each figure means.
    pub units: BTreeMap<String, String>,
    pub rows: Vec<Row>,
    /// Facts of the whole run.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub detail: Map<String, Value>,
}

impl Report {
    /// An empty report of `benchmark` measured on `machine`.
    pub(crate) fn new(benchmark: &str, machine: Machine) -> Report {
        Report { format: FORMAT.into(), benchmark: benchmark.into(), machine, ..Report::default() }
    }

    /// Sets the run's parameters from `run` (a struct or a map).
    pub(crate) fn set_run(&mut self, run: &impl Serialize) {
        self.run = match to_value(run) {
            Value::Object(m) => m,
            _ => Map::new(),
        };
    }

    /// The run's parameters as `T` (missing ones at their defaults).
    pub(crate) fn run_as<T: DeserializeOwned + Default>(&self) -> T {
        serde_json::from_value(Value::Object(self.run.clone())).unwrap_or_default()
    }

    pub(crate) fn set_units<'a>(&mut self, units: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.units = units.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    }

    pub(crate) fn set_detail(&mut self, name: &str, v: &impl Serialize) {
        self.detail.insert(name.to_string(), to_value(v));
    }

    /// The run's detail `name`, if there and of that type.
    pub(crate) fn detail_as<T: DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.detail.get(name).and_then(|v| serde_json::from_value(v.clone()).ok())
    }

    /// The row of `key` at `size`.
    pub(crate) fn get(&self, key: &str, size: usize) -> Option<&Row> {
        self.rows.iter().find(|r| r.key == key && r.size() == size)
    }

    /// Row keys in the order they first appear.
    pub(crate) fn keys(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for r in &self.rows {
            if !v.contains(&r.key) {
                v.push(r.key.clone());
            }
        }
        v
    }

    /// Sizes, ascending.
    pub(crate) fn sizes(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.rows.iter().filter_map(|r| r.size).collect();
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

    /// Reads a file written by a benchmark's `--json`.
    pub(crate) fn read_json(path: &std::path::Path) -> Result<Report, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let not_ours = |e: serde_json::Error| format!("{} is not a `lanes bench --json` file: {e}", path.display());
        let mut v: Value = serde_json::from_str(&text).map_err(not_ours)?;
        if v["format"] == FORMAT_1 {
            v = from_format_1(v);
        }
        let r: Report = serde_json::from_value(v).map_err(not_ours)?;
        if !r.format.is_empty() && r.format != FORMAT {
            return Err(format!("{} is a {:?} file, not {FORMAT}", path.display(), r.format));
        }
        Ok(r)
    }

    /// Reads a file written by `lanes bench --json` (the paths), refusing other benchmarks'.
    pub(crate) fn read_paths_json(path: &std::path::Path) -> Result<Report, String> {
        let r = Report::read_json(path)?;
        if !r.benchmark.is_empty() && r.benchmark != "paths" {
            return Err(format!("{} holds `{}` results, not `lanes bench`'s paths", path.display(), r.benchmark));
        }
        Ok(r)
    }
}

/// The format `lanes bench --json` wrote before every benchmark shared this one: the rows
/// were `results` of `{path, size, lat_ns, gbps, msgs_per_s, cpu_pct, ...}` and the details
/// (`floor_check`, `remote`, `targets`) sat at the top. `--compare` and `--from` still read it.
const FORMAT_1: &str = "lanes-bench/1";

/// A `lanes-bench/1` file in this format.
fn from_format_1(mut v: Value) -> Value {
    let mut out = Map::new();
    out.insert("format".into(), FORMAT.into());
    out.insert("benchmark".into(), "paths".into());
    let keep = |m: &mut Map<String, Value>, k: &str, x: Value| {
        if !x.is_null() {
            m.insert(k.to_string(), x);
        }
    };
    for k in ["machine", "run", "units"] {
        keep(&mut out, k, v[k].take());
    }
    let rows: Vec<Value> = match v["results"].take() {
        Value::Array(results) => results
            .into_iter()
            .map(|mut r| {
                let mut row = Map::new();
                for (to, from) in [("key", "path"), ("size", "size"), ("lat_ns", "lat_ns")] {
                    keep(&mut row, to, r[from].take());
                }
                let values: Map<String, Value> = ["gbps", "msgs_per_s", "cpu_pct", "cpu_pct_client", "cpu_pct_peer"]
                    .into_iter()
                    .map(|k| (k.to_string(), r[k].take()))
                    .filter(|(_, x)| x.is_number())
                    .collect();
                row.insert("values".into(), Value::Object(values));
                Value::Object(row)
            })
            .collect(),
        _ => Vec::new(),
    };
    out.insert("rows".into(), Value::Array(rows));
    let detail: Map<String, Value> = ["floor_check", "remote", "targets"]
        .into_iter()
        .map(|k| (k.to_string(), v[k].take()))
        .filter(|(_, x)| !x.is_null())
        .collect();
    out.insert("detail".into(), Value::Object(detail));
    Value::Object(out)
}

/// Writes to standard output; a reader that went away (`| head`) just ends the output.
pub(crate) fn say(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("writing the output: {e}")),
        _ => Ok(()),
    }
}

/// Prints the table (`table`), and the JSON to a file or (`-`) to standard output instead.
/// (`lanes bench`'s path comparison and `bench sockets` print progress and file names around
/// their JSON, so they write their own.)
pub(crate) fn emit(report: &Report, table: impl Fn(&Report), json: Option<&std::path::Path>) -> Result<(), String> {
    match json {
        Some(p) if p.as_os_str() == "-" => say(&report.to_json()?),
        Some(p) => {
            table(report);
            std::fs::write(p, report.to_json()?).map_err(|e| format!("writing {}: {e}", p.display()))
        }
        None => {
            table(report);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_json_and_the_earlier_format() {
        let dir = std::env::temp_dir().join(format!("lanes-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut r = Report::new("paths", Machine::default());
        r.rows.push(Row::new("pio").with_size(8).with_lat(Lat { avg: 100.0, samples: 3, ..Lat::default() }));
        r.rows.push(Row::new("tcp").with_size(8).with_value("gbps", 1.5));
        r.set_detail("floor_check", &serde_json::json!({"ratio": 1.0}));
        let now = dir.join("now.json");
        r.write_json(&now).unwrap();
        assert_eq!(Report::read_json(&now).unwrap(), r);

        let old = dir.join("old.json");
        let v1 = serde_json::json!({"format": "lanes-bench/1", "run": {"rounds": 2},
            "results": [{"path": "pio", "size": 8, "lat_ns": {"avg": 100.0, "samples": 3}, "gbps": 0.0},
                        {"path": "tcp", "size": 8, "gbps": 1.5}],
            "floor_check": {"ratio": 1.0}});
        std::fs::write(&old, v1.to_string()).unwrap();
        let o = Report::read_json(&old).unwrap();
        assert_eq!((o.format.as_str(), o.benchmark.as_str()), (FORMAT, "paths"));
        assert_eq!(o.get("pio", 8).unwrap().lat_ns.avg, 100.0);
        assert_eq!(o.get("tcp", 8).unwrap().value("gbps"), 1.5);
        assert_eq!(o.run["rounds"], 2);
        assert_eq!(o.detail["floor_check"]["ratio"], 1.0);

        let other = dir.join("other.json");
        std::fs::write(&other, serde_json::json!({"format": FORMAT, "benchmark": "dma", "rows": []}).to_string())
            .unwrap();
        assert!(Report::read_paths_json(&other).unwrap_err().contains("`dma` results"));
        assert_eq!(Report::read_json(&other).unwrap().benchmark, "dma");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
