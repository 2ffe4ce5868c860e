//! The peer process of a two-process measurement: this same executable, started with a
//! hidden role, killed and reaped when the measurement ends however it ends.

use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// A child process that is killed and reaped on drop unless it was waited for.
pub struct Peer {
    child: Option<Child>,
    what: String,
}

impl Peer {
    /// Starts this executable with `args` and extra environment `env`.
    pub fn spawn(what: &str, args: &[String], env: &[(&str, String)]) -> std::io::Result<Peer> {
        let mut cmd = Self::command(args, env)?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        Ok(Peer { child: Some(cmd.spawn()?), what: what.to_string() })
    }

    /// Starts this executable with its standard input and output as a control channel:
    /// returns the peer, the pipe to its stdin and the pipe from its stdout.
    pub fn spawn_piped(
        what: &str,
        args: &[String],
        env: &[(&str, String)],
    ) -> std::io::Result<(Peer, ChildStdin, ChildStdout)> {
        let mut cmd = Self::command(args, env)?;
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn()?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(std::io::Error::other("the peer's pipes were not created"));
            }
        };
        Ok((Peer { child: Some(child), what: what.to_string() }, stdin, stdout))
    }

    fn command(args: &[String], env: &[(&str, String)]) -> std::io::Result<Command> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.args(args).stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Ok(cmd)
    }

    /// Waits up to `timeout` for a clean exit; kills it otherwise. Err describes a failure.
    pub fn finish(mut self, timeout: std::time::Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
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
