//! The node command interpreter of the multi-process tests of interrupts, data interrupts
//! and segment events (`tests/interrupts.rs`, `tests/events.rs`), and their test data; the
//! harness itself (child processes, their protocol, topologies, scratch directories) is
//! `lanes-testkit`'s, re-exported here.
//!
//! Every node of a scenario is a child process in role `node` (see `lanes_testkit::process`)
//! that opens the fabric as one node and executes one command per line read from its stdin
//! (`icreate i 7`, `iconnect r 8 7 5000`, `itrig r 1000`, ...). `bg TAG CMD...` runs a
//! command on a thread of its own and answers at once; its result comes later as the note
//! `TAG`. Callbacks and long loops report through notes too. Results carry `key=value`
//! fields (`count=`, `t=`, ...). A child also dies with its parent (`PR_SET_PDEATHSIG`, and
//! end of stdin).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lanes::fabric::{
    CallbackAction, LocalDataInterrupt, LocalInterrupt, RemoteDataInterrupt, RemoteInterrupt,
    MAX_DATA_INTERRUPT_PAYLOAD,
};
use lanes::{Error, Fabric, FabricConfig, LocalSegment, NodeId, RemoteSegment, Timeout};

/// The longest any single wait of these tests may take.
pub const MAX_WAIT: Duration = Duration::from_secs(20);
/// Liveness bound: a death or removal must be noticed within this.
pub const NOTICE: Duration = Duration::from_secs(2);
/// Loops that run "until an error" give up after this.
const LOOP_CAP: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Clocks and test data
// ---------------------------------------------------------------------------------------

/// Milliseconds from `from` to `to` (both [`mono_ns`]), negative if `to` is earlier.
pub fn ms_between(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e6
}

pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// FNV-1a, 64 bits.
pub fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Sizes every sender hits now and then: the edges of the payload range.
const EDGE_LENS: [usize; 10] = [1, 2, 8, 9, 17, 63, 64, 65, 4095, 4096];

/// The length of message `k` of sender `s`: 0..=4096. Only sender 0 sends empty messages
/// (an empty message cannot say who sent it), so the receiver can still attribute them.
pub fn msg_len(s: u8, k: u64) -> usize {
    if s == 0 && k % 50 == 7 {
        return 0;
    }
    let r = splitmix64((u64::from(s) << 40) ^ k ^ 0x1e75);
    if k % 4 == 0 {
        EDGE_LENS[(r % EDGE_LENS.len() as u64) as usize]
    } else {
        1 + (r % MAX_DATA_INTERRUPT_PAYLOAD as u64) as usize
    }
}

/// Message `k` of sender `s`: byte 0 is the sender, bytes 1..9 (when they fit) the message
/// number, then pseudo-random bytes; a message of 17 bytes or more ends with the FNV-1a
/// checksum of everything before it.
pub fn message(s: u8, k: u64) -> Vec<u8> {
    let len = msg_len(s, k);
    let mut v = Vec::with_capacity(len);
    if len == 0 {
        return v;
    }
    v.push(s);
    v.extend(k.to_le_bytes().iter().take(len.min(9) - 1));
    let seed = splitmix64((u64::from(s) << 48) ^ k ^ 0x5eed);
    let body = if len >= 17 { len - 8 } else { len };
    let mut i = 0u64;
    while v.len() < body {
        let w = splitmix64(seed ^ i).to_le_bytes();
        let take = (body - v.len()).min(8);
        v.extend_from_slice(&w[..take]);
        i += 1;
    }
    if len >= 17 {
        let sum = fnv64(&v);
        v.extend_from_slice(&sum.to_le_bytes());
    }
    debug_assert_eq!(v.len(), len);
    v
}

/// Checks a received message on its own: the embedded checksum, when it has one.
pub fn self_check(msg: &[u8]) -> Result<(), String> {
    if msg.len() >= 17 {
        let (body, sum) = msg.split_at(msg.len() - 8);
        let want = u64::from_le_bytes(sum.try_into().expect("8 bytes"));
        if fnv64(body) != want {
            return Err(format!("a {}-byte message from sender {} fails its checksum", msg.len(), msg[0]));
        }
    }
    Ok(())
}

/// Folds one message into a sender's running sum (so message boundaries count too).
pub fn fold_sum(acc: u64, msg: &[u8]) -> u64 {
    splitmix64(acc ^ fnv64(msg) ^ ((msg.len() as u64) << 48))
}

/// The running sum of the first `count` messages of sender `s`.
pub fn expected_sum(s: u8, count: u64) -> u64 {
    (0..count).fold(0, |acc, k| fold_sum(acc, &message(s, k)))
}

#[allow(unused_imports)] // each test binary uses its own part
pub use lanes_testkit::process::{
    field, mono_ns, parse_result, tail_field, try_field, wait_until_within as wait_until, WAIT,
};
use lanes_testkit::process::{lanes_err_line, note, ok_line, say, test_err_line, ChildIo, DIR_VAR, NODE_VAR};
#[allow(unused_imports)]
pub use lanes_testkit::{cluster, netns, topology_cases, Bounds, ErrReply, Hosts, Proc, TestDir, Topology};

// ---------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------

/// The body of each test file's `child_entry` test: nothing in the parent; in a child,
/// the node command interpreter (role `node`) or a cluster daemon (role `daemon`, for the
/// hosts of [`cluster::Cluster`]). Never returns in a child.
pub fn child_entry() {
    lanes_testkit::child_entry(|role, io| {
        lanes_testkit::process::die_with_parent();
        if role == "node" {
            std::process::exit(run_node(io));
        }
        false
    });
}

enum Fail {
    Lanes(Error, String),
    Test(String),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Lanes(e, String::new())
    }
}

type Reply = Result<String, Fail>;

/// A library error with extra `key=value` fields for the parent.
fn lanes_fail<T>(e: Error, fields: String) -> Result<T, Fail> {
    Err(Fail::Lanes(e, fields))
}

fn test_fail<T>(msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::Test(msg.into()))
}

fn result_line(r: Reply) -> String {
    match r {
        Ok(s) => ok_line(&s),
        Err(Fail::Lanes(e, fields)) => lanes_err_line(&e, &fields),
        Err(Fail::Test(m)) => test_err_line(&m),
    }
}

enum Obj {
    LInt(Arc<LocalInterrupt>),
    RInt(Arc<RemoteInterrupt>),
    LData(Arc<LocalDataInterrupt>),
    RData(Arc<RemoteDataInterrupt>),
    LSeg(Arc<LocalSegment>),
    RSeg(Arc<RemoteSegment>),
}

/// What a receiving process has accepted so far, per sender: next message number and
/// running sum. Shared by `drecv`, `dwait` and `don_message` callbacks.
#[derive(Default)]
struct Book {
    next: BTreeMap<u8, u64>,
    sums: BTreeMap<u8, u64>,
}

impl Book {
    /// Accepts one message if it is exactly the next one its sender should send.
    fn accept(&mut self, msg: &[u8]) -> Result<(), String> {
        self_check(msg)?;
        let s = if msg.is_empty() { 0 } else { msg[0] };
        let k = *self.next.get(&s).unwrap_or(&0);
        let want = message(s, k);
        if msg != want.as_slice() {
            let got_k = if msg.len() >= 9 { u64::from_le_bytes(msg[1..9].try_into().expect("8")) as i128 } else { -1 };
            let diff = msg.iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "sender {s}: expected message {k} ({} bytes), got {} bytes (number field {got_k}, first \
                 difference at {diff:?})",
                want.len(),
                msg.len()
            ));
        }
        self.next.insert(s, k + 1);
        let acc = self.sums.entry(s).or_insert(0);
        *acc = fold_sum(*acc, msg);
        Ok(())
    }

    fn count(&self, s: u8) -> u64 {
        *self.next.get(&s).unwrap_or(&0)
    }

    fn total(&self) -> u64 {
        self.next.values().sum()
    }

    /// `s:count:sum` for every sender seen, space separated.
    fn summary(&self) -> String {
        self.next.iter().map(|(s, n)| format!("{s}:{n}:{:016x}", self.sums[s])).collect::<Vec<_>>().join(" ")
    }
}

/// Parses a book summary: sender -> (count, sum).
pub fn parse_book(s: &str) -> BTreeMap<u8, (u64, u64)> {
    s.split_whitespace()
        .filter(|w| w.matches(':').count() == 2)
        .map(|w| {
            let mut p = w.split(':');
            let s = p.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad book entry {w:?}"));
            let n = p.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad book entry {w:?}"));
            let sum = p.next().and_then(|v| u64::from_str_radix(v, 16).ok()).unwrap_or_else(|| panic!("bad {w:?}"));
            (s, (n, sum))
        })
        .collect()
}

struct Ctx {
    fabric: Fabric,
    objs: Mutex<HashMap<String, Obj>>,
    book: Arc<Mutex<Book>>,
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

struct Args<'a>(Vec<&'a str>);

impl<'a> Args<'a> {
    fn s(&self, i: usize) -> &'a str {
        self.0.get(i).copied().unwrap_or_else(|| panic!("command {:?}: missing argument {i}", self.0))
    }

    fn opt(&self, i: usize) -> Option<&'a str> {
        self.0.get(i).copied()
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

    /// A count, or `inf` for "until an error" (capped by [`LOOP_CAP`]).
    fn count(&self, i: usize) -> Option<u64> {
        (self.s(i) != "inf").then(|| self.n(i))
    }

    fn timeout(&self, i: usize) -> Timeout {
        match self.s(i) {
            "imm" => Timeout::Immediate,
            "inf" => Timeout::Infinite,
            ms => Timeout::After(Duration::from_millis(ms.parse().expect("timeout in ms"))),
        }
    }
}

/// The fabric configuration of a node child: from the environment (`LANES_CONFIG`,
/// `LANES_HOST`, `LANES_DIR`, `LANES_NODE_ID`) when a topology of several hosts set
/// `LANES_CONFIG`, else the test directory and node.
fn node_config() -> lanes::Result<FabricConfig> {
    if std::env::var_os("LANES_CONFIG").is_some() {
        return FabricConfig::from_env();
    }
    let dir = std::env::var(DIR_VAR).expect("fabric dir variable");
    let node: u32 = std::env::var(NODE_VAR).expect("node variable").parse().expect("node id");
    NodeId::new(node).map(|n| FabricConfig::new(&dir, n))
}

fn run_node(io: &ChildIo) -> i32 {
    let fabric = match node_config().and_then(Fabric::open_with) {
        Ok(f) => f,
        Err(e) => {
            say(&format!("OPEN_FAILED {e}"));
            return 2;
        }
    };
    let ctx = Arc::new(Ctx {
        fabric,
        objs: Mutex::new(HashMap::new()),
        book: Arc::new(Mutex::new(Book::default())),
        counters: Mutex::new(HashMap::new()),
    });
    say(&format!("READY {}", std::process::id()));
    io.serve(|line| {
        if line == "exit" {
            ctx.objs.lock().unwrap_or_else(|e| e.into_inner()).clear();
            return ok_line("");
        }
        // `bg TAG CMD...`: the command runs on a thread of its own; its result comes as the
        // note TAG.
        if let Some(rest) = line.strip_prefix("bg ") {
            let (tag, cmd) = rest.split_once(' ').expect("bg TAG CMD");
            let (tag, cmd) = (tag.to_string(), cmd.to_string());
            let c = ctx.clone();
            std::thread::spawn(move || note(&tag, &result_line(guarded(&c, &cmd))));
            return ok_line("");
        }
        result_line(guarded(&ctx, line))
    });
    0
}

/// Runs one command; a panic becomes an `ERR Panic` reply rather than a lost child.
fn guarded(ctx: &Arc<Ctx>, line: &str) -> Reply {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.exec(line))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            test_fail(format!("panic in {line:?}: {msg}"))
        }
    }
}

macro_rules! getter {
    ($fn:ident, $variant:ident, $ty:ty) => {
        fn $fn(&self, name: &str) -> Arc<$ty> {
            match self.objs.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
                Some(Obj::$variant(x)) => x.clone(),
                _ => panic!("no {} named {name:?}", stringify!($variant)),
            }
        }
    };
}

impl Ctx {
    getter!(lint, LInt, LocalInterrupt);
    getter!(rint, RInt, RemoteInterrupt);
    getter!(ldata, LData, LocalDataInterrupt);
    getter!(rdata, RData, RemoteDataInterrupt);
    getter!(lseg, LSeg, LocalSegment);
    getter!(rseg, RSeg, RemoteSegment);

    fn put(&self, name: &str, o: Obj) {
        self.objs.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), o);
    }

    /// Checks a received message into the book: it must be the next one its sender sent.
    fn accept(&self, msg: &[u8]) -> Result<(), Fail> {
        self.book.lock().unwrap_or_else(|e| e.into_inner()).accept(msg).or_else(test_fail)
    }

    fn counter(&self, name: &str) -> Arc<AtomicU64> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner()).entry(name.to_string()).or_default().clone()
    }

    fn exec(self: &Arc<Self>, line: &str) -> Reply {
        let a = Args(line.split_whitespace().collect());
        match a.s(0) {
            "pid" => Ok(std::process::id().to_string()),
            "sleep" => {
                std::thread::sleep(Duration::from_millis(a.n(1)));
                Ok(String::new())
            }
            "drop" => {
                let o = self.objs.lock().unwrap_or_else(|e| e.into_inner()).remove(a.s(1));
                assert!(o.is_some(), "no object {:?} to drop", a.s(1));
                drop(o);
                Ok(format!("t={}", mono_ns()))
            }

            // --- interrupts ---
            "icreate" => {
                let num = if a.s(2) == "auto" { None } else { Some(a.u32(2)) };
                let i = self.fabric.create_interrupt(num)?;
                let n = i.number();
                self.put(a.s(1), Obj::LInt(Arc::new(i)));
                Ok(n.to_string())
            }
            "iconnect" => {
                let r = self.fabric.connect_interrupt(a.u32(2), a.u32(3), a.timeout(4))?;
                let info = format!("node={} number={}", r.node_id(), r.number());
                self.put(a.s(1), Obj::RInt(Arc::new(r)));
                Ok(info)
            }
            "ipoll" => {
                self.lint(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "ipending" => Ok(self.lint(a.s(1)).pending().to_string()),
            "iremove" => {
                let t = mono_ns();
                self.lint(a.s(1)).remove()?;
                Ok(format!("t={t}"))
            }
            "itrig" => {
                // itrig NAME COUNT|inf [PAUSE_US]: triggers COUNT times (or until an error),
                // in bursts of 1..=64 with a sleep of PAUSE_US between bursts if given.
                let (r, limit) = (self.rint(a.s(1)), a.count(2));
                let pause = a.opt(3).map(|p| Duration::from_micros(p.parse().expect("pause in us")));
                let started = Instant::now();
                let mut count = 0u64;
                let mut burst_left = 0u64;
                let mut rng = 0x7e57u64;
                while limit.is_none_or(|l| count < l) {
                    if let Err(e) = r.trigger() {
                        return lanes_fail(e, format!("count={count} t={}", mono_ns()));
                    }
                    count += 1;
                    if let Some(p) = pause {
                        if burst_left == 0 {
                            rng = splitmix64(rng);
                            burst_left = 1 + rng % 64;
                            std::thread::sleep(p);
                        }
                        burst_left -= 1;
                    }
                    if count % 100_000 == 0 {
                        note("progress", &format!("{} {count}", a.s(1)));
                    }
                    if limit.is_none() && count % 1024 == 0 && started.elapsed() > LOOP_CAP {
                        return test_fail(format!("no trigger failed in {LOOP_CAP:?} ({count} triggers)"));
                    }
                }
                Ok(format!("count={count}"))
            }
            "iwait" => {
                // iwait NAME COUNT TIMEOUT: COUNT waits, each bounded by TIMEOUT.
                let (l, n, t) = (self.lint(a.s(1)), a.n(2), a.timeout(3));
                for k in 0..n {
                    if let Err(e) = l.wait(t) {
                        return lanes_fail(e, format!("count={k} t={}", mono_ns()));
                    }
                    if (k + 1) % 100_000 == 0 {
                        note("progress", &format!("{} {}", a.s(1), k + 1));
                    }
                }
                Ok(format!("count={n} t={}", mono_ns()))
            }
            "ion_trigger" => {
                // ion_trigger NAME CANCEL_AFTER: counts calls in counter NAME; cancels at the
                // CANCEL_AFTER-th call (0: never), noting `cb NAME cancelled`.
                let (name, after) = (a.s(1).to_string(), a.n(2));
                let c = self.counter(&name);
                self.lint(&name).on_trigger(move || {
                    let k = c.fetch_add(1, Ordering::SeqCst) + 1;
                    if k == after {
                        note("cb", &format!("{name} cancelled count={k}"));
                        CallbackAction::Cancel
                    } else {
                        CallbackAction::Continue
                    }
                })?;
                Ok(String::new())
            }
            "count" => Ok(self.counter(a.s(1)).load(Ordering::SeqCst).to_string()),

            // --- data interrupts ---
            "dcreate" => {
                let num = if a.s(2) == "auto" { None } else { Some(a.u32(2)) };
                let d = self.fabric.create_data_interrupt(num)?;
                let n = d.number();
                self.put(a.s(1), Obj::LData(Arc::new(d)));
                Ok(n.to_string())
            }
            "dconnect" => {
                let r = self.fabric.connect_data_interrupt(a.u32(2), a.u32(3), a.timeout(4))?;
                let info = format!("node={} number={}", r.node_id(), r.number());
                self.put(a.s(1), Obj::RData(Arc::new(r)));
                Ok(info)
            }
            "dpoll" => {
                self.ldata(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "dremove" => {
                let t = mono_ns();
                self.ldata(a.s(1)).remove()?;
                Ok(format!("t={t}"))
            }
            "dsend" => {
                // dsend NAME SENDER FROM COUNT|inf TIMEOUT [report]: sends messages FROM.. of
                // SENDER; with `report`, notes `sent SENDER K` after each one that succeeded.
                let (r, s, from, limit, t) = (self.rdata(a.s(1)), a.n(2) as u8, a.n(3), a.count(4), a.timeout(5));
                let report = a.opt(6) == Some("report");
                let started = Instant::now();
                let mut sum = 0u64;
                let mut k = from;
                while limit.is_none_or(|l| k < from + l) {
                    let m = message(s, k);
                    let call = Instant::now();
                    if let Err(e) = r.trigger(&m, t) {
                        let dur = call.elapsed().as_micros();
                        return lanes_fail(e, format!("sent={} t={} dur_us={dur}", k - from, mono_ns()));
                    }
                    if report {
                        note("sent", &format!("{s} {k}"));
                    }
                    sum = fold_sum(sum, &m);
                    k += 1;
                    if limit.is_none() && started.elapsed() > LOOP_CAP {
                        return test_fail(format!("no send failed in {LOOP_CAP:?} ({} sent)", k - from));
                    }
                }
                Ok(format!("sent={} sum={sum:016x}", k - from))
            }
            "dsend_big" => {
                // dsend_big NAME LEN: one payload of LEN bytes (to provoke PayloadTooLarge).
                self.rdata(a.s(1)).trigger(&vec![0x5a; a.n(2) as usize], Timeout::Immediate)?;
                Ok(String::new())
            }
            "dwait" => {
                // dwait NAME BUFLEN TIMEOUT: one wait with a buffer of BUFLEN bytes; the
                // message must be the next one its sender should send.
                let (d, t) = (self.ldata(a.s(1)), a.timeout(3));
                let mut buf = vec![0u8; a.n(2) as usize];
                let n = match d.wait(&mut buf, t) {
                    Ok(n) => n,
                    Err(e) => return lanes_fail(e, format!("t={}", mono_ns())),
                };
                self.accept(&buf[..n])?;
                Ok(format!("len={n} sender={} t={}", buf.first().copied().unwrap_or(0), mono_ns()))
            }
            "drecv" => {
                // drecv NAME N TIMEOUT: receives and checks N messages (each wait bounded).
                let (d, n, t) = (self.ldata(a.s(1)), a.n(2), a.timeout(3));
                self.receive(&d, t, |_, got| got >= n)
            }
            "drecv_until" => {
                // drecv_until NAME S:N,S:N TIMEOUT: receives until the book counts reach the
                // targets, then drains what is still queued; replies with the book.
                let (d, t) = (self.ldata(a.s(1)), a.timeout(3));
                let targets: Vec<(u8, u64)> = a
                    .s(2)
                    .split(',')
                    .map(|p| {
                        let (s, n) = p.split_once(':').expect("S:N");
                        (s.parse().expect("sender"), n.parse().expect("count"))
                    })
                    .collect();
                self.receive(&d, t, |b, _| targets.iter().all(|&(s, n)| b.count(s) >= n))?;
                self.drain(&d)
            }
            "drain" => {
                let d = self.ldata(a.s(1));
                self.drain(&d)
            }
            "dtry" => {
                // dtry NAME BUFLEN: one `try_wait` with a buffer of BUFLEN bytes: `none`, or
                // the message (checked as dwait's).
                let d = self.ldata(a.s(1));
                let mut buf = vec![0u8; a.n(2) as usize];
                match d.try_wait(&mut buf)? {
                    None => Ok("none".into()),
                    Some(n) => {
                        self.accept(&buf[..n])?;
                        Ok(format!("len={n}"))
                    }
                }
            }
            "dspin" => {
                // dspin NAME N TIMEOUT_MS: receives and checks N messages as a program's own
                // spin loop does: `try_wait`, and a progress pass of this process's fabric
                // whenever nothing was there; fails if TIMEOUT_MS pass first.
                let (d, n) = (self.ldata(a.s(1)), a.n(2));
                let deadline = Instant::now() + Duration::from_millis(a.n(3));
                let driver = self.fabric.progress_driver();
                let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
                let (mut got, mut empty) = (0u64, 0u64);
                while got < n {
                    match d.try_wait(&mut buf)? {
                        Some(len) => {
                            self.accept(&buf[..len])?;
                            got += 1;
                        }
                        None if Instant::now() >= deadline => {
                            return test_fail(format!("dspin: {got} of {n} messages within {} ms", a.n(3)));
                        }
                        None => {
                            empty += 1;
                            driver.poll();
                        }
                    }
                }
                let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
                Ok(format!("received={got} empty_tries={empty} {}", b.summary()))
            }
            "book" => Ok(self.book.lock().unwrap_or_else(|e| e.into_inner()).summary()),
            "don_message" => {
                // don_message NAME CANCEL_AFTER: checks each message into the book, counts calls
                // in counter NAME, cancels at the CANCEL_AFTER-th call (0: never).
                let (name, after) = (a.s(1).to_string(), a.n(2));
                let (c, book) = (self.counter(&name), self.book.clone());
                self.ldata(&name).on_message(move |msg| {
                    let k = c.fetch_add(1, Ordering::SeqCst) + 1;
                    if let Err(e) = book.lock().unwrap_or_else(|e| e.into_inner()).accept(msg) {
                        note("cb", &format!("{name} bad {e}"));
                        return CallbackAction::Cancel;
                    }
                    if k == after {
                        note("cb", &format!("{name} cancelled count={k}"));
                        CallbackAction::Cancel
                    } else {
                        CallbackAction::Continue
                    }
                })?;
                Ok(String::new())
            }

            // --- segments and events ---
            "seg" => {
                // seg NAME ID SIZE: creates, prepares and makes available.
                let s = self.fabric.create_segment(a.u32(2), a.n(3))?;
                s.prepare()?;
                s.set_available()?;
                self.put(a.s(1), Obj::LSeg(Arc::new(s)));
                Ok(String::new())
            }
            "available" => {
                self.lseg(a.s(1)).set_available()?;
                Ok(format!("t={}", mono_ns()))
            }
            "unavailable" => {
                self.lseg(a.s(1)).set_unavailable()?;
                Ok(format!("t={}", mono_ns()))
            }
            "segremove" => {
                let t = mono_ns();
                self.lseg(a.s(1)).remove(true)?;
                Ok(format!("t={t}"))
            }
            "peers" => {
                let mut p = self.lseg(a.s(1)).connected_peers();
                p.sort_unstable();
                Ok(p.iter().map(|(n, p)| format!("{n}:{p}")).collect::<Vec<_>>().join(","))
            }
            "connect" => {
                let r = self.fabric.connect_segment(a.u32(2), a.u32(3), a.timeout(4))?;
                self.put(a.s(1), Obj::RSeg(Arc::new(r)));
                Ok(String::new())
            }
            "rpoll" => {
                self.rseg(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "lpoll" => {
                self.lseg(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "lwait" => match self.lseg(a.s(1)).wait_event(a.timeout(2)) {
                Ok(ev) => Ok(format!("t={} ev={ev:?}", mono_ns())),
                Err(e) => lanes_fail(e, format!("t={}", mono_ns())),
            },
            "rwait" => match self.rseg(a.s(1)).wait_event(a.timeout(2)) {
                Ok(ev) => Ok(format!("t={} ev={ev:?}", mono_ns())),
                Err(e) => lanes_fail(e, format!("t={}", mono_ns())),
            },
            "rstate" => Ok(format!("{:?}", self.rseg(a.s(1)).state())),
            "rcheck" => {
                self.rseg(a.s(1)).check()?;
                Ok(String::new())
            }
            "lon_event" => {
                // lon_event NAME TAG: notes `TAG t=.. ev=..` for every event.
                let tag = a.s(2).to_string();
                self.lseg(a.s(1)).on_event(move |ev| {
                    note(&tag, &format!("t={} ev={ev:?}", mono_ns()));
                    CallbackAction::Continue
                })?;
                Ok(String::new())
            }
            "ron_event" => {
                // ron_event NAME TAG: notes `TAG t=.. ev=..` for every event.
                let tag = a.s(2).to_string();
                self.rseg(a.s(1)).on_event(move |ev| {
                    note(&tag, &format!("t={} ev={ev:?}", mono_ns()));
                    CallbackAction::Continue
                })?;
                Ok(String::new())
            }
            other => test_fail(format!("unknown command {other:?}")),
        }
    }

    /// Waits for messages, checking each into the book, until `done(book, received)`.
    fn receive(&self, d: &LocalDataInterrupt, t: Timeout, mut done: impl FnMut(&Book, u64) -> bool) -> Reply {
        let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
        let mut got = 0u64;
        loop {
            {
                let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
                if done(&b, got) {
                    return Ok(format!("received={got} {}", b.summary()));
                }
            }
            let n = match d.wait(&mut buf, t) {
                Ok(n) => n,
                Err(e) => {
                    let b = self.book.lock().unwrap_or_else(|e| e.into_inner()).summary();
                    return lanes_fail(e, format!("received={got} t={} book: {b}", mono_ns()));
                }
            };
            self.accept(&buf[..n])?;
            got += 1;
        }
    }

    /// Receives what is queued now (immediate waits until one times out).
    fn drain(&self, d: &LocalDataInterrupt) -> Reply {
        let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
        let mut got = 0u64;
        loop {
            match d.wait(&mut buf, Timeout::Immediate) {
                Ok(n) => {
                    self.accept(&buf[..n])?;
                    got += 1;
                }
                Err(Error::Timeout { .. }) => {
                    let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
                    return Ok(format!("drained={got} {}", b.summary()));
                }
                Err(e) => return lanes_fail(e, format!("drained={got}")),
            }
        }
    }
}
