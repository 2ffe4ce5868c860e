//! The cluster secret: with `[cluster] secret_file`, two daemons talk only after each has
//! proved that it knows the secret. With host keys in lanes.toml (`super::identity`), the
//! secret is the pre-shared key of the Noise handshake (`super::link`, `XXpsk3`), a second
//! factor beside each host's own key; what follows is the proof used on links without
//! keys (loopback only).
//!
//! The proof is a challenge and response in the hello exchange: each side sends a fresh
//! random nonce and answers the other's with HMAC-SHA256(secret, role, the other's nonce,
//! its own nonce, its host name). A recorded answer is worthless on another connection
//! (new nonces), and the role keeps one side's answer from serving as the other's. The
//! secret itself never crosses the wire. Messages after the hello are not authenticated
//! or encrypted: the control connection is as trustworthy as the network under it, which
//! is the guarantee the secret is meant to add, not confidentiality.

use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::platform::files::read_private_file;
use crate::platform::{hex, random_u64, unhex};

/// The fewest bytes a secret may have.
pub const MIN_SECRET_BYTES: usize = 16;

/// Which side of a hello exchange answers a challenge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The daemon that dialled.
    Dialler,
    /// The daemon that accepted.
    Acceptor,
}

impl Role {
    fn tag(self) -> &'static [u8] {
        match self {
            Role::Dialler => b"lanes cluster hello: dialler\0",
            Role::Acceptor => b"lanes cluster hello: acceptor\0",
        }
    }
}

/// The shared secret, as read from `secret_file`.
#[derive(Clone)]
pub struct ClusterSecret(Vec<u8>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)") // never the bytes
    }
}

impl ClusterSecret {
    /// Reads the secret from `path`: a regular file that only its owner may read or
    /// write (mode 0600 or stricter), owned by this user, with at least
    /// [`MIN_SECRET_BYTES`] bytes once surrounding white space is trimmed. The error is a
    /// sentence naming the file.
    pub fn load(path: &Path) -> Result<ClusterSecret, String> {
        let shown = path.display();
        let bytes = read_private_file(path, "cluster secret")?;
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "cluster secret {shown} has {} bytes; it needs at least {MIN_SECRET_BYTES} (for example: \
                 head -c 32 /dev/urandom | base64 > {shown})",
                trimmed.len()
            ));
        }
        Ok(ClusterSecret(trimmed.to_vec()))
    }

    /// The pre-shared key the secret gives keyed links (`super::link`): its SHA-256.
    pub fn psk(&self) -> [u8; 32] {
        use sha2::Digest;
        Sha256::digest(&self.0).into()
    }

    /// A fresh challenge for one hello exchange: 128 random bits, in hex.
    pub fn nonce() -> String {
        format!("{:016x}{:016x}", random_u64(), random_u64())
    }

    /// The answer of `role` on host `host` to the other side's `challenge`, having sent
    /// `own` as its own challenge; in hex.
    pub fn proof(&self, role: Role, challenge: &str, own: &str, host: &str) -> String {
        hex(&self.mac(role, challenge, own, host).finalize().into_bytes())
    }

    /// Whether `proof` is the answer of `role` on `host` to `challenge` (compared in
    /// constant time).
    pub fn verify(&self, proof: &str, role: Role, challenge: &str, own: &str, host: &str) -> bool {
        let Some(bytes) = unhex(proof) else { return false };
        self.mac(role, challenge, own, host).verify_slice(&bytes).is_ok()
    }

    fn mac(&self, role: Role, challenge: &str, own: &str, host: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        for part in [role.tag(), challenge.as_bytes(), b"\0", own.as_bytes(), b"\0", host.as_bytes()] {
            mac.update(part);
        }
        mac
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn secret_file(name: &str, text: &[u8], mode: u32) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("lanes-secret-{name}-{}", std::process::id()));
        fs::write(&p, text).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn a_proof_verifies_only_for_its_role_nonces_and_host() {
        let p = secret_file("good", b"correct horse battery staple\n", 0o600);
        let s = ClusterSecret::load(&p).unwrap();
        let _ = fs::remove_file(&p);
        let (c, o) = (ClusterSecret::nonce(), ClusterSecret::nonce());
        assert_ne!(c, o, "nonces are fresh");
        let proof = s.proof(Role::Acceptor, &c, &o, "a");
        assert!(s.verify(&proof, Role::Acceptor, &c, &o, "a"));
        assert!(!s.verify(&proof, Role::Dialler, &c, &o, "a"), "the other role");
        assert!(!s.verify(&proof, Role::Acceptor, &o, &c, "a"), "nonces swapped");
        assert!(!s.verify(&proof, Role::Acceptor, &c, &o, "b"), "another host");
        assert!(!s.verify("", Role::Acceptor, &c, &o, "a"));
        assert!(!s.verify("zz", Role::Acceptor, &c, &o, "a"));
        let other = ClusterSecret(b"another secret of enough bytes".to_vec());
        assert!(!other.verify(&proof, Role::Acceptor, &c, &o, "a"), "another secret");
        assert!(!format!("{s:?}").contains("horse"), "Debug shows no secret");
    }

    #[test]
    fn weak_or_exposed_secrets_are_refused_with_a_reason() {
        let p = secret_file("open", b"correct horse battery staple", 0o644);
        assert!(ClusterSecret::load(&p).unwrap_err().contains("mode 644"));
        let _ = fs::remove_file(&p);
        let p = secret_file("short", b"  too short \n", 0o600);
        assert!(ClusterSecret::load(&p).unwrap_err().contains("at least 16"));
        let _ = fs::remove_file(&p);
        let e = ClusterSecret::load(Path::new("/nonexistent/lanes-secret")).unwrap_err();
        assert!(e.contains("/nonexistent/lanes-secret"), "{e}");
    }
}
