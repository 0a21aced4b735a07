//! Engine benchmarks, each reported against a baseline measured in the same run
//! (`cargo bench -p stokehold --bench engine`, or `make bench`):
//!
//! 1. overhead: an in-memory dataset of 1 KiB records, a copy-only transform, batch 256, on 2
//!    threads, against a plain single-thread loop doing the same copies (target: >= 2 M
//!    samples/s);
//! 2. scaling: a CPU-heavy synthetic transform (~100 us per sample) on 2 threads against 1 thread (target: >= 1.9x);
//! 3. time to first batch on a 1,000,000-sample dataset (target: < 50 ms + one batch's work);
//! 4. memory: peak RSS over 5 epochs against prefetch x batch bytes + 64 MiB, in a child process.

use std::borrow::Cow;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stokehold::format::{
    Access, DType, Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, OpenOptions, Schema,
};
use stokehold::{Column, ColumnData, CopyBytes, Loader, LoaderConfig, Shuffle, from_fn};

fn write(dest: &Path, n: u64, record: usize) {
    let schema = Schema::from_specs([("data", "bytes")]).unwrap();
    let mut w = DatasetWriter::create(dest, schema, DatasetWriteOptions::default()).unwrap();
    let mut payload = vec![0u8; record];
    for i in 0..n {
        payload[..8].copy_from_slice(&i.to_le_bytes());
        w.write(&[FieldValue::Bytes(Cow::Borrowed(&payload))])
            .unwrap();
    }
    w.finish().unwrap();
}

fn open(dir: &Path, in_memory: bool) -> Arc<Dataset> {
    Arc::new(
        Dataset::open_with(
            dir,
            OpenOptions::with_access(if in_memory {
                Access::Memory
            } else {
                Access::Pread
            }),
        )
        .unwrap(),
    )
}

fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut v: Vec<Duration> = (0..runs).map(|_| f()).collect();
    v.sort();
    v[runs / 2]
}

fn epoch_time(loader: &mut Loader) -> Duration {
    let t = Instant::now();
    for b in loader.iter().unwrap() {
        black_box(b.unwrap());
    }
    t.elapsed()
}

fn rss_peak_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn memory_child(dir: &Path) {
    // positional reads (no map, no in-memory copy): the dataset's bytes are not in RSS
    let ds = open(dir, false);
    let before = rss_peak_kib();
    let cfg = LoaderConfig {
        batch_size: 256,
        threads: 2,
        prefetch: 4,
        shuffle: Shuffle::Global,
        ..LoaderConfig::default()
    };
    let cols = vec![Column::fixed(
        "data",
        vec![Arc::new(CopyBytes)],
        DType::U8,
        vec![1024],
    )];
    let mut l = Loader::new(ds, cols, cfg).unwrap();
    let mut peaks = Vec::new();
    for _ in 0..5 {
        epoch_time(&mut l);
        peaks.push(rss_peak_kib());
    }
    let budget_kib = (4 * 256 * 1024) / 1024 + 64 * 1024;
    println!(
        "memory: peak RSS {} KiB at start, after each of 5 epochs {:?} KiB; growth {} KiB; budget prefetch x batch + 64 MiB = {} KiB (target: peak within budget, flat)",
        before,
        peaks,
        peaks[4] - peaks[0],
        budget_kib
    );
}

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    write(&small, 200_000, 1024);
    if let Ok(dir) = std::env::var("STOKEHOLD_BENCH_MEMORY_CHILD") {
        memory_child(Path::new(&dir));
        return;
    }

    // 1. overhead
    let ds = open(&small, true);
    let n = ds.len() as usize;
    let base = median(5, || {
        let t = Instant::now();
        let mut batch = vec![0u8; 256 * 1024];
        for chunk in (0..n).collect::<Vec<_>>().chunks(256) {
            for (k, &i) in chunk.iter().enumerate() {
                let rec = ds.record_slice(i as u64).unwrap().unwrap();
                // the record holds a 4-byte field table, then the 1 KiB payload
                batch[k * 1024..(k + 1) * 1024].copy_from_slice(&rec[4..]);
            }
            black_box(&batch);
        }
        t.elapsed()
    });
    let cols = vec![Column::fixed(
        "data",
        vec![Arc::new(CopyBytes)],
        DType::U8,
        vec![1024],
    )];
    let cfg = |threads| LoaderConfig {
        batch_size: 256,
        threads,
        prefetch: 4,
        shuffle: Shuffle::Sequential,
        ..LoaderConfig::default()
    };
    let mut l2 = Loader::new(ds.clone(), cols.clone(), cfg(2)).unwrap();
    let t2 = median(5, || epoch_time(&mut l2));
    let rate = |t: Duration| n as f64 / t.as_secs_f64();
    println!(
        "overhead: engine on 2 threads {:.2} M samples/s (copy-only, 1 KiB records, batch 256, checksums on) vs plain single-thread copy loop {:.2} M samples/s: ratio {:.2} (target >= 2 M samples/s)",
        rate(t2) / 1e6,
        rate(base) / 1e6,
        base.as_secs_f64() / t2.as_secs_f64()
    );
    let unchecked = Arc::new(
        Dataset::open_with(
            &small,
            OpenOptions {
                access: Access::Memory,
                verify_records: false,
                ..OpenOptions::default()
            },
        )
        .unwrap(),
    );
    let mut l2u = Loader::new(unchecked, cols.clone(), cfg(2)).unwrap();
    let t2u = median(5, || epoch_time(&mut l2u));
    println!(
        "  without record checksums (as the plain loop): engine on 2 threads {:.2} M samples/s: ratio {:.2}",
        rate(t2u) / 1e6,
        base.as_secs_f64() / t2u.as_secs_f64()
    );
    let s = l2.stats();
    println!(
        "  stages per sample: {}",
        s.stages
            .iter()
            .map(|st| format!(
                "{} {:.0} ns",
                st.name,
                st.busy.as_nanos() as f64 / st.items.max(1) as f64
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );

    // 2. scaling with a CPU-heavy transform
    let heavy = from_fn("heavy", |v, ctx| {
        // a dependent chain the compiler cannot shorten: about 100 us per sample
        let mut x = ctx.id | 1;
        for i in 0..100_000u64 {
            x = (x ^ (x >> 29))
                .wrapping_mul(0xBF58_476D_1CE4_E5B9)
                .rotate_left((i & 31) as u32);
        }
        black_box(x);
        Ok(v)
    });
    let sub = tmp.path().join("sub");
    write(&sub, 4_000, 1024);
    let ds_sub = open(&sub, true);
    let heavy_cols = vec![Column::fixed(
        "data",
        vec![heavy, Arc::new(CopyBytes)],
        DType::U8,
        vec![1024],
    )];
    let mut h1 = Loader::new(ds_sub.clone(), heavy_cols.clone(), cfg(1)).unwrap();
    let mut h2 = Loader::new(ds_sub.clone(), heavy_cols, cfg(2)).unwrap();
    let th1 = median(3, || epoch_time(&mut h1));
    let th2 = median(3, || epoch_time(&mut h2));
    println!(
        "scaling: CPU-heavy transform, 2 threads {:.0} samples/s vs 1 thread {:.0} samples/s: {:.2}x (target >= 1.9x)",
        4_000.0 / th2.as_secs_f64(),
        4_000.0 / th1.as_secs_f64(),
        th1.as_secs_f64() / th2.as_secs_f64()
    );

    // 3. time to first batch on 1,000,000 samples
    let big = tmp.path().join("big");
    write(&big, 1_000_000, 16);
    let dsb = Arc::new(Dataset::open_with(&big, OpenOptions::with_access(Access::Mmap)).unwrap());
    let cols_b = vec![Column::fixed(
        "data",
        vec![Arc::new(CopyBytes)],
        DType::U8,
        vec![16],
    )];
    let cfg_b = LoaderConfig {
        batch_size: 256,
        threads: 2,
        prefetch: 4,
        shuffle: Shuffle::Global,
        ..LoaderConfig::default()
    };
    let mut first = Duration::ZERO;
    let mut one_batch = Duration::ZERO;
    let t = median(5, || {
        let t0 = Instant::now();
        let mut l = Loader::new(dsb.clone(), cols_b.clone(), cfg_b.clone()).unwrap();
        let mut it = l.iter().unwrap();
        let b = it.next().unwrap().unwrap();
        first = t0.elapsed();
        let t1 = Instant::now();
        let b2 = it.next().unwrap().unwrap();
        one_batch = t1.elapsed();
        assert!(matches!(b.columns[0].1, ColumnData::Fixed { .. }));
        black_box((b, b2));
        first
    });
    println!(
        "first batch: {:.2} ms from Loader::new to the first batch on 1,000,000 samples (global shuffle); a later batch took {:.2} ms (target < 50 ms + one batch)",
        t.as_secs_f64() * 1e3,
        one_batch.as_secs_f64() * 1e3
    );

    // 4. memory, in a fresh process so that nothing above counts
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .env("STOKEHOLD_BENCH_MEMORY_CHILD", &small)
        .output()
        .unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
}
