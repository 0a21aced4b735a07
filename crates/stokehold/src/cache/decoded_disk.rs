//! The decoded cache on local disk (`decoded_cache_dir`): the pixels of an image pipeline's
//! deterministic prefix, kept across runs and shared by the processes of a node, so that only the
//! first run of a training job decodes its JPEGs.
//!
//! Layout: one directory per cache key (dataset fingerprint, column, prefix, [`PREFIX_VERSION`])
//! under the root, named by a hash of the key (the key itself is in its `key.txt`). In it, *parts*:
//! each written by one process, as the pixels of its images back to back, then an index (32 bytes
//! an image: sample id, offset, width, height, channels, CRC-32C of the pixels) and a 32-byte
//! footer (magic, version, index CRC, count, end of the pixels).
//!
//! Rules:
//! - **Publication.** A part is written as `part-PID-STAMP-N.tmp` under an exclusive `flock` and
//!   renamed to `part-PID-STAMP-N.skdc` once its index and footer are written: when it reaches
//!   its size, when it has held images for [`PUBLISH_AFTER`], when an epoch ends
//!   ([`DecodedDisk::flush`]) and when the cache is dropped. Only published parts are read by
//!   other processes (and by later runs); a process reads its own unpublished images too.
//! - **Shared by the node within a run.** Parts other processes publish are picked up as they
//!   appear: at every epoch's end, and on a miss when the directory changed (at most every
//!   [`REFRESH_EVERY`]). So the ranks of a node, started together, decode each image once: what
//!   one rank decoded in an epoch, the others read in the next.
//! - **One copy per node.** Publication holds the directory's claim (`publish.lock`, the claim of
//!   every node-local directory, `stokehold_storage::claim_file`): under it
//!   the publisher first picks up the parts published before, then leaves out of its own part
//!   every image another part already holds (rewriting the part without them), so two processes
//!   that decoded the same image at the same time store it once. An image is never written when
//!   a known part has it.
//! - **Orphans swept.** At open, `*.tmp` parts whose lock no live process holds are removed.
//! - **Nothing unchecked is served.** A part whose footer, index or index checksum does not add
//!   up is ignored (reported once, by file); an image whose pixels fail their checksum is computed
//!   again (reported once, with the file, byte offset and sample id). Sizes come from the index
//!   only after they are checked against the file's length, so no allocation follows an unchecked
//!   field. Parts are published without `fsync`: after a power loss the checksums catch a damaged
//!   part, and its images are computed again.
//! - **Limits.** Writing stops (reported once) when the directory (every process's parts, published
//!   or being written, as last seen) would pass `limit` bytes or the
//!   filesystem would keep less than its floor free: 5% of the filesystem, at most 1 GiB
//!   (`STOKEHOLD_KEEP_FREE`, a byte size such as `20G` or `0`, sets another); images beyond that
//!   are computed each time. Nothing is
//!   evicted: a directory belongs to one dataset and prefix, and can be removed when not in use.
//! - **Failures never fail the run.** A write error (disk full, I/O) stops writing for this
//!   process, with one message on stderr; the images are computed as without the cache.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use rustix::fs::FlockOperation;
use stokehold_format::container::{ContainerError, PartEntry, PartFooter};
use stokehold_format::crc;
use stokehold_storage::FreeSpace;

use crate::cache::decoded_image::DecodedImage;
use crate::error::Result;
use crate::stats::CacheStats;

/// Why a part could not be written or read: it only stops the cache's writing, or has one
/// part ignored (the images are computed again), so it is said on stderr, never returned.
#[derive(Debug, thiserror::Error)]
enum PartError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("creating {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error(
        "its filesystem would keep less than {floor} free ({free} free now; {KEEP_FREE_ENV} (or decoded_cache_keep_free=) sets the floor)"
    )]
    Floor {
        floor: crate::units::ByteSize,
        free: crate::units::ByteSize,
    },
    #[error("{0}")]
    Container(#[from] ContainerError),
    #[error("a lock of the cache was poisoned by a panic")]
    Poisoned,
    #[error("too many parts")]
    TooManyParts,
}

/// Bumped whenever the prefix's pixels change (decoder, resizer, colour conversion), so that a
/// directory written by another version is never read.
pub const PREFIX_VERSION: u32 = 1;

const MAGIC: &[u8; 8] = b"SKHDPX01";
const FOOTER: u64 = PartFooter::LEN;
const ENTRY: u64 = PartEntry::LEN;
/// A part is published when it reaches this many bytes of pixels.
const PART_BYTES: u64 = 256 << 20;
/// The environment variable that sets the floor of free bytes (the node-local directories' one
/// floor, `stokehold_storage::FreeSpace`: 5% of the filesystem, at most 1 GiB, by default).
pub use stokehold_storage::node_dir::KEEP_FREE_ENV;
/// Parts started by this process (unique names, whatever the number of caches).
static NEXT_PART: AtomicU64 = AtomicU64::new(0);
/// A part that has held images this long is published at the next image (other processes see
/// them sooner than at the epoch's end).
pub const PUBLISH_AFTER: std::time::Duration = std::time::Duration::from_secs(5);
/// A miss looks for parts published since the last look at most this often (and only when the
/// directory changed).
pub const REFRESH_EVERY: std::time::Duration = std::time::Duration::from_millis(200);
/// The first miss after an epoch's end waits at most this long for the parts other processes
/// are writing to be published (the ranks of a node end their epochs at about the same time).
pub const WAIT_FOR_PEERS: std::time::Duration = std::time::Duration::from_secs(1);
/// The directory's lock, held while a part is published.
const PUBLISH_LOCK: &str = "publish.lock";

/// Where one image is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    part: u32,
    offset: u64,
    width: u32,
    height: u32,
    channels: u8,
    crc: u32,
}

impl Loc {
    fn len(&self) -> u64 {
        u64::from(self.width) * u64::from(self.height) * u64::from(self.channels)
    }

    fn encode(&self, id: u64) -> [u8; ENTRY as usize] {
        PartEntry {
            id,
            offset: self.offset,
            width: self.width,
            height: self.height,
            channels: self.channels,
            crc: self.crc,
        }
        .encode()
    }

    /// The place of an entry of part `part` (checked by the format's container parser).
    fn of(e: &PartEntry, part: u32) -> (u64, Loc) {
        let loc = Loc {
            part,
            offset: e.offset,
            width: e.width,
            height: e.height,
            channels: e.channels,
            crc: e.crc,
        };
        (e.id, loc)
    }
}

/// The part this process is writing.
#[derive(Debug)]
struct Writer {
    file: Arc<File>,
    tmp: PathBuf,
    part: u32,
    at: u64,
    entries: Vec<(u64, Loc)>,
    /// When it got its first image.
    since: Option<std::time::Instant>,
}

/// A part file known to this process.
#[derive(Debug)]
struct PartFile {
    file: Arc<File>,
    /// Its name (a part this process writes: its tmp name until published).
    name: PathBuf,
    /// Written by this process.
    own: bool,
}

/// When the directory was last looked at for new parts, and its modification time then.
#[derive(Debug)]
struct Looked {
    at: std::time::Instant,
    mtime: Option<std::time::SystemTime>,
}

/// What the on-disk decoded cache did.
#[derive(Debug, Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    written: AtomicU64,
    corrupt: AtomicU64,
    swept: AtomicU64,
    ignored: AtomicU64,
    /// Hits on images other processes wrote.
    shared: AtomicU64,
    /// Images left out of a part at publication: another part held them.
    deduplicated: AtomicU64,
}

/// One cache key's directory of parts. See the module documentation.
#[derive(Debug)]
pub struct DecodedDisk {
    dir: PathBuf,
    limit: u64,
    part_bytes: u64,
    /// Bytes of the parts in the directory: every file there when it was last looked at, plus
    /// what this process wrote since.
    used: AtomicU64,
    /// The parts' files (`Loc::part` indexes them).
    parts: RwLock<Vec<PartFile>>,
    /// The published parts read (by name), so that a look at the directory reads only new ones.
    loaded: Mutex<std::collections::HashSet<PathBuf>>,
    looked: Mutex<Looked>,
    /// Set at an epoch's end: the next miss waits for the other processes' parts first (and
    /// every other miss meanwhile waits for it, holding this lock).
    epoch_ended: Mutex<bool>,
    index: RwLock<HashMap<u64, Loc>>,
    writer: Mutex<Option<Writer>>,
    /// Set when writing stopped (limit, free space, an error).
    stopped: AtomicBool,
    /// Part names are `part-PID-STAMP-N`: the stamp (the open time) keeps a reused process id
    /// from replacing an earlier run's parts; N counts the parts of this process.
    stamp: u64,
    /// Free bytes the filesystem keeps (writing stops below); `None`: the default floor.
    keep_free: Option<u64>,
    warned_corrupt: AtomicBool,
    counters: Counters,
}

/// The floor of free bytes from [`KEEP_FREE_ENV`], when it is set to a byte size (a value that
/// does not parse is reported once and the default kept).
fn keep_free_from_env() -> Option<u64> {
    let text = std::env::var(KEEP_FREE_ENV).ok()?;
    match crate::units::parse_bytes(&text) {
        Ok(n) => Some(n),
        Err(e) => {
            eprintln!("stokehold: {KEEP_FREE_ENV}={text:?} ignored: {e}");
            None
        }
    }
}

/// A stable 64-bit hash (FNV-1a) of a key, for directory names.
fn key_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Take `f`'s exclusive lock without waiting; false when another process holds it.
fn try_lock(f: &File) -> io::Result<bool> {
    match rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Ok(false),
        Err(e) => Err(e.into()),
    }
}

impl DecodedDisk {
    /// Open (creating it) the directory of cache key `key` under `root`, with a byte limit for
    /// the directory; sweeps orphaned parts and reads the index of every published one.
    pub fn open(root: &Path, key: &str, limit: u64) -> Result<DecodedDisk> {
        Self::open_with_part_size(root, key, limit, PART_BYTES)
    }

    /// [`open`](Self::open) with parts published every `part_bytes` bytes (tests use small
    /// parts).
    #[doc(hidden)]
    pub fn open_with_part_size(
        root: &Path,
        key: &str,
        limit: u64,
        part_bytes: u64,
    ) -> Result<DecodedDisk> {
        let full_key = format!("{key}|prefix v{PREFIX_VERSION}");
        let dir = root.join(format!("{:016x}", key_hash(&full_key)));
        // a directory that cannot be written (read-only, not a directory) only stops writing:
        // what it already holds is still read
        let key_file = dir.join("key.txt");
        let unwritable = fs::create_dir_all(&dir)
            .and_then(|()| match key_file.exists() {
                true => Ok(()),
                false => fs::write(&key_file, format!("{full_key}\n")),
            })
            .err();
        let disk = DecodedDisk {
            dir,
            limit,
            part_bytes: part_bytes.max(1),
            used: AtomicU64::new(0),
            parts: RwLock::new(Vec::new()),
            loaded: Mutex::new(std::collections::HashSet::new()),
            looked: Mutex::new(Looked {
                at: std::time::Instant::now(),
                mtime: None,
            }),
            epoch_ended: Mutex::new(false),
            index: RwLock::new(HashMap::new()),
            writer: Mutex::new(None),
            stopped: AtomicBool::new(false),
            stamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            keep_free: keep_free_from_env(),
            warned_corrupt: AtomicBool::new(false),
            counters: Counters::default(),
        };
        if let Some(e) = unwritable {
            // said of the directory given (decoded_cache_dir), not of the key's folder in it
            disk.stopped.store(true, Ordering::Relaxed);
            eprintln!(
                "stokehold: decoded_cache_dir {}: cannot write there ({e}); decoded images are \
                 not kept on disk this run (those already there are read, the others computed \
                 each time): give a directory this user can write to keep them",
                root.display()
            );
        } else {
            disk.sweep();
        }
        disk.refresh();
        Ok(disk)
    }

    /// Set the floor of free bytes under which writing stops (`None`: the default, 5% of the
    /// filesystem, at most 1 GiB).
    pub fn set_keep_free(&mut self, bytes: Option<u64>) {
        self.keep_free = bytes;
    }

    /// The floor of free bytes set (`None`: the default); opened with [`KEEP_FREE_ENV`] set,
    /// its value.
    pub fn keep_free(&self) -> Option<u64> {
        self.keep_free
    }

    /// The key's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Remove `*.tmp` parts that no live process is writing; returns how many.
    fn sweep(&self) -> usize {
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut n = 0;
        for e in rd.flatten() {
            if e.path().extension().is_none_or(|x| x != "tmp") {
                continue;
            }
            let Ok(f) = File::open(e.path()) else {
                continue;
            };
            // the writer holds the part's lock for as long as it writes
            if try_lock(&f).unwrap_or(false) && fs::remove_file(e.path()).is_ok() {
                n += 1;
            }
        }
        self.counters.swept.fetch_add(n as u64, Ordering::Relaxed);
        n
    }

    /// Read the index of every part published since the last look (another process's image
    /// replaces this process's unpublished copy of it in the index: that copy is left out when
    /// its part is published), and count the directory's bytes again.
    fn refresh(&self) {
        let mtime = fs::metadata(&self.dir).and_then(|m| m.modified()).ok();
        let Ok(rd) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut bytes = 0u64;
        let mut new: Vec<PathBuf> = Vec::new();
        {
            let loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
            for e in rd.flatten() {
                let p = e.path();
                let ext = p.extension().and_then(|x| x.to_str()).unwrap_or("");
                if ext == "skdc" || ext == "tmp" {
                    bytes += e.metadata().map_or(0, |m| m.len());
                }
                if ext == "skdc" && !loaded.contains(&p) {
                    new.push(p);
                }
            }
        }
        new.sort();
        for path in new {
            let mut parts = self.parts.write().unwrap_or_else(|p| p.into_inner());
            let part = u32::try_from(parts.len()).unwrap_or(u32::MAX);
            match read_part(&path, part) {
                Ok(p) => {
                    let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
                    for (id, loc) in p.entries {
                        let replace = index.get(&id).is_none_or(|old| {
                            parts.get(old.part as usize).is_some_and(|f| {
                                f.own && f.name.extension().is_some_and(|x| x == "tmp")
                            })
                        });
                        if replace {
                            index.insert(id, loc);
                        }
                    }
                    parts.push(PartFile {
                        file: Arc::new(p.file),
                        name: path.clone(),
                        own: false,
                    });
                }
                Err(why) => {
                    self.counters.ignored.fetch_add(1, Ordering::Relaxed);
                    eprintln!(
                        "stokehold: decoded cache part {} is ignored ({why}); its images are computed again",
                        path.display()
                    );
                }
            }
            self.loaded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(path);
        }
        self.used.store(bytes, Ordering::Relaxed);
        *self.looked.lock().unwrap_or_else(|p| p.into_inner()) = Looked {
            at: std::time::Instant::now(),
            mtime,
        };
    }

    /// Wait (at most [`WAIT_FOR_PEERS`]) until no other process has a part being written here,
    /// then look at what was published: at an epoch's end the other ranks publish what they
    /// decoded in it, and this process reads it instead of decoding it again.
    fn wait_for_peers(&self) {
        let t0 = std::time::Instant::now();
        let own = self
            .writer
            .lock()
            .ok()
            .and_then(|w| w.as_ref().map(|w| w.tmp.clone()));
        let writing = || {
            fs::read_dir(&self.dir).is_ok_and(|rd| {
                rd.flatten().any(|e| {
                    let p = e.path();
                    p.extension().is_some_and(|x| x == "tmp") && Some(&p) != own.as_ref()
                })
            })
        };
        while writing() && t0.elapsed() < WAIT_FOR_PEERS {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.refresh();
    }

    /// [`refresh`](Self::refresh) when the last look is [`REFRESH_EVERY`] old and the directory
    /// changed since (a part was published or started); whether it looked.
    fn refresh_if_changed(&self) -> bool {
        {
            let mut looked = self.looked.lock().unwrap_or_else(|p| p.into_inner());
            if looked.at.elapsed() < REFRESH_EVERY {
                return false;
            }
            let mtime = fs::metadata(&self.dir).and_then(|m| m.modified()).ok();
            if mtime.is_some() && mtime == looked.mtime {
                looked.at = std::time::Instant::now();
                return false;
            }
        }
        self.refresh();
        true
    }

    /// Sample `id`'s image, when the directory has it and its pixels pass their checksum.
    pub fn get(&self, id: u64) -> Option<DecodedImage> {
        let find = || self.index.read().ok().and_then(|m| m.get(&id).copied());
        // a miss looks for what other processes published since; the first one after an
        // epoch's end waits for the parts they are still writing
        let loc = find()
            .or_else(|| {
                let mut ended = self.epoch_ended.lock().unwrap_or_else(|p| p.into_inner());
                if std::mem::take(&mut *ended) {
                    self.wait_for_peers();
                }
                drop(ended);
                find()
            })
            .or_else(|| self.refresh_if_changed().then(find).flatten());
        let Some(loc) = loc else {
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let (file, own) = self.parts.read().ok().and_then(|p| {
            p.get(loc.part as usize)
                .map(|f| (Arc::clone(&f.file), f.own))
        })?;
        // the length was checked against the part's size when the index was read
        let mut data = vec![0u8; loc.len() as usize].into_boxed_slice();
        let ok = file.read_exact_at(&mut data, loc.offset).is_ok() && crc::crc32c(&data) == loc.crc;
        if !ok {
            self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
            self.counters.misses.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut m) = self.index.write() {
                m.remove(&id);
            }
            if !self.warned_corrupt.swap(true, Ordering::Relaxed) {
                let name = self
                    .parts
                    .read()
                    .ok()
                    .and_then(|p| p.get(loc.part as usize).map(|f| f.name.clone()))
                    .unwrap_or_default();
                eprintln!(
                    "stokehold: decoded cache {}: the image of sample {id} at byte {} fails its checksum (or cannot be read); it is computed again (further such images are counted, not reported)",
                    name.display(),
                    loc.offset
                );
            }
            return None;
        }
        self.counters.hits.fetch_add(1, Ordering::Relaxed);
        if !own {
            self.counters.shared.fetch_add(1, Ordering::Relaxed);
        }
        Some(DecodedImage {
            width: loc.width,
            height: loc.height,
            channels: loc.channels,
            data,
        })
    }

    /// Keep sample `id`'s image in this process's part (unless it is there already, or writing
    /// has stopped).
    pub fn put(&self, id: u64, img: &DecodedImage) {
        let len = img.data.len() as u64;
        let expected = u64::from(img.width) * u64::from(img.height) * u64::from(img.channels);
        if self.stopped.load(Ordering::Relaxed)
            || len != expected
            || !(img.channels == 1 || img.channels == 3)
            || self.index.read().is_ok_and(|m| m.contains_key(&id))
        {
            return;
        }
        let Ok(mut w) = self.writer.lock() else {
            return;
        };
        if self.used.load(Ordering::Relaxed) + len + ENTRY + FOOTER > self.limit {
            self.stop(&format!(
                "the directory reached its limit of {} bytes",
                self.limit
            ));
            return;
        }
        if w.is_none() {
            match self.start_part() {
                Ok(new) => *w = Some(new),
                Err(e) => {
                    self.stop(&e.to_string());
                    return;
                }
            }
        }
        let Some(part) = w.as_mut() else { return };
        let loc = Loc {
            part: part.part,
            offset: part.at,
            width: img.width,
            height: img.height,
            channels: img.channels,
            crc: crc::crc32c(&img.data),
        };
        if let Err(e) = part.file.write_all_at(&img.data, part.at) {
            let tmp = part.tmp.clone();
            *w = None;
            let _ = fs::remove_file(&tmp);
            self.stop(&format!("writing {}: {e}", tmp.display()));
            return;
        }
        part.at += len;
        part.entries.push((id, loc));
        self.used.fetch_add(len + ENTRY, Ordering::Relaxed);
        self.counters.written.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.index.write() {
            m.insert(id, loc);
        }
        let since = *part.since.get_or_insert_with(std::time::Instant::now);
        if part.at >= self.part_bytes || since.elapsed() >= PUBLISH_AFTER {
            self.publish(&mut w);
        }
    }

    /// Publish the part being written, if it holds any image, and pick up the parts other
    /// processes published (at the end of an epoch).
    pub fn flush(&self) {
        if let Ok(mut w) = self.writer.lock() {
            self.publish(&mut w);
        }
        self.sweep();
        self.refresh();
        *self.epoch_ended.lock().unwrap_or_else(|p| p.into_inner()) = true;
    }

    fn stop(&self, why: &str) {
        if !self.stopped.swap(true, Ordering::Relaxed) {
            eprintln!(
                "stokehold: decoded cache {}: {why}; no more images are written there (those not in it are computed each time)",
                self.dir.display()
            );
        }
    }

    /// A new part file, locked, registered as a part (so this process can read it at once).
    fn start_part(&self) -> std::result::Result<Writer, PartError> {
        if let Ok(space) = FreeSpace::of(&self.dir)
            && let Err(floor) = space.check(self.part_bytes, self.keep_free)
        {
            return Err(PartError::Floor {
                floor: crate::units::ByteSize(floor),
                free: crate::units::ByteSize(space.free),
            });
        }
        loop {
            let n = NEXT_PART.fetch_add(1, Ordering::Relaxed);
            let tmp = self.dir.join(format!(
                "part-{}-{:x}-{n}.tmp",
                std::process::id(),
                self.stamp
            ));
            let file = match fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&tmp)
            {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(PartError::Create { path: tmp, source }),
            };
            if !try_lock(&file).unwrap_or(false) {
                continue; // a sweeper holds it for a moment: take another name
            }
            // a sweeper may have removed the file between its creation and our lock
            let same = fs::metadata(&tmp).is_ok_and(|m| {
                file.metadata()
                    .is_ok_and(|f| f.ino() == m.ino() && f.dev() == m.dev())
            });
            if !same {
                continue;
            }
            let file = Arc::new(file);
            let mut parts = self.parts.write().map_err(|_| PartError::Poisoned)?;
            let part = u32::try_from(parts.len()).map_err(|_| PartError::TooManyParts)?;
            parts.push(PartFile {
                file: Arc::clone(&file),
                name: tmp.clone(),
                own: true,
            });
            return Ok(Writer {
                file,
                tmp,
                part,
                at: 0,
                entries: Vec::new(),
                since: None,
            });
        }
    }

    /// Publish the part in `w`: under the directory's lock, pick up the parts published before,
    /// leave out the images they hold (rewriting the part without them), write the index and
    /// footer and rename it to its published name.
    fn publish(&self, w: &mut Option<Writer>) {
        let Some(mut part) = w.take() else { return };
        // the node-local directories' claim, waited for; without it (an unwritable directory)
        // the part is still published: at worst an image is stored twice
        let _guard = stokehold_storage::claim_file(&self.dir.join(PUBLISH_LOCK), true)
            .ok()
            .flatten();
        self.refresh();
        let theirs: Vec<bool> = {
            let index = self.index.read().unwrap_or_else(|p| p.into_inner());
            part.entries
                .iter()
                .map(|(id, _)| index.get(id).is_some_and(|l| l.part != part.part))
                .collect()
        };
        let dropped = theirs.iter().filter(|&&t| t).count();
        if dropped > 0 {
            self.counters
                .deduplicated
                .fetch_add(dropped as u64, Ordering::Relaxed);
            let keep: Vec<(u64, Loc)> = part
                .entries
                .iter()
                .zip(&theirs)
                .filter(|(_, t)| !**t)
                .map(|(e, _)| *e)
                .collect();
            match self.compact(&part, &keep) {
                Ok(new) => part = new,
                Err(e) => {
                    let _ = fs::remove_file(&part.tmp);
                    self.stop(&format!("rewriting {}: {e}", part.tmp.display()));
                    return;
                }
            }
        }
        if part.entries.is_empty() {
            let _ = fs::remove_file(&part.tmp);
            return;
        }
        let mut tail = Vec::with_capacity(part.entries.len() * ENTRY as usize + FOOTER as usize);
        for (id, loc) in &part.entries {
            tail.extend_from_slice(&loc.encode(*id));
        }
        let index_crc = crc::crc32c(&tail);
        tail.extend_from_slice(MAGIC);
        tail.extend_from_slice(&PREFIX_VERSION.to_le_bytes());
        tail.extend_from_slice(&index_crc.to_le_bytes());
        tail.extend_from_slice(&(part.entries.len() as u64).to_le_bytes());
        tail.extend_from_slice(&part.at.to_le_bytes());
        let done = part.tmp.with_extension("skdc");
        let r = part
            .file
            .write_all_at(&tail, part.at)
            .and_then(|()| fs::rename(&part.tmp, &done));
        match r {
            Ok(()) => {
                self.used.fetch_add(tail.len() as u64, Ordering::Relaxed);
                if let Ok(mut parts) = self.parts.write()
                    && let Some(f) = parts.get_mut(part.part as usize)
                {
                    f.name = done.clone();
                }
                self.loaded
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(done);
            }
            Err(e) => {
                let _ = fs::remove_file(&part.tmp);
                self.stop(&format!("publishing {}: {e}", part.tmp.display()));
            }
        }
    }

    /// The part `part` rewritten with the images `keep` only (the others are in other parts):
    /// a new tmp file, locked, taking the old one's place as part `part.part`; the index points
    /// the kept images at it and the others at the parts that hold them.
    fn compact(
        &self,
        part: &Writer,
        keep: &[(u64, Loc)],
    ) -> std::result::Result<Writer, PartError> {
        let mut new = self.start_part()?;
        for (id, loc) in keep {
            let mut data = vec![0u8; loc.len() as usize];
            part.file
                .read_exact_at(&mut data, loc.offset)
                .and_then(|()| new.file.write_all_at(&data, new.at))?;
            new.entries.push((
                *id,
                Loc {
                    part: part.part,
                    offset: new.at,
                    ..*loc
                },
            ));
            new.at += loc.len();
        }
        let _ = fs::remove_file(&part.tmp);
        let mut parts = self.parts.write().map_err(|_| PartError::Poisoned)?;
        // the new file takes the old part's number; its own slot is left unused
        if let Some(slot) = parts.get_mut(new.part as usize) {
            slot.name = PathBuf::new();
        }
        if let Some(f) = parts.get_mut(part.part as usize) {
            f.file = Arc::clone(&new.file);
            f.name = new.tmp.clone();
        }
        drop(parts);
        let mut index = self.index.write().map_err(|_| PartError::Poisoned)?;
        for (id, loc) in &new.entries {
            index.insert(*id, *loc);
        }
        let old_bytes = part.at;
        self.used.fetch_sub(
            old_bytes.min(self.used.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        self.used.fetch_add(new.at, Ordering::Relaxed);
        new.part = part.part;
        Ok(new)
    }

    /// What it did, as a cache report line's figures (`kind` "decoded-disk"): hits, misses,
    /// images known (entries), bytes in the directory, the limit.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            kind: "decoded-disk".into(),
            hits: self.counters.hits.load(Ordering::Relaxed),
            misses: self.counters.misses.load(Ordering::Relaxed),
            bytes: self.used.load(Ordering::Relaxed),
            budget: self.limit,
            entries: self.index.read().map_or(0, |m| m.len() as u64),
            saved: std::time::Duration::ZERO,
            shared: self.counters.shared.load(Ordering::Relaxed),
        }
    }

    /// Images left out of this process's parts at publication because another part held them.
    pub fn deduplicated(&self) -> u64 {
        self.counters.deduplicated.load(Ordering::Relaxed)
    }

    /// Images written by this process, images whose pixels failed their checksum, orphaned parts
    /// swept and damaged parts ignored at open.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        let c = &self.counters;
        (
            c.written.load(Ordering::Relaxed),
            c.corrupt.load(Ordering::Relaxed),
            c.swept.load(Ordering::Relaxed),
            c.ignored.load(Ordering::Relaxed),
        )
    }
}

impl Drop for DecodedDisk {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A published part, its footer and index checked.
#[derive(Debug)]
struct Part {
    file: File,
    entries: Vec<(u64, Loc)>,
}

/// Open a published part (number `part` in this process) and check its footer and index.
fn read_part(path: &Path, part: u32) -> std::result::Result<Part, PartError> {
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    if size < FOOTER {
        return Err(ContainerError::ShorterThanFooter { size }.into());
    }
    let mut footer = [0u8; FOOTER as usize];
    file.read_exact_at(&mut footer, size - FOOTER)?;
    // the one checked parser of our containers: the index must fill the file exactly between
    // the pixels and the footer, so its length is bounded by the file's before it is allocated
    let footer = PartFooter::parse(&footer, size, MAGIC, PREFIX_VERSION)?;
    let range = footer.index_range();
    let mut index = vec![0u8; (range.end - range.start) as usize];
    file.read_exact_at(&mut index, range.start)?;
    let entries = footer
        .parse_index(&index)?
        .iter()
        .map(|e| Loc::of(e, part))
        .collect();
    Ok(Part { file, entries })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache as the tests want it whatever the disk they run on holds: no floor of free
    /// space (the floor has its own test below).
    fn open(root: &Path, key: &str, limit: u64) -> Result<DecodedDisk> {
        open_parts(root, key, limit, PART_BYTES)
    }

    fn open_parts(root: &Path, key: &str, limit: u64, part: u64) -> Result<DecodedDisk> {
        let mut d = DecodedDisk::open_with_part_size(root, key, limit, part)?;
        d.set_keep_free(Some(0));
        Ok(d)
    }

    fn image(seed: u8, w: u32, h: u32) -> DecodedImage {
        DecodedImage {
            width: w,
            height: h,
            channels: 3,
            data: (0..w * h * 3)
                .map(|i| (i as u8).wrapping_mul(seed))
                .collect(),
        }
    }

    fn same(a: &DecodedImage, b: &DecodedImage) -> bool {
        (a.width, a.height, a.channels, &a.data) == (b.width, b.height, b.channels, &b.data)
    }

    fn parts(dir: &Path, ext: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn images_persist_across_opens_in_published_parts() {
        let tmp = tempfile::tempdir().unwrap();
        let imgs: Vec<DecodedImage> = (0..10)
            .map(|i| image(i + 1, 20 + u32::from(i), 9))
            .collect();
        let dir = {
            // parts of about three images: several are published on the way
            let d = open_parts(tmp.path(), "ds/image/p", u64::MAX, 1500).unwrap();
            for (i, img) in imgs.iter().enumerate() {
                d.put(i as u64 * 7, img);
            }
            d.put(0, &imgs[5]); // already there: not written again
            // this process reads its own images at once, published or not
            assert!(same(&d.get(21).unwrap(), &imgs[3]));
            assert!(parts(d.dir(), "skdc").len() >= 2, "published on the way");
            assert_eq!(d.counts().0, 10);
            d.dir().to_path_buf()
        }; // dropped: the last part is published
        assert!(parts(&dir, "tmp").is_empty());
        let d = open_parts(tmp.path(), "ds/image/p", u64::MAX, 1500).unwrap();
        for (i, img) in imgs.iter().enumerate() {
            assert!(same(&d.get(i as u64 * 7).unwrap(), img), "image {i}");
        }
        assert!(d.get(1).is_none());
        let st = d.stats();
        assert_eq!((st.hits, st.misses, st.entries), (10, 1, 10));
        assert!(
            fs::read_to_string(dir.join("key.txt"))
                .unwrap()
                .starts_with("ds/image/p|")
        );
        // another key is another directory
        let other = open(tmp.path(), "ds/image/q", u64::MAX).unwrap();
        assert_ne!(other.dir(), dir);
        assert!(other.get(0).is_none());
    }

    #[test]
    fn damaged_pixels_are_computed_again_and_damaged_parts_are_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let a = image(3, 16, 16);
        let dir = {
            let d = open(tmp.path(), "k", u64::MAX).unwrap();
            d.put(1, &a);
            d.put(2, &image(5, 16, 16));
            d.dir().to_path_buf()
        };
        let part = parts(&dir, "skdc").pop().unwrap();
        let mut bytes = fs::read(&part).unwrap();
        bytes[100] ^= 0x01; // inside the first image's pixels
        fs::write(&part, &bytes).unwrap();
        let d = open(tmp.path(), "k", u64::MAX).unwrap();
        assert!(d.get(1).is_none(), "a checksum mismatch is a miss");
        assert!(d.get(2).is_some(), "the other image is fine");
        assert!(d.get(1).is_none());
        assert_eq!(d.counts().1, 1, "counted once, then forgotten");
        drop(d);
        // a damaged index: the whole part is ignored, nothing is served from it
        let n = bytes.len();
        bytes[n - FOOTER as usize - 3] ^= 0x10;
        fs::write(&part, &bytes).unwrap();
        let d = open(tmp.path(), "k", u64::MAX).unwrap();
        assert_eq!(d.counts().3, 1);
        assert!(d.get(2).is_none());
        drop(d);
        // a footer claiming an index of 2^58 entries is refused before any allocation
        let mut huge = bytes.clone();
        huge[n - 16..n - 8].copy_from_slice(&(u64::MAX / 64).to_le_bytes());
        fs::write(&part, &huge).unwrap();
        let err = read_part(&part, 0).unwrap_err().to_string();
        assert!(err.contains("do not fit"), "{err}");
        // truncated
        fs::write(&part, &bytes[..10]).unwrap();
        assert!(
            read_part(&part, 0)
                .unwrap_err()
                .to_string()
                .contains("shorter than its footer")
        );
    }

    #[test]
    fn writers_sharing_a_directory_leave_every_image_readable() {
        // two caches of one key (as two processes of a node), writing at the same time
        let tmp = tempfile::tempdir().unwrap();
        let imgs: Vec<DecodedImage> = (0..40).map(|i| image(i + 1, 12, 8)).collect();
        std::thread::scope(|s| {
            for start in [0usize, 20] {
                let (root, imgs) = (tmp.path(), &imgs);
                s.spawn(move || {
                    let d = open_parts(root, "k", u64::MAX, 2000).unwrap();
                    // overlapping ranges: both write ids 20..30
                    for (i, img) in imgs.iter().enumerate().skip(start).take(30) {
                        d.put(i as u64, img);
                    }
                });
            }
        });
        let d = open(tmp.path(), "k", u64::MAX).unwrap();
        assert_eq!(d.stats().entries, 40);
        for (i, img) in imgs.iter().enumerate() {
            assert!(same(&d.get(i as u64).unwrap(), img), "image {i}");
        }
        assert!(parts(d.dir(), "tmp").is_empty());
        // one copy of each image, however the writers met
        assert_eq!(pixel_bytes(d.dir()), 40 * 12 * 8 * 3);
    }

    /// The pixels the published parts of `dir` hold, by their footers.
    fn pixel_bytes(dir: &Path) -> u64 {
        parts(dir, "skdc")
            .iter()
            .map(|p| {
                let b = fs::read(p).unwrap();
                let n = b.len();
                u64::from_le_bytes(b[n - 8..].try_into().unwrap())
            })
            .sum()
    }

    #[test]
    fn a_process_reads_what_another_published_while_both_run() {
        let tmp = tempfile::tempdir().unwrap();
        let imgs: Vec<DecodedImage> = (0..10).map(|i| image(i + 1, 10, 6)).collect();
        // two ranks of a node, opened together: neither sees anything at open
        let (a, b) = (
            open(tmp.path(), "k", u64::MAX).unwrap(),
            open(tmp.path(), "k", u64::MAX).unwrap(),
        );
        for (i, img) in imgs.iter().enumerate().take(5) {
            a.put(i as u64, img);
        }
        a.flush(); // a's epoch ends: its part is published
        // b picks it up at a miss once the directory changed (at most every REFRESH_EVERY)...
        std::thread::sleep(REFRESH_EVERY + std::time::Duration::from_millis(20));
        assert!(same(&b.get(3).unwrap(), &imgs[3]));
        // ... and at its own epoch's end
        for (i, img) in imgs.iter().enumerate().skip(5) {
            b.put(i as u64, img);
        }
        b.flush();
        a.flush();
        for (i, img) in imgs.iter().enumerate() {
            assert!(same(&a.get(i as u64).unwrap(), img), "a, image {i}");
            assert!(same(&b.get(i as u64).unwrap(), img), "b, image {i}");
        }
        // every read of the other's parts is counted (b read image 3 twice)
        assert_eq!(a.stats().shared, 5);
        assert_eq!(b.stats().shared, 6);
        assert!(
            b.stats()
                .report_line()
                .contains("6 written by other processes")
        );
        // b never writes what a published
        b.put(0, &imgs[0]);
        b.flush();
        assert_eq!(b.counts().0, 5);
        assert_eq!(pixel_bytes(&b.dir), 10 * 10 * 6 * 3);
    }

    #[test]
    fn images_decoded_by_two_processes_at_once_are_stored_once() {
        let tmp = tempfile::tempdir().unwrap();
        let imgs: Vec<DecodedImage> = (0..30).map(|i| image(i + 1, 8, 8)).collect();
        let (a, b) = (
            open(tmp.path(), "k", u64::MAX).unwrap(),
            open(tmp.path(), "k", u64::MAX).unwrap(),
        );
        // both decode 0..20 before either publishes; b also 20..30
        for (i, img) in imgs.iter().enumerate() {
            if i < 20 {
                a.put(i as u64, img);
            }
            b.put(i as u64, img);
        }
        a.flush();
        b.flush(); // b's part is rewritten without the 20 images a's part holds
        assert_eq!((a.deduplicated(), b.deduplicated()), (0, 20));
        assert_eq!(pixel_bytes(&a.dir), 30 * 8 * 8 * 3);
        assert!(parts(&a.dir, "tmp").is_empty());
        for (i, img) in imgs.iter().enumerate() {
            assert!(same(&b.get(i as u64).unwrap(), img), "b, image {i}");
        }
        drop((a, b));
        let c = open(tmp.path(), "k", u64::MAX).unwrap();
        for (i, img) in imgs.iter().enumerate() {
            assert!(same(&c.get(i as u64).unwrap(), img), "later run, image {i}");
        }
        // all of a part left out: no part at all
        let d = open(tmp.path(), "k", u64::MAX).unwrap();
        let before = parts(&d.dir, "skdc").len();
        let (e, f) = (
            open(tmp.path(), "k2", u64::MAX).unwrap(),
            open(tmp.path(), "k2", u64::MAX).unwrap(),
        );
        e.put(1, &imgs[1]);
        f.put(1, &imgs[1]);
        e.flush();
        f.flush();
        assert_eq!((f.deduplicated(), parts(&f.dir, "skdc").len()), (1, 1));
        assert!(same(&f.get(1).unwrap(), &imgs[1]));
        assert_eq!(parts(&d.dir, "skdc").len(), before);
    }

    #[test]
    fn the_first_miss_of_an_epoch_waits_for_the_parts_others_are_writing() {
        let tmp = tempfile::tempdir().unwrap();
        let img = image(9, 10, 6);
        let (a, b) = (
            open(tmp.path(), "k", u64::MAX).unwrap(),
            open(tmp.path(), "k", u64::MAX).unwrap(),
        );
        a.put(7, &img); // a is still in its epoch: its part is being written
        b.flush(); // b's epoch ended
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(100));
                a.flush(); // a's epoch ends a moment later
            });
            // b's first miss waits for a's part instead of computing the image again (without
            // the wait, a's part is not yet published when b looks: a miss)
            assert!(same(&b.get(7).unwrap(), &img));
        });
        assert!(b.get(8).is_none());
        assert_eq!(b.stats().shared, 1);
    }

    #[test]
    fn the_limit_holds_for_the_node() {
        let tmp = tempfile::tempdir().unwrap();
        let img = image(4, 10, 10); // 300 bytes
        let (a, b) = (
            open(tmp.path(), "k", 1000).unwrap(),
            open(tmp.path(), "k", 1000).unwrap(),
        );
        a.put(0, &img);
        a.put(1, &img);
        a.flush(); // 2 × (300 + 32) + 32 = 696 bytes in the directory
        b.flush(); // b sees them: one more image would pass the limit
        b.put(2, &img);
        assert_eq!(b.counts().0, 0);
        assert!(b.get(0).is_some() && b.get(2).is_none());
    }

    #[test]
    fn orphaned_parts_are_swept_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = open(tmp.path(), "k", u64::MAX).unwrap().dir().to_path_buf();
        // a part left by a killed process (nobody holds its lock) and one being written now
        fs::write(dir.join("part-1-0.tmp"), b"half written").unwrap();
        let live = File::create(dir.join("part-2-0.tmp")).unwrap();
        assert!(try_lock(&live).unwrap());
        let d = open(tmp.path(), "k", u64::MAX).unwrap();
        assert_eq!(d.counts().2, 1);
        assert!(!dir.join("part-1-0.tmp").exists());
        assert!(dir.join("part-2-0.tmp").exists());
    }

    #[test]
    fn a_directory_that_cannot_be_written_only_stops_writing() {
        let tmp = tempfile::tempdir().unwrap();
        // a regular file where the directory should be: nothing can be created under it (as
        // for a read-only directory, even for root)
        let root = tmp.path().join("not-a-dir");
        std::fs::write(&root, b"x").unwrap();
        let d = open(&root, "k", u64::MAX).expect("opening never fails for the directory");
        assert!(d.stopped.load(Ordering::Relaxed));
        let img = image(3, 10, 10);
        d.put(0, &img);
        assert!(d.get(0).is_none());
        assert_eq!(d.counts().0, 0);
        d.flush();
    }

    #[test]
    fn writing_stops_above_the_filesystems_floor_of_free_space_and_nothing_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let img = image(2, 10, 10);
        // a floor no filesystem keeps: nothing is written, every image is computed
        let mut d = DecodedDisk::open(tmp.path(), "k", u64::MAX).unwrap();
        d.set_keep_free(Some(u64::MAX / 2));
        d.put(0, &img);
        assert!(d.get(0).is_none());
        assert_eq!(d.counts().0, 0);
        let dir = d.dir().to_path_buf();
        drop(d);
        assert!(parts(&dir, "skdc").is_empty() && parts(&dir, "tmp").is_empty());
        // a floor of nothing: written whatever the disk holds
        let mut d = DecodedDisk::open(tmp.path(), "k", u64::MAX).unwrap();
        d.set_keep_free(Some(0));
        d.put(0, &img);
        assert!(same(&d.get(0).unwrap(), &img));
    }

    #[test]
    fn writing_stops_at_the_limit_and_nothing_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let img = image(7, 10, 10); // 300 bytes
        let d = open(tmp.path(), "k", 650).unwrap();
        d.put(0, &img);
        d.put(1, &img); // 2 × (300 + 32) + 32 > 650: not written
        d.put(2, &img);
        assert!(d.get(0).is_some() && d.get(1).is_none() && d.get(2).is_none());
        assert_eq!(d.counts().0, 1);
        assert!(d.stats().bytes <= 650);
        // images that do not describe themselves are never written
        let bad = DecodedImage {
            width: 4,
            height: 4,
            channels: 3,
            data: vec![0; 5].into_boxed_slice(),
        };
        let d = open(tmp.path(), "j", u64::MAX).unwrap();
        d.put(9, &bad);
        assert!(d.get(9).is_none());
    }
}
