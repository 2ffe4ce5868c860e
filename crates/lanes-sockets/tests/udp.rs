//! UDP under `liblanes_sockets.so`: call sequences compared with kernel UDP, and real
//! programs run with and without the library.
//!
//! `tests/udpconf/udpconf.c` prints a transcript of UDP calls (return values, errno names,
//! lengths, flags, checksums, source addresses relative to the sockets involved): it runs
//! twice without the library (the transcript must not vary by itself), then with it under
//! three spin settings; every transcript must equal the first. One of its cases leaves a
//! receiving socket's record behind, whose counts must show datagrams that came through
//! the ring (so the comparison covered the library's path, not only the kernel's).
//!
//! Programs (Debian packages installed by scripts/test.sh): sockperf UDP ping-pong and
//! throughput (library on both sides, each side alone, neither), iperf (v2) UDP, dnsmasq
//! answering dig and dnsperf, socat echoing lines, memcached's UDP with worker threads;
//! multicast: socat group members, iperf 2 with two servers in a group, sockperf to a
//! group, ssmping and asmping. What is checked is their own verdicts (no loss, duplication
//! or reordering where the tool counts it; answers; echoed bytes), and, for sockperf's
//! throughput run with the library on both sides (spinning allowed whatever the load),
//! that the ring carried datagrams; with one side alone none may.
//! Every wait is bounded.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{clean_command, diff, free_ports, library, run_bounded, Finished, Program, TestDir};

const RUN_LIMIT: Duration = Duration::from_secs(90);
const STOP_LIMIT: Duration = Duration::from_secs(20);

fn udpconf(dir: &TestDir) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/udpconf/udpconf.c");
    let out = dir.path("udpconf");
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc ({e}): run scripts/test.sh to install gcc"));
    assert!(o.status.success(), "cc {}: {}", src.display(), String::from_utf8_lossy(&o.stderr));
    out
}

fn run_udpconf(bin: &Path, fabric: &Path, lib: Option<&Path>, env: &[(&str, &str)], args: &[&str]) -> Finished {
    let mut c = clean_command(bin);
    c.args(args).env("LANES_DIR", fabric);
    if let Some(lib) = lib {
        c.env("LD_PRELOAD", lib);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let f = run_bounded(c, "udpconf", RUN_LIMIT);
    assert!(f.ok(), "{}", f.describe("udpconf"));
    f
}

#[test]
fn call_sequences_match_kernel_udp() {
    let dir = TestDir::named("udp", "conf");
    let bin = udpconf(&dir);
    let lib = library();
    let fabric = dir.sub("fabric");
    let reference = run_udpconf(&bin, &fabric, None, &[], &[]).stdout;
    assert!(reference.contains("== mixed") && reference.lines().count() > 150, "transcript:\n{reference}");
    assert!(reference.contains("on group, joined: 20 datagrams"), "multicast reached nobody:\n{reference}");
    let again = run_udpconf(&bin, &fabric, None, &[], &[]).stdout;
    assert_eq!(again, reference, "the kernel's own transcript varies:\n{}", diff(&reference, &again, 40));
    for (label, env) in [
        ("library", &[][..]),
        ("library, LANES_POLL_US=0", &[("LANES_POLL_US", "0")][..]),
        ("library, spinning always", &[("LANES_SPIN_GATE", "0"), ("LANES_POLL_US", "2000")][..]),
    ] {
        let got = run_udpconf(&bin, &fabric, Some(&lib), env, &[]).stdout;
        assert!(got == reference, "{label}: transcript differs from kernel UDP's:\n{}", diff(&reference, &got, 60));
    }
    // The ring carried the datagrams of a case (its receiver's record is left behind).
    let fabric = dir.sub("fabric-record");
    let got = run_udpconf(&bin, &fabric, Some(&lib), &[], &["leave-record"]).stdout;
    let kernel = run_udpconf(&bin, &dir.sub("fabric-none"), None, &[], &["leave-record"]).stdout;
    assert_eq!(got, kernel);
    let records = lanes::sockets::udp::list_udp(&fabric);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!((records[0].ring_datagrams, records[0].drops, records[0].kernel_datagrams), (10, 0, 0), "{records:?}");
    assert!(records[0].stale, "its process exited");
    // So did an IPv4 and an IPv6 group member's: the groups' datagrams came through their
    // rings, and their records show the memberships.
    let fabric = dir.sub("fabric-mcast-record");
    let got = run_udpconf(&bin, &fabric, Some(&lib), &[], &["mcast-leave-record"]).stdout;
    let kernel = run_udpconf(&bin, &dir.sub("fabric-mcast-none"), None, &[], &["mcast-leave-record"]).stdout;
    assert_eq!(got, kernel);
    assert!(got.contains("member: 10 datagrams") && got.contains("member6: 10 datagrams"), "{got}");
    let records = lanes::sockets::udp::list_udp(&fabric);
    assert_eq!(records.len(), 2, "{records:?}");
    for (r, group) in records.iter().zip(["239.255.42.4@", "ff15::4c61:6e67@"]) {
        assert_eq!((r.ring_datagrams, r.drops, r.kernel_datagrams), (10, 0, 0), "{records:?}");
        assert!(r.groups.len() == 1 && r.groups[0].starts_with(group), "{records:?}");
    }
}

// ---- programs ----------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Neither,
    Both,
    ServerOnly,
    ClientOnly,
}

impl Side {
    fn server(self) -> bool {
        matches!(self, Side::Both | Side::ServerOnly)
    }
    fn client(self) -> bool {
        matches!(self, Side::Both | Side::ClientOnly)
    }
    fn tag(self) -> &'static str {
        match self {
            Side::Neither => "none",
            Side::Both => "both",
            Side::ServerOnly => "server",
            Side::ClientOnly => "client",
        }
    }
}

fn program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed: run scripts/test.sh to install it"))
}

struct World {
    dir: TestDir,
    lib: PathBuf,
    failures: Vec<String>,
}

impl World {
    fn new(name: &str) -> World {
        World { dir: TestDir::named("udp", name), lib: library(), failures: Vec::new() }
    }
    fn fabric(&self, name: &str) -> PathBuf {
        self.dir.sub(&format!("fabric-{name}"))
    }
    fn cmd(&self, prog: &str, with_lib: bool, fabric: &Path) -> Command {
        let mut c = clean_command(program(prog));
        c.env("LANES_DIR", fabric).env("TMPDIR", &self.dir.0);
        if with_lib {
            c.env("LD_PRELOAD", &self.lib);
        }
        c
    }
    /// As `cmd`, spinning whatever the machine's load (`LANES_SPIN_GATE=0`): a receiver
    /// that may not spin sleeps in the kernel as soon as its ring is empty, and on a busy
    /// test machine whether its ring ever carries a datagram is then a matter of timing.
    fn spinning_cmd(&self, prog: &str, with_lib: bool, fabric: &Path) -> Command {
        let mut c = self.cmd(prog, with_lib, fabric);
        c.env("LANES_SPIN_GATE", "0");
        c
    }
    fn fail(&mut self, what: String) {
        eprintln!("FAILED: {what}");
        self.failures.push(what);
    }
    fn expect_ok(&mut self, f: &Finished, what: &str) -> bool {
        if f.ok() {
            return true;
        }
        self.fail(f.describe(what));
        false
    }
    fn expect_output(&mut self, f: &Finished, what: &str, needle: &str) {
        if !f.stdout.contains(needle) && !f.stderr.contains(needle) {
            self.fail(format!("{what}: no \"{needle}\" in the output\n{}", f.describe(what)));
        }
    }
    fn finish(self, test: &str) {
        assert!(
            self.failures.is_empty(),
            "{test}: {} failure(s):\n\n{}",
            self.failures.len(),
            self.failures.join("\n\n")
        );
    }
}

/// The most datagrams any UDP record of `fabric` showed through its ring, sampled while a
/// run goes on (records go when their sockets close).
struct RingSampler(support::Sampler<u64>);

impl RingSampler {
    fn start(fabric: &Path) -> RingSampler {
        let fabric_dir = fabric.to_path_buf();
        RingSampler(support::Sampler::start(fabric, Duration::from_millis(20), move |max: &mut u64, _| {
            for r in lanes::sockets::udp::list_udp(&fabric_dir) {
                *max = (*max).max(r.ring_datagrams);
            }
        }))
    }
    fn finish(self) -> u64 {
        self.0.finish()
    }
}

/// Whether some UDP socket of this network namespace is bound to `port`.
fn udp_bound(port: u16) -> bool {
    ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 1 && c[1].rsplit_once(':').is_some_and(|(_, p)| u16::from_str_radix(p, 16) == Ok(port))
            })
        })
    })
}

fn start_server(w: &mut World, cmd: Command, port: u16, what: &str) -> Option<Program> {
    let mut p = Program::spawn(cmd, what);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if udp_bound(port) {
            return Some(p);
        }
        if p.exited() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let f = p.stop(libc::SIGKILL, STOP_LIMIT);
    w.fail(format!("{what}: never bound UDP port {port}\n{}", f.describe(what)));
    None
}

const SOCKPERF_CLEAN: &str = "# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0";

#[test]
fn sockperf_udp() {
    let mut w = World::new("sockperf");
    for side in [Side::Neither, Side::Both, Side::ServerOnly, Side::ClientOnly] {
        let what = format!("sockperf UDP (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        let port = free_ports(1)[0];
        let rings = RingSampler::start(&fabric);
        let mut cmd = w.spinning_cmd("sockperf", side.server(), &fabric);
        cmd.args(["sr", "-i", "127.0.0.1", "-p", &port.to_string()]);
        let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: sr")) else { continue };
        let mut cmd = w.cmd("sockperf", side.client(), &fabric);
        cmd.args(["pp", "-i", "127.0.0.1", "-p", &port.to_string(), "-t", "2", "--mps", "3000000"]);
        let pp = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&pp, &format!("{what}: pp")) {
            w.expect_output(&pp, &format!("{what}: pp"), "Summary: Latency is");
            w.expect_output(&pp, &format!("{what}: pp"), SOCKPERF_CLEAN);
        }
        let mut cmd = w.spinning_cmd("sockperf", side.client(), &fabric);
        cmd.args(["tp", "-i", "127.0.0.1", "-p", &port.to_string(), "-m", "64", "-t", "2"]);
        let tp = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&tp, &format!("{what}: tp")) {
            w.expect_output(&tp, &format!("{what}: tp"), "Summary: Message Rate is");
        }
        let s = server.stop(libc::SIGINT, STOP_LIMIT);
        if w.expect_ok(&s, &format!("{what}: sr, stopped with SIGINT")) {
            w.expect_output(&s, &format!("{what}: sr"), "messages received and handled");
        }
        let ring = rings.finish();
        match side {
            // A throughput run against a spinning receiver: its ring must carry some.
            Side::Both if ring == 0 => w.fail(format!("{what}: no datagram went through a ring")),
            Side::ServerOnly | Side::ClientOnly | Side::Neither if ring > 0 => {
                w.fail(format!("{what}: {ring} datagrams went through a ring with one side alone"))
            }
            _ => {}
        }
    }
    w.finish("sockperf_udp");
}

#[test]
fn iperf2_udp() {
    let mut w = World::new("iperf");
    for side in [Side::Neither, Side::Both] {
        let what = format!("iperf -u (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        let port = free_ports(1)[0].to_string();
        let mut cmd = w.cmd("iperf", side.server(), &fabric);
        cmd.args(["-s", "-u", "-p", &port]);
        let Some(server) = start_server(&mut w, cmd, port.parse().expect("port"), &format!("{what}: server")) else {
            continue;
        };
        let mut cmd = w.cmd("iperf", side.client(), &fabric);
        cmd.args(["-c", "127.0.0.1", "-u", "-p", &port, "-t", "2", "-b", "20M", "-l", "1400"]);
        let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&c, &format!("{what}: client")) {
            // The server's report came back to the client over UDP.
            w.expect_output(&c, &format!("{what}: client"), "Server Report");
        }
        server.stop(libc::SIGKILL, STOP_LIMIT);
    }
    w.finish("iperf2_udp");
}

#[test]
fn dnsmasq_dig_dnsperf() {
    let mut w = World::new("dns");
    let queries = w.dir.path("queries");
    let list: String = (0..500).map(|i| format!("host{i}.lanes.test A\n")).collect();
    std::fs::write(&queries, list).expect("query file");
    for side in [Side::Neither, Side::Both, Side::ServerOnly, Side::ClientOnly] {
        let what = format!("dnsmasq (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        let port = free_ports(1)[0].to_string();
        let mut cmd = w.cmd("dnsmasq", side.server(), &fabric);
        cmd.args([
            "--no-daemon",
            "--port",
            &port,
            "--listen-address=127.0.0.1",
            "--bind-interfaces",
            "--no-resolv",
            "--no-hosts",
            "--address=/lanes.test/10.1.2.3",
            "--user=root",
            "--pid-file=",
        ]);
        let Some(server) = start_server(&mut w, cmd, port.parse().expect("port"), &format!("{what}: server")) else {
            continue;
        };
        let mut cmd = w.cmd("dig", side.client(), &fabric);
        cmd.args(["@127.0.0.1", "-p", &port, "+short", "+tries=1", "+time=5", "a.lanes.test"]);
        let d = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&d, &format!("{what}: dig")) && d.stdout.trim() != "10.1.2.3" {
            w.fail(format!("{what}: dig answered {:?}", d.stdout));
        }
        let mut cmd = w.cmd("dnsperf", side.client(), &fabric);
        cmd.args(["-s", "127.0.0.1", "-p", &port, "-d"]).arg(&queries).args(["-n", "4", "-t", "5"]);
        let p = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&p, &format!("{what}: dnsperf")) {
            let completed = p.stdout.lines().map(str::trim).find(|l| l.starts_with("Queries completed:"));
            if !completed.is_some_and(|l| l.ends_with("(100.00%)") && l.contains(" 2000 ")) {
                w.fail(format!("{what}: dnsperf did not complete its 2000 queries\n{}", p.describe("dnsperf")));
            }
        }
        server.stop(libc::SIGTERM, STOP_LIMIT);
    }
    w.finish("dnsmasq_dig_dnsperf");
}

#[test]
fn socat_udp_echo() {
    let mut w = World::new("socat");
    for side in [Side::Neither, Side::Both, Side::ServerOnly, Side::ClientOnly] {
        let what = format!("socat UDP echo (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        let port = free_ports(1)[0].to_string();
        let mut cmd = w.cmd("socat", side.server(), &fabric);
        cmd.args(["-T", "10", &format!("UDP4-LISTEN:{port},bind=127.0.0.1"), "PIPE"]);
        let Some(server) = start_server(&mut w, cmd, port.parse().expect("port"), &format!("{what}: server")) else {
            continue;
        };
        // Lines written with pauses: each is one datagram, echoed by the server.
        let script = format!(
            "for i in $(seq 1 300); do echo \"line $i\"; sleep 0.002; done | socat -t 2 - UDP4:127.0.0.1:{port}"
        );
        let mut cmd = clean_command("sh");
        cmd.args(["-c", &script]).env("LANES_DIR", &fabric).env("PATH", std::env::var_os("PATH").unwrap_or_default());
        if side.client() {
            cmd.env("LD_PRELOAD", &w.lib);
        }
        let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        let want: String = (1..=300).map(|i| format!("line {i}\n")).collect();
        if w.expect_ok(&c, &format!("{what}: client")) && c.stdout != want {
            w.fail(format!("{what}: echoed {} bytes, not the {} sent, in order", c.stdout.len(), want.len()));
        }
        server.stop(libc::SIGKILL, STOP_LIMIT);
    }
    w.finish("socat_udp_echo");
}

/// The client of [`memcached_udp_with_worker_threads`]: memcached's UDP frame (request id,
/// sequence, count, reserved) around each request; a set, then gets, each answer checked.
const MEMCACHED_UDP_CLIENT: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(10)
addr = ("127.0.0.1", int(sys.argv[1]))
def req(i, body):
    s.sendto(struct.pack("!HHHH", i, 0, 1, 0) + body, addr)
    d, _ = s.recvfrom(65536)
    assert struct.unpack("!HHHH", d[:8])[0] == i, "answer to another request"
    return d[8:]
assert req(1, b"set k 0 0 5\r\nhello\r\n") == b"STORED\r\n"
for i in range(2, 2002):
    r = req(i, b"get k\r\n")
    assert r == b"VALUE k 0 5\r\nhello\r\nEND\r\n", r
print("2000 gets answered")
"#;

/// memcached with four worker threads serves UDP on one socket, each thread waiting on a
/// duplicate of it: under the library the socket gets one record (the threads' first waits
/// came at once, and a record made twice used to take the first one's file away, so in
/// half the runs the socket had none), and a client's set and 2000 gets are answered as
/// without it.
#[test]
fn memcached_udp_with_worker_threads() {
    let mut w = World::new("memcached");
    for (run, side) in [Side::Neither, Side::Both, Side::Both, Side::Both].into_iter().enumerate() {
        let what = format!("memcached UDP, 4 threads, run {run} (library: {})", side.tag());
        let fabric = w.fabric(&format!("{}-{run}", side.tag()));
        let port = free_ports(1)[0];
        let mut cmd = w.cmd("memcached", side.server(), &fabric);
        cmd.args(["-U", &port.to_string(), "-p", "0", "-l", "127.0.0.1", "-t", "4", "-u", "root"]);
        let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: server")) else { continue };
        if side.server() {
            let records =
                || lanes::sockets::udp::list_udp(&fabric).into_iter().filter(|r| r.local.port() == port).count();
            let start = std::time::Instant::now();
            while records() == 0 && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let n = records();
            if n != 1 {
                w.fail(format!("{what}: {n} UDP records for port {port}, not one"));
            }
        }
        let mut cmd = w.cmd("python3", side.client(), &fabric);
        cmd.args(["-c", MEMCACHED_UDP_CLIENT, &port.to_string()]);
        let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&c, &format!("{what}: client")) {
            w.expect_output(&c, &what, "2000 gets answered");
        }
        server.stop(libc::SIGKILL, STOP_LIMIT);
    }
    w.finish("memcached_udp_with_worker_threads");
}

/// DDS: Cyclone DDS's `ddsperf` ping and pong (participants found by multicast discovery,
/// samples over unicast UDP to this host's address; a 1 MiB `SO_RCVBUF` on every socket,
/// which a raised `rmem_max` grants), without the library and with it on both sides: round
/// trips are measured either way, and with the library the samples go through the rings.
#[test]
fn ddsperf_ping_pong() {
    let mut w = World::new("ddsperf");
    for side in [Side::Neither, Side::Both] {
        let what = format!("ddsperf ping/pong (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        let rings = RingSampler::start(&fabric);
        let mut cmd = w.spinning_cmd("ddsperf", side.server(), &fabric);
        cmd.args(["-D", "20", "pong"]);
        let pong = Program::spawn(cmd, &format!("{what}: pong"));
        let mut cmd = w.spinning_cmd("ddsperf", side.client(), &fabric);
        cmd.args(["-D", "4", "ping"]);
        let ping = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        pong.stop(libc::SIGKILL, STOP_LIMIT);
        if !w.expect_ok(&ping, &format!("{what}: ping")) {
            continue;
        }
        // Its per-second lines: "... mean 22.1us ... cnt 22514".
        let trips: u64 = ping
            .stdout
            .lines()
            .filter_map(|l| l.split_once(" cnt ")?.1.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        if trips == 0 {
            w.fail(format!("{what}: no round trip measured\n{}", ping.describe("ping")));
        }
        let ring = rings.finish();
        eprintln!("{what}: {trips} round trips, at most {ring} datagrams in one ring");
        match side {
            Side::Both if ring == 0 => w.fail(format!("{what}: no datagram went through a ring")),
            Side::Neither if ring > 0 => w.fail(format!("{what}: {ring} datagrams went through a ring")),
            _ => {}
        }
    }
    w.finish("ddsperf_ping_pong");
}

// ---- multicast programs ------------------------------------------------------------------

/// How many sockets of this host joined IPv4 group `group` on any interface, as the kernel
/// counts them (`/proc/net/igmp`).
fn group_users(group: std::net::Ipv4Addr) -> u32 {
    let hex = format!("{:08X}", u32::from_ne_bytes(group.octets()));
    std::fs::read_to_string("/proc/net/igmp")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            (c.len() >= 2 && c[0] == hex).then(|| c[1].parse::<u32>().unwrap_or(0))
        })
        .sum()
}

/// Waits (bounded) until `users` sockets joined `group`.
fn wait_joined(w: &mut World, group: std::net::Ipv4Addr, users: u32, what: &str) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        if group_users(group) >= users {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    w.fail(format!("{what}: {group} never had {users} members (/proc/net/igmp)"));
    false
}

/// Two socat group members and a socat sender, each with or without the library: every
/// member writes every line once, in order, whoever carries the library.
#[test]
fn socat_multicast_members() {
    let mut w = World::new("socat-mcast");
    for (k, (sender_lib, member_libs)) in
        [(false, [false, false]), (true, [true, true]), (true, [true, false]), (false, [true, true])]
            .into_iter()
            .enumerate()
    {
        let what = format!("socat multicast (library: sender {sender_lib}, members {member_libs:?})");
        let fabric = w.fabric(&format!("case{k}"));
        let group = std::net::Ipv4Addr::new(239, 255, 77, 10 + k as u8);
        let port = free_ports(1)[0];
        let before = group_users(group);
        let mut members = Vec::new();
        for (i, lib) in member_libs.into_iter().enumerate() {
            let mut cmd = w.spinning_cmd("socat", lib, &fabric);
            cmd.args(["-u", &format!("UDP4-RECV:{port},ip-add-membership={group}:0.0.0.0,reuseaddr"), "-"]);
            members.push(Program::spawn(cmd, &format!("{what}: member {i}")));
        }
        if !wait_joined(&mut w, group, before + 2, &what) {
            continue;
        }
        let script = format!(
            "{{ for i in $(seq 1 300); do echo \"line $i\"; sleep 0.002; done; echo end; }} \
             | socat -u - UDP4-DATAGRAM:{group}:{port}"
        );
        let mut cmd = clean_command("sh");
        cmd.args(["-c", &script]).env("LANES_DIR", &fabric).env("PATH", std::env::var_os("PATH").unwrap_or_default());
        if sender_lib {
            cmd.env("LD_PRELOAD", &w.lib);
        }
        let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        w.expect_ok(&c, &format!("{what}: sender"));
        let want: String = (1..=300).map(|i| format!("line {i}\n")).chain(["end\n".to_string()]).collect();
        for (i, mut m) in members.into_iter().enumerate() {
            let ended = m.stdout_line(RUN_LIMIT, |l| l == "end").is_some();
            let f = m.stop(libc::SIGTERM, STOP_LIMIT);
            if !ended || f.stdout != want {
                let lines = f.stdout.lines().count();
                w.fail(format!(
                    "{what}: member {i} wrote {lines} lines, not the 301 sent, once each in order\n{}",
                    f.describe("member")
                ));
            }
        }
    }
    w.finish("socat_multicast_members");
}

/// iperf 2 UDP to a group with two servers as members (`iperf -s -u -B GROUP`, TTL 0 on
/// the client): each server's report must count every datagram, none lost or out of
/// order, with and without the library.
#[test]
fn iperf2_udp_multicast() {
    let mut w = World::new("iperf-mcast");
    for (k, side) in [Side::Neither, Side::Both, Side::ClientOnly].into_iter().enumerate() {
        let what = format!("iperf -u multicast (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        let group = std::net::Ipv4Addr::new(239, 255, 78, 10 + k as u8);
        let port = free_ports(1)[0].to_string();
        let before = group_users(group);
        let mut servers = Vec::new();
        for i in 0..2 {
            let mut cmd = w.cmd("iperf", side.server(), &fabric);
            cmd.args(["-s", "-u", "-B", &group.to_string(), "-p", &port]);
            servers.push(Program::spawn(cmd, &format!("{what}: server {i}")));
        }
        if !wait_joined(&mut w, group, before + 2, &what) {
            continue;
        }
        let mut cmd = w.cmd("iperf", side.client(), &fabric);
        cmd.args(["-c", &group.to_string(), "-u", "-T", "0", "-p", &port, "-t", "2", "-b", "2M", "-l", "1200"]);
        let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if !w.expect_ok(&c, &format!("{what}: client")) {
            continue;
        }
        let sent =
            c.stdout.lines().find_map(|l| l.split("Sent ").nth(1)?.split_whitespace().next()?.parse::<u64>().ok());
        for (i, mut s) in servers.into_iter().enumerate() {
            // "0.0000-2.0020 sec  2.51 MBytes  10.5 Mbits/sec   0.001 ms 0/1787 (0%)"
            let report = s.stdout_line(RUN_LIMIT, |l| l.contains("%)"));
            let f = s.stop(libc::SIGKILL, STOP_LIMIT);
            let counts = report.as_deref().and_then(|l| {
                let lost_total = l.split_whitespace().rev().nth(1)?;
                let (lost, total) = lost_total.split_once('/')?;
                Some((lost.parse::<u64>().ok()?, total.parse::<u64>().ok()?))
            });
            // The client's count includes its final datagram, which the report leaves out.
            let fine = matches!((counts, sent), (Some((0, total)), Some(sent)) if total + 1 == sent && total > 100);
            if !fine {
                w.fail(format!(
                    "{what}: server {i} reported {report:?} for {sent:?} datagrams sent\n{}\n{}",
                    f.describe("server"),
                    c.describe("client")
                ));
            }
        }
    }
    w.finish("iperf2_udp_multicast");
}

/// sockperf to a group: ping-pong (the server loops its answers back) must see no datagram
/// dropped, duplicated or reordered with the library on both sides, either or none; a
/// throughput run with both, against a spinning receiver, must use the ring.
#[test]
fn sockperf_udp_multicast() {
    let mut w = World::new("sockperf-mcast");
    for (k, side) in [Side::Neither, Side::Both, Side::ServerOnly, Side::ClientOnly].into_iter().enumerate() {
        let what = format!("sockperf UDP multicast (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        let group = format!("239.255.79.{}", 10 + k);
        let port = free_ports(1)[0];
        let rings = RingSampler::start(&fabric);
        let mut cmd = w.spinning_cmd("sockperf", side.server(), &fabric);
        cmd.args(["sr", "-i", &group, "-p", &port.to_string(), "--mc-loopback-enable"]);
        let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: sr")) else { continue };
        let mut cmd = w.spinning_cmd("sockperf", side.client(), &fabric);
        cmd.args(["pp", "-i", &group, "-p", &port.to_string(), "--mc-loopback-enable", "-t", "2"]);
        let pp = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&pp, &format!("{what}: pp")) {
            w.expect_output(&pp, &format!("{what}: pp"), "Summary: Latency is");
            w.expect_output(&pp, &format!("{what}: pp"), SOCKPERF_CLEAN);
        }
        let mut cmd = w.spinning_cmd("sockperf", side.client(), &fabric);
        cmd.args(["tp", "-i", &group, "-p", &port.to_string(), "--mc-loopback-enable", "-m", "64", "-t", "2"]);
        let tp = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&tp, &format!("{what}: tp")) {
            w.expect_output(&tp, &format!("{what}: tp"), "Summary: Message Rate is");
        }
        let s = server.stop(libc::SIGINT, STOP_LIMIT);
        if w.expect_ok(&s, &format!("{what}: sr, stopped with SIGINT")) {
            w.expect_output(&s, &format!("{what}: sr"), "messages received and handled");
        }
        let ring = rings.finish();
        match side {
            Side::Both if ring == 0 => w.fail(format!("{what}: no datagram went through a ring")),
            Side::ServerOnly | Side::ClientOnly | Side::Neither if ring > 0 => {
                w.fail(format!("{what}: {ring} datagrams went through a ring with one side alone"))
            }
            _ => {}
        }
    }
    w.finish("sockperf_udp_multicast");
}

/// ssmping and asmping against ssmpingd: the server answers each ping by unicast and to a
/// group the client joined (source-specific, 232.43.211.234, and any-source, 224.0.1.234);
/// the client must count every answer of both kinds once, with the library on both sides,
/// either or none.
#[test]
fn ssmping_source_specific_and_any_source() {
    let mut w = World::new("ssmping");
    let host = lanes::platform::net::host_addresses()
        .ok()
        .and_then(|a| a.into_iter().find(|ip| ip.is_ipv4()))
        .expect("an IPv4 address of this host besides loopback (the groups are routed by it)");
    for side in [Side::Neither, Side::Both, Side::ServerOnly, Side::ClientOnly] {
        let what = format!("ssmping (library: {})", side.tag());
        let fabric = w.fabric(side.tag());
        // ssmpingd listens on its fixed port (4321): one run at a time.
        let cmd = w.spinning_cmd("ssmpingd", side.server(), &fabric);
        let Some(server) = start_server(&mut w, cmd, 4321, &format!("{what}: ssmpingd")) else { continue };
        for (tool, args) in [
            ("ssmping", vec!["-4", "-c", "4", &host.to_string()]),
            ("asmping", vec!["-4", "-c", "4", "224.0.1.234", &host.to_string()]),
        ] {
            let mut cmd = w.spinning_cmd(tool, side.client(), &fabric);
            cmd.args(&args);
            let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
            if !w.expect_ok(&c, &format!("{what}: {tool}")) {
                continue;
            }
            let count = |needle: &str| c.stdout.lines().filter(|l| l.trim_start().starts_with(needle)).count();
            let lossless = c.stdout.matches("4 packets received, 0% packet loss").count();
            if (count("unicast from"), count("multicast from"), lossless) != (4, 4, 2) {
                w.fail(format!(
                    "{what}: {tool} did not count 4 unicast and 4 multicast answers, each once\n{}",
                    c.describe(tool)
                ));
            }
        }
        server.stop(libc::SIGKILL, STOP_LIMIT);
    }
    w.finish("ssmping_source_specific_and_any_source");
}
