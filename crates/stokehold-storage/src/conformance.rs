//! The conformance suites of the storage contracts, which every backend runs in its tests:
//! [`check_storage`] for the data plane ([`Storage`]: the local files, memory, object storage,
//! the engine's shard cache) and [`check_location`] for the control plane ([`Location`]: reads
//! and writes of a local directory, memory, an object-store prefix).

use std::io::{self, Write};
use std::path::Path;

use crate::file::{Access, DIRECT_ALIGN};
use crate::location::{Location, ObjectMeta, RangeRead};
use stokehold_format::Storage;

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

/// What a backend did against the contract: which backend (a [`Storage`] or a [`Location`]), and
/// the call and its result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name:?}: {what}")]
pub struct Nonconforming {
    /// "storage" or "location".
    pub kind: &'static str,
    /// The backend's label.
    pub name: String,
    /// The call and what it did.
    pub what: String,
}

fn fail(name: &str, what: impl std::fmt::Display) -> Nonconforming {
    Nonconforming {
        kind: "storage",
        name: name.into(),
        what: what.to_string(),
    }
}

fn check_range(
    s: &dyn Storage,
    name: &str,
    data: &[u8],
    offset: u64,
    len: usize,
) -> Result<(), Nonconforming> {
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

fn expect_eof(s: &dyn Storage, name: &str, offset: u64, len: usize) -> Result<(), Nonconforming> {
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
pub fn check_storage(name: &str, dir: &Path, open: Opener<'_>) -> Result<(), Nonconforming> {
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
                            Ok::<(), Nonconforming>(())
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

fn lfail(name: &str, what: impl std::fmt::Display) -> Nonconforming {
    Nonconforming {
        kind: "location",
        name: name.into(),
        what: what.to_string(),
    }
}

fn read_one(
    loc: &dyn Location,
    name: &str,
    meta: &ObjectMeta,
    offset: u64,
    len: u64,
) -> io::Result<Vec<u8>> {
    let read = RangeRead {
        name,
        meta,
        offset,
        len,
    };
    loc.read_ranges(&[read])
        .pop()
        .unwrap_or_else(|| Err(io::Error::other("read_ranges returned nothing")))
}

fn head_of(loc: &dyn Location, label: &str, name: &str) -> Result<ObjectMeta, Nonconforming> {
    loc.head(name)
        .map_err(|e| lfail(label, format!("head({name:?}): {e}")))
}

/// Check a [`Location`] against the contract, on `loc`, which must be empty (a fresh directory,
/// memory, or prefix); `label` names it in failures. Reads: `head` (size; `NotFound` for a
/// missing object), batches of ranges over several objects in one call (in order, empty ranges,
/// a range past the end is `UnexpectedEof`), `open_storage` reading the same bytes. Writes:
/// `put` (whole, replacing, a new version), `put_if_absent` (only once), `writer` (the object
/// appears only at `finish`; dropped unfinished it leaves nothing), `delete` (a missing object
/// too), and `list` showing exactly the objects with their sizes.
pub fn check_location(label: &str, loc: &dyn Location) -> Result<(), Nonconforming> {
    let listed = loc.list().map_err(|e| lfail(label, format!("list: {e}")))?;
    if !listed.is_empty() {
        return Err(lfail(label, format!("not empty: {:?}", listed.keys())));
    }
    match loc.head("missing.bin") {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        other => {
            return Err(lfail(
                label,
                format!("head of a missing object: {other:?}, not NotFound"),
            ));
        }
    }
    // put, head, batches of ranges over two objects
    let a = pattern(300_000);
    let b: Vec<u8> = pattern(1_000).iter().map(|x| x ^ 0x5A).collect();
    loc.put("a.bin", &a)
        .map_err(|e| lfail(label, format!("put: {e}")))?;
    loc.put("b.bin", &b)
        .map_err(|e| lfail(label, format!("put: {e}")))?;
    let (ma, mb) = (head_of(loc, label, "a.bin")?, head_of(loc, label, "b.bin")?);
    if ma.size != a.len() as u64 || mb.size != b.len() as u64 {
        return Err(lfail(label, format!("sizes {} and {}", ma.size, mb.size)));
    }
    if loc
        .head_many(&["b.bin", "a.bin"])
        .into_iter()
        .map(|m| m.ok())
        .collect::<Vec<_>>()
        != [Some(mb.clone()), Some(ma.clone())]
    {
        return Err(lfail(label, "head_many differs from head"));
    }
    let ranges = [
        ("a.bin", &ma, 0u64, 16u64),
        ("b.bin", &mb, 990, 10),
        ("a.bin", &ma, 299_936, 64),
        ("a.bin", &ma, 77_777, 100_000),
        ("b.bin", &mb, 1_000, 0),
    ];
    let batch: Vec<RangeRead<'_>> = ranges
        .iter()
        .map(|&(name, meta, offset, len)| RangeRead {
            name,
            meta,
            offset,
            len,
        })
        .collect();
    let got = loc.read_ranges(&batch);
    if got.len() != ranges.len() {
        return Err(lfail(label, "read_ranges gave another number of results"));
    }
    for ((name, _, offset, len), got) in ranges.iter().zip(got) {
        let data = if *name == "a.bin" { &a } else { &b };
        let got = got.map_err(|e| lfail(label, format!("read {name} {offset}+{len}: {e}")))?;
        if got[..] != data[*offset as usize..(*offset + *len) as usize] {
            return Err(lfail(
                label,
                format!("read {name} {offset}+{len}: other bytes"),
            ));
        }
    }
    match read_one(loc, "b.bin", &mb, 995, 10) {
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
        other => {
            return Err(lfail(
                label,
                format!(
                    "a range past the end: {:?}, not UnexpectedEof",
                    other.map(|v| v.len())
                ),
            ));
        }
    }
    let s = loc
        .open_storage("a.bin", &ma, Access::Pread, false)
        .map_err(|e| lfail(label, format!("open_storage: {e}")))?;
    check_range(&*s, label, &a, 123_457, 4_096)?;
    // a replacement is whole, and a new version
    let a2 = pattern(5_000);
    loc.put("a.bin", &a2)
        .map_err(|e| lfail(label, format!("put again: {e}")))?;
    let ma2 = head_of(loc, label, "a.bin")?;
    if ma2.size != a2.len() as u64 {
        return Err(lfail(label, format!("replaced: size {}", ma2.size)));
    }
    if ma2.version.is_some() && ma2.version == ma.version {
        return Err(lfail(label, "a replaced object kept its version"));
    }
    if read_one(loc, "a.bin", &ma2, 0, a2.len() as u64)
        .ok()
        .as_deref()
        != Some(&a2[..])
    {
        return Err(lfail(label, "a replaced object reads other bytes"));
    }
    // conditional create
    let c = b"first".to_vec();
    match (
        loc.put_if_absent("c.bin", &c),
        loc.put_if_absent("c.bin", b"second"),
    ) {
        (Ok(true), Ok(false)) => {}
        other => return Err(lfail(label, format!("put_if_absent twice: {other:?}"))),
    }
    let mc = head_of(loc, label, "c.bin")?;
    if read_one(loc, "c.bin", &mc, 0, mc.size).ok() != Some(c.clone()) {
        return Err(lfail(label, "put_if_absent replaced the first object"));
    }
    // streamed writes appear at finish only; an unfinished one leaves nothing
    let d = pattern(2_500_000);
    let mut w = loc
        .writer("d.bin")
        .map_err(|e| lfail(label, format!("writer: {e}")))?;
    for piece in d.chunks(700_001) {
        w.write_all(piece)
            .map_err(|e| lfail(label, format!("write: {e}")))?;
    }
    if loc.head("d.bin").is_ok() {
        return Err(lfail(label, "a streamed object is visible before finish"));
    }
    w.finish()
        .map_err(|e| lfail(label, format!("finish: {e}")))?;
    let md = head_of(loc, label, "d.bin")?;
    if read_one(loc, "d.bin", &md, 0, md.size).ok().as_deref() != Some(&d[..]) {
        return Err(lfail(label, "a streamed object reads other bytes"));
    }
    let mut dropped = loc
        .writer("e.bin")
        .map_err(|e| lfail(label, format!("writer: {e}")))?;
    dropped
        .write_all(&d[..10_000])
        .map_err(|e| lfail(label, format!("write: {e}")))?;
    drop(dropped);
    // delete, list
    loc.delete("b.bin")
        .map_err(|e| lfail(label, format!("delete: {e}")))?;
    loc.delete("never-was.bin")
        .map_err(|e| lfail(label, format!("delete of a missing object: {e}")))?;
    let listed: Vec<(String, u64)> = loc
        .list()
        .map_err(|e| lfail(label, format!("list: {e}")))?
        .into_iter()
        .map(|(n, m)| (n, m.size))
        .collect();
    let want = vec![
        ("a.bin".to_string(), a2.len() as u64),
        ("c.bin".to_string(), c.len() as u64),
        ("d.bin".to_string(), d.len() as u64),
    ];
    if listed != want {
        return Err(lfail(label, format!("list: {listed:?}, expected {want:?}")));
    }
    Ok(())
}
