//! `stokehold pack`: turn an image folder, a JSONL/CSV table of files, WebDataset tars, TFRecord
//! or Parquet files into a stokehold dataset.
//!
//! Every source is read in a fixed order (sorted file names, archive order), its samples are
//! loaded and encoded in parallel in chunks, and the chunks are written in order, so the output
//! is identical for identical input whatever the thread count. The dataset appears at its
//! destination only when complete (see [`stokehold_storage::DatasetWriter`]). Inputs that cannot be
//! used (unreadable files, non-images, corrupt records, links in tars) are reported by name and
//! skipped, with a count at the end and a `skipped.txt` in the dataset; with `strict` the first
//! one is fatal.

pub(crate) mod image_folder;
mod jsonl;
pub(crate) mod parquet;
mod table;
pub(crate) mod tfrecord;
pub mod tokens;
pub(crate) mod webdataset;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use stokehold_format::record::RecordEncoder;
use stokehold_format::{FieldType, FieldValue, FormatError, Manifest, Schema};
use stokehold_storage::{DatasetWriteOptions, DatasetWriter};

use crate::sources::SourceError;
pub use crate::sources::{FieldChoice, SourceKind};

/// Options of [`pack`].
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// Shard size, alignment, compression level, overwrite.
    pub write: DatasetWriteOptions,
    /// Worker threads for loading and encoding; 0 means one per core.
    pub threads: usize,
    /// Fail on the first unusable input instead of skipping it.
    pub strict: bool,
    /// WebDataset: keep pickle members (`.pyd`, `.pickle`, `.pt`, `.pth`) as opaque bytes. They
    /// are never unpickled by stokehold; by default they are left out.
    pub keep_pickle: bool,
    /// JSONL/CSV: the column that names each sample's file (default: the first of `path`,
    /// `file`, `filename`, `filepath`, `image`, `image_path`).
    pub path_column: Option<String>,
    /// Largest input file or member accepted, in bytes.
    pub max_item_bytes: u64,
    /// What to do to images on the way in (pixel limit, lossless baseline transcode, a lossy
    /// size cap).
    pub images: ImagePolicy,
    /// What to do to videos on the way in (an optional re-encode with short keyframe
    /// intervals).
    pub video: VideoPolicy,
    /// The pack fails (and writes nothing) when more than this fraction of its inputs is
    /// skipped: a pack that quietly lost data is worse than one that stopped. 1.0 allows any.
    pub max_skip_fraction: f64,
    /// WebDataset, TFRecord and Parquet: the fields to pack, by member extension, feature name
    /// or column name (`None`: the ones at least half the samples have, see [`FieldChoice`]).
    pub fields: Option<Vec<FieldChoice>>,
    /// Storage options of an object-storage destination (`s3://...`; the names of
    /// `OpenOptions::storage_options`, plus `upload_part_bytes`); credentials otherwise come from
    /// the environment.
    pub storage_options: std::collections::BTreeMap<String, String>,
}

/// The default of [`PackOptions::max_skip_fraction`]: 1% of the inputs.
pub const DEFAULT_MAX_SKIP_FRACTION: f64 = 0.01;

/// Changes made to images while packing, for decode speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImagePolicy {
    /// Rewrite progressive JPEGs as baseline, losslessly (same coefficients, same pixels; about
    /// 3× faster to decode, and croppable).
    pub baseline: bool,
    /// Re-encode images whose longer side exceeds this (lossy: decode, resize, JPEG at
    /// `quality`), like FFCV's `max_resolution`. Recorded in the manifest.
    pub max_side: Option<u32>,
    /// JPEG quality of re-encoded images.
    pub quality: u8,
    /// Largest image (width × height) packed, checked from the header before any decode or
    /// transcode: an image over it is skipped and counted. The default is the loader's
    /// ([`stokehold_ops::DEFAULT_MAX_PIXELS`]), which would refuse such an image anyway.
    pub max_pixels: u64,
    /// Rewrite every JPEG losslessly as baseline with restart markers aligned to MCU rows, so a
    /// crop needs only its share of the Huffman decoding (see `stokehold_ops::restart`): same
    /// pixels, ~4% more bytes, ~0.2 ms of packing CPU per ImageNet-sized baseline JPEG, and random
    /// crops decode ~1.3× as fast (centre crops ~1.25×). On by default (`pack --no-restart-markers`
    /// turns it off and keeps the bytes as given); an image the rewrite refuses is kept as given
    /// and listed in `kept-as-is.txt`.
    pub restart_markers: bool,
}

impl Default for ImagePolicy {
    fn default() -> Self {
        ImagePolicy {
            baseline: false,
            max_side: None,
            quality: 90,
            max_pixels: stokehold_ops::DEFAULT_MAX_PIXELS,
            restart_markers: DEFAULT_RESTART_MARKERS,
        }
    }
}

/// Whether packing rewrites JPEGs with restart markers unless told otherwise (the `stokehold pack`
/// command, `_native._pack` and `from_hf`, `PartWriter` and the Ray `Datasink`): the one place the
/// default is spelled.
pub const DEFAULT_RESTART_MARKERS: bool = true;

/// What [`apply_image_policy`] did to one image.
#[derive(Debug, Default)]
pub struct Applied {
    /// A progressive JPEG was rewritten as baseline.
    pub transcoded: bool,
    /// The image was re-encoded smaller (lossy).
    pub resized: bool,
    /// A lossless rewrite failed, so the bytes were kept as given: why.
    pub kept: Option<String>,
}

/// Apply `policy` to one image's bytes. The lossless rewrites (restart markers, baseline) are
/// optimisations: an image they fail on (libjpeg-turbo refuses it, e.g. a truncated file that a
/// plain decode would still read with a warning) is kept as given and reported, never dropped.
/// Only an image that cannot be decoded for `max_side` is an error.
pub fn apply_image_policy(
    bytes: &mut Vec<u8>,
    policy: &ImagePolicy,
) -> Result<Applied, crate::Unusable> {
    use stokehold_ops::jpeg::{Decoder, Pixels};
    if let Some(max_side) = policy.max_side {
        let mut d = Decoder::new().map_err(|e| e.to_string())?;
        let mut px = Pixels {
            width: 0,
            height: 0,
            channels: 3,
            data: Vec::new(),
        };
        stokehold_ops::decode::decode_full(&mut d, bytes, false, policy.max_pixels, &mut px)
            .map_err(|e| format!("cannot decode to resize: {e}"))?;
        let long = px.width.max(px.height);
        if long > max_side {
            let f = f64::from(max_side) / f64::from(long);
            let (w, h) = (
                ((f64::from(px.width) * f).round() as u32).max(1),
                ((f64::from(px.height) * f).round() as u32).max(1),
            );
            let mut out = Pixels {
                width: w,
                height: h,
                channels: px.channels,
                data: vec![0; (w * h) as usize * usize::from(px.channels)],
            };
            stokehold_ops::resize::Resizer::new()
                .resize(
                    px.view(),
                    stokehold_ops::geometry::full(px.width, px.height),
                    w,
                    h,
                    &mut out.data,
                )
                .map_err(|e| e.to_string())?;
            *bytes =
                stokehold_ops::jpeg::encode(&out, policy.quality).map_err(|e| e.to_string())?;
            if policy.restart_markers {
                // our own encoder's output: a failure here is a bug, not the input's fault
                add_restarts(bytes)?;
            }
            return Ok(Applied {
                resized: true,
                ..Applied::default()
            });
        }
    }
    let Ok(h) = crate::jpeg::parse_header(bytes) else {
        return Ok(Applied::default()); // PNG, WebP: nothing to do
    };
    let mut applied = Applied::default();
    if policy.restart_markers {
        match add_restarts(bytes) {
            Ok(()) => {
                applied.transcoded = h.progressive;
                return Ok(applied);
            }
            Err(e) => applied.kept = Some(e.into()),
        }
    }
    if policy.baseline && h.progressive {
        match stokehold_ops::jpeg::to_baseline(bytes) {
            Ok(b) => {
                // rewritten after all (as baseline, without restart markers): not "as given"
                *bytes = b;
                applied.transcoded = true;
                applied.kept = None;
            }
            Err(e) => {
                let e = format!("lossless baseline transcode failed: {e}");
                applied.kept = Some(match applied.kept {
                    Some(first) => format!("{first}; {e}"),
                    None => e,
                });
            }
        }
    }
    Ok(applied)
}

/// Rewrite a JPEG losslessly with restart markers (baseline, same pixels).
fn add_restarts(bytes: &mut Vec<u8>) -> Result<(), crate::Unusable> {
    *bytes = stokehold_ops::jpeg::with_restarts(bytes)
        .map_err(|e| format!("lossless transcode with restart markers failed: {e}"))?;
    Ok(())
}

/// Refuse an image over `max_pixels` from its header alone, before anything is decoded.
fn check_pixel_limit(bytes: &[u8], max_pixels: u64) -> Result<(), crate::Unusable> {
    let (w, h) = match crate::jpeg::parse_header(bytes) {
        Ok(i) => (u32::from(i.width), u32::from(i.height)),
        Err(_) => stokehold_ops::decode::dimensions(bytes)
            .map_err(|e| format!("unreadable image header: {e}"))?,
    };
    stokehold_ops::jpeg::check_pixels(w.into(), h.into(), max_pixels)
        .map_err(|e| format!("{e} (--max-pixels)").into())
}

/// What pack does to videos (`--video-keyint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoPolicy {
    /// Re-encode each video with a keyframe every `K` frames (H.264 by x264 at `crf`, its first
    /// video stream only, through the `ffmpeg` command), so that a clip decodes from a keyframe
    /// at most `K - 1` frames before it; lossy. `None`: stored as given.
    pub keyint: Option<u32>,
    /// x264's constant rate factor of the re-encode (18: visually lossless for most video).
    pub crf: u8,
}

impl Default for VideoPolicy {
    fn default() -> Self {
        VideoPolicy {
            keyint: None,
            crf: 18,
        }
    }
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            write: DatasetWriteOptions::default(),
            threads: 0,
            strict: false,
            keep_pickle: false,
            path_column: None,
            max_item_bytes: 1 << 30,
            images: ImagePolicy::default(),
            video: VideoPolicy::default(),
            max_skip_fraction: DEFAULT_MAX_SKIP_FRACTION,
            fields: None,
            storage_options: Default::default(),
        }
    }
}

/// An input that was not packed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The file, archive member or record (`file.tfrecord @ byte 1234`).
    pub input: String,
    /// Why.
    pub reason: String,
}

/// What a pack did.
#[derive(Debug, Clone)]
pub struct PackReport {
    /// The source kind.
    pub kind: SourceKind,
    /// The written dataset's manifest.
    pub manifest: Manifest,
    /// Bytes of input data read (file contents, member data, record payloads).
    pub input_bytes: u64,
    /// Inputs left out, in input order.
    pub skipped: Vec<Skipped>,
    /// Of the packed JPEGs, how many are progressive (they decode about 3× slower).
    pub progressive_jpegs: u64,
    /// Progressive JPEGs rewritten as baseline (`ImagePolicy::baseline`).
    pub transcoded_to_baseline: u64,
    /// Images re-encoded smaller (`ImagePolicy::max_side`).
    pub resized: u64,
    /// Samples whose JPEGs were stored as given because a lossless rewrite (restart markers,
    /// baseline) failed on them, with libjpeg-turbo's reason; in input order. Such a file is
    /// usually damaged (the rewrite stops at the first warning); the loader's corrupt-sample
    /// policy deals with it if its decode fails too.
    pub kept_as_is: Vec<Skipped>,
    /// Other things worth telling the user (e.g. dropped pickle members).
    pub notes: Vec<String>,
}

/// Progress reporting; called from the packing thread.
pub trait Progress: Sync {
    /// A phase starts ("scanning", "packing"), with its size when known.
    fn start(&self, phase: &str, items: Option<u64>, bytes: Option<u64>);
    /// `items` inputs and `bytes` input bytes were done.
    fn advance(&self, items: u64, bytes: u64);
    /// The phase is over.
    fn finish(&self);
}

/// A [`Progress`] that shows nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _: &str, _: Option<u64>, _: Option<u64>) {}
    fn advance(&self, _: u64, _: u64) {}
    fn finish(&self) {}
}

/// Errors of [`pack`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// Writing the dataset failed.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// The sources could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A source does not exist.
    #[error(
        "{}: no such file or directory: give an existing image folder, .jsonl/.csv table, \
         .tar (WebDataset), .tfrecord or .parquet file, or a directory of .tar, .tfrecord or \
         .parquet files",
        path.display()
    )]
    MissingSource {
        /// The source as given.
        path: PathBuf,
    },
    /// The sources are not something `pack` understands, or are inconsistent.
    #[error("{0}")]
    Input(String),
    /// `strict` is set and an input could not be used.
    #[error("{}: {} (--strict makes this fatal; without it the input is skipped and counted)", .0.input, .0.reason)]
    Strict(Skipped),
    /// A Parquet file's footer or a row group could not be decoded.
    #[error("{}{}: {source}", path.display(), row_group.map(|g| format!(", row group {g}")).unwrap_or_default())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The row group, when the footer was read.
        row_group: Option<usize>,
        /// The decoder's error.
        #[source]
        source: ::parquet::errors::ParquetError,
    },
    /// Nothing usable was found.
    #[error("no samples to pack: {0}")]
    Empty(String),
    /// More of the input was skipped than [`PackOptions::max_skip_fraction`] allows; nothing
    /// was written.
    #[error(
        "{skipped} of {inputs} inputs were skipped ({:.1}%), more than the limit of {:.1}% \
         (--max-skip-fraction {max_fraction}); nothing was written. The first: {}: {}",
        100.0 * *skipped as f64 / *inputs as f64, 100.0 * max_fraction, first.input, first.reason
    )]
    TooManySkipped {
        /// Inputs skipped.
        skipped: usize,
        /// Inputs in all (packed and skipped).
        inputs: u64,
        /// The limit.
        max_fraction: f64,
        /// The first one skipped.
        first: Skipped,
    },
}

impl From<SourceError> for PackError {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Input(s) => PackError::Input(s),
            SourceError::Empty(s) => PackError::Empty(s),
            SourceError::Io { path, source } => PackError::Io { path, source },
        }
    }
}

impl PackError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> PackError {
        PackError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// One input, loaded: a sample ready to encode, or a reason to skip it.
pub(crate) enum Loaded {
    Sample {
        /// The file, archive member or record it came from, for errors found later.
        input: String,
        values: Vec<FieldValue<'static>>,
        bytes: u64,
        progressive: bool,
    },
    Skip(Skipped),
}

enum Encoded {
    Record {
        record: Vec<u8>,
        bytes: u64,
        progressive: bool,
        transcoded: bool,
        resized: bool,
        /// Images of this sample stored as given because a lossless rewrite failed on them.
        kept: Option<Skipped>,
    },
    Skip(Skipped),
}

/// The writing end of a pack: the dataset writer and the running report.
pub(crate) struct Sink<'a> {
    writer: DatasetWriter,
    strict: bool,
    input_bytes: u64,
    skipped: Vec<Skipped>,
    progressive: u64,
    transcoded: u64,
    resized: u64,
    kept_as_is: Vec<Skipped>,
    images: ImagePolicy,
    notes: Vec<String>,
    progress: &'a dyn Progress,
    pool: &'a rayon::ThreadPool,
}

/// Samples are loaded and encoded this many at a time.
const CHUNK: usize = 256;

impl Sink<'_> {
    /// Record an input that was skipped before loading (or fail, when strict).
    pub(crate) fn skip(&mut self, s: Skipped) -> Result<(), PackError> {
        if self.strict {
            return Err(PackError::Strict(s));
        }
        self.skipped.push(s);
        Ok(())
    }

    /// Load and encode `jobs` in parallel, in chunks, and write the results in job order.
    pub(crate) fn run<J: Send>(
        &mut self,
        jobs: impl IntoIterator<Item = J>,
        load: impl Fn(J) -> Loaded + Sync,
    ) -> Result<(), PackError> {
        let schema = self.writer.schema().clone();
        let policy = self.images;
        let touch_images = policy.baseline || policy.max_side.is_some() || policy.restart_markers;
        let encode = |job: J| -> Encoded {
            match load(job) {
                Loaded::Skip(s) => Encoded::Skip(s),
                Loaded::Sample {
                    input,
                    mut values,
                    bytes,
                    progressive,
                } => {
                    let (mut transcoded, mut resized) = (false, false);
                    let mut kept = Vec::new();
                    // every image, alone or an item of a list of images, named in messages
                    let images = schema.fields.iter().zip(values.iter_mut()).flat_map(
                        |(field, v)| -> Vec<(String, &mut std::borrow::Cow<'static, [u8]>)> {
                            match (&field.ty, v) {
                                (FieldType::Image { .. }, FieldValue::Image(b)) => {
                                    vec![(format!("field {:?}", field.name), b)]
                                }
                                (ty, FieldValue::List(items)) if ty.is_image_list() => items
                                    .iter_mut()
                                    .enumerate()
                                    .filter_map(|(k, item)| match item {
                                        FieldValue::Image(b) => {
                                            Some((format!("field {:?} item {k}", field.name), b))
                                        }
                                        _ => None,
                                    })
                                    .collect(),
                                _ => Vec::new(),
                            }
                        },
                    );
                    for (name, b) in images {
                        let applied = check_pixel_limit(b, policy.max_pixels).and_then(|()| {
                            if !touch_images {
                                return Ok(Applied::default());
                            }
                            let mut owned = std::mem::take(b).into_owned();
                            let a = apply_image_policy(&mut owned, &policy);
                            *b = owned.into();
                            a
                        });
                        match applied {
                            Ok(a) => {
                                transcoded |= a.transcoded;
                                resized |= a.resized;
                                if let Some(why) = a.kept {
                                    kept.push(format!("{name}: {why}"));
                                }
                            }
                            Err(e) => {
                                return Encoded::Skip(Skipped {
                                    input,
                                    reason: format!("{name}: {e}"),
                                });
                            }
                        }
                    }
                    let mut record = Vec::new();
                    match RecordEncoder::new(3).encode(&schema, &values, &mut record) {
                        Ok(()) => Encoded::Record {
                            record,
                            bytes,
                            progressive,
                            transcoded,
                            resized,
                            kept: (!kept.is_empty()).then(|| Skipped {
                                input,
                                reason: kept.join("; "),
                            }),
                        },
                        Err(e) => Encoded::Skip(Skipped {
                            input,
                            reason: e.to_string(),
                        }),
                    }
                }
            }
        };
        let mut jobs = jobs.into_iter();
        let mut pending: Option<Vec<Encoded>> = None;
        let pool = self.pool;
        loop {
            // Jobs are drawn here, on the calling thread (a source iterator need not be Send).
            let chunk: Vec<J> = jobs.by_ref().take(CHUNK).collect();
            // Encode the next chunk while the previous one is written.
            let (written, next) = pool.install(|| {
                rayon::join(
                    || match pending.take() {
                        Some(done) => self.write_chunk(done),
                        None => Ok(()),
                    },
                    || chunk.into_par_iter().map(&encode).collect::<Vec<_>>(),
                )
            });
            written?;
            if next.is_empty() {
                return Ok(());
            }
            pending = Some(next);
        }
    }

    fn write_chunk(&mut self, chunk: Vec<Encoded>) -> Result<(), PackError> {
        for item in chunk {
            match item {
                Encoded::Record {
                    record,
                    bytes,
                    progressive,
                    transcoded,
                    resized,
                    kept,
                } => {
                    self.writer.write_encoded(&record)?;
                    self.kept_as_is.extend(kept);
                    self.input_bytes += bytes;
                    self.progressive += u64::from(progressive);
                    self.transcoded += u64::from(transcoded);
                    self.resized += u64::from(resized);
                    self.progress.advance(1, bytes);
                }
                Encoded::Skip(s) => {
                    self.skip(s)?;
                    self.progress.advance(1, 0);
                }
            }
        }
        Ok(())
    }
}

/// Guess the kind of `sources` from names and contents ([`crate::sources::detect`]).
pub fn detect(sources: &[PathBuf]) -> Result<SourceKind, PackError> {
    Ok(crate::sources::detect(sources)?)
}

/// Pack `sources` into a new dataset at `dest`. `kind` None means [`detect`].
pub fn pack(
    sources: &[PathBuf],
    dest: &Path,
    kind: Option<SourceKind>,
    options: &PackOptions,
    progress: &dyn Progress,
) -> Result<PackReport, PackError> {
    check_paths(sources, dest)?;
    let kind = match kind {
        Some(k) => k,
        None => detect(sources)?,
    };
    if options.fields.is_some()
        && !matches!(
            kind,
            SourceKind::WebDataset | SourceKind::TfRecord | SourceKind::Parquet | SourceKind::Jsonl
        )
    {
        return Err(PackError::Input(format!(
            "--fields chooses WebDataset members, TFRecord features, Parquet columns or JSONL \
             keys; a {} source has fixed fields",
            kind.name()
        )));
    }
    let plan = match kind {
        SourceKind::ImageFolder => image_folder::plan(sources, options, progress)?,
        SourceKind::Jsonl | SourceKind::Csv => table::plan(sources, kind, options, progress)?,
        SourceKind::WebDataset => webdataset::plan(sources, options, progress)?,
        SourceKind::TfRecord => tfrecord::plan(sources, options, progress)?,
        SourceKind::Parquet => parquet::plan(sources, options, progress)?,
    };
    let pool = thread_pool(options.threads, "pack")?;
    let mut writer = DatasetWriter::create_with(
        dest,
        plan.schema.clone(),
        options.write,
        &options.storage_options,
    )?;
    if let Some(classes) = &plan.classes {
        writer.set_classes(classes.clone());
    }
    let mut sink = Sink {
        writer,
        strict: options.strict,
        input_bytes: 0,
        skipped: plan.skipped_early,
        progressive: 0,
        transcoded: 0,
        resized: 0,
        kept_as_is: Vec::new(),
        images: options.images,
        notes: plan.notes,
        progress,
        pool: &pool,
    };
    if sink.strict
        && let Some(first) = sink.skipped.first()
    {
        return Err(PackError::Strict(first.clone()));
    }
    progress.start("packing", plan.items, plan.bytes);
    (plan.run)(&mut sink)?;
    progress.finish();
    if sink.writer.is_empty() {
        return Err(nothing_packed(&sink.skipped, "inputs", "samples"));
    }
    check_skips(&sink.skipped, sink.writer.len(), options.max_skip_fraction)?;
    let Sink {
        mut writer,
        input_bytes,
        skipped,
        progressive,
        transcoded,
        resized,
        kept_as_is,
        notes,
        ..
    } = sink;
    let mut source = serde_json::json!({
        "kind": kind.name(),
        "skipped": skipped.len(),
        "progressive_jpegs": progressive,
    });
    for (k, v) in plan.source {
        source[k] = v;
    }
    let has_images = plan
        .schema
        .fields
        .iter()
        .any(|f| matches!(f.ty, FieldType::Image { .. }) || f.ty.is_image_list());
    if has_images && (options.images.baseline || options.images.restart_markers) {
        source["transcoded_to_baseline"] = transcoded.into();
        source["kept_as_is"] = kept_as_is.len().into();
    }
    if has_images {
        // whether the JPEGs carry restart markers (the default) or are stored as given
        source["restart_markers"] = options.images.restart_markers.into();
    }
    if let Some(k) = options.video.keyint {
        // lossy: say so in the manifest
        source["video_keyint"] = k.into();
        source["video_crf"] = options.video.crf.into();
    }
    if let Some(m) = options.images.max_side {
        // lossy: say so in the manifest
        source["max_side"] = m.into();
        source["resized_lossy"] = resized.into();
        source["jpeg_quality"] = options.images.quality.into();
    }
    writer.set_source(source);
    add_skipped_file(&mut writer, &skipped)?;
    add_list_file(&mut writer, "kept-as-is.txt", &kept_as_is)?;
    let manifest = writer.finish()?;
    Ok(PackReport {
        kind,
        manifest,
        input_bytes,
        skipped,
        progressive_jpegs: progressive,
        transcoded_to_baseline: transcoded,
        resized,
        kept_as_is,
        notes,
    })
}

/// Refuse source URLs (sources are local files), a destination URL of anything but an object
/// store, and a local destination that is a source, holds one or lies inside one: symbolic links
/// are resolved first, so a link cannot hide the overlap. (An overwrite could otherwise replace
/// the very files it packs; a dataset inside a source folder would be read as input by the next
/// pack.)
pub(crate) fn check_paths(sources: &[PathBuf], dest: &Path) -> Result<(), PackError> {
    for p in sources {
        stokehold_storage::require_local(p)?;
        if let Err(e) = std::fs::symlink_metadata(p)
            && e.kind() == std::io::ErrorKind::NotFound
        {
            return Err(PackError::MissingSource { path: p.clone() });
        }
    }
    let Some(dest) = stokehold_storage::local_path(dest)? else {
        return Ok(()); // an object store: nothing to overlap with the local sources
    };
    let d = resolve(dest);
    for s in sources {
        let Ok(src) = s.canonicalize() else {
            continue; // a missing source is reported by its reader
        };
        if d.starts_with(&src) || src.starts_with(&d) {
            return Err(PackError::Input(format!(
                "the destination {} {} the source {}: choose a destination outside the sources",
                dest.display(),
                if d == src {
                    "is"
                } else if d.starts_with(&src) {
                    "lies inside"
                } else {
                    "holds"
                },
                s.display()
            )));
        }
    }
    Ok(())
}

/// `p` absolute with symbolic links resolved, also when its last components do not exist yet.
fn resolve(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut head = abs.as_path();
    let mut tail = Vec::new();
    loop {
        if let Ok(real) = head.canonicalize() {
            return tail.iter().rev().fold(real, |acc, n| acc.join(n));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name);
                head = parent;
            }
            _ => return abs,
        }
    }
}

/// Fail when more than `max_fraction` of the inputs (packed and skipped) were skipped.
pub(crate) fn check_skips(
    skipped: &[Skipped],
    packed: u64,
    max_fraction: f64,
) -> Result<(), PackError> {
    let inputs = packed + skipped.len() as u64;
    match skipped.first() {
        Some(first) if skipped.len() as f64 > max_fraction * inputs as f64 => {
            Err(PackError::TooManySkipped {
                skipped: skipped.len(),
                inputs,
                max_fraction,
                first: first.clone(),
            })
        }
        _ => Ok(()),
    }
}

/// The packer's rayon pool: `threads` threads (0: one per core) named `stokehold-{name}-N`.
pub(crate) fn thread_pool(
    threads: usize,
    name: &'static str,
) -> Result<rayon::ThreadPool, PackError> {
    let threads = match stokehold_storage::check_threads("threads", threads)
        .map_err(|e| PackError::Input(e.to_string()))?
    {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("stokehold-{name}-{i}"))
        .build()
        .map_err(|e| PackError::Input(format!("cannot start {threads} threads: {e}")))
}

/// The error of a pack that wrote nothing: every one of `what` was skipped, or there were none
/// (no `items`).
pub(crate) fn nothing_packed(skipped: &[Skipped], what: &str, items: &str) -> PackError {
    PackError::Empty(match skipped.first() {
        Some(s) => format!(
            "all {} {what} were skipped; the first: {}: {}",
            skipped.len(),
            s.input,
            s.reason
        ),
        None => format!("the source holds no {items}"),
    })
}

/// List the skipped inputs in the dataset's `skipped.txt` (none: no file).
pub(crate) fn add_skipped_file(
    writer: &mut DatasetWriter,
    skipped: &[Skipped],
) -> Result<(), PackError> {
    add_list_file(writer, "skipped.txt", skipped)
}

/// Write `list` as `name` in the dataset, one "input<TAB>reason" per line (nothing when empty).
fn add_list_file(
    writer: &mut DatasetWriter,
    name: &str,
    list: &[Skipped],
) -> Result<(), PackError> {
    if !list.is_empty() {
        let mut text = String::new();
        for s in list {
            let _ = writeln!(text, "{}\t{}", s.input, s.reason.replace(['\n', '\t'], " "));
        }
        writer.add_file(name, text.as_bytes())?;
    }
    Ok(())
}

/// What a source reader works out before packing: the schema and a way to produce the samples.
pub(crate) struct Plan<'a> {
    pub schema: Schema,
    pub classes: Option<Vec<String>>,
    /// Items and bytes to expect, for the progress bar.
    pub items: Option<u64>,
    pub bytes: Option<u64>,
    /// Inputs already known to be unusable.
    pub skipped_early: Vec<Skipped>,
    pub notes: Vec<String>,
    /// Keys added to the manifest's `source` (e.g. the fields stored empty where missing).
    pub source: serde_json::Map<String, serde_json::Value>,
    #[allow(clippy::type_complexity)]
    pub run: Box<dyn FnOnce(&mut Sink<'_>) -> Result<(), PackError> + 'a>,
}

/// The files to read: each source that is a file, and the non-hidden files of each source
/// directory that pass `keep`, sorted by name. `what` names them in the error when there are none.
pub(crate) fn source_files(
    sources: &[PathBuf],
    keep: impl Fn(&Path) -> bool,
    what: &str,
) -> Result<Vec<PathBuf>, PackError> {
    let mut files = Vec::new();
    for s in sources {
        if s.is_dir() {
            let mut v: Vec<PathBuf> = std::fs::read_dir(s)
                .map_err(|e| PackError::io(s, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                        && keep(p)
                })
                .collect();
            v.sort();
            files.extend(v);
        } else {
            files.push(s.clone());
        }
    }
    if files.is_empty() {
        return Err(PackError::Input(format!("no {what} in {sources:?}")));
    }
    Ok(files)
}

/// Why [`read_file`] gives no bytes (without the file's name: callers put it before).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadFileError {
    /// The file could not be opened or read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The file is larger than the limit.
    #[error("larger than the limit of {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },
}

/// Read a whole file of at most `max` bytes.
pub(crate) fn read_file(path: &Path, max: u64) -> Result<Vec<u8>, ReadFileError> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut v = Vec::new();
    f.take(max + 1).read_to_end(&mut v)?;
    if v.len() as u64 > max {
        return Err(ReadFileError::TooLarge { max });
    }
    Ok(v)
}

/// Check an image's bytes: a known codec, and for JPEG a readable frame header. Returns whether it
/// is a progressive JPEG.
pub(crate) fn check_image(bytes: &[u8]) -> Result<bool, crate::Unusable> {
    use stokehold_format::ImageCodec;
    match ImageCodec::sniff(bytes) {
        Some(ImageCodec::Jpeg) => crate::jpeg::parse_header(bytes)
            .map(|i| i.progressive)
            .map_err(|e| format!("corrupt JPEG: {e}").into()),
        Some(_) => Ok(false),
        None => Err(crate::Unusable::from(format!(
            "not an image (JPEG, PNG or WebP): starts with \"{}\"",
            bytes[..bytes.len().min(8)].escape_ascii()
        ))),
    }
}
