//! The dataset manifest, `manifest.json`: what a dataset directory holds.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Result};
use crate::limits::Limits;
use crate::schema::Schema;

/// The manifest's file name inside a dataset directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The value of the manifest's `format` key.
pub const FORMAT_NAME: &str = "stokehold-dataset";
/// The dataset format version this build writes and reads.
pub const DATASET_VERSION: u32 = 1;

/// One shard as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardInfo {
    /// File name, relative to the dataset directory (a plain name: no `/`, no `..`).
    pub file: String,
    /// Number of records.
    pub records: u64,
    /// Size of the file in bytes.
    pub bytes: u64,
    /// CRC-32C of the whole file.
    pub crc32c: u32,
}

/// The manifest of a dataset directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always `"stokehold-dataset"`.
    pub format: String,
    /// The dataset format version.
    pub format_version: u32,
    /// The schema every shard shares.
    pub schema: Schema,
    /// Sum of the shards' record counts.
    pub total_records: u64,
    /// The shards, in sample order.
    pub shards: Vec<ShardInfo>,
    /// Class names, indexed by integer label, where the dataset has classes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<String>>,
    /// Record alignment used by every shard.
    #[serde(default = "one")]
    pub align: u32,
    /// Free-form description of how the dataset was made (source kind, counts of skipped inputs,
    /// options). Deterministic: no time stamps, no absolute paths.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub source: serde_json::Value,
}

fn one() -> u32 {
    1
}

impl Manifest {
    /// Parse and validate manifest bytes. `path` is used in messages.
    pub fn parse(bytes: &[u8], path: &Path, limits: &Limits) -> Result<Manifest> {
        let err = |detail: String| FormatError::Manifest {
            path: path.to_path_buf(),
            detail,
        };
        // Look at the version before the rest, so a newer manifest gets a version error rather
        // than a confusing field error.
        #[derive(Deserialize)]
        struct Head {
            format: Option<String>,
            format_version: Option<u64>,
        }
        let head: Head =
            serde_json::from_slice(bytes).map_err(|e| err(format!("not valid JSON: {e}")))?;
        if head.format.as_deref() != Some(FORMAT_NAME) {
            return Err(err(format!(
                "\"format\" must be {FORMAT_NAME:?}, found {:?}",
                head.format
            )));
        }
        match head.format_version {
            Some(v) if v == u64::from(DATASET_VERSION) => {}
            Some(v) => {
                return Err(FormatError::UnsupportedVersion {
                    path: path.to_path_buf(),
                    what: "dataset manifest",
                    found: v,
                    supported: DATASET_VERSION.into(),
                });
            }
            None => return Err(err("\"format_version\" is missing".into())),
        }
        let m: Manifest =
            serde_json::from_slice(bytes).map_err(|e| err(format!("invalid: {e}")))?;
        m.validate(path, limits)?;
        Ok(m)
    }

    /// Check the manifest's own consistency (not yet against the shards).
    pub fn validate(&self, path: &Path, limits: &Limits) -> Result<()> {
        let err = |detail: String| FormatError::Manifest {
            path: path.to_path_buf(),
            detail,
        };
        self.schema.validate().map_err(|e| err(e.to_string()))?;
        if self.shards.len() as u64 > limits.max_shards {
            return Err(FormatError::LimitExceeded {
                path: path.to_path_buf(),
                what: "number of shards".into(),
                value: self.shards.len() as u64,
                max: limits.max_shards,
            });
        }
        if !self.align.is_power_of_two() || self.align > crate::shard::MAX_ALIGN {
            return Err(err(format!("invalid align {}", self.align)));
        }
        let mut names = std::collections::HashSet::new();
        let mut total: u64 = 0;
        for (i, s) in self.shards.iter().enumerate() {
            let plain = !s.file.is_empty()
                && s.file != "."
                && s.file != ".."
                && !s.file.contains(['/', '\\', '\0']);
            if !plain {
                return Err(err(format!(
                    "shard {i}: file name {:?} must be a plain file name inside the dataset directory",
                    s.file
                )));
            }
            if !names.insert(s.file.as_str()) {
                return Err(err(format!("shard file {:?} is listed twice", s.file)));
            }
            total = total
                .checked_add(s.records)
                .ok_or_else(|| err("record counts overflow".into()))?;
        }
        if total != self.total_records {
            return Err(err(format!(
                "total_records is {} but the shards hold {total}",
                self.total_records
            )));
        }
        Ok(())
    }

    /// The path of shard `i` inside `dir`.
    pub fn shard_path(&self, dir: &Path, i: usize) -> PathBuf {
        dir.join(&self.shards[i].file)
    }

    /// The manifest as deterministic, pretty JSON with a final newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a manifest always serialises");
        s.push('\n');
        s
    }
}
