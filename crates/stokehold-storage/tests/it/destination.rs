//! What a writer may do to its destination (docs/reliability.md, "Packing"): overwrite replaces a
//! dataset and nothing else, never before the new one is complete; one writer per destination;
//! no URLs.

use crate::common;

use std::fs;
use std::path::Path;

use common::*;
use stokehold_format::FormatError;
use stokehold_storage::{
    Dataset, DatasetWriteOptions, DatasetWriter, VerifyOptions, sweep_stale_staging, verify_dataset,
};

fn overwrite() -> DatasetWriteOptions {
    DatasetWriteOptions {
        overwrite: true,
        ..DatasetWriteOptions::default()
    }
}

/// Write one sample to `dest` with `options`.
fn write_one(dest: &Path, options: DatasetWriteOptions) -> Result<(), FormatError> {
    let mut w = DatasetWriter::create(dest, schema(), options)?;
    w.write(&sample(42))?;
    w.finish().map(|_| ())
}

/// Every entry of `dir` (names only), sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn overwrite_replaces_a_dataset_and_never_anything_else() {
    let tmp = tempfile::tempdir().unwrap();
    // a folder of someone's files
    let photos = tmp.path().join("photos");
    fs::create_dir(&photos).unwrap();
    fs::write(photos.join("a.jpg"), b"mine").unwrap();
    // a dataset with an unrelated file put into it
    let mixed = write_dataset(tmp.path(), "mixed", 3, 1 << 20, 1);
    fs::write(mixed.join("notes.txt"), b"mine").unwrap();
    // a dataset with a sub-directory
    let nested = write_dataset(tmp.path(), "nested", 3, 1 << 20, 1);
    fs::create_dir(nested.join("keep")).unwrap();
    // a file
    let file = tmp.path().join("file");
    fs::write(&file, b"mine").unwrap();
    // a link to a dataset
    let target = write_dataset(tmp.path(), "target", 3, 1 << 20, 1);
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    // a dataset whose manifest is damaged
    let broken = write_dataset(tmp.path(), "broken", 3, 1 << 20, 1);
    fs::write(broken.join("manifest.json"), b"{").unwrap();

    let before: Vec<_> = [&photos, &mixed, &nested, &target, &broken]
        .iter()
        .map(|d| read_tree(d))
        .collect();
    for (dest, why) in [
        (&photos, "not a stokehold dataset"),
        (&mixed, "\"notes.txt\", which is not part of"),
        (&nested, "\"keep\", which is not part of"),
        (&file, "not a directory"),
        (&link, "symbolic link"),
        (&broken, "not a stokehold dataset"),
    ] {
        let err = write_one(dest, overwrite()).unwrap_err();
        assert!(
            matches!(err, FormatError::NotReplaceable { .. }) && err.to_string().contains(why),
            "{}: {err}",
            dest.display()
        );
    }
    let after: Vec<_> = [&photos, &mixed, &nested, &target, &broken]
        .iter()
        .map(|d| read_tree(d))
        .collect();
    assert_eq!(before, after, "nothing was touched");
    assert_eq!(fs::read(&file).unwrap(), b"mine");
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // no staging, replaced or lock leftovers beside them
    assert!(
        names(tmp.path()).iter().all(|n| !n.starts_with('.')),
        "{:?}",
        names(tmp.path())
    );

    // a dataset (with its extra files) is replaced
    let ds = write_dataset(tmp.path(), "ds", 5, 1 << 20, 1);
    write_one(&ds, overwrite()).unwrap();
    assert_eq!(Dataset::open(&ds).unwrap().len(), 1);
    // so is an empty directory, and one that is absent
    let empty = tmp.path().join("empty");
    fs::create_dir(&empty).unwrap();
    write_one(&empty, DatasetWriteOptions::default()).unwrap();
    assert_eq!(Dataset::open(&empty).unwrap().len(), 1);
}

#[test]
fn a_dataset_holds_only_known_extra_files() {
    let tmp = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(
        tmp.path().join("ds"),
        schema(),
        DatasetWriteOptions::default(),
    )
    .unwrap();
    w.add_file("skipped.txt", b"x\ty\n").unwrap();
    for bad in ["notes.txt", "../x", "manifest.json", "shard-000000.skh", ""] {
        assert!(w.add_file(bad, b"").is_err(), "{bad:?}");
    }
    w.write(&sample(0)).unwrap();
    w.finish().unwrap();
    // what a writer writes, a writer may replace
    write_one(&tmp.path().join("ds"), overwrite()).unwrap();
}

#[test]
fn a_second_writer_of_the_same_destination_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ds");
    let mut first = DatasetWriter::create(&dest, schema(), DatasetWriteOptions::default()).unwrap();
    first.write(&sample(1)).unwrap();
    for options in [DatasetWriteOptions::default(), overwrite()] {
        let err = DatasetWriter::create(&dest, schema(), options).unwrap_err();
        assert!(
            matches!(err, FormatError::DestinationBusy { .. })
                && err.to_string().contains("another writer"),
            "{err}"
        );
    }
    // the refused writers did not disturb the first one
    first.finish().unwrap();
    assert_eq!(Dataset::open(&dest).unwrap().get(0).unwrap(), sample(1));
    // the claim is gone with its writer: the next one finds a dataset, not a busy destination
    assert!(matches!(
        write_one(&dest, DatasetWriteOptions::default()),
        Err(FormatError::DestinationExists { .. })
    ));
    assert_eq!(names(tmp.path()), ["ds"], "no lock file left");
}

#[test]
fn a_destination_filled_meanwhile_is_not_replaced_without_overwrite() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("ds");
    let mut w = DatasetWriter::create(&dest, schema(), DatasetWriteOptions::default()).unwrap();
    w.write(&sample(1)).unwrap();
    // something else (not a stokehold writer) puts files there while we write
    fs::create_dir(&dest).unwrap();
    fs::write(dest.join("theirs"), b"theirs").unwrap();
    let err = w.finish().unwrap_err();
    assert!(
        matches!(err, FormatError::DestinationExists { .. }),
        "{err}"
    );
    assert_eq!(names(&dest), ["theirs"]);
    assert_eq!(names(tmp.path()), ["ds"], "staging removed");
}

#[test]
fn an_overwrite_interrupted_between_its_renames_loses_neither_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    // the state a writer that died between "old → replaced" and "new → dest" leaves
    let old = write_dataset(tmp.path(), "old", 4, 1 << 20, 1);
    let new = write_dataset(tmp.path(), "new", 2, 1 << 20, 1);
    let dest = tmp.path().join("ds");
    fs::rename(&old, tmp.path().join(".ds.replaced-999999999")).unwrap();
    fs::rename(&new, tmp.path().join(".ds.partial-999999999")).unwrap();
    // the next writer puts the old dataset back before anything else: the overwrite never
    // happened, so it is the old one that stays
    assert_eq!(sweep_stale_staging(&dest), 1, "the staging directory");
    assert_eq!(Dataset::open(&dest).unwrap().len(), 4);
    assert!(
        verify_dataset(&dest, VerifyOptions::default(), &|_| {})
            .unwrap()
            .ok()
    );
    assert_eq!(names(tmp.path()), ["ds"]);

    // died after "new → dest" but before deleting the old one: the old one goes
    fs::rename(
        write_dataset(tmp.path(), "old", 4, 1 << 20, 1),
        tmp.path().join(".ds.replaced-999999999"),
    )
    .unwrap();
    write_one(&dest, overwrite()).unwrap();
    assert_eq!(Dataset::open(&dest).unwrap().len(), 1);
    assert_eq!(names(tmp.path()), ["ds"]);
}

#[test]
fn urls_are_refused_not_written_as_local_folders() {
    let tmp = tempfile::tempdir().unwrap();
    // with the `remote` feature, object-store URLs are read and written there
    // (tests/remote.rs); other schemes are refused either way
    #[cfg(feature = "remote")]
    let (url, errs) = {
        let url = "ftp://bucket/ds";
        let w = write_one(Path::new(url), DatasetWriteOptions::default()).unwrap_err();
        (url, [w, Dataset::open(url).unwrap_err()])
    };
    #[cfg(not(feature = "remote"))]
    let (url, errs) = {
        let url = "s3://bucket/ds";
        let errs = [
            write_one(Path::new(url), DatasetWriteOptions::default()).unwrap_err(),
            Dataset::open(url).unwrap_err(),
            verify_dataset(Path::new(url), VerifyOptions::default(), &|_| {}).unwrap_err(),
        ];
        (url, errs)
    };
    for err in errs {
        assert!(
            matches!(err, FormatError::RemoteUnsupported { .. }) && err.to_string().contains(url),
            "{err}"
        );
    }
    assert!(!Path::new("s3:").exists() && !Path::new("ftp:").exists());
    drop(tmp);
}

/// The in-place protocol (the manifest last) is the same code for every location that is not a
/// local directory: here a memory location, in tests/it/s3.rs the S3 server.
#[test]
fn a_dataset_written_in_place_appears_with_its_manifest_and_an_overwrite_keeps_the_old_until_then()
{
    use std::sync::Arc;
    use stokehold_format::Manifest;
    use stokehold_storage::{Location, ManifestIo, MemoryDir, OpenOptions};
    let small = |overwrite| DatasetWriteOptions {
        target_shard_bytes: 200,
        overwrite,
        ..DatasetWriteOptions::default()
    };
    let listed = |m: &MemoryDir| m.list().unwrap().into_keys().collect::<Vec<_>>();
    let open = |m: &Arc<MemoryDir>| {
        let manifest = Manifest::read(&**m, &Default::default())?;
        Dataset::open_in(m.clone(), "mem".into(), manifest, OpenOptions::default())
    };
    let mem = Arc::new(MemoryDir::new("mem://ds"));
    let mut w = DatasetWriter::create_in(mem.clone(), schema(), small(false)).unwrap();
    for i in 0..30 {
        w.write(&sample(i)).unwrap();
    }
    w.add_file("skipped.txt", b"none\n").unwrap();
    let before = listed(&mem);
    assert!(
        before.len() > 3,
        "closed shards are written as the writer goes"
    );
    assert!(!before.contains(&"manifest.json".to_string()) && open(&mem).is_err());
    let old = w.finish().unwrap();
    let ds = open(&mem).unwrap();
    assert_eq!((ds.len(), ds.get(7).unwrap()), (30, sample(7)));

    // refused without overwrite; with it, the old dataset reads until the new manifest
    let err = DatasetWriter::create_in(mem.clone(), schema(), small(false)).unwrap_err();
    assert!(
        matches!(err, FormatError::DestinationExists { .. }),
        "{err}"
    );
    let mut w = DatasetWriter::create_in(mem.clone(), schema(), small(true)).unwrap();
    for i in 100..110 {
        w.write(&sample(i)).unwrap();
    }
    assert_eq!(open(&mem).unwrap().len(), 30);
    let new = w.finish().unwrap();
    let ds = open(&mem).unwrap();
    assert_eq!((ds.len(), ds.get(3).unwrap()), (10, sample(103)));
    let mut expected: Vec<String> = new.shards.iter().map(|s| s.file.clone()).collect();
    expected.push("manifest.json".into());
    expected.sort();
    assert_eq!(
        listed(&mem),
        expected,
        "the old shards and extra file deleted"
    );
    assert!(
        old.shards
            .iter()
            .all(|o| expected.iter().all(|n| *n != o.file))
    );

    // a writer dropped unfinished leaves nothing; foreign objects are refused and kept
    let fresh = Arc::new(MemoryDir::new("mem://other"));
    let mut w = DatasetWriter::create_in(fresh.clone(), schema(), small(false)).unwrap();
    for i in 0..30 {
        w.write(&sample(i)).unwrap();
    }
    drop(w);
    assert_eq!(listed(&fresh), Vec::<String>::new());
    fresh.put("notes.txt", b"mine").unwrap();
    for overwrite in [false, true] {
        let err = DatasetWriter::create_in(fresh.clone(), schema(), small(overwrite)).unwrap_err();
        assert!(
            matches!(err, FormatError::NotReplaceable { .. })
                && err.to_string().contains("notes.txt"),
            "{err}"
        );
    }
    assert_eq!(listed(&fresh), ["notes.txt"]);
}
