//! Request counters: a wrapper around object_store's HTTP client that counts every request it
//! sends (so retries made inside object_store are counted too) and the failures among them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};

use super::RemoteStats;

/// The counters of one store; every update also goes to [`GLOBAL`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    http_requests: AtomicU64,
    failures: AtomicU64,
    short_bodies: AtomicU64,
    bytes: AtomicU64,
}

/// The counters of every store in the process.
pub(crate) static GLOBAL: Counters = Counters {
    requests: AtomicU64::new(0),
    http_requests: AtomicU64::new(0),
    failures: AtomicU64::new(0),
    short_bodies: AtomicU64::new(0),
    bytes: AtomicU64::new(0),
};

fn add(f: impl Fn(&Counters) -> &AtomicU64, this: &Counters, n: u64) {
    f(this).fetch_add(n, Ordering::Relaxed);
    f(&GLOBAL).fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn request(&self) {
        add(|c| &c.requests, self, 1);
    }

    pub(crate) fn short_body(&self) {
        add(|c| &c.short_bodies, self, 1);
    }

    pub(crate) fn bytes(&self, n: u64) {
        add(|c| &c.bytes, self, n);
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
        add(|c| &c.http_requests, &self.counters, 1);
        let res = self.inner.execute(req).await;
        let failed = match &res {
            Ok(r) => r.status().is_server_error() || r.status().as_u16() == 429,
            Err(_) => true,
        };
        if failed {
            add(|c| &c.failures, &self.counters, 1);
        }
        res
    }
}
