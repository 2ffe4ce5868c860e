//! Questions about another host's nodes (lookups, probes, connects, groups), asked of that
//! host's daemon over its link and answered within the asker's timeout; refused at once
//! while the host is not Operational, and the moment it leaves Operational.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::membership::millis;
use super::Shared;
use crate::cluster::proto::{
    Answer, GroupInfo, HostState, NodeProbe, ObjectInfo, ObjectKind, PeerMessage, Query, Refusal,
};
use crate::config::NodeId;

/// A question forwarded to a peer, waiting for its answer.
pub(super) struct Pending {
    host: String,
    node: u32,
    pub(super) answer: mpsc::Sender<Answer>,
}

impl Shared {
    /// A node that lanes.toml does not list and that no process acts as on this host: an
    /// answer at once that says so (a listed cluster's unlisted node can only be local).
    pub(super) fn unlisted(&self, node: u32) -> std::result::Result<(), Refusal> {
        let listed = NodeId::new(node).ok().and_then(|n| self.cluster.host_of(n)).is_some();
        if listed || self.processes_of(node) > 0 {
            return Ok(());
        }
        Err(Refusal::Failed {
            reason: format!(
                "node {node} is not in lanes.toml (no [[node]] lists it; the cluster's nodes are {}), and no process \
                 acts as it on host {}",
                self.cluster.listed_nodes(),
                self.me.name
            ),
        })
    }

    /// The peer serving `node`, or None when this host does (or the node is not listed:
    /// unlisted nodes are local, as on a single host).
    pub(super) fn remote_host_of(&self, node: u32) -> Option<String> {
        let id = NodeId::new(node).ok()?;
        self.cluster.host_of(id).filter(|h| h.name != self.me.name).map(|h| h.name.clone())
    }

    /// Asks the daemon of `host`, waiting at most `timeout`.
    pub(super) fn forward(
        &self,
        host: &str,
        node: u32,
        query: Query,
        timeout: Duration,
    ) -> std::result::Result<Answer, Refusal> {
        let started = Instant::now();
        let conn = {
            let st = self.lock();
            let i = st
                .links
                .iter()
                .position(|l| l.entry.name == host)
                .ok_or_else(|| Refusal::Failed { reason: format!("host {host} is not a peer") })?;
            match (&st.links[i].conn, st.membership.state(i)) {
                (Some(c), HostState::Operational) => c.clone(),
                (None, HostState::Operational) if st.membership.away(i) => {
                    return Err(Refusal::DaemonRestarting { node, host: host.to_string() })
                }
                (_, state) => return Err(Refusal::HostUnreachable { node, host: host.to_string(), state }),
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, Pending { host: host.to_string(), node, answer: tx });
        let forget = || {
            self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        };
        if !conn.send(&PeerMessage::Query { id, query }) {
            forget();
            return Err(Refusal::HostUnreachable { node, host: host.to_string(), state: HostState::Suspect });
        }
        match rx.recv_timeout(timeout) {
            Ok(a) => Ok(a),
            Err(_) => {
                forget();
                // An answer that came just now is still an answer (a grant must not be lost).
                match rx.try_recv() {
                    Ok(a) => Ok(a),
                    Err(_) => Err(Refusal::Timeout { host: host.to_string(), waited_ms: millis(started.elapsed()) }),
                }
            }
        }
    }

    pub(super) fn lookup(
        &self,
        node: u32,
        kind: ObjectKind,
        id: u32,
        timeout: Duration,
    ) -> std::result::Result<ObjectInfo, Refusal> {
        if let Err(e) = NodeId::new(node) {
            return Err(Refusal::Failed { reason: e.to_string() });
        }
        match self.remote_host_of(node) {
            None => self.unlisted(node).and_then(|()| self.lookup_local(node, kind, id)),
            Some(host) => match self.forward(&host, node, Query::Lookup { node, kind, id }, timeout)? {
                Answer::Object { info } => Ok(info),
                Answer::Refused { refusal } => Err(refusal),
                other => Err(Refusal::Failed { reason: format!("host {host} answered a lookup with {other:?}") }),
            },
        }
    }

    pub(super) fn probe(&self, node: u32, timeout: Duration) -> std::result::Result<NodeProbe, Refusal> {
        if let Err(e) = NodeId::new(node) {
            return Err(Refusal::Failed { reason: e.to_string() });
        }
        let Some(host) = self.remote_host_of(node) else {
            return Ok(NodeProbe {
                node,
                host: self.me.name.clone(),
                host_state: HostState::Operational,
                processes: self.processes_of(node),
            });
        };
        let state = {
            let st = self.lock();
            st.links.iter().position(|l| l.entry.name == host).map_or(HostState::Unknown, |i| st.membership.state(i))
        };
        if state != HostState::Operational {
            return Ok(NodeProbe { node, host, host_state: state, processes: 0 });
        }
        match self.forward(&host, node, Query::Probe { node }, timeout) {
            Ok(Answer::Processes { count }) => {
                Ok(NodeProbe { node, host, host_state: HostState::Operational, processes: count })
            }
            Ok(Answer::Refused { refusal }) => Err(refusal),
            Ok(other) => Err(Refusal::Failed { reason: format!("host {host} answered a probe with {other:?}") }),
            Err(Refusal::HostUnreachable { state, .. }) => {
                Ok(NodeProbe { node, host, host_state: state, processes: 0 })
            }
            Err(e) => Err(e),
        }
    }

    /// Every live reflective group of the cluster: this host's, then each peer's (asked
    /// within `timeout`). A peer that is not operational or does not answer is a refusal.
    pub(super) fn groups(&self, timeout: Duration) -> std::result::Result<Vec<GroupInfo>, Refusal> {
        let started = Instant::now();
        let mut out = self.groups_local();
        let peers: Vec<(String, u32)> = self
            .lock()
            .links
            .iter()
            .map(|l| (l.entry.name.clone(), l.entry.nodes.first().map_or(0, |n| n.get())))
            .collect();
        for (host, node) in peers {
            let left = timeout.saturating_sub(started.elapsed());
            match self.forward(&host, node, Query::Groups, left)? {
                Answer::Groups { groups } => out.extend(groups.into_iter().filter(|g| g.host == host)),
                Answer::Refused { refusal } => return Err(refusal),
                other => {
                    return Err(Refusal::Failed {
                        reason: format!("host {host} answered a group query with {other:?}"),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Answers every question waiting for `host` with the refusal `why` makes for its node.
    pub(super) fn fail_questions(&self, host: &str, why: impl Fn(u32) -> Refusal) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|_, p| {
            if p.host == host {
                let _ = p.answer.send(Answer::Refused { refusal: why(p.node) });
                false
            } else {
                true
            }
        });
    }
}
