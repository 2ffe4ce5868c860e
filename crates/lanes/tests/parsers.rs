//! Property tests of every parser of shared state (issue 31): object headers, socket
//! records, export records, process records, the daemons' frames and messages, and
//! `lanes.toml`. Hostile or corrupt bytes must be an error with a reason, never a panic, a
//! hang or an access outside the file; valid inputs must round-trip.
//!
//! Only the public API is used, so the tests follow the formats as their owners change
//! them (the socket record's template, for one, is a record `Endpoint::create` wrote).
//! Each property runs a modest number of cases (`PROPTEST_CASES` overrides them all).

use std::fs;
use std::io::{self, Read};
use std::mem::offset_of;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde::de::DeserializeOwned;

use lanes::cluster::config::{parse_address, IdleProgress};
use lanes::cluster::exports::{self, ExportRecord, SlotKey, MAX_RECORD};
use lanes::cluster::proto::{
    encode, AddressOwner, Answer, Fill, FrameError, FrameReader, GrantStatus, HalfRegistration, HalfStatus, HostState,
    HostStatus, NodeEvent, ObjectKind, PeerMessage, Query, Refusal, Reply, Request, SocketsStatus, WireHalf,
    HEADER_LEN, MAGIC, MAX_FRAME, PROTOCOL_VERSION,
};
use lanes::config::{parse_port_list, ConfigFile, NodeId};
use lanes::platform::liveness::{self, ProcessIdentity};
use lanes::sockets::direction::MAX_RING_BYTES;
use lanes::sockets::endpoint::{sockets_dir, ConnectionKey, Endpoint, MIN_RING_BYTES, RING_OFFSET};
use lanes::transport::shm::layout::{
    create_flags, kind, ConnectionSlot, SegmentHeader, HEADER_PAGE, LAYOUT_VERSION, MAX_CONNECTIONS, MAX_RECEIVERS,
    SEGMENT_MAGIC,
};
use lanes::transport::shm::segment_file::{OpenError, SegmentFile};
use lanes::transport::shm::FabricPaths;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

/// A fresh directory, removed when dropped (also when a property fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lanes-parsers-{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("creating a scratch directory");
        Scratch(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Next to this file (`parsers.proptest-regressions`): an integration test has no
        // lib.rs for the default place to be found from.
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    }
}

/// Runs `f` on a thread and fails if it takes longer than `limit` (a parser that blocks,
/// e.g. on opening a FIFO, must not hang its caller).
fn within<T: Send + 'static>(what: &str, limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| panic!("{what} did not return within {limit:?}"))
}

fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo").arg(path).status().expect("running mkfifo").success();
    assert!(ok, "mkfifo {}", path.display());
}

/// Writes `edits` (offset modulo the buffer's length, byte) into `buf`.
fn apply_edits(buf: &mut [u8], edits: &[(usize, u8)]) {
    if buf.is_empty() {
        return;
    }
    let len = buf.len();
    for &(at, b) in edits {
        buf[at % len] = b;
    }
}

// ---------------------------------------------------------------------------------------
// 1. Object headers (transport::shm::layout) and object files (segment_file::open_path)
// ---------------------------------------------------------------------------------------

const PID_MASK: u64 = (1 << 22) - 1;

/// The fields of a header as the file holds them (not necessarily valid).
#[derive(Clone, Debug)]
struct Header {
    magic: u64,
    version: u32,
    header_size: u32,
    segment_size: u64,
    data_offset: u64,
    node_id: u32,
    segment_id: u32,
    owner: u64,
    create_flags: u32,
    kind: u32,
}

impl Header {
    fn valid(kind: u32, node: u32, id: u32, segment_size: u64, data_offset: u64, owner: u64, flags: u32) -> Header {
        Header {
            magic: SEGMENT_MAGIC,
            version: LAYOUT_VERSION,
            header_size: std::mem::size_of::<SegmentHeader>() as u32,
            segment_size,
            data_offset,
            node_id: node,
            segment_id: id,
            owner,
            create_flags: flags,
            kind,
        }
    }

    /// The header page (the library reads it with native-endian atomics).
    fn page(&self) -> Vec<u8> {
        let mut p = vec![0u8; HEADER_PAGE];
        let mut put = |at: usize, bytes: &[u8]| p[at..at + bytes.len()].copy_from_slice(bytes);
        put(offset_of!(SegmentHeader, magic), &self.magic.to_ne_bytes());
        put(offset_of!(SegmentHeader, layout_version), &self.version.to_ne_bytes());
        put(offset_of!(SegmentHeader, header_size), &self.header_size.to_ne_bytes());
        put(offset_of!(SegmentHeader, segment_size), &self.segment_size.to_ne_bytes());
        put(offset_of!(SegmentHeader, data_offset), &self.data_offset.to_ne_bytes());
        put(offset_of!(SegmentHeader, node_id), &self.node_id.to_ne_bytes());
        put(offset_of!(SegmentHeader, segment_id), &self.segment_id.to_ne_bytes());
        put(offset_of!(SegmentHeader, owner), &self.owner.to_ne_bytes());
        put(offset_of!(SegmentHeader, create_flags), &self.create_flags.to_ne_bytes());
        put(offset_of!(SegmentHeader, kind), &self.kind.to_ne_bytes());
        p
    }
}

fn object_kind_u32() -> impl Strategy<Value = u32> {
    prop::sample::select(kind::ALL.to_vec())
}

/// A packed process identity with a pid (never "nobody").
fn owner_bits() -> impl Strategy<Value = u64> {
    (any::<u64>(), 1..=PID_MASK).prop_map(|(high, pid)| (high & !PID_MASK) | pid)
}

/// A header that validates in a file of at least `data_offset + segment_size` bytes.
fn valid_header() -> impl Strategy<Value = Header> {
    (
        object_kind_u32(),
        any::<u32>(),
        any::<u32>(),
        1..=3 * 4096u64,
        0..=2 * 4096u64,
        owner_bits(),
        0..=create_flags::ALL,
    )
        .prop_map(|(k, node, id, size, extra, owner, flags)| {
            Header::valid(k, node, id, size, HEADER_PAGE as u64 + extra, owner, flags)
        })
}

/// The bytes of an object file: a valid header with some bytes of its first 128 changed
/// (where every validated field lies), or random bytes; then cut or extended.
fn object_file_bytes() -> impl Strategy<Value = (Header, Vec<u8>)> {
    let edited = (valid_header(), vec((0usize..128, any::<u8>()), 0..4), option::of(0usize..4 * 4096)).prop_map(
        |(h, edits, cut)| {
            let mut f = h.page();
            f.resize((h.data_offset + h.segment_size) as usize, 0x5a);
            apply_edits(&mut f[..128], &edits);
            if let Some(len) = cut {
                f.resize(len, 0);
            }
            (h, f)
        },
    );
    let random = (valid_header(), vec(any::<u8>(), 0..2 * HEADER_PAGE + 100));
    prop_oneof![4 => edited, 1 => random]
}

/// What a successfully opened object file must satisfy, whatever its bytes were.
fn check_opened(f: &SegmentFile, want: (u32, u32, u32), file_len: u64) {
    let s = f.snapshot();
    assert_eq!((s.kind, s.node_id, s.segment_id), want);
    assert!(s.segment_size > 0);
    assert!(s.data_offset >= HEADER_PAGE as u64);
    let end = s.data_offset.checked_add(s.segment_size).expect("no overflow");
    assert!(end <= file_len, "segment ends at {end}, file has {file_len}");
    assert_eq!(s.create_flags & !create_flags::ALL, 0);
    assert_ne!(s.owner.pid(), 0);
}

/// Opens `path` as the object `want` names; fails the property on anything but Ok or Corrupt.
fn open_object(path: &Path, want: (u32, u32, u32)) -> Result<SegmentFile, String> {
    match SegmentFile::open_path(path, want.0, want.1, want.2) {
        Ok(f) => Ok(f),
        Err(OpenError::Corrupt(why)) => {
            assert!(!why.is_empty());
            Err(why)
        }
        Err(OpenError::Missing) => panic!("{} reported missing", path.display()),
        Err(OpenError::Io(e)) => panic!("{}: unexpected I/O error {e}", path.display()),
    }
}

/// Writes `bytes` at `offset` of the file at `path` (mapped by an open SegmentFile: the
/// page cache makes the write visible in the mapping).
fn poke(path: &Path, offset: usize, bytes: &[u8]) {
    let f = fs::OpenOptions::new().write(true).open(path).expect("opening for a write");
    f.write_all_at(bytes, offset as u64).expect("writing");
}

proptest! {
    #![proptest_config(config(256))]

    /// Any file contents and length: `open_path` gives Ok (and then the snapshot bounds every
    /// access inside the file) or `Corrupt`, never a panic or an out-of-file mapping.
    #[test]
    fn object_files_of_any_bytes_open_or_are_corrupt((h, bytes) in object_file_bytes()) {
        let dir = Scratch::new("objects");
        let path = dir.path().join("obj");
        fs::write(&path, &bytes).unwrap();
        let want = (h.kind, h.node_id, h.segment_id);
        if let Ok(f) = open_object(&path, want) {
            check_opened(&f, want, bytes.len() as u64);
            // The parts read after opening are bounded too.
            let _ = f.header().state();
            if let Ok(r) = f.header().receivers() {
                prop_assert!(r.len() <= MAX_RECEIVERS);
            }
            let len = f.snapshot().segment_size;
            prop_assert!(f.map_data(0, len, lanes::platform::mapping::Access::ReadOnly).is_ok());
            prop_assert!(f.map_data(0, len + 1, lanes::platform::mapping::Access::ReadOnly).is_err());
            prop_assert!(f.map_data(len, u64::MAX, lanes::platform::mapping::Access::ReadOnly).is_err());
        }
    }

    /// A valid header opens and reads back exactly; one byte less of file, or another
    /// object's name, is Corrupt.
    #[test]
    fn valid_headers_round_trip(h in valid_header(), slack in 0u64..4096, other in any::<u32>()) {
        let dir = Scratch::new("headers");
        let path = dir.path().join("obj");
        let end = h.data_offset + h.segment_size;
        let mut bytes = h.page();
        bytes.resize((end + slack) as usize, 0);
        fs::write(&path, &bytes).unwrap();
        let want = (h.kind, h.node_id, h.segment_id);
        let f = open_object(&path, want).expect("a valid header opens");
        let s = *f.snapshot();
        prop_assert_eq!(
            (s.kind, s.node_id, s.segment_id, s.segment_size, s.data_offset, s.owner.bits(), s.create_flags),
            (h.kind, h.node_id, h.segment_id, h.segment_size, h.data_offset, h.owner, h.create_flags)
        );
        drop(f);
        if other != h.segment_id {
            prop_assert!(open_object(&path, (h.kind, h.node_id, other)).is_err());
        }
        if other != h.node_id {
            prop_assert!(open_object(&path, (h.kind, other, h.segment_id)).is_err());
        }
        let k = kind::ALL[other as usize % kind::ALL.len()];
        if k != h.kind {
            prop_assert!(open_object(&path, (k, h.node_id, h.segment_id)).is_err());
        }
        fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(end - 1).unwrap();
        let why = open_object(&path, want).expect_err("a file shorter than its segment");
        prop_assert!(why.contains("ends at byte") || why.contains("shorter"), "{}", why);
    }

    /// The bounds check holds for any 64-bit size, offset and file length (no overflow).
    #[test]
    fn header_bounds_hold_for_any_sizes(
        h in valid_header(),
        size in prop_oneof![any::<u64>(), 0..=8192u64, (u64::MAX - 8192)..=u64::MAX],
        offset in prop_oneof![any::<u64>(), 0..=8192u64, (u64::MAX - 8192)..=u64::MAX],
        file_len in prop_oneof![any::<u64>(), 0..=3 * 8192u64, Just(u64::MAX)],
    ) {
        let dir = Scratch::new("bounds");
        let path = dir.path().join("obj");
        let mut bytes = h.page();
        bytes.resize((h.data_offset + h.segment_size) as usize, 0);
        fs::write(&path, &bytes).unwrap();
        let want = (h.kind, h.node_id, h.segment_id);
        let f = open_object(&path, want).expect("a valid header opens");
        poke(&path, offset_of!(SegmentHeader, segment_size), &size.to_ne_bytes());
        poke(&path, offset_of!(SegmentHeader, data_offset), &offset.to_ne_bytes());
        let got = f.header().validate(want.0, want.1, want.2, file_len);
        let fits = size > 0
            && offset >= HEADER_PAGE as u64
            && offset.checked_add(size).is_some_and(|end| end <= file_len);
        prop_assert_eq!(got.is_ok(), fits, "{:?}", got);
        if let Ok(s) = got {
            prop_assert_eq!((s.segment_size, s.data_offset), (size, offset));
        }
        // And the file itself, opened anew, is judged by its real length.
        if let Ok(g) = open_object(&path, want) {
            check_opened(&g, want, bytes.len() as u64);
        }
    }

    /// A receiver list of any length is read within its array or refused.
    #[test]
    fn receiver_lists_of_any_length(h in valid_header(), n in prop_oneof![0..=80u32, any::<u32>()], fill in any::<u32>()) {
        let dir = Scratch::new("receivers");
        let path = dir.path().join("obj");
        let mut bytes = h.page();
        bytes.resize((h.data_offset + h.segment_size) as usize, 0);
        let base = offset_of!(SegmentHeader, receivers);
        for i in 0..MAX_RECEIVERS {
            bytes[base + 4 * i..base + 4 * i + 4].copy_from_slice(&fill.wrapping_add(i as u32).to_ne_bytes());
        }
        let at = offset_of!(SegmentHeader, receivers_len);
        bytes[at..at + 4].copy_from_slice(&n.to_ne_bytes());
        fs::write(&path, &bytes).unwrap();
        let f = open_object(&path, (h.kind, h.node_id, h.segment_id)).expect("a valid header opens");
        match f.header().receivers() {
            Ok(r) => {
                prop_assert!(n as usize <= MAX_RECEIVERS);
                let want: Vec<u32> = (0..n).map(|i| fill.wrapping_add(i)).collect();
                prop_assert_eq!(r, want);
            }
            Err(why) => prop_assert!(n as usize > MAX_RECEIVERS, "{}", why),
        }
    }
}

/// Connection slots of arbitrary bytes; at most `odd` of them locked (odd generation), since
/// a locked slot is waited on for a while before it is skipped.
fn slot_bytes(odd: usize) -> impl Strategy<Value = Vec<u8>> {
    let slot = size_of_slot();
    (vec(any::<u8>(), MAX_CONNECTIONS * slot), vec(0..MAX_CONNECTIONS, 0..=odd), vec(0..MAX_CONNECTIONS, 0..40))
        .prop_map(move |(mut b, locked, free)| {
            let g = offset_of!(ConnectionSlot, generation);
            for i in 0..MAX_CONNECTIONS {
                b[i * slot + g] &= !1; // even: not locked
            }
            for i in locked {
                b[i * slot + g] |= 1;
            }
            // Some free slots (peer 0), so that a claim can succeed.
            let p = offset_of!(ConnectionSlot, peer);
            for i in free {
                b[i * slot + p..i * slot + p + 8].fill(0);
            }
            b
        })
}

fn size_of_slot() -> usize {
    std::mem::size_of::<ConnectionSlot>()
}

proptest! {
    #![proptest_config(config(64))]

    /// Slots of any contents: listing, claiming and releasing stay inside the slot array,
    /// finish, and claim only a slot that was free.
    #[test]
    // Nodes below 2^31: the slot's top node bit marks a daemon's proxy (node ids are at most 65532).
    fn connection_slots_of_any_bytes(h in valid_header(), slots in slot_bytes(2), me in owner_bits(), node in 0..=0x7fff_ffffu32) {
        let dir = Scratch::new("slots");
        let path = dir.path().join("obj");
        let mut bytes = h.page();
        bytes.resize((h.data_offset + h.segment_size) as usize, 0);
        let base = offset_of!(SegmentHeader, connections);
        bytes[base..base + slots.len()].copy_from_slice(&slots);
        fs::write(&path, &bytes).unwrap();
        let f = open_object(&path, (h.kind, h.node_id, h.segment_id)).expect("a valid header opens");
        let header = f.header();
        for (_, holder, _) in header.connections() {
            prop_assert_ne!(holder.pid(), 0);
        }
        let me = ProcessIdentity::from_bits(me).unwrap();
        if let Some(i) = header.claim_slot(me, node, |_, _| false) {
            prop_assert!(i < MAX_CONNECTIONS);
            let peer = offset_of!(ConnectionSlot, peer);
            let before = u64::from_ne_bytes(slots[i * size_of_slot() + peer..][..8].try_into().unwrap());
            prop_assert_eq!(before, 0, "slot {} was not free", i);
            let s = header.slot(i).expect("an unlocked slot");
            prop_assert_eq!((s.holder, s.node), (Some(me), node));
            header.release_slot(i, me);
            prop_assert_eq!(header.slot(i).expect("an unlocked slot").holder, None);
        }
        header.release_slot(MAX_CONNECTIONS, me); // out of range: ignored
        header.release_slot(usize::MAX, me);
    }
}

fn object_file_name_like() -> impl Strategy<Value = String> {
    prop_oneof![
        "(seg|int|dint|refl|x)-[0-9a-fA-F+ -]{0,10}",
        "(seg|int|dint|refl)-[+0-9a-fA-F][0-9a-fA-F]{7}",
        (object_kind_u32(), any::<u32>()).prop_map(|(k, id)| FabricPaths::object_file_name(k, id)),
        "\\PC{0,20}",
    ]
}

proptest! {
    #![proptest_config(config(256))]

    /// Object file names round-trip, and a name is accepted only in the form the library
    /// writes it: another spelling of the same id would be a second name for one object.
    #[test]
    fn object_file_names_round_trip(k in object_kind_u32(), id in any::<u32>(), name in object_file_name_like()) {
        prop_assert_eq!(FabricPaths::parse_object_file_name(&FabricPaths::object_file_name(k, id)), Some((k, id)));
        if let Some((k, id)) = FabricPaths::parse_object_file_name(&name) {
            prop_assert_eq!(FabricPaths::object_file_name(k, id), name);
        }
    }
}

// ---------------------------------------------------------------------------------------
// 2. Socket records (sockets::endpoint::Endpoint::open)
// ---------------------------------------------------------------------------------------

fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        any::<SocketAddr>(),
        (any::<[u8; 4]>(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(IpAddr::from(ip), port)),
        // IPv4-mapped IPv6, which keys as IPv4.
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V6(std::net::Ipv4Addr::from(ip).to_ipv6_mapped()), port)),
        any::<u16>().prop_map(|port| SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port)),
    ]
}

fn connection_key() -> impl Strategy<Value = ConnectionKey> {
    (any::<u64>(), socket_addr(), socket_addr()).prop_map(|(netns, l, r)| ConnectionKey::new(netns, l, r))
}

/// A record as `Endpoint::create` writes it, to edit (the test does not hard-code the layout).
fn template_record(dir: &Path, key: &ConnectionKey, cookie: u64, ring: usize) -> Vec<u8> {
    let ep = Endpoint::create(dir, key, cookie, ring).expect("creating a socket record");
    let path = ep.path().to_path_buf();
    drop(ep);
    fs::read(path).expect("reading the record")
}

fn check_endpoint(ep: &Endpoint, key: &ConnectionKey, file_len: u64) {
    let ring = ep.ring_bytes();
    assert!(ring.is_power_of_two() && (MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring), "ring {ring}");
    assert!((RING_OFFSET + ring) as u64 <= file_len, "ring of {ring} in a file of {file_len}");
    assert_eq!(ep.key(), key);
}

proptest! {
    #![proptest_config(config(256))]

    /// A record with bytes of its header page changed, cut or extended to any length, or
    /// replaced by random bytes: `open` validates it or refuses it, and an opened record's
    /// ring lies inside the file.
    #[test]
    fn socket_records_of_any_bytes_open_or_are_refused(
        key in connection_key(),
        ring in MIN_RING_BYTES..=4 * MIN_RING_BYTES,
        edits in vec((0usize..RING_OFFSET, any::<u8>()), 0..6),
        header_edits in vec((0usize..128, any::<u8>()), 0..3),
        len in option::of(prop_oneof![0usize..3 * 4096, 0usize..RING_OFFSET + 8 * MIN_RING_BYTES]),
        random in option::of(vec(any::<u8>(), 0..3 * 4096)),
    ) {
        let dir = Scratch::new("sockets");
        let mut bytes = match random {
            Some(r) => r,
            None => template_record(dir.path(), &key, 42, ring),
        };
        apply_edits(&mut bytes, &edits);
        let head = 128.min(bytes.len());
        apply_edits(&mut bytes[..head], &header_edits);
        if let Some(len) = len {
            bytes.resize(len, 0);
        }
        let path = sockets_dir(dir.path()).join(key.file_name());
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, &bytes).unwrap();
        match Endpoint::open(dir.path(), &key) {
            Ok(ep) => {
                check_endpoint(&ep, &key, bytes.len() as u64);
                // Reading the mapped words of a garbage record is harmless.
                let _ = (ep.holders(), ep.has_flag(u32::MAX), ep.tx_word().load());
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    /// A record `create` wrote opens with the same key, cookie and ring; the key round-trips
    /// through the file name.
    #[test]
    fn socket_records_round_trip(key in connection_key(), cookie in any::<u64>(), ring in MIN_RING_BYTES..=(1usize << 20)) {
        let dir = Scratch::new("sockets-rt");
        prop_assert_eq!(ConnectionKey::parse(&key.file_name()), Some(key));
        let made = Endpoint::create(dir.path(), &key, cookie, ring).expect("creating a socket record");
        let opened = Endpoint::open(dir.path(), &key).expect("opening the record just made");
        prop_assert_eq!((opened.cookie(), opened.ring_bytes(), opened.key()), (cookie, made.ring_bytes(), &key));
        prop_assert!(made.ring_bytes() >= ring && made.ring_bytes().is_power_of_two());
        let file_len = fs::metadata(made.path()).unwrap().len();
        check_endpoint(&opened, &key, file_len);
        if key.reversed() != key {
            prop_assert!(Endpoint::open(dir.path(), &key.reversed()).is_err());
        }
    }

    /// Any file name: parsing never panics, and what parses names a key.
    #[test]
    fn socket_record_names_parse_or_not(name in prop_oneof!["tcp-[0-9a-f+]{0,17}-[0-9.:\\[\\]a-f%]{0,30}-[0-9.:\\[\\]a-f]{0,30}", "\\PC{0,40}"]) {
        if let Some(k) = ConnectionKey::parse(&name) {
            // Only a key's own spelling parses (`+7`, `07` or a port `:05` would be second
            // names for one connection), and it parses back to the same key.
            prop_assert_eq!(k.file_name(), name.clone());
            prop_assert_eq!(ConnectionKey::parse(&k.file_name()), Some(k));
        }
    }
}

// ---------------------------------------------------------------------------------------
// 3. Export records (cluster::exports)
// ---------------------------------------------------------------------------------------

fn object_kind() -> impl Strategy<Value = ObjectKind> {
    prop_oneof![
        Just(ObjectKind::Segment),
        Just(ObjectKind::Interrupt),
        Just(ObjectKind::DataInterrupt),
        Just(ObjectKind::Reflective),
    ]
}

fn export_record() -> impl Strategy<Value = ExportRecord> {
    (
        (object_kind(), any::<u32>(), any::<u32>(), any::<u32>(), any::<u64>()),
        ("\\PC{0,24}", vec(any::<u8>(), 1..40), any::<u64>(), any::<u64>(), any::<u64>()),
        (any::<u32>(), any::<u64>(), any::<bool>(), vec((any::<u32>(), any::<u32>(), any::<u64>()), 0..4)),
    )
        .prop_map(
            |(
                (kind, node, id, owner_pid, owner_identity),
                (provider, ep, key, base, len),
                (handle, epoch, in_place, slot_keys),
            )| {
                ExportRecord {
                    kind,
                    node,
                    id,
                    owner_pid,
                    owner_identity,
                    provider,
                    endpoint: ep.iter().map(|b| format!("{b:02x}")).collect(),
                    key,
                    base,
                    len,
                    handle,
                    epoch,
                    in_place,
                    slot_keys: slot_keys
                        .into_iter()
                        .map(|(slot, generation, key)| SlotKey { slot, generation, key })
                        .collect(),
                }
            },
        )
}

/// Bytes for a record file: random, a record's JSON with some bytes changed or cut, or JSON
/// of the right shape with wrong values.
fn export_file_bytes() -> impl Strategy<Value = Vec<u8>> {
    let edited = (export_record(), vec((any::<usize>(), any::<u8>()), 0..4), option::of(any::<usize>())).prop_map(
        |(r, edits, cut)| {
            let mut b = serde_json::to_vec(&r).unwrap();
            apply_edits(&mut b, &edits);
            if let Some(cut) = cut {
                b.truncate(cut % (b.len() + 1));
            }
            b
        },
    );
    let wrong = (export_record(), "[a-z_]{1,16}", json_value()).prop_map(|(r, field, v)| {
        let mut j = serde_json::to_value(&r).unwrap();
        j.as_object_mut().unwrap().insert(field, v);
        serde_json::to_vec(&j).unwrap()
    });
    prop_oneof![vec(any::<u8>(), 0..200), edited, wrong, json_value().prop_map(|v| serde_json::to_vec(&v).unwrap())]
}

/// Any JSON value, a few levels deep.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::String),
        prop::sample::select(vec!["segment", "reflective", "hello", "lookup", "connect", "00ff", "poll"])
            .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec(("[a-z_]{1,10}", inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(config(256))]

    /// Any bytes in a record file: `read` gives the record of exactly that object or a
    /// reason, never a panic.
    #[test]
    fn export_records_of_any_bytes_read_or_are_refused(
        kind in object_kind(), node in any::<u32>(), id in any::<u32>(), bytes in export_file_bytes(),
    ) {
        let dir = Scratch::new("exports");
        let path = exports::record_path(dir.path(), kind, node, id);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, &bytes).unwrap();
        match exports::read(dir.path(), kind, node, id) {
            Ok(Some(r)) => {
                prop_assert_eq!((r.kind, r.node, r.id), (kind, node, id));
                prop_assert!(!r.endpoint.is_empty() && r.endpoint.len() % 2 == 0);
            }
            Ok(None) => prop_assert!(false, "a record file that exists read as none"),
            Err(why) => prop_assert!(why.contains("export record"), "{}", why),
        }
    }

    /// A published record reads back equal, and a sweep with its owner alive keeps it, for
    /// every kind of object.
    #[test]
    fn export_records_round_trip(rec in export_record()) {
        let dir = Scratch::new("exports-rt");
        exports::publish(dir.path(), &rec).expect("publishing");
        prop_assert_eq!(exports::read(dir.path(), rec.kind, rec.node, rec.id), Ok(Some(rec.clone())));
        let removed = exports::sweep(dir.path(), |_, _, _| true);
        prop_assert!(removed.is_empty(), "a live owner's record was swept: {:?}", removed);
        prop_assert_eq!(exports::read(dir.path(), rec.kind, rec.node, rec.id), Ok(Some(rec)));
    }

    /// Files of any name and contents in the records' directory: a sweep (owners alive)
    /// leaves only records that read back under their own name, other files it does not
    /// judge (no `.json`), and a live writer's temporary file.
    #[test]
    fn sweeping_any_files_leaves_only_valid_records(
        files in vec((prop_oneof![
            "(segment|interrupt|data-interrupt|reflective|x)-[0-9+ -]{0,6}-[0-9a-fA-F+]{0,9}\\.json",
            "\\.tmp-[0-9]{0,8}-[0-9]{0,3}",
            "[a-z.-]{1,12}",
        ], export_file_bytes()), 0..6),
        recs in vec(export_record(), 0..3),
    ) {
        let dir = Scratch::new("sweep");
        let edir = dir.path().join(exports::EXPORTS_DIR);
        fs::create_dir_all(&edir).unwrap();
        for (name, bytes) in &files {
            let _ = fs::write(edir.join(name), bytes); // "." and ".." are no files
        }
        for r in &recs {
            exports::publish(dir.path(), r).unwrap();
        }
        exports::sweep(dir.path(), |_, _, _| true);
        for e in fs::read_dir(&edir).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if !name.ends_with(".json") || name.starts_with(".tmp-") {
                continue;
            }
            // What is kept is a record under the very name `record_path` gives it.
            let (k, node, id) = name_of(&name).unwrap_or_else(|| panic!("{name:?} was kept but names no object"));
            let canonical = exports::record_path(dir.path(), k, node, id);
            prop_assert_eq!(canonical.file_name().unwrap().to_str(), Some(name.as_str()));
            let got = exports::read(dir.path(), k, node, id);
            prop_assert!(matches!(got, Ok(Some(_))), "{} was kept: {:?}", name, got);
        }
        for r in &recs {
            prop_assert!(exports::read(dir.path(), r.kind, r.node, r.id).is_ok_and(|got| got.is_some()));
        }
    }
}

/// The object a record file name stands for, if it is a name `record_path` writes.
fn name_of(name: &str) -> Option<(ObjectKind, u32, u32)> {
    let stem = name.strip_suffix(".json")?;
    let (rest, id) = stem.rsplit_once('-')?;
    let (kind, node) = rest.rsplit_once('-')?;
    let kind = match kind {
        "segment" => ObjectKind::Segment,
        "interrupt" => ObjectKind::Interrupt,
        "data-interrupt" => ObjectKind::DataInterrupt,
        "reflective" => ObjectKind::Reflective,
        _ => return None,
    };
    Some((kind, node.parse().ok()?, u32::from_str_radix(id, 16).ok()?))
}

#[test]
fn an_export_record_that_is_a_fifo_is_refused_without_blocking() {
    let dir = Scratch::new("exports-fifo");
    let path = exports::record_path(dir.path(), ObjectKind::Segment, 8, 0x10);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    mkfifo(&path);
    let d = dir.path().to_path_buf();
    let got = within("reading a FIFO as an export record", Duration::from_secs(5), move || {
        exports::read(&d, ObjectKind::Segment, 8, 0x10)
    });
    assert!(matches!(&got, Err(why) if why.contains("not a regular file")), "{got:?}");
    let d = dir.path().to_path_buf();
    let removed = within("sweeping a FIFO", Duration::from_secs(5), move || exports::sweep(&d, |_, _, _| true));
    assert_eq!(removed.len(), 1, "{removed:?}");
}

#[test]
fn an_export_record_larger_than_the_limit_is_refused() {
    let dir = Scratch::new("exports-big");
    let path = exports::record_path(dir.path(), ObjectKind::Segment, 8, 0x10);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    // Sparse: 1 GiB announced, nothing read past the limit.
    fs::File::create(&path).unwrap().set_len(1 << 30).unwrap();
    let got = exports::read(dir.path(), ObjectKind::Segment, 8, 0x10);
    assert!(matches!(&got, Err(why) if why.contains(&format!("exceeds {MAX_RECORD}"))), "{got:?}");
}

// ---------------------------------------------------------------------------------------
// 4. Process records (platform::liveness::list_records)
// ---------------------------------------------------------------------------------------

const PROCESS_MAGIC: &[u8; 8] = b"LANESPRC";

/// Record contents: random, or a well-formed record (magic, version 1, node, identity)
/// with some bytes changed or cut.
fn process_record_bytes() -> impl Strategy<Value = Vec<u8>> {
    let formed = (any::<u32>(), any::<u64>(), vec((0usize..40, any::<u8>()), 0..3), 0usize..48).prop_map(
        |(node, identity, edits, len)| {
            let mut r = PROCESS_MAGIC.to_vec();
            r.extend_from_slice(&1u32.to_le_bytes());
            r.extend_from_slice(&node.to_le_bytes());
            r.extend_from_slice(&identity.to_le_bytes());
            r.resize(32, 0);
            apply_edits(&mut r, &edits);
            r.resize(len, 0);
            r
        },
    );
    prop_oneof![vec(any::<u8>(), 0..64), formed]
}

proptest! {
    #![proptest_config(config(256))]

    /// Files of any name and contents in a procs directory: `list_records` lists exactly the
    /// `<node>-<pid>` names (as the library spells them), with an identity only for a
    /// well-formed record of that node and pid, and no process whose lock nobody holds is
    /// alive.
    #[test]
    fn process_records_of_any_bytes_are_listed_not_trusted(
        files in vec((prop_oneof![
            (any::<u32>(), 1u32..4_000_000).prop_map(|(n, p)| format!("{n}-{p}")),
            "[0-9+-]{0,12}",
            "[a-z0-9.-]{1,12}",
        ], process_record_bytes()), 0..8),
    ) {
        let dir = Scratch::new("procs");
        let me = std::process::id();
        // Only the spelling the library writes names a record (`08-1` and `8-+1` do not).
        let parse = |name: &str| {
            let (node, pid) = name.split_once('-')?;
            let (node, pid) = (node.parse::<u32>().ok()?, pid.parse::<u32>().ok()?);
            (format!("{node}-{pid}") == name).then_some((node, pid))
        };
        for (name, bytes) in &files {
            // This process's own pid is special (its identity is read from /proc): no record
            // file of another process names it.
            if parse(name).is_some_and(|(_, pid)| pid == me) {
                continue;
            }
            let _ = fs::write(dir.path().join(name), bytes); // "." and ".." are no files
        }
        let mut expected: Vec<(u32, u32, PathBuf)> = fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let (node, pid) = parse(e.file_name().to_str()?)?;
                Some((node, pid, e.path()))
            })
            .collect();
        expected.sort();
        let got = liveness::list_records(dir.path()).expect("listing a readable directory");
        let mut listed: Vec<(u32, u32, PathBuf)> = got.iter().map(|r| (r.node, r.pid, r.path.clone())).collect();
        listed.sort();
        prop_assert_eq!(listed, expected);
        for r in &got {
            let bytes = fs::read(&r.path).unwrap();
            // Well-formed, and naming the node and pid of its own file name: a record is
            // believed only under its own name.
            let bits = |b: &[u8]| u64::from_le_bytes(b[16..24].try_into().unwrap());
            let formed = bytes.len() >= 32
                && &bytes[..8] == PROCESS_MAGIC
                && bytes[8..12] == 1u32.to_le_bytes()
                && bits(&bytes) & PID_MASK != 0
                && bytes[12..16] == r.node.to_le_bytes()
                && bits(&bytes) & PID_MASK == u64::from(r.pid);
            prop_assert_eq!(r.identity.is_some(), formed, "{:?}", r);
            if let Some(id) = r.identity {
                prop_assert_eq!(id.bits(), u64::from_le_bytes(bytes[16..24].try_into().unwrap()));
            }
            // Nobody holds these records' locks; only a record naming this very process
            // (by its identity) is judged by this process's own liveness.
            let names_me = r.identity.is_some_and(|id| id.pid() == me);
            if !names_me {
                prop_assert!(!r.alive, "{:?}", r);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 5. Daemon frames and messages (cluster::proto)
// ---------------------------------------------------------------------------------------

/// A stream delivered in pieces of the given sizes (0: a read that times out), then closed.
struct Pieces {
    data: Vec<u8>,
    pos: usize,
    sizes: Vec<usize>,
    next: usize,
    consumed: usize,
}

impl Pieces {
    fn new(data: Vec<u8>, sizes: Vec<usize>) -> Pieces {
        Pieces { data, pos: 0, sizes, next: 0, consumed: 0 }
    }
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = if self.sizes.is_empty() { 4096 } else { self.sizes[self.next % self.sizes.len()] };
        self.next += 1;
        if size == 0 && self.next <= self.sizes.len() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = size.max(1).min(buf.len()).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        self.consumed += n;
        Ok(n)
    }
}

/// Every message of `bytes`, read in pieces, and the error that ended the stream if any.
fn decode_all<T: DeserializeOwned>(bytes: &[u8], sizes: Vec<usize>) -> (Vec<T>, Option<FrameError>) {
    let mut reader = FrameReader::new();
    let mut src = Pieces::new(bytes.to_vec(), sizes);
    let mut out = Vec::new();
    // Each round either takes a message, ends, or reads (at least a byte or one timeout):
    // more rounds than that would be a reader that spins.
    let limit = 2 * (bytes.len() + src.sizes.len()) + 10;
    for _ in 0..limit {
        loop {
            match reader.next_message::<T>() {
                Ok(Some(m)) => out.push(m),
                Ok(None) => break,
                Err(e) => return (out, Some(e)),
            }
        }
        match reader.fill(&mut src).expect("reading from memory") {
            Fill::Closed => return (out, None),
            Fill::Data | Fill::Idle => {}
        }
    }
    panic!("the frame reader made no progress in {limit} rounds");
}

fn frame_header(magic: [u8; 4], version: u16, flags: u16, len: u32) -> Vec<u8> {
    let mut h = magic.to_vec();
    h.extend_from_slice(&version.to_be_bytes());
    h.extend_from_slice(&flags.to_be_bytes());
    h.extend_from_slice(&len.to_be_bytes());
    h
}

fn host_state() -> impl Strategy<Value = HostState> {
    prop_oneof![Just(HostState::Unknown), Just(HostState::Operational), Just(HostState::Suspect), Just(HostState::Lost)]
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,16}"
}

fn refusal() -> impl Strategy<Value = Refusal> {
    prop_oneof![
        (any::<u32>(), object_kind(), any::<u32>(), text()).prop_map(|(node, kind, id, host)| Refusal::NotFound {
            node,
            kind,
            id,
            host
        }),
        (any::<u32>(), text(), host_state()).prop_map(|(node, host, state)| Refusal::HostUnreachable {
            node,
            host,
            state
        }),
        (text(), any::<u64>()).prop_map(|(host, waited_ms)| Refusal::Timeout { host, waited_ms }),
        (any::<u32>(), object_kind(), any::<u32>(), text()).prop_map(|(node, kind, id, reason)| Refusal::Corrupt {
            node,
            kind,
            id,
            reason
        }),
        text().prop_map(|reason| Refusal::Failed { reason }),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        any::<u16>().prop_map(|version| Request::Hello { version }),
        (any::<u32>(), object_kind(), any::<u32>(), any::<u64>())
            .prop_map(|(node, kind, id, timeout_ms)| Request::Lookup { node, kind, id, timeout_ms }),
        (any::<u32>(), any::<u64>()).prop_map(|(node, timeout_ms)| Request::Probe { node, timeout_ms }),
        (any::<u32>(), object_kind(), any::<u32>(), any::<u32>(), any::<u64>(), option::of(any::<u64>())).prop_map(
            |(node, kind, id, peer_node, timeout_ms, notify)| Request::Connect {
                node,
                kind,
                id,
                peer_node,
                timeout_ms,
                notify
            }
        ),
        any::<u64>().prop_map(|grant| Request::Disconnect { grant }),
        any::<u64>().prop_map(|timeout_ms| Request::Groups { timeout_ms }),
        Just(Request::Cluster),
        Just(Request::Subscribe),
        wire_addr().prop_map(|a| Request::HostOf { address: a.ip() }),
        (wire_addr(), wire_addr(), any::<u64>(), any::<u64>(), any::<u64>(), stream_handles()).prop_map(
            |(local, remote, cookie, netns, process, handles)| Request::RegisterHalf {
                half: HalfRegistration { local, remote, cookie, netns, process, handles }
            }
        ),
        (wire_addr(), wire_addr(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(local, remote, cookie, fabric_sent, fabric_received)| Request::WithdrawHalf {
                local,
                remote,
                cookie,
                fabric_sent,
                fabric_received
            }
        ),
        Just(Request::Sockets),
    ]
}

/// An address as the control protocol carries it: IP and port (a flow label or scope id
/// is not part of it).
fn wire_addr() -> impl Strategy<Value = SocketAddr> {
    socket_addr().prop_map(|a| SocketAddr::new(a.ip(), a.port()))
}

fn stream_handles() -> impl Strategy<Value = Option<lanes::cluster::proto::StreamHandles>> {
    proptest::option::of((any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
        |(node, segment, request_bell, answer_bell)| lanes::cluster::proto::StreamHandles {
            node,
            segment,
            request_bell,
            answer_bell,
        },
    ))
}

fn wire_half() -> impl Strategy<Value = WireHalf> {
    (wire_addr(), wire_addr(), any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>(), stream_handles()).prop_map(
        |(local, remote, cookie, uid, generation, peer_cookie, handles)| WireHalf {
            local,
            remote,
            cookie,
            uid,
            generation,
            peer_cookie,
            handles,
        },
    )
}

fn peer_message() -> impl Strategy<Value = PeerMessage> {
    let query = prop_oneof![
        (any::<u32>(), object_kind(), any::<u32>()).prop_map(|(node, kind, id)| Query::Lookup { node, kind, id }),
        any::<u32>().prop_map(|node| Query::Probe { node }),
        (any::<u32>(), object_kind(), any::<u32>(), any::<u32>(), text())
            .prop_map(|(node, kind, id, peer_node, peer_host)| Query::Connect { node, kind, id, peer_node, peer_host }),
        Just(Query::Groups),
    ];
    let answer = prop_oneof![
        any::<u32>().prop_map(|count| Answer::Processes { count }),
        refusal().prop_map(|refusal| Answer::Refused { refusal }),
    ];
    let sockets = prop_oneof![
        wire_half().prop_map(|half| PeerMessage::SocketHalf { half }),
        (vec(wire_half(), 0..3), any::<bool>()).prop_map(|(halves, more)| PeerMessage::SocketSync { halves, more }),
        (wire_addr(), wire_addr(), any::<u64>()).prop_map(|(local, remote, cookie)| PeerMessage::SocketWithdraw {
            local,
            remote,
            cookie
        }),
        (wire_addr(), wire_addr(), any::<u64>(), any::<u64>(), any::<u64>(), stream_handles(), stream_handles())
            .prop_map(|(local, remote, cookie, peer_cookie, generation, handles, peer_handles)| {
                PeerMessage::SocketPaired { local, remote, cookie, peer_cookie, generation, handles, peer_handles }
            }),
    ];
    prop_oneof![
        (
            any::<u16>(),
            text(),
            any::<u64>(),
            vec(any::<u32>(), 0..4),
            option::of(text()),
            option::of(text()),
            vec(wire_addr(), 0..3)
        )
            .prop_map(|(version, host, boot, nodes, nonce, proof, addresses)| PeerMessage::Hello {
                version,
                host,
                boot,
                nodes,
                nonce,
                proof,
                host_epoch: String::new(),
                addresses: addresses.into_iter().map(|a| a.ip()).collect(),
            }),
        sockets,
        text().prop_map(|proof| PeerMessage::Auth { proof }),
        Just(PeerMessage::Heartbeat),
        (any::<u64>(), query).prop_map(|(id, query)| PeerMessage::Query { id, query }),
        (any::<u64>(), answer).prop_map(|(id, answer)| PeerMessage::Answer { id, answer }),
        (any::<u64>(), any::<bool>()).prop_map(|(grant, died)| PeerMessage::Release { grant, died }),
        (any::<u64>(), prop_oneof![Just(GrantStatus::Available), Just(GrantStatus::OwnerDied)])
            .prop_map(|(grant, status)| PeerMessage::GrantStatus { grant, status }),
        text().prop_map(|reason| PeerMessage::Bye { reason }),
    ]
}

fn host_status() -> impl Strategy<Value = HostStatus> {
    (text(), text(), vec(any::<u32>(), 0..3), any::<bool>(), host_state(), any::<u64>(), option::of(any::<u64>()))
        .prop_map(|(name, address, nodes, local, state, state_for_ms, last_heard_ms)| HostStatus {
            name,
            address,
            nodes,
            local,
            state,
            state_for_ms,
            last_heard_ms,
        })
}

fn reply() -> impl Strategy<Value = Reply> {
    prop_oneof![
        (any::<u16>(), text(), any::<u64>()).prop_map(|(version, host, boot)| Reply::Hello { version, host, boot }),
        refusal().prop_map(|r| Reply::Lookup { result: Err(r) }),
        vec(host_status(), 0..3).prop_map(|hosts| Reply::Cluster { hosts }),
        (vec(host_status(), 0..2), any::<u64>())
            .prop_map(|(hosts, subscriber)| Reply::Subscribed { hosts, subscriber }),
        (any::<u32>(), text(), host_state(), host_state(), text()).prop_map(|(node, host, state, previous, reason)| {
            Reply::Event { event: NodeEvent { node, host, state, previous, reason } }
        }),
        Just(Reply::KeepAlive),
        Just(Reply::Disconnected),
        text().prop_map(|reason| Reply::Error { reason }),
        prop_oneof![
            Just(AddressOwner::ThisHost),
            Just(AddressOwner::Nobody),
            text().prop_map(|host| AddressOwner::Host { host })
        ]
        .prop_map(|owner| Reply::HostOf { owner }),
        prop_oneof![text().prop_map(Ok), refusal().prop_map(Err)].prop_map(|result| Reply::Registered { result }),
        Just(Reply::Withdrawn),
        (wire_addr(), wire_addr(), text(), vec((text(), any::<u64>()), 0..3)).prop_map(
            |(local, remote, host, refused)| Reply::Sockets {
                status: SocketsStatus {
                    halves: vec![HalfStatus {
                        local,
                        remote,
                        cookie: 1,
                        pid: 2,
                        uid: 3,
                        peer_host: host.clone(),
                        state: "paired".into(),
                        generation: 4,
                        age_ms: 5,
                    }],
                    unmatched: vec![(host, 1)],
                    refused: refused.clone(),
                    stale: 7,
                    requests: refused,
                    fabric_sent: 8,
                    fabric_received: 9,
                }
            }
        ),
    ]
}

/// Arbitrary bytes that often look like frames: random bytes, or a frame header of any
/// field values (sometimes the right ones) followed by random or JSON payload bytes.
fn frame_like_bytes() -> impl Strategy<Value = Vec<u8>> {
    let header = (
        prop_oneof![Just(MAGIC), any::<[u8; 4]>()],
        prop_oneof![Just(PROTOCOL_VERSION), any::<u16>()],
        prop_oneof![Just(0u16), any::<u16>()],
        prop_oneof![0u32..300, any::<u32>(), Just(MAX_FRAME as u32), Just(MAX_FRAME as u32 + 1)],
    );
    let payload = prop_oneof![vec(any::<u8>(), 0..300), json_value().prop_map(|v| serde_json::to_vec(&v).unwrap())];
    let framed = (header, payload).prop_map(|((m, v, f, len), mut p)| {
        let mut b = frame_header(m, v, f, len);
        b.append(&mut p);
        b
    });
    prop_oneof![vec(any::<u8>(), 0..100), framed]
}

proptest! {
    #![proptest_config(config(256))]

    /// Any bytes after valid frames, read in any pieces: the valid messages come out, then
    /// the reader stops with an error or waits for more; it never panics or spins.
    #[test]
    fn frames_of_any_bytes_decode_or_are_refused(
        good in vec(request(), 0..3),
        junk in frame_like_bytes(),
        sizes in vec(0usize..64, 0..8),
    ) {
        let mut bytes = Vec::new();
        for m in &good {
            bytes.extend(encode(m).unwrap());
        }
        bytes.extend_from_slice(&junk);
        let (got, _) = decode_all::<Request>(&bytes, sizes.clone());
        prop_assert!(got.len() >= good.len());
        prop_assert_eq!(&got[..good.len()], &good[..]);
        // The same bytes read as the other kinds of message never panic either.
        let _ = decode_all::<PeerMessage>(&junk, sizes.clone());
        let _ = decode_all::<Reply>(&junk, sizes);
    }

    /// Messages of every kind round-trip through frames read in any pieces.
    #[test]
    fn messages_round_trip(
        requests in vec(request(), 0..4),
        peers in vec(peer_message(), 0..4),
        replies in vec(reply(), 0..4),
        sizes in vec(0usize..200, 0..8),
    ) {
        let frames = |msgs: Vec<Vec<u8>>| msgs.concat();
        let b = frames(requests.iter().map(|m| encode(m).unwrap()).collect());
        let (got, err) = decode_all::<Request>(&b, sizes.clone());
        prop_assert!(err.is_none(), "{:?}", err);
        prop_assert_eq!(got, requests);
        let b = frames(peers.iter().map(|m| encode(m).unwrap()).collect());
        let (got, err) = decode_all::<PeerMessage>(&b, sizes.clone());
        prop_assert!(err.is_none(), "{:?}", err);
        prop_assert_eq!(got, peers);
        let b = frames(replies.iter().map(|m| encode(m).unwrap()).collect());
        let (got, err) = decode_all::<Reply>(&b, sizes);
        prop_assert!(err.is_none(), "{:?}", err);
        prop_assert_eq!(got, replies);
    }

    /// A frame announcing any length: one above the limit is refused from its header alone
    /// (nothing of it is read or kept beyond the piece that completed the header); one within
    /// it is read up to its end and no further, even from a peer that never stops sending.
    #[test]
    fn announced_lengths_are_bounded(len in prop_oneof![any::<u32>(), 0..=MAX_FRAME as u32 + 10], piece in 1usize..=8192) {
        let mut stream = frame_header(MAGIC, PROTOCOL_VERSION, 0, len);
        stream.resize(HEADER_LEN + MAX_FRAME + 64 * 1024, b'x'); // more than any frame can use
        let mut src = Pieces::new(stream, vec![piece]);
        let mut reader = FrameReader::new();
        let mut rounds = 0;
        let outcome = loop {
            match reader.next_message::<Request>() {
                Ok(None) => {}
                other => break other,
            }
            prop_assert_eq!(reader.fill(&mut src).unwrap(), Fill::Data);
            rounds += 1;
            prop_assert!(rounds <= HEADER_LEN + MAX_FRAME, "no verdict");
        };
        if len as usize > MAX_FRAME {
            prop_assert!(matches!(outcome, Err(FrameError::Oversized { len: l }) if l == u64::from(len)), "{:?}", outcome);
            prop_assert!(src.consumed < HEADER_LEN + piece.min(4096), "read {} bytes", src.consumed);
        } else {
            // `x`s are no message.
            prop_assert!(matches!(outcome, Err(FrameError::Malformed(_))), "{:?}", outcome);
            prop_assert!(src.consumed <= HEADER_LEN + MAX_FRAME, "read {} bytes", src.consumed);
        }
    }
}

#[test]
fn deeply_nested_payloads_are_refused_not_a_stack_overflow() {
    for depth in [200, 10_000, MAX_FRAME / 2 - 8] {
        let payload = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let mut bytes = frame_header(MAGIC, PROTOCOL_VERSION, 0, payload.len() as u32);
        bytes.extend_from_slice(payload.as_bytes());
        let (got, err) = decode_all::<Request>(&bytes, vec![4096]);
        assert!(got.is_empty());
        assert!(matches!(err, Some(FrameError::Malformed(_))), "depth {depth}: {err:?}");
        let obj = format!("{}{}", "{\"a\":".repeat(depth / 5), "}".repeat(depth / 5));
        let mut bytes = frame_header(MAGIC, PROTOCOL_VERSION, 0, obj.len() as u32);
        bytes.extend_from_slice(obj.as_bytes());
        let (_, err) = decode_all::<PeerMessage>(&bytes, vec![4096]);
        assert!(matches!(err, Some(FrameError::Malformed(_))), "depth {depth}: {err:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 6. lanes.toml (config::ConfigFile::parse, cluster::config)
// ---------------------------------------------------------------------------------------

fn parse_config(text: &str) -> Result<ConfigFile, String> {
    match ConfigFile::parse(Path::new("lanes.toml"), text) {
        Ok(c) => Ok(c),
        Err(lanes::Error::Config { path, message }) => {
            assert_eq!(path, Path::new("lanes.toml"));
            assert!(!message.is_empty());
            Err(message)
        }
        Err(other) => panic!("{text:?}: not a configuration error: {other}"),
    }
}

/// What a configuration that parsed must satisfy, whatever its text.
fn check_config(c: &ConfigFile) {
    let mut ids = std::collections::HashSet::new();
    for n in c.nodes() {
        NodeId::new(n.id).expect("a valid node id");
        assert!(ids.insert(n.id), "node {} twice", n.id);
        assert!(!n.host.is_empty());
        assert_eq!(
            c.node_for_host(&n.host).unwrap().map(NodeId::get),
            c.nodes().iter().find(|m| m.host == n.host).map(|m| m.id)
        );
    }
    if let Some(s) = c.sockets() {
        for list in [&s.include, &s.exclude].into_iter().flatten() {
            assert!(parse_port_list(list).is_ok());
        }
        assert!(s.remote.as_deref().is_none_or(|r| lanes::config::RemoteMode::parse(r).is_ok()));
    }
    if let Some(cl) = c.cluster() {
        assert_ne!(cl.port, 0);
        assert!(!cl.heartbeat.is_zero() && cl.heartbeat < cl.suspect_after && cl.suspect_after < cl.lost_after);
        assert!(!cl.provider.trim().is_empty());
        assert!(cl.secret_file.as_ref().is_none_or(|f| f.is_absolute()));
        let mut addrs = std::collections::HashSet::new();
        for h in &cl.hosts {
            assert!(!h.nodes.is_empty());
            assert!(addrs.insert(h.address), "address {} twice", h.address);
            assert_ne!(h.address.port(), 0);
        }
        for n in c.nodes() {
            let id = NodeId::new(n.id).unwrap();
            assert_eq!(cl.host_of(id).map(|h| h.name.as_str()), Some(n.host.as_str()));
        }
    }
}

fn toml_number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..20_000).prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        Just("18446744073709551615".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("1.5".to_string()),
        Just("\"100\"".to_string()),
    ]
}

/// A quoted TOML string: mostly one of `choices`, sometimes anything.
fn toml_string(choices: Vec<&'static str>) -> impl Strategy<Value = String> {
    prop_oneof![4 => prop::sample::select(choices).prop_map(|s| s.to_string()), 1 => "[a-z0-9 .:/;\\[\\]-]{0,12}"]
        .prop_map(|s| format!("{s:?}"))
}

/// A TOML number: mostly in `good`, sometimes anything (negative, huge, not an integer).
fn toml_number_in(good: std::ops::Range<u64>) -> impl Strategy<Value = String> {
    prop_oneof![3 => good.prop_map(|v| v.to_string()), 1 => toml_number()]
}

/// `key = value` lines of a table, each key at most once (a repeated key is only TOML's
/// error), most of them sensible.
fn table(entries: Vec<(&'static str, f64, BoxedStrategy<String>)>) -> impl Strategy<Value = String> {
    entries
        .into_iter()
        .map(|(key, p, value)| option::weighted(p, value).prop_map(move |v| v.map(|v| format!("{key} = {v}\n"))))
        .collect::<Vec<_>>()
        .prop_map(|lines| lines.into_iter().flatten().collect())
}

fn cluster_section() -> impl Strategy<Value = String> {
    table(vec![
        ("provider", 0.3, toml_string(vec!["tcp;ofi_rxm", "tcp", "", " ", "verbs"]).boxed()),
        ("progress", 0.3, toml_string(vec!["wake", "poll", " poll ", "spin"]).boxed()),
        ("poll_us", 0.2, toml_number_in(1..20_000).boxed()),
        ("port", 0.3, prop_oneof![toml_number_in(1..65_536), Just("65536".to_string())].boxed()),
        ("heartbeat_ms", 0.5, toml_number_in(1..300).boxed()),
        ("suspect_after_ms", 0.5, toml_number_in(100..2000).boxed()),
        ("lost_after_ms", 0.5, toml_number_in(1000..20_000).boxed()),
        ("secret_file", 0.2, toml_string(vec!["/etc/lanes/secret", "secret", ""]).boxed()),
        ("bogus", 0.03, toml_number().boxed()),
    ])
    .prop_map(|lines| format!("[cluster]\n{lines}"))
}

fn node_entry() -> impl Strategy<Value = String> {
    const HOSTS: [(&str, &str); 3] = [("a", "10.0.0.1"), ("b", "10.0.0.2:7471"), ("c", "::1")];
    let id = prop_oneof![
        6 => (1u32..=16383).prop_map(|v| (v * 4).to_string()),
        2 => prop::sample::select(vec![8u32, 12, 16, 20]).prop_map(|v| v.to_string()),
        1 => (0u32..40).prop_map(|v| v.to_string()),
        1 => Just("252".to_string()),
        1 => toml_number(),
    ];
    // The host's own address (consistent), or another: a wrong one, another host's, none.
    let other_address = toml_string(vec![
        "10.0.0.1",
        "[::1]:81",
        "[fe80::1]",
        "0.0.0.0",
        "224.0.0.1",
        "10.0.0.1:0",
        "alpha.example",
        "10.0.0.1:99999",
    ]);
    let address = prop_oneof![5 => Just(None), 1 => Just(Some(None)), 1 => other_address.prop_map(|a| Some(Some(a)))];
    let host = prop_oneof![10 => (0..HOSTS.len()).prop_map(Some), 1 => Just(None)];
    let odd_host = option::weighted(0.1, toml_string(vec!["", "a b"]));
    let extra = option::weighted(0.03, Just("colour = \"red\"".to_string()));
    (id, host, odd_host, address, extra).prop_map(|(id, host, odd_host, address, extra)| {
        let mut s = format!("[[node]]\nid = {id}\n");
        match (host, odd_host) {
            (_, Some(h)) => s += &format!("host = {h}\n"),
            (Some(i), None) => s += &format!("host = {:?}\n", HOSTS[i].0),
            (None, None) => {}
        }
        let own = host.map(|i| format!("{:?}", HOSTS[i].1));
        match address {
            None => {
                if let Some(a) = own {
                    s += &format!("address = {a}\n");
                }
            }
            Some(None) => {}
            Some(Some(a)) => s += &format!("address = {a}\n"),
        }
        if let Some(e) = extra {
            s += &format!("{e}\n");
        }
        s
    })
}

fn sockets_section() -> impl Strategy<Value = String> {
    let list = || toml_string(vec!["5201", "5201, 8000-8100", "", "9-3", "x", "70000", "1-", "-", ",,"]);
    let remote = toml_string(vec!["auto", "on", "off", "", "yes"]);
    (
        option::of(list()),
        option::of(list()),
        option::of(toml_number_in(4096..1 << 27)),
        option::of(any::<bool>()),
        option::of(remote),
    )
        .prop_map(|(include, exclude, ring, enabled, remote)| {
            let mut s = "[sockets]\n".to_string();
            if let Some(v) = remote {
                s += &format!("remote = {v}\n");
            }
            if let Some(v) = include {
                s += &format!("include = {v}\n");
            }
            if let Some(v) = exclude {
                s += &format!("exclude = {v}\n");
            }
            if let Some(v) = ring {
                s += &format!("ring_bytes = {v}\n");
            }
            if let Some(v) = enabled {
                s += &format!("enabled = {v}\n");
            }
            s
        })
}

/// A configuration of the right shape with values right and wrong.
fn structured_config() -> impl Strategy<Value = String> {
    (
        option::of(toml_string(vec!["/dev/shm/lanes", "relative", ""]).prop_map(|d| format!("dir = {d}\n"))),
        option::weighted(0.3, sockets_section()),
        option::of(cluster_section()),
        vec(node_entry(), 0..5),
    )
        .prop_map(|(dir, sockets, cluster, nodes)| {
            let mut s = dir.unwrap_or_default();
            s += &sockets.unwrap_or_default();
            s += &cluster.unwrap_or_default();
            s += &nodes.concat();
            s
        })
}

proptest! {
    #![proptest_config(config(256))]

    /// Any text: a configuration error with a message (naming the file), or a configuration
    /// that holds together; never a panic.
    #[test]
    fn config_text_of_any_kind_parses_or_is_refused(
        text in prop_oneof![
            "\\PC{0,200}",
            vec(any::<u8>(), 0..200).prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
            "([a-z_\\[\\]]{1,10} ?= ?[0-9\"\\[\\]{}a-z.,:-]{0,12}\n){0,8}",
        ],
    ) {
        if let Ok(c) = parse_config(&text) {
            check_config(&c);
        }
    }

    /// Configurations of the right shape with wrong values: refused with a reason, or valid
    /// in every respect the rest of the library relies on.
    #[test]
    fn structured_but_wrong_configs_are_refused(text in structured_config()) {
        if let Ok(c) = parse_config(&text) {
            check_config(&c);
        }
    }

    /// Addresses, port lists and progress modes: any text parses to something valid or is
    /// refused with a reason; valid values round-trip.
    #[test]
    fn config_values_parse_or_are_refused(
        text in prop_oneof!["\\PC{0,40}", "[0-9a-f.:\\[\\] ,%-]{0,30}"],
        addr in any::<SocketAddr>(),
        port in any::<u16>(),
        ranges in vec((any::<u16>(), any::<u16>()), 0..5),
        poll_us in option::of(any::<u64>()),
    ) {
        match parse_address(&text, port) {
            Ok(a) => prop_assert!(a.port() != 0 && !a.ip().is_unspecified() && !a.ip().is_multicast()),
            Err(why) => prop_assert!(!why.is_empty()),
        }
        let plain = SocketAddr::new(addr.ip(), addr.port());
        if let Ok(a) = parse_address(&plain.to_string(), 7470) {
            prop_assert_eq!(a, plain);
        }
        if plain.port() != 0 && !plain.ip().is_unspecified() && !plain.ip().is_multicast() {
            prop_assert_eq!(parse_address(&plain.to_string(), 7470), Ok(plain));
            prop_assert_eq!(parse_address(&plain.ip().to_string(), plain.port()), Ok(plain));
        }
        match parse_port_list(&text) {
            Ok(list) => prop_assert!(list.iter().all(|(a, b)| a <= b)),
            Err(why) => prop_assert!(!why.is_empty()),
        }
        let ranges: Vec<(u16, u16)> = ranges.into_iter().map(|(a, b)| (a.min(b), a.max(b))).collect();
        let written: Vec<String> = ranges.iter().map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
        prop_assert_eq!(parse_port_list(&written.join(", ")), Ok(ranges));
        match IdleProgress::parse(&text, poll_us) {
            Ok(IdleProgress::Poll(d)) => prop_assert!(d >= Duration::from_micros(1) && d <= Duration::from_millis(10)),
            Ok(IdleProgress::Wake) => prop_assert!(poll_us.is_none()),
            Err(why) => prop_assert!(!why.is_empty()),
        }
        if let Ok(n) = text.parse::<NodeId>() {
            prop_assert_eq!(NodeId::new(n.get()).ok(), Some(n));
        }
    }
}

#[test]
fn deeply_nested_config_is_refused_not_a_stack_overflow() {
    for depth in [100, 10_000, 100_000] {
        for text in [
            format!("x = {}{}", "[".repeat(depth), "]".repeat(depth)),
            format!("x = {}{}", "{ a = ".repeat(depth), "}".repeat(depth)),
            "[a.".repeat(depth),
        ] {
            let message = parse_config(&text).expect_err("nonsense accepted");
            assert!(!message.is_empty());
        }
    }
}
