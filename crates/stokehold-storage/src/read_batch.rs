//! Positional reads submitted together: [`ReadBatch::read_all`] reads many byte ranges (of one
//! or several files) with **one** `io_uring` submission where the kernel allows it, instead of one
//! `pread` system call each. For many small random reads from the page cache (token windows: a
//! few KiB each, 32 to a batch) the system call, not the copy, is what costs; a batch pays it
//! once. Ranges of backends that are not one plain file ([`Storage::raw_fd`] is `None`), and every
//! range when `io_uring` is unavailable (an old kernel, a seccomp profile that forbids it, the
//! `STOKEHOLD_IO_URING=0` switch), are read with [`Storage::read_at`], one by one: the same bytes
//! and the same errors, only slower.
//!
//! A short read (the end of the file, or a read the kernel cut short) is finished with
//! `read_at`, so the result is always "exactly these bytes" or the error `read_at` would give.

use std::io;

use stokehold_format::Storage;

/// One range to read: `buf.len()` bytes of `storage` at `offset`. After
/// [`ReadBatch::read_all`], `result` says how it went.
#[derive(Debug)]
pub struct ReadRequest<'a> {
    /// The file.
    pub storage: &'a dyn Storage,
    /// Where the range starts.
    pub offset: u64,
    /// Where its bytes go (exactly this many are read).
    pub buf: &'a mut [u8],
    /// `Ok` once the whole range is in `buf`; the error otherwise (as [`Storage::read_at`]
    /// reports it: `UnexpectedEof` past the end).
    pub result: io::Result<()>,
}

impl<'a> ReadRequest<'a> {
    /// A request for `buf.len()` bytes of `storage` at `offset` (not yet read).
    pub fn new(storage: &'a dyn Storage, offset: u64, buf: &'a mut [u8]) -> ReadRequest<'a> {
        ReadRequest {
            storage,
            offset,
            buf,
            result: Ok(()),
        }
    }

    /// Read the range (or its rest, from `done` bytes on) with `read_at`.
    fn finish_with_pread(&mut self, done: usize) {
        self.result = self
            .storage
            .read_at(self.offset + done as u64, &mut self.buf[done..]);
    }
}

/// Read `buf.len()` bytes of `storage` at `offset` **only if they are all in the page cache**
/// (one `preadv2(RWF_NOWAIT)`, which never waits for the device): `Ok(true)` when `buf` holds
/// them, `Ok(false)` when some are not cached (or the range passes the end; `buf` is then not to
/// be relied on, and the caller reads it another way, e.g. in a batch). Backends without a
/// descriptor, and kernels without `RWF_NOWAIT`, read with [`Storage::read_at`] (`Ok(true)`).
/// Errors are those of `read_at`.
///
/// The warm path of batched readers: a range in the page cache costs what one `pread` costs and
/// lands in the caller's (hot) buffer; only ranges that need the device are worth a batch.
pub fn read_if_cached(storage: &dyn Storage, offset: u64, buf: &mut [u8]) -> io::Result<bool> {
    #[cfg(target_os = "linux")]
    if let Some(fd) = storage.raw_fd() {
        use rustix::io::{Errno, IoSliceMut, ReadWriteFlags, preadv2};
        // SAFETY: `fd` is the descriptor of `storage`'s open file (`Storage::raw_fd`), which
        // `storage`, borrowed for this whole call, keeps open.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let want = buf.len();
        return match preadv2(
            fd,
            &mut [IoSliceMut::new(buf)],
            offset,
            ReadWriteFlags::NOWAIT,
        ) {
            Ok(n) => Ok(n == want),
            Err(Errno::AGAIN) => Ok(false),
            Err(Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS) => {
                storage.read_at(offset, buf).map(|()| true)
            }
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        };
    }
    storage.read_at(offset, buf).map(|()| true)
}

/// A reusable batched reader; one per thread (it is `Send`, not shared).
#[derive(Debug, Default)]
pub struct ReadBatch {
    ring: Ring,
}

#[derive(Default)]
enum Ring {
    /// Not tried yet.
    #[default]
    Untried,
    /// `io_uring` could not be set up (or failed): `read_at` for everything.
    Unavailable,
    #[cfg(target_os = "linux")]
    Ready(Box<io_uring::IoUring>),
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Ring::Untried => "untried",
            Ring::Unavailable => "pread",
            #[cfg(target_os = "linux")]
            Ring::Ready(_) => "io_uring",
        })
    }
}

/// Submission queue entries of a ring: reads beyond this are submitted in further rounds.
#[cfg(target_os = "linux")]
const RING_ENTRIES: u32 = 64;

impl ReadBatch {
    /// A batched reader (its ring is set up on first use).
    pub fn new() -> ReadBatch {
        ReadBatch::default()
    }

    /// A batched reader that never uses `io_uring` (every range read with `pread`).
    pub fn without_io_uring() -> ReadBatch {
        ReadBatch {
            ring: Ring::Unavailable,
        }
    }

    /// How reads are made: `"io_uring"`, `"pread"`, or `"untried"` before the first batch.
    pub fn mode(&self) -> &'static str {
        match self.ring {
            Ring::Untried => "untried",
            Ring::Unavailable => "pread",
            #[cfg(target_os = "linux")]
            Ring::Ready(_) => "io_uring",
        }
    }

    /// Read every request; each request's `result` says how it went.
    pub fn read_all(&mut self, reqs: &mut [ReadRequest<'_>]) {
        if reqs.len() > 1 {
            #[cfg(target_os = "linux")]
            if let Some(ring) = self.ring() {
                if let Err(e) = submit_all(ring, reqs) {
                    // the ring itself failed (not a read): never use it again in this reader
                    eprintln!("stokehold: io_uring failed ({e}); reading with pread from now on");
                    self.ring = Ring::Unavailable;
                }
                return;
            }
        }
        for r in reqs {
            r.finish_with_pread(0);
        }
    }

    #[cfg(target_os = "linux")]
    fn ring(&mut self) -> Option<&mut io_uring::IoUring> {
        if matches!(self.ring, Ring::Untried) {
            let off = std::env::var("STOKEHOLD_IO_URING").is_ok_and(|v| v == "0");
            self.ring = match (off, io_uring::IoUring::new(RING_ENTRIES)) {
                (false, Ok(r)) => Ring::Ready(Box::new(r)),
                _ => Ring::Unavailable,
            };
        }
        match &mut self.ring {
            Ring::Ready(r) => Some(r),
            _ => None,
        }
    }
}

/// Submit the requests that have a file descriptor in rounds of at most [`RING_ENTRIES`], wait
/// for all of each round's completions, and finish the others (and short reads) with `read_at`.
/// `Err` only when the ring itself fails; every request's `result` is set in any case, and no
/// read is in flight when this returns.
#[cfg(target_os = "linux")]
fn submit_all(ring: &mut io_uring::IoUring, reqs: &mut [ReadRequest<'_>]) -> io::Result<()> {
    use io_uring::{opcode, types};
    let mut failure = None;
    let mut i = 0;
    while i < reqs.len() {
        // one round: up to RING_ENTRIES requests with a descriptor and a length the ring takes
        let mut pushed = 0usize;
        let first = i;
        while i < reqs.len() && pushed < RING_ENTRIES as usize {
            let r = &mut reqs[i];
            let fd = r.storage.raw_fd();
            match (fd, u32::try_from(r.buf.len()), failure.is_none()) {
                (Some(fd), Ok(len), true) if len > 0 => {
                    let entry = opcode::Read::new(types::Fd(fd), r.buf.as_mut_ptr(), len)
                        .offset(r.offset)
                        .build()
                        .user_data(i as u64);
                    // SAFETY: the descriptor belongs to `r.storage`, borrowed for this call; the
                    // buffer is `r.buf`, exclusively borrowed for this call and not moved; this
                    // function does not return before every entry pushed in this round has
                    // completed (the wait below), so neither outlives the read.
                    if unsafe { ring.submission().push(&entry) }.is_err() {
                        break; // the queue is full: the rest goes in the next round
                    }
                    r.result = Err(io::Error::other("not read yet"));
                    pushed += 1;
                }
                _ => r.finish_with_pread(0),
            }
            i += 1;
        }
        if pushed == 0 {
            continue;
        }
        // Submit and wait for this round's completions. Every pushed entry is in flight (or
        // still queued) until its completion is seen: wait for all of them whatever happens.
        let mut seen = 0usize;
        while seen < pushed {
            match ring.submit_and_wait(pushed - seen) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if seen == 0 && ring.submission().len() == pushed => {
                    // nothing was submitted: take the entries back by reading them here, and
                    // give the ring up (its queued entries are dropped with it)
                    for r in &mut reqs[first..i] {
                        if r.result.is_err() {
                            r.finish_with_pread(0);
                        }
                    }
                    return Err(e);
                }
                Err(e) => {
                    // submitted but the wait failed: keep waiting (the reads still complete);
                    // remember the ring is not to be trusted afterwards
                    failure.get_or_insert(e);
                    std::thread::yield_now();
                }
            }
            for cqe in ring.completion() {
                seen += 1;
                let k = cqe.user_data() as usize;
                let r = &mut reqs[k];
                let n = cqe.result();
                if n < 0 {
                    // a read the ring could not do (EAGAIN, EINVAL for this file, an I/O
                    // error): `read_at` gives the bytes, or the error a pread-only run reports
                    r.finish_with_pread(0);
                } else {
                    let n = n as usize;
                    r.result = Ok(());
                    if n < r.buf.len() {
                        // short: the end of the file, or the kernel cut it; finish with pread
                        r.finish_with_pread(n);
                    }
                }
            }
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{Memory, PreadFile};

    fn file(dir: &std::path::Path, name: &str, len: usize) -> (std::path::PathBuf, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
        let p = dir.join(name);
        std::fs::write(&p, &bytes).unwrap();
        (p, bytes)
    }

    /// Many ranges of two files and a memory backend, in one batch: each gets exactly its bytes;
    /// a range past the end gets `UnexpectedEof`, as `read_at` gives, and a short read at the
    /// end is never taken for the whole range. The same with io_uring and with pread.
    #[test]
    fn a_batch_reads_exactly_what_read_at_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let (pa, a) = file(tmp.path(), "a", 100_000);
        let (pb, b) = file(tmp.path(), "b", 5_000);
        let fa = PreadFile::open(&pa).unwrap();
        let fb = PreadFile::open(&pb).unwrap();
        let mem = Memory::new(b.clone());
        for off in [false, true] {
            let mut batch = ReadBatch::new();
            if off {
                batch.ring = Ring::Unavailable;
            }
            let ranges: Vec<(u8, u64, usize)> = (0..150)
                .map(|i| match i % 3 {
                    0 => (0, (i * 613 % 90_000) as u64, 1 + i * 37 % 9_000),
                    1 => (1, (i * 29 % 4_000) as u64, 1 + i % 900),
                    _ => (2, (i * 31 % 4_000) as u64, 1 + i % 800),
                })
                .chain([(1, 4_990, 20), (0, 99_999, 1), (1, 6_000, 1)])
                .collect();
            let mut bufs: Vec<Vec<u8>> = ranges.iter().map(|r| vec![0xEE; r.2]).collect();
            let mut reqs: Vec<ReadRequest<'_>> = ranges
                .iter()
                .zip(bufs.iter_mut())
                .map(|(&(f, o, _), buf)| {
                    let s: &dyn Storage = match f {
                        0 => &fa,
                        1 => &fb,
                        _ => &mem,
                    };
                    ReadRequest::new(s, o, buf)
                })
                .collect();
            batch.read_all(&mut reqs);
            let results: Vec<io::Result<()>> = reqs.into_iter().map(|r| r.result).collect();
            for (k, ((f, o, len), res)) in ranges.iter().zip(results).enumerate() {
                let src = if *f == 0 { &a } else { &b };
                let (o, len) = (*o as usize, *len);
                if o + len <= src.len() {
                    res.unwrap_or_else(|e| panic!("range {k}: {e}"));
                    assert_eq!(
                        &bufs[k][..],
                        &src[o..o + len],
                        "range {k} (pread only: {off})"
                    );
                } else {
                    assert_eq!(
                        res.unwrap_err().kind(),
                        io::ErrorKind::UnexpectedEof,
                        "range {k}"
                    );
                }
            }
            if off {
                assert_eq!(batch.mode(), "pread");
            } else {
                // io_uring where the kernel allows it (this test reads the same either way)
                eprintln!("batched reads by {}", batch.mode());
                assert_ne!(batch.mode(), "untried");
            }
        }
    }

    /// `read_if_cached` gives the bytes when they are in the page cache, says "not cached" (never
    /// wrong bytes) when they are not, and reads memory directly.
    #[test]
    fn read_if_cached_reads_cached_ranges_and_declines_the_others() {
        let tmp = tempfile::tempdir().unwrap();
        let (p, bytes) = file(tmp.path(), "c", 1 << 20);
        std::fs::File::open(&p).unwrap().sync_all().unwrap();
        let f = PreadFile::open(&p).unwrap();
        let mut buf = vec![0u8; 4096];
        f.read_at(8192, &mut buf).unwrap(); // now cached
        buf.fill(0);
        assert!(read_if_cached(&f, 8192, &mut buf).unwrap());
        assert_eq!(&buf[..], &bytes[8192..8192 + 4096]);
        // drop the file's pages; a range not cached is declined, or (where pages cannot be
        // dropped) read correctly
        let file = std::fs::File::open(&p).unwrap();
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
        buf.fill(0);
        if read_if_cached(&f, 512 << 10, &mut buf).unwrap() {
            assert_eq!(&buf[..], &bytes[512 << 10..(512 << 10) + 4096]);
        }
        // past the end: never "read"
        assert!(!read_if_cached(&f, (1 << 20) - 100, &mut buf).unwrap());
        let mem = Memory::new(bytes.clone());
        assert!(read_if_cached(&mem, 100, &mut buf).unwrap());
        assert_eq!(&buf[..], &bytes[100..100 + 4096]);
    }
}
