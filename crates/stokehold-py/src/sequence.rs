//! `stokehold._native._SequenceEngine`: the sequence loader behind `stokehold.SequenceLoader`
//! (`python/stokehold/_sequence.py` adds defaults and `to="torch"/"jax"`).
//!
//! Simpler than `_Engine`: the engine's [`SequenceIter`] owns what it needs, so the Python object
//! keeps the loader and at most one running iterator (with the id of the `_SequenceIter` driving
//! it) behind a mutex. Waiting releases the GIL and checks signals every 100 ms. The workers never
//! need the GIL, so joining them with it held cannot deadlock. Batches become numpy arrays over
//! the batch buffers without copying, as in `_Engine`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use stokehold::format::DType;
use stokehold::sequence::Next;
use stokehold::{
    ResumeState, SequenceConfig, SequenceIter, SequenceLoader, SequenceMode, Shuffle, Tail,
    TokenDataset,
};

use crate::dataset::Dataset;
use crate::errors::{config_error, engine_err, stokehold_error};
use crate::loader::batch_to_py;

struct SeqState {
    loader: SequenceLoader,
    run: Option<(u64, SequenceIter)>,
    pid: u32,
}

/// The native sequence loader of one `stokehold.SequenceLoader`.
#[pyclass(module = "stokehold._native", name = "_SequenceEngine", frozen)]
pub struct SequenceEngine {
    state: Mutex<SeqState>,
    next_run: AtomicU64,
    include_ids: bool,
    steps_per_epoch: u64,
}

impl std::fmt::Debug for SequenceEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceEngine")
            .field("steps_per_epoch", &self.steps_per_epoch)
            .finish()
    }
}

impl SequenceEngine {
    fn lock(&self) -> PyResult<MutexGuard<'_, SeqState>> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.pid != std::process::id() {
            return Err(stokehold_error(
                "this SequenceLoader was made in another process (before a fork): create a new \
                 one in this process",
            ));
        }
        Ok(s)
    }

    /// Stop the running epoch (joining its workers, GIL released).
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        let run = self.lock()?.run.take();
        if let Some((_, it)) = run {
            py.detach(move || drop(it));
        }
        Ok(())
    }

    fn next_batch<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        loop {
            let got = py.detach(|| -> PyResult<Option<Next>> {
                let mut s = self.lock()?;
                match &mut s.run {
                    Some((r, it)) if *r == id => {
                        Ok(Some(it.next_timeout(Duration::from_millis(100))))
                    }
                    _ => Ok(None),
                }
            })?;
            match got {
                None => {
                    return Err(stokehold_error(
                        "this iterator was superseded: iter(loader), set_epoch(), \
                         load_state_dict() or close() was called since it started",
                    ));
                }
                Some(Next::Pending) => py.check_signals()?,
                Some(Next::End) => {
                    self.stop(py)?;
                    return Ok(None);
                }
                Some(Next::Batch(Ok(b))) => return batch_to_py(py, b, self.include_ids).map(Some),
                Some(Next::Batch(Err(e))) => {
                    self.stop(py)?;
                    return Err(engine_err(py, e));
                }
            }
        }
    }
}

#[pymethods]
impl SequenceEngine {
    #[new]
    #[pyo3(signature = (dataset, *, seq_len, max_len, pad_id, bucket, batch_size, shuffle, seed, rank, world_size, drop_last, dtype, position_ids, segment_ids, threads, prefetch, include_ids))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dataset: PyRef<'_, Dataset>,
        seq_len: u32,
        max_len: Option<u32>,
        pad_id: u32,
        bucket: u32,
        batch_size: u32,
        shuffle: bool,
        seed: u64,
        rank: u32,
        world_size: u32,
        drop_last: bool,
        dtype: &str,
        position_ids: bool,
        segment_ids: bool,
        threads: usize,
        prefetch: usize,
        include_ids: bool,
    ) -> PyResult<SequenceEngine> {
        let dtype = match dtype {
            "int32" | "i32" => DType::I32,
            "int64" | "i64" => DType::I64,
            other => {
                return Err(config_error(
                    py,
                    format!("dtype must be \"int32\" or \"int64\", got {other:?}"),
                ));
            }
        };
        let mode = match max_len {
            None => SequenceMode::Packed { seq_len },
            Some(max_len) => SequenceMode::Documents {
                max_len,
                pad_id,
                bucket,
            },
        };
        let config = SequenceConfig {
            mode,
            batch_size,
            shuffle: if shuffle {
                Shuffle::Global
            } else {
                Shuffle::Sequential
            },
            seed,
            rank,
            world_size,
            tail: if drop_last { Tail::Drop } else { Tail::Pad },
            dtype,
            position_ids,
            segment_ids,
            threads: threads.max(1),
            prefetch,
        };
        let ds = dataset.shared();
        let loader = py
            .detach(|| {
                let data = Arc::new(TokenDataset::open(ds)?);
                SequenceLoader::new(data, config)
            })
            .map_err(|e| engine_err(py, e))?;
        let steps_per_epoch = loader.steps_per_epoch().map_err(|e| engine_err(py, e))?;
        Ok(SequenceEngine {
            state: Mutex::new(SeqState {
                loader,
                run: None,
                pid: std::process::id(),
            }),
            next_run: AtomicU64::new(0),
            include_ids,
            steps_per_epoch,
        })
    }

    /// Start (or continue) the current epoch. A run in progress is stopped first.
    fn iter(slf: Bound<'_, Self>) -> PyResult<SequenceEngineIter> {
        let py = slf.py();
        let engine = slf.get();
        engine.stop(py)?;
        let id = engine.next_run.fetch_add(1, Ordering::Relaxed);
        py.detach(|| -> PyResult<Result<(), stokehold::EngineError>> {
            let mut s = engine.lock()?;
            Ok(match s.loader.iter() {
                Ok(it) => {
                    s.run = Some((id, it));
                    Ok(())
                }
                Err(e) => Err(e),
            })
        })?
        .map_err(|e| engine_err(py, e))?;
        Ok(SequenceEngineIter {
            engine: slf.unbind(),
            id,
            done: AtomicBool::new(false),
        })
    }

    /// Batches per epoch for this rank.
    fn __len__(&self) -> usize {
        usize::try_from(self.steps_per_epoch).unwrap_or(usize::MAX)
    }

    /// The epoch the next iteration runs (or the one running).
    #[getter]
    fn epoch(&self) -> PyResult<u64> {
        Ok(self.lock()?.loader.epoch())
    }

    /// Samples (windows or documents) per epoch over all ranks.
    #[getter]
    fn samples(&self) -> PyResult<u64> {
        Ok(self.lock()?.loader.samples())
    }

    /// Tokens in the dataset's stream.
    #[getter]
    fn total_tokens(&self) -> PyResult<u64> {
        Ok(self.lock()?.loader.data().total_tokens())
    }

    /// Documents in the dataset.
    #[getter]
    fn documents(&self) -> PyResult<u64> {
        Ok(self.lock()?.loader.data().documents())
    }

    /// Start epoch `epoch` at the next iteration (from its beginning, unless it is already the
    /// current epoch: then a resumed position is kept). Stops a running epoch.
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        self.stop(py)?;
        let mut s = self.lock()?;
        if s.loader.epoch() != epoch {
            s.loader.set_epoch(epoch);
        }
        Ok(())
    }

    /// The resume state as JSON (after the batches delivered so far).
    fn state_json(&self) -> PyResult<String> {
        Ok(self.lock()?.loader.state().to_json())
    }

    /// Continue from a state saved by `state_json` (any rank, any world size). Stops a running
    /// epoch.
    fn load_state_json(&self, py: Python<'_>, json: &str) -> PyResult<()> {
        let state = ResumeState::from_json(json).map_err(|e| engine_err(py, e))?;
        self.stop(py)?;
        let r = self.lock()?.loader.load_state(&state);
        r.map_err(|e| engine_err(py, e))
    }

    /// Counters since the loader was made.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.lock()?.loader.stats();
        let d = PyDict::new(py);
        d.set_item("batches", st.batches)?;
        d.set_item("tokens", st.tokens)?;
        d.set_item("consumer_wait", st.wait.as_secs_f64())?;
        d.set_item("worker_busy", st.busy.as_secs_f64())?;
        Ok(d)
    }

    /// Stop the running epoch, if any (the position is kept).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.stop(py)
    }
}

/// One run (epoch) of a `_SequenceEngine`.
#[pyclass(module = "stokehold._native", name = "_SequenceIter", frozen)]
pub struct SequenceEngineIter {
    engine: Py<SequenceEngine>,
    id: u64,
    done: AtomicBool,
}

impl std::fmt::Debug for SequenceEngineIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceEngineIter")
            .field("id", &self.id)
            .finish()
    }
}

#[pymethods]
impl SequenceEngineIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        if self.done.load(Ordering::Acquire) {
            return Ok(None);
        }
        let r = self.engine.get().next_batch(py, self.id);
        if !matches!(r, Ok(Some(_))) {
            self.done.store(true, Ordering::Release);
        }
        r
    }

    /// Batches left in this run.
    fn __length_hint__(&self) -> PyResult<usize> {
        if self.done.load(Ordering::Acquire) {
            return Ok(0);
        }
        let s = self.engine.get().lock()?;
        Ok(match &s.run {
            Some((r, it)) if *r == self.id => usize::try_from(it.remaining()).unwrap_or(usize::MAX),
            _ => 0,
        })
    }

    /// Stop this run now; the loader keeps its position.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.done.store(true, Ordering::Release);
        let engine = self.engine.get();
        let ours = matches!(&engine.lock()?.run, Some((r, _)) if *r == self.id);
        if ours {
            engine.stop(py)?;
        }
        Ok(())
    }
}

/// Register the classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SequenceEngine>()?;
    m.add_class::<SequenceEngineIter>()?;
    Ok(())
}
