//! [`ChatRows`]: whole conversations packed into rows of `seq_len` tokens (supervised
//! fine-tuning), the samples of `SequenceLoader(..., text=ChatTemplate(...), packing="whole")`.
//!
//! **Packing is an order, not a stage** (ARCHITECTURE.md). The records of a dataset hold a
//! conversation each (a field whose bytes are the UTF-8 JSON text of the list of messages). Every
//! conversation's token count, by the same render + tokenize + mask that filling runs
//! ([`stokehold_ops::chat::ChatTemplate::encode`]), is counted once ([`ChatPlanner`]): lazily,
//! a window's conversations when its rows are first needed and the rest by a background thread
//! (for a mixture's sources, all when the loader is made). The plan
//! of an epoch is then a pure function of (seed, epoch, counts): the conversations in the
//! loader's shuffle, cut into windows of `window` candidates; each window packed by
//! best-fit-decreasing into rows of at most `seq_len` tokens ([`pack_window`]); the rows of a
//! window permuted by the seed (shuffled loaders). The rows of all windows, in order, are the
//! **row order** of the epoch ([`EpochRows`], planned window by window: [`EpochPlan`], its
//! length known late until then); the engine's position counts rows, so a resume state is a
//! position in the row order and stays exact on any number of ranks.
//!
//! A row's slot is filled from its conversations one after another (their encodings kept from
//! the count pass within `keep_encodings`, else encoded again: the same tokens the count came
//! from), then padding: `input_ids` (`pad_id` in padding), `labels`
//! (the token where the loss mask is 1, else -100), `position_ids` (restarting at 0 at every
//! conversation and at the padding), `segment_ids` (the conversation's index in the row, -1 in
//! padding) and `doc_ids` (the dataset indices of the row's conversations, -1 padded to the
//! longest list of the batch).
//!
//! A conversation longer than `seq_len` is truncated to `seq_len` tokens (a row of its own) or
//! dropped from the plan ([`Overlong`]); one that cannot be read or encoded fails the batch whose
//! window holds it (`on_error = fail`, naming the conversation), or is left out of the plan and
//! counted when its window is counted (`on_error = skip`, within `max_skip_fraction` of the
//! whole dataset). [`ChatPlanner::summary`] reports these and the fill.
//!
//! Row ids carry their epoch (`epoch << 40 | row`), so filling and the batch's shapes need no
//! other state than the id.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use stokehold_format::{ArrayValue, DType, FieldValue};
use stokehold_ops::DEFAULT_MAX_PIXELS;
use stokehold_ops::chat::{
    ChatEncoding, ChatOptions, ChatTemplate, LossOn, Value, value_from_json,
};
use stokehold_storage::Dataset;

use super::chat_vision::{ChatVision, VisionSpec, mrope_positions};
use crate::error::{EngineError, RecordPlace, Result, StageError};
use crate::order::{Loadable, Order};
use crate::sampler::{EpochOrder, LateLen, PositionMap, Shuffle};
use crate::samples::{Layout, Samples, SlotWriter, TaskCtx, TaskIo};
use crate::stages::Output;
use crate::state::fingerprint;
use crate::units::Budget;

/// The label of positions outside the loss mask and of padding.
pub const IGNORE_LABEL: i64 = -100;

/// Rows of one epoch are ids below this (the epoch is in the bits above).
pub(crate) const ROW_BITS: u32 = 40;

/// A chat template, declaratively (what `stokehold.text.ChatTemplate` is made of).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatSpec {
    /// A `tokenizer.json`, or a directory holding it and `tokenizer_config.json`.
    pub tokenizer: PathBuf,
    /// The template's text or the name of one of the config's; `None`: the config's default.
    #[serde(default)]
    pub template: Option<String>,
    /// The field holding the conversation.
    #[serde(default = "default_messages")]
    pub messages: String,
    /// `"assistant"`, `"last"` or `"all"`.
    #[serde(default = "default_loss_on")]
    pub loss_on: String,
    /// `add_generation_prompt` as the template sees it.
    #[serde(default)]
    pub add_generation_prompt: bool,
    /// More variables for the template.
    #[serde(default)]
    pub template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// The field of a prompt/completion pair's completion (`messages` then names the
    /// prompt's field); `None`: conversations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
    /// Plain text instead of conversations: the field `messages` holds a document's text,
    /// tokenized as it is (no template), `bos`/`eos` around it, the loss on every token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<DocumentSpec>,
    /// Images inside the conversations: each placeholder expanded to its image's tokens, the
    /// rows' images processed into `pixel_values` (`chat_vision.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionSpec>,
}

/// A plain-text source packed whole (`stokehold.text.Documents`): the tokens put around each
/// document, by name (`None`: none).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentSpec {
    /// A token put before the text (e.g. `"<s>"`).
    #[serde(default)]
    pub bos: Option<String>,
    /// A token put after it (e.g. `"</s>"`).
    #[serde(default)]
    pub eos: Option<String>,
}

fn default_messages() -> String {
    "messages".into()
}

fn default_loss_on() -> String {
    "assistant".into()
}

fn default_window() -> u32 {
    1024
}

/// What happens to a conversation longer than a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlong {
    /// Keep its first `seq_len` tokens, a row of its own.
    #[default]
    Truncate,
    /// Leave it out of the plan.
    Drop,
}

/// How conversations are packed into rows.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRowOptions {
    /// The chat template.
    pub chat: ChatSpec,
    /// Tokens per row.
    pub seq_len: u32,
    /// Candidates (conversations of the shuffled order) packed together.
    #[serde(default = "default_window")]
    pub window: u32,
    /// Conversations longer than a row.
    #[serde(default)]
    pub overlong: Overlong,
    /// The input id of padding.
    #[serde(default)]
    pub pad_id: u32,
    /// Bytes of encodings (5 a token) the count pass keeps for filling, so a kept conversation
    /// is encoded once, not twice; `auto`: [`default_keep`].
    #[serde(default)]
    pub keep_encodings: Budget,
    /// The most image tokens a row holds (conversations with images); `None`: no bound but
    /// `seq_len`. A conversation with more is left out (counted as dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_image_tokens: Option<u32>,
}

/// The error of `max_image_tokens` given where no conversation has images (no source's
/// template has `vision`): the budget would bound nothing.
pub(crate) fn no_images() -> EngineError {
    EngineError::Config(
        "max_image_tokens is for conversations with images: give text=ChatTemplate(..., \
         images=, vision=)"
            .into(),
    )
}

/// The default budget of kept encodings: 10% of physical memory, at most 1 GiB.
pub fn default_keep() -> u64 {
    match stokehold_storage::file::physical_memory() {
        0 => 256 << 20,
        m => (m / 10).min(1 << 30),
    }
}

impl ChatSpec {
    /// The template this describes.
    pub fn build(&self) -> Result<ChatTemplate> {
        let loss_on =
            LossOn::parse(&self.loss_on).map_err(|e| EngineError::Config(e.to_string()))?;
        let mut extra = Vec::with_capacity(self.template_kwargs.len());
        for (k, v) in &self.template_kwargs {
            let value = value_from_json(&v.to_string())
                .map_err(|e| EngineError::Config(format!("template_kwargs[{k:?}]: {e}")))?;
            extra.push((k.clone(), value));
        }
        ChatTemplate::from_path(
            &self.tokenizer,
            ChatOptions {
                // a document needs no template: an empty one, so that a tokenizer without one
                // loads
                template: match &self.document {
                    Some(_) => Some(String::new()),
                    None => self.template.clone(),
                },
                loss_on,
                add_generation_prompt: self.add_generation_prompt,
                extra,
                pairs: self.completion.is_some(),
            },
        )
        .map_err(|e| EngineError::Config(e.to_string()))
    }
}

/// The rows of one epoch: row `r` holds the conversations `ids[starts[r]..starts[r + 1]]`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EpochRows {
    starts: Vec<usize>,
    ids: Vec<u64>,
    /// Tokens that are not padding, over all rows.
    pub tokens: u64,
}

impl EpochRows {
    /// No rows yet.
    pub(crate) fn empty() -> EpochRows {
        EpochRows {
            starts: vec![0],
            ..EpochRows::default()
        }
    }

    /// Add a row of conversations `ids` holding `tokens` tokens.
    pub(crate) fn push_row(&mut self, ids: &[u64], tokens: u64) {
        self.ids.extend_from_slice(ids);
        self.starts.push(self.ids.len());
        self.tokens += tokens;
    }

    /// Rows in the epoch.
    pub fn len(&self) -> u64 {
        self.starts.len().saturating_sub(1) as u64
    }

    /// Whether the epoch has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The conversations of row `r`, in the order they are written.
    pub fn row(&self, r: u64) -> Option<&[u64]> {
        let r = usize::try_from(r).ok()?;
        let (&a, &b) = (self.starts.get(r)?, self.starts.get(r + 1)?);
        Some(&self.ids[a..b])
    }

    /// The most conversations in one row.
    pub fn widest(&self) -> usize {
        self.starts
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }
}

/// Best-fit-decreasing of one window: `items` are (token count, conversation id) in the order of
/// the epoch; each, longest first (ties: the earlier in the order first), goes into the row whose
/// free room is the smallest that holds it (ties: the row made first), or a new row. Returns
/// the rows (conversation ids in the order placed), in the order they were made. Counts are at
/// most `seq_len` (overlong ones were truncated or dropped before).
pub fn pack_window(items: &[(u32, u64)], seq_len: u32) -> Vec<Vec<u64>> {
    let items: Vec<(u32, u32, u64)> = items.iter().map(|&(n, id)| (n, 0, id)).collect();
    pack_window_within(&items, seq_len, None)
}

/// [`pack_window`] with a second budget: `items` are (token count, image tokens, conversation
/// id), and a row holds at most `max_images` image tokens (`None`: no bound). An item goes into
/// the row of the smallest free room that holds its tokens *and* its image tokens. Image
/// tokens of an item are at most `max_images` (others were left out before).
pub fn pack_window_within(
    items: &[(u32, u32, u64)],
    seq_len: u32,
    max_images: Option<u32>,
) -> Vec<Vec<u64>> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| items[b].0.cmp(&items[a].0).then(a.cmp(&b)));
    let mut rows: Vec<Vec<u64>> = Vec::new();
    let mut images: Vec<u32> = Vec::new();
    // (free room, row) of rows with room left
    let mut free: BTreeMap<(u32, usize), ()> = BTreeMap::new();
    for i in order {
        let (n, im, id) = items[i];
        let holds = |r: usize| im == 0 || max_images.is_none_or(|b| images[r] + im <= b);
        let fit = free
            .range((n, 0)..)
            .map(|(&k, _)| k)
            .find(|&(_, r)| holds(r));
        match fit {
            Some((room, r)) => {
                free.remove(&(room, r));
                rows[r].push(id);
                images[r] += im;
                if room > n {
                    free.insert((room - n, r), ());
                }
            }
            None => {
                rows.push(vec![id]);
                images.push(im);
                if seq_len > n {
                    free.insert((seq_len - n, rows.len() - 1), ());
                }
            }
        }
    }
    rows
}

/// The rows of window `w` of epoch `epoch`: `items` packed ([`pack_window_within`]), then, when
/// `shuffled`, permuted by (seed, epoch, w).
pub(crate) fn window_rows(
    items: &[(u32, u32, u64)],
    seq_len: u32,
    max_images: Option<u32>,
    shuffled: Option<(u64, u64, u64)>,
) -> Vec<Vec<u64>> {
    let rows = pack_window_within(items, seq_len, max_images);
    let Some((seed, epoch, w)) = shuffled else {
        return rows;
    };
    let mut keyed: Vec<(u64, Vec<u64>)> = rows
        .into_iter()
        .enumerate()
        .map(|(r, row)| (row_key(seed, epoch, w, r as u64), row))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, r)| r).collect()
}

/// The splitmix64 finaliser.
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The key that orders row `row` of window `window` of an epoch (rows of a window sorted by it).
pub(crate) fn row_key(seed: u64, epoch: u64, window: u64, row: u64) -> u64 {
    let mut h = mix64(seed ^ 0x6368_6174_726f_7773);
    h = mix64(h ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    h = mix64(h ^ window);
    mix64(h ^ row.wrapping_mul(0xd1b5_4a32_d192_ed03))
}

/// What the plan says about the data, for `stats()`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PackSummary {
    /// Conversations in the dataset.
    pub conversations: u64,
    /// Conversations counted so far (all of them once counting is done: conversations are
    /// counted lazily, window by window as rows are asked for and in the background).
    pub counted: u64,
    /// Whether the epoch's rows are all planned: `rows` and `len()` are then exact (while
    /// not, `rows` are those planned so far and `len()` an estimate).
    pub exact: bool,
    /// Rows of the epoch planned (so far, unless `exact`).
    pub rows: u64,
    /// Tokens that are not padding in those rows, over `rows * seq_len`.
    pub fill: f64,
    /// Conversations longer than a row, truncated.
    pub truncated: u64,
    /// Conversations longer than a row, left out (`overlong="drop"`).
    pub dropped: u64,
    /// Conversations that could not be read or encoded, left out (`on_error="skip"`), with why
    /// (the first 100).
    pub skipped: u64,
    /// The first skipped conversations and why.
    pub skipped_examples: Vec<(u64, String)>,
    /// Conversations whose encodings the count pass kept (filled without encoding again).
    pub kept: u64,
}

/// The counts of a dataset's conversations and the row order of its epochs.
pub struct ChatPlanner {
    ds: Arc<Dataset>,
    field: usize,
    /// A prompt/completion pair's completion field (`field` then the prompt's).
    completion: Option<usize>,
    template: Arc<ChatTemplate>,
    options: ChatRowOptions,
    /// Token count per conversation as encoded (before [`ChatPlanner::settle_one`], which
    /// [`ChatPlanner::count_of`] applies: what is kept on disk); `u32::MAX`: left out (bad, or
    /// by an image); [`UNKNOWN`]: not counted yet (counting lazily).
    counts: Vec<AtomicU32>,
    /// Conversations whose count is known.
    counted: AtomicU64,
    /// The counts of a lazily counting planner kept on disk, once, by whoever first sees them
    /// all counted; anyone else who sees that waits for it (so a dataset opened again after an
    /// epoch finds them, whichever thread counted last).
    stored: std::sync::Once,
    truncated: AtomicU64,
    dropped: AtomicU64,
    /// Conversations that could not be read or encoded, left out (`on_error = skip`), and why.
    skipped: Mutex<Vec<(u64, String)>>,
    /// `on_error = skip`: the largest fraction of the conversations that may be left out so.
    skip_bad: Option<f64>,
    /// More than that were found (by a counter in the background): the error the next window
    /// planned reports.
    over_budget: AtomicBool,
    /// Threads of a window's count.
    threads: usize,
    /// Bytes of kept encodings, within `keep_encodings` (`budget`).
    used: AtomicU64,
    budget: u64,
    /// Encodings kept from the count pass, within `keep_encodings`.
    kept: KeptEncodings,
    /// A plain-text source ([`DocumentSpec`]): the ids of its `bos` and `eos` tokens.
    document: Option<(Option<u32>, Option<u32>)>,
    /// Images inside the conversations ([`VisionSpec`]).
    vision: Option<ChatVision>,
    /// Image tokens per conversation within its count (empty without `vision`).
    images: Vec<AtomicU32>,
    /// Conversations with images cut before an image (counted in `truncated`), and left out by
    /// the cut or the image budget (in `dropped`): kept with the counts.
    cut: AtomicU64,
    cut_out: AtomicU64,
    kept_count: AtomicU64,
    /// The counts came from a kept count pass (nothing was encoded at open).
    counts_kept: bool,
    shuffle: Shuffle,
    seed: u64,
    fingerprint: String,
    /// The epochs planned lately.
    epochs: Mutex<Vec<(u64, Arc<EpochPlan>)>>,
}

impl std::fmt::Debug for ChatPlanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatPlanner")
            .field("dataset", &self.ds.dir())
            .field("options", &self.options)
            .field("conversations", &self.counts.len())
            .finish_non_exhaustive()
    }
}

/// The encodings a count pass keeps (within `keep_encodings`), by conversation: slots set at
/// most once, in chunks made when one of their slots is first set. (A slot per conversation made
/// at open was 56 bytes each written, 1.2 GB for 21 M conversations of which the budget keeps
/// a few; the chunks cost 16 bytes per 4,096 conversations until something is kept.)
#[derive(Default)]
struct KeptEncodings {
    chunks: Vec<OnceLock<Box<[OnceLock<ChatEncoding>]>>>,
    /// Conversations.
    n: usize,
}

impl KeptEncodings {
    /// Conversations per chunk.
    const CHUNK: usize = 4096;

    /// Slots for `n` conversations, none made yet.
    fn new(n: usize) -> KeptEncodings {
        KeptEncodings {
            chunks: (0..n.div_ceil(Self::CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
            n,
        }
    }

    /// The encoding kept for conversation `i`.
    fn get(&self, i: usize) -> Option<&ChatEncoding> {
        self.chunks
            .get(i / Self::CHUNK)?
            .get()?
            .get(i % Self::CHUNK)?
            .get()
    }

    /// Keep `e` for conversation `i`; false when one is kept already (or `i` is out of range).
    fn set(&self, i: usize, e: ChatEncoding) -> bool {
        let Some(chunk) = self.chunks.get(i / Self::CHUNK).filter(|_| i < self.n) else {
            return false;
        };
        let slots = chunk.get_or_init(|| (0..Self::CHUNK).map(|_| OnceLock::new()).collect());
        slots[i % Self::CHUNK].set(e).is_ok()
    }
}

const LEFT_OUT: u32 = u32::MAX;

/// The count of a conversation not counted yet.
const UNKNOWN: u32 = u32::MAX - 1;

/// The count of a conversation of more tokens than a `u32` holds (truncated or dropped).
const OVER: u32 = u32::MAX - 2;

/// What settling a count did ([`ChatPlanner::settle_one`]).
enum Settled {
    Kept,
    Truncated,
    Dropped,
}

/// What counting a conversation with images did to it ([`ChatPlanner::vision_count`]).
#[derive(Default)]
struct Cut {
    /// Cut before the image that crosses the row's end.
    cut: bool,
    /// Left out: the cut leaves nothing, or its image tokens are over `max_image_tokens`.
    left_out: bool,
}

impl ChatPlanner {
    /// Count every conversation of `ds` (field `options.chat.messages`) on `threads` threads
    /// (0: one per core). `skip_bad`: `Some(max_fraction)`: a conversation that cannot be read
    /// or encoded is left out and counted, unless more than `max_fraction` of them are (then the
    /// first is the error, with the count); `None`: the first one (the lowest index) is the
    /// error.
    ///
    /// `lazy`: count nothing at open; each window's
    /// conversations are counted when the window is planned ([`EpochPlan`]), the rest by
    /// [`ChatPlanner::count_in_background`]: the same counts, so the same rows, as counting at
    /// open. A bad conversation is then reported by the batch whose window holds it, or (with
    /// `skip_bad`) left out there, the budget checked as they are found.
    pub fn new(
        ds: Arc<Dataset>,
        options: ChatRowOptions,
        shuffle: Shuffle,
        seed: u64,
        threads: usize,
        skip_bad: Option<f64>,
        lazy: bool,
    ) -> Result<ChatPlanner> {
        if options.seq_len == 0 {
            return Err(EngineError::Config("seq_len must be at least 1".into()));
        }
        if options.window == 0 {
            return Err(EngineError::Config("window must be at least 1".into()));
        }
        if options.seq_len >= UNKNOWN {
            return Err(EngineError::Config("seq_len must be below 2^32 - 2".into()));
        }
        if matches!(shuffle, Shuffle::ShardBlock { .. }) {
            return Err(EngineError::Config(
                "packed conversations shuffle globally or not at all".into(),
            ));
        }
        let index_of = |name: &str, option: &str| {
            ds.schema().index_of(name).ok_or_else(|| {
                EngineError::Config(format!(
                    "{} has no field {name:?} (the ChatTemplate's `{option}`); its fields: {}",
                    ds.dir().display(),
                    ds.schema()
                        .fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })
        };
        let name = &options.chat.messages;
        let field = index_of(name, "messages")?;
        let completion = match &options.chat.completion {
            Some(c) => Some(index_of(c, "completion")?),
            None => None,
        };
        let template = Arc::new(options.chat.build()?);
        let template_id = {
            let t = template.template().as_bytes();
            let mut a = stokehold_format::crc::crc32c(t);
            a = stokehold_format::crc::append(a, options.chat.loss_on.as_bytes());
            a = stokehold_format::crc::append(
                a,
                serde_json::Value::Object(options.chat.template_kwargs.clone())
                    .to_string()
                    .as_bytes(),
            );
            a = stokehold_format::crc::append(a, &[u8::from(options.chat.add_generation_prompt)]);
            if let Some(c) = &options.chat.completion {
                a = stokehold_format::crc::append(a, c.as_bytes());
            }
            a
        };
        let tokenizer_id =
            stokehold_format::crc::crc32c(format!("{:?}", template.tokenizer()).as_bytes());
        let document = match &options.chat.document {
            None => None,
            Some(d) => {
                let id = |t: &Option<String>| {
                    t.as_deref()
                        .map(|name| template.tokenizer().token_id(name))
                        .transpose()
                        .map_err(|e| EngineError::Config(e.to_string()))
                };
                Some((id(&d.bos)?, id(&d.eos)?))
            }
        };
        let vision = match &options.chat.vision {
            Some(_) if options.chat.document.is_some() || options.chat.completion.is_some() => {
                return Err(EngineError::Config(
                    "images (vision=) are for conversations, not documents or prompt/completion \
                     pairs"
                        .into(),
                ));
            }
            Some(v) => Some(ChatVision::new(v, &ds, &template)?),
            None => None,
        };
        let mut planner = ChatPlanner {
            fingerprint: format!(
                "{}/chat:{}:{}:{:?}:{:08x}:{:08x}:{}:{}{}{}",
                fingerprint(&ds),
                options.seq_len,
                options.window,
                options.overlong,
                template_id,
                tokenizer_id,
                name,
                options.pad_id,
                match &options.chat.document {
                    Some(d) => format!(":document:{:?}:{:?}", d.bos, d.eos),
                    None => String::new(),
                },
                match &options.chat.vision {
                    Some(v) => format!(
                        ":vision:{}:{}:{:?}:{:?}",
                        v.images, v.image_token, v.processor, options.max_image_tokens
                    ),
                    None => String::new(),
                },
            ),
            field,
            completion,
            template,
            counts: Vec::new(),
            counted: AtomicU64::new(0),
            stored: std::sync::Once::new(),
            truncated: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            skipped: Mutex::new(Vec::new()),
            skip_bad,
            over_budget: AtomicBool::new(false),
            threads,
            used: AtomicU64::new(0),
            budget: options.keep_encodings.resolve(default_keep),
            kept: KeptEncodings::default(),
            kept_count: AtomicU64::new(0),
            counts_kept: false,
            document,
            vision,
            images: Vec::new(),
            cut: AtomicU64::new(0),
            cut_out: AtomicU64::new(0),
            shuffle,
            seed,
            epochs: Mutex::new(Vec::new()),
            options,
            ds,
        };
        planner.count(threads, skip_bad, lazy)?;
        Ok(planner)
    }

    /// Count the conversations not counted yet in the background, in dataset order, on as
    /// many threads as the planner counts with (one per core by default), each at a lower
    /// priority (nice 10) so that it takes the cores the loader leaves idle rather than the
    /// loader's; the windows planned later then find their counts ready (a lazily counting
    /// planner; nothing to do for one counted at open). The threads take blocks of
    /// conversations in turn, and end when every conversation is counted or the planner is
    /// dropped; a conversation they cannot encode is left to the window that needs it (whose
    /// plan then reports the error). Who counts a conversation does not change its count.
    ///
    /// `STOKEHOLD_CHAT_COUNT_AHEAD=0` in the environment leaves it off (tests that count what
    /// the first batches needed).
    pub fn count_in_background(self: &Arc<Self>) {
        /// Conversations a counter takes at a time.
        const BLOCK: u64 = 64;
        let off = std::env::var_os("STOKEHOLD_CHAT_COUNT_AHEAD").is_some_and(|v| v == "0");
        if off || self.all_counted() {
            return;
        }
        let n = self.len();
        let next = Arc::new(AtomicU64::new(0));
        let threads = match self.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            t => t,
        };
        for k in 0..threads {
            let weak: Weak<ChatPlanner> = Arc::downgrade(self);
            let next = Arc::clone(&next);
            let _ = std::thread::Builder::new()
                .name(format!("stokehold-chat-count-{k}"))
                .spawn(move || {
                    // nice is per thread on Linux: this one only yields to the loader's
                    let tid = rustix::thread::gettid();
                    let _ = rustix::process::setpriority_process(Some(tid), 10);
                    loop {
                        let id = next.fetch_add(BLOCK, Ordering::Relaxed);
                        if id >= n {
                            return;
                        }
                        let Some(planner) = weak.upgrade() else {
                            return;
                        };
                        if planner.all_counted() {
                            return;
                        }
                        for i in id..(id + BLOCK).min(n) {
                            let _ = planner.count_one(i);
                        }
                    }
                });
        }
    }

    /// The fields of record `id`.
    pub(crate) fn record(&self, id: u64) -> Result<Vec<FieldValue<'static>>> {
        self.ds
            .get(id)
            .map_err(|source| EngineError::Sample { id, source })
    }

    /// The fields of record `id` that encoding its conversation needs. With images whose sizes
    /// the shards keep, a large record's conversation is read from its first bytes only
    /// ([`Dataset::field_from_prefix`]; the fields before it are left as placeholders that
    /// nothing reads), so that counting does not read every image; else the whole record.
    fn conversation_values(&self, id: u64) -> Result<Vec<FieldValue<'static>>> {
        /// The bytes read for a conversation: more than most conversations' text.
        const PREFIX: usize = 64 << 10;
        let sized = self.vision.as_ref().is_some_and(|v| {
            self.completion.is_none() && matches!(v.stored_sizes(&self.ds, id), Ok(Some(_)))
        });
        if sized
            && let Some(v) = self
                .ds
                .field_from_prefix(id, self.field, PREFIX)
                .map_err(|source| EngineError::Sample { id, source })?
        {
            let mut values = vec![FieldValue::Int64(0); self.field];
            values.push(v);
            return Ok(values);
        }
        self.record(id)
    }

    /// Images inside the conversations, if any.
    pub(crate) fn vision(&self) -> Option<&ChatVision> {
        self.vision.as_ref()
    }

    /// The image tokens of conversation `id` within its count in a row (0 without images).
    pub(crate) fn images_of(&self, id: u64) -> u32 {
        usize::try_from(id)
            .ok()
            .and_then(|i| self.images.get(i))
            .map_or(0, |c| c.load(Ordering::Acquire))
    }

    /// The conversation `id` (its record's fields `values`): its field, parsed as JSON; with a
    /// completion field, the pair `[prompt, completion]`, each a JSON list of messages or plain
    /// text.
    fn conversation(&self, id: u64, values: &[FieldValue<'_>]) -> Result<Value> {
        let bad = |detail: String| self.bad(id, detail);
        let text = |field: usize| -> Result<&str> {
            match values.get(field) {
                Some(FieldValue::String(s)) => Ok(s.as_ref()),
                Some(FieldValue::Bytes(b)) => std::str::from_utf8(b)
                    .map_err(|e| bad(format!("the field is not UTF-8 text: {e}"))),
                Some(_) => Err(bad(
                    "the field is not a string (nor bytes of JSON text)".to_string()
                )),
                None => Err(bad("the record has no such field".to_string())),
            }
        };
        let Some(completion) = self.completion else {
            return value_from_json(text(self.field)?)
                .map_err(|e| bad(format!("not a JSON list of messages: {e}")));
        };
        // a part of a `json` field is its value (a list of messages, or a string); of a
        // string field, a list of messages when its text is JSON of a list, else the text
        let part = |field: usize| -> Result<Value> {
            let t = text(field)?;
            let json = self.ds.schema().fields[field].ty == stokehold_format::FieldType::Json;
            if json {
                return value_from_json(t).map_err(|e| bad(format!("not JSON: {e}")));
            }
            Ok(match t.trim_start().starts_with('[') {
                true => value_from_json(t).unwrap_or_else(|_| Value::from(t)),
                false => Value::from(t),
            })
        };
        Ok(Value::from(vec![part(self.field)?, part(completion)?]))
    }

    /// Document `id` of a plain-text source: its field's text, tokenized, between `bos` and
    /// `eos`, the loss on every token.
    fn encode_document(
        &self,
        id: u64,
        (bos, eos): (Option<u32>, Option<u32>),
    ) -> Result<ChatEncoding> {
        let values = self
            .ds
            .get(id)
            .map_err(|source| EngineError::Sample { id, source })?;
        let text = match values.get(self.field) {
            Some(FieldValue::String(s)) => s.as_ref(),
            Some(FieldValue::Bytes(b)) => std::str::from_utf8(b)
                .map_err(|e| self.bad(id, format!("the field is not UTF-8 text: {e}")))?,
            Some(_) => return Err(self.bad(id, "the field is not text".to_string())),
            None => return Err(self.bad(id, "the record has no such field".to_string())),
        };
        let mut input_ids = Vec::with_capacity(text.len() / 3 + 2);
        input_ids.extend(bos);
        self.template
            .tokenizer()
            .encode_into(text, &mut input_ids)
            .map_err(|e| self.bad(id, e.to_string()))?;
        input_ids.extend(eos);
        let mask = vec![1; input_ids.len()];
        Ok(ChatEncoding { input_ids, mask })
    }

    /// The error of a conversation that cannot be encoded, naming its record.
    pub(crate) fn bad(&self, id: u64, detail: String) -> EngineError {
        let at = match self.ds.locate(id) {
            Ok((k, local)) => {
                let shard = &self.ds.shards()[k];
                let e = shard.entry(local);
                RecordPlace {
                    shard: shard.path().to_path_buf(),
                    record: local,
                    bytes: e.offset..e.offset + u64::from(e.len),
                }
            }
            Err(_) => RecordPlace {
                shard: self.ds.dir().to_path_buf(),
                record: id,
                bytes: 0..0,
            },
        };
        EngineError::Transform {
            id,
            at: Box::new(at),
            stage: "chat_template".into(),
            column: self.options.chat.messages.clone(),
            source: StageError::Invalid(format!("conversation {id}: {detail}")),
        }
    }

    /// The tokens and mask of conversation `id`: kept from the count pass, or encoded now.
    pub fn encoding(&self, id: u64) -> Result<Cow<'_, ChatEncoding>> {
        match usize::try_from(id).ok().and_then(|i| self.kept.get(i)) {
            Some(e) => Ok(Cow::Borrowed(e)),
            None => self.encode(id).map(Cow::Owned),
        }
    }

    /// Encode conversation `id`: tokens and mask.
    pub fn encode(&self, id: u64) -> Result<ChatEncoding> {
        if let Some(d) = self.document {
            return self.encode_document(id, d);
        }
        let values = self.conversation_values(id)?;
        let conv = self.conversation(id, &values)?;
        let chat_error = |e| match e {
            stokehold_ops::chat::ChatError::Conversation { detail, .. } => self.bad(id, detail),
            other => self.bad(id, other.to_string()),
        };
        let mut enc = self.template.encode(&conv, id).map_err(chat_error)?;
        if let Some(v) = &self.vision {
            let tokens = v
                .image_tokens(&self.ds, id, &values)
                .map_err(|e| self.bad(id, e.to_string()))?;
            stokehold_ops::chat::expand_placeholders(
                &mut enc,
                v.placeholder,
                &tokens,
                u64::from(u32::MAX - 1),
                id,
            )
            .map_err(chat_error)?;
        }
        Ok(enc)
    }

    /// Count every conversation (see [`ChatPlanner::new`]), or take the counts a count pass of
    /// the same dataset and encoding kept ([`super::kept_counts`]).
    fn count(&mut self, threads: usize, skip_bad: Option<f64>, lazy: bool) -> Result<()> {
        let n = self.ds.len();
        let len = usize::try_from(n).unwrap_or(0);
        self.kept = KeptEncodings::new(len);
        let keep = super::kept_counts::dir();
        let key = self.counts_key();
        let stored_len = match self.vision {
            None => n,
            Some(_) => n.saturating_mul(2).saturating_add(2),
        };
        if let Some(mut counts) = keep
            .as_deref()
            .and_then(|d| super::kept_counts::load(d, &key, stored_len))
        {
            self.counts_kept = true;
            if self.vision.is_some() {
                let rest = counts.split_off(len);
                self.images = rest[..len].iter().map(|&c| AtomicU32::new(c)).collect();
                self.note_cuts(u64::from(rest[len]), u64::from(rest[len + 1]));
            }
            // (counts saturated at `UNKNOWN` by an older version: over a `u32`)
            counts
                .iter_mut()
                .filter(|c| **c == UNKNOWN)
                .for_each(|c| *c = OVER);
            self.settle(counts);
            return Ok(());
        }
        if lazy {
            self.counts = (0..len).map(|_| AtomicU32::new(UNKNOWN)).collect();
            if self.vision.is_some() {
                self.images = (0..len).map(|_| AtomicU32::new(0)).collect();
            }
            return Ok(());
        }

        // conversations with images cut before an image, or left out by it or by the budget
        let (cut, left_out) = (AtomicU64::new(0), AtomicU64::new(0));
        let this = &*self;
        let results = stokehold_ops::parallel::map_indexed(len, threads, 64, |i| {
            let id = i as u64;
            this.encode(id).map(|e| {
                let (count, images, how) = this.raw_count(&e);
                cut.fetch_add(u64::from(how.cut), Ordering::Relaxed);
                left_out.fetch_add(u64::from(how.left_out), Ordering::Relaxed);
                this.keep(i, e);
                (count, images)
            })
        })
        .map_err(|_| EngineError::Worker("a counting thread panicked".into()))?;
        let mut counts = vec![LEFT_OUT; len];
        let mut images = vec![0u32; if self.vision.is_some() { len } else { 0 }];
        let mut errors: Vec<(u64, EngineError)> = Vec::new();
        for (id, r) in results.into_iter().enumerate() {
            match r {
                Ok((c, im)) => {
                    counts[id] = c;
                    if let Some(slot) = images.get_mut(id) {
                        *slot = im;
                    }
                }
                Err(e) => errors.push((id as u64, e)),
            }
        }
        errors.sort_by_key(|(id, _)| *id);
        if let Some((_, e)) = errors.first() {
            let within = skip_bad.is_some_and(|f| errors.len() as f64 <= f * n as f64);
            if !within || !e.is_sample_failure() {
                let many = errors.len();
                let (_, e) = errors.swap_remove(0);
                return Err(match (skip_bad, e.is_sample_failure()) {
                    (Some(f), true) => EngineError::TooManyFailures {
                        detail: format!(
                            "{many} of the {n} conversations cannot be read or encoded, more \
                             than max_skip_fraction {f}"
                        ),
                        first: Box::new(e),
                    },
                    _ => e,
                });
            }
        }
        self.note_cuts(cut.into_inner(), left_out.into_inner());
        self.images = images.into_iter().map(AtomicU32::new).collect();
        self.settle(counts);
        // kept now, and never again by `keep_counted`
        let whole = errors.is_empty();
        self.stored.call_once(|| {
            if whole {
                self.store_counts();
            }
        });
        *crate::sync::lock(&self.skipped) = errors
            .into_iter()
            .map(|(id, e)| (id, e.to_string()))
            .collect();
        Ok(())
    }

    /// Add `cut` conversations cut before an image and `left_out` left out by it or by the
    /// image budget (conversations with images).
    fn note_cuts(&self, cut: u64, left_out: u64) {
        self.cut.fetch_add(cut, Ordering::Relaxed);
        self.cut_out.fetch_add(left_out, Ordering::Relaxed);
        self.truncated.fetch_add(cut, Ordering::Relaxed);
        self.dropped.fetch_add(left_out, Ordering::Relaxed);
    }

    /// Keep the counts on the node's disk (every conversation counted without failures): the
    /// counts as encoded, with images also the image tokens and the cuts.
    fn store_counts(&self) {
        let Some(d) = super::kept_counts::dir() else {
            return;
        };
        let load = |c: &AtomicU32| c.load(Ordering::Acquire);
        let mut all: Vec<u32> = self.counts.iter().map(load).collect();
        if self.vision.is_some() {
            all.extend(self.images.iter().map(load));
            for c in [&self.cut, &self.cut_out] {
                all.push(u32::try_from(c.load(Ordering::Relaxed)).unwrap_or(u32::MAX));
            }
        }
        super::kept_counts::store(&d, &self.counts_key(), &all);
    }

    /// A conversation's count as encoded, its image tokens and what the cut before an image
    /// did (see [`ChatPlanner::vision_count`]).
    fn raw_count(&self, e: &ChatEncoding) -> (u32, u32, Cut) {
        match &self.vision {
            None => (
                u32::try_from(e.input_ids.len()).map_or(OVER, |c| c.min(OVER)),
                0,
                Cut::default(),
            ),
            Some(v) => self.vision_count(v, &e.input_ids),
        }
    }

    /// The key of this planner's kept counts: with images, the counts are kept with the image
    /// tokens and what the cut left out (the encodings, which say where an image starts, are
    /// not).
    fn counts_key(&self) -> String {
        match self.vision {
            None => format!("{}#counts-v1", self.fingerprint),
            Some(_) => format!("{}#vision-counts-v1", self.fingerprint),
        }
    }

    /// Whether every conversation's count is known (counted lazily: then kept on disk first).
    pub fn all_counted(&self) -> bool {
        let all = self.counted.load(Ordering::Acquire) >= self.len();
        if all {
            self.keep_counted();
        }
        all
    }

    /// Every conversation counted lazily: keep the counts on disk, once (without failures);
    /// a caller while another keeps them waits until they are kept.
    fn keep_counted(&self) {
        if self.counts_kept || self.counts.is_empty() {
            return; // found on disk (or nothing to keep)
        }
        self.stored.call_once(|| {
            if crate::sync::lock(&self.skipped).is_empty() {
                self.store_counts();
            }
        });
    }

    /// Conversations whose count is known (all of them but while counting lazily).
    pub fn counted(&self) -> u64 {
        self.counted.load(Ordering::Acquire).min(self.len())
    }

    /// Keep conversation `i`'s encoding for filling, within the budget.
    fn keep(&self, i: usize, e: ChatEncoding) {
        let bytes = (e.input_ids.len() * 5 + 64) as u64;
        let before = self.used.fetch_add(bytes, Ordering::Relaxed);
        if before + bytes <= self.budget {
            if self.kept.set(i, e) {
                self.kept_count.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }

    /// Count conversation `id` now if it is not counted yet (a lazily counting planner): the
    /// encode (and cut before an image) of the count pass, so the count is the one counting at
    /// open gives, whoever counts it first. The last one counted keeps the counts on disk.
    fn count_one(&self, id: u64) -> Result<u32> {
        let Some(slot) = usize::try_from(id).ok().and_then(|i| self.counts.get(i)) else {
            return Ok(LEFT_OUT);
        };
        let c = slot.load(Ordering::Acquire);
        if c != UNKNOWN {
            return Ok(c);
        }
        let e = match self.encode(id) {
            Ok(e) => e,
            Err(err) => return self.skip_or_fail(id, slot, err),
        };
        let (raw, images, how) = self.raw_count(&e);
        if let Some(im) = self.images.get(id as usize) {
            // before the count is published: whoever sees the count sees its image tokens
            im.store(images, Ordering::Release);
        }
        match slot.compare_exchange(UNKNOWN, raw, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                self.note_cuts(u64::from(how.cut), u64::from(how.left_out));
                match self.settle_one(raw).1 {
                    Settled::Truncated => self.truncated.fetch_add(1, Ordering::Relaxed),
                    Settled::Dropped => self.dropped.fetch_add(1, Ordering::Relaxed),
                    Settled::Kept => 0,
                };
                self.keep(id as usize, e);
                if self.counted.fetch_add(1, Ordering::AcqRel) + 1 == self.len() {
                    self.keep_counted();
                }
                Ok(raw)
            }
            Err(other) => Ok(other),
        }
    }

    /// Conversation `id` (count slot `slot`) cannot be read or encoded (`err`): its error, or
    /// under `on_error = skip` (a sample's failure) left out and counted, as counting at open
    /// leaves it out; once more than `max_skip_fraction` of all the conversations are left out,
    /// the error that says so.
    fn skip_or_fail(&self, id: u64, slot: &AtomicU32, err: EngineError) -> Result<u32> {
        let Some(fraction) = self.skip_bad.filter(|_| err.is_sample_failure()) else {
            return Err(err);
        };
        if let Err(other) =
            slot.compare_exchange(UNKNOWN, LEFT_OUT, Ordering::AcqRel, Ordering::Acquire)
        {
            return Ok(other); // counted meanwhile by another thread
        }
        let many = {
            let mut skipped = crate::sync::lock(&self.skipped);
            skipped.push((id, err.to_string()));
            skipped.len()
        };
        // (a dataset with conversations left out keeps no counts: the next open finds them again)
        self.counted.fetch_add(1, Ordering::AcqRel);
        let n = self.len();
        if many as f64 > fraction * n as f64 {
            self.over_budget.store(true, Ordering::Release);
            return Err(EngineError::TooManyFailures {
                detail: format!(
                    "{many} of the {n} conversations cannot be read or encoded, more than \
                     max_skip_fraction {fraction}"
                ),
                first: Box::new(err),
            });
        }
        Ok(LEFT_OUT)
    }

    /// The error of conversations left out past `max_skip_fraction` (found by a counter in the
    /// background), naming the first of them.
    fn over_budget_error(&self) -> Option<EngineError> {
        if !self.over_budget.load(Ordering::Acquire) {
            return None;
        }
        let skipped = self.left_out().2;
        let n = self.len();
        let (id, why) = skipped.first().cloned().unwrap_or_default();
        Some(EngineError::TooManyFailures {
            detail: format!(
                "{} of the {n} conversations cannot be read or encoded, more than \
                 max_skip_fraction {}",
                skipped.len(),
                self.skip_bad.unwrap_or(0.0)
            ),
            first: Box::new(EngineError::Worker(format!("conversation {id}: {why}"))),
        })
    }

    /// Count the conversations of `ids` not counted yet, on the planner's threads; the error
    /// of the lowest id that cannot be encoded.
    pub(crate) fn count_these(&self, ids: &[u64]) -> Result<()> {
        let unknown: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|&id| {
                usize::try_from(id)
                    .ok()
                    .and_then(|i| self.counts.get(i))
                    .is_some_and(|c| c.load(Ordering::Acquire) == UNKNOWN)
            })
            .collect();
        if unknown.is_empty() {
            return self.over_budget_error().map_or(Ok(()), Err);
        }
        let results = stokehold_ops::parallel::map_indexed(unknown.len(), self.threads, 16, |i| {
            self.count_one(unknown[i])
        })
        .map_err(|_| EngineError::Worker("a counting thread panicked".into()))?;
        // the lowest id's error, as counting at open reports
        let first = unknown
            .iter()
            .zip(results)
            .filter_map(|(&id, r)| r.err().map(|e| (id, e)))
            .min_by_key(|(id, _)| *id);
        match first {
            Some((_, e)) => Err(e),
            None => self.over_budget_error().map_or(Ok(()), Err),
        }
    }

    /// The count in a row and the image tokens of a conversation with images encoded as `ids`:
    /// longer than a row and truncated, it is cut before the image that crosses the row's end
    /// ([`Cut::cut`]; left out, [`Cut::left_out`], when that is its first token); more image
    /// tokens than `max_image_tokens`: left out. Other overlong ones are left to
    /// [`ChatPlanner::settle`] (dropped).
    fn vision_count(&self, v: &ChatVision, ids: &[u32]) -> (u32, u32, Cut) {
        let seq_len = self.options.seq_len as usize;
        let mut count = ids.len();
        let mut how = Cut::default();
        if count > seq_len && self.options.overlong == Overlong::Truncate {
            let at = v.cut(ids, seq_len);
            if at < seq_len {
                count = at;
                how.cut = at != 0;
                how.left_out = at == 0;
            }
        }
        let images = v.count_in(&ids[..count.min(seq_len)]);
        let images = u32::try_from(images).unwrap_or(u32::MAX);
        if count == 0 || self.options.max_image_tokens.is_some_and(|b| images > b) {
            // (an empty conversation is left out uncounted, as `settle` leaves it)
            how.left_out |= count != 0;
            return (LEFT_OUT, 0, how);
        }
        (
            u32::try_from(count).map_or(OVER, |c| c.min(OVER)),
            images,
            how,
        )
    }

    /// The counts as rows take them: overlong conversations truncated or left out, empty ones
    /// left out.
    fn settle(&mut self, counts: Vec<u32>) {
        for &c in &counts {
            match self.settle_one(c).1 {
                Settled::Truncated => *self.truncated.get_mut() += 1,
                Settled::Dropped => *self.dropped.get_mut() += 1,
                Settled::Kept => {}
            }
        }
        *self.counted.get_mut() = counts.len() as u64;
        self.counts = counts.into_iter().map(AtomicU32::new).collect();
    }

    /// One count as rows take it (see [`ChatPlanner::settle`]).
    fn settle_one(&self, c: u32) -> (u32, Settled) {
        let seq_len = self.options.seq_len;
        if c == LEFT_OUT {
            return (c, Settled::Kept);
        }
        // an empty conversation (no tokens) has nothing to train on: left out like a dropped one
        if c == 0 {
            return (LEFT_OUT, Settled::Kept);
        }
        if c <= seq_len {
            return (c, Settled::Kept);
        }
        match self.options.overlong {
            Overlong::Truncate => (seq_len, Settled::Truncated),
            Overlong::Drop => (LEFT_OUT, Settled::Dropped),
        }
    }

    /// The token count of conversation `id` in a row (truncated to `seq_len`); `None`: left out.
    /// A conversation not counted yet (counting lazily) is `None` too: planning counts a
    /// window's conversations first.
    pub fn count_of(&self, id: u64) -> Option<u32> {
        let c = self
            .counts
            .get(usize::try_from(id).ok()?)?
            .load(Ordering::Acquire);
        if c == UNKNOWN {
            return None;
        }
        Some(self.settle_one(c).0).filter(|&c| c != LEFT_OUT)
    }

    /// Conversations (or documents) in the dataset, left-out ones included.
    pub fn len(&self) -> u64 {
        self.counts.len() as u64
    }

    /// Whether the dataset has none.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// What identifies the dataset and the definition of its encodings (resume states).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// (truncated, dropped, skipped) conversations: overlong ones, and those that could not be
    /// read or encoded.
    pub fn left_out(&self) -> (u64, u64, Vec<(u64, String)>) {
        let mut skipped = crate::sync::lock(&self.skipped).clone();
        // counted lazily, in whatever order the counters went: by index, as counting at open
        skipped.sort_by_key(|(id, _)| *id);
        (
            self.truncated.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
            skipped,
        )
    }

    /// Encodings kept from the count pass.
    pub fn kept(&self) -> u64 {
        self.kept_count.load(Ordering::Relaxed)
    }

    /// The options.
    pub fn options(&self) -> &ChatRowOptions {
        &self.options
    }

    /// The plan of epoch `epoch` (planned window by window as its rows are asked for; the
    /// last few epochs kept).
    pub fn plan_of(&self, epoch: u64) -> Result<Arc<EpochPlan>> {
        let mut kept = self.epochs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, r)) = kept.iter().find(|(e, _)| *e == epoch) {
            return Ok(Arc::clone(r));
        }
        if epoch >= 1 << (64 - ROW_BITS) {
            return Err(EngineError::Config(format!(
                "epoch {epoch}: at most 2^{} epochs",
                64 - ROW_BITS
            )));
        }
        let n = self.len();
        let plan = Arc::new(EpochPlan {
            epoch,
            order: EpochOrder::new(n, None, &self.shuffle, self.seed, epoch)?,
            state: Mutex::new(Planned {
                rows: EpochRows::empty(),
                at: 0,
                window: 0,
            }),
            done: AtomicBool::new(n == 0),
        });
        kept.push((epoch, Arc::clone(&plan)));
        if kept.len() > 3 {
            kept.remove(0);
        }
        Ok(plan)
    }

    /// The rows of epoch `epoch`, planned to its end.
    pub fn rows(&self, epoch: u64) -> Result<EpochRows> {
        let plan = self.plan_of(epoch)?;
        plan.ensure(self, u64::MAX)?;
        Ok(plan.lock().rows.clone())
    }

    /// What the plan of epoch `epoch` says (see [`PackSummary`]): the rows planned so far (all
    /// of them once `exact`).
    pub fn summary(&self, epoch: u64) -> Result<PackSummary> {
        let plan = self.plan_of(epoch)?;
        let exact = plan.done.load(Ordering::Acquire);
        let (rows, tokens) = {
            let p = plan.lock();
            (p.rows.len(), p.rows.tokens)
        };
        let cap = rows * u64::from(self.options.seq_len);
        let (truncated, dropped, skipped) = self.left_out();
        Ok(PackSummary {
            conversations: self.len(),
            counted: self.counted(),
            exact,
            rows,
            fill: if cap == 0 {
                0.0
            } else {
                tokens as f64 / cap as f64
            },
            truncated,
            dropped,
            skipped: skipped.len() as u64,
            skipped_examples: skipped.iter().take(100).cloned().collect(),
            kept: self.kept_count.load(Ordering::Relaxed),
        })
    }
}

/// The plan of one epoch, made window by window: window `w` is packed from the counts of its
/// own conversations only (counted first when they are not yet), so row `p` needs only the
/// windows up to the one holding it, and a run starts before the epoch is planned (or its
/// conversations counted). The rows are the same however far and by whom it was planned.
#[derive(Debug)]
pub struct EpochPlan {
    epoch: u64,
    /// The order of the epoch's conversations.
    order: EpochOrder,
    state: Mutex<Planned>,
    /// Every window is planned: the rows are all there.
    done: AtomicBool,
}

/// The windows of an epoch planned so far.
#[derive(Debug)]
struct Planned {
    rows: EpochRows,
    /// Conversations of the order planned.
    at: u64,
    /// The next window.
    window: u64,
}

impl EpochPlan {
    fn lock(&self) -> std::sync::MutexGuard<'_, Planned> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The length once every window is planned.
    pub fn known(&self) -> Option<u64> {
        self.done
            .load(Ordering::Acquire)
            .then(|| self.lock().rows.len())
    }

    /// Plan windows until row `r` exists or the windows run out; whether it exists.
    pub fn ensure(&self, planner: &ChatPlanner, r: u64) -> Result<bool> {
        let mut p = self.lock();
        let n = self.order.len();
        while p.rows.len() <= r && p.at < n {
            let end = (p.at + u64::from(planner.options.window)).min(n);
            let mut ids = Vec::with_capacity((end - p.at) as usize);
            self.order.ids_into(p.at..end, &mut ids);
            planner.count_these(&ids)?;
            let items: Vec<(u32, u32, u64)> = ids
                .iter()
                .filter_map(|&id| planner.count_of(id).map(|c| (c, planner.images_of(id), id)))
                .collect();
            let shuffled = !matches!(planner.shuffle, Shuffle::Sequential);
            let rows = window_rows(
                &items,
                planner.options.seq_len,
                planner.options.max_image_tokens,
                shuffled.then_some((planner.seed, self.epoch, p.window)),
            );
            for row in rows {
                let tokens = row
                    .iter()
                    .map(|&id| u64::from(planner.count_of(id).unwrap_or(0)))
                    .sum();
                p.rows.push_row(&row, tokens);
            }
            if p.rows.len() >= 1 << ROW_BITS {
                return Err(EngineError::Config(format!(
                    "epoch {} has more than 2^{ROW_BITS} rows",
                    self.epoch
                )));
            }
            p.at = end;
            p.window += 1;
            if end == n {
                self.done.store(true, Ordering::Release);
            }
        }
        Ok(r < p.rows.len())
    }

    /// The conversations of row `r` (planned first), `None` past the epoch's rows.
    pub fn row(&self, planner: &ChatPlanner, r: u64) -> Result<Option<Vec<u64>>> {
        if !self.ensure(planner, r)? {
            return Ok(None);
        }
        Ok(self.lock().rows.row(r).map(<[u64]>::to_vec))
    }

    /// The rows as far as they can be told now: those planned, plus the conversations left
    /// times the rows per conversation so far (exact once planned).
    pub fn estimate(&self) -> u64 {
        let p = self.lock();
        estimate_rows(p.rows.len(), p.at, self.order.len())
    }
}

/// The rows of an epoch of `n` conversations as far as they can be told when the first `at`
/// made `rows`: those, plus the conversations left times the rows per conversation so far
/// (before any window, a row per conversation: the bound).
pub(crate) fn estimate_rows(rows: u64, at: u64, n: u64) -> u64 {
    if at == 0 {
        return n;
    }
    let per = rows as f64 / at as f64;
    rows + (n.saturating_sub(at) as f64 * per).round() as u64
}

/// A lazily planned epoch's rows, as [`LateRows`] asks them of one dataset's plan (with its
/// planner) or of a mixture's.
pub(crate) trait LazyRows: Send + Sync + std::fmt::Debug {
    /// Plan until row `r` exists or the windows run out; whether it exists.
    fn ensure(&self, r: u64) -> Result<bool>;
    /// The rows, once every window is planned.
    fn known(&self) -> Option<u64>;
    /// The rows planned so far.
    fn planned(&self) -> u64;
    /// The estimate from the windows planned so far ([`estimate_rows`]).
    fn estimate(&self) -> u64;
    /// Whether every conversation it plans from is counted.
    fn all_counted(&self) -> bool;
}

/// A lazily planned epoch as the engine's order sees its length ([`LateLen`]).
#[derive(Debug)]
pub(crate) struct LateRows<T>(pub T);

impl<T: LazyRows> LateLen for LateRows<T> {
    fn known(&self) -> Option<u64> {
        self.0.known()
    }

    fn at_least(&self, p: u64) -> bool {
        // a window that cannot be planned: its batch reports why (the row's fill plans it again)
        self.0.ensure(p).unwrap_or(true)
    }

    fn estimate(&self) -> u64 {
        if self.0.all_counted() {
            // counted since the order was made (in the background): planning is arithmetic now
            return self.finish();
        }
        self.0.estimate()
    }

    fn finish(&self) -> u64 {
        let _ = self.0.ensure(u64::MAX);
        self.0.planned()
    }
}

/// One dataset's epoch plan with its planner.
#[derive(Debug)]
struct LatePlan {
    planner: Arc<ChatPlanner>,
    plan: Arc<EpochPlan>,
}

impl LazyRows for LatePlan {
    fn ensure(&self, r: u64) -> Result<bool> {
        self.plan.ensure(&self.planner, r)
    }
    fn known(&self) -> Option<u64> {
        self.plan.known()
    }
    fn planned(&self) -> u64 {
        self.plan.lock().rows.len()
    }
    fn estimate(&self) -> u64 {
        self.plan.estimate()
    }
    fn all_counted(&self) -> bool {
        self.planner.all_counted()
    }
}

/// The row order: row `r` of epoch `e` is id `e << 40 | r`.
#[derive(Debug)]
pub(crate) struct RowIds;

impl PositionMap for RowIds {
    fn ids(&self, epoch: u64, positions: std::ops::Range<u64>, out: &mut Vec<u64>) {
        out.extend(positions.map(|p| (epoch << ROW_BITS) | p));
    }
}

/// The order of [`ChatRows`]: the row order of each epoch ([`ChatPlanner::plan_of`]). While
/// conversations are still being counted its length is known late (`LatePlan`); once all
/// are counted the epoch is planned whole first (its length exact from the start).
#[derive(Debug)]
pub struct RowOrder {
    planner: Arc<ChatPlanner>,
}

impl Order for RowOrder {
    fn epoch(&self, shuffle: &Shuffle, seed: u64, epoch: u64) -> Result<EpochOrder> {
        let plan = self.planner.plan_of(epoch)?;
        let planner = Arc::clone(&self.planner);
        let planned_with = (&self.planner.shuffle, self.planner.seed);
        row_order(
            LatePlan { planner, plan },
            planned_with,
            shuffle,
            seed,
            epoch,
        )
    }
}

/// The row order of epoch `epoch` planned by `plan` (whose rows were permuted with
/// `planned_with`, the shuffle and seed the engine's must be): once every conversation is
/// counted the epoch is planned whole first (its length exact from the start), else its length
/// is known late ([`LateRows`]).
pub(crate) fn row_order<T: LazyRows + 'static>(
    plan: T,
    planned_with: (&Shuffle, u64),
    shuffle: &Shuffle,
    seed: u64,
    epoch: u64,
) -> Result<EpochOrder> {
    if planned_with != (shuffle, seed) {
        return Err(EngineError::Config(
            "the row order was planned with another shuffle or seed".into(),
        ));
    }
    if plan.all_counted() {
        plan.ensure(u64::MAX)?;
    }
    let order = EpochOrder::custom(
        plan.known().unwrap_or(0),
        shuffle,
        seed,
        epoch,
        Arc::new(RowIds),
    );
    Ok(match plan.known() {
        Some(_) => order,
        None => order.known_late(Arc::new(LateRows(plan))),
    })
}

/// Column indices.
const INPUT: usize = 0;
const LABELS: usize = 1;
const POSITION: usize = 2;
const SEGMENT: usize = 3;
const DOCS: usize = 4;

/// Rows of whole conversations (see the module's documentation).
#[derive(Debug)]
pub struct ChatRows {
    planner: Arc<ChatPlanner>,
    outputs: Vec<(String, Output)>,
}

/// The columns of packed rows of `seq_len` tokens: the token columns, `doc_ids`, the int64
/// columns `extra` (one value per conversation, like `doc_ids`), then, with `images`,
/// `mrope_position_ids` (int64 `[3, seq_len]`: [`mrope_positions`]) and `pixel_values` and
/// `image_grid_thw` (list columns: a row's patches and grids).
pub(crate) fn row_outputs(seq_len: u32, extra: &[&str], images: bool) -> Vec<(String, Output)> {
    let n = seq_len as usize;
    let col = |name: &str, dtype, len| {
        (
            name.to_string(),
            Output::Fixed {
                dtype,
                shape: vec![len],
            },
        )
    };
    let mut out = vec![
        col("input_ids", DType::I32, n),
        col("labels", DType::I64, n),
        col("position_ids", DType::I64, n),
        col("segment_ids", DType::I32, n),
        col("doc_ids", DType::I64, 1),
    ];
    out.extend(extra.iter().map(|name| col(name, DType::I64, 1)));
    if images {
        out.push((
            "mrope_position_ids".to_string(),
            Output::Fixed {
                dtype: DType::I64,
                shape: vec![3, n],
            },
        ));
        out.push(("pixel_values".to_string(), Output::List));
        out.push(("image_grid_thw".to_string(), Output::List));
    }
    out
}

impl ChatRows {
    /// The rows `planner` plans.
    pub fn new(planner: Arc<ChatPlanner>) -> ChatRows {
        ChatRows {
            outputs: row_outputs(planner.options.seq_len, &[], planner.vision.is_some()),
            planner,
        }
    }

    /// The planner.
    pub fn planner(&self) -> &Arc<ChatPlanner> {
        &self.planner
    }

    /// The conversations of row id `id` (its epoch planned up to it).
    fn row_of(&self, id: u64) -> Result<Vec<u64>> {
        let (epoch, r) = (id >> ROW_BITS, id & ((1 << ROW_BITS) - 1));
        let plan = self.planner.plan_of(epoch)?;
        plan.row(&self.planner, r)?.ok_or_else(|| {
            EngineError::Worker(format!(
                "row {r} of epoch {epoch} is past the epoch's {} rows",
                plan.lock().rows.len()
            ))
        })
    }
}

impl From<Arc<ChatRows>> for Loadable {
    fn from(rows: Arc<ChatRows>) -> Loadable {
        Loadable {
            order: Arc::new(RowOrder {
                planner: Arc::clone(&rows.planner),
            }),
            samples: rows,
            groups: None,
        }
    }
}

impl Samples for ChatRows {
    fn len(&self) -> u64 {
        // rows never outnumber conversations (a resume state's position is checked against it;
        // the row order gives each epoch's own count)
        self.planner.counts.len() as u64
    }

    fn layout(&self) -> Layout {
        Layout {
            mean_bytes: u64::from(self.planner.options.seq_len) * 4,
            blocks: None,
            whole_batch_tasks: false,
            stage_names: vec!["encode".to_string()],
            fingerprint: self.planner.fingerprint.clone(),
        }
    }

    fn columns(&self) -> &[(String, Output)] {
        &self.outputs
    }

    fn batch_outputs(&self, ids: &[u64]) -> Option<Vec<Output>> {
        let rows: Vec<Option<Vec<(&ChatPlanner, u64)>>> = ids
            .iter()
            .map(|&id| {
                let convs = self.row_of(id).ok()?;
                Some(convs.iter().map(|&c| (&*self.planner, c)).collect())
            })
            .collect();
        let image_row = self.planner.vision.as_ref().map(ChatVision::row_len);
        Some(rows_batch_outputs(
            &self.outputs,
            DOCS..DOCS + 1,
            &rows,
            image_row,
        ))
    }

    fn fill(
        &self,
        id: u64,
        _k: usize,
        _io: &mut TaskIo,
        cx: &mut TaskCtx<'_, '_>,
        out: &mut SlotWriter<'_>,
    ) -> Result<()> {
        let mut clock = cx.ws.clock();
        let convs = self.row_of(id)?;
        let ids: Vec<i64> = convs.iter().map(|&c| c as i64).collect();
        let planners: Vec<(&ChatPlanner, u64)> =
            convs.iter().map(|&c| (&*self.planner, c)).collect();
        let image_row = self.planner.vision.as_ref().map(ChatVision::row_len);
        let bytes = fill_row(
            &planners,
            &[&ids],
            self.planner.options.pad_id,
            image_row,
            out,
        )?;
        cx.ws.read(bytes);
        cx.ws.lap(0, id, &mut clock);
        Ok(())
    }
}

/// The outputs of a batch of packed rows (`rows`: each slot's conversations with their
/// planners, `None` where the row is not known: its fill fails): the per-conversation columns
/// `docs` as wide as the batch's longest row, and with images (`image_row` floats a patch)
/// `pixel_values` one ragged tensor, each row's place sized from its planned image tokens, so
/// the workers write the patches where the batch delivers them.
pub(crate) fn rows_batch_outputs(
    outputs: &[(String, Output)],
    docs: std::ops::Range<usize>,
    rows: &[Option<Vec<(&ChatPlanner, u64)>>],
    image_row: Option<usize>,
) -> Vec<Output> {
    let widest = rows
        .iter()
        .flatten()
        .map(Vec::len)
        .max()
        .unwrap_or(1)
        .max(1);
    let patches = |row: &Option<Vec<(&ChatPlanner, u64)>>| -> usize {
        row.iter()
            .flatten()
            .map(|&(p, c)| {
                let m = p.vision().map_or(0, |v| v.proc.merge_size as usize);
                p.images_of(c) as usize * m * m
            })
            .sum()
    };
    let pixels = outputs.len().saturating_sub(2);
    outputs
        .iter()
        .enumerate()
        .map(|(c, (_, o))| match (c, o, image_row) {
            (c, Output::Fixed { dtype, .. }, _) if docs.contains(&c) => Output::Fixed {
                dtype: *dtype,
                shape: vec![widest],
            },
            (c, Output::List, Some(row_len)) if c == pixels => Output::Ragged {
                dtype: DType::F32,
                row_shape: vec![row_len],
                rows: rows.iter().map(patches).collect(),
            },
            (_, o, _) => o.clone(),
        })
        .collect()
}

/// Fill a packed row's slot (the columns of [`row_outputs`]): the conversations `convs` (each
/// its planner and id) one after another, the per-conversation columns `docs` (`doc_ids`, then
/// the extra ones; -1 past the row's conversations), and with `image_row` (floats a patch) the
/// row's `mrope_position_ids`, `pixel_values` and `image_grid_thw`. Returns the bytes read.
pub(crate) fn fill_row(
    convs: &[(&ChatPlanner, u64)],
    docs: &[&[i64]],
    pad: u32,
    image_row: Option<usize>,
    out: &mut SlotWriter<'_>,
) -> Result<usize> {
    const FIXED: &str = "the row's columns are fixed";
    let mut slots = out.fixed_columns();
    let cols = slots.len();
    let mut take = |c: usize| slots.get_mut(c).and_then(Option::take);
    let mut row = RowColumns {
        input: bytemuck::cast_slice_mut(take(INPUT).expect(FIXED)),
        labels: bytemuck::cast_slice_mut(take(LABELS).expect(FIXED)),
        position: bytemuck::cast_slice_mut(take(POSITION).expect(FIXED)),
        segment: bytemuck::cast_slice_mut(take(SEGMENT).expect(FIXED)),
    };
    for (c, values) in docs.iter().enumerate() {
        let col: &mut [i64] = bytemuck::cast_slice_mut(take(DOCS + c).expect(FIXED));
        for (k, slot) in col.iter_mut().enumerate() {
            *slot = values.get(k).copied().unwrap_or(-1);
        }
    }
    let mut bytes = row.write(convs.iter().copied(), pad)?;
    let Some(row_len) = image_row else {
        return Ok(bytes);
    };
    // `pixel_values`, the column before the last: when ragged, this row's place in the batch's
    let pixels = take(cols.saturating_sub(2));
    let images = row_images(convs.iter().copied(), row_len, pixels)?;
    let mrope: &mut [i64] = bytemuck::cast_slice_mut(take(DOCS + docs.len()).expect(FIXED));
    let placeholders: Vec<Option<u32>> = convs
        .iter()
        .map(|(p, _)| p.vision.as_ref().map(|v| v.placeholder))
        .collect();
    mrope_positions(row.input, row.segment, &placeholders, &images.grids, mrope).map_err(|e| {
        match convs.first() {
            Some((p, c)) => p.bad(*c, e.to_string()),
            None => EngineError::Worker(e.to_string()),
        }
    })?;
    drop(slots);
    bytes += images.bytes_read;
    images.write_lists(out);
    Ok(bytes)
}

/// What filling a row's images makes: `pixel_values` (unless written into the batch's ragged
/// column) and `image_grid_thw` as the batch's list values, each image's grid and merge size in
/// order, and the bytes of encoded images read.
pub(crate) struct RowImages {
    pixel_values: Option<FieldValue<'static>>,
    grid_values: FieldValue<'static>,
    /// (grid, merge size) of each image, in row order.
    pub(crate) grids: Vec<([u32; 3], u32)>,
    pub(crate) bytes_read: usize,
}

impl RowImages {
    /// Set the row's `pixel_values` and `image_grid_thw` (the last two columns of `out`).
    pub(crate) fn write_lists(self, out: &mut SlotWriter<'_>) {
        let cols = out.outputs().len();
        if let Some(pixel_values) = self.pixel_values {
            out.set_list(cols - 2, pixel_values);
        }
        out.set_list(cols - 1, self.grid_values);
    }
}

/// The images of a row's conversations (each its planner and id), in order: each
/// conversation's first images whose tokens make up the image tokens it was planned with.
/// `row_len`: floats per patch row (every planner with images has it). `into`: the row's place
/// in the batch's ragged `pixel_values` (sized from the plan), written in place; without it
/// the row's own array is made.
pub(crate) fn row_images<'p>(
    convs: impl Iterator<Item = (&'p ChatPlanner, u64)>,
    row_len: usize,
    into: Option<&mut [u8]>,
) -> Result<RowImages> {
    // first the grids, from the headers: the row's size is then known and its buffer made once
    struct Image<'p> {
        planner: &'p ChatPlanner,
        conv: u64,
        record: usize,
        item: usize,
        grid: [u32; 3],
    }
    let mut records: Vec<Vec<FieldValue<'static>>> = Vec::new();
    let mut images: Vec<Image<'p>> = Vec::new();
    let mut bytes_read = 0usize;
    for (planner, conv) in convs {
        let (Some(vision), planned) = (planner.vision(), planner.images_of(conv)) else {
            continue;
        };
        if planned == 0 {
            continue;
        }
        let values = planner.record(conv)?;
        let data = vision
            .images(&values)
            .map_err(|e| planner.bad(conv, e.to_string()))?;
        let m = u64::from(vision.proc.merge_size * vision.proc.merge_size);
        let mut left = u64::from(planned);
        for (k, d) in data.iter().enumerate() {
            if left == 0 {
                break;
            }
            let grid = crate::stages::vision::with_workspace(|ws| {
                vision.proc.image_grid(ws, d, DEFAULT_MAX_PIXELS)
            })
            .map_err(|e| planner.bad(conv, format!("image {k}: {e}")))?;
            let tokens = grid.iter().map(|&g| u64::from(g)).product::<u64>() / m;
            if tokens > left {
                return Err(planner.bad(
                    conv,
                    format!(
                        "image {k} is {tokens} tokens where its row was planned for {left} more \
                         image tokens: the image changed since the conversation was counted"
                    ),
                ));
            }
            left -= tokens;
            bytes_read += d.len();
            images.push(Image {
                planner,
                conv,
                record: records.len(),
                item: k,
                grid,
            });
        }
        if left != 0 {
            return Err(planner.bad(
                conv,
                format!(
                    "its images make {} image tokens where its row was planned for {planned}: \
                     the images changed since the conversation was counted",
                    u64::from(planned) - left
                ),
            ));
        }
        records.push(values);
    }
    let patches: usize = images
        .iter()
        .map(|i| i.grid.iter().map(|&g| g as usize).product::<usize>())
        .sum();
    let mut own = Vec::new();
    let ragged = into.is_some();
    let bytes: &mut [u8] = match into {
        Some(place) if place.len() == patches * row_len * 4 => place,
        Some(place) => {
            let floats = place.len() / 4;
            return Err(EngineError::Worker(format!(
                "a row planned for {floats} floats of pixel values has images of {} floats: \
                 the images changed since their conversations were counted",
                patches * row_len
            )));
        }
        None => {
            own = vec![0u8; patches * row_len * 4];
            crate::batch::advise_huge_pages(&mut own);
            &mut own
        }
    };
    let mut grids = Vec::with_capacity(images.len() * 3 * 8);
    let mut thw = Vec::with_capacity(images.len());
    let mut scratch = Vec::new();
    let mut at = 0usize;
    // the images of the record being read (images come record after record)
    let mut current: Option<(usize, Vec<&[u8]>)> = None;
    for im in &images {
        let Some(vision) = im.planner.vision() else {
            continue;
        };
        let proc = &vision.proc;
        let n = proc.values(im.grid);
        if current.as_ref().is_none_or(|(r, _)| *r != im.record) {
            let list = vision
                .images(&records[im.record])
                .map_err(|e| im.planner.bad(im.conv, e.to_string()))?;
            current = Some((im.record, list));
        }
        let data = current.as_ref().map_or(&[][..], |(_, list)| list[im.item]);
        let out = &mut bytes[at * 4..(at + n) * 4];
        crate::stages::vision::with_workspace(|ws| {
            match bytemuck::try_cast_slice_mut::<u8, f32>(out) {
                Ok(values) => proc.process_into(ws, data, DEFAULT_MAX_PIXELS, im.grid, values),
                Err(_) => {
                    scratch.resize(n, 0f32);
                    proc.process_into(ws, data, DEFAULT_MAX_PIXELS, im.grid, &mut scratch)?;
                    out.copy_from_slice(bytemuck::cast_slice(&scratch));
                    Ok(())
                }
            }
        })
        .map_err(|e| im.planner.bad(im.conv, format!("image {}: {e}", im.item)))?;
        for g in im.grid {
            grids.extend_from_slice(&i64::from(g).to_le_bytes());
        }
        thw.push((im.grid, proc.merge_size));
        at += n;
    }
    let array = |dtype, shape: Vec<u64>, data: Vec<u8>| {
        FieldValue::Array(ArrayValue {
            dtype,
            shape,
            data: std::borrow::Cow::Owned(data),
        })
    };
    Ok(RowImages {
        pixel_values: (!ragged)
            .then(|| array(DType::F32, vec![patches as u64, row_len as u64], own)),
        grid_values: array(DType::I64, vec![images.len() as u64, 3], grids),
        grids: thw,
        bytes_read,
    })
}

/// The token columns of one packed row being filled.
pub(crate) struct RowColumns<'a> {
    pub(crate) input: &'a mut [i32],
    pub(crate) labels: &'a mut [i64],
    pub(crate) position: &'a mut [i64],
    pub(crate) segment: &'a mut [i32],
}

impl RowColumns<'_> {
    /// Write the conversations of a row one after another (each its planner and id: one
    /// dataset's, or a mixture's sources'), then padding (`pad`, labels `-100`, positions on,
    /// segment `-1`). Each encoding is checked against the count its row was planned from.
    /// Returns the bytes of tokens written.
    pub(crate) fn write<'p>(
        &mut self,
        convs: impl Iterator<Item = (&'p ChatPlanner, u64)>,
        pad: u32,
    ) -> Result<usize> {
        let n = self.input.len();
        let mut at = 0usize;
        for (s, (planner, conv)) in convs.enumerate() {
            let enc = planner.encoding(conv)?;
            // the row was planned from this count: an encoding of another length means the
            // conversation is not the one counted (kept counts of data changed in place); one
            // longer than a row was truncated to its count (`seq_len`, or before an image)
            let planned = planner.count_of(conv).map_or(0, |c| c as usize);
            let seq_len = planner.options.seq_len as usize;
            let len = planned.min(n - at);
            let fits = enc.input_ids.len() == planned
                || (enc.input_ids.len() > seq_len && planned <= seq_len);
            if !fits || len != planned {
                return Err(planner.bad(
                    conv,
                    format!(
                        "its encoding has {} tokens where its row was planned for {planned}: \
                         the conversation changed since it was counted{}",
                        enc.input_ids.len(),
                        if planner.counts_kept {
                            " (counts kept under $STOKEHOLD_INDEX_DIR/counts: remove them)"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            for j in 0..len {
                let t = enc.input_ids[j];
                self.input[at + j] = i32::try_from(t)
                    .map_err(|_| planner.bad(conv, format!("token id {t} does not fit int32")))?;
                self.labels[at + j] = if enc.mask[j] != 0 {
                    i64::from(t)
                } else {
                    IGNORE_LABEL
                };
                self.position[at + j] = j as i64;
                self.segment[at + j] = s as i32;
            }
            at += len;
        }
        self.input[at..].fill(pad as i32);
        self.labels[at..].fill(IGNORE_LABEL);
        for (k, p) in self.position[at..].iter_mut().enumerate() {
            *p = k as i64;
        }
        self.segment[at..].fill(-1);
        Ok(at * 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_encodings_are_set_once_in_chunks_made_on_first_use() {
        let n = KeptEncodings::CHUNK * 2 + 5;
        let kept = KeptEncodings::new(n);
        let enc = |t: u32| ChatEncoding {
            input_ids: vec![t, t + 1],
            mask: vec![0, 1],
        };
        assert_eq!(kept.chunks.len(), 3);
        for i in [0, KeptEncodings::CHUNK - 1, KeptEncodings::CHUNK * 2 + 4] {
            assert!(kept.get(i).is_none());
            assert!(kept.set(i, enc(i as u32)));
            assert!(!kept.set(i, enc(7)), "a slot is set once");
            assert_eq!(kept.get(i), Some(&enc(i as u32)));
        }
        // the middle chunk was never written to: not made
        assert!(kept.chunks[1].get().is_none());
        assert!(kept.get(KeptEncodings::CHUNK + 3).is_none());
        assert!(
            kept.get(1).is_none(),
            "a neighbour in a made chunk is empty"
        );
        assert!(!kept.set(n, enc(1)), "past the end");
        assert!(kept.get(n).is_none());
    }

    /// A deterministic generator (splitmix64) for the tests' lengths.
    struct Gen(u64);

    impl Gen {
        fn unit(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            ((mix64(self.0) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }

        /// Log-normal with the median `median` and `sigma`, by Box-Muller.
        fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
            let (u, v) = (self.unit(), self.unit());
            let z = (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos();
            median * (sigma * z).exp()
        }
    }

    #[test]
    fn best_fit_decreasing_puts_each_item_in_the_fullest_row_that_holds_it() {
        // longest first: 7 opens row 0, 6 opens row 1, 3 fits row 0 (room 3) exactly over row 1
        // (room 4), 4 fills row 1, 2 opens row 2 (rooms 0, 0), 1 goes to row 2
        let items = [(3, 10), (7, 11), (1, 12), (6, 13), (4, 14), (2, 15)];
        assert_eq!(
            pack_window(&items, 10),
            vec![vec![11, 10], vec![13, 14], vec![15, 12]]
        );
        // ties in length keep the order of the epoch; a full-length item is a row of its own
        assert_eq!(
            pack_window(&[(5, 1), (5, 2), (10, 3), (5, 4)], 10),
            vec![vec![3], vec![1, 2], vec![4]]
        );
        assert!(pack_window(&[], 10).is_empty());
    }

    #[test]
    fn fill_is_at_least_97_percent_on_log_normal_conversation_lengths_at_4096() {
        // SFT sets: median a few hundred tokens, a long tail (sigma 1), some over the row
        // (truncated to it, as the planner does)
        let seq_len = 4096u32;
        for (median, sigma) in [(350.0, 1.0), (700.0, 0.9), (200.0, 1.2)] {
            let mut g = Gen(median as u64);
            let lengths: Vec<u32> = (0..20_000)
                .map(|_| (g.lognormal(median, sigma).round() as u32).clamp(1, seq_len))
                .collect();
            let (mut tokens, mut rows) = (0u64, 0u64);
            for (w, chunk) in lengths.chunks(1024).enumerate() {
                let items: Vec<(u32, u64)> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, &c)| (c, (w * 1024 + i) as u64))
                    .collect();
                let packed = pack_window(&items, seq_len);
                for row in &packed {
                    let used: u32 = row.iter().map(|&id| lengths[id as usize]).sum();
                    assert!(used <= seq_len);
                    tokens += u64::from(used);
                }
                rows += packed.len() as u64;
                let mut all: Vec<u64> = packed.into_iter().flatten().collect();
                all.sort_unstable();
                assert_eq!(all, items.iter().map(|x| x.1).collect::<Vec<_>>());
            }
            let fill = tokens as f64 / (rows * u64::from(seq_len)) as f64;
            assert!(fill >= 0.97, "median {median}, sigma {sigma}: fill {fill}");
        }
    }

    #[test]
    fn rows_keep_within_the_image_budget_and_fill_95_percent_of_8192_on_a_vision_mix() {
        // an item over another row's image room opens a row even where its tokens would fit
        let items = [(5, 4, 1), (3, 4, 2), (2, 0, 3)];
        assert_eq!(
            pack_window_within(&items, 10, Some(6)),
            vec![vec![1, 3], vec![2]]
        );
        assert_eq!(pack_window_within(&items, 10, None), vec![vec![1, 2, 3]]);
        // realistic vision-language mixes: 20% text-only, else 1-8 images (Qwen2-VL's tokens
        // for 1280*28*28 max pixels), text log-normal around 300 tokens. Photographs up to
        // 3 MP, no image budget; then web-sized images (~0.3 MP) within 6144 image tokens a row.
        // (A budget under the data's share of image tokens caps the fill at about budget /
        // (share * seq_len): images then take rows that text cannot fill.)
        let proc = stokehold_ops::vision::Qwen2Vl {
            max_pixels: 1280 * 28 * 28,
            ..Default::default()
        };
        let photos: &[(u32, u32)] = &[
            (640, 480),
            (1024, 768),
            (800, 600),
            (1280, 720),
            (500, 375),
            (1920, 1080),
            (333, 500),
            (2048, 1536),
        ];
        let web: &[(u32, u32)] = &[(640, 480), (500, 375), (333, 500), (800, 600), (512, 512)];
        let seq_len = 8192u32;
        for (sizes, budget) in [(photos, None), (web, Some(6 * 1024))] {
            for seed in [1u64, 2, 3] {
                let mut g = Gen(seed * 7919);
                let mut all = Vec::new();
                for i in 0..20_000u64 {
                    let text = g.lognormal(300.0, 0.9).round().clamp(8.0, 4000.0) as u32;
                    let images = if g.unit() < 0.2 {
                        0
                    } else {
                        1 + (g.unit() * 8.0) as usize
                    };
                    let mut im = 0u32;
                    for _ in 0..images.min(8) {
                        let (w, h) = sizes[(g.unit() * sizes.len() as f64) as usize % sizes.len()];
                        im += proc.tokens(w, h).unwrap() as u32;
                    }
                    // the planner leaves out the longer ones and those over the image budget
                    if text + im <= seq_len && budget.is_none_or(|b| im <= b) {
                        all.push((text + im, im, i));
                    }
                }
                let (mut tokens, mut rows) = (0u64, 0u64);
                for chunk in all.chunks(1024) {
                    let of: BTreeMap<u64, (u32, u32)> =
                        chunk.iter().map(|&(n, im, id)| (id, (n, im))).collect();
                    let packed = pack_window_within(chunk, seq_len, budget);
                    for row in &packed {
                        let (used, images) = row
                            .iter()
                            .fold((0u32, 0u32), |(a, b), id| (a + of[id].0, b + of[id].1));
                        assert!(used <= seq_len && budget.is_none_or(|b| images <= b));
                        tokens += u64::from(used);
                    }
                    rows += packed.len() as u64;
                    assert_eq!(packed.iter().map(Vec::len).sum::<usize>(), chunk.len());
                }
                let fill = tokens as f64 / (rows * u64::from(seq_len)) as f64;
                assert!(fill >= 0.95, "seed {seed}, budget {budget:?}: fill {fill}");
            }
        }
    }

    #[test]
    fn row_ids_carry_their_epoch() {
        let mut out = Vec::new();
        RowIds.ids(3, 5..7, &mut out);
        assert_eq!(out, vec![(3 << ROW_BITS) | 5, (3 << ROW_BITS) | 6]);
    }
}
