//! Local paths and URLs.
//!
//! Every place that takes the path of a dataset or of a source asks [`url_scheme`] first, instead
//! of treating `s3://bucket/x` as a local folder named `s3:`. Where a dataset is only read, an
//! object-store URL ([`is_object_store_url`]) goes to the `remote` module (with the `remote`
//! feature); everywhere else a URL is refused with [`FormatError::RemoteUnsupported`] (through
//! [`require_local`]).

use std::path::Path;

use crate::error::{FormatError, Result};

/// The scheme of `path` when it is a URL (`scheme://...`, the scheme as RFC 3986 spells it: a
/// letter, then letters, digits, `+`, `-` or `.`), or None for a local path.
pub fn url_scheme(path: &Path) -> Option<&str> {
    let (scheme, _) = path.to_str()?.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// The URL schemes of object stores that the `remote` feature reads (S3 and S3-compatible stores,
/// GCS, Azure, plain HTTP(S) servers), lower case.
pub const OBJECT_STORE_SCHEMES: &[&str] = &[
    "s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss", "http", "https",
];

/// Whether `path` is a URL of an object store (see [`OBJECT_STORE_SCHEMES`]).
pub fn is_object_store_url(path: &Path) -> bool {
    url_scheme(path)
        .is_some_and(|s| OBJECT_STORE_SCHEMES.contains(&s.to_ascii_lowercase().as_str()))
}

/// Refuse a URL where a local path is needed (see the module documentation).
pub fn require_local(path: &Path) -> Result<()> {
    match url_scheme(path) {
        Some(scheme) => Err(FormatError::RemoteUnsupported {
            url: path.display().to_string(),
            scheme: scheme.to_string(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_local_paths() {
        for (p, scheme) in [
            ("s3://bucket/x", Some("s3")),
            ("gs://b", Some("gs")),
            ("HTTPS://host/ds", Some("HTTPS")),
            ("az+blob://c/d", Some("az+blob")),
            ("file:///tmp/ds", Some("file")),
            ("/data/ds", None),
            ("ds", None),
            ("./s3://x", None),
            ("3s://x", None),
            ("://x", None),
            ("a b://x", None),
            ("s3:/bucket", None),
        ] {
            assert_eq!(url_scheme(Path::new(p)), scheme, "{p}");
            assert_eq!(require_local(Path::new(p)).is_ok(), scheme.is_none(), "{p}");
        }
        let msg = require_local(Path::new("s3://bucket/x"))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("s3://bucket/x") && msg.contains("not supported yet"),
            "{msg}"
        );
    }
}
