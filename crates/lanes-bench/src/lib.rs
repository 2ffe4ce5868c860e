//! Every Lanes benchmark, behind the `lanes bench` and `lanes pingpong` commands (the `lanes`
//! command in lanes-cli parses the command line and calls in here).
//!
//! The benchmarks spawn peers by re-running the current executable (`lanes`) with hidden
//! roles (`bench --peer`, `pingpong --server`, `reflective-peer`, `wakeup-peer`) and, for
//! `--check-floor`, run `lanes-spin-floor` from the same directory; both binaries live in
//! lanes-cli.
//!
//! ```text
//! commands.rs          `lanes pingpong` (every --mode) and the hidden peer roles
//! bench/               every benchmark: the registry of them (bench/registry.rs), `lanes
//!                      bench` and its path registry (bench/paths/), `bench
//!                      dma|sockets|udp-stream|ip`, pingpong, wake-ups, reflective memory
//! report/              the one report every benchmark fills, its JSON, the machine it ran on
//! measure/             clock, statistics, CPU placement and time, real time, peer processes
//! sizes.rs             size lists (`4,64,1K`, `4-8K`)
//! preload.rs           finding liblanes_sockets.so and editing LD_PRELOAD
//! ```
//!
//! Each module uses only modules listed below it, and inside bench/ the same holds from the
//! command (mod.rs) and the registry down through the benchmarks (remote, sockets,
//! udp_stream, dma, pingpong, wakeup, reflective), runner, table and facts to the paths, wait
//! and measure: no import leads back up.

mod bench;
mod commands;
mod measure;
pub mod preload;
mod report;
pub mod sizes;

pub use bench::{run as bench, BenchArgs};
pub use commands::{reflective_peer, run as pingpong, wakeup_peer, PingpongArgs, WakeupMode};
