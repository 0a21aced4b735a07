//! The sequence loader over token datasets: windows, labels, document boundaries, order, ranks,
//! resume, thread-count independence, document mode and damage.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use stokehold::format::{
    Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, FormatError, OpenOptions, Schema,
};
use stokehold::{
    Batch, ColumnData, EngineError, SequenceConfig, SequenceLoader, SequenceMode, Shuffle, Tail,
    TokenDataset,
};

/// Token `g` of the stream is `g % MOD`, so every value says where it came from.
const MOD: u64 = 50_000;

/// Document lengths: varied, with empty and one-token documents.
fn lengths(n: usize) -> Vec<u64> {
    (0..n as u64)
        .map(|i| match i % 7 {
            0 => 0,
            1 => 1,
            2 => 300,
            _ => (i * 37) % 97 + 2,
        })
        .collect()
}

fn write(path: &Path, lens: &[u64], u32_tokens: bool) -> Arc<TokenDataset> {
    let schema = Schema::from_specs([("tokens", "bytes")]).unwrap();
    let opts = DatasetWriteOptions {
        target_shard_bytes: 4 << 10,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(path, schema, opts).unwrap();
    let mut g = 0u64;
    for &n in lens {
        let mut b = Vec::new();
        for _ in 0..n {
            let v = g % MOD;
            if u32_tokens {
                b.extend_from_slice(&(v as u32 + 70_000).to_le_bytes());
            } else {
                b.extend_from_slice(&(v as u16).to_le_bytes());
            }
            g += 1;
        }
        w.write(&[FieldValue::Bytes(b.into())]).unwrap();
    }
    w.set_source(serde_json::json!({"kind": "test", "tokens": {
        "dtype": if u32_tokens { "u32" } else { "u16" },
        "vocab_size": if u32_tokens { 120_000 } else { MOD },
        "total_tokens": g,
    }}));
    w.finish().unwrap();
    open(path, OpenOptions::default())
}

fn open(path: &Path, o: OpenOptions) -> Arc<TokenDataset> {
    Arc::new(TokenDataset::open(Arc::new(Dataset::open_with(path, o).unwrap())).unwrap())
}

fn cfg(seq_len: u32, batch: u32) -> SequenceConfig {
    SequenceConfig {
        mode: SequenceMode::Packed { seq_len },
        batch_size: batch,
        shuffle: Shuffle::Global,
        seed: 5,
        threads: 3,
        prefetch: 3,
        ..SequenceConfig::default()
    }
}

fn col(b: &Batch, name: &str) -> Vec<Vec<i64>> {
    let Some(ColumnData::Fixed { dtype, shape, data }) = b.column(name) else {
        panic!("no fixed column {name}")
    };
    let (rows, t) = (shape[0], shape[1]);
    let flat: Vec<i64> = match dtype.size() {
        4 => bytemuck::cast_slice::<u8, i32>(data.as_bytes())
            .iter()
            .map(|&v| i64::from(v))
            .collect(),
        _ => bytemuck::cast_slice::<u8, i64>(data.as_bytes()).to_vec(),
    };
    assert_eq!(flat.len(), rows * t);
    flat.chunks(t).map(<[i64]>::to_vec).collect()
}

fn run(l: &SequenceLoader) -> Vec<Batch> {
    l.iter().unwrap().collect::<Result<_, _>>().unwrap()
}

fn rows(batches: &[Batch], name: &str) -> Vec<Vec<i64>> {
    batches.iter().flat_map(|b| col(b, name)).collect()
}

#[test]
fn windows_cover_the_stream_once_with_shifted_labels_and_boundary_ids() {
    let dir = tempfile::tempdir().unwrap();
    let lens = lengths(200);
    let data = write(&dir.path().join("ds"), &lens, false);
    let total = data.total_tokens();
    assert_eq!(total, lens.iter().sum::<u64>());
    let t = 64u32;
    let windows = (total - 1) / u64::from(t);
    let mut c = cfg(t, 4);
    c.position_ids = true;
    c.segment_ids = true;
    c.tail = Tail::Pad;
    let l = SequenceLoader::new(Arc::clone(&data), c).unwrap();
    assert_eq!(l.samples(), windows);
    let batches = run(&l);
    let ids: Vec<u64> = batches.iter().flat_map(|b| b.ids.clone()).collect();
    let padding: Vec<bool> = batches.iter().flat_map(|b| b.padding.clone()).collect();
    let real: Vec<u64> = ids
        .iter()
        .zip(&padding)
        .filter(|(_, p)| !**p)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(real.len() as u64, windows);
    assert_eq!(
        real.iter().copied().collect::<BTreeSet<_>>(),
        (0..windows).collect()
    );
    assert_ne!(real, (0..windows).collect::<Vec<_>>(), "shuffled");
    // Document starts, for the boundary checks.
    let starts: Vec<u64> = (0..data.documents()).map(|d| data.doc_start(d)).collect();
    let (inp, lab, pos, seg) = (
        rows(&batches, "input_ids"),
        rows(&batches, "labels"),
        rows(&batches, "position_ids"),
        rows(&batches, "segment_ids"),
    );
    for (r, &w) in ids.iter().enumerate() {
        let s = w * u64::from(t);
        let mut last_start = s;
        let mut segment = 0;
        for i in 0..t as usize {
            let g = s + i as u64;
            assert_eq!(inp[r][i] as u64, g % MOD, "window {w} input {i}");
            assert_eq!(lab[r][i] as u64, (g + 1) % MOD, "window {w} label {i}");
            if i > 0 && starts.binary_search(&g).is_ok() && data.doc_len(data.document_of(g)) > 0 {
                last_start = g;
                segment += 1;
            }
            assert_eq!(pos[r][i] as u64, g - last_start, "window {w} position {i}");
            assert_eq!(seg[r][i], segment, "window {w} segment {i}");
        }
    }
}

#[test]
fn output_is_the_same_for_any_thread_count_and_prefetch_and_epochs_differ() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(&dir.path().join("ds"), &lengths(150), false);
    let mut outs = Vec::new();
    for (threads, prefetch) in [(1, 1), (2, 5), (4, 2)] {
        let mut c = cfg(32, 3);
        c.threads = threads;
        c.prefetch = prefetch;
        c.dtype = stokehold::format::DType::I64;
        let l = SequenceLoader::new(Arc::clone(&data), c).unwrap();
        outs.push(rows(&run(&l), "input_ids"));
        assert_eq!(l.epoch(), 1);
        let second = rows(&run(&l), "input_ids");
        assert_ne!(outs.last().unwrap(), &second);
    }
    assert_eq!(outs[0], outs[1]);
    assert_eq!(outs[0], outs[2]);
}

#[test]
fn ranks_are_disjoint_and_cover_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(&dir.path().join("ds"), &lengths(300), false);
    let world = 3;
    let mut all = Vec::new();
    for rank in 0..world {
        let mut c = cfg(16, 5);
        c.rank = rank;
        c.world_size = world;
        let l = SequenceLoader::new(Arc::clone(&data), c).unwrap();
        all.extend(run(&l).iter().flat_map(|b| b.ids.clone()));
    }
    let n = SequenceLoader::new(Arc::clone(&data), cfg(16, 5))
        .unwrap()
        .samples();
    let step = u64::from(world) * 5;
    assert_eq!(all.len() as u64, n / step * step, "tail dropped");
    assert_eq!(all.iter().collect::<BTreeSet<_>>().len(), all.len());
}

#[test]
fn resume_mid_epoch_gives_the_exact_suffix_on_any_world_size() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(&dir.path().join("ds"), &lengths(300), false);
    let full = SequenceLoader::new(Arc::clone(&data), cfg(16, 4)).unwrap();
    let reference = rows(&run(&full), "input_ids");
    // Stop after 5 batches.
    let l = SequenceLoader::new(Arc::clone(&data), cfg(16, 4)).unwrap();
    let mut it = l.iter().unwrap();
    let first: Vec<Batch> = (0..5).map(|_| it.next().unwrap().unwrap()).collect();
    drop(it);
    let state = l.state();
    assert_eq!(state.position, 20);
    let json = state.to_json();
    let mut resumed = SequenceLoader::new(Arc::clone(&data), cfg(16, 4)).unwrap();
    resumed
        .load_state(&stokehold::ResumeState::from_json(&json).unwrap())
        .unwrap();
    let mut got = rows(&first, "input_ids");
    got.extend(rows(&run(&resumed), "input_ids"));
    assert_eq!(got, reference);
    // Two ranks resume the same state and split the rest of the epoch between them.
    let mut rest = BTreeSet::new();
    let mut count = 0;
    for rank in 0..2 {
        let mut c = cfg(16, 2);
        c.rank = rank;
        c.world_size = 2;
        let mut r = SequenceLoader::new(Arc::clone(&data), c).unwrap();
        r.load_state(&state).unwrap();
        for row in rows(&run(&r), "input_ids") {
            rest.insert(row);
            count += 1;
        }
    }
    let want: BTreeSet<_> = reference[20..].iter().cloned().collect();
    assert_eq!(count, rest.len());
    assert_eq!(rest, want);
    // A state of another seq_len is refused.
    let mut other = SequenceLoader::new(Arc::clone(&data), cfg(32, 4)).unwrap();
    let e = other.load_state(&state).unwrap_err();
    assert!(
        matches!(
            e,
            EngineError::IncompatibleResume {
                field: "dataset",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn documents_mode_pads_masks_truncates_and_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let lens = lengths(120);
    let data = write(&dir.path().join("ds"), &lens, true);
    let max_len = 40u32;
    let mut c = cfg(1, 6);
    c.mode = SequenceMode::Documents {
        max_len,
        pad_id: 7,
        bucket: 1,
    };
    c.position_ids = true;
    c.tail = Tail::Pad;
    let l = SequenceLoader::new(Arc::clone(&data), c.clone()).unwrap();
    let batches = run(&l);
    for b in &batches {
        let (inp, lab, mask) = (
            col(b, "input_ids"),
            col(b, "labels"),
            col(b, "attention_mask"),
        );
        let t = inp[0].len();
        let want_t = b
            .ids
            .iter()
            .map(|&d| {
                data.doc_len(d)
                    .min(u64::from(max_len) + 1)
                    .saturating_sub(1)
            })
            .max()
            .unwrap()
            .max(1) as usize;
        assert_eq!(t, want_t);
        for (r, &d) in b.ids.iter().enumerate() {
            let n = data
                .doc_len(d)
                .min(u64::from(max_len) + 1)
                .saturating_sub(1) as usize;
            let s = data.doc_start(d);
            for i in 0..t {
                if i < n {
                    assert_eq!(inp[r][i] as u64, (s + i as u64) % MOD + 70_000);
                    assert_eq!(lab[r][i] as u64, (s + i as u64 + 1) % MOD + 70_000);
                    assert_eq!(mask[r][i], 1);
                } else {
                    assert_eq!((inp[r][i], lab[r][i], mask[r][i]), (7, -100, 0));
                }
            }
        }
    }
    let seen: BTreeSet<u64> = batches.iter().flat_map(|b| b.ids.clone()).collect();
    assert_eq!(seen, (0..data.documents()).collect());
    // Bucketing: same documents, batches of similar lengths, deterministic.
    c.mode = SequenceMode::Documents {
        max_len,
        pad_id: 7,
        bucket: 60,
    };
    let bucketed = |threads| {
        let mut c = c.clone();
        c.threads = threads;
        let l = SequenceLoader::new(Arc::clone(&data), c).unwrap();
        run(&l)
            .iter()
            .map(|b| b.ids.clone())
            .collect::<Vec<Vec<u64>>>()
    };
    let a = bucketed(1);
    assert_eq!(a, bucketed(3));
    let seen: BTreeSet<u64> = a.iter().flatten().copied().collect();
    assert_eq!(seen, (0..data.documents()).collect());
    let spread = |ids: &[Vec<u64>]| -> u64 {
        ids.iter()
            .map(|b| {
                let l: Vec<u64> = b.iter().map(|&d| data.doc_len(d)).collect();
                l.iter().max().unwrap() - l.iter().min().unwrap()
            })
            .sum()
    };
    let plain: Vec<Vec<u64>> = batches.iter().map(|b| b.ids.clone()).collect();
    assert!(
        spread(&a) < spread(&plain),
        "{} vs {}",
        spread(&a),
        spread(&plain)
    );
}

#[test]
fn a_damaged_token_record_is_a_typed_error_naming_shard_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let data = write(&path, &lengths(100), false);
    // Damage the field table of document 9 (300 tokens), not its checksum-covered... (both).
    let ds = data.dataset();
    let (k, local) = ds.locate(9).unwrap();
    let e = ds.shards()[k].entry(local);
    let file = ds.shards()[k].path().to_path_buf();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[e.offset as usize] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();
    for verify in [true, false] {
        let data = open(
            &path,
            OpenOptions {
                verify_records: verify,
                ..OpenOptions::default()
            },
        );
        let mut c = cfg(16, 4);
        c.shuffle = Shuffle::Sequential;
        let l = SequenceLoader::new(data, c).unwrap();
        let err = l
            .iter()
            .unwrap()
            .find_map(Result::err)
            .expect("the damaged record fails");
        let EngineError::Sample { id, source } = &err else {
            panic!("{err}")
        };
        assert_eq!(*id, 9);
        match source {
            FormatError::Checksum { path, what, .. } | FormatError::Corrupt { path, what, .. } => {
                assert_eq!(path, &file);
                assert!(what.contains(&format!("record {local}")), "{what}");
            }
            other => panic!("{other}"),
        }
        assert_eq!(
            verify,
            matches!(source, FormatError::Checksum { .. }),
            "{source}"
        );
    }
}

#[test]
fn non_token_datasets_and_bad_configs_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::from_specs([("x", "int64")]).unwrap();
    let mut w = DatasetWriter::create(dir.path().join("x"), schema, Default::default()).unwrap();
    w.write(&[FieldValue::Int64(1)]).unwrap();
    w.finish().unwrap();
    let ds = Arc::new(Dataset::open(dir.path().join("x")).unwrap());
    let e = TokenDataset::open(ds).unwrap_err();
    assert!(e.to_string().contains("not a token dataset"), "{e}");
    let data = write(&dir.path().join("ds"), &lengths(20), false);
    let mut c = cfg(0, 2);
    assert!(SequenceLoader::new(Arc::clone(&data), c.clone()).is_err());
    c.mode = SequenceMode::Packed { seq_len: 8 };
    c.dtype = stokehold::format::DType::F32;
    assert!(SequenceLoader::new(Arc::clone(&data), c.clone()).is_err());
    c.dtype = stokehold::format::DType::I32;
    c.rank = 2;
    c.world_size = 2;
    assert!(SequenceLoader::new(data, c).is_err());
}

#[test]
fn tokenize_stage_gives_padded_fixed_ids_or_variable_lists() {
    use std::collections::BTreeMap;
    use stokehold::stages::spec::{TransformSpec, build_columns};
    use stokehold::{Loader, LoaderConfig};
    use stokehold_ops::text::{synthetic_documents, train_word_level};

    let dir = tempfile::tempdir().unwrap();
    let docs = synthetic_documents(40, 9);
    let tok = train_word_level(&docs, 2000).unwrap();
    let tp = dir.path().join("tokenizer.json");
    std::fs::write(&tp, tok.inner().to_string(false).unwrap()).unwrap();
    let schema = Schema::from_specs([("text", "string")]).unwrap();
    let mut w = DatasetWriter::create(dir.path().join("ds"), schema, Default::default()).unwrap();
    for d in &docs {
        w.write(&[FieldValue::String(d.clone().into())]).unwrap();
    }
    w.finish().unwrap();
    let ds = Arc::new(Dataset::open(dir.path().join("ds")).unwrap());
    let eos = tok.token_id("</s>").unwrap();
    let pad = tok.token_id("<pad>").unwrap();
    for max_length in [Some(24u64), None] {
        let spec = TransformSpec {
            name: "tokenize".into(),
            params: serde_json::json!({
                "tokenizer": tp.to_str().unwrap(), "max_length": max_length,
                "dtype": "int64", "eos": "</s>",
            }),
        };
        let specs = BTreeMap::from([("text".to_string(), vec![spec])]);
        let cols = build_columns(ds.schema(), &specs, false, &mut |_| None).unwrap();
        let config = LoaderConfig {
            batch_size: 8,
            shuffle: Shuffle::Sequential,
            ..LoaderConfig::default()
        };
        let mut l = Loader::new(Arc::clone(&ds), cols, config).unwrap();
        let batches: Vec<Batch> = l.iter().unwrap().collect::<Result<_, _>>().unwrap();
        for b in &batches {
            for (r, &id) in b.ids.iter().enumerate() {
                let mut want = tok.encode(&docs[id as usize]).unwrap();
                want.push(eos);
                let got: Vec<i64> = match b.column("text").unwrap() {
                    ColumnData::Fixed { shape, data, .. } => {
                        assert_eq!(shape, &[8, 24]);
                        bytemuck::cast_slice::<u8, i64>(data.as_bytes())[r * 24..(r + 1) * 24]
                            .to_vec()
                    }
                    ColumnData::Ragged { .. } => panic!("not a ragged column"),
                    ColumnData::List(items) => match &items[r] {
                        FieldValue::Array(a) => a
                            .data
                            .chunks_exact(8)
                            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                            .collect(),
                        other => panic!("{}", other.kind()),
                    },
                };
                if max_length.is_some() {
                    want.truncate(24);
                    want.resize(24, pad);
                }
                let want: Vec<i64> = want.into_iter().map(i64::from).collect();
                assert_eq!(got, want, "sample {id}");
            }
        }
    }
    // A missing tokenizer is a configuration error naming the file.
    let spec = TransformSpec {
        name: "tokenize".into(),
        params: serde_json::json!({"tokenizer": "/nope/tokenizer.json"}),
    };
    let specs = BTreeMap::from([("text".to_string(), vec![spec])]);
    let e = build_columns(ds.schema(), &specs, false, &mut |_| None).unwrap_err();
    assert!(e.to_string().contains("/nope/tokenizer.json"), "{e}");
}

#[test]
fn windows_inside_a_document_longer_than_the_verify_limit_read_only_their_tokens() {
    let dir = tempfile::tempdir().unwrap();
    // 600,000 u16 tokens: a 1.2 MB record, over VERIFY_MAX_RECORD, between small documents.
    let data = write(
        &dir.path().join("ds"),
        &[5, 600_000, 7, 0, 3, 40_000],
        false,
    );
    let mut c = cfg(4096, 8);
    c.shuffle = Shuffle::Sequential;
    c.threads = 2;
    let l = SequenceLoader::new(Arc::clone(&data), c).unwrap();
    let batches = run(&l);
    let ids: Vec<u64> = batches.iter().flat_map(|b| b.ids.clone()).collect();
    let (inp, lab) = (rows(&batches, "input_ids"), rows(&batches, "labels"));
    for (r, &w) in ids.iter().enumerate() {
        for i in [0usize, 1, 2047, 4095] {
            let g = w * 4096 + i as u64;
            assert_eq!(inp[r][i] as u64, g % MOD);
            assert_eq!(lab[r][i] as u64, (g + 1) % MOD);
        }
    }
}

/// A task whose bytes are not in the page cache reads the rest of its samples in one batch
/// (io_uring where available): the windows and documents are the ones read warm, byte for byte.
#[test]
fn windows_and_documents_read_cold_are_the_ones_read_warm() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ds");
    let data = write(&path, &lengths(600), false);
    let documents = SequenceConfig {
        mode: SequenceMode::Documents {
            max_len: 40,
            pad_id: 0,
            bucket: 4,
        },
        ..cfg(0, 8)
    };
    for config in [cfg(16, 8), documents] {
        let warm = run(&SequenceLoader::new(Arc::clone(&data), config.clone()).unwrap());
        for _ in 0..2 {
            // a fresh open (nothing checked yet), its pages dropped: every task starts cold
            let cold_data = open(&path, OpenOptions::default());
            let dropped = stokehold::storage_bench::drop_cached_pages(cold_data.dataset()).unwrap();
            if !dropped {
                eprintln!("the page cache cannot be dropped here: this run reads warm");
            }
            let cold = run(&SequenceLoader::new(cold_data, config.clone()).unwrap());
            for name in ["input_ids", "labels"] {
                assert_eq!(rows(&cold, name), rows(&warm, name), "{name}");
            }
        }
    }
}

/// With a RAM cache of whole shards, windows and documents are the same bytes; a second epoch
/// is served from RAM (hits counted) once the shards are loaded.
#[test]
fn the_ram_cache_serves_token_windows_with_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ds");
    write(&path, &lengths(500), true);
    let plain = open(&path, OpenOptions::default());
    let reference = run(&SequenceLoader::new(plain, cfg(16, 8)).unwrap());
    let data = open(&path, OpenOptions::default());
    let mut cached = SequenceLoader::new(
        Arc::clone(&data),
        SequenceConfig {
            cache_bytes: 64 << 20,
            ..cfg(16, 8)
        },
    )
    .unwrap();
    assert!(rows(&run(&cached), "input_ids") == rows(&reference, "input_ids"));
    // every shard is queued by now; wait for the loads, then read again
    let stats = |l: &SequenceLoader| {
        l.stats()
            .caches
            .into_iter()
            .find(|c| c.kind == "records")
            .expect("the RAM cache's figures")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while (stats(&cached).entries as usize) < data.dataset().shards().len()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let hits = stats(&cached).hits;
    cached.set_epoch(0);
    let again = run(&cached);
    for name in ["input_ids", "labels"] {
        assert!(
            rows(&again, name) == rows(&reference, name),
            "{name} differ"
        );
    }
    assert_eq!(
        stats(&cached).entries as usize,
        data.dataset().shards().len()
    );
    assert!(stats(&cached).hits > hits, "the second epoch reads RAM");
}

#[test]
fn token_windows_from_s3_are_fetched_ahead_and_are_the_local_ones() {
    use stokehold_testkit as testing;
    use stokehold_testkit::S3Server;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ds");
    let local = write(&path, &lengths(800), false);
    assert!(local.dataset().shards().len() > 10);
    let server = S3Server::shared();
    server.create_bucket("tokens").unwrap();
    let url = "s3://tokens/corpus";
    let storage_options = testing::options(&server.endpoint());
    testing::upload_dir(&path, url, &storage_options).unwrap();
    let remote = open(
        Path::new(url),
        OpenOptions {
            storage_options,
            ..OpenOptions::default()
        },
    );
    for mode in [
        SequenceMode::Packed { seq_len: 16 },
        SequenceMode::Documents {
            max_len: 64,
            pad_id: 0,
            bucket: 1,
        },
    ] {
        let config = SequenceConfig { mode, ..cfg(16, 8) };
        let reference = run(&SequenceLoader::new(Arc::clone(&local), config.clone()).unwrap());
        let loader = SequenceLoader::new(Arc::clone(&remote), config).unwrap();
        let before = loader.stats().storage.expect("remote counts").prefetch;
        let batches = run(&loader);
        for name in ["input_ids", "labels"] {
            assert!(
                rows(&batches, name) == rows(&reference, name),
                "{mode:?} {name}"
            );
        }
        let p = loader.stats().storage.expect("remote counts").prefetch;
        assert!(p.requests > before.requests, "{mode:?}: {p:?}");
        assert!(
            p.hits > p.misses,
            "{mode:?}: announced reads come from ranges fetched ahead: {p:?}"
        );
    }
}
