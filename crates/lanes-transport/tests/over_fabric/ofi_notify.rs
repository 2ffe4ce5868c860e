//! One process plays both hosts: the owner node is a real fabric on a temporary
//! directory whose objects are exported on one endpoint; each sender is a further
//! endpoint of this process (its own fabric, domain, CQs and service thread, as another
//! process would have), connected through an [`OfiRemote`] built by hand. The owner's
//! daemon is not involved: the test claims a connection slot in the object's header for
//! each sender, as the daemon will for a remote process (with this process's identity
//! and a node id of its own).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes::config::{FabricConfig, NodeId};
use lanes::error::{Error, Result};
use lanes::fabric::{Fabric, LocalDataInterrupt, LocalInterrupt, MapAccess};
use lanes::platform::liveness::ProcessIdentity;
use lanes::transport::ofi::endpoint::EndpointSpec;
use lanes::transport::ofi::endpoint::{Op, ProcessEndpoint};
use lanes::transport::ofi::export::Export;
use lanes::transport::ofi::export::OwnerHooks;
use lanes::transport::ofi::fi;
use lanes::transport::ofi::notify::*;
use lanes::transport::ofi::notify::{arrival_value, message_value, watched_count, SPIN};
use lanes::transport::ofi::remote::OfiRemote;
use lanes::transport::shm::data_interrupt::{
    Rings, ENTRY_HEADER, ENTRY_LEN, MAX_DATA_INTERRUPT_PAYLOAD, RING_CAP, RING_TAIL,
};
use lanes::transport::shm::data_interrupt::{BELL_SEQ, OBJECT_BYTES};
use lanes::transport::shm::interrupt::BELL_PAGE;
use lanes::transport::shm::interrupt::{BellPage, ARRIVAL};
use lanes::transport::shm::layout::kind;
use lanes::transport::shm::remote::direct_mapping;
use lanes::transport::shm::segment_file::SegmentFile;
use lanes::transport::shm::FabricPaths;
use lanes::transport::Timeout;
use lanes::transport::{ObjectAddr, ObjectInfo, RemoteObject};

const NODE: u32 = 4;
const PEER_NODE: u32 = 8;
/// Bound on every wait: a hang fails the test instead.
const T: Timeout = Timeout::After(Duration::from_secs(30));
const POLL: Duration = Duration::from_micros(50);
const TRIGGERS: usize = 100_000;
const MESSAGES: u32 = 3_000;

fn spec() -> EndpointSpec {
    EndpointSpec {
        provider: fi::provider_from_env(),
        address: "127.0.0.1".parse().expect("ip"),
        progress: lanes::cluster::IdleProgress::Wake,
    }
}

/// The owner node: a fabric on a temporary directory and the endpoint its exports live on.
struct Owner {
    ep: Arc<ProcessEndpoint>,
    fabric: Fabric,
    dir: PathBuf,
}

impl Owner {
    fn new(name: &str) -> Owner {
        let dir = std::env::temp_dir().join(format!("lanes-unit-notify-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let fabric = Fabric::open_with(FabricConfig::new(&dir, NodeId::new(NODE).expect("node"))).expect("fabric");
        Owner { ep: ProcessEndpoint::open(spec()).expect("owner endpoint"), fabric, dir }
    }

    fn file(&self, object_kind: u32, id: u32) -> SegmentFile {
        SegmentFile::open(&FabricPaths::new(&self.dir), object_kind, NODE, id).expect("object file")
    }

    fn export_interrupt(&self, li: &LocalInterrupt) -> (SegmentFile, Export) {
        let file = self.file(kind::INTERRUPT, li.number());
        let map = || direct_mapping(&file, 0, BELL_PAGE, MapAccess::ReadWrite).expect("map");
        let export = Export::new(&self.ep, map(), InterruptTarget::new(BellPage::new(map())).hooks()).expect("export");
        (file, export)
    }

    fn export_data_interrupt(&self, ldi: &LocalDataInterrupt) -> (SegmentFile, Export, Arc<DataInterruptTarget>) {
        let file = self.file(kind::DATA_INTERRUPT, ldi.number());
        let map = || direct_mapping(&file, 0, OBJECT_BYTES, MapAccess::ReadWrite).expect("map");
        let target = DataInterruptTarget::new(map());
        let export = Export::new(&self.ep, map(), target.hooks()).expect("export");
        (file, export, target)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A data interrupt and an interrupt of an owner, exported, and one sender's
/// connections to them (`d`, `i`); dropping an export withdraws it.
struct Pair {
    ldi: LocalDataInterrupt,
    li: LocalInterrupt,
    dexport: Export,
    iexport: Export,
    d: OfiRemote,
    i: OfiRemote,
}

fn pair(owner: &Owner, ep: &Arc<ProcessEndpoint>) -> Pair {
    let ldi = owner.fabric.create_data_interrupt(None).expect("data interrupt");
    let (dfile, dexport, target) = owner.export_data_interrupt(&ldi);
    let li = owner.fabric.create_interrupt(None).expect("interrupt");
    let (ifile, iexport) = owner.export_interrupt(&li);
    let d = connect(ep, &dfile, &dexport, Some(&target));
    let i = connect(ep, &ifile, &iexport, None);
    Pair { ldi, li, dexport, iexport, d, i }
}

/// A connection from endpoint `ep` to the object of `file` exported as `export`, in a
/// slot claimed in the object's header (and, for a data interrupt, attached to `target`
/// before the sender may use it).
fn connect(
    ep: &Arc<ProcessEndpoint>,
    file: &SegmentFile,
    export: &Export,
    target: Option<&DataInterruptTarget>,
) -> OfiRemote {
    let me = ProcessIdentity::current().expect("identity");
    let slot = file.header().claim_slot(me, PEER_NODE, |_, _| false).expect("a free connection slot");
    if let Some(t) = target {
        t.attach(slot);
    }
    let s = file.snapshot();
    assert!(!export.is_empty() && export.len() == s.segment_size);
    assert_ne!(export.handle(), 0, "interrupts are exported with a completion handler");
    assert_eq!(export.endpoint().name(), export.endpoint_name());
    let info = ObjectInfo {
        addr: ObjectAddr { kind: s.kind, node: s.node_id, id: s.segment_id },
        size: s.segment_size,
        owner: s.owner,
    };
    in_slot(ep, export, info, slot as u32)
}

/// A connection from endpoint `ep` to the object `info` exported as `export`, holding
/// connection slot `slot` (claimed already: a later holder of a slot is made this way).
fn in_slot(ep: &Arc<ProcessEndpoint>, export: &Export, info: ObjectInfo, slot: u32) -> OfiRemote {
    let range = export.range(ep.peer(export.endpoint_name()).expect("peer"));
    OfiRemote::new(Arc::clone(ep), range, info, slot, 0, None)
}

/// Message `seq` of sender `sender`: a length from 0 to the maximum (the maximum every
/// 97th message; 0 every 89th of sender 0, and only of sender 0), first byte the
/// sender, then bytes drawn from (sender, seq).
fn message(sender: u8, seq: u32) -> Vec<u8> {
    let mut x = (u64::from(sender) << 32 | u64::from(seq)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = if seq % 97 == 0 {
        MAX_DATA_INTERRUPT_PAYLOAD
    } else if sender == 0 && seq % 89 == 0 {
        0
    } else {
        1 + (next() % MAX_DATA_INTERRUPT_PAYLOAD as u64) as usize
    };
    (0..len).map(|i| if i == 0 { sender } else { next() as u8 }).collect()
}

/// Waits (bounded) until `f` holds.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < end, "{what}: not within 30 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn is_timeout<T: std::fmt::Debug>(r: &Result<T>) -> bool {
    matches!(r, Err(Error::Timeout { .. }))
}

#[test]
fn notify_triggers_published_in_place_are_counted_exactly_for_spinning_and_sleeping_waiters() {
    triggers(Publish::InPlace);
}

#[test]
fn notify_triggers_published_by_completion_data_are_counted_exactly_for_spinning_and_sleeping_waiters() {
    triggers(Publish::ByCompletionData);
}

fn triggers(how: Publish) {
    let owner = Owner::new(&format!("int-{how:?}"));
    let li = owner.fabric.create_interrupt(None).expect("interrupt");
    let (_file, export) = owner.export_interrupt(&li);
    let ep = ProcessEndpoint::open(spec()).expect("sender endpoint");
    let r = connect(&ep, &_file, &export, None);
    r.publish_by(how);
    // Triggers while nobody waits are kept, one wait each.
    for _ in 0..3 {
        r.trigger().expect("trigger");
    }
    eventually("3 triggers pending", || li.pending() == 3);
    for _ in 0..3 {
        li.wait(Timeout::Immediate).expect("wait");
    }
    assert!(is_timeout(&li.wait(Timeout::Immediate)));
    for (poll, what) in [(Duration::from_secs(1), "spinning"), (Duration::ZERO, "sleeping")] {
        li.set_poll_time(poll);
        let r2 = r.clone();
        let started = Instant::now();
        let t = std::thread::spawn(move || {
            for _ in 0..TRIGGERS {
                r2.trigger().expect("trigger");
            }
        });
        for i in 0..TRIGGERS {
            li.wait(T).unwrap_or_else(|e| panic!("{what} wait {i}: {e}"));
        }
        t.join().expect("sender");
        eprintln!("{TRIGGERS} triggers published {how:?}, {what} waiter: {:?}", started.elapsed());
        assert_eq!(li.pending(), 0);
        assert!(is_timeout(&li.wait(Timeout::Immediate)), "{what}: a wait beyond the triggers");
    }
    r.check().expect("no trigger failed");
}

#[test]
fn notify_a_slot_counts_on_across_holders_and_ignores_a_count_that_went_backwards() {
    // Triggers published in place: a second holder of a slot continues from the count
    // its first holder left, and a count word that moves backwards (a word read
    // half-placed, damage) or jumps far ahead (damage) counts nothing.
    let owner = Owner::new("int-slot");
    let li = owner.fabric.create_interrupt(None).expect("interrupt");
    let (file, export) = owner.export_interrupt(&li);
    let ep = ProcessEndpoint::open(spec()).expect("sender endpoint");
    let first = connect(&ep, &file, &export, None);
    first.publish_by(Publish::InPlace);
    let slot = first.conn().slot;
    for _ in 0..5 {
        first.trigger().expect("trigger");
    }
    eventually("5 triggers pending", || li.pending() == 5);
    first.check().expect("no trigger failed");
    let second = in_slot(&ep, &export, first.conn().info, slot);
    second.publish_by(Publish::InPlace);
    for _ in 0..3 {
        second.trigger().expect("trigger");
    }
    eventually("8 triggers pending", || li.pending() == 8);
    let page = BellPage::new(direct_mapping(&file, 0, BELL_PAGE, MapAccess::ReadWrite).expect("map"));
    assert_eq!(page.word(watched_count(slot as usize)).load(Ordering::SeqCst), 8);
    // The count goes back to 2, then far ahead; each time the arrival word changes, so
    // the owner looks. Neither is counted, and the next trigger counts one.
    for damaged in [2, 8 + (1 << 41)] {
        page.word(watched_count(slot as usize)).store(damaged, Ordering::SeqCst);
        page.word(ARRIVAL).store(arrival_value(slot as usize, damaged), Ordering::SeqCst);
    }
    second.trigger().expect("trigger");
    eventually("the trigger after the damage", || li.pending() >= 9);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(li.pending(), 9, "the damaged counts were counted");
    second.check().expect("no trigger failed");
}

/// A segment of the owner, exported, and one buffer registered on each sender
/// endpoint: a sender posts a large write of it (not waited for), so that what it posts
/// next queues behind megabytes on its connection.
struct Bulk {
    _segment: lanes::fabric::LocalSegment,
    export: Export,
    buf: Arc<fi::Buffer>,
    regs: Vec<fi::MemoryRegion>,
    posted: Vec<(Arc<ProcessEndpoint>, Arc<Op>)>,
}

impl Bulk {
    const BYTES: usize = 8 << 20;

    fn new(owner: &Owner, eps: &[Arc<ProcessEndpoint>]) -> Bulk {
        let segment = owner.fabric.create_segment_auto_id(Self::BYTES as u64).expect("segment");
        let file = owner.file(kind::SEGMENT, segment.id());
        let map = direct_mapping(&file, 0, Self::BYTES as u64, MapAccess::ReadWrite).expect("map");
        let export = Export::new(&owner.ep, map, OwnerHooks::default()).expect("segment export");
        let buf = Arc::new(fi::Buffer::new(Self::BYTES).expect("bulk buffer"));
        let regs =
            eps.iter().map(|ep| ep.register(buf.clone(), fi::FI_READ | fi::FI_WRITE).expect("register")).collect();
        Bulk { _segment: segment, export, buf, regs, posted: Vec::new() }
    }

    /// Posts the write from endpoint `eps[i]` (as given to [`Bulk::new`]).
    fn post(&mut self, i: usize, ep: &Arc<ProcessEndpoint>) {
        let range = self.export.range(ep.peer(self.export.endpoint_name()).expect("peer"));
        let target = range.target(0, Self::BYTES as u64).expect("target");
        let local = self.regs[i].local(0, Self::BYTES).expect("local");
        let keep: Option<Arc<dyn Any + Send + Sync>> = Some(self.buf.clone());
        // SAFETY: the buffer is kept alive by the operation (keep); nothing writes it.
        let op = unsafe { ep.post_write(local, target, 0, 0, keep, fi::deadline_in(POST_TIMEOUT)) };
        self.posted.push((Arc::clone(ep), op.expect("bulk write")));
    }

    /// Waits until every posted write finished, and checks it succeeded.
    fn finish(self) {
        for (ep, op) in &self.posted {
            let done = ep.wait_until(|| op.outcome(), SPIN, fi::deadline_in(POST_TIMEOUT), "a bulk write");
            done.expect("bulk write finished").expect("bulk write succeeded");
        }
    }
}

#[test]
fn notify_a_slot_handed_over_at_once_after_a_disconnect_loses_no_trigger() {
    // Two senders on endpoints of their own (two connections, which nothing orders with
    // each other) take turns holding one slot of an interrupt published in place. Each
    // triggers once, posts a large write to a segment of the same owner, not waited
    // for, so that its further triggers (fire and forget) queue behind megabytes on its
    // connection, and disconnects; the other takes the slot at once. A holder reads the
    // slot's count at its first trigger: had the disconnect not waited for the writes
    // to be placed, that read, on the other connection, would overtake them and find an
    // older count, and the owner would ignore its triggers as a count gone backwards.
    const ROUNDS: u64 = 6;
    const BURST: u64 = 100;
    let owner = Owner::new("int-handover");
    let li = owner.fabric.create_interrupt(None).expect("interrupt");
    let (file, export) = owner.export_interrupt(&li);
    let eps = [ProcessEndpoint::open(spec()).expect("endpoint"), ProcessEndpoint::open(spec()).expect("endpoint")];
    let mut bulk = Bulk::new(&owner, &eps);
    // Both connections to the owner made before the race (rxm connects at first use).
    let warm = eps.each_ref().map(|ep| connect(ep, &file, &export, None));
    for w in &warm {
        w.publish_by(Publish::InPlace);
        w.trigger().expect("warm-up trigger");
    }
    let slot = connect(&eps[0], &file, &export, None).conn().slot;
    let info = warm[0].conn().info;
    let mut expected = warm.len() as u64;
    for round in 0..ROUNDS {
        for (i, ep) in eps.iter().enumerate() {
            let holder = in_slot(ep, &export, info, slot);
            holder.publish_by(Publish::InPlace);
            // The first trigger reads the count; the rest queue behind the bulk write.
            holder.trigger().unwrap_or_else(|e| panic!("round {round}, sender {i}: {e}"));
            bulk.post(i, ep);
            for _ in 1..BURST {
                holder.trigger().unwrap_or_else(|e| panic!("round {round}, sender {i}: {e}"));
            }
            holder.disconnect();
            assert!(holder.trigger().is_err(), "a trigger after the disconnect");
            expected += BURST;
        }
    }
    bulk.finish();
    let end = Instant::now() + Duration::from_secs(10);
    while li.pending() < expected && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(li.pending(), expected, "triggers counted after {ROUNDS} rounds of hand-overs");
}

#[test]
fn notify_a_data_interrupt_slot_handed_over_at_once_after_a_disconnect_keeps_every_message() {
    // As for triggers above: two senders take turns holding one slot of a data interrupt
    // published in place, each sending one message, a large write to a segment of the
    // owner (not waited for) and more messages behind it, then disconnecting; the owner
    // settles the slot for the next holder (as its daemon does when it hands a slot
    // over), which reads the ring's tail at its first send. Had the disconnect not
    // waited, the first holder's messages would land after the settle, over the entries
    // of the next. Every message must arrive whole, once, in the order sent.
    const ROUNDS: u8 = 3;
    const PER_HOLDER: u32 = 5;
    const _: () = assert!(ROUNDS as u64 * PER_HOLDER as u64 <= RING_CAP);
    const WAIT: Timeout = Timeout::After(Duration::from_secs(5));
    let owner = Owner::new("dint-handover");
    let ldi = owner.fabric.create_data_interrupt(None).expect("data interrupt");
    let (file, export, target) = owner.export_data_interrupt(&ldi);
    let eps = [ProcessEndpoint::open(spec()).expect("endpoint"), ProcessEndpoint::open(spec()).expect("endpoint")];
    let mut bulk = Bulk::new(&owner, &eps);
    let first = connect(&eps[0], &file, &export, Some(&target));
    let slot = first.conn().slot;
    let info = first.conn().info;
    drop(first);
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    for round in 0..ROUNDS {
        let i = usize::from(round % 2);
        let ep = &eps[i];
        target.attach(slot as usize);
        let holder = in_slot(ep, &export, info, slot);
        holder.publish_by(Publish::InPlace);
        let send = |seq: u32| {
            holder
                .send(&message(round + 1, seq), T, POLL)
                .unwrap_or_else(|e| panic!("round {round}, message {seq}: {e}"))
        };
        send(0);
        bulk.post(i, ep);
        for seq in 1..PER_HOLDER {
            send(seq);
        }
        holder.disconnect();
        assert!(holder.send(b"late", T, POLL).is_err(), "a send after the disconnect");
    }
    // Read only now: each holder sent into the ring while earlier holders' messages
    // were still in it (all of them fit: ROUNDS * PER_HOLDER <= RING_CAP).
    for round in 0..ROUNDS {
        for seq in 0..PER_HOLDER {
            let n = ldi.wait(&mut buf, WAIT).unwrap_or_else(|e| panic!("round {round}, message {seq}: {e}"));
            assert!(buf[..n] == message(round + 1, seq)[..], "round {round}, message {seq} arrived wrong");
        }
    }
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)), "a message beyond those sent");
    bulk.finish();
}

#[test]
fn notify_messages_of_three_senders_arrive_whole_and_in_order_published_by_sequence_word() {
    three_senders(Publish::InPlace);
}

#[test]
fn notify_messages_of_three_senders_arrive_whole_and_in_order_published_by_completion_data() {
    three_senders(Publish::ByCompletionData);
}

/// Three senders on endpoints of their own send `MESSAGES` each, publishing `how`, to a
/// receiver that spins for the first half of them and sleeps at once for the rest.
fn three_senders(how: Publish) {
    let owner = Owner::new(&format!("dint-{how:?}"));
    let ldi = owner.fabric.create_data_interrupt(None).expect("data interrupt");
    let (file, export, target) = owner.export_data_interrupt(&ldi);
    let senders: Vec<_> = (0..3u8)
        .map(|s| {
            let ep = ProcessEndpoint::open(spec()).expect("sender endpoint");
            let r = connect(&ep, &file, &export, Some(&target));
            r.publish_by(how);
            std::thread::spawn(move || {
                for seq in 0..MESSAGES {
                    r.send(&message(s, seq), T, POLL).unwrap_or_else(|e| panic!("sender {s} message {seq}: {e}"));
                }
                r.check().expect("no send failed");
                (ep, r)
            })
        })
        .collect();
    let started = Instant::now();
    let mut next = [0u32; 3];
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    ldi.set_poll_time(Duration::from_secs(1));
    for i in 0..3 * MESSAGES {
        if i == 3 * MESSAGES / 2 {
            ldi.set_poll_time(Duration::ZERO);
        }
        let n = ldi.wait(&mut buf, T).unwrap_or_else(|e| panic!("message {i}: {e}"));
        let s = if n == 0 { 0 } else { buf[0] };
        assert!(s < 3, "message {i} names sender {s}");
        let want = message(s, next[s as usize]);
        assert!(buf[..n] == want[..], "message {i}: sender {s}'s number {} arrived wrong", next[s as usize]);
        next[s as usize] += 1;
    }
    eprintln!("{} messages of 3 senders, published {how:?}: {:?}", 3 * MESSAGES, started.elapsed());
    let _conns: Vec<_> = senders.into_iter().map(|t| t.join().expect("sender")).collect();
    assert_eq!(next, [MESSAGES; 3]);
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)), "a message beyond those sent");
}

#[test]
fn notify_a_message_published_by_sequence_word_rings_the_receivers_doorbell_and_records_the_tail() {
    // Nobody waits and nobody spins: only the owner endpoint's arrival watch, run after
    // its service thread's progress passes, can ring the doorbell and record the tail.
    let owner = Owner::new("watch");
    let ldi = owner.fabric.create_data_interrupt(None).expect("data interrupt");
    let (file, export, target) = owner.export_data_interrupt(&ldi);
    let ep = ProcessEndpoint::open(spec()).expect("sender endpoint");
    if fi::provider_from_env().starts_with("tcp") || fi::provider_from_env().starts_with("net") {
        assert_eq!(Publish::for_sender(&ep, true), Publish::InPlace, "tcp and net publish in place");
        assert_eq!(Publish::owner_may_watch(&ep), cfg!(target_arch = "x86_64"));
    }
    // To an owner whose record says it does not watch, never in place.
    assert_eq!(Publish::for_sender(&ep, false), Publish::ByCompletionData);
    let r = connect(&ep, &file, &export, Some(&target));
    r.publish_by(Publish::InPlace);
    let rings = Rings::new(direct_mapping(&file, 0, OBJECT_BYTES, MapAccess::ReadWrite).expect("map"));
    let slot = r.conn().slot as usize;
    let bell_seq = || rings.word32(BELL_SEQ).load(Ordering::SeqCst);
    let tail = || rings.word64(Rings::ring(slot) + RING_TAIL).load(Ordering::SeqCst);
    for n in 1..=3u64 {
        let rung = bell_seq();
        r.send(&message(2, n as u32), T, POLL).expect("send");
        eventually("the doorbell rung", || bell_seq() != rung);
        eventually("the tail recorded", || tail() == n);
    }
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    for n in 1..=3u32 {
        let len = ldi.wait(&mut buf, Timeout::Immediate).expect("message");
        assert!(buf[..len] == message(2, n)[..], "message {n}");
    }
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)));
}

#[test]
fn notify_a_full_queue_fails_with_queue_full_having_sent_nothing_published_by_sequence_word() {
    full_queue(Publish::InPlace);
}

#[test]
fn notify_a_full_queue_fails_with_queue_full_having_sent_nothing_published_by_completion_data() {
    full_queue(Publish::ByCompletionData);
}

fn full_queue(how: Publish) {
    let owner = Owner::new(&format!("full-{how:?}"));
    let ldi = owner.fabric.create_data_interrupt(None).expect("data interrupt");
    let (file, export, target) = owner.export_data_interrupt(&ldi);
    let ep = ProcessEndpoint::open(spec()).expect("sender endpoint");
    let r = connect(&ep, &file, &export, Some(&target));
    r.publish_by(how);
    let cap = RING_CAP as u32;
    for seq in 0..cap {
        r.send(&message(1, seq), T, POLL).expect("send");
    }
    for timeout in [Timeout::Immediate, Timeout::After(Duration::from_millis(200))] {
        let e = r.send(&message(1, cap), timeout, POLL);
        assert!(matches!(e, Err(Error::QueueFull { .. })), "{timeout:?}: {e:?}");
    }
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    for seq in 0..cap {
        let n = ldi.wait(&mut buf, T).expect("message");
        assert!(buf[..n] == message(1, seq)[..], "message {seq}");
    }
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)), "a refused message arrived");
    // Drained: sending works again, also for a sender that waits while the receiver reads.
    for seq in cap..2 * cap {
        r.send(&message(1, seq), T, POLL).expect("send after draining");
    }
    let done = Arc::new(AtomicBool::new(false));
    let (r2, d2) = (r.clone(), Arc::clone(&done));
    let t = std::thread::spawn(move || {
        r2.send(&message(1, 2 * cap), T, POLL).expect("a send that waits for room");
        d2.store(true, Ordering::Release);
    });
    std::thread::sleep(Duration::from_millis(50));
    for seq in cap..=2 * cap {
        let n = ldi.wait(&mut buf, T).expect("message");
        assert!(buf[..n] == message(1, seq)[..], "message {seq}");
    }
    t.join().expect("sender");
    assert!(done.load(Ordering::Acquire));
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)));
}

#[test]
fn notify_refuses_large_payloads_wrong_kinds_and_lost_connections() {
    let owner = Owner::new("refuse");
    let ep = ProcessEndpoint::open(spec()).expect("sender endpoint");
    let Pair { ldi, li, dexport: _dexport, iexport: _iexport, d, i } = pair(&owner, &ep);
    let big = vec![7u8; MAX_DATA_INTERRUPT_PAYLOAD + 1];
    assert!(matches!(d.send(&big, T, POLL), Err(Error::PayloadTooLarge { .. })));
    assert!(matches!(d.trigger(), Err(Error::IllegalOperation(_))));
    assert!(matches!(i.send(b"x", T, POLL), Err(Error::IllegalOperation(_))));
    // The largest payload goes, and nothing of the refused one arrived before it.
    d.send(&big[..MAX_DATA_INTERRUPT_PAYLOAD], T, POLL).expect("largest payload");
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    assert_eq!(ldi.wait(&mut buf, T).expect("message"), MAX_DATA_INTERRUPT_PAYLOAD);
    i.trigger().expect("trigger");
    li.wait(T).expect("wait");
    // After a disconnect, every call fails with SegmentLost.
    d.disconnect();
    i.disconnect();
    assert!(matches!(d.send(b"late", T, POLL), Err(Error::SegmentLost { .. })));
    assert!(matches!(i.trigger(), Err(Error::SegmentLost { .. })));
    assert!(matches!(i.check(), Err(Error::SegmentLost { .. })));
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)));
    assert!(is_timeout(&li.wait(Timeout::Immediate)));
}

#[test]
fn notify_a_withdrawn_export_fails_the_senders_next_operations() {
    let owner = Owner::new("withdraw");
    let ep = ProcessEndpoint::open(spec()).expect("sender endpoint");
    let Pair { ldi, li, dexport, iexport, d, i } = pair(&owner, &ep);
    d.send(b"before", T, POLL).expect("send");
    i.trigger().expect("trigger");
    let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
    assert_eq!(ldi.wait(&mut buf, T).expect("message"), 6);
    li.wait(T).expect("wait");
    drop(dexport);
    drop(iexport);
    // Within a generous bound, each sender's calls start failing (the first ones may
    // still be accepted for posting: their failure shows on a later call), and none hangs.
    let end = Instant::now() + Duration::from_secs(30);
    let mut sent = 0;
    let e = loop {
        assert!(Instant::now() < end, "sends after the withdrawal kept succeeding ({sent})");
        match d.send(b"after", Timeout::After(Duration::from_millis(100)), POLL) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
    };
    eprintln!("data interrupt: {sent} sends accepted after the withdrawal, then: {e}");
    assert!(!matches!(e, Error::PayloadTooLarge { .. } | Error::IllegalOperation(_)), "{e}");
    let mut triggered = 0;
    let e = loop {
        assert!(Instant::now() < end, "triggers after the withdrawal kept succeeding ({triggered})");
        match i.trigger() {
            Ok(()) => triggered += 1,
            Err(e) => break e,
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    eprintln!("interrupt: {triggered} triggers accepted after the withdrawal, then: {e}");
    assert!(i.check().is_err(), "check after a failed trigger");
    // Nothing of it reached the owner's waiters.
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)));
    assert!(is_timeout(&li.wait(Timeout::Immediate)));
}

#[test]
fn notify_handler_publishes_only_contiguous_entries() {
    // Completions of one sender dispatched out of order (two threads reading the CQ):
    // an entry is published only once every earlier one is.
    let owner = Owner::new("order");
    let ldi = owner.fabric.create_data_interrupt(None).expect("data interrupt");
    let file = owner.file(kind::DATA_INTERRUPT, ldi.number());
    let map = direct_mapping(&file, 0, OBJECT_BYTES, MapAccess::ReadWrite).expect("map");
    let target = DataInterruptTarget::new(direct_mapping(&file, 0, OBJECT_BYTES, MapAccess::ReadWrite).expect("map"));
    let slot = 5;
    let tail = target.attach(slot);
    assert_eq!(tail, 0);
    // What three remote writes would have placed: the length word and a 1-byte payload.
    for n in 0..3u64 {
        let e = Rings::entry(slot, n);
        // Nobody reads the entry before it is published.
        map.slice().write::<u32>(e + ENTRY_LEN, 1).expect("in the entry");
        map.slice().write::<u8>(e + ENTRY_HEADER, b'a' + n as u8).expect("in the entry");
    }
    let handler = target.handler();
    let mut buf = [0u8; 8];
    handler(message_value(slot, 2));
    handler(message_value(slot, 1));
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)), "published past a gap");
    handler(message_value(slot, 0));
    for want in [b'a', b'b', b'c'] {
        assert_eq!(ldi.wait(&mut buf, Timeout::Immediate).expect("message"), 1);
        assert_eq!(buf[0], want);
    }
    // A value no sender of this ring can have sent now is ignored.
    handler(message_value(slot, 3 + RING_CAP));
    assert!(is_timeout(&ldi.wait(&mut buf, Timeout::Immediate)));
}
