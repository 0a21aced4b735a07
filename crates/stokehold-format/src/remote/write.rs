//! Writing a dataset to object storage: the destination's checks and its commit
//! ([`RemoteTarget`]) and one object written as a stream ([`Upload`]).
//!
//! **Commit.** An object store has no rename, so the manifest is the commit point: shards (and
//! the extra files) are uploaded first, each complete before the next starts, then the manifest
//! last, in one PUT. No manifest, no dataset. Shards are named `shard-<run>-NNNNNN.skh`, `<run>`
//! unique to the writer, so a writer never replaces an object that a dataset already lists: an
//! overwrite leaves the old dataset readable until its manifest is replaced, then deletes the old
//! shards. A writer that fails, is aborted or dropped aborts its multipart upload and deletes
//! the objects it wrote.
//!
//! **Uploads.** A shard is uploaded in parts of 8 MiB (`upload_part_bytes`), up to 8 parts in
//! flight on the I/O runtime while the writer fills the next; an object smaller than one part is
//! one PUT. object_store retries each request (the `retries` option).
//!
//! **Destination.** A prefix that holds a manifest is an existing dataset (refused unless
//! overwriting, and then it may hold nothing but that dataset). A prefix without a manifest may
//! hold the leftovers of a writer that died (shards with the writer's names and the extra
//! files): they are deleted. Anything else under the prefix is refused: a writer never deletes an
//! object it cannot tell is its own kind. One writer per prefix at a time: object stores give no
//! lock; a manifest is written only if none exists (`If-None-Match`), where the store supports
//! it, unless overwriting.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{self, Write};
use std::sync::Arc;

use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{MultipartUpload, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use super::{RemoteStore, block_on, io_error as fail, runtime};
use crate::error::{FormatError, Result};
use crate::location::ObjectMeta;
use crate::manifest::{MANIFEST_FILE, Manifest};
use crate::publish::EXTRA_FILES;

/// Default of the `upload_part_bytes` storage option (S3 needs at least 5 MiB but for the last).
pub const DEFAULT_PART_BYTES: usize = 8 << 20;

/// Parts of one object uploaded at once.
const PARTS_IN_FLIGHT: usize = 8;

/// Whether `name` (an object's name under the dataset prefix) is one a dataset writer writes:
/// the manifest, a shard (`shard-*.skh`) or an extra file.
fn writer_made(name: &str) -> bool {
    name == MANIFEST_FILE
        || EXTRA_FILES.contains(&name)
        || (name.starts_with("shard-") && name.ends_with(".skh") && !name.contains('/'))
}

/// The destination of a dataset writer in object storage.
#[derive(Debug)]
pub struct RemoteTarget {
    store: Arc<RemoteStore>,
    run: String,
    overwrite: bool,
    /// Objects this writer completed (deleted again if it does not finish).
    written: Vec<String>,
    /// The objects of the dataset being replaced (deleted after the new manifest).
    replaced: Vec<String>,
    committed: bool,
}

impl RemoteTarget {
    /// Check the destination `url` (see the module documentation) and delete a dead writer's
    /// leftovers. `options` are the storage options (`upload_part_bytes` among them).
    pub fn create(
        url: &str,
        options: &BTreeMap<String, String>,
        overwrite: bool,
    ) -> Result<RemoteTarget> {
        let store = RemoteStore::open(url, options)?;
        let names = store.list_names()?;
        let mut replaced = Vec::new();
        if names.contains(MANIFEST_FILE) {
            if !overwrite {
                return Err(FormatError::DestinationExists {
                    path: store.url.clone().into(),
                });
            }
            let old = super::manifest_of(&store, &crate::limits::Limits::default())?;
            let listed: BTreeSet<&str> = old.shards.iter().map(|s| s.file.as_str()).collect();
            if let Some(foreign) = names
                .iter()
                .find(|n| !listed.contains(n.as_str()) && !writer_made(n))
            {
                return Err(foreign_object(&store, foreign));
            }
            replaced = names.into_iter().collect();
        } else {
            if let Some(foreign) = names.iter().find(|n| !writer_made(n)) {
                return Err(foreign_object(&store, foreign));
            }
            // a writer that died before its manifest: nothing lists these objects
            for name in &names {
                store.delete(name)?;
            }
        }
        Ok(RemoteTarget {
            store,
            run: crate::parts::run_tag(),
            overwrite,
            written: Vec::new(),
            replaced,
            committed: false,
        })
    }

    /// A target for one of the writers of a dataset written by many (see [`crate::parts`]):
    /// nothing under the prefix is checked or deleted (the job's start did that), the shards it
    /// writes are named after `run`, and the manifest is written by
    /// [`commit`](Self::commit) of another target of the same run.
    pub fn for_part(
        url: &str,
        options: &BTreeMap<String, String>,
        run: &str,
    ) -> Result<RemoteTarget> {
        let store = RemoteStore::open(url, options)?;
        Ok(RemoteTarget {
            store,
            run: run.to_string(),
            overwrite: false,
            written: Vec::new(),
            replaced: Vec::new(),
            committed: false,
        })
    }

    /// The tag of this writer's shard names.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The names of the objects under the prefix (one LIST).
    pub fn names(&self) -> Result<BTreeSet<String>> {
        self.store.list_names()
    }

    /// Delete the object `name` under the prefix (a missing one is not an error).
    pub fn delete(&self, name: &str) -> Result<()> {
        self.store.delete(name)
    }

    /// Whether the object `name` exists under the prefix (one HEAD).
    pub fn exists(&self, name: &str) -> Result<bool> {
        match self.store.object(name) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(FormatError::io(self.url_of(name), None, e)),
        }
    }

    /// The dataset URL.
    pub fn url(&self) -> &str {
        &self.store.url
    }

    /// The URL of `name` under the dataset.
    pub fn url_of(&self, name: &str) -> String {
        self.store.locate(name).1
    }

    /// The name of this writer's shard `k`.
    pub fn shard_name(&self, k: usize) -> String {
        format!("shard-{}-{k:06}.skh", self.run)
    }

    /// Start uploading the object `name`.
    pub fn upload(&self, name: &str) -> Upload {
        self.store.upload(name)
    }

    /// Note that `upload` completed (its object now exists and is this writer's).
    pub fn completed(&mut self, name: String) {
        self.written.push(name);
    }

    /// Upload the small object `name` in one PUT.
    pub fn put_small(&mut self, name: &str, contents: &[u8]) -> Result<()> {
        let mut u = self.upload(name);
        u.write_all(contents)
            .and_then(|()| u.finish())
            .map_err(|e| FormatError::io(self.url_of(name), None, e))?;
        self.completed(name.to_string());
        Ok(())
    }

    /// Write the manifest (the commit point), then delete the objects of the dataset it
    /// replaces that it does not list.
    pub fn commit(&mut self, manifest: &Manifest) -> Result<()> {
        let (location, url) = self.store.locate(MANIFEST_FILE);
        let payload = PutPayload::from(manifest.to_json().into_bytes());
        let mode = if self.overwrite {
            PutMode::Overwrite
        } else {
            PutMode::Create
        };
        self.store.counters.request();
        let put = block_on(self.store.store.put_opts(
            &location,
            payload.clone(),
            PutOptions::from(mode),
        ))
        .map_err(|e| FormatError::io(&url, None, e))?;
        match put {
            Ok(_) => {}
            Err(object_store::Error::AlreadyExists { .. }) => {
                return Err(FormatError::DestinationExists { path: url.into() });
            }
            // a store without conditional writes: the destination was checked at the start
            Err(object_store::Error::NotImplemented { .. }) => {
                self.store.counters.request();
                block_on(self.store.store.put(&location, payload))
                    .map_err(|e| FormatError::io(&url, None, e))?
                    .map_err(|e| FormatError::io(&url, None, fail(&e)))?;
            }
            Err(e) => return Err(FormatError::io(&url, None, fail(&e))),
        }
        self.committed = true;
        let keep: BTreeSet<&str> = manifest
            .shards
            .iter()
            .map(|s| s.file.as_str())
            .chain(self.written.iter().map(String::as_str))
            .chain([MANIFEST_FILE])
            .collect();
        for name in std::mem::take(&mut self.replaced) {
            if !keep.contains(name.as_str()) {
                self.store.delete(&name)?;
            }
        }
        Ok(())
    }

    /// Give up: delete every object this writer completed (best effort; an unfinished upload is
    /// aborted when its [`Upload`] is dropped).
    pub fn abort(&mut self) {
        if !self.committed {
            // a store that refuses the deletes too leaves them to the next writer of the
            // prefix, which removes a dead writer's leftovers
            for name in std::mem::take(&mut self.written) {
                let _ = self.store.delete(&name);
            }
        }
    }
}

fn foreign_object(store: &RemoteStore, name: &str) -> FormatError {
    FormatError::Remote {
        url: store.url.clone(),
        detail: format!(
            "the prefix holds {name:?}, which is not part of a stokehold dataset: choose an empty \
             prefix (a writer never deletes objects it did not write)"
        ),
    }
}

impl RemoteStore {
    /// Every object under the prefix, by name relative to it (one LIST, paginated by the store).
    pub(crate) fn list(&self) -> io::Result<BTreeMap<String, ObjectMeta>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        self.counters.request();
        let listed: Vec<object_store::Result<object_store::ObjectMeta>> =
            block_on(self.store.list(prefix).collect())?;
        let mut out = BTreeMap::new();
        for meta in listed {
            let meta = meta.map_err(|e| {
                let e = fail(&e);
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

    /// The names of every object under the prefix.
    pub(crate) fn list_names(&self) -> Result<BTreeSet<String>> {
        let listed = self
            .list()
            .map_err(|e| FormatError::io(&self.url, None, e))?;
        Ok(listed.into_keys().collect())
    }

    /// Delete the object `name` under the prefix (a missing one is not an error).
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        let (location, url) = self.locate(name);
        self.counters.request();
        match block_on(self.store.delete(&location))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => {
                let e = fail(&e);
                Err(io::Error::new(e.kind(), format!("DELETE {url}: {e}")))
            }
        }
    }

    /// [`RemoteStore::remove`] with the object's URL in the error.
    fn delete(&self, name: &str) -> Result<()> {
        self.remove(name)
            .map_err(|e| FormatError::io(self.locate(name).1, None, e))
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
        let e = fail(e);
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
