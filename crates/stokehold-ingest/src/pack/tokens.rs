//! `pack --tokenizer`: JSONL text into a *token dataset* (docs/format.md §7, docs/text.md).
//!
//! One record per document (per usable JSONL line), with one uncompressed `bytes` field `tokens`
//! holding the document's token ids little-endian as `u16` (vocabulary ≤ 65,536) or `u32`. The
//! manifest's `source.tokens` says so, with the vocabulary size, the tokenizer's fingerprint, the
//! BOS/EOS ids and the token count; the tokenizer itself is copied into the dataset.
//!
//! Lines are read in order in chunks; each chunk is parsed and tokenized in parallel on the pool
//! while the previous chunk is written, so the output is byte-identical for any thread count.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use rayon::prelude::*;
pub use stokehold_format::tokens::{TOKENIZER_FILE, TOKENS_FIELD, token_schema};
use stokehold_format::tokens::{TokenDType, TokenIdOutOfRange, TokenMeta};
use stokehold_ops::text::{TextError, TextTokenizer};
use stokehold_storage::DatasetWriter;

use super::{PackError, PackOptions, PackReport, Progress, Skipped, SourceKind};

/// What to tokenize and how.
#[derive(Debug, Clone)]
pub struct TokenOptions {
    /// The JSONL key holding each document's text.
    pub text_field: String,
    /// The `tokenizer.json` to use.
    pub tokenizer: PathBuf,
    /// A token (by name, e.g. `<s>`) put before every document.
    pub prepend_bos: Option<String>,
    /// A token (by name, e.g. `</s>`) put after every document.
    pub append_eos: Option<String>,
}

/// Lines per chunk; a chunk also ends after [`CHUNK_BYTES`] of text.
const CHUNK_LINES: usize = 2048;
const CHUNK_BYTES: usize = 8 << 20;

struct Line {
    at: (usize, u64),
    bytes: Vec<u8>,
}

enum Done {
    Doc { record: Vec<u8>, tokens: u64 },
    Skip(Skipped),
}

/// Why a document cannot become a record (the document is skipped and counted).
#[derive(Debug, thiserror::Error)]
enum RecordError {
    #[error(transparent)]
    Id(#[from] TokenIdOutOfRange),
    #[error("{0} tokens do not fit one record")]
    TooLong(usize),
}

/// The record of one document: the one-field table (`u32` payload length) then the tokens.
/// Identical to what [`stokehold_format::record::RecordEncoder`] writes for [`token_schema`].
fn encode_record(ids: &[u32], dtype: TokenDType, vocab: u32) -> Result<Vec<u8>, RecordError> {
    let mut record = Vec::with_capacity(4 + ids.len() * dtype.size());
    record.extend_from_slice(&[0; 4]);
    dtype.append(ids, vocab, &mut record)?;
    let payload = u32::try_from(record.len() - 4).map_err(|_| RecordError::TooLong(ids.len()))?;
    record[..4].copy_from_slice(&payload.to_le_bytes());
    Ok(record)
}

struct Encoder<'a> {
    tok: &'a TextTokenizer,
    field: &'a str,
    bos: Option<u32>,
    eos: Option<u32>,
    dtype: TokenDType,
}

impl Encoder<'_> {
    fn encode(&self, line: &Line, files: &[PathBuf]) -> Option<Done> {
        let skip = |reason: String| {
            Some(Done::Skip(Skipped {
                input: format!("{}:{}", files[line.at.0].display(), line.at.1),
                reason,
            }))
        };
        let text = std::str::from_utf8(&line.bytes).ok()?;
        if text.trim().is_empty() {
            return None;
        }
        let value: serde_json::Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return skip(format!("invalid JSON: {e}")),
        };
        let Some(obj) = value.as_object() else {
            return skip("line is not a JSON object".into());
        };
        let doc = match obj.get(self.field) {
            Some(serde_json::Value::String(s)) => s,
            Some(other) => {
                return skip(format!(
                    "field {:?} is not a string (found {})",
                    self.field,
                    match other {
                        serde_json::Value::Null => "null",
                        serde_json::Value::Bool(_) => "a boolean",
                        serde_json::Value::Number(_) => "a number",
                        serde_json::Value::Array(_) => "an array",
                        _ => "an object",
                    }
                ));
            }
            None => return skip(format!("no {:?} field", self.field)),
        };
        let mut ids = Vec::with_capacity(doc.len() / 3 + 2);
        ids.extend(self.bos);
        if let Err(e) = self.tok.encode_into(doc, &mut ids) {
            return skip(e.to_string());
        }
        ids.extend(self.eos);
        match encode_record(&ids, self.dtype, self.tok.vocab_size()) {
            Ok(record) => Some(Done::Doc {
                record,
                tokens: ids.len() as u64,
            }),
            Err(e) => skip(e.to_string()),
        }
    }
}

/// Reads the lines of the files in order, in chunks.
struct Lines<'a> {
    files: &'a [PathBuf],
    file: usize,
    line: u64,
    reader: Option<BufReader<std::fs::File>>,
    max_line: u64,
}

impl Lines<'_> {
    /// The next chunk (empty at the end). Invalid UTF-8 and over-long lines are skipped here.
    fn chunk(&mut self, skipped: &mut Vec<Skipped>) -> Result<Vec<Line>, PackError> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while out.len() < CHUNK_LINES && bytes < CHUNK_BYTES {
            if self.reader.is_none() {
                let Some(path) = self.files.get(self.file) else {
                    break;
                };
                let f = std::fs::File::open(path).map_err(|e| PackError::io(path, e))?;
                self.reader = Some(BufReader::with_capacity(1 << 20, f));
                self.line = 0;
            }
            let r = self.reader.as_mut().expect("just opened");
            let path = &self.files[self.file];
            let mut buf = Vec::new();
            let n = r
                .by_ref()
                .take(self.max_line + 1)
                .read_until(b'\n', &mut buf)
                .map_err(|e| PackError::io(path, e))?;
            if n == 0 {
                self.reader = None;
                self.file += 1;
                continue;
            }
            self.line += 1;
            let at = format!("{}:{}", path.display(), self.line);
            if buf.len() as u64 > self.max_line && buf.last() != Some(&b'\n') {
                // Skip the rest of the line without holding it.
                let mut rest = Vec::new();
                loop {
                    rest.clear();
                    let m = r
                        .by_ref()
                        .take(1 << 20)
                        .read_until(b'\n', &mut rest)
                        .map_err(|e| PackError::io(path, e))?;
                    if m == 0 || rest.last() == Some(&b'\n') {
                        break;
                    }
                }
                skipped.push(Skipped {
                    input: at,
                    reason: format!("line longer than the limit of {} bytes", self.max_line),
                });
                continue;
            }
            while matches!(buf.last(), Some(b'\n' | b'\r')) {
                buf.pop();
            }
            if std::str::from_utf8(&buf).is_err() {
                skipped.push(Skipped {
                    input: at,
                    reason: "not UTF-8".into(),
                });
                continue;
            }
            bytes += buf.len();
            out.push(Line {
                at: (self.file, self.line),
                bytes: buf,
            });
        }
        Ok(out)
    }
}

/// The manifest's `source` of a token dataset.
/// The manifest's `source` of a token dataset (docs/format.md §9) written by `kind` (`jsonl` for
/// `pack --tokenizer`, `ray` for the Ray Datasink): the one place its keys are spelled.
pub fn token_source(
    kind: &str,
    text_field: &str,
    skipped: usize,
    meta: &TokenMeta,
) -> serde_json::Value {
    serde_json::json!({
        "kind": kind,
        "skipped": skipped,
        "text_field": text_field,
        "tokens": meta.to_value(),
    })
}

/// `source.tokens` of `documents` documents, `total_tokens` tokens in all, tokenized by `tok`
/// with `bos` / `eos` ids around each document.
pub fn token_meta(
    tok: &TextTokenizer,
    bos: Option<u32>,
    eos: Option<u32>,
    documents: u64,
    total_tokens: u64,
) -> TokenMeta {
    TokenMeta {
        dtype: TokenDType::for_vocab(tok.vocab_size()),
        vocab_size: Some(tok.vocab_size().into()),
        tokenizer: Some(TOKENIZER_FILE.into()),
        tokenizer_fingerprint: Some(tok.fingerprint().into()),
        bos_id: bos,
        eos_id: eos,
        documents: Some(documents),
        total_tokens: Some(total_tokens),
    }
}

/// Tokenize the `text_field` of every line of the JSONL `sources` into a token dataset at `dest`.
pub fn pack_tokens(
    sources: &[PathBuf],
    dest: &Path,
    options: &PackOptions,
    tokens: &TokenOptions,
    progress: &dyn Progress,
) -> Result<PackReport, PackError> {
    super::check_paths(sources, dest)?;
    stokehold_storage::require_local(&tokens.tokenizer)?;
    let text_err = |e: TextError| PackError::Input(e.to_string());
    let tok = TextTokenizer::from_file(&tokens.tokenizer).map_err(text_err)?;
    let tokenizer_bytes =
        super::read_file(&tokens.tokenizer, stokehold_ops::text::MAX_TOKENIZER_BYTES)
            .map_err(|e| PackError::Input(format!("{}: {e}", tokens.tokenizer.display())))?;
    let bos = tokens
        .prepend_bos
        .as_deref()
        .map(|n| tok.token_id(n))
        .transpose()
        .map_err(text_err)?;
    let eos = tokens
        .append_eos
        .as_deref()
        .map(|n| tok.token_id(n))
        .transpose()
        .map_err(text_err)?;
    let files = super::source_files(
        sources,
        |p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "jsonl" | "ndjson" | "json"))
        },
        "JSONL files",
    )?;
    let input_total: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let pool = super::thread_pool(options.threads, "tok")?;
    let enc = Encoder {
        tok: &tok,
        field: &tokens.text_field,
        bos,
        eos,
        dtype: TokenDType::for_vocab(tok.vocab_size()),
    };
    let mut writer = DatasetWriter::create_with(
        dest,
        token_schema(),
        options.write,
        &options.storage_options,
    )?;
    let mut lines = Lines {
        files: &files,
        file: 0,
        line: 0,
        reader: None,
        max_line: options.max_item_bytes,
    };
    let mut skipped: Vec<Skipped> = Vec::new();
    let mut total_tokens = 0u64;
    let mut input_bytes = 0u64;
    let strict = options.strict;
    let note_skip = |s: Skipped, skipped: &mut Vec<Skipped>| -> Result<(), PackError> {
        if strict {
            return Err(PackError::Strict(s));
        }
        skipped.push(s);
        Ok(())
    };
    progress.start("tokenizing", None, Some(input_total));
    let mut pending: Option<Vec<Done>> = None;
    loop {
        let mut early = Vec::new();
        let chunk = lines.chunk(&mut early)?;
        for s in early {
            note_skip(s, &mut skipped)?;
        }
        input_bytes += chunk.iter().map(|l| l.bytes.len() as u64).sum::<u64>();
        let (written, next) = pool.install(|| {
            rayon::join(
                || -> Result<(), PackError> {
                    let Some(done) = pending.take() else {
                        return Ok(());
                    };
                    let (mut docs, mut toks) = (0u64, 0u64);
                    for d in done {
                        match d {
                            Done::Doc { record, tokens } => {
                                writer.write_encoded(&record)?;
                                docs += 1;
                                toks += tokens;
                            }
                            Done::Skip(s) => note_skip(s, &mut skipped)?,
                        }
                    }
                    total_tokens += toks;
                    progress.advance(docs, toks);
                    Ok(())
                },
                || {
                    chunk
                        .par_iter()
                        .filter_map(|l| enc.encode(l, &files))
                        .collect::<Vec<_>>()
                },
            )
        });
        written?;
        if next.is_empty() && chunk.is_empty() {
            break;
        }
        pending = Some(next);
    }
    progress.finish();
    if writer.is_empty() {
        writer.abort();
        return Err(super::nothing_packed(&skipped, "lines", "documents"));
    }
    super::check_skips(&skipped, writer.len(), options.max_skip_fraction)?;
    let documents = writer.len();
    let meta = token_meta(&tok, bos, eos, documents, total_tokens);
    writer.set_source(token_source(
        SourceKind::Jsonl.name(),
        &tokens.text_field,
        skipped.len(),
        &meta,
    ));
    writer.add_file(TOKENIZER_FILE, &tokenizer_bytes)?;
    super::add_skipped_file(&mut writer, &skipped)?;
    let manifest = writer.finish()?;
    Ok(PackReport {
        kind: SourceKind::Jsonl,
        manifest,
        input_bytes,
        skipped,
        progressive_jpegs: 0,
        transcoded_to_baseline: 0,
        resized: 0,
        kept_as_is: Vec::new(),
        notes: vec![format!(
            "{total_tokens} tokens ({} each) in {documents} documents",
            TokenDType::for_vocab(tok.vocab_size()).name()
        )],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The manifest's `source` as pack wrote it before [`TokenMeta`], by hand.
    fn by_hand(
        bos: Option<u32>,
        eos: Option<u32>,
        vocab: u32,
        dtype: TokenDType,
    ) -> serde_json::Value {
        serde_json::json!({
            "kind": SourceKind::Jsonl.name(),
            "skipped": 3usize,
            "text_field": "text",
            "tokens": {
                "dtype": dtype.name(),
                "vocab_size": vocab,
                "tokenizer": TOKENIZER_FILE,
                "tokenizer_fingerprint": "crc32c:0123abcd:42",
                "bos_id": bos,
                "eos_id": eos,
                "documents": 7u64,
                "total_tokens": 99u64,
            },
        })
    }

    #[test]
    fn source_through_token_meta_is_byte_identical() {
        for (bos, eos, vocab) in [
            (None, None, 100u32),
            (Some(1), None, 70_000),
            (Some(0), Some(2), 65_536),
        ] {
            let dtype = TokenDType::for_vocab(vocab);
            let meta = TokenMeta {
                dtype,
                vocab_size: Some(vocab.into()),
                tokenizer: Some(TOKENIZER_FILE.into()),
                tokenizer_fingerprint: Some("crc32c:0123abcd:42".into()),
                bos_id: bos,
                eos_id: eos,
                documents: Some(7),
                total_tokens: Some(99),
            };
            let new = token_source(SourceKind::Jsonl.name(), "text", 3, &meta);
            let old = by_hand(bos, eos, vocab, dtype);
            assert_eq!(
                serde_json::to_string_pretty(&new).unwrap(),
                serde_json::to_string_pretty(&old).unwrap()
            );
            // and it reads back
            let back: TokenMeta = serde_json::from_value(new["tokens"].clone()).unwrap();
            assert_eq!(back, meta);
        }
    }
}
