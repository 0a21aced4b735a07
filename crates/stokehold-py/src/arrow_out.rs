//! Records as Arrow data built in Rust, for readers that take Arrow (`stokehold.ray.read`): a
//! range of records read with one positional read per shard it touches (at most
//! [`MAX_SPAN`] bytes each), each record checked and decoded as `ds[i]` decodes it, the columns
//! built with `arrow-array` and handed to Python through the Arrow C data interface (a PyCapsule
//! pair, the `__arrow_c_array__` protocol): no Python object per value.
//!
//! Column types: `bytes` and `image:*` → `large_binary`; `string` → `large_utf8`; `int64`,
//! `float64` → themselves; `ndarray:<dtype>` (and a token dataset's `tokens`, as its token
//! width) → `large_list<dtype>` of each record's elements in C order, with the shapes beside it
//! in a `large_list<uint64>` column named [`shape_column`] (Python turns the pair into Ray's
//! tensor column); `list:image` and `list:bytes` → `large_list<large_binary>`, `list:string` →
//! `large_list<large_utf8>`, each record's items in order.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Float64Array, Int64Array, LargeListArray, StructArray, UInt64Array,
    builder::{LargeBinaryBuilder, LargeStringBuilder},
    make_array,
};
use arrow_buffer::{MutableBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field};
use stokehold_format::tokens::TokenDType;
use stokehold_format::{FieldType, FieldValue, FormatError};
use stokehold_storage::Dataset;

/// Largest single read of a shard's records (a span of consecutive records is cut there).
pub const MAX_SPAN: u64 = 64 << 20;

/// The name of the shape column beside the list column of array field `field`.
pub fn shape_column(field: &str) -> String {
    format!("{field}.__shape__")
}

/// One column being built.
enum Column {
    Binary(LargeBinaryBuilder),
    String(LargeStringBuilder),
    Int64(Vec<i64>),
    Float64(Vec<f64>),
    /// A list field: its items (a binary or string column) and each record's end in them.
    List {
        items: Box<Column>,
        offsets: Vec<i64>,
    },
    /// Arrays: element type, elements (little-endian bytes), offsets in elements, shapes.
    Array {
        dtype: DataType,
        width: usize,
        values: MutableBuffer,
        offsets: Vec<i64>,
        shapes: Vec<u64>,
        shape_offsets: Vec<i64>,
    },
}

fn array_column(dtype: DataType, width: usize) -> Column {
    Column::Array {
        dtype,
        width,
        values: MutableBuffer::new(0),
        offsets: vec![0],
        shapes: Vec::new(),
        shape_offsets: vec![0],
    }
}

/// A value that is not of its column's type (what, in words): damage, since the schema was
/// checked at open.
#[derive(Debug)]
struct Mismatch(String);

impl Column {
    fn new(ty: &FieldType, tokens: Option<TokenDType>) -> Column {
        match (ty, tokens) {
            (FieldType::Bytes, Some(TokenDType::U16)) => array_column(DataType::UInt16, 2),
            (FieldType::Bytes, Some(TokenDType::U32)) => array_column(DataType::UInt32, 4),
            (FieldType::List { item }, _) => Column::List {
                items: Box::new(Column::new(&item.field_type(), None)),
                offsets: vec![0],
            },
            (FieldType::Bytes | FieldType::Image { .. } | FieldType::Video, _) => {
                Column::Binary(LargeBinaryBuilder::new())
            }
            (FieldType::String | FieldType::Json, _) => Column::String(LargeStringBuilder::new()),
            (FieldType::Int64, _) => Column::Int64(Vec::new()),
            (FieldType::Float64, _) => Column::Float64(Vec::new()),
            (FieldType::Ndarray { dtype }, _) => {
                array_column(stokehold_ingest::arrow::arrow_element(*dtype), dtype.size())
            }
        }
    }

    /// Append one record's value; `Err` when it is not of the column's type.
    fn push(&mut self, v: &FieldValue<'_>) -> Result<(), Mismatch> {
        match (self, v) {
            (Column::Binary(b), FieldValue::Bytes(x) | FieldValue::Image(x)) => b.append_value(x),
            (Column::String(b), FieldValue::String(s)) => b.append_value(s),
            (Column::Int64(c), FieldValue::Int64(x)) => c.push(*x),
            (Column::Float64(c), FieldValue::Float64(x)) => c.push(*x),
            (Column::List { items, offsets }, FieldValue::List(values)) => {
                for v in values {
                    items.push(v)?;
                }
                let last = offsets.last().copied().unwrap_or(0);
                offsets.push(last + values.len() as i64);
            }
            (
                Column::Array {
                    width,
                    values,
                    offsets,
                    shapes,
                    shape_offsets,
                    ..
                },
                value,
            ) => {
                let (shape, data): (Vec<u64>, &[u8]) = match value {
                    FieldValue::Array(a) => (a.shape.clone(), &a.data),
                    // a token dataset's tokens: whole tokens (checked at open)
                    FieldValue::Bytes(b) => (vec![(b.len() / *width) as u64], b),
                    other => {
                        return Err(Mismatch(format!(
                            "a {} where an array was expected",
                            other.kind()
                        )));
                    }
                };
                if data.len() % *width != 0 {
                    return Err(Mismatch(format!(
                        "{} bytes for elements of {} bytes",
                        data.len(),
                        width
                    )));
                }
                values.extend_from_slice(data);
                let last = offsets.last().copied().unwrap_or(0);
                offsets.push(last + (data.len() / *width) as i64);
                shapes.extend_from_slice(&shape);
                shape_offsets.push(shapes.len() as i64);
            }
            (_, other) => {
                return Err(Mismatch(format!(
                    "a {} of another type than the schema's",
                    other.kind()
                )));
            }
        }
        Ok(())
    }

    /// The finished columns: one, or the list and its shapes.
    fn finish(
        self,
        name: &str,
        out: &mut Vec<(Arc<Field>, ArrayRef)>,
    ) -> Result<(), arrow_schema::ArrowError> {
        let field = |dt: &DataType, name: &str| Arc::new(Field::new(name, dt.clone(), false));
        let a: ArrayRef = match self {
            Column::Binary(mut b) => Arc::new(b.finish()),
            Column::String(mut b) => Arc::new(b.finish()),
            Column::Int64(c) => Arc::new(Int64Array::from(c)),
            Column::Float64(c) => Arc::new(Float64Array::from(c)),
            Column::List { items, offsets } => {
                let mut parts = Vec::with_capacity(1);
                items.finish("item", &mut parts)?;
                let (item, values) = parts.pop().expect("a binary or string column is one");
                Arc::new(LargeListArray::try_new(
                    item,
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    values,
                    None,
                )?)
            }
            Column::Array {
                dtype,
                width,
                values,
                offsets,
                shapes,
                shape_offsets,
            } => {
                let n = values.len() / width;
                // an arrow buffer (64-byte aligned), the elements as stored: little-endian
                let data = arrow_data::ArrayData::builder(dtype.clone())
                    .len(n)
                    .add_buffer(values.into())
                    .build()?;
                let item = field(&dtype, "item");
                let list = LargeListArray::try_new(
                    item,
                    OffsetBuffer::new(ScalarBuffer::from(offsets)),
                    make_array(data),
                    None,
                )?;
                let dims = LargeListArray::try_new(
                    field(&DataType::UInt64, "item"),
                    OffsetBuffer::new(ScalarBuffer::from(shape_offsets)),
                    Arc::new(UInt64Array::from(shapes)),
                    None,
                )?;
                out.push((field(list.data_type(), name), Arc::new(list)));
                out.push((field(dims.data_type(), &shape_column(name)), Arc::new(dims)));
                return Ok(());
            }
        };
        out.push((field(a.data_type(), name), a));
        Ok(())
    }
}

/// Records `[lo, hi)` of `ds` as one Arrow struct array (one child per column), read and
/// checked as `Dataset::get` reads them (checksums when the dataset verifies records).
/// `tokens`: the token width of a token dataset (its `tokens` field becomes a list of ids).
pub fn record_batch(
    ds: &Dataset,
    tokens: Option<TokenDType>,
    lo: u64,
    hi: u64,
) -> Result<StructArray, FormatError> {
    let schema = ds.schema();
    let mut cols: Vec<Column> = schema
        .fields
        .iter()
        .map(|f| Column::new(&f.ty, tokens))
        .collect();
    let mut buf = Vec::new();
    let mut i = lo;
    while i < hi.min(ds.len()) {
        let (k, first) = ds.locate(i)?;
        let shard = &ds.shards()[k];
        // the span of consecutive records of this shard, at most MAX_SPAN bytes (at least one)
        let start = shard.entry(first).offset;
        let mut last = first;
        let in_shard = shard.len();
        while last + 1 < in_shard
            && i + (last + 1 - first) < hi
            && shard.entry(last + 1).end() - start <= MAX_SPAN
        {
            last += 1;
        }
        let end = shard.entry(last).end();
        let mut span: Option<&[u8]> = shard.source().slice(start, (end - start) as usize);
        if span.is_none() {
            buf.resize((end - start) as usize, 0);
            shard
                .source()
                .read_at(start, &mut buf)
                .map_err(|e| shard.range_error(start, end, e))?;
            span = Some(&buf[..]);
        }
        let span = span.expect("set above");
        for local in first..=last {
            let e = shard.entry(local);
            let bytes = &span[(e.offset - start) as usize..(e.end() - start) as usize];
            if ds.verifies_records() {
                shard.check_record(local, bytes)?;
            }
            let values = shard.decode(local, bytes)?;
            for ((c, v), f) in cols.iter_mut().zip(&values).zip(&schema.fields) {
                c.push(v).map_err(|Mismatch(detail)| FormatError::Corrupt {
                    path: shard.path().to_path_buf(),
                    what: format!("{}, field {:?}", shard.describe(local), f.name),
                    offset: e.offset,
                    detail,
                })?;
            }
        }
        i += last - first + 1;
    }
    let mut out = Vec::new();
    for (c, f) in cols.into_iter().zip(&schema.fields) {
        c.finish(&f.name, &mut out)
            .map_err(|detail| FormatError::Schema(format!("column {:?}: {detail}", f.name)))?;
    }
    Ok(StructArray::from(out))
}
