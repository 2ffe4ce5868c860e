//! The real-server rows of `lanes bench sockets`: a blocking 100-byte ping-pong (this
//! executable on both ends, optionally with a CPU hog on every core), PostgreSQL's pgbench
//! (TPC-B and select-only, against a temporary cluster) and nginx (pre-fork, two workers)
//! under wrk; and what every row's measurement takes and gives (Params, Sample).

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::bench::sockets::procs::{self, find_program, run_client, Launch, Mode, Server};

/// A measurement's figure, and what else the tool said worth keeping.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sample {
    pub value: f64,
    pub details: BTreeMap<String, f64>,
}

/// What a measurement needs besides the mode.
#[derive(Clone, Debug)]
pub(crate) struct Params {
    pub seconds: u64,
    pub server_cpu: Option<usize>,
    pub client_cpu: Option<usize>,
    pub redis_clients: usize,
    /// Requests per redis-benchmark run (from the calibration).
    pub redis_requests: u64,
    /// This executable (the blocking ping-pong's two ends).
    pub exe: Option<std::path::PathBuf>,
    /// The temporary PostgreSQL cluster of the pgbench rows.
    pub pg: Option<std::sync::Arc<PgCluster>>,
}

impl Params {
    /// How long a client may take before it is killed.
    pub(crate) fn limit(&self) -> Duration {
        Duration::from_secs(self.seconds * 5 + 30)
    }
}

/// Bytes each way per round trip of the blocking ping-pong.
pub(crate) const PINGPONG_BYTES: usize = 100;
/// Warm-up of the ping-pong client before it counts.
const PINGPONG_WARMUP: Duration = Duration::from_millis(200);

/// `--pingpong-server PORT` (internal): accepts one connection on loopback and echoes
/// 100-byte messages with blocking reads and writes until the client closes.
pub(crate) fn pingpong_serve(port: u16) -> Result<(), String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(|e| format!("binding port {port}: {e}"))?;
    let (mut s, _) = l.accept().map_err(|e| format!("accepting: {e}"))?;
    let _ = s.set_nodelay(true);
    let mut buf = [0u8; PINGPONG_BYTES];
    loop {
        match s.read_exact(&mut buf) {
            Ok(()) => s.write_all(&buf).map_err(|e| format!("writing: {e}"))?,
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading: {e}")),
        }
    }
}

/// `--pingpong-client PORT` (internal): blocking round trips of 100 bytes for `seconds`
/// after a short warm-up; prints `round_trips N seconds S`.
pub(crate) fn pingpong_client(port: u16, seconds: u64) -> Result<(), String> {
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).map_err(|e| format!("connecting: {e}"))?;
    let _ = s.set_nodelay(true);
    let mut buf = [7u8; PINGPONG_BYTES];
    let mut round = |s: &mut TcpStream| -> Result<(), String> {
        s.write_all(&buf).map_err(|e| format!("writing: {e}"))?;
        s.read_exact(&mut buf).map_err(|e| format!("reading: {e}"))
    };
    let start = Instant::now();
    while start.elapsed() < PINGPONG_WARMUP {
        round(&mut s)?;
    }
    let (start, limit) = (Instant::now(), Duration::from_secs(seconds));
    let mut n = 0u64;
    loop {
        for _ in 0..16 {
            round(&mut s)?;
        }
        n += 16;
        if start.elapsed() >= limit {
            break;
        }
    }
    println!("round_trips {n} seconds {}", start.elapsed().as_secs_f64());
    Ok(())
}

pub(crate) fn parse_pingpong(out: &str) -> Result<Sample, String> {
    let words: Vec<&str> = out.split_whitespace().collect();
    let get = |k: &str| words.iter().position(|w| *w == k).and_then(|i| words.get(i + 1)?.parse::<f64>().ok());
    let (n, t) = get("round_trips").zip(get("seconds")).ok_or_else(|| format!("no round trips in {out:?}"))?;
    if n <= 0.0 || t <= 0.0 {
        return Err(format!("no round trips in {out:?}"));
    }
    let details = BTreeMap::from([("round_trip_us".to_string(), t / n * 1e6), ("round_trips".to_string(), n)]);
    Ok(Sample { value: n / t, details })
}

/// The blocking ping-pong: this executable on both ends (server on the servers' CPU, client
/// on the clients'); round trips per second.
pub(crate) fn pingpong(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    pingpong_on(p, server, client)
}

/// The blocking ping-pong with both ends free to run on any CPU, as unpinned programs do
/// (with a hog on every CPU the scheduler then often puts them on the same one: the case
/// where a waiter's spin takes the CPU its peer needs).
pub(crate) fn pingpong_floating(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    pingpong_on(p, &unpinned(server), &unpinned(client))
}

fn pingpong_on(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let exe = p.exe.as_deref().ok_or("this executable's path is unknown")?;
    let exe = exe.to_str().ok_or("this executable's path is not UTF-8")?;
    let port = server.port.to_string();
    let mut cmd = server.command(exe)?;
    cmd.args(["bench", "sockets", "--pingpong-server", &port]);
    let srv = Server::start(cmd, "ping-pong server", server.port)?;
    let mut cmd = client.command(exe)?;
    cmd.args(["bench", "sockets", "--seconds", &p.seconds.to_string(), "--pingpong-client", &port]);
    let out = run_client(cmd, "ping-pong client", p.limit());
    srv.wait_exit(Duration::from_secs(5));
    parse_pingpong(&out?)
}

// ---- PostgreSQL ---------------------------------------------------------------------------

/// A temporary PostgreSQL cluster (initdb'd once per run, pgbench tables at scale 1), owned
/// by the `postgres` user when `lanes` runs as root (the server refuses root). Removed when
/// dropped.
#[derive(Debug)]
pub(crate) struct PgCluster {
    dir: PathBuf,
    data: PathBuf,
    postgres: PathBuf,
    /// The uid and gid the server and pgbench run as (None: ours).
    user: Option<(u32, u32)>,
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl PgCluster {
    /// A command for a PostgreSQL program, as the cluster's user, in its directory.
    fn command(&self, launch: &Launch, program: &Path) -> Result<Command, String> {
        let program = program.to_str().ok_or("a PostgreSQL path is not UTF-8")?;
        let mut cmd = launch.command(program)?;
        // The library's fabric directory is per user: the default one of the cluster's user,
        // for the server and pgbench alike.
        cmd.env_remove("LANES_DIR").env("HOME", &self.dir).current_dir(&self.dir);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        Ok(cmd)
    }

    fn server(&self, launch: &Launch) -> Result<Server, String> {
        let mut cmd = self.command(launch, &self.postgres)?;
        let port = launch.port.to_string();
        cmd.arg("-D").arg(&self.data).args(["-p", &port, "-c", "listen_addresses=127.0.0.1", "-k"]).arg(&self.dir);
        // Durability off: the rows compare the network, not the disk.
        cmd.args(["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]);
        cmd.args(["-c", "max_connections=40"]);
        Server::start(cmd, "postgres", launch.port)
    }

    fn pgbench(&self, launch: &Launch, args: &[&str], limit: Duration) -> Result<String, String> {
        let pgbench = find_program("pgbench").ok_or("pgbench not found")?;
        let mut cmd = self.command(launch, &pgbench)?;
        cmd.args(["-h", "127.0.0.1", "-p", &launch.port.to_string(), "-U", "postgres"]).args(args).arg("postgres");
        run_client(cmd, "pgbench", limit)
    }
}

/// Creates the cluster (`initdb --no-sync`, trust authentication) and pgbench's tables
/// (`pgbench -i -s 1`), with kernel TCP.
pub(crate) fn pg_setup(cpus: (Option<usize>, Option<usize>)) -> Result<PgCluster, String> {
    let initdb = find_program("initdb").ok_or("initdb not found")?;
    let postgres = find_program("postgres").ok_or("postgres not found")?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let user = if root {
        Some(
            lanes::platform::users::account_ids("postgres")
                .map_err(|_| "running as root needs a `postgres` user (the server refuses root)")?,
        )
    } else {
        None
    };
    let dir = std::env::temp_dir().join(format!("lanes-bench-pg-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cluster = PgCluster { data: dir.join("data"), dir, postgres, user };
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(&cluster.dir, Some(uid), Some(gid))
            .map_err(|e| format!("chown {}: {e}", cluster.dir.display()))?;
    }
    let setup = Launch { mode: Mode::Kernel, lib: None, port: 0, cpu: None };
    let mut cmd = cluster.command(&setup, &initdb)?;
    cmd.arg("-D").arg(&cluster.data).args(["--no-sync", "-A", "trust", "-U", "postgres", "-E", "UTF8"]);
    run_client(cmd, "initdb", Duration::from_secs(120))?;
    let port = procs::free_port()?;
    let srv = cluster.server(&Launch { port, cpu: cpus.0, ..setup.clone() })?;
    cluster.pgbench(&Launch { port, cpu: cpus.1, ..setup }, &["-i", "-s", "1", "-q"], Duration::from_secs(120))?;
    drop(srv);
    Ok(cluster)
}

/// pgbench's `tps = N (without initial connection time)`.
pub(crate) fn parse_pgbench(out: &str) -> Result<Sample, String> {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("tps =") && !l.contains("including"))
        .ok_or_else(|| format!("no tps in pgbench's output: {out:?}"))?;
    let tps: f64 = line
        .trim_start()
        .trim_start_matches("tps =")
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("unreadable tps line {line:?}"))?;
    let mut details = BTreeMap::new();
    if let Some(l) = out.lines().find(|l| l.trim_start().starts_with("latency average =")) {
        if let Some(ms) = l.split('=').nth(1).and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok()) {
            details.insert("latency_avg_us".to_string(), ms * 1e3);
        }
    }
    if let Some(l) = out.lines().find(|l| l.contains("number of transactions actually processed")) {
        if let Some(n) = l.split(':').nth(1).and_then(|v| v.split('/').next()?.trim().parse::<f64>().ok()) {
            details.insert("transactions".to_string(), n);
        }
    }
    Ok(Sample { value: tps, details })
}

/// Clients and threads of pgbench (`-c 8 -j 2`, as in the issue that asked for the row).
const PGBENCH_CLIENTS: &str = "8";
const PGBENCH_THREADS: &str = "2";

fn pgbench_run(p: &Params, server: &Launch, client: &Launch, select_only: bool) -> Result<Sample, String> {
    let pg = p.pg.as_ref().ok_or("no PostgreSQL cluster")?;
    let _srv = pg.server(&unpinned(server))?;
    let secs = p.seconds.to_string();
    let mut args = vec!["-n", "-c", PGBENCH_CLIENTS, "-j", PGBENCH_THREADS, "-T", &secs];
    if select_only {
        args.push("-S");
    }
    // The server takes connections while it is still starting (recovering from the last
    // round's fast stop) and refuses them with "the database system is starting up": the
    // measurement waits for it to be ready, as pg_isready would.
    let ready_by = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match pg.pgbench(&unpinned(client), &args, p.limit()) {
            Err(e) if e.contains("the database system is starting up") && std::time::Instant::now() < ready_by => {
                std::thread::sleep(Duration::from_millis(100));
            }
            out => return parse_pgbench(&out?),
        }
    }
}

pub(crate) fn pgbench_tpcb(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    pgbench_run(p, server, client, false)
}

pub(crate) fn pgbench_select(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    pgbench_run(p, server, client, true)
}

/// Multi-process servers and their clients float over all CPUs, as they would in use.
fn unpinned(l: &Launch) -> Launch {
    Launch { cpu: None, ..l.clone() }
}

// ---- nginx ----------------------------------------------------------------------------------

/// A directory with an nginx configuration (pre-fork: a master and two workers, one static
/// page) for `port`; removed when dropped.
struct NginxDir(PathBuf);

impl Drop for NginxDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The page wrk fetches: about the size of nginx's default index.html.
const PAGE_BYTES: usize = 612;

fn nginx_dir(port: u16) -> Result<NginxDir, String> {
    let dir = std::env::temp_dir().join(format!("lanes-bench-nginx-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = NginxDir(dir.clone());
    std::fs::create_dir_all(dir.join("html")).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(dir.join("html/index.html"), "x".repeat(PAGE_BYTES - 1) + "\n").map_err(|e| e.to_string())?;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    // As root, the workers would switch to nginx's default user, whose library fabric
    // directory is not wrk's: keep them root.
    let user = if root { "user root root;\n" } else { "" };
    let d_ = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process on;\nworker_processes 2;\n{user}pid {d_}/nginx.pid;\n\
         error_log {d_}/error.log warn;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  sendfile off;\n  keepalive_requests 100000000;\n\
         client_body_temp_path {d_}/body;\n\
         server {{\n    listen 127.0.0.1:{port};\n    root {d_}/html;\n    location / {{ }}\n  }}\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), conf).map_err(|e| e.to_string())?;
    Ok(d)
}

/// wrk's `Requests/sec: N`; errors if some responses were not 2xx/3xx.
pub(crate) fn parse_wrk(out: &str) -> Result<Sample, String> {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("Requests/sec:"))
        .ok_or_else(|| format!("no Requests/sec in wrk's output: {out:?}"))?;
    let rps: f64 = line
        .split(':')
        .nth(1)
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("unreadable line {line:?}"))?;
    if let Some(l) = out.lines().find(|l| l.contains("Non-2xx or 3xx responses")) {
        return Err(format!("wrk: {}", l.trim()));
    }
    let mut details = BTreeMap::new();
    if let Some(n) =
        out.lines().find(|l| l.contains("requests in")).and_then(|l| l.split_whitespace().next()?.parse().ok())
    {
        details.insert("requests".to_string(), n);
    }
    Ok(Sample { value: rps, details })
}

/// wrk's threads and connections.
const WRK_THREADS: &str = "2";
const WRK_CONNECTIONS: &str = "16";

pub(crate) fn nginx_wrk(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    nginx_wrk_with(p, server, client, &[])
}

/// As [`nginx_wrk`], every request on a new connection (`Connection: close`): what a
/// connection's set-up and tear-down cost, which keep-alive hides.
pub(crate) fn nginx_wrk_close(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    nginx_wrk_with(p, server, client, &["-H", "Connection: close"])
}

fn nginx_wrk_with(p: &Params, server: &Launch, client: &Launch, extra: &[&str]) -> Result<Sample, String> {
    let dir = nginx_dir(server.port)?;
    let nginx = find_program("nginx").ok_or("nginx not found")?;
    let mut cmd = unpinned(server).command(nginx.to_str().ok_or("nginx's path is not UTF-8")?)?;
    cmd.arg("-p").arg(&dir.0).arg("-c").arg(dir.0.join("nginx.conf")).arg("-e").arg(dir.0.join("error.log"));
    let _srv = Server::start(cmd, "nginx", server.port)?;
    let mut cmd = unpinned(client).command("wrk")?;
    let url = format!("http://127.0.0.1:{}/index.html", client.port);
    cmd.args(["-t", WRK_THREADS, "-c", WRK_CONNECTIONS, "-d", &format!("{}s", p.seconds)]).args(extra).arg(&url);
    parse_wrk(&run_client(cmd, "wrk", p.limit())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs() {
        let s = parse_pingpong("round_trips 1000 seconds 0.5\n").unwrap();
        assert_eq!(s.value, 2000.0);
        assert_eq!(s.details["round_trip_us"], 500.0);
        assert!(parse_pingpong("").is_err());
        let pg = "transaction type: <builtin: select only>\nnumber of transactions actually processed: 12345/12345\n\
            latency average = 0.648 ms\ninitial connection time = 12.3 ms\n\
            tps = 12345.678901 (without initial connection time)\n";
        let s = parse_pgbench(pg).unwrap();
        assert_eq!(s.value, 12345.678901);
        assert_eq!(s.details["transactions"], 12345.0);
        assert!((s.details["latency_avg_us"] - 648.0).abs() < 1e-9);
        assert!(parse_pgbench("nothing").is_err());
        let wrk = "Running 1s test @ http://127.0.0.1:1/\n  2 threads and 16 connections\n\
            Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   200.00us  1.00ms  10.00ms   90.00%\n\
            40000 requests in 1.00s, 30.00MB read\nRequests/sec:  39990.12\nTransfer/sec:     30.00MB\n";
        let s = parse_wrk(wrk).unwrap();
        assert_eq!(s.value, 39990.12);
        assert_eq!(s.details["requests"], 40000.0);
        assert!(parse_wrk(&format!("{wrk}  Non-2xx or 3xx responses: 5\n")).is_err());
    }
}
