//! The `lanes` command as a user runs it: pingpong (one command, and server and client
//! started apart), status, cleanup, the daemon, and clear errors. Every wait is bounded.

use std::process::Command;
use std::time::{Duration, Instant};

use lanes_testkit::program::{run_to_end, Finished, Program};
use lanes_testkit::{free_ports, TestDir};

const LANES: &str = env!("CARGO_BIN_EXE_lanes");

/// A private scratch directory per test (removed at the end), its fabric in `fabric`.
trait Dir {
    fn here(name: &str) -> Self;
    fn lanes(&self, node: u32) -> Command;
}

impl Dir for TestDir {
    fn here(name: &str) -> Self {
        TestDir::named("cli-test", name)
    }

    fn lanes(&self, node: u32) -> Command {
        let mut c = Command::new(LANES);
        c.env("LANES_DIR", self.fabric()).env("LANES_NODE_ID", node.to_string()).env_remove("LANES_CONFIG");
        c
    }
}

/// Runs a `lanes` command, which must end within `limit`.
fn run(c: Command, limit: Duration) -> Finished {
    run_to_end(c, "lanes", limit)
}

fn status_json(dir: &TestDir) -> serde_json::Value {
    let mut c = dir.lanes(4);
    c.args(["status", "--json"]);
    let out = run(c, Duration::from_secs(20));
    assert!(out.ok(), "status failed: {}", out.stderr);
    serde_json::from_slice(&out.stdout_bytes).expect("status --json is JSON")
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The rows of a report (`--json`) with key `key`.
fn rows<'a>(v: &'a serde_json::Value, key: &str) -> Vec<&'a serde_json::Value> {
    v["rows"].as_array().expect("rows").iter().filter(|r| r["key"] == key).collect()
}

fn check_summary(v: &serde_json::Value, what: &str) {
    for k in ["avg", "min", "p50", "p99", "p999", "max"] {
        let x = v[k].as_f64().unwrap_or_else(|| panic!("{what}.{k} missing in {v}"));
        assert!(x.is_finite() && x > 0.0, "{what}.{k} = {x}");
    }
    assert!(v["min"].as_f64() <= v["p50"].as_f64() && v["p50"].as_f64() <= v["max"].as_f64(), "{what}: {v}");
}

#[test]
fn pingpong_starts_its_peer_and_writes_json() {
    let dir = TestDir::here("pp");
    let json = dir.path("pp.json");
    let mut c = dir.lanes(4);
    c.args(["pingpong", "--sizes", "4,8,100,1K", "--iterations", "3000", "--warmup", "200", "--hist", "--json"])
        .arg(&json);
    let out = run(c, Duration::from_secs(120));
    assert!(out.ok(), "pingpong failed: {}", out.stderr);
    let table = &out.stdout;
    assert!(table.contains("floor"), "{table}");
    assert!(table.contains("vs floor"), "{table}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!((v["format"].as_str(), v["benchmark"].as_str()), (Some("lanes-bench/2"), Some("pingpong")), "{v}");
    let pio = rows(&v, "pio");
    let sizes: Vec<u64> = pio.iter().map(|r| r["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, vec![4, 8, 100, 1024]);
    for r in pio {
        check_summary(&r["lat_ns"], "lat_ns");
        check_summary(&r["detail"]["rtt_ns"], "rtt_ns");
        let ratio = r["lat_ns"]["avg"].as_f64().unwrap() * 2.0 / r["detail"]["rtt_ns"]["avg"].as_f64().unwrap();
        assert!((ratio - 1.0).abs() < 1e-6, "one-way is half the round trip");
        assert!(r["detail"]["histogram"]["buckets"].as_array().is_some_and(|b| !b.is_empty()));
    }
    check_summary(&rows(&v, "floor")[0]["lat_ns"], "floor");
    assert_eq!(v["run"]["node"], 4);
    assert_eq!(v["run"]["remote_node"], 8);
    // The run leaves nothing behind: both mailboxes were removed.
    assert_eq!(status_json(&dir)["segments"].as_array().unwrap().len(), 0);
}

#[test]
fn pingpong_server_and_client_run_apart_and_status_shows_them() {
    let dir = TestDir::here("apart");
    let mut s = dir.lanes(12);
    s.args(["pingpong", "--server", "--max-size", "64", "--timeout", "60"]);
    let server = Program::spawn(s, "lanes pingpong --server");
    // The server's mailbox appears in `lanes status`, alive, owned by the server.
    wait_until("the server's mailbox", Duration::from_secs(20), || {
        status_json(&dir)["segments"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["node"] == 12 && g["alive"] == true && g["owner_pid"] == server.pid())
    });
    let st = status_json(&dir);
    assert!(st["nodes"].as_array().unwrap().iter().any(|n| n["node"] == 12), "{st}");
    let mut c = dir.lanes(16);
    c.args(["pingpong", "--client", "--remote-node", "12", "--sizes", "8,64", "--iterations", "2000", "--json", "-"]);
    let out = run(c, Duration::from_secs(120));
    assert!(out.ok(), "client failed: {}", out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout_bytes).expect("JSON on stdout");
    assert_eq!(rows(&v, "pio").len(), 2);
    assert_eq!(v["run"]["remote_node"], 12);
    let out = server.finish(Duration::from_secs(20));
    assert!(out.ok(), "the server ends cleanly after its client");
}

#[test]
fn client_fails_cleanly_when_the_server_is_killed() {
    let dir = TestDir::here("kill");
    let mut s = dir.lanes(20);
    s.args(["pingpong", "--server", "--max-size", "64"]);
    let server = Program::spawn(s, "lanes pingpong --server");
    wait_until("the server's mailbox", Duration::from_secs(20), || {
        status_json(&dir)["segments"].as_array().unwrap().iter().any(|g| g["node"] == 20 && g["alive"] == true)
    });
    let mut c = dir.lanes(24);
    c.args(["pingpong", "--client", "--remote-node", "20", "--sizes", "8", "--iterations", "1000000000"]);
    let client = Program::spawn(c, "lanes pingpong --client");
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.signal(libc::SIGKILL), "the server was still ours to kill");
    let out = client.finish(Duration::from_secs(10));
    assert!(!out.ok(), "the client must report the loss");
    assert!(out.stderr.contains("peer is gone"), "stderr: {}", out.stderr);
    drop(server);

    // The dead server's mailbox is reported dead, and cleanup removes it.
    let st = status_json(&dir);
    let seg = st["segments"].as_array().unwrap().iter().find(|g| g["node"] == 20).expect("stale mailbox listed");
    assert_eq!(seg["alive"], false, "{st}");
    let mut c = dir.lanes(4);
    c.args(["cleanup"]);
    let out = run(c, Duration::from_secs(20));
    assert!(out.ok());
    assert!(out.stdout.contains("owner pid"), "{}", out.stdout);
    assert!(status_json(&dir)["segments"].as_array().unwrap().iter().all(|g| g["node"] != 20));
    let mut c = dir.lanes(4);
    c.args(["cleanup"]);
    assert!(run(c, Duration::from_secs(20)).stdout.contains("nothing to clean"));
}

#[test]
fn bad_input_gives_clear_errors() {
    let dir = TestDir::here("bad");
    let cases: Vec<(Vec<&str>, Option<&str>, &str)> = vec![
        (vec!["status"], Some("5"), "invalid node id"),
        (vec!["status"], Some("252"), "broadcast"),
        (vec!["pingpong", "--sizes", "3"], None, "multiples of 4"),
        (vec!["pingpong", "--sizes", "x"], None, "bad size"),
        (vec!["pingpong", "--cpu", "0"], None, "two CPUs"),
        (vec!["pingpong", "--client", "--remote-node", "40", "--timeout", "1"], None, "timed out"),
    ];
    for (args, node, expect) in cases {
        let mut c = dir.lanes(4);
        if let Some(n) = node {
            c.env("LANES_NODE_ID", n);
        }
        c.args(&args);
        let out = run(c, Duration::from_secs(30));
        assert!(!out.ok(), "{args:?} should fail");
        let err = &out.stderr;
        assert!(err.contains(expect), "{args:?}: expected {expect:?} in {err:?}");
    }
    // A malformed configuration file names itself.
    let cfg = dir.path("lanes.toml");
    std::fs::write(&cfg, "[[node]]\nid = 9\nhost = \"h\"\n").unwrap();
    let mut c = Command::new(LANES);
    c.env("LANES_DIR", dir.fabric()).env_remove("LANES_NODE_ID").env("LANES_CONFIG", &cfg).arg("status");
    let out = run(c, Duration::from_secs(20));
    assert!(!out.ok());
    assert!(out.stderr.contains(&*cfg.to_string_lossy()), "{}", out.stderr);
    // [ip] is checked when the file is read, by any command: a bad value, and a listed
    // node without an address in the IPv4 prefix, name the key.
    for (text, expect) in [
        ("[ip]\nmtu = 600\n", "[ip] mtu 600"),
        ("[ip]\nipv4 = \"10.9.0.0/24\"\n[[node]]\nid = 256\nhost = \"h\"\n", "[ip] ipv4: node 256"),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let mut c = Command::new(LANES);
        c.env("LANES_DIR", dir.fabric()).env("LANES_NODE_ID", "4").env("LANES_CONFIG", &cfg).arg("status");
        let out = run(c, Duration::from_secs(20));
        assert!(!out.ok() && out.stderr.contains(expect), "{text:?}: {}", out.stderr);
    }
}

#[test]
fn status_on_an_empty_fabric() {
    let dir = TestDir::here("empty");
    let mut c = dir.lanes(4);
    c.arg("status");
    let out = run(c, Duration::from_secs(20));
    assert!(out.ok());
    let t = &out.stdout;
    assert!(t.contains("nodes\n  (none)"), "{t}");
    assert!(t.contains("segments and interrupts\n  (none)"), "{t}");
}

#[test]
fn interrupt_pingpong_measures_lanes_against_kernel_wakeups() {
    let dir = TestDir::here("intpp");
    for (mode, sizes, expect_paths) in [
        (
            "interrupt",
            None,
            vec!["interrupt, spinning", "interrupt, sleeping", "floor", "eventfd", "pipe", "unix datagram"],
        ),
        (
            "data-interrupt",
            Some("8,4K"),
            vec!["data interrupt, spinning", "data interrupt, sleeping", "pipe", "unix datagram"],
        ),
    ] {
        let mut c = dir.lanes(4);
        c.args(["pingpong", "--mode", mode, "--iterations", "500", "--warmup", "50", "--json", "-"]);
        if let Some(s) = sizes {
            c.args(["--sizes", s]);
        }
        let out = run(c, Duration::from_secs(120));
        assert!(out.ok(), "{mode}: {}", out.stderr);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout_bytes).expect("JSON");
        assert_eq!(v["benchmark"], "wakeup", "{v}");
        let rows = v["rows"].as_array().unwrap();
        for p in &expect_paths {
            assert!(rows.iter().any(|r| r["title"].as_str().unwrap().starts_with(p)), "{mode}: no {p} in {v}");
        }
        for r in rows {
            check_summary(&r["lat_ns"], &format!("{mode} {}", r["title"]));
        }
        let judged: Vec<&serde_json::Value> = rows.iter().filter(|r| r["ratio"].is_number()).collect();
        assert_eq!(judged.len(), if mode == "interrupt" { 2 } else { 4 }, "{mode}: every Lanes row has a baseline");
        for r in judged {
            assert!(r["detail"]["baseline"].is_string(), "{r}");
            assert!(r["detail"]["ratio_p50"].as_f64().unwrap() > 0.0);
        }
        if mode == "data-interrupt" {
            let sizes: Vec<u64> = rows.iter().map(|r| r["size"].as_u64().unwrap()).collect();
            assert!(sizes.contains(&8) && sizes.contains(&4096), "{sizes:?}");
        }
    }
    assert_eq!(status_json(&dir)["segments"].as_array().unwrap().len(), 0, "peers and interrupts are gone");
    let mut c = dir.lanes(4);
    c.args(["pingpong", "--mode", "data-interrupt", "--sizes", "8K"]);
    let out = run(c, Duration::from_secs(30));
    assert!(!out.ok());
    assert!(out.stderr.contains("at most 4096"), "{}", out.stderr);
}

#[test]
fn reflective_pingpong_reports_latency_against_group_size() {
    let dir = TestDir::here("reflpp");
    let mut c = dir.lanes(4);
    c.args([
        "pingpong",
        "--mode",
        "reflective",
        "--nodes",
        "4",
        "--iterations",
        "300",
        "--warmup",
        "20",
        "--json",
        "-",
    ]);
    let out = run(c, Duration::from_secs(120));
    assert!(out.ok(), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout_bytes).expect("JSON");
    assert_eq!(v["benchmark"], "reflective", "{v}");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["detail"]["nodes"].as_u64().unwrap()).collect::<Vec<_>>(), vec![2, 3, 4]);
    let cpus = v["run"]["cpus"].as_u64().unwrap();
    for r in rows {
        check_summary(&r["lat_ns"], "reflective");
        assert_eq!(r["detail"]["oversubscribed"].as_bool().unwrap(), r["detail"]["nodes"].as_u64().unwrap() > cpus);
    }
    assert_eq!(status_json(&dir)["segments"].as_array().unwrap().len(), 0, "every group was removed");
    let mut c = dir.lanes(4);
    c.args(["pingpong", "--mode", "reflective", "--nodes", "1"]);
    let out = run(c, Duration::from_secs(30));
    assert!(!out.ok() && out.stderr.contains("2 to 16"), "{}", out.stderr);
}

#[test]
fn daemon_shows_in_status_and_stops_cleanly_on_sigterm() {
    let dir = TestDir::here("daemon");
    let cfg = dir.path("lanes.toml");
    let ports = free_ports(2);
    let config = format!(
        "[cluster]\n[[node]]\nid = 8\nhost = \"a\"\naddress = \"127.0.0.1:{}\"\n\
         [[node]]\nid = 12\nhost = \"b\"\naddress = \"127.0.0.1:{}\"\n",
        ports[0], ports[1]
    );
    std::fs::write(&cfg, config).expect("writing the configuration");
    let mut c = dir.lanes(8);
    c.args(["daemon", "--host", "a", "--config"]).arg(&cfg);
    let daemon = Program::spawn(c, "lanes daemon");
    let socket = dir.fabric().join("daemon.sock");
    wait_until("the daemon's socket", Duration::from_secs(10), || socket.exists());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777, 0o600);

    // Status shows the cluster: this host, and b (no daemon there) never heard from.
    let mut c = dir.lanes(8);
    c.env("LANES_HOST", "a").env("LANES_CONFIG", &cfg).arg("status");
    let out = run(c, Duration::from_secs(20));
    let t = &out.stdout;
    assert!(out.ok() && t.contains("cluster (as the daemon of host a sees it)"), "{t}");
    assert!(t.lines().any(|l| l.trim_start().starts_with("b ") && l.contains("unknown")), "{t}");
    let v = status_json(&dir);
    let hosts = v["cluster"].as_array().expect("a cluster key");
    assert_eq!(hosts.len(), 2, "{v}");
    assert_eq!((hosts[0]["name"].as_str(), hosts[0]["local"].as_bool()), (Some("a"), Some(true)));

    assert!(daemon.signal(libc::SIGTERM), "the daemon was still ours to stop");
    let out = daemon.finish(Duration::from_secs(10));
    let err = &out.stderr;
    assert!(out.ok(), "exit {:?}: {err}", out.status);
    assert!(err.contains("SIGTERM: stopping") && err.contains("stopped"), "{err}");
    assert!(!socket.exists(), "the socket is removed");
    // Without a daemon, status has no cluster section.
    let mut c = dir.lanes(8);
    c.arg("status");
    let t = run(c, Duration::from_secs(20)).stdout;
    assert!(!t.contains("cluster"), "{t}");
}

#[test]
fn daemon_explains_a_configuration_it_cannot_serve() {
    let dir = TestDir::here("daemon-bad");
    let cfg = dir.path("lanes.toml");
    for (config, host, says) in [
        ("dir = \"/tmp/x\"\n", "a", "no [cluster] section"),
        ("[cluster]\n[[node]]\nid = 8\nhost = \"a\"\naddress = \"127.0.0.1:1\"\n", "zz", "host \"zz\" is not in"),
        ("[cluster]\n[[node]]\nid = 8\nhost = \"a\"\naddress = \"alpha\"\n", "a", "not an IP address"),
    ] {
        std::fs::write(&cfg, config).expect("writing the configuration");
        let mut c = dir.lanes(8);
        c.args(["daemon", "--host", host, "--config"]).arg(&cfg);
        let out = run(c, Duration::from_secs(20));
        let err = &out.stderr;
        assert!(!out.ok() && err.contains(says), "{config:?}: {err}");
    }
}
