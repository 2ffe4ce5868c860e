//! What a process's ofi connections learn from the cluster: one subscription to this
//! host's daemon, read by a thread, that moves every connection to the state its object
//! and its object's host are in.
//!
//! - **Node events** (the daemons' host states): Suspect makes the connections to that
//!   host's nodes NotOperational (work towards them fails at once, see
//!   [`OfiConn::fault`]); Operational again makes them Operational; Lost loses them
//!   ([`LossReason::NodeLost`]).
//! - **Grant notices** (the owner's daemon watches each granted object): unavailable and
//!   available again, removed, owner died.
//! - **This host's daemon**: while the subscription is down the connections keep their
//!   state (the data goes from process to process; the daemon only watches), for at most
//!   `lost_after`, after which they are NotOperational until it is back; the thread
//!   subscribes again every `RETRY`. A daemon that restarted meanwhile (a new boot value)
//!   does not know our grants: each connection registers its grant with it again
//!   (`Request::Adopt`, on a new daemon connection that the grant lives on from then on);
//!   one it refuses, or that the object's host cannot take over, is lost. A restarted
//!   daemon has heard from no other host yet (their state is Unknown until their hellos):
//!   the connections to such a host keep the state they had, within the same `patience`
//!   counted from when the old daemon went away, rather than failing their work until the
//!   hello arrives.
//!
//! A notice can overtake the grant it is about (grants travel on the connecting call's
//! own daemon connection): it is kept until the connection registers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::remote::OfiConn;
use crate::cluster::{Client, GrantStatus, HeldGrant, HostState, HostStatus, Notice, ObjectKind, Subscription};
use crate::error::{Error, Result};
use crate::transport::LossReason;

/// How long a call to the daemon (connect, subscribe) may take.
const CALL: Duration = Duration::from_secs(2);
/// How long the thread waits for a notice before checking that it is still wanted.
const IDLE: Duration = Duration::from_millis(200);
/// How often the thread tries to subscribe again while the daemon is unreachable.
const RETRY: Duration = Duration::from_millis(100);

/// The subscription's view, shared by the connect path (which registers connections) and
/// the thread (which applies notices).
#[derive(Debug)]
pub struct NodeWatch {
    state: Mutex<Watched>,
    dir: PathBuf,
    /// How long connections keep their state while the daemon is away.
    patience: Duration,
}

#[derive(Debug, Default)]
struct Watched {
    conns: Vec<Weak<OfiConn>>,
    /// The last state heard per node of another host.
    nodes: HashMap<u32, HostState>,
    /// Grant notices whose connection has not registered yet.
    early: HashMap<u64, GrantStatus>,
    /// The current subscription's id, for grants to name; `None` while it is down.
    subscriber: Option<u64>,
    /// Since when the subscription is down, until connections were made NotOperational.
    down_since: Option<Instant>,
    /// Nodes whose host the current daemon has not heard from yet (Unknown in its
    /// picture) while this process knew its state: until when that state is kept.
    unheard: HashMap<u32, Instant>,
}

impl NodeWatch {
    /// Subscribes to the daemon of fabric directory `dir` and starts the thread.
    pub fn start(dir: PathBuf, patience: Duration) -> Result<Arc<NodeWatch>> {
        let sub = subscribe(&dir)?;
        let watch = Arc::new(NodeWatch { state: Mutex::new(Watched::default()), dir: dir.clone(), patience });
        watch.subscribed(&sub, false);
        let weak = Arc::downgrade(&watch);
        crate::platform::threads::spawn("lanes-node-watch", move || run(weak, dir, sub))
            .map_err(|e| Error::io("starting the node watch thread", e))?;
        Ok(watch)
    }

    /// The subscription grants should name, if one is up.
    pub fn subscriber(&self) -> Option<u64> {
        self.lock().subscriber
    }

    /// Watches `conn` from now on, first bringing it to what is known already.
    pub fn register(&self, conn: &Arc<OfiConn>) {
        let mut w = self.lock();
        w.conns.retain(|c| c.strong_count() > 0);
        w.conns.push(Arc::downgrade(conn));
        if w.subscriber.is_none() {
            conn.set_reachable(false);
        }
        if let Some(&state) = w.nodes.get(&conn.info.addr.node) {
            apply_host_state(conn, state);
        }
        if let Some(status) = w.early.remove(&conn.grant) {
            apply_grant_status(conn, status);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Watched> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn live(w: &Watched) -> impl Iterator<Item = Arc<OfiConn>> + '_ {
        w.conns.iter().filter_map(Weak::upgrade)
    }

    /// A subscription (re)started: take its picture of the hosts. `restarted`: the daemon
    /// is not the one our grants came from.
    fn subscribed(&self, sub: &Subscription, restarted: bool) {
        if restarted {
            let conns: Vec<Arc<OfiConn>> = Self::live(&self.lock()).collect();
            for c in conns {
                if let Err(e) = self.adopt(&c, sub.id()) {
                    eprintln!(
                        "lanes: connection to node {} lost with the restart of this host's daemon: {e}",
                        c.info.addr.node
                    );
                    c.mark_lost(LossReason::NodeLost);
                }
            }
        }
        let mut w = self.lock();
        let keep_until = w.down_since.map(|t| t + self.patience);
        let (nodes, unheard) = merge_picture(&w.nodes, remote_nodes(sub.initial()), keep_until);
        w.subscriber = Some(sub.id());
        w.down_since = None;
        w.nodes = nodes;
        w.unheard = unheard;
        for c in Self::live(&w) {
            c.set_reachable(true);
            if let Some(&state) = w.nodes.get(&c.info.addr.node) {
                apply_host_state(&c, state);
            }
        }
    }

    /// Registers `conn`'s grant with this host's restarted daemon on a new daemon
    /// connection, which the grant lives on from now on.
    fn adopt(&self, conn: &OfiConn, subscriber: u64) -> std::result::Result<(), String> {
        if matches!(conn.state(), crate::transport::RemoteState::Lost(_)) {
            return Ok(()); // disconnected or lost already: nothing to keep
        }
        let Some(link) = conn.daemon_link.get() else { return Err("no daemon connection".into()) };
        let kind = ObjectKind::from_layout_kind(conn.info.addr.kind).ok_or("an object of an unknown kind")?;
        let grant = HeldGrant {
            grant: conn.grant,
            node: conn.info.addr.node,
            kind,
            id: conn.info.addr.id,
            slot: conn.slot,
            peer_node: link.peer_node,
        };
        let mut client = Client::connect(&self.dir, CALL).map_err(|e| e.to_string())?;
        client.adopt_object(grant, Some(subscriber), CALL).map_err(|e| e.to_string())?;
        *link.client.lock().unwrap_or_else(|e| e.into_inner()) = Some(client);
        Ok(())
    }

    /// The subscription broke: connections keep their state for `patience`.
    fn daemon_unreachable(&self) {
        let mut w = self.lock();
        if w.subscriber.take().is_some() {
            w.down_since = Some(Instant::now());
        }
    }

    /// The daemon stayed away past `patience`: nothing is known about other hosts until it
    /// is back.
    fn check_patience(&self) {
        let mut w = self.lock();
        if w.down_since.is_some_and(|t| t.elapsed() >= self.patience) {
            w.down_since = None;
            for c in Self::live(&w) {
                c.set_reachable(false);
            }
        }
    }

    /// Nodes the daemon still has not heard from when the state kept for them expires:
    /// nothing is known about them until it does.
    fn check_unheard(&self) {
        let mut w = self.lock();
        if w.unheard.is_empty() {
            return;
        }
        let now = Instant::now();
        let expired: Vec<u32> = w.unheard.iter().filter(|(_, &until)| until <= now).map(|(&n, _)| n).collect();
        for node in expired {
            w.unheard.remove(&node);
            w.nodes.insert(node, HostState::Unknown);
            for c in Self::live(&w).filter(|c| c.info.addr.node == node) {
                apply_host_state(&c, HostState::Unknown);
            }
        }
    }

    fn apply(&self, notice: Notice) {
        let mut w = self.lock();
        match notice {
            Notice::Node(ev) => {
                w.unheard.remove(&ev.node);
                w.nodes.insert(ev.node, ev.state);
                for c in Self::live(&w).filter(|c| c.info.addr.node == ev.node) {
                    apply_host_state(&c, ev.state);
                }
            }
            Notice::Grant { grant, status } => {
                let conn = Self::live(&w).find(|c| c.grant == grant);
                match conn {
                    Some(c) => apply_grant_status(&c, status),
                    None => {
                        // Bounded: a notice for a grant that never registers (its connect
                        // gave up) would otherwise stay for the life of the process.
                        if w.early.len() >= 1024 {
                            w.early.clear();
                        }
                        w.early.insert(grant, status);
                    }
                }
            }
        }
    }
}

/// A new subscription's picture of the other hosts' nodes (`fresh`), merged with what the
/// process knew (`before`): a node the daemon has not heard from yet (Unknown: a daemon
/// that just started, before its hellos) keeps the state it had, until `keep_until` (when
/// the old daemon went away plus the patience; `None`: nothing is kept). Returns the nodes'
/// states and, for those kept, until when.
fn merge_picture(
    before: &HashMap<u32, HostState>,
    fresh: HashMap<u32, HostState>,
    keep_until: Option<Instant>,
) -> (HashMap<u32, HostState>, HashMap<u32, Instant>) {
    let mut unheard = HashMap::new();
    let nodes = fresh
        .into_iter()
        .map(|(node, state)| match (state, before.get(&node), keep_until) {
            (HostState::Unknown, Some(&known), Some(until)) if known != HostState::Unknown => {
                unheard.insert(node, until);
                (node, known)
            }
            _ => (node, state),
        })
        .collect();
    (nodes, unheard)
}

/// The nodes of the other hosts and their hosts' states.
fn remote_nodes(hosts: &[HostStatus]) -> HashMap<u32, HostState> {
    hosts.iter().filter(|h| !h.local).flat_map(|h| h.nodes.iter().map(move |&n| (n, h.state))).collect()
}

fn apply_host_state(conn: &OfiConn, state: HostState) {
    match state {
        HostState::Operational => conn.set_reachable(true),
        HostState::Suspect | HostState::Unknown => conn.set_reachable(false),
        HostState::Lost => conn.mark_lost(LossReason::NodeLost),
    }
}

fn apply_grant_status(conn: &OfiConn, status: GrantStatus) {
    match status {
        GrantStatus::Available => conn.set_available(true),
        GrantStatus::Unavailable => conn.set_available(false),
        GrantStatus::Removed => conn.mark_lost(LossReason::Removed),
        GrantStatus::OwnerDied => conn.mark_lost(LossReason::OwnerDied),
        GrantStatus::Forgotten => conn.mark_lost(LossReason::NodeLost),
    }
}

fn subscribe(dir: &std::path::Path) -> Result<Subscription> {
    Client::connect(dir, CALL)
        .and_then(|c| c.subscribe(CALL))
        .map_err(|e| Error::Cluster(format!("subscribing to the daemon's node events: {e}")))
}

/// The thread: applies notices while the watch is wanted; subscribes again when the
/// subscription breaks.
fn run(watch: Weak<NodeWatch>, dir: PathBuf, first: Subscription) {
    let mut boot = first.boot();
    let mut sub = Some(first);
    loop {
        let Some(w) = watch.upgrade() else { return };
        match sub.as_mut() {
            Some(s) => match s.next_notice(IDLE) {
                Ok(Some(notice)) => {
                    w.apply(notice);
                    w.check_unheard();
                }
                Ok(None) => w.check_unheard(),
                Err(_) => {
                    sub = None;
                    w.daemon_unreachable();
                }
            },
            None => match subscribe(&dir) {
                Ok(s) => {
                    w.subscribed(&s, s.boot() != boot);
                    boot = s.boot();
                    sub = Some(s);
                }
                Err(_) => {
                    w.check_patience();
                    drop(w);
                    std::thread::sleep(RETRY);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OP: HostState = HostState::Operational;

    /// A restarted daemon's picture says Unknown for a host it has not heard from yet: the
    /// process keeps what it knew (Operational) until the deadline, instead of failing the
    /// connections' work until the daemon's hello (found by a third-party SISCI ping-pong
    /// whose SCIMemCpy failed with "the daemons call it suspect" right after the restart
    /// of its own host's daemon).
    #[test]
    fn a_restarted_daemons_unknown_keeps_the_known_state_until_the_deadline() {
        let until = Instant::now() + Duration::from_secs(3);
        let before = HashMap::from([(4, OP), (12, HostState::Suspect), (16, OP)]);
        let fresh = HashMap::from([
            (4, HostState::Unknown),
            (12, HostState::Unknown),
            (16, HostState::Lost),
            (20, HostState::Unknown),
        ]);
        let (nodes, unheard) = merge_picture(&before, fresh, Some(until));
        assert_eq!(nodes[&4], OP, "not heard yet: kept");
        assert_eq!(nodes[&12], HostState::Suspect, "not heard yet: kept as it was");
        assert_eq!(nodes[&16], HostState::Lost, "what the daemon knows wins");
        assert_eq!(nodes[&20], HostState::Unknown, "nothing known before: Unknown");
        assert_eq!(unheard, HashMap::from([(4, until), (12, until)]));
    }

    /// Nothing is kept when the process has no deadline (first subscription, or its daemon
    /// stayed away past the patience).
    #[test]
    fn without_a_deadline_unknown_is_unknown() {
        let before = HashMap::from([(4, OP)]);
        let (nodes, unheard) = merge_picture(&before, HashMap::from([(4, HostState::Unknown)]), None);
        assert_eq!(nodes[&4], HostState::Unknown);
        assert!(unheard.is_empty());
    }
}
