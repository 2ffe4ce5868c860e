//! The pairing of cross-host socket halves (docs/design/cross-host-sockets.md, section 2):
//! a state machine without I/O and without a clock. Its inputs are what happened (a local
//! process registered a half, a peer daemon told of one, a half was withdrawn, a link came
//! up, a host was lost), with the time; its outputs are [`Out`]s the daemon carries out
//! (send a message to a host, write a half's record, log). The one thing it asks of the
//! kernel, whether this host's socket still is what a half says, it asks through [`Vouch`].
//!
//! - **Halves.** This host's halves are keyed by their tuple as this host sees it (local,
//!   remote); a peer daemon's halves by the same tuple, mirrored from the peer's view. Two
//!   halves match when the tuples mirror each other and their users are the same.
//! - **Who decides.** Of the two hosts of a connection, the one whose name sorts first (the
//!   pair's *leader*, as for the daemons' links) decides a pairing: on a match it asks the
//!   kernel once more about its own half, picks the generation (one more than either half
//!   had) and tells the other host (`SocketPaired`), which checks its own half in turn. So
//!   both hosts announce the same generation, and no host pairs a half the other did not
//!   vouch for.
//! - **Withdrawal.** A half whose last holder closed it, whose process died or whose socket
//!   is gone is withdrawn: the other host's half becomes *peer gone*. On each new link the
//!   two daemons send each other their whole lists (`SocketSync`): what the list leaves out
//!   was withdrawn while the link was down. A Lost host's pairs go back to *waiting*: they
//!   pair again (a new generation) if the host comes back with the sockets alive.
//! - **What is refused.** A peer daemon's half or pairing whose address on the sender's
//!   side is not the sender's, or on this side not this host's; a pairing decided by the
//!   host that does not lead; a pairing naming another cookie than this host's half has;
//!   halves of different users; more halves than [`MAX_REMOTE_HALVES`] from one host.
//!   Each is counted by reason; nothing refused changes a half. A pairing of a half this
//!   host no longer holds is counted apart, as stale: a short connection's withdrawal and
//!   its pairing cross on the link.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::time::Instant;

use super::addresses::AddressBook;
use crate::cluster::proto::{HalfStatus, PeerMessage, StreamHandles, WireHalf};

/// A half's tuple as this host sees it: (local, remote).
pub(super) type Tuple = (SocketAddr, SocketAddr);

/// Halves one peer host may have told of and not yet withdrawn.
pub(super) const MAX_REMOTE_HALVES: usize = 65_536;
/// Halves of this host's processes held at once.
pub(super) const MAX_LOCAL_HALVES: usize = 65_536;
/// Halves per `SocketSync` frame: far below the 64 KiB frame limit.
const SYNC_CHUNK: usize = 128;

/// Where one of this host's halves stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HalfState {
    /// No pairing now; `last` is the generation of the last one (0: never paired).
    Waiting { last: u64 },
    /// Paired: the pairing's generation, and the peer socket's cookie.
    Paired { generation: u64, peer_cookie: u64 },
    /// The peer's half was withdrawn; `last` as for `Waiting`.
    PeerGone { last: u64 },
}

impl HalfState {
    fn last(self) -> u64 {
        match self {
            HalfState::Waiting { last } | HalfState::PeerGone { last } => last,
            HalfState::Paired { generation, .. } => generation,
        }
    }
}

/// One of this host's halves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LocalHalf {
    pub(super) cookie: u64,
    pub(super) pid: u32,
    pub(super) uid: u32,
    /// The host its peer is on.
    pub(super) peer_host: String,
    pub(super) since: Instant,
    pub(super) state: HalfState,
    /// The objects its process exported for the connection's bytes (None: none).
    pub(super) handles: Option<StreamHandles>,
    /// While paired: the peer's objects, as the peer's daemon announced them.
    pub(super) peer_handles: Option<StreamHandles>,
}

/// A peer daemon's half, keyed by its tuple mirrored into this host's view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RemoteHalf {
    cookie: u64,
    uid: u32,
    generation: u64,
    peer_cookie: u64,
    handles: Option<StreamHandles>,
}

/// What the daemon does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Out {
    /// Send `msg` to host `host` (dropped when it has no link: the next link's
    /// `SocketSync` carries the state).
    Send { host: String, msg: PeerMessage },
    /// Write this half's pairing (and while paired, the peer's stream objects) into its
    /// record.
    Record { tuple: Tuple, state: HalfState, peer_host: String, peer_handles: Option<StreamHandles> },
    /// Only worth a line in the log.
    Log(String),
}

/// What the state machine asks the kernel.
pub(super) trait Vouch {
    /// Whether this host's socket `tuple` still exists with `half`'s cookie, held by a
    /// process.
    fn still_holds(&mut self, tuple: &Tuple, half: &LocalHalf) -> bool;
}

/// Why a registration or a peer's message was refused (the keys of the counts).
pub(super) mod refusal {
    pub const ADDRESS_NOT_SENDERS: &str = "peer: address not the sender's";
    pub const ADDRESS_NOT_OURS: &str = "peer: address not this host's";
    pub const NOT_LEADER: &str = "peer: pairing decided by the host that does not lead";
    pub const COOKIE_MISMATCH: &str = "peer: pairing names another socket";
    pub const USERS_DIFFER: &str = "peer: halves of different users";
    pub const TOO_MANY: &str = "peer: too many halves";
    pub const WRONG_PEER_HOST: &str = "peer: a half whose peer is on another host";
    pub const CLAIM: &str = "peer: address claimed at hello";
    pub const HANDLES_NOT_SENDERS: &str = "peer: stream objects on a node not the sender's";
    pub const HANDLES_MISMATCH: &str = "peer: pairing names other stream objects";
}

/// Every cross-host half this daemon knows.
#[derive(Clone, Debug)]
pub(super) struct Pairing {
    me: String,
    local: HashMap<Tuple, LocalHalf>,
    remote: HashMap<String, HashMap<Tuple, RemoteHalf>>,
    /// A `SocketSync` in progress, per host: the chunks so far.
    syncing: HashMap<String, HashMap<Tuple, RemoteHalf>>,
    refused: BTreeMap<String, u64>,
    /// Pairings of halves withdrawn just before (the withdrawal and the pairing crossed).
    stale: u64,
}

fn mirrored(local: SocketAddr, remote: SocketAddr) -> Tuple {
    (remote, local)
}

impl Pairing {
    /// The halves of host `me`.
    pub(super) fn new(me: &str) -> Pairing {
        Pairing {
            me: me.to_string(),
            local: HashMap::new(),
            remote: HashMap::new(),
            syncing: HashMap::new(),
            refused: BTreeMap::new(),
            stale: 0,
        }
    }

    /// Whether this host leads the pairs it has with `host`.
    fn leads(&self, host: &str) -> bool {
        self.me.as_str() < host
    }

    /// Counts a refusal.
    pub(super) fn refuse(&mut self, why: &str) {
        *self.refused.entry(why.to_string()).or_default() += 1;
    }

    /// The refusals so far, by reason.
    pub(super) fn refusals(&self) -> Vec<(String, u64)> {
        self.refused.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Pairings of halves this host no longer held when they came.
    pub(super) fn stale(&self) -> u64 {
        self.stale
    }

    /// This host's half `tuple`, if registered.
    pub(super) fn local(&self, tuple: &Tuple) -> Option<&LocalHalf> {
        self.local.get(tuple)
    }

    /// Every half of this host: tuple and half.
    pub(super) fn locals(&self) -> impl Iterator<Item = (&Tuple, &LocalHalf)> {
        self.local.iter()
    }

    /// For `lanes status`: this host's halves, and per host the peer halves none of ours
    /// matches.
    pub(super) fn status(&self, now: Instant) -> (Vec<HalfStatus>, Vec<(String, u64)>) {
        let mut halves: Vec<HalfStatus> = self
            .local
            .iter()
            .map(|(t, h)| {
                let (state, generation) = match h.state {
                    HalfState::Waiting { last } => ("waiting", last),
                    HalfState::Paired { generation, .. } => ("paired", generation),
                    HalfState::PeerGone { last } => ("peer-gone", last),
                };
                HalfStatus {
                    local: t.0,
                    remote: t.1,
                    cookie: h.cookie,
                    pid: h.pid,
                    uid: h.uid,
                    peer_host: h.peer_host.clone(),
                    state: state.into(),
                    generation,
                    age_ms: now.saturating_duration_since(h.since).as_millis() as u64,
                }
            })
            .collect();
        halves.sort_by_key(|h| (h.local, h.remote));
        let unmatched = self
            .remote
            .iter()
            .map(|(host, m)| (host.clone(), m.keys().filter(|t| !self.local.contains_key(*t)).count() as u64))
            .filter(|(_, n)| *n > 0)
            .collect();
        (halves, unmatched)
    }

    fn wire(tuple: &Tuple, h: &LocalHalf) -> WireHalf {
        let (generation, peer_cookie) = match h.state {
            HalfState::Paired { generation, peer_cookie } => (generation, peer_cookie),
            _ => (0, 0),
        };
        WireHalf {
            local: tuple.0,
            remote: tuple.1,
            cookie: h.cookie,
            uid: h.uid,
            generation,
            peer_cookie,
            handles: h.handles,
        }
    }

    fn record(tuple: Tuple, h: &LocalHalf) -> Out {
        let peer_handles = if matches!(h.state, HalfState::Paired { .. }) { h.peer_handles } else { None };
        Out::Record { tuple, state: h.state, peer_host: h.peer_host.clone(), peer_handles }
    }

    /// Whether `handles` (a half of host `from`) are objects of a node lanes.toml places on
    /// `from`; counts the refusal if not. A host announces only its own objects, so a
    /// forged half cannot point a peer at a third host's memory.
    fn check_handles(&mut self, book: &AddressBook, from: &str, handles: Option<StreamHandles>) -> bool {
        match handles {
            Some(h) if !book.node_is_of(from, h.node) => {
                self.refuse(refusal::HANDLES_NOT_SENDERS);
                false
            }
            _ => true,
        }
    }

    /// A half of this host, registered by its process or taken over from its record by a
    /// restarted daemon (then `half.state` is what the record says), vouched for by the
    /// caller. A half already registered with this cookie and these stream objects changes
    /// nothing; with new objects it is *renewed* ([`Self::renew`]); one with another cookie
    /// (the tuple's earlier socket is gone) is withdrawn first.
    pub(super) fn register(&mut self, tuple: Tuple, half: LocalHalf, vouch: &mut dyn Vouch) -> Vec<Out> {
        let mut out = Vec::new();
        match self.local.get(&tuple) {
            Some(h) if h.cookie == half.cookie && h.handles == half.handles => return out,
            Some(h) if h.cookie == half.cookie => return self.renew(tuple, half, vouch),
            Some(_) => out.extend(self.withdraw(&tuple)),
            None => {}
        }
        if self.local.len() >= MAX_LOCAL_HALVES {
            out.push(Out::Log(format!(
                "{} -> {}: not registered, {MAX_LOCAL_HALVES} halves already",
                tuple.0, tuple.1
            )));
            return out;
        }
        let host = half.peer_host.clone();
        out.push(Self::record(tuple, &half));
        out.push(Out::Send { host, msg: PeerMessage::SocketHalf { half: Self::wire(&tuple, &half) } });
        self.local.insert(tuple, half);
        out.extend(self.reconcile(&tuple, false, vouch));
        out
    }

    /// Our half `tuple`'s process exported new stream objects for it (its stream failed
    /// over, and a new one is to replace it: fall-forward). The pairing is made again with
    /// them, at a new generation: the half waits, its peer's host hears of the new objects,
    /// and the leader pairs the two halves again (as after a Lost host came back), naming
    /// each side's objects as they are now. A half whose peer is gone only keeps them.
    fn renew(&mut self, tuple: Tuple, half: LocalHalf, vouch: &mut dyn Vouch) -> Vec<Out> {
        let h = self.local.get_mut(&tuple).expect("the caller found it");
        h.handles = half.handles;
        h.pid = half.pid;
        if matches!(h.state, HalfState::PeerGone { .. }) {
            return Vec::new();
        }
        h.state = HalfState::Waiting { last: h.state.last() };
        h.peer_handles = None;
        let (host, wire) = (h.peer_host.clone(), Self::wire(&tuple, h));
        let mut out = vec![Self::record(tuple, h), Out::Send { host, msg: PeerMessage::SocketHalf { half: wire } }];
        out.extend(self.reconcile(&tuple, false, vouch));
        out
    }

    /// This host's half `tuple` is gone (withdrawn by its process, or found dead): forget
    /// it and tell its peer's host. Nothing if it was not registered.
    pub(super) fn withdraw(&mut self, tuple: &Tuple) -> Vec<Out> {
        let Some(h) = self.local.remove(tuple) else { return Vec::new() };
        let msg = PeerMessage::SocketWithdraw { local: tuple.0, remote: tuple.1, cookie: h.cookie };
        vec![Out::Send { host: h.peer_host, msg }]
    }

    /// Whether a peer's half names an address of `from` on its side and one of ours on this
    /// side; counts the refusal if not.
    fn check_addresses(&mut self, book: &AddressBook, from: &str, local: SocketAddr, remote: SocketAddr) -> bool {
        if !book.is_of(from, local.ip()) {
            self.refuse(refusal::ADDRESS_NOT_SENDERS);
            return false;
        }
        if !book.is_mine(remote.ip()) {
            self.refuse(refusal::ADDRESS_NOT_OURS);
            return false;
        }
        true
    }

    /// Host `from` told of one of its halves.
    pub(super) fn on_half(
        &mut self,
        book: &AddressBook,
        from: &str,
        half: WireHalf,
        vouch: &mut dyn Vouch,
    ) -> Vec<Out> {
        if !self.check_addresses(book, from, half.local, half.remote) {
            return vec![Out::Log(format!(
                "host {from} told of a socket half {} -> {}: not its address, or not this host's: refused",
                half.local, half.remote
            ))];
        }
        if !self.check_handles(book, from, half.handles) {
            return vec![Out::Log(format!(
                "host {from} told of a socket half {} -> {} with stream objects on node {}, not one of its \
                 nodes: refused",
                half.local,
                half.remote,
                half.handles.map_or(0, |h| h.node)
            ))];
        }
        let tuple = mirrored(half.local, half.remote);
        if self.local.get(&tuple).is_some_and(|h| h.peer_host != from) {
            self.refuse(refusal::WRONG_PEER_HOST);
            return Vec::new();
        }
        let theirs = self.remote.entry(from.to_string()).or_default();
        if theirs.len() >= MAX_REMOTE_HALVES && !theirs.contains_key(&tuple) {
            self.refuse(refusal::TOO_MANY);
            return Vec::new();
        }
        let r = RemoteHalf {
            cookie: half.cookie,
            uid: half.uid,
            generation: half.generation,
            peer_cookie: half.peer_cookie,
            handles: half.handles,
        };
        theirs.insert(tuple, r);
        self.reconcile(&tuple, false, vouch)
    }

    /// A chunk of host `from`'s `SocketSync`; the last one (`more` false) replaces what was
    /// known of its halves and reconciles ours with it.
    pub(super) fn on_sync(
        &mut self,
        book: &AddressBook,
        from: &str,
        halves: Vec<WireHalf>,
        more: bool,
        vouch: &mut dyn Vouch,
    ) -> Vec<Out> {
        let mut out = Vec::new();
        for half in halves {
            if !self.check_addresses(book, from, half.local, half.remote) {
                out.push(Out::Log(format!(
                    "host {from} listed a socket half {} -> {}: not its address, or not this host's: refused",
                    half.local, half.remote
                )));
                continue;
            }
            if !self.check_handles(book, from, half.handles) {
                out.push(Out::Log(format!(
                    "host {from} listed a socket half {} -> {} with stream objects not on one of its nodes: refused",
                    half.local, half.remote
                )));
                continue;
            }
            let chunked = self.syncing.entry(from.to_string()).or_default();
            if chunked.len() >= MAX_REMOTE_HALVES {
                self.refuse(refusal::TOO_MANY);
                continue;
            }
            let r = RemoteHalf {
                cookie: half.cookie,
                uid: half.uid,
                generation: half.generation,
                peer_cookie: half.peer_cookie,
                handles: half.handles,
            };
            chunked.insert(mirrored(half.local, half.remote), r);
        }
        if more {
            return out;
        }
        let list = self.syncing.remove(from).unwrap_or_default();
        self.remote.insert(from.to_string(), list);
        let ours: Vec<Tuple> = self.local.iter().filter(|(_, h)| h.peer_host == from).map(|(t, _)| *t).collect();
        for t in ours {
            out.extend(self.reconcile(&t, true, vouch));
        }
        out
    }

    /// Host `from` withdrew its half `local` -> `remote` (its view).
    pub(super) fn on_withdraw(
        &mut self,
        book: &AddressBook,
        from: &str,
        local: SocketAddr,
        remote: SocketAddr,
        cookie: u64,
    ) -> Vec<Out> {
        if !self.check_addresses(book, from, local, remote) {
            return Vec::new();
        }
        let tuple = mirrored(local, remote);
        if let Some(theirs) = self.remote.get_mut(from) {
            if theirs.get(&tuple).is_some_and(|r| r.cookie == cookie) {
                theirs.remove(&tuple);
            }
        }
        self.reconcile_gone(&tuple, from, cookie)
    }

    /// Host `from` (the pair's leader) paired its half `local`/`cookie` (with stream objects
    /// `handles`) with ours `remote`/`peer_cookie` (whose objects it names `peer_handles`)
    /// at `generation`.
    #[allow(clippy::too_many_arguments)] // the message's fields, as sent
    pub(super) fn on_paired(
        &mut self,
        book: &AddressBook,
        from: &str,
        (local, cookie, handles): (SocketAddr, u64, Option<StreamHandles>),
        (remote, peer_cookie, peer_handles): (SocketAddr, u64, Option<StreamHandles>),
        generation: u64,
        vouch: &mut dyn Vouch,
    ) -> Vec<Out> {
        if !self.check_addresses(book, from, local, remote) {
            return vec![Out::Log(format!(
                "host {from} paired a socket half {local} -> {remote}: not its address, or not this host's: refused"
            ))];
        }
        if self.leads(from) {
            self.refuse(refusal::NOT_LEADER);
            return vec![Out::Log(format!(
                "host {from} decided a pairing of {local} -> {remote}, but this host leads its pairs with {from}: refused"
            ))];
        }
        let tuple = mirrored(local, remote);
        let Some(h) = self.local.get(&tuple).cloned() else {
            // Withdrawn meanwhile: our withdrawal is on its way and leaves the leader's half
            // with its peer gone. (A forged pairing of a half never ours changes nothing
            // either.)
            self.stale += 1;
            return Vec::new();
        };
        if h.cookie != peer_cookie || h.peer_host != from {
            self.refuse(refusal::COOKIE_MISMATCH);
            return vec![Out::Log(format!(
                "host {from} paired {local} -> {remote} naming cookie {peer_cookie:#x}; this host's socket has \
                 {:#x}: refused",
                h.cookie
            ))];
        }
        if !self.check_handles(book, from, handles) {
            return vec![Out::Log(format!(
                "host {from} paired {local} -> {remote} with stream objects not on one of its nodes: refused"
            ))];
        }
        if peer_handles != h.handles {
            self.refuse(refusal::HANDLES_MISMATCH);
            return vec![Out::Log(format!(
                "host {from} paired {local} -> {remote} naming stream objects {peer_handles:?}; this host's half \
                 exported {:?}: refused",
                h.handles
            ))];
        }
        let known = self.remote.get(from).and_then(|m| m.get(&tuple)).copied();
        if known.is_some_and(|r| r.uid != h.uid) {
            self.refuse(refusal::USERS_DIFFER);
            return Vec::new();
        }
        if h.state == (HalfState::Paired { generation, peer_cookie: cookie }) && h.peer_handles == handles {
            return Vec::new();
        }
        if !vouch.still_holds(&tuple, &h) {
            return self.withdraw(&tuple);
        }
        let theirs = self.remote.entry(from.to_string()).or_default();
        let uid = known.map_or(h.uid, |r| r.uid);
        theirs.insert(tuple, RemoteHalf { cookie, uid, generation, peer_cookie: h.cookie, handles });
        let half = self.local.get_mut(&tuple).expect("checked above");
        half.state = HalfState::Paired { generation, peer_cookie: cookie };
        half.peer_handles = handles;
        vec![Self::record(tuple, half)]
    }

    /// The link to `host` is up (a new connection): send it every half of ours whose peer is
    /// there; what it knew of ours is replaced by this list.
    pub(super) fn on_connected(&mut self, host: &str) -> Vec<Out> {
        self.syncing.remove(host);
        let mut ours: Vec<WireHalf> =
            self.local.iter().filter(|(_, h)| h.peer_host == host).map(|(t, h)| Self::wire(t, h)).collect();
        ours.sort_by_key(|h| (h.local, h.remote));
        let mut out = Vec::new();
        let mut chunks = ours.chunks(SYNC_CHUNK).peekable();
        if chunks.peek().is_none() {
            return vec![Out::Send {
                host: host.to_string(),
                msg: PeerMessage::SocketSync { halves: vec![], more: false },
            }];
        }
        while let Some(c) = chunks.next() {
            let more = chunks.peek().is_some();
            out.push(Out::Send { host: host.to_string(), msg: PeerMessage::SocketSync { halves: c.to_vec(), more } });
        }
        out
    }

    /// Host `host` is Lost: nothing it told of holds. Our pairs with it wait again.
    pub(super) fn on_lost(&mut self, host: &str) -> Vec<Out> {
        self.remote.remove(host);
        self.syncing.remove(host);
        let mut out = Vec::new();
        for (t, h) in self.local.iter_mut().filter(|(_, h)| h.peer_host == host) {
            if let HalfState::Paired { generation, .. } = h.state {
                h.state = HalfState::Waiting { last: generation };
                h.peer_handles = None;
                out.push(Self::record(*t, h));
            }
        }
        out
    }

    /// Our half `tuple`'s peer half (cookie `cookie`, on `from`) was withdrawn.
    fn reconcile_gone(&mut self, tuple: &Tuple, from: &str, cookie: u64) -> Vec<Out> {
        let Some(h) = self.local.get_mut(tuple) else { return Vec::new() };
        if h.peer_host != from {
            return Vec::new();
        }
        match h.state {
            HalfState::Paired { generation, peer_cookie } if peer_cookie == cookie => {
                h.state = HalfState::PeerGone { last: generation };
                h.peer_handles = None;
                vec![Self::record(*tuple, h)]
            }
            HalfState::Waiting { last } => {
                h.state = HalfState::PeerGone { last };
                vec![Self::record(*tuple, h)]
            }
            _ => Vec::new(),
        }
    }

    /// Brings our half `tuple` in line with what its peer's host told of the other half;
    /// `listed`: that host just sent its whole list, so a half it left out is gone (before
    /// that, a half not heard of may simply not have been told yet). A half whose peer is
    /// gone stays so: a later socket with the same tuple is another connection.
    fn reconcile(&mut self, tuple: &Tuple, listed: bool, vouch: &mut dyn Vouch) -> Vec<Out> {
        let Some(h) = self.local.get(tuple).cloned() else { return Vec::new() };
        if matches!(h.state, HalfState::PeerGone { .. }) {
            return Vec::new();
        }
        let host = h.peer_host.clone();
        let r = self.remote.get(&host).and_then(|m| m.get(tuple)).copied();
        let Some(r) = r else {
            // Listed without this one: gone, if it had been paired (a half never paired
            // may still be registered there later).
            let last = h.state.last();
            if listed && last > 0 {
                let h = self.local.get_mut(tuple).expect("present");
                h.state = HalfState::PeerGone { last };
                h.peer_handles = None;
                return vec![Self::record(*tuple, h)];
            }
            return Vec::new();
        };
        if r.uid != h.uid {
            self.refuse(refusal::USERS_DIFFER);
            return vec![Out::Log(format!(
                "{} -> {}: the peer's half on host {host} is another user's (uid {} and {}): never paired",
                tuple.0, tuple.1, r.uid, h.uid
            ))];
        }
        let agreed = h.state == HalfState::Paired { generation: r.generation, peer_cookie: r.cookie }
            && r.peer_cookie == h.cookie
            && h.peer_handles == r.handles;
        if agreed {
            return Vec::new();
        }
        if !self.leads(&host) {
            // The leader decides; while it has not, a pairing the other side no longer
            // holds is no pairing.
            if let HalfState::Paired { generation, peer_cookie } = h.state {
                if r.cookie != peer_cookie || (r.generation != 0 && r.generation != generation) {
                    let h = self.local.get_mut(tuple).expect("present");
                    h.state = HalfState::Waiting { last: generation };
                    h.peer_handles = None;
                    return vec![Self::record(*tuple, h)];
                }
            }
            return Vec::new();
        }
        if !vouch.still_holds(tuple, &h) {
            return self.withdraw(tuple);
        }
        let generation = h.state.last().max(r.generation) + 1;
        let half = self.local.get_mut(tuple).expect("present");
        half.state = HalfState::Paired { generation, peer_cookie: r.cookie };
        half.peer_handles = r.handles;
        let msg = PeerMessage::SocketPaired {
            local: tuple.0,
            remote: tuple.1,
            cookie: half.cookie,
            peer_cookie: r.cookie,
            generation,
            handles: half.handles,
            peer_handles: r.handles,
        };
        vec![Self::record(*tuple, half), Out::Send { host, msg }]
    }
}

/// Two daemons' state machines wired to each other on a fake clock: every message one
/// sends is delivered to the other (or dropped while their link is down), and the records
/// are what `Out::Record` last wrote.
#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cluster::config::{ClusterConfig, ClusterSection};
    use crate::config::NodeEntry;
    use std::collections::HashSet;
    use std::net::IpAddr;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// The kernel of one host: the sockets that exist, by tuple and cookie.
    #[derive(Default)]
    struct Kernel(HashSet<(Tuple, u64)>);

    impl Vouch for Kernel {
        fn still_holds(&mut self, tuple: &Tuple, half: &LocalHalf) -> bool {
            self.0.contains(&(*tuple, half.cookie))
        }
    }

    struct Host {
        name: &'static str,
        book: AddressBook,
        pairing: Pairing,
        kernel: Kernel,
        records: HashMap<Tuple, HalfState>,
        /// The peer's stream objects each record was given with its state.
        record_handles: HashMap<Tuple, Option<StreamHandles>>,
        logs: Vec<String>,
    }

    /// Hosts a (10.77.0.1) and b (10.77.0.2), each with its book, its kernel and a link.
    struct World {
        hosts: Vec<Host>,
        link_up: bool,
        now: Instant,
    }

    /// Hosts a, b, c (nodes 8, 12, 16) at 10.77.0.1-3 in lanes.toml.
    pub(in crate::cluster::daemon) fn cluster() -> ClusterConfig {
        let node = |id: u32, host: &str, addr: &str| NodeEntry {
            id,
            host: host.into(),
            address: Some(addr.into()),
            public_key: None,
        };
        let nodes = [node(8, "a", "10.77.0.1"), node(12, "b", "10.77.0.2"), node(16, "c", "10.77.0.3")];
        ClusterConfig::build(&ClusterSection::default(), &nodes).unwrap()
    }

    impl World {
        fn new() -> World {
            let c = cluster();
            let host = |name: &'static str, own: &str| Host {
                name,
                book: AddressBook::new(&c, name, &[own.parse::<IpAddr>().unwrap()]),
                pairing: Pairing::new(name),
                kernel: Kernel::default(),
                records: HashMap::new(),
                record_handles: HashMap::new(),
                logs: Vec::new(),
            };
            World { hosts: vec![host("a", "10.77.0.1"), host("b", "10.77.0.2")], link_up: true, now: Instant::now() }
        }

        fn index(name: &str) -> usize {
            if name == "a" {
                0
            } else {
                1
            }
        }

        /// Carries out `outs` of host `k`, delivering messages until none is left.
        fn run(&mut self, k: usize, outs: Vec<Out>) {
            let mut queue: Vec<(usize, Out)> = outs.into_iter().map(|o| (k, o)).collect();
            while !queue.is_empty() {
                let (k, o) = queue.remove(0);
                match o {
                    Out::Record { tuple, state, peer_handles, .. } => {
                        self.hosts[k].records.insert(tuple, state);
                        self.hosts[k].record_handles.insert(tuple, peer_handles);
                    }
                    Out::Log(l) => self.hosts[k].logs.push(l),
                    Out::Send { host, msg } => {
                        if !self.link_up {
                            continue;
                        }
                        let to = World::index(&host);
                        let from = self.hosts[k].name;
                        let more = self.deliver(to, from, msg);
                        queue.extend(more.into_iter().map(|o| (to, o)));
                    }
                }
            }
        }

        fn deliver(&mut self, to: usize, from: &str, msg: PeerMessage) -> Vec<Out> {
            let h = &mut self.hosts[to];
            match msg {
                PeerMessage::SocketHalf { half } => h.pairing.on_half(&h.book, from, half, &mut h.kernel),
                PeerMessage::SocketSync { halves, more } => {
                    h.pairing.on_sync(&h.book, from, halves, more, &mut h.kernel)
                }
                PeerMessage::SocketWithdraw { local, remote, cookie } => {
                    h.pairing.on_withdraw(&h.book, from, local, remote, cookie)
                }
                PeerMessage::SocketPaired { local, remote, cookie, peer_cookie, generation, handles, peer_handles } => {
                    h.pairing.on_paired(
                        &h.book,
                        from,
                        (local, cookie, handles),
                        (remote, peer_cookie, peer_handles),
                        generation,
                        &mut h.kernel,
                    )
                }
                other => panic!("unexpected {other:?}"),
            }
        }

        /// Host `k`'s process opens socket `tuple` (its view) with `cookie` and registers it.
        fn register(&mut self, k: usize, tuple: Tuple, cookie: u64, uid: u32) {
            self.register_with(k, tuple, cookie, uid, handles_of(k, cookie));
        }

        /// [`Self::register`] naming stream objects `handles` (new ones: a renewal).
        fn register_with(&mut self, k: usize, tuple: Tuple, cookie: u64, uid: u32, handles: StreamHandles) {
            let peer_host = if k == 0 { "b" } else { "a" };
            self.hosts[k].kernel.0.insert((tuple, cookie));
            let half = LocalHalf {
                cookie,
                pid: 100 + k as u32,
                uid,
                peer_host: peer_host.into(),
                since: self.now,
                state: HalfState::Waiting { last: 0 },
                handles: Some(handles),
                peer_handles: None,
            };
            let h = &mut self.hosts[k];
            let outs = h.pairing.register(tuple, half, &mut h.kernel);
            self.run(k, outs);
        }

        fn withdraw(&mut self, k: usize, tuple: Tuple) {
            let outs = self.hosts[k].pairing.withdraw(&tuple);
            self.run(k, outs);
        }

        fn connect(&mut self) {
            self.link_up = true;
            for k in 0..2 {
                let other = if k == 0 { "b" } else { "a" };
                let outs = self.hosts[k].pairing.on_connected(other);
                self.run(k, outs);
            }
        }

        fn state(&self, k: usize, tuple: Tuple) -> Option<HalfState> {
            self.hosts[k].pairing.local(&tuple).map(|h| h.state)
        }
    }

    /// The connection b:40000 -> a:5201, as a and as b see it.
    fn at_a() -> Tuple {
        (sa("10.77.0.1:5201"), sa("10.77.0.2:40000"))
    }
    fn at_b() -> Tuple {
        (sa("10.77.0.2:40000"), sa("10.77.0.1:5201"))
    }

    /// The stream objects host `k`'s process exports for its socket `cookie` (on the host's
    /// node: a's 8, b's 12).
    fn handles_of(k: usize, cookie: u64) -> StreamHandles {
        StreamHandles { node: if k == 0 { 8 } else { 12 }, segment: cookie as u32, request_bell: 1, answer_bell: 2 }
    }

    fn paired(generation: u64, peer_cookie: u64) -> HalfState {
        HalfState::Paired { generation, peer_cookie }
    }

    #[test]
    fn mirrored_halves_pair_with_one_generation_whichever_registers_first() {
        for a_first in [true, false] {
            let mut w = World::new();
            if a_first {
                w.register(0, at_a(), 0xa, 1000);
                assert_eq!(w.state(0, at_a()), Some(HalfState::Waiting { last: 0 }));
                w.register(1, at_b(), 0xb, 1000);
            } else {
                w.register(1, at_b(), 0xb, 1000);
                assert_eq!(w.state(1, at_b()), Some(HalfState::Waiting { last: 0 }));
                w.register(0, at_a(), 0xa, 1000);
            }
            assert_eq!(w.state(0, at_a()), Some(paired(1, 0xb)), "a_first {a_first}");
            assert_eq!(w.state(1, at_b()), Some(paired(1, 0xa)));
            assert_eq!(w.hosts[0].records[&at_a()], paired(1, 0xb), "announced to a's library");
            assert_eq!(w.hosts[1].records[&at_b()], paired(1, 0xa), "and to b's");
            assert_eq!(w.hosts[0].record_handles[&at_a()], Some(handles_of(1, 0xb)), "with b's stream objects");
            assert_eq!(w.hosts[1].record_handles[&at_b()], Some(handles_of(0, 0xa)), "and a's");
            assert!(w.hosts.iter().all(|h| h.pairing.refusals().is_empty()));
            // Registering again (the same cookie) changes nothing.
            w.register(1, at_b(), 0xb, 1000);
            assert_eq!(w.state(0, at_a()), Some(paired(1, 0xb)));
        }
    }

    #[test]
    fn new_stream_objects_pair_again_at_a_new_generation_from_either_side() {
        let renewed = |k: usize, cookie: u64| StreamHandles { segment: cookie as u32 + 0x100, ..handles_of(k, cookie) };
        for a_first in [true, false] {
            let mut w = World::new();
            w.register(0, at_a(), 0xa, 1000);
            w.register(1, at_b(), 0xb, 1000);
            let (first, second) =
                if a_first { ((0, at_a(), 0xa), (1, at_b(), 0xb)) } else { ((1, at_b(), 0xb), (0, at_a(), 0xa)) };
            // One side renews (its stream failed over): paired again, naming its new objects
            // and the other side's old ones.
            w.register_with(first.0, first.1, first.2, 1000, renewed(first.0, first.2));
            assert_eq!(w.state(0, at_a()), Some(paired(2, 0xb)), "a_first {a_first}");
            assert_eq!(w.state(1, at_b()), Some(paired(2, 0xa)));
            let other = 1 - first.0;
            assert_eq!(w.hosts[other].record_handles[&second.1], Some(renewed(first.0, first.2)));
            assert_eq!(w.hosts[first.0].record_handles[&first.1], Some(handles_of(other, second.2)));
            // Then the other: a third generation, both sides' new objects.
            w.register_with(second.0, second.1, second.2, 1000, renewed(second.0, second.2));
            assert_eq!(w.state(0, at_a()), Some(paired(3, 0xb)));
            assert_eq!(w.state(1, at_b()), Some(paired(3, 0xa)));
            assert_eq!(w.hosts[0].record_handles[&at_a()], Some(renewed(1, 0xb)));
            assert_eq!(w.hosts[1].record_handles[&at_b()], Some(renewed(0, 0xa)));
            assert!(w.hosts.iter().all(|h| h.pairing.refusals().is_empty()), "a_first {a_first}");
        }
        // Renewed while the link is down: the half waits, and pairs at the next link.
        let mut w = World::new();
        w.register(0, at_a(), 0xa, 1000);
        w.register(1, at_b(), 0xb, 1000);
        w.link_up = false;
        w.register_with(1, at_b(), 0xb, 1000, renewed(1, 0xb));
        assert_eq!(w.hosts[1].records[&at_b()], HalfState::Waiting { last: 1 });
        w.connect();
        assert_eq!(w.state(1, at_b()), Some(paired(2, 0xa)));
        assert_eq!(w.hosts[0].record_handles[&at_a()], Some(renewed(1, 0xb)));
        // A half whose peer is gone keeps its new objects and stays so.
        w.withdraw(0, at_a());
        w.register_with(1, at_b(), 0xb, 1000, handles_of(1, 0xb));
        assert_eq!(w.state(1, at_b()), Some(HalfState::PeerGone { last: 2 }));
    }

    #[test]
    fn a_half_without_a_peer_waits_and_halves_of_other_users_never_pair() {
        let mut w = World::new();
        w.register(0, at_a(), 0xa, 1000);
        // b's process has no library: b registers nothing.
        assert_eq!(w.state(0, at_a()), Some(HalfState::Waiting { last: 0 }));
        // Another connection, whose halves belong to different users.
        let (ta, tb) = ((sa("10.77.0.1:5201"), sa("10.77.0.2:40001")), (sa("10.77.0.2:40001"), sa("10.77.0.1:5201")));
        w.register(0, ta, 0xa1, 1000);
        w.register(1, tb, 0xb1, 1001);
        assert_eq!(w.state(0, ta), Some(HalfState::Waiting { last: 0 }));
        assert_eq!(w.state(1, tb), Some(HalfState::Waiting { last: 0 }));
        assert_eq!(w.hosts[0].pairing.refusals(), vec![(refusal::USERS_DIFFER.to_string(), 1)]);
    }

    #[test]
    fn a_withdrawn_half_leaves_its_peer_gone_and_a_killed_socket_is_never_paired() {
        let mut w = World::new();
        w.register(0, at_a(), 0xa, 1000);
        w.register(1, at_b(), 0xb, 1000);
        w.withdraw(1, at_b());
        assert_eq!(w.state(1, at_b()), None);
        assert_eq!(w.state(0, at_a()), Some(HalfState::PeerGone { last: 1 }));
        assert_eq!(w.hosts[0].records[&at_a()], HalfState::PeerGone { last: 1 });
        // The leader's own socket died before it could pair: it withdraws instead.
        let mut w = World::new();
        w.register(0, at_a(), 0xa, 1000);
        w.hosts[0].kernel.0.clear();
        w.register(1, at_b(), 0xb, 1000);
        assert_eq!(w.state(0, at_a()), None, "a's half withdrawn, not paired");
        assert_eq!(w.state(1, at_b()), Some(HalfState::PeerGone { last: 0 }));
    }

    #[test]
    fn halves_registered_while_the_link_is_down_pair_when_it_is_back() {
        let mut w = World::new();
        w.link_up = false;
        w.register(0, at_a(), 0xa, 1000);
        w.register(1, at_b(), 0xb, 1000);
        assert_eq!(w.state(0, at_a()), Some(HalfState::Waiting { last: 0 }));
        w.connect();
        assert_eq!(w.state(0, at_a()), Some(paired(1, 0xb)));
        assert_eq!(w.state(1, at_b()), Some(paired(1, 0xa)));
        // A half withdrawn while the link is down is gone on the other side after the sync.
        w.link_up = false;
        w.withdraw(1, at_b());
        assert_eq!(w.state(0, at_a()), Some(paired(1, 0xb)), "a has not heard yet");
        w.connect();
        assert_eq!(w.state(0, at_a()), Some(HalfState::PeerGone { last: 1 }));
    }

    #[test]
    fn a_lost_host_unpairs_and_its_return_pairs_again_with_a_new_generation() {
        let mut w = World::new();
        w.register(0, at_a(), 0xa, 1000);
        w.register(1, at_b(), 0xb, 1000);
        w.link_up = false;
        let outs = w.hosts[0].pairing.on_lost("b");
        w.run(0, outs);
        let outs = w.hosts[1].pairing.on_lost("a");
        w.run(1, outs);
        assert_eq!(w.state(0, at_a()), Some(HalfState::Waiting { last: 1 }));
        assert_eq!(w.hosts[0].records[&at_a()], HalfState::Waiting { last: 1 });
        assert_eq!(w.hosts[0].record_handles[&at_a()], None, "no peer objects while unpaired");
        w.connect();
        assert_eq!(w.state(0, at_a()), Some(paired(2, 0xb)));
        assert_eq!(w.state(1, at_b()), Some(paired(2, 0xa)));
        assert_eq!(w.hosts[1].record_handles[&at_b()], Some(handles_of(0, 0xa)), "announced again");
        // Only a lost on one side: the follower still thinks it is paired at 2, the leader
        // waits; on the next link they agree on 3.
        w.link_up = false;
        let outs = w.hosts[0].pairing.on_lost("b");
        w.run(0, outs);
        w.connect();
        assert_eq!(w.state(0, at_a()), Some(paired(3, 0xb)));
        assert_eq!(w.state(1, at_b()), Some(paired(3, 0xa)));
    }

    /// A daemon restart: the new daemon takes its halves over from the records, with the
    /// pairing they hold; the next link confirms it, the generation unchanged.
    #[test]
    fn a_restarted_daemon_keeps_the_pairing_its_records_hold() {
        let mut w = World::new();
        w.register(0, at_a(), 0xa, 1000);
        w.register(1, at_b(), 0xb, 1000);
        for k in [1, 0] {
            // Each side's daemon restarts in turn (b, the follower, then a, the leader).
            let me = w.hosts[k].name;
            let saved: Vec<(Tuple, LocalHalf)> = w.hosts[k].pairing.locals().map(|(t, h)| (*t, h.clone())).collect();
            w.hosts[k].pairing = Pairing::new(me);
            w.link_up = false;
            for (t, h) in saved {
                let outs = {
                    let host = &mut w.hosts[k];
                    host.pairing.register(t, h, &mut host.kernel)
                };
                w.run(k, outs);
            }
            w.connect();
            assert_eq!(w.state(0, at_a()), Some(paired(1, 0xb)), "after {me}'s restart");
            assert_eq!(w.state(1, at_b()), Some(paired(1, 0xa)));
        }
    }

    #[test]
    fn forged_daemon_messages_are_refused_and_counted() {
        let mut w = World::new();
        w.register(1, at_b(), 0xb, 1000);
        let b = &mut w.hosts[1];
        // a tells of a half whose local address is c's (10.77.0.3), not a's.
        let forged = WireHalf {
            local: sa("10.77.0.3:5201"),
            remote: sa("10.77.0.2:40000"),
            cookie: 1,
            uid: 1000,
            generation: 0,
            peer_cookie: 0,
            handles: None,
        };
        let outs = b.pairing.on_half(&b.book, "a", forged, &mut b.kernel);
        assert!(matches!(&outs[..], [Out::Log(l)] if l.contains("refused")), "{outs:?}");
        // ... one whose other end is not b's.
        let elsewhere = WireHalf {
            local: sa("10.77.0.1:5201"),
            remote: sa("10.77.0.9:40000"),
            cookie: 1,
            uid: 1000,
            generation: 0,
            peer_cookie: 0,
            handles: None,
        };
        b.pairing.on_half(&b.book, "a", elsewhere, &mut b.kernel);
        // c, which does not lead its pairs with b (b < c), decides a pairing.
        let outs = b.pairing.on_paired(
            &b.book,
            "c",
            (sa("10.77.0.3:5201"), 9, None),
            (sa("10.77.0.2:40000"), 0xb, Some(handles_of(1, 0xb))),
            7,
            &mut b.kernel,
        );
        assert!(matches!(&outs[..], [Out::Log(l)] if l.contains("leads")), "{outs:?}");
        // a (the leader) pairs b's half naming a wrong cookie, or a half b does not hold.
        let mine = Some(handles_of(1, 0xb));
        let a_objects = Some(handles_of(0, 0xa));
        b.pairing.on_paired(
            &b.book,
            "a",
            (sa("10.77.0.1:5201"), 0xa, a_objects),
            (sa("10.77.0.2:40000"), 0xbad, mine),
            1,
            &mut b.kernel,
        );
        b.pairing.on_paired(
            &b.book,
            "a",
            (sa("10.77.0.1:5201"), 0xa, a_objects),
            (sa("10.77.0.2:40999"), 0xb, mine),
            1,
            &mut b.kernel,
        );
        assert_eq!(b.pairing.local(&at_b()).unwrap().state, HalfState::Waiting { last: 0 }, "nothing changed");
        let mut want = vec![
            (refusal::ADDRESS_NOT_SENDERS.to_string(), 1),
            (refusal::ADDRESS_NOT_OURS.to_string(), 1),
            (refusal::NOT_LEADER.to_string(), 1),
            (refusal::COOKIE_MISMATCH.to_string(), 1),
        ];
        want.sort();
        assert_eq!(b.pairing.refusals(), want);
        assert_eq!(b.pairing.stale(), 1, "the pairing of a half b does not hold");
    }

    /// Stream objects a peer daemon announces must be on one of its own nodes, and a
    /// pairing must name the objects this host's half exported: a forged half cannot point
    /// a library at a third host's memory, nor a forged pairing swap a half's objects.
    #[test]
    fn forged_stream_objects_are_refused_and_counted() {
        let mut w = World::new();
        w.register(1, at_b(), 0xb, 1000);
        let b = &mut w.hosts[1];
        let half = |node: u32| WireHalf {
            local: sa("10.77.0.1:5201"),
            remote: sa("10.77.0.2:40000"),
            cookie: 0xa,
            uid: 1000,
            generation: 0,
            peer_cookie: 0,
            handles: Some(StreamHandles { node, segment: 1, request_bell: 2, answer_bell: 3 }),
        };
        // a tells of its half with objects on c's node (16), then on b's own (12), then on
        // a node nobody has (99): each refused, nothing paired.
        for node in [16, 12, 99] {
            let outs = b.pairing.on_half(&b.book, "a", half(node), &mut b.kernel);
            assert!(matches!(&outs[..], [Out::Log(l)] if l.contains("not one of its nodes")), "{outs:?}");
        }
        let outs = b.pairing.on_sync(&b.book, "a", vec![half(16)], false, &mut b.kernel);
        assert!(matches!(&outs[..], [Out::Log(l)] if l.contains("refused")), "{outs:?}");
        // The leader pairs b's half naming other objects than b's process exported, or
        // with objects of its own on another host's node.
        let theirs = Some(handles_of(0, 0xa));
        let wrong = Some(StreamHandles { node: 12, segment: 0xb, request_bell: 9, answer_bell: 2 });
        let outs = b.pairing.on_paired(
            &b.book,
            "a",
            (sa("10.77.0.1:5201"), 0xa, theirs),
            (sa("10.77.0.2:40000"), 0xb, wrong),
            1,
            &mut b.kernel,
        );
        assert!(matches!(&outs[..], [Out::Log(l)] if l.contains("stream objects")), "{outs:?}");
        let c_node = Some(StreamHandles { node: 16, segment: 1, request_bell: 1, answer_bell: 1 });
        b.pairing.on_paired(
            &b.book,
            "a",
            (sa("10.77.0.1:5201"), 0xa, c_node),
            (sa("10.77.0.2:40000"), 0xb, Some(handles_of(1, 0xb))),
            1,
            &mut b.kernel,
        );
        assert_eq!(b.pairing.local(&at_b()).unwrap().state, HalfState::Waiting { last: 0 }, "nothing changed");
        let mut want = vec![(refusal::HANDLES_NOT_SENDERS.to_string(), 5), (refusal::HANDLES_MISMATCH.to_string(), 1)];
        want.sort();
        assert_eq!(b.pairing.refusals(), want);
        // The real half pairs, with its real objects.
        w.register(0, at_a(), 0xa, 1000);
        assert_eq!(w.state(1, at_b()), Some(paired(1, 0xa)));
        assert_eq!(w.hosts[1].record_handles[&at_b()], theirs);
    }

    #[test]
    fn a_new_socket_on_a_tuple_replaces_the_old_half_and_status_lists_them() {
        let mut w = World::new();
        w.register(0, at_a(), 0xa, 1000);
        w.register(1, at_b(), 0xb, 1000);
        // b's socket closed without a withdrawal reaching a, and a new one got the same
        // tuple (another cookie): its registration withdraws the old half first.
        w.hosts[1].kernel.0.clear();
        w.register(1, at_b(), 0xb2, 1000);
        assert_eq!(w.state(1, at_b()), Some(HalfState::Waiting { last: 0 }));
        assert_eq!(w.state(0, at_a()), Some(HalfState::PeerGone { last: 1 }), "never paired with the new socket");
        w.now += std::time::Duration::from_millis(1500);
        let (halves, unmatched) = w.hosts[1].pairing.status(w.now);
        assert_eq!(halves.len(), 1);
        let h = &halves[0];
        assert_eq!((h.local, h.remote, h.state.as_str(), h.peer_host.as_str()), (at_b().0, at_b().1, "waiting", "a"));
        assert_eq!((h.cookie, h.pid, h.uid, h.age_ms), (0xb2, 101, 1000, 1500));
        assert!(unmatched.is_empty(), "{unmatched:?}");
        // c's half, which no half of a's matches, is listed as unmatched.
        let a = &mut w.hosts[0];
        let c_half = WireHalf {
            local: sa("10.77.0.3:40000"),
            remote: sa("10.77.0.1:5201"),
            cookie: 5,
            uid: 1000,
            generation: 0,
            peer_cookie: 0,
            handles: None,
        };
        a.pairing.on_half(&a.book, "c", c_half, &mut a.kernel);
        assert_eq!(a.pairing.status(w.now).1, vec![("c".to_string(), 1)]);
    }
}
