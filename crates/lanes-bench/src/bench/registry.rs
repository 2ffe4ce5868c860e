//! Every benchmark, in one place: its name (the `benchmark` of its `--json` report), the
//! command that runs it, what it measures and how its table is printed (above each entry:
//! where its code is).
//! The `lanes` commands select from it: `lanes bench` runs `paths`, `lanes bench
//! dma|sockets|udp-stream|ip` the entry of that name, `lanes pingpong` `pingpong`, or with
//! `--mode` `wakeup` or `reflective`. `paths` measures the entries of its own registry
//! (paths/mod.rs): one per way of moving a message.

use std::path::Path;

use crate::bench::{dma, facts, ip, pingpong, reflective, sockets, table, udp_stream, wakeup};
use crate::report::{emit as emit_with, say, Report};

/// One benchmark.
pub(crate) struct Benchmark {
    /// Its name, and the `benchmark` of its report.
    pub name: &'static str,
    /// The command that runs it.
    pub command: &'static str,
    pub about: &'static str,
    /// Prints its table from its report.
    pub table: fn(&Report),
}

/// Every benchmark.
pub(crate) static BENCHMARKS: &[Benchmark] = &[
    // bench/mod.rs, bench/runner.rs, bench/paths/
    Benchmark {
        name: facts::BENCHMARK,
        command: "lanes bench",
        about: "every path (the list above): latency, throughput and CPU per size, against the kernel and the floor",
        table: |r| drop(say(&table::render(r))),
    },
    // bench/pingpong/
    Benchmark {
        name: pingpong::BENCHMARK,
        command: "lanes pingpong",
        about: "PIO round trips between two node processes, beside the floor measured in alternating chunks",
        table: pingpong::print_table,
    },
    // bench/wakeup/
    Benchmark {
        name: wakeup::BENCHMARK,
        command: "lanes pingpong --mode interrupt|data-interrupt",
        about: "interrupt wake-ups, spinning and sleeping, against the floor and the kernel's (eventfd, pipe, unix datagram)",
        table: wakeup::print_table,
    },
    // bench/reflective.rs
    Benchmark {
        name: reflective::BENCHMARK,
        command: "lanes pingpong --mode reflective",
        about: "reflective memory: one writer and acknowledging receivers, latency against group size",
        table: reflective::print_table,
    },
    // bench/dma.rs
    Benchmark {
        name: dma::BENCHMARK,
        command: "lanes bench dma",
        about: "DMA against PIO and memcpy: bandwidth, latency and CPU per size, small random transfers",
        table: dma::print_table,
    },
    // bench/sockets/
    Benchmark {
        name: sockets::BENCHMARK,
        command: "lanes bench sockets",
        about: "unchanged programs (sockperf, iperf3, redis, pgbench, nginx) with and without the socket accelerator",
        table: |r| drop(say(&sockets::render(r))),
    },
    // bench/udp_stream.rs
    Benchmark {
        name: udp_stream::BENCHMARK,
        command: "lanes bench udp-stream",
        about: "the UDP streaming API against one send/recv per datagram",
        table: |r| drop(say(&udp_stream::table(r))),
    },
    // bench/ip.rs
    Benchmark {
        name: ip::BENCHMARK,
        command: "lanes bench ip",
        about: "lanes0 (lanes ip up) against a veth pair between two namespaces: iperf3 TCP and ping",
        table: |r| drop(say(&ip::table(r))),
    },
];

/// The benchmark called `name`.
pub(crate) fn get(name: &str) -> Option<&'static Benchmark> {
    BENCHMARKS.iter().find(|b| b.name == name)
}

/// Prints `report`'s table (its benchmark's), and the JSON to a file or (`-`) to standard
/// output instead.
pub(crate) fn emit(report: &Report, json: Option<&Path>) -> Result<(), String> {
    let b = get(&report.benchmark).ok_or_else(|| format!("no benchmark {:?}", report.benchmark))?;
    emit_with(report, b.table, json)
}

/// The text of the benchmark list under `--paths list`.
pub(crate) fn list() -> String {
    let mut out = String::from("\nbenchmarks (the `benchmark` of each --json report):\n");
    for b in BENCHMARKS {
        out.push_str(&format!("  {:<15} {:<47} {}\n", b.name, b.command, b.about));
    }
    out
}
