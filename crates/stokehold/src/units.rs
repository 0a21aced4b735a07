//! Byte counts in configurations: [`ByteSize`] (a number, or a string with a unit, parsed by
//! [`parse_bytes`], the one size parser of flags, JSON and Python keywords) and [`Budget`]
//! (`"auto"` or a byte count). A leaf: used by the configuration and the caches alike.

use serde::{Deserialize, Serialize};

/// A byte count in a configuration: a JSON number, or a string with a unit (`"16GiB"`,
/// `"500MB"`, `"1.5G"`, `"4096"`; see [`parse_bytes`]). Serialised as a number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(pub u64);

/// Parse a byte count: a number (decimals allowed) and an optional unit, decimal (`K`/`KB`,
/// `M`/`MB`, `G`/`GB`, `T`/`TB`) or binary (`KiB`, `MiB`, `GiB`, `TiB`), case-insensitive,
/// spaces ignored. The one parser of sizes: the CLI's flags and the configuration's strings
/// (hence the Python keyword arguments) go through it.
pub fn parse_bytes(text: &str) -> std::result::Result<u64, NotAByteCount> {
    let t: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let what = || {
        NotAByteCount(format!(
            "{text:?} is not a byte count (e.g. 4096, 500MB, 16GiB, 1.5G)"
        ))
    };
    let v: f64 = num.parse().map_err(|_| what())?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        "t" | "tb" => 1_000_000_000_000,
        "tib" => 1 << 40,
        _ => {
            return Err(NotAByteCount(format!(
                "{text:?} is not a byte count: unknown unit {unit:?} (use B, K, KiB, M, MiB, G, \
                 GiB, T, TiB)"
            )));
        }
    };
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(NotAByteCount(format!("{text:?} is too large a byte count")));
    }
    Ok(bytes as u64)
}

/// Why a text is not a byte count ([`parse_bytes`]): what was given and what to give instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAByteCount(String);

impl std::ops::Deref for NotAByteCount {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<NotAByteCount> for String {
    fn from(e: NotAByteCount) -> String {
        e.0
    }
}

impl std::fmt::Display for ByteSize {
    /// Binary units, one decimal: `512 B`, `3.0 MiB`, `1.0 GiB` (parses back with [`parse_bytes`]
    /// to within the rounding).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut v = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        write!(f, "{v:.1} {}", UNITS[unit])
    }
}

impl std::str::FromStr for ByteSize {
    type Err = NotAByteCount;
    fn from_str(s: &str) -> std::result::Result<ByteSize, NotAByteCount> {
        parse_bytes(s).map(ByteSize)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

/// How a byte count is written in JSON.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawSize {
    Number(u64),
    Text(String),
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<ByteSize, D::Error> {
        match RawSize::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "expected a byte count: a number >= 0 or a string like \"16GiB\"",
            )
        })? {
            RawSize::Number(n) => Ok(ByteSize(n)),
            RawSize::Text(t) => parse_bytes(&t)
                .map(ByteSize)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// A byte budget: `"auto"` (a default that depends on the machine, resolved when the loader is
/// made; see each field) or a [`ByteSize`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Budget {
    /// The field's machine-dependent default.
    #[default]
    Auto,
    /// This many bytes.
    Bytes(ByteSize),
}

impl Budget {
    /// `n` bytes.
    pub fn bytes(n: u64) -> Budget {
        Budget::Bytes(ByteSize(n))
    }

    /// The bytes, `auto()` for `Auto`.
    pub fn resolve(self, auto: impl FnOnce() -> u64) -> u64 {
        match self {
            Budget::Auto => auto(),
            Budget::Bytes(ByteSize(n)) => n,
        }
    }
}

impl Serialize for Budget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Budget::Auto => s.serialize_str("auto"),
            Budget::Bytes(b) => b.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Budget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Budget, D::Error> {
        match RawSize::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "expected \"auto\" or a byte count: a number >= 0 or a string like \"16GiB\"",
            )
        })? {
            RawSize::Text(t) if t.trim().eq_ignore_ascii_case("auto") => Ok(Budget::Auto),
            RawSize::Number(n) => Ok(Budget::bytes(n)),
            RawSize::Text(t) => parse_bytes(&t)
                .map(Budget::bytes)
                .map_err(serde::de::Error::custom),
        }
    }
}
