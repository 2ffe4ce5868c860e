//! The per-host daemon: control connections to the other hosts' daemons, heartbeats and
//! host states, lookups answered from the fabric directory, events relayed to processes.
//!
//! Threads, all blocking calls bounded:
//! - *accept* (TCP): a peer daemon's connection, handshaken, then served by a reader thread;
//! - *dial*, one per remote host whose name sorts after ours: the lower name dials, so two
//!   hosts keep exactly one connection; it redials every heartbeat while unconnected;
//! - per connection a *reader* (frames in, answers queries) and a *writer* (a bounded queue
//!   of frames out, so a stalled peer never delays heartbeats to the others);
//! - *ticker*: every heartbeat, sends heartbeats and moves silent hosts to Suspect, then Lost;
//! - *local*: accepts processes on `<fabric dir>/daemon.sock` (0600), one thread each.
//!
//! A host goes Operational at its daemon's hello, Suspect after `suspect_after` without a
//! frame or at once when its connection fails, Lost after `lost_after` without a frame or
//! when its daemon comes back with a new boot epoch. Suspect closes the connection, and the
//! dialling side redials with fresh connects: a new SYN after a link returns beats waiting
//! out TCP's retransmission back-off on the old connection.
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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::config::{ClusterConfig, HostEntry};
use super::exports;
use super::identity::{self, HostKey, PublicKey};
use super::link::{self, Opener, Sealed};
use super::proto::{self, GroupInfo};
use super::proto::{
    encode, write_message, Answer, Fill, FrameReader, Grant, GrantStatus, HeldGrant, HostState, HostStatus, NodeEvent,
    NodeProbe, ObjectInfo, ObjectKind, PeerMessage, Query, Refusal, Reply, Request, PROTOCOL_VERSION,
};
use super::secret::{ClusterSecret, Role};
use super::{Error, Result, SOCKET_NAME};
use crate::config::{self, ConfigFile, NodeId};
use crate::fabric::MapAccess;
use crate::platform::files::ensure_private_dir;
use crate::platform::liveness::{self, ProcessIdentity, ProcessRecord};
use crate::platform::signals::{signal_name, TerminationSignals};
use crate::platform::{self, random_u64};
use crate::transport::shm::data_interrupt;
use crate::transport::shm::layout::{kind, state, MAX_CONNECTIONS};
use crate::transport::shm::remote::direct_mapping;
use crate::transport::shm::segment_file::{OpenError, SegmentFile};
use crate::transport::shm::FabricPaths;

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
/// A refused peer connection is logged again (same reason) after this long.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

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

struct Shared {
    me: HostEntry,
    cluster: ClusterConfig,
    paths: FabricPaths,
    socket: PathBuf,
    boot: u64,
    /// This host's epoch ([`host_epoch`]): unchanged by a daemon restart.
    host_epoch: String,
    started: Instant,
    /// Until then, processes of an earlier daemon may still be registering their grants
    /// again ([`Request::Adopt`]): no `Holding` is sent and no orphan swept before.
    adopting_until: Instant,
    /// The slots of local requesters that nobody registered again were swept.
    local_swept: AtomicBool,
    stopping: AtomicBool,
    state: Mutex<State>,
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
    /// Refusals of peer connections, logged once per reason every [`REFUSAL_LOG_EVERY`].
    refusals: Mutex<HashMap<String, Instant>>,
}

/// The slots this daemon claimed for peers, and the proxy records they are claimed under.
/// Lock order: `state`, then `grants`.
#[derive(Default)]
struct Grants {
    held: HashMap<u64, Held>,
    /// One proxy liveness record per peer node with grants: `procs/<peer node>-<our pid>`.
    records: HashMap<u32, Arc<ProcessRecord>>,
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

/// A grant a local process holds: its connection and the host that granted it (None: this
/// host).
struct Requested {
    client: u64,
    host: Option<String>,
    /// The grant as the owner's daemon takes it over after a restart.
    held: HeldGrant,
    /// The subscription that hears the object's status changes.
    notify: Option<u64>,
}

struct State {
    peers: Vec<Peer>,
    subscribers: Vec<(u64, SyncSender<Reply>)>,
}

struct Peer {
    entry: HostEntry,
    state: HostState,
    since: Instant,
    last_heard: Option<Instant>,
    boot: Option<u64>,
    conn: Option<Conn>,
    /// This daemon dials the peer (our name sorts first).
    dials: bool,
    /// Releases of the peer's grants that could not be sent (no connection): sent when it
    /// is connected again, dropped when it is Lost (it released them itself).
    owed: Vec<(u64, bool)>,
    /// Its host's epoch, from its last hello.
    host_epoch: Option<String>,
    /// Its daemon went away (its connection was closed or reset, so the host's kernel
    /// still answers) while it was Operational: kept Operational while the host keeps
    /// answering connects (refused or accepted), as a restarting daemon's host does.
    away: bool,
    /// Since when its daemon is away: past `lost_after` the host is Suspect all the same.
    away_since: Instant,
    /// The connection generation our `Holding` was sent on.
    holding_sent: Option<u64>,
}

/// One live control connection: the writer's queue and the socket (to shut it down).
#[derive(Clone)]
struct Conn {
    generation: u64,
    frames: SyncSender<Vec<u8>>,
    stream: Arc<TcpStream>,
}

impl Conn {
    /// Queues a frame; false if the connection is stalled or gone.
    fn send(&self, msg: &PeerMessage) -> bool {
        match encode(msg) {
            Ok(frame) => self.send_frame(frame),
            Err(_) => false,
        }
    }

    fn send_frame(&self, frame: Vec<u8>) -> bool {
        match self.frames.try_send(frame) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        }
    }

    fn close(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// A question forwarded to a peer, waiting for its answer.
struct Pending {
    host: String,
    node: u32,
    answer: mpsc::Sender<Answer>,
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
        let peers = options
            .cluster
            .hosts
            .iter()
            .filter(|h| h.name != me.name)
            .map(|h| Peer {
                entry: h.clone(),
                state: HostState::Unknown,
                since: now,
                last_heard: None,
                boot: None,
                conn: None,
                dials: me.name < h.name,
                owed: Vec::new(),
                host_epoch: None,
                away: false,
                away_since: now,
                holding_sent: None,
            })
            .collect::<Vec<_>>();
        // Every peer gets a thread: the dialler's dials, the other's probes the host while
        // its daemon is away.
        let dial: Vec<usize> = (0..peers.len()).collect();
        let identity = match ProcessIdentity::current() {
            Ok(id) => id,
            Err(e) => {
                let _ = fs::remove_file(&socket);
                return Err(Error::io("this process's identity", e));
            }
        };
        let window = adoption_window(&options.cluster);
        let shared = Arc::new(Shared {
            me,
            cluster: options.cluster,
            paths,
            socket,
            boot: random_u64(),
            host_epoch: host_epoch(&options.dir),
            started: now,
            adopting_until: now + window,
            local_swept: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            state: Mutex::new(State { peers, subscribers: Vec::new() }),
            pending: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            clients: AtomicUsize::new(0),
            identity,
            grants: Mutex::new(Grants::default()),
            requested: Mutex::new(HashMap::new()),
            secret,
            key,
            psk,
            refusals: Mutex::new(HashMap::new()),
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
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name).spawn(f).map_err(|e| Error::io("starting a daemon thread", e))
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
                let peer = r.host.as_ref().and_then(|h| st.peers.iter().find(|p| &p.entry.name == h));
                if let Some(c) = peer.and_then(|p| p.conn.as_ref()) {
                    c.send(&PeerMessage::Release { grant: *grant, died: false });
                }
            }
            st.peers.iter_mut().filter_map(|p| p.conn.take()).collect()
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

/// Whether `s` is connected to itself: on one machine, a connect to a port nobody listens
/// on in the ephemeral range may be given that very port as its source (TCP simultaneous
/// open). Nobody answered then.
fn is_self_connection(s: &TcpStream) -> bool {
    matches!((s.local_addr(), s.peer_addr()), (Ok(l), Ok(p)) if l == p)
}

/// Closes a probe's connection with a reset, so that it leaves nothing in TIME_WAIT on
/// its port (a probe's own port may be the port a restarting daemon is about to bind).
fn close_at_once(s: TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the fd is open for the duration of the call; `linger` is a valid value of the
    // size passed.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}

/// The two from hello to hello of one host's daemons: `(boot, host epoch)`.
type PeerBoot = (u64, String);

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

/// How long a restarted daemon waits for its processes to register their grants again
/// before it tells the other hosts what they hold (and sweeps what nobody claims): the
/// processes' node watches retry every 100 ms.
fn adoption_window(cluster: &ClusterConfig) -> Duration {
    cluster.suspect_after.max(Duration::from_secs(1))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
        self.lock().peers.iter().position(|p| p.entry.name == host)
    }

    // -----------------------------------------------------------------------------------
    // Host states
    // -----------------------------------------------------------------------------------

    /// Moves peer `i` to `new`, telling the log and the subscribers. Leaving Operational
    /// closes its connection and fails the questions waiting on it.
    fn set_state(&self, st: &mut State, i: usize, new: HostState, reason: &str) {
        let peer = &mut st.peers[i];
        let previous = peer.state;
        if previous == new {
            return;
        }
        peer.state = new;
        peer.since = Instant::now();
        self.log(format_args!("host {} {previous} -> {new}: {reason}", peer.entry.name));
        if new != HostState::Operational {
            peer.away = false;
            if let Some(c) = peer.conn.take() {
                c.close();
            }
            let host = peer.entry.name.clone();
            if new == HostState::Lost {
                // Whatever it held here is gone with it, and it released what we held there.
                peer.owed.clear();
                self.release_host(&host);
                // And our processes' grants there are void: not ours to report as held.
                self.requested_lock().retain(|_, r| r.host.as_deref() != Some(host.as_str()));
                self.sweep_orphans(|h| h == host);
            }
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.retain(|_, p| {
                if p.host == host {
                    let refusal = Refusal::HostUnreachable { node: p.node, host: host.clone(), state: new };
                    let _ = p.answer.send(Answer::Refused { refusal });
                    false
                } else {
                    true
                }
            });
        }
        let events: Vec<NodeEvent> = st.peers[i]
            .entry
            .nodes
            .iter()
            .map(|n| NodeEvent {
                node: n.get(),
                host: st.peers[i].entry.name.clone(),
                state: new,
                previous,
                reason: reason.to_string(),
            })
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

    /// Every heartbeat: heartbeats out, silent hosts to Suspect and Lost.
    fn tick_loop(&self) {
        let heartbeat = encode(&PeerMessage::Heartbeat).expect("a heartbeat encodes");
        let period = self.cluster.heartbeat;
        let mut next = Instant::now();
        while !self.stopping() {
            let now = Instant::now();
            {
                let mut st = self.lock();
                for i in 0..st.peers.len() {
                    if let Some(c) = &st.peers[i].conn {
                        if !c.send_frame(heartbeat.clone()) {
                            self.set_state(&mut st, i, HostState::Suspect, "its connection is stalled");
                            continue;
                        }
                    }
                    let p = &st.peers[i];
                    let Some(heard) = p.last_heard else { continue };
                    let silent = now.saturating_duration_since(heard);
                    let away = now.saturating_duration_since(p.away_since);
                    if p.state == HostState::Operational && p.away && away >= self.cluster.lost_after {
                        // Not back within lost_after: what it held is given up, as for a
                        // silent host.
                        let why = format!("its daemon did not come back within {} ms", millis(away));
                        self.set_state(&mut st, i, HostState::Lost, &why);
                    } else if p.state == HostState::Operational && silent >= self.cluster.suspect_after {
                        let why = format!("no heartbeat for {} ms", millis(silent));
                        self.set_state(&mut st, i, HostState::Suspect, &why);
                    } else if p.state == HostState::Suspect && silent >= self.cluster.lost_after {
                        let why = format!("silent for {} ms", millis(silent));
                        self.set_state(&mut st, i, HostState::Lost, &why);
                    }
                }
            }
            self.watch_grants();
            if now >= self.adopting_until {
                self.send_holdings();
                if !self.local_swept.swap(true, Ordering::SeqCst) {
                    let me = self.me.name.clone();
                    self.sweep_orphans(|h| h == me);
                }
            }
            next += period;
            let now = Instant::now();
            if next < now {
                next = now; // fell behind (a stopped process): no burst of catch-up ticks
            }
            std::thread::sleep(next - now);
        }
    }

    // -----------------------------------------------------------------------------------
    // Peer connections
    // -----------------------------------------------------------------------------------

    /// This daemon's hello, with its challenge and (as acceptor) its proof when the cluster
    /// has a secret.
    fn hello(&self, nonce: Option<&str>, proof: Option<String>) -> PeerMessage {
        PeerMessage::Hello {
            version: PROTOCOL_VERSION,
            host: self.me.name.clone(),
            boot: self.boot,
            nodes: self.me.nodes.iter().map(|n| n.get()).collect(),
            nonce: nonce.map(str::to_string),
            proof,
            host_epoch: self.host_epoch.clone(),
        }
    }

    /// Dials peer `i` while it has no connection (when this daemon is the dialler), and
    /// while its daemon is away takes a refused or accepted connect as the host's sign of
    /// life (the acceptor only probes).
    fn dial_loop(&self, i: usize) {
        let (host, addr, dials) = {
            let st = self.lock();
            (st.peers[i].entry.name.clone(), st.peers[i].entry.address, st.peers[i].dials)
        };
        if !dials {
            return self.probe_loop(i, addr);
        }
        if self.key.is_none() && !addr.ip().is_loopback() {
            self.log(format_args!(
                "host {host} ({addr}): not dialled: without host keys in lanes.toml this daemon serves loopback only"
            ));
            return;
        }
        let mut last_error = String::new();
        while !self.stopping() {
            let connected = self.lock().peers[i].conn.is_some();
            if !connected {
                let attempt = TcpStream::connect_timeout(&addr, self.cluster.suspect_after)
                    .and_then(|s| {
                        if is_self_connection(&s) {
                            close_at_once(s);
                            return Err(io::Error::new(
                                io::ErrorKind::AddrInUse,
                                "connected to itself (nobody listens)",
                            ));
                        }
                        self.host_answered(i);
                        Ok(s)
                    })
                    .inspect_err(|e| {
                        if e.kind() == io::ErrorKind::ConnectionRefused {
                            self.host_answered(i);
                        }
                    })
                    .map_err(|e| format!("connecting to {addr}: {e}"))
                    .and_then(|s| self.handshake(s, Some(&host)).map_err(|e| format!("hello with {addr}: {e}")));
                match attempt {
                    Ok((stream, reader, boot)) => {
                        last_error.clear();
                        self.serve_peer(i, stream, reader, boot);
                    }
                    Err(e) => {
                        if e != last_error {
                            self.log(format_args!("host {host}: {e} (retrying every heartbeat)"));
                            last_error = e;
                        }
                    }
                }
            }
            std::thread::sleep(self.cluster.heartbeat);
        }
    }

    /// While peer `i`'s daemon is away, connects to its address every heartbeat: refused
    /// (nobody listens yet) or accepted (its new daemon, which dials us itself), the host
    /// answered. A connect that times out or finds no route is silence.
    fn probe_loop(&self, i: usize, addr: SocketAddr) {
        while !self.stopping() {
            if self.lock().peers[i].away {
                match TcpStream::connect_timeout(&addr, self.cluster.heartbeat) {
                    Ok(s) => {
                        if !is_self_connection(&s) {
                            self.host_answered(i);
                        }
                        close_at_once(s);
                    }
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => self.host_answered(i),
                    Err(_) => {}
                }
            }
            std::thread::sleep(self.cluster.heartbeat);
        }
    }

    /// Peer `i`'s host answered a connect while its daemon is away: a sign of life.
    fn host_answered(&self, i: usize) {
        let mut st = self.lock();
        if st.peers[i].away && st.peers[i].state == HostState::Operational {
            st.peers[i].last_heard = Some(Instant::now());
        }
    }

    /// Accepts peer daemons.
    fn accept_peers(self: Arc<Self>, listener: TcpListener) {
        for stream in listener.incoming() {
            if self.stopping() {
                return;
            }
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    self.log(format_args!("accepting a peer: {e}"));
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            let s = self.clone();
            let spawned = std::thread::Builder::new().name("lanes-d-peer".into()).spawn(move || {
                let from = match stream.peer_addr() {
                    Ok(a) => a,
                    Err(e) => return s.log(format_args!("a peer connection without an address: {e}")),
                };
                if let Err(e) = s.admit_source(&stream, from.ip()) {
                    return s.log_refusal(from, &e);
                }
                match s.handshake(stream, None) {
                    Ok((stream, reader, boot)) => {
                        if let Some(i) = s.peer_index(&reader.host) {
                            s.serve_peer(i, stream, reader, boot);
                        }
                    }
                    Err(e) => s.log_refusal(from, &e),
                }
            });
            if let Err(e) = spawned {
                self.log(format_args!("cannot serve a peer: {e}"));
            }
        }
    }

    /// Logs a refused peer connection (each reason at most once per [`REFUSAL_LOG_EVERY`]:
    /// an impostor redialling every heartbeat must not flood the log).
    fn log_refusal(&self, from: SocketAddr, reason: &str) {
        let now = Instant::now();
        let key = format!("{} {reason}", from.ip());
        let mut seen = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        if seen.len() > 1024 {
            seen.retain(|_, t| now.duration_since(*t) < REFUSAL_LOG_EVERY);
        }
        match seen.get(&key) {
            Some(t) if now.duration_since(*t) < REFUSAL_LOG_EVERY => {}
            _ => {
                seen.insert(key, now);
                drop(seen);
                self.log(format_args!("refused a connection from {from}: {reason}"));
            }
        }
    }

    /// Whether a connection from `ip` may say hello at all: with keys, from one of the
    /// cluster's addresses; without, from loopback only (then with a goodbye saying why).
    fn admit_source(&self, stream: &TcpStream, ip: IpAddr) -> std::result::Result<(), String> {
        if self.key.is_none() {
            if ip.is_loopback() {
                return Ok(());
            }
            let why = "this daemon has no host keys in lanes.toml and serves loopback only (run `lanes keygen` \
                       on each host and list each host's public_key)"
                .to_string();
            let _ = stream.set_write_timeout(Some(self.cluster.heartbeat));
            return Err(self.bye(stream, why));
        }
        if self.cluster.hosts.iter().any(|h| h.address.ip() == ip) {
            Ok(())
        } else {
            Err(format!("{ip} is not the address of any host in lanes.toml"))
        }
    }

    /// Exchanges hellos, bounded by `suspect_after`: over a Noise handshake with the host
    /// keys when the cluster lists them ([`Shared::secure_handshake`]), else in plaintext.
    /// Nothing about any peer changes here: the caller makes the connection a peer's only
    /// once this returned.
    fn handshake(
        &self,
        stream: TcpStream,
        expect: Option<&str>,
    ) -> std::result::Result<(TcpStream, HandshakeReader, PeerBoot), String> {
        match &self.key {
            Some(key) => self.secure_handshake(stream, expect, key),
            None => self.plain_handshake(stream, expect),
        }
    }

    /// The handshake of `super::link`: Noise XX with this host's key; the other side's
    /// static key must be the one lanes.toml lists for the host it names, and (for an
    /// accepted connection) the connection must come from that host's address. A refused
    /// dialler hears a sealed goodbye saying why.
    fn secure_handshake(
        &self,
        stream: TcpStream,
        expect: Option<&str>,
        key: &HostKey,
    ) -> std::result::Result<(TcpStream, HandshakeReader, PeerBoot), String> {
        let deadline = Instant::now() + self.cluster.suspect_after;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(self.cluster.suspect_after)).map_err(|e| e.to_string())?;
        let mut hs = link::handshake_state(key, self.psk.as_ref(), expect.is_some())?;
        let hello = encode(&self.hello(None, None)).map_err(|e| e.to_string())?;
        let mut frames = FrameReader::new();
        if let Some(want) = expect {
            let entry = self.cluster.host(want).ok_or_else(|| format!("host {want} is not in lanes.toml"))?;
            let mut first = link::preamble(PROTOCOL_VERSION).to_vec();
            let mut msg = vec![0u8; link::MAX_RECORD];
            let n = hs.write_message(&[], &mut msg).map_err(|e| format!("handshake: {e}"))?;
            first.extend_from_slice(&(n as u16).to_be_bytes());
            first.extend_from_slice(&msg[..n]);
            (&stream).write_all(&first).map_err(|e| e.to_string())?;
            // A daemon without keys answers in plaintext: show its goodbye.
            let mut head = [0u8; 2];
            link::read_exact_by(&stream, &mut head, deadline, "handshake")?;
            if head == [b'L', b'N'] {
                let mut plain = FrameReader::new();
                let mut buf = head.to_vec();
                let mut rest = [0u8; 512];
                let _ = stream.set_read_timeout(Some(self.cluster.heartbeat));
                if let Ok(n) = io::Read::read(&mut &stream, &mut rest) {
                    buf.extend_from_slice(&rest[..n]);
                }
                let _ = plain.fill(&mut &buf[..]);
                return Err(match plain.next_message::<PeerMessage>() {
                    Ok(Some(PeerMessage::Bye { reason })) => format!("host {want} refused: {reason}"),
                    _ => format!("host {want} answered without a handshake (a daemon without host keys?)"),
                });
            }
            let mut msg2 = vec![0u8; usize::from(u16::from_be_bytes(head))];
            link::read_exact_by(&stream, &mut msg2, deadline, "handshake")?;
            let mut payload = vec![0u8; link::MAX_RECORD];
            hs.read_message(&msg2, &mut payload).map_err(|e| format!("host {want}'s handshake failed ({e})"))?;
            let theirs = hs.get_remote_static().and_then(PublicKey::from_bytes);
            if theirs.is_none() || theirs != entry.public_key {
                return Err(format!(
                    "the daemon at {} proved key {}, not host {want}'s key in lanes.toml ({})",
                    entry.address,
                    theirs.map(|k| k.to_string()).unwrap_or_default(),
                    entry.public_key.map(|k| k.to_string()).unwrap_or_default()
                ));
            }
            link::write_handshake(&mut hs, &stream, &hello)?;
            let sealed = Sealed::new(hs)?;
            let mut opener = sealed.opener();
            let answer = loop {
                match frames.next_message::<PeerMessage>() {
                    Ok(Some(m)) => break m,
                    Ok(None) => {}
                    Err(e) => return Err(format!("host {want}: {e}")),
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(format!("host {want}: no hello in time"));
                }
                stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
                match frames.fill(&mut opener.on(&mut &stream)) {
                    Ok(Fill::Closed) => return Err(format!("host {want} closed the connection before its hello")),
                    Ok(_) => {}
                    Err(e) => return Err(format!("host {want}: {e}")),
                }
            };
            let (version, boot) = match answer {
                PeerMessage::Hello { version, host, boot, host_epoch, .. } if host == want => {
                    (version, (boot, host_epoch))
                }
                PeerMessage::Hello { host, .. } => return Err(format!("dialled host {want} but {host} answered")),
                PeerMessage::Bye { reason } => return Err(format!("host {want} refused: {reason}")),
                _ => return Err(format!("host {want}: the first message was not a hello")),
            };
            if version != PROTOCOL_VERSION {
                return Err(format!("host {want} speaks protocol version {version}, this daemon {PROTOCOL_VERSION}"));
            }
            let reader = HandshakeReader { frames, host: want.to_string(), link: Some(sealed), opener: Some(opener) };
            return Ok((stream, reader, boot));
        }
        // Acceptor.
        let from = stream.peer_addr().map_err(|e| e.to_string())?;
        let mut pre = [0u8; 6];
        link::read_exact_by(&stream, &mut pre, deadline, "preamble")?;
        if pre[..4] == proto::MAGIC {
            return Err(self.bye(
                &stream,
                "this cluster's daemons prove their host keys (public_key in lanes.toml); this peer sent a \
                 plaintext hello (does its lanes.toml list no keys?)"
                    .into(),
            ));
        }
        if pre[..4] != link::LINK_MAGIC {
            return Err(format!("bad preamble {:02x?} (not a Lanes daemon)", &pre[..4]));
        }
        let version = u16::from_be_bytes([pre[4], pre[5]]);
        if version != PROTOCOL_VERSION {
            return Err(format!("protocol version {version}, this daemon speaks {PROTOCOL_VERSION}"));
        }
        link::read_handshake(&mut hs, &stream, deadline, "first handshake message")?;
        link::write_handshake(&mut hs, &stream, &[])?;
        let payload = link::read_handshake(&mut hs, &stream, deadline, "third handshake message")?;
        let theirs = hs.get_remote_static().and_then(PublicKey::from_bytes);
        let sealed = Sealed::new(hs)?;
        let refuse = |reason: String| {
            if let Ok(bytes) = encode(&PeerMessage::Bye { reason: reason.clone() })
                .and_then(|f| sealed.seal(&f).map_err(|e| proto::FrameError::Malformed(e.to_string())))
            {
                let _ = (&stream).write_all(&bytes);
            }
            reason
        };
        let mut hello_frames = FrameReader::new();
        let _ = hello_frames.fill(&mut &payload[..]);
        let (host, boot) = match hello_frames.next_message::<PeerMessage>() {
            Ok(Some(PeerMessage::Hello { version, host, boot, host_epoch, .. })) => {
                let boot = (boot, host_epoch);
                if version != PROTOCOL_VERSION {
                    return Err(refuse(format!("protocol version {version}, this daemon speaks {PROTOCOL_VERSION}")));
                }
                (host, boot)
            }
            _ => return Err(refuse("the handshake did not carry a hello".into())),
        };
        let Some(entry) = self.cluster.host(&host).filter(|h| h.name != self.me.name) else {
            return Err(refuse(format!("host {host:?} is not a peer in this cluster")));
        };
        if theirs.is_none() || theirs != entry.public_key {
            let holder = theirs.and_then(|k| self.cluster.host_with_key(&k)).map(|h| h.name.clone());
            return Err(refuse(format!(
                "a daemon calling itself host {host} proved key {}{}, not host {host}'s key in lanes.toml",
                theirs.map(|k| k.to_string()).unwrap_or_default(),
                holder.map(|h| format!(" (host {h}'s)")).unwrap_or_default()
            )));
        }
        if from.ip() != entry.address.ip() {
            return Err(refuse(format!(
                "host {host} connects from {}, not from its address in lanes.toml ({})",
                from.ip(),
                entry.address.ip()
            )));
        }
        let ours = sealed.seal(&hello).map_err(|e| e.to_string())?;
        (&stream).write_all(&ours).map_err(|e| e.to_string())?;
        let reader = HandshakeReader { frames, host, link: Some(sealed.clone()), opener: Some(sealed.opener()) };
        Ok((stream, reader, boot))
    }

    /// Exchanges plaintext hellos (no host keys: loopback only), bounded by `suspect_after`.
    /// `expect` names the host dialled; an accepted connection may come from any other host
    /// of the cluster. With a cluster secret, each side proves it knows the secret
    /// (`super::secret`) before the connection is used.
    fn plain_handshake(
        &self,
        stream: TcpStream,
        expect: Option<&str>,
    ) -> std::result::Result<(TcpStream, HandshakeReader, PeerBoot), String> {
        let deadline = Instant::now() + self.cluster.suspect_after;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(self.cluster.suspect_after)).map_err(|e| e.to_string())?;
        let own = self.secret.as_ref().map(|_| ClusterSecret::nonce());
        if expect.is_some() {
            write_message(&mut &stream, &self.hello(own.as_deref(), None)).map_err(|e| e.to_string())?;
        }
        let mut reader = FrameReader::new();
        let msg = self.handshake_message(&stream, &mut reader, deadline, "hello")?;
        let PeerMessage::Hello { version, host, boot, nonce, proof, host_epoch, .. } = msg else {
            return Err(self.bye(&stream, "the first message was not a hello".into()));
        };
        if version != PROTOCOL_VERSION {
            return Err(self.bye(&stream, format!("protocol version {version}, this daemon speaks {PROTOCOL_VERSION}")));
        }
        if let Some(want) = expect {
            if host != want {
                return Err(self.bye(&stream, format!("dialled host {want} but {host} answered")));
            }
        } else if host == self.me.name || self.cluster.host(&host).is_none() {
            return Err(self.bye(&stream, format!("host {host:?} is not a peer in this cluster")));
        }
        if let (Some(secret), Some(own)) = (&self.secret, &own) {
            let Some(challenge) = nonce else {
                return Err(self.bye(&stream, format!("host {host} did not offer to prove the cluster secret")));
            };
            if expect.is_some() {
                // Dialler: check the acceptor's proof, then prove ourselves.
                let proven = proof.is_some_and(|p| secret.verify(&p, Role::Acceptor, own, &challenge, &host));
                if !proven {
                    return Err(self.bye(&stream, format!("host {host} did not prove the cluster secret")));
                }
                let proof = secret.proof(Role::Dialler, &challenge, own, &self.me.name);
                write_message(&mut &stream, &PeerMessage::Auth { proof }).map_err(|e| e.to_string())?;
            } else {
                // Acceptor: answer with our hello and proof, then check the dialler's.
                let proof = secret.proof(Role::Acceptor, &challenge, own, &self.me.name);
                write_message(&mut &stream, &self.hello(Some(own), Some(proof))).map_err(|e| e.to_string())?;
                let proven = match self.handshake_message(&stream, &mut reader, deadline, "proof")? {
                    PeerMessage::Auth { proof } => secret.verify(&proof, Role::Dialler, own, &challenge, &host),
                    _ => false,
                };
                if !proven {
                    return Err(self.bye(&stream, format!("host {host} did not prove the cluster secret")));
                }
            }
        } else if expect.is_none() {
            write_message(&mut &stream, &self.hello(None, None)).map_err(|e| e.to_string())?;
        }
        Ok((stream, HandshakeReader { frames: reader, host, link: None, opener: None }, (boot, host_epoch)))
    }

    /// The next message of a handshake, by `deadline`.
    fn handshake_message(
        &self,
        stream: &TcpStream,
        reader: &mut FrameReader,
        deadline: Instant,
        what: &str,
    ) -> std::result::Result<PeerMessage, String> {
        loop {
            match reader.next_message::<PeerMessage>() {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => {}
                Err(e) => return Err(self.bye(stream, e.to_string())),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no {what} in time"));
            }
            stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
            match reader.fill(&mut &*stream) {
                Ok(Fill::Closed) => return Err(format!("closed before its {what}")),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Sends a goodbye with `reason` (best effort) and returns the reason.
    fn bye(&self, stream: &TcpStream, reason: String) -> String {
        let _ = write_message(&mut &*stream, &PeerMessage::Bye { reason: reason.clone() });
        reason
    }

    /// Makes a handshaken connection peer `i`'s, then reads it until it ends.
    fn serve_peer(&self, i: usize, stream: TcpStream, reader: HandshakeReader, boot: PeerBoot) {
        let stream = Arc::new(stream);
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(PEER_QUEUE);
        let generation = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Conn { generation, frames: tx, stream: stream.clone() };
        let host = {
            let mut st = self.lock();
            if self.stopping() {
                return;
            }
            let now = Instant::now();
            let (boot, epoch) = boot;
            let old_boot = st.peers[i].boot.replace(boot);
            let old_epoch = st.peers[i].host_epoch.replace(epoch.clone());
            if let Some(old) = st.peers[i].conn.replace(conn.clone()) {
                old.close(); // a newer connection replaces it (the peer restarted or redialled)
            }
            st.peers[i].last_heard = Some(now);
            st.peers[i].away = false;
            if old_boot.is_some_and(|b| b != boot) {
                if !epoch.is_empty() && old_epoch.as_deref() == Some(epoch.as_str()) {
                    // Only its daemon restarted: the host's processes, their exports and
                    // their connections live on. The grants are reconciled by `Holding`.
                    let name = st.peers[i].entry.name.clone();
                    self.log(format_args!("host {name}: its daemon restarted (same host epoch): reconciling grants"));
                } else {
                    // The host restarted (or says nothing of it): nothing it vouched for
                    // before still holds.
                    st.peers[i].conn = None;
                    self.set_state(&mut st, i, HostState::Lost, "its host restarted (new boot epoch)");
                    st.peers[i].conn = Some(conn.clone());
                }
            }
            self.set_state(&mut st, i, HostState::Operational, "hello received");
            let owed = std::mem::take(&mut st.peers[i].owed);
            for (grant, died) in owed {
                if !conn.send(&PeerMessage::Release { grant, died }) {
                    st.peers[i].owed.push((grant, died));
                }
            }
            st.peers[i].entry.name.clone()
        };
        let writer_stream = stream.clone();
        let sealer = reader.link.clone();
        let writer = std::thread::Builder::new().name("lanes-d-write".into()).spawn(move || {
            for frame in rx.iter() {
                let bytes = match &sealer {
                    Some(s) => match s.seal(&frame) {
                        Ok(b) => b,
                        Err(_) => break,
                    },
                    None => frame,
                };
                if (&*writer_stream).write_all(&bytes).is_err() {
                    break;
                }
            }
            let _ = writer_stream.shutdown(Shutdown::Both);
        });
        if let Err(e) = writer {
            self.log(format_args!("host {host}: cannot start a writer: {e}"));
            conn.close();
        }
        let reason = self.read_peer(i, &conn, reader.frames, reader.opener);
        drop(conn);
        self.connection_ended(i, generation, &reason);
    }

    /// Reads frames from a peer until the connection ends; returns why it ended.
    fn read_peer(&self, i: usize, conn: &Conn, mut reader: FrameReader, mut opener: Option<Opener>) -> String {
        if let Err(e) = conn.stream.set_read_timeout(Some(TICK)) {
            return e.to_string();
        }
        loop {
            loop {
                match reader.next_message::<PeerMessage>() {
                    Ok(Some(msg)) => {
                        if let Some(end) = self.on_peer_message(i, conn, msg) {
                            return end;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let reason = format!("bad frame: {e}");
                        conn.send(&PeerMessage::Bye { reason: reason.clone() });
                        return reason;
                    }
                }
            }
            if self.stopping() {
                return "daemon stopping".into();
            }
            let filled = match &mut opener {
                Some(o) => reader.fill(&mut o.on(&mut &*conn.stream)),
                None => reader.fill(&mut &*conn.stream),
            };
            match filled {
                Ok(Fill::Closed) => return "connection closed by peer".into(),
                Ok(_) => {}
                Err(e) => return format!("connection failed: {e}"),
            }
        }
    }

    /// Handles one frame; `Some(reason)` ends the connection.
    fn on_peer_message(&self, i: usize, conn: &Conn, msg: PeerMessage) -> Option<String> {
        let host = {
            let mut st = self.lock();
            match &st.peers[i].conn {
                Some(c) if c.generation == conn.generation => {}
                _ => return Some("replaced by a newer connection".into()),
            }
            st.peers[i].last_heard = Some(Instant::now());
            st.peers[i].entry.name.clone()
        };
        match msg {
            PeerMessage::Heartbeat => None,
            PeerMessage::Query { id, query } => {
                let answer = self.answer_locally(&host, &query, conn.generation);
                let granted = match &answer {
                    Answer::Granted { grant } => Some(grant.grant),
                    _ => None,
                };
                if !conn.send(&PeerMessage::Answer { id, answer }) {
                    if let Some(g) = granted {
                        self.release_grant(g, Some(&host), false); // it will never hear of it
                    }
                    return Some("cannot queue an answer: connection stalled".into());
                }
                None
            }
            PeerMessage::Answer { id, answer } => {
                let waiting = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                match (waiting, answer) {
                    (Some(p), answer) => {
                        if let Err(mpsc::SendError(Answer::Granted { grant })) = p.answer.send(answer) {
                            // The asker gave up meanwhile: nobody holds the grant.
                            conn.send(&PeerMessage::Release { grant: grant.grant, died: false });
                        }
                    }
                    (None, Answer::Granted { grant }) => {
                        // Answered after the asker's timeout: give the slot back.
                        conn.send(&PeerMessage::Release { grant: grant.grant, died: false });
                    }
                    (None, _) => {}
                }
                None
            }
            PeerMessage::Release { grant, died } => {
                self.release_grant(grant, Some(&host), died);
                None
            }
            PeerMessage::GrantStatus { grant, status } => {
                self.tell_requester(grant, Some(&host), status);
                None
            }
            PeerMessage::Holding { grants } => {
                self.reconcile(&host, conn, &grants);
                None
            }
            PeerMessage::Bye { reason } => Some(format!("peer said goodbye: {reason}")),
            PeerMessage::Hello { .. } => Some("a second hello on one connection".into()),
            PeerMessage::Auth { .. } => Some("a proof outside the hello exchange".into()),
        }
    }

    fn connection_ended(&self, i: usize, generation: u64, reason: &str) {
        let mut st = self.lock();
        let current = st.peers[i].conn.as_ref().is_some_and(|c| c.generation == generation);
        if !current {
            return;
        }
        if let Some(c) = st.peers[i].conn.take() {
            c.close();
        }
        if self.stopping() {
            return;
        }
        let host_answers = reason == "connection closed by peer" || reason.contains("reset by peer");
        if st.peers[i].state == HostState::Operational && host_answers {
            // Its daemon died (or restarts) on a host whose kernel still closed the
            // connection: the host's processes and the data between them live on. The host
            // stays Operational while it keeps answering connects (`probe_loop`, or the
            // dialler's refused dials), Suspect after `suspect_after` of silence as ever.
            st.peers[i].away = true;
            st.peers[i].away_since = Instant::now();
            st.peers[i].last_heard = Some(Instant::now());
            let name = st.peers[i].entry.name.clone();
            self.log(format_args!("host {name}: host daemon restarting? ({reason}); its host still answers"));
        } else if st.peers[i].state == HostState::Operational {
            self.set_state(&mut st, i, HostState::Suspect, reason);
        } else {
            let name = st.peers[i].entry.name.clone();
            self.log(format_args!("host {name}: connection ended: {reason}"));
        }
    }

    // -----------------------------------------------------------------------------------
    // Questions
    // -----------------------------------------------------------------------------------

    /// Answers a question about this host's fabric directory from the daemon of `from`.
    fn answer_locally(&self, from: &str, query: &Query, generation: u64) -> Answer {
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

    fn lookup_local(&self, node: u32, kind: ObjectKind, id: u32) -> std::result::Result<ObjectInfo, Refusal> {
        self.open_live(node, kind, id).map(|(_, info)| info)
    }

    /// Opens a live object of this host's fabric directory, judged as `connect_segment`
    /// judges it: a removed object, or the leftover of a dead owner, is as good as absent.
    fn open_live(
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
    fn status_of(&self, file: &SegmentFile, node: u32) -> GrantStatus {
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

    fn processes_of(&self, node: u32) -> u32 {
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

    // -----------------------------------------------------------------------------------
    // Grants: the owner's side
    // -----------------------------------------------------------------------------------

    /// Claims a connection slot of object (`kind`, `node`, `id`) of this host for a process
    /// acting as `peer_node` on `peer_host`, as the shm transport's connect claims one for
    /// itself, and returns the grant with the owner's export record.
    fn connect_local(
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
    fn release_grant(&self, grant: u64, from: Option<&str>, died: bool) {
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
    fn release_host(&self, host: &str) {
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
    fn watch_grants(&self) {
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
                let peer = st.peers.iter().find(|p| p.entry.name == host);
                peer.and_then(|p| p.conn.as_ref()).is_some_and(|c| c.send(&PeerMessage::GrantStatus { grant, status }))
            };
            if told {
                if let Some(h) = self.grants_lock().held.get_mut(&grant) {
                    h.reported = status;
                }
                self.log(format_args!("grant {grant:016x}: told host {host} its object is {status:?}"));
            }
        }
    }

    /// Passes a grant's new status to the subscription its local holder named, if the grant
    /// came from `from` (None: this host).
    fn tell_requester(&self, grant: u64, from: Option<&str>, status: GrantStatus) {
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

    /// Releases every slot held (the daemon stops).
    fn release_all(&self) {
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
    fn adopt(
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
    fn reconcile(&self, host: &str, conn: &Conn, listed: &[HeldGrant]) {
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
    fn sweep_orphans(&self, of_host: impl Fn(&str) -> bool) {
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

    /// Every object of this host's fabric directory: (layout kind, node, id).
    fn objects(&self) -> Vec<(u32, u32, u32)> {
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

    /// Tells every connected host which of its grants this host's processes hold, once per
    /// connection, once processes of an earlier daemon had time to register again.
    fn send_holdings(&self) {
        let due: Vec<(usize, String, Conn)> = {
            let st = self.lock();
            st.peers
                .iter()
                .enumerate()
                .filter(|(_, p)| p.state == HostState::Operational)
                .filter_map(|(i, p)| Some((i, p.entry.name.clone(), p.conn.clone()?)))
                .filter(|(i, _, c)| st.peers[*i].holding_sent != Some(c.generation))
                .collect()
        };
        for (i, host, conn) in due {
            let grants: Vec<HeldGrant> = self
                .requested_lock()
                .values()
                .filter(|r| r.host.as_deref() == Some(host.as_str()))
                .map(|r| r.held.clone())
                .collect();
            if conn.send(&PeerMessage::Holding { grants }) {
                self.lock().peers[i].holding_sent = Some(conn.generation);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Grants: the requester's side
    // -----------------------------------------------------------------------------------

    /// Connects a local process acting as `peer_node` to object (`kind`, `node`, `id`): here
    /// when the node is this host's, else through the node's host. Returns the grant and the
    /// host that holds it (None: this one).
    fn connect(
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
        let Some(p) = st.peers.iter_mut().find(|p| p.entry.name == host) else { return };
        let sent = p.conn.as_ref().is_some_and(|c| c.send(&PeerMessage::Release { grant, died }));
        if !sent && p.state != HostState::Lost {
            p.owed.push((grant, died));
        }
    }

    /// Releases a grant a local process held; `died`: it went away without disconnecting.
    fn release_requested(&self, grant: u64, host: Option<String>, died: bool) {
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

    /// A node that lanes.toml does not list and that no process acts as on this host: an
    /// answer at once that says so (a listed cluster's unlisted node can only be local).
    fn unlisted(&self, node: u32) -> std::result::Result<(), Refusal> {
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
    fn remote_host_of(&self, node: u32) -> Option<String> {
        let id = NodeId::new(node).ok()?;
        self.cluster.host_of(id).filter(|h| h.name != self.me.name).map(|h| h.name.clone())
    }

    /// Asks the daemon of `host`, waiting at most `timeout`.
    fn forward(&self, host: &str, node: u32, query: Query, timeout: Duration) -> std::result::Result<Answer, Refusal> {
        let started = Instant::now();
        let conn = {
            let st = self.lock();
            let p = st
                .peers
                .iter()
                .find(|p| p.entry.name == host)
                .ok_or_else(|| Refusal::Failed { reason: format!("host {host} is not a peer") })?;
            match (&p.conn, p.state) {
                (Some(c), HostState::Operational) => c.clone(),
                (None, HostState::Operational) if p.away => {
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

    fn lookup(
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

    fn probe(&self, node: u32, timeout: Duration) -> std::result::Result<NodeProbe, Refusal> {
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
        let state = self.lock().peers.iter().find(|p| p.entry.name == host).map_or(HostState::Unknown, |p| p.state);
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

    /// The live reflective groups of this host's fabric directory (any node), judged as a
    /// lookup judges an object.
    fn groups_local(&self) -> Vec<GroupInfo> {
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

    /// Every live reflective group of the cluster: this host's, then each peer's (asked
    /// within `timeout`). A peer that is not operational or does not answer is a refusal.
    fn groups(&self, timeout: Duration) -> std::result::Result<Vec<GroupInfo>, Refusal> {
        let started = Instant::now();
        let mut out = self.groups_local();
        let peers: Vec<(String, u32)> = self
            .lock()
            .peers
            .iter()
            .map(|p| (p.entry.name.clone(), p.entry.nodes.first().map_or(0, |n| n.get())))
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

    fn hosts(&self, st: &State) -> Vec<HostStatus> {
        let now = Instant::now();
        let mut out = vec![HostStatus {
            name: self.me.name.clone(),
            address: self.me.address.to_string(),
            nodes: self.me.nodes.iter().map(|n| n.get()).collect(),
            local: true,
            state: HostState::Operational,
            state_for_ms: millis(self.started.elapsed()),
            last_heard_ms: None,
        }];
        out.extend(st.peers.iter().map(|p| HostStatus {
            name: p.entry.name.clone(),
            address: p.entry.address.to_string(),
            nodes: p.entry.nodes.iter().map(|n| n.get()).collect(),
            local: false,
            state: p.state,
            state_for_ms: millis(now.saturating_duration_since(p.since)),
            last_heard_ms: p.last_heard.map(|t| millis(now.saturating_duration_since(t))),
        }));
        out
    }

    // -----------------------------------------------------------------------------------
    // Local processes
    // -----------------------------------------------------------------------------------

    fn accept_local(self: Arc<Self>, listener: UnixListener) {
        for stream in listener.incoming() {
            if self.stopping() {
                return;
            }
            let mut stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    self.log(format_args!("accepting a local process: {e}"));
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            if self.clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
                self.clients.fetch_sub(1, Ordering::SeqCst);
                let _ = stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
                let reason = format!("the daemon serves {MAX_CLIENTS} processes already");
                let _ = write_message(&mut stream, &Reply::Error { reason });
                continue;
            }
            let s = self.clone();
            let spawned = std::thread::Builder::new().name("lanes-d-client".into()).spawn(move || {
                if let Err(reason) = s.serve_client(stream) {
                    s.log(format_args!("local process: {reason}"));
                }
                s.clients.fetch_sub(1, Ordering::SeqCst);
            });
            if let Err(e) = spawned {
                self.clients.fetch_sub(1, Ordering::SeqCst);
                self.log(format_args!("cannot serve a local process: {e}"));
            }
        }
    }

    /// Serves one process's requests until it hangs up; `Err` says why it was cut off.
    fn serve_client(&self, mut stream: UnixStream) -> std::result::Result<(), String> {
        // Whatever way this ends, the grants the process holds end with its connection.
        let client = ClientGrants { shared: self, id: self.next_id.fetch_add(1, Ordering::Relaxed) };
        stream.set_read_timeout(Some(TICK)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT)).map_err(|e| e.to_string())?;
        let mut reader = FrameReader::new();
        loop {
            let request = loop {
                match reader.next_message::<Request>() {
                    Ok(Some(r)) => break r,
                    Ok(None) => {}
                    Err(e) => {
                        let reason = format!("bad request: {e}");
                        let _ = write_message(&mut stream, &Reply::Error { reason: reason.clone() });
                        return Err(reason);
                    }
                }
                if self.stopping() {
                    return Ok(());
                }
                match reader.fill(&mut stream) {
                    Ok(Fill::Closed) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            };
            let wait = |ms: u64| Duration::from_millis(ms).min(MAX_REQUEST_WAIT);
            let reply = match request {
                Request::Hello { .. } => {
                    Reply::Hello { version: PROTOCOL_VERSION, host: self.me.name.clone(), boot: self.boot }
                }
                Request::Lookup { node, kind, id, timeout_ms } => {
                    Reply::Lookup { result: self.lookup(node, kind, id, wait(timeout_ms)) }
                }
                Request::Probe { node, timeout_ms } => Reply::Probe { result: self.probe(node, wait(timeout_ms)) },
                Request::Connect { node, kind, id, peer_node, timeout_ms, notify } => {
                    let result = self.connect(node, kind, id, peer_node, wait(timeout_ms));
                    if let Ok((grant, host)) = &result {
                        let held = HeldGrant { grant: grant.grant, node, kind, id, slot: grant.slot, peer_node };
                        let held = Requested { client: client.id, host: host.clone(), held, notify };
                        self.requested_lock().insert(grant.grant, held);
                    }
                    Reply::Connect { result: result.map(|(grant, _)| grant) }
                }
                Request::Adopt { grant, notify } => {
                    // A process of an earlier daemon registers a grant again: ours to take
                    // over for a local object, else the object's host's (told in `Holding`;
                    // one it cannot take over comes back as `Forgotten`).
                    let host = self.remote_host_of(grant.node);
                    let result = match &host {
                        None => self
                            .adopt(&grant, &self.me.name, 0)
                            .map(|_| ())
                            .map_err(|reason| Refusal::Failed { reason }),
                        Some(_) => Ok(()),
                    };
                    if result.is_ok() {
                        let g = grant.grant;
                        self.log(format_args!(
                            "grant {g:016x}: {} {:#x} of node {}: registered again by its holder (node {})",
                            grant.kind, grant.id, grant.node, grant.peer_node
                        ));
                        let held = Requested { client: client.id, host, held: grant, notify };
                        self.requested_lock().insert(g, held);
                    }
                    Reply::Adopted { result }
                }
                Request::Disconnect { grant } => {
                    let mut req = self.requested_lock();
                    let mine = req.get(&grant).is_some_and(|r| r.client == client.id);
                    let held = if mine { req.remove(&grant) } else { None };
                    drop(req);
                    if let Some(r) = held {
                        self.release_requested(grant, r.host, false);
                    }
                    Reply::Disconnected
                }
                Request::Groups { timeout_ms } => Reply::Groups { result: self.groups(wait(timeout_ms)) },
                Request::Cluster => Reply::Cluster { hosts: self.hosts(&self.lock()) },
                Request::Subscribe => return self.serve_subscriber(stream),
            };
            write_message(&mut stream, &reply).map_err(|e| format!("answering: {e}"))?;
        }
    }

    /// Streams node events to a subscribed process until it or the daemon goes away.
    fn serve_subscriber(&self, mut stream: UnixStream) -> std::result::Result<(), String> {
        let (tx, rx): (SyncSender<Reply>, Receiver<Reply>) = mpsc::sync_channel(SUBSCRIBER_QUEUE);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let hosts = {
            let mut st = self.lock();
            st.subscribers.push((id, tx));
            self.hosts(&st)
        };
        let result = (|| {
            write_message(&mut stream, &Reply::Subscribed { hosts, subscriber: id }).map_err(|e| e.to_string())?;
            loop {
                let msg = match rx.recv_timeout(KEEPALIVE) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => Reply::KeepAlive,
                    Err(RecvTimeoutError::Disconnected) => return Ok(()), // stopping, or dropped as too slow
                };
                if self.stopping() {
                    return Ok(());
                }
                if let Err(e) = write_message(&mut stream, &msg) {
                    return match e.kind() {
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Ok(()),
                        _ => Err(format!("subscriber: {e}")),
                    };
                }
            }
        })();
        self.lock().subscribers.retain(|(i, _)| *i != id);
        result
    }
}

/// The grants of one local process's connection, released when it ends.
struct ClientGrants<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for ClientGrants<'_> {
    fn drop(&mut self) {
        self.shared.release_client(self.id);
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

/// The frames read during a handshake (a peer may send more right after its hello), the
/// host that said hello and, on a keyed link, its session.
struct HandshakeReader {
    frames: FrameReader,
    host: String,
    /// The link's session (keyed clusters): frames out are sealed, frames in opened.
    link: Option<Sealed>,
    opener: Option<Opener>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::client::Client;
    use crate::cluster::config::ClusterSection;
    use crate::config::NodeEntry;
    use crate::transport::shm::layout::kind;

    /// Sends a plaintext hello naming `host` to the daemon at `addr` and returns its answer
    /// (a goodbye is expected: keyed daemons and unknown hosts get one).
    fn plaintext_hello(addr: std::net::SocketAddr, host: &str, boot: u64) -> PeerMessage {
        let mut t = TcpStream::connect(addr).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let hello = PeerMessage::Hello {
            version: PROTOCOL_VERSION,
            host: host.into(),
            boot,
            nodes: vec![],
            nonce: None,
            proof: None,
            host_epoch: String::new(),
        };
        write_message(&mut t, &hello).unwrap();
        let mut r = FrameReader::new();
        loop {
            if let Some(m) = r.next_message::<PeerMessage>().unwrap() {
                return m;
            }
            assert_ne!(r.fill(&mut t).unwrap(), Fill::Closed, "closed without a goodbye");
        }
    }

    /// `n` distinct free ports (the listeners are held until all are picked).
    fn free_ports(n: usize) -> Vec<u16> {
        let held: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        held.iter().map(|l| l.local_addr().unwrap().port()).collect()
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lanes-daemon-unit-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    /// A cluster of `hosts` on 127.0.0.1, each on its own free port.
    fn cluster(hosts: &[&str]) -> ClusterConfig {
        let section = ClusterSection {
            heartbeat_ms: Some(20),
            suspect_after_ms: Some(150),
            lost_after_ms: Some(600),
            ..Default::default()
        };
        let nodes: Vec<NodeEntry> = hosts
            .iter()
            .zip(free_ports(hosts.len()))
            .enumerate()
            .map(|(k, (h, port))| NodeEntry {
                id: 8 + 4 * k as u32,
                host: h.to_string(),
                address: Some(format!("127.0.0.1:{port}")),
                public_key: None,
            })
            .collect();
        ClusterConfig::build(&section, &nodes).unwrap()
    }

    #[test]
    fn two_daemons_in_one_process_see_each_other_and_notice_a_stop() {
        let c = cluster(&["a", "b"]);
        let (da, db) = (scratch("a"), scratch("b"));
        let a = Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.clone(), key_file: None })
            .unwrap();
        let b = Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.clone(), key_file: None })
            .unwrap();
        let mode = fs::metadata(a.socket()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A second daemon on the same directory is refused.
        let again =
            Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.clone(), key_file: None });
        assert!(matches!(again, Err(Error::AlreadyRunning { .. })), "{again:?}");
        let mut client = Client::connect(&da, Duration::from_secs(2)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let hosts = client.cluster(Duration::from_secs(1)).unwrap();
            if hosts.iter().find(|h| h.name == "b").unwrap().state == HostState::Operational {
                break;
            }
            assert!(Instant::now() < deadline, "b never operational: {hosts:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        let socket_b = b.socket().to_path_buf();
        b.stop();
        assert!(!socket_b.exists(), "the socket is removed");
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let hosts = client.cluster(Duration::from_secs(1)).unwrap();
            // Suspect at its goodbye; Lost if its connection had closed just before (then
            // the goodbye never came, and a stopped daemon stays away).
            if hosts.iter().find(|h| h.name == "b").unwrap().state != HostState::Operational {
                break;
            }
            assert!(Instant::now() < deadline, "b's stop not noticed: {hosts:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(a);
        let _ = fs::remove_dir_all(&da);
        let _ = fs::remove_dir_all(&db);
    }

    /// A daemon whose directory was removed under it (its socket file gone, as when a test
    /// harness cleans up first) still stops when asked, and promptly.
    #[test]
    fn a_daemon_stops_after_its_directory_is_removed() {
        let c = cluster(&["a"]);
        let d = scratch("removed");
        let a = Daemon::start(DaemonOptions { cluster: c, host: "a".into(), dir: d.clone(), key_file: None }).unwrap();
        fs::remove_dir_all(&d).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            a.stop();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(5)).expect("the daemon stopped");
    }

    /// With `[cluster] secret_file`, daemons that share the secret talk; one with another
    /// secret or none, and a stranger that cannot answer the challenge, are refused at the
    /// hello with a goodbye saying why.
    #[test]
    fn daemons_prove_the_cluster_secret_before_they_talk() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("secret");
        fs::create_dir_all(&dir).unwrap();
        let write_secret = |name: &str, text: &str| {
            let p = dir.join(name);
            fs::write(&p, text).unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
            p
        };
        let (good, wrong) =
            (write_secret("good", "one secret, long enough"), write_secret("wrong", "another secret, as long"));
        let base = cluster(&["a", "b", "c"]);
        let with = |secret: Option<&PathBuf>| ClusterConfig { secret_file: secret.cloned(), ..base.clone() };
        let start = |host: &str, secret: Option<&PathBuf>| {
            let d = dir.join(host);
            Daemon::start(DaemonOptions { cluster: with(secret), host: host.into(), dir: d, key_file: None }).unwrap()
        };
        let a = start("a", Some(&good));
        let b = start("b", Some(&good));
        let mut client = Client::connect(&dir.join("a"), Duration::from_secs(2)).unwrap();
        wait_operational(&mut client, "b");
        let state_of_c = |client: &mut Client| {
            let hosts = client.cluster(Duration::from_secs(1)).unwrap();
            hosts.iter().find(|h| h.name == "c").unwrap().state
        };
        for secret in [Some(&wrong), None] {
            let c = start("c", secret);
            std::thread::sleep(Duration::from_millis(500)); // many dial attempts (heartbeat 20 ms)
            assert_eq!(state_of_c(&mut client), HostState::Unknown, "c with secret {secret:?} was let in");
            c.stop();
        }

        // A stranger posing as c: no challenge, then a wrong answer.
        let hello = |nonce: Option<String>| PeerMessage::Hello {
            version: PROTOCOL_VERSION,
            host: "c".into(),
            boot: 1,
            nodes: vec![16],
            nonce,
            proof: None,
            host_epoch: String::new(),
        };
        let goodbye = |t: &mut TcpStream| {
            let mut r = FrameReader::new();
            loop {
                match r.next_message::<PeerMessage>().unwrap() {
                    Some(PeerMessage::Bye { reason }) => return reason,
                    Some(_) => continue,
                    None => assert_ne!(r.fill(t).unwrap(), Fill::Closed, "closed without a goodbye"),
                }
            }
        };
        let mut t = TcpStream::connect(a.address()).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        write_message(&mut t, &hello(None)).unwrap();
        assert!(goodbye(&mut t).contains("did not offer to prove"));
        let mut t = TcpStream::connect(a.address()).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        write_message(&mut t, &hello(Some(ClusterSecret::nonce()))).unwrap();
        write_message(&mut t, &PeerMessage::Auth { proof: "00".repeat(32) }).unwrap();
        assert!(goodbye(&mut t).contains("did not prove the cluster secret"));
        assert_eq!(state_of_c(&mut client), HostState::Unknown);

        // A readable secret is a configuration error naming the file.
        fs::set_permissions(&good, fs::Permissions::from_mode(0o640)).unwrap();
        let e = Daemon::start(DaemonOptions {
            cluster: with(Some(&good)),
            host: "c".into(),
            dir: dir.join("c"),
            key_file: None,
        })
        .unwrap_err();
        assert!(e.to_string().contains("mode 640"), "{e}");
        drop((a, b));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A cluster of `hosts` on 127.0.0.1 with a host key each (files in `dir`).
    fn keyed_cluster(hosts: &[&str], dir: &Path) -> (ClusterConfig, Vec<PathBuf>) {
        let mut c = cluster(hosts);
        let files: Vec<PathBuf> = hosts.iter().map(|h| dir.join(format!("{h}.key"))).collect();
        for (h, f) in c.hosts.iter_mut().zip(&files) {
            h.public_key = Some(*HostKey::create(f).unwrap().public());
        }
        assert!(c.keyed());
        (c, files)
    }

    /// Dials `addr` as host `name` with `key`, as a daemon would; returns every byte sent
    /// (for a replay) and the acceptor's first sealed message, or the error.
    fn dial_as(addr: SocketAddr, key: &HostKey, name: &str) -> (Vec<u8>, std::result::Result<PeerMessage, String>) {
        let deadline = Instant::now() + Duration::from_secs(3);
        let stream = TcpStream::connect(addr).unwrap();
        let mut sent = link::preamble(PROTOCOL_VERSION).to_vec();
        let mut hs = link::handshake_state(key, None, true).unwrap();
        let mut msg = vec![0u8; link::MAX_RECORD];
        let n = hs.write_message(&[], &mut msg).unwrap();
        sent.extend_from_slice(&(n as u16).to_be_bytes());
        sent.extend_from_slice(&msg[..n]);
        (&stream).write_all(&sent).unwrap();
        if let Err(e) = link::read_handshake(&mut hs, &stream, deadline, "second message") {
            return (sent, Err(e));
        }
        let hello = PeerMessage::Hello {
            version: PROTOCOL_VERSION,
            host: name.into(),
            boot: 7,
            nodes: vec![],
            nonce: None,
            proof: None,
            host_epoch: String::new(),
        };
        let n = hs.write_message(&encode(&hello).unwrap(), &mut msg).unwrap();
        sent.extend_from_slice(&(n as u16).to_be_bytes());
        sent.extend_from_slice(&msg[..n]);
        link::write_record(&mut &stream, &msg[..n]).unwrap();
        let sealed = Sealed::new(hs).unwrap();
        let mut opener = sealed.opener();
        let mut frames = FrameReader::new();
        loop {
            if let Some(m) = frames.next_message::<PeerMessage>().unwrap() {
                return (sent, Ok(m));
            }
            stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            match frames.fill(&mut opener.on(&mut &stream)) {
                Ok(Fill::Closed) => return (sent, Err("closed".into())),
                Ok(_) => {}
                Err(e) => return (sent, Err(e.to_string())),
            }
        }
    }

    fn status_of_host(client: &mut Client, host: &str) -> HostStatus {
        client.cluster(Duration::from_secs(1)).unwrap().into_iter().find(|h| h.name == host).unwrap()
    }

    /// With host keys: daemons talk over sealed links; a stranger's key, an impostor with
    /// the right name and a wrong key, and a replayed handshake are refused, and none of them
    /// changes what the daemon knows of the real host.
    #[test]
    fn host_keys_authenticate_links_and_refuse_impostors_and_replays() {
        let dir = scratch("keys");
        fs::create_dir_all(&dir).unwrap();
        let (c, keys) = keyed_cluster(&["a", "b", "c"], &dir);
        let start = |host: &str, k: usize| {
            let o = DaemonOptions {
                cluster: c.clone(),
                host: host.into(),
                dir: dir.join(host),
                key_file: Some(keys[k].clone()),
            };
            Daemon::start(o).unwrap()
        };
        let a = start("a", 0);
        let b = start("b", 1);
        let mut client = Client::connect(&dir.join("a"), Duration::from_secs(2)).unwrap();
        wait_operational(&mut client, "b");
        let before = status_of_host(&mut client, "b");

        // An impostor calling itself b (which is up) with its own key.
        let stranger = HostKey::generate().unwrap();
        let (_, answer) = dial_as(a.address(), &stranger, "b");
        let answer = answer.unwrap();
        assert!(matches!(&answer, PeerMessage::Bye { reason } if reason.contains("not host b's key")), "{answer:?}");
        // One with c's name and a's key (a key lanes.toml lists for another host).
        let a_key = HostKey::load(&keys[0]).unwrap();
        let (_, answer) = dial_as(b.address(), &a_key, "c");
        assert!(matches!(&answer, Ok(PeerMessage::Bye { reason }) if reason.contains("host a's")), "{answer:?}");
        // A host that lanes.toml does not list.
        let (_, answer) = dial_as(a.address(), &stranger, "zz");
        assert!(matches!(&answer, Ok(PeerMessage::Bye { reason }) if reason.contains("not a peer")), "{answer:?}");
        // A plaintext hello.
        let bye = plaintext_hello(a.address(), "b", 9);
        assert!(matches!(&bye, PeerMessage::Bye { reason } if reason.contains("plaintext hello")), "{bye:?}");
        let after = status_of_host(&mut client, "b");
        assert_eq!(after.state, HostState::Operational);
        assert!(after.state_for_ms >= before.state_for_ms, "b's state never changed: {before:?} then {after:?}");

        // c's real key, while c's daemon is down: the test is c, then replays its handshake.
        let c_key = HostKey::load(&keys[2]).unwrap();
        let (sent, answer) = dial_as(a.address(), &c_key, "c");
        assert!(matches!(&answer, Ok(PeerMessage::Hello { host, .. }) if host == "a"), "{answer:?}");
        // It was operational for a moment (the test sends no heartbeats): wait until a has
        // given up on it, then replay what the test sent on a new connection.
        let deadline = Instant::now() + Duration::from_secs(5);
        while status_of_host(&mut client, "c").state != HostState::Lost {
            assert!(Instant::now() < deadline, "the test's c never went lost");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut t = TcpStream::connect(a.address()).unwrap();
        t.write_all(&sent).unwrap(); // preamble, message 1 and the recorded message 3
        t.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = Vec::new();
        let _ = io::Read::read_to_end(&mut t, &mut buf); // a closes it
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(status_of_host(&mut client, "c").state, HostState::Lost, "the replay was let in");
        assert_eq!(status_of_host(&mut client, "b").state, HostState::Operational);

        // A daemon whose key file is not the key lanes.toml lists for its host.
        let o =
            DaemonOptions { cluster: c.clone(), host: "c".into(), dir: dir.join("c"), key_file: Some(keys[1].clone()) };
        let e = Daemon::start(o).unwrap_err().to_string();
        assert!(e.contains("not the public_key lanes.toml lists for host c"), "{e}");
        drop((a, b));
        let _ = fs::remove_dir_all(&dir);
    }

    fn wait_operational(client: &mut Client, host: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let hosts = client.cluster(Duration::from_secs(1)).unwrap();
            if hosts.iter().find(|h| h.name == host).unwrap().state == HostState::Operational {
                return;
            }
            assert!(Instant::now() < deadline, "{host} never operational: {hosts:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends one request on a raw socket and reads one reply.
    fn raw_call(socket: &Path, req: &Request) -> Reply {
        let mut u = UnixStream::connect(socket).unwrap();
        u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write_message(&mut u, req).unwrap();
        let mut r = FrameReader::new();
        loop {
            if let Some(m) = r.next_message::<Reply>().unwrap() {
                return m;
            }
            assert_ne!(r.fill(&mut u).unwrap(), Fill::Closed, "closed without a reply");
        }
    }

    fn export_of(fabric: &crate::Fabric, dir: &Path, id: u32, epoch: u64) -> exports::ExportRecord {
        let me = ProcessIdentity::current().unwrap();
        let rec = exports::ExportRecord {
            in_place: false,
            kind: ObjectKind::Segment,
            node: fabric.node_id().get(),
            id,
            owner_pid: me.pid(),
            owner_identity: me.bits(),
            provider: "tcp;ofi_rxm".into(),
            endpoint: "c0ffee00".into(),
            key: 42,
            base: 0x1000,
            len: 8192,
            handle: 1,
            epoch,
            slot_keys: Vec::new(),
        };
        exports::publish(dir, &rec).unwrap();
        rec
    }

    /// The owner's side and the requester's side of grants, both daemons and the owner in
    /// this process: a connect from host b to a segment of node 8 on host a claims a slot the
    /// owner sees as node 12 connecting; disconnecting, dropping the client and stopping the
    /// requester's daemon release it; refusals name the reason.
    /// With slot keys in the record (revocation), a grant carries the key the owner made for
    /// the claim of its slot from that slot's generation, and a slot whose key is older
    /// than its last claim is not granted: the next one is, or none (not available) while
    /// the owner has not renewed it.
    #[test]
    fn grants_carry_the_key_of_their_slots_claim() {
        use crate::cluster::exports::SlotKey;
        let c = cluster(&["a", "b"]);
        let (da, db) = (scratch("slotkey-a"), scratch("slotkey-b"));
        let _a = Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.clone(), key_file: None })
            .unwrap();
        let _b = Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.clone(), key_file: None })
            .unwrap();
        let t = Duration::from_secs(2);
        let mut cb = Client::connect(&db, t).unwrap();
        wait_operational(&mut cb, "a");
        let owner = crate::Fabric::open_with(crate::FabricConfig::new(&da, NodeId::new(8).unwrap())).unwrap();
        let (n8, n12) = (NodeId::new(8).unwrap(), NodeId::new(12).unwrap());
        let s = owner.create_segment(0x12, 4096).unwrap();
        s.prepare().unwrap();
        s.set_available().unwrap();
        let mut rec = export_of(&owner, &da, 0x12, 3);
        rec.slot_keys =
            vec![SlotKey { slot: 0, generation: 0, key: 100 }, SlotKey { slot: 1, generation: 0, key: 101 }];
        exports::publish(&da, &rec).unwrap();

        let g = cb.connect_object(n8, ObjectKind::Segment, 0x12, n12, t).unwrap();
        assert_eq!((g.slot, g.export.key), (0, 100));
        assert!(g.export.slot_keys.is_empty(), "a holder learns its own key only");
        cb.disconnect_object(g.grant, t).unwrap();
        // Slot 0 is free again, but its key was for the claim that is over: slot 1's.
        let deadline = Instant::now() + t;
        let g = loop {
            let g = cb.connect_object(n8, ObjectKind::Segment, 0x12, n12, t).unwrap();
            if g.slot != 0 {
                break g;
            }
            // The release had not reached the owner's daemon yet: the same claim.
            assert!(Instant::now() < deadline, "slot 0 granted again with its old key");
            cb.disconnect_object(g.grant, t).unwrap();
        };
        assert_eq!((g.slot, g.export.key), (1, 101));
        // No slot with a current key: wait (not available), not "too many connections".
        let e = cb.connect_object(n8, ObjectKind::Segment, 0x12, n12, t).unwrap_err();
        assert!(e.is_not_available(), "{e:?}");
        cb.disconnect_object(g.grant, t).unwrap();
    }

    #[test]
    fn grants_claim_and_release_slots_for_remote_peers() {
        use crate::fabric::LocalEvent;
        use crate::{Fabric, FabricConfig, Timeout};
        let c = cluster(&["a", "b"]);
        let (da, db) = (scratch("grant-a"), scratch("grant-b"));
        let a = Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.clone(), key_file: None })
            .unwrap();
        let b = Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.clone(), key_file: None })
            .unwrap();
        let t = Duration::from_secs(2);
        let mut cb = Client::connect(&db, t).unwrap();
        wait_operational(&mut cb, "a");
        let owner = Fabric::open_with(FabricConfig::new(&da, NodeId::new(8).unwrap())).unwrap();
        let me = std::process::id();
        let (n8, n12) = (NodeId::new(8).unwrap(), NodeId::new(12).unwrap());
        let seg = ObjectKind::Segment;

        // Refusals before the object can be reached.
        let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        let s = owner.create_segment(0x10, 8192).unwrap();
        let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
        assert!(e.is_not_available(), "not available yet: {e:?}");
        s.prepare().unwrap();
        s.set_available().unwrap();
        let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
        assert!(e.is_not_available(), "not exported yet: {e:?}");
        let mut stale = export_of(&owner, &da, 0x10, 1);
        stale.owner_identity ^= 1 << 40; // an earlier owner's record
        exports::publish(&da, &stale).unwrap();
        let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
        assert!(e.is_not_available(), "a stale export: {e:?}");
        assert!(cb.is_usable(), "refusals keep the connection");

        // Granted: the owner sees node 12 connect, as this process (the daemon's identity).
        let rec = export_of(&owner, &da, 0x10, 2);
        let g = cb.connect_object(n8, seg, 0x10, n12, t).unwrap();
        assert_eq!(g.export, rec);
        assert_eq!((g.info.host.as_str(), g.info.size, g.info.owner_pid), ("a", 8192, me));
        assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
        assert_eq!(s.connected_peers(), vec![(12, me)]);
        assert!(da.join("procs").join(format!("12-{me}")).exists(), "the proxy record");
        cb.disconnect_object(g.grant, t).unwrap();
        let ev = s.wait_event(Timeout::After(t)).unwrap();
        assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: false });
        // The release is fire and forget: the record goes just after the slot.
        let deadline = Instant::now() + t;
        while da.join("procs").join(format!("12-{me}")).exists() {
            assert!(Instant::now() < deadline, "no grants, but the proxy record stays");
            std::thread::sleep(Duration::from_millis(5));
        }
        cb.disconnect_object(g.grant, t).unwrap(); // twice: nothing

        // A connection that closes releases its grants, as its holder's death.
        let mut other = Client::connect(&db, t).unwrap();
        let g2 = other.connect_object(n8, seg, 0x10, n12, t).unwrap();
        assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
        cb.disconnect_object(g2.grant, t).unwrap(); // not cb's: ignored
        assert_eq!(s.connected_peers().len(), 1);
        drop(other);
        let ev = s.wait_event(Timeout::After(t)).unwrap();
        assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: true });

        // A node of this host connects without forwarding.
        let mut ca = Client::connect(&da, t).unwrap();
        let g3 = ca.connect_object(n8, seg, 0x10, n8, t).unwrap();
        assert_eq!(g3.export, rec);
        assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 8, pid: me });
        ca.disconnect_object(g3.grant, t).unwrap();
        let ev = s.wait_event(Timeout::After(t)).unwrap();
        assert_eq!(ev, LocalEvent::Disconnected { node: 8, pid: me, died: false });

        // Every slot taken.
        let file = SegmentFile::open(&FabricPaths::new(&da), kind::SEGMENT, 8, 0x10).unwrap();
        let holder = ProcessIdentity::current().unwrap();
        let mut slots = Vec::new();
        while let Some(i) = file.header().claim_slot(holder, 40, |_, _| false) {
            slots.push(i);
        }
        let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
        assert!(matches!(e, Error::Refused(Refusal::TooManyConnections { node: 8, .. })), "{e:?}");
        for i in slots {
            file.header().release_slot(i, holder);
        }
        while s.wait_event(Timeout::Immediate).is_ok() {}

        // Bad node ids, and a requester claiming to be another host's node.
        for (node, peer_node) in [(7, 12), (8, 0), (8, 8)] {
            let req = Request::Connect { node, kind: seg, id: 0x10, peer_node, timeout_ms: 1000, notify: None };
            let reply = raw_call(b.socket(), &req);
            assert!(matches!(reply, Reply::Connect { result: Err(Refusal::Failed { .. }) }), "{reply:?}");
        }

        // Stopping the requester's daemon releases what its processes held.
        let _g4 = cb.connect_object(n8, seg, 0x10, n12, t).unwrap();
        assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
        b.stop();
        let ev = s.wait_event(Timeout::After(t)).unwrap();
        assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: false });

        // The owner's host unreachable.
        let b = Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.clone(), key_file: None })
            .unwrap();
        let mut cb = Client::connect(&db, t).unwrap();
        wait_operational(&mut cb, "a");
        let _g5 = cb.connect_object(n8, seg, 0x10, n12, t).unwrap();
        assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
        a.stop(); // releases the slots it claimed
        let ev = s.wait_event(Timeout::After(t)).unwrap();
        assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: false });
        let deadline = Instant::now() + Duration::from_secs(5);
        let e = loop {
            let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
            if matches!(e, Error::Refused(Refusal::HostUnreachable { .. })) || Instant::now() > deadline {
                break e;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(matches!(&e, Error::Refused(Refusal::HostUnreachable { host, .. }) if host == "a"), "{e:?}");
        drop((s, owner, b));
        let _ = fs::remove_dir_all(&da);
        let _ = fs::remove_dir_all(&db);
    }

    #[test]
    fn strangers_and_garbage_are_refused_without_harm() {
        let c = cluster(&["a", "b"]);
        let da = scratch("garbage");
        let a = Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.clone(), key_file: None })
            .unwrap();
        // Garbage on the TCP port and on the socket: each connection is closed, the daemon lives.
        for junk in [&b"GET / HTTP/1.0\r\n\r\n"[..], &[0xffu8; 64][..]] {
            let mut t = TcpStream::connect(a.address()).unwrap();
            t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            t.write_all(junk).unwrap();
            let mut buf = Vec::new();
            let _ = io::Read::read_to_end(&mut t, &mut buf); // ends: the daemon closed it
            let mut u = UnixStream::connect(a.socket()).unwrap();
            u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            u.write_all(junk).unwrap();
            let mut buf = Vec::new();
            let _ = io::Read::read_to_end(&mut u, &mut buf);
        }
        // A hello from a host the cluster does not know.
        let bye = plaintext_hello(a.address(), "zz", 1);
        assert!(matches!(&bye, PeerMessage::Bye { reason } if reason.contains("not a peer")), "{bye:?}");
        let mut client = Client::connect(&da, Duration::from_secs(2)).unwrap();
        assert_eq!(client.cluster(Duration::from_secs(1)).unwrap().len(), 2);
        drop(a);
        let _ = fs::remove_dir_all(&da);
    }
}
