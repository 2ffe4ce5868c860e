//! The command line inside the two mailbox segments, and both sides' loops. Both kinds of
//! round trip are `lanes bench`'s latency protocol (bench/paths/shm.rs): PIO on the
//! mailboxes' message areas (the same code as the `pio` path), the floor with 8-byte
//! messages on the floor path's plain shared mapping, whose file the hello hands over
//! (bench/paths/floor.rs).
//!
//! ```text
//! mailbox offset     0  command line: seq, kind, size, arg0, arg1
//!                       (client -> server mailbox); ack seq (server -> client mailbox)
//!                   64  the floor's file, with the hello: length, then the floor path's
//!                       offer text (client -> server mailbox)
//!                 4096  message area of the latency protocol (bench/paths/shm.rs)
//! ```

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lanes::{Fabric, LocalSegment, Map, MapAccess, RemoteSegment, RemoteState, Timeout};

use crate::bench::paths::floor::{self, FloorFile, RawView, ONE_WORD};
use crate::bench::paths::pio::MapRegion;
use crate::bench::paths::shm::{lat_bytes, ShmClient, ShmPeer};
use crate::bench::paths::Kind as Slice;
use crate::bench::paths::{ClientPath, PeerPath};
use crate::bench::wait::Waiter;

/// The server's mailbox id when `--server` runs on its own ("PP").
pub const DEFAULT_SERVER_SEGMENT: u32 = 0x5050_0001;

const CTRL: usize = 0;
const CTRL_SEQ: usize = CTRL;
const CTRL_KIND: usize = CTRL + 8;
const CTRL_SIZE: usize = CTRL + 16;
const CTRL_ARG0: usize = CTRL + 24;
const CTRL_ARG1: usize = CTRL + 32;
/// The floor's offer: its length, then its text, up to [`MSG`].
const FLOOR_OFFER: usize = 64;
/// Where the message area starts.
const MSG: usize = 4096;

/// Spins a waiting side does between checks that its peer still lives.
const SPINS_PER_LIVENESS_CHECK: u32 = 1 << 12;
/// After this long without progress a waiter sleeps between checks (an idle server).
const IDLE_AFTER: Duration = Duration::from_secs(1);

/// What the client asks of the server.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Hello { node: u32, segment: u32 },
    Floor,
    Pio { size: usize },
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
        (MSG + lat_bytes(max_size)) as u64
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

    /// The message area, as the latency protocol's region.
    fn region(&self) -> MapRegion<'_> {
        MapRegion { map: &self.map, base: MSG }
    }

    /// The largest message the message area holds.
    fn max_message(&self) -> usize {
        self.map.len().saturating_sub(MSG)
    }

    fn word(&self, off: usize) -> Result<u64, String> {
        self.map.read::<u64>(off).map_err(|e| e.to_string())
    }

    fn set_word(&self, off: usize, v: u64) -> Result<(), String> {
        self.map.write::<u64>(off, v).map_err(|e| e.to_string())
    }

    /// Writes `text` at `off`: its length word, then its bytes, which must end before the
    /// message area.
    fn set_text(&self, off: usize, text: &str) -> Result<(), String> {
        if text.len() > MSG - off - 8 {
            return Err(format!("{text:?} does not fit the mailbox's {} bytes for it", MSG - off - 8));
        }
        self.map.write_bytes(off + 8, text.as_bytes()).map_err(|e| e.to_string())?;
        self.set_word(off, text.len() as u64)
    }

    /// The text [`Mailbox::set_text`] wrote at `off`.
    fn text(&self, off: usize) -> Result<String, String> {
        let len = self.word(off)?;
        if len > (MSG - off - 8) as u64 {
            return Err(format!("a text of {len} bytes in the mailbox, at most {} fit", MSG - off - 8));
        }
        let mut bytes = vec![0u8; len as usize];
        self.map.read_bytes(off + 8, &mut bytes).map_err(|e| e.to_string())?;
        String::from_utf8(bytes).map_err(|_| "the mailbox's text is not UTF-8".to_string())
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

/// The client's end of the command channel, and of the PIO and floor round trips.
pub struct Command<'a> {
    theirs: &'a Mailbox,
    mine: &'a Mailbox,
    spin: Spin,
    seq: u64,
    pio: ShmClient<MapRegion<'a>>,
    /// The floor path's client side, from the hello on.
    floor: Option<ShmClient<RawView>>,
}

impl<'a> Command<'a> {
    /// Over the two mailboxes, for messages up to `max` bytes.
    pub fn new(theirs: &'a Mailbox, mine: &'a Mailbox, spin: Spin, max: usize) -> Self {
        let pio = ShmClient::new(mine.region(), theirs.region(), max);
        Command { theirs, mine, spin, seq: 0, pio, floor: None }
    }

    fn post(&mut self, kind: Kind) -> Result<u64, String> {
        let t = self.theirs;
        let (k, size, a0, a1) = match kind {
            Kind::Hello { node, segment } => (1, 0, node.into(), segment.into()),
            Kind::Floor => (2, 0, 0, 0),
            Kind::Pio { size } => (3, size, 0, 0),
            Kind::Done => (4, 0, 0, 0),
        };
        t.set_word(CTRL_KIND, k)?;
        t.set_word(CTRL_SIZE, size as u64)?;
        t.set_word(CTRL_ARG0, a0)?;
        t.set_word(CTRL_ARG1, a1)?;
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

    /// Introduces this side's mailbox to the server and hands it the floor path's shared
    /// file, which is unlinked once the server has mapped it.
    pub fn hello(&mut self, node: u32, segment: u32) -> Result<(), String> {
        let file = FloorFile::create(ONE_WORD)?;
        self.theirs.set_text(FLOOR_OFFER, &file.offer_text())?;
        self.send(Kind::Hello { node, segment })?;
        self.floor = Some(file.into_client()?);
        Ok(())
    }

    /// `n` floor round trips (8-byte messages on the floor path's mapping); returns each
    /// one's ticks.
    pub fn floor(&mut self, n: usize) -> Result<Vec<u64>, String> {
        // The server is idle until the command: the protocol's words can be reset.
        self.floor.as_mut().ok_or("the floor before the hello")?.prepare(Slice::Latency, ONE_WORD)?;
        let seq = self.post(Kind::Floor)?;
        let floor = self.floor.as_mut().ok_or("the floor before the hello")?;
        let ticks = watching(self.theirs, self.spin, |wait| floor.round_trips(ONE_WORD, n, wait))?;
        self.await_ack(seq)?;
        Ok(ticks)
    }

    /// `n` PIO round trips of `size`-byte messages; returns each one's ticks.
    pub fn pio(&mut self, size: usize, n: usize) -> Result<Vec<u64>, String> {
        // The server is idle until the command: the protocol's words can be reset.
        self.pio.prepare(Slice::Latency, size)?;
        let seq = self.post(Kind::Pio { size })?;
        let pio = &mut self.pio;
        let ticks = watching(self.theirs, self.spin, |wait| pio.round_trips(size, n, wait))?;
        self.await_ack(seq)?;
        Ok(ticks)
    }
}

/// How often a watcher looks at the peer's mailbox.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// Runs `f` with a waiter that fails once `peer`'s owner is gone: a thread watches the
/// mailbox's state and hangs up the socket the waiter watches.
fn watching<T>(peer: &Mailbox, spin: Spin, f: impl FnOnce(&Waiter) -> Result<T, String>) -> Result<T, String> {
    let Segment::Remote(remote) = &peer.seg else {
        return f(&Waiter::new(None, spin.yield_each, false));
    };
    let (watched, hangup) =
        std::os::unix::net::UnixStream::pair().map_err(|e| format!("a socket to watch the peer: {e}"))?;
    let done = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            let _hangup = hangup;
            while !done.load(Ordering::Relaxed) && !matches!(remote.state(), RemoteState::Lost(_)) {
                std::thread::sleep(WATCH_EVERY);
            }
        });
        let r = f(&Waiter::new(Some(watched.as_raw_fd()), spin.yield_each, false));
        done.store(true, Ordering::Relaxed);
        r
    });
    r.map_err(|e| if peer.peer_alive() { e } else { "the peer is gone".into() })
}

/// The server's loop: waits for commands in its mailbox and carries them out.
pub fn serve(fabric: &Fabric, mine: &Mailbox, spin: Spin, wait_for_client: Option<Duration>) -> Result<(), String> {
    let mut last = 0u64;
    let mut client: Option<Mailbox> = None;
    let mut floor_peer = None;
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
        match kind {
            1 => {
                let node = mine.word(CTRL_ARG0)? as u32;
                let seg = mine.word(CTRL_ARG1)? as u32;
                let remote = fabric
                    .connect_segment(node, seg, Timeout::After(Duration::from_secs(10)))
                    .map_err(|e| format!("connecting to the client's mailbox: {e}"))?;
                let max = (remote.size() as usize).saturating_sub(MSG);
                client = Some(Mailbox::connect(remote, max)?);
                floor_peer = Some(floor::open(ONE_WORD, &mine.text(FLOOR_OFFER)?)?);
            }
            2 | 3 => {
                let c = client.as_ref().ok_or("command before hello")?;
                if kind == 2 {
                    let peer = floor_peer.as_mut().ok_or("command before hello")?;
                    watching(c, spin, |wait| peer.latency(ONE_WORD, wait))?;
                } else {
                    let max = mine.max_message().min(c.max_message());
                    if size < 4 || size % 4 != 0 || size > max {
                        return Err(format!("client asked for {size}-byte messages; this mailbox cannot hold them"));
                    }
                    let mut peer = ShmPeer::new(mine.region(), c.region(), max);
                    watching(c, spin, |wait| peer.latency(size, wait))?;
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
