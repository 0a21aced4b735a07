//! Image stages: the planner that turns a column's image specs (`random_resized_crop`,
//! `resize`, `center_crop`, `random_horizontal_flip`, `color_jitter`, `grayscale`, `to_tensor`,
//! `normalize`) into one fused transform (decode only the needed region at the smallest DCT scale,
//! resize, augment, write into the batch slot), with its fixed output shape.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use stokehold_format::{DType, FieldValue};
use stokehold_ops::{
    Geometry, ImageOps, Jitter, OutDType, OutSpec, Pixels, PixelsRef, Random, Workspace,
    decode_prefix, run, run_pixels,
};

use crate::cache::{DecodedCache, DecodedImage};
use crate::error::{EngineError, Result};
use crate::rng::SampleRng;
use crate::stages::stage_spec::{Layout, PerChannel, Size, Stage, TransformSpec};
use crate::stages::{Output, SampleCtx, StageError, StageResult, Transform, Value, tensor};

/// The image stage names.
pub const STAGES: &[&str] = &[
    "random_resized_crop",
    "resize",
    "center_crop",
    "random_horizontal_flip",
    "color_jitter",
    "grayscale",
    "to_tensor",
    "normalize",
];

/// Default pixel limit, checked from the header before decoding (one default with `pack`).
pub use stokehold_ops::DEFAULT_MAX_PIXELS;

fn bad(column: &str, msg: impl std::fmt::Display) -> EngineError {
    EngineError::Config(format!("column {column:?}: {msg}"))
}

/// A required `size`, or the message of a missing one.
fn required(column: &str, stage: &str, size: Option<Size>) -> Result<Size> {
    size.ok_or_else(|| {
        bad(
            column,
            format!(
                "{stage}: size must be a positive integer (up to 65535) or [height, width] of \
                 them, got nothing"
            ),
        )
    })
}

/// Plan the fused image transform of a column from its specs.
pub fn plan(column: &str, specs: &[TransformSpec]) -> Result<(Arc<dyn Transform>, Output)> {
    let ops = plan_ops(column, specs)?;
    let output = Output::Fixed {
        dtype: out_dtype(&ops),
        shape: ops.shape(),
    };
    Ok((Arc::new(ImageTransform { ops, decoded: None }), output))
}

/// The element type of an image pipeline's output.
pub fn out_dtype(ops: &ImageOps) -> DType {
    match ops.out.dtype {
        OutDType::U8 => DType::U8,
        OutDType::F32 => DType::F32,
        OutDType::F16 | OutDType::BF16 => DType::F16,
    }
}

/// What a column's image specs do, checked: the geometry (required), flip, jitter, gray and the
/// output's layout and type (also the spatial part of a video clip's chain).
pub fn plan_ops(column: &str, specs: &[TransformSpec]) -> Result<ImageOps> {
    let mut geometry: Option<Geometry> = None;
    let mut pending_resize: Option<u32> = None;
    let mut flip_p = 0.0;
    let mut jitter: Option<Jitter> = None;
    let mut gray = false;
    let mut out = OutSpec::default();
    let mut finished = false;
    for s in specs {
        if finished {
            return Err(bad(
                column,
                format!(
                    "{:?} comes after the output stage (to_tensor / normalize must be last)",
                    s.name
                ),
            ));
        }
        let stage = match s.stage() {
            Some(Ok(stage)) => stage,
            Some(Err(e)) => return Err(bad(column, format!("{}: {e}", s.name))),
            None => {
                return Err(bad(
                    column,
                    format!("{:?} is not an image stage ({})", s.name, STAGES.join(", ")),
                ));
            }
        };
        let geometry_set = geometry.is_some();
        match stage {
            Stage::RandomResizedCrop(_) | Stage::Resize(_) | Stage::CenterCrop(_)
                if geometry_set =>
            {
                return Err(bad(
                    column,
                    format!(
                        "{:?}: the image is already cropped/resized to a fixed size",
                        s.name
                    ),
                ));
            }
            Stage::RandomResizedCrop(p) => {
                if pending_resize.is_some() {
                    return Err(bad(
                        column,
                        "random_resized_crop after resize is not supported; use it on the original image",
                    ));
                }
                let (width, height) = required(column, &s.name, p.size)?.width_height();
                if p.scale.1 > 1.0 {
                    return Err(bad(
                        column,
                        "random_resized_crop: scale must be within (0, 1]",
                    ));
                }
                geometry = Some(Geometry::RandomResizedCrop {
                    width,
                    height,
                    scale: (p.scale.0, p.scale.1),
                    ratio: (p.ratio.0, p.ratio.1),
                });
            }
            Stage::Resize(p) => match required(column, "resize", p.size)? {
                Size::HeightWidth(h, w) => {
                    geometry = Some(Geometry::Resize {
                        width: w,
                        height: h,
                    });
                }
                Size::Side(n) => pending_resize = Some(n),
            },
            Stage::CenterCrop(p) => {
                let (width, height) = required(column, &s.name, p.size)?.width_height();
                let shorter = pending_resize.take().ok_or_else(|| {
                    bad(column, "center_crop needs a resize(shorter_side) before it")
                })?;
                geometry = Some(Geometry::ResizeCenterCrop {
                    shorter,
                    width,
                    height,
                });
            }
            Stage::RandomHorizontalFlip(p) => flip_p = p.p.0.min(1.0),
            Stage::ColorJitter(p) => {
                jitter = Some(Jitter {
                    brightness: p.brightness.0 as f32,
                    contrast: p.contrast.0 as f32,
                    saturation: p.saturation.0 as f32,
                });
            }
            Stage::Grayscale => gray = true,
            Stage::ToTensor(p) => {
                out.chw = p.layout == Layout::Chw;
                finished = true;
            }
            Stage::Normalize(p) => {
                let per_channel = |key: &str, v: Option<PerChannel>| {
                    v.map(|c| c.0).ok_or_else(|| {
                        bad(
                            column,
                            format!(
                                "normalize: {key} must be a list of 1 or 3 numbers, got nothing"
                            ),
                        )
                    })
                };
                out.chw = p.layout == Layout::Chw;
                out.mean = per_channel("mean", p.mean)?;
                out.std = per_channel("std", p.std)?;
                if out.std.iter().any(|&x| x <= 0.0) {
                    return Err(bad(column, "normalize: std must be positive"));
                }
                out.dtype = p.dtype;
                finished = true;
            }
            Stage::Tokenize(_) | Stage::Qwen2Vl(_) | Stage::FixedSize(_) | Stage::Clip(_) => {
                return Err(bad(
                    column,
                    format!("{:?} is not an image stage ({})", s.name, STAGES.join(", ")),
                ));
            }
        }
    }
    let geometry = geometry.ok_or_else(|| {
        bad(column, "an image column needs a fixed output size: random_resized_crop, resize([h, w]), or resize(n) + center_crop")
    })?;
    Ok(ImageOps {
        geometry,
        flip_p,
        jitter,
        gray,
        out,
        max_pixels: DEFAULT_MAX_PIXELS,
        fused: true,
    })
}

/// The fused image transform. With a decoded cache, the deterministic prefix (decode + resize to
/// a shorter side) is computed once per sample and kept within the cache's budget; the rest of the
/// pipeline (crop, resize, flip, jitter, layout) runs on the cached pixels, and a cold and a warm
/// sample give the same output.
#[derive(Debug, Clone)]
pub struct ImageTransform {
    /// What it does (after the prefix, with a decoded cache).
    pub ops: ImageOps,
    /// The decoded cache, when on: the cached images' shorter side, and the cache.
    pub decoded: Option<(u32, Arc<DecodedCache>)>,
}

/// A sample's generator as the ops crate draws from it.
#[derive(Debug)]
pub struct Draws<'a>(pub &'a mut SampleRng);

impl Random for Draws<'_> {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.0.uniform(lo, hi)
    }
    fn int_inclusive(&mut self, n: u64) -> u64 {
        self.0.below(n.saturating_add(1))
    }
}

thread_local! {
    /// Each worker thread's decoder and buffers.
    static WORKSPACE: RefCell<Workspace> = RefCell::new(Workspace::new());
}

fn encoded<'a>(x: &'a Value<'_>) -> StageResult<&'a [u8]> {
    match x {
        FieldValue::Image(b) | FieldValue::Bytes(b) => Ok(b),
        other => Err(format!("expected encoded image bytes, got a {}", other.kind()).into()),
    }
}

/// Runs `f` with this worker thread's image workspace.
pub fn with_workspace<T>(f: impl FnOnce(&mut Workspace) -> StageResult<T>) -> StageResult<T> {
    WORKSPACE.with(|ws| {
        let mut ws = ws.try_borrow_mut().map_err(|_| {
            StageError::from("image workspace in use (re-entrant call)".to_string())
        })?;
        f(&mut ws)
    })
}

/// The fixed output of an image pipeline as a tensor value (for `apply`).
fn output_tensor<'a>(ops: &ImageOps, out: Vec<u8>) -> Value<'a> {
    let dtype = match ops.out.dtype {
        OutDType::U8 => DType::U8,
        OutDType::F32 => DType::F32,
        OutDType::F16 | OutDType::BF16 => DType::F16,
    };
    tensor(dtype, ops.shape().iter().map(|&d| d as u64).collect(), out)
}

impl ImageTransform {
    fn run_into(&self, x: &Value<'_>, ctx: &mut SampleCtx<'_>, slot: &mut [u8]) -> StageResult<()> {
        let Some((size, cache)) = &self.decoded else {
            let bytes = encoded(x)?;
            return with_workspace(|ws| {
                run(&self.ops, bytes, &mut Draws(ctx.rng), ws, slot).map_err(StageError::from)
            });
        };
        if let Some(img) = cache.get(ctx.id) {
            let px = PixelsRef {
                width: img.width,
                height: img.height,
                channels: img.channels,
                data: &img.data,
            };
            return with_workspace(|ws| {
                run_pixels(&self.ops, px, &mut Draws(ctx.rng), ws, slot).map_err(StageError::from)
            });
        }
        // a miss: the prefix, then the same code a hit runs, on the pixels it keeps
        let bytes = encoded(x)?;
        let mut px = Pixels::default();
        let took = with_workspace(|ws| {
            let t0 = Instant::now();
            decode_prefix(
                bytes,
                *size,
                self.ops.gray,
                self.ops.max_pixels,
                ws,
                &mut px,
            )
            .map_err(StageError::from)?;
            let took = t0.elapsed();
            run_pixels(&self.ops, px.view(), &mut Draws(ctx.rng), ws, slot)
                .map_err(StageError::from)?;
            Ok(took)
        })?;
        cache.insert(
            ctx.id,
            DecodedImage {
                width: px.width,
                height: px.height,
                channels: px.channels,
                data: px.data.into_boxed_slice(),
            },
            took,
        );
        Ok(())
    }
}

impl Transform for ImageTransform {
    fn name(&self) -> &str {
        if self.decoded.is_some() {
            "decoded-cache+crop+resize"
        } else {
            "decode+crop+resize"
        }
    }

    fn apply<'a>(&self, x: Value<'a>, ctx: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        let mut out = vec![0u8; self.ops.slot_bytes()];
        self.run_into(&x, ctx, &mut out)?;
        Ok(output_tensor(&self.ops, out))
    }

    fn apply_into(
        &self,
        x: Value<'_>,
        ctx: &mut SampleCtx<'_>,
        slot: &mut [u8],
    ) -> StageResult<()> {
        self.run_into(&x, ctx, slot)
    }

    fn with_decoded_cache(
        &self,
        size: u32,
        cache: &mut dyn FnMut(&str) -> crate::error::Result<Arc<DecodedCache>>,
    ) -> crate::error::Result<Option<Arc<dyn Transform>>> {
        let prefix = format!(
            "decode-shorter-{size}-{}",
            if self.ops.gray { "gray" } else { "rgb" }
        );
        Ok(Some(Arc::new(ImageTransform {
            ops: self.ops.clone(),
            decoded: Some((size, cache(&prefix)?)),
        })))
    }
}

/// Whether `name` is an image stage.
pub fn is_image_stage(name: &str) -> bool {
    STAGES.contains(&name)
}
