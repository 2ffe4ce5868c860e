//! The sending side: a block cut into datagrams, handed to the kernel in as few system calls
//! as the path allows.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::header::{Header, HEADER_LEN};
use crate::shm::{Stop, TxRing, LIVENESS_EVERY};
use crate::uring::Uring;
use crate::{env_level, invalid, sys, SendOptions, SendPath, SendReport, MAX_UDP_PAYLOAD};

/// Segments per GSO super-datagram (the kernel's UDP_MAX_SEGMENTS is 64 on older kernels,
/// 128 on newer ones).
const GSO_MAX_SEGMENTS: usize = 64;
/// GSO messages per `sendmmsg`.
const GSO_MSGS_PER_CALL: usize = 64;
/// Datagrams per `sendmmsg` on the mmsg path (UIO_MAXIOV is the kernel's limit).
const MMSG_PER_CALL: usize = 1024;

/// Sends blocks as streams of UDP datagrams to one destination.
pub struct StreamSender {
    sock: UdpSocket,
    dest: SocketAddr,
    datagram_size: usize,
    header: bool,
    stream_id: u32,
    next_sequence: u64,
    path: SendPath,
    /// Datagrams per GSO super-datagram.
    gso_segments: usize,
    headers: Vec<[u8; HEADER_LEN]>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    cmsgs: Vec<sys::CmsgBuf>,
    /// Index (within the block) of each message's first datagram, and its datagram count.
    msg_span: Vec<(usize, usize)>,
    /// The receiver's shared-memory ring, while attached.
    ring: Option<TxRing>,
    /// Whether to look for a ring ([`SendPath::Shm`], or no path forced).
    ring_allowed: bool,
    /// When to look for a ring again while not attached.
    next_probe: Instant,
    /// When the ring's owner was last seen alive.
    alive_checked: Instant,
    ring_wait: Duration,
    /// The io_uring of [`SendPath::Uring`].
    uring: Option<Uring>,
}

/// How often a sender without a ring looks for one (the receiver may start later).
const PROBE_EVERY: Duration = Duration::from_millis(200);

// SAFETY: the raw pointers in the scratch vectors are only meaningful during one
// `send_block` call, which rebuilds them from the block it was given; between calls they
// dangle harmlessly and are never read.
unsafe impl Send for StreamSender {}

fn default_stream_id() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    (std::process::id().rotate_left(16)) ^ (t as u32) ^ ((t >> 32) as u32)
}

impl StreamSender {
    /// A sender to `dest` (the first address it resolves to), from an ephemeral port.
    pub fn connect(dest: impl ToSocketAddrs, opts: SendOptions) -> io::Result<StreamSender> {
        let header = opts.sequence_header;
        let max = MAX_UDP_PAYLOAD - if header { HEADER_LEN } else { 0 };
        if opts.datagram_size == 0 || opts.datagram_size > max {
            return Err(invalid(format!(
                "datagram size {}: must be 1 to {max} bytes{}",
                opts.datagram_size,
                if header { " with the 16-byte sequence header" } else { "" }
            )));
        }
        let dest = dest.to_socket_addrs()?.next().ok_or_else(|| invalid("the destination resolves to no address"))?;
        let local: SocketAddr =
            if dest.is_ipv4() { "0.0.0.0:0".parse() } else { "[::]:0".parse() }.map_err(|e| invalid(format!("{e}")))?;
        let sock = UdpSocket::bind(local)?;
        sock.connect(dest)?;
        sys::set_buffer(sock.as_raw_fd(), false, opts.socket_buffer);
        let wire = opts.datagram_size + if header { HEADER_LEN } else { 0 };
        let gso_segments = (MAX_UDP_PAYLOAD / wire).min(GSO_MAX_SEGMENTS);
        let asked = match opts.path {
            Some(p) => p,
            None => match env_level()? {
                Some(0) => SendPath::Plain,
                Some(1) => SendPath::Mmsg,
                Some(2) => SendPath::Gso,
                Some(4) => SendPath::Uring,
                _ => SendPath::Shm,
            },
        };
        let ring_allowed = asked == SendPath::Shm;
        let asked = if ring_allowed { SendPath::Gso } else { asked };
        let mut path = match asked {
            // One datagram per super-datagram gains nothing; no UDP_SEGMENT, no GSO.
            SendPath::Gso | SendPath::Uring if gso_segments < 2 => SendPath::Mmsg,
            SendPath::Gso | SendPath::Uring
                if sys::setsockopt_int(sock.as_raw_fd(), libc::SOL_UDP, sys::UDP_SEGMENT, 0).is_err() =>
            {
                SendPath::Mmsg
            }
            p => p,
        };
        let uring = if path == SendPath::Uring { Uring::new() } else { None };
        if path == SendPath::Uring && uring.is_none() {
            path = SendPath::Gso;
        }
        Ok(StreamSender {
            sock,
            dest,
            datagram_size: opts.datagram_size,
            header,
            stream_id: opts.stream_id.unwrap_or_else(default_stream_id),
            next_sequence: 0,
            path,
            gso_segments,
            headers: Vec::new(),
            iovs: Vec::new(),
            msgs: Vec::new(),
            cmsgs: Vec::new(),
            msg_span: Vec::new(),
            ring: None,
            ring_allowed,
            next_probe: Instant::now(),
            alive_checked: Instant::now(),
            ring_wait: opts.ring_wait,
            uring,
        })
        .map(|mut s| {
            s.probe();
            s
        })
    }

    /// Looks for the destination's ring (rate-limited); true when attached.
    fn probe(&mut self) -> bool {
        if self.ring.is_none() && self.ring_allowed && Instant::now() >= self.next_probe {
            self.next_probe = Instant::now() + PROBE_EVERY;
            self.ring = TxRing::attach(self.dest, &self.sock).ok();
        }
        self.ring.is_some()
    }

    /// Why this sender would not use a ring for its destination now (`None`: it would, or
    /// it does). For diagnostics and tests.
    pub fn ring_refusal(&self) -> Option<String> {
        if self.ring.is_some() {
            return None;
        }
        if !self.ring_allowed {
            return Some("a kernel path is forced".into());
        }
        TxRing::attach(self.dest, &self.sock).err().map(|e| format!("{e:?}"))
    }

    /// The path `send_block` uses now (it may fall back from GSO at the first send, and
    /// from the ring when the receiver goes away).
    pub fn path(&self) -> SendPath {
        if self.ring.is_some() {
            SendPath::Shm
        } else {
            self.path
        }
    }

    pub fn destination(&self) -> SocketAddr {
        self.dest
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    pub fn datagram_size(&self) -> usize {
        self.datagram_size
    }

    pub fn stream_id(&self) -> u32 {
        self.stream_id
    }

    /// The sequence number of the next datagram.
    pub fn sequence(&self) -> u64 {
        self.next_sequence
    }

    /// Sets the sequence number of the next datagram (resuming a stream; tests skip
    /// numbers with it to make a receiver see gaps).
    pub fn set_sequence(&mut self, next: u64) {
        self.next_sequence = next;
    }

    /// Sends `block` as datagrams of `datagram_size` payload bytes (the last may be
    /// shorter), in order. Blocks while the socket buffer is full. An empty block sends
    /// nothing.
    pub fn send_block(&mut self, block: &[u8]) -> io::Result<SendReport> {
        let ds = self.datagram_size;
        let count = block.len().div_ceil(ds);
        let mut report = SendReport {
            datagrams: 0,
            bytes: 0,
            system_calls: 0,
            path: self.path,
            first_sequence: self.next_sequence,
            dropped: 0,
        };
        let first_sequence = self.next_sequence;
        let mut done = 0usize;
        if count == 0 {
            return Ok(report);
        }
        if let Some(ring) = &self.ring {
            // The closed flag at every block; the owner's lock (a system call) at most every
            // 10 ms, so small blocks do not pay a call each.
            let check = self.alive_checked.elapsed() >= LIVENESS_EVERY;
            if ring.closed() || (check && !ring.alive(&mut report.system_calls)) {
                self.ring = None;
                self.next_probe = Instant::now() + PROBE_EVERY;
            } else if check {
                self.alive_checked = Instant::now();
            }
        } else if self.ring_allowed && Instant::now() >= self.next_probe {
            report.system_calls += 2;
            self.probe();
        }
        // Datagrams, payload bytes and drops of the ring's part.
        let (mut ring_dgrams, mut ring_bytes, mut ring_dropped) = (0usize, 0u64, 0usize);
        if let Some(ring) = &mut self.ring {
            let stream = self.header.then_some(self.stream_id);
            let fd = self.sock.as_raw_fd();
            match ring.write_block(block, ds, stream, first_sequence, self.ring_wait, fd, &mut report.system_calls) {
                Ok((written, dropped, bytes)) => {
                    self.next_sequence = first_sequence + count as u64;
                    report.datagrams = written as u64;
                    report.dropped = dropped as u64;
                    report.bytes = bytes;
                    report.path = SendPath::Shm;
                    return Ok(report);
                }
                // The receiver went away: the rest goes by the kernel (to nobody, as UDP would).
                Err(Stop::Gone { at, written, dropped, bytes }) => {
                    self.ring = None;
                    self.next_probe = Instant::now() + PROBE_EVERY;
                    done = at;
                    (ring_dgrams, ring_bytes, ring_dropped) = (written, bytes, dropped);
                }
            }
        }
        let kernel_from = done;
        while done < count {
            let (segments, per_call) = match self.path {
                SendPath::Gso | SendPath::Shm | SendPath::Uring => (self.gso_segments, GSO_MSGS_PER_CALL),
                SendPath::Mmsg => (1, MMSG_PER_CALL),
                SendPath::Plain => (1, 1),
            };
            self.build(block, first_sequence, done, count, segments, per_call);
            let mut k = 0;
            while k < self.msgs.len() {
                report.system_calls += 1;
                let sent = if self.path == SendPath::Plain {
                    sys::sendmsg(self.sock.as_raw_fd(), &self.msgs[k].msg_hdr).map(|_| 1)
                } else if let (SendPath::Uring, Some(u)) = (self.path, self.uring.as_mut()) {
                    u.sendmsgs(self.sock.as_raw_fd(), &mut self.msgs[k..])
                } else {
                    sys::sendmmsg(self.sock.as_raw_fd(), &mut self.msgs[k..])
                };
                match sent {
                    Ok(n) => k += n,
                    Err(e) => match e.raw_os_error() {
                        Some(libc::EINTR) => {}
                        // A port unreachable earlier on this connected socket, reported on
                        // this send (which did not go out): the stream goes on.
                        Some(libc::ECONNREFUSED) => {}
                        // No GSO on this route (no checksum offload: EIO; a segment larger
                        // than the path MTU: EINVAL or EMSGSIZE): fall back for good, and
                        // resend from the message that failed.
                        Some(libc::EIO) | Some(libc::EINVAL) | Some(libc::EMSGSIZE)
                            if matches!(self.path, SendPath::Gso | SendPath::Uring) =>
                        {
                            self.path = SendPath::Mmsg;
                            report.path = SendPath::Mmsg;
                            break;
                        }
                        _ => {
                            let done = self.msg_span[..k].last().map_or(done, |&(f, c)| f + c);
                            // The report is lost with the error; the sequence number is kept.
                            self.finish(&mut report, block.len(), kernel_from, done);
                            return Err(e);
                        }
                    },
                }
            }
            done = self.msg_span[..k].last().map_or(done, |&(f, c)| f + c);
        }
        self.finish(&mut report, block.len(), kernel_from, done);
        report.datagrams += ring_dgrams as u64;
        report.bytes += ring_bytes;
        report.dropped = ring_dropped as u64;
        Ok(report)
    }

    /// Counts datagrams `from..done` of the block as sent by the kernel path.
    fn finish(&mut self, report: &mut SendReport, len: usize, from: usize, done: usize) {
        let ds = self.datagram_size;
        self.next_sequence = report.first_sequence + done as u64;
        report.datagrams = (done - from) as u64;
        report.bytes = ((done * ds).min(len) - (from * ds).min(len)) as u64;
    }

    /// Lays out the messages for datagrams `first..` of the block (at most `segments` per
    /// message, `per_call` messages), with their headers, iovecs and GSO cmsgs.
    fn build(
        &mut self,
        block: &[u8],
        first_sequence: u64,
        first: usize,
        count: usize,
        segments: usize,
        per_call: usize,
    ) {
        let ds = self.datagram_size;
        let n = (count - first).min(segments * per_call);
        self.headers.clear();
        self.iovs.clear();
        self.msgs.clear();
        self.cmsgs.clear();
        self.msg_span.clear();
        if self.header {
            for j in first..first + n {
                self.headers.push(Header { stream_id: self.stream_id, sequence: first_sequence + j as u64 }.encode());
            }
        }
        let chunk = |j: usize| {
            let start = j * ds;
            let end = (start + ds).min(block.len());
            (start, end)
        };
        // First pass: iovecs (as offsets into `iovs`), spans and whether a cmsg is needed.
        let mut iov_ranges = Vec::with_capacity(n.div_ceil(segments));
        let mut j = first;
        while j < first + n {
            let c = segments.min(first + n - j);
            let start = self.iovs.len();
            if self.header {
                for d in j..j + c {
                    let h = &self.headers[d - first];
                    self.iovs.push(libc::iovec { iov_base: h.as_ptr() as *mut libc::c_void, iov_len: HEADER_LEN });
                    let (s, e) = chunk(d);
                    self.iovs.push(libc::iovec { iov_base: block[s..].as_ptr() as *mut libc::c_void, iov_len: e - s });
                }
            } else {
                // The payloads of consecutive datagrams are contiguous in the block.
                let (s, _) = chunk(j);
                let (_, e) = chunk(j + c - 1);
                self.iovs.push(libc::iovec { iov_base: block[s..].as_ptr() as *mut libc::c_void, iov_len: e - s });
            }
            iov_ranges.push((start, self.iovs.len() - start));
            self.msg_span.push((j, c));
            j += c;
        }
        // Second pass: the messages, now that `iovs` will not move.
        let wire = (ds + if self.header { HEADER_LEN } else { 0 }) as u16;
        self.cmsgs.resize(iov_ranges.len(), [0; 4]);
        for (m, &(start, len)) in iov_ranges.iter().enumerate() {
            let mut h = sys::empty_mmsghdr();
            h.msg_hdr.msg_iov = self.iovs[start..].as_mut_ptr();
            h.msg_hdr.msg_iovlen = len as _;
            if self.msg_span[m].1 > 1 {
                sys::put_segment_cmsg(&mut h.msg_hdr, &mut self.cmsgs[m], wire);
            }
            self.msgs.push(h);
        }
    }
}

impl AsRawFd for StreamSender {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}
