//! Token datasets: `TokenIndex::pieces` against the engine's algorithm and against brute force,
//! the record checks, `read_range`, and `TokenMeta`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use stokehold_format::tokens::{
    BadTokenRecord, TOKENS_FIELD, TokenDType, TokenIndex, TokenMeta, TokenReads, is_token_schema,
    token_schema,
};
use stokehold_format::{
    FormatError, IndexEntry, Limits, MANIFEST_FILE, ShardReader, ShardWriter, WriteOptions,
    memory_source,
};
use stokehold_storage::{Dataset, DatasetWriteOptions, DatasetWriter, OpenOptions};
use stokehold_storage::{OpenShard, TokenIndexOf, TokenMetaOf};

/// xorshift64*: deterministic test randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

fn record(ids: &[u32], dtype: TokenDType) -> Vec<u8> {
    let mut r = vec![0u8; 4];
    dtype.append(ids, u32::MAX, &mut r).unwrap();
    let n = (r.len() - 4) as u32;
    r[..4].copy_from_slice(&n.to_le_bytes());
    r
}

/// Shards in memory holding `docs` (shard by shard), their readers numbered globally.
fn shards(docs: &[Vec<Vec<u32>>], dtype: TokenDType, align: u32) -> Vec<ShardReader> {
    let mut first = 0;
    docs.iter()
        .enumerate()
        .map(|(k, shard)| {
            let opts = WriteOptions {
                align,
                ..WriteOptions::default()
            };
            let mut w = ShardWriter::new(Vec::new(), token_schema(), opts).unwrap();
            for d in shard {
                w.write_encoded(&record(d, dtype)).unwrap();
            }
            let (bytes, _) = w.finish().unwrap();
            let path = PathBuf::from(format!("mem/shard-{k:06}.skh"));
            let mut r =
                ShardReader::from_source(path, memory_source(bytes), Limits::default()).unwrap();
            r.set_first_global(first);
            first += r.len();
            r
        })
        .collect()
}

fn random_docs(rng: &mut Rng, vocab_max: u32) -> Vec<Vec<Vec<u32>>> {
    let nshards = 1 + rng.below(4);
    (0..nshards)
        .map(|_| {
            let ndocs = rng.below(6);
            (0..ndocs)
                .map(|_| {
                    let len = match rng.below(5) {
                        0 => 0,
                        1 => 1,
                        2 => 2 + rng.below(4),
                        _ => rng.below(40),
                    };
                    (0..len)
                        .map(|_| rng.below(u64::from(vocab_max)) as u32)
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// What one planned (or reference) read did: shard, lo, hi, and per document: (doc, table
/// checked, checksummed, token bytes given).
type Trace = Vec<(usize, u64, u64, Vec<(u64, bool, bool, Vec<u8>)>)>;

/// `sequence.rs`'s `for_each_piece` (stokehold 2026-12), ported onto the format crate's types
/// and recording what it reads and checks instead of checking it.
fn reference(
    ix: &TokenIndex,
    shards: &[ShardReader],
    start: u64,
    n: u64,
    whole: impl Fn(u64, u32) -> bool,
) -> Trace {
    let mut out: Trace = Vec::new();
    let end = start + n;
    if n == 0 {
        return out;
    }
    let w = ix.dtype().size() as u64;
    let last_needed = ix.document_of(end - 1);
    let mut doc = ix.document_of(start);
    let mut t = start;
    let mut scratch = Vec::new();
    while t < end {
        while ix.doc_len(doc) == 0 {
            doc += 1;
        }
        let (k, local) = ix.locate(doc);
        let shard = &shards[k];
        let first_doc = doc - local;
        let last = last_needed.min(first_doc + shard.len() - 1);
        let (e0, e1) = (shard.entry(local), shard.entry(last - first_doc));
        let off = t - ix.doc_start(doc);
        let lo = if off == 0 || whole(doc, e0.len) {
            e0.offset
        } else {
            e0.offset + 4 + off * w
        };
        let need_end = end.min(ix.doc_start(last) + ix.doc_len(last)) - ix.doc_start(last);
        let hi = if whole(last, e1.len) {
            e1.end()
        } else {
            e1.offset + 4 + need_end * w
        };
        let data = shard.read_range(lo, hi, &mut scratch).unwrap().to_vec();
        let mut docs = Vec::new();
        for d in doc..=last {
            let e = shard.entry(d - first_doc);
            let len = ix.doc_len(d);
            let (mut table, mut crc) = (false, false);
            if e.offset >= lo && e.offset + 4 <= hi {
                crc = whole(d, e.len) && e.end() <= hi;
                table = true;
            }
            let ds0 = ix.doc_start(d);
            let (a, b) = (t.max(ds0) - ds0, end.min(ds0 + len) - ds0);
            let mut given = Vec::new();
            if a < b {
                let at = (e.offset + 4 + a * w - lo) as usize;
                given = data[at..at + ((b - a) * w) as usize].to_vec();
                t = ds0 + b;
            }
            if table || !given.is_empty() {
                docs.push((d, table, crc, given));
            }
        }
        out.push((k, lo, hi, docs));
        doc = last + 1;
    }
    out
}

/// Execute a plan: read and check every read, record what was done.
fn execute(ix: &TokenIndex, shards: &[ShardReader], plan: &TokenReads) -> Trace {
    let mut out: Trace = Vec::new();
    let mut scratch = Vec::new();
    for r in plan.reads() {
        let shard = &shards[r.shard];
        let data = shard.read_range(r.lo, r.hi, &mut scratch).unwrap();
        assert_eq!(data.len() as u64, r.len());
        let mut docs = Vec::new();
        for p in plan.pieces(r) {
            let crc = p.check(shard, ix.dtype(), data).unwrap();
            assert_eq!(crc, p.checksum);
            assert_eq!(ix.locate(p.doc), (r.shard, p.record));
            docs.push((p.doc, p.table.is_some(), p.checksum, p.bytes(data).to_vec()));
        }
        out.push((r.shard, r.lo, r.hi, docs));
    }
    out
}

#[test]
fn pieces_match_the_engine_and_brute_force() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut ranges = 0;
    for case in 0..300 {
        let dtype = if case % 2 == 0 {
            TokenDType::U16
        } else {
            TokenDType::U32
        };
        let docs = random_docs(&mut rng, if case % 2 == 0 { 65_536 } else { 1 << 30 });
        let align = [1, 8, 64][case % 3];
        let readers = shards(&docs, dtype, align);
        let ix = TokenIndex::from_shards(&readers, dtype).unwrap();
        let stream: Vec<u32> = docs.iter().flatten().flatten().copied().collect();
        let all: Vec<&Vec<u32>> = docs.iter().flatten().collect();
        // the prefix sums
        assert_eq!(ix.documents(), all.len() as u64);
        assert_eq!(ix.total_tokens(), stream.len() as u64);
        assert_eq!(ix.shards(), docs.len());
        let mut pos = 0;
        for (d, doc) in all.iter().enumerate() {
            assert_eq!(ix.doc_start(d as u64), pos);
            assert_eq!(ix.doc_len(d as u64), doc.len() as u64);
            for t in pos..pos + doc.len() as u64 {
                assert_eq!(ix.document_of(t), d as u64);
            }
            pos += doc.len() as u64;
        }
        let total = stream.len() as u64;
        for _ in 0..20 {
            let start = rng.below(total + 1);
            let n = rng.below(total - start + 1);
            let checked: HashSet<u64> = (0..ix.documents()).filter(|_| rng.below(2) == 0).collect();
            let max = [0u32, 20, 60, u32::MAX][rng.below(4) as usize];
            let mode = rng.below(3);
            let whole = |d: u64, len: u32| match mode {
                0 => false,
                1 => len <= max && !checked.contains(&d),
                _ => d.is_multiple_of(2),
            };
            let plan = ix
                .pieces(&readers, start, n, |d, e: IndexEntry| whole(d, e.len))
                .unwrap();
            let got = execute(&ix, &readers, &plan);
            assert_eq!(
                got,
                reference(&ix, &readers, start, n, whole),
                "case {case}: tokens {start}+{n} of {docs:?}"
            );
            // brute force: the pieces' tokens are the stream's
            let mut tokens = Vec::new();
            for (_, _, _, ds) in &got {
                for (_, _, _, bytes) in ds {
                    tokens.extend((0..bytes.len() / dtype.size()).map(|i| dtype.get(bytes, i)));
                }
            }
            assert_eq!(tokens, stream[start as usize..(start + n) as usize]);
            // one read per shard touched, pieces counted in order
            let shards_touched: Vec<usize> = got.iter().map(|r| r.0).collect();
            let mut sorted = shards_touched.clone();
            sorted.dedup();
            assert_eq!(sorted, shards_touched);
            let mut t = start;
            for p in plan.all_pieces().iter().filter(|p| p.tokens > 0) {
                assert_eq!(ix.doc_start(p.doc) + p.offset_in_doc, t);
                t += p.tokens;
            }
            assert_eq!(t, start + n);
            ranges += 1;
        }
        // past the end
        assert!(matches!(
            ix.pieces(&readers, total, 1, |_, _| false),
            Err(FormatError::TokenRange { .. })
        ));
        assert!(matches!(
            ix.pieces(&readers, 1, u64::MAX, |_, _| false),
            Err(FormatError::TokenRange { .. })
        ));
    }
    assert_eq!(ranges, 6000);
}

#[test]
fn pieces_into_reuses_and_replaces() {
    let docs = vec![
        vec![vec![1, 2, 3], vec![], vec![4]],
        vec![],
        vec![vec![5, 6]],
    ];
    let readers = shards(&docs, TokenDType::U16, 1);
    let ix = TokenIndex::from_shards(&readers, TokenDType::U16).unwrap();
    let mut plan = TokenReads::default();
    ix.pieces_into(&readers, 0, 6, |_, _| false, &mut plan)
        .unwrap();
    // shard 0 (docs 0, 1, 2) and shard 2 (doc 3); the empty shard 1 is never read
    assert_eq!(
        plan.reads().iter().map(|r| r.shard).collect::<Vec<_>>(),
        [0, 2]
    );
    let p0: Vec<(u64, u64)> = plan
        .pieces(&plan.reads()[0])
        .iter()
        .map(|p| (p.doc, p.tokens))
        .collect();
    // the empty document 1 lies between two others: listed for its field table, no tokens
    assert_eq!(p0, [(0, 3), (1, 0), (2, 1)]);
    ix.pieces_into(&readers, 5, 1, |_, _| false, &mut plan)
        .unwrap();
    assert_eq!(plan.reads().len(), 1);
    let r = &plan.reads()[0];
    assert_eq!((r.shard, r.record, r.first_doc), (2, 0, 3));
    let e = readers[2].entry(0);
    // token 1 of doc 3: just its 2 bytes, past the field table (not checked)
    assert_eq!((r.lo, r.hi), (e.offset + 4 + 2, e.offset + 8));
    assert_eq!(plan.all_pieces()[0].table, None);
    ix.pieces_into(&readers, 0, 0, |_, _| true, &mut plan)
        .unwrap();
    assert!(plan.reads().is_empty() && plan.all_pieces().is_empty());
}

#[test]
fn whole_reads_first_and_last_records_whole() {
    let docs = vec![vec![vec![1, 2, 3, 4], vec![5, 6, 7], vec![8, 9, 10, 11]]];
    let readers = shards(&docs, TokenDType::U32, 1);
    let ix = TokenIndex::from_shards(&readers, TokenDType::U32).unwrap();
    let (e0, e2) = (readers[0].entry(0), readers[0].entry(2));
    // tokens 2..9: doc 0 from its token 2, doc 2 up to its token 1
    let plan = ix.pieces(&readers, 2, 7, |_, _| false).unwrap();
    let r = &plan.reads()[0];
    assert_eq!((r.lo, r.hi), (e0.offset + 4 + 8, e2.offset + 4 + 8));
    let flags: Vec<_> = plan
        .all_pieces()
        .iter()
        .map(|p| (p.doc, p.table.is_some(), p.checksum))
        .collect();
    assert_eq!(
        flags,
        [(0, false, false), (1, true, false), (2, true, false)]
    );
    let plan = ix.pieces(&readers, 2, 7, |_, _| true).unwrap();
    let r = &plan.reads()[0];
    assert_eq!((r.lo, r.hi), (e0.offset, e2.end()));
    assert!(plan.all_pieces().iter().all(|p| p.checksum));
    // only the middle one may be checksummed: the ends are read as needed, so not whole
    let plan = ix.pieces(&readers, 2, 7, |d, _| d == 1).unwrap();
    let flags: Vec<_> = plan.all_pieces().iter().map(|p| p.checksum).collect();
    assert_eq!(flags, [false, true, false]);
}

#[test]
fn checks_name_the_shard_and_record() {
    let docs = vec![vec![vec![7]], vec![vec![1, 2], vec![3, 4, 5]]];
    let readers = shards(&docs, TokenDType::U16, 1);
    let ix = TokenIndex::from_shards(&readers, TokenDType::U16).unwrap();
    let plan = ix.pieces(&readers, 1, 5, |_, _| true).unwrap();
    let r = &plan.reads()[0];
    assert_eq!(r.shard, 1);
    let shard = &readers[1];
    let mut data = shard
        .read_range(r.lo, r.hi, &mut Vec::new())
        .unwrap()
        .to_vec();
    let pieces = plan.pieces(r);
    assert!(pieces[1].check(shard, ix.dtype(), &data).unwrap());
    // a flipped token: the checksum of the whole record catches it
    let last = pieces[1];
    data[last.at] ^= 1;
    let e = last.check(shard, ix.dtype(), &data).unwrap_err();
    assert!(matches!(e, FormatError::Checksum { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("shard-000001.skh") && msg.contains("record 1 (global sample 2)"),
        "{msg}"
    );
    // without the checksum the table still holds, and the token is given as read
    let mut unchecked = last;
    unchecked.checksum = false;
    assert!(!unchecked.check(shard, ix.dtype(), &data).unwrap());
    // a field table that disagrees with the index
    let rel = last.table.unwrap();
    data[rel] ^= 2;
    let e = unchecked.check(shard, ix.dtype(), &data).unwrap_err();
    assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("record 1 (global sample 2)")
            && msg.contains("the field table says 4 token bytes, the index 6 (3 tokens)"),
        "{msg}"
    );
    assert!(e.is_corruption());
}

#[test]
fn records_that_are_not_whole_tokens_are_refused() {
    // an odd number of token bytes: the `bytes` field of a record is not u16 tokens
    let opts = WriteOptions::default();
    let mut w = ShardWriter::new(Vec::new(), token_schema(), opts).unwrap();
    w.write_encoded(&record(&[1, 2], TokenDType::U16)).unwrap();
    w.write_encoded(&[3, 0, 0, 0, 9, 9, 9]).unwrap();
    let (bytes, _) = w.finish().unwrap();
    let mut r =
        ShardReader::from_source("odd.skh", memory_source(bytes), Limits::default()).unwrap();
    r.set_first_global(10);
    let e = TokenIndex::from_entries(&[r.index()], TokenDType::U16).unwrap_err();
    assert_eq!(
        e,
        BadTokenRecord {
            shard: 0,
            record: 1,
            len: 7,
            dtype: TokenDType::U16
        }
    );
    let e = TokenIndex::from_shards(std::slice::from_ref(&r), TokenDType::U16).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, FormatError::Corrupt { .. }));
    assert!(
        msg.contains("odd.skh")
            && msg.contains("record 1 (global sample 11)")
            && msg.contains(&format!("at byte {}", r.entry(1).offset))
            && msg.contains("7 bytes is not a 4-byte field table plus whole u16 tokens"),
        "{msg}"
    );
    // a record shorter than a field table
    let short = [IndexEntry {
        offset: 16,
        len: 3,
        crc: 0,
    }];
    assert!(TokenIndex::from_entries(&[&short[..]], TokenDType::U32).is_err());
    // u32 needs multiples of 4
    let ok = [IndexEntry {
        offset: 16,
        len: 12,
        crc: 0,
    }];
    assert_eq!(
        TokenIndex::from_entries(&[&ok[..]], TokenDType::U32)
            .unwrap()
            .total_tokens(),
        2
    );
    let six = [IndexEntry {
        offset: 16,
        len: 10,
        crc: 0,
    }];
    assert!(TokenIndex::from_entries(&[&six[..]], TokenDType::U32).is_err());
    assert_eq!(
        TokenIndex::from_entries(&[&six[..]], TokenDType::U16)
            .unwrap()
            .total_tokens(),
        3
    );
}

#[test]
fn read_range_slices_reads_and_names_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let docs = vec![vec![vec![1, 2, 3], vec![4, 5]]];
    let mem = shards(&docs, TokenDType::U16, 1);
    let e1 = mem[0].entry(1);
    let path = dir.path().join("s.skh");
    let mut bytes = vec![0; mem[0].file_len() as usize];
    mem[0].source().read_at(0, &mut bytes).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let file = ShardReader::open(&path, Limits::default()).unwrap();
    let mut scratch = Vec::new();
    // a slice of memory, and a positional read: the same bytes
    let a = mem[0]
        .read_range(e1.offset, e1.end(), &mut scratch)
        .unwrap()
        .to_vec();
    assert!(scratch.is_empty(), "memory is sliced, not copied");
    let b = file
        .read_range(e1.offset, e1.end(), &mut scratch)
        .unwrap()
        .to_vec();
    assert_eq!(a, b);
    assert_eq!(a, record(&[4, 5], TokenDType::U16));
    // the scratch only grows
    let cap = scratch.len();
    assert_eq!(file.read_range(16, 18, &mut scratch).unwrap().len(), 2);
    assert_eq!(scratch.len(), cap);
    assert_eq!(file.read_range(5, 5, &mut scratch).unwrap().len(), 0);
    // past the end: truncated, naming the record that holds the start
    let len = file.file_len();
    let e = file
        .read_range(e1.offset + 2, len + 10, &mut scratch)
        .unwrap_err();
    match &e {
        FormatError::Truncated {
            path: p,
            what,
            start,
            end,
            file_len,
        } => {
            assert_eq!(p, &path);
            assert_eq!(what, "record 1 (global sample 1)");
            assert_eq!((*start, *end, *file_len), (e1.offset + 2, len + 10, len));
        }
        other => panic!("{other}"),
    }
    let e = mem[0].read_range(3, len + 1, &mut scratch).unwrap_err();
    assert!(
        matches!(&e, FormatError::Truncated { what, .. } if *what == format!("bytes 3..{}", len + 1)),
        "{e}"
    );
    // a reversed range is a misuse, not damage
    let e = file.read_range(20, 10, &mut scratch).unwrap_err();
    assert!(
        matches!(e, FormatError::Io { .. }) && !e.is_corruption(),
        "{e}"
    );
}

fn write_token_dataset(dir: &Path, docs: &[Vec<u32>], meta: Option<serde_json::Value>) -> Dataset {
    let dest = dir.join("ds");
    let mut w =
        DatasetWriter::create(&dest, token_schema(), DatasetWriteOptions::default()).unwrap();
    for d in docs {
        w.write_encoded(&record(d, TokenDType::U16)).unwrap();
    }
    if let Some(m) = meta {
        w.set_source(serde_json::json!({"kind": "jsonl", "tokens": m}));
    }
    w.finish().unwrap();
    Dataset::open_with(&dest, OpenOptions::default()).unwrap()
}

#[test]
fn token_meta_reads_the_manifest_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let docs = [vec![1, 2, 3], vec![], vec![4]];
    let meta = TokenMeta {
        dtype: TokenDType::U16,
        vocab_size: Some(100),
        tokenizer: Some("tokenizer.json".into()),
        tokenizer_fingerprint: Some("crc32c:00000000:1".into()),
        bos_id: None,
        eos_id: Some(2),
        documents: Some(3),
        total_tokens: Some(4),
    };
    let ds = write_token_dataset(dir.path(), &docs, Some(meta.to_value()));
    assert!(is_token_schema(ds.schema()));
    assert_eq!(ds.schema().fields[0].name, TOKENS_FIELD);
    let read = TokenMeta::from_dataset(&ds).unwrap();
    assert_eq!(read, meta);
    let ix = TokenIndex::from_dataset(&ds, &read).unwrap();
    assert_eq!((ix.documents(), ix.total_tokens()), (3, 4));
    // key order and nulls as written by pack
    assert_eq!(
        serde_json::to_string(&meta).unwrap(),
        r#"{"dtype":"u16","vocab_size":100,"tokenizer":"tokenizer.json","tokenizer_fingerprint":"crc32c:00000000:1","bos_id":null,"eos_id":2,"documents":3,"total_tokens":4}"#
    );
    let manifest = dir.path().join("ds").join(MANIFEST_FILE);
    // total_tokens that disagrees with the records
    let wrong = TokenMeta {
        total_tokens: Some(5),
        ..meta.clone()
    };
    let e = TokenIndex::from_dataset(&ds, &wrong).unwrap_err();
    assert!(
        matches!(&e, FormatError::Manifest { path, detail }
        if path == &manifest && detail == "source.tokens.total_tokens is 5 but the shards hold 4 tokens"),
        "{e}"
    );
    // only dtype is required; unknown keys are ignored
    let m: TokenMeta =
        serde_json::from_value(serde_json::json!({"dtype": "u32", "future": 1})).unwrap();
    assert_eq!(
        (m.dtype, m.vocab_size, m.total_tokens),
        (TokenDType::U32, None, None)
    );
    for (bad, why) in [
        (serde_json::json!({"dtype": "u8"}), "u8"),
        (serde_json::json!({"vocab_size": 3}), "dtype"),
        (serde_json::json!({"dtype": "u16", "bos_id": -1}), "-1"),
        (serde_json::json!("u16"), "invalid type"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ds = write_token_dataset(dir.path(), &docs, Some(bad));
        let e = TokenMeta::from_dataset(&ds).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(&e, FormatError::Manifest { path, .. } if path.ends_with("ds/manifest.json"))
                && msg.contains("source.tokens is invalid")
                && msg.contains(why),
            "{msg}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let ds = write_token_dataset(dir.path(), &docs, None);
    let e = TokenMeta::from_dataset(&ds).unwrap_err();
    assert!(e.to_string().contains("source.tokens is missing"), "{e}");
}

#[test]
fn token_meta_refuses_other_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let schema = stokehold_format::Schema::from_specs([("tokens", "bytes+zstd")]).unwrap();
    let dest = dir.path().join("ds");
    let mut w = DatasetWriter::create(&dest, schema, DatasetWriteOptions::default()).unwrap();
    w.write(&[stokehold_format::FieldValue::Bytes(vec![1, 2].into())])
        .unwrap();
    w.finish().unwrap();
    let ds = Dataset::open(&dest).unwrap();
    assert!(!is_token_schema(ds.schema()));
    let e = TokenMeta::from_dataset(&ds).unwrap_err();
    assert!(matches!(e, FormatError::Manifest { .. }));
    assert!(e.to_string().contains("not a token dataset"), "{e}");
}

#[test]
fn token_dtype_round_trips() {
    for d in [TokenDType::U16, TokenDType::U32] {
        assert_eq!(TokenDType::parse(d.name()), Some(d));
        assert_eq!(d.to_string(), d.name());
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<TokenDType>(&j).unwrap(), d);
    }
    assert_eq!(TokenDType::for_vocab(65_536), TokenDType::U16);
    assert_eq!(TokenDType::for_vocab(65_537), TokenDType::U32);
    let mut out = Vec::new();
    let e = TokenDType::U16
        .append(&[5, 70_000], 80_000, &mut out)
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "token id 70000 does not fit u16 (vocabulary size 80000)"
    );
    assert_eq!(TokenDType::U16.get(&out, 0), 5);
}

#[test]
fn the_token_type_is_the_narrowest_that_holds_the_vocabulary_and_refuses_wider_ids() {
    assert_eq!(TokenDType::for_vocab(65_536), TokenDType::U16);
    assert_eq!(TokenDType::for_vocab(65_537), TokenDType::U32);
    let mut out = Vec::new();
    TokenDType::U16.append(&[1, 65_535], 10, &mut out).unwrap();
    assert_eq!(out, [1, 0, 255, 255]);
    assert!(TokenDType::U16.append(&[65_536], 10, &mut out).is_err());
    assert_eq!(TokenDType::U16.get(&out, 1), 65_535);
    let mut b = Vec::new();
    TokenDType::U32.append(&[70_000, 3], 10, &mut b).unwrap();
    assert_eq!(TokenDType::U32.get(&b, 1), 3);
    assert_eq!(TokenDType::U32.get(&b, 0), 70_000);
}
