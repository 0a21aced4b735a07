//! Parquet columns as fields, for `pack` and files read in place alike: the `Kind` a column's
//! Arrow type maps to ([`crate::arrow::field_type`], the one mapping every Arrow writer shares),
//! whether a binary column holds images (`sniff_images`), the Hugging Face class names, and a
//! column value as pack stores it (`value_at`).

use std::borrow::Cow;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type,
    UInt16Type, UInt32Type, UInt64Type,
};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use stokehold_format::{ArrayValue, DType, FieldType, FieldValue, ImageCodec, ListItem};

/// Values looked at to tell whether a binary column holds images.
const SNIFF: usize = 32;

/// How a column becomes a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// Binary values that are images.
    Image,
    /// `struct<bytes: binary, path: string>` (Hugging Face's `Image`): the bytes, or when they
    /// are null the file at `path` (relative to the Parquet file's directory).
    ImageStruct,
    /// Binary values that are not images (decided from the first file's first values).
    Bytes,
    Str,
    Int,
    Float,
    List(DType),
    /// A list of images (`list:image`): Hugging Face's `Sequence(Image())`, a list of `{bytes,
    /// path}` structs (an item with only a path is the file at `path`, for `pack`), or a list of
    /// binary whose first items are images.
    ImageList,
    /// A list of binary items that are not images (`list:bytes`).
    BytesList,
    /// A list of strings (`list:string`).
    StrList,
    /// Structs, and lists of structs or of lists (a conversation's
    /// `list<struct<role: string, content: string>>`): a json field, the value's canonical JSON
    /// text (what `json.dumps(v, separators=(",", ":"), ensure_ascii=False)`
    /// writes of pyarrow's `to_pylist()` value; struct fields in their order).
    Json,
}

impl Kind {
    pub(crate) fn field_type(self) -> FieldType {
        match self {
            Kind::Image | Kind::ImageStruct => FieldType::Image {
                codec: ImageCodec::Auto,
            },
            Kind::Bytes => FieldType::Bytes,
            Kind::Str => FieldType::String,
            Kind::Int => FieldType::Int64,
            Kind::Float => FieldType::Float64,
            Kind::List(dtype) => FieldType::Ndarray { dtype },
            Kind::Json => FieldType::Json,
            Kind::ImageList => FieldType::List {
                item: ListItem::Image {
                    codec: ImageCodec::Auto,
                },
            },
            Kind::BytesList => FieldType::List {
                item: ListItem::Bytes,
            },
            Kind::StrList => FieldType::List {
                item: ListItem::String,
            },
        }
    }

    /// Whether a null of an optional field of this kind is stored as an empty value (text,
    /// bytes, arrays, lists).
    pub(crate) fn can_be_empty(self) -> bool {
        matches!(
            self,
            Kind::Str
                | Kind::Bytes
                | Kind::List(_)
                | Kind::Json
                | Kind::ImageList
                | Kind::BytesList
                | Kind::StrList
        )
    }
}

/// The kind of a column of type `t` ([`crate::arrow::field_type`], the mapping every Arrow
/// writer shares); `None` for a type pack cannot store. Binary columns come back as
/// [`Kind::Bytes`] (lists of binary [`Kind::BytesList`]) until their values are looked at. Lists
/// of lists map to an ndarray, but pack reads flat lists only: a nested one, or a variable-shape
/// tensor, is left out, with a note.
pub(crate) fn kind_of(t: &DataType) -> Option<Kind> {
    match crate::arrow::list_item(t) {
        Some(ListItem::Image { .. }) => return Some(Kind::ImageList),
        Some(ListItem::Bytes) => return Some(Kind::BytesList),
        Some(ListItem::String) => return Some(Kind::StrList),
        None => {}
    }
    if is_json(t) {
        return Some(Kind::Json);
    }
    let nested = match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            crate::arrow::list_element(f.data_type()).is_some()
        }
        t => crate::arrow::tensor_struct_element(t).is_some(),
    };
    if nested {
        return None;
    }
    Some(match crate::arrow::field_type(t)? {
        // (Arrow never maps to video: a video column is bytes)
        FieldType::Bytes | FieldType::Video => Kind::Bytes,
        FieldType::Image { .. } => Kind::ImageStruct,
        FieldType::String => Kind::Str,
        FieldType::Json => Kind::Json,
        FieldType::Int64 => Kind::Int,
        FieldType::Float64 => Kind::Float,
        FieldType::Ndarray { dtype } => Kind::List(dtype),
        // (handled above)
        FieldType::List { .. } => return None,
    })
}

/// Whether a column of type `t` is kept as JSON text ([`Kind::Json`]): a struct (not an image
/// or a tensor) or a list whose values are structs, strings or such lists, with only numbers,
/// booleans and strings at the leaves. Lists of numbers stay arrays.
fn is_json(t: &DataType) -> bool {
    fn leaf(t: &DataType) -> bool {
        t.is_numeric()
            || matches!(t, DataType::Boolean | DataType::Null)
            || crate::arrow::is_string(t)
    }
    fn value(t: &DataType) -> bool {
        leaf(t) || nested(t)
    }
    fn nested(t: &DataType) -> bool {
        match t {
            DataType::Struct(fields) => {
                !crate::arrow::is_image_struct(t)
                    && crate::arrow::tensor_struct_element(t).is_none()
                    && !fields.is_empty()
                    && fields.iter().all(|f| value(f.data_type()))
            }
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                let e = f.data_type();
                (crate::arrow::is_string(e) || nested(e)) && value(e)
            }
            _ => false,
        }
    }
    nested(t)
}

/// Write value `i` of `a` as canonical JSON text into `out` (null as `null`; struct fields in
/// their order; floats as their shortest round trip).
fn json_at(a: &dyn Array, i: usize, out: &mut String) -> Result<(), crate::Unusable> {
    if a.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    let t = a.data_type();
    match t {
        DataType::Null => out.push_str("null"),
        DataType::Boolean => out.push_str(if a.as_boolean().value(i) {
            "true"
        } else {
            "false"
        }),
        DataType::UInt64 => {
            out.push_str(&a.as_primitive::<UInt64Type>().value(i).to_string());
        }
        t if t.is_integer() => out.push_str(&int_at(a, i)?.to_string()),
        t if t.is_floating() => {
            let f = float_at(a, i)?;
            out.push_str(
                &serde_json::Number::from_f64(f).map_or_else(|| "null".into(), |n| n.to_string()),
            );
        }
        t if crate::arrow::is_string(t) => {
            let s = string_at(a, i).unwrap_or_default();
            out.push_str(&serde_json::to_string(s).expect("a string serializes"));
        }
        DataType::Struct(fields) => {
            let st = a.as_struct();
            out.push('{');
            for (k, f) in fields.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(f.name()).expect("a string serializes"));
                out.push(':');
                json_at(st.column(k).as_ref(), i, out)?;
            }
            out.push('}');
        }
        _ => {
            let l = list_at(a, i)?;
            out.push('[');
            for k in 0..l.len() {
                if k > 0 {
                    out.push(',');
                }
                json_at(l.as_ref(), k, out)?;
            }
            out.push(']');
        }
    }
    Ok(())
}

/// What a panic said (its `&str` or `String` payload).
pub(crate) fn panic_payload(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// The Hugging Face features of a file, by column, from the `huggingface` key of its metadata
/// (`{"info": {"features": {"label": {"_type": "ClassLabel", "names": [...]}, ...}}}`).
pub(crate) fn hf_features(
    meta: &ArrowReaderMetadata,
) -> serde_json::Map<String, serde_json::Value> {
    let kv = meta.metadata().file_metadata().key_value_metadata();
    kv.into_iter()
        .flatten()
        .find(|k| k.key == "huggingface")
        .and_then(|k| k.value.as_deref())
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|mut v| match v.pointer_mut("/info/features")?.take() {
            serde_json::Value::Object(m) => Some(m),
            _ => None,
        })
        .unwrap_or_default()
}

/// The Hugging Face type of the images of an image column's feature: `Image` (or `Audio`,
/// `Video`, `Pdf`, which store the same `{bytes, path}` struct), also inside a `Sequence` or
/// `List` (`{"_type": "Sequence", "feature": {"_type": "Image"}}`, or the older `[{"_type":
/// "Image"}]`); `None` when the feature does not say.
pub(crate) fn hf_image_type(feature: Option<&serde_json::Value>) -> Option<&str> {
    let f = feature?;
    if let Some(items) = f.as_array() {
        return hf_image_type(items.first());
    }
    match f.get("_type")?.as_str()? {
        "Sequence" | "List" | "LargeList" => hf_image_type(f.get("feature")),
        t => Some(t),
    }
}

/// The class names of a `ClassLabel` feature.
pub(crate) fn class_names(feature: &serde_json::Value) -> Option<Vec<String>> {
    if feature.get("_type")?.as_str()? != "ClassLabel" {
        return None;
    }
    feature
        .get("names")?
        .as_array()?
        .iter()
        .map(|n| n.as_str().map(str::to_string))
        .collect()
}

/// Whether a binary column's name says it holds images (`image`, `img`, `jpg`, ...).
pub(crate) fn image_by_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("image") || n.contains("img") || super::webdataset::IMAGE.contains(&n.as_str())
}

/// All the items of a list array (of its rows in the slice it is), `None` when it is no list.
fn list_values(a: &dyn Array) -> Option<ArrayRef> {
    if let Some(l) = a.as_list_opt::<i32>() {
        let o = l.value_offsets();
        let (lo, hi) = (o[0] as usize, o[o.len() - 1] as usize);
        Some(l.values().slice(lo, hi - lo))
    } else if let Some(l) = a.as_list_opt::<i64>() {
        let o = l.value_offsets();
        let (lo, hi) = (o[0] as usize, o[o.len() - 1] as usize);
        Some(l.values().slice(lo, hi - lo))
    } else {
        a.as_fixed_size_list_opt().map(|l| {
            let n = l.value_length() as usize;
            l.values().slice(l.offset() * n, l.len() * n)
        })
    }
}

/// Whether most of the first values of a binary column (or items of a list of binary) are
/// images, over any reader of the file; an error names the row group.
pub(crate) fn sniff_images<R: parquet::file::reader::ChunkReader + 'static>(
    reader: R,
    meta: &ArrowReaderMetadata,
    root: usize,
    name: &str,
) -> Result<bool, (Option<usize>, parquet::errors::ParquetError)> {
    let md = meta.metadata();
    let by_name = image_by_name(name);
    let Some(rg) = (0..md.num_row_groups()).find(|&g| md.row_group(g).num_rows() > 0) else {
        return Ok(by_name);
    };
    let mask = ProjectionMask::roots(meta.parquet_schema(), [root]);
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(reader, meta.clone())
        .with_row_groups(vec![rg])
        .with_projection(mask)
        .with_batch_size(SNIFF)
        .build()
        .map_err(|e| (Some(rg), e))?;
    let (mut seen, mut images) = (0usize, 0usize);
    for batch in reader.take(1) {
        let batch = batch.map_err(|e| (Some(rg), e.into()))?;
        let col = batch.column(0);
        // a list column: its items' values
        let col = match list_values(col.as_ref()) {
            Some(items) => items,
            None => Arc::clone(col),
        };
        for i in 0..col.len() {
            if let Some(b) = binary_at(col.as_ref(), i) {
                seen += 1;
                images += usize::from(ImageCodec::sniff(b).is_some());
            }
        }
    }
    Ok(if seen == 0 {
        by_name
    } else {
        images * 2 > seen
    })
}

/// The bytes of binary value `i` (`None`: null, or not a binary array).
pub(crate) fn binary_at(a: &dyn Array, i: usize) -> Option<&[u8]> {
    if a.is_null(i) {
        return None;
    }
    if let Some(b) = a.as_binary_opt::<i32>() {
        Some(b.value(i))
    } else if let Some(b) = a.as_binary_opt::<i64>() {
        Some(b.value(i))
    } else if let Some(b) = a.as_binary_view_opt() {
        Some(b.value(i))
    } else {
        a.as_fixed_size_binary_opt().map(|b| b.value(i))
    }
}

/// The text of string value `i` (`None`: null, or not a string array).
pub(crate) fn string_at(a: &dyn Array, i: usize) -> Option<&str> {
    if a.is_null(i) {
        return None;
    }
    if let Some(s) = a.as_string_opt::<i32>() {
        Some(s.value(i))
    } else if let Some(s) = a.as_string_opt::<i64>() {
        Some(s.value(i))
    } else {
        a.as_string_view_opt().map(|s| s.value(i))
    }
}

/// Integer value `i` (not null) as an i64.
fn int_at(a: &dyn Array, i: usize) -> Result<i64, crate::Unusable> {
    macro_rules! prim {
        ($t:ty) => {
            a.as_primitive::<$t>().value(i)
        };
    }
    Ok(match a.data_type() {
        DataType::Boolean => i64::from(a.as_boolean().value(i)),
        DataType::Int8 => prim!(Int8Type).into(),
        DataType::Int16 => prim!(Int16Type).into(),
        DataType::Int32 => prim!(Int32Type).into(),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type).into(),
        DataType::UInt16 => prim!(UInt16Type).into(),
        DataType::UInt32 => prim!(UInt32Type).into(),
        DataType::UInt64 => {
            let v = prim!(UInt64Type);
            i64::try_from(v).map_err(|_| format!("{v} does not fit in an int64"))?
        }
        t => return Err(crate::Unusable::from(format!("{t} is not an integer type"))),
    })
}

/// Float value `i` (not null) as an f64.
fn float_at(a: &dyn Array, i: usize) -> Result<f64, crate::Unusable> {
    Ok(match a.data_type() {
        DataType::Float16 => a.as_primitive::<Float16Type>().value(i).to_f64(),
        DataType::Float32 => a.as_primitive::<Float32Type>().value(i).into(),
        DataType::Float64 => a.as_primitive::<Float64Type>().value(i),
        t => return Err(crate::Unusable::from(format!("{t} is not a float type"))),
    })
}

/// The elements of list value `i` (not null).
pub(crate) fn list_at(a: &dyn Array, i: usize) -> Result<ArrayRef, crate::Unusable> {
    if let Some(l) = a.as_list_opt::<i32>() {
        Ok(l.value(i))
    } else if let Some(l) = a.as_list_opt::<i64>() {
        Ok(l.value(i))
    } else if let Some(l) = a.as_fixed_size_list_opt() {
        Ok(l.value(i))
    } else {
        Err(crate::Unusable::from(format!(
            "{} is not a list type",
            a.data_type()
        )))
    }
}

/// A list's elements as a 1-d array of `dtype`, little-endian.
fn list_value(values: &dyn Array, dtype: DType) -> Result<ArrayValue<'static>, crate::Unusable> {
    if values.null_count() > 0 {
        return Err(format!(
            "{} of its {} elements are null (an array has no null elements)",
            values.null_count(),
            values.len()
        )
        .into());
    }
    macro_rules! le {
        ($t:ty, $conv:expr) => {
            values
                .as_primitive::<$t>()
                .values()
                .iter()
                .flat_map(|&v| $conv(v).to_le_bytes())
                .collect::<Vec<u8>>()
        };
    }
    let data: Vec<u8> = match values.data_type() {
        DataType::Boolean => values
            .as_boolean()
            .iter()
            .map(|b| u8::from(b == Some(true)))
            .collect(),
        DataType::UInt8 => le!(UInt8Type, std::convert::identity),
        DataType::Int8 => le!(Int8Type, i32::from),
        DataType::Int16 => le!(Int16Type, i32::from),
        DataType::Int32 => le!(Int32Type, std::convert::identity),
        DataType::UInt16 => le!(UInt16Type, i32::from),
        DataType::Int64 => le!(Int64Type, std::convert::identity),
        DataType::UInt32 => le!(UInt32Type, i64::from),
        DataType::UInt64 => {
            let mut out = Vec::with_capacity(values.len() * 8);
            for &v in values.as_primitive::<UInt64Type>().values() {
                let v = i64::try_from(v).map_err(|_| format!("{v} does not fit in an int64"))?;
                out.extend_from_slice(&v.to_le_bytes());
            }
            out
        }
        DataType::Float16 => le!(Float16Type, std::convert::identity),
        DataType::Float32 => le!(Float32Type, std::convert::identity),
        DataType::Float64 => le!(Float64Type, std::convert::identity),
        t => return Err(format!("elements of type {t} are not numbers").into()),
    };
    debug_assert_eq!(data.len(), values.len() * dtype.size());
    Ok(ArrayValue {
        dtype,
        shape: vec![values.len() as u64],
        data: Cow::Owned(data),
    })
}

/// A list field's value of `n` items, item `k` given by `item(k)`: at most
/// [`stokehold_format::schema::MAX_LIST_ITEMS`] items of at most `max` bytes in all, each image's header
/// read (a list of images keeps each one's size); an error names the item.
pub(crate) fn list_items(
    n: usize,
    max: u64,
    mut item: impl FnMut(usize) -> Result<FieldValue<'static>, crate::Unusable>,
) -> Result<FieldValue<'static>, crate::Unusable> {
    use stokehold_format::schema::MAX_LIST_ITEMS;
    if n > MAX_LIST_ITEMS {
        return Err(format!("a list of {n} items, over the limit of {MAX_LIST_ITEMS}").into());
    }
    let mut out = Vec::with_capacity(n);
    let mut total = 0u64;
    for k in 0..n {
        let v = item(k).map_err(|e| format!("item {k}: {e}"))?;
        if let FieldValue::Image(b) = &v {
            stokehold_format::image_size::image_size(b).map_err(|e| format!("item {k}: {e}"))?;
        }
        total += match &v {
            FieldValue::Image(b) | FieldValue::Bytes(b) => b.len() as u64,
            FieldValue::String(s) => s.len() as u64,
            _ => 0,
        };
        if total > max {
            return Err(format!("its items pass the limit of {max} bytes at item {k}").into());
        }
        out.push(v);
    }
    Ok(FieldValue::List(out))
}

/// The bytes of value `i` of a `{bytes, path}` struct column (`None`: a null struct, null
/// bytes, or not such a struct).
pub(crate) fn struct_bytes(a: &dyn Array, i: usize) -> Option<&[u8]> {
    a.as_struct_opt()
        .filter(|s| !s.is_null(i))
        .and_then(|s| s.column_by_name("bytes"))
        .and_then(|b| binary_at(b.as_ref(), i))
}

/// Value `i` of column `a` of kind `kind` (`Ok(None)`: null), as pack stores it; an image is
/// its bytes as given (a `{bytes, path}` struct's bytes: a null when it has only a path).
pub(crate) fn value_at(
    a: &dyn Array,
    i: usize,
    kind: Kind,
    max: u64,
) -> Result<Option<FieldValue<'static>>, crate::Unusable> {
    match kind {
        Kind::Image | Kind::ImageStruct => {
            let bytes = match kind {
                Kind::Image => binary_at(a, i),
                _ => struct_bytes(a, i),
            };
            match bytes {
                Some(v) if v.len() as u64 > max => {
                    Err(format!("{} bytes, over the limit of {max}", v.len()).into())
                }
                v => Ok(v.map(|v| FieldValue::Image(v.to_vec().into()))),
            }
        }
        Kind::Bytes => match binary_at(a, i) {
            Some(v) if v.len() as u64 > max => {
                Err(format!("{} bytes, over the limit of {max}", v.len()).into())
            }
            v => Ok(v.map(|v| FieldValue::Bytes(v.to_vec().into()))),
        },
        Kind::Str => Ok(string_at(a, i).map(|s| FieldValue::String(s.to_string().into()))),
        _ if a.is_null(i) => Ok(None),
        Kind::Int => int_at(a, i).map(|v| Some(FieldValue::Int64(v))),
        Kind::Float => float_at(a, i).map(|v| Some(FieldValue::Float64(v))),
        Kind::List(dtype) => list_at(a, i)
            .and_then(|l| list_value(l.as_ref(), dtype))
            .map(|v| Some(FieldValue::Array(v))),
        Kind::ImageList | Kind::BytesList | Kind::StrList => {
            let items = list_at(a, i)?;
            list_items(items.len(), max, |k| {
                let items = items.as_ref();
                let v = match kind {
                    Kind::StrList => {
                        string_at(items, k).map(|s| FieldValue::String(s.to_string().into()))
                    }
                    Kind::BytesList => {
                        binary_at(items, k).map(|b| FieldValue::Bytes(b.to_vec().into()))
                    }
                    // an item with only a path has no bytes here (`pack` reads its file)
                    _ => binary_at(items, k)
                        .or_else(|| struct_bytes(items, k))
                        .map(|b| FieldValue::Image(b.to_vec().into())),
                };
                v.ok_or_else(|| "null (no value, or an image with no bytes)".into())
            })
            .map(Some)
        }
        Kind::Json => {
            let mut out = String::new();
            json_at(a, i, &mut out)?;
            if out.len() as u64 > max {
                return Err(format!("{} bytes of JSON, over the limit of {max}", out.len()).into());
            }
            // a null is a missing value (stored `null` where the field is optional)
            Ok(Some(FieldValue::String(out.into())))
        }
    }
}
