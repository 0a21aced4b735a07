//! From a dataset's path or URL to its [`Location`]: [`locate`], the one place that tells local
//! storage from remote (above both `location` and `remote`, so that neither imports the other's
//! user), and the manifest read from a path or URL.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::location::{LocalDir, Location, local_path};
use stokehold_format::error::Result;
use stokehold_format::limits::Limits;
use stokehold_format::manifest::{MANIFEST_FILE, Manifest};
use stokehold_format::shard::ShardReader;

/// The location of a dataset's path or URL, with `storage_options` for an object store (ignored
/// for a local path): the one place that tells local storage from remote. A URL of another
/// scheme, or any URL without the `remote` feature, is
/// [`FormatError::RemoteUnsupported`](stokehold_format::FormatError::RemoteUnsupported).
pub fn locate(
    path: &Path,
    storage_options: &BTreeMap<String, String>,
) -> Result<Arc<dyn Location>> {
    if let Some(dir) = local_path(path)? {
        return Ok(Arc::new(LocalDir::new(dir)));
    }
    #[cfg(feature = "remote")]
    return Ok(Arc::new(crate::remote::ObjectStoreDir::open(
        path,
        storage_options,
    )?));
    #[cfg(not(feature = "remote"))]
    {
        let _ = storage_options;
        Err(stokehold_format::FormatError::RemoteUnsupported {
            url: path.display().to_string(),
            scheme: crate::location::url_scheme(path).unwrap_or_default().into(),
        })
    }
}

/// Reading a dataset's manifest through storage: `Manifest::read(location, limits)`,
/// `Manifest::load(dir, limits)`, `Manifest::load_with(dir, limits, storage_options)`.
pub trait ManifestIo: Sized {
    /// Read and validate the manifest of the dataset in `location`, reading at most
    /// `limits.max_manifest_bytes`.
    fn read(location: &dyn Location, limits: &Limits) -> Result<Self>;

    /// Read and validate `dir/manifest.json`, reading at most `limits.max_manifest_bytes`. With
    /// the `remote` feature, `dir` may be a URL (credentials from the environment).
    fn load(dir: &Path, limits: &Limits) -> Result<Self> {
        Self::load_with(dir, limits, &Default::default())
    }

    /// [`ManifestIo::load`] with storage options for a URL (see
    /// [`OpenOptions::storage_options`](crate::OpenOptions::storage_options); ignored for a local
    /// path).
    fn load_with(
        dir: &Path,
        limits: &Limits,
        storage_options: &BTreeMap<String, String>,
    ) -> Result<Self> {
        Self::read(&*locate(dir, storage_options)?, limits)
    }
}

impl ManifestIo for Manifest {
    fn read(location: &dyn Location, limits: &Limits) -> Result<Manifest> {
        let bytes = crate::location::read_small(
            location,
            MANIFEST_FILE,
            limits.max_manifest_bytes,
            "manifest size",
        )?;
        Manifest::parse(&bytes, &location.place(MANIFEST_FILE), limits)
    }
}

/// Opening a shard file: `ShardReader::open(path, limits)`.
pub trait OpenShard: Sized {
    /// Open a shard file with positional reads.
    fn open(path: impl AsRef<Path>, limits: Limits) -> Result<Self>;
}

impl OpenShard for ShardReader {
    fn open(path: impl AsRef<Path>, limits: Limits) -> Result<ShardReader> {
        let path = path.as_ref();
        let f = crate::file::PreadFile::open(path)
            .map_err(|e| stokehold_format::FormatError::io(path, None, e))?;
        ShardReader::from_source(path, Box::new(f), limits)
    }
}
