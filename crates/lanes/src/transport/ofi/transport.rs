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

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::endpoint::{open_process_endpoint, process_endpoint, EndpointSpec, ProcessEndpoint, RemoteRange};
use super::export::{Export, OwnerHooks};
use super::node_watch::NodeWatch;
use super::notify::{DataInterruptTarget, InterruptTarget, Publish};
use super::remote::OfiRemote;
use crate::cluster::exports::{self, ExportRecord};
use crate::cluster::{self, Client, IdleProgress, ObjectKind, Refusal};
use crate::config::{ClusterMembership, NodeId};
use crate::error::{Error, Result};
use crate::fabric::MapAccess;
use crate::fabric::Timeout;
use crate::platform::liveness::ProcessIdentity;
use crate::platform::{hex, random_u64, unhex};
use crate::transport::shm::data_interrupt::OBJECT_BYTES;
use crate::transport::shm::interrupt::{BellPage, BELL_PAGE};
use crate::transport::shm::layout::kind;
use crate::transport::shm::remote::direct_mapping;
use crate::transport::shm::segment_file::{DataMapping, SegmentFile};
use crate::transport::shm::FabricPaths;
use crate::transport::{connect_with_retry, ObjectAddr, ObjectInfo, Transport};

/// How long one call to the daemon may take when the caller gave no bound.
const DAEMON_CALL: Duration = Duration::from_secs(5);

/// Reaches objects of other hosts over libfabric, for one fabric descriptor.
#[derive(Debug, Clone)]
pub(crate) struct OfiTransport(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    paths: FabricPaths,
    node: u32,
    identity: ProcessIdentity,
    spec: EndpointSpec,
    /// Set once, at first use: read without a lock by every wait that drives progress.
    endpoint: OnceLock<Arc<ProcessEndpoint>>,
    watch: Mutex<Option<Arc<NodeWatch>>>,
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
        Ok(OfiTransport(Arc::new(Shared {
            paths,
            node,
            identity,
            spec,
            endpoint: OnceLock::new(),
            watch: Mutex::new(None),
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
        let started = NodeWatch::start(self.0.paths.root().to_path_buf())?;
        *w = Some(started.clone());
        Ok(started)
    }

    /// Registers the data of local object (`layout_kind`, `id`) of this node, `memory`,
    /// and publishes its export record; `hooks` turn peers' writes into local events.
    pub fn export(&self, layout_kind: u32, id: u32, memory: DataMapping, mut hooks: OwnerHooks) -> Result<Exported> {
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
        };
        exports::publish(self.0.paths.root(), &record)
            .map_err(|e| Error::io(format!("publishing the export of {kind} {id:#x}"), e))?;
        Ok(Exported { record, export: Some(export), dir: self.0.paths.root().to_path_buf() })
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
        let info = ObjectInfo { addr, size: grant.info.size, owner };
        let g = grant.grant;
        // Returning early above drops `c`, which releases the grant.
        let on_disconnect = Box::new(move || {
            let _ = c.disconnect_object(g, DAEMON_CALL);
        });
        let publish = Publish::for_sender(&endpoint, record.in_place);
        let remote = OfiRemote::new(endpoint, range, info, grant.slot, g, Some(on_disconnect));
        remote.publish_by(publish);
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

/// What turns peers' writes to an object this process owns into local events: the
/// trigger counters of an interrupt, the ring publishers of a data interrupt (each a
/// completion handler and an arrival watch); segments need none.
pub(crate) fn owner_hooks(layout_kind: u32, file: &SegmentFile) -> Result<OwnerHooks> {
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

/// A refusal as the connect policy wants it: worth waiting out, or final.
fn refusal(addr: ObjectAddr, e: cluster::Error) -> Result<Result<OfiRemote>> {
    let (node, segment) = (addr.node, addr.id);
    match e {
        cluster::Error::Refused(Refusal::NotFound { .. }) => Ok(Err(Error::NoSuchSegment { node, segment })),
        cluster::Error::Refused(Refusal::NotAvailable { .. }) => Ok(Err(Error::NotAvailable { node, segment })),
        cluster::Error::Refused(Refusal::TooManyConnections { .. }) => Err(Error::TooManyConnections { node, segment }),
        cluster::Error::Refused(r @ Refusal::HostUnreachable { .. }) => {
            Ok(Err(Error::NodeUnreachable { node, reason: r.to_string() }))
        }
        cluster::Error::Refused(Refusal::Corrupt { reason, .. }) => {
            Err(Error::CorruptSegment { path: format!("node {node}: {segment:#x}").into(), reason })
        }
        other => Err(Error::Cluster(other.to_string())),
    }
}

/// An object of this process, exported: its registration and its published record.
/// Dropping it withdraws the record, then closes the registration.
#[derive(Debug)]
pub(crate) struct Exported {
    record: ExportRecord,
    export: Option<Export>,
    dir: std::path::PathBuf,
}

impl Drop for Exported {
    fn drop(&mut self) {
        let r = &self.record;
        exports::withdraw(&self.dir, r.kind, r.node, r.id, r.epoch);
        self.export.take();
    }
}
