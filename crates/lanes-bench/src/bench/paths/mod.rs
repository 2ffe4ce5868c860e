//! The registry of the paths `lanes bench` measures; the traits a path implements are in
//! path.rs.
//!
//! A path is one way of moving a message from one process to another: the floor (a raw
//! shared-memory spin), PIO through the Lanes API, the kernel's TCP loopback and Unix
//! sockets, data interrupts, DMA and accelerated sockets. Each path has a
//! *client* side, in the `lanes bench` process, that drives and times, and a *peer* side, in
//! the peer process, that answers. The runner only sees those traits; adding a path is
//! one new module plus one entry in [`REGISTRY`].
//!
//! Set-up is one exchange over the control channel: the client side makes an *offer* (what
//! the peer needs to reach it, one line of text), the peer side sets itself up from it and
//! replies (one line), and the client side completes from the reply.

pub(crate) mod dataint;
pub(crate) mod dma_stream;
pub(crate) mod floor;
pub(crate) mod interrupt;
pub(crate) mod path;
pub(crate) mod pio;
pub(crate) mod shm;
pub(crate) mod socket;
pub(crate) mod sockets;

pub(crate) use path::{ClientOffer, ClientPath, Kind, PeerPath, SetupEnv, Streamed};

/// Whether a path is a baseline the others are compared with, or a Lanes path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    Baseline,
    Lanes,
}

/// Where a path's two sides run: on this host (the peer is a child process), or on two
/// hosts of a cluster (the peer is `lanes bench --serve` on the remote node's host, reached
/// over the ofi transport).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    Local,
    Ofi,
}

/// Both measurements: what every local path takes.
pub(crate) const BOTH: &[Kind] = &[Kind::Latency, Kind::Throughput];

type ClientSetup = fn(&SetupEnv) -> Result<Box<dyn ClientOffer>, String>;
type PeerSetup = fn(&SetupEnv, &str) -> Result<(Box<dyn PeerPath>, String), String>;

/// Whether a path can be measured in this build.
#[derive(Clone, Copy)]
pub(crate) enum Status {
    Available {
        client: ClientSetup,
        peer: PeerSetup,
    },
    /// Available when `ready` says so (it says why not otherwise).
    Needs {
        client: ClientSetup,
        peer: PeerSetup,
        ready: fn() -> Result<(), String>,
    },
    /// Not yet: what it waits for.
    #[allow(dead_code)]
    Pending(&'static str),
}

/// One entry of the registry.
#[derive(Debug)]
pub(crate) struct PathDef {
    /// The name on the command line, in the JSON and on the plots.
    pub name: &'static str,
    pub group: Group,
    pub about: &'static str,
    pub status: Status,
    /// The largest message the path carries (larger sizes are skipped), if it has a limit.
    pub max_size: Option<usize>,
    /// Which runs it belongs to: `lanes bench` on this host, or `--transport ofi`.
    pub transport: Transport,
    /// The measurements it takes (the others' slices are skipped).
    pub kinds: &'static [Kind],
}

impl std::fmt::Debug for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Available { .. } => f.write_str("Available"),
            Status::Needs { .. } => f.write_str("Needs"),
            Status::Pending(when) => write!(f, "Pending({when:?})"),
        }
    }
}

impl PathDef {
    pub(crate) fn available(&self) -> bool {
        self.setups().is_ok()
    }

    /// The path's set-up functions, or why it cannot run here.
    pub(crate) fn setups(&self) -> Result<(ClientSetup, PeerSetup), String> {
        match self.status {
            Status::Available { client, peer } => Ok((client, peer)),
            Status::Needs { client, peer, ready } => ready().map(|_| (client, peer)),
            Status::Pending(when) => Err(format!("not available yet: {when}")),
        }
    }
}

/// Every path, in the order the table, the JSON and the plots list them.
pub(crate) static REGISTRY: &[PathDef] = &[
    PathDef {
        name: "floor",
        group: Group::Baseline,
        about: "raw shared-memory spin: the same protocols on a plain shared mapping, no Lanes API",
        status: Status::Available { client: floor::client, peer: floor::peer },
        max_size: None,
        transport: Transport::Local,
        kinds: BOTH,
    },
    PathDef {
        name: "pio",
        group: Group::Lanes,
        about: "programmed I/O: CPU stores into the peer's segment through a Lanes Map",
        status: Status::Available { client: pio::client, peer: pio::peer },
        max_size: None,
        transport: Transport::Local,
        kinds: BOTH,
    },
    PathDef {
        name: "data-interrupt",
        group: Group::Lanes,
        about: "data interrupts: a doorbell carrying the message (at most 4 KiB)",
        status: Status::Available { client: dataint::client, peer: dataint::peer },
        max_size: Some(lanes::MAX_DATA_INTERRUPT_PAYLOAD),
        transport: Transport::Local,
        kinds: BOTH,
    },
    PathDef {
        name: "dma",
        group: Group::Lanes,
        about: "the PIO protocols with message bodies moved by DMA (one transfer per message, waited for)",
        status: Status::Available { client: pio::dma_client, peer: pio::dma_peer },
        max_size: None,
        transport: Transport::Local,
        kinds: BOTH,
    },
    PathDef {
        name: "sockets",
        group: Group::Lanes,
        about: "accelerated TCP (liblanes_sockets.so preloaded into both processes), measured by the same code as tcp",
        status: Status::Needs { client: sockets::client, peer: sockets::peer, ready: sockets::ready },
        max_size: None,
        transport: Transport::Local,
        kinds: BOTH,
    },
    PathDef {
        name: "tcp",
        group: Group::Baseline,
        about: "kernel TCP over loopback (TCP_NODELAY)",
        status: Status::Available { client: socket::tcp_client, peer: socket::tcp_peer },
        max_size: None,
        transport: Transport::Local,
        kinds: BOTH,
    },
    PathDef {
        name: "unix",
        group: Group::Baseline,
        about: "kernel Unix domain stream socket",
        status: Status::Available { client: socket::unix_client, peer: socket::unix_peer },
        max_size: None,
        transport: Transport::Local,
        kinds: BOTH,
    },
    PathDef {
        name: "ofi-interrupt",
        group: Group::Lanes,
        about: "remote interrupts across hosts (one fi_writedata per trigger), each side waiting on its own; no payload, so sizes up to 8 B",
        status: Status::Needs { client: interrupt::client, peer: interrupt::peer, ready: ofi_ready },
        max_size: Some(8),
        transport: Transport::Ofi,
        kinds: &[Kind::Latency],
    },
    PathDef {
        name: "ofi-dataint",
        group: Group::Lanes,
        about: "data interrupts across hosts: the message is the payload of one fi_writedata (at most 4 KiB)",
        status: Status::Needs { client: dataint::ofi_client, peer: dataint::ofi_peer, ready: ofi_ready },
        max_size: Some(lanes::MAX_DATA_INTERRUPT_PAYLOAD),
        transport: Transport::Ofi,
        kinds: &[Kind::Latency],
    },
    PathDef {
        name: "ofi-pio",
        group: Group::Lanes,
        about: "PIO across hosts: stores into a remote segment's mirror window, posted by a release store; the peer spins on its own segment",
        status: Status::Needs { client: pio::ofi_client, peer: pio::ofi_peer, ready: ofi_ready },
        max_size: None,
        transport: Transport::Ofi,
        kinds: &[Kind::Latency],
    },
    PathDef {
        name: "ofi-dma",
        group: Group::Lanes,
        about: "DMA write bandwidth across hosts: a DMA queue streaming transfers from a local segment into a remote one (RMA writes)",
        status: Status::Needs { client: dma_stream::client, peer: dma_stream::peer, ready: ofi_ready },
        max_size: None,
        transport: Transport::Ofi,
        kinds: &[Kind::Throughput],
    },
];

/// Whether this build can reach other hosts.
fn ofi_ready() -> Result<(), String> {
    if lanes::OFI_TRANSPORT {
        Ok(())
    } else {
        Err("this build has no ofi transport (build with --features lanes/ofi)".into())
    }
}

/// The registry entry named `name`.
pub(crate) fn find(name: &str) -> Option<&'static PathDef> {
    REGISTRY.iter().find(|p| p.name == name)
}
