//! The `qwen2vl` stage: Qwen2-VL's image processor (`stokehold_ops::vision::Qwen2Vl`) on the
//! loader's threads, over an image (or bytes) field.
//!
//! Spec: `{"name": "qwen2vl", "params": {"min_pixels", "max_pixels", "patch_size",
//! "merge_size", "temporal_patch_size", "image_mean", "image_std", "dct_scaling"}}` (all
//! optional: `stokehold.vision.Qwen2VL`'s defaults). Each sample's value is a float32 array of
//! shape `[grid_h / m, grid_w / m, m * m, row]` (`m` the merge size, `row` =
//! `3 * temporal_patch_size * patch_size²`): its rows in the model's order (by merge block, then
//! within it), so `reshape(-1, row)` is that image's `pixel_values` and the shape gives its
//! grid `(1, shape[0] * m, shape[1] * m)`. The batch delivers a column of these as Qwen2-VL's
//! `pixel_values` and `{column}_grid_thw` ([`Output::Patches`]).

use std::cell::RefCell;
use std::sync::Arc;

use stokehold_format::{DType, FieldValue};
use stokehold_ops::DEFAULT_MAX_PIXELS;
use stokehold_ops::vision::{FixedSize, Qwen2Vl, VisionWorkspace};

use crate::error::{EngineError, Result};
use crate::stages::stage_spec::{Stage, TransformSpec};
use crate::stages::{Output, SampleCtx, StageError, StageResult, Transform, Value, tensor};

/// The stage's name in specs.
pub const QWEN2VL: &str = "qwen2vl";

thread_local! {
    /// This worker thread's decoder and buffers (kept between samples).
    static WORKSPACE: RefCell<Option<VisionWorkspace>> = const { RefCell::new(None) };
}

/// Run `f` with this thread's vision workspace (made on first use, kept between samples): the
/// `qwen2vl` stage's and packed conversations' images share it.
pub(crate) fn with_workspace<R>(
    f: impl FnOnce(&mut VisionWorkspace) -> stokehold_ops::Result<R>,
) -> stokehold_ops::Result<R> {
    WORKSPACE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let ws = match slot.as_mut() {
            Some(ws) => ws,
            None => slot.insert(VisionWorkspace::new()?),
        };
        f(ws)
    })
}

/// The stage.
#[derive(Debug)]
pub struct Qwen2VlStage {
    proc: Qwen2Vl,
}

/// The `fixed_size` stage's name in specs.
pub const FIXED_SIZE: &str = "fixed_size";

/// The `fixed_size` stage: `stokehold_ops::vision::FixedSize` on the loader's threads, each
/// sample a float32 `[3, size, size]` (a fixed column).
#[derive(Debug)]
pub struct FixedSizeStage {
    proc: FixedSize,
}

/// Plan a column whose chain is one vision processor stage (`qwen2vl` or `fixed_size`); None
/// when the chain has none.
pub fn plan(column: &str, specs: &[TransformSpec]) -> Option<Result<(Arc<dyn Transform>, Output)>> {
    let name = specs
        .iter()
        .map(|s| s.name.as_str())
        .find(|n| [QWEN2VL, FIXED_SIZE].contains(n))?;
    let bad =
        |m: &dyn std::fmt::Display| EngineError::Config(format!("column {column:?}: {name}: {m}"));
    let [spec] = specs else {
        return Some(Err(bad(&"must be the only stage of its column")));
    };
    Some(match spec.stage() {
        Some(Ok(Stage::Qwen2Vl(p))) => p.processor().map_err(|e| bad(&e)).map(|proc| {
            let output = Output::Patches {
                merge: proc.merge_size as usize,
                row: proc.row_len(),
            };
            let stage: Arc<dyn Transform> = Arc::new(Qwen2VlStage { proc });
            (stage, output)
        }),
        Some(Ok(Stage::FixedSize(p))) => p.processor().map_err(|e| bad(&e)).map(|proc| {
            let s = proc.size as usize;
            let stage: Arc<dyn Transform> = Arc::new(FixedSizeStage { proc });
            let output = Output::Fixed {
                dtype: DType::F32,
                shape: vec![3, s, s],
            };
            (stage, output)
        }),
        Some(Err(e)) => Err(bad(&e)),
        _ => Err(bad(&"not a vision processor stage")),
    })
}

impl Transform for FixedSizeStage {
    fn name(&self) -> &str {
        FIXED_SIZE
    }

    fn apply<'a>(&self, x: Value<'a>, _: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        let data = match &x {
            FieldValue::Image(b) | FieldValue::Bytes(b) => b.as_ref(),
            other => {
                return Err(format!("expects encoded image bytes, got {}", other.kind()).into());
            }
        };
        let s = self.proc.size as usize;
        let mut values = vec![0f32; 3 * s * s];
        with_workspace(|ws| self.proc.process(ws, data, DEFAULT_MAX_PIXELS, &mut values))
            .map_err(StageError::from)?;
        let shape = vec![3, s as u64, s as u64];
        Ok(tensor(
            DType::F32,
            shape,
            bytemuck::cast_slice(&values).to_vec(),
        ))
    }
}

impl Transform for Qwen2VlStage {
    fn name(&self) -> &str {
        QWEN2VL
    }

    fn apply<'a>(&self, x: Value<'a>, _: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        let data = match &x {
            FieldValue::Image(b) | FieldValue::Bytes(b) => b.as_ref(),
            other => {
                return Err(format!("expects encoded image bytes, got {}", other.kind()).into());
            }
        };
        let p = &self.proc;
        let (grid, bytes) = with_workspace(|ws| {
            let grid = p.image_grid(ws, data, DEFAULT_MAX_PIXELS)?;
            let n = p.values(grid);
            // the value's bytes (the format's arrays are little-endian, as f32 is in memory on
            // the targets built for), written in place when the allocation is f32-aligned: a
            // buffer an earlier batch gave back (see `batch::deliver_patches`) when one fits
            let mut bytes = crate::batch::spare_bytes(n * 4);
            match bytemuck::try_cast_slice_mut::<u8, f32>(&mut bytes) {
                Ok(values) => p.process_into(ws, data, DEFAULT_MAX_PIXELS, grid, values),
                Err(_) => {
                    let mut values = vec![0f32; n];
                    let r = p.process_into(ws, data, DEFAULT_MAX_PIXELS, grid, &mut values);
                    bytes.copy_from_slice(bytemuck::cast_slice(&values));
                    r
                }
            }?;
            Ok((grid, bytes))
        })
        .map_err(StageError::from)?;
        let m = u64::from(p.merge_size);
        let shape = vec![
            u64::from(grid[1]) / m,
            u64::from(grid[2]) / m,
            m * m * u64::from(grid[0]),
            p.row_len() as u64,
        ];
        Ok(tensor(DType::F32, shape, bytes))
    }
}
