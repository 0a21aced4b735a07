//! `pack` of Parquet files: columns mapped by type, Hugging Face `Image` structs and class
//! labels, skip-and-count with row names, `--fields`, errors naming the file and row group,
//! identical output on any thread count. The files are written here with the `parquet` crate.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Float32Builder, ListBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, BinaryArray, Date32Array, Float32Array, Int32Array, RecordBatch, StringArray,
    StructArray,
};
use arrow_schema::{DataType, Field, Fields};
use parquet::arrow::ArrowWriter;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use stokehold_format::{ArrayValue, DType, FieldValue};
use stokehold_ingest::{FieldChoice, NoProgress, PackError, PackOptions, SourceKind, pack};
use stokehold_storage::Dataset;

use crate::common;
use common::{jpeg, packed, tree};

fn opts(threads: usize) -> PackOptions {
    PackOptions {
        threads,
        max_skip_fraction: 1.0,
        ..PackOptions::default()
    }
}

/// Write `batch` as a Parquet file with row groups of `group` rows and `metadata`.
pub(crate) fn write_parquet(
    path: &Path,
    batch: &RecordBatch,
    group: usize,
    metadata: Vec<KeyValue>,
) {
    let props = WriterProperties::builder()
        .set_max_row_group_size(group)
        .set_key_value_metadata(Some(metadata))
        .build();
    let mut w =
        ArrowWriter::try_new(fs::File::create(path).unwrap(), batch.schema(), Some(props)).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

const ROWS: usize = 40;
const BAD_ROW: usize = 13;
const NULL_CAPTION: usize = 21;

/// 40 rows in row groups of 6: `jpg` (binary; row 13 is not an image), `cls` (int32), `caption`
/// (utf8, null in row 21), `score` (float32), `emb` (list<float32> of i % 4 elements), `ts`
/// (a date: no field type).
fn mixed_batch() -> RecordBatch {
    let mut jpg = BinaryBuilder::new();
    let mut caption = StringBuilder::new();
    let mut emb = ListBuilder::new(Float32Builder::new());
    for i in 0..ROWS {
        if i == BAD_ROW {
            jpg.append_value(b"definitely not a jpeg");
        } else {
            jpg.append_value(jpeg(i as u64));
        }
        if i == NULL_CAPTION {
            caption.append_null();
        } else {
            caption.append_value(format!("caption {i}"));
        }
        for k in 0..i % 4 {
            emb.values().append_value(i as f32 + k as f32 / 4.0);
        }
        emb.append(true);
    }
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("jpg", Arc::new(jpg.finish())),
        (
            "cls",
            Arc::new(Int32Array::from_iter_values(
                (0..ROWS as i32).map(|i| i % 5),
            )),
        ),
        ("caption", Arc::new(caption.finish())),
        (
            "score",
            Arc::new(Float32Array::from_iter_values(
                (0..ROWS).map(|i| i as f32 * 0.5),
            )),
        ),
        ("emb", Arc::new(emb.finish())),
        (
            "ts",
            Arc::new(Date32Array::from_iter_values(0..ROWS as i32)),
        ),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

#[test]
fn parquet_columns_become_typed_fields_and_bad_rows_are_named_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("data.parquet");
    write_parquet(&src, &mixed_batch(), 6, Vec::new());
    let r = pack(
        std::slice::from_ref(&src),
        &tmp.path().join("o1"),
        None,
        &opts(1),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(r.kind, SourceKind::Parquet);
    let ds = Dataset::open(tmp.path().join("o1")).unwrap();
    assert_eq!(
        ds.schema().to_string(),
        "caption: string, cls: int64, emb: ndarray:f32, jpg: image:auto, score: float64"
    );
    // the row that is not an image is skipped, named by file and row (across row groups)
    assert_eq!(ds.len(), (ROWS - 1) as u64);
    assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
    assert_eq!(
        r.skipped[0].input,
        format!("{} row {BAD_ROW}", src.display())
    );
    assert!(
        r.skipped[0].reason.contains("column \"jpg\""),
        "{:?}",
        r.skipped
    );
    assert!(
        r.skipped[0].reason.contains("not an image"),
        "{:?}",
        r.skipped
    );
    // the timestamp column is left out with a note; the null caption is stored empty, counted
    let notes = r.notes.join("\n");
    assert!(notes.contains("column \"ts\""), "{notes}");
    assert!(
        notes.contains("1 of 40 samples have no column \"caption\""),
        "{notes}"
    );
    assert_eq!(r.manifest.source["empty_where_missing"]["caption"], 1);
    let skipped_txt = fs::read_to_string(tmp.path().join("o1/skipped.txt")).unwrap();
    assert!(
        skipped_txt.contains(&format!("row {BAD_ROW}\t")),
        "{skipped_txt}"
    );
    for (stored, row) in (0..ds.len()).zip((0..ROWS).filter(|&i| i != BAD_ROW)) {
        let v = ds.get(stored).unwrap();
        let caption = if row == NULL_CAPTION {
            String::new()
        } else {
            format!("caption {row}")
        };
        assert_eq!(v[0], FieldValue::String(caption.into()), "row {row}");
        assert_eq!(v[1], FieldValue::Int64(row as i64 % 5));
        let emb: Vec<u8> = (0..row % 4)
            .flat_map(|k| (row as f32 + k as f32 / 4.0).to_le_bytes())
            .collect();
        assert_eq!(
            v[2],
            FieldValue::Array(ArrayValue {
                dtype: DType::F32,
                shape: vec![(row % 4) as u64],
                data: emb.into(),
            }),
            "row {row}"
        );
        assert_eq!(
            v[3],
            FieldValue::Image(packed(&jpeg(row as u64)).into()),
            "row {row}"
        );
        assert_eq!(v[4], FieldValue::Float64(row as f64 * 0.5));
    }
    // the same bytes on any thread count
    pack(
        std::slice::from_ref(&src),
        &tmp.path().join("o3"),
        Some(SourceKind::Parquet),
        &opts(3),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(tree(&tmp.path().join("o1")), tree(&tmp.path().join("o3")));
}

#[test]
fn fields_strict_and_the_skip_limit_apply_to_parquet_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("parts");
    fs::create_dir(&dir).unwrap();
    let batch = mixed_batch();
    // two files in a directory, read in name order; rows count from 0 in each file
    write_parquet(&dir.join("b.parquet"), &batch.slice(20, 20), 7, Vec::new());
    write_parquet(&dir.join("a.parquet"), &batch.slice(0, 20), 7, Vec::new());
    fs::write(dir.join("README.md"), "not parquet").unwrap();
    assert_eq!(
        stokehold_ingest::detect(std::slice::from_ref(&dir)).unwrap(),
        SourceKind::Parquet
    );
    let with = |fields: &str, strict: bool, max_skip: f64| PackOptions {
        fields: Some(FieldChoice::parse_list(fields).unwrap()),
        strict,
        max_skip_fraction: max_skip,
        ..opts(2)
    };
    let out = tmp.path().join("o");
    // caption required: its null row is skipped too (b.parquet row 1 = row 21)
    let r = pack(
        std::slice::from_ref(&dir),
        &out,
        None,
        &with("jpg,caption", false, 1.0),
        &NoProgress,
    )
    .unwrap();
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.schema().to_string(), "jpg: image:auto, caption: string");
    assert_eq!(ds.len(), (ROWS - 2) as u64);
    let names: Vec<String> = r.skipped.iter().map(|s| s.input.clone()).collect();
    assert_eq!(
        names,
        [
            format!("{} row {BAD_ROW}", dir.join("a.parquet").display()),
            format!(
                "{} row {}",
                dir.join("b.parquet").display(),
                NULL_CAPTION - 20
            ),
        ]
    );
    assert!(
        r.skipped[1].reason.contains("column \"caption\" is null"),
        "{:?}",
        r.skipped
    );
    assert_eq!(
        ds.get(20).unwrap()[1],
        FieldValue::String("caption 22".into())
    );
    // strict: the first bad row is fatal, and nothing is written
    let strict_out = tmp.path().join("strict");
    let e = pack(
        std::slice::from_ref(&dir),
        &strict_out,
        None,
        &with("jpg", true, 1.0),
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(e, PackError::Strict(ref s) if s.input.ends_with(&format!("a.parquet row {BAD_ROW}"))),
        "{e}"
    );
    assert!(!strict_out.join("manifest.json").exists());
    // 1 of 40 skipped is over a limit of 1%
    let e = pack(
        std::slice::from_ref(&dir),
        &tmp.path().join("lim"),
        None,
        &with("jpg", false, 0.01),
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            PackError::TooManySkipped {
                skipped: 1,
                inputs: 40,
                ..
            }
        ),
        "{e}"
    );
    // --fields naming an unsupported or unknown column, or an image as optional
    let error = |fields: &str| {
        let o = with(fields, false, 1.0);
        pack(
            std::slice::from_ref(&dir),
            &tmp.path().join("x"),
            None,
            &o,
            &NoProgress,
        )
        .unwrap_err()
        .to_string()
    };
    let e = error("jpg,ts");
    assert!(e.contains("column \"ts\" cannot be packed"), "{e}");
    let e = error("jpg,nope");
    assert!(e.contains("no sample has column \"nope\""), "{e}");
    let e = error("jpg?");
    assert!(e.contains("cannot be optional"), "{e}");
    // --max-pixels: every image is over one pixel
    let small = PackOptions {
        images: stokehold_ingest::ImagePolicy {
            max_pixels: 1,
            ..Default::default()
        },
        ..with("jpg", false, 1.0)
    };
    let e = pack(
        std::slice::from_ref(&dir),
        &tmp.path().join("px"),
        None,
        &small,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("all 40 inputs were skipped") && e.contains("max-pixels"),
        "{e}"
    );
}

/// One image: its bytes, its path, and whether the struct is valid (not null).
type ImageRow<'a> = (Option<Vec<u8>>, Option<&'a str>, bool);

/// A Hugging Face `Image` column: `struct<bytes: binary, path: string>`.
fn image_struct(values: &[ImageRow<'_>]) -> StructArray {
    let bytes: BinaryArray = values.iter().map(|(b, _, _)| b.as_deref()).collect();
    let paths: StringArray = values.iter().map(|(_, p, _)| *p).collect();
    let fields = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    let valid = values.iter().map(|(_, _, v)| *v).collect::<Vec<_>>();
    StructArray::new(
        fields,
        vec![Arc::new(bytes), Arc::new(paths)],
        Some(valid.into()),
    )
}

#[test]
fn hugging_face_image_structs_and_class_labels() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("imgs")).unwrap();
    fs::write(tmp.path().join("imgs/on-disk.jpg"), jpeg(100)).unwrap();
    let image = image_struct(&[
        (Some(jpeg(0)), Some("a.jpg"), true),
        (None, Some("imgs/on-disk.jpg"), true), // bytes not embedded: read from the path
        (None, None, false),                    // a null image: skipped
        (Some(jpeg(3)), None, true),
        (None, Some("imgs/missing.jpg"), true), // unreadable: skipped, named
    ]);
    // an Audio feature is stored as the same struct: not an image column
    let audio = image_struct(&vec![
        (Some(b"RIFF....WAVE".to_vec()), Some("a.wav"), true);
        5
    ]);
    let batch = RecordBatch::try_from_iter(vec![
        ("image", Arc::new(image) as ArrayRef),
        (
            "label",
            Arc::new(Int32Array::from(vec![1, 0, 1, 2, 0])) as ArrayRef,
        ),
        ("audio", Arc::new(audio) as ArrayRef),
    ])
    .unwrap();
    let hf = r#"{"info": {"features": {"image": {"_type": "Image"},
        "label": {"names": ["cat", "dog", "cow"], "_type": "ClassLabel"},
        "audio": {"_type": "Audio"}}}}"#;
    let src = tmp.path().join("train-00000-of-00001.parquet");
    write_parquet(
        &src,
        &batch,
        2,
        vec![KeyValue::new("huggingface".into(), hf.to_string())],
    );
    let out = tmp.path().join("o");
    let r = pack(
        std::slice::from_ref(&src),
        &out,
        None,
        &opts(2),
        &NoProgress,
    )
    .unwrap();
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.schema().to_string(), "image: image:auto, label: int64");
    let notes = r.notes.join("\n");
    assert!(
        notes.contains("column \"audio\" (a Hugging Face Audio feature)"),
        "{notes}"
    );
    assert_eq!(
        r.manifest.classes.as_deref(),
        Some(&["cat".to_string(), "dog".into(), "cow".into()][..])
    );
    assert_eq!(r.manifest.source["class_column"], "label");
    assert_eq!(ds.len(), 3);
    assert_eq!(
        ds.get(0).unwrap(),
        vec![
            FieldValue::Image(packed(&jpeg(0)).into()),
            FieldValue::Int64(1)
        ]
    );
    assert_eq!(
        ds.get(1).unwrap()[0],
        FieldValue::Image(packed(&jpeg(100)).into())
    );
    assert_eq!(ds.get(2).unwrap()[1], FieldValue::Int64(2));
    let skipped: Vec<(String, String)> = r
        .skipped
        .iter()
        .map(|s| (s.input.clone(), s.reason.clone()))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped[0].0.ends_with("row 2") && skipped[0].1.contains("is null"),
        "{skipped:?}"
    );
    assert!(
        skipped[1].0.ends_with("row 4") && skipped[1].1.contains("missing.jpg"),
        "{skipped:?}"
    );
}

#[test]
fn a_damaged_parquet_file_is_an_error_naming_the_file_and_row_group() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("data.parquet");
    write_parquet(&src, &mixed_batch(), 10, Vec::new());
    let meta = parquet::file::reader::FileReader::metadata(
        &parquet::file::serialized_reader::SerializedFileReader::new(fs::File::open(&src).unwrap())
            .unwrap(),
    )
    .clone();
    // overwrite the pages of row group 2's first column (jpg) with garbage
    let col = meta.row_group(2).column(0);
    let (start, len) = col.byte_range();
    let mut bytes = fs::read(&src).unwrap();
    for b in &mut bytes[start as usize..(start + len) as usize] {
        *b = 0xA5;
    }
    let damaged = tmp.path().join("damaged.parquet");
    fs::write(&damaged, &bytes).unwrap();
    let out = tmp.path().join("o");
    let e = pack(
        std::slice::from_ref(&damaged),
        &out,
        None,
        &opts(2),
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            PackError::Parquet {
                row_group: Some(2),
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("damaged.parquet, row group 2: "), "{msg}");
    assert!(!out.join("manifest.json").exists());
    // a truncated file: its footer is gone
    let truncated = tmp.path().join("truncated.parquet");
    fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let e = pack(
        std::slice::from_ref(&truncated),
        &out,
        None,
        &opts(2),
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            PackError::Parquet {
                row_group: None,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string().starts_with(&truncated.display().to_string()),
        "{e}"
    );
}

#[test]
fn parquet_detection_and_mixtures() {
    let tmp = tempfile::tempdir().unwrap();
    assert_eq!(
        stokehold_ingest::detect(&[tmp.path().join("x.parquet")]).unwrap(),
        SourceKind::Parquet
    );
    assert_eq!(SourceKind::parse("parquet"), Some(SourceKind::Parquet));
    fs::write(tmp.path().join("a.parquet"), b"").unwrap();
    fs::write(tmp.path().join("b.tar"), b"").unwrap();
    let e = stokehold_ingest::detect(&[tmp.path().to_path_buf()])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parquet, webdataset") && e.contains("--from"),
        "{e}"
    );
}
