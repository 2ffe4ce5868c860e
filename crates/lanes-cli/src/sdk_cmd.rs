//! `lanes sdk install|uninstall`: the SISCI SDK for C programs — the headers, `libsisci.so`
//! and a pkg-config file under a prefix (default `/opt/DIS`, where build files of SISCI
//! programs look), with the library path registered so that programs run without
//! `LD_LIBRARY_PATH`.
//!
//! The headers are embedded in this binary; `libsisci.so` is taken from beside it (the same
//! cargo target directory) unless `--lib` names it. Install writes a manifest of what it
//! wrote; uninstall removes exactly that.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where SISCI build files look for the SDK.
pub const DEFAULT_PREFIX: &str = "/opt/DIS";
/// The loader configuration that registers the library directory.
const LD_CONF: &str = "/etc/ld.so.conf.d/lanes-sisci.conf";
/// The manifest, under the prefix.
const MANIFEST: &str = "share/lanes/sisci-sdk.manifest";

/// The headers, as (path under `include/`, contents).
const HEADERS: &[(&str, &str)] = &[
    ("sisci_api.h", include_str!("../../lanes-sisci/include/sisci_api.h")),
    ("sisci_types.h", include_str!("../../lanes-sisci/include/sisci_types.h")),
    ("sisci_error.h", include_str!("../../lanes-sisci/include/sisci_error.h")),
    ("sisci_api_macros.h", include_str!("../../lanes-sisci/include/sisci_api_macros.h")),
    ("dis_types.h", include_str!("../../lanes-sisci/include/dis_types.h")),
    ("dis/dis_types.h", include_str!("../../lanes-sisci/include/dis/dis_types.h")),
];

#[derive(clap::Args)]
pub struct SdkArgs {
    #[command(subcommand)]
    action: SdkAction,
}

#[derive(clap::Subcommand)]
enum SdkAction {
    /// Install include/, include/dis/, lib64/libsisci.so and lib64/pkgconfig/sisci.pc under
    /// the prefix, and register lib64 with the dynamic loader (ld.so.conf.d + ldconfig).
    Install {
        /// Where to install.
        #[arg(long, default_value = DEFAULT_PREFIX)]
        prefix: PathBuf,
        /// Do not register the library directory with the loader (programs then need
        /// LD_LIBRARY_PATH or -Wl,-rpath; the pkg-config file adds the rpath).
        #[arg(long)]
        no_ldconfig: bool,
        /// The libsisci.so to install (default: the one beside this lanes binary).
        #[arg(long, value_name = "PATH")]
        lib: Option<PathBuf>,
    },
    /// Remove exactly what `lanes sdk install` wrote under the prefix.
    Uninstall {
        /// Where it was installed.
        #[arg(long, default_value = DEFAULT_PREFIX)]
        prefix: PathBuf,
        /// Do not run ldconfig after removing the registration.
        #[arg(long)]
        no_ldconfig: bool,
    },
}

/// Runs `lanes sdk ...`.
pub fn run(args: SdkArgs) -> Result<(), String> {
    match args.action {
        SdkAction::Install { prefix, no_ldconfig, lib } => install(&prefix, lib.as_deref(), !no_ldconfig),
        SdkAction::Uninstall { prefix, no_ldconfig } => uninstall(&prefix, !no_ldconfig),
    }
}

/// What an install wrote, in order: directories it created, files, the loader registration.
#[derive(Default)]
struct Manifest {
    dirs: Vec<PathBuf>,
    files: Vec<PathBuf>,
    ld_conf: Option<PathBuf>,
}

impl Manifest {
    fn load(path: &Path) -> Result<Option<Manifest>, String> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("reading {}: {e}", path.display())),
        };
        let mut m = Manifest::default();
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("dir", p)) => m.dirs.push(p.into()),
                Some(("file", p)) => m.files.push(p.into()),
                Some(("ldconf", p)) => m.ld_conf = Some(p.into()),
                _ if line.trim().is_empty() || line.starts_with('#') => {}
                _ => return Err(format!("{}: unexpected line {line:?}", path.display())),
            }
        }
        Ok(Some(m))
    }

    fn text(&self) -> String {
        let mut s = String::from("# written by `lanes sdk install`; read by `lanes sdk uninstall`\n");
        for d in &self.dirs {
            s += &format!("dir {}\n", d.display());
        }
        for f in &self.files {
            s += &format!("file {}\n", f.display());
        }
        if let Some(c) = &self.ld_conf {
            s += &format!("ldconf {}\n", c.display());
        }
        s
    }

    fn add_file(&mut self, p: PathBuf) {
        if !self.files.contains(&p) {
            self.files.push(p);
        }
    }
}

/// The libsisci.so to install: `--lib`, else the one beside this executable.
fn find_library(given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return if p.is_file() { Ok(p.to_path_buf()) } else { Err(format!("--lib {}: no such file", p.display())) };
    }
    let exe = std::env::current_exe().map_err(|e| format!("locating the lanes executable: {e}"))?;
    let dir = exe.parent().ok_or("the lanes executable has no directory")?;
    // In a cargo target directory the library is built into deps/ and copied up beside the
    // binary only when it is built as a package of its own: take the newest.
    let candidates = [dir.join("libsisci.so"), dir.join("deps/libsisci.so"), dir.join("../lib/libsisci.so")];
    let modified = |p: &PathBuf| fs::metadata(p).and_then(|m| m.modified()).ok();
    candidates.iter().filter(|p| p.is_file()).max_by_key(|p| modified(p)).cloned().ok_or_else(|| {
        format!(
            "libsisci.so not found beside {} (build it with `cargo build -p lanes-sisci` in the same \
             profile, or pass --lib PATH)",
            exe.display()
        )
    })
}

/// Creates `dir` and its missing parents, recording the ones it created.
fn make_dirs(dir: &Path, created: &mut Vec<PathBuf>) -> Result<(), String> {
    let mut missing = Vec::new();
    let mut d = Some(dir);
    while let Some(p) = d {
        if p.exists() {
            break;
        }
        missing.push(p.to_path_buf());
        d = p.parent();
    }
    for p in missing.into_iter().rev() {
        fs::create_dir(&p).map_err(|e| format!("creating {}: {e}", p.display()))?;
        if !created.contains(&p) {
            created.push(p);
        }
    }
    Ok(())
}

/// Writes a file by renaming a complete temporary copy over it, so that a program running
/// with the old library keeps its mapping intact.
fn write_file(path: &Path, contents: &[u8], mode: u32) -> Result<(), String> {
    let tmp = path.with_extension(format!("lanes-tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(contents)?;
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        format!("writing {}: {e}", path.display())
    })
}

fn pkg_config(prefix: &Path) -> String {
    format!(
        "# SISCI API on the Lanes fabric (installed by `lanes sdk install`)\n\
         prefix={}\n\
         includedir=${{prefix}}/include\n\
         libdir=${{prefix}}/lib64\n\
         \n\
         Name: sisci\n\
         Description: SISCI shared-memory cluster interconnect API over the Lanes software fabric\n\
         Version: {}\n\
         Cflags: -D_REENTRANT -pthread -I${{includedir}} -I${{includedir}}/dis\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lsisci -pthread\n",
        prefix.display(),
        env!("CARGO_PKG_VERSION")
    )
}

fn ldconfig() -> Result<(), String> {
    let status = Command::new("ldconfig").status().map_err(|e| format!("running ldconfig: {e}"))?;
    if !status.success() {
        return Err(format!("ldconfig failed ({status})"));
    }
    Ok(())
}

fn absolute(prefix: &Path) -> Result<PathBuf, String> {
    if prefix.is_absolute() {
        Ok(prefix.to_path_buf())
    } else {
        Ok(std::env::current_dir().map_err(|e| format!("current directory: {e}"))?.join(prefix))
    }
}

fn install(prefix: &Path, lib: Option<&Path>, register: bool) -> Result<(), String> {
    let prefix = absolute(prefix)?;
    let library = find_library(lib)?;
    let lib_bytes = fs::read(&library).map_err(|e| format!("reading {}: {e}", library.display()))?;
    let manifest_path = prefix.join(MANIFEST);
    let mut m = Manifest::load(&manifest_path)?.unwrap_or_default();

    let include = prefix.join("include");
    let lib64 = prefix.join("lib64");
    for d in [include.join("dis"), lib64.join("pkgconfig"), manifest_path.parent().expect("has a parent").into()] {
        make_dirs(&d, &mut m.dirs)?;
    }
    for (name, text) in HEADERS {
        let p = include.join(name);
        write_file(&p, text.as_bytes(), 0o644)?;
        m.add_file(p);
    }
    let so = lib64.join("libsisci.so");
    write_file(&so, &lib_bytes, 0o755)?;
    m.add_file(so.clone());
    let pc = lib64.join("pkgconfig/sisci.pc");
    write_file(&pc, pkg_config(&prefix).as_bytes(), 0o644)?;
    m.add_file(pc);
    // The manifest is written before registering, so that a failed registration can still
    // be uninstalled.
    write_file(&manifest_path, m.text().as_bytes(), 0o644)?;

    if register {
        let conf = PathBuf::from(LD_CONF);
        let text = format!("# libsisci.so of the Lanes SISCI SDK (lanes sdk install)\n{}\n", lib64.display());
        write_file(&conf, text.as_bytes(), 0o644)
            .map_err(|e| format!("{e}\n(registering needs root; use --no-ldconfig to skip it)"))?;
        m.ld_conf = Some(conf);
        write_file(&manifest_path, m.text().as_bytes(), 0o644)?;
        ldconfig()?;
    }

    println!("installed the SISCI SDK (Lanes) in {}", prefix.display());
    let names: Vec<&str> = HEADERS.iter().map(|(n, _)| *n).collect();
    println!("  headers  {}/{{{}}}", include.display(), names.join(", "));
    println!("  library  {} (from {})", so.display(), library.display());
    println!("  pkg-config {}/pkgconfig/sisci.pc", lib64.display());
    if register {
        println!("  registered {} with the dynamic loader ({LD_CONF})", lib64.display());
    } else {
        println!("  not registered with the loader: run programs with LD_LIBRARY_PATH={}", lib64.display());
    }
    println!(
        "build: cc -D_REENTRANT -pthread -I{inc} -I{inc}/dis prog.c -L{lib} -lsisci",
        inc = include.display(),
        lib = lib64.display()
    );
    Ok(())
}

fn uninstall(prefix: &Path, run_ldconfig: bool) -> Result<(), String> {
    let prefix = absolute(prefix)?;
    let manifest_path = prefix.join(MANIFEST);
    let m = Manifest::load(&manifest_path)?.ok_or_else(|| {
        format!("no SDK installed by lanes in {} ({} is missing)", prefix.display(), manifest_path.display())
    })?;
    let mut removed = 0;
    for f in &m.files {
        match fs::remove_file(f) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("removing {}: {e}", f.display())),
        }
    }
    let mut unregistered = false;
    if let Some(conf) = &m.ld_conf {
        // Only if it still registers this prefix (a later install elsewhere may own it now).
        let ours =
            fs::read_to_string(conf).is_ok_and(|t| t.lines().any(|l| Path::new(l.trim()) == prefix.join("lib64")));
        if ours {
            fs::remove_file(conf).map_err(|e| format!("removing {}: {e}", conf.display()))?;
            unregistered = true;
        }
    }
    fs::remove_file(&manifest_path).map_err(|e| format!("removing {}: {e}", manifest_path.display()))?;
    // Directories the install created, deepest first, if nothing else was put in them.
    let mut dirs = m.dirs.clone();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &dirs {
        let _ = fs::remove_dir(d);
    }
    if unregistered && run_ldconfig {
        ldconfig()?;
    }
    println!(
        "removed the SISCI SDK from {} ({removed} files{})",
        prefix.display(),
        if unregistered { ", loader registration" } else { "" }
    );
    Ok(())
}
