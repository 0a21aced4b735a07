//! Resume anywhere: the standing test of the first class of issue #14 ("every per-epoch count
//! must survive a resume"). For random configurations (threads, prefetch, world size, rank, tail,
//! order, the RAM cache, the skip policy with a bound that the run may or may not cross) over a
//! dataset where a deterministic set of samples fails, a state taken after any batch resumes
//! into exactly the rest of the uninterrupted run: the same batches, and the same verdict of the
//! skip policy (a run that completes completes; one that stops stops at the same batch).

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::{
    Budget, Column, ColumnData, ErrorPolicy, Loader, LoaderConfig, Shuffle, Tail, from_fn,
};

/// `n` samples over shards of about 1 KiB: `x` = id, `blob` = id-dependent bytes.
fn dataset(dir: &Path, n: u64) -> Arc<Dataset> {
    let path = dir.join(format!("ds-{n}"));
    if !path.exists() {
        let schema = Schema::from_specs([("x", "int64"), ("blob", "bytes")]).unwrap();
        let opts = DatasetWriteOptions {
            target_shard_bytes: 1024,
            ..DatasetWriteOptions::default()
        };
        let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
        for i in 0..n {
            let blob: Vec<u8> = (0..(i % 17)).map(|k| (i * 3 + k) as u8).collect();
            w.write(&[
                FieldValue::Int64(i as i64),
                FieldValue::Bytes(Cow::Owned(blob)),
            ])
            .unwrap();
        }
        w.finish().unwrap();
    }
    Arc::new(Dataset::open(&path).unwrap())
}

/// `x` through a stage that fails on the samples with `id % every == 3`, plus a random number
/// from the sample's generator (so augmentations are compared too); `blob` passed through.
fn columns(ds: &Dataset, every: u64) -> Vec<Column> {
    let mut cols = Column::all(ds.schema()).unwrap();
    let stage = from_fn("flaky", move |v, ctx| match v {
        FieldValue::Int64(x) if x as u64 % every == 3 => Err(format!("sample {x} fails").into()),
        FieldValue::Int64(x) => Ok(FieldValue::Int64(x ^ (ctx.rng.next_u64() >> 40) as i64)),
        other => Err(format!("unexpected {other:?}").into()),
    });
    cols[0] = Column::fixed("x", vec![stage], stokehold::format::DType::I64, vec![]);
    cols
}

type Plain = (Vec<u64>, Vec<bool>, Vec<Vec<u8>>);

/// A run: its batches, and whether it ended in an error (the policy's verdict).
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

#[derive(Debug, Clone)]
struct Case {
    n: u64,
    every: u64,
    batch: u32,
    world: u32,
    rank: u32,
    tail: Tail,
    shuffle: Shuffle,
    threads: usize,
    resume_threads: usize,
    prefetch: usize,
    cache: bool,
    policy: ErrorPolicy,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (40u64..160, 5u64..40, 1u32..9, 1u32..4),
        (
            0u32..4,
            any::<bool>(),
            0u8..3,
            1usize..4,
            1usize..4,
            1usize..4,
        ),
        (any::<bool>(), 0u8..3, 0u64..4),
    )
        .prop_map(
            |(
                (n, every, batch, world),
                (rank, pad, order, threads, resume_threads, prefetch),
                (cache, policy, consecutive),
            )| Case {
                n,
                every,
                batch,
                world,
                rank: rank % world,
                tail: if pad { Tail::Pad } else { Tail::Drop },
                shuffle: match order {
                    0 => Shuffle::Sequential,
                    1 => Shuffle::Global,
                    _ => Shuffle::ShardBlock { window: 2 },
                },
                threads,
                resume_threads,
                prefetch,
                cache,
                policy: match policy {
                    0 => ErrorPolicy::Fail,
                    // a budget the failures (1 in `every`) may or may not exceed
                    1 => ErrorPolicy::Skip {
                        max_fraction: 0.03,
                        max_consecutive: 1 + consecutive,
                    },
                    _ => ErrorPolicy::skip(),
                },
            },
        )
}

fn config(c: &Case, threads: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: c.batch,
        seed: 9,
        shuffle: c.shuffle,
        tail: c.tail,
        rank: c.rank,
        world_size: c.world,
        threads,
        prefetch: c.prefetch,
        on_error: c.policy,
        cache_bytes: Budget::bytes(if c.cache { 1 << 20 } else { 0 }),
        prepare_next_epoch: false,
        ..LoaderConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn a_state_taken_after_any_batch_resumes_into_exactly_the_rest(c in case()) {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), c.n);
        let make = |threads| {
            Loader::new(ds.clone(), columns(&ds, c.every), config(&c, threads)).unwrap()
        };
        let (full, failed) = run(&mut make(c.threads), None);
        // after the last batch of a completed epoch the state is the next epoch's start
        let last = if failed { full.len() } else { full.len().saturating_sub(1) };
        for k in 0..=last {
            let mut a = make(c.threads);
            let (head, _) = run(&mut a, Some(k));
            prop_assert_eq!(&head[..], &full[..k]);
            let state = stokehold::ResumeState::from_json(&a.state().to_json()).unwrap();
            let mut b = make(c.resume_threads);
            b.load_state(&state).unwrap();
            let (rest, rest_failed) = run(&mut b, None);
            prop_assert_eq!(&rest[..], &full[k..], "resumed after {} batches", k);
            // the same verdict: a resumed run accepts exactly what the uninterrupted run does
            prop_assert_eq!(rest_failed, failed, "resumed after {} batches", k);
        }
    }
}
