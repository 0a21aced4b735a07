//! Datasets written by many writers (`stokehold_storage::parts`), for `stokehold.ray`: one
//! `PartWriter` per write task, `prepare_parts` / `commit_parts` / `abort_parts` on the driver.

use std::collections::BTreeMap;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use stokehold_format::{FieldValue, ShardInfo};
use stokehold_ingest::{DEFAULT_RESTART_MARKERS, ImagePolicy};
use stokehold_storage::PartWriter as FormatPartWriter;
use stokehold_storage::parts::{self, Commit};

use crate::convert::prepare;
use crate::errors::{schema_error, stokehold_error, to_py_err};
use crate::writer::{
    batch_columns, parse_schema, prepare_sample, values_of, with_image_policy, write_options,
};

/// One write task's writer of a dataset written by many: shards named after the run and the
/// task, written straight into the destination; no manifest (`commit_parts` writes it).
#[derive(Debug)]
#[pyclass(module = "stokehold._native", name = "PartWriter")]
pub struct PartWriter {
    inner: Option<FormatPartWriter>,
    path: PathBuf,
    /// What is done to JPEGs in image fields: restart markers, as `stokehold pack` does by
    /// default, or nothing.
    policy: ImagePolicy,
    /// JPEGs stored as given because the rewrite refused them (as pack's `kept_as_is`).
    kept_as_is: u64,
}

impl PartWriter {
    fn writer(&mut self) -> PyResult<&mut FormatPartWriter> {
        self.inner.as_mut().ok_or_else(|| {
            stokehold_error(format!("PartWriter for {} is closed", self.path.display()))
        })
    }
}

/// Write one row, pack's image policy applied first ([`with_image_policy`]).
fn write_row(
    writer: &mut FormatPartWriter,
    values: Vec<FieldValue<'_>>,
    policy: &ImagePolicy,
    kept: &mut u64,
) -> stokehold_format::Result<u64> {
    writer.write(&with_image_policy(values, policy, kept))
}

/// A shard's entry as a dict (`file`, `records`, `bytes`, `crc32c`).
fn info_to_py<'py>(py: Python<'py>, s: &ShardInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("file", &s.file)?;
    d.set_item("records", s.records)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item("crc32c", s.crc32c)?;
    Ok(d)
}

fn info_from_py(d: &Bound<'_, PyDict>) -> PyResult<ShardInfo> {
    let py = d.py();
    let get = |k: &str| {
        d.get_item(k)?
            .ok_or_else(|| schema_error(py, format!("a shard entry has no {k:?}: {d}")))
    };
    Ok(ShardInfo {
        file: get("file")?.extract()?,
        records: get("records")?.extract()?,
        bytes: get("bytes")?.extract()?,
        crc32c: get("crc32c")?.extract()?,
    })
}

#[pymethods]
impl PartWriter {
    #[new]
    #[pyo3(signature = (path, schema, *, run, task, shard_size = 268_435_456, align = 1, zstd_level = 3, storage_options = None, restart_markers = DEFAULT_RESTART_MARKERS))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        schema: &Bound<'_, PyAny>,
        run: &str,
        task: u64,
        shard_size: i64,
        align: i64,
        zstd_level: i32,
        storage_options: Option<crate::storage_options::StorageOptions>,
        restart_markers: bool,
    ) -> PyResult<PartWriter> {
        let schema = parse_schema(schema)?;
        let options = write_options(py, shard_size, align, zstd_level, false)?;
        let storage_options = crate::storage_options::resolve(py, storage_options)?;
        let inner = py
            .detach(|| {
                FormatPartWriter::create(&path, schema, options, &storage_options, run, task)
            })
            .map_err(|e| to_py_err(py, e))?;
        Ok(PartWriter {
            inner: Some(inner),
            path,
            policy: ImagePolicy {
                restart_markers,
                ..ImagePolicy::default()
            },
            kept_as_is: 0,
        })
    }

    /// Append one sample (a dict with exactly the schema's fields); returns its index.
    fn write(&mut self, py: Python<'_>, sample: &Bound<'_, PyDict>) -> PyResult<u64> {
        let (policy, mut kept) = (self.policy, 0);
        let writer = self.writer()?;
        let prepared = prepare_sample(writer.schema(), sample)?;
        let values = values_of(writer.schema(), &prepared);
        let written = py.detach(|| write_row(writer, values, &policy, &mut kept));
        self.kept_as_is += kept;
        written.map_err(|e| to_py_err(py, e))
    }

    /// Append the rows of a batch: a dict field → sequence (every field, equal lengths).
    /// Returns the number of rows written.
    fn write_columns(&mut self, py: Python<'_>, columns: &Bound<'_, PyDict>) -> PyResult<usize> {
        let (policy, mut kept) = (self.policy, 0);
        let writer = self.writer()?;
        let schema = writer.schema().clone();
        let (cols, rows) = batch_columns(&schema, columns)?;
        let mut prepared = Vec::with_capacity(schema.len());
        for i in 0..rows {
            prepared.clear();
            for (field, col) in schema.fields.iter().zip(&cols) {
                prepared.push(prepare(field, &col.get_item(i)?)?);
            }
            let values = values_of(&schema, &prepared);
            let written = py.detach(|| write_row(writer, values, &policy, &mut kept));
            if let Err(e) = written {
                self.kept_as_is += kept;
                return Err(to_py_err(py, e));
            }
        }
        self.kept_as_is += kept;
        Ok(rows)
    }

    /// JPEGs stored as given so far because the restart-marker rewrite refused them.
    #[getter]
    fn kept_as_is(&self) -> u64 {
        self.kept_as_is
    }

    /// Close the last shard; returns the shards written, in order, as dicts (`file`,
    /// `records`, `bytes`, `crc32c`) for `commit_parts`.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.writer()?;
        let Some(writer) = self.inner.take() else {
            return Err(stokehold_error("PartWriter is closed"));
        };
        let shards = py
            .detach(|| writer.finish())
            .map_err(|e| to_py_err(py, e))?;
        let items = shards
            .iter()
            .map(|s| info_to_py(py, s))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)
    }

    /// Give up: remove the shards written. Does nothing on a finished writer.
    fn abort(&mut self, py: Python<'_>) {
        if let Some(w) = self.inner.take() {
            py.detach(|| w.abort());
        }
    }

    fn __len__(&self) -> usize {
        self.inner
            .as_ref()
            .map_or(0, |w| usize::try_from(w.len()).unwrap_or(usize::MAX))
    }
}

/// Start a job writing the dataset at `path` with many `PartWriter`s; returns its run tag.
#[pyfunction]
#[pyo3(signature = (path, storage_options = None))]
pub fn prepare_parts(
    py: Python<'_>,
    path: PathBuf,
    storage_options: Option<crate::storage_options::StorageOptions>,
) -> PyResult<String> {
    let storage_options = crate::storage_options::resolve(py, storage_options)?;
    py.detach(|| parts::prepare_parts(&path, &storage_options))
        .map_err(|e| to_py_err(py, e))
}

/// Commit the dataset at `path`: check every listed shard, remove the run's other files, write
/// the extra files and the manifest (the commit point). Returns the manifest as a dict.
#[pyfunction]
#[pyo3(signature = (path, schema, shards, *, run, align = 1, classes = None, source = None, files = None, storage_options = None))]
#[allow(clippy::too_many_arguments)]
pub fn commit_parts<'py>(
    py: Python<'py>,
    path: PathBuf,
    schema: &Bound<'py, PyAny>,
    shards: Vec<Bound<'py, PyDict>>,
    run: &str,
    align: u32,
    classes: Option<Vec<String>>,
    source: Option<&str>,
    files: Option<BTreeMap<String, Bound<'py, PyBytes>>>,
    storage_options: Option<crate::storage_options::StorageOptions>,
) -> PyResult<Bound<'py, PyAny>> {
    let schema = parse_schema(schema)?;
    let shards = shards
        .iter()
        .map(info_from_py)
        .collect::<PyResult<Vec<_>>>()?;
    let source = match source {
        Some(s) => serde_json::from_str(s)
            .map_err(|e| schema_error(py, format!("source must be JSON: {e}")))?,
        None => serde_json::Value::Null,
    };
    let files = files
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.as_bytes().to_vec()))
        .collect();
    let commit = Commit {
        align,
        classes,
        source,
        files,
    };
    let options = crate::storage_options::resolve(py, storage_options)?;
    let manifest = py
        .detach(|| parts::commit_parts(&path, schema, shards, commit, run, &options))
        .map_err(|e| to_py_err(py, e))?;
    py.import("json")?
        .call_method1("loads", (manifest.to_json(),))
}

/// Give up the job of run `run` at `path`: remove its shards. Returns how many were removed.
#[pyfunction]
#[pyo3(signature = (path, run, storage_options = None))]
pub fn abort_parts(
    py: Python<'_>,
    path: PathBuf,
    run: &str,
    storage_options: Option<crate::storage_options::StorageOptions>,
) -> PyResult<usize> {
    let storage_options = crate::storage_options::resolve(py, storage_options)?;
    py.detach(|| parts::abort_parts(&path, run, &storage_options))
        .map_err(|e| to_py_err(py, e))
}

/// The stokehold field type of each column of an Arrow schema (anything with
/// `__arrow_c_schema__`, such as a `pyarrow.Schema`): `(name, type spec or None, Arrow type)` in
/// column order. The mapping is `stokehold_ingest::arrow::field_type`, the one `pack` uses for
/// Parquet, so the Ray `Datasink` and `pack` give the same schema for the same columns.
#[pyfunction]
fn _arrow_field_types(
    py: Python<'_>,
    schema: &Bound<'_, PyAny>,
) -> PyResult<Vec<(String, Option<String>, String)>> {
    let capsule = schema
        .call_method0("__arrow_c_schema__")?
        .cast_into::<pyo3::types::PyCapsule>()?;
    let pointer = capsule.pointer_checked(Some(c"arrow_schema"))?;
    // SAFETY: a capsule named "arrow_schema" holds an `ArrowSchema` of the Arrow C data
    // interface, valid while the capsule lives (it does, for this function); it is only read
    // here, never released or moved (the capsule's destructor releases it).
    let ffi = unsafe {
        &*pointer
            .as_ptr()
            .cast::<arrow_schema::ffi::FFI_ArrowSchema>()
    };
    let schema = arrow_schema::Schema::try_from(ffi)
        .map_err(|e| schema_error(py, format!("not an Arrow schema: {e}")))?;
    Ok(schema
        .fields()
        .iter()
        .map(|f| {
            let spec = stokehold_ingest::arrow::field_type(f.data_type()).map(|t| t.to_string());
            (f.name().clone(), spec, f.data_type().to_string())
        })
        .collect())
}

/// Register the classes and functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PartWriter>()?;
    m.add_function(wrap_pyfunction!(_arrow_field_types, m)?)?;
    m.add_function(wrap_pyfunction!(prepare_parts, m)?)?;
    m.add_function(wrap_pyfunction!(commit_parts, m)?)?;
    m.add_function(wrap_pyfunction!(abort_parts, m)?)?;
    Ok(())
}
