//! The `list` field type (format.md §4.2, §4.3): a sample's images as one field, their sizes
//! kept in the meta block from their headers; damaged list tables are corrupt records naming the
//! field and the offset; the meta block's table is checked at open.

use std::borrow::Cow;

use stokehold_format::{
    FieldValue, FormatError, Limits, Schema, ShardReader, ShardWriter, WriteError, WriteOptions,
    memory_source,
};
use stokehold_storage::{Dataset, DatasetWriteOptions, DatasetWriter};

/// The header of a PNG of `w`×`h` (what the writer reads; no pixels are decoded).
fn png(w: u32, h: u32) -> Vec<u8> {
    let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    b.extend_from_slice(&w.to_be_bytes());
    b.extend_from_slice(&h.to_be_bytes());
    b.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    b
}

fn images(sizes: &[(u32, u32)]) -> FieldValue<'static> {
    FieldValue::List(
        sizes
            .iter()
            .map(|&(w, h)| FieldValue::Image(Cow::Owned(png(w, h))))
            .collect(),
    )
}

fn schema() -> Schema {
    Schema::from_specs([
        ("id", "int64"),
        ("images", "list:image"),
        ("names", "list:string"),
    ])
    .unwrap()
}

fn shard(samples: &[&[(u32, u32)]]) -> Vec<u8> {
    let mut w = ShardWriter::new(Vec::new(), schema(), WriteOptions::default()).unwrap();
    for (i, s) in samples.iter().enumerate() {
        let names = (0..s.len())
            .map(|k| FieldValue::String(format!("img{k}").into()))
            .collect();
        w.write(&[
            FieldValue::Int64(i as i64),
            images(s),
            FieldValue::List(names),
        ])
        .unwrap();
    }
    w.finish().unwrap().0
}

#[test]
fn lists_of_images_round_trip_with_their_sizes_in_the_meta_block() {
    let samples: &[&[(u32, u32)]] = &[&[(640, 480), (32, 2000)], &[], &[(1, 1)]];
    let bytes = shard(samples);
    let r = ShardReader::from_source("s.skh", memory_source(bytes), Limits::default()).unwrap();
    let table = r.meta().list("images").unwrap();
    assert_eq!(table.counts, vec![2, 0, 1]);
    assert_eq!(table.sizes_of(0), Some(&[640, 480, 32, 2000][..]));
    assert_eq!(table.sizes_of(1), Some(&[][..]));
    assert_eq!(table.sizes_of(2), Some(&[1, 1][..]));
    assert_eq!(table.sizes_of(3), None);
    // a list of strings keeps its counts, no sizes
    let names = r.meta().list("names").unwrap();
    assert_eq!(
        (names.counts.clone(), names.sizes_of(0)),
        (vec![2, 0, 1], None)
    );
    let mut buf = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        r.read_record(i as u64, &mut buf, true).unwrap();
        let v = r.decode(i as u64, &buf).unwrap();
        assert_eq!(v[1], images(s));
        let FieldValue::List(names) = &v[2] else {
            panic!("{v:?}")
        };
        assert_eq!(names.len(), s.len());
    }
}

#[test]
fn the_writer_refuses_an_image_without_a_readable_size_naming_the_item() {
    let mut w = ShardWriter::new(Vec::new(), schema(), WriteOptions::default()).unwrap();
    let bad = FieldValue::List(vec![
        FieldValue::Image(Cow::Owned(png(3, 3))),
        FieldValue::Image(Cow::Owned(b"GIF89a......".to_vec())),
    ]);
    let err = w
        .write(&[FieldValue::Int64(0), bad, FieldValue::List(vec![])])
        .unwrap_err();
    assert!(matches!(err, WriteError::Value(_)), "{err}");
    assert!(err.to_string().contains("images[1]"), "{err}");
    // nothing was written: the next sample is record 0 and the table has one entry
    w.write(&[
        FieldValue::Int64(0),
        images(&[(5, 6)]),
        FieldValue::List(vec![]),
    ])
    .unwrap();
    let (bytes, summary) = w.finish().unwrap();
    assert_eq!(summary.records, 1);
    let r = ShardReader::from_source("s.skh", memory_source(bytes), Limits::default()).unwrap();
    assert_eq!(
        r.meta().list("images").unwrap().sizes_of(0),
        Some(&[5, 6][..])
    );
    // an item of the wrong kind
    let mut w = ShardWriter::new(Vec::new(), schema(), WriteOptions::default()).unwrap();
    let err = w
        .write(&[
            FieldValue::Int64(0),
            FieldValue::List(vec![FieldValue::String("x".into())]),
            FieldValue::List(vec![]),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("images[0]"), "{err}");
}

/// The offset of field `f`'s bytes in a record of `nfields` fields.
fn field_start(record: &[u8], f: usize, nfields: usize) -> usize {
    let prev = if f == 0 {
        0
    } else {
        u32::from_le_bytes(record[4 * (f - 1)..4 * f].try_into().unwrap()) as usize
    };
    4 * nfields + prev
}

#[test]
fn a_damaged_list_table_is_a_corrupt_record_naming_field_and_offset() {
    let s = schema();
    let mut rec = Vec::new();
    stokehold_format::RecordEncoder::new(3)
        .encode(
            &s,
            &[
                FieldValue::Int64(0),
                images(&[(2, 2), (3, 3)]),
                FieldValue::List(vec![]),
            ],
            &mut rec,
        )
        .unwrap();
    let at = field_start(&rec, 1, 3);
    let cases: [(usize, u32, &str); 4] = [
        (at, u32::MAX, "over the limit"),        // a count no list may have
        (at, 1000, "needs a table"),             // more items than the bytes have room for
        (at, 3, "ends at"),                      // a count the table disagrees with
        (at + 4, 1 << 30, "item 0 of the list"), // an end past the items
    ];
    for (pos, value, says) in cases {
        let mut bad = rec.clone();
        bad[pos..pos + 4].copy_from_slice(&value.to_le_bytes());
        let view = stokehold_format::RecordView::parse(&bad, 3).unwrap();
        let err = view.field(&s, 1, 1 << 20).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(says), "{msg}");
        assert!(
            matches!(err, stokehold_format::RecordError::Corrupt { field: 1, offset, .. } if offset == at as u64),
            "{err:?}"
        );
        // and the writer refuses such a record given already encoded
        let mut w = ShardWriter::new(Vec::new(), s.clone(), WriteOptions::default()).unwrap();
        assert!(w.write_encoded(&bad).is_err());
    }
}

#[test]
fn a_meta_block_whose_list_table_disagrees_is_refused_at_open() {
    let bytes = shard(&[&[(4, 4)], &[]]);
    let find = |needle: &str| {
        bytes
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
    };
    // the same length, so that only the table's meaning changes: counts [1,0] -> [0,1] (the
    // sizes stay for one image) and sizes for another number of images
    for (from, to, says) in [
        (
            r#""counts":[1,0],"sizes":[4,4]"#,
            r#""counts":[1,0],"sizes":[4,4,4]"#,
            "sizes",
        ),
        (
            r#""counts":[1,0]"#,
            r#""counts":[1,0,0]"#,
            "counts for 2 records",
        ),
    ] {
        let at = find(from).unwrap();
        let mut meta_and_rest = bytes[..at].to_vec();
        meta_and_rest.extend_from_slice(to.as_bytes());
        meta_and_rest.extend_from_slice(&bytes[at + from.len()..]);
        // reseal: rewrite meta length and CRCs the way a writer would, by parsing the trailer
        let reseal = reseal_meta(
            &bytes,
            &meta_and_rest,
            at,
            to.len() as i64 - from.len() as i64,
        );
        let err = ShardReader::from_source("s.skh", memory_source(reseal), Limits::default())
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(err, FormatError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains(says), "{err}");
    }
}

/// A shard whose meta block was edited (growing by `delta` bytes): the trailer's offsets,
/// lengths and CRCs made to agree again, so that the edit's meaning is what is checked.
fn reseal_meta(old: &[u8], new: &[u8], _at: usize, delta: i64) -> Vec<u8> {
    use stokehold_format::crc::crc32c;
    let mut b = new.to_vec();
    let n = b.len();
    let t = n - 64;
    let le = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let meta_off = le(old, old.len() - 64);
    let meta_len = (le(old, old.len() - 56) as i64 + delta) as u64;
    let index_off = meta_off + meta_len;
    b[t + 8..t + 16].copy_from_slice(&meta_len.to_le_bytes());
    b[t + 16..t + 24].copy_from_slice(&index_off.to_le_bytes());
    let meta = &b[meta_off as usize..index_off as usize];
    let mc = crc32c(meta);
    let ic = crc32c(&b[index_off as usize..t]);
    b[t + 32..t + 36].copy_from_slice(&mc.to_le_bytes());
    b[t + 36..t + 40].copy_from_slice(&ic.to_le_bytes());
    let fc = crc32c(&b[..t]);
    b[t + 40..t + 44].copy_from_slice(&fc.to_le_bytes());
    let tc = crc32c(&b[t..t + 60]);
    b[t + 60..t + 64].copy_from_slice(&tc.to_le_bytes());
    b
}

#[test]
fn a_dataset_answers_image_sizes_per_sample_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let opts = DatasetWriteOptions {
        target_shard_bytes: 1, // one sample a shard
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(&out, schema(), opts).unwrap();
    let samples: &[&[(u32, u32)]] = &[&[(10, 20)], &[], &[(30, 40), (50, 60)]];
    for (i, s) in samples.iter().enumerate() {
        w.write(&[
            FieldValue::Int64(i as i64),
            images(s),
            FieldValue::List(vec![]),
        ])
        .unwrap();
    }
    w.finish().unwrap();
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.shards().len(), 3);
    assert_eq!(ds.image_sizes("images", 0).unwrap(), Some(&[10, 20][..]));
    assert_eq!(ds.image_sizes("images", 1).unwrap(), Some(&[][..]));
    assert_eq!(
        ds.image_sizes("images", 2).unwrap(),
        Some(&[30, 40, 50, 60][..])
    );
    assert!(
        ds.image_sizes("names", 0)
            .unwrap_err()
            .to_string()
            .contains("not a list of images")
    );
    assert!(ds.image_sizes("nope", 0).is_err());
    assert!(ds.image_sizes("images", 3).is_err());
    assert_eq!(ds.get(2).unwrap()[1], images(samples[2]));
}
