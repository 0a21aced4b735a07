//! The order of a mixture of datasets: which source each position of the blended stream takes,
//! and which of that source's samples.
//!
//! **The stream.** A mixture is one endless stream of samples, indexed by `g = 0, 1, 2, ...`;
//! epoch `e` of the loader is the slice `e * epoch_len .. (e + 1) * epoch_len` of it, so the
//! blend and every source's passes run on across epochs.
//!
//! **Blending: error diffusion** (Megatron's rule, with exact integers). The weights are
//! quantised to integers summing to [`UNIT`] (2^32). Source `s`'s target after `g` samples is
//! `T_s(g)`, the sum of its weight over the samples before `g` (the weights of the phase each
//! sample is in, so a schedule is a piecewise-linear target). Sample `g` goes to the source with
//! the largest deficit `T_s(g + 1) - UNIT * c_s(g)` (`c_s(g)`: its samples among the first `g`),
//! ties to the lower index; a source whose weight is 0 in the phase is never picked. So every
//! prefix holds each source's share to within about one sample (the tests measure the bound), and
//! no coin is flipped: the order is a function of the weights, the schedule and `g` only.
//!
//! **Random access in O(sources) memory.** The state after `g` samples is the counts `c_s(g)`;
//! the deficits follow from them exactly (integers), so a walk may start from any known state
//! and gives the same picks. Known states are the origin, marks every [`MARK`] samples (at most
//! [`MAX_MARKS`] kept, the oldest dropped) and the ends of the last few lookups (a rank's next
//! batch starts where its last one ended). Nothing is materialised per sample.
//!
//! **Each source on its own.** Source `s`'s `k`-th sample in the stream is in its pass
//! `k / len_s`, at position `k % len_s` of that pass's order: the loader's shuffle with a key of
//! the seed and the source's name, a new permutation every pass ([`EpochOrder`] with the pass as
//! its epoch). A small source repeats with a new shuffle; a large one never has to finish.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{EngineError, Result};
use crate::sampler::{EpochOrder, PositionMap, Shuffle};
use crate::sync::lock;

/// What the weights of a phase sum to once quantised.
pub const UNIT: u64 = 1 << 32;
/// Samples between two marks of the walk's known states.
pub const MARK: u64 = 4096;
/// Marks kept (the oldest is dropped beyond): with 8 sources, 16 KiB.
pub const MAX_MARKS: usize = 256;
/// Ends of recent lookups kept.
const RECENT: usize = 16;

/// One source of a blend: its name and how many samples a pass of it has (and, for a
/// shard-block shuffle, its blocks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlendSource {
    /// The source's name (it keys its shuffle, so adding a source does not change the others').
    pub name: String,
    /// Samples in one pass.
    pub len: u64,
    /// Records per shard, for [`Shuffle::ShardBlock`].
    pub blocks: Option<Vec<u64>>,
}

/// Weights from stream sample `start` on, quantised (they sum to [`UNIT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    /// The first stream sample of the phase.
    pub start: u64,
    /// One weight per source, in the sources' order.
    pub weights: Vec<u64>,
}

/// The mistakes of a mixture's definition that every front and every kind of mixture (the blend,
/// the mixture of sources, the mixture of conversations) can meet, said once, the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MixtureMistake {
    /// No source.
    #[error("a mixture needs at least one source")]
    NoSources,
    /// No weights and no schedule.
    #[error("a mixture needs weights")]
    NoWeights,
    /// A schedule whose steps do not increase.
    #[error("a schedule's steps must increase: {later} comes after {earlier}")]
    StepsDoNotIncrease {
        /// The step before.
        earlier: u64,
        /// The step after it, not above it.
        later: u64,
    },
}

impl From<MixtureMistake> for EngineError {
    fn from(m: MixtureMistake) -> EngineError {
        EngineError::Config(m.to_string())
    }
}

/// `weights` (finite, >= 0, not all 0) as integers summing to [`UNIT`] (largest remainders get
/// the units left over; ties to the lower index). A positive weight never rounds to 0.
pub fn quantize(weights: &[f64]) -> Result<Vec<u64>> {
    let bad = |m: String| Err(EngineError::Config(m));
    if weights.is_empty() {
        return Err(MixtureMistake::NoSources.into());
    }
    if let Some(w) = weights.iter().find(|w| !w.is_finite() || **w < 0.0) {
        return bad(format!(
            "a mixture's weights must be finite numbers >= 0, got {w}"
        ));
    }
    let sum: f64 = weights.iter().sum();
    if sum <= 0.0 || !sum.is_finite() {
        return bad("a mixture's weights must not all be 0".into());
    }
    let exact: Vec<f64> = weights.iter().map(|w| w / sum * UNIT as f64).collect();
    let mut q: Vec<u64> = exact
        .iter()
        .zip(weights)
        .map(|(e, w)| {
            let f = e.floor() as u64;
            if *w > 0.0 { f.max(1) } else { 0 }
        })
        .collect();
    let total: u64 = q.iter().sum();
    if total > UNIT {
        // only from the max(1) of tiny weights: take the excess from the largest
        let mut excess = total - UNIT;
        while excess > 0 {
            let i = (0..q.len())
                .max_by_key(|&i| (q[i], usize::MAX - i))
                .unwrap_or(0);
            let take = excess.min(q[i].saturating_sub(1));
            q[i] -= take;
            excess -= take;
            if take == 0 {
                break;
            }
        }
    } else {
        let mut order: Vec<usize> = (0..q.len()).filter(|&i| weights[i] > 0.0).collect();
        order.sort_by(|&a, &b| {
            let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
            rb.total_cmp(&ra).then(a.cmp(&b))
        });
        for i in order.into_iter().cycle().take((UNIT - total) as usize) {
            q[i] += 1;
        }
    }
    Ok(q)
}

/// What a mixture's resume state keeps of its blend: enough to check that a loader continues
/// the same blend, and to continue it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlendState {
    /// The sources' names, in order.
    pub sources: Vec<String>,
    /// Their fingerprints (the dataset and what a sample is).
    pub fingerprints: Vec<String>,
    /// Stream samples per epoch.
    pub epoch_len: u64,
    /// Where the blend started (0, or where a new blend was started on resume).
    pub origin: u64,
    /// Each source's samples before the origin.
    pub base: Vec<u64>,
    /// The phases that began at or before the state's position (the history a resumed run
    /// must keep).
    pub phases: Vec<Phase>,
    /// The samples per step a schedule in steps was converted with (the global batch of the
    /// run that started the blend); absent for a schedule in samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_step: Option<u64>,
}

/// The definition of a blend.
#[derive(Debug, Clone)]
pub struct BlendDef {
    /// The sources.
    pub sources: Vec<BlendSource>,
    /// The phases, by start; the first starts at `origin`.
    pub phases: Vec<Phase>,
    /// Where the blend starts (counts before it are `base`).
    pub origin: u64,
    /// Each source's samples before the origin.
    pub base: Vec<u64>,
    /// Stream samples per epoch of the loader.
    pub epoch_len: u64,
    /// The sources' shuffle (each pass's order).
    pub shuffle: Shuffle,
    /// The loader's seed.
    pub seed: u64,
}

impl BlendDef {
    /// Check the definition: phases sorted and starting at the origin, weights of the right
    /// length summing to [`UNIT`], no weight on an empty source, an epoch of at least one sample.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(EngineError::Config(m));
        let n = self.sources.len();
        if n == 0 {
            return Err(MixtureMistake::NoSources.into());
        }
        if n > u32::MAX as usize {
            return bad(format!("{n} sources are too many for a mixture"));
        }
        if self.base.len() != n {
            return bad("the blend's base counts do not match its sources".into());
        }
        if self.epoch_len == 0 {
            return bad("a mixture's epoch must hold at least one sample".into());
        }
        let Some(first) = self.phases.first() else {
            return Err(MixtureMistake::NoWeights.into());
        };
        if first.start != self.origin {
            return bad(format!(
                "the blend's first weights start at sample {}, not at its origin {}",
                first.start, self.origin
            ));
        }
        for w in self.phases.windows(2) {
            if w[1].start <= w[0].start {
                return Err(MixtureMistake::StepsDoNotIncrease {
                    earlier: w[0].start,
                    later: w[1].start,
                }
                .into());
            }
        }
        for p in &self.phases {
            if p.weights.len() != n {
                return bad(format!(
                    "weights from sample {} give {} values for {n} sources",
                    p.start,
                    p.weights.len()
                ));
            }
            if p.weights.iter().sum::<u64>() != UNIT {
                return bad(format!(
                    "weights from sample {} are not normalised",
                    p.start
                ));
            }
            for (s, w) in self.sources.iter().zip(&p.weights) {
                if *w > 0 && s.len == 0 {
                    return bad(format!(
                        "source '{}' has no samples but a weight above 0 (from sample {})",
                        s.name, p.start
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A walk over the stream: the counts after `g` samples and the deficits of sample `g`.
struct Walk<'a> {
    def: &'a BlendDef,
    /// Cumulative targets at each phase's start (relative to the origin, in 1/UNIT samples).
    acc: &'a [Vec<u128>],
    g: u64,
    counts: Vec<u64>,
    phase: usize,
    /// `T_s(g + 1) - UNIT * (c_s(g) - base_s)`.
    deficit: Vec<i64>,
    /// The phase's weights as the deficits' type (each at most [`UNIT`]).
    weights: Vec<i64>,
    /// The stream sample the next phase starts at (`u64::MAX`: none).
    next_start: u64,
}

impl<'a> Walk<'a> {
    fn new(def: &'a BlendDef, acc: &'a [Vec<u128>], g: u64, counts: Vec<u64>) -> Walk<'a> {
        let n = def.sources.len();
        let mut w = Walk {
            def,
            acc,
            g,
            counts,
            phase: 0,
            deficit: vec![0; n],
            weights: vec![0; n],
            next_start: u64::MAX,
        };
        w.phase = def
            .phases
            .partition_point(|p| p.start <= g)
            .saturating_sub(1);
        w.enter_phase();
        w
    }

    /// The phase's weights and end, and the deficits from the counts, exactly.
    fn enter_phase(&mut self) {
        let p = &self.def.phases[self.phase];
        for (w, &pw) in self.weights.iter_mut().zip(&p.weights) {
            // `check`: weights sum to UNIT, so each fits an i64
            *w = pw as i64;
        }
        self.next_start = self
            .def
            .phases
            .get(self.phase + 1)
            .map_or(u64::MAX, |next| next.start);
        self.reset();
    }

    /// The deficits from the counts, exactly.
    fn reset(&mut self) {
        let p = &self.def.phases[self.phase];
        let into = u128::from(self.g + 1 - p.start);
        for s in 0..self.counts.len() {
            let target = self.acc[self.phase][s] + u128::from(p.weights[s]) * into;
            let have = u128::from(self.counts[s] - self.def.base[s]) * u128::from(UNIT);
            let d = target as i128 - have as i128;
            // |deficit| stays within a few samples (tests); clamp rather than wrap if not
            self.deficit[s] = d.clamp(i128::from(i64::MIN / 2), i128::from(i64::MAX / 2)) as i64;
        }
    }

    /// Take sample `g`: its source, and that source's count before it. The source of largest
    /// deficit among those of positive weight (the first of equals); then every deficit grows
    /// by its weight, or, where a phase starts, all are computed afresh.
    #[inline(always)]
    fn step(&mut self) -> (u32, u64) {
        let n = self.deficit.len();
        let (deficit, weights, counts) = (
            &mut self.deficit[..n],
            &self.weights[..n],
            &mut self.counts[..n],
        );
        let mut best = usize::MAX;
        let mut best_d = i64::MIN;
        for (s, (&d, &w)) in deficit.iter().zip(weights).enumerate() {
            if w > 0 && d > best_d {
                best = s;
                best_d = d;
            }
        }
        let k = counts[best];
        counts[best] += 1;
        deficit[best] -= UNIT as i64;
        self.g += 1;
        if self.g == self.next_start {
            self.phase += 1;
            self.enter_phase();
        } else {
            for (d, &w) in deficit.iter_mut().zip(weights) {
                *d += w;
            }
        }
        (best as u32, k)
    }
}

#[derive(Debug, Default)]
struct Memo {
    /// Counts at multiples of [`MARK`].
    marks: BTreeMap<u64, Box<[u64]>>,
    /// Counts at the ends of recent lookups.
    recent: VecDeque<(u64, Box<[u64]>)>,
}

/// A blend: its definition, and the memo of known states that makes lookups cheap.
#[derive(Debug)]
pub struct Blend {
    def: BlendDef,
    acc: Vec<Vec<u128>>,
    /// Each source's shuffle key.
    keys: Vec<u64>,
    /// The first mixture id of each source (ids are the sources' ids, concatenated).
    offsets: Vec<u64>,
    memo: Mutex<Memo>,
    /// For stream samples before a later origin: the same weights from zero.
    before: Option<Box<Blend>>,
}

impl Blend {
    /// The blend `def` describes (checked).
    pub fn new(def: BlendDef) -> Result<Blend> {
        def.check()?;
        let n = def.sources.len();
        let mut acc = Vec::with_capacity(def.phases.len());
        let mut t = vec![0u128; n];
        for (i, p) in def.phases.iter().enumerate() {
            if i > 0 {
                let prev = &def.phases[i - 1];
                for (s, t) in t.iter_mut().enumerate() {
                    *t += u128::from(prev.weights[s]) * u128::from(p.start - prev.start);
                }
            }
            acc.push(t.clone());
        }
        let keys = def
            .sources
            .iter()
            .map(|s| source_key(def.seed, &s.name))
            .collect();
        let mut offsets = Vec::with_capacity(n);
        let mut next = 0u64;
        for s in &def.sources {
            offsets.push(next);
            next = next.checked_add(s.len).ok_or_else(|| {
                EngineError::Config("the sources hold more than 2^64 samples together".into())
            })?;
        }
        let before = if def.origin > 0 {
            let fresh = BlendDef {
                phases: vec![Phase {
                    start: 0,
                    weights: def.phases[0].weights.clone(),
                }],
                origin: 0,
                base: vec![0; n],
                ..def.clone()
            };
            Some(Box::new(Blend::new(fresh)?))
        } else {
            None
        };
        Ok(Blend {
            def,
            acc,
            keys,
            offsets,
            memo: Mutex::new(Memo::default()),
            before,
        })
    }

    /// The definition.
    pub fn def(&self) -> &BlendDef {
        &self.def
    }

    /// The weights in effect at stream sample `g`.
    pub fn weights_at(&self, g: u64) -> &[u64] {
        let i = self
            .def
            .phases
            .partition_point(|p| p.start <= g)
            .saturating_sub(1);
        &self.def.phases[i].weights
    }

    /// The counts after `g` stream samples: each source's samples among them.
    pub fn counts_at(&self, g: u64) -> Vec<u64> {
        if g < self.def.origin
            && let Some(b) = &self.before
        {
            return b.counts_at(g);
        }
        let mut out = Vec::new();
        self.walk(g, 0, &mut |_, _| (), &mut out);
        out
    }

    /// Push `(source, k)` for each stream sample of `range`: its source and that source's count
    /// before it (`k`: the sample's index in the source's own endless sequence).
    pub fn picks(&self, range: Range<u64>, out: &mut Vec<(u32, u64)>) {
        self.each_pick(range, &mut |s, k| out.push((s, k)));
    }

    /// [`Blend::picks`] handed to `take` one by one.
    fn each_pick<F: FnMut(u32, u64)>(&self, range: Range<u64>, take: &mut F) {
        if range.start < self.def.origin
            && let Some(b) = &self.before
        {
            let split = range.end.min(self.def.origin);
            b.each_pick(range.start..split, take);
            if split < range.end {
                self.each_pick(split..range.end, take);
            }
            return;
        }
        let mut counts = Vec::new();
        self.walk(range.start, range.end - range.start, take, &mut counts);
    }

    /// Walk from the best known state at or before `from` to `from + n`, calling `take` for each
    /// of the `n` samples from `from`; `counts` gets the counts at `from`.
    fn walk<F: FnMut(u32, u64)>(&self, from: u64, n: u64, take: &mut F, counts: &mut Vec<u64>) {
        let (at, start) = {
            let memo = lock(&self.memo);
            // the latest known state at or before `from` (copied once, found by reference)
            let mut best: (u64, &[u64]) = (self.def.origin, &self.def.base);
            if let Some((&g, c)) = memo.marks.range(..=from).next_back()
                && g >= best.0
            {
                best = (g, c);
            }
            for (g, c) in &memo.recent {
                if *g <= from && *g > best.0 {
                    best = (*g, c);
                }
            }
            (best.0, best.1.to_vec())
        };
        let mut w = Walk::new(&self.def, &self.acc, at, start);
        let mut new_marks = Vec::new();
        while w.g < from {
            w.step();
            if w.g.is_multiple_of(MARK) {
                new_marks.push((w.g, w.counts.clone().into_boxed_slice()));
            }
        }
        counts.clear();
        counts.extend_from_slice(&w.counts);
        for _ in 0..n {
            let (s, k) = w.step();
            take(s, k);
            if w.g.is_multiple_of(MARK) {
                new_marks.push((w.g, w.counts.clone().into_boxed_slice()));
            }
        }
        let mut memo = lock(&self.memo);
        for (g, c) in new_marks {
            memo.marks.insert(g, c);
        }
        while memo.marks.len() > MAX_MARKS {
            memo.marks.pop_first();
        }
        if n > 0 || from > at {
            memo.recent.push_back((w.g, w.counts.into_boxed_slice()));
            if memo.recent.len() > RECENT {
                memo.recent.pop_front();
            }
        }
    }

    /// The mixture ids of stream samples `range` pushed to `out`: each pick's source's order of
    /// its pass (made once per call for each (source, pass) met), at the pick's place in it.
    pub fn ids(&self, range: Range<u64>, out: &mut Vec<u64>) {
        out.reserve((range.end - range.start) as usize);
        // per source: the first count of the pass last met, and that pass's order
        let mut orders: Vec<Option<(u64, EpochOrder)>> = Vec::new();
        orders.resize_with(self.def.sources.len(), || None);
        self.each_pick(range, &mut |s, k| {
            let src = &self.def.sources[s as usize];
            let slot = &mut orders[s as usize];
            let j = match slot {
                Some((first, _)) if k >= *first && k - *first < src.len => k - *first,
                _ => {
                    let pass = k / src.len;
                    let order = EpochOrder::new(
                        src.len,
                        src.blocks.as_deref(),
                        &self.def.shuffle,
                        self.keys[s as usize],
                        pass,
                    )
                    .or_else(|_| {
                        EpochOrder::new(
                            src.len,
                            None,
                            &Shuffle::Global,
                            self.keys[s as usize],
                            pass,
                        )
                    })
                    .expect("a global order of any length builds");
                    *slot = Some((pass * src.len, order));
                    k % src.len
                }
            };
            let order = &slot.as_ref().expect("set just above").1;
            let local = order.id_at(j).unwrap_or(j);
            out.push(self.offsets[s as usize] + local);
        });
    }
}

impl PositionMap for Blend {
    fn ids(&self, epoch: u64, positions: Range<u64>, out: &mut Vec<u64>) {
        let base = epoch.saturating_mul(self.def.epoch_len);
        Blend::ids(
            self,
            base.saturating_add(positions.start)..base.saturating_add(positions.end),
            out,
        );
    }
}

/// A source's shuffle key: the seed mixed with its name (so one source's order does not depend
/// on the others, nor on its place in the list).
fn source_key(seed: u64, name: &str) -> u64 {
    let h = stokehold_format::crc::crc32c(name.as_bytes());
    let h2 = stokehold_format::crc::crc32c(&[name.as_bytes(), b"#2"].concat());
    seed ^ ((u64::from(h) << 32) | u64::from(h2)).rotate_left(17)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(lens: &[u64], weights: &[&[f64]], starts: &[u64]) -> BlendDef {
        BlendDef {
            sources: lens
                .iter()
                .enumerate()
                .map(|(i, &len)| BlendSource {
                    name: format!("s{i}"),
                    len,
                    blocks: None,
                })
                .collect(),
            phases: weights
                .iter()
                .zip(starts)
                .map(|(w, &start)| Phase {
                    start,
                    weights: quantize(w).unwrap(),
                })
                .collect(),
            origin: 0,
            base: vec![0; lens.len()],
            epoch_len: 1000,
            shuffle: Shuffle::Global,
            seed: 7,
        }
    }

    #[test]
    fn quantised_weights_sum_to_the_unit_and_keep_small_ones() {
        for w in [
            vec![0.7, 0.3],
            vec![1.0, 1.0, 1.0],
            vec![0.6, 0.15, 0.1, 0.1, 0.05],
            vec![1e-12, 1.0],
            vec![0.0, 2.0, 0.0],
        ] {
            let q = quantize(&w).unwrap();
            assert_eq!(q.iter().sum::<u64>(), UNIT, "{w:?}");
            for (a, b) in w.iter().zip(&q) {
                assert_eq!(*a > 0.0, *b > 0, "{w:?}");
            }
        }
        assert!(quantize(&[0.0, 0.0]).is_err());
        assert!(quantize(&[1.0, f64::NAN]).is_err());
        assert!(quantize(&[1.0, -0.5]).is_err());
    }

    #[test]
    fn every_prefix_holds_each_share_to_within_one_sample() {
        let sets: [&[f64]; 5] = [
            &[0.7, 0.3],
            &[1.0, 1.0, 1.0],
            &[0.6, 0.15, 0.1, 0.1, 0.05],
            &[0.01, 0.33, 0.66],
            &[5.0, 3.0, 2.0, 1.0, 1.0, 1.0, 0.5, 0.25],
        ];
        for w in sets {
            let lens = vec![10u64; w.len()];
            let b = Blend::new(def(&lens, &[w], &[0])).unwrap();
            let q = &b.def.phases[0].weights;
            let mut picks = Vec::new();
            b.picks(0..20_000, &mut picks);
            let mut c = vec![0u64; w.len()];
            for (g, (s, k)) in picks.iter().enumerate() {
                assert_eq!(*k, c[*s as usize]);
                c[*s as usize] += 1;
                for s in 0..w.len() {
                    let share = q[s] as f64 / UNIT as f64 * (g + 1) as f64;
                    assert!(
                        (c[s] as f64 - share).abs() < 1.0,
                        "{w:?}: source {s} has {} of {} (share {share})",
                        c[s],
                        g + 1
                    );
                }
            }
        }
    }

    #[test]
    fn lookups_from_any_state_agree_with_one_walk() {
        let b = Blend::new(def(
            &[7, 1000, 13],
            &[&[0.5, 0.3, 0.2], &[0.1, 0.1, 0.8]],
            &[0, 9_000],
        ))
        .unwrap();
        let mut all = Vec::new();
        b.ids(0..20_000, &mut all);
        // a fresh blend answering scattered ranges, out of order
        let fresh = Blend::new(b.def.clone()).unwrap();
        for r in [
            15_000..15_100,
            3..70,
            8_990..9_010,
            0..1,
            19_999..20_000,
            4_095..4_097,
        ] {
            let mut got = Vec::new();
            fresh.ids(r.clone(), &mut got);
            assert_eq!(got, all[r.start as usize..r.end as usize], "{r:?}");
        }
        // counts agree with the picks
        let mut picks = Vec::new();
        b.picks(0..12_345, &mut picks);
        let mut c = [0u64; 3];
        for (s, _) in &picks {
            c[*s as usize] += 1;
        }
        assert_eq!(fresh.counts_at(12_345), c.to_vec());
    }

    #[test]
    fn ids_are_each_picks_place_in_its_sources_pass_order_and_the_picks_are_pinned() {
        // small sources (many passes inside one call), a schedule with a zero weight and three
        // phases: the ids are, pick by pick, the source's order of that pass at that place
        let b = Blend::new(def(
            &[3, 11, 40],
            &[&[0.2, 0.3, 0.5], &[0.0, 0.6, 0.4], &[0.7, 0.2, 0.1]],
            &[0, 500, 777],
        ))
        .unwrap();
        let mut picks = Vec::new();
        b.picks(0..2_000, &mut picks);
        let mut ids = Vec::new();
        for r in [0..1, 1..333, 333..900, 900..2_000] {
            b.ids(r, &mut ids);
        }
        let naive: Vec<u64> = picks
            .iter()
            .map(|&(s, k)| {
                let src = &b.def.sources[s as usize];
                let order = EpochOrder::new(
                    src.len,
                    None,
                    &Shuffle::Global,
                    b.keys[s as usize],
                    k / src.len,
                )
                .unwrap();
                b.offsets[s as usize] + order.id_at(k % src.len).unwrap()
            })
            .collect();
        assert_eq!(ids, naive);
        // the picks of this definition, as the blend has made them since it was written (a
        // resumed run replays them: a change to the walk must not move one)
        let mut crc = 0u32;
        for (s, k) in &picks {
            crc = stokehold_format::crc::append(crc, &[*s as u8]);
            crc = stokehold_format::crc::append(crc, &k.to_le_bytes());
        }
        assert_eq!(crc, 1_892_960_352, "picks' CRC");
    }

    #[test]
    fn a_small_source_repeats_with_a_new_shuffle_each_pass() {
        let b = Blend::new(def(&[5, 1000], &[&[0.5, 0.5]], &[0])).unwrap();
        let mut picks = Vec::new();
        b.picks(0..40, &mut picks);
        let mut ids = Vec::new();
        b.ids(0..40, &mut ids);
        let small: Vec<u64> = ids.iter().copied().filter(|&i| i < 5).collect();
        assert_eq!(small.len(), 20);
        let passes: Vec<Vec<u64>> = small.chunks(5).map(|c| c.to_vec()).collect();
        for p in &passes {
            let mut s = p.clone();
            s.sort_unstable();
            assert_eq!(s, vec![0, 1, 2, 3, 4], "each pass is a permutation");
        }
        assert!(
            passes.windows(2).any(|w| w[0] != w[1]),
            "passes are reshuffled"
        );
    }

    #[test]
    fn a_schedule_changes_the_shares_from_its_step_and_a_zero_weight_is_never_picked() {
        let b = Blend::new(def(&[100, 100], &[&[1.0, 0.0], &[0.25, 0.75]], &[0, 1000])).unwrap();
        let mut picks = Vec::new();
        b.picks(0..3000, &mut picks);
        assert!(picks[..1000].iter().all(|(s, _)| *s == 0));
        let second = picks[1000..].iter().filter(|(s, _)| *s == 1).count();
        assert!((second as i64 - 1500).abs() <= 1, "{second}");
    }

    #[test]
    fn marks_are_bounded() {
        let b = Blend::new(def(&[3, 5], &[&[0.5, 0.5]], &[0])).unwrap();
        let mut ids = Vec::new();
        b.ids(
            MARK * (MAX_MARKS as u64 + 50)..MARK * (MAX_MARKS as u64 + 50) + 2,
            &mut ids,
        );
        let memo = lock(&b.memo);
        assert!(memo.marks.len() <= MAX_MARKS);
        assert!(memo.recent.len() <= RECENT);
    }
}
