//! A byte-level BPE encoder for the common shape of `tokenizer.json` (GPT-2, Llama 3, Qwen 2,
//! most chat models): no normalizer, a byte-level pre-tokenizer splitting with a regular
//! expression, a BPE model with every byte in its vocabulary, added tokens matched whole. It
//! gives exactly the ids and character offsets of the `tokenizers` crate (tested against it:
//! `tests` below, and the chat templates' tests against `transformers`) at several times its
//! speed: the text is split with the `regex` crate's automata instead of a backtracking engine,
//! pieces are merged as raw bytes (no byte-to-character mapping, no `String` per token, no
//! alignment table per byte), and the merges of a piece seen before come from a per-thread cache.
//!
//! A `NFC` normalizer (Qwen 2's) is covered for text already in NFC (by the quick check of the
//! normalization crate `tokenizers` uses, [`ByteBpe::covers`]): normalizing leaves such text
//! and its offsets as they are; other text goes to the `tokenizers` crate.
//!
//! [`ByteBpe::from_json`] answers `None` for any other shape (another normalizer, a prefix space, a
//! post-processor that trims offsets, BPE dropout, a subword prefix, added tokens stripping
//! their neighbours, a pattern the `regex` crate cannot run, ...): the `tokenizers` crate then
//! encodes, as before.
//!
//! The one part of the usual patterns that the `regex` crate has no syntax for is the lookahead
//! in `\s+(?!\S)|\s+` (their last two alternatives): the pattern runs without its `\s+(?!\S)`,
//! and a run of whitespace that only the final `\s+` matched (known from a capture group, asked
//! for just those runs), of two or more characters and followed by more text, gives back its
//! last character, as the lookahead does: `\s+(?!\S)` matches all but the last character of
//! such a run, and the last one starts the next piece.

use std::cell::RefCell;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use rustc_hash::FxHashMap;
use serde_json::Value;

/// The pattern of the byte-level pre-tokenizer with `use_regex` (GPT-2's).
const GPT2_PATTERN: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// The lookahead tail of the usual patterns.
const LOOKAHEAD_TAIL: &str = r"|\s+(?!\S)|\s+";

/// Pieces at most this long have their merges cached (longer ones are rare and merged anew).
const CACHED_PIECE: usize = 64;

/// Entries of one thread's cache of one tokenizer before it is emptied: at most a few MiB a
/// loader thread (pieces of at most 64 bytes); natural text repeats its common words well
/// within it.
const CACHE_ENTRIES: usize = 1 << 15;

/// A distinct number per encoder, the key of its per-thread cache.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// One encoder's merged pieces: a piece's bytes -> its ids.
type PieceCache = FxHashMap<Box<[u8]>, Box<[u32]>>;

thread_local! {
    /// Per encoder (its `id`), the pieces this thread merged.
    static CACHE: RefCell<FxHashMap<u64, PieceCache>> = RefCell::new(FxHashMap::default());
}

/// Added tokens matched whole in the text, before the pre-tokenizer (as `tokenizers` does:
/// leftmost-longest).
#[derive(Debug)]
struct Added {
    matcher: AhoCorasick,
    ids: Vec<u32>,
}

/// A byte-level BPE tokenizer (see the module's text).
#[derive(Debug)]
pub struct ByteBpe {
    id: u64,
    /// The pre-tokenizer's pattern without its lookahead alternative.
    split: regex::Regex,
    /// The same with the final `\s+` captured (group 1), None: the pattern had no lookahead tail.
    tail: Option<regex::Regex>,
    /// Added tokens not normalized (matched first), then normalized ones (with no normalizer,
    /// the same text), each in the pieces the first left.
    added: [Option<Added>; 2],
    byte_ids: [u32; 256],
    /// (left, right) -> (rank, merged id).
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// With `ignore_merges`: every token's bytes -> its id (a piece in the vocabulary is one token).
    whole: Option<FxHashMap<Box<[u8]>, u32>>,
    /// Per id of the vocabulary, its token's length in bytes (for offsets).
    lens: Vec<u32>,
    /// The tokenizer normalizes to NFC: only text in NFC is covered.
    nfc: bool,
}

/// GPT-2's map of bytes to the printable characters a byte-level vocabulary spells them with.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for (b, c) in out.iter_mut().enumerate() {
        let b = b as u32;
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        let code = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        *c = char::from_u32(code).expect("below 0x200");
    }
    out
}

/// The raw bytes of a byte-level token's text, None when a character is not one of the 256.
fn token_bytes(text: &str, inverse: &FxHashMap<char, u8>) -> Option<Vec<u8>> {
    text.chars().map(|c| inverse.get(&c).copied()).collect()
}

fn is_null_or(v: &Value, ok: impl Fn(&Value) -> bool) -> bool {
    v.is_null() || ok(v)
}

/// Whether a post-processor leaves the ids and offsets of an encoding without special tokens
/// as they are.
fn post_processor_keeps(p: &Value) -> bool {
    match p.get("type").and_then(Value::as_str) {
        None => p.is_null(),
        Some("ByteLevel") => p.get("trim_offsets") == Some(&Value::Bool(false)),
        Some("TemplateProcessing") => true,
        Some("Sequence") => p
            .get("processors")
            .and_then(Value::as_array)
            .is_some_and(|ps| ps.iter().all(post_processor_keeps)),
        Some(_) => false,
    }
}

/// The split pattern of a supported pre-tokenizer.
fn split_pattern(p: &Value) -> Option<String> {
    let byte_level = |b: &Value, regex: bool| {
        b.get("type").and_then(Value::as_str) == Some("ByteLevel")
            && b.get("add_prefix_space") == Some(&Value::Bool(false))
            && b.get("use_regex").and_then(Value::as_bool).unwrap_or(true) == regex
    };
    if byte_level(p, true) {
        return Some(GPT2_PATTERN.to_string());
    }
    if p.get("type").and_then(Value::as_str) != Some("Sequence") {
        return None;
    }
    let [split, bl] = p.get("pretokenizers")?.as_array()?.as_slice() else {
        return None;
    };
    let ok = split.get("type").and_then(Value::as_str) == Some("Split")
        && split.get("behavior").and_then(Value::as_str) == Some("Isolated")
        && split.get("invert") == Some(&Value::Bool(false))
        && byte_level(bl, false);
    if !ok {
        return None;
    }
    split
        .get("pattern")?
        .get("Regex")?
        .as_str()
        .map(str::to_string)
}

impl ByteBpe {
    /// The encoder of a `tokenizer.json`, None when its shape is not the one this encoder
    /// covers (the `tokenizers` crate is used then).
    pub fn from_json(json: &Value) -> Option<ByteBpe> {
        let null = |k: &str| json.get(k).is_none_or(Value::is_null);
        if !null("truncation") || !null("padding") {
            return None;
        }
        let nfc = match json.get("normalizer").unwrap_or(&Value::Null) {
            Value::Null => false,
            n if n.get("type").and_then(Value::as_str) == Some("NFC") => true,
            _ => return None,
        };
        if !post_processor_keeps(json.get("post_processor").unwrap_or(&Value::Null)) {
            return None;
        }
        let pattern = split_pattern(json.get("pre_tokenizer")?)?;
        let model = json.get("model")?;
        let plain = model.get("type").and_then(Value::as_str) == Some("BPE")
            && is_null_or(model.get("dropout")?, |d| d.as_f64() == Some(0.0))
            && model.get("byte_fallback").and_then(Value::as_bool) != Some(true)
            && is_null_or(model.get("continuing_subword_prefix")?, |s| s == "")
            && is_null_or(model.get("end_of_word_suffix")?, |s| s == "");
        if !plain {
            return None;
        }
        let ignore_merges = model.get("ignore_merges").and_then(Value::as_bool) == Some(true);
        // the vocabulary in raw bytes
        let chars = byte_chars();
        let inverse: FxHashMap<char, u8> = chars
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        let mut vocab: FxHashMap<Box<[u8]>, u32> = FxHashMap::default();
        for (text, id) in model.get("vocab")?.as_object()? {
            let id = u32::try_from(id.as_u64()?).ok()?;
            // a token not spelled in byte-level characters is never produced by merges of
            // bytes; keep out of the map
            if let Some(bytes) = token_bytes(text, &inverse) {
                vocab.insert(bytes.into(), id);
            }
        }
        // ids index a table: a vocabulary's ids are 0..n (a file naming ids far past its size
        // is not this shape)
        let top = vocab.values().copied().max()? as usize;
        if top > 4 * vocab.len() + 4096 {
            return None;
        }
        let mut lens = vec![0u32; top + 1];
        for (bytes, &id) in &vocab {
            lens[id as usize] = u32::try_from(bytes.len()).ok()?;
        }
        let mut byte_ids = [0u32; 256];
        for (b, id) in byte_ids.iter_mut().enumerate() {
            // every byte must be a token (else `tokenizers` drops or maps it to unk)
            *id = *vocab.get(&[b as u8][..])?;
        }
        let mut merges: FxHashMap<(u32, u32), (u32, u32)> = FxHashMap::default();
        for (rank, m) in model.get("merges")?.as_array()?.iter().enumerate() {
            let (l, r) = match m {
                Value::String(s) => s.split_once(' ')?,
                Value::Array(a) => match a.as_slice() {
                    [Value::String(l), Value::String(r)] => (l.as_str(), r.as_str()),
                    _ => return None,
                },
                _ => return None,
            };
            let lb = token_bytes(l, &inverse)?;
            let rb = token_bytes(r, &inverse)?;
            let mut both = lb.clone();
            both.extend_from_slice(&rb);
            let (li, ri, bi) = (
                vocab.get(&lb[..])?,
                vocab.get(&rb[..])?,
                vocab.get(&both[..])?,
            );
            // a repeated pair keeps its last rank (`tokenizers` collects them into a map)
            merges.insert((*li, *ri), (u32::try_from(rank).ok()?, *bi));
        }
        let added = added_matchers(json.get("added_tokens")?, nfc)?;
        let body = pattern.strip_suffix(LOOKAHEAD_TAIL);
        let (split, tail) = match body {
            Some(body) => (
                regex::Regex::new(&format!("{body}|\\s+")).ok()?,
                Some(regex::Regex::new(&format!("(?:{body})|(\\s+)")).ok()?),
            ),
            None => (regex::Regex::new(&pattern).ok()?, None),
        };
        Some(ByteBpe {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            split,
            tail,
            added,
            byte_ids,
            merges,
            whole: ignore_merges.then_some(vocab),
            lens,
            nfc,
        })
    }

    /// Whether [`ByteBpe::encode`] gives `tokenizers`' answer for `text`: always, but with a
    /// NFC normalizer only for text that NFC leaves as it is.
    pub fn covers(&self, text: &str) -> bool {
        !self.nfc
            || text.is_ascii()
            || unicode_normalization_alignments::is_nfc_quick(text.chars())
                == unicode_normalization_alignments::IsNormalized::Yes
    }

    /// The ids of `text` appended to `ids`; with `offsets`, each token's character offsets
    /// `(start, end)` too, as `tokenizers`' `encode_char_offsets` gives them (a token holding
    /// part of a character spans the whole character).
    pub fn encode(
        &self,
        text: &str,
        ids: &mut Vec<u32>,
        mut offsets: Option<&mut Vec<(usize, usize)>>,
    ) {
        let bytes = text.as_bytes();
        let mut chars = CharIndex::default();
        let mut pieces: Vec<(usize, usize)> = Vec::new();
        CACHE.with(|cell| {
            let mut guard = cell.try_borrow_mut().ok();
            let cache = guard.as_deref_mut().map(|all| {
                if all.len() > 16 && !all.contains_key(&self.id) {
                    // encoders come and go rarely; never let dropped ones pile up
                    all.clear();
                }
                all.entry(self.id).or_default()
            });
            let mut cache = cache;
            for (lo, hi, id) in self.added_spans(text) {
                if let Some(id) = id {
                    ids.push(id);
                    if let Some(o) = offsets.as_deref_mut() {
                        o.push(chars.range(bytes, lo, hi));
                    }
                    continue;
                }
                pieces.clear();
                self.pre_tokenize(text, lo, hi, &mut pieces);
                for &(a, b) in &pieces {
                    let before = ids.len();
                    self.piece(&bytes[a..b], cache.as_deref_mut(), ids);
                    if let Some(o) = offsets.as_deref_mut() {
                        let mut at = a;
                        for &id in &ids[before..] {
                            let end = at + self.lens[id as usize] as usize;
                            o.push(chars.range(bytes, at, end));
                            at = end;
                        }
                    }
                }
            }
        });
    }

    /// `text` cut at the added tokens: `(lo, hi, Some(id))` for a token, `None` for the text
    /// between.
    fn added_spans(&self, text: &str) -> Vec<(usize, usize, Option<u32>)> {
        let mut spans: Vec<(usize, usize, Option<u32>)> = vec![(0, text.len(), None)];
        for added in self.added.iter().flatten() {
            let mut next = Vec::with_capacity(spans.len() * 2);
            for &(lo, hi, id) in &spans {
                if id.is_some() {
                    next.push((lo, hi, id));
                    continue;
                }
                let mut at = lo;
                for m in added.matcher.find_iter(&text[lo..hi]) {
                    let (a, b) = (lo + m.start(), lo + m.end());
                    if a > at {
                        next.push((at, a, None));
                    }
                    next.push((a, b, Some(added.ids[m.pattern().as_usize()])));
                    at = b;
                }
                if at < hi {
                    next.push((at, hi, None));
                }
            }
            spans = next;
        }
        spans
    }

    /// The pre-tokenizer's pieces of `text[lo..hi]` (matches and the text between them, each a
    /// piece: `Isolated`), pushed to `out` as byte ranges of `text`.
    fn pre_tokenize(&self, text: &str, lo: usize, hi: usize, out: &mut Vec<(usize, usize)>) {
        let seg = &text[lo..hi];
        let mut at = 0;
        let mut prev = 0;
        while at < seg.len() {
            let Some(m) = self.split.find_at(seg, at) else {
                break;
            };
            if m.is_empty() {
                // no piece of its own: the text around it stays in the pieces between matches
                at = m.start() + seg[m.start()..].chars().next().map_or(1, char::len_utf8);
                continue;
            }
            let mut end = m.end();
            if let Some(tail) = &self.tail {
                let s = m.as_str();
                let mut cs = s.chars();
                let several = cs.next().is_some() && cs.next().is_some();
                if end < seg.len() && several && s.chars().all(char::is_whitespace) {
                    let only_tail = tail
                        .captures_at(seg, m.start())
                        .and_then(|c| c.get(1))
                        .is_some_and(|g| g.start() == m.start());
                    if only_tail {
                        // `\s+(?!\S)`: all but the last character of the run
                        end -= s.chars().next_back().map_or(0, char::len_utf8);
                    }
                }
            }
            if m.start() > prev {
                out.push((lo + prev, lo + m.start()));
            }
            out.push((lo + m.start(), lo + end));
            prev = end;
            at = end;
        }
        if prev < seg.len() {
            out.push((lo + prev, hi));
        }
    }

    /// The ids of one piece, from the cache when it was merged before.
    fn piece(&self, bytes: &[u8], cache: Option<&mut PieceCache>, ids: &mut Vec<u32>) {
        if let [b] = bytes {
            ids.push(self.byte_ids[*b as usize]);
            return;
        }
        if let Some(&id) = self.whole.as_ref().and_then(|w| w.get(bytes)) {
            ids.push(id);
            return;
        }
        let Some(cache) = cache.filter(|_| bytes.len() <= CACHED_PIECE) else {
            self.merge(bytes, ids);
            return;
        };
        if let Some(got) = cache.get(bytes) {
            ids.extend_from_slice(got);
            return;
        }
        let before = ids.len();
        self.merge(bytes, ids);
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(bytes.into(), ids[before..].into());
    }

    /// BPE merges of one piece, exactly as `tokenizers` applies them: the pair of lowest rank
    /// first, the leftmost of equal ranks, until none applies.
    fn merge(&self, bytes: &[u8], ids: &mut Vec<u32>) {
        #[derive(Clone, Copy)]
        struct Symbol {
            id: u32,
            prev: usize,
            next: usize,
            gone: bool,
        }
        const NONE: usize = usize::MAX;
        let n = bytes.len();
        let mut syms: Vec<Symbol> = bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| Symbol {
                id: self.byte_ids[b as usize],
                prev: if i == 0 { NONE } else { i - 1 },
                next: if i + 1 == n { NONE } else { i + 1 },
                gone: false,
            })
            .collect();
        // min-heap on (rank, position): Reverse of the pair
        let mut queue: BinaryHeap<std::cmp::Reverse<(u32, usize, u32)>> = syms
            .windows(2)
            .enumerate()
            .filter_map(|(i, w)| {
                self.merges
                    .get(&(w[0].id, w[1].id))
                    .map(|&(rank, new)| std::cmp::Reverse((rank, i, new)))
            })
            .collect();
        while let Some(std::cmp::Reverse((_, pos, new))) = queue.pop() {
            let s = syms[pos];
            if s.gone || s.next == NONE {
                continue;
            }
            let right = syms[s.next];
            // an entry made stale by an earlier merge
            if self.merges.get(&(s.id, right.id)).map(|m| m.1) != Some(new) {
                continue;
            }
            syms[pos].id = new;
            syms[pos].next = right.next;
            syms[s.next].gone = true;
            if right.next != NONE {
                syms[right.next].prev = pos;
            }
            let cur = syms[pos];
            if cur.prev != NONE
                && let Some(&(rank, id)) = self.merges.get(&(syms[cur.prev].id, cur.id))
            {
                queue.push(std::cmp::Reverse((rank, cur.prev, id)));
            }
            if cur.next != NONE
                && let Some(&(rank, id)) = self.merges.get(&(cur.id, syms[cur.next].id))
            {
                queue.push(std::cmp::Reverse((rank, pos, id)));
            }
        }
        ids.extend(syms.iter().filter(|s| !s.gone).map(|s| s.id));
    }
}

/// The added tokens of a `tokenizer.json`, in two matchers as `tokenizers` splits them (not
/// normalized first); None when a token strips or needs word bounds, or, with a NFC
/// normalizer (`nfc`), a normalized one is not in NFC (not covered).
fn added_matchers(tokens: &Value, nfc: bool) -> Option<[Option<Added>; 2]> {
    let mut groups: [(Vec<String>, Vec<u32>); 2] = Default::default();
    for t in tokens.as_array()? {
        let flag = |k: &str| t.get(k).and_then(Value::as_bool).unwrap_or(false);
        if flag("single_word") || flag("lstrip") || flag("rstrip") {
            return None;
        }
        let content = t.get("content")?.as_str()?;
        if content.is_empty() {
            return None;
        }
        let id = u32::try_from(t.get("id")?.as_u64()?).ok()?;
        if nfc && flag("normalized") && !unicode_normalization_alignments::is_nfc(content) {
            return None;
        }
        let g = &mut groups[usize::from(flag("normalized"))];
        g.0.push(content.to_string());
        g.1.push(id);
    }
    let build = |(patterns, ids): (Vec<String>, Vec<u32>)| -> Option<Option<Added>> {
        if patterns.is_empty() {
            return Some(None);
        }
        let matcher = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()?;
        Some(Some(Added { matcher, ids }))
    };
    let [raw, normalized] = groups;
    Some([build(raw)?, build(normalized)?])
}

/// Character indices of byte offsets asked in increasing order: a forward-only count of the
/// characters started before each offset.
#[derive(Default)]
struct CharIndex {
    /// Bytes counted so far, and the characters starting in them.
    at: usize,
    chars: usize,
}

impl CharIndex {
    fn lead_before(&mut self, bytes: &[u8], p: usize) -> usize {
        if p < self.at {
            // asked out of order (never, by construction): count again from the start
            self.at = 0;
            self.chars = 0;
        }
        self.chars += bytes[self.at..p]
            .iter()
            .filter(|&&b| (b as i8) >= -0x40)
            .count();
        self.at = p;
        self.chars
    }

    /// The characters `[start, end)` that bytes `[lo, hi)` touch.
    fn range(&mut self, bytes: &[u8], lo: usize, hi: usize) -> (usize, usize) {
        let mid_char = lo < bytes.len() && (bytes[lo] as i8) < -0x40;
        let start = self.lead_before(bytes, lo) - usize::from(mid_char);
        (start, self.lead_before(bytes, hi))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::TextTokenizer;
    use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::{AddedToken, TokenizerBuilder};

    /// Llama 3's split pattern (Qwen 2's is the same with `\p{N}` for `\p{N}{1,3}`).
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    const SPECIALS: [&str; 4] = ["<|im_start|>", "<|im_end|>", "<s>", "<|im_start|>x"];

    /// Text made of the fragments that exercise the pattern's alternatives, the whitespace
    /// rule, characters of several bytes and the added tokens.
    fn texts(n: usize, seed: u64) -> Vec<String> {
        const PARTS: &[&str] = &[
            "the",
            "The",
            "cat",
            " dog",
            "naïve",
            "café",
            "日本語",
            "é",
            "e\u{301}",
            "🙂",
            "👩‍👩‍👧",
            "'s",
            "'S",
            "'ll",
            "'LL",
            "'re",
            "'d",
            "'",
            "''",
            "12",
            "12345",
            "٣٤",
            "½",
            " ",
            "  ",
            "   ",
            "\t",
            "\n",
            "\n\n",
            "\r\n",
            " \n ",
            "\u{a0}",
            "\u{3000}",
            "\u{2028}",
            "\u{85}",
            "\u{0}",
            "!",
            "!!",
            "...",
            "—",
            "(",
            ")",
            "$",
            "<",
            "<|",
            "|>",
            "<|im_start|>",
            "<|im_end|>",
            "<s>",
            "<|im_start|>x",
            "x<s>y",
            " <s>",
            "a1b2",
            "Ωmega",
            "ﬁ",
        ];
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..n)
            .map(|_| {
                let len = (next() % 40) as usize;
                (0..len)
                    .map(|_| PARTS[(next() % PARTS.len() as u64) as usize])
                    .collect()
            })
            .collect()
    }

    /// A byte-level BPE trained on `texts` (GPT-2's pre-tokenizer), as `tokenizer.json`.
    fn trained(vocab: usize) -> serde_json::Value {
        let specials: Vec<AddedToken> = SPECIALS
            .iter()
            .map(|s| AddedToken::from(*s, true))
            .collect();
        let mut trainer = BpeTrainerBuilder::new()
            .vocab_size(vocab)
            .min_frequency(0)
            .show_progress(false)
            .special_tokens(specials)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build();
        let mut tok: tokenizers::TokenizerImpl<
            BPE,
            tokenizers::NormalizerWrapper,
            ByteLevel,
            tokenizers::PostProcessorWrapper,
            tokenizers::DecoderWrapper,
        > = TokenizerBuilder::new()
            .with_model(BPE::default())
            .with_pre_tokenizer(Some(ByteLevel::new(false, true, true)))
            .build()
            .unwrap();
        let corpus = texts(3000, 7);
        tok.train(&mut trainer, corpus.iter()).unwrap();
        serde_json::from_str(&tok.to_string(false).unwrap()).unwrap()
    }

    fn with_split(mut json: serde_json::Value, pattern: &str) -> serde_json::Value {
        json["pre_tokenizer"] = serde_json::json!({
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
            ]
        });
        json
    }

    /// Ours against the `tokenizers` crate on the same file: ids and character offsets, and the
    /// ids of the path without offsets.
    fn same_as_tokenizers(json: &serde_json::Value, n: usize) {
        let tok = TextTokenizer::from_bytes(json.to_string().as_bytes(), "t.json").unwrap();
        assert!(tok.is_fast(), "this shape is covered");
        let hf = tok.inner();
        for (i, text) in texts(n, 11).iter().enumerate() {
            let want = hf.encode_char_offsets(text.as_str(), false).unwrap();
            let (ids, offsets) = tok.encode_with_offsets(text).unwrap();
            assert_eq!(ids, want.get_ids(), "text {i}: {text:?}");
            assert_eq!(offsets, want.get_offsets(), "text {i}: {text:?}");
            assert_eq!(tok.encode(text).unwrap(), ids, "text {i}: {text:?}");
        }
    }

    #[test]
    fn gpt2_byte_level_gives_the_ids_and_offsets_of_tokenizers() {
        for vocab in [300, 1200] {
            same_as_tokenizers(&trained(vocab), 3000);
        }
    }

    #[test]
    fn llama3_and_qwen2_split_patterns_give_the_ids_and_offsets_of_tokenizers() {
        let base = trained(1200);
        for pattern in [LLAMA3, QWEN2] {
            let mut json = with_split(base.clone(), pattern);
            same_as_tokenizers(&json, 3000);
            json["model"]["ignore_merges"] = serde_json::Value::Bool(true);
            same_as_tokenizers(&json, 3000);
        }
    }

    #[test]
    fn normalized_added_tokens_are_matched_after_the_others() {
        let mut json = trained(600);
        let n = json["model"]["vocab"].as_object().unwrap().len() as u64;
        let added = json["added_tokens"].as_array_mut().unwrap();
        for (k, content) in ["<|im", "im_end|>", "naïve c"].iter().enumerate() {
            added.push(serde_json::json!({
                "id": n + k as u64, "content": content, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": true, "special": false
            }));
        }
        same_as_tokenizers(&json, 2000);
    }

    #[test]
    fn other_shapes_are_left_to_tokenizers() {
        let base = trained(300);
        type Edit = fn(&mut serde_json::Value);
        let edits: Vec<(&str, Edit)> = vec![
            (
                "a normalizer",
                (|j| j["normalizer"] = serde_json::json!({"type": "NFKC"})),
            ),
            (
                "a prefix space",
                (|j| j["pre_tokenizer"]["add_prefix_space"] = true.into()),
            ),
            ("dropout", (|j| j["model"]["dropout"] = 0.1.into())),
            (
                "a subword prefix",
                (|j| j["model"]["continuing_subword_prefix"] = "##".into()),
            ),
            (
                "trimmed offsets",
                (|j| {
                    j["post_processor"] = serde_json::json!({
                "type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false})
                }),
            ),
            (
                "an added token stripping",
                (|j| j["added_tokens"][0]["lstrip"] = true.into()),
            ),
            (
                "a byte missing",
                (|j| {
                    j["model"]["vocab"].as_object_mut().unwrap().remove("Ā");
                }),
            ),
            (
                "lookbehind",
                (|j| *j = with_split(j.clone(), r"(?<=a)b|\s+")),
            ),
        ];
        for (what, edit) in edits {
            let mut json = base.clone();
            edit(&mut json);
            assert!(ByteBpe::from_json(&json).is_none(), "{what}");
        }
        assert!(ByteBpe::from_json(&base).is_some());
    }

    #[test]
    fn an_nfc_normalizer_is_covered_for_text_in_nfc_and_the_rest_goes_to_tokenizers() {
        let mut json = with_split(trained(1200), QWEN2);
        json["normalizer"] = serde_json::json!({"type": "NFC"});
        let bpe = ByteBpe::from_json(&json).unwrap();
        assert!(bpe.covers("plain text") && bpe.covers("naïve 日本語 🙂"));
        assert!(!bpe.covers("nai\u{308}ve"), "a combining mark NFC composes");
        assert!(!bpe.covers("\u{212b}"), "the angstrom sign NFC maps to Å");
        // texts with combining marks among them: either way, tokenizers' answer
        same_as_tokenizers(&json, 3000);
    }

    #[test]
    fn long_pieces_merge_as_short_ones_do() {
        // past the cache's piece length, merged anew each time: the same ids
        let json = trained(1200);
        let tok = TextTokenizer::from_bytes(json.to_string().as_bytes(), "t.json").unwrap();
        for text in [
            "!".repeat(500),
            "a".repeat(300),
            "日本語".repeat(100),
            " ".repeat(200) + "x",
        ] {
            let want = tok
                .inner()
                .encode_char_offsets(text.as_str(), false)
                .unwrap();
            let (ids, offsets) = tok.encode_with_offsets(&text).unwrap();
            assert_eq!(ids, want.get_ids());
            assert_eq!(offsets, want.get_offsets());
        }
    }
}
