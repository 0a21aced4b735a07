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
//!    Each shard is written with [`Location::writer`](crate::Location::writer), so it appears only
//!    complete: locally under a hidden temporary name (`.NAME.tmp-...`) renamed when complete, in
//!    object storage one (multipart) upload.
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
//! Every step is written once against [`Location`](crate::Location) (`crate::writer` holds what it
//! shares with [`DatasetWriter`]): the same code for a local directory and object storage.
//! Unlike [`DatasetWriter`], the local destination is written in place (many processes, maybe
//! on many nodes of a shared file system, write it), so there is no staging directory and no
//! destination lock: one job per destination at a time is the caller's to ensure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::dataset::{Dataset, OpenOptions};
use crate::locate::locate;
pub use crate::writer::shard_name;
use crate::writer::{
    DatasetWriteOptions, DatasetWriter, check_extra_file, check_run, commit_manifest, of_run,
    prepare_in_place, run_tag,
};
use stokehold_format::error::{FormatError, Result};
use stokehold_format::manifest::{
    DATASET_VERSION, FORMAT_NAME, MANIFEST_FILE, Manifest, ShardInfo,
};
use stokehold_format::record::FieldValue;
use stokehold_format::schema::Schema;

/// Start a job that writes the dataset at `dest` with many [`PartWriter`]s: check the
/// destination (it must not hold a dataset, and may hold nothing a dataset writer does not
/// write), remove the leftovers of a job that died before its commit, make the directory, and
/// return a new run tag for the job's writers.
pub fn prepare_parts(dest: &Path, storage_options: &BTreeMap<String, String>) -> Result<String> {
    prepare_in_place(&*locate(dest, storage_options)?, false)?;
    Ok(run_tag())
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
    /// Extra files (names from [`crate::EXTRA_FILES`]) and their contents.
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
        check_extra_file(name)?;
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
    let location = locate(dest, storage_options)?;
    let options = OpenOptions {
        storage_options: storage_options.clone(),
        verify_records: false,
        ..OpenOptions::default()
    };
    // every shard present and as its entry says (trailer, size, schema, alignment)
    let checked = Dataset::open_in(location.clone(), dest.to_path_buf(), manifest, options)?;
    let manifest = checked.manifest().clone();
    drop(checked);
    let listed: BTreeSet<&str> = manifest.shards.iter().map(|s| s.file.as_str()).collect();
    let io = |name: &str| {
        let place = location.place(name);
        move |e| FormatError::io(&place, None, e)
    };
    let names = location.list().map_err(io(""))?;
    if names.contains_key(MANIFEST_FILE) {
        return Err(FormatError::DestinationExists {
            path: dest.to_path_buf(),
        });
    }
    for name in names.keys() {
        if of_run(name, run) && !listed.contains(name.as_str()) {
            location.delete(name).map_err(io(name))?;
        }
    }
    for (name, contents) in &commit.files {
        location.put(name, contents).map_err(io(name))?;
    }
    // the commit point: the manifest appears complete, and only if there is none
    commit_manifest(&*location, &manifest, false)?;
    Ok(manifest)
}

/// Give up the job of run `run` at `dest`: remove every shard (and temporary file) of the run.
/// Returns how many were removed. A dataset committed at `dest` is left alone.
pub fn abort_parts(
    dest: &Path,
    run: &str,
    storage_options: &BTreeMap<String, String>,
) -> Result<usize> {
    check_run(run)?;
    let location = locate(dest, storage_options)?;
    let names = location
        .list()
        .map_err(|e| FormatError::io(dest, None, e))?;
    if names.contains_key(MANIFEST_FILE) {
        return Ok(0);
    }
    let mut removed = 0;
    for name in names.keys().filter(|n| of_run(n, run)) {
        location
            .delete(name)
            .map_err(|e| FormatError::io(location.place(name), None, e))?;
        removed += 1;
    }
    Ok(removed)
}
