//! JSON Lines without a column of files: each non-empty line is a sample, each key a field,
//! chosen and typed as files read in place choose them (`sources::jsonl`: the first lines'
//! kinds; lists and objects, a conversation's `messages`, as their canonical JSON text), so that
//! `pack` of a JSONL file gives the samples reading it in place gives. A line that is not a
//! JSON object, or lacks a required key, is skipped and counted (`FILE:LINE`).
//!
//! A key whose values in the first lines are all lists of file names with an image extension
//! (`"images": ["a.jpg", "b/c.png"]`: [`crate::sources::jsonl::KeyStats::field_type`], the rule
//! reading in place shares) is a `list:image` field of those files' bytes, read relative to the
//! JSONL file's folder. A file that cannot be read, or is no image, skips its line, naming the
//! line, the item and the path. A key whose values are all names of video files (`.mp4`,
//! `.mkv`, `.webm`, ...) is a `video` field: each file's frame index and bytes (as a folder of
//! videos packs them, re-encoded with `--video-keyint`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stokehold_format::{Field, FieldType, FieldValue, Schema};

use super::{Loaded, PackError, PackOptions, Plan, Skipped, check_image, read_file};
use crate::sources::jsonl::{
    LineStats, SAMPLED_LINES, field_value, image_paths, lines, video_path,
};

/// The first lines' statistics of a JSONL file's bytes.
pub(super) fn first_lines(all: &[u8]) -> LineStats {
    let mut stats = LineStats::default();
    for (n, _, line) in lines(all).take(SAMPLED_LINES as usize) {
        stats.observe(n, line);
    }
    stats
}

/// The plan of packing JSONL file `src` (its bytes `all`, the first lines' `stats`) as rows.
pub(super) fn plan<'a>(
    src: &Path,
    all: Vec<u8>,
    stats: &LineStats,
    options: &'a PackOptions,
) -> Result<Plan<'a>, PackError> {
    let mut notes = Vec::new();
    let mut source = serde_json::Map::new();
    if let Some((line, why)) = &stats.first_invalid {
        notes.push(format!(
            "{} of the first {} lines are not JSON objects (line {line}: {why}): skipped",
            stats.invalid, stats.lines
        ));
    }
    let fields = crate::sources::jsonl::choose(
        stats,
        1,
        options.fields.as_deref(),
        &mut notes,
        &mut source,
    )?;
    for f in fields.iter().filter(|f| f.ty.is_image_list()) {
        notes.push(format!(
            "key {:?} lists image files: packed as a list of images (list:image), read \
             relative to {}",
            f.name,
            dir_of(src).display()
        ));
    }
    let schema = Schema::new(
        fields
            .iter()
            .map(|f| Field::new(f.name.clone(), f.ty.clone()))
            .collect(),
    )?;
    let dir = dir_of(src).to_path_buf();
    let max = options.max_item_bytes;
    let policy = options.video.clone();
    let all: Arc<[u8]> = all.into();
    let jobs: Vec<(u64, usize, usize)> = lines(&all)
        .map(|(n, at, line)| (n, at, line.len()))
        .collect();
    let src: PathBuf = src.to_path_buf();
    Ok(Plan {
        schema,
        classes: None,
        items: Some(jobs.len() as u64),
        bytes: Some(all.len() as u64),
        skipped_early: Vec::new(),
        notes,
        source,
        run: Box::new(move |sink| {
            sink.run(jobs, move |(n, at, len)| {
                let line = &all[at..at + len];
                let input = format!("{}:{n}", src.display());
                let mut values = Vec::with_capacity(fields.len());
                let (mut bytes, mut progressive) = (len as u64, false);
                for f in &fields {
                    let v = if f.ty.is_image_list() {
                        image_files(line, &f.name, f.optional, &dir, max, &mut progressive)
                    } else if f.ty == FieldType::Video {
                        video_file(line, &f.name, &dir, max, &policy)
                    } else {
                        field_value(line, &f.name, &f.ty, f.optional)
                            .map(FieldValue::into_owned)
                            .map_err(crate::Unusable::from)
                    };
                    match v {
                        Ok(v) => {
                            if f.ty.is_image_list() || f.ty == FieldType::Video {
                                // the files read, beside the line
                                bytes += super::parquet::value_bytes(&v);
                            }
                            values.push(v)
                        }
                        Err(reason) => {
                            return Loaded::Skip(Skipped {
                                input,
                                reason: reason.into(),
                            });
                        }
                    }
                }
                Loaded::Sample {
                    input,
                    values,
                    bytes,
                    progressive,
                }
            })
        }),
    })
}

/// The folder relative paths of JSONL file `src` are read from.
fn dir_of(src: &Path) -> &Path {
    src.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The `video` value of key `key` of `line`: the frame index and bytes of the file it names
/// (relative to `dir`). An error names the key and the file.
fn video_file(
    line: &[u8],
    key: &str,
    dir: &Path,
    max: u64,
    policy: &super::VideoPolicy,
) -> Result<FieldValue<'static>, crate::Unusable> {
    let file = dir.join(video_path(line, key)?);
    let bytes =
        read_file(&file, max).map_err(|e| format!("key {key:?}: {}: {e}", file.display()))?;
    super::image_folder::load_video(&file, bytes, policy)
        .map(|v| FieldValue::Bytes(v.into()))
        .map_err(|e| format!("key {key:?}: {}: {e}", file.display()).into())
}

/// The `list:image` value of key `key` of `line`: the bytes of the files it lists (relative to
/// `dir`), each checked as an image; a missing or null key is an empty list where `optional`.
/// An error names the item and the file.
fn image_files(
    line: &[u8],
    key: &str,
    optional: bool,
    dir: &Path,
    max: u64,
    progressive: &mut bool,
) -> Result<FieldValue<'static>, crate::Unusable> {
    let paths = image_paths(line, key, optional)?;
    crate::sources::parquet::list_items(paths.len(), max, |k| {
        let file = dir.join(&paths[k]);
        let bytes = read_file(&file, max).map_err(|e| format!("{}: {e}", file.display()))?;
        *progressive |= check_image(&bytes).map_err(|e| format!("{}: {e}", file.display()))?;
        Ok(FieldValue::Image(bytes.into()))
    })
    .map_err(|e| format!("key {key:?} {e}").into())
}
