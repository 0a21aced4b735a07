//! The local backends of the [`Storage`] contract (declared, with [`Memory`], in
//! `stokehold_format::source`). A [`Location`](crate::location::Location) opens one per object;
//! [`check_storage`](crate::conformance::check_storage) checks each.
//!
//! Backends: [`PreadFile`] (positional reads through the page cache, with readahead hints),
//! [`MmapFile`] (explicit opt-in: the file must not change while mapped), [`DirectFile`]
//! (`O_DIRECT` into aligned buffers, bypassing the page cache, for datasets larger than RAM) and
//! [`Memory`]. [`Access`] picks one by a documented rule.

use std::fs::File;
use std::io;
use std::num::NonZeroU64;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

pub use stokehold_format::source::{HINT_GAP, Memory};
use stokehold_format::source::{ReadProfile, Storage, copy_from, eof, slice_of};

/// Positional reads (`pread`) through the page cache. The file is advised as randomly accessed
/// (the kernel's own readahead would read past small records for nothing); the engine's
/// order-aware [`Storage::will_need`] hints replace it.
#[derive(Debug)]
pub struct PreadFile {
    file: File,
}

impl PreadFile {
    /// Open `path` for positional reads.
    pub fn open(path: &Path) -> io::Result<PreadFile> {
        Ok(PreadFile::from_file(File::open(path)?))
    }

    /// Positional reads of a file already open for reading.
    pub fn from_file(file: File) -> PreadFile {
        // Advice only: a filesystem that ignores it reads the same bytes.
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::Random);
        PreadFile { file }
    }
}

impl Storage for PreadFile {
    fn profile(&self) -> ReadProfile {
        ReadProfile::LocalFile
    }

    fn kind(&self) -> &'static str {
        "pread"
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        // No file is longer than i64::MAX: a range beyond it is past the end (the kernel would
        // say EINVAL).
        if offset
            .checked_add(buf.len() as u64)
            .is_none_or(|end| end > i64::MAX as u64)
        {
            return Err(eof());
        }
        self.file.read_exact_at(buf, offset)
    }

    fn will_need(&self, offset: u64, len: u64) {
        if let Some(len) = NonZeroU64::new(len) {
            let _ =
                rustix::fs::fadvise(&self.file, offset, Some(len), rustix::fs::Advice::WillNeed);
        }
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.file.as_raw_fd())
    }
}

/// A read-only memory map. The file must not be modified or truncated while the map is open (a
/// truncation makes reads of the lost pages fault): that is why maps are an explicit opt-in.
#[derive(Debug)]
pub struct MmapFile {
    map: memmap2::Mmap,
}

impl MmapFile {
    /// Map `path`.
    pub fn open(path: &Path) -> io::Result<MmapFile> {
        let f = File::open(path)?;
        // SAFETY: mapping is the documented opt-in whose contract is that the file is not
        // modified or truncated while mapped; readers check every offset against the length seen
        // at open, and nothing writes through the map (it is read-only).
        let map = unsafe { memmap2::Mmap::map(&f) }?;
        Ok(MmapFile { map })
    }

    /// Map `path` advising sequential access (for a front-to-back pass such as verification or
    /// a scan). Pages come in as they are read, with the kernel's readahead. (The map is not
    /// populated at open: that read a cold file whole inside `mmap`, before any search could
    /// start, at 0.7 GB/s where faulting it front to back reads it at 2.4 GB/s.)
    pub fn open_sequential(path: &Path) -> io::Result<MmapFile> {
        let f = File::open(path)?;
        // SAFETY: as in `open`: a read-only map under the documented no-modification contract
        // (not populated: pages come in as the scan reads them, which changes no byte).
        let map = unsafe { memmap2::Mmap::map(&f) }?;
        let _ = map.advise(memmap2::Advice::Sequential);
        Ok(MmapFile { map })
    }
}

impl Storage for MmapFile {
    fn profile(&self) -> ReadProfile {
        ReadProfile::Memory
    }

    fn kind(&self) -> &'static str {
        "mmap"
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.map.len() as u64)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        copy_from(&self.map, offset, buf)
    }

    fn slice(&self, offset: u64, len: usize) -> Option<&[u8]> {
        slice_of(&self.map, offset, len)
    }

    fn will_need(&self, offset: u64, len: u64) {
        if let (Ok(o), Ok(l)) = (usize::try_from(offset), usize::try_from(len))
            && o.checked_add(l).is_some_and(|end| end <= self.map.len())
        {
            let _ = self.map.advise_range(memmap2::Advice::WillNeed, o, l);
        }
    }
}

/// Read a whole file into memory.
pub fn read_memory(path: &Path) -> io::Result<Memory> {
    Ok(Memory::new(std::fs::read(path)?))
}

/// The alignment of direct reads: offsets, lengths and buffer addresses are multiples of it.
/// 4096 covers every common logical block size (512 and 4096).
pub const DIRECT_ALIGN: usize = 4096;

/// One aligned block of a direct-read buffer.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; DIRECT_ALIGN]);

// SAFETY: `Block` is a plain byte array with no padding (size == alignment == 4096), so every bit
// pattern is valid and it may be viewed as bytes.
unsafe impl bytemuck::Zeroable for Block {}
// SAFETY: as above; `Block` is `Copy`, `repr(C)`, has no padding and no pointers.
unsafe impl bytemuck::Pod for Block {}

thread_local! {
    static DIRECT_BUF: std::cell::RefCell<Vec<Block>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Direct I/O (`O_DIRECT`): reads bypass the page cache, so a dataset larger than RAM streams
/// through without evicting everything else (and without the kernel copying twice). Each read is
/// widened to [`DIRECT_ALIGN`] boundaries into a per-thread aligned buffer and the asked range is
/// copied out; concurrency comes from the worker threads, each with its reads in flight.
#[derive(Debug)]
pub struct DirectFile {
    file: File,
    len: u64,
}

impl DirectFile {
    /// Open `path` with `O_DIRECT`. Fails (with `InvalidInput` on Linux) on filesystems without
    /// direct I/O, such as tmpfs.
    pub fn open(path: &Path) -> io::Result<DirectFile> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path)?;
        let len = file.metadata()?.len();
        let d = DirectFile { file, len };
        // Some filesystems accept the flag at open and refuse the first read: probe one block.
        if len > 0 {
            let mut probe = [0u8; 1];
            d.read_at(0, &mut probe)?;
        }
        Ok(d)
    }
}

impl Storage for DirectFile {
    fn profile(&self) -> ReadProfile {
        ReadProfile::Direct
    }

    fn kind(&self) -> &'static str {
        "direct"
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.len)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64).ok_or_else(eof)?;
        if end > self.len {
            return Err(eof());
        }
        if buf.is_empty() {
            return Ok(());
        }
        let a = DIRECT_ALIGN as u64;
        let start = offset / a * a;
        // The file's last block may be partial: the kernel returns the bytes up to its end.
        let stop = end.div_ceil(a) * a;
        let blocks = usize::try_from((stop - start) / a).map_err(|_| eof())?;
        DIRECT_BUF.with(|cell| {
            let mut v = cell.borrow_mut();
            if v.len() < blocks {
                v.resize(blocks, Block([0; DIRECT_ALIGN]));
            }
            let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v[..blocks]);
            let want = (end - start) as usize;
            let mut done = 0usize;
            while done < want {
                // Every read is at an aligned offset into an aligned address with an aligned
                // length (the remainder of whole blocks).
                let n = self.file.read_at(&mut bytes[done..], start + done as u64)?;
                if n == 0 {
                    return Err(eof());
                }
                done += n;
                if !done.is_multiple_of(DIRECT_ALIGN) && done < want {
                    // a short read that is not at the end of the file: direct I/O cannot go on
                    // from an unaligned position
                    return Err(io::Error::other("short unaligned direct read"));
                }
            }
            let from = (offset - start) as usize;
            buf.copy_from_slice(&bytes[from..from + buf.len()]);
            Ok(())
        })
    }
}

/// How shards are read. [`Access::Auto`] (the default) picks by this rule: a dataset that fits
/// in half the machine's RAM is read with [`Access::Pread`] (the page cache keeps it warm across
/// epochs); a larger one with [`Access::Direct`] when its filesystem supports direct I/O (the page
/// cache could not hold it and would only be thrashed), else with `Pread`. Maps are never chosen
/// automatically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    /// The rule above.
    #[default]
    Auto,
    /// Positional reads through the page cache.
    Pread,
    /// Memory maps (opt-in: files must not change while open). Zero-copy record slices.
    Mmap,
    /// `O_DIRECT` reads, bypassing the page cache.
    Direct,
    /// Every shard read into memory at open.
    Memory,
}

impl Access {
    /// The name used in options and reports.
    pub fn name(self) -> &'static str {
        match self {
            Access::Auto => "auto",
            Access::Pread => "pread",
            Access::Mmap => "mmap",
            Access::Direct => "direct",
            Access::Memory => "memory",
        }
    }

    /// Parse a name given by [`Access::name`].
    pub fn parse(s: &str) -> Option<Access> {
        Some(match s {
            "auto" => Access::Auto,
            "pread" => Access::Pread,
            "mmap" => Access::Mmap,
            "direct" => Access::Direct,
            "memory" => Access::Memory,
            _ => return None,
        })
    }

    /// The concrete access for a dataset of `bytes` on a machine with `ram` bytes of memory
    /// (`Auto` only; every other choice is returned as is). `Direct` here still falls back to
    /// `Pread` at open when the filesystem refuses it.
    pub fn resolve(self, bytes: u64, ram: u64) -> Access {
        match self {
            Access::Auto if ram > 0 && bytes > ram / 2 => Access::Direct,
            Access::Auto => Access::Pread,
            other => other,
        }
    }

    /// Open one file with this access (`Auto` must have been resolved; it reads as `Pread`).
    /// With a resolved-automatic `Direct`, pass `fallback = true` to get `Pread` where the
    /// filesystem has no direct I/O.
    pub fn open(self, path: &Path, fallback: bool) -> io::Result<Box<dyn Storage>> {
        Ok(match self {
            Access::Auto | Access::Pread => Box::new(PreadFile::open(path)?),
            Access::Mmap => Box::new(MmapFile::open(path)?),
            Access::Memory => Box::new(read_memory(path)?),
            Access::Direct => match DirectFile::open(path) {
                Ok(d) => Box::new(d),
                Err(e) if fallback && e.kind() == io::ErrorKind::InvalidInput => {
                    Box::new(PreadFile::open(path)?)
                }
                Err(e) => return Err(e),
            },
        })
    }
}

/// Total physical memory in bytes (0 when unknown).
pub fn physical_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                let rest = l.strip_prefix("MemTotal:")?;
                let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                kib.checked_mul(1024)
            })
        })
        .unwrap_or(0)
}

/// Whether the filesystem holding `file` serves direct I/O (tmpfs, for one, does not).
pub fn supports_direct(file: &Path) -> bool {
    DirectFile::open(file).is_ok()
}
