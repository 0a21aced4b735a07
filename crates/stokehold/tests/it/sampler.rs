//! Tests of the sampler: epoch orders are permutations, ranks split an epoch without losing or
//! repeating samples, and a run resumes from a saved position on a different world size.

use std::collections::HashSet;

use proptest::prelude::*;
use stokehold::sampler::{EpochOrder, RankPlan, SamplerError, Shuffle, Slot, Tail};

/// A dataset shape and shuffle to build orders from.
#[derive(Debug, Clone)]
struct Setup {
    len: u64,
    blocks: Option<Vec<u64>>,
    shuffle: Shuffle,
}

impl Setup {
    fn order(&self, seed: u64, epoch: u64) -> EpochOrder {
        EpochOrder::new(self.len, self.blocks.as_deref(), &self.shuffle, seed, epoch)
            .expect("valid setup")
    }
}

/// Global or shard-block setups of up to about `max_len` samples (`with_sequential` adds
/// sequential ones).
fn setup(max_len: u64, with_sequential: bool) -> impl Strategy<Value = Setup> {
    let max_block = (max_len / 40).max(1);
    let sequential = (0..=max_len).prop_map(|len| Setup {
        len,
        blocks: None,
        shuffle: Shuffle::Sequential,
    });
    let global = (0..=max_len).prop_map(|len| Setup {
        len,
        blocks: None,
        shuffle: Shuffle::Global,
    });
    let shard_block = (prop::collection::vec(0..=max_block, 0..=40usize), 1u32..=9).prop_map(
        |(blocks, window)| Setup {
            len: blocks.iter().sum(),
            blocks: Some(blocks),
            shuffle: Shuffle::ShardBlock { window },
        },
    );
    let seq_weight = if with_sequential { 1 } else { 0 };
    prop_oneof![seq_weight => sequential, 3 => global, 3 => shard_block]
}

/// A deterministic stream of pseudo-random numbers for spot checks (splitmix64).
fn random_stream(mut state: u64) -> impl Iterator<Item = u64> {
    std::iter::repeat_with(move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// Asserts that the order is a permutation of `0..len`.
fn assert_permutation(order: &EpochOrder) {
    let len = order.len();
    let mut seen = vec![false; len as usize];
    for p in 0..len {
        let id = order.id_at(p).expect("in range");
        assert!(id < len, "id {id} out of range at position {p} (len {len})");
        assert!(!seen[id as usize], "id {id} seen twice (len {len})");
        seen[id as usize] = true;
    }
    assert!(seen.iter().all(|&s| s));
    assert_eq!(order.id_at(len), None);
    assert_eq!(order.id_at(u64::MAX), None);
}

/// What every rank saw in one run over part of an epoch.
#[derive(Debug, Default)]
struct Part {
    /// Non-padding ids, over all ranks and steps.
    real: Vec<u64>,
    /// Number of padding slots.
    padding: u64,
    /// Steps of the plan (the same on every rank).
    steps: u64,
    /// The position a checkpoint after the run would save.
    position_after: u64,
}

/// Runs `steps_to_run` steps (all of them when `None`) of every rank of a `world`-rank plan from
/// `start`, checking the shape of every batch, and returns what the ranks saw.
fn run_part(
    order: &EpochOrder,
    start: u64,
    world: u32,
    batch: u32,
    tail: Tail,
    steps_to_run: Option<u64>,
) -> Part {
    let len = order.len();
    let stride = u64::from(world) * u64::from(batch);
    let mut part = Part::default();
    let mut out = Vec::new();
    for rank in 0..world {
        let plan = RankPlan::new(order.clone(), start, world, rank, batch, tail).expect("valid");
        let steps = plan.steps();
        let expected_steps = match tail {
            Tail::Drop => (len - start) / stride,
            Tail::Pad => (len - start).div_ceil(stride),
        };
        assert_eq!(steps, expected_steps, "rank {rank}");
        if rank == 0 {
            part.steps = steps;
        }
        let run = steps_to_run.unwrap_or(steps);
        assert!(run <= steps);
        for step in 0..run {
            plan.fill_batch(step, &mut out).expect("step in range");
            assert_eq!(out.len(), batch as usize, "every batch is full");
            let first = start + step * stride + u64::from(rank) * u64::from(batch);
            for (i, slot) in out.iter().enumerate() {
                let position = first + i as u64;
                assert_eq!(slot.position, position);
                if position < len {
                    assert!(!slot.padding);
                    assert_eq!(Some(slot.id), order.id_at(position));
                    part.real.push(slot.id);
                } else {
                    assert_eq!(tail, Tail::Pad, "padding only with Tail::Pad");
                    assert_eq!(step + 1, steps, "padding only in the last step");
                    assert!(slot.padding);
                    assert_eq!(Some(slot.id), order.id_at((position - len) % len));
                    part.padding += 1;
                }
            }
        }
        assert_eq!(
            plan.batch(steps).err(),
            Some(SamplerError::StepOutOfRange { step: steps, steps })
        );
        let after = plan.position_after(run);
        if run == steps {
            assert_eq!(after, len, "after the last step the epoch is over");
        } else {
            assert_eq!(after, start + run * stride);
        }
        if rank == 0 {
            part.position_after = after;
        } else {
            assert_eq!(
                after, part.position_after,
                "every rank saves the same position"
            );
        }
    }
    part
}

fn sorted(mut ids: Vec<u64>) -> Vec<u64> {
    ids.sort_unstable();
    ids
}

fn assert_distinct(ids: &[u64]) {
    let set: HashSet<u64> = ids.iter().copied().collect();
    assert_eq!(set.len(), ids.len(), "an id was repeated");
}

// ---------------------------------------------------------------------------------------------
// 1. Orders are permutations.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn orders_are_permutations(setup in setup(5_000, true), seed: u64, epoch in 0u64..1_000) {
        let order = setup.order(seed, epoch);
        prop_assert_eq!(order.len(), setup.len);
        assert_permutation(&order);
    }
}

#[test]
fn global_is_a_permutation_for_awkward_lengths() {
    let lens = [
        1u64, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 15, 16, 17, 31, 32, 33, 63, 64, 65, 97, 127, 128,
        129, 251, 255, 256, 257, 511, 512, 513, 997, 1021, 1023, 1024, 1025, 2047, 2048, 2049,
        4093, 4095, 4096, 4097,
    ];
    for len in lens {
        for (seed, epoch) in [(0, 0), (1, 0), (0, 1), (u64::MAX, 7), (0x5eed, 1 << 40)] {
            let order = EpochOrder::new(len, None, &Shuffle::Global, seed, epoch).unwrap();
            assert_permutation(&order);
        }
    }
}

#[test]
fn empty_and_single_sample_epochs() {
    for shuffle in [
        Shuffle::Sequential,
        Shuffle::Global,
        Shuffle::ShardBlock { window: 3 },
    ] {
        let order = EpochOrder::new(0, Some(&[]), &shuffle, 1, 2).unwrap();
        assert!(order.is_empty());
        assert_eq!(order.id_at(0), None);
        assert_eq!(order.ids().count(), 0);
        let order = EpochOrder::new(1, Some(&[0, 1, 0]), &shuffle, 1, 2).unwrap();
        assert_eq!(order.ids().collect::<Vec<_>>(), vec![0]);
        assert_eq!(order.id_at(1), None);
    }
    let order = EpochOrder::new(0, Some(&[0, 0]), &Shuffle::ShardBlock { window: 1 }, 3, 4);
    assert_eq!(order.unwrap().window_count(), 2);
}

#[test]
fn sequential_is_the_identity() {
    let order = EpochOrder::new(100, None, &Shuffle::Sequential, 9, 9).unwrap();
    assert_eq!(
        order.ids().collect::<Vec<_>>(),
        (0..100).collect::<Vec<_>>()
    );
    let huge = EpochOrder::new(u64::MAX, None, &Shuffle::Sequential, 0, 0).unwrap();
    assert_eq!(huge.id_at(u64::MAX - 1), Some(u64::MAX - 1));
    assert_eq!(huge.id_at(u64::MAX), None);
}

/// 10,000 random positions of a huge order give distinct in-range ids.
fn spot_check_large(order: &EpochOrder, stream_seed: u64) {
    let len = order.len();
    let mut positions = HashSet::new();
    let mut ids = HashSet::new();
    for r in random_stream(stream_seed) {
        if positions.len() == 10_000 {
            break;
        }
        let p = r % len;
        if positions.insert(p) {
            let id = order.id_at(p).expect("in range");
            assert!(id < len);
            assert!(ids.insert(id), "id {id} for two positions (len {len})");
        }
    }
    assert_eq!(ids.len(), 10_000);
    // The ends of the range too.
    assert!(order.id_at(0).unwrap() < len);
    assert!(order.id_at(len - 1).unwrap() < len);
    assert_eq!(order.id_at(len), None);
}

#[test]
fn global_spot_checks_of_huge_lengths() {
    for len in [
        1_000_000_000u64,
        (1 << 40) - 3,
        1 << 40,
        (1 << 40) + 1,
        u64::MAX,
    ] {
        for epoch in 0..2 {
            let order = EpochOrder::new(len, None, &Shuffle::Global, 42, epoch).unwrap();
            spot_check_large(&order, len ^ epoch);
        }
    }
}

#[test]
fn shard_block_spot_checks_of_huge_lengths() {
    // 10,000 shards of 100,000 samples (10^9), and 1,000 uneven shards summing to about 2^40.
    let even = vec![100_000u64; 10_000];
    let uneven: Vec<u64> = random_stream(5)
        .take(1_000)
        .map(|r| r % (1 << 31))
        .collect();
    for blocks in [even, uneven] {
        let len: u64 = blocks.iter().sum();
        let order = EpochOrder::new(
            len,
            Some(&blocks),
            &Shuffle::ShardBlock { window: 16 },
            7,
            3,
        )
        .unwrap();
        spot_check_large(&order, 11);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Ranks split an epoch.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ranks_split_an_epoch(
        setup in setup(3_000, true),
        seed: u64,
        epoch in 0u64..100,
        world in 1u32..=9,
        batch in 1u32..=17,
        start_frac in 0.0f64..=1.0,
        pad: bool,
    ) {
        let order = setup.order(seed, epoch);
        let len = order.len();
        let start = ((len as f64 * start_frac) as u64).min(len);
        let tail = if pad { Tail::Pad } else { Tail::Drop };
        let part = run_part(&order, start, world, batch, tail, None);
        let stride = u64::from(world) * u64::from(batch);
        let expected: Vec<u64> = match tail {
            // Exactly the ids of positions start..len, once each, the rest padding.
            Tail::Pad => {
                prop_assert_eq!(part.padding, part.steps * stride - (len - start));
                prop_assert!(part.padding < stride);
                (start..len).map(|p| order.id_at(p).unwrap()).collect()
            }
            // Distinct ids: those of the whole steps; fewer than one step dropped.
            Tail::Drop => {
                prop_assert_eq!(part.padding, 0);
                prop_assert!(len - start - part.steps * stride < stride);
                (start..start + part.steps * stride).map(|p| order.id_at(p).unwrap()).collect()
            }
        };
        assert_distinct(&part.real);
        prop_assert_eq!(sorted(part.real), sorted(expected));
    }
}

#[test]
fn pad_from_the_start_sees_every_id_once() {
    let order = EpochOrder::new(1_000, None, &Shuffle::Global, 3, 0).unwrap();
    // 1,000 = 7 * 9 * 15 + 55: the last step has 55 real slots and 8 * 15 + 15 - 55 = 80 padding.
    let part = run_part(&order, 0, 9, 15, Tail::Pad, None);
    assert_eq!(part.steps, 8);
    assert_eq!(part.padding, 80);
    assert_eq!(sorted(part.real), (0..1_000).collect::<Vec<_>>());
    let part = run_part(&order, 0, 9, 15, Tail::Drop, None);
    assert_eq!(part.steps, 7);
    assert_eq!(part.real.len(), 945);
    assert_distinct(&part.real);
}

#[test]
fn pad_wraps_around_when_the_epoch_is_shorter_than_a_step() {
    // 3 samples, 4 ranks of 2: one step of 8 slots, 5 of them padding repeating positions 0,1,2,0,1.
    let order = EpochOrder::new(3, None, &Shuffle::Sequential, 0, 0).unwrap();
    let mut all = Vec::new();
    for rank in 0..4 {
        let plan = RankPlan::new(order.clone(), 0, 4, rank, 2, Tail::Pad).unwrap();
        assert_eq!(plan.steps(), 1);
        all.extend(plan.batch(0).unwrap());
    }
    let ids: Vec<u64> = all.iter().map(|s| s.id).collect();
    let padding: Vec<bool> = all.iter().map(|s| s.padding).collect();
    assert_eq!(ids, vec![0, 1, 2, 0, 1, 2, 0, 1]);
    assert_eq!(
        padding,
        vec![false, false, false, true, true, true, true, true]
    );
    assert_eq!(all[7].position, 7);
    // With Drop there is no step at all.
    let plan = RankPlan::new(order, 0, 4, 0, 2, Tail::Drop).unwrap();
    assert_eq!(plan.steps(), 0);
    assert_eq!(plan.position_after(0), 3);
}

#[test]
fn batches_are_contiguous_runs_per_rank() {
    let order = EpochOrder::new(20, None, &Shuffle::Sequential, 0, 0).unwrap();
    let plan = RankPlan::new(order, 2, 3, 1, 2, Tail::Drop).unwrap();
    // Steps take 6 positions from 2: rank 1 gets positions 4,5 then 10,11 then 16,17.
    assert_eq!(plan.steps(), 3);
    let ids: Vec<Vec<u64>> = (0..3)
        .map(|t| plan.batch(t).unwrap().map(|s| s.id).collect())
        .collect();
    assert_eq!(ids, vec![vec![4, 5], vec![10, 11], vec![16, 17]]);
    let mut it = plan.batch(1).unwrap();
    assert_eq!(it.len(), 2);
    assert_eq!(it.nth(1).map(|s| s.id), Some(11));
    assert_eq!(it.next(), None);
    assert_eq!(plan.position_after(0), 2);
    assert_eq!(plan.position_after(2), 14);
    assert_eq!(
        plan.position_after(3),
        20,
        "the dropped tail counts as consumed"
    );
    assert_eq!(plan.position_after(u64::MAX), 20);
}

// ---------------------------------------------------------------------------------------------
// 3. Resume across a change of world size.

/// Runs `k` steps on `w1` ranks, then the rest of the epoch on `w2` ranks from the saved position,
/// and checks the union of what both parts saw.
#[allow(clippy::too_many_arguments)]
fn check_resume(
    order: &EpochOrder,
    start: u64,
    w1: u32,
    b1: u32,
    w2: u32,
    b2: u32,
    tail: Tail,
    k: u64,
) {
    let len = order.len();
    let first = run_part(order, start, w1, b1, tail, Some(k));
    let saved = first.position_after;
    let second = run_part(order, saved, w2, b2, tail, None);
    let mut union = first.real;
    union.extend(second.real);
    assert_distinct(&union);
    match tail {
        Tail::Pad => {
            let expected: Vec<u64> = (start..len).map(|p| order.id_at(p).unwrap()).collect();
            assert_eq!(sorted(union), sorted(expected));
        }
        Tail::Drop => {
            // The whole steps of each part; a tail dropped by the first part stays dropped
            // (its saved position is then the end of the epoch).
            let first_end = start + k * u64::from(w1) * u64::from(b1);
            if k == first.steps {
                assert_eq!(saved, len);
            } else {
                assert_eq!(saved, first_end);
            }
            let second_end = saved + second.steps * u64::from(w2) * u64::from(b2);
            let expected: Vec<u64> = (start..first_end)
                .chain(saved..second_end)
                .map(|p| order.id_at(p).unwrap())
                .collect();
            assert_eq!(sorted(union), sorted(expected));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn resume_on_another_world_size(
        setup in setup(2_000, false),
        seed: u64,
        epoch in 0u64..100,
        w1 in 1u32..=9,
        w2 in 1u32..=9,
        b1 in 1u32..=17,
        b2 in 1u32..=17,
        start_frac in 0.0f64..=1.0,
        k_frac in 0.0f64..=1.0,
        pad: bool,
    ) {
        let order = setup.order(seed, epoch);
        let len = order.len();
        let start = ((len as f64 * start_frac) as u64).min(len);
        let tail = if pad { Tail::Pad } else { Tail::Drop };
        let steps = RankPlan::new(order.clone(), start, w1, 0, b1, tail).unwrap().steps();
        let k = ((steps as f64 * k_frac) as u64).min(steps);
        check_resume(&order, start, w1, b1, w2, b2, tail, k);
    }
}

#[test]
fn resume_named_world_size_changes() {
    let blocks: Vec<u64> = (0..50).map(|i| 10 + i % 7).collect();
    let len: u64 = blocks.iter().sum();
    for (shuffle, n, given) in [
        (Shuffle::Global, 1_000, None),
        (
            Shuffle::ShardBlock { window: 4 },
            len,
            Some(blocks.as_slice()),
        ),
    ] {
        let order = EpochOrder::new(n, given, &shuffle, 9, 1).unwrap();
        for (w1, w2) in [(8, 6), (6, 8), (8, 3), (3, 8), (1, 9), (9, 1), (7, 7)] {
            for tail in [Tail::Pad, Tail::Drop] {
                for k in [0, 1, 5] {
                    check_resume(&order, 0, w1, 4, w2, 4, tail, k);
                }
            }
        }
    }
}

#[test]
fn resume_8_to_6_by_hand() {
    // 100 samples, batch 4: on 8 ranks a step is 32 positions. Two steps, then 6 ranks (24 a step).
    let order = EpochOrder::new(100, None, &Shuffle::Global, 1, 0).unwrap();
    let first = run_part(&order, 0, 8, 4, Tail::Pad, Some(2));
    assert_eq!(first.position_after, 64);
    assert_eq!(first.real.len(), 64);
    let second = run_part(&order, 64, 6, 4, Tail::Pad, None);
    // 36 positions left: two steps of 24, the second with 12 real and 12 padding slots.
    assert_eq!(second.steps, 2);
    assert_eq!(second.padding, 12);
    let mut union = first.real;
    union.extend(second.real);
    assert_eq!(sorted(union), (0..100).collect::<Vec<_>>());
}

#[test]
fn resume_at_the_end_of_the_epoch() {
    let len = 101u64;
    let order = EpochOrder::new(len, None, &Shuffle::Global, 5, 2).unwrap();
    for tail in [Tail::Pad, Tail::Drop] {
        // At the boundary: nothing left.
        let plan = RankPlan::new(order.clone(), len, 4, 3, 5, tail).unwrap();
        assert_eq!(plan.steps(), 0);
        assert_eq!(plan.position_after(0), len);
        assert!(plan.batch(0).is_err());
        // One before: one padded step, or nothing with Drop.
        let part = run_part(&order, len - 1, 4, 5, tail, None);
        match tail {
            Tail::Pad => {
                assert_eq!(part.steps, 1);
                assert_eq!(part.real, vec![order.id_at(len - 1).unwrap()]);
                assert_eq!(part.padding, 19);
            }
            Tail::Drop => {
                assert_eq!(part.steps, 0);
                assert!(part.real.is_empty());
            }
        }
        // With one rank of one, the last sample is a whole step.
        let part = run_part(&order, len - 1, 1, 1, tail, None);
        assert_eq!(part.steps, 1);
        assert_eq!(part.padding, 0);
        // Past the end: an error, not a panic.
        let err = RankPlan::new(order.clone(), len + 1, 4, 0, 5, tail).unwrap_err();
        assert_eq!(
            err,
            SamplerError::StartPastEnd {
                start: len + 1,
                len
            }
        );
        let err = RankPlan::new(order.clone(), u64::MAX, 4, 0, 5, tail).unwrap_err();
        assert_eq!(
            err,
            SamplerError::StartPastEnd {
                start: u64::MAX,
                len
            }
        );
    }
    // Empty epoch: zero steps whatever the plan.
    let empty = EpochOrder::new(0, None, &Shuffle::Global, 5, 2).unwrap();
    for tail in [Tail::Pad, Tail::Drop] {
        let plan = RankPlan::new(empty.clone(), 0, 3, 2, 7, tail).unwrap();
        assert_eq!(plan.steps(), 0);
        assert_eq!(plan.position_after(0), 0);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Determinism.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn orders_are_deterministic_and_keyed(
        setup in setup(3_000, false).prop_filter("at least 10 samples", |s| s.len >= 10),
        seed: u64,
        epoch in 0u64..(u64::MAX - 1),
    ) {
        let ids = |seed, epoch| setup.order(seed, epoch).ids().collect::<Vec<u64>>();
        let base = ids(seed, epoch);
        prop_assert_eq!(&base, &ids(seed, epoch));
        prop_assert_ne!(&base, &ids(seed, epoch + 1));
        prop_assert_ne!(&base, &ids(seed.wrapping_add(1), epoch));
        prop_assert_ne!(&base, &ids(seed ^ (1 << 63), epoch));
    }
}

#[test]
fn plans_are_deterministic() {
    let blocks = [30u64, 0, 12, 50, 8];
    let shuffle = Shuffle::ShardBlock { window: 2 };
    let collect = || {
        let order = EpochOrder::new(100, Some(&blocks), &shuffle, 77, 3).unwrap();
        let plan = RankPlan::new(order, 10, 3, 2, 7, Tail::Pad).unwrap();
        (0..plan.steps())
            .flat_map(|t| plan.batch(t).unwrap().collect::<Vec<Slot>>())
            .collect::<Vec<_>>()
    };
    let a = collect();
    assert_eq!(a.len(), 5 * 7);
    assert_eq!(a, collect());
}

// ---------------------------------------------------------------------------------------------
// 5. Shard-block locality.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn shard_block_windows_cover_their_blocks(
        blocks in prop::collection::vec(0u64..=100, 0..=50usize),
        window in 1u32..=9,
        seed: u64,
        epoch in 0u64..100,
    ) {
        let len: u64 = blocks.iter().sum();
        let order =
            EpochOrder::new(len, Some(&blocks), &Shuffle::ShardBlock { window }, seed, epoch)
                .unwrap();
        let block_first: Vec<u64> = blocks
            .iter()
            .scan(0u64, |next, &b| {
                let first = *next;
                *next += b;
                Some(first)
            })
            .collect();
        let count = order.window_count();
        prop_assert_eq!(count, (blocks.len() as u64).div_ceil(u64::from(window)));
        prop_assert_eq!(order.window(count), None);
        let mut next_position = 0u64;
        let mut all_blocks = Vec::new();
        for w in 0..count {
            let win = order.window(w).unwrap();
            prop_assert_eq!(win.index, w);
            prop_assert_eq!(win.positions.start, next_position, "windows are contiguous");
            next_position = win.positions.end;
            if w + 1 < count {
                prop_assert_eq!(win.blocks.len(), window as usize);
            } else {
                prop_assert!(!win.blocks.is_empty() && win.blocks.len() <= window as usize);
            }
            // The samples of the window's positions are exactly those of its blocks.
            let mut expected: Vec<u64> = win
                .blocks
                .iter()
                .flat_map(|&b| block_first[b]..block_first[b] + blocks[b])
                .collect();
            expected.sort_unstable();
            let got = sorted(win.positions.clone().map(|p| order.id_at(p).unwrap()).collect());
            prop_assert_eq!(got, expected);
            for p in win.positions.clone() {
                prop_assert_eq!(order.window_of(p), Some(w));
            }
            all_blocks.extend(win.blocks);
        }
        prop_assert_eq!(next_position, len);
        prop_assert_eq!(order.window_of(len), None);
        // The windows' blocks are a permutation of the blocks.
        prop_assert_eq!(sorted(all_blocks.iter().map(|&b| b as u64).collect()),
            (0..blocks.len() as u64).collect::<Vec<_>>());
    }
}

#[test]
fn shard_block_permutes_block_order_per_epoch() {
    let blocks = vec![10u64; 64];
    let order_of = |epoch| {
        let order = EpochOrder::new(
            640,
            Some(&blocks),
            &Shuffle::ShardBlock { window: 4 },
            1,
            epoch,
        )
        .unwrap();
        (0..order.window_count())
            .flat_map(|w| order.window(w).unwrap().blocks)
            .collect::<Vec<_>>()
    };
    let (e0, e1) = (order_of(0), order_of(1));
    assert_ne!(
        e0,
        (0..64).collect::<Vec<_>>(),
        "the block order is shuffled"
    );
    assert_ne!(e0, e1, "and differs between epochs");
}

#[test]
fn windows_only_for_shard_block() {
    let order = EpochOrder::new(10, None, &Shuffle::Global, 1, 1).unwrap();
    assert_eq!(order.window_count(), 0);
    assert_eq!(order.window(0), None);
    assert_eq!(order.window_of(0), None);
}

// ---------------------------------------------------------------------------------------------
// 6. Quality of the global shuffle.

#[test]
fn global_displacement_looks_uniform() {
    let len = 10_000u64;
    let expected = len as f64 / 3.0;
    for seed in [0u64, 1, 0xfeed] {
        for epoch in 0..3 {
            let order = EpochOrder::new(len, None, &Shuffle::Global, seed, epoch).unwrap();
            let total: u64 = (0..len).map(|p| order.id_at(p).unwrap().abs_diff(p)).sum();
            let mean = total as f64 / len as f64;
            assert!(
                (mean - expected).abs() < 0.15 * expected,
                "seed {seed} epoch {epoch}: mean displacement {mean}, expected about {expected}"
            );
            // Few fixed points (about one for a uniform permutation).
            let fixed = (0..len).filter(|&p| order.id_at(p) == Some(p)).count();
            assert!(fixed < 10, "{fixed} fixed points");
        }
        let e0: Vec<u64> = EpochOrder::new(len, None, &Shuffle::Global, seed, 0)
            .unwrap()
            .ids()
            .collect();
        let e1: Vec<u64> = EpochOrder::new(len, None, &Shuffle::Global, seed, 1)
            .unwrap()
            .ids()
            .collect();
        assert_ne!(e0, e1);
        // Not just different: mostly different.
        let same = e0.iter().zip(&e1).filter(|(a, b)| a == b).count();
        assert!(same < 10, "{same} positions agree between epochs");
    }
}

// ---------------------------------------------------------------------------------------------
// Errors and serialisation.

#[test]
fn order_errors() {
    let sb = Shuffle::ShardBlock { window: 2 };
    assert_eq!(
        EpochOrder::new(10, None, &sb, 0, 0).unwrap_err(),
        SamplerError::MissingBlocks
    );
    assert_eq!(
        EpochOrder::new(10, Some(&[10]), &Shuffle::ShardBlock { window: 0 }, 0, 0).unwrap_err(),
        SamplerError::ZeroWindow
    );
    assert_eq!(
        EpochOrder::new(10, Some(&[4, 5]), &sb, 0, 0).unwrap_err(),
        SamplerError::BlockSumMismatch { sum: 9, len: 10 }
    );
    assert_eq!(
        EpochOrder::new(10, Some(&[4, 5]), &Shuffle::Global, 0, 0).unwrap_err(),
        SamplerError::BlockSumMismatch { sum: 9, len: 10 }
    );
    assert_eq!(
        EpochOrder::new(10, Some(&[u64::MAX, 1]), &sb, 0, 0).unwrap_err(),
        SamplerError::BlockSumOverflow
    );
    assert_eq!(
        EpochOrder::new(10, Some(&[]), &sb, 0, 0).unwrap_err(),
        SamplerError::BlockSumMismatch { sum: 0, len: 10 }
    );
    // Blocks are optional for the other shuffles, and checked when given.
    assert!(EpochOrder::new(9, Some(&[4, 5]), &Shuffle::Sequential, 0, 0).is_ok());
    assert_eq!(
        SamplerError::MissingBlocks.to_string(),
        "the shard-block shuffle needs the block sizes, and none were given"
    );
}

#[test]
fn plan_errors() {
    let order = EpochOrder::new(10, None, &Shuffle::Global, 0, 0).unwrap();
    let new = |start, world, rank, batch| {
        RankPlan::new(order.clone(), start, world, rank, batch, Tail::Pad).map(|p| p.steps())
    };
    assert_eq!(new(0, 0, 0, 1), Err(SamplerError::ZeroWorldSize));
    assert_eq!(
        new(0, 4, 4, 1),
        Err(SamplerError::RankOutOfRange {
            rank: 4,
            world_size: 4
        })
    );
    assert_eq!(new(0, 4, 0, 0), Err(SamplerError::ZeroBatchSize));
    assert_eq!(
        new(11, 4, 0, 1),
        Err(SamplerError::StartPastEnd { start: 11, len: 10 })
    );
    assert_eq!(new(0, 4, 3, 1), Ok(3));
    // A padded step past u64::MAX positions is refused rather than overflowing.
    let huge = EpochOrder::new(u64::MAX, None, &Shuffle::Sequential, 0, 0).unwrap();
    assert_eq!(
        RankPlan::new(huge.clone(), 0, 2, 0, 1, Tail::Pad).unwrap_err(),
        SamplerError::PositionOverflow
    );
    let plan = RankPlan::new(huge, 0, 2, 1, 1, Tail::Drop).unwrap();
    assert_eq!(plan.steps(), u64::MAX / 2);
    let last = plan.batch(plan.steps() - 1).unwrap().next().unwrap();
    assert_eq!(last.position, u64::MAX - 2);
    // fill_batch leaves the buffer empty on error.
    let plan = RankPlan::new(order, 0, 1, 0, 4, Tail::Drop).unwrap();
    let mut out = vec![Slot {
        id: 1,
        position: 1,
        padding: false,
    }];
    assert_eq!(
        plan.fill_batch(2, &mut out),
        Err(SamplerError::StepOutOfRange { step: 2, steps: 2 })
    );
    assert!(out.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any input gives a value or a typed error, never a panic.
    #[test]
    fn no_panics_on_any_input(
        len: u64,
        start: u64,
        world: u32,
        rank: u32,
        batch: u32,
        seed: u64,
        epoch: u64,
        position: u64,
        pad: bool,
        global: bool,
    ) {
        let shuffle = if global { Shuffle::Global } else { Shuffle::Sequential };
        let start = if start % 2 == 0 { start % len.saturating_add(2) } else { start };
        let world = world % 12;
        let rank = if rank % 2 == 0 { rank % 12 } else { rank };
        let tail = if pad { Tail::Pad } else { Tail::Drop };
        let order = EpochOrder::new(len, None, &shuffle, seed, epoch).unwrap();
        if let Some(id) = order.id_at(position) {
            prop_assert!(position < len && id < len);
        } else {
            prop_assert!(position >= len);
        }
        match RankPlan::new(order, start, world, rank, batch, tail) {
            Ok(plan) => {
                prop_assert!(start <= len && world > 0 && rank < world && batch > 0);
                prop_assert!(plan.position_after(position) <= len);
                if plan.steps() > 0 {
                    for step in [0, plan.steps() / 2, plan.steps() - 1] {
                        let mut b = plan.batch(step).unwrap();
                        prop_assert_eq!(b.len(), batch as usize);
                        let first = b.next().unwrap();
                        prop_assert!(first.id < len);
                        let last = b.nth((batch as usize).saturating_sub(2));
                        prop_assert_eq!(last.is_some(), batch >= 2);
                        if let Some(last) = last {
                            prop_assert!(last.id < len);
                            prop_assert_eq!(last.position, first.position + u64::from(batch) - 1);
                        }
                    }
                }
                prop_assert!(plan.batch(plan.steps()).is_err());
            }
            Err(e) => {
                let expected_reason = world == 0
                    || rank >= world
                    || batch == 0
                    || start > len
                    || e == SamplerError::PositionOverflow;
                prop_assert!(expected_reason, "unexpected error {:?}", e);
            }
        }
    }
}

#[test]
fn shuffle_and_tail_serialise() {
    let cases = [
        (Shuffle::Sequential, "\"sequential\""),
        (Shuffle::Global, "\"global\""),
        (
            Shuffle::ShardBlock { window: 8 },
            "{\"shard_block\":{\"window\":8}}",
        ),
    ];
    for (shuffle, json) in cases {
        assert_eq!(serde_json::to_string(&shuffle).unwrap(), json);
        assert_eq!(serde_json::from_str::<Shuffle>(json).unwrap(), shuffle);
    }
    assert_eq!(serde_json::to_string(&Tail::Pad).unwrap(), "\"pad\"");
    assert_eq!(
        serde_json::from_str::<Tail>("\"drop\"").unwrap(),
        Tail::Drop
    );
    assert!(serde_json::from_str::<Shuffle>("\"shard_block\"").is_err());
}
