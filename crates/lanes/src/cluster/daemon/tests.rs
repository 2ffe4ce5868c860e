//! The daemon as a whole, in this process: daemons on 127.0.0.1 that find each other,
//! notice a stop, refuse strangers, impostors, replays and garbage, and grant slots. (The
//! host states alone, on a fake clock, are tested in `membership`.)

use std::net::TcpStream;

use super::*;
use crate::cluster::client::Client;
use crate::cluster::config::ClusterSection;
use crate::cluster::exports;
use crate::cluster::link::{self, Sealed};
use crate::cluster::proto::{
    write_message, Fill, FrameReader, HostStatus, ObjectKind, Refusal, Request, PROTOCOL_VERSION,
};
use crate::config::NodeEntry;
use crate::config::NodeId;
use crate::transport::shm::layout::kind;
use crate::transport::shm::segment_file::SegmentFile;

/// Sends a plaintext hello naming `host` to the daemon at `addr` and returns its answer
/// (a goodbye is expected: keyed daemons and unknown hosts get one).
fn plaintext_hello(addr: std::net::SocketAddr, host: &str, boot: u64) -> PeerMessage {
    let mut t = TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let hello = PeerMessage::Hello {
        version: PROTOCOL_VERSION,
        host: host.into(),
        boot,
        nodes: vec![],
        nonce: None,
        proof: None,
        host_epoch: String::new(),
        addresses: vec![],
    };
    write_message(&mut t, &hello).unwrap();
    let mut r = FrameReader::new();
    loop {
        if let Some(m) = r.next_message::<PeerMessage>().unwrap() {
            return m;
        }
        assert_ne!(r.fill(&mut t).unwrap(), Fill::Closed, "closed without a goodbye");
    }
}

/// A fabric directory of one test (not created: the daemon creates it, private), removed
/// when the test ends.
fn scratch(name: &str) -> lanes_testkit::TestDir {
    let d = std::env::temp_dir().join(format!("lanes-daemon-unit-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    lanes_testkit::TestDir(d)
}

/// A cluster of `hosts` on 127.0.0.1, each on its own free port. Fast heartbeats; a
/// handshake must finish within suspect_after, and a link whose heartbeats stop for that
/// long is renewed (its grants refused meanwhile): a debug build's Noise messages on a
/// loaded machine took longer than 150 ms.
fn cluster(hosts: &[&str]) -> ClusterConfig {
    let section = ClusterSection {
        heartbeat_ms: Some(20),
        suspect_after_ms: Some(1000),
        lost_after_ms: Some(2000),
        ..Default::default()
    };
    let nodes: Vec<NodeEntry> = hosts
        .iter()
        .zip(lanes_testkit::free_ports(hosts.len()))
        .enumerate()
        .map(|(k, (h, port))| NodeEntry {
            id: 8 + 4 * k as u32,
            host: h.to_string(),
            address: Some(format!("127.0.0.1:{port}")),
            public_key: None,
        })
        .collect();
    ClusterConfig::build(&section, &nodes).unwrap()
}

#[test]
fn two_daemons_in_one_process_see_each_other_and_notice_a_stop() {
    let c = cluster(&["a", "b"]);
    let (da, db) = (scratch("a"), scratch("b"));
    let a =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.to_path_buf(), key_file: None })
            .unwrap();
    let b =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.to_path_buf(), key_file: None })
            .unwrap();
    let mode = fs::metadata(a.socket()).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // A second daemon on the same directory is refused.
    let again =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.to_path_buf(), key_file: None });
    assert!(matches!(again, Err(Error::AlreadyRunning { .. })), "{again:?}");
    let mut client = Client::connect(&da, Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let hosts = client.cluster(Duration::from_secs(1)).unwrap();
        if hosts.iter().find(|h| h.name == "b").unwrap().state == HostState::Operational {
            break;
        }
        assert!(Instant::now() < deadline, "b never operational: {hosts:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let socket_b = b.socket().to_path_buf();
    b.stop();
    assert!(!socket_b.exists(), "the socket is removed");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let hosts = client.cluster(Duration::from_secs(1)).unwrap();
        // Suspect at its goodbye; Lost if its connection had closed just before (then
        // the goodbye never came, and a stopped daemon stays away).
        if hosts.iter().find(|h| h.name == "b").unwrap().state != HostState::Operational {
            break;
        }
        assert!(Instant::now() < deadline, "b's stop not noticed: {hosts:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(a);
    let _ = fs::remove_dir_all(&da);
    let _ = fs::remove_dir_all(&db);
}

/// A daemon whose directory was removed under it (its socket file gone, as when a test
/// harness cleans up first) still stops when asked, and promptly.
#[test]
fn a_daemon_stops_after_its_directory_is_removed() {
    let c = cluster(&["a"]);
    let d = scratch("removed");
    let a =
        Daemon::start(DaemonOptions { cluster: c, host: "a".into(), dir: d.to_path_buf(), key_file: None }).unwrap();
    fs::remove_dir_all(&d).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        a.stop();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(5)).expect("the daemon stopped");
}

/// With `[cluster] secret_file`, daemons that share the secret talk; one with another
/// secret or none, and a stranger that cannot answer the challenge, are refused at the
/// hello with a goodbye saying why.
#[test]
fn daemons_prove_the_cluster_secret_before_they_talk() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("secret");
    fs::create_dir_all(&dir).unwrap();
    let write_secret = |name: &str, text: &str| {
        let p = dir.join(name);
        fs::write(&p, text).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    let (good, wrong) =
        (write_secret("good", "one secret, long enough"), write_secret("wrong", "another secret, as long"));
    let base = cluster(&["a", "b", "c"]);
    let with = |secret: Option<&PathBuf>| ClusterConfig { secret_file: secret.cloned(), ..base.clone() };
    let start = |host: &str, secret: Option<&PathBuf>| {
        let d = dir.join(host);
        Daemon::start(DaemonOptions { cluster: with(secret), host: host.into(), dir: d, key_file: None }).unwrap()
    };
    let a = start("a", Some(&good));
    let b = start("b", Some(&good));
    let mut client = Client::connect(&dir.join("a"), Duration::from_secs(2)).unwrap();
    wait_operational(&mut client, "b");
    let state_of_c = |client: &mut Client| {
        let hosts = client.cluster(Duration::from_secs(1)).unwrap();
        hosts.iter().find(|h| h.name == "c").unwrap().state
    };
    for secret in [Some(&wrong), None] {
        let c = start("c", secret);
        std::thread::sleep(Duration::from_millis(500)); // many dial attempts (heartbeat 20 ms)
        assert_eq!(state_of_c(&mut client), HostState::Unknown, "c with secret {secret:?} was let in");
        c.stop();
    }

    // A stranger posing as c: no challenge, then a wrong answer.
    let hello = |nonce: Option<String>| PeerMessage::Hello {
        version: PROTOCOL_VERSION,
        host: "c".into(),
        boot: 1,
        nodes: vec![16],
        nonce,
        proof: None,
        host_epoch: String::new(),
        addresses: vec![],
    };
    let goodbye = |t: &mut TcpStream| {
        let mut r = FrameReader::new();
        loop {
            match r.next_message::<PeerMessage>().unwrap() {
                Some(PeerMessage::Bye { reason }) => return reason,
                Some(_) => continue,
                None => assert_ne!(r.fill(t).unwrap(), Fill::Closed, "closed without a goodbye"),
            }
        }
    };
    let mut t = TcpStream::connect(a.address()).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    write_message(&mut t, &hello(None)).unwrap();
    assert!(goodbye(&mut t).contains("did not offer to prove"));
    let mut t = TcpStream::connect(a.address()).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    write_message(&mut t, &hello(Some(ClusterSecret::nonce()))).unwrap();
    write_message(&mut t, &PeerMessage::Auth { proof: "00".repeat(32) }).unwrap();
    assert!(goodbye(&mut t).contains("did not prove the cluster secret"));
    assert_eq!(state_of_c(&mut client), HostState::Unknown);

    // A readable secret is a configuration error naming the file.
    fs::set_permissions(&good, fs::Permissions::from_mode(0o640)).unwrap();
    let e = Daemon::start(DaemonOptions {
        cluster: with(Some(&good)),
        host: "c".into(),
        dir: dir.join("c"),
        key_file: None,
    })
    .unwrap_err();
    assert!(e.to_string().contains("mode 640"), "{e}");
    drop((a, b));
    let _ = fs::remove_dir_all(&dir);
}

/// A cluster of `hosts` on 127.0.0.1 with a host key each (files in `dir`).
fn keyed_cluster(hosts: &[&str], dir: &Path) -> (ClusterConfig, Vec<PathBuf>) {
    let mut c = cluster(hosts);
    let files: Vec<PathBuf> = hosts.iter().map(|h| dir.join(format!("{h}.key"))).collect();
    for (h, f) in c.hosts.iter_mut().zip(&files) {
        h.public_key = Some(*HostKey::create(f).unwrap().public());
    }
    assert!(c.keyed());
    (c, files)
}

/// Dials `addr` as host `name` with `key`, as a daemon would; returns every byte sent
/// (for a replay) and the acceptor's first sealed message, or the error.
fn dial_as(addr: SocketAddr, key: &HostKey, name: &str) -> (Vec<u8>, std::result::Result<PeerMessage, String>) {
    let (sent, answer) = dial_as_keeping(addr, key, name);
    (sent, answer.map(|(m, _, _)| m))
}

/// As [`dial_as`], keeping the connection and its session to send more.
#[allow(clippy::type_complexity)] // what the handshake gave, as it gave it
fn dial_as_keeping(
    addr: SocketAddr,
    key: &HostKey,
    name: &str,
) -> (Vec<u8>, std::result::Result<(PeerMessage, TcpStream, Sealed), String>) {
    let deadline = Instant::now() + Duration::from_secs(3);
    let stream = TcpStream::connect(addr).unwrap();
    let mut sent = link::preamble(PROTOCOL_VERSION).to_vec();
    let mut hs = link::handshake_state(key, None, true).unwrap();
    let mut msg = vec![0u8; link::MAX_RECORD];
    let n = hs.write_message(&[], &mut msg).unwrap();
    sent.extend_from_slice(&(n as u16).to_be_bytes());
    sent.extend_from_slice(&msg[..n]);
    (&stream).write_all(&sent).unwrap();
    if let Err(e) = link::read_handshake(&mut hs, &stream, deadline, "second message") {
        return (sent, Err(e));
    }
    let hello = PeerMessage::Hello {
        version: PROTOCOL_VERSION,
        host: name.into(),
        boot: 7,
        nodes: vec![],
        nonce: None,
        proof: None,
        host_epoch: String::new(),
        addresses: vec![],
    };
    let n = hs.write_message(&encode(&hello).unwrap(), &mut msg).unwrap();
    sent.extend_from_slice(&(n as u16).to_be_bytes());
    sent.extend_from_slice(&msg[..n]);
    link::write_record(&mut &stream, &msg[..n]).unwrap();
    let sealed = Sealed::new(hs).unwrap();
    let mut opener = sealed.opener();
    let mut frames = FrameReader::new();
    loop {
        if let Some(m) = frames.next_message::<PeerMessage>().unwrap() {
            return (sent, Ok((m, stream, sealed)));
        }
        stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        match frames.fill(&mut opener.on(&mut &stream)) {
            Ok(Fill::Closed) => return (sent, Err("closed".into())),
            Ok(_) => {}
            Err(e) => return (sent, Err(e.to_string())),
        }
    }
}

fn status_of_host(client: &mut Client, host: &str) -> HostStatus {
    client.cluster(Duration::from_secs(1)).unwrap().into_iter().find(|h| h.name == host).unwrap()
}

/// With host keys: daemons talk over sealed links; a stranger's key, an impostor with
/// the right name and a wrong key, and a replayed handshake are refused, and none of them
/// changes what the daemon knows of the real host.
#[test]
fn host_keys_authenticate_links_and_refuse_impostors_and_replays() {
    let dir = scratch("keys");
    fs::create_dir_all(&dir).unwrap();
    let (c, keys) = keyed_cluster(&["a", "b", "c"], &dir);
    let start = |host: &str, k: usize| {
        let o = DaemonOptions {
            cluster: c.clone(),
            host: host.into(),
            dir: dir.join(host),
            key_file: Some(keys[k].clone()),
        };
        Daemon::start(o).unwrap()
    };
    let a = start("a", 0);
    let b = start("b", 1);
    let mut client = Client::connect(&dir.join("a"), Duration::from_secs(2)).unwrap();
    wait_operational(&mut client, "b");
    let before = status_of_host(&mut client, "b");

    // An impostor calling itself b (which is up) with its own key.
    let stranger = HostKey::generate().unwrap();
    let (_, answer) = dial_as(a.address(), &stranger, "b");
    let answer = answer.unwrap();
    assert!(matches!(&answer, PeerMessage::Bye { reason } if reason.contains("not host b's key")), "{answer:?}");
    // One with c's name and a's key (a key lanes.toml lists for another host).
    let a_key = HostKey::load(&keys[0]).unwrap();
    let (_, answer) = dial_as(b.address(), &a_key, "c");
    assert!(matches!(&answer, Ok(PeerMessage::Bye { reason }) if reason.contains("host a's")), "{answer:?}");
    // A host that lanes.toml does not list.
    let (_, answer) = dial_as(a.address(), &stranger, "zz");
    assert!(matches!(&answer, Ok(PeerMessage::Bye { reason }) if reason.contains("not a peer")), "{answer:?}");
    // A plaintext hello.
    let bye = plaintext_hello(a.address(), "b", 9);
    assert!(matches!(&bye, PeerMessage::Bye { reason } if reason.contains("plaintext hello")), "{bye:?}");
    let after = status_of_host(&mut client, "b");
    assert_eq!(after.state, HostState::Operational);
    assert!(after.state_for_ms >= before.state_for_ms, "b's state never changed: {before:?} then {after:?}");

    // c's real key, while c's daemon is down: the test is c, then replays its handshake.
    let c_key = HostKey::load(&keys[2]).unwrap();
    let (sent, answer) = dial_as(a.address(), &c_key, "c");
    assert!(matches!(&answer, Ok(PeerMessage::Hello { host, .. }) if host == "a"), "{answer:?}");
    // It was operational for a moment (the test sends no heartbeats): wait until a has
    // given up on it, then replay what the test sent on a new connection.
    let deadline = Instant::now() + Duration::from_secs(15);
    while status_of_host(&mut client, "c").state != HostState::Lost {
        assert!(Instant::now() < deadline, "the test's c never went lost");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut t = TcpStream::connect(a.address()).unwrap();
    t.write_all(&sent).unwrap(); // preamble, message 1 and the recorded message 3
    t.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = Vec::new();
    let _ = io::Read::read_to_end(&mut t, &mut buf); // a closes it
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(status_of_host(&mut client, "c").state, HostState::Lost, "the replay was let in");
    assert_eq!(status_of_host(&mut client, "b").state, HostState::Operational);

    // A daemon whose key file is not the key lanes.toml lists for its host.
    let o = DaemonOptions { cluster: c.clone(), host: "c".into(), dir: dir.join("c"), key_file: Some(keys[1].clone()) };
    let e = Daemon::start(o).unwrap_err().to_string();
    assert!(e.contains("not the public_key lanes.toml lists for host c"), "{e}");
    drop((a, b));
    let _ = fs::remove_dir_all(&dir);
}

fn wait_operational(client: &mut Client, host: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let hosts = client.cluster(Duration::from_secs(1)).unwrap();
        if hosts.iter().find(|h| h.name == host).unwrap().state == HostState::Operational {
            return;
        }
        assert!(Instant::now() < deadline, "{host} never operational: {hosts:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends one request on a raw socket and reads one reply.
fn raw_call(socket: &Path, req: &Request) -> Reply {
    let mut u = UnixStream::connect(socket).unwrap();
    u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write_message(&mut u, req).unwrap();
    let mut r = FrameReader::new();
    loop {
        if let Some(m) = r.next_message::<Reply>().unwrap() {
            return m;
        }
        assert_ne!(r.fill(&mut u).unwrap(), Fill::Closed, "closed without a reply");
    }
}

fn export_of(fabric: &crate::Fabric, dir: &Path, id: u32, epoch: u64) -> exports::ExportRecord {
    let me = ProcessIdentity::current().unwrap();
    let rec = exports::ExportRecord {
        in_place: false,
        kind: ObjectKind::Segment,
        node: fabric.node_id().get(),
        id,
        owner_pid: me.pid(),
        owner_identity: me.bits(),
        provider: "tcp;ofi_rxm".into(),
        endpoint: "c0ffee00".into(),
        key: 42,
        base: 0x1000,
        len: 8192,
        handle: 1,
        epoch,
        slot_keys: Vec::new(),
    };
    exports::publish(dir, &rec).unwrap();
    rec
}

/// The owner's side and the requester's side of grants, both daemons and the owner in
/// this process: a connect from host b to a segment of node 8 on host a claims a slot the
/// owner sees as node 12 connecting; disconnecting, dropping the client and stopping the
/// requester's daemon release it; refusals name the reason.
/// With slot keys in the record (revocation), a grant carries the key the owner made for
/// the claim of its slot from that slot's generation, and a slot whose key is older
/// than its last claim is not granted: the next one is, or none (not available) while
/// the owner has not renewed it.
#[test]
fn grants_carry_the_key_of_their_slots_claim() {
    use crate::cluster::exports::SlotKey;
    let c = cluster(&["a", "b"]);
    let (da, db) = (scratch("slotkey-a"), scratch("slotkey-b"));
    let _a =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.to_path_buf(), key_file: None })
            .unwrap();
    let _b =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.to_path_buf(), key_file: None })
            .unwrap();
    let t = Duration::from_secs(2);
    let mut cb = Client::connect(&db, t).unwrap();
    wait_operational(&mut cb, "a");
    let owner = crate::Fabric::open_with(crate::FabricConfig::new(da.to_path_buf(), NodeId::new(8).unwrap())).unwrap();
    let (n8, n12) = (NodeId::new(8).unwrap(), NodeId::new(12).unwrap());
    let s = owner.create_segment(0x12, 4096).unwrap();
    s.prepare().unwrap();
    s.set_available().unwrap();
    let mut rec = export_of(&owner, &da, 0x12, 3);
    rec.slot_keys = vec![SlotKey { slot: 0, generation: 0, key: 100 }, SlotKey { slot: 1, generation: 0, key: 101 }];
    exports::publish(&da, &rec).unwrap();

    let g = cb.connect_object(n8, ObjectKind::Segment, 0x12, n12, t).unwrap();
    assert_eq!((g.slot, g.export.key), (0, 100));
    assert!(g.export.slot_keys.is_empty(), "a holder learns its own key only");
    cb.disconnect_object(g.grant, t).unwrap();
    // Slot 0 is free again, but its key was for the claim that is over: slot 1's.
    let deadline = Instant::now() + t;
    let g = loop {
        let g = cb.connect_object(n8, ObjectKind::Segment, 0x12, n12, t).unwrap();
        if g.slot != 0 {
            break g;
        }
        // The release had not reached the owner's daemon yet: the same claim.
        assert!(Instant::now() < deadline, "slot 0 granted again with its old key");
        cb.disconnect_object(g.grant, t).unwrap();
    };
    assert_eq!((g.slot, g.export.key), (1, 101));
    // No slot with a current key: wait (not available), not "too many connections".
    let e = cb.connect_object(n8, ObjectKind::Segment, 0x12, n12, t).unwrap_err();
    assert!(e.is_not_available(), "{e:?}");
    cb.disconnect_object(g.grant, t).unwrap();
}

#[test]
fn grants_claim_and_release_slots_for_remote_peers() {
    use crate::fabric::LocalEvent;
    use crate::{Fabric, FabricConfig, Timeout};
    let c = cluster(&["a", "b"]);
    let (da, db) = (scratch("grant-a"), scratch("grant-b"));
    let a =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.to_path_buf(), key_file: None })
            .unwrap();
    let b =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.to_path_buf(), key_file: None })
            .unwrap();
    let t = Duration::from_secs(2);
    let mut cb = Client::connect(&db, t).unwrap();
    wait_operational(&mut cb, "a");
    let owner = Fabric::open_with(FabricConfig::new(da.to_path_buf(), NodeId::new(8).unwrap())).unwrap();
    let me = std::process::id();
    let (n8, n12) = (NodeId::new(8).unwrap(), NodeId::new(12).unwrap());
    let seg = ObjectKind::Segment;

    // Refusals before the object can be reached.
    let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    let s = owner.create_segment(0x10, 8192).unwrap();
    let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
    assert!(e.is_not_available(), "not available yet: {e:?}");
    s.prepare().unwrap();
    s.set_available().unwrap();
    let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
    assert!(e.is_not_available(), "not exported yet: {e:?}");
    let mut stale = export_of(&owner, &da, 0x10, 1);
    stale.owner_identity ^= 1 << 40; // an earlier owner's record
    exports::publish(&da, &stale).unwrap();
    let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
    assert!(e.is_not_available(), "a stale export: {e:?}");
    assert!(cb.is_usable(), "refusals keep the connection");

    // Granted: the owner sees node 12 connect, as this process (the daemon's identity).
    let rec = export_of(&owner, &da, 0x10, 2);
    let g = cb.connect_object(n8, seg, 0x10, n12, t).unwrap();
    assert_eq!(g.export, rec);
    assert_eq!((g.info.host.as_str(), g.info.size, g.info.owner_pid), ("a", 8192, me));
    assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
    assert_eq!(s.connected_peers(), vec![(12, me)]);
    assert!(da.join("procs").join(format!("12-{me}")).exists(), "the proxy record");
    cb.disconnect_object(g.grant, t).unwrap();
    let ev = s.wait_event(Timeout::After(t)).unwrap();
    assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: false });
    // The release is fire and forget: the record goes just after the slot.
    let deadline = Instant::now() + t;
    while da.join("procs").join(format!("12-{me}")).exists() {
        assert!(Instant::now() < deadline, "no grants, but the proxy record stays");
        std::thread::sleep(Duration::from_millis(5));
    }
    cb.disconnect_object(g.grant, t).unwrap(); // twice: nothing

    // A connection that closes releases its grants, as its holder's death.
    let mut other = Client::connect(&db, t).unwrap();
    let g2 = other.connect_object(n8, seg, 0x10, n12, t).unwrap();
    assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
    cb.disconnect_object(g2.grant, t).unwrap(); // not cb's: ignored
    assert_eq!(s.connected_peers().len(), 1);
    drop(other);
    let ev = s.wait_event(Timeout::After(t)).unwrap();
    assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: true });

    // A node of this host connects without forwarding.
    let mut ca = Client::connect(&da, t).unwrap();
    let g3 = ca.connect_object(n8, seg, 0x10, n8, t).unwrap();
    assert_eq!(g3.export, rec);
    assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 8, pid: me });
    ca.disconnect_object(g3.grant, t).unwrap();
    let ev = s.wait_event(Timeout::After(t)).unwrap();
    assert_eq!(ev, LocalEvent::Disconnected { node: 8, pid: me, died: false });

    // Every slot taken.
    let file = SegmentFile::open(&FabricPaths::new(da.to_path_buf()), kind::SEGMENT, 8, 0x10).unwrap();
    let holder = ProcessIdentity::current().unwrap();
    let mut slots = Vec::new();
    while let Some(i) = file.header().claim_slot(holder, 40, |_, _| false) {
        slots.push(i);
    }
    let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
    assert!(matches!(e, Error::Refused(Refusal::TooManyConnections { node: 8, .. })), "{e:?}");
    for i in slots {
        file.header().release_slot(i, holder);
    }
    while s.wait_event(Timeout::Immediate).is_ok() {}

    // Bad node ids, and a requester claiming to be another host's node.
    for (node, peer_node) in [(7, 12), (8, 0), (8, 8)] {
        let req = Request::Connect { node, kind: seg, id: 0x10, peer_node, timeout_ms: 1000, notify: None };
        let reply = raw_call(b.socket(), &req);
        assert!(matches!(reply, Reply::Connect { result: Err(Refusal::Failed { .. }) }), "{reply:?}");
    }

    // Stopping the requester's daemon releases what its processes held.
    let _g4 = cb.connect_object(n8, seg, 0x10, n12, t).unwrap();
    assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
    b.stop();
    let ev = s.wait_event(Timeout::After(t)).unwrap();
    assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: false });

    // The owner's host unreachable.
    let b =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "b".into(), dir: db.to_path_buf(), key_file: None })
            .unwrap();
    let mut cb = Client::connect(&db, t).unwrap();
    wait_operational(&mut cb, "a");
    let _g5 = cb.connect_object(n8, seg, 0x10, n12, t).unwrap();
    assert_eq!(s.wait_event(Timeout::After(t)).unwrap(), LocalEvent::Connected { node: 12, pid: me });
    a.stop(); // releases the slots it claimed
    let ev = s.wait_event(Timeout::After(t)).unwrap();
    assert_eq!(ev, LocalEvent::Disconnected { node: 12, pid: me, died: false });
    let deadline = Instant::now() + Duration::from_secs(5);
    let e = loop {
        let e = cb.connect_object(n8, seg, 0x10, n12, t).unwrap_err();
        if matches!(e, Error::Refused(Refusal::HostUnreachable { .. })) || Instant::now() > deadline {
            break e;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(matches!(&e, Error::Refused(Refusal::HostUnreachable { host, .. }) if host == "a"), "{e:?}");
    drop((s, owner, b));
    let _ = fs::remove_dir_all(&da);
    let _ = fs::remove_dir_all(&db);
}

#[test]
fn strangers_and_garbage_are_refused_without_harm() {
    let c = cluster(&["a", "b"]);
    let da = scratch("garbage");
    let a =
        Daemon::start(DaemonOptions { cluster: c.clone(), host: "a".into(), dir: da.to_path_buf(), key_file: None })
            .unwrap();
    // Garbage on the TCP port and on the socket: each connection is closed, the daemon lives.
    for junk in [&b"GET / HTTP/1.0\r\n\r\n"[..], &[0xffu8; 64][..]] {
        let mut t = TcpStream::connect(a.address()).unwrap();
        t.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        t.write_all(junk).unwrap();
        let mut buf = Vec::new();
        let _ = io::Read::read_to_end(&mut t, &mut buf); // ends: the daemon closed it
        let mut u = UnixStream::connect(a.socket()).unwrap();
        u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        u.write_all(junk).unwrap();
        let mut buf = Vec::new();
        let _ = io::Read::read_to_end(&mut u, &mut buf);
    }
    // A hello from a host the cluster does not know.
    let bye = plaintext_hello(a.address(), "zz", 1);
    assert!(matches!(&bye, PeerMessage::Bye { reason } if reason.contains("not a peer")), "{bye:?}");
    let mut client = Client::connect(&da, Duration::from_secs(2)).unwrap();
    assert_eq!(client.cluster(Duration::from_secs(1)).unwrap().len(), 2);
    drop(a);
    let _ = fs::remove_dir_all(&da);
}

/// A peer daemon (here the test, with host c's key) that tells of socket halves whose
/// addresses on its side are not its own, or pairs a socket this host does not hold: each
/// message is refused and counted, and nothing else changes (its link stays up).
#[test]
fn a_peer_daemons_forged_socket_messages_are_refused_and_counted() {
    use crate::cluster::proto::WireHalf;
    let dir = scratch("forged-sockets");
    fs::create_dir_all(&dir).unwrap();
    let (c, keys) = keyed_cluster(&["a", "c"], &dir);
    let o = DaemonOptions { cluster: c.clone(), host: "a".into(), dir: dir.join("a"), key_file: Some(keys[0].clone()) };
    let a = Daemon::start(o).unwrap();
    let c_key = HostKey::load(&keys[1]).unwrap();
    let (_, answer) = dial_as_keeping(a.address(), &c_key, "c");
    let (hello, stream, sealed) = answer.unwrap();
    assert!(matches!(&hello, PeerMessage::Hello { host, .. } if host == "a"), "{hello:?}");
    let send = |m: &PeerMessage| (&stream).write_all(&sealed.seal(&encode(m).unwrap()).unwrap()).unwrap();
    let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
    // c (on 127.0.0.1, this machine) claims no address: 203.0.113.7 is not its.
    let half = WireHalf {
        local: sa("203.0.113.7:40000"),
        remote: sa("203.0.113.1:5201"),
        cookie: 1,
        uid: 0,
        generation: 0,
        peer_cookie: 0,
        handles: None,
    };
    send(&PeerMessage::SocketHalf { half: half.clone() });
    send(&PeerMessage::SocketSync { halves: vec![half], more: false });
    send(&PeerMessage::SocketPaired {
        local: sa("203.0.113.7:40000"),
        remote: sa("203.0.113.1:5201"),
        cookie: 1,
        peer_cookie: 2,
        generation: 9,
        handles: None,
        peer_handles: None,
    });
    send(&PeerMessage::Heartbeat);
    let mut client = Client::connect(&dir.join("a"), Duration::from_secs(2)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        let s = client.sockets(Duration::from_secs(1)).unwrap();
        if s.refused.iter().map(|(_, n)| n).sum::<u64>() >= 3 {
            break s;
        }
        assert!(Instant::now() < deadline, "not refused: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.refused, vec![("peer: address not the sender's".to_string(), 3)]);
    assert!(status.halves.is_empty() && status.unmatched.is_empty(), "{status:?}");
    assert_eq!(status_of_host(&mut client, "c").state, HostState::Operational, "the link stays up");
    drop((stream, a));
    let _ = fs::remove_dir_all(&dir);
}
