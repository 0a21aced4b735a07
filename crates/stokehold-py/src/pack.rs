//! `stokehold._native._pack` ([`pack`]): the packer (`stokehold_ingest::pack`, what `stokehold
//! pack` runs) called from Python with typed options and a report as a dict; `stokehold.from_hf`
//! feeds it.

use std::path::PathBuf;

use crate::errors::ENOENT;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use stokehold_format::WriteOptions;
use stokehold_ingest::{FieldChoice, ImagePolicy, PackError, PackOptions, SourceKind};
use stokehold_storage::DatasetWriteOptions;

use crate::errors::{config_error, io_error, stokehold_error, to_py_err};

/// The one mapping from [`PackError`] to Python exceptions.
fn pack_err(py: Python<'_>, e: PackError) -> PyErr {
    let msg = e.to_string();
    match e {
        PackError::Format(f) => to_py_err(py, f),
        PackError::Io { source, .. } => io_error(py, msg, source.raw_os_error()),
        PackError::MissingSource { .. } => io_error(py, msg, Some(ENOENT)),
        PackError::Parquet { .. } => crate::errors::CorruptDataError::new_err(msg),
        PackError::Input(_) => config_error(py, msg),
        _ => stokehold_error(msg),
    }
}

/// The default target shard size, as `stokehold pack --shard-size`'s.
const DEFAULT_SHARD_BYTES: u64 = 256 << 20;

/// Pack `sources` (of `kind`, or told from their names) into a new dataset at `dest`; returns
/// the report: `samples`, `shards`, `input_bytes`, `skipped` ((input, reason) pairs), `notes`,
/// `classes`. The GIL is released while it runs.
#[pyfunction]
#[pyo3(name = "_pack", signature = (
    sources, dest, kind=None, *, fields=None, overwrite=false, shard_size=None, align=1,
    zstd_level=3, threads=0, strict=false,
    max_skip_fraction=stokehold_ingest::DEFAULT_MAX_SKIP_FRACTION,
    max_pixels=stokehold::ops::DEFAULT_MAX_PIXELS, baseline=false, max_side=None,
    jpeg_quality=90, restart_markers=stokehold_ingest::DEFAULT_RESTART_MARKERS, storage_options=None,
))]
#[allow(clippy::too_many_arguments)]
pub fn pack<'py>(
    py: Python<'py>,
    sources: Vec<PathBuf>,
    dest: PathBuf,
    kind: Option<&str>,
    fields: Option<&str>,
    overwrite: bool,
    shard_size: Option<&Bound<'py, PyAny>>,
    align: u32,
    zstd_level: i32,
    threads: usize,
    strict: bool,
    max_skip_fraction: f64,
    max_pixels: u64,
    baseline: bool,
    max_side: Option<u32>,
    jpeg_quality: u8,
    restart_markers: bool,
    storage_options: Option<crate::storage_options::StorageOptions>,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = kind
        .map(|k| {
            SourceKind::parse(k).ok_or_else(|| {
                config_error(
                    py,
                    format!(
                        "unknown source kind {k:?}: use image-folder, jsonl, csv, webdataset, \
                         tfrecord or parquet"
                    ),
                )
            })
        })
        .transpose()?;
    if !(0.0..=1.0).contains(&max_skip_fraction) {
        return Err(config_error(
            py,
            format!("max_skip_fraction={max_skip_fraction} is not a fraction from 0 to 1"),
        ));
    }
    // bytes, or a size such as "256MiB" (the loader's one size parser)
    let shard_size: u64 = match shard_size {
        None => DEFAULT_SHARD_BYTES,
        Some(s) => match s.extract::<u64>() {
            Ok(n) => n,
            Err(_) => {
                let text: String = s.extract()?;
                stokehold::parse_bytes(&text)
                    .map_err(|e| config_error(py, format!("shard_size={text:?}: {e}")))?
            }
        },
    };
    let fields = fields
        .map(FieldChoice::parse_list)
        .transpose()
        .map_err(|e| pack_err(py, e.into()))?;
    let options = PackOptions {
        write: DatasetWriteOptions {
            write: WriteOptions { align, zstd_level },
            target_shard_bytes: shard_size.max(1),
            overwrite,
        },
        threads,
        strict,
        images: ImagePolicy {
            baseline,
            max_side,
            quality: jpeg_quality,
            max_pixels,
            restart_markers,
        },
        max_skip_fraction,
        fields,
        storage_options: crate::storage_options::resolve(py, storage_options)?,
        ..PackOptions::default()
    };
    let run = || {
        std::panic::catch_unwind(|| {
            stokehold_ingest::pack(
                &sources,
                &dest,
                kind,
                &options,
                &stokehold_ingest::NoProgress,
            )
        })
    };
    let report = match py.detach(run) {
        Ok(r) => r.map_err(|e| pack_err(py, e))?,
        Err(_) => return Err(stokehold_error("the packer panicked (a bug in stokehold)")),
    };
    let out = PyDict::new(py);
    let m = &report.manifest;
    out.set_item("samples", m.total_records)?;
    out.set_item("shards", m.shards.len())?;
    out.set_item("input_bytes", report.input_bytes)?;
    let skipped: Vec<(String, String)> = report
        .skipped
        .into_iter()
        .map(|s| (s.input, s.reason))
        .collect();
    out.set_item("skipped", skipped)?;
    out.set_item("notes", report.notes)?;
    out.set_item("classes", m.classes.clone())?;
    Ok(out)
}
