//! The subcommands.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Args;
use stokehold_format::{FieldType, FieldValue, ImageCodec, Limits, Manifest, WriteOptions};
use stokehold_ingest::{FieldChoice, ImagePolicy, PackOptions, Skipped, SourceKind, VideoPolicy};
use stokehold_storage::ManifestIo;
use stokehold_storage::{DatasetWriteOptions, VerifyOptions, verify_dataset};

use crate::local_path;
use crate::progress::Bar;
use crate::units;

#[derive(Debug, Args)]
pub struct PackArgs {
    /// What to pack: an image-folder directory; a .jsonl or .csv file; .tar files (or a directory
    /// of them); .tfrecord files (or a directory of them); .parquet files (or a directory of
    /// them, e.g. a Hugging Face dataset's data/ folder).
    #[arg(required = true, num_args = 1.., value_parser = local_path)]
    sources: Vec<PathBuf>,
    /// The dataset directory to create (it must not exist, or be empty, unless --overwrite), or
    /// an object-storage URL (s3://bucket/prefix, gs://..., az://...): shards are uploaded
    /// there, the manifest last (docs/storage.md).
    #[arg(value_parser = crate::dataset_location)]
    dest: PathBuf,
    #[command(flatten)]
    storage: crate::StorageArgs,
    /// The kind of source, when it cannot be told from the names:
    /// image-folder, jsonl, csv, webdataset, tfrecord, parquet.
    #[arg(long = "from", value_name = "KIND")]
    from: Option<String>,
    /// Target shard size (e.g. 256MiB, 1G; not 0).
    #[arg(long, default_value = "256MiB", value_parser = shard_size)]
    shard_size: u64,
    /// Align every record to this many bytes (a power of two; 4096 suits direct I/O).
    #[arg(long, default_value_t = 1)]
    align: u32,
    /// zstd level for compressed fields.
    #[arg(long, default_value_t = 3)]
    zstd_level: i32,
    /// Threads for reading and encoding (0: one per core).
    #[arg(long, default_value_t = 0, value_parser = crate::thread_count, allow_negative_numbers = true)]
    threads: usize,
    /// Fail on the first unusable input (unreadable file, non-image, corrupt record) instead of
    /// skipping it and counting it.
    #[arg(long)]
    strict: bool,
    /// WebDataset: keep pickle members (.pyd, .pickle, .pt, .pth) as opaque bytes (never
    /// unpickled by stokehold). By default they are left out.
    #[arg(long)]
    keep_pickle: bool,
    /// JSONL/CSV: the column that names each sample's file.
    #[arg(long)]
    path_column: Option<String>,
    /// Replace DEST if it is a stokehold dataset (only once the new dataset is complete; a
    /// folder holding anything else, or a source, is never replaced).
    #[arg(long)]
    overwrite: bool,
    /// Fail, writing nothing, when more than this fraction of the inputs is skipped (0 to 1;
    /// 1 allows any).
    #[arg(long, value_name = "F", default_value_t = stokehold_ingest::DEFAULT_MAX_SKIP_FRACTION, value_parser = fraction)]
    max_skip_fraction: f64,
    /// WebDataset, TFRecord, Parquet, JSONL: the member extensions, feature names, column names
    /// or keys to pack, e.g. jpg,cls,txt? (NAME? marks a text, bytes or array field a sample may lack or
    /// hold null: stored empty there). Default: every one at least half the samples have.
    #[arg(long, value_name = "LIST")]
    fields: Option<String>,
    /// Skip (and count) images of more pixels (width x height) than this, checked from the header
    /// before any decode or transcode. The default is the loader's limit.
    #[arg(long, value_name = "N", default_value_t = stokehold_ops::DEFAULT_MAX_PIXELS)]
    max_pixels: u64,
    /// Rewrite progressive JPEGs as baseline, losslessly (same pixels; about 3x faster to decode
    /// and croppable).
    #[arg(long)]
    baseline: bool,
    /// Re-encode images whose longer side is over N pixels to N (lossy; recorded in the
    /// manifest), like FFCV's max_resolution.
    #[arg(long, value_name = "N")]
    max_side: Option<u32>,
    /// JPEG quality of images re-encoded by --max-side.
    #[arg(long, default_value_t = 90)]
    jpeg_quality: u8,
    /// Re-encode videos with a keyframe every K frames (H.264, x264 CRF --video-crf, the first
    /// video stream only; lossy, recorded in the manifest), so that a random clip decodes at most
    /// K - 1 frames it does not keep. Needs the ffmpeg command.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=1000))]
    video_keyint: Option<u32>,
    /// x264's constant rate factor for --video-keyint (0-51; 18: visually lossless).
    #[arg(long, value_name = "CRF", default_value_t = 18, value_parser = clap::value_parser!(u8).range(0..=51))]
    video_crf: u8,
    /// Store JPEGs exactly as given. By default every JPEG is rewritten losslessly as baseline
    /// with restart markers aligned to MCU rows (same pixels, ~4% larger, ~0.2 ms of CPU per
    /// ImageNet-sized image), so random crops decode only the rows and columns they need (~1.3×
    /// as fast; centre crops ~1.25×).
    #[arg(long)]
    no_restart_markers: bool,
    /// The default (kept so that older scripts still run): JPEGs get restart markers.
    #[arg(long, hide = true, conflicts_with = "no_restart_markers")]
    restart_markers: bool,
    /// Tokenize text into a token dataset with this tokenizer.json (JSONL sources).
    #[arg(long, value_name = "PATH", value_parser = local_path)]
    tokenizer: Option<PathBuf>,
    /// With --tokenizer: the JSONL key holding each document's text.
    #[arg(long, default_value = "text", value_name = "FIELD")]
    text_field: String,
    /// With --tokenizer: put this token (by name, e.g. "<s>") before every document.
    #[arg(long, value_name = "TOKEN")]
    prepend_bos: Option<String>,
    /// With --tokenizer: put this token (by name, e.g. "</s>") after every document.
    #[arg(long, value_name = "TOKEN")]
    append_eos: Option<String>,
}

/// A fraction from 0 to 1.
fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a fraction from 0 to 1 (e.g. 0.01)")),
    }
}

/// Print a count of `items`, where they are listed, and the first five.
fn list_inputs(
    out: &mut dyn Write,
    (one, many): (&str, &str),
    file: &std::path::Path,
    items: &[Skipped],
) -> std::io::Result<()> {
    if items.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {} (listed in {}):",
        units::counted(items.len() as u64, one, many),
        file.display()
    )?;
    for s in items.iter().take(5) {
        writeln!(out, "    {}: {}", s.input, s.reason)?;
    }
    if items.len() > 5 {
        writeln!(out, "    ...")?;
    }
    Ok(())
}

pub fn pack(a: PackArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let kind = match &a.from {
        Some(k) => Some(SourceKind::parse(k).with_context(|| {
            format!("unknown --from {k:?}: use image-folder, jsonl, csv, webdataset, tfrecord or parquet")
        })?),
        None => None,
    };
    let options = PackOptions {
        write: DatasetWriteOptions {
            write: WriteOptions {
                align: a.align,
                zstd_level: a.zstd_level,
            },
            target_shard_bytes: a.shard_size,
            overwrite: a.overwrite,
        },
        threads: a.threads,
        strict: a.strict,
        keep_pickle: a.keep_pickle,
        path_column: a.path_column,
        images: ImagePolicy {
            baseline: a.baseline,
            max_side: a.max_side,
            quality: a.jpeg_quality,
            max_pixels: a.max_pixels,
            restart_markers: a.restart_markers
                || (stokehold_ingest::DEFAULT_RESTART_MARKERS && !a.no_restart_markers),
        },
        video: VideoPolicy {
            keyint: a.video_keyint,
            crf: a.video_crf,
        },
        max_skip_fraction: a.max_skip_fraction,
        fields: a
            .fields
            .as_deref()
            .map(FieldChoice::parse_list)
            .transpose()?,
        storage_options: a.storage.map(),
        ..PackOptions::default()
    };
    let bar = Bar::new();
    let t0 = Instant::now();
    let report = match &a.tokenizer {
        Some(tokenizer) => {
            if kind.is_some_and(|k| k != SourceKind::Jsonl) {
                bail!("--tokenizer reads JSONL sources (--from jsonl)");
            }
            let tokens = stokehold_ingest::TokenOptions {
                text_field: a.text_field.clone(),
                tokenizer: tokenizer.clone(),
                prepend_bos: a.prepend_bos.clone(),
                append_eos: a.append_eos.clone(),
            };
            stokehold_ingest::pack_tokens(&a.sources, &a.dest, &options, &tokens, &bar)?
        }
        None => stokehold_ingest::pack(&a.sources, &a.dest, kind, &options, &bar)?,
    };
    let secs = t0.elapsed().as_secs_f64();
    let m = &report.manifest;
    let total_bytes: u64 = m.shards.iter().map(|s| s.bytes).sum();
    writeln!(
        out,
        "packed {} from {} ({}) in {:.2} s: {} samples/s, {}",
        units::counted(m.total_records, "sample", "samples"),
        report.kind.name(),
        units::bytes(report.input_bytes),
        secs,
        units::count((m.total_records as f64 / secs.max(1e-9)) as u64),
        units::rate(report.input_bytes, secs),
    )?;
    if let Some(c) = &m.classes {
        writeln!(
            out,
            "  {}",
            units::counted(c.len() as u64, "class", "classes")
        )?;
    }
    list_inputs(
        out,
        ("input skipped", "inputs skipped"),
        &a.dest.join("skipped.txt"),
        &report.skipped,
    )?;
    let images = m
        .schema
        .fields
        .iter()
        .any(|f| matches!(f.ty, FieldType::Image { .. }));
    if images && options.images.restart_markers {
        let progressive = match report.transcoded_to_baseline {
            0 => String::new(),
            n => format!(", {} of them progressive before", units::count(n)),
        };
        writeln!(
            out,
            "  JPEGs given restart markers for fast crops (lossless{progressive}; \
             --no-restart-markers keeps them as given)"
        )?;
        list_inputs(
            out,
            (
                "sample whose JPEGs the rewrite failed on, stored as given",
                "samples whose JPEGs the rewrite failed on, stored as given",
            ),
            &a.dest.join("kept-as-is.txt"),
            &report.kept_as_is,
        )?;
    } else if report.progressive_jpegs > 0 {
        if options.images.baseline {
            writeln!(
                out,
                "  {}, {} rewritten as baseline losslessly",
                units::counted(
                    report.progressive_jpegs,
                    "progressive JPEG",
                    "progressive JPEGs"
                ),
                units::count(report.transcoded_to_baseline)
            )?;
        } else {
            writeln!(
                out,
                "  {} (they decode about 3x slower than baseline; --baseline rewrites them \
                 losslessly)",
                units::counted(
                    report.progressive_jpegs,
                    "progressive JPEG",
                    "progressive JPEGs"
                )
            )?;
        }
    }
    if let Some(m) = options.images.max_side {
        writeln!(
            out,
            "  {} re-encoded to at most {m} px on the longer side (lossy, quality {})",
            units::counted(report.resized, "image", "images"),
            options.images.quality
        )?;
    }
    for n in &report.notes {
        writeln!(out, "  note: {n}")?;
    }
    writeln!(
        out,
        "  wrote {}, {}, manifest {}",
        units::counted(m.shards.len() as u64, "shard", "shards"),
        units::bytes(total_bytes),
        a.dest.join(stokehold_format::MANIFEST_FILE).display()
    )?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The dataset directory (or URL), or TFRecord, WebDataset, Parquet or JSONL files to read in
    /// place: a file, a directory of them, or a glob in quotes ('data/train-*.tfrecord').
    #[arg(value_parser = crate::dataset_location)]
    dataset: PathBuf,
    /// Which sample to show.
    #[arg(long, default_value_t = 0)]
    sample: u64,
    /// Print the manifest as JSON instead.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    storage: crate::StorageArgs,
    #[command(flatten)]
    inplace: crate::InPlaceArgs,
}

pub fn inspect(a: InspectArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let ds = crate::open_dataset(
        &a.dataset,
        stokehold::format::OpenOptions {
            storage_options: a.storage.map(),
            ..Default::default()
        },
        &a.inplace,
    )?;
    let m = ds.manifest();
    if a.json {
        write!(out, "{}", m.to_json())?;
        return Ok(ExitCode::SUCCESS);
    }
    let total_bytes: u64 = m.shards.iter().map(|s| s.bytes).sum();
    writeln!(
        out,
        "dataset   {} (format version {})",
        a.dataset.display(),
        m.format_version
    )?;
    writeln!(
        out,
        "samples   {} in {}, {} ({} per sample), records aligned to {} B",
        units::count(m.total_records),
        units::counted(m.shards.len() as u64, "shard", "shards"),
        units::bytes(total_bytes),
        units::bytes(total_bytes / m.total_records.max(1)),
        m.align
    )?;
    writeln!(out, "schema    {}", m.schema)?;
    if let Some(c) = &m.classes {
        let shown: Vec<&str> = c.iter().take(8).map(String::as_str).collect();
        let more = if c.len() > 8 { ", ..." } else { "" };
        writeln!(out, "classes   {}: {}{more}", c.len(), shown.join(", "))?;
    }
    if !m.source.is_null() {
        writeln!(out, "source    {}", m.source)?;
    }
    match m.source.get("restart_markers").and_then(|v| v.as_bool()) {
        Some(true) => writeln!(
            out,
            "jpegs     rewritten losslessly with row-aligned restart markers (fast crops)"
        )?,
        Some(false) => writeln!(
            out,
            "jpegs     stored as given (packed with --no-restart-markers)"
        )?,
        None => {}
    }
    show_shards(m, out)?;
    if ds.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    if a.sample >= ds.len() {
        bail!(
            "--sample {} is out of range: the dataset has {} samples",
            a.sample,
            ds.len()
        );
    }
    let values = ds.get(a.sample)?;
    writeln!(out, "sample {}", a.sample)?;
    for (field, v) in m.schema.fields.iter().zip(&values) {
        writeln!(
            out,
            "  {:<12} {}",
            field.name,
            describe(&field.ty, v, m.classes.as_deref())
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn show_shards(m: &Manifest, out: &mut dyn Write) -> std::io::Result<()> {
    let n = m.shards.len();
    for (i, s) in m.shards.iter().enumerate() {
        if n > 6 && i == 3 {
            writeln!(out, "          ... {} more shards ...", n - 5)?;
        }
        if n > 6 && (3..n - 2).contains(&i) {
            continue;
        }
        writeln!(
            out,
            "shard     {}  {}  {}  crc32c {:08x}",
            s.file,
            units::counted(s.records, "sample", "samples"),
            units::bytes(s.bytes),
            s.crc32c
        )?;
    }
    Ok(())
}

fn describe(ty: &FieldType, v: &FieldValue<'_>, classes: Option<&[String]>) -> String {
    match v {
        FieldValue::List(items) => {
            let item_ty = match ty {
                FieldType::List { item } => item.field_type(),
                other => other.clone(),
            };
            let parts: Vec<String> = items.iter().map(|v| describe(&item_ty, v, None)).collect();
            format!("{} items: [{}]", items.len(), parts.join("; "))
        }
        FieldValue::Int64(i) => {
            match classes.and_then(|c| usize::try_from(*i).ok().and_then(|k| c.get(k))) {
                Some(name) if matches!(ty, FieldType::Int64) => format!("{i} ({name})"),
                _ => i.to_string(),
            }
        }
        FieldValue::Float64(x) => x.to_string(),
        FieldValue::String(s) => {
            let short: String = s.chars().take(80).collect();
            let more = if s.chars().count() > 80 { "..." } else { "" };
            format!("{short:?}{more}")
        }
        FieldValue::Bytes(b) => format!(
            "{} bytes: {:?}...",
            b.len(),
            b[..b.len().min(16)].escape_ascii().to_string()
        ),
        FieldValue::Image(b) => match ImageCodec::sniff(b) {
            Some(ImageCodec::Jpeg) => match stokehold_ingest::jpeg::parse_header(b) {
                Ok(h) => format!(
                    "JPEG {}x{}, {} components, {}, {}",
                    h.width,
                    h.height,
                    h.components,
                    if h.progressive {
                        "progressive"
                    } else if stokehold_ops::restart::RestartIndex::parse(b).is_some() {
                        "baseline with row-aligned restart markers"
                    } else {
                        "baseline"
                    },
                    units::bytes(b.len() as u64)
                ),
                Err(e) => format!(
                    "JPEG with an unreadable header ({e}), {}",
                    units::bytes(b.len() as u64)
                ),
            },
            Some(c) => format!("{} image, {}", c.name(), units::bytes(b.len() as u64)),
            None => format!("unknown image data, {}", units::bytes(b.len() as u64)),
        },
        FieldValue::Array(a) => format!("ndarray {} {:?}", a.dtype.name(), a.shape),
    }
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The dataset directory.
    #[arg(value_parser = crate::dataset_location)]
    dataset: PathBuf,
    /// Report every fault, not only the first.
    #[arg(long)]
    all: bool,
    /// Threads (0: one per core).
    #[arg(long, default_value_t = 0, value_parser = crate::thread_count, allow_negative_numbers = true)]
    threads: usize,
    /// Read with positional reads instead of memory maps (slower; use it when shards may be
    /// truncated by another process during the check).
    #[arg(long)]
    no_mmap: bool,
    #[command(flatten)]
    storage: crate::StorageArgs,
    #[command(flatten)]
    inplace: crate::InPlaceArgs,
}

pub fn verify(a: VerifyArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    if !stokehold_ingest::inplace::is_packed(&a.dataset) {
        return verify_in_place(a, out);
    }
    let options = VerifyOptions {
        all: a.all,
        threads: a.threads,
        mmap: !a.no_mmap,
        storage_options: a.storage.map(),
        ..VerifyOptions::default()
    };
    let manifest =
        match Manifest::load_with(&a.dataset, &Limits::default(), &options.storage_options) {
            // a prefix in object storage without a manifest: the files under it, read in place
            // (as `inspect`, `bench` and Python's Dataset open it)
            Err(stokehold_format::FormatError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound
                    && stokehold_storage::Place::of(&a.dataset).is_remote() =>
            {
                return verify_in_place(a, out);
            }
            r => r.map_err(|e| crate::open_error(&a.dataset, e))?,
        };
    let total: u64 = manifest.shards.iter().map(|s| s.bytes).sum();
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "verifying {bar:30} {percent:>3}%  {binary_bytes_per_sec}  ETA {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let done = AtomicU64::new(0);
    let t0 = Instant::now();
    let report = verify_dataset(&a.dataset, options, &|n| {
        done.fetch_add(n, Ordering::Relaxed);
        bar.inc(n);
    })?;
    bar.finish_and_clear();
    let secs = t0.elapsed().as_secs_f64();
    if report.ok() {
        writeln!(
            out,
            "ok: {}, {}, {}: every checksum matches ({})",
            units::counted(report.shards as u64, "shard", "shards"),
            units::counted(report.records, "record", "records"),
            units::bytes(report.bytes),
            units::rate(report.bytes, secs)
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    failed(&report.faults, &a, out)
}

/// The end of a `verify` that found faults: each one, then the verdict (exit status 1).
fn failed(
    faults: &[impl std::fmt::Display],
    a: &VerifyArgs,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    for f in faults {
        writeln!(out, "error: {f}")?;
    }
    if a.all {
        writeln!(
            out,
            "FAILED: {} in {}",
            units::counted(faults.len() as u64, "fault", "faults"),
            a.dataset.display()
        )?;
    } else {
        writeln!(
            out,
            "FAILED: stopped at the first fault (--all lists every one)"
        )?;
    }
    Ok(ExitCode::from(1))
}

/// `verify` of files read in place: open them (their kept indexes checked against the files,
/// or each scanned again), then read and decode every sample, checking each record's
/// checksum (a TFRecord's CRC-32C of its data; for a tar member, the one its scan recorded).
fn verify_in_place(a: VerifyArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let options = stokehold_storage::OpenOptions {
        access: if a.no_mmap {
            stokehold_storage::Access::Pread
        } else {
            stokehold_storage::Access::Auto
        },
        verify_records: true,
        storage_options: a.storage.map(),
        ..Default::default()
    };
    let ds = crate::open_dataset(&a.dataset, options, &a.inplace)?;
    let bar = indicatif::ProgressBar::new(ds.len());
    let t0 = Instant::now();
    let mut faults = Vec::new();
    for i in 0..ds.len() {
        if let Err(e) = ds.get(i) {
            faults.push(format!("sample {i}: {e}"));
            if !a.all {
                break;
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let bytes: u64 = ds.manifest().shards.iter().map(|s| s.bytes).sum();
    let format = stokehold_ingest::inplace::in_place_format(&ds).unwrap_or("in place");
    if faults.is_empty() {
        writeln!(
            out,
            "ok: {} {format} files, {}, {}: every record reads and its checksum matches ({})",
            ds.shards().len(),
            units::counted(ds.len(), "sample", "samples"),
            units::bytes(bytes),
            units::rate(bytes, t0.elapsed().as_secs_f64())
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    failed(&faults, &a, out)
}

#[derive(Debug, Args)]
pub struct IndexArgs {
    /// TFRecord files, WebDataset tars or Parquet files (files, directories of them, globs), at
    /// paths or URLs.
    #[arg(required = true, value_parser = crate::dataset_location)]
    paths: Vec<PathBuf>,
    /// Keep each index beside its file, as FILE.skhidx (the directory must be writable; the
    /// index then travels with the files, to every machine that reads them).
    #[arg(long)]
    beside: bool,
    /// Scan every file again, whatever index is kept.
    #[arg(long)]
    rebuild: bool,
    #[command(flatten)]
    inplace: crate::InPlaceArgs,
    #[command(flatten)]
    storage: crate::StorageArgs,
}

/// `stokehold index`: build (or check) the record indexes of files read in place ahead of
/// time, so that the first open by a training job does not scan.
pub fn index(a: IndexArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let mut inplace = a.inplace.options()?;
    inplace.beside = a.beside;
    inplace.rebuild = a.rebuild;
    inplace.must_keep = true;
    let options = stokehold_storage::OpenOptions {
        storage_options: a.storage.map(),
        ..Default::default()
    };
    let t0 = Instant::now();
    let r = stokehold_ingest::inplace::index_files(&a.paths, &options, &inplace)?;
    let secs = t0.elapsed().as_secs_f64();
    let kept = r.files - r.scanned;
    let place = if a.beside {
        "beside each file (.skhidx)".to_string()
    } else {
        match inplace
            .index_dir
            .clone()
            .or_else(stokehold_ingest::inplace::default_index_dir)
        {
            Some(d) => format!("in {}", d.display()),
            None => "nowhere (no index directory: give --index-dir or --beside)".to_string(),
        }
    };
    writeln!(
        out,
        "indexed {} {} files, {}: {}, {} ({})",
        r.files,
        r.format,
        units::counted(r.records, "record", "records"),
        units::bytes(r.bytes),
        if kept == 0 {
            format!("all scanned in {secs:.3} s")
        } else {
            format!("{} scanned, {kept} kept from before", r.scanned)
        },
        units::rate(r.bytes, secs)
    )?;
    writeln!(out, "indexes kept {place}")?;
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    if r.damaged > 0 {
        writeln!(
            out,
            "warning: {} could not be read (each fails when loaded, naming file and offset; \
             `stokehold verify` lists them)",
            units::counted(r.damaged, "record", "records")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct SampleDataArgs {
    /// Output directory (class sub-folders are created inside it).
    #[arg(value_parser = local_path)]
    out: PathBuf,
    /// Number of images.
    #[arg(long, default_value_t = 1000)]
    images: usize,
    /// Number of classes.
    #[arg(long, default_value_t = 10)]
    classes: usize,
    /// Base size WIDTHxHEIGHT (each image varies by up to ±30%; half are portrait).
    #[arg(long, default_value = "500x375")]
    size: String,
    /// JPEG quality.
    #[arg(long, default_value_t = 90)]
    quality: u8,
    /// Seed (same seed, same files).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

pub fn sample_data(a: SampleDataArgs, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let (w, h) = a
        .size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .with_context(|| format!("--size {:?} must look like 500x375", a.size))?;
    let spec = stokehold_ingest::sample_data::SampleSpec {
        images: a.images,
        classes: a.classes,
        width: w,
        height: h,
        quality: a.quality.clamp(1, 100),
        seed: a.seed,
    };
    let t0 = Instant::now();
    let bytes = stokehold_ingest::sample_data::write_image_folder(&a.out, spec)
        .with_context(|| format!("writing {}", a.out.display()))?;
    writeln!(
        out,
        "wrote {} in {} to {} ({}) in {:.1} s",
        units::counted(a.images as u64, "JPEG", "JPEGs"),
        units::counted(a.classes as u64, "class", "classes"),
        a.out.display(),
        units::bytes(bytes),
        t0.elapsed().as_secs_f64()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The parser of `--shard-size`: a byte size, not 0 (which once wrote one shard per sample).
fn shard_size(s: &str) -> Result<u64, String> {
    match stokehold::parse_bytes(s)? {
        0 => Err(format!(
            "a shard size of at least 1 byte (shards of 16-256MiB suit most datasets), got {s:?}"
        )),
        n => Ok(n),
    }
}
