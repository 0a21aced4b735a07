//! JSON Lines as rows of fields: what a line's values are (one pass of `serde_json` over the
//! line's bytes, no tree built), the kinds the field types are inferred from, and a value's
//! canonical JSON text (compact, keys in the order the line gives them, as Python's
//! `json.dumps(v, separators=(",", ":"), ensure_ascii=False)` writes a parsed value).
//!
//! Read in place (`inplace/jsonl.rs`) a line is parsed when a sample is read: a line that is not
//! a JSON object, or lacks a required key, is a corrupt sample then.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use stokehold_format::{FieldType, FieldValue};

use super::{FieldChoice, SourceError};

/// Lines parsed to choose the fields (the first ones of each file).
pub const SAMPLED_LINES: u64 = 1000;

/// A UTF-8 byte order mark, skipped at a file's start.
pub const BOM: &[u8] = b"\xef\xbb\xbf";

/// The lines of a JSONL file's bytes that are samples: each one's number (from 1), byte offset
/// and bytes (without its `\n` or `\r\n`). Blank lines (only whitespace) are not samples; a
/// byte order mark at the start is skipped; the last line may have no newline.
pub fn lines(all: &[u8]) -> impl Iterator<Item = (u64, usize, &[u8])> {
    let mut pos = if all.starts_with(BOM) { BOM.len() } else { 0 };
    let mut n = 0u64;
    std::iter::from_fn(move || {
        while pos < all.len() {
            let end = memchr::memchr(b'\n', &all[pos..]).map_or(all.len(), |i| pos + i);
            let start = pos;
            pos = end + 1;
            n += 1;
            let line = &all[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if !is_blank(line) {
                return Some((n, start, line));
            }
        }
        None
    })
}

/// Whether a line is blank (only whitespace): not a sample.
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Why a line gives no value for a key ([`field_value`], [`image_paths`], [`video_path`]): what is
/// wrong, without the line's place.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FieldError {
    /// The line is not a JSON object.
    #[error("{0}")]
    Line(BadLine),
    /// The line lacks the key (and the field is not optional).
    #[error("has no key {0:?}")]
    NoKey(String),
    /// The key holds null (and the field is not optional).
    #[error("key {0:?} is null")]
    Null(String),
    /// The key's value does not fit the field's type.
    #[error("key {key:?} is {}, which does not fit its field type {ty}", kind.describe())]
    Type {
        /// The key.
        key: String,
        /// What it holds.
        kind: Kind,
        /// The field's type.
        ty: FieldType,
    },
    /// A `list:image` key that does not hold a list of strings.
    #[error("key {0:?} is not a list of image file names")]
    NotImageNames(String),
    /// A `video` key that does not hold a string.
    #[error("key {0:?} is not a video file name")]
    NotVideoName(String),
}

/// Field `key` of type `ty` of the JSON object that is `line`: an int64 from an integer or a
/// boolean, a float64 from a number, a string from a string (as it is) or any other value (its
/// canonical JSON text), a json field from any value (its canonical JSON text, `null` too); a
/// missing (or, but for json, null) key gives the type's empty value where the field is
/// `optional`. The error says what is wrong (without the line's place).
pub fn field_value<'a>(
    line: &'a [u8],
    key: &str,
    ty: &FieldType,
    optional: bool,
) -> Result<FieldValue<'a>, FieldError> {
    let got = find(line, key).map_err(FieldError::Line)?;
    let got = match got {
        Some(Got::Null) if *ty == FieldType::Json => return Ok(FieldValue::String("null".into())),
        None | Some(Got::Null) => {
            return match super::empty_value(ty).filter(|_| optional) {
                Some(v) => Ok(v),
                None if got.is_none() => Err(FieldError::NoKey(key.to_string())),
                None => Err(FieldError::Null(key.to_string())),
            };
        }
        Some(v) => v,
    };
    let kind = got.kind();
    Ok(match (ty, got) {
        (FieldType::Int64, Got::Int(v)) => FieldValue::Int64(v),
        (FieldType::Int64, Got::Bool(b)) => FieldValue::Int64(i64::from(b)),
        (FieldType::Float64, Got::Int(v)) => FieldValue::Float64(v as f64),
        (FieldType::Float64, Got::Float(v)) => FieldValue::Float64(v),
        (FieldType::String, v) => FieldValue::String(v.into_text().unwrap_or(Cow::Borrowed(""))),
        (FieldType::Json, Got::Json(t)) => FieldValue::String(Cow::Owned(t)),
        (FieldType::Json, Got::Str(s)) => FieldValue::String(Cow::Owned(
            serde_json::to_string(&*s).expect("a string serializes"),
        )),
        (FieldType::Json, v) => FieldValue::String(v.into_text().unwrap_or(Cow::Borrowed("null"))),
        (ty, _) => {
            return Err(FieldError::Type {
                key: key.to_string(),
                kind,
                ty: ty.clone(),
            });
        }
    })
}

/// The file names a `list:image` key `key` of `line` lists (relative to the JSONL file's
/// folder, or absolute); none where the key is missing or null and the field is `optional`.
/// The error says what is wrong (without the line's place).
pub fn image_paths(line: &[u8], key: &str, optional: bool) -> Result<Vec<String>, FieldError> {
    match find(line, key).map_err(FieldError::Line)? {
        Some(Got::Json(text)) => serde_json::from_str(&text).ok(),
        None | Some(Got::Null) if optional => Some(Vec::new()),
        None => return Err(FieldError::NoKey(key.to_string())),
        Some(Got::Null) => return Err(FieldError::Null(key.to_string())),
        _ => None,
    }
    .ok_or_else(|| FieldError::NotImageNames(key.to_string()))
}

/// The file name a `video` key `key` of `line` holds (relative to the JSONL file's folder, or
/// absolute). The error says what is wrong (without the line's place).
pub fn video_path(line: &[u8], key: &str) -> Result<String, FieldError> {
    match find(line, key).map_err(FieldError::Line)? {
        Some(Got::Str(s)) => Ok(s.into_owned()),
        None => Err(FieldError::NoKey(key.to_string())),
        Some(_) => Err(FieldError::NotVideoName(key.to_string())),
    }
}

/// A field of JSON Lines: its key, type, and whether a line may lack it.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlField {
    /// The key.
    pub name: String,
    /// Its type.
    pub ty: FieldType,
    /// A line may lack it (or hold null): stored empty there (`null` for json).
    pub optional: bool,
}

/// The fields of JSON Lines from their first lines' statistics (`all`, over `files` files), in
/// the order the lines name their keys: `given` (`--fields`), or every key that at least half
/// the lines hold with a value other than null (pack's rule); a key missing from some is
/// optional when its type is string. Keys null in every line are left out (said in `notes`).
pub fn choose(
    all: &LineStats,
    files: usize,
    given: Option<&[FieldChoice]>,
    notes: &mut Vec<String>,
    source: &mut serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<JsonlField>, SourceError> {
    let objects = all.lines - all.invalid;
    if all.more_keys {
        notes.push(format!(
            "the first lines name more than {MAX_KEYS} distinct keys: only the first {MAX_KEYS} \
             were counted for the field choice"
        ));
    }
    let mut types = std::collections::BTreeMap::new();
    for k in &all.keys {
        match k.field_type() {
            Some(t) => {
                types.insert(k.name.clone(), t);
            }
            None => notes.push(format!(
                "key {:?} is null in every one of the first lines: left out",
                k.name
            )),
        }
    }
    if types.is_empty() {
        return Err(SourceError::Empty(format!(
            "no usable keys in the first {} lines of {files} files ({objects} of them JSON \
             objects)",
            all.lines
        )));
    }
    let counts = all
        .keys
        .iter()
        .filter(|k| types.contains_key(&k.name))
        .map(|k| (k.name.clone(), k.count))
        .collect();
    let chosen = super::choose_fields(
        &counts,
        objects,
        given,
        |n| matches!(types[n], FieldType::String | FieldType::Json) || types[n].is_image_list(),
        |n| format!("key {n:?}"),
        notes,
        source,
    )?;
    let mut out: Vec<JsonlField> = chosen
        .into_iter()
        .map(|c| JsonlField {
            ty: types[&c.name].clone(),
            name: c.name,
            optional: c.optional,
        })
        .collect();
    if given.is_none() {
        // in the order the lines name them
        out.sort_by_key(|c| all.keys.iter().position(|k| k.name == c.name));
    }
    source.insert("sampled_lines".into(), all.lines.into());
    Ok(out)
}

/// The kind of a JSON value, as a field's type is inferred from the kinds of its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool,
    /// An integer that fits an i64 (or a u64: then read as a float).
    Int,
    /// Any other number.
    Float,
    /// A string.
    Str,
    /// A list or an object (kept as its canonical JSON text).
    Json,
}

impl Kind {
    /// In messages: "a string", "a list or object", ...
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Null => "null",
            Kind::Bool => "a boolean",
            Kind::Int => "an integer",
            Kind::Float => "a number",
            Kind::Str => "a string",
            Kind::Json => "a list or object",
        }
    }
}

/// One value of a line, as read for a field.
#[derive(Debug, Clone, PartialEq)]
pub enum Got<'a> {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// Another number.
    Float(f64),
    /// A string (borrowed from the line when it has no escapes).
    Str(Cow<'a, str>),
    /// A list or an object: its canonical JSON text.
    Json(String),
}

impl Got<'_> {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Got::Null => Kind::Null,
            Got::Bool(_) => Kind::Bool,
            Got::Int(_) => Kind::Int,
            Got::Float(_) => Kind::Float,
            Got::Str(_) => Kind::Str,
            Got::Json(_) => Kind::Json,
        }
    }
}

impl<'a> Got<'a> {
    /// The value as the text a `string` field holds: a string as it is, anything else as its
    /// canonical JSON text (`null` gives `None`).
    pub fn into_text(self) -> Option<Cow<'a, str>> {
        Some(match self {
            Got::Null => return None,
            Got::Str(s) => s,
            Got::Json(t) => Cow::Owned(t),
            Got::Bool(b) => Cow::Borrowed(if b { "true" } else { "false" }),
            Got::Int(i) => Cow::Owned(i.to_string()),
            Got::Float(f) => Cow::Owned(float_text(f)),
        })
    }
}

use stokehold_format::json::float_text;

/// Why a line gives no values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadLine {
    /// Not valid JSON (serde_json's message: what, and the column).
    NotJson(String),
    /// Valid JSON, but not an object.
    NotObject(Kind),
}

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadLine::NotJson(e) => write!(f, "not valid JSON ({e})"),
            BadLine::NotObject(k) => write!(f, "not a JSON object (it is {})", k.describe()),
        }
    }
}

/// The value of key `key` in the JSON object that is `line` (`None`: the object has no such
/// key; the last one when it has several, as Python's `json.loads` keeps). The whole line is
/// checked, whichever key is asked for.
pub fn find<'a>(line: &'a [u8], key: &str) -> Result<Option<Got<'a>>, BadLine> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let got = de
        .deserialize_any(FindVisitor { key })
        .map_err(|e| BadLine::NotJson(e.to_string()))?;
    de.end().map_err(|e| BadLine::NotJson(e.to_string()))?;
    got.map_err(BadLine::NotObject)
}

/// What a value names of files read by their names: a list of image file names (how many), or
/// one video file name (see [`KeyStats::field_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Names {
    /// Nothing of the kind.
    None,
    /// A list of strings each with an image extension, of this many (a string with one: 1).
    Images(u32),
    /// A string with a video extension (`.mp4`, `.mkv`, `.webm`, ...).
    Video,
}

/// The keys of the JSON object that is `line`, in order, each with its value's kind and what
/// it names of files ([`Names`]).
pub fn keys(line: &[u8]) -> Result<Vec<(String, Kind, Names)>, BadLine> {
    let mut de = serde_json::Deserializer::from_slice(line);
    let got = de
        .deserialize_any(KeysVisitor)
        .map_err(|e| BadLine::NotJson(e.to_string()))?;
    de.end().map_err(|e| BadLine::NotJson(e.to_string()))?;
    got.map_err(BadLine::NotObject)
}

use stokehold_format::json::CanonVisitor;
pub use stokehold_format::json::canonical;

struct FindVisitor<'k> {
    key: &'k str,
}

/// A non-object line's kind, through a visitor's result.
type OrKind<T> = Result<T, Kind>;

macro_rules! not_object {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Err(Kind::Bool))
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Err(Kind::Int))
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Err(Kind::Int))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Err(Kind::Float))
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Err(Kind::Str))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Err(Kind::Null))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Err(Kind::Json))
        }
    };
}

impl<'de> Visitor<'de> for FindVisitor<'_> {
    type Value = OrKind<Option<Got<'de>>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    not_object!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(k) = map.next_key_seed(KeySeed)? {
            if k == self.key {
                found = Some(map.next_value_seed(GotSeed)?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Ok(found))
    }
}

struct KeysVisitor;

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = OrKind<Vec<(String, Kind, Names)>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    not_object!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out: Vec<(String, Kind, Names)> = Vec::new();
        while let Some(k) = map.next_key_seed(KeySeed)? {
            let (kind, images) = map.next_value_seed(KindSeed)?;
            // a repeated key: the last value counts, as Python keeps it
            match out.iter_mut().find(|(n, _, _)| *n == k) {
                Some(slot) => (slot.1, slot.2) = (kind, images),
                None => out.push((k.into_owned(), kind, images)),
            }
        }
        Ok(Ok(out))
    }
}

/// A key, borrowed from the line when it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// A value's kind, and what it names of files ([`Names`]); the value itself skipped.
struct KindSeed;

impl<'de> DeserializeSeed<'de> for KindSeed {
    type Value = (Kind, Names);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = (Kind, Names);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok((Kind::Bool, Names::None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok((Kind::Int, Names::None))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        let kind = if i64::try_from(v).is_ok() {
            Kind::Int
        } else {
            Kind::Float
        };
        Ok((kind, Names::None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok((Kind::Float, Names::None))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        // (one image file name: what a list's item is checked for)
        let names = if super::has_image_extension(v) {
            Names::Images(1)
        } else if super::has_video_extension(v) {
            Names::Video
        } else {
            Names::None
        };
        Ok((Kind::Str, names))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((Kind::Null, Names::None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (mut names, mut all) = (0u32, true);
        while let Some(item) = seq.next_element_seed(KindSeed)? {
            all &= item == (Kind::Str, Names::Images(1));
            names = names.saturating_add(1);
        }
        Ok((
            Kind::Json,
            if all {
                Names::Images(names)
            } else {
                Names::None
            },
        ))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok((Kind::Json, Names::None))
    }
}

/// A value as read for a field ([`Got`]).
struct GotSeed;

impl<'de> DeserializeSeed<'de> for GotSeed {
    type Value = Got<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(GotVisitor)
    }
}

struct GotVisitor;

impl<'de> Visitor<'de> for GotVisitor {
    type Value = Got<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Got::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Got::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(match i64::try_from(v) {
            Ok(i) => Got::Int(i),
            Err(_) => Got::Float(v as f64),
        })
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Got::Float(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Got::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Got::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Got::Str(Cow::Owned(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Got::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let mut out = String::new();
        CanonVisitor(&mut out).visit_seq(seq)?;
        Ok(Got::Json(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let mut out = String::new();
        CanonVisitor(&mut out).visit_map(map)?;
        Ok(Got::Json(out))
    }
}

/// What the first lines of a file hold of each key, for the field choice.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyStats {
    /// The key.
    pub name: String,
    /// Lines whose value is not null.
    pub count: u64,
    /// Values by kind.
    pub null: u64,
    /// Booleans.
    pub bool: u64,
    /// Integers.
    pub int: u64,
    /// Other numbers.
    pub float: u64,
    /// Strings.
    pub str: u64,
    /// Lists and objects.
    pub json: u64,
    /// Of the lists, those of image file names only (strings with an image extension).
    #[serde(default)]
    pub image_lists: u64,
    /// The names those lists hold.
    #[serde(default)]
    pub image_names: u64,
    /// Of the strings, those that name a video file (a video extension).
    #[serde(default)]
    pub video_names: u64,
}

impl KeyStats {
    fn add(&mut self, kind: Kind, names: Names) {
        match (kind, names) {
            (Kind::Json, Names::Images(n)) => {
                self.image_lists += 1;
                self.image_names += u64::from(n);
            }
            (Kind::Str, Names::Video) => self.video_names += 1,
            _ => {}
        }
        match kind {
            Kind::Null => self.null += 1,
            Kind::Bool => self.bool += 1,
            Kind::Int => self.int += 1,
            Kind::Float => self.float += 1,
            Kind::Str => self.str += 1,
            Kind::Json => self.json += 1,
        }
        if kind != Kind::Null {
            self.count += 1;
        }
    }

    fn merge(&mut self, o: &KeyStats) {
        self.count += o.count;
        self.null += o.null;
        self.bool += o.bool;
        self.int += o.int;
        self.float += o.float;
        self.str += o.str;
        self.json += o.json;
        self.image_lists += o.image_lists;
        self.image_names += o.image_names;
        self.video_names += o.video_names;
    }

    /// The field type its values make: int64 (integers, booleans as 0/1), float64 (numbers),
    /// list:image (every value a list of file names with an image extension, `.jpg`, `.jpeg`,
    /// `.jpe`, `.png` or `.webp`, and at least one name: the files' bytes, read relative to the
    /// JSONL file's folder, by `pack` and in place alike), video (every value a string naming
    /// a video file, none null: the file's frame index and bytes), json (lists and objects), string
    /// (strings; mixed kinds as each value's text, a list or object as its canonical JSON
    /// text); `None` when every value is null.
    pub fn field_type(&self) -> Option<FieldType> {
        let numbers = self.int + self.float;
        Some(if self.count == 0 {
            return None;
        } else if self.json == self.count && self.image_lists == self.json && self.image_names > 0 {
            FieldType::List {
                item: stokehold_format::ListItem::Image {
                    codec: stokehold_format::ImageCodec::Auto,
                },
            }
        } else if self.str == self.count && self.video_names == self.str && self.null == 0 {
            FieldType::Video
        } else if self.str + self.json == 0 && self.float == 0 {
            FieldType::Int64
        } else if self.str + self.json + self.bool == 0 && numbers > 0 {
            FieldType::Float64
        } else if self.str + self.bool + numbers == 0 {
            FieldType::Json
        } else {
            FieldType::String
        })
    }
}

/// What the first lines of a file hold: how many were read, how many were not a JSON object
/// (and where the first was), and each key in the order the lines name them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineStats {
    /// Lines read.
    pub lines: u64,
    /// Of them, lines that are not a JSON object.
    pub invalid: u64,
    /// The first of those: its line number and why.
    pub first_invalid: Option<(u64, String)>,
    /// The keys, in the order the lines first name them (at most [`MAX_KEYS`]).
    pub keys: Vec<KeyStats>,
    /// Keys past the first [`MAX_KEYS`] were met (and not counted).
    #[serde(default)]
    pub more_keys: bool,
}

/// Distinct keys counted in a file's first lines (a kept index holds them in its header, which
/// has a size limit): a dataset has far fewer fields.
pub const MAX_KEYS: usize = 4096;

impl LineStats {
    /// Observe one line (number `line`, from 1).
    pub fn observe(&mut self, line_no: u64, line: &[u8]) {
        self.lines += 1;
        match keys(line) {
            Ok(ks) => {
                for (name, kind, names) in ks {
                    match self.keys.iter().position(|k| k.name == name) {
                        Some(i) => self.keys[i].add(kind, names),
                        None if self.keys.len() >= MAX_KEYS => self.more_keys = true,
                        None => {
                            let mut k = KeyStats {
                                name,
                                ..KeyStats::default()
                            };
                            k.add(kind, names);
                            self.keys.push(k);
                        }
                    }
                }
            }
            Err(e) => {
                self.invalid += 1;
                if self.first_invalid.is_none() {
                    self.first_invalid = Some((line_no, e.to_string()));
                }
            }
        }
    }

    /// Add another file's statistics.
    pub fn merge(&mut self, o: &LineStats) {
        self.lines += o.lines;
        self.invalid += o.invalid;
        self.more_keys |= o.more_keys;
        for k in &o.keys {
            match self.keys.iter().position(|m| m.name == k.name) {
                Some(i) => self.keys[i].merge(k),
                None if self.keys.len() >= MAX_KEYS => self.more_keys = true,
                None => self.keys.push(k.clone()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_found_and_canonical() {
        let line = br#"{"a": 1, "messages": [ {"role":"user", "content": "h\u00e9\n"}, {"z":1.5e3,"b":null} ], "s": "x\"y", "a": -2}"#;
        assert_eq!(find(line, "a").unwrap(), Some(Got::Int(-2)));
        assert_eq!(
            find(line, "messages").unwrap(),
            Some(Got::Json(
                r#"[{"role":"user","content":"hé\n"},{"z":1500.0,"b":null}]"#.into()
            ))
        );
        assert_eq!(
            find(line, "s").unwrap(),
            Some(Got::Str(Cow::Owned("x\"y".into())))
        );
        assert_eq!(find(line, "nope").unwrap(), None);
        assert!(matches!(find(b"{\"a\":1", "a"), Err(BadLine::NotJson(_))));
        assert!(matches!(
            find(b"{\"a\":1} x", "a"),
            Err(BadLine::NotJson(_))
        ));
        assert_eq!(find(b"[1,2]", "a"), Err(BadLine::NotObject(Kind::Json)));
        // a bad value past the key asked for still makes the line bad
        assert!(matches!(
            find(b"{\"a\":1,\"b\":tru}", "a"),
            Err(BadLine::NotJson(_))
        ));
        assert_eq!(
            canonical(b" { \"b\" : [1, 2.0, true] , \"a\":{}} ").unwrap(),
            r#"{"b":[1,2.0,true],"a":{}}"#
        );
        assert_eq!(
            keys(br#"{"x": "1", "y": [1], "z": null, "w": 18446744073709551615}"#).unwrap(),
            vec![
                ("x".into(), Kind::Str, Names::None),
                ("y".into(), Kind::Json, Names::None),
                ("z".into(), Kind::Null, Names::None),
                ("w".into(), Kind::Float, Names::None)
            ]
        );
        assert_eq!(
            keys(br#"{"v": "a/b.MP4", "i": "c.jpg", "l": ["c.jpg", "d.png"]}"#).unwrap(),
            vec![
                ("v".into(), Kind::Str, Names::Video),
                ("i".into(), Kind::Str, Names::Images(1)),
                ("l".into(), Kind::Json, Names::Images(2)),
            ]
        );
    }

    #[test]
    fn the_keys_counted_are_bounded() {
        let line: String = format!(
            "{{{}}}",
            (0..5000)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut s = LineStats::default();
        s.observe(1, line.as_bytes());
        assert_eq!((s.keys.len(), s.more_keys), (MAX_KEYS, true));
        let mut all = LineStats::default();
        all.merge(&s);
        assert!(all.more_keys && all.keys.len() == MAX_KEYS);
    }

    #[test]
    fn types_follow_the_kinds() {
        let t = |line: &[&[u8]]| {
            let mut s = LineStats::default();
            for (i, l) in line.iter().enumerate() {
                s.observe(i as u64 + 1, l);
            }
            s.keys
                .iter()
                .map(|k| (k.name.clone(), k.field_type()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            t(&[
                br#"{"i":1,"f":1,"s":"a","j":[1],"n":null,"b":true}"#,
                br#"{"i":2,"f":0.5,"s":"b","j":{},"b":false}"#
            ]),
            vec![
                ("i".into(), Some(FieldType::Int64)),
                ("f".into(), Some(FieldType::Float64)),
                ("s".into(), Some(FieldType::String)),
                ("j".into(), Some(FieldType::Json)),
                ("n".into(), None),
                ("b".into(), Some(FieldType::Int64)),
            ]
        );
        // lists of image file names only (an empty one too, or null), at least one name: a list
        // of images; one other item, or a string, or an object, and it is json
        let image_list = Some(FieldType::List {
            item: stokehold_format::ListItem::Image {
                codec: stokehold_format::ImageCodec::Auto,
            },
        });
        assert_eq!(
            t(&[
                br#"{"im":["a.jpg","b/c.PNG"],"e":[],"x":["a.jpg"],"o":["a.jpg"],"s":["a.jpg"]}"#,
                br#"{"im":[],"e":[],"x":["a.jpg","n.txt"],"o":{"a":"b.jpg"},"s":"a.jpg"}"#,
                br#"{"im":null,"e":[],"x":["b.webp"],"o":["a.jpg"],"s":["a.jpg"]}"#,
            ]),
            vec![
                ("im".into(), image_list),
                ("e".into(), Some(FieldType::Json)),
                ("x".into(), Some(FieldType::Json)),
                ("o".into(), Some(FieldType::Json)),
                ("s".into(), Some(FieldType::String)),
            ]
        );
        // names of video files in every line, none null: a video; a null, another name, or a
        // list of them, and it is a string (json)
        assert_eq!(
            t(&[
                br#"{"v":"a.mp4","n":"a.mp4","o":"a.mkv","l":["a.mp4"]}"#,
                br#"{"v":"b/c.webm","n":null,"o":"a.txt","l":["b.mp4"]}"#,
            ]),
            vec![
                ("v".into(), Some(FieldType::Video)),
                ("n".into(), Some(FieldType::String)),
                ("o".into(), Some(FieldType::String)),
                ("l".into(), Some(FieldType::Json)),
            ]
        );
    }

    #[test]
    fn a_key_that_gives_no_value_says_why_in_the_same_words() {
        let err = |r: Result<FieldValue<'_>, FieldError>| r.unwrap_err().to_string();
        let line = br#"{"a": "x", "n": null, "l": [1]}"#;
        assert_eq!(
            err(field_value(line, "b", &FieldType::Int64, false)),
            r#"has no key "b""#
        );
        assert_eq!(
            err(field_value(line, "n", &FieldType::Int64, false)),
            r#"key "n" is null"#
        );
        assert_eq!(
            err(field_value(line, "a", &FieldType::Int64, false)),
            r#"key "a" is a string, which does not fit its field type int64"#
        );
        assert_eq!(
            err(field_value(b"[1]", "a", &FieldType::Int64, false)),
            "not a JSON object (it is a list or object)"
        );
        assert_eq!(
            image_paths(line, "a", false).unwrap_err().to_string(),
            r#"key "a" is not a list of image file names"#
        );
        assert_eq!(
            image_paths(line, "n", false).unwrap_err().to_string(),
            r#"key "n" is null"#
        );
        assert_eq!(
            video_path(line, "l").unwrap_err().to_string(),
            r#"key "l" is not a video file name"#
        );
        assert_eq!(
            video_path(line, "v").unwrap_err().to_string(),
            r#"has no key "v""#
        );
        assert!(
            err(field_value(b"{", "a", &FieldType::Int64, false)).starts_with("not valid JSON (")
        );
    }
}
