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

/// One small JPEG (16×8), different for each `seed`.
#[allow(dead_code)] // not every test file that includes this module uses it
pub fn jpeg(seed: u64) -> Vec<u8> {
    use stokehold_ingest::sample_data::{SampleSpec, write_image_folder};
    let tmp = tempfile::tempdir().unwrap();
    write_image_folder(
        tmp.path(),
        SampleSpec {
            images: 1,
            classes: 1,
            width: 16,
            height: 8,
            quality: 70,
            seed,
        },
    )
    .unwrap();
    fs::read(tmp.path().join("class_000/000000.jpg")).unwrap()
}

/// What `pack` stores for the JPEG `src` by default: the same image rewritten losslessly with
/// restart markers (or `src` itself where the rewrite refuses it).
#[allow(dead_code)] // not every test file that includes this module uses it
pub fn packed(src: &[u8]) -> Vec<u8> {
    stokehold_ops::jpeg::with_restarts(src).unwrap_or_else(|_| src.to_vec())
}

/// Pack options that store images as given (no restart markers: the bytes compare with the
/// input's), on 2 threads, skipping any number of inputs, with the `--fields` `fields`.
#[allow(dead_code)] // not every test file that includes this module uses it
pub fn plain_options(fields: Option<&str>) -> stokehold_ingest::PackOptions {
    use stokehold_ingest::{FieldChoice, ImagePolicy, PackOptions};
    PackOptions {
        threads: 2,
        max_skip_fraction: 1.0,
        images: ImagePolicy {
            restart_markers: false,
            ..ImagePolicy::default()
        },
        fields: fields.map(|f| FieldChoice::parse_list(f).unwrap()),
        ..PackOptions::default()
    }
}
