//! The loader: order, determinism, resume, error policy, shutdown (rows F2 and G1–G6 of the
//! reliability matrix; F1, F5 and F6 measure the whole process and are in `tests/process/`).

use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;
use stokehold::format::{DType, Dataset, FieldValue};
use stokehold::{
    Batch, Column, ColumnData, EngineError, ErrorPolicy, Loader, LoaderConfig, ResumeState,
    Shuffle, Tail, from_fn,
};

use crate::common::dataset;

/// Columns: x and label passed through, blob as a list, and `noise`: x plus a random number from
/// the sample's generator (so determinism of augmentations is visible), as a fixed f64.
fn columns(ds: &Dataset) -> Vec<Column> {
    let mut cols = Column::all(ds.schema()).unwrap();
    let noise = from_fn("noise", |v, ctx| match v {
        FieldValue::Float64(x) => Ok(FieldValue::Float64(x + ctx.rng.unit_f64())),
        other => Err(format!("unexpected {other:?}").into()),
    });
    cols.push(Column {
        name: "noise".into(),
        ..Column::fixed("x", vec![noise], DType::F64, vec![])
    });
    cols
}

fn config(batch: u32, threads: usize, prefetch: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: batch,
        threads,
        prefetch,
        seed: 42,
        ..LoaderConfig::default()
    }
}

/// A batch as comparable plain data: ids, padding, and every column's bytes.
type Plain = (Vec<u64>, Vec<bool>, Vec<Vec<u8>>);

fn plain(b: &Batch) -> Plain {
    let cols = b
        .columns
        .iter()
        .map(|(_, c)| match c {
            ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } => {
                data.as_bytes().to_vec()
            }
            ColumnData::List(items) => items
                .iter()
                .flat_map(|v| match v {
                    FieldValue::Bytes(b) => b.to_vec(),
                    other => format!("{other:?}").into_bytes(),
                })
                .collect(),
        })
        .collect();
    (b.ids.clone(), b.padding.clone(), cols)
}

fn epoch(loader: &mut Loader) -> Vec<Plain> {
    loader.iter().unwrap().map(|b| plain(&b.unwrap())).collect()
}

fn f64s(b: &Batch, name: &str) -> Vec<f64> {
    match b.column(name).unwrap() {
        ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } => data
            .as_bytes()
            .chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        _ => panic!("fixed"),
    }
}

#[test]
fn every_sample_once_per_epoch_with_its_own_content() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 250);
    let mut loader = Loader::new(
        ds.clone(),
        columns(&ds),
        LoaderConfig {
            tail: Tail::Pad,
            // exact stage counts below: no work on the next epoch started ahead
            prepare_next_epoch: false,
            ..config(16, 2, 3)
        },
    )
    .unwrap();
    assert_eq!(loader.steps().unwrap(), 16);
    let mut seen = BTreeSet::new();
    let mut batches = 0;
    for b in loader.iter().unwrap() {
        let b = b.unwrap();
        assert_eq!(b.len(), 16);
        let xs = f64s(&b, "x");
        for (k, &id) in b.ids.iter().enumerate() {
            assert_eq!(xs[k], id as f64, "the slot holds its own sample");
            if !b.padding[k] {
                assert!(seen.insert(id), "sample {id} twice");
            }
        }
        let ColumnData::List(blobs) = b.column("blob").unwrap() else {
            panic!()
        };
        assert_eq!(
            blobs[3],
            FieldValue::Bytes(
                (0..(b.ids[3] % 13))
                    .map(|k| (b.ids[3] + k) as u8)
                    .collect::<Vec<u8>>()
                    .into()
            )
        );
        batches += 1;
    }
    assert_eq!(batches, 16);
    assert_eq!(seen.len(), 250);
    assert_eq!(loader.epoch(), 1, "the loader moved on to the next epoch");
    let stats = loader.stats();
    assert_eq!(stats.batches, 16);
    assert_eq!(stats.stages[0].name, "read");
    assert_eq!(stats.stages[0].items, 256);
    assert!(
        stats
            .stages
            .iter()
            .any(|s| s.name == "noise/noise" && s.items == 256),
        "{:?}",
        stats.stages
    );
    // the next epoch has another order
    let next: Vec<u64> = loader
        .iter()
        .unwrap()
        .flat_map(|b| b.unwrap().ids.clone())
        .collect();
    assert_eq!(next.len(), 256);
    assert_ne!(
        next[..16],
        *seen.iter().copied().collect::<Vec<_>>()[..16].to_vec()
    );
}

// G1
proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn output_is_identical_whatever_the_threads_and_prefetch(
        threads in 1usize..8, prefetch in 1usize..9, seed in 0u64..1000, batch in 1u32..20, task in 0usize..5)
    {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), 97);
        let reference = {
            let mut l = Loader::new(ds.clone(), columns(&ds), LoaderConfig { seed, ..config(batch, 1, 1) }).unwrap();
            epoch(&mut l)
        };
        let mut l = Loader::new(ds.clone(), columns(&ds), LoaderConfig { seed, task_size: task, ..config(batch, threads, prefetch) }).unwrap();
        prop_assert_eq!(epoch(&mut l), reference);
    }
}

fn run_steps(loader: &mut Loader, k: usize) -> Vec<Plain> {
    let mut it = loader.iter().unwrap();
    (0..k)
        .map_while(|_| it.next())
        .map(|b| plain(&b.unwrap()))
        .collect()
}

// G2
#[test]
fn resuming_several_times_in_one_epoch_gives_the_rest_of_the_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 300);
    let full = epoch(&mut Loader::new(ds.clone(), columns(&ds), config(8, 2, 2)).unwrap());
    let mut got = Vec::new();
    let mut state = Loader::new(ds.clone(), columns(&ds), config(8, 2, 2))
        .unwrap()
        .state();
    for chunk in [3usize, 1, 7, 0, 5, 100] {
        // a fresh loader (as after a crash), restored from JSON
        let mut l = Loader::new(ds.clone(), columns(&ds), config(8, 3, 1)).unwrap();
        l.load_state(&ResumeState::from_json(&state.to_json()).unwrap())
            .unwrap();
        got.extend(run_steps(&mut l, chunk));
        state = l.state();
    }
    assert_eq!(got, full);
    assert_eq!((state.epoch, state.position), (1, 0));
}

// G3
#[test]
fn resuming_at_the_epoch_boundary_neither_skips_nor_repeats() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 80);
    let mut base = Loader::new(ds.clone(), columns(&ds), config(10, 2, 2)).unwrap();
    let e0 = epoch(&mut base);
    let e1 = epoch(&mut base);
    let all: Vec<Plain> = e0.iter().chain(&e1).cloned().collect();
    for k in [7usize, 8, 9] {
        let mut l = Loader::new(ds.clone(), columns(&ds), config(10, 2, 2)).unwrap();
        let mut got = run_steps(&mut l, k.min(8));
        if k > 8 {
            got.extend(run_steps(&mut l, k - 8));
        }
        let s = l.state();
        let mut r = Loader::new(ds.clone(), columns(&ds), config(10, 1, 1)).unwrap();
        r.load_state(&s).unwrap();
        while got.len() < 16 {
            let more = epoch(&mut r);
            assert!(!more.is_empty());
            got.extend(more);
        }
        assert_eq!(got, all, "stopped after {k} steps");
    }
}

/// Run `steps` steps on each of `w` ranks (None: to the end of the epoch); return the non-padding
/// ids seen, the number of batches per rank, and rank 0's state.
fn ranks(
    ds: &Arc<Dataset>,
    w: u32,
    state: Option<&ResumeState>,
    steps: Option<usize>,
    tail: Tail,
) -> (Vec<u64>, Vec<usize>, ResumeState) {
    let mut ids = Vec::new();
    let mut counts = Vec::new();
    let mut s0 = None;
    for r in 0..w {
        let cfg = LoaderConfig {
            rank: r,
            world_size: w,
            tail,
            ..config(4, 2, 2)
        };
        let mut l = Loader::new(ds.clone(), columns(ds), cfg).unwrap();
        if let Some(s) = state {
            l.load_state(s).unwrap();
        }
        let batches = run_steps(&mut l, steps.unwrap_or(usize::MAX));
        counts.push(batches.len());
        for (bids, pad, _) in &batches {
            ids.extend(bids.iter().zip(pad).filter(|(_, p)| !**p).map(|(i, _)| *i));
        }
        if r == 0 {
            s0 = Some(l.state());
        }
    }
    (ids, counts, s0.unwrap())
}

// G4, G5
proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn changing_the_world_size_between_checkpoint_and_resume_keeps_every_sample_once(
        n in 1u64..150, w1 in 1u32..9, w2 in 1u32..9, k in 0usize..6)
    {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), n);
        let (mut a, c1, state) = ranks(&ds, w1, None, Some(k), Tail::Pad);
        prop_assert!(c1.iter().all(|&c| c == c1[0]), "equal steps per rank {:?}", c1);
        // (when the first part already finished the epoch, the state points at the next one)
        if state.epoch == 0 {
            let (b, c2, end) = ranks(&ds, w2, Some(&state), None, Tail::Pad);
            prop_assert!(c2.iter().all(|&c| c == c2[0]), "equal steps per rank {:?}", c2);
            prop_assert_eq!((end.epoch, end.position), (1, 0));
            a.extend(b);
        }
        a.sort_unstable();
        prop_assert_eq!(a, (0..n).collect::<Vec<_>>());
        // with Drop: no sample twice
        let (mut d, _, s) = ranks(&ds, w1, None, Some(k), Tail::Drop);
        if s.epoch == 0 {
            d.extend(ranks(&ds, w2, Some(&s), None, Tail::Drop).0);
        }
        let distinct: BTreeSet<u64> = d.iter().copied().collect();
        prop_assert_eq!(distinct.len(), d.len());
    }
}

// G6
#[test]
fn a_state_from_another_dataset_seed_or_version_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 50);
    let other = dataset(tmp.path(), 51);
    let mut l = Loader::new(ds.clone(), columns(&ds), config(5, 1, 1)).unwrap();
    let s = Loader::new(other.clone(), columns(&other), config(5, 1, 1))
        .unwrap()
        .state();
    let field = |e: EngineError| match e {
        EngineError::IncompatibleResume { field, .. } => field,
        e => panic!("{e}"),
    };
    assert_eq!(field(l.load_state(&s).unwrap_err()), "dataset");
    let mut s = l.state();
    s.seed = 7;
    assert_eq!(field(l.load_state(&s).unwrap_err()), "seed");
    let mut s = l.state();
    s.shuffle = Shuffle::Sequential;
    assert_eq!(field(l.load_state(&s).unwrap_err()), "shuffle");
    let mut s = l.state();
    s.position = 51;
    assert_eq!(field(l.load_state(&s).unwrap_err()), "position");
    let json = l
        .state()
        .to_json()
        .replace("\"version\":1", "\"version\":2");
    assert_eq!(field(ResumeState::from_json(&json).unwrap_err()), "version");
    for hostile in [
        "",
        "[]",
        "{\"version\":1}",
        "{\"version\":1,\"dataset\":3}",
        &"[".repeat(10000),
    ] {
        assert!(ResumeState::from_json(hostile).is_err(), "{hostile:?}");
    }
}

proptest! {
    #[test]
    fn hostile_state_blobs_never_panic(s in ".{0,200}") {
        let _ = ResumeState::from_json(&s);
    }
}

// F2 and C3
#[test]
fn a_panicking_transform_becomes_an_error_naming_the_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 60);
    let boom = from_fn("boom", |v, ctx| {
        if ctx.id == 37 {
            panic!("decoder exploded");
        }
        Ok(v)
    });
    let cols = vec![Column::fixed("x", vec![boom], DType::F64, vec![])];
    let mut l = Loader::new(
        ds.clone(),
        cols.clone(),
        LoaderConfig {
            shuffle: Shuffle::Sequential,
            ..config(10, 2, 2)
        },
    )
    .unwrap();
    let results: Vec<_> = l.iter().unwrap().collect();
    assert_eq!(
        results.len(),
        4,
        "three good batches, then the error, then the end"
    );
    let err = results[3].as_ref().unwrap_err();
    assert!(matches!(err, EngineError::Panic { id: 37, .. }), "{err}");
    assert!(err.to_string().contains("decoder exploded"));
    // with skip, the epoch completes with sample 37 replaced and flagged
    let mut l = Loader::new(
        ds.clone(),
        cols,
        LoaderConfig {
            shuffle: Shuffle::Sequential,
            on_error: ErrorPolicy::skip(),
            ..config(10, 2, 2)
        },
    )
    .unwrap();
    let batches: Vec<Batch> = l.iter().unwrap().map(|b| b.unwrap()).collect();
    assert_eq!(batches.len(), 6);
    let b = &batches[3];
    assert_eq!(b.len(), 10);
    assert!(
        b.padding[7] && b.ids[7] == 38,
        "slot of 37 holds a flagged copy of 38: {:?}",
        b.ids
    );
    assert_eq!(f64s(b, "x")[7], 38.0);
    assert_eq!(l.stats().skipped, vec![37]);
}

/// Flip one byte inside record `id`'s bytes.
fn corrupt(ds: &Dataset, id: u64) {
    let (k, local) = ds.locate(id).unwrap();
    let shard = &ds.shards()[k];
    let e = shard.index()[local as usize];
    let mut b = std::fs::read(shard.path()).unwrap();
    b[e.offset as usize + 5] ^= 0x20;
    std::fs::write(shard.path(), b).unwrap();
}

// C2 (as far as the engine goes): a corrupt record mid-epoch
#[test]
fn a_corrupt_record_fails_or_is_skipped_identically_after_resume() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 120);
    corrupt(&ds, 37);
    let ds = Arc::new(Dataset::open(ds.dir()).unwrap());
    let mut l = Loader::new(ds.clone(), columns(&ds), config(8, 2, 2)).unwrap();
    let err = l.iter().unwrap().find_map(|b| b.err()).unwrap();
    let msg = err.to_string();
    assert!(matches!(err, EngineError::Sample { id: 37, .. }), "{msg}");
    assert!(
        msg.contains("checksum mismatch")
            && msg.contains(".skh")
            && msg.contains("global sample 37"),
        "{msg}"
    );

    let skip = LoaderConfig {
        on_error: ErrorPolicy::skip(),
        ..config(8, 2, 2)
    };
    let mut l = Loader::new(ds.clone(), columns(&ds), skip.clone()).unwrap();
    let full = epoch(&mut l);
    assert_eq!(full.len(), 15);
    assert!(
        full.iter().all(|(ids, _, _)| ids.len() == 8),
        "batch shape kept"
    );
    assert_eq!(l.stats().skipped, vec![37]);
    let step = full
        .iter()
        .position(|(ids, pad, _)| pad.iter().any(|p| *p) && !ids.contains(&37))
        .unwrap();
    for at in [step.saturating_sub(1), step, step + 1] {
        let mut a = Loader::new(ds.clone(), columns(&ds), skip.clone()).unwrap();
        let mut got = run_steps(&mut a, at);
        let mut b = Loader::new(ds.clone(), columns(&ds), skip.clone()).unwrap();
        b.load_state(&a.state()).unwrap();
        got.extend(epoch(&mut b));
        assert_eq!(got, full, "resumed at step {at}");
        let skipped: Vec<u64> = a
            .stats()
            .skipped
            .into_iter()
            .chain(b.stats().skipped)
            .collect();
        assert_eq!(skipped, vec![37]);
    }
    // the budget: 1 failure in 120 is over 0.5%
    let strict = LoaderConfig {
        on_error: ErrorPolicy::Skip {
            max_fraction: 0.005,
            max_consecutive: 10,
        },
        ..config(8, 2, 2)
    };
    let mut l = Loader::new(ds.clone(), columns(&ds), strict).unwrap();
    let err = l.iter().unwrap().find_map(|b| b.err()).unwrap();
    assert!(matches!(err, EngineError::TooManyFailures { .. }), "{err}");
}

#[test]
fn a_skipped_sample_that_the_padded_last_batch_repeats_is_listed_once() {
    // 10 samples in batches of 4, in order, the tail padded: the last batch is 8, 9, then the
    // repeats of 0 and 1. Sample 0 is damaged: skipped in the first batch and again as padding
    // in the last, but one sample, listed once in stats().skipped (it was listed twice).
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 10);
    corrupt(&ds, 0);
    let ds = Arc::new(Dataset::open(ds.dir()).unwrap());
    let cfg = LoaderConfig {
        on_error: ErrorPolicy::Skip {
            max_fraction: 0.5,
            max_consecutive: 10,
        },
        shuffle: Shuffle::Sequential,
        tail: Tail::Pad,
        ..config(4, 2, 2)
    };
    let mut l = Loader::new(ds.clone(), columns(&ds), cfg).unwrap();
    let got = epoch(&mut l);
    assert_eq!(got.len(), 3);
    // the last batch's third slot is the repeat of 0: skipped again, as padding
    assert!(got[2].1[2], "{:?}", got[2].1);
    assert_ne!(got[2].0[2], 0);
    assert_eq!(l.stats().skipped, vec![0]);
    // the next epoch lists it again (once): every epoch says what it skipped
    let again = epoch(&mut l);
    assert_eq!(again.len(), 3);
    assert_eq!(l.stats().skipped, vec![0, 0]);
}

#[test]
fn configuration_errors_are_reported_at_construction() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 10);
    let bad = |cfg: LoaderConfig, cols: Vec<Column>| {
        Loader::new(ds.clone(), cols, cfg).unwrap_err().to_string()
    };
    assert!(bad(config(0, 1, 1), columns(&ds)).contains("batch_size"));
    assert!(
        bad(
            LoaderConfig {
                rank: 3,
                world_size: 2,
                ..config(1, 1, 1)
            },
            columns(&ds)
        )
        .contains("rank 3")
    );
    let missing = vec![Column::fixed("nope", vec![], DType::U8, vec![4])];
    assert!(bad(config(1, 1, 1), missing).contains("\"nope\""));
    assert!(bad(config(1, 1, 1), vec![]).contains("at least one column"));
}

// Autotuning: fewer working threads for a slow consumer, the same output.
#[test]
fn autotuning_parks_threads_for_a_slow_consumer_and_changes_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 1200);
    let reference = epoch(&mut Loader::new(ds.clone(), columns(&ds), config(8, 1, 2)).unwrap());
    let cfg = LoaderConfig {
        autotune: true,
        ..config(8, 4, 2)
    };
    let mut l = Loader::new(ds.clone(), columns(&ds), cfg).unwrap();
    let mut got = Vec::new();
    for b in l.iter().unwrap() {
        got.push(plain(&b.unwrap()));
        std::thread::sleep(std::time::Duration::from_millis(6)); // a slow training step
    }
    assert_eq!(got, reference, "autotuning never changes the output");
    let s = l.stats();
    assert_eq!(s.threads, 4);
    assert!(
        s.active_threads < 4,
        "a consumer slower than the pipeline needs fewer threads: {}",
        s.active_threads
    );
    assert!(s.active_threads >= 1);
}

// The next epoch is started ahead when an epoch ends; changing the epoch or the state must not
// use that run.
#[test]
fn the_run_started_ahead_is_used_only_for_the_epoch_it_was_made_for() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 90);
    let fresh = |e: u64| {
        let mut l = Loader::new(ds.clone(), columns(&ds), config(9, 2, 2)).unwrap();
        l.set_epoch(e);
        epoch(&mut l)
    };
    let mut l = Loader::new(ds.clone(), columns(&ds), config(9, 2, 2)).unwrap();
    epoch(&mut l); // epoch 0 done; epoch 1 is being prepared
    assert_eq!(epoch(&mut l), fresh(1), "the prepared run is epoch 1");
    l.set_epoch(5); // epoch 2 was prepared; it must be dropped
    assert_eq!(epoch(&mut l), fresh(5));
    let state = l.state(); // epoch 6, position 0, prepared
    let mut other = Loader::new(ds.clone(), columns(&ds), config(9, 2, 2)).unwrap();
    other.set_epoch(3);
    let mid = {
        let mut it = other.iter().unwrap();
        it.next().unwrap().unwrap();
        drop(it);
        other.state()
    };
    l.load_state(&mid).unwrap(); // a different position: the prepared epoch 6 must not be used
    let rest = epoch(&mut l);
    assert_eq!(rest, fresh(3)[1..].to_vec());
    l.load_state(&state).unwrap();
    assert_eq!(epoch(&mut l), fresh(6));
}

#[test]
fn the_ram_cache_changes_no_output_and_serves_the_second_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 300);
    let mut plain_loader = Loader::new(ds.clone(), columns(&ds), config(16, 2, 2)).unwrap();
    let cached_cfg = LoaderConfig {
        cache_bytes: stokehold::Budget::bytes(1 << 30),
        // the counts below are of the epochs asked for only
        prepare_next_epoch: false,
        ..config(16, 2, 2)
    };
    let mut cached = Loader::new(ds.clone(), columns(&ds), cached_cfg).unwrap();
    let first = epoch(&mut cached);
    assert_eq!(first, epoch(&mut plain_loader), "epoch 0");
    let cache = stokehold::RecordCache::shared(&ds, &stokehold::cache::dataset_key(&ds), 1);
    assert!(cache.wait_loaded(std::time::Duration::from_secs(10)));
    let before = cached.stats().caches[0].clone();
    assert_eq!(before.kind, "records");
    assert_eq!(before.entries, ds.shards().len() as u64, "every shard fits");
    assert_eq!(
        before.bytes,
        ds.shards().iter().map(|s| s.file_len()).sum::<u64>()
    );
    assert_eq!(epoch(&mut cached), epoch(&mut plain_loader), "epoch 1");
    let after = cached.stats().caches[0].clone();
    assert_eq!(after.misses, before.misses, "the warm epoch never misses");
    assert_eq!(
        after.hits - before.hits,
        288,
        "18 batches of 16 served from RAM"
    );
    assert!(cached.stats().report().contains("records cache: "));
}

#[test]
fn the_ram_cache_keeps_within_its_budget_and_is_shared_by_loaders() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 300);
    let shard = ds.shards()[0].file_len();
    let budget = 3 * shard + shard / 2;
    let cfg = LoaderConfig {
        cache_bytes: stokehold::Budget::bytes(budget),
        // no run started ahead: the counts compared below stay still
        prepare_next_epoch: false,
        ..config(10, 2, 2)
    };
    let mut a = Loader::new(ds.clone(), columns(&ds), cfg.clone()).unwrap();
    let mut b = Loader::new(ds.clone(), columns(&ds), cfg).unwrap();
    let mut reference = Loader::new(ds.clone(), columns(&ds), config(10, 1, 1)).unwrap();
    let want = epoch(&mut reference);
    assert_eq!(epoch(&mut a), want);
    assert_eq!(epoch(&mut b), want);
    let cache = stokehold::RecordCache::shared(&ds, &stokehold::cache::dataset_key(&ds), 1);
    assert!(cache.wait_loaded(std::time::Duration::from_secs(10)));
    let s = cache.stats();
    assert!(s.bytes <= budget, "{} > {budget}", s.bytes);
    assert!(s.entries >= 1 && s.entries <= 3, "{s:?}");
    assert_eq!(s.budget, budget, "the first loader's budget");
    assert_eq!(
        a.stats().caches[0],
        b.stats().caches[0],
        "one cache for both"
    );
}

#[test]
fn reads_through_every_access_mode_give_the_same_batches() {
    use stokehold::format::{Access, OpenOptions};
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 200);
    let dir = ds.dir().to_path_buf();
    let mut reference = Loader::new(ds.clone(), columns(&ds), config(8, 2, 2)).unwrap();
    let want = epoch(&mut reference);
    let reference_ds = Arc::clone(&ds);
    for access in [Access::Pread, Access::Mmap, Access::Memory, Access::Direct] {
        let opened = Dataset::open_with(&dir, OpenOptions::with_access(access));
        let ds = match opened {
            Ok(d) => Arc::new(d),
            Err(e) if access == Access::Direct => {
                eprintln!("no direct I/O here: {e}");
                continue;
            }
            Err(e) => panic!("{access:?}: {e}"),
        };
        for shuffle in [Shuffle::Global, Shuffle::Sequential] {
            let cfg = LoaderConfig {
                shuffle,
                ..config(8, 2, 2)
            };
            let mut l = Loader::new(ds.clone(), columns(&ds), cfg.clone()).unwrap();
            let mut r = Loader::new(Arc::clone(&reference_ds), columns(&ds), cfg).unwrap();
            let got = epoch(&mut l);
            assert_eq!(got, epoch(&mut r), "{access:?} {shuffle:?}");
            if shuffle == Shuffle::Global {
                assert_eq!(got, want, "{access:?}");
            }
        }
    }
}

// Prefetch autotuning: a deeper window when workers idle on it while the consumer waits, the
// same output whatever the depth.
#[test]
fn prefetch_autotuning_deepens_a_window_that_starves_the_consumer_and_changes_no_output() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 1200);
    // every sample takes 1 ms: with batches of 6 on 4 threads and a window of 1, two threads sit
    // on the window for the second half of every batch
    let slow_columns = || {
        let mut cols = columns(&ds);
        cols.push(Column {
            name: "slow".into(),
            ..Column::fixed(
                "x",
                vec![from_fn("sleep", |v, _| {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    Ok(v)
                })],
                DType::F64,
                vec![],
            )
        });
        cols
    };
    let base = LoaderConfig {
        task_size: 1,
        prepare_next_epoch: false,
        ..config(6, 4, 1)
    };
    let reference = epoch(&mut Loader::new(ds.clone(), slow_columns(), base.clone()).unwrap());
    let cfg = LoaderConfig {
        prefetch_auto: true,
        ..base
    };
    let mut l = Loader::new(ds.clone(), slow_columns(), cfg).unwrap();
    assert_eq!(l.stats().prefetch, 1, "starts at the configured depth");
    assert_eq!(
        epoch(&mut l),
        reference,
        "the depth never changes the output"
    );
    let s = l.stats();
    assert!(s.prefetch > 1, "the window was deepened: {}", s.prefetch);
    assert_eq!(s.threads, 4);
    assert_eq!(s.active_threads, 4, "thread autotuning was off");
}

// The memory budget bounds the depth: at construction and while running.
#[test]
fn the_prefetch_depth_stays_within_the_memory_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 600);
    // two fixed f64 columns: 16 bytes a sample, 128 bytes a batch of 8
    let cols: Vec<Column> = columns(&ds)
        .into_iter()
        .filter(|c| c.name == "x" || c.name == "noise")
        .collect();
    let reference = epoch(&mut Loader::new(ds.clone(), cols.clone(), config(8, 2, 3)).unwrap());
    let cfg = LoaderConfig {
        prefetch_auto: true,
        autotune: true,
        memory_budget: stokehold::Budget::bytes(3 * 128),
        ..config(8, 2, 16)
    };
    let mut l = Loader::new(ds.clone(), cols.clone(), cfg).unwrap();
    assert_eq!(l.memory_budget(), 384);
    assert_eq!(l.stats().prefetch, 3, "16 batches would exceed the budget");
    let mut got = Vec::new();
    {
        let mut it = l.iter().unwrap();
        while let Some(b) = it.next() {
            got.push(plain(&b.unwrap()));
            let depth = it.stats().prefetch;
            assert!((1..=3).contains(&depth), "depth {depth}");
        }
    }
    assert_eq!(got, reference);
    // without prefetch_auto the configured depth is used as is
    let l = Loader::new(ds.clone(), cols, config(8, 2, 16)).unwrap();
    assert_eq!(l.stats().prefetch, 16);
}

// Statistics: bytes read are the records' bytes; with profiling off the stages are not timed.
#[test]
fn bytes_read_are_counted_and_profiling_can_be_switched_off() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 240);
    let record_bytes: u64 = ds
        .shards()
        .iter()
        .flat_map(|s| s.index().iter().map(|e| u64::from(e.len)))
        .sum();
    for profile in [true, false] {
        let cfg = LoaderConfig {
            profile,
            prepare_next_epoch: false,
            ..config(8, 2, 2)
        };
        let mut l = Loader::new(ds.clone(), columns(&ds), cfg).unwrap();
        assert_eq!(epoch(&mut l).len(), 30);
        let s = l.stats();
        assert_eq!(s.bytes_read, record_bytes);
        assert_eq!(s.records_read, 240);
        assert_eq!(s.samples, 240);
        assert_eq!(s.profiled, profile);
        for st in &s.stages {
            let want = if profile { 240 } else { 0 };
            assert_eq!(st.items, want, "{} (profile {profile})", st.name);
            assert_eq!(st.busy.is_zero(), !profile, "{}", st.name);
        }
        assert!(s.report().contains("read"));
    }
}

// Tracing: a bounded ring of stage spans, written as Chrome Trace Event JSON.
#[test]
fn the_trace_keeps_the_newest_spans_as_chrome_trace_json() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path(), 120);
    let mut off = Loader::new(ds.clone(), columns(&ds), config(8, 2, 2)).unwrap();
    epoch(&mut off);
    assert!(off.trace_json().is_none(), "no tracing by default");
    let stage_count = |cap: usize| {
        let cfg = LoaderConfig {
            trace_capacity: cap,
            prepare_next_epoch: false,
            ..config(8, 2, 2)
        };
        let mut l = Loader::new(ds.clone(), columns(&ds), cfg).unwrap();
        epoch(&mut l);
        let names: Vec<String> = l.stats().stages.iter().map(|s| s.name.clone()).collect();
        let doc: serde_json::Value = serde_json::from_str(&l.trace_json().unwrap()).unwrap();
        let events = doc["traceEvents"].as_array().unwrap().clone();
        let spans: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        for e in &spans {
            assert!(names.iter().any(|n| e["name"] == n.as_str()), "{e}");
            assert!(e["ts"].as_f64().unwrap() >= 0.0 && e["dur"].as_f64().unwrap() >= 0.0);
            assert!(e["args"]["id"].as_u64().unwrap() < 120);
            assert!(e["tid"].as_u64().unwrap() < 2);
        }
        (
            names,
            spans.len(),
            doc["otherData"]["dropped_spans"].as_u64().unwrap(),
        )
    };
    // 120 samples: read, parse (once per column), and one span per column's stage
    let (names, all, dropped) = stage_count(1 << 20);
    let per_sample = 1 + 4 + (names.len() - 2);
    assert_eq!(all, 120 * per_sample);
    assert_eq!(dropped, 0);
    let (_, kept, dropped) = stage_count(100);
    assert_eq!(kept, 100, "the ring is bounded");
    assert_eq!(dropped as usize, 120 * per_sample - 100);
}
