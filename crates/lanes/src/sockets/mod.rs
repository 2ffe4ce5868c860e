//! Accelerated TCP streams between processes of one host: the shared-memory half of the
//! socket accelerator (`liblanes_sockets.so`, crate `lanes-sockets`, does the interposition).
//!
//! Every accelerated TCP socket keeps its kernel connection (the *anchor*); Lanes adds an
//! [`endpoint`] record per socket, a file in `<fabric dir>/sockets/` named by the
//! connection's addresses, holding that socket's send ring and the state word of its
//! sending [`direction`]. The receiving end maps its peer's record and moves bytes out of
//! the ring; whenever it is about to sleep it switches the direction to the kernel, so
//! sleeping, readiness and errors stay the kernel's own. [`registry`] lists and cleans the
//! records for `lanes status` and `lanes cleanup`.
//!
//! A socket whose peer is on another host of the cluster gets a record too ([`remote`]):
//! it carries the pairing the two hosts' daemons agreed on, with the objects the peer
//! exported for the connection's [`fabric_stream`], which carries its bytes between the
//! hosts beside the kernel connection.
//!
//! UDP sockets that receive get a [`udp`] record: a datagram ring that senders of this
//! host with the library write into, under a state word with the same sleep rule.

pub mod direction;
pub mod endpoint;
pub mod fabric_stream;
pub mod holders;
pub mod reasons;
pub mod registry;
pub mod remote;
pub mod udp;

pub use direction::{DirectionState, KernelReservation};
pub use endpoint::{ConnectionKey, Endpoint, PeerRecord};
