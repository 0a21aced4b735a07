//! [`SequenceLoader`]: the name language-model users know, a thin front over the one engine
//! ([`Loader`] with [`Tokens`] samples). Everything (order, ranks, resume, the skip policy,
//! statistics, autotuning) is the engine's; this module only spells the token options and the
//! loader options as one [`SequenceConfig`].

use std::sync::Arc;

use stokehold_format::DType;

use crate::error::Result;
use crate::pipeline::{BatchIter, Loader, LoaderConfig};
use crate::sampler::{Shuffle, Tail};
use crate::samples::{TokenDataset, TokenMode, TokenOptions, Tokens};
use crate::state::ResumeState;
use crate::stats::Stats;

/// What a sample is (the name of [`TokenMode`] in the sequence loader's vocabulary).
pub type SequenceMode = TokenMode;

/// The batches of a [`SequenceLoader`]: the engine's iterator.
pub type SequenceIter = BatchIter;

/// Options of a [`SequenceLoader`].
#[derive(Debug, Clone)]
pub struct SequenceConfig {
    /// Packed windows or whole documents.
    pub mode: SequenceMode,
    /// Samples per batch per rank.
    pub batch_size: u32,
    /// [`Shuffle::Sequential`] or [`Shuffle::Global`] (over windows or documents).
    pub shuffle: Shuffle,
    /// The seed of the order.
    pub seed: u64,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub world_size: u32,
    /// The end of the epoch.
    pub tail: Tail,
    /// `I32` or `I64`.
    pub dtype: DType,
    /// Add `position_ids`.
    pub position_ids: bool,
    /// Add `segment_ids` (packed mode).
    pub segment_ids: bool,
    /// Worker threads (0: one per core).
    pub threads: usize,
    /// Batches in flight (at least 1).
    pub prefetch: usize,
    /// Byte budget of the RAM cache of whole shards (0: none).
    pub cache_bytes: u64,
}

impl Default for SequenceConfig {
    /// [`LoaderConfig`]'s defaults (one set of them), with packed windows of 2,048 tokens.
    fn default() -> Self {
        let loader = LoaderConfig::default();
        SequenceConfig {
            mode: SequenceMode::Packed { seq_len: 2048 },
            batch_size: loader.batch_size,
            shuffle: loader.shuffle,
            seed: loader.seed,
            rank: loader.rank,
            world_size: loader.world_size,
            tail: loader.tail,
            dtype: DType::I32,
            position_ids: false,
            segment_ids: false,
            threads: loader.threads,
            prefetch: loader.prefetch,
            cache_bytes: 0,
        }
    }
}

impl SequenceConfig {
    /// The token layout and the engine's configuration this spells.
    pub fn split(&self) -> (TokenOptions, LoaderConfig) {
        (
            TokenOptions {
                mode: self.mode,
                dtype: self.dtype,
                position_ids: self.position_ids,
                segment_ids: self.segment_ids,
            },
            LoaderConfig {
                batch_size: self.batch_size,
                seed: self.seed,
                shuffle: self.shuffle,
                tail: self.tail,
                rank: self.rank,
                world_size: self.world_size,
                threads: self.threads,
                prefetch: self.prefetch,
                cache_bytes: crate::Budget::bytes(self.cache_bytes),
                ..LoaderConfig::default()
            },
        )
    }
}

/// Fixed-length or per-document token batches from a [`TokenDataset`]: deterministic, split
/// across ranks, resumable. See [`crate::samples::tokens`].
#[derive(Debug)]
pub struct SequenceLoader {
    loader: Loader,
    data: Arc<TokenDataset>,
    config: SequenceConfig,
}

impl SequenceLoader {
    /// A loader over `data`.
    pub fn new(data: Arc<TokenDataset>, config: SequenceConfig) -> Result<SequenceLoader> {
        let (options, loader_config) = config.split();
        data.use_cache(config.cache_bytes);
        let tokens = Tokens::new(Arc::clone(&data), options)?;
        Ok(SequenceLoader {
            loader: Loader::from_samples(Arc::new(tokens), loader_config)?,
            data,
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SequenceConfig {
        &self.config
    }

    /// The token dataset.
    pub fn data(&self) -> &Arc<TokenDataset> {
        &self.data
    }

    /// The engine.
    pub fn loader(&self) -> &Loader {
        &self.loader
    }

    /// Samples (windows or documents) in an epoch, over all ranks.
    pub fn samples(&self) -> u64 {
        self.loader.samples().len()
    }

    /// Batches this rank gets in a whole epoch.
    pub fn steps_per_epoch(&self) -> Result<u64> {
        self.loader.steps_per_epoch()
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.loader.epoch()
    }

    /// Start epoch `epoch` from its beginning at the next iteration.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.loader.set_epoch(epoch);
    }

    /// Where the loader is (after the last batch delivered).
    pub fn state(&self) -> ResumeState {
        self.loader.state()
    }

    /// Continue from a saved state (same dataset, mode, seed and order; any world size).
    pub fn load_state(&mut self, state: &ResumeState) -> Result<()> {
        self.loader.load_state(state)
    }

    /// Statistics since the loader was made.
    pub fn stats(&self) -> Stats {
        self.loader.stats()
    }

    /// Iterate the rest of the current epoch (see [`Loader::iter`]). Run one iterator at a
    /// time.
    pub fn iter(&self) -> Result<SequenceIter> {
        BatchIter::start(self.loader.core())
    }
}
