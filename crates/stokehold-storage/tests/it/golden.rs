//! Golden files of format version 1, kept in `tests/golden/v1*` and read by every future build.
//! If a change makes these tests fail, it changed the format: that needs a new format version
//! (with new golden files beside these), never an edit of the old ones.
//!
//! To create them (once, when a format version is introduced):
//! `STOKEHOLD_WRITE_GOLDEN=1 cargo test -p stokehold-format --test golden`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use stokehold_format::{ArrayValue, DType, FieldValue, Schema, WriteOptions};
use stokehold_storage::file::supports_direct;
use stokehold_storage::{
    Access, Dataset, DatasetWriteOptions, DatasetWriter, OpenOptions, VerifyOptions, verify_dataset,
};

fn golden_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn schema() -> Schema {
    Schema::from_specs([
        ("image", "image:jpeg"),
        ("png", "image:png"),
        ("label", "int64"),
        ("score", "float64"),
        ("text", "string"),
        ("ztext", "string+zstd"),
        ("raw", "bytes"),
        ("u8", "ndarray:u8"),
        ("i32", "ndarray:i32"),
        ("i64", "ndarray:i64+zstd"),
        ("f16", "ndarray:f16"),
        ("f32", "ndarray:f32"),
        ("f64", "ndarray:f64"),
    ])
    .unwrap()
}

fn arr(dtype: DType, shape: &[u64], data: Vec<u8>) -> FieldValue<'static> {
    FieldValue::Array(ArrayValue {
        dtype,
        shape: shape.to_vec(),
        data: Cow::Owned(data),
    })
}

/// The samples of the golden datasets, spelled out so the test does not depend on other code.
fn samples() -> Vec<Vec<FieldValue<'static>>> {
    (0..7i64)
        .map(|i| {
            let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xDB];
            jpeg.extend((0..i * 3).map(|k| k as u8));
            let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
            png.push(i as u8);
            vec![
                FieldValue::Image(jpeg.into()),
                FieldValue::Image(png.into()),
                FieldValue::Int64(i * 1_000_000_007 - 3),
                FieldValue::Float64(i as f64 * -0.375),
                FieldValue::String(format!("sample {i}: ünïcødé").into()),
                FieldValue::String("compressible ".repeat(i as usize + 1).into()),
                FieldValue::Bytes(vec![0u8, 255, i as u8].into()),
                arr(DType::U8, &[2, 3], (0..6).map(|k| (k + i) as u8).collect()),
                arr(
                    DType::I32,
                    &[3],
                    [i as i32, -1, i32::MAX]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                ),
                arr(
                    DType::I64,
                    &[2, 2],
                    [i, -i, i64::MIN, 7]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                ),
                arr(DType::F16, &[2], vec![0x00, 0x3C, 0x00, 0xC0]), // 1.0, -2.0
                arr(
                    DType::F32,
                    &[1, 1, 2],
                    [0.5f32, i as f32]
                        .iter()
                        .flat_map(|v| v.to_le_bytes())
                        .collect(),
                ),
                arr(DType::F64, &[0], Vec::new()),
            ]
        })
        .collect()
}

fn write(dest: &Path, align: u32) {
    let opts = DatasetWriteOptions {
        write: WriteOptions {
            align,
            zstd_level: 3,
        },
        target_shard_bytes: 600,
        overwrite: true,
    };
    let mut w = DatasetWriter::create(dest, schema(), opts).unwrap();
    w.set_classes(vec!["zero".into(), "one".into()]);
    for s in samples() {
        w.write(&s).unwrap();
    }
    w.finish().unwrap();
}

fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

const VARIANTS: [(&str, u32); 2] = [("v1", 1), ("v1-align4096", 4096)];

#[test]
fn golden_v1_datasets_read_forever() {
    if std::env::var_os("STOKEHOLD_WRITE_GOLDEN").is_some() {
        for (name, align) in VARIANTS {
            write(&golden_dir(name), align);
        }
    }
    for (name, _) in VARIANTS {
        let dir = golden_dir(name);
        for access in [Access::Pread, Access::Mmap, Access::Direct, Access::Memory] {
            if access == Access::Direct && !supports_direct(&first_shard(&dir)) {
                continue;
            }
            let ds = Dataset::open_with(&dir, OpenOptions::with_access(access))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(ds.schema(), &schema());
            assert!(ds.shards().len() >= 2, "{name}: golden data spans shards");
            assert_eq!(ds.classes().unwrap(), ["zero", "one"]);
            let expected = samples();
            assert_eq!(ds.len(), expected.len() as u64);
            for (i, s) in expected.iter().enumerate() {
                assert_eq!(&ds.get(i as u64).unwrap(), s, "{name} sample {i}");
            }
        }
        let report = verify_dataset(&dir, VerifyOptions::default(), &|_| {}).unwrap();
        assert!(report.ok(), "{name}: {:?}", report.faults);
    }
}

#[test]
fn the_writer_still_produces_the_golden_bytes() {
    for (name, align) in VARIANTS {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join(name);
        write(&dest, align);
        assert_eq!(
            files(&dest),
            files(&golden_dir(name)),
            "{name}: the writer's output changed: that is a format change"
        );
    }
}

fn first_shard(dir: &Path) -> PathBuf {
    let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "skh"))
        .collect();
    shards.sort();
    shards.remove(0)
}
