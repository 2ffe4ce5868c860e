//! The node command interpreter of the multi-process integration tests, and their test
//! data; the harness itself (child processes, their protocol, topologies, scratch
//! directories) is `lanes-testkit`'s, re-exported here.
//!
//! Every node of a scenario is a child process in role `node` (see `lanes_testkit::process`)
//! that opens the fabric as one node and then executes one command per line read from its
//! stdin (`create s 0x10 4096`, `connect r 8 0x10 1000`, `map m r 0 4096 rw`, ...).

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lanes::{
    DmaDirection, DmaQueue, DmaQueueState, DmaVec, Error, Fabric, FabricConfig, LocalSegment, Map, MapAccess, NodeId,
    RemoteSegment, Sequence, Timeout,
};
#[allow(unused_imports)] // each test binary uses its own part
pub use lanes_testkit::cluster::spawn_daemon;
use lanes_testkit::process::{lanes_err_line, ok_line, test_err_line, DIR_VAR, NODE_VAR};
#[allow(unused_imports)]
pub use lanes_testkit::process::{variant_name, wait_until, WAIT};
#[allow(unused_imports)]
pub use lanes_testkit::{cluster, netns, topology_cases, Bounds, ChildIo, ErrReply, Hosts, Proc, TestDir, Topology};

pub mod records;

// ---------------------------------------------------------------------------------------
// Test data
// ---------------------------------------------------------------------------------------

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The byte at absolute position `pos` of the pseudo-random pattern `seed`.
pub fn pattern_byte(seed: u64, pos: u64) -> u8 {
    let word = splitmix64(seed.wrapping_mul(0x1000_0000_01B3) ^ (pos / 8));
    (word >> ((pos % 8) * 8)) as u8
}

/// `len` bytes of pattern `seed` from absolute position `pos`.
pub fn pattern(seed: u64, pos: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern_byte(seed, pos + i)).collect()
}

/// FNV-1a, 64 bits: the checksum the processes exchange.
pub fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The checksum of `len` bytes of pattern `seed` from `pos`, as the `sum` command prints it.
pub fn pattern_sum(seed: u64, pos: u64, len: usize) -> String {
    format!("{:016x}", fnv64(&pattern(seed, pos, len)))
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex string {s:?}");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

/// The body of every test file's `child_entry` test: does nothing in the parent; in a child
/// runs the `node` interpreter, hands other roles to `custom` (which returns false for a
/// role it does not know), and runs a cluster daemon for role `daemon`.
pub fn child_entry(custom: impl FnOnce(&str, &ChildIo) -> bool) {
    lanes_testkit::child_entry(|role, io| match role {
        "node" => {
            run_node(io);
            true
        }
        _ => custom(role, io),
    });
}

enum Fail {
    Lanes(Error),
    Test(String),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Lanes(e)
    }
}

type Reply = Result<String, Fail>;

fn test_fail<T>(msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::Test(msg.into()))
}

struct Args<'a>(Vec<&'a str>);

impl<'a> Args<'a> {
    fn s(&self, i: usize) -> &'a str {
        self.0.get(i).copied().unwrap_or_else(|| panic!("command {:?}: missing argument {i}", self.0))
    }

    fn n(&self, i: usize) -> u64 {
        let s = self.s(i);
        let v = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        };
        v.unwrap_or_else(|_| panic!("command {:?}: argument {i} is not a number", self.0))
    }

    fn u32(&self, i: usize) -> u32 {
        u32::try_from(self.n(i)).expect("a 32-bit argument")
    }

    fn us(&self, i: usize) -> usize {
        usize::try_from(self.n(i)).expect("a usize argument")
    }
}

/// A buffer of this process's heap registered as a segment: (address, length).
#[derive(Clone, Copy)]
struct Buf {
    addr: usize,
    len: usize,
}

struct NodeState {
    fabric: Fabric,
    locals: HashMap<String, LocalSegment>,
    remotes: HashMap<String, RemoteSegment>,
    maps: HashMap<String, Map>,
    seqs: HashMap<String, Sequence>,
    bufs: HashMap<String, Buf>,
    queues: HashMap<String, DmaQueue>,
    node_events: Option<lanes::cluster::Subscription>,
}

/// The fabric configuration of a node child: from the environment (`LANES_CONFIG`,
/// `LANES_HOST`, `LANES_DIR`, `LANES_NODE_ID`) when a topology of several hosts set
/// `LANES_CONFIG`, else the test directory and node.
fn node_config() -> lanes::Result<FabricConfig> {
    if std::env::var_os("LANES_CONFIG").is_some() {
        return FabricConfig::from_env();
    }
    let dir = std::env::var(DIR_VAR).expect("LANES_TEST_DIR");
    let node: u32 = std::env::var(NODE_VAR).expect("LANES_TEST_NODE").parse().expect("node id");
    NodeId::new(node).map(|n| FabricConfig::new(&dir, n))
}

fn run_node(io: &ChildIo) {
    let fabric = match node_config().and_then(Fabric::open_with) {
        Ok(f) => f,
        Err(e) => {
            io.send(&format!("OPEN_FAILED {}", lanes_err_line(&e, "")));
            return;
        }
    };
    io.send(&format!("READY {}", std::process::id()));
    let mut st = NodeState {
        fabric,
        locals: HashMap::new(),
        remotes: HashMap::new(),
        maps: HashMap::new(),
        seqs: HashMap::new(),
        bufs: HashMap::new(),
        queues: HashMap::new(),
        node_events: None,
    };
    io.serve(|line| match st.exec(line) {
        Ok(s) => ok_line(&s),
        Err(Fail::Lanes(e)) => lanes_err_line(&e, ""),
        Err(Fail::Test(m)) => test_err_line(&m),
    });
}

fn access(s: &str) -> MapAccess {
    match s {
        "ro" => MapAccess::ReadOnly,
        "rw" => MapAccess::ReadWrite,
        other => panic!("map access {other:?} is neither ro nor rw"),
    }
}

fn direction(s: &str) -> DmaDirection {
    match s {
        "read" => DmaDirection::Read,
        "write" => DmaDirection::Write,
        other => panic!("DMA direction {other:?} is neither read nor write"),
    }
}

/// `SIZE:LOCAL_OFFSET:REMOTE_OFFSET,...`: the entries of a DMA vector.
fn dma_vec(s: &str) -> Vec<DmaVec> {
    s.split(',')
        .map(|e| {
            let n: Vec<u64> = e.split(':').map(|v| v.parse().expect("a number")).collect();
            assert_eq!(n.len(), 3, "DMA vector entry {e:?} is not SIZE:LOCAL:REMOTE");
            DmaVec { size: n[0], local_offset: n[1], remote_offset: n[2] }
        })
        .collect()
}

/// How long DMA commands wait for their transfers.
const DMA_WAIT: Timeout = Timeout::After(Duration::from_secs(10));

/// A timeout as commands write it: `imm`, `inf` or milliseconds.
pub fn timeout(s: &str) -> Timeout {
    match s {
        "imm" => Timeout::Immediate,
        "inf" => Timeout::Infinite,
        ms => Timeout::After(Duration::from_millis(ms.parse().expect("timeout in ms"))),
    }
}

impl NodeState {
    fn local(&self, name: &str) -> &LocalSegment {
        self.locals.get(name).unwrap_or_else(|| panic!("no local segment {name:?}"))
    }

    fn remote(&self, name: &str) -> &RemoteSegment {
        self.remotes.get(name).unwrap_or_else(|| panic!("no remote segment {name:?}"))
    }

    fn map(&self, name: &str) -> &Map {
        self.maps.get(name).unwrap_or_else(|| panic!("no map {name:?}"))
    }

    fn seq(&self, name: &str) -> &Sequence {
        self.seqs.get(name).unwrap_or_else(|| panic!("no sequence {name:?}"))
    }

    /// A DMA queue and the local and remote segments of a transfer, named.
    fn dma_parts(&mut self, q: &str, local: &str, remote: &str) -> (&LocalSegment, &RemoteSegment, &mut DmaQueue) {
        let l = self.locals.get(local).unwrap_or_else(|| panic!("no local segment {local:?}"));
        let r = self.remotes.get(remote).unwrap_or_else(|| panic!("no remote segment {remote:?}"));
        let q = self.queues.get_mut(q).unwrap_or_else(|| panic!("no DMA queue {q:?}"));
        (l, r, q)
    }

    fn buf(&self, name: &str) -> Buf {
        *self.bufs.get(name).unwrap_or_else(|| panic!("no registered buffer {name:?}"))
    }

    fn exec(&mut self, line: &str) -> Reply {
        let a = Args(line.split_whitespace().collect());
        let cmd = a.s(0);
        match cmd {
            "exit" => Ok(String::new()),
            "pid" => Ok(std::process::id().to_string()),
            "nocore" => {
                // No core file for a crash the test provokes.
                let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                // SAFETY: setrlimit reads a valid rlimit for the duration of the call.
                let rc = unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
                if rc != 0 {
                    return test_fail(format!("setrlimit: {}", std::io::Error::last_os_error()));
                }
                Ok(String::new())
            }
            "node_id" => Ok(self.fabric.node_id().to_string()),
            // --- local segments ---
            "create" => {
                let seg = self.fabric.create_segment(a.u32(2), a.n(3))?;
                let id = seg.id();
                self.locals.insert(a.s(1).to_string(), seg);
                Ok(id.to_string())
            }
            "create_auto" => {
                let seg = self.fabric.create_segment_auto_id(a.n(2))?;
                let id = seg.id();
                self.locals.insert(a.s(1).to_string(), seg);
                Ok(id.to_string())
            }
            "attach" => {
                let seg = self.fabric.attach_local_segment(a.u32(2))?;
                self.locals.insert(a.s(1).to_string(), seg);
                Ok(String::new())
            }
            "prepare" => self.local(a.s(1)).prepare().map(|_| String::new()).map_err(Fail::from),
            "available" => self.local(a.s(1)).set_available().map(|_| String::new()).map_err(Fail::from),
            "unavailable" => self.local(a.s(1)).set_unavailable().map(|_| String::new()).map_err(Fail::from),
            "share" => self.local(a.s(1)).share().map(|_| String::new()).map_err(Fail::from),
            "remove" => {
                let force = a.n(2) != 0;
                let name = a.s(1);
                self.local(name).remove(force)?;
                self.locals.remove(name);
                Ok(String::new())
            }
            "remove_keep" => {
                // Like remove, but the handle stays in the table for later calls.
                self.local(a.s(1)).remove(a.n(2) != 0)?;
                Ok(String::new())
            }
            "drop_local" => {
                self.locals.remove(a.s(1)).unwrap_or_else(|| panic!("no local segment {:?}", a.s(1)));
                Ok(String::new())
            }
            "peers" => {
                let mut peers = self.local(a.s(1)).connected_peers();
                peers.sort_unstable();
                Ok(peers.iter().map(|(n, p)| format!("{n}:{p}")).collect::<Vec<_>>().join(","))
            }
            "waitpeers" => {
                // waitpeers NAME WANT MS: polls `peers` until it reads WANT (`-` for none):
                // a remote peer's disconnect or death reaches the owner through the daemons,
                // after the peer's call has returned.
                let (want, ms) = (if a.s(2) == "-" { "" } else { a.s(2) }, a.n(3));
                let deadline = Instant::now() + Duration::from_millis(ms);
                loop {
                    let mut peers = self.local(a.s(1)).connected_peers();
                    peers.sort_unstable();
                    let now = peers.iter().map(|(n, p)| format!("{n}:{p}")).collect::<Vec<_>>().join(",");
                    if now == want {
                        return Ok(String::new());
                    }
                    if Instant::now() > deadline {
                        return test_fail(format!("peers are {now:?}, not {want:?}, after {ms} ms"));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            "lwait" => {
                // lwait NAME TIMEOUT: the segment's next peer event, as its Debug form.
                let ev = self.local(a.s(1)).wait_event(timeout(a.s(2)))?;
                Ok(format!("{ev:?}"))
            }
            "linfo" => {
                let s = self.local(a.s(1));
                Ok(format!(
                    "id={} size={} node={} owner={} available={}",
                    s.id(),
                    s.size(),
                    s.node_id(),
                    s.is_owner(),
                    s.is_available()
                ))
            }
            // --- remote segments ---
            "connect" => {
                let r = self.fabric.connect_segment(a.u32(2), a.u32(3), timeout(a.s(4)))?;
                let info = format!("node={} id={} size={}", r.node_id(), r.id(), r.size());
                self.remotes.insert(a.s(1).to_string(), r);
                Ok(info)
            }
            "rinfo" => {
                let r = self.remote(a.s(1));
                Ok(format!("node={} id={} size={}", r.node_id(), r.id(), r.size()))
            }
            "disconnect" => {
                self.remotes.remove(a.s(1)).unwrap_or_else(|| panic!("no remote {:?}", a.s(1))).disconnect();
                Ok(String::new())
            }
            "state" => Ok(format!("{:?}", self.remote(a.s(1)).state())),
            "rwait" => {
                // rwait NAME TIMEOUT: the remote segment's next event, as its Debug form.
                let ev = self.remote(a.s(1)).wait_event(timeout(a.s(2)))?;
                Ok(format!("{ev:?}"))
            }
            "probe" => Ok(self.fabric.probe_node(a.u32(1)).to_string()),
            "nodeevents" => {
                self.node_events = Some(self.fabric.node_events()?);
                Ok(String::new())
            }
            "nodewait" => {
                // nodewait NODE MS: the next event of NODE as "<state> (was <previous>)".
                let (node, ms) = (a.u32(1), a.n(2));
                let sub = self.node_events.as_mut().expect("nodeevents first");
                let deadline = Instant::now() + Duration::from_millis(ms);
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match sub.next_event(left) {
                        Ok(Some(ev)) if ev.node == node => return Ok(format!("{} (was {})", ev.state, ev.previous)),
                        Ok(Some(_)) => {}
                        Ok(None) => return test_fail(format!("no event of node {node} in {ms} ms")),
                        Err(e) => return test_fail(format!("node events: {e}")),
                    }
                }
            }
            "check" => self.remote(a.s(1)).check().map(|_| String::new()).map_err(Fail::from),
            // --- maps ---
            "map" => {
                let (name, seg, off, size, acc) = (a.s(1), a.s(2), a.n(3), a.n(4), access(a.s(5)));
                let map = if let Some(l) = self.locals.get(seg) {
                    l.map(off, size, acc)?
                } else if let Some(r) = self.remotes.get(seg) {
                    r.map(off, size, acc)?
                } else {
                    panic!("no segment {seg:?} to map")
                };
                let info = format!("len={} offset={} writable={}", map.len(), map.segment_offset(), map.is_writable());
                self.maps.insert(name.to_string(), map);
                Ok(info)
            }
            "unmap" => {
                self.maps.remove(a.s(1)).unwrap_or_else(|| panic!("no map {:?}", a.s(1)));
                Ok(String::new())
            }
            "r8" => Ok(self.map(a.s(1)).read::<u8>(a.us(2))?.to_string()),
            "r16" => Ok(self.map(a.s(1)).read::<u16>(a.us(2))?.to_string()),
            "r32" => Ok(self.map(a.s(1)).read::<u32>(a.us(2))?.to_string()),
            "r64" => Ok(self.map(a.s(1)).read::<u64>(a.us(2))?.to_string()),
            "w8" => self.map(a.s(1)).write::<u8>(a.us(2), a.n(3) as u8).map(|_| String::new()).map_err(Fail::from),
            "w16" => self.map(a.s(1)).write::<u16>(a.us(2), a.n(3) as u16).map(|_| String::new()).map_err(Fail::from),
            "w32" => self.map(a.s(1)).write::<u32>(a.us(2), a.n(3) as u32).map(|_| String::new()).map_err(Fail::from),
            "w64" => self.map(a.s(1)).write::<u64>(a.us(2), a.n(3)).map(|_| String::new()).map_err(Fail::from),
            "acq64" => Ok(self.map(a.s(1)).load_acquire_u64(a.us(2))?.to_string()),
            "rel64" => self.map(a.s(1)).store_release_u64(a.us(2), a.n(3)).map(|_| String::new()).map_err(Fail::from),
            "acq32" => Ok(self.map(a.s(1)).load_acquire_u32(a.us(2))?.to_string()),
            "rel32" => self.map(a.s(1)).store_release_u32(a.us(2), a.u32(3)).map(|_| String::new()).map_err(Fail::from),
            "waitacq64" => {
                // waitacq64 MAP OFF VALUE MS: polls an acquire load until it reads VALUE.
                let (m, off, want, ms) = (self.map(a.s(1)), a.us(2), a.n(3), a.n(4));
                let deadline = Instant::now() + Duration::from_millis(ms);
                loop {
                    let v = m.load_acquire_u64(off)?;
                    if v == want {
                        return Ok(String::new());
                    }
                    if Instant::now() > deadline {
                        return test_fail(format!("word at {off} is still {v}, not {want}, after {ms} ms"));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            "wbytes" => {
                self.map(a.s(1)).write_bytes(a.us(2), &from_hex(a.s(3))).map(|_| String::new()).map_err(Fail::from)
            }
            "rbytes" => {
                let mut v = vec![0u8; a.us(3)];
                self.map(a.s(1)).read_bytes(a.us(2), &mut v)?;
                Ok(to_hex(&v))
            }
            "fill" => self.map(a.s(1)).fill(a.us(2), a.us(3), a.n(4) as u8).map(|_| String::new()).map_err(Fail::from),
            "barrier" => {
                self.map(a.s(1)).store_barrier();
                Ok(String::new())
            }
            "flush" => {
                self.map(a.s(1)).flush();
                Ok(String::new())
            }
            "flushc" => self.map(a.s(1)).flush_checked().map(|_| String::new()).map_err(Fail::from),
            "wpat" => {
                // wpat MAP OFF LEN SEED POS: writes pattern SEED from absolute position POS.
                let m = self.map(a.s(1));
                m.write_bytes(a.us(2), &pattern(a.n(4), a.n(5), a.us(3)))?;
                m.store_barrier();
                Ok(String::new())
            }
            "vpat" => {
                // vpat MAP OFF LEN SEED POS: reads and compares with pattern SEED from POS.
                let (off, len, seed, pos) = (a.us(2), a.us(3), a.n(4), a.n(5));
                let mut v = vec![0u8; len];
                self.map(a.s(1)).read_bytes(off, &mut v)?;
                verify_pattern(&v, seed, pos)
            }
            "pioloop" => {
                // pioloop MAP LEN MS: writes round after round over the first LEN bytes
                // (round k: pattern 1000 + k), each posted by a barrier without waiting,
                // until a write is refused or MS ms pass; replies with the rounds written
                // and the refusal's variant.
                let (m, len, ms) = (self.map(a.s(1)), a.us(2), a.n(3));
                let started = Instant::now();
                let mut rounds = 0u64;
                loop {
                    if let Err(e) = m.write_bytes(0, &pattern(1000 + rounds + 1, 0, len)) {
                        return Ok(format!("{rounds} {}", variant_name(&e)));
                    }
                    m.store_barrier();
                    rounds += 1;
                    if started.elapsed() > Duration::from_millis(ms) {
                        return test_fail(format!("{rounds} rounds written in {ms} ms, none refused"));
                    }
                }
            }
            "sum" => {
                let mut v = vec![0u8; a.us(3)];
                self.map(a.s(1)).read_bytes(a.us(2), &mut v)?;
                Ok(format!("{:016x}", fnv64(&v)))
            }
            "rawwrite" => {
                // rawwrite MAP OFF BYTE: a store through Map::as_ptr, bypassing every check.
                let (m, off, byte) = (self.map(a.s(1)), a.us(2), a.n(3) as u8);
                assert!(off < m.len(), "rawwrite outside the map");
                // SAFETY: off is inside the map (asserted), which stays mapped while `m` lives.
                // For a read-only map this store faults on purpose: the test expects SIGSEGV.
                unsafe { m.as_ptr().add(off).write_volatile(byte) };
                Ok(String::new())
            }
            "rawread" => {
                let (m, off) = (self.map(a.s(1)), a.us(2));
                assert!(off < m.len(), "rawread outside the map");
                // SAFETY: off is inside the map (asserted), which stays mapped while `m` lives.
                Ok(unsafe { m.as_ptr().add(off).read_volatile() }.to_string())
            }
            // --- sequences ---
            "seq" => {
                let s = self.map(a.s(2)).sequence();
                self.seqs.insert(a.s(1).to_string(), s);
                Ok(String::new())
            }
            "seqstart" => Ok(format!("{:?}", self.seq(a.s(1)).start())),
            "seqcheck" => Ok(format!("{:?}", self.seq(a.s(1)).check())),
            "waitlost" => {
                // waitlost SEQ MS: polls check() until NotRetriable; prints the ms waited and
                // how many checks said Ok before.
                let (s, ms) = (self.seq(a.s(1)), a.n(2));
                let started = Instant::now();
                let mut oks = 0u64;
                loop {
                    match s.check() {
                        lanes::SequenceStatus::NotRetriable => {
                            return Ok(format!("{} {oks}", started.elapsed().as_millis()));
                        }
                        lanes::SequenceStatus::Ok => oks += 1,
                        other => return test_fail(format!("sequence check gave {other:?}")),
                    }
                    if started.elapsed() > Duration::from_millis(ms) {
                        return test_fail(format!("sequence still Ok after {ms} ms ({oks} checks)"));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            // --- DMA (queues of this process; LOCAL a local segment, REMOTE a connection) ---
            "dmaq" => {
                // dmaq Q MAX [nobatch]: a queue of MAX entries (nobatch: one descriptor per
                // batch, no merging).
                let mut q = self.fabric.create_dma_queue(a.us(2))?;
                if a.0.get(3) == Some(&"nobatch") {
                    q.set_batching(1, false);
                }
                self.queues.insert(a.s(1).to_string(), q);
                Ok(String::new())
            }
            "dma" | "dmavec" | "dmacb" | "dmastart" => {
                // dma Q LOCAL REMOTE LOFF LEN ROFF DIR: one transfer, waited for;
                // dmacb: the same, its end heard by a callback; dmavec Q LOCAL REMOTE DIR
                // SPEC: a vector (see `dma_vec`), waited for; dmastart: a vector, not
                // waited for. Replies with the queue's state.
                let (local, remote, q) = self.dma_parts(a.s(1), a.s(2), a.s(3));
                match cmd {
                    "dma" => q.start(local, remote, a.n(4), a.n(5), a.n(6), direction(a.s(7)), None)?,
                    "dmacb" => {
                        let (tx, rx) = mpsc::channel();
                        let cb = Box::new(move |s| {
                            let _ = tx.send(s);
                        });
                        q.start(local, remote, a.n(4), a.n(5), a.n(6), direction(a.s(7)), Some(cb))?;
                        return match rx.recv_timeout(Duration::from_secs(10)) {
                            Ok(s) => Ok(format!("{s:?}")),
                            Err(_) => test_fail("the DMA callback was not called within 10 s"),
                        };
                    }
                    _ => q.start_vec(local, remote, &dma_vec(a.s(5)), direction(a.s(4)), None)?,
                }
                if cmd == "dmastart" {
                    return Ok(String::new());
                }
                Ok(format!("{:?}", q.wait(DMA_WAIT)?))
            }
            "dmawait" => {
                // dmawait Q MS: waits for the queue's transfers; replies with its state.
                let q = self.queues.get_mut(a.s(1)).unwrap_or_else(|| panic!("no queue {:?}", a.s(1)));
                Ok(format!("{:?}", q.wait(timeout(a.s(2)))?))
            }
            "dmauntilloss" => {
                // dmauntilloss Q LOCAL REMOTE SPEC MS: keeps waiting for the queue and
                // writing vector SPEC until the loss of REMOTE shows, as a failed queue or a
                // refused start, for at most MS ms; replies `failed: REASON` or `refused`,
                // then whether later starts are refused (within MS ms more) and whether the
                // queue then is Done or Error.
                let (local, remote, q) = self.dma_parts(a.s(1), a.s(2), a.s(3));
                let (spec, ms) = (dma_vec(a.s(4)), a.n(5));
                let started = Instant::now();
                let outcome = loop {
                    if started.elapsed() > Duration::from_millis(ms) {
                        return test_fail(format!("the loss was not noticed within {ms} ms"));
                    }
                    match q.wait(DMA_WAIT) {
                        Err(Error::DmaFailed { reason }) => break format!("failed: {reason}"),
                        Err(e) => return Err(e.into()),
                        Ok(_) => {}
                    }
                    match q.start_vec(local, remote, &spec, DmaDirection::Write, None) {
                        Err(Error::SegmentLost { .. }) => break "refused".to_string(),
                        Err(e) => return Err(e.into()),
                        Ok(()) => {}
                    }
                };
                let noticed = started.elapsed().as_millis();
                // Then starts are refused: at once on one host; across hosts once the
                // daemons' notice of the loss arrived (a start accepted before it fails).
                let refused_by = Instant::now() + Duration::from_millis(ms);
                let later = loop {
                    if q.start(local, remote, 0, 8, 0, DmaDirection::Write, None).is_err() {
                        break true;
                    }
                    let _ = q.wait(DMA_WAIT);
                    if Instant::now() > refused_by {
                        break false;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                let state = q.state();
                let settled = matches!(state, DmaQueueState::Done | DmaQueueState::Error);
                Ok(format!("{outcome} | later_start_fails={later} settled={settled} ms={noticed}"))
            }
            // --- caller-provided memory ---
            "register" => {
                // register NAME ID LEN SEED: a page-aligned heap buffer filled with pattern
                // SEED, registered as segment ID.
                let (name, id, len, seed) = (a.s(1), a.u32(2), a.us(3), a.n(4));
                let layout = std::alloc::Layout::from_size_align(len.next_multiple_of(4096), 4096).expect("layout");
                // SAFETY: the layout has a non-zero size.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                assert!(!p.is_null(), "allocation failed");
                let data = pattern(seed, 0, len);
                // SAFETY: p is a fresh allocation of at least len bytes, disjoint from `data`.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p, len) };
                // SAFETY: the buffer is ours, mapped, page aligned and len bytes long; no other
                // thread touches it; it is never freed (leaked for the life of this process),
                // so it stays mapped while the segment exists.
                let seg = unsafe { self.fabric.register_segment_memory(id, p, len) }?;
                self.bufs.insert(name.to_string(), Buf { addr: p as usize, len });
                self.locals.insert(name.to_string(), seg);
                Ok(String::new())
            }
            "register_again" => {
                // register_again NAME BUF ID: registers the buffer of BUF once more, as ID.
                let (name, b, id) = (a.s(1), self.buf(a.s(2)), a.u32(3));
                // SAFETY: as for `register`: the buffer is ours, page aligned, never freed.
                let seg = unsafe { self.fabric.register_segment_memory(id, b.addr as *mut u8, b.len) }?;
                self.locals.insert(name.to_string(), seg);
                Ok(String::new())
            }
            "bufvpat" => {
                let (b, off, len, seed, pos) = (self.buf(a.s(1)), a.us(2), a.us(3), a.n(4), a.n(5));
                assert!(off + len <= b.len, "bufvpat outside the buffer");
                let v: Vec<u8> = (0..len)
                    .map(|i| {
                        // SAFETY: inside the registered buffer, which is never freed.
                        unsafe { ((b.addr + off + i) as *const u8).read_volatile() }
                    })
                    .collect();
                verify_pattern(&v, seed, pos)
            }
            "bufwpat" => {
                let (b, off, len, seed, pos) = (self.buf(a.s(1)), a.us(2), a.us(3), a.n(4), a.n(5));
                assert!(off + len <= b.len, "bufwpat outside the buffer");
                for (i, byte) in pattern(seed, pos, len).into_iter().enumerate() {
                    // SAFETY: inside the registered buffer, which is never freed.
                    unsafe { ((b.addr + off + i) as *mut u8).write_volatile(byte) };
                }
                std::sync::atomic::fence(Ordering::SeqCst);
                Ok(String::new())
            }
            other => panic!("unknown node command {other:?}"),
        }
    }
}

fn verify_pattern(v: &[u8], seed: u64, pos: u64) -> Reply {
    for (i, &b) in v.iter().enumerate() {
        let want = pattern_byte(seed, pos + i as u64);
        if b != want {
            return test_fail(format!(
                "mismatch at byte {i} (pattern position {}): {b:#04x} != {want:#04x}",
                pos + i as u64
            ));
        }
    }
    Ok(format!("{:016x}", fnv64(v)))
}
