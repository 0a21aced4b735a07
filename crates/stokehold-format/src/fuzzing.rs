//! Entry points for the fuzz targets in `fuzz/`, also run over the stored corpora by `cargo test`.

use std::path::Path;

use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::shard::{Header, IndexEntry, ShardMeta, ShardReader, Trailer, parse_index};
use crate::tokens::{TokenDType, TokenIndex};

/// Open arbitrary bytes as a shard and read and decode every record. Must never panic.
pub fn fuzz_shard(data: &[u8]) {
    let limits = Limits {
        max_decompressed_bytes: 1 << 20,
        ..Limits::default()
    };
    let source = Box::new(crate::source::Memory::new(data.to_vec()));
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

/// Run the pure shard parse functions on arbitrary bytes, without I/O: the bytes as a header, the
/// bytes after an 8-byte file length as a trailer, and the whole bytes as a shard file parsed
/// part by part ([`Header::parse`], [`Trailer::parse`], [`ShardMeta::parse`], [`parse_index`]).
/// When the bytes are a valid shard, its index is taken as a token dataset's and token ranges are
/// planned with [`TokenIndex::pieces`], whose invariants are asserted. Must never panic.
pub fn fuzz_shard_parse(data: &[u8]) {
    let path = Path::new("fuzz.skh");
    let limits = Limits::default();
    let _ = Header::parse(&data[..data.len().min(16)], path);
    if data.len() >= 8 {
        let file_len = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
        let _ = Trailer::parse(&data[8..], file_len, &limits, path);
    }
    let Some(index) = parse_whole(data, &limits, path) else {
        return;
    };
    for dtype in [TokenDType::U16, TokenDType::U32] {
        let shards = [&index[..], &[][..], &index[..]];
        let Ok(tokens) = TokenIndex::from_entries(&shards, dtype) else {
            continue;
        };
        let total = tokens.total_tokens();
        let seed = crate::crc::crc32c(data);
        for k in 0..4u64 {
            let start = if total == 0 {
                0
            } else {
                u64::from(seed.rotate_left(k as u32 * 8)) % total
            };
            let n = (total - start).min(u64::from(seed >> 20) + k);
            let whole = |d: u64, _: IndexEntry| (d + k).is_multiple_of(3);
            let Ok(plan) = tokens.pieces(&shards, start, n, whole) else {
                panic!("pieces({start}, {n}) of {total} tokens failed");
            };
            let got: u64 = plan.all_pieces().iter().map(|p| p.tokens).sum();
            assert_eq!(got, n, "pieces cover the range");
            for r in plan.reads() {
                for p in plan.pieces(r) {
                    assert!((p.at + p.bytes) as u64 <= r.len(), "piece inside its read");
                }
            }
        }
        let _ = tokens.pieces(&shards, total, 1, |_, _| false);
    }
}

/// `data` as a whole shard file, parsed from slices: the index entries when valid.
fn parse_whole(data: &[u8], limits: &Limits, path: &Path) -> Option<Vec<IndexEntry>> {
    let file_len = data.len() as u64;
    let at = |offset: u64, len: u64| -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        data.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    };
    Header::parse(at(0, 16)?, path).ok()?;
    let trailer =
        Trailer::parse(at(file_len.checked_sub(64)?, 64)?, file_len, limits, path).ok()?;
    let meta = ShardMeta::parse(at(trailer.meta_offset, trailer.meta_len)?, &trailer, path).ok()?;
    parse_index(
        at(trailer.index_offset, trailer.index_len())?,
        &trailer,
        meta.align,
        limits,
        path,
    )
    .ok()
}

/// Run the container parser of a decoded part ([`crate::container::PartFooter`]) on arbitrary
/// bytes taken as a whole part (its magic and version taken from its own footer, so that the
/// checks past them are reached), and [`crate::container::sealed_body`],
/// [`crate::container::parse_counts`] and [`crate::container::parse_video_index`] on them. Every
/// entry of an accepted index must lie inside the pixels; an accepted video index has frames, a
/// timescale and packets whose ends do not overflow. Must never panic.
pub fn fuzz_containers(data: &[u8]) {
    use crate::container::{PartFooter, parse_counts, parse_video_index, sealed_body};
    let _ = sealed_body(data, b"SKHIDX\0\x03", "index");
    if let Ok((h, counts)) = parse_counts(data) {
        assert_eq!(counts.len() as u64, h.n);
    }
    if let Ok((_, ix)) = parse_video_index(data) {
        assert!(ix.timescale > 0 && !ix.frames.is_empty());
        for f in &ix.frames {
            assert!(f.offset.checked_add(u64::from(f.size)).is_some(), "{f:?}");
        }
    }
    let size = data.len() as u64;
    if size < PartFooter::LEN {
        return;
    }
    let footer = &data[data.len() - PartFooter::LEN as usize..];
    let magic: [u8; 8] = footer[..8].try_into().expect("8 bytes");
    let version = u32::from_le_bytes(footer[8..12].try_into().expect("4 bytes"));
    let Ok(f) = PartFooter::parse(footer, size, &magic, version) else {
        return;
    };
    let r = f.index_range();
    assert!(r.end + PartFooter::LEN == size, "{f:?}");
    let Ok(entries) = f.parse_index(&data[r.start as usize..r.end as usize]) else {
        return;
    };
    for e in entries {
        assert!(e.offset + e.pixels() <= f.data_end, "{e:?}");
    }
}
