//! Transforms: composable stages over typed values, run per sample on the worker threads.
//!
//! A loader's output is a list of [`Column`]s. Each column takes one field of the record, passes
//! its value through a chain of [`Transform`]s, and lands in the sample's slot of the batch: a
//! fixed-size slot of a preallocated tensor ([`Output::Fixed`]), or an owned value in a list
//! ([`Output::List`]). The last stage may write straight into the slot
//! ([`Transform::apply_into`]), so the batch is filled with no collation copy.

pub mod image;
pub mod spec;
pub mod text;

use std::borrow::Cow;
use std::sync::Arc;

use stokehold_format::{ArrayValue, DType, FieldType, FieldValue, Schema};

use crate::error::{EngineError, Result};
use crate::rng::SampleRng;

/// Why a stage failed on one sample: the kernel's typed error, or the error of a stage defined
/// elsewhere (a Python callable's exception), kept as the source so bindings can re-raise it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StageError {
    /// An image kernel failed (an over-limit image is [`stokehold_ops::OpsError::TooLarge`]).
    #[error(transparent)]
    Ops(#[from] stokehold_ops::OpsError),
    /// The tokenizer failed.
    #[error(transparent)]
    Text(#[from] stokehold_ops::text::TextError),
    /// A stage defined outside this crate failed; `source` is its own error.
    #[error("{message}")]
    External {
        /// The error as text (with a traceback where there is one).
        message: String,
        /// The original error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A value a stage cannot take (a wrong kind, a slot of another size).
    #[error("{0}")]
    Invalid(String),
}

impl From<String> for StageError {
    fn from(m: String) -> StageError {
        StageError::Invalid(m)
    }
}

/// `Result` of a stage.
pub type StageResult<T> = std::result::Result<T, StageError>;

/// A value flowing between stages: a field value as stored, or a tensor made by a stage.
pub type Value<'a> = FieldValue<'a>;

/// What a stage gets besides its input: the sample's id and its random generator.
#[derive(Debug)]
pub struct SampleCtx<'r> {
    /// Global sample id.
    pub id: u64,
    /// Epoch.
    pub epoch: u64,
    /// This sample's random numbers for this column.
    pub rng: &'r mut SampleRng,
}

/// One stage. Implementations must be deterministic given the input and `ctx.rng`.
pub trait Transform: Send + Sync + 'static {
    /// A short name for statistics and errors ("decode", "copy", ...).
    fn name(&self) -> &str;

    /// Transform a value.
    fn apply<'a>(&self, x: Value<'a>, ctx: &mut SampleCtx<'_>) -> StageResult<Value<'a>>;

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

/// Where a column's values go in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A tensor of `[batch, shape...]` elements of `dtype`; each sample fills one slot of
    /// `prod(shape) * dtype.size()` bytes.
    Fixed {
        /// Element type.
        dtype: DType,
        /// Per-sample shape.
        shape: Vec<usize>,
    },
    /// A list with one owned value per sample (bytes, strings, arrays of varying shape).
    List,
}

impl Output {
    /// Bytes of one slot (0 for lists).
    pub fn slot_bytes(&self) -> usize {
        match self {
            Output::Fixed { dtype, shape } => shape.iter().product::<usize>() * dtype.size(),
            Output::List => 0,
        }
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
