//! The C API the way a user meets it: examples/c/udpstream.c built with plain `cc -O2 -Wall
//! -Wextra -Werror` against include/lanes_udpstream.h and liblanes_udpstream.so (built by
//! `cargo test` beside this test binary, as the library's cdylib), then run: a receiver and
//! a forked sender (two processes) stream a generated signal, checked byte by byte, on
//! every path, with and without the sequence header, and with sequence numbers skipped
//! (the receiver must report exactly that many gaps); receiver and sender started as two
//! separate programs; and `udpstream errors`, bad input through the C API.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lanes_testkit::program::{run_to_end, Finished, Program};
use lanes_testkit::TestDir;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<target>/<profile>`, the directory holding `deps/` (this binary) and the cdylib.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent().and_then(Path::parent).expect("<target>/<profile>/deps").to_path_buf()
}

/// Builds the example as `<dir>/<name>`.
fn build(dir: &TestDir, name: &str) -> PathBuf {
    let lib_dir = profile_dir();
    assert!(
        lib_dir.join("liblanes_udpstream.so").is_file(),
        "{} has no liblanes_udpstream.so: build the crate (cargo test -p lanes-udpstream does)",
        lib_dir.display()
    );
    let out = dir.path(name);
    let mut cmd = Command::new("cc");
    cmd.args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(repo().join("crates/lanes-udpstream/include"))
        .arg(repo().join("examples/c/udpstream.c"))
        .arg("-L")
        .arg(&lib_dir)
        .arg("-llanes_udpstream")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-o")
        .arg(&out);
    let what = format!("{cmd:?}");
    let o = run_to_end(cmd, "cc (run scripts/test.sh to install gcc)", Duration::from_secs(120));
    assert!(o.ok(), "{what} failed: {:?}\n{}", o.status, o.stderr);
    out
}

/// The example, to be run with [`run`] or started as a [`Program`].
fn example(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_remove("LANES_UDPSTREAM_PATH");
    cmd
}

/// Runs `cmd` for at most 60 s.
fn run(cmd: Command) -> Finished {
    run_to_end(cmd, "udpstream", Duration::from_secs(60))
}

/// The `key=value` fields of the line starting `udpstream: ok`.
fn summary(o: &Finished, what: &str) -> Vec<(String, String)> {
    let out = &o.stdout;
    assert!(o.ok(), "{what}: {:?}\nstdout: {out}\nstderr: {}", o.status, o.stderr);
    let line =
        out.lines().find(|l| l.starts_with("udpstream: ok")).unwrap_or_else(|| panic!("{what}: no summary in {out}"));
    line.split_whitespace().filter_map(|f| f.split_once('=').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

fn field<'a>(s: &'a [(String, String)], k: &str) -> &'a str {
    s.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {k} in {s:?}"))
}

#[test]
fn c_example_streams_a_checked_signal_on_every_path() {
    let dir = TestDir::named("udpstream-c", "selftest");
    let bin = build(&dir, "selftest");
    let cases: &[(&[&str], u64, &str, &str)] = &[
        // Both ends use the library on one host: the shared-memory ring, unless forced off.
        (&["--bytes", "4M"], 0, "shm", "shm"),
        (&["--bytes", "4M", "--skip", "7"], 7, "shm", "shm"),
        (&["--bytes", "4M", "--no-header", "--datagram", "8000", "--force", "shm"], 0, "shm", "shm"),
        (&["--bytes", "2M", "--datagram", "60000", "--block", "1M"], 0, "shm", "shm"),
        (&["--bytes", "4M", "--force", "fast"], 0, "gso", "gro"),
        (&["--bytes", "4M", "--force", "fast", "--skip", "7"], 7, "gso", "gro"),
        (&["--bytes", "4M", "--no-header", "--datagram", "8000", "--force", "fast"], 0, "gso", "gro"),
        (&["--bytes", "4M", "--force", "uring", "--skip", "3"], 3, "uring", "uring"),
        (&["--bytes", "2M", "--force", "mmsg", "--skip", "2"], 2, "mmsg", "mmsg"),
        (&["--bytes", "1M", "--force", "plain", "--datagram", "1024"], 0, "plain", "plain"),
        (&["--bytes", "2M", "--datagram", "60000", "--block", "1M", "--force", "fast"], 0, "mmsg", "gro"),
    ];
    for &(args, gaps, send, recv) in cases {
        let mut cmd = example(&bin);
        cmd.arg("selftest").args(args);
        let s = summary(&run(cmd), &format!("selftest {args:?}"));
        assert_eq!(field(&s, "gaps"), gaps.to_string(), "{args:?}");
        assert_eq!(field(&s, "reordered"), "0", "{args:?}");
        // Where the kernel lacks GSO/GRO the library falls back; the fast paths are only
        // expected where the probe finds them (any Linux >= 5.0 on loopback).
        let (sp, rp) = (field(&s, "send_path"), field(&s, "recv_path"));
        // Where io_uring is refused, its path falls back to GSO/GRO (and those to mmsg).
        if send == "gso" || send == "uring" {
            assert!(sp == send || sp == "gso" || sp == "mmsg", "{args:?}: send path {sp}");
        } else {
            assert_eq!(sp, send, "{args:?}");
        }
        if recv == "gro" || recv == "uring" {
            assert!(rp == recv || rp == "gro" || rp == "mmsg", "{args:?}: recv path {rp}");
        } else {
            assert_eq!(rp, recv, "{args:?}");
        }
    }
}

#[test]
fn c_example_bad_input_gives_clear_errors() {
    let dir = TestDir::named("udpstream-c", "errors");
    let bin = build(&dir, "errors");
    let mut cmd = example(&bin);
    cmd.arg("errors");
    let o = run(cmd);
    assert!(o.ok() && o.stdout.contains("udpstream: ok errors"), "{}\n{}", o.stdout, o.stderr);
}

#[test]
fn c_example_as_two_programs() {
    let dir = TestDir::named("udpstream-c", "two-programs");
    let bin = build(&dir, "two-programs");
    // A free port: bind, read it, release (the receiver binds it at once).
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut recv = example(&bin);
    recv.args(["recv", &port.to_string(), "--bytes", "512K", "--block", "64K"]);
    let receiver = Program::spawn(recv, "udpstream recv");
    // Blocks of 64 KiB, 2 ms apart, sent once the receiver is up: a small receive buffer
    // (non-root: net.core.rmem_max) is never overrun.
    std::thread::sleep(Duration::from_millis(300));
    let mut send = example(&bin);
    send.args(["send", "127.0.0.1", &port.to_string(), "--bytes", "512K", "--block", "64K", "--gap-us", "2000"]);
    let o = run(send);
    assert!(o.ok(), "sender: {}", o.stderr);
    let o = receiver.finish(Duration::from_secs(60));
    let s = summary(&o, "recv");
    assert_eq!(field(&s, "bytes"), (512 * 1024).to_string());
    assert_eq!(field(&s, "gaps"), "0");
    // Two programs of one user on one host: the shared-memory ring.
    assert_eq!(field(&s, "recv_path"), "shm");
}
