//! Helpers shared by the packer's integration tests.

use std::fs;
use std::path::Path;

/// The files of a directory (not recursive), sorted by name, with their bytes.
pub fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}
