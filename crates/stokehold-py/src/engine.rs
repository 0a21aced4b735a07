//! `stokehold._native._Engine`: the one loading engine behind `stokehold.Loader` and
//! `stokehold.SequenceLoader` (the Python classes add argument checks, `to="torch"/"jax"`,
//! pickling and the fork and exit hooks).
//!
//! **Construction.** `_Engine(dataset, config, python_stages)`: `config` is the loader's
//! [`EngineSpec`] as JSON (the one description of a loader, also what `repr` shows); a stage
//! `{"name": "python", "params": {"index": k}}` in it is `python_stages[k]`, a
//! `(callable, rng, name)` tuple.
//!
//! **Ownership.** The engine's [`BatchIter`] owns what it needs, so the engine object keeps the
//! [`Loader`] and at most one running iterator (with the id of the `_EngineIter` driving it)
//! behind a mutex; a new `iter(loader)` supersedes the old run.
//!
//! **The GIL.** Waiting for a batch releases the GIL and, every 100 ms
//! ([`BatchIter::next_timeout`] says `Pending`), runs the signal handlers, so Ctrl-C raises
//! `KeyboardInterrupt`. Worker threads are only ever joined with the GIL released (they may be
//! waiting for it to run a Python stage).
//!
//! **fork().** Worker threads do not exist in a forked child. `_after_fork_in_child` (registered
//! with `os.register_at_fork`) bumps a generation counter; an engine first used in another
//! generation (or another process id) checks its state: idle, it keeps working (the child starts
//! its own threads); running, it is marked unusable and its iterator is leaked (never joined), and
//! every use raises a `StokeholdError` saying to create a new loader in the child.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use stokehold::stages::spec::TransformSpec;
use stokehold::{BatchIter, EngineError, EngineSpec, Loader, Next, ResumeState, Transform};

use crate::buffer::batch_to_py;
use crate::dataset::Dataset;
use crate::errors::{config_error, engine_err, stokehold_error};
pub use crate::fork::_after_fork_in_child;
use crate::fork::FORK_GENERATION;
use crate::stages::PyStage;

const FORKED: &str = "this loader was created before fork() and was running at the fork: its \
     worker threads do not exist in this process; create a new Loader in the child (a new \
     SequenceLoader for token batches), or start worker processes with the 'spawn' method and pass them the loader, which \
     pickles";

const SUPERSEDED: &str = "this iterator was superseded: iter(loader), set_epoch(), \
     load_state_dict() or close() was called since it started (a loader runs one iteration at a \
     time)";

/// What the engine object holds.
struct State {
    loader: Loader,
    /// The epoch in progress and the id of the `_EngineIter` driving it.
    run: Option<(u64, BatchIter)>,
}

/// The loading engine of one `stokehold.Loader` or `stokehold.SequenceLoader`.
#[pyclass(module = "stokehold._native", name = "_Engine", frozen)]
pub struct Engine {
    state: Mutex<Option<State>>,
    /// The fork generation and process this engine may run in.
    generation: AtomicU64,
    pid: AtomicU32,
    forked: AtomicBool,
    next_run: AtomicU64,
    include_ids: bool,
    steps_per_epoch: u64,
    spec: EngineSpec,
    /// Token datasets: (total tokens, documents).
    tokens: Option<(u64, u64)>,
    /// Packed conversations: their planner.
    chats: Option<Arc<stokehold::samples::ChatPlanner>>,
    chat_mix: Option<Arc<stokehold::samples::ChatMixture>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("spec", &self.spec)
            .field("steps_per_epoch", &self.steps_per_epoch)
            .finish()
    }
}

impl Engine {
    fn lock(&self) -> MutexGuard<'_, Option<State>> {
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
            Ok(s) if s.as_ref().is_some_and(|s| s.run.is_none()) => {
                // idle: a next epoch prepared before the fork is forgotten, not joined, when the
                // child iterates (it knows the process it was started in)
                self.generation
                    .store(FORK_GENERATION.load(Ordering::Acquire), Ordering::Release);
                self.pid.store(std::process::id(), Ordering::Release);
                Ok(())
            }
            Ok(mut s) => {
                // Its worker threads are gone: never join them.
                std::mem::forget(s.take());
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
        f: impl FnOnce(&mut State) -> Result<T, EngineError> + Send,
    ) -> PyResult<T> {
        self.check_usable()?;
        let out = py.detach(|| {
            let mut s = self.lock();
            s.as_mut().map(f)
        });
        match out {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(engine_err(py, e)),
            None => Err(stokehold_error("this loader's engine was lost")),
        }
    }

    /// Stop the running epoch if run `id` (any run when None) drives it; the workers are joined
    /// with the GIL released.
    fn stop_run(&self, py: Python<'_>, id: Option<u64>) -> PyResult<()> {
        let run = self.with_state(py, |s| {
            let ours = s
                .run
                .as_ref()
                .is_some_and(|(r, _)| id.is_none_or(|i| i == *r));
            Ok(if ours { s.run.take() } else { None })
        })?;
        if let Some(run) = run {
            py.detach(move || drop(run));
        }
        Ok(())
    }

    /// The next batch of run `id`.
    fn next_batch<'py>(
        &self,
        py: Python<'py>,
        id: u64,
        hook: Option<&(Py<PyAny>, u32)>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        loop {
            let got = self.with_state(py, |s| {
                Ok(match &mut s.run {
                    Some((r, it)) if *r == id => {
                        let next = it.next_timeout(Duration::from_millis(100));
                        // the wait just recorded, read under the same lock as the batch
                        let wait = match (&next, hook) {
                            (Next::Batch(Ok(_)), Some(_)) => s.loader.last_wait(),
                            _ => None,
                        };
                        Some((next, wait))
                    }
                    _ => None,
                })
            })?;
            let Some((got, wait)) = got else {
                return Err(stokehold_error(SUPERSEDED));
            };
            match got {
                Next::Pending => {
                    if let Err(e) = py.check_signals() {
                        // interrupted: join the workers now, and those of a run prepared ahead
                        // (nothing keeps working for an interrupted loop); the position stays
                        // after the last batch delivered, so a new iteration continues there
                        self.stop_run(py, Some(id))?;
                        self.with_state(py, |s| {
                            drop(s.loader.take_prepared());
                            Ok(())
                        })?;
                        return Err(e);
                    }
                }
                Next::End => {
                    self.stop_run(py, Some(id))?;
                    return Ok(None);
                }
                Next::Batch(Ok(b)) => {
                    let batch = batch_to_py(py, b, self.include_ids)?;
                    if let (Some((hook, rank)), Some(w)) = (hook, wait) {
                        hook.call1(py, (wait_dict(py, &w, Some(*rank))?,))?;
                    }
                    return Ok(Some(batch));
                }
                Next::Batch(Err(e)) => {
                    self.stop_run(py, Some(id))?;
                    return Err(engine_err(py, e));
                }
            }
        }
    }
}

/// A step's exposed wait as the dict `last_wait` and the `on_step` hook give (`rank` added
/// for the hook).
fn wait_dict<'py>(
    py: Python<'py>,
    x: &stokehold::StepWait,
    rank: Option<u32>,
) -> PyResult<Bound<'py, PyDict>> {
    // keys interned once (this runs after every batch when a hook is given)
    let d = PyDict::new(py);
    d.set_item(pyo3::intern!(py, "epoch"), x.epoch)?;
    d.set_item(pyo3::intern!(py, "step"), x.step)?;
    d.set_item(pyo3::intern!(py, "wait"), x.wait.as_secs_f64())?;
    d.set_item(pyo3::intern!(py, "step_time"), x.step_time.as_secs_f64())?;
    match x.bound.as_deref() {
        Some(b) => d.set_item(pyo3::intern!(py, "bound"), PyString::intern(py, b))?,
        None => d.set_item(pyo3::intern!(py, "bound"), py.None())?,
    }
    if let Some(r) = rank {
        d.set_item(pyo3::intern!(py, "rank"), r)?;
    }
    Ok(d)
}

impl Drop for Engine {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut self.state, Mutex::new(None));
        if self.forked.load(Ordering::Acquire) || self.moved() {
            // Forked child: the threads (and maybe the lock holder) do not exist here.
            std::mem::forget(state);
            return;
        }
        let state = state.into_inner().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = state {
            // Join with the GIL released: a worker may be waiting for it in a Python stage.
            let _ = Python::try_attach(|py| py.detach(move || drop(state)));
        }
    }
}

/// A step's samples for Python: ids, padding flags, and each one's description as JSON.
type StepSamples = (Vec<i64>, Vec<bool>, Option<Vec<String>>);

/// The Python stages of a loader: `(callable, rng, name)` tuples, referred to by index.
fn python_stages(py: Python<'_>, list: &Bound<'_, PyList>) -> PyResult<Vec<Arc<dyn Transform>>> {
    let mut out: Vec<Arc<dyn Transform>> = Vec::with_capacity(list.len());
    for item in list.iter() {
        let t = item.cast::<PyTuple>()?;
        let func = t.get_item(0)?.unbind();
        let rng: Option<String> = t.get_item(1)?.extract()?;
        let name: String = t.get_item(2)?.extract()?;
        let stage = PyStage::new(py, func, rng.as_deref(), name)?;
        out.push(Arc::new(stage));
    }
    Ok(out)
}

/// The `"python"` stage of a spec: the `index`-th Python stage.
fn python_stage(s: &TransformSpec, stages: &[Arc<dyn Transform>]) -> Option<Arc<dyn Transform>> {
    if s.name != "python" {
        return None;
    }
    let k = usize::try_from(s.params.get("index")?.as_u64()?).ok()?;
    stages.get(k).cloned()
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (dataset, config, python_stages = None, include_ids = false))]
    fn new(
        py: Python<'_>,
        dataset: &Bound<'_, PyAny>,
        config: &str,
        python_stages: Option<Bound<'_, PyList>>,
        include_ids: bool,
    ) -> PyResult<Engine> {
        let mut spec = EngineSpec::from_json(config).map_err(|e| engine_err(py, e))?;
        let stages = match &python_stages {
            Some(l) => self::python_stages(py, l)?,
            None => Vec::new(),
        };
        // A Python stage needs the GIL on the worker threads; a run started ahead would be
        // joined when the loader is dropped, which can happen with the GIL held: never start one
        // then. Without Python stages the workers never need the GIL.
        if !stages.is_empty() {
            spec.loader.prepare_next_epoch = false;
        }
        // no dataset: a LeRobot folder read in place (the spec names it)
        let lerobot = dataset.is_none();
        // one dataset, or a mixture's sources (a list, in the mixture's order)
        let datasets: Vec<PyRef<'_, Dataset>> = match dataset.cast::<PyList>() {
            _ if lerobot => Vec::new(),
            Ok(list) => list
                .iter()
                .map(|d| d.extract::<PyRef<'_, Dataset>>().map_err(PyErr::from))
                .collect::<PyResult<_>>()?,
            Err(_) => vec![
                dataset
                    .extract::<PyRef<'_, Dataset>>()
                    .map_err(PyErr::from)?,
            ],
        };
        let options = datasets.first().map(|d| d.options());
        if options.is_none() && !lerobot {
            return Err(config_error(
                py,
                stokehold::blend::MixtureMistake::NoSources.to_string(),
            ));
        }
        let shared: Vec<_> = datasets.iter().map(|d| d.shared()).collect();
        let built = py
            .detach(|| {
                let Some(options) = options else {
                    return spec.build_lerobot();
                };
                let mut ext = |s: &TransformSpec| python_stage(s, &stages);
                if spec.mixture.is_some() {
                    spec.build_mixture(shared, options, &mut ext)
                } else {
                    let ds = shared.into_iter().next().expect("one dataset at least");
                    spec.build(ds, options, &mut ext)
                }
            })
            .map_err(|e| engine_err(py, e))?;
        let tokens = (!built.tokens.is_empty()).then(|| {
            built.tokens.iter().fold((0u64, 0u64), |(t, d), x| {
                (t + x.total_tokens(), d + x.documents())
            })
        });
        let chats = built.chats;
        let chat_mix = built.chat_mix;
        let loader = built.loader;
        let steps_per_epoch = loader.steps_per_epoch().map_err(|e| engine_err(py, e))?;
        Ok(Engine {
            state: Mutex::new(Some(State { loader, run: None })),
            generation: AtomicU64::new(FORK_GENERATION.load(Ordering::Acquire)),
            pid: AtomicU32::new(std::process::id()),
            forked: AtomicBool::new(false),
            next_run: AtomicU64::new(0),
            include_ids,
            steps_per_epoch,
            spec,
            tokens,
            chats,
            chat_mix,
        })
    }

    /// Packed conversations: what the plan of the current epoch says (JSON: conversations, rows,
    /// fill, truncated, dropped, skipped, skipped_examples; a mixture's `sources` too); `None`
    /// for other samples.
    fn packing_json(&self, py: Python<'_>) -> PyResult<Option<String>> {
        if let Some(mix) = self.chat_mix.clone() {
            let epoch = self.with_state(py, |s| Ok(s.loader.epoch()))?;
            let summary = py
                .detach(move || mix.summary(epoch))
                .map_err(|e| engine_err(py, e))?;
            return serde_json::to_string(&summary)
                .map(Some)
                .map_err(|e| stokehold_error(e.to_string()));
        }
        let Some(planner) = self.chats.clone() else {
            return Ok(None);
        };
        let epoch = self.with_state(py, |s| Ok(s.loader.epoch()))?;
        let summary = py
            .detach(move || planner.summary(epoch))
            .map_err(|e| engine_err(py, e))?;
        serde_json::to_string(&summary)
            .map(Some)
            .map_err(|e| stokehold_error(e.to_string()))
    }

    /// Start (or continue) the current epoch; the returned iterator yields batch dicts. A run
    /// already in progress is stopped first (its iterator raises if used again). `on_step`,
    /// when given, is called after each batch with its exposed wait (`last_wait`'s dict with
    /// `rank` added); its exceptions propagate from `__next__`.
    #[pyo3(signature = (on_step = None, rank = 0))]
    fn iter(slf: Bound<'_, Self>, on_step: Option<Py<PyAny>>, rank: u32) -> PyResult<EngineIter> {
        let py = slf.py();
        let engine = slf.get();
        engine.stop_run(py, None)?;
        let id = engine.next_run.fetch_add(1, Ordering::Relaxed);
        engine.with_state(py, |s| {
            s.run = Some((id, s.loader.iter()?));
            Ok(())
        })?;
        Ok(EngineIter {
            engine: slf.unbind(),
            id,
            done: AtomicBool::new(false),
            hook: on_step.map(|h| (h, rank)),
        })
    }

    /// Batches per epoch for this rank: while packed conversations are still being counted an
    /// estimate (`Loader::steps_per_epoch`), exact once the epoch is planned.
    fn __len__(&self, py: Python<'_>) -> usize {
        // packed conversations (of one dataset or a mixture) are counted lazily: asked again,
        // an estimate until the epoch is planned (a closed engine, or one in a forked child,
        // answers what it answered when made)
        let steps = if self.chats.is_some() || self.chat_mix.is_some() {
            self.with_state(py, |s| s.loader.steps_per_epoch())
                .unwrap_or(self.steps_per_epoch)
        } else {
            self.steps_per_epoch
        };
        usize::try_from(steps).unwrap_or(usize::MAX)
    }

    /// The loader's whole configuration as JSON (the `EngineSpec`).
    #[getter]
    fn config_json(&self) -> String {
        self.spec.to_json()
    }

    /// Samples per epoch over all ranks (records, windows, documents, or packed rows).
    #[getter]
    fn samples(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_state(py, |s| s.loader.epoch_samples())
    }

    /// Tokens in a token dataset's stream (None for records).
    #[getter]
    fn total_tokens(&self) -> Option<u64> {
        self.tokens.map(|t| t.0)
    }

    /// Documents in a token dataset (None for records).
    #[getter]
    fn documents(&self) -> Option<u64> {
        self.tokens.map(|t| t.1)
    }

    /// The epoch the next iteration runs (or the one running).
    #[getter]
    fn epoch(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_state(py, |s| Ok(s.loader.epoch()))
    }

    /// True while an epoch is running (worker threads exist).
    #[getter]
    fn running(&self, py: Python<'_>) -> PyResult<bool> {
        self.with_state(py, |s| Ok(s.run.is_some()))
    }

    /// Start epoch `epoch` at the next iteration (from its beginning, unless it is already the
    /// current epoch: then a resumed position is kept). Stops a running epoch.
    fn set_epoch(&self, py: Python<'_>, epoch: u64) -> PyResult<()> {
        self.stop_run(py, None)?;
        self.with_state(py, |s| {
            if s.loader.epoch() != epoch {
                s.loader.set_epoch(epoch);
            }
            Ok(())
        })
    }

    /// The resume state as JSON (after the batches delivered so far).
    fn state_json(&self, py: Python<'_>) -> PyResult<String> {
        self.with_state(py, |s| Ok(s.loader.state().to_json()))
    }

    /// Continue from a state saved by `state_json` (any rank, any world size). Stops a running
    /// epoch.
    fn load_state_json(&self, py: Python<'_>, json: &str) -> PyResult<()> {
        let state = ResumeState::from_json(json).map_err(|e| engine_err(py, e))?;
        self.stop_run(py, None)?;
        self.with_state(py, |s| s.loader.load_state(&state))
    }

    /// Statistics since the loader was made, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.with_state(py, |s| Ok(s.loader.stats()))?;
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
            e.set_item("shared", c.shared)?;
            caches.set_item(&c.kind, e)?;
        }
        d.set_item("caches", caches)?;
        if let Some(r) = &st.storage {
            let e = PyDict::new(py);
            e.set_item("requests", r.requests)?;
            e.set_item("http_requests", r.http_requests)?;
            e.set_item("retries", r.retries)?;
            e.set_item("failures", r.failures)?;
            e.set_item("short_bodies", r.short_bodies)?;
            e.set_item("bytes", r.bytes)?;
            let p = PyDict::new(py);
            p.set_item("requests", r.prefetch.requests)?;
            p.set_item("bytes", r.prefetch.bytes)?;
            p.set_item("hits", r.prefetch.hits)?;
            p.set_item("misses", r.prefetch.misses)?;
            p.set_item("wasted_bytes", r.prefetch.wasted_bytes)?;
            p.set_item("refused", r.prefetch.refused)?;
            e.set_item("prefetch", p)?;
            d.set_item("storage", e)?;
        } else {
            d.set_item("storage", py.None())?;
        }
        let sources = PyDict::new(py);
        for (i, s) in st.groups.iter().enumerate() {
            let e = PyDict::new(py);
            e.set_item("index", i)?;
            e.set_item("weight", s.weight)?;
            e.set_item("samples", s.samples)?;
            e.set_item("bytes", s.bytes)?;
            e.set_item("failed", s.failed)?;
            e.set_item("busy", s.busy.as_secs_f64())?;
            e.set_item("passes", s.passes)?;
            sources.set_item(&s.name, e)?;
        }
        d.set_item("sources", sources)?;
        d.set_item("prefetch", st.prefetch)?;
        d.set_item("bytes_read", st.bytes_read)?;
        d.set_item("records_read", st.records_read)?;
        d.set_item("profiled", st.profiled)?;
        d.set_item(
            "memory_budget",
            self.with_state(py, |s| Ok(s.loader.memory_budget()))?,
        )?;
        let w = PyDict::new(py);
        w.set_item("epoch", PyList::new(py, st.waits.iter().map(|x| x.epoch))?)?;
        w.set_item("step", PyList::new(py, st.waits.iter().map(|x| x.step))?)?;
        w.set_item(
            "wait",
            PyList::new(py, st.waits.iter().map(|x| x.wait.as_secs_f64()))?,
        )?;
        w.set_item(
            "step_time",
            PyList::new(py, st.waits.iter().map(|x| x.step_time.as_secs_f64()))?,
        )?;
        w.set_item(
            "bound",
            PyList::new(py, st.waits.iter().map(|x| x.bound.clone()))?,
        )?;
        d.set_item("waits", w)?;
        Ok(d)
    }

    /// The last batch's exposed wait as a dict (`epoch`, `step`, `wait`, `step_time`, `bound`),
    /// or None before the first batch.
    fn last_wait<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(x) = self.with_state(py, |s| Ok(s.loader.last_wait()))? else {
            return Ok(None);
        };
        wait_dict(py, &x, None).map(Some)
    }

    /// The sample ids of rank `rank`'s batch at `step` of `epoch` (this loader's rank and
    /// epoch when None), their padding flags, and with `details` each one's description as
    /// JSON.
    #[pyo3(signature = (step, rank = None, epoch = None, details = false))]
    fn samples_at(
        &self,
        py: Python<'_>,
        step: u64,
        rank: Option<u32>,
        epoch: Option<u64>,
        details: bool,
    ) -> PyResult<StepSamples> {
        self.with_state(py, |s| {
            let slots = s.loader.samples_at(step, rank, epoch)?;
            let ids = slots.iter().map(|x| x.id as i64).collect();
            let padding = slots.iter().map(|x| x.padding).collect();
            let described = details.then(|| {
                slots
                    .iter()
                    .map(|x| serde_json::Value::Object(s.loader.describe(x.id, true)).to_string())
                    .collect()
            });
            Ok((ids, padding, described))
        })
    }

    /// The stage spans kept so far as Chrome Trace Event JSON, or None when tracing is off.
    fn trace_json(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.with_state(py, |s| Ok(s.loader.trace_json()))
    }

    /// The statistics as a readable table.
    fn report(&self, py: Python<'_>) -> PyResult<String> {
        self.with_state(py, |s| Ok(s.loader.stats().report()))
    }

    /// Benchmark helper: run the rest of the current epoch in Rust, dropping each batch without
    /// making any Python object; returns the number of batches (the engine's own rate, for
    /// `scripts/bench_python.py`).
    fn _drain(&self, py: Python<'_>) -> PyResult<u64> {
        self.stop_run(py, None)?;
        self.with_state(py, |s| {
            let mut n = 0;
            for b in s.loader.iter()? {
                b?;
                n += 1;
            }
            Ok(n)
        })
    }

    /// Stop a running epoch and the next epoch's run started ahead, and join every worker
    /// thread (the position is kept; a later iteration starts new ones).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.forked.load(Ordering::Acquire) || self.moved() {
            // Nothing to join in a forked child; `check_usable` marks it.
            return self.check_usable();
        }
        self.stop_run(py, None)?;
        // joined with the GIL released (dropped inside `with_state`'s detached section)
        self.with_state(py, |s| {
            drop(s.loader.take_prepared());
            Ok(())
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "<stokehold engine: {} batches per epoch, {}>",
            self.steps_per_epoch,
            self.spec.to_json()
        )
    }
}

/// The iterator of one run of an [`Engine`].
#[pyclass(module = "stokehold._native", name = "_EngineIter", frozen)]
pub struct EngineIter {
    engine: Py<Engine>,
    id: u64,
    done: AtomicBool,
    /// The `on_step` hook and the rank it reports.
    hook: Option<(Py<PyAny>, u32)>,
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
        let r = self
            .engine
            .get()
            .next_batch(py, self.id, self.hook.as_ref());
        if !matches!(r, Ok(Some(_))) {
            self.done.store(true, Ordering::Release);
        }
        r
    }

    /// Batches left in this epoch (0 once finished).
    fn __length_hint__(&self, py: Python<'_>) -> PyResult<usize> {
        if self.done.load(Ordering::Acquire) {
            return Ok(0);
        }
        let id = self.id;
        self.engine.get().with_state(py, |s| {
            Ok(match &s.run {
                Some((r, it)) if *r == id => usize::try_from(it.remaining()).unwrap_or(usize::MAX),
                _ => 0,
            })
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
    m.add_class::<crate::buffer::BatchBuffer>()?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    Ok(())
}
