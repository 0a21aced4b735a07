//! LeRobot datasets read in place (issue #54): a robot dataset's `meta/info.json`, its step
//! tables (`data/…parquet`) and where each episode's camera frames are (`videos/…mp4`), for the
//! two layouts in use:
//!
//! - **v3.0** (`codebase_version: "v3.0"`): `data/chunk-XXX/file-XXX.parquet` hold the steps of
//!   several episodes; `videos/<video_key>/chunk-XXX/file-XXX.mp4` hold several episodes one
//!   after another; `meta/episodes/chunk-XXX/file-XXX.parquet` give each episode's data and
//!   video chunk and file indices and, per camera, `videos/<key>/from_timestamp` (where the
//!   episode starts in its video file).
//! - **v2.1** (and v2.0): one Parquet file and one MP4 per episode and camera
//!   (`data/chunk-000/episode_000000.parquet`, `videos/chunk-000/<key>/episode_000000.mp4`),
//!   `meta/episodes.jsonl` listing the episodes.
//!
//! The paths come from `info.json`'s own `data_path` and `video_path` templates (Python format
//! strings such as `{episode_index:06d}`). A step (a row of the data files, in file order) keeps
//! its numeric columns in memory (LeRobot's tables are small beside its videos); the frames are
//! decoded by the engine from the video files, read in place.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stokehold_format::DType;

/// Why a LeRobot dataset cannot be read; every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeRobotError {
    /// A file could not be opened or read.
    #[error("{}: {detail}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        detail: String,
    },
    /// A file's content is not what the layout says.
    #[error("{}: {detail}", path.display())]
    Layout {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

type Result<T> = std::result::Result<T, LeRobotError>;

fn layout(path: &Path, detail: impl Into<String>) -> LeRobotError {
    LeRobotError::Layout {
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

fn io(path: &Path, e: impl std::fmt::Display) -> LeRobotError {
    LeRobotError::Io {
        path: path.to_path_buf(),
        detail: e.to_string(),
    }
}

/// Whether `root` looks like a LeRobot dataset: it has `meta/info.json`.
pub fn is_lerobot(root: &Path) -> bool {
    root.join("meta").join("info.json").is_file()
}

/// A numeric column of the steps: `width` values per step (1 for a scalar), stored as `dtype`
/// in little-endian bytes, step after step.
#[derive(Debug, Clone)]
pub struct StepColumn {
    /// The column's name (`action`, `observation.state`, `timestamp`, ...).
    pub name: String,
    /// The values' type: float32 and float64 as stored, integers as int64, booleans as uint8.
    pub dtype: DType,
    /// Values per step.
    pub width: usize,
    /// Whether a step's value is a scalar (shape `[]`) rather than a list of `width`.
    pub scalar: bool,
    /// `rows × width` values.
    pub data: Vec<u8>,
}

impl StepColumn {
    /// The bytes of step `row`'s value.
    pub fn row(&self, row: usize) -> &[u8] {
        let n = self.width * self.dtype.size();
        &self.data[row * n..(row + 1) * n]
    }
}

/// One episode: its steps (rows `from..to` of the steps) and, per camera, its video file and
/// where in that file the episode starts.
#[derive(Debug, Clone)]
pub struct Episode {
    /// `episode_index`.
    pub index: i64,
    /// Its first step.
    pub from: usize,
    /// One past its last step.
    pub to: usize,
    /// Camera key → (the video file, the episode's start in it in seconds).
    pub videos: BTreeMap<String, (PathBuf, f64)>,
}

/// A LeRobot dataset's steps and episodes.
#[derive(Debug)]
pub struct LeRobot {
    /// The dataset's folder.
    pub root: PathBuf,
    /// `codebase_version` (`v3.0`, `v2.1`, ...).
    pub version: String,
    /// Steps per second.
    pub fps: f64,
    /// The cameras (features of dtype `video`), in `info.json`'s order.
    pub video_keys: Vec<String>,
    /// The numeric columns of the steps, in the data files' order.
    pub columns: Vec<StepColumn>,
    /// Each step's `timestamp` (seconds from its episode's start).
    pub timestamps: Vec<f64>,
    /// Each step's episode (a position in `episodes`).
    pub step_episode: Vec<u32>,
    /// The episodes, in step order.
    pub episodes: Vec<Episode>,
}

/// Why a path template of `info.json` cannot be formatted ([`format_path`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum TemplateError {
    /// A `{` without its `}`.
    #[error("unclosed {{ in {template:?}")]
    Unclosed {
        /// The template.
        template: String,
    },
    /// A name that is not one of the values.
    #[error("{template:?} names {{{name}}}, which is not known")]
    Unknown {
        /// The template.
        template: String,
        /// The name in braces.
        name: String,
    },
}

/// A Python format template (`{episode_index:06d}`, `{video_key}`) with these values.
fn format_path(
    template: &str,
    values: &[(&str, FormatValue<'_>)],
) -> std::result::Result<String, TemplateError> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| TemplateError::Unclosed {
                template: template.to_string(),
            })?
            + open;
        let field = &rest[open + 1..close];
        let (name, spec) = field.split_once(':').unwrap_or((field, ""));
        let value = values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| TemplateError::Unknown {
                template: template.to_string(),
                name: name.to_string(),
            })?;
        match value {
            FormatValue::Int(i) => {
                let width: usize = spec
                    .strip_prefix('0')
                    .unwrap_or(spec)
                    .trim_end_matches('d')
                    .parse()
                    .unwrap_or(0);
                if spec.starts_with('0') {
                    out.push_str(&format!("{i:0width$}"));
                } else {
                    out.push_str(&format!("{i:width$}"));
                }
            }
            FormatValue::Str(s) => out.push_str(s),
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[derive(Clone, Copy)]
enum FormatValue<'a> {
    Int(i64),
    Str(&'a str),
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| io(path, e))?;
    serde_json::from_str(&text).map_err(|e| layout(path, format!("not JSON: {e}")))
}

fn read_parquet(path: &Path) -> Result<Vec<RecordBatch>> {
    let file = File::open(path).map_err(|e| io(path, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| layout(path, format!("not a Parquet file: {e}")))?;
    reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| layout(path, format!("reading its rows: {e}")))
}

/// A primitive array, read value by value.
enum Prim<'a> {
    F32(&'a arrow_array::Float32Array),
    F64(&'a arrow_array::Float64Array),
    I64(&'a arrow_array::Int64Array),
    I32(&'a arrow_array::Int32Array),
    Bool(&'a arrow_array::BooleanArray),
}

impl<'a> Prim<'a> {
    fn of(a: &'a dyn Array) -> Option<Prim<'a>> {
        Some(match a.data_type() {
            DataType::Float32 => Prim::F32(a.as_primitive::<Float32Type>()),
            DataType::Float64 => Prim::F64(a.as_primitive::<Float64Type>()),
            DataType::Int64 => Prim::I64(a.as_primitive::<Int64Type>()),
            DataType::Int32 => Prim::I32(a.as_primitive::<Int32Type>()),
            DataType::Boolean => Prim::Bool(a.as_boolean()),
            _ => return None,
        })
    }

    fn dtype(&self) -> DType {
        match self {
            Prim::F32(_) => DType::F32,
            Prim::F64(_) => DType::F64,
            Prim::I64(_) | Prim::I32(_) => DType::I64,
            Prim::Bool(_) => DType::U8,
        }
    }

    fn is_null(&self, i: usize) -> bool {
        match self {
            Prim::F32(a) => a.is_null(i),
            Prim::F64(a) => a.is_null(i),
            Prim::I64(a) => a.is_null(i),
            Prim::I32(a) => a.is_null(i),
            Prim::Bool(a) => a.is_null(i),
        }
    }

    fn push(&self, i: usize, out: &mut Vec<u8>) {
        match self {
            Prim::F32(a) => out.extend_from_slice(&a.value(i).to_le_bytes()),
            Prim::F64(a) => out.extend_from_slice(&a.value(i).to_le_bytes()),
            Prim::I64(a) => out.extend_from_slice(&a.value(i).to_le_bytes()),
            Prim::I32(a) => out.extend_from_slice(&i64::from(a.value(i)).to_le_bytes()),
            Prim::Bool(a) => out.push(u8::from(a.value(i))),
        }
    }

    fn as_f64(&self, i: usize) -> f64 {
        match self {
            Prim::F32(a) => f64::from(a.value(i)),
            Prim::F64(a) => a.value(i),
            Prim::I64(a) => a.value(i) as f64,
            Prim::I32(a) => f64::from(a.value(i)),
            Prim::Bool(a) => f64::from(u8::from(a.value(i))),
        }
    }
}

/// A column's values and, for lists, where each row's values start and how many there are.
struct Values<'a> {
    prim: Prim<'a>,
    /// None: one value per row (a scalar column); Some: (row → first value, values per row).
    list: Option<(Vec<usize>, usize)>,
}

/// A list column whose rows are not all as long as its first ([`values`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "row {row} has {len} values, the first row {width}: a step column needs the same length in \
     every row"
)]
struct RaggedColumn {
    /// The row.
    row: usize,
    /// Its values.
    len: i32,
    /// The first row's values.
    width: usize,
}

fn values<'a>(a: &'a ArrayRef) -> Option<std::result::Result<Values<'a>, RaggedColumn>> {
    match a.data_type() {
        DataType::FixedSizeList(_, n) => {
            let l = a.as_fixed_size_list();
            let prim = Prim::of(l.values().as_ref())?;
            let starts = (0..l.len()).map(|i| l.value_offset(i) as usize).collect();
            Some(Ok(Values {
                prim,
                list: Some((starts, *n as usize)),
            }))
        }
        DataType::List(_) => {
            let l = a.as_list::<i32>();
            let prim = Prim::of(l.values().as_ref())?;
            let offsets = l.value_offsets();
            let width = l.value_length(0).max(0) as usize;
            for i in 0..l.len() {
                if l.value_length(i) as usize != width {
                    return Some(Err(RaggedColumn {
                        row: i,
                        len: l.value_length(i),
                        width,
                    }));
                }
            }
            let starts = (0..l.len()).map(|i| offsets[i] as usize).collect();
            Some(Ok(Values {
                prim,
                list: Some((starts, width)),
            }))
        }
        _ => Prim::of(a.as_ref()).map(|prim| Ok(Values { prim, list: None })),
    }
}

/// The parts of `info.json` read here.
struct Info {
    version: String,
    fps: f64,
    data_path: String,
    video_path: Option<String>,
    chunks_size: i64,
    video_keys: Vec<String>,
}

fn info(root: &Path) -> Result<Info> {
    let path = root.join("meta").join("info.json");
    let v = read_json(&path)?;
    let s = |key: &str| -> Result<String> {
        v.get(key)
            .and_then(|x| x.as_str())
            .map(str::to_string)
            .ok_or_else(|| {
                layout(
                    &path,
                    format!("no {key:?} (a string): not a LeRobot info.json"),
                )
            })
    };
    let version = s("codebase_version")?;
    let fps = v
        .get("fps")
        .and_then(|x| x.as_f64())
        .filter(|f| f.is_finite() && *f > 0.0)
        .ok_or_else(|| layout(&path, "no \"fps\" (a positive number)"))?;
    let data_path = s("data_path")?;
    let video_path = v
        .get("video_path")
        .and_then(|x| x.as_str())
        .map(str::to_string);
    let chunks_size = v
        .get("chunks_size")
        .and_then(|x| x.as_i64())
        .unwrap_or(1000)
        .max(1);
    let features = v
        .get("features")
        .and_then(|x| x.as_object())
        .ok_or_else(|| layout(&path, "no \"features\" (an object)"))?;
    let video_keys: Vec<String> = features
        .iter()
        .filter(|(_, f)| f.get("dtype").and_then(|d| d.as_str()) == Some("video"))
        .map(|(k, _)| k.clone())
        .collect();
    if !video_keys.is_empty() && video_path.is_none() {
        return Err(layout(
            &path,
            "features of dtype \"video\" but no \"video_path\"",
        ));
    }
    Ok(Info {
        version,
        fps,
        data_path,
        video_path,
        chunks_size,
        video_keys,
    })
}

/// An episode as the metadata lists it: its index and, per camera, (chunk, file, from_timestamp)
/// for v3.0; the data file it is in.
struct Listed {
    index: i64,
    data_file: PathBuf,
    videos: BTreeMap<String, (PathBuf, f64)>,
}

fn int_at(batch: &RecordBatch, name: &str, row: usize, path: &Path) -> Result<i64> {
    let c = batch
        .column_by_name(name)
        .ok_or_else(|| layout(path, format!("no column {name:?}")))?;
    match Prim::of(c.as_ref()) {
        Some(p) if !p.is_null(row) && matches!(p.dtype(), DType::I64) => Ok(p.as_f64(row) as i64),
        _ => Err(layout(
            path,
            format!("column {name:?} row {row}: not an integer"),
        )),
    }
}

fn float_at(batch: &RecordBatch, name: &str, row: usize, path: &Path) -> Result<f64> {
    let c = batch
        .column_by_name(name)
        .ok_or_else(|| layout(path, format!("no column {name:?}")))?;
    match Prim::of(c.as_ref()) {
        Some(p) if !p.is_null(row) => Ok(p.as_f64(row)),
        _ => Err(layout(
            path,
            format!("column {name:?} row {row}: not a number"),
        )),
    }
}

/// The episodes of a v3.0 dataset, from `meta/episodes/*/*.parquet`, in episode order.
fn listed_v3(root: &Path, info: &Info) -> Result<Vec<Listed>> {
    let dir = root.join("meta").join("episodes");
    let mut files = Vec::new();
    let chunks = std::fs::read_dir(&dir).map_err(|e| io(&dir, e))?;
    for chunk in chunks {
        let chunk = chunk.map_err(|e| io(&dir, e))?.path();
        if chunk.is_dir() {
            for f in std::fs::read_dir(&chunk).map_err(|e| io(&chunk, e))? {
                let f = f.map_err(|e| io(&chunk, e))?.path();
                if f.extension().is_some_and(|x| x == "parquet") {
                    files.push(f);
                }
            }
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(layout(
            &dir,
            "no episodes Parquet file (meta/episodes/chunk-*/file-*.parquet)",
        ));
    }
    let mut out = Vec::new();
    for path in &files {
        for batch in read_parquet(path)? {
            for row in 0..batch.num_rows() {
                let index = int_at(&batch, "episode_index", row, path)?;
                let data = format_path(
                    &info.data_path,
                    &[
                        (
                            "chunk_index",
                            FormatValue::Int(int_at(&batch, "data/chunk_index", row, path)?),
                        ),
                        (
                            "file_index",
                            FormatValue::Int(int_at(&batch, "data/file_index", row, path)?),
                        ),
                    ],
                )
                .map_err(|e| layout(&root.join("meta").join("info.json"), e.to_string()))?;
                let mut videos = BTreeMap::new();
                for key in &info.video_keys {
                    let col = |c: &str| format!("videos/{key}/{c}");
                    let template = info.video_path.as_deref().unwrap_or_default();
                    let file = format_path(
                        template,
                        &[
                            ("video_key", FormatValue::Str(key)),
                            (
                                "chunk_index",
                                FormatValue::Int(int_at(&batch, &col("chunk_index"), row, path)?),
                            ),
                            (
                                "file_index",
                                FormatValue::Int(int_at(&batch, &col("file_index"), row, path)?),
                            ),
                        ],
                    )
                    .map_err(|e| layout(&root.join("meta").join("info.json"), e.to_string()))?;
                    let from = float_at(&batch, &col("from_timestamp"), row, path)?;
                    videos.insert(key.clone(), (root.join(file), from));
                }
                out.push(Listed {
                    index,
                    data_file: root.join(data),
                    videos,
                });
            }
        }
    }
    out.sort_by_key(|l| l.index);
    Ok(out)
}

/// The episodes of a v2.x dataset, from `meta/episodes.jsonl`, in episode order.
fn listed_v2(root: &Path, info: &Info) -> Result<Vec<Listed>> {
    let path = root.join("meta").join("episodes.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| io(&path, e))?;
    let meta = root.join("meta").join("info.json");
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| layout(&path, format!("line {}: not JSON: {e}", n + 1)))?;
        let index = v
            .get("episode_index")
            .and_then(|x| x.as_i64())
            .ok_or_else(|| layout(&path, format!("line {}: no \"episode_index\"", n + 1)))?;
        let chunk = FormatValue::Int(index / info.chunks_size);
        let data = format_path(
            &info.data_path,
            &[
                ("episode_chunk", chunk),
                ("episode_index", FormatValue::Int(index)),
            ],
        )
        .map_err(|e| layout(&meta, e.to_string()))?;
        let mut videos = BTreeMap::new();
        for key in &info.video_keys {
            let file = format_path(
                info.video_path.as_deref().unwrap_or_default(),
                &[
                    ("episode_chunk", chunk),
                    ("video_key", FormatValue::Str(key)),
                    ("episode_index", FormatValue::Int(index)),
                ],
            )
            .map_err(|e| layout(&meta, e.to_string()))?;
            videos.insert(key.clone(), (root.join(file), 0.0));
        }
        out.push(Listed {
            index,
            data_file: root.join(data),
            videos,
        });
    }
    out.sort_by_key(|l| l.index);
    if out.is_empty() {
        return Err(layout(&path, "lists no episode"));
    }
    Ok(out)
}

impl LeRobot {
    /// Opens the dataset at `root`: reads `meta/info.json`, the episodes' metadata and every
    /// data file's numeric columns. Video files are not opened here (their paths are checked
    /// to exist only for the cameras the caller asks for, when it indexes them).
    pub fn open(root: &Path) -> Result<LeRobot> {
        let info = info(root)?;
        let listed = if info.version.starts_with("v2") {
            listed_v2(root, &info)?
        } else if info.version.starts_with("v3") {
            listed_v3(root, &info)?
        } else {
            return Err(layout(
                &root.join("meta").join("info.json"),
                format!(
                    "codebase_version {:?}: the LeRobot layouts read are v2.0, v2.1 and v3.0",
                    info.version
                ),
            ));
        };
        // the data files in the order their episodes first name them, each read once
        let mut files: Vec<&Path> = Vec::new();
        for l in &listed {
            if !files.contains(&l.data_file.as_path()) {
                files.push(&l.data_file);
            }
        }
        let by_index: HashMap<i64, usize> = listed
            .iter()
            .enumerate()
            .map(|(k, l)| (l.index, k))
            .collect();
        let mut columns: Vec<StepColumn> = Vec::new();
        let mut timestamps = Vec::new();
        let mut step_episode: Vec<u32> = Vec::new();
        let mut episodes: Vec<Episode> = Vec::new();
        let mut started: std::collections::HashSet<i64> = std::collections::HashSet::new();
        for path in files {
            if !path.is_file() {
                return Err(io(path, "the data file is missing"));
            }
            for batch in read_parquet(path)? {
                let first_batch = columns.is_empty() && timestamps.is_empty();
                let mut seen = 0;
                for (field, array) in batch.schema().fields().iter().zip(batch.columns()) {
                    let Some(v) = values(array) else { continue };
                    let v =
                        v.map_err(|e| layout(path, format!("column {:?}: {e}", field.name())))?;
                    let (width, scalar) = match &v.list {
                        None => (1, true),
                        Some((_, w)) => (*w, false),
                    };
                    let col = if first_batch {
                        columns.push(StepColumn {
                            name: field.name().clone(),
                            dtype: v.prim.dtype(),
                            width,
                            scalar,
                            data: Vec::new(),
                        });
                        columns.last_mut().expect("just pushed")
                    } else {
                        let c = columns.get_mut(seen).filter(|c| c.name == *field.name());
                        match c {
                            Some(c) if c.width == width && c.dtype == v.prim.dtype() => c,
                            _ => {
                                return Err(layout(
                                    path,
                                    format!(
                                        "column {:?} differs from the first data file's columns",
                                        field.name()
                                    ),
                                ));
                            }
                        }
                    };
                    seen += 1;
                    for row in 0..batch.num_rows() {
                        let (start, n) = match &v.list {
                            None => (row, 1),
                            Some((starts, w)) => (starts[row], *w),
                        };
                        for i in start..start + n {
                            if v.prim.is_null(i) {
                                return Err(layout(
                                    path,
                                    format!("column {:?} row {row}: a null value", field.name()),
                                ));
                            }
                            v.prim.push(i, &mut col.data);
                        }
                    }
                }
                if !first_batch && seen != columns.len() {
                    return Err(layout(
                        path,
                        "its columns differ from the first data file's",
                    ));
                }
                for row in 0..batch.num_rows() {
                    let ep = int_at(&batch, "episode_index", row, path)?;
                    let k = *by_index.get(&ep).ok_or_else(|| {
                        layout(
                            path,
                            format!(
                                "row {row}: episode {ep}, which the episodes metadata does not list"
                            ),
                        )
                    })?;
                    let step = step_episode.len();
                    match episodes.last_mut() {
                        Some(e) if e.index == ep => e.to = step + 1,
                        _ => {
                            if !started.insert(ep) {
                                return Err(layout(
                                    path,
                                    format!("row {row}: episode {ep}'s steps are not contiguous"),
                                ));
                            }
                            episodes.push(Episode {
                                index: ep,
                                from: step,
                                to: step + 1,
                                videos: listed[k].videos.clone(),
                            });
                        }
                    }
                    step_episode.push((episodes.len() - 1) as u32);
                    timestamps.push(float_at(&batch, "timestamp", row, path)?);
                }
            }
        }
        if timestamps.is_empty() {
            return Err(layout(root, "the data files hold no step"));
        }
        Ok(LeRobot {
            root: root.to_path_buf(),
            version: info.version,
            fps: info.fps,
            video_keys: info.video_keys,
            columns,
            timestamps,
            step_episode,
            episodes,
        })
    }

    /// Steps in the dataset.
    pub fn len(&self) -> usize {
        self.timestamps.len()
    }

    /// Whether it has no step (never, once opened).
    pub fn is_empty(&self) -> bool {
        self.timestamps.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_formatted_as_python_does() {
        let p = format_path(
            "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            &[
                ("episode_chunk", FormatValue::Int(1)),
                ("video_key", FormatValue::Str("observation.images.top")),
                ("episode_index", FormatValue::Int(1042)),
            ],
        )
        .unwrap();
        assert_eq!(
            p,
            "videos/chunk-001/observation.images.top/episode_001042.mp4"
        );
        assert_eq!(
            format_path("{nope}", &[]).unwrap_err().to_string(),
            r#""{nope}" names {nope}, which is not known"#
        );
        assert_eq!(
            format_path("data/{x", &[("x", FormatValue::Int(1))])
                .unwrap_err()
                .to_string(),
            r#"unclosed { in "data/{x""#
        );
    }
}
