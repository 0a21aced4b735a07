//! `stokehold.vision.Qwen2VL`: Qwen2-VL's image processor on native threads (issue #53), so that
//! images become `pixel_values` and `image_grid_thw` as `transformers`' processors make them.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use stokehold::ops::DEFAULT_MAX_PIXELS;
use stokehold::ops::vision::{FixedSize as Fixed, Qwen2Vl as Params, VisionWorkspace};

use stokehold::advise_huge_pages;
use stokehold::ops::OpsError;

use crate::errors::{CorruptDataError, LimitExceededError, SampleError, config_error};

/// An image's error as Python sees it: damage, a size over the limit, or an image the processor
/// cannot take (each naming the image's index in the call).
fn image_error(i: usize, e: OpsError) -> PyErr {
    let msg = format!("image {i}: {e}");
    match e {
        OpsError::Decode { .. } | OpsError::UnknownFormat(_) => CorruptDataError::new_err(msg),
        OpsError::TooLarge { .. } => LimitExceededError::new_err(msg),
        _ => SampleError::new_err(msg),
    }
}

/// Workspaces kept between a processor's calls (their decoder and grown buffers), one taken per
/// thread.
#[derive(Debug, Default)]
struct Workspaces(std::sync::Mutex<Vec<VisionWorkspace>>);

impl Workspaces {
    /// A workspace from the pool, or a new one.
    fn take(&self) -> Result<VisionWorkspace, OpsError> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner()).pop();
        kept.map_or_else(VisionWorkspace::new, Ok)
    }

    /// Return a workspace to the pool (at most a few are kept).
    fn give_back(&self, ws: VisionWorkspace) {
        let mut pool = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < 16 {
            pool.push(ws);
        }
    }

    /// Run `process(ws, i, out)` for every image `i` and its slice `out` of the call's buffer,
    /// on `threads` scoped threads without the GIL (thread `t` takes every `threads`-th image);
    /// the error of the lowest image index, whatever thread met it, as Python's.
    fn process_all<F>(
        &self,
        py: Python<'_>,
        slices: Vec<&mut [f32]>,
        threads: usize,
        process: F,
    ) -> PyResult<()>
    where
        F: Fn(&mut VisionWorkspace, usize, &mut [f32]) -> Result<(), OpsError> + Sync,
    {
        let threads = threads.clamp(1, slices.len().max(1));
        let mut per: Vec<Vec<(usize, &mut [f32])>> = (0..threads).map(|_| Vec::new()).collect();
        for (i, sl) in slices.into_iter().enumerate() {
            per[i % threads].push((i, sl));
        }
        let process = &process;
        let first_err = py.detach(move || {
            std::thread::scope(|s| {
                let handles: Vec<_> = per
                    .into_iter()
                    .map(|mine| {
                        s.spawn(move || {
                            let mut ws = self.take().map_err(|e| (0, e))?;
                            for (i, out) in mine {
                                process(&mut ws, i, out).map_err(|e| (i, e))?;
                            }
                            self.give_back(ws);
                            Ok::<(), (usize, OpsError)>(())
                        })
                    })
                    .collect();
                let mut errs = Vec::new();
                for h in handles {
                    match h.join() {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => errs.push(e),
                        Err(_) => errs.push((0, OpsError::Invalid("a worker panicked".into()))),
                    }
                }
                errs.into_iter().min_by_key(|(i, _)| *i)
            })
        });
        match first_err {
            Some((i, e)) => Err(image_error(i, e)),
            None => Ok(()),
        }
    }
}

/// A stage spec as the loaders send it to the engine: `{"name": name, "params": params}`.
fn stage_spec<'py>(
    py: Python<'py>,
    name: &str,
    params: Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyDict>> {
    let spec = PyDict::new(py);
    spec.set_item("name", name)?;
    spec.set_item("params", params)?;
    Ok(spec)
}

/// Qwen2-VL's image processor (also Qwen2.5-VL's and Qwen3-VL's), natively.
#[derive(Debug)]
#[pyclass(module = "stokehold.vision", name = "Qwen2VL", frozen)]
pub struct Qwen2Vl {
    params: Params,
    pool: Workspaces,
}

#[pymethods]
impl Qwen2Vl {
    #[new]
    #[pyo3(signature = (*, min_pixels = 3136, max_pixels = 1_003_520, patch_size = 14,
        merge_size = 2, temporal_patch_size = 2, image_mean = None, image_std = None,
        dct_scaling = true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        min_pixels: u64,
        max_pixels: u64,
        patch_size: u32,
        merge_size: u32,
        temporal_patch_size: u32,
        image_mean: Option<[f32; 3]>,
        image_std: Option<[f32; 3]>,
        dct_scaling: bool,
    ) -> PyResult<Qwen2Vl> {
        let d = Params::default();
        let params = Params {
            min_pixels,
            max_pixels,
            patch_size,
            merge_size,
            temporal_patch_size,
            mean: image_mean.unwrap_or(d.mean),
            std: image_std.unwrap_or(d.std),
            dct_scaling,
        };
        // the parameters checked once, here, on a size every valid processor takes
        params
            .grid(1024, 1024)
            .map_err(|e| config_error(py, format!("Qwen2VL: {e}")))?;
        Ok(Qwen2Vl {
            params,
            pool: Workspaces::default(),
        })
    }

    /// Its parameters as keyword arguments (pickling: `__reduce__` calls the class with them).
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let p = &self.params;
        let kw = PyDict::new(py);
        kw.set_item("min_pixels", p.min_pixels)?;
        kw.set_item("max_pixels", p.max_pixels)?;
        kw.set_item("patch_size", p.patch_size)?;
        kw.set_item("merge_size", p.merge_size)?;
        kw.set_item("temporal_patch_size", p.temporal_patch_size)?;
        kw.set_item("image_mean", p.mean.to_vec())?;
        kw.set_item("image_std", p.std.to_vec())?;
        kw.set_item("dct_scaling", p.dct_scaling)?;
        Ok((PyTuple::empty(py), kw))
    }

    /// The stage spec the loaders send to the engine (`transforms={"image": Qwen2VL(...)}`).
    fn _spec<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (_, params) = self.__getnewargs_ex__(py)?;
        stage_spec(py, "qwen2vl", params)
    }

    fn __repr__(&self) -> String {
        let p = &self.params;
        format!(
            "Qwen2VL(min_pixels={}, max_pixels={}, patch_size={}, merge_size={}, temporal_patch_size={}, dct_scaling={})",
            p.min_pixels,
            p.max_pixels,
            p.patch_size,
            p.merge_size,
            p.temporal_patch_size,
            if p.dct_scaling { "True" } else { "False" }
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Qwen2Vl>()
            .is_ok_and(|o| o.get().params == self.params)
    }

    /// The grid `(t, h, w)` in patches of a `width` x `height` image (from its size alone).
    fn grid(&self, py: Python<'_>, width: u32, height: u32) -> PyResult<(u32, u32, u32)> {
        let [t, h, w] = self
            .params
            .grid(width, height)
            .map_err(|e| config_error(py, e.to_string()))?;
        Ok((t, h, w))
    }

    /// The tokens a `width` x `height` image becomes (`t*h*w / merge_size**2`).
    fn num_tokens(&self, py: Python<'_>, width: u32, height: u32) -> PyResult<u64> {
        self.params
            .tokens(width, height)
            .map_err(|e| config_error(py, e.to_string()))
    }

    /// The `(width, height)` an encoded image declares (its header alone: nothing is decoded).
    fn dimensions(&self, py: Python<'_>, data: &Bound<'_, PyBytes>) -> PyResult<(u32, u32)> {
        let mut ws = self.pool.take().map_err(|e| image_error(0, e))?;
        let bytes = data.as_bytes();
        let dims = py.detach(|| ws.dimensions(bytes));
        self.pool.give_back(ws);
        dims.map_err(|e| image_error(0, e))
    }

    /// Process encoded images (a list of `bytes`) on `threads` native threads (default: 2, at
    /// most one per image): returns `(pixel_values, image_grid_thw)`, float32 `[patches,
    /// 3 * temporal_patch_size * patch_size**2]` and int64 `[images, 3]`, in the images' order.
    #[pyo3(signature = (images, *, threads = 2))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        images: Vec<Bound<'py, PyBytes>>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let data: Vec<&[u8]> = images.iter().map(|b| b.as_bytes()).collect();
        let threads = threads.clamp(1, data.len().max(1));
        let params = &self.params;
        let row = params.row_len();
        // every image's grid from its header first, so the batch's buffer is allocated once and
        // each thread writes its images' rows in place
        let mut ws = self.pool.take().map_err(|e| image_error(0, e))?;
        let grids = py
            .detach(|| {
                data.iter()
                    .enumerate()
                    .map(|(i, d)| {
                        params
                            .image_grid(&mut ws, d, DEFAULT_MAX_PIXELS)
                            .map_err(|e| (i, e))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|(i, e)| image_error(i, e))?;
        self.pool.give_back(ws);
        let total: usize = grids.iter().map(|&g| params.values(g)).sum();
        let mut pixels = vec![0f32; total];
        advise_huge_pages(&mut pixels);
        let mut slices: Vec<&mut [f32]> = Vec::with_capacity(data.len());
        let mut rest = pixels.as_mut_slice();
        for &g in &grids {
            let (this, tail) = rest.split_at_mut(params.values(g));
            slices.push(this);
            rest = tail;
        }
        let (data, grid_of) = (&data, &grids);
        self.pool.process_all(py, slices, threads, |ws, i, out| {
            params.process_into(ws, data[i], DEFAULT_MAX_PIXELS, grid_of[i], out)
        })?;
        let grid_values: Vec<i64> = grids
            .iter()
            .flat_map(|g| g.iter().map(|&v| i64::from(v)))
            .collect();
        let rows = pixels.len() / row;
        let pv = PyArray1::from_vec(py, pixels).reshape([rows, row])?;
        let gr = PyArray1::from_vec(py, grid_values).reshape([grids.len(), 3])?;
        PyTuple::new(py, [pv.into_any(), gr.into_any()])
    }
}

/// The fixed-size processor of SigLIP/CLIP/LLaVA-style vision encoders, natively: each image
/// resized to `size` x `size` with Pillow's bicubic (padded to a square of `pad` first, as
/// LLaVA's `expand2square` does), rescaled and normalised, channels first.
#[derive(Debug)]
#[pyclass(module = "stokehold.vision", name = "FixedSize", frozen)]
pub struct FixedSize {
    params: Fixed,
    pool: Workspaces,
}

#[pymethods]
impl FixedSize {
    #[new]
    #[pyo3(signature = (size, *, pad = None, image_mean = [0.5, 0.5, 0.5], image_std = [0.5, 0.5, 0.5]))]
    fn new(
        py: Python<'_>,
        size: u32,
        pad: Option<[u8; 3]>,
        image_mean: [f32; 3],
        image_std: [f32; 3],
    ) -> PyResult<FixedSize> {
        if size == 0 || size > 8192 {
            return Err(config_error(
                py,
                format!("FixedSize: size {size} is not from 1 to 8192"),
            ));
        }
        if image_std.iter().any(|&s| !(s > 0.0 && s.is_finite())) {
            return Err(config_error(
                py,
                format!("FixedSize: image_std {image_std:?} must be positive"),
            ));
        }
        Ok(FixedSize {
            params: Fixed {
                size,
                pad,
                mean: image_mean,
                std: image_std,
            },
            pool: Workspaces::default(),
        })
    }

    /// Its parameters as keyword arguments (pickling).
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let p = &self.params;
        let kw = PyDict::new(py);
        kw.set_item("pad", p.pad.map(|c| c.to_vec()))?;
        kw.set_item("image_mean", p.mean.to_vec())?;
        kw.set_item("image_std", p.std.to_vec())?;
        Ok((PyTuple::new(py, [p.size])?, kw))
    }

    /// The stage spec the loaders send to the engine (`transforms={"image": FixedSize(...)}`).
    fn _spec<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (args, params) = self.__getnewargs_ex__(py)?;
        params.set_item("size", args.get_item(0)?)?;
        stage_spec(py, "fixed_size", params)
    }

    fn __repr__(&self) -> String {
        let p = &self.params;
        format!(
            "FixedSize({}, pad={:?}, image_mean={:?}, image_std={:?})",
            p.size, p.pad, p.mean, p.std
        )
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<FixedSize>()
            .is_ok_and(|o| o.get().params == self.params)
    }

    /// Process encoded images (a list of `bytes`) on `threads` native threads: float32
    /// `[images, 3, size, size]`, in the images' order.
    #[pyo3(signature = (images, *, threads = 2))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        images: Vec<Bound<'py, PyBytes>>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let data: Vec<&[u8]> = images.iter().map(|b| b.as_bytes()).collect();
        let s = self.params.size as usize;
        let mut pixels = vec![0f32; data.len() * 3 * s * s];
        advise_huge_pages(&mut pixels);
        let slices: Vec<&mut [f32]> = pixels.chunks_mut(3 * s * s).collect();
        let (params, data_of) = (&self.params, &data);
        self.pool.process_all(py, slices, threads, |ws, i, out| {
            params.process(ws, data_of[i], DEFAULT_MAX_PIXELS, out)
        })?;
        Ok(PyArray1::from_vec(py, pixels)
            .reshape([data.len(), 3, s, s])?
            .into_any())
    }
}
