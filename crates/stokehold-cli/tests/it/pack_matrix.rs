//! The pack-input matrix (issue #14, docs/reliability.md "Packing"): the real `stokehold` binary
//! on ragged WebDataset tars, optional fields, images over the pixel limit under every pack
//! option that decodes or transcodes, destinations it must not touch, and URLs; each case checks
//! the exit status and the counts (packed, skipped) against the dataset written.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use stokehold::format::{Dataset, FieldValue};
use stokehold_ingest::sample_data::{SampleSpec, with_declared_size, write_image_folder};

/// What one run of the binary did.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn stokehold(cwd: &Path, args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_stokehold"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `n` small JPEGs.
pub(crate) fn jpegs(n: usize) -> Vec<Vec<u8>> {
    let tmp = tempfile::tempdir().unwrap();
    let spec = SampleSpec {
        images: n,
        classes: 1,
        width: 16,
        height: 12,
        quality: 75,
        seed: 3,
    };
    write_image_folder(tmp.path(), spec).unwrap();
    (0..n)
        .map(|i| fs::read(tmp.path().join(format!("class_000/{i:06}.jpg"))).unwrap())
        .collect()
}

/// A valid 20000×20000 JPEG header on a few kilobytes of data: 400 megapixels, over the default
/// limit of 100.
fn huge(jpeg: &[u8]) -> Vec<u8> {
    with_declared_size(jpeg, 20000, 20000).unwrap()
}

/// A tar of `samples`, each a list of (extension, data).
pub(crate) fn tar(path: &Path, samples: &[Vec<(&str, Vec<u8>)>]) {
    let mut b = tar::Builder::new(fs::File::create(path).unwrap());
    for (i, members) in samples.iter().enumerate() {
        for (ext, data) in members {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, format!("{i:06}.{ext}"), data.as_slice())
                .unwrap();
        }
    }
    b.finish().unwrap();
}

/// Pack `src` into a fresh destination with `args` and check the outcome: `Some((packed,
/// skipped))` for a success whose dataset and report agree, None for a failure (exit 1) that
/// left no dataset. Returns the run and the destination.
fn check(root: &Path, src: &Path, args: &[&str], expect: Option<(u64, u64)>) -> (Run, PathBuf) {
    let dest = root.join(format!("out-{}", fs::read_dir(root).unwrap().count()));
    let mut all = vec!["pack", src.to_str().unwrap(), dest.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = stokehold(root, &all);
    let what = format!("{args:?} on {}: {run:?}", src.display());
    match expect {
        Some((packed, skipped)) => {
            assert_eq!(run.code, 0, "{what}");
            assert!(
                run.stdout.starts_with(&format!("packed {packed} samples")),
                "{what}"
            );
            let listed = if skipped == 0 {
                !run.stdout.contains(" skipped (listed in")
            } else {
                let noun = if skipped == 1 { "input" } else { "inputs" };
                run.stdout.contains(&format!("  {skipped} {noun} skipped"))
            };
            assert!(listed, "{what}");
            let ds = Dataset::open(&dest).unwrap();
            assert_eq!(ds.len(), packed, "{what}");
            assert_eq!(ds.manifest().source["skipped"], skipped, "{what}");
        }
        None => {
            assert_eq!(run.code, 1, "{what}");
            assert!(run.stderr.starts_with("error: "), "{what}");
            assert!(!dest.exists(), "{what}");
        }
    }
    (run, dest)
}

/// Every pack option that decodes or transcodes images, and none.
const IMAGE_OPTIONS: [&[&str]; 5] = [
    &[],
    &["--no-restart-markers"],
    &["--baseline", "--no-restart-markers"],
    &["--max-side", "8"],
    &["--no-restart-markers", "--max-side", "8"],
];

#[test]
fn images_over_the_pixel_limit_are_skipped_and_counted_under_every_option() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let imgs = jpegs(120);
    // an image folder: 120 small JPEGs and one that declares 400 megapixels
    let folder = root.join("folder");
    fs::create_dir(&folder).unwrap();
    for (i, j) in imgs.iter().enumerate() {
        fs::write(folder.join(format!("{i:03}.jpg")), j).unwrap();
    }
    fs::write(folder.join("huge.jpg"), huge(&imgs[0])).unwrap();
    // the same in a WebDataset tar, with labels
    let shards = root.join("shards");
    fs::create_dir(&shards).unwrap();
    let mut samples: Vec<_> = imgs
        .iter()
        .map(|j| vec![("jpg", j.clone()), ("cls", b"1".to_vec())])
        .collect();
    samples.push(vec![("jpg", huge(&imgs[1])), ("cls", b"2".to_vec())]);
    tar(&shards.join("a.tar"), &samples);
    // and in a Parquet file, with labels
    let table = root.join("table.parquet");
    let mut column = imgs.clone();
    column.push(huge(&imgs[2]));
    parquet(&table, &column, &vec![Some("a"); column.len()], 50);

    for src in [&folder, &shards, &table] {
        for options in IMAGE_OPTIONS {
            // 1 of 121 skipped is within the default limit of 1%
            let (run, _) = check(root, src, options, Some((120, 1)));
            assert!(
                run.stdout.contains("over the limit of 100 megapixels"),
                "{run:?}"
            );
        }
        // the limit is the --max-pixels flag: every image has at least 64 pixels
        let (run, _) = check(root, src, &["--max-pixels", "50"], None);
        assert!(
            run.stderr.contains("all 121 inputs were skipped"),
            "{run:?}"
        );
    }
    // a plain pack with a limit above the image's stores it as given (nothing is decoded)
    check(
        root,
        &folder,
        &["--max-pixels", "400000000"],
        Some((121, 0)),
    );
}

/// A Parquet file of an `image` binary column, an int64 `label` (the row number) and a nullable
/// `caption`, in row groups of `group` rows.
fn parquet(path: &Path, images: &[Vec<u8>], captions: &[Option<&str>], group: usize) {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray};
    let batch = RecordBatch::try_from_iter([
        (
            "image",
            Arc::new(BinaryArray::from_iter_values(images)) as ArrayRef,
        ),
        (
            "label",
            Arc::new(Int64Array::from_iter_values(0..images.len() as i64)) as ArrayRef,
        ),
        (
            "caption",
            Arc::new(StringArray::from(captions.to_vec())) as ArrayRef,
        ),
    ])
    .unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_size(group)
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        fs::File::create(path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[test]
fn parquet_packs_by_column_with_fields_and_names_bad_rows_and_row_groups() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let mut imgs = jpegs(200);
    imgs[150] = b"GIF89a: not a format stokehold packs".to_vec();
    let captions: Vec<Option<&str>> = (0..200).map(|i| (i % 50 != 7).then_some("c")).collect();
    let dir = root.join("hf/data");
    fs::create_dir_all(&dir).unwrap();
    parquet(
        &dir.join("train-00000-of-00002.parquet"),
        &imgs[..100],
        &captions[..100],
        30,
    );
    parquet(
        &dir.join("train-00001-of-00002.parquet"),
        &imgs[100..],
        &captions[100..],
        30,
    );
    // the directory is told to be Parquet; 4 null captions are stored empty; the GIF is skipped
    let (run, dest) = check(root, &dir, &[], Some((199, 1)));
    assert!(run.stdout.contains("from parquet"), "{run:?}");
    assert!(
        run.stdout
            .contains("train-00001-of-00002.parquet row 50: column \"image\": not an image"),
        "{run:?}"
    );
    assert!(
        run.stdout
            .contains("4 of 200 samples have no column \"caption\""),
        "{run:?}"
    );
    let ds = Dataset::open(&dest).unwrap();
    assert_eq!(
        ds.schema().to_string(),
        "caption: string, image: image:auto, label: int64"
    );
    assert_eq!(ds.get(7).unwrap()[0], FieldValue::String("".into()));
    assert_eq!(
        ds.get(198).unwrap()[1],
        FieldValue::Image(
            stokehold_ops::jpeg::with_restarts(&imgs[199])
                .unwrap()
                .into()
        )
    );
    assert_eq!(ds.get(198).unwrap()[2], FieldValue::Int64(99));
    // --fields: a required caption skips its 4 nulls too (5 of 200 is over 1%)
    let (run, _) = check(root, &dir, &["--fields", "image,caption"], None);
    assert!(
        run.stderr.contains("5 of 200 inputs were skipped"),
        "{run:?}"
    );
    check(
        root,
        &dir,
        &["--fields", "image,caption", "--max-skip-fraction", "0.05"],
        Some((195, 5)),
    );
    let (run, _) = check(
        root,
        &dir,
        &["--fields", "image,caption?", "--strict"],
        None,
    );
    assert!(
        run.stderr
            .contains("train-00001-of-00002.parquet row 50: column \"image\"")
            && run.stderr.contains("--strict"),
        "{run:?}"
    );
    // a damaged row group fails the pack, naming the file and the row group
    let file = dir.join("train-00000-of-00002.parquet");
    let reader =
        parquet::file::serialized_reader::SerializedFileReader::new(fs::File::open(&file).unwrap())
            .unwrap();
    let (start, len) = parquet::file::reader::FileReader::metadata(&reader)
        .row_group(3)
        .column(0)
        .byte_range();
    let mut bytes = fs::read(&file).unwrap();
    bytes[start as usize..(start + len) as usize].fill(0x5A);
    let bad = root.join("bad.parquet");
    fs::write(&bad, bytes).unwrap();
    let (run, _) = check(root, &bad, &["--from", "parquet"], None);
    assert!(run.stderr.contains("bad.parquet, row group 3: "), "{run:?}");
}

#[test]
fn ragged_webdataset_shards_pack_every_sample_or_fail_loudly() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let imgs = jpegs(10);
    let sample = |i: usize, extra: &[(&'static str, &[u8])]| {
        let mut m = vec![
            ("jpg", imgs[i].clone()),
            ("cls", i.to_string().into_bytes()),
        ];
        m.extend(extra.iter().map(|(e, d)| (*e, d.to_vec())));
        m
    };
    let make = |name: &str, samples: Vec<Vec<(&str, Vec<u8>)>>| {
        let p = root.join(name);
        tar(&p, &samples);
        p
    };
    // one sample of ten has a caption: the caption is left out, every sample packed
    let one_txt = make(
        "one-txt.tar",
        (0..10)
            .map(|i| sample(i, if i == 3 { &[("txt", b"a cat")] } else { &[] }))
            .collect(),
    );
    // seven of ten have a caption: it is kept, stored empty where missing
    let seven_txt = make(
        "seven-txt.tar",
        (0..10)
            .map(|i| sample(i, if i < 7 { &[("txt", b"a dog")] } else { &[] }))
            .collect(),
    );
    // three of ten have no label (an integer: no empty value): they are skipped
    let no_cls = make(
        "no-cls.tar",
        (0..10)
            .map(|i| {
                let mut s = sample(i, &[]);
                if i >= 7 {
                    s.truncate(1);
                }
                s
            })
            .collect(),
    );
    // two of ten carry a pickle
    let pickles = make(
        "pickles.tar",
        (0..10)
            .map(|i| sample(i, if i < 2 { &[("pyd", b"opaque")] } else { &[] }))
            .collect(),
    );

    for options in [&[][..], &["--no-restart-markers"][..]] {
        let (run, dest) = check(root, &one_txt, options, Some((10, 0)));
        assert!(run.stdout.contains(".txt (1 of 10 samples)"), "{run:?}");
        assert_eq!(
            Dataset::open(&dest).unwrap().schema().to_string(),
            "__key__: string, cls: int64, jpg: image:auto"
        );

        let (run, dest) = check(root, &seven_txt, options, Some((10, 0)));
        assert!(
            run.stdout.contains("3 of 10 samples have no member .txt"),
            "{run:?}"
        );
        let ds = Dataset::open(&dest).unwrap();
        assert_eq!(ds.manifest().source["empty_where_missing"]["txt"], 3);
        assert_eq!(ds.get(0).unwrap()[3], FieldValue::String("a dog".into()));
        assert_eq!(ds.get(9).unwrap()[3], FieldValue::String("".into()));

        let (run, _) = check(root, &no_cls, options, None);
        assert!(
            run.stderr.contains("3 of 10 inputs were skipped") && run.stderr.contains("no .cls"),
            "{run:?}"
        );
        let mut more = options.to_vec();
        more.extend(["--max-skip-fraction", "0.5"]);
        check(root, &no_cls, &more, Some((7, 3)));
        let mut only_jpg = options.to_vec();
        only_jpg.extend(["--fields", "jpg"]);
        check(root, &no_cls, &only_jpg, Some((10, 0)));

        let mut keep = options.to_vec();
        keep.push("--keep-pickle");
        let (run, _) = check(root, &pickles, &keep, Some((10, 0)));
        assert!(run.stdout.contains(".pyd (2 of 10 samples)"), "{run:?}");
        keep.extend(["--fields", "jpg,cls,pyd?"]);
        let (_, dest) = check(root, &pickles, &keep, Some((10, 0)));
        let ds = Dataset::open(&dest).unwrap();
        assert_eq!(
            ds.get(1).unwrap()[3],
            FieldValue::Bytes(b"opaque"[..].into())
        );
        assert_eq!(ds.get(2).unwrap()[3], FieldValue::Bytes(b""[..].into()));
    }
    // --fields mistakes are usage errors
    for (fields, why) in [
        ("jpg,cls?", ".cls cannot be optional"),
        ("jpg,png", "no sample has member .png"),
        ("jpg,jpg", "given twice"),
    ] {
        let (run, _) = check(root, &seven_txt, &["--fields", fields], None);
        assert!(run.stderr.contains(why), "{fields}: {run:?}");
    }
}

#[test]
fn overwrite_never_touches_sources_or_anything_but_a_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let imgs = root.join("imgs");
    fs::create_dir(&imgs).unwrap();
    for (i, j) in jpegs(5).iter().enumerate() {
        fs::write(imgs.join(format!("{i}.jpg")), j).unwrap();
    }
    let before = fs::read_dir(&imgs).unwrap().count();
    let link = root.join("link");
    std::os::unix::fs::symlink(&imgs, &link).unwrap();
    let imgs_s = imgs.to_str().unwrap();
    for dest in [
        imgs_s.to_string(),                 // the source itself
        format!("{imgs_s}/../imgs"),        // the same, spelt otherwise
        root.to_str().unwrap().to_string(), // a folder holding the source
        format!("{imgs_s}/inside"),         // a folder inside the source
        link.to_str().unwrap().to_string(), // a link to the source
    ] {
        let run = stokehold(root, &["pack", imgs_s, &dest, "--overwrite"]);
        assert_eq!(run.code, 1, "{dest}: {run:?}");
        assert!(
            run.stderr
                .contains("choose a destination outside the sources"),
            "{dest}: {run:?}"
        );
    }
    assert_eq!(fs::read_dir(&imgs).unwrap().count(), before);
    // a folder with someone's file in it is not a dataset: never replaced
    let other = root.join("other");
    fs::create_dir(&other).unwrap();
    fs::write(other.join("thesis.tex"), b"mine").unwrap();
    let run = stokehold(
        root,
        &["pack", imgs_s, other.to_str().unwrap(), "--overwrite"],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.contains("will not overwrite"), "{run:?}");
    assert_eq!(fs::read(other.join("thesis.tex")).unwrap(), b"mine");
    // a dataset is replaced
    let ds = root.join("ds");
    let ds_s = ds.to_str().unwrap();
    assert_eq!(stokehold(root, &["pack", imgs_s, ds_s]).code, 0);
    let run = stokehold(root, &["pack", imgs_s, ds_s, "--overwrite", "--baseline"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(
        Dataset::open(&ds).unwrap().manifest().source["kind"],
        "image-folder"
    );
    // nothing left beside it
    let hidden: Vec<_> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{hidden:?}");
}

#[test]
fn a_pack_into_a_destination_being_written_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let imgs = root.join("imgs");
    fs::create_dir(&imgs).unwrap();
    fs::write(imgs.join("0.jpg"), &jpegs(1)[0]).unwrap();
    let dest = root.join("ds");
    // another writer (here, in this process) is writing the destination
    let schema = stokehold::format::Schema::from_specs([("x", "int64")]).unwrap();
    let writer =
        stokehold::format::DatasetWriter::create(&dest, schema, Default::default()).unwrap();
    for extra in [&[][..], &["--overwrite"][..]] {
        let mut args = vec!["pack", imgs.to_str().unwrap(), dest.to_str().unwrap()];
        args.extend_from_slice(extra);
        let run = stokehold(root, &args);
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stderr.contains("another writer is writing"), "{run:?}");
    }
    writer.finish().unwrap();
    assert_eq!(
        Dataset::open(&dest).unwrap().schema().to_string(),
        "x: int64"
    );
    // once it is done, the destination holds a dataset: refused without --overwrite
    let run = stokehold(
        root,
        &["pack", imgs.to_str().unwrap(), dest.to_str().unwrap()],
    );
    assert!(
        run.code == 1 && run.stderr.contains("already exists"),
        "{run:?}"
    );
}

#[test]
fn urls_are_refused_by_every_command_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let imgs = root.join("imgs");
    fs::create_dir(&imgs).unwrap();
    fs::write(imgs.join("0.jpg"), &jpegs(1)[0]).unwrap();
    let imgs_s = imgs.to_str().unwrap();
    for args in [
        // object-storage destinations are written (tests/remote.rs); other schemes are refused
        &["pack", imgs_s, "ftp://bucket/x"][..],
        &["pack", "s3://bucket/src", "out"],
        &[
            "pack",
            "gs://b/corpus.jsonl",
            "out",
            "--tokenizer",
            "t.json",
        ],
        // datasets that are only read may be object-storage URLs (tests/remote.rs); other
        // schemes are still refused
        &["inspect", "file:///tmp/x"],
        &["verify", "ftp://host/ds"],
        &["bench", "file:///bucket/x"],
        &["bench", "storage", "s3://bucket/x"],
        &["sample-data", "s3://bucket/imgs"],
    ] {
        let run = stokehold(root, args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert!(
            run.stderr.contains("URLs are not taken here"),
            "{args:?}: {run:?}"
        );
    }
    let left: Vec<_> = fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["imgs"], "no folder named s3: or out");
}
