//! Parquet files read in place under a shuffle: the cache of decoded pages that the worker
//! threads share changes nothing of what is read (whatever the threads and the budget), stays
//! within its budget, and leaves damage named.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use stokehold::format::{Dataset, FieldValue, OpenOptions};
use stokehold::{Batch, Column, ColumnData, ErrorPolicy, Loader, LoaderConfig};
use stokehold_ingest::inplace::{InPlaceOptions, open_in_place};

/// Rows in each page of the large column (the writer's row limit per page).
const PAGE_ROWS: usize = 6;

/// The value of row `i`'s `blob` (600 bytes: enough a row for the column to be read from the
/// file, a page at a time).
fn blob(i: u64) -> Vec<u8> {
    (0..600u64)
        .map(|k| (i.wrapping_mul(31) ^ k.wrapping_mul(7)) as u8)
        .collect()
}

/// A Parquet file of rows `first..first + rows`: `blob` (binary, pages of [`PAGE_ROWS`] rows,
/// the first ones dictionary-coded) and `label` (int64), snappy-compressed.
fn parquet_file(path: &Path, first: u64, rows: u64) {
    use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch};
    use parquet::file::properties::WriterProperties;
    let ids: Vec<u64> = (first..first + rows).collect();
    let blobs: BinaryArray = ids.iter().map(|&i| Some(blob(i))).collect();
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("blob", Arc::new(blobs)),
        (
            "label",
            Arc::new(Int64Array::from_iter_values(ids.iter().map(|&i| i as i64))),
        ),
    ];
    let batch = RecordBatch::try_from_iter(cols).unwrap();
    let props = WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .set_dictionary_page_size_limit(2 << 10)
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_write_batch_size(PAGE_ROWS)
        .set_max_row_group_size(40)
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        fs::File::create(path).unwrap(),
        batch.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Two Parquet files of 70 and 50 rows in `dir`.
fn files(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    parquet_file(&dir.join("a.parquet"), 0, 70);
    parquet_file(&dir.join("b.parquet"), 70, 50);
}

fn open(dir: &Path, index: &Path, page_cache: Option<u64>) -> Arc<Dataset> {
    let o = InPlaceOptions {
        index_dir: Some(index.to_path_buf()),
        page_cache,
        ..InPlaceOptions::default()
    };
    Arc::new(open_in_place(&[dir.to_path_buf()], OpenOptions::default(), &o).unwrap())
}

fn config(threads: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: 20,
        threads,
        prefetch: 2,
        seed: 7,
        ..LoaderConfig::default()
    }
}

/// A batch as plain data: its ids and every column's values.
type Plain = (Vec<u64>, Vec<Vec<u8>>);

fn plain(b: &Batch) -> Plain {
    let cols = b
        .columns
        .iter()
        .map(|(_, c)| match c {
            ColumnData::Fixed { data, .. } | ColumnData::Ragged { data, .. } => {
                data.as_bytes().to_vec()
            }
            ColumnData::List(items) => items
                .iter()
                .flat_map(|v| match v {
                    FieldValue::Bytes(b) => b.to_vec(),
                    other => format!("{other:?}").into_bytes(),
                })
                .collect(),
        })
        .collect();
    (b.ids.clone(), cols)
}

/// Two shuffled epochs of `ds` on `threads` threads, and the loader (for its statistics).
fn two_epochs(ds: &Arc<Dataset>, threads: usize) -> (Vec<Plain>, Loader) {
    let mut l = Loader::new(
        ds.clone(),
        Column::all(ds.schema()).unwrap(),
        config(threads),
    )
    .unwrap();
    let mut out = Vec::new();
    for _ in 0..2 {
        out.extend(l.iter().unwrap().map(|b| plain(&b.unwrap())));
    }
    (out, l)
}

/// The cache's statistics as the codec gives them.
fn pages(ds: &Dataset) -> stokehold::format::CodecCacheStats {
    ds.shards()[0].codec().unwrap().cache_stats().unwrap()
}

#[test]
fn parquet_pages_cached_or_not_give_the_same_samples_on_any_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    files(&dir);
    let index = tmp.path().join("idx");
    // the rows' values as written, in the dataset's order (70 rows of a, then 50 of b)
    let off = open(&dir, &index, Some(0));
    assert_eq!(off.len(), 120);
    assert_eq!(off.schema().to_string(), "blob: bytes, label: int64");
    // pages of several rows each: what the cache is for
    let ranges: usize = off
        .shards()
        .iter()
        .map(|sh| {
            sh.index()
                .iter()
                .map(|e| (e.offset, e.len))
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        })
        .sum();
    assert!(ranges * 3 <= 120, "{ranges} ranges for 120 rows");
    let (reference, l) = two_epochs(&off, 1);
    assert_eq!(reference.len(), 12);
    for (ids, cols) in &reference {
        let blobs: Vec<u8> = ids.iter().flat_map(|&i| blob(i)).collect();
        assert_eq!(cols[0], blobs);
    }
    // off: nothing held (a row finds its page decoded only when its thread decoded it last);
    // every row read counts once (the rows of 2 epochs, and those of the next epoch's first
    // batches, prepared ahead)
    let s = pages(&off);
    assert_eq!((s.budget, s.bytes, s.peak, s.entries), (0, 0, 0, 0));
    let reads = s.hits + s.misses;
    assert!((240..=240 + 3 * 20).contains(&reads), "{s:?}");
    assert!(s.misses > reads / 2, "{s:?}");
    assert!(l.stats().caches.iter().any(|c| c.kind == "parquet-pages"));
    for threads in [1, 3] {
        let off = open(&dir, &index, Some(0));
        assert_eq!(
            two_epochs(&off, threads).0,
            reference,
            "off, {threads} threads"
        );
        // the default budget holds every page: each is decoded once (by one thread, or by
        // threads that met it at once), the other rows are hits
        let on = open(&dir, &index, None);
        let (got, l) = two_epochs(&on, threads);
        assert_eq!(got, reference, "on, {threads} threads");
        let s = pages(&on);
        assert!(s.budget >= 1 << 20, "{s:?}");
        assert!(s.hits + s.misses >= 240, "{s:?}");
        assert_eq!(s.entries, ranges as u64, "{s:?}");
        if threads == 1 {
            assert_eq!(s.misses, ranges as u64, "{s:?}");
        } else {
            assert!(s.misses < 2 * ranges as u64, "{s:?}");
        }
        let c = l
            .stats()
            .caches
            .into_iter()
            .find(|c| c.kind == "parquet-pages")
            .unwrap();
        // the loader's figures are the codec's (taken between two readings of the codec's: the
        // loader may still be preparing the next epoch's first batches)
        let after = pages(&on);
        assert!(
            (s.hits..=after.hits).contains(&c.hits)
                && (s.misses..=after.misses).contains(&c.misses)
                && (s.bytes.min(after.bytes)..=s.bytes.max(after.bytes)).contains(&c.bytes),
            "{s:?} {c:?} {after:?}"
        );
        // a budget of about three pages: pages are evicted and decoded again, and what is held
        // never passes the budget
        let small = s.bytes * 3 / s.entries;
        let tight = open(&dir, &index, Some(small));
        assert_eq!(
            two_epochs(&tight, threads).0,
            reference,
            "tight, {threads} threads"
        );
        let s = pages(&tight);
        assert!(s.peak <= small && s.bytes <= small, "{s:?}");
        assert!(s.peak > 0 && s.entries <= 4, "{s:?}");
        assert!(s.hits + s.misses >= 240, "{s:?}");
        assert!(s.misses > 2 * ranges as u64, "{s:?}");
    }
}

/// The rows whose pages hold byte `at` of the file of shard `k`.
fn rows_over(ds: &Dataset, k: usize, at: u64) -> Vec<u64> {
    let first: u64 = ds.shards()[..k]
        .iter()
        .map(|s| s.index().len() as u64)
        .sum();
    (0..ds.shards()[k].index().len() as u64)
        .filter(|&r| {
            let o = ds.shards()[k].index()[r as usize];
            o.offset <= at && at < o.offset + u64::from(o.len)
        })
        .map(|r| first + r)
        .collect()
}

/// Flip byte `at` of `file`.
fn flip(file: &Path, at: u64) {
    let mut bytes = fs::read(file).unwrap();
    bytes[at as usize] ^= 0x20;
    fs::write(file, &bytes).unwrap();
}

/// One shuffled epoch on 3 threads, skipping what fails: the rows read (each checked against
/// its own value) and the rows skipped.
fn epoch_skipping(ds: &Arc<Dataset>) -> (Vec<u64>, Vec<u64>) {
    let mut l = Loader::new(
        ds.clone(),
        Column::all(ds.schema()).unwrap(),
        LoaderConfig {
            on_error: ErrorPolicy::Skip {
                max_fraction: 0.5,
                max_consecutive: 100,
            },
            ..config(3)
        },
    )
    .unwrap();
    let mut read = Vec::new();
    for b in l.iter().unwrap() {
        let b = b.unwrap();
        let Some(ColumnData::List(items)) = b.column("blob") else {
            panic!("blob is a list column")
        };
        for ((&id, pad), v) in b.ids.iter().zip(&b.padding).zip(items) {
            if !pad {
                assert_eq!(v, &FieldValue::Bytes(blob(id).into()), "row {id}");
                read.push(id);
            }
        }
    }
    read.sort_unstable();
    let mut skipped = l.stats().skipped;
    skipped.sort_unstable();
    (read, skipped)
}

#[test]
fn a_damaged_parquet_page_is_named_and_the_other_pages_still_read_with_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    files(&dir);
    let index = tmp.path().join("idx");
    let ds = open(&dir, &index, None);
    // a flipped byte in the page of row 40 of a.parquet (the first page of its second row
    // group, dictionary-coded: its range starts at the chunk's dictionary page) before any
    // row of it was read: each row of that page fails its checksum, named by file and bytes,
    // in every epoch (a page that fails is never held); every other row reads its own value
    let e = ds.shards()[0].index()[40];
    let at = e.offset + u64::from(e.len) - 10;
    flip(&dir.join("a.parquet"), at);
    let bad = rows_over(&ds, 0, at);
    assert!(bad.contains(&40) && bad.len() < 10, "{bad:?}");
    let err = ds.get(40).unwrap_err().to_string();
    assert!(
        err.contains("a.parquet") && err.contains(&format!("bytes {}..", e.offset)),
        "{err}"
    );
    let mut l = Loader::new(ds.clone(), Column::all(ds.schema()).unwrap(), config(3)).unwrap();
    let err = l.iter().unwrap().find_map(|b| b.err()).unwrap().to_string();
    assert!(
        err.contains("a.parquet") && err.contains("checksum"),
        "{err}"
    );
    let good: Vec<u64> = (0..120).filter(|r| !bad.contains(r)).collect();
    for _ in 0..2 {
        assert_eq!(epoch_skipping(&ds), (good.clone(), bad.clone()));
    }
    // a page changed under the open dataset while it is held decoded: its rows are served as
    // they were checked (never the changed bytes); a read of its bytes names the change
    let e = ds.shards()[1].index()[30];
    let at = e.offset + u64::from(e.len) - 10;
    let held = rows_over(&ds, 1, at);
    flip(&dir.join("b.parquet"), at);
    assert_eq!(epoch_skipping(&ds), (good.clone(), bad.clone()));
    let err = ds.get(held[0]).unwrap_err().to_string();
    assert!(err.contains("b.parquet"), "{err}");
}
