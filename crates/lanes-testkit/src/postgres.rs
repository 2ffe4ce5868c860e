//! PostgreSQL for the tests that run it (its own user, pgbench's TPC-B, the books checked
//! afterwards): where its programs are, how they are started as its user, and what pgbench
//! and the books say.

use std::path::{Path, PathBuf};

/// The directory of PostgreSQL's server programs (`postgres`, `initdb`, `pgbench`; Debian
/// keeps one per major version out of `PATH`, the newest is taken), if installed.
pub fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("postgres").is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// `setpriv`'s arguments that run `program` as the account `(uid, gid)` with no other group
/// (the server refuses root).
pub fn as_user(ids: (u32, u32), program: &Path) -> Vec<String> {
    vec![
        format!("--reuid={}", ids.0),
        format!("--regid={}", ids.1),
        "--clear-groups".into(),
        "--".into(),
        program.display().to_string(),
    ]
}

/// initdb's arguments after `-D DIR`: the `postgres` superuser, trusted, no fsync.
pub const INITDB_ARGS: [&str; 6] = ["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"];

/// Server settings (each after `-c`): durability off, the tests measure the network.
pub const DURABILITY_OFF: [&str; 3] = ["fsync=off", "synchronous_commit=off", "full_page_writes=off"];

/// A query whose answer is `t|N` when the accounts' balances sum to the history's deltas
/// and the history holds N rows (one per TPC-B transaction).
pub const BOOKS: &str = "select (select sum(abalance) from pgbench_accounts) = \
                         (select coalesce(sum(delta), 0) from pgbench_history), \
                         (select count(*) from pgbench_history)";

/// pgbench's `number of transactions actually processed: N[/M]` (0 if missing).
pub fn transactions_processed(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|n| n.split('/').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pgbench_s_count() {
        assert_eq!(transactions_processed("x\nnumber of transactions actually processed: 1234\n"), 1234);
        assert_eq!(transactions_processed("number of transactions actually processed: 50/100\n"), 50);
        assert_eq!(transactions_processed("nothing"), 0);
    }
}
