//! Several images per sample (`list:image`, and `list:bytes`, `list:string`) through `pack` of
//! Parquet (Hugging Face `Sequence(Image())`, lists of binary and of strings), JSONL (a list of
//! image paths), WebDataset (numbered image members), and Parquet and JSONL read in place: the
//! items in order, each image's size kept in the index, a bad item named by its place and number.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, ListBuilder, StringBuilder};
use arrow_array::{ArrayRef, BinaryArray, ListArray, RecordBatch, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields};
use parquet::file::metadata::KeyValue;
use stokehold_format::FieldValue;
use stokehold_ingest::inplace::{InPlaceOptions, open};
use stokehold_ingest::{FieldChoice, NoProgress, PackOptions, PackReport, pack};
use stokehold_storage::{Dataset, OpenOptions};

/// A JPEG of `w` × `h` pixels, different for each `seed`.
fn jpeg(w: u32, h: u32, seed: u64) -> Vec<u8> {
    let data = (0..w * h * 3)
        .map(|i| (u64::from(i) * 7 + seed * 31) as u8)
        .collect();
    let px = stokehold_ops::jpeg::Pixels {
        width: w,
        height: h,
        channels: 3,
        data,
    };
    stokehold_ops::jpeg::encode(&px, 80).unwrap()
}

fn pack_as_given(src: &Path, out: &Path, fields: Option<&str>) -> (PackReport, Dataset) {
    let r = pack(
        &[src.to_path_buf()],
        out,
        None,
        &crate::common::plain_options(fields),
        &NoProgress,
    )
    .unwrap();
    (r, Dataset::open(out).unwrap())
}

fn images(v: &[&[u8]]) -> FieldValue<'static> {
    FieldValue::List(
        v.iter()
            .map(|b| FieldValue::Image(b.to_vec().into()))
            .collect(),
    )
}

/// What a pack skipped: "input: reason" each.
fn skipped(r: &PackReport) -> Vec<String> {
    r.skipped
        .iter()
        .map(|s| format!("{}: {}", s.input, s.reason))
        .collect()
}

/// The sizes `Dataset::image_sizes` gives, as (width, height) pairs.
fn sizes(ds: &Dataset, field: &str, i: u64) -> Option<Vec<(u32, u32)>> {
    ds.image_sizes(field, i)
        .unwrap()
        .map(|s| s.chunks(2).map(|p| (p[0], p[1])).collect())
}

/// A list column of `{bytes, path}` structs (Hugging Face's `Sequence(Image())`): each row a
/// list (or null) of (bytes, path).
type ImageItem = (Option<Vec<u8>>, Option<&'static str>);

fn image_struct_list(rows: &[Option<Vec<ImageItem>>]) -> ListArray {
    let items: Vec<&ImageItem> = rows.iter().flatten().flatten().collect();
    let bytes: BinaryArray = items.iter().map(|(b, _)| b.as_deref()).collect();
    let paths: StringArray = items.iter().map(|(_, p)| *p).collect();
    let fields = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    let structs = StructArray::new(fields.clone(), vec![Arc::new(bytes), Arc::new(paths)], None);
    let lens = rows.iter().map(|r| r.as_ref().map_or(0, Vec::len));
    let valid: Vec<bool> = rows.iter().map(Option::is_some).collect();
    ListArray::new(
        Arc::new(Field::new("item", DataType::Struct(fields), true)),
        OffsetBuffer::from_lengths(lens),
        Arc::new(structs),
        Some(valid.into()),
    )
}

/// Five rows: `images` (`Sequence(Image())`: two images, none, one given by its path, a bad
/// second item, null), `raw` (lists of binary JPEGs), `blobs` (lists of binary that are not
/// images), `tags` (lists of strings), `sounds` (`Sequence(Audio())`: left out).
fn hf_file(dir: &Path) -> (std::path::PathBuf, Vec<Vec<u8>>) {
    let imgs: Vec<Vec<u8>> = vec![
        jpeg(64, 48, 1),
        jpeg(17, 33, 2),
        jpeg(30, 20, 3),
        jpeg(8, 8, 4),
    ];
    fs::create_dir_all(dir.join("files")).unwrap();
    fs::write(dir.join("files/on-disk.jpg"), &imgs[2]).unwrap();
    let images = image_struct_list(&[
        Some(vec![
            (Some(imgs[0].clone()), Some("a.jpg")),
            (Some(imgs[1].clone()), None),
        ]),
        Some(vec![]),
        Some(vec![(None, Some("files/on-disk.jpg"))]),
        Some(vec![
            (Some(imgs[3].clone()), None),
            (Some(b"GIF89a not ours".to_vec()), None),
        ]),
        None,
    ]);
    let sounds = image_struct_list(&vec![Some(vec![(Some(b"RIFF....WAVE".to_vec()), None)]); 5]);
    let mut raw = ListBuilder::new(BinaryBuilder::new());
    let mut blobs = ListBuilder::new(BinaryBuilder::new());
    let mut tags = ListBuilder::new(StringBuilder::new());
    for i in 0..5usize {
        for (k, img) in imgs.iter().enumerate().take(i % 3) {
            raw.values().append_value(img);
            blobs.values().append_value(format!("blob {i}.{k}"));
            tags.values().append_value(format!("tag {i}.{k}"));
        }
        raw.append(true);
        blobs.append(true);
        tags.append(true);
    }
    let batch = RecordBatch::try_from_iter(vec![
        ("images", Arc::new(images) as ArrayRef),
        ("raw", Arc::new(raw.finish()) as ArrayRef),
        ("blobs", Arc::new(blobs.finish()) as ArrayRef),
        ("tags", Arc::new(tags.finish()) as ArrayRef),
        ("sounds", Arc::new(sounds) as ArrayRef),
    ])
    .unwrap();
    let hf = r#"{"info": {"features": {
        "images": {"_type": "Sequence", "feature": {"_type": "Image"}},
        "sounds": {"_type": "List", "feature": {"_type": "Audio"}}}}}"#;
    let src = dir.join("train.parquet");
    crate::parquet::write_parquet(
        &src,
        &batch,
        2,
        vec![KeyValue::new("huggingface".into(), hf.to_string())],
    );
    (src, imgs)
}

#[test]
fn parquet_lists_of_images_bytes_and_strings_pack_with_each_images_size() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, imgs) = hf_file(tmp.path());
    let (r, ds) = pack_as_given(&src, &tmp.path().join("o"), Some("images?,raw,blobs,tags"));
    assert_eq!(
        ds.schema().to_string(),
        "images: list:image:auto, raw: list:image:auto, blobs: list:bytes, tags: list:string"
    );
    // row 3's second item is no image: skipped, named by its row, column and item
    let skipped = skipped(&r);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].contains("train.parquet row 3")
            && skipped[0].contains("column \"images\"")
            && skipped[0].contains("item 1"),
        "{skipped:?}"
    );
    assert_eq!(ds.len(), 4);
    let rows: Vec<Vec<FieldValue<'static>>> = (0..4).map(|i| ds.get(i).unwrap()).collect();
    assert_eq!(rows[0][0], images(&[&imgs[0], &imgs[1]]));
    assert_eq!(rows[1][0], images(&[]));
    // an item with only a path: the file's bytes
    assert_eq!(rows[2][0], images(&[&imgs[2]]));
    // a null list, the field optional: an empty list
    assert_eq!(rows[3][0], images(&[]));
    assert_eq!(rows[2][1], images(&[&imgs[0], &imgs[1]]));
    assert_eq!(
        rows[1][2],
        FieldValue::List(vec![FieldValue::Bytes(b"blob 1.0".to_vec().into())])
    );
    assert_eq!(
        rows[2][3],
        FieldValue::List(vec![
            FieldValue::String("tag 2.0".into()),
            FieldValue::String("tag 2.1".into())
        ])
    );
    // the sizes, from the index
    assert_eq!(sizes(&ds, "images", 0), Some(vec![(64, 48), (17, 33)]));
    assert_eq!(sizes(&ds, "images", 1), Some(vec![]));
    assert_eq!(sizes(&ds, "images", 2), Some(vec![(30, 20)]));
    assert_eq!(sizes(&ds, "raw", 2), Some(vec![(64, 48), (17, 33)]));
    // a list of Audio structs is no list of images
    let all = pack_as_given(&src, &tmp.path().join("all"), None).0;
    let notes = all.notes.join("\n");
    assert!(
        notes.contains("column \"sounds\" (a Hugging Face Audio feature)"),
        "{notes}"
    );
}

#[test]
fn pack_rewrites_the_jpegs_of_a_list_as_it_rewrites_single_images() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, imgs) = hf_file(tmp.path());
    let out = tmp.path().join("o");
    let o = PackOptions {
        fields: Some(FieldChoice::parse_list("raw").unwrap()),
        max_skip_fraction: 1.0,
        ..PackOptions::default()
    };
    let r = pack(&[src], &out, None, &o, &NoProgress).unwrap();
    assert_eq!(r.manifest.source["restart_markers"], true);
    let ds = Dataset::open(&out).unwrap();
    let with = |b: &[u8]| stokehold_ops::jpeg::with_restarts(b).unwrap();
    assert_eq!(
        ds.get(2).unwrap()[0],
        images(&[&with(&imgs[0]), &with(&imgs[1])])
    );
    assert_eq!(sizes(&ds, "raw", 1), Some(vec![(64, 48)]));
}

/// A temporary folder with `src/imgs/{0,1,2}.jpg` (40 × 30, 10 × 20, 5 × 7): the folder, `src`
/// and the images' bytes.
fn jsonl_images() -> (tempfile::TempDir, std::path::PathBuf, [Vec<u8>; 3]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("src");
    fs::create_dir_all(dir.join("imgs")).unwrap();
    let imgs = [jpeg(40, 30, 1), jpeg(10, 20, 2), jpeg(5, 7, 3)];
    for (k, b) in imgs.iter().enumerate() {
        fs::write(dir.join(format!("imgs/{k}.jpg")), b).unwrap();
    }
    (tmp, dir, imgs)
}

#[test]
fn jsonl_lists_of_image_paths_become_lists_of_images() {
    let (tmp, dir, imgs) = jsonl_images();
    fs::write(dir.join("imgs/fake.png"), b"not a png at all").unwrap();
    let lines = [
        r#"{"text": "two", "images": ["imgs/0.jpg", "imgs/1.jpg"]}"#,
        r#"{"text": "none", "images": []}"#,
        r#"{"text": "gone", "images": ["imgs/2.jpg", "imgs/missing.jpg"]}"#,
        r#"{"text": "three", "images": ["imgs/2.jpg", "imgs/0.jpg", "imgs/2.jpg"]}"#,
        r#"{"text": "fake", "images": ["imgs/fake.png"]}"#,
        r#"{"text": "null", "images": null}"#,
    ];
    let src = dir.join("rows.jsonl");
    fs::write(&src, lines.join("\n")).unwrap();
    let (r, ds) = pack_as_given(&src, &tmp.path().join("o"), None);
    assert_eq!(
        ds.schema().to_string(),
        "text: string, images: list:image:auto"
    );
    let skipped = skipped(&r);
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    // a missing file: the line, the item and the path
    assert!(
        skipped[0].contains("rows.jsonl:3")
            && skipped[0].contains("item 1")
            && skipped[0].contains("imgs/missing.jpg"),
        "{skipped:?}"
    );
    assert!(
        skipped[1].contains("rows.jsonl:5") && skipped[1].contains("imgs/fake.png"),
        "{skipped:?}"
    );
    assert_eq!(ds.len(), 4);
    // a null where most lines list images: an empty list (as a missing key would be)
    assert_eq!(ds.get(3).unwrap()[1], images(&[]));
    assert_eq!(ds.get(0).unwrap()[1], images(&[&imgs[0], &imgs[1]]));
    assert_eq!(ds.get(1).unwrap()[1], images(&[]));
    assert_eq!(
        ds.get(2).unwrap()[1],
        images(&[&imgs[2], &imgs[0], &imgs[2]])
    );
    assert_eq!(
        sizes(&ds, "images", 2),
        Some(vec![(5, 7), (40, 30), (5, 7)])
    );
    // a list of strings that are not all image names stays json
    let other = dir.join("other.jsonl");
    fs::write(
        &other,
        "{\"text\": \"a\", \"images\": [\"imgs/0.jpg\", \"notes.txt\"]}\n",
    )
    .unwrap();
    let (_, ds) = pack_as_given(&other, &tmp.path().join("p"), None);
    assert_eq!(ds.schema().to_string(), "text: string, images: json");
}

fn tar_of(path: &Path, members: &[(&str, &[u8])]) {
    let mut b = tar::Builder::new(fs::File::create(path).unwrap());
    for (name, data) in members {
        let mut h = tar::Header::new_ustar();
        h.set_path(name).unwrap();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.finish().unwrap();
}

#[test]
fn webdataset_numbered_image_members_become_one_list_in_numeric_order() {
    let tmp = tempfile::tempdir().unwrap();
    let imgs: Vec<Vec<u8>> = (0..4).map(|k| jpeg(8 + 4 * k, 8, u64::from(k))).collect();
    let src = tmp.path().join("shard-000.tar");
    tar_of(
        &src,
        &[
            ("s0.0.jpg", &imgs[0]),
            ("s0.1.jpg", &imgs[1]),
            ("s0.txt", b"two"),
            ("s1.txt", b"text only"),
            // numeric order, not the archive's, not the names'
            ("s2.10.jpg", &imgs[3]),
            ("s2.1.jpg", &imgs[2]),
            ("s2.0.jpg", &imgs[0]),
            ("s2.txt", b"three"),
            ("s3.0.jpg", &imgs[1]),
            ("s3.1.jpg", b"not an image"),
            ("s3.txt", b"bad"),
            ("s4.img.0.jpg", &imgs[2]),
            ("s4.0.jpg", &imgs[1]),
            ("s4.txt", b"one"),
        ],
    );
    let (r, ds) = pack_as_given(&src, &tmp.path().join("o"), None);
    assert_eq!(
        ds.schema().to_string(),
        "__key__: string, images: list:image:auto, txt: string"
    );
    let skipped = skipped(&r);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert!(
        skipped[0].contains("s3.0.jpg") && skipped[0].contains("member .1.jpg (item 1"),
        "{skipped:?}"
    );
    // (.img.N members, in fewer than half the samples, are left out, with a note)
    assert!(r.notes.join(" ").contains("member .img"), "{:?}", r.notes);
    let got: Vec<Vec<FieldValue<'static>>> = (0..ds.len()).map(|i| ds.get(i).unwrap()).collect();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0][1], images(&[&imgs[0], &imgs[1]]));
    assert_eq!(got[1][1], images(&[]));
    assert_eq!(got[2][1], images(&[&imgs[0], &imgs[2], &imgs[3]]));
    assert_eq!(got[3][1], images(&[&imgs[1]]));
    assert_eq!(
        sizes(&ds, "images", 2),
        Some(vec![(8, 8), (16, 8), (20, 8)])
    );
    // read in place: the same fields and lists (the bad item is read as it is: decoding it
    // fails later, as a single image's would)
    let o = InPlaceOptions {
        index_dir: Some(tmp.path().join("idx")),
        ..InPlaceOptions::default()
    };
    let inplace = open(std::slice::from_ref(&src), OpenOptions::default(), &o).unwrap();
    assert_eq!(inplace.schema(), ds.schema());
    assert_eq!(inplace.len(), 5);
    for (i, p) in [(0, 0), (1, 1), (2, 2), (4, 3)] {
        assert_eq!(inplace.get(i).unwrap(), got[p], "{i}");
    }
    assert_eq!(
        inplace.get(3).unwrap()[1],
        images(&[&imgs[1], b"not an image"])
    );
    // the sizes are read from the images' headers by the scan; an image without one (sample 3)
    // leaves the file's sizes unknown
    assert_eq!(inplace.image_sizes("images", 0).unwrap(), None);
    let good = tmp.path().join("good.tar");
    tar_of(
        &good,
        &[
            ("a.1.png", &imgs[1]),
            ("a.0.jpg", &imgs[0]),
            ("a.txt", b"x"),
            ("b.txt", b"y"),
        ],
    );
    let g = open(std::slice::from_ref(&good), OpenOptions::default(), &o).unwrap();
    // (images 0 and 1: 8 × 8 and 12 × 8, in the numbers' order)
    assert_eq!(sizes(&g, "images", 0), Some(vec![(8, 8), (12, 8)]));
    assert_eq!(sizes(&g, "images", 1), Some(vec![]));
    assert_eq!(g.get(0).unwrap()[0], FieldValue::String("a".into()));
}

#[test]
fn parquet_image_lists_read_in_place_are_what_pack_makes_of_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, imgs) = hf_file(tmp.path());
    let (_, packed) = pack_as_given(&src, &tmp.path().join("o"), Some("images?,raw,tags"));
    let o = InPlaceOptions {
        index_dir: Some(tmp.path().join("idx")),
        fields: Some(FieldChoice::parse_list("images?,raw,tags").unwrap()),
        ..InPlaceOptions::default()
    };
    let ds = open(std::slice::from_ref(&src), OpenOptions::default(), &o).unwrap();
    assert_eq!(ds.schema(), packed.schema());
    assert_eq!(ds.len(), 5);
    // in place an item given only by its path is not read (row 2), and the bad item (row 3)
    // makes a corrupt sample, named; the others are pack's
    assert_eq!(ds.get(0).unwrap(), packed.get(0).unwrap());
    assert_eq!(ds.get(1).unwrap(), packed.get(1).unwrap());
    assert_eq!(ds.get(4).unwrap(), packed.get(3).unwrap());
    assert_eq!(ds.get(0).unwrap()[1], FieldValue::List(vec![]));
    assert_eq!(ds.get(0).unwrap()[0], images(&[&imgs[0], &imgs[1]]));
    for i in [2, 3] {
        let e = ds.get(i).unwrap_err().to_string();
        assert!(
            e.contains("could not be decoded when the file was indexed"),
            "{e}"
        );
    }
    let notes = ds.manifest().source["notes"].to_string();
    assert!(
        notes.contains("row 1 of row group 1: column \\\"images\\\": item 1"),
        "{notes}"
    );
    // the sizes, read from the images' headers in the index when the file is opened: pack's
    // (a damaged row has none)
    for (i, p) in [(0, 0), (1, 1), (4, 3)] {
        assert_eq!(sizes(&ds, "images", i), sizes(&packed, "images", p), "{i}");
        assert_eq!(sizes(&ds, "raw", i), sizes(&packed, "raw", p), "{i}");
    }
    assert_eq!(sizes(&ds, "images", 0), Some(vec![(64, 48), (17, 33)]));
    assert_eq!(sizes(&ds, "images", 3), Some(vec![]));
    // opened again from the kept index: the same
    let again = open(std::slice::from_ref(&src), OpenOptions::default(), &o).unwrap();
    assert_eq!(sizes(&again, "raw", 1), Some(vec![(64, 48)]));
    assert!(ds.image_sizes("tags", 0).is_err());
}

#[test]
fn jsonl_image_paths_read_in_place_are_what_pack_makes_of_them() {
    let (tmp, dir, imgs) = jsonl_images();
    // an absolute path outside the JSONL file's folder is read as given
    let outside = tmp.path().join("elsewhere.jpg");
    fs::write(&outside, &imgs[1]).unwrap();
    let lines = [
        r#"{"text": "two", "images": ["imgs/0.jpg", "imgs/1.jpg"]}"#.to_string(),
        r#"{"text": "none", "images": []}"#.to_string(),
        r#"{"text": "gone", "images": ["imgs/2.jpg", "imgs/missing.jpg"]}"#.to_string(),
        format!(
            r#"{{"text": "abs", "images": ["imgs/2.jpg", {:?}]}}"#,
            outside.display().to_string()
        ),
    ];
    let src = dir.join("rows.jsonl");
    fs::write(&src, lines.join("\n\n")).unwrap();
    let (_, packed) = pack_as_given(&src, &tmp.path().join("o"), None);
    let o = InPlaceOptions {
        index_dir: Some(tmp.path().join("idx")),
        ..InPlaceOptions::default()
    };
    let ds = open(std::slice::from_ref(&src), OpenOptions::default(), &o).unwrap();
    assert_eq!(ds.schema(), packed.schema());
    assert_eq!(
        ds.schema().to_string(),
        "text: string, images: list:image:auto"
    );
    assert_eq!(ds.len(), 4);
    for (i, p) in [(0, 0), (1, 1), (3, 2)] {
        assert_eq!(ds.get(i).unwrap(), packed.get(p).unwrap(), "{i}");
        assert_eq!(sizes(&ds, "images", i), sizes(&packed, "images", p), "{i}");
    }
    assert_eq!(ds.get(3).unwrap()[1], images(&[&imgs[2], &imgs[1]]));
    assert_eq!(sizes(&ds, "images", 0), Some(vec![(40, 30), (10, 20)]));
    // a missing file: the sample is an error naming the file, the line and the path (line 5:
    // blank lines between), and the scan's note says so; it lists no images in the table
    let e = ds.get(2).unwrap_err().to_string();
    assert!(
        e.contains("rows.jsonl") && e.contains("line 5") && e.contains("imgs/missing.jpg"),
        "{e}"
    );
    let notes = ds.manifest().source["notes"].to_string();
    assert!(
        notes.contains("line 5 (sample 2)") && notes.contains("imgs/missing.jpg"),
        "{notes}"
    );
    assert_eq!(sizes(&ds, "images", 2), Some(vec![]));
    // opened again from the kept index (no image read for the sizes): the same
    fs::remove_file(dir.join("imgs/0.jpg")).unwrap();
    let again = open(std::slice::from_ref(&src), OpenOptions::default(), &o).unwrap();
    assert_eq!(sizes(&again, "images", 0), Some(vec![(40, 30), (10, 20)]));
    assert!(again.get(0).unwrap_err().to_string().contains("imgs/0.jpg"));
    // one field of a line alone (a conversation, for planning): the files it lists are not read
    assert_eq!(
        again.field_from_prefix(0, 0, 16).unwrap(),
        Some(FieldValue::String("two".into()))
    );
}
