//! Parquet files (or a directory of them), as Hugging Face datasets and LAION-style metadata are
//! stored: one row per sample, each column a field, mapped by its Parquet type: image bytes
//! (a binary column whose values are images, or a `{bytes, path}` struct as Hugging Face's
//! `Image` feature stores it) → image:auto, other binary → bytes, strings → string, integers and
//! booleans → int64, floats → float64, lists of numbers → 1-d ndarray (u8 for uint8 and bool,
//! i32 for the other narrow integers, i64, f16, f32, f64). Other types are left out, with a note.
//!
//! Which columns: `--fields` (by column name), or every supported column that at least half the
//! rows hold (nulls counted from the files' statistics), as [`crate::sources::choose_fields`] does for
//! WebDataset and TFRecord. A null in a required field skips the row, counted with its name
//! (`data.parquet row 17`, rows counted from 0 within each file); in an optional one (`NAME?`,
//! text, bytes and arrays only) an empty value is stored. A Hugging Face `ClassLabel` column
//! gives the dataset its class names.
//!
//! Reading streams: reader threads (up to [`MAX_READERS`], at most the pack's thread count)
//! decode row groups in turn, each in batches of at most [`BATCH_BYTES`], a few batches ahead of
//! the parallel packer (bounded channels, [`AHEAD`] batches in all), and the rows are taken back
//! in file and row order, so the output does not depend on the thread count and memory is a few
//! batches whatever the file size. A file or row group that cannot be decoded
//! fails the pack, naming the file and the row group.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use stokehold_format::{Field, FieldValue, Schema};

use super::{Loaded, PackError, PackOptions, Plan, Progress, Skipped, check_image, read_file};
use crate::sources::parquet::{
    Kind, binary_at, class_names, hf_features, hf_image_type, kind_of, list_at, list_items,
    panic_payload, sniff_images, string_at, struct_bytes, value_at,
};

/// A batch decoded from a row group holds at most about this many bytes (fewer rows when rows
/// are large; at least one row).
const BATCH_BYTES: u64 = 16 << 20;
/// ... and at most this many rows.
const BATCH_ROWS: usize = 256;
/// Batches decoded ahead of the packer, shared among the readers: enough to fill its next two
/// chunks of 256 rows from the row groups of 100 rows that Hugging Face writes for images, so
/// that decoding overlaps the packing; at most about 8 × 16 MiB.
const AHEAD: usize = 8;
/// Row groups decoded at once (by as many reader threads, at most the pack's thread count).
const MAX_READERS: usize = 4;
/// Values of a binary column looked at to tell images from other bytes.
/// One Parquet file, its footer read.
struct SourceFile {
    path: PathBuf,
    meta: ArrowReaderMetadata,
}

fn parquet_error(
    path: &Path,
    row_group: Option<usize>,
    e: parquet::errors::ParquetError,
) -> PackError {
    PackError::Parquet {
        path: path.to_path_buf(),
        row_group,
        source: e,
    }
}

/// The error of a panic in the Parquet decoder (a malformed file it did not expect).
fn panicked(path: &Path, p: &(dyn std::any::Any + Send)) -> PackError {
    let what = panic_payload(p);
    PackError::Input(format!(
        "{}: the Parquet decoder failed on this file ({what}); it is damaged or uses something \
         the decoder does not support",
        path.display()
    ))
}

fn open(path: &Path) -> Result<SourceFile, PackError> {
    std::panic::catch_unwind(|| open_file(path)).unwrap_or_else(|p| Err(panicked(path, p.as_ref())))
}

fn open_file(path: &Path) -> Result<SourceFile, PackError> {
    let file = File::open(path).map_err(|e| PackError::io(path, e))?;
    // The Parquet schema's own types (plain binary, strings and lists): the Arrow schema that
    // pyarrow embeds would bring dictionary, large and view variants for nothing.
    let options = ArrowReaderOptions::new().with_skip_arrow_metadata(true);
    let meta =
        ArrowReaderMetadata::load(&file, options).map_err(|e| parquet_error(path, None, e))?;
    Ok(SourceFile {
        path: path.to_path_buf(),
        meta,
    })
}

/// The files to read: the given files, and the `.parquet` files of given directories.
fn parquet_files(sources: &[PathBuf]) -> Result<Vec<PathBuf>, PackError> {
    super::source_files(
        sources,
        |p| {
            p.extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
        },
        ".parquet files",
    )
}

/// Rows that hold each top-level column (not null), from the statistics of its leaf columns
/// (a struct is null where all its leaves are; a list, or a column without statistics, counts
/// as held by every row).
fn present_counts(file: &SourceFile) -> Vec<u64> {
    let md = file.meta.metadata();
    let descr = md.file_metadata().schema_descr();
    let roots = file.meta.schema().fields().len();
    let rows = md.file_metadata().num_rows().max(0) as u64;
    // per root: the fewest nulls among its leaves (a struct image is missing only where both
    // its bytes and its path are)
    let mut nulls: Vec<Option<u64>> = vec![None; roots];
    for rg in md.row_groups() {
        let mut rg_nulls: Vec<Option<u64>> = vec![None; roots];
        for (leaf, col) in rg.columns().iter().enumerate() {
            let root = descr.get_column_root_idx(leaf);
            // a list's leaf counts empty lists and null elements as nulls too: not rows
            let n = if descr.column(leaf).max_rep_level() > 0 {
                0
            } else {
                col.statistics()
                    .and_then(|s| s.null_count_opt())
                    .unwrap_or(0)
            };
            let n = n.min(rg.num_rows().max(0) as u64);
            if let Some(slot) = rg_nulls.get_mut(root) {
                *slot = Some(slot.map_or(n, |m| m.min(n)));
            }
        }
        for (total, n) in nulls.iter_mut().zip(rg_nulls) {
            *total = Some(total.unwrap_or(0) + n.unwrap_or(0));
        }
    }
    nulls
        .into_iter()
        .map(|n| rows.saturating_sub(n.unwrap_or(0)))
        .collect()
}

/// Whether most of the first values of binary column `name` are images (the first row group's
/// first [`SNIFF`] non-null values; a column with none is an image column when its name says so).
fn looks_like_images(file: &SourceFile, root: usize, name: &str) -> Result<bool, PackError> {
    let f = File::open(&file.path).map_err(|e| PackError::io(&file.path, e))?;
    let md = file.meta.metadata();
    if let Some(g) = (0..md.num_row_groups()).find(|&g| md.row_group(g).num_rows() > 0) {
        check_pages(file, &f, g, &[root])?;
    }
    sniff_images(f, &file.meta, root, name).map_err(|(rg, e)| parquet_error(&file.path, rg, e))
}

/// Check the page headers of the column chunks of `roots` in row group `g` of `file` (open as
/// `f`) before the decoder sizes anything by them ([`crate::parquet_pages`]).
fn check_pages(file: &SourceFile, f: &File, g: usize, roots: &[usize]) -> Result<(), PackError> {
    use std::os::unix::fs::FileExt;
    let size = f
        .metadata()
        .map_err(|e| PackError::io(&file.path, e))?
        .len();
    let read = |at: u64, n: usize| {
        let mut v = vec![0u8; n];
        f.read_exact_at(&mut v, at).map(|()| v)
    };
    let md = file.meta.metadata();
    crate::parquet_pages::check_row_group(
        md,
        (g, roots, None),
        size,
        read,
        crate::parquet_pages::MAX_PAGE_BYTES,
    )
    .map_err(|(at, e)| {
        let e = format!("at byte {at}: {e}");
        parquet_error(
            &file.path,
            Some(g),
            parquet::errors::ParquetError::General(e),
        )
    })
}

/// A column chosen as a field.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    kind: Kind,
    optional: bool,
}

pub(super) fn plan<'a>(
    sources: &'a [PathBuf],
    options: &'a PackOptions,
    progress: &dyn Progress,
) -> Result<Plan<'a>, PackError> {
    let paths = parquet_files(sources)?;
    progress.start("reading footers", Some(paths.len() as u64), None);
    let mut files = Vec::with_capacity(paths.len());
    for p in &paths {
        files.push(open(p)?);
        progress.advance(1, 0);
    }
    progress.finish();
    let first = &files[0];
    let mut notes = Vec::new();
    // The first file's columns decide the kinds; every other file must agree.
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
    let mut unsupported: BTreeMap<String, String> = BTreeMap::new();
    let features = hf_features(&first.meta);
    for (root, f) in first.meta.schema().fields().iter().enumerate() {
        let name = f.name();
        if kinds.contains_key(name) || unsupported.contains_key(name) {
            return Err(PackError::Input(format!(
                "{}: column {name:?} appears twice",
                first.path.display()
            )));
        }
        if name.starts_with("__index_level_") {
            unsupported.insert(name.clone(), "a pandas index".into());
            continue;
        }
        match kind_of(f.data_type()) {
            Some(Kind::Bytes) if looks_like_images(first, root, name)? => {
                kinds.insert(name.clone(), Kind::Image);
            }
            Some(Kind::BytesList) if looks_like_images(first, root, name)? => {
                kinds.insert(name.clone(), Kind::ImageList);
            }
            // Audio, Video, Pdf store the same {bytes, path} struct as Image
            Some(Kind::ImageStruct | Kind::ImageList)
                if hf_image_type(features.get(name)).is_some_and(|t| t != "Image") =>
            {
                let t = hf_image_type(features.get(name)).unwrap_or_default();
                unsupported.insert(name.clone(), format!("a Hugging Face {t} feature"));
            }
            Some(k) => {
                kinds.insert(name.clone(), k);
            }
            None => {
                unsupported.insert(name.clone(), format!("type {}", f.data_type()));
            }
        }
    }
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut rows = 0u64;
    for file in &files {
        let schema = file.meta.schema();
        for (name, kind) in &kinds {
            let f = schema.field_with_name(name).map_err(|_| {
                PackError::Input(format!(
                    "{}: no column {name:?}, which {} has: every file must have the same columns",
                    file.path.display(),
                    first.path.display()
                ))
            })?;
            let k = kind_of(f.data_type());
            let same = match (kind, k) {
                (Kind::Image | Kind::Bytes, Some(Kind::Bytes)) => true,
                (Kind::ImageList | Kind::BytesList, Some(Kind::BytesList)) => true,
                (a, Some(b)) => *a == b,
                (_, None) => false,
            };
            if !same {
                return Err(PackError::Input(format!(
                    "{}: column {name:?} is {} here but {} in {}: every file must have the same \
                     column types",
                    file.path.display(),
                    f.data_type(),
                    first
                        .meta
                        .schema()
                        .field_with_name(name)
                        .map_or_else(|_| "?".into(), |f| f.data_type().to_string()),
                    first.path.display()
                )));
            }
        }
        let present = present_counts(file);
        for (root, f) in schema.fields().iter().enumerate() {
            if kinds.contains_key(f.name()) {
                *counts.entry(f.name().clone()).or_default() += present[root];
            }
        }
        rows += file.meta.metadata().file_metadata().num_rows().max(0) as u64;
    }
    if rows == 0 {
        return Err(PackError::Empty(format!(
            "no rows in {} Parquet files",
            files.len()
        )));
    }
    if let Some(given) = &options.fields {
        for f in given {
            if let Some(why) = unsupported.get(&f.name) {
                return Err(PackError::Input(format!(
                    "--fields: column {:?} cannot be packed ({why}); columns of binary, string, \
                     integer, float, image and struct types and of lists of numbers, binary, \
                     strings or images can",
                    f.name
                )));
            }
        }
    }
    if !unsupported.is_empty() {
        notes.push(format!(
            "left out (no field type for them): {}",
            unsupported
                .iter()
                .map(|(n, why)| format!("column {n:?} ({why})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut source = serde_json::Map::new();
    let chosen = crate::sources::choose_fields(
        &counts,
        rows,
        options.fields.as_deref(),
        |n| kinds[n].can_be_empty(),
        |n| format!("column {n:?}"),
        &mut notes,
        &mut source,
    )?;
    let columns: Vec<Column> = chosen
        .into_iter()
        .map(|c| Column {
            kind: kinds[&c.name],
            name: c.name,
            optional: c.optional,
        })
        .collect();
    let schema = Schema::new(
        columns
            .iter()
            .map(|c| Field::new(c.name.clone(), c.kind.field_type()))
            .collect(),
    )?;
    // A Hugging Face ClassLabel column gives the class names (one such column only: a dataset
    // has one list of classes).
    let labelled: Vec<(&Column, Vec<String>)> = columns
        .iter()
        .filter(|c| c.kind == Kind::Int)
        .filter_map(|c| Some((c, class_names(features.get(&c.name)?)?)))
        .collect();
    let classes = match <[_; 1]>::try_from(labelled) {
        Ok([(c, names)]) => {
            source.insert("class_column".into(), c.name.clone().into());
            Some(names)
        }
        Err(_) => None,
    };
    let max = options.max_item_bytes;
    Ok(Plan {
        schema,
        classes,
        items: Some(rows),
        bytes: None,
        skipped_early: Vec::new(),
        notes,
        source,
        run: Box::new(move |sink| {
            let error = std::cell::RefCell::new(None);
            let (files, columns) = (&files, &columns);
            let tasks = row_groups(files);
            let readers = match options.threads {
                0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                n => n,
            }
            .clamp(1, MAX_READERS)
            .min(tasks.len().max(1));
            std::thread::scope(|s| {
                // reader k decodes row groups k, k + readers, ...; they are taken back in order
                let mut rxs = Vec::with_capacity(readers);
                for k in 0..readers {
                    let (tx, rx) = sync_channel(AHEAD.div_ceil(readers));
                    let mine: Vec<&Task> = tasks.iter().skip(k).step_by(readers).collect();
                    std::thread::Builder::new()
                        .name(format!("stokehold-parquet-read-{k}"))
                        .spawn_scoped(s, move || read_tasks(files, &mine, columns, &tx))
                        .map_err(|e| {
                            PackError::Input(format!("cannot start a reader thread: {e}"))
                        })?;
                    rxs.push(rx);
                }
                let (mut t, mut current) = (0usize, None::<(Arc<Batch>, usize)>);
                let jobs = std::iter::from_fn(|| {
                    loop {
                        if let Some((b, i)) = &mut current {
                            if *i < b.rows {
                                *i += 1;
                                return Some((Arc::clone(b), *i - 1));
                            }
                            current = None;
                        }
                        if t >= tasks.len() {
                            return None;
                        }
                        let failed = match rxs[t % readers].recv() {
                            Ok(Msg::Batch(b)) => {
                                current = Some((b, 0));
                                continue;
                            }
                            Ok(Msg::End) => {
                                t += 1;
                                continue;
                            }
                            Ok(Msg::Failed(e)) => e,
                            Err(_) => PackError::Input(
                                "a Parquet reader thread stopped unexpectedly".into(),
                            ),
                        };
                        // the first error ends the rows (the packer may ask again)
                        *error.borrow_mut() = Some(failed);
                        t = tasks.len();
                        return None;
                    }
                });
                // when the packer returns, the receivers go and the readers stop at their next
                // send; the scope joins them
                sink.run(jobs, |(b, i)| load(&b, i, columns, max))
            })?;
            match error.into_inner() {
                Some(e) => Err(e),
                None => Ok(()),
            }
        }),
    })
}

/// One row group to decode: the file (an index into the files), the row group, and the file's
/// row number of its first row.
type Task = (usize, usize, u64);

/// Every non-empty row group of `files`, in order.
fn row_groups(files: &[SourceFile]) -> Vec<Task> {
    let mut tasks = Vec::new();
    for (f, file) in files.iter().enumerate() {
        let mut first_row = 0u64;
        for (g, rg) in file.meta.metadata().row_groups().iter().enumerate() {
            let rows = rg.num_rows().max(0) as u64;
            if rows > 0 {
                tasks.push((f, g, first_row));
            }
            first_row += rows;
        }
    }
    tasks
}

/// What a reader thread sends: a batch, the end of a row group, or the error that stopped it.
enum Msg {
    Batch(Arc<Batch>),
    End,
    Failed(PackError),
}

/// Some decoded rows of one file: the chosen columns in field order.
struct Batch {
    /// The file, as shown in messages.
    file: Arc<str>,
    /// Where relative image paths are resolved.
    dir: Arc<Path>,
    /// The file's row number of the first row.
    first_row: u64,
    rows: usize,
    columns: Vec<ArrayRef>,
}

/// Decode `tasks` in order, sending each row group's batches and then [`Msg::End`]; stops at the
/// first error (sent) or when the receiver is gone.
fn read_tasks(files: &[SourceFile], tasks: &[&Task], columns: &[Column], tx: &SyncSender<Msg>) {
    for &&(f, g, first_row) in tasks {
        let file = &files[f];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read_row_group(file, g, first_row, columns, tx)
        }))
        .unwrap_or_else(|p| Err(panicked(&file.path, p.as_ref())));
        let msg = match r {
            Ok(true) => Msg::End,
            Ok(false) => return, // the receiver is gone
            Err(e) => Msg::Failed(e),
        };
        let failed = matches!(msg, Msg::Failed(_));
        if tx.send(msg).is_err() || failed {
            return;
        }
    }
}

/// Decode row group `g` of `file` in batches and send them; `Ok(false)` when the receiver is
/// gone.
fn read_row_group(
    file: &SourceFile,
    g: usize,
    first_row: u64,
    columns: &[Column],
    tx: &SyncSender<Msg>,
) -> Result<bool, PackError> {
    let path = &file.path;
    let shown: Arc<str> = path.display().to_string().into();
    let dir: Arc<Path> = path.parent().unwrap_or(Path::new(".")).into();
    let schema = file.meta.schema();
    let roots = columns.iter().filter_map(|c| schema.index_of(&c.name).ok());
    let rg = file.meta.metadata().row_group(g);
    let rg_rows = rg.num_rows().max(0) as u64;
    let per_row = (rg.total_byte_size().max(0) as u64 / rg_rows.max(1)).max(1);
    let batch_rows = (BATCH_BYTES / per_row).clamp(1, BATCH_ROWS as u64) as usize;
    let f = File::open(path).map_err(|e| PackError::io(path, e))?;
    let roots: Vec<usize> = roots.collect();
    check_pages(file, &f, g, &roots)?;
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(f, file.meta.clone())
        .with_row_groups(vec![g])
        .with_projection(ProjectionMask::roots(file.meta.parquet_schema(), roots))
        .with_batch_size(batch_rows)
        .build()
        .map_err(|e| parquet_error(path, Some(g), e))?;
    let mut read = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| parquet_error(path, Some(g), e.into()))?;
        let cols: Option<Vec<ArrayRef>> = columns
            .iter()
            .map(|c| batch.column_by_name(&c.name).cloned())
            .collect();
        let cols = cols.ok_or_else(|| {
            PackError::Input(format!(
                "{shown}, row group {g}: a chosen column is missing"
            ))
        })?;
        let b = Batch {
            file: Arc::clone(&shown),
            dir: Arc::clone(&dir),
            first_row: first_row + read,
            rows: batch.num_rows(),
            columns: cols,
        };
        read += batch.num_rows() as u64;
        if tx.send(Msg::Batch(Arc::new(b))).is_err() {
            return Ok(false);
        }
    }
    if read != rg_rows {
        return Err(PackError::Input(format!(
            "{shown}, row group {g}: {read} rows decoded, the footer says {rg_rows}"
        )));
    }
    Ok(true)
}

/// An image's bytes: a binary value, or a `{bytes, path}` struct's bytes or file. `Ok(None)`:
/// null.
fn image_at(
    a: &dyn Array,
    i: usize,
    kind: Kind,
    dir: &Path,
    max: u64,
) -> Result<Option<Vec<u8>>, crate::Unusable> {
    if kind == Kind::Image {
        return Ok(binary_at(a, i).map(<[u8]>::to_vec));
    }
    let Some(s) = a.as_struct_opt() else {
        return Err(format!("{} is not a struct", a.data_type()).into());
    };
    if s.is_null(i) {
        return Ok(None);
    }
    if let Some(b) = struct_bytes(a, i) {
        return Ok(Some(b.to_vec()));
    }
    match s
        .column_by_name("path")
        .and_then(|p| string_at(p.as_ref(), i))
    {
        Some(p) if !p.is_empty() => {
            let file = dir.join(p);
            read_file(&file, max)
                .map(Some)
                .map_err(|e| format!("no bytes, and its path {}: {e}", file.display()).into())
        }
        _ => Ok(None),
    }
}

/// A list of images: each item a binary value or a `{bytes, path}` struct (its bytes, or the
/// file at its path), checked as an image; an error names the item. `Ok(None)`: null.
fn image_list_at(
    a: &dyn Array,
    i: usize,
    dir: &Path,
    max: u64,
    progressive: &mut bool,
) -> Result<Option<FieldValue<'static>>, crate::Unusable> {
    if a.is_null(i) {
        return Ok(None);
    }
    let items = list_at(a, i)?;
    let kind = if items.as_struct_opt().is_some() {
        Kind::ImageStruct
    } else {
        Kind::Image
    };
    list_items(items.len(), max, |k| {
        let img = image_at(items.as_ref(), k, kind, dir, max)?.ok_or("null")?;
        *progressive |= check_image(&img)?;
        Ok(FieldValue::Image(img.into()))
    })
    .map(Some)
}

/// The input bytes a value holds (its data; 8 for a number).
pub(super) fn value_bytes(v: &FieldValue<'_>) -> u64 {
    match v {
        FieldValue::Image(d) | FieldValue::Bytes(d) => d.len() as u64,
        FieldValue::String(s) => s.len() as u64,
        FieldValue::Array(a) => a.data.len() as u64,
        FieldValue::List(items) => items.iter().map(value_bytes).sum(),
        _ => 8,
    }
}

fn load(b: &Batch, i: usize, columns: &[Column], max: u64) -> Loaded {
    let input = format!("{} row {}", b.file, b.first_row + i as u64);
    let skip = |reason: String| {
        Loaded::Skip(Skipped {
            input: input.clone(),
            reason,
        })
    };
    let mut values = Vec::with_capacity(columns.len());
    let mut progressive = false;
    let mut bytes = 0u64;
    for (c, a) in columns.iter().zip(&b.columns) {
        let a = a.as_ref();
        let name = &c.name;
        let v = match c.kind {
            Kind::Image | Kind::ImageStruct => match image_at(a, i, c.kind, &b.dir, max) {
                Ok(Some(img)) if img.len() as u64 > max => {
                    Err(format!("{} bytes, over the limit of {max}", img.len()).into())
                }
                Ok(Some(img)) => match check_image(&img) {
                    Ok(p) => {
                        progressive |= p;
                        Ok(Some(FieldValue::Image(img.into())))
                    }
                    Err(e) => Err(e),
                },
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            },
            Kind::ImageList => image_list_at(a, i, &b.dir, max, &mut progressive),
            kind => value_at(a, i, kind, max),
        };
        match v {
            Ok(Some(v)) => {
                bytes += value_bytes(&v);
                values.push(v);
            }
            Ok(None) => {
                match crate::sources::empty_value(&c.kind.field_type()).filter(|_| c.optional) {
                    Some(v) => values.push(v),
                    None => {
                        return skip(format!(
                            "column {name:?} is null, a required field (--fields chooses the \
                         fields; NAME? stores text, bytes or arrays empty where null)"
                        ));
                    }
                }
            }
            Err(e) => return skip(format!("column {name:?}: {e}")),
        }
    }
    Loaded::Sample {
        input,
        values,
        bytes,
        progressive,
    }
}
