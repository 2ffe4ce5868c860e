//! The DMA bandwidth path (`ofi-dma`): a DMA queue streaming `size`-byte transfers from a
//! local segment of the client into a segment of the peer, which across hosts are RMA writes
//! (`fi_write`, delivery complete, `LANES_OFI_DMA_DEPTH` operations and `LANES_OFI_DMA_WINDOW`
//! bytes in flight, runs split into `LANES_OFI_DMA_CHUNK` pieces).
//!
//! ```text
//! peer's segment  0      header page: the count word (0 while a slice streams)
//!                 4096   SLOTS slots of the largest size, written round robin
//! ```
//!
//! *Throughput*: the client keeps between [`LOW`] and [`HIGH`] transfers queued (sleeping
//! [`REST`] at a time while it waits for room) until the
//! slice's time is up, waits for the queue (every transfer delivered), stops its clock, then
//! stores count + 1 into the peer's count word with a release store and flushes it. The peer
//! watches that word in its own segment, making progress passes with a progress driver (so
//! that its own thread places the incoming writes) back to back, as fi_pingpong's receiver
//! spins in `fi_cq_read`, and answers with the count. The peer does not copy the data out
//! (RMA places it; iperf3's receiver, by contrast, copies from the kernel), so this is the
//! fabric's bandwidth, not a consumer's. *Latency* is not measured (the registry
//! lists throughput only).

use std::time::{Duration, Instant};

use lanes::{DmaDirection, DmaQueue, Fabric, LocalSegment, Map, MapAccess, RemoteSegment, Timeout};

use crate::bench::paths::path::{pattern, ClientOffer, ClientPath, PeerPath, SetupEnv, Streamed};
use crate::bench::wait::Waiter;
use crate::measure::clock::now_ticks;
use crate::measure::ticks::TickHistogram;

const CONNECT: Timeout = Timeout::After(Duration::from_secs(30));
/// The longest a slice's last transfers may take to be delivered.
const DRAIN: Timeout = Timeout::After(Duration::from_secs(60));
const HEADER: usize = 4096;
const COUNT: usize = 0;
const SLOTS: usize = 4;
/// Transfers queued at most, and the level the client waits for before queueing more.
const HIGH: usize = 32;
const LOW: usize = 16;
/// How long the client sleeps while the queue holds more than LOW transfers. LOW transfers
/// of 1 MiB keep a link of 3 GB/s busy for over 5 ms, so the queue cannot run dry in one
/// rest; a shorter rest only costs the DMA channel thread CPU time on a machine with few
/// cores (at 100 us the client woke 10 000 times a second).
const REST: Duration = Duration::from_millis(1);
/// The longest the queue may take to drain from HIGH to LOW.
const REFILL: Duration = Duration::from_secs(60);

/// Whether the peer spoke (an error) or hung up on the control channel.
fn control_ready(wait: &Waiter) -> bool {
    wait.control().is_some_and(crate::bench::wait::control_ready)
}

fn err(what: &'static str) -> impl Fn(lanes::Error) -> String {
    move |e| format!("DMA {what}: {e}")
}

fn open() -> Result<Fabric, String> {
    Fabric::open().map_err(|e| format!("opening the fabric: {e}"))
}

fn export(fabric: &Fabric, bytes: usize) -> Result<LocalSegment, String> {
    let seg = fabric.create_segment_auto_id(bytes as u64).map_err(err("creating a segment"))?;
    seg.prepare().and_then(|_| seg.set_available()).map_err(err("exporting a segment"))?;
    Ok(seg)
}

fn peer_bytes(max: usize) -> usize {
    HEADER + SLOTS * max.max(8)
}

fn ids(s: &str) -> Result<(u32, u32), String> {
    let mut it = s.split_whitespace().map(str::parse::<u32>);
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(node)), Some(Ok(seg)), None) => Ok((node, seg)),
        _ => Err(format!("expected `node segment`, got {s:?}")),
    }
}

struct Offer {
    fabric: Fabric,
    max: usize,
}

pub(crate) fn client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    Ok(Box::new(Offer { fabric: open()?, max: env.max_size }))
}

impl ClientOffer for Offer {
    fn offer(&self) -> String {
        format!("{}", self.fabric.node_id().get())
    }

    fn accept(self: Box<Self>, reply: &str) -> Result<Box<dyn ClientPath>, String> {
        let (node, id) = ids(reply)?;
        let src = export(&self.fabric, self.max.max(8))?;
        let fill = src.map(0, src.size(), MapAccess::ReadWrite).map_err(err("mapping the source"))?;
        fill.write_bytes(0, &pattern(src.size() as usize, 3)).map_err(err("filling the source"))?;
        let dst = self
            .fabric
            .connect_segment(node, id, CONNECT)
            .map_err(|e| format!("connecting to segment {id:#x} of node {node}: {e}"))?;
        if dst.size() < peer_bytes(self.max) as u64 {
            return Err(format!("the peer's segment holds {} bytes, {} needed", dst.size(), peer_bytes(self.max)));
        }
        let header = dst.map(0, HEADER as u64, MapAccess::ReadWrite).map_err(err("mapping the count word"))?;
        let queue = DmaQueue::new(HIGH).map_err(err("a queue"))?;
        Ok(Box::new(Client { queue, header, src, dst, max: self.max, _fabric: self.fabric }))
    }
}

struct Client {
    queue: DmaQueue,
    header: Map,
    src: LocalSegment,
    dst: RemoteSegment,
    max: usize,
    _fabric: Fabric,
}

impl Client {
    fn set_count(&self, v: u64) -> Result<(), String> {
        self.header.store_release_u64(COUNT, v).map_err(err("storing the count"))?;
        self.header.flush_checked().map_err(err("flushing the count"))
    }
}

impl ClientPath for Client {
    fn prepare(&mut self, _kind: crate::bench::paths::path::Kind, size: usize) -> Result<(), String> {
        if size == 0 || size > self.max {
            return Err(format!("transfer size {size}: 1 to {} bytes", self.max));
        }
        self.set_count(0)
    }

    fn latency(&mut self, _size: usize, _until: u64, _rec: &mut TickHistogram, _wait: &Waiter) -> Result<(), String> {
        Err("the DMA path measures bandwidth only".into())
    }

    fn throughput(&mut self, size: usize, until: u64, wait: &Waiter) -> Result<Streamed, String> {
        let t0 = now_ticks();
        let mut n = 0u64;
        loop {
            if self.queue.outstanding() >= HIGH {
                // Sleep rather than spin: on a machine with few cores the DMA channel thread
                // and the kernel's TCP need the CPU a spin would take.
                let deadline = Instant::now() + REFILL;
                while self.queue.outstanding() > LOW {
                    if Instant::now() > deadline || control_ready(wait) {
                        return Err(format!(
                            "DMA: {} transfers still outstanding after {} s, or the peer gave up",
                            self.queue.outstanding(),
                            REFILL.as_secs()
                        ));
                    }
                    std::thread::sleep(REST);
                }
            }
            let off = HEADER + (n as usize % SLOTS) * self.max;
            self.queue
                .start(&self.src, &self.dst, 0, size as u64, off as u64, DmaDirection::Write, None)
                .map_err(err("start"))?;
            n += 1;
            if now_ticks() >= until {
                break;
            }
        }
        self.queue.wait(DRAIN).map_err(err("wait"))?;
        let ticks = now_ticks().wrapping_sub(t0);
        self.set_count(n + 1)?;
        Ok(Streamed { msgs: n, ticks })
    }
}

struct Peer {
    map: Map,
    _seg: LocalSegment,
    fabric: Fabric,
}

pub(crate) fn peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    offer.trim().parse::<u32>().map_err(|_| format!("expected the client's node, got {offer:?}"))?;
    let fabric = open()?;
    let seg = export(&fabric, peer_bytes(env.max_size))?;
    let map = seg.map(0, HEADER as u64, MapAccess::ReadWrite).map_err(err("mapping the count word"))?;
    let reply = format!("{} {}", fabric.node_id().get(), seg.id());
    Ok((Box::new(Peer { map, _seg: seg, fabric }), reply))
}

impl PeerPath for Peer {
    fn latency(&mut self, _size: usize, _wait: &Waiter) -> Result<(), String> {
        Err("the DMA path measures bandwidth only".into())
    }

    fn throughput(&mut self, _size: usize, wait: &Waiter) -> Result<u64, String> {
        let map = &self.map;
        // The peer's own thread places the incoming writes (as the target of the design's
        // stage-0 probe did, in fi_cq_read) instead of the service thread, whose idle
        // progress ticks (`poll`, every 500 us) are too far apart for a stream. Passes go
        // back to back: a nap of 20 us between them (70 with the timer's slack) helped only
        // while the link ran bbr (about 1 GB/s on the machine measured); with cubic, the
        // bench's default, it took a quarter off the bandwidth (docs/BENCH.md).
        let drv = self.fabric.progress_driver();
        let v = wait.until(|| {
            drv.poll();
            let v = map.load_acquire_u64(COUNT).map_err(err("reading the count"))?;
            if v != 0 {
                return Ok(Some(v));
            }
            Ok(None)
        })?;
        map.store_release_u64(COUNT, 0).map_err(err("resetting the count"))?;
        Ok(v - 1)
    }
}
