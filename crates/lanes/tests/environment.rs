//! Who a process is (node id from `LANES_NODE_ID`, the configuration file, or the default)
//! and that the fabric's files are private to the user.
//!
//! Single-host by nature (the process environment and directory permissions): not run per
//! topology.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use lanes::{Error, Fabric};
use support::{ChildIo, Proc, TestDir};

#[test]
fn child_entry() {
    support::child_entry(|role, io| match role {
        "open_env" => {
            open_env(io);
            true
        }
        _ => false,
    });
}

/// Child role: `Fabric::open()` from the environment, reports the outcome, and (if it
/// opened) stays a member of the fabric until the parent says anything or hangs up.
fn open_env(io: &ChildIo) {
    match Fabric::open() {
        Ok(f) => {
            io.send(&format!("OPENED {} {}", f.node_id(), f.dir().display()));
            let _ = io.recv();
        }
        Err(e) => {
            let config_path = match &e {
                Error::Config { path, .. } => path.display().to_string(),
                _ => "-".to_string(),
            };
            io.send(&format!(
                "FAILED {}\t{config_path}\t{}",
                support::variant_name(&e),
                e.to_string().replace('\n', " ")
            ));
        }
    }
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its length.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname: {}", std::io::Error::last_os_error());
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8(buf[..end].to_vec()).expect("utf-8 host name")
}

enum Opened {
    Node(u32, String, Proc),
    Failed { variant: String, config_path: String, display: String },
}

fn open_with_env(envs: &[(&str, &str)]) -> Opened {
    let mut p = Proc::spawn("open_env", "open_env", envs);
    let line = p.line("the outcome of Fabric::open");
    if let Some(rest) = line.strip_prefix("OPENED ") {
        let (node, dir) = rest.split_once(' ').expect("node and dir");
        return Opened::Node(node.parse().expect("node id"), dir.to_string(), p);
    }
    let rest = line.strip_prefix("FAILED ").unwrap_or_else(|| panic!("unexpected line {line:?}"));
    let mut parts = rest.splitn(3, '\t');
    let mut next = || parts.next().unwrap_or_default().to_string();
    let (variant, config_path, display) = (next(), next(), next());
    assert!(p.wait_exit().success(), "the open_env child failed:\n{}", p.output());
    Opened::Failed { variant, config_path, display }
}

fn expect_node(envs: &[(&str, &str)], node: u32, dir: &Path) -> Proc {
    match open_with_env(envs) {
        Opened::Node(n, d, p) => {
            assert_eq!((n, d.as_str()), (node, dir.to_str().expect("utf-8")), "with {envs:?}");
            p
        }
        Opened::Failed { display, .. } => panic!("with {envs:?}: Fabric::open failed: {display}"),
    }
}

fn expect_failure(envs: &[(&str, &str)], variant: &str) -> (String, String) {
    match open_with_env(envs) {
        Opened::Node(n, d, _) => panic!("with {envs:?}: opened as node {n} in {d}, expected {variant}"),
        Opened::Failed { variant: v, config_path, display } => {
            assert_eq!(v, variant, "with {envs:?}: {display}");
            (config_path, display)
        }
    }
}

fn finish(mut p: Proc) {
    p.send("exit");
    assert!(p.wait_exit().success(), "{}", p.output());
}

#[test]
fn node_identity_comes_from_the_environment() {
    let dir = TestDir::new("env");
    let fabric = dir.fabric();
    let fabric_s = fabric.to_str().expect("utf-8");
    let host = hostname();

    // LANES_NODE_ID and LANES_DIR.
    let p = expect_node(&[("LANES_NODE_ID", "12"), ("LANES_DIR", fabric_s)], 12, &fabric);
    let record = dir.record_path(12, p.pid());
    assert!(record.exists(), "{} missing", record.display());
    assert!(dir.node_dir(12).is_dir());
    finish(p);
    assert!(!record.exists(), "the record outlived a clean exit");

    for bad in ["7", "0", "252", "abc", "-4", ""] {
        let (_, display) = expect_failure(&[("LANES_NODE_ID", bad), ("LANES_DIR", fabric_s)], "InvalidNodeId");
        assert!(display.contains("LANES_NODE_ID"), "{display}");
    }

    // The configuration file names this host's node.
    let config = dir.root().join("lanes.toml");
    std::fs::write(
        &config,
        format!("[[node]]\nid = 20\nhost = \"not-{host}\"\n\n[[node]]\nid = 16\nhost = {host:?}\n"),
    )
    .expect("writing the configuration");
    let config_s = config.to_str().expect("utf-8");
    finish(expect_node(&[("LANES_CONFIG", config_s), ("LANES_DIR", fabric_s)], 16, &fabric));
    // LANES_NODE_ID wins over the file.
    finish(expect_node(&[("LANES_CONFIG", config_s), ("LANES_NODE_ID", "24"), ("LANES_DIR", fabric_s)], 24, &fabric));

    // The file may name the fabric directory too.
    let cfg_dir = dir.root().join("from-config");
    let with_dir = dir.root().join("with-dir.toml");
    std::fs::write(
        &with_dir,
        format!("dir = {:?}\n[[node]]\nid = 28\nhost = {host:?}\n", cfg_dir.to_str().expect("utf-8")),
    )
    .expect("writing the configuration");
    finish(expect_node(&[("LANES_CONFIG", with_dir.to_str().expect("utf-8"))], 28, &cfg_dir));
    assert!(cfg_dir.join("nodes").join("28").is_dir());

    // A file that does not list this host leaves the default, node 4.
    let other = dir.root().join("other.toml");
    std::fs::write(&other, format!("[[node]]\nid = 20\nhost = \"not-{host}\"\n")).expect("writing");
    finish(expect_node(&[("LANES_CONFIG", other.to_str().expect("utf-8")), ("LANES_DIR", fabric_s)], 4, &fabric));

    // Several nodes on one host (agreeing on its address): the first is the host's node.
    let twice = dir.root().join("twice.toml");
    std::fs::write(&twice, format!("[[node]]\nid = 8\nhost = {host:?}\n[[node]]\nid = 12\nhost = {host:?}\n"))
        .expect("writing");
    finish(expect_node(&[("LANES_CONFIG", twice.to_str().expect("utf-8")), ("LANES_DIR", fabric_s)], 8, &fabric));
    // LANES_HOST names the host instead of the host name.
    finish(expect_node(
        &[("LANES_CONFIG", config_s), ("LANES_HOST", &format!("not-{host}")), ("LANES_DIR", fabric_s)],
        20,
        &fabric,
    ));

    // Bad configuration files are Config errors that name the file.
    for (name, text) in [
        ("malformed.toml", "[[node]\nid = 16\n".to_string()),
        ("bad-id.toml", format!("[[node]]\nid = 7\nhost = {host:?}\n")),
        (
            "two-addresses.toml",
            format!(
                "[[node]]\nid = 8\nhost = {host:?}\naddress = \"10.0.0.1\"\n\
                 [[node]]\nid = 12\nhost = {host:?}\naddress = \"10.0.0.2\"\n"
            ),
        ),
        ("no-address.toml", format!("[cluster]\n[[node]]\nid = 8\nhost = {host:?}\n")),
        ("unknown-key.toml", "nodes = 3\n".to_string()),
        ("missing.toml", String::new()),
    ] {
        let path = dir.root().join(name);
        if name != "missing.toml" {
            std::fs::write(&path, text).expect("writing");
        }
        let path_s = path.to_str().expect("utf-8");
        let (config_path, display) = expect_failure(&[("LANES_CONFIG", path_s), ("LANES_DIR", fabric_s)], "Config");
        assert_eq!(config_path, path_s, "{display}");
        assert!(display.contains(path_s), "{display}");
    }

    // Neither LANES_NODE_ID nor LANES_CONFIG: node 4 (unless this machine has a default
    // configuration file, which would then decide).
    if Path::new(lanes::config::DEFAULT_CONFIG_PATH).exists() {
        eprintln!("skipping the zero-configuration check: {} exists", lanes::config::DEFAULT_CONFIG_PATH);
    } else {
        finish(expect_node(&[("LANES_DIR", fabric_s)], 4, &fabric));
    }
}

/// A cluster member's idle progress comes from `[cluster] progress`, which
/// `LANES_OFI_PROGRESS` and `LANES_OFI_POLL_US` override; nonsense in either is a Config
/// error naming the variable, not a fabric that silently progresses some other way.
#[cfg(feature = "ofi")]
#[test]
fn idle_progress_comes_from_the_cluster_section_or_the_environment() {
    let dir = TestDir::new("progress");
    let fabric = dir.fabric();
    let fabric_s = fabric.to_str().expect("utf-8");
    let host = hostname();
    let config = dir.root().join("lanes.toml");
    std::fs::write(
        &config,
        format!("[cluster]\nprogress = \"poll\"\npoll_us = 200\n[[node]]\nid = 8\nhost = {host:?}\naddress = \"127.0.0.1\"\n"),
    )
    .expect("writing the configuration");
    let config_s = config.to_str().expect("utf-8");
    let env = |extra: &[(&'static str, &'static str)]| {
        let mut v = vec![("LANES_CONFIG", config_s), ("LANES_DIR", fabric_s)];
        v.extend_from_slice(extra);
        v
    };
    finish(expect_node(&env(&[]), 8, &fabric));
    finish(expect_node(&env(&[("LANES_OFI_PROGRESS", "wake")]), 8, &fabric));
    finish(expect_node(&env(&[("LANES_OFI_POLL_US", "1000")]), 8, &fabric));
    for (extra, says) in [
        (&[("LANES_OFI_PROGRESS", "spin")][..], "LANES_OFI_PROGRESS"),
        (&[("LANES_OFI_POLL_US", "fast")][..], "LANES_OFI_POLL_US"),
        (&[("LANES_OFI_POLL_US", "0")][..], "outside"),
        (&[("LANES_OFI_PROGRESS", "wake"), ("LANES_OFI_POLL_US", "100")][..], "only to"),
    ] {
        let (_, display) = expect_failure(&env(extra), "Config");
        assert!(display.contains(says), "with {extra:?}: {display}");
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).mode() & 0o7777
}

#[test]
fn fabric_files_are_private_to_the_user() {
    let dir = TestDir::new("private");
    let fabric = dir.fabric();
    assert!(!fabric.exists());
    let mut owner = Proc::node(&dir, 8);
    let mut peer = Proc::node(&dir, 12);
    owner.ok("create s 0x90 4096");
    owner.ok("prepare s");
    owner.ok("available s");
    let auto: u32 = owner.ok("create_auto a 100").parse().expect("an id");
    owner.ok("register b 0x91 8192 1");
    owner.ok("create t 0x92 4096");
    owner.ok("remove t 0"); // takes the node directory's lock file
    peer.ok("connect r 8 0x90 imm");

    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for d in [fabric.clone(), fabric.join("procs"), fabric.join("nodes"), dir.node_dir(8), dir.node_dir(12)] {
        assert_eq!(mode(&d), 0o700, "{}", d.display());
        assert_eq!(std::fs::metadata(&d).expect("metadata").uid(), me, "{}", d.display());
    }
    for f in [
        dir.seg_path(8, 0x90),
        dir.seg_path(8, auto),
        dir.seg_path(8, 0x91),
        dir.record_path(8, owner.pid()),
        dir.record_path(12, peer.pid()),
        dir.node_dir(8).join(".lock"),
    ] {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
        assert_eq!(std::fs::metadata(&f).expect("metadata").uid(), me, "{}", f.display());
    }
    peer.exit();
    owner.exit();

    // A fabric directory that already exists and that others may write is tightened.
    let dir2 = TestDir::new("private-existing");
    std::fs::create_dir(dir2.fabric()).expect("mkdir");
    std::fs::set_permissions(dir2.fabric(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let mut node = Proc::node(&dir2, 8);
    node.ok("create s 1 4096");
    assert_eq!(mode(&dir2.fabric()) & 0o022, 0, "mode {:o}", mode(&dir2.fabric()));
    assert_eq!(mode(&dir2.seg_path(8, 1)), 0o600);
    node.exit();
}
