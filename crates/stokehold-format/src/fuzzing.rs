//! Entry points for the fuzz targets in `fuzz/`, also run over the stored corpora by `cargo test`.

use std::path::Path;

use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::shard::ShardReader;

/// Open arbitrary bytes as a shard and read and decode every record. Must never panic.
pub fn fuzz_shard(data: &[u8]) {
    let limits = Limits {
        max_decompressed_bytes: 1 << 20,
        ..Limits::default()
    };
    let source = Box::new(crate::storage::Memory::new(data.to_vec()));
    let Ok(reader) = ShardReader::from_source("fuzz.skh", source, limits) else {
        return;
    };
    let mut buf = Vec::new();
    for i in 0..reader.len() {
        if reader.read_record(i, &mut buf, true).is_ok() {
            let _ = reader.decode(i, &buf);
        }
        // decode without the checksum too, so corrupt field tables are exercised
        if let Some(s) = reader.record_slice(i) {
            let _ = reader.decode(i, s);
        }
    }
}

/// Parse arbitrary bytes as a manifest. Must never panic.
pub fn fuzz_manifest(data: &[u8]) {
    let _ = Manifest::parse(data, Path::new("fuzz/manifest.json"), &Limits::default());
}
