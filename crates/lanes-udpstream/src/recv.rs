//! The receiving side: datagrams taken from the kernel straight into the caller's buffer
//! (slots, then compacted), headers stripped and sequence numbers checked.

use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use crate::header::{Header, HEADER_LEN};
use crate::shm::{Drained, RxRing};
use crate::uring::Uring;
use crate::{env_level, invalid, sys, RecvOptions, RecvPath, RecvReport, MAX_UDP_PAYLOAD};

/// A receive slot for one (GRO super-)datagram: the largest UDP datagram fits.
const SUPER: usize = 65536;
/// Datagrams per `recvmmsg` on the mmsg path.
const MMSG_BATCH: usize = 1024;
/// Super-datagrams per `recvmmsg` on the GRO path.
const GRO_BATCH: usize = 32;

/// Which stream the receiver follows, and the sequence number it expects next.
#[derive(Clone, Copy, Debug, Default)]
struct SeqState {
    stream: Option<u32>,
    expected: u64,
}

impl SeqState {
    fn note(&mut self, h: Header, r: &mut RecvReport) {
        match self.stream {
            Some(s) if s == h.stream_id => {
                if h.sequence >= self.expected {
                    r.gaps += h.sequence - self.expected;
                    self.expected = h.sequence + 1;
                } else {
                    r.reordered += 1;
                }
            }
            // A new stream (or the first): follow it from here.
            _ => {
                self.stream = Some(h.stream_id);
                self.expected = h.sequence + 1;
            }
        }
    }
}

/// How `recv_slots` receives: `count` messages into slots of `len` bytes; `gro`: a slot may
/// hold a super-datagram; `wait`: block for the first.
#[derive(Clone, Copy, Debug)]
struct Slots {
    count: usize,
    len: usize,
    gro: bool,
    wait: bool,
}

/// A super-datagram in the scratch buffer not yet fully delivered (GRO path, when the
/// caller's buffer had less than one slot left).
#[derive(Clone, Copy, Debug)]
struct Pending {
    len: usize,
    segment: usize,
    offset: usize,
}

/// Receives UDP datagrams on one address and port into caller-given blocks.
pub struct StreamReceiver {
    sock: UdpSocket,
    datagram_size: usize,
    header: bool,
    idle: Duration,
    path: RecvPath,
    seq: SeqState,
    hdrs: Vec<[u8; HEADER_LEN]>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    cmsgs: Vec<sys::CmsgBuf>,
    scratch: Vec<u8>,
    pending: Option<Pending>,
    /// SO_RCVTIMEO as last set (`None`: not set yet; `Some(None)`: no limit).
    rcvtimeo: Option<Option<Duration>>,
    /// The shared-memory ring published for senders on this host ([`RecvPath::Shm`]).
    ring: Option<RxRing>,
    /// The io_uring of [`RecvPath::Uring`].
    uring: Option<Uring>,
}

// SAFETY: the raw pointers in the scratch vectors are only meaningful during one receive
// call, which rebuilds them from the buffer it was given; between calls they are never read.
unsafe impl Send for StreamReceiver {}

impl StreamReceiver {
    /// A receiver bound to `addr` (port 0: an ephemeral port, see [`Self::local_addr`]).
    pub fn bind(addr: impl ToSocketAddrs, opts: RecvOptions) -> io::Result<StreamReceiver> {
        let max = MAX_UDP_PAYLOAD - if opts.sequence_header { HEADER_LEN } else { 0 };
        if opts.datagram_size == 0 || opts.datagram_size > max {
            return Err(invalid(format!(
                "datagram size {}: must be 1 to {max} bytes{}",
                opts.datagram_size,
                if opts.sequence_header { " with the 16-byte sequence header" } else { "" }
            )));
        }
        let addrs: Vec<SocketAddr> = addr.to_socket_addrs()?.collect();
        let sock = UdpSocket::bind(&addrs[..])?;
        sys::set_buffer(sock.as_raw_fd(), true, opts.socket_buffer);
        let asked = match opts.path {
            Some(p) => p,
            None => match env_level()? {
                Some(0) => RecvPath::Plain,
                Some(1) => RecvPath::Mmsg,
                Some(2) => RecvPath::Gro,
                Some(4) => RecvPath::Uring,
                _ => RecvPath::Shm,
            },
        };
        // The ring is best effort: without /dev/shm (or with another live receiver's ring of
        // that name) the socket alone serves.
        let ring = if asked == RecvPath::Shm {
            RxRing::create(sock.local_addr()?, opts.ring_capacity).ok().flatten()
        } else {
            None
        };
        let asked = if asked == RecvPath::Shm { RecvPath::Gro } else { asked };
        let mut path = match asked {
            RecvPath::Gro | RecvPath::Uring
                if sys::setsockopt_int(sock.as_raw_fd(), libc::SOL_UDP, sys::UDP_GRO, 1).is_err() =>
            {
                RecvPath::Mmsg
            }
            p => p,
        };
        let uring = if path == RecvPath::Uring { Uring::new() } else { None };
        if path == RecvPath::Uring && uring.is_none() {
            path = RecvPath::Gro;
        }
        Ok(StreamReceiver {
            sock,
            datagram_size: opts.datagram_size,
            header: opts.sequence_header,
            idle: opts.idle,
            path,
            seq: SeqState::default(),
            hdrs: Vec::new(),
            iovs: Vec::new(),
            msgs: Vec::new(),
            cmsgs: Vec::new(),
            scratch: Vec::new(),
            pending: None,
            rcvtimeo: None,
            ring,
            uring,
        })
    }

    /// [`RecvPath::Shm`] while a ring is published, else the kernel path.
    pub fn path(&self) -> RecvPath {
        if self.ring.is_some() {
            RecvPath::Shm
        } else {
            self.path
        }
    }

    /// The kernel path under the ring (or the only one).
    pub fn kernel_path(&self) -> RecvPath {
        self.path
    }

    /// Counts of what every receive so far took in: a change means a datagram (kept or
    /// dropped) came, not only a doorbell.
    fn taken(r: &RecvReport) -> u64 {
        r.datagrams + r.rejected + r.truncated
    }

    /// Drains the ring into `buf`; true when a datagram came. A ring found corrupt is given
    /// up (its name removed: senders go back to UDP).
    fn drain_ring(&mut self, buf: &mut [u8], filled: &mut usize, r: &mut RecvReport) -> bool {
        let Some(ring) = &mut self.ring else { return false };
        let (ds, header, seq) = (self.datagram_size, self.header, &mut self.seq);
        let before = Self::taken(r);
        let accept = |h: Option<Header>, plen: usize, r: &mut RecvReport| -> bool {
            if header {
                let Some(h) = h else {
                    r.rejected += 1;
                    return false;
                };
                if plen > ds {
                    r.truncated += 1;
                    return false;
                }
                seq.note(h, r);
            } else if plen > ds {
                r.truncated += 1;
                return false;
            }
            r.datagrams += 1;
            true
        };
        match ring.drain(buf, filled, ds, accept, r, header) {
            Drained::Some(n) => {
                if n > 0 {
                    r.path = RecvPath::Shm;
                }
            }
            Drained::Corrupt => {
                r.rejected += 1;
                self.ring = None;
            }
        }
        Self::taken(r) != before
    }

    /// At the end of a receive call: the ring's sender is asked to ring the doorbell when it
    /// next publishes, so the socket polls readable; if the ring holds data already, the
    /// receiver rings it itself (one datagram to its own socket).
    fn ring_rest(&mut self, r: &mut RecvReport) {
        let Some(ring) = &self.ring else { return };
        ring.set_sleeping(true);
        if ring.has_data() {
            ring.set_sleeping(false);
            let Ok(mut me) = self.sock.local_addr() else { return };
            if me.ip().is_unspecified() {
                me.set_ip(if me.is_ipv4() {
                    std::net::Ipv4Addr::LOCALHOST.into()
                } else {
                    std::net::Ipv6Addr::LOCALHOST.into()
                });
            }
            r.system_calls += 1;
            let _ = self.sock.send_to(ring.doorbell(), me);
        }
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    pub fn datagram_size(&self) -> usize {
        self.datagram_size
    }

    /// Sets [`RecvOptions::idle`].
    pub fn set_idle(&mut self, idle: Duration) {
        self.idle = idle;
    }

    fn check(&self, buf: &[u8]) -> io::Result<()> {
        if buf.len() < self.datagram_size {
            return Err(invalid(format!(
                "a buffer of {} bytes cannot take one datagram of {} bytes",
                buf.len(),
                self.datagram_size
            )));
        }
        Ok(())
    }

    /// Fills `buf` with datagram payloads, back to back, and returns when less than one
    /// datagram's room is left, when no datagram came for [`RecvOptions::idle`] after the
    /// first, or at `timeout` (`None`: no limit). Nothing at all within `timeout` is
    /// `ErrorKind::TimedOut`. With a ring published, datagrams come from the ring and the
    /// socket both (the socket is read once without waiting first, then the ring is drained,
    /// then the call waits in the socket, where a sender's doorbell wakes it).
    pub fn recv_block(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> io::Result<RecvReport> {
        self.check(buf)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut r = RecvReport::new(self.path);
        let mut filled = 0;
        let mut got_any = false;
        if let Some(ring) = &self.ring {
            ring.set_sleeping(false);
            // The socket once without waiting: a plain sender to this port is not starved by
            // a ring that never runs empty, and a doorbell left from before is taken.
            let before = Self::taken(&r);
            self.receive_once(buf, &mut filled, &mut r, false)?;
            got_any = Self::taken(&r) != before;
        }
        while buf.len() - filled >= self.datagram_size {
            if self.drain_ring(buf, &mut filled, &mut r) {
                got_any = true;
                continue;
            }
            // The receive call itself waits (SO_RCVTIMEO; recvmmsg with MSG_WAITFORONE): for
            // the first datagram up to the deadline, then up to `idle` for each next one.
            let now = Instant::now();
            let left = deadline.map(|d| d.saturating_duration_since(now));
            let wait = if got_any { Some(left.map_or(self.idle, |l| l.min(self.idle))) } else { left };
            let blocking = wait != Some(Duration::ZERO);
            if blocking && self.pending.is_none() {
                self.set_timeout(wait, &mut r)?;
            }
            if let (true, Some(ring)) = (blocking, &self.ring) {
                // Asleep in the socket from here: a sender that publishes rings the doorbell.
                ring.set_sleeping(true);
                if ring.has_data() {
                    ring.set_sleeping(false);
                    continue;
                }
            }
            let before = Self::taken(&r);
            let received = self.receive_once(buf, &mut filled, &mut r, blocking);
            if let Some(ring) = &self.ring {
                ring.set_sleeping(false);
            }
            if received? {
                if Self::taken(&r) != before {
                    got_any = true;
                }
                // Data, or only a doorbell: the ring is drained next.
                continue;
            }
            if got_any || !blocking || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        self.ring_rest(&mut r);
        if !got_any {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no datagram within the timeout"));
        }
        self.finish(&mut r, filled);
        Ok(r)
    }

    /// Sets SO_RCVTIMEO (`None`: no limit) unless it is already within a millisecond of it.
    fn set_timeout(&mut self, t: Option<Duration>, r: &mut RecvReport) -> io::Result<()> {
        let want = t.map(|d| d.max(Duration::from_micros(1)));
        match (self.rcvtimeo, want) {
            (Some(None), None) => return Ok(()),
            (Some(Some(a)), Some(b)) if a.abs_diff(b) < Duration::from_millis(1) => return Ok(()),
            _ => {}
        }
        r.system_calls += 1;
        sys::set_rcvtimeo(self.sock.as_raw_fd(), want)?;
        self.rcvtimeo = Some(want);
        Ok(())
    }

    /// The polled form: takes what has already arrived, up to a full buffer, without
    /// waiting; a report of 0 bytes when nothing had. Poll the socket ([`AsRawFd`]) for
    /// readability to know when to call it: with a ring published, data in the ring makes
    /// the socket readable too (a doorbell datagram, which the receive drops).
    pub fn try_recv_block(&mut self, buf: &mut [u8]) -> io::Result<RecvReport> {
        self.check(buf)?;
        let mut r = RecvReport::new(self.path);
        let mut filled = 0;
        if let Some(ring) = &self.ring {
            ring.set_sleeping(false);
        }
        while buf.len() - filled >= self.datagram_size {
            let ring = self.drain_ring(buf, &mut filled, &mut r);
            if buf.len() - filled < self.datagram_size {
                break;
            }
            if !self.receive_once(buf, &mut filled, &mut r, false)? && !ring {
                break;
            }
        }
        self.ring_rest(&mut r);
        self.finish(&mut r, filled);
        Ok(r)
    }

    fn finish(&self, r: &mut RecvReport, filled: usize) {
        r.bytes = filled;
        if let Some(s) = self.seq.stream {
            r.stream_id = Some(s);
            r.next_sequence = Some(self.seq.expected);
        }
    }

    /// One receive (or delivery of what the scratch buffer holds); false when nothing was
    /// queued. The caller guarantees at least `datagram_size` bytes of room.
    /// With `wait`, the call blocks for the first datagram (up to SO_RCVTIMEO).
    fn receive_once(&mut self, buf: &mut [u8], filled: &mut usize, r: &mut RecvReport, wait: bool) -> io::Result<bool> {
        if self.pending.is_some() {
            self.deliver_pending(buf, filled, r);
            return Ok(true);
        }
        let room = buf.len() - *filled;
        let ds = self.datagram_size;
        let wire = ds + if self.header { HEADER_LEN } else { 0 };
        match self.path {
            RecvPath::Plain => self.recv_slots(buf, filled, r, Slots { count: 1, len: ds, gro: false, wait }),
            RecvPath::Mmsg => {
                self.recv_slots(buf, filled, r, Slots { count: (room / ds).min(MMSG_BATCH), len: ds, gro: false, wait })
            }
            RecvPath::Gro | RecvPath::Shm | RecvPath::Uring => {
                // Slots must hold any super-datagram; with datagrams of the largest UDP size a
                // slot is exactly one, so full datagrams without a header need no moving.
                let slot = if wire >= MAX_UDP_PAYLOAD { wire } else { SUPER };
                if room >= slot {
                    self.recv_slots(
                        buf,
                        filled,
                        r,
                        Slots { count: (room / slot).min(GRO_BATCH), len: slot, gro: true, wait },
                    )
                } else {
                    self.recv_scratch(buf, filled, r, wait)
                }
            }
        }
    }

    /// Validates one datagram's wire bytes (header, length); the payload's range within
    /// `wire`, or None when dropped (counted).
    fn accept(
        seq: &mut SeqState,
        header: bool,
        ds: usize,
        wire: &[u8],
        r: &mut RecvReport,
    ) -> Option<std::ops::Range<usize>> {
        let range = if header {
            match Header::decode(wire) {
                Some(h) => {
                    if wire.len() - HEADER_LEN > ds {
                        r.truncated += 1;
                        return None;
                    }
                    seq.note(h, r);
                    HEADER_LEN..wire.len()
                }
                None => {
                    r.rejected += 1;
                    return None;
                }
            }
        } else {
            if wire.len() > ds {
                r.truncated += 1;
                return None;
            }
            0..wire.len()
        };
        r.datagrams += 1;
        Some(range)
    }

    /// Receives up to `count` messages into consecutive slots of `len` bytes at `*filled`, then
    /// moves the payloads together. With `gro` a slot may hold many datagrams (their headers
    /// inline, cut by the cmsg's segment size); else a header lands in `hdrs`, the payload
    /// in the slot.
    fn recv_slots(&mut self, buf: &mut [u8], filled: &mut usize, r: &mut RecvReport, how: Slots) -> io::Result<bool> {
        let Slots { count: k, len: slot, gro, wait } = how;
        let split_header = self.header && !gro;
        let base = *filled;
        debug_assert!(k >= 1 && base + k * slot <= buf.len());
        self.iovs.clear();
        self.msgs.clear();
        self.hdrs.resize(if split_header { k } else { 0 }, [0; HEADER_LEN]);
        self.cmsgs.resize(if gro { k } else { 0 }, [0; 4]);
        for i in 0..k {
            if split_header {
                self.iovs.push(libc::iovec { iov_base: self.hdrs[i].as_mut_ptr().cast(), iov_len: HEADER_LEN });
            }
            let slot_buf = &mut buf[base + i * slot..base + (i + 1) * slot];
            self.iovs.push(libc::iovec { iov_base: slot_buf.as_mut_ptr().cast(), iov_len: slot });
        }
        let per = if split_header { 2 } else { 1 };
        for i in 0..k {
            let mut m = sys::empty_mmsghdr();
            m.msg_hdr.msg_iov = self.iovs[i * per..].as_mut_ptr();
            m.msg_hdr.msg_iovlen = per as _;
            if gro {
                m.msg_hdr.msg_control = self.cmsgs[i].as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = std::mem::size_of::<sys::CmsgBuf>() as _;
            }
            self.msgs.push(m);
        }
        r.system_calls += 1;
        let fd = self.sock.as_raw_fd();
        let n = if let Some(u) = self.uring.as_mut() {
            // The wait is SO_RCVTIMEO's, which io_uring does not read: a linked timeout.
            u.recvmsgs(fd, &mut self.msgs, wait.then(|| self.rcvtimeo.flatten()))?
        } else if k == 1 {
            match sys::recvmsg(fd, &mut self.msgs[0].msg_hdr, wait)? {
                Some(len) => {
                    self.msgs[0].msg_len = len as u32;
                    1
                }
                None => 0,
            }
        } else {
            sys::recvmmsg(fd, &mut self.msgs, wait)?
        };
        if n == 0 {
            return Ok(false);
        }
        let ds = self.datagram_size;
        let mut w = base;
        for i in 0..n {
            let m = &self.msgs[i];
            let len = m.msg_len as usize;
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                r.truncated += 1;
                continue;
            }
            let start = base + i * slot;
            if split_header {
                if len == HEADER_LEN && self.ring.as_ref().is_some_and(|g| g.is_doorbell(&self.hdrs[i])) {
                    continue;
                }
                if len < HEADER_LEN {
                    r.rejected += 1;
                    continue;
                }
                let plen = len - HEADER_LEN;
                let Some(h) = Header::decode(&self.hdrs[i]) else {
                    r.rejected += 1;
                    continue;
                };
                if plen > ds {
                    r.truncated += 1;
                    continue;
                }
                self.seq.note(h, r);
                r.datagrams += 1;
                buf.copy_within(start..start + plen, w);
                w += plen;
            } else {
                let segment = if gro { sys::gro_segment(&m.msg_hdr).unwrap_or(len).max(1) } else { len.max(1) };
                let mut off = 0;
                while off < len {
                    let end = (off + segment).min(len);
                    let wire = &buf[start + off..start + end];
                    if self.ring.as_ref().is_some_and(|g| g.is_doorbell(wire)) {
                        off = end;
                        continue;
                    }
                    if let Some(p) = Self::accept(&mut self.seq, self.header, ds, wire, r) {
                        let plen = p.len();
                        buf.copy_within(start + off + p.start..start + off + p.end, w);
                        w += plen;
                    }
                    off = end;
                }
                if len == 0 {
                    // An empty datagram: nothing to deliver, but it came.
                    if !self.header {
                        r.datagrams += 1;
                    } else {
                        r.rejected += 1;
                    }
                }
            }
        }
        *filled = w;
        Ok(true)
    }

    /// GRO with less than a slot left: one super-datagram into scratch, delivered from there.
    fn recv_scratch(&mut self, buf: &mut [u8], filled: &mut usize, r: &mut RecvReport, wait: bool) -> io::Result<bool> {
        self.scratch.resize(SUPER, 0);
        let mut iov = libc::iovec { iov_base: self.scratch.as_mut_ptr().cast(), iov_len: SUPER };
        let mut cmsg: sys::CmsgBuf = [0; 4];
        let mut m = sys::empty_mmsghdr().msg_hdr;
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        m.msg_control = cmsg.as_mut_ptr().cast();
        m.msg_controllen = std::mem::size_of::<sys::CmsgBuf>() as _;
        r.system_calls += 1;
        let Some(len) = sys::recvmsg(self.sock.as_raw_fd(), &mut m, wait)? else {
            return Ok(false);
        };
        if m.msg_flags & libc::MSG_TRUNC != 0 {
            r.truncated += 1;
            return Ok(true);
        }
        let segment = sys::gro_segment(&m).unwrap_or(len).max(1);
        if len == 0 {
            if self.header {
                r.rejected += 1;
            } else {
                r.datagrams += 1;
            }
            return Ok(true);
        }
        self.pending = Some(Pending { len, segment, offset: 0 });
        self.deliver_pending(buf, filled, r);
        Ok(true)
    }

    /// Copies datagrams out of the scratch buffer while they fit.
    fn deliver_pending(&mut self, buf: &mut [u8], filled: &mut usize, r: &mut RecvReport) {
        while let Some(p) = self.pending {
            if p.offset >= p.len {
                self.pending = None;
                break;
            }
            let end = (p.offset + p.segment).min(p.len);
            let wire = &self.scratch[p.offset..end];
            if self.ring.as_ref().is_some_and(|g| g.is_doorbell(wire)) {
                self.pending = Some(Pending { offset: end, ..p });
                continue;
            }
            // Peek at the payload's length before counting it: it must fit.
            let plen = if self.header { wire.len().saturating_sub(HEADER_LEN) } else { wire.len() };
            if plen <= self.datagram_size && plen > buf.len() - *filled {
                break;
            }
            if let Some(range) = Self::accept(&mut self.seq, self.header, self.datagram_size, wire, r) {
                buf[*filled..*filled + range.len()].copy_from_slice(&wire[range.clone()]);
                *filled += range.len();
            }
            self.pending = Some(Pending { offset: end, ..p });
        }
    }
}

impl AsRawFd for StreamReceiver {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}
