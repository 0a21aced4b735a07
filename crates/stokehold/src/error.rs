//! The engine's error type.

use stokehold_format::FormatError;

/// Errors of the engine. Every error about a sample carries its global id.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// Reading or decoding sample `id` failed (the inner error names file, record and offset).
    #[error("sample {id}: {source}")]
    Sample {
        /// Global sample id.
        id: u64,
        /// The format error.
        #[source]
        source: FormatError,
    },
    /// A transform stage failed on sample `id`.
    #[error("sample {id} ({at}): stage {stage:?} of column {column:?} failed: {source}")]
    Transform {
        /// Global sample id.
        id: u64,
        /// Where the sample's bytes are (boxed: keeps `Result`s small).
        at: Box<RecordPlace>,
        /// The stage's name.
        stage: String,
        /// The output column.
        column: String,
        /// What went wrong, typed (the kernel's error or a binding's exception).
        #[source]
        source: StageError,
    },
    /// A transform panicked on sample `id`; the panic was caught at the sample boundary.
    #[error("sample {id}: a transform panicked: {message}")]
    Panic {
        /// Global sample id.
        id: u64,
        /// The panic message.
        message: String,
    },
    /// The `skip` policy's budget is exhausted.
    #[error("too many failed samples: {detail} (first failure: {first})")]
    TooManyFailures {
        /// Which bound was crossed.
        detail: String,
        /// The first failure.
        #[source]
        first: Box<EngineError>,
    },
    /// A resume state that does not belong to this loader.
    #[error(
        "incompatible resume state: {field} is {found} in the state but {expected} here; load a \
         state into a loader made like the one that saved it (same dataset, seed and shuffle), \
         or start without it"
    )]
    IncompatibleResume {
        /// The field that differs (`version`, `dataset`, `seed`, `shuffle`, `epoch`, `position`).
        field: &'static str,
        /// This loader's value.
        expected: String,
        /// The state's value.
        found: String,
    },
    /// A resume state that cannot be parsed: `field` names the key at fault when there is one.
    #[error("invalid resume state: {}{detail}", field.as_ref().map(|f| format!("{f}: ")).unwrap_or_default())]
    InvalidState {
        /// The key at fault (`position`, `seed`, ...), if the fault is one key's.
        field: Option<String>,
        /// What is wrong.
        detail: String,
    },
    /// The worker threads could not be started, or stopped without a word (a bug, or a thread
    /// killed from outside).
    #[error("worker threads: {0}")]
    Worker(String),
    /// A configuration error, found when the loader is built.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An error from the sampler.
    #[error(transparent)]
    Sampler(#[from] crate::sampler::SamplerError),
    /// The dataset could not be read.
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl EngineError {
    /// This error as a mixture reports it of its source `name`: a configuration error names
    /// the source (other errors name their dataset and sample already).
    pub(crate) fn in_source(self, name: &str) -> EngineError {
        match self {
            EngineError::Config(m) => EngineError::Config(format!("source '{name}': {m}")),
            other => other,
        }
    }

    /// True for failures of one sample that the `skip` policy may skip: damaged data, a failed
    /// transform or a caught panic.
    pub fn is_sample_failure(&self) -> bool {
        match self {
            EngineError::Sample { source, .. } => source.is_corruption(),
            EngineError::Transform { .. } | EngineError::Panic { .. } => true,
            _ => false,
        }
    }

    /// The global sample id the error is about, if any.
    pub fn sample_id(&self) -> Option<u64> {
        match self {
            EngineError::Sample { id, .. }
            | EngineError::Transform { id, .. }
            | EngineError::Panic { id, .. } => Some(*id),
            _ => None,
        }
    }
}

/// Where a record's bytes are: its shard file, its index there, and its byte range in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordPlace {
    /// The shard file.
    pub shard: std::path::PathBuf,
    /// The record's index in the shard.
    pub record: u64,
    /// Its bytes in the file.
    pub bytes: std::ops::Range<u64>,
}

impl std::fmt::Display for RecordPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} record {}, bytes {}..{}",
            self.shard.display(),
            self.record,
            self.bytes.start,
            self.bytes.end
        )
    }
}

/// `Result` with [`EngineError`].
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Why a stage failed on one sample: the kernel's typed error, or the error of a stage defined
/// elsewhere (a Python callable's exception), kept as the source so bindings can re-raise it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// An image kernel failed (an over-limit image is [`stokehold_ops::OpsError::TooLarge`]).
    #[error(transparent)]
    Ops(#[from] stokehold_ops::OpsError),
    /// The tokenizer failed.
    #[error(transparent)]
    Text(#[from] stokehold_ops::text::TextError),
    /// A stage defined outside this crate failed; `source` is its own error.
    #[error("{message}")]
    External {
        /// The error as text (with a traceback where there is one).
        message: String,
        /// The original error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A value a stage cannot take (a wrong kind, a slot of another size).
    #[error("{0}")]
    Invalid(String),
}

impl From<String> for StageError {
    fn from(m: String) -> StageError {
        StageError::Invalid(m)
    }
}

/// `Result` of a stage.
pub type StageResult<T> = std::result::Result<T, StageError>;
