//! Files read in place (TFRecord, WebDataset tar): the samples are pack's samples of the same
//! files, the index is kept and checked, and damaged files are errors that name them.

use std::fs;
use std::path::{Path, PathBuf};

use stokehold_format::FieldValue;
use stokehold_ingest::example::{Example, Feature, encode_example};
use stokehold_ingest::inplace::{
    INDEX_SUFFIX, InPlaceFormat, InPlaceOptions, in_place_format, index_files, open, open_in_place,
};
use stokehold_ingest::tfrecord::write_record;
use stokehold_ingest::{FieldChoice, NoProgress, PackOptions, pack};
use stokehold_storage::{Dataset, OpenOptions};

use crate::common::jpeg;

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

fn example(i: u64) -> Example {
    let mut f = vec![
        ("image/encoded", Feature::bytes([jpeg(i)])),
        ("image/class/label", Feature::int64s(vec![i as i64 % 3])),
        (
            "caption",
            Feature::bytes([format!("image {i}").into_bytes()]),
        ),
        ("weight", Feature::floats(vec![i as f32 * 0.5])),
    ];
    // ragged: an array, empty where missing (as pack makes it)
    if !i.is_multiple_of(4) {
        f.push(("bbox", Feature::floats(vec![0.25; 1 + i as usize % 3])));
    }
    Example::from_features(f)
}

/// Pack `inputs` as given (no restart markers: in place the bytes are the files' own).
fn pack_plain(inputs: &[PathBuf], out: &Path, fields: Option<&str>) -> Dataset {
    let o = crate::common::plain_options(fields);
    pack(inputs, out, None, &o, &NoProgress).unwrap();
    Dataset::open(out).unwrap()
}

fn in_place(index_dir: &Path) -> InPlaceOptions {
    InPlaceOptions {
        index_dir: Some(index_dir.to_path_buf()),
        ..InPlaceOptions::default()
    }
}

fn samples(ds: &Dataset) -> Vec<Vec<FieldValue<'static>>> {
    (0..ds.len()).map(|i| ds.get(i).unwrap()).collect()
}

/// The samples that read (a corrupt one left out, as pack leaves it out), and the errors of the
/// others.
fn readable(ds: &Dataset) -> (Vec<Vec<FieldValue<'static>>>, Vec<String>) {
    let (mut ok, mut bad) = (Vec::new(), Vec::new());
    for i in 0..ds.len() {
        match ds.get(i) {
            Ok(s) => ok.push(s),
            Err(e) => bad.push(e.to_string()),
        }
    }
    (ok, bad)
}

#[test]
fn tfrecords_in_place_are_the_samples_pack_makes_of_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tfr");
    fs::create_dir(&dir).unwrap();
    let all: Vec<Example> = (0..9).map(example).collect();
    tfrecord_file(&dir.join("train-00000-of-00002.tfrecord"), &all[..4]);
    tfrecord_file(&dir.join("train-00001-of-00002.tfrecord"), &all[4..]);
    let packed = pack_plain(std::slice::from_ref(&dir), &tmp.path().join("p"), None);
    let idx = tmp.path().join("idx");

    // a directory, a pattern and a list of files open the same dataset
    let by_dir = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(in_place_format(&by_dir), Some("tfrecord"));
    assert_eq!(in_place_format(&packed), None);
    assert_eq!(by_dir.schema(), packed.schema());
    assert_eq!(
        by_dir.schema().to_string(),
        "bbox: ndarray:f32, caption: string, image/class/label: int64, image/encoded: image:auto, weight: float64"
    );
    assert_eq!(samples(&by_dir), samples(&packed));
    let pattern = dir.join("train-*-of-00002.tfrecord");
    let by_glob = open(&[pattern], OpenOptions::default(), &in_place(&idx)).unwrap();
    assert_eq!(samples(&by_glob), samples(&packed));
    let listed = [
        dir.join("train-00000-of-00002.tfrecord"),
        dir.join("train-00001-of-00002.tfrecord"),
    ];
    let by_list = open(&listed, OpenOptions::default(), &in_place(&idx)).unwrap();
    assert_eq!(samples(&by_list), samples(&packed));
    // fields chosen as pack chooses them
    let some = pack_plain(
        std::slice::from_ref(&dir),
        &tmp.path().join("q"),
        Some("image/encoded,image/class/label"),
    );
    let o = InPlaceOptions {
        fields: Some(FieldChoice::parse_list("image/encoded,image/class/label").unwrap()),
        ..in_place(&idx)
    };
    let chosen = open_in_place(std::slice::from_ref(&dir), OpenOptions::default(), &o).unwrap();
    assert_eq!(
        chosen.schema().to_string(),
        "image/encoded: image:auto, image/class/label: int64"
    );
    assert_eq!(samples(&chosen), samples(&some));

    // the indexes were kept: a second open scans nothing; a changed file is scanned again
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!((r.files, r.scanned, r.records, r.damaged), (2, 0, 9, 0));
    std::thread::sleep(std::time::Duration::from_millis(20));
    tfrecord_file(&dir.join("train-00001-of-00002.tfrecord"), &all[4..6]);
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!((r.scanned, r.records), (1, 6));
    let again = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(again.len(), 6);
    assert_eq!(samples(&again)[..], samples(&packed)[..6]);
    let r = InPlaceOptions {
        rebuild: true,
        ..in_place(&idx)
    };
    assert_eq!(
        index_files(std::slice::from_ref(&dir), &OpenOptions::default(), &r)
            .unwrap()
            .scanned,
        2
    );
}

#[test]
fn tfrecord_damage_is_named_and_never_silent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tfr");
    fs::create_dir(&dir).unwrap();
    let all: Vec<Example> = (0..4).map(example).collect();
    let file = dir.join("a.tfrecord");
    let offsets = tfrecord_file(&file, &all);
    let idx = tmp.path().join("idx");

    // a bad data CRC: the record stays a sample and reading it fails, naming file and offset
    let mut b = fs::read(&file).unwrap();
    b[offsets[2] as usize + 12 + 7] ^= 0x55;
    fs::write(&file, &b).unwrap();
    let ds = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(ds.len(), 4);
    assert!(ds.get(1).is_ok() && ds.get(3).is_ok());
    let e = ds.get(2).unwrap_err().to_string();
    assert!(e.contains("a.tfrecord"), "{e}");
    assert!(e.contains(&format!("{}", offsets[2] + 12)), "{e}");
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(r.damaged, 1);

    // a file changed under an open dataset (same size, so its index still matches by size):
    // the record's checksum fails, naming the file
    let mut b2 = b.clone();
    b2[offsets[1] as usize + 12 + 9] ^= 0x11;
    fs::write(&file, &b2).unwrap();
    let e = ds.get(1).unwrap_err().to_string();
    assert!(e.contains("a.tfrecord") && e.contains("checksum"), "{e}");

    // a cut file: opening fails, naming the file and where its last record breaks off
    fs::write(&file, &b[..b.len() - 10]).unwrap();
    let e = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("a.tfrecord"), "{e}");
    assert!(e.contains(&format!("{}", offsets[3])), "{e}");

    // a hostile kept index (garbage, or a valid one of other bytes) is never trusted
    fs::write(&file, &b).unwrap();
    for f in fs::read_dir(&idx).unwrap() {
        let p = f.unwrap().path();
        let mut junk = fs::read(&p).unwrap();
        let n = junk.len();
        junk[n / 2] ^= 0xFF;
        fs::write(&p, &junk).unwrap();
    }
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!((r.scanned, r.records), (1, 4));

    // an index directory that cannot be made (a file is in its way): the files still open, and
    // the next open scans again
    let blocked = tmp.path().join("blocked");
    fs::write(&blocked, b"a file, not a directory").unwrap();
    for _ in 0..2 {
        let r = index_files(
            std::slice::from_ref(&dir),
            &OpenOptions::default(),
            &in_place(&blocked),
        )
        .unwrap();
        assert_eq!((r.scanned, r.records), (1, 4));
    }
    let opened = |ix: &Path| {
        open(
            std::slice::from_ref(&dir),
            OpenOptions::default(),
            &in_place(ix),
        )
        .unwrap()
    };
    let (a, b) = (opened(&blocked), opened(&idx));
    for i in [0, 1, 3] {
        assert_eq!(a.get(i).unwrap(), b.get(i).unwrap());
    }
    assert!(a.get(2).is_err(), "the damaged record is still named");

    // gzip files and unknown ones are refused with a message that says what to do
    fs::write(dir.join("b.tfrecord.gz"), b"\x1f\x8b").unwrap();
    let e = open(
        &[dir.join("b.tfrecord.gz")],
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("gzip"), "{e}");
    fs::write(dir.join("c-00000-of-00001"), b"neither tar nor tfrecord").unwrap();
    let e = open(
        &[dir.join("c-00000-of-00001")],
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("c-00000-of-00001") && e.contains("format="),
        "{e}"
    );
    let named = InPlaceOptions {
        format: Some(InPlaceFormat::TfRecord),
        ..in_place(&idx)
    };
    fs::copy(&file, dir.join("d.records")).unwrap();
    let ds = open(&[dir.join("d.records")], OpenOptions::default(), &named).unwrap();
    assert_eq!(ds.len(), 4);
}

fn add(b: &mut tar::Builder<fs::File>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append(&h, data).unwrap();
}

fn tar_with(path: &Path, build: impl FnOnce(&mut tar::Builder<fs::File>)) {
    let mut b = tar::Builder::new(fs::File::create(path).unwrap());
    build(&mut b);
    b.finish().unwrap();
}

#[test]
fn webdataset_tars_in_place_are_pack_samples_and_hostile_members_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wds");
    fs::create_dir(&dir).unwrap();
    tar_with(&dir.join("shard-000.tar"), |b| {
        for i in 0..4u64 {
            add(b, &format!("s/{i:03}.jpg"), &jpeg(i));
            add(
                b,
                &format!("s/{i:03}.cls"),
                format!("{}\n", i % 2).as_bytes(),
            );
            if i != 2 {
                add(
                    b,
                    &format!("s/{i:03}.txt"),
                    format!("caption {i}").as_bytes(),
                );
            }
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
        b.append_link(&mut h, "s/009.jpg", "/etc/passwd").unwrap();
    });
    tar_with(&dir.join("shard-001.tar"), |b| {
        for i in 4..7u64 {
            add(b, &format!("t/{i:03}.jpg"), &jpeg(i));
            add(b, &format!("t/{i:03}.cls"), format!("{}", i % 2).as_bytes());
            add(
                b,
                &format!("t/{i:03}.txt"),
                format!("caption {i}").as_bytes(),
            );
        }
        // no label: a corrupt sample (pack skips and counts it; read in place, the loader's
        // error policy does), never one that vanishes at open
        add(b, "t/007.jpg", &jpeg(7));
    });
    let fields = "jpg,cls,txt?";
    let packed = pack_plain(
        std::slice::from_ref(&dir),
        &tmp.path().join("p"),
        Some(fields),
    );
    let idx = tmp.path().join("idx");
    let o = InPlaceOptions {
        fields: Some(FieldChoice::parse_list(fields).unwrap()),
        ..in_place(&idx)
    };
    let ds = open(std::slice::from_ref(&dir), OpenOptions::default(), &o).unwrap();
    assert_eq!(in_place_format(&ds), Some("webdataset"));
    assert_eq!(ds.schema(), packed.schema());
    assert_eq!(
        ds.schema().to_string(),
        "__key__: string, jpg: image:auto, cls: int64, txt: string"
    );
    assert_eq!(ds.len(), 8);
    let (ok, bad) = readable(&ds);
    assert_eq!(ok, samples(&packed));
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].contains("shard-001.tar") && bad[0].contains("no .cls member"),
        "{bad:?}"
    );
    assert_eq!(ds.manifest().source["lacking_required"], 1);
    assert_eq!(ds.get(2).unwrap()[3], FieldValue::String("".into()));
    let notes = ds.manifest().source["notes"].to_string();
    assert!(
        notes.contains("1 of 8 samples lack a required field")
            && notes.contains("shard-001.tar sample 3"),
        "{notes}"
    );
    assert!(
        notes.contains("Symlink") && notes.contains("refused"),
        "{notes}"
    );
    assert!(notes.contains("pickle"), "{notes}");

    // pack's own choice of fields without fields=
    let all = pack_plain(std::slice::from_ref(&dir), &tmp.path().join("a"), None);
    let ds = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(ds.schema(), all.schema());
    assert_eq!(readable(&ds).0, samples(&all));

    // kept beside the files when asked
    let beside = InPlaceOptions {
        beside: true,
        ..InPlaceOptions::default()
    };
    let r = index_files(std::slice::from_ref(&dir), &OpenOptions::default(), &beside).unwrap();
    assert_eq!((r.files, r.scanned), (2, 2));
    assert!(dir.join(format!("shard-000.tar{INDEX_SUFFIX}")).is_file());
    let r = index_files(std::slice::from_ref(&dir), &OpenOptions::default(), &beside).unwrap();
    assert_eq!(r.scanned, 0);
    let ds = open(std::slice::from_ref(&dir), OpenOptions::default(), &beside).unwrap();
    assert_eq!(ds.len(), 8, "the kept .skhidx files are not taken for data");

    // a member's bytes changed after indexing: its sample fails its checksum, named
    let f = dir.join("shard-001.tar");
    let mut b = fs::read(&f).unwrap();
    let at = b.windows(9).position(|w| w == b"caption 5").unwrap();
    b[at] = b'C';
    fs::write(&f, &b).unwrap();
    let ds = open(std::slice::from_ref(&dir), OpenOptions::default(), &beside).unwrap();
    assert_eq!(ds.len(), 8, "rescanned: the file changed");
    assert_eq!(
        ds.get(5).unwrap()[3],
        FieldValue::String("Caption 5".into())
    );
    b[at] = b'D';
    fs::write(&f, &b).unwrap();
    let e = ds.get(5).unwrap_err().to_string();
    assert!(e.contains("shard-001.tar") && e.contains("checksum"), "{e}");

    // a cut tar: an error naming it
    fs::write(&f, &b[..b.len() / 2 + 100]).unwrap();
    let e = open(std::slice::from_ref(&dir), OpenOptions::default(), &beside)
        .unwrap_err()
        .to_string();
    assert!(e.contains("shard-001.tar"), "{e}");
}

/// A JPEG of about 2 KB (larger than the index keeps: read from the file's pages).
fn photo(seed: u64) -> Vec<u8> {
    use stokehold_ingest::sample_data::{SampleSpec, write_image_folder};
    let tmp = tempfile::tempdir().unwrap();
    let spec = SampleSpec {
        images: 1,
        classes: 1,
        width: 64,
        height: 40,
        quality: 85,
        seed,
    };
    write_image_folder(tmp.path(), spec).unwrap();
    fs::read(tmp.path().join("class_000/000000.jpg")).unwrap()
}

/// A Parquet file of `rows` rows from `first`: a Hugging Face `Image` struct (`image`), a
/// `ClassLabel` (`label`), a caption that is null in every 5th row, an embedding list; written
/// with `props` (pages, dictionary, compression, page version).
fn parquet_file(
    path: &Path,
    first: u64,
    rows: u64,
    props: parquet::file::properties::WriterProperties,
) {
    use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder};
    use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, StructArray};
    use arrow_schema::{DataType, Field, Fields};
    use std::sync::Arc;
    let ids: Vec<u64> = (first..first + rows).collect();
    let bytes: BinaryArray = ids.iter().map(|&i| Some(photo(i))).collect();
    let paths: StringArray = ids.iter().map(|&i| Some(format!("{i}.jpg"))).collect();
    // a null image now and then (rows 8, 25): pack skips the row, and in place the rows after
    // it in its page still find their values
    let valid: Vec<bool> = ids.iter().map(|&i| i % 17 != 8).collect();
    let image = StructArray::new(
        Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("path", DataType::Utf8, true),
        ]),
        vec![Arc::new(bytes), Arc::new(paths)],
        Some(valid.into()),
    );
    let mut caption = StringBuilder::new();
    let mut emb = ListBuilder::new(Float32Builder::new());
    for &i in &ids {
        if i % 5 == 0 {
            caption.append_null();
        } else {
            caption.append_value(format!("photo {i}"));
        }
        for k in 0..1 + i % 3 {
            emb.values().append_value(i as f32 + k as f32);
        }
        emb.append(true);
    }
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("image", Arc::new(image)),
        (
            "label",
            Arc::new(Int64Array::from_iter_values(
                ids.iter().map(|&i| i as i64 % 3),
            )),
        ),
        ("caption", Arc::new(caption.finish())),
        ("emb", Arc::new(emb.finish())),
    ];
    let batch = RecordBatch::try_from_iter(cols).unwrap();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        fs::File::create(path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn parquet_props(
    v2: bool,
    compression: parquet::basic::Compression,
    dictionary: bool,
) -> parquet::file::properties::WriterProperties {
    use parquet::file::metadata::KeyValue;
    use parquet::file::properties::{WriterProperties, WriterVersion};
    let hf = r#"{"info": {"features": {"image": {"_type": "Image"},
        "label": {"names": ["cat", "dog", "cow"], "_type": "ClassLabel"}}}}"#;
    WriterProperties::builder()
        .set_writer_version(if v2 {
            WriterVersion::PARQUET_2_0
        } else {
            WriterVersion::PARQUET_1_0
        })
        .set_compression(compression)
        .set_dictionary_enabled(dictionary)
        // a few images per dictionary, then the writer falls back to plain pages; small pages
        .set_dictionary_page_size_limit(6 << 10)
        .set_data_page_size_limit(5 << 10)
        .set_data_page_row_count_limit(2)
        .set_write_batch_size(2)
        .set_max_row_group_size(9)
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "huggingface".to_string(),
            hf.to_string(),
        )]))
        .build()
}

#[test]
fn a_parquet_file_whose_only_column_is_the_large_one_opens_in_place() {
    // one string column of long values (>= 256 bytes a row: read from the file, not kept in
    // the index) in several row groups: the index keeps no column at all. It was refused at
    // open, "a schema has 1 to 1024 fields, this one has 0" (issue 52).
    use arrow_array::{RecordBatch, StringArray};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let texts: Vec<String> = (0..40)
        .map(|i| format!("{i}: {}", "long text ".repeat(30 + i % 7)))
        .collect();
    let batch = RecordBatch::try_from_iter(vec![(
        "messages",
        Arc::new(StringArray::from_iter_values(&texts)) as arrow_array::ArrayRef,
    )])
    .unwrap();
    let path = tmp.path().join("c.parquet");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_size(7)
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        fs::File::create(&path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let ds = open(
        std::slice::from_ref(&path),
        OpenOptions::default(),
        &in_place(&tmp.path().join("idx")),
    )
    .unwrap();
    assert_eq!(in_place_format(&ds), Some("parquet"));
    assert_eq!(ds.schema().to_string(), "messages: string");
    let got: Vec<FieldValue<'static>> = samples(&ds).into_iter().map(|mut r| r.remove(0)).collect();
    let want: Vec<FieldValue<'static>> = texts
        .iter()
        .map(|t| FieldValue::String(t.clone().into()))
        .collect();
    assert_eq!(got, want);
    // opened again from its kept index: the same
    let again = open(
        std::slice::from_ref(&path),
        OpenOptions::default(),
        &in_place(&tmp.path().join("idx")),
    )
    .unwrap();
    assert_eq!(samples(&again), samples(&ds));
}

#[test]
fn parquet_files_in_place_are_the_samples_pack_makes_of_them() {
    use parquet::basic::{Compression, ZstdLevel};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    fs::create_dir(&dir).unwrap();
    // three files, each written differently: v1 pages with dictionaries (and their fallback)
    // snappy-compressed, v2 pages zstd-compressed, plain pages uncompressed
    parquet_file(
        &dir.join("train-00000-of-00003.parquet"),
        0,
        20,
        parquet_props(false, Compression::SNAPPY, true),
    );
    parquet_file(
        &dir.join("train-00001-of-00003.parquet"),
        20,
        13,
        parquet_props(
            true,
            Compression::ZSTD(ZstdLevel::try_new(3).unwrap()),
            true,
        ),
    );
    parquet_file(
        &dir.join("train-00002-of-00003.parquet"),
        33,
        7,
        parquet_props(false, Compression::UNCOMPRESSED, false),
    );
    let packed = pack_plain(std::slice::from_ref(&dir), &tmp.path().join("p"), None);
    let idx = tmp.path().join("idx");
    let ds = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!(in_place_format(&ds), Some("parquet"));
    assert_eq!(ds.schema(), packed.schema());
    assert_eq!(
        ds.schema().to_string(),
        "caption: string, emb: ndarray:f32, image: image:auto, label: int64"
    );
    // every row is a sample; the two whose image is null are corrupt ones, named (pack skips
    // and counts them), never rows that vanish at open
    assert_eq!(ds.len(), 40);
    let (ok, bad) = readable(&ds);
    assert_eq!(ok, samples(&packed));
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(
        bad.iter()
            .all(|e| e.contains("train-0000") && e.contains("column \"image\" is null")),
        "{bad:?}"
    );
    assert_eq!(ds.manifest().source["lacking_required"], 2);
    assert_eq!(ds.manifest().classes, packed.manifest().classes);
    assert!(ds.manifest().classes.is_some());
    assert_eq!(ds.get(7).unwrap()[2], FieldValue::Image(photo(7).into()));
    assert!(ds.get(8).is_err());
    assert_eq!(ds.get(9).unwrap()[2], FieldValue::Image(photo(9).into()));
    // the images are read from the files (a range per row: a page or a few), the rest from
    // the index: a row's range is far smaller than its file
    for k in 0..3 {
        let longest = ds.shards()[k]
            .index()
            .iter()
            .map(|e| u64::from(e.len))
            .max()
            .unwrap();
        let file = fs::metadata(dir.join(format!("train-0000{k}-of-00003.parquet"))).unwrap();
        assert!(
            longest < file.len() / 2,
            "file {k}: a row's range is {longest} of {} bytes",
            file.len()
        );
    }
    // dictionary-coded pages are read with their chunk's dictionary page: ranges that start at
    // the same byte (the dictionary's) and end at different pages; plain pages stand alone
    let shares_dictionary = |k: usize| {
        let ix = ds.shards()[k].index();
        ix.iter()
            .any(|a| ix.iter().any(|b| a.offset == b.offset && a.len != b.len))
    };
    assert!(shares_dictionary(0) && shares_dictionary(1) && !shares_dictionary(2));
    // a chosen subset, with the caption optional (empty where null), as pack makes it
    let fields = "image,caption?";
    let some = pack_plain(
        std::slice::from_ref(&dir),
        &tmp.path().join("q"),
        Some(fields),
    );
    let o = InPlaceOptions {
        fields: Some(FieldChoice::parse_list(fields).unwrap()),
        ..in_place(&idx)
    };
    let chosen = open(std::slice::from_ref(&dir), OpenOptions::default(), &o).unwrap();
    assert_eq!(readable(&chosen).0, samples(&some));
    assert_eq!(
        chosen.schema().to_string(),
        "image: image:auto, caption: string"
    );
    assert_eq!(chosen.get(5).unwrap()[1], FieldValue::String("".into()));
    assert_eq!(chosen.len(), 40);
    // a required caption: the rows without one are corrupt samples (pack skips them)
    let o = InPlaceOptions {
        fields: Some(FieldChoice::parse_list("image,caption").unwrap()),
        ..in_place(&idx)
    };
    let required = open(std::slice::from_ref(&dir), OpenOptions::default(), &o).unwrap();
    assert_eq!(required.len(), 40);
    let (ok, bad) = readable(&required);
    assert_eq!(ok.len(), 31);
    assert_eq!(bad.len(), 9, "{bad:?}");
    assert_eq!(required.manifest().source["lacking_required"], 9);
    // the kept index is used the second time
    let r = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &in_place(&idx),
    )
    .unwrap();
    assert_eq!((r.files, r.scanned, r.records), (3, 0, 40));
}

#[test]
fn parquet_damage_is_named_and_never_silent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    fs::create_dir(&dir).unwrap();
    let file = dir.join("a.parquet");
    parquet_file(
        &file,
        0,
        12,
        parquet_props(false, parquet::basic::Compression::SNAPPY, false),
    );
    let ds = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&tmp.path().join("idx")),
    )
    .unwrap();
    // row 8's image is null: a corrupt sample, read as an error each time
    let good: Vec<_> = (0..ds.len())
        .map(|i| ds.get(i).map_err(|e| e.to_string()))
        .collect();
    assert!(good[8].is_err() && good.iter().filter(|g| g.is_err()).count() == 1);
    // a flipped byte inside row 6's page, under the open dataset: that page fails its
    // checksum, named by file and bytes; the rows of other pages read as before
    let e = ds.shards()[0].index()[6];
    let mut bytes = fs::read(&file).unwrap();
    bytes[(e.offset + u64::from(e.len) / 2) as usize] ^= 0x20;
    fs::write(&file, &bytes).unwrap();
    let err = ds.get(6).unwrap_err().to_string();
    assert!(err.contains("a.parquet"), "{err}");
    assert!(err.contains(&format!("bytes {}..", e.offset)), "{err}");
    let other = (0..ds.len()).filter(|&i| ds.shards()[0].index()[i as usize].offset != e.offset);
    for i in other {
        assert_eq!(
            ds.get(i).map_err(|e| e.to_string()),
            good[i as usize],
            "row {i}"
        );
    }
    // a file cut short is refused when opened, naming it
    fs::write(&file, &bytes[..bytes.len() - 100]).unwrap();
    let err = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&tmp.path().join("idx3")),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("a.parquet"), "{err}");
    // not Parquet at all
    fs::write(&file, b"PAR1 but nothing else").unwrap();
    let err = open(
        std::slice::from_ref(&dir),
        OpenOptions::default(),
        &in_place(&tmp.path().join("idx4")),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("a.parquet") && err.contains("Parquet"),
        "{err}"
    );
}

/// A varint of `v` (zigzag-coded, as Thrift's compact protocol writes an i32).
fn zigzag_varint(v: i64) -> Vec<u8> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// The zigzag varint at `at`: its value and length.
fn read_zigzag(b: &[u8], at: usize) -> (i64, usize) {
    let (mut v, mut n) = (0u64, 0);
    loop {
        let byte = b[at + n];
        v |= u64::from(byte & 0x7f) << (7 * n);
        n += 1;
        if byte & 0x80 == 0 {
            return ((v >> 1) as i64 ^ -((v & 1) as i64), n);
        }
    }
}

/// Make the page header at `at` of a Parquet file declare `declared` bytes uncompressed,
/// keeping every other offset of the file: the header grows by some bytes and the page's body
/// gives them up (its compressed size that much less, its last bytes cut).
fn declare_uncompressed(b: &mut Vec<u8>, at: usize, declared: i64) {
    // fields 1 (type), 2 (uncompressed size), 3 (compressed size), each a compact i32
    assert_eq!(b[at], 0x15, "field 1, an i32");
    let (_, n1) = read_zigzag(b, at + 1);
    let p = at + 1 + n1;
    assert_eq!(b[p], 0x15, "field 2, an i32");
    let (_, n2) = read_zigzag(b, p + 1);
    let q = p + 1 + n2;
    assert_eq!(b[q], 0x15, "field 3, an i32");
    let (comp, n3) = read_zigzag(b, q + 1);
    let rest = q + 1 + n3;
    // the header's other fields, then the body: find the body's end from the old header's end
    let mut t = rest;
    // the remaining fields are parsed by skipping to the header's stop byte of its outer struct:
    // the writer's data page header ends with two stop bytes (inner struct, outer struct)
    while !(b[t] == 0 && b[t + 1] == 0) {
        t += 1;
    }
    let body = t + 2;
    let body_end = body + comp as usize;
    let new_unc = zigzag_varint(declared);
    let grow = new_unc.len() - n2;
    let new_comp = zigzag_varint(comp - grow as i64);
    assert_eq!(new_comp.len(), n3, "the compressed size keeps its length");
    let mut out = b[..p + 1].to_vec();
    out.extend_from_slice(&new_unc);
    out.push(0x15);
    out.extend_from_slice(&new_comp);
    out.extend_from_slice(&b[rest..body_end - grow]);
    out.extend_from_slice(&b[body_end..]);
    assert_eq!(out.len(), b.len());
    *b = out;
}

/// Issue #50: a page header that declares 2 GiB uncompressed is refused, naming the file and
/// the page's byte offset, before anything is sized by it: opened in place, indexed, packed.
#[test]
fn a_parquet_page_declaring_gigabytes_is_refused_before_anything_is_allocated() {
    use parquet::basic::Compression;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    for compression in [Compression::SNAPPY, Compression::UNCOMPRESSED] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("pq");
        fs::create_dir(&dir).unwrap();
        let file = dir.join("bomb.parquet");
        parquet_file(&file, 0, 12, parquet_props(false, compression, false));
        let meta = SerializedFileReader::new(fs::File::open(&file).unwrap())
            .unwrap()
            .metadata()
            .clone();
        // the first data page of the images' bytes (leaf 0), and of the label (a kept column)
        for leaf in [0, 2] {
            let at = meta.row_group(0).column(leaf).data_page_offset() as usize;
            let mut bytes = fs::read(&file).unwrap();
            declare_uncompressed(&mut bytes, at, i64::from(i32::MAX));
            let bad = dir.join("bad.parquet");
            fs::write(&bad, &bytes).unwrap();
            let one = [bad.clone()];
            let check = |e: String| {
                assert!(
                    e.contains("bad.parquet")
                        && e.contains("declares 2147483647 bytes uncompressed")
                        && e.contains(&at.to_string()),
                    "{compression:?}, leaf {leaf}: {e}"
                );
            };
            let idx = tmp.path().join(format!("idx{leaf}"));
            check(
                open(&one, OpenOptions::default(), &in_place(&idx))
                    .unwrap_err()
                    .to_string(),
            );
            check(
                index_files(&one, &OpenOptions::default(), &in_place(&idx))
                    .unwrap_err()
                    .to_string(),
            );
            let o = PackOptions {
                threads: 1,
                ..PackOptions::default()
            };
            let out = tmp.path().join(format!("out{leaf}"));
            check(
                pack(&one, &out, None, &o, &NoProgress)
                    .unwrap_err()
                    .to_string(),
            );
            fs::remove_file(&bad).unwrap();
        }
    }
}

/// Issue #50, item 3: what files in place hold, or lack, is said, and the files people have are
/// found where pack finds them.
#[test]
fn files_in_place_are_found_as_pack_finds_them_and_what_is_wrong_is_said() {
    use stokehold_format::FormatError;
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path().join("idx");
    let o = || in_place(&idx);
    // ImageNet's extension-less names: a glob and the directory find them by their first bytes
    // (a README beside them, extension-less too, is neither and left out)
    let dir = tmp.path().join("imagenet");
    fs::create_dir(&dir).unwrap();
    let all: Vec<Example> = (0..6).map(example).collect();
    tfrecord_file(&dir.join("train-00000-of-00002"), &all[..3]);
    tfrecord_file(&dir.join("train-00001-of-00002"), &all[3..]);
    fs::write(dir.join("README"), b"ImageNet, as TFRecords").unwrap();
    let glob = dir.join("train-*");
    let ds = open(std::slice::from_ref(&glob), OpenOptions::default(), &o()).unwrap();
    assert_eq!((ds.len(), in_place_format(&ds)), (6, Some("tfrecord")));
    let ds = open(std::slice::from_ref(&dir), OpenOptions::default(), &o()).unwrap();
    assert_eq!(ds.len(), 6);
    let r = index_files(std::slice::from_ref(&dir), &OpenOptions::default(), &o()).unwrap();
    assert_eq!((r.files, r.records), (2, 6));

    // a glob that matches nothing says so (not a corrupt dataset)
    let e = open(&[dir.join("val-*")], OpenOptions::default(), &o()).unwrap_err();
    assert!(matches!(e, FormatError::NotFound { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("val-*") && e.contains("no file matches"), "{e}");

    // a symbolic link to a file is that file, as pack follows it
    let linked = tmp.path().join("linked");
    fs::create_dir(&linked).unwrap();
    std::os::unix::fs::symlink(
        dir.join("train-00000-of-00002"),
        linked.join("part-0.tfrecord"),
    )
    .unwrap();
    let ds = open(std::slice::from_ref(&linked), OpenOptions::default(), &o()).unwrap();
    assert_eq!(ds.len(), 3);

    // a gzip-compressed TFRecord by an extension-less name: said to be gzip, as a directory and
    // as the file
    let gz = tmp.path().join("gz");
    fs::create_dir(&gz).unwrap();
    let file = gz.join("train-00000-of-00001");
    fs::write(&file, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03gzip data").unwrap();
    for p in [&gz, &file, &gz.join("train-*")] {
        let e = open(std::slice::from_ref(p), OpenOptions::default(), &o())
            .unwrap_err()
            .to_string();
        assert!(e.contains("gzip-compressed") && e.contains("gunzip"), "{e}");
    }

    // an index directory that cannot be written: `index` fails saying so; opening only notes it
    let blocked = tmp.path().join("a-file");
    fs::write(&blocked, b"").unwrap();
    let unwritable = InPlaceOptions {
        index_dir: Some(blocked.join("indexes")),
        must_keep: true,
        ..InPlaceOptions::default()
    };
    let e = index_files(
        std::slice::from_ref(&dir),
        &OpenOptions::default(),
        &unwritable,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("cannot keep indexes") && e.contains("a-file"),
        "{e}"
    );
    let noted = InPlaceOptions {
        must_keep: false,
        ..unwritable
    };
    let ds = open(std::slice::from_ref(&dir), OpenOptions::default(), &noted).unwrap();
    assert_eq!(ds.len(), 6);

    // a tar cut exactly at a member boundary (its end-of-archive blocks gone): refused when
    // opened, naming the file and the byte; pack skips and counts it
    let tars = tmp.path().join("tars");
    fs::create_dir(&tars).unwrap();
    let cut = tars.join("cut.tar");
    tar_with(&cut, |b| {
        for i in 0..4u64 {
            add(b, &format!("{i:03}.jpg"), &jpeg(i));
            add(b, &format!("{i:03}.cls"), b"1");
        }
    });
    let mut bytes = fs::read(&cut).unwrap();
    while bytes.len() >= 512 && bytes[bytes.len() - 512..].iter().all(|&b| b == 0) {
        bytes.truncate(bytes.len() - 512);
    }
    let end = bytes.len();
    fs::write(&cut, &bytes).unwrap();
    let e = open(std::slice::from_ref(&tars), OpenOptions::default(), &o())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cut.tar") && e.contains("was cut") && e.contains(&format!("byte {end}")),
        "{e}"
    );
    let opts = PackOptions {
        threads: 1,
        max_skip_fraction: 1.0,
        ..PackOptions::default()
    };
    let r = pack(
        std::slice::from_ref(&tars),
        &tmp.path().join("packed"),
        None,
        &opts,
        &NoProgress,
    )
    .unwrap();
    assert!(
        r.skipped.iter().any(|s| s.reason.contains("was cut")),
        "{:?}",
        r.skipped
    );
}

/// Issue #51: one table names the formats for `pack` and files in place (a `.tfrec` file is a
/// TFRecord file to both), and what the user gave that cannot be used is a
/// `FormatError::Input` (Python: `ConfigError`), never damage (`Manifest`, `CorruptDataError`),
/// while a damaged file stays damage.
#[test]
fn a_tfrec_file_is_a_tfrecord_to_both_and_input_mistakes_are_input_errors() {
    use stokehold_format::FormatError;
    let tmp = tempfile::tempdir().unwrap();
    let idx = tmp.path().join("idx");
    let o = || in_place(&idx);
    let dir = tmp.path().join("tfrec");
    fs::create_dir(&dir).unwrap();
    let all: Vec<Example> = (0..4).map(example).collect();
    tfrecord_file(&dir.join("a.tfrec"), &all[..2]);
    tfrecord_file(&dir.join("b.tfrec"), &all[2..]);
    assert_eq!(
        stokehold_ingest::detect(std::slice::from_ref(&dir)).unwrap(),
        stokehold_ingest::SourceKind::TfRecord
    );
    let ds = open(std::slice::from_ref(&dir), OpenOptions::default(), &o()).unwrap();
    assert_eq!((ds.len(), in_place_format(&ds)), (4, Some("tfrecord")));
    assert_eq!(InPlaceFormat::parse("tfrec"), Some(InPlaceFormat::TfRecord));
    // by its name, not its first bytes: a `.tfrec` whose first length is damaged is a damaged
    // TFRecord file (named, with the byte), not "neither a TFRecord file, a tar nor Parquet"
    let bad = tmp.path().join("bad");
    fs::create_dir(&bad).unwrap();
    let mut bytes = fs::read(dir.join("a.tfrec")).unwrap();
    bytes[8] ^= 0xff; // the first record's length CRC
    fs::write(bad.join("a.tfrec"), &bytes).unwrap();
    let e = open(&[bad.join("a.tfrec")], OpenOptions::default(), &o()).unwrap_err();
    assert!(e.is_corruption(), "{e:?}");
    assert!(e.to_string().contains("a.tfrec"), "{e}");

    // the user's mistakes: Input, each saying what to give instead
    let other = tmp.path().join("other");
    fs::create_dir(&other).unwrap();
    tfrecord_file(&other.join("c.tfrecord"), &all[..1]);
    let gz = tmp.path().join("x.tfrecord.gz");
    fs::write(&gz, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03gzip data").unwrap();
    let neither = tmp.path().join("x-00000-of-00001");
    fs::write(&neither, b"neither").unwrap();
    let nope = InPlaceOptions {
        fields: Some(FieldChoice::parse_list("nope").unwrap()),
        ..o()
    };
    let cases: Vec<(Vec<PathBuf>, InPlaceOptions, &str)> = vec![
        (
            vec![dir.join("a.tfrec"), other.join("c.tfrecord")],
            o(),
            "one directory",
        ),
        (vec![gz], o(), "gzip-compressed"),
        (vec![neither], o(), "format="),
        (vec![dir.clone()], nope, "nope"),
        (vec![], o(), "no files were given"),
    ];
    for (paths, options, says) in cases {
        let e = open_in_place(&paths, OpenOptions::default(), &options).unwrap_err();
        assert!(matches!(e, FormatError::Input { .. }), "{paths:?}: {e:?}");
        assert!(!e.is_corruption());
        assert!(e.to_string().contains(says), "{paths:?}: {e}");
    }
}
