//! `storage_options=` as Python users give it (fsspec's habits): a dict of option name to value,
//! where a value may be a `str`, a `bool` (`{"anon": True}`) or a number (`{"retries": 3}`),
//! each turned into the text the store's options take. Anything else is a `ConfigError` that
//! names the option (never its value: it may be a secret).

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

use crate::errors::config_error;

/// Storage options, converted from a Python mapping, or what is wrong with them: extraction
/// never fails, so that the `ConfigError` is raised as it is (pyo3 would add "while processing
/// 'storage_options'" to an argument's error); [`resolve`] raises it.
#[derive(Debug, Clone)]
pub struct StorageOptions(Result<BTreeMap<String, String>, OptionsError>);

/// What is wrong with `storage_options=` (the message of its `ConfigError`; never a value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// Not a dict: the type it is.
    #[error(
        "storage_options must be a dict of option name to value, like {{\"anon\": True}} or \
         {{\"endpoint_url\": \"https://...\"}}, got a {0}"
    )]
    NotDict(String),
    /// A key that is not a string.
    #[error("storage_options: option names are strings (like \"endpoint_url\")")]
    Name,
    /// A value that is not a str, a bool or a number: its option, and the type it is.
    #[error("storage_options['{key}'] must be a str, a bool or a number, got a {type_name}")]
    Value {
        /// The option.
        key: String,
        /// The value's type.
        type_name: String,
    },
}

/// The options as the format takes them (none given: none), or the `ConfigError` saying what is
/// wrong with them.
pub fn resolve(py: Python<'_>, o: Option<StorageOptions>) -> PyResult<BTreeMap<String, String>> {
    match o {
        None => Ok(BTreeMap::new()),
        Some(StorageOptions(r)) => r.map_err(|e| config_error(py, e.to_string())),
    }
}

fn type_name(v: &Borrowed<'_, '_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

impl<'a, 'py> FromPyObject<'a, 'py> for StorageOptions {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(StorageOptions(convert(obj)))
    }
}

fn convert(obj: Borrowed<'_, '_, PyAny>) -> Result<BTreeMap<String, String>, OptionsError> {
    let Ok(d) = obj.cast::<PyDict>() else {
        return Err(OptionsError::NotDict(type_name(&obj)));
    };
    let mut out = BTreeMap::new();
    for (k, v) in d.iter() {
        let Ok(key) = k.extract::<String>() else {
            return Err(OptionsError::Name);
        };
        let wrong = || OptionsError::Value {
            key: key.clone(),
            type_name: type_name(&v.as_borrowed()),
        };
        // bool before int: a Python bool is an int
        let value = if v.is_instance_of::<PyBool>() {
            match v.extract::<bool>() {
                Ok(true) => "true".to_string(),
                Ok(false) => "false".to_string(),
                Err(_) => return Err(wrong()),
            }
        } else if v.is_instance_of::<PyString>() {
            v.extract::<String>().map_err(|_| wrong())?
        } else if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
            v.str().map_err(|_| wrong())?.to_string()
        } else {
            return Err(wrong());
        };
        out.insert(key, value);
    }
    Ok(out)
}
