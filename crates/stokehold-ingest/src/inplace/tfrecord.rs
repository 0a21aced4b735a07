//! TFRecord files of `tf.train.Example`s in place: the scan that indexes one (each record's
//! payload, its stored CRC, the features it holds and pack's statistics of them) and the codec
//! that gives a record's fields from its payload ([`super::example_view`]), with pack's types.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

use stokehold_format::{
    ArrayValue, DType, FieldType, FieldValue, IndexEntry, RecordCodec, RecordError, Schema, crc,
};

use stokehold_format::ImageCodec;

use super::example_view::{FeatureView, feature};
use super::index::{DAMAGED, FileIndex, Member};
use super::{Rows, ScanError, Scanned};
use crate::example::decode_example;
use crate::sources::tfrecord::{ListKind, Stats, observe, observe_one};
use crate::tfrecord::{TfRecordError, TfRecordReader};

/// Bytes of a record's framing before its payload (length and its CRC).
const HEADER: u64 = 12;

/// The statistics a TFRecord index keeps.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct TfStats {
    pub features: BTreeMap<String, Stats>,
    pub conflicts: Vec<String>,
}

/// Record `data`'s features into `stats` and its members; `false` when it is not a valid
/// Example (then it is kept marked damaged).
fn observe_record(
    data: &[u8],
    stats: &mut TfStats,
    ix: &mut FileIndex,
    members: &mut Vec<Member>,
) -> bool {
    members.clear();
    let Ok(mut features) = super::example_view::features(data) else {
        return false;
    };
    // by name, as the decoded Example's map gives them (the same index whichever scan made it)
    features.sort_by(|a, b| a.0.cmp(b.0));
    for (name, view) in &features {
        // a feature name is a protobuf string: UTF-8, or the Example is not one
        let Ok(name) = std::str::from_utf8(name) else {
            members.clear();
            return false;
        };
        let (kind, len, img, utf8) = match view {
            FeatureView::Bytes(b) => (
                ListKind::Bytes,
                b.len(),
                b.iter().all(|v| ImageCodec::sniff(v).is_some()),
                b.iter().all(|v| std::str::from_utf8(v).is_ok()),
            ),
            FeatureView::Float(f) => (ListKind::Float, f.len(), false, false),
            FeatureView::Int(i) => (ListKind::Int, i.len(), false, false),
        };
        observe_one(
            &mut stats.features,
            name,
            kind,
            len,
            img,
            utf8,
            &mut stats.conflicts,
        );
        let name = ix.name_id(name);
        members.push(Member {
            name,
            offset: 0,
            len: 0,
        });
    }
    true
}

/// Index a TFRecord file whose bytes are all in memory (a mapped file) into `ix`, as [`scan`]
/// does, without copying a record: the framing walked first (each record's length and its CRC),
/// then the records, split among `threads` threads, each checksummed once (its masked CRC-32C
/// checked against the file's, its plain one kept in the index) and its Example walked.
pub(super) fn scan_slice(
    all: &[u8],
    max: u64,
    ix: &mut FileIndex,
    threads: usize,
) -> Result<(), ScanError> {
    let records = framing(all, max)?;
    let threads = threads.clamp(1, records.len().max(1));
    let per = records.len().div_ceil(threads.max(1)).max(1);
    let parts: Vec<(FileIndex, TfStats)> = std::thread::scope(|s| {
        let handles: Vec<_> = records
            .chunks(per)
            .map(|chunk| s.spawn(move || index_records(all, chunk)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .expect("indexing a chunk of records does not panic")
            })
            .collect()
    });
    let mut stats = TfStats::default();
    let mut members = Vec::new();
    for (part, st) in parts {
        for r in 0..part.entries.len() {
            members.clear();
            for m in part.members_of(r) {
                let name = match m.name {
                    DAMAGED => DAMAGED,
                    id => ix.name_id(&part.header.names[id as usize]),
                };
                members.push(Member { name, ..*m });
            }
            ix.push(part.entries[r], &members, b"");
        }
        crate::sources::tfrecord::merge(&mut stats.features, &st.features, &mut stats.conflicts);
        for c in st.conflicts {
            if !stats.conflicts.contains(&c) {
                stats.conflicts.push(c);
            }
        }
    }
    stats.conflicts.sort();
    ix.header.stats = serde_json::to_value(&stats).expect("the statistics serialize");
    Ok(())
}

/// Each record of a TFRecord file in memory: the offset of its header and its data's length;
/// an error at the first framing that cannot be trusted (as [`TfRecordReader`] reports it).
fn framing(all: &[u8], max: u64) -> Result<Vec<(usize, usize)>, TfRecordError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let cap = max.min(u64::from(u32::MAX));
    while pos < all.len() {
        let offset = pos as u64;
        let len = crate::tfrecord::record_len(&all[pos..all.len().min(pos + 12)], offset, cap)?;
        // len <= u32::MAX: no overflow on 64-bit
        let end = pos + 12 + len as usize;
        if all.len() < end + 4 {
            return Err(TfRecordError::Truncated { offset });
        }
        out.push((pos, len as usize));
        pos = end + 4;
    }
    Ok(out)
}

/// Index `records` (header offset, data length) of the file `all` into an index of their own
/// (names numbered in it) and their statistics.
fn index_records(all: &[u8], records: &[(usize, usize)]) -> (FileIndex, TfStats) {
    let mut ix = FileIndex::new("tfrecord", "", 0, None);
    let mut stats = TfStats::default();
    let mut members = Vec::new();
    for &(pos, len) in records {
        let data = &all[pos + 12..pos + 12 + len];
        let crc = crc::crc32c(data);
        let tail = &all[pos + 12 + len..pos + 16 + len];
        let stored = u32::from_le_bytes(tail.try_into().expect("4 bytes"));
        let entry = |crc| IndexEntry {
            offset: pos as u64 + HEADER,
            len: len as u32,
            crc,
        };
        if crate::tfrecord::mask_crc(crc) != stored {
            // the file's own checksum (unmasked): a read then reports it against the data's
            let stored = crate::tfrecord::unmask_crc(stored);
            ix.push(entry(stored), &[damaged()], b"");
        } else if observe_record(data, &mut stats, &mut ix, &mut members) {
            ix.push(entry(crc), &members, b"");
        } else {
            ix.push(entry(crc), &[damaged()], b"");
        }
    }
    (ix, stats)
}

/// Index the TFRecord file read by `r` (records of at most `max` bytes) into `ix`. A record
/// whose data CRC fails, or that is no Example, is kept marked damaged (reading it is an error
/// naming it); broken framing (a bad length CRC, a cut record) is an error: what follows cannot
/// be trusted.
pub(super) fn scan(r: impl Read, max: u64, ix: &mut FileIndex) -> Result<(), ScanError> {
    let mut reader = TfRecordReader::new(r, max.min(u64::from(u32::MAX)));
    let mut stats = TfStats::default();
    let mut buf = Vec::new();
    let mut members = Vec::new();
    loop {
        let before = reader.position();
        match reader.next_record(&mut buf) {
            Ok(Some(offset)) => {
                members.clear();
                match decode_example(&buf) {
                    Ok(ex) => {
                        observe(&mut stats.features, &ex, &mut stats.conflicts);
                        for (name, f) in ex.features.iter().flat_map(|fs| fs.feature.iter()) {
                            if f.kind.is_some() {
                                let name = ix.name_id(name);
                                members.push(Member {
                                    name,
                                    offset: 0,
                                    len: 0,
                                });
                            }
                        }
                    }
                    Err(_) => members.push(damaged()),
                }
                let entry = IndexEntry {
                    offset: offset + HEADER,
                    len: buf.len() as u32,
                    crc: crc::crc32c(&buf),
                };
                ix.push(entry, &members, b"");
            }
            Ok(None) => break,
            Err(TfRecordError::DataCrc { offset, stored }) => {
                // the whole record was consumed: its payload length is what lies between
                let len = reader.position() - before - HEADER - 4;
                let entry = IndexEntry {
                    offset: offset + HEADER,
                    len: len as u32,
                    // the file's own checksum: a read then reports it against the data's
                    crc: stored,
                };
                ix.push(entry, &[damaged()], b"");
            }
            Err(e) => return Err(e.into()),
        }
    }
    stats.conflicts.sort();
    ix.header.stats = serde_json::to_value(&stats).expect("the statistics serialize");
    Ok(())
}

fn damaged() -> Member {
    Member {
        name: DAMAGED,
        offset: 0,
        len: 0,
    }
}

/// The fields of one TFRecord file's records.
#[derive(Debug)]
pub(super) struct TfCodec {
    pub index: Arc<FileIndex>,
    pub rows: Rows,
    /// Per schema field: its feature and whether a record may lack it.
    pub fields: Vec<(String, bool)>,
}

impl RecordCodec for TfCodec {
    fn format(&self) -> &'static str {
        "TFRecord"
    }

    fn field<'a>(
        &self,
        record: u64,
        bytes: &'a [u8],
        schema: &Schema,
        i: usize,
    ) -> Result<FieldValue<'a>, RecordError> {
        let corrupt = |offset: usize, detail: String| RecordError::Corrupt {
            field: i,
            offset: offset as u64,
            detail,
        };
        if self.index.damaged(self.rows.row(record)) {
            return Err(corrupt(
                0,
                "the record failed its data CRC, or is not a tf.train.Example, when the file was indexed".into(),
            ));
        }
        let (name, optional) = &self.fields[i];
        let ty = &schema.fields[i].ty;
        let view = feature(bytes, name).map_err(|e| {
            corrupt(
                e.offset,
                format!("not a valid tf.train.Example: {}", e.detail),
            )
        })?;
        let Some(view) = view else {
            return match crate::sources::empty_value(ty).filter(|_| *optional) {
                Some(v) => Ok(v),
                None => Err(corrupt(0, format!("feature {name:?} is missing"))),
            };
        };
        Ok(match (ty, view) {
            (FieldType::Int64, FeatureView::Int(v)) if v.len() == 1 => FieldValue::Int64(v[0]),
            (FieldType::Float64, FeatureView::Float(v)) if v.len() == 1 => {
                FieldValue::Float64(f64::from(v[0]))
            }
            (FieldType::Ndarray { dtype: DType::I64 }, FeatureView::Int(v)) => {
                FieldValue::Array(ArrayValue {
                    dtype: DType::I64,
                    shape: vec![v.len() as u64],
                    data: Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                })
            }
            (FieldType::Ndarray { dtype: DType::F32 }, FeatureView::Float(v)) => {
                FieldValue::Array(ArrayValue {
                    dtype: DType::F32,
                    shape: vec![v.len() as u64],
                    data: Cow::Owned(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                })
            }
            (FieldType::Image { .. }, FeatureView::Bytes(v)) if v.len() == 1 => {
                FieldValue::Image(Cow::Borrowed(v[0]))
            }
            (FieldType::String, FeatureView::Bytes(v)) if v.len() == 1 => {
                match std::str::from_utf8(v[0]) {
                    Ok(s) => FieldValue::String(Cow::Borrowed(s)),
                    Err(_) => return Err(corrupt(0, format!("feature {name:?} is not UTF-8"))),
                }
            }
            (FieldType::Bytes, FeatureView::Bytes(v)) if v.len() == 1 => {
                FieldValue::Bytes(Cow::Borrowed(v[0]))
            }
            (ty, v) => {
                return Err(corrupt(
                    0,
                    format!(
                        "feature {name:?} does not fit its field type {ty} ({})",
                        describe(&v)
                    ),
                ));
            }
        })
    }
}

fn describe(v: &FeatureView<'_>) -> String {
    match v {
        FeatureView::Bytes(b) => format!("a list of {} byte strings", b.len()),
        FeatureView::Float(f) => format!("a list of {} floats", f.len()),
        FeatureView::Int(i) => format!("a list of {} int64s", i.len()),
    }
}

/// The schema's fields of TFRecord files, from their indexes' statistics, as pack chooses them.
pub(super) fn choose(
    files: &[Scanned],
    fields: Option<&[crate::sources::FieldChoice]>,
    notes: &mut Vec<String>,
    source: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<super::Chosen>, super::ChooseError> {
    let mut all: BTreeMap<String, Stats> = BTreeMap::new();
    let mut conflicts = Vec::new();
    let mut records = 0u64;
    for f in files {
        let s: TfStats = serde_json::from_value(f.index.header.stats.clone()).map_err(|e| {
            super::ChooseError::Index(format!(
                "{}: its index's statistics are not valid: {e}",
                f.place
            ))
        })?;
        conflicts.extend(s.conflicts);
        crate::sources::tfrecord::merge(&mut all, &s.features, &mut conflicts);
        records += (0..f.index.entries.len())
            .filter(|&r| !f.index.damaged(r))
            .count() as u64;
    }
    let types = crate::sources::tfrecord::feature_types(&all, &conflicts, notes)?;
    if types.is_empty() {
        return Err(super::ChooseError::Input(format!(
            "no usable features in {records} records of {} files",
            files.len()
        )));
    }
    let counts: BTreeMap<String, u64> = types.keys().map(|n| (n.clone(), all[n].count)).collect();
    let chosen = crate::sources::choose_fields(
        &counts,
        records,
        fields,
        |n| crate::sources::tfrecord::can_be_empty(&types[n]),
        |n| format!("feature {n:?}"),
        notes,
        source,
    )?;
    Ok(super::Chosen::typed(chosen, |n| types[n].clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::example::{Example, Feature, encode_example};

    /// The scan of a mapped file and the streaming scan index the same file alike: records,
    /// checksums, members, damage and statistics.
    #[test]
    fn the_mapped_scan_is_the_streaming_scan() {
        let mut file = Vec::new();
        let records: Vec<Vec<u8>> = vec![
            encode_example(&Example::from_features(vec![
                (
                    "image/encoded",
                    Feature::bytes([b"\xff\xd8\xff\xe0 jpeg-ish".to_vec()]),
                ),
                ("label", Feature::int64s(vec![3])),
            ])),
            encode_example(&Example::from_features(vec![
                ("label", Feature::int64s(vec![1, 2])),
                ("w", Feature::floats(vec![0.5])),
                ("text", Feature::bytes([b"hello".to_vec()])),
            ])),
            b"\x0a\x05not an Example".to_vec(),
            encode_example(&Example::from_features(vec![(
                "label",
                Feature::int64s(vec![7]),
            )])),
        ];
        for r in &records {
            crate::tfrecord::write_record(&mut file, r).unwrap();
        }
        // the last record's data damaged: its CRC fails
        let n = file.len();
        file[n - 6] ^= 0x01;
        let index = |slice: bool| {
            let mut ix = FileIndex::new("tfrecord", "f", file.len() as u64, None);
            if slice {
                scan_slice(&file, 1 << 20, &mut ix, 1).unwrap();
            } else {
                scan(&file[..], 1 << 20, &mut ix).unwrap();
            }
            ix
        };
        let (a, b) = (index(true), index(false));
        assert_eq!(a, b);
        // split among threads, the records indexed apart and merged: the same index
        for threads in [2, 3, 8] {
            let mut ix = FileIndex::new("tfrecord", "f", file.len() as u64, None);
            scan_slice(&file, 1 << 20, &mut ix, threads).unwrap();
            assert_eq!(ix, a, "{threads} threads");
        }
        assert_eq!(a.entries.len(), 4);
        assert!(!a.damaged(0) && !a.damaged(1) && a.damaged(2) && a.damaged(3));
        // cut inside the last record: both refuse it at the same byte
        let cut = &file[..n - 2];
        let mut ix = FileIndex::new("tfrecord", "f", cut.len() as u64, None);
        let e1 = scan_slice(cut, 1 << 20, &mut ix, 2).unwrap_err();
        let mut ix = FileIndex::new("tfrecord", "f", cut.len() as u64, None);
        let e2 = scan(cut, 1 << 20, &mut ix).unwrap_err();
        assert_eq!(e1, e2);
    }
}
