//! Datasets in object storage (`s3://`, `gs://`, `az://`, `https://`), behind the `remote`
//! feature: a dataset URL's prefix as a [`Location`](crate::location::Location)
//! ([`ObjectStoreDir`]: concurrent HEADs and ranged reads, listing, uploads), a [`Storage`] for
//! one object ([`RemoteObject`]: ranged GETs pinned to the ETag of its HEAD, fed by the
//! order-aware prefetch), and the store of a dataset URL with its credentials and options
//! ([`RemoteStore`]).
//!
//! Object stores are async; their requests run on one small multi-thread tokio runtime owned by
//! this module, created on first use and shared by the process, never on a caller's async
//! context. [`Storage::read_at`] blocks on it.
//!
//! **Retries.** object_store retries 5xx, 429 (throttling), timeouts and connection errors with
//! jittered exponential backoff (100 ms doubling up to 15 s, at most `retries` times, 10 by
//! default), and re-requests a body cut mid-stream from where it broke (only if the ETag is
//! unchanged). On top of that, a response that ends early without an error (a short body) is
//! re-requested from the exact byte where it stopped, a bounded number of times: a read is whole
//! or an error, never a gap. Every HTTP request is counted ([`RemoteStats`]).
//!
//! **Credentials** come from each cloud's standard chain (environment such as
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ALLOW_HTTP`; profile files; instance metadata), overridden by explicit storage options
//! ([`OpenOptions::storage_options`](crate::OpenOptions::storage_options)). Option values are
//! never printed: not in `Debug`, not in errors.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::location::ObjectMeta;
use stokehold_format::error::{FormatError, Result};
use stokehold_format::{ReadProfile, Storage};

mod counting;
mod diagnose;
mod location;
mod prefetch;
mod write;

pub use crate::location::{PrefetchStats, RemoteStats};
use counting::Counters;
pub use location::ObjectStoreDir;
use prefetch::Prefetcher;
pub use write::{DEFAULT_PART_BYTES, Upload};

/// Default of the `retries` option: how many times one request is retried.
pub const DEFAULT_RETRIES: usize = 10;

/// The I/O runtime, created once per process on first use: one thread per 6 CPUs, 1 to 4 (the
/// environment's `STOKEHOLD_IO_THREADS`, 1 to 64, overrides). Measured on 2 cores (the remote
/// bench, alternating runs): a second thread doubled the CPU the loader spends on object storage
/// (idle tokio workers look for work before they park), for no throughput; one thread serves a
/// few thousand GETs a second.
fn runtime() -> io::Result<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<io::Result<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        let threads = std::env::var("STOKEHOLD_IO_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| (1..=64).contains(n))
            .unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| (n.get() / 6).clamp(1, 4))
            });
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("stokehold-io")
            .enable_all()
            .build()
    })
    .as_ref()
    .map_err(|e| io::Error::other(format!("cannot start the object-storage I/O runtime: {e}")))
}

/// Run `f` on the I/O runtime and wait for it. From inside some other async context (where
/// blocking the thread on a runtime is not allowed) it waits on a helper thread instead.
fn block_on<F>(f: F) -> io::Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|s| s.spawn(|| rt.block_on(f)).join())
            .map_err(|_| io::Error::other("the object-storage I/O thread panicked"))
    } else {
        Ok(rt.block_on(f))
    }
}

/// The parsed pieces of a URL: `s3://bucket/prefix` → the store's root `s3://bucket` and the
/// key prefix `prefix`.
fn split_url(url: &str) -> Result<(url::Url, ObjectPath)> {
    let bad = |detail: String| FormatError::Remote {
        url: url.to_string(),
        detail,
    };
    let parsed = url::Url::parse(url).map_err(|e| bad(format!("not a valid URL: {e}")))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        // never echo the URL's user info back: it may hold a secret
        return Err(FormatError::Remote {
            url: redact_url(url),
            detail: "credentials in the URL are not accepted; use storage options or the \
                     environment"
                .into(),
        });
    }
    let (_, path) = object_store::ObjectStoreScheme::parse(&parsed)
        .map_err(|e| bad(format!("not an object-storage URL: {e}")))?;
    Ok((parsed, path))
}

/// `url` with any user info replaced by `***`.
fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((_, host)) if !rest.split('/').next().unwrap_or("").is_empty() => {
                format!("{scheme}://***@{host}")
            }
            _ => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// Storage options as fsspec (s3fs) and Hugging Face `datasets` users know them, mapped to
/// object_store's keys. Any other key is passed to object_store as is (its own names, such as
/// `aws_region` or `google_service_account`).
fn canonical_key(scheme: &str, key: &str) -> String {
    let k = key.to_ascii_lowercase();
    let s3 = matches!(scheme, "s3" | "s3a");
    match (s3, k.as_str()) {
        (true, "key") => "aws_access_key_id".into(),
        (true, "secret") => "aws_secret_access_key".into(),
        (true, "token") => "aws_session_token".into(),
        (true, "region_name") => "aws_region".into(),
        (true, "anon") => "aws_skip_signature".into(),
        (true, "endpoint_url") => "aws_endpoint".into(),
        (false, "anon") if scheme == "gs" => "google_skip_signature".into(),
        (false, "anon") if matches!(scheme, "az" | "adl" | "azure" | "abfs" | "abfss") => {
            "azure_skip_signature".into()
        }
        (false, "token") if scheme == "gs" => "google_service_account".into(),
        _ => k,
    }
}

/// The connection to one store (a bucket, container or HTTP host) for one dataset URL: the
/// object_store client, the URL's key prefix, its retry setting and request counters. Shared by
/// every shard of a dataset.
pub struct RemoteStore {
    /// The URL as given, without a trailing `/` (never holds secrets: user info is refused).
    url: String,
    /// What the store was set up with, for the sentence of a misconfiguration.
    setup: diagnose::Setup,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    retries: usize,
    counters: Arc<Counters>,
    prefetch: Prefetcher,
    /// Part size of uploads (`upload_part_bytes`).
    part_bytes: usize,
    /// Ids of this store's objects (keys of the prefetcher's ranges).
    next_object: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for RemoteStore {
    // Not derived: object_store's clients print their credentials in Debug.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("url", &self.url)
            .field("retries", &self.retries)
            .finish_non_exhaustive()
    }
}

impl RemoteStore {
    /// Connect to the store of `url` (`s3://bucket/prefix`, `gs://...`, `az://...`,
    /// `https://host/path`), with credentials and endpoint from the environment, overridden by
    /// `options` (see the module documentation). Nothing is requested yet.
    pub fn open(url: &str, options: &BTreeMap<String, String>) -> Result<Arc<RemoteStore>> {
        let url = url.trim_end_matches('/').to_string();
        let (parsed, prefix) = split_url(&url)?;
        let scheme = parsed.scheme().to_ascii_lowercase();
        let bad = |detail: String| FormatError::Remote {
            url: url.clone(),
            detail,
        };
        let mut retries = DEFAULT_RETRIES;
        let mut prefetch_bytes = prefetch::DEFAULT_BUDGET;
        let mut prefetch_requests = prefetch::DEFAULT_REQUESTS;
        let mut part_bytes = write::DEFAULT_PART_BYTES;
        let mut config: Vec<(String, &str)> = Vec::new();
        let count = |key: &str, v: &str| {
            v.parse::<u64>().map_err(|_| {
                bad(format!(
                    "storage option {key:?} must be a whole number, got {v:?}"
                ))
            })
        };
        for (k, v) in options {
            match k.to_ascii_lowercase().as_str() {
                "retries" => retries = count("retries", v)? as usize,
                "prefetch_bytes" => prefetch_bytes = count("prefetch_bytes", v)?,
                "upload_part_bytes" => {
                    part_bytes = count("upload_part_bytes", v)?.max(1) as usize;
                }
                "prefetch_requests" => {
                    prefetch_requests = count("prefetch_requests", v)?.max(1) as usize;
                }
                _ => config.push((canonical_key(&scheme, k), v.as_str())),
            }
        }
        let retry = object_store::RetryConfig {
            max_retries: retries,
            ..Default::default()
        };
        let counters = Arc::new(Counters::default());
        let connector = counting::CountingConnector(counters.clone());
        let unknown = |key: &str| bad(format!("unknown storage option {key:?} for {scheme}://"));
        let mut setup = diagnose::Setup::other(&url);
        let store: Arc<dyn ObjectStore> = match scheme.as_str() {
            "s3" | "s3a" => {
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_url(url.as_str());
                for (k, v) in config {
                    b = b.with_config(k.parse().map_err(|_| unknown(&k))?, v);
                }
                setup = diagnose::Setup {
                    bucket: parsed.host_str().unwrap_or_default().to_string(),
                    ..diagnose::Setup::of_s3(&url, &b)
                };
                setup.check().map_err(|e| bad(e.to_string()))?;
                let b = b.with_retry(retry).with_http_connector(connector);
                Arc::new(b.build().map_err(|e| bad(store_error(&e)))?)
            }
            "gs" => {
                let mut b =
                    object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url.as_str());
                for (k, v) in config {
                    b = b.with_config(k.parse().map_err(|_| unknown(&k))?, v);
                }
                setup = diagnose::Setup::of_gcs(&url, &b);
                setup.check().map_err(|e| bad(e.to_string()))?;
                let b = b.with_retry(retry).with_http_connector(connector);
                Arc::new(b.build().map_err(|e| bad(store_error(&e)))?)
            }
            "az" | "adl" | "azure" | "abfs" | "abfss" => {
                let mut b =
                    object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url.as_str());
                for (k, v) in config {
                    b = b.with_config(k.parse().map_err(|_| unknown(&k))?, v);
                }
                setup = diagnose::Setup::of_azure(&url, &b);
                setup.check().map_err(|e| bad(e.to_string()))?;
                let b = b.with_retry(retry).with_http_connector(connector);
                Arc::new(b.build().map_err(|e| bad(store_error(&e)))?)
            }
            "http" | "https" => {
                let root = &parsed[..url::Position::BeforePath];
                let mut b = object_store::http::HttpBuilder::new().with_url(root);
                for (k, v) in config {
                    b = b.with_config(k.parse().map_err(|_| unknown(&k))?, v);
                }
                let b = b.with_retry(retry).with_http_connector(connector);
                Arc::new(b.build().map_err(|e| bad(store_error(&e)))?)
            }
            other => {
                return Err(bad(format!(
                    "{other}:// is not an object store stokehold reads (s3, gs, az, http, https)"
                )));
            }
        };
        Ok(Arc::new(RemoteStore {
            url,
            setup,
            store,
            prefix,
            retries,
            counters,
            prefetch: Prefetcher::new(prefetch_bytes, prefetch_requests),
            part_bytes,
            next_object: std::sync::atomic::AtomicU64::new(0),
        }))
    }

    /// The dataset URL this store was opened for.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `e`, a "not found" of an object: when the bucket itself does not exist (one listing of
    /// it says so), the sentence that names the bucket; else `e`. S3 only; outside the I/O
    /// runtime (it blocks on the listing).
    fn missing(&self, e: io::Error) -> io::Error {
        if !self.setup.s3 {
            return e;
        }
        self.counters.request();
        let listing = block_on(async { self.store.list_with_delimiter(None).await.map(|_| ()) });
        match listing {
            Ok(Err(l)) => match self.setup.diagnose(&l) {
                Some(sentence) if sentence.contains("does not exist") => io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{sentence} (the store said: {})", io_error(&l)),
                ),
                _ => e,
            },
            _ => e,
        }
    }

    /// A request's error as an `io::Error` ([`io_error`]), led by the sentence of the
    /// misconfiguration it shows, when it shows one (the backend's error kept after it).
    fn explain(&self, e: &object_store::Error) -> io::Error {
        let io = io_error(e);
        match self.setup.diagnose(e) {
            Some(sentence) => {
                io::Error::new(io.kind(), format!("{sentence} (the store said: {io})"))
            }
            None => io,
        }
    }

    /// This store's request counts.
    pub fn stats(&self) -> RemoteStats {
        RemoteStats {
            prefetch: self.prefetch.stats(),
            ..self.counters.snapshot()
        }
    }

    /// The object-store path and the full URL of `name` under the URL's prefix.
    /// Upload `bytes` as `name` under this store's URL in one request (the test kit's
    /// uploads; datasets are written through [`ObjectStoreDir`]).
    #[doc(hidden)]
    pub fn put_object(&self, name: &str, bytes: Vec<u8>) -> io::Result<()> {
        let (location, url) = self.locate(name);
        block_on(self.store.put(&location, bytes.into()))?
            .map(|_| ())
            .map_err(|e| io::Error::other(format!("PUT {url}: {e}")))
    }

    fn locate(&self, name: &str) -> (ObjectPath, String) {
        let location = if self.prefix.as_ref().is_empty() {
            ObjectPath::from(name)
        } else {
            ObjectPath::from(format!("{}/{name}", self.prefix.as_ref()))
        };
        (location, format!("{}/{name}", self.url))
    }

    /// Open the object `name` under the URL's prefix: one HEAD for its size and ETag.
    pub fn object(self: &Arc<Self>, name: &str) -> io::Result<RemoteObject> {
        let obj = RemoteObject::unopened(self.clone(), name);
        let meta = block_on(obj.head())??;
        Ok(RemoteObject {
            size: meta.size,
            e_tag: meta.e_tag,
            ..obj
        })
    }
}

/// One object read with ranged GETs: a shard in object storage. Its size and ETag are fixed at
/// open; a read that finds another ETag (the object was replaced) fails, naming the key.
pub struct RemoteObject {
    store: Arc<RemoteStore>,
    /// This object's id in its store (the prefetcher's key).
    id: u64,
    location: ObjectPath,
    url: String,
    size: u64,
    e_tag: Option<String>,
}

impl std::fmt::Debug for RemoteObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteObject")
            .field("url", &self.url)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl RemoteObject {
    /// `name` under the store's prefix, before its HEAD (size 0, no ETag).
    fn unopened(store: Arc<RemoteStore>, name: &str) -> RemoteObject {
        let (location, url) = store.locate(name);
        let id = store
            .next_object
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RemoteObject {
            store,
            id,
            location,
            url,
            size: 0,
            e_tag: None,
        }
    }

    /// `name` under the store's prefix, as a HEAD described it.
    fn at(store: Arc<RemoteStore>, name: &str, meta: &ObjectMeta) -> RemoteObject {
        RemoteObject {
            size: meta.size,
            e_tag: meta.version.clone(),
            ..RemoteObject::unopened(store, name)
        }
    }

    /// A copy for a request of the I/O runtime (same object, same id and ETag).
    fn clone_for_fetch(&self) -> RemoteObject {
        RemoteObject {
            store: self.store.clone(),
            id: self.id,
            location: self.location.clone(),
            url: self.url.clone(),
            size: self.size,
            e_tag: self.e_tag.clone(),
        }
    }

    /// Read the pieces `(offset, len)` (sorted, disjoint, within `offset0..offset0 + buf.len()`)
    /// into their places in `buf`, one request each, all at once.
    fn fetch_pieces(
        &self,
        offset0: u64,
        pieces: &[(u64, usize)],
        buf: &mut [u8],
    ) -> io::Result<()> {
        let mut slices: Vec<(u64, &mut [u8])> = Vec::with_capacity(pieces.len());
        let mut rest = buf;
        let mut at = offset0;
        for &(start, len) in pieces {
            let (_, tail) = rest.split_at_mut((start - at) as usize);
            let (piece, tail) = tail.split_at_mut(len);
            slices.push((start, piece));
            rest = tail;
            at = start + len as u64;
        }
        let results: Vec<io::Result<()>> = block_on(futures_util::future::join_all(
            slices
                .into_iter()
                .map(|(start, piece)| self.fetch(start, piece)),
        ))?;
        results.into_iter().collect()
    }

    /// The object's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The counts of the store this object belongs to.
    pub fn stats(&self) -> RemoteStats {
        self.store.stats()
    }

    fn fail(&self, what: &str, e: &object_store::Error) -> io::Error {
        let e = self.store.explain(e);
        io::Error::new(e.kind(), format!("{what} {}: {e}", self.url))
    }

    async fn head(&self) -> io::Result<object_store::ObjectMeta> {
        self.store.counters.request();
        self.store
            .store
            .head(&self.location)
            .await
            .map_err(|e| self.fail("HEAD", &e))
    }

    /// Fill `buf` from the bytes `offset..offset + buf.len()` (already checked to lie within the
    /// object) with ranged GETs: a body that ends early, or breaks after object_store's own
    /// retries, is asked for again from the first missing byte, at most `retries` times.
    async fn fetch(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let end = offset + buf.len() as u64;
        let mut filled = 0usize;
        let mut again = 0usize;
        // one logical request: asking again for the rest of a short body counts as a retry
        self.store.counters.request();
        loop {
            let start = offset + filled as u64;
            let what = format!("GET bytes {start}..{end} of");
            let options = GetOptions {
                range: Some(GetRange::Bounded(start..end)),
                ..Default::default()
            };
            let got = self
                .store
                .store
                .get_opts(&self.location, options)
                .await
                .map_err(|e| self.fail(&what, &e))?;
            if let (Some(want), Some(found)) = (&self.e_tag, &got.meta.e_tag)
                && want != found
            {
                return Err(io::Error::other(format!(
                    "{what} {}: the object changed since it was opened (ETag {want} at open, \
                     now {found})",
                    self.url
                )));
            }
            let mut body = got.into_stream();
            let mut broken = None;
            while let Some(chunk) = body.next().await {
                match chunk {
                    Ok(bytes) => {
                        let room = buf.len() - filled;
                        if bytes.len() > room {
                            return Err(io::Error::other(format!(
                                "{what} {}: the server sent more bytes than asked for",
                                self.url
                            )));
                        }
                        buf[filled..filled + bytes.len()].copy_from_slice(&bytes);
                        filled += bytes.len();
                        self.store.counters.bytes(bytes.len() as u64);
                    }
                    Err(e) => {
                        broken = Some(e);
                        break;
                    }
                }
            }
            if filled == buf.len() {
                return Ok(());
            }
            if broken.is_none() {
                self.store.counters.short_body();
            }
            if again >= self.store.retries {
                let why = match broken {
                    Some(e) => store_error(&e),
                    None => "the response ended early".to_string(),
                };
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "{what} {}: got {filled} of {} bytes after {} attempts: {why}",
                        self.url,
                        buf.len(),
                        again + 1
                    ),
                ));
            }
            again += 1;
        }
    }
}

impl Storage for RemoteObject {
    fn kind(&self) -> &'static str {
        "remote"
    }

    fn profile(&self) -> ReadProfile {
        ReadProfile::Network
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.size)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        if end > self.size {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        if buf.is_empty() {
            return Ok(());
        }
        self.store.prefetch.read(self, offset, buf, |pieces, buf| {
            self.fetch_pieces(offset, pieces, buf)
        })
    }

    fn will_read(&self, records: &[(u64, u64)]) {
        self.store.prefetch.hint(self, records);
    }
}

/// An object store's error as an `io::Error` of the matching kind (not found, permission
/// denied, other), worded by [`store_error`].
fn io_error(e: &object_store::Error) -> io::Error {
    let kind = match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, store_error(e))
}

/// The text of an object_store error: its own message, which names the request and the status
/// (object_store's messages hold URLs and statuses, never credentials).
fn store_error(e: &object_store::Error) -> String {
    match e {
        object_store::Error::NotFound { .. } => {
            format!("not found (no such bucket or key): {e}")
        }
        object_store::Error::PermissionDenied { .. }
        | object_store::Error::Unauthenticated { .. } => {
            format!("access denied (check the credentials): {e}")
        }
        _ => e.to_string(),
    }
}

fn url_of(path: &Path) -> Result<&str> {
    path.to_str().ok_or_else(|| FormatError::Remote {
        url: path.display().to_string(),
        detail: "a URL must be valid UTF-8".into(),
    })
}
