//! Chat templates: a conversation (`[{"role", "content"}, ...]`) rendered with the model's Jinja
//! chat template, tokenized, and the loss mask computed per token, giving the same `input_ids` and
//! (for templates that mark `{% generation %}`) the same assistant mask as `transformers`'
//! `tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
//! return_assistant_tokens_mask=True)`.
//!
//! The template runs on [`minijinja`] configured as `transformers` configures Jinja2
//! (`trim_blocks`, `lstrip_blocks`, loop controls), with the globals and filters it gives
//! templates (`raise_exception`, its own `tojson`, `strftime_now`, the special tokens,
//! `add_generation_prompt`, `tools`, `documents`), Python's string and dict methods (minijinja-contrib's
//! `pycompat`) and Python's printing of `True`/`False`/`None` and floats.
//!
//! `{% generation %}...{% endgeneration %}` becomes a `{% filter %}` block that wraps its output
//! in two noncharacters (U+FDD0, U+FDD1); they are removed after rendering and give the
//! character spans `transformers`' `AssistantTracker` records. For templates without generation
//! blocks the content of each assistant message is marked the same way (U+FDD2, U+FDD3, around the
//! whitespace-trimmed text so that `.strip()`/`| trim` in the template give the same text) in a
//! second rendering; the tokens always come from the unmarked rendering, so they are exactly
//! `transformers`' whatever the template does with the marks.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error as JinjaError, ErrorKind};

use crate::text::{TextError, TextTokenizer};

/// The values templates see (minijinja's), for callers that build conversations.
pub use minijinja::Value;

/// Name of the template inside the environment.
const TEMPLATE_NAME: &str = "chat_template";
/// The filter `{% generation %}` is rewritten to.
const GENERATION_FILTER: &str = "__stokehold_generation";
/// Marks of a generation block's output.
const GEN_START: char = '\u{FDD0}';
const GEN_END: char = '\u{FDD1}';
/// Marks of an assistant message's content (templates without generation blocks).
const MSG_START: char = '\u{FDD2}';
const MSG_END: char = '\u{FDD3}';
/// Largest `tokenizer_config.json` / `chat_template.jinja` read.
const MAX_CONFIG_BYTES: u64 = 64 << 20;
/// The special-token attributes `transformers` passes to templates (`special_tokens_map`).
const SPECIAL_TOKEN_NAMES: [&str; 7] = [
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
];
/// The names a message's reasoning is passed under (`transformers`' `_REASONING_FIELDS`).
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// Errors of chat templates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChatError {
    /// The tokenizer could not be loaded.
    #[error(transparent)]
    Tokenizer(#[from] TextError),
    /// The tokenizer's configuration or the template is missing or invalid.
    #[error("{}: {detail}", path.display())]
    Config {
        /// The file (or directory) concerned.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// The template does not compile.
    #[error("the chat template does not compile: {0}")]
    Template(String),
    /// An invalid option.
    #[error("invalid option: {0}")]
    Invalid(String),
    /// A conversation could not be encoded: not a list of messages, the template raised or
    /// failed on it, or tokenization failed.
    #[error("conversation {index}: {detail}")]
    Conversation {
        /// The conversation's index (in the batch, or in the dataset).
        index: u64,
        /// What went wrong (the template's own message when it raised).
        detail: String,
    },
}

/// Why one conversation could not be rendered: the detail of a [`ChatError::Conversation`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// Not a list of messages (or a message that is not a dict).
    #[error("{0}")]
    Shape(String),
    /// A string of it holds one of the noncharacters stokehold reserves to mark spans.
    #[error("holds one of U+FDD0..U+FDD3 (noncharacters stokehold reserves to mark spans)")]
    ReservedMarks,
    /// The template raised (`raise_exception`) or failed on it (the template's message).
    #[error("{0}")]
    Template(String),
    /// The template's `{% generation %}` marks do not pair up in the rendered text.
    #[error("unbalanced generation marks")]
    UnbalancedMarks,
}

/// Which tokens the loss mask covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossOn {
    /// The tokens inside `{% generation %}` blocks; for templates without them, the assistant
    /// messages' content and the end-of-turn token that follows each.
    Assistant,
    /// As [`LossOn::Assistant`], for the last assistant turn (the last generation block) only.
    Last,
    /// Every token.
    All,
    /// The completion's tokens of a prompt/completion pair (TRL's `completion_only_loss`):
    /// every token after the prompt's.
    Completion,
}

impl LossOn {
    /// Parse `"assistant"`, `"last"`, `"all"` or `"completion"`.
    pub fn parse(s: &str) -> Result<LossOn, ChatError> {
        match s {
            "assistant" => Ok(LossOn::Assistant),
            "last" => Ok(LossOn::Last),
            "all" => Ok(LossOn::All),
            "completion" => Ok(LossOn::Completion),
            other => Err(ChatError::Invalid(format!(
                "loss_on must be \"assistant\", \"last\", \"all\" or \"completion\", not {other:?}"
            ))),
        }
    }

    /// The name [`LossOn::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            LossOn::Assistant => "assistant",
            LossOn::Last => "last",
            LossOn::All => "all",
            LossOn::Completion => "completion",
        }
    }
}

/// One encoded conversation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChatEncoding {
    /// The token ids of the rendered conversation (no special tokens added by the tokenizer).
    pub input_ids: Vec<u32>,
    /// 1 where the loss applies, per token.
    pub mask: Vec<u8>,
}

/// A rendered conversation: the text and the character spans (Unicode scalar values, as Python
/// counts) of its generation blocks or assistant contents.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rendered {
    /// The text the template rendered.
    pub text: String,
    /// `[start, end)` character spans, in order: the generation blocks' output, or (templates
    /// without them) each assistant message's content.
    pub spans: Vec<(usize, usize)>,
    /// Whether `spans` are generation blocks (else assistant contents).
    pub generation: bool,
    /// Per span, the turn it belongs to: the generation block's number, or the assistant
    /// message's (the first assistant message is 0; a message in parts may have several spans).
    pub turns: Vec<usize>,
    /// The last turn (the last generation block, or the last assistant message, even one whose
    /// content is empty and so has no span); `None` without any.
    pub last_turn: Option<usize>,
}

/// What a `tokenizer_config.json` says that templates use.
#[derive(Debug, Clone, Default)]
struct TokenizerConfig {
    /// The default template, and the named ones.
    template: Option<String>,
    named: Vec<(String, String)>,
    /// `bos_token`, `eos_token`, ... as strings.
    special: Vec<(String, String)>,
}

/// A chat template with its tokenizer: renders, tokenizes and masks conversations. `Sync`: one
/// instance serves many threads.
pub struct ChatTemplate {
    env: Environment<'static>,
    tokenizer: TextTokenizer,
    special_ids: HashSet<u32>,
    special_tokens: Vec<(String, String)>,
    template: String,
    has_generation: bool,
    loss_on: LossOn,
    add_generation_prompt: bool,
    extra: Vec<(String, Value)>,
    pairs: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("tokenizer", &self.tokenizer)
            .field("has_generation", &self.has_generation)
            .field("loss_on", &self.loss_on)
            .field("add_generation_prompt", &self.add_generation_prompt)
            .finish()
    }
}

fn read_limited(path: &Path) -> Result<String, ChatError> {
    use std::io::Read;
    let err = |detail: String| ChatError::Config {
        path: path.to_path_buf(),
        detail,
    };
    let f = std::fs::File::open(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let mut s = String::new();
    f.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut s)
        .map_err(|e| err(format!("cannot read: {e}")))?;
    if s.len() as u64 > MAX_CONFIG_BYTES {
        return Err(err(format!(
            "larger than the limit of {MAX_CONFIG_BYTES} bytes"
        )));
    }
    Ok(s)
}

/// A special token in a config: a string, or an `AddedToken` dict (`{"content": ...}`).
fn token_string(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(m) => m
            .get("content")
            .and_then(|c| c.as_str())
            .map(str::to_string),
        _ => None,
    }
}

fn parse_config(text: &str, path: &Path) -> Result<TokenizerConfig, ChatError> {
    let err = |detail: String| ChatError::Config {
        path: path.to_path_buf(),
        detail,
    };
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| err(format!("not valid JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| err("not a JSON object".to_string()))?;
    let mut cfg = TokenizerConfig::default();
    match obj.get("chat_template") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::String(s)) => cfg.template = Some(s.clone()),
        Some(serde_json::Value::Array(list)) => {
            for item in list {
                let name = item.get("name").and_then(|n| n.as_str());
                let tmpl = item.get("template").and_then(|t| t.as_str());
                match (name, tmpl) {
                    (Some(n), Some(t)) => cfg.named.push((n.to_string(), t.to_string())),
                    _ => {
                        return Err(err(
                            "chat_template: a list entry without a string `name` and `template`"
                                .to_string(),
                        ));
                    }
                }
            }
            cfg.template = cfg
                .named
                .iter()
                .find(|(n, _)| n == "default")
                .map(|(_, t)| t.clone());
        }
        Some(_) => {
            return Err(err(
                "chat_template must be a string or a list of {name, template}".to_string(),
            ));
        }
    }
    for name in SPECIAL_TOKEN_NAMES {
        if let Some(v) = obj.get(name) {
            match v {
                serde_json::Value::Null => {}
                other => {
                    let s = token_string(other).ok_or_else(|| {
                        err(format!(
                            "{name} must be a string or an AddedToken dict with `content`"
                        ))
                    })?;
                    cfg.special.push((name.to_string(), s));
                }
            }
        }
    }
    Ok(cfg)
}

/// Options of a [`ChatTemplate`] beyond the tokenizer.
#[derive(Debug, Clone)]
pub struct ChatOptions {
    /// The template's text, or the name of one of the config's named templates; `None`: the
    /// config's default.
    pub template: Option<String>,
    /// What the mask covers.
    pub loss_on: LossOn,
    /// `add_generation_prompt` as the template sees it (false for training data).
    pub add_generation_prompt: bool,
    /// More variables for the template (`apply_chat_template`'s `**kwargs`), e.g. `tools`,
    /// `documents`, `date_string`; they override the special tokens of the same name.
    pub extra: Vec<(String, Value)>,
    /// Each example is a prompt/completion pair (a sequence of two values: two lists of
    /// messages, or two strings) rather than one conversation; `loss_on` is then
    /// [`LossOn::Completion`] or [`LossOn::All`].
    pub pairs: bool,
}

impl Default for ChatOptions {
    fn default() -> Self {
        ChatOptions {
            template: None,
            loss_on: LossOn::Assistant,
            add_generation_prompt: false,
            extra: Vec::new(),
            pairs: false,
        }
    }
}

/// Rewrite `{% generation %}` / `{% endgeneration %}` (any whitespace control) into a filter
/// block; returns the new source and whether there was one.
fn rewrite_generation(src: &str) -> (String, bool) {
    let mut out = String::with_capacity(src.len() + 64);
    let mut found = false;
    let mut rest = src;
    while let Some(pos) = rest.find("{%") {
        out.push_str(&rest[..pos]);
        let tag = &rest[pos..];
        let mut i = 2;
        let b = tag.as_bytes();
        let mut open_ctl = "";
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            open_ctl = &tag[i..i + 1];
            i += 1;
        }
        let ws1 = tag[i..].len() - tag[i..].trim_start().len();
        let word_start = i + ws1;
        let word_end = word_start
            + tag[word_start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tag.len() - word_start);
        let word = &tag[word_start..word_end];
        let after = &tag[word_end..];
        let ws2 = after.len() - after.trim_start().len();
        let mut j = word_end + ws2;
        let mut close_ctl = "";
        if j < b.len() && (b[j] == b'-' || b[j] == b'+') {
            close_ctl = &tag[j..j + 1];
            j += 1;
        }
        let closes = tag[j..].starts_with("%}");
        if closes && (word == "generation" || word == "endgeneration") {
            found = true;
            let body = if word == "generation" {
                format!("filter {GENERATION_FILTER}")
            } else {
                "endfilter".to_string()
            };
            let _ = write!(out, "{{%{open_ctl} {body} {close_ctl}%}}");
            rest = &tag[j + 2..];
        } else {
            out.push_str("{%");
            rest = &tag[2..];
        }
    }
    out.push_str(rest);
    (out, found)
}

/// Python's `repr(float)`.
fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let sci = format!("{x:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{x}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    }
}

fn json_string(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && !(' '..='~').contains(&c) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn not_serializable(v: &Value) -> JinjaError {
    JinjaError::new(
        ErrorKind::InvalidOperation,
        format!(
            "tojson: a value of kind {} is not JSON serializable",
            v.kind()
        ),
    )
}

fn json_key(k: &Value) -> Result<String, JinjaError> {
    Ok(match k.kind() {
        ValueKind::String => k.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => if k.is_true() { "true" } else { "false" }.to_string(),
        ValueKind::None => "null".to_string(),
        ValueKind::Number if !k.is_integer() => py_float(f64::try_from(k.clone())?),
        ValueKind::Number => k.to_string(),
        _ => return Err(not_serializable(k)),
    })
}

fn to_json(v: &Value, style: &JsonStyle, level: usize, out: &mut String) -> Result<(), JinjaError> {
    if level > 512 {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "tojson: nested too deeply",
        ));
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(ind) = &style.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    };
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                let _ = write!(out, "{v}");
            } else {
                let x = f64::try_from(v.clone())?;
                if x.is_nan() {
                    out.push_str("NaN");
                } else if x.is_infinite() {
                    out.push_str(if x > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    out.push_str(&py_float(x));
                }
            }
        }
        ValueKind::String => json_string(v.as_str().unwrap_or_default(), style.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, level + 1);
                to_json(item, style, level + 1, out)?;
            }
            newline(out, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut pairs: Vec<(String, Value)> = Vec::new();
            for k in v.try_iter()? {
                let item = v.get_item(&k)?;
                pairs.push((json_key(&k)?, item));
            }
            if style.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            if pairs.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, (k, item)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline(out, level + 1);
                json_string(k, style.ensure_ascii, out);
                out.push_str(&style.key_sep);
                to_json(item, style, level + 1, out)?;
            }
            newline(out, level);
            out.push('}');
        }
        _ => return Err(not_serializable(v)),
    }
    Ok(())
}

/// `transformers`' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`:
/// Python's `json.dumps` with those arguments (no HTML escaping, unlike Jinja2's own filter).
fn tojson_filter(
    value: &Value,
    ensure_ascii: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, JinjaError> {
    let ensure_ascii = match ensure_ascii {
        Some(v) => v.is_true(),
        None => kwargs
            .get::<Option<Value>>("ensure_ascii")?
            .is_some_and(|v| v.is_true()),
    };
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.kind() {
            ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
            ValueKind::Number => Some(" ".repeat(v.as_usize().unwrap_or(0))),
            _ => {
                return Err(JinjaError::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer or a string",
                ));
            }
        },
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] => (
                    a.as_str().unwrap_or_default().to_string(),
                    b.as_str().unwrap_or_default().to_string(),
                ),
                _ => {
                    return Err(JinjaError::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings",
                    ));
                }
            }
        }
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    let sort_keys = kwargs
        .get::<Option<Value>>("sort_keys")?
        .is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let style = JsonStyle {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    to_json(value, &style, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn raise_exception(message: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, message))
}

fn strftime_now(format: String) -> Result<Value, JinjaError> {
    let mut s = String::new();
    write!(s, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        JinjaError::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(Value::from(s))
}

fn generation_filter(body: String) -> Value {
    let mut s = String::with_capacity(body.len() + 6);
    s.push(GEN_START);
    s.push_str(&body);
    s.push(GEN_END);
    Value::from_safe_string(s)
}

/// Python's `repr` of a string: single quotes unless it holds `'` and no `"`.
fn py_str_repr(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `repr` of a value (how Jinja2 prints a list or dict: `['a', 1, None]`).
fn py_repr(v: &Value, out: &mut String, depth: usize) -> Result<(), JinjaError> {
    if depth > 512 {
        return Err(JinjaError::new(
            ErrorKind::InvalidOperation,
            "a value nested too deeply to print",
        ));
    }
    match v.kind() {
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number if !v.is_integer() => out.push_str(&py_float(f64::try_from(v.clone())?)),
        ValueKind::String => py_str_repr(v.as_str().unwrap_or_default(), out),
        ValueKind::Seq => {
            out.push('[');
            for (i, item) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&item, out, depth + 1)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, k) in v.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                py_repr(&k, out, depth + 1)?;
                out.push_str(": ");
                py_repr(&v.get_item(&k)?, out, depth + 1)?;
            }
            out.push('}');
        }
        _ => {
            let _ = write!(out, "{v}");
        }
    }
    Ok(())
}

/// Python's printing of values in `{{ }}`: `True`, `False`, `None`, `repr(float)`, lists and
/// dicts as Python's `repr` (strings and the rest as minijinja prints them).
fn python_formatter(
    out: &mut minijinja::Output<'_>,
    state: &mut minijinja::State<'_, '_>,
    value: &Value,
) -> Result<(), JinjaError> {
    let text = match value.kind() {
        ValueKind::Bool | ValueKind::None | ValueKind::Seq | ValueKind::Map => {
            let mut s = String::new();
            py_repr(value, &mut s, 0)?;
            Some(s)
        }
        ValueKind::Number if !value.is_integer() => Some(py_float(f64::try_from(value.clone())?)),
        _ => None,
    };
    match text {
        Some(t) => out
            .write_str(&t)
            .map_err(|e| JinjaError::new(ErrorKind::WriteFailure, e.to_string())),
        None => minijinja::escape_formatter(out, state, value),
    }
}

fn jinja_message(e: &JinjaError) -> String {
    let mut s = match e.detail() {
        Some(d) if e.kind() == ErrorKind::InvalidOperation => d.to_string(),
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    if let Some(line) = e.line() {
        let _ = write!(s, " (template line {line})");
    }
    s
}

/// Whether any string in `v` holds one of our marks.
fn holds_marks(v: &Value) -> bool {
    match v.kind() {
        ValueKind::String => v
            .as_str()
            .is_some_and(|s| s.contains([GEN_START, GEN_END, MSG_START, MSG_END])),
        ValueKind::Seq | ValueKind::Map => match v.try_iter() {
            Ok(it) => it.into_iter().any(|k| {
                if v.kind() == ValueKind::Map {
                    holds_marks(&k) || v.get_item(&k).is_ok_and(|item| holds_marks(&item))
                } else {
                    holds_marks(&k)
                }
            }),
            Err(_) => false,
        },
        _ => false,
    }
}

/// A map value's entries in order.
fn map_entries(v: &Value) -> Result<Vec<(Value, Value)>, JinjaError> {
    let mut out = Vec::new();
    for k in v.try_iter()? {
        let item = v.get_item(&k)?;
        out.push((k, item));
    }
    Ok(out)
}

/// A map value (a dict) with `entries` in their order.
pub fn map_from(entries: Vec<(Value, Value)>) -> Value {
    let m: IndexMap<Value, Value> = entries.into_iter().collect();
    Value::from(m)
}

/// `transformers`' normalisation of a conversation: each message a dict, keys whose value is
/// `None` dropped, reasoning copied to `thinking` and `reasoning_content`.
fn normalize(conversation: &Value) -> Result<Vec<Vec<(Value, Value)>>, RenderError> {
    let shape = |s: String| RenderError::Shape(s);
    if conversation.kind() != ValueKind::Seq {
        return Err(shape(format!(
            "a conversation must be a list of messages, not a {}",
            conversation.kind()
        )));
    }
    let msgs: Vec<Value> = conversation
        .try_iter()
        .map_err(|e| shape(e.to_string()))?
        .collect();
    if msgs.is_empty() {
        return Err(shape(
            "cannot apply the chat template to an empty conversation".to_string(),
        ));
    }
    let mut out = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        if m.kind() != ValueKind::Map {
            return Err(shape(format!("message {i} is a {}, not a dict", m.kind())));
        }
        let mut entries: Vec<(Value, Value)> = map_entries(m)
            .map_err(|e| shape(e.to_string()))?
            .into_iter()
            .filter(|(_, v)| !v.is_none())
            .collect();
        let reasoning = REASONING_FIELDS.iter().find_map(|f| {
            entries
                .iter()
                .find(|(k, _)| k.as_str() == Some(f))
                .map(|(_, v)| v.clone())
        });
        if let Some(r) = reasoning {
            // {"thinking": r, **message, "reasoning_content": r}
            let mut aliased = vec![(Value::from("thinking"), r.clone())];
            for (k, v) in entries {
                if k.as_str() == Some("thinking") {
                    aliased[0].1 = v;
                } else {
                    aliased.push((k, v));
                }
            }
            match aliased
                .iter_mut()
                .find(|(k, _)| k.as_str() == Some("reasoning_content"))
            {
                Some(slot) => slot.1 = r,
                None => aliased.push((Value::from("reasoning_content"), r)),
            }
            entries = aliased;
        }
        out.push(entries);
    }
    Ok(out)
}

/// `s` with its whitespace-trimmed core between the marks.
fn mark_text(s: &str) -> Option<String> {
    let core = s.trim();
    if core.is_empty() {
        return None;
    }
    let lead = s.len() - s.trim_start().len();
    let mut out = String::with_capacity(s.len() + 6);
    out.push_str(&s[..lead]);
    out.push(MSG_START);
    out.push_str(core);
    out.push(MSG_END);
    out.push_str(&s[lead + core.len()..]);
    Some(out)
}

/// Mark an assistant message's content (a string, or the `text` of its text parts); returns the
/// number of marked pieces.
fn mark_content(content: &Value) -> (Value, usize) {
    match content.kind() {
        ValueKind::String => match mark_text(content.as_str().unwrap_or_default()) {
            Some(m) => (Value::from(m), 1),
            None => (content.clone(), 0),
        },
        ValueKind::Seq => {
            let mut n = 0;
            let parts: Vec<Value> = content
                .try_iter()
                .map(|it| it.collect())
                .unwrap_or_default();
            let marked: Vec<Value> = parts
                .into_iter()
                .map(|p| {
                    if p.kind() != ValueKind::Map {
                        return p;
                    }
                    let Ok(entries) = map_entries(&p) else {
                        return p;
                    };
                    let mut changed = false;
                    let entries = entries
                        .into_iter()
                        .map(|(k, v)| {
                            if !changed
                                && k.as_str() == Some("text")
                                && let Some(m) = v.as_str().and_then(mark_text)
                            {
                                changed = true;
                                return (k, Value::from(m));
                            }
                            (k, v)
                        })
                        .collect();
                    if changed {
                        n += 1;
                    }
                    map_from(entries)
                })
                .collect();
            (Value::from(marked), n)
        }
        _ => (content.clone(), 0),
    }
}

/// Remove the marks `start`/`end` from `text`; the character spans they enclosed.
fn strip_marks(
    text: &str,
    start: char,
    end: char,
) -> Result<(String, Vec<(usize, usize)>), RenderError> {
    let mut out = String::with_capacity(text.len());
    let mut spans = Vec::new();
    let mut chars = 0usize;
    let mut open: Vec<usize> = Vec::new();
    for c in text.chars() {
        if c == start {
            open.push(chars);
        } else if c == end {
            let s = open.pop().ok_or(RenderError::UnbalancedMarks)?;
            spans.push((s, chars));
        } else {
            out.push(c);
            chars += 1;
        }
    }
    if !open.is_empty() {
        return Err(RenderError::UnbalancedMarks);
    }
    Ok((out, spans))
}

/// `transformers`' mask: every token whose character offsets overlap a span (spans in order).
fn overlap_mask(offsets: &[(usize, usize)], spans: &[(usize, usize)], mask: &mut [u8]) {
    let mut si = 0;
    for (t, &(ts, te)) in offsets.iter().enumerate() {
        while si < spans.len() && ts >= spans[si].1 {
            si += 1;
        }
        if si == spans.len() {
            break;
        }
        if te > spans[si].0 {
            mask[t] = 1;
        }
    }
}

impl ChatTemplate {
    /// Load `path`: a `tokenizer.json`, or a directory holding `tokenizer.json` and
    /// `tokenizer_config.json` (and, if the config has no `chat_template`, `chat_template.jinja`).
    /// A `tokenizer_config.json` beside a `tokenizer.json` file is read too.
    pub fn from_path(
        path: impl AsRef<Path>,
        options: ChatOptions,
    ) -> Result<ChatTemplate, ChatError> {
        let path = path.as_ref();
        let (tok_path, dir) = if path.is_dir() {
            (path.join("tokenizer.json"), path.to_path_buf())
        } else {
            (
                path.to_path_buf(),
                path.parent().map(Path::to_path_buf).unwrap_or_default(),
            )
        };
        let tokenizer = TextTokenizer::from_file(&tok_path)?;
        let cfg_path = dir.join("tokenizer_config.json");
        let mut cfg = if cfg_path.is_file() {
            parse_config(&read_limited(&cfg_path)?, &cfg_path)?
        } else {
            TokenizerConfig::default()
        };
        let jinja_path = dir.join("chat_template.jinja");
        if cfg.template.is_none() && jinja_path.is_file() {
            cfg.template = Some(read_limited(&jinja_path)?);
        }
        ChatTemplate::build(tokenizer, cfg, options, path)
    }

    /// A template over a loaded tokenizer; `config` is the text of a `tokenizer_config.json`
    /// (or `None`).
    pub fn new(
        tokenizer: TextTokenizer,
        config: Option<&str>,
        options: ChatOptions,
    ) -> Result<ChatTemplate, ChatError> {
        let cfg = match config {
            Some(text) => parse_config(text, Path::new("<tokenizer_config>"))?,
            None => TokenizerConfig::default(),
        };
        let path = tokenizer.path().to_path_buf();
        ChatTemplate::build(tokenizer, cfg, options, &path)
    }

    fn build(
        tokenizer: TextTokenizer,
        cfg: TokenizerConfig,
        options: ChatOptions,
        path: &Path,
    ) -> Result<ChatTemplate, ChatError> {
        match (options.pairs, options.loss_on) {
            (true, LossOn::Completion | LossOn::All)
            | (false, LossOn::Assistant | LossOn::Last | LossOn::All) => {}
            (true, other) => {
                return Err(ChatError::Invalid(format!(
                    "loss_on {:?} is for conversations; prompt/completion pairs take \"completion\" or \"all\"",
                    other.as_str()
                )));
            }
            (false, _) => {
                return Err(ChatError::Invalid(
                    "loss_on \"completion\" is for prompt/completion pairs (the `completion` field option)"
                        .to_string(),
                ));
            }
        }
        let template = match options.template {
            Some(t) => match cfg.named.iter().find(|(n, _)| *n == t) {
                Some((_, named)) => named.clone(),
                None => t,
            },
            None => cfg.template.clone().ok_or_else(|| ChatError::Config {
                path: path.to_path_buf(),
                detail: if cfg.named.is_empty() {
                    "no chat template: the tokenizer_config.json has no `chat_template` (pass one)"
                        .to_string()
                } else {
                    format!(
                        "no template named \"default\" among {:?} (name one)",
                        cfg.named.iter().map(|(n, _)| n).collect::<Vec<_>>()
                    )
                },
            })?,
        };
        let (source, has_generation) = rewrite_generation(&template);
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| ChatError::Template(e.to_string()))?,
        );
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson_filter);
        env.add_filter(GENERATION_FILTER, generation_filter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|e| ChatError::Template(jinja_message(&e)))?;
        let special_ids = tokenizer
            .inner()
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, _)| id)
            .collect();
        Ok(ChatTemplate {
            env,
            tokenizer,
            special_ids,
            special_tokens: cfg.special,
            template,
            has_generation,
            loss_on: options.loss_on,
            add_generation_prompt: options.add_generation_prompt,
            extra: options.extra,
            pairs: options.pairs,
        })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &TextTokenizer {
        &self.tokenizer
    }

    /// The template's text (as given, before the generation blocks were rewritten).
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Whether the template marks `{% generation %}` blocks.
    pub fn has_generation(&self) -> bool {
        self.has_generation
    }

    /// What the mask covers.
    pub fn loss_on(&self) -> LossOn {
        self.loss_on
    }

    /// The id of a token of the vocabulary (added and special tokens included) by its text.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.inner().token_to_id(token)
    }

    /// The special tokens passed to the template (`bos_token`, ...), from the config.
    pub fn special_tokens(&self) -> &[(String, String)] {
        &self.special_tokens
    }

    fn render_messages(&self, messages: Value) -> Result<String, RenderError> {
        self.render_with(messages, self.add_generation_prompt)
    }

    /// The template rendered for `messages`, `add_generation_prompt` as given.
    fn render_with(
        &self,
        messages: Value,
        add_generation_prompt: bool,
    ) -> Result<String, RenderError> {
        let mut ctx: IndexMap<Value, Value> = IndexMap::with_capacity(8 + self.extra.len());
        ctx.insert(Value::from("messages"), messages);
        ctx.insert(Value::from("tools"), Value::from(()));
        ctx.insert(Value::from("documents"), Value::from(()));
        ctx.insert(
            Value::from("add_generation_prompt"),
            Value::from(add_generation_prompt),
        );
        for (k, v) in &self.special_tokens {
            ctx.insert(Value::from(k.as_str()), Value::from(v.as_str()));
        }
        for (k, v) in &self.extra {
            ctx.insert(Value::from(k.as_str()), v.clone());
        }
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| RenderError::Template(jinja_message(&e)))?;
        tmpl.render(Value::from(ctx))
            .map_err(|e| RenderError::Template(jinja_message(&e)))
    }

    /// Render one conversation (a list of messages) with the spans the mask is made of; errors
    /// are the detail of a [`ChatError::Conversation`].
    pub fn render(&self, conversation: &Value) -> Result<Rendered, RenderError> {
        if self.pairs {
            // the text of prompt + completion (two lists of messages rendered as one
            // conversation; two strings as they are, the `eos_token` as `encode` adds it)
            let parts: Vec<Value> = conversation
                .try_iter()
                .map_err(|e| RenderError::Shape(e.to_string()))?
                .collect();
            let text = match parts.as_slice() {
                [p, c] if p.kind() == ValueKind::Seq && c.kind() == ValueKind::Seq => {
                    let mut whole: Vec<Value> = Vec::new();
                    for part in [p, c] {
                        whole.extend(normalize(part)?.into_iter().map(map_from));
                    }
                    self.render_messages(Value::from(whole))?
                }
                [p, c] if p.as_str().is_some() && c.as_str().is_some() => {
                    let c = c.as_str().unwrap_or("");
                    format!("{}{c}{}", p.as_str().unwrap_or(""), self.eos_after(c))
                }
                _ => {
                    return Err(RenderError::Shape(
                        "a prompt/completion pair must be two lists of messages or two strings"
                            .to_string(),
                    ));
                }
            };
            return Ok(Rendered {
                text,
                ..Rendered::default()
            });
        }
        let msgs = normalize(conversation)?;
        if (self.has_generation || self.loss_on != LossOn::All) && holds_marks(conversation) {
            return Err(RenderError::ReservedMarks);
        }
        let plain: Vec<Value> = msgs.iter().map(|m| map_from(m.clone())).collect();
        let text = self.render_messages(Value::from(plain))?;
        if self.has_generation {
            let (text, spans) = strip_marks(&text, GEN_START, GEN_END)?;
            let turns: Vec<usize> = (0..spans.len()).collect();
            let last_turn = spans.len().checked_sub(1);
            return Ok(Rendered {
                text,
                spans,
                generation: true,
                turns,
                last_turn,
            });
        }
        if self.loss_on == LossOn::All {
            return Ok(Rendered {
                text,
                ..Rendered::default()
            });
        }
        // Assistant contents: render again with them marked.
        let mut owners: Vec<usize> = Vec::new();
        let mut cores: Vec<(String, usize)> = Vec::new();
        let mut assistants = 0usize;
        let marked: Vec<Value> =
            msgs.iter()
                .map(|m| {
                    let is_assistant = m.iter().any(|(k, v)| {
                        k.as_str() == Some("role") && v.as_str() == Some("assistant")
                    });
                    if !is_assistant {
                        return map_from(m.clone());
                    }
                    let turn = assistants;
                    assistants += 1;
                    let entries =
                        m.iter()
                            .map(|(k, v)| {
                                if k.as_str() == Some("content") {
                                    let (mv, n) = mark_content(v);
                                    owners.extend(std::iter::repeat_n(turn, n));
                                    if let Some(s) = v.as_str() {
                                        let core = s.trim();
                                        if !core.is_empty() {
                                            cores.push((core.to_string(), turn));
                                        }
                                    } else if let Ok(it) = v.try_iter() {
                                        for p in it {
                                            if let Some(t) = p.get_attr("text").ok().and_then(|t| {
                                                t.as_str().map(|s| s.trim().to_string())
                                            }) && !t.is_empty()
                                            {
                                                cores.push((t, turn));
                                            }
                                        }
                                    }
                                    (k.clone(), mv)
                                } else {
                                    (k.clone(), v.clone())
                                }
                            })
                            .collect();
                    map_from(entries)
                })
                .collect();
        let marked_text = self.render_messages(Value::from(marked))?;
        if let Ok((stripped, spans)) = strip_marks(&marked_text, MSG_START, MSG_END)
            && stripped == text
            && spans.len() == owners.len()
        {
            return Ok(Rendered {
                text,
                spans,
                generation: false,
                turns: owners,
                last_turn: assistants.checked_sub(1),
            });
        }
        // The template changed the marked text: find each content in order instead.
        let mut spans = Vec::new();
        let mut turns = Vec::new();
        let mut cursor = 0usize; // bytes
        for (core, turn) in &cores {
            if let Some(pos) = text[cursor..].find(core.as_str()) {
                let start = cursor + pos;
                let end = start + core.len();
                spans.push((text[..start].chars().count(), text[..end].chars().count()));
                turns.push(*turn);
                cursor = end;
            }
        }
        Ok(Rendered {
            text,
            spans,
            generation: false,
            turns,
            last_turn: assistants.checked_sub(1),
        })
    }

    /// The `eos_token` TRL appends to a string completion: none when it already ends with it.
    fn eos_after(&self, completion: &str) -> &str {
        self.special_tokens
            .iter()
            .find(|(k, _)| k == "eos_token")
            .map(|(_, v)| v.as_str())
            .filter(|e| !completion.ends_with(e))
            .unwrap_or("")
    }

    /// Encode one prompt/completion pair as TRL's `SFTTrainer` does: two lists of messages are
    /// rendered as the prompt alone (with the generation prompt) and as prompt + completion;
    /// two strings are tokenized as the prompt alone and as prompt + completion (the
    /// `eos_token` appended to the completion unless it ends with it), special tokens added.
    /// The mask covers the tokens after the prompt's (all of them with [`LossOn::All`]).
    fn encode_pair(&self, pair: &Value, index: u64) -> Result<ChatEncoding, ChatError> {
        let err = |detail: String| ChatError::Conversation { index, detail };
        let parts: Vec<Value> = match pair.kind() {
            ValueKind::Seq => pair.try_iter().map_err(|e| err(e.to_string()))?.collect(),
            _ => Vec::new(),
        };
        let [prompt, completion] = parts.as_slice() else {
            return Err(err(
                "a prompt/completion pair must be two values (the prompt and the completion)"
                    .to_string(),
            ));
        };
        let tokenize = |text: &str, special: bool| {
            self.tokenizer
                .inner()
                .encode(text, special)
                .map(|e| e.get_ids().to_vec())
                .map_err(|e| err(format!("tokenization failed: {e}")))
        };
        let (prompt_ids, input_ids) = match (prompt.kind(), completion.kind()) {
            (ValueKind::Seq, ValueKind::Seq) => {
                let plain = |v: &Value| -> Result<Vec<Value>, ChatError> {
                    Ok(normalize(v)
                        .map_err(|e| err(e.to_string()))?
                        .into_iter()
                        .map(map_from)
                        .collect())
                };
                let p = plain(prompt)?;
                let mut whole = p.clone();
                whole.extend(plain(completion)?);
                let render = |msgs: Vec<Value>, generation_prompt: bool| {
                    self.render_with(Value::from(msgs), generation_prompt)
                        .map_err(|e| err(e.to_string()))
                };
                let p_text = render(p, true)?;
                let text = render(whole, self.add_generation_prompt)?;
                (tokenize(&p_text, false)?, tokenize(&text, false)?)
            }
            (ValueKind::String, ValueKind::String) => {
                let (p, c) = (
                    prompt.as_str().unwrap_or(""),
                    completion.as_str().unwrap_or(""),
                );
                let text = format!("{p}{c}{}", self.eos_after(c));
                (tokenize(p, true)?, tokenize(&text, true)?)
            }
            (a, b) => {
                return Err(err(format!(
                    "a prompt/completion pair must be two lists of messages or two strings, not a {a} and a {b}"
                )));
            }
        };
        let from = match self.loss_on {
            LossOn::All => 0,
            _ => prompt_ids.len().min(input_ids.len()),
        };
        let mut mask = vec![0u8; input_ids.len()];
        mask[from..].fill(1);
        Ok(ChatEncoding { input_ids, mask })
    }

    /// Encode one conversation (or, with `pairs`, one prompt/completion pair): its tokens and
    /// mask. Errors name conversation `index`.
    pub fn encode(&self, conversation: &Value, index: u64) -> Result<ChatEncoding, ChatError> {
        if self.pairs {
            return self.encode_pair(conversation, index);
        }
        let err = |detail: String| ChatError::Conversation { index, detail };
        let rendered = self.render(conversation).map_err(|e| err(e.to_string()))?;
        let (input_ids, offsets) = self
            .tokenizer
            .encode_with_offsets(rendered.text.as_str())
            .map_err(|e| err(e.to_string()))?;
        let offsets = offsets.as_slice();
        let mut mask = vec![0u8; input_ids.len()];
        match self.loss_on {
            // (`Completion` only with `pairs`, which `encode_pair` encodes)
            LossOn::All | LossOn::Completion => mask.fill(1),
            LossOn::Assistant | LossOn::Last => {
                let selected: Vec<usize> = (0..rendered.spans.len())
                    .filter(|&i| {
                        self.loss_on == LossOn::Assistant
                            || Some(rendered.turns[i]) == rendered.last_turn
                    })
                    .collect();
                if rendered.generation {
                    let spans: Vec<(usize, usize)> =
                        selected.iter().map(|&i| rendered.spans[i]).collect();
                    overlap_mask(offsets, &spans, &mut mask);
                } else if !selected.is_empty() {
                    // byte offset of each character (and of the end), for the text of a token
                    let mut char_bytes: Vec<usize> =
                        rendered.text.char_indices().map(|(b, _)| b).collect();
                    char_bytes.push(rendered.text.len());
                    for &i in &selected {
                        // the end of turn follows the last span of a message (not each part)
                        let last_of_turn = rendered.turns.get(i + 1) != Some(&rendered.turns[i]);
                        self.mask_turn(
                            &rendered.text,
                            &char_bytes,
                            &input_ids,
                            offsets,
                            rendered.spans[i],
                            last_of_turn,
                            &mut mask,
                        );
                    }
                }
            }
        }
        Ok(ChatEncoding { input_ids, mask })
    }

    /// Mask the tokens of one assistant content span and the end-of-turn token after it: the
    /// first special token that follows with only whitespace tokens between (those are masked too).
    #[allow(clippy::too_many_arguments)]
    fn mask_turn(
        &self,
        text: &str,
        char_bytes: &[usize],
        ids: &[u32],
        offsets: &[(usize, usize)],
        span: (usize, usize),
        end_of_turn: bool,
        mask: &mut [u8],
    ) {
        let mut last = None;
        for (t, &(ts, te)) in offsets.iter().enumerate() {
            if ts >= span.1 {
                break;
            }
            if te > span.0 {
                mask[t] = 1;
                last = Some(t);
            }
        }
        let Some(last) = last else { return };
        if !end_of_turn {
            return;
        }
        let mut between = Vec::new();
        for t in last + 1..ids.len() {
            if self.special_ids.contains(&ids[t]) {
                mask[t] = 1;
                for b in between {
                    mask[b] = 1;
                }
                return;
            }
            let (ts, te) = offsets[t];
            let byte = |c: usize| char_bytes[c.min(char_bytes.len() - 1)];
            let piece = &text[byte(ts)..byte(te.max(ts))];
            if !piece.trim().is_empty() {
                return;
            }
            between.push(t);
        }
    }

    /// Encode many conversations on `threads` native threads (0: all cores), in order; the first
    /// error (lowest index) is returned, named by `first_index + i`.
    pub fn encode_many(
        &self,
        conversations: &[Value],
        threads: usize,
        first_index: u64,
    ) -> Result<Vec<ChatEncoding>, ChatError> {
        crate::parallel::map_indexed(conversations.len(), threads, 16, |i| {
            self.encode(&conversations[i], first_index + i as u64)
        })
        .map_err(|_| ChatError::Conversation {
            index: first_index,
            detail: "an encoding thread panicked".to_string(),
        })?
        .into_iter()
        .collect()
    }
}

/// Expand the image placeholders of an encoded conversation: the `k`-th occurrence of the token
/// `placeholder` becomes `tokens[k]` copies of it, each with the placeholder's mask value, as
/// `transformers`' processors expand `<|image_pad|>` in the text before tokenizing (and shift
/// the assistant spans past the expansion). The number of placeholders must be the number of
/// images, and the expanded length at most `max_len`. Errors name conversation `index`.
pub fn expand_placeholders(
    enc: &mut ChatEncoding,
    placeholder: u32,
    tokens: &[u64],
    max_len: u64,
    index: u64,
) -> Result<(), ChatError> {
    let err = |detail: String| ChatError::Conversation { index, detail };
    let found = enc.input_ids.iter().filter(|&&t| t == placeholder).count();
    if found != tokens.len() {
        return Err(err(format!(
            "{found} image placeholders (token {placeholder}) for {} images: each image of the \
             sample needs one {{\"type\": \"image\"}} part in its messages, in order",
            tokens.len()
        )));
    }
    if found == 0 {
        return Ok(());
    }
    let len = tokens
        .iter()
        .try_fold(enc.input_ids.len() as u64 - found as u64, |a, &t| {
            a.checked_add(t)
        })
        .filter(|&l| l <= max_len)
        .ok_or_else(|| {
            err(format!(
                "its images expand it past {max_len} tokens ({} images)",
                tokens.len()
            ))
        })?;
    let mut ids = Vec::with_capacity(len as usize);
    let mut mask = Vec::with_capacity(len as usize);
    let mut next = tokens.iter();
    for (&t, &m) in enc.input_ids.iter().zip(&enc.mask) {
        if t == placeholder {
            let n = *next.next().expect("counted above") as usize;
            ids.extend(std::iter::repeat_n(t, n));
            mask.extend(std::iter::repeat_n(m, n));
        } else {
            ids.push(t);
            mask.push(m);
        }
    }
    enc.input_ids = ids;
    enc.mask = mask;
    Ok(())
}

/// A conversation (or any template value) from JSON text, keys in their order.
pub fn value_from_json(json: &str) -> Result<Value, serde_json::Error> {
    serde_json::from_str::<Value>(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHATML: &str = "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are helpful.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] }}<|im_end|>{% endgeneration %}{% else %}{{ message['content'] }}<|im_end|>{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    const PLAIN: &str = "{{ bos_token }}{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role: ' + m.role) }}{% endif %}[{{ m.role }}] {{ m.content | trim }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}\n{% endfor %}";

    #[test]
    fn image_placeholders_expand_to_each_images_tokens_keeping_their_mask() {
        let mut enc = ChatEncoding {
            input_ids: vec![1, 9, 2, 9, 3],
            mask: vec![0, 0, 0, 1, 1],
        };
        expand_placeholders(&mut enc, 9, &[2, 3], 100, 7).unwrap();
        assert_eq!(enc.input_ids, vec![1, 9, 9, 2, 9, 9, 9, 3]);
        assert_eq!(enc.mask, vec![0, 0, 0, 0, 1, 1, 1, 1]);
        // a count of images other than the placeholders', and a length over the bound
        let mut two = ChatEncoding {
            input_ids: vec![9, 9],
            mask: vec![0, 0],
        };
        let e = expand_placeholders(&mut two.clone(), 9, &[4], 100, 3).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("conversation 3: 2 image placeholders (token 9) for 1 images"),
            "{e}"
        );
        let e = expand_placeholders(&mut two.clone(), 9, &[u64::MAX, 2], 100, 4).unwrap_err();
        assert!(e.to_string().contains("past 100 tokens"), "{e}");
        expand_placeholders(&mut two, 9, &[0, 1], 100, 5).unwrap();
        assert_eq!(two.input_ids, vec![9]);
    }

    fn tokenizer() -> TextTokenizer {
        let texts: Vec<String> = (0..50)
            .map(|i| format!("hello world {i} the assistant says yes and the user asks why"))
            .collect();
        let tok = crate::text::train_word_level(&texts, 500).unwrap();
        let mut inner = tok.inner().clone();
        inner.add_special_tokens(&[
            tokenizers::AddedToken::from("<|im_start|>", true),
            tokenizers::AddedToken::from("<|im_end|>", true),
        ]);
        TextTokenizer::from_tokenizer(inner).unwrap()
    }

    fn template(t: &str, config: Option<&str>, loss_on: LossOn) -> ChatTemplate {
        ChatTemplate::new(
            tokenizer(),
            config,
            ChatOptions {
                template: Some(t.to_string()),
                loss_on,
                ..ChatOptions::default()
            },
        )
        .unwrap()
    }

    fn conv(json: &str) -> Value {
        value_from_json(json).unwrap()
    }

    fn masked_text(t: &ChatTemplate, enc: &ChatEncoding) -> String {
        let ids: Vec<u32> = enc
            .input_ids
            .iter()
            .zip(&enc.mask)
            .filter(|(_, m)| **m == 1)
            .map(|(i, _)| *i)
            .collect();
        t.tokenizer().decode(&ids).unwrap()
    }

    const TWO_TURNS: &str = r#"[{"role":"user","content":"hello world"},{"role":"assistant","content":"yes"},{"role":"user","content":"why"},{"role":"assistant","content":"the assistant says yes"}]"#;

    #[test]
    fn generation_blocks_give_the_spans_of_their_output() {
        let t = template(CHATML, None, LossOn::Assistant);
        assert!(t.has_generation());
        let r = t.render(&conv(TWO_TURNS)).unwrap();
        assert!(
            r.text
                .starts_with("<|im_start|>system\nYou are helpful.<|im_end|>\n")
        );
        assert!(!r.text.contains(GEN_START) && !r.text.contains(GEN_END));
        let spans: Vec<String> = r
            .spans
            .iter()
            .map(|&(s, e)| r.text.chars().skip(s).take(e - s).collect())
            .collect();
        assert_eq!(spans, ["yes<|im_end|>", "the assistant says yes<|im_end|>"]);
        let enc = t.encode(&conv(TWO_TURNS), 0).unwrap();
        assert_eq!(enc.mask.len(), enc.input_ids.len());
        assert_eq!(
            masked_text(&t, &enc),
            "yes <|im_end|> the assistant says yes <|im_end|>"
        );
        let last = template(CHATML, None, LossOn::Last)
            .encode(&conv(TWO_TURNS), 0)
            .unwrap();
        assert_eq!(last.input_ids, enc.input_ids);
        assert_eq!(masked_text(&t, &last), "the assistant says yes <|im_end|>");
        let all = template(CHATML, None, LossOn::All)
            .encode(&conv(TWO_TURNS), 0)
            .unwrap();
        assert!(all.mask.iter().all(|&m| m == 1));
    }

    #[test]
    fn templates_without_generation_mask_content_and_end_of_turn() {
        let cfg =
            r#"{"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": "</s>"}"#;
        let t = template(PLAIN, Some(cfg), LossOn::Assistant);
        assert!(!t.has_generation());
        let c = conv(
            r#"[{"role":"user","content":"hello"},{"role":"assistant","content":"  yes and why \n"},{"role":"user","content":"world"},{"role":"assistant","content":"the user"}]"#,
        );
        let enc = t.encode(&c, 0).unwrap();
        let text = t.render(&c).unwrap().text;
        // trim_blocks: the newline after `{% endif %}` goes, as in Jinja2
        assert_eq!(
            text,
            "<s>[user] hello[assistant] yes and why</s>[user] world[assistant] the user</s>"
        );
        assert_eq!(masked_text(&t, &enc), "yes and why </s> the user </s>");
        let last = template(PLAIN, Some(cfg), LossOn::Last)
            .encode(&c, 0)
            .unwrap();
        assert_eq!(masked_text(&t, &last), "the user </s>");
    }

    #[test]
    fn parts_mask_each_text_and_one_end_of_turn() {
        let parts = "{% for m in messages %}[{{ m.role }}] {% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% else %}<|im_start|>{% endif %}{% endfor %}{% endif %}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}";
        let cfg = r#"{"eos_token": "</s>"}"#;
        let c = conv(
            r#"[{"role":"user","content":[{"type":"image"},{"type":"text","text":"why"}]},{"role":"assistant","content":[{"type":"text","text":"yes "},{"type":"image"},{"type":"text","text":"the user"}]},{"role":"user","content":"hello"},{"role":"assistant","content":""}]"#,
        );
        let t = template(parts, Some(cfg), LossOn::Assistant);
        let enc = t.encode(&c, 0).unwrap();
        // the image placeholder between the parts is not the end of the turn; the empty turn
        // masks nothing
        assert_eq!(masked_text(&t, &enc), "yes the user </s>");
        let last = template(parts, Some(cfg), LossOn::Last)
            .encode(&c, 0)
            .unwrap();
        assert!(last.mask.iter().all(|&m| m == 0), "{last:?}");
    }

    #[test]
    fn raise_exception_names_the_conversation_and_the_message() {
        let t = template(
            PLAIN,
            Some(r#"{"bos_token": "<s>", "eos_token": "</s>"}"#),
            LossOn::Assistant,
        );
        let bad = conv(r#"[{"role":"robot","content":"x"}]"#);
        let good = conv(r#"[{"role":"user","content":"x"}]"#);
        let e = t
            .encode_many(&[good.clone(), good.clone(), bad, good], 2, 10)
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, ChatError::Conversation { index: 12, .. }),
            "{msg}"
        );
        assert!(
            msg.contains("conversation 12") && msg.contains("bad role: robot"),
            "{msg}"
        );
        let e = t.encode(&conv("[]"), 3).unwrap_err().to_string();
        assert!(e.contains("conversation 3") && e.contains("empty"), "{e}");
        let e = t
            .encode(&conv(r#"{"role":"user"}"#), 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("list of messages"), "{e}");
    }

    #[test]
    fn encode_many_matches_encode_in_order() {
        let t = template(CHATML, None, LossOn::Assistant);
        let convs: Vec<Value> = (0..50)
            .map(|i| {
                conv(&format!(
                    r#"[{{"role":"user","content":"hello {i}"}},{{"role":"assistant","content":"world {}"}}]"#,
                    i * 7
                ))
            })
            .collect();
        let many = t.encode_many(&convs, 3, 0).unwrap();
        for (i, c) in convs.iter().enumerate() {
            assert_eq!(many[i], t.encode(c, i as u64).unwrap());
        }
    }

    #[test]
    fn bad_templates_and_configs_are_typed_errors() {
        let e = ChatTemplate::new(
            tokenizer(),
            None,
            ChatOptions {
                template: Some("{% for %}".into()),
                ..ChatOptions::default()
            },
        )
        .unwrap_err();
        assert!(matches!(e, ChatError::Template(_)), "{e}");
        let e = ChatTemplate::new(tokenizer(), Some("{}"), ChatOptions::default()).unwrap_err();
        assert!(e.to_string().contains("no chat template"), "{e}");
        let e = ChatTemplate::new(tokenizer(), Some("[1]"), ChatOptions::default()).unwrap_err();
        assert!(matches!(e, ChatError::Config { .. }), "{e}");
        // named templates: "default" is the default, others by name
        let cfg = r#"{"chat_template": [{"name": "default", "template": "D{{ messages|length }}"}, {"name": "tool_use", "template": "T"}]}"#;
        let d = ChatTemplate::new(tokenizer(), Some(cfg), ChatOptions::default()).unwrap();
        assert_eq!(
            d.render(&conv(r#"[{"role":"user","content":"x"}]"#))
                .unwrap()
                .text,
            "D1"
        );
        let n = ChatTemplate::new(
            tokenizer(),
            Some(cfg),
            ChatOptions {
                template: Some("tool_use".into()),
                ..ChatOptions::default()
            },
        )
        .unwrap();
        assert_eq!(n.template(), "T");
        assert!(LossOn::parse("everything").is_err());
    }

    #[test]
    fn tojson_is_pythons_json_dumps() {
        let t = template(
            "{{ messages[0] | tojson }}|{{ messages[0] | tojson(indent=2) }}|{{ messages[0].x | tojson(ensure_ascii=true) }}|{{ messages[0] | tojson(separators=[',', ':'], sort_keys=true) }}",
            None,
            LossOn::All,
        );
        let r = t
            .render(&conv(r#"[{"role":"user","x":"é\"\n\u0001😀","n":[1,2.5,1e-7,1e20,true,null],"e":{},"l":[]}]"#))
            .unwrap();
        let parts: Vec<&str> = r.text.split('|').collect();
        assert_eq!(
            parts[0],
            r#"{"role": "user", "x": "é\"\n\u0001😀", "n": [1, 2.5, 1e-07, 1e+20, true, null], "e": {}, "l": []}"#
        );
        assert_eq!(
            parts[1],
            "{\n  \"role\": \"user\",\n  \"x\": \"é\\\"\\n\\u0001😀\",\n  \"n\": [\n    1,\n    2.5,\n    1e-07,\n    1e+20,\n    true,\n    null\n  ],\n  \"e\": {},\n  \"l\": []\n}"
        );
        assert_eq!(parts[2], r#""\u00e9\"\n\u0001\ud83d\ude00""#);
        assert!(
            parts[3].starts_with(r#"{"e":{},"l":[],"n":[1,2.5"#),
            "{}",
            parts[3]
        );
    }

    #[test]
    fn python_printing_and_methods() {
        let t = template(
            "{{ messages[0].content.strip().startswith('a') }} {{ none }} {{ 1.0 }} {{ 0.00001 }} {% for k, v in messages[0].items() %}{{ k }}={{ v | length }};{% endfor %}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}x{% endfor %}",
            None,
            LossOn::All,
        );
        let r = t
            .render(&conv(
                r#"[{"role":"user","content":"  abc ","drop":null},{"role":"user","content":"b"}]"#,
            ))
            .unwrap();
        assert_eq!(r.text, "True None 1.0 1e-05 role=4;content=6;x");
    }

    #[test]
    fn reasoning_fields_are_aliased_as_transformers_does() {
        let t = template("{{ messages[0] | tojson }}", None, LossOn::All);
        let r = t
            .render(&conv(
                r#"[{"role":"assistant","reasoning":"r","content":"c"}]"#,
            ))
            .unwrap();
        assert_eq!(
            r.text,
            r#"{"thinking": "r", "role": "assistant", "reasoning": "r", "content": "c", "reasoning_content": "r"}"#
        );
    }

    #[test]
    fn generation_rewrite_keeps_whitespace_control() {
        let (s, found) = rewrite_generation("a{%- generation -%}b{%+endgeneration%}{% if x %}");
        assert!(found);
        assert_eq!(
            s,
            "a{%- filter __stokehold_generation -%}b{%+ endfilter %}{% if x %}"
        );
        assert!(!rewrite_generation("{% generations %}").1);
    }

    #[test]
    fn marks_in_the_data_are_refused() {
        let t = template(CHATML, None, LossOn::Assistant);
        let e = t
            .encode(&conv(r#"[{"role":"user","content":"a\ufdd0"}]"#), 7)
            .unwrap_err()
            .to_string();
        assert!(e.contains("conversation 7") && e.contains("U+FDD0"), "{e}");
    }

    #[test]
    fn strftime_now_formats_local_time() {
        let t = template("{{ strftime_now('%Y') }}", None, LossOn::All);
        let r = t
            .render(&conv(r#"[{"role":"user","content":"x"}]"#))
            .unwrap();
        assert_eq!(r.text.len(), 4);
        assert!(r.text.chars().all(|c| c.is_ascii_digit()));
    }
}
