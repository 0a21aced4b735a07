//! Object storage against a real S3-compatible server (moto, started by the tests on 127.0.0.1),
//! with faults injected by a proxy between the client and the server (docs/reliability.md,
//! "Object storage").

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use stokehold_testkit as testing;

use stokehold_format::{FieldValue, FormatError, Schema, Storage};
use stokehold_storage::remote::{ObjectStoreDir, RemoteObject, RemoteStore};
use stokehold_storage::{Dataset, DatasetWriteOptions, DatasetWriter, OpenOptions, conformance};
use stokehold_testkit::{FaultProxy, Faults, S3Server};

fn bucket(name: &str) -> (&'static S3Server, String) {
    let s = S3Server::shared();
    s.create_bucket(name).unwrap();
    (s, format!("s3://{name}"))
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i ^ seed).wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

/// One object of `len` bytes under `url`, opened through `endpoint` (the server or a proxy).
fn object(
    url: &str,
    endpoint: &str,
    extra: &[(&str, &str)],
    len: usize,
) -> (RemoteObject, Vec<u8>) {
    let mut opts = testing::options(endpoint);
    for (k, v) in extra {
        opts.insert(k.to_string(), v.to_string());
    }
    let store = RemoteStore::open(url, &opts).unwrap();
    let data = pattern(len, len as u64);
    testing::put(&store, "blob.bin", data.clone()).unwrap();
    (store.object("blob.bin").unwrap(), data)
}

#[test]
fn remote_objects_pass_the_storage_conformance_suite() {
    let (server, url) = bucket("conformance");
    let store = RemoteStore::open(
        &format!("{url}/suite"),
        &testing::options(&server.endpoint()),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let open = |path: &Path| -> std::io::Result<Box<dyn Storage>> {
        let name = path.file_name().unwrap().to_str().unwrap();
        testing::put(&store, name, std::fs::read(path)?)?;
        Ok(Box::new(store.object(name)?))
    };
    conformance::check_storage("remote", dir.path(), &open).unwrap();
}

#[test]
fn an_s3_prefix_passes_the_location_conformance_suite() {
    let (server, url) = bucket("location");
    let opts = testing::options(&server.endpoint());
    for prefix in ["suite", "nested/deeper/suite"] {
        let loc = ObjectStoreDir::open(Path::new(&format!("{url}/{prefix}")), &opts).unwrap();
        conformance::check_location(prefix, &loc).unwrap();
    }
}

fn write_dataset(dir: &Path) {
    let schema = Schema::from_specs([("data", "bytes"), ("label", "int64")]).unwrap();
    let options = DatasetWriteOptions {
        target_shard_bytes: 64 << 10,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(dir, schema, options).unwrap();
    for i in 0..400u64 {
        let len = 100 + (i as usize * 37) % 3000;
        w.write(&[
            FieldValue::Bytes(pattern(len, i).into()),
            FieldValue::Int64(i as i64),
        ])
        .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn a_dataset_in_s3_reads_the_same_records_as_the_local_copy() {
    let (server, url) = bucket("dataset");
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write_dataset(&local);
    let url = format!("{url}/some/prefix/ds");
    let opts = testing::options(&server.endpoint());
    testing::upload_dir(&local, &url, &opts).unwrap();

    let a = Dataset::open(&local).unwrap();
    assert!(a.shards().len() > 5, "several shards: {}", a.shards().len());
    for with_slash in [false, true] {
        let u = if with_slash {
            format!("{url}/")
        } else {
            url.clone()
        };
        let b = Dataset::open_with(
            &u,
            OpenOptions {
                storage_options: opts.clone(),
                ..OpenOptions::default()
            },
        )
        .unwrap();
        assert_eq!(b.manifest(), a.manifest());
        // the opening in batches: the manifest (HEAD, GET), then every shard's HEAD, then
        // every shard's header and tail (which holds its meta block and index), nothing more
        let shards = a.shards().len() as u64;
        assert_eq!(b.remote_stats().unwrap().requests, 2 + 3 * shards);
        assert_eq!(b.shards()[0].source().kind(), "remote");
        assert!(b.shards()[0].path().display().to_string().starts_with(&url));
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for i in 0..a.len() {
            a.read_record(i, &mut x).unwrap();
            b.read_record(i, &mut y).unwrap();
            assert_eq!(x, y, "record {i}");
            assert_eq!(a.get(i).unwrap(), b.get(i).unwrap());
        }
    }
    // read whole into memory at open
    let m = Dataset::open_with(
        &url,
        OpenOptions {
            storage_options: opts.clone(),
            ..OpenOptions::with_access(stokehold_storage::Access::Memory)
        },
    )
    .unwrap();
    assert_eq!(m.get(399).unwrap(), a.get(399).unwrap());
}

/// Fault tests share one proxy per test, each its own bucket.
fn proxied(
    bucket_name: &str,
    extra: &[(&str, &str)],
    len: usize,
) -> (FaultProxy, RemoteObject, Vec<u8>) {
    let (server, url) = bucket(bucket_name);
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let (obj, data) = object(&url, &proxy.endpoint(), extra, len);
    (proxy, obj, data)
}

#[test]
fn throttling_and_server_errors_are_retried_and_counted() {
    let (proxy, obj, data) = proxied("throttled", &[], 300_000);
    let before = obj.stats();
    proxy.set(Faults {
        fail_gets: 3,
        ..Faults::default()
    });
    let mut buf = vec![0u8; 200_000];
    obj.read_at(50_000, &mut buf).unwrap();
    assert_eq!(buf, data[50_000..250_000]);
    let after = obj.stats();
    assert_eq!(proxy.injected(), 3);
    assert_eq!(after.requests - before.requests, 1, "{after:?}");
    assert_eq!(after.http_requests - before.http_requests, 4, "{after:?}");
    assert_eq!(after.retries - before.retries, 3, "{after:?}");
    assert_eq!(after.failures - before.failures, 3, "{after:?}");
}

#[test]
fn a_body_reset_cut_or_short_is_resumed_from_the_exact_offset() {
    let (proxy, obj, data) = proxied("broken-bodies", &[], 1 << 20);
    for faults in [
        Faults {
            reset_bodies: 1,
            ..Faults::default()
        },
        Faults {
            cut_bodies: 2,
            ..Faults::default()
        },
        Faults {
            short_bodies: 3,
            ..Faults::default()
        },
        Faults {
            reset_bodies: 1,
            cut_bodies: 1,
            short_bodies: 1,
            fail_gets: 1,
            ..Faults::default()
        },
    ] {
        let injected = proxy.injected();
        let before = obj.stats();
        proxy.set(faults.clone());
        let mut buf = vec![0u8; 700_001];
        obj.read_at(12_345, &mut buf).unwrap();
        assert!(
            buf == data[12_345..12_345 + 700_001],
            "{faults:?}: other bytes"
        );
        let n = faults.reset_bodies + faults.cut_bodies + faults.short_bodies + faults.fail_gets;
        assert_eq!(proxy.injected() - injected, u64::from(n), "{faults:?}");
        let after = obj.stats();
        assert_eq!(
            after.short_bodies - before.short_bodies,
            u64::from(faults.short_bodies)
        );
        assert!(
            after.retries - before.retries >= u64::from(n),
            "{faults:?} {after:?}"
        );
    }
}

#[test]
fn faults_beyond_the_retry_budget_fail_with_the_url_and_range_never_a_gap() {
    let (proxy, obj, _) = proxied("hopeless", &[("retries", "2")], 100_000);
    proxy.set(Faults {
        fail_gets: 100,
        ..Faults::default()
    });
    let mut buf = vec![0u8; 5000];
    let e = obj.read_at(1000, &mut buf).unwrap_err().to_string();
    assert!(
        e.contains("s3://hopeless/blob.bin") && e.contains("1000..6000") && e.contains("503"),
        "{e}"
    );
    assert_eq!(proxy.injected(), 3, "the first try and 2 retries");
    proxy.set(Faults {
        short_bodies: 100,
        ..Faults::default()
    });
    let e = obj.read_at(1000, &mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    let e = e.to_string();
    assert!(
        e.contains("s3://hopeless/blob.bin") && e.contains("ended early"),
        "{e}"
    );
}

#[test]
fn an_object_replaced_while_open_is_an_error_naming_its_key() {
    let (server, url) = bucket("replaced");
    let (obj, data) = object(&url, &server.endpoint(), &[], 10_000);
    let mut buf = vec![0u8; 100];
    obj.read_at(0, &mut buf).unwrap();
    assert_eq!(buf, data[..100]);
    let store = RemoteStore::open(&url, &testing::options(&server.endpoint())).unwrap();
    testing::put(&store, "blob.bin", pattern(10_000, 7)).unwrap();
    let e = obj.read_at(0, &mut buf).unwrap_err().to_string();
    assert!(
        e.contains("s3://replaced/blob.bin") && e.contains("changed"),
        "{e}"
    );
}

fn open_err(url: &str, opts: BTreeMap<String, String>) -> FormatError {
    Dataset::open_with(
        url,
        OpenOptions {
            storage_options: opts,
            ..OpenOptions::default()
        },
    )
    .unwrap_err()
}

#[test]
fn a_missing_bucket_key_or_bad_option_is_one_clear_error_and_secrets_stay_secret() {
    let (server, url) = bucket("errors");
    let opts = testing::options(&server.endpoint());
    let secret = opts["secret"].clone();

    // a missing bucket is named as such (one listing tells it from a missing key)
    let e = open_err("s3://no-such-bucket/ds", opts.clone()).to_string();
    assert!(
        e.contains("s3://no-such-bucket/ds/manifest.json")
            && e.contains("the bucket \"no-such-bucket\" does not exist"),
        "{e}"
    );
    let e = open_err(&format!("{url}/missing"), opts.clone()).to_string();
    assert!(
        e.contains("s3://errors/missing/manifest.json") && e.contains("not found"),
        "{e}"
    );

    let mut bad = opts.clone();
    bad.insert("no_such_option".into(), "hunter2".into());
    let e = open_err(&url, bad);
    assert!(matches!(e, FormatError::Remote { .. }), "{e:?}");
    let e = e.to_string();
    assert!(
        e.contains("no_such_option") && !e.contains("hunter2"),
        "{e}"
    );

    let e = open_err("s3://user:hunter2@errors/ds", opts.clone()).to_string();
    assert!(!e.contains("hunter2") && e.contains("credentials"), "{e}");

    // a shard missing from a dataset names the shard's URL
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("ds");
    write_dataset(&local);
    let store = RemoteStore::open(&format!("{url}/partial"), &opts).unwrap();
    testing::put(
        &store,
        "manifest.json",
        std::fs::read(local.join("manifest.json")).unwrap(),
    )
    .unwrap();
    let e = open_err(&format!("{url}/partial"), opts.clone()).to_string();
    assert!(
        e.contains("s3://errors/partial/shard-") && e.contains("not found"),
        "{e}"
    );

    let options = OpenOptions {
        storage_options: opts,
        ..OpenOptions::default()
    };
    let debug = format!(
        "{options:?} {:?}",
        RemoteStore::open(&url, &options.storage_options).unwrap()
    );
    assert!(
        !debug.contains(&secret) && debug.contains("secret"),
        "{debug}"
    );
    let _: Arc<RemoteStore> = store;
}

/// Records of `len` bytes every `stride` bytes of an object of `size`: (start, end).
fn records(size: u64, len: u64, stride: u64) -> Vec<(u64, u64)> {
    (0..size / stride)
        .map(|i| (i * stride, i * stride + len))
        .collect()
}

#[test]
fn records_announced_ahead_are_read_from_the_ranges_fetched_ahead_in_few_requests() {
    let (proxy, obj, data) = proxied("prefetch", &[], 1_000_000);
    // 20 ms a request: reads that waited for their own requests would take 200 x 20 ms
    proxy.set(Faults {
        delay: std::time::Duration::from_millis(20),
        ..Faults::default()
    });
    let recs = records(1_000_000, 3_000, 5_000); // 200 records, gaps of 2 KB: coalesced
    let before = obj.stats();
    obj.will_read(&recs);
    let mut buf = Vec::new();
    for &(s, e) in recs.iter().rev() {
        buf.resize((e - s) as usize, 0);
        obj.read_at(s, &mut buf).unwrap();
        assert_eq!(buf, data[s as usize..e as usize]);
    }
    let after = obj.stats();
    let p = after.prefetch;
    assert_eq!((p.hits, p.misses), (200, 0), "{after:?}");
    assert_eq!(
        p.requests, 1,
        "one GET for neighbours 2 KB apart: {after:?}"
    );
    assert_eq!(after.requests - before.requests, 1, "{after:?}");
    // the same records again: not announced, so read by requests of their own
    obj.read_at(recs[3].0, &mut buf[..100]).unwrap();
    assert_eq!(
        buf[..100],
        data[recs[3].0 as usize..recs[3].0 as usize + 100]
    );
    assert_eq!(obj.stats().prefetch.misses, 1);
    assert_eq!(obj.stats().requests - after.requests, 1);
}

#[test]
fn dense_announcements_are_fetched_in_large_gets_whose_gaps_later_announcements_fill() {
    // what a shard-block order announces: half the records of a span at a time, at random
    let (_proxy, obj, data) = proxied("prefetch-dense", &[], 4_080_000);
    // 51 records of 80 KB, back to back: the even ones span the object, the odd ones lie
    // between them
    let all = records(4_080_000, 80_000, 80_000);
    let (even, odd): (Vec<_>, Vec<_>) = all.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let even: Vec<(u64, u64)> = even.into_iter().map(|x| *x.1).collect();
    let odd: Vec<(u64, u64)> = odd.into_iter().map(|x| *x.1).collect();
    obj.will_read(&even); // gaps of 80 KB (more than GAP), half the span hinted
    let first = obj.stats().prefetch.requests;
    assert_eq!(first, 1, "one GET for the dense announcement");
    obj.will_read(&odd); // inside the range held: joins it
    assert_eq!(obj.stats().prefetch.requests, 1, "{:?}", obj.stats());
    let mut buf = Vec::new();
    for &(s, e) in &all {
        buf.resize((e - s) as usize, 0);
        obj.read_at(s, &mut buf).unwrap();
        assert_eq!(buf, data[s as usize..e as usize]);
    }
    let p = obj.stats().prefetch;
    assert_eq!((p.hits, p.misses, p.wasted_bytes), (51, 0, 0), "{p:?}");
    // sparse announcements (a global shuffle of a large dataset) stay one GET per record
    let (_proxy, obj, _) = proxied("prefetch-sparse", &[], 4_000_000);
    let sparse = records(4_000_000, 50_000, 400_000);
    obj.will_read(&sparse);
    assert_eq!(obj.stats().prefetch.requests, sparse.len() as u64);
}

#[test]
fn a_failed_prefetch_is_read_again_directly_and_reads_across_ranges_are_whole() {
    // no retries inside object_store: the one failing GET fails the prefetch itself
    let (proxy, obj, data) = proxied("prefetch-fail", &[("retries", "0")], 40_000_000);
    let a = (1_000_000u64, 1_000_100u64);
    let far = (30_000_000u64, 30_000_100u64); // more than a GET apart: another range
    proxy.set(Faults {
        fail_gets: 1,
        ..Faults::default()
    });
    obj.will_read(&[a]);
    // wait for the failing prefetch to have happened before announcing the next
    let t = std::time::Instant::now();
    while proxy.injected() == 0 && t.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    obj.will_read(&[far]);
    let mut buf = vec![0u8; 100];
    obj.read_at(a.0, &mut buf).unwrap();
    assert_eq!(buf, data[a.0 as usize..a.1 as usize]);
    // one read spanning the second range and bytes nobody announced
    let mut buf = vec![0u8; 300];
    obj.read_at(far.0 - 100, &mut buf).unwrap();
    assert_eq!(buf, data[far.0 as usize - 100..far.0 as usize + 200]);
    let p = obj.stats().prefetch;
    assert_eq!((p.requests, p.hits, p.misses), (2, 0, 2), "{p:?}");
    assert_eq!(proxy.injected(), 1);
}

#[test]
fn prefetch_stays_within_its_byte_budget_and_drops_what_is_never_read() {
    let (_proxy, obj, data) = proxied(
        "prefetch-budget",
        &[("prefetch_bytes", "250000")],
        2_000_000,
    );
    // ten ranges of 100 KB, far apart: at most two fit the budget at once
    let far: Vec<(u64, u64)> = (0..10u64)
        .map(|i| (i * 190_000, i * 190_000 + 100_000))
        .collect();
    for r in &far {
        obj.will_read(std::slice::from_ref(r));
        std::thread::sleep(std::time::Duration::from_millis(50)); // let it finish
    }
    let p = obj.stats().prefetch;
    assert!(p.requests + p.refused == 10 && p.requests >= 2, "{p:?}");
    assert!(
        p.wasted_bytes >= 100_000 * (p.requests - 2),
        "older ranges dropped: {p:?}"
    );
    // the last one announced is still held; the first was dropped: both read right
    let mut buf = vec![0u8; 100_000];
    for r in [far[9], far[0]] {
        obj.read_at(r.0, &mut buf).unwrap();
        assert_eq!(buf, data[r.0 as usize..r.1 as usize]);
    }
    let p2 = obj.stats().prefetch;
    assert_eq!((p2.hits - p.hits, p2.misses - p.misses), (1, 1), "{p2:?}");
    // a budget of 0 turns prefetch off
    let (_proxy, obj, _) = proxied("prefetch-off", &[("prefetch_bytes", "0")], 10_000);
    obj.will_read(&[(0, 100)]);
    assert_eq!(obj.stats().prefetch.requests, 0);
}

// ---- writing to object storage (docs/storage.md, "Writing to object storage") ----

/// Storage options for `endpoint` with `extra` on top.
fn with(endpoint: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut opts = testing::options(endpoint);
    for (k, v) in extra {
        opts.insert(k.to_string(), v.to_string());
    }
    opts
}

fn bytes_schema() -> Schema {
    Schema::from_specs([("data", "bytes"), ("label", "int64")]).unwrap()
}

/// Sample `i` of the datasets written below (`seed` tells datasets apart).
fn sample(i: u64, len: usize, seed: u64) -> Vec<FieldValue<'static>> {
    vec![
        FieldValue::Bytes(pattern(len, i ^ (seed << 32)).into()),
        FieldValue::Int64(i as i64),
    ]
}

fn remote_writer(
    url: &str,
    opts: &BTreeMap<String, String>,
    shard_bytes: u64,
    overwrite: bool,
) -> Result<DatasetWriter, FormatError> {
    let options = DatasetWriteOptions {
        target_shard_bytes: shard_bytes,
        overwrite,
        ..DatasetWriteOptions::default()
    };
    DatasetWriter::create_with(url, bytes_schema(), options, opts)
}

fn open_remote(url: &str, opts: &BTreeMap<String, String>) -> Result<Dataset, FormatError> {
    Dataset::open_with(
        url,
        OpenOptions {
            storage_options: opts.clone(),
            ..OpenOptions::default()
        },
    )
}

/// Every sample of `ds` is `sample(i, len(i), seed)`.
fn assert_samples(ds: &Dataset, n: u64, len: impl Fn(u64) -> usize, seed: u64) {
    assert_eq!(ds.len(), n);
    for i in 0..n {
        assert_eq!(ds.get(i).unwrap(), sample(i, len(i), seed), "sample {i}");
    }
}

#[test]
fn a_dataset_written_to_s3_in_parts_reads_back_the_same_and_exists_only_once_its_manifest_is_written()
 {
    let (server, url) = bucket("write-parts");
    let url = format!("{url}/out/ds");
    // parts of 5 MiB (S3's smallest): the 13 MiB shard goes up in three parts
    let opts = with(&server.endpoint(), &[("upload_part_bytes", "5242880")]);
    let mut w = remote_writer(&url, &opts, 64 << 20, false).unwrap();
    let len = |_| 130_000usize;
    for i in 0..100 {
        w.write(&sample(i, len(i), 1)).unwrap();
    }
    w.add_file("skipped.txt", b"none\n").unwrap();
    // nothing looks like a dataset before the manifest
    let err = open_remote(&url, &opts).unwrap_err().to_string();
    assert!(err.contains("manifest.json"), "{err}");
    let before = testing::names(&url, &opts).unwrap();
    assert!(!before.contains(&"manifest.json".to_string()), "{before:?}");
    let manifest = w.finish().unwrap();
    assert_eq!(manifest.shards.len(), 1);
    let ds = open_remote(&url, &opts).unwrap();
    assert_eq!(ds.manifest(), &manifest);
    assert_samples(&ds, 100, len, 1);
    let names = testing::names(&url, &opts).unwrap();
    assert_eq!(names.len(), 3, "{names:?}"); // manifest, shard, skipped.txt
    assert!(names.contains(&"skipped.txt".to_string()));

    // many small shards, each one PUT
    let url2 = format!("{url}-small");
    let mut w = remote_writer(&url2, &opts, 16 << 10, false).unwrap();
    let len = |i: u64| 200 + (i as usize * 131) % 4000;
    for i in 0..300 {
        w.write(&sample(i, len(i), 2)).unwrap();
    }
    assert!(w.finish().unwrap().shards.len() > 10);
    assert_samples(&open_remote(&url2, &opts).unwrap(), 300, len, 2);
}

#[test]
fn an_unfinished_or_aborted_remote_writer_leaves_no_object() {
    let (server, url) = bucket("write-abort");
    let opts = testing::options(&server.endpoint());
    for abort in [false, true] {
        let url = format!("{url}/ds-{abort}");
        let mut w = remote_writer(&url, &opts, 16 << 10, false).unwrap();
        for i in 0..200 {
            w.write(&sample(i, 1000, 3)).unwrap();
        }
        w.add_file("kept-as-is.txt", b"x\n").unwrap();
        assert!(
            testing::names(&url, &opts).unwrap().len() > 5,
            "closed shards are uploaded as the writer goes"
        );
        if abort {
            w.abort();
        } else {
            drop(w);
        }
        assert_eq!(testing::names(&url, &opts).unwrap(), Vec::<String>::new());
    }
}

#[test]
fn an_overwrite_in_s3_keeps_the_old_dataset_until_the_new_manifest_then_deletes_its_shards() {
    let (server, url) = bucket("write-overwrite");
    let url = format!("{url}/ds");
    let opts = testing::options(&server.endpoint());
    let len = |i: u64| 500 + (i as usize % 7) * 100;
    let mut w = remote_writer(&url, &opts, 16 << 10, false).unwrap();
    for i in 0..100 {
        w.write(&sample(i, len(i), 4)).unwrap();
    }
    let old = w.finish().unwrap();

    // without overwrite: refused, nothing touched
    let err = remote_writer(&url, &opts, 16 << 10, false).unwrap_err();
    assert!(
        matches!(err, FormatError::DestinationExists { .. }),
        "{err}"
    );
    let mut w = remote_writer(&url, &opts, 16 << 10, true).unwrap();
    for i in 0..60 {
        w.write(&sample(i, len(i), 5)).unwrap();
    }
    // the old dataset still reads while the new one is written
    assert_samples(&open_remote(&url, &opts).unwrap(), 100, len, 4);
    let new = w.finish().unwrap();
    assert_samples(&open_remote(&url, &opts).unwrap(), 60, len, 5);
    let mut expected: Vec<String> = new.shards.iter().map(|s| s.file.clone()).collect();
    expected.push("manifest.json".into());
    expected.sort();
    assert_eq!(testing::names(&url, &opts).unwrap(), expected);
    assert!(
        old.shards
            .iter()
            .all(|s| new.shards.iter().all(|n| n.file != s.file)),
        "shards of a new writer never take an old shard's name"
    );
}

#[test]
fn a_prefix_with_foreign_objects_is_refused_and_a_dead_writers_leftovers_are_removed() {
    let (server, url) = bucket("write-prefix");
    let opts = testing::options(&server.endpoint());
    let store = RemoteStore::open(&format!("{url}/mine"), &opts).unwrap();
    testing::put(&store, "notes.txt", b"keep me".to_vec()).unwrap();
    for overwrite in [false, true] {
        let err = remote_writer(&format!("{url}/mine"), &opts, 1 << 20, overwrite).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("notes.txt") && msg.contains(&format!("{url}/mine")),
            "{msg}"
        );
    }
    assert_eq!(
        testing::names(&format!("{url}/mine"), &opts).unwrap(),
        ["notes.txt"]
    );
    // a writer that died before its manifest left a shard: the next writer removes it
    let store = RemoteStore::open(&format!("{url}/dead"), &opts).unwrap();
    testing::put(&store, "shard-0badc0de-000000.skh", vec![1, 2, 3]).unwrap();
    let mut w = remote_writer(&format!("{url}/dead"), &opts, 1 << 20, false).unwrap();
    w.write(&sample(0, 10, 6)).unwrap();
    let m = w.finish().unwrap();
    let names = testing::names(&format!("{url}/dead"), &opts).unwrap();
    assert_eq!(names, ["manifest.json".into(), m.shards[0].file.clone()]);
}

#[test]
fn failed_uploads_are_retried_and_an_upload_that_keeps_failing_is_an_error_that_leaves_nothing() {
    let (server, url) = bucket("write-faults");
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let direct = testing::options(&server.endpoint());
    let opts = with(&proxy.endpoint(), &[("upload_part_bytes", "5242880")]);
    let url_ok = format!("{url}/retried");
    let mut w = remote_writer(&url_ok, &opts, 64 << 20, false).unwrap();
    proxy.set(Faults {
        fail_writes: 4,
        ..Faults::default()
    });
    for i in 0..90 {
        w.write(&sample(i, 130_000, 7)).unwrap();
    }
    w.finish().unwrap();
    assert_eq!(proxy.injected(), 4);
    assert_samples(&open_remote(&url_ok, &direct).unwrap(), 90, |_| 130_000, 7);

    // beyond the retry budget: an error naming the object, and nothing left behind
    let url_bad = format!("{url}/failed");
    let opts = with(&proxy.endpoint(), &[("retries", "1")]);
    let mut w = remote_writer(&url_bad, &opts, 16 << 10, false).unwrap();
    for i in 0..50 {
        w.write(&sample(i, 1000, 8)).unwrap();
    }
    proxy.set(Faults {
        fail_writes: 1000,
        ..Faults::default()
    });
    let err = (50..200)
        .find_map(|i| w.write(&sample(i, 1000, 8)).err())
        .expect("closing a shard fails once every write to the store does");
    let msg = err.to_string();
    assert!(msg.contains(&url_bad) && msg.contains(".skh"), "{msg}");
    // the store works again: the writer, given up, deletes what it had uploaded
    proxy.set(Faults::default());
    drop(w);
    assert_eq!(
        testing::names(&url_bad, &direct).unwrap(),
        Vec::<String>::new()
    );
}
