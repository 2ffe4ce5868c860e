//! The fabric across hosts: node processes on hosts a (node 8) and b (node 12), each with
//! its own daemon and fabric directory, reaching each other's objects over libfabric
//! (`topology::ofi::lo::..` on loopback, `topology::ofi::netns::..` across network
//! namespaces). Single-host behaviour is the shm suite's; these cases check what only a
//! second host has: connections granted through the daemons, mirror windows written through
//! at flush and read through, and the owner seeing the remote peer come and go.

// Every case needs the ofi transport.
#![cfg(feature = "ofi")]

// Case names stay short: each host's daemon socket lives in a directory named after the
// case, and a Unix socket path must fit in 108 bytes.

mod support;

use support::{Proc, Topology};

#[test]
fn child_entry() {
    support::child_entry(|_, _| false);
}

/// A peer on host b connects to a segment on host a, maps it, sees the owner's data, writes
/// its own (delivered by flush, the word of a release store after the data), reads what the
/// owner writes later (read-through), and the owner hears it connect and disconnect.
fn remote_segment_mapped_written_and_read(t: &Topology) {
    const SEG: u32 = 0x20;
    const SIZE: u64 = 256 * 1024 + 13;
    const SEED: u64 = 0x5eed;

    let mut owner = Proc::node(t, 8);
    owner.ok(&format!("create s {SEG} {SIZE}"));
    owner.ok("prepare s");
    owner.ok(&format!("map m s 0 {SIZE} rw"));
    owner.ok(&format!("wpat m 0 {SIZE} {SEED} 0"));
    owner.ok("available s");

    let mut peer = Proc::node(t, 12);
    assert_eq!(peer.ok(&format!("connect r 8 {SEG} 10000")), format!("node=8 id={SEG} size={SIZE}"));
    let ev = owner.ok("lwait s 5000");
    assert!(ev.starts_with("Connected { node: 12"), "the owner saw {ev:?}");
    assert!(owner.ok("peers s").starts_with("12:"), "a remote peer holds a slot as node 12");

    // The whole segment as the owner wrote it, and windows at odd offsets.
    peer.ok(&format!("map m r 0 {SIZE} rw"));
    peer.ok(&format!("vpat m 0 {SIZE} {SEED} 0"));
    peer.ok("map w r 4097 5000 ro");
    peer.ok(&format!("vpat w 0 5000 {SEED} 4097"));
    peer.err_is("w8 w 0 1", "ReadOnly");
    peer.err_is(&format!("map x r {SIZE} 1 ro"), "OutOfRange");

    // Writes of the peer reach the owner at flush; a release-stored word lands after them.
    peer.ok("wpat m 1000 70000 77 1000");
    peer.ok("rel64 m 80000 4242");
    peer.ok("flush m");
    owner.ok("waitacq64 m 80000 4242 5000");
    owner.ok("vpat m 1000 70000 77 1000");
    // Bytes the peer did not write stay the owner's.
    owner.ok(&format!("vpat m 0 1000 {SEED} 0"));
    owner.ok(&format!("vpat m 71000 9000 {SEED} 71000"));

    // Reads through the map see what the owner writes afterwards.
    owner.ok("wpat m 200000 3000 99 0");
    peer.ok("vpat m 200000 3000 99 0");
    assert_eq!(peer.ok("r64 m 80000"), "4242");

    peer.ok("disconnect r");
    let ev = owner.ok("lwait s 5000");
    assert!(ev.starts_with("Disconnected { node: 12"), "the owner saw {ev:?}");
    assert_eq!(owner.ok("peers s"), "");
}

/// Connecting to what another host does not have, or has not made available, gives the
/// same distinct errors as on one host, after the timeout.
fn refusals_across_hosts(t: &Topology) {
    let mut owner = Proc::node(t, 8);
    owner.ok("create u 0x31 4096");
    let mut peer = Proc::node(t, 12);
    peer.err_is("connect r 8 0x30 300", "Timeout");
    let e = peer.err_is("connect r 8 0x31 300", "Timeout");
    assert!(e.to_string().contains("not available"), "{e}");
    peer.err_is("connect r 8 0x30 imm", "NoSuchSegment");
    peer.err_is("connect r 8 0x31 imm", "NotAvailable");
}

support::topology_cases!(
    ;
    ofi: remote_segment_mapped_written_and_read,
    refusals_across_hosts,
);
