//! [`LeRobotSteps`]: the steps of a LeRobot dataset read in place (issue #54): a sample is one
//! step (a row of the data Parquet files): its numeric columns and, for each camera asked for,
//! the frame at the step's timestamp, decoded from the episode's video file; with
//! `delta_timestamps`, windows of steps around it (clamped to the episode, with a
//! `<key>_is_pad` mask), as LeRobot's `LeRobotDataset(delta_timestamps=...)` gives.
//!
//! - The tables (`stokehold_ingest::lerobot`) are read at open into memory; each video file of
//!   an asked camera is indexed at open (its `moov` box: `stokehold_ingest::mp4`, no decoding),
//!   its index kept on node-local disk and reused at later opens while the file is unchanged
//!   (its size and modification time: [`super::kept_videos`]); a camera not asked for is never
//!   opened.
//! - **Which frame**: the frame whose presentation time is nearest the query time (the step's
//!   `timestamp` plus the episode's `from_timestamp` in its file), within `tolerance_s` (1e-4 s
//!   as LeRobot's default), else the sample's error naming the file and time: LeRobot's
//!   decoders pick the nearest frame and check the same tolerance.
//! - Decoding reads only the packets from the keyframe before the first wanted frame to the
//!   last, from the file in place (`pread`), on the worker's thread with a decoder kept per
//!   thread. Frames are uint8 `[3, H, W]` (LeRobot gives float32 in [0, 1]: divide by 255).
//! - Nothing here is random: a step's sample is a function of its id alone, so batches are the
//!   same whatever the thread count. Figures per camera (`video:<key>` in the loader's caches:
//!   `misses` = frames decoded, `entries` = video files, `hits` = those whose kept index was
//!   used, not made again at this open) show what was decoded and indexed.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use stokehold_format::DType;
use stokehold_ingest::frames::ContainerLimits;
use stokehold_ingest::lerobot::LeRobot;
use stokehold_ingest::mp4::{FrameIndex, index_file};
use stokehold_video::{ClipDecoder, IndexedVideo};

use crate::cache::CacheStats;
use crate::error::{EngineError, RecordPlace, Result, StageError};
use crate::samples::{Cache, Layout, Samples, SlotWriter, TaskCtx, TaskIo};
use crate::stages::Output;

/// The stages the statistics report: copying a step's columns, decoding its frames.
const STAGE_COLUMNS: &str = "columns";
const STAGE_DECODE: &str = "decode";

thread_local! {
    /// This worker thread's decoder (kept between steps of one codec configuration).
    static DECODER: RefCell<ClipDecoder> = RefCell::new(ClipDecoder::new());
}

/// What a LeRobot loader reads: the dataset's folder, the features to load, the windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeRobotOptions {
    /// The dataset's folder (holding `meta/info.json`).
    pub root: PathBuf,
    /// The features in the batch (columns of the data files and cameras); None: all.
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    /// Feature → offsets in seconds from the sampled step (`[-0.2, 0.0]`), as LeRobot's
    /// `delta_timestamps`: each a multiple of 1 / fps within `tolerance_s`.
    #[serde(default)]
    pub delta_timestamps: BTreeMap<String, Vec<f64>>,
    /// The largest distance between a query time and the frame chosen (seconds).
    #[serde(default = "default_tolerance")]
    pub tolerance_s: f64,
}

fn default_tolerance() -> f64 {
    1e-4
}

/// One camera's video files (those of its episodes), indexed at open.
#[derive(Debug)]
struct Camera {
    key: String,
    /// The files, each with its frame index, its frames' times and the open file.
    videos: Vec<Video>,
    /// Per episode: (its file in `videos`, its start in that file in seconds).
    episodes: Vec<(usize, f64)>,
    /// Frames (width, height), the same for every file.
    size: (usize, usize),
    /// Frames decoded so far.
    decoded: AtomicU64,
    /// Files whose kept index was used at open (the others were indexed).
    kept: u64,
}

#[derive(Debug)]
struct Video {
    video: IndexedVideo,
    /// Presentation times (seconds), presentation order.
    pts: Vec<f64>,
    /// The file, opened for each read (a LeRobot v2 dataset has a file per episode and camera:
    /// hundreds of thousands for the largest, more than a process may hold open).
    path: PathBuf,
}

/// What an output column is.
#[derive(Debug, Clone)]
enum Item {
    /// A numeric column of the steps (its index), at the step or at these step offsets.
    Column(usize, Option<Vec<i64>>),
    /// A camera (its index), at the step or at these step offsets.
    Camera(usize, Option<Vec<i64>>),
    /// The padding mask of a window of these step offsets.
    Pad(Vec<i64>),
}

/// The steps of a LeRobot dataset as samples.
#[derive(Debug)]
pub struct LeRobotSteps {
    data: LeRobot,
    items: Vec<Item>,
    outputs: Vec<(String, Output)>,
    cameras: Arc<Cameras>,
    fingerprint: String,
    /// The largest distance from a query time to its frame, in seconds.
    tolerance: f64,
}

/// The cameras asked for, and their figures.
#[derive(Debug)]
struct Cameras(Vec<Camera>);

impl Cache for Cameras {
    fn stats(&self) -> Vec<CacheStats> {
        self.0
            .iter()
            .map(|c| CacheStats {
                kind: format!("video:{}", c.key),
                hits: c.kept,
                misses: c.decoded.load(Ordering::Relaxed),
                bytes: 0,
                budget: 0,
                entries: c.videos.len() as u64,
                saved: std::time::Duration::ZERO,
                shared: 0,
            })
            .collect()
    }

    fn under_node_budget(&self, _: &Arc<crate::cache::NodeShare>) {}
}

fn config(m: impl Into<String>) -> EngineError {
    EngineError::Config(m.into())
}

impl LeRobotSteps {
    /// Opens the dataset of `options`: its tables, and the video files of the cameras asked for
    /// (each indexed from its `moov` box).
    pub fn open(options: &LeRobotOptions) -> Result<LeRobotSteps> {
        let data = LeRobot::open(&options.root).map_err(|e| config(e.to_string()))?;
        let all: Vec<&str> = data
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .chain(data.video_keys.iter().map(String::as_str))
            .collect();
        let wanted: Vec<&str> = match &options.fields {
            None => all.clone(),
            Some(f) => {
                if let Some(bad) = f.iter().find(|n| !all.contains(&n.as_str())) {
                    return Err(config(format!(
                        "fields= names {bad:?}, which the LeRobot dataset {} does not have \
                         (it has {})",
                        options.root.display(),
                        all.join(", ")
                    )));
                }
                all.iter()
                    .copied()
                    .filter(|n| f.iter().any(|x| x == n))
                    .collect()
            }
        };
        if wanted.is_empty() {
            return Err(config("fields= names no field"));
        }
        if !(options.tolerance_s.is_finite() && options.tolerance_s >= 0.0) {
            return Err(config("tolerance_s must be a number >= 0"));
        }
        let mut deltas: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
        for (key, ds) in &options.delta_timestamps {
            if !wanted.contains(&key.as_str()) {
                return Err(config(format!(
                    "delta_timestamps names {key:?}, which is not loaded (fields: {})",
                    wanted.join(", ")
                )));
            }
            if ds.is_empty() {
                return Err(config(format!("delta_timestamps[{key:?}] is empty")));
            }
            let mut steps = Vec::with_capacity(ds.len());
            for &d in ds {
                let k = (d * data.fps).round();
                if !d.is_finite() || (k / data.fps - d).abs() > options.tolerance_s {
                    return Err(config(format!(
                        "delta_timestamps[{key:?}]: {d} s is not a multiple of 1/{} s (the \
                         dataset's fps) within tolerance_s={}",
                        data.fps, options.tolerance_s
                    )));
                }
                steps.push(k as i64);
            }
            deltas.insert(key, steps);
        }
        let mut items = Vec::new();
        let mut outputs = Vec::new();
        let mut cameras = Vec::new();
        for name in &wanted {
            let window = deltas.get(name).cloned();
            let n = window.as_ref().map(Vec::len);
            if let Some(c) = data.columns.iter().position(|c| c.name == *name) {
                let col = &data.columns[c];
                let mut shape: Vec<usize> = n.into_iter().collect();
                if !col.scalar {
                    shape.push(col.width);
                }
                items.push(Item::Column(c, window.clone()));
                outputs.push((
                    name.to_string(),
                    Output::Fixed {
                        dtype: col.dtype,
                        shape,
                    },
                ));
            } else {
                let camera = open_camera(&data, name)?;
                let (w, h) = camera.size;
                let mut shape: Vec<usize> = n.into_iter().collect();
                shape.extend([3, h, w]);
                items.push(Item::Camera(cameras.len(), window.clone()));
                outputs.push((
                    name.to_string(),
                    Output::Fixed {
                        dtype: DType::U8,
                        shape,
                    },
                ));
                cameras.push(camera);
            }
            if let Some(w) = window {
                outputs.push((
                    format!("{name}_is_pad"),
                    Output::Fixed {
                        dtype: DType::U8,
                        shape: vec![w.len()],
                    },
                ));
                items.push(Item::Pad(w));
            }
        }
        let fingerprint = format!(
            "lerobot:{}:{}:{}:{:?}",
            options.root.display(),
            data.version,
            data.len(),
            wanted
        );
        Ok(LeRobotSteps {
            data,
            items,
            outputs,
            cameras: Arc::new(Cameras(cameras)),
            fingerprint,
            tolerance: options.tolerance_s,
        })
    }

    /// The step at offset `d` from step `i` in its episode, clamped to the episode's steps, and
    /// whether it was outside (padding).
    fn at(&self, i: usize, d: i64) -> (usize, bool) {
        let e = &self.data.episodes[self.data.step_episode[i] as usize];
        let q = i as i64 + d;
        let pad = q < e.from as i64 || q >= e.to as i64;
        (q.clamp(e.from as i64, e.to as i64 - 1) as usize, pad)
    }

    fn fill_camera<'a>(
        &self,
        cam: &'a Camera,
        i: usize,
        steps: &[usize],
        slot: &mut [u8],
    ) -> std::result::Result<u64, CameraError<'a>> {
        let (v, offset) = cam.episodes[self.data.step_episode[i] as usize];
        let video = &cam.videos[v];
        let mut frames = Vec::with_capacity(steps.len());
        for &q in steps {
            let t = offset + self.data.timestamps[q];
            frames.push(nearest(&video.pts, t, self.tolerance()).map_err(|near| {
                CameraError::NoFrame {
                    video: video.video.name(),
                    tolerance: self.tolerance(),
                    t,
                    step: q,
                    timestamp: self.data.timestamps[q],
                    offset,
                    near,
                }
            })?);
        }
        let file = File::open(&video.path).map_err(|error| CameraError::Open {
            video: video.video.name(),
            error,
        })?;
        let got = DECODER.with(|d| {
            let mut d = d.try_borrow_mut().map_err(|_| CameraError::InUse)?;
            d.frames_at_file(&video.video, &file, &frames, 1)
                .map_err(CameraError::Decode)
        })?;
        cam.decoded
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        let (h, w) = (got.height, got.width);
        if (w, h) != cam.size || slot.len() != frames.len() * 3 * h * w {
            return Err(CameraError::Size {
                video: video.video.name(),
                width: w,
                height: h,
                first: cam.size,
            });
        }
        crate::stages::video::channels_first_into(&got, slot);
        Ok(got.packet_bytes)
    }

    fn tolerance(&self) -> f64 {
        self.tolerance
    }
}

/// Why a camera's frames for a step cannot be given ([`LeRobotSteps::fill_camera`]).
#[derive(Debug, thiserror::Error)]
enum CameraError<'a> {
    /// No frame of the video is near enough a step's time.
    #[error(
        "{video}: no frame within {tolerance} s of {t} s (step {step}, timestamp {timestamp} s + \
         the episode's start {offset} s): the nearest is at {near} s"
    )]
    NoFrame {
        /// The video's name.
        video: &'a str,
        /// The tolerance, in seconds.
        tolerance: f64,
        /// The time sought in the video.
        t: f64,
        /// The step.
        step: usize,
        /// The step's timestamp.
        timestamp: f64,
        /// The episode's start in the video.
        offset: f64,
        /// The nearest frame's time.
        near: f64,
    },
    /// The file could not be opened (it was there when the dataset was opened).
    #[error("{video}: {error}")]
    Open {
        /// The video's name.
        video: &'a str,
        /// Why.
        error: std::io::Error,
    },
    /// This thread's decoder is already borrowed.
    #[error("video decoder in use (re-entrant call)")]
    InUse,
    /// The frames could not be decoded.
    #[error(transparent)]
    Decode(stokehold_video::VideoError),
    /// Frames of another size than the camera's first file's.
    #[error(
        "{video}: frames of {width}x{height}, the camera's first file has {}x{}",
        first.0,
        first.1
    )]
    Size {
        /// The video's name.
        video: &'a str,
        /// The frames' width.
        width: usize,
        /// Their height.
        height: usize,
        /// The camera's first file's (width, height).
        first: (usize, usize),
    },
}

/// The frame (presentation order) nearest `t` within `tol`; Err: the nearest frame's time.
fn nearest(pts: &[f64], t: f64, tol: f64) -> std::result::Result<usize, f64> {
    let k = pts.partition_point(|&p| p < t);
    let best = [k.checked_sub(1), (k < pts.len()).then_some(k)]
        .into_iter()
        .flatten()
        .min_by(|&a, &b| (pts[a] - t).abs().total_cmp(&(pts[b] - t).abs()))
        .ok_or(f64::NAN)?;
    if (pts[best] - t).abs() <= tol {
        Ok(best)
    } else {
        Err(pts[best])
    }
}

/// The frame index of the MP4 file `path` (named `name` in errors): the one kept for it while it
/// is unchanged (true), else made from its `moov` box and kept (false).
fn video_index(path: &std::path::Path, name: &str) -> Result<(FrameIndex, bool)> {
    let kept = super::kept_videos::dir().zip(super::kept_videos::VideoKey::of(path));
    if let Some((dir, key)) = &kept
        && let Some(index) = super::kept_videos::load(dir, key)
    {
        return Ok((index, true));
    }
    let index = index_file(path, &ContainerLimits::default())
        .map_err(|e| config(format!("{name}: {e}")))?;
    if let Some((dir, key)) = &kept {
        super::kept_videos::store(dir, key, &index);
    }
    Ok((index, false))
}

/// Index every video file of camera `key` (each once, however many episodes it holds; each
/// index kept and reused while its file is unchanged).
fn open_camera(data: &LeRobot, key: &str) -> Result<Camera> {
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut episodes = Vec::with_capacity(data.episodes.len());
    for e in &data.episodes {
        let (path, from) = e
            .videos
            .get(key)
            .ok_or_else(|| config(format!("episode {} has no video for {key:?}", e.index)))?;
        let k = match paths.iter().position(|p| p == path) {
            Some(k) => k,
            None => {
                paths.push(path.clone());
                paths.len() - 1
            }
        };
        episodes.push((k, *from));
    }
    let mut videos = Vec::with_capacity(paths.len());
    let mut size = None;
    let mut kept = 0;
    for path in &paths {
        let name = path.display().to_string();
        if !path.is_file() {
            return Err(config(format!(
                "{name}: the video file of camera {key:?} is missing"
            )));
        }
        let (index, was_kept) = video_index(path, &name)?;
        kept += u64::from(was_kept);
        let video = IndexedVideo::new(name.clone(), index).map_err(|e| config(e.to_string()))?;
        let (w, h) = (
            usize::from(video.index().width),
            usize::from(video.index().height),
        );
        match size {
            None => size = Some((w, h)),
            Some(s) if s != (w, h) => {
                return Err(config(format!(
                    "{name}: frames of {w}x{h}, camera {key:?}'s other files {}x{}",
                    s.0, s.1
                )));
            }
            _ => {}
        }
        let pts = video.pts_seconds();
        videos.push(Video {
            video,
            pts,
            path: path.clone(),
        });
    }
    Ok(Camera {
        key: key.to_string(),
        videos,
        episodes,
        size: size.unwrap_or((0, 0)),
        decoded: AtomicU64::new(0),
        kept,
    })
}

impl Samples for LeRobotSteps {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }

    fn layout(&self) -> Layout {
        Layout {
            mean_bytes: 4096,
            blocks: None,
            whole_batch_tasks: false,
            stage_names: {
                // the columns' copies, then each camera's decoding (no bytes read through the fetcher)
                vec![STAGE_COLUMNS.to_string(), STAGE_DECODE.to_string()]
            },
            fingerprint: self.fingerprint.clone(),
        }
    }

    fn columns(&self) -> &[(String, Output)] {
        &self.outputs
    }

    fn fill(
        &self,
        id: u64,
        _k: usize,
        _io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let i = id as usize;
        if i >= self.data.len() {
            return Err(EngineError::Worker(format!(
                "step {id} asked for: the dataset has {} steps",
                self.data.len()
            )));
        }
        let fail = |column: &str, m: String| EngineError::Transform {
            id,
            at: Box::new(RecordPlace {
                shard: self.data.root.clone(),
                record: id,
                bytes: 0..0,
            }),
            stage: "decode".into(),
            column: column.to_string(),
            source: StageError::from(m),
        };
        let mut clock = cx.ws.clock();
        let mut packets = 0u64;
        for (c, item) in self.items.iter().enumerate() {
            let slot = out.fixed(c);
            let window: Vec<(usize, bool)> = match item {
                Item::Column(_, w) | Item::Camera(_, w) => match w {
                    None => vec![(i, false)],
                    Some(ds) => ds.iter().map(|&d| self.at(i, d)).collect(),
                },
                Item::Pad(ds) => {
                    for (s, &d) in slot.iter_mut().zip(ds) {
                        *s = u8::from(self.at(i, d).1);
                    }
                    continue;
                }
            };
            match item {
                Item::Column(k, _) => {
                    let col = &self.data.columns[*k];
                    let n = col.width * col.dtype.size();
                    for (dst, &(q, _)) in slot.chunks_exact_mut(n).zip(&window) {
                        dst.copy_from_slice(col.row(q));
                    }
                    cx.ws.lap(0, id, &mut clock);
                }
                Item::Camera(k, _) => {
                    let cam = &self.cameras.0[*k];
                    let steps: Vec<usize> = window.iter().map(|&(q, _)| q).collect();
                    let read = self
                        .fill_camera(cam, i, &steps, slot)
                        .map_err(|e| fail(&cam.key, e.to_string()))?;
                    packets += read;
                    cx.ws.lap(1, id, &mut clock);
                }
                Item::Pad(_) => unreachable!("handled above"),
            }
        }
        // the packets read from the video files are the step's bytes read (one record)
        cx.ws.read(packets as usize);
        Ok(())
    }

    fn caches(&self) -> Vec<Arc<dyn Cache>> {
        vec![Arc::clone(&self.cameras) as Arc<dyn Cache>]
    }

    fn describe(&self, id: u64, _read: bool) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        if let Some(&e) = self.data.step_episode.get(id as usize) {
            let e = &self.data.episodes[e as usize];
            m.insert("episode".into(), e.index.into());
            m.insert("frame".into(), (id as usize - e.from).into());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_frame_within_the_tolerance_is_chosen() {
        let pts: Vec<f64> = (0..10).map(|i| f64::from(i) / 10.0).collect();
        // float32 timestamps lie a little on either side of the frames' times
        assert_eq!(nearest(&pts, f64::from(0.7f32), 1e-4), Ok(7));
        assert_eq!(nearest(&pts, f64::from(0.3f32), 1e-4), Ok(3));
        assert_eq!(nearest(&pts, 0.0, 1e-4), Ok(0));
        assert_eq!(nearest(&pts, 0.9, 0.0), Ok(9));
        // between two frames, beyond the tolerance: the nearest one's time is told
        assert_eq!(nearest(&pts, 0.46, 1e-4), Err(0.5));
        assert_eq!(nearest(&pts, 1.5, 1e-4), Err(0.9));
        assert_eq!(nearest(&pts, -0.2, 1e-4), Err(0.0));
        assert!(nearest(&[], 0.0, 1.0).is_err());
    }
}
