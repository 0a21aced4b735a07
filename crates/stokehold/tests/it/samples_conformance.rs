//! Every kind of sample through the same checks (the seams issue, "one read path under a narrow
//! source trait"): records (through a stage that draws from the sample's generator), packed token
//! windows, padded documents (bucketed by length), and a mixture (two sources of records over
//! the same files, blended in proportion, so that an epoch is one pass over each), each a
//! [`Samples`] with its order ([`Loadable`]) run by the one engine ([`Loader::from_samples`]).
//! A new kind of sample (TFRecord, WebDataset and Parquet read in place) joins by adding a
//! [`Kind`] here. Mixtures have checks of their own too (`tests/it/mixture.rs`): there an epoch
//! is a slice of a blended stream in which a small source repeats.
//!
//! The checks, the same for each kind:
//! - the batches (ids, padding flags, every column's bytes) are the same whatever the thread count
//!   and prefetch depth, and the next epoch's differ;
//! - a state taken after any of several batches resumes into exactly the rest of the run, on
//!   another thread count;
//! - a state taken on 2 ranks resumes on 3: every sample is delivered exactly once over the epoch;
//! - a damaged record fails the run under `fail`, and under `skip` is reported in `stats()`,
//!   leaves every other sample in place, and gives the same batches on any thread count.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use stokehold::format::{DType, Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::samples::mixture::{MixtureOptions, OnChange, ScheduleUnit};
use stokehold::{
    Column, ColumnData, ErrorPolicy, Loadable, Loader, LoaderConfig, Mixture, MixtureSource,
    Records, ResumeState, Samples, Shuffle, Tail, TokenDataset, TokenMode, TokenOptions, Tokens,
    from_fn,
};

/// One kind of sample: how to make its dataset and its samples over it.
struct Kind {
    name: &'static str,
    /// Write the dataset at the path.
    write: fn(&Path),
    /// The samples over the dataset at the path, with their order.
    samples: fn(&Path) -> Loadable,
}

const KINDS: [Kind; 4] = [
    Kind {
        name: "records",
        write: write_records,
        samples: records,
    },
    Kind {
        name: "token windows",
        write: write_tokens,
        samples: windows,
    },
    Kind {
        name: "documents",
        write: write_tokens,
        samples: documents,
    },
    Kind {
        name: "mixture",
        write: write_records,
        samples: mixture,
    },
];

fn small_shards() -> DatasetWriteOptions {
    DatasetWriteOptions {
        target_shard_bytes: 2048,
        ..DatasetWriteOptions::default()
    }
}

fn write_records(path: &Path) {
    let schema = Schema::from_specs([("x", "int64"), ("blob", "bytes")]).unwrap();
    let mut w = DatasetWriter::create(path, schema, small_shards()).unwrap();
    for i in 0..240u64 {
        // distinct bytes per record (so a damaged one can be found in its shard)
        let blob: Vec<u8> = (0..8 + i % 23).map(|k| (i * 7 + k) as u8).collect();
        let blob = [i.to_le_bytes().as_slice(), &blob].concat();
        w.write(&[
            FieldValue::Int64(i as i64),
            FieldValue::Bytes(Cow::Owned(blob)),
        ])
        .unwrap();
    }
    w.finish().unwrap();
}

fn records(path: &Path) -> Loadable {
    Loadable::from(record_samples(path))
}

fn record_samples(path: &Path) -> Arc<Records> {
    let ds = Arc::new(Dataset::open(path).unwrap());
    let mut cols = Column::all(ds.schema()).unwrap();
    // x mixed with a number from the sample's generator: augmentations are compared too
    let stage = from_fn("augment", |v, ctx| match v {
        FieldValue::Int64(x) => Ok(FieldValue::Int64(x ^ (ctx.rng.next_u64() >> 40) as i64)),
        other => Err(format!("unexpected {other:?}").into()),
    });
    cols[0] = Column::fixed("x", vec![stage], DType::I64, vec![]);
    Arc::new(Records::new(ds, cols, 0, None).unwrap())
}

fn write_tokens(path: &Path) {
    let schema = Schema::from_specs([("tokens", "bytes")]).unwrap();
    let mut w = DatasetWriter::create(path, schema, small_shards()).unwrap();
    let mut g = 0u64;
    for d in 0..150u64 {
        let len = match d % 5 {
            0 => 1,
            1 => 90,
            _ => (d * 13) % 41 + 3,
        };
        let mut b = Vec::new();
        for _ in 0..len {
            b.extend_from_slice(&((g % 60_000) as u16).to_le_bytes());
            g += 1;
        }
        w.write(&[FieldValue::Bytes(b.into())]).unwrap();
    }
    w.set_source(serde_json::json!({"kind": "test", "tokens": {
        "dtype": "u16", "vocab_size": 60_000, "total_tokens": g,
    }}));
    w.finish().unwrap();
}

fn token_data(path: &Path) -> Arc<TokenDataset> {
    Arc::new(TokenDataset::open(Arc::new(Dataset::open(path).unwrap())).unwrap())
}

fn windows(path: &Path) -> Loadable {
    let options = TokenOptions {
        mode: TokenMode::Packed { seq_len: 24 },
        dtype: DType::I32,
        position_ids: true,
        segment_ids: true,
    };
    Loadable::from(Arc::new(Tokens::new(token_data(path), options).unwrap()))
}

fn documents(path: &Path) -> Loadable {
    let options = TokenOptions {
        mode: TokenMode::Documents {
            max_len: 40,
            pad_id: 0,
            bucket: 4,
        },
        dtype: DType::I64,
        position_ids: true,
        segment_ids: false,
    };
    Loadable::from(Arc::new(Tokens::new(token_data(path), options).unwrap()))
}

/// Two sources of the records at `path` (opened twice), blended in proportion to their samples
/// (equal halves), an epoch the two together: each record once per source per epoch. A damaged
/// record is damaged in both.
fn mixture(path: &Path) -> Loadable {
    let a: Arc<dyn Samples> = record_samples(path);
    let b: Arc<dyn Samples> = record_samples(path);
    let sources = vec![MixtureSource::new("a", a), MixtureSource::new("b", b)];
    let options = MixtureOptions {
        schedule: vec![(0, vec![])],
        unit: ScheduleUnit::Samples,
        samples_per_step: 0,
        epoch_samples: None,
        source_column: true,
        on_change: OnChange::Refuse,
    };
    Loadable::from(Arc::new(Mixture::new(sources, options).unwrap()))
}

/// A batch as plain data: ids, padding flags, and each column's bytes.
type Plain = (Vec<u64>, Vec<bool>, Vec<Vec<u8>>);

/// The batches of one run (`steps` at most), and whether it ended in an error.
fn run(l: &mut Loader, steps: Option<usize>) -> (Vec<Plain>, bool) {
    let mut out = Vec::new();
    let mut it = l.iter().unwrap();
    loop {
        if steps.is_some_and(|s| out.len() == s) {
            return (out, false);
        }
        match it.next() {
            None => return (out, false),
            Some(Err(_)) => return (out, true),
            Some(Ok(b)) => {
                let cols = b
                    .columns
                    .iter()
                    .map(|(_, c)| match c {
                        ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } => {
                            data.as_bytes().to_vec()
                        }
                        ColumnData::List(items) => format!("{items:?}").into_bytes(),
                    })
                    .collect();
                out.push((b.ids.clone(), b.padding.clone(), cols));
            }
        }
    }
}

fn config(threads: usize, prefetch: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: 8,
        seed: 11,
        shuffle: Shuffle::Global,
        tail: Tail::Pad,
        threads,
        prefetch,
        prepare_next_epoch: false,
        ..LoaderConfig::default()
    }
}

fn loader(kind: &Kind, dir: &Path, config: LoaderConfig) -> Loader {
    Loader::from_samples((kind.samples)(dir), config).unwrap()
}

/// The dataset of `kind` in a new directory under `tmp`.
fn dataset(kind: &Kind, tmp: &Path) -> PathBuf {
    let dir = tmp.join(kind.name.replace(' ', "-"));
    (kind.write)(&dir);
    dir
}

/// Every sample delivered (not padding) in `batches`, with how many times.
fn delivered(batches: &[Plain]) -> BTreeMap<u64, usize> {
    let mut seen = BTreeMap::new();
    for (ids, padding, _) in batches {
        for (id, pad) in ids.iter().zip(padding) {
            if !pad {
                *seen.entry(*id).or_insert(0) += 1;
            }
        }
    }
    seen
}

#[test]
fn every_kind_of_sample_gives_the_same_batches_on_any_thread_count_and_new_ones_each_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in &KINDS {
        let dir = dataset(kind, tmp.path());
        let mut reference = loader(kind, &dir, config(1, 1));
        let (epoch0, failed) = run(&mut reference, None);
        assert!(!failed && epoch0.len() > 4, "{}", kind.name);
        let (epoch1, _) = run(&mut reference, None);
        for (threads, prefetch) in [(2, 5), (3, 2)] {
            let mut l = loader(kind, &dir, config(threads, prefetch));
            assert_eq!(
                run(&mut l, None).0,
                epoch0,
                "{}: {threads} threads",
                kind.name
            );
            assert_eq!(run(&mut l, None).0, epoch1, "{}: epoch 1", kind.name);
        }
        assert_ne!(
            epoch0, epoch1,
            "{}: each epoch has its own order",
            kind.name
        );
        let samples = reference.samples().len();
        let seen = delivered(&epoch0);
        assert_eq!(seen.len() as u64, samples, "{}: every sample", kind.name);
        assert!(seen.values().all(|&n| n == 1), "{}: once each", kind.name);
    }
}

#[test]
fn every_kind_of_sample_resumes_exactly_from_a_state_taken_after_any_batch() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in &KINDS {
        let dir = dataset(kind, tmp.path());
        let (full, _) = run(&mut loader(kind, &dir, config(2, 2)), None);
        for k in [0, 1, full.len() / 2, full.len() - 1] {
            let mut a = loader(kind, &dir, config(2, 2));
            let (head, _) = run(&mut a, Some(k));
            assert_eq!(head[..], full[..k], "{}", kind.name);
            let state = ResumeState::from_json(&a.state().to_json()).unwrap();
            let mut b = loader(kind, &dir, config(3, 1));
            b.load_state(&state).unwrap();
            let (rest, failed) = run(&mut b, None);
            assert!(!failed);
            assert_eq!(
                rest[..],
                full[k..],
                "{}: resumed after {k} batches",
                kind.name
            );
        }
    }
}

#[test]
fn every_kind_of_sample_resumes_on_another_number_of_ranks_delivering_each_sample_once() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in &KINDS {
        let dir = dataset(kind, tmp.path());
        let ranked = |rank, world| LoaderConfig {
            rank,
            world_size: world,
            ..config(2, 2)
        };
        // 2 ranks run 3 steps; rank 0's state resumes 3 ranks
        let mut before = Vec::new();
        let mut state = None;
        for rank in 0..2 {
            let mut l = loader(kind, &dir, ranked(rank, 2));
            before.extend(run(&mut l, Some(3)).0);
            if rank == 0 {
                state = Some(ResumeState::from_json(&l.state().to_json()).unwrap());
            }
        }
        let mut after = Vec::new();
        for rank in 0..3 {
            let mut l = loader(kind, &dir, ranked(rank, 3));
            l.load_state(state.as_ref().unwrap()).unwrap();
            after.extend(run(&mut l, None).0);
        }
        let samples = loader(kind, &dir, config(1, 1)).samples().len();
        let mut seen = delivered(&before);
        for (id, n) in delivered(&after) {
            *seen.entry(id).or_insert(0) += n;
        }
        assert_eq!(seen.len() as u64, samples, "{}: every sample", kind.name);
        let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "{}: delivered twice: {twice:?}",
            kind.name
        );
    }
}

/// Flip a byte in the middle of record `index` of the dataset at `dir`, in its shard file.
fn damage(dir: &Path, index: u64) {
    let ds = Dataset::open(dir).unwrap();
    let mut record = Vec::new();
    ds.read_record(index, &mut record).unwrap();
    let mut first = 0;
    for shard in &ds.manifest().shards {
        if index < first + shard.records {
            let path = dir.join(&shard.file);
            let mut bytes = std::fs::read(&path).unwrap();
            let at = bytes
                .windows(record.len())
                .position(|w| w == &record[..])
                .expect("the record's bytes are in its shard");
            bytes[at + record.len() / 2] ^= 0x20;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
        first += shard.records;
    }
    panic!("no record {index}");
}

#[test]
fn a_damaged_record_fails_or_is_skipped_the_same_way_for_every_kind_of_sample() {
    let tmp = tempfile::tempdir().unwrap();
    for kind in &KINDS {
        let dir = dataset(kind, tmp.path());
        let (clean, _) = run(&mut loader(kind, &dir, config(2, 2)), None);
        damage(&dir, 41);
        let (_, failed) = run(&mut loader(kind, &dir, config(2, 2)), None);
        assert!(
            failed,
            "{}: the default policy stops at the damage",
            kind.name
        );

        let skip = |threads| LoaderConfig {
            on_error: ErrorPolicy::skip(),
            ..config(threads, 2)
        };
        let mut a = loader(kind, &dir, skip(1));
        let (skipped_run, failed) = run(&mut a, None);
        assert!(!failed, "{}: skipping completes the epoch", kind.name);
        let skipped = a.stats().skipped;
        assert!(!skipped.is_empty(), "{}: the skip is reported", kind.name);
        assert_eq!(
            run(&mut loader(kind, &dir, skip(3)), None).0,
            skipped_run,
            "{}: the same batches on any thread count",
            kind.name
        );
        // every sample but the skipped ones is delivered, with the bytes of the clean run
        let clean_rows: BTreeMap<u64, usize> = delivered(&clean);
        let got = delivered(&skipped_run);
        for id in clean_rows.keys() {
            let expected = usize::from(!skipped.contains(id));
            assert_eq!(
                got.get(id).copied().unwrap_or(0),
                expected,
                "{}: sample {id}",
                kind.name
            );
        }
        assert_eq!(
            clean.len(),
            skipped_run.len(),
            "{}: same batches",
            kind.name
        );
    }
}
