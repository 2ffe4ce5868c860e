//! Interrupts and data interrupts between processes: counted triggers under stress, several
//! senders of checksummed messages, either side killed at any moment, removal under a
//! sleeping waiter, full queues, self-cancelling callbacks, and interrupt numbers of dead
//! owners. Every node is a separate process (see `wakeups_support`).

mod wakeups_support;

use std::time::{Duration, Instant};

use wakeups_support::{
    expected_sum, field, ms_between, parse_book, parse_result, ErrReply, Proc, TestDir, Topology, MAX_WAIT, NOTICE,
    WAIT,
};

#[test]
fn child_entry() {
    wakeups_support::child_entry();
}

/// Ring capacity per sender (`data_interrupt::RING_CAP`).
const QUEUE: u64 = 16;

fn number(reply: &str) -> u32 {
    reply.parse().unwrap_or_else(|_| panic!("not an interrupt number: {reply:?}"))
}

/// Asserts that something a child saw at `seen` (mono ns) came within [`NOTICE`] of
/// `cause`, and returns the delay in ms for the report.
fn within_notice(what: &str, cause: u64, seen: u64) -> f64 {
    let ms = ms_between(cause, seen);
    println!("{what}: noticed {ms:.3} ms after the cause");
    assert!(ms <= NOTICE.as_secs_f64() * 1e3, "{what}: noticed only {ms:.1} ms after the cause");
    ms
}

// ---------------------------------------------------------------------------------------
// 1. Stress: every trigger makes exactly one successful wait
// ---------------------------------------------------------------------------------------

/// `n` triggers from one process to a waiter in another that spins for `poll_us` before it
/// sleeps; the sender pauses `pause_us` between bursts of 1..=64 (none if `None`).
fn stress(t: &Topology, name: &str, n: u64, poll_us: u64, pause_us: Option<u64>) {
    // Across hosts each trigger is a posted write and a completion at both ends: a tenth of
    // the count keeps the case within seconds, and still every trigger must make one wait.
    let n = if t.transport() == "ofi" { n / 10 } else { n };
    let mut rx = Proc::node_named(t, "receiver", 8);
    let mut tx = Proc::node_named(t, "sender", 12);
    let num = number(&rx.ok("icreate i auto"));
    rx.ok(&format!("ipoll i {poll_us}"));
    tx.ok(&format!("iconnect r 8 {num} 5000"));
    // Generous per-wait timeout: a wait that times out fails the test.
    rx.ok(&format!("bg w iwait i {n} 20000"));
    match pause_us {
        Some(p) => tx.ok(&format!("bg s itrig r {n} {p}")),
        None => tx.ok(&format!("bg s itrig r {n}")),
    };
    let started = Instant::now();
    // Progress notes every 100k waits: the test fails if the receiver stalls for 20 s.
    let mut seen = 0;
    let waited = loop {
        let (tag, rest) = rx.note_of(&["progress", "w"], MAX_WAIT);
        if tag == "progress" {
            seen = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("progress count");
            continue;
        }
        match parse_result(&rest).expect("a result note") {
            Ok(r) => break field(&r, "count"),
            Err(e) => panic!("the receiver's wait failed after {seen}+ successful waits: {e}"),
        }
    };
    let sent = match tx.bg_result("s", MAX_WAIT) {
        Ok(r) => field(&r, "count"),
        Err(e) => panic!("the sender failed: {e}"),
    };
    println!("{name}: {sent} triggers, {waited} waits in {:?}", started.elapsed());
    assert_eq!(sent, n, "the sender's count");
    assert_eq!(waited, sent, "successful waits must equal triggers");
    // Nothing left over, nothing counted twice.
    assert_eq!(rx.ok("ipending i"), "0", "triggers left pending after {n} waits");
    rx.err_is("iwait i 1 imm", "Timeout");
    tx.ok("itrig r 1");
    rx.ok("iwait i 1 5000");
    tx.exit();
    rx.exit();
}

fn a_million_triggers_to_a_spinning_waiter_make_a_million_waits(t: &Topology) {
    stress(t, "stress-spin", 1_000_000, 1000, None);
}

fn a_hundred_thousand_triggers_to_a_sleeping_waiter_make_as_many_waits(t: &Topology) {
    // Poll time zero: the waiter sleeps on the futex whenever nothing is pending, and the
    // sender's pauses between bursts make sure it often is.
    stress(t, "stress-sleep", 100_000, 0, Some(50));
}

// ---------------------------------------------------------------------------------------
// 2. Several senders of data interrupts
// ---------------------------------------------------------------------------------------

fn three_data_senders_arrive_whole_and_in_order_with_none_lost(t: &Topology) {
    const N: u64 = 2000;
    let mut rx = Proc::node_named(t, "receiver", 8);
    let num = number(&rx.ok("dcreate d auto"));
    let mut senders: Vec<Proc> = (0..3u32).map(|s| Proc::node_named(t, &format!("sender {s}"), 12 + 4 * s)).collect();
    for tx in &mut senders {
        tx.ok(&format!("dconnect r 8 {num} 5000"));
    }
    // The receiver checks every message against what its sender must send next (sender,
    // number, length 0..=4096, contents, embedded checksum): whole, in order, none lost.
    rx.ok(&format!("bg r drecv_until d 0:{N},1:{N},2:{N} 20000"));
    for (s, tx) in senders.iter_mut().enumerate() {
        tx.ok(&format!("bg s dsend r {s} 0 {N} 20000"));
    }
    let mut sums = Vec::new();
    for tx in &mut senders {
        let r = tx.bg_result("s", MAX_WAIT).unwrap_or_else(|e| panic!("{}: {e}", tx.name()));
        assert_eq!(field(&r, "sent"), N, "{r}");
        sums.push(r.split("sum=").nth(1).and_then(|v| u64::from_str_radix(v.trim(), 16).ok()).expect("sum"));
    }
    let r = rx.bg_result("r", MAX_WAIT).unwrap_or_else(|e| panic!("receiver: {e}"));
    println!("receiver: {r}");
    assert_eq!(field(&r, "drained"), 0, "messages beyond the {N} per sender: {r}");
    let book = parse_book(&r);
    assert_eq!(book.len(), 3, "senders seen: {r}");
    for s in 0..3u8 {
        let (count, sum) = book[&s];
        assert_eq!(count, N, "messages from sender {s}: {r}");
        assert_eq!(sum, sums[s as usize], "sender {s}: the receiver's sum differs from the sender's");
        assert_eq!(sum, expected_sum(s, N), "sender {s}: sum of what was received");
    }
    for tx in &mut senders {
        tx.exit();
    }
    rx.exit();
}

// ---------------------------------------------------------------------------------------
// 3a. The receiver (owner) is killed while senders send
// ---------------------------------------------------------------------------------------

fn killing_the_owner_makes_a_triggering_sender_fail_within_2_s(t: &Topology) {
    // Killed at different moments of the sender's loop.
    for delay_ms in [0u64, 20, 150] {
        let t = &t.fresh("int-owner-kill");
        let mut rx = Proc::node_named(t, "receiver", 8);
        let mut tx = Proc::node_named(t, "sender", 12);
        let num = number(&rx.ok("icreate i auto"));
        tx.ok(&format!("iconnect r 8 {num} 5000"));
        rx.ok("bg w iwait i 1000000000 20000");
        tx.ok("bg s itrig r inf");
        std::thread::sleep(Duration::from_millis(delay_ms));
        let killed = rx.kill9_at();
        let e = match tx.bg_result("s", WAIT) {
            Ok(r) => panic!("the trigger loop ended without an error: {r}"),
            Err(e) => e,
        };
        first_failure(t, &e, "owner died");
        within_notice(&format!("interrupt trigger after owner kill (+{delay_ms} ms)"), killed, field(&e.detail, "t"));
        // Later triggers fail too, and the number is gone.
        until_lost(t, &mut tx, "itrig r 1", "owner died");
        tx.err_is(&format!("iconnect r2 8 {num} imm"), "NoSuchInterrupt");
        tx.exit();
    }
}

fn killing_the_owner_makes_a_streaming_data_sender_fail_within_2_s(t: &Topology) {
    for delay_ms in [0u64, 30, 150] {
        let t = &t.fresh("dint-owner-kill");
        let mut rx = Proc::node_named(t, "receiver", 8);
        let mut tx = Proc::node_named(t, "sender", 12);
        let num = number(&rx.ok("dcreate d auto"));
        tx.ok(&format!("dconnect r 8 {num} 5000"));
        rx.ok("bg r drecv d 1000000000 20000");
        // A long timeout: a sender that waits for room must not wait for all of it.
        tx.ok("bg s dsend r 1 0 inf 15000");
        std::thread::sleep(Duration::from_millis(delay_ms));
        let killed = rx.kill9_at();
        let e = match tx.bg_result("s", WAIT) {
            Ok(r) => panic!("the send loop ended without an error: {r}"),
            Err(e) => e,
        };
        first_failure(t, &e, "owner died");
        within_notice(&format!("data trigger after owner kill (+{delay_ms} ms)"), killed, field(&e.detail, "t"));
        until_lost(t, &mut tx, "dsend r 1 0 1 1000", "owner died");
        tx.err_is(&format!("dconnect r2 8 {num} imm"), "NoSuchInterrupt");
        tx.exit();
    }
}

fn killing_the_owner_releases_a_sender_blocked_on_a_full_queue_within_2_s(t: &Topology) {
    let mut rx = Proc::node_named(t, "receiver", 8);
    let mut tx = Proc::node_named(t, "sender", 12);
    let num = number(&rx.ok("dcreate d auto"));
    tx.ok(&format!("dconnect r 8 {num} 5000"));
    // The receiver never reads: 16 fit, the 17th waits for room (up to 15 s).
    tx.ok(&format!("bg s dsend r 1 0 {} 15000 report", QUEUE + 1));
    for k in 0..QUEUE {
        assert_eq!(tx.note("sent", WAIT), format!("1 {k}"));
    }
    // Let the blocked sender go from spinning to sleeping.
    std::thread::sleep(Duration::from_millis(200));
    assert!(tx.try_note("s").is_none(), "the 17th send returned although the queue is full");
    let killed = rx.kill9_at();
    let e = match tx.bg_result("s", WAIT) {
        Ok(r) => panic!("the blocked send succeeded: {r}"),
        Err(e) => e,
    };
    first_failure(t, &e, "owner died");
    assert_eq!(field(&e.detail, "sent"), QUEUE, "{e}");
    let ms = within_notice("data sender blocked on a full queue, owner killed", killed, field(&e.detail, "t"));
    assert!(field(&e.detail, "dur_us") < 15_000_000, "it waited its whole timeout: {e}");
    println!("blocked send returned {ms:.3} ms after the kill");
    tx.exit();
}

// ---------------------------------------------------------------------------------------
// 3b. A sender is killed mid-stream
// ---------------------------------------------------------------------------------------

/// Waits until `tx` has noted `at_least` sent messages, then kills it; returns how many it
/// reported sent in all (reading every note it wrote before it died).
fn kill_sender_after(tx: &mut Proc, s: u8, at_least: u64) -> u64 {
    let mut reported = 0u64;
    while reported < at_least {
        let n = tx.note("sent", WAIT);
        assert_eq!(n, format!("{s} {reported}"), "sender {s} notes out of order");
        reported += 1;
    }
    tx.kill9();
    for n in tx.remaining_notes("sent") {
        assert_eq!(n, format!("{s} {reported}"), "sender {s} notes out of order");
        reported += 1;
    }
    reported
}

fn killing_senders_mid_stream_loses_nothing_they_sent_and_others_go_on(t: &Topology) {
    const N: u64 = 1500;
    let mut rx = Proc::node_named(t, "receiver", 8);
    let num = number(&rx.ok("dcreate d auto"));
    let mut a = Proc::node_named(t, "sender 0", 12);
    let mut b = Proc::node_named(t, "sender 1", 16);
    let mut c = Proc::node_named(t, "sender 2", 20);
    for tx in [&mut a, &mut b, &mut c] {
        tx.ok(&format!("dconnect r 8 {num} 5000"));
    }
    // Receives until the three senders that live to the end sent N each (2 below, and 3
    // and 4, which connect after the kills), then drains what is left.
    rx.ok(&format!("bg r drecv_until d 2:{N},3:{N},4:{N} 20000"));
    a.ok("bg s dsend r 0 0 inf 15000 report");
    b.ok("bg s dsend r 1 0 inf 15000 report");
    c.ok(&format!("bg s dsend r 2 0 {N} 15000"));

    let sent_a = kill_sender_after(&mut a, 0, 300);
    // A new sender connects after the kill (it may inherit the dead one's slot).
    let mut d = Proc::node_named(t, "sender 3", 24);
    d.ok(&format!("dconnect r 8 {num} 5000"));
    d.ok(&format!("bg s dsend r 3 0 {N} 15000"));
    let sent_b = kill_sender_after(&mut b, 1, 500);
    let mut e = Proc::node_named(t, "sender 4", 28);
    e.ok(&format!("dconnect r 8 {num} 5000"));
    e.ok(&format!("bg s dsend r 4 0 {N} 15000"));

    for tx in [&mut c, &mut d, &mut e] {
        let r = tx.bg_result("s", MAX_WAIT).unwrap_or_else(|err| panic!("{}: {err}", tx.name()));
        assert_eq!(field(&r, "sent"), N, "{r}");
    }
    let r = rx.bg_result("r", MAX_WAIT).unwrap_or_else(|err| panic!("receiver: {err}"));
    println!("receiver: {r}; sender 0 reported {sent_a} sent, sender 1 {sent_b}");
    let book = parse_book(&r);
    for (s, reported) in [(0u8, sent_a), (1, sent_b)] {
        let (got, sum) = book.get(&s).copied().unwrap_or((0, 0));
        // Every message whose send returned arrived; at most the one in flight at the kill
        // (published, not yet reported) comes on top. Each was checked whole.
        assert!(
            got == reported || got == reported + 1,
            "killed sender {s} reported {reported} messages sent, the receiver got {got}: {r}"
        );
        assert_eq!(sum, expected_sum(s, got), "sender {s}");
    }
    for s in 2..5u8 {
        assert_eq!(book.get(&s).map(|v| v.0), Some(N), "sender {s}: {r}");
        assert_eq!(book[&s].1, expected_sum(s, N), "sender {s}");
    }
    // Nothing else is queued.
    let drained = rx.ok("drain d");
    assert_eq!(field(&drained, "drained"), 0, "{drained}");
    for tx in [&mut c, &mut d, &mut e] {
        tx.exit();
    }
    rx.exit();
}

fn a_sender_killed_while_blocked_on_a_full_queue_delivers_exactly_what_it_queued(t: &Topology) {
    let mut rx = Proc::node_named(t, "receiver", 8);
    let num = number(&rx.ok("dcreate d auto"));
    let mut a = Proc::node_named(t, "sender 0", 12);
    a.ok(&format!("dconnect r 8 {num} 5000"));
    a.ok(&format!("bg s dsend r 0 0 {} 15000 report", QUEUE + 1));
    let sent = kill_sender_after(&mut a, 0, QUEUE);
    assert_eq!(sent, QUEUE, "the 17th send cannot have returned: the queue was full");
    // A new sender connects after the kill, then the receiver reads everything.
    let mut d = Proc::node_named(t, "sender 3", 16);
    d.ok(&format!("dconnect r 8 {num} 5000"));
    rx.ok("bg r drecv_until d 0:16,3:40 10000");
    let r = d.ok("dsend r 3 0 40 10000");
    assert_eq!(field(&r, "sent"), 40, "{r}");
    let r = rx.bg_result("r", WAIT).unwrap_or_else(|err| panic!("receiver: {err}"));
    let book = parse_book(&r);
    assert_eq!(book.get(&0).map(|v| v.0), Some(QUEUE), "the dead sender's queued messages: {r}");
    assert_eq!(book.get(&3).map(|v| v.0), Some(40), "{r}");
    assert_eq!(field(&r, "drained"), 0, "{r}");
    d.exit();
    rx.exit();
}

// ---------------------------------------------------------------------------------------
// 4. Removal while a waiter sleeps
// ---------------------------------------------------------------------------------------

/// Checks a peer's first error after the owner died or removed the object (`why`, words of
/// the loss reason). On one host it is the loss (`InterruptLost`). Across hosts the peer's
/// own write to, or read of, the dead or withdrawn object may fail first: the provider sees
/// the connection break before the daemons' notice arrives, and the transport reports the
/// failed operation (`Ofi`); [`until_lost`] then checks that the notice follows.
fn first_failure(t: &Topology, e: &ErrReply, why: &str) {
    match e.variant.as_str() {
        "InterruptLost" => assert!(e.detail.contains(why), "{e}"),
        "Ofi" if t.transport() == "ofi" => {}
        _ => panic!("the first failure after the owner's doing: {e}"),
    }
}

/// Checks that `cmd` (a trigger or a send) fails with `InterruptLost` for `why`: at once on
/// one host; across hosts once the daemons' notice arrived, within [`NOTICE`] (until then
/// calls may succeed, or fail for a failed operation).
fn until_lost(t: &Topology, peer: &mut Proc, cmd: &str, why: &str) {
    if t.transport() == "shm" {
        let e = peer.err_is(cmd, "InterruptLost");
        assert!(e.detail.contains(why), "{e}");
        return;
    }
    let start = Instant::now();
    loop {
        let r = peer.call(cmd);
        match r {
            Err(e) if e.variant == "InterruptLost" => {
                assert!(e.detail.contains(why), "{e}");
                return;
            }
            _ if start.elapsed() < NOTICE => std::thread::sleep(Duration::from_millis(1)),
            r => panic!("`{cmd}` gives {r:?} {NOTICE:?} later, not InterruptLost"),
        }
    }
}

fn removing_an_interrupt_wakes_its_sleeping_waiter_and_fails_its_peers(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    let mut peer = Proc::node_named(t, "peer", 12);
    let num = number(&owner.ok("icreate i auto"));
    owner.ok("ipoll i 0");
    peer.ok(&format!("iconnect r 8 {num} 5000"));
    // One trigger works, then the waiter goes to sleep for ever.
    peer.ok("itrig r 1");
    owner.ok("iwait i 1 5000");
    owner.ok("bg w iwait i 1 inf");
    std::thread::sleep(Duration::from_millis(300));
    assert!(owner.try_note("w").is_none(), "the wait returned with nothing triggered");
    // Another thread of the owner process removes it.
    let removed = field(&owner.ok("iremove i"), "t");
    let e = match owner.bg_result("w", WAIT) {
        Ok(r) => panic!("the sleeping wait succeeded: {r}"),
        Err(e) => e,
    };
    assert_eq!(e.variant, "InterruptRemoved", "{e}");
    within_notice("sleeping interrupt waiter after removal", removed, field(&e.detail, "t"));
    owner.err_is("iwait i 1 imm", "InterruptRemoved");
    // Peers: triggers fail, connecting anew finds nothing.
    until_lost(t, &mut peer, "itrig r 1", "removed");
    peer.err_is(&format!("iconnect r2 8 {num} imm"), "NoSuchInterrupt");
    let mut late = Proc::node_named(t, "late peer", 16);
    late.err_is(&format!("iconnect r 8 {num} imm"), "NoSuchInterrupt");
    late.exit();
    peer.exit();
    owner.exit();
}

fn removing_a_data_interrupt_wakes_its_sleeping_waiter_and_fails_its_peers(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    let mut peer = Proc::node_named(t, "peer", 12);
    let num = number(&owner.ok("dcreate d auto"));
    owner.ok("dpoll d 0");
    peer.ok(&format!("dconnect r 8 {num} 5000"));
    peer.ok("dsend r 1 0 1 1000");
    owner.ok("dwait d 4096 5000");
    owner.ok("bg w dwait d 4096 inf");
    std::thread::sleep(Duration::from_millis(300));
    assert!(owner.try_note("w").is_none(), "the wait returned with nothing sent");
    let removed = field(&owner.ok("dremove d"), "t");
    let e = match owner.bg_result("w", WAIT) {
        Ok(r) => panic!("the sleeping wait succeeded: {r}"),
        Err(e) => e,
    };
    assert_eq!(e.variant, "InterruptRemoved", "{e}");
    within_notice("sleeping data interrupt waiter after removal", removed, field(&e.detail, "t"));
    owner.err_is("dtry d 4096", "InterruptRemoved");
    until_lost(t, &mut peer, "dsend r 1 1 1 1000", "removed");
    peer.err_is(&format!("dconnect r2 8 {num} imm"), "NoSuchInterrupt");
    let mut late = Proc::node_named(t, "late peer", 16);
    late.err_is(&format!("dconnect r 8 {num} imm"), "NoSuchInterrupt");
    late.exit();
    peer.exit();
    owner.exit();
}

fn removing_a_data_interrupt_releases_a_sender_blocked_on_its_full_queue(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    let mut peer = Proc::node_named(t, "peer", 12);
    let num = number(&owner.ok("dcreate d auto"));
    peer.ok(&format!("dconnect r 8 {num} 5000"));
    peer.ok(&format!("bg s dsend r 1 0 {} 15000 report", QUEUE + 1));
    for k in 0..QUEUE {
        assert_eq!(peer.note("sent", WAIT), format!("1 {k}"));
    }
    std::thread::sleep(Duration::from_millis(200));
    let removed = field(&owner.ok("dremove d"), "t");
    let e = match peer.bg_result("s", WAIT) {
        Ok(r) => panic!("the blocked send succeeded: {r}"),
        Err(e) => e,
    };
    first_failure(t, &e, "removed");
    within_notice("data sender blocked on a full queue, interrupt removed", removed, field(&e.detail, "t"));
    peer.exit();
    owner.exit();
}

/// Regression: `LocalInterrupt::remove` must ring the interrupt's doorbell, so a waiter
/// asleep on it notices the removal at once, not when its 250 ms safety nap ends.
fn removing_an_interrupt_wakes_a_sleeping_waiter_at_once_not_after_its_nap(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    let mut best = f64::MAX;
    for round in 0..3 {
        let name = format!("i{round}");
        owner.ok(&format!("icreate {name} auto"));
        owner.ok(&format!("ipoll {name} 0"));
        // The waiter falls asleep about when the bg reply comes; its safety nap lasts 250 ms,
        // so removing 260 ms later leaves it ~240 ms of a fresh nap unless removal wakes it.
        owner.ok(&format!("bg w{round} iwait {name} 1 inf"));
        std::thread::sleep(Duration::from_millis(260));
        let removed = field(&owner.ok(&format!("iremove {name}")), "t");
        let e = owner.bg_result(&format!("w{round}"), WAIT).expect_err("the wait cannot succeed");
        assert_eq!(e.variant, "InterruptRemoved", "{e}");
        let ms = ms_between(removed, field(&e.detail, "t"));
        println!("round {round}: the sleeping waiter noticed the removal after {ms:.3} ms");
        best = best.min(ms);
    }
    // A ring wakes the waiter in microseconds; 150 ms leaves room for a loaded machine.
    assert!(best < 150.0, "the fastest of three sleeping waiters took {best:.1} ms to notice a removal");
    owner.exit();
}

// ---------------------------------------------------------------------------------------
// 5. A full queue across processes
// ---------------------------------------------------------------------------------------

fn a_full_queue_fails_the_17th_send_after_its_timeout_and_loses_nothing(t: &Topology) {
    let mut rx = Proc::node_named(t, "receiver", 8);
    let mut tx = Proc::node_named(t, "sender", 12);
    let num = number(&rx.ok("dcreate d auto"));
    tx.ok(&format!("dconnect r 8 {num} 5000"));
    // The receiver does not read: 16 messages fit.
    let r = tx.ok(&format!("dsend r 1 0 {QUEUE} 1000"));
    assert_eq!(field(&r, "sent"), QUEUE);
    let started = Instant::now();
    let e = tx.err_is(&format!("dsend r 1 {QUEUE} 1 200"), "QueueFull");
    let dur_us = field(&e.detail, "dur_us");
    println!("the 17th send failed after {dur_us} us ({:?} as the parent saw it)", started.elapsed());
    assert!(dur_us >= 200_000, "QueueFull after only {dur_us} us of a 200 ms timeout: {e}");
    assert!(e.detail.contains("waited_ms: 200"), "{e}");
    // Immediate sends fail at once too; too large a payload is refused before anything.
    tx.err_is(&format!("dsend r 1 {QUEUE} 1 imm"), "QueueFull");
    tx.err_is("dsend_big r 4097", "PayloadTooLarge");
    // A buffer too small for the first message fails and keeps it (message 0 of sender 1 is
    // longer than one byte).
    assert!(wakeups_support::msg_len(1, 0) > 1);
    rx.err_is("dwait d 1 1000", "BufferTooSmall");
    rx.err_is("dtry d 1", "BufferTooSmall");
    // The receiver drains: all 16 arrive, in order (each checked against its number).
    let r = rx.ok(&format!("drecv d {QUEUE} 5000"));
    assert_eq!(field(&r, "received"), QUEUE, "{r}");
    assert_eq!(parse_book(&r)[&1], (QUEUE, expected_sum(1, QUEUE)), "{r}");
    let r = rx.ok("drain d");
    assert_eq!(field(&r, "drained"), 0, "the failed sends left something queued: {r}");
    // The sender can send again, and blocks no longer than it takes the receiver to read.
    let r = tx.ok(&format!("dsend r 1 {QUEUE} {QUEUE} 1000"));
    assert_eq!(field(&r, "sent"), QUEUE);
    rx.ok("bg r drecv d 40 5000");
    let r = tx.ok(&format!("dsend r 1 {} 24 5000", 2 * QUEUE));
    assert_eq!(field(&r, "sent"), 24);
    let r = rx.bg_result("r", WAIT).unwrap_or_else(|e| panic!("receiver: {e}"));
    assert_eq!(parse_book(&r)[&1], (QUEUE + 40, expected_sum(1, QUEUE + 40)), "{r}");
    // A receiver spinning on `try_wait` (and a progress driver) gets the next ones, in order;
    // an empty queue answers `none` at once.
    assert_eq!(rx.ok("dtry d 4096"), "none");
    rx.ok(&format!("bg s dspin d {QUEUE} 5000"));
    let r = tx.ok(&format!("dsend r 1 {} {QUEUE} 5000", QUEUE + 40));
    assert_eq!(field(&r, "sent"), QUEUE);
    let r = rx.bg_result("s", WAIT).unwrap_or_else(|e| panic!("spinning receiver: {e}"));
    assert_eq!(parse_book(&r)[&1], (2 * QUEUE + 40, expected_sum(1, 2 * QUEUE + 40)), "{r}");
    assert_eq!(rx.ok("dtry d 4096"), "none");
    tx.exit();
    rx.exit();
}

// ---------------------------------------------------------------------------------------
// 6. Callbacks that cancel themselves
// ---------------------------------------------------------------------------------------

fn an_interrupt_callback_that_cancels_itself_is_called_no_more(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    let mut peer = Proc::node_named(t, "peer", 12);
    let num = number(&owner.ok("icreate i auto"));
    peer.ok(&format!("iconnect r 8 {num} 5000"));
    owner.ok("ion_trigger i 5");
    peer.ok("itrig r 8");
    assert_eq!(owner.note("cb", WAIT), "i cancelled count=5");
    // Give a callback that wrongly went on time to run.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(owner.ok("count i"), "5", "calls after Cancel");
    assert_eq!(owner.ok("ipending i"), "3", "the triggers after the cancelling one stay pending");
    peer.ok("itrig r 4");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(owner.ok("count i"), "5", "calls after Cancel");
    assert_eq!(owner.ok("ipending i"), "7");
    owner.ok("iwait i 7 imm");
    owner.err_is("iwait i 1 imm", "Timeout");
    // A new callback starts afresh and runs for later triggers.
    owner.ok("ion_trigger i 0");
    peer.ok("itrig r 3");
    wakeups_support::wait_until("the new callback's three calls", WAIT, || owner.ok("count i") == "8");
    peer.exit();
    owner.exit();
}

fn a_data_callback_that_cancels_itself_leaves_the_rest_queued(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    let mut peer = Proc::node_named(t, "peer", 12);
    let num = number(&owner.ok("dcreate d auto"));
    peer.ok(&format!("dconnect r 8 {num} 5000"));
    owner.ok("don_message d 4");
    let r = peer.ok("dsend r 2 0 10 5000");
    assert_eq!(field(&r, "sent"), 10);
    // The callback checks each message into the receiver's book, in order.
    assert_eq!(owner.note("cb", WAIT), "d cancelled count=4");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(owner.ok("count d"), "4", "calls after Cancel");
    assert_eq!(parse_book(&owner.ok("book"))[&2].0, 4);
    peer.ok("dsend r 2 10 3 5000");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(owner.ok("count d"), "4", "calls after Cancel");
    // Messages 4..13 are still queued, in order.
    let r = owner.ok("drain d");
    assert_eq!(field(&r, "drained"), 9, "{r}");
    assert_eq!(parse_book(&r)[&2], (13, expected_sum(2, 13)), "{r}");
    assert!(owner.try_note("cb").is_none(), "a callback ran after Cancel");
    peer.exit();
    owner.exit();
}

// ---------------------------------------------------------------------------------------
// 8. Interrupt numbers, status and cleanup
// ---------------------------------------------------------------------------------------

fn listed(dir: &TestDir, kind: &str, node: u32, id: u32) -> Option<lanes::fabric::SegmentStatus> {
    let st = lanes::status(&dir.fabric()).expect("lanes::status");
    st.segments.into_iter().find(|s| s.kind == kind && s.node == node && s.id == id)
}

// Single-host: two processes act as node 8, and status and cleanup read its files.
#[test]
fn interrupt_numbers_in_use_dead_owners_replaced_status_and_cleanup() {
    let dir = TestDir::new("int-numbers");
    let mut a = Proc::node_named(&dir, "owner A", 8);
    let mut a2 = Proc::node_named(&dir, "second process of node 8", 8);
    let mut peer = Proc::node_named(&dir, "peer", 12);
    a.ok("icreate i 42");
    a.ok("dcreate d 43");
    // Numbers held by live objects of the node are refused, to the same and another process.
    a.err_is("icreate x 42", "InterruptNumberInUse");
    a2.err_is("icreate x 42", "InterruptNumberInUse");
    a2.err_is("dcreate x 43", "InterruptNumberInUse");
    // Automatic numbers of two processes differ, and differ from the fixed ones.
    let auto_a = number(&a.ok("icreate ia auto"));
    let auto_b = number(&a2.ok("icreate ib auto"));
    assert_ne!(auto_a, auto_b);
    assert!(![42, 43].contains(&auto_a) && ![42, 43].contains(&auto_b));
    // Another node may use the same numbers.
    peer.ok("icreate mine 42");

    let i = listed(&dir, "interrupt", 8, 42).expect("interrupt 42 listed");
    assert!(i.alive && i.owner_pid == a.pid(), "{i:?}");
    let d = listed(&dir, "data-interrupt", 8, 43).expect("data interrupt 43 listed");
    assert!(d.alive && d.owner_pid == a.pid(), "{d:?}");
    assert!(listed(&dir, "interrupt", 12, 42).is_some());
    assert!(listed(&dir, "interrupt", 8, auto_b).is_some_and(|s| s.owner_pid == a2.pid()));

    peer.ok("iconnect r 8 42 5000");
    peer.ok("dconnect rd 8 43 5000");
    let i = listed(&dir, "interrupt", 8, 42).expect("interrupt 42 listed");
    assert_eq!(i.connections, vec![(12, peer.pid())], "{i:?}");

    // The owner dies: its objects are stale, not live.
    a.kill9();
    let i = listed(&dir, "interrupt", 8, 42).expect("a dead owner's interrupt is still listed");
    assert!(!i.alive, "{i:?}");
    assert!(!listed(&dir, "data-interrupt", 8, 43).expect("listed").alive);
    peer.eventually_err_is("itrig r 1", "InterruptLost");
    peer.eventually_err_is("dsend rd 1 0 1 1000", "InterruptLost");
    peer.err_is("iconnect r2 8 42 imm", "NoSuchInterrupt");

    // A new process re-creates number 42 over the stale object; peers reach the new one.
    let mut b = Proc::node_named(&dir, "owner B", 8);
    assert_eq!(b.ok("icreate i 42"), "42");
    b.err_is("icreate x 42", "InterruptNumberInUse");
    let i = listed(&dir, "interrupt", 8, 42).expect("listed");
    assert!(i.alive && i.owner_pid == b.pid(), "{i:?}");
    peer.ok("iconnect r2 8 42 5000");
    peer.ok("itrig r2 1");
    b.ok("iwait i 1 5000");
    peer.err_is("itrig r 1", "InterruptLost");

    // Cleanup removes the dead owner's data interrupt and automatic interrupt, nothing live.
    let report = lanes::cleanup(&dir.fabric()).expect("lanes::cleanup");
    println!("cleanup: {report:?}");
    let removed: Vec<(u32, u32)> = report.segments.iter().map(|(n, id, _)| (*n, *id)).collect();
    assert!(removed.contains(&(8, 43)), "{report:?}");
    assert!(removed.contains(&(8, auto_a)), "{report:?}");
    assert!(!removed.contains(&(8, 42)) && !removed.contains(&(8, auto_b)), "a live object was removed: {report:?}");
    assert!(!removed.contains(&(12, 42)), "{report:?}");
    let why = &report.segments.iter().find(|(n, id, _)| (*n, *id) == (8, 43)).expect("43").2;
    assert!(why.contains("data-interrupt") && why.contains("dead"), "{why}");
    assert!(report.records.contains(&(8, a.pid())), "the dead owner's record: {report:?}");
    assert!(listed(&dir, "data-interrupt", 8, 43).is_none());
    assert!(listed(&dir, "interrupt", 8, auto_a).is_none());
    assert!(listed(&dir, "interrupt", 8, 42).is_some_and(|s| s.alive));
    // The number of the cleaned data interrupt is free again.
    b.ok("dcreate d 43");
    peer.ok("dconnect rd2 8 43 5000");
    peer.ok("dsend rd2 1 0 3 1000");
    let r = b.ok("drecv d 3 5000");
    assert_eq!(field(&r, "received"), 3, "{r}");

    peer.exit();
    a2.exit();
    b.exit();
}

wakeups_support::topology_cases!(
    a_million_triggers_to_a_spinning_waiter_make_a_million_waits,
    a_hundred_thousand_triggers_to_a_sleeping_waiter_make_as_many_waits,
    three_data_senders_arrive_whole_and_in_order_with_none_lost,
    killing_the_owner_makes_a_triggering_sender_fail_within_2_s,
    killing_the_owner_makes_a_streaming_data_sender_fail_within_2_s,
    killing_the_owner_releases_a_sender_blocked_on_a_full_queue_within_2_s,
    killing_senders_mid_stream_loses_nothing_they_sent_and_others_go_on,
    a_sender_killed_while_blocked_on_a_full_queue_delivers_exactly_what_it_queued,
    removing_an_interrupt_wakes_its_sleeping_waiter_and_fails_its_peers,
    removing_a_data_interrupt_wakes_its_sleeping_waiter_and_fails_its_peers,
    removing_a_data_interrupt_releases_a_sender_blocked_on_its_full_queue,
    removing_an_interrupt_wakes_a_sleeping_waiter_at_once_not_after_its_nap,
    a_full_queue_fails_the_17th_send_after_its_timeout_and_loses_nothing,
    an_interrupt_callback_that_cancels_itself_is_called_no_more,
    a_data_callback_that_cancels_itself_leaves_the_rest_queued,
    ;
    ofi: a_million_triggers_to_a_spinning_waiter_make_a_million_waits,
    a_hundred_thousand_triggers_to_a_sleeping_waiter_make_as_many_waits,
    three_data_senders_arrive_whole_and_in_order_with_none_lost,
    killing_the_owner_makes_a_triggering_sender_fail_within_2_s,
    killing_the_owner_makes_a_streaming_data_sender_fail_within_2_s,
    killing_the_owner_releases_a_sender_blocked_on_a_full_queue_within_2_s,
    killing_senders_mid_stream_loses_nothing_they_sent_and_others_go_on,
    a_sender_killed_while_blocked_on_a_full_queue_delivers_exactly_what_it_queued,
    removing_an_interrupt_wakes_its_sleeping_waiter_and_fails_its_peers,
    removing_a_data_interrupt_wakes_its_sleeping_waiter_and_fails_its_peers,
    removing_a_data_interrupt_releases_a_sender_blocked_on_its_full_queue,
    removing_an_interrupt_wakes_a_sleeping_waiter_at_once_not_after_its_nap,
    a_full_queue_fails_the_17th_send_after_its_timeout_and_loses_nothing,
    an_interrupt_callback_that_cancels_itself_is_called_no_more,
    a_data_callback_that_cancels_itself_leaves_the_rest_queued,
);
