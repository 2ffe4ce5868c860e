//! The owner's side of grants: connection slots this daemon claims in objects of this host
//! for processes of other hosts (and of this one), under a proxy liveness record per peer
//! node. Slots are released on the holder's release, on its host's loss and at stop;
//! holders are told when their object becomes unavailable, is removed or its owner dies;
//! after a restart, the slots an earlier daemon claimed are taken over from the holders'
//! `Holding` lists and adoptions, and those nobody holds are released as deaths.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::peer_links::Conn;
use super::Shared;
use crate::cluster::exports;
use crate::cluster::proto::{Grant, GrantStatus, HeldGrant, ObjectKind, PeerMessage, Refusal};
use crate::config::NodeId;
use crate::fabric::MapAccess;
use crate::platform::files::ensure_private_dir;
use crate::platform::liveness::{self, ProcessIdentity, ProcessRecord};
use crate::platform::random_u64;
use crate::transport::shm::data_interrupt;
use crate::transport::shm::layout::{kind, state, MAX_CONNECTIONS};
use crate::transport::shm::remote::direct_mapping;
use crate::transport::shm::segment_file::SegmentFile;

/// The slots this daemon claimed for peers, and the proxy records they are claimed under.
/// Lock order: `state`, then `grants`.
#[derive(Default)]
pub(super) struct Grants {
    held: HashMap<u64, Held>,
    /// One proxy liveness record per peer node with grants: `procs/<peer node>-<our pid>`.
    pub(super) records: HashMap<u32, Arc<ProcessRecord>>,
}

/// One grant on the owner's side: the object file (kept open, so the release goes to the
/// object the slot was claimed in even if the name was reused since) and the slot.
struct Held {
    file: SegmentFile,
    /// The identity the slot is held under: this daemon's, or (taken over after a restart)
    /// an earlier daemon's of this host.
    holder: ProcessIdentity,
    /// The generation of the connection to the requester's host it was granted on (0:
    /// a local requester, or taken over).
    generation: u64,
    kind: ObjectKind,
    node: u32,
    id: u32,
    slot: usize,
    peer_node: u32,
    /// The host of the requesting process (this host's name for a local requester).
    peer_host: String,
    /// The object's status as last told to the holder.
    reported: GrantStatus,
}

impl Shared {
    /// Claims a connection slot of object (`kind`, `node`, `id`) of this host for a process
    /// acting as `peer_node` on `peer_host`, as the shm transport's connect claims one for
    /// itself, and returns the grant with the owner's export record.
    pub(super) fn connect_local(
        &self,
        node: u32,
        kind: ObjectKind,
        id: u32,
        peer_node: u32,
        peer_host: &str,
        generation: u64,
    ) -> std::result::Result<Grant, Refusal> {
        for n in [node, peer_node] {
            if let Err(e) = NodeId::new(n) {
                return Err(Refusal::Failed { reason: e.to_string() });
            }
        }
        let host = self.me.name.clone();
        let (file, info) = self.open_live(node, kind, id)?;
        let not_available = || Refusal::NotAvailable { node, kind, id, host: host.clone() };
        if !info.available {
            return Err(not_available());
        }
        let owner = file.snapshot().owner;
        let export = match exports::read(self.paths.root(), kind, node, id) {
            Ok(Some(rec)) if rec.owner_identity == owner.bits() && rec.owner_pid == owner.pid() => rec,
            // Not exported (yet), or a record left by an earlier owner of the same id.
            Ok(_) => return Err(not_available()),
            Err(reason) => return Err(Refusal::Corrupt { node, kind, id, reason }),
        };
        let procs = self.paths.procs();
        let mut grants = self.grants_lock();
        if self.stopping() {
            return Err(Refusal::Failed { reason: format!("the daemon of host {host} is stopping") });
        }
        if let std::collections::hash_map::Entry::Vacant(slot) = grants.records.entry(peer_node) {
            let record = ensure_private_dir(&procs)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    let n = NodeId::new(peer_node).map_err(|e| e.to_string())?;
                    crate::fabric::register(&self.paths, n).map_err(|e| e.to_string())
                })
                .map_err(|e| Refusal::Failed { reason: format!("a proxy record for node {peer_node}: {e}") })?;
            slot.insert(record);
        }
        // Only a slot whose owner made a key for this very claim (revocation: the owner
        // closes that key once the claim is over); the generation it is claimed from says
        // which key.
        let claimed_at: Vec<std::sync::atomic::AtomicU32> =
            (0..MAX_CONNECTIONS).map(|_| std::sync::atomic::AtomicU32::new(0)).collect();
        let claimed = file.header().claim_slot_where(
            self.identity,
            peer_node,
            true,
            |n, holder| !liveness::is_alive(&procs, n, holder),
            |i, generation| {
                claimed_at[i].store(generation, std::sync::atomic::Ordering::Relaxed);
                export.key_for_claim(i, generation).is_some()
            },
        );
        let Some(slot) = claimed else {
            grants.forget_record_if_unused(peer_node);
            if !export.slot_keys.is_empty() && file.header().connections().len() < MAX_CONNECTIONS {
                // Free slots whose keys the owner has not renewed yet (it does within a
                // tick of its service thread): worth waiting out.
                return Err(not_available());
            }
            return Err(Refusal::TooManyConnections { node, kind, id, host });
        };
        let mut export = export;
        if let Some(key) = export.key_for_claim(slot, claimed_at[slot].load(std::sync::atomic::Ordering::Relaxed)) {
            export.key = key;
        }
        // The holder needs its own key only.
        export.slot_keys = Vec::new();
        if file.header().state() & state::REMOVED != 0 {
            file.header().release_slot(slot, self.identity);
            grants.forget_record_if_unused(peer_node);
            return Err(Refusal::NotFound { node, kind, id, host });
        }
        if kind == ObjectKind::DataInterrupt {
            // What a local sender does when it takes a slot (`Sender::attach`): settle the
            // slot's ring past whatever an earlier holder left, before the remote sender
            // reads where to start.
            let settled = direct_mapping(&file, 0, data_interrupt::OBJECT_BYTES, MapAccess::ReadWrite)
                .map(|m| data_interrupt::Rings::new(m).settle(slot));
            if let Err(e) = settled {
                file.header().release_slot(slot, self.identity);
                grants.forget_record_if_unused(peer_node);
                return Err(Refusal::Failed { reason: format!("preparing the data interrupt's ring: {e}") });
            }
        }
        let grant = loop {
            let g = random_u64();
            if g != 0 && !grants.held.contains_key(&g) {
                break g;
            }
        };
        let held = Held {
            file,
            holder: self.identity,
            generation,
            kind,
            node,
            id,
            slot,
            peer_node,
            peer_host: peer_host.to_string(),
            reported: GrantStatus::Available,
        };
        grants.held.insert(grant, held);
        drop(grants);
        self.log(format_args!(
            "grant {grant:016x}: {kind} {id:#x} of node {node}, slot {slot}, to node {peer_node} on host {peer_host}"
        ));
        Ok(Grant { info, export, slot: slot as u32, grant })
    }

    /// Releases the slot of `grant`, if this daemon holds it and (when `from` names a host)
    /// it was granted to that host; `died`: its holder went away without disconnecting.
    pub(super) fn release_grant(&self, grant: u64, from: Option<&str>, died: bool) {
        let mut grants = self.grants_lock();
        let Some(held) = grants.held.get(&grant) else { return };
        if from.is_some_and(|h| h != held.peer_host) {
            return;
        }
        if let Some(held) = grants.held.remove(&grant) {
            let why = if died { "released: its holder went away" } else { "released" };
            self.release_held(&mut grants, grant, held, why, died);
        }
    }

    /// Releases every slot held for processes of `host` (it is Lost).
    pub(super) fn release_host(&self, host: &str) {
        let mut grants = self.grants_lock();
        let ids: Vec<u64> = grants.held.iter().filter(|(_, h)| h.peer_host == host).map(|(g, _)| *g).collect();
        for g in ids {
            if let Some(held) = grants.held.remove(&g) {
                // Marked as the whole host's loss, so that the owner also cuts its
                // connections from that host (revocation); `release_held` then finds the
                // slot released and only forgets and logs.
                held.file.header().release_slot_host_lost(held.slot, held.holder);
                self.release_held(&mut grants, g, held, "released: its host is lost", true);
            }
        }
    }

    /// Tells the holders of grants whose object changed (made unavailable or available
    /// again, removed, its owner died) what became of it. A notice that cannot be sent now
    /// (the holder's host is unreachable) is sent at a later tick.
    pub(super) fn watch_grants(&self) {
        let changed: Vec<(u64, String, GrantStatus)> = {
            let grants = self.grants_lock();
            grants
                .held
                .iter()
                .filter(|(_, h)| !h.reported.is_final())
                .filter_map(|(g, h)| {
                    let status = self.status_of(&h.file, h.node);
                    (status != h.reported).then(|| (*g, h.peer_host.clone(), status))
                })
                .collect()
        };
        for (grant, host, status) in changed {
            let told = if host == self.me.name {
                self.tell_requester(grant, None, status);
                true
            } else {
                let st = self.lock();
                let link = st.links.iter().find(|l| l.entry.name == host);
                link.and_then(|l| l.conn.as_ref()).is_some_and(|c| c.send(&PeerMessage::GrantStatus { grant, status }))
            };
            if told {
                if let Some(h) = self.grants_lock().held.get_mut(&grant) {
                    h.reported = status;
                }
                self.log(format_args!("grant {grant:016x}: told host {host} its object is {status:?}"));
            }
        }
    }

    /// Releases every slot held (the daemon stops).
    pub(super) fn release_all(&self) {
        let mut grants = self.grants_lock();
        let all: Vec<(u64, Held)> = grants.held.drain().collect();
        for (g, held) in all {
            self.release_held(&mut grants, g, held, "released: the daemon stops", false);
        }
        grants.records.clear();
    }

    /// Releases `held`'s slot (`why` is for the log); `as_dead` (its holder went away
    /// without disconnecting, or its host was lost): the owner sees
    /// `Disconnected { died: true }`, as when a local peer dies.
    fn release_held(&self, grants: &mut Grants, grant: u64, held: Held, why: &str, as_dead: bool) {
        if as_dead {
            held.file.header().release_slot_lost(held.slot, held.holder);
        } else {
            held.file.header().release_slot(held.slot, held.holder);
        }
        grants.forget_record_if_unused(held.peer_node);
        self.log(format_args!(
            "grant {grant:016x}: {} {:#x} of node {}, slot {}, node {} on host {} {why}",
            held.kind, held.id, held.node, held.slot, held.peer_node, held.peer_host
        ));
    }

    /// Takes over grant `g`, held by a process of `peer_host` (this host's name for a local
    /// one), whose slot an earlier daemon of this host claimed: the slot must still be a
    /// proxy's for `g.peer_node`, and no other grant may hold it. For a grant this daemon
    /// holds already, returns the status last told if that is not `Available`, to be told
    /// again (the notice may have gone with the holder's old daemon). `generation`: the
    /// connection it is taken over on (0: local).
    pub(super) fn adopt(
        &self,
        g: &HeldGrant,
        peer_host: &str,
        generation: u64,
    ) -> std::result::Result<Option<GrantStatus>, String> {
        let mut grants = self.grants_lock();
        if let Some(h) = grants.held.get(&g.grant) {
            if h.peer_host != peer_host {
                return Err(format!("grant {:016x} was granted to host {}", g.grant, h.peer_host));
            }
            return Ok(Some(h.reported).filter(|&r| r != GrantStatus::Available));
        }
        let file = SegmentFile::open(&self.paths, g.kind.layout_kind(), g.node, g.id)
            .map_err(|_| format!("{} {:#x} of node {} is gone", g.kind, g.id, g.node))?;
        let slot = g.slot as usize;
        let taken = grants.held.values().any(|h| (h.kind, h.node, h.id, h.slot) == (g.kind, g.node, g.id, slot));
        let holder = match file.header().slot(slot) {
            Some(snap) if snap.proxy && snap.node == g.peer_node && !taken => snap.holder,
            _ => None,
        };
        let Some(holder) = holder else {
            return Err(format!(
                "slot {slot} of {} {:#x} of node {} is not held for node {}",
                g.kind, g.id, g.node, g.peer_node
            ));
        };
        if let std::collections::hash_map::Entry::Vacant(slot) = grants.records.entry(g.peer_node) {
            let procs = self.paths.procs();
            let record = ensure_private_dir(&procs)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    let n = NodeId::new(g.peer_node).map_err(|e| e.to_string())?;
                    crate::fabric::register(&self.paths, n).map_err(|e| e.to_string())
                })
                .map_err(|e| format!("a proxy record for node {}: {e}", g.peer_node))?;
            slot.insert(record);
        }
        let held = Held {
            file,
            holder,
            generation,
            kind: g.kind,
            node: g.node,
            id: g.id,
            slot,
            peer_node: g.peer_node,
            peer_host: peer_host.to_string(),
            reported: GrantStatus::Available,
        };
        grants.held.insert(g.grant, held);
        drop(grants);
        self.log(format_args!(
            "grant {:016x}: {} {:#x} of node {}, slot {}, node {} on host {peer_host}: taken over from an earlier daemon",
            g.grant, g.kind, g.id, g.node, slot, g.peer_node
        ));
        Ok(None)
    }

    /// `host` says which of this host's grants its processes hold (`PeerMessage::Holding`,
    /// once per connection): take over those an earlier daemon of this host made (a grant
    /// nobody can take over is `Forgotten`), release as their holders' deaths those granted
    /// to it on an earlier connection that it no longer holds, and sweep the slots of its
    /// nodes that nobody holds.
    pub(super) fn reconcile(&self, host: &str, conn: &Conn, listed: &[HeldGrant]) {
        for g in listed {
            match self.adopt(g, host, conn.generation) {
                Ok(None) => {}
                Ok(Some(status)) => {
                    conn.send(&PeerMessage::GrantStatus { grant: g.grant, status });
                }
                Err(why) => {
                    self.log(format_args!("grant {:016x} of host {host}: cannot take it over: {why}", g.grant));
                    conn.send(&PeerMessage::GrantStatus { grant: g.grant, status: GrantStatus::Forgotten });
                }
            }
        }
        let ids: HashSet<u64> = listed.iter().map(|g| g.grant).collect();
        let mut grants = self.grants_lock();
        let gone: Vec<u64> = grants
            .held
            .iter()
            .filter(|(g, h)| h.peer_host == host && h.generation != conn.generation && !ids.contains(g))
            .map(|(g, _)| *g)
            .collect();
        for g in gone {
            if let Some(held) = grants.held.remove(&g) {
                self.release_held(&mut grants, g, held, "released: its host no longer holds it", true);
            }
        }
        drop(grants);
        self.sweep_orphans(|h| h == host);
        if !listed.is_empty() {
            self.log(format_args!("host {host} holds {} grants of this host: reconciled", listed.len()));
        }
    }

    /// Releases, as their holders' deaths, the proxy slots an earlier daemon of this host
    /// claimed for nodes of the hosts `of_host` accepts that no grant of this daemon holds:
    /// the processes they were for did not come back (their daemon restarted without them,
    /// or their host was lost).
    pub(super) fn sweep_orphans(&self, of_host: impl Fn(&str) -> bool) {
        let host_of = |node: u32| {
            NodeId::new(node)
                .ok()
                .and_then(|n| self.cluster.host_of(n))
                .map_or_else(|| self.me.name.clone(), |h| h.name.clone())
        };
        let grants = self.grants_lock();
        for (layout_kind, node, id) in self.objects() {
            let Ok(file) = SegmentFile::open(&self.paths, layout_kind, node, id) else { continue };
            for (slot, peer_node, holder) in file.header().proxy_slots() {
                if holder == self.identity || !of_host(&host_of(peer_node)) {
                    continue;
                }
                let held = grants
                    .held
                    .values()
                    .any(|h| h.kind.layout_kind() == layout_kind && (h.node, h.id, h.slot) == (node, id, slot));
                if !held {
                    file.header().release_slot_lost(slot, holder);
                    self.log(format_args!(
                        "{} {id:#x} of node {node}, slot {slot}: node {peer_node} was held by an earlier daemon and \
                         nobody holds it now: released",
                        kind::name(layout_kind)
                    ));
                }
            }
        }
    }
}

impl Grants {
    /// Drops the proxy record of `peer_node` when no grant needs it any more.
    fn forget_record_if_unused(&mut self, peer_node: u32) {
        if !self.held.values().any(|h| h.peer_node == peer_node) {
            self.records.remove(&peer_node);
        }
    }
}
