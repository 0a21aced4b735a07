//! `stokehold.video`: an MP4 or Matroska/WebM file's frame index and frame-exact decoding of the frames played at
//! given timestamps (issue #54), with FFmpeg's libavcodec loaded at run time (`stokehold-video`).
//! Decoding runs with the GIL released.

use std::sync::Mutex;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use stokehold_video::{Clip, Start, Step, VideoError, VideoFile as Inner};

use crate::errors::{CorruptDataError, config_error, stokehold_error};

/// A Python exception for a video error: damaged or cut data `CorruptDataError`, a timestamp or
/// clip that does not fit the video `ValueError`, FFmpeg missing or an unsupported codec
/// `StokeholdError`. The message names the file (and the frame, its time and byte offset).
fn video_err(e: VideoError) -> PyErr {
    let msg = e.to_string();
    match e {
        VideoError::Decode { .. } | VideoError::Missing { .. } => CorruptDataError::new_err(msg),
        VideoError::Index { ref source, .. } if !source.is_unsupported() => {
            CorruptDataError::new_err(msg)
        }
        VideoError::OutOfRange { .. } | VideoError::Clip { .. } => PyValueError::new_err(msg),
        _ => stokehold_error(msg),
    }
}

/// An MP4 or Matroska/WebM video: its frame index, read once, and a decoder kept for its clips.
#[derive(Debug)]
#[pyclass(name = "VideoFile", module = "stokehold.video", subclass)]
pub struct VideoFile {
    inner: Mutex<Inner>,
}

#[pymethods]
impl VideoFile {
    #[new]
    #[pyo3(signature = (path, *, threads = 1))]
    fn new(py: Python<'_>, path: std::path::PathBuf, threads: u32) -> PyResult<VideoFile> {
        let mut inner = py.detach(|| Inner::open(&path)).map_err(video_err)?;
        inner.set_threads(threads);
        Ok(VideoFile {
            inner: Mutex::new(inner),
        })
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }

    /// The codec's four-character code (`avc1`, `hvc1`, `vp09`, `av01`, `mp4v`, ...).
    #[getter]
    fn codec(&self) -> String {
        self.lock().index().codec.to_string()
    }

    /// `(width, height)` as the file's sample entry states it.
    #[getter]
    fn size(&self) -> (u16, u16) {
        let v = self.lock();
        (v.index().width, v.index().height)
    }

    /// Presentation times of the frames in seconds, in presentation order (float64).
    #[getter]
    fn pts_seconds<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_vec(py, self.lock().pts_seconds())
    }

    /// Whether each frame (presentation order) is a keyframe.
    #[getter]
    fn keyframes<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<bool>> {
        let v = self.lock();
        let order = v.index().presentation_order();
        PyArray1::from_vec(py, order.iter().map(|&d| v.index().frames[d].key).collect())
    }

    /// Each frame's packet size in bytes (presentation order, uint32): with `keyframes`, the
    /// bytes of the keyframe intervals a clip touches.
    #[getter]
    fn packet_sizes<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u32>> {
        let v = self.lock();
        let order = v.index().presentation_order();
        PyArray1::from_vec(
            py,
            order.iter().map(|&d| v.index().frames[d].size).collect(),
        )
    }

    /// The first frame's presentation time, in seconds.
    #[getter]
    fn begin_seconds(&self) -> f64 {
        self.lock().begin_seconds()
    }

    /// The end of the last frame, in seconds.
    #[getter]
    fn end_seconds(&self) -> f64 {
        self.lock().end_seconds()
    }

    /// The index (presentation order) of the frame played at `seconds`.
    fn frame_played_at(&self, seconds: f64) -> PyResult<usize> {
        self.lock().frame_played_at(seconds).map_err(video_err)
    }

    /// The frames played at `seconds` (torchcodec's `get_frames_played_at`): `(frames,
    /// pts_seconds)`, uint8 `[T, H, W, 3]` RGB and float64 `[T]`.
    fn frames_played_at<'py>(
        &self,
        py: Python<'py>,
        seconds: Vec<f64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let got = py
            .detach(|| self.lock().frames_played_at(&seconds))
            .map_err(video_err)?;
        frames_out(py, got)
    }

    /// The frames at these indices (presentation order): as `frames_played_at`.
    fn frames_at<'py>(
        &self,
        py: Python<'py>,
        indices: Vec<usize>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let got = py
            .detach(|| self.lock().frames_at(&indices))
            .map_err(video_err)?;
        frames_out(py, got)
    }

    /// The timestamps of the clips of `sample` under `seed` (see `stokehold.video.Clip`):
    /// a list of lists of seconds.
    #[pyo3(signature = (frames, stride, fps, start, clips, seed, sample))]
    #[allow(clippy::too_many_arguments)]
    fn _clip_timestamps(
        &self,
        py: Python<'_>,
        frames: u32,
        stride: Option<u32>,
        fps: Option<f64>,
        start: &str,
        clips: u32,
        seed: u64,
        sample: u64,
    ) -> PyResult<Vec<Vec<f64>>> {
        let step = match (stride, fps) {
            (Some(s), None) => Step::Stride(s),
            (None, Some(f)) => Step::Fps(f),
            (None, None) => Step::Stride(1),
            (Some(_), Some(_)) => {
                return Err(config_error(py, "Clip: give stride or fps, not both"));
            }
        };
        let start = match start {
            "random" => Start::Random,
            "uniform" => Start::Uniform(clips),
            "all" => Start::All,
            other => {
                return Err(config_error(
                    py,
                    format!(
                        "Clip: start must be \"random\", \"uniform\" or \"all\", not {other:?}"
                    ),
                ));
            }
        };
        let clip = Clip::new(frames, step, start).map_err(|e| config_error(py, e.to_string()))?;
        let v = self.lock();
        clip.timestamps(&v.pts_seconds(), v.end_seconds(), seed, sample)
            .map_err(|source| {
                video_err(VideoError::Clip {
                    file: v.path().display().to_string(),
                    source,
                })
            })
    }
}

impl VideoFile {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // a panic while decoding is not expected; a poisoned lock still holds a usable index
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn frames_out<'py>(
    py: Python<'py>,
    got: stokehold_video::DecodedFrames,
) -> PyResult<Bound<'py, PyTuple>> {
    let shape = [got.count, got.height, got.width, 3];
    let frames = PyArray1::from_vec(py, got.data).reshape(shape)?;
    let pts = PyArray1::from_vec(py, got.pts_seconds);
    PyTuple::new(py, [frames.into_any(), pts.into_any()])
}

/// Registers `VideoFile` in the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VideoFile>()
}
