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

use super::example_view::{FeatureView, feature};
use super::index::{DAMAGED, FileIndex, Member};
use super::{Rows, Scanned};
use crate::example::decode_example;
use crate::pack::tfrecord::{Stats, observe};
use crate::tfrecord::{TfRecordError, TfRecordReader};

/// Bytes of a record's framing before its payload (length and its CRC).
const HEADER: u64 = 12;

/// The statistics a TFRecord index keeps.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct TfStats {
    pub features: BTreeMap<String, Stats>,
    pub conflicts: Vec<String>,
}

/// Index the TFRecord file read by `r` (records of at most `max` bytes) into `ix`. A record
/// whose data CRC fails, or that is no Example, is kept marked damaged (reading it is an error
/// naming it); broken framing (a bad length CRC, a cut record) is an error: what follows cannot
/// be trusted.
pub(super) fn scan(r: impl Read, max: u64, ix: &mut FileIndex) -> Result<(), (u64, String)> {
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
            Err(e) => return Err((e.offset(), e.to_string())),
        }
    }
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
            return match crate::pack::empty_value(ty).filter(|_| *optional) {
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
    fields: Option<&[crate::pack::FieldChoice]>,
    notes: &mut Vec<String>,
    source: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<super::Chosen>, String> {
    let mut all: BTreeMap<String, Stats> = BTreeMap::new();
    let mut conflicts = Vec::new();
    let mut records = 0u64;
    for f in files {
        let s: TfStats = serde_json::from_value(f.index.header.stats.clone())
            .map_err(|e| format!("{}: its index's statistics are not valid: {e}", f.place))?;
        conflicts.extend(s.conflicts);
        crate::pack::tfrecord::merge(&mut all, &s.features, &mut conflicts);
        records += (0..f.index.entries.len())
            .filter(|&r| !f.index.damaged(r))
            .count() as u64;
    }
    let types =
        crate::pack::tfrecord::feature_types(&all, &conflicts, notes).map_err(|e| e.to_string())?;
    if types.is_empty() {
        return Err(format!(
            "no usable features in {records} records of {} files",
            files.len()
        ));
    }
    let counts: BTreeMap<String, u64> = types.keys().map(|n| (n.clone(), all[n].count)).collect();
    let chosen = crate::pack::choose_fields(
        &counts,
        records,
        fields,
        |n| crate::pack::tfrecord::can_be_empty(&types[n]),
        |n| format!("feature {n:?}"),
        notes,
        source,
    )
    .map_err(|e| e.to_string())?;
    Ok(super::Chosen::typed(chosen, |n| types[n].clone()))
}
