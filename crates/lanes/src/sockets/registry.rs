//! Listing and cleaning socket records (`lanes status`, `lanes cleanup`).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::endpoint::{
    sockets_dir, ConnectionKey, Endpoint, FLAG_ATTACHED, FLAG_REMOTE, FLAG_RX_PARKED, FLAG_RX_RETIRED,
};
use super::remote::Pairing;

/// One accelerated socket, as its record describes it.
#[derive(Clone, Debug, Serialize)]
pub struct ConnectionInfo {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// The pids of the live processes holding the socket (a holder whose pid now names
    /// another process is dead).
    pub holders: Vec<u32>,
    pub ring_bytes_sent: u64,
    pub kernel_bytes_sent: u64,
    pub bytes_received: u64,
    /// Of those, the bytes that came through the ring (for a cross-host connection: over
    /// the fabric).
    pub ring_bytes_received: u64,
    /// Whether this end found and attached its peer's record (the connection is accelerated).
    pub peer_attached: bool,
    /// How the peer's bytes reach this end now.
    pub receiving: Receiving,
    /// No live holder: left behind by a killed process.
    pub stale: bool,
    /// A cross-host socket (its peer on another host of the cluster): its pairing. Its
    /// byte counts are its fabric stream's (ring: over the fabric), as the library last
    /// wrote them, plus what the kernel carried before the stream was set up.
    pub cross_host: Option<Pairing>,
    /// For a cross-host socket: how many of its directions failed over from the fabric to
    /// the kernel connection (0, 1 or 2; stream-4 of docs/design/cross-host-sockets.md).
    pub failovers: u64,
    /// For a cross-host socket: how many times a new fabric stream replaced one that had
    /// failed over, once the fabric to the peer's host was back (fall-forward).
    pub fall_forwards: u64,
}

/// How the peer's bytes reach an end, as its record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Receiving {
    /// Through the ring whenever the receiver waits for them (kernel TCP while it sleeps).
    Ring,
    /// Through the kernel for now (parked: the ring did not pay lately; tried again later).
    Parked,
    /// Through the kernel for good (retired: the ring never paid).
    Retired,
}

impl Receiving {
    /// One word for `lanes status`.
    pub fn label(self) -> &'static str {
        match self {
            Receiving::Ring => "ring",
            Receiving::Parked => "parked",
            Receiving::Retired => "retired",
        }
    }
}

/// Every socket record in the fabric directory (unreadable or corrupt ones are skipped).
pub fn list_connections(fabric_dir: &Path) -> Vec<ConnectionInfo> {
    let Ok(entries) = std::fs::read_dir(sockets_dir(fabric_dir)) else { return Vec::new() };
    let mut out: Vec<ConnectionInfo> = entries
        .flatten()
        .filter_map(|e| {
            let key = ConnectionKey::parse(e.file_name().to_str()?)?;
            let ep = Endpoint::open(fabric_dir, &key).ok()?;
            let holders: Vec<u32> = ep.holders().iter().map(|h| h.pid()).collect();
            let (ring, kernel) = ep.tx_counts();
            Some(ConnectionInfo {
                local: key.local,
                remote: key.remote,
                stale: holders.is_empty(),
                holders,
                ring_bytes_sent: ring.load(Ordering::Relaxed),
                kernel_bytes_sent: kernel.load(Ordering::Relaxed),
                bytes_received: ep.rx_bytes(),
                ring_bytes_received: ep.rx_consumed().load(Ordering::Relaxed),
                peer_attached: ep.has_flag(FLAG_ATTACHED),
                receiving: if ep.has_flag(FLAG_RX_RETIRED) {
                    Receiving::Retired
                } else if ep.has_flag(FLAG_RX_PARKED) {
                    Receiving::Parked
                } else {
                    Receiving::Ring
                },
                cross_host: if ep.has_flag(FLAG_REMOTE) { ep.pairing() } else { None },
                failovers: if ep.has_flag(FLAG_REMOTE) { ep.failovers().load(Ordering::Relaxed) } else { 0 },
                fall_forwards: if ep.has_flag(FLAG_REMOTE) { ep.fall_forwards().load(Ordering::Relaxed) } else { 0 },
            })
        })
        .collect();
    out.sort_by_key(|c| (c.local, c.remote));
    out
}

/// Removes the records no live process holds; returns how many.
pub fn cleanup_connections(fabric_dir: &Path) -> io::Result<usize> {
    let entries = match std::fs::read_dir(sockets_dir(fabric_dir)) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let stale = match name.to_str().and_then(ConnectionKey::parse) {
            Some(key) => match Endpoint::open(fabric_dir, &key) {
                Ok(ep) => ep.holders().is_empty(),
                Err(_) => true,
            },
            None => false,
        };
        if stale && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::liveness::ProcessIdentity;
    use crate::sockets::endpoint::this_process;

    #[test]
    fn a_record_whose_holder_pid_was_reused_is_stale_and_cleaned() {
        let dir = std::env::temp_dir().join(format!("lanes-registry-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = ConnectionKey::new(9, "127.0.0.1:7000".parse().unwrap(), "127.0.0.1:41000".parse().unwrap());
        let ep = Endpoint::create(&dir, &key, 1, 4096).unwrap();
        assert_eq!(cleanup_connections(&dir).unwrap(), 0, "a live holder keeps its record");
        assert!(!list_connections(&dir)[0].stale);

        // The holder "died" and its pid now names another process: here, this very process
        // with another start time (the bits above the pid).
        let me = this_process().unwrap();
        let ghost = ProcessIdentity::from_bits(me.bits() ^ (1 << 40)).unwrap();
        assert_eq!(ghost.pid(), me.pid());
        assert_eq!(ep.remove_holder(me), 0);
        assert!(ep.add_holder(ghost));
        assert!(ep.holders().is_empty(), "a pid alone does not make a holder alive");
        let listed = list_connections(&dir);
        assert_eq!((listed.len(), listed[0].stale, listed[0].holders.len()), (1, true, 0));

        assert_eq!(cleanup_connections(&dir).unwrap(), 1);
        assert!(!ep.path().exists());
        assert!(list_connections(&dir).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
