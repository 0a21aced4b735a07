//! The disk cache of shards (rows E1–E3 of the reliability matrix): atomic publication, orphans
//! swept after a crash, failures bypassing the cache, a limit below one shard refused, and
//! several processes sharing one directory with each shard fetched once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use stokehold::cache::disk::{DiskCache, open_dataset};
use stokehold::format::{
    Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, OpenOptions, Schema,
};

/// A dataset of `n` records of about 2 KiB over shards of about 16 KiB.
fn dataset(dir: &Path, n: u64) -> PathBuf {
    let path = dir.join("src");
    let schema = Schema::from_specs([("b", "bytes")]).unwrap();
    let opts = DatasetWriteOptions {
        target_shard_bytes: 16 << 10,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
    for i in 0..n {
        let b: Vec<u8> = (0..2000u64).map(|k| (k * 31 + i * 7) as u8).collect();
        w.write(&[FieldValue::Bytes(b.into())]).unwrap();
    }
    w.finish().unwrap();
    path
}

fn all_records(ds: &Dataset) -> Vec<Vec<u8>> {
    (0..ds.len())
        .map(|i| {
            let mut v = Vec::new();
            ds.read_record(i, &mut v).unwrap();
            v
        })
        .collect()
}

fn files(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| pred(n))
        .collect();
    v.sort();
    v
}

fn complete(dir: &Path) -> Vec<String> {
    files(dir, |n| n.ends_with(".skh") && !n.contains(".tmp-"))
}

#[test]
fn shards_are_copied_checked_and_then_read_locally() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 60);
    let want = all_records(&Dataset::open(&src).unwrap());
    let cache = DiskCache::open(tmp.path().join("cache"), 1 << 30).unwrap();
    let (ds, progress) = open_dataset(&src, &cache, OpenOptions::default()).unwrap();
    assert_eq!(all_records(&ds), want, "reads while copying");
    assert!(progress.wait(&cache, Duration::from_secs(20)));
    let n = ds.shards().len();
    assert!(n >= 5, "{n} shards");
    assert_eq!(complete(cache.dir()).len(), n);
    assert_eq!(cache.stats().fetched, n as u64);
    // the copies are what is read now: damage the source, the data stays right
    let originals: Vec<(PathBuf, Vec<u8>)> = ds
        .shards()
        .iter()
        .map(|s| (s.path().to_path_buf(), std::fs::read(s.path()).unwrap()))
        .collect();
    for s in ds.shards() {
        std::fs::write(s.path(), b"gone").unwrap();
    }
    assert_eq!(all_records(&ds), want, "reads from the copies");
    drop(ds);
    // another process (here: another cache handle) finds every copy and copies nothing; the
    // source's manifest and footers are still read at open, so restore the source first
    for (p, b) in originals {
        std::fs::write(p, b).unwrap();
    }
    let cache2 = DiskCache::open(tmp.path().join("cache"), 1 << 30).unwrap();
    let (_ds2, progress2) = open_dataset(&src, &cache2, OpenOptions::default()).unwrap();
    assert!(progress2.wait(&cache2, Duration::from_secs(20)));
    let s = cache2.stats();
    assert_eq!((s.fetched, s.reused), (0, n as u64), "{s:?}");
}

#[test]
fn a_limit_below_one_shard_is_a_configuration_error() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 20);
    let cache = DiskCache::open(tmp.path().join("cache"), 1000).unwrap();
    let err = open_dataset(&src, &cache, OpenOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("below the largest shard"), "{err}");
}

#[test]
fn a_full_disk_bypasses_the_cache_without_losing_data() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 40);
    let want = all_records(&Dataset::open(&src).unwrap());
    let cache = DiskCache::open(tmp.path().join("cache"), 1 << 30).unwrap();
    cache.inject_copy_fault(Some((5000, false)));
    let (ds, progress) = open_dataset(&src, &cache, OpenOptions::default()).unwrap();
    assert!(
        !progress.wait(&cache, Duration::from_secs(20)),
        "no copy can finish"
    );
    cache.inject_copy_fault(None);
    assert_eq!(cache.stats().bypassed, ds.shards().len() as u64);
    assert_eq!(all_records(&ds), want);
    assert!(complete(cache.dir()).is_empty());
    assert!(
        files(cache.dir(), |n| n.contains(".tmp-")).is_empty(),
        "failed copies are removed"
    );
}

#[test]
fn a_small_limit_caches_what_fits_and_evicts_other_datasets_first() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 60);
    let shard = Dataset::open(&src).unwrap().shards()[0].file_len();
    let dir = tmp.path().join("cache");
    std::fs::create_dir_all(&dir).unwrap();
    // an old entry of another dataset
    std::fs::write(
        dir.join("00000000-00000000-old.skh"),
        vec![0u8; shard as usize],
    )
    .unwrap();
    let cache = DiskCache::open(&dir, 3 * shard + shard / 2).unwrap();
    let (ds, progress) = open_dataset(&src, &cache, OpenOptions::default()).unwrap();
    assert!(
        !progress.wait(&cache, Duration::from_secs(20)),
        "not everything fits"
    );
    let s = cache.stats();
    assert_eq!(s.evicted, 1, "the other dataset's entry made room");
    assert_eq!(progress.ready(), 3);
    assert_eq!(s.bypassed, ds.shards().len() as u64 - 3);
    assert!(!complete(&dir).contains(&"00000000-00000000-old.skh".to_string()));
    let want = all_records(&Dataset::open(&src).unwrap());
    assert_eq!(all_records(&ds), want);
}

/// Child process entry: open the dataset through the cache in `STOKEHOLD_TEST_CACHE` and do
/// what `STOKEHOLD_TEST_MODE` says.
#[test]
#[ignore = "run as a child process by the tests below"]
fn child() {
    let Ok(mode) = std::env::var("STOKEHOLD_TEST_MODE") else {
        return;
    };
    let src = PathBuf::from(std::env::var("STOKEHOLD_TEST_SRC").unwrap());
    let cache = DiskCache::open(std::env::var("STOKEHOLD_TEST_CACHE").unwrap(), 1 << 30).unwrap();
    if mode == "crash" {
        // die in the middle of the first copy
        cache.inject_copy_fault(Some((3000, true)));
    }
    let (ds, progress) = open_dataset(&src, &cache, OpenOptions::default()).unwrap();
    assert!(progress.wait(&cache, Duration::from_secs(60)));
    let sum: u64 = all_records(&ds)
        .iter()
        .map(|r| r.iter().map(|&b| u64::from(b)).sum::<u64>())
        .sum();
    let s = cache.stats();
    println!("RESULT fetched={} reused={} sum={sum}", s.fetched, s.reused);
}

fn spawn_child(mode: &str, src: &Path, cache: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "disk_cache::child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("STOKEHOLD_TEST_MODE", mode)
        .env("STOKEHOLD_TEST_SRC", src)
        .env("STOKEHOLD_TEST_CACHE", cache)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn result(out: &std::process::Output) -> (u64, u64, u64) {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or_else(|| panic!("no result in {text}"));
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|kv| kv.split_once('=').unwrap().1.parse().unwrap())
        .collect();
    (v[0], v[1], v[2])
}

// E1
#[test]
fn a_process_killed_while_copying_leaves_only_a_temporary_file_that_is_swept() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 40);
    let dir = tmp.path().join("cache");
    let out = spawn_child("crash", &src, &dir).wait_with_output().unwrap();
    assert!(!out.status.success(), "the child aborted");
    let temps = files(&dir, |n| n.contains(".tmp-"));
    assert_eq!(temps.len(), 1, "{temps:?}");
    assert!(complete(&dir).is_empty(), "nothing published");
    // the next start sweeps it, and copies everything anew
    let cache = DiskCache::open(&dir, 1 << 30).unwrap();
    assert_eq!(cache.stats().swept, 1);
    assert!(files(&dir, |n| n.contains(".tmp-")).is_empty());
    let (ds, progress) = open_dataset(&src, &cache, OpenOptions::default()).unwrap();
    assert!(progress.wait(&cache, Duration::from_secs(20)));
    assert_eq!(all_records(&ds), all_records(&Dataset::open(&src).unwrap()));
}

// E3
#[test]
fn four_processes_share_one_cache_and_each_shard_is_fetched_once() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 200);
    let shards = Dataset::open(&src).unwrap().shards().len() as u64;
    let dir = tmp.path().join("cache");
    let children: Vec<_> = (0..4).map(|_| spawn_child("share", &src, &dir)).collect();
    let results: Vec<(u64, u64, u64)> = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success());
            result(&out)
        })
        .collect();
    let fetched: u64 = results.iter().map(|r| r.0).sum();
    assert_eq!(fetched, shards, "each shard copied once: {results:?}");
    for r in &results {
        assert_eq!(r.0 + r.1, shards, "every shard fetched or reused: {r:?}");
        assert_eq!(r.2, results[0].2, "every process read the same data");
    }
    assert_eq!(complete(&dir).len() as u64, shards);
}

/// A dataset in object storage (moto on 127.0.0.1, started by the test): the first open streams
/// from the store while its shards land in the cache, checked; a later open (another "run") reads
/// the copies and sends no GET for records; the loader over it gives the local batches.
#[test]
fn a_dataset_in_s3_is_copied_to_the_cache_and_later_runs_read_it_locally() {
    use stokehold_testkit as testing;
    use stokehold_testkit::S3Server;
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 60);
    let local = Dataset::open(&src).unwrap();
    let want = all_records(&local);
    let server = S3Server::shared();
    server.create_bucket("diskcache").unwrap();
    let url = "s3://diskcache/runs/ds";
    let storage_options = testing::options(&server.endpoint());
    testing::upload_dir(&src, url, &storage_options).unwrap();
    let options = OpenOptions {
        storage_options,
        ..OpenOptions::default()
    };
    let cache = DiskCache::open(tmp.path().join("cache"), 1 << 30).unwrap();
    let (ds, progress) = open_dataset(Path::new(url), &cache, options.clone()).unwrap();
    assert_eq!(all_records(&ds), want, "reads while copying");
    assert!(progress.wait(&cache, Duration::from_secs(30)));
    let n = ds.shards().len();
    assert_eq!(complete(cache.dir()).len(), n);
    assert_eq!(cache.stats().fetched, n as u64);
    assert!(ds.shards()[0].path().display().to_string().starts_with(url));
    drop(ds);

    // a later run: every copy reused, records read locally (only opening requests)
    let cache = DiskCache::open(tmp.path().join("cache"), 1 << 30).unwrap();
    let (ds, progress) = open_dataset(Path::new(url), &cache, options).unwrap();
    assert!(progress.wait(&cache, Duration::from_secs(30)));
    assert_eq!(cache.stats().reused, n as u64);
    let opened = ds.remote_stats().expect("remote").requests;
    assert_eq!(all_records(&ds), want);
    assert_eq!(
        ds.remote_stats().unwrap().requests,
        opened,
        "no GET for records"
    );
    // the same names for the same URL with or without a trailing slash
    assert_eq!(complete(cache.dir()).len(), n);
}

/// A dataset in object storage read through the cache is read with the network's readahead and
/// gap policy while its shards' reads go to the store, and with a local file's once their copies
/// have landed. (The fetcher asked `kind() == "remote"`, which a cached shard, "disk-cache", never
/// is: a remote dataset behind `cache_dir` got the local-file policy for its remote reads.)
#[test]
fn a_dataset_in_s3_behind_the_cache_reads_with_the_network_policy_until_its_copies_land() {
    use stokehold::fetch::{ByteSource, MAX_GAP, READAHEAD_MIN_SAMPLE, Readahead};
    use stokehold::format::ReadProfile;
    use stokehold_testkit as testing;
    use stokehold_testkit::S3Server;
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path(), 60);
    let server = S3Server::shared();
    server.create_bucket("diskcacheprofile").unwrap();
    let url = "s3://diskcacheprofile/ds";
    let storage_options = testing::options(&server.endpoint());
    testing::upload_dir(&src, url, &storage_options).unwrap();
    let options = OpenOptions {
        storage_options,
        ..OpenOptions::default()
    };
    let profiles = |ds: &Dataset| {
        ds.shards()
            .iter()
            .map(|s| s.source().profile())
            .collect::<Vec<_>>()
    };

    // every copy fails: the shards stay on the store
    let full = DiskCache::open(tmp.path().join("full"), 1 << 30).unwrap();
    full.inject_copy_fault(Some((0, false)));
    let (ds, progress) = open_dataset(Path::new(url), &full, options.clone()).unwrap();
    assert!(!progress.wait(&full, Duration::from_secs(30)));
    assert_eq!(progress.ready(), 0);
    let n = ds.shards().len();
    assert_eq!(profiles(&ds), vec![ReadProfile::Network; n]);
    let bytes = ByteSource::new(std::sync::Arc::new(ds), None);
    assert_eq!(bytes.readahead(READAHEAD_MIN_SAMPLE), Readahead::Fetch);
    assert_eq!(bytes.readahead(1), Readahead::Fetch, "small samples too");
    let sources = std::slice::from_ref(&bytes);
    assert_eq!(
        stokehold::fetch::max_gap(sources, 0, 0, MAX_GAP, MAX_GAP),
        0
    );
    drop(bytes);

    // copies land: local files from then on
    let cache = DiskCache::open(tmp.path().join("cache"), 1 << 30).unwrap();
    let (ds, progress) = open_dataset(Path::new(url), &cache, options).unwrap();
    assert!(progress.wait(&cache, Duration::from_secs(30)));
    assert_eq!(profiles(&ds), vec![ReadProfile::LocalFile; n]);
    let bytes = ByteSource::new(std::sync::Arc::new(ds), None);
    assert_eq!(bytes.readahead(READAHEAD_MIN_SAMPLE), Readahead::Advise);
    assert_eq!(bytes.readahead(1), Readahead::Off);
    let sources = std::slice::from_ref(&bytes);
    assert_eq!(
        stokehold::fetch::max_gap(sources, 0, 0, MAX_GAP, MAX_GAP),
        MAX_GAP
    );
}
