//! Revocation: once an owner has heard that a peer of another host is gone, nothing that
//! peer sent before can land in the owner's memory afterwards (docs/design/multi-host.md,
//! "Revocation"). A writer on host b (node 12) streams map writes and a DMA transfer into
//! two segments of an owner on host a (node 8); b's link is cut mid-write and kept down
//! until the owner hears the writer lost; the owner's memory is read then, and again after
//! the link has been back long enough for TCP to retransmit everything it held.

// Every case needs the ofi transport.
#![cfg(feature = "ofi")]

mod support;

use std::time::{Duration, Instant};

use lanes::cluster::HostState;
use support::cluster::LOST_MS;
use support::{Proc, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

const A: usize = 0;
const B: usize = 1;

/// The map the writer streams into (fits the map's staging ring, so barriers never wait).
const PIO: u64 = 192 * 1024;
/// The DMA target; the transfer in flight at the cut writes it eight times over, each pass
/// with other bytes than the one before (so that a late write of any pass shows).
const DMA: u64 = 128 << 20;
/// How long the link stays back before the owner's memory is read the second time: TCP's
/// retransmission back-off after a cut of a few seconds is at most this (the report had
/// the late write land 13 s after the link returned).
const AFTER_RETURN: Duration = Duration::from_secs(20);

/// One round: the writer streams, the link is cut, the owner hears the writer lost; what
/// the owner's memory held then is what it holds once the link has long been back.
fn cut_mid_write(t: &Topology, round: u32) {
    let Topology::OfiNetns(c) = t else { unreachable!("a link cut needs namespaces") };
    let ns = c.namespaces().expect("namespaces");
    let bound = t.bounds().notice;
    let lost_by = Duration::from_millis(LOST_MS) + bound * 2;

    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s 0x60 {PIO}"));
    owner.ok("prepare s");
    owner.ok(&format!("map m s 0 {PIO} rw"));
    owner.ok(&format!("wpat m 0 {PIO} 1 0"));
    owner.ok("available s");
    owner.ok(&format!("create d 0x61 {DMA}"));
    owner.ok("prepare d");
    owner.ok(&format!("map dm d 0 {DMA} rw"));
    owner.ok(&format!("fill dm 0 {DMA} {}", 0x5a));
    owner.ok("available d");

    let mut writer = Proc::node(t, 12);
    writer.ok("connect r 8 0x60 10000");
    writer.ok(&format!("map m r 0 {PIO} rw"));
    writer.ok("connect rd 8 0x61 10000");
    assert!(owner.ok("lwait s 5000").starts_with("Connected { node: 12"));
    assert!(owner.ok("lwait d 5000").starts_with("Connected { node: 12"));
    writer.ok(&format!("create l 0x70 {}", 4 * DMA));
    writer.ok(&format!("map lm l 0 {} rw", 4 * DMA));
    for pass in 0..4 {
        writer.ok(&format!("fill lm {} {DMA} {}", pass * DMA, 0xa1 + pass));
    }
    writer.ok("dmaq q 16");

    // Both streams running, then the cut.
    let passes: Vec<String> = (0..8).map(|p| format!("{DMA}:{}:0", (p % 4) * DMA)).collect();
    writer.ok(&format!("dmastart q l rd write {}", passes.join(",")));
    let pio = format!("pioloop m {PIO} 60000");
    writer.start(&pio);
    std::thread::sleep(Duration::from_millis(200 + 100 * u64::from(round % 3)));
    let cut = Instant::now();
    ns.set_link(B, false);

    // The map's writes are refused once b is suspect; the DMA transfer fails within the
    // same bound, not when the link returns.
    let out = writer.finish_within(&pio, lost_by).unwrap_or_else(|e| panic!("the write loop: {e}"));
    eprintln!("round {round}: write loop ended after {:?}: {out}", cut.elapsed());
    let (rounds, refusal) = out.split_once(' ').expect("ROUNDS VARIANT");
    assert!(rounds.parse::<u64>().expect("a count") > 0, "the writer wrote before the cut");
    assert!(["NodeUnreachable", "SegmentLost"].contains(&refusal), "refused with {refusal}");
    let e = writer.err_is(&format!("dmawait q {}", lost_by.as_millis()), "DmaFailed");
    eprintln!("round {round}: DMA failed after {:?}: {e}", cut.elapsed());

    // The owner hears the writer lost (its host is Lost); its memory then ...
    let ev = owner.ok(&format!("lwait s {}", lost_by.as_millis()));
    assert!(ev.starts_with("Disconnected { node: 12") && ev.contains("died: true"), "the owner saw {ev:?}");
    let pio_then = owner.ok(&format!("sum m 0 {PIO}"));
    let ev = owner.ok(&format!("lwait d {}", bound.as_millis()));
    assert!(ev.starts_with("Disconnected { node: 12") && ev.contains("died: true"), "the owner saw {ev:?}");
    let dma_then = owner.ok(&format!("sum dm 0 {DMA}"));
    eprintln!("round {round}: the owner heard the loss {:?} after the cut", cut.elapsed());
    // (The writer did reach the owner before the cut: the memory is not the owner's own.)
    assert_ne!(pio_then, support::pattern_sum(1, 0, PIO as usize), "no map write landed before the cut");

    // ... is what it holds once the link has long been back.
    ns.set_link(B, true);
    c.wait_state(B, A, HostState::Operational, bound);
    c.wait_state(A, B, HostState::Operational, bound);
    let back = Instant::now();
    while back.elapsed() < AFTER_RETURN {
        std::thread::sleep(Duration::from_millis(500));
        let (p, d) = (owner.ok(&format!("sum m 0 {PIO}")), owner.ok(&format!("sum dm 0 {DMA}")));
        assert_eq!(p, pio_then, "round {round}: a map write landed {:?} after the link returned", back.elapsed());
        assert_eq!(d, dma_then, "round {round}: DMA data landed {:?} after the link returned", back.elapsed());
    }

    for l in owner.output_snapshot().lines().filter(|l| l.contains("revocation")) {
        eprintln!("round {round}: the owner said: {l}");
    }

    // The writer's host is back: connecting again works, and its writes land.
    writer.ok("disconnect r");
    writer.ok("connect r2 8 0x60 10000");
    writer.ok("map m2 r2 0 4096 rw");
    writer.ok("wpat m2 0 4096 77 0");
    writer.ok("flushc m2");
    owner.ok("vpat m 0 4096 77 0");
}

#[test]
fn netns_revocation_after_lost() {
    let Some(t) = Topology::ofi_netns("netns-revoc") else { return };
    cut_mid_write(&t, 0);
}
