//! The typed schema of a dataset: an ordered list of named fields.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{FormatError, Result};

/// Most fields a schema may have.
pub const MAX_FIELDS: usize = 1024;
/// Longest field name, in bytes.
pub const MAX_FIELD_NAME: usize = 256;
/// Most dimensions of an n-d array.
pub const MAX_NDIM: usize = 8;
/// Most items in one value of a `list` field (a sample's images).
pub const MAX_LIST_ITEMS: usize = 1 << 16;

/// Element type of an n-d array field. Elements are stored little-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// IEEE 754 half precision.
    F16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 => 1,
            DType::F16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The name used in schemas and by numpy (`"u8"`, `"f32"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Parse a dtype name; numpy spellings (`uint8`, `float32`, ...) are accepted too.
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "u8" | "uint8" => DType::U8,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "f16" | "float16" => DType::F16,
            "f32" | "float32" => DType::F32,
            "f64" | "float64" => DType::F64,
            _ => return None,
        })
    }
}

/// The codec of an encoded-image field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageCodec {
    /// JPEG (JFIF/Exif), stored as the original file bytes.
    Jpeg,
    /// PNG.
    Png,
    /// WebP.
    Webp,
    /// Any of the above; the decoder tells them apart by their magic bytes.
    Auto,
}

impl ImageCodec {
    /// The name used in schemas.
    pub fn name(self) -> &'static str {
        match self {
            ImageCodec::Jpeg => "jpeg",
            ImageCodec::Png => "png",
            ImageCodec::Webp => "webp",
            ImageCodec::Auto => "auto",
        }
    }

    /// The codec whose magic bytes start `data`, if any (never [`ImageCodec::Auto`]).
    pub fn sniff(data: &[u8]) -> Option<ImageCodec> {
        if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageCodec::Jpeg)
        } else if data.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageCodec::Png)
        } else if data.len() >= 12 && &data[0..4] == b"RIFF" && &data[8..12] == b"WEBP" {
            Some(ImageCodec::Webp)
        } else {
            None
        }
    }

    /// Whether bytes of codec `found` may be stored in a field of this codec.
    pub fn accepts(self, found: ImageCodec) -> bool {
        self == ImageCodec::Auto || self == found
    }
}

/// The type of a field.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// Opaque bytes.
    Bytes,
    /// A UTF-8 string.
    String,
    /// One JSON value as UTF-8 text, checked and made canonical when written
    /// ([`crate::json::canonical`]): a conversation's list of messages. Read, it is a string
    /// of that text.
    Json,
    /// A signed 64-bit integer.
    Int64,
    /// A 64-bit float.
    Float64,
    /// An n-d array with a per-record shape.
    Ndarray {
        /// Element type.
        dtype: DType,
    },
    /// An encoded image, stored as the file's bytes.
    Image {
        /// Its codec.
        codec: ImageCodec,
    },
    /// A video file's bytes as given (its container), led by its frame index
    /// ([`crate::video`]). Read, it is that whole value (bytes).
    Video,
    /// A list of items of one type (a sample's images; bytes; strings), each item stored as a
    /// field of that type would store it (`docs/format.md` §4.2). A list of images keeps each
    /// image's width and height, read from its header when written, in the shard's meta block
    /// (`lists`), so that they are known without reading or decoding the images.
    List {
        /// The type of every item.
        item: ListItem,
    },
}

/// The type of the items of a [`FieldType::List`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ListItem {
    /// Opaque bytes.
    Bytes,
    /// UTF-8 strings.
    String,
    /// Encoded images (their sizes are kept in the meta block).
    Image {
        /// Their codec.
        codec: ImageCodec,
    },
}

impl ListItem {
    /// The field type one item is stored as.
    pub fn field_type(self) -> FieldType {
        match self {
            ListItem::Bytes => FieldType::Bytes,
            ListItem::String => FieldType::String,
            ListItem::Image { codec } => FieldType::Image { codec },
        }
    }
}

impl FieldType {
    /// True for a list of images (whose sizes the meta block keeps).
    pub fn is_image_list(&self) -> bool {
        matches!(
            self,
            FieldType::List {
                item: ListItem::Image { .. }
            }
        )
    }
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldType::Bytes => f.write_str("bytes"),
            FieldType::String => f.write_str("string"),
            FieldType::Json => f.write_str("json"),
            FieldType::Int64 => f.write_str("int64"),
            FieldType::Float64 => f.write_str("float64"),
            FieldType::Ndarray { dtype } => write!(f, "ndarray:{}", dtype.name()),
            FieldType::Image { codec } => write!(f, "image:{}", codec.name()),
            FieldType::Video => f.write_str("video"),
            FieldType::List { item } => write!(f, "list:{}", item.field_type()),
        }
    }
}

/// How a field's bytes are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// As they are.
    #[default]
    None,
    /// One zstd frame per field value, with the decompressed size in the frame header.
    Zstd,
}

/// One named, typed field. In JSON: `{"name": "emb", "type": "ndarray", "dtype": "f32",
/// "compression": "zstd"}` (`dtype` only for ndarray, `codec` only for image, `compression`
/// only when not none); unknown keys are rejected.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawField", into = "RawField")]
pub struct Field {
    /// The field's name: 1 to 256 bytes of UTF-8, unique within the schema.
    pub name: String,
    /// Its type.
    pub ty: FieldType,
    /// Its compression.
    pub compression: Compression,
}

/// The JSON shape of a [`Field`].
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dtype: Option<DType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    item: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    codec: Option<ImageCodec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    compression: Option<Compression>,
}

/// A field of a schema whose type is not one stokehold knows (or lacks its dtype or codec).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "field {name:?}: invalid type {ty:?} (with dtype {dtype:?}, codec {codec:?}); expected \
     bytes, string, json, int64, float64, ndarray with a dtype, image with a codec, video, or list with \
     an item of bytes, string or image (with a codec)"
)]
pub struct InvalidFieldType {
    /// The field's name.
    pub name: String,
    /// The type it names.
    pub ty: String,
    /// The dtype it gives.
    pub dtype: Option<DType>,
    /// The codec it gives.
    pub codec: Option<ImageCodec>,
}

impl TryFrom<RawField> for Field {
    type Error = InvalidFieldType;

    fn try_from(r: RawField) -> std::result::Result<Field, InvalidFieldType> {
        let item = r.item.as_deref();
        let ty = match (r.ty.as_str(), r.dtype, r.codec) {
            (t, dtype, codec) if (t == "list") != item.is_some() => {
                return Err(InvalidFieldType {
                    name: r.name,
                    ty: r.ty,
                    dtype,
                    codec,
                });
            }
            ("list", None, codec) => FieldType::List {
                item: match (item, codec) {
                    (Some("bytes"), None) => ListItem::Bytes,
                    (Some("string"), None) => ListItem::String,
                    (Some("image"), Some(codec)) => ListItem::Image { codec },
                    _ => {
                        return Err(InvalidFieldType {
                            name: r.name,
                            ty: format!("list of {}", item.unwrap_or("")),
                            dtype: None,
                            codec,
                        });
                    }
                },
            },
            ("bytes", None, None) => FieldType::Bytes,
            ("string", None, None) => FieldType::String,
            ("json", None, None) => FieldType::Json,
            ("int64", None, None) => FieldType::Int64,
            ("float64", None, None) => FieldType::Float64,
            ("ndarray", Some(dtype), None) => FieldType::Ndarray { dtype },
            ("image", None, Some(codec)) => FieldType::Image { codec },
            ("video", None, None) => FieldType::Video,
            (_, dtype, codec) => {
                return Err(InvalidFieldType {
                    name: r.name,
                    ty: r.ty,
                    dtype,
                    codec,
                });
            }
        };
        Ok(Field {
            name: r.name,
            ty,
            compression: r.compression.unwrap_or_default(),
        })
    }
}

impl From<Field> for RawField {
    fn from(f: Field) -> RawField {
        let item = match f.ty {
            FieldType::List { item } => Some(
                match item {
                    ListItem::Bytes => "bytes",
                    ListItem::String => "string",
                    ListItem::Image { .. } => "image",
                }
                .to_string(),
            ),
            _ => None,
        };
        let (ty, dtype, codec) = match f.ty {
            FieldType::List { item } => (
                "list",
                None,
                match item {
                    ListItem::Image { codec } => Some(codec),
                    _ => None,
                },
            ),
            FieldType::Bytes => ("bytes", None, None),
            FieldType::String => ("string", None, None),
            FieldType::Json => ("json", None, None),
            FieldType::Int64 => ("int64", None, None),
            FieldType::Float64 => ("float64", None, None),
            FieldType::Ndarray { dtype } => ("ndarray", Some(dtype), None),
            FieldType::Image { codec } => ("image", None, Some(codec)),
            FieldType::Video => ("video", None, None),
        };
        RawField {
            name: f.name,
            ty: ty.to_string(),
            dtype,
            item,
            codec,
            compression: (f.compression != Compression::None).then_some(f.compression),
        }
    }
}

impl Field {
    /// A field without compression.
    pub fn new(name: impl Into<String>, ty: FieldType) -> Field {
        Field {
            name: name.into(),
            ty,
            compression: Compression::None,
        }
    }

    /// The field with zstd compression.
    pub fn zstd(mut self) -> Field {
        self.compression = Compression::Zstd;
        self
    }

    /// The short spelling accepted by [`FromStr`]: `"string+zstd"`, `"ndarray:f32"`, ...
    pub fn type_spec(&self) -> String {
        match self.compression {
            Compression::None => self.ty.to_string(),
            Compression::Zstd => format!("{}+zstd", self.ty),
        }
    }
}

impl FromStr for FieldType {
    type Err = FormatError;

    /// Short spellings: `bytes`, `str`/`string`, `json`, `int`/`int64`, `float`/`float64`,
    /// `ndarray:DTYPE` (also `array:DTYPE`), `image` (= `image:auto`), `image:jpeg|png|webp|auto`,
    /// `list:bytes`, `list:string`, `list:image[:CODEC]`.
    fn from_str(s: &str) -> Result<FieldType> {
        let bad = || {
            FormatError::Schema(format!(
                "unknown field type {s:?} (expected bytes, string, json, int64, float64, ndarray:DTYPE, image[:CODEC], video or list:bytes|string|image[:CODEC])"
            ))
        };
        if let Some(item) = s.strip_prefix("list:") {
            let item = match item.parse::<FieldType>().map_err(|_| bad())? {
                FieldType::Bytes => ListItem::Bytes,
                FieldType::String => ListItem::String,
                FieldType::Image { codec } => ListItem::Image { codec },
                _ => return Err(bad()),
            };
            return Ok(FieldType::List { item });
        }
        let (head, arg) = match s.split_once(':') {
            Some((h, a)) => (h, Some(a)),
            None => (s, None),
        };
        Ok(match (head, arg) {
            ("bytes", None) => FieldType::Bytes,
            ("str" | "string", None) => FieldType::String,
            ("json", None) => FieldType::Json,
            ("video", None) => FieldType::Video,
            ("int" | "int64", None) => FieldType::Int64,
            ("float" | "float64", None) => FieldType::Float64,
            ("ndarray" | "array", Some(d)) => FieldType::Ndarray {
                dtype: DType::parse(d).ok_or_else(|| {
                    FormatError::Schema(format!(
                        "unknown dtype {d:?} in {s:?} (expected u8, i32, i64, f16, f32 or f64)"
                    ))
                })?,
            },
            ("image", None) => FieldType::Image {
                codec: ImageCodec::Auto,
            },
            ("image", Some(c)) => FieldType::Image {
                codec: match c {
                    "jpeg" | "jpg" => ImageCodec::Jpeg,
                    "png" => ImageCodec::Png,
                    "webp" => ImageCodec::Webp,
                    "auto" => ImageCodec::Auto,
                    _ => return Err(bad()),
                },
            },
            _ => return Err(bad()),
        })
    }
}

/// Parse a field spec such as `"string+zstd"` into (type, compression).
pub fn parse_field_spec(spec: &str) -> Result<(FieldType, Compression)> {
    match spec.strip_suffix("+zstd") {
        Some(t) => Ok((t.parse()?, Compression::Zstd)),
        None => Ok((spec.parse()?, Compression::None)),
    }
}

/// The schema of a dataset: its fields, in record order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schema {
    /// The fields, in the order they are stored in each record.
    pub fields: Vec<Field>,
}

impl Schema {
    /// A validated schema.
    pub fn new(fields: Vec<Field>) -> Result<Schema> {
        let s = Schema { fields };
        s.validate()?;
        Ok(s)
    }

    /// A schema from `(name, spec)` pairs, e.g. `[("image", "image:jpeg"), ("label", "int64")]`.
    pub fn from_specs<'a>(specs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Schema> {
        let mut fields = Vec::new();
        for (name, spec) in specs {
            let (ty, compression) = parse_field_spec(spec)?;
            fields.push(Field {
                name: name.to_string(),
                ty,
                compression,
            });
        }
        Schema::new(fields)
    }

    /// Check the rules: 1..=1024 fields, names of 1..=256 bytes without control characters, unique
    /// names, and zstd only on non-image fields.
    pub fn validate(&self) -> Result<()> {
        if self.fields.is_empty() || self.fields.len() > MAX_FIELDS {
            return Err(FormatError::Schema(format!(
                "a schema has 1 to {MAX_FIELDS} fields, this one has {}",
                self.fields.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &self.fields {
            if f.name.is_empty()
                || f.name.len() > MAX_FIELD_NAME
                || f.name.chars().any(char::is_control)
            {
                return Err(FormatError::Schema(format!(
                    "field name {:?} must be 1 to {MAX_FIELD_NAME} bytes without control characters",
                    f.name
                )));
            }
            if !seen.insert(f.name.as_str()) {
                return Err(FormatError::Schema(format!(
                    "field name {:?} appears twice",
                    f.name
                )));
            }
            if f.ty == FieldType::Video && f.compression != Compression::None {
                return Err(FormatError::Schema(format!(
                    "field {:?}: video is already compressed; zstd is for other fields",
                    f.name
                )));
            }
            if matches!(f.ty, FieldType::List { .. }) && f.compression != Compression::None {
                return Err(FormatError::Schema(format!(
                    "field {:?}: a list is stored uncompressed (its items are read one by one)",
                    f.name
                )));
            }
            if matches!(f.ty, FieldType::Image { .. }) && f.compression != Compression::None {
                return Err(FormatError::Schema(format!(
                    "field {:?}: encoded images are already compressed; zstd is for non-image fields",
                    f.name
                )));
            }
        }
        Ok(())
    }

    /// The position of the field called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Always false for a valid schema.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, field) in self.fields.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}: {}", field.name, field.type_spec())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print_back() {
        let s = Schema::from_specs([
            ("image", "image:jpeg"),
            ("label", "int64"),
            ("caption", "string+zstd"),
            ("emb", "ndarray:f32"),
            ("raw", "bytes"),
            ("score", "float"),
        ])
        .unwrap();
        assert_eq!(
            s.to_string(),
            "image: image:jpeg, label: int64, caption: string+zstd, emb: ndarray:f32, raw: bytes, score: float64"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            json.contains(r#"{"name":"emb","type":"ndarray","dtype":"f32"}"#),
            "{json}"
        );
        let back: Schema = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn list_fields_parse_print_and_round_trip_through_json() {
        let s = Schema::from_specs([
            ("images", "list:image"),
            ("jpegs", "list:image:jpeg"),
            ("blobs", "list:bytes"),
            ("names", "list:str"),
        ])
        .unwrap();
        assert_eq!(
            s.to_string(),
            "images: list:image:auto, jpegs: list:image:jpeg, blobs: list:bytes, names: list:string"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert!(
            json.contains(r#"{"name":"jpegs","type":"list","item":"image","codec":"jpeg"}"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<Schema>(&json).unwrap(), s);
        assert!(s.fields[0].ty.is_image_list() && !s.fields[2].ty.is_image_list());
        // lists of lists, of numbers; images compressed; an item on another type; no item
        for bad in ["list:list:bytes", "list:int64", "list", "list:json"] {
            assert!(Schema::from_specs([("x", bad)]).is_err(), "{bad}");
        }
        assert!(Schema::from_specs([("x", "list:image+zstd")]).is_err());
        assert!(Schema::from_specs([("x", "list:string+zstd")]).is_err());
        for bad in [
            r#"{"fields":[{"name":"a","type":"bytes","item":"image"}]}"#,
            r#"{"fields":[{"name":"a","type":"list"}]}"#,
            r#"{"fields":[{"name":"a","type":"list","item":"image"}]}"#,
            r#"{"fields":[{"name":"a","type":"list","item":"int64"}]}"#,
        ] {
            assert!(serde_json::from_str::<Schema>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn invalid_schemas_are_rejected() {
        assert!(Schema::from_specs([("a", "int64"), ("a", "bytes")]).is_err());
        assert!(Schema::from_specs([("", "int64")]).is_err());
        assert!(Schema::from_specs([("img", "image+zstd")]).is_err());
        assert!(Schema::from_specs([("x", "ndarray:f8")]).is_err());
        assert!(Schema::from_specs([("x", "complex")]).is_err());
        assert!(Schema::new(vec![]).is_err());
        let err =
            serde_json::from_str::<Schema>(r#"{"fields":[{"name":"a","type":"int64","extra":1}]}"#);
        assert!(err.is_err());
    }

    #[test]
    fn sniff_recognises_magic() {
        assert_eq!(
            ImageCodec::sniff(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some(ImageCodec::Jpeg)
        );
        assert_eq!(
            ImageCodec::sniff(b"\x89PNG\r\n\x1a\n...."),
            Some(ImageCodec::Png)
        );
        assert_eq!(
            ImageCodec::sniff(b"RIFF\0\0\0\0WEBPVP8 "),
            Some(ImageCodec::Webp)
        );
        assert_eq!(ImageCodec::sniff(b"GIF89a"), None);
    }
}
