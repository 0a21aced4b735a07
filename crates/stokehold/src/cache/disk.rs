//! A local disk cache of shard files for datasets on slow storage (a network filesystem now;
//! object storage later): [`open_dataset`] opens a dataset whose shards are read from the source
//! until their local copy is ready, and copied into the cache directory by a background thread in
//! the dataset's shard order.
//!
//! Rules (rows E1–E3 of the reliability matrix); the claim, the publication and the sweep are
//! the protocol of every node-local directory (`stokehold_storage::NodeDir`):
//! - **Atomic publication.** A shard is copied to `NAME.tmp-PID`, its CRC-32C computed on the
//!   way and compared with the manifest's, the file synced, then renamed to `NAME` and the
//!   directory synced. A file without the `.tmp-` suffix is complete and checked.
//! - **One fetch per shard, several processes.** Each copy is made while holding an exclusive
//!   `flock` on `NAME.lock`; a process that finds the lock taken fetches other shards first and
//!   comes back later, when the copy is usually published.
//! - **Orphans swept.** At open, `*.tmp-*` files whose lock no live process holds (a process
//!   killed while copying) are removed; they are never read.
//! - **Size limit.** Copies are kept under `limit` bytes. To make room, the least recently used
//!   entries (modification time, refreshed on use) that belong to other datasets are removed; the
//!   current dataset's own entries are never evicted during a run ("cache what fits", as the RAM
//!   cache: with a random order any eviction would thrash). A limit below the largest shard is a
//!   configuration error at open.
//! - **Failures bypass the cache.** A failed copy (disk full, I/O error, checksum mismatch) is
//!   reported once on stderr and the shard is read from the source; nothing deadlocks.
//! - **A copy is never trusted more than its source.** A copy damaged after it was published
//!   (between runs, or under a run) fails its records' checksums when read: the reader then
//!   [`CacheProgress::discard`]s it (the file is deleted, the shard reads its source again, the
//!   next run copies it anew), reports the damaged copy by its own name once, and reads the
//!   record again from the source.
//!
//! Names are `DATASET-CRC-FILE`: a hash of the source directory's path, the shard's CRC-32C from
//! the manifest, and its file name, so a changed shard never matches an old copy.

use std::collections::VecDeque;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use stokehold_format::{FormatError, Manifest, ShardReader, crc};
use stokehold_format::{ReadProfile, Storage};
use stokehold_storage::ManifestIo;
use stokehold_storage::file::PreadFile;
use stokehold_storage::{Access, Dataset, NodeDir, OpenOptions};

use crate::error::{EngineError, Result};

/// What the disk cache did in this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskCacheStats {
    /// Shards this process copied into the cache.
    pub fetched: u64,
    /// Shards found already in the cache (copied earlier or by another process).
    pub reused: u64,
    /// Shards read from the source because their copy failed or did not fit.
    pub bypassed: u64,
    /// Orphaned temporary files removed at open.
    pub swept: u64,
    /// Entries of other datasets removed to make room.
    pub evicted: u64,
}

/// A cache directory with a size limit. See the module documentation.
#[derive(Debug)]
pub struct DiskCache {
    dir: NodeDir,
    limit: u64,
    fetched: AtomicU64,
    reused: AtomicU64,
    bypassed: AtomicU64,
    swept: AtomicU64,
    evicted: AtomicU64,
    /// Serialises this process's space accounting (other processes are bounded by the locks).
    space: Mutex<()>,
    /// Test hook: fail (or abort the process) after this many bytes of a copy were written.
    fault: Mutex<Option<(u64, bool)>>,
}

impl DiskCache {
    /// Open (creating it) the cache directory `dir` with a size limit, and sweep orphaned
    /// temporary files.
    pub fn open(dir: impl Into<PathBuf>, limit: u64) -> Result<Arc<DiskCache>> {
        let dir = dir.into();
        let dir = NodeDir::create(&dir).map_err(|e| FormatError::io(&dir, None, e))?;
        let cache = DiskCache {
            dir,
            limit,
            fetched: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            bypassed: AtomicU64::new(0),
            swept: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            space: Mutex::new(()),
            fault: Mutex::new(None),
        };
        cache.sweep();
        Ok(Arc::new(cache))
    }

    /// Make this cache's copies fail with "no space left on device" once `bytes` bytes of a copy
    /// are written (`abort = false`), or abort the whole process at that point (`abort = true`: a
    /// crash in the middle of a copy). For reliability tests only.
    #[doc(hidden)]
    pub fn inject_copy_fault(&self, fault: Option<(u64, bool)>) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        self.dir.dir()
    }

    /// Remove temporary files no live process is writing; returns how many.
    pub fn sweep(&self) -> usize {
        let n = self.dir.sweep();
        self.swept.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// What it did.
    pub fn stats(&self) -> DiskCacheStats {
        DiskCacheStats {
            fetched: self.fetched.load(Ordering::Relaxed),
            reused: self.reused.load(Ordering::Relaxed),
            bypassed: self.bypassed.load(Ordering::Relaxed),
            swept: self.swept.load(Ordering::Relaxed),
            evicted: self.evicted.load(Ordering::Relaxed),
        }
    }

    /// Complete entries: (name, bytes, modification time).
    fn entries(&self) -> Vec<(String, u64, std::time::SystemTime)> {
        self.dir.entries()
    }

    /// Make room for `need` more bytes, evicting least recently used entries of other datasets
    /// (names not starting with `keep`). False when it cannot.
    fn make_room(&self, need: u64, keep: &str) -> bool {
        let mut entries = self.entries();
        let used: u64 = entries.iter().map(|e| e.1).sum();
        if used + need <= self.limit {
            return true;
        }
        entries.sort_by_key(|e| e.2);
        let mut used = used;
        for (name, len, _) in entries {
            if used + need <= self.limit {
                break;
            }
            if name.starts_with(keep) {
                continue;
            }
            if fs::remove_file(self.dir.path(&name)).is_ok() {
                used -= len;
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        used + need <= self.limit
    }

    /// The local copy of `src` (`len` bytes, whole-file CRC-32C `crc`) as entry `entry`: found,
    /// or copied now. `Ok(None)` when another process holds the entry's lock (try later).
    /// The copy of `entry` when it is already in the cache (its length as the manifest says: its
    /// name holds the shard's CRC-32C, and it was checked when copied), touched and counted as
    /// reused.
    fn existing(&self, entry: &str, len: u64) -> Option<PathBuf> {
        let path = self.dir.path(entry);
        if !fs::metadata(&path).is_ok_and(|m| m.len() == len) {
            return None;
        }
        touch(&path);
        self.reused.fetch_add(1, Ordering::Relaxed);
        Some(path)
    }

    fn fetch(
        &self,
        src: &Path,
        source: &dyn Storage,
        entry: &str,
        len: u64,
        crc: u32,
        keep: &str,
    ) -> io::Result<Option<PathBuf>> {
        let final_path = self.dir.path(entry);
        let found = |p: &Path| fs::metadata(p).is_ok_and(|m| m.len() == len);
        if let Some(path) = self.existing(entry, len) {
            return Ok(Some(path));
        }
        let Some(_claim) = self.dir.claim(entry, false)? else {
            return Ok(None);
        };
        if found(&final_path) {
            // published by another process while we waited for the lock
            touch(&final_path);
            self.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(final_path));
        }
        {
            let _g = self.space.lock().unwrap_or_else(|p| p.into_inner());
            if !self.make_room(len, keep) {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("the cache limit of {} bytes is full", self.limit),
                ));
            }
        }
        let tmp = self.dir.temp_path(entry);
        let fault = *self.fault.lock().unwrap_or_else(|p| p.into_inner());
        let r = copy_checked(src, source, &tmp, len, crc, fault);
        if let Err(e) = r {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        self.dir.publish(&tmp, entry)?;
        self.fetched.fetch_add(1, Ordering::Relaxed);
        Ok(Some(final_path))
    }
}

/// Refresh the modification time (the LRU clock).
fn touch(p: &Path) {
    if let Ok(f) = fs::OpenOptions::new().append(true).open(p) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// Copy `source` (named `src`) to `dst` in reads of 8 MiB, checking length and CRC-32C on the
/// way, then sync.
fn copy_checked(
    src: &Path,
    source: &dyn Storage,
    dst: &Path,
    len: u64,
    expected: u32,
    fault: Option<(u64, bool)>,
) -> io::Result<()> {
    let size = source.size()?;
    let mut out = File::create(dst)?;
    let mut buf = vec![0u8; 8 << 20];
    let mut c = 0u32;
    let mut done = 0u64;
    // the source's own size bounds the reads; a size other than the manifest's fails below
    while done < size.min(len) {
        let n = (size.min(len) - done).min(buf.len() as u64) as usize;
        source.read_at(done, &mut buf[..n])?;
        if let Some((at, abort)) = fault
            && done + n as u64 >= at
        {
            let part = (at - done.min(at)) as usize;
            out.write_all(&buf[..part.min(n)])?;
            if abort {
                let _ = out.sync_all();
                std::process::abort();
            }
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        c = crc::append(c, &buf[..n]);
        out.write_all(&buf[..n])?;
        done += n as u64;
    }
    if size != len || c != expected {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{}: copied {size} bytes with CRC-32C {c:#010x}, the manifest says {len} bytes and {expected:#010x}",
                src.display()
            ),
        ));
    }
    out.sync_all()
}

/// One shard to copy.
#[derive(Debug)]
struct Job {
    src: PathBuf,
    source: Arc<dyn Storage>,
    entry: String,
    len: u64,
    crc: u32,
    shard: Arc<CachedShardHandle>,
}

/// A shard's local copy, once published: its path and the open file.
#[derive(Debug)]
struct Local {
    path: PathBuf,
    file: PreadFile,
}

/// The local copy of one shard: none until the fetcher publishes it, none again once discarded.
#[derive(Debug, Default)]
struct CachedShardHandle(RwLock<Option<Arc<Local>>>);

impl CachedShardHandle {
    fn get(&self) -> Option<Arc<Local>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, local: Local) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(local));
    }

    fn take(&self) -> Option<Arc<Local>> {
        self.0.write().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn is_set(&self) -> bool {
        self.0.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }
}

/// A shard storage sharing its `local` cell with the fetcher.
#[derive(Debug)]
struct SharedShard {
    source: Arc<dyn Storage>,
    handle: Arc<CachedShardHandle>,
}

impl Storage for SharedShard {
    fn kind(&self) -> &'static str {
        "disk-cache"
    }

    /// The source's profile (the network for a remote dataset) until the local copy lands, a
    /// local file's after: the fetcher's readahead and gap policy follow where reads go.
    fn profile(&self) -> ReadProfile {
        // asked per coalesced read: a read lock, no clone of the copy's handle
        let local = self.handle.0.read().unwrap_or_else(|p| p.into_inner());
        match local.as_ref() {
            Some(l) => l.file.profile(),
            None => self.source.profile(),
        }
    }

    fn will_read(&self, records: &[(u64, u64)]) {
        match self.handle.get() {
            Some(l) => l.file.will_read(records),
            None => self.source.will_read(records),
        }
    }

    fn size(&self) -> io::Result<u64> {
        self.source.size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        match self.handle.get() {
            Some(l) => l.file.read_at(offset, buf),
            None => self.source.read_at(offset, buf),
        }
    }

    fn will_need(&self, offset: u64, len: u64) {
        match self.handle.get() {
            Some(l) => l.file.will_need(offset, len),
            None => self.source.will_need(offset, len),
        }
    }
}

/// Copy the shards in order; a shard another process is copying is retried after the others.
/// Ends when every shard is published or bypassed, or its dataset is gone.
fn fetcher(cache: Arc<DiskCache>, mut queue: VecDeque<Job>, keep: String) {
    let mut busy_in_a_row = 0usize;
    while let Some(job) = queue.pop_front() {
        if Arc::strong_count(&job.shard) == 1 {
            continue; // only this queue holds it: the dataset is gone
        }
        match cache.fetch(&job.src, &*job.source, &job.entry, job.len, job.crc, &keep) {
            Ok(Some(path)) => {
                busy_in_a_row = 0;
                match PreadFile::open(&path) {
                    Ok(file) => job.shard.set(Local { path, file }),
                    Err(_) => {
                        cache.bypassed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Ok(None) => {
                // another process is copying it: come back to it after the others
                busy_in_a_row += 1;
                if busy_in_a_row > queue.len() {
                    std::thread::sleep(Duration::from_millis(10));
                    busy_in_a_row = 0;
                }
                queue.push_back(job);
            }
            Err(e) => {
                busy_in_a_row = 0;
                cache.bypassed.fetch_add(1, Ordering::Relaxed);
                eprintln!(
                    "stokehold: not caching {} in {}: {e}; reading it from its source",
                    job.src.display(),
                    cache.dir().display()
                );
            }
        }
    }
}

/// The copies of one opened dataset: how many shards already read from the cache.
#[derive(Debug, Clone)]
pub struct CacheProgress {
    shards: Vec<Arc<CachedShardHandle>>,
    bytes: Vec<u64>,
}

impl CacheProgress {
    /// The cache's figures for reports: hits = shards found already copied, misses = shards
    /// copied now or bypassed, entries = shards reading locally, bytes = their size.
    pub fn stats(&self, cache: &DiskCache) -> crate::cache::CacheStats {
        let s = cache.stats();
        crate::cache::CacheStats {
            kind: "disk".into(),
            hits: s.reused,
            misses: s.fetched + s.bypassed,
            bytes: self
                .shards
                .iter()
                .zip(&self.bytes)
                .filter(|(h, _)| h.is_set())
                .map(|(_, b)| b)
                .sum(),
            budget: cache.limit,
            entries: self.ready() as u64,
            saved: Duration::ZERO,
            shared: 0,
        }
    }

    /// Shards reading from their local copy.
    pub fn ready(&self) -> usize {
        self.shards.iter().filter(|h| h.is_set()).count()
    }

    /// Stop reading shard `k` from its local copy (found damaged): the shard reads its source
    /// again, and the copy's file is deleted so that the next run copies it anew. The copy's
    /// path when there was one (the caller reports it), `None` when the shard already read its
    /// source.
    pub fn discard(&self, k: usize, cache: &DiskCache) -> Option<PathBuf> {
        let local = self.shards.get(k)?.take()?;
        let _ = fs::remove_file(&local.path);
        cache.bypassed.fetch_add(1, Ordering::Relaxed);
        Some(local.path.clone())
    }

    /// Shards in the dataset.
    pub fn total(&self) -> usize {
        self.shards.len()
    }

    /// Wait until every shard reads from its local copy (false after `timeout`, or when some
    /// copy failed and those shards stay on their source).
    pub fn wait(&self, cache: &DiskCache, timeout: Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            let ready = self.ready();
            if ready == self.total() {
                return true;
            }
            if start.elapsed() > timeout
                || ready as u64 + cache.bypassed.load(Ordering::Relaxed) >= self.total() as u64
            {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Open the dataset at `dir` with its shards cached in `cache`. The shards are read from `dir`
/// until their copy is ready; a background thread copies them in shard order.
pub fn open_dataset(
    dir: &Path,
    cache: &Arc<DiskCache>,
    options: OpenOptions,
) -> Result<(Dataset, CacheProgress)> {
    let location = stokehold_storage::locate(dir, &options.storage_options)?;
    let manifest = Manifest::read(&*location, &options.limits)?;
    let largest = manifest.shards.iter().map(|s| s.bytes).max().unwrap_or(0);
    if largest > cache.limit {
        return Err(EngineError::Config(format!(
            "the disk cache limit ({} bytes) is below the largest shard of {} ({largest} bytes): raise the limit",
            cache.limit,
            dir.display()
        )));
    }
    // a URL is its own name; a local path is named by its canonical form
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let keep = format!(
        "{:08x}-",
        crc::crc32c(canonical.to_string_lossy().trim_end_matches('/').as_bytes())
    );
    // the shards' structure read from the source (for object storage: concurrently), then
    // each shard read from the source until its copy is ready
    let names: Vec<(&str, PathBuf)> = (0..manifest.shards.len())
        .map(|k| {
            (
                manifest.shards[k].file.as_str(),
                manifest.shard_path(dir, k),
            )
        })
        .collect();
    let opened = location.open_shards(&names, &options.limits, Access::Pread, false)?;
    let mut shards = Vec::with_capacity(manifest.shards.len());
    let mut jobs = Vec::with_capacity(manifest.shards.len());
    let mut handles = Vec::with_capacity(manifest.shards.len());
    for (k, (structure, source)) in opened.into_iter().enumerate() {
        let info = &manifest.shards[k];
        let path = names[k].1.clone();
        let source: Arc<dyn Storage> = source.into();
        let handle = Arc::new(CachedShardHandle::default());
        let entry = format!("{keep}{:08x}-{}", info.crc32c, info.file);
        // a copy already there is read from the start (so the first batches' reads and the
        // readahead policy are the local file's); the others are copied in the background
        let ready = cache
            .existing(&entry, info.bytes)
            .and_then(|p| PreadFile::open(&p).ok().map(|file| Local { path: p, file }));
        match ready {
            Some(local) => handle.set(local),
            None => jobs.push(Job {
                src: path.clone(),
                source: Arc::clone(&source),
                entry,
                len: info.bytes,
                crc: info.crc32c,
                shard: Arc::clone(&handle),
            }),
        }
        handles.push((Arc::clone(&handle), info.bytes));
        let storage = SharedShard { source, handle };
        shards.push(ShardReader::from_structure(
            &path,
            Box::new(storage),
            structure,
            options.limits,
        ));
    }
    let mut ds = Dataset::from_parts(dir.to_path_buf(), manifest, shards, options.verify_records)?;
    ds.set_location(location);
    let progress = CacheProgress {
        shards: handles.iter().map(|(h, _)| Arc::clone(h)).collect(),
        bytes: handles.iter().map(|&(_, b)| b).collect(),
    };
    let c = Arc::clone(cache);
    let queue: VecDeque<Job> = jobs.into();
    std::thread::Builder::new()
        .name("stokehold-disk-cache".into())
        .spawn(move || fetcher(c, queue, keep))
        .map_err(|e| EngineError::Worker(format!("cannot start the disk cache thread: {e}")))?;
    Ok((ds, progress))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use stokehold_storage::conformance::check_storage;

    use super::*;

    /// The storage of a cached shard reads the same bytes before its copy is published (from the
    /// source) and after (from the copy): both pass the `Storage` conformance suite.
    #[test]
    fn a_cached_shard_passes_the_storage_conformance_suite_before_and_after_its_copy() {
        let dir = tempfile::tempdir().unwrap();
        let source_only = |p: &Path| -> io::Result<Box<dyn Storage>> {
            Ok(Box::new(SharedShard {
                source: Arc::new(PreadFile::open(p)?),
                handle: Arc::default(),
            }))
        };
        check_storage("disk-cache (source)", dir.path(), &source_only).unwrap();
        let copied = |p: &Path| -> io::Result<Box<dyn Storage>> {
            let copy = p.with_extension("copy");
            fs::copy(p, &copy)?;
            let handle = Arc::new(CachedShardHandle::default());
            handle.set(Local {
                file: PreadFile::open(&copy)?,
                path: copy,
            });
            // the source is another file of the same length: only the copy has the bytes
            let decoy = p.with_extension("decoy");
            fs::write(&decoy, vec![0u8; fs::metadata(p)?.len() as usize])?;
            Ok(Box::new(SharedShard {
                source: Arc::new(PreadFile::open(&decoy)?),
                handle,
            }))
        };
        check_storage("disk-cache (copy)", dir.path(), &copied).unwrap();
    }

    /// A cached shard has its source's read profile until its copy lands, a local file's after
    /// (the fetcher's readahead and gap policy follow it; the S3 case is in `tests/it`).
    #[test]
    fn a_cached_shard_has_its_sources_profile_until_its_copy_lands() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy");
        fs::write(&copy, [7u8; 64]).unwrap();
        let handle = Arc::new(CachedShardHandle::default());
        let shard = SharedShard {
            source: Arc::new(stokehold_format::Memory::new(vec![7u8; 64])),
            handle: handle.clone(),
        };
        assert_eq!(shard.profile(), ReadProfile::Memory);
        handle.set(Local {
            file: PreadFile::open(&copy).unwrap(),
            path: copy,
        });
        assert_eq!(shard.profile(), ReadProfile::LocalFile);
        handle.take();
        assert_eq!(shard.profile(), ReadProfile::Memory, "a discarded copy");
    }
}
