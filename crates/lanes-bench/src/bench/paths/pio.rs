//! PIO and DMA: the shared-memory protocols of [`super::shm`] through the Lanes API. Each
//! side exports a segment (the client's holds its message area, the peer's its message area
//! and the ring) and connects to the other's; every load, store and copy goes through a
//! bounds-checked [`Map`], local for the side's own segment and remote for the other's.
//!
//! The `dma` path is the same with one difference: message bodies go into the other side's
//! segment by DMA (one transfer from the sender's buffer per message, waited for), while
//! the words (sequence numbers, ring indices) stay CPU stores, as doorbells do on a PCIe
//! fabric. It shows what a DMA start costs per message against plain stores.

//!
//! The `ofi-pio` path is the PIO path between hosts: the remote segment's map is a mirror
//! window (stores logged, posted by the release store of the sequence word), and while a
//! latency slice runs each side holds a [`ProgressDriver`] and polls it in its spin on its own
//! segment, so that the peer's RMA writes are placed by the spinning thread itself (as
//! `fi_pingpong` spins in `fi_cq_read`) rather than after a wake-up of the transport's service
//! thread.

use std::time::Duration;

use std::cell::RefCell;
use std::rc::Rc;

use lanes::{DmaDirection, DmaQueue, Fabric, LocalSegment, Map, MapAccess, ProgressDriver, RemoteSegment, Timeout};

use crate::bench::paths::path::{ClientOffer, ClientPath, Kind, PeerPath, SetupEnv, Streamed};
use crate::bench::paths::shm::{receiver_bytes, sender_bytes, Mem, ShmClient, ShmPeer};
use crate::bench::wait::Waiter;
use crate::measure::ticks::TickHistogram;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The segment handle a map came from, kept as long as the map.
enum Hold {
    Local(#[allow(dead_code)] LocalSegment),
    Remote(#[allow(dead_code)] RemoteSegment),
}

/// A whole segment, mapped; a remote one may take its bulk copies by DMA.
pub(crate) struct SegmentMem {
    map: Map,
    _hold: Hold,
    dma: Option<RefCell<DmaQueue>>,
}

#[cold]
fn fault(e: lanes::Error) -> String {
    format!("PIO: {e}")
}

impl Mem for SegmentMem {
    #[inline(always)]
    fn load_u64(&self, off: usize) -> Result<u64, String> {
        self.map.load_acquire_u64(off).map_err(fault)
    }

    #[inline(always)]
    fn store_u64(&self, off: usize, v: u64) -> Result<(), String> {
        self.map.store_release_u64(off, v).map_err(fault)
    }

    #[inline(always)]
    fn load_u32(&self, off: usize) -> Result<u32, String> {
        self.map.load_acquire_u32(off).map_err(fault)
    }

    #[inline(always)]
    fn store_u32(&self, off: usize, v: u32) -> Result<(), String> {
        self.map.store_release_u32(off, v).map_err(fault)
    }

    #[inline(always)]
    fn put(&self, off: usize, src: &[u8]) -> Result<(), String> {
        if let (Some(q), Hold::Remote(remote)) = (&self.dma, &self._hold) {
            if !src.is_empty() {
                let mut q = q.borrow_mut();
                // SAFETY: the DMA only reads `src` (a Write transfer), and `src` stays borrowed
                // until the wait below has seen the transfer complete.
                unsafe {
                    q.start_memory(
                        src.as_ptr().cast_mut(),
                        remote,
                        src.len() as u64,
                        off as u64,
                        DmaDirection::Write,
                        None,
                    )
                }
                .map_err(fault)?;
                q.wait(Timeout::After(CONNECT_TIMEOUT)).map_err(fault)?;
                return Ok(());
            }
        }
        self.map.write_bytes(off, src).map_err(fault)
    }

    #[inline(always)]
    fn get(&self, off: usize, dst: &mut [u8]) -> Result<(), String> {
        self.map.read_bytes(off, dst).map_err(fault)
    }
}

/// One side's region inside a mapped segment, from `base` on (`lanes pingpong` keeps its
/// command line and the floor's file name in the page before it).
pub(crate) struct MapRegion<'a> {
    pub map: &'a Map,
    pub base: usize,
}

impl Mem for MapRegion<'_> {
    #[inline(always)]
    fn load_u64(&self, off: usize) -> Result<u64, String> {
        self.map.load_acquire_u64(self.base + off).map_err(fault)
    }

    #[inline(always)]
    fn store_u64(&self, off: usize, v: u64) -> Result<(), String> {
        self.map.store_release_u64(self.base + off, v).map_err(fault)
    }

    #[inline(always)]
    fn load_u32(&self, off: usize) -> Result<u32, String> {
        self.map.load_acquire_u32(self.base + off).map_err(fault)
    }

    #[inline(always)]
    fn store_u32(&self, off: usize, v: u32) -> Result<(), String> {
        self.map.store_release_u32(self.base + off, v).map_err(fault)
    }

    #[inline(always)]
    fn put(&self, off: usize, src: &[u8]) -> Result<(), String> {
        self.map.write_bytes(self.base + off, src).map_err(fault)
    }

    #[inline(always)]
    fn get(&self, off: usize, dst: &mut [u8]) -> Result<(), String> {
        self.map.read_bytes(self.base + off, dst).map_err(fault)
    }
}

/// Where a side keeps its progress driver while a slice runs (none between slices).
type DriverSlot = Rc<RefCell<Option<ProgressDriver>>>;

/// A segment whose loads (the spins of the protocols) also poll the progress driver, if a
/// slice holds one.
pub(crate) struct DrivenMem {
    mem: SegmentMem,
    driver: DriverSlot,
}

impl DrivenMem {
    #[inline(always)]
    fn drive(&self) {
        if let Some(d) = self.driver.borrow().as_ref() {
            d.poll();
        }
    }
}

impl Mem for DrivenMem {
    #[inline(always)]
    fn load_u64(&self, off: usize) -> Result<u64, String> {
        self.drive();
        self.mem.load_u64(off)
    }

    #[inline(always)]
    fn store_u64(&self, off: usize, v: u64) -> Result<(), String> {
        self.mem.store_u64(off, v)
    }

    #[inline(always)]
    fn load_u32(&self, off: usize) -> Result<u32, String> {
        self.drive();
        self.mem.load_u32(off)
    }

    #[inline(always)]
    fn store_u32(&self, off: usize, v: u32) -> Result<(), String> {
        self.mem.store_u32(off, v)
    }

    #[inline(always)]
    fn put(&self, off: usize, src: &[u8]) -> Result<(), String> {
        self.mem.put(off, src)
    }

    #[inline(always)]
    fn get(&self, off: usize, dst: &mut [u8]) -> Result<(), String> {
        self.mem.get(off, dst)
    }

    fn settle(&self) -> Result<(), String> {
        self.mem.map.flush_checked().map_err(fault)
    }
}

/// A path side that holds a progress driver in `slot` for the length of each slice.
struct Driven<P> {
    inner: P,
    fabric: Fabric,
    slot: DriverSlot,
}

impl<P> Driven<P> {
    fn hold(&self) {
        *self.slot.borrow_mut() = Some(self.fabric.progress_driver());
    }

    fn release(&self) {
        *self.slot.borrow_mut() = None;
    }
}

impl<P: ClientPath> ClientPath for Driven<P> {
    fn prepare(&mut self, kind: Kind, size: usize) -> Result<(), String> {
        self.inner.prepare(kind, size)
    }

    fn latency(&mut self, size: usize, until: u64, rec: &mut TickHistogram, wait: &Waiter) -> Result<(), String> {
        self.hold();
        let r = self.inner.latency(size, until, rec, wait);
        self.release();
        r
    }

    fn throughput(&mut self, size: usize, until: u64, wait: &Waiter) -> Result<Streamed, String> {
        self.hold();
        let r = self.inner.throughput(size, until, wait);
        self.release();
        r
    }
}

impl<P: PeerPath> PeerPath for Driven<P> {
    fn latency(&mut self, size: usize, wait: &Waiter) -> Result<(), String> {
        self.hold();
        let r = self.inner.latency(size, wait);
        self.release();
        r
    }

    fn throughput(&mut self, size: usize, wait: &Waiter) -> Result<u64, String> {
        self.hold();
        let r = self.inner.throughput(size, wait);
        self.release();
        r
    }
}

fn driven(mem: SegmentMem, slot: &DriverSlot) -> DrivenMem {
    DrivenMem { mem, driver: slot.clone() }
}

/// `ofi-pio`, the client side.
pub(crate) fn ofi_client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    let fabric = open()?;
    let (mine, id) = export(&fabric, sender_bytes(env.max_size))?;
    Ok(Box::new(OfiOffer(Offer { fabric, mine, id, max: env.max_size, dma: false })))
}

struct OfiOffer(Offer);

impl ClientOffer for OfiOffer {
    fn offer(&self) -> String {
        self.0.offer()
    }

    fn accept(self: Box<Self>, reply: &str) -> Result<Box<dyn ClientPath>, String> {
        let o = self.0;
        let (node, seg) = parse_ids(reply)?;
        let theirs = connect(&o.fabric, node, seg, receiver_bytes(o.max), false)?;
        let slot = DriverSlot::default();
        let inner = ShmClient::new(driven(o.mine, &slot), driven(theirs, &slot), o.max);
        Ok(Box::new(Driven { inner, fabric: o.fabric, slot }))
    }
}

/// `ofi-pio`, the peer side.
pub(crate) fn ofi_peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    let (node, seg) = parse_ids(offer)?;
    let fabric = open()?;
    let (mine, id) = export(&fabric, receiver_bytes(env.max_size))?;
    let theirs = connect(&fabric, node, seg, sender_bytes(env.max_size), false)?;
    let reply = format!("{} {id}", fabric.node_id().get());
    let slot = DriverSlot::default();
    let inner = ShmPeer::new(driven(mine, &slot), driven(theirs, &slot), env.max_size);
    Ok((Box::new(Driven { inner, fabric, slot }), reply))
}

fn export(fabric: &Fabric, bytes: usize) -> Result<(SegmentMem, u32), String> {
    let seg = fabric.create_segment_auto_id(bytes as u64).map_err(|e| format!("creating a PIO segment: {e}"))?;
    seg.prepare().and_then(|_| seg.set_available()).map_err(|e| format!("exporting a PIO segment: {e}"))?;
    let map = seg.map(0, bytes as u64, MapAccess::ReadWrite).map_err(|e| format!("mapping a PIO segment: {e}"))?;
    let id = seg.id();
    Ok((SegmentMem { map, _hold: Hold::Local(seg), dma: None }, id))
}

fn connect(fabric: &Fabric, node: u32, segment: u32, bytes: usize, dma: bool) -> Result<SegmentMem, String> {
    let remote = fabric
        .connect_segment(node, segment, Timeout::After(CONNECT_TIMEOUT))
        .map_err(|e| format!("connecting to segment {segment:#x} of node {node}: {e}"))?;
    if remote.size() < bytes as u64 {
        return Err(format!("segment {segment:#x} of node {node} holds {} bytes, {bytes} needed", remote.size()));
    }
    let map =
        remote.map(0, bytes as u64, MapAccess::ReadWrite).map_err(|e| format!("mapping a remote segment: {e}"))?;
    let dma = if dma {
        let mut q = DmaQueue::new(4).map_err(|e| format!("a DMA queue: {e}"))?;
        // Sleep at once while the engine copies: on a machine with few cores the channel
        // thread needs the CPU this waiter would spin on.
        q.set_poll_time(Duration::ZERO);
        Some(RefCell::new(q))
    } else {
        None
    };
    Ok(SegmentMem { map, _hold: Hold::Remote(remote), dma })
}

fn parse_ids(s: &str) -> Result<(u32, u32), String> {
    let mut it = s.split_whitespace().map(str::parse::<u32>);
    match (it.next(), it.next()) {
        (Some(Ok(node)), Some(Ok(seg))) => Ok((node, seg)),
        _ => Err(format!("expected `node segment`, got {s:?}")),
    }
}

fn open() -> Result<Fabric, String> {
    Fabric::open().map_err(|e| format!("opening the fabric: {e}"))
}

struct Offer {
    fabric: Fabric,
    mine: SegmentMem,
    id: u32,
    max: usize,
    dma: bool,
}

fn client_of(env: &SetupEnv, dma: bool) -> Result<Box<dyn ClientOffer>, String> {
    let fabric = open()?;
    let (mine, id) = export(&fabric, sender_bytes(env.max_size))?;
    Ok(Box::new(Offer { fabric, mine, id, max: env.max_size, dma }))
}

pub(crate) fn client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    client_of(env, false)
}

pub(crate) fn dma_client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    client_of(env, true)
}

impl ClientOffer for Offer {
    fn offer(&self) -> String {
        format!("{} {}", self.fabric.node_id().get(), self.id)
    }

    fn accept(self: Box<Self>, reply: &str) -> Result<Box<dyn ClientPath>, String> {
        let (node, seg) = parse_ids(reply)?;
        let theirs = connect(&self.fabric, node, seg, receiver_bytes(self.max), self.dma)?;
        Ok(Box::new(ShmClient::new(self.mine, theirs, self.max)))
    }
}

pub(crate) fn peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    peer_of(env, offer, false)
}

pub(crate) fn dma_peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    peer_of(env, offer, true)
}

fn peer_of(env: &SetupEnv, offer: &str, dma: bool) -> Result<(Box<dyn PeerPath>, String), String> {
    let (node, seg) = parse_ids(offer)?;
    let fabric = open()?;
    let (mine, id) = export(&fabric, receiver_bytes(env.max_size))?;
    let theirs = connect(&fabric, node, seg, sender_bytes(env.max_size), dma)?;
    let reply = format!("{} {id}", fabric.node_id().get());
    Ok((Box::new(ShmPeer::new(mine, theirs, env.max_size)), reply))
}
