//! `stokehold bench`: stream a dataset through the loading engine with no model and report
//! throughput and where the time went, stage by stage; `stokehold bench storage`: what the
//! storage under it delivers for the loader's access pattern.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use stokehold::format::{Access, DType, Dataset, FieldType, OpenOptions};
use stokehold::stages::spec::TransformSpec;
use stokehold::storage_bench::{self, StorageOptions};
use stokehold::{
    Budget, ByteSize, ColumnData, DecodedCacheConfig, EngineSpec, Loader, LoaderConfig,
    SamplesSpec, Shuffle, Tail, TokenMode, TokenOptions,
};

use crate::local_path;
use crate::units;

mod mixture;
mod overhead;
mod packing;
mod storage;
mod sweep;

use storage::cache_note;

fn parse_access(s: &str) -> Result<Access, String> {
    Access::parse(s)
        .ok_or_else(|| format!("unknown access {s:?}: use auto, pread, mmap, direct or memory"))
}

/// The loader's configuration and the image stages: shared by `bench` and `bench storage`.
#[derive(Debug, Args)]
pub struct PipelineArgs {
    /// The whole loader as JSON (an `EngineSpec`: what `loader.config` shows in Python, e.g.
    /// `{"loader": {"batch_size": 256, "threads": 2}, "samples": {"kind": "records",
    /// "transforms": {...}}}`). The flags below then only set what the file leaves out.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    storage: crate::StorageArgs,
    #[command(flatten)]
    inplace: crate::InPlaceArgs,
    /// A token dataset: stream packed windows of N tokens (inputs and labels), as
    /// `SequenceLoader(seq_len=N)` does.
    #[arg(long, value_name = "N", conflicts_with_all = ["random_resized_crop", "resize"])]
    seq_len: Option<u32>,
    /// Samples per batch.
    #[arg(long, default_value_t = 256)]
    batch_size: u32,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0, value_parser = crate::thread_count, allow_negative_numbers = true)]
    threads: usize,
    /// Batches prepared ahead (with --autotune: the starting depth).
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Let the loader adjust its working threads (up to --threads) and its prefetch depth (within
    /// --memory-budget) while running.
    #[arg(long)]
    autotune: bool,
    /// With --autotune: the most memory batches prepared ahead may take (default: 10% of RAM, at
    /// most 2 GiB).
    #[arg(long, value_name = "SIZE")]
    memory_budget: Option<ByteSize>,
    /// Visit samples in a seeded random order (a global shuffle) instead of in order.
    #[arg(long)]
    shuffle: bool,
    /// Seed of the order.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Pad an epoch's last, partial batch with repeats instead of dropping it (the Loader's
    /// `drop_last=False`); by default the tail is dropped, as the Loader drops it.
    #[arg(long)]
    pad_last: bool,
    /// Read through memory maps instead of positional reads (same as --access mmap).
    #[arg(long)]
    mmap: bool,
    /// How shards are read: auto, pread, mmap, direct (O_DIRECT) or memory (docs/storage.md).
    #[arg(long, value_name = "MODE", value_parser = parse_access, conflicts_with = "mmap")]
    access: Option<Access>,
    /// RAM cache of whole shards with this budget (e.g. 8GiB), shared by the epochs.
    #[arg(long, value_name = "SIZE")]
    cache: Option<ByteSize>,
    /// Keep the images decoded and resized to this shorter side in RAM (the decoded cache); the
    /// random stages start from it. Its budget is half the RAM.
    #[arg(long, value_name = "N")]
    decoded_cache: Option<u32>,
    /// With --decoded-cache: also keep the decoded images in this local directory, across runs
    /// (the second run reads them instead of decoding).
    #[arg(long, value_name = "DIR", requires = "decoded_cache", value_parser = local_path)]
    decoded_cache_dir: Option<std::path::PathBuf>,
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

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// The dataset directory, or its URL (`s3://bucket/prefix`); or TFRecord files or
    /// WebDataset tars to read in place (a file, a directory of them, a glob in quotes); or a
    /// mixture of datasets described in a `.toml` or `.json` file (docs/mixtures.md).
    #[arg(required = true, value_parser = crate::dataset_location)]
    dataset: Option<PathBuf>,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Passes over the dataset.
    #[arg(long, default_value_t = 1)]
    epochs: u64,
    /// Simulate a training step of MS milliseconds per batch and report the data stall: the
    /// share of the time after the first batch that the step would have waited for data.
    #[arg(long, value_name = "MS")]
    step_ms: Option<f64>,
    /// Measure throughput over thread counts and prefetch depths, and print the curve. With
    /// --autotune, then compare the autotuned loader with the best setting found, both from a
    /// cold start, in alternating runs.
    #[arg(long)]
    sweep: bool,
    /// With --sweep: also write the curve as an SVG chart to FILE.
    #[arg(long, value_name = "FILE", requires = "sweep", value_parser = local_path)]
    plot: Option<PathBuf>,
    /// With --sweep: seconds each setting runs (after its first batch).
    #[arg(long, default_value_t = 2.0, value_name = "S", requires = "sweep")]
    sweep_seconds: f64,
    /// With --sweep --autotune: seconds of each run of the comparison (throughput is measured
    /// after 5 s).
    #[arg(long, default_value_t = 10.0, value_name = "S")]
    duration: f64,
    /// With --sweep --autotune: alternating runs of the best fixed setting and the autotuned
    /// loader.
    #[arg(long, default_value_t = 3, value_name = "N")]
    rounds: u32,
    /// Write each sample's stage spans (the newest --trace-capacity) as Chrome Trace Event JSON
    /// to FILE, for chrome://tracing or ui.perfetto.dev.
    #[arg(long, value_name = "FILE", value_parser = local_path)]
    trace: Option<PathBuf>,
    /// Spans kept for --trace (32 bytes each; older spans are dropped).
    #[arg(long, default_value_t = 1_000_000, value_name = "N")]
    trace_capacity: usize,
    /// Do not time the stages (the report then has no per-stage figures).
    #[arg(long)]
    no_profile: bool,
    /// Measure what stage timing costs: ROUNDS runs with it and ROUNDS without, alternating, on
    /// the same pipeline.
    #[arg(long, value_name = "ROUNDS")]
    overhead: Option<u32>,
    /// Skip the storage measurement at the end of the report.
    #[arg(long)]
    no_storage: bool,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Sequential and random (global-shuffle record) read throughput of the storage under a
    /// dataset, from a cold page cache where possible, against what the pipeline consumes.
    Storage(StorageArgs),
}

#[derive(Debug, Args)]
pub struct StorageArgs {
    /// The dataset directory.
    #[arg(value_parser = local_path)]
    dataset: PathBuf,
    /// Seconds of each measurement (the pipeline's, at most one pass over the dataset; the
    /// sequential and the random reads).
    #[arg(long, default_value_t = 3.0, value_name = "S")]
    seconds: f64,
    /// Threads issuing the random reads (default: the pipeline's thread count).
    #[arg(long, value_name = "N", value_parser = crate::thread_count, allow_negative_numbers = true)]
    io_threads: Option<usize>,
    /// Read with O_DIRECT (bypassing the page cache; falls back with a note where unsupported).
    #[arg(long)]
    direct: bool,
    /// Keep the page cache: do not drop the files' pages before each measurement.
    #[arg(long, conflicts_with = "cold")]
    warm: bool,
    /// Drop the whole page cache (writes /proc/sys/vm/drop_caches: needs root) before each
    /// measurement, instead of only the dataset's clean pages with posix_fadvise.
    #[arg(long)]
    cold: bool,
    #[command(flatten)]
    pipeline: PipelineArgs,
}

/// The image stages the flags ask for, if any.
fn image_specs(a: &PipelineArgs) -> anyhow::Result<Vec<TransformSpec>> {
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

/// The dataset and the loader the flags (or `--config`) describe.
pub(crate) struct Pipeline {
    /// The dataset (a mixture's first source).
    pub ds: Arc<Dataset>,
    /// A mixture's sources, in order (empty for one dataset).
    pub sources: Vec<Arc<Dataset>>,
    options: OpenOptions,
    pub spec: EngineSpec,
}

impl Pipeline {
    /// The loader of the spec, run with `config`.
    pub fn loader(&self, config: LoaderConfig) -> anyhow::Result<Loader> {
        let spec = EngineSpec {
            loader: config,
            ..self.spec.clone()
        };
        let batch_size = spec.loader.batch_size;
        let loader = if spec.mixture.is_some() {
            spec.build_mixture(self.sources.clone(), self.options.clone(), &mut |_| None)?
        } else {
            spec.build(Arc::clone(&self.ds), self.options.clone(), &mut |_| None)?
        }
        .loader;
        // what the Loader refuses: an epoch whose every sample the dropped tail would take
        let samples = loader.samples().len();
        anyhow::ensure!(
            loader.steps_per_epoch()? > 0 || samples == 0,
            "--batch-size {batch_size} is larger than an epoch of this dataset ({}): every \
             sample would be dropped as the last, partial batch; give a smaller --batch-size, \
             or --pad-last to pad the last batch with repeats",
            units::counted(samples, "sample", "samples")
        );
        Ok(loader)
    }

    /// The spec's loader configuration.
    pub fn config(&self) -> &LoaderConfig {
        &self.spec.loader
    }
}

/// What the flags describe: the samples (token windows, image stages, or every field as stored).
fn samples_spec(ds: &Dataset, a: &PipelineArgs) -> anyhow::Result<SamplesSpec> {
    if let Some(seq_len) = a.seq_len {
        anyhow::ensure!(seq_len > 0, "--seq-len must be at least 1");
        return Ok(SamplesSpec::Tokens(TokenOptions {
            mode: TokenMode::Packed { seq_len },
            dtype: DType::I32,
            ..TokenOptions::default()
        }));
    }
    let image = image_specs(a)?;
    if image.is_empty() {
        return Ok(SamplesSpec::Records {
            transforms: BTreeMap::new(),
            fields: None,
        });
    }
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
    Ok(SamplesSpec::Records {
        transforms: BTreeMap::from([(field, image)]),
        fields: None,
    })
}

/// The dataset and the loader the flags describe: `--config` when given (the flags fill in
/// what it leaves out), the flags otherwise.
fn pipeline(dataset: &std::path::Path, a: &PipelineArgs, epochs: u64) -> anyhow::Result<Pipeline> {
    let access = match (a.access, a.mmap) {
        (Some(x), _) => x,
        (None, true) => Access::Mmap,
        (None, false) => Access::Auto,
    };
    let options = OpenOptions {
        storage_options: a.storage.map(),
        ..OpenOptions::with_access(access)
    };
    let mixture = mixture::read(dataset)?;
    let sources = match &mixture {
        Some(m) => m
            .sources
            .iter()
            .map(|s| {
                let path = PathBuf::from(s.path.as_deref().unwrap_or_default());
                crate::open_dataset(&path, options.clone(), &a.inplace)
                    .map(Arc::new)
                    .with_context(|| format!("source '{}' of {}", s.name, dataset.display()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let ds = match sources.first() {
        Some(first) => Arc::clone(first),
        None => Arc::new(crate::open_dataset(dataset, options.clone(), &a.inplace)?),
    };
    let config = LoaderConfig {
        batch_size: a.batch_size,
        seed: a.seed,
        shuffle: if a.shuffle {
            Shuffle::Global
        } else {
            Shuffle::Sequential
        },
        tail: if a.pad_last { Tail::Pad } else { Tail::Drop },
        threads: a.threads,
        prefetch: a.prefetch,
        autotune: a.autotune,
        prefetch_auto: a.autotune,
        memory_budget: a.memory_budget.map_or(Budget::Auto, Budget::Bytes),
        // starting an epoch ahead only helps when another epoch follows
        prepare_next_epoch: epochs > 1,
        cache_bytes: a.cache.map_or(Budget::bytes(0), Budget::Bytes),
        decoded_cache: a.decoded_cache.map(|size| DecodedCacheConfig {
            dir: a.decoded_cache_dir.clone(),
            ..DecodedCacheConfig::in_ram(size, Budget::Auto)
        }),
        ..LoaderConfig::default()
    };
    let spec = match &a.config {
        Some(file) => {
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("reading --config {}", file.display()))?;
            spec_with_defaults(&text, &config)
                .with_context(|| format!("in --config {}", file.display()))?
        }
        None => EngineSpec {
            loader: config,
            samples: samples_spec(&ds, a)?,
            cache_dir: None,
            cache_dir_limit: None,
            mixture,
        },
    };
    spec.loader.validate()?;
    anyhow::ensure!(
        spec.mixture.is_none() || !sources.is_empty(),
        "--config describes a mixture: give its sources as the dataset (a mixture file)"
    );
    Ok(Pipeline {
        ds,
        sources,
        options,
        spec,
    })
}

/// An [`EngineSpec`] from JSON whose `loader` keys not given come from `flags` (so
/// `--config spec.json --threads 1` works when the file names no thread count).
fn spec_with_defaults(text: &str, flags: &LoaderConfig) -> anyhow::Result<EngineSpec> {
    let mut value: serde_json::Value = serde_json::from_str(text)?;
    let obj = value
        .as_object_mut()
        .context("the configuration must be a JSON object (an EngineSpec)")?;
    let mut loader = serde_json::to_value(flags)?;
    if let (Some(given), Some(base)) = (
        obj.get("loader").and_then(|l| l.as_object()),
        loader.as_object_mut(),
    ) {
        for (k, v) in given {
            base.insert(k.clone(), v.clone());
        }
    }
    obj.insert("loader".into(), loader);
    Ok(EngineSpec::from_json(&value.to_string())?)
}

/// A live progress line on a terminal (nothing otherwise): batches/s, samples/s, MB/s read.
struct Live {
    bar: Option<ProgressBar>,
    t0: Instant,
    last: Instant,
}

impl Live {
    fn new(batches: u64) -> Live {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::new(batches);
            b.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} batches  {msg}  ETA {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        });
        let now = Instant::now();
        Live {
            bar,
            t0: now,
            last: now,
        }
    }

    /// One more batch; the figures are refreshed at most 5 times a second.
    fn tick(&mut self, stats: impl FnOnce() -> stokehold::Stats) {
        let Some(bar) = &self.bar else { return };
        bar.inc(1);
        if self.last.elapsed() >= Duration::from_millis(200) {
            self.last = Instant::now();
            let s = stats();
            bar.set_message(live_message(
                s.batches,
                s.samples,
                s.bytes_read,
                self.t0.elapsed().as_secs_f64(),
            ));
        }
    }

    fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// "12.3 batches/s · 3,150 samples/s · 45.1 MB/s read".
fn live_message(batches: u64, samples: u64, bytes: u64, secs: f64) -> String {
    format!(
        "{:.1} batches/s · {} samples/s · {} read",
        batches as f64 / secs.max(1e-9),
        units::count((samples as f64 / secs.max(1e-9)) as u64),
        units::rate(bytes, secs)
    )
}

pub fn bench(a: BenchArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    if let Some(BenchCommand::Storage(s)) = a.command {
        return storage::storage(s, out);
    }
    let dataset = a.dataset.clone().context("a dataset directory is needed")?;
    let mut pl = pipeline(&dataset, &a.pipeline, a.epochs)?;
    let config = &mut pl.spec.loader;
    config.profile = !a.no_profile;
    if a.trace.is_some() {
        anyhow::ensure!(a.trace_capacity > 0, "--trace-capacity must be at least 1");
        config.trace_capacity = a.trace_capacity;
    }
    if a.sweep {
        if let Some(p) = &a.plot {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
            anyhow::ensure!(
                ext.eq_ignore_ascii_case("svg"),
                "--plot writes an SVG chart: give a path ending in .svg (got {})",
                p.display()
            );
        }
        return sweep::sweep(&a, &pl, out);
    }
    if let Some(rounds) = a.overhead {
        return overhead::overhead(&a, &pl, rounds.max(1), out);
    }
    let ds = Arc::clone(&pl.ds);
    let mut loader = pl.loader(pl.config().clone())?;
    let step = a
        .step_ms
        .map(|ms| std::time::Duration::from_secs_f64(ms.max(0.0) / 1e3));
    let mut live = Live::new(loader.steps()? * a.epochs);
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
                    ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } => {
                        data.len() as u64
                    }
                    ColumnData::List(items) => items.iter().map(value_bytes).sum(),
                };
            }
            live.tick(|| it.stats());
            if let Some(d) = step {
                std::thread::sleep(d);
            }
        }
    }
    live.finish();
    let wall = t0.elapsed().as_secs_f64();
    let stats = loader.stats();
    let c = pl.config();
    let shuffled = c.shuffle != Shuffle::Sequential;
    writeln!(
        out,
        "bench       {}: {} x {}, batch {}, {}{}, prefetch {}, {}",
        dataset.display(),
        units::counted(loader.samples().len(), "sample", "samples"),
        units::counted(a.epochs, "epoch", "epochs"),
        c.batch_size,
        units::counted(stats.threads as u64, "thread", "threads"),
        if c.autotune {
            format!(" (autotuned: {} working at the end)", stats.active_threads)
        } else {
            String::new()
        },
        if c.autotune {
            format!("{} (autotuned from {})", stats.prefetch, c.prefetch)
        } else {
            c.prefetch.to_string()
        },
        if shuffled {
            "global shuffle"
        } else {
            "in order"
        }
    )?;
    writeln!(
        out,
        "throughput  {} samples/s, {} of batches delivered ({} samples in {:.3} s; first batch after {:.1} ms)",
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
    // what the storage gives for this access pattern, briefly (1 s a measurement); local files
    // only (no request counts): the measurement of object storage comes with its prefetcher
    let mut storage_use = None;
    if !a.no_storage && stokehold_storage::Place::of(ds.dir()).is_local() {
        let report = storage_bench::measure(
            &ds,
            &StorageOptions {
                duration: Duration::from_secs(1),
                threads: stats.threads,
                seed: c.seed,
                ..StorageOptions::default()
            },
        )?;
        let read_rate = stats.bytes_read as f64 / wall.max(1e-9);
        let capacity = if shuffled {
            report.random.bytes_per_sec()
        } else {
            report.sequential.bytes_per_sec()
        };
        storage_use = Some(read_rate / capacity.max(1.0));
        writeln!(
            out,
            "storage     the pipeline read {} ({} records/s); the storage gives {} in random record reads, {} sequential{}: the pipeline used {:.0}% of the {} rate",
            units::rate(stats.bytes_read, wall),
            units::count((stats.records_read as f64 / wall.max(1e-9)) as u64),
            units::rate(report.random.bytes, report.random.seconds),
            units::rate(report.sequential.bytes, report.sequential.seconds),
            cache_note(&report),
            100.0 * read_rate / capacity.max(1.0),
            if shuffled {
                "random-read"
            } else {
                "sequential"
            }
        )?;
    }
    if let Some(path) = &a.trace {
        let json = loader
            .trace_json()
            .context("tracing was not on (an internal error)")?;
        std::fs::write(path, &json).with_context(|| format!("writing {}", path.display()))?;
        writeln!(
            out,
            "trace       {} ({} stage spans; open in chrome://tracing or ui.perfetto.dev)",
            path.display(),
            json.matches("\"ph\":\"X\"").count()
        )?;
    }
    if let Some(line) = packing::report(&ds, &pl.spec.samples, c.seed) {
        writeln!(out, "packing     {line}")?;
    }
    writeln!(
        out,
        "bottleneck  {}",
        bottleneck(
            &stats,
            wall,
            stall.as_secs_f64() / after_first.max(1e-9),
            a.step_ms.is_some(),
            storage_use,
            ds.manifest().source["restart_markers"] == true,
        )
    )?;
    Ok(ExitCode::SUCCESS)
}

/// One sentence naming what limits throughput, and the change that would help most.
/// `restart_marked`: the dataset's JPEGs were packed with restart markers.
fn bottleneck(
    stats: &stokehold::Stats,
    wall: f64,
    stall: f64,
    simulated_step: bool,
    storage_use: Option<f64>,
    restart_marked: bool,
) -> String {
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
    let advice = if top.name.starts_with("image/decoded-cache") {
        "the images come from the decoded cache already: add threads (or cores), or a smaller --decoded-cache size"
    } else if top.name.contains("decode")
        || top.name.contains("crop")
        || top.name.contains("resize")
    {
        if restart_marked {
            "decoding is CPU-bound and scales with cores: a decoded cache (--decoded-cache 256; Loader(decoded_cache=256)) would make it 3-8x faster, more threads (or cores) scale it, and packing with --baseline (progressive JPEGs) or --max-side (large images) cuts the decode"
        } else {
            "decoding is CPU-bound and scales with cores: a decoded cache (--decoded-cache 256; Loader(decoded_cache=256)) would make it 3-8x faster, more threads (or cores) scale it, and repacking with restart markers (lossless; `stokehold pack` adds them unless told --no-restart-markers, and this dataset has none) makes random crops decode only what they need (about 1.3x as fast as without them); --baseline (progressive JPEGs) or --max-side (large images) cuts the decode too"
        }
    } else if top.name == "read" {
        "storage is the limit: use faster storage, a RAM-resident dataset (in_memory) or memory maps (--mmap)"
    } else if top.name.ends_with("collate") || top.name == "parse" {
        "per-sample overhead dominates: use larger batches, or fewer passthrough columns"
    } else {
        "that stage is the one to make cheaper, or to give more threads"
    };
    let waiting = stats.consumer_wait.as_secs_f64() / wall.max(1e-9);
    // Storage is named only when reading costs the workers real time: a pipeline that read faster
    // than the cold-cache probe but spent little time in `read` was served by the page cache.
    let read_share = stats
        .stages
        .iter()
        .find(|s| s.name == "read")
        .map_or(0.0, |s| s.busy.as_secs_f64() / busy.max(1e-12));
    let reading_costs = !stats.profiled || read_share >= 0.25;
    if let Some(u) = storage_use.filter(|&u| u > 0.8 && waiting >= 0.5 && reading_costs) {
        return format!(
            "storage: the pipeline reads at {:.0}% of what the storage gives for its access pattern: use faster storage, a RAM-resident or memory-mapped (--mmap) cached dataset, or a sequential order",
            u * 100.0
        );
    }
    if !stats.profiled {
        return format!(
            "unknown (stage timing was off); the consumer waited for data {:.0}% of the time",
            waiting * 100.0
        );
    }
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

fn value_bytes(v: &stokehold::format::FieldValue<'_>) -> u64 {
    use stokehold::format::FieldValue;
    match v {
        FieldValue::Bytes(b) | FieldValue::Image(b) => b.len() as u64,
        FieldValue::String(s) => s.len() as u64,
        FieldValue::Array(a) => a.data.len() as u64,
        FieldValue::Int64(_) | FieldValue::Float64(_) => 8,
        FieldValue::List(items) => items.iter().map(value_bytes).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stats(stage: &str, consumer_wait_s: f64) -> stokehold::Stats {
        let st = |name: &str, ms: u64| stokehold::StageStats {
            name: name.into(),
            items: 100,
            busy: Duration::from_millis(ms),
            p50: Duration::from_micros(10),
            p99: Duration::from_micros(20),
        };
        stokehold::Stats {
            stages: vec![st("read", 10), st(stage, 900), st("label/collate", 1)],
            batches: 10,
            samples: 100,
            consumer_wait: Duration::from_secs_f64(consumer_wait_s),
            worker_wait: Duration::ZERO,
            mean_queue: 0.0,
            skipped: Vec::new(),
            threads: 1,
            active_threads: 1,
            caches: Vec::new(),
            bytes_read: 0,
            records_read: 100,
            prefetch: 2,
            profiled: true,
            storage: None,
            groups: Vec::new(),
            waits: Vec::new(),
        }
    }

    /// The sentence for a run of 1 s without a simulated step in which `stats` happened.
    fn say(stats: &stokehold::Stats, storage_use: Option<f64>, restart_marked: bool) -> String {
        bottleneck(stats, 1.0, 0.0, false, storage_use, restart_marked)
    }

    #[test]
    fn the_bottleneck_sentence_follows_the_largest_stage_and_the_consumer_wait() {
        // pipeline-bound (the consumer waited 80% of 1 s): advice for the largest stage
        let cached = say(&stats("image/decoded-cache+crop+resize", 0.8), None, true);
        assert!(
            cached.contains("from the decoded cache already"),
            "{cached}"
        );
        let decode = say(&stats("image/decode+crop+resize", 0.8), None, true);
        assert!(
            decode.contains("--decoded-cache") && !decode.contains("restart markers"),
            "{decode}"
        );
        // a dataset packed without restart markers is told to pack with them
        let plain = say(&stats("image/decode+crop+resize", 0.8), None, false);
        assert!(plain.contains("repacking with restart markers"), "{plain}");
        // consumer-bound: the sentence says so instead
        let consumer = say(&stats("image/decode+crop+resize", 0.1), None, true);
        assert!(
            consumer.contains("the consumer, not the pipeline, sets the pace"),
            "{consumer}"
        );
    }

    #[test]
    fn storage_is_named_only_when_reading_costs_worker_time() {
        // read at 358% of the cold-cache rate, but `read` is 1% of worker time: the page cache
        // served it, and the decode stage is the one to name
        let warm = say(&stats("image/decode+crop+resize", 0.8), Some(3.58), true);
        assert!(warm.starts_with("image/decode+crop+resize takes"), "{warm}");
        // reading takes most of the worker time and the storage is saturated: storage is named
        let mut slow_read = stats("image/decode+crop+resize", 0.8);
        slow_read.stages[0].busy = Duration::from_millis(2_000);
        let cold = say(&slow_read, Some(0.95), true);
        assert!(
            cold.starts_with("storage: the pipeline reads at 95%"),
            "{cold}"
        );
        // a storage with room to spare is not named however long reading takes
        let spare = say(&slow_read, Some(0.3), true);
        assert!(spare.starts_with("read takes"), "{spare}");
    }

    #[test]
    fn the_live_line_shows_batches_samples_and_bytes_per_second() {
        assert_eq!(
            live_message(25, 6_400, 90_000_000, 2.0),
            "12.5 batches/s · 3,200 samples/s · 45.0 MB/s read"
        );
        // no division by zero at the start
        assert!(live_message(0, 0, 0, 0.0).starts_with("0.0 batches/s"));
    }
}

/// `stokehold explain`: the samples of one step, from the order alone.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The dataset (or a mixture file), as for `bench`.
    #[arg(required = true, value_parser = crate::dataset_location)]
    dataset: PathBuf,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// A state saved by `loader.state_dict()` (JSON): the epoch, and where each run of one
    /// world size began, so that steps count from the epoch's start across resumes.
    #[arg(long, value_name = "FILE", value_parser = local_path)]
    state: Option<PathBuf>,
    /// The step, counted from the epoch's start (across resumes).
    #[arg(long, value_name = "N")]
    step: u64,
    /// Only this rank (default: every rank of that step).
    #[arg(long, value_name = "R")]
    rank: Option<u32>,
    /// The epoch (default: the state's, else 0).
    #[arg(long, value_name = "E")]
    epoch: Option<u64>,
    /// One JSON object per sample instead of a table.
    #[arg(long)]
    json: bool,
    /// Do not read each record for its key or path (only the index is used).
    #[arg(long)]
    no_read: bool,
}

/// `stokehold explain`.
pub fn explain(a: ExplainArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let pl = pipeline(&a.dataset, &a.pipeline, 1)?;
    let mut loader = pl.loader(pl.config().clone())?;
    if let Some(file) = &a.state {
        let text = std::fs::read_to_string(file)
            .with_context(|| format!("reading --state {}", file.display()))?;
        let state = stokehold::ResumeState::from_json(&text)
            .with_context(|| format!("in --state {}", file.display()))?;
        loader.load_state(&state)?;
    }
    let epoch = a.epoch.unwrap_or_else(|| loader.epoch());
    let ranks = match a.rank {
        Some(r) => r..r + 1,
        None => 0..loader.world_size_at(a.step, Some(epoch)),
    };
    for rank in ranks {
        let slots = loader.samples_at(a.step, Some(rank), Some(epoch))?;
        if !a.json {
            writeln!(out, "epoch {epoch} step {} rank {rank}:", a.step)?;
        }
        for s in slots {
            let d = loader.describe(s.id, !a.no_read);
            if a.json {
                let mut m = serde_json::Map::new();
                m.insert("epoch".into(), epoch.into());
                m.insert("step".into(), a.step.into());
                m.insert("rank".into(), rank.into());
                m.insert("id".into(), s.id.into());
                m.insert("is_padding".into(), s.padding.into());
                m.extend(d);
                writeln!(out, "{}", serde_json::Value::Object(m))?;
            } else {
                let rest: Vec<String> = d.iter().map(|(k, v)| format!("{k}={v}")).collect();
                let pad = if s.padding { " (padding)" } else { "" };
                writeln!(out, "  {}{pad}  {}", s.id, rest.join(" "))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
