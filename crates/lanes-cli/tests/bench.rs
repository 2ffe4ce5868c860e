//! `lanes bench` as a user runs it: a quick run writes valid JSON with every available path
//! and size and non-empty plots; `--compare`, `--hist`, `--check-floor` and `--rt` work;
//! bad arguments fail clearly. Every run is bounded in time; nothing asserts on speed
//! (the machine is two shared cores).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lanes_testkit::program::{run_to_end, Finished};
use lanes_testkit::TestDir;
use serde_json::Value;

const LANES: &str = env!("CARGO_BIN_EXE_lanes");
const SPIN_FLOOR: &str = env!("CARGO_BIN_EXE_lanes-spin-floor");

/// This file's scratch directories: where they live, and the command run in them.
trait Dir {
    fn here(name: &str) -> Self;
    fn lanes(&self, args: &[&str]) -> Command;
}

impl Dir for TestDir {
    fn here(name: &str) -> Self {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        TestDir::under(&base, "lanes-bench-test", name)
    }

    fn lanes(&self, args: &[&str]) -> Command {
        let mut c = Command::new(LANES);
        c.arg("bench")
            .args(args)
            .env("LANES_DIR", self.path("fabric"))
            .env("LANES_SPIN_FLOOR", SPIN_FLOOR)
            .env_remove("LANES_NODE_ID")
            .env_remove("LANES_CONFIG");
        c
    }
}

/// Runs `lanes bench`, which must end within `limit`; output is drained while it runs.
fn run(cmd: Command, limit: Duration) -> Finished {
    run_to_end(cmd, "lanes bench", limit)
}

fn must_pass(r: Finished) -> Finished {
    assert!(r.ok(), "lanes bench failed\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    r
}

/// Available paths, from `--paths list`.
fn available_paths(d: &TestDir) -> Vec<String> {
    let r = must_pass(run(d.lanes(&["--paths", "list"]), Duration::from_secs(30)));
    let names: Vec<String> = r
        .stdout
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("available"))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    for expected in ["floor", "pio", "data-interrupt", "dma", "tcp", "unix"] {
        assert!(names.iter().any(|n| n == expected), "{expected} not listed as available:\n{}", r.stdout);
    }
    assert!(r.stdout.contains("sockets"), "sockets missing from the list:\n{}", r.stdout);
    names
}

fn positive(v: &Value, what: &str) -> f64 {
    let x = v.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{what} = {x}");
    x
}

fn check_png(p: &Path) {
    let b = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(b.len() > 1000, "{} is tiny", p.display());
    assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n", "{} is not a PNG", p.display());
}

fn check_svg(p: &Path) {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(s.contains("<svg") && s.trim_end().ends_with("</svg>"), "{} is not an SVG", p.display());
    assert!(s.contains("<polyline") || s.contains("<path"), "{} has no lines", p.display());
}

#[test]
fn quick_run_writes_json_with_every_path_and_size_and_plots() {
    let d = TestDir::here("quick");
    let paths = available_paths(&d);
    let json = d.path("a.json");
    let plots = d.path("plots");
    let r = must_pass(run(
        d.lanes(&["--quick", "--json", json.to_str().unwrap(), "--plot", plots.to_str().unwrap()]),
        Duration::from_secs(240),
    ));
    assert!(r.stdout.contains("lat avg") && r.stdout.contains("GB/s"), "no table:\n{}", r.stdout);
    assert!(r.stdout.contains("latency vs") && r.stdout.contains("throughput vs"), "no ratios:\n{}", r.stdout);

    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("valid JSON");
    let m = &v["machine"];
    assert!(m["cpu_model"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
    assert!(m["kernel"].as_str().is_some_and(|s| !s.is_empty()), "{m}");
    assert!(m["date"].as_str().is_some_and(|s| s.ends_with('Z')), "{m}");
    positive(&m["cores"], "machine.cores");
    assert_eq!((v["format"].as_str(), v["benchmark"].as_str()), (Some("lanes-bench/2"), Some("paths")), "{v}");
    assert!(v["units"]["values.gbps"].as_str().is_some_and(|s| s.contains("1e9")), "{}", v["units"]);
    let results = v["rows"].as_array().expect("rows");
    let sizes = [4u64, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576];
    for p in &paths {
        for s in sizes {
            let found = results.iter().find(|r| r["key"] == p.as_str() && r["size"] == s);
            // Data interrupts carry at most 4 KiB: larger sizes are skipped, not measured.
            if p == "data-interrupt" && s > 4096 {
                assert!(found.is_none(), "data-interrupt measured at {s} bytes");
                continue;
            }
            let r = found.unwrap_or_else(|| panic!("no result for {p} at {s}"));
            let what = format!("{p}@{s}");
            let l = &r["lat_ns"];
            let (min, avg, p50, p99, max) = (
                positive(&l["min"], &format!("{what} min")),
                positive(&l["avg"], &format!("{what} avg")),
                positive(&l["p50"], &format!("{what} p50")),
                positive(&l["p99"], &format!("{what} p99")),
                positive(&l["max"], &format!("{what} max")),
            );
            assert!(min <= avg && avg <= max && min <= p50 && p50 <= p99 && p99 <= max, "{what}: {l}");
            assert!(l["samples"].as_u64().is_some_and(|n| n >= 1), "{what}: {l}");
            assert!(l["max_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{what}: {l}");
            let x = &r["values"];
            positive(&x["gbps"], &format!("{what} gbps"));
            positive(&x["msgs_per_s"], &format!("{what} msgs_per_s"));
            let cpu = positive(&x["cpu_pct"], &format!("{what} cpu_pct"));
            assert!(cpu < 1000.0, "{what} cpu_pct {cpu}");
            let gb = x["gbps"].as_f64().unwrap() * 1e9 / s as f64;
            let rate = x["msgs_per_s"].as_f64().unwrap();
            assert!((gb - rate).abs() <= rate * 1e-6, "{what}: gbps and msgs_per_s disagree");
        }
    }
    for stem in ["bench-throughput", "bench-latency"] {
        check_png(&plots.join(format!("{stem}.png")));
        check_svg(&plots.join(format!("{stem}.svg")));
    }

    // --from: the table and the plots again, from the file.
    let replot = d.path("replot");
    let f = must_pass(run(
        d.lanes(&["--from", json.to_str().unwrap(), "--plot", replot.to_str().unwrap()]),
        Duration::from_secs(60),
    ));
    assert!(f.stdout.contains("lat avg") && f.stdout.contains("latency vs"), "{}", f.stdout);
    check_png(&replot.join("bench-latency.png"));
    check_svg(&replot.join("bench-throughput.svg"));

    // --compare: the run against a copy with PIO latency doubled and TCP throughput halved.
    let mut b = v.clone();
    for r in b["rows"].as_array_mut().unwrap() {
        if r["key"] == "pio" {
            let avg = r["lat_ns"]["avg"].as_f64().unwrap();
            r["lat_ns"]["avg"] = (avg * 2.0).into();
        }
        if r["key"] == "tcp" {
            let g = r["values"]["gbps"].as_f64().unwrap();
            r["values"]["gbps"] = (g / 2.0).into();
        }
    }
    let bpath = d.path("b.json");
    std::fs::write(&bpath, serde_json::to_string(&b).unwrap()).unwrap();
    let c = must_pass(run(
        d.lanes(&["--compare", json.to_str().unwrap(), bpath.to_str().unwrap()]),
        Duration::from_secs(30),
    ));
    let pio_line = c.stdout.lines().find(|l| l.contains(" pio ")).expect("a pio row");
    assert!(pio_line.contains("2.00x") && pio_line.contains("worse"), "{}", c.stdout);
    let tcp_line = c.stdout.lines().find(|l| l.contains(" tcp ")).expect("a tcp row");
    assert!(tcp_line.contains("0.50x") && tcp_line.contains("worse"), "{}", c.stdout);
    let pairs = results.len();
    assert_eq!(
        pairs,
        paths.len() * sizes.len() - sizes.iter().filter(|&&s| s > 4096).count(),
        "data-interrupt stops at 4 KiB"
    );
    assert!(c.stdout.contains(&format!("{pairs} path-size pairs compared")), "{}", c.stdout);
}

#[test]
fn short_run_prints_histograms_and_checks_the_floor() {
    let d = TestDir::here("short");
    let r = must_pass(run(
        d.lanes(&[
            "--paths",
            "floor,tcp",
            "--sizes",
            "8,64",
            "--duration",
            "2s",
            "--hist",
            "--check-floor",
            "--json",
            "-",
        ]),
        Duration::from_secs(120),
    ));
    // JSON on stdout, the table and the rest on stderr.
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(v["rows"].as_array().unwrap().len(), 4);
    let f = &v["detail"]["floor_check"];
    positive(&f["ratio"], "floor_check.ratio");
    positive(&f["floor_ns"], "floor_check.floor_ns");
    positive(&f["independent_ns"], "floor_check.independent_ns");
    assert!(r.stderr.contains("floor vs independent spin: "), "{}", r.stderr);
    assert!(
        r.stderr.contains("floor latency histograms") && r.stderr.contains("tcp latency histograms"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("best ") && r.stderr.contains("worst ") && r.stderr.contains("p99.9"), "{}", r.stderr);
}

#[test]
fn rt_mode_runs_and_says_what_it_got() {
    let d = TestDir::here("rt");
    let json = d.path("rt.json");
    let r = must_pass(run(
        d.lanes(&["--rt", "--paths", "pio", "--sizes", "64", "--duration", "1s", "--json", json.to_str().unwrap()]),
        Duration::from_secs(120),
    ));
    assert!(r.stderr.contains("real-time mode"), "{}", r.stderr);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["run"]["rt"], true);
    for side in ["rt_client", "rt_peer"] {
        assert!(v["run"][side]["sched_fifo"].is_boolean(), "{side}: {}", v["run"]);
        assert!(v["run"][side]["mlockall"].is_boolean(), "{side}: {}", v["run"]);
    }
}

#[test]
fn bad_arguments_fail_clearly() {
    let d = TestDir::here("bad");
    let notjson = d.path("not.json");
    std::fs::write(&notjson, "hello").unwrap();
    let missing = d.path("missing.json");
    let (nj, mi) = (notjson.to_str().unwrap(), missing.to_str().unwrap());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--paths", "bogus"], "unknown path \"bogus\""),
        // (LANES_SOCKETS_LIB points nowhere below, so the library is never found.)
        (vec!["--paths", "pio,sockets"], "path sockets is not available (LANES_SOCKETS_LIB="),
        (vec!["--paths", ","], "names no path"),
        (vec!["--sizes", "6"], "bad message size 6"),
        (vec!["--sizes", "abc"], "bad size"),
        (vec!["--sizes", "128M"], "bad message size"),
        (vec!["--duration", "10x"], "bad duration"),
        (vec!["--duration", "0s"], "too short"),
        (vec!["--cpu", "0,0"], "two different CPUs"),
        (vec!["--cpu", "x"], "--cpu wants two CPUs"),
        (vec!["--compare", mi, mi], "reading"),
        (vec!["--compare", nj, nj], "is not a `lanes bench --json` file"),
        (vec!["--compare", nj], "2 values required"),
        (vec!["--compare", nj, nj, "--quick"], "cannot be used with"),
        (vec!["--from", mi], "reading"),
        (vec!["--from", nj, "--sizes", "8"], "cannot be used with"),
    ];
    for (args, expect) in cases {
        let mut cmd = d.lanes(&args);
        cmd.env("LANES_SOCKETS_LIB", d.path("no-such-dir/liblanes_sockets.so"));
        let r = run(cmd, Duration::from_secs(30));
        assert!(!r.ok(), "{args:?} succeeded:\n{}", r.stdout);
        assert!(r.stderr.contains(expect), "{args:?}: expected {expect:?} in:\n{}", r.stderr);
    }
}

#[test]
fn compare_refuses_runs_with_nothing_in_common() {
    let d = TestDir::here("disjoint");
    let result = |path: &str| {
        serde_json::json!({"format": "lanes-bench/2", "benchmark": "paths", "rows": [{"key": path, "size": 8,
            "lat_ns": {"avg": 100.0, "p99": 120.0}, "values": {"gbps": 1.0, "msgs_per_s": 1.25e8, "cpu_pct": 200.0}}]})
    };
    let (a, b) = (d.path("a.json"), d.path("b.json"));
    std::fs::write(&a, result("floor").to_string()).unwrap();
    std::fs::write(&b, result("tcp").to_string()).unwrap();
    let r = run(d.lanes(&["--compare", a.to_str().unwrap(), b.to_str().unwrap()]), Duration::from_secs(30));
    assert!(!r.ok() && r.stderr.contains("no path and size in common"), "{}", r.stderr);
    let empty = d.path("empty.json");
    std::fs::write(&empty, r#"{"rows": []}"#).unwrap();
    let r = run(d.lanes(&["--compare", a.to_str().unwrap(), empty.to_str().unwrap()]), Duration::from_secs(30));
    assert!(!r.ok() && r.stderr.contains("holds no results"), "{}", r.stderr);
}

#[test]
fn from_prints_any_benchmarks_report_as_its_table() {
    let d = TestDir::here("from-other");
    let file = d.path("reflective.json");
    let report = serde_json::json!({"format": "lanes-bench/2", "benchmark": "reflective",
        "run": {"cpus": 2, "rounds": 10, "nodes": 2},
        "rows": [{"key": "reflective", "lat_ns": {"avg": 300.0, "min": 200.0, "p50": 290.0, "p99": 350.0, "max": 400.0},
                  "detail": {"nodes": 2, "oversubscribed": false}}]});
    std::fs::write(&file, report.to_string()).unwrap();
    let r = must_pass(run(d.lanes(&["--from", file.to_str().unwrap()]), Duration::from_secs(30)));
    assert!(r.stdout.contains("reflective memory") && r.stdout.contains("300.0"), "{}", r.stdout);
    let plots = d.path("plots");
    let r =
        run(d.lanes(&["--from", file.to_str().unwrap(), "--plot", plots.to_str().unwrap()]), Duration::from_secs(30));
    assert!(!r.ok() && r.stderr.contains("is a `reflective` run"), "{}", r.stderr);
    let r = run(d.lanes(&["--compare", file.to_str().unwrap(), file.to_str().unwrap()]), Duration::from_secs(30));
    assert!(!r.ok() && r.stderr.contains("not `lanes bench`'s paths"), "{}", r.stderr);
}
