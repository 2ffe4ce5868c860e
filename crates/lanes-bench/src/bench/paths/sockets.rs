//! The `sockets` path: the `tcp` path's code (socket.rs), with both processes running under
//! `liblanes_sockets.so`.
//!
//! A library can only be preloaded when a process starts, so `lanes bench`, when the run
//! includes this path, re-executes itself once with the library first in `LD_PRELOAD`,
//! `LANES_SOCKETS_INCLUDE` set to one port reserved for this path, and that port in
//! [`PORT_ENV`]; the peer it then starts inherits all three. The `sockets` peer listens on
//! that port, so its connections are accelerated; the `tcp` peer listens on another, so `tcp`
//! stays kernel TCP (through the library's pass-through code).

use std::net::{Ipv4Addr, TcpListener};
use std::sync::OnceLock;

use crate::bench::paths::path::{ClientOffer, PeerPath, SetupEnv};
use crate::bench::paths::socket;
use crate::preload;

/// The port of the `sockets` path, set when `lanes bench` re-runs itself under the library.
pub(crate) const PORT_ENV: &str = "LANES_BENCH_SOCKETS_PORT";

/// Why the path cannot run in this process, once that is known (the re-exec failed).
static UNAVAILABLE: OnceLock<String> = OnceLock::new();

/// The port, if this process runs under the library as the path needs.
fn under_library() -> Result<u16, String> {
    let text = std::env::var(PORT_ENV).map_err(|_| format!("{PORT_ENV} is not set: not started by lanes bench"))?;
    let port = text.trim().parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(|| format!("{PORT_ENV}={text:?}"))?;
    if !preload::loaded_here() {
        return Err(format!(
            "{} was in LD_PRELOAD but the loader did not load it (see its message above)",
            preload::LIBRARY
        ));
    }
    Ok(port)
}

/// Whether the path can be measured: in a re-executed `lanes bench` (or its peer) when the
/// library is loaded; before that, when the library can be found.
pub(crate) fn ready() -> Result<(), String> {
    if let Some(why) = UNAVAILABLE.get() {
        return Err(why.clone());
    }
    if std::env::var_os(PORT_ENV).is_some() {
        return under_library().map(|_| ());
    }
    preload::find_library().map(|_| ())
}

/// Whether this process still has to re-execute itself under the library.
pub(crate) fn needs_reexec() -> bool {
    std::env::var_os(PORT_ENV).is_none() && UNAVAILABLE.get().is_none()
}

/// Re-executes this `lanes bench` under the library (same arguments); returns only if that
/// was impossible, after which [`ready`] reports why.
pub(crate) fn reexec() -> String {
    let why = match try_reexec() {
        Ok(never) => match never {},
        Err(e) => e,
    };
    let _ = UNAVAILABLE.set(why.clone());
    why
}

fn try_reexec() -> Result<std::convert::Infallible, String> {
    use std::os::unix::process::CommandExt;
    let lib = preload::find_library()?;
    let port = free_port()?;
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(std::env::args_os().skip(1))
        .env("LD_PRELOAD", preload::with_library(std::env::var_os("LD_PRELOAD").as_deref(), &lib))
        .env("LANES_SOCKETS", "1")
        .env("LANES_SOCKETS_INCLUDE", port.to_string())
        .env_remove("LANES_SOCKETS_EXCLUDE")
        // The other paths' sockets stay kernel TCP on purpose (the line `describe` prints
        // says so): the library's notice about their excluded ports would be noise.
        .env("LANES_SOCKETS_QUIET", "1")
        .env(PORT_ENV, port.to_string());
    let e = cmd.exec();
    Err(format!("re-running {} under {}: {e}", exe.display(), lib.display()))
}

/// The line `lanes bench` prints when it runs the path.
pub(crate) fn describe() -> Option<String> {
    let port = under_library().ok()?;
    let lib = preload::find_library().map(|l| l.display().to_string()).unwrap_or_else(|_| preload::LIBRARY.into());
    Some(format!(
        "lanes bench: sockets path: this process and its peer run under {lib}, accelerating port {port} only \
         (the other socket paths go through its pass-through code)"
    ))
}

pub(crate) fn client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    under_library()?;
    socket::tcp_client(env)
}

pub(crate) fn peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    let _ = offer;
    socket::tcp_peer_on(env, under_library()?)
}

/// A free TCP port on loopback (the kernel's pick; free again when this returns).
pub(crate) fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| format!("finding a free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("finding a free port: {e}"))
}
