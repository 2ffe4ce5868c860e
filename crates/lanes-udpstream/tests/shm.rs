//! The shared-memory path: round trips between threads and between two processes, a full
//! ring, a receiver killed mid-stream, hostile ring files (the sender falls back to UDP and a
//! plain receiver gets ordinary datagrams), hostile records (the receiver gives the ring up),
//! and the environment variable that forces the kernel path.

mod common;

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::signal;
use lanes_testkit::program::Program;
use lanes_udpstream::header::HEADER_LEN;
use lanes_udpstream::shm::{self, ring_path};
use lanes_udpstream::{
    RecvOptions, RecvPath, SendOptions, SendPath, StreamReceiver, StreamSender, MAX_UDP_PAYLOAD, PATH_ENV,
};

fn shm_recv(ds: usize, header: bool) -> StreamReceiver {
    let mut o = RecvOptions::new(ds).with_path(RecvPath::Shm);
    o.sequence_header = header;
    StreamReceiver::bind("127.0.0.1:0", o).expect("bind")
}

fn shm_send(port: u16, ds: usize, header: bool) -> StreamSender {
    let mut o = SendOptions::new(ds).with_path(SendPath::Shm);
    o.sequence_header = header;
    StreamSender::connect(("127.0.0.1", port), o).expect("connect")
}

#[test]
fn shm_round_trip_every_size() {
    for ds in [1024, 1472, 4096, 16384, MAX_UDP_PAYLOAD - HEADER_LEN] {
        for header in [true, false] {
            let rx = shm_recv(ds, header);
            assert_eq!(rx.path(), RecvPath::Shm, "the ring is published");
            let port = rx.local_addr().unwrap().port();
            let total = 300 * ds + 777;
            let data = signal(total, ds as u64);
            let progress = Arc::new(AtomicUsize::new(0));
            let p2 = progress.clone();
            let h = thread::spawn(move || {
                let mut rx = rx;
                let mut buf = vec![0u8; 1 << 20];
                let (mut got, mut gaps, mut calls, mut paths) = (Vec::new(), 0, 0, Vec::new());
                while got.len() < total {
                    let r = rx.recv_block(&mut buf, Some(Duration::from_secs(10))).expect("recv_block");
                    got.extend_from_slice(&buf[..r.bytes]);
                    gaps += r.gaps + r.reordered + r.rejected + r.truncated;
                    calls += r.system_calls;
                    if !paths.contains(&r.path) {
                        paths.push(r.path);
                    }
                    p2.store(got.len(), Ordering::Release);
                }
                (got, gaps, calls, paths)
            });
            let mut tx = shm_send(port, ds, header);
            assert_eq!(tx.path(), SendPath::Shm, "{:?}", tx.ring_refusal());
            let (mut calls, mut dgrams, mut want) = (0, 0, 0);
            // Blocks larger than the ring (8 MiB) make the sender wait for room.
            for c in data.chunks(if ds > 60000 { 9 << 20 } else { 3 << 20 }) {
                want += c.len().div_ceil(ds) as u64;
                let r = tx.send_block(c).expect("send_block");
                assert_eq!((r.path, r.dropped, r.bytes as usize), (SendPath::Shm, 0, c.len()));
                calls += r.system_calls;
                dgrams += r.datagrams;
            }
            let (got, bad, rx_calls, paths) = h.join().expect("receiver");
            assert!(got == data, "ds {ds} header {header}: bytes differ ({} of {total})", got.len());
            assert_eq!(bad, 0, "ds {ds} header {header}: gaps, reordered, rejected, truncated");
            assert_eq!(paths, [RecvPath::Shm]);
            assert_eq!(dgrams, want);
            eprintln!("ds {ds} header {header}: {dgrams} datagrams, {calls} send calls, {rx_calls} receive calls");
            assert!(calls < dgrams, "{calls} send calls for {dgrams} datagrams");
        }
    }
}

/// How long a child process (this binary re-run) may take, at most.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// The receiver is this test; the sender a child process (this binary re-run), both on
/// their own choice of path: the ring.
#[test]
fn shm_between_two_processes() {
    for (env, want) in [("", "shm"), ("shm", "shm"), ("gso", "gso"), ("mmsg", "mmsg")] {
        let ds = 8000;
        let total = 500 * ds + 5;
        let ro = RecvOptions::new(ds).with_sequence_header().with_path(RecvPath::Shm);
        let mut rx = StreamReceiver::bind("127.0.0.1:0", ro).unwrap();
        assert_eq!(rx.path(), RecvPath::Shm);
        let port = rx.local_addr().unwrap().port();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_sender", "--nocapture", "--test-threads=1"])
            .env("LUS_SHM_CHILD", format!("{port} {ds} {total}"));
        if env.is_empty() {
            cmd.env_remove(PATH_ENV);
        } else {
            cmd.env(PATH_ENV, env);
        }
        let child = Program::spawn(cmd, &format!("child_sender ({env:?})"));
        let mut buf = vec![0u8; 4 << 20];
        let mut got = Vec::new();
        let (mut gaps, mut paths) = (0, Vec::new());
        while got.len() < total {
            let r = rx.recv_block(&mut buf, Some(Duration::from_secs(20))).expect("the child's datagrams");
            got.extend_from_slice(&buf[..r.bytes]);
            gaps += r.gaps;
            if !paths.contains(&r.path) {
                paths.push(r.path);
            }
        }
        let out = child.finish(CHILD_LIMIT);
        assert!(out.ok(), "child: {}", out.describe("child_sender"));
        let text = &out.stdout;
        assert!(text.contains(&format!("path {want} ")), "{env:?}: child said: {text}");
        assert_eq!(gaps, 0);
        assert!(got == signal(total, 42), "{env:?}: bytes differ");
        if want == "shm" {
            assert_eq!(paths, [RecvPath::Shm], "{env:?}");
        } else {
            assert!(!paths.contains(&RecvPath::Shm), "{env:?}: {paths:?}");
        }
    }
}

/// The sender half of `shm_between_two_processes` (nothing when run by itself): blocks of
/// 1 MiB, with no waiting for the receiver (the ring's back-pressure paces it).
#[test]
fn child_sender() {
    let Ok(spec) = std::env::var("LUS_SHM_CHILD") else { return };
    let v: Vec<usize> = spec.split(' ').map(|s| s.parse().unwrap()).collect();
    let (port, ds, total) = (v[0] as u16, v[1], v[2]);
    let mut tx = StreamSender::connect(("127.0.0.1", port), SendOptions::new(ds).with_sequence_header()).unwrap();
    let data = signal(total, 42);
    let mut last = None;
    for c in data.chunks(1 << 20) {
        let r = tx.send_block(c).unwrap();
        assert_eq!(r.dropped, 0);
        if tx.path() != SendPath::Shm {
            // Kernel paths: stay within the receiver's socket buffer.
            thread::sleep(Duration::from_millis(5));
        }
        last = Some(r);
    }
    let r = last.unwrap();
    println!("path {} datagrams {} calls {}", r.path.name(), r.datagrams, r.system_calls);
}

const FIT: usize = 256;

#[test]
fn full_ring_drops_after_the_wait_and_the_receiver_sees_gaps() {
    let ds = 1000;
    let mut ro = RecvOptions::new(ds).with_sequence_header().with_path(RecvPath::Shm);
    ro.ring_capacity = 256 << 10;
    let mut rx = StreamReceiver::bind("127.0.0.1:0", ro).unwrap();
    let port = rx.local_addr().unwrap().port();
    let mut so = SendOptions::new(ds).with_sequence_header().with_path(SendPath::Shm);
    so.ring_wait = Duration::from_millis(30);
    let mut tx = StreamSender::connect(("127.0.0.1", port), so).unwrap();
    assert_eq!(tx.path(), SendPath::Shm);
    // 1000 datagrams of 1016 wire bytes (1024 in the ring) into 256 KiB: 256 fit.
    let block = signal(1000 * ds, 5);
    let t = Instant::now();
    let r = tx.send_block(&block).unwrap();
    let took = t.elapsed();
    assert_eq!(r.path, SendPath::Shm);
    assert_eq!(r.datagrams, FIT as u64, "{r:?}");
    assert_eq!(r.dropped, 1000 - FIT as u64, "{r:?}");
    assert_eq!(r.bytes, (FIT * ds) as u64);
    assert!(took >= Duration::from_millis(30) && took < Duration::from_secs(5), "{took:?}");
    assert_eq!(tx.sequence(), 1000, "dropped datagrams use their sequence numbers");
    // The receiver takes what fitted, in order.
    let mut buf = vec![0u8; 1 << 20];
    let got = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap();
    assert_eq!((got.bytes, got.datagrams, got.gaps, got.path), (FIT * ds, FIT as u64, 0, RecvPath::Shm));
    assert!(buf[..got.bytes] == block[..FIT * ds]);
    // The next block fits: the receiver counts the dropped ones as missing.
    let r = tx.send_block(&block[..10 * ds]).unwrap();
    assert_eq!((r.datagrams, r.dropped), (10, 0));
    let got = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap();
    assert_eq!((got.bytes, got.datagrams, got.gaps), (10 * ds, 10, 1000 - FIT as u64));
}

/// The receiver half of `receiver_killed_mid_stream`: binds with a small ring, says its port,
/// takes one block, then stops reading and waits to be killed.
#[test]
fn child_receiver() {
    let Ok(ds) = std::env::var("LUS_SHM_CHILD_RECV") else { return };
    let ds: usize = ds.parse().unwrap();
    let mut ro = RecvOptions::new(ds).with_path(RecvPath::Shm);
    ro.ring_capacity = 256 << 10;
    let mut rx = StreamReceiver::bind("127.0.0.1:0", ro).unwrap();
    println!("port {}", rx.local_addr().unwrap().port());
    let mut buf = vec![0u8; 1 << 20];
    let r = rx.recv_block(&mut buf, Some(Duration::from_secs(20))).unwrap();
    println!("got {} {}", r.bytes, r.path.name());
    thread::sleep(Duration::from_secs(60));
}

#[test]
fn receiver_killed_mid_stream_the_sender_falls_back_without_hanging() {
    let ds = 4000;
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_receiver", "--nocapture", "--test-threads=1"])
        .env("LUS_SHM_CHILD_RECV", ds.to_string());
    let mut child = Program::spawn(cmd, "child_receiver");
    // The harness's "test child_receiver ... " may stand in front.
    let l = child.stdout_line(CHILD_LIMIT, |l| l.contains("port ")).expect("the child's port");
    let port: u16 = l.split_once("port ").expect("port").1.trim().parse().unwrap();
    let path = ring_path(SocketAddr::from(([127, 0, 0, 1], port)));
    assert!(path.exists(), "the child published its ring");
    let mut so = SendOptions::new(ds).with_path(SendPath::Shm);
    // Long enough that only the receiver's death can end the wait.
    so.ring_wait = Duration::from_secs(30);
    let mut tx = StreamSender::connect(("127.0.0.1", port), so).unwrap();
    assert_eq!(tx.path(), SendPath::Shm, "{:?}", tx.ring_refusal());
    let block = signal(100 * ds, 1);
    assert_eq!(tx.send_block(&block).unwrap().path, SendPath::Shm);
    let l = child.stdout_line(CHILD_LIMIT, |l| l.contains("got ")).expect("the child's report");
    assert!(l.ends_with(" shm"), "{l}");
    // Kill the receiver while the sender waits for room in its full ring.
    let killer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        child.stop(libc::SIGKILL, CHILD_LIMIT)
    });
    let t = Instant::now();
    let big = signal(2000 * ds, 2);
    let r = tx.send_block(&big).expect("send_block after the receiver died");
    let took = t.elapsed();
    killer.join().unwrap();
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(r.datagrams + r.dropped, 2000, "{r:?}");
    assert_ne!(r.path, SendPath::Shm, "the rest went by the kernel: {r:?}");
    assert_ne!(tx.path(), SendPath::Shm);
    // And the stream goes on (to nobody, as UDP does) without an error or a wait.
    let t = Instant::now();
    let r = tx.send_block(&block).unwrap();
    assert_ne!(r.path, SendPath::Shm);
    assert!(t.elapsed() < Duration::from_secs(2));
    // The dead receiver's file is stale; a new receiver on that port replaces it.
    // (Unless another test took the freed port meanwhile.)
    if let Ok(fresh) = StreamReceiver::bind(("127.0.0.1", port), RecvOptions::new(ds).with_path(RecvPath::Shm)) {
        assert_eq!(fresh.path(), RecvPath::Shm);
    }
}

/// A valid ring file for `addr`, written by hand (as a hostile or stale one would be).
fn ring_bytes(addr: SocketAddr, capacity: u64) -> Vec<u8> {
    let mut h = vec![0u8; shm::HEADER_LEN];
    let put = |h: &mut Vec<u8>, off: usize, b: &[u8]| h[off..off + b.len()].copy_from_slice(b);
    put(&mut h, shm::OFF_MAGIC, &shm::MAGIC.to_ne_bytes());
    put(&mut h, shm::OFF_VERSION, &shm::VERSION.to_ne_bytes());
    put(&mut h, shm::OFF_HEADER_LEN, &(shm::HEADER_LEN as u32).to_ne_bytes());
    put(&mut h, shm::OFF_CAPACITY, &capacity.to_ne_bytes());
    put(&mut h, shm::OFF_PID, &std::process::id().to_ne_bytes());
    // SAFETY: geteuid has no preconditions.
    put(&mut h, shm::OFF_UID, &unsafe { libc::geteuid() }.to_ne_bytes());
    let ns = std::fs::metadata("/proc/thread-self/ns/net").map_or(0, |m| std::os::unix::fs::MetadataExt::ino(&m));
    put(&mut h, shm::OFF_NETNS, &ns.to_ne_bytes());
    put(&mut h, shm::OFF_FAMILY, &4u16.to_ne_bytes());
    put(&mut h, shm::OFF_PORT, &addr.port().to_ne_bytes());
    h
}

fn write_ring(addr: SocketAddr, bytes: &[u8], len: u64, mode: u32) -> std::fs::File {
    let path = ring_path(addr);
    let _ = std::fs::remove_file(&path);
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(&path).unwrap();
    f.set_permissions(std::fs::Permissions::from_mode(mode)).unwrap();
    f.set_len(len).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f
}

/// Holds an open-file-description write lock on byte 0, as a live receiver does.
fn hold_owner_lock(f: &std::fs::File) {
    // SAFETY: plain data, all-zero valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = 0;
    fl.l_len = 1;
    // SAFETY: a valid fd and flock; F_OFD_SETLK (37) only reads it.
    let rc = unsafe { libc::fcntl(f.as_raw_fd(), 37, &mut fl) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

/// With the given ring file at a plain UDP socket's port, a sender on the shm path must fall
/// back to UDP, and the plain socket must get exactly the ordinary datagrams.
fn falls_back(what: &str, make: impl FnOnce(SocketAddr) -> Option<std::fs::File>) {
    let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let addr = plain.local_addr().unwrap();
    let keep = make(addr);
    let mut so = SendOptions::new(1000).with_path(SendPath::Shm);
    so.sequence_header = true;
    so.stream_id = Some(7);
    let mut tx = StreamSender::connect(addr, so).unwrap();
    assert_ne!(tx.path(), SendPath::Shm, "{what}: the sender took the ring");
    let refusal = tx.ring_refusal().unwrap_or_default();
    eprintln!("{what}: {refusal}");
    let block = signal(5 * 1000, 9);
    let r = tx.send_block(&block).unwrap();
    assert_ne!(r.path, SendPath::Shm, "{what}");
    let mut buf = [0u8; 2048];
    for i in 0..5usize {
        let n = plain.recv(&mut buf).unwrap();
        assert_eq!(n, 1016, "{what}: datagram {i}");
        assert_eq!(&buf[..4], b"LUS\x01");
        assert_eq!(&buf[8..16], &(i as u64).to_be_bytes());
        assert_eq!(&buf[16..n], &block[i * 1000..(i + 1) * 1000], "{what}: datagram {i}");
    }
    plain.set_nonblocking(true).unwrap();
    assert_eq!(plain.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock, "{what}: a datagram too many");
    drop(keep);
    let _ = std::fs::remove_file(ring_path(addr));
}

const CAP: u64 = 256 << 10;

#[test]
fn hostile_ring_files_make_the_sender_fall_back_to_udp() {
    let size = shm::HEADER_LEN as u64 + CAP;
    falls_back("no ring", |_| None);
    falls_back("wrong magic", |a| {
        let mut h = ring_bytes(a, CAP);
        h[0] ^= 0xff;
        let f = write_ring(a, &h, size, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("wrong version", |a| {
        let mut h = ring_bytes(a, CAP);
        h[shm::OFF_VERSION] = 9;
        let f = write_ring(a, &h, size, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("truncated file", |a| {
        let h = ring_bytes(a, CAP);
        let f = write_ring(a, &h[..100], 100, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("capacity larger than the file", |a| {
        let h = ring_bytes(a, 1 << 30);
        let f = write_ring(a, &h, size, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("huge capacity", |a| {
        let h = ring_bytes(a, u64::MAX / 2 + 1);
        let f = write_ring(a, &h, size, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("capacity not a power of two", |a| {
        let h = ring_bytes(a, CAP + 8);
        let f = write_ring(a, &h, size + 8, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("head beyond the capacity", |a| {
        let mut h = ring_bytes(a, CAP);
        h[shm::OFF_HEAD..shm::OFF_HEAD + 8].copy_from_slice(&(CAP * 3).to_ne_bytes());
        let f = write_ring(a, &h, size, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("another port", |a| {
        let mut h = ring_bytes(a, CAP);
        h[shm::OFF_PORT..shm::OFF_PORT + 2].copy_from_slice(&a.port().wrapping_add(1).to_ne_bytes());
        let f = write_ring(a, &h, size, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("another owner uid in the header", |a| {
        let mut h = ring_bytes(a, CAP);
        h[shm::OFF_UID..shm::OFF_UID + 4].copy_from_slice(&12345u32.to_ne_bytes());
        let f = write_ring(a, &h, size, 0o600);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("open to other users", |a| {
        let f = write_ring(a, &ring_bytes(a, CAP), size, 0o644);
        hold_owner_lock(&f);
        Some(f)
    });
    falls_back("owner gone (no lock held)", |a| Some(write_ring(a, &ring_bytes(a, CAP), size, 0o600)));
    let target = std::env::temp_dir().join(format!("lus-ring-target-{}", std::process::id()));
    falls_back("a symbolic link", |a| {
        let mut h = ring_bytes(a, CAP);
        h.resize(size as usize, 0);
        std::fs::write(&target, h).unwrap();
        let _ = std::fs::remove_file(ring_path(a));
        std::os::unix::fs::symlink(&target, ring_path(a)).unwrap();
        None
    });
    let _ = std::fs::remove_file(&target);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        falls_back("a file of another user", |a| {
            let f = write_ring(a, &ring_bytes(a, CAP), size, 0o600);
            hold_owner_lock(&f);
            std::os::unix::fs::fchown(&f, Some(65534), Some(65534)).unwrap();
            Some(f)
        });
    }
}

/// A sender started before its receiver, or whose receiver restarts, finds the ring once it
/// is there (it looks every 200 ms); in between its datagrams go by UDP.
#[test]
fn a_sender_finds_a_ring_published_later_and_a_restarted_one() {
    // A plain socket holds the port while there is no receiver (its datagrams land there).
    let mut hold = Some(UdpSocket::bind("127.0.0.1:0").unwrap());
    let port = hold.as_ref().unwrap().local_addr().unwrap().port();
    let mut tx = shm_send(port, 1000, true);
    assert_ne!(tx.path(), SendPath::Shm);
    assert_ne!(tx.send_block(&[1u8; 3000]).unwrap().path, SendPath::Shm);
    for round in 0..2 {
        let mut ro = RecvOptions::new(1000).with_sequence_header().with_path(RecvPath::Shm);
        ro.idle = Duration::from_millis(20);
        drop(hold.take());
        let Ok(mut rx) = StreamReceiver::bind(("127.0.0.1", port), ro) else {
            eprintln!("the port was taken meanwhile: nothing more to test");
            return;
        };
        let t = Instant::now();
        while tx.path() != SendPath::Shm {
            assert!(t.elapsed() < Duration::from_secs(5), "round {round}: no ring found");
            thread::sleep(Duration::from_millis(50));
            tx.send_block(&[2u8; 1000]).unwrap();
        }
        let r = tx.send_block(&[3u8; 5000]).unwrap();
        assert_eq!((r.path, r.datagrams), (SendPath::Shm, 5));
        let mut buf = vec![0u8; 1 << 16];
        let mut threes = 0;
        let t = Instant::now();
        while threes < 5000 && t.elapsed() < Duration::from_secs(5) {
            if let Ok(r) = rx.recv_block(&mut buf, Some(Duration::from_millis(200))) {
                threes += buf[..r.bytes].iter().filter(|&&b| b == 3).count();
            }
        }
        assert_eq!(threes, 5000, "round {round}");
        // The receiver goes; the sender notices at its next block and falls back.
        drop(rx);
        hold = UdpSocket::bind(("127.0.0.1", port)).ok();
        assert_ne!(tx.send_block(&[4u8; 1000]).unwrap().path, SendPath::Shm, "round {round}");
    }
}

/// IPv6: the ring is per family; `::1` works as 127.0.0.1 does.
#[test]
fn shm_over_ipv6_loopback() {
    let Ok(mut rx) = StreamReceiver::bind("[::1]:0", RecvOptions::new(2000).with_path(RecvPath::Shm)) else {
        eprintln!("no IPv6 loopback here");
        return;
    };
    let addr = rx.local_addr().unwrap();
    assert_eq!(rx.path(), RecvPath::Shm);
    assert!(ring_path(addr).to_string_lossy().contains("-v6-"));
    let mut tx = StreamSender::connect(addr, SendOptions::new(2000).with_path(SendPath::Shm)).unwrap();
    assert_eq!(tx.path(), SendPath::Shm, "{:?}", tx.ring_refusal());
    let data = signal(50_000, 6);
    tx.send_block(&data).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let r = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap();
    assert_eq!((r.bytes, r.path), (50_000, RecvPath::Shm));
    assert!(buf[..r.bytes] == data);
}

/// Rings left by receivers that died (lock not held), and half-made ones of dead makers, are
/// removed by the next receiver that publishes one; live ones are not.
#[test]
fn stale_rings_are_swept() {
    let live = shm_recv(1000, false);
    let live_path = ring_path(live.local_addr().unwrap());
    // A port no one holds, for a stale ring and a stale half-made one (pid 0x7fff_fff0: none).
    let free = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let stale = ring_path(free);
    let half = std::path::PathBuf::from(format!("{}.{}.{:x}", stale.display(), 0x7fff_fff0, 1));
    for p in [&stale, &half] {
        // create_new: never truncate a ring another test's receiver may have made meanwhile.
        let Ok(f) = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(p) else {
            eprintln!("{} exists: the port was taken again, nothing to test", p.display());
            return;
        };
        f.set_len(shm::HEADER_LEN as u64 + CAP).unwrap();
    }
    let _other = shm_recv(1000, false);
    assert!(!stale.exists() && !half.exists(), "swept");
    assert!(live_path.exists(), "a live receiver's ring stays");
    drop(live);
    assert!(!live_path.exists(), "removed when its receiver is dropped");
}

/// Garbage records written into a live receiver's ring (as a hostile sender of the same user
/// could): the receiver must not read outside the ring, gives it up, and UDP goes on.
#[test]
fn hostile_records_make_the_receiver_give_the_ring_up() {
    for (what, len, kind) in [("huge length", u32::MAX, 0u32), ("length past the head", 65000, 0), ("bad kind", 8, 7)] {
        let mut ro = RecvOptions::new(1000).with_path(RecvPath::Shm);
        ro.ring_capacity = CAP as usize;
        let mut rx = StreamReceiver::bind("127.0.0.1:0", ro).unwrap();
        let addr = rx.local_addr().unwrap();
        let f = std::fs::OpenOptions::new().read(true).write(true).open(ring_path(addr)).unwrap();
        // One record at position 0, and a head 64 bytes on.
        let mut rec = len.to_ne_bytes().to_vec();
        rec.extend_from_slice(&kind.to_ne_bytes());
        f.write_all_at(&rec, shm::HEADER_LEN as u64).unwrap();
        f.write_all_at(&64u64.to_ne_bytes(), shm::OFF_HEAD as u64).unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let r = rx.try_recv_block(&mut buf).unwrap();
        assert_eq!((r.bytes, r.datagrams), (0, 0), "{what}");
        assert!(r.rejected >= 1, "{what}: {r:?}");
        assert_ne!(rx.path(), RecvPath::Shm, "{what}: the ring is given up");
        assert!(!ring_path(addr).exists(), "{what}: its name is removed");
        // UDP still works, from the library (which finds no ring now) and from a plain peer.
        let mut tx = StreamSender::connect(addr, SendOptions::new(1000)).unwrap();
        assert_ne!(tx.path(), SendPath::Shm);
        tx.send_block(&[1u8; 3000]).unwrap();
        UdpSocket::bind("127.0.0.1:0").unwrap().send_to(&[2u8; 500], addr).unwrap();
        let mut total = 0;
        while total < 3500 {
            total += rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap().bytes;
        }
        assert_eq!(total, 3500, "{what}");
    }
}

/// A head that claims more than the ring holds: given up at once.
#[test]
fn a_head_beyond_the_ring_is_corrupt() {
    let mut ro = RecvOptions::new(1000).with_path(RecvPath::Shm);
    ro.ring_capacity = CAP as usize;
    let mut rx = StreamReceiver::bind("127.0.0.1:0", ro).unwrap();
    let addr = rx.local_addr().unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(ring_path(addr)).unwrap();
    f.write_all_at(&(CAP * 5).to_ne_bytes(), shm::OFF_HEAD as u64).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let r = rx.try_recv_block(&mut buf).unwrap();
    assert_eq!((r.bytes, r.rejected), (0, 1));
    assert_ne!(rx.path(), RecvPath::Shm);
}

/// A plain UDP sender and a library sender (over the ring) to one receiver: both arrive.
#[test]
fn plain_sender_and_ring_sender_together() {
    let mut rx = shm_recv(1000, false);
    let addr = rx.local_addr().unwrap();
    let mut tx = shm_send(addr.port(), 1000, false);
    assert_eq!(tx.path(), SendPath::Shm);
    let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
    plain.send_to(&[9u8; 1000], addr).unwrap();
    tx.send_block(&[1u8; 5000]).unwrap();
    plain.send_to(&[9u8; 1000], addr).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let (mut ones, mut nines) = (0, 0);
    let t = Instant::now();
    while (ones < 5000 || nines < 2000) && t.elapsed() < Duration::from_secs(5) {
        let Ok(r) = rx.recv_block(&mut buf, Some(Duration::from_secs(1))) else { continue };
        ones += buf[..r.bytes].iter().filter(|&&b| b == 1).count();
        nines += buf[..r.bytes].iter().filter(|&&b| b == 9).count();
    }
    assert_eq!((ones, nines), (5000, 2000));
    // A second library sender does not get the ring (one producer) and goes by UDP.
    let tx2 = shm_send(addr.port(), 1000, false);
    assert_ne!(tx2.path(), SendPath::Shm);
    assert!(tx2.ring_refusal().unwrap().contains("OtherSender"));
}

/// A receiver that polls its socket: data in the ring makes the socket readable (doorbell),
/// and the doorbell itself is never delivered.
#[test]
fn polling_the_socket_sees_ring_data() {
    let mut rx = shm_recv(1000, true);
    let port = rx.local_addr().unwrap().port();
    let mut buf = vec![0u8; 1 << 16];
    assert_eq!(rx.try_recv_block(&mut buf).unwrap().bytes, 0);
    let mut tx = shm_send(port, 1000, true);
    tx.send_block(&[3u8; 2500]).unwrap();
    let mut pfd = libc::pollfd { fd: rx.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, 5000) };
    assert_eq!(n, 1, "the socket became readable");
    let r = rx.try_recv_block(&mut buf).unwrap();
    assert_eq!((r.bytes, r.datagrams, r.rejected, r.path), (2500, 3, 0, RecvPath::Shm));
    assert_eq!(rx.try_recv_block(&mut buf).unwrap().bytes, 0);
}
