//! `stokehold bench storage`, and the page-cache note of the storage figures.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use stokehold::storage_bench::{self, StorageOptions, StorageReport};

use super::{StorageArgs, pipeline};
use crate::units;

/// "(cold: ...)" / "(warm ...)": how far the figures include the page cache.
pub(super) fn cache_note(r: &StorageReport) -> String {
    let mut s = if r.direct {
        " (O_DIRECT".to_string()
    } else if r.evicted {
        " (page cache dropped with posix_fadvise".to_string()
    } else {
        " (page cache warm".to_string()
    };
    for n in &r.notes {
        s.push_str("; ");
        s.push_str(n);
    }
    s.push(')');
    s
}

/// `stokehold bench storage`.
pub(super) fn storage(a: StorageArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let pl = pipeline(&a.dataset, &a.pipeline, 1)?;
    let ds = Arc::clone(&pl.ds);
    let mut config = pl.config().clone();
    let duration = Duration::from_secs_f64(a.seconds.max(0.01));
    config.prepare_next_epoch = false;
    let drop_all = || -> anyhow::Result<()> {
        if a.cold {
            drop_page_cache().context(
                "--cold writes /proc/sys/vm/drop_caches, which needs root (without --cold only the dataset's pages are dropped)",
            )?;
        }
        Ok(())
    };
    // the pipeline first, from a cold cache: what it consumes
    drop_all()?;
    if !a.warm && !a.cold {
        storage_bench::drop_cached_pages(&ds)?;
    }
    let mut loader = pl.loader(config)?;
    let threads = loader.stats().threads;
    // at most one pass: a second would read from the page cache the first one filled
    let t0 = Instant::now();
    let mut samples = 0u64;
    for b in loader.iter()? {
        samples += b.context("while streaming the dataset")?.len() as u64;
        if t0.elapsed() >= duration {
            break;
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let stats = loader.stats();
    drop(loader);
    drop_all()?;
    let report = storage_bench::measure(
        &ds,
        &StorageOptions {
            duration,
            threads: a.io_threads.unwrap_or(threads),
            direct: a.direct,
            evict: !a.warm,
            seed: a.pipeline.seed,
            ..StorageOptions::default()
        },
    )?;
    let mb = |m: &storage_bench::Measure| units::rate(m.bytes, m.seconds);
    writeln!(
        out,
        "storage     {}: {} shard files, {}, mean record {}{}",
        a.dataset.display(),
        ds.shards().len(),
        units::bytes(ds.shards().iter().map(|s| s.file_len()).sum()),
        units::bytes(report.mean_record as u64),
        cache_note(&report)
    )?;
    writeln!(
        out,
        "sequential  {} ({} reads of {} in {:.2} s)",
        mb(&report.sequential),
        units::count(report.sequential.reads),
        units::bytes(StorageOptions::default().chunk as u64),
        report.sequential.seconds
    )?;
    writeln!(
        out,
        "random      {} ({} records/s, global-shuffle order, {} threads, {:.2} s)",
        mb(&report.random),
        units::count(report.random.reads_per_sec() as u64),
        a.io_threads.unwrap_or(threads),
        report.random.seconds
    )?;
    let consumed = stats.bytes_read as f64 / wall.max(1e-9);
    let capacity = if a.pipeline.shuffle {
        report.random.bytes_per_sec()
    } else {
        report.sequential.bytes_per_sec()
    };
    writeln!(
        out,
        "pipeline    consumes {} ({} samples/s, {} threads, {}): {:.0}% of what the storage gives for its access pattern ({})",
        units::rate(stats.bytes_read, wall),
        units::count((samples as f64 / wall.max(1e-9)) as u64),
        threads,
        if a.pipeline.shuffle {
            "global shuffle"
        } else {
            "in order"
        },
        100.0 * consumed / capacity.max(1.0),
        if a.pipeline.shuffle {
            "random record reads"
        } else {
            "sequential reads"
        }
    )?;
    writeln!(
        out,
        "verdict     {}",
        if consumed > 0.8 * capacity {
            "storage-bound: faster storage, memory maps (--mmap) of a cached dataset, or sequential access (in-order or shard-block shuffle) would help"
        } else {
            "the storage keeps up: the limit is elsewhere (see `stokehold bench` for the stages)"
        }
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Write back dirty pages and drop the whole page cache (root only).
fn drop_page_cache() -> std::io::Result<()> {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
}
