//! The peer process of a two-process measurement: this same executable, started with a
//! hidden role, killed and reaped when the measurement ends however it ends.

use std::process::{Child, Command, Stdio};

/// A child process that is killed and reaped on drop unless it was waited for.
pub struct Peer {
    child: Option<Child>,
    what: String,
}

impl Peer {
    /// Starts this executable with `args` and extra environment `env`.
    pub fn spawn(what: &str, args: &[String], env: &[(&str, String)]) -> std::io::Result<Peer> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Ok(Peer { child: Some(cmd.spawn()?), what: what.to_string() })
    }

    /// Waits up to `timeout` for a clean exit; kills it otherwise. Err describes a failure.
    pub fn finish(mut self, timeout: std::time::Duration) -> Result<(), String> {
        let mut child = self.child.take().expect("peer present until finished");
        let start = std::time::Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(st)) if st.success() => return Ok(()),
                Ok(Some(st)) => return Err(format!("{} exited with {st}", self.what)),
                Ok(None) if start.elapsed() < timeout => std::thread::sleep(std::time::Duration::from_millis(5)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{} did not exit within {timeout:?}; killed", self.what));
                }
                Err(e) => return Err(format!("waiting for {}: {e}", self.what)),
            }
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
