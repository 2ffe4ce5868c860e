//! Real programs, as packaged by Debian and installed by scripts/test.sh, run with
//! `liblanes_sockets.so` preloaded into both sides, the server only, the client only, and
//! neither (the baseline): iperf3 (forward, `-R`, `::1`), sockperf (ping-pong, throughput,
//! and its epoll/poll/select multiplexers), redis-server with redis-benchmark and redis-cli
//! (a 1 MiB value, byte-exact), nginx (master and 2 workers, sendfile) with curl (a 16 MiB
//! file, byte-exact) and wrk (no socket errors), and iperf3 with either side SIGKILLed
//! mid-stream (the other must end, as it does without the library), and Node.js (libuv) with
//! a net server that ends connections with `destroy`, HAProxy in front of a web server, and
//! PostgreSQL with pgbench (a backend forked per connection; its books must balance).
//!
//! What is checked is exit statuses and sane output, not speed. While a setup runs, the
//! socket records in its fabric directory are sampled: with the library on both sides some
//! connection must have both ends attached (so the library did accelerate, and sockperf's
//! `dlsym(RTLD_DEFAULT, ...)` lookups reached it), with the library on one side none may.
//!
//! Every test uses its own ports (bound to port 0 a moment before), its own LANES_DIR and
//! configuration files, and kills whatever it started; every wait is bounded. A missing
//! program fails the test: run scripts/test.sh to install it.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{clean_command, free_ports, library, listening, tail, Finished, Program, Sampler, TestDir};

/// A server must listen within this.
const START_LIMIT: Duration = Duration::from_secs(15);
/// A client run (2 s of traffic, or 20000 requests) must end within this.
const RUN_LIMIT: Duration = Duration::from_secs(90);
/// A server must stop within this once asked to (or once its peer is gone).
const STOP_LIMIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Neither,
    Both,
    ServerOnly,
    ClientOnly,
}

const SIDES: [Side; 4] = [Side::Neither, Side::Both, Side::ServerOnly, Side::ClientOnly];

impl Side {
    fn server(self) -> bool {
        matches!(self, Side::Both | Side::ServerOnly)
    }

    fn client(self) -> bool {
        matches!(self, Side::Both | Side::ClientOnly)
    }

    fn label(self) -> &'static str {
        match self {
            Side::Neither => "no library",
            Side::Both => "library on both sides",
            Side::ServerOnly => "library in the server only",
            Side::ClientOnly => "library in the client only",
        }
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

/// A program's path: PATH, then the sbin directories (nginx lives in /usr/sbin).
fn program(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    dirs.iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not installed: run scripts/test.sh to install it"))
}

/// One test's private world: its directory and the library.
struct World {
    dir: TestDir,
    lib: PathBuf,
    failures: Vec<String>,
}

impl World {
    fn new(name: &str) -> World {
        World { dir: TestDir::named("programs", name), lib: library(), failures: Vec::new() }
    }

    /// A fresh fabric directory for one setup.
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

    fn fail(&mut self, what: String) {
        eprintln!("FAILED: {what}");
        self.failures.push(what);
    }

    /// Records a failure unless `f` ended with status 0 in time.
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
            "{}: {} failure(s):\n\n{}",
            test,
            self.failures.len(),
            self.failures.join("\n\n")
        );
    }
}

/// Starts a server and waits until it listens on `port` (without connecting to it: a probe
/// would count as a client for iperf3 -1). Records a failure and returns None otherwise.
fn start_server(w: &mut World, cmd: Command, port: u16, what: &str) -> Option<Program> {
    let mut p = Program::spawn(cmd, what);
    let start = Instant::now();
    while start.elapsed() < START_LIMIT {
        if listening(port) {
            return Some(p);
        }
        if p.exited() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let f = p.wait(Duration::from_secs(1));
    w.fail(f.describe(&format!("{what}: did not listen on port {port} within {START_LIMIT:?}")));
    None
}

#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    /// Most records seen at once.
    records: usize,
    /// Most records at once whose end had attached its peer.
    attached: usize,
    /// Most bytes sent through rings, summed over the records of one sample.
    ring_bytes: u64,
}

/// The socket records of a fabric directory, sampled every few milliseconds while a setup runs.
fn sample(fabric: &Path) -> Sampler<Seen> {
    Sampler::start(fabric, Duration::from_millis(3), |seen: &mut Seen, conns| {
        seen.records = seen.records.max(conns.len());
        seen.attached = seen.attached.max(conns.iter().filter(|c| c.peer_attached).count());
        seen.ring_bytes = seen.ring_bytes.max(conns.iter().map(|c| c.ring_bytes_sent).sum());
    })
}

/// With the library on both sides, some connection had both ends attached; with it on one
/// side, no end ever attached; without it, no record exists.
fn check_acceleration(w: &mut World, side: Side, seen: Seen, what: &str) {
    let bad = match side {
        Side::Both => seen.attached < 2,
        Side::ServerOnly | Side::ClientOnly => seen.attached > 0,
        Side::Neither => seen.records > 0,
    };
    eprintln!("{what}: socket records seen {seen:?}");
    if bad {
        w.fail(format!(
            "{what}: socket records: {seen:?} (both sides: expected a connection with both ends attached; \
             one side: expected no end attached; no library: no record)"
        ));
    }
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y).or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

// ------------------------------------------------------------------------------------------
// iperf3
// ------------------------------------------------------------------------------------------

fn iperf3(test: &str, client_args: &[&str]) {
    let mut w = World::new(test);
    for side in SIDES {
        let what = format!("iperf3 {} ({})", client_args.join(" "), side.label());
        let fabric = w.fabric(side.tag());
        let port = free_ports(1)[0];
        let sampler = sample(&fabric);
        let mut cmd = w.cmd("iperf3", side.server(), &fabric);
        cmd.args(["-s", "-1", "-p", &port.to_string()]);
        let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: iperf3 -s")) else { continue };
        let mut cmd = w.cmd("iperf3", side.client(), &fabric);
        cmd.args(client_args).args(["-p", &port.to_string(), "-l", "128K", "-t", "2"]);
        let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        let s = server.wait(STOP_LIMIT);
        let seen = sampler.finish();
        if w.expect_ok(&c, &format!("{what}: client")) {
            w.expect_output(&c, &what, "iperf Done.");
            for end in ["sender", "receiver"] {
                let line = c.stdout.lines().find(|l| l.trim_end().ends_with(end));
                match line {
                    Some(l) if !l.contains(" 0.00 Bytes") => {}
                    _ => w.fail(format!("{what}: no {end} summary with bytes moved\n{}", tail(&c.stdout, 20))),
                }
            }
        }
        w.expect_ok(&s, &format!("{what}: server (one-off, ends after the test)"));
        check_acceleration(&mut w, side, seen, &what);
    }
    w.finish(test);
}

#[test]
fn iperf3_forward() {
    iperf3("iperf3-forward", &["-c", "127.0.0.1"]);
}

#[test]
fn iperf3_reverse() {
    iperf3("iperf3-reverse", &["-c", "127.0.0.1", "-R"]);
}

#[test]
fn iperf3_ipv6() {
    iperf3("iperf3-ipv6", &["-c", "::1"]);
}

/// One side of a running iperf3 transfer is SIGKILLed; the other must end within a bound,
/// with the exit status it has without the library, and say why.
fn iperf3_killed(test: &str, kill_server: bool) {
    let mut w = World::new(test);
    // How the survivor ends without the library, forward and reverse.
    let mut baseline: [Option<(bool, Option<i32>)>; 2] = [None, None];
    for side in SIDES {
        for reverse in [false, true] {
            let what = format!(
                "iperf3{} with the {} killed ({})",
                if reverse { " -R" } else { "" },
                if kill_server { "server" } else { "client" },
                side.label()
            );
            let fabric = w.fabric(&format!("{}-{reverse}", side.tag()));
            let port = free_ports(1)[0];
            let mut cmd = w.cmd("iperf3", side.server(), &fabric);
            cmd.args(["-s", "-1", "-p", &port.to_string()]);
            let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: iperf3 -s")) else { continue };
            let mut cmd = w.cmd("iperf3", side.client(), &fabric);
            cmd.args(["-c", "127.0.0.1", "-p", &port.to_string(), "-l", "128K", "-t", "30"]);
            if reverse {
                cmd.arg("-R");
            }
            let mut client = Program::spawn(cmd, &what);
            std::thread::sleep(Duration::from_millis(1500));
            if client.exited() {
                let c = client.wait(STOP_LIMIT);
                w.fail(c.describe(&format!("{what}: the client ended before the kill")));
                continue;
            }
            let (victim, survivor) = if kill_server { (server, client) } else { (client, server) };
            victim.signal(libc::SIGKILL);
            let start = Instant::now();
            let f = survivor.wait(STOP_LIMIT);
            let took = start.elapsed();
            drop(victim);
            if f.timed_out {
                w.fail(f.describe(&format!("{what}: the survivor still ran {STOP_LIMIT:?} after the kill")));
                continue;
            }
            let class = (f.status.is_some_and(|s| s.success()), f.status.and_then(|s| s.code()));
            eprintln!("{what}: survivor ended after {took:?} with {class:?}");
            let text = format!("{}{}", f.stdout, f.stderr);
            let said = if kill_server {
                text.contains("iperf3: error -")
            } else {
                ["the client has unexpectedly closed the connection", "Connection reset by peer", "Broken pipe"]
                    .iter()
                    .any(|m| text.contains(m))
            };
            if !said {
                w.fail(f.describe(&format!("{what}: the survivor did not say its peer was gone")));
            }
            if side == Side::Neither {
                baseline[usize::from(reverse)] = Some(class);
            } else if let Some(b) = baseline[usize::from(reverse)] {
                if b != class {
                    w.fail(f.describe(&format!(
                        "{what}: the survivor ended with {class:?}, without the library with {b:?}"
                    )));
                }
            }
        }
    }
    w.finish(test);
}

#[test]
fn iperf3_client_killed_mid_stream() {
    iperf3_killed("iperf3-client-killed", false);
}

#[test]
fn iperf3_server_killed_mid_stream() {
    iperf3_killed("iperf3-server-killed", true);
}

// ------------------------------------------------------------------------------------------
// sockperf
// ------------------------------------------------------------------------------------------

const SOCKPERF_CLEAN: &str = "# dropped messages = 0; # duplicated messages = 0; # out-of-order messages = 0";

#[test]
fn sockperf() {
    let mut w = World::new("sockperf");
    for side in SIDES {
        let what = format!("sockperf --tcp ({})", side.label());
        let fabric = w.fabric(side.tag());
        let port = free_ports(1)[0].to_string();
        let sampler = sample(&fabric);
        let mut cmd = w.cmd("sockperf", side.server(), &fabric);
        cmd.args(["sr", "--tcp", "-i", "127.0.0.1", "-p", &port]);
        let Some(server) = start_server(&mut w, cmd, port.parse().expect("port"), &format!("{what}: sr")) else {
            continue;
        };
        let mut cmd = w.cmd("sockperf", side.client(), &fabric);
        // --mps: sockperf's table of send times holds 600k messages a second unless told.
        cmd.args(["pp", "--tcp", "-i", "127.0.0.1", "-p", &port, "-t", "2", "--mps", "3000000"]);
        let pp = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&pp, &format!("{what}: pp")) {
            w.expect_output(&pp, &format!("{what}: pp"), "Summary: Latency is");
            w.expect_output(&pp, &format!("{what}: pp"), SOCKPERF_CLEAN);
        }
        let mut cmd = w.cmd("sockperf", side.client(), &fabric);
        cmd.args(["tp", "--tcp", "-i", "127.0.0.1", "-p", &port, "-m", "64", "-t", "2"]);
        let tp = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&tp, &format!("{what}: tp")) {
            w.expect_output(&tp, &format!("{what}: tp"), "Summary: Message Rate is");
        }
        let s = server.stop(libc::SIGINT, STOP_LIMIT);
        if w.expect_ok(&s, &format!("{what}: sr, stopped with SIGINT")) {
            w.expect_output(&s, &format!("{what}: sr"), "messages received and handled");
        }
        check_acceleration(&mut w, side, sampler.finish(), &what);
    }
    w.finish("sockperf");
}

/// sockperf's server and client multiplexing two TCP connections with epoll, poll and select
/// (`-f feed -F ...`).
#[test]
fn sockperf_multiplexers() {
    let mut w = World::new("sockperf-mux");
    for mux in ["epoll", "poll", "select"] {
        for side in SIDES {
            let what = format!("sockperf -F {mux}, two connections ({})", side.label());
            let fabric = w.fabric(&format!("{mux}-{}", side.tag()));
            let feed = w.dir.path(&format!("feed-{mux}-{}", side.tag()));
            let sampler = sample(&fabric);
            // Ports that were free a moment ago: if another program takes one before the
            // server binds it, the server runs again on others (at most three times).
            let mut attempt = 0;
            let server = loop {
                attempt += 1;
                let ports = free_ports(2);
                std::fs::write(&feed, format!("T:127.0.0.1:{}\nT:127.0.0.1:{}\n", ports[0], ports[1])).expect("feed");
                let mut cmd = w.cmd("sockperf", side.server(), &fabric);
                cmd.arg("sr").arg("-f").arg(&feed).args(["-F", mux]);
                let mut p = Program::spawn(cmd, &format!("{what}: sr"));
                let start = Instant::now();
                while start.elapsed() < START_LIMIT && !p.exited() && !ports.iter().all(|&q| listening(q)) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                if ports.iter().all(|&q| listening(q)) {
                    break Some(p);
                }
                let f = p.stop(libc::SIGINT, STOP_LIMIT);
                if attempt == 3 {
                    w.fail(f.describe(&format!("{what}: sr did not listen on both ports {ports:?}, 3 tries")));
                    break None;
                }
            };
            let Some(server) = server else { continue };
            let mut cmd = w.cmd("sockperf", side.client(), &fabric);
            cmd.arg("pp").arg("-f").arg(&feed).args(["-F", mux, "-t", "1", "--mps", "3000000"]);
            let pp = Program::spawn(cmd, &what).wait(RUN_LIMIT);
            if w.expect_ok(&pp, &format!("{what}: pp")) {
                w.expect_output(&pp, &format!("{what}: pp"), "Summary: Latency is");
                w.expect_output(&pp, &format!("{what}: pp"), SOCKPERF_CLEAN);
                w.expect_output(&pp, &format!("{what}: pp"), &format!("using {mux}()"));
            }
            let s = server.stop(libc::SIGINT, STOP_LIMIT);
            w.expect_ok(&s, &format!("{what}: sr, stopped with SIGINT"));
            check_acceleration(&mut w, side, sampler.finish(), &what);
        }
    }
    w.finish("sockperf-mux");
}

/// sockperf imports no socket function: it resolves them with dlsym(RTLD_DEFAULT, name).
/// The global scope puts LD_PRELOAD objects first, so it must get the library's; a
/// connection of sockperf with both ends attached and bytes through the ring proves it did.
/// Spinning is allowed whatever the load (`LANES_SPIN_GATE=0`): with other tests on every
/// CPU the receiver would rightly leave every byte to the kernel.
#[test]
fn sockperf_dlsym_finds_the_preloaded_functions() {
    let nm = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(program("sockperf"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm ({e}): run scripts/test.sh to install binutils"));
    let imports = String::from_utf8_lossy(&nm.stdout);
    let names: Vec<&str> =
        imports.lines().filter_map(|l| l.split_whitespace().last()).map(|s| s.split('@').next().unwrap_or(s)).collect();
    assert!(names.contains(&"dlsym"), "sockperf does not import dlsym:\n{imports}");
    for direct in ["socket", "connect", "accept", "recv", "send", "recvfrom", "sendto", "poll", "epoll_wait"] {
        assert!(!names.contains(&direct), "sockperf imports {direct} directly; this test assumes dlsym:\n{imports}");
    }

    let mut w = World::new("sockperf-dlsym");
    let fabric = w.fabric("both");
    let port = free_ports(1)[0].to_string();
    let sampler = sample(&fabric);
    let mut cmd = w.cmd("sockperf", true, &fabric);
    cmd.env("LANES_SPIN_GATE", "0").args(["sr", "--tcp", "-i", "127.0.0.1", "-p", &port]);
    let server = start_server(&mut w, cmd, port.parse().expect("port"), "sockperf sr");
    if let Some(server) = server {
        let mut cmd = w.cmd("sockperf", true, &fabric);
        cmd.env("LANES_SPIN_GATE", "0");
        cmd.args(["pp", "--tcp", "-i", "127.0.0.1", "-p", &port, "-t", "1", "--mps", "3000000"]);
        let pp = Program::spawn(cmd, "sockperf pp").wait(RUN_LIMIT);
        w.expect_ok(&pp, "sockperf pp");
        let s = server.stop(libc::SIGINT, STOP_LIMIT);
        w.expect_ok(&s, "sockperf sr");
        let seen = sampler.finish();
        if seen.attached < 2 || seen.ring_bytes == 0 {
            w.fail(format!(
                "sockperf with the library on both sides: {seen:?}; expected both ends attached and bytes \
                 through the ring, as when its dlsym(RTLD_DEFAULT) lookups find the library's functions"
            ));
        }
    }
    w.finish("sockperf-dlsym");
}

// ------------------------------------------------------------------------------------------
// redis
// ------------------------------------------------------------------------------------------

/// HAProxy (HTTP mode) in front of Python's http.server, curl fetching a 4 MiB file through
/// it three times, every process under the library or none: byte-exact each time. HAProxy
/// sets no_new_privs as it starts (to refuse setuid programs), which is no seccomp filter:
/// its connections are accelerated (they all stayed kernel TCP while no_new_privs counted
/// as a sandbox). Set up at connect (`LANES_SOCKETS_DEFER=0`): curl's connections are short.
#[test]
fn haproxy_in_front_of_a_web_server() {
    let mut w = World::new("haproxy");
    let site = w.dir.sub("site");
    let blob = random_bytes(4 << 20, 0x4a9);
    std::fs::write(site.join("blob.bin"), &blob).expect("the file to serve");
    for side in [Side::Neither, Side::Both] {
        let what = format!("haproxy ({})", side.label());
        let fabric = w.fabric(side.tag());
        let ports = free_ports(2);
        let (front, back) = (ports[0], ports[1]);
        let cfg = w.dir.path(&format!("haproxy-{}.cfg", side.tag()));
        let conf = format!(
            "global\n    maxconn 100\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 30s\n    \
             timeout server 30s\nfrontend f\n    bind 127.0.0.1:{front}\n    default_backend b\nbackend b\n    \
             server s1 127.0.0.1:{back}\n"
        );
        std::fs::write(&cfg, conf).expect("haproxy.cfg");
        let sampler = sample(&fabric);
        let mut cmd = w.cmd("python3", side.server(), &fabric);
        cmd.env("LANES_SOCKETS_DEFER", "0").args(["-m", "http.server", &back.to_string(), "--bind", "127.0.0.1"]);
        cmd.current_dir(&site);
        let Some(web) = start_server(&mut w, cmd, back, &format!("{what}: http.server")) else { continue };
        let mut cmd = w.cmd("haproxy", side.server(), &fabric);
        cmd.env("LANES_SOCKETS_DEFER", "0").arg("-f").arg(&cfg).arg("-db");
        let Some(proxy) = start_server(&mut w, cmd, front, &format!("{what}: haproxy")) else {
            drop(web);
            continue;
        };
        for i in 0..3 {
            let out = w.dir.path(&format!("fetched-{}-{i}", side.tag()));
            let mut cmd = w.cmd("curl", side.client(), &fabric);
            cmd.env("LANES_SOCKETS_DEFER", "0").args(["-s", "-S", "-o"]).arg(&out);
            cmd.arg(format!("http://127.0.0.1:{front}/blob.bin"));
            let f = Program::spawn(cmd, "curl").wait(RUN_LIMIT);
            if !w.expect_ok(&f, &format!("{what}: curl {i}")) {
                continue;
            }
            let got = std::fs::read(&out).unwrap_or_default();
            if let Some(at) = first_difference(&got, &blob) {
                w.fail(format!("{what}: fetch {i}: {} bytes, first difference at {at}", got.len()));
            }
        }
        drop(proxy);
        drop(web);
        check_acceleration(&mut w, side, sampler.finish(), &what);
    }
    w.finish("haproxy_in_front_of_a_web_server");
}

/// Programs linked with jemalloc (dig, redis-server) start under the library, as a
/// program that prints its version: jemalloc closes files with `syscall(SYS_close)` as it
/// starts, inside its own lock, and the library's `syscall` once allocated there (starting
/// itself, asking std for the thread's handle): both hung for good at start.
#[test]
fn programs_linked_with_jemalloc_start_under_the_library() {
    let mut w = World::new("jemalloc");
    let fabric = w.fabric("jemalloc");
    for (prog, arg, says) in [("dig", "-v", "DiG"), ("redis-server", "--version", "Redis server")] {
        let mut cmd = w.cmd(prog, true, &fabric);
        cmd.arg(arg);
        let f = Program::spawn(cmd, prog).wait(Duration::from_secs(20));
        if w.expect_ok(&f, &format!("{prog} {arg} under the library")) {
            w.expect_output(&f, prog, says);
        }
    }
    w.finish("programs_linked_with_jemalloc_start_under_the_library");
}

/// Node's net server: acknowledges each line (`ack LINE`), echoes a connection's bytes
/// after a line `ECHO` back to it as they come, and ends a connection at a line `CLOSE`
/// (`destroy`: libuv closes with `syscall(SYS_close)`). Prints what each connection
/// received, by number, when it closes; stops after three.
const NODE_SERVER: &str = r#"
const net = require('net');
let id = 0;
const srv = net.createServer(c => {
  const me = id++;
  let all = '', echo = false;
  c.on('data', d => {
    if (echo) { c.write(d); return; }
    all += d.toString('latin1');
    for (const line of d.toString('latin1').split('\n')) {
      if (line === 'CLOSE') { c.destroy(); return; }
      if (line === 'ECHO') { echo = true; c.write('ready\n'); return; }
      if (line) c.write('ack ' + line + '\n');
    }
  });
  c.on('end', () => c.end());
  c.on('close', () => { console.log(`conn ${me} received ${JSON.stringify(all)}`); if (me === 2) srv.close(); });
  c.on('error', e => console.log(`conn ${me} error ${e.code}`));
});
srv.listen(+process.argv[2], '127.0.0.1', () => console.log('listening'));
"#;

/// Node's client of [`NODE_SERVER`]: connection A (twelve lines, then CLOSE, then a late
/// line the server must never see on another connection), B (one line on the number the
/// server gave A, then its end: B must get its own answer alone), C (4 MiB echoed back,
/// compared).
const NODE_CLIENT: &str = r#"
const net = require('net'), crypto = require('crypto');
const port = +process.argv[2];
const sleep = ms => new Promise(r => setTimeout(r, ms));
function conn() { return new Promise((ok, bad) => { const s = net.connect(port, '127.0.0.1', () => ok(s)); s.on('error', bad); }); }
function readAll(s) { return new Promise(ok => { const parts = []; s.on('data', d => parts.push(d)); s.on('end', () => ok(Buffer.concat(parts))); }); }
(async () => {
  const a = await conn();
  let acks = '';
  a.on('data', d => { acks += d; });
  a.on('error', () => {});
  for (let i = 0; i < 12; i++) a.write(`a${i}\n`);
  while (acks.split('\n').length <= 12) await sleep(5);
  a.write('CLOSE\n');
  await sleep(300);
  a.write('A-LATE\n');
  await sleep(100);
  const b = await conn();
  const bGot = readAll(b);
  b.end('B-hello\n');
  console.log('B got ' + JSON.stringify((await bGot).toString()));
  const c = await conn();
  const data = crypto.randomBytes(4 << 20);
  const ready = new Promise(ok => c.once('data', ok));
  c.write('ECHO\n');
  await ready;
  let got = 0; const h = crypto.createHash('sha256');
  const done = new Promise(ok => c.on('data', d => { h.update(d); got += d.length; if (got >= data.length) ok(); }));
  c.write(data);
  await done;
  const same = h.digest('hex') === crypto.createHash('sha256').update(data).digest('hex');
  console.log(same ? 'C echoed 4 MiB, same' : 'C echoed bytes differ');
  c.end(); a.destroy();
})().catch(e => { console.log('client error ' + e); process.exit(1); });
"#;

/// Node.js (libuv): a server ends a connection with `destroy` (libuv's `syscall(SYS_close)`,
/// which the C library's `close` never sees), its client writes to that connection late,
/// and the next connection the server accepts gets the same descriptor number: with the
/// library its stream must be its own (before the library saw such closes, the late bytes
/// came in the new connection and its answer went to the old one), and 4 MiB echoed on a
/// third connection come back unchanged. Each end set up at connect
/// (`LANES_SOCKETS_DEFER=0`), so the records are there from the first byte.
#[test]
fn node_net_server_that_destroys_connections() {
    let mut w = World::new("node");
    let server_js = w.dir.path("server.js");
    let client_js = w.dir.path("client.js");
    std::fs::write(&server_js, NODE_SERVER).expect("server.js");
    std::fs::write(&client_js, NODE_CLIENT).expect("client.js");
    for side in SIDES {
        let what = format!("node ({})", side.label());
        let fabric = w.fabric(side.tag());
        let port = free_ports(1)[0];
        let sampler = sample(&fabric);
        let mut cmd = w.cmd("node", side.server(), &fabric);
        cmd.env("LANES_SOCKETS_DEFER", "0").arg(&server_js).arg(port.to_string());
        let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: server")) else { continue };
        let mut cmd = w.cmd("node", side.client(), &fabric);
        cmd.env("LANES_SOCKETS_DEFER", "0").arg(&client_js).arg(port.to_string());
        let client = Program::spawn(cmd, &format!("{what}: client")).wait(RUN_LIMIT);
        let served = server.wait(STOP_LIMIT);
        check_acceleration(&mut w, side, sampler.finish(), &what);
        if !w.expect_ok(&client, &format!("{what}: client")) || !w.expect_ok(&served, &format!("{what}: server")) {
            continue;
        }
        w.expect_output(&client, &what, r#"B got "ack B-hello\n""#);
        w.expect_output(&client, &what, "C echoed 4 MiB, same");
        w.expect_output(&served, &what, r#"conn 1 received "B-hello\n""#);
        if served.stdout.contains("A-LATE") {
            w.fail(format!("{what}: A's late bytes reached the server\n{}", served.describe("server")));
        }
    }
    w.finish("node_net_server_that_destroys_connections");
}

#[test]
fn redis_benchmark_and_a_large_value() {
    let mut w = World::new("redis");
    let value = random_bytes(1 << 20, 0x5eed);
    let value_file = w.dir.path("value.bin");
    std::fs::write(&value_file, &value).expect("value file");
    for side in SIDES {
        let what = format!("redis ({})", side.label());
        let fabric = w.fabric(side.tag());
        let data = w.dir.sub(&format!("redis-{}", side.tag()));
        let port = free_ports(1)[0].to_string();
        let sampler = sample(&fabric);
        let mut cmd = w.cmd("redis-server", side.server(), &fabric);
        cmd.args([
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ])
        .args(["--daemonize", "no", "--logfile", ""])
        .arg("--dir")
        .arg(&data);
        let Some(server) = start_server(&mut w, cmd, port.parse().expect("port"), &format!("{what}: redis-server"))
        else {
            continue;
        };
        let cli = |w: &World, prog: &str| {
            let mut c = w.cmd(prog, side.client(), &fabric);
            c.args(["-h", "127.0.0.1", "-p", &port]);
            c
        };

        let mut cmd = cli(&w, "redis-benchmark");
        cmd.args(["-t", "get,set", "-n", "20000", "-q"]);
        let b = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&b, &format!("{what}: redis-benchmark")) {
            let text = b.stdout.replace('\r', "\n");
            for op in ["SET", "GET"] {
                let ok = text.lines().any(|l| {
                    l.trim()
                        .strip_prefix(&format!("{op}: "))
                        .and_then(|r| r.split_whitespace().next())
                        .and_then(|n| n.parse::<f64>().ok())
                        .is_some_and(|n| n > 0.0)
                        && l.contains("requests per second")
                });
                if !ok {
                    w.fail(format!("{what}: redis-benchmark printed no {op} rate\n{}", tail(&text, 10)));
                }
            }
        }

        let mut cmd = cli(&w, "redis-cli");
        cmd.args(["-x", "SET", "big"]);
        let stdin = std::fs::File::open(&value_file).expect("value file");
        let set = Program::spawn_with_stdin(cmd, &what, Stdio::from(stdin)).wait(RUN_LIMIT);
        if w.expect_ok(&set, &format!("{what}: redis-cli -x SET")) && set.stdout.trim() != "OK" {
            w.fail(set.describe(&format!("{what}: redis-cli -x SET did not say OK")));
        }
        let mut cmd = cli(&w, "redis-cli");
        cmd.args(["--raw", "GET", "big"]);
        let get = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&get, &format!("{what}: redis-cli GET")) {
            let mut want = value.clone();
            want.push(b'\n');
            if let Some(at) = first_difference(&want, &get.stdout_bytes) {
                w.fail(format!(
                    "{what}: GET returned {} bytes, expected {} (the 1 MiB value and a newline); first difference at byte {at}",
                    get.stdout_bytes.len(),
                    want.len()
                ));
            }
        }
        let mut cmd = cli(&w, "redis-cli");
        cmd.args(["STRLEN", "big"]);
        let len = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&len, &format!("{what}: redis-cli STRLEN")) && len.stdout.trim() != "1048576" {
            w.fail(len.describe(&format!("{what}: STRLEN is not 1048576")));
        }

        let s = server.stop(libc::SIGTERM, STOP_LIMIT);
        w.expect_ok(&s, &format!("{what}: redis-server, stopped with SIGTERM"));
        check_acceleration(&mut w, side, sampler.finish(), &what);
    }
    w.finish("redis");
}

// ------------------------------------------------------------------------------------------
// nginx, curl, wrk
// ------------------------------------------------------------------------------------------

fn nginx_conf(prefix: &Path, port: u16) -> String {
    let p = prefix.display();
    // As root, the workers would run as nobody, who may not read a private directory.
    // SAFETY: geteuid has no preconditions.
    let user = if unsafe { libc::geteuid() } == 0 { "user root;\n" } else { "" };
    format!(
        "{user}daemon off;\nmaster_process on;\nworker_processes 2;\npid {p}/nginx.pid;\n\
         error_log {p}/error.log info;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  client_body_temp_path {p}/tmp/body;\n\
         \x20 proxy_temp_path {p}/tmp/proxy;\n  fastcgi_temp_path {p}/tmp/fastcgi;\n\
         \x20 uwsgi_temp_path {p}/tmp/uwsgi;\n  scgi_temp_path {p}/tmp/scgi;\n\
         \x20 server {{ listen 127.0.0.1:{port}; root {p}/www; }}\n}}\n"
    )
}

#[test]
fn nginx_with_curl_and_wrk() {
    let mut w = World::new("nginx");
    let big = random_bytes(16 << 20, 0xb16);
    for side in SIDES {
        let what = format!("nginx ({})", side.label());
        let fabric = w.fabric(side.tag());
        let prefix = w.dir.sub(&format!("nginx-{}", side.tag()));
        for d in ["www", "tmp", "logs"] {
            std::fs::create_dir_all(prefix.join(d)).expect("nginx dirs");
        }
        std::fs::write(prefix.join("www/big.bin"), &big).expect("big.bin");
        std::fs::write(prefix.join("www/index.html"), "<html>lanes</html>\n").expect("index.html");
        let port = free_ports(1)[0];
        let conf = prefix.join("nginx.conf");
        std::fs::write(&conf, nginx_conf(&prefix, port)).expect("nginx.conf");
        let sampler = sample(&fabric);
        let mut cmd = w.cmd("nginx", side.server(), &fabric);
        cmd.arg("-p").arg(&prefix).arg("-c").arg(&conf).arg("-e").arg(prefix.join("error.log"));
        let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: nginx")) else { continue };

        let got = prefix.join("got.bin");
        let mut cmd = w.cmd("curl", side.client(), &fabric);
        cmd.args(["-fsS", "-o"]).arg(&got).arg(format!("http://127.0.0.1:{port}/big.bin"));
        let c = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&c, &format!("{what}: curl of a 16 MiB file")) {
            let body = std::fs::read(&got).unwrap_or_default();
            if let Some(at) = first_difference(&big, &body) {
                w.fail(format!(
                    "{what}: curl got {} bytes, expected {}; first difference at byte {at}",
                    body.len(),
                    big.len()
                ));
            }
        }

        let mut cmd = w.cmd("wrk", side.client(), &fabric);
        cmd.args(["-c", "16", "-t", "2", "-d", "2s"]).arg(format!("http://127.0.0.1:{port}/index.html"));
        let r = Program::spawn(cmd, &what).wait(RUN_LIMIT);
        if w.expect_ok(&r, &format!("{what}: wrk")) {
            let requests = r
                .stdout
                .lines()
                .find(|l| l.contains("requests in"))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            if requests == 0 {
                w.fail(r.describe(&format!("{what}: wrk made no request")));
            }
            for bad in ["Socket errors", "Non-2xx or 3xx responses"] {
                if r.stdout.contains(bad) {
                    w.fail(r.describe(&format!("{what}: wrk reports {bad}")));
                }
            }
        }

        let s = server.stop(libc::SIGQUIT, STOP_LIMIT);
        w.expect_ok(&s, &format!("{what}: nginx, stopped with SIGQUIT"));
        let log = std::fs::read_to_string(prefix.join("error.log")).unwrap_or_default();
        let serious: Vec<&str> =
            log.lines().filter(|l| ["[alert]", "[emerg]", "[crit]", "[error]"].iter().any(|s| l.contains(s))).collect();
        if !serious.is_empty() {
            w.fail(format!("{what}: nginx's error log:\n{}", serious.join("\n")));
        }
        check_acceleration(&mut w, side, sampler.finish(), &what);
    }
    w.finish("nginx");
}

// ------------------------------------------------------------------------------------------
// OpenSSH
// ------------------------------------------------------------------------------------------

/// OpenSSH's sshd with its default privilege separation: the pre-authentication child runs
/// under a seccomp filter that kills it for any system call outside a short list (read and
/// write, not recvmsg or sendmsg). Ten logins by key to 127.0.0.1 with sshd and ssh both
/// under the library, then one that pipes 1 MiB through `cat`, byte-exact. Skipped (with a
/// message) where sshd is not installed or this is not root (sshd's privilege separation
/// needs root).
#[test]
fn sshd_logins_with_its_seccomp_sandbox() {
    let Some(sshd) = ["/usr/sbin/sshd", "/sbin/sshd"].iter().map(PathBuf::from).find(|p| p.is_file()) else {
        eprintln!("SKIPPED: sshd is not installed (apt-get install openssh-server openssh-client)");
        return;
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: sshd's privilege separation needs root");
        return;
    }
    let _ = std::fs::create_dir_all("/run/sshd");
    let mut w = World::new("sshd");
    let dir = w.dir.0.clone();
    for key in ["host", "client"] {
        let o = Command::new(program("ssh-keygen"))
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .output()
            .expect("ssh-keygen");
        assert!(o.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&o.stderr));
    }
    let port = free_ports(1)[0];
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nAuthorizedKeysFile {d}/client.pub\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             UsePAM no\nStrictModes no\nPidFile {d}/sshd.pid\n",
            d = dir.display()
        ),
    )
    .expect("sshd_config");
    let side = Side::Both;
    let what = format!("sshd ({})", side.label());
    let fabric = w.fabric(side.tag());
    let sampler = sample(&fabric);
    let mut cmd = clean_command(&sshd);
    cmd.env("LANES_DIR", &fabric)
        .env("LD_PRELOAD", &w.lib)
        .arg("-D")
        .arg("-f")
        .arg(&config)
        .arg("-E")
        .arg(dir.join("sshd.log"));
    let Some(server) = start_server(&mut w, cmd, port, &what) else {
        w.finish("sshd");
        return;
    };
    let ssh = |w: &World, command: &str| {
        let mut c = w.cmd("ssh", side.client(), &fabric);
        c.args(["-F", "/dev/null", "-p", &port.to_string(), "-i"]).arg(dir.join("client")).args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "root@127.0.0.1",
            command,
        ]);
        c
    };
    let started = Instant::now();
    for i in 0..10 {
        let f = Program::spawn(ssh(&w, "echo logged-in-$((6*7))"), &what).wait(RUN_LIMIT);
        if w.expect_ok(&f, &format!("{what}: login {i}")) && f.stdout.trim() != "logged-in-42" {
            w.fail(f.describe(&format!("{what}: login {i} printed something else")));
        }
    }
    let data = random_bytes(1 << 20, 0x55d);
    let data_file = dir.join("data.bin");
    std::fs::write(&data_file, &data).expect("data file");
    let stdin = std::fs::File::open(&data_file).expect("data file");
    let f = Program::spawn_with_stdin(ssh(&w, "cat"), &what, Stdio::from(stdin)).wait(RUN_LIMIT);
    if w.expect_ok(&f, &format!("{what}: cat of 1 MiB")) {
        if let Some(at) = first_difference(&data, &f.stdout_bytes) {
            w.fail(format!("{what}: cat returned {} bytes; first difference at byte {at}", f.stdout_bytes.len()));
        }
    }
    eprintln!("{what}: 10 logins and the 1 MiB cat took {:?}", started.elapsed());
    let s = server.stop(libc::SIGTERM, STOP_LIMIT);
    if s.status.is_none() {
        w.fail(s.describe(&format!("{what}: sshd did not stop on SIGTERM")));
    }
    if let Ok(log) = std::fs::read_to_string(dir.join("sshd.log")) {
        if log.contains("signal 31") || log.contains("killed") || log.contains("SIGSYS") {
            w.fail(format!("{what}: sshd's log reports a killed child:\n{}", tail(&log, 20)));
        }
    }
    // Both ends publish records; whether sshd's end attaches its peer before the sandbox
    // forbids it (it then stays kernel TCP in that direction, by design) is a race, and the
    // sampler can miss a login's short-lived record. What can be required is that the
    // library was at work (a record seen), so that the logins above ran through it.
    let seen = sampler.finish();
    eprintln!("{what}: socket records seen {seen:?}");
    if seen.records < 1 {
        w.fail(format!("{what}: socket records: {seen:?} (expected the library's records)"));
    }
    w.finish("sshd");
}

// ------------------------------------------------------------------------------------------
// PostgreSQL
// ------------------------------------------------------------------------------------------

fn chown(path: &Path, (uid, gid): (u32, u32)) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
}

/// PostgreSQL (a backend forked per connection, epoll in the backends) with pgbench, the
/// server and the clients both as the `postgres` user (the library leaves a peer of
/// another user to the kernel): `pgbench -i`, then TPC-B with 4 clients, every side of
/// the library. Its books must balance afterwards, as they do on kernel TCP: the sum of
/// the accounts' balances equals the sum of the history's deltas, and every transaction
/// committed. With the library on both sides, the backends' connections must have had
/// both ends attached.
#[test]
fn postgresql_with_pgbench_keeps_its_books() {
    use lanes_testkit::postgres;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running PostgreSQL as its own user needs root");
        return;
    }
    let bin = postgres::bin_dir().expect("PostgreSQL is not installed: run scripts/test.sh to install it");
    let ids =
        lanes::platform::users::account_ids("postgres").expect("no user postgres: the PostgreSQL package makes it");
    let mut w = World::new("postgresql");
    std::fs::set_permissions(&w.dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let data = w.dir.sub("data");
    chown(&data, ids);
    // As postgres from the start: its sockets and records are postgres's.
    let as_postgres = |w: &World, prog: &Path, with_lib: bool, fabric: &Path| {
        let mut c = clean_command("setpriv");
        c.args(postgres::as_user(ids, prog))
            .env("LANES_DIR", fabric)
            .env("TMPDIR", &w.dir.0)
            .env("HOME", &w.dir.0)
            .env("PGHOST", "127.0.0.1")
            .env("PGUSER", "postgres")
            .env("PGDATABASE", "postgres");
        if with_lib {
            c.env("LD_PRELOAD", &w.lib);
        }
        c
    };
    let mut init = as_postgres(&w, &bin.join("initdb"), false, &w.dir.0);
    init.arg("-D").arg(&data).args(postgres::INITDB_ARGS);
    let f = Program::spawn(init, "initdb").wait(RUN_LIMIT);
    assert!(f.ok(), "{}", f.describe("initdb"));
    for side in SIDES {
        let what = format!("PostgreSQL ({})", side.label());
        let fabric = w.fabric(side.tag());
        chown(&fabric, ids);
        let port = free_ports(1)[0];
        let sampler = sample(&fabric);
        let mut cmd = as_postgres(&w, &bin.join("postgres"), side.server(), &fabric);
        cmd.arg("-D").arg(&data).arg("-k").arg(&data).args(["-p", &port.to_string()]);
        for setting in ["listen_addresses=127.0.0.1"].into_iter().chain(postgres::DURABILITY_OFF) {
            cmd.args(["-c", setting]);
        }
        let Some(server) = start_server(&mut w, cmd, port, &format!("{what}: postgres")) else {
            continue;
        };
        let client = |w: &World, prog: &str, args: &[&str]| {
            let mut c = as_postgres(w, &bin.join(prog), side.client(), &fabric);
            c.args(["-p", &port.to_string()]).args(args);
            c
        };
        let f = Program::spawn(client(&w, "pgbench", &["-i", "-q", "-s", "1"]), &what).wait(RUN_LIMIT);
        let initialized = w.expect_ok(&f, &format!("{what}: pgbench -i"));
        if initialized {
            let f =
                Program::spawn(client(&w, "pgbench", &["-n", "-c", "4", "-j", "2", "-T", "3"]), &what).wait(RUN_LIMIT);
            if w.expect_ok(&f, &format!("{what}: pgbench TPC-B")) {
                w.expect_output(&f, &format!("{what}: pgbench TPC-B"), "number of failed transactions: 0");
                let done = postgres::transactions_processed(&f.stdout);
                if done == 0 {
                    w.fail(f.describe(&format!("{what}: pgbench processed no transaction")));
                }
                let f = Program::spawn(client(&w, "psql", &["-Atc", postgres::BOOKS]), &what).wait(RUN_LIMIT);
                if w.expect_ok(&f, &format!("{what}: psql")) && f.stdout.trim() != format!("t|{done}") {
                    w.fail(f.describe(&format!(
                        "{what}: the books do not balance, or the history lacks some of the {done} transactions \
                         (expected t|{done})"
                    )));
                }
            }
        }
        let s = server.stop(libc::SIGINT, STOP_LIMIT);
        if s.status.is_none() {
            w.fail(s.describe(&format!("{what}: postgres did not stop on SIGINT")));
        }
        check_acceleration(&mut w, side, sampler.finish(), &what);
    }
    w.finish("postgresql");
}
