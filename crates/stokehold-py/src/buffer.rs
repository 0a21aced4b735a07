//! Zero copy into numpy: a fixed column's [`Buffer`] moves into a small Python object
//! (`_BatchBuffer`) that becomes the numpy array's `base`; the array views the buffer in place,
//! and when Python drops the last view the buffer goes back to the loader's pool for the next
//! batch.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{Element, PyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use stokehold::format::DType;
use stokehold::{Batch, Buffer, BufferPool, ColumnData};

use crate::convert::value_into_py;
use crate::errors::stokehold_error;
use crate::fork::FORK_GENERATION;

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
        if self.generation == FORK_GENERATION.load(Ordering::Acquire)
            && let Some(pool) = &self.pool
        {
            pool.put(std::mem::take(&mut self.buf));
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
            ColumnData::Fixed { dtype, shape, data }
            | ColumnData::Ragged {
                dtype, shape, data, ..
            } => {
                d.set_item(name, fixed_to_numpy(py, dtype, &shape, data, pool.clone())?)?;
            }
            ColumnData::List(items) => {
                let list = PyList::empty(py);
                for v in items {
                    list.append(value_into_py(py, v)?)?;
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
