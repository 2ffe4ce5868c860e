//! `lanes keygen`: makes this host's key (its identity among the cluster's daemons) and
//! prints the public key to list in lanes.toml.
//!
//! The key file (mode 0600) goes to `--out`, else where `lanes daemon` looks for it:
//! `LANES_KEY_FILE`, `[cluster] key_file` of the configuration, /etc/lanes/host.key for
//! root, `~/.config/lanes/host.key` for other users. An existing file is never replaced;
//! `--show` prints the public key of an existing one.

use std::path::PathBuf;

use lanes::cluster::identity::{self, HostKey};

#[derive(clap::Args)]
pub struct KeygenArgs {
    /// Where to write the key (default: where `lanes daemon` reads it).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Print the public key of the existing key file instead of making one.
    #[arg(long)]
    show: bool,
}

pub fn run(a: KeygenArgs) -> Result<(), String> {
    let path = match a.out {
        Some(p) => p,
        None => {
            // The configuration's key_file, if there is a readable configuration with one.
            let config = lanes::config::ConfigFile::load(&lanes::config::config_path_from_env()).ok();
            let configured = config.as_ref().and_then(|f| f.cluster()).and_then(|c| c.key_file.clone());
            identity::key_path(configured.as_deref())
        }
    };
    let key = if a.show { HostKey::load(&path)? } else { HostKey::create(&path)? };
    let verb = if a.show { "host key" } else { "wrote host key" };
    eprintln!("{verb} {} (keep it secret: mode 0600)", path.display());
    eprintln!("add to this host's [[node]] entries in lanes.toml, on every host:");
    println!("public_key = \"{}\"", key.public());
    Ok(())
}
