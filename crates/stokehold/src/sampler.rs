//! The sampler: which sample ids each rank sees, in which order, in every epoch.
//!
//! Everything here is a pure function of (dataset size, seed, epoch, rank, world size, position):
//! no threads, no I/O, no hidden state. Two processes given the same inputs compute the same order,
//! which is what lets every rank of a distributed job agree on the epoch without talking, and what
//! lets a job resume (even on a different number of ranks) from a single saved position.
//!
//! There are two layers:
//!
//! * [`EpochOrder`]: the global order of one epoch, a permutation of the sample ids `0..len`
//!   chosen by a [`Shuffle`]. Lookups are `position -> id` ([`EpochOrder::id_at`]); nothing is
//!   materialised for [`Shuffle::Global`] (a keyed Feistel network with cycle-walking, O(1) memory),
//!   and only per-block tables for [`Shuffle::ShardBlock`].
//! * [`RankPlan`]: how ranks consume that global order. Ranks step together; one step takes
//!   `world_size * batch_size` consecutive positions, and rank `r` takes the `r`-th run of
//!   `batch_size` of them. The plan starts at any position `start`, which is what a checkpoint
//!   stores ([`RankPlan::position_after`]). Because the global order does not depend on the world
//!   size, a run may stop on `W1` ranks and continue on `W2` ranks from the saved position without
//!   losing or repeating a sample.

use std::ops::Range;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Errors from building an [`EpochOrder`] or a [`RankPlan`], or asking a plan for a step it does
/// not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SamplerError {
    /// [`Shuffle::ShardBlock`] needs the block (shard) sizes, and none were given.
    #[error("the shard-block shuffle needs the block sizes, and none were given")]
    MissingBlocks,
    /// The block sizes do not add up to the dataset length.
    #[error("the block sizes add up to {sum} samples, but the dataset has {len}")]
    BlockSumMismatch {
        /// The sum of the block sizes.
        sum: u64,
        /// The dataset length.
        len: u64,
    },
    /// The block sizes add up to more than `u64::MAX`.
    #[error("the block sizes add up to more than u64::MAX")]
    BlockSumOverflow,
    /// [`Shuffle::ShardBlock`] with a window of 0 blocks.
    #[error("the shard-block window must be at least one block")]
    ZeroWindow,
    /// A world size of 0 ranks.
    #[error("the world size must be at least 1")]
    ZeroWorldSize,
    /// A rank that is not below the world size.
    #[error("rank {rank} is out of range for a world of {world_size} ranks")]
    RankOutOfRange {
        /// The rank asked for.
        rank: u32,
        /// The world size.
        world_size: u32,
    },
    /// A batch size of 0 samples.
    #[error("the batch size must be at least 1")]
    ZeroBatchSize,
    /// A starting position past the end of the epoch (a position equal to the length is valid:
    /// it is the end of the epoch).
    #[error("start position {start} is past the end of an epoch of {len} samples")]
    StartPastEnd {
        /// The starting position asked for.
        start: u64,
        /// The epoch length.
        len: u64,
    },
    /// A step at or past [`RankPlan::steps`].
    #[error("step {step} is out of range: the plan has {steps} steps")]
    StepOutOfRange {
        /// The step asked for.
        step: u64,
        /// The number of steps in the plan.
        steps: u64,
    },
    /// The padded last step would run past `u64::MAX` positions.
    #[error("the padded epoch would have more than u64::MAX positions")]
    PositionOverflow,
}

/// How the samples of an epoch are ordered. Saved in resume state, hence serialisable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Shuffle {
    /// No shuffling: position `p` is sample `p`, in every epoch.
    Sequential,
    /// A uniform-looking pseudo-random permutation of the whole dataset, different in every epoch,
    /// computed per lookup in O(1) memory.
    Global,
    /// For streaming sources read a whole shard at a time. Each epoch permutes the order of the
    /// blocks (shards), groups consecutive permuted blocks into windows of `window` blocks (the
    /// last window may have fewer), and permutes the samples within each window. A reader then
    /// needs only `window` shards open at once.
    ShardBlock {
        /// Blocks per window (at least 1).
        window: u32,
    },
}

impl std::fmt::Display for Shuffle {
    /// As a configuration names it: `global`, `sequential`, `shard_block (window 4)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shuffle::Sequential => f.write_str("sequential"),
            Shuffle::Global => f.write_str("global"),
            Shuffle::ShardBlock { window } => write!(f, "shard_block (window {window})"),
        }
    }
}

/// What to do with the end of an epoch that does not fill a whole step of
/// `world_size * batch_size` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tail {
    /// Drop the partial last step: fewer than `world_size * batch_size` samples of the epoch are
    /// not seen. Which samples are dropped depends on the world size (and the start position);
    /// nothing is ever duplicated.
    Drop,
    /// Complete the last step with padding: positions `p >= len` repeat the samples at positions
    /// `(p - len) % len` and are flagged [`Slot::padding`]. Every sample is seen at least once.
    Pad,
}

/// One entry of a rank's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The sample id (an index into the dataset, `< len`).
    pub id: u64,
    /// The position in the epoch's global order. For a padding slot this is the virtual position
    /// `>= len` (the sample repeated is the one at position `(position - len) % len`).
    pub position: u64,
    /// Whether this slot is padding (a repeat that completes the last step under [`Tail::Pad`]).
    pub padding: bool,
}

/// The samples of one [`Shuffle::ShardBlock`] window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardWindow {
    /// The window's index in the epoch (windows are consumed in index order).
    pub index: u64,
    /// The range of epoch positions the window covers.
    pub positions: Range<u64>,
    /// The original indices of the window's blocks, in their permuted order.
    pub blocks: Vec<usize>,
}

// ---------------------------------------------------------------------------------------------
// Mixing and keyed permutations.

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
/// Domain separation for the key of the global permutation.
const TAG_GLOBAL: u64 = 0x676c_6f62_616c_0001;
/// Domain separation for the key of the block-order permutation.
const TAG_BLOCKS: u64 = 0x626c_6f63_6b73_0002;
/// Domain separation for the keys of the within-window permutations.
const TAG_WINDOW: u64 = 0x7769_6e64_6f77_0003;

/// The splitmix64 finaliser: a bijective 64-bit mixer with full avalanche.
const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A key for one permutation, from the seed, the epoch, a domain tag and an index (the window).
fn derive_key(seed: u64, epoch: u64, tag: u64, index: u64) -> u64 {
    let mut h = mix64(seed ^ 0x5354_4f4b_4548_4f4c);
    h = mix64(h.wrapping_add(epoch).wrapping_add(GOLDEN));
    h = mix64(h ^ tag);
    mix64(h.wrapping_add(index).wrapping_add(GOLDEN))
}

/// Mask of the low `bits` bits (`bits <= 63`; Feistel halves never exceed 32 bits).
const fn low_mask(bits: u32) -> u64 {
    (1u64 << bits) - 1
}

/// Feistel rounds. Six is the usual minimum for a pseudo-random permutation; eight gives margin
/// for the unbalanced split and the weak tiny domains.
const ROUNDS: usize = 8;

/// A keyed pseudo-random permutation of `0..len`: an unbalanced Feistel network over the smallest
/// power-of-two domain `>= len` (so the domain is `< 2 * len`), with cycle-walking to stay below
/// `len`. O(1) memory; O(1) expected time per lookup (fewer than two walks on average).
#[derive(Debug, Clone)]
struct FeistelPerm {
    len: u64,
    /// Bits of the high half (the larger one when the bit count is odd).
    hi_bits: u32,
    /// Bits of the low half.
    lo_bits: u32,
    round_keys: [u64; ROUNDS],
}

impl FeistelPerm {
    fn new(len: u64, key: u64) -> Self {
        // Bits of the domain: the smallest k with 2^k >= len (k = 0 for len <= 1).
        let bits = if len <= 1 {
            0
        } else {
            u64::BITS - (len - 1).leading_zeros()
        };
        let lo_bits = bits / 2;
        let hi_bits = bits - lo_bits;
        let mut round_keys = [0u64; ROUNDS];
        for (i, k) in round_keys.iter_mut().enumerate() {
            *k = mix64(key.wrapping_add(GOLDEN.wrapping_mul(i as u64 + 1)));
        }
        Self {
            len,
            hi_bits,
            lo_bits,
            round_keys,
        }
    }

    /// One pass of the Feistel network over the power-of-two domain (a bijection of it).
    fn encrypt(&self, x: u64) -> u64 {
        let hi_mask = low_mask(self.hi_bits);
        let lo_mask = low_mask(self.lo_bits);
        let mut hi = x >> self.lo_bits;
        let mut lo = x & lo_mask;
        for (i, &k) in self.round_keys.iter().enumerate() {
            // Alternate which half is updated; each update is invertible whatever the widths.
            if i % 2 == 0 {
                hi ^= mix64(((lo << 1) | 1) ^ k) & hi_mask;
            } else {
                lo ^= mix64((hi << 1) ^ k) & lo_mask;
            }
        }
        (hi << self.lo_bits) | lo
    }

    /// The image of `x` (`x < len`) under the permutation of `0..len`.
    fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.len);
        // Cycle-walking: x lies on a cycle of the domain permutation, and that cycle returns to x
        // (which is < len), so the loop ends; since the domain is < 2 * len it ends quickly.
        let mut y = self.encrypt(x);
        while y >= self.len {
            y = self.encrypt(y);
        }
        y
    }
}

// ---------------------------------------------------------------------------------------------
// The epoch order.

/// The per-epoch tables of a [`Shuffle::ShardBlock`] order: O(number of blocks) memory.
#[derive(Debug)]
struct BlockTables {
    /// Blocks per window.
    window: usize,
    /// The first sample id of each original block.
    block_first_id: Vec<u64>,
    /// The original block at each permuted slot.
    order: Vec<usize>,
    /// The first position of each permuted slot, plus `len` at the end (`order.len() + 1` entries).
    slot_start: Vec<u64>,
}

impl BlockTables {
    /// The permuted slot holding position `p` (`p < len`): the last slot starting at or before
    /// `p` (empty blocks share their start with the next block and are skipped this way).
    fn slot_of(&self, p: u64) -> usize {
        self.slot_start
            .partition_point(|&s| s <= p)
            .saturating_sub(1)
    }

    fn window_count(&self) -> usize {
        self.order.len().div_ceil(self.window)
    }

    /// The permuted slots of window `w`.
    fn window_slots(&self, w: usize) -> Range<usize> {
        let first = w.saturating_mul(self.window).min(self.order.len());
        let end = first.saturating_add(self.window).min(self.order.len());
        first..end
    }
}

#[derive(Debug, Clone)]
enum OrderKind {
    Sequential,
    Global(FeistelPerm),
    ShardBlock(Arc<BlockTables>),
    Custom(Arc<dyn PositionMap>),
}

/// An order that a kind of samples brings itself (a mixture's blend, [`crate::blend`]): the ids
/// at positions of an epoch, a pure function of the epoch and the positions.
pub trait PositionMap: Send + Sync + std::fmt::Debug {
    /// Push the ids at `positions` of epoch `epoch` (each `< len`) to `out`, in order.
    fn ids(&self, epoch: u64, positions: Range<u64>, out: &mut Vec<u64>);
}

/// The length of a custom order known late (packed conversations counted lazily): the positions
/// come into being in order as the order's owner plans them, and the length is known once the
/// plan is done. Every answer is the same whenever it is asked (the plan is a pure function);
/// only when the length becomes known depends on the asking.
pub trait LateLen: Send + Sync + std::fmt::Debug {
    /// The length, once known.
    fn known(&self) -> Option<u64>;
    /// Whether position `p` exists (`p < len`), planning up to it. `false` means the length is
    /// known now. A plan that fails answers `true`: the batch that holds `p` reports the error.
    fn at_least(&self, p: u64) -> bool;
    /// The length as far as it can be told without counting more (exact once known; once
    /// everything it plans from is counted, it may plan the rest: arithmetic then).
    fn estimate(&self) -> u64;
    /// The length, planning the rest of the epoch (a failing plan: the positions planned).
    fn finish(&self) -> u64;
}

/// The global order of one epoch: a permutation of the sample ids `0..len`, looked up by position.
///
/// Cheap to clone (the shard-block tables are shared).
#[derive(Debug, Clone)]
pub struct EpochOrder {
    len: u64,
    shuffle: Shuffle,
    seed: u64,
    epoch: u64,
    kind: OrderKind,
    /// A custom order's length known late ([`LateLen`]); `len` is then unused.
    late: Option<Arc<dyn LateLen>>,
}

impl EpochOrder {
    /// The order of epoch `epoch` of a dataset of `len` samples, shuffled by `shuffle` with `seed`.
    ///
    /// `blocks` are the block (shard) sizes, in dataset order; [`Shuffle::ShardBlock`] requires
    /// them. When given they must add up to `len` whatever the shuffle (an empty slice is valid for
    /// `len == 0`; blocks of size 0 are allowed). Building a shard-block order takes
    /// O(number of blocks) time and memory; the other orders are O(1).
    pub fn new(
        len: u64,
        blocks: Option<&[u64]>,
        shuffle: &Shuffle,
        seed: u64,
        epoch: u64,
    ) -> Result<Self, SamplerError> {
        if let Some(blocks) = blocks {
            let mut sum = 0u64;
            for &b in blocks {
                sum = sum.checked_add(b).ok_or(SamplerError::BlockSumOverflow)?;
            }
            if sum != len {
                return Err(SamplerError::BlockSumMismatch { sum, len });
            }
        }
        let kind = match *shuffle {
            Shuffle::Sequential => OrderKind::Sequential,
            Shuffle::Global => OrderKind::Global(FeistelPerm::new(
                len,
                derive_key(seed, epoch, TAG_GLOBAL, 0),
            )),
            Shuffle::ShardBlock { window } => {
                if window == 0 {
                    return Err(SamplerError::ZeroWindow);
                }
                let blocks = blocks.ok_or(SamplerError::MissingBlocks)?;
                OrderKind::ShardBlock(Arc::new(Self::block_tables(blocks, window, seed, epoch)))
            }
        };
        Ok(Self {
            len,
            shuffle: *shuffle,
            seed,
            epoch,
            kind,
            late: None,
        })
    }

    /// The order of epoch `epoch` of `len` positions that `map` gives (a mixture's). `shuffle`
    /// and `seed` are the loader's, kept for what reads them (readahead waves, resume checks).
    pub fn custom(
        len: u64,
        shuffle: &Shuffle,
        seed: u64,
        epoch: u64,
        map: Arc<dyn PositionMap>,
    ) -> Self {
        Self {
            len,
            shuffle: *shuffle,
            seed,
            epoch,
            kind: OrderKind::Custom(map),
            late: None,
        }
    }

    /// This custom order with its length told by `late` as it is planned (the `len` it was
    /// made with is unused): what needs a position asks whether it exists
    /// ([`EpochOrder::exists`]) instead of the length, so a run starts before the whole epoch
    /// is planned.
    pub fn known_late(self, late: Arc<dyn LateLen>) -> Self {
        Self {
            late: Some(late),
            ..self
        }
    }

    /// The length if it is known without planning more (always, but for a late one).
    pub fn known_len(&self) -> Option<u64> {
        match &self.late {
            Some(l) => l.known(),
            None => Some(self.len),
        }
    }

    /// The length, or while a late one is planned its estimate ([`LateLen::estimate`]).
    pub fn estimated_len(&self) -> u64 {
        match &self.late {
            Some(l) => l.estimate(),
            None => self.len,
        }
    }

    /// Whether `position` is in the epoch (a late order plans up to it).
    pub fn exists(&self, position: u64) -> bool {
        match &self.late {
            Some(l) => l.at_least(position),
            None => position < self.len,
        }
    }

    /// `p.min(len)`, planning a late order only up to `p`.
    fn clamp(&self, p: u64) -> u64 {
        if p == 0 || self.exists(p - 1) {
            p
        } else {
            self.len().min(p)
        }
    }

    /// Push the ids at `positions` (each `< len`) to `out`: one call of a custom order's map
    /// for the whole run, else [`EpochOrder::id_at`] each.
    pub fn ids_into(&self, positions: Range<u64>, out: &mut Vec<u64>) {
        let end = self.clamp(positions.end);
        let positions = positions.start.min(end)..end;
        match &self.kind {
            OrderKind::Custom(map) => map.ids(self.epoch, positions, out),
            _ => out.extend(positions.filter_map(|p| self.id_at(p))),
        }
    }

    fn block_tables(blocks: &[u64], window: u32, seed: u64, epoch: u64) -> BlockTables {
        let mut block_first_id = Vec::with_capacity(blocks.len());
        let mut next = 0u64;
        for &b in blocks {
            block_first_id.push(next);
            next += b; // the caller checked that the sum does not overflow
        }
        let n = blocks.len() as u64;
        let perm = FeistelPerm::new(n, derive_key(seed, epoch, TAG_BLOCKS, 0));
        let order: Vec<usize> = (0..n).map(|j| perm.apply(j) as usize).collect();
        let mut slot_start = Vec::with_capacity(order.len() + 1);
        let mut pos = 0u64;
        for &b in &order {
            slot_start.push(pos);
            pos += blocks[b];
        }
        slot_start.push(pos);
        BlockTables {
            // A window wider than the address space is the same as one window.
            window: usize::try_from(window).unwrap_or(usize::MAX),
            block_first_id,
            order,
            slot_start,
        }
    }

    /// The number of samples (positions) in the epoch (a late order is planned to its end
    /// first: see [`EpochOrder::known_len`]).
    pub fn len(&self) -> u64 {
        match &self.late {
            Some(l) => l.known().unwrap_or_else(|| l.finish()),
            None => self.len,
        }
    }

    /// Whether the epoch is empty.
    pub fn is_empty(&self) -> bool {
        !self.exists(0)
    }

    /// The shuffle this order was built with.
    pub fn shuffle(&self) -> Shuffle {
        self.shuffle
    }

    /// The seed this order was built with.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The epoch this order is for.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The sample id at `position`, or `None` when `position >= len`.
    ///
    /// O(1) expected time for [`Shuffle::Sequential`] and [`Shuffle::Global`], O(log blocks) for
    /// [`Shuffle::ShardBlock`].
    pub fn id_at(&self, position: u64) -> Option<u64> {
        if !self.exists(position) {
            return None;
        }
        Some(match &self.kind {
            OrderKind::Sequential => position,
            OrderKind::Global(perm) => perm.apply(position),
            OrderKind::ShardBlock(t) => {
                let slot = t.slot_of(position);
                let w = slot / t.window;
                let slots = t.window_slots(w);
                let first = t.slot_start[slots.start];
                let size = t.slot_start[slots.end] - first;
                let key = derive_key(self.seed, self.epoch, TAG_WINDOW, w as u64);
                let q = first + FeistelPerm::new(size, key).apply(position - first);
                let s = t.slot_of(q);
                t.block_first_id[t.order[s]] + (q - t.slot_start[s])
            }
            OrderKind::Custom(map) => {
                let mut one = Vec::with_capacity(1);
                map.ids(self.epoch, position..position + 1, &mut one);
                return one.first().copied();
            }
        })
    }

    /// The ids of the whole epoch, in order.
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len()).filter_map(|p| self.id_at(p))
    }

    /// The number of [`Shuffle::ShardBlock`] windows in the epoch (0 for the other shuffles).
    pub fn window_count(&self) -> u64 {
        match &self.kind {
            OrderKind::ShardBlock(t) => t.window_count() as u64,
            _ => 0,
        }
    }

    /// The index of the [`Shuffle::ShardBlock`] window holding `position`, or `None` for the other
    /// shuffles and for `position >= len`.
    pub fn window_of(&self, position: u64) -> Option<u64> {
        match &self.kind {
            OrderKind::ShardBlock(t) if position < self.len => {
                Some((t.slot_of(position) / t.window) as u64)
            }
            _ => None,
        }
    }

    /// The [`Shuffle::ShardBlock`] window `index`: its positions and its blocks, or `None` for the
    /// other shuffles and for `index >= window_count()`.
    pub fn window(&self, index: u64) -> Option<ShardWindow> {
        let OrderKind::ShardBlock(t) = &self.kind else {
            return None;
        };
        let w = usize::try_from(index).ok()?;
        if w >= t.window_count() {
            return None;
        }
        let slots = t.window_slots(w);
        Some(ShardWindow {
            index,
            positions: t.slot_start[slots.start]..t.slot_start[slots.end],
            blocks: t.order[slots].to_vec(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Ranks and steps.

/// One rank's share of an epoch, from a starting position on.
///
/// Ranks step together: step `t` takes the `world_size * batch_size` positions from
/// `start + t * world_size * batch_size`, and rank `r` gets the `batch_size` of them from offset
/// `r * batch_size`. Every rank of the same world size and start has the same [`steps`] and
/// full batches of `batch_size` slots. See [`Tail`] for the end of the epoch.
///
/// [`steps`]: RankPlan::steps
#[derive(Debug, Clone)]
pub struct RankPlan {
    order: EpochOrder,
    start: u64,
    world_size: u32,
    rank: u32,
    batch_size: u32,
    tail: Tail,
    /// `None` while a late order's length is not known ([`RankPlan::known_steps`]).
    steps: Option<u64>,
}

impl RankPlan {
    /// The steps from `start` of an epoch of `len` positions.
    fn steps_of(
        len: u64,
        start: u64,
        world_size: u32,
        batch_size: u32,
        tail: Tail,
    ) -> Result<u64, SamplerError> {
        let stride = u64::from(world_size) * u64::from(batch_size);
        let remaining = len.saturating_sub(start);
        Ok(match tail {
            Tail::Drop => remaining / stride,
            Tail::Pad => {
                let steps = remaining / stride + u64::from(!remaining.is_multiple_of(stride));
                // Every position of the padded epoch must be representable.
                steps
                    .checked_mul(stride)
                    .and_then(|n| n.checked_add(start))
                    .ok_or(SamplerError::PositionOverflow)?;
                steps
            }
        })
    }

    /// The steps left from `start` once the order's length is known, without planning more
    /// (`None` while a late order is being planned).
    pub fn known_steps(&self) -> Option<u64> {
        if self.steps.is_some() {
            return self.steps;
        }
        let len = self.order.known_len()?;
        Self::steps_of(len, self.start, self.world_size, self.batch_size, self.tail).ok()
    }

    /// Whether step `step` (counted from `start`) is in the epoch: a late order is planned up
    /// to the positions the step needs (its last one, or under [`Tail::Pad`] its first).
    pub fn has_step(&self, step: u64) -> bool {
        if let Some(steps) = self.known_steps() {
            return step < steps;
        }
        let stride = self.step_positions();
        let first = step
            .checked_mul(stride)
            .and_then(|n| n.checked_add(self.start));
        let needed = match self.tail {
            Tail::Drop => first.and_then(|f| f.checked_add(stride - 1)),
            Tail::Pad => first,
        };
        match needed {
            Some(p) if self.order.exists(p) => true,
            _ => step < self.steps(),
        }
    }

    /// The steps of a whole epoch from position 0 as far as they can be told without planning
    /// more: exact once the order's length is known, else from its estimate.
    pub fn estimated_epoch_steps(&self) -> u64 {
        let len = self.order.estimated_len();
        Self::steps_of(len, 0, self.world_size, self.batch_size, self.tail).unwrap_or(0)
    }

    /// The plan of rank `rank` of `world_size` ranks, each taking `batch_size` samples a step,
    /// from global position `start` (0 for a fresh epoch; a saved [`position_after`] to resume,
    /// possibly with a different world size). `start == order.len()` is the end of the epoch and
    /// gives 0 steps.
    ///
    /// [`position_after`]: RankPlan::position_after
    pub fn new(
        order: EpochOrder,
        start: u64,
        world_size: u32,
        rank: u32,
        batch_size: u32,
        tail: Tail,
    ) -> Result<Self, SamplerError> {
        if world_size == 0 {
            return Err(SamplerError::ZeroWorldSize);
        }
        if rank >= world_size {
            return Err(SamplerError::RankOutOfRange { rank, world_size });
        }
        if batch_size == 0 {
            return Err(SamplerError::ZeroBatchSize);
        }
        // a late order is planned up to `start` only
        let fits = match order.known_len() {
            Some(len) => start <= len,
            None => start == 0 || order.exists(start - 1),
        };
        if !fits {
            return Err(SamplerError::StartPastEnd {
                start,
                len: order.len(),
            });
        }
        let steps = match order.known_len() {
            Some(len) => Some(Self::steps_of(len, start, world_size, batch_size, tail)?),
            None => None,
        };
        Ok(Self {
            order,
            start,
            world_size,
            rank,
            batch_size,
            tail,
            steps,
        })
    }

    /// The epoch order the plan reads.
    pub fn order(&self) -> &EpochOrder {
        &self.order
    }

    /// The global position the plan starts at.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The number of ranks.
    pub fn world_size(&self) -> u32 {
        self.world_size
    }

    /// This plan's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Samples per rank per step.
    pub fn batch_size(&self) -> u32 {
        self.batch_size
    }

    /// What happens to the end of the epoch.
    pub fn tail(&self) -> Tail {
        self.tail
    }

    /// Positions consumed by one step of all ranks: `world_size * batch_size`.
    pub fn step_positions(&self) -> u64 {
        u64::from(self.world_size) * u64::from(self.batch_size)
    }

    /// The number of steps (batches of this rank) in the whole epoch, from position 0 (what
    /// [`RankPlan::steps`] is for a fresh epoch).
    pub fn epoch_steps(&self) -> u64 {
        let (len, stride) = (self.order.len(), self.step_positions());
        match self.tail {
            Tail::Drop => len / stride,
            Tail::Pad => len.div_ceil(stride),
        }
    }

    /// The number of steps (batches of this rank) left in the epoch from `start`; the same for
    /// every rank. A late order is planned to its end first ([`RankPlan::known_steps`],
    /// [`RankPlan::has_step`] do not).
    pub fn steps(&self) -> u64 {
        self.known_steps().unwrap_or_else(|| {
            Self::steps_of(
                self.order.len(),
                self.start,
                self.world_size,
                self.batch_size,
                self.tail,
            )
            .unwrap_or(0)
        })
    }

    /// This rank's batch at `step` (counted from `start`): exactly `batch_size` slots.
    pub fn batch(&self, step: u64) -> Result<Batch<'_>, SamplerError> {
        if !self.has_step(step) {
            return Err(SamplerError::StepOutOfRange {
                step,
                steps: self.steps(),
            });
        }
        let b = u64::from(self.batch_size);
        // No overflow: start + steps * stride fits (checked in `new` for Pad; <= len for Drop).
        let first = self.start + step * self.step_positions() + u64::from(self.rank) * b;
        Ok(Batch {
            plan: self,
            next: first,
            end: first + b,
        })
    }

    /// Replaces the contents of `out` with this rank's batch at `step` (reusing its allocation).
    /// On error `out` is left empty.
    pub fn fill_batch(&self, step: u64, out: &mut Vec<Slot>) -> Result<(), SamplerError> {
        out.clear();
        let batch = self.batch(step)?;
        if let OrderKind::Custom(_) = &self.order.kind {
            // one lookup for the run of real positions (a blend walks its state once), then
            // the padding, each the repeat of its position
            let (first, end) = (batch.next, batch.end);
            let real_end = self.order.clamp(end).max(first);
            let mut ids = Vec::with_capacity((end - first) as usize);
            self.order.ids_into(first..real_end, &mut ids);
            out.extend(ids.into_iter().zip(first..).map(|(id, position)| Slot {
                id,
                position,
                padding: false,
            }));
            out.extend(batch.skip(out.len()));
            return Ok(());
        }
        out.extend(batch);
        Ok(())
    }

    /// The global position reached after `steps_done` steps of all ranks: what a checkpoint saves
    /// and a resumed plan takes as `start` (with any world size).
    ///
    /// It is `start + steps_done * world_size * batch_size`, capped at `len`; once all
    /// [`steps`](RankPlan::steps) are done it is `len` (the epoch is over, including a tail that
    /// [`Tail::Drop`] dropped, so a resume on another world size does not pick the tail up).
    pub fn position_after(&self, steps_done: u64) -> u64 {
        if !self.has_step(steps_done) {
            return self.order.len();
        }
        steps_done
            .checked_mul(self.step_positions())
            .and_then(|n| n.checked_add(self.start))
            .map_or_else(|| self.order.len(), |p| self.order.clamp(p))
    }
}

/// The slots of one rank's batch, in order: an iterator of exactly `batch_size` [`Slot`]s.
#[derive(Debug, Clone)]
pub struct Batch<'a> {
    plan: &'a RankPlan,
    next: u64,
    end: u64,
}

impl Iterator for Batch<'_> {
    type Item = Slot;

    fn next(&mut self) -> Option<Slot> {
        if self.next >= self.end {
            return None;
        }
        let position = self.next;
        self.next += 1;
        let order = &self.plan.order;
        let (source, padding) = if order.exists(position) {
            (position, false)
        } else {
            // Only under Tail::Pad, and only with len > 0 (len == 0 gives no steps).
            let len = order.len();
            ((position - len) % len.max(1), true)
        };
        let id = order.id_at(source)?;
        Some(Slot {
            id,
            position,
            padding,
        })
    }

    fn nth(&mut self, n: usize) -> Option<Slot> {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.next = self.next.saturating_add(n).min(self.end);
        self.next()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.end - self.next).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl ExactSizeIterator for Batch<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A late length over `len` positions planned `chunk` at a time: `planned` counts the
    /// positions that came into being.
    #[derive(Debug)]
    struct Late {
        len: u64,
        chunk: u64,
        planned: std::sync::Mutex<u64>,
    }

    impl LateLen for Late {
        fn known(&self) -> Option<u64> {
            let p = *self.planned.lock().unwrap();
            (p >= self.len).then_some(self.len)
        }
        fn at_least(&self, p: u64) -> bool {
            let mut planned = self.planned.lock().unwrap();
            while *planned <= p && *planned < self.len {
                *planned = (*planned + self.chunk).min(self.len);
            }
            p < self.len
        }
        fn estimate(&self) -> u64 {
            self.len * 2
        }
        fn finish(&self) -> u64 {
            *self.planned.lock().unwrap() = self.len;
            self.len
        }
    }

    #[derive(Debug)]
    struct Times3;

    impl PositionMap for Times3 {
        fn ids(&self, _epoch: u64, positions: Range<u64>, out: &mut Vec<u64>) {
            out.extend(positions.map(|p| p * 3));
        }
    }

    #[test]
    fn a_late_length_gives_the_plan_of_the_known_one_planning_only_what_steps_need() {
        for (len, world, batch, tail, start) in [
            (50u64, 1u32, 4u32, Tail::Drop, 0u64),
            (50, 2, 3, Tail::Pad, 0),
            (50, 3, 2, Tail::Drop, 12),
            (49, 2, 5, Tail::Pad, 20),
            (7, 1, 8, Tail::Pad, 0),
            (7, 1, 8, Tail::Drop, 0),
        ] {
            let s = Shuffle::Global;
            let known = EpochOrder::custom(len, &s, 1, 0, Arc::new(Times3));
            let late = Arc::new(Late {
                len,
                chunk: 5,
                planned: std::sync::Mutex::new(0),
            });
            let lazy = EpochOrder::custom(0, &s, 1, 0, Arc::new(Times3)).known_late(late.clone());
            for rank in 0..world {
                let a = RankPlan::new(known.clone(), start, world, rank, batch, tail).unwrap();
                let b = RankPlan::new(lazy.clone(), start, world, rank, batch, tail).unwrap();
                let mut step = 0;
                let (mut x, mut y) = (Vec::new(), Vec::new());
                while b.has_step(step) {
                    a.fill_batch(step, &mut x).unwrap();
                    b.fill_batch(step, &mut y).unwrap();
                    assert_eq!(x, y, "len {len} rank {rank} step {step}");
                    assert_eq!(a.position_after(step + 1), b.position_after(step + 1));
                    step += 1;
                }
                assert_eq!(step, a.steps(), "len {len} world {world} {tail:?}");
                assert!(matches!(
                    b.fill_batch(step, &mut y),
                    Err(SamplerError::StepOutOfRange { .. })
                ));
                assert_eq!(b.known_steps(), Some(a.steps()));
                assert_eq!(b.position_after(step), len);
            }
        }
        // the first step plans only the positions it needs: a chunk, not the epoch
        let late = Arc::new(Late {
            len: 1000,
            chunk: 10,
            planned: std::sync::Mutex::new(0),
        });
        let order = EpochOrder::custom(0, &Shuffle::Global, 1, 0, Arc::new(Times3))
            .known_late(late.clone());
        let plan = RankPlan::new(order, 0, 2, 1, 4, Tail::Drop).unwrap();
        assert_eq!(plan.known_steps(), None);
        assert_eq!(plan.estimated_epoch_steps(), 250);
        let mut out = Vec::new();
        plan.fill_batch(0, &mut out).unwrap();
        assert_eq!(
            out.iter().map(|s| s.id).collect::<Vec<_>>(),
            vec![12, 15, 18, 21]
        );
        assert_eq!(*late.planned.lock().unwrap(), 10);
        // a start deep into the epoch plans up to it; past the end is an error
        let order = EpochOrder::custom(0, &Shuffle::Global, 1, 0, Arc::new(Times3))
            .known_late(late.clone());
        assert!(RankPlan::new(order.clone(), 400, 1, 0, 4, Tail::Drop).is_ok());
        assert_eq!(*late.planned.lock().unwrap(), 400);
        assert!(matches!(
            RankPlan::new(order, 1001, 1, 0, 4, Tail::Drop),
            Err(SamplerError::StartPastEnd { .. })
        ));
    }

    #[test]
    fn feistel_is_a_bijection_of_small_domains() {
        for len in 1..=70u64 {
            for key in [0u64, 1, 0xdead_beef, u64::MAX] {
                let perm = FeistelPerm::new(len, key);
                assert!(perm.hi_bits + perm.lo_bits <= 7);
                // The domain is the smallest power of two >= len.
                let domain = 1u64 << (perm.hi_bits + perm.lo_bits);
                assert!(domain >= len && (len == 1 || domain < 2 * len), "len {len}");
                let mut seen = vec![false; len as usize];
                for x in 0..len {
                    let y = perm.apply(x);
                    assert!(y < len);
                    assert!(!seen[y as usize], "len {len} key {key}: {y} twice");
                    seen[y as usize] = true;
                }
                assert!(seen.iter().all(|&s| s));
            }
        }
    }

    #[test]
    fn feistel_split_is_uneven_for_odd_bit_counts() {
        let perm = FeistelPerm::new(1 << 5, 7);
        assert_eq!((perm.hi_bits, perm.lo_bits), (3, 2));
        let perm = FeistelPerm::new((1 << 40) - 3, 7);
        assert_eq!((perm.hi_bits, perm.lo_bits), (20, 20));
        let perm = FeistelPerm::new(u64::MAX, 7);
        assert_eq!((perm.hi_bits, perm.lo_bits), (32, 32));
        assert!(perm.apply(u64::MAX - 1) < u64::MAX);
        let perm = FeistelPerm::new(1, 7);
        assert_eq!((perm.hi_bits, perm.lo_bits), (0, 0));
        assert_eq!(perm.apply(0), 0);
    }

    #[test]
    fn mix64_matches_splitmix64_reference() {
        // splitmix64 with state 0 yields mix64(GOLDEN) first: 0xe220a8397b1dcdaf.
        assert_eq!(mix64(GOLDEN), 0xe220_a839_7b1d_cdaf);
        assert_eq!(mix64(0), 0);
    }

    #[test]
    fn shard_block_tables_skip_empty_blocks() {
        let blocks = [0u64, 3, 0, 0, 2, 0];
        let order =
            EpochOrder::new(5, Some(&blocks), &Shuffle::ShardBlock { window: 2 }, 1, 2).unwrap();
        let OrderKind::ShardBlock(t) = &order.kind else {
            panic!("not a shard-block order");
        };
        for p in 0..5 {
            let s = t.slot_of(p);
            assert!(t.slot_start[s] <= p && p < t.slot_start[s + 1]);
            assert_ne!(blocks[t.order[s]], 0);
        }
        let mut ids: Vec<u64> = order.ids().collect();
        ids.sort_unstable();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
    }
}

/// An order adapter for samples of different lengths (padded documents): each run of `bucket`
/// consecutive positions of the epoch order is sorted by (length, position), so a batch holds
/// samples of similar lengths and pads less. Buckets are fixed positions of the epoch order, so
/// the adapted order is still a pure function of (seed, epoch) and does not depend on the world
/// size or the batch size; a padding position `p >= len` takes the sample of position
/// `(p - len) % len`, as in [`RankPlan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthBuckets {
    bucket: u32,
}

impl LengthBuckets {
    /// Buckets of `bucket` positions (at least 2 to change anything).
    pub fn new(bucket: u32) -> LengthBuckets {
        LengthBuckets { bucket }
    }

    /// Replace each slot's id by the sample its position gets under bucketing.
    pub fn apply(&self, order: &EpochOrder, slots: &mut [Slot], len_of: impl Fn(u64) -> u64) {
        let mut cache: Option<(u64, Vec<u64>)> = None;
        for s in slots {
            s.id = self.id_at(order, s.position, &len_of, &mut cache);
        }
    }

    /// The sample at epoch `position` under bucketing; `cache` keeps the last sorted bucket.
    fn id_at(
        &self,
        order: &EpochOrder,
        position: u64,
        len_of: &impl Fn(u64) -> u64,
        cache: &mut Option<(u64, Vec<u64>)>,
    ) -> u64 {
        let len = order.len();
        let p = if position < len {
            position
        } else {
            (position - len) % len.max(1)
        };
        let first = p - p % u64::from(self.bucket);
        if cache.as_ref().is_none_or(|(f, _)| *f != first) {
            let last = (first + u64::from(self.bucket)).min(len);
            // (length, position, sample): ties keep the epoch order.
            let mut run: Vec<(u64, u64, u64)> = (first..last)
                .filter_map(|q| order.id_at(q).map(|d| (len_of(d), q, d)))
                .collect();
            run.sort_unstable();
            *cache = Some((first, run.into_iter().map(|r| r.2).collect()));
        }
        let (_, run) = cache.as_ref().expect("just filled");
        run[(p - first) as usize]
    }
}
