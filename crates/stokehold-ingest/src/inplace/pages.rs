//! The decoded pages of an opened Parquet dataset, shared by the threads that read it, within a
//! byte budget.
//!
//! A Parquet row's value is decoded with every other row of its page (decompressed, then taken
//! apart by the `parquet` crate). Under a shuffle the rows of a page are read at different times,
//! usually by different worker threads, so without a cache each row decodes its whole page: a
//! page of 1 MiB holds about 9 ImageNet JPEGs, each then costs 9 pages' work. This cache keeps
//! the rows of the pages decoded last, least recently used evicted first, so that a page is
//! decoded once while it stays within the budget.
//!
//! What it holds never changes what is read: a page's rows are a function of its bytes, and
//! those are checked against the index (CRC-32C) before every read, whether the page then comes
//! from here or is decoded again. Pages that do not decode are not kept (each of their rows
//! fails as before, named). The cache is one per opened dataset ([`super::open_in_place`]), so
//! its memory goes with the dataset.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Default budget: a quarter of a GiB, at most a sixteenth of the machine's memory.
pub const DEFAULT_PAGE_CACHE: u64 = 256 << 20;

/// The environment variable that sets the budget when the options do not (bytes, or a size such
/// as `512MiB`, `1GiB`; `0` turns the cache off).
pub const PAGE_CACHE_ENV: &str = "STOKEHOLD_PARQUET_PAGE_CACHE";

/// The rows of decoded pages: every row's value, copied into one buffer (what is held is exactly
/// what is counted; nothing else of the page is kept alive).
#[derive(Debug)]
pub(super) struct DecodedRows {
    data: Vec<u8>,
    /// Each row's value in `data` (start, end); `None`: a null.
    rows: Vec<Option<(usize, usize)>>,
}

impl DecodedRows {
    /// The rows `values` (in order; `None`: a null) as one buffer.
    pub(super) fn new<'a, I>(values: I, rows: usize, bytes: usize) -> DecodedRows
    where
        I: IntoIterator<Item = Option<&'a [u8]>>,
    {
        let mut data = Vec::with_capacity(bytes);
        let mut spans = Vec::with_capacity(rows);
        for v in values {
            spans.push(v.map(|v| {
                let start = data.len();
                data.extend_from_slice(v);
                (start, data.len())
            }));
        }
        data.shrink_to_fit();
        spans.shrink_to_fit();
        DecodedRows { data, rows: spans }
    }

    /// Rows held.
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Row `k`: `None` past the rows; `Some(None)`: a null.
    pub(super) fn get(&self, k: usize) -> Option<Option<&[u8]>> {
        self.rows
            .get(k)
            .map(|r| r.map(|(start, end)| &self.data[start..end]))
    }

    /// Row `k`'s value, copied (`None`: a null); an error when the pages hold fewer rows than
    /// the index says.
    pub(super) fn value(&self, k: u32) -> Result<Option<Vec<u8>>, FewerRows> {
        match self.get(k as usize) {
            Some(v) => Ok(v.map(<[u8]>::to_vec)),
            None => Err(FewerRows {
                held: self.len(),
                wanted: u64::from(k) + 1,
            }),
        }
    }

    /// Bytes of memory held (the buffers' capacities and the struct).
    pub(super) fn held(&self) -> u64 {
        (self.data.capacity()
            + self.rows.capacity() * std::mem::size_of::<Option<(usize, usize)>>()
            + std::mem::size_of::<DecodedRows>()) as u64
    }
}

/// Pages that hold fewer rows than the index says ([`DecodedRows::value`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the pages hold {held} rows, not the {wanted} the index says")]
pub(super) struct FewerRows {
    /// The rows the pages hold.
    held: usize,
    /// The rows the index says (at least).
    wanted: u64,
}

impl From<FewerRows> for crate::Unusable {
    fn from(e: FewerRows) -> Self {
        crate::Unusable(e.to_string())
    }
}

/// A page's key: the decoder (one per file of an opened dataset), the pages' offset and length.
pub(super) type PageKey = (u64, u64, usize);

/// What a [`PageCache`] has done and holds.
pub type PageCacheStats = stokehold_format::CodecCacheStats;

/// Decoded pages shared by the threads reading one dataset, at most `budget` bytes of them.
#[derive(Debug)]
pub struct PageCache {
    budget: u64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each page held: its rows and when it was last used.
    pages: HashMap<PageKey, (Arc<DecodedRows>, u64)>,
    /// The pages by last use (oldest first).
    order: BTreeMap<u64, PageKey>,
    clock: u64,
    bytes: u64,
    peak: u64,
    hits: u64,
    misses: u64,
}

impl PageCache {
    /// A cache of at most `budget` bytes of decoded pages (0: none kept).
    pub fn new(budget: u64) -> PageCache {
        PageCache {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The budget from the options (`Some`), else from [`PAGE_CACHE_ENV`], else the default
    /// (at most a sixteenth of `memory`). A variable that does not parse is said once on stderr
    /// and the default kept.
    pub fn budget(given: Option<u64>, memory: u64) -> u64 {
        if let Some(b) = given {
            return b;
        }
        let default = DEFAULT_PAGE_CACHE.min(memory / 16);
        match std::env::var(PAGE_CACHE_ENV) {
            Ok(text) => parse_size(&text).unwrap_or_else(|| {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    eprintln!(
                        "stokehold: {PAGE_CACHE_ENV}={text:?} ignored (a byte count such as \
                         268435456 or 256MiB; 0 turns the cache off): the budget is {} MiB",
                        default >> 20
                    )
                });
                default
            }),
            Err(_) => default,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // what is held stays consistent at every step: a panic elsewhere leaves it usable
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The rows of page `key`, when held, counted as a hit (a row read from them), and made the
    /// most recently used.
    pub(super) fn get(&self, key: PageKey) -> Option<Arc<DecodedRows>> {
        let rows = self.peek(key)?;
        self.hit();
        Some(rows)
    }

    /// The rows of page `key`, when held, made the most recently used (a row of them will be
    /// read: [`PageCache::hit`] counts it then).
    pub(super) fn peek(&self, key: PageKey) -> Option<Arc<DecodedRows>> {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.clock += 1;
        let now = inner.clock;
        let (rows, used) = inner.pages.get_mut(&key)?;
        let rows = Arc::clone(rows);
        let was = std::mem::replace(used, now);
        inner.order.remove(&was);
        inner.order.insert(now, key);
        Some(rows)
    }

    /// Page `key` was decoded into `rows` (a miss): keep it, evicting the least recently used
    /// pages to stay within the budget. False when it is not kept: larger than the budget, or
    /// the budget is 0 (another thread that decoded the same page meanwhile keeps its copy:
    /// true).
    pub(super) fn put(&self, key: PageKey, rows: &Arc<DecodedRows>) -> bool {
        let size = rows.held();
        let mut g = self.lock();
        let inner = &mut *g;
        inner.misses += 1;
        if size > self.budget {
            return false;
        }
        if inner.pages.contains_key(&key) {
            return true;
        }
        while inner.bytes + size > self.budget {
            let Some((_, old)) = inner.order.pop_first() else {
                break;
            };
            if let Some((gone, _)) = inner.pages.remove(&old) {
                inner.bytes -= gone.held();
            }
        }
        inner.clock += 1;
        let now = inner.clock;
        inner.pages.insert(key, (Arc::clone(rows), now));
        inner.order.insert(now, key);
        inner.bytes += size;
        inner.peak = inner.peak.max(inner.bytes);
        true
    }

    /// A row was served from pages decoded before (held by the cache, or the thread's last).
    pub(super) fn hit(&self) {
        self.lock().hits += 1;
    }

    /// Drop the pages of decoder `id` (its file's codec is gone).
    pub(super) fn forget(&self, id: u64) {
        let mut g = self.lock();
        let inner = &mut *g;
        let gone: Vec<(PageKey, u64)> = inner
            .pages
            .iter()
            .filter(|(k, _)| k.0 == id)
            .map(|(k, (_, used))| (*k, *used))
            .collect();
        for (k, used) in gone {
            if let Some((rows, _)) = inner.pages.remove(&k) {
                inner.bytes -= rows.held();
            }
            inner.order.remove(&used);
        }
    }

    /// What it has done and holds.
    pub fn stats(&self) -> PageCacheStats {
        let g = self.lock();
        PageCacheStats {
            hits: g.hits,
            misses: g.misses,
            bytes: g.bytes,
            peak: g.peak,
            budget: self.budget,
            entries: g.pages.len() as u64,
        }
    }
}

/// A byte count: digits, optionally followed by `K`, `M`, `G` (powers of 1024; `KiB`, `MB`, ...
/// alike), spaces allowed before the unit.
fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..digits].parse().ok()?;
    let unit = t[digits..].trim().to_ascii_lowercase();
    let shift = match unit.trim_end_matches('b').trim_end_matches('i') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(rows: usize, each: usize) -> Arc<DecodedRows> {
        let v = vec![7u8; each];
        Arc::new(DecodedRows::new(
            (0..rows).map(|_| Some(&v[..])),
            rows,
            rows * each,
        ))
    }

    #[test]
    fn a_row_past_the_pages_is_an_error_that_counts_both() {
        let p = page(2, 3);
        assert_eq!(p.value(1).unwrap(), Some(vec![7u8; 3]));
        assert_eq!(
            p.value(5).unwrap_err().to_string(),
            "the pages hold 2 rows, not the 6 the index says"
        );
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("1234"), Some(1234));
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size("1 GiB"), Some(1 << 30));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("2MB"), Some(2 << 20));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size("99999999999999T"), None);
    }

    #[test]
    fn rows_keep_their_values_and_nulls() {
        let a = [1u8, 2, 3];
        let rows = DecodedRows::new([Some(&a[..]), None, Some(&a[1..])], 3, 5);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.get(0), Some(Some(&a[..])));
        assert_eq!(rows.get(1), Some(None));
        assert_eq!(rows.get(2), Some(Some(&a[1..])));
        assert_eq!(rows.get(3), None);
    }

    #[test]
    fn the_budget_bounds_the_bytes_held_and_the_oldest_go_first() {
        let one = page(4, 1000).held();
        let cache = PageCache::new(3 * one);
        for p in 0..10u64 {
            cache.put((1, p * 4096, 4096), &page(4, 1000));
            let s = cache.stats();
            assert!(s.bytes <= s.budget, "{s:?}");
            assert_eq!(s.bytes, s.entries * one);
        }
        let s = cache.stats();
        assert_eq!((s.entries, s.misses, s.hits, s.peak), (3, 10, 0, 3 * one));
        // the last three are held; using the oldest of them keeps it past the next insertion
        assert!(cache.get((1, 0, 4096)).is_none());
        assert!(cache.get((1, 7 * 4096, 4096)).is_some());
        cache.put((1, 10 * 4096, 4096), &page(4, 1000));
        assert!(cache.get((1, 7 * 4096, 4096)).is_some());
        assert!(cache.get((1, 8 * 4096, 4096)).is_none());
        assert!(cache.get((1, 9 * 4096, 4096)).is_some());
        assert_eq!(cache.stats().hits, 3);
        // a page larger than the budget is not kept; nothing is evicted for it
        assert!(!cache.put((1, 1 << 30, 1 << 20), &page(4, 4 * one as usize)));
        assert_eq!(cache.stats().entries, 3);
        // a decoder's pages go with it
        cache.put((2, 0, 4096), &page(4, 1000));
        cache.forget(1);
        let s = cache.stats();
        assert_eq!((s.entries, s.bytes), (1, one));
        assert!(cache.get((2, 0, 4096)).is_some());
    }

    #[test]
    fn a_budget_of_zero_keeps_nothing() {
        let cache = PageCache::new(0);
        assert!(!cache.put((1, 0, 10), &page(1, 10)));
        assert_eq!(cache.stats().entries, 0);
        assert_eq!(cache.stats().bytes, 0);
    }

    #[test]
    fn the_default_budget_follows_memory() {
        assert_eq!(PageCache::budget(Some(5), 1 << 40), 5);
        if std::env::var_os(PAGE_CACHE_ENV).is_none() {
            assert_eq!(PageCache::budget(None, 1 << 40), DEFAULT_PAGE_CACHE);
            assert_eq!(PageCache::budget(None, 1 << 30), 64 << 20);
        }
    }
}
