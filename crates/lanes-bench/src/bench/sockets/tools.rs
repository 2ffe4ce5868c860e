//! The measurements of `lanes bench sockets`: how each tool is started and how its
//! output is read.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use crate::bench::sockets::procs::{run_client, Launch, Mode, Server};
use crate::bench::sockets::servers::{self, Params, Sample};

/// One row of the report.
pub(crate) struct Tool {
    pub key: &'static str,
    pub title: &'static str,
    /// Programs it needs, with the Debian package of each.
    pub needs: &'static [(&'static str, &'static str)],
    pub unit: &'static str,
    pub lower_is_better: bool,
    /// The ratio the accelerated figure should reach (times lower or times higher).
    pub target: f64,
    /// Measured with a busy-loop process on every CPU (started for the measurement only).
    pub hog: bool,
    pub run: fn(&Params, &Launch, &Launch) -> Result<Sample, String>,
}

pub(crate) static TOOLS: &[Tool] = &[
    Tool {
        key: "sockperf-latency",
        title: "sockperf ping-pong 64 B, avg latency",
        needs: &[("sockperf", "sockperf")],
        unit: "us",
        lower_is_better: true,
        target: 30.0,
        hog: false,
        run: sockperf_pingpong,
    },
    Tool {
        key: "sockperf-throughput",
        title: "sockperf throughput 64 B, msg/s",
        needs: &[("sockperf", "sockperf")],
        unit: "msg/s",
        lower_is_better: false,
        target: 20.0,
        hog: false,
        run: sockperf_throughput,
    },
    Tool {
        key: "sockperf-udp-latency",
        title: "sockperf UDP ping-pong 64 B, avg latency",
        needs: &[("sockperf", "sockperf")],
        unit: "us",
        lower_is_better: true,
        target: 30.0,
        hog: false,
        run: sockperf_udp_pingpong,
    },
    Tool {
        key: "sockperf-udp-throughput",
        title: "sockperf UDP throughput 64 B, msg/s",
        needs: &[("sockperf", "sockperf")],
        unit: "msg/s",
        lower_is_better: false,
        target: 10.0,
        hog: false,
        run: sockperf_udp_throughput,
    },
    Tool {
        key: "mcast-fanout",
        title: "UDP multicast to 4 receivers, avg latency",
        needs: &[],
        unit: "us",
        lower_is_better: true,
        target: 10.0,
        hog: false,
        run: crate::bench::sockets::fanout::fanout,
    },
    Tool {
        key: "dds-pingpong",
        title: "DDS ping-pong (ddsperf), avg round trip",
        needs: &[("ddsperf", "cyclonedds-tools")],
        unit: "us",
        lower_is_better: true,
        target: 2.0,
        hog: false,
        run: ddsperf_pingpong,
    },
    Tool {
        key: "iperf3",
        title: "iperf3 -l 128K, received",
        needs: &[("iperf3", "iperf3")],
        unit: "Gbit/s",
        lower_is_better: false,
        target: 2.0,
        hog: false,
        run: iperf3,
    },
    Tool {
        key: "redis-get",
        title: "redis-benchmark GET p50",
        needs: &[("redis-server", "redis-server"), ("redis-benchmark", "redis-tools")],
        unit: "us",
        lower_is_better: true,
        target: 2.5,
        hog: false,
        run: redis_get,
    },
    Tool {
        key: "pingpong",
        title: "blocking ping-pong 100 B, round trips/s",
        needs: &[],
        unit: "rt/s",
        lower_is_better: false,
        target: 2.0,
        hog: false,
        run: servers::pingpong,
    },
    Tool {
        key: "pingpong-hog",
        title: "the same unpinned, a CPU hog per core",
        needs: &[("sh", "dash")],
        unit: "rt/s",
        lower_is_better: false,
        target: 1.0,
        hog: true,
        run: servers::pingpong_floating,
    },
    Tool {
        key: "pgbench-tpcb",
        title: "pgbench TPC-B -c 8 -j 2, tps",
        needs: &[("postgres", "postgresql"), ("initdb", "postgresql"), ("pgbench", "postgresql-contrib")],
        unit: "tps",
        lower_is_better: false,
        target: 1.0,
        hog: false,
        run: servers::pgbench_tpcb,
    },
    Tool {
        key: "pgbench-select",
        title: "pgbench select-only -c 8 -j 2, tps",
        needs: &[("postgres", "postgresql"), ("initdb", "postgresql"), ("pgbench", "postgresql-contrib")],
        unit: "tps",
        lower_is_better: false,
        target: 2.0,
        hog: false,
        run: servers::pgbench_select,
    },
    Tool {
        key: "nginx",
        title: "nginx 2 workers, wrk -c 16, req/s",
        needs: &[("nginx", "nginx-light"), ("wrk", "wrk")],
        unit: "req/s",
        lower_is_better: false,
        target: 2.0,
        hog: false,
        run: servers::nginx_wrk,
    },
    Tool {
        key: "nginx-close",
        title: "nginx 2 workers, wrk -c 16, a connection per request, req/s",
        needs: &[("nginx", "nginx-light"), ("wrk", "wrk")],
        unit: "req/s",
        lower_is_better: false,
        target: 1.0,
        hog: false,
        run: servers::nginx_wrk_close,
    },
];

/// sockperf colours some lines; the escapes go before parsing.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte (0x40..=0x7e)
            if chars.next() == Some('[') {
                for d in chars.by_ref() {
                    if ('@'..='~').contains(&d) {
                        break;
                    }
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The number after `key` (skipping spaces and `=`), e.g. `avg-latency=19.572`.
fn number_after(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    let rest = rest.trim_start_matches([' ', '=', '\t']);
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == 'e')).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// sockperf ping-pong: `avg-latency` (one way: half the round trip, in us) and percentiles.
pub(crate) fn parse_sockperf_pingpong(out: &str) -> Result<Sample, String> {
    let t = strip_ansi(out);
    let avg = number_after(&t, "avg-latency").ok_or_else(|| format!("no avg-latency in sockperf's output: {t:?}"))?;
    let mut details = BTreeMap::new();
    for (key, label) in [
        ("percentile 50.000", "p50_us"),
        ("percentile 99.000", "p99_us"),
        ("percentile 99.900", "p999_us"),
        ("<MAX> observation", "max_us"),
        ("<MIN> observation", "min_us"),
    ] {
        if let Some(v) = number_after(&t, key) {
            details.insert(label.to_string(), v);
        }
    }
    if let Some(n) = t.lines().find(|l| l.contains(" observations")).and_then(|l| number_after(l, "Total")) {
        details.insert("observations".into(), n);
    }
    Ok(Sample { value: avg, details })
}

/// sockperf throughput: `Message Rate is N [msg/sec]` (what the client sent).
pub(crate) fn parse_sockperf_throughput(out: &str) -> Result<Sample, String> {
    let t = strip_ansi(out);
    let rate =
        number_after(&t, "Message Rate is").ok_or_else(|| format!("no message rate in sockperf's output: {t:?}"))?;
    let mut details = BTreeMap::new();
    if let Some(mbps) = number_after(&t, "BandWidth is") {
        details.insert("MBps".to_string(), mbps);
    }
    Ok(Sample { value: rate, details })
}

/// iperf3 `--json`: `end.sum_received.bits_per_second`, in Gbit/s.
pub(crate) fn parse_iperf3(out: &str) -> Result<Sample, String> {
    let v: serde_json::Value = serde_json::from_str(out).map_err(|e| format!("iperf3 printed no JSON ({e})"))?;
    if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
        return Err(format!("iperf3: {err}"));
    }
    let bps = |k: &str| v["end"][k]["bits_per_second"].as_f64();
    let recv = bps("sum_received").ok_or("iperf3's JSON has no end.sum_received.bits_per_second")?;
    let mut details = BTreeMap::new();
    if let Some(sent) = bps("sum_sent") {
        details.insert("sent_gbps".to_string(), sent / 1e9);
    }
    if let Some(r) = v["end"]["sum_sent"]["retransmits"].as_f64() {
        details.insert("retransmits".to_string(), r);
    }
    Ok(Sample { value: recv / 1e9, details })
}

/// redis-benchmark `--csv`: the GET row (`"test","rps","avg_latency_ms","min_latency_ms",
/// "p50_latency_ms",...`); p50 in us.
pub(crate) fn parse_redis_csv(out: &str) -> Result<Sample, String> {
    let mut header: Option<Vec<String>> = None;
    for line in out.lines() {
        let cells: Vec<String> = line.split(',').map(|c| c.trim().trim_matches('"').to_string()).collect();
        if cells.first().is_some_and(|c| c == "test") {
            header = Some(cells);
        } else if cells.first().is_some_and(|c| c == "GET") {
            let h = header.as_ref().ok_or("redis-benchmark printed no CSV header")?;
            let mut details = BTreeMap::new();
            for (name, cell) in h.iter().zip(&cells).skip(1) {
                if let Ok(x) = cell.parse::<f64>() {
                    match name.strip_suffix("_ms") {
                        Some(n) => details.insert(format!("{n}_us"), x * 1e3),
                        None => details.insert(name.clone(), x),
                    };
                }
            }
            let p50 = *details.get("p50_latency_us").ok_or("redis-benchmark's CSV has no p50_latency_ms")?;
            return Ok(Sample { value: p50, details });
        }
    }
    Err(format!("no GET row in redis-benchmark's output: {out:?}"))
}

/// The highest ping-pong message rate sockperf must be ready for (its default is 600k/s).
const SOCKPERF_MAX_RATE: &str = "3000000";

fn sockperf_server(p: &Params, server: &Launch) -> Result<Server, String> {
    let _ = p;
    let mut cmd = server.command("sockperf")?;
    cmd.args(["sr", "--tcp", "-i", "127.0.0.1", "-p", &server.port.to_string()]);
    Server::start(cmd, "sockperf server", server.port)
}

fn sockperf_client(p: &Params, client: &Launch, what: &str) -> Result<String, String> {
    let mut cmd = client.command("sockperf")?;
    let (port, secs) = (client.port.to_string(), p.seconds.to_string());
    cmd.args([what, "--tcp", "-i", "127.0.0.1", "-p", &port, "-t", &secs, "-m", "64"]);
    if what == "pp" {
        // sockperf sizes its table of send times for 600k messages a second unless told;
        // beyond that it stops with "_seqN > m_maxSequenceNo".
        cmd.args(["--mps", SOCKPERF_MAX_RATE]);
    }
    run_client(cmd, &format!("sockperf {what}"), p.limit())
}

fn sockperf_pingpong(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let _srv = sockperf_server(p, server)?;
    parse_sockperf_pingpong(&sockperf_client(p, client, "pp")?)
}

fn sockperf_throughput(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let _srv = sockperf_server(p, server)?;
    parse_sockperf_throughput(&sockperf_client(p, client, "tp")?)
}

/// sockperf's UDP ping-pong (its default protocol): the server's socket is bound when it
/// is ready.
fn sockperf_udp_pingpong(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let mut cmd = server.command("sockperf")?;
    cmd.args(["sr", "-i", "127.0.0.1", "-p", &server.port.to_string()]);
    let _srv = Server::start(cmd, "sockperf UDP server", server.port)?;
    let mut cmd = client.command("sockperf")?;
    let (port, secs) = (client.port.to_string(), p.seconds.to_string());
    cmd.args(["pp", "-i", "127.0.0.1", "-p", &port, "-t", &secs, "-m", "64", "--mps", SOCKPERF_MAX_RATE]);
    parse_sockperf_pingpong(&run_client(cmd, "sockperf UDP pp", p.limit())?)
}

/// sockperf's UDP throughput: the message rate the client sent (the server counts what
/// arrived; UDP may drop what a slower receiver cannot take, in both modes).
fn sockperf_udp_throughput(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let mut cmd = server.command("sockperf")?;
    cmd.args(["sr", "-i", "127.0.0.1", "-p", &server.port.to_string()]);
    let _srv = Server::start(cmd, "sockperf UDP server", server.port)?;
    let mut cmd = client.command("sockperf")?;
    let (port, secs) = (client.port.to_string(), p.seconds.to_string());
    cmd.args(["tp", "-i", "127.0.0.1", "-p", &port, "-t", &secs, "-m", "64"]);
    parse_sockperf_throughput(&run_client(cmd, "sockperf UDP tp", p.limit())?)
}

/// Cyclone DDS's `ddsperf`: `pong` as the server, `ping` as the client, in a DDS domain of
/// their own (its discovery port, 7400 + 250 x domain, is what the server is waited on);
/// the average round trip over ping's per-second reports. Both float over all CPUs: each
/// is several threads (its receive thread hands samples to another), which one CPU would
/// hold apart.
fn ddsperf_pingpong(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let (server, client) = (&Launch { cpu: None, ..server.clone() }, &Launch { cpu: None, ..client.clone() });
    // Domains 1..=200: discovery ports 7650..57400, one per run of this row.
    let domain = 1 + server.port % 200;
    let discovery = 7400 + 250 * domain;
    let domain = domain.to_string();
    // Its samples go to ports the kernel picks: every port of these two is the row's.
    let every_port = |mut cmd: std::process::Command, l: &Launch| {
        if matches!(l.mode, Mode::Lanes) {
            cmd.env("LANES_SOCKETS_INCLUDE", "1-65535");
        }
        cmd
    };
    let mut cmd = every_port(server.command("ddsperf")?, server);
    cmd.args(["-i", &domain, "-D", &(p.seconds + 30).to_string(), "pong"]);
    let _srv = Server::start(cmd, "ddsperf pong", discovery)?;
    // Its first second or so goes to discovery (and its first report is a warm-up, left
    // out): it runs two seconds more than the measurement.
    let mut cmd = every_port(client.command("ddsperf")?, client);
    cmd.args(["-i", &domain, "-D", &(p.seconds + 2).to_string(), "ping"]);
    parse_ddsperf_ping(&run_client(cmd, "ddsperf ping", p.limit())?)
}

/// ddsperf ping's per-second lines ("... mean 22.155us ... cnt 22514"): the round trip's
/// mean over all of them but the first (a warm-up) when there are several, each weighted
/// by its count.
pub(crate) fn parse_ddsperf_ping(out: &str) -> Result<Sample, String> {
    let reports: Vec<&str> = out.lines().filter(|l| l.contains(" mean ") && l.contains(" cnt ")).collect();
    let measured = if reports.len() > 1 { &reports[1..] } else { &reports[..] };
    let (mut weighted, mut trips) = (0.0f64, 0.0f64);
    for line in measured {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1));
        let (Some(mean), Some(cnt)) = (after("mean"), after("cnt")) else { continue };
        let (Some(us), Ok(n)) = (mean.strip_suffix("us").and_then(|v| v.parse::<f64>().ok()), cnt.parse::<f64>())
        else {
            continue;
        };
        weighted += us * n;
        trips += n;
    }
    if trips == 0.0 {
        return Err(format!(
            "ddsperf ping measured no round trip: {}",
            out.lines().rev().take(3).collect::<Vec<_>>().join(" / ")
        ));
    }
    let mut details = BTreeMap::new();
    details.insert("round_trips".to_string(), trips);
    Ok(Sample { value: weighted / trips, details })
}

fn iperf3(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let port = server.port.to_string();
    let mut cmd = server.command("iperf3")?;
    cmd.args(["-s", "-p", &port, "-1"]);
    let srv = Server::start(cmd, "iperf3 server", server.port)?;
    let mut cmd = client.command("iperf3")?;
    cmd.args(["-c", "127.0.0.1", "-p", &port, "-l", "128K", "-t", &p.seconds.to_string(), "--json"]);
    // iperf3 prints its JSON (with an "error" key) on failure too.
    let out = run_client(cmd, "iperf3 client", p.limit());
    srv.wait_exit(Duration::from_secs(5));
    match out {
        Ok(o) => parse_iperf3(&o),
        Err(e) => Err(e),
    }
}

/// The value every GET returns: 64 bytes.
const REDIS_KEY: &str = "key:__rand_int__";

/// Stores the key redis-benchmark's GET asks for (it sends `GET key:__rand_int__` literally
/// unless -r is given), so that every GET returns a 64-byte value instead of nil.
fn redis_set_key(port: u16) -> Result<(), String> {
    let value = "v".repeat(64);
    let cmd = format!("*3\r\n$3\r\nSET\r\n${}\r\n{REDIS_KEY}\r\n$64\r\n{value}\r\n", REDIS_KEY.len());
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(|e| format!("connecting to redis: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    s.write_all(cmd.as_bytes()).map_err(|e| format!("writing to redis: {e}"))?;
    let mut reply = [0u8; 5];
    s.read_exact(&mut reply).map_err(|e| format!("reading from redis: {e}"))?;
    if &reply != b"+OK\r\n" {
        return Err(format!("redis answered SET with {:?}", String::from_utf8_lossy(&reply)));
    }
    Ok(())
}

pub(crate) fn redis_server(server: &Launch) -> Result<Server, String> {
    let port = server.port.to_string();
    let dir = std::env::temp_dir();
    let mut cmd = server.command("redis-server")?;
    // No configuration file: nothing saved, nothing appended, loopback only, in the foreground.
    cmd.args(["--port", &port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"])
        .arg("--dir")
        .arg(&dir)
        .args(["--protected-mode", "yes", "--logfile", ""]);
    let srv = Server::start(cmd, "redis-server", server.port)?;
    redis_set_key(server.port)?;
    Ok(srv)
}

/// One redis-benchmark run of `requests` GETs.
pub(crate) fn redis_benchmark(p: &Params, client: &Launch, requests: u64) -> Result<Sample, String> {
    let mut cmd = client.command("redis-benchmark")?;
    let (port, n, c) = (client.port.to_string(), requests.to_string(), p.redis_clients.to_string());
    cmd.args(["-h", "127.0.0.1", "-p", &port, "-t", "get", "-n", &n, "-c", &c, "-d", "64", "--csv"]);
    parse_redis_csv(&run_client(cmd, "redis-benchmark", p.limit())?)
}

fn redis_get(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let _srv = redis_server(server)?;
    let mut s = redis_benchmark(p, client, p.redis_requests)?;
    s.details.insert("requests".into(), p.redis_requests as f64);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddsperf_pings_mean_leaves_out_the_warm_up_and_weighs_each_second() {
        let out = "[19997] 1.000  vm:19985 size 12 mean 20.000us min 6.965us 50% 21.862us 90% 22.674us 99% 33.735us max 1211.453us cnt 1000\n\
            [19997] 1.000  rss:8.1MB vcsw:22334 ivcsw:242 ddsperf:0%+1% recvUC:4%+36%\n\
            [19997] 2.000  vm:19985 size 12 mean 30.000us min 7.140us 50% 21.912us 90% 22.713us 99% 34.311us max 1245.767us cnt 3000\n";
        let s = parse_ddsperf_ping(out).unwrap();
        assert!((s.value - 30.0).abs() < 1e-9, "the first report is a warm-up: {}", s.value);
        assert_eq!(s.details["round_trips"], 3000.0);
        let third = format!("{out}[19997] 3.000  vm:19985 size 12 mean 10.000us cnt 1000\n");
        let s = parse_ddsperf_ping(&third).unwrap();
        assert!((s.value - 25.0).abs() < 1e-9, "weighted by the counts: {}", s.value);
        let one = "[1] 2.000  vm:2 size 12 mean 5.000us cnt 10\n";
        assert_eq!(parse_ddsperf_ping(one).unwrap().value, 5.0, "a single report counts");
        assert!(parse_ddsperf_ping("[1] 1.000  rss:8.1MB vcsw:2\n").is_err(), "no round trip: an error");
    }

    const PP: &str = "sockperf: [Total Run] RunTime=1.000 sec; Warm up time=400 msec; SentMessages=27823\n\
        sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=14027; ReceivedMessages=14027\n\
        sockperf: \u{1b}[2;35m====> avg-latency=19.572 (std-dev=11.666)\u{1b}[0m\n\
        sockperf: Summary: Latency is 19.572 usec\n\
        sockperf: \u{1b}[2;35mTotal 14027 observations\u{1b}[0m; each percentile contains 140.27 observations\n\
        sockperf: ---> <MAX> observation = 1024.667\n\
        sockperf: ---> percentile 99.999 = 1024.667\n\
        sockperf: ---> percentile 99.900 =   57.179\n\
        sockperf: ---> percentile 99.000 =   31.654\n\
        sockperf: ---> percentile 50.000 =   18.815\n\
        sockperf: ---> <MIN> observation =   14.675\n";

    #[test]
    fn sockperf_output() {
        let s = parse_sockperf_pingpong(PP).unwrap();
        assert_eq!(s.value, 19.572);
        assert_eq!(s.details["p50_us"], 18.815);
        assert_eq!(s.details["p99_us"], 31.654);
        assert_eq!(s.details["min_us"], 14.675);
        assert_eq!(s.details["observations"], 14027.0);
        let tp = "sockperf: Total of 242090 messages sent in 1.000 sec\n\n\
            sockperf: \u{1b}[2;35mNOTE: test was performed, using msg-size=64.\u{1b}[0m\n\
            sockperf: Summary: Message Rate is 241971 [msg/sec]\n\
            sockperf: Summary: BandWidth is 14.769 MBps (118.150 Mbps)\n";
        let s = parse_sockperf_throughput(tp).unwrap();
        assert_eq!(s.value, 241971.0);
        assert_eq!(s.details["MBps"], 14.769);
        assert!(parse_sockperf_pingpong("sockperf: nothing").is_err());
        assert!(parse_sockperf_throughput("").is_err());
    }

    #[test]
    fn iperf3_output() {
        let j = r#"{"start":{},"end":{"sum_sent":{"bits_per_second":2.3e10,"retransmits":0},
            "sum_received":{"bits_per_second":23215155862.07}}}"#;
        let s = parse_iperf3(j).unwrap();
        assert!((s.value - 23.215155862).abs() < 1e-6);
        assert_eq!(s.details["sent_gbps"], 23.0);
        let e = parse_iperf3(r#"{"start":{},"end":{},"error":"unable to connect to server"}"#).unwrap_err();
        assert!(e.contains("unable to connect"), "{e}");
        assert!(parse_iperf3("iperf3: error").is_err());
    }

    #[test]
    fn redis_output() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
            \"GET\",\"32786.88\",\"0.794\",\"0.192\",\"0.767\",\"0.983\",\"1.663\",\"6.055\"\n";
        let s = parse_redis_csv(csv).unwrap();
        assert!((s.value - 767.0).abs() < 1e-9);
        assert_eq!(s.details["rps"], 32786.88);
        assert!((s.details["p99_latency_us"] - 1663.0).abs() < 1e-9);
        assert!(parse_redis_csv("\"test\",\"rps\"\n\"SET\",\"1\"\n").is_err());
    }

    #[test]
    fn ansi_and_numbers() {
        assert_eq!(strip_ansi("a\u{1b}[2;35mb\u{1b}[0mc"), "abc");
        assert_eq!(number_after("x avg-latency=1.5 (", "avg-latency"), Some(1.5));
        assert_eq!(number_after("percentile 50.000 =   18.8\n", "percentile 50.000"), Some(18.8));
        assert_eq!(number_after("nothing", "avg"), None);
    }
}
