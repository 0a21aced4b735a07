//! `stokehold.text.ChatTemplate`'s native half (`_native._ChatTemplate`): conversations from
//! Python objects into template values (with the GIL), then rendered, tokenized and masked on
//! native threads without it (`stokehold_ops::chat`).

use std::path::PathBuf;
use std::sync::Arc;

use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use stokehold_ops::chat::{
    ChatEncoding, ChatError, ChatOptions, ChatTemplate as Template, LossOn, Value,
    expand_placeholders, map_from,
};

use crate::errors::config_error;

/// Deepest nesting of a conversation accepted from Python.
const MAX_DEPTH: usize = 128;

/// The longest conversation its images may expand it to (tokens).
const MAX_EXPANDED: u64 = 1 << 31;

/// Image placeholders to expand: the placeholder's id and, per conversation, its images' tokens.
type Expand = (u32, Vec<Vec<u64>>);

/// `enc` (conversation `index`, its images `tokens`) with its placeholders expanded.
fn expand(
    mut enc: ChatEncoding,
    placeholder: u32,
    tokens: &[u64],
    index: u64,
) -> Result<ChatEncoding, ChatError> {
    expand_placeholders(&mut enc, placeholder, tokens, MAX_EXPANDED, index)?;
    Ok(enc)
}

/// A Python object as a template value, as `transformers`' `_plain_template_data` sees it: JSON
/// scalars, dicts, lists and tuples as they are, numpy scalars as their Python value, anything
/// else as the placeholder `"<TypeName>"`.
fn to_value(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(config_error(
            obj.py(),
            format!("a conversation nested deeper than {MAX_DEPTH} levels"),
        ));
    }
    if obj.is_none() {
        return Ok(Value::from(()));
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::from(b.is_true()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::from(s.extract::<String>()?));
    }
    if obj.cast::<PyInt>().is_ok() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(i) = obj.extract::<i128>() {
            return Ok(Value::from(i));
        }
        return Ok(Value::from(obj.str()?.extract::<String>()?));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Ok(Value::from(f.value()));
    }
    if let Ok(d) = obj.cast::<PyDict>() {
        let mut entries = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            entries.push((to_value(&k, depth + 1)?, to_value(&v, depth + 1)?));
        }
        return Ok(map_from(entries));
    }
    if let Ok(l) = obj.cast::<PyList>() {
        let items = l
            .iter()
            .map(|x| to_value(&x, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::from(items));
    }
    if let Ok(t) = obj.cast::<PyTuple>() {
        let items = t
            .iter()
            .map(|x| to_value(&x, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::from(items));
    }
    let ty = obj.get_type();
    let module: String = ty
        .getattr("__module__")
        .and_then(|m| m.extract())
        .unwrap_or_default();
    let name: String = ty
        .getattr("__name__")
        .and_then(|m| m.extract())
        .unwrap_or_else(|_| "object".to_string());
    if module == "numpy" && name != "ndarray" && obj.hasattr("item")? {
        return to_value(&obj.call_method0("item")?, depth + 1);
    }
    if obj.hasattr("items")? && obj.hasattr("keys")? {
        let mut entries = Vec::new();
        for pair in obj.call_method0("items")?.try_iter()? {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair?.extract()?;
            entries.push((to_value(&k, depth + 1)?, to_value(&v, depth + 1)?));
        }
        return Ok(map_from(entries));
    }
    Ok(Value::from(format!("<{name}>")))
}

fn chat_err(py: Python<'_>, e: ChatError) -> PyErr {
    config_error(py, e.to_string())
}

/// The native chat template: see `stokehold.text.ChatTemplate`.
#[derive(Debug)]
#[pyclass(module = "stokehold._native", name = "_ChatTemplate", frozen)]
pub struct ChatTemplate {
    inner: Arc<Template>,
    messages: String,
    /// The completion's field of a prompt/completion pair (`messages` names the prompt's).
    completion: Option<String>,
}

impl ChatTemplate {
    /// The conversation of `obj`: a list of messages, or a dict (a row) holding one under the
    /// `messages` field.
    /// With `completion`, a pair: a dict holding the prompt under `messages` and the
    /// completion under `completion`, or a `(prompt, completion)` sequence.
    fn conversation(&self, obj: &Bound<'_, PyAny>, index: usize) -> PyResult<Value> {
        if let Ok(d) = obj.cast::<PyDict>() {
            let field = |name: &str, option: &str| match d.get_item(name)? {
                Some(m) => to_value(&m, 0),
                None => Err(config_error(
                    obj.py(),
                    format!(
                        "conversation {index}: a dict without the field {name:?} (the `{option}` option)"
                    ),
                )),
            };
            let first = field(&self.messages, "messages")?;
            return match &self.completion {
                Some(c) => Ok(Value::from(vec![first, field(c, "completion")?])),
                None => Ok(first),
            };
        }
        to_value(obj, 0)
    }
}

#[pymethods]
impl ChatTemplate {
    #[new]
    #[pyo3(signature = (tokenizer, template = None, messages = "messages", loss_on = "assistant", add_generation_prompt = false, template_kwargs = None, completion = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        tokenizer: PathBuf,
        template: Option<String>,
        messages: &str,
        loss_on: &str,
        add_generation_prompt: bool,
        template_kwargs: Option<Bound<'_, PyDict>>,
        completion: Option<String>,
    ) -> PyResult<ChatTemplate> {
        let loss_on = LossOn::parse(loss_on).map_err(|e| chat_err(py, e))?;
        let mut extra = Vec::new();
        if let Some(kw) = template_kwargs {
            for (k, v) in kw.iter() {
                let k: String = k
                    .extract()
                    .map_err(|_| config_error(py, "template_kwargs: keys must be strings"))?;
                extra.push((k, to_value(&v, 0)?));
            }
        }
        let options = ChatOptions {
            template,
            loss_on,
            add_generation_prompt,
            extra,
            pairs: completion.is_some(),
        };
        let inner = py
            .detach(|| Template::from_path(&tokenizer, options))
            .map_err(|e| chat_err(py, e))?;
        Ok(ChatTemplate {
            inner: Arc::new(inner),
            messages: messages.to_string(),
            completion,
        })
    }

    /// The rendered text of one conversation.
    fn render(&self, py: Python<'_>, conversation: &Bound<'_, PyAny>) -> PyResult<String> {
        let conv = self.conversation(conversation, 0)?;
        let inner = Arc::clone(&self.inner);
        py.detach(move || inner.render(&conv))
            .map(|r| r.text)
            .map_err(|e| {
                let detail = e.to_string();
                chat_err(py, ChatError::Conversation { index: 0, detail })
            })
    }

    /// `(input_ids int32, assistant_masks uint8)` of one conversation; with `expand`
    /// (`(placeholder id, [tokens of each image])`) each image placeholder expanded.
    #[pyo3(signature = (conversation, expand = None))]
    #[allow(clippy::type_complexity)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        conversation: &Bound<'py, PyAny>,
        expand: Option<(u32, Vec<u64>)>,
    ) -> PyResult<(Bound<'py, PyArray1<i32>>, Bound<'py, PyArray1<u8>>)> {
        let conv = self.conversation(conversation, 0)?;
        let inner = Arc::clone(&self.inner);
        let enc = py
            .detach(move || {
                let enc = inner.encode(&conv, 0)?;
                match &expand {
                    Some((id, tokens)) => self::expand(enc, *id, tokens, 0),
                    None => Ok(enc),
                }
            })
            .map_err(|e| chat_err(py, e))?;
        let ids = ids_i32(py, &enc.input_ids)?;
        Ok((
            PyArray1::from_vec(py, ids),
            PyArray1::from_vec(py, enc.mask),
        ))
    }

    /// Many conversations on `threads` native threads (0: every core) without the GIL:
    /// `(input_ids int32, assistant_masks uint8, offsets int64 [n + 1])`, conversation `i`
    /// being `input_ids[offsets[i]:offsets[i + 1]]`.
    /// With `expand` (`(placeholder id, [[tokens of each image] per conversation])`), each
    /// conversation's image placeholders expanded.
    #[pyo3(signature = (conversations, threads = 0, expand = None))]
    #[allow(clippy::type_complexity)]
    fn encode_batch<'py>(
        &self,
        py: Python<'py>,
        conversations: &Bound<'py, PyAny>,
        threads: usize,
        expand: Option<Expand>,
    ) -> PyResult<(
        Bound<'py, PyArray1<i32>>,
        Bound<'py, PyArray1<u8>>,
        Bound<'py, PyArray1<i64>>,
    )> {
        let mut convs = Vec::new();
        for (i, c) in conversations.try_iter()?.enumerate() {
            convs.push(self.conversation(&c?, i)?);
        }
        if let Some((_, per)) = &expand
            && per.len() != convs.len()
        {
            return Err(config_error(
                py,
                format!(
                    "images are given for {} conversations, not {}",
                    per.len(),
                    convs.len()
                ),
            ));
        }
        let inner = Arc::clone(&self.inner);
        let encs = py
            .detach(move || {
                let encs = inner.encode_many(&convs, threads, 0)?;
                match expand {
                    Some((id, per)) => encs
                        .into_iter()
                        .zip(&per)
                        .enumerate()
                        .map(|(i, (e, t))| self::expand(e, id, t, i as u64))
                        .collect(),
                    None => Ok(encs),
                }
            })
            .map_err(|e| chat_err(py, e))?;
        let total: usize = encs.iter().map(|e| e.input_ids.len()).sum();
        let mut ids = Vec::with_capacity(total);
        let mut masks = Vec::with_capacity(total);
        let mut offsets = Vec::with_capacity(encs.len() + 1);
        offsets.push(0i64);
        for e in &encs {
            ids.extend(ids_i32(py, &e.input_ids)?);
            masks.extend_from_slice(&e.mask);
            offsets.push(ids.len() as i64);
        }
        Ok((
            PyArray1::from_vec(py, ids),
            PyArray1::from_vec(py, masks),
            PyArray1::from_vec(py, offsets),
        ))
    }

    /// Whether the template marks `{% generation %}` blocks.
    #[getter]
    fn has_generation(&self) -> bool {
        self.inner.has_generation()
    }

    /// The template's text.
    #[getter]
    fn template(&self) -> String {
        self.inner.template().to_string()
    }

    /// The id of a token (added and special tokens included) by its text; `None` when the
    /// vocabulary has no such token.
    fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_id(token)
    }

    /// The special tokens the template sees (`bos_token`, ...), from the tokenizer's config.
    #[getter]
    fn special_tokens(&self) -> Vec<(String, String)> {
        self.inner.special_tokens().to_vec()
    }
}

fn ids_i32(py: Python<'_>, ids: &[u32]) -> PyResult<Vec<i32>> {
    ids.iter()
        .map(|&i| {
            i32::try_from(i).map_err(|_| config_error(py, format!("token id {i} is over int32")))
        })
        .collect()
}

/// Add the class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ChatTemplate>()
}
