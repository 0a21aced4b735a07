//! A dataset directory: a manifest and shards. [`Dataset`] reads one, [`DatasetWriter`] writes one
//! atomically.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{FormatError, Result};
use crate::limits::Limits;
use crate::location::Location;
use crate::manifest::{DATASET_VERSION, FORMAT_NAME, MANIFEST_FILE, Manifest, ShardInfo};
pub use crate::publish::EXTRA_FILES;
use crate::publish::{self, DestLock, Found};
use crate::record::FieldValue;
use crate::schema::Schema;
use crate::shard::{ShardReader, ShardSource, ShardWriter, WriteError, WriteOptions};
use crate::storage::{Access, Memory};

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

    /// Open the shards `manifest` lists in `dir` (a manifest given, not read from `dir`), each
    /// checked against it: what [`Dataset::open_with`] does after reading the manifest, and what
    /// a commit of separately written shards checks before writing their manifest.
    pub(crate) fn open_as(
        dir: PathBuf,
        manifest: Manifest,
        options: OpenOptions,
    ) -> Result<Dataset> {
        let location = crate::locate::locate(&dir, &options.storage_options)?;
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
            .resolve(bytes, crate::storage::physical_memory());
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

/// Buffer of each shard file. Records at least this large bypass it (one `write` each, no copy);
/// smaller ones are gathered into larger writes.
const WRITE_BUFFER: usize = 32 << 10;

/// Options of a [`DatasetWriter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatasetWriteOptions {
    /// Per-shard options (alignment, zstd level).
    pub write: WriteOptions,
    /// A shard is closed once it holds at least this many bytes.
    pub target_shard_bytes: u64,
    /// Replace an existing destination (only once the new dataset is complete).
    pub overwrite: bool,
}

impl Default for DatasetWriteOptions {
    fn default() -> Self {
        DatasetWriteOptions {
            write: WriteOptions::default(),
            target_shard_bytes: 256 << 20,
            overwrite: false,
        }
    }
}

/// Writes a dataset directory: records go to shards of about the target size; [`finish`]
/// writes the manifest and publishes the directory with one rename. Until then everything lives
/// in a hidden staging directory next to the destination, so an interrupted write never leaves
/// something that looks like a dataset; dropping an unfinished writer removes the staging
/// directory.
///
/// [`finish`]: DatasetWriter::finish
#[derive(Debug)]
pub struct DatasetWriter {
    dest: PathBuf,
    target: Target,
    schema: Schema,
    options: DatasetWriteOptions,
    current: Option<(String, ShardWriter<Sink>)>,
    shards: Vec<ShardInfo>,
    classes: Option<Vec<String>>,
    source: serde_json::Value,
    total: u64,
    finished: bool,
    /// `(run, task)` of one writer of a dataset written by many ([`crate::parts`]): its shards'
    /// names.
    part: Option<(String, u64)>,
}

/// Where a [`DatasetWriter`] writes.
#[derive(Debug)]
enum Target {
    /// A local directory: files go to a staging directory, published by rename.
    Local {
        staging: PathBuf,
        /// The claim on the destination, held until the writer is finished or dropped.
        _lock: DestLock,
    },
    /// One writer of a dataset written by many ([`crate::parts`]): shards go straight into
    /// the destination directory, each under a hidden temporary name until it is complete.
    Direct {
        dir: PathBuf,
        /// The shards this writer completed (removed again if it does not finish).
        written: Vec<String>,
    },
    /// Object storage: objects uploaded under the prefix, the manifest last (see
    /// [`crate::remote::RemoteTarget`]).
    #[cfg(feature = "remote")]
    Remote(crate::remote::RemoteTarget),
}

/// Where a shard's bytes go.
#[derive(Debug)]
enum Sink {
    File(BufWriter<File>),
    #[cfg(feature = "remote")]
    Remote(crate::remote::Upload),
}

impl Write for Sink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::File(f) => f.write(data),
            #[cfg(feature = "remote")]
            Sink::Remote(u) => u.write(data),
        }
    }

    fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.write_all(data),
            #[cfg(feature = "remote")]
            Sink::Remote(u) => u.write_all(data),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            #[cfg(feature = "remote")]
            Sink::Remote(u) => u.flush(),
        }
    }
}

/// Remove the staging directories of `dest` left by writers that died (and put back a dataset
/// an interrupted overwrite had moved aside). Does nothing while another writer is writing `dest`.
/// Returns how many directories were removed.
pub fn sweep_stale_staging(dest: &Path) -> usize {
    match DestLock::acquire(dest) {
        Ok(lock) => publish::clean_up(dest, &lock),
        Err(_) => 0,
    }
}

impl DatasetWriter {
    /// Start writing a dataset that will appear at `dest` when finished. `dest` must not exist,
    /// or be an empty directory, unless `options.overwrite`, and even then it must be a stokehold
    /// dataset and nothing else (see [`EXTRA_FILES`]): a directory holding anything else is never
    /// replaced. A second writer of the same destination is refused while this one lives
    /// ([`FormatError::DestinationBusy`]). An object-storage URL (`s3://bucket/prefix`, ...,
    /// with the `remote` feature) is written there, credentials from the environment (see
    /// [`DatasetWriter::create_with`]); any other URL is refused
    /// ([`FormatError::RemoteUnsupported`]).
    pub fn create(
        dest: impl AsRef<Path>,
        schema: Schema,
        options: DatasetWriteOptions,
    ) -> Result<DatasetWriter> {
        Self::create_with(dest, schema, options, &BTreeMap::new())
    }

    /// [`DatasetWriter::create`] with storage options for an object-storage destination (the
    /// same names as [`OpenOptions::storage_options`], plus `upload_part_bytes`; ignored for a
    /// local one). In object storage the manifest is the commit point: shards are uploaded
    /// first (multipart), the manifest last; an unfinished writer deletes what it uploaded
    /// (see `remote::RemoteTarget`).
    pub fn create_with(
        dest: impl AsRef<Path>,
        schema: Schema,
        options: DatasetWriteOptions,
        storage_options: &BTreeMap<String, String>,
    ) -> Result<DatasetWriter> {
        let dest = dest.as_ref().to_path_buf();
        schema.validate()?;
        options.write.validate()?;
        #[cfg(feature = "remote")]
        if crate::location::is_object_store_url(&dest) {
            let url = dest.to_str().ok_or_else(|| FormatError::Remote {
                url: dest.display().to_string(),
                detail: "a URL must be valid UTF-8".into(),
            })?;
            let target =
                crate::remote::RemoteTarget::create(url, storage_options, options.overwrite)?;
            return Ok(Self::new(dest, Target::Remote(target), schema, options));
        }
        let _ = storage_options;
        crate::location::require_local(&dest)?;
        let staging = publish::staging_dir(&dest)?;
        if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| FormatError::io(parent, None, e))?;
        }
        let lock = DestLock::acquire(&dest)?;
        publish::clean_up(&dest, &lock);
        if publish::inspect(&dest)? == Found::Taken {
            if !options.overwrite {
                return Err(FormatError::DestinationExists { path: dest });
            }
            publish::check_replaceable(&dest)?;
        }
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(|e| FormatError::io(&staging, None, e))?;
        }
        fs::create_dir(&staging).map_err(|e| FormatError::io(&staging, None, e))?;
        let target = Target::Local {
            staging,
            _lock: lock,
        };
        Ok(Self::new(dest, target, schema, options))
    }

    /// One writer of the dataset at `dest` written by many (see [`crate::parts`]): its shards
    /// are named after `run` and `task` and written straight into `dest` (a directory that
    /// [`crate::parts::prepare_parts`] made) or uploaded under the URL; no manifest.
    pub(crate) fn create_part(
        dest: &Path,
        schema: Schema,
        options: DatasetWriteOptions,
        storage_options: &BTreeMap<String, String>,
        run: &str,
        task: u64,
    ) -> Result<DatasetWriter> {
        schema.validate()?;
        options.write.validate()?;
        crate::parts::check_run(run)?;
        let part = Some((run.to_string(), task));
        #[cfg(feature = "remote")]
        if crate::location::is_object_store_url(dest) {
            let url = crate::parts::url_str(dest)?;
            let target = crate::remote::RemoteTarget::for_part(url, storage_options, run)?;
            let mut w = Self::new(dest.to_path_buf(), Target::Remote(target), schema, options);
            w.part = part;
            return Ok(w);
        }
        let _ = storage_options;
        crate::location::require_local(dest)?;
        if !dest.is_dir() {
            return Err(FormatError::io(
                dest,
                None,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the destination directory does not exist (the job's start makes it)",
                ),
            ));
        }
        let target = Target::Direct {
            dir: dest.to_path_buf(),
            written: Vec::new(),
        };
        let mut w = Self::new(dest.to_path_buf(), target, schema, options);
        w.part = part;
        Ok(w)
    }

    /// Close the last shard of a part writer and return the shards it wrote, in order (for
    /// [`crate::parts::commit_parts`]).
    pub(crate) fn finish_part(mut self) -> Result<Vec<ShardInfo>> {
        self.close_shard()?;
        self.finished = true;
        Ok(std::mem::take(&mut self.shards))
    }

    fn new(
        dest: PathBuf,
        target: Target,
        schema: Schema,
        options: DatasetWriteOptions,
    ) -> DatasetWriter {
        DatasetWriter {
            dest,
            target,
            schema,
            options,
            current: None,
            shards: Vec::new(),
            classes: None,
            source: serde_json::Value::Null,
            total: 0,
            finished: false,
            part: None,
        }
    }

    /// The staging directory of a local destination.
    fn local_staging(&self) -> Option<&Path> {
        match &self.target {
            Target::Local { staging, .. } => Some(staging),
            Target::Direct { .. } => None,
            #[cfg(feature = "remote")]
            Target::Remote(_) => None,
        }
    }

    /// Where the file or object `name` of the dataset being written lies now (for errors).
    fn place(&self, name: &str) -> PathBuf {
        match &self.target {
            Target::Local { staging, .. } => staging.join(name),
            Target::Direct { dir, .. } => dir.join(name),
            #[cfg(feature = "remote")]
            Target::Remote(t) => t.url_of(name).into(),
        }
    }

    /// The schema being written.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Samples written so far.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// Set the class-name table (label → name).
    pub fn set_classes(&mut self, classes: Vec<String>) {
        self.classes = Some(classes);
    }

    /// Set the manifest's free-form `source` description.
    pub fn set_source(&mut self, source: serde_json::Value) {
        self.source = source;
    }

    /// Add a small extra file (`skipped.txt`, ...) to the dataset directory; it is published
    /// together with the shards. `name` must be one of [`EXTRA_FILES`] (so that a dataset
    /// directory holds nothing a writer could not recognise when asked to replace it).
    pub fn add_file(&mut self, name: &str, contents: &[u8]) -> Result<()> {
        if !EXTRA_FILES.contains(&name) {
            return Err(FormatError::Schema(format!(
                "{name:?} is not a dataset's extra file (one of {EXTRA_FILES:?})"
            )));
        }
        match &mut self.target {
            Target::Local { staging: dir, .. } | Target::Direct { dir, .. } => {
                let path = dir.join(name);
                fs::write(&path, contents).map_err(|e| FormatError::io(&path, None, e))
            }
            #[cfg(feature = "remote")]
            Target::Remote(t) => t.put_small(name, contents),
        }
    }

    fn shard(&mut self) -> Result<&mut ShardWriter<Sink>> {
        if self.current.is_none() {
            let k = self.shards.len();
            let part_name = self
                .part
                .as_ref()
                .map(|(run, task)| crate::parts::shard_name(run, *task, k));
            let file = |path: PathBuf| {
                let f = File::create(&path).map_err(|e| FormatError::io(&path, None, e))?;
                Ok::<_, FormatError>(Sink::File(BufWriter::with_capacity(WRITE_BUFFER, f)))
            };
            let (name, sink) = match &self.target {
                Target::Local { staging, .. } => {
                    let name = format!("shard-{k:06}.skh");
                    let sink = file(staging.join(&name))?;
                    (name, sink)
                }
                Target::Direct { dir, .. } => {
                    let name = part_name.unwrap_or_else(|| format!("shard-{k:06}.skh"));
                    let sink = file(dir.join(crate::parts::temp_name(&name)))?;
                    (name, sink)
                }
                #[cfg(feature = "remote")]
                Target::Remote(t) => {
                    let name = part_name.unwrap_or_else(|| t.shard_name(k));
                    let upload = t.upload(&name);
                    (name, Sink::Remote(upload))
                }
            };
            let w = ShardWriter::new(sink, self.schema.clone(), self.options.write)
                .map_err(|e| FormatError::io(self.place(&name), None, e))?;
            self.current = Some((name, w));
        }
        Ok(&mut self.current.as_mut().expect("just set").1)
    }

    fn map_write_error(&self, e: WriteError) -> FormatError {
        match e {
            WriteError::Value(source) => FormatError::InvalidValue {
                sample: self.total,
                source,
            },
            WriteError::Io(e) => {
                let name = self.current.as_ref().map(|c| c.0.as_str()).unwrap_or("");
                FormatError::io(self.place(name), None, e)
            }
        }
    }

    /// Append one sample (one value per schema field, in order). Returns its global index.
    pub fn write(&mut self, values: &[FieldValue<'_>]) -> Result<u64> {
        let r = self.shard()?.write(values);
        self.after_write(r)
    }

    /// Append one sample whose record is already encoded for this schema.
    pub fn write_encoded(&mut self, record: &[u8]) -> Result<u64> {
        let r = self.shard()?.write_encoded(record);
        self.after_write(r)
    }

    fn after_write(&mut self, r: Result<u64, WriteError>) -> Result<u64> {
        r.map_err(|e| self.map_write_error(e))?;
        let index = self.total;
        self.total += 1;
        let full = self
            .current
            .as_ref()
            .is_some_and(|(_, w)| w.bytes_written() >= self.options.target_shard_bytes);
        if full {
            self.close_shard()?;
        }
        Ok(index)
    }

    fn close_shard(&mut self) -> Result<()> {
        let Some((name, w)) = self.current.take() else {
            return Ok(());
        };
        let path = self.place(&name);
        let io = |e| FormatError::io(&path, None, e);
        let (sink, summary) = w.finish().map_err(io)?;
        match (sink, &mut self.target) {
            (Sink::File(bw), target) => {
                let f = bw.into_inner().map_err(|e| io(e.into_error()))?;
                f.sync_all().map_err(io)?;
                if let Target::Direct { dir, written } = target {
                    // complete: under its own name (replacing an earlier attempt's)
                    let temp = dir.join(crate::parts::temp_name(&name));
                    fs::rename(&temp, &path).map_err(io)?;
                    written.push(name.clone());
                }
            }
            #[cfg(feature = "remote")]
            (Sink::Remote(upload), Target::Remote(t)) => {
                upload.finish().map_err(io)?;
                t.completed(name.clone());
            }
            #[cfg(feature = "remote")]
            (Sink::Remote(_), Target::Local { .. } | Target::Direct { .. }) => {
                unreachable!("sinks follow the target")
            }
        }
        self.shards.push(ShardInfo {
            file: name,
            records: summary.records,
            bytes: summary.bytes,
            crc32c: summary.crc32c,
        });
        Ok(())
    }

    /// Close the last shard, write the manifest, and publish the dataset at its destination with
    /// one rename. Returns the manifest.
    pub fn finish(mut self) -> Result<Manifest> {
        self.close_shard()?;
        let manifest = Manifest {
            format: FORMAT_NAME.to_string(),
            format_version: DATASET_VERSION,
            schema: self.schema.clone(),
            total_records: self.total,
            shards: std::mem::take(&mut self.shards),
            classes: self.classes.take(),
            align: self.options.write.align,
            source: std::mem::take(&mut self.source),
        };
        #[cfg(feature = "remote")]
        if let Target::Remote(t) = &mut self.target {
            t.commit(&manifest)?;
            self.finished = true;
            return Ok(manifest);
        }
        let Some(staging) = self.local_staging() else {
            return Err(FormatError::Schema(
                "a part writer writes no manifest: its shards are committed with commit_parts"
                    .into(),
            ));
        };
        let mpath = staging.join(MANIFEST_FILE);
        let io = |p: &Path, e| FormatError::io(p, None, e);
        {
            let mut f = File::create(&mpath).map_err(|e| io(&mpath, e))?;
            f.write_all(manifest.to_json().as_bytes())
                .map_err(|e| io(&mpath, e))?;
            f.sync_all().map_err(|e| io(&mpath, e))?;
        }
        sync_dir(staging)?;
        self.publish(staging)?;
        self.finished = true;
        Ok(manifest)
    }

    fn publish(&self, staging: &Path) -> Result<()> {
        publish::publish(staging, &self.dest, self.options.overwrite)?;
        if let Some(parent) = self.dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent)?;
        }
        Ok(())
    }

    /// Give up: remove the staging directory, or in object storage abort the upload in progress
    /// and delete the objects written. (Dropping the writer does the same.)
    pub fn abort(mut self) {
        self.remove_staging();
    }

    fn remove_staging(&mut self) {
        if !self.finished {
            let current = self.current.take().map(|(name, _)| name);
            match &mut self.target {
                Target::Local { staging, .. } => {
                    let _ = fs::remove_dir_all(&*staging);
                }
                Target::Direct { dir, written } => {
                    if let Some(name) = current {
                        let _ = fs::remove_file(dir.join(crate::parts::temp_name(&name)));
                    }
                    for name in written.drain(..) {
                        let _ = fs::remove_file(dir.join(name));
                    }
                }
                #[cfg(feature = "remote")]
                Target::Remote(t) => t.abort(),
            }
            self.finished = true;
        }
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        self.remove_staging();
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| FormatError::io(dir, None, e))
}

/// Shards held in memory, for tests and for sources that are already in RAM.
pub fn memory_source(bytes: Vec<u8>) -> ShardSource {
    Box::new(Memory::new(bytes))
}
