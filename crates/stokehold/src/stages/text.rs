//! The `tokenize` stage: a string (or UTF-8 bytes) field into token ids, on the loader's threads,
//! for datasets too small to be worth packing into a token dataset.
//!
//! Spec: `{"name": "tokenize", "params": {"tokenizer": PATH, "max_length": N | null,
//! "dtype": "int32" | "int64", "pad_id": ID, "bos": TOKEN | null, "eos": TOKEN | null}}`.
//! With `max_length` the output is fixed, `[batch, max_length]`: ids truncated to `max_length`
//! (BOS/EOS included) and padded with `pad_id` (default: the id of `<pad>` or `[PAD]` when the
//! vocabulary has one, else 0). Without it, each sample is a 1-d array of its own length (a list
//! column).

use std::sync::Arc;

use stokehold_format::{DType, FieldValue};
use stokehold_ops::text::TextTokenizer;

use crate::error::{EngineError, Result};
use crate::stages::stage_spec::{Stage, TransformSpec};
use crate::stages::{Output, SampleCtx, StageError, StageResult, Transform, Value, tensor};

/// The stage's name in specs.
pub const TOKENIZE: &str = "tokenize";

/// The tokenize stage.
#[derive(Debug)]
pub struct Tokenize {
    tok: Arc<TextTokenizer>,
    max_length: Option<usize>,
    dtype: DType,
    pad_id: u32,
    bos: Option<u32>,
    eos: Option<u32>,
}

fn bad(column: &str, m: impl std::fmt::Display) -> EngineError {
    EngineError::Config(format!("column {column:?}: tokenize: {m}"))
}

/// Plan a column whose chain is one `tokenize` stage; None when the chain has none.
pub fn plan(column: &str, specs: &[TransformSpec]) -> Option<Result<(Arc<dyn Transform>, Output)>> {
    if !specs.iter().any(|s| s.name == TOKENIZE) {
        return None;
    }
    Some(plan_inner(column, specs))
}

fn plan_inner(column: &str, specs: &[TransformSpec]) -> Result<(Arc<dyn Transform>, Output)> {
    let [spec] = specs else {
        return Err(bad(column, "must be the only stage of its column"));
    };
    let p = match spec.stage() {
        Some(Ok(Stage::Tokenize(p))) => p,
        Some(Err(e)) => return Err(bad(column, e)),
        _ => return Err(bad(column, "not a tokenize stage")),
    };
    let path = p
        .tokenizer
        .as_deref()
        .ok_or_else(|| bad(column, "\"tokenizer\" (a tokenizer.json path) is required"))?;
    let tok = TextTokenizer::from_file(path).map_err(|e| bad(column, e))?;
    let max_length = match p.max_length {
        None => None,
        Some(n) if n > 0 && n <= 1 << 24 => Some(n as usize),
        Some(n) => {
            return Err(bad(
                column,
                format!("max_length must be 1 to 2^24, got {n}"),
            ));
        }
    };
    let dtype = p.dtype;
    let token = |name: Option<&str>| -> Result<Option<u32>> {
        name.map(|n| tok.token_id(n).map_err(|e| bad(column, e)))
            .transpose()
    };
    let (bos, eos) = (token(p.bos.as_deref())?, token(p.eos.as_deref())?);
    let pad_id = p.pad_id.unwrap_or_else(|| {
        ["<pad>", "[PAD]", "<|pad|>"]
            .iter()
            .find_map(|n| tok.inner().token_to_id(n))
            .unwrap_or(0)
    });
    let output = match max_length {
        Some(n) => Output::Fixed {
            dtype,
            shape: vec![n],
        },
        None => Output::List,
    };
    let t = Tokenize {
        tok: Arc::new(tok),
        max_length,
        dtype,
        pad_id,
        bos,
        eos,
    };
    Ok((Arc::new(t), output))
}

impl Tokenize {
    fn ids(&self, x: &Value<'_>) -> StageResult<Vec<u32>> {
        let text = match x {
            FieldValue::String(s) => s.as_ref(),
            FieldValue::Bytes(b) => std::str::from_utf8(b)
                .map_err(|e| StageError::from(format!("the bytes are not UTF-8: {e}")))?,
            other => {
                return Err(format!("expects a string field, got {}", other.kind()).into());
            }
        };
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        ids.extend(self.bos);
        self.tok
            .encode_into(text, &mut ids)
            .map_err(StageError::from)?;
        ids.extend(self.eos);
        if let Some(n) = self.max_length {
            ids.truncate(n);
        }
        Ok(ids)
    }
}

impl Transform for Tokenize {
    fn name(&self) -> &str {
        TOKENIZE
    }

    fn apply<'a>(&self, x: Value<'a>, _: &mut SampleCtx<'_>) -> StageResult<Value<'a>> {
        let mut ids = self.ids(&x)?;
        if let Some(n) = self.max_length {
            ids.resize(n, self.pad_id);
        }
        let mut data = Vec::with_capacity(ids.len() * self.dtype.size());
        for &i in &ids {
            match self.dtype {
                DType::I64 => data.extend_from_slice(&i64::from(i).to_le_bytes()),
                _ => data.extend_from_slice(&(i as i32).to_le_bytes()),
            }
        }
        Ok(tensor(self.dtype, vec![ids.len() as u64], data))
    }

    fn apply_into(&self, x: Value<'_>, _: &mut SampleCtx<'_>, slot: &mut [u8]) -> StageResult<()> {
        let ids = self.ids(&x)?;
        let size = self.dtype.size();
        for (k, chunk) in slot.chunks_exact_mut(size).enumerate() {
            let id = ids.get(k).copied().unwrap_or(self.pad_id);
            match self.dtype {
                DType::I64 => chunk.copy_from_slice(&i64::from(id).to_le_bytes()),
                _ => chunk.copy_from_slice(&(id as i32).to_le_bytes()),
            }
        }
        Ok(())
    }
}
