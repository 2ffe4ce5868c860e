//! The ofi transport: how a process of a cluster reaches objects of other hosts, and how it
//! offers its own objects to them.
//!
//! - **Connect**: ask this host's daemon (`Request::Connect`); the owner's daemon validates
//!   the object, claims a connection slot for us under its proxy record and answers with the
//!   owner's export record; we insert the owner's endpoint and hold the grant on our daemon
//!   connection for as long as the connection lives (the daemons release it when we
//!   disconnect or our daemon connection closes: exit, death).
//! - **Export**: every object this process creates while it is part of a cluster is
//!   registered with the process endpoint and published as an export record in the fabric
//!   directory, where the daemon finds it; dropping the export withdraws the record and
//!   closes the registration (revoking peers' access).
//!
//! - **Watch**: every connection is registered with the process's node watch
//!   (`super::node_watch`), which tells it when its host stops responding or is lost and
//!   when its object is made unavailable, removed or orphaned.
//!
//! The endpoint is opened at first use, so a cluster process that never creates or connects
//! pays nothing; so is the node watch, at the first connect.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::endpoint::{
    open_process_endpoint, process_endpoint, EndpointSpec, ProcessEndpoint, RemoteRange, SpinDriver,
};
use super::export::{Export, OwnerHooks};
use super::fence;
use super::fi;
use super::node_watch::NodeWatch;
use super::notify::{DataInterruptTarget, InterruptTarget, Publish};
use super::reflective::{self, Fanout};
use super::remote::{DaemonLink, OfiRemote};
use crate::cluster::exports::{self, ExportRecord, SlotKey};
use crate::cluster::{self, Client, IdleProgress, ObjectKind, Refusal};
use crate::config::{ClusterMembership, NodeId};
use crate::error::{Error, Result};
use crate::platform::liveness::ProcessIdentity;
use crate::platform::{hex, random_u64, unhex};
use crate::transport::shm::data_interrupt::OBJECT_BYTES;
use crate::transport::shm::interrupt::{BellPage, BELL_PAGE};
use crate::transport::shm::layout::{kind, HeaderView, MAX_CONNECTIONS};
use crate::transport::shm::remote::direct_mapping;
use crate::transport::shm::segment_file::{DataMapping, SegmentFile};
use crate::transport::shm::FabricPaths;
use crate::transport::MapAccess;
use crate::transport::Timeout;
use crate::transport::{
    connect_with_retry, ExportHandle, HostTransport, ObjectAddr, ObjectInfo, RemoteHandle, RemoteObject, Transport,
};

/// How long one call to the daemon may take when the caller gave no bound.
const DAEMON_CALL: Duration = Duration::from_secs(5);

/// Reaches objects of other hosts over libfabric, for one fabric descriptor.
#[derive(Debug, Clone)]
pub struct OfiTransport(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    paths: FabricPaths,
    node: u32,
    identity: ProcessIdentity,
    spec: EndpointSpec,
    /// Set once, at first use: read without a lock by every wait that drives progress.
    endpoint: OnceLock<Arc<ProcessEndpoint>>,
    watch: Mutex<Option<Arc<NodeWatch>>>,
    /// How long connections keep their state while this host's daemon is away
    /// (`lost_after`): past it they are NotOperational until it is back.
    patience: Duration,
    /// The address of each node of another host whose address no other host shares: the
    /// connections a lost host opened to this process are those from its address.
    fenced_hosts: Arc<HashMap<u32, IpAddr>>,
}

impl OfiTransport {
    /// The transport of a process acting as `node` on the host `membership` names.
    pub fn new(
        membership: ClusterMembership,
        paths: FabricPaths,
        node: u32,
        identity: ProcessIdentity,
    ) -> Result<Self> {
        let me = membership.me().ok_or_else(|| Error::Config {
            path: paths.root().to_path_buf(),
            message: format!("host {:?} is not in the cluster", membership.host),
        })?;
        let provider = std::env::var("LANES_OFI_PROVIDER")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| membership.config.provider.clone());
        let progress = IdleProgress::from_env(membership.config.progress)
            .map_err(|message| Error::Config { path: paths.root().to_path_buf(), message })?;
        let spec = EndpointSpec { provider, address: me.address.ip(), progress };
        let hosts = &membership.config.hosts;
        let fenced_hosts = hosts
            .iter()
            .filter(|h| h.name != me.name && hosts.iter().filter(|o| o.address.ip() == h.address.ip()).count() == 1)
            .flat_map(|h| h.nodes.iter().map(move |n| (n.get(), h.address.ip())))
            .collect();
        Ok(OfiTransport(Arc::new(Shared {
            paths,
            node,
            identity,
            spec,
            endpoint: OnceLock::new(),
            watch: Mutex::new(None),
            patience: membership.config.lost_after,
            fenced_hosts: Arc::new(fenced_hosts),
        })))
    }

    /// The process endpoint if it is open already (something of this process was exported
    /// or connected across hosts, through this fabric descriptor or another), without
    /// opening it.
    pub fn open_endpoint(&self) -> Option<Arc<ProcessEndpoint>> {
        self.0.endpoint.get().cloned().or_else(|| open_process_endpoint(&self.0.spec))
    }

    /// The process endpoint, opened at first use.
    pub fn endpoint(&self) -> Result<Arc<ProcessEndpoint>> {
        if let Some(e) = self.0.endpoint.get() {
            return Ok(e.clone());
        }
        // Two first uses racing get the same endpoint: the process registry shares it.
        let e = process_endpoint(&self.0.spec)?;
        Ok(self.0.endpoint.get_or_init(|| e).clone())
    }

    /// The node watch, started at first use.
    fn watch(&self) -> Result<Arc<NodeWatch>> {
        let mut w = self.0.watch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = &*w {
            return Ok(w.clone());
        }
        let started = NodeWatch::start(self.0.paths.root().to_path_buf(), self.0.patience)?;
        *w = Some(started.clone());
        Ok(started)
    }

    /// Registers the data of local object (`layout_kind`, `id`) of this node, `memory`,
    /// and publishes its export record; `hooks` turn peers' writes into local events.
    /// `header` is the object's: each of its connection slots gets a key of its own
    /// ([`Exported::renew_keys`]).
    pub fn export(
        &self,
        layout_kind: u32,
        id: u32,
        memory: DataMapping,
        mut hooks: OwnerHooks,
        header: &HeaderView,
    ) -> Result<Exported> {
        let kind = ObjectKind::from_layout_kind(layout_kind)
            .ok_or(Error::IllegalOperation("exporting an object of an unknown kind"))?;
        let endpoint = self.endpoint()?;
        // Said for every kind: peers publish triggers and messages in place only to such an
        // owner, and their maps' release stores ride in their data's write only to it.
        let in_place = Publish::owner_may_watch(&endpoint);
        if !in_place {
            // The record says so: no peer publishes in place to it, nothing to watch.
            hooks.on_arrival = None;
        }
        let export = Export::new(&endpoint, memory, hooks)?;
        let record = ExportRecord {
            kind,
            node: self.0.node,
            id,
            owner_pid: self.0.identity.pid(),
            owner_identity: self.0.identity.bits(),
            provider: self.0.spec.provider.clone(),
            endpoint: hex(endpoint.name()),
            key: export.key(),
            base: export.base(),
            len: export.len(),
            handle: u32::from(export.handle()),
            epoch: random_u64() | 1,
            in_place,
            slot_keys: Vec::new(),
        };
        let exported = Exported {
            fence: fence::endpoint_address(endpoint.name()).map(|local| (local, self.0.fenced_hosts.clone())),
            keys: Mutex::new(SlotKeys {
                record,
                slots: (0..MAX_CONNECTIONS).map(|_| None).collect(),
                unpublished: false,
            }),
            export: Some(export),
            dir: self.0.paths.root().to_path_buf(),
            renewer: Mutex::new(None),
        };
        // The first record already carries every slot's key: a grant never carries the
        // object's own key, which nothing revokes before the export ends.
        exported.renew(header, true).map_err(|e| Error::io(format!("publishing the export of {kind} {id:#x}"), e))?;
        Ok(exported)
    }

    /// One connect attempt (see [`connect_with_retry`] for the meaning of the nesting).
    /// `client` is the daemon connection of this connect call, kept across its attempts;
    /// a granted connection takes it along, so that the grant lives exactly as long as the
    /// connection (the daemons release it when the client connection closes).
    fn try_connect(
        &self,
        addr: ObjectAddr,
        timeout: Timeout,
        client: &mut Option<Client>,
    ) -> Result<Result<OfiRemote>> {
        let kind = ObjectKind::from_layout_kind(addr.kind)
            .ok_or(Error::IllegalOperation("connecting to an object of an unknown kind"))?;
        let node = NodeId::new(addr.node)?;
        let me = NodeId::new(self.0.node)?;
        let call = match timeout {
            Timeout::After(t) => t.clamp(Duration::from_millis(100), DAEMON_CALL),
            _ => DAEMON_CALL,
        };
        let watch = self.watch()?;
        let mut c = match client.take() {
            Some(c) if c.is_usable() => c,
            _ => Client::connect(self.0.paths.root(), call).map_err(|e| Error::Cluster(e.to_string()))?,
        };
        if let Some(subscriber) = watch.subscriber() {
            c.notify_to(subscriber);
        }
        let grant = match c.connect_object(node, kind, addr.id, me, call) {
            Ok(g) => g,
            Err(e) => {
                *client = Some(c);
                return refusal(addr, e);
            }
        };
        let bad = |why: &str| {
            Error::Malformed(format!("export record of {kind} {:#x} on node {}: {why}", addr.id, addr.node))
        };
        let record = &grant.export;
        if record.kind != kind || record.node != addr.node || record.id != addr.id {
            return Err(bad("names another object"));
        }
        if record.provider != self.0.spec.provider {
            return Err(Error::Config {
                path: self.0.paths.root().to_path_buf(),
                message: format!(
                    "node {} uses provider {:?}, this process {:?}",
                    addr.node, record.provider, self.0.spec.provider
                ),
            });
        }
        let name = unhex(&record.endpoint).ok_or_else(|| bad("endpoint name is not hex"))?;
        let handle = u16::try_from(record.handle).map_err(|_| bad("handle out of range"))?;
        let owner = ProcessIdentity::from_bits(record.owner_identity).ok_or_else(|| bad("owner identity"))?;
        let endpoint = self.endpoint()?;
        let peer = endpoint.peer(&name)?;
        let range = RemoteRange { peer, base: record.base, key: record.key, len: record.len, handle };
        probe(&endpoint, &range, Instant::now() + call)?;
        let info = ObjectInfo { addr, size: grant.info.size, owner };
        let g = grant.grant;
        // Returning early above drops `c`, which releases the grant. The node watch puts
        // another client in its place when this host's daemon restarted.
        let link = DaemonLink { client: Arc::new(Mutex::new(Some(c))), peer_node: self.0.node };
        let client = link.client.clone();
        let on_disconnect = Box::new(move || {
            if let Some(c) = client.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                let _ = c.disconnect_object(g, DAEMON_CALL);
            }
        });
        let publish = Publish::for_sender(&endpoint, record.in_place);
        let remote = OfiRemote::new(endpoint, range, info, grant.slot, g, Some(on_disconnect));
        remote.publish_by(publish);
        let _ = remote.conn().daemon_link.set(link);
        watch.register(remote.conn());
        Ok(Ok(remote))
    }
}

impl Transport for OfiTransport {
    type Remote = OfiRemote;

    fn connect(&self, addr: ObjectAddr, timeout: Timeout) -> Result<OfiRemote> {
        let mut client = None;
        connect_with_retry(addr, timeout, || self.try_connect(addr, timeout, &mut client))
    }
}

impl HostTransport for OfiTransport {
    type Export = Exported;
    type Driver = SpinDriver;

    const AVAILABLE: bool = true;

    fn open(
        membership: &ClusterMembership,
        paths: &FabricPaths,
        node: u32,
        identity: ProcessIdentity,
    ) -> Result<Option<Self>> {
        OfiTransport::new(membership.clone(), paths.clone(), node, identity).map(Some)
    }

    fn connect_remote(&self, addr: ObjectAddr, timeout: Timeout) -> Result<RemoteHandle> {
        Ok(RemoteHandle::Ofi(self.connect(addr, timeout)?))
    }

    fn export_object(&self, file: &SegmentFile, renew: Arc<dyn Fn() + Send + Sync>) -> Result<Option<Exported>> {
        let snap = *file.snapshot();
        if !matches!(snap.kind, kind::SEGMENT | kind::INTERRUPT | kind::DATA_INTERRUPT | kind::REFLECTIVE) {
            return Ok(None);
        }
        let mapping = file
            .map_data(0, snap.segment_size, crate::platform::mapping::Access::ReadWrite)
            .map_err(|e| Error::io("mapping the object for its export", e))?;
        let hooks = owner_hooks(snap.kind, file)?;
        let exported = self.export(snap.kind, snap.segment_id, mapping, hooks, file.header())?;
        // Keys of slots whose claim is over are revoked within a service tick, whether or
        // not the program looks at its events (revocation, `Exported`).
        exported.renew_periodically(renew);
        Ok(Some(exported))
    }

    fn driver(&self) -> Option<SpinDriver> {
        self.open_endpoint().map(SpinDriver::new)
    }

    fn add_periodic(&self, task: Weak<dyn Fn() + Send + Sync>) -> Result<()> {
        self.endpoint()?.add_periodic(task);
        Ok(())
    }

    fn group_object_size(size: u64) -> u64 {
        reflective::object_size(size)
    }

    fn create_group(&self, object: DataMapping, size: u64, receivers: &[u32], node: u32) -> Result<Arc<Fanout>> {
        reflective::init_roster(&object, size, receivers);
        Ok(Arc::new(Fanout::creator(self.endpoint()?, object, size, node)?))
    }

    fn join_group(&self, creator: u32, group: u32, node: u32) -> Result<(RemoteHandle, Arc<Fanout>, OwnedFd)> {
        let addr = ObjectAddr { kind: kind::REFLECTIVE, node: creator, id: group };
        let remote = self.connect(addr, Timeout::Immediate)?;
        let conn = remote.conn().clone();
        match Fanout::join(conn.clone(), conn.slot, node) {
            Ok((fan, fd)) => Ok((RemoteHandle::Ofi(remote), fan, fd)),
            Err(e) => {
                // As a fabric's connection that goes away: disconnected.
                remote.disconnect();
                Err(e)
            }
        }
    }
}

impl ExportHandle for Exported {
    fn renew_keys(&self, header: &HeaderView) {
        Exported::renew_keys(self, header)
    }
}

/// What turns peers' writes to an object this process owns into local events: the
/// trigger counters of an interrupt, the ring publishers of a data interrupt (each a
/// completion handler and an arrival watch); segments need none.
pub fn owner_hooks(layout_kind: u32, file: &SegmentFile) -> Result<OwnerHooks> {
    Ok(match layout_kind {
        kind::INTERRUPT => {
            InterruptTarget::new(BellPage::new(direct_mapping(file, 0, BELL_PAGE, MapAccess::ReadWrite)?)).hooks()
        }
        kind::DATA_INTERRUPT => {
            DataInterruptTarget::new(direct_mapping(file, 0, OBJECT_BYTES, MapAccess::ReadWrite)?).hooks()
        }
        _ => OwnerHooks::default(),
    })
}

/// Reads a few bytes of a newly granted object before its connection is handed out,
/// again (every 20 ms) when that fails, until `deadline`. The provider's connection to the
/// owner's endpoint may be one the owner has cut: after this host was lost to it, the owner
/// shut the connections from here down (revocation, `Exported`), and rxm learns that only
/// from the first operation it sends over it, which fails; the next one opens a new
/// connection. The probe takes that failure, so that the program's first operation does
/// not. On a connection that works it costs one round trip (and opens the provider's
/// connection, which the first operation would otherwise open).
fn probe(endpoint: &Arc<ProcessEndpoint>, range: &RemoteRange, deadline: Instant) -> Result<()> {
    const AGAIN: Duration = Duration::from_millis(20);
    let n = range.len.min(8) as usize;
    let mem = Arc::new(fi::Buffer::new(n)?);
    let mr = Arc::new(endpoint.register(mem, fi::FI_READ | fi::FI_WRITE)?);
    loop {
        let keep: Arc<dyn std::any::Any + Send + Sync> = mr.clone();
        let outcome = mr.local(0, n).and_then(|local| {
            let target = range.target(0, n as u64)?;
            // SAFETY: `local` is the probe's own registered buffer, which `keep` holds until
            // the read's completion is read; nothing else touches it.
            let op = unsafe { endpoint.post_read(local, target, Some(keep), deadline) }?;
            endpoint
                .wait_until(|| op.outcome(), Duration::from_micros(50), deadline, "probing a new connection")?
                .map_err(|message| Error::Ofi {
                    call: "fi_read",
                    code: 5,
                    message: format!("probing a new connection: {message}"),
                })
        });
        match outcome {
            Ok(()) => return Ok(()),
            Err(_) if Instant::now() + AGAIN < deadline => std::thread::sleep(AGAIN),
            Err(e) => return Err(e),
        }
    }
}

/// A refusal as the connect policy wants it: worth waiting out, or final.
fn refusal(addr: ObjectAddr, e: cluster::Error) -> Result<Result<OfiRemote>> {
    let (node, segment) = (addr.node, addr.id);
    match e {
        cluster::Error::Refused(Refusal::NotFound { .. }) => Ok(Err(Error::NoSuchSegment { node, segment })),
        cluster::Error::Refused(Refusal::NotAvailable { .. }) => Ok(Err(Error::NotAvailable { node, segment })),
        cluster::Error::Refused(Refusal::TooManyConnections { .. }) => Err(Error::TooManyConnections { node, segment }),
        // Worth waiting out, also an owner's daemon that did not answer in time: a daemon
        // killed with our question unanswered is not answered for by anyone, and the next
        // attempt reaches its successor (a third-party program's SCIConnectSegment with
        // SCI_INFINITE_TIMEOUT failed with SCI_ERR_SYSTEM after 5 s there).
        cluster::Error::Refused(
            r @ (Refusal::HostUnreachable { .. } | Refusal::DaemonRestarting { .. } | Refusal::Timeout { .. }),
        ) => Ok(Err(Error::NodeUnreachable { node, reason: r.to_string() })),
        cluster::Error::Refused(Refusal::Corrupt { reason, .. }) => {
            Err(Error::CorruptSegment { path: format!("node {node}: {segment:#x}").into(), reason })
        }
        // This host's daemon did not answer within the attempt's bound (it is busy): worth
        // another attempt while the caller's time lasts, and a timeout, not a system error,
        // when it has run out.
        cluster::Error::Timeout { what, waited_ms } => Ok(Err(Error::Timeout { what, waited_ms })),
        other => Err(Error::Cluster(other.to_string())),
    }
}

/// An object of this process, exported: its registration and its published record.
/// Dropping it withdraws the record, then closes the registrations.
///
/// **Revocation.** Every connection slot of the object has a key of its own, a
/// registration of the same memory made for one claim of the slot (the record's
/// `slot_keys`: slot, the slot's generation before the claim, key). The granting daemon
/// claims only a slot whose key was made for the generation it claims from, and hands out
/// that key. Once the claim is over (the slot released or claimed again: its generation
/// moved on), [`Exported::renew_keys`] closes the key's registration, which makes the
/// provider drop every later write naming it, and makes a new key for the slot's next
/// claim. It runs before the owner's program hears of a peer's leaving (the segment's
/// events) and on the endpoint's service thread every tick, so a peer whose host was lost,
/// that died or disconnected cannot reach the memory again with its old key, even when
/// its writes were still on the wire: what the provider took in before the key closed is
/// the limit (docs/design/multi-host.md, "Revocation").
pub struct Exported {
    /// The endpoint's own address and the addresses of other hosts' nodes, for cutting the
    /// connections of a lost host (`fence`); None when the endpoint's name is no socket
    /// address.
    fence: Option<(SocketAddr, Arc<HashMap<u32, IpAddr>>)>,
    keys: Mutex<SlotKeys>,
    export: Option<Export>,
    dir: std::path::PathBuf,
    /// The periodic task renewing the keys (the endpoint holds it weakly).
    renewer: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

/// The published record and each slot's key: (generation before the claim it is for, key).
struct SlotKeys {
    record: ExportRecord,
    slots: Vec<Option<(u32, fi::MemoryRegion)>>,
    /// The last record could not be written.
    unpublished: bool,
}

impl std::fmt::Debug for Exported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exported").field("export", &self.export).field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Exported {
    /// Runs `task` (which should call [`Exported::renew_keys`]) on the endpoint's service
    /// thread every tick while this export lives.
    pub fn renew_periodically(&self, task: Arc<dyn Fn() + Send + Sync>) {
        if let Some(e) = &self.export {
            e.endpoint_arc().add_periodic(Arc::downgrade(&task));
        }
        *self.renewer.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Revokes the key of every slot whose claim is over and makes the slot a new one,
    /// republishing the record when anything changed. `header` is the object's.
    pub fn renew_keys(&self, header: &HeaderView) {
        // A record that cannot be written now is written at the next renewal; meanwhile the
        // daemon finds no key for the renewed slots and waits.
        let _ = self.renew(header, false);
    }

    fn renew(&self, header: &HeaderView, publish: bool) -> std::io::Result<()> {
        let Some(export) = &self.export else { return Ok(()) };
        let mut st = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut stale = Vec::new();
        let mut lost_hosts = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            // A slot being claimed or released right now is looked at next time.
            let Some(snap) = header.slot(i) else { continue };
            let g = snap.generation;
            let current = match &st.slots[i] {
                // Made for a claim from `g`, not yet taken; or taken by the current holder.
                Some((made_at, _)) => *made_at == g || (snap.holder.is_some() && g.wrapping_sub(*made_at) == 2),
                None => false,
            };
            if current {
                continue;
            }
            stale.push((i, g));
            if snap.last_host_lost {
                if let Some(ip) = self.fence.as_ref().and_then(|(_, hosts)| hosts.get(&snap.last_node)) {
                    if !lost_hosts.contains(ip) {
                        lost_hosts.push(*ip);
                    }
                }
            }
        }
        if let (Some((local, _)), false) = (&self.fence, lost_hosts.is_empty()) {
            // A lost host's writes the provider has begun to place: cut its connections, and
            // let the provider read what the kernel already holds (placed now, before anyone
            // hears of the loss) up to the end of each stream, where it drops the connection.
            let shut: usize = lost_hosts.iter().map(|ip| fence::shut_accepted_from(*local, *ip)).sum();
            if shut > 0 {
                eprintln!("lanes: revocation: cut {shut} connection(s) of lost host(s) {lost_hosts:?} to {local}");
                for _ in 0..3 {
                    export.endpoint_arc().progress();
                }
            }
        }
        let changed = publish || st.unpublished || !stale.is_empty();
        for (i, g) in stale {
            // Revoke first (closing the registration), then make the next claim's key.
            st.slots[i] = None;
            st.slots[i] = export.register_key().ok().map(|mr| (g, mr));
        }
        if !changed {
            return Ok(());
        }
        let keys: Vec<SlotKey> = st
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|(g, mr)| SlotKey { slot: i as u32, generation: *g, key: mr.key() }))
            .collect();
        st.record.slot_keys = keys;
        let published = exports::publish(&self.dir, &st.record);
        st.unpublished = published.is_err();
        published
    }
}

impl Drop for Exported {
    fn drop(&mut self) {
        let st = self.keys.get_mut().unwrap_or_else(|e| e.into_inner());
        let r = &st.record;
        exports::withdraw(&self.dir, r.kind, r.node, r.id, r.epoch);
        // Every slot's key closes, then the object's own registration.
        st.slots.clear();
        self.export.take();
    }
}

#[cfg(test)]
mod refusal_tests {
    use super::*;

    /// The refusals a connect waits out (within its timeout) rather than fails on: a host
    /// not answering, its daemon restarting, and an owner's daemon that never answered the
    /// question (killed with it unanswered: the next attempt reaches its successor).
    #[test]
    fn an_unanswered_question_is_waited_out_like_an_unreachable_host() {
        let addr = ObjectAddr { kind: 0, node: 8, id: 0x62 };
        let host = "a".to_string();
        for r in [
            Refusal::Timeout { host: host.clone(), waited_ms: 4950 },
            Refusal::DaemonRestarting { node: 8, host: host.clone() },
            Refusal::HostUnreachable { node: 8, host: host.clone(), state: crate::cluster::HostState::Suspect },
        ] {
            let what = r.to_string();
            match refusal(addr, cluster::Error::Refused(r)) {
                Ok(Err(Error::NodeUnreachable { node: 8, reason })) => assert_eq!(reason, what),
                other => panic!("{what}: {other:?}"),
            }
        }
    }
}
