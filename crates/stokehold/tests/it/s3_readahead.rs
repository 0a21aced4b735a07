//! Order-aware readahead from object storage (docs/storage.md, "Order-aware prefetch"): in an
//! order that keeps to a few shards at a time, the loader announces several batches at once, so
//! that their records are fetched in a few large GETs; the batches are those of the same shards
//! read locally. A real S3-compatible server, started by the test.

use std::sync::Arc;

use stokehold_testkit as testing;

use stokehold::format::{
    Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, OpenOptions, Schema,
};
use stokehold::{EngineSpec, Loader};
use stokehold_testkit::S3Server;

/// 400 records of 20 KB over shards of about 1 MiB (8 shards).
fn dataset(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("ds");
    let schema = Schema::from_specs([("b", "bytes")]).unwrap();
    let opts = DatasetWriteOptions {
        target_shard_bytes: 1 << 20,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
    for i in 0..400u64 {
        let b: Vec<u8> = (0..20_000u64).map(|k| (k * 13 + i * 7) as u8).collect();
        w.write(&[FieldValue::Bytes(b.into())]).unwrap();
    }
    w.finish().unwrap();
    path
}

fn loader(ds: Arc<Dataset>, shuffle: serde_json::Value) -> Loader {
    let spec = serde_json::json!({
        "loader": {"batch_size": 8, "threads": 2, "prefetch": 4, "shuffle": shuffle, "seed": 3},
        "samples": {"kind": "records"},
    });
    EngineSpec::from_json(&spec.to_string())
        .unwrap()
        .build(ds, OpenOptions::default(), &mut |_| None)
        .unwrap()
        .loader
}

/// Every batch's records, in order.
fn epoch(l: &mut Loader) -> Vec<Vec<FieldValue<'static>>> {
    l.iter()
        .unwrap()
        .map(|b| match b.unwrap().column("b") {
            Some(stokehold::ColumnData::List(v)) => v.clone(),
            other => panic!("not a list column: {other:?}"),
        })
        .collect()
}

#[test]
fn a_shard_block_order_from_s3_is_fetched_in_few_large_gets_and_reads_the_same_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let src = dataset(tmp.path());
    let server = S3Server::shared();
    server.create_bucket("readahead").unwrap();
    let url = "s3://readahead/ds";
    let storage_options = testing::options(&server.endpoint());
    testing::upload_dir(&src, url, &storage_options).unwrap();
    let local = Arc::new(Dataset::open(&src).unwrap());
    let shards = local.shards().len() as u64;
    assert!(shards >= 6, "{shards} shards");
    let remote = Arc::new(
        Dataset::open_with(
            url,
            OpenOptions {
                storage_options,
                ..OpenOptions::default()
            },
        )
        .unwrap(),
    );
    let block = serde_json::json!({"shard_block": {"window": 1}});
    let want = epoch(&mut loader(Arc::clone(&local), block.clone()));
    let mut l = loader(Arc::clone(&remote), block);
    // building the loader reads a first record (no readahead yet): counted from here on
    let before = l.stats().storage.expect("remote").prefetch;
    assert_eq!(epoch(&mut l), want, "the same batches as from local disk");
    let s = l.stats().storage.expect("remote");
    let p = s.prefetch;
    assert_eq!(
        (p.hits - before.hits, p.misses - before.misses),
        (400, 0),
        "every read served from ranges fetched ahead: {s:?}"
    );
    // a batch holds 8 of a shard's ~50 records: announced one batch at a time, its records lie
    // too far apart to share GETs (~200 in all); announced in waves of 16 batches, each shard
    // is a GET or two (or three where two waves share it): ~20
    assert!(
        p.requests <= 3 * shards,
        "{} GETs ahead for {shards} shards: {s:?}",
        p.requests
    );
    // a global shuffle still announces batch by batch: one GET per record here
    let mut g = loader(remote, serde_json::json!("global"));
    let n: usize = epoch(&mut g).iter().map(Vec::len).sum();
    let p = g.stats().storage.expect("remote").prefetch;
    assert!(
        p.requests as usize > n / 2,
        "{} GETs for {n} records",
        p.requests
    );
}
