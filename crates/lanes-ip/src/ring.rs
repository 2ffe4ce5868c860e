//! The packet rings between two nodes, as segments of the fabric, and the hello segment
//! that says a node runs the interface (docs/ip-interface.md, "How packets move").
//!
//! ```text
//! pair segment, exported by the receiver R for the sender S (id PAIR_BASE | S):
//!   0          header (R writes it once): magic, version, rings, ring bytes, R, S
//!   4096       return lines, one per ring q of R -> S (in S's segment for R): written by
//!              S as that ring's receiver: tail (u64, bytes consumed), sleeping (u32: 0
//!              awake, else a value of its own per sleep, or 1 from a receiver that has none)
//!   8192       ring q of S -> R, for q < rings: head (u64, bytes produced) on a line of
//!              its own, then `ring bytes` of records
//! record: length (u32, of what follows), reserved (u32), virtio-net header and packet,
//!         padded to 8 bytes; it continues at the ring's start when it runs past its end
//! ```
//!
//! Every access is through a [`Map`] (bounds-checked, by value); whatever the peer wrote
//! is checked before use, and a check that fails is an error, never a panic or an access
//! outside the ring.

use lanes::Map;

/// The hello segment's id: "IP", then 0xffff (no node has that id).
pub const HELLO_ID: u32 = 0x4950_ffff;
/// Pair segments are `PAIR_BASE | peer node`.
pub const PAIR_BASE: u32 = 0x4950_0000;
/// Receive queue q's interrupt is `INTERRUPT_BASE + q`.
pub const INTERRUPT_BASE: u32 = 0x4950_0000;
/// The most rings per pair (and queues per node).
pub const MAX_RINGS: usize = 16;
/// The virtio-net header every record carries (`struct virtio_net_hdr`, IFF_VNET_HDR's
/// default size).
pub const VNET_HDR_LEN: usize = 10;
/// The largest packet: an IPv6 packet whose payload length is 65535 (a 64 KiB TCP
/// segment under TSO fits it), rounded up.
pub const MAX_PACKET: usize = 65600;
/// The largest record payload (virtio-net header and packet).
pub const MAX_RECORD: usize = VNET_HDR_LEN + MAX_PACKET;

const PAIR_MAGIC: u64 = u64::from_le_bytes(*b"LANESIPP");
const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"LANESIPH");
const VERSION: u32 = 1;
const LINE: usize = 64;
const RETURN_OFF: usize = 4096;
const RINGS_OFF: usize = 8192;
/// The head's line before each ring's records.
const RING_CTRL: usize = LINE;
const REC_HDR: usize = 8;
/// The hello segment's size.
pub const HELLO_BYTES: u64 = 4096;

/// A record's bytes in the ring: header and payload, padded to 8.
pub fn record_span(len: usize) -> u64 {
    ((REC_HDR + len + 7) & !7) as u64
}

/// The shape of one pair segment, as its receiver chose it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub rings: usize,
    pub ring_bytes: u64,
}

impl Layout {
    /// The segment's size.
    pub fn segment_bytes(self) -> u64 {
        RINGS_OFF as u64 + self.rings as u64 * (RING_CTRL as u64 + self.ring_bytes)
    }

    /// Where ring `q` (its head line, then its records) starts.
    pub fn ring_offset(self, q: usize) -> u64 {
        RINGS_OFF as u64 + q as u64 * (RING_CTRL as u64 + self.ring_bytes)
    }

    /// Ring `q`'s head line and records.
    pub fn ring_len(self) -> u64 {
        RING_CTRL as u64 + self.ring_bytes
    }

    /// Where return line `q` starts (tail at +0, sleeping at +8).
    pub fn return_offset(q: usize) -> u64 {
        (RETURN_OFF + q * LINE) as u64
    }

    /// A return line's length.
    pub const RETURN_LEN: u64 = LINE as u64;
    /// The tail's offset in a return line (or in the whole segment: `return_offset(q) +`).
    pub const TAIL: usize = 0;
    /// The sleep flag's offset in a return line.
    pub const SLEEPING: usize = 8;
    /// The sleep flag of a receiver that does not tell its sleeps apart: every sleep
    /// stores it, so a sender must wake it whenever it reads it.
    pub const SLEEPING_ANY: u32 = 1;
}

/// Writes the pair segment's header (the receiver, once, before it makes it available).
pub fn write_pair_header(map: &Map, layout: Layout, owner: u32, peer: u32) -> lanes::Result<()> {
    map.write::<u64>(0, PAIR_MAGIC)?;
    map.write::<u32>(8, VERSION)?;
    map.write::<u32>(12, layout.rings as u32)?;
    map.write::<u64>(16, layout.ring_bytes)?;
    map.write::<u32>(24, owner)?;
    map.write::<u32>(28, peer)?;
    map.flush_checked()
}

/// Reads and checks a peer's pair segment header through `map` (of at least its first
/// page), for a segment of `size` bytes that `owner` exported for `peer`.
pub fn read_pair_header(map: &Map, size: u64, owner: u32, peer: u32) -> Result<Layout, String> {
    let e = |e: lanes::Error| format!("reading node {owner}'s ring segment: {e}");
    if map.read::<u64>(0).map_err(e)? != PAIR_MAGIC {
        return Err(format!("node {owner}'s ring segment has no ring header (a foreign segment)"));
    }
    let version = map.read::<u32>(8).map_err(e)?;
    if version != VERSION {
        return Err(format!("node {owner}'s ring segment has layout version {version}, this one reads {VERSION}"));
    }
    let rings = map.read::<u32>(12).map_err(e)? as usize;
    let ring_bytes = map.read::<u64>(16).map_err(e)?;
    let (o, p) = (map.read::<u32>(24).map_err(e)?, map.read::<u32>(28).map_err(e)?);
    if (o, p) != (owner, peer) {
        return Err(format!("node {owner}'s ring segment names nodes {o} and {p}, not {owner} and {peer}"));
    }
    if !(1..=MAX_RINGS).contains(&rings) {
        return Err(format!("node {owner}'s ring segment has {rings} rings (1 to {MAX_RINGS})"));
    }
    if !ring_bytes.is_power_of_two() || !(2 * record_span(MAX_RECORD)..=1 << 30).contains(&ring_bytes) {
        return Err(format!("node {owner}'s ring segment has rings of {ring_bytes} bytes"));
    }
    let layout = Layout { rings, ring_bytes };
    if layout.segment_bytes() > size {
        return Err(format!("node {owner}'s ring segment is {size} bytes, its header says {}", layout.segment_bytes()));
    }
    Ok(layout)
}

/// Whether every word this side writes in a peer's pair segment is still zero: a segment
/// made for an earlier run of this node holds that run's heads and tails, and its owner
/// will make a fresh one once it sees that run ended.
pub fn is_fresh(map: &Map, layout: Layout) -> lanes::Result<bool> {
    for q in 0..layout.rings {
        if map.read::<u64>(layout.ring_offset(q) as usize)? != 0 {
            return Ok(false);
        }
    }
    for q in 0..MAX_RINGS {
        if map.read::<u64>(Layout::return_offset(q) as usize + Layout::TAIL)? != 0 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What a hello segment says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub node: u32,
    pub queues: u32,
    pub mtu: u32,
}

/// Writes this node's hello.
pub fn write_hello(map: &Map, h: Hello) -> lanes::Result<()> {
    map.write::<u64>(0, HELLO_MAGIC)?;
    map.write::<u32>(8, VERSION)?;
    map.write::<u32>(12, h.node)?;
    map.write::<u32>(16, h.queues)?;
    map.write::<u32>(20, h.mtu)?;
    map.flush_checked()
}

/// Reads and checks `node`'s hello.
pub fn read_hello(map: &Map, node: u32) -> Result<Hello, String> {
    let e = |e: lanes::Error| format!("reading node {node}'s hello: {e}");
    if map.read::<u64>(0).map_err(e)? != HELLO_MAGIC || map.read::<u32>(8).map_err(e)? != VERSION {
        return Err(format!("node {node}'s hello segment is not an IP interface's (magic or version)"));
    }
    let h = Hello { node: map.read(12).map_err(e)?, queues: map.read(16).map_err(e)?, mtu: map.read(20).map_err(e)? };
    if h.node != node || h.queues == 0 || h.queues as usize > MAX_RINGS {
        return Err(format!("node {node}'s hello names node {} with {} queues", h.node, h.queues));
    }
    Ok(h)
}

/// Whether `tail..head` can be a ring's published span.
fn span_ok(tail: u64, head: u64, cap: u64) -> bool {
    head >= tail && head - tail <= cap && head % 8 == 0 && tail % 8 == 0
}

/// Why a record was not sent.
#[derive(Debug)]
pub enum PushError {
    /// No room now.
    Full,
    /// Larger than [`MAX_RECORD`].
    TooBig(usize),
    /// The tail the receiver published is not one a ring can have.
    BadTail { tail: u64, head: u64 },
    /// The map failed (the segment is lost).
    Fabric(lanes::Error),
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Full => write!(f, "the ring is full"),
            PushError::TooBig(n) => write!(f, "a record of {n} bytes is larger than {MAX_RECORD}"),
            PushError::BadTail { tail, head } => write!(f, "the receiver published tail {tail} for head {head}"),
            PushError::Fabric(e) => write!(f, "{e}"),
        }
    }
}

/// The sending end of one ring: a map of the ring (head line and records) in the peer's
/// segment, the head this side published, and the records appended after it but not yet
/// published (a batch, published by one head store).
#[derive(Debug)]
pub struct Producer {
    map: Map,
    cap: u64,
    head: u64,
    /// The end of the appended records (`head` when none waits to be published).
    end: u64,
    /// Where the last appended record starts, while [`Producer::cancel_last`] may drop it.
    last: Option<u64>,
}

/// Bytes a read straight into the ring may fill: one more than the largest record, so that
/// a larger packet shows as one (and is dropped) rather than being cut short.
const READ_ROOM: usize = MAX_RECORD + 1;

impl Producer {
    /// The ring `map` covers (`Layout::ring_len` bytes from `Layout::ring_offset`), fresh.
    pub fn new(map: Map, ring_bytes: u64) -> Producer {
        Producer { map, cap: ring_bytes, head: 0, end: 0, last: None }
    }

    /// Bytes produced so far (published).
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Bytes appended and not yet published.
    pub fn unpublished(&self) -> u64 {
        self.end - self.head
    }

    /// Whether a record of `len` payload bytes fits after the appended ones, the ring
    /// consumed up to `tail`; `None` for a read straight into the ring
    /// ([`Producer::append_from_fd`]), which needs room for the largest record.
    pub fn has_room(&self, tail: u64, len: Option<usize>) -> Result<bool, PushError> {
        if !span_ok(tail, self.head, self.cap) {
            return Err(PushError::BadTail { tail, head: self.head });
        }
        Ok(self.cap - (self.end - tail) >= record_span(len.unwrap_or(READ_ROOM)))
    }

    /// The map offsets of `len` payload bytes of a record that starts at ring position
    /// `start` (bytes produced), in one or two pieces (a record runs on at the ring's
    /// start). Returns the pieces and how many there are.
    fn payload_ranges(&self, start: u64, len: usize) -> ([(usize, usize); 2], usize) {
        let pos = (start + REC_HDR as u64) % self.cap;
        let first = len.min((self.cap - pos) as usize);
        let ranges = [(RING_CTRL + pos as usize, first), (RING_CTRL, len - first)];
        (ranges, if first < len { 2 } else { 1 })
    }

    /// Reads one record's payload (a packet) from `fd` straight into the ring after the
    /// appended records, and appends it unpublished: no copy through a private buffer. The
    /// caller checked [`Producer::has_room`] (a `Full` error otherwise). The outer error
    /// is the ring's or the map's, the inner one the read's (nothing appended); `Ok(Ok(n))`
    /// appended `n` bytes, which may be more than [`MAX_RECORD`] (the caller drops such a
    /// record with [`Producer::cancel_last`]).
    pub fn append_from_fd(
        &mut self,
        tail: u64,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> Result<std::io::Result<usize>, PushError> {
        if !self.has_room(tail, None)? {
            return Err(PushError::Full);
        }
        let (ranges, count) = self.payload_ranges(self.end, READ_ROOM);
        let n = match self.map.read_from_fd(fd, &ranges[..count]).map_err(PushError::Fabric)? {
            Ok(0) => return Ok(Err(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(n) => n,
            Err(e) => return Ok(Err(e)),
        };
        let mut hdr = [0u8; REC_HDR];
        hdr[..4].copy_from_slice(&(n as u32).to_le_bytes());
        // A header never straddles the end: positions and the ring are multiples of 8.
        self.map.write_bytes(RING_CTRL + (self.end % self.cap) as usize, &hdr).map_err(PushError::Fabric)?;
        self.last = Some(self.end);
        self.end += record_span(n);
        Ok(Ok(n))
    }

    /// Copies bytes `offset..offset + dst.len()` of the last appended record's payload into
    /// `dst`, as this side wrote them (no round trip across hosts).
    pub fn peek_last(&self, offset: usize, dst: &mut [u8]) -> Result<(), PushError> {
        let start = self.last.ok_or(PushError::Fabric(lanes::Error::IllegalOperation("no record was appended")))?;
        let (ranges, count) = self.payload_ranges(start, offset + dst.len());
        let mut to = 0;
        let mut skip = offset;
        for &(at, len) in &ranges[..count] {
            let from = skip.min(len);
            skip -= from;
            let take = len - from;
            self.map.peek_bytes(at + from, &mut dst[to..to + take]).map_err(PushError::Fabric)?;
            to += take;
        }
        Ok(())
    }

    /// Drops the last appended record (not published: the receiver never reads it).
    pub fn cancel_last(&mut self) {
        if let Some(start) = self.last.take() {
            self.end = start;
        }
    }

    /// Publishes every appended record with one release store of the head.
    pub fn publish(&mut self) -> Result<(), PushError> {
        self.last = None;
        if self.end == self.head {
            return Ok(());
        }
        self.head = self.end;
        self.map.store_release_u64(0, self.head).map_err(PushError::Fabric)
    }

    /// Waits until this ring's writes are delivered; `Err` if one failed (or was dropped)
    /// since the previous call ([`Map::flush_checked`]).
    pub fn flush_checked(&self) -> lanes::Result<()> {
        self.map.flush_checked()
    }

    /// Appends `parts` as one record if the ring, consumed up to `tail`, has room; then
    /// publishes it (and the records appended before it) with a release store of the head.
    pub fn push(&mut self, tail: u64, parts: &[&[u8]]) -> Result<(), PushError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > MAX_RECORD {
            return Err(PushError::TooBig(len));
        }
        if !span_ok(tail, self.head, self.cap) {
            return Err(PushError::BadTail { tail, head: self.head });
        }
        let need = record_span(len);
        if self.cap - (self.end - tail) < need {
            return Err(PushError::Full);
        }
        let mut hdr = [0u8; REC_HDR];
        hdr[..4].copy_from_slice(&(len as u32).to_le_bytes());
        // A header never straddles the end: positions and the ring are multiples of 8.
        let pos = self.end % self.cap;
        self.put(pos, &hdr)?;
        let mut at = (pos + REC_HDR as u64) % self.cap;
        for p in parts {
            self.put(at, p)?;
            at = (at + p.len() as u64) % self.cap;
        }
        self.end += need;
        self.publish()
    }

    /// Writes `bytes` at ring position `pos`, in two pieces when they run past the end.
    fn put(&self, pos: u64, bytes: &[u8]) -> Result<(), PushError> {
        let first = bytes.len().min((self.cap - pos) as usize);
        let w = |off: u64, b: &[u8]| {
            if b.is_empty() {
                return Ok(());
            }
            self.map.write_bytes(RING_CTRL + off as usize, b).map_err(PushError::Fabric)
        };
        w(pos, &bytes[..first])?;
        w(0, &bytes[first..])
    }
}

/// Why the receiving end stopped reading a ring.
#[derive(Debug)]
pub enum RingError {
    /// The head the sender published is not one a ring can have.
    BadHead { head: u64, tail: u64 },
    /// A record's length is zero, too large, or more than was published.
    BadLength { len: u64, published: u64 },
    /// The map failed.
    Fabric(lanes::Error),
}

impl std::fmt::Display for RingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RingError::BadHead { head, tail } => write!(f, "the sender published head {head} at tail {tail}"),
            RingError::BadLength { len, published } => {
                write!(f, "a record of length {len} with {published} bytes published")
            }
            RingError::Fabric(e) => write!(f, "{e}"),
        }
    }
}

/// The receiving end of ring `q` of a pair segment this node exported; reads through a
/// map of that whole segment.
#[derive(Debug)]
pub struct Consumer {
    head_off: usize,
    data_off: usize,
    cap: u64,
    tail: u64,
    /// The head last read: records up to it need no further load of the head.
    head: u64,
}

impl Consumer {
    /// Ring `q` of a fresh segment of `layout`.
    pub fn new(layout: Layout, q: usize) -> Consumer {
        let off = layout.ring_offset(q) as usize;
        Consumer { head_off: off, data_off: off + RING_CTRL, cap: layout.ring_bytes, tail: 0, head: 0 }
    }

    /// Bytes consumed so far (what the sender must see as the tail).
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// Whether the sender published records not yet taken.
    pub fn has_data(&self, map: &Map) -> bool {
        self.tail != self.head || map.load_acquire_u64(self.head_off).is_ok_and(|h| h != self.tail)
    }

    /// The next record, checked, without taking it: its payload's length and where its
    /// bytes are in `map` (one or two pieces: it may run on at the ring's start); `None` when
    /// the ring is empty. [`Consumer::take`] takes it.
    pub fn peek(&mut self, map: &Map) -> Result<Option<Record>, RingError> {
        if self.tail == self.head {
            let head = map.load_acquire_u64(self.head_off).map_err(RingError::Fabric)?;
            if !span_ok(self.tail, head, self.cap) {
                return Err(RingError::BadHead { head, tail: self.tail });
            }
            self.head = head;
            if head == self.tail {
                return Ok(None);
            }
        }
        let published = self.head - self.tail;
        let pos = self.tail % self.cap;
        let mut hdr = [0u8; REC_HDR];
        map.read_bytes(self.data_off + pos as usize, &mut hdr).map_err(RingError::Fabric)?;
        let len = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]) as usize;
        if len == 0 || len > MAX_RECORD || record_span(len) > published {
            return Err(RingError::BadLength { len: len as u64, published });
        }
        let start = (pos + REC_HDR as u64) % self.cap;
        let first = len.min((self.cap - start) as usize);
        let ranges = [(self.data_off + start as usize, first), (self.data_off, len - first)];
        Ok(Some(Record { len, ranges, pieces: if first < len { 2 } else { 1 } }))
    }

    /// Takes the record [`Consumer::peek`] returned.
    pub fn take(&mut self, record: &Record) {
        self.tail += record_span(record.len);
    }

    /// Copies the next record's payload into `buf` (at least [`MAX_RECORD`] bytes) and
    /// returns its length; `None` when the ring is empty.
    pub fn pop(&mut self, map: &Map, buf: &mut [u8]) -> Result<Option<usize>, RingError> {
        if buf.len() < MAX_RECORD {
            return Err(RingError::BadLength { len: MAX_RECORD as u64, published: buf.len() as u64 });
        }
        let Some(rec) = self.peek(map)? else { return Ok(None) };
        let mut at = 0;
        for &(off, n) in rec.ranges() {
            map.read_bytes(off, &mut buf[at..at + n]).map_err(RingError::Fabric)?;
            at += n;
        }
        self.take(&rec);
        Ok(Some(rec.len))
    }
}

/// A record in a ring, checked: its payload's length and where the payload lies in the map.
#[derive(Clone, Copy, Debug)]
pub struct Record {
    pub len: usize,
    ranges: [(usize, usize); 2],
    pieces: usize,
}

impl Record {
    /// The payload's pieces (map offset, length), in order.
    pub fn ranges(&self) -> &[(usize, usize)] {
        &self.ranges[..self.pieces]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes::{Fabric, FabricConfig, LocalSegment, MapAccess, NodeId, RemoteSegment, Timeout};

    struct Pair {
        _dir: Dir,
        _rx: Fabric,
        _tx: Fabric,
        local: LocalSegment,
        remote: RemoteSegment,
        layout: Layout,
    }

    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Node 4 receives from node 8 over one segment with `rings` rings of 128 KiB.
    fn pair(name: &str, rings: usize) -> Pair {
        let dir = std::env::temp_dir().join(format!("lanes-ip-ring-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rx = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(4).unwrap())).unwrap();
        let tx = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(8).unwrap())).unwrap();
        let layout = Layout { rings, ring_bytes: 256 << 10 };
        let local = rx.create_segment(PAIR_BASE | 8, layout.segment_bytes()).unwrap();
        let m = local.map(0, layout.segment_bytes(), MapAccess::ReadWrite).unwrap();
        write_pair_header(&m, layout, 4, 8).unwrap();
        local.prepare().unwrap();
        local.set_available().unwrap();
        let remote = tx.connect_segment(4, PAIR_BASE | 8, Timeout::Immediate).unwrap();
        Pair { _dir: Dir(dir), _rx: rx, _tx: tx, local, remote, layout }
    }

    impl Pair {
        fn producer(&self, q: usize) -> Producer {
            let map =
                self.remote.map(self.layout.ring_offset(q), self.layout.ring_len(), MapAccess::ReadWrite).unwrap();
            Producer::new(map, self.layout.ring_bytes)
        }
        fn local_map(&self) -> Map {
            self.local.map(0, self.layout.segment_bytes(), MapAccess::ReadWrite).unwrap()
        }
    }

    fn packet(i: usize) -> Vec<u8> {
        let len = 1 + (i * 7919) % 65000;
        (0..len).map(|k| (k + i) as u8).collect()
    }

    #[test]
    fn records_cross_in_order_and_wrap_around() {
        let p = pair("order", 2);
        let whole = p.remote.map(0, p.layout.segment_bytes(), MapAccess::ReadOnly).unwrap();
        assert_eq!(read_pair_header(&whole, p.remote.size(), 4, 8).unwrap(), p.layout);
        assert!(is_fresh(&whole, p.layout).unwrap());
        let mut tx = p.producer(1);
        let map = p.local_map();
        let mut rx = Consumer::new(p.layout, 1);
        let mut buf = vec![0u8; MAX_RECORD];
        let mut sent = 0;
        let mut got = 0;
        // Far more than the ring holds: every record is read back before the ring fills.
        while got < 200 {
            match tx.push(rx.tail(), &[&[9u8; VNET_HDR_LEN], &packet(sent)]) {
                Ok(()) => sent += 1,
                Err(PushError::Full) => {}
                Err(e) => panic!("{e}"),
            }
            while let Some(n) = rx.pop(&map, &mut buf).unwrap() {
                assert_eq!(&buf[..VNET_HDR_LEN], &[9u8; VNET_HDR_LEN]);
                assert_eq!(&buf[VNET_HDR_LEN..n], &packet(got)[..], "record {got}");
                got += 1;
            }
        }
        assert!(tx.head() > 4 * p.layout.ring_bytes, "the ring wrapped several times");
        assert!(!is_fresh(&whole, p.layout).unwrap());
    }

    #[test]
    fn records_read_from_a_file_into_the_ring_cross_whole_and_in_order() {
        use std::os::fd::AsFd;
        use std::os::unix::net::UnixDatagram;
        let p = pair("from-fd", 1);
        let mut tx = p.producer(0);
        let map = p.local_map();
        let mut rx = Consumer::new(p.layout, 0);
        // Datagrams stand for TUN packets: one per read, one per write.
        let (tun_in, ring_in) = UnixDatagram::pair().unwrap();
        let (ring_out, tun_out) = UnixDatagram::pair().unwrap();
        let record = |i: usize| {
            let mut r = vec![i as u8; VNET_HDR_LEN];
            r.extend(packet(i).iter().take(60_000));
            r
        };
        let mut back = vec![0u8; MAX_RECORD + 64];
        let (mut sent, mut got, mut appended) = (0, 0, 0);
        while got < 120 {
            // A few records per published batch; every fifth one appended is taken back.
            for _ in 0..3 {
                if !tx.has_room(rx.tail(), None).unwrap() {
                    break;
                }
                tun_in.send(&record(sent)).unwrap();
                let n = tx.append_from_fd(rx.tail(), ring_in.as_fd()).unwrap().unwrap();
                assert_eq!(n, record(sent).len());
                let mut first = [0u8; VNET_HDR_LEN + 4];
                let seen = n.min(first.len());
                tx.peek_last(0, &mut first[..seen]).unwrap();
                assert_eq!(&first[..seen], &record(sent)[..seen]);
                appended += 1;
                if appended % 5 == 0 {
                    tx.cancel_last();
                }
                sent += 1;
            }
            let head = tx.head();
            assert!(rx.peek(&map).unwrap().is_none() || rx.tail() < head, "nothing unpublished is seen");
            tx.publish().unwrap();
            while let Some(rec) = rx.peek(&map).unwrap() {
                assert_eq!(map.write_to_fd(ring_out.as_fd(), rec.ranges()).unwrap().unwrap(), rec.len);
                rx.take(&rec);
                let n = tun_out.recv(&mut back).unwrap();
                // Every fifth record appended was taken back.
                let want = got / 4 * 5 + got % 4;
                assert_eq!(&back[..n], &record(want)[..], "record {got}");
                got += 1;
            }
        }
        assert!(tx.head() > 4 * p.layout.ring_bytes, "the ring wrapped several times");
        // Nothing in the file: the read's error, nothing appended.
        ring_in.set_nonblocking(true).unwrap();
        let before = tx.unpublished();
        let e = tx.append_from_fd(rx.tail(), ring_in.as_fd()).unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        assert_eq!(tx.unpublished(), before);
    }

    #[test]
    fn a_full_ring_refuses_and_a_huge_record_is_too_big() {
        let p = pair("full", 1);
        let mut tx = p.producer(0);
        let big = vec![1u8; MAX_RECORD];
        let mut n = 0;
        while tx.push(0, &[&big]).is_ok() {
            n += 1;
        }
        assert_eq!(n as u64, p.layout.ring_bytes / record_span(MAX_RECORD));
        assert!(matches!(tx.push(0, &[&big]), Err(PushError::Full)));
        assert!(matches!(tx.push(0, &[&big, &[0]]), Err(PushError::TooBig(_))));
        assert!(!tx.has_room(0, None).unwrap());
        let (_a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        assert!(matches!(tx.append_from_fd(0, std::os::fd::AsFd::as_fd(&b)), Err(PushError::Full)));
    }

    #[test]
    fn a_hostile_sender_gets_errors_never_a_read_outside() {
        let p = pair("hostile-tx", 1);
        let map = p.local_map();
        let raw = p.remote.map(p.layout.ring_offset(0), p.layout.ring_len(), MapAccess::ReadWrite).unwrap();
        let mut buf = vec![0u8; MAX_RECORD];
        // Heads no ring can have.
        for head in [u64::MAX, p.layout.ring_bytes + 8, 3] {
            raw.write::<u64>(0, head).unwrap();
            let mut rx = Consumer::new(p.layout, 0);
            assert!(matches!(rx.pop(&map, &mut buf), Err(RingError::BadHead { .. })), "head {head}");
        }
        // Lengths larger than what was published, than any record, or zero.
        for (len, head) in
            [(u32::MAX, 64u64), (0x7fff_fff8, p.layout.ring_bytes), (0, 8), (100, 64), (57, 64), (56, 64)]
        {
            raw.write_bytes(RING_CTRL, &len.to_le_bytes()).unwrap();
            raw.write::<u64>(0, head).unwrap();
            let mut rx = Consumer::new(p.layout, 0);
            match rx.pop(&map, &mut buf) {
                Err(RingError::BadLength { .. }) => {}
                // 56 bytes of payload span exactly 64 with the header: a valid record.
                Ok(Some(56)) if len == 56 => {}
                other => panic!("length {len} head {head}: {other:?}"),
            }
        }
        // A record whose payload wraps past the end is read in two checked pieces.
        let cap = p.layout.ring_bytes;
        let mut rx = Consumer::new(p.layout, 0);
        rx.tail = cap - 16;
        rx.head = cap - 16;
        raw.write_bytes(RING_CTRL + (cap - 16) as usize, &40u32.to_le_bytes()).unwrap();
        raw.write::<u64>(0, cap - 16 + record_span(40)).unwrap();
        assert_eq!(rx.pop(&map, &mut buf).unwrap(), Some(40));
    }

    #[test]
    fn a_hostile_receiver_tail_is_refused() {
        let p = pair("hostile-rx", 1);
        let mut tx = p.producer(0);
        tx.push(0, &[&[1, 2, 3]]).unwrap();
        for tail in [tx.head() + 8, 3, u64::MAX] {
            assert!(matches!(tx.push(tail, &[&[1]]), Err(PushError::BadTail { .. })), "tail {tail}");
        }
    }

    #[test]
    fn foreign_headers_and_hellos_are_named() {
        let p = pair("headers", 1);
        let m = p.local_map();
        let whole = p.remote.map(0, p.layout.segment_bytes(), MapAccess::ReadOnly).unwrap();
        m.write::<u32>(12, 99).unwrap();
        assert!(read_pair_header(&whole, p.remote.size(), 4, 8).unwrap_err().contains("99 rings"));
        m.write::<u32>(12, 1).unwrap();
        m.write::<u64>(16, 1 << 40).unwrap();
        assert!(read_pair_header(&whole, p.remote.size(), 4, 8).unwrap_err().contains("rings of"));
        m.write::<u64>(16, p.layout.ring_bytes).unwrap();
        assert!(read_pair_header(&whole, p.remote.size(), 4, 12).unwrap_err().contains("names nodes 4 and 8"));
        m.write::<u64>(0, 7).unwrap();
        assert!(read_pair_header(&whole, p.remote.size(), 4, 8).unwrap_err().contains("foreign"));
        assert!(read_hello(&whole, 4).unwrap_err().contains("not an IP interface"));
        write_hello(&m, Hello { node: 4, queues: 2, mtu: 9000 }).unwrap();
        assert_eq!(read_hello(&whole, 4).unwrap(), Hello { node: 4, queues: 2, mtu: 9000 });
        assert!(read_hello(&whole, 8).unwrap_err().contains("names node 4"));
    }
}
