//! Resume state: small, versioned, JSON-serialisable, exact. Ranks step together, so the state is
//! global: the state saved on any rank resumes every rank of any new world size.

use serde::{Deserialize, Serialize};
use stokehold_format::crc;
use stokehold_storage::Dataset;

use crate::error::{EngineError, Result};
use crate::sampler::Shuffle;

/// An order's own part of a resume state: a JSON object only the order reads (saved under the
/// state's `mixture` key, the name the first order with a state of its own gave it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct OrderState(pub serde_json::Map<String, serde_json::Value>);

impl OrderState {
    /// `value` as an order state (`value` serialises to a JSON object).
    pub fn of<T: serde::Serialize>(value: &T) -> OrderState {
        match serde_json::to_value(value) {
            Ok(serde_json::Value::Object(m)) => OrderState(m),
            _ => OrderState(serde_json::Map::new()),
        }
    }

    /// The state read as a `T`; `Err` names the key at fault (for `field`'s
    /// [`EngineError::InvalidState`]).
    pub fn read<T: serde::de::DeserializeOwned>(&self, field: &str) -> Result<T> {
        let v = serde_json::Value::Object(self.0.clone());
        serde_path_to_error::deserialize(&v).map_err(|e| {
            let path = e.path().to_string();
            let detail = e.into_inner().to_string();
            EngineError::InvalidState {
                field: Some(field.to_string()),
                detail: match path.as_str() {
                    "" | "." | "?" => detail,
                    p => format!("{p}: {detail}"),
                },
            }
        })
    }
}

/// The state format version this build writes and reads.
pub const STATE_VERSION: u32 = 1;

/// Where a loader is: which epoch, and how many positions of that epoch's global order all ranks
/// together have consumed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeState {
    /// Always [`STATE_VERSION`].
    pub version: u32,
    /// Fingerprint of the dataset (sample count, schema and shard checksums).
    pub dataset: String,
    /// The loader's seed.
    pub seed: u64,
    /// The order.
    pub shuffle: Shuffle,
    /// The epoch to continue.
    pub epoch: u64,
    /// Positions of the epoch's global order already consumed by all ranks together.
    pub position: u64,
    /// Samples skipped in this epoch so far by the rank that saved the state (under
    /// `on_error = skip`; counted against the epoch's budget after a resume). Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped: u64,
    /// Failures in a row at `position` (counted against `max_consecutive`). Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures_in_a_row: u64,
    /// The order's own part ([`crate::order::Order::state`]; a blend's sources and weights up to
    /// `position`), read only by the order; absent when the order keeps nothing (the loader's
    /// shuffle). Saved under the key `mixture`, the name the first order with a part of its own
    /// gave it, so that states saved before keep loading.
    #[serde(default, rename = "mixture", skip_serializing_if = "Option::is_none")]
    pub order: Option<OrderState>,
    /// The runs of steps of this epoch so far, one per shape of the loaders that ran it: each
    /// `[first step, first position, world_size, batch_size]`, the first step counted from the
    /// epoch's start across every resume (what [`crate::Loader::samples_at`] calls a step).
    /// Absent at the start of an epoch and in states saved before it existed (then the steps
    /// before the state's position are counted in the resuming loader's shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<[u64; 4]>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Every key of a state.
const KEYS: [&str; 10] = [
    "version",
    "dataset",
    "seed",
    "shuffle",
    "epoch",
    "position",
    "skipped",
    "failures_in_a_row",
    "mixture",
    "runs",
];
/// The keys a state must have.
const REQUIRED: [&str; 6] = ["version", "dataset", "seed", "shuffle", "epoch", "position"];
/// The keys that are counts (`u64`).
const COUNTS: [&str; 5] = ["seed", "epoch", "position", "skipped", "failures_in_a_row"];

/// What kind of JSON value `v` is, for messages.
fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// `v` for a message: its JSON, cut to 40 characters.
fn short(v: &serde_json::Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

impl ResumeState {
    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a resume state always serialises")
    }

    /// From JSON (at most 64 KiB; anything else is a typed error naming the key at fault).
    pub fn from_json(s: &str) -> Result<ResumeState> {
        let invalid = |field: Option<&str>, detail: String| EngineError::InvalidState {
            field: field.map(str::to_string),
            detail,
        };
        if s.len() > 64 << 10 {
            return Err(invalid(
                None,
                format!("{} bytes is too long for a resume state", s.len()),
            ));
        }
        let v: serde_json::Value =
            serde_json::from_str(s).map_err(|e| invalid(None, format!("not JSON: {e}")))?;
        let Some(obj) = v.as_object() else {
            return Err(invalid(
                None,
                format!("expected a JSON object, got {}", kind(&v)),
            ));
        };
        let version = obj.get("version").and_then(serde_json::Value::as_u64);
        if version != Some(u64::from(STATE_VERSION)) {
            return Err(EngineError::IncompatibleResume {
                field: "version",
                expected: STATE_VERSION.to_string(),
                found: obj
                    .get("version")
                    .map_or_else(|| "missing".to_string(), |v| v.to_string()),
            });
        }
        // Each key checked by name first, so that the error says which one is wrong.
        for key in obj.keys() {
            if !KEYS.contains(&key.as_str()) {
                return Err(invalid(
                    Some(key),
                    format!("unknown key (a state has {})", KEYS.join(", ")),
                ));
            }
        }
        for key in REQUIRED {
            if !obj.contains_key(key) {
                return Err(invalid(Some(key), "missing".into()));
            }
        }
        for key in COUNTS {
            if let Some(x) = obj.get(key)
                && !x.is_u64()
            {
                return Err(invalid(
                    Some(key),
                    format!("expected an integer from 0 to 2^64 - 1, got {}", short(x)),
                ));
            }
        }
        if let Some(x) = obj.get("mixture")
            && !x.is_object()
        {
            return Err(invalid(
                Some("mixture"),
                format!("expected an object, got {}", short(x)),
            ));
        }
        if let Some(x) = obj.get("dataset")
            && !x.is_string()
        {
            return Err(invalid(
                Some("dataset"),
                format!("expected a fingerprint string, got {}", short(x)),
            ));
        }
        let de = serde_path_to_error::deserialize(&v);
        de.map_err(|e| {
            let path = e.path().to_string();
            let field = path
                .split('.')
                .next()
                .filter(|f| !f.is_empty() && *f != "?");
            invalid(field, e.into_inner().to_string())
        })
    }

    /// Check that this state belongs to a loader with these parameters.
    pub fn check(
        &self,
        dataset: Option<&str>,
        seed: u64,
        shuffle: &Shuffle,
        len: u64,
    ) -> Result<()> {
        let differ = |field, expected: String, found: String| {
            Err(EngineError::IncompatibleResume {
                field,
                expected,
                found,
            })
        };
        if self.version != STATE_VERSION {
            return differ(
                "version",
                STATE_VERSION.to_string(),
                self.version.to_string(),
            );
        }
        if let Some(dataset) = dataset
            && self.dataset != dataset
        {
            return differ("dataset", dataset.to_string(), self.dataset.clone());
        }
        if self.seed != seed {
            return differ("seed", seed.to_string(), self.seed.to_string());
        }
        if &self.shuffle != shuffle {
            return differ("shuffle", shuffle.to_string(), self.shuffle.to_string());
        }
        if self.position > len {
            return differ(
                "position",
                format!("at most {len}"),
                self.position.to_string(),
            );
        }
        Ok(())
    }
}

/// A dataset's fingerprint: CRC-32Cs of its sample count, schema and shard checksums.
pub fn fingerprint(ds: &Dataset) -> String {
    let m = ds.manifest();
    let mut a = crc::crc32c(&m.total_records.to_le_bytes());
    a = crc::append(a, m.schema.to_string().as_bytes());
    let mut b = 0u32;
    for s in &m.shards {
        b = crc::append(b, &s.crc32c.to_le_bytes());
        b = crc::append(b, &s.records.to_le_bytes());
    }
    format!("{a:08x}{b:08x}")
}
