//! JSON Lines in place: one sample per non-empty line. The scan is a newline search
//! (`memchr`) and a CRC-32C of each line, split among threads over a mapped file; only the
//! first lines are parsed (to choose the fields: [`crate::sources::jsonl`]). A line's fields
//! are read from its bytes when the sample is read ([`JsonlCodec`]), so a line that is not a JSON
//! object, or lacks a required key, is a corrupt sample then (the loader's error policy counts
//! it), named by file, line number, byte offset and sample index.
//!
//! Lines end with `\n` or `\r\n`; the last may have no newline; blank lines (only whitespace)
//! are not samples; a UTF-8 byte order mark at the file's start is skipped. A line longer
//! than the record limit is kept as a damaged record (reading it is an error that says so),
//! and no buffer is ever sized by it.

use std::io::Read;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stokehold_format::{FieldValue, IndexEntry, RecordCodec, RecordError, Schema, crc};

use super::index::{DAMAGED, FileIndex, Member};
use super::{ChooseError, Chosen, Scanned};
use crate::sources::jsonl::{BOM, LineStats, SAMPLED_LINES, field_value, is_blank};

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

/// Index a JSONL file whose bytes are all in memory (a mapped file) into `ix`, split among
/// `threads` threads at line ends.
pub(super) fn scan_slice(
    all: &[u8],
    max: u64,
    ix: &mut FileIndex,
    threads: usize,
) -> Result<(), (u64, String)> {
    let lo = if all.starts_with(BOM) { BOM.len() } else { 0 };
    let threads = threads.max(1);
    let mut cuts = vec![lo];
    for k in 1..threads {
        let at = lo + (all.len() - lo) * k / threads;
        let at = at.max(*cuts.last().expect("one cut"));
        let cut = memchr::memchr(b'\n', &all[at..]).map_or(all.len(), |i| at + i + 1);
        if cut > *cuts.last().expect("one cut") && cut < all.len() {
            cuts.push(cut);
        }
    }
    cuts.push(all.len());
    let max = max.min(u64::from(u32::MAX));
    let parts: Vec<Lines> = std::thread::scope(|s| {
        let handles: Vec<_> = cuts
            .windows(2)
            .map(|w| {
                let (a, b) = (w[0], w[1]);
                s.spawn(move || {
                    let mut l = Lines::new(max, false);
                    l.scan(all, a, b);
                    l
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("indexing lines does not panic"))
            .collect()
    });
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
pub(super) fn scan(mut r: impl Read, max: u64, ix: &mut FileIndex) -> Result<(), (u64, String)> {
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
            Err(e) => return Err((pos, e.to_string())),
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
        let mut bad = part.damaged.iter().peekable();
        for (r, e) in part.entries.iter().enumerate() {
            let hurt = bad.next_if(|&&d| d == r as u64).is_some();
            ix.push(*e, if hurt { &damaged } else { &[] }, b"");
        }
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

/// The fields of one JSONL file's lines.
#[derive(Debug)]
pub(super) struct JsonlCodec {
    pub index: Arc<FileIndex>,
    stats: JsonlStats,
    /// Per schema field: its key and whether a line may lack it.
    pub fields: Vec<(String, bool)>,
}

impl JsonlCodec {
    pub(super) fn new(s: &Scanned, chosen: &[Chosen]) -> Result<JsonlCodec, ChooseError> {
        Ok(JsonlCodec {
            index: Arc::clone(&s.index),
            stats: stats_of(s)?,
            fields: chosen
                .iter()
                .map(|c| (c.name.clone(), c.optional))
                .collect(),
        })
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
        field_value(bytes, key, &schema.fields[i].ty, *optional).map_err(corrupt)
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
    for f in files {
        let s = stats_of(f)?;
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
    Ok(fields
        .into_iter()
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

    fn index(file: &[u8], max: u64, threads: usize, stream: bool) -> FileIndex {
        let mut ix = FileIndex::new("jsonl", "f", file.len() as u64, None);
        if stream {
            scan(file, max, &mut ix).unwrap();
        } else {
            scan_slice(file, max, &mut ix, threads).unwrap();
        }
        ix
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
