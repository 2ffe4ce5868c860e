//! Measuring tools shared by `lanes pingpong` and `lanes bench`: a cheap clock, latency
//! statistics and histograms, CPU placement, and the peer process a measurement runs against.

pub mod affinity;
pub mod clock;
pub mod peer;
pub mod stats;
