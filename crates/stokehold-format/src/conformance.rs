//! The conformance suite of the [`Storage`] contract: every backend (the local ones here, and
//! any later one, such as object storage) runs [`check_storage`] in its tests.

use std::io;
use std::path::Path;

use crate::storage::{DIRECT_ALIGN, Storage};

/// How a backend is opened on a file for the suite.
pub type Opener<'a> = &'a (dyn Fn(&Path) -> io::Result<Box<dyn Storage>> + Sync);

/// A reproducible byte pattern that differs at every offset within a 2^32-byte window (so that
/// a read from the wrong offset cannot pass).
fn pattern(len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ (i as u8))
        .collect()
}

/// A small deterministic generator (the suite must not depend on a random crate).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        if n == 0 { 0 } else { (self.0 >> 33) % n }
    }
}

fn fail(name: &str, what: impl std::fmt::Display) -> String {
    format!("storage {name:?}: {what}")
}

fn check_range(
    s: &dyn Storage,
    name: &str,
    data: &[u8],
    offset: u64,
    len: usize,
) -> Result<(), String> {
    let mut buf = vec![0xA5u8; len];
    s.read_at(offset, &mut buf)
        .map_err(|e| fail(name, format!("read_at({offset}, {len}): {e}")))?;
    let want = &data[offset as usize..offset as usize + len];
    if buf != want {
        return Err(fail(
            name,
            format!("read_at({offset}, {len}) returned other bytes"),
        ));
    }
    if let Some(sl) = s.slice(offset, len)
        && sl != want
    {
        return Err(fail(
            name,
            format!("slice({offset}, {len}) returned other bytes"),
        ));
    }
    Ok(())
}

fn expect_eof(s: &dyn Storage, name: &str, offset: u64, len: usize) -> Result<(), String> {
    let mut buf = vec![0u8; len];
    match s.read_at(offset, &mut buf) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
        Err(e) => {
            return Err(fail(
                name,
                format!("read_at({offset}, {len}) past the end: expected UnexpectedEof, got {e}"),
            ));
        }
        Ok(()) => {
            return Err(fail(
                name,
                format!("read_at({offset}, {len}) past the end succeeded"),
            ));
        }
    }
    if s.slice(offset, len).is_some() {
        return Err(fail(
            name,
            format!("slice({offset}, {len}) past the end returned bytes"),
        ));
    }
    Ok(())
}

/// Run the suite on files made in `dir` (sizes around the direct-I/O alignment, an empty file,
/// a multi-megabyte file): sizes, exact reads at every alignment, reads that end at the last byte,
/// reads past the end and overflowing ranges (errors, not panics or short reads), zero-copy slices
/// agreeing with reads, readahead hints with no visible effect, and concurrent readers.
pub fn check_storage(name: &str, dir: &Path, open: Opener<'_>) -> Result<(), String> {
    let a = DIRECT_ALIGN;
    for (i, len) in [0, 1, a - 1, a, a + 1, 3 * a + 17, 4 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len);
        let path = dir.join(format!("{name}-{i}.bin"));
        std::fs::write(&path, &data)
            .map_err(|e| fail(name, format!("writing the fixture: {e}")))?;
        let s = open(&path).map_err(|e| fail(name, format!("open {}: {e}", path.display())))?;
        let size = s.size().map_err(|e| fail(name, e))?;
        if size != len as u64 {
            return Err(fail(
                name,
                format!("size() is {size}, the file has {len} bytes"),
            ));
        }
        let n = len as u64;
        // edges
        check_range(&*s, name, &data, 0, 0)?;
        check_range(&*s, name, &data, n, 0)?;
        if len > 0 {
            check_range(&*s, name, &data, 0, len)?;
            check_range(&*s, name, &data, n - 1, 1)?;
            check_range(&*s, name, &data, 0, 1)?;
        }
        for o in [a as u64 - 1, a as u64, a as u64 + 1, 2 * a as u64 - 3] {
            if o + 5 <= n {
                check_range(&*s, name, &data, o, 5)?;
            }
        }
        expect_eof(&*s, name, n, 1)?;
        expect_eof(&*s, name, n.saturating_sub(1), 2)?;
        expect_eof(&*s, name, u64::MAX - 1, 4)?;
        expect_eof(&*s, name, n + (1 << 40), 8)?;
        // random ranges, with hints that must not change anything
        let mut r = Lcg(0x5eed ^ len as u64);
        for _ in 0..200 {
            if len == 0 {
                break;
            }
            let off = r.below(n);
            let l = r.below((n - off).min(3 * a as u64) + 1) as usize;
            if r.below(2) == 0 {
                s.will_need(off, l as u64);
            }
            check_range(&*s, name, &data, off, l)?;
        }
        s.will_need(0, n + 12345); // a hint past the end is harmless
        s.will_need(u64::MAX - 1, 10);
        // records announced together (overlapping, out of order, past the end) read the same,
        // whether each is read whole, in pieces or across several
        if n > 0 {
            let mut recs: Vec<(u64, u64)> = (0..16)
                .map(|_| {
                    let off = r.below(n);
                    (off, off + r.below((n - off).min(2 * a as u64) + 1))
                })
                .collect();
            recs.push((n.saturating_sub(3), n + 100));
            s.will_read(&recs);
            for &(start, end) in recs.iter().rev() {
                let end = end.min(n);
                let mid = start + (end - start) / 2;
                check_range(&*s, name, &data, start, (mid - start) as usize)?;
                check_range(&*s, name, &data, mid, (end - mid) as usize)?;
                check_range(&*s, name, &data, start, (end - start) as usize)?;
            }
        }
        // concurrent readers see the same bytes
        if len >= a {
            let s = &*s;
            let data = &data;
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..4u64)
                    .map(|t| {
                        scope.spawn(move || {
                            let mut r = Lcg(t);
                            for _ in 0..100 {
                                let off = r.below(n);
                                let l = r.below((n - off).min(2 * a as u64) + 1) as usize;
                                check_range(s, name, data, off, l)?;
                            }
                            Ok::<(), String>(())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .try_for_each(|h| h.join().map_err(|_| fail(name, "a reader panicked"))?)
            })?;
        }
        drop(s);
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}
