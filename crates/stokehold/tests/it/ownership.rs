//! Who owns what while a loader runs: the iterator owns what it needs (it outlives its loader),
//! the loader's position follows the batches delivered, `next_timeout` reports a pending batch
//! instead of blocking, and `Batch::pool` hands buffers back.

use std::sync::Arc;

use std::time::Duration;
use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};

use stokehold::{Column, ColumnData, Loader, LoaderConfig, Next};

fn dataset(dir: &std::path::Path, n: i64) -> Arc<Dataset> {
    let path = dir.join("ds");
    let schema = Schema::from_specs([("label", "int64")]).unwrap();
    let mut w = DatasetWriter::create(&path, schema, DatasetWriteOptions::default()).unwrap();
    for i in 0..n {
        w.write(&[FieldValue::Int64(i)]).unwrap();
    }
    w.finish().unwrap();
    Arc::new(Dataset::open(&path).unwrap())
}

fn labels(b: &stokehold::Batch) -> Vec<i64> {
    match b.column("label") {
        Some(ColumnData::Fixed { data, .. }) => data
            .as_bytes()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
        other => panic!("unexpected column {other:?}"),
    }
}

fn loader(ds: &Arc<Dataset>) -> Loader {
    let cols = Column::all(ds.schema()).unwrap();
    let config = LoaderConfig {
        batch_size: 10,
        threads: 2,
        seed: 5,
        ..LoaderConfig::default()
    };
    Loader::new(Arc::clone(ds), cols, config).unwrap()
}

#[test]
fn the_position_follows_delivered_batches_and_a_new_iterator_continues_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(dir.path(), 100);
    let mut reference = loader(&ds);
    let expected: Vec<Vec<i64>> = reference
        .iter()
        .unwrap()
        .map(|b| labels(&b.unwrap()))
        .collect();
    assert_eq!(expected.len(), 10);
    assert_eq!((reference.epoch(), reference.state().position), (1, 0));

    // Three batches, drop the iterator mid-epoch, then the rest from a new one.
    let mut l = loader(&ds);
    let mut it = l.iter().unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let b = it.next().unwrap().unwrap();
        assert!(b.pool().is_some());
        got.push(labels(&b));
    }
    let state = it.state();
    drop(it);
    assert_eq!(l.state(), state);
    assert_eq!(state.position, 30);
    let mut it = l.iter().unwrap();
    assert_eq!(it.remaining(), 7);
    got.extend(it.by_ref().map(|b| labels(&b.unwrap())));
    assert_eq!(got, expected);
    assert_eq!((l.epoch(), l.state().position), (1, 0));
}

#[test]
fn an_iterator_outlives_its_loader() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(dir.path(), 100);
    let want: Vec<Vec<i64>> = loader(&ds)
        .iter()
        .unwrap()
        .map(|b| labels(&b.unwrap()))
        .collect();
    let it = loader(&ds).iter().unwrap(); // the loader is dropped here
    let got: Vec<Vec<i64>> = it.map(|b| labels(&b.unwrap())).collect();
    assert_eq!(got, want);
}

#[test]
fn next_timeout_reports_pending_then_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(dir.path(), 40);
    let slow = stokehold::from_fn("slow", |v, _| {
        std::thread::sleep(Duration::from_millis(300));
        Ok(v)
    });
    let cols = vec![Column::fixed(
        "label",
        vec![slow],
        stokehold::format::DType::I64,
        vec![],
    )];
    let config = LoaderConfig {
        batch_size: 4,
        threads: 1,
        ..LoaderConfig::default()
    };
    let mut l = Loader::new(Arc::clone(&ds), cols, config).unwrap();
    let mut it = l.iter().unwrap();
    assert!(matches!(it.next_timeout(Duration::ZERO), Next::Pending));
    let batch = loop {
        match it.next_timeout(Duration::from_millis(50)) {
            Next::Pending => continue,
            Next::Batch(b) => break b.unwrap(),
            Next::End => panic!("the epoch ended before its first batch"),
        }
    };
    assert_eq!(batch.len(), 4);
    assert_eq!(l.state().position, 4);
}
