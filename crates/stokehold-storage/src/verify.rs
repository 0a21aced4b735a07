//! Full verification of a dataset: every checksum, the index, the manifest, in one sequential pass
//! over each shard's bytes.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::locate::{ManifestIo, locate};
use crate::location::Location;
use stokehold_format::crc;
use stokehold_format::error::{FormatError, Result};
use stokehold_format::limits::Limits;
use stokehold_format::manifest::Manifest;
use stokehold_format::record::RecordView;
use stokehold_format::shard::{HEADER_LEN, ShardReader, TRAILER_LEN};

/// Options of [`verify_dataset`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOptions {
    /// Report every fault rather than stopping at the first.
    pub all: bool,
    /// Worker threads (shards are verified in parallel); 0 means one per core.
    pub threads: usize,
    /// Bytes read per positional read.
    pub chunk_bytes: usize,
    /// Limits on sizes read from the files.
    pub limits: Limits,
    /// Read the shards through read-only memory maps (no copy into a buffer: about 1.4× faster
    /// on a hot page cache). A shard truncated by another process *while* it is being verified
    /// then kills the process with SIGBUS instead of giving an error; turn this off where that
    /// can happen.
    pub mmap: bool,
    /// For a dataset URL: options of its object store (see
    /// [`OpenOptions::storage_options`](crate::OpenOptions::storage_options)); credentials
    /// otherwise come from the environment.
    pub storage_options: std::collections::BTreeMap<String, String>,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        VerifyOptions {
            all: false,
            threads: 0,
            chunk_bytes: 4 << 20,
            limits: Limits::default(),
            mmap: true,
            storage_options: Default::default(),
        }
    }
}

/// What verification found.
#[derive(Debug, Default)]
pub struct VerifyReport {
    /// Shards in the manifest.
    pub shards: usize,
    /// Records checked.
    pub records: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Every fault found, in shard and byte order (only the first unless `all`).
    pub faults: Vec<FormatError>,
}

impl VerifyReport {
    /// True when nothing is wrong.
    pub fn ok(&self) -> bool {
        self.faults.is_empty()
    }
}

/// Verify the dataset in `dir`. An `Err` means the manifest itself could not be read or is
/// invalid; faults in shards are in the report. `progress` is called with byte counts as they
/// are checked (from worker threads).
pub fn verify_dataset(
    dir: &Path,
    options: VerifyOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<VerifyReport> {
    let location = locate(dir, &options.storage_options)?;
    let manifest = Manifest::read(&*location, &options.limits)?;
    let n = manifest.shards.len();
    let threads = match options.threads {
        // object storage: requests in flight rather than cores
        0 => location.parallelism(),
        t => t,
    }
    .min(n.max(1));
    let next = AtomicUsize::new(0);
    // In first-fault mode, shards after the first faulty one need not be read.
    let first_bad = AtomicUsize::new(usize::MAX);
    let results: Mutex<Vec<(usize, ShardOutcome)>> = Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut buf = vec![0u8; options.chunk_bytes.max(4096)];
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n || (!options.all && k > first_bad.load(Ordering::Relaxed)) {
                        break;
                    }
                    let out =
                        verify_shard(dir, &manifest, k, &options, &*location, &mut buf, progress);
                    if !out.faults.is_empty() {
                        first_bad.fetch_min(k, Ordering::Relaxed);
                    }
                    results
                        .lock()
                        .expect("no panics while locked")
                        .push((k, out));
                }
            });
        }
    });
    let mut results = results.into_inner().expect("no panics while locked");
    results.sort_by_key(|(k, _)| *k);
    let mut report = VerifyReport {
        shards: n,
        ..VerifyReport::default()
    };
    for (_, out) in results {
        report.records += out.records;
        report.bytes += out.bytes;
        report.faults.extend(out.faults);
        if !options.all && !report.faults.is_empty() {
            report.faults.truncate(1);
            break;
        }
    }
    Ok(report)
}

#[derive(Debug, Default)]
struct ShardOutcome {
    records: u64,
    bytes: u64,
    faults: Vec<FormatError>,
}

fn verify_shard(
    dir: &Path,
    manifest: &Manifest,
    k: usize,
    options: &VerifyOptions,
    location: &dyn Location,
    buf: &mut [u8],
    progress: &(dyn Fn(u64) + Sync),
) -> ShardOutcome {
    let mut out = ShardOutcome::default();
    let path = manifest.shard_path(dir, k);
    let info = &manifest.shards[k];
    let opened = location
        .head(&info.file)
        .and_then(|meta| location.open_scan(&info.file, &meta, options.mmap))
        .map_err(|e| FormatError::io(&path, None, e))
        .and_then(|source| ShardReader::from_source(&path, source, options.limits));
    let mut shard = match opened {
        Ok(s) => s,
        Err(e) => {
            out.faults.push(e);
            return out;
        }
    };
    let first_global: u64 = manifest.shards[..k].iter().map(|s| s.records).sum();
    shard.set_first_global(first_global);
    let mismatch = |what: &str, m: String, s: String| FormatError::Manifest {
        path: path.clone(),
        detail: format!("{what} disagrees with the manifest: manifest says {m}, the shard has {s}"),
    };
    if shard.len() != info.records {
        out.faults.push(mismatch(
            "record count",
            info.records.to_string(),
            shard.len().to_string(),
        ));
    }
    if shard.file_len() != info.bytes {
        out.faults.push(mismatch(
            "file size",
            info.bytes.to_string(),
            shard.file_len().to_string(),
        ));
    }
    if shard.schema() != &manifest.schema {
        out.faults.push(mismatch(
            "schema",
            manifest.schema.to_string(),
            shard.schema().to_string(),
        ));
    }
    if !options.all && !out.faults.is_empty() {
        return out;
    }

    let mut scan = Scanner {
        map: shard.source().slice(0, shard.file_len() as usize),
        shard: &shard,
        buf,
        win_start: 0,
        win_len: 0,
        progress,
        bytes: 0,
    };
    let nfields = shard.schema().len();
    let mut spill = Vec::new();
    let trailer_start = shard.file_len() - TRAILER_LEN;
    // The CRC-32C of everything before the trailer, built by combining the CRC of each segment
    // (header, padding, record, ..., meta and index) so that each byte is hashed once.
    let mut file_crc = match scan.crc_of(0, HEADER_LEN, None) {
        Ok(c) => c,
        Err(e) => {
            out.faults.push(e);
            return out;
        }
    };
    let mut pos = HEADER_LEN;
    for (i, e) in shard.index().iter().enumerate() {
        let i = i as u64;
        let gap = scan.crc_of(pos, e.offset, None);
        let rec = gap.and_then(|g| {
            file_crc = crc::combine(file_crc, g, e.offset - pos);
            spill.clear();
            scan.crc_of(e.offset, e.end(), Some(&mut spill))
        });
        let c = match rec {
            Ok(c) => c,
            Err(err) => {
                out.faults.push(err);
                return out;
            }
        };
        file_crc = crc::combine(file_crc, c, u64::from(e.len));
        pos = e.end();
        out.records += 1;
        if c != e.crc {
            out.faults.push(FormatError::Checksum {
                path: path.clone(),
                what: shard.describe(i),
                start: e.offset,
                end: e.end(),
                stored: e.crc,
                computed: c,
            });
            if !options.all {
                return out;
            }
            continue;
        }
        let bytes: &[u8] = if spill.is_empty() {
            scan.window(e.offset, e.end())
        } else {
            &spill
        };
        if let Err(re) = RecordView::parse(bytes, nfields) {
            out.faults.push(shard.record_error(i, re));
            if !options.all {
                return out;
            }
        }
    }
    match scan.crc_of(pos, trailer_start, None) {
        Ok(c) => file_crc = crc::combine(file_crc, c, trailer_start - pos),
        Err(e) => {
            out.faults.push(e);
            return out;
        }
    }
    if file_crc != shard.stored_prefix_crc() {
        out.faults.push(FormatError::Checksum {
            path: path.clone(),
            what: "whole file (as stored in the trailer)".into(),
            start: 0,
            end: trailer_start,
            stored: shard.stored_prefix_crc(),
            computed: file_crc,
        });
    }
    match scan.crc_of(trailer_start, shard.file_len(), None) {
        Ok(t) => {
            let whole = crc::combine(file_crc, t, TRAILER_LEN);
            if whole != info.crc32c {
                out.faults.push(FormatError::Checksum {
                    path: path.clone(),
                    what: "whole file (as listed in the manifest)".into(),
                    start: 0,
                    end: shard.file_len(),
                    stored: info.crc32c,
                    computed: whole,
                });
            }
        }
        Err(e) => out.faults.push(e),
    }
    out.bytes = scan.bytes;
    out
}

/// Sequential reads through a window buffer, or slices of a memory map.
struct Scanner<'a> {
    /// The whole file, when it is mapped: then no reads or copies are made.
    map: Option<&'a [u8]>,
    shard: &'a ShardReader,
    buf: &'a mut [u8],
    win_start: u64,
    win_len: usize,
    progress: &'a (dyn Fn(u64) + Sync),
    bytes: u64,
}

impl Scanner<'_> {
    fn win_end(&self) -> u64 {
        self.win_start + self.win_len as u64
    }

    /// Move the window to start at `at`, keeping the bytes it already holds from there on, and
    /// read as much as fits.
    fn fill(&mut self, at: u64) -> Result<()> {
        let file_len = self.shard.file_len();
        let keep = if at >= self.win_start && at < self.win_end() {
            let from = (at - self.win_start) as usize;
            self.buf.copy_within(from..self.win_len, 0);
            self.win_len - from
        } else {
            0
        };
        let read_at = at + keep as u64;
        let n = ((self.buf.len() - keep) as u64).min(file_len - read_at) as usize;
        self.shard
            .source()
            .read_at(read_at, &mut self.buf[keep..keep + n])
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => FormatError::Truncated {
                    path: self.shard.path().to_path_buf(),
                    what: "shard (changed while being verified?)".into(),
                    start: read_at,
                    end: read_at + n as u64,
                    file_len,
                },
                _ => FormatError::io(self.shard.path(), Some(read_at), e),
            })?;
        self.win_start = at;
        self.win_len = keep + n;
        self.bytes += n as u64;
        (self.progress)(n as u64);
        Ok(())
    }

    /// CRC-32C of bytes `start..end`. Afterwards either the whole range lies in the window (see
    /// [`Scanner::window`]) and `spill` is untouched, or the range was longer than the buffer and
    /// its bytes were appended to `spill` (when given).
    fn crc_of(&mut self, start: u64, end: u64, mut spill: Option<&mut Vec<u8>>) -> Result<u32> {
        if let Some(map) = self.map {
            let n = end - start;
            self.bytes += n;
            (self.progress)(n);
            return Ok(crc::crc32c(&map[start as usize..end as usize]));
        }
        if end - start <= self.buf.len() as u64 {
            if start < self.win_start || end > self.win_end() {
                self.fill(start)?;
            }
            return Ok(crc::crc32c(self.window(start, end)));
        }
        let mut c = 0u32;
        let mut pos = start;
        while pos < end {
            if pos < self.win_start || pos >= self.win_end() {
                self.fill(pos)?;
            }
            let b = end.min(self.win_end());
            let piece = self.window(pos, b);
            c = crc::append(c, piece);
            if let Some(s) = spill.as_deref_mut() {
                s.extend_from_slice(piece);
            }
            pos = b;
        }
        Ok(c)
    }

    /// The bytes `start..end`, which must lie in the current window.
    fn window(&self, start: u64, end: u64) -> &[u8] {
        if let Some(map) = self.map {
            return &map[start as usize..end as usize];
        }
        let a = (start - self.win_start) as usize;
        let b = (end - self.win_start) as usize;
        &self.buf[a..b]
    }
}
