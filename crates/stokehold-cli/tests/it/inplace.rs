//! Files read in place through the command (issue #36): `index`, `inspect`, `verify` and `bench`
//! over TFRecord files and WebDataset tars that were never packed, and the damage each names.

use std::fs;
use std::path::Path;

use stokehold_ingest::example::{Example, Feature, encode_example};
use stokehold_ingest::tfrecord::write_record;

use crate::pack_matrix::{jpegs, stokehold, tar};

/// Two TFRecord files of `n` examples in all (a JPEG and a label each), in ImageNet's naming;
/// returns the byte offset of each record in its file.
fn tfrecords(dir: &Path, n: usize) -> Vec<u64> {
    fs::create_dir_all(dir).unwrap();
    let images = jpegs(n);
    let mut offsets = Vec::new();
    for (part, chunk) in images.chunks(n.div_ceil(2)).enumerate() {
        let mut f =
            fs::File::create(dir.join(format!("train-{part:05}-of-00002.tfrecord"))).unwrap();
        let mut pos = 0;
        for (i, jpeg) in chunk.iter().enumerate() {
            let e = Example::from_features(vec![
                ("image/encoded", Feature::bytes([jpeg.clone()])),
                ("image/class/label", Feature::int64s(vec![i as i64 % 3])),
            ]);
            let bytes = encode_example(&e);
            write_record(&mut f, &bytes).unwrap();
            offsets.push(pos);
            pos += 16 + bytes.len() as u64;
        }
    }
    offsets
}

#[test]
fn tfrecords_are_indexed_inspected_verified_and_benched_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let data = root.join("tfr");
    let offsets = tfrecords(&data, 10);
    let (d, ix) = (data.to_str().unwrap(), root.join("ix"));
    let ix = ix.to_str().unwrap();
    let r = stokehold(root, &["index", d, "--index-dir", ix]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout
            .starts_with("indexed 2 tfrecord files, 10 records: "),
        "{r:?}"
    );
    assert!(r.stdout.contains("all scanned"), "{r:?}");
    // the second time the kept indexes describe the files: nothing is scanned
    let r = stokehold(root, &["index", d, "--index-dir", ix]);
    assert!(r.stdout.contains("0 scanned, 2 kept from before"), "{r:?}");
    // an index directory that cannot be written: `index` fails saying so (exit 1), never
    // "kept" (issue #50)
    fs::write(root.join("a-file"), b"").unwrap();
    let blocked = root.join("a-file").join("ix");
    let r = stokehold(
        root,
        &["index", d, "--index-dir", blocked.to_str().unwrap()],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("cannot keep indexes") && !r.stdout.contains("indexes kept"),
        "{r:?}"
    );
    // `--help` and `--format` name every format read in place
    let r = stokehold(root, &["index", "--help"]);
    assert!(
        r.stdout.contains("Parquet") && r.stdout.contains("parquet"),
        "{r:?}"
    );
    let r = stokehold(root, &["index", d, "--format", "csv"]);
    assert!(
        r.code != 0 && r.stderr.contains("tfrecord, webdataset, parquet or jsonl"),
        "{r:?}"
    );
    let r = stokehold(root, &["--help"]);
    assert!(r.stdout.contains("pack, index, inspect"), "{r:?}");
    let r = stokehold(root, &["inspect", d, "--index-dir", ix]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("samples   10 in 2 shards"), "{r:?}");
    assert!(r.stdout.contains("\"in_place\":\"tfrecord\""), "{r:?}");
    assert!(r.stdout.contains("image/encoded"), "{r:?}");
    let r = stokehold(root, &["verify", d, "--index-dir", ix]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.starts_with("ok: 2 tfrecord files, 10 samples"),
        "{r:?}"
    );
    // a glob in quotes, the fields chosen, a real pipeline over it
    let glob = data.join("train-*-of-00002.tfrecord");
    let r = stokehold(
        root,
        &[
            "bench",
            glob.to_str().unwrap(),
            "--index-dir",
            ix,
            "--fields",
            "image/encoded,image/class/label",
            "--batch-size",
            "5",
            "--threads",
            "2",
            "--random-resized-crop",
            "8",
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("10 samples x 1 epoch,"), "{r:?}");
    assert!(r.stdout.contains("decode"), "{r:?}");
    // what pack would gain, measured on these images (the ratio is the machine's; the line
    // says what was measured on how many images, and that TFRecords are checksummed already)
    let packing = r
        .stdout
        .lines()
        .find(|l| l.starts_with("packing "))
        .unwrap_or_else(|| panic!("no packing line: {r:?}"));
    assert!(
        packing.contains("pack would run these image stages")
            && packing.contains("(measured on 10 images:")
            && packing.contains("TFRecord records carry a CRC-32C already"),
        "{packing}"
    );
    // a flipped byte in the third record's data: verify names the sample, file and offset
    let file = data.join("train-00000-of-00002.tfrecord");
    let mut bytes = fs::read(&file).unwrap();
    let at = offsets[2] as usize + 12 + 20;
    bytes[at] ^= 0x40;
    fs::write(&file, &bytes).unwrap();
    let r = stokehold(root, &["verify", d, "--index-dir", ix, "--all"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stdout.contains("error: sample 2: "), "{r:?}");
    assert!(r.stdout.contains("train-00000-of-00002.tfrecord"), "{r:?}");
    assert!(
        r.stdout.contains(&format!("bytes {}..", offsets[2] + 12)),
        "{r:?}"
    );
    assert!(r.stdout.contains("FAILED: 1 fault in"), "{r:?}");
    // bench fails on it (the default error policy), naming the same place
    let r = stokehold(root, &["bench", d, "--index-dir", ix, "--batch-size", "5"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("train-00000-of-00002.tfrecord"), "{r:?}");
}

#[test]
fn webdataset_tars_are_read_in_place_and_bad_paths_say_what_they_are() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let data = root.join("wds");
    fs::create_dir_all(&data).unwrap();
    let images = jpegs(6);
    for part in 0..2 {
        let samples: Vec<Vec<(&str, Vec<u8>)>> = (0..3)
            .map(|i| {
                vec![
                    ("jpg", images[part * 3 + i].clone()),
                    ("cls", format!("{}", i % 2).into_bytes()),
                ]
            })
            .collect();
        tar(&data.join(format!("shard-{part}.tar")), &samples);
    }
    let ix = root.join("ix");
    let (d, ix) = (data.to_str().unwrap(), ix.to_str().unwrap());
    let r = stokehold(root, &["inspect", d, "--index-dir", ix]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("samples   6 in 2 shards"), "{r:?}");
    assert!(r.stdout.contains("\"in_place\":\"webdataset\""), "{r:?}");
    let r = stokehold(root, &["verify", d, "--index-dir", ix]);
    assert!(
        r.stdout.starts_with("ok: 2 webdataset files, 6 samples"),
        "{r:?}"
    );
    // a bench with no image stage has no crop to measure, and says what pack adds to tars
    let r = stokehold(root, &["bench", d, "--index-dir", ix, "--batch-size", "2"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("packing     no image stage to measure")
            && r.stdout.contains("tar members carry no checksum"),
        "{r:?}"
    );
    // --beside keeps the index next to each tar
    let r = stokehold(root, &["index", d, "--beside"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(data.join("shard-0.tar.skhidx").is_file(), "{r:?}");
    // a field no sample has is named with what there is
    let r = stokehold(root, &["inspect", d, "--index-dir", ix, "--fields", "png"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("member .png") && r.stderr.contains("member .jpg"),
        "{r:?}"
    );
    // a gzip-compressed TFRecord is refused with what to do
    fs::write(root.join("train.tfrecord.gz"), b"\x1f\x8b\x08\x00").unwrap();
    let gz = root.join("train.tfrecord.gz");
    let r = stokehold(root, &["inspect", gz.to_str().unwrap(), "--index-dir", ix]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("gzip-compressed") && r.stderr.contains("gunzip"),
        "{r:?}"
    );
    // a folder of images is still "not a stokehold dataset", and says both ways on
    let imgs = root.join("imgs");
    fs::create_dir_all(&imgs).unwrap();
    fs::write(imgs.join("a.jpg"), &images[0]).unwrap();
    let r = stokehold(root, &["inspect", imgs.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("is not a stokehold dataset"), "{r:?}");
    assert!(r.stderr.contains("read in place"), "{r:?}");
}
