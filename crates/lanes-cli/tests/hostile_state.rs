//! `lanes status` and `lanes cleanup` against unlucky or hostile local state, as a user
//! meets it: an unreadable fabric directory, a reader that goes away, another user who took
//! the default directory's name first. Every wait is bounded.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lanes_testkit::program::{run_to_end, Finished};
use lanes_testkit::TestDir;

const LANES: &str = env!("CARGO_BIN_EXE_lanes");
const LIMIT: Duration = Duration::from_secs(30);

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn lanes() -> Command {
    let mut c = Command::new(LANES);
    c.env_remove("LANES_CONFIG").env_remove("LANES_NODE_ID").env_remove("LANES_DIR");
    c
}

/// Runs a command, which must end within `limit`.
fn run(c: Command, limit: Duration) -> Finished {
    run_to_end(c, "lanes", limit)
}

/// A uid no account uses, different per test process (tests of several runs may overlap).
fn spare_uid(offset: u32) -> u32 {
    61000 + (std::process::id() % 2000) * 2 + offset
}

#[test]
fn status_of_an_unreadable_fabric_directory_is_an_error_naming_it() {
    let scratch = TestDir::named("cli-hostile", "unreadable");
    let fabric = scratch.0.join("fabric");
    std::fs::create_dir(&fabric).expect("mkdir");
    let mut status = lanes();
    status.arg("status").env("LANES_DIR", &fabric);
    if is_root() {
        // Root reads everything: ask as the directory's owner, a user without root's rights.
        std::fs::set_permissions(&scratch.0, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::os::unix::fs::chown(&fabric, Some(spare_uid(0)), Some(spare_uid(0))).expect("chown");
        status.uid(spare_uid(0)).gid(spare_uid(0));
    }
    std::fs::set_permissions(&fabric, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let out = run(status, LIMIT);
    let err = &out.stderr;
    assert!(!out.ok(), "status succeeded: {}", out.stdout);
    assert!(err.contains(fabric.to_str().unwrap()) && err.contains("ermission denied"), "{err}");
    assert!(!out.stdout.contains("(none)"), "an unreadable fabric is not an empty one");
}

#[test]
fn status_into_a_closed_pipe_ends_quietly() {
    let scratch = TestDir::named("cli-hostile", "pipe");
    // The reader (`true`) is gone before `lanes status` starts writing.
    let script = format!("set -o pipefail; (sleep 0.3; exec {LANES} status) | true; echo \"rc=${{PIPESTATUS[0]}}\"");
    let mut bash = Command::new("bash");
    bash.env("LANES_DIR", scratch.0.join("fabric")).args(["-c", &script]);
    let out = run(bash, LIMIT);
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stdout.contains("rc=0"), "stdout {stdout:?} stderr {stderr:?}");
}

/// Made for a test and removed at its end, if the test made it.
struct MadeDir(Option<PathBuf>);

impl MadeDir {
    fn make(path: &Path, uid: u32, mode: u32) -> MadeDir {
        if path.exists() {
            return MadeDir(None);
        }
        std::fs::create_dir(path).expect("mkdir");
        std::os::unix::fs::chown(path, Some(uid), Some(uid)).expect("chown");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        MadeDir(Some(path.to_path_buf()))
    }
}

impl Drop for MadeDir {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

fn status_dir_as(uid: u32) -> Result<String, String> {
    let mut c = lanes();
    c.args(["status", "--json"]).uid(uid).gid(uid).current_dir("/");
    let out = run(c, LIMIT);
    if !out.ok() {
        return Err(out.stderr);
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout_bytes).expect("status --json");
    Ok(v["dir"].as_str().expect("dir").to_string())
}

#[test]
fn a_default_directory_another_user_took_first_is_not_used() {
    if !is_root() || !Path::new("/dev/shm").is_dir() {
        eprintln!("skipped: acting as two other users needs root (and /dev/shm)");
        return;
    }
    let (victim, squatter) = (spare_uid(0), spare_uid(1));
    let shared = PathBuf::from(format!("/dev/shm/lanes-{victim}"));
    let _ = std::fs::remove_dir_all(&shared);
    let _squat = MadeDir::make(&shared, squatter, 0o755);
    assert!(_squat.0.is_some(), "{} exists already", shared.display());

    // No runtime directory of the victim's: the squatted name is named as such.
    let runtime_root = Path::new("/run/user");
    let _run_user = MadeDir::make(runtime_root, 0, 0o755);
    let runtime = runtime_root.join(victim.to_string());
    let _ = std::fs::remove_dir_all(&runtime);
    let err = status_dir_as(victim).expect_err("a squatted fabric directory is refused");
    assert!(err.contains(&format!("belongs to uid {squatter}")) && err.contains("another user"), "{err}");

    // With one (as the login manager makes it: the user's, mode 0700), it serves instead.
    let _runtime = MadeDir::make(&runtime, victim, 0o700);
    let dir = status_dir_as(victim).expect("status with a runtime directory");
    assert_eq!(dir, runtime.join("lanes").to_str().unwrap());
}
