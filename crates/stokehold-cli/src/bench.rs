//! `stokehold bench`: stream a dataset through the loading engine with no model and report
//! throughput and where the time went, stage by stage.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use std::collections::BTreeMap;

use stokehold::format::{Dataset, FieldType, OpenOptions};
use stokehold::spec::{TransformSpec, build_columns};
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
    /// Decode the image field with a fused RandomResizedCrop to N×N (the training pipeline).
    #[arg(long, value_name = "N")]
    random_resized_crop: Option<u32>,
    /// Resize the image's shorter side to N (with --center-crop: the evaluation pipeline).
    #[arg(long, value_name = "N")]
    resize: Option<u32>,
    /// Centre crop N×N after --resize.
    #[arg(long, value_name = "N")]
    center_crop: Option<u32>,
    /// Random horizontal flip (p = 0.5).
    #[arg(long)]
    flip: bool,
    /// Normalise to float32 with ImageNet's mean and std (default: uint8).
    #[arg(long)]
    normalize: bool,
}

/// The image stages the flags ask for, if any.
fn image_specs(a: &BenchArgs) -> anyhow::Result<Vec<TransformSpec>> {
    let spec = |name: &str, params: serde_json::Value| TransformSpec {
        name: name.into(),
        params,
    };
    let mut v = Vec::new();
    match (a.random_resized_crop, a.resize, a.center_crop) {
        (Some(n), None, None) => v.push(spec(
            "random_resized_crop",
            serde_json::json!({ "size": n }),
        )),
        (None, Some(r), Some(c)) => {
            v.push(spec("resize", serde_json::json!({ "size": r })));
            v.push(spec("center_crop", serde_json::json!({ "size": c })));
        }
        (None, Some(r), None) => v.push(spec("resize", serde_json::json!({ "size": [r, r] }))),
        (None, None, None) => {
            anyhow::ensure!(
                !a.flip && !a.normalize,
                "--flip and --normalize need --random-resized-crop or --resize"
            );
            return Ok(v);
        }
        _ => anyhow::bail!("use --random-resized-crop N, or --resize N [--center-crop M]"),
    }
    if a.flip {
        v.push(spec(
            "random_horizontal_flip",
            serde_json::json!({ "p": 0.5 }),
        ));
    }
    if a.normalize {
        v.push(spec(
            "normalize",
            serde_json::json!({ "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225] }),
        ));
    }
    Ok(v)
}

pub fn bench(a: BenchArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let ds = Arc::new(Dataset::open_with(
        &a.dataset,
        OpenOptions {
            mmap: a.mmap,
            ..OpenOptions::default()
        },
    )?);
    let image = image_specs(&a)?;
    let columns = if image.is_empty() {
        Column::all(ds.schema())?
    } else {
        let field = ds
            .schema()
            .fields
            .iter()
            .find(|f| matches!(f.ty, FieldType::Image { .. }))
            .with_context(|| {
                format!(
                    "the image flags need an image field; the schema is {}",
                    ds.schema()
                )
            })?
            .name
            .clone();
        build_columns(
            ds.schema(),
            &BTreeMap::from([(field, image)]),
            true,
            &mut |_| None,
        )?
    };
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
