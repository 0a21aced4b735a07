//! JSON Lines in place: one sample per non-empty line. The scan is a newline search
//! (`memchr`) and a CRC-32C of each line, split among threads over a mapped file; only the
//! first lines are parsed (to choose the fields: [`crate::sources::jsonl`]). A line's fields
//! are read from its bytes when the sample is read ([`JsonlCodec`]), so a line that is not a JSON
//! object, or lacks a required key, is a corrupt sample then (the loader's error policy counts
//! it), named by file, line number, byte offset and sample index.
//!
//! A key whose values are lists of image file names (`"images": ["a.jpg", "b.png"]`, the rule
//! `pack` follows: [`crate::sources::jsonl::KeyStats::field_type`]) is a `list:image` field: the
//! scan reads each listed file's header (paths relative to the JSONL file's folder) and keeps
//! every image's width and height in the record's key bytes (per such key, in
//! [`JsonlStats::images`]' order: u32 count, then u32 width and height per image), so a
//! planner has them without reading an image ([`list_tables`]); a sample's value is the files'
//! bytes, read when it is read. A file that cannot be read is noted at the scan (size 0 × 0:
//! its sample lists no images in the table) and is an error naming the line and the path when
//! its sample is read. The files are read from the JSONL file's folder, on a local disk or
//! in object storage (its prefix: names relative to it, no `..`; see
//! [`super::named_files::FolderFiles`]).
//!
//! A key whose values name video files (`"video": "clips/a.mp4"`) is a `video` field: the scan
//! indexes each file once (its frame index, as `pack` makes it: [`crate::mp4`], [`crate::mkv`])
//! and keeps the index's bytes and the file's size in the record's key bytes, after the image
//! sizes (per such key, in [`JsonlStats::videos`]' order: u32 index bytes (0: the file could not
//! be indexed), u64 file size, the index bytes: the head of a `video` value, format.md §3). A
//! sample's value is that head followed by the file's bytes, read when the sample is read: the
//! value `pack` stores, so clips, their stages and errors are the same. A file whose size
//! changed since it was indexed is an error naming it (`stokehold index --rebuild`).
//!
//! Lines end with `\n` or `\r\n`; the last may have no newline; blank lines (only whitespace)
//! are not samples; a UTF-8 byte order mark at the file's start is skipped. A line longer
//! than the record limit is kept as a damaged record (reading it is an error that says so),
//! and no buffer is ever sized by it.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stokehold_format::{
    FieldValue, IndexEntry, ListTable, NamedFiles, RecordCodec, RecordError, Schema, Storage,
    VideoFile, crc,
};

use super::index::{DAMAGED, FileIndex, Member};
use super::{ChooseError, Chosen, ScanDetail, ScanError, Scanned};
use crate::sources::jsonl::{
    BOM, LineStats, SAMPLED_LINES, field_value, image_paths, is_blank, video_path,
};

/// Blank lines whose places are kept exactly (for line numbers in messages); past them, line
/// numbers are said as at least.
const MAX_BLANKS: usize = 100_000;

/// What a JSONL index keeps besides its records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct JsonlStats {
    /// The first lines' keys and kinds.
    pub lines: LineStats,
    /// Per blank line, the index of the record after it (sorted): a record's line number is
    /// its index, plus the blank lines before it, plus one.
    pub blank: Vec<u64>,
    /// Blank lines in all (more than `blank` holds when it was capped).
    pub blanks: u64,
    /// The longest line accepted by the scan.
    pub max: u64,
    /// A byte order mark was skipped.
    pub bom: bool,
    /// The keys that list image files whose sizes each record's key bytes keep, in order.
    #[serde(default)]
    pub images: Vec<String>,
    /// The keys that name video files whose frame indexes each record's key bytes keep (after
    /// the image sizes), in order.
    #[serde(default)]
    pub videos: Vec<String>,
}

impl JsonlStats {
    /// The line number of record `r` (from 1), and whether it is exact.
    fn line_of(&self, r: u64) -> (u64, bool) {
        let before = self.blank.partition_point(|&b| b <= r) as u64;
        let exact = self.blanks == self.blank.len() as u64 || before < self.blank.len() as u64;
        (r + before + 1, exact)
    }
}

/// The records of a run of lines, as a scan finds them.
#[derive(Debug, Default)]
struct Lines {
    entries: Vec<IndexEntry>,
    /// Records longer than the limit.
    damaged: Vec<u64>,
    /// Per blank line, the index of the record after it (at most [`MAX_BLANKS`]).
    blank: Vec<u64>,
    blanks: u64,
    /// Lines seen (blank ones too).
    lines: u64,
    /// The first lines' statistics (the part at the file's start only).
    stats: Option<LineStats>,
    max: u64,
}

impl Lines {
    fn new(max: u64, observe: bool) -> Lines {
        Lines {
            max,
            stats: observe.then(LineStats::default),
            ..Lines::default()
        }
    }

    /// The line at `start` (without its `\n`).
    fn push(&mut self, start: u64, line: &[u8]) {
        self.lines += 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if is_blank(line) {
            self.blanks += 1;
            if self.blank.len() < MAX_BLANKS {
                self.blank.push(self.entries.len() as u64);
            }
            return;
        }
        if line.len() as u64 > self.max {
            self.push_over(start);
            self.lines -= 1;
            return;
        }
        if let Some(s) = self.stats.as_mut()
            && s.lines < SAMPLED_LINES
        {
            s.observe(self.lines, line);
        }
        self.entries.push(IndexEntry {
            offset: start,
            len: line.len() as u32,
            crc: crc::crc32c(line),
        });
    }

    /// A line at `start` longer than the limit: a damaged record of no bytes.
    fn push_over(&mut self, start: u64) {
        self.lines += 1;
        self.damaged.push(self.entries.len() as u64);
        self.entries.push(IndexEntry {
            offset: start,
            len: 0,
            crc: crc::crc32c(&[]),
        });
    }

    /// The lines of `all[lo..hi]` (`hi` the end of a line or of the file).
    fn scan(&mut self, all: &[u8], lo: usize, hi: usize) {
        let mut pos = lo;
        while pos < hi {
            let end = memchr::memchr(b'\n', &all[pos..hi]).map_or(hi, |i| pos + i);
            self.push(pos as u64, &all[pos..end]);
            pos = end + 1;
        }
    }
}

/// The first line start at or after `pos` in `all` (lines from `lo`, the first byte after a
/// byte-order mark): `pos` itself when a line ends just before it, else the byte after the
/// next `\n`; `all.len()` when no line starts there.
fn line_start_at(all: &[u8], lo: usize, pos: usize) -> usize {
    if pos <= lo {
        return lo;
    }
    if pos >= all.len() {
        return all.len();
    }
    if all[pos - 1] == b'\n' {
        return pos;
    }
    memchr::memchr(b'\n', &all[pos..]).map_or(all.len(), |i| pos + i + 1)
}

/// How far a scan's reader thread has brought the file in, for the threads that search it.
#[derive(Default)]
struct ReadTo {
    to: std::sync::Mutex<usize>,
    moved: std::sync::Condvar,
}

impl ReadTo {
    fn set(&self, to: usize) {
        *self.to.lock().unwrap_or_else(|p| p.into_inner()) = to;
        self.moved.notify_all();
    }

    /// Wait until the reader is at `at` or past it.
    fn wait(&self, at: usize) {
        let mut to = self.to.lock().unwrap_or_else(|p| p.into_inner());
        while *to < at {
            to = self.moved.wait(to).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Index a JSONL file whose bytes are all in memory (a mapped file) into `ix`: the file in
/// windows of `window` bytes (each the lines that start in it), taken in file order by
/// `threads` threads, behind one reader thread that brings the pages in front to back. The
/// disk sees one sequential stream, as when a single thread reads the file (on a 2-core VM a
/// cold 10 GB file read that way came in at 2.4 GB/s; two threads faulting their own halves,
/// 1.3 GB/s); a file in the page cache costs the reader one touch a page. The index does not
/// depend on `threads` nor on `window`.
pub(super) fn scan_slice(
    all: &[u8],
    max: u64,
    ix: &mut FileIndex,
    threads: usize,
    window: usize,
) -> Result<(), ScanError> {
    /// Bytes the reader brings in between two reports of its progress.
    const STEP: usize = 4 << 20;
    /// The page size the reader touches at (a smaller page only means more touches).
    const PAGE: usize = 4096;
    let lo = if all.starts_with(BOM) { BOM.len() } else { 0 };
    let threads = threads.max(1);
    let window = window.max(1);
    let windows = (all.len() - lo).div_ceil(window);
    let max = max.min(u64::from(u32::MAX));
    let read_to = ReadTo::default();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut parts: Vec<(usize, Lines)> = std::thread::scope(|s| {
        s.spawn(|| {
            let mut at = 0;
            while at < all.len() {
                let end = (at + STEP).min(all.len());
                let mut touched = 0u8;
                for i in (at..end).step_by(PAGE) {
                    touched ^= all[i];
                }
                std::hint::black_box(touched);
                read_to.set(end);
                at = end;
            }
        });
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if k >= windows {
                            return mine;
                        }
                        let from = lo + k * window;
                        let to = from.saturating_add(window).min(all.len());
                        // the window's bytes in, and a line past it (most end there)
                        read_to.wait(to.saturating_add(STEP).min(all.len()));
                        let (a, b) = (line_start_at(all, lo, from), line_start_at(all, lo, to));
                        let mut l = Lines::new(max, false);
                        if a < b {
                            l.scan(all, a, b);
                        }
                        mine.push((k, l));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("indexing lines does not panic"))
            .collect()
    });
    parts.sort_unstable_by_key(|(k, _)| *k);
    let parts: Vec<Lines> = parts.into_iter().map(|(_, l)| l).collect();
    let mut stats = finish(parts, ix, max, lo > 0);
    // the first lines parsed after the split, so that the statistics do not depend on it
    for (r, e) in ix.entries.iter().enumerate() {
        if stats.lines.lines >= SAMPLED_LINES {
            break;
        }
        if !ix.damaged(r) {
            let line = &all[e.offset as usize..e.offset as usize + e.len as usize];
            let (n, _) = stats.line_of(r as u64);
            stats.lines.observe(n, line);
        }
    }
    ix.header.stats = serde_json::to_value(&stats).expect("the statistics serialize");
    Ok(())
}

/// Index the JSONL file read by `r` into `ix`, front to back, in chunks; a line is held only
/// while it is at most `max` bytes.
pub(super) fn scan(mut r: impl Read, max: u64, ix: &mut FileIndex) -> Result<(), ScanError> {
    let max = max.min(u64::from(u32::MAX));
    let mut lines = Lines::new(max, true);
    let mut chunk = vec![0u8; 1 << 20];
    let mut carry: Vec<u8> = Vec::new();
    let mut carry_start = 0u64;
    let mut over = false;
    let mut pos = 0u64;
    let mut bom = false;
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ScanError::at(pos, e)),
        };
        let mut data = &chunk[..n];
        let mut at = pos;
        if pos == 0 && data.starts_with(BOM) {
            bom = true;
            data = &data[BOM.len()..];
            at += BOM.len() as u64;
        }
        while let Some(i) = memchr::memchr(b'\n', data) {
            if over {
                lines.push_over(carry_start);
            } else if carry.is_empty() {
                lines.push(at, &data[..i]);
            } else if (carry.len() + i) as u64 > max + 1 {
                lines.push_over(carry_start);
            } else {
                carry.extend_from_slice(&data[..i]);
                lines.push(carry_start, &carry);
            }
            carry.clear();
            over = false;
            data = &data[i + 1..];
            at += i as u64 + 1;
        }
        if !data.is_empty() {
            if carry.is_empty() && !over {
                carry_start = at;
            }
            if !over {
                // `max + 1`: a line of `max` bytes may still be followed by its `\r`
                if (carry.len() + data.len()) as u64 > max + 1 {
                    over = true;
                    carry = Vec::new();
                } else {
                    carry.extend_from_slice(data);
                }
            }
        }
        pos += n as u64;
    }
    if over {
        lines.push_over(carry_start);
    } else if !carry.is_empty() {
        lines.push(carry_start, &carry);
    }
    let stats = finish(vec![lines], ix, max, bom);
    ix.header.stats = serde_json::to_value(&stats).expect("the statistics serialize");
    Ok(())
}

/// The parts' records, in order, into `ix`; their statistics.
fn finish(parts: Vec<Lines>, ix: &mut FileIndex, max: u64, bom: bool) -> JsonlStats {
    let mut stats = JsonlStats {
        max,
        bom,
        ..JsonlStats::default()
    };
    let damaged = [Member {
        name: DAMAGED,
        offset: 0,
        len: 0,
    }];
    for mut part in parts {
        let base = ix.entries.len() as u64;
        if let Some(s) = part.stats.take() {
            stats.lines = s;
        }
        // the records between two damaged ones in bulk
        let mut from = 0;
        for &d in &part.damaged {
            let d = d as usize;
            ix.push_plain(&part.entries[from..d]);
            ix.push(part.entries[d], &damaged, b"");
            from = d + 1;
        }
        ix.push_plain(&part.entries[from..]);
        // past the cap, a part's blank lines are counted, not placed
        let room = MAX_BLANKS.saturating_sub(stats.blank.len());
        let placed_all = stats.blank.len() as u64 == stats.blanks;
        if placed_all {
            stats
                .blank
                .extend(part.blank.iter().take(room).map(|b| b + base));
        }
        stats.blanks += part.blanks;
    }
    stats
}

/// The statistics a JSONL index keeps (an error when they do not parse: a damaged index).
fn stats_of(s: &Scanned) -> Result<JsonlStats, ChooseError> {
    serde_json::from_value(s.index.header.stats.clone()).map_err(|e| {
        ChooseError::Index(format!(
            "{}: its index's statistics are not valid: {e}",
            s.place
        ))
    })
}

/// Bytes of an image file read first for its size (a JPEG whose frame header lies past them,
/// behind large metadata, is read whole, up to the record limit).
const HEAD: u64 = 4096;

/// Why a file a line names gives no image size or video index at the scan (without the file's
/// name: the scan puts it before).
#[derive(Debug, thiserror::Error)]
enum FileError {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Not an image whose size its header gives.
    #[error(transparent)]
    ImageSize(#[from] stokehold_format::image_size::ImageSizeError),
    /// Not a video whose frame index can be built.
    #[error(transparent)]
    Video(#[from] crate::pack::image_folder::VideoFileError),
    /// The frame index built does not parse.
    #[error("the video's index does not parse")]
    VideoIndex,
}

/// The width and height of image file `name` of `files`, from its header.
fn image_file_size(files: &dyn NamedFiles, name: &str, max: u64) -> Result<(u32, u32), FileError> {
    let head = files.read_head(name, HEAD)?;
    match stokehold_format::image_size::image_size(&head) {
        Ok(wh) => Ok(wh),
        Err(_) if head.len() as u64 == HEAD => {
            let all = files.read_all(name, max)?;
            Ok(stokehold_format::image_size::image_size(&all)?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Bytes of a JSONL file not in memory read at once while its named files are indexed.
const NAMED_FILES_WINDOW: u64 = 8 << 20;

/// Lines whose named files are read together ([`index_named_files`]).
const NAMED_FILES_BATCH: usize = 256;

/// What the scan reads of one file a line names, or the count of a line's image list.
enum Job {
    /// The number of images a line's key lists (its sizes follow).
    Count(u32),
    /// An image file: its size from its header.
    Image(String),
    /// A video file: its frame index (or why the line names none).
    Video(Result<String, String>),
}

/// A [`Job`] done: the failures said with the file's place.
enum Done {
    Count(u32),
    Image(Result<(u32, u32), String>),
    Video(Result<(Vec<u8>, u64), String>),
}

/// `jobs` done on up to `threads` threads, in their order.
fn run_jobs(
    jobs: &[Job],
    files: &dyn NamedFiles,
    max: u64,
    threads: usize,
) -> Result<Vec<Done>, stokehold_ops::parallel::Panicked> {
    stokehold_ops::parallel::map_indexed(jobs.len(), threads.max(1), 1, |i| match &jobs[i] {
        Job::Count(n) => Done::Count(*n),
        Job::Image(p) => Done::Image(
            image_file_size(files, p, max).map_err(|why| format!("{}: {why}", files.place(p))),
        ),
        Job::Video(p) => Done::Video(p.clone().and_then(|p| {
            video_head(files, &p, max).map_err(|why| format!("{}: {why}", files.place(&p)))
        })),
    })
}

/// Images of unreadable files named in a file's notes.
const NAMED_UNREADABLE: usize = 3;

/// The head of the `video` value of file `name` of `files` (its frame index: format.md §3) and
/// the file's size.
fn video_head(files: &dyn NamedFiles, name: &str, max: u64) -> Result<(Vec<u8>, u64), FileError> {
    let bytes = files.read_all(name, max)?;
    let size = bytes.len() as u64;
    let place = files.place(name);
    let mut value = crate::pack::image_folder::load_video(
        Path::new(&place),
        bytes,
        &crate::pack::VideoPolicy::default(),
    )?;
    let head = head_len(&value).ok_or(FileError::VideoIndex)?;
    value.truncate(head);
    Ok((value, size))
}

/// Bytes of the head (header and frame index) of `video` value `v`; `None` when it is shorter
/// than its header says.
fn head_len(v: &[u8]) -> Option<usize> {
    let h = stokehold_format::video::HEAD;
    let n = u32::from_le_bytes(v.get(h - 4..h)?.try_into().ok()?) as usize;
    let end = h.checked_add(n)?;
    (end <= v.len()).then_some(end)
}

/// After the scan of JSONL file `place` (its bytes in `storage`, the files its lines name in
/// `files`: its folder, on a local disk or in object storage): for each key that lists image
/// files, every record's image sizes into its key bytes, each read from the file's header; then
/// for each key that names video files, each file's frame index (see the module's doc). The
/// files are read on up to `threads` threads.
pub(super) fn index_named_files(
    storage: &dyn Storage,
    files: &dyn NamedFiles,
    place: &str,
    (max, threads): (u64, usize),
    ix: &mut FileIndex,
) -> Result<(), ScanError> {
    let mut stats: JsonlStats = serde_json::from_value(ix.header.stats.clone())
        .map_err(|e| ScanError::at(0, ScanDetail::Statistics(e)))?;
    let keys: Vec<String> = stats
        .lines
        .keys
        .iter()
        .filter(|k| k.field_type().is_some_and(|t| t.is_image_list()))
        .map(|k| k.name.clone())
        .collect();
    let videos: Vec<String> = stats
        .lines
        .keys
        .iter()
        .filter(|k| k.field_type() == Some(stokehold_format::FieldType::Video))
        .map(|k| k.name.clone())
        .collect();
    if keys.is_empty() && videos.is_empty() {
        return Ok(());
    }
    let (mut first_key, mut out) = (vec![0u32], Vec::new());
    let (mut unreadable, mut named) = (0u64, Vec::new());
    // lines not in memory (object storage) are read a window of lines at a time, not one
    // request a line
    let (mut window, mut window_at) = (Vec::new(), 0u64);
    let file_size = storage.size().map_err(|err| ScanError::at(0, err))?;
    // the files of a batch of lines are read on `threads` threads (each a request's wait in
    // object storage), then written in line order: the same bytes and notes as one by one
    for batch in (0..ix.entries.len())
        .collect::<Vec<_>>()
        .chunks(NAMED_FILES_BATCH)
    {
        let mut jobs: Vec<Job> = Vec::new();
        // per line of the batch: its jobs, each key's in order
        let mut of_line: Vec<std::ops::Range<usize>> = Vec::with_capacity(batch.len());
        for &r in batch {
            let e = ix.entries[r];
            let from = jobs.len();
            if !ix.damaged(r) {
                let (lo, len) = (e.offset, e.len as usize);
                let line = match storage.slice(lo, len) {
                    Some(l) => l,
                    None => {
                        let held =
                            lo >= window_at && lo + len as u64 <= window_at + window.len() as u64;
                        if !held {
                            // a damaged line is not read: `len` is within the record limit
                            let n = (len as u64)
                                .max(NAMED_FILES_WINDOW)
                                .min(file_size.saturating_sub(lo));
                            window.resize(usize::try_from(n).unwrap_or(len).max(len), 0);
                            storage
                                .read_at(lo, &mut window)
                                .map_err(|err| ScanError::at(lo, err))?;
                            window_at = lo;
                        }
                        let at = (lo - window_at) as usize;
                        &window[at..at + len]
                    }
                };
                for key in &keys {
                    // a line that does not list its images fails when read: none here
                    let paths = image_paths(line, key, true).unwrap_or_default();
                    jobs.push(Job::Count(paths.len() as u32));
                    jobs.extend(paths.into_iter().map(Job::Image));
                }
                for key in &videos {
                    // a line that does not name its video fails when read: an empty entry here
                    jobs.push(Job::Video(video_path(line, key).map_err(|e| e.to_string())));
                }
            }
            of_line.push(from..jobs.len());
        }
        let at = batch.first().map_or(0, |&r| ix.entries[r].offset);
        let done = run_jobs(&jobs, files, max, threads)
            .map_err(|_| ScanError::at(at, ScanDetail::NamedFilesPanicked))?;
        for (&r, range) in batch.iter().zip(of_line) {
            let e = ix.entries[r];
            // a file that cannot be read: counted, the first few named in a note
            let mut unreadable_at = |why: &String| {
                unreadable += 1;
                if named.len() < NAMED_UNREADABLE {
                    let (n, _) = stats.line_of(r as u64);
                    named.push(format!("line {n} (sample {r}): {why}"));
                }
            };
            for got in &done[range] {
                match got {
                    Done::Count(n) => out.extend_from_slice(&n.to_le_bytes()),
                    Done::Image(got) => {
                        let (w, h) = got.as_ref().map_or_else(
                            |why| {
                                unreadable_at(why);
                                (0, 0)
                            },
                            |&wh| wh,
                        );
                        out.extend_from_slice(&w.to_le_bytes());
                        out.extend_from_slice(&h.to_le_bytes());
                    }
                    Done::Video(got) => {
                        let (head, size) = got.as_ref().map_or_else(
                            |why| {
                                unreadable_at(why);
                                (&[][..], 0)
                            },
                            |(head, size)| (&head[..], *size),
                        );
                        let len = u32::try_from(head.len())
                            .map_err(|_| ScanError::at(e.offset, ScanDetail::VideoIndexTooLarge))?;
                        out.extend_from_slice(&len.to_le_bytes());
                        out.extend_from_slice(&size.to_le_bytes());
                        out.extend_from_slice(head);
                    }
                }
            }
            let end = u32::try_from(out.len())
                .map_err(|_| ScanError::at(e.offset, ScanDetail::KeyBytesTooLarge))?;
            first_key.push(end);
        }
    }
    if unreadable > 0 {
        ix.header.notes.push(format!(
            "{place}: {unreadable} image or video files cannot be read (each one's sample is an \
             error when read): {}",
            named.join("; ")
        ));
    }
    ix.header.key_bytes = out.len() as u64;
    ix.keys = out;
    ix.first_key = first_key;
    stats.images = keys;
    stats.videos = videos;
    ix.header.stats = serde_json::to_value(&stats).expect("the statistics serialize");
    Ok(())
}

/// The sizes record `raw` (its key bytes) keeps of the `k`-th key of [`JsonlStats::images`]:
/// `[w, h, w, h, ...]`; `None` when they do not parse.
fn sizes_in(raw: &[u8], k: usize) -> Option<Vec<u32>> {
    let mut at = 0usize;
    for _ in 0..k {
        at = image_section(raw, at)?.1;
    }
    Some(
        image_section(raw, at)?
            .0
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect(),
    )
}

/// The image sizes of the key bytes' section at `at` (u32 count, then u32 width and height per
/// image) and where the next section starts; `None` when it does not parse.
fn image_section(raw: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let n = u32::from_le_bytes(raw.get(at..at.checked_add(4)?)?.try_into().ok()?) as usize;
    let end = (at + 4).checked_add(n.checked_mul(8)?)?;
    Some((raw.get(at + 4..end)?, end))
}

/// The frame index record `raw` (its key bytes) keeps of the `k`-th key of
/// [`JsonlStats::videos`], after the sizes of its `images` image keys: (the head of the video
/// value, the file's size when indexed); an empty head when the file could not be indexed;
/// `None` when the key bytes do not parse.
fn video_in(raw: &[u8], images: usize, k: usize) -> Option<(&[u8], u64)> {
    let mut at = 0usize;
    for _ in 0..images {
        at = image_section(raw, at)?.1;
    }
    for j in 0..=k {
        let n = u32::from_le_bytes(raw.get(at..at + 4)?.try_into().ok()?) as usize;
        let size = u64::from_le_bytes(raw.get(at + 4..at + 12)?.try_into().ok()?);
        let head = raw.get(at + 12..(at + 12).checked_add(n)?)?;
        if j == k {
            return Some((head, size));
        }
        at += 12 + n;
    }
    None
}

/// Per chosen list of images, each line's count and its images' sizes, from the index (what a
/// shard's meta block keeps, for `Dataset::image_sizes`). A damaged line, or one with an image
/// whose file could not be read, lists none; a file whose sizes are not kept gets no table.
pub(super) fn list_tables(s: &Scanned, chosen: &[Chosen]) -> BTreeMap<String, ListTable> {
    let mut out = BTreeMap::new();
    let Ok(stats) = stats_of(s) else {
        return out;
    };
    let ix = &s.index;
    for c in chosen.iter().filter(|c| c.ty.is_image_list()) {
        let Some(k) = stats.images.iter().position(|n| *n == c.name) else {
            continue;
        };
        let table = (|| {
            let (mut counts, mut sizes) = (Vec::with_capacity(ix.entries.len()), Vec::new());
            for r in 0..ix.entries.len() {
                let got = if ix.damaged(r) {
                    Vec::new()
                } else {
                    sizes_in(ix.key_of(r), k)?
                };
                if got.chunks_exact(2).any(|wh| wh == [0, 0]) {
                    counts.push(0);
                    continue;
                }
                counts.push(u32::try_from(got.len() / 2).ok()?);
                sizes.extend_from_slice(&got);
            }
            ListTable::new(counts, Some(sizes)).ok()
        })();
        if let Some(t) = table {
            out.insert(c.name.clone(), t);
        }
    }
    out
}

/// The fields of one JSONL file's lines.
#[derive(Debug)]
pub(super) struct JsonlCodec {
    pub index: Arc<FileIndex>,
    stats: JsonlStats,
    /// Per schema field: its key and whether a line may lack it.
    pub fields: Vec<(String, bool)>,
    /// The files its lines name (images, videos): the file's folder, local or in object storage.
    files: Arc<dyn NamedFiles>,
}

impl JsonlCodec {
    /// The codec of file `s`, the files its lines name read from `files`.
    pub(super) fn new(
        s: &Scanned,
        chosen: &[Chosen],
        files: Arc<dyn NamedFiles>,
    ) -> Result<JsonlCodec, ChooseError> {
        Ok(JsonlCodec {
            index: Arc::clone(&s.index),
            stats: stats_of(s)?,
            fields: chosen
                .iter()
                .map(|c| (c.name.clone(), c.optional))
                .collect(),
            files,
        })
    }

    /// The `list:image` value of key `key` of `line`: the bytes of the files it lists, each
    /// checked as an image. An error names the item and the file.
    fn image_files(
        &self,
        line: &[u8],
        key: &str,
        optional: bool,
    ) -> Result<FieldValue<'static>, crate::Unusable> {
        let paths = image_paths(line, key, optional)?;
        let max = self.stats.max;
        crate::sources::parquet::list_items(paths.len(), max, |k| {
            let bytes = self
                .files
                .read_all(&paths[k], max)
                .map_err(|e| format!("{}: {e}", self.files.place(&paths[k])))?;
            Ok(FieldValue::Image(bytes.into()))
        })
        .map_err(|e| format!("key {key:?} {e}").into())
    }

    /// Where the `video` value of key `key` of `line` (record `record`) is: the frame index kept
    /// at the scan (the value's head), the file it names and its size then. An error names the
    /// key and the file.
    fn video_place(
        &self,
        record: u64,
        line: &[u8],
        key: &str,
    ) -> Result<(&[u8], String, u64), crate::Unusable> {
        let file = video_path(line, key)?;
        let at = |why: String| {
            crate::Unusable(format!("key {key:?}: {}: {why}", self.files.place(&file)))
        };
        let k = self.stats.videos.iter().position(|v| v == key);
        let kept = k.and_then(|k| {
            video_in(
                self.index.key_of(record as usize),
                self.stats.images.len(),
                k,
            )
        });
        let Some((head, size)) = kept else {
            return Err(at("its frame index is not in the file's kept index".into()));
        };
        if head.is_empty() {
            return Err(at(
                "it could not be indexed when the JSONL file was scanned (see the dataset's notes)"
                    .into(),
            ));
        }
        if size > self.stats.max {
            return Err(at(format!(
                "its kept size {size} is over the record limit of {} bytes",
                self.stats.max
            )));
        }
        Ok((head, file, size))
    }

    /// The `video` value of key `key` of `line` (record `record`): the frame index kept at the
    /// scan, then the bytes of the file it names. An error names the key and the file.
    fn video_file(
        &self,
        record: u64,
        line: &[u8],
        key: &str,
    ) -> Result<FieldValue<'static>, crate::Unusable> {
        let (head, file, size) = self.video_place(record, line, key)?;
        let at = |why: String| {
            crate::Unusable(format!("key {key:?}: {}: {why}", self.files.place(&file)))
        };
        let got = self.files.size(&file).map_err(|e| at(e.to_string()))?;
        if got != size {
            return Err(at(VideoFile::changed(got, size)));
        }
        // read straight after the index: one copy of the file's bytes, not two (`size` is
        // bounded by the record limit: `video_place`)
        let h = head.len();
        let mut value = vec![0u8; h + size as usize];
        value[..h].copy_from_slice(head);
        self.files
            .read_at(&file, 0, &mut value[h..])
            .map_err(|e| at(e.to_string()))?;
        Ok(FieldValue::Bytes(value.into()))
    }

    fn line(&self, record: u64) -> String {
        match self.stats.line_of(record) {
            (n, true) => format!("line {n}"),
            (n, false) => format!("line {n} or later"),
        }
    }
}

impl RecordCodec for JsonlCodec {
    fn format(&self) -> &'static str {
        "JSONL"
    }

    /// A line's other fields are parsed from it alone; only a `list:image` or `video` field
    /// reads more (its files).
    fn fields_apart(&self) -> bool {
        true
    }

    fn video_file(
        &self,
        record: u64,
        bytes: &[u8],
        schema: &Schema,
        i: usize,
    ) -> Option<Result<VideoFile, RecordError>> {
        if schema.fields.get(i)?.ty != stokehold_format::FieldType::Video
            || self.index.damaged(record as usize)
        {
            return None; // read as any field (a damaged line: `field` says so)
        }
        let (key, _) = &self.fields[i];
        let corrupt = |detail: String| RecordError::Corrupt {
            field: i,
            offset: 0,
            detail: format!("{}: {detail}", self.line(record)),
        };
        Some(
            self.video_place(record, bytes, key)
                .map(|(head, name, size)| VideoFile {
                    head: head.to_vec(),
                    what: format!(
                        "{}: key {key:?}: {}",
                        self.line(record),
                        self.files.place(&name)
                    ),
                    files: Arc::clone(&self.files),
                    name,
                    size,
                })
                .map_err(|e| corrupt(e.into())),
        )
    }

    fn field<'a>(
        &self,
        record: u64,
        bytes: &'a [u8],
        schema: &Schema,
        i: usize,
    ) -> Result<FieldValue<'a>, RecordError> {
        let corrupt = |detail: String| RecordError::Corrupt {
            field: i,
            offset: 0,
            detail: format!("{}: {detail}", self.line(record)),
        };
        if self.index.damaged(record as usize) {
            return Err(corrupt(format!(
                "longer than the limit of {} bytes a line (max_record_bytes): not read",
                self.stats.max
            )));
        }
        let (key, optional) = &self.fields[i];
        if schema.fields[i].ty.is_image_list() {
            return self
                .image_files(bytes, key, *optional)
                .map_err(|e| corrupt(e.into()));
        }
        if schema.fields[i].ty == stokehold_format::FieldType::Video {
            return self
                .video_file(record, bytes, key)
                .map_err(|e| corrupt(e.into()));
        }
        field_value(bytes, key, &schema.fields[i].ty, *optional).map_err(|e| corrupt(e.to_string()))
    }
}

/// The schema's fields of JSONL files, from the first lines of each
/// ([`crate::sources::jsonl::choose`], as `pack` chooses them).
pub(super) fn choose(
    files: &[Scanned],
    given: Option<&[crate::sources::FieldChoice]>,
    notes: &mut Vec<String>,
    source: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<Chosen>, ChooseError> {
    let mut all = LineStats::default();
    // the keys whose image sizes (video indexes) every file's index keeps
    let mut sized: Option<Vec<String>> = None;
    let mut indexed: Option<Vec<String>> = None;
    for f in files {
        let s = stats_of(f)?;
        sized = Some(match sized {
            None => s.images.clone(),
            Some(v) => v.into_iter().filter(|k| s.images.contains(k)).collect(),
        });
        indexed = Some(match indexed {
            None => s.videos.clone(),
            Some(v) => v.into_iter().filter(|k| s.videos.contains(k)).collect(),
        });
        if let Some((line, why)) = &s.lines.first_invalid {
            notes.push(format!(
                "{} of the first {} lines of {} are not JSON objects (line {line}: {why}): each \
                 is a corrupt sample",
                s.lines.invalid, s.lines.lines, f.place
            ));
        }
        all.merge(&s.lines);
    }
    let fields = crate::sources::jsonl::choose(&all, files.len(), given, notes, source)?;
    let sized = sized.unwrap_or_default();
    let indexed = indexed.unwrap_or_default();
    Ok(fields
        .into_iter()
        .map(|mut f| {
            if f.ty.is_image_list() && !sized.contains(&f.name) {
                notes.push(format!(
                    "key {:?} lists image files, but not in the first lines of every file (no sizes \
                     kept): kept as JSON text",
                    f.name
                ));
                f.ty = stokehold_format::FieldType::Json;
            }
            if f.ty == stokehold_format::FieldType::Video && !indexed.contains(&f.name) {
                notes.push(format!(
                    "key {:?} names video files, but not in the first lines of every file (no \
                     frame index kept): kept as a string",
                    f.name
                ));
                f.ty = stokehold_format::FieldType::String;
            }
            f
        })
        .map(|f| Chosen {
            name: f.name,
            ty: f.ty,
            optional: f.optional,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_files_read_on_threads_give_the_one_thread_index_and_notes() {
        let dir = tempfile::tempdir().unwrap();
        let png = |w: u32, h: u32| {
            let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
            b.extend_from_slice(&w.to_be_bytes());
            b.extend_from_slice(&h.to_be_bytes());
            b.extend_from_slice(&[8, 2, 0, 0, 0]);
            b
        };
        let mut text = String::new();
        // more lines than a batch; every 7th names a file that is not there
        for k in 0..(NAMED_FILES_BATCH * 2 + 37) {
            std::fs::write(
                dir.path().join(format!("{k}.png")),
                png(k as u32 + 1, 2 * k as u32 + 3),
            )
            .unwrap();
            let second = if k % 7 == 3 {
                "gone.png".to_string()
            } else {
                format!("{}.png", k / 2)
            };
            text.push_str(&format!(
                "{{\"images\": [\"{k}.png\", \"{second}\"], \"n\": {k}}}\n"
            ));
        }
        let files = super::super::named_files::FolderFiles::local(dir.path());
        let storage = stokehold_format::Memory::new(text.clone().into_bytes());
        let mut got = Vec::new();
        for threads in [1, 4] {
            let mut ix = index(text.as_bytes(), 1 << 20, 1, false);
            index_named_files(&storage, &files, "t.jsonl", (1 << 20, threads), &mut ix).unwrap();
            got.push((
                ix.keys.clone(),
                ix.first_key.clone(),
                ix.header.notes.clone(),
            ));
        }
        assert_eq!(got[0], got[1]);
        let (keys, first, notes) = &got[0];
        assert_eq!(first.len(), NAMED_FILES_BATCH * 2 + 38);
        // line 4 (sample 3): its second image is not there (size 0 x 0), its first 4 x 9
        let line3 = &keys[first[3] as usize..first[4] as usize];
        let words: Vec<u32> = line3
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [2, 4, 9, 0, 0]);
        let missing = (0..NAMED_FILES_BATCH * 2 + 37)
            .filter(|k| k % 7 == 3)
            .count();
        assert!(
            notes
                .iter()
                .any(|n| n.contains(&format!("{missing} image or video files"))
                    && n.contains("line 4 (sample 3)")
                    && n.contains("gone.png")),
            "{notes:?}"
        );
    }

    fn index(file: &[u8], max: u64, threads: usize, stream: bool) -> FileIndex {
        let mut ix = FileIndex::new("jsonl", "f", file.len() as u64, None);
        if stream {
            scan(file, max, &mut ix).unwrap();
        } else {
            // windows of a few bytes, so that lines start and end in many of them
            scan_slice(file, max, &mut ix, threads, 5).unwrap();
        }
        ix
    }

    #[test]
    fn the_index_does_not_depend_on_the_windows_nor_the_threads() {
        let mut file = b"\xef\xbb\xbf".to_vec(); // a byte-order mark first
        for i in 0..300u32 {
            let n = i * 7919 % 1000;
            match i % 50 {
                7 => file.push(b'\n'),                    // a blank line
                9 => file.extend_from_slice(&[b'x'; 90]), // over the limit
                _ => file.extend_from_slice(format!("{{\"n\": {n}}}").as_bytes()),
            }
            file.push(b'\n');
        }
        file.extend_from_slice(b"{\"last\": 1}"); // no newline at the end
        let want = index(&file, 64, 1, true);
        assert_eq!(
            want.entries.len(),
            301 - 6,
            "the blank lines are not records"
        );
        for threads in [1, 2, 3] {
            for window in [1, 2, 13, 64, 1 << 20] {
                let mut ix = FileIndex::new("jsonl", "f", file.len() as u64, None);
                scan_slice(&file, 64, &mut ix, threads, window).unwrap();
                assert_eq!(
                    ix.to_bytes(),
                    want.to_bytes(),
                    "threads {threads} window {window}"
                );
            }
        }
    }

    #[test]
    fn a_line_starts_after_a_newline_or_at_the_first_byte() {
        let all = b"ab\ncd\n\nef";
        let starts: Vec<usize> = (0..=all.len()).map(|p| line_start_at(all, 0, p)).collect();
        assert_eq!(starts, [0, 3, 3, 3, 6, 6, 6, 7, 9, 9]);
        assert_eq!(
            line_start_at(b"\xef\xbb\xbfa\nb", 3, 1),
            3,
            "not inside the mark"
        );
    }

    #[test]
    fn kept_image_sizes_parse_per_key_and_bad_ones_give_none() {
        let mut raw = Vec::new();
        for v in [2u32, 40, 30, 10, 20, 0, 1, 5, 7] {
            raw.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(sizes_in(&raw, 0), Some(vec![40, 30, 10, 20]));
        assert_eq!(sizes_in(&raw, 1), Some(vec![]));
        assert_eq!(sizes_in(&raw, 2), Some(vec![5, 7]));
        assert_eq!(sizes_in(&raw, 3), None);
        // a count past the bytes, a cut count
        assert_eq!(sizes_in(&u32::MAX.to_le_bytes(), 0), None);
        assert_eq!(sizes_in(&raw[..2], 0), None);
        assert_eq!(sizes_in(&raw[..12], 0), None);
    }

    #[test]
    fn every_scan_finds_the_same_lines() {
        let mut file = b"\xef\xbb\xbf{\"a\":1}\r\n\n  \n{\"a\":2}\n".to_vec();
        for i in 0..300 {
            file.extend_from_slice(
                format!("{{\"a\":{i},\"s\":\"{}\"}}\n", "x".repeat(i)).as_bytes(),
            );
            if i % 7 == 0 {
                file.extend_from_slice(b"\r\n");
            }
        }
        file.extend_from_slice(b"{\"a\":\"no newline\"}");
        let want = index(&file, 200, 1, false);
        for threads in [2, 3, 8, 64] {
            assert_eq!(index(&file, 200, threads, false), want, "{threads} threads");
        }
        assert_eq!(index(&file, 200, 1, true), want, "streamed");
        let st: JsonlStats = serde_json::from_value(want.header.stats.clone()).unwrap();
        assert!(st.bom);
        // the first line starts after the mark and ends before its \r
        assert_eq!(want.entries[0].offset, 3);
        assert_eq!(want.entries[0].len, 7);
        assert_eq!(st.line_of(0), (1, true));
        assert_eq!(st.line_of(1), (4, true));
        // lines over 200 bytes are damaged records of no bytes
        let long: Vec<usize> = (0..want.entries.len())
            .filter(|&r| want.damaged(r))
            .collect();
        assert!(!long.is_empty());
        for r in long {
            assert_eq!(want.entries[r].len, 0);
        }
        let last = want.entries.last().unwrap();
        assert_eq!(&file[last.offset as usize..], b"{\"a\":\"no newline\"}");
    }
}
