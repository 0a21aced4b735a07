//! `stokehold.text.Tokenizer`: the tokenizer of `stokehold pack --tokenizer`, from Python (for
//! tokenizing in a Ray Data `map_batches`, `stokehold.ray`), so that a token dataset written
//! there holds the same records as `pack` writes.

use std::path::PathBuf;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use stokehold::format::tokens::TokenDType;
use stokehold::ops::text::{TextError, TextTokenizer};

use crate::errors::config_error;

/// A Hugging Face `tokenizer.json`, encoding as `stokehold pack --tokenizer` does: the ids of
/// each text without the tokenizer's own special tokens, `bos` before and `eos` after, in the
/// dataset's token width (`uint16` for vocabularies up to 65,536, else `uint32`).
#[derive(Debug)]
#[pyclass(module = "stokehold.text", name = "Tokenizer", frozen)]
pub struct Tokenizer {
    inner: TextTokenizer,
    path: PathBuf,
    bos: Option<(String, u32)>,
    eos: Option<(String, u32)>,
}

impl Tokenizer {
    fn token_meta(&self, documents: u64, total_tokens: u64) -> stokehold::format::TokenMeta {
        stokehold_ingest::token_meta(
            &self.inner,
            self.bos.as_ref().map(|b| b.1),
            self.eos.as_ref().map(|e| e.1),
            documents,
            total_tokens,
        )
    }

    /// The ids of one text, as `pack` makes them.
    fn ids(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TextError> {
        out.clear();
        out.extend(self.bos.as_ref().map(|b| b.1));
        self.inner.encode_into(text, out)?;
        out.extend(self.eos.as_ref().map(|e| e.1));
        Ok(())
    }
}

#[pymethods]
impl Tokenizer {
    #[new]
    #[pyo3(signature = (path, *, bos = None, eos = None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        bos: Option<String>,
        eos: Option<String>,
    ) -> PyResult<Tokenizer> {
        let inner = py
            .detach(|| TextTokenizer::from_file(&path))
            .map_err(|e| config_error(py, e.to_string()))?;
        let id = |name: Option<String>| {
            name.map(|n| {
                let id = inner.token_id(&n)?;
                Ok((n, id))
            })
            .transpose()
            .map_err(|e: stokehold::ops::text::TextError| config_error(py, e.to_string()))
        };
        let bos = id(bos)?;
        let eos = id(eos)?;
        Ok(Tokenizer {
            inner,
            path,
            bos,
            eos,
        })
    }

    /// The token ids of each text (a list of numpy arrays of the dataset's token width).
    fn encode_batch<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
    ) -> PyResult<Bound<'py, PyList>> {
        let encoded = py
            .detach(|| {
                let mut ids = Vec::new();
                texts
                    .iter()
                    .map(|t| {
                        self.ids(t, &mut ids)?;
                        Ok(ids.clone())
                    })
                    .collect::<Result<Vec<Vec<u32>>, TextError>>()
            })
            .map_err(|e| config_error(py, e.to_string()))?;
        let dtype = TokenDType::for_vocab(self.inner.vocab_size());
        let arrays = encoded
            .iter()
            .map(|ids| match dtype {
                TokenDType::U16 => {
                    // ids < vocab_size <= 65,536: they fit
                    let narrow: Vec<u16> = ids.iter().map(|&i| i as u16).collect();
                    Ok(PyArray1::from_vec(py, narrow).into_any())
                }
                TokenDType::U32 => Ok(PyArray1::from_slice(py, ids).into_any()),
            })
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, arrays)
    }

    /// The token ids of one text.
    fn encode<'py>(&self, py: Python<'py>, text: String) -> PyResult<Bound<'py, PyAny>> {
        self.encode_batch(py, vec![text])?.get_item(0)
    }

    /// What a token dataset's manifest says of this tokenizer and its data (`source.tokens`):
    /// `dtype`, `vocab_size`, `tokenizer`, `tokenizer_fingerprint`, `bos_id`, `eos_id`,
    /// `documents`, `total_tokens` (the counts 0 unless given).
    #[pyo3(signature = (*, documents = 0, total_tokens = 0))]
    fn meta<'py>(
        &self,
        py: Python<'py>,
        documents: u64,
        total_tokens: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let meta = self.token_meta(documents, total_tokens);
        json_to_py(py, &meta.to_value())
    }

    /// The manifest's `source` of a token dataset of `documents` documents and `total_tokens`
    /// tokens made with this tokenizer from the field `text_field` by `kind` (the keys `pack
    /// --tokenizer` writes, spelled once, in Rust).
    #[pyo3(signature = (text_field, *, documents, total_tokens, kind = "ray"))]
    fn source<'py>(
        &self,
        py: Python<'py>,
        text_field: &str,
        documents: u64,
        total_tokens: u64,
        kind: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let meta = self.token_meta(documents, total_tokens);
        let source = stokehold_ingest::token_source(kind, text_field, 0, &meta);
        json_to_py(py, &source)
    }

    /// The `tokenizer.json` it was loaded from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The numpy dtype of the ids: `"uint16"` or `"uint32"`.
    #[getter]
    fn dtype(&self) -> &'static str {
        match TokenDType::for_vocab(self.inner.vocab_size()) {
            TokenDType::U16 => "uint16",
            TokenDType::U32 => "uint32",
        }
    }

    /// `(cls, (path,), {"bos": ..., "eos": ...})`: pickles as "load the same file again" (for
    /// Ray tasks and spawned workers).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.get();
        let kwargs = PyDict::new(py);
        kwargs.set_item("bos", this.bos.as_ref().map(|b| b.0.as_str()))?;
        kwargs.set_item("eos", this.eos.as_ref().map(|e| e.0.as_str()))?;
        let newobj_ex = py.import("copyreg")?.getattr("__newobj_ex__")?;
        let args = PyTuple::new(py, [this.path.as_os_str()])?;
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

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer({:?}, vocab_size={}, dtype={})",
            self.path.display().to_string(),
            self.inner.vocab_size(),
            self.dtype()
        )
    }
}

/// A JSON value as the Python object `json.loads` makes of it.
fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}
