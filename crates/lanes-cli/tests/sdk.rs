//! The SISCI SDK as a C developer uses it: `lanes sdk install` into a private prefix, the
//! example programs of examples/c built with plain `cc -Wall -Wextra -Werror` against it,
//! run as separate node processes (LANES_NODE_ID, a private LANES_DIR) with their output
//! checked; a program that dlopens libsisci.so; and a program that walks the error paths.
//! Every wait is bounded and every child is killed when a test ends.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lanes_testkit::program::{on_path, run_to_end, Finished, Program};
use lanes_testkit::{free_ports, TestDir};

const LANES: &str = env!("CARGO_BIN_EXE_lanes");
const LIMIT: Duration = Duration::from_secs(120);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// All of a process's output (these programs' reports are short).
fn show(what: &str, out: &Finished) -> String {
    let status = out.status.map_or_else(|| "no status".to_string(), |s| s.to_string());
    format!("{what}: {status}\nstdout:\n{}\nstderr:\n{}", out.stdout, out.stderr)
}

/// An SDK installed into a private prefix, programs built against it, and a private fabric.
struct Sdk {
    dir: TestDir,
}

impl Sdk {
    fn install(name: &str) -> Sdk {
        let dir = TestDir::named("sdk-test", name);
        let mut c = Command::new(LANES);
        c.args(["sdk", "install", "--no-ldconfig", "--prefix"]).arg(dir.0.join("sdk"));
        let out = run_to_end(c, "lanes sdk install", LIMIT);
        assert!(out.ok(), "{}", show("lanes sdk install", &out));
        std::fs::create_dir_all(dir.0.join("bin")).expect("bin dir");
        Sdk { dir }
    }

    fn prefix(&self) -> PathBuf {
        self.dir.0.join("sdk")
    }

    fn fabric(&self) -> PathBuf {
        self.dir.0.join("fabric")
    }

    /// Builds `src` with plain cc, warnings as errors, against the installed SDK.
    fn cc(&self, src: &Path, name: &str, extra: &[&str]) -> PathBuf {
        let p = self.prefix();
        let bin = self.dir.0.join("bin").join(name);
        let mut cc = Command::new("cc");
        cc.args(["-Wall", "-Wextra", "-Werror", "-O2", "-D_REENTRANT", "-pthread"])
            .arg(format!("-I{}", p.join("include").display()))
            .arg(format!("-I{}", p.join("include/dis").display()))
            .arg(src)
            .arg(format!("-L{}", p.join("lib64").display()))
            .arg("-lsisci")
            .arg(format!("-Wl,-rpath,{}", p.join("lib64").display()))
            .args(extra)
            .arg("-o")
            .arg(&bin);
        let out = run_to_end(cc, "cc (scripts/test.sh installs gcc)", LIMIT);
        assert!(out.ok(), "{}", show(&format!("cc {}", src.display()), &out));
        bin
    }

    fn example(&self, name: &str) -> PathBuf {
        self.cc(&repo().join("examples/c").join(format!("{name}.c")), name, &[])
    }

    /// A program of this test suite (tests/sdk/NAME.c).
    fn test_program(&self, name: &str, extra: &[&str]) -> PathBuf {
        self.cc(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk").join(format!("{name}.c")), name, extra)
    }

    fn node(&self, prog: &Path, node: u32, args: &[&str]) -> Command {
        let mut c = Command::new(prog);
        c.args(args)
            .env("LANES_NODE_ID", node.to_string())
            .env("LANES_DIR", self.fabric())
            .env_remove("LANES_CONFIG")
            .env_remove("LANES_SISCI_QUIET")
            .env_remove("LANES_SISCI_DEBUG")
            .env_remove("LD_LIBRARY_PATH");
        c
    }

    fn start(&self, prog: &Path, node: u32, args: &[&str]) -> Program {
        Program::spawn(self.node(prog, node, args), &node_name(prog, node))
    }

    fn run(&self, prog: &Path, node: u32, args: &[&str]) -> Finished {
        self.start(prog, node, args).finish(LIMIT)
    }

    /// [`Sdk::run`] with one more environment variable.
    fn run_with(&self, prog: &Path, node: u32, args: &[&str], (key, value): (&str, &str)) -> Finished {
        let mut c = self.node(prog, node, args);
        c.env(key, value);
        Program::spawn(c, &node_name(prog, node)).finish(LIMIT)
    }

    /// Runs a server on node 8 and a client on node 4; both must succeed.
    fn pair(&self, prog: &Path, server: &[&str], client: &[&str]) -> (String, String) {
        let s = self.start(prog, 8, server);
        let c = self.run(prog, 4, client);
        let s = s.finish(LIMIT);
        assert!(c.ok(), "{}\n{}", show("client", &c), show("server", &s));
        assert!(s.ok(), "{}\n{}", show("server", &s), show("client", &c));
        (s.stdout + &s.stderr, c.stdout)
    }
}

/// `<program> (node <node>)`, what a node process is called in failures.
fn node_name(prog: &Path, node: u32) -> String {
    format!("{} (node {node})", prog.file_name().unwrap_or_default().to_string_lossy())
}

const EXAMPLES: &[&str] = &["pingpong", "scibench", "interrupts", "dataintr", "query", "dma_bench", "reflective"];

/// Numbers of a table row: the whitespace-separated fields that parse as numbers.
fn numbers(line: &str) -> Vec<f64> {
    line.split_whitespace().filter_map(|w| w.parse::<f64>().ok()).collect()
}

/// The row of a table whose first field is `first`.
fn row<'a>(out: &'a str, first: &str) -> Option<&'a str> {
    out.lines().find(|l| l.split_whitespace().next() == Some(first))
}

#[test]
fn install_writes_the_layout_and_uninstall_removes_exactly_it() {
    let dir = TestDir::named("sdk-test", "layout");
    let prefix = dir.0.join("opt/DIS");
    let mut c = Command::new(LANES);
    c.args(["sdk", "install", "--no-ldconfig", "--prefix"]).arg(&prefix);
    let out = run_to_end(c, "lanes sdk install", LIMIT);
    assert!(out.ok(), "{}", show("install", &out));
    for f in [
        "include/sisci_api.h",
        "include/sisci_types.h",
        "include/sisci_error.h",
        "include/dis_types.h",
        "include/dis/dis_types.h",
        "lib64/libsisci.so",
        "lib64/pkgconfig/sisci.pc",
    ] {
        assert!(prefix.join(f).is_file(), "{f} missing");
    }
    let pc = std::fs::read_to_string(prefix.join("lib64/pkgconfig/sisci.pc")).expect("sisci.pc");
    assert!(pc.contains(&format!("prefix={}", prefix.display())), "{pc}");
    assert!(pc.contains("-lsisci") && pc.contains("${includedir}/dis"), "{pc}");
    if on_path("pkg-config") {
        let mut c = Command::new("pkg-config");
        c.args(["--cflags", "--libs", "sisci"]).env("PKG_CONFIG_PATH", prefix.join("lib64/pkgconfig"));
        let out = run_to_end(c, "pkg-config", LIMIT);
        assert!(out.ok(), "{}", show("pkg-config", &out));
        assert!(out.stdout.contains(&format!("-I{}/include/dis", prefix.display())));
    }
    // Something of the user's own under the prefix survives the uninstall.
    std::fs::write(prefix.join("include/mine.h"), "/* mine */\n").expect("write");
    let mut c = Command::new(LANES);
    c.args(["sdk", "uninstall", "--no-ldconfig", "--prefix"]).arg(&prefix);
    let out = run_to_end(c, "lanes sdk uninstall", LIMIT);
    assert!(out.ok(), "{}", show("uninstall", &out));
    assert!(prefix.join("include/mine.h").is_file(), "uninstall removed a file it did not write");
    assert!(!prefix.join("lib64").exists(), "lib64 left behind");
    assert!(!prefix.join("include/dis").exists(), "include/dis left behind");
    std::fs::remove_file(prefix.join("include/mine.h")).expect("rm");
    let mut c = Command::new(LANES);
    c.args(["sdk", "uninstall", "--prefix"]).arg(&prefix);
    let out = run_to_end(c, "lanes sdk uninstall", LIMIT);
    assert!(!out.ok(), "a second uninstall must say there is nothing to remove");
    assert!(out.stderr.contains("no SDK installed"), "{}", show("uninstall", &out));
}

#[test]
fn every_function_is_exported_under_its_name_and_both_vendor_aliases() {
    let sdk = Sdk::install("exports");
    let mut nm = Command::new("nm");
    nm.args(["-D", "--defined-only"]).arg(sdk.prefix().join("lib64/libsisci.so"));
    let out = run_to_end(nm, "nm (binutils, installed with gcc)", LIMIT);
    assert!(out.ok(), "{}", show("nm", &out));
    let symbols = out.stdout;
    let exported: std::collections::HashSet<&str> =
        symbols.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    let header = std::fs::read_to_string(sdk.prefix().join("include/sisci_api.h")).expect("header");
    let mut missing = Vec::new();
    for f in sisci::FUNCTIONS {
        for name in [f.to_string(), format!("_SISCI_PUBLIC_FUNC_ST_{f}"), format!("_SISCI_PUBLIC_FUNC_MT_{f}")] {
            if !exported.contains(name.as_str()) {
                missing.push(name);
            }
        }
        let declared = [' ', '*'].iter().any(|c| header.contains(&format!("{c}{f}(")));
        assert!(declared, "sisci_api.h does not declare {f}");
    }
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // The reference's functions, all of them.
    for f in [
        "SCIInitialize",
        "SCITerminate",
        "SCIOpen",
        "SCIClose",
        "SCIGetErrorString",
        "SCIGetLocalNodeId",
        "SCIProbeNode",
        "SCIQuery",
        "SCIGetNodeIdByAdapterName",
        "SCICreateSegment",
        "SCIPrepareSegment",
        "SCISetSegmentAvailable",
        "SCISetSegmentUnavailable",
        "SCIRemoveSegment",
        "SCIGetLocalSegmentSize",
        "SCIGetLocalSegmentId",
        "SCIWaitForLocalSegmentEvent",
        "SCIRegisterSegmentMemory",
        "SCIAttachPhysicalMemory",
        "SCIAttachLocalSegment",
        "SCIShareSegment",
        "SCIConnectSegment",
        "SCIDisconnectSegment",
        "SCIGetRemoteSegmentSize",
        "SCIGetRemoteSegmentId",
        "SCIGetRemoteSegmentNodeId",
        "SCIWaitForRemoteSegmentEvent",
        "SCIMapRemoteSegment",
        "SCIMapLocalSegment",
        "SCIUnmapSegment",
        "SCIGetMapPointer",
        "SCICreateMapSequence",
        "SCIRemoveSequence",
        "SCIStartSequence",
        "SCICheckSequence",
        "SCIStoreBarrier",
        "SCIFlush",
        "SCIMemCpy",
        "SCIMemWrite",
        "SCICacheSync",
        "SCICreateDMAQueue",
        "SCIRemoveDMAQueue",
        "SCIAbortDMAQueue",
        "SCIDMAQueueState",
        "SCIWaitForDMAQueue",
        "SCIStartDmaTransfer",
        "SCIStartDmaTransferVec",
        "SCIStartDmaTransferMem",
        "SCIRequestDMAChannel",
        "SCIAssignDMAChannel",
        "SCIReturnDMAChannel",
        "SCICreateInterrupt",
        "SCIRemoveInterrupt",
        "SCIWaitForInterrupt",
        "SCIConnectInterrupt",
        "SCIDisconnectInterrupt",
        "SCITriggerInterrupt",
        "SCICreateDataInterrupt",
        "SCIRemoveDataInterrupt",
        "SCIWaitForDataInterrupt",
        "SCIConnectDataInterrupt",
        "SCIDisconnectDataInterrupt",
        "SCITriggerDataInterrupt",
    ] {
        assert!(sisci::FUNCTIONS.contains(&f), "{f} is not implemented");
    }
}

#[test]
fn examples_build_warning_free_with_cc_and_with_their_makefile() {
    let sdk = Sdk::install("build");
    for name in EXAMPLES {
        let bin = sdk.example(name);
        let out = sdk.run(&bin, 4, &["-h"]);
        assert!(out.ok(), "{}", show(&format!("{name} -h"), &out));
        assert!(out.stdout.contains("Usage"), "{name} -h printed no usage");
        let out = sdk.run(&bin, 4, &["-no-such-option"]);
        assert_eq!(out.code(), Some(1), "{}", show(&format!("{name} -no-such-option"), &out));
    }
    if on_path("make") {
        let out_dir = sdk.dir.0.join("make-out");
        std::fs::create_dir_all(&out_dir).expect("dir");
        let mut make = Command::new("make");
        make.arg("-C")
            .arg(repo().join("examples/c"))
            .arg(format!("PREFIX={}", sdk.prefix().display()))
            .arg(format!("OUT={}", out_dir.display()))
            .arg("RPATH=1");
        let out = run_to_end(make, "make", LIMIT);
        assert!(out.ok(), "{}", show("make", &out));
        for name in EXAMPLES {
            assert!(out_dir.join(name).is_file(), "make did not build {name}");
        }
    }
}

#[test]
fn pingpong_measures_round_trips_between_two_node_processes() {
    let sdk = Sdk::install("pingpong");
    let pp = sdk.example("pingpong");
    let (server, client) = sdk.pair(
        &pp,
        &["-server"],
        &["-client", "-rn", "8", "-sizes", "4,64,1K,8K", "-iter", "2000", "-warmup", "200"],
    );
    assert!(server.contains("client node 4 connected"), "{server}");
    assert!(client.contains("node 4 <-> node 8"), "{client}");
    for size in ["4", "64", "1024", "8192"] {
        let r = row(&client, size).unwrap_or_else(|| panic!("no row for size {size}:\n{client}"));
        let n = numbers(r);
        assert_eq!(n.len(), 7, "{r}");
        let (rtt, one_way, min, max) = (n[1], n[2], n[3], n[6]);
        assert!(rtt > 0.0 && (one_way - rtt / 2.0).abs() < 1e-3 * rtt.max(1.0), "{r}");
        assert!(min > 0.0 && min <= one_way && one_way <= max, "{r}");
    }
}

#[test]
fn pingpong_client_notices_a_dead_server() {
    let sdk = Sdk::install("pingpong-dead");
    let pp = sdk.example("pingpong");
    let server = sdk.start(&pp, 8, &["-server"]);
    let client = sdk.start(&pp, 4, &["-client", "-rn", "8", "-sizes", "8", "-iter", "2000000000", "-warmup", "0"]);
    std::thread::sleep(Duration::from_millis(1500));
    server.signal(libc::SIGKILL);
    let out = client.finish(Duration::from_secs(30));
    assert_eq!(out.code(), Some(3), "{}", show("client", &out));
    assert!(out.stderr.contains("gone"), "{}", show("client", &out));
}

#[test]
fn scibench_sweeps_sizes_and_the_server_verifies_the_data() {
    let sdk = Sdk::install("scibench");
    let sb = sdk.example("scibench");
    for extra in [&[][..], &["-pio"][..]] {
        let mut args = vec!["-client", "-rn", "8", "-max", "64K", "-loops", "200"];
        args.extend_from_slice(extra);
        let (server, client) = sdk.pair(&sb, &["-server", "-size", "64K"], &args);
        assert!(server.contains("verified 65536 bytes"), "{server}");
        for size in ["4", "1024", "65536"] {
            let r = row(&client, size).unwrap_or_else(|| panic!("no row for {size}:\n{client}"));
            let n = numbers(r);
            assert!(n.len() == 4 && n[2] > 0.0 && n[3] > 0.0, "{r}");
        }
    }
}

#[test]
fn interrupts_ping_pong_with_waits_and_with_callbacks() {
    let sdk = Sdk::install("interrupts");
    let it = sdk.example("interrupts");
    for server_mode in [&[][..], &["-callback"][..]] {
        let mut args = vec!["-server", "-rn", "4"];
        args.extend_from_slice(server_mode);
        let (server, client) = sdk.pair(&it, &args, &["-client", "-rn", "8", "-iter", "500"]);
        assert!(server.contains("answered 500 interrupts"), "{server}");
        let line = client.lines().find(|l| l.starts_with("interrupt latency")).expect(&client);
        assert!(line.contains("avg") && numbers(&line.replace(',', " ")).len() >= 3, "{line}");
    }
}

#[test]
fn data_interrupts_ping_pong_and_every_message_arrives_intact() {
    let sdk = Sdk::install("dataintr");
    let di = sdk.example("dataintr");
    for server_mode in [&[][..], &["-callback"][..]] {
        let mut args = vec!["-server", "-rn", "4"];
        args.extend_from_slice(server_mode);
        let (server, client) = sdk.pair(&di, &args, &["-client", "-rn", "8", "-iter", "200", "-sizes", "8,100,4096"]);
        assert!(server.contains("echoed 600 messages"), "{server}");
        for size in ["8", "100", "4096"] {
            let r = row(&client, size).unwrap_or_else(|| panic!("no row for {size}:\n{client}"));
            assert_eq!(numbers(r).len(), 5, "{r}");
        }
    }
}

#[test]
fn query_reports_the_node_the_adapter_and_probes() {
    let sdk = Sdk::install("query");
    let q = sdk.example("query");
    let out = sdk.run(&q, 12, &["-probe", "12,16", "-host", "localhost"]);
    let s = &out.stdout;
    assert_eq!(out.code(), Some(4), "node 16 is absent: {}", show("query", &out));
    assert!(s.contains("local node id (adapter 0): 12"), "{s}");
    assert!(s.contains("node id                      12"), "{s}");
    assert!(s.contains("probe node 12: reachable"), "{s}");
    assert!(s.contains("probe node 16: not reachable"), "{s}");
    assert!(s.contains("host localhost: node 12"), "{s}");
    assert!(s.contains("adapter    available"), "{s}");
    assert!(s.contains("DMA MTU"), "{s}");
}

#[test]
fn dma_bench_writes_reads_vectors_and_memory() {
    let sdk = Sdk::install("dma");
    let db = sdk.example("dma_bench");
    for extra in [&[][..], &["-vec", "8", "-callback"][..], &["-read"][..], &["-mem", "-read", "-vec", "4"][..]] {
        let mut args = vec!["-client", "-rn", "8", "-max", "64K", "-loops", "20"];
        args.extend_from_slice(extra);
        let (server, client) = sdk.pair(&db, &["-server", "-size", "1M"], &args);
        assert!(server.contains("verified 1048576 bytes written by DMA"), "{extra:?}: {server}");
        assert!(row(&client, "64").is_some_and(|r| numbers(r).len() == 4), "{extra:?}: {client}");
        if extra.contains(&"-read") {
            assert!(client.contains("read by DMA"), "{extra:?}: {client}");
        }
    }
}

#[test]
fn a_program_that_dlopens_libsisci_resolves_the_vendor_names() {
    let sdk = Sdk::install("dlopen");
    let prog = sdk.test_program("dlopen", &["-ldl"]);
    let lib = sdk.prefix().join("lib64/libsisci.so");
    let out = sdk.run(&prog, 4, &[lib.to_str().expect("utf-8 path")]);
    assert!(out.ok(), "{}", show("dlopen", &out));
    assert!(out.stdout.contains("ok: opened through _SISCI_PUBLIC_FUNC_ST_SCIOpen as node 4"));
}

#[test]
fn error_paths_return_the_documented_codes_and_nothing_crashes() {
    let sdk = Sdk::install("errors");
    let prog = sdk.test_program("errors", &[]);
    let out = sdk.run(&prog, 4, &[]);
    let s = &out.stdout;
    let failed: Vec<&str> = s.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(out.ok() && failed.is_empty(), "{failed:#?}\n{}", show("errors", &out));
    assert!(s.lines().filter(|l| l.starts_with("ok ")).count() > 150, "{s}");
    assert!(s.contains("0 failures"), "{s}");
}

#[test]
fn library_threads_leave_the_programs_signals_to_it() {
    let sdk = Sdk::install("signals");
    let prog = sdk.test_program("signal_threads", &[]);
    let out = sdk.run(&prog, 4, &[]);
    assert_all_ok("signal_threads", &out);
    assert!(out.stdout.contains("ok thread lanes-"), "{}", show("signal_threads", &out));
}

/// The `ok`/`FAIL` lines of a test program: all passed and it said so.
fn assert_all_ok(what: &str, out: &Finished) {
    let s = &out.stdout;
    let failed: Vec<&str> = s.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(out.ok() && failed.is_empty() && s.contains("0 failures"), "{failed:#?}\n{}", show(what, out));
}

/// The line after `prefix` in `out`.
fn line_after<'a>(out: &'a str, prefix: &str) -> Option<&'a str> {
    out.lines().find_map(|l| l.strip_prefix(prefix))
}

/// With RLIMIT_NOFILE lowered, creating segments until one fails gives SCI_ERR_NOSPC (out
/// of resources), not SCI_ERR_SYSTEM; SCIGetErrorString names the resource and stderr has
/// the one report; with the limit raised again everything is removed and closed cleanly,
/// leaving no object file behind (tests/sdk/fdlimit.c).
#[test]
fn creating_past_the_descriptor_limit_is_out_of_resources() {
    let sdk = Sdk::install("fdlimit");
    let prog = sdk.test_program("fdlimit", &[]);
    let out = sdk.run(&prog, 4, &[]);
    assert_all_ok("fdlimit", &out);
    let stdout = &out.stdout;
    let message = line_after(stdout, "message: ").unwrap_or_else(|| panic!("{}", show("fdlimit", &out)));
    assert!(message.starts_with("Out of resources") && message.contains("Too many open files"), "{message}");
    let stderr = &out.stderr;
    let reports: Vec<&str> = stderr.lines().collect();
    assert_eq!(reports.len(), 1, "one report: {stderr}");
    assert!(
        reports[0].starts_with("libsisci (lanes): SCICreateSegment: ")
            && reports[0].contains("Too many open files")
            && reports[0].ends_with("(SCI_ERR_NOSPC)"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(sdk.fabric().join("nodes/4"))
        .expect("node directory")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("seg-"))
        .collect();
    assert!(left.is_empty(), "object files left behind: {left:?}");
}

/// Makes `path` a FIFO.
fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("path without NUL");
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(r, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

/// A segment's object file replaced by garbage, then by a FIFO (which must not block the
/// connection): SCIConnectSegment fails with SCI_ERR_SYSTEM, nothing crashes, the library
/// writes one line on stderr naming the function, the file and the cause, and
/// SCIGetErrorString for the code gives the same cause (tests/sdk/corrupt.c).
#[test]
fn a_corrupt_or_hostile_object_file_is_reported_with_its_path_and_cause() {
    let sdk = Sdk::install("corrupt");
    let prog = sdk.test_program("corrupt", &[]);
    let file = sdk.fabric().join("nodes/8/seg-00000005");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("node directory");
    let path = file.display().to_string();
    for (setup, cause) in [("garbage", "bad magic 0xabababababababab"), ("fifo", "is a FIFO, not a regular file")] {
        let _ = std::fs::remove_file(&file);
        match setup {
            "garbage" => std::fs::write(&file, vec![0xAB_u8; 8192]).expect("write garbage"),
            _ => mkfifo(&file),
        }
        let out = sdk.start(&prog, 4, &["8", "5"]).finish(Duration::from_secs(30));
        assert_all_ok(setup, &out);
        let stdout = &out.stdout;
        let message = line_after(stdout, "message: ").unwrap_or_else(|| panic!("{}", show(setup, &out)));
        assert!(
            message.starts_with("System error: ") && message.contains(&path) && message.contains(cause),
            "{message}"
        );
        let stderr = &out.stderr;
        let reports: Vec<&str> = stderr.lines().collect();
        assert_eq!(reports.len(), 1, "{setup}: one report: {stderr}");
        let report = reports[0];
        assert!(report.starts_with("libsisci (lanes): SCIConnectSegment: "), "{report}");
        assert!(report.contains(&path) && report.contains(cause) && report.ends_with("(SCI_ERR_SYSTEM)"), "{report}");
        // The report and the message give the same cause.
        let detail = message.strip_prefix("System error: ").expect("prefix");
        assert!(report.contains(detail), "{report}\n{message}");
    }
}

/// LANES_SISCI_QUIET=1 silences the report on stderr; SCIGetErrorString still gives the
/// cause. LANES_SISCI_DEBUG=1 reports every failed call, the bad parameter too.
#[test]
fn lanes_sisci_quiet_silences_the_report_and_debug_reports_every_failure() {
    let sdk = Sdk::install("quiet");
    let prog = sdk.test_program("corrupt", &[]);
    let file = sdk.fabric().join("nodes/8/seg-00000005");
    std::fs::create_dir_all(file.parent().expect("parent")).expect("node directory");
    std::fs::write(&file, vec![0xAB_u8; 8192]).expect("write garbage");
    let quiet = sdk.run_with(&prog, 4, &["8", "5"], ("LANES_SISCI_QUIET", "1"));
    assert_all_ok("quiet", &quiet);
    assert!(quiet.stderr.is_empty(), "{}", show("quiet", &quiet));
    let message = line_after(&quiet.stdout, "message: ").map(str::to_string);
    assert!(message.is_some_and(|m| m.contains("bad magic")), "{}", show("quiet", &quiet));

    let debug = sdk.run_with(&prog, 4, &["8", "5"], ("LANES_SISCI_DEBUG", "1"));
    assert_all_ok("debug", &debug);
    let stderr = &debug.stderr;
    let reports: Vec<&str> = stderr.lines().collect();
    assert_eq!(reports.len(), 2, "{stderr}");
    assert!(reports[0].contains("bad magic") && reports[0].ends_with("(SCI_ERR_SYSTEM)"), "{stderr}");
    assert!(reports[1].starts_with("libsisci (lanes): SCIConnectSegment: "), "{stderr}");
    assert!(reports[1].ends_with("(SCI_ERR_ILLEGAL_PARAMETER)"), "{stderr}");
}

#[test]
fn reflective_writer_measures_round_trips_until_both_receivers_acknowledged() {
    let sdk = Sdk::install("reflective");
    let rf = sdk.example("reflective");
    let server = sdk.start(
        &rf,
        8,
        &["-server", "-group", "0x5246", "-size", "2", "-iter", "2000", "-warmup", "200", "-timeout", "60"],
    );
    let clients: Vec<Program> =
        [4, 12].iter().map(|&n| sdk.start(&rf, n, &["-client", "-group", "0x5246", "-timeout", "60"])).collect();
    let s = server.finish(LIMIT);
    let c: Vec<Finished> = clients.into_iter().map(|c| c.finish(LIMIT)).collect();
    let all = format!("{}\n{}\n{}", show("server", &s), show("client 4", &c[0]), show("client 12", &c[1]));
    assert!(s.ok() && c.iter().all(|c| c.ok()), "{all}");
    let out = &s.stdout;
    let head = out.lines().next().unwrap_or("");
    assert!(head.contains("group 21062, writer node 8, 2 receivers (nodes"), "{all}");
    assert!(head.contains(" 4") && head.contains(" 12") && head.contains("2000 rounds after 200 warm-up"), "{all}");
    let stats = |prefix: &str| -> Vec<f64> {
        let line = out.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} line: {all}"));
        let n = numbers(&line[prefix.len()..].replace(',', " "));
        assert_eq!(n.len(), 4, "avg, min, median, max: {line}");
        let (avg, min, med, max) = (n[0], n[1], n[2], n[3]);
        assert!(min > 0.0 && min <= med && med <= max && min <= avg && avg <= max, "{line}");
        n
    };
    let rtt = stats("round trip (all 2 acknowledged):");
    let one_way = stats("one-way latency (round trip / 2):");
    for (r, o) in rtt.iter().zip(&one_way) {
        assert!((o - r / 2.0).abs() <= 0.002 + 1e-6 * r, "one-way is half the round trip: {rtt:?} {one_way:?}");
    }
    assert!(out.contains("bytes written to the group by one SCI_FLAG_BROADCAST transfer"), "{all}");
    assert!(out.contains("verified by 2 receivers"), "{all}");
    for (node, c) in [(4, &c[0]), (12, &c[1])] {
        let o = &c.stdout;
        assert!(o.contains(&format!("node {node}, receiver ")), "{all}");
        assert!(o.contains("of group 21062: acknowledged 2200 rounds; DMA payload of 57344 bytes verified"), "{all}");
    }
}

#[test]
fn reflective_receivers_hear_that_their_writer_died() {
    let sdk = Sdk::install("reflective-dead");
    let rf = sdk.example("reflective");
    let mut server = sdk.start(&rf, 8, &["-server", "-group", "77", "-size", "2", "-iter", "10000000", "-warmup", "0"]);
    let clients: Vec<Program> =
        [4, 12].iter().map(|&n| sdk.start(&rf, n, &["-client", "-group", "77", "-timeout", "30"])).collect();
    let joined = server.stderr_line(Duration::from_secs(60), |l| l.contains("receiver 2: node")).is_some();
    assert!(joined, "the receivers did not join: {}", server.stderr_so_far());
    std::thread::sleep(Duration::from_millis(300));
    server.signal(libc::SIGKILL);
    for c in clients {
        let out = c.finish(Duration::from_secs(60));
        assert_eq!(out.code(), Some(3), "{}", show("client", &out));
        assert!(out.stderr.contains("group 77 is gone (SCI_CB_LOST)"), "{}", show("client", &out));
    }
}

#[test]
fn reflective_memory_calls_and_their_error_paths() {
    let sdk = Sdk::install("reflective-errors");
    let prog = sdk.test_program("reflective", &[]);
    let out = sdk.run(&prog, 4, &[]);
    let s = &out.stdout;
    let failed: Vec<&str> = s.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(out.ok() && failed.is_empty(), "{failed:#?}\n{}", show("reflective", &out));
    assert!(s.lines().filter(|l| l.starts_with("ok ")).count() > 80, "{s}");
    for check in [
        "ok a fifth group is refused: SCI_ERR_NOSPC",
        "ok node 252 without SCI_FLAG_BROADCAST: SCI_ERR_ILLEGAL_NODEID",
        "ok SCI_FLAG_BROADCAST with a node id: SCI_ERR_ILLEGAL_NODEID",
        "ok a second group with the same id",
        "ok SCIStartDmaTransfer(SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST)",
        "ok the group's loss is SCI_CB_LOST",
    ] {
        assert!(s.lines().any(|l| l == check), "missing {check:?}:\n{s}");
    }
    assert!(s.contains("0 failures"), "{s}");
}

// ---------------------------------------------------------------------------------------
// The same C programs across two hosts (loopback; the ofi transport)
// ---------------------------------------------------------------------------------------

/// Two hosts of a cluster on 127.0.0.1: a (node 8) and b (node 4), each with its fabric
/// directory and a `lanes daemon`, for the SDK's programs to run on as unchanged.
struct TwoHosts {
    dir: PathBuf,
    _daemons: Vec<Program>,
}

impl TwoHosts {
    const HOSTS: [(&'static str, u32); 2] = [("a", 8), ("b", 4)];

    fn start(sdk: &Sdk) -> TwoHosts {
        let dir = sdk.dir.0.join("cluster");
        let mut config =
            "[cluster]\nprovider = \"tcp;ofi_rxm\"\nheartbeat_ms = 50\nsuspect_after_ms = 1000\n".to_string();
        for ((h, node), port) in Self::HOSTS.into_iter().zip(free_ports(Self::HOSTS.len())) {
            config += &format!("[[node]]\nid = {node}\nhost = \"{h}\"\naddress = \"127.0.0.1:{port}\"\n");
            std::fs::create_dir_all(dir.join(h)).expect("fabric dir");
        }
        std::fs::write(dir.join("lanes.toml"), config).expect("lanes.toml");
        let mut hosts = TwoHosts { dir, _daemons: Vec::new() };
        for (h, _) in Self::HOSTS {
            let mut daemon = Command::new(LANES);
            hosts.on(daemon.arg("daemon"), h);
            hosts._daemons.push(Program::spawn(daemon, &format!("lanes daemon ({h})")));
        }
        for (h, other) in [("a", "b"), ("b", "a")] {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let mut status = Command::new(LANES);
                hosts.on(status.arg("status"), h);
                let out = run_to_end(status, "lanes status", Duration::from_secs(20));
                let t = &out.stdout;
                if t.lines().any(|l| l.trim_start().starts_with(other) && l.contains("operational")) {
                    break;
                }
                assert!(Instant::now() < deadline, "host {h} never saw {other} operational:\n{t}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        hosts
    }

    /// `c` as a process of host `h`.
    fn on<'c>(&self, c: &'c mut Command, h: &str) -> &'c mut Command {
        c.env("LANES_CONFIG", self.dir.join("lanes.toml"))
            .env("LANES_HOST", h)
            .env("LANES_DIR", self.dir.join(h))
            .env_remove("LD_LIBRARY_PATH")
    }

    /// Runs `prog` as the server on node 8 (host a) and as the client on node 4 (host b);
    /// both must succeed.
    fn pair(&self, prog: &Path, server: &[&str], client: &[&str]) -> (String, String) {
        let spawn = |h: &str, node: u32, args: &[&str]| {
            let mut c = Command::new(prog);
            self.on(c.args(args).env("LANES_NODE_ID", node.to_string()), h);
            Program::spawn(c, &node_name(prog, node))
        };
        let s = spawn("a", 8, server);
        let c = spawn("b", 4, client).finish(LIMIT);
        let s = s.finish(LIMIT);
        assert!(c.ok(), "{}\n{}", show("client", &c), show("server", &s));
        assert!(s.ok(), "{}\n{}", show("server", &s), show("client", &c));
        (s.stdout + &s.stderr, c.stdout)
    }
}

/// Whether this build has no ofi transport (then a test across hosts is skipped, never in
/// CI, which builds with it).
fn skipped_without_ofi() -> bool {
    if lanes::OFI_TRANSPORT {
        return false;
    }
    assert!(std::env::var_os("CI").is_none(), "CI builds with --features lanes/ofi (scripts/test.sh)");
    eprintln!("skipping: this build has no ofi transport");
    true
}

/// The example programs, built once against the SDK, run unchanged with their two nodes on
/// two hosts: segments mapped and written (pingpong, scibench with PIO and DMA), interrupts
/// and data interrupts, and a reflective group (plain stores and DMA), across the ofi
/// transport, with the same checks as on one host.
#[test]
fn examples_run_unchanged_with_their_nodes_on_two_hosts() {
    if skipped_without_ofi() {
        return;
    }
    let sdk = Sdk::install("hosts");
    let hosts = TwoHosts::start(&sdk);

    let pp = sdk.example("pingpong");
    let (server, client) =
        hosts.pair(&pp, &["-server"], &["-client", "-rn", "8", "-sizes", "4,1K", "-iter", "300", "-warmup", "30"]);
    assert!(server.contains("client node 4 connected"), "{server}");
    for size in ["4", "1024"] {
        let r = row(&client, size).unwrap_or_else(|| panic!("no row for size {size}:\n{client}"));
        assert_eq!(numbers(r).len(), 7, "{r}");
    }

    let sb = sdk.example("scibench");
    for extra in [&[][..], &["-pio"][..]] {
        let mut args = vec!["-client", "-rn", "8", "-max", "64K", "-loops", "50"];
        args.extend_from_slice(extra);
        let (server, client) = hosts.pair(&sb, &["-server", "-size", "64K"], &args);
        assert!(server.contains("verified 65536 bytes"), "{server}");
        assert!(row(&client, "65536").is_some(), "{client}");
    }

    let it = sdk.example("interrupts");
    let (server, _) = hosts.pair(&it, &["-server", "-rn", "4"], &["-client", "-rn", "8", "-iter", "200"]);
    assert!(server.contains("answered 200 interrupts"), "{server}");

    let di = sdk.example("dataintr");
    let (server, client) =
        hosts.pair(&di, &["-server", "-rn", "4"], &["-client", "-rn", "8", "-iter", "100", "-sizes", "8,4096"]);
    assert!(server.contains("echoed 200 messages"), "{server}");
    assert!(row(&client, "4096").is_some(), "{client}");

    // A reflective group of host a with a receiver on host b: rounds of plain stores
    // through the multicast maps, then a payload by DMA through the writer's own
    // membership, which the receiver checks byte by byte.
    let rf = sdk.example("reflective");
    let (server, client) = hosts.pair(
        &rf,
        &["-server", "-group", "0x5247", "-size", "1", "-iter", "300", "-warmup", "30", "-timeout", "60"],
        &["-client", "-group", "0x5247", "-timeout", "60"],
    );
    println!("{server}");
    assert!(server.contains("group 21063, writer node 8, 1 receiver (nodes 4), 300 rounds"), "{server}");
    assert!(server.contains("written to the group by one SCI_FLAG_BROADCAST transfer"), "{server}");
    assert!(server.contains("verified by 1 receiver"), "{server}");
    assert!(
        client.contains("of group 21063: acknowledged 330 rounds; DMA payload of 57344 bytes verified"),
        "{client}"
    );
}

/// Plain stores through `SCIGetMapPointer` of a reflective group's multicast maps reach the
/// member on the other host, flushed (`SCIFlush`) or not, through a map of the whole group
/// and of part of it, and every byte of a 4 KiB block arrives (tests/sdk/group_stores.c).
#[test]
fn stores_through_a_groups_map_pointer_reach_the_other_host() {
    if skipped_without_ofi() {
        return;
    }
    let sdk = Sdk::install("group-stores");
    let hosts = TwoHosts::start(&sdk);
    let prog = sdk.test_program("group_stores", &[]);
    let (creator, member) = hosts.pair(&prog, &["-create"], &["-join"]);
    for step in ["ok node 4 joined", "ok the member's store at 64 arrived", "ok the member verified the block"] {
        assert!(creator.lines().any(|l| l == step), "missing {step:?}:\n{creator}");
    }
    for step in [
        "ok the creator's store at 0 arrived",
        "ok the creator's block arrived",
        "ok every byte of the block",
        "ok the creator's unflushed store arrived",
    ] {
        assert!(member.lines().any(|l| l == step), "missing {step:?}:\n{member}");
    }
}

// ---------------------------------------------------------------------------------------
// Issue 28: the vendor's behaviour (reflective memory, teardown, flags, DMA vectors, data
// interrupts), each with the call sequence of programs written for the vendor's library
// ---------------------------------------------------------------------------------------

/// Waits for a child and asserts its `ok`/`FAIL` lines all passed (with the others' output
/// for context on failure).
fn all_ok(what: &str, child: Program, context: &str) -> String {
    let out = child.finish(LIMIT);
    let s = &out.stdout;
    let failed: Vec<&str> = s.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(out.ok() && failed.is_empty() && s.contains("0 failures"), "{failed:#?}\n{}\n{context}", show(what, &out));
    out.stdout
}

/// Item 1: three receivers each create the broadcast segment with the same id (nodes 4, 8,
/// 12; one of them with SCI_FLAG_DMA_GLOBAL too), a writer on node 16 connects to node
/// DIS_BROADCAST_NODEID_GROUP_ALL and maps the connection without a flag, stores a word and
/// a 4 KiB block; every receiver sees every byte through its unflagged local map, then
/// removes its segment while the writer is still connected (tests/sdk/vendor_reflective.c).
#[test]
fn reflective_memory_as_the_vendor_sets_it_up_every_receiver_creates_the_group() {
    let sdk = Sdk::install("vendor-reflective");
    let prog = sdk.test_program("vendor_reflective", &[]);
    let dir = sdk.dir.0.join("flags");
    std::fs::create_dir_all(&dir).expect("dir");
    let d = dir.to_str().expect("utf-8");
    let mut receivers: Vec<Program> = [(1, 4), (2, 8), (3, 12)]
        .iter()
        .map(|&(n, node)| {
            let ns = n.to_string();
            let mut args = vec!["receiver", ns.as_str(), d];
            if n == 3 {
                args.push("dmaglobal");
            }
            sdk.start(&prog, node, &args)
        })
        .collect();
    for (n, r) in receivers.iter_mut().enumerate() {
        let ready = format!("receiver {} ready", n + 1);
        let ready = r.stdout_line(Duration::from_secs(60), |l| l.contains(&ready)).is_some();
        assert!(ready, "receiver {} never got ready:\n{}", n + 1, r.stdout_so_far());
    }
    let writer = sdk.start(&prog, 16, &["writer", "3", d]);
    let w = all_ok("writer", writer, "");
    for (n, r) in receivers.into_iter().enumerate() {
        let out = r.finish(LIMIT);
        let s = &out.stdout;
        let failed: Vec<&str> = s.lines().filter(|l| l.starts_with("FAIL")).collect();
        assert!(
            out.ok() && failed.is_empty() && s.contains("0 failures"),
            "receiver {}: {failed:#?}\n{s}\n{}\nwriter:\n{w}",
            n + 1,
            show("receiver", &out)
        );
        for step in ["ok every byte of the block", "ok SCIRemoveSegment while the writer is connected"] {
            assert!(s.lines().any(|l| l == step), "receiver {}: missing {step:?}:\n{s}", n + 1);
        }
    }
    for step in [
        "ok SCIMapRemoteSegment without a flag",
        "ok stores through the unflagged map of the group",
        "ok every receiver removed its segment",
        "ok a store after the receivers left",
    ] {
        assert!(w.lines().any(|l| l == step), "writer: missing {step:?}:\n{w}");
    }
}

/// Item 2, the ping-pong client's teardown (kritjo/sisci-perf): the owner writes a stop word
/// into its own segment and removes the segment at once, with no flags, while the peer is
/// still connected; the peer disconnects 50 ms after it sees the word. The removal waits for
/// it (within its grace) and succeeds, where it answered SCI_ERR_BUSY and the program exited
/// in about one run of three (tests/sdk/teardown.c, stopper and stopped).
#[test]
fn removal_right_after_telling_the_peer_to_stop_succeeds() {
    let sdk = Sdk::install("teardown-stop");
    let prog = sdk.test_program("teardown", &[]);
    let dir = sdk.dir.0.join("stop");
    std::fs::create_dir_all(&dir).expect("dir");
    let d = dir.to_str().expect("utf-8");
    let owner = sdk.start(&prog, 8, &["stopper", d]);
    let peer = sdk.start(&prog, 4, &["stopped", "8", d]);
    let o = all_ok("owner", owner, "");
    all_ok("peer", peer, &o);
    assert!(o.lines().any(|l| l == "ok SCIRemoveSegment right after telling the peer to stop"), "{o}");
}

/// Item 2: the owner's SCIRemoveSegment is SCI_ERR_BUSY while a peer is connected (the
/// vendor's "The segment is currently in use"), SCIClose is busy while it exists; after
/// SCISetSegmentUnavailable(SCI_FLAG_NOTIFY | SCI_FLAG_FORCE_DISCONNECT) the removal
/// succeeds; the peer hears SCI_CB_NOT_OPERATIONAL then SCI_CB_DISCONNECT, its sequence
/// fails, reconnecting finds no segment, and its own teardown is busy step by step until done
/// in order (tests/sdk/teardown.c).
#[test]
fn removal_with_a_peer_connected_is_busy_until_the_peer_is_forced_off() {
    let sdk = Sdk::install("teardown");
    let prog = sdk.test_program("teardown", &[]);
    let dir = sdk.dir.0.join("flags");
    std::fs::create_dir_all(&dir).expect("dir");
    let d = dir.to_str().expect("utf-8");
    let owner = sdk.start(&prog, 8, &["owner", d]);
    let peer = sdk.start(&prog, 4, &["peer", "8", d]);
    let p = all_ok("peer", peer, "");
    let o = all_ok("owner", owner, &p);
    for step in [
        "ok SCIRemoveSegment while a peer is connected",
        "ok SCISetSegmentUnavailable(SCI_FLAG_NOTIFY | SCI_FLAG_FORCE_DISCONNECT)",
        "ok SCIRemoveSegment after SCI_FLAG_FORCE_DISCONNECT",
    ] {
        assert!(o.lines().any(|l| l == step), "owner: missing {step:?}:\n{o}");
    }
    for step in [
        "ok the forced disconnection is SCI_CB_DISCONNECT for the peer",
        "ok the peer's sequence fails",
        "ok connecting again finds no segment",
        "ok SCIDisconnectSegment of the removed segment",
    ] {
        assert!(p.lines().any(|l| l == step), "peer: missing {step:?}:\n{p}");
    }
}

/// Items 3 to 5: the vendor's flags accepted (SCI_FLAG_DMA_GLOBAL at creation, with and
/// without SCI_FLAG_BROADCAST; SCI_FLAG_LOCK_USER_MEM; SCI_FLAG_NOTIFY), a DMA vector is one
/// queue entry however long, and a full data interrupt queue is SCI_ERR_NOSPC at once while
/// a callback passed without SCI_FLAG_USE_CALLBACK is never called (tests/sdk/vendor_calls.c).
#[test]
fn vendor_flags_dma_vectors_and_full_data_interrupt_queues() {
    let sdk = Sdk::install("vendor-calls");
    let prog = sdk.test_program("vendor_calls", &[]);
    let out = sdk.run(&prog, 4, &[]);
    assert_all_ok("vendor_calls", &out);
    let s = &out.stdout;
    for step in [
        "ok SCICreateSegment(SCI_FLAG_DMA_GLOBAL | SCI_FLAG_BROADCAST)",
        "ok SCIRegisterSegmentMemory(SCI_FLAG_LOCK_USER_MEM)",
        "ok an 8-element vector on a queue of 1 entries",
        "ok an 8-element vector on a queue of 4 entries",
        "ok a vector longer than DIS_DMA_MAX_VECLEN",
        "ok SCITriggerDataInterrupt into a full queue",
        "ok fails at once, without waiting for room",
        "ok the callback passed without SCI_FLAG_USE_CALLBACK was not called",
    ] {
        assert!(s.lines().any(|l| l == step), "missing {step:?}:\n{s}");
    }
}

/// Item 1 across hosts: a receiver on each of two hosts creates the broadcast segment with
/// the same id (one creates the group, the other joins it over the ofi transport), and a
/// writer on host a maps its connection to node DIS_BROADCAST_NODEID_GROUP_ALL without a
/// flag and stores; both receivers see every byte in their own copies
/// (tests/sdk/vendor_reflective.c, as on one host).
#[test]
fn reflective_memory_as_the_vendor_sets_it_up_across_two_hosts() {
    if skipped_without_ofi() {
        return;
    }
    let sdk = Sdk::install("vendor-reflective-hosts");
    let hosts = TwoHosts::start(&sdk);
    let prog = sdk.test_program("vendor_reflective", &[]);
    let dir = sdk.dir.0.join("flags");
    std::fs::create_dir_all(&dir).expect("dir");
    let d = dir.to_str().expect("utf-8");
    let spawn = |h: &str, node: u32, args: &[&str]| {
        let mut c = Command::new(&prog);
        hosts.on(c.args(args).env("LANES_NODE_ID", node.to_string()), h);
        Program::spawn(c, &node_name(&prog, node))
    };
    let ready = |r: &mut Program, what: &str| r.stdout_line(Duration::from_secs(60), |l| l.contains(what)).is_some();
    let mut r1 = spawn("a", 8, &["receiver", "1", d]);
    assert!(ready(&mut r1, "receiver 1 ready"), "receiver 1 never got ready");
    let mut r2 = spawn("b", 4, &["receiver", "2", d]);
    assert!(ready(&mut r2, "receiver 2 ready"), "receiver 2 never got ready");
    let w = spawn("a", 8, &["writer", "2", d]).finish(LIMIT);
    let outs: Vec<Finished> = [r1, r2].into_iter().map(|r| r.finish(LIMIT)).collect();
    let texts: Vec<String> = outs.iter().chain([&w]).map(|o| o.stdout.clone()).collect();
    let all = format!("receiver 1:\n{}\nreceiver 2:\n{}\nwriter:\n{}", texts[0], texts[1], texts[2]);
    for (i, out) in outs.iter().chain([&w]).enumerate() {
        let failed: Vec<&str> = texts[i].lines().filter(|l| l.starts_with("FAIL")).collect();
        assert!(
            out.ok() && failed.is_empty() && texts[i].contains("0 failures"),
            "{failed:#?}\n{}\n{all}",
            show("process", out)
        );
    }
    for t in &texts[..2] {
        assert!(t.lines().any(|l| l == "ok every byte of the block"), "{all}");
    }
}

// ---------------------------------------------------------------------------------------
// The vendor's whole API surface (issue 28, items 6 and 7, and the header layout)
// ---------------------------------------------------------------------------------------

/// `FUNCTIONS` (once each) and `UNDECLARED_EXPORTS`: every function libsisci.so exports.
fn all_exported_functions() -> std::collections::BTreeSet<&'static str> {
    sisci::FUNCTIONS.iter().chain(sisci::UNDECLARED_EXPORTS).copied().collect()
}

/// The lines of `out` that start with `prefix`, without it.
fn lines_after<'a>(out: &'a str, prefix: &'a str) -> impl Iterator<Item = &'a str> {
    out.lines().filter_map(move |l| l.strip_prefix(prefix))
}

/// `(name, value)` of constants of `sisci::consts`, for comparison with what C sees.
macro_rules! rust_consts {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), u64::from($name as u32))),*]
    };
}

/// A program that includes the headers the vendor's way (`-I<prefix>/include
/// -I<prefix>/include/dis`) and takes the address of every declared function, and of the
/// four the vendor exports undeclared, builds with -Wall -Wextra -Wconversion -Wpedantic
/// -Werror and links; its table names exactly the library's exports; the sizes of the
/// vendor's structs and the values of the constants are the library's; and the new calls
/// behave (tests/sdk/api_surface.c). Also: the undeclared four are exported under their
/// plain names only, and declared in no installed header.
#[test]
fn the_vendor_api_surface_builds_with_wconversion_links_and_runs() {
    use sisci::consts::*;
    let sdk = Sdk::install("api-surface");
    let prog = sdk.test_program("api_surface", &["-Wconversion", "-Wpedantic"]);
    let out = sdk.run(&prog, 4, &[]);
    assert_all_ok("api_surface", &out);
    let s = &out.stdout;

    let in_c: std::collections::BTreeSet<&str> = lines_after(s, "function ").collect();
    let exported = all_exported_functions();
    let missing: Vec<_> = exported.difference(&in_c).collect();
    let extra: Vec<_> = in_c.difference(&exported).collect();
    assert!(missing.is_empty() && extra.is_empty(), "not in the C table: {missing:?}; not exported: {extra:?}");

    for (ty, size) in sisci::C_LAYOUTS {
        let line = format!("{ty} {size}");
        assert!(lines_after(s, "sizeof ").any(|l| l == line), "sizeof {ty} in C is not {size}:\n{s}");
    }

    let consts = rust_consts!(
        SCI_ERR_MASK,
        SCI_ERR_OK,
        SCI_ERR_NO_SUCH_FDID,
        SCI_ERR_SEMAPHORE_COUNT_EXCEEDED,
        SCI_ERR_IRQL_ILLEGAL,
        SCI_ERR_COND_INT_RACE_PROBLEM,
        SCI_ERR_NOT_SUPPORTED,
        SCI_INFINITE_TIMEOUT,
        SCI_FLAG_USE_CALLBACK,
        SCI_FLAG_EMPTY,
        SCI_FLAG_PRIVATE,
        SCI_FLAG_DMA_SOURCE_ONLY,
        SCI_FLAG_PHYSICAL,
        SCI_FLAG_CUDA_BUFFER,
        SCI_FLAG_SCIF_BUFFER,
        SCI_FLAG_AUTO_ID,
        SCI_FLAG_FIXED_INTNO,
        SCI_FLAG_SHARED_INT,
        SCI_FLAG_CONDITIONAL_INTERRUPT,
        SCI_FLAG_COUNTING_INT,
        SCI_FLAG_DMA_WAIT,
        SCI_FLAG_DMA_READ,
        SCI_FLAG_DMA_PHDMA,
        SCI_FLAG_DMA_GLOBAL,
        SCI_FLAG_ALLOW_UNICAST,
        SCI_FLAG_DMA_SYSDMA,
        SCI_FLAG_DMA_USER_MEM,
        SCI_FLAG_DMA_ADAPTER,
        SCI_FLAG_DMA_CHANNEL_SHARED,
        SCI_FLAG_FIXED_MAP_ADDR,
        SCI_FLAG_READONLY_MAP,
        SCI_FLAG_LOCK_OPERATION,
        SCI_FLAG_IO_MAP_IOSPACE,
        SCI_FLAG_NO_MEMORY_LOOPBACK,
        SCI_FLAG_SHARED_MAP,
        SCI_FLAG_BROADCAST,
        SCI_FLAG_WRITE_BACK_CACHE_MAP,
        SCI_FLAG_CONDITIONAL_INTERRUPT_MAP,
        SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP,
        SCI_FLAG_CACHE_FLUSH,
        SCI_FLAG_CACHE_INVALIDATE,
        SCI_FLAG_FORCE_REMOVE,
        SCI_FLAG_EXCLUSIVE,
        SCI_FLAG_LOCK_USER_MEM,
        SCI_FLAG_SHARE_EXTERNAL,
        SCI_FLAG_PCIE_REQUESTER_GLOBAL,
        SCI_FLAG_DEVICE_SIDE_ONLY,
        SCI_FLAG_LOCAL_ONLY,
        SCI_FLAG_DEVICE_PREFER_BANDWIDTH,
        SCI_FLAG_HOST_PREFER_BANDWIDTH,
        SCI_FLAG_SPECIFY_PATH,
        SCI_FLAG_SPECIFY_SLOT,
        SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY,
        SCI_FLAG_BLOCK_READ,
        SCI_FLAG_ERROR_CHECK,
        SCI_FLAG_NO_FLUSH,
        SCI_FLAG_NO_STORE_BARRIER,
        SCI_MEMTYPE_BAR,
        SCI_MEMTYPE_PRIVATE,
        SCI_MEMTYPE_SHARED,
        SCI_MEMACCESS_DEVICE_READ,
        SCI_MEMACCESS_DEVICE_WRITE,
        SCI_MEMACCESS_HOST_READ,
        SCI_MEMACCESS_HOST_WRITE,
        SCI_MEMACCESS_MULTIHOST_READ,
        SCI_MEMACCESS_MULTIHOST_WRITE,
        SCI_MEMACCESS_P2P_READ,
        SCI_MEMACCESS_P2P_WRITE,
        SCI_Q_VENDORID,
        SCI_Q_API,
        SCI_Q_ADAPTER,
        SCI_Q_SYSTEM,
        SCI_Q_LOCAL_SEGMENT,
        SCI_Q_REMOTE_SEGMENT,
        SCI_Q_MAP,
        SCI_Q_DMA,
        SCI_Q_SISCI_DRIVER_VERSION,
        SCI_Q_DEVICE,
        SCI_Q_DEVICE_INFO,
        SCI_Q_SYSTEM_CPU_CACHE_LINE_SIZE,
        SCI_Q_DMA_AVAILABLE,
        SCI_Q_DMA_CAPABILITIES,
        DIS_BROADCAST_NODEID_GROUP_ALL,
        DIS_MAX_NSCIS,
        DIS_DMA_MAX_VECLEN,
        SCI_DMA_CHANNEL_ID_DONTCARE,
    );
    let in_c: std::collections::HashMap<&str, u64> = lines_after(s, "const ")
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(n, v)| Some((n, v.parse().ok()?)))
        .collect();
    for (name, value) in consts {
        assert_eq!(in_c.get(name).copied(), Some(value), "{name}: C and the library differ");
    }
    assert_eq!(in_c.get("SISCI_ERR_MASK").copied(), Some(u64::from(SCI_ERR_MASK)));
    assert!(s.contains("adapter type: Lanes software adapter"), "{s}");

    let mut nm = Command::new("nm");
    nm.args(["-D", "--defined-only"]).arg(sdk.prefix().join("lib64/libsisci.so"));
    let nm = run_to_end(nm, "nm (binutils, installed with gcc)", LIMIT);
    let symbols = &nm.stdout;
    let defined: std::collections::HashSet<&str> =
        symbols.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    let mut headers = String::new();
    for (name, _) in sisci::HEADERS {
        headers += &std::fs::read_to_string(sdk.prefix().join("include").join(name)).expect("installed header");
    }
    for f in sisci::UNDECLARED_EXPORTS {
        assert!(defined.contains(f), "{f} is not exported");
        assert!(!defined.contains(format!("_SISCI_PUBLIC_FUNC_ST_{f}").as_str()), "{f}: the vendor has no alias");
        let prototype = ["void ", "unsigned int "].iter().any(|t| headers.contains(&format!("\n{t}{f}(")));
        assert!(!prototype, "{f} is declared in an installed header; the vendor's declares it nowhere");
    }
}

/// `lanes sdk install` at its default layout under a prefix named like the vendor's
/// (`opt/DIS`): include/ holds every header of the library, byte for byte, include/dis/
/// dis_types.h, lib64/libsisci.so; a build the way vendor Makefiles do it
/// (`-I/opt/DIS/include -I/opt/DIS/include/dis -L/opt/DIS/lib64 -lsisci`, headers included
/// as "sisci_api.h", no pkg-config) compiles with -Wconversion and runs; uninstall removes
/// every file install wrote, the new header too.
#[test]
fn the_installed_tree_is_the_vendors_layout_and_uninstall_removes_all_of_it() {
    let dir = TestDir::named("sdk-test", "vendor-layout");
    let prefix = dir.0.join("opt/DIS");
    let mut c = Command::new(LANES);
    c.args(["sdk", "install", "--no-ldconfig", "--prefix"]).arg(&prefix);
    let out = run_to_end(c, "lanes sdk install", LIMIT);
    assert!(out.ok(), "{}", show("install", &out));
    for (name, contents) in sisci::HEADERS {
        let installed = std::fs::read_to_string(prefix.join("include").join(name)).expect(name);
        assert_eq!(&installed, contents, "include/{name} differs from the library's header");
    }
    for f in ["include/dis/dis_types.h", "include/sisci_api_macros.h", "lib64/libsisci.so"] {
        assert!(prefix.join(f).is_file(), "{f} missing");
    }
    let bin = dir.0.join("api_surface");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/api_surface.c");
    let mut cc = Command::new("cc");
    cc.args(["-Wall", "-Wextra", "-Wconversion", "-Werror", "-D_REENTRANT", "-pthread"])
        .arg(format!("-I{}", prefix.join("include").display()))
        .arg(format!("-I{}", prefix.join("include/dis").display()))
        .arg(&src)
        .arg(format!("-L{}", prefix.join("lib64").display()))
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib64").display()))
        .arg("-lsisci")
        .arg("-o")
        .arg(&bin);
    let cc = run_to_end(cc, "cc", LIMIT);
    assert!(cc.ok(), "{}", show("cc (vendor layout)", &cc));
    let mut c = Command::new(&bin);
    c.env("LANES_NODE_ID", "4")
        .env("LANES_DIR", dir.0.join("fabric"))
        .env_remove("LANES_CONFIG")
        .env_remove("LD_LIBRARY_PATH");
    let out = run_to_end(c, "api_surface", LIMIT);
    assert_all_ok("api_surface (vendor layout)", &out);

    let mut c = Command::new(LANES);
    c.args(["sdk", "uninstall", "--no-ldconfig", "--prefix"]).arg(&prefix);
    let out = run_to_end(c, "lanes sdk uninstall", LIMIT);
    assert!(out.ok(), "{}", show("uninstall", &out));
    assert!(!prefix.exists(), "uninstall left {:?}", std::fs::read_dir(&prefix).map(|d| d.count()));
}

/// SmartIO without a device: an empty list, SCI_ERR_NO_SUCH_FDID, refused handles; with
/// LANES_SISCI_FAKE_DEVICES a device driver's whole control flow (borrow, query, BAR 0 and
/// device segments connected and mapped, DMA into the BAR, segments mapped for the device,
/// return); a malformed description is SCI_ERR_SYSTEM with a report naming the variable
/// (tests/sdk/smartio.c).
#[test]
fn smartio_without_a_device_and_with_a_fake_one() {
    let sdk = Sdk::install("smartio");
    let prog = sdk.test_program("smartio", &["-Wconversion"]);
    let none = sdk.run(&prog, 4, &["none"]);
    assert_all_ok("smartio none", &none);
    for step in ["ok no device is found", "ok SCIBorrowDevice: no such device", "ok SCIRegisterPCIeRequester"] {
        assert!(none.stdout.lines().any(|l| l == step), "missing {step:?}:\n{}", none.stdout);
    }

    let devices = (smartio_env(), "0x100:64K:0x010802:0x144d:0xa808,0x200");
    let fake = sdk.run_with(&prog, 4, &["fake"], devices);
    assert_all_ok("smartio fake", &fake);
    let s = &fake.stdout;
    for step in [
        "ok both see the same device memory",
        "ok the bytes are in the device's memory",
        "ok SCIReturnDevice while its segments are connected",
        "ok the device segments went with the last return",
        "ok BAR 0 is new memory",
    ] {
        assert!(s.lines().any(|l| l == step), "missing {step:?}:\n{s}");
    }

    let bad = sdk.run_with(&prog, 4, &["bad"], (smartio_env(), "0x100:64K,zzz"));
    assert_all_ok("smartio bad", &bad);
    let message = line_after(&bad.stdout, "message: ").map(str::to_string);
    assert!(
        message.is_some_and(|m| m.contains("LANES_SISCI_FAKE_DEVICES") && m.contains("zzz")),
        "{}",
        show("bad", &bad)
    );
    let stderr = &bad.stderr;
    assert!(stderr.contains("SCIGetDeviceList") && stderr.contains("LANES_SISCI_FAKE_DEVICES"), "{stderr}");
}

fn smartio_env() -> &'static str {
    sisci::smartio::FAKE_DEVICES_ENV
}

/// Conditional interrupts and a named interrupt between node 8 (the flags' owner) and node
/// 4 (which triggers them): the first trigger is delivered and disables the flag, later ones
/// are only counted, enabling after missed triggers is SCI_ERR_COND_INT_RACE_PROBLEM and
/// resets the count, a disabled flag counts without delivering, an unconditional flag with a
/// callback gets every trigger (tests/sdk/cond_intr.c).
#[test]
fn conditional_and_named_interrupts_between_two_nodes() {
    let sdk = Sdk::install("cond-intr");
    let prog = sdk.test_program("cond_intr", &["-Wconversion"]);
    let (server, client) = sdk.pair(&prog, &["-server"], &["-client"]);
    for (who, out) in [("server", &server), ("client", &client)] {
        let failed: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
        assert!(failed.is_empty() && out.contains("0 failures"), "{who}: {failed:#?}\n{out}");
    }
    for step in [
        "ok the named interrupt arrives",
        "ok the first trigger of the flag is delivered",
        "ok all three are counted",
        "ok the other two are not delivered",
        "ok enabling after missed triggers",
        "ok a trigger after enabling is delivered",
        "ok the trigger while disabled is counted",
        "ok and not delivered",
        "ok the unconditional flag's callback ran for both triggers",
    ] {
        assert!(server.lines().any(|l| l == step), "server: missing {step:?}:\n{server}");
    }
}

// ---------------------------------------------------------------------------------------
// Issue 28's deliverable: programs in the style users write them (examples/c: the benchmark
// suite, the replicated key-value store, the SmartIO device example), built with
// -Wconversion against the installed SDK and run as node processes
// ---------------------------------------------------------------------------------------

/// A program of examples/c built as its Makefile builds the user-style ones: plain cc,
/// `-Wall -Wextra -Wconversion -Werror -D_REENTRANT -pthread`, the SDK's include dirs.
fn user_program(sdk: &Sdk, name: &str) -> PathBuf {
    let bin = sdk.cc(&repo().join("examples/c").join(format!("{name}.c")), name, &["-Wconversion"]);
    let out = sdk.run(&bin, 4, &["-h"]);
    assert!(out.ok() && out.stdout.contains("Usage"), "{}", show(&format!("{name} -h"), &out));
    let out = sdk.run(&bin, 4, &["-no-such-option"]);
    assert_eq!(out.code(), Some(1), "{}", show(&format!("{name} -no-such-option"), &out));
    bin
}

/// Whether the results table has a row `experiment who... ok` (the `who` words in order).
fn table_row_ok(out: &str, experiment: &str, who: &[&str]) -> bool {
    out.lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.len() > who.len() + 1 && w[0] == experiment && w[1..=who.len()] == *who && w.last() == Some(&"ok")
    })
}

/// bench_initiator on node 4 drives bench_peer on nodes 8 and 12: discovery by SCIProbeNode
/// and a HELLO over the peers' control data interrupts (callbacks), then PIO ping-pong with
/// sequences, interrupt round trips, DMA and DMA vectors on a 1-entry queue, and rounds
/// written into the reflective group both peers created; every experiment validated, the
/// table printed, the peers told to exit. An unreachable peer is exit status 3.
#[test]
fn bench_suite_initiator_drives_two_peers_and_every_experiment_validates() {
    let sdk = Sdk::install("bench-suite");
    let init = user_program(&sdk, "bench_initiator");
    let peer = user_program(&sdk, "bench_peer");
    let peers: Vec<Program> =
        [8, 12].iter().map(|&n| sdk.start(&peer, n, &["-size", "256K", "-timeout", "20000"])).collect();
    let start = Instant::now();
    let args = ["-peers", "8,12", "-iters", "500", "-irq-iters", "200", "-dma-size", "64K", "-dma-iters", "10"];
    let args = [&args[..], &["-rounds", "100", "-bcast-size", "2K", "-timeout", "20000"]].concat();
    let out = sdk.run(&init, 4, &args);
    let peer_outs: Vec<Finished> = peers.into_iter().map(|p| p.finish(LIMIT)).collect();
    let context: String = peer_outs.iter().map(|o| show("peer", o)).collect::<Vec<_>>().join("\n");
    assert!(out.ok(), "{}\n{context}", show("bench_initiator", &out));
    let s = &out.stdout;
    for experiment in ["pio-pingpong", "irq-roundtrip", "dma", "dma-vec"] {
        for node in ["8", "12"] {
            assert!(table_row_ok(s, experiment, &["node", node]), "no {experiment} row for node {node} ok:\n{s}");
        }
    }
    assert!(table_row_ok(s, "broadcast", &["2", "peers"]), "no broadcast row ok:\n{s}");
    assert!(s.contains("bench_initiator: all 9 experiments validated, 2 peers said goodbye"), "{s}");
    for (node, o) in [8, 12].iter().zip(&peer_outs) {
        let p = &o.stdout;
        assert!(o.ok(), "{}", show(&format!("peer {node}"), o));
        assert!(p.contains(&format!("node {node}: initiator is node 4")) && p.contains("exiting"), "{p}");
    }
    eprintln!("bench suite: {:?}", start.elapsed());

    let out = sdk.run(&init, 4, &["-peers", "16", "-timeout", "300"]);
    assert_eq!(out.code(), Some(3), "{}", show("bench_initiator with no peer", &out));
    assert!(out.stderr.contains("node 16 is not reachable"), "{}", show("no peer", &out));
}

/// Three kv_replica processes (nodes 4, 8, 12) each create the broadcast segment with the
/// same group id, connect to DIS_BROADCAST_NODEID_GROUP_ALL for their writes, and run their
/// scripted workloads at the same time: every replica's own keys read back exactly, no read
/// is torn, and all three end with the same table checksum. Then one replica takes PUT, GET,
/// DEL and SUM commands from stdin.
#[test]
fn kv_replicas_over_reflective_memory_converge_without_torn_reads() {
    let sdk = Sdk::install("kv-replica");
    let kv = user_program(&sdk, "kv_replica");
    let start = Instant::now();
    let args = ["-replicas", "4,8,12", "-ops", "4000", "-timeout", "20000"];
    let replicas: Vec<Program> = [4, 8, 12].iter().map(|&n| sdk.start(&kv, n, &args)).collect();
    let outs: Vec<Finished> = replicas.into_iter().map(|r| r.finish(LIMIT)).collect();
    let all: String = outs.iter().map(|o| show("replica", o)).collect::<Vec<_>>().join("\n");
    let mut sums = Vec::new();
    for (node, o) in [4, 8, 12].iter().zip(&outs) {
        assert!(o.ok(), "node {node}:\n{all}");
        let s = &o.stdout;
        assert!(s.contains(&format!("node {node}: own region verified")), "{all}");
        assert!(s.contains("4000 ops") && s.contains(" 0 torn\n"), "{all}");
        let line = s.lines().find(|l| l.contains("converged with 3 replicas, 0 torn reads in all"));
        let sum = line.and_then(|l| l.split_whitespace().find(|w| w.starts_with("0x"))).map(str::to_string);
        sums.push(sum.unwrap_or_else(|| panic!("node {node}: no convergence line:\n{all}")));
    }
    assert!(sums.iter().all(|s| *s == sums[0]), "checksums differ: {sums:?}\n{all}");
    eprintln!("kv replicas: {:?}", start.elapsed());

    use std::io::Write;
    let c = sdk.node(&kv, 4, &["-replicas", "4", "-stdin", "-group", "0x4B57", "-timeout", "20000"]);
    let mut child = Program::spawn_with_stdin(c, "kv_replica -stdin", Stdio::piped());
    let script = "PUT alpha 1\nPUT beta two words\nGET alpha\nGET beta\nDEL alpha\nGET alpha\nDEL alpha\nSUM\n";
    child.take_stdin().expect("stdin").write_all(script.as_bytes()).expect("write commands");
    let out = child.finish(LIMIT);
    assert!(out.ok(), "{}", show("kv_replica -stdin", &out));
    let s = &out.stdout;
    let answers: Vec<&str> = s.lines().filter(|l| !l.starts_with("kv_replica")).collect();
    assert_eq!(
        answers[..7],
        ["OK", "OK", "VALUE alpha 1", "VALUE beta two words", "OK", "NOTFOUND alpha", "NOTFOUND alpha"],
        "{s}"
    );
    assert!(answers[7].starts_with("SUM 0x") && s.contains("converged with 1 replicas"), "{s}");
}

/// smartio_dev with two fake devices picks the one of the PCI class asked for, borrows it,
/// queries it, maps BAR 0, gives it a device segment and a host segment mapped for it,
/// moves data into the device segment by DMA, programs the registers and rings the
/// doorbell, checks every register, and returns the device; without a device it says so
/// and exits 4.
#[test]
fn smartio_device_example_with_a_fake_device_and_without_one() {
    let sdk = Sdk::install("smartio-dev");
    let prog = user_program(&sdk, "smartio_dev");
    let devices = (smartio_env(), "0x100:64K:0x010802:0x144d:0xa808,0x200:4K:0x020000:0x8086:0x10d3");
    for (args, fdid, ids) in [
        (&["-class", "0x010802", "-exclusive"][..], "0x100", "144d:a808 class 010802"),
        (&["-class", "0x020000", "-vendor", "0x8086"][..], "0x200", "8086:10d3 class 020000"),
    ] {
        let out = sdk.run_with(&prog, 4, args, devices);
        let s = &out.stdout;
        assert!(out.ok(), "{}", show(&format!("smartio_dev {args:?}"), &out));
        assert!(s.contains(&format!("borrowing fabric device {fdid}")) && s.contains(ids), "{s}");
        for check in ["the DMA reached the device's buffer", "command block", "doorbell", "data buffer register"] {
            assert!(
                s.lines().any(|l| l.starts_with("smartio_dev: ") && l.contains(check) && l.ends_with(" ok")),
                "{check} not ok:\n{s}"
            );
        }
        assert!(!s.contains("WRONG") && s.contains(&format!("device {fdid} returned: done")), "{s}");
    }

    let out = sdk.run_with(&prog, 4, &["-vendor", "0x1234"], devices);
    assert_eq!(out.code(), Some(4), "{}", show("smartio_dev, no device of that vendor", &out));
    let mut c = sdk.node(&prog, 4, &[]);
    c.env_remove(smartio_env());
    let out = Program::spawn(c, "smartio_dev").finish(LIMIT);
    assert_eq!(out.code(), Some(4), "{}", show("smartio_dev without a device", &out));
    assert!(out.stdout.contains("no SmartIO device found"), "{}", show("no device", &out));
}
