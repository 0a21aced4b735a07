//! Row F1 of the reliability matrix, alone in its process (see `main.rs`) so that no other test's
//! threads are counted.

use std::borrow::Cow;
use std::sync::Arc;

use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::{Column, Loader, LoaderConfig};

fn dataset(dir: &std::path::Path) -> Arc<Dataset> {
    let path = dir.join("ds");
    let schema = Schema::from_specs([("x", "float64"), ("blob", "bytes")]).unwrap();
    let mut w = DatasetWriter::create(&path, schema, DatasetWriteOptions::default()).unwrap();
    for i in 0..200u64 {
        w.write(&[
            FieldValue::Float64(i as f64),
            FieldValue::Bytes(Cow::Owned(vec![i as u8; 100])),
        ])
        .unwrap();
    }
    w.finish().unwrap();
    Arc::new(Dataset::open(&path).unwrap())
}

fn config(batch: u32, threads: usize, prefetch: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: batch,
        threads,
        prefetch,
        ..LoaderConfig::default()
    }
}

fn columns(ds: &Dataset) -> Vec<Column> {
    Column::all(ds.schema()).unwrap()
}

fn live_threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

// F1
#[test]
fn dropping_an_iterator_early_stops_and_joins_every_thread() {
    let _alone = crate::alone();
    let tmp = tempfile::tempdir().unwrap();
    let ds = dataset(tmp.path());
    let before = live_threads();
    for k in 0..1000 {
        let mut l = Loader::new(ds.clone(), columns(&ds), config(8, 3, 2)).unwrap();
        let mut it = l.iter().unwrap();
        for _ in 0..(k % 4) {
            it.next().unwrap().unwrap();
        }
        drop(it);
        // join() returns when each thread has finished; the kernel may list an exiting thread a
        // moment longer, so allow it up to the 1 s the matrix promises.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while live_threads() > before && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        assert!(
            live_threads() <= before,
            "iteration {k}: threads left running"
        );
    }
}
