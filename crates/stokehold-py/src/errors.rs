//! The exception hierarchy of the Python package, and the one place where a [`FormatError`]
//! becomes a Python exception ([`to_py_err`]).
//!
//! ```text
//! Exception
//! └── StokeholdError
//!     ├── CorruptDataError          damaged data: checksum, truncation, bad magic, corrupt
//!     │                             structure, an invalid or inconsistent manifest
//!     ├── UnsupportedVersionError   a shard or manifest version this build cannot read
//!     ├── LimitExceededError        a size read from a file is over a configured limit
//!     ├── SchemaError (+ ValueError)        an invalid schema, or a value that does not fit it
//!     ├── StokeholdIOError (+ OSError)      an operating-system error (errno set when known),
//!     │                                     or a write destination that already exists
//!     ├── SampleError               a loader stage failed on one sample (`.sample_id`)
//!     ├── ConfigError (+ ValueError)        an invalid loader configuration or transform, or
//!     │                                     files to read in place that cannot be used as given
//!     └── IncompatibleStateError (+ ValueError)  a resume state of another dataset, seed,
//!                                           order or version (`.field` names it)
//!
//! Errors of the loading engine ([`EngineError`]) map in [`engine_err`]: damaged data of a sample
//! raises `CorruptDataError` with `.sample_id` set, a failed stage `SampleError`, an exhausted
//! skip budget `CorruptDataError`.
//! IndexError                        a sample index out of range (the built-in)
//! ```
//!
//! Every class is created here, in Rust, and lives in `stokehold._native` (its `__module__` is
//! `stokehold`, where the package re-exports it, so instances pickle). The single-base classes come
//! from `pyo3::create_exception!`. That macro takes one base, so the two classes with two bases
//! are made by calling `type(name, (StokeholdError, ValueError|OSError), namespace)` once, at
//! first use, and are cached in a [`PyOnceLock`]; this needs no `unsafe`.

use pyo3::exceptions::{PyException, PyIndexError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use stokehold::{EngineError, StageError};
use stokehold_format::FormatError;

pyo3::create_exception!(
    stokehold,
    StokeholdError,
    PyException,
    "Root of every error raised by stokehold."
);
pyo3::create_exception!(
    stokehold,
    CorruptDataError,
    StokeholdError,
    "Stored data is damaged: a checksum mismatch, a truncated or corrupt shard, bad magic bytes, \
     or an invalid manifest. The message names the file and, where there is one, the record, \
     the global sample index and the byte range."
);
pyo3::create_exception!(
    stokehold,
    UnsupportedVersionError,
    StokeholdError,
    "A shard or manifest written in a format version this build cannot read."
);
pyo3::create_exception!(
    stokehold,
    LimitExceededError,
    StokeholdError,
    "A size, count or length read from a file is over a configured limit (nothing of that size \
     was allocated)."
);

pyo3::create_exception!(
    stokehold,
    SampleError,
    StokeholdError,
    "A loader stage (a transform or a Python callable) failed on one sample, or panicked (the \
     panic was caught at the sample boundary). `.sample_id` is the global sample id; the message \
     names the stage and the column."
);

static SCHEMA_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static CONFIG_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static STATE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static IO_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// `type(name, (StokeholdError, base), {"__module__": "stokehold", "__doc__": doc})`.
fn two_base_type<'py>(
    py: Python<'py>,
    name: &str,
    base: Bound<'py, PyType>,
    doc: &str,
) -> PyResult<Py<PyType>> {
    let namespace = PyDict::new(py);
    namespace.set_item("__module__", "stokehold")?;
    namespace.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, [py.get_type::<StokeholdError>(), base])?;
    let ty = py
        .get_type::<PyType>()
        .call1((name, bases, namespace))?
        .cast_into::<PyType>()?;
    Ok(ty.unbind())
}

/// The `SchemaError` class (a `StokeholdError` and a `ValueError`).
pub fn schema_error_type(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    SCHEMA_ERROR
        .get_or_try_init(py, || {
            two_base_type(
                py,
                "SchemaError",
                py.get_type::<PyValueError>(),
                "An invalid schema, or a sample that does not fit the schema (a missing or extra \
                 field, a value of the wrong type, an array of the wrong dtype). The message names \
                 the field.",
            )
        })
        .map(|t| t.bind(py).clone())
}

/// The `StokeholdIOError` class (a `StokeholdError` and an `OSError`).
pub fn io_error_type(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    IO_ERROR
        .get_or_try_init(py, || {
            two_base_type(
                py,
                "StokeholdIOError",
                py.get_type::<PyOSError>(),
                "An operating-system error while reading or writing a dataset (`errno` is set \
                 when the system gave one), or a write destination that already exists. The \
                 message names the file.",
            )
        })
        .map(|t| t.bind(py).clone())
}

/// The `ConfigError` class (a `StokeholdError` and a `ValueError`).
pub fn config_error_type(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    CONFIG_ERROR
        .get_or_try_init(py, || {
            two_base_type(
                py,
                "ConfigError",
                py.get_type::<PyValueError>(),
                "An invalid loader configuration: a bad option value, a transform for a field \
                 the dataset does not have, or an unknown transform stage; or files to read in \
                 place that cannot be used as given.",
            )
        })
        .map(|t| t.bind(py).clone())
}

/// The `IncompatibleStateError` class (a `StokeholdError` and a `ValueError`).
pub fn state_error_type(py: Python<'_>) -> PyResult<Bound<'_, PyType>> {
    STATE_ERROR
        .get_or_try_init(py, || {
            two_base_type(
                py,
                "IncompatibleStateError",
                py.get_type::<PyValueError>(),
                "A resume state (`Loader.load_state_dict`) that does not belong to this loader: \
                 another dataset, seed, shuffle mode or state version, a position past the end, \
                 or a value that is not a state at all. `.field` names the field that differs \
                 (None when the state could not be parsed).",
            )
        })
        .map(|t| t.bind(py).clone())
}

/// A `ConfigError` with this message.
pub fn config_error(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    build(config_error_type(py), msg.into(), None)
}

/// An exception with an attribute set on it (best effort: a failure to set it leaves it unset).
fn with_attr<'py, V: IntoPyObject<'py>>(py: Python<'py>, e: PyErr, name: &str, v: V) -> PyErr {
    let _ = e.value(py).setattr(name, v);
    e
}

/// The one mapping from the engine's [`EngineError`] to Python exceptions.
pub fn engine_err(py: Python<'_>, e: EngineError) -> PyErr {
    let msg = e.to_string();
    match e {
        EngineError::Sample { id, source } => {
            let err = if source.is_corruption() {
                CorruptDataError::new_err(msg)
            } else {
                // keep the class (I/O error, limit, ...), with the sample named
                let class_of = to_py_err(py, source);
                let ty = class_of.get_type(py);
                ty.call1((msg.clone(),))
                    .map(PyErr::from_value)
                    .unwrap_or(class_of)
            };
            with_attr(py, err, "sample_id", id)
        }
        EngineError::Transform { id, source, .. } => {
            let err = match &source {
                StageError::Ops(stokehold::ops::OpsError::TooLarge { .. }) => {
                    LimitExceededError::new_err(msg)
                }
                _ => SampleError::new_err(msg),
            };
            if let StageError::External { source, .. } = source {
                // a Python stage's own exception is the cause
                if let Ok(cause) = source.downcast::<PyErr>() {
                    err.set_cause(py, Some(*cause));
                }
            }
            with_attr(py, err, "sample_id", id)
        }
        EngineError::Panic { id, .. } => with_attr(py, SampleError::new_err(msg), "sample_id", id),
        EngineError::TooManyFailures { .. } => CorruptDataError::new_err(msg),
        EngineError::IncompatibleResume { field, .. } => {
            with_attr(py, build(state_error_type(py), msg, None), "field", field)
        }
        EngineError::InvalidState { field, .. } => {
            with_attr(py, build(state_error_type(py), msg, None), "field", field)
        }
        EngineError::Config(_) | EngineError::Sampler(_) => config_error(py, msg),
        EngineError::Format(f) => to_py_err(py, f),
        _ => StokeholdError::new_err(msg),
    }
}

/// An exception of class `ty` with one argument, `msg`; `errno` set when given. Falls back to the
/// error raised while building it, which can only be a failure of the interpreter itself.
fn build(ty: PyResult<Bound<'_, PyType>>, msg: String, errno: Option<i32>) -> PyErr {
    let make = || -> PyResult<PyErr> {
        let value = ty?.call1((msg,))?;
        if let Some(errno) = errno {
            value.setattr("errno", errno)?;
        }
        Ok(PyErr::from_value(value))
    };
    make().unwrap_or_else(|e| e)
}

/// A `StokeholdIOError` with this message and `errno`.
pub fn io_error(py: Python<'_>, msg: impl Into<String>, errno: Option<i32>) -> PyErr {
    build(io_error_type(py), msg.into(), errno)
}

/// A `SchemaError` with this message.
pub fn schema_error(py: Python<'_>, msg: impl Into<String>) -> PyErr {
    build(schema_error_type(py), msg.into(), None)
}

/// A `StokeholdError` with this message (misuse, such as writing to a closed writer).
pub fn stokehold_error(msg: impl Into<String>) -> PyErr {
    StokeholdError::new_err(msg.into())
}

/// The one mapping from [`FormatError`] to Python exceptions. The message is always the error's
/// `Display`, which names the file, record and byte range.
pub fn to_py_err(py: Python<'_>, e: FormatError) -> PyErr {
    let msg = e.to_string();
    if e.is_corruption() {
        return CorruptDataError::new_err(msg);
    }
    match e {
        FormatError::Manifest { .. } => CorruptDataError::new_err(msg),
        FormatError::UnsupportedVersion { .. } => UnsupportedVersionError::new_err(msg),
        FormatError::LimitExceeded { .. } => LimitExceededError::new_err(msg),
        FormatError::Schema(_) | FormatError::InvalidValue { .. } => schema_error(py, msg),
        FormatError::IndexOutOfRange { .. } => PyIndexError::new_err(msg),
        FormatError::Io { source, .. } => build(io_error_type(py), msg, source.raw_os_error()),
        FormatError::DestinationExists { .. } | FormatError::NotReplaceable { .. } => {
            build(io_error_type(py), msg, Some(EEXIST))
        }
        FormatError::DestinationBusy { .. } => build(io_error_type(py), msg, Some(EBUSY)),
        FormatError::NotFound { .. } => build(io_error_type(py), msg, Some(ENOENT)),
        // the user's to change: an unusable path, pattern, format or field choice
        FormatError::Input { .. }
        | FormatError::RemoteUnsupported { .. }
        | FormatError::Remote { .. } => config_error(py, msg),
        _ => StokeholdError::new_err(msg),
    }
}

/// `EEXIST`, the same number on Linux, macOS and the BSDs.
const EEXIST: i32 = 17;
/// `EBUSY`, likewise.
const EBUSY: i32 = 16;
/// `ENOENT`, likewise.
pub(crate) const ENOENT: i32 = 2;

/// Add every exception class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("StokeholdError", py.get_type::<StokeholdError>())?;
    m.add("CorruptDataError", py.get_type::<CorruptDataError>())?;
    m.add(
        "UnsupportedVersionError",
        py.get_type::<UnsupportedVersionError>(),
    )?;
    m.add("LimitExceededError", py.get_type::<LimitExceededError>())?;
    m.add("SchemaError", schema_error_type(py)?)?;
    m.add("StokeholdIOError", io_error_type(py)?)?;
    m.add("SampleError", py.get_type::<SampleError>())?;
    m.add("ConfigError", config_error_type(py)?)?;
    m.add("IncompatibleStateError", state_error_type(py)?)?;
    Ok(())
}
