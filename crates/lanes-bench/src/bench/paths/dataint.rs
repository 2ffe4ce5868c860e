//! The data-interrupt path: messages of up to 4 KiB carried by data interrupts (a doorbell
//! with a payload), each side waiting on its own data interrupt with the fabric's default
//! wait (spin `LANES_POLL_US`, then sleep).
//!
//! *Latency*: the client triggers the peer's data interrupt with a `size`-byte message and
//! waits on its own for the echo. *Throughput*: the client streams stamped messages (the
//! per-sender queue of 16 gives flow control) and ends with a 1-byte message (sizes are
//! multiples of 4, so it cannot be a real one); the peer checks every stamp and answers
//! with the count, which stops the client's clock.

use std::time::Duration;

use lanes::{Fabric, LocalDataInterrupt, ProgressDriver, RemoteDataInterrupt, Timeout, MAX_DATA_INTERRUPT_PAYLOAD};

use crate::bench::paths::path::{pattern, stamp, stamped, ClientOffer, ClientPath, PeerPath, SetupEnv, Streamed};
use crate::bench::wait::Waiter;
use crate::measure::clock::now_ticks;
use crate::measure::ticks::TickHistogram;

const T: Timeout = Timeout::After(Duration::from_secs(30));
/// A 1-byte message ends a slice.
const END: [u8; 1] = [0xE5];

fn err(what: &'static str) -> impl Fn(lanes::Error) -> String {
    move |e| format!("data interrupt {what}: {e}")
}

fn open() -> Result<Fabric, String> {
    Fabric::open().map_err(|e| format!("opening the fabric: {e}"))
}

fn parse(s: &str) -> Result<(u32, u32), String> {
    let mut it = s.split_whitespace().map(str::parse::<u32>);
    match (it.next(), it.next()) {
        (Some(Ok(node)), Some(Ok(n))) => Ok((node, n)),
        _ => Err(format!("expected `node number`, got {s:?}")),
    }
}

struct Ends {
    mine: LocalDataInterrupt,
    theirs: RemoteDataInterrupt,
    payload: Vec<u8>,
    buf: Vec<u8>,
    /// `ofi-dataint`: latency waits spin, driving the transport's progress from this fabric,
    /// instead of the library's spin-then-sleep wait (which leaves the completion queue to
    /// the transport's service thread).
    drive: Option<Fabric>,
}

impl Ends {
    /// The progress driver of `ofi-dataint`, held for a whole slice: taking one per message
    /// would wake the transport's service thread each time the last driver is dropped.
    fn driver(&self) -> Option<ProgressDriver> {
        self.drive.as_ref().map(Fabric::progress_driver)
    }

    /// The next message, into `buf`, spinning on `drv` when given.
    fn next(&mut self, drv: Option<&ProgressDriver>, wait: &Waiter) -> Result<usize, String> {
        let Some(drv) = drv else {
            return self.mine.wait(&mut self.buf, T).map_err(err("wait"));
        };
        let (mine, buf) = (&self.mine, &mut self.buf);
        wait.until(|| match mine.try_wait(buf).map_err(err("wait"))? {
            Some(n) => Ok(Some(n)),
            None => {
                drv.poll();
                Ok(None)
            }
        })
    }
}

struct Offer {
    fabric: Fabric,
    mine: LocalDataInterrupt,
    drive: bool,
}

pub(crate) fn client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    let _ = env; // sizes above the path's limit are skipped by the runner
    let fabric = open()?;
    let mine = fabric.create_data_interrupt(None).map_err(err("create"))?;
    Ok(Box::new(Offer { fabric, mine, drive: false }))
}

/// `ofi-dataint`: the same across hosts, latency waits driving progress.
pub(crate) fn ofi_client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    let _ = env;
    let fabric = open()?;
    let mine = fabric.create_data_interrupt(None).map_err(err("create"))?;
    Ok(Box::new(Offer { fabric, mine, drive: true }))
}

impl ClientOffer for Offer {
    fn offer(&self) -> String {
        format!("{} {}", self.fabric.node_id().get(), self.mine.number())
    }

    fn accept(self: Box<Self>, reply: &str) -> Result<Box<dyn ClientPath>, String> {
        let (node, n) = parse(reply)?;
        let theirs = self.fabric.connect_data_interrupt(node, n, T).map_err(err("connect"))?;
        Ok(Box::new(Ends {
            mine: self.mine,
            theirs,
            payload: pattern(MAX_DATA_INTERRUPT_PAYLOAD, 1),
            buf: vec![0; MAX_DATA_INTERRUPT_PAYLOAD],
            drive: self.drive.then_some(self.fabric),
        }))
    }
}

pub(crate) fn peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    peer_of(env, offer, false)
}

pub(crate) fn ofi_peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    peer_of(env, offer, true)
}

fn peer_of(_env: &SetupEnv, offer: &str, drive: bool) -> Result<(Box<dyn PeerPath>, String), String> {
    let (node, n) = parse(offer)?;
    let fabric = open()?;
    let mine = fabric.create_data_interrupt(None).map_err(err("create"))?;
    let theirs = fabric.connect_data_interrupt(node, n, T).map_err(err("connect"))?;
    let reply = format!("{} {}", fabric.node_id().get(), mine.number());
    let ends = Ends {
        mine,
        theirs,
        payload: pattern(MAX_DATA_INTERRUPT_PAYLOAD, 2),
        buf: vec![0; MAX_DATA_INTERRUPT_PAYLOAD],
        drive: drive.then_some(fabric),
    };
    Ok((Box::new(ends), reply))
}

fn check_size(size: usize) -> Result<(), String> {
    if size > MAX_DATA_INTERRUPT_PAYLOAD {
        return Err(format!("data interrupts carry at most {MAX_DATA_INTERRUPT_PAYLOAD} bytes, not {size}"));
    }
    Ok(())
}

impl ClientPath for Ends {
    fn latency(&mut self, size: usize, until: u64, rec: &mut TickHistogram, wait: &Waiter) -> Result<(), String> {
        check_size(size)?;
        let drv = self.driver();
        let mut prev = now_ticks();
        loop {
            self.theirs.trigger(&self.payload[..size], T).map_err(err("trigger"))?;
            let n = self.next(drv.as_ref(), wait)?;
            if n != size {
                return Err(format!("data interrupt echo of {n} bytes for a {size}-byte message"));
            }
            let now = now_ticks();
            rec.record(now.wrapping_sub(prev), now);
            prev = now;
            if now >= until {
                break;
            }
        }
        self.theirs.trigger(&END, T).map_err(err("trigger"))
    }

    fn throughput(&mut self, size: usize, until: u64, _wait: &Waiter) -> Result<Streamed, String> {
        check_size(size)?;
        let mut n = 0u64;
        let t0 = now_ticks();
        loop {
            stamp(&mut self.payload[..size], n);
            self.theirs.trigger(&self.payload[..size], T).map_err(err("trigger"))?;
            n += 1;
            if now_ticks() >= until {
                break;
            }
        }
        self.theirs.trigger(&END, T).map_err(err("trigger"))?;
        let got = self.mine.wait(&mut self.buf, T).map_err(err("wait for the count"))?;
        let ticks = now_ticks().wrapping_sub(t0);
        let count =
            self.buf.get(..8).filter(|_| got == 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
        match count {
            Some(c) if c == n => Ok(Streamed { msgs: n, ticks }),
            Some(c) => Err(format!("sent {n} data interrupts, the peer took {c}")),
            None => Err(format!("expected the peer's 8-byte count, got {got} bytes")),
        }
    }
}

impl PeerPath for Ends {
    fn latency(&mut self, _size: usize, wait: &Waiter) -> Result<(), String> {
        let drv = self.driver();
        loop {
            let n = self.next(drv.as_ref(), wait)?;
            if n == END.len() {
                return Ok(());
            }
            self.theirs.trigger(&self.payload[..n], T).map_err(err("trigger"))?;
        }
    }

    fn throughput(&mut self, size: usize, _wait: &Waiter) -> Result<u64, String> {
        let mut count = 0u64;
        loop {
            let n = self.mine.wait(&mut self.buf, T).map_err(err("wait"))?;
            if n == END.len() {
                break;
            }
            if n != size || !stamped(&self.buf[..n], count) {
                return Err(format!("data interrupt {count}: {n} bytes or a wrong stamp"));
            }
            count += 1;
        }
        self.theirs.trigger(&count.to_le_bytes(), T).map_err(err("trigger"))?;
        Ok(count)
    }
}
