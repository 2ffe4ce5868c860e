//! The interrupt path (`ofi-interrupt`): a ping-pong of remote interrupt triggers. Each side
//! creates an interrupt and connects to the other's; across hosts a trigger is one
//! `fi_writedata` and the owner's completion handler counts it. Interrupts carry no data,
//! so the path measures sizes up to 8 B only (the registry's limit).
//!
//! *Latency*: the client triggers the peer's `ping` interrupt and spins on its own until the
//! echo is pending (the spin is the bench's [`Waiter`], which watches the control channel),
//! polling a [`ProgressDriver`] so that this thread reads the completion queue and counts the
//! trigger (as `fi_pingpong` spins in `fi_cq_read`), then consumes it with a wait that
//! returns at once. The peer does the same the other way.
//! The client ends a slice by triggering the peer's `stop` interrupt; the peer watches both.
//! *Throughput* is not measured (the registry lists latency only).

use std::time::Duration;

use lanes::{Fabric, LocalInterrupt, ProgressDriver, RemoteInterrupt, Timeout};

use crate::bench::paths::path::{ClientOffer, ClientPath, PeerPath, SetupEnv, Streamed};
use crate::bench::wait::Waiter;
use crate::measure::clock::now_ticks;
use crate::measure::ticks::TickHistogram;

const CONNECT: Timeout = Timeout::After(Duration::from_secs(30));
/// Consuming a trigger already seen pending.
const TAKE: Timeout = Timeout::After(Duration::from_secs(5));

fn err(what: &'static str) -> impl Fn(lanes::Error) -> String {
    move |e| format!("interrupt {what}: {e}")
}

fn open() -> Result<Fabric, String> {
    Fabric::open().map_err(|e| format!("opening the fabric: {e}"))
}

fn numbers(s: &str, n: usize) -> Result<Vec<u32>, String> {
    let v: Vec<u32> = s.split_whitespace().map(str::parse).collect::<Result<_, _>>().map_err(|_| bad(s))?;
    if v.len() != n {
        return Err(bad(s));
    }
    Ok(v)
}

fn bad(s: &str) -> String {
    format!("expected node and interrupt numbers, got {s:?}")
}

/// Waits until `irq` has a trigger pending, driving the transport's progress meanwhile (so
/// the trigger is counted by this thread), and consumes it.
#[inline(always)]
fn take(irq: &LocalInterrupt, drv: &ProgressDriver, wait: &Waiter) -> Result<(), String> {
    wait.until(|| {
        if irq.pending() > 0 {
            return Ok(Some(()));
        }
        drv.poll();
        Ok((irq.pending() > 0).then_some(()))
    })?;
    irq.wait(TAKE).map_err(err("wait"))
}

struct Offer {
    fabric: Fabric,
    mine: LocalInterrupt,
}

pub(crate) fn client(_env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    let fabric = open()?;
    let mine = fabric.create_interrupt(None).map_err(err("create"))?;
    Ok(Box::new(Offer { fabric, mine }))
}

impl ClientOffer for Offer {
    fn offer(&self) -> String {
        format!("{} {}", self.fabric.node_id().get(), self.mine.number())
    }

    fn accept(self: Box<Self>, reply: &str) -> Result<Box<dyn ClientPath>, String> {
        let v = numbers(reply, 3)?;
        let ping = self.fabric.connect_interrupt(v[0], v[1], CONNECT).map_err(err("connect"))?;
        let stop = self.fabric.connect_interrupt(v[0], v[2], CONNECT).map_err(err("connect"))?;
        Ok(Box::new(Client { mine: self.mine, ping, stop, _fabric: self.fabric }))
    }
}

struct Client {
    mine: LocalInterrupt,
    ping: RemoteInterrupt,
    stop: RemoteInterrupt,
    _fabric: Fabric,
}

impl ClientPath for Client {
    fn latency(&mut self, _size: usize, until: u64, rec: &mut TickHistogram, wait: &Waiter) -> Result<(), String> {
        let drv = self._fabric.progress_driver();
        let mut prev = now_ticks();
        loop {
            self.ping.trigger().map_err(err("trigger"))?;
            take(&self.mine, &drv, wait)?;
            let now = now_ticks();
            rec.record(now.wrapping_sub(prev), now);
            prev = now;
            if now >= until {
                break;
            }
        }
        self.stop.trigger().map_err(err("trigger"))
    }

    fn throughput(&mut self, _size: usize, _until: u64, _wait: &Waiter) -> Result<Streamed, String> {
        Err("the interrupt path measures latency only".into())
    }
}

struct Peer {
    ping: LocalInterrupt,
    stop: LocalInterrupt,
    back: RemoteInterrupt,
    _fabric: Fabric,
}

pub(crate) fn peer(_env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    let v = numbers(offer, 2)?;
    let fabric = open()?;
    let ping = fabric.create_interrupt(None).map_err(err("create"))?;
    let stop = fabric.create_interrupt(None).map_err(err("create"))?;
    let back = fabric.connect_interrupt(v[0], v[1], CONNECT).map_err(err("connect"))?;
    let reply = format!("{} {} {}", fabric.node_id().get(), ping.number(), stop.number());
    Ok((Box::new(Peer { ping, stop, back, _fabric: fabric }), reply))
}

impl PeerPath for Peer {
    fn latency(&mut self, _size: usize, wait: &Waiter) -> Result<(), String> {
        let drv = self._fabric.progress_driver();
        loop {
            let stop = wait.until(|| {
                if self.ping.pending() == 0 && self.stop.pending() == 0 {
                    drv.poll();
                }
                Ok(if self.ping.pending() > 0 {
                    Some(false)
                } else if self.stop.pending() > 0 {
                    Some(true)
                } else {
                    None
                })
            })?;
            if stop {
                // Echo what came before the stop, then consume it.
                while self.ping.pending() > 0 {
                    self.ping.wait(TAKE).map_err(err("wait"))?;
                }
                return self.stop.wait(TAKE).map_err(err("wait"));
            }
            self.ping.wait(TAKE).map_err(err("wait"))?;
            self.back.trigger().map_err(err("trigger"))?;
        }
    }

    fn throughput(&mut self, _size: usize, _wait: &Waiter) -> Result<u64, String> {
        Err("the interrupt path measures latency only".into())
    }
}
