//! The owning iterator (`Loader::into_batches` / `BatchIter::into_loader`) that bindings use, and
//! `Batch::pool`: same batches and the same position bookkeeping as the borrowing iterator.

use std::sync::Arc;

use stokehold::format::{Dataset, DatasetWriteOptions, DatasetWriter, FieldValue, Schema};
use stokehold::{Column, ColumnData, Loader, LoaderConfig};

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
fn owned_iterator_matches_borrowed_and_gives_the_loader_back() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(dir.path(), 100);
    let mut reference = loader(&ds);
    let expected: Vec<Vec<i64>> = reference
        .iter()
        .unwrap()
        .map(|b| labels(&b.unwrap()))
        .collect();
    assert_eq!(expected.len(), 10);

    // Three batches, give the loader back mid-epoch, then the rest.
    let mut it = loader(&ds).into_batches().unwrap();
    let mut got = Vec::new();
    for _ in 0..3 {
        let b = it.next().unwrap().unwrap();
        assert!(b.pool().is_some());
        got.push(labels(&b));
    }
    let state = it.state();
    let l = it
        .into_loader()
        .expect("an owned iterator gives its loader back");
    assert_eq!(l.state(), state);
    assert_eq!(state.position, 30);
    let mut it = l.into_batches().unwrap();
    got.extend(it.by_ref().map(|b| labels(&b.unwrap())));
    assert_eq!(got, expected);
    let l = it.into_loader().unwrap();
    assert_eq!((l.epoch(), l.state().position), (1, 0));

    // A borrowing iterator has no loader to give back.
    let mut borrowed = loader(&ds);
    assert!(borrowed.iter().unwrap().into_loader().is_none());
}
