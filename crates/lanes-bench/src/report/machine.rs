//! What machine a run was on, and dates without a date library.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The machine, as the JSON, the table and the plot titles name it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub(crate) struct Machine {
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// Online CPUs.
    pub cores: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    pub hostname: String,
    /// When the run started, UTC, ISO 8601.
    pub date: String,
    /// The `lanes` version that measured.
    pub lanes_version: String,
}

impl Machine {
    pub(crate) fn this(start: SystemTime) -> Machine {
        Machine {
            cpu_model: cpu_model(),
            cores: online_cpus(),
            kernel: kernel_release(),
            hostname: lanes::config::hostname(),
            date: utc_iso(start),
            lanes_version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// `AMD EPYC, 2 cores, Linux 6.1.0, 2026-01-31 12:00 UTC`.
    pub(crate) fn title(&self) -> String {
        let date = self.date.get(..16).map(|d| d.replace('T', " ") + " UTC").unwrap_or_else(|| self.date.clone());
        format!("{}, {} cores, Linux {}, {date}", self.cpu_model, self.cores, self.kernel)
    }
}

fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k.trim(), "model name" | "Model" | "cpu model").then(|| v.trim().to_string())
        })
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    }
}

fn kernel_release() -> String {
    // SAFETY: utsname is plain data; zeroed is valid.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is valid for writes.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let bytes: Vec<u8> = u.release.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `2026-01-31T12:00:05Z`.
pub(crate) fn utc_iso(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (y, mo, da) = civil_from_days(secs.div_euclid(86400));
    let s = secs.rem_euclid(86400);
    format!("{y:04}-{mo:02}-{da:02}T{:02}:{:02}:{:02}Z", s / 3600, s % 3600 / 60, s % 60)
}

/// `2026-01-31T12:00:05.123Z`.
pub(crate) fn utc_iso_ms(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).unwrap_or_default().subsec_millis();
    let s = utc_iso(t);
    format!("{}.{ms:03}Z", s.trim_end_matches('Z'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates() {
        assert_eq!(utc_iso(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(utc_iso(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(utc_iso(UNIX_EPOCH + Duration::from_secs(1_767_225_599)), "2025-12-31T23:59:59Z");
        assert_eq!(utc_iso_ms(UNIX_EPOCH + Duration::from_millis(1_500)), "1970-01-01T00:00:01.500Z");
        let m = Machine::this(SystemTime::now());
        assert!(m.cores >= 1 && !m.kernel.is_empty() && m.title().contains("cores"));
    }
}
