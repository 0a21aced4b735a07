//! `stokehold.ShardWriter`: writes a dataset directory, atomically.

use std::borrow::Cow;
use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};
use stokehold_format::{FieldValue, ImageCodec, Schema, WriteOptions};
use stokehold_ingest::{ImagePolicy, apply_image_policy};
use stokehold_storage::{DatasetWriteOptions, DatasetWriter};

use crate::convert::{Prepared, prepare};
use crate::errors::{schema_error, stokehold_error, to_py_err};

/// Writes samples (dicts) into a new dataset directory, rolling shards at `shard_size` bytes.
/// Nothing appears at `path` until `close()` (or the end of a `with` block without an
/// exception); an aborted writer leaves nothing behind.
#[derive(Debug)]
#[pyclass(module = "stokehold", name = "ShardWriter")]
pub struct ShardWriter {
    inner: Option<DatasetWriter>,
    path: PathBuf,
    written: u64,
    /// With `restart_markers`, every JPEG rewritten as `pack` rewrites it (lossless baseline
    /// with restart markers); otherwise stored as given (as `PartWriter`'s).
    policy: ImagePolicy,
    /// JPEGs stored as given because the rewrite refused them.
    kept_as_is: u64,
}

/// The schema from a dict name → spec, or an iterable of (name, spec) pairs.
pub(crate) fn parse_schema(schema: &Bound<'_, PyAny>) -> PyResult<Schema> {
    let py = schema.py();
    let bad = |e: PyErr| {
        schema_error(
            py,
            format!(
                "schema must map field names (str) to type specs (str), as a dict or a list of \
                 (name, spec) pairs, like {{\"image\": \"image:jpeg\", \"label\": \"int64\"}}: {e}"
            ),
        )
    };
    let pairs: Vec<(String, String)> = if let Ok(d) = schema.cast::<PyDict>() {
        d.iter()
            .map(|(k, v)| Ok((k.extract::<String>()?, v.extract::<String>()?)))
            .collect::<PyResult<_>>()
            .map_err(bad)?
    } else if schema.is_instance_of::<PyString>() {
        return Err(bad(pyo3::exceptions::PyTypeError::new_err("got a str")));
    } else {
        schema
            .try_iter()
            .and_then(|it| {
                it.map(|item| item?.extract::<(String, String)>())
                    .collect::<PyResult<_>>()
            })
            .map_err(bad)?
    };
    Schema::from_specs(pairs.iter().map(|(n, s)| (n.as_str(), s.as_str())))
        .map_err(|e| to_py_err(py, e))
}

/// The values of `sample` (a dict with exactly the schema's fields) converted for their fields,
/// or a `SchemaError` naming the missing and unknown fields or the field whose value does not
/// fit.
pub(crate) fn prepare_sample<'py>(
    schema: &Schema,
    sample: &Bound<'py, PyDict>,
) -> PyResult<Vec<Prepared<'py>>> {
    let py = sample.py();
    let mut missing = Vec::new();
    let mut prepared: Vec<Prepared<'_>> = Vec::with_capacity(schema.len());
    for field in &schema.fields {
        match sample.get_item(&field.name)? {
            Some(v) => prepared.push(prepare(field, &v)?),
            None => missing.push(PyString::new(py, &field.name).repr()?.to_string()),
        }
    }
    let mut extra = Vec::new();
    if sample.len() + missing.len() != schema.len() {
        for key in sample.keys() {
            let known = key
                .extract::<String>()
                .is_ok_and(|k| schema.index_of(&k).is_some());
            if !known {
                extra.push(key.repr()?.to_string());
            }
        }
    }
    if !missing.is_empty() || !extra.is_empty() {
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!("missing field(s) [{}]", missing.join(", ")));
        }
        if !extra.is_empty() {
            parts.push(format!("unknown field(s) [{}]", extra.join(", ")));
        }
        return Err(schema_error(
            py,
            format!(
                "sample does not match the schema: {} (the schema's fields are [{}])",
                parts.join("; "),
                field_list(py, schema)?
            ),
        ));
    }
    Ok(prepared)
}

/// The schema's field names, quoted, comma-separated.
fn field_list(py: Python<'_>, schema: &Schema) -> PyResult<String> {
    let fields = schema
        .fields
        .iter()
        .map(|f| Ok(PyString::new(py, &f.name).repr()?.to_string()))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(fields.join(", "))
}

/// The field values of prepared values, borrowing from them.
pub(crate) fn values_of<'a>(schema: &Schema, prepared: &'a [Prepared<'_>]) -> Vec<FieldValue<'a>> {
    schema
        .fields
        .iter()
        .zip(prepared)
        .map(|(f, p)| p.value(&f.ty))
        .collect()
}

/// The columns of a batch (`{field: sequence}`, every field of the schema, equal lengths) in
/// field order, with their length, or a `SchemaError` naming what does not match.
pub(crate) fn batch_columns<'py>(
    schema: &Schema,
    columns: &Bound<'py, PyDict>,
) -> PyResult<(Vec<Bound<'py, PyAny>>, usize)> {
    let py = columns.py();
    let mut out = Vec::with_capacity(schema.len());
    let mut rows: Option<(usize, &str)> = None;
    for field in &schema.fields {
        let Some(col) = columns.get_item(&field.name)? else {
            return Err(schema_error(
                py,
                format!(
                    "batch has no column {:?} (the schema's fields are [{}])",
                    field.name,
                    field_list(py, schema)?
                ),
            ));
        };
        let n = col.len()?;
        match rows {
            Some((m, first)) if m != n => {
                return Err(schema_error(
                    py,
                    format!(
                        "batch columns differ in length: {first:?} has {m} rows, {:?} has {n}",
                        field.name
                    ),
                ));
            }
            Some(_) => {}
            None => rows = Some((n, &field.name)),
        }
        out.push(col);
    }
    if columns.len() != schema.len() {
        let extra: Vec<String> = columns
            .keys()
            .iter()
            .filter(|k| {
                !k.extract::<String>()
                    .is_ok_and(|k| schema.index_of(&k).is_some())
            })
            .map(|k| k.repr().map(|r| r.to_string()))
            .collect::<PyResult<_>>()?;
        return Err(schema_error(
            py,
            format!(
                "batch has unknown column(s) [{}] (the schema's fields are [{}])",
                extra.join(", "),
                field_list(py, schema)?
            ),
        ));
    }
    Ok((out, rows.map_or(0, |r| r.0)))
}

/// The writer options of the Python arguments, or a `SchemaError` naming the one out of range.
pub(crate) fn write_options(
    py: Python<'_>,
    shard_size: i64,
    align: i64,
    zstd_level: i32,
    overwrite: bool,
) -> PyResult<DatasetWriteOptions> {
    let shard_size = u64::try_from(shard_size)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            schema_error(
                py,
                format!(
                    "shard_size must be a number of bytes >= 1 (e.g. 256 * 2**20), got {shard_size}"
                ),
            )
        })?;
    let align = u32::try_from(align).map_err(|_| {
        schema_error(
            py,
            format!(
                "align must be a power of two from 1 to {}, got {align}",
                stokehold_format::shard::MAX_ALIGN
            ),
        )
    })?;
    Ok(DatasetWriteOptions {
        write: WriteOptions { align, zstd_level },
        target_shard_bytes: shard_size,
        overwrite,
    })
}

impl ShardWriter {
    fn writer(&mut self) -> PyResult<&mut DatasetWriter> {
        self.inner.as_mut().ok_or_else(|| {
            stokehold_error(format!("ShardWriter for {} is closed", self.path.display()))
        })
    }
}

#[pymethods]
impl ShardWriter {
    #[new]
    #[pyo3(signature = (path, schema, *, shard_size = 268_435_456, align = 1, zstd_level = 3, overwrite = false, classes = None, storage_options = None, restart_markers = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        schema: &Bound<'_, PyAny>,
        // signed, so that a negative value is a SchemaError naming it rather than pyo3's
        // OverflowError "can't convert negative int to unsigned"
        shard_size: i64,
        align: i64,
        zstd_level: i32,
        overwrite: bool,
        classes: Option<Vec<String>>,
        storage_options: Option<crate::storage_options::StorageOptions>,
        restart_markers: bool,
    ) -> PyResult<ShardWriter> {
        let schema = parse_schema(schema)?;
        let options = write_options(py, shard_size, align, zstd_level, overwrite)?;
        let storage_options = crate::storage_options::resolve(py, storage_options)?;
        let mut inner = py
            .detach(|| DatasetWriter::create_with(&path, schema, options, &storage_options))
            .map_err(|e| to_py_err(py, e))?;
        if let Some(classes) = classes {
            inner.set_classes(classes);
        }
        Ok(ShardWriter {
            inner: Some(inner),
            path,
            written: 0,
            policy: ImagePolicy {
                restart_markers,
                ..ImagePolicy::default()
            },
            kept_as_is: 0,
        })
    }

    /// Append one sample (a dict with exactly the schema's fields); returns its index.
    fn write(&mut self, py: Python<'_>, sample: &Bound<'_, PyDict>) -> PyResult<u64> {
        let policy = self.policy;
        let mut kept = 0;
        let writer = self.writer()?;
        let prepared = prepare_sample(writer.schema(), sample)?;
        let values = values_of(writer.schema(), &prepared);
        let index = py
            .detach(|| writer.write(&with_image_policy(values, &policy, &mut kept)))
            .map_err(|e| to_py_err(py, e))?;
        self.written += 1;
        self.kept_as_is += kept;
        Ok(index)
    }

    /// With `restart_markers=True`: the JPEGs stored as given so far because the lossless
    /// rewrite refused them (as `pack`'s `kept_as_is`); 0 otherwise.
    #[getter]
    fn kept_as_is(&self) -> u64 {
        self.kept_as_is
    }

    /// Finish: close the last shard, write the manifest, publish the dataset. Returns the
    /// manifest as a dict.
    fn close<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.writer()?;
        let Some(mut writer) = self.inner.take() else {
            return Err(stokehold_error("ShardWriter is closed"));
        };
        if self.policy.restart_markers {
            // as pack records it: the JPEGs carry restart markers, and how many were refused
            writer.set_source(serde_json::json!({
                "restart_markers": true,
                "kept_as_is": self.kept_as_is,
            }));
        }
        let manifest = py
            .detach(|| writer.finish())
            .map_err(|e| to_py_err(py, e))?;
        py.import("json")?
            .call_method1("loads", (manifest.to_json(),))
    }

    /// Give up: remove everything written so far. Does nothing on a closed writer.
    fn abort(&mut self, py: Python<'_>) {
        if let Some(w) = self.inner.take() {
            py.detach(|| w.abort());
        }
    }

    /// True once closed or aborted.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_none()
    }

    /// The destination directory.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        let Ok(s) = self.path.as_os_str().into_pyobject(py);
        s
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.written).unwrap_or(usize::MAX)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyResult<PyRef<'_, Self>> {
        if slf.inner.is_none() {
            return Err(stokehold_error("ShardWriter is closed"));
        }
        Ok(slf)
    }

    /// Finish when the block ends normally, abort when an exception is propagating (and let it
    /// propagate).
    fn __exit__(
        &mut self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyType>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some() {
            self.abort(py);
        } else if self.inner.is_some() {
            self.close(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.inner.is_some() {
            "open"
        } else {
            "closed"
        };
        format!(
            "ShardWriter({:?}, {} samples written, {state})",
            self.path.display().to_string(),
            self.written
        )
    }
}

/// `values` with pack's image policy applied to every JPEG in an image field or a list of
/// images (restart markers, the same function `stokehold pack` runs) when it has anything to do,
/// else as they are; a file the rewrite refuses is kept as given and counted in `kept`. What
/// both Python writers (`ShardWriter`, Ray's `PartWriter`) write a row through.
pub(crate) fn with_image_policy<'a>(
    values: Vec<FieldValue<'a>>,
    policy: &ImagePolicy,
    kept: &mut u64,
) -> Vec<FieldValue<'a>> {
    if !policy.restart_markers {
        return values;
    }
    values
        .into_iter()
        .map(|v| match v {
            FieldValue::Image(b) if ImageCodec::sniff(&b) == Some(ImageCodec::Jpeg) => {
                let mut bytes = b.into_owned();
                match apply_image_policy(&mut bytes, policy) {
                    Ok(a) if a.kept.is_none() => {}
                    // refused (`Ok` with a reason) or failed: stored as given, as pack does
                    _ => *kept += 1,
                }
                FieldValue::Image(Cow::Owned(bytes))
            }
            FieldValue::List(items) => FieldValue::List(with_image_policy(items, policy, kept)),
            v => v,
        })
        .collect()
}
