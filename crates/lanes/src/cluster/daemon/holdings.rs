//! The requester's side of grants: the grants this host's processes hold, each tied to the
//! process's connection to this daemon and to the host that granted it. A release goes to
//! the granting host now, or when it is connected again (dropped if it is Lost: it released
//! them itself); `Holding` tells each host, once per connection, which of its grants are
//! still held here, so that a restarted daemon on either side can reconcile them.

use std::time::Duration;

use super::{Shared, State};
use crate::cluster::proto::{
    Answer, Grant, GrantStatus, HeldGrant, HostState, ObjectKind, PeerMessage, Query, Refusal, Reply,
};
use crate::config::NodeId;

/// A grant a local process holds: its connection and the host that granted it (None: this
/// host).
pub(super) struct Requested {
    /// The local process's connection (its id).
    pub(super) client: u64,
    pub(super) host: Option<String>,
    /// The grant as the owner's daemon takes it over after a restart.
    pub(super) held: HeldGrant,
    /// The subscription that hears the object's status changes.
    pub(super) notify: Option<u64>,
}

impl Shared {
    /// Passes a grant's new status to the subscription its local holder named, if the grant
    /// came from `from` (None: this host).
    pub(super) fn tell_requester(&self, grant: u64, from: Option<&str>, status: GrantStatus) {
        let notify = {
            let req = self.requested_lock();
            match req.get(&grant) {
                Some(r) if r.host.as_deref() == from => r.notify,
                _ => None,
            }
        };
        let Some(subscriber) = notify else { return };
        let st = self.lock();
        if let Some((_, tx)) = st.subscribers.iter().find(|(id, _)| *id == subscriber) {
            // A subscriber too slow to take it is dropped at the next node event anyway.
            let _ = tx.try_send(Reply::GrantStatus { grant, status });
        }
    }

    /// Tells every connected host which of its grants this host's processes hold, once per
    /// connection, once processes of an earlier daemon had time to register again.
    pub(super) fn send_holdings(&self, st: &mut State) {
        for i in 0..st.links.len() {
            let Some(conn) = st.links[i].conn.clone() else { continue };
            if st.membership.state(i) != HostState::Operational || st.links[i].holding_sent == Some(conn.generation) {
                continue;
            }
            let host = st.links[i].entry.name.as_str();
            let grants: Vec<HeldGrant> = self
                .requested_lock()
                .values()
                .filter(|r| r.host.as_deref() == Some(host))
                .map(|r| r.held.clone())
                .collect();
            if conn.send(&PeerMessage::Holding { grants }) {
                st.links[i].holding_sent = Some(conn.generation);
            }
        }
    }

    /// Connects a local process acting as `peer_node` to object (`kind`, `node`, `id`): here
    /// when the node is this host's, else through the node's host. Returns the grant and the
    /// host that holds it (None: this one).
    pub(super) fn connect(
        &self,
        node: u32,
        kind: ObjectKind,
        id: u32,
        peer_node: u32,
        timeout: Duration,
    ) -> std::result::Result<(Grant, Option<String>), Refusal> {
        for n in [node, peer_node] {
            if let Err(e) = NodeId::new(n) {
                return Err(Refusal::Failed { reason: e.to_string() });
            }
        }
        if let Some(elsewhere) = self.remote_host_of(peer_node) {
            return Err(Refusal::Failed {
                reason: format!("node {peer_node} is on host {elsewhere}, not on host {}", self.me.name),
            });
        }
        let Some(host) = self.remote_host_of(node) else {
            self.unlisted(node)?;
            let me = self.me.name.clone();
            return self.connect_local(node, kind, id, peer_node, &me, 0).map(|g| (g, None));
        };
        let query = Query::Connect { node, kind, id, peer_node, peer_host: self.me.name.clone() };
        match self.forward(&host, node, query, timeout)? {
            Answer::Granted { grant } => {
                let i = &grant.info;
                if (i.node, i.kind, i.id) != (node, kind, id) {
                    self.send_release(&host, grant.grant, false);
                    return Err(Refusal::Failed { reason: format!("host {host} granted another object: {i:?}") });
                }
                Ok((grant, Some(host)))
            }
            Answer::Refused { refusal } => Err(refusal),
            other => Err(Refusal::Failed { reason: format!("host {host} answered a connect with {other:?}") }),
        }
    }

    /// Tells `host` to release `grant`, now or when it is connected again.
    fn send_release(&self, host: &str, grant: u64, died: bool) {
        let mut st = self.lock();
        let st = &mut *st;
        let Some(i) = st.links.iter().position(|l| l.entry.name == host) else { return };
        let link = &mut st.links[i];
        let sent = link.conn.as_ref().is_some_and(|c| c.send(&PeerMessage::Release { grant, died }));
        if !sent && st.membership.state(i) != HostState::Lost {
            link.owed.push((grant, died));
        }
    }

    /// Releases a grant a local process held; `died`: it went away without disconnecting.
    pub(super) fn release_requested(&self, grant: u64, host: Option<String>, died: bool) {
        match host {
            None => self.release_grant(grant, Some(&self.me.name), died),
            Some(h) => self.send_release(&h, grant, died),
        }
    }

    /// Releases every grant the local process on connection `client` still holds.
    fn release_client(&self, client: u64) {
        let mine: Vec<(u64, Requested)> = {
            let mut req = self.requested_lock();
            let ids: Vec<u64> = req.iter().filter(|(_, r)| r.client == client).map(|(g, _)| *g).collect();
            ids.into_iter().filter_map(|g| req.remove(&g).map(|r| (g, r))).collect()
        };
        // Grants still held when the connection ends: the process exited or died without
        // disconnecting (or gave up on a call, which the owner cannot tell apart).
        for (grant, r) in mine {
            self.release_requested(grant, r.host, true);
        }
    }
}

/// The grants of one local process's connection, released when it ends.
pub(super) struct ClientGrants<'a> {
    pub(super) shared: &'a Shared,
    pub(super) id: u64,
}

impl Drop for ClientGrants<'_> {
    fn drop(&mut self) {
        self.shared.release_client(self.id);
    }
}
