//! Writing a dataset, once for every [`Location`]: [`DatasetWriter`], and the pieces of the
//! protocol that [`crate::parts`] (a dataset written by many writers) shares with it.
//!
//! A writer streams records into shards of about a target size. Each shard is one object written
//! through [`Location::writer`], so it appears only complete (a local temporary file renamed into
//! place, an object-store upload completed). The dataset is then committed in one of two ways:
//! - **staged**, where the location is a local directory ([`Location::directory`]): everything is
//!   written into a hidden staging directory beside the destination, under a lock on the
//!   destination, and published with one rename (see `publish`). Readers see the old dataset or
//!   the new one, never a mix, and a crash leaves nothing that looks like a dataset.
//! - **manifest last**, everywhere else (object storage, memory) and for every dataset written in
//!   parts: objects are written in place under names unique to the writer (`shard-<run>-...`),
//!   so a writer never replaces an object a dataset already lists, and the manifest is the commit
//!   point, written last and only if none exists (unless overwriting). An overwrite leaves the
//!   old dataset readable until the new manifest replaces its own, then deletes its objects.
//!
//! Before writing in place, the destination is checked ([`prepare_in_place`]): a manifest there is
//! an existing dataset (refused unless overwriting, and then it may hold nothing but that
//! dataset); without one, whatever a dead writer left (shards, temporary files, extra files) is
//! deleted; anything else is refused, since a writer never deletes what it cannot tell is its
//! own. A writer that fails, is aborted or is dropped unfinished removes what it wrote.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// List items (images) after which a shard closes: a quarter of what the format allows in one
/// shard (`stokehold_format::MAX_SHARD_LIST_ITEMS`).
pub const SHARD_LIST_ITEMS: u64 = stokehold_format::MAX_SHARD_LIST_ITEMS / 4;

use crate::locate::{ManifestIo, locate};
use crate::location::{LocalDir, Location, ObjectWriter};
pub use crate::publish::EXTRA_FILES;
use crate::publish::{self, DestLock, Found};
use stokehold_format::error::{FormatError, Result};
use stokehold_format::limits::Limits;
use stokehold_format::manifest::{
    DATASET_VERSION, FORMAT_NAME, MANIFEST_FILE, Manifest, ShardInfo,
};
use stokehold_format::record::FieldValue;
use stokehold_format::schema::Schema;
use stokehold_format::shard::{ShardWriter, WriteError, WriteOptions};

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

// ---- names of what writers write ----

/// The longest run tag accepted.
const MAX_RUN: usize = 32;

/// A tag unique to one writer or job: time, process and a counter, hashed to 8 hex digits.
pub(crate) fn run_tag() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.write_u64(COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    format!("{:08x}", h.finish() as u32)
}

/// Refuse a run tag that is not 1 to 32 ASCII letters and digits (it becomes part of names).
pub(crate) fn check_run(run: &str) -> Result<()> {
    if run.is_empty() || run.len() > MAX_RUN || !run.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(FormatError::Schema(format!(
            "run tag {run:?} must be 1 to {MAX_RUN} ASCII letters and digits"
        )));
    }
    Ok(())
}

/// The name of shard `k` of task `task` of run `run` (a dataset written in parts).
pub fn shard_name(run: &str, task: u64, k: usize) -> String {
    format!("shard-{run}-{task:06}-{k:06}.skh")
}

/// The object a local temporary file stands for: `X` of `.X.tmp` or `.X.tmp-<suffix>` (what
/// [`LocalDir`] writes before a rename), or `None`.
fn temporary_of(name: &str) -> Option<&str> {
    let (object, rest) = name.strip_prefix('.')?.rsplit_once(".tmp")?;
    (rest.is_empty() || rest.starts_with('-')).then_some(object)
}

fn is_shard(name: &str) -> bool {
    name.starts_with("shard-") && name.ends_with(".skh") && !name.contains('/')
}

/// Whether `name` is something a dataset writer writes (the manifest, a shard, an extra file, or
/// a temporary file of one of them): what a writer may find at its destination and delete.
pub(crate) fn writer_made(name: &str) -> bool {
    let made = |n: &str| n == MANIFEST_FILE || EXTRA_FILES.contains(&n) || is_shard(n);
    made(name) || temporary_of(name).is_some_and(made)
}

/// Whether `name` is a shard of run `run`, or a temporary file of one.
pub(crate) fn of_run(name: &str, run: &str) -> bool {
    let shard = |n: &str| is_shard(n) && n.starts_with(&format!("shard-{run}-"));
    shard(name) || temporary_of(name).is_some_and(shard)
}

// ---- the protocol's steps, on any location ----

fn io_at(location: &dyn Location, name: &str) -> impl Fn(std::io::Error) -> FormatError {
    let place = location.place(name);
    move |e| FormatError::io(&place, None, e)
}

fn not_ours(location: &dyn Location, name: &str) -> FormatError {
    FormatError::NotReplaceable {
        path: location.root().to_path_buf(),
        reason: format!(
            "it holds {name:?}, which is not part of a stokehold dataset: choose an empty \
             directory or prefix (a writer never deletes what it did not write)"
        ),
    }
}

/// Check a destination written in place and clear it (see the module documentation). Returns the
/// names of the objects of the dataset an overwrite replaces (deleted by [`commit_manifest`]'s
/// caller once the new manifest is there), empty when there is none.
pub(crate) fn prepare_in_place(location: &dyn Location, overwrite: bool) -> Result<Vec<String>> {
    if let Some(dir) = location.directory() {
        // a local directory: made if missing; nothing in it that is not a file
        match fs::symlink_metadata(dir) {
            Ok(m) if !m.is_dir() => {
                return Err(FormatError::DestinationExists {
                    path: dir.to_path_buf(),
                });
            }
            Ok(_) => {
                for e in fs::read_dir(dir).map_err(|e| FormatError::io(dir, None, e))? {
                    let e = e.map_err(|e| FormatError::io(dir, None, e))?;
                    if !e.file_type().is_ok_and(|t| t.is_file()) {
                        return Err(not_ours(location, &e.file_name().to_string_lossy()));
                    }
                }
            }
            Err(_) => fs::create_dir_all(dir).map_err(|e| FormatError::io(dir, None, e))?,
        }
    }
    let names: BTreeSet<String> = location
        .list()
        .map_err(|e| FormatError::io(location.root(), None, e))?
        .into_keys()
        .collect();
    if names.contains(MANIFEST_FILE) {
        if !overwrite {
            return Err(FormatError::DestinationExists {
                path: location.root().to_path_buf(),
            });
        }
        let old = Manifest::read(location, &Limits::default())?;
        let listed: BTreeSet<&str> = old.shards.iter().map(|s| s.file.as_str()).collect();
        if let Some(foreign) = names
            .iter()
            .find(|n| !listed.contains(n.as_str()) && !writer_made(n))
        {
            return Err(not_ours(location, foreign));
        }
        return Ok(names.into_iter().collect());
    }
    if let Some(foreign) = names.iter().find(|n| !writer_made(n)) {
        return Err(not_ours(location, foreign));
    }
    // a writer that died before its manifest: nothing lists these objects
    for name in &names {
        location.delete(name).map_err(io_at(location, name))?;
    }
    Ok(Vec::new())
}

/// The commit point of a dataset written in place: its manifest, written only if none exists
/// (unless `overwrite`), whole or not at all.
pub(crate) fn commit_manifest(
    location: &dyn Location,
    manifest: &Manifest,
    overwrite: bool,
) -> Result<()> {
    let json = manifest.to_json();
    let io = io_at(location, MANIFEST_FILE);
    if overwrite {
        location.put(MANIFEST_FILE, json.as_bytes()).map_err(io)
    } else if location
        .put_if_absent(MANIFEST_FILE, json.as_bytes())
        .map_err(io)?
    {
        Ok(())
    } else {
        Err(FormatError::DestinationExists {
            path: location.root().to_path_buf(),
        })
    }
}

/// Refuse an extra file that is not one of [`EXTRA_FILES`].
pub(crate) fn check_extra_file(name: &str) -> Result<()> {
    if EXTRA_FILES.contains(&name) {
        return Ok(());
    }
    Err(FormatError::Schema(format!(
        "{name:?} is not a dataset's extra file (one of {EXTRA_FILES:?})"
    )))
}

// ---- one writer ----

/// Writes a dataset: records go to shards of about the target size; [`finish`] writes the
/// manifest and publishes the dataset (see the module documentation for how, locally and in
/// object storage). Until then nothing at the destination looks like a dataset; dropping an
/// unfinished writer removes what it wrote.
///
/// [`finish`]: DatasetWriter::finish
#[derive(Debug)]
pub struct DatasetWriter {
    /// Where the objects go: the staging directory, or the destination itself.
    location: Arc<dyn Location>,
    publish: Publish,
    /// Shard `k` is named `{shard_prefix}{k:06}.skh`.
    shard_prefix: String,
    schema: Schema,
    options: DatasetWriteOptions,
    current: Option<(String, ShardWriter<Box<dyn ObjectWriter>>)>,
    /// The objects this writer completed (written in place: deleted again if it does not finish).
    written: Vec<String>,
    shards: Vec<ShardInfo>,
    classes: Option<Vec<String>>,
    source: serde_json::Value,
    total: u64,
    finished: bool,
}

/// How a [`DatasetWriter`]'s dataset becomes visible.
#[derive(Debug)]
enum Publish {
    /// A local directory: the staging directory (the writer's location) renamed to `dest`.
    Staged {
        dest: PathBuf,
        /// The claim on the destination, held until the writer is finished or dropped.
        _lock: DestLock,
    },
    /// In place, the manifest last; `replaced` are the objects of the dataset an overwrite
    /// replaces.
    ManifestLast {
        overwrite: bool,
        replaced: Vec<String>,
    },
    /// One writer of a dataset written by many: no manifest ([`crate::parts::commit_parts`]
    /// writes it).
    Part,
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
    /// replaced. A second writer of the same local destination is refused while this one lives
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
    /// same names as [`OpenOptions::storage_options`](crate::OpenOptions::storage_options), plus
    /// `upload_part_bytes`; ignored for a local one).
    pub fn create_with(
        dest: impl AsRef<Path>,
        schema: Schema,
        options: DatasetWriteOptions,
        storage_options: &BTreeMap<String, String>,
    ) -> Result<DatasetWriter> {
        let dest = dest.as_ref();
        schema.validate()?;
        options.write.validate()?;
        Self::create_in(locate(dest, storage_options)?, schema, options)
    }

    /// Start writing a dataset at `location`: staged and renamed where it is a local directory,
    /// in place with the manifest last anywhere else (see the module documentation).
    pub fn create_in(
        location: Arc<dyn Location>,
        schema: Schema,
        options: DatasetWriteOptions,
    ) -> Result<DatasetWriter> {
        schema.validate()?;
        options.write.validate()?;
        if let Some(dest) = location.directory() {
            return Self::staged(dest, schema, options);
        }
        let replaced = prepare_in_place(&*location, options.overwrite)?;
        let publish = Publish::ManifestLast {
            overwrite: options.overwrite,
            replaced,
        };
        let prefix = format!("shard-{}-", run_tag());
        Ok(Self::new(location, publish, prefix, schema, options))
    }

    /// A writer of the local directory `dest`, through a staging directory beside it.
    fn staged(dest: &Path, schema: Schema, options: DatasetWriteOptions) -> Result<DatasetWriter> {
        let staging = publish::staging_dir(dest)?;
        if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| FormatError::io(parent, None, e))?;
        }
        let lock = DestLock::acquire(dest)?;
        publish::clean_up(dest, &lock);
        if publish::inspect(dest)? == Found::Taken {
            if !options.overwrite {
                return Err(FormatError::DestinationExists {
                    path: dest.to_path_buf(),
                });
            }
            publish::check_replaceable(dest)?;
        }
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(|e| FormatError::io(&staging, None, e))?;
        }
        fs::create_dir(&staging).map_err(|e| FormatError::io(&staging, None, e))?;
        let publish = Publish::Staged {
            dest: dest.to_path_buf(),
            _lock: lock,
        };
        let location = Arc::new(LocalDir::new(staging));
        Ok(Self::new(
            location,
            publish,
            "shard-".into(),
            schema,
            options,
        ))
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
        check_run(run)?;
        let location = locate(dest, storage_options)?;
        if location.directory().is_some_and(|d| !d.is_dir()) {
            return Err(FormatError::io(
                dest,
                None,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the destination directory does not exist (the job's start makes it)",
                ),
            ));
        }
        let prefix = format!("shard-{run}-{task:06}-");
        debug_assert_eq!(format!("{prefix}{:06}.skh", 0), shard_name(run, task, 0));
        Ok(Self::new(location, Publish::Part, prefix, schema, options))
    }

    /// Close the last shard of a part writer and return the shards it wrote, in order (for
    /// [`crate::parts::commit_parts`]).
    pub(crate) fn finish_part(mut self) -> Result<Vec<ShardInfo>> {
        self.close_shard()?;
        self.finished = true;
        Ok(std::mem::take(&mut self.shards))
    }

    fn new(
        location: Arc<dyn Location>,
        publish: Publish,
        shard_prefix: String,
        schema: Schema,
        options: DatasetWriteOptions,
    ) -> DatasetWriter {
        DatasetWriter {
            location,
            publish,
            shard_prefix,
            schema,
            options,
            current: None,
            written: Vec::new(),
            shards: Vec::new(),
            classes: None,
            source: serde_json::Value::Null,
            total: 0,
            finished: false,
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

    /// Add a small extra file (`skipped.txt`, ...) to the dataset; it is published together with
    /// the shards. `name` must be one of [`EXTRA_FILES`] (so that a dataset holds nothing a
    /// writer could not recognise when asked to replace it).
    pub fn add_file(&mut self, name: &str, contents: &[u8]) -> Result<()> {
        check_extra_file(name)?;
        self.location
            .put(name, contents)
            .map_err(io_at(&*self.location, name))?;
        self.written.push(name.to_string());
        Ok(())
    }

    fn shard(&mut self) -> Result<&mut ShardWriter<Box<dyn ObjectWriter>>> {
        if self.current.is_none() {
            let name = format!("{}{:06}.skh", self.shard_prefix, self.shards.len());
            let io = io_at(&*self.location, &name);
            let sink = self.location.writer(&name).map_err(&io)?;
            let w = ShardWriter::new(sink, self.schema.clone(), self.options.write).map_err(io)?;
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
                io_at(&*self.location, name)(e)
            }
            // a kind the format may add later: a failure of the current shard's write
            other => {
                let name = self.current.as_ref().map(|c| c.0.as_str()).unwrap_or("");
                io_at(&*self.location, name)(std::io::Error::other(other.to_string()))
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
        let full = self.current.as_ref().is_some_and(|(_, w)| {
            // a list of images keeps each image's size in the meta block: a shard closes
            // long before that table nears the meta block's limit
            w.bytes_written() >= self.options.target_shard_bytes
                || w.list_items_written() >= SHARD_LIST_ITEMS
        });
        if full {
            self.close_shard()?;
        }
        Ok(index)
    }

    fn close_shard(&mut self) -> Result<()> {
        let Some((name, w)) = self.current.take() else {
            return Ok(());
        };
        let io = io_at(&*self.location, &name);
        let (sink, summary) = w.finish().map_err(&io)?;
        // complete: under its own name (replacing an earlier attempt's)
        sink.finish().map_err(io)?;
        self.written.push(name.clone());
        self.shards.push(ShardInfo {
            file: name,
            records: summary.records,
            bytes: summary.bytes,
            crc32c: summary.crc32c,
        });
        Ok(())
    }

    /// Close the last shard, write the manifest, and publish the dataset at its destination.
    /// Returns the manifest.
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
        let location = &*self.location;
        match &mut self.publish {
            Publish::Staged { dest, .. } => {
                let staging = location.root();
                location
                    .put(MANIFEST_FILE, manifest.to_json().as_bytes())
                    .map_err(io_at(location, MANIFEST_FILE))?;
                sync_dir(staging)?;
                publish::publish(staging, dest, self.options.overwrite)?;
                if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
                    sync_dir(parent)?;
                }
                self.finished = true;
            }
            Publish::ManifestLast {
                overwrite,
                replaced,
            } => {
                commit_manifest(location, &manifest, *overwrite)?;
                // committed: from here on, what was written is the dataset's
                self.finished = true;
                let keep: BTreeSet<&str> = manifest
                    .shards
                    .iter()
                    .map(|s| s.file.as_str())
                    .chain(self.written.iter().map(String::as_str))
                    .chain([MANIFEST_FILE])
                    .collect();
                for name in std::mem::take(replaced) {
                    if !keep.contains(name.as_str()) {
                        location.delete(&name).map_err(io_at(location, &name))?;
                    }
                }
            }
            Publish::Part => {
                return Err(FormatError::Schema(
                    "a part writer writes no manifest: its shards are committed with commit_parts"
                        .into(),
                ));
            }
        }
        Ok(manifest)
    }

    /// Give up: remove the staging directory, or what was written in place (an object being
    /// written is abandoned: it never appears). Dropping the writer does the same.
    pub fn abort(mut self) {
        self.remove_written();
    }

    fn remove_written(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        drop(self.current.take());
        match &self.publish {
            Publish::Staged { .. } => {
                let _ = fs::remove_dir_all(self.location.root());
            }
            // a store that refuses the deletes leaves them to the destination's next writer,
            // which removes a dead writer's leftovers
            Publish::ManifestLast { .. } | Publish::Part => {
                for name in self.written.drain(..) {
                    let _ = self.location.delete(&name);
                }
            }
        }
    }
}

impl Drop for DatasetWriter {
    fn drop(&mut self) {
        self.remove_written();
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| FormatError::io(dir, None, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_a_run_are_told_apart() {
        let name = shard_name("ab12", 3, 7);
        assert_eq!(name, "shard-ab12-000003-000007.skh");
        assert!(of_run(&name, "ab12"));
        assert!(of_run(&format!(".{name}.tmp"), "ab12"));
        assert!(of_run(&format!(".{name}.tmp-123-4"), "ab12"));
        assert!(!of_run(&format!(".{name}.tmpx"), "ab12"));
        assert!(!of_run(&name, "ab1"));
        assert!(!of_run("shard-000001.skh", "ab12"));
        assert!(!of_run(MANIFEST_FILE, "ab12"));
        assert!(writer_made(&format!(".{name}.tmp-9-0")) && writer_made("tokenizer.json"));
        assert!(writer_made(".manifest.json.tmp-9-0"));
        assert!(!writer_made("notes.txt") && !writer_made(".shard-x.skh.bak"));
        assert!(!writer_made(".notes.txt.tmp") && !writer_made("shard-a/b.skh"));
        for bad in ["", "a-b", "../x", "a/b", &"x".repeat(33)] {
            assert!(check_run(bad).is_err(), "{bad:?}");
        }
        check_run("0123abcdEF").unwrap();
    }
}
