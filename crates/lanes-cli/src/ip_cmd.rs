//! `lanes ip up|down`: the IP interface over the fabric (crates/lanes-ip,
//! docs/ip-interface.md).

use std::time::{Duration, Instant};

use lanes::config::FabricConfig;

#[derive(clap::Args)]
pub struct IpArgs {
    #[command(subcommand)]
    what: IpWhat,
}

#[derive(clap::Subcommand)]
enum IpWhat {
    /// Create the interface (lanes0) with this node's addresses and run it until SIGTERM or
    /// SIGINT, then remove it. Needs CAP_NET_ADMIN (root has it); drops every capability
    /// once the interface is set up.
    Up {
        /// The MTU (default: [ip] mtu of lanes.toml, else 65520).
        #[arg(long)]
        mtu: Option<u32>,
        /// Queues, each with a transmit and a receive thread (default: one per CPU).
        #[arg(long)]
        queues: Option<u32>,
        /// TSO/USO and checksum offload: on or off (default: [ip] offloads, else on).
        #[arg(long, value_name = "on|off")]
        offloads: Option<String>,
        /// The interface's name (default: [ip] name, else lanes0).
        #[arg(long)]
        name: Option<String>,
        /// Once the interface is set up, run as this account (a name or uid) instead of
        /// root, in its fabric directory: the user whose cluster daemon and programs share
        /// the fabric. Needs root (CAP_SETUID and CAP_SETGID) unless it is that user already.
        #[arg(long, value_name = "NAME")]
        user: Option<String>,
    },
    /// Stop the `lanes ip up` of a node of this host (default: this process's node), which
    /// removes its interface.
    Down {
        /// The node (default: LANES_NODE_ID, lanes.toml, else 4).
        #[arg(long)]
        node: Option<u32>,
    },
}

pub fn run(a: IpArgs) -> Result<(), String> {
    let fabric = FabricConfig::from_env().map_err(|e| e.to_string())?;
    match a.what {
        IpWhat::Up { mtu, queues, offloads, name, user } => {
            let file = lanes::config::ConfigFile::load_from_env().map_err(|e| e.to_string())?;
            let mut section = file.as_ref().and_then(|f| f.ip().cloned()).unwrap_or_default();
            if mtu.is_some() {
                section.mtu = mtu;
            }
            if queues.is_some() {
                section.queues = queues;
            }
            if name.is_some() {
                section.name = name;
            }
            match offloads.as_deref() {
                None => {}
                Some("on") => section.offloads = Some(true),
                Some("off") => section.offloads = Some(false),
                Some(o) => return Err(format!("--offloads {o:?}: on or off")),
            }
            let cfg = lanes_ip::IpConfig::from_section(Some(&section)).map_err(|e| format!("[ip] {e}"))?;
            let user = user
                .map(|u| lanes_ip::caps::Account::lookup(&u))
                .transpose()
                .map_err(|e| format!("ip up --user: {e}"))?;
            lanes_ip::run(cfg, fabric, user).map_err(|e| format!("ip up: {e}"))
        }
        IpWhat::Down { node } => {
            let node = node.unwrap_or(fabric.node_id.get());
            let up = lanes_ip::status::list(&fabric.dir);
            let s = up.iter().find(|s| s.node == node && s.alive).ok_or_else(|| {
                format!(
                    "ip down: no `lanes ip up` runs as node {node} on {} (one started with --user works in that \
                         user's fabric directory: run this as that user, or with LANES_DIR naming it)",
                    fabric.dir.display()
                )
            })?;
            // SAFETY: kill(2) with a pid read from the status file and a constant signal.
            if unsafe { libc::kill(s.pid as i32, libc::SIGTERM) } != 0 {
                return Err(format!("ip down: signalling pid {}: {}", s.pid, std::io::Error::last_os_error()));
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while lanes::platform::liveness::pid_running(s.pid) {
                if Instant::now() > deadline {
                    return Err(format!("ip down: pid {} still runs 10 s after SIGTERM", s.pid));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            println!("{} of node {node} is down", s.name);
            Ok(())
        }
    }
}
