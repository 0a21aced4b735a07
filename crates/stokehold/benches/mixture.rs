//! Mixture benchmarks (`cargo bench -p stokehold --bench mixture`, or `make bench`), each a
//! ratio against a baseline measured in the same run:
//!
//! 1. planning the blended order: 10 M samples over 8 sources (walking the blend from its
//!    start, then the ids of all 10 M in batches, each source's permutation per pass), against
//!    the target of 0.5 s; the blend's memory is its marks, at most `MAX_MARKS` x sources counts.
//! 2. token windows (seq_len 2048, batch 32, int32, every core): a mixture of 3 token datasets
//!    against one dataset holding the same documents, same loader; epochs alternated, medians
//!    (target: >= 0.97).
//! 3. images (decode + RandomResizedCrop(224) + flip, batch 32, every core): a mixture of 3
//!    datasets against one holding the same records (copied from `STOKEHOLD_BENCH_SHARDS`,
//!    default `bench-data/inet-shards` as `make bench-data` makes it; skipped without it), same
//!    loader, alternated, medians (target: >= 0.97).
//!
//! Environment: `STOKEHOLD_BENCH_ONLY` (`planning,tokens,images`: the parts to run; default
//! all), `STOKEHOLD_BENCH_ROUNDS` (default 5), `STOKEHOLD_BENCH_IMAGES` (records copied,
//! default 3000), `STOKEHOLD_BENCH_TOKENS` (millions of tokens, default 24),
//! `STOKEHOLD_BENCH_CONTROL` (tokens: `1` mixes the whole dataset as one source, `3` as three
//! copies: the mixture's own cost without the split), `STOKEHOLD_BENCH_NO_SOURCE=1` (no source
//! column). `STOKEHOLD_BENCH_ONLY=fetch` (alone): a task's fetch of 32 windows in one call against
//! three calls for the same windows (what three sources cost a batch).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use stokehold::blend::{Blend, BlendDef, BlendSource, MAX_MARKS, Phase, quantize};
use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::{EngineSpec, Loader, Shuffle};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn planning() {
    let lens: Vec<u64> = (0..8u64).map(|i| 200_000 + i * 1_234_567).collect();
    let weights = [0.30, 0.20, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03];
    let def = BlendDef {
        sources: lens
            .iter()
            .enumerate()
            .map(|(i, &len)| BlendSource {
                name: format!("source-{i}"),
                len,
                blocks: None,
            })
            .collect(),
        phases: vec![
            Phase {
                start: 0,
                weights: quantize(&weights).unwrap(),
            },
            Phase {
                start: 6_000_000,
                weights: quantize(&[1.0; 8]).unwrap(),
            },
        ],
        origin: 0,
        base: vec![0; 8],
        epoch_len: 10_000_000,
        shuffle: Shuffle::Global,
        seed: 1,
    };
    let n = 10_000_000u64;
    let t0 = Instant::now();
    let walk = Blend::new(def.clone()).unwrap().counts_at(n);
    let walked = t0.elapsed();
    assert_eq!(walk.iter().sum::<u64>(), n);
    let blend = Blend::new(def).unwrap();
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(1024);
    let mut check = 0u64;
    for start in (0..n).step_by(1024) {
        ids.clear();
        blend.ids(start..(start + 1024).min(n), &mut ids);
        check = check.wrapping_add(ids[0]);
    }
    let all = t0.elapsed();
    // the baseline: one dataset of 10 M samples, its global order's ids
    let order = stokehold::sampler::EpochOrder::new(n, None, &Shuffle::Global, 1, 0).unwrap();
    let t0 = Instant::now();
    for p in 0..n {
        check = check.wrapping_add(order.id_at(p).unwrap_or(0));
    }
    let single = t0.elapsed();
    std::hint::black_box(check);
    println!(
        "planning    10,000,000 samples over 8 sources (a change of weights at 6 M): the blend \
         planned (each sample's source and its index in the source) in {:.3} s (target <= 0.5 s); \
         every id with each source's permutation per pass, in batches of 1,024, {:.3} s, against \
         {:.3} s for the ids of one dataset of 10 M in a global shuffle ({:.2}x); memory: at most \
         {} marks x 8 sources x 8 bytes = {} KiB, whatever the length",
        walked.as_secs_f64(),
        all.as_secs_f64(),
        single.as_secs_f64(),
        all.as_secs_f64() / single.as_secs_f64(),
        MAX_MARKS,
        MAX_MARKS * 8 * 8 / 1024
    );
}

/// Alternate `one` and `mix`, `epochs` epochs each time, `rounds` times; samples per second of
/// each, medians.
fn compare(one: &mut Loader, mix: &mut Loader, rounds: usize, epochs: usize) -> (f64, f64) {
    let epoch = |l: &mut Loader| -> f64 {
        let t0 = Instant::now();
        let mut n = 0usize;
        for _ in 0..epochs {
            for b in l.iter().unwrap() {
                n += b.unwrap().len();
            }
        }
        n as f64 / t0.elapsed().as_secs_f64()
    };
    // one warm-up epoch each (page cache, buffers)
    epoch(one);
    epoch(mix);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        a.push(epoch(one));
        b.push(epoch(mix));
    }
    (median(a), median(b))
}

fn spec(json: serde_json::Value) -> EngineSpec {
    EngineSpec::from_json(&json.to_string()).unwrap()
}

fn loaders(base: serde_json::Value, one: &Path, parts: &[PathBuf]) -> (Loader, Loader) {
    let one_ds = Arc::new(Dataset::open(one).unwrap());
    let single = spec(base.clone())
        .build(one_ds, Default::default(), &mut |_| None)
        .unwrap()
        .loader;
    let mut mixed = base;
    mixed["mixture"] = serde_json::json!({
        "sources": parts.iter().enumerate().map(|(i, p)| serde_json::json!({
            "name": format!("part{i}"), "path": p.to_string_lossy(),
        })).collect::<Vec<_>>(),
        "schedule": [{"at": 0, "weights": []}],
        "source_column": std::env::var("STOKEHOLD_BENCH_NO_SOURCE").is_err(),
    });
    let datasets = parts
        .iter()
        .map(|p| Arc::new(Dataset::open(p).unwrap()))
        .collect();
    let mixture = spec(mixed)
        .build_mixture(datasets, Default::default(), &mut |_| None)
        .unwrap()
        .loader;
    (single, mixture)
}

fn tokens(tmp: &Path, rounds: usize) {
    let millions = env("STOKEHOLD_BENCH_TOKENS", 24);
    let total = millions as u64 * 1_000_000;
    // documents of 50..4,000 tokens, ids below 50,000; one dataset, and three of its parts
    let mut docs: Vec<Vec<u8>> = Vec::new();
    let (mut x, mut n) = (0x9e37_79b9_7f4a_7c15u64, 0u64);
    while n < total {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = 50 + x % 3950;
        let mut b = Vec::with_capacity(len as usize * 2);
        for k in 0..len {
            b.extend_from_slice(&(((x >> 20) + k * 7919) % 50_000).to_le_bytes()[..2]);
        }
        n += len;
        docs.push(b);
    }
    let write = |path: &Path, docs: &[Vec<u8>]| {
        let schema = Schema::from_specs([("tokens", "bytes")]).unwrap();
        let mut w = DatasetWriter::create(path, schema, DatasetWriteOptions::default()).unwrap();
        let mut t = 0u64;
        for d in docs {
            w.write(&[FieldValue::Bytes(Cow::Borrowed(d))]).unwrap();
            t += d.len() as u64 / 2;
        }
        w.set_source(serde_json::json!({"kind": "bench", "tokens": {
            "dtype": "u16", "vocab_size": 50_000, "total_tokens": t,
        }}));
        w.finish().unwrap();
    };
    let one = tmp.join("tokens-one");
    write(&one, &docs);
    let cut = [0, docs.len() / 2, docs.len() * 4 / 5, docs.len()];
    let parts: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = tmp.join(format!("tokens-part{i}"));
            write(&p, &docs[cut[i]..cut[i + 1]]);
            p
        })
        .collect();
    let base = serde_json::json!({
        "loader": {"batch_size": 32, "seed": 3, "threads": 0, "prefetch": 8},
        "samples": {"kind": "tokens", "mode": {"kind": "packed", "seq_len": 2048}, "dtype": "i32",
                    "position_ids": false, "segment_ids": false},
    });
    // STOKEHOLD_BENCH_CONTROL=1: a mixture of one source, the whole dataset (the machinery alone)
    let parts = match env("STOKEHOLD_BENCH_CONTROL", 0) {
        1 => vec![one.clone()],
        3 => vec![one.clone(), one.clone(), one.clone()],
        _ => parts,
    };
    let (mut a, mut b) = loaders(base, &one, &parts);
    // an epoch takes a few tens of ms: several per measurement
    let (x, y) = compare(&mut a, &mut b, rounds, 8);
    println!(
        "tokens      {} M tokens, windows of 2048 x 32, {} threads: one dataset {:.0} windows/s, \
         a mixture of its 3 parts {:.0} windows/s: {:.3}x (target >= 0.97; medians of {rounds} \
         alternated runs of 8 epochs)",
        millions,
        a.threads(),
        x,
        y,
        y / x
    );
}

/// Diagnostic (`STOKEHOLD_BENCH_ONLY=fetch`): the cost of a task's fetch as one call for 32
/// windows against three calls for the same windows split in three (what a mixture of three
/// sources does per batch).
fn fetch_calls(tmp: &Path) {
    use stokehold::samples::TaskIo;
    let path = tmp.join("fetch-tokens");
    let schema = Schema::from_specs([("tokens", "bytes")]).unwrap();
    let mut w = DatasetWriter::create(&path, schema, DatasetWriteOptions::default()).unwrap();
    let doc: Vec<u8> = (0..4000u32)
        .flat_map(|i| ((i % 50_000) as u16).to_le_bytes())
        .collect();
    for _ in 0..6000 {
        w.write(&[FieldValue::Bytes(Cow::Borrowed(&doc))]).unwrap();
    }
    w.set_source(serde_json::json!({"kind": "bench", "tokens": {
        "dtype": "u16", "vocab_size": 50_000, "total_tokens": 6000u64 * 4000,
    }}));
    w.finish().unwrap();
    let spec = spec(serde_json::json!({
        "loader": {"batch_size": 32},
        "samples": {"kind": "tokens", "mode": {"kind": "packed", "seq_len": 2048}, "dtype": "i32",
                    "position_ids": false, "segment_ids": false},
    }));
    let l = spec
        .build(
            Arc::new(Dataset::open(&path).unwrap()),
            Default::default(),
            &mut |_| None,
        )
        .unwrap()
        .loader;
    let samples = l.samples();
    let n = samples.len();
    let mut io = TaskIo::new(true);
    let mut ios = [TaskIo::new(true), TaskIo::new(true), TaskIo::new(true)];
    let mut x = 12345u64;
    let mut ids = vec![0u64; 32];
    let iters = 20_000;
    for round in 0..3 {
        let t0 = Instant::now();
        for _ in 0..iters {
            for id in &mut ids {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *id = (x >> 33) % n;
            }
            io.fetch(&**samples, &ids);
        }
        let one = t0.elapsed();
        let t0 = Instant::now();
        for _ in 0..iters {
            for id in &mut ids {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                *id = (x >> 33) % n;
            }
            ios[0].fetch(&**samples, &ids[..16]);
            ios[1].fetch(&**samples, &ids[16..26]);
            ios[2].fetch(&**samples, &ids[26..]);
        }
        let three = t0.elapsed();
        println!(
            "fetch       round {round}: 32 windows in one call {:.2} us, in three calls {:.2} us \
             a batch ({:.2} us more)",
            one.as_secs_f64() * 1e6 / iters as f64,
            three.as_secs_f64() * 1e6 / iters as f64,
            (three.as_secs_f64() - one.as_secs_f64()) * 1e6 / iters as f64
        );
    }
}

fn images(tmp: &Path, rounds: usize) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let src = std::env::var("STOKEHOLD_BENCH_SHARDS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("bench-data/inet-shards"));
    let Ok(ds) = Dataset::open(&src) else {
        println!(
            "images      skipped: no dataset at {} (make bench-data makes it, or set \
             STOKEHOLD_BENCH_SHARDS)",
            src.display()
        );
        return;
    };
    let n = (env("STOKEHOLD_BENCH_IMAGES", 3000) as u64).min(ds.len());
    let write = |path: &Path, range: std::ops::Range<u64>| {
        let mut w =
            DatasetWriter::create(path, ds.schema().clone(), DatasetWriteOptions::default())
                .unwrap();
        for i in range {
            w.write(&ds.get(i).unwrap()).unwrap();
        }
        w.finish().unwrap();
    };
    let one = tmp.join("images-one");
    write(&one, 0..n);
    let cut = [0, n / 2, n * 4 / 5, n];
    let parts: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = tmp.join(format!("images-part{i}"));
            write(&p, cut[i]..cut[i + 1]);
            p
        })
        .collect();
    let field = ds
        .schema()
        .fields
        .iter()
        .find(|f| matches!(f.ty, stokehold::format::FieldType::Image { .. }))
        .expect("an image field")
        .name
        .clone();
    let base = serde_json::json!({
        "loader": {"batch_size": 32, "seed": 3, "threads": 0, "prefetch": 8},
        "samples": {"kind": "records", "transforms": {field: [
            {"name": "random_resized_crop", "params": {"size": 224}},
            {"name": "random_horizontal_flip"},
        ]}},
    });
    let (mut a, mut b) = loaders(base, &one, &parts);
    let (x, y) = compare(&mut a, &mut b, rounds, 1);
    println!(
        "images      {n} JPEGs of {}, decode + RandomResizedCrop(224) + flip, {} threads: one \
         dataset {:.0} images/s, a mixture of its 3 parts {:.0} images/s: {:.3}x (target >= \
         0.97; medians of {rounds} alternated epochs)",
        src.display(),
        a.threads(),
        x,
        y,
        y / x
    );
}

fn main() {
    let rounds = env("STOKEHOLD_BENCH_ROUNDS", 5);
    let tmp = tempfile::tempdir().unwrap();
    let only = std::env::var("STOKEHOLD_BENCH_ONLY").unwrap_or_default();
    let run = |part: &str| only.is_empty() || only.split(',').any(|p| p == part);
    if run("planning") {
        planning();
    }
    if run("tokens") {
        tokens(tmp.path(), rounds);
    }
    if only == "fetch" {
        fetch_calls(tmp.path());
    }
    if run("images") {
        images(tmp.path(), rounds);
    }
}
