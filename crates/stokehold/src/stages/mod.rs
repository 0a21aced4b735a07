//! Transforms: composable stages over typed values, run per sample on the worker threads.
//!
//! A loader's output is a list of [`Column`]s. Each column takes one field of the record, passes
//! its value through a chain of [`Transform`]s, and lands in the sample's slot of the batch: a
//! fixed-size slot of a preallocated tensor ([`Output::Fixed`]), or an owned value in a list
//! ([`Output::List`]). The last stage may write straight into the slot
//! ([`Transform::apply_into`]), so the batch is filled with no collation copy.

pub mod image;
pub mod spec;
mod stage_spec;
pub mod text;
pub mod video;
pub mod vision;

use std::borrow::Cow;
use std::sync::Arc;

use stokehold_format::{ArrayValue, DType, FieldType, FieldValue, Schema};

pub use crate::batch::Output;
use crate::error::{EngineError, Result};
pub use crate::error::{StageError, StageResult};
use crate::rng::SampleRng;
pub use stage_spec::Qwen2VlParams;

/// A value flowing between stages: a field value as stored, or a tensor made by a stage.
pub type Value<'a> = FieldValue<'a>;

/// What a stage gets besides its input: the sample's id and its random generator.
#[derive(Debug)]
pub struct SampleCtx<'r> {
    /// Global sample id.
    pub id: u64,
    /// The loader's seed (stages whose draws must agree across columns, such as a video clip
    /// and its timestamps, draw from (seed, epoch, id) themselves).
    pub seed: u64,
    /// Epoch.
    pub epoch: u64,
    /// This sample's random numbers for this column.
    pub rng: &'r mut SampleRng,
    /// The value (bytes) of the other field of the record the column's stage reads
    /// ([`Transform::reads_field`]: a synced clip's clock video), when it reads one.
    pub other: Option<&'r [u8]>,
}

/// One stage. Implementations must be deterministic given the input and `ctx.rng`.
pub trait Transform: Send + Sync + 'static {
    /// A short name for statistics and errors ("decode", "copy", ...).
    fn name(&self) -> &str;

    /// Transform a value.
    fn apply<'a>(&self, x: Value<'a>, ctx: &mut SampleCtx<'_>) -> StageResult<Value<'a>>;

    /// Another field of the record this stage reads besides its own (a clip synced to the clock
    /// of another field's video), given as [`SampleCtx::other`]; None (the default): none.
    fn reads_field(&self) -> Option<&str> {
        None
    }

    /// Whether this stage, first of its column, reads of a `video` value only its frame index
    /// and the packets [`Transform::packet_ranges`] names (a clip; its timestamps): then its
    /// record may be read in part. False (the default): it needs the whole value.
    fn reads_packets_only(&self) -> bool {
        false
    }

    /// For a stage that [`Transform::reads_packets_only`]: the byte ranges of the video
    /// container (`x` is the `video` value) that applying it to `x` for the sample of `ctx`
    /// reads, from the index alone (deterministic: the same as [`Transform::apply`] reads).
    fn packet_ranges(&self, x: &[u8], ctx: &mut SampleCtx<'_>) -> StageResult<Vec<(u64, u64)>> {
        let _ = (x, ctx);
        Err(StageError::from(format!(
            "{}: reads the whole value, not packets",
            self.name()
        )))
    }

    /// Transform a value and write the result into `slot` (a fixed-size output slot of
    /// `slot.len()` bytes). The default applies, then copies; stages that can produce their
    /// output in place should override it.
    fn apply_into(
        &self,
        x: Value<'_>,
        ctx: &mut SampleCtx<'_>,
        slot: &mut [u8],
    ) -> StageResult<()> {
        let v = self.apply(x, ctx)?;
        write_value(&v, slot)
    }

    /// A copy of this stage that keeps the output of its deterministic prefix (an image's decode
    /// and resize to a shorter side of `size`) in a decoded cache, or `None` for a stage without
    /// such a prefix (the default). `cache` gives the shared cache of a prefix, named by a key
    /// that describes the prefix (an error when its directory cannot be opened).
    fn with_decoded_cache(
        &self,
        size: u32,
        cache: &mut dyn FnMut(&str) -> crate::error::Result<Arc<crate::cache::DecodedCache>>,
    ) -> crate::error::Result<Option<Arc<dyn Transform>>> {
        let _ = (size, cache);
        Ok(None)
    }
}

/// Copy a value's bytes into a fixed slot, checking the size.
pub fn write_value(v: &Value<'_>, slot: &mut [u8]) -> StageResult<()> {
    let bytes: &[u8] = match v {
        FieldValue::Int64(i) => return copy_exact(&i.to_le_bytes(), slot),
        FieldValue::Float64(f) => return copy_exact(&f.to_le_bytes(), slot),
        FieldValue::Bytes(b) | FieldValue::Image(b) => b,
        FieldValue::String(s) => s.as_bytes(),
        FieldValue::Array(a) => &a.data,
        FieldValue::List(_) => {
            return Err(String::from(
                "a list has no fixed size: it goes to a stage that takes lists",
            )
            .into());
        }
    };
    copy_exact(bytes, slot)
}

fn copy_exact(src: &[u8], slot: &mut [u8]) -> StageResult<()> {
    if src.len() != slot.len() {
        return Err(format!(
            "the value has {} bytes but the output slot takes {}",
            src.len(),
            slot.len()
        )
        .into());
    }
    slot.copy_from_slice(src);
    Ok(())
}

/// A transform from a closure.
pub struct FnTransform<F> {
    name: String,
    f: F,
}

impl<F> std::fmt::Debug for FnTransform<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTransform")
            .field("name", &self.name)
            .finish()
    }
}

/// Wrap a closure as a [`Transform`].
pub fn from_fn<F>(name: impl Into<String>, f: F) -> Arc<dyn Transform>
where
    F: for<'a> Fn(Value<'a>, &mut SampleCtx<'_>) -> StageResult<Value<'a>> + Send + Sync + 'static,
{
    Arc::new(FnTransform {
        name: name.into(),
        f,
    })
}

impl<F> Transform for FnTransform<F>
where
    F: for<'a> Fn(Value<'a>, &mut SampleCtx<'_>) -> StageResult<Value<'a>> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn apply<'a>(&self, x: Value<'a>, ctx: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        (self.f)(x, ctx)
    }
}

/// Copies the field's bytes straight into a fixed slot of the same size (the "copy-only"
/// pipeline of the engine benchmark; also how fixed-size raw records are loaded).
#[derive(Debug, Clone, Copy, Default)]
pub struct CopyBytes;

impl Transform for CopyBytes {
    fn name(&self) -> &str {
        "copy"
    }

    fn apply<'a>(&self, x: Value<'a>, _: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        Ok(x)
    }

    fn apply_into(&self, x: Value<'_>, _: &mut SampleCtx<'_>, slot: &mut [u8]) -> StageResult<()> {
        write_value(&x, slot)
    }
}

/// One output column: a source field, its stages, and where the result goes.
#[derive(Clone)]
pub struct Column {
    /// The column's name in the batch.
    pub name: String,
    /// The record field it reads.
    pub field: String,
    /// The stages, in order.
    pub transforms: Vec<Arc<dyn Transform>>,
    /// Where the result goes.
    pub output: Output,
}

impl std::fmt::Debug for Column {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.transforms.iter().map(|t| t.name()).collect();
        f.debug_struct("Column")
            .field("name", &self.name)
            .field("field", &self.field)
            .field("transforms", &names)
            .field("output", &self.output)
            .finish()
    }
}

impl Column {
    /// A column passing `field` through unchanged, with the output that suits its type: int64
    /// and float64 become fixed scalars, everything else a list.
    pub fn passthrough(schema: &Schema, field: &str) -> Result<Column> {
        let f = schema
            .fields
            .iter()
            .find(|f| f.name == field)
            .ok_or_else(|| {
                EngineError::Config(format!(
                    "the dataset has no field {field:?} (schema: {schema})"
                ))
            })?;
        let output = match f.ty {
            FieldType::Int64 => Output::Fixed {
                dtype: DType::I64,
                shape: vec![],
            },
            FieldType::Float64 => Output::Fixed {
                dtype: DType::F64,
                shape: vec![],
            },
            _ => Output::List,
        };
        Ok(Column {
            name: field.to_string(),
            field: field.to_string(),
            transforms: Vec::new(),
            output,
        })
    }

    /// A column whose stages produce a fixed-size output.
    pub fn fixed(
        field: &str,
        transforms: Vec<Arc<dyn Transform>>,
        dtype: DType,
        shape: Vec<usize>,
    ) -> Column {
        Column {
            name: field.to_string(),
            field: field.to_string(),
            transforms,
            output: Output::Fixed { dtype, shape },
        }
    }

    /// Every field of `schema`, passed through.
    pub fn all(schema: &Schema) -> Result<Vec<Column>> {
        schema
            .fields
            .iter()
            .map(|f| Column::passthrough(schema, &f.name))
            .collect()
    }
}

/// A little-endian tensor value, for stages that produce arrays.
pub fn tensor<'a>(dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Value<'a> {
    FieldValue::Array(ArrayValue {
        dtype,
        shape,
        data: Cow::Owned(data),
    })
}
