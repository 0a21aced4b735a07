//! The Python binding of stokehold: the `stokehold._native` extension module, re-exported by the
//! `stokehold` package (see `python/stokehold`).
//!
//! - [`dataset::Dataset`]: `stokehold.Dataset`, random access to a dataset directory.
//! - [`writer::ShardWriter`]: `stokehold.ShardWriter`, writes one.
//! - [`errors`]: the exception classes and the one mapping from `FormatError` to them.
//!
//! File reads, decoding and writes run with the GIL released (`Python::detach`).

pub mod convert;
pub mod dataset;
pub mod errors;
pub mod writer;

use pyo3::prelude::*;

/// The `stokehold._native` module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<dataset::Dataset>()?;
    m.add_class::<dataset::DatasetIter>()?;
    m.add_class::<writer::ShardWriter>()?;
    errors::register(m)?;
    Ok(())
}
