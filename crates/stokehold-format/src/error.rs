//! The one error type of this crate.

use std::path::PathBuf;

/// Every error of the shard format. Each variant names the file it is about and, where there is
/// one, the record, the global sample index and the byte offset, so a message alone is enough to
/// find the fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// An operating-system error while reading or writing `path`.
    #[error("{}: I/O error{}: {source}", path.display(), at(*offset))]
    Io {
        /// The file.
        path: PathBuf,
        /// The byte offset of the failed read, when it was a positional read.
        offset: Option<u64>,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start (or end) with the expected magic bytes.
    #[error("{}: not a stokehold {what}: expected magic {expected:?} at byte {offset}, found {found:?}", path.display())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// "shard header", "shard trailer", ...
        what: &'static str,
        /// Where the magic was expected.
        offset: u64,
        /// The expected bytes, escaped.
        expected: String,
        /// The bytes found, escaped.
        found: String,
    },
    /// A format version this build cannot read.
    #[error("{}: unsupported {what} version {found} (this build reads version {supported})", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// "shard" or "dataset manifest".
        what: &'static str,
        /// The version in the file.
        found: u64,
        /// The version this build reads.
        supported: u64,
    },
    /// The file is shorter than its own structure says it must be.
    #[error("{}: truncated: {what} needs bytes {start}..{end} but the file has {file_len} bytes", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The structure that does not fit.
        what: String,
        /// Its first byte.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A stored CRC-32C does not match the bytes.
    #[error("{}: checksum mismatch in {what}, bytes {start}..{end}: stored crc32c {stored:#010x}, computed {computed:#010x}", path.display())]
    Checksum {
        /// The file.
        path: PathBuf,
        /// "record 1877 (global sample 287221)", "index", "whole file", ...
        what: String,
        /// First byte covered.
        start: u64,
        /// One past the last byte covered.
        end: u64,
        /// The checksum stored in the file.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// A structure is internally inconsistent (an offset out of range, overlapping records, a
    /// field table that does not add up, invalid UTF-8, ...).
    #[error("{}: corrupt {what} at byte {offset}: {detail}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is corrupt, with its record and sample index where there is one.
        what: String,
        /// The byte offset of the corrupt structure.
        offset: u64,
        /// What exactly is wrong.
        detail: String,
    },
    /// A value read from a file exceeds a configured limit (see [`crate::Limits`]); nothing of that
    /// size was allocated.
    #[error("{}: {what} is {value}, over the limit of {max} (see stokehold Limits)", path.display())]
    LimitExceeded {
        /// The file.
        path: PathBuf,
        /// The quantity.
        what: String,
        /// Its value in the file.
        value: u64,
        /// The limit.
        max: u64,
    },
    /// The dataset manifest is invalid or disagrees with a shard.
    #[error("{}: {detail}", path.display())]
    Manifest {
        /// The manifest (or the shard it disagrees with).
        path: PathBuf,
        /// Both values, named.
        detail: String,
    },
    /// A path or pattern that names no file (a glob matching nothing, a directory without any
    /// file of a format read in place).
    #[error("{}: {detail}", path.display())]
    NotFound {
        /// The path or pattern as given.
        path: PathBuf,
        /// What was looked for, and what to give instead.
        detail: String,
    },
    /// What the user gave to read cannot be used as given: files in two directories, mixed
    /// formats, gzip-compressed files, a field choice that no sample fits (Python:
    /// `ConfigError`; never damage).
    #[error("{}: {detail}", path.display())]
    Input {
        /// The path, pattern or directory as given.
        path: PathBuf,
        /// What is wrong, and what to give instead.
        detail: String,
    },
    /// A schema is invalid, or a value does not fit its field.
    #[error("schema error: {0}")]
    Schema(String),
    /// A sample index past the end of the dataset.
    #[error("sample index {index} out of range: the dataset has {len} samples")]
    IndexOutOfRange {
        /// The index asked for.
        index: u64,
        /// The dataset's length.
        len: u64,
    },
    /// A token range past the end of a token dataset's stream.
    #[error("tokens {start}..{end} are past the stream's end ({total})")]
    TokenRange {
        /// First token asked for.
        start: u64,
        /// One past the last token asked for.
        end: u64,
        /// Tokens in the stream.
        total: u64,
    },
    /// A value given to a writer does not fit the schema; nothing was written.
    #[error("sample {sample}: {source}")]
    InvalidValue {
        /// Index of the sample in the dataset being written.
        sample: u64,
        /// What does not fit.
        #[source]
        source: RecordError,
    },
    /// The destination of a write already exists.
    #[error("{}: already exists and is not an empty directory: choose another destination, \
             remove it, or replace it (`stokehold pack --overwrite`; in Python \
             `ShardWriter(..., overwrite=True)`)", path.display())]
    DestinationExists {
        /// The destination.
        path: PathBuf,
    },
    /// Another writer (in this or another process) is writing the same destination.
    #[error("{}: another writer is writing this destination right now (it holds {}); wait for it to finish, or choose another destination", path.display(), lock.display())]
    DestinationBusy {
        /// The destination.
        path: PathBuf,
        /// The lock file the other writer holds.
        lock: PathBuf,
    },
    /// Overwrite was asked for, but the destination is not something a writer may replace: only
    /// a stokehold dataset (its manifest, its shards and its known extra files, nothing else) is
    /// ever replaced.
    #[error("{}: will not overwrite: {reason}", path.display())]
    NotReplaceable {
        /// The destination.
        path: PathBuf,
        /// Why not.
        reason: String,
    },
    /// A URL where only a local path is taken: a scheme that is not an object store's (object
    /// stores take s3://, gs://, az://, http(s):// and their kin), a command or option that
    /// works on local files, or a build without object storage.
    #[error("{url}: {scheme}:// URLs are not taken here: give a local path")]
    RemoteUnsupported {
        /// The URL as given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
    /// An object-storage URL that cannot be used: not a valid URL, an unknown storage option, a
    /// client that cannot be built. (Failed requests are [`FormatError::Io`] errors naming the
    /// object's URL and byte range.) Never holds an option's value.
    #[error("{url}: {detail}")]
    Remote {
        /// The URL (without user info).
        url: String,
        /// What is wrong.
        detail: String,
    },
}

/// ` at byte N` or nothing.
fn at(offset: Option<u64>) -> String {
    match offset {
        Some(o) => format!(" at byte {o}"),
        None => String::new(),
    }
}

impl FormatError {
    /// An I/O error on `path` at an optional offset.
    pub fn io(path: impl Into<PathBuf>, offset: Option<u64>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            offset,
            source,
        }
    }

    /// True for errors that mean the stored data is damaged (checksum, truncation, corrupt
    /// structure, bad magic), as opposed to I/O failures, limits or misuse. The engine's `skip`
    /// policy applies only to these.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            FormatError::Checksum { .. }
                | FormatError::Corrupt { .. }
                | FormatError::Truncated { .. }
                | FormatError::BadMagic { .. }
        )
    }
}

/// `Result` with [`FormatError`].
pub type Result<T, E = FormatError> = std::result::Result<T, E>;

/// Escape bytes for an error message (`b"STK\x00"`-style, printable ASCII kept).
pub(crate) fn escape(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// An error in one record's structure or one field's value. Carries no file name: the reader that
/// found the record adds it (see [`FormatError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The field table or a field's bytes are inconsistent.
    #[error("field {field} at byte {offset} of the record: {detail}")]
    Corrupt {
        /// Field position in the schema (or the table itself when equal to the field count).
        field: usize,
        /// Byte offset within the record.
        offset: u64,
        /// What is wrong.
        detail: String,
    },
    /// A value given to the writer does not match its field's type.
    #[error("field {field:?}: {detail}")]
    Mismatch {
        /// The field's name.
        field: String,
        /// What does not match.
        detail: String,
    },
}
