//! Mixtures ([`Mixture`], docs/mixtures.md): the blended order is the same whatever the threads,
//! each source has its share in every prefix, a resumed run (on the same or another number of
//! ranks, after a schedule's change or with a schedule extended past its position) continues
//! exactly, a blend changed before the state's position is refused or, when asked, restarted
//! without repeating a sample early, and sources that disagree on their fields are named.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use stokehold::blend::BlendState;
use stokehold::format::{DType, Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::samples::mixture::{MixtureOptions, OnChange, ScheduleUnit};
use stokehold::{
    Column, ColumnData, EngineError, Loader, LoaderConfig, Mixture, MixtureSource, Order,
    OrderState, Records, ResumeState, Samples, Shuffle, Tail, TokenDataset, TokenMode,
    TokenOptions, Tokens,
};

/// A dataset of `n` records whose `x` is `tag * 1000 + i` (so a value names its source and
/// record) with a blob of a few bytes.
fn write(dir: &Path, tag: i64, n: u64) -> PathBuf {
    let path = dir.join(format!("src{tag}"));
    if path.exists() {
        return path;
    }
    let schema = Schema::from_specs([("x", "int64"), ("blob", "bytes")]).unwrap();
    let opts = DatasetWriteOptions {
        target_shard_bytes: 1024,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
    for i in 0..n {
        let blob: Vec<u8> = (0..4 + i % 7).map(|k| (i + k) as u8).collect();
        w.write(&[
            FieldValue::Int64(tag * 1000 + i as i64),
            FieldValue::Bytes(Cow::Owned(blob)),
        ])
        .unwrap();
    }
    w.finish().unwrap();
    path
}

/// The blend a mixture's resume state keeps (the order's part of the state).
fn blend_of(state: &ResumeState) -> BlendState {
    state.order.as_ref().unwrap().read("mixture").unwrap()
}

/// `state` with its blend changed by `change`.
fn with_blend(state: &ResumeState, change: impl FnOnce(&mut BlendState)) -> ResumeState {
    let mut blend = blend_of(state);
    change(&mut blend);
    ResumeState {
        order: Some(OrderState::of(&blend)),
        ..state.clone()
    }
}

fn records(path: &Path) -> Arc<dyn Samples> {
    let ds = Arc::new(Dataset::open(path).unwrap());
    let cols = Column::all(ds.schema()).unwrap();
    Arc::new(Records::new(ds, cols, 0, None).unwrap())
}

fn options(schedule: Vec<(u64, Vec<f64>)>, unit: ScheduleUnit, sps: u64) -> MixtureOptions {
    MixtureOptions {
        schedule,
        unit,
        samples_per_step: sps,
        epoch_samples: None,
        source_column: true,
        on_change: OnChange::Refuse,
    }
}

fn mixture(paths: &[PathBuf], opts: MixtureOptions) -> Arc<Mixture> {
    let sources = paths
        .iter()
        .enumerate()
        .map(|(i, p)| MixtureSource::new(format!("s{i}"), records(p)))
        .collect();
    Arc::new(Mixture::new(sources, opts).unwrap())
}

fn config(threads: usize, prefetch: usize, tail: Tail) -> LoaderConfig {
    LoaderConfig {
        batch_size: 4,
        seed: 5,
        shuffle: Shuffle::Global,
        tail,
        threads,
        prefetch,
        prepare_next_epoch: false,
        ..LoaderConfig::default()
    }
}

/// A batch as plain data: ids, padding, x values, source column.
type Plain = (Vec<u64>, Vec<bool>, Vec<i64>, Vec<i64>);

fn ints(c: &ColumnData) -> Vec<i64> {
    match c {
        ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } => data
            .as_bytes()
            .chunks(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        ColumnData::List(_) => panic!("not a fixed column"),
    }
}

fn run(l: &mut Loader, steps: Option<usize>) -> Vec<Plain> {
    let mut out = Vec::new();
    let mut it = l.iter().unwrap();
    while steps.is_none_or(|s| out.len() < s) {
        let Some(b) = it.next() else { break };
        let b = b.unwrap();
        let col = |name: &str| {
            let c = &b.columns.iter().find(|(n, _)| n == name).unwrap().1;
            ints(c)
        };
        out.push((b.ids.clone(), b.padding.clone(), col("x"), col("source")));
    }
    out
}

#[test]
fn a_mixture_gives_the_same_batches_on_any_thread_count_and_its_source_column_is_right() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = [
        write(tmp.path(), 1, 37),
        write(tmp.path(), 2, 120),
        write(tmp.path(), 3, 5),
    ];
    let opts = || options(vec![(0, vec![0.5, 0.3, 0.2])], ScheduleUnit::Samples, 0);
    let mut reference =
        Loader::from_samples(mixture(&paths, opts()), config(1, 1, Tail::Pad)).unwrap();
    let e0 = run(&mut reference, None);
    let e1 = run(&mut reference, None);
    assert_ne!(e0, e1);
    for (threads, prefetch) in [(2, 5), (3, 2)] {
        let mut l = Loader::from_samples(
            mixture(&paths, opts()),
            config(threads, prefetch, Tail::Pad),
        )
        .unwrap();
        assert_eq!(run(&mut l, None), e0, "{threads} threads");
        assert_eq!(run(&mut l, None), e1, "{threads} threads, epoch 1");
    }
    // the source column names the source of the record, and the shares hold in every prefix
    let mut counts = [0u64; 3];
    let mut g = 0u64;
    for (_, pad, xs, srcs) in &e0 {
        for ((x, s), p) in xs.iter().zip(srcs).zip(pad) {
            assert_eq!(x / 1000 - 1, *s, "x {x} from source {s}");
            if *p {
                continue;
            }
            counts[*s as usize] += 1;
            g += 1;
            for (c, w) in counts.iter().zip([0.5, 0.3, 0.2]) {
                assert!(
                    (*c as f64 - w * g as f64).abs() < 1.0 + 1e-6,
                    "{counts:?} at {g}"
                );
            }
        }
    }
    // 162 samples an epoch: the 5-record source gives 32 of them, over 6 passes, each a
    // permutation of its records
    let small: Vec<i64> = e0
        .iter()
        .flat_map(|(_, pad, xs, _)| xs.iter().zip(pad).filter(|(_, p)| !**p).map(|(x, _)| *x))
        .filter(|x| x / 1000 == 3)
        .collect();
    for pass in small.chunks(5).filter(|c| c.len() == 5) {
        let mut p = pass.to_vec();
        p.sort_unstable();
        assert_eq!(p, vec![3000, 3001, 3002, 3003, 3004]);
    }
    let stats = reference.stats();
    assert_eq!(stats.groups.len(), 3);
    assert!(stats.groups[2].passes > 12.0, "{:?}", stats.groups[2]);
    assert_eq!(
        stats.groups.iter().map(|s| s.samples).sum::<u64>(),
        stats.samples
    );
}

#[test]
fn a_schedule_in_steps_changes_the_weights_at_its_step_and_resumes_after_the_change() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = [write(tmp.path(), 1, 50), write(tmp.path(), 2, 50)];
    let sched = vec![
        (0, vec![1.0, 0.0]),
        (6, vec![0.0, 1.0]),
        (12, vec![1.0, 1.0]),
    ];
    let make = || mixture(&paths, options(sched.clone(), ScheduleUnit::Steps, 4));
    let full = run(
        &mut Loader::from_samples(make(), config(2, 2, Tail::Drop)).unwrap(),
        None,
    );
    assert!(full[..6].iter().all(|b| b.3.iter().all(|s| *s == 0)));
    assert!(full[6..12].iter().all(|b| b.3.iter().all(|s| *s == 1)));
    assert_eq!(
        full[12..]
            .iter()
            .map(|b| b.3.iter().sum::<i64>())
            .sum::<i64>(),
        2 * (full.len() as i64 - 12)
    );
    for k in [3, 6, 7, 13] {
        let mut a = Loader::from_samples(make(), config(2, 2, Tail::Drop)).unwrap();
        assert_eq!(run(&mut a, Some(k))[..], full[..k]);
        let state = ResumeState::from_json(&a.state().to_json()).unwrap();
        let mut b = Loader::from_samples(make(), config(1, 3, Tail::Drop)).unwrap();
        b.load_state(&state).unwrap();
        assert_eq!(run(&mut b, None)[..], full[k..], "resumed after {k}");
    }
}

#[test]
fn a_schedule_extended_past_the_position_continues_as_an_uninterrupted_run_and_a_changed_past_is_refused()
 {
    let tmp = tempfile::tempdir().unwrap();
    let paths = [
        write(tmp.path(), 1, 30),
        write(tmp.path(), 2, 40),
        write(tmp.path(), 3, 9),
    ];
    let first = vec![(0, vec![0.5, 0.25, 0.25])];
    let extended = vec![(0, vec![0.5, 0.25, 0.25]), (8, vec![0.1, 0.1, 0.8])];
    let mk = |s: &Vec<(u64, Vec<f64>)>, on_change| {
        let mut o = options(s.clone(), ScheduleUnit::Steps, 4);
        o.on_change = on_change;
        o.epoch_samples = Some(79);
        mixture(&paths, o)
    };
    let uninterrupted = run(
        &mut Loader::from_samples(mk(&extended, OnChange::Refuse), config(2, 2, Tail::Drop))
            .unwrap(),
        None,
    );
    let mut a =
        Loader::from_samples(mk(&first, OnChange::Refuse), config(2, 2, Tail::Drop)).unwrap();
    let head = run(&mut a, Some(5));
    assert_eq!(head[..], uninterrupted[..5]);
    let state = a.state();
    let mut b =
        Loader::from_samples(mk(&extended, OnChange::Refuse), config(2, 2, Tail::Drop)).unwrap();
    b.load_state(&state).unwrap();
    assert_eq!(run(&mut b, None)[..], uninterrupted[5..]);

    // a change at step 3, before the state's step 5: refused, naming the mixture
    let past = vec![(0, vec![0.5, 0.25, 0.25]), (3, vec![0.0, 0.0, 1.0])];
    let mut c =
        Loader::from_samples(mk(&past, OnChange::Refuse), config(2, 2, Tail::Drop)).unwrap();
    let err = c.load_state(&state).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::IncompatibleResume {
                field: "mixture",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("reblend"), "{err}");
    // a source added: refused too
    let four = [paths.to_vec(), vec![write(tmp.path(), 4, 10)]].concat();
    let mut o = options(vec![(0, vec![1.0, 1.0, 1.0, 1.0])], ScheduleUnit::Steps, 4);
    o.epoch_samples = Some(79);
    let added = mixture(&four, o.clone());
    let mut d = Loader::from_samples(added, config(2, 2, Tail::Drop)).unwrap();
    assert!(d.load_state(&state).unwrap_err().to_string().contains("s3"));

    // with on_change = reblend: a new blend from the state's position, each source continuing
    // its passes (no record of a pass repeated before the pass ends)
    o.on_change = OnChange::Reblend;
    let mut e = Loader::from_samples(mixture(&four, o), config(2, 2, Tail::Drop)).unwrap();
    e.load_state(&state).unwrap();
    let rest = run(&mut e, None);
    let mut seen: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (_, pad, xs, _) in head.iter().chain(&rest) {
        for (x, p) in xs.iter().zip(pad) {
            if !p {
                seen.entry(x / 1000).or_default().push(*x);
            }
        }
    }
    let lens = [(1, 30usize), (2, 40), (3, 9), (4, 10)];
    for (tag, len) in lens {
        let xs = seen.get(&tag).cloned().unwrap_or_default();
        for pass in xs.chunks(len) {
            let mut p = pass.to_vec();
            p.sort_unstable();
            p.dedup();
            assert_eq!(
                p.len(),
                pass.len(),
                "source {tag}: a record repeated within a pass"
            );
        }
    }
    assert!(seen.contains_key(&4), "the added source is read");
    // the new state carries the new blend: it resumes itself exactly
    let state2 = e.state();
    assert_eq!(blend_of(&state2).origin, 5 * 4);
}

#[test]
fn sources_that_disagree_on_their_fields_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let a = write(tmp.path(), 1, 10);
    let other = tmp.path().join("other");
    let schema = Schema::from_specs([("x", "float64"), ("blob", "bytes")]).unwrap();
    let mut w = DatasetWriter::create(&other, schema, DatasetWriteOptions::default()).unwrap();
    w.write(&[
        FieldValue::Float64(1.0),
        FieldValue::Bytes(Cow::Borrowed(b"z")),
    ])
    .unwrap();
    w.finish().unwrap();
    let sources = vec![
        MixtureSource::new("images", records(&a)),
        MixtureSource::new("extra", records(&other)),
    ];
    let err = Mixture::new(
        sources,
        options(vec![(0, vec![1.0, 1.0])], ScheduleUnit::Samples, 0),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("'extra'") && err.contains("'x'") && err.contains("'images'"),
        "{err}"
    );
    // a missing field
    let ds = Arc::new(Dataset::open(&a).unwrap());
    let only_x = Column::all(ds.schema())
        .unwrap()
        .into_iter()
        .filter(|c| c.name == "x")
        .collect();
    let sources = vec![
        MixtureSource::new("full", records(&a)),
        MixtureSource::new("thin", Arc::new(Records::new(ds, only_x, 0, None).unwrap())),
    ];
    let err = Mixture::new(
        sources,
        options(vec![(0, vec![1.0, 1.0])], ScheduleUnit::Samples, 0),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("'thin' has no field 'blob'"), "{err}");
}

fn write_tokens(path: &Path, first: u64, docs: u64) {
    write_tokens_of(path, first, docs, 60_000);
}

fn write_tokens_of(path: &Path, first: u64, docs: u64, vocab: u64) {
    let schema = Schema::from_specs([("tokens", "bytes")]).unwrap();
    let opts = DatasetWriteOptions {
        target_shard_bytes: 2048,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(path, schema, opts).unwrap();
    let mut g = 0u64;
    for d in 0..docs {
        let mut b = Vec::new();
        for _ in 0..(d * 7) % 31 + 5 {
            b.extend_from_slice(&((first + g % 1000) as u16).to_le_bytes());
            g += 1;
        }
        w.write(&[FieldValue::Bytes(b.into())]).unwrap();
    }
    w.set_source(serde_json::json!({"kind": "test", "tokens": {
        "dtype": "u16", "vocab_size": vocab, "total_tokens": g,
    }}));
    w.finish().unwrap();
}

#[test]
fn token_sources_must_agree_on_the_vocabulary() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write_tokens_of(&a, 10, 20, 60_000);
    write_tokens_of(&b, 10, 20, 32_000);
    let spec = stokehold::EngineSpec::from_json(
        &serde_json::json!({
            "samples": {"kind": "tokens", "mode": {"kind": "packed", "seq_len": 8},
                        "dtype": "i32", "position_ids": false, "segment_ids": false},
            "mixture": {"sources": [{"name": "web"}, {"name": "books"}],
                        "schedule": [{"at": 0, "weights": [1.0, 1.0]}]},
        })
        .to_string(),
    )
    .unwrap();
    let open = |p: &Path| Arc::new(Dataset::open(p).unwrap());
    let err = spec
        .build_mixture(vec![open(&a), open(&b)], Default::default(), &mut |_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("'books'") && err.contains("32000") && err.contains("vocabulary"),
        "{err}"
    );
    // the same vocabulary: accepted
    let c = tmp.path().join("c");
    write_tokens_of(&c, 20, 20, 60_000);
    assert!(
        spec.build_mixture(vec![open(&a), open(&c)], Default::default(), &mut |_| None)
            .is_ok()
    );
}

#[test]
fn token_windows_of_two_datasets_mix_and_resume_exactly_on_another_number_of_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("web"), tmp.path().join("code"));
    write_tokens(&a, 10_000, 120);
    write_tokens(&b, 20_000, 40);
    let windows = |p: &Path| -> Arc<dyn Samples> {
        let data = Arc::new(TokenDataset::open(Arc::new(Dataset::open(p).unwrap())).unwrap());
        let o = TokenOptions {
            mode: TokenMode::Packed { seq_len: 16 },
            dtype: DType::I32,
            position_ids: false,
            segment_ids: false,
        };
        Arc::new(Tokens::new(data, o).unwrap())
    };
    let mix = || -> Arc<Mixture> {
        let sources = vec![
            MixtureSource::new("web", windows(&a)),
            MixtureSource::new("code", windows(&b)),
        ];
        let o = options(vec![(0, vec![0.7, 0.3])], ScheduleUnit::Samples, 0);
        Arc::new(Mixture::new(sources, o).unwrap())
    };
    let ranked = |rank, world| LoaderConfig {
        rank,
        world_size: world,
        ..config(2, 2, Tail::Pad)
    };
    // the whole epoch on one rank: the reference multiset of ids
    let mut one = Loader::from_samples(mix(), ranked(0, 1)).unwrap();
    let mut reference = Vec::new();
    let mut it = one.iter().unwrap();
    for batch in it.by_ref() {
        let batch = batch.unwrap();
        // tokens of the code source are 20_000.., of web 10_000..
        let tokens = ints_i32(&batch.columns[0].1);
        let src = ints(&batch.columns.last().unwrap().1);
        for (row, s) in tokens.chunks(16).zip(&src) {
            assert_eq!((row[0] / 10_000 - 1) as i64, *s, "{row:?}");
        }
        reference.extend(
            batch
                .ids
                .iter()
                .zip(&batch.padding)
                .filter(|(_, p)| !**p)
                .map(|(i, _)| *i),
        );
    }
    drop(it);
    reference.sort_unstable();
    // 2 ranks, 3 steps; rank 1's state resumes 3 ranks
    let mut got = Vec::new();
    let mut state = None;
    for rank in 0..2 {
        let mut l = Loader::from_samples(mix(), ranked(rank, 2)).unwrap();
        let mut it = l.iter().unwrap();
        for _ in 0..3 {
            let b = it.next().unwrap().unwrap();
            got.extend(
                b.ids
                    .iter()
                    .zip(&b.padding)
                    .filter(|(_, p)| !**p)
                    .map(|(i, _)| *i),
            );
        }
        drop(it);
        if rank == 1 {
            state = Some(l.state());
        }
    }
    for rank in 0..3 {
        let mut l = Loader::from_samples(mix(), ranked(rank, 3)).unwrap();
        l.load_state(state.as_ref().unwrap()).unwrap();
        for b in l.iter().unwrap() {
            let b = b.unwrap();
            got.extend(
                b.ids
                    .iter()
                    .zip(&b.padding)
                    .filter(|(_, p)| !**p)
                    .map(|(i, _)| *i),
            );
        }
    }
    got.sort_unstable();
    assert_eq!(got, reference);
}

fn ints_i32(c: &ColumnData) -> Vec<i32> {
    match c {
        ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } => data
            .as_bytes()
            .chunks(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect(),
        ColumnData::List(_) => panic!("not a fixed column"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// 1–5 sources of random sizes and weights, an optional change of weights, either tail:
    /// `w1` ranks stop after `k` steps, `w2` ranks resume from rank 0's state, and together they
    /// deliver exactly the ids at the positions of the epoch they covered, each once.
    #[test]
    fn mixtures_resume_exactly_on_any_number_of_ranks(
        sizes in prop::collection::vec(1u64..40, 1..=5),
        weights in prop::collection::vec(0.05f64..1.0, 5),
        change in prop::option::of((1u64..6, prop::collection::vec(0.0f64..1.0, 5))),
        pad in any::<bool>(),
        w1 in 1u32..4,
        w2 in 1u32..4,
        k in 0usize..5,
        seed in 0u64..1000,
    ) {
        let tmp = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| write(tmp.path(), i as i64 + 1, n))
            .collect();
        let n = sizes.len();
        let mut sched = vec![(0, weights[..n].to_vec())];
        if let Some((at, w)) = &change {
            let mut w = w[..n].to_vec();
            w[0] += 0.01; // never all zero
            sched.push((*at, w));
        }
        let tail = if pad { Tail::Pad } else { Tail::Drop };
        let cfg = |rank, world| LoaderConfig {
            rank,
            world_size: world,
            seed,
            ..config(2, 2, tail)
        };
        let mix = || mixture(&paths, options(sched.clone(), ScheduleUnit::Samples, 0));
        let mut got = Vec::new();
        let mut state = None;
        for rank in 0..w1 {
            let mut l = Loader::from_samples(mix(), cfg(rank, w1)).unwrap();
            for (ids, padding, _, _) in run(&mut l, Some(k)) {
                got.extend(ids.iter().zip(&padding).filter(|(_, p)| !**p).map(|(i, _)| *i));
            }
            if rank == 0 {
                state = Some(ResumeState::from_json(&l.state().to_json()).unwrap());
            }
        }
        let state = state.unwrap();
        let m = mix();
        let epoch = m.len();
        // what the w1 ranks covered of epoch 0
        let first = Loader::from_samples(mix(), cfg(0, w1)).unwrap();
        let steps1 = first.steps().unwrap().min(k as u64);
        let mut covered = vec![(0, 0..(steps1 * u64::from(w1) * 4).min(epoch))];
        for rank in 0..w2 {
            let mut l = Loader::from_samples(mix(), cfg(rank, w2)).unwrap();
            l.load_state(&state).unwrap();
            if rank == 0 {
                let end = state.position + l.steps().unwrap() * u64::from(w2) * 4;
                covered.push((state.epoch, state.position..end.min(epoch)));
            }
            for (ids, padding, _, _) in run(&mut l, None) {
                got.extend(ids.iter().zip(&padding).filter(|(_, p)| !**p).map(|(i, _)| *i));
            }
        }
        let mut expected = Vec::new();
        for (e, r) in covered {
            let order = m.blended().epoch(&Shuffle::Global, seed, e).unwrap();
            expected.extend(r.map(|p| order.id_at(p).unwrap()));
        }
        expected.sort_unstable();
        got.sort_unstable();
        prop_assert_eq!(got, expected);
    }
}

/// Flip a byte in the middle of record `index` of the dataset at `dir`, in its shard file.
fn damage(dir: &Path, index: u64) {
    let ds = Dataset::open(dir).unwrap();
    let mut record = Vec::new();
    ds.read_record(index, &mut record).unwrap();
    for shard in &ds.manifest().shards {
        let path = dir.join(&shard.file);
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(record.len()).position(|w| w == &record[..]) {
            bytes[at + record.len() / 2] ^= 0x20;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
    }
    panic!("record {index} not found");
}

#[test]
fn a_damaged_record_of_one_source_is_skipped_the_same_way_on_any_thread_count_within_its_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = [write(tmp.path(), 1, 60), write(tmp.path(), 2, 10)];
    damage(&paths[1], 3);
    let mk = |budget: Option<f64>| {
        let mut sources: Vec<MixtureSource> = paths
            .iter()
            .enumerate()
            .map(|(i, p)| MixtureSource::new(format!("s{i}"), records(p)))
            .collect();
        sources[1].max_skip_fraction = budget;
        let o = options(vec![(0, vec![0.5, 0.5])], ScheduleUnit::Samples, 0);
        Arc::new(Mixture::new(sources, o).unwrap())
    };
    let skip = |threads| LoaderConfig {
        on_error: stokehold::ErrorPolicy::skip(),
        ..config(threads, 2, Tail::Drop)
    };
    // the loader's budget only: the damaged record (read 3 or 4 times over the epoch's passes of
    // the small source) is skipped each time, the same way on 1 and 3 threads
    let mut one = Loader::from_samples(mk(None), skip(1)).unwrap();
    let a = run(&mut one, None);
    let skipped = one.stats().skipped.len();
    assert!(skipped >= 3, "{skipped}");
    assert_eq!(one.stats().groups[1].failed, skipped as u64);
    let mut three = Loader::from_samples(mk(None), skip(3)).unwrap();
    assert_eq!(run(&mut three, None), a);
    // no x of the damaged record is delivered
    assert!(a.iter().all(|b| !b.2.contains(&2003)));
    // a budget of 5% of the small source's share (35 of 70 samples: 1.75): the second skip fails,
    // naming the source
    let mut strict = Loader::from_samples(mk(Some(0.05)), skip(2)).unwrap();
    let err = strict
        .iter()
        .unwrap()
        .find_map(|b| b.err())
        .expect("the budget is exceeded");
    assert!(err.to_string().contains("source 's1'"), "{err}");
}

#[test]
fn the_sources_share_the_loaders_cache_budgets_in_proportion_to_their_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (write(tmp.path(), 1, 90), write(tmp.path(), 2, 30));
    let spec = stokehold::EngineSpec::from_json(
        &serde_json::json!({
            "loader": {"batch_size": 4, "cache_bytes": 1_000_000, "threads": 2},
            "samples": {"kind": "records"},
            "mixture": {"sources": [{"name": "a"}, {"name": "b"}],
                        "schedule": [{"at": 0, "weights": []}]},
        })
        .to_string(),
    )
    .unwrap();
    let open = |p: &Path| Arc::new(Dataset::open(p).unwrap());
    let (da, db) = (open(&a), open(&b));
    let share = da.bytes() as f64 / (da.bytes() + db.bytes()) as f64;
    let mut l = spec
        .build_mixture(vec![da, db], Default::default(), &mut |_| None)
        .unwrap()
        .loader;
    run(&mut l, None);
    let records = l
        .stats()
        .caches
        .into_iter()
        .find(|c| c.kind == "records")
        .expect("the RAM cache's figures");
    // one budget for the mixture, not one per source
    assert!(
        (999_990..=1_000_000).contains(&records.budget),
        "{}",
        records.budget
    );
    assert!(share > 0.6 && share < 0.9, "{share}");
    assert!(records.hits + records.misses > 0);
}

#[test]
fn a_mixture_state_far_past_any_run_or_with_broken_counts_is_refused_not_walked() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = [write(tmp.path(), 1, 20), write(tmp.path(), 2, 20)];
    let mk = || {
        mixture(
            &paths,
            options(vec![(0, vec![1.0, 1.0])], ScheduleUnit::Samples, 0),
        )
    };
    let mut a = Loader::from_samples(mk(), config(1, 1, Tail::Drop)).unwrap();
    run(&mut a, Some(2));
    let good = a.state();
    let mut bad = good.clone();
    bad.epoch = 1 << 60;
    let mut b = Loader::from_samples(mk(), config(1, 1, Tail::Drop)).unwrap();
    let err = b.load_state(&bad).unwrap_err();
    assert!(matches!(err, EngineError::InvalidState { .. }), "{err}");
    let bad = with_blend(&good, |b| b.base = vec![u64::MAX, 0]);
    assert!(b.load_state(&bad).is_err());
    // phases that do not sum to the unit: an error when the blend is made, not garbage
    let bad = with_blend(&good, |b| b.phases[0].weights = vec![1, 1]);
    let loaded = b.load_state(&bad);
    assert!(loaded.is_err() || b.iter().is_err() || b.iter().unwrap().next().unwrap().is_err());
    // and the good state still resumes
    b.load_state(&good).unwrap();
    assert!(!run(&mut b, None).is_empty());
}

#[test]
fn a_refused_state_leaves_the_mixtures_blend_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let paths = [write(tmp.path(), 1, 20), write(tmp.path(), 2, 20)];
    let mk = |w: Vec<f64>| {
        let mut o = options(vec![(0, w)], ScheduleUnit::Samples, 0);
        o.on_change = OnChange::Reblend;
        mixture(&paths, o)
    };
    let mut a = Loader::from_samples(mk(vec![1.0, 0.0]), config(1, 1, Tail::Drop)).unwrap();
    run(&mut a, Some(3));
    let mut state = a.state();
    state.seed += 1; // another seed: refused, before the blend is looked at
    let mut b = Loader::from_samples(mk(vec![0.0, 1.0]), config(1, 1, Tail::Drop)).unwrap();
    let fresh = run(
        &mut Loader::from_samples(mk(vec![0.0, 1.0]), config(1, 1, Tail::Drop)).unwrap(),
        None,
    );
    assert!(b.load_state(&state).is_err());
    assert_eq!(
        run(&mut b, None),
        fresh,
        "the refused state's blend was not taken"
    );
}

#[test]
fn padded_documents_of_two_sources_are_padded_to_the_longest_of_the_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write_tokens(&a, 10_000, 30);
    write_tokens(&b, 20_000, 30);
    let docs = |p: &Path| -> Arc<dyn Samples> {
        let data = Arc::new(TokenDataset::open(Arc::new(Dataset::open(p).unwrap())).unwrap());
        let o = TokenOptions {
            mode: TokenMode::Documents {
                max_len: 64,
                pad_id: 0,
                bucket: 1,
            },
            dtype: DType::I32,
            position_ids: false,
            segment_ids: false,
        };
        Arc::new(Tokens::new(data, o).unwrap())
    };
    let sources = vec![
        MixtureSource::new("a", docs(&a)),
        MixtureSource::new("b", docs(&b)),
    ];
    let o = options(vec![(0, vec![1.0, 1.0])], ScheduleUnit::Samples, 0);
    let mut l = Loader::from_samples(
        Arc::new(Mixture::new(sources, o).unwrap()),
        config(2, 2, Tail::Drop),
    )
    .unwrap();
    let mut widths = std::collections::BTreeSet::new();
    for batch in l.iter().unwrap() {
        let batch = batch.unwrap();
        let ColumnData::Fixed { shape, .. } = &batch.columns[0].1 else {
            panic!("fixed")
        };
        // every row of the batch has the batch's width, whichever source it came from
        widths.insert(shape[1]);
        let tokens = ints_i32(&batch.columns[0].1);
        let src = ints(&batch.columns.last().unwrap().1);
        for (row, s) in tokens.chunks(shape[1]).zip(&src) {
            assert_eq!(i64::from(row[0] / 10_000 - 1), *s, "{row:?}");
        }
    }
    assert!(
        widths.len() > 1,
        "the width follows each batch's longest document: {widths:?}"
    );
}

#[test]
fn a_source_left_out_of_weights_by_name_is_refused_naming_it_and_an_explicit_0_is_taken() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        write(tmp.path(), 1, 10),
        write(tmp.path(), 2, 10),
        write(tmp.path(), 3, 10),
    );
    let spec = |schedule: serde_json::Value| {
        stokehold::EngineSpec::from_json(
            &serde_json::json!({
                "loader": {"batch_size": 2},
                "samples": {"kind": "records"},
                "mixture": {"sources": [{"name": "web"}, {"name": "code"}, {"name": "books"}],
                            "schedule": schedule},
            })
            .to_string(),
        )
        .unwrap()
    };
    let open = |p: &Path| Arc::new(Dataset::open(p).unwrap());
    let build = |s: stokehold::EngineSpec| {
        s.build_mixture(
            vec![open(&a), open(&b), open(&c)],
            Default::default(),
            &mut |_| None,
        )
    };
    let Err(err) = build(spec(
        serde_json::json!([{"at": 0, "weights": {"web": 0.7}}]),
    )) else {
        panic!("a source without a weight is refused")
    };
    let err = err.to_string();
    assert!(
        err.contains("weights: no weight for 'code', 'books'") && err.contains("'code': 0"),
        "{err}"
    );
    // a later entry of the schedule is named as such
    let Err(err) = build(spec(serde_json::json!([
        {"at": 0, "weights": [1, 1, 1]},
        {"at": 4, "weights": {"web": 1, "code": 1}},
    ]))) else {
        panic!("a later entry without every source is refused")
    };
    let err = err.to_string();
    assert!(
        err.contains("the schedule's weights at 4: no weight for 'books'"),
        "{err}"
    );
    // every source named, one at 0: it never appears in the blend
    let mut l = build(spec(serde_json::json!([
        {"at": 0, "weights": {"web": 1, "code": 1, "books": 0}},
    ])))
    .unwrap()
    .loader;
    let sources: Vec<i64> = run(&mut l, None).into_iter().flat_map(|b| b.3).collect();
    assert!(sources.contains(&0) && sources.contains(&1), "{sources:?}");
    assert!(!sources.contains(&2), "{sources:?}");
}

/// Samples of `n` ids that read no bytes: `x` is `tag * 1000 + id`; the ids in `corrupt` fail
/// with a corrupt record, those in `panic` panic (after writing a part of their slot).
#[derive(Debug)]
struct Made {
    tag: i64,
    n: u64,
    corrupt: Vec<u64>,
    panic: Vec<u64>,
    columns: Vec<(String, stokehold::Output)>,
}

impl Made {
    fn new(tag: i64, n: u64, corrupt: &[u64], panic: &[u64]) -> Arc<Made> {
        Arc::new(Made {
            tag,
            n,
            corrupt: corrupt.to_vec(),
            panic: panic.to_vec(),
            columns: vec![(
                "x".into(),
                stokehold::Output::Fixed {
                    dtype: DType::I64,
                    shape: vec![],
                },
            )],
        })
    }
}

impl Samples for Made {
    fn len(&self) -> u64 {
        self.n
    }

    fn layout(&self) -> stokehold::samples::Layout {
        stokehold::samples::Layout {
            mean_bytes: 8,
            blocks: None,
            whole_batch_tasks: true,
            stage_names: vec!["make".into()],
            fingerprint: format!("made:{}:{}", self.tag, self.n),
        }
    }

    fn columns(&self) -> &[(String, stokehold::Output)] {
        &self.columns
    }

    fn fill(
        &self,
        id: u64,
        _k: usize,
        _io: &mut stokehold::samples::TaskIo,
        _cx: &mut stokehold::samples::TaskCtx<'_, '_>,
        out: &mut stokehold::samples::SlotWriter<'_>,
    ) -> stokehold::Result<()> {
        if self.corrupt.contains(&id) {
            return Err(EngineError::Sample {
                id,
                source: stokehold::format::FormatError::Corrupt {
                    path: PathBuf::from(format!("made{}", self.tag)),
                    what: format!("made sample {id}"),
                    offset: id,
                    detail: "made to fail".into(),
                },
            });
        }
        out.fixed(0).copy_from_slice(&(-1i64).to_le_bytes());
        if self.panic.contains(&id) {
            panic!("made sample {id} panics");
        }
        let x = self.tag * 1000 + id as i64;
        out.fixed(0).copy_from_slice(&x.to_le_bytes());
        Ok(())
    }
}

#[test]
fn a_failing_or_panicking_sample_of_a_source_fails_alone_and_is_counted_to_its_source() {
    // source 0's samples 3 (corrupt) and 7 (a panic) fail; source 1's none. Whole-batch tasks:
    // each task fills both sources' samples, source by source.
    let mk = || {
        let sources = vec![
            MixtureSource::new("s0", Made::new(1, 40, &[3], &[7])),
            MixtureSource::new("s1", Made::new(2, 40, &[], &[])),
        ];
        let o = options(vec![(0, vec![0.5, 0.5])], ScheduleUnit::Samples, 0);
        Arc::new(Mixture::new(sources, o).unwrap())
    };
    let skip = |threads| LoaderConfig {
        on_error: stokehold::ErrorPolicy::skip(),
        ..config(threads, 2, Tail::Drop)
    };
    let mut one = Loader::from_samples(mk(), skip(1)).unwrap();
    let a = run(&mut one, None);
    let mut skipped = one.stats().skipped.clone();
    skipped.sort_unstable();
    // one pass of each source (80 samples, half each): each failing sample is met once
    assert_eq!(skipped, vec![3, 7]);
    let groups = &one.stats().groups;
    assert_eq!((groups[0].failed, groups[1].failed), (2, 0));
    // every other sample delivered, with its own value and source (a skipped slot takes another
    // sample of its batch, marked as padding)
    let mut xs: Vec<i64> = Vec::new();
    for (ids, padding, x, source) in &a {
        for (i, &id) in ids.iter().enumerate() {
            let (s, local) = if id < 40 { (0, id) } else { (1, id - 40) };
            assert_eq!(source[i], s, "sample {id}");
            assert_eq!(x[i], (s + 1) * 1000 + local as i64, "sample {id}");
            if !padding[i] {
                xs.push(x[i]);
            }
        }
    }
    assert_eq!(xs.len(), 78);
    xs.sort_unstable();
    xs.dedup();
    let want: Vec<i64> = (0..40)
        .filter(|i| ![3, 7].contains(i))
        .map(|i| 1000 + i)
        .chain((0..40).map(|i| 2000 + i))
        .collect();
    assert_eq!(xs, want);
    // the same on 3 threads
    let mut three = Loader::from_samples(mk(), skip(3)).unwrap();
    assert_eq!(run(&mut three, None), a);
    // under `fail`, the first failure is the loader's error, naming its sample
    let mut fail = Loader::from_samples(mk(), config(2, 2, Tail::Drop)).unwrap();
    let err = fail
        .iter()
        .unwrap()
        .find_map(|b| b.err())
        .expect("a sample fails");
    let msg = err.to_string();
    assert!(
        msg.contains("made sample 3") || msg.contains("made sample 7 panics"),
        "{msg}"
    );
}

/// [`Made`] samples whose `fill_task` leaves out the task's second sample, or panics after
/// filling its first (outside any sample's fill).
#[derive(Debug)]
struct Careless {
    made: Arc<Made>,
    panic_between: bool,
}

impl Samples for Careless {
    fn len(&self) -> u64 {
        self.made.len()
    }

    fn layout(&self) -> stokehold::samples::Layout {
        self.made.layout()
    }

    fn columns(&self) -> &[(String, stokehold::Output)] {
        self.made.columns()
    }

    fn fill(
        &self,
        id: u64,
        k: usize,
        io: &mut stokehold::samples::TaskIo,
        cx: &mut stokehold::samples::TaskCtx<'_, '_>,
        out: &mut stokehold::samples::SlotWriter<'_>,
    ) -> stokehold::Result<()> {
        self.made.fill(id, k, io, cx, out)
    }

    fn fill_task(
        &self,
        ids: &[u64],
        io: &mut stokehold::samples::TaskIo,
        task: &mut stokehold::samples::TaskFill<'_, '_, '_>,
    ) {
        for (k, &id) in ids.iter().enumerate() {
            if k == 1 {
                assert!(!self.panic_between, "between the samples");
                continue;
            }
            task.sample(k, |cx, out| self.fill(id, k, io, cx, out));
        }
    }
}

#[test]
fn a_sample_its_fill_task_leaves_out_or_panics_before_fails_alone_naming_it() {
    for panic_between in [false, true] {
        let samples: Arc<dyn Samples> = Arc::new(Careless {
            made: Made::new(1, 40, &[], &[]),
            panic_between,
        });
        let cfg = LoaderConfig {
            shuffle: Shuffle::Sequential,
            ..config(1, 2, Tail::Drop)
        };
        let mut l = Loader::from_samples(samples, cfg).unwrap();
        let err = l.iter().unwrap().next().unwrap().unwrap_err();
        // the batch's second sample (id 1), never its first
        assert_eq!(err.sample_id(), panic_between.then_some(1), "{err}");
        let msg = err.to_string();
        let want = if panic_between {
            "between the samples"
        } else {
            "sample 1 of a task was never filled"
        };
        assert!(msg.contains(want), "{msg}");
    }
}

#[test]
fn a_mixtures_groups_count_a_batch_as_their_group_of_each_id_says() {
    use stokehold::Groups;
    let tmp = tempfile::tempdir().unwrap();
    let paths = [
        write(tmp.path(), 1, 37),
        write(tmp.path(), 2, 120),
        write(tmp.path(), 3, 5),
    ];
    let m = mixture(
        &paths,
        options(vec![(0, vec![0.5, 0.3, 0.2])], ScheduleUnit::Samples, 0),
    );
    let groups: &dyn Groups = m.blended().as_ref();
    // every id, in an order that crosses the sources' ranges back and forth
    let ids: Vec<u64> = (0..162u64).map(|i| (i * 97) % 162).collect();
    for per_len in [3usize, 2, 1] {
        let mut per = vec![0u64; per_len];
        groups.count(&ids, &mut per);
        let mut want = vec![0u64; per_len];
        for &id in &ids {
            want[groups.group_of(id).min(per_len - 1)] += 1;
        }
        assert_eq!(per, want, "{per_len} counters");
    }
    let mut per = [0u64; 3];
    groups.count(&ids, &mut per);
    assert_eq!(per, [37, 120, 5]);
}
