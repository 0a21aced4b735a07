//! Row F6 of the reliability matrix: resident memory stays flat over epochs (buffers are
//! recycled, nothing accumulates per epoch).

use stokehold::{Column, Loader, LoaderConfig};

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4
}

#[test]
fn memory_stays_flat_over_epochs() {
    let _alone = crate::alone();
    let tmp = tempfile::tempdir().unwrap();
    let ds = crate::common::dataset(tmp.path(), 2000);
    let config = LoaderConfig {
        batch_size: 64,
        threads: 2,
        prefetch: 4,
        seed: 42,
        ..LoaderConfig::default()
    };
    let mut l = Loader::new(ds.clone(), Column::all(ds.schema()).unwrap(), config).unwrap();
    let epoch = |l: &mut Loader| {
        for b in l.iter().unwrap() {
            drop(b.unwrap());
        }
    };
    epoch(&mut l);
    epoch(&mut l);
    let warm = rss_kib();
    for _ in 0..5 {
        epoch(&mut l);
    }
    let after = rss_kib();
    assert!(
        after <= warm + 2048,
        "RSS grew from {warm} KiB to {after} KiB over 5 epochs"
    );
}
