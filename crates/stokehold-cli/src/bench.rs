//! `stokehold bench`: stream a dataset through the loading engine with no model and report
//! throughput and where the time went, stage by stage.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use stokehold::format::{Dataset, OpenOptions};
use stokehold::{Column, ColumnData, Loader, LoaderConfig, Shuffle, Tail};

use crate::units;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The dataset directory.
    dataset: PathBuf,
    /// Samples per batch.
    #[arg(long, default_value_t = 256)]
    batch_size: u32,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Batches prepared ahead.
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Passes over the dataset.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Visit samples in a seeded random order (a global shuffle) instead of in order.
    #[arg(long)]
    shuffle: bool,
    /// Seed of the order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Read through memory maps instead of positional reads.
    #[arg(long)]
    mmap: bool,
}

pub fn bench(a: BenchArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let ds = Arc::new(Dataset::open_with(
        &a.dataset,
        OpenOptions {
            mmap: a.mmap,
            ..OpenOptions::default()
        },
    )?);
    let columns = Column::all(ds.schema())?;
    let config = LoaderConfig {
        batch_size: a.batch_size,
        seed: a.seed,
        shuffle: if a.shuffle {
            Shuffle::Global
        } else {
            Shuffle::Sequential
        },
        tail: Tail::Pad,
        threads: a.threads,
        prefetch: a.prefetch,
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(Arc::clone(&ds), columns, config)?;
    let t0 = Instant::now();
    let mut first_batch = None;
    let mut samples = 0u64;
    let mut bytes = 0u64;
    for _ in 0..a.epochs {
        for batch in loader.iter()? {
            let batch = batch.context("while streaming the dataset")?;
            first_batch.get_or_insert_with(|| t0.elapsed());
            samples += batch.len() as u64;
            for (_, c) in &batch.columns {
                bytes += match c {
                    ColumnData::Fixed { data, .. } => data.len() as u64,
                    ColumnData::List(items) => items.iter().map(value_bytes).sum(),
                };
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let stats = loader.stats();
    writeln!(
        out,
        "bench       {}: {} samples x {} epochs, batch {}, {} threads, prefetch {}, {}",
        a.dataset.display(),
        units::count(ds.len()),
        a.epochs,
        a.batch_size,
        stats.threads,
        a.prefetch,
        if a.shuffle {
            "global shuffle"
        } else {
            "in order"
        }
    )?;
    writeln!(
        out,
        "throughput  {} samples/s, {} ({} samples in {:.3} s; first batch after {:.1} ms)",
        units::count((samples as f64 / wall) as u64),
        units::rate(bytes, wall),
        units::count(samples),
        wall,
        first_batch.map_or(0.0, |d| d.as_secs_f64() * 1e3)
    )?;
    writeln!(out, "profile")?;
    for line in stats.report().lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn value_bytes(v: &stokehold::format::FieldValue<'_>) -> u64 {
    use stokehold::format::FieldValue;
    match v {
        FieldValue::Bytes(b) | FieldValue::Image(b) => b.len() as u64,
        FieldValue::String(s) => s.len() as u64,
        FieldValue::Array(a) => a.data.len() as u64,
        FieldValue::Int64(_) | FieldValue::Float64(_) => 8,
    }
}
