//! Golden fingerprints of whole epochs: a fixed set of image and token loaders (several seeds,
//! thread counts, world sizes, resume points, both error policies' happy path) must give exactly
//! the batches recorded in `tests/golden/batches.txt`, byte for byte.
//!
//! The file was recorded before the image and token engines were merged into one (issue #13), so
//! it pins that the merged engine keeps every promise of the two it replaced. Re-record only for
//! a deliberate change of output: `STOKEHOLD_BLESS=1 cargo test -p stokehold --test
//! golden_batches`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::stages::spec::{TransformSpec, build_columns};
use stokehold::{
    Batch, ColumnData, Loader, LoaderConfig, SequenceConfig, SequenceLoader, SequenceMode, Shuffle,
    Tail, TokenDataset,
};

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/batches.txt");

/// FNV-1a, 64 bits: stable across platforms and Rust versions.
#[derive(Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u64::from(x);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Everything a batch delivers: epoch, step, ids, padding flags, and each column's name, shape,
/// dtype and bytes (list columns: each value's bytes).
fn digest(batches: &[Batch]) -> String {
    let mut h = Fnv::new();
    for b in batches {
        h.u64(b.epoch);
        h.u64(b.step);
        for &id in &b.ids {
            h.u64(id);
        }
        for &p in &b.padding {
            h.u64(u64::from(p));
        }
        for (name, c) in &b.columns {
            h.bytes(name.as_bytes());
            match c {
                ColumnData::Fixed { dtype, shape, data }
                | ColumnData::Ragged {
                    dtype, shape, data, ..
                } => {
                    h.bytes(format!("{dtype:?}").as_bytes());
                    for &s in shape {
                        h.u64(s as u64);
                    }
                    h.bytes(data.as_bytes());
                }
                ColumnData::List(items) => {
                    for v in items {
                        h.bytes(format!("{v:?}").as_bytes());
                    }
                }
            }
        }
    }
    format!("{} batches {:016x}", batches.len(), h.0)
}

fn image_dataset(dir: &Path) -> Arc<Dataset> {
    let imgs = dir.join("imgs");
    stokehold_ingest::sample_data::write_image_folder(
        &imgs,
        stokehold_ingest::sample_data::SampleSpec {
            images: 40,
            classes: 3,
            width: 64,
            height: 48,
            quality: 85,
            seed: 11,
        },
    )
    .unwrap();
    let mut files: Vec<_> = walk(&imgs);
    files.sort();
    let schema = Schema::from_specs([("image", "image:jpeg"), ("label", "int64")]).unwrap();
    let path = dir.join("images");
    let opts = DatasetWriteOptions {
        target_shard_bytes: 16 << 10,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
    for (i, f) in files.iter().enumerate() {
        let bytes = std::fs::read(f).unwrap();
        w.write(&[
            FieldValue::Image(bytes.into()),
            FieldValue::Int64((i % 3) as i64),
        ])
        .unwrap();
    }
    w.finish().unwrap();
    Arc::new(Dataset::open(&path).unwrap())
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn token_dataset(dir: &Path) -> Arc<TokenDataset> {
    let schema = Schema::from_specs([("tokens", "bytes")]).unwrap();
    let path = dir.join("tokens");
    let opts = DatasetWriteOptions {
        target_shard_bytes: 4 << 10,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
    let mut g = 0u64;
    for i in 0..150u64 {
        let n = match i % 5 {
            0 => 0,
            1 => 1,
            _ => (i * 41) % 89 + 2,
        };
        let mut b = Vec::new();
        for _ in 0..n {
            b.extend_from_slice(&((g * 7919 % 30_011) as u16).to_le_bytes());
            g += 1;
        }
        w.write(&[FieldValue::Bytes(b.into())]).unwrap();
    }
    w.set_source(serde_json::json!({"kind": "test", "tokens": {
        "dtype": "u16", "vocab_size": 30_011, "total_tokens": g,
    }}));
    w.finish().unwrap();
    Arc::new(TokenDataset::open(Arc::new(Dataset::open(&path).unwrap())).unwrap())
}

fn image_specs(train: bool) -> BTreeMap<String, Vec<TransformSpec>> {
    let spec = |name: &str, params: serde_json::Value| TransformSpec {
        name: name.into(),
        params,
    };
    let stages = if train {
        vec![
            spec("random_resized_crop", serde_json::json!({"size": 24})),
            spec("random_horizontal_flip", serde_json::json!({})),
            spec("color_jitter", serde_json::json!({"brightness": 0.3})),
        ]
    } else {
        vec![
            spec("resize", serde_json::json!({"size": 20})),
            spec("center_crop", serde_json::json!({"size": 16})),
        ]
    };
    BTreeMap::from([("image".to_string(), stages)])
}

/// One image loader's epoch(s): `resume_after` batches, then a new loader from the state.
struct ImageCase {
    seed: u64,
    threads: usize,
    world: u32,
    rank: u32,
    shuffle: Shuffle,
    train: bool,
    drop_last: bool,
    epochs: u64,
    resume_after: Option<usize>,
}

fn image_run(ds: &Arc<Dataset>, c: &ImageCase) -> Vec<Batch> {
    let make = || {
        let cols = build_columns(ds.schema(), &image_specs(c.train), true, &mut |_| None).unwrap();
        let cfg = LoaderConfig {
            batch_size: 6,
            seed: c.seed,
            threads: c.threads,
            shuffle: c.shuffle,
            rank: c.rank,
            world_size: c.world,
            tail: if c.drop_last { Tail::Drop } else { Tail::Pad },
            ..LoaderConfig::default()
        };
        Loader::new(Arc::clone(ds), cols, cfg).unwrap()
    };
    let mut out = Vec::new();
    let mut l = make();
    for _ in 0..c.epochs {
        out.extend(l.iter().unwrap().map(Result::unwrap));
    }
    if let Some(k) = c.resume_after {
        let mut l = make();
        let state = {
            let mut it = l.iter().unwrap();
            for _ in 0..k {
                out.push(it.next().unwrap().unwrap());
            }
            it.state()
        };
        let mut r = make();
        r.load_state(&state).unwrap();
        out.extend(r.iter().unwrap().map(Result::unwrap));
    }
    out
}

struct TokenCase {
    mode: SequenceMode,
    seed: u64,
    threads: usize,
    world: u32,
    rank: u32,
    shuffle: bool,
    drop_last: bool,
    ids: bool,
    wide: bool,
    resume_after: Option<usize>,
}

fn token_run(data: &Arc<TokenDataset>, c: &TokenCase) -> Vec<Batch> {
    let make = || {
        let cfg = SequenceConfig {
            mode: c.mode,
            batch_size: 5,
            shuffle: if c.shuffle {
                Shuffle::Global
            } else {
                Shuffle::Sequential
            },
            seed: c.seed,
            rank: c.rank,
            world_size: c.world,
            tail: if c.drop_last { Tail::Drop } else { Tail::Pad },
            dtype: if c.wide {
                stokehold::format::DType::I64
            } else {
                stokehold::format::DType::I32
            },
            position_ids: c.ids,
            segment_ids: c.ids && matches!(c.mode, SequenceMode::Packed { .. }),
            threads: c.threads,
            prefetch: 3,
            cache_bytes: 0,
        };
        SequenceLoader::new(Arc::clone(data), cfg).unwrap()
    };
    let l = make();
    let mut out: Vec<Batch> = l.iter().unwrap().map(Result::unwrap).collect();
    out.extend(l.iter().unwrap().map(Result::unwrap));
    if let Some(k) = c.resume_after {
        let l = make();
        let mut it = l.iter().unwrap();
        for _ in 0..k {
            out.push(it.next().unwrap().unwrap());
        }
        drop(it);
        let state = l.state();
        let mut r = make();
        r.load_state(&state).unwrap();
        out.extend(r.iter().unwrap().map(Result::unwrap));
    }
    out
}

/// One case: its name and how to run it.
type Case = (
    String,
    Box<dyn Fn(&Arc<Dataset>, &Arc<TokenDataset>) -> Vec<Batch>>,
);

fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for seed in [0u64, 7] {
        for threads in [1usize, 3] {
            for (world, rank) in [(1u32, 0u32), (2, 1)] {
                for train in [true, false] {
                    let shuffle = if train {
                        Shuffle::Global
                    } else {
                        Shuffle::Sequential
                    };
                    let c = ImageCase {
                        seed,
                        threads,
                        world,
                        rank,
                        shuffle,
                        train,
                        drop_last: seed == 0,
                        epochs: 2,
                        resume_after: (threads == 3).then_some(2),
                    };
                    v.push((
                        format!("image seed={seed} world={world} rank={rank} train={train}"),
                        Box::new(move |ds, _| image_run(ds, &c)),
                    ));
                }
            }
        }
    }
    let c = ImageCase {
        seed: 3,
        threads: 2,
        world: 1,
        rank: 0,
        shuffle: Shuffle::ShardBlock { window: 2 },
        train: true,
        drop_last: true,
        epochs: 2,
        resume_after: Some(1),
    };
    v.push((
        "image shard_block seed=3".into(),
        Box::new(move |ds, _| image_run(ds, &c)),
    ));
    let modes = [
        ("packed16", SequenceMode::Packed { seq_len: 16 }),
        ("packed7", SequenceMode::Packed { seq_len: 7 }),
        (
            "documents",
            SequenceMode::Documents {
                max_len: 40,
                pad_id: 3,
                bucket: 1,
            },
        ),
        (
            "bucketed",
            SequenceMode::Documents {
                max_len: 64,
                pad_id: 0,
                bucket: 8,
            },
        ),
    ];
    for (mname, mode) in modes {
        for seed in [0u64, 9] {
            for threads in [1usize, 4] {
                for (world, rank) in [(1u32, 0u32), (3, 2)] {
                    let c = TokenCase {
                        mode,
                        seed,
                        threads,
                        world,
                        rank,
                        shuffle: seed != 0,
                        drop_last: world == 1,
                        ids: seed == 9,
                        wide: rank == 2,
                        resume_after: (threads == 4).then_some(3),
                    };
                    v.push((
                        format!("tokens {mname} seed={seed} world={world} rank={rank}"),
                        Box::new(move |_, t| token_run(t, &c)),
                    ));
                }
            }
        }
    }
    v
}

#[test]
fn every_loader_gives_the_recorded_batches() {
    let dir = tempfile::tempdir().unwrap();
    let images = image_dataset(dir.path());
    let tokens = token_dataset(dir.path());
    // Cases that differ only in threads or resume point must agree where they overlap: the
    // golden file holds one line per (case, threads, resume) and equal cases are checked equal.
    let mut got: Vec<String> = Vec::new();
    for (i, (name, run)) in cases().iter().enumerate() {
        got.push(format!("{i:03} {name}: {}", digest(&run(&images, &tokens))));
    }
    let text = got.join("\n") + "\n";
    if std::env::var_os("STOKEHOLD_BLESS").is_some() {
        std::fs::write(GOLDEN, &text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(GOLDEN).unwrap();
    let want: Vec<&str> = want.lines().collect();
    assert_eq!(
        want.len(),
        got.len(),
        "the golden file has another set of cases"
    );
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w, g, "batches differ from the recorded ones");
    }
}
