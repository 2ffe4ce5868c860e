//! The socket accelerator's side of the `lanes` command: `lanes run` (errors, the preload
//! list, options), `lanes status` and `lanes cleanup` with their `sockets` keys, and
//! `lanes bench sockets` (valid JSON with every row, and no program left running, even when
//! `lanes` is stopped or killed mid-run). Every wait is bounded.
//!
//! `liblanes_sockets.so` is built by `cargo build -p lanes-sockets` (or `--workspace`), not by
//! `cargo test -p lanes-cli`; tests that need it say so and check what they can without it.
//! The programs `lanes bench sockets` drives come from `apt-get install sockperf iperf3
//! redis-server redis-tools`; without them the bench test checks the rows are skipped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lanes_testkit::program::{run_to_end, Finished, Program};
use lanes_testkit::TestDir;
use serde_json::Value;

const LANES: &str = env!("CARGO_BIN_EXE_lanes");
const LIBRARY: &str = "liblanes_sockets.so";

/// This file's scratch directories: where they live, and the command run in them.
trait Dir {
    fn here(name: &str) -> Self;
    fn lanes(&self, args: &[&str]) -> Command;
}

impl Dir for TestDir {
    fn here(name: &str) -> Self {
        TestDir::under(&std::env::temp_dir(), "lanes-sockets-cli", name)
    }

    fn lanes(&self, args: &[&str]) -> Command {
        let mut c = Command::new(LANES);
        c.args(args)
            .env("LANES_DIR", self.path("fabric"))
            .env("LANES_NO_PROGRESS", "1")
            .env_remove("LANES_NODE_ID")
            .env_remove("LANES_CONFIG")
            .env_remove("LD_PRELOAD")
            .env_remove("LANES_SOCKETS_LIB");
        c
    }
}

/// Runs a `lanes` command, which must end within `limit`.
fn run(c: Command, limit: Duration) -> Finished {
    run_to_end(c, "lanes", limit)
}

/// The library `lanes` finds by itself (beside the binary), if it has been built.
fn built_library() -> Option<PathBuf> {
    let p = Path::new(LANES).parent()?.join(LIBRARY);
    p.is_file().then(|| std::fs::canonicalize(&p).expect("canonical path"))
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

#[test]
fn run_reports_a_missing_program_with_127() {
    let d = TestDir::here("missing");
    for (prog, says) in [("lanes-no-such-program-xyz", "command not found"), ("./no/such/dir/prog", "no such file")] {
        let out = run(d.lanes(&["run", prog, "--an-argument"]), Duration::from_secs(20));
        assert_eq!(out.code(), Some(127), "{prog}: {}", out.stderr);
        let err = &out.stderr;
        assert!(err.contains(prog) && err.contains(says), "{prog}: {err}");
    }
}

#[test]
fn run_puts_the_library_first_and_keeps_the_rest() {
    let d = TestDir::here("preload");
    // The real library when it is built; otherwise any file stands in (the loader then
    // complains on stderr and runs the shell anyway).
    let lib = built_library().unwrap_or_else(|| {
        let p = d.path(LIBRARY);
        std::fs::write(&p, b"not a library").unwrap();
        std::fs::canonicalize(p).unwrap()
    });
    let mut c = d.lanes(&["run", "--", "sh", "-c", "echo \"$LD_PRELOAD|${LANES_SOCKETS-unset}\""]);
    c.env("LANES_SOCKETS_LIB", &lib).env("LD_PRELOAD", "libc.so.6");
    let out = run(c, Duration::from_secs(20));
    assert!(out.ok(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), format!("{}:libc.so.6|unset", lib.display()));

    // Options become the library's environment; the exit status is the program's own.
    let mut c = d.lanes(&[
        "run",
        "--no-accel",
        "--include",
        "5201,8000-8100",
        "--exclude",
        "22",
        "--poll-us",
        "7",
        "--ring",
        "64K",
        "sh",
        "-c",
        "echo $LD_PRELOAD $LANES_SOCKETS $LANES_SOCKETS_INCLUDE $LANES_SOCKETS_EXCLUDE $LANES_POLL_US $LANES_SOCKETS_RING; exit 3",
    ]);
    c.env("LANES_SOCKETS_LIB", &lib).env("LD_PRELOAD", format!("{}", lib.display()));
    let out = run(c, Duration::from_secs(20));
    assert_eq!(out.code(), Some(3), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), format!("{} 0 5201,8000-8100 22 7 65536", lib.display()));

    let mut c = d.lanes(&["run", "--include", "0", "true"]);
    c.env("LANES_SOCKETS_LIB", &lib);
    let out = run(c, Duration::from_secs(20));
    assert_eq!(out.code(), Some(2));
    assert!(out.stderr.contains("--include"), "{}", out.stderr);
}

#[test]
fn run_finds_the_library_beside_itself_or_says_how_to_build_it() {
    let d = TestDir::here("lookup");
    let out = run(d.lanes(&["run", "sh", "-c", "echo $LD_PRELOAD"]), Duration::from_secs(20));
    match built_library() {
        Some(lib) => {
            assert!(out.ok(), "{}", out.stderr);
            assert_eq!(out.stdout.trim(), lib.display().to_string());
        }
        None => {
            assert!(!out.ok());
            let err = &out.stderr;
            assert!(err.contains("cargo build -p lanes-sockets") && err.contains("LANES_SOCKETS_LIB"), "{err}");
        }
    }
    let mut c = d.lanes(&["run", "true"]);
    c.env("LANES_SOCKETS_LIB", d.path("nowhere/liblanes_sockets.so"));
    let out = run(c, Duration::from_secs(20));
    assert!(!out.ok());
    assert!(out.stderr.contains("LANES_SOCKETS_LIB="), "{}", out.stderr);
}

#[test]
fn status_and_cleanup_have_a_sockets_key() {
    let d = TestDir::here("status");
    let out = run(d.lanes(&["status", "--json"]), Duration::from_secs(20));
    assert!(out.ok(), "{}", out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout_bytes).expect("status --json is JSON");
    assert!(v["sockets"].as_array().is_some_and(|s| s.is_empty()), "{v}");
    assert!(v["segments"].is_array() && v["nodes"].is_array(), "{v}");
    let out = run(d.lanes(&["status"]), Duration::from_secs(20));
    assert!(out.stdout.contains("accelerated sockets"), "{}", out.stdout);
    let out = run(d.lanes(&["cleanup", "--json"]), Duration::from_secs(20));
    assert!(out.ok(), "{}", out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout_bytes).expect("cleanup --json is JSON");
    assert_eq!(v["sockets"], 0, "{v}");
}

/// Pids of live processes that `lanes bench sockets` with pid `owner` started.
fn started_by(owner: u32) -> Vec<u32> {
    let mark = format!("LANES_BENCH_SOCKETS_OWNER={owner}");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // Zombies are dead already (their parent reaps them).
            let zombie = state.rsplit(')').next().is_some_and(|s| s.trim_start().starts_with('Z'));
            !zombie && env.split(|&b| b == 0).any(|kv| kv == mark.as_bytes())
        })
        .collect()
}

/// Waits at most `limit` for `lanes` (`p`) to end (the test fails here, with its output, if
/// it does not), then up to 10 s for every program it started to end too: its output, and
/// the pids of those still running. They are looked for before the Program's group is
/// killed, which would end them in its stead.
fn wait_lanes(mut p: Program, limit: Duration) -> (Finished, Vec<u32>) {
    let owner = p.pid();
    let mut left = Vec::new();
    if p.wait_exit(limit).is_some() {
        let start = Instant::now();
        loop {
            left = started_by(owner);
            if left.is_empty() || start.elapsed() >= Duration::from_secs(10) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    (p.finish(Duration::ZERO), left)
}

const PROGRAMS: [&str; 4] = ["sockperf", "iperf3", "redis-server", "redis-benchmark"];
const ROWS: [&str; 14] = [
    "sockperf-latency",
    "sockperf-throughput",
    "sockperf-udp-latency",
    "sockperf-udp-throughput",
    "mcast-fanout",
    "dds-pingpong",
    "iperf3",
    "redis-get",
    "pingpong",
    "pingpong-hog",
    "pgbench-tpcb",
    "pgbench-select",
    "nginx",
    "nginx-close",
];

#[test]
fn bench_sockets_quick_writes_every_row() {
    let d = TestDir::here("bench");
    let json = d.path("s.json");
    let mut c = d.lanes(&["bench", "sockets", "--quick", "--json", json.to_str().unwrap()]);
    if let Some(lib) = built_library() {
        c.env("LANES_SOCKETS_LIB", lib);
    }
    let (out, left) = wait_lanes(Program::spawn(c, "lanes bench sockets --quick"), Duration::from_secs(300));
    assert!(out.ok(), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert!(left.is_empty(), "still running after lanes ended: {left:?}");
    let table = out.stdout;
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("valid JSON");
    assert_eq!((v["format"].as_str(), v["benchmark"].as_str()), (Some("lanes-bench/2"), Some("sockets")), "{v}");
    assert_eq!(v["run"]["rounds"], 2, "{}", v["run"]);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.iter().map(|r| r["key"].as_str().unwrap()).collect::<Vec<_>>(), ROWS);
    let have_programs = PROGRAMS.iter().all(|p| on_path(p));
    for r in rows {
        let key = r["key"].as_str().unwrap();
        assert!(table.contains(r["title"].as_str().unwrap()), "{key} missing from the table:\n{table}");
        assert!(r["detail"]["target"].as_f64().is_some_and(|t| t >= 1.0), "{r}");
        if r["status"] == "skipped" {
            // A skipped row says which program is missing (PostgreSQL, nginx and wrk are
            // not always installed); the rows whose programs exist ran.
            assert!(r["detail"]["note"].as_str().is_some_and(|n| n.contains("apt-get install")), "{r}");
            continue;
        }
        if !have_programs && !key.starts_with("pingpong") {
            // Skipped rows say which program is missing; rows whose programs exist still ran.
            if r["status"] == "skipped" {
                assert!(r["detail"]["note"].as_str().is_some_and(|n| n.contains("apt-get install")), "{r}");
            }
            continue;
        }
        let kernel = r["values"]["kernel"].as_f64().unwrap_or_else(|| panic!("{key}: no kernel figure: {r}"));
        assert!(kernel.is_finite() && kernel > 0.0, "{r}");
        assert_eq!(r["samples"]["kernel"].as_array().map(Vec::len), Some(2), "{r}");
        if v["run"]["library"].is_string() {
            // With the library: both figures, the ratio and a verdict (speed is not asserted:
            // the machine is shared).
            let lanes = r["values"]["lanes"].as_f64().unwrap_or_else(|| panic!("{key}: no lanes figure: {r}"));
            assert!(lanes.is_finite() && lanes > 0.0, "{r}");
            assert!(r["ratio"].as_f64().is_some_and(|x| x > 0.0), "{r}");
            assert!(r["status"] == "pass" || r["status"] == "fail", "{r}");
        } else {
            assert_eq!(r["status"], "kernel only", "{r}");
            assert!(v["run"]["library_missing"].as_str().is_some_and(|m| m.contains(LIBRARY)), "{}", v["run"]);
        }
    }
    if !have_programs {
        eprintln!("note: not all of {PROGRAMS:?} are installed; the rows that need them were checked as skipped");
    }
}

/// Starts a long redis row and waits until its server is up.
fn start_long_bench(d: &TestDir) -> Option<Program> {
    if !on_path("redis-server") || !on_path("redis-benchmark") {
        eprintln!("note: redis-server or redis-benchmark missing; skipped");
        return None;
    }
    let mut c = d.lanes(&["bench", "sockets", "--only", "redis-get", "--seconds", "30", "--rounds", "5"]);
    if let Some(lib) = built_library() {
        c.env("LANES_SOCKETS_LIB", lib);
    }
    let lanes = Program::spawn(c, "lanes bench sockets --only redis-get");
    let owner = lanes.pid();
    let start = Instant::now();
    while started_by(owner).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(30), "lanes bench sockets started nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    Some(lanes)
}

#[test]
fn bench_sockets_stops_its_programs_when_stopped_or_killed() {
    let d = TestDir::here("stop");
    // SIGTERM: lanes stops what it started, then exits with an error.
    let Some(lanes) = start_long_bench(&d) else { return };
    lanes.signal(libc::SIGTERM);
    let (out, left) = wait_lanes(lanes, Duration::from_secs(30));
    assert!(!out.ok());
    assert!(left.is_empty(), "still running after lanes ended: {left:?}");
    // SIGKILL: lanes cannot act; the kernel ends its programs (parent-death signal).
    let Some(lanes) = start_long_bench(&d) else { return };
    assert!(lanes.signal(libc::SIGKILL), "kill");
    let (_, left) = wait_lanes(lanes, Duration::from_secs(30));
    assert!(left.is_empty(), "still running after lanes ended: {left:?}");
}
