//! Entry points for fuzzing the parsers, shared by the cargo-fuzz targets in `fuzz/` and by the
//! tests that replay the seed corpora.
//!
//! Each function runs one parser over arbitrary bytes to the end, ignoring parse errors. None
//! may ever panic: the only panics here are assertions of invariants every successful parse
//! must satisfy, so a panic means a parser bug.

use std::path::Path;

use crate::example::{decode_example, encode_example};
use crate::tar::{BLOCK_SIZE, TarLimits, TarReader};
use crate::tfrecord::{TfRecordError, TfRecordReader};

/// Reads `data` as a tar archive, reading every entry's data.
pub fn fuzz_tar(data: &[u8]) {
    let mut reader = TarReader::new(data, TarLimits::default());
    let mut last_header: Option<u64> = None;
    while let Ok(Some(entry)) = reader.next_entry() {
        assert_eq!(entry.header_offset % BLOCK_SIZE, 0, "{entry:?}");
        assert_eq!(entry.data_offset, entry.header_offset + BLOCK_SIZE);
        assert!(last_header.is_none_or(|last| entry.header_offset > last));
        assert!(entry.data_offset <= data.len() as u64);
        last_header = Some(entry.header_offset);
        let Ok(bytes) = reader.read_data() else {
            break;
        };
        assert_eq!(bytes.len() as u64, entry.size);
        let start = entry.data_offset as usize;
        assert_eq!(bytes, &data[start..start + bytes.len()]);
    }
    // The reader is finished after the end or an error.
    assert!(matches!(reader.next_entry(), Ok(None)));
}

/// Reads `data` as a TFRecord file, continuing past data-CRC errors.
pub fn fuzz_tfrecord(data: &[u8]) {
    let mut reader = TfRecordReader::new(data, 1 << 30);
    let mut buf = Vec::new();
    let mut last: Option<u64> = None;
    loop {
        match reader.next_record(&mut buf) {
            Ok(Some(offset)) => {
                assert!(last.is_none_or(|l| offset > l));
                let start = offset as usize + 12;
                assert_eq!(buf, &data[start..start + buf.len()]);
                last = Some(offset);
            }
            Err(TfRecordError::DataCrc { offset, .. }) => {
                assert!(last.is_none_or(|l| offset > l));
                last = Some(offset);
            }
            Ok(None) | Err(_) => break,
        }
    }
    assert!(matches!(reader.next_record(&mut buf), Ok(None)));
}

/// Decodes `data` as a `tf.train.Example`; a successful decode must re-encode to bytes that
/// decode and re-encode to themselves.
pub fn fuzz_example(data: &[u8]) {
    if let Ok(example) = decode_example(data) {
        let encoded = encode_example(&example);
        let again = decode_example(&encoded).expect("re-encoded Example must decode");
        assert_eq!(encode_example(&again), encoded);
    }
}

/// Runs `f` on the contents of every file directly inside `dir`, in name order, and returns how
/// many files it ran on. Entries that are not files, or cannot be read, are skipped; a missing
/// or unreadable directory counts zero.
pub fn replay_corpus(dir: &Path, f: fn(&[u8])) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut paths: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    let mut count = 0;
    for path in paths {
        if let Ok(bytes) = std::fs::read(&path) {
            f(&bytes);
            count += 1;
        }
    }
    count
}

/// Reads `data` as a kept index of a file read in place (`.skhidx`, through the format's checked
/// container parser); an accepted index's tables must agree with its header. Must never panic.
pub fn fuzz_file_index(data: &[u8]) {
    let Ok(ix) = crate::inplace::index::FileIndex::parse(data) else {
        return;
    };
    assert_eq!(ix.entries.len() as u64, ix.header.records);
    assert_eq!(ix.members.len() as u64, ix.header.members);
    for r in 0..ix.entries.len() {
        let _ = (ix.members_of(r), ix.key_of(r), ix.damaged(r));
    }
    assert_eq!(
        crate::inplace::index::FileIndex::parse(&ix.to_bytes()).as_ref(),
        Ok(&ix)
    );
}

/// Indexes `data` as a Matroska/WebM file; a successful index must hold every packet inside the
/// file and no decode time after its presentation time.
pub fn fuzz_mkv(data: &[u8]) {
    let Ok(index) = crate::mkv::index_bytes(data, &crate::frames::ContainerLimits::default())
    else {
        return;
    };
    for f in &index.frames {
        assert!(f.offset + u64::from(f.size) <= data.len() as u64, "{f:?}");
        assert!(f.dts <= f.pts, "{f:?}");
    }
    assert!(index.timescale >= 1);
}
