//! Tokenization: a Hugging Face `tokenizer.json` (any model: BPE, WordPiece, Unigram, WordLevel)
//! loaded with the `tokenizers` crate, and the token storage types of token datasets. A
//! byte-level BPE of the usual shape (GPT-2, Llama 3, Qwen 2 style, no normalizer) is encoded by
//! our own [`crate::byte_bpe`] instead, with the same ids and offsets, several times faster;
//! `STOKEHOLD_FAST_BPE=0` turns that off.
//!
//! Encoding never adds the tokenizer's own special tokens (its post-processor); beginning- and
//! end-of-document tokens are explicit ([`TextTokenizer::token_id`] resolves their names), so a
//! packed stream holds exactly what the options say.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::byte_bpe::ByteBpe;

/// Largest `tokenizer.json` accepted (the biggest public ones are around 20 MB).
pub const MAX_TOKENIZER_BYTES: u64 = 256 << 20;

/// Errors of tokenizer loading and encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TextError {
    /// The tokenizer file could not be read.
    #[error("{}: cannot read the tokenizer: {detail}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// The file is not a tokenizer the `tokenizers` crate understands.
    #[error("{}: not a valid tokenizer.json: {detail}", path.display())]
    Parse {
        /// The file (or `<memory>`).
        path: PathBuf,
        /// The parser's message.
        detail: String,
    },
    /// A special token named in the options is not in the vocabulary.
    #[error("{}: token {token:?} is not in the tokenizer's vocabulary", path.display())]
    UnknownToken {
        /// The tokenizer file.
        path: PathBuf,
        /// The token's name.
        token: String,
    },
    /// Encoding failed.
    #[error("tokenization failed: {0}")]
    Encode(String),
}

/// Each token's character offsets `(start, end)` in the text encoded.
pub type Offsets = Vec<(usize, usize)>;

/// A loaded tokenizer with its identity (for manifests and resume fingerprints).
#[derive(Clone)]
pub struct TextTokenizer {
    inner: tokenizers::Tokenizer,
    /// Our encoder of the same tokenizer, where its shape is covered.
    fast: Option<Arc<ByteBpe>>,
    path: PathBuf,
    vocab_size: u32,
    fingerprint: String,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("path", &self.path)
            .field("vocab_size", &self.vocab_size)
            .field("fingerprint", &self.fingerprint)
            .field("fast", &self.fast.is_some())
            .finish()
    }
}

impl TextTokenizer {
    /// Load a `tokenizer.json` (at most [`MAX_TOKENIZER_BYTES`]).
    pub fn from_file(path: impl AsRef<Path>) -> Result<TextTokenizer, TextError> {
        use std::io::Read;
        let path = path.as_ref();
        let read_err = |detail: String| TextError::Read {
            path: path.to_path_buf(),
            detail,
        };
        let f = std::fs::File::open(path).map_err(|e| read_err(e.to_string()))?;
        let mut bytes = Vec::new();
        f.take(MAX_TOKENIZER_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| read_err(e.to_string()))?;
        if bytes.len() as u64 > MAX_TOKENIZER_BYTES {
            return Err(read_err(format!(
                "larger than the limit of {MAX_TOKENIZER_BYTES} bytes"
            )));
        }
        TextTokenizer::from_bytes(&bytes, path)
    }

    /// Parse the bytes of a `tokenizer.json`; `path` names it in messages.
    pub fn from_bytes(bytes: &[u8], path: impl AsRef<Path>) -> Result<TextTokenizer, TextError> {
        let path = path.as_ref().to_path_buf();
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TextError::Parse {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let vocab_size = u32::try_from(inner.get_vocab_size(true)).unwrap_or(u32::MAX);
        let fast = if std::env::var_os("STOKEHOLD_FAST_BPE").is_some_and(|v| v == "0") {
            None
        } else {
            serde_json::from_slice::<serde_json::Value>(bytes)
                .ok()
                .and_then(|json| ByteBpe::from_json(&json))
                .map(Arc::new)
        };
        Ok(TextTokenizer {
            inner,
            fast,
            path,
            vocab_size,
            fingerprint: fingerprint(bytes),
        })
    }

    /// Wrap a tokenizer built in code (tests, training); its fingerprint is that of its JSON.
    pub fn from_tokenizer(inner: tokenizers::Tokenizer) -> Result<TextTokenizer, TextError> {
        let json = inner
            .to_string(false)
            .map_err(|e| TextError::Encode(e.to_string()))?;
        TextTokenizer::from_bytes(json.as_bytes(), "<memory>")
    }

    /// The `tokenizers` crate's tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    /// `crc32c:<8 hex digits>:<length>` of the `tokenizer.json` bytes.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The id of token `name`, or a [`TextError::UnknownToken`].
    pub fn token_id(&self, name: &str) -> Result<u32, TextError> {
        self.inner
            .token_to_id(name)
            .ok_or_else(|| TextError::UnknownToken {
                path: self.path.clone(),
                token: name.to_string(),
            })
    }

    /// Whether encoding goes through our byte-level BPE ([`crate::byte_bpe`]) rather than the
    /// `tokenizers` crate (the same ids and offsets either way).
    pub fn is_fast(&self) -> bool {
        self.fast.is_some()
    }

    /// The ids of `text`, without the tokenizer's special tokens, appended to `out`.
    pub fn encode_into(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TextError> {
        if let Some(fast) = self.fast.as_ref().filter(|f| f.covers(text)) {
            fast.encode(text, out, None);
            return Ok(());
        }
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| TextError::Encode(e.to_string()))?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }

    /// The ids of `text` (without the tokenizer's special tokens) and each one's character
    /// offsets `(start, end)` in `text`, as `tokenizers`' `encode_char_offsets` gives them.
    pub fn encode_with_offsets(&self, text: &str) -> Result<(Vec<u32>, Offsets), TextError> {
        if let Some(fast) = self.fast.as_ref().filter(|f| f.covers(text)) {
            let (mut ids, mut offsets) = (Vec::new(), Vec::new());
            fast.encode(text, &mut ids, Some(&mut offsets));
            return Ok((ids, offsets));
        }
        let enc = self
            .inner
            .encode_char_offsets(text, false)
            .map_err(|e| TextError::Encode(e.to_string()))?;
        Ok((enc.get_ids().to_vec(), enc.get_offsets().to_vec()))
    }

    /// The ids of `text`, without the tokenizer's special tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TextError> {
        let mut v = Vec::new();
        self.encode_into(text, &mut v)?;
        Ok(v)
    }

    /// The text of `ids` (special tokens kept).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TextError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| TextError::Encode(e.to_string()))
    }
}

/// `crc32c:<8 hex digits>:<length>` — identifies a tokenizer.json's bytes (an integrity tag, not a security
/// hash).
fn fingerprint(bytes: &[u8]) -> String {
    format!("crc32c:{:08x}:{}", crc32c::crc32c(bytes), bytes.len())
}

/// A small WordLevel tokenizer trained on `texts` (whitespace pre-tokenizer, `[UNK]`, `<s>`,
/// `</s>`, `<pad>` as special tokens): for tests, examples and benchmarks; nothing is downloaded.
pub fn train_word_level(texts: &[String], vocab_size: usize) -> Result<TextTokenizer, TextError> {
    use tokenizers::models::wordlevel::{WordLevel, WordLevelTrainerBuilder};
    use tokenizers::pre_tokenizers::whitespace::Whitespace;
    use tokenizers::{AddedToken, TokenizerBuilder};
    let err = |e: tokenizers::Error| TextError::Encode(e.to_string());
    let specials: Vec<AddedToken> = ["[UNK]", "<s>", "</s>", "<pad>"]
        .iter()
        .map(|s| AddedToken::from(*s, true))
        .collect();
    let mut trainer = WordLevelTrainerBuilder::default()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .special_tokens(specials)
        .build()
        .map_err(|e| TextError::Encode(e.to_string()))?;
    let model = WordLevel::builder()
        .unk_token("[UNK]".into())
        .build()
        .map_err(err)?;
    let mut tok: tokenizers::TokenizerImpl<
        WordLevel,
        tokenizers::NormalizerWrapper,
        Whitespace,
        tokenizers::PostProcessorWrapper,
        tokenizers::DecoderWrapper,
    > = TokenizerBuilder::new()
        .with_model(model)
        .with_pre_tokenizer(Some(Whitespace {}))
        .build()
        .map_err(err)?;
    tok.train(&mut trainer, texts.iter()).map_err(err)?;
    let json = tok.to_string(false).map_err(err)?;
    TextTokenizer::from_bytes(json.as_bytes(), "<trained>")
}

/// `n` synthetic documents of varied length (1 to about 40 sentences of English-like words),
/// a pure function of `seed`: text for tests, examples and benchmarks.
pub fn synthetic_documents(n: usize, seed: u64) -> Vec<String> {
    const WORDS: [&str; 64] = [
        "the",
        "a",
        "data",
        "loader",
        "reads",
        "shards",
        "from",
        "disk",
        "and",
        "model",
        "trains",
        "on",
        "tokens",
        "every",
        "step",
        "while",
        "workers",
        "decode",
        "batches",
        "in",
        "order",
        "with",
        "seed",
        "epoch",
        "rank",
        "world",
        "size",
        "resume",
        "state",
        "exact",
        "window",
        "sequence",
        "document",
        "boundary",
        "position",
        "segment",
        "mask",
        "attention",
        "learning",
        "rate",
        "gradient",
        "loss",
        "falls",
        "slowly",
        "quickly",
        "river",
        "mountain",
        "city",
        "night",
        "morning",
        "small",
        "large",
        "red",
        "green",
        "blue",
        "cat",
        "dog",
        "runs",
        "sleeps",
        "writes",
        "counts",
        "of",
        "to",
        "is",
    ];
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|_| {
            let sentences = 1 + (next() % 40) as usize;
            let mut doc = String::new();
            for s in 0..sentences {
                if s > 0 {
                    doc.push(' ');
                }
                let words = 3 + (next() % 14) as usize;
                for w in 0..words {
                    if w > 0 {
                        doc.push(' ');
                    }
                    let r = next();
                    if r % 23 == 0 {
                        doc.push_str(&(r % 1000).to_string());
                    } else {
                        doc.push_str(WORDS[(r >> 8) as usize % WORDS.len()]);
                    }
                }
                doc.push('.');
            }
            doc
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Vec<String> {
        (0..200)
            .map(|i| format!("the cat {} sat on mat {} and the dog ran", i % 17, i % 5))
            .collect()
    }

    #[test]
    fn trained_tokenizer_round_trips_through_json() {
        let t = train_word_level(&corpus(), 1000).unwrap();
        assert!(t.vocab_size() > 10);
        let ids = t.encode("the cat sat").unwrap();
        assert_eq!(ids.len(), 3);
        assert_eq!(t.decode(&ids).unwrap(), "the cat sat");
        let again =
            TextTokenizer::from_bytes(t.inner().to_string(false).unwrap().as_bytes(), "x").unwrap();
        assert_eq!(again.encode("the cat sat").unwrap(), ids);
        assert!(t.token_id("</s>").is_ok());
        assert!(matches!(
            t.token_id("<nope>"),
            Err(TextError::UnknownToken { .. })
        ));
    }

    #[test]
    fn missing_and_invalid_files_are_typed_errors() {
        let e = TextTokenizer::from_file("/nonexistent/tokenizer.json").unwrap_err();
        assert!(matches!(e, TextError::Read { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/tokenizer.json"));
        let e = TextTokenizer::from_bytes(b"{not json", "bad.json").unwrap_err();
        assert!(matches!(e, TextError::Parse { .. }), "{e}");
    }
}
