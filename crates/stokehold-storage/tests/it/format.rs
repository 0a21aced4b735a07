//! Round trips, determinism, atomicity and bad input (rows A1–A5 of the reliability matrix).

use crate::common;

use std::fs;

use common::*;
use stokehold_format::{FieldValue, FormatError, Limits, Manifest, ShardReader};
use stokehold_storage::{
    Access, Dataset, DatasetWriteOptions, DatasetWriter, OpenOptions, VerifyOptions, verify_dataset,
};
use stokehold_storage::{ManifestIo, OpenShard};

fn no_progress(_: u64) {}

#[test]
fn round_trip_across_shards_with_and_without_mmap() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = write_dataset(tmp.path(), "ds", 500, 4096, 1);
    for access in [Access::Pread, Access::Mmap, Access::Memory, Access::Auto] {
        let ds = Dataset::open_with(&dest, OpenOptions::with_access(access)).unwrap();
        assert_eq!(ds.len(), 500);
        assert!(ds.shards().len() > 5, "small target size gives many shards");
        assert_eq!(ds.classes().unwrap()[3], "class-3");
        for i in (0..500).step_by(7) {
            assert_eq!(ds.get(i).unwrap(), sample(i), "sample {i}");
        }
        assert_eq!(
            ds.record_slice(3).unwrap().is_some(),
            matches!(access, Access::Mmap | Access::Memory)
        );
        assert_ne!(
            ds.access(),
            Access::Auto,
            "the automatic choice is resolved"
        );
        assert!(matches!(
            ds.get(500),
            Err(FormatError::IndexOutOfRange {
                index: 500,
                len: 500
            })
        ));
    }
}

#[test]
fn aligned_records_start_on_the_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = write_dataset(tmp.path(), "ds", 20, 1 << 30, 4096);
    let ds = Dataset::open(&dest).unwrap();
    for e in ds.shards()[0].index() {
        assert_eq!(e.offset % 4096, 0);
    }
    assert_eq!(ds.get(19).unwrap(), sample(19));
    assert!(
        verify_dataset(&dest, VerifyOptions::default(), &no_progress)
            .unwrap()
            .ok()
    );
}

#[test]
fn identical_input_gives_identical_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let a = write_dataset(tmp.path(), "a", 300, 8192, 1);
    let b = write_dataset(tmp.path(), "b", 300, 8192, 1);
    assert_eq!(read_tree(&a), read_tree(&b));
}

#[test]
fn unfinished_writer_leaves_nothing_that_looks_like_a_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ds");
    {
        let mut w = DatasetWriter::create(&dest, schema(), DatasetWriteOptions::default()).unwrap();
        w.write(&sample(0)).unwrap();
        // dropped without finish(), as when a pack is interrupted by an error
    }
    assert!(!dest.exists());
    assert_eq!(
        fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "staging directory removed"
    );
}

#[test]
fn stale_staging_directories_of_dead_processes_are_swept() {
    let tmp = tempfile::tempdir().unwrap();
    let stale = tmp.path().join(".ds.partial-999999999");
    fs::create_dir(&stale).unwrap();
    fs::write(stale.join("shard-000000.skh"), b"half").unwrap();
    let dest = write_dataset(tmp.path(), "ds", 3, 1 << 20, 1);
    assert!(!stale.exists());
    assert!(Dataset::open(&dest).is_ok());
}

#[test]
fn existing_destination_is_refused_unless_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = write_dataset(tmp.path(), "ds", 3, 1 << 20, 1);
    let err = DatasetWriter::create(&dest, schema(), DatasetWriteOptions::default()).unwrap_err();
    assert!(matches!(err, FormatError::DestinationExists { .. }));
    let mut w = DatasetWriter::create(
        &dest,
        schema(),
        DatasetWriteOptions {
            overwrite: true,
            ..DatasetWriteOptions::default()
        },
    )
    .unwrap();
    w.write(&sample(9)).unwrap();
    w.finish().unwrap();
    let ds = Dataset::open(&dest).unwrap();
    assert_eq!(ds.len(), 1);
    assert_eq!(ds.get(0).unwrap(), sample(9));
}

#[test]
fn invalid_values_name_the_sample_and_field_and_writing_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(
        tmp.path().join("ds"),
        schema(),
        DatasetWriteOptions::default(),
    )
    .unwrap();
    w.write(&sample(0)).unwrap();
    let mut bad = sample(1);
    bad[1] = FieldValue::Float64(1.0);
    let msg = w.write(&bad).unwrap_err().to_string();
    assert!(
        msg.contains("sample 1") && msg.contains("\"label\""),
        "{msg}"
    );
    w.write(&sample(1)).unwrap();
    w.finish().unwrap();
    assert_eq!(Dataset::open(tmp.path().join("ds")).unwrap().len(), 2);
}

fn one_shard(tmp: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let dest = write_dataset(tmp, "ds", 12, 1 << 30, 1);
    let shard = dest.join("shard-000000.skh");
    (dest, shard)
}

// A1
#[test]
fn wrong_magic_and_unknown_version_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, shard) = one_shard(tmp.path());
    let good = fs::read(&shard).unwrap();

    let mut bad = good.clone();
    bad[0..8].copy_from_slice(b"PK\x03\x04zip!");
    fs::write(&shard, &bad).unwrap();
    let msg = ShardReader::open(&shard, Limits::default())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("shard-000000.skh") && msg.contains("STKHSHRD") && msg.contains("PK"),
        "{msg}"
    );

    let mut bad = good.clone();
    bad[8] = 9;
    fs::write(&shard, &bad).unwrap();
    let err = ShardReader::open(&shard, Limits::default()).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::UnsupportedVersion {
                found: 9,
                supported: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn manifest_of_a_newer_version_is_refused_with_both_versions() {
    let tmp = tempfile::tempdir().unwrap();
    let (dest, _) = one_shard(tmp.path());
    let m = fs::read_to_string(dest.join("manifest.json")).unwrap();
    fs::write(
        dest.join("manifest.json"),
        m.replace("\"format_version\": 1", "\"format_version\": 2"),
    )
    .unwrap();
    let err = Dataset::open(&dest).unwrap_err();
    assert!(
        matches!(
            err,
            FormatError::UnsupportedVersion {
                found: 2,
                supported: 1,
                ..
            }
        ),
        "{err}"
    );
}

// A2
#[test]
fn truncation_at_every_byte_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (dest, shard) = one_shard(tmp.path());
    let good = fs::read(&shard).unwrap();
    for len in 0..good.len() {
        fs::write(&shard, &good[..len]).unwrap();
        let err = ShardReader::open(&shard, Limits::default()).unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::Truncated { .. }
                    | FormatError::BadMagic { .. }
                    | FormatError::Checksum { .. }
                    | FormatError::Corrupt { .. }
            ),
            "length {len}: {err}"
        );
        // the dataset level also names the shard
        let msg = Dataset::open(&dest).unwrap_err().to_string();
        assert!(msg.contains("shard-000000.skh"), "length {len}: {msg}");
        let report = verify_dataset(&dest, VerifyOptions::default(), &no_progress).unwrap();
        assert_eq!(report.faults.len(), 1, "length {len}");
    }
}

// A3
#[test]
fn a_flipped_bit_in_a_record_names_file_record_and_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (dest, shard) = one_shard(tmp.path());
    let ds = Dataset::open(&dest).unwrap();
    let e = ds.shards()[0].index()[5];
    drop(ds);
    let mut bytes = fs::read(&shard).unwrap();
    bytes[e.offset as usize + 3] ^= 0x10;
    fs::write(&shard, &bytes).unwrap();
    let ds = Dataset::open(&dest).unwrap();
    let msg = ds.get(5).unwrap_err().to_string();
    let want = format!(
        "record 5 (global sample 5), bytes {}..{}",
        e.offset,
        e.end()
    );
    assert!(
        msg.contains("shard-000000.skh") && msg.contains(&want),
        "{msg}"
    );
    assert_eq!(ds.get(4).unwrap(), sample(4), "neighbours still read");
    let report = verify_dataset(&dest, VerifyOptions::default(), &no_progress).unwrap();
    assert_eq!(report.faults.len(), 1);
    assert!(report.faults[0].to_string().contains(&want));
}

#[test]
fn verify_finds_a_flip_at_every_byte_of_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (dest, shard) = one_shard(tmp.path());
    let good = fs::read(&shard).unwrap();
    assert!(
        verify_dataset(&dest, VerifyOptions::default(), &no_progress)
            .unwrap()
            .ok()
    );
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        fs::write(&shard, &bad).unwrap();
        let report = verify_dataset(&dest, VerifyOptions::default(), &no_progress).unwrap();
        assert!(!report.ok(), "flip at byte {at} went unnoticed");
    }
}

#[test]
fn verify_all_reports_every_fault_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = write_dataset(tmp.path(), "ds", 200, 2048, 1);
    let ds = Dataset::open(&dest).unwrap();
    let n_shards = ds.shards().len();
    let targets: Vec<(String, u64)> = [1usize, n_shards - 2]
        .iter()
        .map(|&k| {
            let s = &ds.shards()[k];
            (s.path().to_string_lossy().into_owned(), s.index()[1].offset)
        })
        .collect();
    drop(ds);
    for (path, off) in &targets {
        let mut b = fs::read(path).unwrap();
        b[*off as usize + 2] ^= 0xFF;
        fs::write(path, b).unwrap();
    }
    let all = verify_dataset(
        &dest,
        VerifyOptions {
            all: true,
            threads: 2,
            ..VerifyOptions::default()
        },
        &no_progress,
    )
    .unwrap();
    // each flipped record: its own checksum plus the two whole-file checksums
    assert_eq!(all.faults.len(), 6, "{:#?}", all.faults);
    assert!(all.faults[0].to_string().contains("shard-000001.skh"));
    assert!(
        all.faults[5]
            .to_string()
            .contains(&format!("shard-{:06}.skh", n_shards - 2))
    );
    let first = verify_dataset(
        &dest,
        VerifyOptions {
            threads: 2,
            ..VerifyOptions::default()
        },
        &no_progress,
    )
    .unwrap();
    assert_eq!(first.faults.len(), 1);
    assert!(
        first.faults[0].to_string().contains("shard-000001.skh, ")
            || first.faults[0].to_string().contains("shard-000001.skh:")
    );
    assert!(
        first.faults[0].to_string().contains("record 1 "),
        "{}",
        first.faults[0]
    );
}

// A5
#[test]
fn manifest_that_disagrees_with_a_shard_names_both_values() {
    let tmp = tempfile::tempdir().unwrap();
    let (dest, _) = one_shard(tmp.path());
    let mpath = dest.join("manifest.json");
    let good = fs::read_to_string(&mpath).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&good).unwrap();
    m["shards"][0]["records"] = 13.into();
    m["total_records"] = 13.into();
    fs::write(&mpath, m.to_string()).unwrap();
    let msg = Dataset::open(&dest).unwrap_err().to_string();
    assert!(msg.contains("manifest says 13, the shard has 12"), "{msg}");

    let mut m: serde_json::Value = serde_json::from_str(&good).unwrap();
    m["schema"]["fields"][1]["type"] = "float64".into();
    fs::write(&mpath, m.to_string()).unwrap();
    let msg = Dataset::open(&dest).unwrap_err().to_string();
    assert!(
        msg.contains("schema disagrees")
            && msg.contains("label: float64")
            && msg.contains("label: int64"),
        "{msg}"
    );
}

#[test]
fn hostile_manifests_are_rejected_at_open() {
    let cases: Vec<(&str, String)> = vec![
        ("not json", "{\"format\":".into()),
        ("deep nesting", format!("{}{}", "[".repeat(100_000), "]".repeat(100_000))),
        ("path traversal", r#"{"format":"stokehold-dataset","format_version":1,"schema":{"fields":[{"name":"a","type":"int64"}]},"total_records":1,"shards":[{"file":"../../etc/passwd","records":1,"bytes":1,"crc32c":0}]}"#.into()),
        ("absolute path", r#"{"format":"stokehold-dataset","format_version":1,"schema":{"fields":[{"name":"a","type":"int64"}]},"total_records":1,"shards":[{"file":"/etc/passwd","records":1,"bytes":1,"crc32c":0}]}"#.into()),
        ("count mismatch", r#"{"format":"stokehold-dataset","format_version":1,"schema":{"fields":[{"name":"a","type":"int64"}]},"total_records":5,"shards":[{"file":"a.skh","records":1,"bytes":1,"crc32c":0}]}"#.into()),
        ("overflowing counts", r#"{"format":"stokehold-dataset","format_version":1,"schema":{"fields":[{"name":"a","type":"int64"}]},"total_records":1,"shards":[{"file":"a.skh","records":18446744073709551615,"bytes":1,"crc32c":0},{"file":"b.skh","records":2,"bytes":1,"crc32c":0}]}"#.into()),
        ("duplicate shard", r#"{"format":"stokehold-dataset","format_version":1,"schema":{"fields":[{"name":"a","type":"int64"}]},"total_records":2,"shards":[{"file":"a.skh","records":1,"bytes":1,"crc32c":0},{"file":"a.skh","records":1,"bytes":1,"crc32c":0}]}"#.into()),
        ("wrong format", r#"{"format":"mds","format_version":1}"#.into()),
        ("negative count", r#"{"format":"stokehold-dataset","format_version":1,"schema":{"fields":[{"name":"a","type":"int64"}]},"total_records":-1,"shards":[]}"#.into()),
        ("unknown type", r#"{"format":"stokehold-dataset","format_version":1,"schema":{"fields":[{"name":"a","type":"pickle"}]},"total_records":0,"shards":[]}"#.into()),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (name, text) in cases {
        fs::write(tmp.path().join("manifest.json"), &text).unwrap();
        let err = Dataset::open(tmp.path()).unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::Manifest { .. } | FormatError::UnsupportedVersion { .. }
            ),
            "{name}: {err}"
        );
        assert!(err.to_string().contains("manifest.json"), "{name}: {err}");
    }
}

#[test]
fn oversized_manifest_is_refused_without_reading_it_all() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("manifest.json"), vec![b' '; 2048]).unwrap();
    let limits = Limits {
        max_manifest_bytes: 1024,
        ..Limits::default()
    };
    let err = Manifest::load(tmp.path(), &limits).unwrap_err();
    assert!(
        matches!(err, FormatError::LimitExceeded { max: 1024, .. }),
        "{err}"
    );
}
