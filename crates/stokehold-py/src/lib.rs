//! The Python binding of stokehold: the `stokehold._native` extension module, re-exported by the
//! `stokehold` package (see `python/stokehold`).
//!
//! - [`dataset::Dataset`]: `stokehold.Dataset`, random access to a dataset directory.
//! - [`writer::ShardWriter`]: `stokehold.ShardWriter`, writes one.
//! - [`parts`]: datasets written by many writers (`stokehold.ray`'s Datasink): `PartWriter`,
//!   `prepare_parts`, `commit_parts`, `abort_parts`.
//! - [`text::Tokenizer`]: `stokehold.text.Tokenizer`, the tokenizer of `pack --tokenizer`.
//! - [`chat::ChatTemplate`]: `stokehold.text.ChatTemplate`'s native half (chat templates).
//! - [`engine::Engine`]: the one loading engine behind `stokehold.Loader` and
//!   `stokehold.SequenceLoader` (the Python classes in `python/stokehold/_loader.py` and
//!   `_sequence.py`); [`buffer`] hands its batches to numpy without a copy; [`stages`] runs
//!   Python callables as stages.
//! - [`pack::pack`] (`_pack`): the packer with typed options, behind `stokehold.from_hf`.
//! - [`video::VideoFile`]: `stokehold.video.VideoFile`, an MP4's frame index and frame-exact
//!   decoding (FFmpeg loaded at run time).
//! - [`errors`]: the exception classes and the one mapping from `FormatError` to them.
//!
//! File reads, decoding and writes run with the GIL released (`Python::detach`).

pub mod arrow_out;
pub mod buffer;
pub mod chat;
pub mod convert;
pub mod dataset;
pub mod engine;
pub mod errors;
pub mod fork;
pub mod pack;
pub mod parts;
pub mod stages;
pub mod storage_options;
pub mod text;
pub mod video;
pub mod vision;
pub mod writer;

use pyo3::prelude::*;

/// The `stokehold._native` module.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "DEFAULT_RESTART_MARKERS",
        stokehold_ingest::DEFAULT_RESTART_MARKERS,
    )?;
    m.add_class::<dataset::Dataset>()?;
    m.add_class::<dataset::DatasetIter>()?;
    m.add_class::<writer::ShardWriter>()?;
    m.add_class::<text::Tokenizer>()?;
    m.add_class::<vision::Qwen2Vl>()?;
    m.add_class::<vision::FixedSize>()?;
    parts::register(m)?;
    chat::register(m)?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(pack::pack, m)?)?;
    engine::register(m)?;
    video::register(m)?;
    errors::register(m)?;
    Ok(())
}

/// Run the `stokehold` command line with `argv` (program name first) and return its exit
/// status. The GIL is released while it runs.
#[pyfunction]
fn run_cli(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(|| {
        let code = stokehold_cli::main_from_args(argv.into_iter().map(Into::into));
        // ExitCode has no accessor; the CLI only uses 0, 1 and 2.
        if code == std::process::ExitCode::SUCCESS {
            0
        } else if code == std::process::ExitCode::from(2) {
            2
        } else {
            1
        }
    })
}
