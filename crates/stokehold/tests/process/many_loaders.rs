//! Row F5 of the reliability matrix: 100 loaders in one process, iterated at the same time, with
//! bounded threads and file descriptors and correct output. Alone in its process (see
//! `main.rs`) so that the thread and descriptor counts are this test's own.

use std::borrow::Cow;
use std::sync::Arc;

use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::{Column, ColumnData, Loader, LoaderConfig};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[test]
fn a_hundred_loaders_share_the_dataset_and_stay_bounded() {
    let _alone = crate::alone();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("ds");
    let schema = Schema::from_specs([("x", "int64"), ("blob", "bytes")]).unwrap();
    let opts = DatasetWriteOptions {
        target_shard_bytes: 4096,
        ..DatasetWriteOptions::default()
    };
    let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
    for i in 0..500i64 {
        w.write(&[
            FieldValue::Int64(i),
            FieldValue::Bytes(Cow::Owned(vec![i as u8; 64])),
        ])
        .unwrap();
    }
    w.finish().unwrap();
    let ds = Arc::new(Dataset::open(&path).unwrap());
    let (threads0, fds0) = (count("/proc/self/task"), count("/proc/self/fd"));

    let mut loaders: Vec<Loader> = (0..100)
        .map(|k| {
            let cfg = LoaderConfig {
                batch_size: 25,
                threads: 1,
                prefetch: 2,
                seed: k,
                ..LoaderConfig::default()
            };
            Loader::new(Arc::clone(&ds), Column::all(ds.schema()).unwrap(), cfg).unwrap()
        })
        .collect();
    let mut iters: Vec<_> = loaders.iter_mut().map(|l| l.iter().unwrap()).collect();
    assert!(
        count("/proc/self/task") <= threads0 + 100,
        "one worker per loader"
    );
    assert_eq!(
        count("/proc/self/fd"),
        fds0,
        "loaders share the dataset's open files"
    );
    let mut seen = vec![Vec::new(); 100];
    // round-robin, so all 100 are in flight at once
    for _ in 0..20 {
        for (k, it) in iters.iter_mut().enumerate() {
            let b = it.next().unwrap().unwrap();
            let ColumnData::Fixed { data, .. } = b.column("x").unwrap() else {
                panic!()
            };
            for (slot, chunk) in data.as_bytes().chunks(8).enumerate() {
                assert_eq!(
                    i64::from_le_bytes(chunk.try_into().unwrap()) as u64,
                    b.ids[slot]
                );
            }
            seen[k].extend(b.ids.iter().copied());
        }
    }
    assert!(iters.iter_mut().all(|it| it.next().is_none()));
    drop(iters);
    // each finished epoch started the next one ahead; dropping the loaders stops those too
    drop(loaders);
    for (k, mut ids) in seen.into_iter().enumerate() {
        ids.sort_unstable();
        assert_eq!(ids, (0..500).collect::<Vec<u64>>(), "loader {k}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while count("/proc/self/task") > threads0 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert!(count("/proc/self/task") <= threads0);
}
