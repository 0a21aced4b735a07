//! In-process caches, shared by every loader of one process that reads the same data:
//!
//! - [`RecordCache`]: the bytes of whole shards in RAM, within a byte budget. A shard is loaded
//!   by one background thread with large sequential reads the first time any sample of it is
//!   asked for; until it is ready, samples are read from storage as usual. Shards that would
//!   pass the budget are never cached ("cache what fits"): with a random order, keeping a fixed
//!   subset resident beats any eviction policy, which would only thrash.
//! - [`DecodedCache`]: the output of an image pipeline's deterministic prefix (decode, then
//!   resize to a shorter side) per sample, within a byte budget; the random part of the pipeline
//!   starts from it. Both filled and warm paths give the same output, so results never depend on
//!   cache state. Optionally backed by a local directory ([`crate::cache::decoded_disk`]) that keeps the
//!   images across runs and processes.
//!
//! Caches are found through a process-wide registry by a key naming the dataset (its
//! fingerprint) and, for decoded caches, the prefix; a cache lives as long as a loader holds it.
//!
//! Under a node memory budget (`memory_budget="node:..."`), the caches of a loader also hold
//! what they keep from the node's budget ([`NodeShare`]): a lease grown in steps of
//! [`NODE_STEP`] as shards and images are kept, so a cache keeps only what the node has left.

pub mod decoded_disk;
mod decoded_image;
pub mod disk;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crossbeam_channel::{Sender, unbounded};
use stokehold_storage::Dataset;

use crate::cache::decoded_disk::DecodedDisk;
pub use crate::cache::decoded_image::DecodedImage;
pub use crate::stats::CacheStats;

/// Bytes a cache's lease of the node budget grows by at a time, at most (one lock of the
/// budget's directory per step, not per image); a 64th of the budget when that is less.
pub const NODE_STEP: u64 = 64 << 20;

/// What the caches of one loader hold from the node's memory budget: a lease, grown as they
/// keep more (never beyond what the other holders leave), released when the last cache using
/// it is dropped.
#[derive(Debug)]
pub struct NodeShare {
    budget: stokehold_storage::node_budget::NodeBudget,
    /// Bytes the caches keep under this share, and the lease covering them (none before the
    /// first byte).
    held: Mutex<(u64, Option<stokehold_storage::node_budget::Lease>)>,
}

impl NodeShare {
    /// A share of `budget`, holding nothing yet.
    pub fn new(budget: stokehold_storage::node_budget::NodeBudget) -> NodeShare {
        NodeShare {
            budget,
            held: Mutex::new((0, None)),
        }
    }

    /// Take `bytes` more from the node's budget; false (nothing taken) when the node has not
    /// that much left (or its directory cannot be used: then the cache keeps nothing more).
    pub fn take(&self, bytes: u64) -> bool {
        let mut g = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let (used, lease) = &mut *g;
        let need = used.saturating_add(bytes);
        let have = lease.as_ref().map_or(0, |l| l.bytes());
        if need > have {
            let step = (self.budget.total() / 64).clamp(1, NODE_STEP);
            let want = need.div_ceil(step).saturating_mul(step);
            let got = match lease {
                Some(l) => l.resize(&self.budget, want).unwrap_or(have),
                None => match self.budget.reserve(want, 0) {
                    Ok(Some(l)) => {
                        let b = l.bytes();
                        *lease = Some(l);
                        b
                    }
                    _ => 0,
                },
            };
            if got < need {
                return false;
            }
        }
        *used = need;
        true
    }

    /// Give back `bytes` taken (the lease keeps its size until dropped).
    pub fn give(&self, bytes: u64) {
        let mut g = self.held.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = g.0.saturating_sub(bytes);
    }

    /// Bytes the lease holds from the node's budget.
    pub fn leased(&self) -> u64 {
        let g = self.held.lock().unwrap_or_else(|p| p.into_inner());
        g.1.as_ref().map_or(0, |l| l.bytes())
    }
}

/// Find or make the cache registered under `key`.
fn shared<T: Send + Sync + 'static>(
    registry: &'static OnceLock<Mutex<HashMap<String, Weak<T>>>>,
    key: &str,
    make: impl FnOnce() -> Arc<T>,
) -> Arc<T> {
    try_shared(registry, key, || Ok::<_, std::convert::Infallible>(make()))
        .unwrap_or_else(|e| match e {})
}

/// Find the cache registered under `key`, or make it (which may fail).
fn try_shared<T: Send + Sync + 'static, E>(
    registry: &'static OnceLock<Mutex<HashMap<String, Weak<T>>>>,
    key: &str,
    make: impl FnOnce() -> std::result::Result<Arc<T>, E>,
) -> std::result::Result<Arc<T>, E> {
    let map = registry.get_or_init(|| Mutex::new(HashMap::new()));
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    m.retain(|_, w| w.strong_count() > 0);
    if let Some(c) = m.get(key).and_then(Weak::upgrade) {
        return Ok(c);
    }
    let c = make()?;
    m.insert(key.to_string(), Arc::downgrade(&c));
    Ok(c)
}

const UNTOUCHED: u8 = 0;
const LOADING: u8 = 1;
const READY: u8 = 2;
const NEVER: u8 = 3;

/// Whole shards in RAM, within a byte budget. See the module documentation.
#[derive(Debug)]
pub struct RecordCache {
    budget: u64,
    reserved: AtomicU64,
    held: AtomicU64,
    state: Vec<AtomicU8>,
    shards: Vec<OnceLock<Arc<[u8]>>>,
    loads: Mutex<Option<Sender<usize>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Shards ready; when it equals the shard count, every record is in memory.
    ready: AtomicUsize,
    /// The node budget's share its shards are also kept within, when one is set.
    node: OnceLock<Arc<NodeShare>>,
}

static RECORD_CACHES: OnceLock<Mutex<HashMap<String, Weak<RecordCache>>>> = OnceLock::new();

/// The registry key of a dataset: its directory and its fingerprint (two copies of the same
/// data at two paths get two caches, each with its own budget).
pub fn dataset_key(ds: &Dataset) -> String {
    format!("{}|{}", ds.dir().display(), crate::state::fingerprint(ds))
}

impl RecordCache {
    /// The record cache of `dataset` in this process (made with `budget` bytes when it does not
    /// exist yet; an existing one keeps its budget). `key` names the dataset (its fingerprint).
    pub fn shared(dataset: &Arc<Dataset>, key: &str, budget: u64) -> Arc<RecordCache> {
        shared(&RECORD_CACHES, key, || RecordCache::new(dataset, budget))
    }

    /// A cache of its own (not registered).
    pub fn new(dataset: &Arc<Dataset>, budget: u64) -> Arc<RecordCache> {
        let n = dataset.shards().len();
        let cache = Arc::new(RecordCache {
            budget,
            reserved: AtomicU64::new(0),
            held: AtomicU64::new(0),
            state: (0..n).map(|_| AtomicU8::new(UNTOUCHED)).collect(),
            shards: (0..n).map(|_| OnceLock::new()).collect(),
            loads: Mutex::new(None),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            ready: AtomicUsize::new(0),
            node: OnceLock::new(),
        });
        let (tx, rx) = unbounded::<usize>();
        let weak = Arc::downgrade(&cache);
        let ds = Arc::clone(dataset);
        let started = std::thread::Builder::new()
            .name("stokehold-cache".into())
            .spawn(move || {
                // Ends when the cache (the only sender's owner) is dropped.
                for k in rx {
                    let Some(cache) = weak.upgrade() else { return };
                    cache.load(&ds, k);
                }
            });
        if started.is_ok() {
            *cache.loads.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
        }
        cache
    }

    fn load(&self, ds: &Dataset, k: usize) {
        let shard = &ds.shards()[k];
        let len = shard.file_len();
        let mut bytes = vec![0u8; len as usize]; // the file's real size, reserved in the budget
        match shard.source().read_at(0, &mut bytes) {
            Ok(()) => {
                let _ = self.shards[k].set(Arc::from(bytes));
                self.held.fetch_add(len, Ordering::Relaxed);
                self.state[k].store(READY, Ordering::Release);
                self.ready.fetch_add(1, Ordering::Release);
            }
            Err(_) => {
                // Not cached; reads go to storage (and report the error with the record).
                self.reserved.fetch_sub(len, Ordering::Relaxed);
                if let Some(n) = self.node.get() {
                    n.give(len);
                }
                self.state[k].store(NEVER, Ordering::Release);
            }
        }
    }

    /// Shard `k`'s bytes when cached. The first miss on a shard queues its load when it fits in
    /// the budget. Counts nothing: callers count in bulk with [`RecordCache::count`].
    pub fn shard(&self, ds: &Dataset, k: usize) -> Option<&[u8]> {
        let st = self.state.get(k)?;
        match st.load(Ordering::Acquire) {
            READY => {
                return self.shards[k].get().map(|b| &b[..]);
            }
            UNTOUCHED
                if st
                    .compare_exchange(UNTOUCHED, LOADING, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok() =>
            {
                self.queue(ds, k);
            }
            _ => {}
        }
        None
    }

    /// Add lookups served (`hits`) and not served (`misses`) to the statistics.
    pub fn count(&self, hits: u64, misses: u64) {
        if hits > 0 {
            self.hits.fetch_add(hits, Ordering::Relaxed);
        }
        if misses > 0 {
            self.misses.fetch_add(misses, Ordering::Relaxed);
        }
    }

    /// Reserve shard `k`'s size in the budget and queue its load; when it does not fit (or the
    /// loading thread is gone), mark it as never cached.
    fn queue(&self, ds: &Dataset, k: usize) {
        let len = ds.shards()[k].file_len();
        let fits = self
            .reserved
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |r| {
                r.checked_add(len).filter(|&t| t <= self.budget)
            })
            .is_ok();
        // within the node's budget too, when one is shared
        let fits = fits && {
            let ok = self.node.get().is_none_or(|n| n.take(len));
            if !ok {
                self.reserved.fetch_sub(len, Ordering::Relaxed);
            }
            ok
        };
        let queued = fits
            && self
                .loads
                .lock()
                .ok()
                .and_then(|tx| tx.as_ref().map(|tx| tx.send(k).is_ok()))
                .unwrap_or(false);
        if !queued {
            if fits {
                self.reserved.fetch_sub(len, Ordering::Relaxed);
                if let Some(n) = self.node.get() {
                    n.give(len);
                }
            }
            self.state[k].store(NEVER, Ordering::Release);
        }
    }

    /// Keep what it holds within `share` of the node's budget too (from the next shard on; a
    /// cache already under a share, made by another loader of this process, keeps that one).
    pub fn under_node_budget(&self, share: &Arc<NodeShare>) {
        let _ = self.node.set(Arc::clone(share));
    }

    /// Whether every shard is in memory (then reads need no readahead hints).
    pub fn complete(&self) -> bool {
        self.ready.load(Ordering::Acquire) == self.state.len()
    }

    /// Shard `k`'s bytes when cached, counting nothing and queueing nothing.
    pub fn peek(&self, k: usize) -> Option<&[u8]> {
        if self.state.get(k)?.load(Ordering::Acquire) == READY {
            self.shards[k].get().map(|b| &b[..])
        } else {
            None
        }
    }

    /// Wait until every queued load has finished (tests and benchmarks that want a warm cache).
    pub fn wait_loaded(&self, timeout: Duration) -> bool {
        let start = std::time::Instant::now();
        loop {
            if self
                .state
                .iter()
                .all(|s| s.load(Ordering::Acquire) != LOADING)
            {
                return true;
            }
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// What it did.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            kind: "records".into(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes: self.held.load(Ordering::Relaxed),
            budget: self.budget,
            entries: self
                .state
                .iter()
                .filter(|s| s.load(Ordering::Relaxed) == READY)
                .count() as u64,
            saved: Duration::ZERO,
            shared: 0,
        }
    }
}

const DECODED_SHARDS: usize = 64;

/// Per-sample decoded images within a byte budget. See the module documentation.
#[derive(Debug)]
pub struct DecodedCache {
    budget: u64,
    held: AtomicU64,
    maps: Vec<Mutex<HashMap<u64, Arc<DecodedImage>>>>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Images computed (misses of RAM and disk alike), and the time their prefix took (to
    /// estimate what the hits saved).
    computed: AtomicU64,
    miss_ns: AtomicU64,
    /// The local directory behind the RAM, when on.
    disk: Option<DecodedDisk>,
    /// The node budget's share its images are also kept within, when one is set.
    node: OnceLock<Arc<NodeShare>>,
}

static DECODED_CACHES: OnceLock<Mutex<HashMap<String, Weak<DecodedCache>>>> = OnceLock::new();

impl DecodedCache {
    /// The decoded cache registered under `key` (dataset fingerprint + column + prefix) in this
    /// process, made with `budget` bytes when it does not exist yet.
    pub fn shared(key: &str, budget: u64) -> Arc<DecodedCache> {
        shared(&DECODED_CACHES, key, || Arc::new(DecodedCache::new(budget)))
    }

    /// [`shared`](Self::shared), backed by the directory of `disk_key` under `dir` (at most
    /// `limit` bytes) when the cache is made; see [`DecodedDisk`].
    pub fn shared_on_disk(
        key: &str,
        budget: u64,
        dir: &std::path::Path,
        disk_key: &str,
        limit: u64,
        keep_free: Option<u64>,
    ) -> crate::error::Result<Arc<DecodedCache>> {
        let registry_key = format!("{key}|{}", dir.display());
        try_shared(&DECODED_CACHES, &registry_key, || {
            let mut disk = DecodedDisk::open(dir, disk_key, limit)?;
            // the environment's floor, when set, overrides the option
            if disk.keep_free().is_none() {
                disk.set_keep_free(keep_free);
            }
            Ok(Arc::new(DecodedCache {
                disk: Some(disk),
                ..DecodedCache::new(budget)
            }))
        })
    }

    /// A cache of its own (not registered).
    pub fn new(budget: u64) -> DecodedCache {
        DecodedCache {
            budget,
            held: AtomicU64::new(0),
            maps: (0..DECODED_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            computed: AtomicU64::new(0),
            miss_ns: AtomicU64::new(0),
            disk: None,
            node: OnceLock::new(),
        }
    }

    /// Keep what it holds within `share` of the node's budget too (see
    /// [`RecordCache::under_node_budget`]).
    pub fn under_node_budget(&self, share: &Arc<NodeShare>) {
        let _ = self.node.set(Arc::clone(share));
    }

    fn give_node(&self, size: u64) {
        if let Some(n) = self.node.get() {
            n.give(size);
        }
    }

    fn map(&self, id: u64) -> &Mutex<HashMap<u64, Arc<DecodedImage>>> {
        &self.maps[(crate::rng::mix64(id) % DECODED_SHARDS as u64) as usize]
    }

    /// Sample `id`'s image when cached: in RAM, else in the directory (then kept in RAM too,
    /// within the budget).
    pub fn get(&self, id: u64) -> Option<Arc<DecodedImage>> {
        let hit = self.map(id).lock().ok().and_then(|m| m.get(&id).cloned());
        match &hit {
            Some(_) => self.hits.fetch_add(1, Ordering::Relaxed),
            None => self.misses.fetch_add(1, Ordering::Relaxed),
        };
        if hit.is_some() {
            return hit;
        }
        let image = Arc::new(self.disk.as_ref()?.get(id)?);
        self.keep(id, &image);
        Some(image)
    }

    /// Keep sample `id`'s image, just computed, when it fits in the budget (and in the
    /// directory); `took` is the time its prefix took. Returns whether RAM kept it.
    pub fn insert(&self, id: u64, image: DecodedImage, took: Duration) -> bool {
        self.computed.fetch_add(1, Ordering::Relaxed);
        self.miss_ns
            .fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
        if let Some(disk) = &self.disk {
            disk.put(id, &image);
        }
        self.keep(id, &Arc::new(image))
    }

    /// Publish what the directory holds so far (other processes and later runs see it).
    pub fn flush(&self) {
        if let Some(disk) = &self.disk {
            disk.flush();
        }
    }

    /// Keep `image` in RAM when it fits in the budget.
    fn keep(&self, id: u64, image: &Arc<DecodedImage>) -> bool {
        let size = image.data.len() as u64 + std::mem::size_of::<DecodedImage>() as u64;
        if self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| {
                h.checked_add(size).filter(|&t| t <= self.budget)
            })
            .is_err()
        {
            return false;
        }
        if self.node.get().is_some_and(|n| !n.take(size)) {
            self.held.fetch_sub(size, Ordering::Relaxed);
            return false;
        }
        let Ok(mut m) = self.map(id).lock() else {
            self.held.fetch_sub(size, Ordering::Relaxed);
            self.give_node(size);
            return false;
        };
        if m.insert(id, Arc::clone(image)).is_some() {
            // Another thread computed the same sample (the same bytes): count it once.
            self.held.fetch_sub(size, Ordering::Relaxed);
            self.give_node(size);
        }
        true
    }

    /// What it did: the RAM's figures, then the directory's when there is one.
    pub fn stats(&self) -> Vec<CacheStats> {
        let hits = self.hits.load(Ordering::Relaxed);
        let misses = self.misses.load(Ordering::Relaxed);
        let mean = self
            .miss_ns
            .load(Ordering::Relaxed)
            .checked_div(self.computed.load(Ordering::Relaxed))
            .unwrap_or(0);
        let mut all = vec![CacheStats {
            kind: "decoded".into(),
            hits,
            misses,
            bytes: self.held.load(Ordering::Relaxed),
            budget: self.budget,
            entries: self
                .maps
                .iter()
                .map(|m| m.lock().map_or(0, |m| m.len() as u64))
                .sum(),
            saved: Duration::from_nanos(mean.saturating_mul(hits)),
            shared: 0,
        }];
        if let Some(disk) = &self.disk {
            let mut d = disk.stats();
            d.saved = Duration::from_nanos(mean.saturating_mul(d.hits));
            all.push(d);
        }
        all
    }
}
