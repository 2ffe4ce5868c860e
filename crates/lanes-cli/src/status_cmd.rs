//! `lanes status` and `lanes cleanup`.

use std::path::Path;
use std::time::Duration;

use lanes::cluster::proto::SocketsStatus;
use lanes::cluster::{Client, HostStatus};
use lanes::config::FabricConfig;

/// One line of output into `out` (a `String`: formatting into it cannot fail).
macro_rules! out_line {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// Writes the command's whole output. A reader that went away (`lanes status | head`) ends
/// the command quietly, as it ends other tools; any other failure is an error.
fn write_stdout(text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("writing to standard output: {e}")),
    }
}

fn fabric_dir() -> Result<std::path::PathBuf, String> {
    Ok(FabricConfig::from_env().map_err(|e| e.to_string())?.dir)
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Adds `key: value` to the JSON object `obj`.
fn with_key(
    obj: &impl serde::Serialize,
    key: &str,
    value: &impl serde::Serialize,
) -> Result<serde_json::Value, String> {
    let mut v = serde_json::to_value(obj).map_err(|e| e.to_string())?;
    let map = v.as_object_mut().ok_or("not a JSON object")?;
    map.insert(key.to_string(), serde_json::to_value(value).map_err(|e| e.to_string())?);
    Ok(v)
}

/// What this host's daemon says, if one serves the fabric directory and answers quickly.
struct Daemon {
    host: String,
    hosts: Vec<HostStatus>,
    /// Its cross-host socket halves and counts (None: it did not answer that).
    sockets: Option<SocketsStatus>,
}

/// The cluster's hosts as this host's daemon sees them, if a daemon serves the fabric
/// directory and answers quickly; `None` otherwise (a single-host fabric has none).
fn cluster(dir: &Path) -> Option<Daemon> {
    if !Client::socket_path(dir).exists() {
        return None;
    }
    let mut client = Client::connect(dir, Duration::from_millis(500)).ok()?;
    let hosts = client.cluster(Duration::from_secs(1)).ok()?;
    let sockets = client.sockets(Duration::from_secs(1)).ok();
    Some(Daemon { host: client.host().to_string(), hosts, sockets })
}

pub fn status(json: bool) -> Result<(), String> {
    let dir = fabric_dir()?;
    let st = lanes::status(&dir).map_err(|e| e.to_string())?;
    let mut out = String::new();
    let sockets = lanes::sockets::registry::list_connections(&dir);
    let udp = lanes::sockets::udp::list_udp(&dir);
    let kernel = lanes::sockets::reasons::list_reasons(&dir);
    let cluster = cluster(&dir);
    let ip = lanes_ip::status::list(&dir);
    if json {
        let mut v = with_key(&st, "sockets", &sockets)?;
        v = with_key(&v, "sockets_udp", &udp)?;
        v = with_key(&v, "sockets_kernel", &kernel)?;
        v = with_key(&v, "ip", &ip)?;
        if let Some(d) = &cluster {
            v = with_key(&v, "cluster", &d.hosts)?;
            if let Some(sockets) = &d.sockets {
                v = with_key(&v, "sockets_daemon", sockets)?;
            }
        }
        out_line!(out, "{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
        return write_stdout(&out);
    }
    out_line!(out, "fabric {}", st.dir.display());
    if let Some(d) = &cluster {
        print_cluster(&mut out, &d.host, &d.hosts);
    }
    out_line!(out, "\nnodes");
    if st.nodes.is_empty() {
        out_line!(out, "  (none)");
    }
    for n in &st.nodes {
        let pids: Vec<String> = n.pids.iter().map(|p| p.to_string()).collect();
        let stale = if n.stale_records > 0 { format!("  ({} stale records)", n.stale_records) } else { String::new() };
        out_line!(
            out,
            "  node {:>5}  pids {}{stale}",
            n.node,
            if pids.is_empty() { "-".into() } else { pids.join(",") }
        );
    }
    out_line!(out, "\nsegments and interrupts");
    if st.segments.is_empty() {
        out_line!(out, "  (none)");
    } else {
        print_segments(&mut out, &st);
    }
    print_ip(&mut out, &ip);
    let (remote, local): (Vec<_>, Vec<_>) = sockets.into_iter().partition(|c| c.cross_host.is_some());
    print_sockets(&mut out, &local);
    print_udp(&mut out, &udp);
    print_cross_host(&mut out, &remote, cluster.as_ref().and_then(|d| d.sockets.as_ref()));
    print_kernel_sockets(&mut out, &kernel);
    write_stdout(&out)
}

/// Connections to other hosts of the cluster (their records), and what the daemon refused;
/// nothing when there are none.
fn print_cross_host(
    out: &mut String,
    sockets: &[lanes::sockets::registry::ConnectionInfo],
    daemon: Option<&SocketsStatus>,
) {
    let refused: u64 = daemon.map_or(0, |d| d.refused.iter().map(|(_, n)| n).sum());
    if sockets.is_empty() && refused == 0 {
        return;
    }
    out_line!(
        out,
        "\ncross-host connections (paired through the daemons; bytes sent and received over the fabric and \
         through the kernel)"
    );
    if sockets.is_empty() {
        out_line!(out, "  (none)");
    } else {
        out_line!(
            out,
            "  {:<22}  {:<22}  {:<12}  {:<12}  {:>10}  {:>12}  {:>12}  {:>12}  {:>12}  {:>10}  {:>14}  {:<14}  stale",
            "local",
            "remote",
            "peer host",
            "pairing",
            "generation",
            "fabric out",
            "kernel out",
            "fabric in",
            "kernel in",
            "fail-overs",
            "fall-forwards",
            "pids"
        );
    }
    for c in sockets {
        let Some(p) = &c.cross_host else { continue };
        let pids: Vec<String> = c.holders.iter().map(|p| p.to_string()).collect();
        out_line!(
            out,
            "  {:<22}  {:<22}  {:<12}  {:<12}  {:>10}  {:>12}  {:>12}  {:>12}  {:>12}  {:>10}  {:>14}  {:<14}  {}",
            c.local.to_string(),
            c.remote.to_string(),
            p.peer_host,
            p.state.label(),
            p.generation,
            c.ring_bytes_sent,
            c.kernel_bytes_sent,
            c.ring_bytes_received,
            c.bytes_received.saturating_sub(c.ring_bytes_received),
            c.failovers,
            c.fall_forwards,
            if pids.is_empty() { "-".into() } else { pids.join(",") },
            if c.stale { "yes" } else { "no" }
        );
    }
    if let Some(d) = daemon.filter(|_| refused > 0) {
        out_line!(out, "  refused by this host's daemon:");
        for (why, n) in &d.refused {
            out_line!(out, "    {n:>6}  {why}");
        }
    }
}

/// The IP interfaces (`lanes ip up`) of this fabric directory's nodes; nothing when none runs.
fn print_ip(out: &mut String, ifaces: &[lanes_ip::status::IfaceStatus]) {
    if ifaces.is_empty() {
        return;
    }
    out_line!(out, "\nip interfaces (lanes ip up)");
    for i in ifaces {
        let c = &i.counters;
        let peers: Vec<String> = i.peers.iter().map(|p| format!("{}:{}", p.node, p.state)).collect();
        out_line!(
            out,
            "  node {:>5}  {}  pid {}{}  {} {}  mtu {}  queues {}  offloads {}  carrier {}",
            i.node,
            i.name,
            i.pid,
            if i.alive { "" } else { " (dead)" },
            i.ipv4,
            i.ipv6,
            i.mtu,
            i.queues,
            i.offloads,
            if i.carrier { "on" } else { "off" }
        );
        out_line!(out, "              peers {}", if peers.is_empty() { "-".into() } else { peers.join(", ") });
        out_line!(
            out,
            "              tx {} packets {}  rx {} packets {}  dropped: full {} no-peer {} no-route {} too-big {} \
             rejected {}  bad rings {}",
            c.tx_packets,
            human_bytes(c.tx_bytes),
            c.rx_packets,
            human_bytes(c.rx_bytes),
            c.drop_full,
            c.drop_no_peer,
            c.drop_no_route,
            c.drop_too_big,
            c.drop_rejected,
            c.bad_ring
        );
        out_line!(
            out,
            "              receive wake-ups {}  answers caught by a sender {}  sent on delivery {}  \
             unreachable sent {}",
            c.wakeups,
            c.caught,
            c.answered,
            c.unreachable
        );
    }
}

/// Why local connections of library processes stayed kernel TCP (one line per process and
/// reason; nothing when every local connection was accelerated).
fn print_kernel_sockets(out: &mut String, procs: &[lanes::sockets::reasons::ProcessReasons]) {
    if procs.iter().all(|p| p.reasons.is_empty()) {
        return;
    }
    out_line!(
        out,
        "
sockets left to the kernel (liblanes_sockets.so; per process and reason)"
    );
    out_line!(
        out,
        "  {:<8}  {:<15}  {:>6}  {:<5}  {:>7}  {:<30}  last",
        "pid",
        "command",
        "uid",
        "alive",
        "sockets",
        "reason"
    );
    for p in procs {
        for r in &p.reasons {
            let last = r.last.map(|(l, rem)| format!("{l} -> {rem}")).unwrap_or_else(|| "-".into());
            out_line!(
                out,
                "  {:<8}  {:<15}  {:>6}  {:<5}  {:>7}  {:<30}  {}",
                p.pid,
                p.command,
                p.uid,
                if p.alive { "yes" } else { "no" },
                r.sockets,
                r.label,
                last
            );
        }
    }
}

/// Seconds with one decimal, or "-".
fn seconds(ms: Option<u64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0))
}

fn print_cluster(out: &mut String, me: &str, hosts: &[HostStatus]) {
    out_line!(out, "\ncluster (as the daemon of host {me} sees it)");
    out_line!(
        out,
        "  {:<16}  {:<24}  {:<12}  {:<12}  {:>9}  {:>10}",
        "host",
        "address",
        "nodes",
        "state",
        "for",
        "last heard"
    );
    for h in hosts {
        let nodes: Vec<String> = h.nodes.iter().map(|n| n.to_string()).collect();
        let state = if h.local { "this host".to_string() } else { h.state.to_string() };
        out_line!(
            out,
            "  {:<16}  {:<24}  {:<12}  {:<12}  {:>9}  {:>10}",
            h.name,
            h.address,
            nodes.join(","),
            state,
            seconds(Some(h.state_for_ms)),
            seconds(h.last_heard_ms)
        );
    }
}

fn print_segments(out: &mut String, st: &lanes::FabricStatus) {
    out_line!(
        out,
        "  {:<14}  {:>5}  {:>10}  {:>10}  {:>8}  {:>5}  {:<24}  connections",
        "kind",
        "node",
        "id",
        "size",
        "owner",
        "alive",
        "state"
    );
    for s in &st.segments {
        let conns: Vec<String> = s.connections.iter().map(|(n, p)| format!("{n}:{p}")).collect();
        let state = match &s.corrupt {
            Some(r) => format!("corrupt: {r}"),
            None => s.state.clone(),
        };
        out_line!(
            out,
            "  {:<14}  {:>5}  {:>#10x}  {:>10}  {:>8}  {:>5}  {:<24}  {}",
            s.kind,
            s.node,
            s.id,
            human_bytes(s.size),
            s.owner_pid,
            if s.alive { "yes" } else { "no" },
            state,
            if conns.is_empty() { "-".into() } else { conns.join(",") }
        );
    }
}

/// Accelerated UDP sockets (their receiving records); nothing when there are none.
fn print_udp(out: &mut String, sockets: &[lanes::sockets::udp::UdpInfo]) {
    if sockets.is_empty() {
        return;
    }
    out_line!(out, "\naccelerated UDP sockets (liblanes_sockets.so; one line per receiving socket)");
    out_line!(
        out,
        "  {:<46} {:<12} {:>12} {:>10} {:>10} {:>14} {:<6} {:<5} {}",
        "bound to",
        "pids",
        "via ring",
        "ring bytes",
        "dropped",
        "kernel (known)",
        "mode",
        "stale",
        "groups"
    );
    for u in sockets {
        let pids: Vec<String> = u.holders.iter().map(|p| p.to_string()).collect();
        out_line!(
            out,
            "  {:<46} {:<12} {:>12} {:>10} {:>10} {:>14} {:<6} {:<5} {}",
            u.local.to_string(),
            if pids.is_empty() { "-".into() } else { pids.join(",") },
            u.ring_datagrams,
            human_bytes(u.ring_bytes),
            u.drops,
            u.kernel_datagrams,
            if u.kernel_mode { "kernel" } else { "ring" },
            if u.stale { "yes" } else { "no" },
            if u.groups.is_empty() { "-".into() } else { u.groups.join(",") }
        );
    }
}

/// Accelerated sockets: one line per socket end (each end of a connection has its record).
fn print_sockets(out: &mut String, sockets: &[lanes::sockets::registry::ConnectionInfo]) {
    out_line!(out, "\naccelerated sockets (liblanes_sockets.so; one line per end)");
    if sockets.is_empty() {
        out_line!(out, "  (none)");
        return;
    }
    out_line!(
        out,
        "  {:<22}  {:<22}  {:<14}  {:>10}  {:>10}  {:>10}  {:<6}  {:<9}  stale",
        "local",
        "remote",
        "pids",
        "via ring",
        "via kernel",
        "received",
        "peer",
        "receiving"
    );
    for c in sockets {
        let pids: Vec<String> = c.holders.iter().map(|p| p.to_string()).collect();
        out_line!(
            out,
            "  {:<22}  {:<22}  {:<14}  {:>10}  {:>10}  {:>10}  {:<6}  {:<9}  {}",
            c.local.to_string(),
            c.remote.to_string(),
            if pids.is_empty() { "-".into() } else { pids.join(",") },
            human_bytes(c.ring_bytes_sent),
            human_bytes(c.kernel_bytes_sent),
            human_bytes(c.bytes_received),
            if c.peer_attached { "yes" } else { "no" },
            if c.peer_attached { c.receiving.label() } else { "-" },
            if c.stale { "yes" } else { "no" }
        );
    }
}

pub fn cleanup(json: bool) -> Result<(), String> {
    let dir = fabric_dir()?;
    let r = lanes::cleanup(&dir).map_err(|e| e.to_string())?;
    let mut out = String::new();
    let sockets = lanes::sockets::registry::cleanup_connections(&dir)
        .map_err(|e| format!("cleaning socket records in {}: {e}", dir.display()))?
        + lanes::sockets::udp::cleanup_udp(&dir);
    // The reasons files of processes that ended (see `lanes::sockets::reasons`).
    lanes::sockets::reasons::cleanup_reasons(&dir);
    let interfaces = lanes_ip::status::cleanup(&dir);
    if json {
        let v = with_key(&with_key(&r, "sockets", &sockets)?, "ip_interfaces", &interfaces)?;
        out_line!(out, "{}", serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?);
        return write_stdout(&out);
    }
    for (node, id, why) in &r.segments {
        out_line!(out, "removed segment {id:#x} of node {node}: {why}");
    }
    for (node, pid) in &r.records {
        out_line!(out, "removed stale record of pid {pid} (node {node})");
    }
    for (file, why) in &r.exports {
        out_line!(out, "removed export record {file}: {why}");
    }
    if sockets > 0 {
        out_line!(out, "removed {sockets} socket record{} of dead processes", if sockets == 1 { "" } else { "s" });
    }
    for node in &interfaces {
        out_line!(out, "removed the status of node {node}'s IP interface (its process is gone)");
    }
    if r.segments.is_empty() && r.records.is_empty() && r.exports.is_empty() && sockets == 0 && interfaces.is_empty() {
        out_line!(out, "nothing to clean in {}", dir.display());
    }
    write_stdout(&out)
}
