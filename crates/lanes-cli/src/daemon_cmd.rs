//! `lanes daemon`: the per-host control-plane daemon, in the foreground.
//!
//! Everything it does is `lanes::cluster::daemon::run`; this only picks the configuration.
//! It logs to stderr and stops cleanly on SIGTERM or SIGINT (systemd's stop, Ctrl-C),
//! removing its socket. dist/lanes-daemon.service runs it as a systemd user unit.
//!
//! With public keys in lanes.toml it proves this host's key to the other daemons and talks
//! to them over encrypted links; without, it serves loopback only and says so (and makes
//! this host's key on first start, printing the line to add to lanes.toml).

use std::path::PathBuf;

use lanes::cluster::daemon::{self, DaemonOptions};

#[derive(clap::Args)]
pub struct DaemonArgs {
    /// The cluster configuration (default: LANES_CONFIG, else /etc/lanes/lanes.toml).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// This host's name in the configuration (default: LANES_HOST, else the host name).
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// This host's key file (default: LANES_KEY_FILE, else `[cluster] key_file`, else
    /// /etc/lanes/host.key for root, ~/.config/lanes/host.key for others). Made on first
    /// start when missing.
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
}

pub fn run(a: DaemonArgs) -> Result<(), String> {
    let path = a.config.unwrap_or_else(lanes::config::config_path_from_env);
    let mut options = DaemonOptions::load(&path, a.host).map_err(|e| format!("daemon: {e}"))?;
    if a.key.is_some() {
        options.key_file = a.key;
    }
    daemon::run(options).map_err(|e| format!("daemon: {e}"))
}
