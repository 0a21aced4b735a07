//! TFRecord features as fields, for `pack` and files read in place alike: what the records hold
//! of each feature (`Stats`, gathered by `observe` and `merge`), and the field type each
//! usable feature gets (`feature_types`).

use std::collections::BTreeMap;

use stokehold_format::{DType, FieldType, ImageCodec};

use super::SourceError;
use crate::example::{Example, feature::Kind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum ListKind {
    Bytes,
    Float,
    Int,
}

/// What the records of some files hold of one feature (the first pass of pack, and the index of
/// files read in place): its list kind and lengths, whether every value is an image or UTF-8.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Stats {
    kind: ListKind,
    min_len: usize,
    max_len: usize,
    all_images: bool,
    all_utf8: bool,
    /// Records that hold the feature.
    pub(crate) count: u64,
}

fn list(kind: &Option<Kind>) -> Option<(ListKind, usize)> {
    Some(match kind.as_ref()? {
        Kind::BytesList(b) => (ListKind::Bytes, b.value.len()),
        Kind::FloatList(f) => (ListKind::Float, f.value.len()),
        Kind::Int64List(i) => (ListKind::Int, i.value.len()),
    })
}

/// Count the features of one Example into `stats`; a feature whose list kind differs from the
/// one seen before is added to `conflicts`.
pub(crate) fn observe(
    stats: &mut BTreeMap<String, Stats>,
    ex: &Example,
    conflicts: &mut Vec<String>,
) {
    for (name, feat) in ex.features.iter().flat_map(|fs| fs.feature.iter()) {
        let Some((kind, len)) = list(&feat.kind) else {
            continue;
        };
        let (img, utf8) = match &feat.kind {
            Some(Kind::BytesList(b)) => (
                b.value.iter().all(|v| ImageCodec::sniff(v).is_some()),
                b.value.iter().all(|v| std::str::from_utf8(v).is_ok()),
            ),
            _ => (false, false),
        };
        observe_one(stats, name, kind, len, img, utf8, conflicts);
    }
}

/// Count one feature of one record (a list of `kind` and `len` values; all images, all UTF-8)
/// into `stats`.
pub(crate) fn observe_one(
    stats: &mut BTreeMap<String, Stats>,
    name: &str,
    kind: ListKind,
    len: usize,
    img: bool,
    utf8: bool,
    conflicts: &mut Vec<String>,
) {
    let s = match stats.get_mut(name) {
        Some(s) => s,
        None => stats.entry(name.to_string()).or_insert(Stats {
            kind,
            min_len: len,
            max_len: len,
            all_images: true,
            all_utf8: true,
            count: 0,
        }),
    };
    merge_one(s, name, kind, len, len, img, utf8, 1, conflicts);
}

/// Merge the statistics of other files into `into`.
pub(crate) fn merge(
    into: &mut BTreeMap<String, Stats>,
    from: &BTreeMap<String, Stats>,
    conflicts: &mut Vec<String>,
) {
    for (name, f) in from {
        match into.get_mut(name) {
            None => {
                into.insert(name.clone(), f.clone());
            }
            Some(s) => merge_one(
                s,
                name,
                f.kind,
                f.min_len,
                f.max_len,
                f.all_images,
                f.all_utf8,
                f.count,
                conflicts,
            ),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn merge_one(
    s: &mut Stats,
    name: &str,
    kind: ListKind,
    min_len: usize,
    max_len: usize,
    img: bool,
    utf8: bool,
    count: u64,
    conflicts: &mut Vec<String>,
) {
    s.count += count;
    if s.kind != kind && !conflicts.iter().any(|c| c == name) {
        conflicts.push(name.to_string());
    }
    s.min_len = s.min_len.min(min_len);
    s.max_len = s.max_len.max(max_len);
    s.all_images &= img;
    s.all_utf8 &= utf8;
}

/// The field type of each usable feature (pack's rules, module documentation), with notes on
/// the features left out; an error when a feature holds different list kinds.
pub(crate) fn feature_types(
    stats: &BTreeMap<String, Stats>,
    conflicts: &[String],
    notes: &mut Vec<String>,
) -> Result<BTreeMap<String, FieldType>, SourceError> {
    if let Some(c) = conflicts.first() {
        return Err(SourceError::Input(format!(
            "feature {c:?} holds different list kinds (bytes / float / int64) in different records"
        )));
    }
    let mut types: BTreeMap<String, FieldType> = BTreeMap::new();
    for (name, s) in stats {
        let single = s.min_len == 1 && s.max_len == 1;
        let ty = match (s.kind, single) {
            (ListKind::Int, true) => FieldType::Int64,
            (ListKind::Int, false) => FieldType::Ndarray { dtype: DType::I64 },
            (ListKind::Float, true) => FieldType::Float64,
            (ListKind::Float, false) => FieldType::Ndarray { dtype: DType::F32 },
            (ListKind::Bytes, true) if s.all_images => FieldType::Image {
                codec: ImageCodec::Auto,
            },
            (ListKind::Bytes, true) if s.all_utf8 => FieldType::String,
            (ListKind::Bytes, true) => FieldType::Bytes,
            (ListKind::Bytes, false) => {
                notes.push(format!(
                    "feature {name:?} holds lists of {}..={} byte strings and was left out (only single values are supported)",
                    s.min_len, s.max_len
                ));
                continue;
            }
        };
        types.insert(name.clone(), ty);
    }
    Ok(types)
}

/// Whether a field of type `ty` may be stored empty where a record lacks it.
pub(crate) fn can_be_empty(ty: &FieldType) -> bool {
    matches!(
        ty,
        FieldType::String | FieldType::Bytes | FieldType::Ndarray { .. }
    )
}
