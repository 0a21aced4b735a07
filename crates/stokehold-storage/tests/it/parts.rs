//! Datasets written by many writers (`parts`): shards per task, retried tasks replace their own
//! shards, the commit checks every shard and writes the manifest last, an abort leaves nothing.

use crate::common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::*;
use stokehold_format::{FormatError, ShardInfo};
use stokehold_storage::{
    Commit, Dataset, DatasetWriteOptions, PartWriter, abort_parts, commit_parts, prepare_parts,
};

fn small_shards() -> DatasetWriteOptions {
    DatasetWriteOptions {
        target_shard_bytes: 2048,
        ..DatasetWriteOptions::default()
    }
}

fn no_options() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// Task `task` of run `run` writes samples `range`.
fn write_task(dest: &Path, run: &str, task: u64, range: std::ops::Range<u64>) -> Vec<ShardInfo> {
    let mut w =
        PartWriter::create(dest, schema(), small_shards(), &no_options(), run, task).unwrap();
    for i in range {
        w.write(&sample(i)).unwrap();
    }
    w.finish().unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn commit(dest: &Path, run: &str, shards: Vec<ShardInfo>) -> Result<(), FormatError> {
    let commit = Commit {
        align: 1,
        ..Commit::default()
    };
    commit_parts(dest, schema(), shards, commit, run, &no_options()).map(|_| ())
}

#[test]
fn a_retried_task_replaces_its_own_shards_and_the_commit_lists_each_record_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ds");
    let run = prepare_parts(&dest, &no_options()).unwrap();
    assert!(dest.is_dir() && names(&dest).is_empty());

    let first = write_task(&dest, &run, 0, 0..40);
    // task 1's first attempt dies mid-shard: its complete shards and a temporary file remain
    let mut dying =
        PartWriter::create(&dest, schema(), small_shards(), &no_options(), &run, 1).unwrap();
    for i in 40..100 {
        dying.write(&sample(i)).unwrap();
    }
    std::mem::forget(dying);
    assert!(names(&dest).iter().any(|n| n.contains(".skh.tmp-")));
    // the retry writes the same rows under the same names (and fewer shards, say)
    let second = write_task(&dest, &run, 1, 40..60);
    assert!(first.len() > 1 && !second.is_empty());
    let mut shards = first.clone();
    shards.extend(second.clone());
    commit(&dest, &run, shards.clone()).unwrap();

    // only the listed shards and the manifest remain: the dead attempt's extras are gone
    let mut expected: Vec<String> = shards.iter().map(|s| s.file.clone()).collect();
    expected.push("manifest.json".into());
    expected.sort();
    assert_eq!(names(&dest), expected);
    let ds = Dataset::open(&dest).unwrap();
    assert_eq!(ds.len(), 60);
    for i in 0..60 {
        assert_eq!(ds.get(i).unwrap(), sample(i), "sample {i}");
    }
    assert!(shards[0].file.starts_with(&format!("shard-{run}-000000-")));

    // a second commit finds the manifest and refuses
    assert!(matches!(
        commit(&dest, &run, shards),
        Err(FormatError::DestinationExists { .. })
    ));
    // and a new job refuses the destination
    assert!(matches!(
        prepare_parts(&dest, &no_options()),
        Err(FormatError::DestinationExists { .. })
    ));
}

#[test]
fn a_commit_of_a_missing_or_different_shard_fails_and_writes_no_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ds");
    let run = prepare_parts(&dest, &no_options()).unwrap();
    let shards = write_task(&dest, &run, 0, 0..30);

    let mut wrong_size = shards.clone();
    wrong_size[1].bytes += 1;
    let e = commit(&dest, &run, wrong_size).unwrap_err().to_string();
    assert!(
        e.contains(&shards[1].file) && e.contains("file size"),
        "{e}"
    );

    let mut wrong_count = shards.clone();
    wrong_count[0].records += 1;
    let e = commit(&dest, &run, wrong_count).unwrap_err().to_string();
    assert!(
        e.contains(&shards[0].file) && e.contains("record count"),
        "{e}"
    );

    let mut missing = shards.clone();
    missing[0].file = stokehold_storage::parts::shard_name(&run, 9, 0);
    let e = commit(&dest, &run, missing).unwrap_err().to_string();
    assert!(e.contains("shard-") && e.contains("000009"), "{e}");
    assert!(!dest.join("manifest.json").exists());

    // on_write_failed: the run's files go, nothing looks like a dataset
    assert_eq!(
        abort_parts(&dest, &run, &no_options()).unwrap(),
        shards.len()
    );
    assert!(names(&dest).is_empty());
}

#[test]
fn a_destination_with_foreign_files_is_refused_and_a_dead_jobs_leftovers_are_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ds");
    let run = prepare_parts(&dest, &no_options()).unwrap();
    write_task(&dest, &run, 0, 0..30);
    // the driver died before its commit; the next job starts clean
    let run2 = prepare_parts(&dest, &no_options()).unwrap();
    assert_ne!(run, run2);
    assert!(names(&dest).is_empty());

    fs::write(dest.join("notes.txt"), b"mine").unwrap();
    let e = prepare_parts(&dest, &no_options()).unwrap_err().to_string();
    assert!(e.contains("notes.txt"), "{e}");
    assert!(dest.join("notes.txt").exists());

    for bad in ["../x", "", "a-b"] {
        assert!(
            PartWriter::create(&dest, schema(), small_shards(), &no_options(), bad, 0).is_err()
        );
    }
}
