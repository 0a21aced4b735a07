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

use stokehold::format::{Access, Dataset, FieldType, OpenOptions};
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
    /// Let the loader adjust its working threads (up to --threads) to what the consumer takes.
    #[arg(long)]
    autotune: bool,
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
    /// Simulate a training step of MS milliseconds per batch and report the data stall: the
    /// share of the time after the first batch that the step would have waited for data.
    #[arg(long, value_name = "MS")]
    step_ms: Option<f64>,
    /// Measure throughput over thread counts and prefetch depths, and print the curve.
    #[arg(long)]
    sweep: bool,
    /// With --sweep: also write the curve as an SVG chart to FILE.
    #[arg(long, value_name = "FILE", requires = "sweep")]
    plot: Option<PathBuf>,
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
        OpenOptions::with_access(if a.mmap { Access::Mmap } else { Access::Auto }),
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
        autotune: a.autotune,
        // starting an epoch ahead only helps when another epoch follows
        prepare_next_epoch: a.epochs > 1,
        ..LoaderConfig::default()
    };
    if a.sweep {
        return sweep(&a, &ds, &columns, &config, out);
    }
    let mut loader = Loader::new(Arc::clone(&ds), columns, config)?;
    let step = a
        .step_ms
        .map(|ms| std::time::Duration::from_secs_f64(ms.max(0.0) / 1e3));
    let t0 = Instant::now();
    let mut first_batch = None;
    let mut samples = 0u64;
    let mut bytes = 0u64;
    // the consumer's wait after the first batch, for the data-stall figure
    let mut stall = std::time::Duration::ZERO;
    for _ in 0..a.epochs {
        let mut it = loader.iter()?;
        loop {
            let w0 = Instant::now();
            let Some(batch) = it.next() else { break };
            let waited = w0.elapsed();
            let batch = batch.context("while streaming the dataset")?;
            if first_batch.is_some() {
                stall += waited;
            }
            first_batch.get_or_insert_with(|| t0.elapsed());
            samples += batch.len() as u64;
            for (_, c) in &batch.columns {
                bytes += match c {
                    ColumnData::Fixed { data, .. } => data.len() as u64,
                    ColumnData::List(items) => items.iter().map(value_bytes).sum(),
                };
            }
            if let Some(d) = step {
                std::thread::sleep(d);
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let stats = loader.stats();
    writeln!(
        out,
        "bench       {}: {} samples x {} epochs, batch {}, {} threads{}, prefetch {}, {}",
        a.dataset.display(),
        units::count(ds.len()),
        a.epochs,
        a.batch_size,
        stats.threads,
        if a.autotune {
            format!(" (autotuned: {} working at the end)", stats.active_threads)
        } else {
            String::new()
        },
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
    let after_first = wall - first_batch.map_or(0.0, |d| d.as_secs_f64());
    if let Some(ms) = a.step_ms {
        writeln!(
            out,
            "data stall  {:.1}% at {ms} ms per step (the step waited {:.3} s of {:.3} s after the first batch)",
            100.0 * stall.as_secs_f64() / after_first.max(1e-9),
            stall.as_secs_f64(),
            after_first
        )?;
    }
    writeln!(out, "profile")?;
    for line in stats.report().lines() {
        writeln!(out, "  {line}")?;
    }
    writeln!(
        out,
        "bottleneck  {}",
        bottleneck(
            &stats,
            wall,
            stall.as_secs_f64() / after_first.max(1e-9),
            a.step_ms.is_some()
        )
    )?;
    Ok(ExitCode::SUCCESS)
}

/// One sentence naming what limits throughput, and the change that would help most.
fn bottleneck(stats: &stokehold::Stats, wall: f64, stall: f64, simulated_step: bool) -> String {
    let busy: f64 = stats.stages.iter().map(|s| s.busy.as_secs_f64()).sum();
    let utilisation = busy / (wall * stats.threads as f64).max(1e-9);
    if simulated_step && stall < 0.05 {
        return format!(
            "none: the pipeline keeps up with the simulated step (stall {:.1}%); workers are {:.0}% busy, so fewer threads would do",
            stall * 100.0,
            utilisation * 100.0
        );
    }
    let Some(top) = stats.stages.iter().max_by(|a, b| a.busy.cmp(&b.busy)) else {
        return "nothing ran".into();
    };
    let share = top.busy.as_secs_f64() / busy.max(1e-12);
    let advice = if top.name.contains("decode")
        || top.name.contains("crop")
        || top.name.contains("resize")
    {
        "decoding is CPU-bound and scales with cores: add threads (or cores); packing with --baseline helps progressive JPEGs, and --max-side helps large images"
    } else if top.name == "read" {
        "storage is the limit: use faster storage, a RAM-resident dataset (in_memory) or memory maps (--mmap)"
    } else if top.name.ends_with("collate") || top.name == "parse" {
        "per-sample overhead dominates: use larger batches, or fewer passthrough columns"
    } else {
        "that stage is the one to make cheaper, or to give more threads"
    };
    let waiting = stats.consumer_wait.as_secs_f64() / wall.max(1e-9);
    if waiting < 0.5 {
        format!(
            "the consumer waited for data only {:.0}% of the time, so the consumer, not the pipeline, sets the pace (workers {:.0}% busy; the largest stage is {} at {:.0}% of worker time)",
            waiting * 100.0,
            utilisation * 100.0,
            top.name,
            share * 100.0
        )
    } else {
        format!(
            "{} takes {:.0}% of worker time: {advice}",
            top.name,
            share * 100.0
        )
    }
}

/// Throughput over thread counts × prefetch depths (one epoch, or at most ~2,000 samples, each).
fn sweep(
    a: &BenchArgs,
    ds: &Arc<Dataset>,
    columns: &[Column],
    base: &LoaderConfig,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<usize> = (1..=cores * 2).collect();
    let prefetch = [1usize, 2, 4, 8];
    let max_batches = (2000 / a.batch_size.max(1) as usize).max(2);
    writeln!(
        out,
        "sweep       {}: samples/s by threads (rows) and prefetch (columns), {} batches of {} each",
        a.dataset.display(),
        max_batches,
        a.batch_size
    )?;
    write!(out, "{:>8}", "threads")?;
    for p in prefetch {
        write!(out, "{:>12}", format!("prefetch {p}"))?;
    }
    writeln!(out)?;
    let mut grid = Vec::new();
    let mut best = (0.0f64, 0usize, 0usize);
    for &t in &threads {
        write!(out, "{t:>8}")?;
        let mut row = Vec::new();
        for &p in &prefetch {
            let cfg = LoaderConfig {
                threads: t,
                prefetch: p,
                ..base.clone()
            };
            let mut l = Loader::new(Arc::clone(ds), columns.to_vec(), cfg)?;
            let t0 = Instant::now();
            let mut n = 0u64;
            for b in l.iter()?.take(max_batches) {
                n += b?.len() as u64;
            }
            let rate = n as f64 / t0.elapsed().as_secs_f64();
            if rate > best.0 {
                best = (rate, t, p);
            }
            write!(out, "{:>12}", units::count(rate as u64))?;
            row.push(rate);
        }
        writeln!(out)?;
        grid.push(row);
    }
    writeln!(
        out,
        "best        {} samples/s with {} threads and prefetch {}",
        units::count(best.0 as u64),
        best.1,
        best.2
    )?;
    if let Some(path) = &a.plot {
        std::fs::write(path, svg(&threads, &prefetch, &grid))
            .with_context(|| format!("writing {}", path.display()))?;
        writeln!(out, "plot        {}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A line chart: samples/s against threads, one line per prefetch depth.
fn svg(threads: &[usize], prefetch: &[usize], grid: &[Vec<f64>]) -> String {
    let (w, h, m) = (640.0, 400.0, 60.0);
    let max = grid.iter().flatten().copied().fold(1.0f64, f64::max) * 1.1;
    let x = |t: usize| m + (t as f64 - 1.0) / ((threads.len().max(2) - 1) as f64) * (w - 2.0 * m);
    let y = |v: f64| h - m - v / max * (h - 2.0 * m);
    let colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    s += &format!(
        "<line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - m,
        w - m,
        h - m
    );
    s += &format!(
        "<line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"black\"/>\n",
        h - m
    );
    for &t in threads {
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{t}</text>\n",
            x(t),
            h - m + 18.0
        );
    }
    for k in 0..=4 {
        let v = max * f64::from(k) / 4.0;
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
            m - 6.0,
            y(v) + 4.0,
            units::count(v as u64)
        );
    }
    s += &format!(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">threads</text>\n",
        w / 2.0,
        h - 15.0
    );
    s += &format!("<text x=\"{m}\" y=\"{}\">samples/s</text>\n", m - 20.0);
    for (j, p) in prefetch.iter().enumerate() {
        let pts: Vec<String> = threads
            .iter()
            .enumerate()
            .map(|(i, &t)| format!("{:.1},{:.1}", x(t), y(grid[i][j])))
            .collect();
        let c = colours[j % colours.len()];
        s += &format!(
            "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        s += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{c}\">prefetch {p}</text>\n",
            w - m - 80.0,
            m + 16.0 * j as f64
        );
    }
    s + "</svg>\n"
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
