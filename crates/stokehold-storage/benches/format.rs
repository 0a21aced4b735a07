//! Foundation benchmarks of the format layer, each reported as a ratio against a baseline
//! measured in the same run (the machine is small and noisy; absolute numbers are secondary).
//!
//! `cargo bench -p stokehold-format --bench format` (or `make bench`). Environment:
//! `STOKEHOLD_BENCH_MB` (size of the verify data set, default 512), `STOKEHOLD_BENCH_RECORDS`
//! (records of the open/lookup data set, default 1,000,000).
//!
//! 1. verify vs. plain sequential reads of the same files (hot page cache), one thread each;
//! 2. random record lookups (index lookup + slice of the map, no copy) per second on one core;
//! 3. opening a dataset of 1,000,000 records: time and bytes of memory per record.

use std::borrow::Cow;
use std::hint::black_box;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use stokehold_format::{FieldValue, Schema};
use stokehold_storage::{
    Access, Dataset, DatasetWriteOptions, DatasetWriter, OpenOptions, VerifyOptions, verify_dataset,
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut v: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort();
    v[runs / 2]
}

fn write(dest: &Path, records: u64, record_bytes: usize) {
    let schema = Schema::from_specs([("data", "bytes"), ("label", "int64")]).unwrap();
    let mut w = DatasetWriter::create(dest, schema, DatasetWriteOptions::default()).unwrap();
    let mut payload = vec![0u8; record_bytes];
    for i in 0..records {
        // cheap, varied content
        for (k, b) in payload.iter_mut().enumerate().step_by(64) {
            *b = (i as usize ^ k) as u8;
        }
        w.write(&[
            FieldValue::Bytes(Cow::Borrowed(&payload)),
            FieldValue::Int64(i as i64),
        ])
        .unwrap();
    }
    w.finish().unwrap();
}

fn read_all(dir: &Path, buf: &mut [u8]) -> u64 {
    let ds = Dataset::open(dir).unwrap();
    let mut total = 0;
    for s in ds.shards() {
        let f = std::fs::File::open(s.path()).unwrap();
        let len = s.file_len();
        let mut off = 0;
        while off < len {
            let n = (buf.len() as u64).min(len - off) as usize;
            f.read_exact_at(&mut buf[..n], off).unwrap();
            black_box(&buf[..n]);
            off += n as u64;
        }
        total += len;
    }
    total
}

fn main() {
    // cargo bench passes --bench; ignore arguments.
    let tmp = tempfile::tempdir().unwrap();

    // 1. verify vs plain reads
    let mb = env("STOKEHOLD_BENCH_MB", 512);
    let big = tmp.path().join("big");
    write(&big, mb * 1024 * 1024 / (110 << 10), 110 << 10);
    let mut buf = vec![0u8; 4 << 20];
    let bytes = read_all(&big, &mut buf); // warm the page cache
    let t_read = median(5, || {
        read_all(&big, &mut buf);
    });
    let opts = VerifyOptions {
        threads: 1,
        ..VerifyOptions::default()
    };
    let t_verify = median(5, || {
        assert!(verify_dataset(&big, opts.clone(), &|_| {}).unwrap().ok());
    });
    let gbs = |t: Duration| bytes as f64 / t.as_secs_f64() / 1e9;
    println!(
        "verify: {:.2} GB/s vs plain reads {:.2} GB/s of the same {} MiB (hot cache, 1 thread): ratio {:.2} (target >= 0.80)",
        gbs(t_verify),
        gbs(t_read),
        bytes >> 20,
        t_read.as_secs_f64() / t_verify.as_secs_f64()
    );

    // 2 and 3: a dataset of many small records
    let n = env("STOKEHOLD_BENCH_RECORDS", 1_000_000);
    let many = tmp.path().join("many");
    write(&many, n, 24);
    let mut ds = None;
    let t_open = median(5, || {
        ds = Some(Dataset::open_with(&many, OpenOptions::with_access(Access::Mmap)).unwrap());
    });
    let ds = ds.unwrap();
    println!(
        "open: {} records in {:.1} ms (target < 100 ms), {:.1} bytes of memory per record (target < 32)",
        n,
        t_open.as_secs_f64() * 1e3,
        ds.memory_bytes() as f64 / n as f64
    );
    // pseudo-random indices, generated before timing
    let lookups = 10_000_000usize;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let idx: Vec<u64> = (0..lookups)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        })
        .collect();
    let t_base = median(3, || {
        let mut s = 0u64;
        for &i in &idx {
            s = s.wrapping_add(black_box(i));
        }
        black_box(s);
    });
    let t_lookup = median(3, || {
        let mut s = 0usize;
        for &i in &idx {
            s = s.wrapping_add(ds.record_slice(i).unwrap().unwrap().len());
        }
        black_box(s);
    });
    let per_sec = lookups as f64 / (t_lookup - t_base.min(t_lookup)).as_secs_f64().max(1e-9);
    println!(
        "random lookup: {:.1} million/s on one core (index lookup + slice of the map, no copy; target >= 5); \
         loop without lookups {:.1} ms, with {:.1} ms for {} lookups",
        per_sec / 1e6,
        t_base.as_secs_f64() * 1e3,
        t_lookup.as_secs_f64() * 1e3,
        lookups
    );
}
