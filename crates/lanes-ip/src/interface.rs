//! The running interface (`lanes ip up`): the TUN device, a transmit and a receive thread
//! per queue, and the control loop that finds peers, sets pairs of rings up and down,
//! follows the carrier and writes the status file.
//!
//! The data path takes no lock but a per-ring mutex that is uncontended when both nodes
//! have as many queues (two transmit threads share a ring only when the receiver has
//! fewer); the peer table is an `Arc` that each thread re-reads when a generation counter
//! moves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use lanes::{
    Fabric, FabricConfig, LocalInterrupt, LocalSegment, Map, MapAccess, RemoteInterrupt, RemoteSegment, RemoteState,
    Timeout,
};

use crate::config::IpConfig;
use crate::ring::{self, Consumer, Hello, Layout, Producer, PushError, MAX_RECORD, VNET_HDR_LEN};
use crate::route::{route, Dest};
use crate::status::{self, Counters, IfaceStatus, PeerStatus};
use crate::tun::Tun;

/// How long a sender waits for room in a full ring before it drops the packet: long enough
/// for a receive thread that was descheduled (a few scheduler slices on a busy machine) to
/// drain it, since a drop costs the TCP flow far more (a retransmission and a halved
/// window); the TUN queue holds what the kernel sends meanwhile.
const FULL_WAIT: Duration = Duration::from_millis(20);
/// The longest a receive thread spins for more packets before it sleeps; its budget adapts
/// between this and [`RX_SPIN_MIN`] (see `rx_loop`).
const RX_SPIN_MAX: Duration = Duration::from_micros(100);
const RX_SPIN_MIN: Duration = Duration::from_micros(5);
/// The receive threads' first budget.
const RX_SPIN_START: Duration = Duration::from_micros(50);
/// The longest a transmit thread spins for the answer to what it sent (see `catch_replies`).
const REPLY_SPIN_MAX: Duration = Duration::from_micros(300);
/// A gap this long between two looks of a spin: the spinner was descheduled, so its CPU is
/// wanted elsewhere; the spin stops.
const PREEMPTED_GAP: Duration = Duration::from_micros(50);
/// Bytes appended to a ring after which they are published without waiting for the end of
/// the batch: a large packet goes at once (the receiver, on the other core, starts on it
/// while the next is read; across hosts the data and the head travel as one write either
/// way), small ones (ACKs, small datagrams) share one head store and one wake-up.
const PUBLISH_AFTER: u64 = 64 << 10;
/// Packets a thread reads from a TUN queue in one go before it looks elsewhere.
const TX_BATCH: usize = 64;
/// The longest sleep of a receive thread.
const RX_SLEEP: Duration = Duration::from_millis(100);
/// Across hosts, a receive thread's first sleep ends after this to look at its rings once
/// more: its sleeping flag and a peer's head may cross in flight (the peer read the flag
/// before it landed, the thread read the heads before the head landed), and the wake-up
/// that neither sent costs this instead of [`RX_SLEEP`].
const RX_RECHECK: Duration = Duration::from_millis(1);
/// The longest a transmit thread waits for its TUN queue before it looks at `stop`.
const TX_SLEEP: Duration = Duration::from_millis(100);
/// The control loop's period.
const TICK: Duration = Duration::from_millis(100);
/// At most one "destination unreachable" per this (1000 a second).
const UNREACHABLE_EVERY: Duration = Duration::from_millis(1);

macro_rules! counters {
    ($($f:ident),*) => {
        #[derive(Default)]
        struct AtomicCounters { $($f: AtomicU64),* }
        impl AtomicCounters {
            fn snapshot(&self) -> Counters {
                Counters { $($f: self.$f.load(Ordering::Relaxed)),* }
            }
        }
    };
}
counters!(
    tx_packets,
    tx_bytes,
    rx_packets,
    rx_bytes,
    drop_full,
    drop_no_peer,
    drop_no_route,
    drop_too_big,
    drop_rejected,
    bad_ring,
    wakeups,
    caught,
    answered,
    unreachable
);

fn bump(c: &AtomicU64, by: u64) {
    c.fetch_add(by, Ordering::Relaxed);
}

/// A connected peer: both pair segments, the maps this node writes through, the peer's
/// interrupts.
struct Peer {
    node: u32,
    hello: RemoteSegment,
    /// What the peer writes for this node (its packets, its tails of this node's rings).
    local: LocalSegment,
    local_map: Map,
    remote: RemoteSegment,
    /// The peer's rings, as this node sends into them.
    tx: Vec<Mutex<Producer>>,
    /// Per receive queue of this node: its return line in the peer's segment.
    returns: Vec<Map>,
    /// The peer's receive interrupts, one per ring.
    wake: Vec<RemoteInterrupt>,
    /// Per ring: the peer's sleep flag value last woken, so that each sleep is woken once
    /// however many batches are published before the peer's "awake" lands.
    woken: Vec<AtomicU32>,
    /// Why the pair must be set up again (a bad word of the peer's, a failed map).
    broken: Mutex<Option<String>>,
    is_broken: AtomicBool,
    /// The peer's host is suspect (not operational): nothing is sent to it or read from it
    /// until it is operational again, when the pair resumes if none of its writes was lost.
    paused: AtomicBool,
    tx_packets: AtomicU64,
    rx_packets: AtomicU64,
}

impl Peer {
    fn fail(&self, why: String) {
        let mut b = self.broken.lock().unwrap_or_else(|e| e.into_inner());
        if b.is_none() {
            *b = Some(why);
        }
        self.is_broken.store(true, Ordering::Release);
    }

    fn broken(&self) -> bool {
        self.is_broken.load(Ordering::Acquire)
    }

    /// Whether packets may move to and from it (connected, neither broken nor paused).
    fn usable(&self) -> bool {
        !self.broken() && !self.paused.load(Ordering::Acquire)
    }

    /// Its state: the worse of its hello's and its ring segment's.
    fn state(&self) -> RemoteState {
        match (self.hello.state(), self.remote.state()) {
            (lost @ RemoteState::Lost(_), _) | (_, lost @ RemoteState::Lost(_)) => lost,
            (RemoteState::Operational, RemoteState::Operational) => RemoteState::Operational,
            _ => RemoteState::NotOperational,
        }
    }

    /// Whether every write of this side's maps of the peer's segment was delivered since
    /// the last look (or since they were made): a pair may resume after a pause only then,
    /// since a write dropped while the host was suspect would leave a ring with a gap.
    fn writes_delivered(&self) -> Result<(), String> {
        for (r, prod) in self.tx.iter().enumerate() {
            lock(prod).flush_checked().map_err(|e| format!("ring {r}: {e}"))?;
        }
        for (q, m) in self.returns.iter().enumerate() {
            m.flush_checked().map_err(|e| format!("return line {q}: {e}"))?;
        }
        Ok(())
    }
}

type Table = Arc<Vec<Arc<Peer>>>;

/// What the thread reading TUN queue `j` holds (under `Shared::tx[j]`): its buffer and its
/// copy of the peer table. Whoever holds it reads the queue, so one flow's packets leave in
/// the order the kernel queued them.
struct TxState {
    buf: Vec<u8>,
    generation: u64,
    table: Table,
    said: bool,
    /// The peer whose ring packets are read into (the last packet's node): its records
    /// appended since the last head store are published when the batch ends or the
    /// destination changes.
    guess: Option<Arc<Peer>>,
}

/// What draining receive queue `q` takes (under `Shared::rx[q]`): the consumers of ring
/// `q` of every peer.
struct RxState {
    generation: u64,
    table: Table,
    list: Vec<RxPeer>,
}

struct Shared {
    cfg: IpConfig,
    node: u32,
    tun: Tun,
    fabric: Fabric,
    interrupts: Vec<LocalInterrupt>,
    table: RwLock<Table>,
    generation: AtomicU64,
    counters: AtomicCounters,
    stop: AtomicBool,
    /// Per queue: reading the TUN queue (the queue's transmit thread, or a receive thread
    /// sending what the kernel answered to the packets it wrote).
    tx: Vec<Mutex<TxState>>,
    /// Per queue: draining its rings (the queue's receive thread, or a transmit thread
    /// waiting for an answer).
    rx: Vec<Mutex<RxState>>,
    /// When a packet was last sent, in nanoseconds since `epoch`.
    last_send_ns: AtomicU64,
    /// How long a transmit thread spins for an answer, in nanoseconds (adapts).
    reply_budget_ns: AtomicU64,
    /// When the last "destination unreachable" was written, in nanoseconds since `epoch`.
    last_unreachable_ns: AtomicU64,
    epoch: Instant,
}

impl Shared {
    /// The current table into `mine` if it changed since `generation`.
    fn refresh(&self, generation: &mut u64, mine: &mut Table) -> bool {
        let g = self.generation.load(Ordering::Acquire);
        if g == *generation {
            return false;
        }
        *generation = g;
        *mine = self.table.read().unwrap_or_else(|e| e.into_inner()).clone();
        true
    }

    fn publish(&self, t: Vec<Arc<Peer>>) {
        *self.table.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// A packet arrived `after` its queue's last send: a spin that long would have caught
    /// it, so the reply budget grows to cover it (with half again to spare), up to
    /// [`REPLY_SPIN_MAX`].
    fn learn_reply(&self, after: Duration) {
        if after < REPLY_SPIN_MAX {
            let want = u64::try_from((after * 3 / 2).min(REPLY_SPIN_MAX).as_nanos()).unwrap_or(0);
            self.reply_budget_ns.fetch_max(want, Ordering::Relaxed);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn try_lock<T>(m: &Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// A peer whose hello is there and whose pair segment is not (yet) usable.
struct Pending {
    hello: RemoteSegment,
    local: LocalSegment,
    local_map: Map,
    /// The last reason its pair could not be set up, said once.
    said: Option<String>,
}

fn log(msg: impl std::fmt::Display) {
    eprintln!("lanes ip: {msg}");
}

/// Sets the interface up as the node `fabric` names and runs it until SIGTERM or SIGINT;
/// then takes it down (the kernel removes the device with the process's descriptors).
/// With `user`, the process becomes that account once the device is set up, and its fabric
/// directory is the one that account's programs use (unless lanes.toml or `LANES_DIR`
/// names one).
pub fn run(cfg: IpConfig, mut fabric: FabricConfig, user: Option<crate::caps::Account>) -> Result<(), String> {
    let signals = lanes::platform::signals::TerminationSignals::install()
        .map_err(|e| format!("catching SIGTERM and SIGINT: {e}"))?;
    let node = fabric.node_id.get();
    let (v4, v6) = cfg.addresses(node)?;
    let tun = Tun::create(&cfg.name, cfg.queues).map_err(|e| e.to_string())?;
    let offloads = tun.set_offloads(cfg.offloads).map_err(|e| e.to_string())?;
    let link_local = IpConfig::link_local(node);
    tun.configure(v4, cfg.ipv4.netmask(), v6, cfg.ipv6.len, link_local, cfg.mtu).map_err(|e| e.to_string())?;
    tun.set_carrier(false).map_err(|e| e.to_string())?;
    if let Err(e) = tun.keep_ipv6_addresses_on_down() {
        log(format!("{e}: taking {} down and up will remove its IPv6 addresses", cfg.name));
    }
    // Everything that needs CAP_NET_ADMIN is done; no thread exists yet, so all go.
    let was = crate::caps::uid();
    crate::caps::drop_all(user.as_ref()).map_err(|e| e.to_string())?;
    if let Some(u) = &user {
        if u.uid != was {
            let file = lanes::config::ConfigFile::load_from_env().map_err(|e| e.to_string())?;
            fabric.dir = lanes::config::fabric_dir(file.as_ref());
            log(format!("running as user {} (uid {}), fabric directory {}", u.name, u.uid, fabric.dir.display()));
        }
    } else if was == 0 {
        log("running as root without capabilities (--user NAME runs it as an unprivileged account instead)");
    }
    let cluster = fabric.cluster.clone();
    let f = Fabric::open_with(fabric).map_err(|e| format!("opening the fabric as node {node}: {e}"))?;
    let mut interrupts = Vec::new();
    for q in 0..cfg.queues {
        let no = ring::INTERRUPT_BASE + q as u32;
        let int = f.create_interrupt(Some(no)).map_err(|e| {
            format!("receive interrupt {no:#x}: {e} (does another `lanes ip up` run as node {node} on this fabric?)")
        })?;
        // The receive thread spins itself (driving the fabric's progress) before it waits.
        int.set_poll_time(Duration::ZERO);
        interrupts.push(int);
    }
    let hello = f.create_segment(ring::HELLO_ID, ring::HELLO_BYTES).map_err(|e| format!("hello segment: {e}"))?;
    let hello_map = hello.map(0, ring::HELLO_BYTES, MapAccess::ReadWrite).map_err(|e| e.to_string())?;
    ring::write_hello(&hello_map, Hello { node, queues: cfg.queues as u32, mtu: cfg.mtu })
        .map_err(|e| e.to_string())?;
    hello.prepare().and_then(|()| hello.set_available()).map_err(|e| e.to_string())?;
    log(format!(
        "{} up as node {node}: {v4}/{}, {v6}/{}, {link_local}/64, mtu {}, {} queue{}, offloads {}",
        cfg.name,
        cfg.ipv4.len,
        cfg.ipv6.len,
        cfg.mtu,
        cfg.queues,
        if cfg.queues == 1 { "" } else { "s" },
        offloads.describe()
    ));
    let empty: Table = Arc::new(Vec::new());
    let tx = (0..cfg.queues)
        .map(|_| {
            Mutex::new(TxState {
                buf: vec![0u8; 2 * MAX_RECORD],
                generation: 0,
                table: empty.clone(),
                said: false,
                guess: None,
            })
        })
        .collect();
    let rx = (0..cfg.queues)
        .map(|_| Mutex::new(RxState { generation: 0, table: empty.clone(), list: Vec::new() }))
        .collect();
    let sh = Arc::new(Shared {
        cfg,
        node,
        tun,
        fabric: f.clone(),
        interrupts,
        table: RwLock::new(empty),
        generation: AtomicU64::new(1),
        counters: AtomicCounters::default(),
        stop: AtomicBool::new(false),
        tx,
        rx,
        last_send_ns: AtomicU64::new(0),
        reply_budget_ns: AtomicU64::new(u64::try_from((REPLY_SPIN_MAX / 4).as_nanos()).unwrap_or(0)),
        last_unreachable_ns: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    for q in 0..sh.cfg.queues {
        let (a, b) = (sh.clone(), sh.clone());
        std::thread::Builder::new()
            .name(format!("lanes-ip-tx{q}"))
            .spawn(move || tx_loop(&a, q))
            .map_err(|e| e.to_string())?;
        std::thread::Builder::new()
            .name(format!("lanes-ip-rx{q}"))
            .spawn(move || rx_loop(&b, q))
            .map_err(|e| e.to_string())?;
    }
    let mut base = IfaceStatus {
        node,
        pid: std::process::id(),
        name: sh.cfg.name.clone(),
        ipv4: format!("{v4}/{}", sh.cfg.ipv4.len),
        ipv6: format!("{v6}/{}", sh.cfg.ipv6.len),
        mtu: sh.cfg.mtu,
        queues: sh.cfg.queues,
        offloads: offloads.describe(),
        ..Default::default()
    };
    let mut pending: BTreeMap<u32, Pending> = BTreeMap::new();
    let mut refused: BTreeMap<u32, String> = BTreeMap::new();
    let mut carrier = false;
    let mut link_local_missing = false;
    let mut tick = 0u64;
    let mut last_status = Instant::now() - Duration::from_secs(10);
    let listed: BTreeSet<u32> = cluster
        .as_ref()
        .map(|c| c.config.hosts.iter().flat_map(|h| h.nodes.iter().map(|n| n.get())).collect())
        .unwrap_or_default();
    let signal = loop {
        match signals.wait(TICK) {
            Ok(Some(sig)) => break sig,
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for signals: {e}")),
        }
        tick += 1;
        // Pairs whose peer went away (or wrote what no ring can hold) come down; those whose
        // host is suspect pause, and resume when it is operational again.
        let table = sh.table.read().unwrap_or_else(|e| e.into_inner()).clone();
        let mut keep = Vec::new();
        let mut gone = Vec::new();
        for p in table.iter() {
            let state = p.state();
            let paused = p.paused.load(Ordering::Acquire);
            if p.broken() || matches!(state, RemoteState::Lost(_)) {
                let why = p.broken.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let bad = why.is_some();
                gone.push((p.clone(), why.unwrap_or_else(|| format!("its state is {state:?}")), bad));
                continue;
            }
            match (state, paused) {
                (RemoteState::Operational, true) => match p.writes_delivered() {
                    Ok(()) => {
                        p.paused.store(false, Ordering::Release);
                        log(format!("node {} resumed (its host is operational again)", p.node));
                    }
                    Err(e) => {
                        gone.push((p.clone(), format!("writes lost while it was paused: {e}"), false));
                        continue;
                    }
                },
                (RemoteState::NotOperational, false) => {
                    p.paused.store(true, Ordering::Release);
                    log(format!("node {} paused (its host is not operational)", p.node));
                }
                _ => {}
            }
            keep.push(p.clone());
        }
        if !gone.is_empty() {
            sh.publish(keep);
            for (p, why, bad) in gone {
                if bad {
                    bump(&sh.counters.bad_ring, 1);
                }
                log(format!("node {} left ({why})", p.node));
                p.fail("taken down".into());
                let _ = p.local.remove(true);
            }
        }
        pending.retain(|n, p| {
            let ok = p.hello.state() == RemoteState::Operational;
            if !ok {
                log(format!("node {n} went away before its rings were ready"));
            }
            ok
        });
        if tick % 3 == 1 {
            discover(&sh, &f, &listed, &mut pending, &mut refused);
        }
        let waiting: Vec<u32> = pending.keys().copied().collect();
        for n in waiting {
            let Some(p) = pending.get_mut(&n) else { continue };
            match connect_pair(&sh, &f, n) {
                Ok(half) => {
                    let Some(p) = pending.remove(&n) else { continue };
                    let rings = half.tx.len();
                    log(format!("node {n} connected ({rings} ring{} to it)", if rings == 1 { "" } else { "s" }));
                    let peer = Peer {
                        node: n,
                        hello: p.hello,
                        local: p.local,
                        local_map: p.local_map,
                        remote: half.remote,
                        tx: half.tx,
                        returns: half.returns,
                        woken: half.wake.iter().map(|_| AtomicU32::new(0)).collect(),
                        wake: half.wake,
                        broken: Mutex::new(None),
                        is_broken: AtomicBool::new(false),
                        paused: AtomicBool::new(false),
                        tx_packets: AtomicU64::new(0),
                        rx_packets: AtomicU64::new(0),
                    };
                    let mut t: Vec<Arc<Peer>> = sh.table.read().unwrap_or_else(|e| e.into_inner()).to_vec();
                    t.push(Arc::new(peer));
                    sh.publish(t);
                }
                Err(why) => {
                    if p.said.as_ref() != Some(&why) {
                        log(format!("node {n}: {why}"));
                        p.said = Some(why);
                    }
                }
            }
        }
        let table = sh.table.read().unwrap_or_else(|e| e.into_inner()).clone();
        let connected: BTreeSet<u32> = table.iter().map(|p| p.node).collect();
        pending.retain(|n, _| !connected.contains(n));
        let want = table.iter().any(|p| p.usable());
        if want != carrier {
            match sh.tun.set_carrier(want) {
                Ok(()) => {
                    carrier = want;
                    log(format!("carrier {}", if want { "on" } else { "off" }));
                }
                Err(e) => log(e),
            }
        }
        if last_status.elapsed() >= Duration::from_secs(1) {
            last_status = Instant::now();
            // The kernel removes link-local addresses when the link is taken down, whatever
            // keep_addr_on_down says, and this process can no longer add one: say how.
            let missing = !crate::tun::has_ipv6_address(&sh.cfg.name, link_local);
            if missing && !link_local_missing {
                log(format!(
                    "{name} lost its link-local address {link_local} (taken down and up?): `ip addr add \
                     {link_local}/64 dev {name}` as root, or restarting `lanes ip up`, gives it back",
                    name = sh.cfg.name
                ));
            }
            link_local_missing = missing;
            base.carrier = carrier;
            base.counters = sh.counters.snapshot();
            let table = sh.table.read().unwrap_or_else(|e| e.into_inner()).clone();
            base.peers = table
                .iter()
                .map(|p| PeerStatus {
                    node: p.node,
                    state: if p.paused.load(Ordering::Relaxed) { "paused" } else { "connected" }.into(),
                    tx_packets: p.tx_packets.load(Ordering::Relaxed),
                    rx_packets: p.rx_packets.load(Ordering::Relaxed),
                })
                .chain(pending.keys().map(|&n| PeerStatus { node: n, state: "waiting".into(), ..Default::default() }))
                .collect();
            if let Err(e) = status::write(f.dir(), &base) {
                log(format!("writing the status file: {e}"));
            }
        }
    };
    log(format!("{} going down ({})", sh.cfg.name, lanes::platform::signals::signal_name(signal)));
    sh.stop.store(true, Ordering::Release);
    let table = sh.table.read().unwrap_or_else(|e| e.into_inner()).clone();
    for p in table.iter() {
        p.fail("going down".into());
        let _ = p.local.remove(true);
    }
    sh.publish(Vec::new());
    drop(pending);
    let _ = hello.remove(true);
    status::remove(f.dir(), node);
    // The threads block in reads of the device; the process's end closes it, which
    // removes the interface.
    Ok(())
}

/// Looks for nodes with a hello that have no pair yet: the nodes lanes.toml lists, and
/// those with a live process on this host's fabric directory.
fn discover(
    sh: &Shared,
    f: &Fabric,
    listed: &BTreeSet<u32>,
    pending: &mut BTreeMap<u32, Pending>,
    refused: &mut BTreeMap<u32, String>,
) {
    let mut nodes = listed.clone();
    if let Ok(recs) = lanes::platform::liveness::list_records(&f.dir().join("procs")) {
        nodes.extend(recs.iter().filter(|r| r.alive).map(|r| r.node));
    }
    let connected: BTreeSet<u32> = sh.table.read().unwrap_or_else(|e| e.into_inner()).iter().map(|p| p.node).collect();
    for n in nodes {
        if n == sh.node || connected.contains(&n) || pending.contains_key(&n) {
            continue;
        }
        let Ok(hello) = f.connect_segment(n, ring::HELLO_ID, Timeout::Immediate) else { continue };
        let checked = hello
            .map(0, ring::HELLO_BYTES.min(hello.size()), MapAccess::ReadOnly)
            .map_err(|e| e.to_string())
            .and_then(|m| ring::read_hello(&m, n));
        if let Err(why) = checked {
            // Looked at again every pass (it may become a real one), said once per reason.
            if refused.get(&n) != Some(&why) {
                log(format!("node {n}: {why}; ignored"));
                refused.insert(n, why);
            }
            continue;
        }
        refused.remove(&n);
        let layout = Layout { rings: sh.cfg.queues, ring_bytes: sh.cfg.ring_bytes };
        let made = f.create_segment(ring::PAIR_BASE | n, layout.segment_bytes()).and_then(|local| {
            let m = local.map(0, layout.segment_bytes(), MapAccess::ReadWrite)?;
            ring::write_pair_header(&m, layout, sh.node, n)?;
            local.prepare()?;
            local.set_available()?;
            Ok((local, m))
        });
        match made {
            Ok((local, local_map)) => {
                pending.insert(n, Pending { hello, local, local_map, said: None });
            }
            Err(e) => log(format!("node {n}: making its ring segment: {e}")),
        }
    }
}

/// This node's half of a pair: the peer's segment and what it writes through.
struct Half {
    remote: RemoteSegment,
    tx: Vec<Mutex<Producer>>,
    returns: Vec<Map>,
    wake: Vec<RemoteInterrupt>,
}

/// Connects to `n`'s pair segment for this node, or says why not yet.
fn connect_pair(sh: &Shared, f: &Fabric, n: u32) -> Result<Half, String> {
    let remote = f
        .connect_segment(n, ring::PAIR_BASE | sh.node, Timeout::Immediate)
        .map_err(|e| format!("waiting for its ring segment ({e})"))?;
    let layout = {
        let m = remote.map(0, remote.size(), MapAccess::ReadOnly).map_err(|e| e.to_string())?;
        let layout = ring::read_pair_header(&m, remote.size(), n, sh.node)?;
        if !ring::is_fresh(&m, layout).map_err(|e| e.to_string())? {
            return Err("its ring segment still holds an earlier run's words; waiting for a new one".into());
        }
        layout
    };
    let mut tx = Vec::new();
    let mut wake = Vec::new();
    for r in 0..layout.rings {
        let map =
            remote.map(layout.ring_offset(r), layout.ring_len(), MapAccess::ReadWrite).map_err(|e| e.to_string())?;
        tx.push(Mutex::new(Producer::new(map, layout.ring_bytes)));
        let no = ring::INTERRUPT_BASE + r as u32;
        wake.push(
            f.connect_interrupt(n, no, Timeout::Immediate)
                .map_err(|e| format!("waiting for its interrupt {no:#x} ({e})"))?,
        );
    }
    let mut returns = Vec::new();
    for q in 0..sh.cfg.queues {
        returns.push(
            remote
                .map(Layout::return_offset(q), Layout::RETURN_LEN, MapAccess::ReadWrite)
                .map_err(|e| e.to_string())?,
        );
    }
    Ok(Half { remote, tx, returns, wake })
}

/// Transmit thread `j`: waits for TUN queue `j`, sends what it holds, then spins a while
/// for the answer (`catch_replies`).
fn tx_loop(sh: &Shared, j: usize) {
    let mut said = false;
    while !sh.stop.load(Ordering::Acquire) {
        match sh.tun.wait_readable(j, TX_SLEEP) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                if !said && !sh.stop.load(Ordering::Acquire) {
                    log(format!("waiting for queue {j}: {e}"));
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        let (sent, failed) = read_tun(sh, j, &mut lock(&sh.tx[j]));
        if failed {
            std::thread::sleep(Duration::from_millis(10));
        } else if sent > 0 {
            catch_replies(sh, j);
        }
    }
}

/// Reads up to [`TX_BATCH`] packets from TUN queue `j` (it does not block) and sends each
/// to its node. Returns how many it read, and whether the read failed (not for want of
/// packets).
///
/// A packet is read straight into the ring of the node the previous one went to (`guess`;
/// with one peer, always the right one), appended unpublished; its first bytes, read back
/// from this side's own copy, route it. One for that node stays, and the batch's records
/// are published by one head store when the batch ends (or [`PUBLISH_AFTER`] bytes wait);
/// one for another node (or for all) is copied out and sent as a record of its own.
fn read_tun(sh: &Shared, j: usize, st: &mut TxState) -> (usize, bool) {
    let mut read = 0;
    let mut failed = false;
    while read < TX_BATCH {
        if sh.refresh(&mut st.generation, &mut st.table) {
            keep_guess_current(j, st);
        }
        let target = ring_target(j, st);
        let step = match target {
            Some(p) => read_into_ring(sh, j, st, &p),
            None => read_into_buffer(sh, j, st, None),
        };
        match step {
            Step::Packet => read += 1,
            Step::Empty => break,
            Step::Again => {}
            Step::Failed => {
                failed = true;
                break;
            }
        }
    }
    if let Some(p) = &st.guess {
        publish(p, j % p.tx.len(), &mut lock(&p.tx[j % p.tx.len()]));
    }
    if read > 0 {
        sh.last_send_ns.store(sh.now_ns(), Ordering::Relaxed);
    }
    (read, failed)
}

/// What one read of a TUN queue came to.
enum Step {
    /// A packet was read (sent, or dropped and counted).
    Packet,
    /// The queue holds none.
    Empty,
    /// Interrupted, or the ring could not be used: look again.
    Again,
    /// The read failed (said once).
    Failed,
}

/// The guess is dropped (its records published) once its pair is no longer in the table.
fn keep_guess_current(j: usize, st: &mut TxState) {
    if let Some(g) = &st.guess {
        if !st.table.iter().any(|p| Arc::ptr_eq(p, g)) {
            set_guess(j, st, None);
        }
    }
}

/// The peer to read the next packet into: the guess while it is usable, else the first
/// usable peer.
fn ring_target(j: usize, st: &mut TxState) -> Option<Arc<Peer>> {
    if let Some(g) = &st.guess {
        if g.usable() {
            return Some(g.clone());
        }
    }
    let first = st.table.iter().find(|p| p.usable()).cloned();
    set_guess(j, st, first.clone());
    first
}

/// Makes `p` the guess, publishing what waits in the previous guess's ring.
fn set_guess(j: usize, st: &mut TxState, p: Option<Arc<Peer>>) {
    if let Some(old) = &st.guess {
        if p.as_ref().is_some_and(|p| Arc::ptr_eq(p, old)) {
            return;
        }
        let r = j % old.tx.len();
        publish(old, r, &mut lock(&old.tx[r]));
    }
    st.guess = p;
}

/// Publishes the records appended to `p`'s ring `r`, and wakes its receiver if it sleeps.
fn publish(p: &Peer, r: usize, prod: &mut Producer) {
    if prod.unpublished() == 0 {
        return;
    }
    if let Err(e) = prod.publish() {
        return p.fail(format!("ring {r}: {e}"));
    }
    // The head's store before the sleep flag's load, as the receiver stores the flag
    // before it loads the heads: one of the two sees the other.
    fence(Ordering::SeqCst);
    wake_if_asleep(p, r);
}

/// Triggers `p`'s receive interrupt for ring `r` if its receive thread said it sleeps, once
/// per sleep: across hosts its flag says "asleep" until its "awake" lands, a round trip
/// after the trigger, and each batch published meanwhile would trigger again (each a
/// message, a completion for the peer's service thread, and a wait of the receive thread's
/// that returns at once). A receiver that stores [`Layout::SLEEPING_ANY`] is woken every
/// time.
fn wake_if_asleep(p: &Peer, r: usize) {
    let sleeping_at = Layout::return_offset(r) as usize + Layout::SLEEPING;
    if let Ok(flag) = p.local_map.load_acquire_u32(sleeping_at) {
        if needs_wake(flag, &p.woken[r]) {
            let _ = p.wake[r].trigger();
        }
    }
}

/// Whether a receiver whose sleep flag reads `flag` must be woken, given the flag value
/// last woken (`woken`, updated): not when awake (0), always for [`Layout::SLEEPING_ANY`],
/// else once per value.
fn needs_wake(flag: u32, woken: &AtomicU32) -> bool {
    match flag {
        0 => false,
        Layout::SLEEPING_ANY => true,
        sleep => woken.swap(sleep, Ordering::Relaxed) != sleep,
    }
}

/// Waits until `p`'s ring `r` has room for a record of `len` payload bytes (`None`: a read
/// straight into it), for at most `patience`: publishing what waits in it, waking its
/// receiver and driving the fabric's progress meanwhile (across hosts the receiver's tail
/// lands only when someone does, and this thread need not wait for the service thread to
/// be scheduled). Returns the tail that leaves room, `Ok(None)` when there is none (or the
/// pair stopped being usable), `Err` when the pair is broken (said with [`Peer::fail`]).
fn wait_for_room(
    sh: &Shared,
    p: &Peer,
    r: usize,
    prod: &mut Producer,
    len: Option<usize>,
    patience: Duration,
) -> Result<Option<u64>, ()> {
    let tail_at = Layout::return_offset(r) as usize + Layout::TAIL;
    let mut full_since: Option<Instant> = None;
    let mut driver: Option<lanes::ProgressDriver> = None;
    loop {
        let tail = match p.local_map.load_acquire_u64(tail_at) {
            Ok(t) => t,
            Err(e) => {
                p.fail(format!("reading its tail: {e}"));
                return Err(());
            }
        };
        match prod.has_room(tail, len) {
            Ok(true) => return Ok(Some(tail)),
            Ok(false) => {}
            Err(e) => {
                p.fail(format!("ring {r}: {e}"));
                return Err(());
            }
        }
        publish(p, r, prod);
        let since = *full_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= patience || !p.usable() {
            return Ok(None);
        }
        wake_if_asleep(p, r);
        driver.get_or_insert_with(|| sh.fabric.progress_driver()).poll();
        if since.elapsed() < Duration::from_micros(20) {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The first bytes of a record that routing reads: the virtio-net header and an IPv6
/// header (whose destination ends at byte 40).
const ROUTE_PREFIX: usize = VNET_HDR_LEN + 40;

/// Reads one packet from TUN queue `j` straight into `p`'s ring (see [`read_tun`]).
fn read_into_ring(sh: &Shared, j: usize, st: &mut TxState, p: &Arc<Peer>) -> Step {
    let c = &sh.counters;
    let r = j % p.tx.len();
    let mut prod = lock(&p.tx[r]);
    let tail = match wait_for_room(sh, p, r, &mut prod, None, FULL_WAIT) {
        Ok(Some(tail)) => tail,
        // No room for the largest packet: this one is read into the buffer and, if it is
        // for this peer, sent only if it fits now.
        Ok(None) => {
            drop(prod);
            return read_into_buffer(sh, j, st, Some(p));
        }
        Err(()) => return Step::Again,
    };
    let n = match prod.append_from_fd(tail, sh.tun.fd(j)) {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return read_error(sh, j, st, e),
        Err(e) => {
            p.fail(format!("ring {r}: {e}"));
            return Step::Again;
        }
    };
    if n > MAX_RECORD || n <= VNET_HDR_LEN {
        prod.cancel_last();
        bump(if n > MAX_RECORD { &c.drop_too_big } else { &c.drop_no_route }, 1);
        return Step::Packet;
    }
    let mut prefix = [0u8; ROUTE_PREFIX];
    let seen = n.min(ROUTE_PREFIX);
    if let Err(e) = prod.peek_last(0, &mut prefix[..seen]) {
        prod.cancel_last();
        p.fail(format!("ring {r}: {e}"));
        return Step::Packet;
    }
    let dest = route(&prefix[VNET_HDR_LEN..seen], sh.cfg.ipv4, sh.cfg.ipv6);
    if dest == Dest::Node(p.node) {
        sent(sh, p, n);
        if prod.unpublished() >= PUBLISH_AFTER {
            publish(p, r, &mut prod);
        }
        return Step::Packet;
    }
    if matches!(dest, Dest::NoRoute | Dest::Malformed) {
        prod.cancel_last();
        bump(&c.drop_no_route, 1);
        return Step::Packet;
    }
    // For another node, or for all: the record is copied out of this ring.
    let rec = &mut st.buf[..n];
    if let Err(e) = prod.peek_last(0, rec) {
        prod.cancel_last();
        p.fail(format!("ring {r}: {e}"));
        return Step::Packet;
    }
    if dest == Dest::All {
        sent(sh, p, n);
        drop(prod);
        for other in st.table.iter().filter(|o| !Arc::ptr_eq(o, p)) {
            send(sh, other, j, rec, FULL_WAIT);
        }
        return Step::Packet;
    }
    prod.cancel_last();
    drop(prod);
    let rec = &st.buf[..n];
    deliver(sh, j, &st.table, dest, rec, None);
    if let Dest::Node(id) = dest {
        let next = st.table.iter().find(|o| o.node == id).cloned();
        if next.is_some() {
            set_guess(j, st, next);
        }
    }
    Step::Packet
}

/// Reads one packet from TUN queue `j` into the thread's buffer and sends it (no usable
/// peer to read into, or `full`: that peer's ring had no room for the largest packet, so a
/// packet for it goes only if it fits at once, else it is dropped and counted).
fn read_into_buffer(sh: &Shared, j: usize, st: &mut TxState, full: Option<&Arc<Peer>>) -> Step {
    let c = &sh.counters;
    let n = match sh.tun.read(j, &mut st.buf) {
        Ok(n) => n,
        Err(e) => return read_error(sh, j, st, e),
    };
    if n > MAX_RECORD {
        bump(&c.drop_too_big, 1);
        return Step::Packet;
    }
    if n <= VNET_HDR_LEN {
        bump(&c.drop_no_route, 1);
        return Step::Packet;
    }
    let rec = &st.buf[..n];
    let dest = route(&rec[VNET_HDR_LEN..], sh.cfg.ipv4, sh.cfg.ipv6);
    deliver(sh, j, &st.table, dest, rec, full);
    Step::Packet
}

/// What a failed read of TUN queue `j` means.
fn read_error(sh: &Shared, j: usize, st: &mut TxState, e: std::io::Error) -> Step {
    match e.kind() {
        std::io::ErrorKind::WouldBlock => Step::Empty,
        std::io::ErrorKind::Interrupted => Step::Again,
        _ => {
            if !st.said && !sh.stop.load(Ordering::Acquire) {
                log(format!("reading queue {j}: {e}"));
                st.said = true;
            }
            Step::Failed
        }
    }
}

/// Sends record `rec` to `dest` (to `full`, whose ring had no room for the largest packet,
/// without waiting).
fn deliver(sh: &Shared, j: usize, table: &Table, dest: Dest, rec: &[u8], full: Option<&Arc<Peer>>) {
    let c = &sh.counters;
    let send_to = |p: &Arc<Peer>| match full {
        Some(f) if Arc::ptr_eq(f, p) => send(sh, p, j, rec, Duration::ZERO),
        _ => send(sh, p, j, rec, FULL_WAIT),
    };
    match dest {
        Dest::Node(id) => match table.iter().find(|p| p.node == id) {
            Some(p) => send_to(p),
            None => {
                bump(&c.drop_no_peer, 1);
                answer_unreachable(sh, j, &rec[VNET_HDR_LEN..]);
            }
        },
        Dest::All if table.is_empty() => bump(&c.drop_no_peer, 1),
        Dest::All => table.iter().for_each(send_to),
        Dest::NoRoute | Dest::Malformed => bump(&c.drop_no_route, 1),
    }
}

/// Counts a record of `n` bytes sent to `p`.
fn sent(sh: &Shared, p: &Peer, n: usize) {
    bump(&sh.counters.tx_packets, 1);
    bump(&sh.counters.tx_bytes, (n - VNET_HDR_LEN) as u64);
    bump(&p.tx_packets, 1);
}

/// Writes an ICMP or ICMPv6 "destination unreachable" for `pkt` (to a node without the
/// interface) into TUN queue `j`, at most one per [`UNREACHABLE_EVERY`] (a program sending
/// fast to a missing node is told often enough, and costs no more than that).
fn answer_unreachable(sh: &Shared, j: usize, pkt: &[u8]) {
    let now = sh.now_ns();
    let last = sh.last_unreachable_ns.load(Ordering::Relaxed);
    let every = u64::try_from(UNREACHABLE_EVERY.as_nanos()).unwrap_or(u64::MAX);
    if now.saturating_sub(last) < every
        || sh.last_unreachable_ns.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
    {
        return;
    }
    let Some(error) = crate::icmp::unreachable(pkt) else { return };
    let mut rec = vec![0u8; VNET_HDR_LEN];
    rec.extend_from_slice(&error);
    if sh.tun.write(j, &rec).is_ok() {
        bump(&sh.counters.unreachable, 1);
    }
}

/// After transmit thread `j` sent something: spins for up to the reply budget, draining
/// every receive queue it can take (and its own TUN queue), so that an answer (a ping's
/// reply, a request's response, an ACK) is written to the TUN device by this thread, awake
/// already, rather than by a receive thread woken for it. A spin that caught a packet
/// keeps or grows the budget, one that caught nothing shrinks it by a quarter (so sends
/// that nobody answers soon stop costing spins); a receive thread that
/// gets a packet soon after a send grows it ([`Shared::learn_reply`]). A spin whose thread
/// was descheduled (its CPU is wanted) stops at once.
fn catch_replies(sh: &Shared, j: usize) {
    let budget = Duration::from_nanos(sh.reply_budget_ns.load(Ordering::Relaxed));
    if budget < Duration::from_micros(2) {
        return;
    }
    let driver = sh.fabric.progress_driver();
    let mut start = Instant::now();
    let mut last = start;
    loop {
        driver.poll();
        let mut got = 0;
        for q in 0..sh.cfg.queues {
            if let Some(mut st) = try_lock(&sh.rx[q]) {
                let n = drain_rx(sh, q, &mut st);
                drop(st);
                if n > 0 {
                    got += n;
                    bump(&sh.counters.caught, n as u64);
                    after_delivery(sh, q);
                }
            }
        }
        let now = Instant::now();
        if got > 0 {
            let want = u64::try_from(((now - start) * 3 / 2).min(REPLY_SPIN_MAX).as_nanos()).unwrap_or(0);
            sh.reply_budget_ns.fetch_max(want, Ordering::Relaxed);
            return;
        }
        // More to send meanwhile: keep going from now.
        if let Some(mut st) = try_lock(&sh.tx[j]) {
            if read_tun(sh, j, &mut st).0 > 0 {
                start = now;
            }
        }
        if now - last > PREEMPTED_GAP {
            return;
        }
        last = now;
        if now - start >= budget {
            let _ = sh.reply_budget_ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(b - b / 4));
            return;
        }
        std::thread::yield_now();
    }
}

/// After packets were written to TUN queue `q`: what the kernel answered at once (a ping's
/// reply, an ACK, a response made in the same system call) waits in that queue (the TUN
/// device steers a flow's packets to the queue its packets came in on), so send it from
/// here unless another thread is reading the queue.
fn after_delivery(sh: &Shared, q: usize) -> usize {
    try_lock(&sh.tx[q]).map_or(0, |mut st| read_tun(sh, q, &mut st).0)
}

/// Sends one record to `p` on ring `j mod rings`, waiting up to `patience` for room.
fn send(sh: &Shared, p: &Peer, j: usize, rec: &[u8], patience: Duration) {
    let c = &sh.counters;
    if !p.usable() {
        bump(&c.drop_no_peer, 1);
        return;
    }
    if rec.len() > MAX_RECORD {
        bump(&c.drop_too_big, 1);
        return;
    }
    let r = j % p.tx.len();
    let mut prod = lock(&p.tx[r]);
    let tail = match wait_for_room(sh, p, r, &mut prod, Some(rec.len()), patience) {
        Ok(Some(tail)) => tail,
        Ok(None) => return bump(&c.drop_full, 1),
        Err(()) => return,
    };
    match prod.push(tail, &[rec]) {
        Ok(()) => {}
        Err(PushError::TooBig(_)) => return bump(&c.drop_too_big, 1),
        Err(PushError::Full) => return bump(&c.drop_full, 1),
        Err(e) => return p.fail(format!("ring {r}: {e}")),
    }
    drop(prod);
    sent(sh, p, rec.len());
    fence(Ordering::SeqCst);
    wake_if_asleep(p, r);
}

struct RxPeer {
    peer: Arc<Peer>,
    cons: Consumer,
    published: u64,
}

/// Writes what every peer's ring `q` holds (up to 64 records each) to TUN queue `q`,
/// straight from the ring, and publishes the new tails; returns how many records it took.
fn drain_rx(sh: &Shared, q: usize, st: &mut RxState) -> usize {
    let RxState { generation, table, list } = st;
    let c = &sh.counters;
    if sh.refresh(generation, table) {
        let layout = Layout { rings: sh.cfg.queues, ring_bytes: sh.cfg.ring_bytes };
        let mut old = std::mem::take(list);
        for p in table.iter() {
            match old.iter().position(|rp| Arc::ptr_eq(&rp.peer, p)) {
                Some(i) => list.push(old.swap_remove(i)),
                None => list.push(RxPeer { peer: p.clone(), cons: Consumer::new(layout, q), published: 0 }),
            }
        }
    }
    let publish = |rp: &mut RxPeer| {
        if let Err(e) = rp.peer.returns[q].store_release_u64(Layout::TAIL, rp.cons.tail()) {
            rp.peer.fail(format!("publishing a tail: {e}"));
        }
        rp.published = rp.cons.tail();
    };
    let mut got = 0;
    for rp in list.iter_mut() {
        if !rp.peer.usable() {
            continue;
        }
        for _ in 0..64 {
            match rp.cons.peek(&rp.peer.local_map) {
                Ok(Some(rec)) => {
                    got += 1;
                    let n = rec.len;
                    // Straight from the ring into the device: no copy through a buffer.
                    let written = n > VNET_HDR_LEN
                        && matches!(rp.peer.local_map.write_to_fd(sh.tun.fd(q), rec.ranges()), Ok(Ok(_)));
                    rp.cons.take(&rec);
                    if !written {
                        bump(&c.drop_rejected, 1);
                    } else {
                        bump(&c.rx_packets, 1);
                        bump(&c.rx_bytes, (n - VNET_HDR_LEN) as u64);
                        bump(&rp.peer.rx_packets, 1);
                    }
                    if rp.cons.tail() - rp.published >= sh.cfg.ring_bytes / 4 {
                        publish(rp);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    rp.peer.fail(format!("its ring {q}: {e}"));
                    break;
                }
            }
        }
        if rp.cons.tail() != rp.published {
            publish(rp);
        }
    }
    got
}

/// Receive thread `q`: drains ring `q` of every peer into TUN queue `q` (and sends what
/// the kernel answered, `after_delivery`); when nothing comes, spins for a budget (driving
/// the fabric's progress, so that across hosts the peers' writes land without the service
/// thread), then announces that it sleeps and waits for its interrupt.
///
/// The budget adapts between [`RX_SPIN_MIN`] and [`RX_SPIN_MAX`], as an adaptive mutex's:
/// a packet that came during the spin grows it to cover the wait (with half again to
/// spare), a spin that ended in a sleep halves it, and a sleep that a packet ended sooner
/// than the longest spin grows it to cover that sleep. So it spins while packets keep
/// coming and hardly at all for sparse ones (a ping every few milliseconds).
fn rx_loop(sh: &Shared, q: usize) {
    let mut idle_since = Instant::now();
    let mut budget = RX_SPIN_START;
    let mut driver: Option<lanes::ProgressDriver> = None;
    let mut last_look = Instant::now();
    // This thread's sleep flag value, new for every sleep (never 0, awake, nor
    // `SLEEPING_ANY`), so that a sender wakes each sleep once.
    let mut sleep_no = Layout::SLEEPING_ANY;
    let grow = |budget: &mut Duration, waited: Duration| {
        if waited < RX_SPIN_MAX {
            *budget = (*budget).max(waited * 3 / 2).min(RX_SPIN_MAX);
        }
    };
    while !sh.stop.load(Ordering::Acquire) {
        let got = drain_rx(sh, q, &mut lock(&sh.rx[q]));
        let now = Instant::now();
        if got > 0 {
            bump(&sh.counters.answered, after_delivery(sh, q) as u64);
            grow(&mut budget, now - idle_since);
            idle_since = now;
            last_look = now;
            continue;
        }
        let gap = now - last_look;
        last_look = now;
        if now - idle_since < budget && gap < PREEMPTED_GAP {
            driver.get_or_insert_with(|| sh.fabric.progress_driver()).poll();
            std::thread::yield_now();
            continue;
        }
        budget = (budget / 2).max(RX_SPIN_MIN);
        driver = None;
        let slept = Instant::now();
        {
            let st = lock(&sh.rx[q]);
            // Not a peer whose host went suspect since the control loop last looked: a
            // write refused now would cost the pair its resumption.
            let live = |rp: &&RxPeer| rp.peer.usable() && rp.peer.remote.state() == RemoteState::Operational;
            // Across hosts the release store posts the flag's write and does not wait for
            // it: waiting for its delivery (a round trip, under this queue's lock) on every
            // sleep cost more than the crossings it narrows, which `RX_RECHECK` covers.
            let mut across = false;
            sleep_no = sleep_no.wrapping_add(1).max(Layout::SLEEPING_ANY + 1);
            for rp in st.list.iter().filter(live) {
                let _ = rp.peer.returns[q].store_release_u32(Layout::SLEEPING, sleep_no);
                across |= rp.peer.returns[q].is_written_through();
            }
            fence(Ordering::SeqCst);
            let pending = |st: &RxState| st.list.iter().filter(live).any(|rp| rp.cons.has_data(&rp.peer.local_map));
            let mut waiting = !pending(&st);
            drop(st);
            if waiting && across {
                waiting =
                    !matches!(sh.interrupts[q].wait(Timeout::After(RX_RECHECK)), Ok(())) && !pending(&lock(&sh.rx[q]));
            }
            if waiting {
                let _ = sh.interrupts[q].wait(Timeout::After(RX_SLEEP));
            }
            let st = lock(&sh.rx[q]);
            for rp in st.list.iter().filter(live) {
                let _ = rp.peer.returns[q].store_release_u32(Layout::SLEEPING, 0);
            }
        }
        let now = Instant::now();
        grow(&mut budget, now - slept);
        // A packet soon after this process's last send: the answer a transmit thread's
        // spin could have caught.
        let since_send = sh.now_ns().saturating_sub(sh.last_send_ns.load(Ordering::Relaxed));
        let st = lock(&sh.rx[q]);
        if st.list.iter().any(|rp| rp.cons.has_data(&rp.peer.local_map)) {
            bump(&sh.counters.wakeups, 1);
            sh.learn_reply(Duration::from_nanos(since_send));
        }
        drop(st);
        idle_since = now;
        last_look = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sleep_is_woken_once_and_a_receiver_without_sleep_values_every_time() {
        let woken = AtomicU32::new(0);
        assert!(!needs_wake(0, &woken), "awake");
        assert!(needs_wake(2, &woken), "a new sleep");
        assert!(!needs_wake(2, &woken), "the same sleep, its awake not landed yet");
        assert!(!needs_wake(0, &woken), "awake");
        assert!(needs_wake(3, &woken), "the next sleep");
        assert!(needs_wake(2, &woken), "another sleep with an earlier value");
        for _ in 0..3 {
            assert!(needs_wake(Layout::SLEEPING_ANY, &woken), "a receiver that does not tell sleeps apart");
        }
        assert!(needs_wake(4, &woken), "a later sleep");
    }
}
