//! Where an open shard's bytes come from, as a contract: the [`Storage`] trait, its typed
//! [`ReadProfile`] (the readahead and coalescing policy a reader applies to it) and [`Memory`],
//! bytes already held. The backends that read files and object stores live in the
//! `stokehold-storage` crate; this crate only reads through the trait.
//!
//! The contract is small on purpose, so that every backend (local files, memory, object storage,
//! the engine's shard cache) keeps it, and one conformance suite (`stokehold-storage`'s
//! `conformance::check_storage`) checks them all:
//! - [`Storage::size`] is the object's length, fixed while it is open;
//! - [`Storage::read_at`] fills the whole buffer from `offset` or fails; a range past the end is
//!   an `UnexpectedEof` error, never a short read or padding;
//! - [`Storage::slice`] may borrow bytes without a copy (maps and memory), and returns `None`
//!   when it cannot; it never returns fewer bytes than asked;
//! - [`Storage::will_need`] is a hint that a range will be read soon (readahead); it has no
//!   visible effect on results;
//! - [`Storage::profile`] says how reads behave (memory, a local file, direct I/O, the network),
//!   so that readers choose their policy by type, never by the report label [`Storage::kind`].

use std::io;
use std::sync::Arc;

/// Largest gap between two records that one readahead hint covers ([`Storage::will_read`]).
pub const HINT_GAP: u64 = 64 << 10;

/// How a byte source behaves under reads: what readahead and read coalescing are chosen by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadProfile {
    /// Bytes in memory (or mapped): no readahead, reads cost a copy.
    Memory,
    /// A local file read through the page cache (`pread`): page-cache advice, gaps coalesced.
    LocalFile,
    /// A local file read with `O_DIRECT`: larger runs, reads spread over lanes.
    Direct,
    /// Bytes behind a network request (object storage): every read has a request's latency, so
    /// ranges are fetched ahead and never joined across another task's gap.
    Network,
}

impl ReadProfile {
    /// Whether every read is a network request (object storage).
    pub fn is_network(self) -> bool {
        self == ReadProfile::Network
    }

    /// Whether reads are `O_DIRECT` (aligned, uncached).
    pub fn is_direct(self) -> bool {
        self == ReadProfile::Direct
    }
}

/// A readable, fixed-length object: a shard file, its map, its bytes in memory.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// The backend's name in reports: "pread", "mmap", "direct", "memory", "remote". A label
    /// only: policy is [`Storage::profile`].
    fn kind(&self) -> &'static str;

    /// How reads of this source behave (the readahead and coalescing policy is chosen by it).
    fn profile(&self) -> ReadProfile;

    /// Size in bytes.
    fn size(&self) -> io::Result<u64>;

    /// Read exactly `buf.len()` bytes at `offset`; `UnexpectedEof` when the range passes the end.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// The bytes `offset..offset+len` without a copy, when the backend holds them in memory.
    fn slice(&self, offset: u64, len: usize) -> Option<&[u8]> {
        let _ = (offset, len);
        None
    }

    /// A hint that `offset..offset+len` will be read soon. The default does nothing.
    fn will_need(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }

    /// A hint that the records at these byte ranges `(start, end)` will be read soon, in about
    /// this order (the engine's readahead). The default coalesces neighbours (gaps of at most
    /// [`HINT_GAP`]) and calls [`Storage::will_need`] once per run; object storage requests
    /// them ahead instead.
    fn will_read(&self, records: &[(u64, u64)]) {
        let mut sorted = records.to_vec();
        sorted.sort_unstable();
        let mut i = 0;
        while i < sorted.len() {
            let (start, mut end) = sorted[i];
            let mut j = i + 1;
            while j < sorted.len() && sorted[j].0 <= end + HINT_GAP {
                end = end.max(sorted[j].1);
                j += 1;
            }
            self.will_need(start, end.saturating_sub(start));
            i = j;
        }
    }

    /// The descriptor of the one plain file that [`Storage::read_at`] reads with `pread`, so
    /// that reads can be submitted in batches (`stokehold-storage`'s `read_batch`) with the same
    /// result; `None` (the default) for every other backend.
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// The error of a read past the end.
pub fn eof() -> io::Error {
    io::Error::from(io::ErrorKind::UnexpectedEof)
}

/// `bytes[offset..offset + len]`, `None` when it passes the end.
pub fn slice_of(bytes: &[u8], offset: u64, len: usize) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    bytes.get(start..start.checked_add(len)?)
}

/// Fill `buf` from `bytes` at `offset`, `UnexpectedEof` when it passes the end.
pub fn copy_from(bytes: &[u8], offset: u64, buf: &mut [u8]) -> io::Result<()> {
    let s = slice_of(bytes, offset, buf.len()).ok_or_else(eof)?;
    buf.copy_from_slice(s);
    Ok(())
}

/// The files a table's records name, read where they lie beside it (the images and videos a
/// JSONL file read in place names): a folder on a local disk, or the prefix of the table's object
/// in an object store. Names are the table's own, relative to its folder. The backends live in
/// `stokehold-ingest`; readers (the engine's in-part video reads) only read through the trait.
///
/// Contract: [`NamedFiles::size`] is `NotFound` for a file that is not there;
/// [`NamedFiles::read_at`] fills the whole buffer or fails (`UnexpectedEof` past the end); an
/// object store pins each file to the version its first `size` saw, so a file replaced while it
/// is read fails instead of mixing two versions.
pub trait NamedFiles: Send + Sync + std::fmt::Debug {
    /// The path or URL of file `name`, for messages.
    fn place(&self, name: &str) -> String;

    /// Size of file `name` in bytes.
    fn size(&self, name: &str) -> io::Result<u64>;

    /// Read exactly `buf.len()` bytes of file `name` at `offset`.
    fn read_at(&self, name: &str, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// The first `len` bytes of file `name` (all of it when it is shorter).
    fn read_head(&self, name: &str, len: u64) -> io::Result<Vec<u8>>;

    /// All of file `name`, refused (`FileTooLarge`, before anything is allocated) when it is
    /// longer than `max` bytes.
    fn read_all(&self, name: &str, max: u64) -> io::Result<Vec<u8>>;
}

/// Where a shard's bytes come from: any [`Storage`] backend.
pub type ShardSource = Box<dyn Storage>;

/// Bytes held in memory.
#[derive(Debug, Clone)]
pub struct Memory {
    bytes: Arc<[u8]>,
}

impl Memory {
    /// Hold `bytes`.
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> Memory {
        Memory {
            bytes: bytes.into(),
        }
    }
}

impl Storage for Memory {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn profile(&self) -> ReadProfile {
        ReadProfile::Memory
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.bytes.len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_from(&self.bytes, offset, buf)
    }

    fn slice(&self, offset: u64, len: usize) -> Option<&[u8]> {
        slice_of(&self.bytes, offset, len)
    }
}

/// A shard source over bytes in memory (a shard written to a buffer, a test's bytes).
pub fn memory_source(bytes: Vec<u8>) -> ShardSource {
    Box::new(Memory::new(bytes))
}
