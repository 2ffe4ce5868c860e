//! Round trips over loopback: every path pair (forced in the options, and once through
//! LANES_UDPSTREAM_PATH in a child process), datagram sizes 1 KiB to 64 KiB less the header,
//! byte-exact; plain UDP peers at either end; gaps; bad input. The sender waits for the
//! receiver to have taken each chunk before the next, so no test depends on socket buffer
//! sizes or timing (none asserts a speed).

mod common;

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::signal;
use lanes_testkit::program::Program;
use lanes_udpstream::header::HEADER_LEN;
use lanes_udpstream::{
    RecvOptions, RecvPath, SendOptions, SendPath, StreamReceiver, StreamSender, MAX_UDP_PAYLOAD, PATH_ENV,
};

struct Received {
    data: Vec<u8>,
    datagrams: u64,
    gaps: u64,
    reordered: u64,
    rejected: u64,
    paths: Vec<RecvPath>,
}

/// Receives until `total` bytes came (or 10 s of silence), counting into `progress`.
fn receive_all(mut rx: StreamReceiver, total: usize, buf_len: usize, progress: Arc<AtomicUsize>) -> Received {
    let mut out = Received { data: Vec::new(), datagrams: 0, gaps: 0, reordered: 0, rejected: 0, paths: Vec::new() };
    let mut buf = vec![0u8; buf_len];
    while out.data.len() < total {
        let r = match rx.recv_block(&mut buf, Some(Duration::from_secs(10))) {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::TimedOut => break,
            Err(e) => panic!("recv_block: {e}"),
        };
        out.data.extend_from_slice(&buf[..r.bytes]);
        out.datagrams += r.datagrams;
        out.gaps += r.gaps;
        out.reordered += r.reordered;
        out.rejected += r.rejected;
        if !out.paths.contains(&r.path) {
            out.paths.push(r.path);
        }
        progress.store(out.data.len(), Ordering::Release);
    }
    out
}

fn wait_for(progress: &AtomicUsize, bytes: usize) {
    let t = Instant::now();
    while progress.load(Ordering::Acquire) < bytes {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the receiver took {} of {bytes} bytes",
            progress.load(Ordering::Acquire)
        );
        thread::sleep(Duration::from_micros(200));
    }
}

/// Sends `data` in chunks of `chunk` bytes, each a `send_block`, waiting for the receiver
/// after each. Returns the sender's total system calls and datagrams.
fn send_all(tx: &mut StreamSender, data: &[u8], chunk: usize, progress: &AtomicUsize) -> (u64, u64) {
    let (mut calls, mut dgrams) = (0, 0);
    let mut sent = 0;
    for c in data.chunks(chunk) {
        let r = tx.send_block(c).expect("send_block");
        assert_eq!(r.bytes as usize, c.len());
        assert_eq!(r.datagrams as usize, c.len().div_ceil(tx.datagram_size()));
        calls += r.system_calls;
        dgrams += r.datagrams;
        sent += c.len();
        wait_for(progress, sent);
    }
    (calls, dgrams)
}

fn round_trip(send: SendPath, recv: RecvPath, ds: usize, header: bool, buf_len: usize) {
    let total = 40 * ds + 777;
    let data = signal(total, ds as u64);
    let mut ro = RecvOptions::new(ds).with_path(recv);
    ro.sequence_header = header;
    let rx = StreamReceiver::bind("127.0.0.1:0", ro).expect("bind");
    let port = rx.local_addr().unwrap().port();
    let progress = Arc::new(AtomicUsize::new(0));
    let p2 = progress.clone();
    let h = thread::spawn(move || receive_all(rx, total, buf_len, p2));
    let mut so = SendOptions::new(ds).with_path(send);
    so.sequence_header = header;
    let mut tx = StreamSender::connect(("127.0.0.1", port), so).expect("connect");
    // Chunks that are not a multiple of the datagram size (every block ends short), small
    // enough for a receive buffer capped by net.core.rmem_max (non-root).
    let (calls, dgrams) = send_all(&mut tx, &data, (8 * ds).min(192 << 10) + 333, &progress);
    let got = h.join().expect("receiver");
    let what =
        format!("send {send:?} (used {:?}), recv {recv:?} (used {:?}), ds {ds}, header {header}", tx.path(), got.paths);
    eprintln!("{what}: {calls} send calls for {dgrams} datagrams");
    assert_eq!(got.data.len(), data.len(), "{what}: length");
    assert!(got.data == data, "{what}: bytes differ");
    assert_eq!(got.datagrams, dgrams, "{what}: datagrams");
    assert_eq!((got.gaps, got.reordered, got.rejected), (0, 0, 0), "{what}: gaps, reordered, rejected");
    if tx.path() == SendPath::Plain {
        assert_eq!(calls, dgrams, "{what}: one call per datagram");
    } else {
        assert!(calls < dgrams || dgrams <= 5, "{what}: {calls} calls for {dgrams} datagrams");
    }
}

const SIZES: [usize; 5] = [1024, 1472, 4096, 16384, MAX_UDP_PAYLOAD - HEADER_LEN];

#[test]
fn fast_paths_round_trip_every_size() {
    for ds in SIZES {
        round_trip(SendPath::Gso, RecvPath::Gro, ds, true, 1 << 20);
        round_trip(SendPath::Gso, RecvPath::Gro, ds, false, 1 << 20);
    }
}

/// io_uring where the kernel allows it (else the paths fall back to GSO/GRO: same bytes).
#[test]
fn uring_paths_round_trip_every_size() {
    for ds in SIZES {
        round_trip(SendPath::Uring, RecvPath::Uring, ds, true, 1 << 20);
        round_trip(SendPath::Uring, RecvPath::Uring, ds, false, 1 << 20);
    }
    // Against the other kernel paths, both ways.
    round_trip(SendPath::Uring, RecvPath::Mmsg, 1400, true, 1 << 20);
    round_trip(SendPath::Gso, RecvPath::Uring, 1400, true, 1 << 20);
    round_trip(SendPath::Plain, RecvPath::Uring, 4000, false, 1 << 20);
}

#[test]
fn mmsg_paths_round_trip_every_size() {
    for ds in SIZES {
        round_trip(SendPath::Mmsg, RecvPath::Mmsg, ds, true, 1 << 20);
        round_trip(SendPath::Mmsg, RecvPath::Mmsg, ds, false, 1 << 20);
    }
}

#[test]
fn plain_paths_round_trip_every_size() {
    for ds in SIZES {
        round_trip(SendPath::Plain, RecvPath::Plain, ds, true, 1 << 20);
        round_trip(SendPath::Plain, RecvPath::Plain, ds, false, 1 << 20);
    }
}

#[test]
fn mixed_paths_round_trip() {
    for ds in [1024, 8000] {
        for header in [true, false] {
            round_trip(SendPath::Gso, RecvPath::Mmsg, ds, header, 1 << 20);
            round_trip(SendPath::Gso, RecvPath::Plain, ds, header, 1 << 20);
            round_trip(SendPath::Mmsg, RecvPath::Gro, ds, header, 1 << 20);
            round_trip(SendPath::Plain, RecvPath::Gro, ds, header, 1 << 20);
        }
    }
}

#[test]
fn gro_into_small_buffers_keeps_the_rest_for_the_next_call() {
    // Less than one 64 KiB slot of room: super-datagrams go through the scratch buffer and
    // what does not fit waits for the next call.
    for header in [true, false] {
        round_trip(SendPath::Gso, RecvPath::Gro, 1024, header, 3 * 1024 + 100);
        round_trip(SendPath::Gso, RecvPath::Gro, 4096, header, 4096);
    }
}

#[test]
fn plain_udp_receiver_gets_ordinary_datagrams() {
    // Shm: the sender looks for a ring, finds none (a plain receiver publishes none) and
    // sends ordinary UDP, with no doorbell or other extra datagram.
    for (path, header) in [
        (SendPath::Gso, false),
        (SendPath::Gso, true),
        (SendPath::Mmsg, false),
        (SendPath::Shm, true),
        (SendPath::Shm, false),
    ] {
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let port = plain.local_addr().unwrap().port();
        let mut so = SendOptions::new(1000).with_path(path);
        so.sequence_header = header;
        so.stream_id = Some(0xabcd_0123);
        let mut tx = StreamSender::connect(("127.0.0.1", port), so).unwrap();
        let block = signal(10 * 1000 + 10, 7);
        let r = tx.send_block(&block).unwrap();
        assert_eq!(r.datagrams, 11);
        let mut buf = [0u8; 2048];
        for i in 0..11usize {
            let n = plain.recv(&mut buf).unwrap();
            let payload = if header {
                assert_eq!(&buf[..4], b"LUS\x01");
                assert_eq!(&buf[4..8], &0xabcd_0123u32.to_be_bytes());
                assert_eq!(&buf[8..16], &(i as u64).to_be_bytes());
                &buf[16..n]
            } else {
                &buf[..n]
            };
            let want = &block[i * 1000..((i + 1) * 1000).min(block.len())];
            assert_eq!(payload, want, "{path:?} datagram {i}");
        }
        assert_ne!(tx.path(), SendPath::Shm);
        plain.set_nonblocking(true).unwrap();
        assert_eq!(plain.recv(&mut buf).unwrap_err().kind(), ErrorKind::WouldBlock, "{path:?}: one datagram too many");
    }
}

#[test]
fn plain_udp_sender_fills_the_buffer() {
    // Shm: the receiver publishes a ring, which a plain sender knows nothing of.
    for path in [RecvPath::Gro, RecvPath::Mmsg, RecvPath::Plain, RecvPath::Shm] {
        let mut rx = StreamReceiver::bind("127.0.0.1:0", RecvOptions::new(1200).with_path(path)).unwrap();
        let addr = rx.local_addr().unwrap();
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        let data = signal(20 * 1200, 3);
        for d in data.chunks(1200) {
            plain.send_to(d, addr).unwrap();
        }
        // 20 datagrams are queued; a buffer of 16.5 datagrams takes 16.
        let mut buf = vec![0u8; 16 * 1200 + 600];
        let r = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap();
        assert_eq!((r.bytes, r.datagrams), (16 * 1200, 16), "{path:?}");
        assert_eq!(&buf[..r.bytes], &data[..16 * 1200]);
        let r2 = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap();
        assert_eq!((r2.bytes, r2.datagrams), (4 * 1200, 4), "{path:?}");
        assert_eq!(&buf[..r2.bytes], &data[16 * 1200..]);
        // Polled: nothing more.
        let r3 = rx.try_recv_block(&mut buf).unwrap();
        assert_eq!(r3.bytes, 0);
        // Blocking with a timeout and nothing coming.
        let e = rx.recv_block(&mut buf, Some(Duration::from_millis(20))).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
    }
}

#[test]
fn header_receiver_rejects_headerless_datagrams() {
    let mut rx = StreamReceiver::bind("127.0.0.1:0", RecvOptions::new(1000).with_sequence_header()).unwrap();
    let addr = rx.local_addr().unwrap();
    let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
    plain.send_to(&[7u8; 500], addr).unwrap();
    plain.send_to(&[7u8; 5], addr).unwrap();
    thread::sleep(Duration::from_millis(20));
    let mut buf = vec![0u8; 10_000];
    let r = rx.try_recv_block(&mut buf).unwrap();
    assert_eq!((r.bytes, r.datagrams, r.rejected), (0, 0, 2));
}

#[test]
fn skipped_sequence_numbers_are_gaps() {
    for (send, recv) in
        [(SendPath::Gso, RecvPath::Gro), (SendPath::Mmsg, RecvPath::Mmsg), (SendPath::Plain, RecvPath::Plain)]
    {
        let mut rx =
            StreamReceiver::bind("127.0.0.1:0", RecvOptions::new(1024).with_sequence_header().with_path(recv)).unwrap();
        let port = rx.local_addr().unwrap().port();
        let mut tx =
            StreamSender::connect(("127.0.0.1", port), SendOptions::new(1024).with_sequence_header().with_path(send))
                .unwrap();
        let a = signal(10 * 1024, 1);
        let b = signal(10 * 1024, 2);
        tx.send_block(&a).unwrap();
        // Datagrams 10, 11 and 12 "lost".
        tx.set_sequence(tx.sequence() + 3);
        tx.send_block(&b).unwrap();
        let mut buf = vec![0u8; 20 * 1024];
        let mut got = Vec::new();
        let (mut gaps, mut reordered) = (0, 0);
        let mut next = None;
        while got.len() < 20 * 1024 {
            let r = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap();
            got.extend_from_slice(&buf[..r.bytes]);
            gaps += r.gaps;
            reordered += r.reordered;
            next = r.next_sequence;
            assert_eq!(r.stream_id, Some(tx.stream_id()));
        }
        assert_eq!((gaps, reordered), (3, 0), "{send:?}/{recv:?}");
        assert_eq!(next, Some(23));
        assert_eq!(&got[..a.len()], &a[..]);
        assert_eq!(&got[a.len()..], &b[..]);
        // A late datagram (sequence 11) is counted as reordered.
        tx.set_sequence(11);
        tx.send_block(&a[..100]).unwrap();
        let r = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).unwrap();
        assert_eq!((r.bytes, r.reordered, r.gaps), (100, 1, 0));
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    for ds in [0, MAX_UDP_PAYLOAD + 1] {
        let e = StreamSender::connect("127.0.0.1:9", SendOptions::new(ds)).err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("datagram size"), "{e}");
        let e = StreamReceiver::bind("127.0.0.1:0", RecvOptions::new(ds)).err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    // The largest payload fits without the header, not with it.
    assert!(StreamSender::connect("127.0.0.1:9", SendOptions::new(MAX_UDP_PAYLOAD)).is_ok());
    let e =
        StreamSender::connect("127.0.0.1:9", SendOptions::new(MAX_UDP_PAYLOAD).with_sequence_header()).err().unwrap();
    assert!(e.to_string().contains("sequence header"), "{e}");
    let mut rx = StreamReceiver::bind("127.0.0.1:0", RecvOptions::new(4096)).unwrap();
    let mut small = vec![0u8; 4095];
    let e = rx.recv_block(&mut small, Some(Duration::from_millis(1))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("cannot take one datagram"), "{e}");
    assert_eq!(rx.try_recv_block(&mut small).unwrap_err().kind(), ErrorKind::InvalidInput);
}

/// How long a child process (this binary re-run) may take, at most.
const CHILD_LIMIT: Duration = Duration::from_secs(60);

/// Sender and receiver as two processes: this test binary re-run as the sender, with the
/// path forced by LANES_UDPSTREAM_PATH (the receiver's is forced the same way in its
/// options, since the variable is read in the child only).
#[test]
fn two_processes_each_path_by_environment() {
    for (env, recv) in
        [("plain", RecvPath::Plain), ("mmsg", RecvPath::Mmsg), ("gso", RecvPath::Gro), ("uring", RecvPath::Uring)]
    {
        let ds = 1400;
        let total = 64 * ds;
        let mut rx =
            StreamReceiver::bind("127.0.0.1:0", RecvOptions::new(ds).with_sequence_header().with_path(recv)).unwrap();
        let port = rx.local_addr().unwrap().port();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "child_sender", "--nocapture", "--test-threads=1"])
            .env("LUS_TEST_CHILD", format!("{port} {ds} {total}"))
            .env(PATH_ENV, env);
        let child = Program::spawn(cmd, &format!("child_sender ({env})"));
        let mut buf = vec![0u8; total];
        let mut got = Vec::new();
        let mut gaps = 0;
        while got.len() < total {
            let r = rx.recv_block(&mut buf, Some(Duration::from_secs(20))).expect("the child's datagrams");
            got.extend_from_slice(&buf[..r.bytes]);
            gaps += r.gaps;
        }
        let out = child.finish(CHILD_LIMIT);
        assert!(out.ok(), "child: {}", out.describe("child_sender"));
        let text = &out.stdout;
        let want = match env {
            "gso" => "path gso",
            other => &format!("path {other}"),
        };
        // io_uring refused: its fall-back.
        assert!(text.contains(want) || (env == "uring" && text.contains("path gso")), "child said: {text}");
        assert_eq!(gaps, 0);
        assert!(got == signal(total, 99), "{env}: bytes differ");
    }
}

/// The sender half of `two_processes_each_path_by_environment` (does nothing when run by
/// itself).
#[test]
fn child_sender() {
    let Ok(spec) = std::env::var("LUS_TEST_CHILD") else { return };
    let v: Vec<usize> = spec.split(' ').map(|s| s.parse().unwrap()).collect();
    let (port, ds, total) = (v[0] as u16, v[1], v[2]);
    let mut tx = StreamSender::connect(("127.0.0.1", port), SendOptions::new(ds).with_sequence_header()).unwrap();
    // One block of 64 datagrams: well within any receive buffer.
    let r = tx.send_block(&signal(total, 99)).unwrap();
    println!("path {} datagrams {} calls {}", r.path.name(), r.datagrams, r.system_calls);
}

/// `struct ifreq`: the interface name, then a union (flags: a short; MTU: an int).
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: [u8; 24],
}

/// In a new network namespace (this thread only): loopback up with `mtu`.
fn private_loopback(mtu: i32) -> Result<(), String> {
    // SAFETY: unshare(CLONE_NEWNET) moves only the calling thread, a fresh test thread
    // that no one else uses, into a new network namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!("unshare(CLONE_NEWNET): {}", std::io::Error::last_os_error()));
    }
    let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    let mut req = IfReq { name: [0; 16], data: [0; 24] };
    req.name[..2].copy_from_slice(b"lo");
    req.data[..2].copy_from_slice(&((libc::IFF_UP | libc::IFF_RUNNING) as i16).to_ne_bytes());
    // SAFETY: a valid socket and a properly sized ifreq, alive for the call.
    if unsafe {
        libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&s), 0x8914 /* SIOCSIFFLAGS */, &mut req)
    } != 0
    {
        return Err(format!("SIOCSIFFLAGS: {}", std::io::Error::last_os_error()));
    }
    req.data = [0; 24];
    req.data[..4].copy_from_slice(&mtu.to_ne_bytes());
    // SAFETY: as above.
    if unsafe {
        libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&s), 0x8922 /* SIOCSIFMTU */, &mut req)
    } != 0
    {
        return Err(format!("SIOCSIFMTU: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// GSO refused for segments larger than the path MTU: the sender falls back to sendmmsg in
/// the middle of its first block and loses nothing (the datagrams are IP-fragmented).
/// Within the MTU, GSO stays. Needs root (a private network namespace); skipped otherwise.
#[test]
fn gso_falls_back_when_segments_exceed_the_mtu() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root for a private network namespace");
        return;
    }
    thread::spawn(|| {
        if let Err(e) = private_loopback(1500) {
            eprintln!("skipped: {e}");
            return;
        }
        for (ds, want) in [(4096, SendPath::Mmsg), (1400, SendPath::Gso)] {
            let mut rx = StreamReceiver::bind(
                "127.0.0.1:0",
                RecvOptions::new(ds).with_sequence_header().with_path(RecvPath::Gro),
            )
            .unwrap();
            let port = rx.local_addr().unwrap().port();
            let mut tx = StreamSender::connect(
                ("127.0.0.1", port),
                SendOptions::new(ds).with_sequence_header().with_path(SendPath::Gso),
            )
            .unwrap();
            assert_eq!(tx.path(), SendPath::Gso, "the probe finds GSO");
            let data = signal(30 * ds, 5);
            let r = tx.send_block(&data).unwrap();
            assert_eq!((r.path, tx.path(), r.datagrams), (want, want, 30), "ds {ds}");
            let mut buf = vec![0u8; 30 * ds];
            let mut got = Vec::new();
            let mut gaps = 0;
            while got.len() < data.len() {
                let rep = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).expect("the datagrams");
                got.extend_from_slice(&buf[..rep.bytes]);
                gaps += rep.gaps;
            }
            assert_eq!(gaps, 0, "ds {ds}");
            assert!(got == data, "ds {ds}: bytes differ");
        }
    })
    .join()
    .expect("the namespace thread");
}

/// IPv6 loopback, where the machine has it (skipped otherwise).
#[test]
fn ipv6_round_trip() {
    let Ok(probe) = UdpSocket::bind("[::1]:0") else {
        eprintln!("skipped: no IPv6 loopback");
        return;
    };
    drop(probe);
    for (send, recv) in [(SendPath::Gso, RecvPath::Gro), (SendPath::Mmsg, RecvPath::Mmsg)] {
        let mut rx =
            StreamReceiver::bind("[::1]:0", RecvOptions::new(2000).with_sequence_header().with_path(recv)).unwrap();
        let port = rx.local_addr().unwrap().port();
        let mut tx =
            StreamSender::connect(("::1", port), SendOptions::new(2000).with_sequence_header().with_path(send))
                .unwrap();
        let data = signal(50 * 2000 + 1, 6);
        let r = tx.send_block(&data).unwrap();
        assert_eq!(r.datagrams, 51);
        let mut buf = vec![0u8; 1 << 20];
        let mut got = Vec::new();
        while got.len() < data.len() {
            let rep = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).expect("the datagrams");
            assert_eq!(rep.gaps, 0);
            got.extend_from_slice(&buf[..rep.bytes]);
        }
        assert!(got == data, "{send:?}/{recv:?}: bytes differ");
    }
}

/// A receiver sized for the largest datagram takes a stream of small ones, coalesced by GRO
/// into super-datagrams, cut back into datagrams by the segment size the kernel reports.
#[test]
fn receiver_for_large_datagrams_takes_small_ones() {
    for header in [true, false] {
        for recv in [RecvPath::Gro, RecvPath::Mmsg] {
            let max = MAX_UDP_PAYLOAD - if header { HEADER_LEN } else { 0 };
            let mut ro = RecvOptions::new(max).with_path(recv);
            ro.sequence_header = header;
            let mut rx = StreamReceiver::bind("127.0.0.1:0", ro).unwrap();
            let port = rx.local_addr().unwrap().port();
            let mut so = SendOptions::new(1000).with_path(SendPath::Gso);
            so.sequence_header = header;
            let mut tx = StreamSender::connect(("127.0.0.1", port), so).unwrap();
            let data = signal(100 * 1000 + 5, 8);
            let sent = tx.send_block(&data).unwrap();
            let mut buf = vec![0u8; 1 << 20];
            let (mut got, mut dgrams) = (Vec::new(), 0);
            while got.len() < data.len() {
                let r = rx.recv_block(&mut buf, Some(Duration::from_secs(5))).expect("the datagrams");
                assert_eq!((r.gaps, r.rejected, r.truncated), (0, 0, 0), "{recv:?} header {header}");
                got.extend_from_slice(&buf[..r.bytes]);
                dgrams += r.datagrams;
            }
            assert!(got == data, "{recv:?} header {header}: bytes differ");
            assert_eq!(dgrams, sent.datagrams, "{recv:?} header {header}");
        }
    }
}
