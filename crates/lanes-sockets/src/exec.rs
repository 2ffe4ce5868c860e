//! The exec family: bytes a peer put in a ring are read by the next image, or the
//! connection is reset at both ends; never silently lost.
//!
//! A socket inherited across exec is taken over by the new image when that image carries
//! the library (`conn::adopt_inherited`), and the ring bytes waiting in it are read as
//! before. So before an exec whose environment would leave the library behind (an
//! inetd-style hand-off with a scrubbed environment, `env -i`, a program that removes
//! `LD_PRELOAD`), and while this process holds an accelerated socket the new image
//! inherits, the library puts itself back into that environment, with the variables that
//! locate its records. The new image takes them out again as it loads
//! ([`restore_environment`]), so the program sees the environment it was given.
//!
//! An image that cannot load the library (statically linked, set-user-ID or set-group-ID to
//! somebody else, file capabilities, another kind of ELF) cannot read a ring: its inherited
//! sockets go back to the kernel first, as a last holder's close does. If the peer had put
//! bytes into the ring that nobody has read, they cannot reach that image any more: the
//! connection is reset (`connect(AF_UNSPEC)`), so both ends see `ECONNRESET`, as TCP
//! reports data it could not deliver.
//!
//! The interposers allocate nothing on the way to a successful exec of an image that loads
//! the library (they may run in a `vfork` child, which shares its parent's heap); they work
//! in buffers on the stack and give up (the exec goes ahead unchanged) when an environment
//! does not fit. `execl`, `execlp` and `execle` are variadic; on x86-64 they are entered
//! through a small trampoline that lays the arguments out as the array `execv` takes.

use std::ffi::{c_char, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

use libc::c_int;

use lanes::sockets::endpoint::{this_process, FLAG_RX_CLOSED, FLAG_TX_CLOSED};

use crate::config::config;
use crate::conn::{self, Conn};
use crate::real::real;

/// Names the original `LD_PRELOAD` of an environment the library put itself into: `-` for
/// none, `+` and the value otherwise.
const PRELOAD_MARK: &str = "LANES_SOCKETS_EXEC_PRELOAD";
/// Names, comma-separated, of the variables the library added to such an environment.
const ADDED_MARK: &str = "LANES_SOCKETS_EXEC_ADDED";

/// The library's file name (as `lanes run` puts it into `LD_PRELOAD`).
const LIBRARY: &[u8] = b"liblanes_sockets.so";

/// This library's own path, found at load time.
static OWN_PATH: OnceLock<CString> = OnceLock::new();

/// Variables an exec put into this image's environment for the library only: read by the
/// library's configuration, gone from the program's environment.
static CARRIED: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// A variable carried for the library across an exec that left it out (see [`CARRIED`]).
pub fn carried(name: &str) -> Option<String> {
    CARRIED.get()?.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
}

/// Runs when the library is loaded, before the program: finds the library's own path, and
/// takes out of the environment what an exec put there for the library only.
extern "C" fn at_load() {
    let _ = std::panic::catch_unwind(|| {
        remember_own_path();
        restore_environment();
    });
}

#[used]
#[link_section = ".init_array"]
static AT_LOAD: extern "C" fn() = at_load;

/// At the process's exit (after its atexit handlers; before the libraries this one
/// depends on are finalized, libfabric among them): the fabric's background threads stop
/// calling the provider, whose destructor would free what they use. A client across hosts
/// crashed at exit once (SIGSEGV after its last output, in CI).
extern "C" fn at_unload() {
    let _ = std::panic::catch_unwind(lanes::transport::quiesce_for_exit);
}

#[used]
#[link_section = ".fini_array"]
static AT_UNLOAD: extern "C" fn() = at_unload;

fn remember_own_path() {
    // SAFETY: a zeroed Dl_info is valid; dladdr fills it for an address of this library.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: the address of a function of this library.
    if unsafe { libc::dladdr(at_load as *const libc::c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = std::path::Path::new(OsStr::from_bytes(name.to_bytes()));
    let abs = std::fs::canonicalize(path).ok();
    let bytes = abs.as_ref().map_or(name.to_bytes(), |p| p.as_os_str().as_encoded_bytes());
    if let Ok(c) = CString::new(bytes) {
        let _ = OWN_PATH.set(c);
    }
}

/// Undoes what [`with_library`] added to this image's environment: `LD_PRELOAD` as the
/// program passed it, the library's variables kept aside for its configuration. At load
/// time the process runs one thread, so changing the environment is safe.
fn restore_environment() {
    let Some(preload) = std::env::var_os(PRELOAD_MARK) else { return };
    let mut carried = Vec::new();
    if let Ok(added) = std::env::var(ADDED_MARK) {
        for name in added.split(',').filter(|n| n.starts_with("LANES_")) {
            if let Ok(v) = std::env::var(name) {
                carried.push((name.to_string(), v));
            }
            std::env::remove_var(name);
        }
    }
    let _ = CARRIED.set(carried);
    let preload = preload.as_encoded_bytes();
    match preload.split_first() {
        Some((b'+', rest)) => std::env::set_var("LD_PRELOAD", OsStr::from_bytes(rest)),
        _ => std::env::remove_var("LD_PRELOAD"),
    }
    std::env::remove_var(PRELOAD_MARK);
    std::env::remove_var(ADDED_MARK);
}

/// What is about to be executed.
#[derive(Clone, Copy)]
pub enum Target {
    /// A path, as execve takes it.
    Path(*const c_char),
    /// A file name searched in `PATH` when it has no slash, as execvp takes it.
    Search(*const c_char),
    /// An open file, as fexecve takes it.
    Fd(c_int),
    /// A path relative to a directory descriptor, with `AT_*` flags, as execveat takes it
    /// (with `AT_EMPTY_PATH` and an empty path: the descriptor itself).
    At(c_int, *const c_char, c_int),
}

/// Pointers and bytes for a new environment, on the caller's stack.
pub struct NewEnv {
    ptrs: [*const c_char; MAX_ENV],
    n: usize,
    bytes: [u8; ENV_BYTES],
    used: usize,
}

/// The most variables a rebuilt environment holds; larger ones go to the exec unchanged.
const MAX_ENV: usize = 1024;
/// Room for the variables the library writes (its path twice at most, the markers).
const ENV_BYTES: usize = 16 << 10;

impl NewEnv {
    pub fn new() -> Self {
        NewEnv { ptrs: [std::ptr::null(); MAX_ENV], n: 0, bytes: [0; ENV_BYTES], used: 0 }
    }

    fn push(&mut self, p: *const c_char) -> Option<()> {
        // One slot stays for the terminating null pointer.
        (self.n + 1 < MAX_ENV).then(|| {
            self.ptrs[self.n] = p;
            self.n += 1;
        })
    }

    /// Writes the concatenation of `parts` (and a NUL) into the buffer and adds it.
    fn push_joined(&mut self, parts: &[&[u8]]) -> Option<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if self.used + len + 1 > ENV_BYTES || parts.iter().any(|p| p.contains(&0)) {
            return None;
        }
        let start = self.used;
        for p in parts {
            self.bytes[self.used..self.used + p.len()].copy_from_slice(p);
            self.used += p.len();
        }
        self.bytes[self.used] = 0;
        self.used += 1;
        let p = self.bytes[start..].as_ptr().cast();
        self.push(p)
    }

    fn finish(&mut self) -> *const *const c_char {
        self.ptrs[self.n] = std::ptr::null();
        self.ptrs.as_ptr()
    }
}

/// The entries of a C environment.
///
/// # Safety
/// `envp` is null or a null-terminated array of NUL-terminated strings.
unsafe fn entries<'a>(envp: *const *const c_char) -> impl Iterator<Item = (*const c_char, &'a [u8])> {
    let mut i = 0;
    std::iter::from_fn(move || {
        if envp.is_null() {
            return None;
        }
        // SAFETY: within the array, up to and including its null terminator.
        let p = unsafe { *envp.add(i) };
        if p.is_null() {
            return None;
        }
        i += 1;
        // SAFETY: each entry is a NUL-terminated string.
        Some((p, unsafe { CStr::from_ptr(p) }.to_bytes()))
    })
}

fn name_of(entry: &[u8]) -> &[u8] {
    entry.split(|&b| b == b'=').next().unwrap_or(entry)
}

fn value_of<'a>(entry: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    entry.strip_prefix(name)?.strip_prefix(b"=")
}

/// Whether an `LD_PRELOAD` value names the library.
fn names_library(preload: &[u8]) -> bool {
    preload.split(|&b| b == b':' || b == b' ' || b == b'\t').any(|e| e.rsplit(|&b| b == b'/').next() == Some(LIBRARY))
}

/// The process's own environment.
fn environ() -> *const *const c_char {
    extern "C" {
        static environ: *const *const c_char;
    }
    // SAFETY: reading the C library's environment pointer.
    unsafe { environ }
}

/// Before an exec of `target` with environment `envp`: the environment to use instead, or
/// `envp` itself. See the module's documentation.
///
/// # Safety
/// `envp` is null or a valid environment; a path target is a NUL-terminated string.
pub unsafe fn before_exec(target: Target, envp: *const *const c_char, new_env: &mut NewEnv) -> *const *const c_char {
    if !config().enabled {
        return envp;
    }
    // The new image finds an inherited socket by its record: one whose set-up was put off
    // gets it now. A connection to another host goes back to the kernel.
    conn::Deferred::set_up_all();
    crate::remote::before_exec();
    if !holds_inherited_socket() {
        return envp;
    }
    let loads = match open_target(target) {
        Some(fd) => {
            let r = image_loads_preload(fd, 0);
            // fexecve's descriptor is the caller's (and execveat's, for an empty path);
            // the others are ours.
            if !caller_owns(target) {
                // SAFETY: our own descriptor.
                unsafe { libc::close(fd) };
            }
            r
        }
        // The exec will fail as the C library finds out; nothing to prepare.
        None => return envp,
    };
    if loads {
        // SAFETY: as guaranteed by the caller.
        if unsafe { entries(envp) }.any(|(_, e)| value_of(e, b"LD_PRELOAD").is_some_and(names_library)) {
            return envp;
        }
        // SAFETY: as guaranteed by the caller.
        if let Some(env) = unsafe { with_library(envp, new_env) } {
            return env;
        }
    }
    hand_sockets_to_kernel();
    envp
}

/// Whether this process holds an accelerated socket that an exec would pass on (not
/// close-on-exec, not already given back to the kernel for good).
fn holds_inherited_socket() -> bool {
    let mut found = false;
    conn::for_each(|fd, c| found = found || passed_on(fd, c));
    found
}

/// Whether an exec passes accelerated socket `fd` on to the new image still in use: not
/// close-on-exec, not already given back to the kernel for good.
fn passed_on(fd: c_int, c: &Conn) -> bool {
    if c.own.has_flag(FLAG_TX_CLOSED | FLAG_RX_CLOSED) {
        return false;
    }
    // SAFETY: F_GETFD on a descriptor of ours; no memory is passed.
    let flags = unsafe { (real().fcntl)(fd, libc::F_GETFD, 0) };
    flags >= 0 && flags & libc::FD_CLOEXEC == 0
}

/// Whether [`open_target`] answers with the caller's own descriptor (not to be closed).
fn caller_owns(target: Target) -> bool {
    match target {
        Target::Fd(_) => true,
        // SAFETY: a non-null path is NUL-terminated (execveat's contract).
        Target::At(_, p, flags) => flags & libc::AT_EMPTY_PATH != 0 && (p.is_null() || unsafe { *p } == 0),
        Target::Path(_) | Target::Search(_) => false,
    }
}

/// Opens what is about to be executed, for reading its first bytes; `fexecve`'s descriptor
/// (and `execveat`'s, for an empty path) is used as it is.
fn open_target(target: Target) -> Option<c_int> {
    let open = |p: *const c_char| {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { libc::open(p, libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK) };
        (fd >= 0).then_some(fd)
    };
    match target {
        Target::Fd(fd) => Some(fd),
        Target::At(dirfd, _, _) if caller_owns(target) => Some(dirfd),
        Target::At(dirfd, p, flags) if !p.is_null() => {
            let nofollow = if flags & libc::AT_SYMLINK_NOFOLLOW != 0 { libc::O_NOFOLLOW } else { 0 };
            // SAFETY: a NUL-terminated path, relative to the caller's directory descriptor.
            let fd = unsafe { libc::openat(dirfd, p, libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK | nofollow) };
            (fd >= 0).then_some(fd)
        }
        Target::Path(p) if !p.is_null() => open(p),
        Target::Search(file) if !file.is_null() => {
            // SAFETY: a NUL-terminated name.
            let name = unsafe { CStr::from_ptr(file) }.to_bytes();
            if name.is_empty() {
                return None;
            }
            if name.contains(&b'/') {
                return open(file);
            }
            // As execvp searches: the caller's PATH, else the C library's default.
            // SAFETY: getenv with a NUL-terminated name; the value is read before any
            // change of the environment.
            let path = unsafe { libc::getenv(c"PATH".as_ptr()) };
            let dirs: &[u8] = if path.is_null() {
                b"/bin:/usr/bin"
            } else {
                // SAFETY: getenv's answer is a NUL-terminated string.
                unsafe { CStr::from_ptr(path) }.to_bytes()
            };
            let mut buf = [0u8; 4096];
            for dir in dirs.split(|&b| b == b':') {
                let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
                let len = dir.len() + 1 + name.len();
                if len + 1 > buf.len() {
                    continue;
                }
                buf[..dir.len()].copy_from_slice(dir);
                buf[dir.len()] = b'/';
                buf[dir.len() + 1..len].copy_from_slice(name);
                buf[len] = 0;
                let p = buf.as_ptr().cast();
                // SAFETY: a NUL-terminated path in our buffer.
                if unsafe { libc::access(p, libc::X_OK) } == 0 {
                    if let Some(fd) = open(p) {
                        return Some(fd);
                    }
                }
            }
            None
        }
        _ => None,
    }
}

/// The ELF machine of the library's own code: an image of another cannot load it.
#[cfg(target_arch = "x86_64")]
const OWN_MACHINE: u16 = 62;
#[cfg(target_arch = "aarch64")]
const OWN_MACHINE: u16 = 183;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const OWN_MACHINE: u16 = 0;

/// Whether the image in `fd` will load `LD_PRELOAD`'s libraries: a dynamically linked ELF
/// of this processor (it has an interpreter, `PT_INTERP`) run without secure-execution mode
/// (which set-user-ID or set-group-ID bits for somebody else, and file capabilities, turn
/// on), or a script whose interpreter is one.
fn image_loads_preload(fd: c_int, depth: u32) -> bool {
    // SAFETY: fstat into a zeroed buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return false;
    }
    // SAFETY: no arguments.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if (st.st_mode & libc::S_ISUID != 0 && st.st_uid != euid) || (st.st_mode & libc::S_ISGID != 0 && st.st_gid != egid)
    {
        return false;
    }
    // SAFETY: asks only for the attribute's size.
    if unsafe { libc::fgetxattr(fd, c"security.capability".as_ptr(), std::ptr::null_mut(), 0) } >= 0 {
        return false;
    }
    let mut head = [0u8; 256];
    let n = read_at(fd, &mut head, 0);
    let head = &head[..n];
    if let Some(line) = head.strip_prefix(b"#!") {
        if depth >= 4 {
            return false;
        }
        let line = line.split(|&b| b == b'\n').next().unwrap_or(line);
        let line = line.trim_ascii_start();
        let interp = line.split(|&b| b == b' ' || b == b'\t').next().unwrap_or(line);
        let mut path = [0u8; 257];
        if interp.is_empty() || interp.len() >= path.len() {
            return false;
        }
        path[..interp.len()].copy_from_slice(interp);
        // SAFETY: a NUL-terminated path in our buffer.
        let ifd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if ifd < 0 {
            return false;
        }
        let r = image_loads_preload(ifd, depth + 1);
        // SAFETY: our own descriptor.
        unsafe { libc::close(ifd) };
        return r;
    }
    elf_has_interpreter(fd, head)
}

fn read_at(fd: c_int, buf: &mut [u8], offset: u64) -> usize {
    // SAFETY: the buffer is ours and of this length.
    let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) };
    r.max(0) as usize
}

/// Whether an ELF image (its first bytes in `head`) is a 64-bit little-endian one of this
/// processor with a `PT_INTERP` program header.
fn elf_has_interpreter(fd: c_int, head: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    if head.len() < 64 || &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]);
    if u16_at(18) != OWN_MACHINE {
        return false;
    }
    let mut phoff = [0u8; 8];
    phoff.copy_from_slice(&head[0x20..0x28]);
    let (phoff, phentsize, phnum) = (u64::from_le_bytes(phoff), u16_at(0x36) as u64, u16_at(0x38));
    if phentsize < 4 {
        return false;
    }
    (0..u64::from(phnum.min(512))).any(|i| {
        let mut ty = [0u8; 4];
        read_at(fd, &mut ty, phoff + i * phentsize) == 4 && u32::from_le_bytes(ty) == PT_INTERP
    })
}

/// `envp` with the library in `LD_PRELOAD` (first, the program's own entries after it) and
/// the library's variables of this process that `envp` lacks, `LANES_DIR` always among
/// them, with markers saying what to take out again. None if it does not fit.
///
/// # Safety
/// `envp` is null or a valid environment.
unsafe fn with_library(envp: *const *const c_char, env: &mut NewEnv) -> Option<*const *const c_char> {
    let own = OWN_PATH.get()?.as_bytes();
    // SAFETY: as guaranteed by the caller.
    let preload = unsafe { entries(envp) }.find_map(|(_, e)| value_of(e, b"LD_PRELOAD"));
    match preload {
        Some(p) if !p.is_empty() => {
            env.push_joined(&[b"LD_PRELOAD=", own, b":", p])?;
            env.push_joined(&[PRELOAD_MARK.as_bytes(), b"=+", p])?;
        }
        _ => {
            env.push_joined(&[b"LD_PRELOAD=", own])?;
            env.push_joined(&[PRELOAD_MARK.as_bytes(), b"=-"])?;
        }
    }
    // SAFETY: as guaranteed by the caller.
    for (p, e) in unsafe { entries(envp) } {
        let name = name_of(e);
        if name != b"LD_PRELOAD" && !name.starts_with(b"LANES_SOCKETS_EXEC_") {
            env.push(p)?;
        }
    }
    // The names added, for the marker: written after the variables themselves.
    let mut added = [0u8; 1024];
    let mut added_len = 0;
    let mut note_added = |name: &[u8]| -> Option<()> {
        let sep = usize::from(added_len > 0);
        if added_len + sep + name.len() > added.len() {
            return None;
        }
        if sep == 1 {
            added[added_len] = b',';
        }
        added[added_len + sep..added_len + sep + name.len()].copy_from_slice(name);
        added_len += sep + name.len();
        Some(())
    };
    // SAFETY: as guaranteed by the caller.
    let has = |name: &[u8]| unsafe { entries(envp) }.any(|(_, e)| name_of(e) == name);
    if !has(b"LANES_DIR") {
        let dir = config().fabric_dir.as_os_str().as_encoded_bytes();
        env.push_joined(&[b"LANES_DIR=", dir])?;
        note_added(b"LANES_DIR")?;
    }
    // SAFETY: the process's environment, unchanged until the exec.
    for (p, e) in unsafe { entries(environ()) } {
        let name = name_of(e);
        if name.starts_with(b"LANES_")
            && name != b"LANES_DIR"
            && !name.starts_with(b"LANES_SOCKETS_EXEC_")
            && !has(name)
        {
            env.push(p)?;
            note_added(name)?;
        }
    }
    let added = &added[..added_len];
    env.push_joined(&[ADDED_MARK.as_bytes(), b"=", added])?;
    Some(env.finish())
}

/// The exec goes to an image that cannot read the rings: every accelerated socket it
/// inherits from this process alone goes back to the kernel; one whose ring held bytes
/// for this side is reset. A socket another live process also holds (a parent that
/// forked this one and keeps serving the connection) is left to it.
fn hand_sockets_to_kernel() {
    let Ok(me) = this_process() else { return };
    // A vfork child runs in its parent's memory under its own pid: the parent still holds
    // (and will use) every socket, and the identity cache is the parent's.
    // SAFETY: no arguments.
    if me.pid() != unsafe { libc::getpid() } as u32 {
        return;
    }
    let mut conns: Vec<(c_int, std::sync::Arc<Conn>)> = Vec::new();
    conn::for_each(|fd, c| conns.push((fd, c.clone())));
    for (fd, c) in conns {
        if passed_on(fd, &c) && alone_with(&c, me) && conn::hand_to_kernel(&c, me) {
            reset(fd);
        }
    }
}

/// Whether `me` is the only live holder of `c`. A parent that forked this process for a
/// hand-off closes its copy at once; while ring bytes wait, give it a moment to.
fn alone_with(c: &Conn, me: lanes::platform::liveness::ProcessIdentity) -> bool {
    let others = || c.own.holders().into_iter().filter(|h| *h != me).count();
    if others() == 0 {
        return true;
    }
    if !c.ring_readable() {
        return false;
    }
    let started = std::time::Instant::now();
    while started.elapsed() < HANDOFF_GRACE {
        std::thread::sleep(std::time::Duration::from_millis(1));
        if others() == 0 {
            return true;
        }
    }
    false
}

/// How long an exec with stranded ring bytes waits for a forking parent to close its copy.
const HANDOFF_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// Resets the connection at both ends without closing the descriptor (`connect` with
/// `AF_UNSPEC` disconnects a TCP socket, sending RST): the peer's next call gets
/// `ECONNRESET`, and so does the new image's first read.
fn reset(fd: c_int) {
    conn::disconnect(fd);
    crate::reasons::note(crate::reasons::Reason::ExecWithoutLibrary, None);
}

/// Runs an exec interposer: `exec` is called with the environment to use.
fn run(target: Target, envp: *const *const c_char, exec: impl Fn(*const *const c_char) -> c_int) -> c_int {
    let mut env = NewEnv::new();
    let mut chosen = envp;
    crate::guarded(|| {
        crate::init();
        // SAFETY: the caller's arguments, valid as the exec function requires.
        chosen = unsafe { before_exec(target, envp, &mut env) };
    });
    exec(chosen)
}

/// # Safety
/// As execve(2).
#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments, with the environment chosen.
    run(Target::Path(path), envp, |env| unsafe { (real().execve)(path, argv, env) })
}

/// # Safety
/// As execv(3).
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments and the process's environment.
    unsafe { execve(path, argv, environ()) }
}

/// # Safety
/// As execvpe(3).
#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments, with the environment chosen.
    run(Target::Search(file), envp, |env| unsafe { (real().execvpe)(file, argv, env) })
}

/// # Safety
/// As execvp(3).
#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments and the process's environment.
    unsafe { execvpe(file, argv, environ()) }
}

/// # Safety
/// As fexecve(3).
#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int {
    // SAFETY: the caller's arguments, with the environment chosen.
    run(Target::Fd(fd), envp, |env| unsafe { (real().fexecve)(fd, argv, env) })
}

/// # Safety
/// As execveat(2).
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: c_int,
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    flags: c_int,
) -> c_int {
    // The C library's execveat (2.34 and later) is the bare system call; made directly, it
    // works with older ones too (a missing symbol would leave nothing to call).
    // SAFETY: the caller's arguments, with the environment chosen.
    run(Target::At(dirfd, path, flags), envp, |env| unsafe {
        libc::syscall(libc::SYS_execveat, dirfd, path, argv, env, flags) as c_int
    })
}

/// The list forms, entered from the trampolines below with the arguments laid out as an
/// array (`argv`, then for `execle` the environment after its null terminator).
///
/// # Safety
/// `argv` is a null-terminated array of strings; for execle the environment follows it.
unsafe extern "C" fn exec_list(path: *const c_char, argv: *const *const c_char, kind: c_int) -> c_int {
    match kind {
        LIST_PATH => {
            // SAFETY: as guaranteed by the caller.
            unsafe { execv(path, argv) }
        }
        LIST_SEARCH => {
            // SAFETY: as guaranteed by the caller.
            unsafe { execvp(path, argv) }
        }
        _ => {
            let mut n = 0;
            // SAFETY: the array is null-terminated.
            while !unsafe { *argv.add(n) }.is_null() {
                n += 1;
            }
            // SAFETY: execle's environment argument follows the terminator.
            let envp = unsafe { *argv.add(n + 1) } as *const *const c_char;
            // SAFETY: as guaranteed by the caller.
            unsafe { execve(path, argv, envp) }
        }
    }
}

const LIST_PATH: c_int = 0;
const LIST_SEARCH: c_int = 1;
const LIST_ENV: c_int = 2;

/// The x86-64 trampoline of the list forms: the first argument stays in `rdi`, the other
/// five register arguments are pushed below the caller's stack arguments, so that with
/// them they form one array, whose address goes to `exec_list` with the kind. The return
/// address is kept on the stack meanwhile, which keeps the stack 16-byte aligned at the
/// call; on return (the exec failed) the frame is undone and the caller's result returned.
macro_rules! list_trampoline {
    ($name:ident, $kind:expr) => {
        /// # Safety
        /// As the C library's function of this name (variadic, null-terminated).
        #[cfg(target_arch = "x86_64")]
        #[unsafe(naked)]
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, arg0: *const c_char) -> c_int {
            std::arch::naked_asm!(
                "pop r11",
                "push r9",
                "push r8",
                "push rcx",
                "push rdx",
                "push rsi",
                "mov rsi, rsp",
                "push r11",
                "mov edx, {kind}",
                "call {list}",
                "pop r11",
                "add rsp, 40",
                "push r11",
                "ret",
                kind = const $kind,
                list = sym exec_list,
            )
        }
    };
}

list_trampoline!(execl, LIST_PATH);
list_trampoline!(execlp, LIST_SEARCH);
list_trampoline!(execle, LIST_ENV);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_recognised_in_a_preload_list() {
        assert!(names_library(b"/opt/lanes/lib/liblanes_sockets.so"));
        assert!(names_library(b"libfoo.so:/x/liblanes_sockets.so"));
        assert!(names_library(b"liblanes_sockets.so"));
        assert!(!names_library(b"/x/liblanes_sockets.so.bak libother.so"));
        assert!(!names_library(b""));
    }

    #[test]
    fn variables_are_found_by_whole_name() {
        assert_eq!(value_of(b"LD_PRELOAD=/a.so", b"LD_PRELOAD"), Some(&b"/a.so"[..]));
        assert_eq!(value_of(b"LD_PRELOAD_X=/a.so", b"LD_PRELOAD"), None);
        assert_eq!(name_of(b"A=b=c"), b"A");
    }

    fn image_of(path: &str) -> bool {
        let c = CString::new(path).expect("path");
        let fd = open_target(Target::Path(c.as_ptr())).expect("open");
        let r = image_loads_preload(fd, 0);
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        r
    }

    #[test]
    fn dynamic_images_and_their_scripts_load_the_library() {
        // The test binary itself is dynamically linked.
        assert!(image_of(std::env::current_exe().expect("exe").to_str().expect("utf-8")));
        let dir = std::env::temp_dir().join(format!("lanes-exec-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let script = dir.join("script");
        std::fs::write(&script, format!("#!{} --flag\n", std::env::current_exe().unwrap().display())).expect("write");
        assert!(image_of(script.to_str().unwrap()));
        std::fs::write(&script, "#!/nonexistent/interpreter\n").expect("write");
        assert!(!image_of(script.to_str().unwrap()));
        std::fs::write(&script, "plain text").expect("write");
        assert!(!image_of(script.to_str().unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_new_environment_puts_the_library_first_and_says_what_it_added() {
        let _ = OWN_PATH.set(CString::new("/lib/liblanes_sockets.so").unwrap());
        let own = OWN_PATH.get().unwrap().to_bytes().to_vec();
        let vars = [c"A=1", c"LD_PRELOAD=/x/libother.so", c"LANES_DIR=/tmp/fabric"];
        let mut ptrs: Vec<*const c_char> = vars.iter().map(|v| v.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut env = NewEnv::new();
        // SAFETY: a null-terminated array of C strings.
        let out = unsafe { with_library(ptrs.as_ptr(), &mut env) }.expect("fits");
        // SAFETY: with_library's result is a null-terminated environment.
        let got: Vec<Vec<u8>> = unsafe { entries(out) }.map(|(_, e)| e.to_vec()).collect();
        let mut want_preload = b"LD_PRELOAD=".to_vec();
        want_preload.extend_from_slice(&own);
        want_preload.extend_from_slice(b":/x/libother.so");
        assert_eq!(got[0], want_preload);
        assert_eq!(got[1], b"LANES_SOCKETS_EXEC_PRELOAD=+/x/libother.so");
        assert!(got.contains(&b"A=1".to_vec()));
        assert!(got.contains(&b"LANES_DIR=/tmp/fabric".to_vec()), "the program's own LANES_DIR is kept");
        assert_eq!(got.iter().filter(|e| e.starts_with(b"LD_PRELOAD=")).count(), 1);
        let added = got.iter().find(|e| e.starts_with(b"LANES_SOCKETS_EXEC_ADDED=")).expect("marker");
        assert!(!added.windows(9).any(|w| w == b"LANES_DIR"), "LANES_DIR was the program's: {added:?}");
    }
}
