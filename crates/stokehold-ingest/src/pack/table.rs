//! JSONL and CSV: one row per sample; one column names a file whose bytes become the sample's
//! `image` field (when every file has an image extension) or `data` field; the other columns
//! become typed fields (int64, float64 or string, inferred over all rows; JSON arrays and objects
//! are kept as their JSON text). Relative paths are resolved against the table's directory.
//! JSONL that names no files (no such column, no `--path-column`) is packed as rows of fields
//! instead (`jsonl.rs`).

use std::path::{Path, PathBuf};

use serde_json::Value;
use stokehold_format::{Field, FieldType, FieldValue, Schema};

use super::{
    Loaded, PackError, PackOptions, Plan, Progress, Skipped, SourceKind, check_image, read_file,
};

const PATH_COLUMNS: [&str; 8] = [
    "path",
    "file",
    "filename",
    "filepath",
    "image",
    "image_path",
    "video",
    "video_path",
];

/// One cell as read.
#[derive(Debug, Clone)]
enum Cell {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// Arrays and objects, as JSON text.
    Json(String),
}

struct Row {
    /// Where the row is, for messages ("data.jsonl:17").
    at: String,
    cells: Vec<Option<Cell>>,
}

struct Table {
    columns: Vec<String>,
    rows: Vec<Row>,
}

fn read_jsonl(path: &Path, max: u64, skipped: &mut Vec<Skipped>) -> Result<Table, PackError> {
    let text =
        read_file(path, max).map_err(|e| PackError::Input(format!("{}: {e}", path.display())))?;
    let text = String::from_utf8(text)
        .map_err(|e| PackError::Input(format!("{}: not UTF-8: {e}", path.display())))?;
    let mut columns: Vec<String> = Vec::new();
    let mut objects = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let at = format!("{}:{}", path.display(), n + 1);
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(map)) => {
                for k in map.keys() {
                    if !columns.contains(k) {
                        columns.push(k.clone());
                    }
                }
                objects.push((at, map));
            }
            Ok(_) => skipped.push(Skipped {
                input: at,
                reason: "line is not a JSON object".into(),
            }),
            Err(e) => skipped.push(Skipped {
                input: at,
                reason: format!("invalid JSON: {e}"),
            }),
        }
    }
    let rows = objects
        .into_iter()
        .map(|(at, mut map)| Row {
            at,
            cells: columns
                .iter()
                .map(|c| match map.remove(c) {
                    None | Some(Value::Null) => None,
                    Some(Value::Bool(b)) => Some(Cell::Bool(b)),
                    Some(Value::Number(n)) => Some(match n.as_i64() {
                        Some(i) => Cell::Int(i),
                        None => Cell::Float(n.as_f64().unwrap_or(f64::NAN)),
                    }),
                    Some(Value::String(s)) => Some(Cell::Str(s)),
                    Some(v) => Some(Cell::Json(v.to_string())),
                })
                .collect(),
        })
        .collect();
    Ok(Table { columns, rows })
}

fn read_csv(path: &Path) -> Result<Table, PackError> {
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .map_err(|e| PackError::Input(format!("{}: {e}", path.display())))?;
    let columns: Vec<String> = r
        .headers()
        .map_err(|e| PackError::Input(format!("{}: header row: {e}", path.display())))?
        .iter()
        .map(str::to_string)
        .collect();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| PackError::Input(format!("{}: {e}", path.display())))?;
        let line = rec.position().map_or(0, |p| p.line());
        rows.push(Row {
            at: format!("{}:{line}", path.display()),
            cells: (0..columns.len())
                .map(|i| {
                    rec.get(i)
                        .filter(|s| !s.is_empty())
                        .map(|s| Cell::Str(s.to_string()))
                })
                .collect(),
        });
    }
    Ok(Table { columns, rows })
}

/// The field type of a column, from all its present cells.
fn infer(table: &Table, col: usize, csv: bool) -> FieldType {
    let cells = table.rows.iter().filter_map(|r| r.cells[col].as_ref());
    if csv {
        let strs: Vec<&str> = cells
            .map(|c| if let Cell::Str(s) = c { s.as_str() } else { "" })
            .collect();
        if !strs.is_empty() && strs.iter().all(|s| s.parse::<i64>().is_ok()) {
            FieldType::Int64
        } else if !strs.is_empty() && strs.iter().all(|s| s.parse::<f64>().is_ok()) {
            FieldType::Float64
        } else {
            FieldType::String
        }
    } else {
        let (mut ints, mut floats, mut bools, mut other) = (0, 0, 0, 0);
        for c in cells {
            match c {
                Cell::Int(_) => ints += 1,
                Cell::Float(_) => floats += 1,
                Cell::Bool(_) => bools += 1,
                _ => other += 1,
            }
        }
        match (ints, floats, bools, other) {
            (_, 0, 0, 0) if ints > 0 => FieldType::Int64,
            (_, _, 0, 0) if floats > 0 => FieldType::Float64,
            (0, 0, _, 0) if bools > 0 => FieldType::Int64,
            _ => FieldType::String,
        }
    }
}

fn convert(cell: &Cell, ty: &FieldType) -> Option<FieldValue<'static>> {
    Some(match (ty, cell) {
        (FieldType::Int64, Cell::Int(i)) => FieldValue::Int64(*i),
        (FieldType::Int64, Cell::Bool(b)) => FieldValue::Int64(i64::from(*b)),
        (FieldType::Int64, Cell::Str(s)) => FieldValue::Int64(s.parse().ok()?),
        (FieldType::Float64, Cell::Int(i)) => FieldValue::Float64(*i as f64),
        (FieldType::Float64, Cell::Float(f)) => FieldValue::Float64(*f),
        (FieldType::Float64, Cell::Str(s)) => FieldValue::Float64(s.parse().ok()?),
        (FieldType::String, Cell::Str(s) | Cell::Json(s)) => FieldValue::String(s.clone().into()),
        (FieldType::String, Cell::Int(i)) => FieldValue::String(i.to_string().into()),
        (FieldType::String, Cell::Float(f)) => FieldValue::String(f.to_string().into()),
        (FieldType::String, Cell::Bool(b)) => FieldValue::String(b.to_string().into()),
        _ => return None,
    })
}

struct Job {
    at: String,
    file: PathBuf,
    path_text: String,
    others: Vec<FieldValue<'static>>,
}

pub(super) fn plan<'a>(
    sources: &'a [PathBuf],
    kind: SourceKind,
    options: &'a PackOptions,
    progress: &dyn Progress,
) -> Result<Plan<'a>, PackError> {
    let [src] = sources else {
        return Err(PackError::Input(format!(
            "pack one {} file at a time ({} given)",
            kind.name(),
            sources.len()
        )));
    };
    let csv = kind == SourceKind::Csv;
    if !csv && options.path_column.is_none() {
        // JSON Lines that name no files: rows of fields, as they are read in place
        let all = read_file(src, options.max_item_bytes)
            .map_err(|e| PackError::Input(format!("{}: {e}", src.display())))?;
        let stats = super::jsonl::first_lines(&all);
        // (a key of that name holding lists, of image paths or else, is no column of files)
        if !stats
            .keys
            .iter()
            .any(|k| PATH_COLUMNS.contains(&k.name.as_str()) && k.str > 0)
        {
            return super::jsonl::plan(src, all, &stats, options);
        }
    }
    if options.fields.is_some() {
        return Err(PackError::Input(format!(
            "{}: --fields chooses the keys of JSON Lines that name no files; a table of files \
             ({}) has fixed fields",
            src.display(),
            kind.name()
        )));
    }
    progress.start("reading table", None, None);
    let mut skipped = Vec::new();
    let table = if csv {
        read_csv(src)?
    } else {
        read_jsonl(src, options.max_item_bytes, &mut skipped)?
    };
    progress.finish();
    let path_col = match &options.path_column {
        Some(c) => table.columns.iter().position(|x| x == c).ok_or_else(|| {
            PackError::Input(format!("{}: no column {c:?} (columns: {:?})", src.display(), table.columns))
        })?,
        None => PATH_COLUMNS
            .iter()
            .find_map(|c| table.columns.iter().position(|x| x == c))
            .ok_or_else(|| {
                PackError::Input(format!(
                    "{}: no file-path column among {:?}; name it with --path-column (columns: {:?})",
                    src.display(),
                    PATH_COLUMNS,
                    table.columns
                ))
            })?,
    };
    let base = src.parent().unwrap_or(Path::new(".")).to_path_buf();
    let all_images = table.rows.iter().all(|r| match &r.cells[path_col] {
        Some(Cell::Str(p)) => crate::sources::has_image_extension(p),
        _ => true,
    });
    let ext_of = |r: &Row| match &r.cells[path_col] {
        Some(Cell::Str(p)) => Path::new(p)
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase),
        _ => None,
    };
    // a table naming videos (every named file an MP4, Matroska or WebM one) packs them as `video` fields
    let all_videos = !table.rows.is_empty()
        && table.rows.iter().all(|r| {
            ext_of(r).is_some_and(|e| crate::sources::VIDEO_EXTENSIONS.contains(&e.as_str()))
        });
    let kind = if all_videos {
        Content::Video
    } else if all_images {
        Content::Image
    } else {
        Content::Data
    };
    let content = match kind {
        Content::Video => "video",
        Content::Image => "image",
        Content::Data => "data",
    };
    let path_name = &table.columns[path_col];
    let mut fields = vec![Field::new(
        content,
        match kind {
            Content::Image => FieldType::Image {
                codec: stokehold_format::ImageCodec::Auto,
            },
            Content::Video => FieldType::Video,
            Content::Data => FieldType::Bytes,
        },
    )];
    if path_name != content {
        fields.push(Field::new(path_name.clone(), FieldType::String));
    }
    let mut other_cols = Vec::new();
    for (i, name) in table.columns.iter().enumerate() {
        if i == path_col {
            continue;
        }
        if name == content {
            return Err(PackError::Input(format!(
                "{}: column {name:?} clashes with the field that holds the files' bytes; rename the column",
                src.display()
            )));
        }
        let ty = infer(&table, i, csv);
        fields.push(Field::new(name.clone(), ty.clone()));
        other_cols.push((i, ty));
    }
    let schema = Schema::new(fields)?;
    let mut jobs = Vec::with_capacity(table.rows.len());
    'rows: for row in table.rows {
        let path_text = match &row.cells[path_col] {
            Some(Cell::Str(p)) => p.clone(),
            Some(_) => {
                skipped.push(Skipped {
                    input: row.at,
                    reason: format!("column {path_name:?} is not a string"),
                });
                continue;
            }
            None => {
                skipped.push(Skipped {
                    input: row.at,
                    reason: format!("column {path_name:?} is missing"),
                });
                continue;
            }
        };
        let mut others = Vec::with_capacity(other_cols.len());
        for (i, ty) in &other_cols {
            match row.cells[*i].as_ref().and_then(|c| convert(c, ty)) {
                Some(v) => others.push(v),
                None => {
                    let reason = match &row.cells[*i] {
                        None => format!("column {:?} is missing", table.columns[*i]),
                        Some(c) => format!("column {:?}: {c:?} is not a {ty}", table.columns[*i]),
                    };
                    skipped.push(Skipped {
                        input: row.at,
                        reason,
                    });
                    continue 'rows;
                }
            }
        }
        jobs.push(Job {
            at: row.at,
            file: base.join(&path_text),
            path_text,
            others,
        });
    }
    let keep_path = path_name != content;
    let max = options.max_item_bytes;
    let policy = options.video.clone();
    Ok(Plan {
        schema,
        classes: None,
        items: Some(jobs.len() as u64),
        bytes: None,
        skipped_early: skipped,
        notes: Vec::new(),
        source: serde_json::Map::new(),
        run: Box::new(move |sink| {
            sink.run(jobs, move |job| load(job, kind, keep_path, max, &policy))
        }),
    })
}

/// What the named files become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Content {
    Image,
    Video,
    Data,
}

fn load(job: Job, kind: Content, keep_path: bool, max: u64, policy: &super::VideoPolicy) -> Loaded {
    let image = kind == Content::Image;
    let skip = |reason: String| {
        Loaded::Skip(Skipped {
            input: format!("{} ({})", job.at, job.file.display()),
            reason,
        })
    };
    let bytes = match read_file(&job.file, max) {
        Ok(b) => b,
        Err(e) => return skip(format!("unreadable: {e}")),
    };
    let mut progressive = false;
    if image {
        match check_image(&bytes) {
            Ok(p) => progressive = p,
            Err(e) => return skip(e.into()),
        }
    }
    let n = bytes.len() as u64;
    let mut values = Vec::with_capacity(2 + job.others.len());
    values.push(match kind {
        Content::Image => FieldValue::Image(bytes.into()),
        Content::Video => match super::image_folder::load_video(&job.file, bytes, policy) {
            Ok(v) => FieldValue::Bytes(v.into()),
            Err(e) => return skip(e.to_string()),
        },
        Content::Data => FieldValue::Bytes(bytes.into()),
    });
    if keep_path {
        values.push(FieldValue::String(job.path_text.into()));
    }
    values.extend(job.others);
    Loaded::Sample {
        input: format!("{} ({})", job.at, job.file.display()),
        values,
        bytes: n,
        progressive,
    }
}
