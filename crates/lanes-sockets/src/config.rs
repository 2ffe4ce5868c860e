//! Which connections are accelerated, read once: the `[sockets]` section of the
//! configuration file (`LANES_CONFIG`, see `lanes::config::SocketsSection`), each key
//! overridden by its environment variable. A configuration that cannot be read or makes
//! no sense turns acceleration off, with one line on standard error: a preloaded library
//! cannot fail the program it is loaded into.
//!
//! - `LANES_SOCKETS=0`: pass everything to the kernel untouched.
//! - `LANES_SOCKETS_INCLUDE=5201,6379,8000-8100`: only these ports (either end's) are
//!   accelerated; default all local TCP.
//! - `LANES_SOCKETS_EXCLUDE=...`: never these ports.
//! - `LANES_SOCKETS_RING=bytes`: ring per direction (default 1 MiB).
//! - `LANES_POLL_US`: how long a waiting call spins before it sleeps in the kernel.
//! - `LANES_DIR`: the fabric directory; records go to its `sockets/`.
//! - `LANES_SOCKETS_QUIET=1`: print no notice on standard error.
//! - `LANES_SOCKETS_IO_URING=refuse`: `io_uring_setup` made through the C library's
//!   `syscall()` fails with ENOSYS, as on a kernel without io_uring, so that a program
//!   using it only to speed up its epoll calls (libuv) keeps its connections accelerated;
//!   default `allow`, where a process that sets one up keeps its connections on the kernel
//!   (see `io_uring`).
//! - `LANES_SOCKETS_REMOTE=auto|on|off` (`[sockets] remote`): connections to other hosts of
//!   the cluster (lanes.toml's `[cluster]`, this host one of its hosts) are paired through
//!   the daemons (`remote`); `auto` only on providers that can beat kernel TCP.
//!
//! The notices, each one line starting `liblanes_sockets:`: a configuration that turned
//! acceleration off, and, once per process and reason, why a local connection stays kernel
//! TCP (see `reasons`: a peer without the library, a uid change, an excluded port, no room
//! for a record, a seccomp sandbox, too many processes sharing a socket).

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use lanes::config::RemoteMode;

pub struct Config {
    pub enabled: bool,
    pub include: Option<Vec<(u16, u16)>>,
    pub exclude: Vec<(u16, u16)>,
    pub ring_bytes: usize,
    pub poll_time: Duration,
    pub fabric_dir: PathBuf,
    /// The fabric this process opens for connections to other hosts, as the environment
    /// said when the library loaded (or why not): a server's worker may run with its
    /// environment cleared (nginx keeps only TZ) and must still open the same fabric.
    pub fabric: Result<lanes::FabricConfig, String>,
    pub netns: u64,
    /// LANES_SOCKETS_QUIET: no notices.
    pub quiet: bool,
    /// LANES_SOCKETS_IO_URING=refuse: io_uring_setup fails with ENOSYS (see `io_uring`).
    pub refuse_io_uring: bool,
    /// Connections to other hosts of the cluster; None when this host is in no cluster.
    pub remote: Option<Remote>,
}

/// This host's cluster, as far as connections to its other hosts go.
pub struct Remote {
    /// Whether they are paired (`Ok`), else why not, in words.
    pub decided: Result<(), String>,
    /// lanes.toml's addresses of the other hosts (those that can name one host): a peer
    /// there is on that host without asking the daemon.
    pub hosts: Vec<(IpAddr, String)>,
}

/// Prints a notice unless the environment asked for quiet (the configuration may not be
/// loaded yet). A failed write is ignored: the program's stderr is its own business; and a
/// standard error that is a socket (inetd-style servers, a connection handed to a child)
/// gets nothing: a line there would be bytes in somebody's stream.
pub fn notice(quiet: bool, text: std::fmt::Arguments<'_>) {
    if quiet {
        return;
    }
    // SAFETY: fstat into a zeroed stat buffer we own.
    let is_socket = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(2, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
    };
    if !is_socket {
        // One write for the whole line: several processes of a program (a server and its
        // workers) may say theirs at once, and pieces of their lines would interleave.
        let line = format!("liblanes_sockets: {text}\n");
        let _ = io::stderr().write_all(line.as_bytes());
    }
}

fn quiet_from(var: impl Fn(&str) -> Option<String>) -> bool {
    var("LANES_SOCKETS_QUIET").is_some_and(|v| v != "0")
}

/// A socket record could not be created: the socket stays kernel TCP, for lack of room
/// (the fabric directory's filesystem is full) or another reason, counted and said once
/// per process (see `reasons`).
pub fn record_failed(why: &io::Error, key: &lanes::sockets::ConnectionKey) {
    use crate::reasons::{note_with, Reason};
    let reason = match why.kind() {
        io::ErrorKind::StorageFull | io::ErrorKind::OutOfMemory => Reason::NoRoom,
        _ => Reason::RecordFailed,
    };
    note_with(reason, Some(key), &why.to_string());
}

fn load() -> Config {
    // The library's variables an exec carried for it (see `exec`) are no longer in the
    // program's environment.
    let var = |n: &str| crate::exec::carried(n).or_else(|| std::env::var(n).ok()).filter(|v| !v.is_empty());
    let fabric_dir = match var("LANES_DIR") {
        Some(d) => PathBuf::from(d),
        None => lanes::FabricConfig::from_env().map(|c| c.dir).unwrap_or_else(|_| lanes::config::default_fabric_dir()),
    };
    let fabric = lanes::FabricConfig::from_env()
        .map(|mut f| {
            f.dir = fabric_dir.clone();
            f
        })
        .map_err(|e| e.to_string());
    let mut config = Config {
        fabric,
        enabled: true,
        include: None,
        exclude: Vec::new(),
        ring_bytes: lanes::sockets::endpoint::DEFAULT_RING_BYTES,
        poll_time: lanes::platform::doorbell::default_poll_time(),
        fabric_dir,
        netns: crate::sock_diag::netns_inode(),
        quiet: quiet_from(var),
        refuse_io_uring: false,
        remote: None,
    };
    if let Err(why) = apply(&mut config, var) {
        notice(config.quiet, format_args!("{why}; every connection stays kernel TCP"));
        config.enabled = false;
    }
    config
}

/// The file's `[sockets]` section, then the environment over it.
fn apply(config: &mut Config, var: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    let file = lanes::config::ConfigFile::load_from_env().map_err(|e| e.to_string())?;
    let section = file.as_ref().and_then(|f| f.sockets()).cloned().unwrap_or_default();
    let ports = |what: &str, text: &str| lanes::config::parse_port_list(text).map_err(|why| format!("{what}: {why}"));
    if let Some(on) = section.enabled {
        config.enabled = on;
    }
    if let Some(v) = var("LANES_SOCKETS") {
        config.enabled = v != "0";
    }
    if let Some(list) = var("LANES_SOCKETS_INCLUDE") {
        config.include = Some(ports("LANES_SOCKETS_INCLUDE", &list)?);
    } else if let Some(list) = &section.include {
        config.include = Some(ports("[sockets] include", list)?);
    }
    if let Some(list) = var("LANES_SOCKETS_EXCLUDE") {
        config.exclude = ports("LANES_SOCKETS_EXCLUDE", &list)?;
    } else if let Some(list) = &section.exclude {
        config.exclude = ports("[sockets] exclude", list)?;
    }
    if let Some(v) = var("LANES_SOCKETS_RING") {
        config.ring_bytes = v.trim().parse().map_err(|_| format!("LANES_SOCKETS_RING: {v:?} is not a byte count"))?;
    } else if let Some(n) = section.ring_bytes {
        config.ring_bytes = n;
    }
    config.refuse_io_uring = match var("LANES_SOCKETS_IO_URING").as_deref().map(str::trim) {
        None | Some("allow") => false,
        Some("refuse") => true,
        Some(v) => return Err(format!("LANES_SOCKETS_IO_URING: {v:?} is neither allow nor refuse")),
    };
    let mode = match var("LANES_SOCKETS_REMOTE") {
        Some(v) => RemoteMode::parse(&v).map_err(|why| format!("LANES_SOCKETS_REMOTE: {why}"))?,
        None => section.remote.as_deref().map(RemoteMode::parse).transpose()?.unwrap_or_default(),
    };
    let host = var("LANES_HOST").unwrap_or_else(lanes::config::hostname);
    config.remote = file.as_ref().and_then(|f| f.cluster()).and_then(|c| remote_of(c, &host, mode));
    Ok(())
}

/// Cross-host connections for host `me` of `cluster` with `mode`; None if `me` is not one
/// of its hosts.
fn remote_of(cluster: &lanes::cluster::ClusterConfig, me: &str, mode: RemoteMode) -> Option<Remote> {
    cluster.host(me)?;
    let hosts = cluster
        .hosts
        .iter()
        .filter(|h| h.name != me && lanes::platform::net::is_host_address(h.address.ip()))
        .map(|h| (h.address.ip(), h.name.clone()))
        .collect();
    Some(Remote { decided: mode.decide(&cluster.provider), hosts })
}

static CONFIG: OnceLock<Config> = OnceLock::new();

pub fn config() -> &'static Config {
    CONFIG.get_or_init(load)
}

pub fn in_ranges(ranges: &[(u16, u16)], port: u16) -> bool {
    ranges.iter().any(|&(a, b)| (a..=b).contains(&port))
}

/// Whether a connection between these addresses may be accelerated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    Yes,
    /// Acceleration is off, or the peer is on another host outside any cluster of ours:
    /// nothing to say.
    No,
    /// Both ends on this host, but the port lists leave it out.
    PortExcluded,
    /// The peer is on another host and this host is in a cluster: maybe a cross-host
    /// connection (`remote` decides).
    Remote,
}

/// Whether a connection between these addresses may be accelerated: both ends on this
/// host (loopback, or the same address on both ends) and allowed by the port lists; or a
/// peer on another host, allowed by the port lists, when this host is in a cluster.
pub fn wanted(local: SocketAddr, remote: SocketAddr) -> Wanted {
    let c = config();
    if !c.enabled {
        return Wanted::No;
    }
    let local_host = remote.ip().is_loopback() || remote.ip() == local.ip();
    if !local_host && c.remote.is_none() {
        return Wanted::No;
    }
    let ports = [local.port(), remote.port()];
    let allowed = !ports.iter().any(|&p| in_ranges(&c.exclude, p))
        && match &c.include {
            Some(inc) => ports.iter().any(|&p| in_ranges(inc, p)),
            None => true,
        };
    match (allowed, local_host) {
        (true, true) => Wanted::Yes,
        (true, false) => Wanted::Remote,
        (false, true) => Wanted::PortExcluded,
        // A port left out of a connection to another host: as for any other remote peer,
        // nothing to say.
        (false, false) => Wanted::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Config {
        Config {
            enabled: true,
            include: None,
            exclude: Vec::new(),
            ring_bytes: 0,
            poll_time: Duration::ZERO,
            fabric_dir: PathBuf::new(),
            fabric: Err("not opened in these tests".into()),
            netns: 0,
            quiet: false,
            refuse_io_uring: false,
            remote: None,
        }
    }

    #[test]
    fn environment_variables_are_checked() {
        let mut c = fresh();
        let env = |n: &str| match n {
            "LANES_SOCKETS_INCLUDE" => Some("5201, 8000-8100".to_string()),
            "LANES_SOCKETS_RING" => Some("65536".to_string()),
            _ => None,
        };
        apply(&mut c, env).unwrap();
        assert_eq!(c.include, Some(vec![(5201, 5201), (8000, 8100)]));
        assert_eq!(c.ring_bytes, 65536);
        let bad = |n: &str| (n == "LANES_SOCKETS_EXCLUDE").then(|| "80,x".to_string());
        assert_eq!(apply(&mut fresh(), bad).unwrap_err(), "LANES_SOCKETS_EXCLUDE: \"x\" is not a port (0-65535)");
        let quiet = |v: &'static str| move |n: &str| (n == "LANES_SOCKETS_QUIET").then(|| v.to_string());
        assert!(quiet_from(quiet("1")) && !quiet_from(quiet("0")) && !quiet_from(|_: &str| None));
        let bad = |n: &str| (n == "LANES_SOCKETS_REMOTE").then(|| "maybe".to_string());
        let e = apply(&mut fresh(), bad).unwrap_err();
        assert!(e.starts_with("LANES_SOCKETS_REMOTE: remote = \"maybe\""), "{e}");
    }

    #[test]
    fn remote_connections_are_for_members_of_a_cluster() {
        let text = "[cluster]\nprovider = \"tcp;ofi_rxm\"\n\
                    [[node]]\nid = 8\nhost = \"a\"\naddress = \"10.77.0.1\"\n\
                    [[node]]\nid = 12\nhost = \"b\"\naddress = \"10.77.0.2\"\n\
                    [[node]]\nid = 16\nhost = \"c\"\naddress = \"127.0.0.1:7000\"\n";
        let file = lanes::config::ConfigFile::parse(std::path::Path::new("lanes.toml"), text).unwrap();
        let cluster = file.cluster().unwrap();
        assert!(remote_of(cluster, "zz", RemoteMode::On).is_none(), "not a member");
        let r = remote_of(cluster, "a", RemoteMode::On).unwrap();
        assert_eq!(r.decided, Ok(()));
        assert_eq!(r.hosts, vec![("10.77.0.2".parse().unwrap(), "b".to_string())], "no loopback host");
        let r = remote_of(cluster, "a", RemoteMode::Auto).unwrap();
        assert!(r.decided.unwrap_err().contains("cannot beat kernel TCP"));
    }
}
