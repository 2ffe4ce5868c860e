//! Two endpoints of this process on 127.0.0.1: the "owner" registers a buffer for remote
//! access, the "peer" connects to it and maps it through a fabric's `RemoteSegment`.
//! Provider `tcp;ofi_rxm` unless `LANES_OFI_PROVIDER` names another.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes::config::{FabricConfig, NodeId};
use lanes::error::Error;
use lanes::fabric::{Fabric, Map, MapAccess, RemoteSegment, RemoteState, SequenceStatus};
use lanes::platform::liveness::ProcessIdentity;
use lanes::platform::SharedSlice;
use lanes::transport::ofi::endpoint::{EndpointSpec, ProcessEndpoint, RemoteRange};
use lanes::transport::ofi::fi;
use lanes::transport::ofi::remote::OfiRemote;
use lanes::transport::shm::layout::kind;
use lanes::transport::{ObjectAddr, ObjectInfo, RemoteHandle};

const LEN: usize = 64 * 1024;
/// Liveness bound of waits in these tests (a hang fails instead).
const LIVE: Duration = Duration::from_secs(20);

struct Pair {
    owner: Arc<ProcessEndpoint>,
    peer: Arc<ProcessEndpoint>,
    buf: Arc<fi::Buffer>,
    /// Bytes of `buf`.
    len: usize,
    mr: Option<fi::MemoryRegion>,
    fabric: Fabric,
    dir: PathBuf,
}

impl Pair {
    fn new(name: &str) -> Pair {
        Pair::with_len(name, LEN)
    }

    fn with_len(name: &str, len: usize) -> Pair {
        let spec = EndpointSpec {
            provider: fi::provider_from_env(),
            address: "127.0.0.1".parse().expect("ip"),
            progress: lanes::cluster::IdleProgress::Wake,
        };
        let owner = ProcessEndpoint::open(spec.clone()).expect("owner endpoint");
        let peer = ProcessEndpoint::open(spec).expect("peer endpoint");
        let buf = Arc::new(fi::Buffer::new(len).expect("buffer"));
        let mr = owner
            .register(buf.clone(), fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE | fi::FI_READ | fi::FI_WRITE)
            .expect("register");
        let dir = std::env::temp_dir().join(format!("lanes-unit-window-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let fabric = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(8).expect("node"))).expect("fabric");
        Pair { owner, peer, buf, len, mr: Some(mr), fabric, dir }
    }

    /// A connection to the owner's buffer, with `key` (the registration's unless given).
    fn segment_with_key(&self, key: u64, base: u64) -> RemoteSegment {
        RemoteSegment::from_handle(&self.fabric, RemoteHandle::Ofi(self.remote_with_key(key, base)))
    }

    /// The ofi side of [`Pair::segment_with_key`].
    fn remote_with_key(&self, key: u64, base: u64) -> OfiRemote {
        let range = RemoteRange {
            peer: self.peer.peer(self.owner.name()).expect("peer address"),
            base,
            key,
            len: self.len as u64,
            handle: 0,
        };
        let info = ObjectInfo {
            addr: ObjectAddr { kind: kind::SEGMENT, node: 4, id: 7 },
            size: self.len as u64,
            owner: ProcessIdentity::current().expect("identity"),
        };
        OfiRemote::new(self.peer.clone(), range, info, 0, 0, None)
    }

    fn segment(&self) -> RemoteSegment {
        let mr = self.mr.as_ref().expect("registered");
        self.segment_with_key(mr.key(), mr.remote_base())
    }

    fn owner_bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.buf.read(offset, &mut v).expect("owner read");
        v
    }

    /// Waits (bounded) until the owner's buffer holds `want` at `offset`.
    fn owner_sees(&self, offset: usize, want: &[u8], within: Duration) -> bool {
        let until = Instant::now() + within;
        loop {
            if self.owner_bytes(offset, want.len()) == want {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a program's own loads and stores reach: the map's raw pointer, as a slice.
fn raw(map: &Map) -> SharedSlice<'_> {
    // SAFETY: the pointer names the window's `len()` bytes, valid while the map lives;
    // these tests touch them only through the slice.
    unsafe { SharedSlice::from_raw_parts(map.as_ptr(), map.len()) }
}

fn raw_store(map: &Map, offset: usize, byte: u8) {
    assert!(offset < map.len());
    raw(map).write(offset, byte).expect("in the window");
}

fn raw_load(map: &Map, offset: usize) -> u8 {
    assert!(offset < map.len());
    raw(map).read(offset).expect("in the window")
}

#[test]
fn window_is_filled_when_the_map_is_made() {
    let p = Pair::new("fill");
    let pattern: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    p.buf.write(0, &pattern).expect("owner write");
    let seg = p.segment();
    let map = seg.map(4096, 8192, MapAccess::ReadWrite).expect("map");
    assert_eq!(map.len(), 8192);
    assert_eq!(map.segment_offset(), 4096);
    assert_eq!(map.as_ptr() as usize % 4096, 0, "the window is page-aligned, as offset 4096 is");
    for i in (0..8192).step_by(97) {
        assert_eq!(raw_load(&map, i), pattern[4096 + i], "byte {i}");
    }
    // A window at an odd offset has the object's alignment: its byte 4 is offset 104, an
    // aligned word, and its byte 0 is not.
    let odd = seg.map(100, 1000, MapAccess::ReadWrite).expect("map at offset 100");
    assert_eq!(odd.as_ptr() as usize % 4096, 100);
    let word = u64::from_le_bytes(pattern[104..112].try_into().expect("8 bytes"));
    assert_eq!(odd.read::<u64>(4).expect("an aligned read"), word);
    assert!(matches!(odd.read::<u64>(0), Err(Error::Misaligned { .. })));
    odd.write::<u64>(988, 7).expect("an aligned write near the window's end");
    odd.flush_checked().expect("flush");
    let mut got = [0u8; 8];
    p.buf.read(1088, &mut got).expect("owner read");
    assert_eq!(u64::from_le_bytes(got), 7);
}

#[test]
fn flushed_writes_are_visible_and_byte_exact() {
    let p = Pair::new("exact");
    let seg = p.segment();
    let map = seg.map(0, LEN as u64, MapAccess::ReadWrite).expect("map");
    // The owner writes neighbouring bytes of the same lines after the window was filled.
    for off in [1usize, 3, 13, 99, 250, 1000] {
        p.buf.write(off, &[0xaa]).expect("owner write");
    }
    map.write::<u8>(0, 0x11).unwrap();
    map.write::<u8>(2, 0x22).unwrap();
    map.write::<u32>(4, 0x4433_2211).unwrap();
    map.write::<u16>(14, 0xbeef).unwrap();
    map.write_bytes(100, &[5u8; 150]).unwrap();
    map.fill(251, 700, 7).unwrap();
    map.write_bytes(60_000, &[9u8; 5000]).unwrap();
    // Overlapping rewrites coalesce and keep the last value.
    map.write::<u64>(40_000, 1).unwrap();
    map.write::<u64>(40_000, 2).unwrap();
    map.flush();
    map.flush_checked().expect("every write delivered");
    let b = p.owner_bytes(0, LEN);
    assert_eq!(&b[0..4], &[0x11, 0xaa, 0x22, 0xaa]);
    assert_eq!(&b[4..8], &0x4433_2211u32.to_ne_bytes());
    assert_eq!(&b[12..14], &[0, 0xaa]);
    assert_eq!(&b[14..16], &0xbeefu16.to_ne_bytes());
    assert!(b[100..250].iter().all(|&x| x == 5));
    assert_eq!(b[250], 0xaa, "a byte between two writes is not sent");
    assert!(b[251..951].iter().all(|&x| x == 7));
    assert_eq!(b[1000], 0xaa);
    assert!(b[60_000..65_000].iter().all(|&x| x == 9));
    assert_eq!(u64::from_ne_bytes(b[40_000..40_008].try_into().unwrap()), 2);
    assert!(b[65_000..].iter().all(|&x| x == 0));
    // A sequence around a good burst is Ok.
    let seq = map.sequence();
    assert_eq!(seq.start(), SequenceStatus::Ok);
    for i in 0..300 {
        // More entries than the log holds: a full log is posted early.
        map.write::<u8>(20_000 + 2 * i, i as u8).unwrap();
    }
    assert_eq!(seq.check(), SequenceStatus::Ok);
    let b = p.owner_bytes(20_000, 600);
    for i in 0..300 {
        assert_eq!(b[2 * i], i as u8);
        assert_eq!(b[2 * i + 1], 0);
    }
}

#[test]
fn a_file_read_straight_into_the_window_is_delivered_and_peeked_without_a_round_trip() {
    use std::os::fd::AsFd;
    let p = Pair::new("from-fd");
    for off in [999usize, 2500, LEN - 1] {
        p.buf.write(off, &[0xaa]).expect("owner write");
    }
    let seg = p.segment();
    let map = seg.map(0, LEN as u64, MapAccess::ReadWrite).expect("map");
    let (tx, rx) = std::os::unix::net::UnixDatagram::pair().expect("socket pair");
    let data: Vec<u8> = (0..1500u32).map(|i| (i * 13 + 1) as u8).collect();
    tx.send(&data).expect("send");
    // 1000 bytes at the end of the window, the rest from 1000 (room for 2000 more): what the
    // read filled is written through, nothing after it.
    let ranges = [(LEN - 1001, 1000), (1000, 2500)];
    assert_eq!(map.read_from_fd(rx.as_fd(), &ranges).expect("map").expect("read"), 1500);
    let mut peeked = vec![0u8; 500];
    map.peek_bytes(1000, &mut peeked).expect("peek");
    assert_eq!(&peeked[..], &data[1000..], "the window holds what was read, without a fetch");
    map.flush_checked().expect("delivered");
    assert_eq!(p.owner_bytes(LEN - 1001, 1000), data[..1000]);
    assert_eq!(p.owner_bytes(1000, 500), data[1000..]);
    assert_eq!(p.owner_bytes(999, 1), [0xaa], "the byte before the second range is not sent");
    assert_eq!(p.owner_bytes(1500, 1000), vec![0u8; 1000], "no byte past what was read is sent");
    assert_eq!(p.owner_bytes(2500, 1), [0xaa]);
    assert_eq!(p.owner_bytes(LEN - 1, 1), [0xaa]);
    // Back out of the window (read through first, so the owner's byte at LEN - 1 comes too).
    assert_eq!(map.write_to_fd(tx.as_fd(), &[(LEN - 1001, 1001)]).expect("map").expect("write"), 1001);
    let mut back = vec![0u8; 2000];
    let n = rx.recv(&mut back).expect("recv");
    assert_eq!(&back[..1000], &data[..1000]);
    assert_eq!(&back[1000..n], &[0xaa]);
    // A range outside the window or a read-only map: refused before any I/O.
    assert!(matches!(map.read_from_fd(rx.as_fd(), &[(LEN - 10, 11)]), Err(Error::OutOfRange { .. })));
    let ro = seg.map(0, 4096, MapAccess::ReadOnly).expect("read-only map");
    assert!(matches!(ro.read_from_fd(rx.as_fd(), &[(0, 10)]), Err(Error::ReadOnly)));
}

/// Resets the release word at 0, then writes `ranges` (offset, length) of `map` with byte
/// `k` and then the word with `k`, for `k` in 1..=`rounds`, while a thread watches the owner's buffer: no
/// word may be seen before the data written ahead of it. Returns once the owner holds
/// the last round.
fn release_rounds(p: &Pair, map: &Map, ranges: &[(usize, usize)], rounds: u64) {
    release_rounds_at(p, map, 0, ranges, rounds);
}

/// [`release_rounds`] with the word at `word_at`.
fn release_rounds_at(p: &Pair, map: &Map, word_at: usize, ranges: &[(usize, usize)], rounds: u64) {
    // The word of an earlier call would otherwise be seen with this call's first data.
    map.store_release_u64(word_at, 0).unwrap();
    map.flush_checked().expect("the word reset");
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let buf = p.buf.clone();
        let done = done.clone();
        let ranges = ranges.to_vec();
        std::thread::spawn(move || {
            let until = Instant::now() + LIVE;
            let mut seen = 0u64;
            let mut word = [0u8; 8];
            while Instant::now() < until && !done.load(Ordering::Acquire) {
                buf.read(word_at, &mut word).unwrap();
                std::sync::atomic::fence(Ordering::Acquire);
                let w = u64::from_ne_bytes(word);
                for &(at, len) in &ranges {
                    let mut data = vec![0u8; len];
                    buf.read(at, &mut data).unwrap();
                    if let Some(i) = data.iter().position(|&b| u64::from(b) < w) {
                        return Err(format!("word {w} seen with byte {} = {}", at + i, data[i]));
                    }
                }
                seen = seen.max(w);
                if w == rounds {
                    return Ok(seen);
                }
            }
            Ok(seen)
        })
    };
    for k in 1..=rounds {
        for &(at, len) in ranges {
            map.write_bytes(at, &vec![k as u8; len]).unwrap();
        }
        map.store_release_u64(word_at, k).unwrap();
    }
    map.flush();
    map.flush_checked().expect("delivered");
    let seen = watcher.join().unwrap().expect("ordering held");
    done.store(true, Ordering::Release);
    assert_eq!(seen, rounds, "the owner saw the last word");
    for &(at, len) in ranges {
        assert!(p.owner_bytes(at, len).iter().all(|&b| b == rounds as u8), "bytes at {at}");
    }
}

#[test]
fn a_release_store_lands_after_the_data_before_it() {
    let p = Pair::new("release");
    let seg = p.segment();
    let map = seg.map(0, LEN as u64, MapAccess::ReadWrite).expect("map");
    release_rounds(&p, &map, &[(64, 32 * 1024)], 200);
    // The 32-bit release store too.
    map.write::<u32>(8, 77).unwrap();
    map.store_release_u32(12, 78).unwrap();
    map.flush();
    assert_eq!(p.owner_bytes(8, 8), [77u32.to_ne_bytes(), 78u32.to_ne_bytes()].concat());
}

/// A run longer than the staging ring goes from the window itself, and the barrier
/// returns only once the provider has read it: no write reading the window is still in
/// flight after the release store, so the next stores cannot travel with it. 4 MiB is
/// more than a new connection's socket takes at once, so the write is still going out
/// when the barrier starts to wait.
#[test]
fn a_run_longer_than_the_staging_ring_is_read_before_the_barrier_returns() {
    const BIG: usize = 16 * lanes::transport::ofi::window::STAGING;
    let p = Pair::with_len("direct", BIG);
    let mr = p.mr.as_ref().expect("registered");
    let remote = p.remote_with_key(mr.key(), mr.remote_base());
    let w = lanes::transport::ofi::window::MirrorWindow::open(remote.conn(), 0, BIG as u64, MapAccess::ReadWrite)
        .expect("window");
    let data = 64..BIG;
    for k in 1..=3u8 {
        let bytes = vec![k; data.len()];
        w.tracked(data.start, data.len(), || w.slice().copy_from(data.start, &bytes).expect("inside the window"))
            .expect("the data");
        let word = u64::from(k).to_ne_bytes();
        w.release(0, &word, || w.slice().copy_from(0, &word).expect("inside the window")).expect("the release store");
        let st = lanes::transport::ofi::window::lock(&w.shared.state);
        let reading = st.inflight.iter().filter(|f| f.start < BIG && f.op.outcome().is_none()).count();
        assert_eq!(reading, 0, "round {k}: writes still reading the window after the release store");
    }
    w.flush_checked().expect("delivered");
    assert_eq!(p.owner_bytes(0, 8), 3u64.to_ne_bytes());
    assert!(p.owner_bytes(data.start, data.len()).iter().all(|&b| b == 3));
}

/// A release store right after a run longer than the staging ring (a large ping-pong
/// message and its sequence word) goes in the run's write, as its last range: the word
/// still lands after every byte of the run, and nothing reads the window once the store
/// has returned. Also with the run in several writes (the provider's limit made small).
#[test]
fn a_release_store_right_after_a_long_run_lands_after_it() {
    const BIG: usize = 4 * lanes::transport::ofi::window::STAGING + 8;
    let p = Pair::with_len("run-release", BIG);
    let seg = p.segment();
    let map = seg.map(0, BIG as u64, MapAccess::ReadWrite).expect("map");
    release_rounds_at(&p, &map, BIG - 8, &[(0, BIG - 8)], 30);
    let mr = p.mr.as_ref().expect("registered");
    let remote = p.remote_with_key(mr.key(), mr.remote_base());
    for chunk in [usize::MAX, lanes::transport::ofi::window::STAGING + 4096] {
        let w = lanes::transport::ofi::window::MirrorWindow::open_capped(
            remote.conn(),
            0,
            BIG as u64,
            MapAccess::ReadWrite,
            chunk,
        )
        .expect("window");
        for k in 1..=3u8 {
            let bytes = vec![k; BIG - 8];
            w.tracked(0, bytes.len(), || w.slice().copy_from(0, &bytes).expect("inside the window")).expect("the run");
            let word = u64::from(k).to_ne_bytes();
            w.release(BIG - 8, &word, || w.slice().copy_from(BIG - 8, &word).expect("inside the window"))
                .expect("the release store");
            let st = lanes::transport::ofi::window::lock(&w.shared.state);
            let reading = st.inflight.iter().filter(|f| f.start < BIG && f.op.outcome().is_none()).count();
            assert_eq!(reading, 0, "chunk {chunk}, round {k}: writes still reading the window");
        }
        w.flush_checked().expect("delivered");
        assert_eq!(p.owner_bytes(BIG - 8, 8), 3u64.to_ne_bytes(), "chunk {chunk}");
        assert!(p.owner_bytes(0, BIG - 8).iter().all(|&b| b == 3), "chunk {chunk}");
    }
}

/// A release store after a write that could not be posted is not posted either, and the
/// call fails, on each of its paths: the word apart from a long run (the run by a
/// barrier, the word from its slot), the word right after a long run with a range
/// before it (the range fails), the same run in several writes (its first fails), and
/// the word after a short range (one staged write). A release store after that lands.
#[test]
fn a_release_store_after_a_write_that_failed_to_post_is_not_posted() {
    const BIG: usize = 2 * lanes::transport::ofi::window::STAGING + 4096;
    const RUN: usize = lanes::transport::ofi::window::STAGING + 4096;
    let word_at = BIG - 8;
    // (offset, length) of the data before the word.
    let long = (word_at - RUN, RUN);
    let cases: [(usize, Vec<(usize, usize)>); 4] = [
        (usize::MAX, vec![(0, RUN)]),
        (usize::MAX, vec![(64, 1024), long]),
        (64 * 1024, vec![long]),
        (usize::MAX, vec![(64, 1024)]),
    ];
    let p = Pair::with_len("release-refused", BIG);
    let mr = p.mr.as_ref().expect("registered");
    let remote = p.remote_with_key(mr.key(), mr.remote_base());
    let mut landed = 0u64;
    for (case, (cap, ranges)) in cases.into_iter().enumerate() {
        let w = lanes::transport::ofi::window::MirrorWindow::open_capped(
            remote.conn(),
            0,
            BIG as u64,
            MapAccess::ReadWrite,
            cap,
        )
        .expect("window");
        let k = case as u8 + 1;
        let round = |refuse: usize| {
            for &(at, len) in &ranges {
                let bytes = vec![k; len];
                w.tracked(at, len, || w.slice().copy_from(at, &bytes).expect("inside the window")).expect("the data");
            }
            w.shared.refuse_posts.store(refuse, Ordering::Release);
            let word = u64::from(k).to_ne_bytes();
            let r = w.release(word_at, &word, || w.slice().copy_from(word_at, &word).expect("inside the window"));
            w.flush();
            r
        };
        assert!(round(1).is_err(), "case {case}: the release store fails");
        assert_eq!(p.owner_bytes(word_at, 8), landed.to_ne_bytes(), "case {case}: the word was not posted");
        round(0).expect("a release store after the failure");
        landed = u64::from(k);
        assert_eq!(p.owner_bytes(word_at, 8), landed.to_ne_bytes(), "case {case}");
        for &(at, len) in &ranges {
            assert!(p.owner_bytes(at, len).iter().all(|&b| b == k), "case {case}: bytes at {at}");
        }
        assert!(w.flush_checked().is_err(), "case {case}: the failure is reported once");
        w.flush_checked().expect("and not again");
    }
}

/// A release store goes as the last range of its data's write only toward an owner
/// whose export record says its cores see one write's ranges in order; toward another
/// owner the word is its own write, and the order holds either way.
#[test]
fn a_release_store_rides_with_its_data_only_toward_an_owner_that_sees_ranges_in_order() {
    use lanes::transport::ofi::notify::Publish;
    let p = Pair::new("owner-order");
    let mr = p.mr.as_ref().expect("registered");
    let in_order = fi::provider_from_env().starts_with("tcp") || fi::provider_from_env().starts_with("net");
    for (how, rides) in [(Publish::ByCompletionData, false), (Publish::InPlace, in_order)] {
        let remote = p.remote_with_key(mr.key(), mr.remote_base());
        remote.publish_by(how);
        let w = lanes::transport::ofi::window::MirrorWindow::open(remote.conn(), 0, LEN as u64, MapAccess::ReadWrite)
            .expect("window");
        assert_eq!(w.shared.scatter > 1, rides, "{how:?}");
        drop(w);
        let seg = RemoteSegment::from_handle(&p.fabric, RemoteHandle::Ofi(remote));
        let map = seg.map(0, LEN as u64, MapAccess::ReadWrite).expect("map");
        release_rounds(&p, &map, &[(64, 1024), (8192, 32 * 1024)], 100);
    }
}

/// Several logged ranges before a release store: where the provider fills ranges in
/// order they go in one write with the word (up to its range limit), else as writes of
/// their own; the word lands last either way. Also past the limit, and with a shadow.
#[test]
fn a_release_store_lands_after_several_ranges_before_it() {
    let p = Pair::new("release-ranges");
    if fi::provider_from_env().starts_with("tcp") {
        assert!(p.peer.fi().domain().info().fills_ranges_in_order(), "tcp fills ranges in order");
    }
    let seg = p.segment();
    let map = seg.map(0, LEN as u64, MapAccess::ReadWrite).expect("map");
    // Three ranges and the word: one write on tcp.
    release_rounds(&p, &map, &[(40_000, 4096), (100, 16), (9000, 1)], 100);
    // Six ranges: more than one write may take.
    let six = [(64, 8), (200, 100), (1000, 3), (5000, 2048), (20_000, 1), (30_000, 512)];
    release_rounds(&p, &map, &six, 50);
    // More data than one write carries (past the staging ring).
    release_rounds(&p, &map, &[(8, LEN - 8)], 5);
    // In shadow mode raw stores are found by the diff, then posted the same way.
    for k in 1..=20u8 {
        for at in [300usize, 7000, 60_000] {
            raw_store(&map, at, k);
        }
        map.store_release_u64(0, u64::from(k)).unwrap();
    }
    map.flush();
    assert!(p.owner_sees(0, &20u64.to_ne_bytes(), LIVE));
    for at in [300usize, 7000, 60_000] {
        assert_eq!(p.owner_bytes(at, 1), [20], "raw store at {at}");
    }
}

#[test]
fn reads_through_the_map_see_the_owner_and_our_own_writes() {
    let p = Pair::new("readthrough");
    let seg = p.segment();
    let map = seg.map(0, LEN as u64, MapAccess::ReadWrite).expect("map");
    p.buf.write(256, &0x1234_5678_9abc_def0u64.to_ne_bytes()).unwrap();
    p.buf.write(1024, b"from the owner").unwrap();
    assert_eq!(map.read::<u64>(256).unwrap(), 0x1234_5678_9abc_def0);
    assert_eq!(map.load_acquire_u64(256).unwrap(), 0x1234_5678_9abc_def0);
    assert_eq!(map.load_acquire_u32(256).unwrap(), 0x9abc_def0);
    let mut got = [0u8; 14];
    map.read_bytes(1024, &mut got).unwrap();
    assert_eq!(&got, b"from the owner");
    // Our own unflushed writes are posted first, so a read sees them.
    map.write::<u32>(512, 0xfeed).unwrap();
    assert_eq!(map.read::<u32>(512).unwrap(), 0xfeed);
    assert_eq!(p.owner_bytes(512, 4), 0xfeedu32.to_ne_bytes());
    // The owner changes it again; the next read sees that.
    p.buf.write(512, &7u32.to_ne_bytes()).unwrap();
    assert_eq!(map.read::<u32>(512).unwrap(), 7);
}

#[test]
fn raw_pointer_stores_are_delivered_by_flush_and_refresh_rereads() {
    let p = Pair::new("raw");
    let seg = p.segment();
    let map = seg.map(0, LEN as u64, MapAccess::ReadWrite).expect("map");
    let _ = map.as_ptr();
    p.buf.write(11, &[0x55]).unwrap();
    p.buf.write(4001, &[0x66]).unwrap();
    raw_store(&map, 10, 0x01);
    raw_store(&map, 4000, 0x02);
    raw_store(&map, LEN - 1, 0x03);
    map.write::<u8>(30_000, 0x04).unwrap();
    map.flush();
    map.flush_checked().expect("delivered");
    assert_eq!(p.owner_bytes(10, 2), [0x01, 0x55]);
    assert_eq!(p.owner_bytes(4000, 2), [0x02, 0x66]);
    assert_eq!(p.owner_bytes(LEN - 1, 1), [0x03]);
    assert_eq!(p.owner_bytes(30_000, 1), [0x04]);
    // Raw loads see the window as last read; refresh reads the range again.
    p.buf.write(8192, &[0x77; 16]).unwrap();
    assert_eq!(raw_load(&map, 8192), 0);
    map.refresh(8192, 16).unwrap();
    assert_eq!(raw_load(&map, 8192), 0x77);
    assert_eq!(raw_load(&map, 8207), 0x77);
    // What refresh read is not sent back as a change.
    p.buf.write(8192, &[0x78]).unwrap();
    map.flush();
    assert_eq!(p.owner_bytes(8192, 1), [0x78]);
    assert!(matches!(map.refresh(LEN - 4, 8), Err(Error::OutOfRange { .. })));
}

#[test]
fn window_stores_nobody_flushes_are_drained() {
    let p = Pair::new("drain");
    let seg = p.segment();
    let tracked = seg.map(0, 4096, MapAccess::ReadWrite).expect("map");
    tracked.write::<u32>(16, 0xabcd).unwrap();
    assert!(p.owner_sees(16, &0xabcdu32.to_ne_bytes(), Duration::from_secs(2)), "tracked write drained");
    let raw = seg.map(8192, 4096, MapAccess::ReadWrite).expect("map");
    raw_store(&raw, 5, 0x42);
    assert!(p.owner_sees(8192 + 5, &[0x42], Duration::from_secs(2)), "raw store drained");
    raw_store(&raw, 6, 0x43);
    assert!(p.owner_sees(8192 + 6, &[0x43], Duration::from_secs(2)), "a later raw store drained");
}

#[test]
fn window_out_of_range_and_read_only_maps_are_refused() {
    let p = Pair::new("refuse");
    let seg = p.segment();
    assert!(matches!(seg.map(LEN as u64 - 8, 16, MapAccess::ReadWrite), Err(Error::OutOfRange { .. })));
    assert!(matches!(seg.map(u64::MAX, 2, MapAccess::ReadWrite), Err(Error::OutOfRange { .. })));
    assert!(matches!(seg.map(0, 0, MapAccess::ReadWrite), Err(Error::InvalidSize { .. })));
    let map = seg.map(0, 4096, MapAccess::ReadWrite).expect("map");
    assert!(matches!(map.write::<u64>(4096, 1), Err(Error::OutOfRange { .. })));
    assert!(matches!(map.read::<u32>(2), Err(Error::Misaligned { .. })));
    let ro = seg.map(0, 4096, MapAccess::ReadOnly).expect("read-only map");
    assert!(matches!(ro.write::<u8>(0, 1), Err(Error::ReadOnly)));
    assert!(matches!(ro.write_bytes(0, &[1]), Err(Error::ReadOnly)));
    assert!(matches!(ro.fill(0, 1, 1), Err(Error::ReadOnly)));
    assert!(matches!(ro.store_release_u64(0, 1), Err(Error::ReadOnly)));
    // Raw stores to a read-only window stay local.
    raw_store(&ro, 0, 0x99);
    ro.flush();
    ro.flush_checked().expect("nothing to fail");
    assert_eq!(p.owner_bytes(0, 1), [0]);
    p.buf.write(0, &[3]).unwrap();
    assert_eq!(ro.read::<u8>(0).unwrap(), 3);
}

#[test]
fn window_with_a_revoked_key_fails_flush_and_sequence_without_hanging() {
    let mut p = Pair::new("revoked");
    let seg = p.segment();
    let map = seg.map(0, 4096, MapAccess::ReadWrite).expect("map");
    let seq = map.sequence();
    assert_eq!(seq.start(), SequenceStatus::Ok);
    // The owner withdraws the export: the key is wrong from now on.
    drop(p.mr.take());
    let started = Instant::now();
    map.write::<u64>(0, 1).unwrap();
    map.flush();
    assert_eq!(seq.check(), SequenceStatus::Retriable);
    let e = map.flush_checked().expect_err("the write was not delivered");
    assert!(matches!(e, Error::Ofi { .. }), "{e}");
    assert!(e.to_string().contains("segment 0x7 on node 4"), "{e}");
    // Later writes fail the same way, and so does a read through the map.
    map.store_release_u32(8, 1).ok();
    assert_eq!(seq.check(), SequenceStatus::Retriable);
    assert!(map.read::<u64>(0).is_err());
    assert!(map.refresh(0, 8).is_err());
    assert!(started.elapsed() < LIVE, "bounded, took {:?}", started.elapsed());
    assert_eq!(p.owner_bytes(0, 8), [0; 8]);
}

#[test]
fn window_of_a_withdrawn_export_is_not_made() {
    let mut p = Pair::new("withdrawn");
    let (key, base) = {
        let mr = p.mr.as_ref().unwrap();
        (mr.key(), mr.remote_base())
    };
    drop(p.mr.take());
    let seg = p.segment_with_key(key, base);
    let started = Instant::now();
    let r = seg.map(0, 4096, MapAccess::ReadWrite);
    assert!(matches!(r, Err(Error::Ofi { .. })), "{r:?}");
    assert!(started.elapsed() < LIVE);
    // A wrong key from the start fails the same way.
    let seg = p.segment_with_key(key ^ 0x5a5a_0000, base);
    assert!(seg.map(0, 4096, MapAccess::ReadWrite).is_err());
}

#[test]
fn window_after_a_loss_stays_readable_and_writes_fail() {
    let p = Pair::new("lost");
    p.buf.write(0, &[1, 2, 3, 4]).unwrap();
    let seg = p.segment();
    let map = seg.map(0, 4096, MapAccess::ReadWrite).expect("map");
    let seq = map.sequence();
    assert_eq!(seq.start(), SequenceStatus::Ok);
    map.write::<u8>(100, 1).unwrap();
    seg.disconnect();
    assert!(matches!(map.write::<u8>(0, 9), Err(Error::SegmentLost { .. })));
    assert!(matches!(map.store_release_u64(8, 9), Err(Error::SegmentLost { .. })));
    assert_eq!(map.read::<u32>(0).unwrap(), u32::from_ne_bytes([1, 2, 3, 4]), "the window as last read");
    assert_eq!(raw_load(&map, 2), 3);
    map.flush();
    assert!(matches!(map.flush_checked(), Err(Error::SegmentLost { .. })));
    assert_eq!(seq.check(), SequenceStatus::NotRetriable);
    let _ = RemoteState::Operational;
}
