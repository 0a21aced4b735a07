//! Storage and cache benchmarks, each a ratio against a baseline measured in the same run
//! (`cargo bench -p stokehold --bench storage`; `STOKEHOLD_BENCH_DIR` picks the disk, default the
//! temp dir; `STOKEHOLD_BENCH_JPEGS` a packed ImageNet-like dataset for the decoded cache, default
//! bench-data/inet-shards in the workspace, made by `make bench-data`: `stokehold pack` of the
//! images from scripts/make_imagenet_like.py):
//!
//! 1. warm RAM cache: a copy-only pipeline over a dataset on disk with `cache_bytes` set, against
//!    the same pipeline over the dataset read into memory (target >= 0.97), for 1 KiB records (the
//!    worst case: per-record overhead shows most) and 100 KiB records;
//! 2. decoded cache at 256 px: RandomResizedCrop(224) + flip from the warm cache against the same
//!    pipeline from the JPEGs (target >= 3x); then from the cache's local directory (every image
//!    read from its part file) and the cost of writing it in the filling epoch;
//! 3. cold sequential read of shards with direct I/O (copy-only pipeline in stored order) against
//!    `dd iflag=direct bs=4M` over the same files (target >= 0.9);
//! 4. global-shuffle reads of 100 KiB records with direct I/O against sequential reads of the same
//!    records (target >= 0.7).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stokehold::format::{
    Access, DType, Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, OpenOptions, Schema,
};
use stokehold::stages::spec::{TransformSpec, build_columns};
use stokehold::{
    Column, CopyBytes, DecodedCacheConfig, Loader, LoaderConfig, RecordCache, Shuffle,
};

fn write(dest: &Path, n: u64, record: usize) {
    if dest.join("manifest.json").exists() {
        return;
    }
    let schema = Schema::from_specs([("data", "bytes")]).unwrap();
    let opts = DatasetWriteOptions {
        target_shard_bytes: 256 << 20,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(dest, schema, opts).unwrap();
    let mut payload = vec![0u8; record];
    for i in 0..n {
        payload[..8].copy_from_slice(&i.to_le_bytes());
        payload[record - 8..].copy_from_slice(&(i * 31).to_le_bytes());
        w.write(&[FieldValue::Bytes(Cow::Borrowed(&payload))])
            .unwrap();
    }
    w.finish().unwrap();
}

fn open(dir: &Path, access: Access) -> Arc<Dataset> {
    Arc::new(Dataset::open_with(dir, OpenOptions::with_access(access)).unwrap())
}

fn copy_loader(ds: &Arc<Dataset>, record: usize, shuffle: Shuffle, cache_bytes: u64) -> Loader {
    let cols = vec![Column::fixed(
        "data",
        vec![Arc::new(CopyBytes)],
        DType::U8,
        vec![record],
    )];
    let batch = if record >= 64 << 10 { 64 } else { 256 };
    let cfg = LoaderConfig {
        batch_size: batch,
        threads: 2,
        prefetch: 4,
        shuffle,
        cache_bytes: stokehold::Budget::bytes(cache_bytes),
        prepare_next_epoch: false,
        ..LoaderConfig::default()
    };
    Loader::new(Arc::clone(ds), cols, cfg).unwrap()
}

fn epoch(l: &mut Loader) -> Duration {
    let t = Instant::now();
    for b in l.iter().unwrap() {
        black_box(b.unwrap());
    }
    t.elapsed()
}

fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut v: Vec<Duration> = (0..runs).map(|_| f()).collect();
    v.sort();
    v[runs / 2]
}

fn ram_cache(dir: &Path, record: usize, n: u64) {
    let path = dir.join(format!("rec-{record}"));
    write(&path, n, record);
    let mem = open(&path, Access::Memory);
    let disk = open(&path, Access::Pread);
    let mut a = copy_loader(&mem, record, Shuffle::Global, 0);
    let mut b = copy_loader(&disk, record, Shuffle::Global, 1 << 34);
    epoch(&mut b); // fills the cache
    let cache = RecordCache::shared(&disk, &stokehold::cache::dataset_key(&disk), 0);
    assert!(cache.wait_loaded(Duration::from_secs(120)));
    epoch(&mut a);
    // interleave the runs so that both see the same machine state
    let mut ta = Vec::new();
    let mut tb = Vec::new();
    for _ in 0..5 {
        ta.push(epoch(&mut a));
        tb.push(epoch(&mut b));
    }
    ta.sort();
    tb.sort();
    let rate = |t: Duration| n as f64 / t.as_secs_f64();
    println!(
        "ram cache, {} B records: warm cache {:.0} samples/s vs in-memory source {:.0} samples/s = {:.3} (target >= 0.97); {}",
        record,
        rate(tb[2]),
        rate(ta[2]),
        ta[2].as_secs_f64() / tb[2].as_secs_f64(),
        b.stats().caches[0].report_line()
    );
}

/// False when the dataset is missing (the part is not measured).
fn decoded_cache(jpegs: &Path) -> bool {
    if !jpegs.join("manifest.json").exists() {
        println!(
            "decoded cache: NOT MEASURED, no dataset at {}: make it with `make bench-data` (or set STOKEHOLD_BENCH_JPEGS=DIR to a packed ImageNet-like dataset)",
            jpegs.display()
        );
        return false;
    }
    let ds = open(jpegs, Access::Memory);
    let spec = |name: &str, params: serde_json::Value| TransformSpec {
        name: name.into(),
        params,
    };
    let specs = BTreeMap::from([(
        "image".to_string(),
        vec![
            spec("random_resized_crop", serde_json::json!({"size": 224})),
            spec("random_horizontal_flip", serde_json::json!({})),
        ],
    )]);
    let make = |decoded| {
        let cols = build_columns(ds.schema(), &specs, false, &mut |_| None).unwrap();
        let cols: Vec<Column> = cols.into_iter().filter(|c| c.name == "image").collect();
        let cfg = LoaderConfig {
            batch_size: 64,
            threads: 2,
            prefetch: 4,
            decoded_cache: decoded,
            prepare_next_epoch: false,
            ..LoaderConfig::default()
        };
        Loader::new(Arc::clone(&ds), cols, cfg).unwrap()
    };
    let mut plain = make(None);
    let mut cached = make(Some(DecodedCacheConfig::in_ram(
        256,
        stokehold::Budget::bytes(8 << 30),
    )));
    let fill = epoch(&mut cached);
    let n = ds.len() as f64;
    let tp = median(3, || epoch(&mut plain));
    let tc = median(3, || epoch(&mut cached));
    println!(
        "decoded cache 256 px: RandomResizedCrop(224)+flip warm {:.0} images/s vs from JPEG {:.0} images/s = {:.2}x (target >= 3x); filling epoch {:.0} images/s; {}",
        n / tc.as_secs_f64(),
        n / tp.as_secs_f64(),
        tp.as_secs_f64() / tc.as_secs_f64(),
        n / fill.as_secs_f64(),
        cached.stats().caches[0].report_line()
    );
    // the same from the cache's local directory: a first run writes it, later runs (new caches,
    // 1 byte of RAM budget so that every image is read from the directory) read it
    drop(cached);
    let dir = tempfile::tempdir_in(jpegs.parent().unwrap_or(Path::new("/tmp"))).unwrap();
    let on_disk = |budget: u64| DecodedCacheConfig {
        dir: Some(dir.path().to_path_buf()),
        ..DecodedCacheConfig::in_ram(256, stokehold::Budget::bytes(budget))
    };
    let fill_dir = epoch(&mut make(Some(on_disk(8 << 30))));
    let mut last = None;
    let td = median(3, || {
        let mut l = make(Some(on_disk(1)));
        let t = epoch(&mut l);
        last = Some(l);
        t
    });
    let disk_line = last.map_or(String::new(), |l| {
        l.stats()
            .caches
            .iter()
            .find(|c| c.kind == "decoded-disk")
            .map_or(String::new(), |c| c.report_line())
    });
    println!(
        "decoded cache 256 px from its directory (every image read from disk, page cache warm): {:.0} images/s vs from JPEG {:.0} images/s = {:.2}x; the filling epoch with the directory {:.0} images/s ({:.2}x the RAM-only filling epoch); {disk_line}",
        n / td.as_secs_f64(),
        n / tp.as_secs_f64(),
        tp.as_secs_f64() / td.as_secs_f64(),
        n / fill_dir.as_secs_f64(),
        fill.as_secs_f64() / fill_dir.as_secs_f64(),
    );
    true
}

fn shard_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "skh"))
        .collect();
    v.sort();
    v
}

fn dd_direct(files: &[PathBuf]) -> Option<Duration> {
    let t = Instant::now();
    for f in files {
        let ok = Command::new("dd")
            .arg(format!("if={}", f.display()))
            .args(["of=/dev/null", "bs=4M", "iflag=direct"])
            .stderr(std::process::Stdio::null())
            .status()
            .ok()?
            .success();
        if !ok {
            return None;
        }
    }
    Some(t.elapsed())
}

fn direct_reads(dir: &Path) {
    let record = 100 << 10;
    let n = 4000u64; // ~400 MB
    let path = dir.join("rec-direct");
    write(&path, n, record);
    let files = shard_files(&path);
    if !stokehold::storage::file::supports_direct(&files[0]) {
        println!("direct reads: skipped (no O_DIRECT on {})", dir.display());
        return;
    }
    let bytes: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    let ds = open(&path, Access::Direct);
    let mut seq = copy_loader(&ds, record, Shuffle::Sequential, 0);
    let mut glob = copy_loader(&ds, record, Shuffle::Global, 0);
    let mut tdd = Vec::new();
    let mut tseq = Vec::new();
    let mut tglob = Vec::new();
    for _ in 0..3 {
        match dd_direct(&files) {
            Some(t) => tdd.push(t),
            None => {
                println!("direct reads: dd iflag=direct failed; skipped");
                return;
            }
        }
        tseq.push(epoch(&mut seq));
        tglob.push(epoch(&mut glob));
    }
    for v in [&mut tdd, &mut tseq, &mut tglob] {
        v.sort();
    }
    let mbs = |t: Duration| bytes as f64 / t.as_secs_f64() / 1e6;
    println!(
        "cold sequential read (O_DIRECT, copy-only pipeline, 100 KiB records): {:.0} MB/s vs dd iflag=direct bs=4M {:.0} MB/s = {:.2} (target >= 0.9)",
        mbs(tseq[1]),
        mbs(tdd[1]),
        tdd[1].as_secs_f64() / tseq[1].as_secs_f64()
    );
    println!(
        "global-shuffle reads (O_DIRECT, 100 KiB records): {:.0} MB/s vs sequential {:.0} MB/s = {:.2} (target >= 0.7)",
        mbs(tglob[1]),
        mbs(tseq[1]),
        tseq[1].as_secs_f64() / tglob[1].as_secs_f64()
    );
}

fn main() {
    let base = std::env::var_os("STOKEHOLD_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::tempdir_in(base).unwrap();
    // STOKEHOLD_BENCH_ONLY=ram|decoded|direct runs one part
    let only = std::env::var("STOKEHOLD_BENCH_ONLY").unwrap_or_default();
    let part = |p: &str| only.is_empty() || only == p;
    let mut missing = false;
    if part("ram") {
        ram_cache(tmp.path(), 1024, 200_000);
        ram_cache(tmp.path(), 100 << 10, 2000);
    }
    if part("decoded") {
        let jpegs = std::env::var_os("STOKEHOLD_BENCH_JPEGS")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench-data/inet-shards")
            });
        missing = !decoded_cache(&jpegs);
    }
    if part("direct") {
        direct_reads(tmp.path());
    }
    if missing {
        std::process::exit(1);
    }
}
