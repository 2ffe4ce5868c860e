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
//! bench/               `lanes bench`: the path registry (bench/paths/), its runner, report,
//!                      table, plots and comparison; `bench dma|sockets|udp-stream`; remote
//! pingpong/            PIO ping-pong against the floor (client, server, mailbox protocol)
//! wakeup/              interrupt and data-interrupt wake-ups against the kernel's
//! reflective_bench.rs  reflective memory: one writer against group size
//! dma_bench.rs         `lanes bench dma`: DMA against PIO and memcpy
//! report/              the one report every benchmark fills, its JSON, the machine it ran on
//! measure/             clock, statistics, CPU placement and time, real time, peer processes
//! sizes.rs             size lists (`4,64,1K`, `4-8K`)
//! preload.rs           finding liblanes_sockets.so and editing LD_PRELOAD
//! ```
//!
//! Each module uses only modules listed below it, and inside bench/ the same holds from the
//! command (mod.rs) down through remote, sockets, runner, table and facts to the paths and
//! measure: no import leads back up.

mod bench;
mod commands;
mod dma_bench;
mod measure;
mod pingpong;
pub mod preload;
mod reflective_bench;
mod report;
pub mod sizes;
mod wakeup;

pub use bench::{run as bench, BenchArgs};
pub use commands::{reflective_peer, run as pingpong, wakeup_peer, PingpongArgs, WakeupMode};
