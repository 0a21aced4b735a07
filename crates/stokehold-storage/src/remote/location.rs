//! [`ObjectStoreDir`]: a dataset URL's prefix as a [`Location`]. HEADs and the ranged reads of a
//! batch are sent concurrently (up to 64 at once); the data plane is a [`RemoteObject`] per
//! object, pinned to the ETag its HEAD gave.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use object_store::{PutMode, PutOptions, PutPayload};

use super::{RemoteObject, RemoteStats, RemoteStore, Upload, block_on};
use crate::file::{Access, Memory};
use crate::location::{Location, ObjectMeta, ObjectWriter, RangeRead};
use stokehold_format::Storage;
use stokehold_format::error::Result;

/// How many bytes of each shard's end are read with its header when it is opened (trailer, meta
/// block and index in one request for shards of up to about 16,000 records).
const OPENING_TAIL: u64 = 256 << 10;

/// How many requests of a batch are in flight at once.
const CONCURRENCY: usize = 64;

/// Threads worth running over object storage at once (a scan waits on the network, not the
/// cores).
const PARALLELISM: usize = 16;

/// The objects under a dataset URL (`s3://bucket/prefix`, `gs://...`, `az://...`,
/// `https://host/path`).
#[derive(Debug)]
pub struct ObjectStoreDir {
    root: PathBuf,
    store: Arc<RemoteStore>,
}

impl ObjectStoreDir {
    /// Connect to the store of `url` with `options` (see [`RemoteStore::open`]). Nothing is
    /// requested yet.
    pub fn open(url: &Path, options: &BTreeMap<String, String>) -> Result<ObjectStoreDir> {
        Ok(ObjectStoreDir::from_store(RemoteStore::open(
            super::url_of(url)?,
            options,
        )?))
    }

    /// The location of an open store.
    pub(crate) fn from_store(store: Arc<RemoteStore>) -> ObjectStoreDir {
        ObjectStoreDir {
            root: PathBuf::from(store.url()),
            store,
        }
    }

    /// The store (its client, prefix, options and counters).
    pub fn store(&self) -> &Arc<RemoteStore> {
        &self.store
    }
}

fn meta_of(obj: &RemoteObject) -> ObjectMeta {
    ObjectMeta {
        size: obj.size,
        version: obj.e_tag.clone(),
    }
}

impl Location for ObjectStoreDir {
    fn root(&self) -> &Path {
        &self.root
    }

    fn head(&self, name: &str) -> io::Result<ObjectMeta> {
        match self.store.object(name) {
            Ok(obj) => Ok(meta_of(&obj)),
            // a missing object in a missing bucket looks the same to a HEAD (no body): one
            // listing of the bucket tells which, and names the bucket when it is the bucket
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(self.store.missing(e)),
            Err(e) => Err(e),
        }
    }

    fn head_many(&self, names: &[&str]) -> Vec<io::Result<ObjectMeta>> {
        let heads = names.iter().map(|name| {
            let obj = RemoteObject::unopened(self.store.clone(), name);
            async move {
                let meta = obj.head().await?;
                Ok(ObjectMeta {
                    size: meta.size,
                    version: meta.e_tag,
                })
            }
        });
        match block_on(
            futures_util::stream::iter(heads)
                .buffered(CONCURRENCY)
                .collect::<Vec<io::Result<ObjectMeta>>>(),
        ) {
            Ok(v) => v,
            Err(e) => names
                .iter()
                .map(|_| Err(io::Error::other(e.to_string())))
                .collect(),
        }
    }

    fn read_ranges(&self, reads: &[RangeRead<'_>]) -> Vec<io::Result<Vec<u8>>> {
        let fetches = reads.iter().map(|r| {
            let obj = RemoteObject::at(self.store.clone(), r.name, r.meta);
            let (offset, len) = (r.offset, r.len);
            async move {
                if offset.checked_add(len).is_none_or(|end| end > obj.size) {
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
                }
                // within the object's size, which the caller bounded
                let mut buf = vec![0u8; len as usize];
                obj.fetch(offset, &mut buf).await?;
                Ok(buf)
            }
        });
        match block_on(
            futures_util::stream::iter(fetches)
                .buffered(CONCURRENCY)
                .collect::<Vec<io::Result<Vec<u8>>>>(),
        ) {
            Ok(v) => v,
            Err(e) => reads
                .iter()
                .map(|_| Err(io::Error::other(e.to_string())))
                .collect(),
        }
    }

    fn open_storage(
        &self,
        name: &str,
        meta: &ObjectMeta,
        access: Access,
        _: bool,
    ) -> io::Result<Box<dyn Storage>> {
        let obj = RemoteObject::at(self.store.clone(), name, meta);
        if access == Access::Memory {
            // the object's own size, as for a local file read into memory
            let mut bytes = vec![0u8; usize::try_from(obj.size).unwrap_or(usize::MAX)];
            obj.read_at(0, &mut bytes)?;
            return Ok(Box::new(Memory::new(bytes)));
        }
        Ok(Box::new(obj))
    }

    fn opening_tail(&self) -> u64 {
        OPENING_TAIL
    }

    fn parallelism(&self) -> usize {
        PARALLELISM
    }

    fn list(&self) -> io::Result<BTreeMap<String, ObjectMeta>> {
        self.store.list()
    }

    fn put(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let mut u = self.store.upload(name);
        u.write_all(bytes)?;
        u.finish()
    }

    fn put_if_absent(&self, name: &str, bytes: &[u8]) -> io::Result<bool> {
        let (location, url) = self.store.locate(name);
        let payload = PutPayload::from(bytes.to_vec());
        self.store.counters.request();
        let put = block_on(self.store.store.put_opts(
            &location,
            payload.clone(),
            PutOptions::from(PutMode::Create),
        ))?;
        match put {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            // a store without conditional writes: a check, then a write
            Err(object_store::Error::NotImplemented { .. }) => match self.head(name) {
                Ok(_) => Ok(false),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.put(name, bytes)?;
                    Ok(true)
                }
                Err(e) => Err(e),
            },
            Err(e) => {
                let e = self.store.explain(&e);
                Err(io::Error::new(e.kind(), format!("PUT {url}: {e}")))
            }
        }
    }

    fn writer(&self, name: &str) -> io::Result<Box<dyn ObjectWriter>> {
        Ok(Box::new(self.store.upload(name)))
    }

    fn delete(&self, name: &str) -> io::Result<()> {
        self.store.remove(name)
    }

    fn remote_stats(&self) -> Option<RemoteStats> {
        Some(self.store.stats())
    }
}

impl ObjectWriter for Upload {
    fn finish(self: Box<Self>) -> io::Result<()> {
        Upload::finish(*self)
    }
}
