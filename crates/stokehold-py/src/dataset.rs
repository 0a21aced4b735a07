//! `stokehold.Dataset`: random access to a dataset directory, or to TFRecord files, WebDataset
//! tars and Parquet files read in place (`stokehold_ingest::inplace`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::errors::ENOENT;
use std::sync::Arc;

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict, PyList, PyString, PyTuple};
use stokehold_format::FieldValue;
use stokehold_format::tokens::{TokenDType, TokenIndex, TokenMeta, is_token_schema};
use stokehold_ingest::FieldChoice;
use stokehold_ingest::inplace::{InPlaceFormat, InPlaceOptions};
use stokehold_storage::{Access, Dataset as FormatDataset, OpenOptions};
use stokehold_storage::{TokenIndexOf, TokenMetaOf};

use crate::convert::sample_to_py;
use crate::errors::to_py_err;

/// A dataset opened for reading: a directory ``stokehold pack`` made, or TFRecord files,
/// WebDataset tars or Parquet files read in place.
///
/// ``len(ds)`` samples; ``ds[i]`` (negative ``i`` counts from the end) is a dict field name ->
/// value; iterating yields every sample in order. File reads and decoding release the GIL.
/// Pickles as "reopen the same path with the same options", so it can be sent to spawn-based
/// worker processes.
///
/// :param path: the dataset directory (holding ``manifest.json`` and the shards); or, to read
///     in place without packing, a TFRecord file (``*.tfrecord``, ``*.tfrecords`` or an
///     extension-less ``train-00000-of-01024``), a WebDataset tar, a directory of them, a glob
///     (``"data/train-*"``) or a list of paths. Each file is indexed once (its records' offsets, kept in
///     ``index_dir`` and reused while the file is unchanged); samples
///     are those ``stokehold pack --no-restart-markers`` of the same files would hold, in the
///     same order. See docs/storage.md, "Files in place".
/// :param access: how shards are read: ``"auto"`` (default: positional reads through the page
///     cache, or direct I/O when the dataset is larger than half the RAM), ``"pread"``,
///     ``"mmap"`` (the files must not change while open), ``"direct"`` (``O_DIRECT``, bypassing
///     the page cache) or ``"memory"`` (every shard read into memory at open).
/// :param mmap: shorthand for ``access="mmap"``.
/// :param in_memory: shorthand for ``access="memory"``; takes precedence over ``mmap``.
/// :param verify: check each record's CRC-32C when it is read.
/// :param storage_options: for a dataset in object storage (``path`` a URL such as
///     ``"s3://bucket/prefix"``): credentials, endpoint, region, ``retries``, named as fsspec
///     users know them (``key``, ``secret``, ``token``, ``endpoint_url``, ``region_name``,
///     ``anon``) or as object_store names them (``allow_http``, ``aws_region``, ...); they
///     override the environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...). Values are
///     str, bool (``{"anon": True}``) or numbers. See docs/storage.md, "Remote storage".
/// :param format: for files read in place, ``"tfrecord"``, ``"webdataset"`` or ``"parquet"``
///     when neither the names nor the first bytes say which.
/// :param fields: for files read in place, the fields to load, as ``stokehold pack --fields``
///     takes them: TFRecord feature names, tar member extensions or Parquet columns, ``"txt?"``
///     for one a sample may lack (a string or a list). Default: every field the first files'
///     records share.
/// :param index_dir: where the record indexes of files read in place are kept (default:
///     ``$STOKEHOLD_INDEX_DIR``, else ``~/.cache/stokehold/index``).
/// :param index_beside: keep each index next to its file instead (``FILE.skhidx``).
/// :param rebuild_index: scan every file again, ignoring the indexes kept before.
/// :raises StokeholdIOError: the directory or a file cannot be read (``errno`` set).
/// :raises CorruptDataError: a shard is truncated or damaged, or the manifest is invalid or
///     disagrees with a shard.
/// :raises UnsupportedVersionError: written by a newer format version.
/// :raises ConfigError: files to read in place that cannot be used as given (in two
///     directories, of mixed formats, gzip-compressed, or a ``fields`` choice no sample fits).
#[derive(Debug)]
#[pyclass(module = "stokehold", name = "Dataset", frozen)]
pub struct Dataset {
    /// Shared with the loaders made from this dataset (no reopening).
    inner: Arc<FormatDataset>,
    /// The path as given (made a string), for `.path` and `repr`: the first of several.
    path: PathBuf,
    /// Every path given (a list when more than one was), for pickling.
    paths: Vec<PathBuf>,
    /// How files in place are opened (unused for a packed dataset), for pickling.
    inplace: InPlaceOptions,
    /// The access asked for (before the automatic choice), for pickling.
    access: Access,
    verify: bool,
    /// Object-storage options for a URL (credentials among them: never in `repr`).
    storage_options: BTreeMap<String, String>,
    /// The token width when this is a token dataset (`ds[i]["tokens"]` is then a numpy array of
    /// it, not raw bytes).
    tokens: Option<TokenDType>,
}

impl Dataset {
    /// The opened dataset, shared.
    pub fn shared(&self) -> Arc<FormatDataset> {
        Arc::clone(&self.inner)
    }

    /// The options it was opened with.
    pub fn options(&self) -> OpenOptions {
        OpenOptions {
            access: self.access,
            verify_records: self.verify,
            storage_options: self.storage_options.clone(),
            ..OpenOptions::default()
        }
    }

    /// The sample index for a Python index (negative counts from the end).
    fn resolve(&self, i: i64) -> PyResult<u64> {
        let len = self.inner.len();
        let j = if i < 0 {
            i128::from(len) + i128::from(i)
        } else {
            i128::from(i)
        };
        if j < 0 || j >= i128::from(len) {
            return Err(PyIndexError::new_err(format!(
                "sample index {i} out of range: the dataset has {len} samples"
            )));
        }
        Ok(j as u64)
    }

    /// Sample `i` as a dict (reads and decodes without the GIL).
    fn sample<'py>(&self, py: Python<'py>, i: u64) -> PyResult<Bound<'py, PyDict>> {
        let values = py
            .detach(|| self.inner.get(i))
            .map_err(|e| to_py_err(py, e))?;
        match (self.tokens, values.as_slice()) {
            (Some(dtype), [FieldValue::Bytes(b)]) => {
                // Whole tokens: the open checked every record's length against the dtype and
                // the read checked the field table against the index.
                let flat = numpy::PyArray1::<u8>::from_slice(py, b);
                let dtype = match dtype {
                    TokenDType::U16 => "<u2",
                    TokenDType::U32 => "<u4",
                };
                let tokens = flat.call_method1("view", (dtype,))?;
                let d = PyDict::new(py);
                d.set_item(stokehold_format::tokens::TOKENS_FIELD, tokens)?;
                Ok(d)
            }
            _ => sample_to_py(py, self.inner.schema(), &values),
        }
    }

    fn open(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        access: Access,
        verify: bool,
        storage_options: BTreeMap<String, String>,
        inplace: InPlaceOptions,
    ) -> PyResult<Dataset> {
        let Some(path) = paths.first().cloned() else {
            return Err(crate::errors::config_error(
                py,
                "Dataset: an empty list of paths".to_string(),
            ));
        };
        let options = OpenOptions {
            access,
            verify_records: verify,
            storage_options: storage_options.clone(),
            ..OpenOptions::default()
        };
        let (inner, tokens) = py
            .detach(|| {
                let ds = stokehold_ingest::inplace::open(&paths, options, &inplace)?;
                // A token dataset (its schema and `source.tokens`): every record is checked to
                // hold whole tokens, so `ds[i]` can view them as an array.
                let tokens = if is_token_schema(ds.schema())
                    && ds.manifest().source.get("tokens").is_some()
                {
                    let meta = TokenMeta::from_dataset(&ds)?;
                    TokenIndex::from_dataset(&ds, &meta)?;
                    Some(meta.dtype)
                } else {
                    None
                };
                Ok::<_, stokehold_format::FormatError>((ds, tokens))
            })
            .map_err(|e| open_error(py, &path, e))?;
        Ok(Dataset {
            inner: Arc::new(inner),
            path,
            paths,
            inplace,
            access,
            verify,
            storage_options,
            tokens,
        })
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }
}

/// The error of opening `path`: when it is a local path without a manifest, one that says what
/// a dataset is and how to make one ([`stokehold_ingest::sources::not_a_dataset`], the
/// explanation the CLI gives too; a `StokeholdIOError` with errno ENOENT, as the bare I/O error
/// was).
fn open_error(py: Python<'_>, path: &std::path::Path, e: stokehold_format::FormatError) -> PyErr {
    use stokehold_ingest::sources::{Front, not_a_dataset};
    match not_a_dataset(path, &e, Front::Python) {
        Some(msg) => crate::errors::io_error(py, msg, Some(ENOENT)),
        None => to_py_err(py, e),
    }
}

/// A path, or a list of them (several files read in place).
#[derive(FromPyObject)]
enum Paths {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

impl Paths {
    fn into_vec(self) -> Vec<PathBuf> {
        match self {
            Paths::One(p) => vec![p],
            Paths::Many(v) => v,
        }
    }
}

/// Field names: `"jpg,cls,txt?"` or `["jpg", "cls", "txt?"]`.
#[derive(FromPyObject)]
enum Names {
    Joined(String),
    List(Vec<String>),
}

impl Names {
    fn joined(self) -> String {
        match self {
            Names::Joined(s) => s,
            Names::List(v) => v.join(","),
        }
    }
}

#[pymethods]
impl Dataset {
    #[new]
    #[pyo3(signature = (path, *, access = None, mmap = false, in_memory = false, verify = true, storage_options = None, format = None, fields = None, index_dir = None, index_beside = false, rebuild_index = false))]
    #[allow(clippy::too_many_arguments)] // the Python signature: keyword options
    fn new(
        py: Python<'_>,
        path: Paths,
        access: Option<&str>,
        mmap: bool,
        in_memory: bool,
        verify: bool,
        storage_options: Option<crate::storage_options::StorageOptions>,
        format: Option<&str>,
        fields: Option<Names>,
        index_dir: Option<PathBuf>,
        index_beside: bool,
        rebuild_index: bool,
    ) -> PyResult<Dataset> {
        let format = format
            .map(|f| {
                InPlaceFormat::parse(f).ok_or_else(|| {
                    crate::errors::config_error(
                        py,
                        format!(
                            "format must be \"tfrecord\", \"webdataset\" or \"parquet\" \
                             (files read in place); got {f:?}"
                        ),
                    )
                })
            })
            .transpose()?;
        let fields = fields
            .map(|f| FieldChoice::parse_list(&f.joined()))
            .transpose()
            .map_err(|e| crate::errors::config_error(py, format!("fields: {e}")))?;
        let inplace = InPlaceOptions {
            format,
            fields,
            index_dir,
            beside: index_beside,
            rebuild: rebuild_index,
            ..InPlaceOptions::default()
        };
        let access = match access {
            Some(a) => Access::parse(a).ok_or_else(|| {
                crate::errors::config_error(
                    py,
                    format!(
                        "access must be one of \"auto\", \"pread\", \"mmap\", \"direct\", \"memory\"; got {a:?}"
                    ),
                )
            })?,
            None if in_memory => Access::Memory,
            None if mmap => Access::Mmap,
            None => Access::Auto,
        };
        Dataset::open(
            py,
            path.into_vec(),
            access,
            verify,
            crate::storage_options::resolve(py, storage_options)?,
            inplace,
        )
    }

    /// The format of files read in place (`"tfrecord"`, `"webdataset"`, `"parquet"`), or None for a packed
    /// dataset.
    #[getter]
    fn in_place(&self) -> Option<&str> {
        stokehold_ingest::inplace::in_place_format(&self.inner)
    }

    /// How the shards are read: "pread", "mmap", "direct" or "memory" (after the automatic
    /// choice), or "remote" (ranged GETs from object storage).
    #[getter]
    fn access(&self) -> &'static str {
        if self.inner.read_profile().is_network() {
            "remote"
        } else {
            self.inner.access().name()
        }
    }

    fn __len__(&self) -> usize {
        // A dataset whose length does not fit usize could not have been opened (its index is
        // in memory), so this never saturates in practice.
        usize::try_from(self.inner.len()).unwrap_or(usize::MAX)
    }

    fn __getitem__<'py>(&self, py: Python<'py>, i: i64) -> PyResult<Bound<'py, PyDict>> {
        let i = self.resolve(i)?;
        self.sample(py, i)
    }

    fn __iter__(slf: Bound<'_, Self>) -> DatasetIter {
        DatasetIter {
            dataset: slf.unbind(),
            next: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The path the dataset was opened from.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        let Ok(s) = self.path.as_os_str().into_pyobject(py);
        s
    }

    /// The schema: a dict field name → spec string, in field order.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for f in &self.inner.schema().fields {
            d.set_item(&f.name, f.type_spec())?;
        }
        Ok(d)
    }

    /// Width and height of each image of sample `i`'s list of images `field`, as a list of
    /// `(width, height)` tuples, from the shards' meta blocks (files read in place: their
    /// indexes): nothing is read or decoded. None where the files keep no sizes.
    #[pyo3(signature = (i, field = "images"))]
    fn image_sizes<'py>(
        &self,
        py: Python<'py>,
        i: i64,
        field: &str,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let i = self.resolve(i)?;
        let sizes = self
            .inner
            .image_sizes(field, i)
            .map_err(|e| to_py_err(py, e))?;
        sizes
            .map(|s| PyList::new(py, s.chunks_exact(2).map(|wh| (wh[0], wh[1]))))
            .transpose()
    }

    /// Class names by label, or None.
    #[getter]
    fn classes<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        self.inner.classes().map(|c| PyList::new(py, c)).transpose()
    }

    /// The manifest, as a dict (parsed from its JSON).
    #[getter]
    fn manifest<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let json = self.inner.manifest().to_json();
        py.import("json")?.call_method1("loads", (json,))
    }

    /// Records `[lo, hi)` as one Arrow record batch built in Rust (`crate::arrow_out`): the
    /// `(schema, array)` PyCapsules of the Arrow C data interface, what `__arrow_c_array__`
    /// returns (`pyarrow.record_batch` takes an object that has it). For `stokehold.ray.read`.
    fn _arrow_batch<'py>(
        &self,
        py: Python<'py>,
        lo: u64,
        hi: u64,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let batch = py
            .detach(|| crate::arrow_out::record_batch(&self.inner, self.tokens, lo, hi))
            .map_err(|e| to_py_err(py, e))?;
        let (array, schema) = arrow_array::ffi::to_ffi(&arrow_array::Array::to_data(&batch))
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
        Ok((
            PyCapsule::new_with_value(py, schema, c"arrow_schema")?,
            PyCapsule::new_with_value(py, array, c"arrow_array")?,
        ))
    }

    /// Sample `i`'s record bytes, as stored (checksum checked when opened with verify).
    fn record_bytes<'py>(&self, py: Python<'py>, i: i64) -> PyResult<Bound<'py, PyBytes>> {
        let i = self.resolve(i)?;
        let mut buf = Vec::new();
        py.detach(|| self.inner.read_record(i, &mut buf))
            .map_err(|e| to_py_err(py, e))?;
        Ok(PyBytes::new(py, &buf))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let path = self.path.as_os_str().into_pyobject(py)?.repr()?;
        let shards = self.inner.shards().len();
        Ok(format!(
            "Dataset({path}, {} sample{}, {shards} shard{}, {})",
            self.len(),
            if self.len() == 1 { "" } else { "s" },
            if shards == 1 { "" } else { "s" },
            self.inner.schema()
        ))
    }

    /// `((path,), {"access": ..., "verify": ...})`: what reopens the same dataset.
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        let args = match self.paths.as_slice() {
            [one] => PyTuple::new(py, [one.as_os_str().into_pyobject(py)?.into_any()])?,
            many => PyTuple::new(
                py,
                [PyList::new(py, many.iter().map(|p| p.as_os_str()))?.into_any()],
            )?,
        };
        let o = &self.inplace;
        if let Some(f) = o.format {
            kwargs.set_item("format", f.name())?;
        }
        if let Some(f) = &o.fields {
            let names: Vec<String> = f
                .iter()
                .map(|c| format!("{}{}", c.name, if c.optional { "?" } else { "" }))
                .collect();
            kwargs.set_item("fields", names)?;
        }
        if let Some(d) = &o.index_dir {
            kwargs.set_item("index_dir", d.as_os_str())?;
        }
        if o.beside {
            kwargs.set_item("index_beside", true)?;
        }
        kwargs.set_item("access", self.access.name())?;
        kwargs.set_item("verify", self.verify)?;
        if !self.storage_options.is_empty() {
            kwargs.set_item("storage_options", &self.storage_options)?;
        }
        Ok((args, kwargs))
    }

    /// Pickles as "reopen the same path with the same options" (any protocol), so a dataset
    /// can be sent to spawn-based worker processes.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let newobj_ex = py.import("copyreg")?.getattr("__newobj_ex__")?;
        let (args, kwargs) = slf.get().__getnewargs_ex__(py)?;
        let call = PyTuple::new(
            py,
            [
                slf.get_type().into_any(),
                args.into_any(),
                kwargs.into_any(),
            ],
        )?;
        PyTuple::new(py, [newobj_ex, call.into_any()])
    }
}

/// The iterator of a [`Dataset`]: every sample, in order.
#[derive(Debug)]
#[pyclass(module = "stokehold._native", name = "DatasetIterator", frozen)]
pub struct DatasetIter {
    dataset: Py<Dataset>,
    next: std::sync::atomic::AtomicU64,
}

#[pymethods]
impl DatasetIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        use std::sync::atomic::Ordering;
        let ds = self.dataset.get();
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= ds.len() {
            self.next.store(ds.len(), Ordering::Relaxed);
            return Ok(None);
        }
        ds.sample(py, i).map(Some)
    }

    fn __length_hint__(&self) -> usize {
        use std::sync::atomic::Ordering;
        let ds = self.dataset.get();
        let left = ds.len().saturating_sub(self.next.load(Ordering::Relaxed));
        usize::try_from(left).unwrap_or(usize::MAX)
    }
}
