//! `stokehold bench`: stream a dataset through the reading pipeline that exists today (positional
//! read + checksum, then field decoding) on several threads and report throughput and the share of
//! time of each stage. The engine (#3) and image pipeline (#4) add their stages to this report.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use stokehold_format::Dataset;

use crate::units;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The dataset directory.
    dataset: PathBuf,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Passes over the dataset.
    #[arg(long, default_value_t = 1)]
    epochs: u32,
    /// Visit samples in a seeded random order (a global shuffle) instead of in order.
    #[arg(long)]
    shuffle: bool,
    /// Seed of the shuffle.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Default, Clone, Copy)]
struct StageTimes {
    read: Duration,
    decode: Duration,
    items: u64,
    bytes: u64,
}

/// A seeded permutation of 0..n (Fisher–Yates over SplitMix64).
fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut s = seed;
    for i in (1..v.len()).rev() {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        v.swap(i, (z % (i as u64 + 1)) as usize);
    }
    v
}

pub fn bench(a: BenchArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let ds = Dataset::open(&a.dataset)?;
    let threads = match a.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        t => t,
    };
    let n = ds.len();
    let mut order = Vec::with_capacity((n * u64::from(a.epochs)) as usize);
    for e in 0..a.epochs {
        if a.shuffle {
            order.extend(permutation(
                n,
                a.seed ^ u64::from(e).wrapping_mul(0xA076_1D64_78BD_642F),
            ));
        } else {
            order.extend(0..n);
        }
    }
    let next = AtomicUsize::new(0);
    const CHUNK: usize = 64;
    let t0 = Instant::now();
    let per_thread: Vec<anyhow::Result<StageTimes>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> anyhow::Result<StageTimes> {
                    let mut t = StageTimes::default();
                    let mut buf = Vec::new();
                    loop {
                        let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if start >= order.len() {
                            return Ok(t);
                        }
                        for &i in &order[start..(start + CHUNK).min(order.len())] {
                            let r0 = Instant::now();
                            ds.read_record(i, &mut buf)?;
                            let r1 = Instant::now();
                            let (k, local) = ds.locate(i)?;
                            let fields = ds.shards()[k].decode(local, &buf)?;
                            std::hint::black_box(&fields);
                            t.read += r1 - r0;
                            t.decode += r1.elapsed();
                            t.items += 1;
                            t.bytes += buf.len() as u64;
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench worker panicked"))
            .collect()
    });
    let wall = t0.elapsed().as_secs_f64();
    let mut total = StageTimes::default();
    for t in per_thread {
        let t = t?;
        total.read += t.read;
        total.decode += t.decode;
        total.items += t.items;
        total.bytes += t.bytes;
    }
    let busy = (total.read + total.decode).as_secs_f64().max(1e-12);
    let per = |d: Duration| d.as_secs_f64() * 1e6 / total.items.max(1) as f64;
    writeln!(
        out,
        "bench       {}: {} samples x {} epochs, {} threads, {}",
        a.dataset.display(),
        units::count(n),
        a.epochs,
        threads,
        if a.shuffle {
            "global shuffle"
        } else {
            "in order"
        }
    )?;
    writeln!(
        out,
        "throughput  {} samples/s, {} ({} samples in {:.3} s)",
        units::count((total.items as f64 / wall) as u64),
        units::rate(total.bytes, wall),
        units::count(total.items),
        wall
    )?;
    writeln!(
        out,
        "stages      read+checksum {:.0}% ({:.1} us/sample) . field decode {:.0}% ({:.1} us/sample)",
        100.0 * total.read.as_secs_f64() / busy,
        per(total.read),
        100.0 * total.decode.as_secs_f64() / busy,
        per(total.decode)
    )?;
    writeln!(
        out,
        "workers     {:.0}% busy ({:.2} of {} thread-seconds)",
        100.0 * busy / (wall * threads as f64),
        busy,
        threads
    )?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn permutation_is_a_seeded_permutation() {
        let p = super::permutation(1000, 7);
        let mut s = p.clone();
        s.sort_unstable();
        assert_eq!(s, (0..1000).collect::<Vec<_>>());
        assert_eq!(p, super::permutation(1000, 7));
        assert_ne!(p, super::permutation(1000, 8));
    }
}
