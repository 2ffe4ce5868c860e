//! In-process checks of the libfabric layer: two endpoints of this process on 127.0.0.1,
//! each with its own fabric, domain, address vector, CQs and registered buffer, as two
//! processes would have. Provider `tcp;ofi_rxm` unless `LANES_OFI_PROVIDER` names another.
//!
//! Progress is manual: an endpoint moves data (and accepts rxm connections) only while its
//! process reads its CQs. Each side therefore runs a service thread driving its progress,
//! as each Lanes process will; the CQ wake-up test leaves the target without one, asleep
//! in epoll.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::fi::*;
use crate::error::Error;

/// Bound on every wait of these tests: a hang fails the test instead.
const TIMEOUT: Duration = Duration::from_secs(20);
const BUF_LEN: usize = 256 * 1024;
const ACCESS: u64 = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/// One side: what one process would open. Fields drop in order, after the service thread
/// has stopped: the endpoint closes before the registration and the memory its operations
/// used.
struct Side {
    ep: Arc<Endpoint>,
    mr: MemoryRegion,
    buf: Arc<Buffer>,
    fabric: Arc<Fabric>,
    info: Info,
    stop: Arc<AtomicBool>,
    service: Option<JoinHandle<()>>,
}

impl Side {
    fn open(key: u64, service: bool) -> Side {
        let provider = provider_from_env();
        let hints = Hints::lanes_rdm(Some(&provider));
        let info = Info::get(&hints, Some("127.0.0.1"), None, FI_SOURCE)
            .expect("fi_getinfo")
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no {provider} provider matches the Lanes hints on 127.0.0.1"));
        let fabric = Fabric::open(&info).expect("fabric");
        let domain = Domain::open(&fabric, &info).expect("domain");
        let av = Av::open(&domain, 4).expect("av");
        let tx = Cq::open(&domain, 0, Wait::None).expect("tx cq");
        let rx = Cq::open(&domain, 0, Wait::Fd).expect("rx cq");
        let ep = Arc::new(Endpoint::open(&domain, None, &av, &tx, &rx).expect("endpoint"));
        let buf = Arc::new(Buffer::new(BUF_LEN).expect("buffer"));
        let mr = MemoryRegion::register(&domain, buf.clone(), ACCESS, key).expect("fi_mr_reg");
        let stop = Arc::new(AtomicBool::new(false));
        let service = service.then(|| {
            let (ep, stop) = (Arc::clone(&ep), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    ep.progress().expect("progress");
                    std::thread::sleep(Duration::from_micros(100));
                }
            })
        });
        Side { ep, mr, buf, fabric, info, stop, service }
    }

    /// `offset` of this side's buffer as seen from a peer that knows this side as `peer`.
    fn target(&self, peer: FiAddr, offset: usize) -> Target {
        Target { peer, addr: self.mr.remote_base() + offset as u64, key: self.mr.key() }
    }

    fn bytes(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.buf.read(offset, &mut v).expect("read buffer");
        v
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.service.take() {
            let _ = t.join();
        }
    }
}

/// Two sides that know each other, `(a, b, b as a knows it, a as b knows it)`; the flags say
/// whether each drives its own progress in the background.
fn pair_with(a_service: bool, b_service: bool) -> (Side, Side, FiAddr, FiAddr) {
    let a = Side::open(0xA11CE, a_service);
    let b = Side::open(0xB0B, b_service);
    let a_to_b = a.ep.av().insert(&b.ep.name().expect("name of b")).expect("insert b");
    let b_to_a = b.ep.av().insert(&a.ep.name().expect("name of a")).expect("insert a");
    (a, b, a_to_b, b_to_a)
}

fn pair() -> (Side, Side, FiAddr, FiAddr) {
    pair_with(true, true)
}

/// A recognisable, position-dependent byte pattern.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed).collect()
}

fn ctx_ptr(ctx: &mut FiContext) -> *mut c_void {
    (ctx as *mut FiContext).cast()
}

/// The next completion or completion error of `cq`, driving `others`' progress meanwhile.
fn next_event(cq: &Cq, others: &[&Endpoint]) -> Result<Completion, CompletionError> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let mut c = [Completion::default(); 1];
        match cq.poll(&mut c).expect("fi_cq_read") {
            Polled::Completions(1) => return Ok(c[0]),
            Polled::Error(e) => return Err(e),
            Polled::Completions(_) => {}
        }
        for ep in others {
            ep.progress().expect("progress");
        }
        assert!(Instant::now() < deadline, "no completion within {TIMEOUT:?}");
        std::thread::yield_now();
    }
}

/// Waits for the successful completion of the operation posted with `ctx`.
fn completed(cq: &Cq, others: &[&Endpoint], ctx: *mut c_void) -> Completion {
    let c = next_event(cq, others).unwrap_or_else(|e| panic!("operation failed: {e}"));
    assert_eq!(c.context(), ctx, "completion of another operation");
    c
}

#[test]
fn ofi_info_offers_what_lanes_needs() {
    let side = Side::open(1, false);
    let info = &side.info;
    assert_eq!(info.provider(), provider_from_env());
    assert!(info.cq_data_size() >= 4, "{info:?}: CQ data too small for doorbells");
    assert_eq!(info.msg_order() & FI_ORDER_RMA_WAW, FI_ORDER_RMA_WAW, "{info:?}: no write-after-write order");
    assert_eq!(info.threading(), FI_THREAD_SAFE);
    assert_eq!(info.mode() & !FI_CONTEXT, 0, "{info:?}: requires modes Lanes did not offer");
    assert!(!info.src_addr().is_empty());
    assert!(!side.ep.name().expect("name").is_empty());
    assert_eq!(side.mr.len(), BUF_LEN);

    let hints = Hints::lanes_rdm(Some("no-such-provider"));
    assert!(Info::get(&hints, Some("127.0.0.1"), None, FI_SOURCE).expect("fi_getinfo").is_empty());
}

#[test]
fn ofi_write_then_read_back() {
    let (a, b, a_to_b, _) = pair();
    let data = pattern(64 * 1024, 0x5A);
    a.buf.write(0, &data).unwrap();
    let deadline = deadline_in(TIMEOUT);

    let mut wctx = FiContext::default();
    // SAFETY: a's buffer lives in `a` until the end of the test and is not modified before
    // the completion is read below; the context outlives the operation.
    unsafe { a.ep.write(a.mr.local(0, data.len()).unwrap(), b.target(a_to_b, 4096), ctx_ptr(&mut wctx), deadline) }
        .expect("fi_write");
    let c = completed(a.ep.tx_cq(), &[&*b.ep], ctx_ptr(&mut wctx));
    assert_ne!(c.flags() & FI_WRITE, 0);

    // Read the range back into another part of a's buffer; the read is ordered after the
    // write (FI_ORDER_RMA_RAW), so it sees the written bytes.
    let mut rctx = FiContext::default();
    // SAFETY: the destination range is a's and untouched until the completion is read.
    unsafe {
        a.ep.read(a.mr.local(128 * 1024, data.len()).unwrap(), b.target(a_to_b, 4096), ctx_ptr(&mut rctx), deadline)
    }
    .expect("fi_read");
    let c = completed(a.ep.tx_cq(), &[&*b.ep], ctx_ptr(&mut rctx));
    assert_ne!(c.flags() & FI_READ, 0);

    assert!(a.bytes(128 * 1024, data.len()) == data, "read-back differs from what was written");
    assert!(b.bytes(4096, data.len()) == data, "target memory differs from what was written");
    assert!(b.bytes(0, 4096).iter().all(|&x| x == 0), "bytes before the target range changed");
    assert!(b.bytes(4096 + data.len(), 4096).iter().all(|&x| x == 0), "bytes after the target range changed");
}

#[test]
fn ofi_read_fetches_remote_memory() {
    let (a, b, a_to_b, _) = pair();
    let data = pattern(3000, 0xC3);
    b.buf.write(1000, &data).unwrap();

    let mut ctx = FiContext::default();
    // SAFETY: the destination range is a's and untouched until the completion is read.
    unsafe {
        a.ep.read(a.mr.local(7, data.len()).unwrap(), b.target(a_to_b, 1000), ctx_ptr(&mut ctx), deadline_in(TIMEOUT))
    }
    .expect("fi_read");
    let c = completed(a.ep.tx_cq(), &[&*b.ep], ctx_ptr(&mut ctx));
    assert_eq!(c.len(), 0, "RMA completions report no length");

    assert!(a.bytes(7, data.len()) == data, "fetched bytes differ from the target's");
    assert!(a.bytes(0, 7).iter().all(|&x| x == 0), "bytes before the destination changed");
    assert!(a.bytes(7 + data.len(), 100).iter().all(|&x| x == 0), "bytes after the destination changed");
}

#[test]
fn ofi_writedata_delivers_cq_data_to_the_target() {
    let (a, b, a_to_b, _) = pair();
    let data = pattern(512, 0x11);
    a.buf.write(0, &data).unwrap();
    const DOORBELL: u64 = 0xC0DE_1234;

    let mut ctx = FiContext::default();
    // SAFETY: a's source range is unchanged until the completion is read.
    unsafe {
        a.ep.write_data(
            a.mr.local(0, data.len()).unwrap(),
            b.target(a_to_b, 8192),
            DOORBELL,
            ctx_ptr(&mut ctx),
            deadline_in(TIMEOUT),
        )
    }
    .expect("fi_writedata");

    // The target hears of it on its receive CQ, with the data already in place.
    let c = next_event(b.ep.rx_cq(), &[&*a.ep]).unwrap_or_else(|e| panic!("target CQ error: {e}"));
    assert!(c.has_remote_data(), "no FI_REMOTE_CQ_DATA in {:#x}", c.flags());
    assert_ne!(c.flags() & FI_REMOTE_WRITE, 0);
    assert_eq!(c.data(), DOORBELL);
    assert!(c.context().is_null());
    assert!(b.bytes(8192, data.len()) == data, "payload not in place when its CQ data arrived");

    completed(a.ep.tx_cq(), &[&*b.ep], ctx_ptr(&mut ctx));
    // A write without data raises nothing at the target (no FI_RMA_EVENT).
    let mut c = [Completion::default(); 1];
    assert!(matches!(b.ep.rx_cq().poll(&mut c).unwrap(), Polled::Completions(0)));
}

#[test]
fn ofi_write_msg_and_inject_write_land() {
    let (a, b, a_to_b, _) = pair();
    let deadline = deadline_in(TIMEOUT);
    let small = pattern(8, 0x77);
    assert!(a.ep.inject_size() >= small.len());
    a.ep.inject_write(&small, b.target(a_to_b, 64), deadline).expect("fi_inject_write");
    let too_big = vec![0u8; a.ep.inject_size() + 1];
    assert!(matches!(a.ep.inject_write(&too_big, b.target(a_to_b, 0), deadline), Err(Error::PayloadTooLarge { .. })));

    let data = pattern(4096, 0x99);
    a.buf.write(0, &data).unwrap();
    let mut ctx = FiContext::default();
    // SAFETY: a's source range is unchanged until the completion is read.
    unsafe {
        a.ep.write_msg(
            a.mr.local(0, data.len()).unwrap(),
            b.target(a_to_b, 65536),
            0x42,
            FI_REMOTE_CQ_DATA | FI_DELIVERY_COMPLETE,
            ctx_ptr(&mut ctx),
            deadline,
        )
    }
    .expect("fi_writemsg");
    let c = next_event(b.ep.rx_cq(), &[&*a.ep]).unwrap_or_else(|e| panic!("target CQ error: {e}"));
    assert_eq!(c.data(), 0x42);
    completed(a.ep.tx_cq(), &[&*b.ep], ctx_ptr(&mut ctx));

    // Both writes are in place: the injected one came first on the same connection.
    assert!(b.bytes(64, small.len()) == small, "injected bytes missing");
    assert!(b.bytes(65536, data.len()) == data, "fi_writemsg bytes missing");
}

#[test]
fn ofi_scattered_write_fills_its_targets_and_refuses_bad_lists() {
    let (a, b, a_to_b, _) = pair();
    let deadline = deadline_in(TIMEOUT);
    let data = pattern(1000, 0x31);
    a.buf.write(0, &data).unwrap();
    let targets = [(b.target(a_to_b, 5000), 600), (b.target(a_to_b, 100), 1), (b.target(a_to_b, 9000), 399)];
    let mut ctx = FiContext::default();
    // SAFETY: a's source range is unchanged until the completion is read.
    unsafe { a.ep.write_scatter(a.mr.local(0, data.len()).unwrap(), &targets, 0, ctx_ptr(&mut ctx), deadline) }
        .expect("fi_writemsg to three targets");
    completed(a.ep.tx_cq(), &[&*b.ep], ctx_ptr(&mut ctx));
    // The transmit completion does not say the data is in place at the target: wait for it.
    let until = Instant::now() + TIMEOUT;
    while b.bytes(9000, 399) != data[601..] {
        assert!(Instant::now() < until, "the last target never filled");
        b.ep.progress().unwrap();
        a.ep.progress().unwrap();
    }
    assert!(b.bytes(5000, 600) == data[..600] && b.bytes(100, 1) == data[600..601], "targets filled in list order");

    // Refused before anything is posted: lengths that do not add up, no targets, too many,
    // targets of two registrations.
    let local = || a.mr.local(0, 8).unwrap();
    let t = |at| (b.target(a_to_b, at), 2usize);
    let other_key = (Target { key: b.target(a_to_b, 0).key ^ 1, ..b.target(a_to_b, 0) }, 2usize);
    for bad in [
        vec![t(0), t(8)],
        vec![],
        vec![t(0), t(8), t(16), t(24), (b.target(a_to_b, 32), 0)],
        vec![t(0), t(8), t(16), other_key],
    ] {
        // SAFETY: refused lists post nothing.
        let r = unsafe { a.ep.write_scatter(local(), &bad, 0, std::ptr::null_mut(), deadline) };
        assert!(matches!(r, Err(Error::Ofi { code: 22, .. })), "{} targets: {r:?}", bad.len());
    }
}

/// A rejected operation, as its CQ reports it: a read with a wrong key, then a write asking
/// for delivery completion. (tcp;ofi_rxm reports a plain fi_write or fi_writedata with a
/// wrong key as *completed*: its completion only says the data left. The target drops the
/// data and the connection; see docs/design/multi-host.md, "Stage 0 results".)
#[test]
fn ofi_bad_remote_key_is_a_completion_error() {
    let (a, b, a_to_b, _) = pair();
    let data = pattern(256, 0xEE);
    a.buf.write(0, &data).unwrap();
    b.buf.write(0, &pattern(256, 0x01)).unwrap();
    let mut bad = b.target(a_to_b, 0);
    bad.key ^= 0x5555_0000;

    let started = Instant::now();
    let mut ctx = FiContext::default();
    // SAFETY: a's destination range is untouched until the error is read.
    unsafe { a.ep.read(a.mr.local(4096, 256).unwrap(), bad, ctx_ptr(&mut ctx), deadline_in(TIMEOUT)) }.expect("post");
    let err = next_event(a.ep.tx_cq(), &[&*b.ep]).expect_err("a read with a wrong key completed");
    eprintln!("read with a bad key: {err} after {:?}", started.elapsed());
    assert_eq!(err.context, ctx_ptr(&mut ctx), "error for another operation");
    assert_ne!(err.err, 0);
    assert!(!err.message.is_empty());
    assert!(err.into_error("fi_read").to_string().starts_with("fi_read failed: "));
    assert!(a.bytes(4096, 256).iter().all(|&x| x == 0), "a failed read wrote the destination");

    let mut ctx = FiContext::default();
    // SAFETY: a's source range is unchanged until the error is read.
    unsafe {
        a.ep.write_msg(
            a.mr.local(0, 256).unwrap(),
            bad,
            0,
            FI_DELIVERY_COMPLETE,
            ctx_ptr(&mut ctx),
            deadline_in(TIMEOUT),
        )
    }
    .expect("post");
    let err = next_event(a.ep.tx_cq(), &[&*b.ep]).expect_err("a write with a wrong key was delivered");
    eprintln!("delivery-complete write with a bad key: {err}");
    assert_eq!(err.context, ctx_ptr(&mut ctx), "error for another operation");
    assert_ne!(err.err, 0);
    assert!(b.bytes(0, 256) == pattern(256, 0x01), "a write with a wrong key changed the target");

    // With the right key the peer is reachable again (rxm reconnects if the target dropped
    // the connection; operations posted before that fail): bounded retries.
    let retry_until = Instant::now() + Duration::from_secs(5);
    let mut failures = Vec::new();
    loop {
        let mut wctx = FiContext::default();
        let mut rctx = FiContext::default();
        // SAFETY: source and destination ranges are a's and untouched until the
        // completions are read below.
        let outcome = unsafe {
            a.ep.write(a.mr.local(0, 256).unwrap(), b.target(a_to_b, 0), ctx_ptr(&mut wctx), deadline_in(TIMEOUT))
                .and_then(|()| {
                    a.ep.read(
                        a.mr.local(8192, 256).unwrap(),
                        b.target(a_to_b, 0),
                        ctx_ptr(&mut rctx),
                        deadline_in(TIMEOUT),
                    )
                })
        }
        .map(|()| (next_event(a.ep.tx_cq(), &[&*b.ep]), next_event(a.ep.tx_cq(), &[&*b.ep])));
        match outcome {
            Ok((Ok(_), Ok(_))) => break,
            Ok((w, r)) => failures.push(format!("{:?} / {:?}", w.err().map(|e| e.message), r.err().map(|e| e.message))),
            Err(e) => failures.push(e.to_string()),
        }
        assert!(Instant::now() < retry_until, "the peer stayed unreachable: {failures:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("{} failed attempt(s) before the peer was reachable again: {failures:?}", failures.len());
    assert!(a.bytes(8192, 256) == data, "read-back after recovery differs");
    assert!(b.bytes(0, 256) == data, "write after recovery missing");
}

/// epoll on one fd, as the service thread will: true when readable, false on timeout.
fn epoll_wait_one(epfd: i32, timeout: Duration) -> bool {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: ev is a valid buffer of one event; epfd is ours.
    let n = unsafe { libc::epoll_wait(epfd, &mut ev, 1, ms) };
    assert!(n >= 0, "epoll_wait: {}", std::io::Error::last_os_error());
    n == 1
}

#[test]
fn ofi_cq_fd_wakes_epoll_after_trywait() {
    let (a, b, a_to_b, _) = pair_with(true, false);
    let fd = b.ep.rx_cq().wait_fd().expect("rx CQ has a wait fd").as_raw_fd();
    // SAFETY: epoll_create1 has no memory arguments.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(epfd >= 0);
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 1 };
    // SAFETY: both fds are open; ev is a valid event.
    assert_eq!(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) }, 0);

    // Nothing is pending: trywait allows blocking, and the fd stays quiet.
    assert!(b.fabric.trywait(&[b.ep.rx_cq()]).expect("fi_trywait"), "fi_trywait refused on an idle CQ");
    assert!(!epoll_wait_one(epfd, Duration::from_millis(50)), "an idle CQ's fd was readable");

    // The writer posts from another thread after a delay, while b sleeps in epoll.
    let data = pattern(1024, 0x3C);
    a.buf.write(0, &data).unwrap();
    let target = b.target(a_to_b, 2048);
    let a = Arc::new(a);
    let writer = {
        let a = Arc::clone(&a);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let posted = Instant::now();
            let mut ctx = FiContext::default();
            // SAFETY: a's source range is unchanged until the completion is read below.
            unsafe {
                a.ep.write_data(a.mr.local(0, 1024).unwrap(), target, 7, ctx_ptr(&mut ctx), deadline_in(TIMEOUT))
            }
            .expect("fi_writedata");
            completed(a.ep.tx_cq(), &[], ctx_ptr(&mut ctx));
            posted
        })
    };

    let start = Instant::now();
    let (mut sleeps, mut wakeups) = (0, 0);
    let arrival = loop {
        let mut c = [Completion::default(); 4];
        match b.ep.rx_cq().poll(&mut c).expect("fi_cq_read") {
            Polled::Completions(0) => {}
            Polled::Completions(n) => {
                let c = c[..n].iter().find(|c| c.has_remote_data()).expect("remote CQ data");
                assert_eq!(c.data(), 7);
                break Instant::now();
            }
            Polled::Error(e) => panic!("target CQ error: {e}"),
        }
        assert!(start.elapsed() < TIMEOUT, "no remote CQ data within {TIMEOUT:?}");
        if b.fabric.trywait(&[b.ep.rx_cq()]).expect("fi_trywait") {
            sleeps += 1;
            if epoll_wait_one(epfd, TIMEOUT) {
                wakeups += 1;
            }
        }
    };
    let posted = writer.join().expect("writer thread");
    // SAFETY: epfd is ours and closed once.
    unsafe { libc::close(epfd) };

    assert!(sleeps >= 1 && wakeups >= 1, "b never slept in epoll ({sleeps} sleeps, {wakeups} wake-ups)");
    assert!(arrival >= posted, "the data arrived before it was posted?");
    assert!(b.bytes(2048, 1024) == data, "payload not in place");
    eprintln!("{sleeps} sleeps, {wakeups} wake-ups, woken {:?} after the post", arrival - posted);
}

#[test]
fn ofi_post_gives_up_at_its_deadline() {
    // Contexts first: they must outlive the endpoint, which closes with posts outstanding.
    let mut contexts: Vec<FiContext> = (0..20_000).map(|_| FiContext::default()).collect();
    // a drives no progress of its own: only these test lines read its CQ.
    let (a, b, a_to_b, _) = pair_with(false, true);
    let local = a.mr.local(0, 8).unwrap();
    let (warm_up, flood) = contexts.split_at_mut(1);
    // SAFETY: the source and the contexts outlive the endpoint (declared before it).
    unsafe { a.ep.write(local, b.target(a_to_b, 0), ctx_ptr(&mut warm_up[0]), deadline_in(TIMEOUT)) }
        .expect("fi_write");
    completed(a.ep.tx_cq(), &[], ctx_ptr(&mut warm_up[0]));

    // Connected, nobody drives a's progress, every deadline has passed: once the queue is
    // full the post must fail with Timeout at once instead of spinning.
    let start = Instant::now();
    let mut posted = 0;
    let mut outcome = None;
    for ctx in flood {
        // SAFETY: as above.
        match unsafe { a.ep.write(local, b.target(a_to_b, 0), ctx_ptr(ctx), Instant::now()) } {
            Ok(()) => posted += 1,
            Err(e) => {
                outcome = Some(e);
                break;
            }
        }
    }
    let elapsed = start.elapsed();
    match outcome {
        Some(Error::Timeout { what, .. }) => assert!(what.contains("fi_write"), "{what}"),
        Some(e) => panic!("expected a timeout, got {e}"),
        // net (no rxm layer) sends from inside the post call, so its queue never fills
        // here; ofi_eagain_is_retried_until_the_deadline covers the loop for every provider.
        None if !a.info.provider().contains("ofi_rxm") => {
            eprintln!("{posted} posts never filled {}'s queue: it sends while posting", a.info.provider());
            return;
        }
        None => panic!("{posted} posts without progress never filled the queue"),
    }
    assert!(posted > 0, "the connected endpoint queued nothing");
    assert!(elapsed < Duration::from_secs(5), "giving up took {elapsed:?}");
    eprintln!("{posted} posts queued before -FI_EAGAIN (tx size {}); gave up after {elapsed:?}", a.info.tx_size());

    // With a later deadline the same post succeeds: retrying drives the progress that
    // frees the queue.
    let mut last = FiContext::default();
    // SAFETY: as above; `last` outlives the endpoint too (dropped below first).
    unsafe { a.ep.write(local, b.target(a_to_b, 0), ctx_ptr(&mut last), deadline_in(TIMEOUT)) }.expect("retried post");
    drop((a, b));
}

/// The retry loop itself, whatever the provider: -FI_EAGAIN is retried (with progress) until
/// the deadline, then reported as a timeout; other failures are reported at once.
#[test]
fn ofi_eagain_is_retried_until_the_deadline() {
    let (a, _b, _, _) = pair_with(false, true);
    let eagain = -(lanes_ofi_sys::FI_EAGAIN as isize);

    let mut calls = 0;
    a.ep.post("fake_post", deadline_in(TIMEOUT), || {
        calls += 1;
        if calls < 100 {
            eagain
        } else {
            0
        }
    })
    .expect("a post that succeeds on its 100th try");
    assert_eq!(calls, 100);

    let start = Instant::now();
    let mut calls = 0;
    let e = a.ep.post("fake_post", start + Duration::from_millis(50), || {
        calls += 1;
        eagain
    });
    let elapsed = start.elapsed();
    match e {
        Err(Error::Timeout { what, waited_ms }) => {
            assert!(what.contains("fake_post") && what.contains("FI_EAGAIN"), "{what}");
            // The call's own clock starts a moment after `start`, and its report is whole
            // milliseconds: it may say 49 for a wait that ended at the deadline (`elapsed`,
            // below, is what proves the deadline was kept).
            let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
            assert!((40..=elapsed_ms).contains(&waited_ms), "reported {waited_ms} ms of {elapsed_ms}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(calls > 1, "no retry before the deadline");
    assert!(elapsed >= Duration::from_millis(50) && elapsed < Duration::from_secs(2), "gave up after {elapsed:?}");

    let mut calls = 0;
    let e = a.ep.post("fake_post", deadline_in(TIMEOUT), || {
        calls += 1;
        -(lanes_ofi_sys::FI_EINVAL as isize)
    });
    assert_eq!(calls, 1, "a hard error was retried");
    match e {
        Err(e @ Error::Ofi { call: "fake_post", code, .. }) => {
            assert_eq!(code, lanes_ofi_sys::FI_EINVAL);
            assert_eq!(e.to_string(), format!("fake_post failed: {} (-22)", strerror(22)));
        }
        other => panic!("expected the call's error, got {other:?}"),
    }
}
