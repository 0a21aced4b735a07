//! [`LoaderConfig`]: the one description of how a loader runs, with one set of defaults. It is
//! plain data (serde): the Python front sends it as JSON ([`EngineSpec`]), the CLI parses its
//! flags into it, `repr(loader)` prints it, and a loader can be rebuilt from it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::sampler::{Shuffle, Tail};
use crate::samples::TokenOptions;
use crate::spec::TransformSpec;

/// What to do with a sample that cannot be read or transformed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ErrorPolicy {
    /// Stop with an error naming the sample (the default).
    Fail,
    /// Skip it: its slot is filled with a copy of another sample of the same batch, flagged as
    /// padding, so batch shapes stay the same and ranks stay in step. The ids are counted and
    /// reported. Fails anyway once more than `max_fraction` of this rank's samples in the epoch,
    /// or more than `max_consecutive` samples in a row, have failed.
    Skip {
        /// Largest fraction of the epoch's samples (on this rank) that may be skipped.
        max_fraction: f64,
        /// Longest run of consecutive failures.
        max_consecutive: u64,
    },
}

impl ErrorPolicy {
    /// `Skip` with the default bounds: 5% of the epoch, 64 in a row.
    pub fn skip() -> ErrorPolicy {
        ErrorPolicy::Skip {
            max_fraction: 0.05,
            max_consecutive: 64,
        }
    }
}

/// How to load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoaderConfig {
    /// Samples per batch (per rank).
    pub batch_size: u32,
    /// Seed of the order and of every random augmentation.
    pub seed: u64,
    /// The order.
    pub shuffle: Shuffle,
    /// What to do with the end of an epoch that does not fill a step of all ranks.
    pub tail: Tail,
    /// This process's rank.
    pub rank: u32,
    /// Number of ranks.
    pub world_size: u32,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    /// Batches prepared ahead of the consumer (at least 1); with `prefetch_auto`, the starting
    /// depth.
    pub prefetch: usize,
    /// Adjust the prefetch depth while running: deeper when the consumer waits for data while
    /// workers sit blocked on the prefetch window (bursty stages), never beyond what
    /// `memory_budget` allows (and shallower when a deeper window would exceed it).
    pub prefetch_auto: bool,
    /// Bytes that batches prepared ahead may take, for `prefetch_auto`: the depth is kept at or
    /// below `memory_budget / bytes per batch` (at least 1). 0: the default,
    /// [`default_memory_budget`].
    pub memory_budget: u64,
    /// Count and time the stages (the statistics' items, busy time and latencies): each worker
    /// times its first sample and then one in 8 (its latencies make the histograms; busy time is
    /// scaled to all items). Off, the workers read no clock per sample; throughput, waits, queue
    /// and bytes read are still counted.
    pub profile: bool,
    /// Keep the newest `trace_capacity` stage spans (stage, thread, start, duration, sample id)
    /// for [`crate::Loader::trace_json`]: 32 bytes each in a bounded ring. 0 (the default): no
    /// tracing, no cost.
    pub trace_capacity: usize,
    /// Samples per task; 0 picks one from the batch size, thread count and sample size.
    pub task_size: usize,
    /// Adjust the number of working threads while running (between 1 and `threads`): fewer
    /// when the consumer is slower than the pipeline (the workers wait on a full prefetch
    /// window), more again when the consumer waits for data. Saves CPU for the training process
    /// without making it wait.
    pub autotune: bool,
    /// When an epoch delivers its last batch, start the next epoch's workers at once, so its
    /// first batches are ready when the next iteration begins (no stall at epoch boundaries).
    /// Bindings whose stages need a lock the consumer may hold while dropping the loader (the
    /// Python GIL) turn this off.
    pub prepare_next_epoch: bool,
    /// Failed samples.
    pub on_error: ErrorPolicy,
    /// Byte budget of the RAM cache of record bytes (whole shards, shared by the loaders of this
    /// process that read the same dataset); 0 turns it off.
    pub cache_bytes: u64,
    /// Keep the output of the image columns' deterministic prefix (decode + resize to a shorter
    /// side) in RAM, and optionally in a local directory; the random stages start from it.
    pub decoded_cache: Option<DecodedCacheConfig>,
}

/// The decoded cache of image columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodedCacheConfig {
    /// Shorter side of the cached images (images already smaller keep their size).
    pub size: u32,
    /// Byte budget (shared by the loaders of this process with the same dataset and prefix).
    pub budget: u64,
    /// A local directory that keeps the images across runs and processes (see
    /// [`crate::decoded_disk`]); `None`: RAM only.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// The most bytes the directory may hold for one dataset and prefix (`u64::MAX`: no limit
    /// of its own; writing still stops with 5% of the filesystem free).
    #[serde(default = "no_limit")]
    pub dir_limit: u64,
}

fn no_limit() -> u64 {
    u64::MAX
}

impl DecodedCacheConfig {
    /// A RAM-only decoded cache of images with shorter side `size`, within `budget` bytes.
    pub fn in_ram(size: u32, budget: u64) -> DecodedCacheConfig {
        DecodedCacheConfig {
            size,
            budget,
            dir: None,
            dir_limit: u64::MAX,
        }
    }
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            batch_size: 32,
            seed: 0,
            shuffle: Shuffle::Global,
            tail: Tail::Drop,
            rank: 0,
            world_size: 1,
            threads: 0,
            prefetch: 4,
            task_size: 0,
            autotune: false,
            prefetch_auto: false,
            memory_budget: 0,
            profile: true,
            trace_capacity: 0,
            prepare_next_epoch: true,
            on_error: ErrorPolicy::Fail,
            cache_bytes: 0,
            decoded_cache: None,
        }
    }
}

impl LoaderConfig {
    /// Check the values that do not depend on the dataset.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::Config(m));
        if self.batch_size == 0 {
            return bad("batch_size must be at least 1".into());
        }
        if self.world_size == 0 || self.rank >= self.world_size {
            return bad(format!(
                "rank {} is not in 0..{}",
                self.rank, self.world_size
            ));
        }
        if self.prefetch == 0 {
            return bad("prefetch must be at least 1".into());
        }
        if let ErrorPolicy::Skip { max_fraction, .. } = self.on_error
            && !(0.0..=1.0).contains(&max_fraction)
        {
            return bad(format!("max_fraction {max_fraction} is not in 0..=1"));
        }
        if let Some(dc) = &self.decoded_cache
            && dc.size == 0
        {
            return bad("the decoded cache's size must be at least 1".into());
        }
        Ok(())
    }

    /// As JSON (what `repr(loader)` shows and what a loader can be rebuilt from).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a loader configuration always serialises")
    }
}

/// The default memory budget of batches prepared ahead: 10% of physical memory, at most 2 GiB
/// (2 GiB where physical memory is unknown).
pub fn default_memory_budget() -> u64 {
    const CAP: u64 = 2 << 30;
    match stokehold_format::storage::physical_memory() {
        0 => CAP,
        m => (m / 10).clamp(64 << 20, CAP),
    }
}

/// What a loader loads: records through their stages, or token windows/documents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SamplesSpec {
    /// The records of a dataset; each field through its stages (a field without stages is passed
    /// through). A stage named `"python"` with `{"index": k}` is the binding's k-th callable.
    Records {
        /// Field name → its stages.
        #[serde(default)]
        transforms: BTreeMap<String, Vec<TransformSpec>>,
    },
    /// Windows or documents of a token dataset.
    Tokens(TokenOptions),
}

/// A whole loader, declaratively: what the Python front sends (as JSON) and what
/// `repr(loader)` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    /// How to run.
    #[serde(default)]
    pub loader: LoaderConfig,
    /// What a sample is.
    pub samples: SamplesSpec,
    /// Copy shards from slow storage into this local directory and read them there.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// The most bytes `cache_dir` may hold for the dataset (`None`: the dataset's size).
    #[serde(default)]
    pub cache_dir_limit: Option<u64>,
}

impl EngineSpec {
    /// From JSON, with errors that say which key is wrong.
    pub fn from_json(text: &str) -> Result<EngineSpec> {
        serde_json::from_str(text)
            .map_err(|e| EngineError::Config(format!("loader configuration: {e}")))
    }

    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an engine spec always serialises")
    }
}
