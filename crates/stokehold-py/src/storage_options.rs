//! `storage_options=` as Python users give it (fsspec's habits): a dict of option name to value,
//! where a value may be a `str`, a `bool` (`{"anon": True}`) or a number (`{"retries": 3}`),
//! each turned into the text the store's options take. Anything else is a `ConfigError` that
//! names the option (never its value: it may be a secret).

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

use crate::errors::config_error;

/// Storage options, converted from a Python mapping.
#[derive(Debug, Default, Clone)]
pub struct StorageOptions(pub BTreeMap<String, String>);

/// `Option<StorageOptions>` (an argument left out or `None`) as the format takes it.
pub fn or_default(o: Option<StorageOptions>) -> BTreeMap<String, String> {
    o.unwrap_or_default().0
}

impl<'a, 'py> FromPyObject<'a, 'py> for StorageOptions {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        let Ok(d) = obj.cast::<PyDict>() else {
            let kind = obj
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            return Err(config_error(
                py,
                format!(
                    "storage_options must be a dict of option name to value, like {{\"anon\": \
                     True}} or {{\"endpoint_url\": \"https://...\"}}, got a {kind}"
                ),
            ));
        };
        let mut out = BTreeMap::new();
        for (k, v) in d.iter() {
            let Ok(key) = k.extract::<String>() else {
                return Err(config_error(
                    py,
                    "storage_options: option names are strings (like \"endpoint_url\")",
                ));
            };
            // bool before int: a Python bool is an int
            let value = if v.is_instance_of::<PyBool>() {
                if v.extract::<bool>()? {
                    "true"
                } else {
                    "false"
                }
                .to_string()
            } else if v.is_instance_of::<PyString>() {
                v.extract::<String>()?
            } else if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
                v.str()?.to_string()
            } else {
                let kind = v
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default();
                return Err(config_error(
                    py,
                    format!(
                        "storage_options[{key:?}] must be a str, a bool or a number, got a {kind}"
                    ),
                ));
            };
            out.insert(key, value);
        }
        Ok(StorageOptions(out))
    }
}
