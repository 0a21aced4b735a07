//! Text benchmarks, each a ratio against a baseline measured in the same run
//! (`cargo bench -p stokehold --bench sequence`, or `make bench`):
//!
//! 1. packing throughput: `pack_tokens` (JSONL read, JSON parse, tokenize, write shards) on N
//!    threads against the `tokenizers` crate's own `encode_batch_fast` of the same texts on the
//!    same N threads (target: >= 0.9);
//! 2. packed sequence loading, seq_len 2048, batch 32, int32, from warm shards, in each read mode
//!    (pread or mmap, with or without per-record checksums) on N and on 1 worker: bytes delivered
//!    per second (`input_ids` + `labels`; the `input_ids`-only ratio is printed too) against a
//!    plain single-threaded `memcpy` of int32 batches from a warm 64 MiB buffer, alternated with
//!    the loader's epochs (target: >= 0.5);
//!    The RAM cache variant (`cache_bytes`) reads whole shards once, then serves windows from
//!    memory.
//! 3. the same windows from a cold page cache (the dataset's pages dropped before each epoch),
//!    the task's reads submitted together through io_uring against one pread each
//!    (`STOKEHOLD_IO_URING=0`), alternated, medians of 3.
//!
//! The corpus is synthetic English-like text (`stokehold_ops::text::synthetic_documents`) and the
//! tokenizer a WordLevel model trained on it in the run: nothing is downloaded. Environment:
//! `STOKEHOLD_BENCH_DOCS` (documents, default 60000), `STOKEHOLD_BENCH_THREADS` (default: the
//! available cores), `STOKEHOLD_BENCH_VARIANTS` (loading variants to run, by position from 0,
//! e.g. `0,4`, or `0,0,0` to repeat one; default all), `STOKEHOLD_BENCH_COLD=0` (skip the cold-cache comparison).

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stokehold::format::{Dataset, OpenOptions};
use stokehold::{SequenceConfig, SequenceLoader, SequenceMode, Shuffle, TokenDataset};
use stokehold_ingest::{NoProgress, PackOptions, TokenOptions, pack_tokens};
use stokehold_ops::text::{synthetic_documents, train_word_level};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn open(dir: &Path, o: OpenOptions) -> Arc<TokenDataset> {
    Arc::new(TokenDataset::open(Arc::new(Dataset::open_with(dir, o).unwrap())).unwrap())
}

fn main() {
    let docs_n = env("STOKEHOLD_BENCH_DOCS", 60_000);
    let threads = env(
        "STOKEHOLD_BENCH_THREADS",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    );
    let tmp = tempfile::tempdir().unwrap();
    let docs = synthetic_documents(docs_n, 11);
    let text_bytes: usize = docs.iter().map(String::len).sum();
    let tok = train_word_level(&docs[..docs.len().min(5000)], 30_000).unwrap();
    let tp = tmp.path().join("tokenizer.json");
    std::fs::write(&tp, tok.inner().to_string(false).unwrap()).unwrap();
    let jsonl = tmp.path().join("corpus.jsonl");
    let mut lines = String::with_capacity(text_bytes + docs_n * 16);
    for d in &docs {
        lines.push_str(&serde_json::json!({ "text": d }).to_string());
        lines.push('\n');
    }
    std::fs::write(&jsonl, &lines).unwrap();
    println!(
        "corpus: {docs_n} documents, {:.1} MB of text, WordLevel vocabulary {}; {threads} threads",
        text_bytes as f64 / 1e6,
        tok.vocab_size()
    );

    // 1. Packing against encode_batch_fast on the same threads.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let inputs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let dest = tmp.path().join("tok");
    let options = PackOptions {
        threads,
        write: stokehold::format::DatasetWriteOptions {
            overwrite: true,
            ..Default::default()
        },
        ..PackOptions::default()
    };
    let topts = TokenOptions {
        text_field: "text".into(),
        tokenizer: tp.clone(),
        prepend_bos: None,
        append_eos: Some("</s>".into()),
    };
    // Alternate the two, 3 times each, and compare the medians.
    let mut tokens = 0usize;
    let (mut enc_times, mut pack_times) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let t = Instant::now();
        let enc = pool.install(|| {
            tok.inner()
                .encode_batch_fast(inputs.clone(), false)
                .unwrap()
        });
        tokens = enc.iter().map(|e| e.get_ids().len()).sum();
        black_box(enc);
        enc_times.push(t.elapsed());
        let t = Instant::now();
        pack_tokens(
            std::slice::from_ref(&jsonl),
            &dest,
            &options,
            &topts,
            &NoProgress,
        )
        .unwrap();
        pack_times.push(t.elapsed());
    }
    let (t_enc, t_pack) = (median(enc_times), median(pack_times));
    let enc_rate = tokens as f64 / t_enc.as_secs_f64();
    let pack_rate = tokens as f64 / t_pack.as_secs_f64();
    println!(
        "packing: encode_batch_fast {:.2} M tok/s ({:.1} MB/s of text), pack_tokens {:.2} M tok/s; \
         ratio {:.2} (target >= 0.9)",
        enc_rate / 1e6,
        text_bytes as f64 / t_enc.as_secs_f64() / 1e6,
        pack_rate / 1e6,
        pack_rate / enc_rate
    );

    // 2. Sequence loading against memcpy. The machine may be shared: each variant alternates a
    // memcpy pass and a loader epoch, 7 times, and compares the medians.
    let (seq_len, batch) = (2048usize, 32usize);
    let batch_bytes = seq_len * batch * 4;
    let src: Vec<i32> = (0..(64 << 20) / 4).collect();
    let mut dst = vec![0i32; batch_bytes / 4];
    let chunks = src.len() * 4 / batch_bytes;
    let mut memcpy = || {
        let t = Instant::now();
        let n = dst.len();
        for c in 0..chunks {
            dst.copy_from_slice(&src[c * n..(c + 1) * n]);
            black_box(&mut dst);
        }
        (chunks * batch_bytes) as f64 / t.elapsed().as_secs_f64()
    };
    let opts = |mmap: bool, verify_records: bool| OpenOptions {
        access: if mmap {
            stokehold::format::Access::Mmap
        } else {
            stokehold::format::Access::Pread
        },
        verify_records,
        ..OpenOptions::default()
    };
    // STOKEHOLD_BENCH_VARIANTS=0,4: only these variants (by position, from 0), e.g. to profile one
    let only: Option<Vec<usize>> = std::env::var("STOKEHOLD_BENCH_VARIANTS")
        .ok()
        .map(|v| v.split(',').filter_map(|k| k.trim().parse().ok()).collect());
    let variants = [
        ("pread + crc (default)", opts(false, true), threads, 0),
        ("pread, no crc", opts(false, false), threads, 0),
        ("mmap + crc", opts(true, true), threads, 0),
        ("mmap, no crc", opts(true, false), threads, 0),
        (
            "pread + crc, RAM cache",
            opts(false, true),
            threads,
            1 << 30,
        ),
        ("pread + crc (default)", opts(false, true), 1, 0),
        ("mmap, no crc", opts(true, false), 1, 0),
    ];
    let picked: Vec<usize> = only.unwrap_or_else(|| (0..variants.len()).collect());
    for (name, o, workers, cache_bytes) in picked.iter().filter_map(|&k| variants.get(k).cloned()) {
        let data = open(&dest, o);
        let config = SequenceConfig {
            mode: SequenceMode::Packed {
                seq_len: seq_len as u32,
            },
            batch_size: batch as u32,
            shuffle: Shuffle::Global,
            threads: workers,
            prefetch: 4,
            cache_bytes,
            ..SequenceConfig::default()
        };
        let mut loader = SequenceLoader::new(Arc::clone(&data), config).unwrap();
        let steps = loader.steps_per_epoch().unwrap();
        // warm the page cache and the buffer pool
        for b in loader.iter().unwrap() {
            black_box(b.unwrap());
        }
        let (mut copy_rates, mut load_rates) = (Vec::new(), Vec::new());
        let busy0 = busy(&loader.stats());
        for epoch in 1..=7 {
            copy_rates.push(memcpy());
            loader.set_epoch(epoch);
            let t = Instant::now();
            for b in loader.iter().unwrap() {
                black_box(b.unwrap());
            }
            load_rates.push((steps as usize * batch_bytes) as f64 / t.elapsed().as_secs_f64());
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (copy_bw, rate) = (med(&mut copy_rates), med(&mut load_rates));
        let busy = (busy(&loader.stats()) - busy0).as_secs_f64() / (7.0 * steps as f64);
        // `rate` counts the input_ids tensor; a batch also delivers labels of the same size.
        println!(
            "sequence loading ({name}, {workers} workers): {steps} batches of {batch}x{seq_len}, \
             {:.0} M tok/s, {:.2} GB/s delivered (input_ids + labels); memcpy {:.2} GB/s; \
             ratio {:.2} (input_ids alone {:.2}; target >= 0.5); worker time {:.0} us/batch",
            rate / 4.0 / 1e6,
            2.0 * rate / 1e9,
            copy_bw / 1e9,
            2.0 * rate / copy_bw,
            rate / copy_bw,
            busy * 1e6
        );
    }
    if std::env::var("STOKEHOLD_BENCH_COLD").as_deref() != Ok("0") {
        cold(&dest, seq_len, batch, threads);
    }
}

/// Packed windows from a cold page cache, io_uring against pread: tokens per second of each
/// (medians of 3 alternated epochs, the dataset's pages dropped before each).
fn cold(dest: &Path, seq_len: usize, batch: usize, threads: usize) {
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..6 {
        let uring = round % 2 == 0;
        // SAFETY: no other thread of this process runs now (the loaders of the runs before are
        // dropped, their workers joined), so nothing reads the environment concurrently.
        unsafe { std::env::set_var("STOKEHOLD_IO_URING", if uring { "1" } else { "0" }) };
        let data = open(dest, OpenOptions::default());
        let config = SequenceConfig {
            mode: SequenceMode::Packed {
                seq_len: seq_len as u32,
            },
            batch_size: batch as u32,
            shuffle: Shuffle::Global,
            threads,
            prefetch: 4,
            seed: round / 2,
            ..SequenceConfig::default()
        };
        let loader = SequenceLoader::new(Arc::clone(&data), config).unwrap();
        let steps = loader.steps_per_epoch().unwrap();
        if !stokehold::storage_bench::drop_cached_pages(data.dataset()).unwrap_or(false) {
            println!("cold windows: the page cache cannot be dropped here; skipped");
            return;
        }
        let t = Instant::now();
        for b in loader.iter().unwrap() {
            black_box(b.unwrap());
        }
        let tokens = steps as f64 * (batch * seq_len) as f64;
        rates[usize::from(!uring)].push(tokens / t.elapsed().as_secs_f64());
    }
    // SAFETY: the last loader of the loop is dropped and its workers joined: no other thread
    // of this process runs, so nothing reads the environment concurrently.
    unsafe { std::env::remove_var("STOKEHOLD_IO_URING") };
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (u, p) = (med(&mut rates[0]), med(&mut rates[1]));
    println!(
        "cold windows (pread + crc, {threads} workers, page cache dropped before each epoch): \
         io_uring batches {:.0} M tok/s, one pread each {:.0} M tok/s; ratio {:.2}",
        u / 1e6,
        p / 1e6,
        u / p
    );
}

/// Worker time over all stages.
fn busy(s: &stokehold::Stats) -> Duration {
    s.stages.iter().map(|st| st.busy).sum()
}
