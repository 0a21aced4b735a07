//! Writing to object storage: one object written as a stream ([`Upload`], the
//! [`ObjectStoreDir`](super::ObjectStoreDir)'s [`ObjectWriter`](crate::location::ObjectWriter)),
//! and the prefix's listing and deletes. The writer protocol (names, the manifest last, an
//! overwrite, a dead writer's leftovers) is `crate::writer`'s, the same for every location.
//!
//! **Uploads.** A shard is uploaded in parts of 8 MiB (`upload_part_bytes`), up to 8 parts in
//! flight on the I/O runtime while the writer fills the next; an object smaller than one part is
//! one PUT. object_store retries each request (the `retries` option).

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Write};
use std::sync::Arc;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};

use super::{RemoteStore, block_on, runtime};
use crate::location::ObjectMeta;

/// Default of the `upload_part_bytes` storage option (S3 needs at least 5 MiB but for the last).
pub const DEFAULT_PART_BYTES: usize = 8 << 20;

/// Parts of one object uploaded at once.
const PARTS_IN_FLIGHT: usize = 8;

impl RemoteStore {
    /// Every object under the prefix, by name relative to it (one LIST, paginated by the store).
    pub fn list(&self) -> io::Result<BTreeMap<String, ObjectMeta>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        self.counters.request();
        let listed: Vec<object_store::Result<object_store::ObjectMeta>> =
            block_on(self.store.list(prefix).collect())?;
        let mut out = BTreeMap::new();
        for meta in listed {
            let meta = meta.map_err(|e| {
                // led by the sentence of a misconfiguration (no credentials, ...), as reads are
                let e = self.explain(&e);
                io::Error::new(e.kind(), format!("LIST {}: {e}", self.url))
            })?;
            let key = meta.location.as_ref();
            let name = match prefix {
                Some(p) => key
                    .strip_prefix(p.as_ref())
                    .map(|k| k.trim_start_matches('/'))
                    .unwrap_or(key),
                None => key,
            };
            out.insert(
                name.to_string(),
                ObjectMeta {
                    size: meta.size,
                    version: meta.e_tag,
                },
            );
        }
        Ok(out)
    }

    /// Delete the object `name` under the prefix (a missing one is not an error).
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        let (location, url) = self.locate(name);
        self.counters.request();
        match block_on(self.store.delete(&location))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => {
                let e = self.explain(&e);
                Err(io::Error::new(e.kind(), format!("DELETE {url}: {e}")))
            }
        }
    }

    /// Start uploading the object `name` under the prefix.
    pub(crate) fn upload(self: &Arc<Self>, name: &str) -> Upload {
        let (location, url) = self.locate(name);
        Upload {
            store: self.clone(),
            name: name.to_string(),
            location,
            url,
            part_bytes: self.part_bytes,
            buf: Vec::new(),
            multipart: None,
            in_flight: VecDeque::new(),
            done: false,
        }
    }
}

/// One object written as a stream: bytes are collected into parts, each part is uploaded on the
/// I/O runtime while the next fills (at most 8 at once); [`Upload::finish`] completes the object
/// (one PUT when it is smaller than a part). Dropped unfinished, it aborts its multipart upload.
pub struct Upload {
    store: Arc<RemoteStore>,
    name: String,
    location: ObjectPath,
    url: String,
    part_bytes: usize,
    buf: Vec<u8>,
    /// The multipart upload, once the first part is sent (in a mutex only so that an `Upload`
    /// is `Sync`, as a writer held by Python must be; every use has `&mut self`).
    multipart: Option<std::sync::Mutex<Box<dyn MultipartUpload>>>,
    in_flight: VecDeque<tokio::task::JoinHandle<object_store::Result<()>>>,
    done: bool,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload")
            .field("url", &self.url)
            .field("parts_in_flight", &self.in_flight.len())
            .finish_non_exhaustive()
    }
}

impl Upload {
    /// The object's name under the dataset prefix.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn error(&self, e: &object_store::Error) -> io::Error {
        let e = self.store.explain(e);
        io::Error::new(e.kind(), format!("upload of {}: {e}", self.url))
    }

    /// Upload the first `part_bytes` of the buffer (or all of it when `last`) as the next part.
    fn send_part(&mut self, last: bool) -> io::Result<()> {
        let n = if last {
            self.buf.len()
        } else {
            self.part_bytes
        };
        let rest = self.buf.split_off(n);
        let part = std::mem::replace(&mut self.buf, rest);
        if self.multipart.is_none() {
            self.store.counters.request();
            let mp = block_on(self.store.store.put_multipart(&self.location))?
                .map_err(|e| self.error(&e))?;
            self.multipart = Some(std::sync::Mutex::new(mp));
        }
        let mp = self.multipart.as_mut().expect("just set");
        let mp = mp.get_mut().unwrap_or_else(|p| p.into_inner());
        self.store.counters.request();
        let fut = mp.put_part(PutPayload::from(part));
        self.in_flight.push_back(runtime()?.spawn(fut));
        while self.in_flight.len() > PARTS_IN_FLIGHT {
            self.wait_oldest()?;
        }
        Ok(())
    }

    fn wait_oldest(&mut self) -> io::Result<()> {
        let Some(h) = self.in_flight.pop_front() else {
            return Ok(());
        };
        match block_on(h)? {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.error(&e)),
            Err(e) => Err(io::Error::other(format!(
                "upload of {}: a part's task failed: {e}",
                self.url
            ))),
        }
    }

    /// Complete the object: the rest as the last part and the multipart upload completed, or
    /// one PUT when no part was sent. On an error the upload is aborted.
    pub fn finish(mut self) -> io::Result<()> {
        let r = self.complete();
        if r.is_err() {
            self.abort_now();
        }
        self.done = true;
        r
    }

    fn complete(&mut self) -> io::Result<()> {
        if self.multipart.is_none() {
            let payload = PutPayload::from(std::mem::take(&mut self.buf));
            self.store.counters.request();
            block_on(self.store.store.put(&self.location, payload))?.map_err(|e| self.error(&e))?;
            return Ok(());
        }
        if !self.buf.is_empty() {
            self.send_part(true)?;
        }
        while !self.in_flight.is_empty() {
            self.wait_oldest()?;
        }
        let mut mp = self.multipart.take().expect("checked above");
        self.store.counters.request();
        let r = block_on(mp.get_mut().unwrap_or_else(|p| p.into_inner()).complete())?;
        self.multipart = Some(mp);
        r.map(|_| ()).map_err(|e| self.error(&e))
    }

    /// Stop the parts in flight and abort the multipart upload (best effort).
    fn abort_now(&mut self) {
        for h in self.in_flight.drain(..) {
            h.abort();
        }
        if let Some(mut mp) = self.multipart.take() {
            self.store.counters.request();
            let _ = block_on(mp.get_mut().unwrap_or_else(|p| p.into_inner()).abort());
        }
    }
}

impl Write for Upload {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        while self.buf.len() >= self.part_bytes {
            self.send_part(false)?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.done {
            self.abort_now();
        }
    }
}
