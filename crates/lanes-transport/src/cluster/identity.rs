//! Host identity: each host's daemon holds a private X25519 key (its *host key*), and
//! `lanes.toml` lists every host's public key (`public_key` in its `[[node]]` entries). The
//! daemons' links ([`super::link`]) are Noise handshakes with these static keys, so a daemon
//! proves it holds its host's key, and learns that the other one holds the key listed for
//! the host it claims to be.
//!
//! The key file holds the private key in hex on its one non-comment line (a comment line
//! shows the public key); it must be a regular file of this user with mode 0600 or
//! stricter. `lanes keygen` writes one and prints the public key; `lanes daemon` writes
//! one at the default path on first start when none exists. No cryptography is done here:
//! keys are made and their public halves computed by `snow`'s X25519 (curve25519-dalek).

use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use snow::params::DHChoice;
use snow::resolvers::{CryptoResolver, DefaultResolver};

use crate::platform::files::read_private_file;
use crate::platform::{hex, unhex};

// A public key is a value of the lanes.toml schema (below the control plane); it is named
// here too, beside the host keys it is the public half of.
pub use crate::config::cluster::{PublicKey, KEY_LEN};

/// The environment variable naming the host key file (overrides `[cluster] key_file`).
pub const KEY_FILE_VAR: &str = "LANES_KEY_FILE";
/// The host key file of a daemon run as root, when nothing names another.
pub const SYSTEM_KEY_FILE: &str = "/etc/lanes/host.key";

/// A host's key pair (the private half never leaves the process but for its file).
#[derive(Clone)]
pub struct HostKey {
    private: [u8; KEY_LEN],
    public: PublicKey,
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HostKey {{ public: {} }}", self.public) // never the private key
    }
}

impl Drop for HostKey {
    fn drop(&mut self) {
        self.private = [0; KEY_LEN];
    }
}

fn dh() -> Result<Box<dyn snow::types::Dh>, String> {
    DefaultResolver.resolve_dh(&DHChoice::Curve25519).ok_or_else(|| "no X25519 in this build of snow".to_string())
}

impl HostKey {
    /// A fresh key pair from the operating system's random source.
    pub fn generate() -> Result<HostKey, String> {
        let mut dh = dh()?;
        let mut rng = DefaultResolver.resolve_rng().ok_or("no random source in this build of snow")?;
        dh.generate(&mut *rng).map_err(|e| format!("generating a host key: {e}"))?;
        Self::from_private(dh.privkey())
    }

    /// The key pair of a private key.
    pub fn from_private(private: &[u8]) -> Result<HostKey, String> {
        let private: [u8; KEY_LEN] =
            private.try_into().map_err(|_| format!("a host key has {KEY_LEN} bytes, not {}", private.len()))?;
        let mut dh = dh()?;
        dh.set(&private);
        let public = PublicKey::from_bytes(dh.pubkey()).ok_or("X25519 gave a public key of another length")?;
        Ok(HostKey { private, public })
    }

    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// The private key, for the handshake.
    pub fn private(&self) -> &[u8; KEY_LEN] {
        &self.private
    }

    /// Reads the key file `path`: a regular file of this user that nobody else may read or
    /// write (mode 0600 or stricter). The error is a sentence naming the file.
    pub fn load(path: &Path) -> Result<HostKey, String> {
        let shown = path.display();
        let bytes = read_private_file(path, "host key")?;
        let text = String::from_utf8(bytes).map_err(|_| format!("host key {shown} is not text"))?;
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#'));
        let (Some(line), None) = (lines.next(), lines.next()) else {
            return Err(format!("host key {shown}: expected one line of {} hex digits", 2 * KEY_LEN));
        };
        let bytes = unhex(line).filter(|b| b.len() == KEY_LEN).ok_or_else(|| {
            format!("host key {shown}: not {} hex digits (write a new one: lanes keygen)", 2 * KEY_LEN)
        })?;
        Self::from_private(&bytes).map_err(|e| format!("host key {shown}: {e}"))
    }

    /// Writes a new key pair to `path` (mode 0600, its directory made if missing); refuses to
    /// replace an existing file.
    pub fn create(path: &Path) -> Result<HostKey, String> {
        let shown = path.display();
        let key = Self::generate()?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        let mut f =
            fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => format!("host key {shown} exists already (remove it first)"),
                _ => format!("creating host key {shown}: {e}"),
            })?;
        let text = format!(
            "# lanes host key (X25519 private key). Keep it secret. public_key = \"{}\"\n{}\n",
            key.public,
            hex(&key.private)
        );
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("writing host key {shown}: {e}"))?;
        Ok(key)
    }

    /// The key at `path`, created there first if there is no file (`true` then).
    pub fn load_or_create(path: &Path) -> Result<(HostKey, bool), String> {
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::create(path).map(|k| (k, true)),
            _ => Self::load(path).map(|k| (k, false)),
        }
    }
}

/// Where this host's key file is: `LANES_KEY_FILE`, else `configured` (`[cluster]
/// key_file`), else /etc/lanes/host.key for root and `~/.config/lanes/host.key` (or under
/// `XDG_CONFIG_HOME`) for other users.
pub fn key_path(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = std::env::var_os(KEY_FILE_VAR).filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from(SYSTEM_KEY_FILE);
    }
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let config = var("XDG_CONFIG_HOME").or_else(|| var("HOME").map(|h| h.join(".config")));
    config.unwrap_or_else(|| PathBuf::from(".")).join("lanes").join("host.key")
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lanes-identity-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn keys_round_trip_through_their_file_and_text() {
        let d = scratch("round");
        let path = d.join("sub").join("host.key");
        let (k, created) = HostKey::load_or_create(&path).unwrap();
        assert!(created);
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let (again, created) = HostKey::load_or_create(&path).unwrap();
        assert!(!created);
        assert_eq!(again.public(), k.public());
        assert_eq!(PublicKey::parse(&k.public().to_string()).unwrap(), *k.public());
        assert!(HostKey::create(&path).unwrap_err().contains("exists already"));
        assert!(!format!("{k:?}").contains(&hex(k.private())), "Debug shows no private key");
        let other = HostKey::generate().unwrap();
        assert_ne!(other.public(), k.public(), "fresh keys");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(HostKey::load(&path).unwrap_err().contains("mode 644"));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&path, "# nothing\nzz\n").unwrap();
        assert!(HostKey::load(&path).unwrap_err().contains("hex digits"));
        for bad in ["", "abcd", &"0".repeat(64), &"g".repeat(64)] {
            assert!(PublicKey::parse(bad).is_err(), "{bad:?}");
        }
        let _ = fs::remove_dir_all(&d);
    }
}
