//! TFRecord files of `tf.train.Example` records. A first pass learns each feature's kind and list
//! lengths; then each feature becomes a field: int64 lists of length 1 → int64, float lists of
//! length 1 → float64, longer or varying lists → ndarray (i64 / f32, 1-d), byte lists of length 1 →
//! image (when every value is an image), string (when every value is UTF-8) or bytes. Byte lists
//! of other lengths are left out, with a note.
//!
//! A record with a bad data CRC is skipped and counted; a bad length CRC or a truncated record
//! ends that file (framing can no longer be trusted), reported with the file and byte offset.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use stokehold_format::{ArrayValue, DType, Field, FieldType, FieldValue, Schema};

use super::{Loaded, PackError, PackOptions, Plan, Progress, Skipped, check_image, source_files};
use crate::example::{Example, decode_example, feature::Kind};
use crate::sources::tfrecord::{Stats, can_be_empty, feature_types, observe};
use crate::sources::{choose_fields, empty_value};
use crate::tfrecord::{TfRecordError, TfRecordReader};

fn record_files(sources: &[PathBuf]) -> Result<Vec<PathBuf>, PackError> {
    source_files(sources, |_| true, "TFRecord files")
}

/// Each record of `path` in order: `Ok(offset, bytes)` or the error that stopped or skipped it.
fn for_each_record(
    path: &Path,
    max: u64,
    mut f: impl FnMut(Result<(u64, &[u8]), TfRecordError>),
) -> Result<(), PackError> {
    let file = File::open(path).map_err(|e| PackError::io(path, e))?;
    let mut r = TfRecordReader::new(BufReader::with_capacity(1 << 20, file), max);
    let mut buf = Vec::new();
    loop {
        match r.next_record(&mut buf) {
            Ok(Some(offset)) => f(Ok((offset, &buf))),
            Ok(None) => return Ok(()),
            Err(e @ TfRecordError::DataCrc { .. }) => f(Err(e)),
            Err(e) => {
                f(Err(e));
                return Ok(());
            }
        }
    }
}

pub(super) fn plan<'a>(
    sources: &'a [PathBuf],
    options: &'a PackOptions,
    progress: &dyn Progress,
) -> Result<Plan<'a>, PackError> {
    let files = record_files(sources)?;
    let max = options.max_item_bytes;
    progress.start("scanning", Some(files.len() as u64), None);
    let mut stats: BTreeMap<String, Stats> = BTreeMap::new();
    let mut conflicts: Vec<String> = Vec::new();
    let mut records = 0u64;
    let mut bytes = 0u64;
    for f in &files {
        for_each_record(f, max, |r| {
            let Ok((_, data)) = r else { return };
            let Ok(ex) = decode_example(data) else { return };
            records += 1;
            bytes += data.len() as u64;
            observe(&mut stats, &ex, &mut conflicts);
        })?;
        progress.advance(1, 0);
    }
    progress.finish();
    let mut notes = Vec::new();
    let types = feature_types(&stats, &conflicts, &mut notes)?;
    if types.is_empty() {
        return Err(PackError::Empty(format!(
            "no usable features in {} records of {} files",
            records,
            files.len()
        )));
    }
    let counts: BTreeMap<String, u64> = types.keys().map(|n| (n.clone(), stats[n].count)).collect();
    let mut source = serde_json::Map::new();
    let chosen = choose_fields(
        &counts,
        records,
        options.fields.as_deref(),
        |n| can_be_empty(&types[n]),
        |n| format!("feature {n:?}"),
        &mut notes,
        &mut source,
    )?;
    let mut fields = Vec::new();
    let mut plan_fields: Vec<FieldPlan> = Vec::new();
    for c in chosen {
        let ty = types[&c.name].clone();
        fields.push(Field::new(c.name.clone(), ty.clone()));
        plan_fields.push((c.name, ty, c.optional));
    }
    let schema = Schema::new(fields)?;
    let jobs = Records {
        files,
        next: 0,
        max,
        ready: std::collections::VecDeque::new(),
    };
    Ok(Plan {
        schema,
        classes: None,
        items: Some(records),
        bytes: Some(bytes),
        skipped_early: Vec::new(),
        notes,
        source,
        run: Box::new(move |sink| sink.run(jobs, move |job| load(job, &plan_fields))),
    })
}

enum Job {
    Record { at: String, data: Vec<u8> },
    Bad(Skipped),
}

/// Yields records file by file; reads one file at a time into a queue.
struct Records {
    files: Vec<PathBuf>,
    next: usize,
    max: u64,
    ready: std::collections::VecDeque<Job>,
}

impl Iterator for Records {
    type Item = Job;

    fn next(&mut self) -> Option<Job> {
        while self.ready.is_empty() {
            let path = self.files.get(self.next)?.clone();
            self.next += 1;
            let ready = &mut self.ready;
            let shown = path.display().to_string();
            let r = for_each_record(&path, self.max, |r| match r {
                Ok((offset, data)) => ready.push_back(Job::Record {
                    at: format!("{shown} @ byte {offset}"),
                    data: data.to_vec(),
                }),
                Err(e @ TfRecordError::DataCrc { .. }) => ready.push_back(Job::Bad(Skipped {
                    input: shown.clone(),
                    reason: e.to_string(),
                })),
                Err(e) => ready.push_back(Job::Bad(Skipped {
                    input: shown.clone(),
                    reason: format!("{e}; the rest of this file is skipped"),
                })),
            });
            if let Err(e) = r {
                self.ready.push_back(Job::Bad(Skipped {
                    input: shown,
                    reason: e.to_string(),
                }));
            }
        }
        self.ready.pop_front()
    }
}

/// A field of the schema: its feature name, type, and whether a record may lack it.
type FieldPlan = (String, FieldType, bool);

fn load(job: Job, fields: &[FieldPlan]) -> Loaded {
    let (at, data) = match job {
        Job::Bad(s) => return Loaded::Skip(s),
        Job::Record { at, data } => (at, data),
    };
    let skip = |reason: String| {
        Loaded::Skip(Skipped {
            input: at.clone(),
            reason,
        })
    };
    let ex: Example = match decode_example(&data) {
        Ok(e) => e,
        Err(e) => return skip(format!("not a tf.train.Example: {e}")),
    };
    let Some(mut features) = ex.features.map(|f| f.feature) else {
        return skip("the Example has no features".into());
    };
    let mut values = Vec::with_capacity(fields.len());
    let mut progressive = false;
    for (name, ty, optional) in fields {
        let Some(kind) = features.remove(name).and_then(|f| f.kind) else {
            match empty_value(ty).filter(|_| *optional) {
                Some(v) => {
                    values.push(v);
                    continue;
                }
                None => {
                    return skip(format!(
                        "feature {name:?} is missing, a required field (--fields chooses the fields)"
                    ));
                }
            }
        };
        let v = match (ty, kind) {
            (FieldType::Int64, Kind::Int64List(l)) if l.value.len() == 1 => {
                FieldValue::Int64(l.value[0])
            }
            (FieldType::Float64, Kind::FloatList(l)) if l.value.len() == 1 => {
                FieldValue::Float64(f64::from(l.value[0]))
            }
            (FieldType::Ndarray { dtype: DType::I64 }, Kind::Int64List(l)) => {
                FieldValue::Array(ArrayValue {
                    dtype: DType::I64,
                    shape: vec![l.value.len() as u64],
                    data: Cow::Owned(l.value.iter().flat_map(|v| v.to_le_bytes()).collect()),
                })
            }
            (FieldType::Ndarray { dtype: DType::F32 }, Kind::FloatList(l)) => {
                FieldValue::Array(ArrayValue {
                    dtype: DType::F32,
                    shape: vec![l.value.len() as u64],
                    data: Cow::Owned(l.value.iter().flat_map(|v| v.to_le_bytes()).collect()),
                })
            }
            (FieldType::Image { .. }, Kind::BytesList(mut l)) if l.value.len() == 1 => {
                let b = l.value.pop().expect("one value");
                match check_image(&b) {
                    Ok(p) => progressive |= p,
                    Err(e) => return skip(format!("feature {name:?}: {e}")),
                }
                FieldValue::Image(b.into())
            }
            (FieldType::String, Kind::BytesList(mut l)) if l.value.len() == 1 => {
                match String::from_utf8(l.value.pop().expect("one value")) {
                    Ok(s) => FieldValue::String(s.into()),
                    Err(_) => return skip(format!("feature {name:?} is not UTF-8")),
                }
            }
            (FieldType::Bytes, Kind::BytesList(mut l)) if l.value.len() == 1 => {
                FieldValue::Bytes(l.value.pop().expect("one value").into())
            }
            (ty, _) => return skip(format!("feature {name:?} does not fit its field type {ty}")),
        };
        values.push(v);
    }
    Loaded::Sample {
        input: at,
        values,
        bytes: data.len() as u64,
        progressive,
    }
}
