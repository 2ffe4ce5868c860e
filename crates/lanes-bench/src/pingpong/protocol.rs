//! The ping-pong wire format inside the two mailbox segments, and both sides' loops.
//!
//! ```text
//! mailbox offset   0  command line: seq, kind, size, iterations, arg0, arg1, base
//!                     (client -> server mailbox); ack seq (server -> client mailbox)
//!                 64  floor line: the one cache line both processes spin on (server's)
//!                128  message area: payload, then the sequence word stored last
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lanes::{Fabric, LocalSegment, Map, MapAccess, RemoteSegment, RemoteState, Timeout};

use crate::measure::clock::now_ticks;

/// The server's mailbox id when `--server` runs on its own ("PP").
pub const DEFAULT_SERVER_SEGMENT: u32 = 0x5050_0001;

const CTRL: usize = 0;
const CTRL_SEQ: usize = CTRL;
const CTRL_KIND: usize = CTRL + 8;
const CTRL_SIZE: usize = CTRL + 16;
const CTRL_ITERS: usize = CTRL + 24;
const CTRL_ARG0: usize = CTRL + 32;
const CTRL_ARG1: usize = CTRL + 40;
const CTRL_BASE: usize = CTRL + 48;
const FLOOR: usize = 64;
const MSG: usize = 128;

/// Spins a waiting side does between checks that its peer still lives.
const SPINS_PER_LIVENESS_CHECK: u32 = 1 << 12;
/// After this long without progress a waiter sleeps between checks (an idle server).
const IDLE_AFTER: Duration = Duration::from_secs(1);

/// What the client asks of the server.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Hello { node: u32, segment: u32 },
    Floor { iterations: usize, base: u64 },
    Pio { size: usize, iterations: usize, base: u64 },
    Done,
}

enum Segment {
    Local(#[allow(dead_code)] LocalSegment),
    Remote(RemoteSegment),
}

/// One side's mailbox, local (spun on) or remote (written to).
pub struct Mailbox {
    seg: Segment,
    map: Map,
    id: u32,
}

impl Mailbox {
    fn bytes_for(max_size: usize) -> u64 {
        (MSG + max_size).div_ceil(4096) as u64 * 4096
    }

    pub fn create(fabric: &Fabric, id: Option<u32>, max_size: usize) -> Result<Mailbox, String> {
        let size = Self::bytes_for(max_size);
        let seg = match id {
            Some(id) => fabric.create_segment(id, size),
            None => fabric.create_segment_auto_id(size),
        }
        .map_err(|e| format!("creating the mailbox segment: {e}"))?;
        seg.prepare().and_then(|_| seg.set_available()).map_err(|e| e.to_string())?;
        let map = seg.map(0, size, MapAccess::ReadWrite).map_err(|e| e.to_string())?;
        let id = seg.id();
        Ok(Mailbox { seg: Segment::Local(seg), map, id })
    }

    pub fn connect(remote: RemoteSegment, max_size: usize) -> Result<Mailbox, String> {
        let need = Self::bytes_for(max_size);
        if remote.size() < need {
            return Err(format!("peer mailbox holds {} bytes, {need} needed for the message sizes", remote.size()));
        }
        let map = remote.map(0, need, MapAccess::ReadWrite).map_err(|e| e.to_string())?;
        let id = remote.id();
        Ok(Mailbox { seg: Segment::Remote(remote), map, id })
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// For a remote mailbox: whether its owner is still there.
    fn peer_alive(&self) -> bool {
        match &self.seg {
            Segment::Local(_) => true,
            Segment::Remote(r) => !matches!(r.state(), RemoteState::Lost(_)),
        }
    }

    fn floor_word(&self) -> &AtomicU64 {
        // SAFETY: FLOOR is inside the mapping (mailboxes are at least one page) and 8-aligned
        // (maps start on a page); the word is only ever accessed atomically by both sides.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(FLOOR).cast()) }
    }

    /// Writes a `size`-byte message whose final word is `seq`.
    #[inline(always)]
    fn put(&self, size: usize, payload: &[u8], seq: u64) -> Result<(), String> {
        let (tail, wide) = tail_of(size);
        if tail > MSG {
            self.map.write_bytes(MSG, &payload[..tail - MSG]).map_err(|e| e.to_string())?;
        }
        if wide { self.map.store_release_u64(tail, seq) } else { self.map.store_release_u32(tail, seq as u32) }
            .map_err(|e| e.to_string())
    }

    /// Whether the message with `seq` has fully arrived.
    #[inline(always)]
    fn arrived(&self, size: usize, seq: u64) -> Result<bool, String> {
        let (tail, wide) = tail_of(size);
        let got = if wide { self.map.load_acquire_u64(tail) } else { self.map.load_acquire_u32(tail).map(u64::from) }
            .map_err(|e| e.to_string())?;
        Ok(got == if wide { seq } else { seq & 0xFFFF_FFFF })
    }

    fn word(&self, off: usize) -> Result<u64, String> {
        self.map.read::<u64>(off).map_err(|e| e.to_string())
    }

    fn set_word(&self, off: usize, v: u64) -> Result<(), String> {
        self.map.write::<u64>(off, v).map_err(|e| e.to_string())
    }
}

/// Offset of the sequence word of a `size`-byte message and whether it is 64-bit.
#[inline(always)]
fn tail_of(size: usize) -> (usize, bool) {
    if size % 8 == 0 {
        (MSG + size - 8, true)
    } else {
        (MSG + size - 4, false)
    }
}

/// How a side waits: spin, checking the peer now and then; yield when sharing one CPU.
#[derive(Clone, Copy)]
pub struct Spin {
    yield_each: bool,
}

impl Spin {
    pub fn new(single_cpu: bool) -> Spin {
        Spin { yield_each: single_cpu }
    }

    /// Spins until `ready()`, failing if `peer_alive()` turns false or `deadline` passes.
    #[inline(always)]
    fn until(
        &self,
        mut ready: impl FnMut() -> Result<bool, String>,
        peer_alive: impl Fn() -> bool,
        deadline: Option<Instant>,
    ) -> Result<(), String> {
        let mut spins = 0u32;
        let mut idle_since: Option<Instant> = None;
        loop {
            if ready()? {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if self.yield_each {
                std::thread::yield_now();
            }
            if spins % SPINS_PER_LIVENESS_CHECK == 0 {
                if !peer_alive() {
                    return Err("the peer is gone".into());
                }
                let now = Instant::now();
                if deadline.is_some_and(|d| now > d) {
                    return Err("timed out waiting for the peer".into());
                }
                match idle_since {
                    None => idle_since = Some(now),
                    Some(t) if now - t > IDLE_AFTER => std::thread::sleep(Duration::from_millis(1)),
                    _ => {}
                }
            }
        }
    }
}

/// The client's end of the command channel.
pub struct Command<'a> {
    theirs: &'a Mailbox,
    mine: &'a Mailbox,
    spin: Spin,
    seq: u64,
    msg_seq: u64,
    floor_base: u64,
}

impl<'a> Command<'a> {
    pub fn new(theirs: &'a Mailbox, mine: &'a Mailbox, spin: Spin) -> Self {
        Command { theirs, mine, spin, seq: 0, msg_seq: 0, floor_base: 0 }
    }

    fn post(&mut self, kind: Kind) -> Result<u64, String> {
        let t = self.theirs;
        let (k, size, iters, a0, a1, base) = match kind {
            Kind::Hello { node, segment } => (1, 0, 0, node.into(), segment.into(), 0),
            Kind::Floor { iterations, base } => (2, 0, iterations, 0, 0, base),
            Kind::Pio { size, iterations, base } => (3, size, iterations, 0, 0, base),
            Kind::Done => (4, 0, 0, 0, 0, 0),
        };
        t.set_word(CTRL_KIND, k)?;
        t.set_word(CTRL_SIZE, size as u64)?;
        t.set_word(CTRL_ITERS, iters as u64)?;
        t.set_word(CTRL_ARG0, a0)?;
        t.set_word(CTRL_ARG1, a1)?;
        t.set_word(CTRL_BASE, base)?;
        self.seq += 1;
        t.map.store_release_u64(CTRL_SEQ, self.seq).map_err(|e| e.to_string())?;
        Ok(self.seq)
    }

    fn await_ack(&self, seq: u64) -> Result<(), String> {
        let (mine, theirs) = (self.mine, self.theirs);
        let deadline = Some(Instant::now() + Duration::from_secs(60));
        self.spin
            .until(
                || mine.map.load_acquire_u64(CTRL_SEQ).map(|v| v == seq).map_err(|e| e.to_string()),
                || theirs.peer_alive(),
                deadline,
            )
            .map_err(|e| format!("waiting for the server's acknowledgement: {e}"))
    }

    /// Sends a command and waits until the server has carried it out.
    pub fn send(&mut self, kind: Kind) -> Result<(), String> {
        let seq = self.post(kind)?;
        self.await_ack(seq)
    }

    /// `n` round trips on the shared floor line; returns each one's ticks.
    pub fn floor(&mut self, n: usize) -> Result<Vec<u64>, String> {
        let base = self.floor_base;
        let seq = self.post(Kind::Floor { iterations: n, base })?;
        let word = self.theirs.floor_word();
        let theirs = self.theirs;
        let mut ticks = Vec::with_capacity(n);
        for i in 0..n as u64 {
            let v = base + 2 * i + 1;
            ticks.push(timed(|| {
                word.store(v, Ordering::Release);
                self.spin.until(|| Ok(word.load(Ordering::Acquire) == v + 1), || theirs.peer_alive(), None)
            })?);
        }
        self.floor_base = base + 2 * n as u64;
        self.await_ack(seq)?;
        Ok(ticks)
    }

    /// `n` PIO round trips of `size`-byte messages; returns each one's ticks.
    pub fn pio(&mut self, size: usize, n: usize, payload: &[u8]) -> Result<Vec<u64>, String> {
        let base = self.msg_seq;
        let seq = self.post(Kind::Pio { size, iterations: n, base })?;
        let (theirs, mine) = (self.theirs, self.mine);
        let mut ticks = Vec::with_capacity(n);
        for i in 1..=n as u64 {
            let s = base + i;
            ticks.push(timed(|| {
                theirs.put(size, payload, s)?;
                self.spin.until(|| mine.arrived(size, s), || theirs.peer_alive(), None)
            })?);
        }
        self.msg_seq = base + n as u64;
        self.await_ack(seq)?;
        Ok(ticks)
    }
}

/// The server's loop: waits for commands in its mailbox and carries them out.
pub fn serve(fabric: &Fabric, mine: &Mailbox, spin: Spin, wait_for_client: Option<Duration>) -> Result<(), String> {
    let mut last = 0u64;
    let mut client: Option<Mailbox> = None;
    let mut payload: Vec<u8> = Vec::new();
    let hello_deadline = wait_for_client.map(|d| Instant::now() + d);
    loop {
        let alive = || client.as_ref().is_none_or(|c| c.peer_alive());
        let deadline = if client.is_none() { hello_deadline } else { None };
        spin.until(
            || mine.map.load_acquire_u64(CTRL_SEQ).map(|v| v != last).map_err(|e| e.to_string()),
            alive,
            deadline,
        )
        .map_err(|e| format!("waiting for the client: {e}"))?;
        last = mine.map.load_acquire_u64(CTRL_SEQ).map_err(|e| e.to_string())?;
        let kind = mine.word(CTRL_KIND)?;
        let size = mine.word(CTRL_SIZE)? as usize;
        let iters = mine.word(CTRL_ITERS)?;
        let base = mine.word(CTRL_BASE)?;
        match kind {
            1 => {
                let node = mine.word(CTRL_ARG0)? as u32;
                let seg = mine.word(CTRL_ARG1)? as u32;
                let remote = fabric
                    .connect_segment(node, seg, Timeout::After(Duration::from_secs(10)))
                    .map_err(|e| format!("connecting to the client's mailbox: {e}"))?;
                let max = (remote.size() as usize).saturating_sub(MSG);
                client = Some(Mailbox::connect(remote, max)?);
                payload = (0..max).map(|i| (i * 13 + 5) as u8).collect();
            }
            2 | 3 => {
                let c = client.as_ref().ok_or("command before hello")?;
                if kind == 2 {
                    let word = mine.floor_word();
                    for i in 0..iters {
                        let v = base + 2 * i + 1;
                        spin.until(|| Ok(word.load(Ordering::Acquire) == v), || c.peer_alive(), None)?;
                        word.store(v + 1, Ordering::Release);
                    }
                } else {
                    if size < 4 || size % 4 != 0 || size > payload.len() || MSG + size > mine.map.len() {
                        return Err(format!("client asked for {size}-byte messages; this mailbox cannot hold them"));
                    }
                    for i in 1..=iters {
                        let s = base + i;
                        spin.until(|| mine.arrived(size, s), || c.peer_alive(), None)?;
                        c.put(size, &payload, s)?;
                    }
                }
            }
            4 => {
                if let Some(c) = &client {
                    c.map.store_release_u64(CTRL_SEQ, last).map_err(|e| e.to_string())?;
                }
                return Ok(());
            }
            k => return Err(format!("unknown command {k}")),
        }
        let c = client.as_ref().ok_or("command before hello")?;
        c.map.store_release_u64(CTRL_SEQ, last).map_err(|e| e.to_string())?;
    }
}

/// Measures one round trip; shared by the PIO and floor loops.
#[inline(always)]
fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<u64, String> {
    let t0 = now_ticks();
    f()?;
    Ok(now_ticks().wrapping_sub(t0))
}
