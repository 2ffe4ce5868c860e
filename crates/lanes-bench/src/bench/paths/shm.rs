//! The shared-memory protocols, written once over [`Mem`] so that the floor (raw pointers
//! on a plain shared mapping) and PIO (a Lanes [`lanes::Map`]) run the very same code and
//! differ only in how a load, a store or a copy reaches memory. `lanes pingpong` runs the
//! latency protocol too ([`ShmClient::round_trips`]): PIO on its mailboxes' message areas,
//! its floor on the floor's mapping.
//!
//! Each side owns a region; a side only ever spins on its own region and writes into the
//! other's, as on a PCIe fabric (reads of remote memory are slow there).
//!
//! ```text
//! region offset  0           latency message area (max size, rounded up to a page)
//!                L           ring header page: head @+0 and closed @+8 (written by the
//!                            sender), tail @+128 (written by the receiver): separate lines
//!                L + 4096    ring slots (the receiver's region only)
//! ```
//!
//! *Latency*: ping-pong. A `size`-byte message is copied into the other side's message
//! area; its last 4 or 8 bytes are a sequence number, stored last with release ordering.
//! The receiver spins on that word in its own memory, copies the message out, and answers
//! the same way. The client stores an all-ones sequence number to stop the peer.
//!
//! *Throughput*: a single-producer single-consumer ring of fixed-size slots in the
//! receiver's region. The sender copies messages into slots and publishes `head` every
//! `batch` messages; the receiver copies each message out, checks its stamp and publishes
//! `tail` every `batch` messages. Whoever is about to wait publishes its index first, so a
//! batch never strands. The sender ends by publishing `closed = head + 1` and waits until
//! `tail` reaches `head`.

use crate::bench::paths::path::{pattern, stamp, stamped, ClientPath, Kind, PeerPath, Streamed};
use crate::bench::wait::Waiter;
use crate::measure::clock::now_ticks;
use crate::measure::ticks::TickHistogram;

/// Loads, stores and copies into one side's region. Offsets are relative to the region and
/// checked by the implementation; word accesses are atomic (acquire loads, release stores).
pub(crate) trait Mem {
    fn load_u64(&self, off: usize) -> Result<u64, String>;
    fn store_u64(&self, off: usize, v: u64) -> Result<(), String>;
    fn load_u32(&self, off: usize) -> Result<u32, String>;
    fn store_u32(&self, off: usize, v: u32) -> Result<(), String>;
    /// Copies `src` into the region at `off`.
    fn put(&self, off: usize, src: &[u8]) -> Result<(), String>;
    /// Copies the region at `off` into `dst`.
    fn get(&self, off: usize, dst: &mut [u8]) -> Result<(), String>;
    /// Makes every store so far visible to the region's owner before returning. Stores into
    /// memory reached across hosts land later than they return; shared memory needs nothing.
    fn settle(&self) -> Result<(), String> {
        Ok(())
    }
}

const PAGE: usize = 4096;
const RING_HEADER: usize = PAGE;
const HEAD: usize = 0;
const CLOSED: usize = 8;
const TAIL: usize = 128;
/// Ring bytes aimed at: a buffer like a socket's, streaming through the caches.
const RING_BYTES: usize = 1 << 20;
const MIN_SLOTS: usize = 4;
const MAX_SLOTS: usize = 16 * 1024;
/// Bytes between index updates.
const BATCH_BYTES: usize = 4096;

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

/// Bytes of the latency message area for messages up to `max`.
pub(crate) fn lat_bytes(max: usize) -> usize {
    round_up(max.max(8), PAGE)
}

/// Slots and index-update batch of the ring for `size`-byte messages.
pub(crate) fn ring_geometry(size: usize) -> (usize, usize) {
    let slots = (RING_BYTES / size.max(1)).clamp(MIN_SLOTS, MAX_SLOTS);
    let batch = (BATCH_BYTES / size.max(1)).clamp(1, slots / 4);
    (slots, batch)
}

/// Bytes of the sender's (client's) region.
pub(crate) fn sender_bytes(max: usize) -> usize {
    lat_bytes(max)
}

/// Bytes of the receiver's (peer's) region: message area, ring header and slots.
pub(crate) fn receiver_bytes(max: usize) -> usize {
    lat_bytes(max) + RING_HEADER + round_up(RING_BYTES.max(MIN_SLOTS * max), PAGE)
}

/// Offset and width of the sequence word of a `size`-byte message (sizes are multiples of
/// 4; multiples of 8 carry a 64-bit word).
#[inline(always)]
fn seq_word(size: usize) -> (usize, bool) {
    if size % 8 == 0 {
        (size - 8, true)
    } else {
        (size - 4, false)
    }
}

#[inline(always)]
fn stop_value(wide: bool) -> u64 {
    if wide {
        u64::MAX
    } else {
        u64::from(u32::MAX)
    }
}

#[inline(always)]
fn load_seq<M: Mem>(m: &M, off: usize, wide: bool) -> Result<u64, String> {
    if wide {
        m.load_u64(off)
    } else {
        m.load_u32(off).map(u64::from)
    }
}

#[inline(always)]
fn store_seq<M: Mem>(m: &M, off: usize, wide: bool, v: u64) -> Result<(), String> {
    if wide {
        m.store_u64(off, v)
    } else {
        m.store_u32(off, v as u32)
    }
}

fn check_size(size: usize, max: usize) -> Result<(), String> {
    if size < 4 || size % 4 != 0 || size > max {
        return Err(format!("message size {size}: sizes are multiples of 4 from 4 to {max}"));
    }
    Ok(())
}

/// The client side over two regions: `mine` (its own, spun on) and `theirs` (the peer's).
pub(crate) struct ShmClient<M: Mem> {
    mine: M,
    theirs: M,
    max: usize,
    payload: Vec<u8>,
    buf: Vec<u8>,
}

impl<M: Mem> ShmClient<M> {
    pub(crate) fn new(mine: M, theirs: M, max: usize) -> Self {
        ShmClient { mine, theirs, max, payload: pattern(max, 1), buf: vec![0; max] }
    }

    /// `n` round trips of `size`-byte messages (at least one), each one's ticks in order.
    /// Like a latency slice, it needs `prepare(Kind::Latency, size)` first and ends by
    /// telling the peer to stop.
    pub(crate) fn round_trips(&mut self, size: usize, n: usize, wait: &Waiter) -> Result<Vec<u64>, String> {
        let mut ticks = Vec::with_capacity(n.max(1));
        self.ping_pong(size, wait, |t, _| {
            ticks.push(t);
            ticks.len() < n
        })?;
        Ok(ticks)
    }

    /// The latency protocol: round trips of `size`-byte messages, each one's ticks (and the
    /// clock) given to `sample`, until it says no more; then the peer is told to stop.
    #[inline(always)]
    fn ping_pong(
        &mut self,
        size: usize,
        wait: &Waiter,
        mut sample: impl FnMut(u64, u64) -> bool,
    ) -> Result<(), String> {
        check_size(size, self.max)?;
        let (off, wide) = seq_word(size);
        let stop = stop_value(wide);
        let (mine, theirs) = (&self.mine, &self.theirs);
        let payload = &self.payload[..off];
        let buf = &mut self.buf[..off];
        let send = |seq: u64| -> Result<(), String> {
            if !payload.is_empty() {
                theirs.put(0, payload)?;
            }
            store_seq(theirs, off, wide, seq)
        };
        // A sample is the time from one send to the next, and the next send follows the
        // reply at once: reading the clock and recording happen while the next message is
        // in flight, off the round trip's critical path.
        let mut seq = 1u64;
        send(seq)?;
        let mut prev = now_ticks();
        loop {
            wait.until(|| Ok((load_seq(mine, off, wide)? == seq).then_some(())))?;
            if !buf.is_empty() {
                mine.get(0, buf)?;
            }
            if seq + 1 == stop {
                break;
            }
            seq += 1;
            send(seq)?;
            let now = now_ticks();
            let more = sample(now.wrapping_sub(prev), now);
            prev = now;
            if !more {
                // The message just sent is answered, unrecorded, before the stop.
                wait.until(|| Ok((load_seq(mine, off, wide)? == seq).then_some(())))?;
                break;
            }
        }
        store_seq(theirs, off, wide, stop)
    }
}

impl<M: Mem> ClientPath for ShmClient<M> {
    fn prepare(&mut self, kind: Kind, size: usize) -> Result<(), String> {
        check_size(size, self.max)?;
        match kind {
            Kind::Latency => {
                let (off, wide) = seq_word(size);
                store_seq(&self.mine, off, wide, 0)?;
                store_seq(&self.theirs, off, wide, 0)?;
            }
            Kind::Throughput => {
                let ring = lat_bytes(self.max);
                self.theirs.store_u64(ring + HEAD, 0)?;
                self.theirs.store_u64(ring + CLOSED, 0)?;
                self.theirs.store_u64(ring + TAIL, 0)?;
            }
        }
        // The peer starts on the next command and must not see the previous slice's words.
        self.theirs.settle()
    }

    fn latency(&mut self, size: usize, until: u64, rec: &mut TickHistogram, wait: &Waiter) -> Result<(), String> {
        self.ping_pong(size, wait, |ticks, now| {
            rec.record(ticks, now);
            now < until
        })
    }

    fn throughput(&mut self, size: usize, until: u64, wait: &Waiter) -> Result<Streamed, String> {
        check_size(size, self.max)?;
        let (slots, batch) = ring_geometry(size);
        let (slots, batch) = (slots as u64, batch as u64);
        let ring = lat_bytes(self.max);
        let data = ring + RING_HEADER;
        let theirs = &self.theirs;
        let msg = &mut self.payload[..size];
        let (mut head, mut published, mut tail_seen) = (0u64, 0u64, 0u64);
        let mut slot = 0usize;
        let tail_of = |head: u64| -> Result<u64, String> {
            let t = theirs.load_u64(ring + TAIL)?;
            if t > head {
                return Err(format!("the receiver's tail {t} passed the head {head}"));
            }
            Ok(t)
        };
        let t0 = now_ticks();
        loop {
            if head - tail_seen >= slots {
                tail_seen = tail_of(head)?;
                if head - tail_seen >= slots {
                    if published != head {
                        theirs.store_u64(ring + HEAD, head)?;
                        published = head;
                    }
                    tail_seen = wait.until(|| tail_of(head).map(|t| (head - t < slots).then_some(t)))?;
                }
            }
            stamp(msg, head);
            theirs.put(data + slot * size, msg)?;
            head += 1;
            slot += 1;
            if slot as u64 == slots {
                slot = 0;
            }
            if head - published >= batch {
                theirs.store_u64(ring + HEAD, head)?;
                published = head;
                if now_ticks() >= until {
                    break;
                }
            }
        }
        theirs.store_u64(ring + CLOSED, head + 1)?;
        wait.until(|| tail_of(head).map(|t| (t == head).then_some(())))?;
        Ok(Streamed { msgs: head, ticks: now_ticks().wrapping_sub(t0) })
    }
}

/// The peer side over two regions: `mine` (its own: message area and ring) and `theirs`.
pub(crate) struct ShmPeer<M: Mem> {
    mine: M,
    theirs: M,
    max: usize,
    payload: Vec<u8>,
    buf: Vec<u8>,
}

impl<M: Mem> ShmPeer<M> {
    pub(crate) fn new(mine: M, theirs: M, max: usize) -> Self {
        ShmPeer { mine, theirs, max, payload: pattern(max, 5), buf: vec![0; max] }
    }
}

impl<M: Mem> PeerPath for ShmPeer<M> {
    fn latency(&mut self, size: usize, wait: &Waiter) -> Result<(), String> {
        check_size(size, self.max)?;
        let (off, wide) = seq_word(size);
        let stop = stop_value(wide);
        let (mine, theirs) = (&self.mine, &self.theirs);
        let payload = &self.payload[..off];
        let buf = &mut self.buf[..off];
        let mut last = 0u64;
        loop {
            let v = wait.until(|| {
                let v = load_seq(mine, off, wide)?;
                Ok((v != last).then_some(v))
            })?;
            if v == stop {
                return Ok(());
            }
            if v != last + 1 {
                return Err(format!("ping-pong: expected message {}, found {v}", last + 1));
            }
            if !buf.is_empty() {
                mine.get(0, buf)?;
                theirs.put(0, payload)?;
            }
            store_seq(theirs, off, wide, v)?;
            last = v;
        }
    }

    fn throughput(&mut self, size: usize, wait: &Waiter) -> Result<u64, String> {
        check_size(size, self.max)?;
        let (slots, batch) = ring_geometry(size);
        let (slots, batch) = (slots as u64, batch as u64);
        let ring = lat_bytes(self.max);
        let data = ring + RING_HEADER;
        let mine = &self.mine;
        let buf = &mut self.buf[..size];
        let (mut tail, mut released, mut head_seen) = (0u64, 0u64, 0u64);
        let mut slot = 0usize;
        loop {
            if tail == head_seen {
                head_seen = mine.load_u64(ring + HEAD)?;
                if tail == head_seen {
                    if released != tail {
                        mine.store_u64(ring + TAIL, tail)?;
                        released = tail;
                    }
                    let closed = mine.load_u64(ring + CLOSED)?;
                    if closed != 0 {
                        // `closed` was stored after the final head: this head is final.
                        head_seen = mine.load_u64(ring + HEAD)?;
                        if head_seen == tail {
                            if closed - 1 != tail {
                                return Err(format!("stream closed at {} but only {tail} published", closed - 1));
                            }
                            return Ok(tail);
                        }
                    } else {
                        head_seen = wait.until(|| {
                            let h = mine.load_u64(ring + HEAD)?;
                            if h != tail {
                                return Ok(Some(h));
                            }
                            Ok((mine.load_u64(ring + CLOSED)? != 0).then_some(h))
                        })?;
                    }
                    continue;
                }
                if head_seen < tail || head_seen - tail > slots {
                    return Err(format!("ring head {head_seen} is not within {slots} slots of tail {tail}"));
                }
            }
            mine.get(data + slot * size, buf)?;
            if !stamped(buf, tail) {
                return Err(format!("ring: message {tail} arrived corrupt"));
            }
            tail += 1;
            slot += 1;
            if slot as u64 == slots {
                slot = 0;
            }
            if tail - released >= batch {
                mine.store_u64(ring + TAIL, tail)?;
                released = tail;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::paths::floor::RawRegion;
    use crate::measure::clock::ns_to_ticks;

    /// Both protocols between two threads over one private mapping, every size class, with
    /// channels standing in for the control channel (a slice starts after `prepare`, and the
    /// next `prepare` waits until the peer has finished the slice).
    #[test]
    fn ping_pong_and_ring_between_threads() {
        use std::sync::mpsc::channel;
        let max = 64 * 1024;
        let split = sender_bytes(max);
        let region = RawRegion::anonymous(split + receiver_bytes(max)).expect("map");
        let wait = Waiter::new(None, false, false);
        let sizes = [4usize, 8, 12, 64, 4096, 65536];
        let mut client =
            ShmClient::new(region.view(0, split).unwrap(), region.view(split, receiver_bytes(max)).unwrap(), max);
        let (peer_mine, peer_theirs) =
            (region.view(split, receiver_bytes(max)).unwrap(), region.view(0, split).unwrap());
        let (go_tx, go_rx) = channel::<(Kind, usize)>();
        let (done_tx, done_rx) = channel::<Result<u64, String>>();
        let peer = std::thread::spawn(move || {
            let mut peer = ShmPeer::new(peer_mine, peer_theirs, max);
            let wait = Waiter::new(None, false, false);
            while let Ok((kind, size)) = go_rx.recv() {
                let r = match kind {
                    Kind::Latency => peer.latency(size, &wait).map(|_| 0),
                    Kind::Throughput => peer.throughput(size, &wait),
                };
                done_tx.send(r).unwrap();
            }
        });
        for &s in &sizes {
            let mut rec = TickHistogram::new();
            client.prepare(Kind::Latency, s).unwrap();
            go_tx.send((Kind::Latency, s)).unwrap();
            client.latency(s, now_ticks() + ns_to_ticks(2e6), &mut rec, &wait).unwrap();
            done_rx.recv().unwrap().unwrap();
            assert!(rec.count() >= 1);
            client.prepare(Kind::Throughput, s).unwrap();
            go_tx.send((Kind::Throughput, s)).unwrap();
            let st = client.throughput(s, now_ticks() + ns_to_ticks(2e6), &wait).unwrap();
            assert!(st.msgs >= 1);
            assert_eq!(done_rx.recv().unwrap().unwrap(), st.msgs, "size {s}");
        }
        drop(go_tx);
        peer.join().unwrap();
    }

    #[test]
    fn geometry() {
        for s in [4usize, 8, 64, 4096, 1 << 20, 4 << 20] {
            let (slots, batch) = ring_geometry(s);
            assert!(slots >= MIN_SLOTS && batch >= 1 && batch <= slots / 4, "{s}");
            assert!(lat_bytes(s) + RING_HEADER + slots * s <= receiver_bytes(s), "{s}");
        }
        assert!(check_size(6, 64).is_err());
        assert!(check_size(128, 64).is_err());
    }
}
