//! The `clip` stage: frame-exact clips of a `video` field (issue #54), decoded on the loader's
//! threads and fused with the image stages that follow it (`resize`, `center_crop`,
//! `random_resized_crop`, `random_horizontal_flip`, `color_jitter`, `grayscale`, `normalize`,
//! `to_tensor`), one crop and one flip for all the frames of a clip.
//!
//! Spec: `[{"name": "clip", "params": {"frames": 16, "stride": 2}}, {"name": "resize", ...}, ...]`.
//! - The clip's timestamps are [`stokehold_video::Clip::timestamps`] of (seed, sample): the
//!   generator is `mix(seed, epoch)` and the sample id, so a clip is the same whatever the
//!   thread count and changes from one epoch to the next.
//! - The video value's frame index (format.md, `video`) says which packets to decode: from the
//!   keyframe before the first wanted frame to the last one; only the wanted frames are
//!   converted to RGB, then resized / cropped into the slot.
//! - Output: with a fixed size, `[T, C, H, W]` (or `[T, H, W, C]` with `layout="HWC"`) of
//!   uint8, float32 or float16; with no spatial stage, a list column of uint8 `[T, 3, H, W]`
//!   arrays, the frames as decoded (what torchcodec's `get_frames_played_at` gives).
//! - A companion column `<field>_timestamps`, float64 `[T]`: the frames' presentation times in
//!   seconds ([`timestamps_column`]).

use std::cell::RefCell;
use std::sync::Arc;

use stokehold_format::video::Intervals;
use stokehold_format::{DType, FieldValue};
use stokehold_ingest::mp4::FrameIndex;
use stokehold_ops::{ImageOps, PixelsRef, run_pixels};
use stokehold_video::{Clip, ClipDecoder, DecodedFrames, IndexedVideo, Start, Step};

use crate::error::{EngineError, Result};
use crate::stages::image::{Draws, out_dtype, plan_ops, with_workspace};
use crate::stages::stage_spec::{Stage, TransformSpec};
use crate::stages::{Column, Output, SampleCtx, StageError, StageResult, Transform, Value, tensor};

/// The stage's name in specs.
pub const CLIP: &str = "clip";
/// The suffix of the timestamps column's name.
pub const TIMESTAMPS_SUFFIX: &str = "_timestamps";

thread_local! {
    /// This worker thread's decoder (kept between samples of one codec configuration).
    static DECODER: RefCell<ClipDecoder> = RefCell::new(ClipDecoder::new());
}

fn bad(column: &str, m: impl std::fmt::Display) -> EngineError {
    EngineError::Config(format!("column {column:?}: clip: {m}"))
}

/// The clip rule of a chain whose first stage is `clip`, and the field whose video draws its
/// timestamps when it is synced to another field (`clock`; None: its own).
fn clip_rule(column: &str, spec: &TransformSpec) -> Result<(Clip, Option<String>)> {
    let p = match spec.stage() {
        Some(Ok(Stage::Clip(p))) => p,
        Some(Err(e)) => return Err(bad(column, e)),
        _ => return Err(bad(column, "not a clip stage")),
    };
    let step = match (p.stride, p.fps) {
        (Some(_), Some(_)) => return Err(bad(column, "give stride or fps, not both")),
        (_, Some(f)) => Step::Fps(f),
        (s, None) => Step::Stride(s.unwrap_or(1)),
    };
    let start = match (p.start.as_str(), p.clips) {
        ("random", 1) => Start::Random,
        ("uniform", 1) => Start::Uniform(1),
        ("random" | "uniform" | "all", n) => {
            return Err(bad(
                column,
                format!(
                    "a loader takes one clip per sample (start=\"random\" or \"uniform\" with \
                     clips=1), got start={:?}, clips={n}",
                    p.start
                ),
            ));
        }
        (other, _) => {
            return Err(bad(
                column,
                format!("start must be \"random\" or \"uniform\", got {other:?}"),
            ));
        }
    };
    let clip = Clip::new(p.frames, step, start).map_err(|e| bad(column, e))?;
    Ok((clip, p.clock.filter(|c| c != column)))
}

/// The clip parameters of a field's chain when it starts with `clip` (for the checks across
/// fields of [`check_clocks`]).
fn clip_params(specs: &[TransformSpec]) -> Option<crate::stages::stage_spec::ClipParams> {
    match specs.first()?.stage()? {
        Ok(Stage::Clip(p)) => Some(p),
        _ => None,
    }
}

/// Clips synced to a clock field (`Clip(..., sync=True)` on several fields): the clock must be a
/// field with a clip of the same rule (frames, stride or fps, start), so every synced field's
/// frames are those played at the clock's timestamps.
pub fn check_clocks(specs: &std::collections::BTreeMap<String, Vec<TransformSpec>>) -> Result<()> {
    for (field, s) in specs {
        let Some(p) = clip_params(s) else { continue };
        let Some(clock) = p.clock.as_ref().filter(|c| *c != field) else {
            continue;
        };
        let Some(c) = specs.get(clock).and_then(|s| clip_params(s)) else {
            return Err(bad(
                field,
                format!(
                    "synced to field {clock:?}, which has no clip: the clock field needs a clip of \
                     the same rule"
                ),
            ));
        };
        let rule = |p: &crate::stages::stage_spec::ClipParams| {
            (
                p.frames,
                p.stride,
                p.fps.map(f64::to_bits),
                p.start.clone(),
                p.clips,
            )
        };
        if rule(&c) != rule(&p) {
            return Err(bad(
                field,
                format!(
                    "synced to field {clock:?}, whose clip has another rule: synced clips take \
                     the same frames, stride or fps, and start"
                ),
            ));
        }
        if c.clock.as_ref().is_some_and(|cc| cc != clock) {
            return Err(bad(
                field,
                format!("synced to field {clock:?}, which is itself synced to another field"),
            ));
        }
    }
    Ok(())
}

/// Plan a column whose chain starts with `clip`; None when it has no `clip` stage.
pub fn plan(column: &str, specs: &[TransformSpec]) -> Option<Result<(Arc<dyn Transform>, Output)>> {
    if !specs.iter().any(|s| s.name == CLIP) {
        return None;
    }
    Some(plan_clip(column, specs))
}

fn plan_clip(column: &str, specs: &[TransformSpec]) -> Result<(Arc<dyn Transform>, Output)> {
    let (first, rest) = specs.split_first().expect("a clip stage is there");
    if first.name != CLIP || rest.iter().any(|s| s.name == CLIP) {
        return Err(bad(
            column,
            "must be the first stage of its column, and the only clip",
        ));
    }
    let (clip, clock) = clip_rule(column, first)?;
    let t = clip.frames as usize;
    if rest.is_empty() {
        let stage = ClipStage {
            clip,
            clock,
            ops: None,
        };
        return Ok((Arc::new(stage), Output::List));
    }
    if let Some(s) = rest
        .iter()
        .find(|s| !crate::stages::image::is_image_stage(&s.name))
    {
        return Err(bad(
            column,
            format!(
                "{:?} cannot follow a clip (image stages can: {})",
                s.name,
                crate::stages::image::STAGES.join(", ")
            ),
        ));
    }
    let ops = plan_ops(column, rest)?;
    let mut shape = vec![t];
    shape.extend(ops.shape());
    let output = Output::Fixed {
        dtype: out_dtype(&ops),
        shape,
    };
    Ok((
        Arc::new(ClipStage {
            clip,
            clock,
            ops: Some(ops),
        }),
        output,
    ))
}

/// The `<field>_timestamps` column of a field whose chain is a clip: float64 `[T]`, the
/// presentation times of the clip's frames. None when the chain is not a clip's.
pub fn timestamps_column(field: &str, specs: &[TransformSpec]) -> Result<Option<Column>> {
    match specs.first() {
        Some(s) if s.name == CLIP => {
            let (clip, clock) = clip_rule(field, s)?;
            let stage = Arc::new(TimestampsStage { clip, clock });
            let mut c = Column::fixed(field, vec![stage], DType::F64, vec![clip.frames as usize]);
            c.name = format!("{field}{TIMESTAMPS_SUFFIX}");
            Ok(Some(c))
        }
        _ => Ok(None),
    }
}

/// The clip's seed for an epoch: the same for the frames' column and the timestamps' column.
fn clip_seed(seed: u64, epoch: u64) -> u64 {
    // SplitMix64's finaliser of both (no two epochs alike)
    let mut z = seed ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A sample's video: its index and container bytes, and the frames (presentation order) of its
/// clip.
struct Planned<'a> {
    video: IndexedVideo,
    container: &'a [u8],
    frames: Vec<usize>,
    /// The video's keyframe intervals (index version 2), None: a version-1 index.
    intervals: Option<Intervals>,
}

impl Planned<'_> {
    /// The container's byte ranges decoding the clip reads.
    fn packet_ranges(&self) -> Vec<(u64, u64)> {
        self.video.packet_ranges(&self.frames)
    }
}

/// A video value's index and container bytes, its name for errors.
fn indexed(bytes: &[u8], name: String) -> StageResult<(IndexedVideo, &[u8], Option<Intervals>)> {
    let v = stokehold_format::video::parse_video(bytes)
        .map_err(|e| StageError::from(format!("{name}: the video value: {e}")))?;
    let video = IndexedVideo::new(name, FrameIndex::from_video_index(v.index))
        .map_err(|e| StageError::from(e.to_string()))?;
    Ok((video, v.container, v.intervals))
}

/// The video bytes of a value.
fn video_bytes<'a>(x: &'a Value<'_>) -> StageResult<&'a [u8]> {
    match x {
        FieldValue::Bytes(b) => Ok(b),
        other => Err(format!("expected a video value, got a {}", other.kind()).into()),
    }
}

/// Plans sample `ctx.id`'s clip of the video `x`. With a `clock` field, the timestamps are drawn
/// from the clock's video (`ctx.other`, its value in the same record) and this video's frames
/// are those played at them: clips aligned in time across a sample's cameras, whatever their
/// frame rates.
fn plan_sample<'a>(
    clip: &Clip,
    clock: Option<&str>,
    x: &'a [u8],
    ctx: &SampleCtx<'_>,
) -> StageResult<Planned<'a>> {
    let (video, container, intervals) = indexed(x, format!("the video of sample {}", ctx.id))?;
    let stamps = match clock {
        None => clip_stamps(clip, &video, ctx)?,
        Some(field) => {
            let bytes = ctx.other.ok_or_else(|| {
                StageError::from(format!("the clock field {field:?}'s value was not given"))
            })?;
            let name = format!(
                "the video of field {field:?} of sample {} (the clock)",
                ctx.id
            );
            let (clock_video, _, _) = indexed(bytes, name)?;
            clip_stamps(clip, &clock_video, ctx)?
        }
    };
    let frames = stamps
        .iter()
        .map(|&s| video.frame_played_at(s))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| StageError::from(e.to_string()))?;
    Ok(Planned {
        video,
        container,
        frames,
        intervals,
    })
}

/// The timestamps of sample `ctx.id`'s one clip of `video`, from (mix(seed, epoch), id).
fn clip_stamps(clip: &Clip, video: &IndexedVideo, ctx: &SampleCtx<'_>) -> StageResult<Vec<f64>> {
    let stamps = clip
        .timestamps(
            &video.pts_seconds(),
            video.end_seconds(),
            clip_seed(ctx.seed, ctx.epoch),
            ctx.id,
        )
        .map_err(|e| StageError::from(format!("{}: {e}", video.name())))?;
    stamps
        .into_iter()
        .next()
        .ok_or_else(|| StageError::from("the clip rule gave no clip".to_string()))
}

fn decode(p: &Planned<'_>) -> StageResult<DecodedFrames> {
    DECODER.with(|d| {
        let mut d = d
            .try_borrow_mut()
            .map_err(|_| StageError::from("video decoder in use (re-entrant call)".to_string()))?;
        // with interval checksums, only the packets of the keyframe intervals the clip needs
        // (all a record read in part has): past them the decoder is drained, same frames
        let within = p
            .intervals
            .as_ref()
            .map(|iv| iv.frames_of(&iv.covering(&p.packet_ranges())));
        d.frames_at(&p.video, p.container, &p.frames, 1, within.as_deref())
            .map_err(|e| StageError::from(e.to_string()))
    })
}

/// The clip stage: decode the clip's frames, then each through the image pipeline (one crop
/// and one flip for the clip: every frame draws from a copy of the same generator).
#[derive(Debug)]
pub struct ClipStage {
    clip: Clip,
    /// The field whose video draws the timestamps (a synced clip), None: this field's own.
    clock: Option<String>,
    /// The spatial pipeline; None: the frames as decoded, `[T, 3, H, W]` uint8.
    ops: Option<ImageOps>,
}

impl ClipStage {
    fn frames_into(
        &self,
        ops: &ImageOps,
        got: &DecodedFrames,
        ctx: &mut SampleCtx<'_>,
        slot: &mut [u8],
    ) -> StageResult<()> {
        let per = ops.slot_bytes();
        if slot.len() != per * got.count {
            return Err(format!(
                "the output slot takes {} bytes, {} frames make {}",
                slot.len(),
                got.count,
                per * got.count
            )
            .into());
        }
        let frame_bytes = got.width * got.height * 3;
        let start = ctx.rng.clone();
        for (k, out) in slot.chunks_exact_mut(per).enumerate() {
            let px = PixelsRef {
                width: got.width as u32,
                height: got.height as u32,
                channels: 3,
                data: &got.data[k * frame_bytes..(k + 1) * frame_bytes],
            };
            let mut rng = start.clone();
            with_workspace(|ws| {
                run_pixels(ops, px, &mut Draws(&mut rng), ws, out).map_err(StageError::from)
            })?;
        }
        Ok(())
    }
}

/// `[T, H, W, 3]` frames as `[T, 3, H, W]`.
fn channels_first(got: &DecodedFrames) -> Vec<u8> {
    let mut out = vec![0u8; got.data.len()];
    channels_first_into(got, &mut out);
    out
}

/// `[T, H, W, 3]` frames written as `[T, 3, H, W]` into `out` (of their size).
pub(crate) fn channels_first_into(got: &DecodedFrames, out: &mut [u8]) {
    let plane = got.height * got.width;
    for (src, dst) in got
        .data
        .chunks_exact(plane * 3)
        .zip(out.chunks_exact_mut(plane * 3))
    {
        for (i, px) in src.chunks_exact(3).enumerate() {
            dst[i] = px[0];
            dst[plane + i] = px[1];
            dst[2 * plane + i] = px[2];
        }
    }
}

impl Transform for ClipStage {
    fn name(&self) -> &str {
        if self.ops.is_some() {
            "clip+decode+crop+resize"
        } else {
            "clip+decode"
        }
    }

    fn reads_field(&self) -> Option<&str> {
        self.clock.as_deref()
    }

    fn reads_packets_only(&self) -> bool {
        true
    }

    /// The packets decoding the clip reads: from the keyframe each frame needs to the frame.
    fn packet_ranges(&self, x: &[u8], ctx: &mut SampleCtx<'_>) -> StageResult<Vec<(u64, u64)>> {
        Ok(plan_sample(&self.clip, self.clock.as_deref(), x, ctx)?.packet_ranges())
    }

    fn apply<'a>(&self, x: Value<'a>, ctx: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        let p = plan_sample(&self.clip, self.clock.as_deref(), video_bytes(&x)?, ctx)?;
        let got = decode(&p)?;
        match &self.ops {
            None => {
                let shape = vec![got.count as u64, 3, got.height as u64, got.width as u64];
                Ok(tensor(DType::U8, shape, channels_first(&got)))
            }
            Some(ops) => {
                let mut out = vec![0u8; ops.slot_bytes() * got.count];
                self.frames_into(ops, &got, ctx, &mut out)?;
                let mut shape = vec![got.count as u64];
                shape.extend(ops.shape().iter().map(|&d| d as u64));
                Ok(tensor(out_dtype(ops), shape, out))
            }
        }
    }

    fn apply_into(
        &self,
        x: Value<'_>,
        ctx: &mut SampleCtx<'_>,
        slot: &mut [u8],
    ) -> StageResult<()> {
        let Some(ops) = &self.ops else {
            let v = self.apply(x, ctx)?;
            return crate::stages::write_value(&v, slot);
        };
        let p = plan_sample(&self.clip, self.clock.as_deref(), video_bytes(&x)?, ctx)?;
        let got = decode(&p)?;
        self.frames_into(ops, &got, ctx, slot)
    }
}

/// The timestamps of a clip: the presentation times (seconds) of its frames, float64 `[T]`.
#[derive(Debug)]
pub struct TimestampsStage {
    clip: Clip,
    /// As [`ClipStage`]'s.
    clock: Option<String>,
}

impl Transform for TimestampsStage {
    fn name(&self) -> &str {
        "clip-timestamps"
    }

    fn reads_field(&self) -> Option<&str> {
        self.clock.as_deref()
    }

    fn reads_packets_only(&self) -> bool {
        true
    }

    /// The timestamps come from the index alone: no packets.
    fn packet_ranges(&self, _: &[u8], _: &mut SampleCtx<'_>) -> StageResult<Vec<(u64, u64)>> {
        Ok(Vec::new())
    }

    fn apply<'a>(&self, x: Value<'a>, ctx: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        let p = plan_sample(&self.clip, self.clock.as_deref(), video_bytes(&x)?, ctx)?;
        let times = p.video.pts_seconds();
        let data: Vec<u8> = p
            .frames
            .iter()
            .flat_map(|&f| times[f].to_le_bytes())
            .collect();
        Ok(tensor(DType::F64, vec![p.frames.len() as u64], data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: serde_json::Value) -> Vec<TransformSpec> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_clip_chain_is_planned_with_its_shape_and_checked() {
        let (t, out) = plan(
            "video",
            &spec(serde_json::json!([
                {"name": "clip", "params": {"frames": 8, "stride": 2}},
                {"name": "resize", "params": {"size": 32}},
                {"name": "center_crop", "params": {"size": 24}},
                {"name": "normalize", "params": {"mean": [0.5], "std": [0.5]}}
            ])),
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.name(), "clip+decode+crop+resize");
        assert_eq!(
            out,
            Output::Fixed {
                dtype: DType::F32,
                shape: vec![8, 3, 24, 24]
            }
        );
        let (_, out) = plan("video", &spec(serde_json::json!([{"name": "clip"}])))
            .unwrap()
            .unwrap();
        assert_eq!(out, Output::List);
        let refused = |v| match plan("video", &spec(v)).unwrap() {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted"),
        };
        let e = refused(serde_json::json!([{"name": "clip", "params": {"stride": 2, "fps": 4}}]));
        assert!(e.contains("not both"), "{e}");
        let e = refused(serde_json::json!([{"name": "clip", "params": {"start": "all"}}]));
        assert!(e.contains("one clip per sample"), "{e}");
        let e = refused(serde_json::json!([
            {"name": "resize", "params": {"size": 32}}, {"name": "clip"}
        ]));
        assert!(e.contains("first stage"), "{e}");
        let e = refused(serde_json::json!([{"name": "clip", "params": {"frames": 0}}]));
        assert!(e.contains("frames must be at least 1"), "{e}");
        let ts = timestamps_column(
            "video",
            &spec(serde_json::json!([{"name": "clip", "params": {"frames": 4}}])),
        )
        .unwrap()
        .unwrap();
        assert_eq!(ts.name, "video_timestamps");
        assert_eq!(ts.field, "video");
        assert_eq!(
            ts.output,
            Output::Fixed {
                dtype: DType::F64,
                shape: vec![4]
            }
        );
    }

    #[test]
    fn the_clip_seed_changes_with_the_epoch_and_not_otherwise() {
        assert_eq!(clip_seed(7, 3), clip_seed(7, 3));
        assert_ne!(clip_seed(7, 3), clip_seed(7, 4));
        assert_ne!(clip_seed(7, 3), clip_seed(8, 3));
    }
}
