//! The `stokehold` command line: `pack`, `inspect`, `verify`, `bench`, `explain`, `index`,
//! `sample-data`.
//!
//! The same code runs as the `stokehold` binary built by cargo and as the `stokehold` command that
//! `pip install stokehold` puts on the PATH (through the Python extension module).

mod bench;
mod commands;
mod progress;
mod units;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// stokehold: a data loading engine for model training.
#[derive(Debug, Parser)]
#[command(name = "stokehold", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Pack an image folder, a JSONL/CSV table of files, WebDataset tars, TFRecord files or
    /// Parquet files into a stokehold dataset (a directory or an object-storage URL).
    Pack(Box<commands::PackArgs>),
    /// Show a dataset's schema, counts, sizes, classes, shards and one sample.
    Inspect(commands::InspectArgs),
    /// Check every checksum, the index and the manifest of a dataset; exit status 1 on any fault.
    Verify(commands::VerifyArgs),
    /// Stream a dataset through the reading pipeline on several threads and report throughput
    /// and where the time goes.
    Bench(Box<bench::BenchArgs>),
    /// List the samples of one step on each rank (or one), computed from the loader's order and
    /// a saved state alone: ids, source, shard and record (or file and offset), key or path.
    Explain(Box<bench::ExplainArgs>),
    /// Index TFRecord, WebDataset, Parquet or JSONL files read in place ahead of time (a job that opens
    /// them then starts without a scan).
    Index(commands::IndexArgs),
    /// Write a folder of generated photograph-like JPEGs in class sub-folders (for trying things
    /// out; nothing is downloaded).
    SampleData(commands::SampleDataArgs),
}

/// The parser of every path argument that is written, or read as a local file: a local path, or
/// an error for a URL (`s3://...`), which these do not read or write yet (see
/// `stokehold_storage::location`). Datasets that are only read take [`dataset_location`].
pub(crate) fn local_path(s: &str) -> Result<std::path::PathBuf, String> {
    let p = std::path::PathBuf::from(s);
    stokehold_storage::require_local(&p).map_err(|e| e.to_string())?;
    Ok(p)
}

/// The parser of a dataset that is only read (`inspect`, `verify`, `bench`): a local path, or an
/// object-storage URL (`s3://`, `gs://`, `az://`, `https://`, ...; credentials and endpoint from
/// the environment, see docs/storage.md). Any other scheme (`file://`, ...) is refused as by
/// [`local_path`].
pub(crate) fn dataset_location(s: &str) -> Result<std::path::PathBuf, String> {
    let p = std::path::PathBuf::from(s);
    stokehold_storage::local_path(&p).map_err(|e| e.to_string())?;
    Ok(p)
}

/// The parser of every thread-count option: a number from 0 (one per core) to
/// [`stokehold_storage::max_threads`], refused beyond it with the reason (a huge count once ran
/// `pack` for 26 minutes on 23,590 threads).
pub(crate) fn thread_count(s: &str) -> Result<usize, String> {
    if s.trim().starts_with('-') {
        return Err(format!(
            "a thread count cannot be negative, got {s}: give 0 (one per core) or a number of threads"
        ));
    }
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("a number of threads (0: one per core), got {s:?}"))?;
    stokehold_storage::check_threads("the thread count", n).map_err(|e| e.to_string())
}

/// `--storage-option KEY=VALUE`, repeatable: options of an object store, for datasets at
/// `s3://`, `gs://`, `az://` or `https://` URLs.
#[derive(Debug, Clone, Default, clap::Args)]
#[group(skip)] // flattened into commands that may flatten it twice (bench storage)
pub(crate) struct StorageArgs {
    /// An option of the object store of an s3://, gs://, az:// or https:// dataset (repeatable),
    /// named as in fsspec / Hugging Face `storage_options`: endpoint_url=http://127.0.0.1:9000,
    /// region_name=us-east-1, key=..., secret=..., anon=true, retries=3, upload_part_bytes=16MiB
    /// as a number of bytes, ... Credentials otherwise come from the environment (better for
    /// secrets than a command line: see docs/storage.md). Values are never printed.
    #[arg(long = "storage-option", value_name = "KEY=VALUE", value_parser = storage_option)]
    storage_option: Vec<(String, String)>,
}

impl StorageArgs {
    /// The options as a map (a key given twice: the last value).
    pub(crate) fn map(&self) -> std::collections::BTreeMap<String, String> {
        self.storage_option.iter().cloned().collect()
    }
}

/// How files read in place (TFRecord files, WebDataset tars, Parquet files, JSON Lines) are opened:
/// `--format`, `--fields`, `--index-dir`.
#[derive(Debug, Clone, Default, clap::Args)]
#[group(skip)]
pub(crate) struct InPlaceArgs {
    /// Files read in place whose names do not say their format: tfrecord, webdataset, parquet or jsonl.
    #[arg(long = "format", value_name = "FORMAT", value_parser = in_place_format)]
    format: Option<stokehold_ingest::inplace::InPlaceFormat>,
    /// Files read in place: the member extensions or feature names to load, as `pack --fields`
    /// takes them (jpg,cls,txt?). Default: pack's choice (every one at least half the samples
    /// have).
    #[arg(long = "fields", value_name = "LIST")]
    fields: Option<String>,
    /// Files read in place: where their record indexes are kept (default
    /// $STOKEHOLD_INDEX_DIR, else ~/.cache/stokehold/index).
    #[arg(long = "index-dir", value_name = "DIR", value_parser = local_path)]
    index_dir: Option<std::path::PathBuf>,
}

impl InPlaceArgs {
    pub(crate) fn options(&self) -> anyhow::Result<stokehold_ingest::inplace::InPlaceOptions> {
        let fields = self
            .fields
            .as_deref()
            .map(stokehold_ingest::FieldChoice::parse_list)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--fields: {e}"))?;
        Ok(stokehold_ingest::inplace::InPlaceOptions {
            format: self.format,
            fields,
            index_dir: self.index_dir.clone(),
            ..Default::default()
        })
    }
}

fn in_place_format(s: &str) -> anyhow::Result<stokehold_ingest::inplace::InPlaceFormat> {
    use stokehold_ingest::inplace::InPlaceFormat;
    InPlaceFormat::parse(s).ok_or_else(|| anyhow::anyhow!("{}, got {s:?}", InPlaceFormat::names()))
}

/// Open `dataset` for reading (`inspect`, `verify`, `bench`): a stokehold dataset, or files read
/// in place (a TFRecord file, a tar, a directory or glob of them, at a path or URL).
pub(crate) fn open_dataset(
    dataset: &std::path::Path,
    options: stokehold_storage::OpenOptions,
    inplace: &InPlaceArgs,
) -> anyhow::Result<stokehold_storage::Dataset> {
    let o = inplace.options()?;
    stokehold_ingest::inplace::open(&[dataset.to_path_buf()], options, &o)
        .map_err(|e| open_error(dataset, e))
}

fn storage_option(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err("expected KEY=VALUE (e.g. endpoint_url=http://127.0.0.1:9000)".into()),
    }
}

/// clap's parse of `args` (program name first), with the one message it gets wrong put right:
/// `stokehold pack imgs`, with no destination, fills DEST with the one path given, so clap would
/// say that the *sources* are missing.
fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    Cli::try_parse_from(args).map_err(|e| {
        let rendered = e.render().to_string();
        // what is missing (the usage line after it names every argument)
        let text = rendered.split("Usage:").next().unwrap_or_default();
        let one_path = e.kind() == clap::error::ErrorKind::MissingRequiredArgument
            && text.contains("<SOURCES>")
            && !text.contains("<DEST>");
        match <Cli as clap::CommandFactory>::command().find_subcommand_mut("pack") {
            Some(pack) if one_path => pack.error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "one path was given: pack needs what to pack and then where to write the \
                 dataset, `stokehold pack SOURCES... DEST` (DEST: a new directory, or an \
                 object-storage URL such as s3://bucket/prefix)",
            ),
            _ => e,
        }
    })
}

/// Run with `args` (program name first), printing to stdout/stderr; returns the exit status.
pub fn main_from_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match parse(args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run(cli, &mut out) {
        Ok(code) => code,
        // the reader of our output went away (`stokehold inspect DS | head -1`): stop quietly
        // and successfully, as other Unix tools do
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            if let Err(f) = out.flush()
                && f.kind() == std::io::ErrorKind::BrokenPipe
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", error_message(&e));
            ExitCode::from(1)
        }
    }
}

/// Whether `e` is (or was caused by) a write to a closed pipe.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `e` and its causes, `: `-separated as `{:#}` prints them, each cause left out when the text
/// before it already says it (errors that print their source, as most I/O errors here do, would
/// otherwise print it twice).
pub fn error_message(e: &anyhow::Error) -> String {
    let mut chain = e.chain();
    let mut msg = chain.next().map(ToString::to_string).unwrap_or_default();
    for cause in chain {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(": ");
            msg.push_str(&c);
        }
    }
    msg
}

/// The error of opening `dataset` for reading (`inspect`, `verify`, `bench`), with what to do
/// when it is a local path that is not a dataset ([`stokehold_ingest::sources::not_a_dataset`],
/// the explanation Python gives too): the raw error would only say that `manifest.json` is
/// missing (or, under a file, that the file is not a directory).
pub(crate) fn open_error(
    dataset: &std::path::Path,
    e: stokehold_format::FormatError,
) -> anyhow::Error {
    use stokehold_ingest::sources::{Front, not_a_dataset};
    match not_a_dataset(dataset, &e, Front::Cli) {
        Some(msg) => anyhow::anyhow!(msg),
        None => e.into(),
    }
}

/// Run a parsed command line, writing its report to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Pack(a) => commands::pack(*a, out),
        Command::Inspect(a) => commands::inspect(a, out),
        Command::Verify(a) => commands::verify(a, out),
        Command::SampleData(a) => commands::sample_data(a, out),
        Command::Bench(a) => bench::bench(*a, out),
        Command::Explain(a) => bench::explain(*a, out),
        Command::Index(a) => commands::index(a, out),
    }
}

/// Parse and run `args` (without the program name), capturing the report: for tests.
pub fn run_captured(args: &[&str]) -> (anyhow::Result<ExitCode>, String) {
    let mut out = Vec::new();
    let r = parse(std::iter::once("stokehold").chain(args.iter().copied()))
        .map_err(anyhow::Error::from)
        .and_then(|cli| run(cli, &mut out));
    (r, String::from_utf8_lossy(&out).into_owned())
}
