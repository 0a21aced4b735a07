//! A dataset: a manifest and shards. [`Dataset`] reads one ([`crate::DatasetWriter`] writes
//! one).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::file::Access;
use crate::locate::ManifestIo;
use crate::location::Location;
use stokehold_format::ReadProfile;
use stokehold_format::error::{FormatError, Result};
use stokehold_format::limits::Limits;
use stokehold_format::manifest::{MANIFEST_FILE, Manifest, ShardInfo};
use stokehold_format::record::FieldValue;
use stokehold_format::schema::Schema;
use stokehold_format::shard::ShardReader;
use stokehold_format::tokens::{TokenIndex, TokenMeta};

/// How to open a dataset.
#[derive(Clone, PartialEq, Eq)]
pub struct OpenOptions {
    /// How shards are read: [`Access::Auto`] (default: positional reads, or direct I/O for a
    /// dataset larger than half the RAM), pread, mmap (explicit opt-in: the files must not change
    /// while open; zero-copy [`Dataset::record_slice`]), direct, or memory (every shard read at
    /// open).
    pub access: Access,
    /// Check each record's CRC-32C when it is read (default: on; it costs little next to decoding).
    pub verify_records: bool,
    /// Limits on sizes read from the files.
    pub limits: Limits,
    /// Options of an object store, for a dataset URL (`s3://bucket/prefix`): credentials,
    /// endpoint, region, `retries`, ... named as fsspec users know them (`key`, `secret`,
    /// `token`, `endpoint_url`, `region_name`, `anon`) or as object_store names them
    /// (`aws_region`, `allow_http`, ...). They override the environment. Their values never
    /// appear in `Debug` output or in errors. See docs/storage.md, "Remote storage".
    pub storage_options: BTreeMap<String, String>,
}

impl std::fmt::Debug for OpenOptions {
    // Not derived: storage options hold secrets; only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenOptions")
            .field("access", &self.access)
            .field("verify_records", &self.verify_records)
            .field("limits", &self.limits)
            .field(
                "storage_options",
                &self.storage_options.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl OpenOptions {
    /// Default options with `access`.
    pub fn with_access(access: Access) -> OpenOptions {
        OpenOptions {
            access,
            ..OpenOptions::default()
        }
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            access: Access::Auto,
            verify_records: true,
            limits: Limits::default(),
            storage_options: BTreeMap::new(),
        }
    }
}

/// An open dataset: random access to every sample by its global index.
#[derive(Debug)]
pub struct Dataset {
    dir: PathBuf,
    manifest: Manifest,
    shards: Vec<ShardReader>,
    /// `starts[k]` is the global index of shard k's first record; `starts[shards.len()] == len`.
    starts: Vec<u64>,
    verify: bool,
    access: Access,
    /// Where the shards are read from (None for a dataset assembled from shards opened
    /// elsewhere, until [`Dataset::set_location`]).
    location: Option<Arc<dyn Location>>,
}

impl Dataset {
    /// Open `dir` with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::open_with(dir, OpenOptions::default())
    }

    /// Open `dir`: read the manifest, open and validate every shard's trailer, meta and index, and
    /// check each against the manifest. A URL (`s3://bucket/prefix`) is opened from object
    /// storage when this crate is built with the `remote` feature (see
    /// [`OpenOptions::storage_options`]), and refused ([`FormatError::RemoteUnsupported`])
    /// without it.
    pub fn open_with(dir: impl AsRef<Path>, options: OpenOptions) -> Result<Dataset> {
        let dir = dir.as_ref().to_path_buf();
        let location = crate::locate::locate(&dir, &options.storage_options)?;
        let manifest = Manifest::read(&*location, &options.limits)?;
        Dataset::open_in(location, dir, manifest, options)
    }

    /// Open the shards `manifest` lists in `location` (named `dir` in messages) with
    /// [`Location::open_shards`]: each one's structure read and checked, and read from then on
    /// through the storage the location gives for `options.access` (`Auto` is resolved for the
    /// dataset's size and the machine's memory).
    pub fn open_in(
        location: Arc<dyn Location>,
        dir: PathBuf,
        manifest: Manifest,
        options: OpenOptions,
    ) -> Result<Dataset> {
        let bytes: u64 = manifest.shards.iter().map(|s| s.bytes).sum();
        let access = options
            .access
            .resolve(bytes, crate::file::physical_memory());
        let fallback = options.access == Access::Auto;
        let names: Vec<(&str, PathBuf)> = (0..manifest.shards.len())
            .map(|i| {
                (
                    manifest.shards[i].file.as_str(),
                    manifest.shard_path(&dir, i),
                )
            })
            .collect();
        let shards = location
            .open_shards(&names, &options.limits, access, fallback)?
            .into_iter()
            .zip(&names)
            .map(|((structure, source), (_, path))| {
                ShardReader::from_structure(path, source, structure, options.limits)
            })
            .collect();
        let mut ds = Dataset::from_parts(dir, manifest, shards, options.verify_records)?;
        ds.location = Some(location);
        Ok(ds)
    }

    /// Assemble a dataset from a manifest and already-open shards (for example shards held in
    /// memory), checking each shard against the manifest.
    pub fn from_parts(
        dir: PathBuf,
        manifest: Manifest,
        mut shards: Vec<ShardReader>,
        verify_records: bool,
    ) -> Result<Dataset> {
        if shards.len() != manifest.shards.len() {
            return Err(FormatError::Manifest {
                path: dir.join(MANIFEST_FILE),
                detail: format!(
                    "the manifest lists {} shards, {} were given",
                    manifest.shards.len(),
                    shards.len()
                ),
            });
        }
        let mut starts = Vec::with_capacity(shards.len() + 1);
        let mut total = 0u64;
        for (info, shard) in manifest.shards.iter().zip(shards.iter_mut()) {
            check_against_manifest(&manifest, info, shard)?;
            shard.set_first_global(total);
            starts.push(total);
            total += shard.len();
        }
        starts.push(total);
        let access = shards
            .first()
            .and_then(|s| Access::parse(s.source().kind()))
            .unwrap_or(Access::Pread);
        Ok(Dataset {
            dir,
            manifest,
            shards,
            starts,
            verify: verify_records,
            access,
            location: None,
        })
    }

    /// Record where the shards are read from (its request counts are the dataset's), for a
    /// dataset made [`from_parts`](Self::from_parts).
    pub fn set_location(&mut self, location: Arc<dyn Location>) {
        self.location = Some(location);
    }

    /// The request counts of the object store the dataset is read from; `None` for a local one.
    #[cfg(feature = "remote")]
    pub fn remote_stats(&self) -> Option<crate::remote::RemoteStats> {
        self.location.as_ref().and_then(|l| l.remote_stats())
    }

    /// How the shards' bytes are read, by type (the first shard's [`ReadProfile`]; a local
    /// file's for a dataset without shards): the network for object storage.
    pub fn read_profile(&self) -> ReadProfile {
        self.shards
            .first()
            .map_or(ReadProfile::LocalFile, |s| s.source().profile())
    }

    /// How the shards are read (after the automatic choice).
    pub fn access(&self) -> Access {
        self.access
    }

    /// Total bytes of the shard files.
    pub fn bytes(&self) -> u64 {
        self.manifest.shards.iter().map(|s| s.bytes).sum()
    }

    /// Number of samples.
    #[inline]
    pub fn len(&self) -> u64 {
        self.manifest.total_records
    }

    /// True when the dataset has no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.manifest.schema
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Class names by label, where the dataset has classes.
    pub fn classes(&self) -> Option<&[String]> {
        self.manifest.classes.as_deref()
    }

    /// The dataset's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether reads check each record's CRC-32C (see [`OpenOptions::verify_records`]).
    pub fn verifies_records(&self) -> bool {
        self.verify
    }

    /// The open shards.
    pub fn shards(&self) -> &[ShardReader] {
        &self.shards
    }

    /// Which shard holds sample `i`, and its index in that shard.
    #[inline]
    pub fn locate(&self, i: u64) -> Result<(usize, u64)> {
        if i >= self.len() {
            return Err(FormatError::IndexOutOfRange {
                index: i,
                len: self.len(),
            });
        }
        // starts is sorted; the shard is the last one starting at or before i. Empty shards
        // share a start with their successor and are skipped by taking the last match.
        let k = self.starts.partition_point(|&s| s <= i) - 1;
        Ok((k, i - self.starts[k]))
    }

    /// Read sample `i`'s record bytes into `buf` (one positional read; checksum checked unless
    /// disabled at open).
    pub fn read_record(&self, i: u64, buf: &mut Vec<u8>) -> Result<()> {
        let (k, local) = self.locate(i)?;
        self.shards[k].read_record(local, buf, self.verify)
    }

    /// Sample `i`'s record bytes without a copy, when the dataset was opened with `mmap` (None
    /// otherwise). Not checksummed.
    #[inline]
    pub fn record_slice(&self, i: u64) -> Result<Option<&[u8]>> {
        let (k, local) = self.locate(i)?;
        Ok(self.shards[k].record_slice(local))
    }

    /// Width and height of each image of sample `i`'s list of images `field`, from the shards'
    /// meta blocks (read at open; for Parquet files read in place, from their index): nothing is
    /// read or decoded. `None` where the shard keeps no sizes; an error for a field that is not
    /// a list of images.
    pub fn image_sizes(&self, field: &str, i: u64) -> Result<Option<&[u32]>> {
        match self
            .schema()
            .index_of(field)
            .map(|k| &self.schema().fields[k].ty)
        {
            Some(ty) if ty.is_image_list() => {}
            Some(ty) => {
                return Err(FormatError::Schema(format!(
                    "field {field:?} is {ty}, not a list of images"
                )));
            }
            None => {
                return Err(FormatError::Schema(format!(
                    "no field {field:?} (the fields: {})",
                    self.schema()
                )));
            }
        }
        let (k, local) = self.locate(i)?;
        Ok(self.shards[k]
            .meta()
            .list(field)
            .and_then(|t| t.sizes_of(local)))
    }

    /// Field `field` of sample `i` where reading its record's first `prefix` bytes gives it
    /// (large records of packed shards whose field lies early: not checksummed, see
    /// [`stokehold_format::record::field_from_prefix`]); `None`: read the sample ([`Dataset::get`]).
    pub fn field_from_prefix(
        &self,
        i: u64,
        field: usize,
        prefix: usize,
    ) -> Result<Option<FieldValue<'static>>> {
        let (k, local) = self.locate(i)?;
        self.shards[k].field_from_prefix(local, field, prefix)
    }

    /// Sample `i`, decoded into one value per schema field.
    pub fn get(&self, i: u64) -> Result<Vec<FieldValue<'static>>> {
        let (k, local) = self.locate(i)?;
        let shard = &self.shards[k];
        if let Some(bytes) = shard.record_slice(local) {
            if self.verify {
                shard.record_slice_checked(local)?;
            }
            return Ok(shard
                .decode(local, bytes)?
                .into_iter()
                .map(FieldValue::into_owned)
                .collect());
        }
        let mut buf = Vec::new();
        shard.read_record(local, &mut buf, self.verify)?;
        Ok(shard
            .decode(local, &buf)?
            .into_iter()
            .map(FieldValue::into_owned)
            .collect())
    }

    /// Bytes of memory held for the open dataset's indexes and bookkeeping (not the OS's page
    /// cache or maps).
    pub fn memory_bytes(&self) -> usize {
        let per_shard = std::mem::size_of::<ShardReader>() + std::mem::size_of::<u64>();
        self.shards
            .iter()
            .map(|s| std::mem::size_of_val(s.index()))
            .sum::<usize>()
            + self.shards.len() * per_shard
    }
}

fn check_against_manifest(
    manifest: &Manifest,
    info: &ShardInfo,
    shard: &ShardReader,
) -> Result<()> {
    let mismatch = |what: &str, in_manifest: String, in_shard: String| FormatError::Manifest {
        path: shard.path().to_path_buf(),
        detail: format!(
            "{what} disagrees with the manifest: manifest says {in_manifest}, the shard has {in_shard}"
        ),
    };
    if shard.len() != info.records {
        return Err(mismatch(
            "record count",
            info.records.to_string(),
            shard.len().to_string(),
        ));
    }
    if shard.file_len() != info.bytes {
        return Err(mismatch(
            "file size",
            info.bytes.to_string(),
            shard.file_len().to_string(),
        ));
    }
    if shard.schema() != &manifest.schema {
        return Err(mismatch(
            "schema",
            manifest.schema.to_string(),
            shard.schema().to_string(),
        ));
    }
    if shard.meta().align != manifest.align {
        return Err(mismatch(
            "alignment",
            manifest.align.to_string(),
            shard.meta().align.to_string(),
        ));
    }
    Ok(())
}

/// The token meta of an open dataset ([`TokenMeta::of_dataset`]): `TokenMeta::from_dataset(&ds)`.
pub trait TokenMetaOf: Sized {
    /// The token meta of `ds`, after checking that its schema is the token schema (errors name
    /// the dataset's manifest).
    fn from_dataset(ds: &Dataset) -> Result<Self>;
}

impl TokenMetaOf for TokenMeta {
    fn from_dataset(ds: &Dataset) -> Result<TokenMeta> {
        TokenMeta::of_dataset(ds.manifest(), ds.dir())
    }
}

/// The token index of an open dataset ([`TokenIndex::of_dataset`]):
/// `TokenIndex::from_dataset(&ds, &meta)`.
pub trait TokenIndexOf: Sized {
    /// Index the documents of `ds` with `meta`, checking `meta.total_tokens` against them.
    fn from_dataset(ds: &Dataset, meta: &TokenMeta) -> Result<Self>;
}

impl TokenIndexOf for TokenIndex {
    fn from_dataset(ds: &Dataset, meta: &TokenMeta) -> Result<TokenIndex> {
        TokenIndex::of_dataset(ds.shards(), ds.dir(), meta)
    }
}
