//! `lanes bench udp-stream` as a user runs it, in its shortest form: the JSON names every
//! row for the size asked, each measured something, and the library's rows name their
//! paths. No figure is asserted (performance is what the command prints, not a test).

use std::process::Command;
use std::time::Duration;

use lanes_testkit::program::run_to_end;

#[test]
fn udp_stream_bench_runs_and_reports_every_row() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lanes"));
    c.args(["bench", "udp-stream", "--seconds", "0.05", "--rounds", "1", "--sizes", "1K", "--block", "256K"])
        .args(["--json", "-"])
        .env_remove("LANES_UDPSTREAM_PATH");
    let out = run_to_end(c, "lanes bench udp-stream", Duration::from_secs(120));
    assert!(out.ok(), "lanes bench udp-stream: {:?}\n{}", out.status, out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout_bytes).expect("JSON on standard output");
    assert_eq!((v["format"].as_str(), v["benchmark"].as_str()), (Some("lanes-bench/2"), Some("udp-stream")), "{v}");
    let cells = v["rows"].as_array().expect("rows");
    let rows: Vec<&str> = cells.iter().map(|c| c["key"].as_str().expect("key")).collect();
    assert_eq!(rows, ["shm", "fast", "uring", "mmsg", "per-datagram", "shm80", "fast80"], "{v}");
    for c in cells {
        let m = &c["detail"]["median"];
        assert_eq!(c["size"], 1024);
        assert!(m["sent_datagrams"].as_u64().unwrap() > 0, "{c}");
        assert!(m["received_bytes"].as_u64().unwrap() > 0, "{c}");
        assert!(m["tx_calls"].as_u64().unwrap() > 0 && m["rx_calls"].as_u64().unwrap() > 0, "{c}");
    }
    assert_eq!(cells[0]["detail"]["median"]["send_path"], "shm");
    assert_eq!(cells[0]["detail"]["median"]["recv_path"], "shm");
    assert_eq!(cells[3]["detail"]["median"]["send_path"], "mmsg");
    assert_eq!(cells[3]["detail"]["median"]["recv_path"], "mmsg");
    assert_eq!(cells[4]["detail"]["median"]["send_path"], "send");
}

#[test]
fn udp_stream_bench_refuses_bad_sizes() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lanes"));
    c.args(["bench", "udp-stream", "--sizes", "70000", "--seconds", "0.05", "--rounds", "1"]);
    let out = run_to_end(c, "lanes bench udp-stream", Duration::from_secs(60));
    assert!(!out.ok());
    assert!(out.stderr.contains("datagram size 70000"), "{}", out.stderr);
}
