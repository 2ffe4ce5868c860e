//! Segment events between processes: the owner hears peers connect, disconnect and die;
//! peers hear the owner toggle availability, remove the segment, or die — through
//! `wait_event` and through `on_event` callbacks. Every node is a separate process (see
//! `wakeups_support`).

mod wakeups_support;

use std::time::Duration;

use lanes::fabric::{LocalEvent, RemoteEvent};
use lanes::LossReason;
use wakeups_support::{field, ms_between, tail_field, Proc, Topology, NOTICE, WAIT};

#[test]
fn child_entry() {
    wakeups_support::child_entry();
}

/// The event and time (mono ns) of an `lwait`/`rwait` reply or an event note.
fn event(reply: &str) -> (String, u64) {
    (tail_field(reply, "ev").to_string(), field(reply, "t"))
}

/// The owner's (node 8's) event for the process `pid` of `node` connecting (with the pid
/// the owner sees, [`Topology::seen_pid`]).
fn connected(t: &Topology, node: u32, pid: u32) -> String {
    format!("{:?}", LocalEvent::Connected { node, pid: t.seen_pid(8, node, pid) })
}

/// The owner's event for that process disconnecting, or dying.
fn disconnected(t: &Topology, node: u32, pid: u32, died: bool) -> String {
    format!("{:?}", LocalEvent::Disconnected { node, pid: t.seen_pid(8, node, pid), died })
}

fn remote(ev: RemoteEvent) -> String {
    format!("{ev:?}")
}

/// Checks that `seen` (mono ns) is within [`NOTICE`] of `cause` and returns the delay in ms.
fn within_notice(what: &str, cause: u64, seen: u64) -> f64 {
    let ms = ms_between(cause, seen);
    println!("{what}: noticed {ms:.3} ms after the kill");
    assert!(ms <= NOTICE.as_secs_f64() * 1e3, "{what}: noticed only {ms:.1} ms after the kill");
    ms
}

fn summary(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{what}: {} kills, min {:.3} ms, median {:.3} ms, max {:.3} ms",
        ms.len(),
        ms[0],
        ms[ms.len() / 2],
        ms[ms.len() - 1]
    );
}

// ---------------------------------------------------------------------------------------
// The owner's side
// ---------------------------------------------------------------------------------------

fn the_owner_hears_peers_connect_disconnect_and_die(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    owner.ok("seg s 0x70 4096");
    owner.err_is("lwait s 100", "Timeout");

    // A clean connect and disconnect.
    let mut peer = Proc::node_named(t, "peer", 12);
    peer.ok("connect r 8 0x70 5000");
    let (ev, _) = event(&owner.ok("lwait s 5000"));
    assert_eq!(ev, connected(t, 12, peer.pid()));
    assert_eq!(owner.ok("peers s"), format!("12:{}", t.seen_pid(8, 12, peer.pid())));
    peer.ok("drop r");
    let (ev, _) = event(&owner.ok("lwait s 5000"));
    assert_eq!(ev, disconnected(t, 12, peer.pid(), false));
    owner.err_is("lwait s 100", "Timeout");
    // A peer that exits after disconnecting is no death.
    peer.exit();
    owner.err_is("lwait s 100", "Timeout");

    // A connected peer is killed while the owner sleeps in wait_event(Infinite).
    owner.ok("lpoll s 0");
    let mut deaths = Vec::new();
    for round in 0..5u32 {
        let node = 16 + 4 * round;
        let mut victim = Proc::node_named(t, &format!("victim {round}"), node);
        victim.ok("connect r 8 0x70 5000");
        let (ev, _) = event(&owner.ok("lwait s 5000"));
        assert_eq!(ev, connected(t, node, victim.pid()));
        owner.ok("bg w lwait s inf");
        std::thread::sleep(Duration::from_millis(100));
        assert!(owner.try_note("w").is_none(), "wait_event returned with no event");
        let pid = victim.pid();
        let killed = victim.kill9_at();
        let (ev, seen) = event(&owner.bg_result("w", WAIT).unwrap_or_else(|e| panic!("wait_event: {e}")));
        assert_eq!(ev, disconnected(t, node, pid, true));
        deaths.push(within_notice(&format!("owner wait_event, peer death {round}"), killed, seen));
        assert_eq!(owner.ok("peers s"), "", "a dead peer is still listed");
    }
    summary("owner's wait_event(Infinite) hearing of a connected peer's kill -9", deaths);

    // A peer killed while nobody waits: the next wait reports it.
    let mut victim = Proc::node_named(t, "late victim", 40);
    victim.ok("connect r 8 0x70 5000");
    let (ev, _) = event(&owner.ok("lwait s 5000"));
    assert_eq!(ev, connected(t, 40, victim.pid()));
    let pid = victim.pid();
    victim.kill9();
    let (ev, _) = event(&owner.ok("lwait s 5000"));
    assert_eq!(ev, disconnected(t, 40, pid, true));
    owner.err_is("lwait s 100", "Timeout");

    // The events of several peers, each reported once.
    let mut a = Proc::node_named(t, "peer a", 44);
    let mut b = Proc::node_named(t, "peer b", 48);
    a.ok("connect r 8 0x70 5000");
    b.ok("connect r 8 0x70 5000");
    let mut evs = vec![event(&owner.ok("lwait s 5000")).0, event(&owner.ok("lwait s 5000")).0];
    evs.sort();
    let mut want = vec![connected(t, 44, a.pid()), connected(t, 48, b.pid())];
    want.sort();
    assert_eq!(evs, want);
    let b_pid = b.pid();
    b.kill9();
    a.ok("drop r");
    let mut evs = vec![event(&owner.ok("lwait s 5000")).0, event(&owner.ok("lwait s 5000")).0];
    evs.sort();
    let mut want = vec![disconnected(t, 44, a.pid(), false), disconnected(t, 48, b_pid, true)];
    want.sort();
    assert_eq!(evs, want);
    owner.err_is("lwait s 100", "Timeout");
    a.exit();
    owner.exit();
}

fn the_owners_event_callback_hears_a_peer_die(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    owner.ok("seg s 0x71 4096");
    owner.ok("lpoll s 0");
    owner.ok("lon_event s ev");
    let mut deaths = Vec::new();
    for round in 0..3u32 {
        let node = 12 + 4 * round;
        let mut victim = Proc::node_named(t, &format!("victim {round}"), node);
        victim.ok("connect r 8 0x71 5000");
        let (ev, _) = event(&owner.note("ev", WAIT));
        assert_eq!(ev, connected(t, node, victim.pid()));
        std::thread::sleep(Duration::from_millis(100));
        let pid = victim.pid();
        let killed = victim.kill9_at();
        let (ev, seen) = event(&owner.note("ev", WAIT));
        assert_eq!(ev, disconnected(t, node, pid, true));
        deaths.push(within_notice(&format!("owner on_event, peer death {round}"), killed, seen));
    }
    summary("owner's on_event callback hearing of a connected peer's kill -9", deaths);
    owner.exit();
}

/// The owner's next two events (None for an error such as a timeout).
fn two_events(owner: &mut Proc) -> (Option<String>, Option<String>) {
    let mut next = || owner.call("lwait s 1000").ok().map(|r| event(&r).0);
    (next(), next())
}

/// Regression: a peer that connects and disconnects (or dies) between two of the owner's
/// `wait_event` calls must still be reported (the owner counts the slot's claims and
/// releases from its generation and learns the last holder from the slot).
fn connections_that_come_and_go_between_two_waits_are_still_reported(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    owner.ok("seg s 0x72 4096");
    let mut peer = Proc::node_named(t, "peer", 12);
    peer.ok("connect r 8 0x72 5000");
    peer.ok("drop r");
    let clean = two_events(&mut owner);
    let clean_want = (Some(connected(t, 12, peer.pid())), Some(disconnected(t, 12, peer.pid(), false)));
    // A peer that connects and is killed before the owner waits.
    let mut victim = Proc::node_named(t, "victim", 16);
    victim.ok("connect r 8 0x72 5000");
    let pid = victim.pid();
    victim.kill9();
    let killed = two_events(&mut owner);
    let killed_want = (Some(connected(t, 16, pid)), Some(disconnected(t, 16, pid, true)));
    assert_eq!(
        (clean, killed),
        (clean_want, killed_want),
        "the owner's next two events after (a) a peer connected and disconnected, (b) a peer connected and \
         was killed, both before the owner called wait_event"
    );
    peer.exit();
    owner.exit();
}

// ---------------------------------------------------------------------------------------
// The peer's side
// ---------------------------------------------------------------------------------------

fn a_peer_hears_availability_changes_and_removal(t: &Topology) {
    let mut owner = Proc::node_named(t, "owner", 8);
    let mut peer = Proc::node_named(t, "peer", 12);
    owner.ok("seg s 0x73 4096");
    peer.ok("connect r 8 0x73 5000");
    // A second connection of the same process delivers the same events to a callback.
    peer.ok("connect c 8 0x73 5000");
    peer.ok("ron_event c cb");
    assert_eq!(peer.ok("rstate r"), "Operational");
    peer.err_is("rwait r 100", "Timeout");

    owner.ok("unavailable s");
    assert_eq!(event(&peer.ok("rwait r 5000")).0, remote(RemoteEvent::NotOperational));
    assert_eq!(event(&peer.note("cb", WAIT)).0, remote(RemoteEvent::NotOperational));
    assert_eq!(peer.ok("rstate r"), "NotOperational");
    peer.ok("rcheck r");
    owner.ok("available s");
    assert_eq!(event(&peer.ok("rwait r 5000")).0, remote(RemoteEvent::Operational));
    assert_eq!(event(&peer.note("cb", WAIT)).0, remote(RemoteEvent::Operational));
    peer.err_is("rwait r 100", "Timeout");

    // A waiter asleep in wait_event(Infinite) is woken by the change.
    peer.ok("rpoll r 0");
    peer.ok("bg w rwait r inf");
    std::thread::sleep(Duration::from_millis(100));
    assert!(peer.try_note("w").is_none(), "wait_event returned with no change");
    owner.ok("unavailable s");
    let r = peer.bg_result("w", WAIT).unwrap_or_else(|e| panic!("wait_event: {e}"));
    assert_eq!(event(&r).0, remote(RemoteEvent::NotOperational));
    assert_eq!(event(&peer.note("cb", WAIT)).0, remote(RemoteEvent::NotOperational));

    // New connections are refused while unavailable; the existing ones stay.
    let mut late = Proc::node_named(t, "late peer", 16);
    late.err_is("connect r 8 0x73 imm", "NotAvailable");

    // Removal (the owner removes it by force, peers connected): Lost(Removed), once.
    peer.ok("bg w rwait r inf");
    std::thread::sleep(Duration::from_millis(100));
    let removed = field(&owner.ok("segremove s"), "t");
    let (ev, seen) = event(&peer.bg_result("w", WAIT).unwrap_or_else(|e| panic!("wait_event: {e}")));
    assert_eq!(ev, remote(RemoteEvent::Lost(LossReason::Removed)));
    println!("a sleeping remote wait_event heard of the removal after {:.3} ms", ms_between(removed, seen));
    assert!(ms_between(removed, seen) <= NOTICE.as_secs_f64() * 1e3);
    assert_eq!(event(&peer.note("cb", WAIT)).0, remote(RemoteEvent::Lost(LossReason::Removed)));
    assert_eq!(peer.ok("rstate r"), "Lost(Removed)");
    peer.err_is("rwait r 100", "SegmentLost");
    peer.err_is("rcheck r", "SegmentLost");
    late.err_is("connect r 8 0x73 imm", "NoSuchSegment");
    // The callback ended with the loss: nothing more comes.
    std::thread::sleep(Duration::from_millis(100));
    assert!(peer.try_note("cb").is_none(), "a callback after Lost");
    late.exit();
    peer.exit();
    owner.exit();
}

fn a_peer_hears_the_owner_die_within_2_s_through_wait_event_and_callback(t: &Topology) {
    let mut peer = Proc::node_named(t, "peer", 12);
    let (mut waits, mut callbacks) = (Vec::new(), Vec::new());
    for round in 0..3u32 {
        let id = 0x80 + round;
        let mut owner = Proc::node_named(t, &format!("owner {round}"), 8);
        owner.ok(&format!("seg s {id} 4096"));
        // r: a waiter blocked in wait_event(Infinite), asleep; c: a callback; q: nobody
        // waits, it is asked afterwards.
        for name in ["r", "c", "q"] {
            peer.ok(&format!("connect {name}{round} 8 {id} 5000"));
        }
        peer.ok(&format!("rpoll r{round} 0"));
        peer.ok(&format!("bg w rwait r{round} inf"));
        peer.ok(&format!("ron_event c{round} cb"));
        std::thread::sleep(Duration::from_millis(150));
        assert!(peer.try_note("w").is_none(), "wait_event returned with no change");
        assert!(peer.try_note("cb").is_none(), "a callback with no change");

        let killed = owner.kill9_at();
        let lost = remote(RemoteEvent::Lost(LossReason::OwnerDied));
        let (ev, seen) = event(&peer.bg_result("w", WAIT).unwrap_or_else(|e| panic!("wait_event: {e}")));
        assert_eq!(ev, lost, "the blocked wait_event(Infinite)");
        waits.push(within_notice(&format!("peer wait_event(Infinite), owner death {round}"), killed, seen));
        let (ev, seen) = event(&peer.note("cb", WAIT));
        assert_eq!(ev, lost, "the on_event callback");
        callbacks.push(within_notice(&format!("peer on_event, owner death {round}"), killed, seen));

        // Each connection hears it on its own (across hosts, by its own notice).
        assert_eq!(event(&peer.ok(&format!("rwait q{round} {}", NOTICE.as_millis()))).0, lost, "a later wait_event");
        assert_eq!(peer.ok(&format!("rstate r{round}")), "Lost(OwnerDied)");
        peer.err_is(&format!("rwait r{round} 100"), "SegmentLost");
        peer.err_is(&format!("rcheck q{round}"), "SegmentLost");
        peer.err_is(&format!("connect x 8 {id} imm"), "NoSuchSegment");
        std::thread::sleep(Duration::from_millis(50));
        assert!(peer.try_note("cb").is_none(), "a callback after Lost");
    }
    summary("peer's wait_event(Infinite) hearing of the owner's kill -9", waits);
    summary("peer's on_event callback hearing of the owner's kill -9", callbacks);
    peer.exit();
}

wakeups_support::topology_cases!(
    the_owner_hears_peers_connect_disconnect_and_die,
    the_owners_event_callback_hears_a_peer_die,
    connections_that_come_and_go_between_two_waits_are_still_reported,
    a_peer_hears_availability_changes_and_removal,
    a_peer_hears_the_owner_die_within_2_s_through_wait_event_and_callback,
    ;
    ofi: the_owner_hears_peers_connect_disconnect_and_die,
    the_owners_event_callback_hears_a_peer_die,
    connections_that_come_and_go_between_two_waits_are_still_reported,
    a_peer_hears_availability_changes_and_removal,
    a_peer_hears_the_owner_die_within_2_s_through_wait_event_and_callback,
);
