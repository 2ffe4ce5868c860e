//! Answers from this host's fabric directory, judged as the shm transport's connect judges
//! a file: a removed object, or the leftover of a dead owner, is as good as absent. These
//! answer peers' questions and this host's processes alike.

use std::collections::HashSet;

use super::Shared;
use crate::cluster::proto::{Answer, GrantStatus, GroupInfo, ObjectInfo, ObjectKind, Query, Refusal};
use crate::platform::liveness;
use crate::transport::shm::layout::{kind, state};
use crate::transport::shm::segment_file::{OpenError, SegmentFile};
use crate::transport::shm::FabricPaths;

impl Shared {
    /// Answers a question about this host's fabric directory from the daemon of `from`.
    pub(super) fn answer_locally(&self, from: &str, query: &Query, generation: u64) -> Answer {
        match query {
            &Query::Lookup { node, kind, id } => match self.lookup_local(node, kind, id) {
                Ok(info) => Answer::Object { info },
                Err(refusal) => Answer::Refused { refusal },
            },
            &Query::Probe { node } => Answer::Processes { count: self.processes_of(node) },
            Query::Groups => Answer::Groups { groups: self.groups_local() },
            Query::Connect { node, kind, id, peer_node, peer_host } => {
                let result = if peer_host != from {
                    Err(Refusal::Failed { reason: format!("host {from} asked for a connection for host {peer_host}") })
                } else {
                    self.connect_local(*node, *kind, *id, *peer_node, from, generation)
                };
                match result {
                    Ok(grant) => Answer::Granted { grant },
                    Err(refusal) => Answer::Refused { refusal },
                }
            }
        }
    }

    pub(super) fn lookup_local(
        &self,
        node: u32,
        kind: ObjectKind,
        id: u32,
    ) -> std::result::Result<ObjectInfo, Refusal> {
        self.open_live(node, kind, id).map(|(_, info)| info)
    }

    /// Opens a live object of this host's fabric directory, judged as `connect_segment`
    /// judges it: a removed object, or the leftover of a dead owner, is as good as absent.
    pub(super) fn open_live(
        &self,
        node: u32,
        kind: ObjectKind,
        id: u32,
    ) -> std::result::Result<(SegmentFile, ObjectInfo), Refusal> {
        let host = self.me.name.clone();
        let not_found = || Refusal::NotFound { node, kind, id, host: host.clone() };
        let file = match SegmentFile::open(&self.paths, kind.layout_kind(), node, id) {
            Ok(f) => f,
            Err(OpenError::Missing) => return Err(not_found()),
            Err(OpenError::Corrupt(reason)) => return Err(Refusal::Corrupt { node, kind, id, reason }),
            Err(OpenError::Io(e)) => return Err(Refusal::Failed { reason: format!("opening {kind} {id:#x}: {e}") }),
        };
        let snap = *file.snapshot();
        let available = match self.status_of(&file, node) {
            GrantStatus::Removed | GrantStatus::OwnerDied => return Err(not_found()),
            status => status == GrantStatus::Available,
        };
        let info = ObjectInfo { node, kind, id, host, size: snap.segment_size, available, owner_pid: snap.owner.pid() };
        Ok((file, info))
    }

    /// What an object of `node` on this host is now, as connects judge it and as grant
    /// holders are told: removed, its owner dead, or (un)available.
    pub(super) fn status_of(&self, file: &SegmentFile, node: u32) -> GrantStatus {
        let st = file.header().state();
        if st & state::REMOVED != 0 {
            GrantStatus::Removed
        } else if !liveness::is_alive(&self.paths.procs(), node, file.snapshot().owner) {
            GrantStatus::OwnerDied
        } else if st & state::AVAILABLE == 0 {
            GrantStatus::Unavailable
        } else {
            GrantStatus::Available
        }
    }

    pub(super) fn processes_of(&self, node: u32) -> u32 {
        // Not counted: this daemon's proxy records, which stand for processes of other hosts.
        let proxies: HashSet<u32> = self.grants_lock().records.keys().copied().collect();
        let me = std::process::id();
        let n = liveness::list_records(&self.paths.procs())
            .unwrap_or_default()
            .iter()
            .filter(|r| r.node == node && r.alive && !(r.pid == me && proxies.contains(&r.node)))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Every object of this host's fabric directory: (layout kind, node, id).
    pub(super) fn objects(&self) -> Vec<(u32, u32, u32)> {
        let mut out = Vec::new();
        let Ok(nodes) = std::fs::read_dir(self.paths.nodes()) else { return out };
        for n in nodes.flatten() {
            let Some(node) = n.file_name().to_str().and_then(FabricPaths::parse_node_dir_name) else { continue };
            let Ok(files) = std::fs::read_dir(n.path()) else { continue };
            for f in files.flatten() {
                if let Some((k, id)) = f.file_name().to_str().and_then(FabricPaths::parse_object_file_name) {
                    out.push((k, node, id));
                }
            }
        }
        out
    }

    /// The live reflective groups of this host's fabric directory (any node), judged as a
    /// lookup judges an object.
    pub(super) fn groups_local(&self) -> Vec<GroupInfo> {
        let mut out = Vec::new();
        let Ok(nodes) = std::fs::read_dir(self.paths.nodes()) else { return out };
        for n in nodes.flatten() {
            let Some(node) = n.file_name().to_str().and_then(FabricPaths::parse_node_dir_name) else { continue };
            let Ok(files) = std::fs::read_dir(n.path()) else { continue };
            for f in files.flatten() {
                let parsed = f.file_name().to_str().and_then(FabricPaths::parse_object_file_name);
                let Some((_, id)) = parsed.filter(|&(k, _)| k == kind::REFLECTIVE) else { continue };
                if self.open_live(node, ObjectKind::Reflective, id).is_ok() {
                    out.push(GroupInfo { node, id, host: self.me.name.clone() });
                }
            }
        }
        out
    }
}
