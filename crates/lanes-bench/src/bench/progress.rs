//! A one-line progress bar on standard error, drawn only when standard error is a terminal.

use std::io::Write;
use std::time::{Duration, Instant};

pub(crate) struct Progress {
    enabled: bool,
    start: Instant,
    /// Planned end, for the time left.
    end: Instant,
    drawn: bool,
}

impl Progress {
    pub(crate) fn new(planned: Duration) -> Progress {
        // SAFETY: isatty has no preconditions.
        let tty = unsafe { libc::isatty(libc::STDERR_FILENO) } == 1;
        let start = Instant::now();
        Progress {
            enabled: tty && std::env::var_os("LANES_NO_PROGRESS").is_none(),
            start,
            end: start + planned,
            drawn: false,
        }
    }

    /// Shows `fraction` done (0..=1) and what runs now.
    pub(crate) fn show(&mut self, fraction: f64, what: &str) {
        if !self.enabled {
            return;
        }
        let f = fraction.clamp(0.0, 1.0);
        const WIDTH: usize = 30;
        let full = (f * WIDTH as f64).round() as usize;
        let now = Instant::now();
        let left = if f > 0.02 {
            let elapsed = (now - self.start).as_secs_f64();
            (elapsed / f - elapsed).max(0.0)
        } else {
            self.end.saturating_duration_since(now).as_secs_f64()
        };
        let mut line = format!(
            "\r[{}{}] {:>3.0}%  {:<34} {:>6} left",
            "#".repeat(full),
            "-".repeat(WIDTH - full),
            f * 100.0,
            what,
            fmt_secs(left)
        );
        line.push_str("\x1b[K");
        let mut e = std::io::stderr().lock();
        let _ = e.write_all(line.as_bytes());
        let _ = e.flush();
        self.drawn = true;
    }

    /// Clears the bar so that what follows starts on a clean line.
    pub(crate) fn clear(&mut self) {
        if self.drawn {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(b"\r\x1b[K");
            let _ = e.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// `42 s`, `3m05s`, `2h04m`.
pub(crate) fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s < 100 {
        format!("{s} s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    }
}
