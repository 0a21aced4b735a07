//! Datasets written by many writers at once (the tasks of a Ray Data job, ...): each writer
//! writes shards of its own straight into the destination, and one commit writes the manifest
//! that lists them. docs/format.md §1 ("Datasets written by many writers") is the contract.
//!
//! **Protocol.**
//! 1. [`prepare_parts`], once, before any writer: checks the destination (no dataset there,
//!    nothing that is not a dataset writer's), removes a dead job's leftovers, makes the
//!    directory, and returns the job's *run* tag.
//! 2. [`PartWriter`], one per task: writes shards named `shard-<run>-<task>-<k>.skh` (task and
//!    shard numbers of six digits or more), so a retried task writes the same names again and
//!    its shards replace the earlier attempt's (last writer wins, no duplicate records).
//!    Locally a shard is written under a hidden temporary name (`.NAME.tmp`) and renamed when
//!    complete; in object storage it is one (multipart) upload, which appears only complete.
//!    [`PartWriter::finish`] returns the shards' [`ShardInfo`]s; a writer dropped unfinished
//!    removes what it wrote.
//! 3. [`commit_parts`], once, with every task's shards in the order they are to be read: opens
//!    each listed shard and checks its trailer, size, schema and alignment against its
//!    `ShardInfo`, removes the run's files that are not listed (an attempt killed mid-shard),
//!    writes the extra files, then the manifest, the commit point: locally a temporary file
//!    fsynced and hard-linked to `manifest.json` (which fails if one exists), in object storage
//!    a PUT that succeeds only if no manifest exists (where the store supports it).
//! 4. [`abort_parts`] on failure: removes every file of the run, so no manifest and no shards
//!    remain.
//!
//! Unlike [`DatasetWriter`], the local destination is written in place (many processes, maybe
//! on many nodes of a shared file system, write it), so there is no staging directory and no
//! destination lock: one job per destination at a time is the caller's to ensure.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::dataset::{Dataset, DatasetWriteOptions, DatasetWriter, OpenOptions};
use crate::error::{FormatError, Result};
use crate::manifest::{DATASET_VERSION, FORMAT_NAME, MANIFEST_FILE, Manifest, ShardInfo};
use crate::publish::EXTRA_FILES;
use crate::record::FieldValue;
use crate::schema::Schema;

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

/// Refuse a run tag that is not 1 to 32 ASCII letters and digits (it becomes part of file
/// names).
pub(crate) fn check_run(run: &str) -> Result<()> {
    if run.is_empty() || run.len() > MAX_RUN || !run.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(FormatError::Schema(format!(
            "run tag {run:?} must be 1 to {MAX_RUN} ASCII letters and digits"
        )));
    }
    Ok(())
}

/// The name of shard `k` of task `task` of run `run`.
pub fn shard_name(run: &str, task: u64, k: usize) -> String {
    format!("shard-{run}-{task:06}-{k:06}.skh")
}

/// The hidden name a shard is written under locally until it is complete.
pub(crate) fn temp_name(name: &str) -> String {
    format!(".{name}.tmp")
}

/// Whether `name` is a file of run `run`: one of its shards or a shard's temporary file.
fn of_run(name: &str, run: &str) -> bool {
    let shard = |n: &str| n.starts_with(&format!("shard-{run}-")) && n.ends_with(".skh");
    shard(name)
        || name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .is_some_and(shard)
}

/// Whether `name` is something a dataset writer writes (the manifest, a shard, a shard's
/// temporary file, an extra file): what [`prepare_parts`] may find and remove.
fn writer_made(name: &str) -> bool {
    let shard = |n: &str| n.starts_with("shard-") && n.ends_with(".skh") && !n.contains('/');
    name == MANIFEST_FILE
        || EXTRA_FILES.contains(&name)
        || shard(name)
        || name
            .strip_prefix('.')
            .and_then(|n| n.strip_suffix(".tmp"))
            .is_some_and(shard)
}

/// A URL path as a string.
#[cfg(feature = "remote")]
pub(crate) fn url_str(dest: &Path) -> Result<&str> {
    dest.to_str().ok_or_else(|| FormatError::Remote {
        url: dest.display().to_string(),
        detail: "a URL must be valid UTF-8".into(),
    })
}

#[cfg(feature = "remote")]
fn remote_target(
    dest: &Path,
    storage_options: &BTreeMap<String, String>,
    run: &str,
) -> Result<Option<crate::remote::RemoteTarget>> {
    if !crate::location::is_object_store_url(dest) {
        return Ok(None);
    }
    crate::remote::RemoteTarget::for_part(url_str(dest)?, storage_options, run).map(Some)
}

/// Start a job that writes the dataset at `dest` with many [`PartWriter`]s: check the
/// destination (it must not hold a dataset, and may hold nothing a dataset writer does not
/// write), remove the leftovers of a job that died before its commit, make the directory, and
/// return a new run tag for the job's writers.
pub fn prepare_parts(dest: &Path, storage_options: &BTreeMap<String, String>) -> Result<String> {
    #[cfg(feature = "remote")]
    if crate::location::is_object_store_url(dest) {
        let target = crate::remote::RemoteTarget::create(url_str(dest)?, storage_options, false)?;
        return Ok(target.run().to_string());
    }
    let _ = storage_options;
    crate::location::require_local(dest)?;
    if dest.join(MANIFEST_FILE).exists() {
        return Err(FormatError::DestinationExists {
            path: dest.to_path_buf(),
        });
    }
    match fs::symlink_metadata(dest) {
        Ok(m) if !m.is_dir() => {
            return Err(FormatError::DestinationExists {
                path: dest.to_path_buf(),
            });
        }
        Ok(_) => {}
        Err(_) => fs::create_dir_all(dest).map_err(|e| FormatError::io(dest, None, e))?,
    }
    let names = local_names(dest)?;
    if let Some(foreign) = names.iter().find(|n| !writer_made(n)) {
        return Err(FormatError::NotReplaceable {
            path: dest.to_path_buf(),
            reason: format!(
                "it holds {foreign:?}, which is not part of a stokehold dataset: choose an empty \
                 directory (a writer never deletes files it did not write)"
            ),
        });
    }
    // a job that died before its manifest: nothing lists these files
    for name in &names {
        let path = dest.join(name);
        fs::remove_file(&path).map_err(|e| FormatError::io(&path, None, e))?;
    }
    Ok(run_tag())
}

/// The names of the entries of the directory `dir`.
fn local_names(dir: &Path) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for e in fs::read_dir(dir).map_err(|e| FormatError::io(dir, None, e))? {
        let e = e.map_err(|e| FormatError::io(dir, None, e))?;
        names.insert(e.file_name().to_string_lossy().into_owned());
    }
    Ok(names)
}

/// One task's writer of a dataset written by many (see the module documentation): shards named
/// after the run and the task, no manifest.
#[derive(Debug)]
pub struct PartWriter {
    inner: DatasetWriter,
}

impl PartWriter {
    /// Start writing task `task`'s shards of run `run` (from [`prepare_parts`]) into `dest`.
    /// Shards close at `options.target_shard_bytes`; `options.overwrite` does not apply.
    pub fn create(
        dest: impl AsRef<Path>,
        schema: Schema,
        options: DatasetWriteOptions,
        storage_options: &BTreeMap<String, String>,
        run: &str,
        task: u64,
    ) -> Result<PartWriter> {
        let inner =
            DatasetWriter::create_part(dest.as_ref(), schema, options, storage_options, run, task)?;
        Ok(PartWriter { inner })
    }

    /// The schema being written.
    pub fn schema(&self) -> &Schema {
        self.inner.schema()
    }

    /// Samples written so far.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// True before the first sample.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Append one sample (one value per schema field, in order). Returns its index among this
    /// writer's samples.
    pub fn write(&mut self, values: &[FieldValue<'_>]) -> Result<u64> {
        self.inner.write(values)
    }

    /// Append one sample whose record is already encoded for this schema.
    pub fn write_encoded(&mut self, record: &[u8]) -> Result<u64> {
        self.inner.write_encoded(record)
    }

    /// Close the last shard; returns the shards written, in order (none for no samples).
    pub fn finish(self) -> Result<Vec<ShardInfo>> {
        self.inner.finish_part()
    }

    /// Give up: remove the shards written. (Dropping the writer does the same.)
    pub fn abort(self) {
        self.inner.abort();
    }
}

/// What [`commit_parts`] writes besides the shards: the manifest's other entries and the extra
/// files.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    /// Record alignment every shard uses.
    pub align: u32,
    /// Class names by label.
    pub classes: Option<Vec<String>>,
    /// The manifest's free-form `source`.
    pub source: serde_json::Value,
    /// Extra files (names from [`EXTRA_FILES`]) and their contents.
    pub files: Vec<(String, Vec<u8>)>,
}

/// Commit the dataset at `dest` of run `run`: check every shard of `shards` (in sample order)
/// against its entry, remove the run's files not listed, write the extra files and then the
/// manifest. Returns the manifest. Fails (writing no manifest) when a shard is missing or
/// disagrees with its entry, or when `dest` already holds a manifest.
pub fn commit_parts(
    dest: &Path,
    schema: Schema,
    shards: Vec<ShardInfo>,
    commit: Commit,
    run: &str,
    storage_options: &BTreeMap<String, String>,
) -> Result<Manifest> {
    check_run(run)?;
    for (name, _) in &commit.files {
        if !EXTRA_FILES.contains(&name.as_str()) {
            return Err(FormatError::Schema(format!(
                "{name:?} is not a dataset's extra file (one of {EXTRA_FILES:?})"
            )));
        }
    }
    let manifest_path = dest.join(MANIFEST_FILE);
    let total = shards
        .iter()
        .try_fold(0u64, |t, s| t.checked_add(s.records))
        .ok_or_else(|| FormatError::Manifest {
            path: manifest_path.clone(),
            detail: "record counts overflow".into(),
        })?;
    let manifest = Manifest {
        format: FORMAT_NAME.to_string(),
        format_version: DATASET_VERSION,
        schema,
        total_records: total,
        shards,
        classes: commit.classes,
        align: commit.align,
        source: commit.source,
    };
    manifest.validate(&manifest_path, &Default::default())?;
    let options = OpenOptions {
        storage_options: storage_options.clone(),
        verify_records: false,
        ..OpenOptions::default()
    };
    // every shard present and as its entry says (trailer, size, schema, alignment)
    let checked = Dataset::open_as(dest.to_path_buf(), manifest, options)?;
    let manifest = checked.manifest().clone();
    drop(checked);
    let listed: BTreeSet<&str> = manifest.shards.iter().map(|s| s.file.as_str()).collect();

    #[cfg(feature = "remote")]
    if let Some(mut target) = remote_target(dest, storage_options, run)? {
        for name in target.names()? {
            if of_run(&name, run) && !listed.contains(name.as_str()) {
                target.delete(&name)?;
            }
        }
        for (name, contents) in &commit.files {
            target.put_small(name, contents)?;
        }
        target.commit(&manifest)?;
        return Ok(manifest);
    }
    if manifest_path.exists() {
        return Err(FormatError::DestinationExists {
            path: dest.to_path_buf(),
        });
    }
    for name in local_names(dest)? {
        if of_run(&name, run) && !listed.contains(name.as_str()) {
            let path = dest.join(&name);
            fs::remove_file(&path).map_err(|e| FormatError::io(&path, None, e))?;
        }
    }
    for (name, contents) in &commit.files {
        write_synced(&dest.join(name), contents)?;
    }
    // the commit point: the manifest appears complete, and only if there is none
    let temp = dest.join(format!(".{MANIFEST_FILE}.{run}.tmp"));
    write_synced(&temp, manifest.to_json().as_bytes())?;
    let linked = fs::hard_link(&temp, &manifest_path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(FormatError::DestinationExists {
                path: dest.to_path_buf(),
            });
        }
        Err(e) => return Err(FormatError::io(&manifest_path, None, e)),
    }
    File::open(dest)
        .and_then(|d| d.sync_all())
        .map_err(|e| FormatError::io(dest, None, e))?;
    Ok(manifest)
}

/// Write `contents` to `path` and fsync it.
fn write_synced(path: &PathBuf, contents: &[u8]) -> Result<()> {
    let io = |e| FormatError::io(path, None, e);
    let mut f = File::create(path).map_err(io)?;
    f.write_all(contents).map_err(io)?;
    f.sync_all().map_err(io)
}

/// Give up the job of run `run` at `dest`: remove every shard (and temporary file) of the run.
/// Returns how many were removed. A dataset committed at `dest` is left alone.
pub fn abort_parts(
    dest: &Path,
    run: &str,
    storage_options: &BTreeMap<String, String>,
) -> Result<usize> {
    check_run(run)?;
    let mut removed = 0;
    #[cfg(feature = "remote")]
    if let Some(target) = remote_target(dest, storage_options, run)? {
        let names = target.names()?;
        if !names.contains(MANIFEST_FILE) {
            for name in names.iter().filter(|n| of_run(n, run)) {
                target.delete(name)?;
                removed += 1;
            }
        }
        return Ok(removed);
    }
    let _ = storage_options;
    if dest.join(MANIFEST_FILE).exists() || !dest.is_dir() {
        return Ok(0);
    }
    for name in local_names(dest)? {
        if of_run(&name, run) {
            let path = dest.join(&name);
            match fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(FormatError::io(&path, None, e)),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_a_run_are_told_apart() {
        let name = shard_name("ab12", 3, 7);
        assert_eq!(name, "shard-ab12-000003-000007.skh");
        assert!(of_run(&name, "ab12"));
        assert!(of_run(&temp_name(&name), "ab12"));
        assert!(!of_run(&name, "ab1"));
        assert!(!of_run("shard-000001.skh", "ab12"));
        assert!(!of_run(MANIFEST_FILE, "ab12"));
        assert!(writer_made(&temp_name(&name)) && writer_made("tokenizer.json"));
        assert!(!writer_made("notes.txt") && !writer_made(".shard-x.skh.bak"));
        for bad in ["", "a-b", "../x", "a/b", &"x".repeat(33)] {
            assert!(check_run(bad).is_err(), "{bad:?}");
        }
        check_run("0123abcdEF").unwrap();
    }
}
