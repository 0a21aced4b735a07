//! Fetching the record bytes of a task (a few consecutive slots of a batch), order-aware:
//!
//! - bytes already in memory (a map, memory, the RAM cache) are borrowed, not read;
//! - the other records of the task are sorted by position in their shard, and neighbours (gaps of
//!   at most [`MAX_GAP`]) are coalesced into one positional read of at most [`MAX_RUN`] bytes, so
//!   a sequential or shard-block order reads in large requests;
//! - [`hint`] tells storage which records a batch a few steps ahead will need (readahead), since
//!   the sampler knows the order in advance.
//!
//! A failed coalesced read falls back to one read per record, so that an error names the exact
//! record.

use std::ops::Range;

use stokehold_format::{Dataset, FormatError};

use crate::cache::RecordCache;

/// Largest gap between two records read in one request (the gap's bytes are read and dropped).
pub const MAX_GAP: u64 = stokehold_format::storage::HINT_GAP;
/// Largest single coalesced read.
pub const MAX_RUN: u64 = 8 << 20;
/// With direct I/O, runs are cut at this size so that their pieces are read in parallel lanes
/// (the device sees several requests at once, as the kernel's readahead would give buffered
/// reads).
pub const MAX_DIRECT_RUN: u64 = 1 << 20;

/// Requests a task keeps in flight at once with direct I/O (which has no kernel readahead to
/// overlap requests): fast devices need many to reach their throughput.
pub const IO_DEPTH: usize = 8;

/// One coalesced read: records `records` of the sorted pending list, from shard `shard` at
/// `offset`, into `buf[base..base + len]`.
#[derive(Debug)]
struct Run {
    records: Range<usize>,
    shard: usize,
    offset: u64,
    base: usize,
    len: usize,
}

/// Read `runs` with up to [`IO_DEPTH`] requests in flight (scoped threads, each taking every
/// `IO_DEPTH`-th run); whether each succeeded.
fn read_parallel(ds: &Dataset, runs: &[Run], buf: &mut [u8]) -> Vec<bool> {
    // split the buffer into the runs' disjoint slices (runs are laid out in order)
    let mut slices: Vec<(usize, &mut [u8])> = Vec::with_capacity(runs.len());
    let mut rest = buf;
    for (j, r) in runs.iter().enumerate() {
        let (head, tail) = rest.split_at_mut(r.len);
        slices.push((j, head));
        rest = tail;
    }
    let lanes = IO_DEPTH.min(runs.len());
    let mut groups: Vec<Vec<(usize, &mut [u8])>> = (0..lanes).map(|_| Vec::new()).collect();
    for (n, item) in slices.into_iter().enumerate() {
        groups[n % lanes].push(item);
    }
    let mut ok = vec![false; runs.len()];
    std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|group| {
                scope.spawn(move || {
                    group
                        .into_iter()
                        .map(|(j, dst)| {
                            let r = &runs[j];
                            (
                                j,
                                ds.shards()[r.shard].source().read_at(r.offset, dst).is_ok(),
                            )
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            // a lane that panicked leaves its runs marked failed: they are read again one by one
            if let Ok(done) = h.join() {
                for (j, good) in done {
                    ok[j] = good;
                }
            }
        }
    });
    ok
}

fn max_run(ds: &Dataset, k: usize) -> u64 {
    if ds.shards()[k].source().kind() == "direct" {
        MAX_DIRECT_RUN
    } else {
        MAX_RUN
    }
}

/// Largest gap coalesced in a task's read. Object storage: none (records side by side only): the
/// bytes come from ranges fetched ahead, which count each hinted record read by the read that
/// covers it, so a read must not cover another task's record in a gap.
fn max_gap(ds: &Dataset, k: usize) -> u64 {
    if ds.shards()[k].source().kind() == "remote" {
        0
    } else {
        MAX_GAP
    }
}

/// Where one slot's record bytes are.
#[derive(Debug)]
enum Src {
    /// Borrowed from memory (map, memory source or RAM cache): shard, record.
    Memory,
    /// In the task buffer.
    Buffer(Range<usize>),
    /// Failed.
    Failed(FormatError),
}

/// The record bytes of one task.
#[derive(Debug, Default)]
pub struct TaskBytes {
    buf: Vec<u8>,
    slots: Vec<(usize, u64, Src)>,
    pending: Vec<(usize, usize, u64, u64, u32)>,
    /// Bytes fetched from storage by the last [`TaskBytes::fetch`] (not from memory).
    pub read_bytes: u64,
    /// Storage requests made by the last fetch.
    pub requests: u64,
}

/// The record bytes of shard `k`, record `local`, from memory (a map, memory source or the RAM
/// cache), checked when `verify` is set.
fn from_memory<'a>(
    ds: &'a Dataset,
    cache: Option<&'a RecordCache>,
    k: usize,
    local: u64,
    touch: bool,
) -> Option<&'a [u8]> {
    let shard = &ds.shards()[k];
    if let Some(s) = shard.record_slice(local) {
        return Some(s);
    }
    let c = cache?;
    let bytes = if touch { c.shard(ds, k)? } else { c.peek(k)? };
    let e = shard.entry(local);
    let start = usize::try_from(e.offset).ok()?;
    bytes.get(start..start.checked_add(e.len as usize)?)
}

impl TaskBytes {
    /// Locate and fetch the records of `ids` (one per slot).
    pub fn fetch(&mut self, ds: &Dataset, cache: Option<&RecordCache>, ids: &[u64]) {
        self.slots.clear();
        self.pending.clear();
        self.read_bytes = 0;
        self.requests = 0;
        let mut hits = 0;
        for (i, &id) in ids.iter().enumerate() {
            match ds.locate(id) {
                Err(e) => self.slots.push((0, 0, Src::Failed(e))),
                Ok((k, local)) => {
                    if from_memory(ds, cache, k, local, true).is_some() {
                        hits += 1;
                        self.slots.push((k, local, Src::Memory));
                    } else {
                        let e = ds.shards()[k].entry(local);
                        self.pending.push((i, k, local, e.offset, e.len));
                        self.slots.push((k, local, Src::Buffer(0..0)));
                    }
                }
            }
        }
        if let Some(c) = cache {
            c.count(hits, self.pending.len() as u64);
        }
        if self.pending.is_empty() {
            return;
        }
        self.pending.sort_by_key(|&(_, k, _, off, _)| (k, off));
        // runs: [start, end) of `pending`, same shard, small gaps, bounded size
        let mut runs: Vec<Run> = Vec::new();
        let mut total = 0usize;
        let mut start = 0;
        while start < self.pending.len() {
            let (_, k, _, first, len) = self.pending[start];
            let mut last_end = first + u64::from(len);
            let mut end = start + 1;
            while end < self.pending.len() {
                let (_, k2, _, off, len2) = self.pending[end];
                let new_end = off + u64::from(len2);
                if k2 != k
                    || off < last_end
                    || off - last_end > max_gap(ds, k)
                    || new_end - first > max_run(ds, k)
                {
                    break;
                }
                last_end = new_end;
                end += 1;
            }
            let len = (last_end - first) as usize; // within one shard: checked at open
            runs.push(Run {
                records: start..end,
                shard: k,
                offset: first,
                base: total,
                len,
            });
            total += len;
            start = end;
        }
        // not cleared first: the reads overwrite the old bytes, so only what the buffer grows by
        // is zeroed (zeroing a whole batch's records each time was ~1% of a crop pipeline's
        // instructions)
        self.buf.resize(total, 0);
        self.requests += runs.len() as u64;
        let parallel = runs.len() > 1
            && runs
                .iter()
                .any(|r| ds.shards()[r.shard].source().kind() == "direct");
        let ok = if parallel {
            read_parallel(ds, &runs, &mut self.buf)
        } else {
            runs.iter()
                .map(|r| {
                    ds.shards()[r.shard]
                        .source()
                        .read_at(r.offset, &mut self.buf[r.base..r.base + r.len])
                        .is_ok()
                })
                .collect()
        };
        for (r, ok) in runs.iter().zip(ok) {
            if ok {
                self.read_bytes += r.len as u64;
                for &(i, _, _, off, l) in &self.pending[r.records.clone()] {
                    let s = r.base + (off - r.offset) as usize;
                    self.slots[i].2 = Src::Buffer(s..s + l as usize);
                }
            } else {
                self.read_each(ds, r);
            }
        }
    }

    /// After a failed read of a run: one read per record, so that an error says which one.
    fn read_each(&mut self, ds: &Dataset, r: &Run) {
        let shard = &ds.shards()[r.shard];
        let mut one = Vec::new();
        for &(i, _, local, _, _) in &self.pending[r.records.clone()] {
            self.requests += 1;
            match shard.read_record(local, &mut one, false) {
                Ok(()) => {
                    let s = self.buf.len();
                    self.buf.extend_from_slice(&one);
                    self.read_bytes += one.len() as u64;
                    self.slots[i].2 = Src::Buffer(s..self.buf.len());
                }
                Err(e) => self.slots[i].2 = Src::Failed(e),
            }
        }
    }

    /// Slot `i`'s record: (shard, record in shard, bytes), checksummed when `verify` is set.
    pub fn get<'a>(
        &'a mut self,
        ds: &'a Dataset,
        cache: Option<&'a RecordCache>,
        i: usize,
        verify: bool,
    ) -> Result<(usize, u64, &'a [u8]), FormatError> {
        let (k, local, src) = &mut self.slots[i];
        let (k, local) = (*k, *local);
        let bytes = match src {
            Src::Failed(_) => {
                let Src::Failed(e) = std::mem::replace(src, Src::Memory) else {
                    unreachable!("matched above")
                };
                return Err(e);
            }
            Src::Memory => {
                from_memory(ds, cache, k, local, false).ok_or_else(|| FormatError::Corrupt {
                    path: ds.shards()[k].path().to_path_buf(),
                    what: ds.shards()[k].describe(local),
                    offset: ds.shards()[k].entry(local).offset,
                    detail: "record bytes vanished from memory".into(),
                })?
            }
            Src::Buffer(r) => &self.buf[r.clone()],
        };
        if verify {
            ds.shards()[k].check_record(local, bytes)?;
        }
        Ok((k, local, bytes))
    }
}

/// Readahead: tell storage that the records of `ids` will be read soon (coalescing neighbours
/// into one hint). Records in memory need no hint.
pub fn hint(
    ds: &Dataset,
    cache: Option<&RecordCache>,
    ids: &[u64],
    scratch: &mut Vec<(usize, u64, u64)>,
) {
    scratch.clear();
    for &id in ids {
        let Ok((k, local)) = ds.locate(id) else {
            continue;
        };
        if from_memory(ds, cache, k, local, false).is_some() {
            continue;
        }
        let e = ds.shards()[k].entry(local);
        scratch.push((k, e.offset, e.offset + u64::from(e.len)));
    }
    hint_ranges(ds, scratch);
}

/// Readahead of byte ranges `(shard, start, end)`, in the order they will be read: one
/// `Storage::will_read` per shard with its ranges (storage coalesces them, or fetches them ahead),
/// the shards in the order of their first range here, so that what is read first is asked for
/// first.
pub fn hint_ranges(ds: &Dataset, scratch: &mut [(usize, u64, u64)]) {
    let mut first: std::collections::HashMap<usize, usize> = std::collections::HashMap::new();
    for (i, &(k, _, _)) in scratch.iter().enumerate() {
        first.entry(k).or_insert(i);
    }
    scratch.sort_unstable_by_key(|&(k, s, e)| (first[&k], s, e));
    let mut records: Vec<(u64, u64)> = Vec::new();
    let mut i = 0;
    while i < scratch.len() {
        let k = scratch[i].0;
        records.clear();
        while i < scratch.len() && scratch[i].0 == k {
            records.push((scratch[i].1, scratch[i].2));
            i += 1;
        }
        ds.shards()[k].source().will_read(&records);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stokehold_format::{
        Access, DatasetWriteOptions, DatasetWriter, FieldValue, OpenOptions, Schema,
    };

    fn dataset(dir: &std::path::Path, access: Access) -> Dataset {
        let path = dir.join("ds");
        if !path.exists() {
            let schema = Schema::from_specs([("b", "bytes")]).unwrap();
            let opts = DatasetWriteOptions {
                target_shard_bytes: 64 << 10,
                ..DatasetWriteOptions::default()
            };
            let mut w = DatasetWriter::create(&path, schema, opts).unwrap();
            for i in 0..100u64 {
                let b: Vec<u8> = (0..(1000 + i * 7)).map(|k| (k ^ i) as u8).collect();
                w.write(&[FieldValue::Bytes(b.into())]).unwrap();
            }
            w.finish().unwrap();
        }
        Dataset::open_with(&path, OpenOptions::with_access(access)).unwrap()
    }

    fn expect(ds: &Dataset, id: u64) -> Vec<u8> {
        let mut v = Vec::new();
        ds.read_record(id, &mut v).unwrap();
        v
    }

    #[test]
    fn neighbours_are_read_in_one_request_and_every_slot_gets_its_record() {
        let tmp = tempfile::tempdir().unwrap();
        for access in [Access::Pread, Access::Direct] {
            let ds = dataset(tmp.path(), Access::Pread);
            let probe = ds.shards()[0].path().to_path_buf();
            if access == Access::Direct && !stokehold_format::storage::supports_direct(&probe) {
                continue;
            }
            let ds = dataset(tmp.path(), access);
            let mut tb = TaskBytes::default();
            let ids: Vec<u64> = (10..20).collect();
            tb.fetch(&ds, None, &ids);
            let (k0, _) = ds.locate(10).unwrap();
            let (k1, _) = ds.locate(19).unwrap();
            assert_eq!(
                tb.requests,
                1 + (k1 - k0) as u64,
                "one read per shard touched"
            );
            for (i, &id) in ids.iter().enumerate() {
                let (_, _, b) = tb.get(&ds, None, i, true).unwrap();
                assert_eq!(b, expect(&ds, id), "{access:?} slot {i}");
            }
            // scattered ids in any order (with direct I/O: read in parallel lanes), right bytes
            let ids = [90u64, 3, 55, 71, 20, 99, 0, 44, 63, 8];
            tb.fetch(&ds, None, &ids);
            let mut shards: Vec<usize> = ids.iter().map(|&i| ds.locate(i).unwrap().0).collect();
            shards.sort();
            shards.dedup();
            assert!(shards.len() > 1, "reads in several lanes");
            assert_eq!(
                tb.requests,
                shards.len() as u64,
                "gaps under 64 KiB are read through"
            );
            for (i, &id) in ids.iter().enumerate() {
                let (_, _, b) = tb.get(&ds, None, i, true).unwrap();
                assert_eq!(b, expect(&ds, id), "{access:?} slot {i}");
            }
        }
    }

    #[test]
    fn memory_sources_are_borrowed_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Memory);
        let mut tb = TaskBytes::default();
        tb.fetch(&ds, None, &[1, 2, 3]);
        assert_eq!((tb.requests, tb.read_bytes), (0, 0));
        assert_eq!(tb.get(&ds, None, 2, true).unwrap().2, expect(&ds, 3));
    }

    #[test]
    fn a_corrupt_or_missing_record_fails_alone_with_its_location() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = dataset(tmp.path(), Access::Pread);
        let (k, local) = ds.locate(12).unwrap();
        let shard = &ds.shards()[k];
        let e = shard.entry(local);
        let mut bytes = std::fs::read(shard.path()).unwrap();
        bytes[e.offset as usize + 3] ^= 1;
        std::fs::write(shard.path(), &bytes).unwrap();
        let mut tb = TaskBytes::default();
        tb.fetch(&ds, None, &[11, 12, 13, 1_000_000]);
        assert!(tb.get(&ds, None, 0, true).is_ok());
        let err = tb.get(&ds, None, 1, true).unwrap_err().to_string();
        assert!(
            err.contains("checksum") && err.contains("global sample 12"),
            "{err}"
        );
        assert!(tb.get(&ds, None, 2, true).is_ok());
        assert!(tb.get(&ds, None, 3, true).is_err(), "out of range id");
        // a truncated shard: the coalesced read fails, and per-record reads name the lost ones
        std::fs::write(shard.path(), &bytes[..e.offset as usize + 10]).unwrap();
        tb.fetch(&ds, None, &[11, 12, 13]);
        let err = tb.get(&ds, None, 1, false).unwrap_err().to_string();
        assert!(err.contains("global sample 12"), "{err}");
    }
}
