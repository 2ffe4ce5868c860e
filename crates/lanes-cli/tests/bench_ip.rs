//! `lanes bench ip` as a user runs it, in its shortest form (root: namespaces and TUN
//! devices): the JSON has the three rows, each moved TCP bytes and answered pings, and
//! `--from` prints its table. No figure is asserted beyond "something was measured".

use std::process::Command;
use std::time::Duration;

use lanes_testkit::program::run_to_end;

#[test]
fn ip_bench_runs_and_reports_every_row() {
    if lanes_testkit::netns::skip_reason("ip_bench_runs_and_reports_every_row").is_some() {
        return;
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_lanes"));
    c.args(["bench", "ip", "--rounds", "1", "--seconds", "1", "--pings", "5", "--json", "-"]);
    for v in lanes_testkit::LANES_ENV {
        c.env_remove(v);
    }
    let out = run_to_end(c, "lanes bench ip", Duration::from_secs(120));
    assert!(out.ok(), "lanes bench ip: {:?}\n{}", out.status, out.stderr);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout_bytes).expect("JSON on standard output");
    assert_eq!(v["benchmark"].as_str(), Some("ip"), "{v}");
    let rows = v["rows"].as_array().expect("rows");
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().expect("key")).collect();
    assert_eq!(keys, ["lanes0", "lanes0-no-offloads", "veth"], "{v}");
    for r in rows {
        let m = &r["detail"]["median"];
        assert!(m["tcp_gbit_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(m["ping_avg_us"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(out.stderr.contains("lanes bench ip: two network namespaces"), "{}", out.stderr);
    let dir = lanes_testkit::TestDir::new("bench-ip");
    let file = dir.path("ip.json");
    std::fs::write(&file, &out.stdout_bytes).expect("write the report");
    let mut c = Command::new(env!("CARGO_BIN_EXE_lanes"));
    c.args(["bench", "--from"]).arg(&file);
    let table = run_to_end(c, "lanes bench --from", Duration::from_secs(20));
    assert!(
        table.ok() && table.stdout.contains("vs veth") && table.stdout.contains("lanes0 (offloads)"),
        "{}",
        table.stdout
    );
}

/// `lanes bench ip --hosts` in its shortest form: two namespace hosts with daemons over
/// tcp;ofi_rxm; the JSON has lanes0, the fabric's DMA and the veth link, each measured, and
/// the table states the target with the ratio it got (whatever the machine gives).
#[test]
fn ip_bench_across_hosts_reports_lanes0_against_the_fabric_dma() {
    if lanes_testkit::netns::skip_reason("ip_bench_across_hosts").is_some() {
        return;
    }
    if !lanes::OFI_TRANSPORT {
        eprintln!("skipping ip_bench_across_hosts: no ofi transport in this build (--features lanes/ofi)");
        return;
    }
    let dir = lanes_testkit::TestDir::new("bench-ip-hosts");
    let file = dir.path("ip-hosts.json");
    let mut c = Command::new(env!("CARGO_BIN_EXE_lanes"));
    c.args(["bench", "ip", "--hosts", "--rounds", "1", "--seconds", "1", "--pings", "5", "--json"]).arg(&file);
    for v in lanes_testkit::LANES_ENV {
        c.env_remove(v);
    }
    let out = run_to_end(c, "lanes bench ip --hosts", Duration::from_secs(180));
    assert!(out.ok(), "lanes bench ip --hosts: {:?}\n{}\n{}", out.status, out.stdout, out.stderr);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("the JSON")).expect("valid JSON");
    let rows = v["rows"].as_array().expect("rows");
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().expect("key")).collect();
    assert_eq!(keys, ["lanes0", "fabric-dma", "veth"], "{v}");
    for r in rows {
        assert!(r["detail"]["median"]["tcp_gbit_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(rows[0]["detail"]["median"]["ping_avg_us"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["run"]["hosts"].as_bool(), Some(true), "{v}");
    assert!(out.stdout.contains("TCP vs DMA >= 0.80: "), "{}", out.stdout);
}
