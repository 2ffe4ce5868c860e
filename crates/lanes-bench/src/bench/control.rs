//! The control channel between `lanes bench` and its peer: the peer's standard input and
//! output, one line per command and one per answer. It carries set-up and the start and
//! end of each slice; no data moves over it and nothing on it is timed.
//!
//! ```text
//! hello                      -> ok <the peer's real-time status, JSON>
//! setup <path> <max> <offer> -> ok <reply>       the path's one-line exchange
//! lat <path> <size>          -> ok <cpu ns>      answers round trips until told to stop
//! tput <path> <size>         -> ok <cpu ns> <n>  receives until the stream closes
//! teardown                   -> ok               ends every path set up
//! quit                       -> ok               and exits
//! any failure                -> err <message>
//! ```
//!
//! The peer ignores SIGINT (the client decides when to stop) and exits when its input
//! closes, so it never outlives the client.
//!
//! Across hosts (`--transport ofi`) the same commands go over a TCP connection to
//! `lanes bench --serve` instead ([`Control::connect`]); the server adds its own commands
//! for the baseline programs it starts (`remote.rs`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use crate::bench::paths::{self, Kind, PeerPath, SetupEnv};
use crate::bench::wait::{poll_ready, Waiter};
use crate::measure::peer::Peer;
use crate::measure::{affinity, cputime, rt};

/// The client's end.
pub(crate) struct Control {
    /// The peer process when this process started it (a local run).
    peer: Option<Peer>,
    to: Box<dyn Write + Send>,
    from: BufReader<Box<dyn Read + Send>>,
    fd: RawFd,
}

impl Control {
    pub(crate) fn spawn(args: &[String], env: &[(&str, String)]) -> Result<Control, String> {
        let (peer, to, from) =
            Peer::spawn_piped("the bench peer", args, env).map_err(|e| format!("starting the peer: {e}"))?;
        let fd = from.as_raw_fd();
        Ok(Control { peer: Some(peer), to: Box::new(to), from: BufReader::new(Box::new(from)), fd })
    }

    /// A connection to `lanes bench --serve` at `addr`.
    pub(crate) fn connect(addr: SocketAddr, timeout: Duration) -> Result<Control, String> {
        let s = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("connecting to `lanes bench --serve` at {addr}: {e}"))?;
        let _ = s.set_nodelay(true);
        let r = s.try_clone().map_err(|e| format!("the control connection: {e}"))?;
        let fd = r.as_raw_fd();
        Ok(Control { peer: None, to: Box::new(s), from: BufReader::new(Box::new(r)), fd })
    }

    /// The descriptor to watch for the peer hanging up or reporting an error mid-slice.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    pub(crate) fn send(&mut self, line: &str) -> Result<(), String> {
        writeln!(self.to, "{line}").and_then(|_| self.to.flush()).map_err(|e| format!("the peer is gone ({e})"))
    }

    /// The next answer: `Ok(rest)` for `ok rest`, the peer's message for `err`.
    pub(crate) fn recv(&mut self, timeout: Duration) -> Result<String, String> {
        if self.from.buffer().is_empty() && !poll_ready(self.fd(), timeout.as_millis().min(i32::MAX as u128) as i32) {
            return Err(format!("the peer did not answer within {} s", timeout.as_secs()));
        }
        let mut line = String::new();
        match self.from.read_line(&mut line) {
            Ok(0) => Err("the peer exited".into()),
            Ok(_) => {
                let line = line.trim_end();
                if let Some(rest) = line.strip_prefix("ok") {
                    Ok(rest.trim_start().to_string())
                } else if let Some(rest) = line.strip_prefix("err ") {
                    Err(format!("the peer: {rest}"))
                } else {
                    Err(format!("the peer said {line:?}"))
                }
            }
            Err(e) => Err(format!("reading from the peer: {e}")),
        }
    }

    pub(crate) fn call(&mut self, line: &str, timeout: Duration) -> Result<String, String> {
        self.send(line)?;
        self.recv(timeout)
    }

    /// After a failed slice: the peer's own account, if it gives one promptly.
    pub(crate) fn explain(&mut self, what: String) -> String {
        match self.recv(Duration::from_secs(2)) {
            Err(peer) if peer.starts_with("the peer: ") => format!("{what}; {peer}"),
            _ => what,
        }
    }

    /// Tells the peer to quit and reaps it.
    pub(crate) fn finish(mut self) -> Result<(), String> {
        let said = self.call("quit", Duration::from_secs(10));
        let peer = self.peer.take();
        let ended = peer.map_or(Ok(()), |p| p.finish(Duration::from_secs(10)));
        said.and(ended)
    }
}

/// The peer process: `lanes bench --peer`. Answers commands on stdin until `quit` or EOF.
pub(crate) fn serve(cpu: Option<usize>, realtime: bool) -> Result<(), String> {
    // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    if let Some(c) = cpu {
        affinity::pin_to(c).map_err(|e| format!("pinning the peer to cpu {c}: {e}"))?;
    }
    let rt_status = realtime.then(rt::enter);
    let single_cpu = cpu.is_none() && affinity::allowed_cpus().len() < 2;
    let wait = Waiter::new(Some(std::io::stdin().as_raw_fd()), single_cpu, realtime);
    let mut input = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    serve_on(&mut input, &mut out, &wait, rt_status.as_ref(), &mut |_| None)
}

/// Handles a command the path protocol does not know: `None` if it does not know it either.
pub(crate) type ExtraCommands<'a> = dyn FnMut(&str) -> Option<Result<String, String>> + 'a;

/// Answers commands from `input` on `out` until `quit` or the end of the input; `extra`
/// answers commands beyond the path protocol's.
pub(crate) fn serve_on(
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    wait: &Waiter,
    rt_status: Option<&rt::RtStatus>,
    extra: &mut ExtraCommands<'_>,
) -> Result<(), String> {
    let mut active: Vec<(&'static str, Box<dyn PeerPath>)> = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        match input.read_line(&mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("reading commands: {e}")),
        }
        let cmd = line.trim_end();
        let quit = cmd == "quit";
        let answer = if quit {
            Ok(String::new())
        } else {
            extra(cmd).unwrap_or_else(|| handle(cmd, &mut active, wait, rt_status))
        };
        let text = match answer {
            Ok(s) if s.is_empty() => "ok".to_string(),
            Ok(s) => format!("ok {s}"),
            Err(e) => format!("err {}", e.replace('\n', " ")),
        };
        writeln!(out, "{text}").and_then(|_| out.flush()).map_err(|e| format!("answering: {e}"))?;
        if quit {
            return Ok(());
        }
    }
}

fn handle(
    cmd: &str,
    active: &mut Vec<(&'static str, Box<dyn PeerPath>)>,
    wait: &Waiter,
    rt_status: Option<&rt::RtStatus>,
) -> Result<String, String> {
    let mut words = cmd.splitn(4, ' ');
    let verb = words.next().unwrap_or("");
    match verb {
        "hello" => match rt_status {
            Some(s) => serde_json::to_string(s).map_err(|e| e.to_string()),
            None => Ok("-".into()),
        },
        "setup" => {
            let name = words.next().ok_or("setup: no path")?;
            let max: usize = words.next().and_then(|m| m.parse().ok()).ok_or("setup: bad size")?;
            let offer = words.next().unwrap_or("");
            let def = paths::find(name).ok_or_else(|| format!("unknown path {name:?}"))?;
            let (_, peer) = def.setups().map_err(|e| format!("path {name}: {e}"))?;
            let (p, reply) = peer(&SetupEnv { max_size: max }, offer)?;
            active.retain(|(n, _)| *n != def.name);
            active.push((def.name, p));
            Ok(reply)
        }
        "teardown" => {
            active.clear();
            Ok(String::new())
        }
        "lat" | "tput" => {
            let name = words.next().ok_or("no path")?;
            let size: usize = words.next().and_then(|m| m.parse().ok()).ok_or("bad size")?;
            let (_, p) =
                active.iter_mut().find(|(n, _)| *n == name).ok_or_else(|| format!("path {name} not set up"))?;
            let cpu0 = cputime::process_cpu_ns();
            let kind = if verb == Kind::Latency.word() { Kind::Latency } else { Kind::Throughput };
            match kind {
                Kind::Latency => {
                    p.latency(size, wait)?;
                    Ok(format!("{}", cputime::process_cpu_ns().saturating_sub(cpu0)))
                }
                Kind::Throughput => {
                    let n = p.throughput(size, wait)?;
                    Ok(format!("{} {n}", cputime::process_cpu_ns().saturating_sub(cpu0)))
                }
            }
        }
        other => Err(format!("unknown command {other:?}")),
    }
}
