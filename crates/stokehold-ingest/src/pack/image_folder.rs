//! An image folder: `SRC/CLASS/.../FILE` (class sub-directories sorted by name become labels
//! 0..n, as in torchvision's `ImageFolder`), or images directly in `SRC` (no labels).
//!
//! Fields: `image` (image:auto, the file's bytes as they are), `label` (int64, when there are
//! classes), `path` (string, relative to `SRC`).
//!
//! A folder of videos (any `.mp4`, `.m4v`, `.mov`, `.mkv` or `.webm` file in it) packs the same
//! way with a `video` field instead of `image`: each file's bytes as they are, led by its frame
//! index (`crate::mp4::video_value`, `crate::mkv::video_value`); other files are skipped.

use std::path::{Path, PathBuf};

use stokehold_format::{FieldValue, ImageCodec, Schema};

use super::{Loaded, PackError, PackOptions, Plan, Progress, Skipped, check_image, read_file};

use crate::sources::{VIDEO_EXTENSIONS, has_video_extension};

/// Why a video file gives no `video` value ([`load_video`]; without the file's name).
#[derive(Debug, thiserror::Error)]
pub(crate) enum VideoFileError {
    /// `--video-keyint` and no `ffmpeg` command.
    #[error(
        "--video-keyint re-encodes with the ffmpeg command, which is not installed (apt \
         install ffmpeg)"
    )]
    NoFfmpeg,
    /// The `ffmpeg` command could not be started.
    #[error("ffmpeg could not be started: {0}")]
    Start(#[source] std::io::Error),
    /// The `ffmpeg` command failed: its status and the last lines it wrote (` / `-joined).
    #[error("re-encoding with --video-keyint failed ({status}): {tail}")]
    Reencode {
        /// Its exit status.
        status: std::process::ExitStatus,
        /// Its last three lines of stderr, last first.
        tail: String,
    },
    /// The re-encoded file could not be read back.
    #[error("the re-encoded video: {0}")]
    ReadBack(#[source] std::io::Error),
    /// A Matroska/WebM file whose frame index cannot be built.
    #[error("not a usable Matroska/WebM video: {0}")]
    Matroska(#[source] crate::mkv::MkvError),
    /// An MP4 file whose frame index cannot be built (or not a video file).
    #[error("not a usable MP4 video: {0}")]
    Mp4(#[source] crate::mp4::Mp4Error),
}

/// A video file's `video` value: its frame index and its bytes (or why it cannot be one); with
/// `policy.keyint`, the file re-encoded first ([`reencode`]).
pub(crate) fn load_video(
    path: &Path,
    bytes: Vec<u8>,
    policy: &super::VideoPolicy,
) -> Result<Vec<u8>, VideoFileError> {
    let bytes = match policy.keyint {
        Some(k) => reencode(path, k, policy.crf)?,
        None => bytes,
    };
    // by content, not name: a re-encoded file is an MP4 whatever its source was
    if crate::mkv::is_matroska(&bytes) {
        return crate::mkv::video_value(&bytes, &crate::frames::ContainerLimits::default())
            .map_err(VideoFileError::Matroska);
    }
    crate::mp4::video_value(&bytes, &crate::frames::ContainerLimits::default())
        .map_err(VideoFileError::Mp4)
}

/// The video of `path` re-encoded by the `ffmpeg` command: its first video stream as H.264
/// (x264 at `crf`, 8-bit 4:2:0) with a keyframe every `keyint` frames exactly (no scene-cut
/// keyframes), in an MP4 whose index comes first; one encoder thread (pack runs one file per
/// thread). Audio and other streams are left out.
fn reencode(path: &Path, keyint: u32, crf: u8) -> Result<Vec<u8>, VideoFileError> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("stokehold-keyint-{}-{n}.mp4", std::process::id()));
    let k = keyint.max(1).to_string();
    let run = std::process::Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-y", "-i"])
        .arg(path)
        .args([
            "-map", "0:v:0", "-c:v", "libx264", "-preset", "medium", "-threads", "1",
        ])
        .args(["-crf", &crf.to_string(), "-g", &k, "-keyint_min", &k])
        .args([
            "-sc_threshold",
            "0",
            "-pix_fmt",
            "yuv420p",
            "-movflags",
            "+faststart",
        ])
        .args(["-f", "mp4"])
        .arg(&out)
        .output();
    let result = match run {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(VideoFileError::NoFfmpeg),
        Err(e) => Err(VideoFileError::Start(e)),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" / ");
            Err(VideoFileError::Reencode {
                status: o.status,
                tail,
            })
        }
        Ok(_) => std::fs::read(&out).map_err(VideoFileError::ReadBack),
    };
    let _ = std::fs::remove_file(&out);
    result
}

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
    let video = jobs.iter().any(|j| has_video_extension(&j.path));
    if video {
        let others = jobs
            .iter()
            .filter(|j| !has_video_extension(&j.path))
            .count();
        if others > 0 {
            notes.push(format!(
                "{others} files without a video extension ({}) were skipped: a folder with videos packs videos",
                VIDEO_EXTENSIONS.join(", ")
            ));
            skipped.extend(
                jobs.iter()
                    .filter(|j| !has_video_extension(&j.path))
                    .map(|j| Skipped {
                        input: j.path.display().to_string(),
                        reason: "not a video file (a folder with videos packs videos)".into(),
                    }),
            );
            jobs.retain(|j| has_video_extension(&j.path));
        }
    }
    let mut fields = vec![if video {
        ("video", "video")
    } else {
        ("image", "image:auto")
    }];
    if classes.is_some() {
        fields.push(("label", "int64"));
    }
    fields.push(("path", "string"));
    let schema = Schema::from_specs(fields)?;
    let items = jobs.len() as u64;
    let max = options.max_item_bytes;
    let policy = options.video.clone();
    Ok(Plan {
        schema,
        classes,
        items: Some(items),
        bytes: None,
        skipped_early: skipped,
        notes,
        source: serde_json::Map::new(),
        run: Box::new(move |sink| sink.run(jobs, move |job| load(job, max, video, &policy))),
    })
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

fn load(job: Job, max: u64, video: bool, policy: &super::VideoPolicy) -> Loaded {
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
    if video {
        let n = bytes.len() as u64;
        let value = match load_video(&job.path, bytes, policy) {
            Ok(v) => v,
            Err(e) => return skip(e.to_string()),
        };
        let mut values = vec![FieldValue::Bytes(value.into())];
        if let Some(label) = job.label {
            values.push(FieldValue::Int64(label));
        }
        values.push(FieldValue::String(job.rel.into()));
        return Loaded::Sample {
            input: job.path.display().to_string(),
            values,
            bytes: n,
            progressive: false,
        };
    }
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
