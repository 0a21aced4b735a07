//! Resume state: small, versioned, JSON-serialisable, exact. Ranks step together, so the state is
//! global: the state saved on any rank resumes every rank of any new world size.

use serde::{Deserialize, Serialize};
use stokehold_format::{Dataset, crc};

use crate::error::{EngineError, Result};
use crate::sampler::Shuffle;

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
}

impl ResumeState {
    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a resume state always serialises")
    }

    /// From JSON (at most 64 KiB; anything else is a typed error).
    pub fn from_json(s: &str) -> Result<ResumeState> {
        if s.len() > 64 << 10 {
            return Err(EngineError::InvalidState(format!(
                "{} bytes is too long for a resume state",
                s.len()
            )));
        }
        let v: serde_json::Value =
            serde_json::from_str(s).map_err(|e| EngineError::InvalidState(e.to_string()))?;
        let version = v.get("version").and_then(serde_json::Value::as_u64);
        if version != Some(u64::from(STATE_VERSION)) {
            return Err(EngineError::IncompatibleResume {
                field: "version",
                expected: STATE_VERSION.to_string(),
                found: version.map_or_else(|| "missing".to_string(), |v| v.to_string()),
            });
        }
        serde_json::from_value(v).map_err(|e| EngineError::InvalidState(e.to_string()))
    }

    /// Check that this state belongs to a loader with these parameters.
    pub fn check(&self, dataset: &str, seed: u64, shuffle: &Shuffle, len: u64) -> Result<()> {
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
        if self.dataset != dataset {
            return differ("dataset", dataset.to_string(), self.dataset.clone());
        }
        if self.seed != seed {
            return differ("seed", seed.to_string(), self.seed.to_string());
        }
        if &self.shuffle != shuffle {
            return differ(
                "shuffle",
                format!("{shuffle:?}"),
                format!("{:?}", self.shuffle),
            );
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
