//! Kept token counts of packed conversations: the count pass of a [`super::chats::ChatPlanner`]
//! (every conversation rendered and tokenized, the slow part of opening) kept on node-local disk
//! beside the kept indexes of files read in place, so that a later open of the same dataset
//! with the same template, tokenizer and options plans its rows without encoding anything.
//!
//! A file per (dataset, encoding) key, named by two CRC-32Cs of the key and holding the key
//! itself (a collision is a miss): `counts/<crc-a><crc-b>.skcc` (16 hex digits) under
//! `$STOKEHOLD_INDEX_DIR` (else `~/.cache/stokehold/index`), a sealed container parsed only by
//! `stokehold_format::container::parse_counts`, published whole (write, then rename) through
//! the node-local directory helper. Only a count pass without failures is kept (failed
//! conversations are named with their file and offset, which the counts do not hold). The
//! packer checks each conversation it encodes against its kept count, so counts that no longer
//! match (data changed in place under the same fingerprint) fail loudly, naming the conversation,
//! instead of shifting rows.

use std::path::{Path, PathBuf};

use stokehold_format::container::{parse_counts, seal_counts};
use stokehold_format::crc::crc32c;
use stokehold_storage::node_dir::NodeDir;

/// The directory of kept counts (`None`: nowhere to keep them).
pub(crate) fn dir() -> Option<PathBuf> {
    stokehold_storage::node_dir::kept_dir().map(|d| d.join("counts"))
}

fn name(key: &str) -> String {
    let a = crc32c(key.as_bytes());
    let b = crc32c(&[key.as_bytes(), b"#2"].concat());
    format!("{a:08x}{b:08x}.skcc")
}

/// The counts kept under `key` for `n` samples, when there are (a missing, damaged or foreign
/// file is a miss: the counts are made again).
pub(crate) fn load(dir: &Path, key: &str, n: u64) -> Option<Vec<u32>> {
    let path = dir.join(name(key));
    // the file's size is known before it is read: a count each, a header, the seal
    let len = std::fs::metadata(&path).ok()?.len();
    if len > n.saturating_mul(4).saturating_add(1 << 20) {
        return None;
    }
    let bytes = std::fs::read(&path).ok()?;
    let (header, counts) = parse_counts(&bytes).ok()?;
    (header.key == key && header.n == n).then_some(counts)
}

/// Keep `counts` under `key` (best effort: a directory that cannot be written keeps nothing).
pub(crate) fn store(dir: &Path, key: &str, counts: &[u32]) {
    let Ok(nd) = NodeDir::create(dir) else {
        return;
    };
    let file = name(key);
    let temp = nd.temp_path(&file);
    if std::fs::write(&temp, seal_counts(key, counts)).is_err() || nd.publish(&temp, &file).is_err()
    {
        let _ = std::fs::remove_file(&temp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_counts_are_found_by_their_key_and_count_only() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("counts");
        assert_eq!(load(&d, "k", 3), None);
        store(&d, "k", &[1, 2, 3]);
        assert_eq!(load(&d, "k", 3), Some(vec![1, 2, 3]));
        assert_eq!(load(&d, "k", 4), None, "another number of samples");
        assert_eq!(load(&d, "other", 3), None, "another key");
        // damaged: a miss, not an error
        let path = d.join(name("k"));
        let mut b = std::fs::read(&path).unwrap();
        let i = b.len() - 8;
        b[i] ^= 0xff;
        std::fs::write(&path, b).unwrap();
        assert_eq!(load(&d, "k", 3), None);
    }
}
