//! An image folder: `SRC/CLASS/.../FILE` (class sub-directories sorted by name become labels
//! 0..n, as in torchvision's `ImageFolder`), or images directly in `SRC` (no labels).
//!
//! Fields: `image` (image:auto, the file's bytes as they are), `label` (int64, when there are
//! classes), `path` (string, relative to `SRC`).

use std::path::{Path, PathBuf};

use stokehold_format::{FieldValue, ImageCodec, Schema};

use super::{Loaded, PackError, PackOptions, Plan, Progress, Skipped, check_image, read_file};

struct Job {
    path: PathBuf,
    rel: String,
    label: Option<i64>,
}

/// Sorted entries of `dir`, without hidden ones (names starting with '.').
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, PackError> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| PackError::io(dir, e))? {
        let e = e.map_err(|e| PackError::io(dir, e))?;
        if !e.file_name().to_string_lossy().starts_with('.') {
            v.push(e.path());
        }
    }
    v.sort();
    Ok(v)
}

/// Every regular file under `dir`, recursively, in sorted order. Symbolic links to files are
/// followed (image folders are often built from links); links to directories are not, so a
/// cycle cannot loop.
fn walk(dir: &Path, out: &mut Vec<PathBuf>, skipped: &mut Vec<Skipped>) -> Result<(), PackError> {
    for p in sorted_entries(dir)? {
        let link_meta = std::fs::symlink_metadata(&p).map_err(|e| PackError::io(&p, e))?;
        if link_meta.is_dir() {
            walk(&p, out, skipped)?;
        } else if link_meta.is_file() || (link_meta.is_symlink() && p.is_file()) {
            out.push(p);
        } else {
            skipped.push(Skipped {
                input: p.display().to_string(),
                reason: "not a regular file".into(),
            });
        }
    }
    Ok(())
}

pub(super) fn plan<'a>(
    sources: &'a [PathBuf],
    options: &'a PackOptions,
    progress: &dyn Progress,
) -> Result<Plan<'a>, PackError> {
    let [root] = sources else {
        return Err(PackError::Input(format!(
            "an image folder is one directory; {} sources were given",
            sources.len()
        )));
    };
    if !root.is_dir() {
        return Err(PackError::Input(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    progress.start("scanning", None, None);
    let entries = sorted_entries(root)?;
    let class_dirs: Vec<&PathBuf> = entries.iter().filter(|p| p.is_dir()).collect();
    let mut skipped = Vec::new();
    let mut jobs = Vec::new();
    let mut notes = Vec::new();
    let classes = if class_dirs.is_empty() {
        let mut files = Vec::new();
        walk(root, &mut files, &mut skipped)?;
        jobs.extend(files.into_iter().map(|path| Job {
            rel: rel(root, &path),
            path,
            label: None,
        }));
        None
    } else {
        let loose = entries.iter().filter(|p| p.is_file()).count();
        if loose > 0 {
            notes.push(format!(
                "{loose} files directly in {} were ignored (with class sub-directories, only files inside them are packed)",
                root.display()
            ));
        }
        let mut names = Vec::new();
        for (label, dir) in class_dirs.iter().enumerate() {
            names.push(
                dir.file_name()
                    .expect("a directory entry has a name")
                    .to_string_lossy()
                    .into_owned(),
            );
            let mut files = Vec::new();
            walk(dir, &mut files, &mut skipped)?;
            jobs.extend(files.into_iter().map(|path| Job {
                rel: rel(root, &path),
                path,
                label: Some(label as i64),
            }));
        }
        Some(names)
    };
    progress.finish();
    let mut fields = vec![("image", "image:auto")];
    if classes.is_some() {
        fields.push(("label", "int64"));
    }
    fields.push(("path", "string"));
    let schema = Schema::from_specs(fields)?;
    let items = jobs.len() as u64;
    let max = options.max_item_bytes;
    Ok(Plan {
        schema,
        classes,
        items: Some(items),
        bytes: None,
        skipped_early: skipped,
        notes,
        source: serde_json::Map::new(),
        run: Box::new(move |sink| sink.run(jobs, move |job| load(job, max))),
    })
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

fn load(job: Job, max: u64) -> Loaded {
    let skip = |reason: String| {
        Loaded::Skip(Skipped {
            input: job.path.display().to_string(),
            reason,
        })
    };
    let bytes = match read_file(&job.path, max) {
        Ok(b) => b,
        Err(e) => return skip(format!("unreadable: {e}")),
    };
    let progressive = match check_image(&bytes) {
        Ok(p) => p,
        Err(e) => return skip(e.into()),
    };
    debug_assert!(ImageCodec::sniff(&bytes).is_some());
    let n = bytes.len() as u64;
    let mut values = vec![FieldValue::Image(bytes.into())];
    if let Some(label) = job.label {
        values.push(FieldValue::Int64(label));
    }
    values.push(FieldValue::String(job.rel.into()));
    Loaded::Sample {
        input: job.path.display().to_string(),
        values,
        bytes: n,
        progressive,
    }
}
