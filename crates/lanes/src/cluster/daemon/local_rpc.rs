//! The processes' requests on `<fabric dir>/daemon.sock` (0600): hello, lookup, probe,
//! connect, adopt, disconnect, groups, the cluster's hosts, subscriptions that stream
//! node events, grant notices and keep-alives, and the cross-host sockets' requests (which
//! host an address is on, registering and withdrawing a socket half, the halves' status:
//! `cross_host.rs`). One thread per process; the grants it holds end with its connection.

use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::holdings::{ClientGrants, Requested};
use super::membership::millis;
use super::{Shared, State, CLIENT_WRITE_TIMEOUT, KEEPALIVE, MAX_CLIENTS, MAX_REQUEST_WAIT, SUBSCRIBER_QUEUE, TICK};
use crate::cluster::proto::{
    write_message, Fill, FrameReader, HeldGrant, HostState, HostStatus, Refusal, Reply, Request, PROTOCOL_VERSION,
};

impl Shared {
    /// This host and every other host as `lanes status` shows them.
    pub(super) fn hosts(&self, st: &State) -> Vec<HostStatus> {
        let now = Instant::now();
        let mut out = vec![HostStatus {
            name: self.me.name.clone(),
            address: self.me.address.to_string(),
            nodes: self.me.nodes.iter().map(|n| n.get()).collect(),
            local: true,
            state: HostState::Operational,
            state_for_ms: millis(self.started.elapsed()),
            last_heard_ms: None,
        }];
        out.extend(st.links.iter().enumerate().map(|(i, l)| HostStatus {
            name: l.entry.name.clone(),
            address: l.entry.address.to_string(),
            nodes: l.entry.nodes.iter().map(|n| n.get()).collect(),
            local: false,
            state: st.membership.state(i),
            state_for_ms: millis(now.saturating_duration_since(st.membership.since(i))),
            last_heard_ms: st.membership.last_heard(i).map(|t| millis(now.saturating_duration_since(t))),
        }));
        out
    }

    /// Accepts local processes, at most [`MAX_CLIENTS`] at once.
    pub(super) fn accept_local(self: Arc<Self>, listener: UnixListener) {
        for stream in listener.incoming() {
            if self.stopping() {
                return;
            }
            let mut stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    self.log(format_args!("accepting a local process: {e}"));
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            if self.clients.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
                self.clients.fetch_sub(1, Ordering::SeqCst);
                let _ = stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT));
                let reason = format!("the daemon serves {MAX_CLIENTS} processes already");
                let _ = write_message(&mut stream, &Reply::Error { reason });
                continue;
            }
            let s = self.clone();
            let spawned = crate::platform::threads::spawn("lanes-d-client", move || {
                if let Err(reason) = s.serve_client(stream) {
                    s.log(format_args!("local process: {reason}"));
                }
                s.clients.fetch_sub(1, Ordering::SeqCst);
            });
            if let Err(e) = spawned {
                self.clients.fetch_sub(1, Ordering::SeqCst);
                self.log(format_args!("cannot serve a local process: {e}"));
            }
        }
    }

    /// Serves one process's requests until it hangs up; `Err` says why it was cut off.
    fn serve_client(&self, mut stream: UnixStream) -> std::result::Result<(), String> {
        // Whatever way this ends, the grants the process holds end with its connection.
        let client = ClientGrants { shared: self, id: self.next_id.fetch_add(1, Ordering::Relaxed) };
        // Who connected: the process whose socket halves it may register.
        let cred = crate::platform::net::peer_cred(std::os::fd::AsRawFd::as_raw_fd(&stream)).ok();
        stream.set_read_timeout(Some(TICK)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(CLIENT_WRITE_TIMEOUT)).map_err(|e| e.to_string())?;
        let mut reader = FrameReader::new();
        loop {
            let request = loop {
                match reader.next_message::<Request>() {
                    Ok(Some(r)) => break r,
                    Ok(None) => {}
                    Err(e) => {
                        let reason = format!("bad request: {e}");
                        let _ = write_message(&mut stream, &Reply::Error { reason: reason.clone() });
                        return Err(reason);
                    }
                }
                if self.stopping() {
                    return Ok(());
                }
                match reader.fill(&mut stream) {
                    Ok(Fill::Closed) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            };
            let wait = |ms: u64| Duration::from_millis(ms).min(MAX_REQUEST_WAIT);
            let reply = match request {
                Request::Hello { .. } => {
                    Reply::Hello { version: PROTOCOL_VERSION, host: self.me.name.clone(), boot: self.boot }
                }
                Request::Lookup { node, kind, id, timeout_ms } => {
                    Reply::Lookup { result: self.lookup(node, kind, id, wait(timeout_ms)) }
                }
                Request::Probe { node, timeout_ms } => Reply::Probe { result: self.probe(node, wait(timeout_ms)) },
                Request::Connect { node, kind, id, peer_node, timeout_ms, notify } => {
                    let result = self.connect(node, kind, id, peer_node, wait(timeout_ms));
                    if let Ok((grant, host)) = &result {
                        let held = HeldGrant { grant: grant.grant, node, kind, id, slot: grant.slot, peer_node };
                        let held = Requested { client: client.id, host: host.clone(), held, notify };
                        self.requested_lock().insert(grant.grant, held);
                    }
                    Reply::Connect { result: result.map(|(grant, _)| grant) }
                }
                Request::Adopt { grant, notify } => {
                    // A process of an earlier daemon registers a grant again: ours to take
                    // over for a local object, else the object's host's (told in `Holding`;
                    // one it cannot take over comes back as `Forgotten`).
                    let host = self.remote_host_of(grant.node);
                    let result = match &host {
                        None => self
                            .adopt(&grant, &self.me.name, 0)
                            .map(|_| ())
                            .map_err(|reason| Refusal::Failed { reason }),
                        Some(_) => Ok(()),
                    };
                    if result.is_ok() {
                        let g = grant.grant;
                        self.log(format_args!(
                            "grant {g:016x}: {} {:#x} of node {}: registered again by its holder (node {})",
                            grant.kind, grant.id, grant.node, grant.peer_node
                        ));
                        let held = Requested { client: client.id, host, held: grant, notify };
                        self.requested_lock().insert(g, held);
                    }
                    Reply::Adopted { result }
                }
                Request::Disconnect { grant } => {
                    let mut req = self.requested_lock();
                    let mine = req.get(&grant).is_some_and(|r| r.client == client.id);
                    let held = if mine { req.remove(&grant) } else { None };
                    drop(req);
                    if let Some(r) = held {
                        self.release_requested(grant, r.host, false);
                    }
                    Reply::Disconnected
                }
                Request::Groups { timeout_ms } => Reply::Groups { result: self.groups(wait(timeout_ms)) },
                Request::Cluster => Reply::Cluster { hosts: self.hosts(&self.lock()) },
                Request::Subscribe => return self.serve_subscriber(stream),
                Request::HostOf { address } => Reply::HostOf { owner: self.host_of(address) },
                Request::RegisterHalf { half } => Reply::Registered { result: self.register_half(cred, half) },
                Request::WithdrawHalf { local, remote, cookie, fabric_sent, fabric_received } => {
                    self.withdraw_half(cred, (local, remote, cookie), (fabric_sent, fabric_received));
                    Reply::Withdrawn
                }
                Request::Sockets => Reply::Sockets { status: self.sockets_status() },
            };
            write_message(&mut stream, &reply).map_err(|e| format!("answering: {e}"))?;
        }
    }

    /// Streams node events to a subscribed process until it or the daemon goes away.
    fn serve_subscriber(&self, mut stream: UnixStream) -> std::result::Result<(), String> {
        let (tx, rx): (SyncSender<Reply>, Receiver<Reply>) = mpsc::sync_channel(SUBSCRIBER_QUEUE);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let hosts = {
            let mut st = self.lock();
            st.subscribers.push((id, tx));
            self.hosts(&st)
        };
        let result = (|| {
            write_message(&mut stream, &Reply::Subscribed { hosts, subscriber: id }).map_err(|e| e.to_string())?;
            loop {
                let msg = match rx.recv_timeout(KEEPALIVE) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => Reply::KeepAlive,
                    Err(RecvTimeoutError::Disconnected) => return Ok(()), // stopping, or dropped as too slow
                };
                if self.stopping() {
                    return Ok(());
                }
                if let Err(e) = write_message(&mut stream, &msg) {
                    return match e.kind() {
                        io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => Ok(()),
                        _ => Err(format!("subscriber: {e}")),
                    };
                }
            }
        })();
        self.lock().subscribers.retain(|(i, _)| *i != id);
        result
    }
}
