//! Python callables as stages of the engine: called with the GIL held, on the worker threads.
//! A failing callable's exception travels inside the engine's typed stage error
//! ([`StageError::External`]) and is raised again as the `__cause__` of the `SampleError`.

use pyo3::prelude::*;
use stokehold::{SampleCtx, StageError, StageResult, Transform, Value};

use crate::convert::{py_to_value, value_to_py};

/// A Python callable as a stage: called with the GIL held, on the worker threads.
pub(crate) struct PyStage {
    name: String,
    func: Py<PyAny>,
    rng: RngMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RngMode {
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

    fn apply<'a>(&self, x: Value<'a>, ctx: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
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
            call().map_err(|e| StageError::External {
                message: describe(py, &e),
                source: Box::new(e),
            })
        })
    }
}

impl PyStage {
    /// The stage of `func` (`rng`: None, "seed" or "numpy"), called `name` in statistics.
    pub(crate) fn new(
        py: Python<'_>,
        func: Py<PyAny>,
        rng: Option<&str>,
        name: String,
    ) -> PyResult<PyStage> {
        let rng = match rng {
            None => RngMode::None,
            Some("seed") => RngMode::Seed,
            Some("numpy") => RngMode::Numpy,
            Some(other) => {
                return Err(crate::errors::config_error(
                    py,
                    format!("Lambda rng must be None, \"seed\" or \"numpy\", got {other:?}"),
                ));
            }
        };
        Ok(PyStage { name, func, rng })
    }
}
