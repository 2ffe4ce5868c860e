//! The IP interface over the fabric (docs/ip-interface.md): `lanes ip up` makes a TUN
//! device (`lanes0`) whose packets to other nodes move through fabric segments, so
//! unchanged IP programs use the fabric, on one host (network namespaces, containers) over
//! shared memory and across hosts over libfabric.
//!
//! ```text
//! config.rs     [ip] of lanes.toml, the defaults, a node's addresses
//! route.rs      which node a packet goes to (host part of its destination; all for
//!               broadcast and multicast)
//! icmp.rs       ICMP/ICMPv6 "destination unreachable" for a packet to a node without the
//!               interface, written back into the TUN device
//! ring.rs       the pair segments' layout, the packet rings (Producer, Consumer), hellos
//! tun.rs        the TUN device (queues, offloads, carrier) and its addresses, MTU, flags
//! caps.rs       dropping every capability after set-up
//! interface.rs  the running interface: threads, peers, carrier, status
//! status.rs     ip/<node>.json in the fabric directory, for `lanes status`
//! ```

pub mod caps;
pub mod config;
pub mod icmp;
mod interface;
pub mod ring;
pub mod route;
pub mod status;
pub mod tun;

pub use config::IpConfig;
pub use interface::run;
