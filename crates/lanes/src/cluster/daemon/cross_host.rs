//! Cross-host sockets in the daemon (docs/design/cross-host-sockets.md, sections 2 and 6):
//! the addresses of the hosts ([`AddressBook`], fed by the hellos), which host an address is
//! on (`HostOf`), the registration of this host's socket halves with every check against
//! the kernel, their records, and carrying out what [`Pairing`] decides. What the halves
//! do is decided in `pairing.rs`, sans-IO; this file is its I/O.
//!
//! **Registration** (`Request::RegisterHalf`, on the process's own connection to
//! daemon.sock): the caller's credentials (`SO_PEERCRED`) must be the process the half
//! names (pid and start time); the kernel (`NETLINK_SOCK_DIAG`) must know a socket with the
//! half's tuple and cookie, owned by the caller's user, that is one of the caller's
//! descriptors (its `/proc/<pid>/fd`); the socket's record must exist with that cookie; the
//! peer's address must be another cluster host's; the stream objects it names (if any) must
//! be live objects of one of this host's nodes, owned by the caller. So a process registers
//! only its own sockets and objects, and a half names a live connection. Each refusal is
//! counted by reason.
//!
//! **Records.** The daemon writes each half's pairing into its record (`lanes::sockets::
//! remote`). A restarted daemon takes the halves over from the records (a record whose
//! socket is still held and whose cookie the kernel confirms), with the pairing they hold,
//! so a daemon restart neither loses nor renumbers a pairing, and a connection opened while
//! no daemon ran pairs once one starts.
//!
//! **Withdrawal.** A process withdraws a half when its last holder closes it; the daemon
//! also looks at its halves every second and withdraws those whose socket is gone or held
//! by no process any more (a killed process, an exit that closed its descriptors).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::addresses::AddressBook;
use super::pairing::{refusal, HalfState, LocalHalf, Out, Pairing, Tuple, Vouch};
use super::{Shared, State};
use crate::cluster::proto::{AddressOwner, HalfRegistration, ObjectKind, Refusal, SocketsStatus, StreamHandles};
use crate::platform::liveness::ProcessIdentity;
use crate::platform::net::{self, PeerCred};
use crate::sockets::endpoint::{sockets_dir, ConnectionKey, Endpoint};
use crate::sockets::remote::{Pairing as RecordPairing, PairingState, FLAG_REMOTE};

/// How often the daemon looks for halves whose socket is gone.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Why a registration was refused (the keys of the counts, beside `pairing::refusal`).
mod refused {
    pub const NO_CREDENTIALS: &str = "registration: caller's credentials unknown";
    pub const OTHER_NETNS: &str = "registration: another network namespace";
    pub const NOT_THE_CALLER: &str = "registration: a half of another process";
    pub const NO_SUCH_SOCKET: &str = "registration: no socket with this tuple and cookie";
    pub const NOT_CALLERS_SOCKET: &str = "registration: a socket the caller does not hold";
    pub const NO_RECORD: &str = "registration: no record of the socket";
    pub const NOT_A_CLUSTER_HOST: &str = "registration: peer not on another cluster host";
    pub const NOT_CALLERS_OBJECTS: &str = "registration: stream objects not the caller's on this host";
}

/// The daemon's cross-host socket state (under the daemon's state lock).
pub(super) struct CrossHost {
    pub(super) book: AddressBook,
    pub(super) pairing: Pairing,
    requests: BTreeMap<String, u64>,
    last_sweep: Instant,
    /// Records of withdrawn halves whose holders had not all exited yet (a zombie child
    /// still counts): removed at a later sweep ([`RecordToRemove`]).
    records_to_remove: Vec<RecordToRemove>,
    /// Bytes withdrawn halves sent and received over the fabric, as their processes told.
    fabric_sent: u64,
    fabric_received: u64,
}

/// The record of a withdrawn half, to be removed once no live process holds it.
struct RecordToRemove {
    key: ConnectionKey,
    /// The socket's cookie: a record of another connection with the same addresses stays.
    cookie: u64,
    /// Sweeps left before it is left to `lanes cleanup`.
    sweeps_left: u32,
}

/// Sweeps a withdrawn half's record waits for its holders to exit (a minute).
const RECORD_SWEEPS: u32 = 60;

impl CrossHost {
    pub(super) fn new(book: AddressBook, me: &str, now: Instant) -> CrossHost {
        CrossHost {
            book,
            pairing: Pairing::new(me),
            requests: BTreeMap::new(),
            last_sweep: now,
            records_to_remove: Vec::new(),
            fabric_sent: 0,
            fabric_received: 0,
        }
    }

    fn count_request(&mut self, kind: &str) {
        *self.requests.entry(kind.to_string()).or_default() += 1;
    }
}

/// The kernel's word on this host's sockets: the socket with the half's tuple has its
/// cookie and a process still holds it (a socket nobody holds has no inode).
struct KernelVouch;

impl Vouch for KernelVouch {
    fn still_holds(&mut self, tuple: &Tuple, half: &LocalHalf) -> bool {
        net::tcp_socket(tuple.0, tuple.1).is_some_and(|s| s.cookie == half.cookie && s.inode != 0)
    }
}

fn record_state(state: HalfState) -> (PairingState, u64, u64) {
    match state {
        HalfState::Waiting { last } => (PairingState::Waiting, last, 0),
        HalfState::Paired { generation, peer_cookie } => (PairingState::Paired, generation, peer_cookie),
        HalfState::PeerGone { last } => (PairingState::PeerGone, last, 0),
    }
}

impl Shared {
    /// This host's addresses for its hello: its interfaces' (those that can name one host).
    pub(super) fn own_addresses(&self) -> Vec<IpAddr> {
        net::host_addresses().unwrap_or_default()
    }

    /// Host `host` said hello claiming `addresses`: believed on an authenticated link only;
    /// refused claims are logged and counted. A host configured on a loopback address runs
    /// on this machine: its interfaces are ours, so its claims mean nothing.
    pub(super) fn claims_at_hello(&self, st: &mut State, host: &str, addresses: &[IpAddr], authenticated: bool) {
        let same_machine = self.cluster.host(host).is_some_and(|h| h.address.ip().is_loopback());
        if !authenticated || same_machine {
            return;
        }
        st.cross.book.set_own(&self.own_addresses());
        for r in st.cross.book.on_hello(host, addresses) {
            st.cross.pairing.refuse(refusal::CLAIM);
            self.log(format_args!("host {host} claims address {}: refused, {}", r.address, r.why));
        }
    }

    /// Carries out what [`Pairing`] decided, under the lock it decided under (so a half's
    /// messages and record writes keep its order).
    pub(super) fn carry_out(&self, st: &mut State, outs: Vec<Out>) {
        for out in outs {
            match out {
                Out::Send { host, msg } => {
                    if let Some(c) = st.links.iter().find(|l| l.entry.name == host).and_then(|l| l.conn.as_ref()) {
                        // A full queue is the link's failure (the ticker notices); the next
                        // link's SocketSync carries the state.
                        c.send(&msg);
                    }
                }
                Out::Record { tuple, state, peer_host, peer_handles } => {
                    let Some(cookie) = st.cross.pairing.local(&tuple).map(|h| h.cookie) else { continue };
                    self.write_record(tuple, cookie, state, &peer_host, peer_handles);
                }
                Out::Log(line) => self.log(format_args!("{line}")),
            }
        }
    }

    /// Writes the pairing of half `tuple` (cookie `cookie`) into its record, if the record
    /// is still that socket's.
    fn write_record(
        &self,
        tuple: Tuple,
        cookie: u64,
        state: HalfState,
        peer_host: &str,
        peer_handles: Option<StreamHandles>,
    ) {
        let key = ConnectionKey::new(self.netns, tuple.0, tuple.1);
        match Endpoint::open(self.paths.root(), &key) {
            Ok(ep) if ep.cookie() == cookie && ep.has_flag(FLAG_REMOTE) => {
                let (state, generation, peer_cookie) = record_state(state);
                let peer_host = peer_host.to_string();
                ep.set_pairing(&RecordPairing { state, peer_host, generation, peer_cookie, peer_handles });
            }
            // Closed meanwhile (the withdrawal follows), or replaced by a later socket's.
            _ => {}
        }
    }

    /// A peer daemon's message about socket halves, handled by `f` under the state lock.
    pub(super) fn on_peer_sockets(&self, f: impl FnOnce(&mut CrossHost, &mut dyn Vouch) -> Vec<Out>) {
        let mut st = self.lock();
        let outs = f(&mut st.cross, &mut KernelVouch);
        self.carry_out(&mut st, outs);
    }

    /// Which host `address` is on.
    pub(super) fn host_of(&self, address: IpAddr) -> AddressOwner {
        let mut st = self.lock();
        st.cross.count_request("host-of");
        st.cross.book.owner(address)
    }

    /// Counts a refused registration and makes its refusal.
    fn refuse_registration(&self, kind: &str, reason: String) -> Refusal {
        self.lock().cross.pairing.refuse(kind);
        Refusal::Failed { reason }
    }

    /// Registers a half of the process `cred` (module documentation); the answer names the
    /// peer's host.
    pub(super) fn register_half(&self, cred: Option<PeerCred>, half: HalfRegistration) -> Result<String, Refusal> {
        self.lock().cross.count_request("register");
        let (local, remote) = (half.local, half.remote);
        let Some(cred) = cred else {
            return Err(
                self.refuse_registration(refused::NO_CREDENTIALS, "the caller's credentials are unknown".into())
            );
        };
        if half.netns != self.netns {
            return Err(self.refuse_registration(
                refused::OTHER_NETNS,
                format!("{local} -> {remote}: the socket is in another network namespace than this daemon"),
            ));
        }
        let caller = ProcessIdentity::of_pid(cred.pid).ok();
        let named = ProcessIdentity::from_bits(half.process);
        if named.map(|p| p.pid()) != Some(cred.pid) || caller.map(|c| c.bits()) != Some(half.process) {
            return Err(self.refuse_registration(
                refused::NOT_THE_CALLER,
                format!(
                    "{local} -> {remote}: a half of process {} registered by pid {}: a process registers only \
                     its own sockets",
                    named.map_or(0, |p| p.pid()),
                    cred.pid
                ),
            ));
        }
        let info = net::tcp_socket(local, remote).filter(|s| s.cookie == half.cookie);
        let Some(info) = info else {
            return Err(self.refuse_registration(
                refused::NO_SUCH_SOCKET,
                format!("{local} -> {remote}: the kernel knows no such socket with cookie {:#x}", half.cookie),
            ));
        };
        let holds =
            info.inode != 0 && info.uid == cred.uid && net::process_holds_socket(cred.pid, info.inode).unwrap_or(false);
        if !holds {
            return Err(self.refuse_registration(
                refused::NOT_CALLERS_SOCKET,
                format!("{local} -> {remote}: the socket is not one of pid {}'s descriptors", cred.pid),
            ));
        }
        if let Some(h) = half.handles {
            if let Err(why) = self.callers_objects(h, cred.pid) {
                return Err(self.refuse_registration(
                    refused::NOT_CALLERS_OBJECTS,
                    format!("{local} -> {remote}: stream objects {h:?}: {why}"),
                ));
            }
        }
        let key = ConnectionKey::new(self.netns, local, remote);
        let record = Endpoint::open(self.paths.root(), &key);
        if !record.as_ref().is_ok_and(|ep| ep.cookie() == half.cookie && ep.has_flag(FLAG_REMOTE)) {
            return Err(self.refuse_registration(
                refused::NO_RECORD,
                format!("{local} -> {remote}: no cross-host record of this socket in the fabric directory"),
            ));
        }
        let mut st = self.lock();
        let AddressOwner::Host { host } = st.cross.book.owner(remote.ip()) else {
            st.cross.pairing.refuse(refused::NOT_A_CLUSTER_HOST);
            return Err(Refusal::Failed {
                reason: format!("{remote} is not an address of another host of the cluster"),
            });
        };
        let local_half = LocalHalf {
            cookie: half.cookie,
            pid: cred.pid,
            uid: cred.uid,
            peer_host: host.clone(),
            since: Instant::now(),
            state: HalfState::Waiting { last: 0 },
            handles: half.handles,
            peer_handles: None,
        };
        let outs = st.cross.pairing.register((local, remote), local_half, &mut KernelVouch);
        self.carry_out(&mut st, outs);
        Ok(host)
    }

    /// Whether `h` are live objects of one of this host's nodes, each owned by process `pid`
    /// (a segment and two interrupts); else why not.
    fn callers_objects(&self, h: StreamHandles, pid: u32) -> Result<(), String> {
        let ours = self.cluster.host(&self.me.name).is_some_and(|me| me.nodes.iter().any(|n| n.get() == h.node));
        if !ours {
            return Err(format!("node {} is not one of host {}'s nodes", h.node, self.me.name));
        }
        let objects = [
            (ObjectKind::Segment, h.segment),
            (ObjectKind::Interrupt, h.request_bell),
            (ObjectKind::Interrupt, h.answer_bell),
        ];
        for (kind, id) in objects {
            match self.open_live(h.node, kind, id) {
                Ok((_, info)) if info.owner_pid == pid => {}
                Ok((_, info)) => {
                    return Err(format!("{kind} {id:#x} belongs to pid {}, not the caller", info.owner_pid))
                }
                Err(refusal) => return Err(format!("{kind} {id:#x}: {refusal}")),
            }
        }
        Ok(())
    }

    /// The process `cred` withdraws its half: only a half of its user. `fabric`: the bytes
    /// it says the connection sent and received over the fabric (added to the totals).
    pub(super) fn withdraw_half(
        &self,
        cred: Option<PeerCred>,
        (local, remote, cookie): (SocketAddr, SocketAddr, u64),
        fabric: (u64, u64),
    ) {
        let mut st = self.lock();
        st.cross.count_request("withdraw");
        let tuple = (local, remote);
        let mine =
            st.cross.pairing.local(&tuple).is_some_and(|h| h.cookie == cookie && Some(h.uid) == cred.map(|c| c.uid));
        if mine {
            st.cross.fabric_sent = st.cross.fabric_sent.saturating_add(fabric.0);
            st.cross.fabric_received = st.cross.fabric_received.saturating_add(fabric.1);
            let outs = st.cross.pairing.withdraw(&tuple);
            self.carry_out(&mut st, outs);
        }
    }

    /// This host's halves and the counts, for `lanes status`.
    pub(super) fn sockets_status(&self) -> SocketsStatus {
        let st = self.lock();
        let (halves, unmatched) = st.cross.pairing.status(Instant::now());
        SocketsStatus {
            halves,
            unmatched,
            refused: st.cross.pairing.refusals(),
            stale: st.cross.pairing.stale(),
            requests: st.cross.requests.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            fabric_sent: st.cross.fabric_sent,
            fabric_received: st.cross.fabric_received,
        }
    }

    /// At start: the halves of cross-host records whose socket is still held (an earlier
    /// daemon's, or made while none ran), with the pairing each record holds.
    pub(super) fn adopt_records(&self) {
        let Ok(entries) = std::fs::read_dir(sockets_dir(self.paths.root())) else { return };
        let mut taken = 0;
        for e in entries.flatten() {
            let Some(key) = e.file_name().to_str().and_then(ConnectionKey::parse) else { continue };
            if key.netns != self.netns {
                continue;
            }
            let Ok(ep) = Endpoint::open(self.paths.root(), &key) else { continue };
            if !ep.has_flag(FLAG_REMOTE) {
                continue;
            }
            let Some(record) = ep.pairing() else { continue };
            if record.state == PairingState::Unregistered && ep.own_handles().is_none() {
                // An accepted socket whose process registers it at its first call that
                // moves bytes, with the stream's objects: taken over now without them, the
                // peer would pair with a half that has none, and stay kernel TCP.
                continue;
            }
            let Some(info) = net::tcp_socket(key.local, key.remote).filter(|s| s.cookie == ep.cookie()) else {
                continue;
            };
            let holder = ep
                .holders()
                .into_iter()
                .find(|h| info.inode != 0 && net::process_holds_socket(h.pid(), info.inode).unwrap_or(false));
            let Some(holder) = holder else { continue };
            let mut st = self.lock();
            let host = match st.cross.book.owner(key.remote.ip()) {
                AddressOwner::Host { host } => host,
                // A claimed address not heard of yet: the host the library named, if it is one.
                AddressOwner::Nobody
                    if record.peer_host != self.me.name && self.cluster.host(&record.peer_host).is_some() =>
                {
                    record.peer_host.clone()
                }
                _ => continue,
            };
            let state = match record.state {
                PairingState::Paired => {
                    HalfState::Paired { generation: record.generation, peer_cookie: record.peer_cookie }
                }
                PairingState::PeerGone => HalfState::PeerGone { last: record.generation },
                PairingState::Waiting | PairingState::Unregistered => HalfState::Waiting { last: record.generation },
            };
            let half = LocalHalf {
                cookie: ep.cookie(),
                pid: holder.pid(),
                uid: info.uid,
                peer_host: host,
                since: Instant::now(),
                state,
                handles: ep.own_handles(),
                peer_handles: record.peer_handles,
            };
            let outs = st.cross.pairing.register((key.local, key.remote), half, &mut KernelVouch);
            self.carry_out(&mut st, outs);
            taken += 1;
        }
        if taken > 0 {
            self.log(format_args!("took over {taken} cross-host socket half(s) from their records"));
        }
    }

    /// Every [`SWEEP_EVERY`]: withdraws the halves whose socket is gone or held by nobody,
    /// and removes their records if no live process holds them (a process that exits
    /// without closing its socket, as a fork-per-connection server's children do, leaves
    /// its record behind: one file per connection, for good). The kernel is asked outside
    /// the lock.
    pub(super) fn sweep_halves(&self, now: Instant) {
        let halves: Vec<(Tuple, LocalHalf)> = {
            let mut st = self.lock();
            if now.saturating_duration_since(st.cross.last_sweep) < SWEEP_EVERY {
                return;
            }
            st.cross.last_sweep = now;
            st.cross.pairing.locals().map(|(t, h)| (*t, h.clone())).collect()
        };
        let dead: Vec<(Tuple, u64)> =
            halves.into_iter().filter(|(t, h)| !KernelVouch.still_holds(t, h)).map(|(t, h)| (t, h.cookie)).collect();
        let mut st = self.lock();
        for (t, cookie) in dead {
            if st.cross.pairing.local(&t).is_some_and(|h| h.cookie == cookie) {
                self.log(format_args!("{} -> {}: socket gone, its half withdrawn", t.0, t.1));
                let outs = st.cross.pairing.withdraw(&t);
                self.carry_out(&mut st, outs);
                let key = ConnectionKey::new(self.netns, t.0, t.1);
                st.cross.records_to_remove.push(RecordToRemove { key, cookie, sweeps_left: RECORD_SWEEPS });
            }
        }
        let mut records = std::mem::take(&mut st.cross.records_to_remove);
        drop(st);
        records.retain_mut(|r| {
            let Ok(ep) = Endpoint::open(self.paths.root(), &r.key) else { return false };
            if ep.cookie() != r.cookie {
                return false; // a new connection's of the same addresses
            }
            if ep.holders().is_empty() {
                ep.unlink();
                return false;
            }
            r.sweeps_left = r.sweeps_left.saturating_sub(1);
            r.sweeps_left > 0
        });
        self.lock().cross.records_to_remove.extend(records);
    }
}
