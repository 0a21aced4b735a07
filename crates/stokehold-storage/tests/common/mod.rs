//! Shared helpers of the format tests.
#![allow(dead_code)]

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use stokehold_format::{ArrayValue, DType, FieldValue, Schema, WriteOptions};
use stokehold_storage::{DatasetWriteOptions, DatasetWriter};

pub fn schema() -> Schema {
    Schema::from_specs([
        ("image", "image:jpeg"),
        ("label", "int64"),
        ("caption", "string+zstd"),
        ("score", "float64"),
        ("emb", "ndarray:f32"),
        ("blob", "bytes"),
    ])
    .unwrap()
}

/// Deterministic sample `i`.
pub fn sample(i: u64) -> Vec<FieldValue<'static>> {
    let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0];
    jpeg.extend((0..(i % 50) + 10).map(|k| (k * 7 + i) as u8));
    let emb: Vec<u8> = (0..4)
        .flat_map(|k| (i as f32 + k as f32 * 0.5).to_le_bytes())
        .collect();
    vec![
        FieldValue::Image(Cow::Owned(jpeg)),
        FieldValue::Int64(i as i64 % 7),
        FieldValue::String(Cow::Owned(format!("sample number {i} ").repeat(3))),
        FieldValue::Float64(i as f64 / 4.0),
        FieldValue::Array(ArrayValue {
            dtype: DType::F32,
            shape: vec![2, 2],
            data: Cow::Owned(emb),
        }),
        FieldValue::Bytes(Cow::Owned(i.to_le_bytes().to_vec())),
    ]
}

/// Write `n` samples to `dir/name` with shards of about `shard_bytes`.
pub fn write_dataset(dir: &Path, name: &str, n: u64, shard_bytes: u64, align: u32) -> PathBuf {
    let dest = dir.join(name);
    let opts = DatasetWriteOptions {
        write: WriteOptions {
            align,
            ..WriteOptions::default()
        },
        target_shard_bytes: shard_bytes,
        overwrite: false,
    };
    let mut w = DatasetWriter::create(&dest, schema(), opts).unwrap();
    w.set_classes((0..7).map(|c| format!("class-{c}")).collect());
    for i in 0..n {
        assert_eq!(w.write(&sample(i)).unwrap(), i);
    }
    w.finish().unwrap();
    dest
}

/// Every entry of a directory, sorted, with contents (a sub-directory's are empty).
pub fn read_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                if e.file_type().unwrap().is_dir() {
                    Vec::new()
                } else {
                    std::fs::read(e.path()).unwrap()
                },
            )
        })
        .collect();
    v.sort();
    v
}
