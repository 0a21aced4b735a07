//! `stokehold._native._Engine`: the loading engine behind `stokehold.Loader` (the Python class in
//! `python/stokehold/_loader.py` adds argument defaults, `to="torch"/"jax"`, pickling and the
//! fork and exit hooks).
//!
//! **Ownership.** The engine's [`BatchIter`] borrows its [`Loader`]; a Python iterator cannot hold
//! a borrow, so the engine object keeps a [`State`] behind a mutex: `Idle(loader)` or
//! `Running(iterator)`, where the iterator owns the loader ([`Loader::into_batches`]) and gives it
//! back when the epoch ends, fails, is interrupted or is abandonned
//! ([`BatchIter::into_loader`]). The Python iterator object (`_EngineIter`) holds only the engine
//! and the id of its run; one run exists at a time, so a new `iter(loader)` supersedes the old one.
//!
//! **Zero copy.** A fixed column's [`Buffer`] moves into a small Python object (`_BatchBuffer`)
//! that becomes the numpy array's `base`; the array views the buffer in place, and when Python
//! drops the last view the buffer goes back to the loader's pool for the next batch.
//!
//! **The GIL.** Waiting for a batch releases the GIL and, every ~100 ms, re-takes it briefly to
//! run the signal handlers (`BatchIter::next_checked`), so Ctrl-C raises `KeyboardInterrupt`.
//! Worker threads are only ever joined with the GIL released (they may be waiting for it to run a
//! Python stage).
//!
//! **fork().** Worker threads do not exist in a forked child. `_after_fork_in_child` (registered
//! with `os.register_at_fork`) bumps a generation counter; an engine first used in another
//! generation (or another process id) checks its state: idle, it keeps working (the child starts
//! its own threads); running, it is marked unusable and its iterator is leaked (never joined), and
//! every use raises a `StokeholdError` saying to create a new Loader in the child.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{Element, PyArray, PyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use stokehold::disk_cache::{self, DiskCache};
use stokehold::format::DType;
use stokehold::sampler::{EpochOrder, RankPlan};
use stokehold::spec::{TransformSpec, build_columns};
use stokehold::{
    Batch, BatchIter, Buffer, BufferPool, ColumnData, DecodedCacheConfig, EngineError, ErrorPolicy,
    Loader, LoaderConfig, ResumeState, SampleCtx, Shuffle, Tail, Transform, Value,
};

use crate::convert::{py_to_value, value_to_py};
use crate::dataset::Dataset;
use crate::errors::{config_error, engine_err, stokehold_error};

/// Bumped in a forked child (see the module doc).
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Called by `os.register_at_fork(after_in_child=...)`: every loader started before the fork is
/// unusable from now on (its worker threads do not exist here).
#[pyfunction]
pub fn _after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::SeqCst);
}

const FORKED: &str = "this Loader was created before fork() and was running at the fork: its \
     worker threads do not exist in this process; create a new Loader in the child (or start \
     worker processes with the 'spawn' method and pass them the Loader, which pickles)";

/// A Python callable as a stage: called with the GIL held, on the worker threads.
struct PyStage {
    name: String,
    func: Py<PyAny>,
    rng: RngMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RngMode {
    /// `fn(value)`
    None,
    /// `fn(value, seed)`: a 64-bit seed from the sample's generator.
    Seed,
    /// `fn(value, rng)`: a `numpy.random.Generator` seeded from the sample's generator.
    Numpy,
}

impl std::fmt::Debug for PyStage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyStage")
            .field("name", &self.name)
            .field("rng", &self.rng)
            .finish()
    }
}

/// `"ValueError: message"` and the traceback, for the engine's error message.
fn describe(py: Python<'_>, e: &PyErr) -> String {
    let head = format!("{}", e.value(py));
    let ty = e
        .get_type(py)
        .qualname()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let tb = e
        .traceback(py)
        .and_then(|tb| tb.format().ok())
        .unwrap_or_default();
    if tb.is_empty() {
        format!("{ty}: {head}")
    } else {
        format!("{ty}: {head}\n{}", tb.trim_end())
    }
}

impl Transform for PyStage {
    fn name(&self) -> &str {
        &self.name
    }

    fn apply<'a>(
        &self,
        x: Value<'a>,
        ctx: &mut SampleCtx<'_>,
    ) -> std::result::Result<Value<'a>, String> {
        let seed = match self.rng {
            RngMode::None => 0,
            RngMode::Seed | RngMode::Numpy => ctx.rng.next_u64(),
        };
        Python::attach(|py| {
            let call = || -> PyResult<Value<'static>> {
                let arg = value_to_py(py, &x)?;
                let f = self.func.bind(py);
                let r = match self.rng {
                    RngMode::None => f.call1((arg,))?,
                    RngMode::Seed => f.call1((arg, seed))?,
                    RngMode::Numpy => {
                        let random = py.import("numpy")?.getattr("random")?;
                        let bitgen = random.getattr("PCG64")?.call1((seed,))?;
                        let g = random.getattr("Generator")?.call1((bitgen,))?;
                        f.call1((arg, g))?
                    }
                };
                py_to_value(&r)
            };
            call().map_err(|e| describe(py, &e))
        })
    }
}

/// The owner of a fixed column's memory: a numpy array's `base`. Dropped (with the last array
/// viewing it), it gives the buffer back to the loader's pool.
#[pyclass(module = "stokehold._native", name = "_BatchBuffer", frozen)]
pub struct BatchBuffer {
    buf: Buffer,
    pool: Option<Arc<BufferPool>>,
    generation: u64,
}

impl std::fmt::Debug for BatchBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchBuffer")
            .field("bytes", &self.buf.len())
            .finish()
    }
}

#[pymethods]
impl BatchBuffer {
    /// Bytes held.
    #[getter]
    fn nbytes(&self) -> usize {
        self.buf.len()
    }

    /// Address of the memory (the numpy arrays of this buffer view it in place).
    #[getter]
    fn address(&self) -> usize {
        self.buf.as_bytes().as_ptr() as usize
    }

    fn __repr__(&self) -> String {
        format!("<stokehold batch buffer, {} bytes>", self.buf.len())
    }
}

impl Drop for BatchBuffer {
    fn drop(&mut self) {
        // In a forked child the pool's lock may have been held by a thread that no longer
        // exists: free the memory instead of recycling it.
        if self.generation == FORK_GENERATION.load(Ordering::Acquire) {
            if let Some(pool) = &self.pool {
                pool.put(std::mem::take(&mut self.buf));
            }
        }
    }
}

/// A numpy array of `T` viewing `owner`'s buffer in place, with `shape`.
fn typed_view<'py, T: Element + bytemuck::Pod>(
    owner: Bound<'py, BatchBuffer>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let bytes = owner.get().buf.as_bytes();
    let elems: &[T] = bytemuck::try_cast_slice(bytes)
        .map_err(|e| stokehold_error(format!("batch buffer of {} bytes: {e}", bytes.len())))?;
    let view = ArrayViewD::from_shape(IxDyn(shape), elems)
        .map_err(|e| stokehold_error(format!("batch buffer of shape {shape:?}: {e}")))?;
    let container = owner.clone().into_any();
    // SAFETY: `view` points into `owner`'s buffer. numpy keeps `owner` alive as the array's base
    // (it holds the reference `borrow_from_array` takes), and the buffer is neither moved, resized
    // nor read or written by Rust while `owner` lives: it is taken out only in `Drop`, after the
    // last array is gone. The memory is initialised, 8-byte aligned (checked by the cast above)
    // and of exactly `prod(shape)` elements (checked by `from_shape`). numpy may write to it
    // (arrays are writable, as users expect of a batch); nothing else aliases it.
    let array = unsafe { PyArray::<T, _>::borrow_from_array(&view, container) };
    Ok(array.into_any())
}

/// A fixed column as a numpy array over its batch buffer (no copy).
fn fixed_to_numpy<'py>(
    py: Python<'py>,
    dtype: DType,
    shape: &[usize],
    data: Buffer,
    pool: Option<Arc<BufferPool>>,
) -> PyResult<Bound<'py, PyAny>> {
    let owner = Bound::new(
        py,
        BatchBuffer {
            buf: data,
            pool,
            generation: FORK_GENERATION.load(Ordering::Acquire),
        },
    )?;
    match dtype {
        DType::U8 => typed_view::<u8>(owner, shape),
        DType::I32 => typed_view::<i32>(owner, shape),
        DType::I64 => typed_view::<i64>(owner, shape),
        DType::F32 => typed_view::<f32>(owner, shape),
        DType::F64 => typed_view::<f64>(owner, shape),
        // No f16 element type without another dependency: view the bytes, then reinterpret.
        DType::F16 => {
            let mut flat = shape.to_vec();
            let last = flat.pop().unwrap_or(1);
            flat.push(last * 2);
            typed_view::<u8>(owner, &flat)?.call_method1("view", ("<f2",))
        }
    }
}

/// A delivered batch as a dict: fixed columns as numpy arrays over the batch's own buffers, list
/// columns as lists; with `include_ids`, `id` (int64) and `is_padding` (bool).
pub(crate) fn batch_to_py(
    py: Python<'_>,
    mut batch: Batch,
    include_ids: bool,
) -> PyResult<Bound<'_, PyDict>> {
    let pool = batch.pool().cloned();
    let ids = std::mem::take(&mut batch.ids);
    let padding = std::mem::take(&mut batch.padding);
    let d = PyDict::new(py);
    for (name, col) in batch.into_columns() {
        match col {
            ColumnData::Fixed { dtype, shape, data } => {
                d.set_item(name, fixed_to_numpy(py, dtype, &shape, data, pool.clone())?)?;
            }
            ColumnData::List(items) => {
                let list = PyList::empty(py);
                for v in &items {
                    list.append(value_to_py(py, v)?)?;
                }
                d.set_item(name, list)?;
            }
        }
    }
    if include_ids {
        let ids: Vec<i64> = ids.into_iter().map(|i| i as i64).collect();
        d.set_item("id", PyArray1::from_vec(py, ids))?;
        d.set_item("is_padding", PyArray1::from_vec(py, padding))?;
    }
    Ok(d)
}

/// What the engine object holds.
enum State {
    /// No worker threads.
    Idle(Box<Loader>),
    /// An epoch in progress: the iterator owns the loader.
    Running {
        iter: Box<BatchIter<'static>>,
        /// Which `_EngineIter` drives it.
        id: u64,
    },
    /// Lost (after a failed hand-back or a fork); every use raises.
    Gone,
}

/// What a locked step of work ended with, carried out of the GIL-free section.
enum Outcome<T> {
    Ok(T),
    Engine(EngineError),
    Misuse(String),
}

/// The loading engine of one `stokehold.Loader`.
#[pyclass(module = "stokehold._native", name = "_Engine", frozen)]
pub struct Engine {
    state: Mutex<State>,
    /// The fork generation and process this engine may run in.
    generation: AtomicU64,
    pid: AtomicU32,
    forked: AtomicBool,
    next_run: AtomicU64,
    include_ids: bool,
    steps_per_epoch: u64,
    batch_size: u32,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("batch_size", &self.batch_size)
            .field("steps_per_epoch", &self.steps_per_epoch)
            .finish()
    }
}

/// Stop a running epoch (joining its workers) and keep its loader; the caller has released the
/// GIL.
fn stop(state: &mut State) {
    if let State::Running { .. } = state {
        if let State::Running { iter, .. } = std::mem::replace(state, State::Gone) {
            if let Some(l) = iter.into_loader() {
                *state = State::Idle(Box::new(l));
            }
        }
    }
}

impl Engine {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True when this process is not the one (or the fork generation) the engine last ran in.
    fn moved(&self) -> bool {
        self.generation.load(Ordering::Acquire) != FORK_GENERATION.load(Ordering::Acquire)
            || self.pid.load(Ordering::Acquire) != std::process::id()
    }

    /// Refuse to work after a fork that happened while this engine was running.
    fn check_usable(&self) -> PyResult<()> {
        if self.forked.load(Ordering::Acquire) {
            return Err(stokehold_error(FORKED));
        }
        if !self.moved() {
            return Ok(());
        }
        // First use in a forked child: only this thread exists, nothing else holds the lock
        // unless a thread of the parent did at the fork.
        match self.state.try_lock() {
            Ok(s) if matches!(*s, State::Idle(_)) => {
                self.generation
                    .store(FORK_GENERATION.load(Ordering::Acquire), Ordering::Release);
                self.pid.store(std::process::id(), Ordering::Release);
                Ok(())
            }
            Ok(mut s) => {
                // Its worker threads are gone: never join them.
                std::mem::forget(std::mem::replace(&mut *s, State::Gone));
                self.forked.store(true, Ordering::Release);
                Err(stokehold_error(FORKED))
            }
            Err(_) => {
                self.forked.store(true, Ordering::Release);
                Err(stokehold_error(FORKED))
            }
        }
    }

    /// Run `f` on the state with the GIL released.
    fn with_state<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut State) -> Outcome<T> + Send,
    ) -> PyResult<T> {
        self.check_usable()?;
        let out = py.detach(|| {
            let mut s = self.lock();
            f(&mut s)
        });
        match out {
            Outcome::Ok(v) => Ok(v),
            Outcome::Engine(e) => Err(engine_err(py, e)),
            Outcome::Misuse(m) => Err(stokehold_error(m)),
        }
    }

    /// Stop the running epoch if run `id` (any run when None) drives it.
    fn stop_run(&self, py: Python<'_>, id: Option<u64>) -> PyResult<()> {
        self.with_state(py, |s| {
            let ours = match s {
                State::Running { id: r, .. } => id.is_none_or(|i| i == *r),
                _ => false,
            };
            if ours {
                stop(s);
            }
            Outcome::Ok(())
        })
    }

    /// The idle loader (stopping a running epoch first).
    fn idle<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Loader) -> Outcome<T> + Send,
    ) -> PyResult<T> {
        self.with_state(py, |s| {
            stop(s);
            match s {
                State::Idle(l) => f(l),
                _ => Outcome::Misuse("this Loader's engine was lost in an earlier failure".into()),
            }
        })
    }

    /// The next batch of run `id`.
    fn next_batch<'py>(&self, py: Python<'py>, id: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        enum Next {
            Batch(Batch),
            End,
            Stale,
        }
        let mut interrupt: Option<PyErr> = None;
        let interrupt_ref = &mut interrupt;
        let got = self.with_state(py, move |s| {
            let State::Running { iter, id: run } = s else {
                return Outcome::Ok(Next::Stale);
            };
            if *run != id {
                return Outcome::Ok(Next::Stale);
            }
            let mut check = || -> Result<(), EngineError> {
                Python::attach(|py| py.check_signals()).map_err(|e| {
                    *interrupt_ref = Some(e);
                    EngineError::Config("interrupted".into())
                })
            };
            match iter.next_checked(&mut check) {
                Some(Ok(b)) => Outcome::Ok(Next::Batch(b)),
                None => {
                    stop(s);
                    Outcome::Ok(Next::End)
                }
                Some(Err(e)) => {
                    // Interrupted or failed: join the workers now; the position stays after the
                    // last batch delivered, so a new iteration retries from there.
                    stop(s);
                    Outcome::Engine(e)
                }
            }
        });
        if let Some(e) = interrupt {
            return Err(e);
        }
        match got? {
            Next::Batch(b) => batch_to_py(py, b, self.include_ids).map(Some),
            Next::End => Ok(None),
            Next::Stale => Err(stokehold_error(
                "this iterator was superseded: iter(loader), set_epoch(), load_state_dict() or \
                 close() was called since it started (a Loader runs one iteration at a time)",
            )),
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut self.state, Mutex::new(State::Gone));
        if self.forked.load(Ordering::Acquire) || self.moved() {
            // Forked child: the threads (and maybe the lock holder) do not exist here.
            std::mem::forget(state);
            return;
        }
        let state = state.into_inner().unwrap_or_else(|p| p.into_inner());
        if let State::Running { iter, .. } = state {
            // Join with the GIL released: a worker may be waiting for it in a Python stage.
            let _ = Python::try_attach(|py| py.detach(move || drop(iter)));
        }
    }
}

/// The shuffle mode from its name.
fn parse_shuffle(py: Python<'_>, name: &str, window: u32) -> PyResult<Shuffle> {
    match name {
        "global" => Ok(Shuffle::Global),
        "sequential" => Ok(Shuffle::Sequential),
        "shard_block" => Ok(Shuffle::ShardBlock { window }),
        other => Err(config_error(
            py,
            format!("shuffle must be True, False or \"shard_block\", got {other:?}"),
        )),
    }
}

/// A stage object → its spec, registering Python callables in `customs`.
fn stage_spec(
    field: &str,
    stage: &Bound<'_, PyAny>,
    customs: &mut Vec<Arc<dyn Transform>>,
) -> PyResult<TransformSpec> {
    let py = stage.py();
    if stage.hasattr("_spec")? {
        let d = stage.call_method0("_spec")?;
        let json: String = py.import("json")?.call_method1("dumps", (d,))?.extract()?;
        return serde_json::from_str(&json).map_err(|e| {
            config_error(
                py,
                format!(
                    "field {field:?}: the stage {} gave the spec {json}, which is not \
                     {{\"name\": str, \"params\": {{...}}}}: {e}",
                    stage.repr().map(|r| r.to_string()).unwrap_or_default()
                ),
            )
        });
    }
    let (func, rng, name) = if stage.hasattr("_stokehold_callable")? {
        let func = stage.getattr("_stokehold_callable")?;
        let rng: Option<String> = stage.getattr("_stokehold_rng")?.extract()?;
        let name: String = stage.getattr("name")?.extract()?;
        (func, rng, name)
    } else if stage.is_callable() {
        let name = stage
            .getattr("__name__")
            .and_then(|n| n.extract::<String>())
            .unwrap_or_else(|_| "callable".into());
        (stage.clone(), None, name)
    } else {
        return Err(PyTypeError::new_err(format!(
            "field {field:?}: a transform stage must be a stokehold.transforms.Lambda, a callable, \
             or a built-in stage object (one with _spec()), got {}",
            stage.repr()?
        )));
    };
    let rng = match rng.as_deref() {
        None => RngMode::None,
        Some("seed") => RngMode::Seed,
        Some("numpy") => RngMode::Numpy,
        Some(other) => {
            return Err(config_error(
                py,
                format!("Lambda rng must be None, \"seed\" or \"numpy\", got {other:?}"),
            ));
        }
    };
    let k = customs.len();
    customs.push(Arc::new(PyStage {
        name,
        func: func.unbind(),
        rng,
    }));
    Ok(TransformSpec {
        name: format!("{PY_STAGE}{k}"),
        params: serde_json::Value::Null,
    })
}

/// Spec names standing for the Python stages of this loader.
const PY_STAGE: &str = "<python callable>#";

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (dataset, batch_size, *, shuffle, shuffle_window, seed, drop_last, transforms, threads, prefetch, rank, world_size, on_error, include_ids, autotune = false, prefetch_auto = false, memory_budget = 0, profile = true, trace_capacity = 0, cache_bytes = 0, decoded_size = 0, decoded_budget = 0, decoded_dir = None, decoded_dir_limit = 0, cache_dir = None, cache_dir_limit = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dataset: PyRef<'_, Dataset>,
        batch_size: u32,
        shuffle: &str,
        shuffle_window: u32,
        seed: u64,
        drop_last: bool,
        transforms: Option<Bound<'_, PyDict>>,
        threads: usize,
        prefetch: usize,
        rank: u32,
        world_size: u32,
        on_error: &str,
        include_ids: bool,
        autotune: bool,
        prefetch_auto: bool,
        memory_budget: u64,
        profile: bool,
        trace_capacity: usize,
        cache_bytes: u64,
        decoded_size: u32,
        decoded_budget: u64,
        decoded_dir: Option<PathBuf>,
        decoded_dir_limit: u64,
        cache_dir: Option<PathBuf>,
        cache_dir_limit: u64,
    ) -> PyResult<Engine> {
        let mut ds = dataset.shared();
        let mut disk = None;
        if let Some(dir) = cache_dir {
            let limit = if cache_dir_limit == 0 {
                ds.bytes()
            } else {
                cache_dir_limit
            };
            let (path, options) = (dataset.source_path().to_path_buf(), dataset.options());
            let (opened, cache, progress) = py
                .detach(|| {
                    let cache = DiskCache::open(dir, limit)?;
                    let (d, p) = disk_cache::open_dataset(&path, &cache, options)?;
                    Ok::<_, EngineError>((d, cache, p))
                })
                .map_err(|e| engine_err(py, e))?;
            ds = Arc::new(opened);
            disk = Some((cache, progress));
        }
        let shuffle = parse_shuffle(py, shuffle, shuffle_window)?;
        let on_error = match on_error {
            "fail" => ErrorPolicy::Fail,
            "skip" => ErrorPolicy::skip(),
            other => {
                return Err(config_error(
                    py,
                    format!("on_error must be \"fail\" or \"skip\", got {other:?}"),
                ));
            }
        };
        let tail = if drop_last { Tail::Drop } else { Tail::Pad };
        let mut specs: BTreeMap<String, Vec<TransformSpec>> = BTreeMap::new();
        let mut customs: Vec<Arc<dyn Transform>> = Vec::new();
        if let Some(t) = transforms {
            for (k, v) in t.iter() {
                let field: String = k.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "transforms must map field names (str) to lists of stages, got key {}",
                        k.repr().map(|r| r.to_string()).unwrap_or_default()
                    ))
                })?;
                let stages: Vec<Bound<'_, PyAny>> = if v.hasattr("_spec")? || v.is_callable() {
                    vec![v]
                } else {
                    v.try_iter()?.collect::<PyResult<_>>()?
                };
                let mut list = Vec::with_capacity(stages.len());
                for s in &stages {
                    list.push(stage_spec(&field, s, &mut customs)?);
                }
                specs.insert(field, list);
            }
        }
        let mut custom = |s: &TransformSpec| -> Option<Arc<dyn Transform>> {
            let k: usize = s.name.strip_prefix(PY_STAGE)?.parse().ok()?;
            customs.get(k).cloned()
        };
        let columns =
            build_columns(ds.schema(), &specs, true, &mut custom).map_err(|e| engine_err(py, e))?;
        let config = LoaderConfig {
            batch_size,
            seed,
            shuffle,
            tail,
            rank,
            world_size,
            threads,
            autotune,
            prefetch,
            prefetch_auto,
            memory_budget,
            profile,
            trace_capacity,
            task_size: 0,
            on_error,
            // A Python stage needs the GIL on the worker threads; a run started ahead would be
            // joined when the loader is dropped, which can happen with the GIL held: never start
            // one then. Without Python stages the workers never need the GIL.
            prepare_next_epoch: customs.is_empty(),
            cache_bytes,
            decoded_cache: (decoded_size > 0).then(|| DecodedCacheConfig {
                dir: decoded_dir,
                // 0: no limit of its own (writing still stops with 5% of the filesystem free)
                dir_limit: if decoded_dir_limit == 0 {
                    u64::MAX
                } else {
                    decoded_dir_limit
                },
                ..DecodedCacheConfig::in_ram(decoded_size, decoded_budget)
            }),
        };
        let steps_per_epoch = py
            .detach(|| -> Result<u64, EngineError> {
                let blocks: Vec<u64> = ds.manifest().shards.iter().map(|s| s.records).collect();
                if batch_size == 0 || world_size == 0 || rank >= world_size {
                    return Ok(0); // Loader::new reports it
                }
                let order = EpochOrder::new(ds.len(), Some(&blocks), &shuffle, seed, 0)?;
                Ok(RankPlan::new(order, 0, world_size, rank, batch_size, tail)?.steps())
            })
            .map_err(|e| engine_err(py, e))?;
        let mut loader = Loader::new(ds, columns, config).map_err(|e| engine_err(py, e))?;
        if let Some((cache, progress)) = disk {
            loader = loader.with_disk_cache(cache, progress);
        }
        Ok(Engine {
            state: Mutex::new(State::Idle(Box::new(loader))),
            generation: AtomicU64::new(FORK_GENERATION.load(Ordering::Acquire)),
            pid: AtomicU32::new(std::process::id()),
            forked: AtomicBool::new(false),
            next_run: AtomicU64::new(0),
            include_ids,
            steps_per_epoch,
            batch_size,
        })
    }

    /// Start (or continue) the current epoch; the returned iterator yields batch dicts. A run
    /// already in progress is stopped first (its iterator raises if used again).
    fn iter(slf: Bound<'_, Self>) -> PyResult<EngineIter> {
        let py = slf.py();
        let engine = slf.get();
        let id = engine.next_run.fetch_add(1, Ordering::Relaxed);
        engine.with_state(py, |s| {
            stop(s);
            let loader = match std::mem::replace(s, State::Gone) {
                State::Idle(l) => *l,
                other => {
                    *s = other;
                    return Outcome::Misuse(
                        "this Loader's engine was lost in an earlier failure".into(),
                    );
                }
            };
            match loader.into_batches() {
                Ok(iter) => {
                    *s = State::Running {
                        iter: Box::new(iter),
                        id,
                    };
                    Outcome::Ok(())
                }
                Err((l, e)) => {
                    *s = State::Idle(Box::new(l));
                    Outcome::Engine(e)
                }
            }
        })?;
        Ok(EngineIter {
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
    fn epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_state(py, |s| match s {
            State::Idle(l) => Outcome::Ok(l.epoch()),
            State::Running { iter, .. } => Outcome::Ok(iter.state().epoch),
            State::Gone => Outcome::Misuse("this Loader's engine was lost".into()),
        })
    }

    /// True while an epoch is running (worker threads exist).
    #[getter]
    fn running(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_state(py, |s| Outcome::Ok(matches!(s, State::Running { .. })))
    }

    /// Start epoch `epoch` at the next iteration (from its beginning, unless it is already the
    /// current epoch: then a resumed position is kept). Stops a running epoch.
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        self.idle(py, |l| {
            if l.epoch() != epoch {
                l.set_epoch(epoch);
            }
            Outcome::Ok(())
        })
    }

    /// The resume state as JSON (after the batches delivered so far).
    fn state_json(&self, py: Python<'_>) -> PyResult<String> {
        self.with_state(py, |s| match s {
            State::Idle(l) => Outcome::Ok(l.state().to_json()),
            State::Running { iter, .. } => Outcome::Ok(iter.state().to_json()),
            State::Gone => Outcome::Misuse("this Loader's engine was lost".into()),
        })
    }

    /// Continue from a state saved by `state_json` (any rank, any world size). Stops a running
    /// epoch.
    fn load_state_json(&self, py: Python<'_>, json: &str) -> PyResult<()> {
        let state = ResumeState::from_json(json).map_err(|e| engine_err(py, e))?;
        self.idle(py, |l| match l.load_state(&state) {
            Ok(()) => Outcome::Ok(()),
            Err(e) => Outcome::Engine(e),
        })
    }

    /// Statistics since the loader was made, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.with_state(py, |s| match s {
            State::Idle(l) => Outcome::Ok(l.stats()),
            State::Running { iter, .. } => Outcome::Ok(iter.stats()),
            State::Gone => Outcome::Misuse("this Loader's engine was lost".into()),
        })?;
        let total: f64 = st.stages.iter().map(|s| s.busy.as_secs_f64()).sum::<f64>();
        let stages = PyList::empty(py);
        for s in &st.stages {
            let d = PyDict::new(py);
            d.set_item("name", &s.name)?;
            d.set_item("items", s.items)?;
            d.set_item("busy", s.busy.as_secs_f64())?;
            d.set_item("p50", s.p50.as_secs_f64())?;
            d.set_item("p99", s.p99.as_secs_f64())?;
            d.set_item(
                "share",
                if total > 0.0 {
                    s.busy.as_secs_f64() / total
                } else {
                    0.0
                },
            )?;
            stages.append(d)?;
        }
        let d = PyDict::new(py);
        d.set_item("stages", stages)?;
        d.set_item("batches", st.batches)?;
        d.set_item("samples", st.samples)?;
        d.set_item("consumer_wait", st.consumer_wait.as_secs_f64())?;
        d.set_item("worker_wait", st.worker_wait.as_secs_f64())?;
        d.set_item("mean_queue", st.mean_queue)?;
        d.set_item("skipped", PyList::new(py, &st.skipped)?)?;
        d.set_item("threads", st.threads)?;
        d.set_item("active_threads", st.active_threads)?;
        let caches = PyDict::new(py);
        for c in &st.caches {
            let e = PyDict::new(py);
            e.set_item("hits", c.hits)?;
            e.set_item("misses", c.misses)?;
            e.set_item("bytes", c.bytes)?;
            e.set_item("budget", c.budget)?;
            e.set_item("entries", c.entries)?;
            e.set_item("saved", c.saved.as_secs_f64())?;
            caches.set_item(&c.kind, e)?;
        }
        d.set_item("caches", caches)?;
        d.set_item("prefetch", st.prefetch)?;
        d.set_item("bytes_read", st.bytes_read)?;
        d.set_item("records_read", st.records_read)?;
        d.set_item("profiled", st.profiled)?;
        Ok(d)
    }

    /// The stage spans kept so far as Chrome Trace Event JSON, or None when tracing is off.
    fn trace_json(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with_state(py, |s| match s {
            State::Idle(l) => Outcome::Ok(l.trace_json()),
            State::Running { iter, .. } => Outcome::Ok(iter.trace_json()),
            State::Gone => Outcome::Misuse("this Loader's engine was lost".into()),
        })
    }

    /// The statistics as a readable table.
    fn report(&self, py: Python<'_>) -> PyResult<String> {
        self.with_state(py, |s| match s {
            State::Idle(l) => Outcome::Ok(l.stats().report()),
            State::Running { iter, .. } => Outcome::Ok(iter.stats().report()),
            State::Gone => Outcome::Misuse("this Loader's engine was lost".into()),
        })
    }

    /// Benchmark helper: run the rest of the current epoch in Rust, dropping each batch without
    /// making any Python object; returns the number of batches (the engine's own rate, for
    /// `scripts/bench_python.py`).
    fn _drain(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_state(py, |s| {
            stop(s);
            let State::Idle(l) = s else {
                return Outcome::Misuse("this Loader's engine was lost".into());
            };
            let mut n = 0;
            let mut it = match l.iter() {
                Ok(it) => it,
                Err(e) => return Outcome::Engine(e),
            };
            for b in it.by_ref() {
                match b {
                    Ok(_) => n += 1,
                    Err(e) => return Outcome::Engine(e),
                }
            }
            Outcome::Ok(n)
        })
    }

    /// Stop a running epoch and join its worker threads (the position is kept).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.forked.load(Ordering::Acquire) || self.moved() {
            // Nothing to join in a forked child; `check_usable` marks it.
            return self.check_usable();
        }
        self.stop_run(py, None)
    }

    fn __repr__(&self) -> String {
        format!(
            "<stokehold engine: batch {}, {} batches per epoch>",
            self.batch_size, self.steps_per_epoch
        )
    }
}

/// The iterator of one run of an [`Engine`].
#[pyclass(module = "stokehold._native", name = "_EngineIter", frozen)]
pub struct EngineIter {
    engine: Py<Engine>,
    id: u64,
    done: AtomicBool,
}

impl std::fmt::Debug for EngineIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineIter").field("id", &self.id).finish()
    }
}

#[pymethods]
impl EngineIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        if self.done.load(Ordering::Acquire) {
            return Ok(None);
        }
        let r = self.engine.get().next_batch(py, self.id);
        match &r {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => self.done.store(true, Ordering::Release),
        }
        r
    }

    /// Batches left in this epoch (0 once finished).
    fn __length_hint__(&self, py: Python<'_>) -> PyResult<usize> {
        if self.done.load(Ordering::Acquire) {
            return Ok(0);
        }
        let id = self.id;
        self.engine.get().with_state(py, |s| match s {
            State::Running { iter, id: r } if *r == id => {
                Outcome::Ok(usize::try_from(iter.remaining()).unwrap_or(usize::MAX))
            }
            _ => Outcome::Ok(0),
        })
    }

    /// Stop this run now (its worker threads are joined); the loader keeps its position.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.done.store(true, Ordering::Release);
        self.engine.get().stop_run(py, Some(self.id))
    }
}

impl Drop for EngineIter {
    fn drop(&mut self) {
        if self.done.load(Ordering::Acquire) {
            return;
        }
        let engine = self.engine.get();
        let id = self.id;
        let _ = Python::try_attach(|py| {
            // In a forked child this marks the engine instead of joining anything.
            let _ = engine.stop_run(py, Some(id));
        });
    }
}

/// Register the classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Engine>()?;
    m.add_class::<EngineIter>()?;
    m.add_class::<BatchBuffer>()?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    Ok(())
}
