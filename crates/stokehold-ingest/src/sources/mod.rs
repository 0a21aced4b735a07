//! The front door of ingest: what `pack` and files read in place share, so that both see a
//! source the same way.
//!
//! - **Which format**: one [`SourceKind`] with one table of names ([`SourceKind::parse`]) and of
//!   file extensions ([`SourceKind::of_name`]), one sniffer of a file's first bytes
//!   ([`sniff_head`], over a [`Location`] or a local file), and [`detect`] for `pack`'s sources.
//!   [`InPlaceFormat`] is the subset read in place, named through the same table.
//! - **Which fields**: the field choice (`--fields`, [`FieldChoice`]; `choose_fields` for
//!   sources whose samples hold different sets of fields), the empty value of an optional field
//!   (`empty_value`), and per format what a source's values become ([`tfrecord`],
//!   [`webdataset`], [`parquet`]).
//! - **What is not a dataset**: [`not_a_dataset`], the one explanation the CLI and Python give
//!   when a path is neither a dataset nor files read in place.
//!
//! `pack/` and `inplace/` both import this module and never each other.

use std::io;
use std::path::{Path, PathBuf};

use stokehold_format::{FieldType, FieldValue, FormatError};
use stokehold_storage::{Location, ObjectMeta};

pub mod jsonl;
pub mod parquet;
pub mod tfrecord;
pub mod webdataset;

/// A mistake in what was given to read (a source, a field choice), or a source that holds
/// nothing usable; `pack` raises these as [`crate::PackError`]s, files read in place as
/// [`FormatError::Input`].
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The sources or the field choice cannot be used as given.
    #[error("{0}")]
    Input(String),
    /// No field is usable.
    #[error("no samples to pack: {0}")]
    Empty(String),
    /// A source could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl SourceError {
    fn io(path: &Path, source: io::Error) -> SourceError {
        SourceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The kinds of source stokehold reads: all of them `pack`s; JSONL and the last three it also
/// reads in place ([`InPlaceFormat`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SourceKind {
    /// A directory with one sub-directory of images per class (or images directly in it).
    ImageFolder,
    /// JSON Lines: one object per line, one key naming a file.
    Jsonl,
    /// CSV with a header row, one column naming a file.
    Csv,
    /// WebDataset: tar files whose members `KEY.EXT` group into samples.
    WebDataset,
    /// TFRecord files of `tf.train.Example` records.
    TfRecord,
    /// Parquet files (Hugging Face datasets, LAION-style metadata): one row per sample, one
    /// field per column.
    Parquet,
}

/// Every name a kind is given by (`--from`, `format=`), case-insensitive; the first of each kind
/// is its own name (manifests, messages).
const NAMES: [(&str, SourceKind); 15] = [
    ("image-folder", SourceKind::ImageFolder),
    ("images", SourceKind::ImageFolder),
    ("folder", SourceKind::ImageFolder),
    ("jsonl", SourceKind::Jsonl),
    ("json", SourceKind::Jsonl),
    ("csv", SourceKind::Csv),
    ("webdataset", SourceKind::WebDataset),
    ("wds", SourceKind::WebDataset),
    ("tar", SourceKind::WebDataset),
    ("tfrecord", SourceKind::TfRecord),
    ("tfrecords", SourceKind::TfRecord),
    ("tfrec", SourceKind::TfRecord),
    ("parquet", SourceKind::Parquet),
    ("pq", SourceKind::Parquet),
    ("ndjson", SourceKind::Jsonl),
];

/// The file extensions that say a kind (case-insensitive).
const EXTENSIONS: [(&str, SourceKind); 9] = [
    ("jsonl", SourceKind::Jsonl),
    ("ndjson", SourceKind::Jsonl),
    ("json", SourceKind::Jsonl),
    ("csv", SourceKind::Csv),
    ("tar", SourceKind::WebDataset),
    ("tfrecord", SourceKind::TfRecord),
    ("tfrecords", SourceKind::TfRecord),
    ("tfrec", SourceKind::TfRecord),
    ("parquet", SourceKind::Parquet),
];

impl SourceKind {
    /// The name used on the command line and in manifests.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, k)| *k == self)
            .map(|(n, _)| *n)
            .expect("every kind has a name")
    }

    /// Parse a name given on the command line or as `format=` (any of a kind's names, in any
    /// case: `tfrecord`, `tfrecords`, `tfrec`; `webdataset`, `wds`, `tar`; `parquet`, `pq`; ...).
    pub fn parse(s: &str) -> Option<SourceKind> {
        let s = s.to_ascii_lowercase();
        NAMES.iter().find(|(n, _)| *n == s).map(|(_, k)| *k)
    }

    /// The kind a file's name says by its extension (`a.TFRec`: TFRecord), if any.
    pub fn of_name(name: &str) -> Option<SourceKind> {
        SourceKind::of_extension(Path::new(name).extension()?.to_str()?)
    }

    /// The kind a file extension (without its dot, any case) says, if any.
    pub fn of_extension(ext: &str) -> Option<SourceKind> {
        let ext = ext.to_ascii_lowercase();
        EXTENSIONS.iter().find(|(e, _)| *e == ext).map(|(_, k)| *k)
    }

    /// The kinds named by `names` in messages: `tfrecord, webdataset, parquet or jsonl`.
    pub fn listed(kinds: &[SourceKind]) -> String {
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        match names.split_last() {
            Some((last, [])) => last.to_string(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// A format of files read in place: the [`SourceKind`]s that are files of records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPlaceFormat {
    /// TFRecord files of `tf.train.Example`s.
    TfRecord,
    /// WebDataset tars.
    WebDataset,
    /// Parquet files (Hugging Face datasets, LAION-style metadata).
    Parquet,
    /// JSON Lines (`.jsonl`, `.ndjson`): one sample per non-empty line, one field per key.
    Jsonl,
}

impl InPlaceFormat {
    /// Every format read in place, in the order messages list them.
    pub const ALL: [InPlaceFormat; 4] = [
        InPlaceFormat::TfRecord,
        InPlaceFormat::WebDataset,
        InPlaceFormat::Parquet,
        InPlaceFormat::Jsonl,
    ];

    /// Its kind of source.
    pub fn kind(self) -> SourceKind {
        match self {
            InPlaceFormat::TfRecord => SourceKind::TfRecord,
            InPlaceFormat::WebDataset => SourceKind::WebDataset,
            InPlaceFormat::Parquet => SourceKind::Parquet,
            InPlaceFormat::Jsonl => SourceKind::Jsonl,
        }
    }

    /// The format of a kind, when it is read in place.
    pub fn of_kind(kind: SourceKind) -> Option<InPlaceFormat> {
        InPlaceFormat::ALL.into_iter().find(|f| f.kind() == kind)
    }

    /// Its name: "tfrecord", "webdataset", "parquet".
    pub fn name(self) -> &'static str {
        self.kind().name()
    }

    /// Parse a name ([`SourceKind::parse`]'s, of a format read in place).
    pub fn parse(s: &str) -> Option<InPlaceFormat> {
        SourceKind::parse(s).and_then(InPlaceFormat::of_kind)
    }

    /// The format a file's name says ([`SourceKind::of_name`]), if any. A `.json` file is
    /// not taken for JSON Lines by its name (it is mostly one JSON document, a manifest among
    /// them): `format="jsonl"` reads it so.
    pub fn of_name(name: &str) -> Option<InPlaceFormat> {
        let ext = Path::new(name).extension()?.to_str()?;
        if ext.eq_ignore_ascii_case("json") {
            return None;
        }
        SourceKind::of_name(name).and_then(InPlaceFormat::of_kind)
    }

    /// The names of the formats read in place, for messages: `tfrecord, webdataset, parquet or jsonl`.
    pub fn names() -> String {
        SourceKind::listed(&InPlaceFormat::ALL.map(InPlaceFormat::kind))
    }
}

/// What a file's first bytes say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// A format read in place.
    Format(InPlaceFormat),
    /// gzip-compressed (a `.tfrecord.gz` by another name).
    Gzip,
    /// Neither.
    Unknown,
}

/// The format of a file by its first bytes (up to 512): a tar's `ustar` magic, Parquet's
/// `PAR1`, a TFRecord's length whose masked CRC-32C matches, or gzip's magic.
pub fn sniff_head(head: &[u8]) -> Sniff {
    if head.len() >= 263 && &head[257..262] == b"ustar" {
        return Sniff::Format(InPlaceFormat::WebDataset);
    }
    if head.starts_with(b"PAR1") {
        return Sniff::Format(InPlaceFormat::Parquet);
    }
    if head.len() >= 12 {
        let stored = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if crate::tfrecord::masked_crc32c(&head[..8]) == stored {
            return Sniff::Format(InPlaceFormat::TfRecord);
        }
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        return Sniff::Gzip;
    }
    Sniff::Unknown
}

/// The format of file `name` of `location` by its first bytes ([`sniff_head`]).
pub fn sniff(location: &dyn Location, name: &str, meta: &ObjectMeta) -> io::Result<Sniff> {
    let len = meta.size.min(512);
    let read = stokehold_storage::location::RangeRead {
        name,
        meta,
        offset: 0,
        len,
    };
    let head = location
        .read_ranges(&[read])
        .pop()
        .expect("one read, one result")?;
    Ok(sniff_head(&head))
}

/// What a local file's first bytes show (`Unknown` too when it cannot be read).
pub fn sniff_file(path: &Path) -> Sniff {
    let mut head = Vec::with_capacity(512);
    let read = std::fs::File::open(path)
        .and_then(|f| io::Read::read_to_end(&mut io::Read::take(f, 512), &mut head));
    match read {
        Ok(_) => sniff_head(&head),
        Err(_) => Sniff::Unknown,
    }
}

/// Guess the kind of `sources` from names and contents.
pub fn detect(sources: &[PathBuf]) -> Result<SourceKind, SourceError> {
    let ext_kind = |p: &Path| SourceKind::of_extension(p.extension()?.to_str()?);
    let first = sources
        .first()
        .ok_or_else(|| SourceError::Input("no source given".into()))?;
    if sources.len() == 1 && first.is_dir() {
        // A directory of tars, TFRecords or Parquet files, or an image folder.
        let mut kinds = std::collections::BTreeSet::new();
        for e in std::fs::read_dir(first).map_err(|e| SourceError::io(first, e))? {
            let p = e.map_err(|e| SourceError::io(first, e))?.path();
            if p.is_file()
                && let Some(
                    k @ (SourceKind::WebDataset | SourceKind::TfRecord | SourceKind::Parquet),
                ) = ext_kind(&p)
            {
                kinds.insert(k.name());
            }
        }
        if kinds.is_empty() && shard_named_tfrecords(first)? {
            kinds.insert(SourceKind::TfRecord.name());
        }
        return match kinds.len() {
            0 => Ok(SourceKind::ImageFolder),
            1 => Ok(SourceKind::parse(kinds.first().expect("one")).expect("a known name")),
            _ => Err(SourceError::Input(format!(
                "{} holds more than one kind of file ({}): pass --from to choose",
                first.display(),
                kinds.iter().copied().collect::<Vec<_>>().join(", ")
            ))),
        };
    }
    let kinds: std::collections::BTreeSet<_> = sources.iter().map(|p| ext_kind(p)).collect();
    match (kinds.len(), kinds.first()) {
        (1, Some(Some(k))) => Ok(*k),
        _ => Err(SourceError::Input(format!(
            "cannot tell the kind of {:?} from the file names: pass --from \
             image-folder|jsonl|csv|webdataset|tfrecord|parquet",
            sources
        ))),
    }
}

/// Whether directory `dir` holds TFRecord files without an extension, named as ImageNet's are
/// (`train-00000-of-01024`): its first such file (by name) starts with a TFRecord header.
fn shard_named_tfrecords(dir: &Path) -> Result<bool, SourceError> {
    let mut bare: Vec<PathBuf> = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| SourceError::io(dir, e))? {
        let p = e.map_err(|e| SourceError::io(dir, e))?.path();
        let hidden = p
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
        if p.is_file() && p.extension().is_none() && !hidden {
            bare.push(p);
        }
    }
    Ok(bare.iter().min().map(|p| sniff_file(p)) == Some(Sniff::Format(InPlaceFormat::TfRecord)))
}

/// One field chosen with `--fields` (`jpg,cls,txt?`): a WebDataset member extension, a
/// TFRecord feature name or a Parquet column name, and whether a sample may lack it (`?`). A missing optional field is
/// stored as an empty value (the format has no null), so only text, bytes and array fields can
/// be optional; a sample that lacks a required one is skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChoice {
    /// The member extension (`jpg`, `seg.png`).
    pub name: String,
    /// A sample may lack it.
    pub optional: bool,
}

impl FieldChoice {
    /// Parse a comma-separated list: `jpg,cls,txt?`.
    pub fn parse_list(spec: &str) -> Result<Vec<FieldChoice>, SourceError> {
        let mut out: Vec<FieldChoice> = Vec::new();
        for part in spec.split(',').map(str::trim) {
            let (name, optional) = match part.strip_suffix('?') {
                Some(n) => (n, true),
                None => (part, false),
            };
            if name.is_empty() || name.starts_with('.') {
                return Err(SourceError::Input(format!(
                    "--fields {spec:?}: {part:?} is not a field name (write jpg,cls,txt?)"
                )));
            }
            if out.iter().any(|f| f.name == name) {
                return Err(SourceError::Input(format!(
                    "--fields {spec:?}: {name:?} is given twice"
                )));
            }
            out.push(FieldChoice {
                name: name.to_string(),
                optional,
            });
        }
        Ok(out)
    }
}

/// A field chosen by [`choose_fields`]: its name, and whether a sample may lack it.
#[derive(Debug)]
pub(crate) struct Chosen {
    pub name: String,
    pub optional: bool,
}

/// Choose the fields of a source whose samples may each hold a different set of them (the
/// members of WebDataset samples, the features of TFRecord examples), from `counts` (how many of
/// the `samples` hold each): the `given` ones (`--fields`), or without them every field that at
/// least half the samples hold. A field missing from some samples is optional where
/// `can_be_empty` allows (an empty value is stored there, and counted in
/// `source["empty_where_missing"]`), else required (the samples without it are skipped and
/// counted). What is left out, and why, goes to `notes`; `label` names a field in messages
/// (`member .txt`, `feature "bbox"`).
pub(crate) fn choose_fields(
    counts: &std::collections::BTreeMap<String, u64>,
    samples: u64,
    given: Option<&[FieldChoice]>,
    can_be_empty: impl Fn(&str) -> bool,
    label: impl Fn(&str) -> String,
    notes: &mut Vec<String>,
    source: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<Chosen>, SourceError> {
    let listed = |names: &mut dyn Iterator<Item = (&String, &u64)>| {
        names
            .map(|(n, c)| format!("{} ({c} of {samples} samples)", label(n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut chosen = Vec::new();
    let left_out: Vec<(&String, &u64)> = match given {
        Some(list) => {
            for f in list {
                if !counts.contains_key(&f.name) {
                    return Err(SourceError::Input(format!(
                        "--fields: no sample has {} (found: {})",
                        label(&f.name),
                        listed(&mut counts.iter())
                    )));
                }
                if f.optional && !can_be_empty(&f.name) {
                    return Err(SourceError::Input(format!(
                        "--fields: {} cannot be optional: only text, bytes and array fields have \
                         an empty value to store where one is missing",
                        label(&f.name)
                    )));
                }
                chosen.push(Chosen {
                    name: f.name.clone(),
                    optional: f.optional,
                });
            }
            counts
                .iter()
                .filter(|(n, _)| !list.iter().any(|f| &f.name == *n))
                .collect()
        }
        None => {
            let (kept, rare): (Vec<_>, Vec<_>) = counts
                .iter()
                .partition(|(_, n)| n.saturating_mul(2) >= samples);
            for (name, &n) in kept {
                let optional = n < samples && can_be_empty(name);
                if n < samples && !optional {
                    notes.push(format!(
                        "{} of {samples} samples have no {} and are skipped (--fields chooses \
                         the fields)",
                        samples - n,
                        label(name)
                    ));
                }
                chosen.push(Chosen {
                    name: name.clone(),
                    optional,
                });
            }
            rare
        }
    };
    if !left_out.is_empty() {
        notes.push(format!(
            "left out of the schema ({}): {}; --fields chooses the fields (NAME? for one stored \
             empty where missing)",
            if given.is_some() {
                "not in --fields"
            } else {
                "in fewer than half the samples"
            },
            listed(&mut left_out.into_iter())
        ));
    }
    if chosen.is_empty() {
        return Err(SourceError::Empty(format!(
            "no field is in at least half the samples (found: {}); choose with --fields",
            listed(&mut counts.iter())
        )));
    }
    let mut empty = serde_json::Map::new();
    for c in chosen.iter().filter(|c| c.optional) {
        let missing = samples - counts[&c.name];
        if missing > 0 {
            notes.push(format!(
                "{missing} of {samples} samples have no {}: stored as an empty value there",
                label(&c.name)
            ));
            empty.insert(c.name.clone(), missing.into());
        }
    }
    if !empty.is_empty() {
        source.insert("empty_where_missing".into(), empty.into());
    }
    Ok(chosen)
}

/// Whether a file's name has an image extension (`.jpg`, `.jpeg`, `.jpe`, `.png`, `.webp`, in
/// any case): a table's column of such names holds images.
pub(crate) fn has_image_extension(name: &str) -> bool {
    has_extension_of(name, &webdataset::IMAGE)
}

/// Whether file name `name`'s extension (in any case) is one of `list`'s.
fn has_extension_of(name: &(impl AsRef<Path> + ?Sized), list: &[&str]) -> bool {
    name.as_ref()
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| list.contains(&e.to_ascii_lowercase().as_str()))
}

/// Extensions of the video files read as videos (by `pack` and in place): MP4 and QuickTime
/// (the ISO base media family), Matroska and WebM.
pub(crate) const VIDEO_EXTENSIONS: [&str; 5] = ["mp4", "m4v", "mov", "mkv", "webm"];

/// Whether file name `name` has a video extension ([`VIDEO_EXTENSIONS`]).
pub(crate) fn has_video_extension(name: &(impl AsRef<Path> + ?Sized)) -> bool {
    has_extension_of(name, &VIDEO_EXTENSIONS)
}

/// The value stored for an optional field a sample lacks (or holds null): empty text, bytes,
/// array or list; `None` for types without an empty value.
pub(crate) fn empty_value(ty: &FieldType) -> Option<FieldValue<'static>> {
    use std::borrow::Cow;
    Some(match ty {
        FieldType::String => FieldValue::String("".into()),
        FieldType::Json => FieldValue::String("null".into()),
        FieldType::Bytes => FieldValue::Bytes(Cow::Borrowed(&[])),
        FieldType::Ndarray { dtype } => FieldValue::Array(stokehold_format::ArrayValue {
            dtype: *dtype,
            shape: vec![0],
            data: Cow::Borrowed(&[]),
        }),
        FieldType::List { .. } => FieldValue::List(Vec::new()),
        _ => return None,
    })
}

/// Which front explains: the words differ (a command to run again, a call to make), the cases
/// and the formats they list do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// The `stokehold` command (`inspect`, `verify`, `bench`).
    Cli,
    /// `stokehold.Dataset(...)` and the loaders given a path.
    Python,
}

impl InPlaceFormat {
    /// Its files in prose: "TFRecord files", "WebDataset tars", "Parquet files".
    fn files(self) -> &'static str {
        match self {
            InPlaceFormat::TfRecord => "TFRecord files",
            InPlaceFormat::WebDataset => "WebDataset tars",
            InPlaceFormat::Parquet => "Parquet files",
            InPlaceFormat::Jsonl => "JSONL files",
        }
    }

    /// Its name in prose: "TFRecord", "WebDataset", "Parquet".
    fn label(self) -> &'static str {
        match self {
            InPlaceFormat::TfRecord => "TFRecord",
            InPlaceFormat::WebDataset => "WebDataset",
            InPlaceFormat::Parquet => "Parquet",
            InPlaceFormat::Jsonl => "JSONL",
        }
    }
}

/// `items` joined as prose: `a, b and c` (`conjunction` "and" or "or").
fn prose(items: &[&str], conjunction: &str) -> String {
    match items.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} {conjunction} {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// What to say instead of `e`, the error of opening `path` as a dataset, when `path` is a local
/// path that is no dataset (it has no manifest): what a dataset is, how to make one of what
/// `path` holds, and which files are read in place (from [`InPlaceFormat::ALL`]). `None`: `e`
/// says it as it is (a URL, a damaged dataset, another error). Both fronts say it through this
/// one function: the CLI also explains a manifest given for its directory and a file `pack`
/// cannot read (Python keeps its one wording, and a file's own `NotADirectory` error).
pub fn not_a_dataset(path: &Path, e: &FormatError, front: Front) -> Option<String> {
    use stokehold_format::MANIFEST_FILE;
    let missing_manifest = matches!(
        e,
        FormatError::Io { path: p, source, .. }
            if (source.kind() == io::ErrorKind::NotFound
                || front == Front::Cli && source.kind() == io::ErrorKind::NotADirectory)
                && p.file_name() == Some(std::ffi::OsStr::new(MANIFEST_FILE))
    );
    if !missing_manifest || stokehold_storage::Place::of(path).is_remote() {
        return None;
    }
    let d = path.display();
    if path.join("meta").join("info.json").is_file() {
        // a LeRobot dataset: the Loader reads it in place, not Dataset or the CLI's commands
        return Some(format!(
            "{d} is a LeRobot dataset (it has meta/info.json), not a stokehold dataset: load it \
             in place with stokehold.Loader(\"{d}\", batch_size) or \
             stokehold.Loader(stokehold.lerobot.LeRobotDataset(\"{d}\", delta_timestamps=...), \
             batch_size) (docs/video.md, \"LeRobot datasets, read in place\")"
        ));
    }
    let in_place = InPlaceFormat::ALL.map(InPlaceFormat::files);
    Some(match front {
        Front::Python => {
            let what = if path.exists() {
                format!("{d} is not a stokehold dataset (it has no {MANIFEST_FILE})")
            } else {
                format!("{d}: no such directory (a dataset is a directory with a {MANIFEST_FILE})")
            };
            format!(
                "{what}: make one with `stokehold pack SOURCE DIR` (an image folder, JSONL/CSV, \
                 tars or TFRecords) or stokehold.ShardWriter, then open DIR; {} can also be \
                 opened in place (a file, a directory of them, a glob or a list)",
                prose(&in_place, "and")
            )
        }
        Front::Cli if !path.exists() => format!(
            "{d}: no such directory; give the directory of a stokehold dataset (one that \
             `stokehold pack SOURCE {d}` made), or {} files to read in place",
            prose(&InPlaceFormat::ALL.map(InPlaceFormat::label), "or")
        ),
        Front::Cli if path.file_name() == Some(std::ffi::OsStr::new(MANIFEST_FILE)) => {
            let parent = path.parent().unwrap_or(Path::new("."));
            format!(
                "{d}: give the dataset's directory ({}), not its manifest",
                parent.display()
            )
        }
        Front::Cli if path.is_file() && detect(&[path.to_path_buf()]).is_err() => {
            let folder = path.parent().filter(|p| !p.as_os_str().is_empty());
            let folder = folder.unwrap_or(Path::new(".")).display();
            format!(
                "{d} is a file, not a stokehold dataset (a directory with a {MANIFEST_FILE} and \
                 shards). `stokehold pack` reads folders of images (class sub-folders become \
                 labels), .jsonl/.csv tables of files, .tar (WebDataset), .tfrecord and .parquet \
                 files: to pack the images of its folder, `stokehold pack {folder} DATASET_DIR`, \
                 then run this command on DATASET_DIR"
            )
        }
        Front::Cli => {
            let what = if path.is_dir() { "directory" } else { "file" };
            format!(
                "{d} is not a stokehold dataset (a dataset is a directory with a {MANIFEST_FILE} \
                 and shards): if this {what} holds data to load (images, JSONL/CSV, Parquet), \
                 pack it first with `stokehold pack {d} DATASET_DIR`, then run this command on \
                 DATASET_DIR ({} are also read in place, unpacked)",
                prose(&in_place, "and")
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_table_names_the_formats_for_pack_and_in_place() {
        assert_eq!(
            SourceKind::of_name("a.TFRecords"),
            Some(SourceKind::TfRecord)
        );
        // the name `pack` took and files in place did not (issue #51)
        assert_eq!(
            SourceKind::of_name("train.tfrec"),
            Some(SourceKind::TfRecord)
        );
        assert_eq!(
            InPlaceFormat::of_name("train.tfrec"),
            Some(InPlaceFormat::TfRecord)
        );
        assert_eq!(
            InPlaceFormat::of_name("shard-000.tar"),
            Some(InPlaceFormat::WebDataset)
        );
        assert_eq!(
            InPlaceFormat::of_name("rows.jsonl"),
            Some(InPlaceFormat::Jsonl)
        );
        assert_eq!(
            InPlaceFormat::of_name("rows.NDJSON"),
            Some(InPlaceFormat::Jsonl)
        );
        // one JSON document (a manifest) is not JSON Lines by its name
        assert_eq!(InPlaceFormat::of_name("manifest.json"), None);
        assert_eq!(InPlaceFormat::parse("jsonl"), Some(InPlaceFormat::Jsonl));
        assert_eq!(InPlaceFormat::of_name("train-00000-of-01024"), None);
        for (name, kind) in NAMES {
            assert_eq!(SourceKind::parse(name), Some(kind), "{name}");
            assert_eq!(
                SourceKind::parse(&name.to_ascii_uppercase()),
                Some(kind),
                "{name}"
            );
        }
        assert_eq!(InPlaceFormat::parse("tar"), Some(InPlaceFormat::WebDataset));
        assert_eq!(InPlaceFormat::parse("pq"), Some(InPlaceFormat::Parquet));
        assert_eq!(InPlaceFormat::parse("csv"), None);
        for f in InPlaceFormat::ALL {
            assert_eq!(InPlaceFormat::parse(f.name()), Some(f));
            assert_eq!(SourceKind::parse(f.name()), Some(f.kind()));
        }
        assert_eq!(
            InPlaceFormat::names(),
            "tfrecord, webdataset, parquet or jsonl"
        );
    }
}
