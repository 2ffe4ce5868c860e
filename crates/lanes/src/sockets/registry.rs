//! Listing and cleaning socket records (`lanes status`, `lanes cleanup`).

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;

use serde::Serialize;

use super::endpoint::{sockets_dir, ConnectionKey, Endpoint, FLAG_ATTACHED};

/// One accelerated socket, as its record describes it.
#[derive(Clone, Debug, Serialize)]
pub struct ConnectionInfo {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// Live processes holding the socket.
    pub holders: Vec<u32>,
    pub ring_bytes_sent: u64,
    pub kernel_bytes_sent: u64,
    pub bytes_received: u64,
    /// Whether this end found and attached its peer's record (the connection is accelerated).
    pub peer_attached: bool,
    /// No live holder: left behind by a killed process.
    pub stale: bool,
}

/// Every socket record in the fabric directory (unreadable or corrupt ones are skipped).
pub fn list_connections(fabric_dir: &Path) -> Vec<ConnectionInfo> {
    let Ok(entries) = std::fs::read_dir(sockets_dir(fabric_dir)) else { return Vec::new() };
    let mut out: Vec<ConnectionInfo> = entries
        .flatten()
        .filter_map(|e| {
            let key = ConnectionKey::parse(e.file_name().to_str()?)?;
            let ep = Endpoint::open(fabric_dir, &key).ok()?;
            let holders = ep.holders();
            let (ring, kernel) = ep.tx_counts();
            Some(ConnectionInfo {
                local: key.local,
                remote: key.remote,
                stale: holders.is_empty(),
                holders,
                ring_bytes_sent: ring.load(Ordering::Relaxed),
                kernel_bytes_sent: kernel.load(Ordering::Relaxed),
                bytes_received: ep.rx_bytes().load(Ordering::Relaxed),
                peer_attached: ep.has_flag(FLAG_ATTACHED),
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
