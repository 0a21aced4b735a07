//! Helpers shared by the engine's test binaries (`it`, `process`).
#![allow(dead_code)]

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};

/// A dataset of `n` samples: `x` = id as float64, `label` = id % 7, `blob` = id-dependent bytes.
pub fn dataset(dir: &Path, n: u64) -> Arc<Dataset> {
    let path = dir.join(format!("ds-{n}"));
    if !path.exists() {
        let schema =
            Schema::from_specs([("x", "float64"), ("label", "int64"), ("blob", "bytes")]).unwrap();
        let opts = DatasetWriteOptions {
            target_shard_bytes: 2048,
            ..DatasetWriteOptions::default()
        };
        let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
        for i in 0..n {
            let blob: Vec<u8> = (0..(i % 13)).map(|k| (i + k) as u8).collect();
            w.write(&[
                FieldValue::Float64(i as f64),
                FieldValue::Int64((i % 7) as i64),
                FieldValue::Bytes(Cow::Owned(blob)),
            ])
            .unwrap();
        }
        w.finish().unwrap();
    }
    Arc::new(Dataset::open(&path).unwrap())
}
