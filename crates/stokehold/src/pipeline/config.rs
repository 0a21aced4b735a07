//! [`LoaderConfig`]: the one description of how a loader runs, with one set of defaults. It is
//! plain data (serde): the Python front sends it as JSON ([`EngineSpec`]), the CLI parses its
//! flags into it, `repr(loader)` prints it, and a loader can be rebuilt from it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::sampler::{Shuffle, Tail};
use crate::samples::TokenOptions;
use crate::samples::mixture::{OnChange, ScheduleUnit};
use crate::stages::spec::TransformSpec;
pub use crate::units::{Budget, ByteSize, parse_bytes};

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
    /// below `memory_budget / bytes per batch` (at least 1). `auto` (the default):
    /// [`default_memory_budget`].
    pub memory_budget: Budget,
    /// A byte budget shared by every loader of every process on this node that names one
    /// (`memory_budget="node:8GiB"`): each loader takes its `memory_budget` (or what is left,
    /// at least one batch) from it through a lease under the node-local directory
    /// (`STOKEHOLD_NODE_BUDGET_DIR`, else the temporary directory), returned when the loader
    /// is dropped or its process dies. `None` (the default): the loader's own budget only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_memory_budget: Option<ByteSize>,
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
    /// process that read the same dataset); 0 (the default) turns it off, `auto` is
    /// [`half_of_memory`].
    pub cache_bytes: Budget,
    /// Keep the output of the image columns' deterministic prefix (decode + resize to a shorter
    /// side) in RAM, and optionally in a local directory; the random stages start from it.
    pub decoded_cache: Option<DecodedCacheConfig>,
    /// Submit a task's reads that need the device together through `io_uring` where the kernel
    /// allows it (else one `pread` each: the same bytes, more system calls). The environment's
    /// `STOKEHOLD_IO_URING=0` turns it off for the whole process whatever this says
    /// (docs/storage.md).
    pub io_uring: bool,
}

/// The deepest fixed prefetch window a loader takes (batches prepared ahead).
pub const MAX_PREFETCH: usize = 256;

/// The decoded cache of image columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodedCacheConfig {
    /// Shorter side of the cached images (images already smaller keep their size).
    pub size: u32,
    /// Byte budget (shared by the loaders of this process with the same dataset and prefix);
    /// `auto` (the default) is [`half_of_memory`].
    #[serde(default)]
    pub budget: Budget,
    /// A local directory that keeps the images across runs and processes (see
    /// [`crate::cache::decoded_disk`]); `None`: RAM only.
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// The most bytes the directory may hold for one dataset and prefix (`None`: no limit of its
    /// own; writing still stops with 5% of the filesystem free).
    #[serde(default)]
    pub dir_limit: Option<ByteSize>,
    /// Free bytes the directory's filesystem keeps: writing stops below (`None`: 5% of the
    /// filesystem, at most 1 GiB). The environment's `STOKEHOLD_KEEP_FREE`, when set, overrides
    /// it (docs/storage.md).
    #[serde(default)]
    pub keep_free: Option<ByteSize>,
}

impl DecodedCacheConfig {
    /// A RAM-only decoded cache of images with shorter side `size`, within `budget`.
    pub fn in_ram(size: u32, budget: Budget) -> DecodedCacheConfig {
        DecodedCacheConfig {
            size,
            budget,
            dir: None,
            dir_limit: None,
            keep_free: None,
        }
    }
}

/// Half of physical memory (1 GiB where it is unknown): what an `auto` cache budget means.
/// The one memory probe is [`stokehold_storage::file::physical_memory`].
pub fn half_of_memory() -> u64 {
    match stokehold_storage::file::physical_memory() {
        0 => 1 << 30,
        m => m / 2,
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
            memory_budget: Budget::Auto,
            node_memory_budget: None,
            profile: true,
            trace_capacity: 0,
            prepare_next_epoch: true,
            on_error: ErrorPolicy::Fail,
            cache_bytes: Budget::bytes(0),
            decoded_cache: None,
            io_uring: true,
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
        if self.world_size == 0 {
            return bad("world_size must be at least 1 (the number of processes loading)".into());
        }
        if self.rank >= self.world_size {
            return bad(format!(
                "rank {} is out of range for world_size {}: ranks are numbered 0 to world_size - 1",
                self.rank, self.world_size
            ));
        }
        if self.prefetch == 0 {
            return bad("prefetch must be at least 1".into());
        }
        if self.prefetch > MAX_PREFETCH {
            return bad(format!(
                "prefetch must be at most {MAX_PREFETCH} batches, got {}: each batch prepared \
                 ahead holds its memory, and a window that deep never helps (it only needs to \
                 cover the training step's jitter); or prefetch=\"auto\" within memory_budget",
                self.prefetch
            ));
        }
        if let Err(m) = stokehold_storage::check_threads("threads", self.threads) {
            return bad(m.to_string());
        }
        if let ErrorPolicy::Skip { max_fraction, .. } = self.on_error
            && !(0.0..=1.0).contains(&max_fraction)
        {
            return bad(format!("max_fraction {max_fraction} is not in 0..=1"));
        }
        if self.node_memory_budget == Some(ByteSize(0)) {
            return bad("a node memory budget must be at least 1 byte".into());
        }
        if self.memory_budget == Budget::bytes(0) {
            return bad("memory_budget must be at least 1 byte (or \"auto\")".into());
        }
        // a budget beyond the machine's memory is a typo (a unit too many), not a plan
        let ram = stokehold_storage::file::physical_memory();
        let over = |what: &str, b: &Budget| match b {
            Budget::Bytes(ByteSize(n)) if ram > 0 && *n > ram => Some(format!(
                "{what} {} is more than this machine's memory ({}): give at most that (or \"auto\")",
                ByteSize(*n),
                ByteSize(ram)
            )),
            _ => None,
        };
        let decoded = self.decoded_cache.as_ref().map(|d| d.budget);
        for (what, b) in [
            ("memory_budget", Some(self.memory_budget)),
            ("the RAM cache's budget (cache=)", Some(self.cache_bytes)),
            ("the decoded cache's budget", decoded),
        ] {
            if let Some(m) = b.as_ref().and_then(|b| over(what, b)) {
                return bad(m);
            }
        }
        if let Some(dc) = &self.decoded_cache {
            if dc.size == 0 {
                return bad("the decoded cache's size must be at least 1".into());
            }
            if dc.budget == Budget::bytes(0) || dc.dir_limit == Some(ByteSize(0)) {
                return bad("the decoded cache's budget and dir_limit must be positive".into());
            }
        }
        Ok(())
    }

    /// As JSON (what `repr(loader)` shows and what a loader can be rebuilt from).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a loader configuration always serialises")
    }

    /// `memory_budget` in bytes (`auto`: [`default_memory_budget`]).
    pub fn memory_budget_bytes(&self) -> u64 {
        self.memory_budget.resolve(default_memory_budget)
    }

    /// `cache_bytes` in bytes (`auto`: [`half_of_memory`]; 0: no RAM cache).
    pub fn cache_budget_bytes(&self) -> u64 {
        self.cache_bytes.resolve(half_of_memory)
    }
}

/// The default memory budget of batches prepared ahead: 10% of physical memory, at most 2 GiB
/// (2 GiB where physical memory is unknown).
pub fn default_memory_budget() -> u64 {
    const CAP: u64 = 2 << 30;
    match stokehold_storage::file::physical_memory() {
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
        /// The fields in the batch (the loader's `fields=`; None: every field); the others are
        /// not read out of their records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fields: Option<Vec<String>>,
    },
    /// Windows or documents of a token dataset.
    Tokens(TokenOptions),
    /// Rows of whole conversations (a records dataset with a messages field), rendered with a
    /// chat template, tokenized and packed best-fit-decreasing.
    Chats(Box<crate::samples::ChatRowOptions>),
    /// The steps of a LeRobot dataset read in place (no stokehold dataset: built by
    /// [`EngineSpec::build_lerobot`]).
    Lerobot(crate::samples::LeRobotOptions),
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
    pub cache_dir_limit: Option<ByteSize>,
    /// A mixture of datasets (each source's samples as `samples` says, with its own
    /// transforms when it gives them), blended as this says; `None`: one dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixture: Option<MixtureSpec>,
}

/// A mixture, declaratively (docs/mixtures.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSpec {
    /// The sources, in order (their index is the `source` column's value).
    pub sources: Vec<MixtureSourceSpec>,
    /// The weights (one per source) from each entry's point on; the first entry is at 0.
    pub schedule: Vec<ScheduleEntry>,
    /// What the schedule's points count: `steps` (batches of all ranks together, the default)
    /// or `samples` of the blended stream.
    #[serde(default = "steps")]
    pub unit: ScheduleUnit,
    /// Samples per epoch (`None`: the sources' samples summed).
    #[serde(default)]
    pub epoch_samples: Option<u64>,
    /// Add the `source` column (int64, the source's index).
    #[serde(default = "yes")]
    pub source_column: bool,
    /// What a resume state whose blend differs before its position does: `refuse` (the
    /// default) or `reblend`.
    #[serde(default)]
    pub on_change: OnChange,
}

fn steps() -> ScheduleUnit {
    ScheduleUnit::Steps
}

fn yes() -> bool {
    true
}

/// One source of a [`MixtureSpec`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixtureSourceSpec {
    /// Its name.
    pub name: String,
    /// Where it is (a directory or URL; what the CLI opens, and what the Python front shows).
    #[serde(default)]
    pub path: Option<String>,
    /// Its own stages per field (records), instead of the spec's `samples` transforms.
    #[serde(default)]
    pub transforms: Option<BTreeMap<String, Vec<TransformSpec>>>,
    /// Under `on_error = skip`, the largest fraction of its share of an epoch that may be
    /// skipped (`None`: only the loader's budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_skip_fraction: Option<f64>,
    /// Packed conversations: this source's own chat template, or a plain-text tokenizer
    /// (`document`), instead of the spec's `samples` one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<crate::samples::ChatSpec>,
}

/// One entry of a mixture's schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    /// The step (or sample) from which the weights hold.
    pub at: u64,
    /// The weights (normalised): one per source, or by source name.
    pub weights: Weights,
}

/// A mixture's weights as the fronts give them: a list in the sources' order (empty: in
/// proportion to the sources' samples), or a map from source name to weight (every source
/// named: a source left out is refused, so that one forgotten is not silently at 0 while it
/// counts in the epoch). Resolved once, here, for every front.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Weights {
    /// One weight per source, in order.
    Listed(Vec<f64>),
    /// Weight by source name.
    Named(BTreeMap<String, f64>),
}

/// One weight as read: any number (its range is checked by [`Weights::resolve`], naming the
/// source); anything else is refused saying that a weight is a number.
struct Weight(f64);

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Weight;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a weight: a number >= 0")
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Weight, E> {
                Ok(Weight(v))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Weight, E> {
                Ok(Weight(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Weight, E> {
                Ok(Weight(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

// By hand, not untagged: serde's untagged enums say only "did not match any variant", where a
// weight that is not a number should be named as such.
impl<'de> Deserialize<'de> for Weights {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Weights;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("weights: a list of numbers, or a map of source name to number")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Weights, A::Error> {
                let mut out = Vec::new();
                while let Some(Weight(w)) = a.next_element()? {
                    out.push(w);
                }
                Ok(Weights::Listed(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Weights, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, Weight(w))) = a.next_entry::<String, Weight>()? {
                    out.insert(k, w);
                }
                Ok(Weights::Named(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Weights {
    /// One weight per source of `names`, in order; `what` names the entry in errors.
    pub fn resolve(&self, names: &[&str], what: &str) -> Result<Vec<f64>> {
        let check = |source: String, w: f64| {
            if w.is_finite() && w >= 0.0 {
                Ok(w)
            } else {
                Err(EngineError::Config(format!(
                    "{what}: the weight of {source} must be a finite number >= 0 (0 leaves the \
                     source out), got {w}"
                )))
            }
        };
        let resolved = self.resolve_names(names, what)?;
        resolved
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                let source = match names.get(i) {
                    Some(n) => format!("'{n}'"),
                    None => format!("source {i}"),
                };
                check(source, w)
            })
            .collect()
    }

    fn resolve_names(&self, names: &[&str], what: &str) -> Result<Vec<f64>> {
        match self {
            Weights::Listed(l) => Ok(l.clone()),
            Weights::Named(m) => {
                if let Some(k) = m.keys().find(|k| !names.contains(&k.as_str())) {
                    return Err(EngineError::Config(format!(
                        "{what}: '{k}' is not a source (they are {})",
                        names.join(", ")
                    )));
                }
                let missing: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|n| !m.contains_key(*n))
                    .collect();
                if let Some(first) = missing.first() {
                    let quoted: Vec<String> = missing.iter().map(|n| format!("'{n}'")).collect();
                    return Err(EngineError::Config(format!(
                        "{what}: no weight for {} (by name, every source needs a weight): give \
                         '{first}': 0 to leave it out of the blend (it still counts in the \
                         epoch's samples unless epoch_samples is given), or its share",
                        quoted.join(", ")
                    )));
                }
                Ok(names.iter().map(|n| m[*n]).collect())
            }
        }
    }
}

impl EngineSpec {
    /// From JSON, with errors that say which key is wrong.
    pub fn from_json(text: &str) -> Result<EngineSpec> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = plain_serde_message(&e.into_inner().to_string());
            if path == "." {
                EngineError::Config(format!("loader configuration: {inner}"))
            } else {
                EngineError::Config(format!("loader configuration: {path}: {inner}"))
            }
        })
    }

    /// As JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an engine spec always serialises")
    }
}

/// A serde message in the words of the people who write configurations (in Python or JSON):
/// Rust's integer type names become the range they stand for.
fn plain_serde_message(msg: &str) -> String {
    const TYPES: [(&str, &str); 5] = [
        ("expected u64", "expected an integer from 0 to 2**64 - 1"),
        ("expected u32", "expected an integer from 0 to 2**32 - 1"),
        ("expected u16", "expected an integer from 0 to 65535"),
        ("expected u8", "expected an integer from 0 to 255"),
        ("expected usize", "expected a non-negative integer"),
    ];
    let mut out = msg.to_string();
    for (rust, plain) in TYPES {
        if let Some(at) = out.find(rust)
            && !out[at + rust.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
        {
            out.replace_range(at..at + rust.len(), plain);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_weight_that_is_not_a_finite_number_is_named_with_its_source() {
        let spec = |weights: &str| {
            EngineSpec::from_json(&format!(
                r#"{{"samples": {{"kind": "records"}}, "mixture": {{"sources": [{{"name": "web"}},
                   {{"name": "code"}}], "schedule": [{{"at": 0, "weights": {weights}}}]}}}}"#
            ))
        };
        // a string: said to be a weight, at its key (not serde's "did not match any variant")
        let e = spec(r#"{"web": 1, "code": "0.5"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mixture.schedule[0].weights.code") && e.contains("a number >= 0"),
            "{e}"
        );
        let e = spec(r#"[1, true]"#).unwrap_err().to_string();
        assert!(e.contains("a number >= 0"), "{e}");
        // read, then refused by value naming the source (TOML and Rust callers give NaN/inf)
        let names = ["web", "code"];
        for bad in [f64::NAN, f64::INFINITY, -1.0] {
            let named = Weights::Named(BTreeMap::from([
                ("web".to_string(), 1.0),
                ("code".to_string(), bad),
            ]));
            let e = named.resolve(&names, "weights").unwrap_err().to_string();
            assert!(
                e.contains("weights: the weight of 'code' must be a finite number >= 0"),
                "{e}"
            );
            let e = Weights::Listed(vec![bad, 1.0])
                .resolve(&names, "the schedule's weights at 5")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("the schedule's weights at 5: the weight of 'web'"),
                "{e}"
            );
        }
        let ok = spec(r#"{"web": 1, "code": 0}"#).unwrap();
        let w = &ok.mixture.unwrap().schedule[0].weights;
        assert_eq!(w.resolve(&names, "weights").unwrap(), vec![1.0, 0.0]);
    }

    #[test]
    fn prefetch_and_budgets_beyond_the_machine_are_refused_with_the_bound() {
        let check = |c: LoaderConfig| c.validate().map_err(|e| e.to_string());
        let prefetch = |prefetch| LoaderConfig {
            prefetch,
            ..LoaderConfig::default()
        };
        check(prefetch(MAX_PREFETCH)).unwrap();
        let e = check(prefetch(MAX_PREFETCH + 1)).unwrap_err();
        assert!(
            e.contains("prefetch must be at most 256 batches, got 257"),
            "{e}"
        );
        let ram = stokehold_storage::file::physical_memory();
        if ram == 0 {
            return; // unknown here: no bound to check against
        }
        let e = check(LoaderConfig {
            memory_budget: Budget::bytes(ram + 1),
            ..LoaderConfig::default()
        })
        .unwrap_err();
        assert!(
            e.contains("memory_budget") && e.contains("more than this machine's memory"),
            "{e}"
        );
        let e = check(LoaderConfig {
            cache_bytes: Budget::bytes(u64::MAX),
            ..LoaderConfig::default()
        })
        .unwrap_err();
        assert!(
            e.contains("cache=") && e.contains("more than this machine's memory"),
            "{e}"
        );
        let e = check(LoaderConfig {
            decoded_cache: Some(DecodedCacheConfig::in_ram(256, Budget::bytes(ram * 2))),
            ..LoaderConfig::default()
        })
        .unwrap_err();
        assert!(e.contains("the decoded cache's budget"), "{e}");
        check(LoaderConfig {
            memory_budget: Budget::bytes(ram),
            cache_bytes: Budget::bytes(ram / 2),
            ..LoaderConfig::default()
        })
        .unwrap();
    }

    #[test]
    fn configuration_errors_name_the_key_and_say_the_range_in_plain_words() {
        let spec = |loader: &str| {
            EngineSpec::from_json(&format!(
                r#"{{"loader": {loader}, "samples": {{"kind": "records"}}}}"#
            ))
        };
        let e = spec(r#"{"seed": -1}"#).unwrap_err().to_string();
        assert!(
            e.contains(
                "loader.seed: invalid value: integer `-1`, expected an integer from 0 to 2**64 - 1"
            ),
            "{e}"
        );
        let e = spec(r#"{"rank": -2}"#).unwrap_err().to_string();
        assert!(
            e.contains(
                "loader.rank: invalid value: integer `-2`, expected an integer from 0 to 2**32 - 1"
            ),
            "{e}"
        );
        let e = spec(r#"{"threads": -2}"#).unwrap_err().to_string();
        assert!(e.contains("expected a non-negative integer"), "{e}");
        let max = stokehold_storage::max_threads();
        let threads = |threads| {
            LoaderConfig {
                threads,
                ..LoaderConfig::default()
            }
            .validate()
        };
        threads(max).unwrap();
        let e = threads(max + 1).unwrap_err().to_string();
        assert!(
            e.contains(&format!("threads must be at most {max} on this machine")),
            "{e}"
        );
        let bad = |world_size, rank| {
            let c = LoaderConfig {
                world_size,
                rank,
                ..LoaderConfig::default()
            };
            c.validate().unwrap_err().to_string()
        };
        let e = bad(0, 0);
        assert!(e.contains("world_size must be at least 1"), "{e}");
        let e = bad(2, 3);
        assert!(
            e.contains(
                "rank 3 is out of range for world_size 2: ranks are numbered 0 to world_size - 1"
            ),
            "{e}"
        );
    }

    #[test]
    fn byte_counts_parse_with_decimal_and_binary_units() {
        assert_eq!(parse_bytes("256MiB"), Ok(256 << 20));
        assert_eq!(parse_bytes("1.5G"), Ok(1_500_000_000));
        assert_eq!(parse_bytes(" 16 gib "), Ok(16 << 30));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("2TB"), Ok(2_000_000_000_000));
        assert!(
            parse_bytes("12 parsecs")
                .unwrap_err()
                .contains("unknown unit")
        );
        assert!(parse_bytes("-1").is_err());
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("1e30TiB").is_err());
        // what is printed parses back
        assert_eq!(ByteSize(512).to_string(), "512 B");
        assert_eq!(ByteSize(3 << 20).to_string(), "3.0 MiB");
        assert_eq!(ByteSize(1 << 30).to_string(), "1.0 GiB");
        assert_eq!(parse_bytes(&ByteSize(5 << 40).to_string()), Ok(5 << 40));
    }

    #[test]
    fn budgets_are_auto_numbers_or_sizes_in_json_and_print_as_numbers() {
        let c: LoaderConfig = serde_json::from_str(
            r#"{"memory_budget": "64MiB", "cache_bytes": "auto",
                "decoded_cache": {"size": 160, "dir_limit": "1G"}}"#,
        )
        .unwrap();
        assert_eq!(c.memory_budget, Budget::bytes(64 << 20));
        assert_eq!(c.memory_budget_bytes(), 64 << 20);
        assert_eq!(c.cache_bytes, Budget::Auto);
        assert_eq!(c.cache_budget_bytes(), half_of_memory());
        let dc = c.decoded_cache.as_ref().unwrap();
        assert_eq!(
            (dc.budget, dc.dir_limit),
            (Budget::Auto, Some(ByteSize(1_000_000_000)))
        );
        let json = c.to_json();
        assert!(json.contains(r#""memory_budget":67108864"#), "{json}");
        assert!(json.contains(r#""cache_bytes":"auto""#), "{json}");
        let back: LoaderConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
        let bad = serde_json::from_str::<LoaderConfig>(r#"{"cache_bytes": "lots"}"#).unwrap_err();
        assert!(bad.to_string().contains("not a byte count"), "{bad}");
        let zero: LoaderConfig = serde_json::from_str(r#"{"memory_budget": 0}"#).unwrap();
        assert!(zero.validate().is_err());
    }
}
