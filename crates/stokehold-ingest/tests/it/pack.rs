//! The packer, end to end, for every source kind (rows A5/A6/B1–B3 of the reliability matrix where
//! they concern packing).

use std::fs;
use std::path::{Path, PathBuf};

use stokehold_format::{FieldType, FieldValue};
use stokehold_ingest::example::{Example, Feature, encode_example};
use stokehold_ingest::sample_data::{SampleSpec, write_image_folder};
use stokehold_ingest::tfrecord::write_record;
use stokehold_ingest::{NoProgress, PackError, PackOptions, SourceKind, pack};
use stokehold_storage::Dataset;

fn small_images(dir: &Path, n: usize, classes: usize) {
    let spec = SampleSpec {
        images: n,
        classes,
        width: 24,
        height: 16,
        quality: 80,
        seed: 7,
    };
    write_image_folder(dir, spec).unwrap();
}

use crate::common;
use common::{jpeg, packed, tree};

/// These tests pack a few inputs with bad ones among them on purpose: any share may be skipped
/// (the skip limit has its own tests).
fn opts(threads: usize) -> PackOptions {
    PackOptions {
        threads,
        max_skip_fraction: 1.0,
        ..PackOptions::default()
    }
}

#[test]
fn image_folder_packs_labels_paths_and_original_bytes_identically_on_any_thread_count() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("train");
    small_images(&src, 60, 4);
    fs::create_dir_all(src.join("class_002/nested")).unwrap();
    fs::copy(
        src.join("class_002/000002.jpg"),
        src.join("class_002/nested/extra.jpg"),
    )
    .unwrap();
    fs::write(src.join("class_001/notes.txt"), b"not an image").unwrap();
    fs::write(src.join("class_003/empty.jpg"), b"").unwrap();
    fs::write(src.join("class_003/.DS_Store"), b"hidden").unwrap();
    let mut o = opts(1);
    o.write.target_shard_bytes = 8 << 10;
    let r1 = pack(
        std::slice::from_ref(&src),
        &tmp.path().join("a"),
        None,
        &o,
        &NoProgress,
    )
    .unwrap();
    o.threads = 2;
    let r2 = pack(
        std::slice::from_ref(&src),
        &tmp.path().join("b"),
        Some(SourceKind::ImageFolder),
        &o,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(r1.kind, SourceKind::ImageFolder);
    assert_eq!(
        tree(&tmp.path().join("a")),
        tree(&tmp.path().join("b")),
        "same bytes on 1 and 2 threads"
    );
    assert_eq!(r1.manifest.total_records, 61);
    assert!(r1.manifest.shards.len() > 3);
    let skipped: Vec<&str> = r1.skipped.iter().map(|s| s.input.as_str()).collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped[0].ends_with("class_001/notes.txt") && skipped[1].ends_with("class_003/empty.jpg")
    );
    assert_eq!(r2.skipped, r1.skipped);
    let listed = fs::read_to_string(tmp.path().join("a/skipped.txt")).unwrap();
    assert!(listed.contains("notes.txt\tnot an image"), "{listed}");

    let ds = Dataset::open(tmp.path().join("a")).unwrap();
    assert_eq!(
        ds.classes().unwrap(),
        ["class_000", "class_001", "class_002", "class_003"]
    );
    assert_eq!(
        ds.schema().to_string(),
        "image: image:auto, label: int64, path: string"
    );
    for i in 0..ds.len() {
        let v = ds.get(i).unwrap();
        let FieldValue::String(rel) = &v[2] else {
            panic!("path")
        };
        let FieldValue::Image(bytes) = &v[0] else {
            panic!("image")
        };
        assert_eq!(
            bytes.as_ref(),
            packed(&fs::read(src.join(rel.as_ref())).unwrap()),
            "bytes stored as given, with restart markers added losslessly"
        );
        let class: i64 = rel[6..9].parse().unwrap();
        assert_eq!(v[1], FieldValue::Int64(class), "{rel}");
    }
}

#[test]
fn strict_makes_the_first_bad_file_fatal_and_leaves_no_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("train");
    small_images(&src, 10, 2);
    fs::write(
        src.join("class_001/broken.jpg"),
        [0xFF, 0xD8, 0xFF, 0xE0, 0, 2],
    )
    .unwrap();
    let o = PackOptions {
        strict: true,
        ..PackOptions::default()
    };
    let dest = tmp.path().join("out");
    let err = pack(&[src], &dest, None, &o, &NoProgress).unwrap_err();
    assert!(matches!(err, PackError::Strict(_)));
    let msg = err.to_string();
    assert!(
        msg.contains("class_001/broken.jpg") && msg.contains("corrupt JPEG"),
        "{msg}"
    );
    assert!(!dest.exists());
    let left: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["train"], "no staging directory left");
}

#[test]
fn folder_without_classes_has_no_label_field() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("flat");
    fs::create_dir(&src).unwrap();
    for i in 0..3 {
        fs::write(src.join(format!("{i}.jpg")), jpeg(i)).unwrap();
    }
    let r = pack(&[src], &tmp.path().join("o"), None, &opts(2), &NoProgress).unwrap();
    assert_eq!(
        r.manifest.schema.to_string(),
        "image: image:auto, path: string"
    );
    assert!(r.manifest.classes.is_none());
    assert_eq!(r.manifest.total_records, 3);
}

#[test]
fn jsonl_columns_become_typed_fields_and_bad_rows_are_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir(tmp.path().join("img")).unwrap();
    for i in 0..4 {
        fs::write(tmp.path().join(format!("img/{i}.jpg")), jpeg(i)).unwrap();
    }
    let lines = [
        r#"{"path": "img/0.jpg", "label": 3, "score": 0.5, "caption": "a cat", "meta": {"k": [1, 2]}}"#,
        r#"{"path": "img/1.jpg", "label": 1, "score": 2, "caption": "a dog", "meta": null}"#,
        r#"{"path": "img/2.jpg", "label": 2, "score": 1.25, "caption": "a cow", "meta": [1]}"#,
        r#"{"path": "img/missing.jpg", "label": 0, "score": 0.0, "caption": "gone", "meta": 1}"#,
        r#"not json"#,
        r#"{"path": "img/3.jpg", "score": 1.0, "caption": "no label", "meta": 2}"#,
        "",
    ];
    let src = tmp.path().join("data.jsonl");
    fs::write(&src, lines.join("\n")).unwrap();
    let r = pack(
        std::slice::from_ref(&src),
        &tmp.path().join("o"),
        None,
        &opts(2),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(r.kind, SourceKind::Jsonl);
    let ds = Dataset::open(tmp.path().join("o")).unwrap();
    assert_eq!(
        ds.schema().to_string(),
        "image: image:auto, path: string, caption: string, label: int64, meta: string, score: float64"
    );
    // row 2 (meta null), the missing file, the invalid line and the row without a label are skipped
    assert_eq!(ds.len(), 2);
    let reasons: Vec<String> = r
        .skipped
        .iter()
        .map(|s| format!("{} {}", s.input, s.reason))
        .collect();
    assert_eq!(reasons.len(), 4, "{reasons:#?}");
    assert!(
        reasons
            .iter()
            .any(|s| s.contains("data.jsonl:5") && s.contains("invalid JSON")),
        "{reasons:#?}"
    );
    assert!(
        reasons
            .iter()
            .any(|s| s.contains("missing.jpg") && s.contains("unreadable")),
        "{reasons:#?}"
    );
    let v = ds.get(0).unwrap();
    assert_eq!(v[0], FieldValue::Image(packed(&jpeg(0)).into()));
    assert_eq!(v[2], FieldValue::String("a cat".into()));
    assert_eq!(v[3], FieldValue::Int64(3));
    assert_eq!(v[4], FieldValue::String(r#"{"k":[1,2]}"#.into()));
    assert_eq!(v[5], FieldValue::Float64(0.5));
    assert_eq!(ds.get(1).unwrap()[5], FieldValue::Float64(1.25));
}

#[test]
fn csv_infers_column_types_and_non_images_become_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("a.bin"), b"\x00\x01binary").unwrap();
    fs::write(tmp.path().join("b.bin"), b"more").unwrap();
    let src = tmp.path().join("t.csv");
    fs::write(
        &src,
        "file,label,weight,name\na.bin,1,0.5,first\nb.bin,2,3,\"sec,ond\"\n",
    )
    .unwrap();
    pack(&[src], &tmp.path().join("o"), None, &opts(1), &NoProgress).unwrap();
    let ds = Dataset::open(tmp.path().join("o")).unwrap();
    assert_eq!(
        ds.schema().to_string(),
        "data: bytes, file: string, label: int64, weight: float64, name: string"
    );
    let v = ds.get(1).unwrap();
    assert_eq!(v[0], FieldValue::Bytes(b"more".to_vec().into()));
    assert_eq!(v[2], FieldValue::Int64(2));
    assert_eq!(v[3], FieldValue::Float64(3.0));
    assert_eq!(v[4], FieldValue::String("sec,ond".into()));
}

fn tar_with(path: &Path, build: impl FnOnce(&mut tar::Builder<fs::File>)) {
    let mut b = tar::Builder::new(fs::File::create(path).unwrap());
    build(&mut b);
    b.finish().unwrap();
}

fn add(b: &mut tar::Builder<fs::File>, name: &str, data: &[u8]) {
    // The name is set as raw bytes: the tar crate refuses to write `..` names, which is exactly
    // what these tests need archives to hold.
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

#[test]
fn webdataset_groups_members_refuses_links_and_never_touches_pickles() {
    let tmp = tempfile::tempdir().unwrap();
    let t1 = tmp.path().join("shard-0.tar");
    let t2 = tmp.path().join("shard-1.tar");
    tar_with(&t1, |b| {
        for i in 0..3 {
            add(b, &format!("s/{i:03}.jpg"), &jpeg(i));
            add(
                b,
                &format!("s/{i:03}.cls"),
                format!("{}\n", i * 10).as_bytes(),
            );
            add(
                b,
                &format!("s/{i:03}.txt"),
                format!("caption {i}").as_bytes(),
            );
            add(
                b,
                &format!("s/{i:03}.pyd"),
                b"cos\nsystem\n(S'touch /tmp/pwned'\ntR.",
            );
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_cksum();
        b.append_link(&mut h, "s/004.jpg", "/etc/passwd").unwrap();
    });
    tar_with(&t2, |b| {
        add(b, "../evil/005.jpg", &jpeg(5));
        add(b, "../evil/005.cls", b"50");
        add(b, "../evil/005.txt", b"escaped");
        add(b, "006.jpg", &jpeg(6));
        add(b, "006.cls", b"not a number");
        add(b, "006.txt", b"bad label");
        add(b, "007.jpg", &jpeg(7));
        add(b, "007.txt", b"no cls");
    });
    let before: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let r = pack(
        &[t1.clone(), t2.clone()],
        &tmp.path().join("o"),
        None,
        &opts(2),
        &NoProgress,
    )
    .unwrap();
    assert_eq!(r.kind, SourceKind::WebDataset);
    let ds = Dataset::open(tmp.path().join("o")).unwrap();
    assert_eq!(
        ds.schema().to_string(),
        "__key__: string, cls: int64, jpg: image:auto, txt: string"
    );
    assert_eq!(ds.len(), 4);
    let keys: Vec<FieldValue<'_>> = (0..4).map(|i| ds.get(i).unwrap().swap_remove(0)).collect();
    assert_eq!(
        keys,
        ["s/000", "s/001", "s/002", "../evil/005"].map(|k| FieldValue::String(k.into()))
    );
    assert_eq!(ds.get(2).unwrap()[1], FieldValue::Int64(20));
    assert_eq!(ds.get(3).unwrap()[3], FieldValue::String("escaped".into()));
    let reasons: Vec<String> = r
        .skipped
        .iter()
        .map(|s| format!("{}: {}", s.input, s.reason))
        .collect();
    assert_eq!(reasons.len(), 3, "{reasons:#?}");
    assert!(
        reasons[0].contains("Symlink members are refused"),
        "{reasons:#?}"
    );
    assert!(
        reasons[1].contains("\"006.jpg\"") && reasons[1].contains("not a decimal integer"),
        "{reasons:#?}"
    );
    assert!(reasons[2].contains("no .cls member"), "{reasons:#?}");
    assert!(
        r.notes.iter().any(|n| n.contains("3 pickle members")),
        "{:?}",
        r.notes
    );
    // nothing was written anywhere from member names
    let mut after: Vec<_> = fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    after.retain(|n| n != "o");
    assert_eq!(before.len(), after.len());
    assert!(
        !tmp.path().join("evil").exists() && !tmp.path().parent().unwrap().join("evil").exists()
    );

    let keep = PackOptions {
        keep_pickle: true,
        ..opts(1)
    };
    pack(&[t1], &tmp.path().join("p"), None, &keep, &NoProgress).unwrap();
    let ds = Dataset::open(tmp.path().join("p")).unwrap();
    assert_eq!(ds.schema().fields[3].name, "pyd");
    assert_eq!(
        ds.schema().fields[3].ty,
        FieldType::Bytes,
        "kept as opaque bytes"
    );
}

fn tfrecord_file(path: &Path, examples: &[Example]) -> Vec<u64> {
    let mut f = fs::File::create(path).unwrap();
    let mut offsets = Vec::new();
    let mut pos = 0u64;
    for e in examples {
        offsets.push(pos);
        let bytes = encode_example(e);
        write_record(&mut f, &bytes).unwrap();
        pos += 16 + bytes.len() as u64;
    }
    offsets
}

fn example(i: u64, boxes: usize) -> Example {
    Example::from_features([
        ("image/encoded", Feature::bytes([jpeg(i)])),
        ("image/class/label", Feature::int64s(vec![i as i64])),
        (
            "image/class/text",
            Feature::bytes([format!("class {i}").into_bytes()]),
        ),
        ("image/object/bbox/xmin", Feature::floats(vec![0.25; boxes])),
        ("weight", Feature::floats(vec![i as f32 * 0.5])),
    ])
}

#[test]
fn ragged_tfrecord_features_are_optional_left_out_or_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ragged.tfrecord");
    // every record: an image and a weight; 7 of 10 boxes (an array: empty where missing),
    // 1 of 10 a caption (left out), 8 of 10 a label (an integer: records without it skipped)
    let examples: Vec<Example> = (0..10u64)
        .map(|i| {
            let mut f = vec![
                ("image/encoded", Feature::bytes([jpeg(i)])),
                ("weight", Feature::floats(vec![0.5])),
            ];
            if i < 7 {
                f.push(("bbox", Feature::floats(vec![0.25; 1 + i as usize % 3])));
            }
            if i == 4 {
                f.push(("caption", Feature::bytes([b"rare".to_vec()])));
            }
            if i < 8 {
                f.push(("label", Feature::int64s(vec![i as i64])));
            }
            Example::from_features(f)
        })
        .collect();
    tfrecord_file(&path, &examples);
    let src = std::slice::from_ref(&path);
    let err = pack(
        src,
        &tmp.path().join("a"),
        None,
        &PackOptions::default(),
        &NoProgress,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            PackError::TooManySkipped {
                skipped: 2,
                inputs: 10,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("feature \"label\" is missing"),
        "{err}"
    );
    assert!(!tmp.path().join("a").exists());

    let r = pack(src, &tmp.path().join("b"), None, &opts(1), &NoProgress).unwrap();
    let ds = Dataset::open(tmp.path().join("b")).unwrap();
    assert_eq!(
        ds.schema().to_string(),
        "bbox: ndarray:f32, image/encoded: image:auto, label: int64, weight: float64"
    );
    assert_eq!((ds.len(), r.skipped.len()), (8, 2));
    assert_eq!(ds.manifest().source["empty_where_missing"]["bbox"], 3);
    let FieldValue::Array(a) = &ds.get(7).unwrap()[0] else {
        panic!("an array")
    };
    assert_eq!(a.shape, [0]);
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("feature \"caption\" (1 of 10 samples)")),
        "{:?}",
        r.notes
    );

    // --fields: the label optional is refused (an integer has no empty value); without it all pack
    let fields = |spec: &str| PackOptions {
        fields: Some(stokehold_ingest::FieldChoice::parse_list(spec).unwrap()),
        ..PackOptions::default()
    };
    let e = pack(
        src,
        &tmp.path().join("c"),
        None,
        &fields("image/encoded,label?"),
        &NoProgress,
    )
    .unwrap_err();
    assert!(e.to_string().contains("cannot be optional"), "{e}");
    pack(
        src,
        &tmp.path().join("d"),
        None,
        &fields("image/encoded,caption?"),
        &NoProgress,
    )
    .unwrap();
    let ds = Dataset::open(tmp.path().join("d")).unwrap();
    assert_eq!(ds.len(), 10);
    assert_eq!(ds.get(4).unwrap()[1], FieldValue::String("rare".into()));
    assert_eq!(ds.get(5).unwrap()[1], FieldValue::String("".into()));
}

#[test]
fn tfrecord_features_become_fields_and_crc_errors_are_reported_with_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tfr");
    fs::create_dir(&dir).unwrap();
    let examples: Vec<Example> = (0..5).map(|i| example(i, (i % 3) as usize)).collect();
    tfrecord_file(&dir.join("train-00000-of-00002"), &examples[..3]);
    let offsets = tfrecord_file(&dir.join("train-00001-of-00002"), &examples[3..]);
    // corrupt the data of the second record of the second file
    let p = dir.join("train-00001-of-00002");
    let mut b = fs::read(&p).unwrap();
    let at = offsets[1] as usize + 12 + 5;
    b[at] ^= 0xFF;
    fs::write(&p, b).unwrap();

    let r = pack(
        std::slice::from_ref(&dir),
        &tmp.path().join("o"),
        Some(SourceKind::TfRecord),
        &opts(2),
        &NoProgress,
    )
    .unwrap();
    let ds = Dataset::open(tmp.path().join("o")).unwrap();
    assert_eq!(
        ds.schema().to_string(),
        "image/class/label: int64, image/class/text: string, image/encoded: image:auto, image/object/bbox/xmin: ndarray:f32, weight: float64"
    );
    assert_eq!(ds.len(), 4);
    assert_eq!(r.skipped.len(), 1);
    assert!(r.skipped[0].input.ends_with("train-00001-of-00002"));
    assert!(
        r.skipped[0].reason.contains(&format!("{}", offsets[1])),
        "{:?}",
        r.skipped[0]
    );
    let v = ds.get(2).unwrap();
    assert_eq!(v[0], FieldValue::Int64(2));
    assert_eq!(v[1], FieldValue::String("class 2".into()));
    assert_eq!(v[2], FieldValue::Image(packed(&jpeg(2)).into()));
    let FieldValue::Array(a) = &v[3] else {
        panic!("array")
    };
    assert_eq!(a.shape, [2]);
    assert_eq!(v[4], FieldValue::Float64(1.0));

    let strict = PackOptions {
        strict: true,
        ..opts(1)
    };
    let err = pack(
        &[dir],
        &tmp.path().join("s"),
        Some(SourceKind::TfRecord),
        &strict,
        &NoProgress,
    )
    .unwrap_err();
    assert!(err.to_string().contains("train-00001-of-00002"), "{err}");
}

#[test]
fn detection_by_name_and_clear_errors_for_mixtures() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| -> PathBuf { tmp.path().join(n) };
    assert_eq!(
        stokehold_ingest::detect(&[p("a.jsonl")]).unwrap(),
        SourceKind::Jsonl
    );
    assert_eq!(
        stokehold_ingest::detect(&[p("a.tar"), p("b.tar")]).unwrap(),
        SourceKind::WebDataset
    );
    assert_eq!(
        stokehold_ingest::detect(&[p("x.tfrecord")]).unwrap(),
        SourceKind::TfRecord
    );
    assert!(stokehold_ingest::detect(&[p("a.tar"), p("b.csv")]).is_err());
    assert!(stokehold_ingest::detect(&[p("a.bin")]).is_err());
    fs::write(p("a.tar"), b"").unwrap();
    assert_eq!(
        stokehold_ingest::detect(&[tmp.path().to_path_buf()]).unwrap(),
        SourceKind::WebDataset
    );
    // TFRecord files named as ImageNet's are (no extension) are told by their first bytes; a
    // folder of other extension-less files stays an image folder
    let bare = p("bare");
    fs::create_dir_all(&bare).unwrap();
    fs::write(bare.join("README"), b"some notes, not records").unwrap();
    let detect = || stokehold_ingest::detect(std::slice::from_ref(&bare)).unwrap();
    assert_eq!(detect(), SourceKind::ImageFolder);
    fs::remove_file(bare.join("README")).unwrap();
    let mut f = fs::File::create(bare.join("train-00000-of-00001")).unwrap();
    write_record(&mut f, b"an example").unwrap();
    drop(f);
    assert_eq!(detect(), SourceKind::TfRecord);
}

#[test]
fn baseline_transcode_is_lossless_and_max_side_is_recorded() {
    use stokehold_ingest::ImagePolicy;
    use stokehold_ops::jpeg::{Decoder, Pixels, Scale};
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("imgs");
    fs::create_dir_all(src.join("a")).unwrap();
    let px: Vec<u8> = (0..120 * 90 * 3).map(|k| ((k * 31) % 251) as u8).collect();
    for (i, progressive) in [(0, true), (1, false), (2, true)] {
        let mut out = Vec::new();
        let mut e = jpeg_encoder::Encoder::new(&mut out, 90);
        e.set_progressive(progressive);
        e.encode(&px, 120, 90, jpeg_encoder::ColorType::Rgb)
            .unwrap();
        fs::write(src.join(format!("a/{i}.jpg")), out).unwrap();
    }
    let decode = |b: &[u8]| {
        let mut d = Decoder::new().unwrap();
        let mut p = Pixels {
            width: 0,
            height: 0,
            channels: 3,
            data: Vec::new(),
        };
        d.decode(b, Scale::FULL, None, false, 1 << 30, &mut p)
            .unwrap();
        (d.header(b).unwrap().progressive, p)
    };
    // pack the folder into tmp/NAME with `images`; the dataset is opened too
    let pack_with = |name: &str, images: ImagePolicy| {
        let o = PackOptions { images, ..opts(2) };
        let dest = tmp.path().join(name);
        let r = pack(std::slice::from_ref(&src), &dest, None, &o, &NoProgress).unwrap();
        (r, Dataset::open(dest).unwrap())
    };
    let image = |ds: &Dataset, i: u64| match &ds.get(i).unwrap()[0] {
        FieldValue::Image(b) => b.to_vec(),
        v => panic!("{v:?}"),
    };
    let (r, ds) = pack_with(
        "b",
        ImagePolicy {
            baseline: true,
            restart_markers: false,
            ..ImagePolicy::default()
        },
    );
    assert_eq!((r.progressive_jpegs, r.transcoded_to_baseline), (2, 2));
    assert_eq!(r.manifest.source["restart_markers"], false);
    assert_eq!(r.manifest.source["transcoded_to_baseline"], 2);
    for i in 0..3 {
        let b = &image(&ds, i);
        let (progressive, pixels) = decode(b);
        assert!(!progressive, "sample {i} is baseline now");
        let original = fs::read(src.join(format!("a/{i}.jpg"))).unwrap();
        assert_eq!(pixels, decode(&original).1, "sample {i}: same pixels");
    }
    let (r, ds) = pack_with(
        "m",
        ImagePolicy {
            max_side: Some(60),
            ..ImagePolicy::default()
        },
    );
    assert_eq!(r.resized, 3);
    assert_eq!(r.manifest.source["max_side"], 60);
    let b = &image(&ds, 0);
    let (_, p) = decode(b);
    assert_eq!((p.width, p.height), (60, 45));
    // without restart markers (`--no-restart-markers`) the bytes are kept exactly as given
    let (r, ds) = pack_with(
        "p",
        ImagePolicy {
            restart_markers: false,
            ..ImagePolicy::default()
        },
    );
    assert_eq!(r.manifest.source["restart_markers"], false);
    assert!(r.manifest.source.get("kept_as_is").is_none());
    for i in 0..3 {
        let original = fs::read(src.join(format!("a/{i}.jpg"))).unwrap();
        assert_eq!(image(&ds, i), original, "sample {i} as given");
    }
    // restart markers (the default): every JPEG rewritten losslessly, indexable, same pixels
    let restart = ImagePolicy::default();
    assert!(restart.restart_markers, "restart markers are the default");
    let (r, ds) = pack_with("r", restart);
    assert_eq!(r.manifest.source["restart_markers"], true);
    assert_eq!(r.transcoded_to_baseline, 2, "the progressive ones");
    for i in 0..3 {
        let b = &image(&ds, i);
        assert!(
            stokehold_ops::restart::RestartIndex::parse(b).is_some(),
            "sample {i} has row-aligned restart markers"
        );
        let original = fs::read(src.join(format!("a/{i}.jpg"))).unwrap();
        assert_eq!(decode(b).1, decode(&original).1, "sample {i}: same pixels");
    }
    // a JPEG whose header is fine but whose data is cut short fails the lossless rewrite (it
    // stops at libjpeg's first warning): kept as given, counted and listed by file, not dropped
    let good = fs::read(src.join("a/1.jpg")).unwrap();
    let cut = &good[..good.len() / 2];
    fs::write(src.join("a/3.jpg"), cut).unwrap();
    let (r, ds) = pack_with("t", restart);
    assert_eq!(r.manifest.total_records, 4);
    assert!(r.skipped.is_empty(), "{:?}", r.skipped);
    assert_eq!(r.kept_as_is.len(), 1, "{:?}", r.kept_as_is);
    let k = &r.kept_as_is[0];
    assert!(k.input.ends_with("3.jpg"), "{k:?}");
    assert!(
        k.reason.contains("\"image\"") && k.reason.contains("restart markers failed"),
        "{k:?}"
    );
    assert_eq!(r.manifest.source["kept_as_is"], 1);
    assert_eq!(image(&ds, 3), cut);
    let listed = fs::read_to_string(tmp.path().join("t/kept-as-is.txt")).unwrap();
    assert!(listed.contains("3.jpg\tfield \"image\""), "{listed}");
    // a lossy size cap must decode the image: one that cannot be decoded is skipped, named
    let (r, _) = pack_with(
        "u",
        ImagePolicy {
            max_side: Some(60),
            ..ImagePolicy::default()
        },
    );
    assert_eq!(r.manifest.total_records, 3);
    assert_eq!(r.skipped.len(), 1, "{:?}", r.skipped);
    assert!(
        r.skipped[0].input.ends_with("3.jpg") && r.skipped[0].reason.contains("cannot decode"),
        "{:?}",
        r.skipped[0]
    );
}
