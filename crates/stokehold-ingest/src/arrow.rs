//! The one mapping of Arrow column types to stokehold field types, used by every writer that
//! takes Arrow data: `pack` of Parquet files (and `stokehold.from_hf`, which packs a Parquet file)
//! and the Ray Data `Datasink` (through `stokehold._native._arrow_field_types`).
//!
//! | Arrow type | field |
//! |---|---|
//! | binary, large binary, binary view, fixed-size binary | `bytes` (`pack` looks at the first values: images become `image:auto`) |
//! | `struct<bytes: binary, path: string>` (Hugging Face's `Image`) | `image:auto` |
//! | string, large string, string view | `string` |
//! | boolean, integers | `int64` |
//! | half, single and double floats | `float64` |
//! | list, large list, fixed-size list (also nested, and fixed-shape tensor extension types, which are lists in storage) of numbers | `ndarray`: `u8` (uint8, bool), `i32` (int8, int16, int32, uint16), `i64` (int64, uint32, uint64), `f16`, `f32`, `f64` |
//! | `struct<data: list<number>, shape: ...>` (variable-shape tensors: Ray's and Arrow's extension types, in storage) | `ndarray` of the data's numbers |
//! | list, large list, fixed-size list of `struct<bytes: binary, path: string>` (Hugging Face's `Sequence(Image())` / `List(Image())`) | `list:image:auto` |
//! | list of binary | `list:bytes` (`pack` and the Ray `Datasink` look at the first items: images become `list:image:auto`) |
//! | list of strings | `list:string` |
//!
//! Anything else (dates, decimals, maps, other structs) has no field type. The way back, for
//! readers that hand out Arrow: [`arrow_element`].

use arrow_schema::DataType;
use stokehold_format::{DType, FieldType, ImageCodec, ListItem};

/// Whether `t` is one of Arrow's binary types.
pub fn is_binary(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

/// Whether `t` is one of Arrow's string types.
pub fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The ndarray element type of numbers of type `t`.
pub fn element_dtype(t: &DataType) -> Option<DType> {
    Some(match t {
        DataType::UInt8 | DataType::Boolean => DType::U8,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt16 => DType::I32,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => DType::I64,
        DataType::Float16 => DType::F16,
        DataType::Float32 => DType::F32,
        DataType::Float64 => DType::F64,
        _ => return None,
    })
}

/// And back: the Arrow type of ndarray elements of `d`, as readers that hand out Arrow give them
/// (`stokehold.ray.read`); [`element_dtype`] maps it to `d` again.
pub fn arrow_element(d: DType) -> DataType {
    match d {
        DType::U8 => DataType::UInt8,
        DType::I32 => DataType::Int32,
        DType::I64 => DataType::Int64,
        DType::F16 => DataType::Float16,
        DType::F32 => DataType::Float32,
        DType::F64 => DataType::Float64,
    }
}

/// The list's element type, through nested lists (a list of lists of numbers is an array too).
pub fn list_element(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(list_element(f.data_type()).unwrap_or(f.data_type()))
        }
        _ => None,
    }
}

/// Whether `t` is Hugging Face's `Image` storage: `struct<bytes: binary, path: string>` (the
/// path may be missing).
pub fn is_image_struct(t: &DataType) -> bool {
    let DataType::Struct(fields) = t else {
        return false;
    };
    let bytes = fields.iter().find(|f| f.name() == "bytes");
    bytes.is_some_and(|b| is_binary(b.data_type()))
        && fields
            .iter()
            .all(|f| f.name() == "bytes" || (f.name() == "path" && is_string(f.data_type())))
}

/// The element type of a variable-shape tensor's storage, `struct<data: list<T>, shape: ...>`.
pub fn tensor_struct_element(t: &DataType) -> Option<&DataType> {
    let DataType::Struct(fields) = t else {
        return None;
    };
    let data = fields.iter().find(|f| f.name() == "data")?;
    fields.iter().find(|f| f.name() == "shape")?;
    list_element(data.data_type())
}

/// The item type of a list field that a list column of type `t` is: a list (of any kind) whose
/// elements are Hugging Face image structs, binary or strings; `None` for other types (a list of
/// numbers is an ndarray, a list of lists has no list field).
pub fn list_item(t: &DataType) -> Option<ListItem> {
    let (DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _)) = t else {
        return None;
    };
    let e = f.data_type();
    Some(if is_image_struct(e) {
        ListItem::Image {
            codec: ImageCodec::Auto,
        }
    } else if is_binary(e) {
        ListItem::Bytes
    } else if is_string(e) {
        ListItem::String
    } else {
        return None;
    })
}

/// The field type of an Arrow column of type `t` (see the module documentation), or `None`.
pub fn field_type(t: &DataType) -> Option<FieldType> {
    if let Some(item) = list_item(t) {
        return Some(FieldType::List { item });
    }
    Some(match t {
        t if is_binary(t) => FieldType::Bytes,
        t if is_string(t) => FieldType::String,
        t if is_image_struct(t) => FieldType::Image {
            codec: ImageCodec::Auto,
        },
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => FieldType::Int64,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => FieldType::Float64,
        t => FieldType::Ndarray {
            dtype: element_dtype(list_element(t).or_else(|| tensor_struct_element(t))?)?,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{Field, Fields};
    use std::sync::Arc;

    fn list(t: DataType) -> DataType {
        DataType::List(Arc::new(Field::new("item", t, true)))
    }

    #[test]
    fn ndarray_elements_go_to_arrow_and_back_to_the_same_dtype() {
        for d in [
            DType::U8,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::F32,
            DType::F64,
        ] {
            assert_eq!(element_dtype(&arrow_element(d)), Some(d), "{d:?}");
        }
    }

    #[test]
    fn arrow_types_map_to_one_field_type_each() {
        let nd = |d| Some(FieldType::Ndarray { dtype: d });
        for (t, want) in [
            (DataType::LargeBinary, Some(FieldType::Bytes)),
            (DataType::Utf8View, Some(FieldType::String)),
            (DataType::Boolean, Some(FieldType::Int64)),
            (DataType::UInt64, Some(FieldType::Int64)),
            (DataType::Float16, Some(FieldType::Float64)),
            (list(DataType::Int16), nd(DType::I32)),
            (list(DataType::Boolean), nd(DType::U8)),
            (list(DataType::UInt32), nd(DType::I64)),
            (list(list(DataType::Float32)), nd(DType::F32)),
            (
                DataType::FixedSizeList(Arc::new(Field::new("x", DataType::Float16, false)), 4),
                nd(DType::F16),
            ),
            (
                list(DataType::Utf8),
                Some(FieldType::List {
                    item: ListItem::String,
                }),
            ),
            (
                DataType::LargeList(Arc::new(Field::new("item", DataType::LargeBinary, true))),
                Some(FieldType::List {
                    item: ListItem::Bytes,
                }),
            ),
            (list(list(DataType::Utf8)), None),
            (DataType::Date32, None),
        ] {
            assert_eq!(field_type(&t), want, "{t}");
        }
        let image = DataType::Struct(Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("path", DataType::Utf8, true),
        ]));
        assert_eq!(
            field_type(&image),
            Some(FieldType::Image {
                codec: ImageCodec::Auto
            })
        );
        let other = DataType::Struct(Fields::from(vec![
            Field::new("bytes", DataType::Binary, true),
            Field::new("label", DataType::Int64, true),
        ]));
        assert_eq!(
            field_type(&list(image.clone())),
            Some(FieldType::List {
                item: ListItem::Image {
                    codec: ImageCodec::Auto
                }
            })
        );
        assert_eq!(field_type(&other), None);
        assert_eq!(field_type(&list(other.clone())), None);
        let tensor = DataType::Struct(Fields::from(vec![
            Field::new(
                "data",
                DataType::LargeList(Arc::new(Field::new("item", DataType::UInt16, true))),
                true,
            ),
            Field::new("shape", list(DataType::Int64), true),
        ]));
        assert_eq!(
            field_type(&tensor),
            Some(FieldType::Ndarray { dtype: DType::I32 })
        );
    }
}
