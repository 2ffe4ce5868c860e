//! `lanes run [--] PROG ARGS...`: runs a program with `liblanes_sockets.so` preloaded, so its
//! local TCP connections to other processes carrying the library go through shared memory.
//! The program replaces this process (exec): its pid, signals and exit status are its own.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use lanes_bench::preload;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Preload the library in pass-through mode (LANES_SOCKETS=0): the same program, not
    /// accelerated, for A/B runs.
    #[arg(long)]
    no_accel: bool,
    /// Accelerate only connections on these ports (LANES_SOCKETS_INCLUDE), e.g. 5201,8000-8100.
    #[arg(long, value_name = "PORTS")]
    include: Option<String>,
    /// Never accelerate connections on these ports (LANES_SOCKETS_EXCLUDE).
    #[arg(long, value_name = "PORTS")]
    exclude: Option<String>,
    /// Microseconds a receiver spins before it sleeps in the kernel (LANES_POLL_US, default 50).
    #[arg(long, value_name = "US")]
    poll_us: Option<u64>,
    /// Ring size per direction, e.g. 1M (LANES_SOCKETS_RING).
    #[arg(long, value_name = "BYTES")]
    ring: Option<String>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROG")]
    command: Vec<OsString>,
}

/// The environment `lanes run` sets, in order (`LD_PRELOAD` first).
fn environment(a: &RunArgs, lib: &Path) -> Result<Vec<(&'static str, OsString)>, String> {
    let mut env = vec![("LD_PRELOAD", preload::with_library(std::env::var_os("LD_PRELOAD").as_deref(), lib))];
    if a.no_accel {
        env.push(("LANES_SOCKETS", "0".into()));
    }
    for (name, list, flag) in
        [("LANES_SOCKETS_INCLUDE", &a.include, "--include"), ("LANES_SOCKETS_EXCLUDE", &a.exclude, "--exclude")]
    {
        if let Some(l) = list {
            preload::check_ports(l).map_err(|e| format!("{flag}: {e}"))?;
            env.push((name, l.replace(' ', "").into()));
        }
    }
    if let Some(us) = a.poll_us {
        env.push(("LANES_POLL_US", us.to_string().into()));
    }
    if let Some(r) = &a.ring {
        let bytes = lanes_bench::sizes::parse_size(r).map_err(|e| format!("--ring: {e}"))?;
        if bytes == 0 {
            return Err("--ring: the ring needs at least one byte".into());
        }
        env.push(("LANES_SOCKETS_RING", bytes.to_string().into()));
    }
    Ok(env)
}

/// Runs `lanes run`: only returns if the program could not be started.
pub fn run(a: RunArgs) -> ExitCode {
    let Some(prog) = a.command.first().cloned() else {
        eprintln!("lanes run: no program given (lanes run [--] PROG ARGS...)");
        return ExitCode::from(2);
    };
    let shown = Path::new(&prog).display().to_string();
    let Some(path) = resolve(&prog) else {
        let why = if shown.contains('/') { "no such file" } else { "command not found" };
        eprintln!("lanes run: {shown}: {why}");
        return ExitCode::from(127);
    };
    let lib = match preload::find_library() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("lanes run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let env = match environment(&a, &lib) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("lanes run: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(why) = unpreloadable(&path) {
        eprintln!("lanes run: warning: {shown} {why}; it runs without acceleration");
    }
    let mut cmd = Command::new(&prog);
    cmd.args(&a.command[1..]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let err = cmd.exec();
    let (code, why) = match err.kind() {
        std::io::ErrorKind::NotFound if !shown.contains('/') => (127, "command not found".to_string()),
        std::io::ErrorKind::NotFound => (127, "no such file".to_string()),
        std::io::ErrorKind::PermissionDenied => (126, "permission denied".to_string()),
        _ => (126, err.to_string()),
    };
    eprintln!("lanes run: {shown}: {why}");
    ExitCode::from(code)
}

/// The file `prog` names, looked up in `PATH` as exec does.
fn resolve(prog: &OsString) -> Option<PathBuf> {
    let p = Path::new(prog);
    if prog.as_encoded_bytes().contains(&b'/') {
        return p.exists().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    std::env::split_paths(&path).map(|d| d.join(p)).find(|c| c.is_file())
}

/// Why the loader would not preload anything into `path`, if it would not.
fn unpreloadable(path: &Path) -> Option<&'static str> {
    if !path.is_file() {
        return None;
    }
    let meta = std::fs::metadata(path).ok()?;
    if meta.permissions().mode() & 0o6000 != 0 {
        return Some("is setuid or setgid: the loader ignores LD_PRELOAD for it");
    }
    // The program headers sit near the start of the file.
    let mut bytes = Vec::new();
    std::fs::File::open(path).ok()?.take(64 << 10).read_to_end(&mut bytes).ok()?;
    (elf_is_static(&bytes) == Some(true)).then_some("is statically linked: there is no loader to preload a library")
}

/// `Some(true)` for an ELF executable without a program interpreter (statically linked,
/// static-pie included); `None` if it is not an ELF file this code reads (a script, say).
fn elf_is_static(b: &[u8]) -> Option<bool> {
    if b.get(..4)? != b"\x7fELF" || *b.get(5)? != 1 {
        return None; // not ELF, or big-endian
    }
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]) as usize);
    let u32_at = |o: usize| b.get(o..o + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize);
    let u64_at = |o: usize| b.get(o..o + 8).and_then(|s| usize::try_from(u64::from_le_bytes(s.try_into().ok()?)).ok());
    let (phoff, phentsize, phnum) = match b.get(4)? {
        1 => (u32_at(0x1c)?, u16_at(0x2a)?, u16_at(0x2c)?),
        2 => (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?),
        _ => return None,
    };
    const PT_INTERP: usize = 3;
    let mut has_interp = false;
    for i in 0..phnum {
        has_interp |= u32_at(phoff.checked_add(i.checked_mul(phentsize)?)?)? == PT_INTERP;
    }
    Some(!has_interp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_elf_program_headers() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_is_static(&me), Some(false));
        assert_eq!(elf_is_static(b"#!/bin/sh\n"), None);
        assert_eq!(elf_is_static(b"\x7fELF"), None);
        if let Some(sh) = resolve(&"sh".into()) {
            assert_eq!(unpreloadable(&sh), None);
        }
    }
}
