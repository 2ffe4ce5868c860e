//! The per-host daemon: control connections to the other hosts' daemons, heartbeats and
//! host states, lookups answered from the fabric directory, grants, events relayed to
//! processes. This file starts and stops it and runs its ticker; each concept has its own
//! file:
//!
//! - `membership.rs`: host states (Operational, Suspect, Lost), the heartbeat bounds, boot
//!   values and host epochs, restart reconciliation, refused connections: a state machine
//!   without I/O or clock, fed events with the time they happened; the daemon carries out
//!   the actions it returns (`Shared::apply`, here);
//! - `peer_links.rs`: the connections to the other daemons: dialling, accepting, probing a
//!   host whose daemon is away, reading and writing frames, a peer's messages;
//! - `handshake.rs`: the hello exchange that admits a connection (Noise with host keys, or
//!   plaintext hellos with the optional cluster secret);
//! - `directory.rs`: answers from this host's fabric directory (lookups, probes, groups);
//! - `grants.rs`: the owner's side of grants: slots claimed for peers, their release,
//!   notices to their holders, taking over an earlier daemon's slots;
//! - `holdings.rs`: the requester's side: the grants this host's processes hold, their
//!   releases, and the `Holding` lists that reconcile them after a restart;
//! - `forwarding.rs`: questions about another host's nodes, asked of its daemon;
//! - `local_rpc.rs`: the processes' requests on `<fabric dir>/daemon.sock`, subscriptions;
//! - `addresses.rs`: which host an IP address is on (lanes.toml, and the addresses each
//!   host claims at its hello): sans-IO;
//! - `pairing.rs`: the pairing of cross-host socket halves: a state machine without I/O,
//!   fed events, returning what to send and write;
//! - `cross_host.rs`: its I/O: registrations checked against the kernel, records, halves
//!   taken over from records at start, the sweep of halves whose socket is gone.
//!
//! Threads, all blocking calls bounded:
//! - *accept* (TCP): a peer daemon's connection, handshaken, then served by a reader thread;
//! - *dial*, one per remote host whose name sorts after ours: the lower name dials, so two
//!   hosts keep exactly one connection; it redials every heartbeat while unconnected;
//! - per connection a *reader* (frames in, answers queries) and a *writer* (a bounded queue
//!   of frames out, so a stalled peer never delays heartbeats to the others);
//! - *ticker*: every heartbeat, sends heartbeats and tells the membership the time;
//! - *local*: accepts processes on `<fabric dir>/daemon.sock` (0600), one thread each.
//!
//! **Grants.** A process connects to another host's object through its daemon, which forwards
//! the request to the owner's host. That daemon validates the object file as the shm
//! transport's connect does, reads the owner's export record ([`super::exports`]) and claims a
//! connection slot in the object's header with its own identity and the peer's node, under a
//! *proxy* liveness record `procs/<peer node>-<daemon pid>` (one per peer node, kept while it
//! holds grants for that node): the owner's slot tracker sees the peer connect, and the
//! daemon's death reads as the peer's. A slot is released when the requester disconnects,
//! when the requesting process's connection to its daemon closes, when the requester's host
//! is Lost, and when the owner's daemon stops. The requesting daemon remembers each grant
//! against the process's connection and owes a release to a host it cannot reach now (sent
//! when the host is back, forgotten when it is Lost: then that host released it itself).

mod addresses;
mod cross_host;
mod directory;
mod forwarding;
mod grants;
mod handshake;
mod holdings;
mod local_rpc;
mod membership;
mod pairing;
mod peer_links;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::{ClusterConfig, HostEntry};
use super::identity::{self, HostKey};
use super::proto::{encode, HostState, NodeEvent, PeerMessage, Refusal, Reply};
use super::secret::ClusterSecret;
use super::{Error, Result, SOCKET_NAME};
use crate::config::{self, ConfigFile};
use crate::platform::files::ensure_private_dir;
use crate::platform::liveness::ProcessIdentity;
use crate::platform::signals::{signal_name, TerminationSignals};
use crate::platform::{self, random_u64};
use crate::transport::shm::FabricPaths;
use addresses::AddressBook;
use cross_host::CrossHost;
use forwarding::Pending;
use grants::Grants;
use holdings::Requested;
use membership::{Action, Membership, Unanswered};
use peer_links::{Conn, Link};

/// How often blocked readers look up to see whether the daemon is stopping.
const TICK: Duration = Duration::from_millis(250);
/// Frames queued towards one peer before it counts as stalled and is cut off.
const PEER_QUEUE: usize = 1024;
/// Events queued towards one subscribed process before it counts as stalled.
const SUBSCRIBER_QUEUE: usize = 256;
/// Local processes served at once.
const MAX_CLIENTS: usize = 64;
/// Subscribers hear a keep-alive when nothing happened for this long.
const KEEPALIVE: Duration = Duration::from_secs(1);
/// A local request's own timeout is capped here.
const MAX_REQUEST_WAIT: Duration = Duration::from_secs(60);
/// How long a process may take to send a whole request once it started one.
const CLIENT_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the daemon serves: the cluster, which host it is, and the fabric directory.
#[derive(Clone, Debug)]
pub struct DaemonOptions {
    pub cluster: ClusterConfig,
    /// This host's name in `cluster`.
    pub host: String,
    /// The fabric directory of this host (the socket lives in it).
    pub dir: PathBuf,
    /// This host's key file; None: [`identity::key_path`] of the configuration. Read only
    /// when the cluster lists public keys.
    pub key_file: Option<PathBuf>,
}

impl DaemonOptions {
    /// From the environment, as every Lanes process reads it: `LANES_CONFIG` (or
    /// /etc/lanes/lanes.toml) must have a `[cluster]` naming this host (`LANES_HOST`, else the
    /// host name); the fabric directory is `LANES_DIR`, else the file's `dir`, else the default.
    pub fn from_env() -> Result<DaemonOptions> {
        Self::load(&config::config_path_from_env(), None)
    }

    /// As [`DaemonOptions::from_env`], with the configuration file `path` and, if given, the
    /// host name `host` instead of `LANES_HOST`.
    pub fn load(path: &Path, host: Option<String>) -> Result<DaemonOptions> {
        let path = path.to_path_buf();
        let file = ConfigFile::load(&path)?;
        let cluster = file.cluster().cloned().ok_or(Error::NoCluster { path: path.clone() })?;
        let host = host.unwrap_or_else(config::host_name);
        if cluster.host(&host).is_none() {
            let known: Vec<&str> = cluster.hosts.iter().map(|h| h.name.as_str()).collect();
            return Err(Error::UnknownHost { host, path, known: known.join(", ") });
        }
        let key_file = Some(identity::key_path(cluster.key_file.as_deref()));
        Ok(DaemonOptions { cluster, host, dir: config::fabric_dir(Some(&file)), key_file })
    }
}

/// Runs the daemon until SIGTERM or SIGINT, then stops it cleanly (connections closed with
/// a goodbye, socket removed). This is `lanes daemon`.
pub fn run(options: DaemonOptions) -> Result<()> {
    if !options.cluster.keyed() {
        // First start without keys: make this host's key, so that the way out of
        // loopback-only is one line in lanes.toml.
        let path = options.key_file.clone().unwrap_or_else(|| identity::key_path(options.cluster.key_file.as_deref()));
        let me = &options.host;
        match HostKey::load_or_create(&path) {
            Ok((key, created)) => eprintln!(
                "lanes daemon {me}: {} host key {} (public key {}); to serve other hosts, add\n    \
                 public_key = \"{}\"\nto host {me}'s [[node]] entries in lanes.toml on every host, and \
                 each other host's key likewise (`lanes keygen` prints a host's key)",
                if created { "created the" } else { "this host has a" },
                path.display(),
                key.public(),
                key.public()
            ),
            Err(e) => eprintln!("lanes daemon {me}: no host key: {e}"),
        }
    }
    let signals = TerminationSignals::install().map_err(|e| Error::io("catching SIGTERM and SIGINT", e))?;
    let daemon = Daemon::start(options)?;
    loop {
        match signals.wait(Duration::from_secs(3600)) {
            Ok(Some(sig)) => {
                daemon.shared.log(format_args!("{}: stopping", signal_name(sig)));
                break;
            }
            Ok(None) => {}
            Err(e) => {
                daemon.shared.log(format_args!("cannot wait for signals ({e}): stopping"));
                break;
            }
        }
    }
    daemon.stop();
    Ok(())
}

/// A running daemon; [`Daemon::stop`] (or dropping it) stops it.
pub struct Daemon {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    tcp_addr: SocketAddr,
    socket_inode: u64,
    /// Second handles of the two listeners, shut down at stop to end the accept loops.
    listeners: (TcpListener, UnixListener),
}

impl fmt::Debug for Daemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Daemon").field("host", &self.shared.me.name).field("address", &self.tcp_addr).finish()
    }
}

/// What every thread of the daemon shares.
struct Shared {
    me: HostEntry,
    cluster: ClusterConfig,
    paths: FabricPaths,
    socket: PathBuf,
    boot: u64,
    /// This host's epoch ([`host_epoch`]): unchanged by a daemon restart.
    host_epoch: String,
    started: Instant,
    stopping: AtomicBool,
    /// Host states, links and subscribers. Lock order: `state`, then `grants` or `requested`.
    state: Mutex<State>,
    /// Questions forwarded to peers, by question id.
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    clients: AtomicUsize,
    /// This daemon, as it holds connection slots for remote peers.
    identity: ProcessIdentity,
    /// Slots claimed here for peers (the owner's side of grants).
    grants: Mutex<Grants>,
    /// Grants local processes hold (the requester's side): grant id -> who holds it.
    requested: Mutex<HashMap<u64, Requested>>,
    /// What peers must prove they know (`[cluster] secret_file`), on links without keys.
    secret: Option<ClusterSecret>,
    /// This host's key, when the cluster lists keys (None: loopback only).
    key: Option<HostKey>,
    /// The cluster secret's hash, the links' pre-shared key when there are keys and a secret.
    psk: Option<[u8; 32]>,
    /// This daemon's network namespace (its inode): the sockets it can vouch for.
    netns: u64,
}

/// What the daemon knows of the other hosts and who listens for it, under one lock so that
/// a host's state and its connection change together.
struct State {
    /// Each other host's state (indexed as `links`).
    membership: Membership,
    /// Each other host's connection and what is owed to it.
    links: Vec<Link>,
    /// Subscribed processes: subscription id and the queue of its events.
    subscribers: Vec<(u64, SyncSender<Reply>)>,
    /// Cross-host sockets: the hosts' addresses and the halves' pairing.
    cross: CrossHost,
}

impl Daemon {
    /// Binds the daemon's TCP address and Unix socket and starts its threads. Fails if the
    /// address is taken or another daemon serves the fabric directory.
    pub fn start(options: DaemonOptions) -> Result<Daemon> {
        let me = options.cluster.host(&options.host).cloned().ok_or_else(|| Error::UnknownHost {
            host: options.host.clone(),
            path: PathBuf::from("(the cluster configuration)"),
            known: options.cluster.hosts.iter().map(|h| h.name.clone()).collect::<Vec<_>>().join(", "),
        })?;
        let secret = match &options.cluster.secret_file {
            Some(path) => Some(
                ClusterSecret::load(path)
                    .map_err(|message| Error::Config(crate::Error::Config { path: path.clone(), message }))?,
            ),
            None => None,
        };
        let key = if options.cluster.keyed() {
            let path =
                options.key_file.clone().unwrap_or_else(|| identity::key_path(options.cluster.key_file.as_deref()));
            let config_error = |message: String| Error::Config(crate::Error::Config { path: path.clone(), message });
            let (key, _) = HostKey::load_or_create(&path).map_err(config_error)?;
            if Some(*key.public()) != me.public_key {
                return Err(config_error(format!(
                    "this is host {}'s key file, but its public key {} is not the public_key lanes.toml lists for \
                     host {} ({}); set public_key = \"{}\" there, or point LANES_KEY_FILE or [cluster] key_file \
                     at the right key",
                    me.name,
                    key.public(),
                    me.name,
                    me.public_key.map(|k| k.to_string()).unwrap_or_default(),
                    key.public()
                )));
            }
            Some(key)
        } else {
            None
        };
        let psk = match (&key, &secret) {
            (Some(_), Some(s)) => Some(s.psk()),
            _ => None,
        };
        ensure_private_dir(&options.dir)
            .map_err(|e| Error::io(format!("fabric directory {}", options.dir.display()), e))?;
        let paths = FabricPaths::new(&options.dir);
        let socket = options.dir.join(SOCKET_NAME);
        let local = bind_socket(&socket)?;
        let socket_inode = fs::metadata(&socket).map(|m| m.ino()).unwrap_or(0);
        let tcp = match TcpListener::bind(me.address) {
            Ok(l) => l,
            Err(e) => {
                let _ = fs::remove_file(&socket);
                return Err(Error::io(format!("listening on {} (host {})", me.address, me.name), e));
            }
        };
        let tcp_addr = tcp.local_addr().map_err(|e| Error::io("the listening address", e))?;
        let now = Instant::now();
        let links =
            options.cluster.hosts.iter().filter(|h| h.name != me.name).map(|h| Link::new(h, &me)).collect::<Vec<_>>();
        let membership = Membership::new(&options.cluster, links.iter().map(|l| l.entry.name.clone()), now);
        let own = platform::net::host_addresses().unwrap_or_default();
        let cross = CrossHost::new(AddressBook::new(&options.cluster, &me.name, &own), &me.name, now);
        // Every peer gets a thread: the dialler's dials, the other's probes the host while
        // its daemon is away.
        let dial: Vec<usize> = (0..links.len()).collect();
        let identity = match ProcessIdentity::current() {
            Ok(id) => id,
            Err(e) => {
                let _ = fs::remove_file(&socket);
                return Err(Error::io("this process's identity", e));
            }
        };
        let shared = Arc::new(Shared {
            me,
            cluster: options.cluster,
            paths,
            socket,
            boot: random_u64(),
            host_epoch: host_epoch(&options.dir),
            started: now,
            stopping: AtomicBool::new(false),
            state: Mutex::new(State { membership, links, subscribers: Vec::new(), cross }),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            clients: AtomicUsize::new(0),
            identity,
            grants: Mutex::new(Grants::default()),
            requested: Mutex::new(HashMap::new()),
            secret,
            key,
            psk,
            netns: platform::net::netns_inode(),
        });
        shared.log(format_args!(
            "host {} listening on {} and {}; heartbeat {} ms, suspect after {} ms, lost after {} ms",
            shared.me.name,
            tcp_addr,
            shared.socket.display(),
            shared.cluster.heartbeat.as_millis(),
            shared.cluster.suspect_after.as_millis(),
            shared.cluster.lost_after.as_millis()
        ));
        match &shared.key {
            Some(key) => shared.log(format_args!(
                "host key {}: links to other hosts are authenticated (Noise XX{}) and encrypted",
                key.public(),
                if shared.psk.is_some() { " with the cluster secret" } else { "" }
            )),
            None => shared.log(format_args!(
                "no host keys in lanes.toml: serving loopback only (peers on 127.0.0.1 or ::1); run `lanes keygen` \
                 on each host and add public_key = \"<its key>\" to each host's [[node]] entries to serve others"
            )),
        }
        // Halves of cross-host sockets an earlier daemon held, or made while none ran.
        shared.adopt_records();
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            crate::platform::threads::spawn(name, f).map_err(|e| Error::io("starting a daemon thread", e))
        };
        let listeners = match (tcp.try_clone(), local.try_clone()) {
            (Ok(t), Ok(l)) => (t, l),
            (Err(e), _) | (_, Err(e)) => {
                let _ = fs::remove_file(&shared.socket);
                return Err(Error::io("a second handle of a listener", e));
            }
        };
        let s = shared.clone();
        threads.push(spawn("lanes-d-accept".into(), Box::new(move || s.accept_peers(tcp)))?);
        let s = shared.clone();
        threads.push(spawn("lanes-d-local".into(), Box::new(move || s.accept_local(local)))?);
        let s = shared.clone();
        threads.push(spawn("lanes-d-ticker".into(), Box::new(move || s.tick_loop()))?);
        for i in dial {
            let s = shared.clone();
            threads.push(spawn(format!("lanes-d-dial{i}"), Box::new(move || s.dial_loop(i)))?);
        }
        Ok(Daemon { shared, threads, tcp_addr, socket_inode, listeners })
    }

    /// The TCP address the daemon listens on.
    pub fn address(&self) -> SocketAddr {
        self.tcp_addr
    }

    /// The Unix socket local processes connect to.
    pub fn socket(&self) -> &Path {
        &self.shared.socket
    }

    /// Stops the daemon: says goodbye to the peers, closes every connection, joins its
    /// threads and removes its socket.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.shared.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // Grants local processes hold end with this daemon: tell their owners' hosts first.
        let requested: Vec<(u64, Requested)> = self.shared.requested_lock().drain().collect();
        let conns: Vec<Conn> = {
            let mut st = self.shared.lock();
            st.subscribers.clear();
            for (grant, r) in &requested {
                let link = r.host.as_ref().and_then(|h| st.links.iter().find(|l| &l.entry.name == h));
                if let Some(c) = link.and_then(|l| l.conn.as_ref()) {
                    c.send(&PeerMessage::Release { grant: *grant, died: false });
                }
            }
            st.links.iter_mut().filter_map(|l| l.conn.take()).collect()
        };
        for c in &conns {
            c.send(&PeerMessage::Bye { reason: "daemon stopping".into() });
        }
        // Give the writers a moment to put the goodbyes on the wire, then cut.
        if !conns.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        for c in &conns {
            c.close();
        }
        // End the accept loops: a shut-down listener fails their accept at once. (Connecting
        // to ourselves, as before, hung the stop when the socket file had been removed.)
        let _ = platform::shut_down_listener(&self.listeners.0);
        let _ = platform::shut_down_listener(&self.listeners.1);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.release_all();
        if fs::metadata(&self.shared.socket).map(|m| m.ino()).ok() == Some(self.socket_inode) {
            let _ = fs::remove_file(&self.shared.socket);
        }
        self.shared.log(format_args!("stopped"));
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds `<dir>/daemon.sock` (0600), replacing a stale socket that nobody answers on.
fn bind_socket(path: &Path) -> Result<UnixListener> {
    if fs::symlink_metadata(path).is_ok() {
        match UnixStream::connect(path) {
            Ok(_) => return Err(Error::AlreadyRunning { socket: path.to_path_buf() }),
            Err(_) => {
                fs::remove_file(path).map_err(|e| Error::io(format!("removing the stale {}", path.display()), e))?
            }
        }
    }
    let listener = UnixListener::bind(path).map_err(|e| Error::io(format!("binding {}", path.display()), e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("making {} private", path.display()), e))?;
    Ok(listener)
}

/// This host's epoch: the kernel's boot id and a random instance of the fabric directory
/// (`<dir>/host-epoch`, made by the first daemon; on tmpfs it goes with a reboot too). A
/// daemon restarted on a running host keeps it; a rebooted host, or a fresh fabric
/// directory, has a new one.
fn host_epoch(dir: &Path) -> String {
    let kernel = fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let path = dir.join("host-epoch");
    let instance = match fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => s.trim().to_string(),
        _ => {
            let fresh = format!("{:016x}", random_u64());
            let tmp = dir.join(format!(".host-epoch.{}", std::process::id()));
            let written = fs::write(&tmp, &fresh)
                .and_then(|()| fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600)))
                .and_then(|()| fs::rename(&tmp, &path));
            if written.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            fresh
        }
    };
    format!("{}/{instance}", kernel.trim())
}

impl Shared {
    fn log(&self, msg: fmt::Arguments<'_>) {
        let t = self.started.elapsed();
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "lanes daemon {} [{:>5}.{:03}]: {msg}", self.me.name, t.as_secs(), t.subsec_millis());
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn grants_lock(&self) -> MutexGuard<'_, Grants> {
        self.grants.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn requested_lock(&self) -> MutexGuard<'_, HashMap<u64, Requested>> {
        self.requested.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn peer_index(&self, host: &str) -> Option<usize> {
        self.lock().links.iter().position(|l| l.entry.name == host)
    }

    /// Every heartbeat: heartbeats out, then the time to [`Membership`] (silent hosts to
    /// Suspect and Lost), notices of granted objects that changed, and, once this daemon's
    /// adoption window is over, `Holding` to the hosts connected since the last one.
    fn tick_loop(&self) {
        let heartbeat = encode(&PeerMessage::Heartbeat).expect("a heartbeat encodes");
        let period = self.cluster.heartbeat;
        let mut next = Instant::now();
        while !self.stopping() {
            let now = Instant::now();
            {
                let mut st = self.lock();
                for i in 0..st.links.len() {
                    if st.links[i].conn.as_ref().is_some_and(|c| !c.send_frame(heartbeat.clone())) {
                        let actions = st.membership.on_link_stalled(i, now);
                        self.apply(&mut st, actions);
                    }
                }
                let actions = st.membership.on_tick(now);
                self.apply(&mut st, actions);
            }
            self.watch_grants();
            self.sweep_halves(now);
            {
                let mut st = self.lock();
                let actions = st.membership.on_adoption_tick(now);
                self.apply(&mut st, actions);
            }
            next += period;
            let now = Instant::now();
            if next < now {
                next = now; // fell behind (a stopped process): no burst of catch-up ticks
            }
            std::thread::sleep(next - now);
        }
    }

    /// Carries out what [`Membership`] decided, under the lock it decided under, so that
    /// nobody sees a host's new state with its old connection.
    fn apply(&self, st: &mut State, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Changed { peer, previous, state, reason } => {
                    self.log(format_args!("host {} {previous} -> {state}: {reason}", st.links[peer].entry.name))
                }
                Action::CloseLink { peer } => {
                    if let Some(c) = st.links[peer].conn.take() {
                        c.close();
                    }
                }
                Action::HostLost { peer } => {
                    // Whatever it held here is gone with it, and it released what we held there.
                    st.links[peer].owed.clear();
                    let host = st.links[peer].entry.name.clone();
                    // Its socket halves too; ours paired with them wait for it to come back.
                    st.cross.book.on_lost(&host);
                    let outs = st.cross.pairing.on_lost(&host);
                    self.carry_out(st, outs);
                    self.release_host(&host);
                    // And our processes' grants there are void: not ours to report as held.
                    self.requested_lock().retain(|_, r| r.host.as_deref() != Some(host.as_str()));
                    self.sweep_orphans(|h| h == host);
                }
                Action::FailQuestions { peer, why } => {
                    let host = st.links[peer].entry.name.clone();
                    self.fail_questions(&host, |node| match why {
                        Unanswered::Host(state) => Refusal::HostUnreachable { node, host: host.clone(), state },
                        Unanswered::DaemonRestarting => Refusal::DaemonRestarting { node, host: host.clone() },
                    })
                }
                Action::Notify { peer, previous, state, reason } => self.notify(st, peer, previous, state, &reason),
                Action::Log { message } => self.log(format_args!("{message}")),
                Action::SendHoldings => self.send_holdings(st),
                Action::SweepOwnOrphans => {
                    let me = self.me.name.clone();
                    self.sweep_orphans(|h| h == me);
                }
            }
        }
    }

    /// Tells every subscriber that the nodes of host `peer` went from `previous` to
    /// `state`; a subscriber that does not keep up is dropped.
    fn notify(&self, st: &mut State, peer: usize, previous: HostState, state: HostState, reason: &str) {
        let entry = &st.links[peer].entry;
        let events: Vec<NodeEvent> = entry
            .nodes
            .iter()
            .map(|n| NodeEvent { node: n.get(), host: entry.name.clone(), state, previous, reason: reason.to_string() })
            .collect();
        st.subscribers.retain(|(id, tx)| {
            for ev in &events {
                match tx.try_send(Reply::Event { event: ev.clone() }) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) => {
                        self.log(format_args!("subscriber {id} does not keep up with events: dropping it"));
                        return false;
                    }
                    Err(TrySendError::Disconnected(_)) => return false,
                }
            }
            true
        });
    }
}
