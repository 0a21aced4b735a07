//! Request counters: a wrapper around object_store's HTTP client that counts every request it
//! sends (so retries made inside object_store are counted too) and the failures among them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

use super::RemoteStats;

/// The counters of one store.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    http_requests: AtomicU64,
    failures: AtomicU64,
    short_bodies: AtomicU64,
    bytes: AtomicU64,
}

impl Counters {
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn short_body(&self) {
        self.short_bodies.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RemoteStats {
        let requests = self.requests.load(Ordering::Relaxed);
        let http_requests = self.http_requests.load(Ordering::Relaxed);
        RemoteStats {
            requests,
            http_requests,
            retries: http_requests.saturating_sub(requests),
            failures: self.failures.load(Ordering::Relaxed),
            short_bodies: self.short_bodies.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            prefetch: Default::default(),
        }
    }
}

/// Makes object_store's usual reqwest client, wrapped in [`Counting`].
#[derive(Debug)]
pub(crate) struct CountingConnector(pub(crate) Arc<Counters>);

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &object_store::ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(Counting {
            inner,
            counters: self.0.clone(),
        }))
    }
}

#[derive(Debug)]
struct Counting {
    inner: HttpClient,
    counters: Arc<Counters>,
}

#[async_trait::async_trait]
impl HttpService for Counting {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.counters.http_requests.fetch_add(1, Ordering::Relaxed);
        let res = self.inner.execute(req).await;
        let failed = match &res {
            Ok(r) => r.status().is_server_error() || r.status().as_u16() == 429,
            Err(_) => true,
        };
        if failed {
            self.counters.failures.fetch_add(1, Ordering::Relaxed);
        }
        res
    }
}
