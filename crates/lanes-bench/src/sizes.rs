//! Sizes: parsing lists (`4,64,1K`, ranges of powers of two `4-8K`, suffixes K, M, G) and
//! printing one (`64 KiB`).

/// Parses one size such as `64`, `4K`, `1M`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&s[..i], 1usize << 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&s[..i], 1 << 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size {s:?} (examples: 64, 4K, 1M)"))
}

/// Parses a list: comma-separated sizes or `A-B` ranges (every power of two from A to B).
pub fn parse_sizes(list: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (parse_size(a)?, parse_size(b)?);
                if a == 0 || a > b {
                    return Err(format!("bad range {part:?}"));
                }
                let mut s = a;
                while s <= b {
                    out.push(s);
                    s = s.checked_mul(2).ok_or("range overflows")?;
                }
            }
            None => out.push(parse_size(part)?),
        }
    }
    if out.is_empty() {
        return Err("empty size list".into());
    }
    Ok(out)
}

/// `4 B`, `64 KiB`, `1 MiB`, `1536 B`.
pub fn fmt_size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_sizes("4-32").unwrap(), vec![4, 8, 16, 32]);
        assert_eq!(parse_sizes("1K,2k,1M").unwrap(), vec![1024, 2048, 1 << 20]);
        assert!(parse_sizes("x").is_err());
        assert!(parse_sizes("8-4").is_err());
        assert!(parse_sizes("").is_err());
    }
}
