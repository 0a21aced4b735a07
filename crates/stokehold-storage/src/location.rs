//! Where a dataset's bytes live: [`Location`], one trait for a local directory ([`LocalDir`]),
//! memory ([`MemoryDir`]) and an object-store prefix (`remote::ObjectStoreDir`, with the
//! `remote` feature). [`locate`](crate::locate) (module `locate`, above this one and `remote`)
//! is the one place that tells a local path from a URL.
//!
//! A location is the control plane: the size and version of an object, batches of ranged reads
//! (which object storage sends concurrently), listing, whole-object, conditional and streamed
//! writes, deletes. The data plane is the [`Storage`] that [`Location::open_storage`] returns for
//! one object, read by position for the life of an open dataset. What the bytes mean (a shard's
//! structure, a manifest) is decided outside, from the bytes alone: see [`ShardOpening`].
//!
//! Paths and URLs: a [`Place`] is taken of a path wherever a path of a dataset or a source is
//! given, instead of treating `s3://bucket/x` as a local folder named `s3:` (the one test of
//! local against remote); [`require_local`] refuses a URL where only a local path will do.
//!
//! Every backend runs the same suite, [`conformance::check_location`](crate::conformance::check_location),
//! for reads and writes.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::file::{Access, Memory, MmapFile};
use stokehold_format::Storage;
use stokehold_format::error::{FormatError, Result};
use stokehold_format::limits::Limits;
use stokehold_format::shard::{
    OpenStep, ShardOpening, ShardStructure, TRAILER_LEN, read_structure,
};

/// What a location knows of one object: its size, and a version that changes when the object is
/// replaced (a local file's inode and modification time, an object's ETag, a counter in memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Size in bytes.
    pub size: u64,
    /// The version, where the backend has one.
    pub version: Option<String>,
}

/// One ranged read of a batch ([`Location::read_ranges`]): `len` bytes at `offset` of the object
/// `name`, as [`Location::head`] described it (`meta`): object storage refuses to read another
/// version of it.
#[derive(Debug, Clone, Copy)]
pub struct RangeRead<'a> {
    /// The object's name in the location.
    pub name: &'a str,
    /// What [`Location::head`] said of it.
    pub meta: &'a ObjectMeta,
    /// Offset of the first byte.
    pub offset: u64,
    /// Bytes to read.
    pub len: u64,
}

/// An object being written as a stream ([`Location::writer`]): it appears, whole, at
/// [`ObjectWriter::finish`]; dropped unfinished, it leaves nothing behind.
pub trait ObjectWriter: Write + Send + Sync + fmt::Debug {
    /// Complete the object.
    fn finish(self: Box<Self>) -> io::Result<()>;
}

/// Where a dataset's objects live (see the module documentation). Names are relative to the
/// location (`manifest.json`, `shard-000000.skh`); errors are `io::Error`s that callers wrap
/// with [`Location::place`] of the object (see [`FormatError::io`]).
pub trait Location: Send + Sync + fmt::Debug {
    /// The directory or URL of the location (as given).
    fn root(&self) -> &Path;

    /// The path or URL of the object `name`, for messages.
    fn place(&self, name: &str) -> PathBuf {
        self.root().join(name)
    }

    /// The local directory that holds the objects as files, where there is one: a dataset
    /// written there is staged beside it and published with a rename (`DatasetWriter`); written
    /// anywhere else, it is written in place and its manifest, written last, commits it.
    fn directory(&self) -> Option<&Path> {
        None
    }

    /// Size and version of the object `name` (`NotFound` when it does not exist).
    fn head(&self, name: &str) -> io::Result<ObjectMeta>;

    /// [`Location::head`] of many objects, in order; object storage sends the requests
    /// concurrently.
    fn head_many(&self, names: &[&str]) -> Vec<io::Result<ObjectMeta>> {
        names.iter().map(|n| self.head(n)).collect()
    }

    /// The bytes of many ranges, in order (`UnexpectedEof` for a range past an object's end);
    /// object storage sends the requests concurrently. Each `len` must already be bounded by the
    /// caller (by the object's size and a limit).
    fn read_ranges(&self, reads: &[RangeRead<'_>]) -> Vec<io::Result<Vec<u8>>>;

    /// The data plane: a [`Storage`] reading the object `name` (as `meta` describes it) for as
    /// long as a dataset is open. Local files honour `access` (pread, mmap, direct I/O with a
    /// fallback to pread when `fallback` and the filesystem refuses it, memory); object storage
    /// reads with ranged GETs, or into memory for [`Access::Memory`].
    fn open_storage(
        &self,
        name: &str,
        meta: &ObjectMeta,
        access: Access,
        fallback: bool,
    ) -> io::Result<Box<dyn Storage>>;

    /// A [`Storage`] for one front-to-back pass over the object (verification): with `map`, a
    /// local file is mapped with sequential advice; otherwise as [`Location::open_storage`]
    /// with [`Access::Pread`].
    fn open_scan(&self, name: &str, meta: &ObjectMeta, map: bool) -> io::Result<Box<dyn Storage>> {
        let _ = map;
        self.open_storage(name, meta, Access::Pread, false)
    }

    /// How many bytes of a shard's end to read with its header when opening it (see
    /// [`ShardOpening::new`](stokehold_format::shard::ShardOpening::new)): the trailer alone where a read
    /// is cheap, more where each request costs a round trip.
    fn opening_tail(&self) -> u64 {
        TRAILER_LEN
    }

    /// Open the shards `shards` (each its object's name and its path or URL for messages): each
    /// one's structure read and checked by a [`ShardOpening`], and the storage it is read
    /// through from then on ([`Location::open_storage`] with `access` and `fallback`), in order.
    ///
    /// The default drives the openings of all shards together: one [`Location::head_many`],
    /// then one [`Location::read_ranges`] batch per step of every shard's opening (object
    /// storage sends each batch concurrently: the heads, then every header and tail, then what
    /// a tail missed), then the storages. A local directory opens each file once and reads its
    /// structure through it.
    fn open_shards(
        &self,
        shards: &[(&str, PathBuf)],
        limits: &Limits,
        access: Access,
        fallback: bool,
    ) -> Result<Vec<(ShardStructure, Box<dyn Storage>)>> {
        let names: Vec<&str> = shards.iter().map(|(n, _)| *n).collect();
        let mut metas = Vec::with_capacity(names.len());
        for (head, (_, path)) in self.head_many(&names).into_iter().zip(shards) {
            metas.push(head.map_err(|e| FormatError::io(path, None, e))?);
        }
        let mut openings = Vec::with_capacity(names.len());
        for (meta, (_, path)) in metas.iter().zip(shards) {
            openings.push(ShardOpening::new(
                path,
                meta.size,
                *limits,
                self.opening_tail(),
            )?);
        }
        let mut done: Vec<Option<ShardStructure>> = (0..names.len()).map(|_| None).collect();
        loop {
            let mut wanted = Vec::new();
            for (i, opening) in openings.iter_mut().enumerate() {
                if done[i].is_some() {
                    continue;
                }
                match opening.step()? {
                    OpenStep::Done(s) => done[i] = Some(s),
                    OpenStep::Read(reads) => wanted.extend(reads.into_iter().map(|r| (i, r))),
                }
            }
            if wanted.is_empty() {
                break;
            }
            let batch: Vec<RangeRead<'_>> = wanted
                .iter()
                .map(|(i, r)| RangeRead {
                    name: names[*i],
                    meta: &metas[*i],
                    offset: r.offset,
                    len: r.len,
                })
                .collect();
            let got = self.read_ranges(&batch);
            for ((i, r), bytes) in wanted.iter().zip(got) {
                let bytes = bytes.map_err(|e| openings[*i].read_error(r, e))?;
                openings[*i].supply(r.offset, bytes);
            }
        }
        let mut out = Vec::with_capacity(names.len());
        for (((structure, meta), name), (_, path)) in
            done.into_iter().zip(&metas).zip(&names).zip(shards)
        {
            let source = self
                .open_storage(name, meta, access, fallback)
                .map_err(|e| FormatError::io(path, None, e))?;
            out.push((structure.expect("every opening is done"), source));
        }
        Ok(out)
    }

    /// How many requests are worth keeping in flight at once (threads of a scan): the cores for
    /// local storage, more where requests wait on the network.
    fn parallelism(&self) -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// The objects of the location (a local directory's files, not its subdirectories), by
    /// name. A location that does not exist yet lists as empty.
    fn list(&self) -> io::Result<BTreeMap<String, ObjectMeta>>;

    /// Write the whole object `name`, replacing any; readers see the old object or the new one,
    /// never a part.
    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()>;

    /// Create the object `name` only if it does not exist: `false` (and nothing written) when
    /// it does. Atomic on local files and in memory, and on object stores with conditional
    /// writes; on a store without them, a check then a write.
    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> io::Result<bool>;

    /// Write the object `name` as a stream (see [`ObjectWriter`]).
    fn writer(&self, name: &str) -> io::Result<Box<dyn ObjectWriter>>;

    /// Delete the object `name` (one that does not exist is not an error).
    fn delete(&self, name: &str) -> io::Result<()>;

    /// The request counts of an object store; `None` where nothing is counted.
    fn remote_stats(&self) -> Option<RemoteStats> {
        None
    }
}

/// Counts of one object store's requests (an object-store location's
/// [`Location::remote_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Logical requests made by stokehold (HEADs and ranged GETs; when writing, PUTs, upload
    /// parts, LISTs and DELETEs), each counted once.
    pub requests: u64,
    /// HTTP requests actually sent, retries included.
    pub http_requests: u64,
    /// Retries: HTTP requests beyond the logical ones (after a 5xx or 429, a timeout, a
    /// connection error, a body cut mid-stream, or a short body).
    pub retries: u64,
    /// Responses that were server errors or throttling (5xx, 429), and transport errors.
    pub failures: u64,
    /// Responses whose body ended early without an error, re-requested from where they stopped.
    pub short_bodies: u64,
    /// Body bytes received.
    pub bytes: u64,
    /// Order-aware prefetch: GETs issued ahead of the reads, and how the reads fared.
    pub prefetch: PrefetchStats,
}

/// Counts of the prefetcher (part of [`RemoteStats`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchStats {
    /// GETs issued ahead.
    pub requests: u64,
    /// Bytes requested ahead.
    pub bytes: u64,
    /// Reads served wholly from ranges fetched ahead.
    pub hits: u64,
    /// Reads that needed a request of their own (nothing, or only part, fetched ahead).
    pub misses: u64,
    /// Bytes fetched ahead and dropped before they were read (budget, or never needed).
    pub wasted_bytes: u64,
    /// Ranges not prefetched because the budget was full of ranges in flight.
    pub refused: u64,
}

/// Read all of the small object `name` (a manifest), refusing one of over `max` bytes before
/// reading it; `what` names the limit in that error.
pub fn read_small(location: &dyn Location, name: &str, max: u64, what: &str) -> Result<Vec<u8>> {
    let place = location.place(name);
    let meta = location
        .head(name)
        .map_err(|e| FormatError::io(&place, None, e))?;
    if meta.size > max {
        return Err(FormatError::LimitExceeded {
            path: place,
            what: what.into(),
            value: meta.size,
            max,
        });
    }
    // `meta.size` is at most `max`, a configured limit
    let read = RangeRead {
        name,
        meta: &meta,
        offset: 0,
        len: meta.size,
    };
    let mut got = location.read_ranges(&[read]);
    got.pop()
        .unwrap_or_else(|| Err(io::Error::other("no result")))
        .map_err(|e| FormatError::io(&place, Some(0), e))
}

/// A local directory.
#[derive(Debug, Clone)]
pub struct LocalDir {
    root: PathBuf,
}

/// Temporary files of this process's writers: `.<name>.tmp-<pid>-<n>`.
static TEMP: AtomicU64 = AtomicU64::new(0);

impl LocalDir {
    /// The directory `root` (which need not exist until something is written).
    pub fn new(root: impl Into<PathBuf>) -> LocalDir {
        LocalDir { root: root.into() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// A new temporary file beside `name`, created (the directory too).
    fn temp(&self, name: &str) -> io::Result<(PathBuf, std::fs::File)> {
        std::fs::create_dir_all(&self.root)?;
        let n = TEMP.fetch_add(1, Ordering::Relaxed);
        let path = self
            .root
            .join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok((path, file))
    }

    /// Make the directory's entries durable (after a rename or a link).
    fn sync(&self) -> io::Result<()> {
        std::fs::File::open(&self.root)?.sync_all()
    }

    /// `bytes` in a finished temporary file beside `name`.
    fn temp_with(&self, name: &str, bytes: &[u8]) -> io::Result<PathBuf> {
        let (path, mut file) = self.temp(name)?;
        let written = file.write_all(bytes).and_then(|()| file.sync_data());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        Ok(path)
    }
}

fn file_meta(m: &std::fs::Metadata) -> ObjectMeta {
    use std::os::unix::fs::MetadataExt;
    ObjectMeta {
        size: m.len(),
        version: Some(format!(
            "{:x}-{:x}.{:09}",
            m.ino(),
            m.mtime(),
            m.mtime_nsec()
        )),
    }
}

impl Location for LocalDir {
    fn root(&self) -> &Path {
        &self.root
    }

    fn directory(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn head(&self, name: &str) -> io::Result<ObjectMeta> {
        let m = std::fs::metadata(self.path(name))?;
        if m.is_dir() {
            // what opening and reading it would say
            return Err(rustix::io::Errno::ISDIR.into());
        }
        if !m.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(file_meta(&m))
    }

    fn read_ranges(&self, reads: &[RangeRead<'_>]) -> Vec<io::Result<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        // the batch's reads of one file through one descriptor (a shard's header and tail)
        let mut open: Option<(&str, std::fs::File)> = None;
        reads
            .iter()
            .map(|r| {
                if open.as_ref().is_none_or(|(n, _)| *n != r.name) {
                    open = Some((r.name, std::fs::File::open(self.path(r.name))?));
                }
                let (_, file) = open.as_ref().expect("opened above");
                // no file is longer than i64::MAX: a range beyond it is past the end
                let len = usize::try_from(r.len)
                    .ok()
                    .filter(|_| {
                        r.offset
                            .checked_add(r.len)
                            .is_some_and(|e| e <= i64::MAX as u64)
                    })
                    .ok_or(io::ErrorKind::UnexpectedEof)?;
                let mut v = vec![0u8; len];
                file.read_exact_at(&mut v, r.offset)?;
                Ok(v)
            })
            .collect()
    }

    fn open_storage(
        &self,
        name: &str,
        _: &ObjectMeta,
        access: Access,
        fallback: bool,
    ) -> io::Result<Box<dyn Storage>> {
        access.open(&self.path(name), fallback)
    }

    fn open_shards(
        &self,
        shards: &[(&str, PathBuf)],
        limits: &Limits,
        access: Access,
        fallback: bool,
    ) -> Result<Vec<(ShardStructure, Box<dyn Storage>)>> {
        // one open per file, the structure read through the storage that reads the records
        shards
            .iter()
            .map(|(name, path)| {
                let source = access
                    .open(&self.path(name), fallback)
                    .map_err(|e| FormatError::io(path, None, e))?;
                Ok((read_structure(path, &*source, *limits)?, source))
            })
            .collect()
    }

    fn open_scan(&self, name: &str, meta: &ObjectMeta, map: bool) -> io::Result<Box<dyn Storage>> {
        if map {
            // the file changing underneath is the documented risk of mapping it (see
            // `VerifyOptions::mmap`)
            Ok(Box::new(MmapFile::open_sequential(&self.path(name))?))
        } else {
            self.open_storage(name, meta, Access::Pread, false)
        }
    }

    fn list(&self) -> io::Result<BTreeMap<String, ObjectMeta>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(e),
        };
        let mut out = BTreeMap::new();
        for entry in entries {
            let entry = entry?;
            // a symbolic link to a file is that file (as `pack` reads it); a broken one is none
            let m = match std::fs::metadata(entry.path()) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if let (true, Some(name)) = (m.is_file(), entry.file_name().to_str()) {
                out.insert(name.to_string(), file_meta(&m));
            }
        }
        Ok(out)
    }

    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let temp = self.temp_with(name, bytes)?;
        std::fs::rename(&temp, self.path(name)).inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })?;
        self.sync()
    }

    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        // a hard link is created only where nothing is: the object appears whole, or not at all
        let temp = self.temp_with(name, bytes)?;
        let linked = std::fs::hard_link(&temp, self.path(name));
        let _ = std::fs::remove_file(&temp);
        match linked {
            Ok(()) => self.sync().map(|()| true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn writer(&self, name: &str) -> io::Result<Box<dyn ObjectWriter>> {
        let (temp, file) = self.temp(name)?;
        Ok(Box::new(LocalWriter {
            file: io::BufWriter::with_capacity(1 << 20, file),
            temp,
            dest: self.path(name),
            done: false,
        }))
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        match std::fs::remove_file(self.path(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A local object being written: a temporary file renamed into place at the end.
#[derive(Debug)]
struct LocalWriter {
    file: io::BufWriter<std::fs::File>,
    temp: PathBuf,
    dest: PathBuf,
    done: bool,
}

impl Write for LocalWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.file.write(data)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl ObjectWriter for LocalWriter {
    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_data()?;
        std::fs::rename(&self.temp, &self.dest)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Objects held in memory (tests, and data made on the fly). Versions count up from 1.
#[derive(Debug, Default)]
pub struct MemoryDir {
    root: PathBuf,
    objects: Arc<Mutex<MemoryObjects>>,
}

#[derive(Debug, Default)]
struct MemoryObjects {
    next_version: u64,
    by_name: BTreeMap<String, (Arc<[u8]>, u64)>,
}

impl MemoryObjects {
    fn insert(&mut self, name: &str, bytes: Arc<[u8]>) {
        self.next_version += 1;
        self.by_name
            .insert(name.to_string(), (bytes, self.next_version));
    }
}

impl MemoryDir {
    /// An empty location named `root` in messages.
    pub fn new(root: impl Into<PathBuf>) -> MemoryDir {
        MemoryDir {
            root: root.into(),
            objects: Arc::default(),
        }
    }

    fn objects(&self) -> std::sync::MutexGuard<'_, MemoryObjects> {
        // a panic while holding the lock leaves the map consistent (one insert or remove)
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, name: &str) -> io::Result<(Arc<[u8]>, u64)> {
        self.objects()
            .by_name
            .get(name)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no object {name:?}")))
    }
}

fn memory_meta(bytes: &[u8], version: u64) -> ObjectMeta {
    ObjectMeta {
        size: bytes.len() as u64,
        version: Some(version.to_string()),
    }
}

impl Location for MemoryDir {
    fn root(&self) -> &Path {
        &self.root
    }

    fn head(&self, name: &str) -> io::Result<ObjectMeta> {
        let (bytes, version) = self.get(name)?;
        Ok(memory_meta(&bytes, version))
    }

    fn read_ranges(&self, reads: &[RangeRead<'_>]) -> Vec<io::Result<Vec<u8>>> {
        reads
            .iter()
            .map(|r| {
                let (bytes, version) = self.get(r.name)?;
                if r.meta.version.as_deref() != Some(version.to_string().as_str()) {
                    return Err(changed(r.name));
                }
                let mut v = vec![0u8; usize::try_from(r.len).map_err(|_| eof())?];
                Memory::new(bytes).read_at(r.offset, &mut v)?;
                Ok(v)
            })
            .collect()
    }

    fn open_storage(
        &self,
        name: &str,
        meta: &ObjectMeta,
        _: Access,
        _: bool,
    ) -> io::Result<Box<dyn Storage>> {
        let (bytes, version) = self.get(name)?;
        if meta.version.as_deref() != Some(version.to_string().as_str()) {
            return Err(changed(name));
        }
        Ok(Box::new(Memory::new(bytes)))
    }

    fn list(&self) -> io::Result<BTreeMap<String, ObjectMeta>> {
        Ok(self
            .objects()
            .by_name
            .iter()
            .map(|(name, (bytes, version))| (name.clone(), memory_meta(bytes, *version)))
            .collect())
    }

    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.objects().insert(name, bytes.into());
        Ok(())
    }

    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        let mut objects = self.objects();
        if objects.by_name.contains_key(name) {
            return Ok(false);
        }
        objects.insert(name, bytes.into());
        Ok(true)
    }

    fn writer(&self, name: &str) -> io::Result<Box<dyn ObjectWriter>> {
        Ok(Box::new(MemoryWriter {
            objects: Arc::clone(&self.objects),
            name: name.to_string(),
            bytes: Vec::new(),
        }))
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        self.objects().by_name.remove(name);
        Ok(())
    }
}

/// An object being written to a [`MemoryDir`]: inserted at the end.
#[derive(Debug)]
struct MemoryWriter {
    objects: Arc<Mutex<MemoryObjects>>,
    name: String,
    bytes: Vec<u8>,
}

impl Write for MemoryWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl ObjectWriter for MemoryWriter {
    fn finish(self: Box<Self>) -> io::Result<()> {
        let MemoryWriter {
            objects,
            name,
            bytes,
        } = *self;
        objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(&name, bytes.into());
        Ok(())
    }
}

fn eof() -> io::Error {
    io::Error::from(io::ErrorKind::UnexpectedEof)
}

fn changed(name: &str) -> io::Error {
    io::Error::other(format!("{name}: the object changed since it was opened"))
}

/// A dataset's or a source's path or URL, told apart once: the one test of local against remote.
/// The fronts (the CLI's arguments, Python's `Dataset()`, a mixture file's sources) and the
/// ingest door take a `Place` of what they were given and branch on it, never on the text
/// (`contains("://")`), a scheme, or a backend's report label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place<'a> {
    /// A local path (a file, a directory, a pattern; it need not exist).
    Local(&'a Path),
    /// A URL, `scheme://...` (an object store's, opened by [`locate`](crate::locate) with the
    /// `remote` feature; another scheme is refused where it is opened).
    Url {
        /// The scheme as written (`s3`, `gs`, `https`, ...).
        scheme: &'a str,
        /// The whole URL.
        url: &'a Path,
    },
}

impl<'a> Place<'a> {
    /// Tell `path` apart: a URL when it starts with a scheme (RFC 3986: a letter, then letters,
    /// digits, `+`, `-` or `.`) and `://`, else a local path.
    pub fn of(path: &'a Path) -> Place<'a> {
        match url_scheme(path) {
            Some(scheme) => Place::Url { scheme, url: path },
            None => Place::Local(path),
        }
    }

    /// A URL (object storage or another scheme), not a local path.
    pub fn is_remote(&self) -> bool {
        matches!(self, Place::Url { .. })
    }

    /// A local path.
    pub fn is_local(&self) -> bool {
        matches!(self, Place::Local(_))
    }

    /// The local path, `None` for a URL.
    pub fn local(&self) -> Option<&'a Path> {
        match self {
            Place::Local(p) => Some(p),
            Place::Url { .. } => None,
        }
    }

    /// The path or URL as given.
    pub fn path(&self) -> &'a Path {
        match self {
            Place::Local(p) => p,
            Place::Url { url, .. } => url,
        }
    }
}

/// The scheme of `path` when it is a URL (`scheme://...`, the scheme as RFC 3986 spells it: a
/// letter, then letters, digits, `+`, `-` or `.`), or None for a local path. Private to the
/// crate: elsewhere, [`Place::of`] tells a path from a URL.
pub(crate) fn url_scheme(path: &Path) -> Option<&str> {
    let (scheme, _) = path.to_str()?.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// The URL schemes of object stores that the `remote` feature reads (S3 and S3-compatible stores,
/// GCS, Azure, plain HTTP(S) servers), lower case.
pub const OBJECT_STORE_SCHEMES: &[&str] = &[
    "s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "http", "https",
];

/// Whether `path` is a URL of an object store (see [`OBJECT_STORE_SCHEMES`]).
pub(crate) fn is_object_store_url(path: &Path) -> bool {
    url_scheme(path)
        .is_some_and(|s| OBJECT_STORE_SCHEMES.contains(&s.to_ascii_lowercase().as_str()))
}

/// A dataset's path or URL told apart, the one place that does: `Some(path)` for a local path,
/// `None` for an object-store URL (see [`OBJECT_STORE_SCHEMES`]; [`crate::locate`] opens it), and
/// [`FormatError::RemoteUnsupported`] for a URL of any other scheme.
pub fn local_path(path: &Path) -> Result<Option<&Path>> {
    if is_object_store_url(path) {
        return Ok(None);
    }
    require_local(path)?;
    Ok(Some(path))
}

/// The URL a path that does not exist was meant to be, when it is an object-store URL with its
/// `//` cut short (`s3:/bucket/ds`, `gs:bucket`): `s3://bucket/ds`.
pub fn mistyped_url(path: &Path) -> Option<String> {
    let s = path.to_str()?;
    let (scheme, rest) = s.split_once(':')?;
    if !OBJECT_STORE_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str())
        || rest.starts_with("//")
        || path.exists()
    {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    (!rest.is_empty()).then(|| format!("{scheme}://{rest}"))
}

/// Refuse a URL where a local path is needed (see the module documentation), and a path that
/// is an object-store URL mistyped ([`mistyped_url`]: `s3:/bucket` is a local path, one that
/// does not exist).
pub fn require_local(path: &Path) -> Result<()> {
    if let Some(meant) = mistyped_url(path) {
        return Err(FormatError::Remote {
            url: path.display().to_string(),
            detail: format!(
                "not a URL (a URL's scheme is followed by two slashes) and no such local path: \
                 did you mean {meant}?"
            ),
        });
    }
    match url_scheme(path) {
        Some(scheme) => Err(FormatError::RemoteUnsupported {
            url: path.display().to_string(),
            scheme: scheme.to_string(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_local_paths() {
        for (p, scheme) in [
            ("s3://bucket/x", Some("s3")),
            ("gs://b", Some("gs")),
            ("HTTPS://host/ds", Some("HTTPS")),
            ("az+blob://c/d", Some("az+blob")),
            ("file:///tmp/ds", Some("file")),
            ("/data/ds", None),
            ("ds", None),
            ("./s3://x", None),
            ("3s://x", None),
            ("://x", None),
            ("a b://x", None),
            ("s3:/bucket", None),
        ] {
            assert_eq!(url_scheme(Path::new(p)), scheme, "{p}");
            if mistyped_url(Path::new(p)).is_none() {
                assert_eq!(require_local(Path::new(p)).is_ok(), scheme.is_none(), "{p}");
            }
        }
        let msg = require_local(Path::new("s3://bucket/x"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("s3://bucket/x") && msg.contains("not taken here: give a local path"),
            "{msg}"
        );
    }

    #[test]
    fn an_object_store_url_with_one_slash_is_refused_with_the_url_meant() {
        for (p, meant) in [
            ("s3:/bucket", Some("s3://bucket")),
            ("s3:/bucket/ds", Some("s3://bucket/ds")),
            ("gs:bucket/ds", Some("gs://bucket/ds")),
            ("HTTPS:/host/ds", Some("HTTPS://host/ds")),
            ("s3://bucket/ds", None),
            ("s3:", None),
            ("foo:/bucket", None),
            ("data/s3:/x", None),
        ] {
            assert_eq!(mistyped_url(Path::new(p)).as_deref(), meant, "{p}");
        }
        let e = local_path(Path::new("s3:/bucket/ds"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s3:/bucket/ds") && e.contains("did you mean s3://bucket/ds?"),
            "{e}"
        );
    }
}
