//! Limits on sizes read from files, checked before anything of that size is allocated.

/// Upper bounds applied to every length, count and size read from a shard or manifest. A value
/// over its limit is a [`crate::FormatError::LimitExceeded`], raised before any allocation of that
/// size. Lengths are also always checked against the file's real size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest record, in bytes (the format itself stops at 4 GiB - 1).
    pub max_record_bytes: u64,
    /// Largest decompressed zstd field.
    pub max_decompressed_bytes: u64,
    /// Largest shard meta block (JSON).
    pub max_meta_bytes: u64,
    /// Largest manifest file.
    pub max_manifest_bytes: u64,
    /// Most shards in one dataset.
    pub max_shards: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_record_bytes: u64::from(u32::MAX),
            max_decompressed_bytes: 1 << 30,
            max_meta_bytes: 16 << 20,
            max_manifest_bytes: 256 << 20,
            max_shards: 1 << 20,
        }
    }
}
