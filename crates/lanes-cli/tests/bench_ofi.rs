//! `lanes bench --transport ofi --remote-node N` end to end on two loopback hosts: a cluster
//! configuration with hosts a (node 8) and b (node 12) on 127.0.0.1, a `lanes daemon` per
//! host, `lanes bench --serve --once` as node 8, a short client run as node 12. Checks that
//! every row was measured (each ofi path at each size it carries, fi_pingpong per size and
//! at 1 MiB, iperf3) and that the targets printed and written agree with the figures they
//! compare. Nothing asserts on speed: the ratios are whatever the machine gives.
//!
//! Without the ofi transport (`--features lanes/ofi`) the client must refuse clearly.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lanes_testkit::program::{run_to_end, Finished, Program};
use lanes_testkit::{free_ports, TestDir};
use serde_json::Value;

const LANES: &str = env!("CARGO_BIN_EXE_lanes");
const HOSTS: [(&str, u32); 2] = [("a", 8), ("b", 12)];

fn have(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// A `lanes` command on host `h` of the cluster in `dir`.
fn on(dir: &Path, h: &str, args: &[&str]) -> Command {
    let mut c = Command::new(LANES);
    c.args(args)
        .env("LANES_CONFIG", dir.join("lanes.toml"))
        .env("LANES_HOST", h)
        .env("LANES_DIR", dir.join(h))
        .env("LANES_NO_PROGRESS", "1")
        .env_remove("LANES_NODE_ID");
    c
}

fn write_config(dir: &Path) {
    let mut text = "[cluster]\nprovider = \"tcp;ofi_rxm\"\nheartbeat_ms = 50\nsuspect_after_ms = 1000\n".to_string();
    for ((h, node), port) in HOSTS.into_iter().zip(free_ports(HOSTS.len())) {
        text += &format!("[[node]]\nid = {node}\nhost = \"{h}\"\naddress = \"127.0.0.1:{port}\"\n");
        std::fs::create_dir_all(dir.join(h)).expect("fabric dir");
    }
    std::fs::write(dir.join("lanes.toml"), text).expect("lanes.toml");
}

/// Runs a `lanes` command, which must end within `limit`.
fn run(c: Command, limit: Duration) -> Finished {
    run_to_end(c, "lanes", limit)
}

/// Until `lanes status` on host `h` shows the other host operational.
fn wait_operational(dir: &Path, h: &str, other: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = run(on(dir, h, &["status"]), Duration::from_secs(10));
        let t = &out.stdout;
        if t.lines().any(|l| l.trim_start().starts_with(other) && l.contains("operational")) {
            return;
        }
        assert!(Instant::now() < deadline, "host {h} never saw {other} operational:\n{t}{}", out.stderr);
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ofi_bench_between_two_loopback_hosts() {
    let base = std::env::temp_dir();
    let dir = TestDir::under(&base, "lanes-bench-ofi", "lo");
    write_config(&dir.0);
    if !lanes::OFI_TRANSPORT {
        let out = run(on(&dir.0, "b", &["bench", "--transport", "ofi", "--remote-node", "8"]), Duration::from_secs(30));
        assert!(!out.ok());
        let e = &out.stderr;
        assert!(e.contains("no ofi transport"), "{e}");
        return;
    }
    for p in ["fi_pingpong", "iperf3"] {
        if !have(p) {
            assert!(std::env::var_os("CI").is_none(), "{p} is missing; CI installs it (scripts/test.sh)");
            eprintln!("skipping: {p} is not installed");
            return;
        }
    }
    let _daemons: Vec<Program> =
        HOSTS.iter().map(|(h, _)| Program::spawn(on(&dir.0, h, &["daemon"]), &format!("lanes daemon ({h})"))).collect();
    wait_operational(&dir.0, "a", "b");
    wait_operational(&dir.0, "b", "a");
    let port = free_ports(1)[0].to_string();
    let mut serve = on(&dir.0, "a", &["bench", "--serve", "--once", "--port", &port]);
    serve.env("LANES_NODE_ID", "8");
    let server = Program::spawn(serve, "lanes bench --serve");
    let json = dir.path("run.json");
    let json_arg = json.to_str().expect("utf-8").to_string();
    let client = || {
        #[rustfmt::skip]
        let args = [
            "bench", "--transport", "ofi", "--remote-node", "8", "--port", &port, "--sizes", "4,64",
            "--rounds", "1", "--slice", "150ms", "--stream-secs", "1", "--fi-iters", "200", "--json", &json_arg,
        ];
        let mut c = on(&dir.0, "b", &args);
        c.env("LANES_NODE_ID", "12");
        c
    };
    // The server may need a moment before it listens (a probe would be its one client).
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = run(client(), Duration::from_secs(240));
        if out.ok() || !out.stderr.contains("Connection refused") || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = &out.stdout;
    assert!(out.ok(), "client failed\nstdout:\n{stdout}\nstderr:\n{}", out.stderr);
    let served = server.finish(Duration::from_secs(30));
    assert!(served.ok(), "server: {}", served.stderr);

    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON")).expect("valid JSON");
    let results = r["rows"].as_array().expect("rows");
    let row = |path: &str, size: u64| {
        results
            .iter()
            .find(|x| x["key"] == path && x["size"].as_u64() == Some(size))
            .unwrap_or_else(|| panic!("no {path} row at {size} B\n{stdout}"))
    };
    let f = |v: &Value| v.as_f64().expect("a number");
    const MIB: u64 = 1 << 20;
    // Every row measured: latency paths at each size they carry, DMA and the baselines.
    for (path, max) in [("ofi-interrupt", 8), ("ofi-dataint", 4096), ("ofi-pio", u64::MAX)] {
        for size in [4, 64].into_iter().filter(|&s| s <= max) {
            let x = row(path, size);
            assert!(x["lat_ns"]["samples"].as_u64().unwrap_or(0) > 0, "{path} at {size}: {x}");
            assert!(f(&x["lat_ns"]["avg"]) > 0.0, "{path} at {size}: {x}");
        }
    }
    assert!(results.iter().all(|x| !(x["key"] == "ofi-interrupt" && x["size"].as_u64() > Some(8))));
    let dma = row("ofi-dma", MIB);
    assert!(f(&dma["values"]["gbps"]) > 0.0 && f(&dma["values"]["cpu_pct"]) > 0.0, "{dma}");
    for size in [4, 64, MIB] {
        assert!(f(&row("fi_pingpong", size)["lat_ns"]["avg"]) > 0.0);
    }
    let iperf = f(&row("iperf3", MIB)["values"]["gbps"]);
    assert!(iperf > 0.0);

    // Targets: one per latency row with a fi_pingpong row, one for DMA; each consistent
    // with the figures it names, and printed as written.
    let targets = r["detail"]["targets"].as_array().expect("targets");
    let lat_rows = 2 + 2 + 1; // pio and dataint at 4 and 64, interrupt at 4
    assert_eq!(targets.iter().filter(|t| t["figure"] == "latency").count(), lat_rows, "{targets:?}");
    assert_eq!(targets.iter().filter(|t| t["figure"] == "bandwidth").count(), 1, "{targets:?}");
    for t in targets {
        let (path, size) = (t["path"].as_str().expect("path"), t["size"].as_u64().expect("size"));
        let (lanes, base, ratio) = (f(&t["lanes"]), f(&t["baseline_value"]), f(&t["ratio"]));
        assert!((ratio - lanes / base).abs() <= 1e-9 * ratio.abs().max(1.0), "{t}");
        if t["figure"] == "latency" {
            assert_eq!(lanes, f(&row(path, size)["lat_ns"]["avg"]), "{t}");
            assert_eq!(base, f(&row("fi_pingpong", size)["lat_ns"]["avg"]), "{t}");
            assert_eq!(t["met"].as_bool(), Some(ratio <= 1.2), "{t}");
        } else {
            assert_eq!(lanes, f(&dma["values"]["gbps"]), "{t}");
            assert_eq!(base, f(&row("fi_pingpong", MIB)["values"]["gbps"]).max(iperf), "{t}");
            assert_eq!(t["met"].as_bool(), Some(ratio >= 0.9), "{t}");
        }
        let printed = format!("{ratio:.3}");
        let figure = t["figure"].as_str().unwrap_or("");
        let line = stdout
            .lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.contains(&path) && w.contains(&figure) && w.contains(&printed.as_str())
            })
            .unwrap_or_else(|| panic!("no printed target line with ratio {ratio:.3} for {path} at {size}\n{stdout}"));
        assert!(line.contains(if t["met"].as_bool() == Some(true) { "met" } else { "MISSED" }), "{line}");
    }
}

/// `lanes pingpong --client --remote-node N` for a node of another host refuses at once,
/// naming the host and what to run instead, rather than spinning on a floor word that
/// only one host's memory can carry (no daemon needed to say so).
#[test]
fn pingpong_to_another_host_refuses_clearly() {
    let base = std::env::temp_dir();
    let dir = TestDir::under(&base, "lanes-pingpong-remote", "lo");
    write_config(&dir.0);
    let out = run(on(&dir.0, "b", &["pingpong", "--client", "--remote-node", "8"]), Duration::from_secs(30));
    let err = &out.stderr;
    assert!(!out.ok(), "it ran:\n{}{err}", out.stdout);
    assert!(err.contains("node 8 is on host a"), "{err}");
    assert!(err.contains("lanes bench --transport ofi --remote-node 8"), "{err}");
}
