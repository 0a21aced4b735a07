//! Conversions between field values and Python objects.

use std::borrow::Cow;

use numpy::{PyArray1, PyArrayDescr, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyMemoryView, PyString};
use stokehold_format::{ArrayValue, DType, Field, FieldType, FieldValue, Schema};

use crate::errors::schema_error;

/// The numpy dtype string of a stored dtype: little-endian, as the elements are stored.
fn numpy_dtype(dtype: DType) -> &'static str {
    match dtype {
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
    }
}

/// A new numpy array holding a copy of `a`'s elements, with its dtype and shape.
fn array_to_py<'py>(py: Python<'py>, a: &ArrayValue<'_>) -> PyResult<Bound<'py, PyAny>> {
    // numpy allocates (and aligns) the buffer; reinterpret its bytes as the dtype, then shape it.
    let flat = PyArray1::<u8>::from_slice(py, &a.data);
    let typed = flat.call_method1("view", (numpy_dtype(a.dtype),))?;
    typed.call_method1("reshape", (a.shape.clone(),))
}

/// One field value as a Python object.
pub fn value_to_py<'py>(py: Python<'py>, v: &FieldValue<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        FieldValue::Bytes(b) | FieldValue::Image(b) => PyBytes::new(py, b).into_any(),
        FieldValue::String(s) => PyString::new(py, s).into_any(),
        FieldValue::Int64(n) => n.into_pyobject(py)?.into_any(),
        FieldValue::Float64(x) => PyFloat::new(py, *x).into_any(),
        FieldValue::Array(a) => array_to_py(py, a)?,
        FieldValue::List(items) => {
            let out = pyo3::types::PyList::empty(py);
            for item in items {
                out.append(value_to_py(py, item)?)?;
            }
            out.into_any()
        }
    })
}

/// One owned field value as a Python object: an array's own buffer becomes the numpy array's (no
/// copy); other values as [`value_to_py`].
pub fn value_into_py<'py>(py: Python<'py>, v: FieldValue<'_>) -> PyResult<Bound<'py, PyAny>> {
    match v {
        FieldValue::Array(ArrayValue {
            dtype,
            shape,
            data: std::borrow::Cow::Owned(bytes),
        }) => {
            // numpy views the moved buffer; `view` reinterprets its bytes (an unaligned buffer
            // stays valid numpy, only slower), `reshape` of a contiguous array is a view too
            let flat = PyArray1::<u8>::from_vec(py, bytes);
            let typed = flat.call_method1("view", (numpy_dtype(dtype),))?;
            typed.call_method1("reshape", (shape,))
        }
        other => value_to_py(py, &other),
    }
}

/// A sample as a dict: field name → value, in schema order.
pub fn sample_to_py<'py>(
    py: Python<'py>,
    schema: &Schema,
    values: &[FieldValue<'_>],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (field, value) in schema.fields.iter().zip(values) {
        d.set_item(&field.name, value_to_py(py, value)?)?;
    }
    Ok(d)
}

/// A Python value converted for one field, holding what it borrows from (immutable `bytes`
/// objects), so the write itself can run without the GIL.
#[derive(Debug)]
pub enum Prepared<'py> {
    /// Bytes or image data.
    Buf(Bound<'py, PyBytes>),
    /// A string.
    Str(String),
    /// An int64.
    Int(i64),
    /// A float64.
    Float(f64),
    /// An array: dtype, shape and its elements in C order, little-endian.
    Array(DType, Vec<u64>, Bound<'py, PyBytes>),
    /// A list's items.
    List(Vec<Prepared<'py>>),
}

impl Prepared<'_> {
    /// The field value, borrowing from `self`.
    pub fn value(&self, ty: &FieldType) -> FieldValue<'_> {
        match self {
            Prepared::Buf(b) => match ty {
                FieldType::Image { .. } => FieldValue::Image(Cow::Borrowed(b.as_bytes())),
                _ => FieldValue::Bytes(Cow::Borrowed(b.as_bytes())),
            },
            Prepared::Str(s) => FieldValue::String(Cow::Borrowed(s)),
            Prepared::Int(n) => FieldValue::Int64(*n),
            Prepared::Float(x) => FieldValue::Float64(*x),
            Prepared::Array(dtype, shape, data) => FieldValue::Array(ArrayValue {
                dtype: *dtype,
                shape: shape.clone(),
                data: Cow::Borrowed(data.as_bytes()),
            }),
            Prepared::List(items) => {
                let item_ty = match ty {
                    FieldType::List { item } => item.field_type(),
                    other => other.clone(),
                };
                FieldValue::List(items.iter().map(|p| p.value(&item_ty)).collect())
            }
        }
    }
}

/// The Python type name of `v`, for messages.
fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .qualname()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_string())
}

/// Convert `v` for `field`, or a `SchemaError` naming the field.
pub fn prepare<'py>(field: &Field, v: &Bound<'py, PyAny>) -> PyResult<Prepared<'py>> {
    let py = v.py();
    let spec = field.type_spec();
    let wrong = |expected: &str| {
        schema_error(
            py,
            format!(
                "field {:?} ({spec}): expected {expected}, got {}",
                field.name,
                type_name(v)
            ),
        )
    };
    match &field.ty {
        FieldType::List { item } => {
            // a list or tuple of the items (bytes for images and bytes, str for strings)
            if v.cast::<PyString>().is_ok() || v.cast::<PyBytes>().is_ok() {
                return Err(wrong("a list of items"));
            }
            let seq = v
                .cast::<pyo3::types::PySequence>()
                .map_err(|_| wrong("a list of items"))?;
            let n = seq.len()?;
            if n > stokehold_format::schema::MAX_LIST_ITEMS {
                return Err(wrong(&format!(
                    "a list of at most {} items",
                    stokehold_format::schema::MAX_LIST_ITEMS
                )));
            }
            let item_field = Field::new(field.name.clone(), item.field_type());
            let mut items = Vec::with_capacity(n);
            for k in 0..n {
                let x = seq.get_item(k)?;
                items.push(
                    prepare(&item_field, &x)
                        .map_err(|e| schema_error(py, format!("item {k} of {}", e.value(py))))?,
                );
            }
            Ok(Prepared::List(items))
        }
        // (a video value is checked by the writer: its frame index against its container)
        FieldType::Bytes | FieldType::Image { .. } | FieldType::Video => {
            if let Ok(b) = v.cast::<PyBytes>() {
                Ok(Prepared::Buf(b.clone()))
            } else if v.is_instance_of::<PyByteArray>() || v.is_instance_of::<PyMemoryView>() {
                // A copy: the buffer could change while the GIL is released for the write.
                let b = py
                    .get_type::<PyBytes>()
                    .call1((v,))?
                    .cast_into::<PyBytes>()?;
                Ok(Prepared::Buf(b))
            } else {
                Err(wrong("bytes, bytearray or memoryview"))
            }
        }
        FieldType::Json => {
            // a str is the JSON text itself; any other value is written by Python's json.dumps
            let text = match v.cast::<PyString>() {
                Ok(s) => s.to_cow()?.into_owned(),
                Err(_) => py
                    .import("json")?
                    .call_method1("dumps", (v,))
                    .and_then(|t| t.extract::<String>())
                    .map_err(|e| {
                        schema_error(
                            py,
                            format!(
                                "field {:?} ({spec}): expected a str of JSON text or a value \
                                 json.dumps takes (a list, a dict, ...), got {}: {e}",
                                field.name,
                                type_name(v)
                            ),
                        )
                    })?,
            };
            let text = stokehold_format::json::canonical(text.as_bytes()).map_err(|e| {
                schema_error(
                    py,
                    format!("field {:?} ({spec}): not one JSON value: {e}", field.name),
                )
            })?;
            Ok(Prepared::Str(text))
        }
        FieldType::String => {
            let s = v.cast::<PyString>().map_err(|_| wrong("str"))?;
            let s = s
                .to_cow()
                .map_err(|e| schema_error(py, format!("field {:?} ({spec}): {e}", field.name)))?;
            Ok(Prepared::Str(s.into_owned()))
        }
        FieldType::Int64 => {
            if !v.is_instance_of::<PyInt>() && !v.hasattr("__index__")? {
                return Err(wrong("int"));
            }
            let n = v
                .extract::<i64>()
                .map_err(|e| schema_error(py, format!("field {:?} ({spec}): {e}", field.name)))?;
            Ok(Prepared::Int(n))
        }
        FieldType::Float64 => {
            if v.is_instance_of::<PyString>() || v.is_instance_of::<PyBytes>() {
                return Err(wrong("float or int"));
            }
            let x = v.extract::<f64>().map_err(|_| wrong("float or int"))?;
            Ok(Prepared::Float(x))
        }
        FieldType::Ndarray { dtype } => {
            let a = v
                .cast::<PyUntypedArray>()
                .map_err(|_| wrong("a numpy array"))?;
            let expected = PyArrayDescr::new(py, numpy_dtype(*dtype))?;
            let found = a.dtype();
            if !found.is_equiv_to(&expected) {
                return Err(schema_error(
                    py,
                    format!(
                        "field {:?} ({spec}): expected a numpy array of dtype {} ({}), got dtype {}",
                        field.name,
                        dtype.name(),
                        expected.str()?,
                        found.str()?,
                    ),
                ));
            }
            let shape: Vec<u64> = a.shape().iter().map(|&d| d as u64).collect();
            // tobytes() copies the elements in C order, whatever the array's strides.
            let data = a.call_method0("tobytes")?.cast_into::<PyBytes>()?;
            Ok(Prepared::Array(*dtype, shape, data))
        }
    }
}

/// A Python stage's result as an owned field value: `bytes` (or a bytes-like object), `str`,
/// `int` (or anything with `__index__`), `float` (or anything with `__float__`), or a numpy array
/// of dtype uint8, int32, int64, float16, float32 or float64 (stored C-contiguous).
pub fn py_to_value(v: &Bound<'_, PyAny>) -> PyResult<FieldValue<'static>> {
    let py = v.py();
    if let Ok(a) = v.cast::<PyUntypedArray>() {
        let found = a.dtype();
        for dtype in [
            DType::U8,
            DType::I32,
            DType::I64,
            DType::F16,
            DType::F32,
            DType::F64,
        ] {
            if found.is_equiv_to(&PyArrayDescr::new(py, numpy_dtype(dtype))?) {
                let shape: Vec<u64> = a.shape().iter().map(|&d| d as u64).collect();
                let data = a.call_method0("tobytes")?.cast_into::<PyBytes>()?;
                return Ok(FieldValue::Array(ArrayValue {
                    dtype,
                    shape,
                    data: Cow::Owned(data.as_bytes().to_vec()),
                }));
            }
        }
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "a numpy array of dtype {} cannot be a batch value (use uint8, int32, int64, float16, \
             float32 or float64, little-endian)",
            found.str()?
        )));
    }
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(FieldValue::Bytes(Cow::Owned(b.as_bytes().to_vec())));
    }
    if v.is_instance_of::<PyByteArray>() || v.is_instance_of::<PyMemoryView>() {
        let b = py
            .get_type::<PyBytes>()
            .call1((v,))?
            .cast_into::<PyBytes>()?;
        return Ok(FieldValue::Bytes(Cow::Owned(b.as_bytes().to_vec())));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(FieldValue::String(Cow::Owned(s.to_cow()?.into_owned())));
    }
    if v.is_instance_of::<PyInt>() || (v.hasattr("__index__")? && !v.is_instance_of::<PyFloat>()) {
        return Ok(FieldValue::Int64(v.extract::<i64>()?));
    }
    if v.is_instance_of::<PyFloat>() || v.hasattr("__float__")? {
        return Ok(FieldValue::Float64(v.extract::<f64>()?));
    }
    Err(pyo3::exceptions::PyTypeError::new_err(format!(
        "a stage must return bytes, str, int, float or a numpy array, got {}",
        type_name(v)
    )))
}
