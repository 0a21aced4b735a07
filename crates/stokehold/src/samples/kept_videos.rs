//! Kept frame indexes of video files read in place (a LeRobot dataset's MP4s, [`super::lerobot`]):
//! indexing a file parses its `moov` box, and a LeRobot v2.1 dataset has a file per episode and
//! camera (hundreds of thousands for the largest), so each index is kept on node-local disk
//! beside the kept indexes of files read in place and reused while the file is unchanged.
//!
//! A file per video, `videos/<crc-a><crc-b>.skvi` (16 hex digits, two CRC-32Cs of the file's
//! canonical path) under `$STOKEHOLD_INDEX_DIR` (else `~/.cache/stokehold/index`), holding the
//! file's key (its size, modification time in nanoseconds and canonical path): a file changed in
//! place gets another key, so it is indexed again and its kept index replaced (the same name).
//! A sealed container parsed only by `stokehold_format::container::parse_video_index`,
//! published whole (write, then rename) through the node-local directory helper, as the kept
//! token counts ([`super::kept_counts`]). A missing, damaged, foreign or stale file, or one whose
//! key is another's (a collision of names), is a miss: the video is indexed again and its index
//! kept over it; a directory that cannot be written keeps nothing.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use stokehold_format::container::{parse_video_index, seal_video_index};
use stokehold_format::crc::crc32c;
use stokehold_ingest::mp4::FrameIndex;
use stokehold_storage::node_dir::NodeDir;

/// The directory of kept video indexes (`None`: nowhere to keep them).
pub(crate) fn dir() -> Option<PathBuf> {
    stokehold_storage::node_dir::kept_dir().map(|d| d.join("videos"))
}

/// What a kept index is of: a video file as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VideoKey {
    /// The canonical path (names the kept file).
    path: String,
    /// The file's size in bytes.
    len: u64,
    /// `"<size> <mtime in ns> <canonical path>"`: kept inside and compared on load.
    key: String,
}

impl VideoKey {
    /// The key of `path` now; `None` when it has no canonical path or modification time (then
    /// nothing is kept for it).
    pub(crate) fn of(path: &Path) -> Option<VideoKey> {
        let canonical = std::fs::canonicalize(path).ok()?;
        let meta = std::fs::metadata(&canonical).ok()?;
        let mtime = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?;
        let path = canonical.to_string_lossy().into_owned();
        let len = meta.len();
        let key = format!("{len} {} {path}", mtime.as_nanos());
        Some(VideoKey { path, len, key })
    }
}

fn name(path: &str) -> String {
    let a = crc32c(path.as_bytes());
    let b = crc32c(&[path.as_bytes(), b"#2"].concat());
    format!("{a:08x}{b:08x}.skvi")
}

/// The index kept for the file of `key` (a missing, damaged, foreign or stale kept file is a
/// miss: the file is indexed again).
pub(crate) fn load(dir: &Path, key: &VideoKey) -> Option<FrameIndex> {
    let path = dir.join(name(&key.path));
    // at most an entry per byte of the file (a packet has a byte at least), the extradata and
    // the header within the file's size, the seal
    let len = std::fs::metadata(&path).ok()?.len();
    if len > key.len.saturating_mul(34).saturating_add(1 << 20) {
        return None;
    }
    let bytes = std::fs::read(&path).ok()?;
    let (kept, index) = parse_video_index(&bytes).ok()?;
    // every packet inside the file as it is (its size is in the key: checked again here so that
    // nothing kept can point a read past the file's end)
    let inside = index
        .frames
        .iter()
        .all(|f| f.offset.saturating_add(u64::from(f.size)) <= key.len);
    (kept == key.key && inside).then(|| FrameIndex::from_video_index(index))
}

/// Keep `index` for the file of `key` (best effort: a directory that cannot be written keeps
/// nothing; an index without frames is not kept).
pub(crate) fn store(dir: &Path, key: &VideoKey, index: &FrameIndex) {
    if index.frames.is_empty() {
        return;
    }
    let Ok(nd) = NodeDir::create(dir) else {
        return;
    };
    let file = name(&key.path);
    let temp = nd.temp_path(&file);
    let bytes = seal_video_index(&key.key, &index.to_video_index());
    if std::fs::write(&temp, bytes).is_err() || nd.publish(&temp, &file).is_err() {
        let _ = std::fs::remove_file(&temp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stokehold_format::video::VideoFrame;
    use stokehold_ingest::mp4::FourCc;

    fn index(size: u32) -> FrameIndex {
        FrameIndex {
            timescale: 12800,
            codec: FourCc(*b"avc1"),
            width: 64,
            height: 48,
            extradata: vec![1, 2, 3],
            frames: vec![
                VideoFrame {
                    pts: 0,
                    dts: -512,
                    duration: 512,
                    key: true,
                    offset: 4,
                    size,
                },
                VideoFrame {
                    pts: 512,
                    dts: 0,
                    duration: 512,
                    key: false,
                    offset: 4 + u64::from(size),
                    size: 2,
                },
            ],
        }
    }

    #[test]
    fn a_kept_index_is_found_while_its_file_is_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("videos");
        let video = tmp.path().join("ep.mp4");
        std::fs::write(&video, [0u8; 16]).unwrap();
        let key = VideoKey::of(&video).unwrap();
        assert_eq!(load(&d, &key), None);
        store(&d, &key, &index(6));
        let kept = std::fs::read_dir(&d).unwrap().count();
        assert_eq!(kept, 1);
        assert_eq!(load(&d, &key), Some(index(6)));
        // a new modification time: another key, the same kept file (replaced when indexed again)
        let f = std::fs::File::options().write(true).open(&video).unwrap();
        f.set_modified(UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
            .unwrap();
        let changed = VideoKey::of(&video).unwrap();
        assert_ne!(changed, key);
        assert_eq!(load(&d, &changed), None);
        store(&d, &changed, &index(7));
        assert_eq!(load(&d, &changed), Some(index(7)));
        assert_eq!(load(&d, &key), None);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), kept);
        // a new size (the same path): a miss
        std::fs::write(&video, [0u8; 17]).unwrap();
        assert_eq!(load(&d, &VideoKey::of(&video).unwrap()), None);
    }

    #[test]
    fn a_damaged_foreign_or_outside_kept_index_is_a_miss() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("videos");
        let video = tmp.path().join("ep.mp4");
        std::fs::write(&video, [0u8; 16]).unwrap();
        let key = VideoKey::of(&video).unwrap();
        store(&d, &key, &index(6));
        let path = d.join(name(&key.path));
        let good = std::fs::read(&path).unwrap();
        // every cut and a flipped byte
        for cut in [0, 8, good.len() / 2, good.len() - 1] {
            std::fs::write(&path, &good[..cut]).unwrap();
            assert_eq!(load(&d, &key), None, "cut at {cut}");
        }
        let mut bad = good.clone();
        bad[good.len() - 10] ^= 0x10;
        std::fs::write(&path, bad).unwrap();
        assert_eq!(load(&d, &key), None);
        // another container (kept counts) under its name
        std::fs::write(
            &path,
            stokehold_format::container::seal_counts(&key.key, &[1]),
        )
        .unwrap();
        assert_eq!(load(&d, &key), None);
        // another file's index under its name (a collision of names)
        let other = VideoKey {
            key: format!("16 1 {}", key.path),
            ..key.clone()
        };
        std::fs::write(
            &path,
            seal_video_index(&other.key, &index(6).to_video_index()),
        )
        .unwrap();
        assert_eq!(load(&d, &key), None);
        // packets past the file's end
        store(&d, &key, &index(11));
        assert_eq!(load(&d, &key), None);
        store(&d, &key, &index(10));
        assert_eq!(load(&d, &key), Some(index(10)));
    }

    #[test]
    fn a_directory_that_cannot_be_written_keeps_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let video = tmp.path().join("ep.mp4");
        std::fs::write(&video, [0u8; 16]).unwrap();
        let key = VideoKey::of(&video).unwrap();
        let d = file.join("videos");
        store(&d, &key, &index(6));
        assert_eq!(load(&d, &key), None);
    }
}
