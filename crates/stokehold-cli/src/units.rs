//! Human-readable numbers.

/// 1234567 → "1,234,567".
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count and its noun, singular for one: "1 shard", "1,024 shards".
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", count(n), if n == 1 { one } else { many })
}

/// Bytes in binary units: "45.2 MiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A rate in tokens per second: "1.25 M tok/s".
pub fn token_rate(tokens: u64, secs: f64) -> String {
    let r = tokens as f64 / secs.max(1e-9);
    if r >= 1e6 {
        format!("{:.2} M tok/s", r / 1e6)
    } else {
        format!("{:.1} k tok/s", r / 1e3)
    }
}

/// A rate in bytes per second: "1.2 GB/s" (decimal units, as disks are sold).
pub fn rate(bytes: u64, secs: f64) -> String {
    let r = bytes as f64 / secs.max(1e-9);
    if r >= 1e9 {
        format!("{:.2} GB/s", r / 1e9)
    } else {
        format!("{:.1} MB/s", r / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(12), "12");
        assert_eq!(counted(1, "shard", "shards"), "1 shard");
        assert_eq!(counted(0, "class", "classes"), "0 classes");
        assert_eq!(counted(1234, "shard", "shards"), "1,234 shards");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
    }
}
