//! `stokehold.vision.Qwen2VL`: Qwen2-VL's image processor on native threads (issue #53), so that
//! images become `pixel_values` and `image_grid_thw` as `transformers`' processors make them.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use stokehold::ops::DEFAULT_MAX_PIXELS;
use stokehold::ops::vision::{Qwen2Vl as Params, VisionWorkspace};

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

/// Qwen2-VL's image processor (also Qwen2.5-VL's and Qwen3-VL's), natively.
#[derive(Debug)]
#[pyclass(module = "stokehold.vision", name = "Qwen2VL", frozen)]
pub struct Qwen2Vl {
    params: Params,
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
        Ok(Qwen2Vl { params })
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
        // each thread takes every `threads`-th image; results are put back in order
        let results = py.detach(|| {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads)
                    .map(|t| {
                        let data = &data;
                        s.spawn(move || {
                            let mut ws = VisionWorkspace::new().map_err(|e| (0, e))?;
                            let mut out = Vec::new();
                            for i in (t..data.len()).step_by(threads) {
                                let mut pv = Vec::new();
                                let grid = params
                                    .process(&mut ws, data[i], DEFAULT_MAX_PIXELS, &mut pv)
                                    .map_err(|e| (i, e))?;
                                out.push((i, grid, pv));
                            }
                            Ok::<_, (usize, OpsError)>(out)
                        })
                    })
                    .collect();
                let mut all = Vec::with_capacity(data.len());
                for h in handles {
                    match h.join() {
                        Ok(r) => all.extend(r?),
                        Err(_) => {
                            return Err((0, OpsError::Invalid("a worker panicked".into())));
                        }
                    }
                }
                all.sort_by_key(|(i, _, _)| *i);
                Ok(all)
            })
        });
        let all = results.map_err(|(i, e)| image_error(i, e))?;
        let row = params.row_len();
        let mut pixels = Vec::with_capacity(all.iter().map(|(_, _, p)| p.len()).sum());
        let mut grids = Vec::with_capacity(all.len() * 3);
        for (_, g, p) in &all {
            pixels.extend_from_slice(p);
            grids.extend(g.iter().map(|&v| i64::from(v)));
        }
        let rows = pixels.len() / row;
        let pv = PyArray1::from_vec(py, pixels).reshape([rows, row])?;
        let gr = PyArray1::from_vec(py, grids).reshape([all.len(), 3])?;
        PyTuple::new(py, [pv.into_any(), gr.into_any()])
    }
}
