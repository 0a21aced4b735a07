//! Files read where they are: TFRecord files of `tf.train.Example`s, WebDataset tars, Parquet
//! files and JSON Lines, on a local disk or in object storage, opened as a [`Dataset`] whose shards are the files
//! themselves ([`ShardReader::in_place`]), so the engine loads them as it loads a packed
//! dataset (shuffle, resume, caches, profile): one sample source over a [`Location`].
//!
//! Opening needs each record's place: each file is scanned once ([`FileIndex`]: a TFRecord's
//! framing and Examples, a tar's headers and members) and its index kept (in an index directory
//! keyed by the file's place, size and version, or beside the file with
//! [`InPlaceOptions::beside`]); a file whose size or version changed is scanned again. The
//! fields are chosen from the indexes' statistics with pack's rules, so the samples are those
//! `stokehold pack` of the same files gives.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use stokehold_format::{
    DATASET_VERSION, FORMAT_NAME, Field, FieldType, FormatError, MANIFEST_FILE, Manifest, Schema,
    ShardInfo, ShardReader, Storage, crc,
};
use stokehold_storage::{Dataset, Location, NodeDir, ObjectMeta, OpenOptions};

pub mod example_view;
pub mod index;
mod jsonl;
mod named_files;
pub use pages::{DEFAULT_PAGE_CACHE, PAGE_CACHE_ENV, PageCache, PageCacheStats};
mod pages;
mod parquet;
mod tfrecord;
mod webdataset;

pub use index::FileIndex;

pub use crate::sources::InPlaceFormat;
use crate::sources::{FieldChoice, Sniff, sniff, sniff_file};

/// The suffix of an index kept beside its file (`train-00000.tfrecord.skhidx`).
pub const INDEX_SUFFIX: &str = ".skhidx";

/// Bytes read per request while scanning a file.
const SCAN_CHUNK: usize = 8 << 20;
/// The windows a mapped JSONL file is searched in, in file order, by the scan's threads (see
/// [`jsonl::scan_slice`]): large enough that a window's bookkeeping is nothing beside its
/// search, small enough that the threads finish together.
const SCAN_WINDOW: usize = 16 << 20;

/// How files in place are opened.
#[derive(Debug, Clone, Default)]
pub struct InPlaceOptions {
    /// The files' format, when their names do not say (`None`: from the extension, or sniffed).
    pub format: Option<InPlaceFormat>,
    /// The fields, as `stokehold pack --fields` takes them (`None`: pack's choice).
    pub fields: Option<Vec<FieldChoice>>,
    /// Where indexes are kept (`None`: [`default_index_dir`]).
    pub index_dir: Option<PathBuf>,
    /// Keep (and look for) each index beside its file, as `FILE.skhidx` (it must be writable).
    pub beside: bool,
    /// Scan every file again, whatever is kept.
    pub rebuild: bool,
    /// Largest record (or tar member) accepted, in bytes (0: 1 GiB).
    pub max_record_bytes: u64,
    /// Failing to keep an index in the index directory is an error, not a note (`stokehold
    /// index`, whose whole point is to keep them).
    pub must_keep: bool,
    /// Parquet: the budget of the cache of decoded pages the dataset's threads share, in bytes
    /// (0: none; `None`: `$STOKEHOLD_PARQUET_PAGE_CACHE`, else [`DEFAULT_PAGE_CACHE`], at most a
    /// sixteenth of the machine's memory).
    pub page_cache: Option<u64>,
}

/// Where indexes are kept by default: `$STOKEHOLD_INDEX_DIR`, else
/// `$XDG_CACHE_HOME/stokehold/index`, else `~/.cache/stokehold/index`; `None` without a home
/// ([`stokehold_storage::node_dir::kept_dir`]).
pub fn default_index_dir() -> Option<PathBuf> {
    stokehold_storage::node_dir::kept_dir()
}

/// Whether `path` is a stokehold dataset (a directory or prefix holding a manifest), not files
/// to read in place. A URL counts as a dataset unless its last component names files
/// (an extension of a format read in place, or a pattern).
pub fn is_packed(path: &Path) -> bool {
    if stokehold_storage::Place::of(path).is_remote() {
        let last = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        return InPlaceFormat::of_name(&last).is_none() && !is_pattern(&last);
    }
    path.join(MANIFEST_FILE).is_file() || !path.exists() && !is_pattern(&path.to_string_lossy())
}

/// `path` with a `/` added when it is an object-store URL whose last component names no file of
/// a format read in place and no pattern (`s3://b/tfrecords` is the prefix `s3://b/tfrecords/`).
fn as_prefix(path: &Path) -> PathBuf {
    let text = path.to_string_lossy();
    if stokehold_storage::Place::of(path).is_local() || text.ends_with('/') {
        return path.to_path_buf();
    }
    let last = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let named = InPlaceFormat::of_name(last.strip_suffix(".gz").unwrap_or(&last)).is_some();
    if named || is_pattern(&last) {
        return path.to_path_buf();
    }
    PathBuf::from(format!("{text}/"))
}

fn is_pattern(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Open `paths` as a dataset: a stokehold dataset (one path, [`is_packed`]) with
/// [`Dataset::open_with`], or files read in place ([`open_in_place`]). One local path that is
/// neither (a folder of images, a file of another kind) is opened as a dataset, so that its
/// error says it is not one (and the front ends say how to make one).
pub fn open(
    paths: &[PathBuf],
    options: OpenOptions,
    inplace: &InPlaceOptions,
) -> Result<Dataset, FormatError> {
    match paths {
        [one] if is_packed(one) && stokehold_storage::Place::of(one).is_remote() => {
            // a prefix in object storage: a dataset when it holds a manifest, else the files
            // under it read in place when there are any (`s3://b/tfrecords`), else the
            // manifest's error
            match Dataset::open_with(one, options.clone()) {
                Err(e @ FormatError::Io { .. }) if is_not_found(&e) => {
                    let mut dir = one.as_os_str().to_owned();
                    dir.push("/");
                    let dir = [PathBuf::from(dir)];
                    match resolve(&dir, &options, inplace) {
                        Ok(resolved) => open_resolved(resolved, options, inplace),
                        Err(_) => Err(e),
                    }
                }
                r => r,
            }
        }
        [one] if is_packed(one) => Dataset::open_with(one, options),
        [one] if inplace.format.is_none() && stokehold_storage::Place::of(one).is_local() => {
            match local_kind(one) {
                // files found by their first bytes are found so again by `resolve`, one by one
                // (a README among them is left out)
                Local::Named | Local::Sniffed => open_in_place(paths, options, inplace),
                Local::Neither => Dataset::open_with(one, options),
            }
        }
        _ => open_in_place(paths, options, inplace),
    }
}

fn is_not_found(e: &FormatError) -> bool {
    matches!(e, FormatError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
}

/// What one local path that is not a stokehold dataset holds.
enum Local {
    /// Files a format read in place names (or a pattern: resolved by [`open_in_place`]).
    Named,
    /// Files whose names say nothing (ImageNet's `train-00000-of-01024`) but whose first bytes
    /// are a TFRecord's, a tar's or Parquet's.
    Sniffed,
    /// Neither.
    Neither,
}

fn local_kind(path: &Path) -> Local {
    let named = |n: &str| InPlaceFormat::of_name(n.strip_suffix(".gz").unwrap_or(n)).is_some();
    let sniffed = |p: &Path| match sniff_file(p) {
        Sniff::Format(_) => Local::Sniffed,
        // the in-place path says what it is
        Sniff::Gzip => Local::Named,
        Sniff::Unknown => Local::Neither,
    };
    let text = path.to_string_lossy();
    if is_pattern(&text) || named(&text) {
        return Local::Named;
    }
    if path.is_file() {
        // a file is never a packed dataset (that is a directory). One named like a shard of
        // records (`train-00000-of-01024`) whose bytes say nothing is named by the in-place
        // path, which asks for `format=`; one with another extension (an image, a manifest)
        // gets the packed path's advice on what to give instead
        return match sniffed(path) {
            Local::Neither if path.extension().is_none() => Local::Named,
            known => known,
        };
    }
    let Ok(dir) = std::fs::read_dir(path) else {
        return Local::Neither;
    };
    let mut names: Vec<String> = dir
        .flatten()
        // a symbolic link to a file is that file
        .filter(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && !n.ends_with(INDEX_SUFFIX))
        .collect();
    if names.iter().any(|n| named(n)) {
        return Local::Named;
    }
    names.sort();
    // the first extension-less file whose first bytes say something (a README says nothing)
    names
        .iter()
        .filter(|n| !n.contains('.'))
        .map(|n| sniffed(&path.join(n)))
        .find(|k| !matches!(k, Local::Neither))
        .unwrap_or(Local::Neither)
}

/// One file to read in place: its name in the location, its place (for messages), what the
/// location says of it, and its index.
#[derive(Debug)]
pub(crate) struct Scanned {
    name: String,
    place: String,
    meta: ObjectMeta,
    index: Arc<FileIndex>,
    /// Whether the index was scanned now (not kept from before).
    fresh: bool,
}

/// A field chosen for the schema.
#[derive(Debug)]
pub(crate) struct Chosen {
    name: String,
    ty: FieldType,
    optional: bool,
}

impl Chosen {
    /// The fields `pack`'s chooser picked, each with the type `ty` gives its name.
    fn typed(chosen: Vec<crate::sources::Chosen>, ty: impl Fn(&str) -> FieldType) -> Vec<Chosen> {
        chosen
            .into_iter()
            .map(|c| Chosen {
                ty: ty(&c.name),
                name: c.name,
                optional: c.optional,
            })
            .collect()
    }
}

/// Why the fields of files read in place could not be chosen.
#[derive(Debug)]
pub(crate) enum ChooseError {
    /// A kept index's statistics do not parse: damage ([`FormatError::Manifest`]).
    Index(String),
    /// The files or the field choice give no schema: the user's to change
    /// ([`FormatError::Input`]).
    Input(String),
}

impl From<crate::sources::SourceError> for ChooseError {
    fn from(e: crate::sources::SourceError) -> Self {
        ChooseError::Input(e.to_string())
    }
}

/// Why the scan of a file read in place failed: where (the byte offset in the file of the
/// record, member, page, row group or footer at fault) and what. Its text is the detail's; the
/// opener makes it a [`FormatError::Corrupt`] that names the file.
#[derive(Debug, thiserror::Error)]
#[error("{detail}")]
pub(crate) struct ScanError {
    /// The byte offset in the file.
    pub(crate) offset: u64,
    /// What is wrong there.
    pub(crate) detail: ScanDetail,
}

impl ScanError {
    /// `detail` at byte `offset`.
    pub(crate) fn at(offset: u64, detail: impl Into<ScanDetail>) -> ScanError {
        ScanError {
            offset,
            detail: detail.into(),
        }
    }
}

/// Two scans failed alike: at the same byte, saying the same (the details hold I/O and decoder
/// errors, which have no equality of their own).
impl PartialEq for ScanError {
    fn eq(&self, other: &ScanError) -> bool {
        self.offset == other.offset && self.detail.to_string() == other.detail.to_string()
    }
}

impl From<crate::tar::TarError> for ScanError {
    /// A tar's framing, at the offset the tar reader gives.
    fn from(e: crate::tar::TarError) -> ScanError {
        ScanError::at(e.offset(), ScanDetail::Tar(e))
    }
}

impl From<crate::tfrecord::TfRecordError> for ScanError {
    /// A TFRecord's framing, at the offset the reader gives.
    fn from(e: crate::tfrecord::TfRecordError) -> ScanError {
        ScanError::at(e.offset(), ScanDetail::TfRecord(e))
    }
}

/// What a scan found wrong (see [`ScanError`] for where).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScanDetail {
    /// Reading the file failed.
    #[error("{0}")]
    Read(#[from] io::Error),
    /// Bytes that cannot be used (a page header, a kept column's type, ...).
    #[error("{0}")]
    Unusable(#[from] crate::Unusable),
    /// A tar's framing (a header checksum, a member cut short, ...).
    #[error("{0}")]
    Tar(crate::tar::TarError),
    /// The tar ends at a member boundary without its end-of-archive blocks.
    #[error("{}", crate::tar::CUT)]
    TarCut,
    /// A sample of a tar whose members span 4 GiB or more.
    #[error("sample {key:?} spans {len} bytes (at most 4 GiB)")]
    SampleTooLarge { key: String, len: u64 },
    /// A TFRecord's framing (a length or its CRC, a record cut short, ...).
    #[error("{0}")]
    TfRecord(crate::tfrecord::TfRecordError),
    /// A kept JSONL index's statistics.
    #[error("the statistics do not parse: {0}")]
    Statistics(serde_json::Error),
    /// A video's frame index in a JSONL record's key bytes.
    #[error("a video's frame index passes 4 GiB")]
    VideoIndexTooLarge,
    /// A JSONL file's image sizes and video indexes together.
    #[error("the image sizes and video indexes of the file pass 4 GiB of index")]
    KeyBytesTooLarge,
    /// Only a file read front to back gets here.
    #[error("a Parquet file is not read front to back")]
    NotSequential,
    /// A thread reading the files a JSONL file's lines name panicked (a bug: said, not spread).
    #[error("a thread reading the files the lines name panicked")]
    NamedFilesPanicked,
    /// The `parquet` crate panicked on the file.
    #[error(
        "the Parquet decoder failed ({payload}): the file is damaged or uses what it does not \
         support"
    )]
    DecoderPanicked { payload: String },
    /// The footer does not read.
    #[error("not a readable Parquet file: {0}")]
    NotParquet(::parquet::errors::ParquetError),
    /// The page headers of a row group's column chunks.
    #[error("{0}")]
    RowGroupPages(crate::parquet_pages::RowGroupError),
    /// What was wrong while one column was looked at (to choose its kind).
    #[error("column {name:?}: {detail}")]
    Column {
        name: String,
        detail: Box<ScanDetail>,
    },
    /// A row group's reader could not be made.
    #[error("row group {group}: {source}")]
    RowGroupOpen {
        group: usize,
        source: ::parquet::errors::ParquetError,
    },
    /// A row group's rows do not decode.
    #[error("row group {group}: {source}")]
    RowGroupRead {
        group: usize,
        source: arrow_schema::ArrowError,
    },
    /// A row group that decodes to more rows than its footer says.
    #[error("row group {group}: more rows than its {rows}")]
    MoreRows { group: usize, rows: usize },
    /// A row group that decodes to fewer rows than its footer says.
    #[error("row group {group}: {decoded} rows decoded, the footer says {rows}")]
    RowCount {
        group: usize,
        decoded: usize,
        rows: usize,
    },
    /// A row's kept columns do not encode as a record.
    #[error("row group {group}, row {row}: {source}")]
    Encode {
        group: usize,
        row: usize,
        source: stokehold_format::RecordError,
    },
    /// A column chunk past the file's end.
    #[error("the column chunk's {len} bytes lie past the file's end")]
    ChunkPastEnd { len: u64 },
    /// A column chunk whose pages' rows do not add up to its row group's.
    #[error("the column chunk's pages hold {pages} rows, its row group {rows}")]
    PageRows { pages: u64, rows: usize },
    /// A dictionary-coded data page in a chunk with no dictionary page.
    #[error("a dictionary-coded page without a dictionary page")]
    NoDictionary,
    /// A row's range (its page, from the chunk's start when dictionary-coded) of 4 GiB or more.
    #[error("a page range of 4 GiB or more")]
    PageRangeTooLarge,
}

impl ChooseError {
    /// The error of opening the files under `root`.
    fn at(self, root: &Path) -> FormatError {
        let path = root.to_path_buf();
        match self {
            ChooseError::Index(detail) => FormatError::Manifest { path, detail },
            ChooseError::Input(detail) => FormatError::Input { path, detail },
        }
    }
}

/// Which records of a file's index a shard's records are (`None`: all, in order).
#[derive(Debug)]
pub(crate) struct Rows(Option<Vec<u32>>);

impl Rows {
    fn row(&self, record: u64) -> usize {
        match &self.0 {
            None => record as usize,
            Some(v) => v[record as usize] as usize,
        }
    }
}

/// The files to read in place: their location and its root, each file's name and meta (sorted
/// by name), and their format.
type Resolved = (
    Arc<dyn Location>,
    PathBuf,
    Vec<(String, ObjectMeta)>,
    InPlaceFormat,
);

/// The files `paths` name (files, directories or prefixes, patterns with `*` and `?` in their
/// last component), in one directory or prefix: its location and root, each file's name and
/// meta, sorted by name, and their format.
fn resolve(
    paths: &[PathBuf],
    options: &OpenOptions,
    inplace: &InPlaceOptions,
) -> Result<Resolved, FormatError> {
    let input = |p: &Path, detail: String| FormatError::Input {
        path: p.to_path_buf(),
        detail,
    };
    if paths.is_empty() {
        return Err(input(Path::new(""), "no files were given".into()));
    }
    let mut root: Option<(PathBuf, Arc<dyn Location>)> = None;
    let mut listing: Option<BTreeMap<String, ObjectMeta>> = None;
    // formats known from files' first bytes
    let mut sniffed: BTreeMap<String, InPlaceFormat> = BTreeMap::new();
    let mut files: BTreeMap<String, ObjectMeta> = BTreeMap::new();
    for p in paths {
        let local_dir = stokehold_storage::Place::of(p).is_local() && p.is_dir();
        let last = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (dir, pattern) = if local_dir || p.to_string_lossy().ends_with('/') {
            (p.clone(), Some("*".to_string()))
        } else if is_pattern(&last) {
            (parent(p), Some(last.clone()))
        } else {
            (parent(p), None)
        };
        match &root {
            None => {
                let loc = stokehold_storage::locate(&dir, &options.storage_options)?;
                root = Some((dir.clone(), loc));
            }
            Some((r, _)) if *r != dir => {
                return Err(input(
                    p,
                    format!(
                        "files read in place must be in one directory or prefix; this one is \
                         not in {} (open each directory as its own dataset, or move the files)",
                        r.display()
                    ),
                ));
            }
            Some(_) => {}
        }
        let loc = &root.as_ref().expect("set above").1;
        match pattern {
            None => {
                let meta = loc.head(&last).map_err(|e| FormatError::io(p, None, e))?;
                files.insert(last, meta);
            }
            Some(pat) => {
                let pat = glob::Pattern::new(&pat)
                    .map_err(|e| input(p, format!("{pat:?} is not a valid file pattern: {e}")))?;
                if listing.is_none() {
                    listing = Some(loc.list().map_err(|e| FormatError::io(&dir, None, e))?);
                }
                let listed = listing.as_ref().expect("listed above");
                let candidates: Vec<(&String, &ObjectMeta)> = listed
                    .iter()
                    .filter(|(name, _)| {
                        pat.matches(name)
                            && !name.starts_with('.')
                            && !name.ends_with(INDEX_SUFFIX)
                            && *name != MANIFEST_FILE
                    })
                    .collect();
                if candidates.is_empty() {
                    return Err(FormatError::NotFound {
                        path: p.clone(),
                        detail: if listed.is_empty() {
                            format!(
                                "no file matches: {} is empty or does not exist",
                                dir.display()
                            )
                        } else {
                            format!(
                                "no file matches this pattern (of the {} in {})",
                                listed.len(),
                                dir.display()
                            )
                        },
                    });
                }
                let mut n = 0;
                for &(name, meta) in &candidates {
                    if inplace.format.is_some() || InPlaceFormat::of_name(name).is_some() {
                        files.insert(name.clone(), meta.clone());
                        n += 1;
                    }
                }
                // names that say nothing (ImageNet's `train-00000-of-01024`): their first bytes
                // decide, when no name says a format
                let gzipped = candidates.iter().any(|(n, _)| n.ends_with(".gz"));
                if n == 0 {
                    for &(name, meta) in candidates.iter().filter(|(n, _)| !n.contains('.')) {
                        match sniff(&**loc, name, meta)
                            .map_err(|e| FormatError::io(dir.join(name), None, e))?
                        {
                            Sniff::Format(f) => {
                                sniffed.insert(name.clone(), f);
                                files.insert(name.clone(), meta.clone());
                                n += 1;
                            }
                            Sniff::Gzip => {
                                return Err(gzip_error(&dir.join(name)));
                            }
                            Sniff::Unknown => {}
                        }
                    }
                }
                if n == 0 {
                    return Err(input(
                        p,
                        if gzipped {
                            "holds only gzip-compressed files: decompress them first (`gunzip`), \
                             stokehold reads TFRecord, tar and JSONL files uncompressed"
                                .into()
                        } else {
                            format!(
                                "{} files match, none of them a .tfrecord, .tfrecords, .tar, \
                                 .parquet or .jsonl file, nor one whose first bytes are a \
                                 TFRecord's, a tar's or Parquet's (give format=\"tfrecord\", \
                                 \"webdataset\", \"parquet\" or \"jsonl\" when they are one)",
                                candidates.len()
                            )
                        },
                    ));
                }
            }
        }
    }
    let (root, location) = root.expect("one path at least");
    for name in files.keys() {
        if name.to_ascii_lowercase().ends_with(".gz") {
            return Err(gzip_error(&root.join(name)));
        }
    }
    let mut format = inplace.format;
    for (name, meta) in &files {
        let known = InPlaceFormat::of_name(name)
            .or(inplace.format)
            .or_else(|| sniffed.get(name).copied());
        let f = match known {
            Some(f) => f,
            None => match sniff(&*location, name, meta)
                .map_err(|e| FormatError::io(root.join(name), None, e))?
            {
                Sniff::Format(f) => f,
                Sniff::Gzip => return Err(gzip_error(&root.join(name))),
                Sniff::Unknown => {
                    return Err(input(
                        &root.join(name),
                        "is neither a TFRecord file, a tar nor a Parquet file (by its first \
                         bytes); give format=\"tfrecord\", \"webdataset\", \"parquet\" or \
                         \"jsonl\" if it is one"
                            .into(),
                    ));
                }
            },
        };
        match format {
            Some(g) if g != f && inplace.format.is_none() => {
                return Err(input(
                    &root.join(name),
                    format!(
                        "is a {} file, the others are {}: open one format at a time",
                        f.name(),
                        g.name()
                    ),
                ));
            }
            _ => format = Some(f),
        }
    }
    Ok((
        location,
        root,
        files.into_iter().collect(),
        format.expect("one file at least"),
    ))
}

fn parent(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The error of a gzip-compressed file given to read in place.
fn gzip_error(path: &Path) -> FormatError {
    FormatError::Input {
        path: path.to_path_buf(),
        detail: "is gzip-compressed: decompress it first (`gunzip`); stokehold reads TFRecord, \
                 tar and JSONL files uncompressed (a line's place in a compressed file cannot be \
                 read without all that comes before it)"
            .into(),
    }
}

/// Where the kept index of `name` in `root` lives in the index directory `dir`.
fn kept_path(dir: &Path, root: &Path, name: &str) -> PathBuf {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    // `s3://b/dir/` and `s3://b/dir` are one place
    let root = root.display().to_string();
    let key = crc::crc32c(format!("{}\0{name}", root.trim_end_matches('/')).as_bytes());
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    dir.join(format!("{key:08x}-{safe}{INDEX_SUFFIX}"))
}

/// The largest index accepted when reading a kept one (more than any file's records need).
const MAX_INDEX_BYTES: u64 = 4 << 30;

/// A kept index of `name`, when there is one that describes the file as it is now.
fn kept(
    location: &dyn Location,
    root: &Path,
    name: &str,
    meta: &ObjectMeta,
    format: InPlaceFormat,
    inplace: &InPlaceOptions,
    dir: Option<&Path>,
) -> Option<FileIndex> {
    let bytes = if inplace.beside {
        stokehold_storage::location::read_small(
            location,
            &format!("{name}{INDEX_SUFFIX}"),
            MAX_INDEX_BYTES,
            "index",
        )
        .ok()?
    } else {
        let p = kept_path(dir?, root, name);
        let f = std::fs::File::open(p).ok()?;
        let mut v = Vec::new();
        f.take(MAX_INDEX_BYTES).read_to_end(&mut v).ok()?;
        v
    };
    let ix = FileIndex::parse(&bytes).ok()?;
    let h = &ix.header;
    (h.format == format.name()
        && h.file == name
        && h.size == meta.size
        && h.version == meta.version)
        .then_some(ix)
}

/// Indexes of at least this many records are kept by a thread of their own while the dataset
/// opens (see [`keep_soon`]).
const KEEP_LATER_RECORDS: usize = 1 << 21;

/// Keep `ix` as [`keep`] does; a large index kept in the index directory (not asked for
/// beside the file, nor by `stokehold index`, whose point it is) is kept by a thread of its own,
/// so that the first batch does not wait for its write (a 10 GB JSONL file of 21 M lines has an
/// index of 480 MB: 1.4 s to serialize and write on a 2-core VM). The write is published as any
/// other (claimed, written to a temporary name, renamed): a process that ends before it is done
/// leaves no index, only an orphan the next one sweeps, and scans again next time.
fn keep_soon(
    location: &Arc<dyn Location>,
    root: &Path,
    name: &str,
    ix: &Arc<FileIndex>,
    inplace: &InPlaceOptions,
    dir: Option<&Path>,
) -> Result<(), FormatError> {
    if inplace.beside || inplace.must_keep || ix.entries.len() < KEEP_LATER_RECORDS {
        return keep(&**location, root, name, ix, inplace, dir);
    }
    let (location, root, name) = (Arc::clone(location), root.to_path_buf(), name.to_string());
    let (ix, inplace, dir) = (Arc::clone(ix), inplace.clone(), dir.map(Path::to_path_buf));
    // a failure to start the thread keeps nothing: the file is scanned again next time
    let _ = std::thread::Builder::new()
        .name("stokehold-keep-index".into())
        .spawn(move || {
            // not `must_keep`: a failure is a note on stderr, never an error
            let _ = keep(&*location, &root, &name, &ix, &inplace, dir.as_deref());
        });
    Ok(())
}

/// Keep `ix` (the index of `name`): beside the file, or in the index directory (a node-local
/// directory, `NodeDir`: claimed, written to a temporary name, then renamed, so a reader sees the
/// old index or the new one; another process keeping the same index at once keeps it alone). Failing to keep
/// it in the index directory only costs a scan next time (said once on stderr); beside the
/// file, which was asked for, it is an error.
fn keep(
    location: &dyn Location,
    root: &Path,
    name: &str,
    ix: &FileIndex,
    inplace: &InPlaceOptions,
    dir: Option<&Path>,
) -> Result<(), FormatError> {
    let bytes = ix.to_bytes();
    if inplace.beside {
        let obj = format!("{name}{INDEX_SUFFIX}");
        // asked for, so an error; said of the directory, with the way to keep it elsewhere
        return location.put(&obj, &bytes).map_err(|e| {
            let why = std::io::Error::new(
                e.kind(),
                format!(
                    "cannot keep the index beside {name} in {} ({e}): --beside \
                     (index_beside=True) needs a directory this user can write; leave it out \
                     to keep indexes in the index directory (--index-dir / index_dir=)",
                    root.display()
                ),
            );
            FormatError::io(location.place(&obj), None, why)
        });
    }
    let Some(dir) = dir else { return Ok(()) };
    let path = kept_path(dir, root, name);
    let entry = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = None;
    let r = NodeDir::create(dir).and_then(|d| {
        // orphans of a process that died while keeping one, once a process
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| {
            d.sweep();
        });
        let Some(_claim) = d.claim(&entry, false)? else {
            return Ok(()); // another process is keeping this index
        };
        let t = tmp.insert(d.temp_path(&entry));
        std::fs::write(&*t, &bytes)?;
        d.publish(&*t, &entry).map(|_| ())
    });
    if r.is_ok() && inplace.index_dir.is_none() {
        // the first index kept in the default directory says where (once a process)
        static WHERE: std::sync::Once = std::sync::Once::new();
        WHERE.call_once(|| {
            eprintln!(
                "stokehold: indexes of files read in place are kept in {} (reused while a file \
                 is unchanged; index_dir= or --index-dir chooses another directory, \
                 index_beside= or --beside keeps each beside its file)",
                dir.display()
            )
        });
    }
    if let Err(e) = r {
        if let Some(tmp) = &tmp {
            let _ = std::fs::remove_file(tmp);
        }
        if inplace.must_keep {
            return Err(FormatError::Input {
                path: dir.to_path_buf(),
                detail: format!(
                    "cannot keep indexes here ({e}): give a writable index directory \
                     (--index-dir, index_dir=) or keep each index beside its file (--beside)"
                ),
            });
        }
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            eprintln!(
                "stokehold: cannot keep indexes in {} ({e}); files read in place will be \
                 scanned again next time (index_dir= chooses another directory)",
                dir.display()
            )
        });
    }
    Ok(())
}

/// A buffered [`Read`] over a [`Storage`] from an offset to the end, in reads of `chunk` bytes:
/// the streaming scan's (large reads, front to back) and the Parquet reader's (page headers and
/// footers: small reads that must not each be a request).
pub(crate) struct StorageReader {
    storage: Arc<dyn Storage>,
    pos: u64,
    size: u64,
    chunk: usize,
    buf: Vec<u8>,
    lo: usize,
    hi: usize,
}

impl StorageReader {
    pub(crate) fn new(storage: Arc<dyn Storage>, pos: u64, size: u64, chunk: usize) -> Self {
        StorageReader {
            storage,
            pos,
            size,
            chunk: chunk.max(1),
            buf: Vec::new(),
            lo: 0,
            hi: 0,
        }
    }
}

impl Read for StorageReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.lo == self.hi {
            let n = self.size.saturating_sub(self.pos).min(self.chunk as u64) as usize;
            if n == 0 {
                return Ok(0);
            }
            self.buf.resize(n, 0);
            self.storage.read_at(self.pos, &mut self.buf[..n])?;
            self.pos += n as u64;
            self.lo = 0;
            self.hi = n;
        }
        let k = out.len().min(self.hi - self.lo);
        out[..k].copy_from_slice(&self.buf[self.lo..self.lo + k]);
        self.lo += k;
        Ok(k)
    }
}

/// Scan file `name` of `location` (`meta`) into a new index, with up to `threads` threads (and
/// `named` for the files a JSONL file's lines name).
fn scan(
    location: &Arc<dyn Location>,
    root: &Path,
    name: &str,
    meta: &ObjectMeta,
    format: InPlaceFormat,
    (max, threads, named): (u64, usize, usize),
) -> Result<FileIndex, FormatError> {
    let path = root.join(name);
    let storage: Arc<dyn Storage> = location
        .open_scan(name, meta, true)
        .map_err(|e| FormatError::io(&path, None, e))?
        .into();
    let mut ix = FileIndex::new(format.name(), name, meta.size, meta.version.clone());
    let r = match storage.slice(0, meta.size as usize) {
        _ if format == InPlaceFormat::Parquet => {
            parquet::scan(Arc::clone(&storage), meta.size, max, &mut ix)
        }
        // a mapped TFRecord file is scanned where it lies, no record copied
        // split among threads when the file is large (at least 16 MiB a thread)
        Some(all) if format == InPlaceFormat::TfRecord => {
            let threads = (all.len() >> 24).clamp(1, threads);
            tfrecord::scan_slice(all, max, &mut ix, threads)
        }
        // JSON Lines: a newline search, split among threads the same way
        Some(all) if format == InPlaceFormat::Jsonl => {
            let threads = (all.len() >> 24).clamp(1, threads);
            jsonl::scan_slice(all, max, &mut ix, threads, SCAN_WINDOW)
        }
        Some(all) => webdataset::scan_slice(all, max, &mut ix),
        None => scan_with(
            StorageReader::new(Arc::clone(&storage), 0, meta.size, SCAN_CHUNK),
            format,
            max,
            &mut ix,
        ),
    };
    let r = r.and_then(|()| {
        if format != InPlaceFormat::Jsonl {
            return Ok(());
        }
        // image and video paths are relative to the JSONL file's folder
        let files = named_files::FolderFiles::of(location, name);
        let place = path.display().to_string();
        jsonl::index_named_files(&*storage, &files, &place, (max, named), &mut ix)
    });
    r.map_err(|e| FormatError::Corrupt {
        path,
        what: format!("{} file", format.name()),
        offset: e.offset,
        detail: e.detail.to_string(),
    })?;
    Ok(ix)
}

fn scan_with(
    r: impl Read,
    format: InPlaceFormat,
    max: u64,
    ix: &mut FileIndex,
) -> Result<(), ScanError> {
    match format {
        InPlaceFormat::TfRecord => tfrecord::scan(r, max, ix),
        InPlaceFormat::WebDataset => webdataset::scan(r, max, ix),
        InPlaceFormat::Jsonl => jsonl::scan(r, max, ix),
        // read by random access from its footer ([`scan`]), never front to back
        InPlaceFormat::Parquet => Err(ScanError::at(0, ScanDetail::NotSequential)),
    }
}

/// The index of every file: kept ones where they describe the file as it is, the others
/// scanned (files in parallel, as many at once as the location is worth) and kept.
fn indexes(
    location: &Arc<dyn Location>,
    root: &Path,
    files: &[(String, ObjectMeta)],
    format: InPlaceFormat,
    inplace: &InPlaceOptions,
) -> Result<Vec<Scanned>, FormatError> {
    let dir = inplace.index_dir.clone().or_else(default_index_dir);
    let max = match inplace.max_record_bytes {
        0 => 1 << 30,
        m => m,
    };
    let next = AtomicUsize::new(0);
    let threads = location.parallelism().clamp(1, files.len().max(1));
    // a file's own scan may split it among the threads the files leave (one large file: all)
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let inner = (cores / files.len().max(1)).max(1);
    // and the files a JSONL file's lines name are read on the requests in flight the files
    // leave (object storage: waits, not cores)
    let named = (location.parallelism() / threads).max(1);
    let out: std::sync::Mutex<Vec<Option<Result<Scanned, FormatError>>>> =
        std::sync::Mutex::new((0..files.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some((name, meta)) = files.get(k) else {
                        break;
                    };
                    let got = (!inplace.rebuild)
                        .then(|| {
                            kept(
                                &**location,
                                root,
                                name,
                                meta,
                                format,
                                inplace,
                                dir.as_deref(),
                            )
                        })
                        .flatten();
                    let r = match got {
                        Some(ix) => Ok((Arc::new(ix), false)),
                        None => scan(location, root, name, meta, format, (max, inner, named))
                            .and_then(|ix| {
                                let ix = Arc::new(ix);
                                keep_soon(location, root, name, &ix, inplace, dir.as_deref())?;
                                Ok((ix, true))
                            }),
                    };
                    let r = r.map(|(index, fresh)| Scanned {
                        name: name.clone(),
                        place: root.join(name).display().to_string(),
                        meta: meta.clone(),
                        index,
                        fresh,
                    });
                    out.lock().expect("no panics while locked")[k] = Some(r);
                }
            });
        }
    });
    out.into_inner()
        .expect("no panics while locked")
        .into_iter()
        .map(|r| r.expect("every file was indexed"))
        .collect()
}

/// What [`index_files`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexReport {
    /// The files' format.
    pub format: &'static str,
    /// Files.
    pub files: usize,
    /// Files scanned now (the others had a kept index that still describes them).
    pub scanned: usize,
    /// Records of all files.
    pub records: u64,
    /// Bytes of all files.
    pub bytes: u64,
    /// Records the scan could not read (kept, and an error when read).
    pub damaged: u64,
    /// Notes of the scans.
    pub notes: Vec<String>,
}

/// Index `paths` ahead of time (`stokehold index`): scan each file whose kept index does not
/// describe it, and keep the index.
pub fn index_files(
    paths: &[PathBuf],
    options: &OpenOptions,
    inplace: &InPlaceOptions,
) -> Result<IndexReport, FormatError> {
    // a URL that names no file of a format (`s3://b/tfrecords`) is a prefix, as when opened
    let paths: Vec<PathBuf> = paths.iter().map(|p| as_prefix(p)).collect();
    let (location, root, files, format) = resolve(&paths, options, inplace)?;
    let scanned = indexes(&location, &root, &files, format, inplace)?;
    let mut r = IndexReport {
        format: format.name(),
        files: scanned.len(),
        ..IndexReport::default()
    };
    for s in &scanned {
        r.scanned += usize::from(s.fresh);
        r.records += s.index.entries.len() as u64;
        r.bytes += s.meta.size;
        r.damaged += (0..s.index.entries.len())
            .filter(|&k| s.index.damaged(k))
            .count() as u64;
        r.notes.extend(s.index.header.notes.iter().cloned());
    }
    Ok(r)
}

/// Open files in place as a dataset: resolve `paths`, index each file (kept indexes reused),
/// choose the fields from the statistics as pack does, and open each file as a shard through
/// the storage `options.access` asks for. Records that lack a required field are left out, as
/// pack leaves them out; records the scan could not read are kept and fail when read, naming
/// the file and byte offset (the loader's error policy decides).
pub fn open_in_place(
    paths: &[PathBuf],
    options: OpenOptions,
    inplace: &InPlaceOptions,
) -> Result<Dataset, FormatError> {
    let resolved = resolve(paths, &options, inplace)?;
    open_resolved(resolved, options, inplace)
}

/// [`open_in_place`] of files already resolved.
fn open_resolved(
    (location, root, files, format): Resolved,
    options: OpenOptions,
    inplace: &InPlaceOptions,
) -> Result<Dataset, FormatError> {
    let scanned = indexes(&location, &root, &files, format, inplace)?;
    let mut notes: Vec<String> = Vec::new();
    for s in &scanned {
        notes.extend(s.index.header.notes.iter().cloned());
    }
    let mut source = serde_json::Map::new();
    let given = inplace.fields.as_deref();
    let mut classes = None;
    let chosen = match format {
        InPlaceFormat::TfRecord => tfrecord::choose(&scanned, given, &mut notes, &mut source),
        InPlaceFormat::WebDataset => webdataset::choose(&scanned, given, &mut notes, &mut source),
        InPlaceFormat::Jsonl => jsonl::choose(&scanned, given, &mut notes, &mut source),
        InPlaceFormat::Parquet => {
            parquet::choose(&scanned, given, &mut notes, &mut source).map(|(chosen, names)| {
                classes = names;
                chosen
            })
        }
    }
    .map_err(|e| e.at(&root))?;
    let mut fields = Vec::new();
    if format == InPlaceFormat::WebDataset {
        fields.push(Field::new("__key__", FieldType::String));
    }
    fields.extend(
        chosen
            .iter()
            .map(|c| Field::new(c.name.clone(), c.ty.clone())),
    );
    let schema = Schema::new(fields)?;
    let bytes: u64 = scanned.iter().map(|s| s.meta.size).sum();
    let access = options
        .access
        .resolve(bytes, stokehold_storage::file::physical_memory());
    let fallback = options.access == stokehold_storage::Access::Auto;
    let mut shards = Vec::with_capacity(scanned.len());
    let mut infos = Vec::with_capacity(scanned.len());
    let mut lacks = Lacking::default();
    // Parquet: the decoded pages every file's rows share, within one budget
    let page_cache = (format == InPlaceFormat::Parquet).then(|| {
        Arc::new(PageCache::new(PageCache::budget(
            inplace.page_cache,
            stokehold_storage::file::physical_memory(),
        )))
    });
    for s in &scanned {
        let ix = &s.index;
        let ids: Vec<Option<u32>> = chosen
            .iter()
            .map(|c| {
                ix.header
                    .names
                    .iter()
                    .position(|n| *n == c.name)
                    .map(|i| i as u32)
            })
            .collect();
        // every record is a sample: one that lacks a required field is a corrupt sample, as a
        // damaged one is (it fails when read, naming the file, the record and the field, and
        // the loader's error policy skips and counts it or stops), never left out unseen
        let holds = |r: usize| {
            chosen.iter().zip(&ids).all(|(c, id)| {
                c.optional
                    || match format {
                        // (a list of numbered images is held where one of them is)
                        InPlaceFormat::WebDataset => {
                            webdataset::TarCodec::holds(ix, r, &c.name, *id)
                        }
                        _ => id.is_some_and(|id| ix.members_of(r).iter().any(|m| m.name == id)),
                    }
            })
        };
        let mut lists = std::collections::BTreeMap::new();
        let (rows, parquet_codec) = match format {
            InPlaceFormat::Parquet => {
                let parquet::FileCodec {
                    rows,
                    mut codec,
                    lacking,
                    lists: tables,
                } = parquet::codec(s, &chosen).map_err(|detail| FormatError::Manifest {
                    path: root.join(&s.name),
                    detail: detail.into(),
                })?;
                if let (Some(large), Some(pages)) = (codec.large.as_mut(), &page_cache) {
                    large.set_page_cache(Arc::clone(pages));
                }
                lacks.add(&s.place, "row", lacking);
                lists = tables;
                (rows, Some(codec))
            }
            // a line's keys are known when it is read (a line without a required key is a
            // corrupt sample then, counted by the loader), not at open
            InPlaceFormat::Jsonl => {
                lists = jsonl::list_tables(s, &chosen);
                ((0..ix.entries.len() as u32).collect::<Vec<u32>>(), None)
            }
            _ => {
                let lacking = (0..ix.entries.len())
                    .filter(|&r| !ix.damaged(r) && !holds(r))
                    .map(|r| r as u64)
                    .collect();
                let what = match format {
                    InPlaceFormat::TfRecord => "record",
                    _ => "sample",
                };
                if format == InPlaceFormat::WebDataset {
                    lists = webdataset::list_tables(ix, &chosen);
                }
                lacks.add(&s.place, what, lacking);
                ((0..ix.entries.len() as u32).collect::<Vec<u32>>(), None)
            }
        };
        let entries = rows
            .iter()
            .map(|&r| ix.entries[r as usize])
            .collect::<Vec<_>>();
        let rows = Rows((rows.len() < ix.entries.len()).then_some(rows));
        let codec: Arc<dyn stokehold_format::RecordCodec> = match format {
            InPlaceFormat::Parquet => Arc::new(parquet_codec.expect("made above")),
            InPlaceFormat::TfRecord => Arc::new(tfrecord::TfCodec {
                index: Arc::clone(ix),
                rows,
                fields: chosen
                    .iter()
                    .map(|c| (c.name.clone(), c.optional))
                    .collect(),
            }),
            InPlaceFormat::Jsonl => {
                let files = Arc::new(named_files::FolderFiles::of(&location, &s.name));
                Arc::new(jsonl::JsonlCodec::new(s, &chosen, files).map_err(|e| e.at(&root))?)
            }
            InPlaceFormat::WebDataset => Arc::new(webdataset::TarCodec {
                index: Arc::clone(ix),
                rows,
                fields: std::iter::once(None)
                    .chain(
                        chosen
                            .iter()
                            .zip(&ids)
                            .map(|(c, id)| Some((*id, c.name.clone(), c.optional))),
                    )
                    .collect(),
            }),
        };
        let path = root.join(&s.name);
        let storage = location
            .open_storage(&s.name, &s.meta, access, fallback)
            .map_err(|e| FormatError::io(&path, None, e))?;
        let content = entries
            .iter()
            .fold(crc::crc32c(&s.meta.size.to_le_bytes()), |c, e| {
                crc::append(c, &e.crc.to_le_bytes())
            });
        infos.push(ShardInfo {
            file: s.name.clone(),
            records: entries.len() as u64,
            bytes: s.meta.size,
            crc32c: content,
        });
        shards.push(
            ShardReader::in_place(
                path,
                storage,
                s.meta.size,
                schema.clone(),
                entries,
                codec,
                options.limits,
            )
            .with_lists(lists),
        );
    }
    let total: u64 = infos.iter().map(|i| i.records).sum();
    if total == 0 {
        return Err(FormatError::Input {
            path: root,
            detail: format!("the {} files hold no samples", scanned.len()),
        });
    }
    if let Some(note) = lacks.note(total, &chosen, format) {
        eprintln!("stokehold: {}: {note}", root.display());
        notes.push(note);
        source.insert("lacking_required".into(), lacks.total.into());
    }
    source.insert("in_place".into(), format.name().into());
    source.insert("files".into(), scanned.len().into());
    if !notes.is_empty() {
        source.insert("notes".into(), notes.into());
    }
    let manifest = Manifest {
        format: FORMAT_NAME.into(),
        format_version: DATASET_VERSION,
        schema,
        total_records: total,
        shards: infos,
        classes,
        align: 1,
        source: serde_json::Value::Object(source),
    };
    let mut ds = Dataset::from_parts(root, manifest, shards, options.verify_records)?;
    ds.set_location(location);
    Ok(ds)
}

/// The records that lack a required field, over all files: how many, and the first few by file
/// and record (for the note that says so).
#[derive(Debug, Default)]
struct Lacking {
    total: u64,
    first: Vec<String>,
}

impl Lacking {
    /// Records (`what`: "record", "sample", "row") `records` of the file at `place` lack a
    /// required field.
    fn add(&mut self, place: &str, what: &str, records: Vec<u64>) {
        self.total += records.len() as u64;
        for r in records
            .into_iter()
            .take(3usize.saturating_sub(self.first.len()))
        {
            self.first.push(format!("{place} {what} {r}"));
        }
    }

    /// What is said at open (on stderr, and in the manifest's notes) when records lack a
    /// required field.
    fn note(&self, samples: u64, chosen: &[Chosen], format: InPlaceFormat) -> Option<String> {
        if self.total == 0 {
            return None;
        }
        let required: Vec<&str> = chosen
            .iter()
            .filter(|c| !c.optional)
            .map(|c| c.name.as_str())
            .collect();
        let what = match format {
            InPlaceFormat::TfRecord => "records",
            InPlaceFormat::WebDataset => "samples",
            InPlaceFormat::Parquet => "rows",
            InPlaceFormat::Jsonl => "lines",
        };
        Some(format!(
            "{} of {samples} {what} lack a required field ({}; first: {}): each is a corrupt \
             sample, skipped and counted by the loader within max_skip_fraction (on_error=\"skip\") \
             or an error (on_error=\"fail\"); `stokehold verify --all` lists them; fields= with \
             a field marked optional (\"name?\") stores an empty value instead where its type has one",
            self.total,
            required.join(", "),
            self.first.join(", ")
        ))
    }
}

/// The format of a dataset's files when it was opened in place (`None`: a packed dataset).
pub fn in_place_format(ds: &Dataset) -> Option<&str> {
    ds.manifest().source.get("in_place")?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_name() {
        assert_eq!(
            InPlaceFormat::of_name("a.TFRecords"),
            Some(InPlaceFormat::TfRecord)
        );
        assert_eq!(
            InPlaceFormat::of_name("shard-000.tar"),
            Some(InPlaceFormat::WebDataset)
        );
        assert_eq!(InPlaceFormat::of_name("train-00000-of-01024"), None);
        assert_eq!(InPlaceFormat::parse("tar"), Some(InPlaceFormat::WebDataset));
    }

    /// A scan's typed error says, to the byte, what the scanners' hand-made messages said (the
    /// `detail` of the `FormatError::Corrupt` a user reads).
    #[test]
    fn a_scan_error_says_what_the_hand_made_message_said() {
        let said = |d: ScanDetail| ScanError::at(9, d).to_string();
        assert_eq!(
            said(ScanDetail::RowCount {
                group: 2,
                decoded: 5,
                rows: 6
            }),
            "row group 2: 5 rows decoded, the footer says 6"
        );
        assert_eq!(
            said(ScanDetail::DecoderPanicked {
                payload: "index out of bounds".into()
            }),
            "the Parquet decoder failed (index out of bounds): the file is damaged or uses what \
             it does not support"
        );
        assert_eq!(
            said(ScanDetail::SampleTooLarge {
                key: "s1".into(),
                len: 1 << 32
            }),
            "sample \"s1\" spans 4294967296 bytes (at most 4 GiB)"
        );
        assert_eq!(
            said(ScanDetail::PageRows { pages: 3, rows: 4 }),
            "the column chunk's pages hold 3 rows, its row group 4"
        );
        assert_eq!(
            said(ScanDetail::Unusable(crate::Unusable(
                "a page header cut short".into()
            ))),
            "a page header cut short"
        );
        assert_eq!(ScanError::at(9, ScanDetail::NoDictionary).offset, 9);
    }
}
