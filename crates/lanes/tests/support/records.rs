//! Seqlock records through a reflective group: each writer owns one region of the group, a
//! sequence word (odd while a record is being written) then its record, so a reader can
//! check every record it sees whole and in order. Shared by tests/reflective.rs (one host)
//! and tests/reflective_hosts.rs (several).

use std::time::{Duration, Instant};

use lanes::Map;

use super::pattern;

/// Bytes of each writer's region: a seqlock word, then its record.
pub const REGION: usize = 4096;
/// Bytes of a record.
pub const RECORD: usize = 512;
/// Bytes of a group with room for 16 writers.
pub const GROUP_BYTES: u64 = 16 * REGION as u64;

/// Writer `k`'s record number `n` (odd seq = being written).
pub fn write_record(m: &Map, k: usize, n: u64) -> lanes::Result<()> {
    let base = k * REGION;
    m.store_release_u64(base, 2 * n + 1)?;
    m.write_bytes(base + 64, &pattern(k as u64, n, RECORD))?;
    m.store_release_u64(base, 2 * n + 2)
}

/// Reads writer `k`'s region until record `last` was seen, checking every consistent read:
/// the payload matches its record number and numbers never go back. Returns reads checked.
pub fn follow(m: &Map, k: usize, last: u64, limit: Duration) -> Result<u64, String> {
    let base = k * REGION;
    let start = Instant::now();
    let (mut prev, mut checked) = (0u64, 0u64);
    let mut buf = vec![0u8; RECORD];
    loop {
        let s1 = m.load_acquire_u64(base).map_err(|e| e.to_string())?;
        if s1 % 2 == 0 && s1 > 0 {
            m.read_bytes(base + 64, &mut buf).map_err(|e| e.to_string())?;
            let s2 = m.load_acquire_u64(base).map_err(|e| e.to_string())?;
            if s1 == s2 {
                let n = s1 / 2 - 1;
                if n < prev {
                    return Err(format!("writer {k}: record {n} after {prev}: out of order"));
                }
                if buf != pattern(k as u64, n, RECORD) {
                    return Err(format!("writer {k}: record {n} does not match its checksum"));
                }
                prev = n;
                checked += 1;
                if n >= last {
                    return Ok(checked);
                }
            }
        }
        if start.elapsed() > limit {
            return Err(format!("writer {k}: stuck at record {prev}, waiting for {last}"));
        }
        std::thread::yield_now();
    }
}
