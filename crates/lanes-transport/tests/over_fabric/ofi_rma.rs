//! DMA queues against an ofi connection: two endpoints of this process, one exporting a
//! buffer, the other reaching it through a `RemoteSegment` that holds an `OfiRemote`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes::config::{FabricConfig, NodeId};
use lanes::error::Error;
use lanes::fabric::{DmaDirection, DmaQueue, DmaQueueState, DmaVec, Fabric, LocalSegment, MapAccess, RemoteSegment};
use lanes::fabric::{LossReason, Timeout};
use lanes::platform::liveness::ProcessIdentity;
use lanes::transport::ofi::endpoint::{EndpointSpec, ProcessEndpoint, RemoteRange};
use lanes::transport::ofi::fi;
use lanes::transport::ofi::remote::OfiRemote;
use lanes::transport::shm::layout::kind;
use lanes::transport::{ObjectAddr, ObjectInfo, RemoteHandle};

const T: Timeout = Timeout::After(Duration::from_secs(120));
const MIB: u64 = 1 << 20;

struct Rig {
    dir: std::path::PathBuf,
    fabric: Fabric,
    owner: Arc<ProcessEndpoint>,
    target: Arc<fi::Buffer>,
    _mr: fi::MemoryRegion,
    conn: OfiRemote,
    remote: Option<RemoteSegment>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Rig {
    /// `len` bytes of the target buffer from `at`.
    fn target_bytes(&self, at: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.target.read(at, &mut v).expect("read target");
        v
    }
}

/// A `len`-byte exported buffer and a remote segment reaching it over ofi, its key
/// spoiled with `key_xor`.
fn rig(name: &str, len: u64, key_xor: u64) -> Rig {
    let spec = EndpointSpec {
        provider: fi::provider_from_env(),
        address: "127.0.0.1".parse().expect("ip"),
        progress: lanes::cluster::IdleProgress::Wake,
    };
    let owner = ProcessEndpoint::open(spec.clone()).expect("owner endpoint");
    let peer = ProcessEndpoint::open(spec).expect("peer endpoint");
    let target = Arc::new(fi::Buffer::new(len as usize).expect("buffer"));
    let mr = owner.register(target.clone(), fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE).expect("register");
    let range = RemoteRange {
        peer: peer.peer(owner.name()).expect("peer address"),
        base: mr.remote_base(),
        key: mr.key() ^ key_xor,
        len,
        handle: 0,
    };
    let info = ObjectInfo {
        addr: ObjectAddr { kind: kind::SEGMENT, node: 8, id: 0x44 },
        size: len,
        owner: ProcessIdentity::current().expect("identity"),
    };
    let conn = OfiRemote::new(peer, range, info, 0, 0, None);
    let dir = std::env::temp_dir().join(format!("lanes-unit-rma-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let fabric = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(4).expect("node"))).expect("fabric");
    let remote = RemoteSegment::from_handle(&fabric, RemoteHandle::Ofi(conn.clone()));
    Rig { dir, fabric, owner, target, _mr: mr, conn, remote: Some(remote) }
}

impl Rig {
    fn remote(&self) -> &RemoteSegment {
        self.remote.as_ref().expect("remote")
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn segment(fabric: &Fabric, id: u32, data: &[u8]) -> LocalSegment {
    let seg = fabric.create_segment(id, data.len() as u64).expect("segment");
    seg.map(0, seg.size(), MapAccess::ReadWrite).expect("map").write_bytes(0, data).expect("fill");
    seg
}

fn contents(seg: &LocalSegment) -> Vec<u8> {
    let mut v = vec![0u8; seg.size() as usize];
    seg.map(0, seg.size(), MapAccess::ReadOnly).expect("map").read_bytes(0, &mut v).expect("read");
    v
}

/// Consecutive pieces of `0..len` in mixed sizes from 1 byte to 4 MiB.
fn pieces(len: u64, seed: u64) -> Vec<(u64, u64)> {
    const SIZES: [u64; 9] = [1, 7, 100, 4096, 65_539, 300_000, MIB, MIB + 5, 4 * MIB];
    let mut x = seed | 1;
    let mut at = 0;
    let mut out = Vec::new();
    while at < len {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let size = SIZES[(x >> 33) as usize % SIZES.len()].min(len - at);
        out.push((at, size));
        at += size;
    }
    out
}

/// Queues `pieces` between `seg` and the rig's remote: alternately one transfer and a
/// vector of up to 24 contiguous entries (merged by the channel).
fn transfer(q: &mut DmaQueue, seg: &LocalSegment, rig: &Rig, pieces: &[(u64, u64)], dir: DmaDirection) {
    let mut i = 0;
    let mut single = true;
    while i < pieces.len() {
        if q.outstanding() + 24 > q.max_entries() {
            assert_eq!(q.wait(T).expect("wait"), DmaQueueState::Done);
        }
        if single {
            let (at, size) = pieces[i];
            q.start(seg, rig.remote(), at, size, at, dir, None).expect("start");
            i += 1;
        } else {
            let end = (i + 24).min(pieces.len());
            let vec: Vec<DmaVec> =
                pieces[i..end].iter().map(|&(at, size)| DmaVec { size, local_offset: at, remote_offset: at }).collect();
            q.start_vec(seg, rig.remote(), &vec, dir, None).expect("start_vec");
            i = end;
        }
        single = !single;
    }
    assert_eq!(q.wait(T).expect("wait"), DmaQueueState::Done);
}

#[test]
fn dma_over_ofi_moves_64_mib_checksummed_both_ways_at_depth_1_and_default() {
    let len = 64 * MIB;
    let rig = rig("64m", len, 0);
    let data = pattern(len as usize, 7);
    let mine = segment(&rig.fabric, 0x45, &data);
    let back = segment(&rig.fabric, 0x46, &vec![0u8; len as usize]);
    for depth in [1, lanes::transport::ofi::rma::DEFAULT_DEPTH] {
        let mut q = rig.fabric.create_dma_queue(256).expect("queue");
        q.set_rma_limits(depth, lanes::transport::ofi::rma::DEFAULT_CHUNK);
        rig.target.write(0, &vec![0u8; len as usize]).expect("clear");
        let started = Instant::now();
        transfer(&mut q, &mine, &rig, &pieces(len, depth as u64), DmaDirection::Write);
        assert!(rig.target_bytes(0, len as usize) == data, "depth {depth}: the written bytes differ");
        transfer(&mut q, &back, &rig, &pieces(len, 99 + depth as u64), DmaDirection::Read);
        assert!(contents(&back) == data, "depth {depth}: the bytes read back differ");
        println!("depth {depth}: 64 MiB written and read back in {:?}", started.elapsed());
        back.map(0, len, MapAccess::ReadWrite).expect("map").fill(0, len as usize, 0).expect("clear");
    }
    // Caller memory, both ways, at an odd offset.
    let mut q = rig.fabric.create_dma_queue(4).expect("queue");
    let mut buf = pattern(3 * MIB as usize + 5, 3);
    // SAFETY: buf lives and is untouched until the wait returns.
    unsafe { q.start_memory(buf.as_mut_ptr(), rig.remote(), buf.len() as u64, 777, DmaDirection::Write, None) }
        .expect("start_memory write");
    assert_eq!(q.wait(T).expect("wait"), DmaQueueState::Done);
    assert!(rig.target_bytes(777, buf.len()) == buf);
    let mut again = vec![0u8; buf.len()];
    // SAFETY: as above.
    unsafe { q.start_memory(again.as_mut_ptr(), rig.remote(), again.len() as u64, 777, DmaDirection::Read, None) }
        .expect("start_memory read");
    assert_eq!(q.wait(T).expect("wait"), DmaQueueState::Done);
    assert!(again == buf);
    buf.clear();
    // copy() takes DMA for an ofi remote, whatever the size.
    assert_eq!(q.copy(&mine, rig.remote(), 0, 10, 5, DmaDirection::Write).expect("copy"), lanes::fabric::CopyPath::Dma);
    // Offsets past the segment are refused before anything is queued.
    assert!(matches!(
        q.start(&mine, rig.remote(), 0, 2, len - 1, DmaDirection::Write, None),
        Err(Error::OutOfRange { .. })
    ));
}

#[test]
fn dma_over_ofi_keeps_at_most_its_window_of_bytes_in_flight() {
    let len = 16 * MIB;
    let rig = rig("window", len, 0);
    let data = pattern(len as usize, 13);
    let mine = segment(&rig.fabric, 0x45, &data);
    // (window, chunk, the peak expected): whole transfers up to the window, a window
    // that is not a multiple of them, one smaller than a transfer (one at a time), and
    // 256 KiB chunks (the depth of 16 binds before the window).
    let cases =
        [(4 * MIB, MIB, 4 * MIB), (5 * MIB / 2, MIB, 2 * MIB), (MIB / 2, MIB, MIB), (16 * MIB, MIB / 4, 4 * MIB)];
    for (i, (window, chunk, peak)) in cases.into_iter().enumerate() {
        let mut q = rig.fabric.create_dma_queue(64).expect("queue");
        q.set_rma_limits(lanes::transport::ofi::rma::DEFAULT_DEPTH, chunk as usize);
        q.set_rma_window(window as usize);
        rig.target.write(0, &vec![0u8; len as usize]).expect("clear");
        // Every other MiB, then the rest: 16 transfers queued at once, none merged.
        let order = (0..16).step_by(2).chain((1..16).step_by(2));
        let vec: Vec<DmaVec> =
            order.map(|m| DmaVec { size: MIB, local_offset: m * MIB, remote_offset: m * MIB }).collect();
        q.start_vec(&mine, rig.remote(), &vec, DmaDirection::Write, None).expect("start_vec");
        assert_eq!(q.wait(T).expect("wait"), DmaQueueState::Done);
        assert!(rig.target_bytes(0, len as usize) == data, "case {i}: the written bytes differ");
        let seen = q.rma_peak_bytes() as u64;
        println!("window {window}, chunk {chunk}: at most {seen} bytes in flight");
        assert!(seen <= peak, "case {i}: {seen} bytes in flight, window {window}");
        // All 16 were queued before the first completion could be read, so the first
        // pass filled the window.
        assert_eq!(seen, peak, "case {i}: the window was not filled");
    }
}

#[test]
fn dma_over_ofi_with_a_wrong_key_fails_with_the_providers_message() {
    for dir in [DmaDirection::Read, DmaDirection::Write] {
        // Fresh endpoints each: a bad key makes rxm drop the connection, and posts on it
        // fail for a while after (design, "Stage 0 results").
        let rig = rig(&format!("badkey-{dir:?}"), 4 * MIB, 0x5a5a_0000);
        let mine = segment(&rig.fabric, 0x45, &pattern(4 * MIB as usize, 1));
        let mut q = rig.fabric.create_dma_queue(16).expect("queue");
        let started = Instant::now();
        q.start(&mine, rig.remote(), 0, 2 * MIB + 3, 0, dir, None).expect("start");
        q.start(&mine, rig.remote(), 3 * MIB, 4096, 3 * MIB, dir, None).expect("start");
        match q.wait(Timeout::After(Duration::from_secs(30))) {
            Err(Error::DmaFailed { reason }) => {
                println!("{dir:?} with a wrong key, after {:?}: {reason}", started.elapsed());
                assert!(reason.contains(if dir == DmaDirection::Write { "RMA write" } else { "RMA read" }), "{reason}");
                assert!(reason.contains("provider error"), "the provider's message: {reason}");
            }
            other => panic!("{dir:?} with a wrong key: {other:?}"),
        }
        assert_eq!(q.state(), DmaQueueState::Error);
    }
}

/// A 64 MiB write from local segment `id` (pattern `seed`) in 64 KiB pieces, one at a
/// time: long enough to be cut in the middle. Returns the segment and the queue, in
/// flight.
fn long_transfer(rig: &Rig, id: u32, seed: u64) -> (LocalSegment, DmaQueue) {
    let len = 64 * MIB;
    let mine = segment(&rig.fabric, id, &pattern(len as usize, seed));
    let mut q = rig.fabric.create_dma_queue(1024).expect("queue");
    q.set_rma_limits(1, 64 << 10);
    let vec: Vec<DmaVec> = (0..1024)
        .map(|i| DmaVec { size: 64 << 10, local_offset: i * (64 << 10), remote_offset: i * (64 << 10) })
        .collect();
    q.start_vec(&mine, rig.remote(), &vec, DmaDirection::Write, None).expect("start");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(q.state(), DmaQueueState::Posted, "still in flight when it is cut");
    (mine, q)
}

#[test]
fn dma_over_ofi_fails_promptly_when_the_host_stops_responding() {
    let len = 64 * MIB;
    let rig = rig("mute", len, 0);
    let (mine, q) = long_transfer(&rig, 0x46, 6);
    let cut = Instant::now();
    // What the node watch does when the daemons call the owner's host suspect.
    rig.conn.conn().set_reachable(false);
    match q.wait(Timeout::After(Duration::from_secs(30))) {
        Err(Error::DmaFailed { reason }) => assert!(reason.contains("does not respond"), "{reason}"),
        other => panic!("with the host suspect: {other:?}"),
    }
    let took = cut.elapsed();
    println!("a suspect host failed the queue in {took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    // The host responds again: a new transfer goes through, checksummed.
    rig.conn.conn().set_reachable(true);
    let mut q = rig.fabric.create_dma_queue(16).expect("queue");
    q.start(&mine, rig.remote(), 0, MIB, 0, DmaDirection::Write, None).expect("start");
    q.wait(Timeout::After(Duration::from_secs(30))).expect("a transfer after the return");
    let back = rig.target_bytes(0, MIB as usize);
    assert!(back == pattern(len as usize, 6)[..MIB as usize], "the data after the return");
}

#[test]
fn dma_over_ofi_fails_promptly_when_the_connection_is_lost() {
    let rig = rig("lost", 64 * MIB, 0);
    let (mine, mut q) = long_transfer(&rig, 0x45, 5);
    let cut = Instant::now();
    rig.conn.conn().mark_lost(LossReason::OwnerDied);
    match q.wait(Timeout::After(Duration::from_secs(30))) {
        Err(Error::DmaFailed { reason }) => assert!(reason.contains("lost"), "{reason}"),
        other => panic!("after the loss: {other:?}"),
    }
    let took = cut.elapsed();
    println!("a lost connection failed the queue in {took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(q.state(), DmaQueueState::Error);
    // Later transfers are refused at once.
    assert!(matches!(
        q.start(&mine, rig.remote(), 0, 10, 0, DmaDirection::Write, None),
        Err(Error::SegmentLost { .. })
    ));
}

#[test]
fn dma_over_ofi_queue_dropped_with_operations_in_flight() {
    let len = 32 * MIB;
    let mut rig = rig("drop", len, 0);
    for round in 0..3u64 {
        let mine = segment(&rig.fabric, 0x50 + round as u32, &pattern(len as usize, round));
        let mut q = rig.fabric.create_dma_queue(64).expect("queue");
        q.set_rma_limits(16, 256 << 10);
        let dir = if round == 1 { DmaDirection::Read } else { DmaDirection::Write };
        q.start(&mine, rig.remote(), 0, len, 0, dir, None).expect("start");
        let mut buf = vec![0u8; MIB as usize];
        if round == 2 {
            // SAFETY: buf outlives the queue, whose drop waits for this transfer.
            unsafe { q.start_memory(buf.as_mut_ptr(), rig.remote(), MIB, 0, DmaDirection::Read, None) }
                .expect("start_memory");
        }
        std::thread::sleep(Duration::from_millis(2 * round));
        let started = Instant::now();
        // The queue, its registrations and the segment's map go; operations in flight
        // keep what they use until their completions are read.
        drop(q);
        mine.remove(true).expect("remove");
        drop(mine);
        drop(buf);
        println!("round {round}: a queue with operations in flight dropped in {:?}", started.elapsed());
    }
    // The endpoints still work and the abandoned operations finish quietly.
    let seg = segment(&rig.fabric, 0x60, &pattern(MIB as usize, 9));
    let mut q = rig.fabric.create_dma_queue(4).expect("queue");
    q.start(&seg, rig.remote(), 0, MIB, 5 * MIB, DmaDirection::Write, None).expect("start");
    assert_eq!(q.wait(T).expect("wait"), DmaQueueState::Done);
    assert!(rig.target_bytes(5 * MIB as usize, MIB as usize) == contents(&seg));
    drop(q);
    // Give the abandoned operations time to complete and free their memory.
    let deadline = fi::deadline_in(Duration::from_millis(300));
    let _ = rig.owner.wait_until(|| None::<()>, Duration::ZERO, deadline, "quiet");
    rig.remote.take();
}

#[test]
fn dma_over_ofi_loopback_write_throughput() {
    let len = 64 * MIB;
    let rig = rig("bw", len, 0);
    let mine = segment(&rig.fabric, 0x45, &pattern(len as usize, 11));
    let mut q = rig.fabric.create_dma_queue(256).expect("queue");
    q.set_poll_time(Duration::ZERO);
    let total = 256 * MIB;
    let started = Instant::now();
    for i in 0..total / MIB {
        let at = (i * MIB) % len;
        q.start(&mine, rig.remote(), at, MIB, at, DmaDirection::Write, None).expect("start");
    }
    assert_eq!(q.wait(T).expect("wait"), DmaQueueState::Done);
    let secs = started.elapsed().as_secs_f64();
    println!(
        "256 MiB DMA write in 1 MiB transfers over {} loopback: {:.0} MB/s ({secs:.3} s)",
        fi::provider_from_env(),
        total as f64 / secs / 1e6
    );
}
