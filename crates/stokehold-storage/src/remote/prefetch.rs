//! Order-aware prefetch from object storage: the engine knows which records the next batches
//! need ([`Storage::will_read`](stokehold_format::Storage::will_read)), so their byte ranges are requested
//! ahead, many at a time, on the I/O runtime (never on the decode threads), within a byte
//! budget; a read then takes its bytes from the ranges fetched ahead, waiting for one still in
//! flight, and asks the store itself only for what no range covers.
//!
//! - **Requests.** The records hinted for one object are sorted and coalesced into ranged GETs
//!   of at most [`MAX_GET`] bytes (a longer record is one GET of its own): neighbours at most
//!   [`GAP`] apart always, and up to [`DENSE_GAP`] apart while at most half of the GET is gap
//!   (see [`coalesce`]). A record hinted later inside a range held joins it (no new GET). At
//!   most `requests` GETs (storage option `prefetch_requests`, default [`DEFAULT_REQUESTS`]) are
//!   in flight per store; the others wait their turn in hint order.
//! - **Memory.** The bytes of every range fetched ahead and not yet read count against the
//!   store's budget (storage option `prefetch_bytes`, default [`DEFAULT_BUDGET`]). A range is
//!   dropped as soon as every record hinted in it was read; when a new range does not fit, the
//!   oldest finished ranges are dropped (counted as wasted bytes), and a range that still does
//!   not fit is not prefetched (its records are read when needed).
//! - **Correctness never depends on it.** A read copies from ranges that cover it and fetches the
//!   rest directly, in one request per uncovered piece; a prefetch that failed is re-read
//!   directly, so the error a read reports is that of its own request. Bytes are the same either
//!   way: the ranges are GETs of the same object, checked against its ETag.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::{Arc, Condvar, Mutex};

use super::PrefetchStats;
use super::RemoteObject;

/// A gap between two hinted records that is always fetched in one GET with them (the gap's
/// bytes are dropped unless a later hint asks for them while the range is held).
pub const GAP: u64 = 64 << 10;
/// Largest gap fetched when the hinted records are dense: a gap of up to this size joins a GET
/// as long as the GET's gaps stay within its hinted bytes (at most half of it gap).
pub const DENSE_GAP: u64 = 1 << 20;
/// Largest GET issued ahead (a record longer than this is one GET of its own).
pub const MAX_GET: u64 = 8 << 20;
/// Default of the `prefetch_bytes` storage option.
pub const DEFAULT_BUDGET: u64 = 512 << 20;
/// Default of the `prefetch_requests` storage option.
pub const DEFAULT_REQUESTS: usize = 64;

/// How many of `recs` (sorted byte ranges, at least one) go into the GET that starts with the
/// first, and where that GET ends: neighbours at most [`GAP`] apart always, up to [`DENSE_GAP`] apart while the gaps
/// fetched stay within the hinted bytes, and the whole GET within [`MAX_GET`] bytes.
///
/// Dense hints (a shard-block order announces a large part of a shard at a time) thus become
/// few GETs of several MiB, whose gaps the next batches' hints usually fill while the range is
/// held; sparse ones (a global shuffle of a large dataset) stay one GET per record, not fetching
/// megabytes for one record.
fn coalesce(recs: &[(u64, u64)]) -> (usize, u64) {
    let (start, mut end) = recs[0];
    let (mut hinted, mut gaps) = (end - start, 0u64);
    let mut j = 1;
    while j < recs.len() {
        let (s, e) = recs[j];
        let gap = s.saturating_sub(end);
        let new_end = end.max(e);
        let ok = new_end - start <= MAX_GET
            && (gap <= GAP || (gap <= DENSE_GAP && gaps + gap <= hinted + (e - s)));
        if !ok {
            break;
        }
        // overlapping records add only what lies past the current end
        hinted += new_end - end.max(s);
        gaps += gap;
        end = new_end;
        j += 1;
    }
    (j, end)
}

/// The outcome of one GET issued ahead, filled by the I/O runtime (the buffer it was read into,
/// shared as it is: no copy).
#[derive(Debug, Default)]
struct Slot {
    /// `Some(None)`: the GET failed (the read asks again itself, and reports its own error).
    done: Mutex<Option<Option<Arc<Vec<u8>>>>>,
    ready: Condvar,
}

impl Slot {
    fn fill(&self, r: Option<Arc<Vec<u8>>>) {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.ready.notify_all();
    }

    /// Wait for the GET; its bytes, or `None` when it failed.
    fn wait(&self) -> Option<Arc<Vec<u8>>> {
        let mut g = self.done.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = g.as_ref() {
                return r.clone();
            }
            g = self.ready.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn finished(&self) -> bool {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// One range fetched ahead: `start..end` of one object.
#[derive(Debug)]
struct Range {
    end: u64,
    /// Hinted records not yet read: (start, end).
    pending: Vec<(u64, u64)>,
    slot: Arc<Slot>,
    /// Order of issue (for dropping the oldest first).
    seq: u64,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes of the ranges held.
    used: u64,
    seq: u64,
    /// (object id, start) → range.
    ranges: BTreeMap<(u64, u64), Range>,
    /// (seq, object id, start) of the ranges held, oldest first (may name dropped ones).
    order: VecDeque<(u64, u64, u64)>,
}

/// The prefetcher of one store, shared by its objects.
#[derive(Debug)]
pub struct Prefetcher {
    budget: u64,
    permits: Arc<tokio::sync::Semaphore>,
    state: Mutex<State>,
    stats: Mutex<PrefetchStats>,
}

impl Prefetcher {
    pub fn new(budget: u64, requests: usize) -> Prefetcher {
        Prefetcher {
            budget,
            permits: Arc::new(tokio::sync::Semaphore::new(requests.max(1))),
            state: Mutex::new(State::default()),
            stats: Mutex::new(PrefetchStats::default()),
        }
    }

    pub fn stats(&self) -> PrefetchStats {
        *self.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut PrefetchStats)) {
        f(&mut self.stats.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Issue GETs for `records` (byte ranges `(start, end)` of `obj`) not already fetched ahead.
    pub fn hint(&self, obj: &RemoteObject, records: &[(u64, u64)]) {
        if self.budget == 0 {
            return;
        }
        let mut recs: Vec<(u64, u64)> = records
            .iter()
            .copied()
            .filter(|&(s, e)| s < e && e <= obj.size)
            .collect();
        recs.sort_unstable();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // records inside a range held are not asked for again: they join its records
        recs.retain(|&(s, e)| match covering(&state, obj.id, s, e) {
            Some(start) => {
                if let Some(r) = state.ranges.get_mut(&(obj.id, start))
                    && !r.pending.contains(&(s, e))
                {
                    r.pending.push((s, e));
                }
                false
            }
            None => true,
        });
        let mut i = 0;
        while i < recs.len() {
            let start = recs[i].0;
            let (n, end) = coalesce(&recs[i..]);
            let j = i + n;
            let len = end - start;
            if !self.make_room(&mut state, len) {
                self.count(|s| s.refused += 1);
                i = j;
                continue;
            }
            let slot = Arc::new(Slot::default());
            state.seq += 1;
            let seq = state.seq;
            state.used += len;
            state.order.push_back((seq, obj.id, start));
            state.ranges.insert(
                (obj.id, start),
                Range {
                    end,
                    pending: recs[i..j].to_vec(),
                    slot: slot.clone(),
                    seq,
                },
            );
            self.count(|s| {
                s.requests += 1;
                s.bytes += len;
            });
            self.spawn(obj, start, len, slot);
            i = j;
        }
    }

    /// Drop the oldest finished ranges until `len` more bytes fit; false when they cannot.
    fn make_room(&self, state: &mut State, len: u64) -> bool {
        let mut kept = VecDeque::new();
        while state.used + len > self.budget {
            let Some((seq, id, start)) = state.order.pop_front() else {
                break;
            };
            let Some(r) = state.ranges.get(&(id, start)) else {
                continue; // already read and dropped
            };
            if r.seq != seq {
                continue; // a later range at the same place
            }
            if !r.slot.finished() {
                kept.push_back((seq, id, start));
                continue;
            }
            let r = state.ranges.remove(&(id, start)).expect("present");
            let wasted: u64 = r.pending.iter().map(|(s, e)| e - s).sum();
            state.used -= r.end - start;
            self.count(|s| s.wasted_bytes += wasted);
        }
        while let Some(k) = kept.pop_back() {
            state.order.push_front(k);
        }
        state.used + len <= self.budget
    }

    fn spawn(&self, obj: &RemoteObject, start: u64, len: u64, slot: Arc<Slot>) {
        let obj = obj.clone_for_fetch();
        let permits = self.permits.clone();
        let failed = slot.clone();
        let task = async move {
            let _permit = permits.acquire_owned().await;
            // `len` is at most MAX_GET or one record's length within the object's size
            let mut buf = vec![0u8; len as usize];
            let r = obj.fetch(start, &mut buf).await;
            slot.fill(r.ok().map(|()| Arc::new(buf)));
        };
        match super::runtime() {
            Ok(rt) => {
                rt.spawn(task);
            }
            // no runtime: the range fails at once (a read waiting on it must not wait forever);
            // the read's own request then reports the error
            Err(_) => failed.fill(None),
        }
    }

    /// Fill `buf` from `offset` of `obj`: from the ranges fetched ahead that cover it (waiting for
    /// those in flight), the rest with requests of their own through `direct`.
    pub fn read(
        &self,
        obj: &RemoteObject,
        offset: u64,
        buf: &mut [u8],
        direct: impl FnOnce(&[(u64, usize)], &mut [u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        // the pieces covered by ranges held: (piece start, piece end, range start, slot)
        let mut pieces: Vec<(u64, u64, u64, Arc<Slot>)> = Vec::new();
        {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<u64> = state
                .ranges
                .range((obj.id, 0)..(obj.id, end))
                .filter(|(_, r)| r.end > offset)
                .map(|(k, _)| k.1)
                .collect();
            for start in keys {
                let r = state.ranges.get_mut(&(obj.id, start)).expect("listed");
                pieces.push((start.max(offset), r.end.min(end), start, r.slot.clone()));
                r.pending.retain(|&(s, e)| e <= offset || s >= end);
                if r.pending.is_empty() {
                    let r = state.ranges.remove(&(obj.id, start)).expect("listed");
                    state.used -= r.end - start;
                }
            }
        }
        let mut gaps: Vec<(u64, usize)> = Vec::new();
        let mut at = offset;
        for (s, e, rstart, slot) in &pieces {
            if *s > at {
                gaps.push((at, (*s - at) as usize));
            }
            match slot.wait() {
                Some(bytes) => {
                    let from = (*s - rstart) as usize;
                    let n = (*e - *s) as usize;
                    buf[(*s - offset) as usize..(*e - offset) as usize]
                        .copy_from_slice(&bytes[from..from + n]);
                }
                None => gaps.push((*s, (*e - *s) as usize)),
            }
            at = at.max(*e);
        }
        if at < end {
            gaps.push((at, (end - at) as usize));
        }
        // ranges held may overlap (a later hint's span around an earlier one): the pieces that
        // failed can overlap too, so the gaps are merged into disjoint, sorted pieces
        gaps.sort_unstable();
        let mut merged: Vec<(u64, usize)> = Vec::with_capacity(gaps.len());
        for (s, n) in gaps {
            match merged.last_mut() {
                Some((ms, mn)) if s <= *ms + *mn as u64 => {
                    *mn = (*mn).max((s + n as u64 - *ms) as usize);
                }
                _ => merged.push((s, n)),
            }
        }
        let gaps = merged;
        if gaps.is_empty() {
            self.count(|s| s.hits += 1);
            return Ok(());
        }
        self.count(|s| s.misses += 1);
        direct(&gaps, buf)
    }
}

/// The start of a range of object `id` holding all of `s..e`.
fn covering(state: &State, id: u64, s: u64, e: u64) -> Option<u64> {
    let (k, r) = state.ranges.range((id, 0)..=(id, s)).next_back()?;
    (r.end >= e).then_some(k.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` records of `len` bytes, one every `stride` bytes from 0.
    fn every(n: u64, stride: u64, len: u64) -> Vec<(u64, u64)> {
        (0..n).map(|i| (i * stride, i * stride + len)).collect()
    }

    #[test]
    fn near_neighbours_always_share_a_get() {
        // gaps of GAP exactly, records far smaller than their gaps: still one GET
        let recs = every(10, 1_000 + GAP, 1_000);
        assert_eq!(coalesce(&recs).0, 10);
        // one byte more than GAP, sparse: each record its own GET
        let recs = every(10, 1_001 + GAP, 1_000);
        assert_eq!(coalesce(&recs).0, 1);
    }

    #[test]
    fn dense_hints_share_gets_across_larger_gaps_while_half_is_hinted() {
        // 100 KB records 100 KB apart (half of the span hinted): one GET of at most MAX_GET
        let recs = every(200, 200_000, 100_000);
        let n = coalesce(&recs).0;
        let span = recs[n - 1].1 - recs[0].0;
        assert!(n > 1 && span <= MAX_GET, "{n} records, {span} bytes");
        assert!(recs[n].1 - recs[0].0 > MAX_GET, "stopped early at {n}");
        // 100 KB records with gaps of 150 KB: three records (300 KB hinted, 300 KB of gaps),
        // a fourth would make the GET more gap than records
        let recs = every(20, 250_000, 100_000);
        assert_eq!(coalesce(&recs).0, 3);
        // gaps of 210 KB: the first gap is already more than the two records
        let recs = every(20, 310_000, 100_000);
        assert_eq!(coalesce(&recs).0, 1);
        // a gap over DENSE_GAP never joins, however large the records before it
        let recs = vec![
            (0, 4 << 20),
            ((4 << 20) + DENSE_GAP + 1, (5 << 20) + DENSE_GAP),
        ];
        assert_eq!(coalesce(&recs).0, 1);
        let recs = vec![(0, 4 << 20), ((4 << 20) + DENSE_GAP, (5 << 20) + DENSE_GAP)];
        assert_eq!(coalesce(&recs).0, 2);
    }

    #[test]
    fn the_gap_allowance_is_cumulative() {
        // a first large record earns room for gaps; after that, gaps must be paid for by
        // records again: 300 KB hinted, then 200 KB gap + 10 KB, 200 KB gap + 10 KB (gaps 400 KB
        // > hinted 320 KB: the second is refused)
        let recs = vec![(0, 300_000), (500_000, 510_000), (710_000, 720_000)];
        assert_eq!(coalesce(&recs).0, 2);
        // overlapping and nested records count once; the GET ends at the furthest end, not
        // at the last record's
        let recs = vec![(0, 100_000), (50_000, 80_000), (60_000, 150_000)];
        assert_eq!(coalesce(&recs), (3, 150_000));
        let recs = vec![(0, 100_000), (10_000, 20_000)];
        assert_eq!(coalesce(&recs), (2, 100_000));
    }
}
