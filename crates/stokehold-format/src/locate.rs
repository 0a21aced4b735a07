//! From a dataset's path or URL to its [`Location`]: [`locate`], the one place that tells local
//! storage from remote (above both `location` and `remote`, so that neither imports the other's
//! user), and the manifest read from a path or URL.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::Result;
use crate::limits::Limits;
use crate::location::{LocalDir, Location, local_path};
use crate::manifest::Manifest;

/// The location of a dataset's path or URL, with `storage_options` for an object store (ignored
/// for a local path): the one place that tells local storage from remote. A URL of another
/// scheme, or any URL without the `remote` feature, is
/// [`FormatError::RemoteUnsupported`](crate::FormatError::RemoteUnsupported).
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
        Err(crate::FormatError::RemoteUnsupported {
            url: path.display().to_string(),
            scheme: crate::location::url_scheme(path).unwrap_or_default().into(),
        })
    }
}

impl Manifest {
    /// Read and validate `dir/manifest.json`, reading at most `limits.max_manifest_bytes`. With
    /// the `remote` feature, `dir` may be a URL (credentials from the environment).
    pub fn load(dir: &Path, limits: &Limits) -> Result<Manifest> {
        Self::load_with(dir, limits, &Default::default())
    }

    /// [`Manifest::load`] with storage options for a URL (see
    /// [`OpenOptions::storage_options`](crate::OpenOptions::storage_options); ignored for a local
    /// path).
    pub fn load_with(
        dir: &Path,
        limits: &Limits,
        storage_options: &BTreeMap<String, String>,
    ) -> Result<Manifest> {
        Manifest::read(&*locate(dir, storage_options)?, limits)
    }
}
