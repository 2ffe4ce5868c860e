//! Measuring tools shared by `lanes pingpong` and `lanes bench`: a cheap clock, latency
//! statistics and histograms, CPU placement and CPU time, real-time set-up, and the peer
//! process a measurement runs against.

pub mod affinity;
pub mod clock;
pub mod cputime;
pub mod peer;
pub mod rt;
pub mod stats;
pub mod ticks;
