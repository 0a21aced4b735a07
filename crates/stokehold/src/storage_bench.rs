//! What the storage under a dataset can deliver for the loader's access patterns: sequential
//! reads of the shard files (large reads, as a streaming reader or a cache warm-up does) and
//! positional reads of single records in a global-shuffle order (as the loader reads with
//! `Shuffle::Global`), optionally with `O_DIRECT` and from a cold page cache.
//!
//! Each measurement runs until its time budget or its data runs out. "Cold" means: before each
//! measurement the shard files' pages are dropped from the page cache with
//! `posix_fadvise(POSIX_FADV_DONTNEED)`, which evicts only clean pages that no other process
//! maps or locks (on tmpfs and other RAM file systems nothing can be evicted: there the figures
//! are memory speed). Dropping the whole page cache (`/proc/sys/vm/drop_caches`) needs root and
//! is left to the caller.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use stokehold_storage::Dataset;

use crate::sampler::{EpochOrder, Shuffle};

/// Errors of the storage benchmark.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageBenchError {
    /// Opening or reading a shard file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The dataset's order could not be built.
    #[error("{0}")]
    Order(String),
}

/// How to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageOptions {
    /// Time budget of each measurement.
    pub duration: Duration,
    /// Threads issuing random record reads (the loader's worker threads read in parallel too).
    pub threads: usize,
    /// Bytes per sequential read.
    pub chunk: usize,
    /// Open the files with `O_DIRECT` (bypassing the page cache); falls back to buffered reads,
    /// with a note, where the file system refuses it.
    pub direct: bool,
    /// Drop the files' clean pages from the page cache before each measurement.
    pub evict: bool,
    /// Seed of the global-shuffle order of the random reads.
    pub seed: u64,
}

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            duration: Duration::from_secs(3),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            chunk: 4 << 20,
            direct: false,
            evict: true,
            seed: 0,
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Measure {
    /// Bytes read (of records or files; not counting O_DIRECT's alignment padding).
    pub bytes: u64,
    /// Reads issued.
    pub reads: u64,
    /// Wall time.
    pub seconds: f64,
}

impl Measure {
    /// Bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9)
    }

    /// Reads per second.
    pub fn reads_per_sec(&self) -> f64 {
        self.reads as f64 / self.seconds.max(1e-9)
    }
}

/// What the storage delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageReport {
    /// Sequential reads of whole shard files in `chunk`-byte reads.
    pub sequential: Measure,
    /// Positional reads of single records in a global-shuffle order.
    pub random: Measure,
    /// Mean record size in the dataset.
    pub mean_record: f64,
    /// Whether O_DIRECT was used.
    pub direct: bool,
    /// Whether the files' pages were dropped before each measurement.
    pub evicted: bool,
    /// Things worth knowing about the figures (fallbacks, eviction that did not apply).
    pub notes: Vec<String>,
}

/// The files of the dataset, opened for the benchmark.
struct Files {
    files: Vec<(PathBuf, File)>,
    direct: bool,
}

const ALIGN: u64 = 4096;

fn open_files(
    ds: &Dataset,
    direct: bool,
    notes: &mut Vec<String>,
) -> Result<Files, StorageBenchError> {
    let paths: Vec<PathBuf> = ds.shards().iter().map(|s| s.path().to_path_buf()).collect();
    let open = |p: &PathBuf, direct: bool| {
        let mut o = std::fs::OpenOptions::new();
        o.read(true);
        #[cfg(target_os = "linux")]
        if direct {
            use std::os::unix::fs::OpenOptionsExt;
            o.custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32);
        }
        #[cfg(not(target_os = "linux"))]
        if direct {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "O_DIRECT is Linux-only",
            ));
        }
        o.open(p)
    };
    let mut use_direct = direct;
    if direct && let Some(p) = paths.first() {
        // tmpfs and some other file systems refuse O_DIRECT with EINVAL
        let probe = open(p, true).and_then(|f| {
            let mut buf = AlignedBuf::new(ALIGN as usize);
            f.read_at(buf.as_mut(), 0).map(|_| ())
        });
        if let Err(e) = probe {
            notes.push(format!(
                "O_DIRECT is not supported here ({e}); measured buffered reads instead"
            ));
            use_direct = false;
        }
    }
    let mut files = Vec::with_capacity(paths.len());
    for p in paths {
        let f = open(&p, use_direct).map_err(|source| StorageBenchError::Io {
            path: p.clone(),
            source,
        })?;
        files.push((p, f));
    }
    Ok(Files {
        files,
        direct: use_direct,
    })
}

/// Drop the files' clean pages from the page cache; false when the kernel refused.
#[cfg(target_os = "linux")]
fn evict(files: &Files) -> bool {
    let mut ok = true;
    for (_, f) in &files.files {
        ok &= rustix::fs::fadvise(f, 0, None, rustix::fs::Advice::DontNeed).is_ok();
    }
    ok
}

/// Not available here (`posix_fadvise` is Linux's).
#[cfg(not(target_os = "linux"))]
fn evict(_files: &Files) -> bool {
    false
}

/// A zeroed buffer whose start is aligned to 4096 bytes (for O_DIRECT).
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + ALIGN as usize];
        let start = storage.as_ptr().align_offset(ALIGN as usize);
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    fn resize(&mut self, len: usize) {
        if len > self.len {
            *self = AlignedBuf::new(len.next_power_of_two());
        }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Read `len` bytes at `offset` of `f` (with O_DIRECT: the aligned span around them).
fn read_span(
    f: &File,
    direct: bool,
    offset: u64,
    len: usize,
    buf: &mut AlignedBuf,
) -> io::Result<()> {
    if direct {
        let start = offset / ALIGN * ALIGN;
        let end = (offset + len as u64).div_ceil(ALIGN) * ALIGN;
        let n = (end - start) as usize;
        buf.resize(n);
        let b = &mut buf.as_mut()[..n];
        // the aligned end may pass the end of the file: a short read there is fine
        let mut done = 0;
        while done < n {
            match f.read_at(&mut b[done..], start + done as u64) {
                Ok(0) => break,
                Ok(k) => done += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if (done as u64) < offset + len as u64 - start {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    } else {
        buf.resize(len);
        f.read_exact_at(&mut buf.as_mut()[..len], offset)
    }
}

/// Drop `ds`'s files' clean pages from the page cache with `posix_fadvise(DONTNEED)`; false
/// when the kernel refused for some file.
pub fn drop_cached_pages(ds: &Dataset) -> Result<bool, StorageBenchError> {
    let files = open_files(ds, false, &mut Vec::new())?;
    Ok(evict(&files))
}

/// Measure sequential and random read throughput of `ds`'s files.
pub fn measure(ds: &Dataset, options: &StorageOptions) -> Result<StorageReport, StorageBenchError> {
    let mut notes = Vec::new();
    let files = open_files(ds, options.direct, &mut notes)?;
    let io_err = |k: usize, source| StorageBenchError::Io {
        path: files.files[k].0.clone(),
        source,
    };
    let mut evicted = false;
    if options.evict {
        evicted = evict(&files);
        if !evicted {
            notes.push("posix_fadvise(DONTNEED) was refused: the page cache may be warm".into());
        }
    }
    // sequential: each file from its start, in `chunk`-byte reads
    let chunk = options.chunk.max(ALIGN as usize) / ALIGN as usize * ALIGN as usize;
    let mut buf = AlignedBuf::new(chunk);
    let t0 = Instant::now();
    let mut seq = Measure::default();
    'files: for (k, (_, f)) in files.files.iter().enumerate() {
        let len = f.metadata().map_err(|e| io_err(k, e))?.len();
        let mut off = 0u64;
        while off < len {
            let n = chunk.min((len - off) as usize);
            read_span(f, files.direct, off, n, &mut buf).map_err(|e| io_err(k, e))?;
            seq.bytes += n as u64;
            seq.reads += 1;
            off += n as u64;
            if t0.elapsed() >= options.duration {
                break 'files;
            }
        }
    }
    seq.seconds = t0.elapsed().as_secs_f64();

    // random: single records in a global-shuffle order, on `threads` threads
    if options.evict {
        evict(&files);
    }
    let blocks: Vec<u64> = ds.manifest().shards.iter().map(|s| s.records).collect();
    let order = EpochOrder::new(ds.len(), Some(&blocks), &Shuffle::Global, options.seed, 0)
        .map_err(|e| StorageBenchError::Order(e.to_string()))?;
    let next = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    let reads = AtomicU64::new(0);
    let t0 = Instant::now();
    let first_error = std::sync::Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..options.threads.max(1) {
            s.spawn(|| {
                let mut buf = AlignedBuf::new(64 << 10);
                loop {
                    let p = next.fetch_add(1, Ordering::Relaxed);
                    let Some(id) = order.id_at(p) else { return };
                    if t0.elapsed() >= options.duration {
                        return;
                    }
                    let Ok((k, local)) = ds.locate(id) else {
                        return;
                    };
                    let e = ds.shards()[k].entry(local);
                    let (_, f) = &files.files[k];
                    if let Err(err) = read_span(f, files.direct, e.offset, e.len as usize, &mut buf)
                    {
                        if let Ok(mut fe) = first_error.lock() {
                            fe.get_or_insert((k, err));
                        }
                        next.store(u64::MAX / 2, Ordering::Relaxed);
                        return;
                    }
                    bytes.fetch_add(u64::from(e.len), Ordering::Relaxed);
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    if let Some((k, err)) = first_error.into_inner().ok().flatten() {
        return Err(io_err(k, err));
    }
    let random = Measure {
        bytes: bytes.into_inner(),
        reads: reads.into_inner(),
        seconds: t0.elapsed().as_secs_f64(),
    };
    let total: u64 = ds
        .shards()
        .iter()
        .map(|s| s.index().iter().map(|e| u64::from(e.len)).sum::<u64>())
        .sum();
    Ok(StorageReport {
        sequential: seq,
        random,
        mean_record: total as f64 / ds.len().max(1) as f64,
        direct: files.direct,
        evicted,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stokehold_format::{FieldValue, Schema};
    use stokehold_storage::{DatasetWriteOptions, DatasetWriter};

    #[test]
    fn reads_every_record_of_a_small_dataset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ds");
        let schema = Schema::from_specs([("b", "bytes")]).unwrap();
        let mut w = DatasetWriter::create(&path, schema, DatasetWriteOptions::default()).unwrap();
        for i in 0..200u32 {
            w.write(&[FieldValue::Bytes(vec![i as u8; 1000 + i as usize].into())])
                .unwrap();
        }
        w.finish().unwrap();
        let ds = Dataset::open(&path).unwrap();
        for direct in [false, true] {
            let r = measure(
                &ds,
                &StorageOptions {
                    duration: Duration::from_secs(30),
                    threads: 2,
                    direct,
                    ..StorageOptions::default()
                },
            )
            .unwrap();
            // every record once, and every file byte once
            assert_eq!(r.random.reads, 200);
            let records: u64 = (0..200u64).map(|i| 1000 + i).sum();
            assert!(r.random.bytes >= records, "{r:?}");
            let files: u64 = ds.shards().iter().map(|s| s.file_len()).sum();
            assert_eq!(r.sequential.bytes, files);
            assert!(r.mean_record > 1000.0);
            if direct && !r.direct {
                assert!(r.notes.iter().any(|n| n.contains("O_DIRECT")));
            }
        }
    }
}
