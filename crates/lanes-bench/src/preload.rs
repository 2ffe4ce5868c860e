//! Finding `liblanes_sockets.so` and putting it into (or taking it out of) `LD_PRELOAD`, for
//! `lanes run`, `lanes bench sockets` and the `sockets` path of `lanes bench`.
//!
//! `lanes` never links the library (it exports libc names such as `read`, so linking it
//! would interpose on `lanes` itself): it finds the file at run time and hands it to the
//! dynamic loader of the programs it starts.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The library's file name.
pub const LIBRARY: &str = "liblanes_sockets.so";
/// Points at the library explicitly.
pub const LIB_ENV: &str = "LANES_SOCKETS_LIB";

/// The library to preload: `$LANES_SOCKETS_LIB`, else beside this executable, else in
/// `../lib` from it. The path is absolute, so it stays valid whatever directory the program
/// changes to.
pub fn find_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(LIB_ENV).filter(|p| !p.is_empty()) {
        let path = PathBuf::from(&p);
        return match std::fs::canonicalize(&path) {
            Ok(abs) if abs.is_file() => Ok(abs),
            Ok(_) => Err(format!("{LIB_ENV}={}: not a file", path.display())),
            Err(e) => Err(format!("{LIB_ENV}={}: {e}", path.display())),
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let dir = exe.parent().ok_or("this executable has no directory")?;
    let candidates = [dir.join(LIBRARY), dir.join("..").join("lib").join(LIBRARY)];
    for c in &candidates {
        if c.is_file() {
            return std::fs::canonicalize(c).map_err(|e| format!("{}: {e}", c.display()));
        }
    }
    Err(format!(
        "{LIBRARY} not found (looked in {} and {}); build it with `cargo build -p lanes-sockets` \
         (add --release for a release build of lanes), or point {LIB_ENV} at it",
        candidates[0].display(),
        candidates[1].display()
    ))
}

fn entries(list: &OsStr) -> impl Iterator<Item = &[u8]> {
    // The loader separates entries with spaces or colons.
    list.as_bytes().split(|&b| b == b':' || b == b' ' || b == b'\t').filter(|e| !e.is_empty())
}

/// Whether an `LD_PRELOAD` entry names the library (any copy of it: two would interpose twice).
fn is_library(entry: &[u8]) -> bool {
    Path::new(OsStr::from_bytes(entry)).file_name() == Some(OsStr::new(LIBRARY))
}

/// `LD_PRELOAD` with `lib` first, keeping every other entry in order (and dropping other
/// copies of the library).
pub fn with_library(existing: Option<&OsStr>, lib: &Path) -> OsString {
    let mut out = lib.as_os_str().as_bytes().to_vec();
    for e in existing.into_iter().flat_map(entries).filter(|e| !is_library(e)) {
        out.push(b':');
        out.extend_from_slice(e);
    }
    OsString::from_vec(out)
}

/// `LD_PRELOAD` without the library; `None` if nothing is left.
pub fn without_library(existing: Option<&OsStr>) -> Option<OsString> {
    let kept: Vec<&[u8]> = existing.into_iter().flat_map(entries).filter(|e| !is_library(e)).collect();
    (!kept.is_empty()).then(|| OsString::from_vec(kept.join(&b':')))
}

/// Whether the library is mapped into this process (preloaded and actually loaded).
pub fn loaded_here() -> bool {
    std::fs::read("/proc/self/maps")
        .is_ok_and(|maps| maps.split(|&b| b == b'\n').any(|l| l.rsplit(|&b| b == b' ').next().is_some_and(is_library)))
}

/// Checks a port list as the library reads it: `5201,6379,8000-8100`.
pub fn check_ports(list: &str) -> Result<(), String> {
    let bad = |why: String| format!("bad port list {list:?}: {why} (example: 5201,6379,8000-8100)");
    let port = |p: &str| match p.trim().parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(bad(format!("{p:?} is not a port (1 to 65535)"))),
    };
    let mut any = false;
    for part in list.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(bad("empty entry".into()));
        }
        any = true;
        if let Some((a, b)) = part.split_once('-') {
            if port(a)? > port(b)? {
                return Err(bad(format!("range {part:?} runs backwards")));
            }
        } else {
            port(part)?;
        }
    }
    if !any {
        return Err(bad("no ports".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preload_lists() {
        let lib = Path::new("/x/liblanes_sockets.so");
        assert_eq!(with_library(None, lib), "/x/liblanes_sockets.so");
        assert_eq!(with_library(Some(OsStr::new("")), lib), "/x/liblanes_sockets.so");
        assert_eq!(
            with_library(Some(OsStr::new("/a/libfoo.so /old/liblanes_sockets.so:libbar.so")), lib),
            "/x/liblanes_sockets.so:/a/libfoo.so:libbar.so"
        );
        assert_eq!(without_library(Some(OsStr::new("/x/liblanes_sockets.so"))), None);
        assert_eq!(
            without_library(Some(OsStr::new("/x/liblanes_sockets.so:/a/libfoo.so"))),
            Some(OsString::from("/a/libfoo.so"))
        );
        assert_eq!(without_library(None), None);
    }

    #[test]
    fn port_lists() {
        for ok in ["5201", "5201,6379,8000-8100", " 1 , 65535 ", "7-7"] {
            check_ports(ok).unwrap();
        }
        for bad in ["", "0", "65536", "a", "5201,", "9-8", "1-", ",5"] {
            assert!(check_ports(bad).is_err(), "{bad}");
        }
    }
}
