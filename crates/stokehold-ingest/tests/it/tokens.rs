//! `pack --tokenizer`: JSONL text into token datasets, with a tokenizer trained in the test.

use std::fs;
use std::path::PathBuf;

use stokehold_format::record::RecordEncoder;
use stokehold_format::{FieldValue, TokenDType};
use stokehold_ingest::pack::tokens::token_schema;
use stokehold_ingest::{NoProgress, PackError, PackOptions, TokenOptions, pack_tokens};
use stokehold_ops::text::{TextTokenizer, synthetic_documents, train_word_level};
use stokehold_storage::Dataset;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    jsonl: PathBuf,
    tokenizer: PathBuf,
    docs: Vec<String>,
}

fn fixture(n: usize, vocab: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let docs = synthetic_documents(n, 3);
    let tok = train_word_level(&docs, vocab).unwrap();
    let tokenizer = root.join("tokenizer.json");
    fs::write(&tokenizer, tok.inner().to_string(false).unwrap()).unwrap();
    let jsonl = root.join("corpus.jsonl");
    let mut text = String::new();
    for (i, d) in docs.iter().enumerate() {
        text.push_str(&serde_json::json!({"id": i, "text": d}).to_string());
        text.push('\n');
    }
    fs::write(&jsonl, text).unwrap();
    Fixture {
        _dir: dir,
        root,
        jsonl,
        tokenizer,
        docs,
    }
}

use crate::common;
use common::tree;

fn topts(f: &Fixture) -> TokenOptions {
    TokenOptions {
        text_field: "text".into(),
        tokenizer: f.tokenizer.clone(),
        prepend_bos: None,
        append_eos: None,
    }
}

fn opts(threads: usize) -> PackOptions {
    PackOptions {
        threads,
        write: stokehold_storage::DatasetWriteOptions {
            target_shard_bytes: 64 << 10,
            ..Default::default()
        },
        ..PackOptions::default()
    }
}

fn doc_tokens(ds: &Dataset, i: u64, dtype: TokenDType) -> Vec<u32> {
    let v = ds.get(i).unwrap();
    let FieldValue::Bytes(b) = &v[0] else {
        panic!("not bytes")
    };
    (0..b.len() / dtype.size())
        .map(|k| dtype.get(b, k))
        .collect()
}

#[test]
fn documents_round_trip_and_the_manifest_describes_the_tokens() {
    let f = fixture(300, 5000);
    let dest = f.root.join("tok");
    let mut t = topts(&f);
    t.append_eos = Some("</s>".into());
    let report = pack_tokens(
        std::slice::from_ref(&f.jsonl),
        &dest,
        &opts(2),
        &t,
        &NoProgress,
    )
    .unwrap();
    assert!(report.skipped.is_empty());
    let ds = Dataset::open(&dest).unwrap();
    assert_eq!(ds.len(), 300);
    assert!(ds.shards().len() > 1, "small shards: several");
    let tok = TextTokenizer::from_file(dest.join("tokenizer.json")).unwrap();
    let eos = tok.token_id("</s>").unwrap();
    let mut total = 0u64;
    for (i, d) in f.docs.iter().enumerate() {
        let ids = doc_tokens(&ds, i as u64, TokenDType::U16);
        let mut want = tok.encode(d).unwrap();
        want.push(eos);
        assert_eq!(ids, want, "document {i}");
        // Decoding gives the text back (WordLevel joins words with spaces).
        let back = tok.decode(&ids[..ids.len() - 1]).unwrap();
        assert_eq!(back.replace(' ', ""), d.replace(' ', ""));
        total += ids.len() as u64;
    }
    let t = &ds.manifest().source["tokens"];
    assert_eq!(t["dtype"], "u16");
    assert_eq!(t["total_tokens"], total);
    assert_eq!(t["documents"], 300);
    assert_eq!(t["eos_id"], eos);
    assert!(t["bos_id"].is_null());
    assert_eq!(t["vocab_size"], tok.vocab_size());
    assert_eq!(t["tokenizer_fingerprint"], tok.fingerprint());
    // Records are what the general encoder writes for the token schema.
    let mut rec = Vec::new();
    let raw = ds.shards()[0].record_slice(0).map(<[u8]>::to_vec);
    let mut buf = Vec::new();
    ds.read_record(0, &mut buf).unwrap();
    let v = ds.get(0).unwrap();
    RecordEncoder::new(3)
        .encode(&token_schema(), &v, &mut rec)
        .unwrap();
    assert_eq!(rec, buf);
    assert!(raw.is_none() || raw == Some(buf));
}

#[test]
fn output_bytes_are_identical_for_any_thread_count() {
    let f = fixture(700, 5000);
    let mut first = None;
    for threads in [1, 2, 5] {
        let dest = f.root.join(format!("t{threads}"));
        pack_tokens(
            std::slice::from_ref(&f.jsonl),
            &dest,
            &opts(threads),
            &topts(&f),
            &NoProgress,
        )
        .unwrap();
        let tree = tree(&dest);
        match &first {
            None => first = Some(tree),
            Some(t) => assert!(t == &tree, "{threads} threads differ"),
        }
    }
}

#[test]
fn large_vocabularies_are_stored_as_u32() {
    // A WordLevel vocabulary over 65,536 entries: one distinct word per document.
    let dir = tempfile::tempdir().unwrap();
    let docs: Vec<String> = (0..70_000).map(|i| format!("w{i} common")).collect();
    let tok = train_word_level(&docs, 80_000).unwrap();
    assert!(tok.vocab_size() > 65_536);
    let tp = dir.path().join("tokenizer.json");
    fs::write(&tp, tok.inner().to_string(false).unwrap()).unwrap();
    let jsonl = dir.path().join("c.jsonl");
    let lines: String = docs[..200]
        .iter()
        .chain(docs[69_000..69_100].iter())
        .map(|d| format!("{}\n", serde_json::json!({"body": d})))
        .collect();
    fs::write(&jsonl, lines).unwrap();
    let dest = dir.path().join("tok");
    let t = TokenOptions {
        text_field: "body".into(),
        tokenizer: tp,
        prepend_bos: Some("<s>".into()),
        append_eos: None,
    };
    pack_tokens(&[jsonl], &dest, &opts(2), &t, &NoProgress).unwrap();
    let ds = Dataset::open(&dest).unwrap();
    assert_eq!(ds.manifest().source["tokens"]["dtype"], "u32");
    let ids = doc_tokens(&ds, 250, TokenDType::U32);
    let mut want = vec![tok.token_id("<s>").unwrap()];
    want.extend(tok.encode(&docs[69_050]).unwrap());
    assert_eq!(ids, want);
    assert!(ids.iter().any(|&i| i > 65_535) || want[1] <= 65_535);
}

#[test]
fn bad_lines_are_skipped_with_file_and_line_or_fatal_when_strict() {
    let f = fixture(10, 1000);
    let jsonl = f.root.join("mixed.jsonl");
    fs::write(
        &jsonl,
        "{\"text\": \"the cat\"}\n{not json\n\n{\"other\": 1}\n{\"text\": 5}\n[1,2]\n{\"text\": \"a dog\"}\n",
    )
    .unwrap();
    let dest = f.root.join("mixed");
    // 4 of 6 lines skipped: over the default limit, so the pack fails and writes nothing
    let e = pack_tokens(
        std::slice::from_ref(&jsonl),
        &dest,
        &opts(2),
        &topts(&f),
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            PackError::TooManySkipped {
                skipped: 4,
                inputs: 6,
                ..
            }
        ),
        "{e}"
    );
    assert!(!dest.exists());
    let any = PackOptions {
        max_skip_fraction: 1.0,
        ..opts(2)
    };
    let report = pack_tokens(
        std::slice::from_ref(&jsonl),
        &dest,
        &any,
        &topts(&f),
        &NoProgress,
    )
    .unwrap();
    let at: Vec<&str> = report.skipped.iter().map(|s| s.input.as_str()).collect();
    let name = jsonl.display().to_string();
    assert_eq!(
        at,
        [
            format!("{name}:2"),
            format!("{name}:4"),
            format!("{name}:5"),
            format!("{name}:6")
        ]
    );
    assert!(report.skipped[0].reason.contains("invalid JSON"));
    assert!(report.skipped[1].reason.contains("no \"text\" field"));
    assert!(report.skipped[2].reason.contains("not a string"));
    assert_eq!(Dataset::open(&dest).unwrap().len(), 2);
    assert!(
        fs::read_to_string(dest.join("skipped.txt"))
            .unwrap()
            .contains(":2\t")
    );

    let strict = PackOptions {
        strict: true,
        ..opts(2)
    };
    let e = pack_tokens(
        &[jsonl],
        &f.root.join("strict"),
        &strict,
        &topts(&f),
        &NoProgress,
    )
    .unwrap_err();
    assert!(matches!(e, PackError::Strict(_)), "{e}");
    assert!(e.to_string().contains(&format!("{name}:2")), "{e}");
    assert!(!f.root.join("strict").join("manifest.json").exists());
}

#[test]
fn missing_tokenizer_and_unknown_special_tokens_are_clear_errors() {
    let f = fixture(5, 1000);
    let mut t = topts(&f);
    t.tokenizer = f.root.join("nope.json");
    let e = pack_tokens(
        std::slice::from_ref(&f.jsonl),
        &f.root.join("a"),
        &opts(1),
        &t,
        &NoProgress,
    )
    .unwrap_err();
    assert!(e.to_string().contains("nope.json"), "{e}");
    let mut t = topts(&f);
    t.append_eos = Some("<|endoftext|>".into());
    let e = pack_tokens(&[f.jsonl], &f.root.join("b"), &opts(1), &t, &NoProgress).unwrap_err();
    assert!(e.to_string().contains("<|endoftext|>"), "{e}");
    assert!(!f.root.join("b").exists());
}
