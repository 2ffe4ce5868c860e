//! The running interface (`lanes ip up`): the TUN device, a transmit and a receive thread
//! per queue, and the control loop that finds peers, sets pairs of rings up and down,
//! follows the carrier and writes the status file.
//!
//! The data path takes no lock but a per-ring mutex that is uncontended when both nodes
//! have as many queues (two transmit threads share a ring only when the receiver has
//! fewer); the peer table is an `Arc` that each thread re-reads when a generation counter
//! moves.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
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

/// How long a sender waits for room in a full ring before it drops the packet.
const FULL_WAIT: Duration = Duration::from_millis(1);
/// How long a receive thread spins without packets before it sleeps.
const RX_SPIN: Duration = Duration::from_micros(50);
/// The longest sleep of a receive thread (a wake-up lost across hosts costs this).
const RX_SLEEP: Duration = Duration::from_millis(100);
/// The control loop's period.
const TICK: Duration = Duration::from_millis(100);

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
    bad_ring
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
    /// Why the pair must be set up again (a bad word of the peer's, a failed map).
    broken: Mutex<Option<String>>,
    is_broken: AtomicBool,
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
}

type Table = Arc<Vec<Arc<Peer>>>;

struct Shared {
    cfg: IpConfig,
    node: u32,
    tun: Tun,
    interrupts: Vec<LocalInterrupt>,
    table: RwLock<Table>,
    generation: AtomicU64,
    counters: AtomicCounters,
    stop: AtomicBool,
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
pub fn run(cfg: IpConfig, fabric: FabricConfig) -> Result<(), String> {
    let signals = lanes::platform::signals::TerminationSignals::install()
        .map_err(|e| format!("catching SIGTERM and SIGINT: {e}"))?;
    let node = fabric.node_id.get();
    let (v4, v6) = cfg.addresses(node)?;
    let tun = Tun::create(&cfg.name, cfg.queues).map_err(|e| e.to_string())?;
    let offloads = tun.set_offloads(cfg.offloads).map_err(|e| e.to_string())?;
    tun.configure(v4, cfg.ipv4.netmask(), v6, cfg.ipv6.len, cfg.mtu).map_err(|e| e.to_string())?;
    tun.set_carrier(false).map_err(|e| e.to_string())?;
    // Everything that needs CAP_NET_ADMIN is done; no thread exists yet, so all go.
    crate::caps::drop_all().map_err(|e| e.to_string())?;
    let cluster = fabric.cluster.clone();
    let f = Fabric::open_with(fabric).map_err(|e| format!("opening the fabric as node {node}: {e}"))?;
    let mut interrupts = Vec::new();
    for q in 0..cfg.queues {
        let no = ring::INTERRUPT_BASE + q as u32;
        interrupts.push(f.create_interrupt(Some(no)).map_err(|e| format!("receive interrupt {no:#x}: {e}"))?);
    }
    let hello = f.create_segment(ring::HELLO_ID, ring::HELLO_BYTES).map_err(|e| format!("hello segment: {e}"))?;
    let hello_map = hello.map(0, ring::HELLO_BYTES, MapAccess::ReadWrite).map_err(|e| e.to_string())?;
    ring::write_hello(&hello_map, Hello { node, queues: cfg.queues as u32, mtu: cfg.mtu })
        .map_err(|e| e.to_string())?;
    hello.prepare().and_then(|()| hello.set_available()).map_err(|e| e.to_string())?;
    log(format!(
        "{} up as node {node}: {v4}/{}, {v6}/{}, mtu {}, {} queues, offloads {}",
        cfg.name,
        cfg.ipv4.len,
        cfg.ipv6.len,
        cfg.mtu,
        cfg.queues,
        offloads.describe()
    ));
    let sh = Arc::new(Shared {
        cfg,
        node,
        tun,
        interrupts,
        table: RwLock::new(Arc::new(Vec::new())),
        generation: AtomicU64::new(1),
        counters: AtomicCounters::default(),
        stop: AtomicBool::new(false),
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
        // Pairs whose peer went away (or wrote what no ring can hold) come down.
        let table = sh.table.read().unwrap_or_else(|e| e.into_inner()).clone();
        let (keep, gone): (Vec<_>, Vec<_>) = table.iter().cloned().partition(|p| {
            !p.broken() && p.hello.state() == RemoteState::Operational && p.remote.state() == RemoteState::Operational
        });
        if !gone.is_empty() {
            sh.publish(keep);
            for p in gone {
                let why = p.broken.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_else(|| {
                    format!(
                        "its state is {:?}",
                        if p.hello.state() != RemoteState::Operational { p.hello.state() } else { p.remote.state() }
                    )
                });
                if p.is_broken.load(Ordering::Relaxed) {
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
                    log(format!("node {n} connected ({} rings to it)", half.tx.len()));
                    let peer = Peer {
                        node: n,
                        hello: p.hello,
                        local: p.local,
                        local_map: p.local_map,
                        remote: half.remote,
                        tx: half.tx,
                        returns: half.returns,
                        wake: half.wake,
                        broken: Mutex::new(None),
                        is_broken: AtomicBool::new(false),
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
        let connected: BTreeSet<u32> =
            sh.table.read().unwrap_or_else(|e| e.into_inner()).iter().map(|p| p.node).collect();
        pending.retain(|n, _| !connected.contains(n));
        let want = !connected.is_empty();
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
            base.carrier = carrier;
            base.counters = sh.counters.snapshot();
            let table = sh.table.read().unwrap_or_else(|e| e.into_inner()).clone();
            base.peers = table
                .iter()
                .map(|p| PeerStatus {
                    node: p.node,
                    state: "connected".into(),
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

fn tx_loop(sh: &Shared, j: usize) {
    let mut buf = vec![0u8; 2 * MAX_RECORD];
    let mut generation = 0;
    let mut table: Table = Arc::new(Vec::new());
    let mut said = false;
    let (v4, v6) = (sh.cfg.ipv4, sh.cfg.ipv6);
    loop {
        let n = match sh.tun.read(j, &mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                if sh.stop.load(Ordering::Acquire) {
                    return;
                }
                if !said {
                    log(format!("reading queue {j}: {e}"));
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        sh.refresh(&mut generation, &mut table);
        let c = &sh.counters;
        if n > MAX_RECORD {
            bump(&c.drop_too_big, 1);
            continue;
        }
        if n <= VNET_HDR_LEN {
            bump(&c.drop_no_route, 1);
            continue;
        }
        let rec = &buf[..n];
        match route(&rec[VNET_HDR_LEN..], v4, v6) {
            Dest::Node(id) => match table.iter().find(|p| p.node == id) {
                Some(p) => send(sh, p, j, rec),
                None => bump(&c.drop_no_peer, 1),
            },
            Dest::All if table.is_empty() => bump(&c.drop_no_peer, 1),
            Dest::All => {
                for p in table.iter() {
                    send(sh, p, j, rec);
                }
            }
            Dest::NoRoute | Dest::Malformed => bump(&c.drop_no_route, 1),
        }
    }
}

/// Sends one record to `p` on ring `j mod rings`, waiting up to [`FULL_WAIT`] for room.
fn send(sh: &Shared, p: &Peer, j: usize, rec: &[u8]) {
    let c = &sh.counters;
    if p.broken() {
        bump(&c.drop_no_peer, 1);
        return;
    }
    let r = j % p.tx.len();
    let tail_at = Layout::return_offset(r) as usize + Layout::TAIL;
    let sleeping_at = Layout::return_offset(r) as usize + Layout::SLEEPING;
    let wake_if_asleep = || {
        if p.local_map.load_acquire_u32(sleeping_at).is_ok_and(|s| s != 0) {
            let _ = p.wake[r].trigger();
        }
    };
    let mut full_since: Option<Instant> = None;
    {
        let mut prod = p.tx[r].lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let tail = match p.local_map.load_acquire_u64(tail_at) {
                Ok(t) => t,
                Err(e) => return p.fail(format!("reading its tail: {e}")),
            };
            match prod.push(tail, &[rec]) {
                Ok(()) => break,
                Err(PushError::Full) => {
                    let since = *full_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > FULL_WAIT {
                        bump(&c.drop_full, 1);
                        return;
                    }
                    wake_if_asleep();
                    if since.elapsed() < Duration::from_micros(20) {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
                Err(PushError::TooBig(_)) => {
                    bump(&c.drop_too_big, 1);
                    return;
                }
                Err(e) => return p.fail(format!("ring {r}: {e}")),
            }
        }
    }
    bump(&c.tx_packets, 1);
    bump(&c.tx_bytes, (rec.len() - VNET_HDR_LEN) as u64);
    bump(&p.tx_packets, 1);
    // The head's store before the sleep flag's load, as the receiver stores the flag
    // before it loads the heads: one of the two sees the other.
    fence(Ordering::SeqCst);
    wake_if_asleep();
}

struct RxPeer {
    peer: Arc<Peer>,
    cons: Consumer,
    published: u64,
}

fn rx_loop(sh: &Shared, q: usize) {
    let mut buf = vec![0u8; MAX_RECORD];
    let mut generation = 0;
    let mut table: Table = Arc::new(Vec::new());
    let mut list: Vec<RxPeer> = Vec::new();
    let mut idle_since = Instant::now();
    let c = &sh.counters;
    let layout = Layout { rings: sh.cfg.queues, ring_bytes: sh.cfg.ring_bytes };
    let publish = |rp: &mut RxPeer| {
        if let Err(e) = rp.peer.returns[q].store_release_u64(Layout::TAIL, rp.cons.tail()) {
            rp.peer.fail(format!("publishing a tail: {e}"));
        }
        rp.published = rp.cons.tail();
    };
    while !sh.stop.load(Ordering::Acquire) {
        if sh.refresh(&mut generation, &mut table) {
            let mut old = std::mem::take(&mut list);
            for p in table.iter() {
                match old.iter().position(|rp| Arc::ptr_eq(&rp.peer, p)) {
                    Some(i) => list.push(old.swap_remove(i)),
                    None => list.push(RxPeer { peer: p.clone(), cons: Consumer::new(layout, q), published: 0 }),
                }
            }
        }
        let mut got = false;
        for rp in list.iter_mut() {
            if rp.peer.broken() {
                continue;
            }
            for _ in 0..64 {
                match rp.cons.pop(&rp.peer.local_map, &mut buf) {
                    Ok(Some(n)) => {
                        got = true;
                        if n <= VNET_HDR_LEN || sh.tun.write(q, &buf[..n]).is_err() {
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
        if got {
            idle_since = Instant::now();
            continue;
        }
        if idle_since.elapsed() < RX_SPIN {
            std::hint::spin_loop();
            continue;
        }
        let live = |rp: &&RxPeer| !rp.peer.broken();
        for rp in list.iter().filter(live) {
            let _ = rp.peer.returns[q].store_release_u32(Layout::SLEEPING, 1);
            rp.peer.returns[q].flush();
        }
        fence(Ordering::SeqCst);
        if !list.iter().filter(live).any(|rp| rp.cons.has_data(&rp.peer.local_map)) {
            let _ = sh.interrupts[q].wait(Timeout::After(RX_SLEEP));
        }
        for rp in list.iter().filter(live) {
            let _ = rp.peer.returns[q].store_release_u32(Layout::SLEEPING, 0);
        }
        idle_since = Instant::now();
    }
}
