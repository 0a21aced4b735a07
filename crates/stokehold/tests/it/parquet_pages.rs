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
    let mut w =
        parquet::arrow::ArrowWriter::try_new(fs::File::create(path).unwrap(), batch.schema(), Some(props))
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
        batch_size: 16,
        threads,
        prefetch: 2,
        seed: 7,
        ..LoaderConfig::default()
    }
}

/// A batch as plain data: its ids and every column's values.
fn plain(b: &Batch) -> (Vec<u64>, Vec<Vec<u8>>) {
    let cols = b
        .columns
        .iter()
        .map(|(_, c)| match c {
            ColumnData::Fixed { data, .. } => data.as_bytes().to_vec(),
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
fn two_epochs(ds: &Arc<Dataset>, threads: usize) -> (Vec<(Vec<u64>, Vec<Vec<u8>>)>, Loader) {
    let mut l = Loader::new(ds.clone(), Column::all(ds.schema()).unwrap(), config(threads)).unwrap();
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
    let ranges: std::collections::BTreeSet<(u64, u32)> = off.shards()[0]
        .index()
        .iter()
        .map(|e| (e.offset, e.len))
        .collect();
    assert!(ranges.len() * 3 <= 70, "{} ranges for 70 rows", ranges.len());
    let (reference, l) = two_epochs(&off, 1);
    assert_eq!(reference.len(), 16);
    for (ids, cols) in &reference {
        let blobs: Vec<u8> = ids.iter().flat_map(|&i| blob(i)).collect();
        assert_eq!(cols[0], blobs);
    }
    // off: every row decodes its page (nothing held)
    let s = pages(&off);
    assert_eq!((s.budget, s.bytes, s.entries, s.hits), (0, 0, 0, 0));
    assert_eq!(s.misses, 240);
    assert!(l.stats().caches.iter().any(|c| c.kind == "parquet-pages"));
    for threads in [1, 3] {
        let off = open(&dir, &index, Some(0));
        assert_eq!(two_epochs(&off, threads).0, reference, "off, {threads} threads");
        // the default budget holds every page: each is decoded once, the rest are hits
        let on = open(&dir, &index, None);
        let (got, l) = two_epochs(&on, threads);
        assert_eq!(got, reference, "on, {threads} threads");
        let s = pages(&on);
        assert!(s.budget >= 1 << 20, "{s:?}");
        assert_eq!(s.hits + s.misses, 240, "{s:?}");
        assert!(
            s.misses >= s.entries && s.misses <= s.entries + 2 * threads as u64,
            "a page decoded once (or by threads that met it at once): {s:?}"
        );
        assert!(s.hits >= 240 - 2 * 25, "{s:?}");
        let c = l
            .stats()
            .caches
            .into_iter()
            .find(|c| c.kind == "parquet-pages")
            .unwrap();
        assert_eq!((c.hits, c.misses, c.bytes), (s.hits, s.misses, s.bytes));
        // a budget of about three pages: pages are evicted and decoded again, and what is held
        // never passes the budget
        let small = pages(&open(&dir, &index, None)).budget.min(3 * 4200);
        let tight = open(&dir, &index, Some(small));
        assert_eq!(two_epochs(&tight, threads).0, reference, "tight, {threads} threads");
        let s = pages(&tight);
        assert!(s.peak <= small && s.bytes <= small, "{s:?}");
        assert!(s.peak > 0 && s.entries <= 3, "{s:?}");
        assert!(s.misses > 2 * ranges.len() as u64, "{s:?}");
    }
}

#[test]
fn a_damaged_parquet_page_is_named_and_the_other_pages_still_read_with_the_cache() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pq");
    files(&dir);
    let index = tmp.path().join("idx");
    let ds = open(&dir, &index, None);
    let (before, _) = two_epochs(&ds, 2);
    assert!(pages(&ds).entries > 0);
    // a flipped byte in the page of row 40 of a.parquet, under the open dataset, its page held
    // decoded: each row of that page fails its checksum, named by file and bytes
    let e = ds.shards()[0].index()[40];
    let at = e.offset + u64::from(e.len) - 10;
    let file = dir.join("a.parquet");
    let mut bytes = fs::read(&file).unwrap();
    bytes[at as usize] ^= 0x20;
    fs::write(&file, &bytes).unwrap();
    let same: Vec<u64> = (0..70u64)
        .filter(|&r| {
            let o = ds.shards()[0].index()[r as usize];
            o.offset <= at && at < o.offset + u64::from(o.len)
        })
        .collect();
    assert!(same.contains(&40), "{same:?}");
    let err = ds.get(40).unwrap_err().to_string();
    assert!(
        err.contains("a.parquet") && err.contains(&format!("bytes {}..", e.offset)),
        "{err}"
    );
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
    let mut read = 0;
    for b in l.iter().unwrap() {
        let b = b.unwrap();
        let Some(ColumnData::List(items)) = b.column("blob") else {
            panic!("blob is a list column")
        };
        // every other row reads its own value, as before
        for ((&id, pad), v) in b.ids.iter().zip(&b.padding).zip(items) {
            if !pad {
                assert!(!same.contains(&id), "{id}");
                assert_eq!(v, &FieldValue::Bytes(blob(id).into()), "row {id}");
                read += 1;
            }
        }
    }
    assert_eq!(read, 120 - same.len());
    let mut skipped = l.stats().skipped;
    skipped.sort_unstable();
    assert_eq!(skipped, same);
    assert_eq!(before.len(), 16);
}
