//! The pure parse functions of a shard's structure (`Header::parse`, `Trailer::parse`,
//! `ShardMeta::parse`, `parse_index`): each kind of damage gives its error kind, naming the file
//! and the offset, and a valid shard parses to what `ShardReader` opens; the sans-IO opening
//! (`ShardOpening`) asks for what it lacks and reports what the parse functions report.

use std::path::Path;

use stokehold_format::crc::crc32c;
use stokehold_format::{
    FieldValue, FormatError, Header, Limits, OpenStep, Schema, ShardMeta, ShardOpening,
    ShardReader, ShardWriter, Trailer, WriteOptions, memory_source, parse_index,
};

const PATH: &str = "dir/s.skh";

fn shard(align: u32) -> Vec<u8> {
    let schema = Schema::from_specs([("text", "string"), ("n", "int64")]).unwrap();
    let opts = WriteOptions {
        align,
        ..WriteOptions::default()
    };
    let mut w = ShardWriter::new(Vec::new(), schema, opts).unwrap();
    for i in 0..5 {
        w.write(&[
            FieldValue::String(format!("sample {i}").into()),
            FieldValue::Int64(i),
        ])
        .unwrap();
    }
    w.finish().unwrap().0
}

fn trailer_of(b: &[u8]) -> &[u8] {
    &b[b.len() - 64..]
}

/// Rewrite the trailer's CRC after an edit, so the edit itself is what is checked.
fn reseal(t: &mut [u8]) {
    let c = crc32c(&t[..60]);
    t[60..64].copy_from_slice(&c.to_le_bytes());
}

fn path() -> &'static Path {
    Path::new(PATH)
}

#[test]
fn a_valid_shard_parses_to_what_the_reader_opens() {
    for align in [1, 64] {
        let b = shard(align);
        let len = b.len() as u64;
        assert_eq!(Header::parse(&b[..16], path()).unwrap().version, 1);
        let t = Trailer::parse(trailer_of(&b), len, &Limits::default(), path()).unwrap();
        assert_eq!(t.records, 5);
        assert_eq!(t.start(), len - 64);
        assert_eq!(t.index_offset + t.index_len(), t.start());
        let meta = ShardMeta::parse(
            &b[t.meta_offset as usize..t.index_offset as usize],
            &t,
            path(),
        )
        .unwrap();
        assert_eq!(meta.align, align);
        let index = parse_index(
            &b[t.index_offset as usize..t.start() as usize],
            &t,
            meta.align,
            &Limits::default(),
            path(),
        )
        .unwrap();
        let r =
            ShardReader::from_source(PATH, memory_source(b.clone()), Limits::default()).unwrap();
        assert_eq!(r.index(), &index[..]);
        assert_eq!(r.meta(), &meta);
        assert_eq!(r.data_end(), t.meta_offset);
        assert_eq!(r.stored_prefix_crc(), t.file_crc);
    }
}

fn named(e: &FormatError, offset: &str) {
    let msg = e.to_string();
    assert!(msg.starts_with(PATH) && msg.contains(offset), "{msg}");
}

#[test]
fn header_damage_has_its_kind() {
    let b = shard(1);
    for cut in [0, 1, 8, 15] {
        let e = Header::parse(&b[..cut], path()).unwrap_err();
        assert!(
            matches!(e, FormatError::Truncated { start: 0, end: 16, file_len, .. } if file_len == cut as u64),
            "{e}"
        );
    }
    for at in 0..8 {
        let mut h = b[..16].to_vec();
        h[at] ^= 0x20;
        let e = Header::parse(&h, path()).unwrap_err();
        assert!(matches!(e, FormatError::BadMagic { offset: 0, .. }), "{e}");
        named(&e, "at byte 0");
        assert!(e.is_corruption());
    }
    let mut h = b[..16].to_vec();
    h[8] = 2;
    let e = Header::parse(&h, path()).unwrap_err();
    assert!(
        matches!(e, FormatError::UnsupportedVersion { found: 2, .. }),
        "{e}"
    );
    assert!(!e.is_corruption());
    for at in 10..16 {
        let mut h = b[..16].to_vec();
        h[at] = 1;
        let e = Header::parse(&h, path()).unwrap_err();
        assert!(matches!(e, FormatError::Corrupt { offset: 10, .. }), "{e}");
    }
}

#[test]
fn trailer_damage_has_its_kind() {
    let b = shard(1);
    let len = b.len() as u64;
    let limits = Limits::default();
    let t = trailer_of(&b);
    // too short a file, or too few bytes
    let e = Trailer::parse(t, 79, &limits, path()).unwrap_err();
    assert!(
        matches!(
            e,
            FormatError::Truncated {
                end: 80,
                file_len: 79,
                ..
            }
        ),
        "{e}"
    );
    let e = Trailer::parse(&t[..63], len, &limits, path()).unwrap_err();
    assert!(matches!(e, FormatError::Truncated { .. }), "{e}");
    // every flipped bit of the first 60 bytes breaks the trailer CRC (or the magic first)
    for at in 0..64 {
        let mut t2 = t.to_vec();
        t2[at] ^= 1;
        let e = Trailer::parse(&t2, len, &limits, path()).unwrap_err();
        match at {
            48..56 => {
                assert!(
                    matches!(e, FormatError::BadMagic { offset, .. } if offset == len - 64 + 48),
                    "{e}"
                );
                named(&e, &format!("at byte {}", len - 16));
            }
            _ => {
                assert!(
                    matches!(e, FormatError::Checksum { start, end, .. } if start == len - 64 && end == len),
                    "{e}"
                );
                named(&e, &format!("bytes {}..{len}", len - 64));
            }
        }
        assert!(e.is_corruption());
    }
    // the same trailer in a file of another length does not tile it
    let e = Trailer::parse(t, len + 1, &limits, path()).unwrap_err();
    assert!(
        matches!(e, FormatError::Corrupt { offset, .. } if offset == len + 1 - 64),
        "{e}"
    );
    // a record count that overflows 16 × records, resealed: corrupt, not an allocation
    let mut t2 = t.to_vec();
    t2[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
    reseal(&mut t2);
    let e = Trailer::parse(&t2, len, &limits, path()).unwrap_err();
    assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
    // meta before the header's end
    let mut t2 = t.to_vec();
    t2[0..8].copy_from_slice(&8u64.to_le_bytes());
    reseal(&mut t2);
    assert!(matches!(
        Trailer::parse(&t2, len, &limits, path()),
        Err(FormatError::Corrupt { .. })
    ));
    // version 2, resealed
    let mut t2 = t.to_vec();
    t2[44] = 2;
    reseal(&mut t2);
    assert!(matches!(
        Trailer::parse(&t2, len, &limits, path()),
        Err(FormatError::UnsupportedVersion { found: 2, .. })
    ));
    // a meta block over the limit
    let small = Limits {
        max_meta_bytes: 10,
        ..Limits::default()
    };
    assert!(matches!(
        Trailer::parse(t, len, &small, path()),
        Err(FormatError::LimitExceeded { max: 10, .. })
    ));
}

#[test]
fn meta_and_index_damage_has_its_kind() {
    let b = shard(1);
    let len = b.len() as u64;
    let limits = Limits::default();
    let t = Trailer::parse(trailer_of(&b), len, &limits, path()).unwrap();
    let meta = b[t.meta_offset as usize..t.index_offset as usize].to_vec();
    let index = b[t.index_offset as usize..t.start() as usize].to_vec();
    for at in 0..meta.len() {
        let mut m = meta.clone();
        m[at] ^= 4;
        let e = ShardMeta::parse(&m, &t, path()).unwrap_err();
        assert!(
            matches!(e, FormatError::Checksum { start, .. } if start == t.meta_offset),
            "{e}"
        );
    }
    assert!(matches!(
        ShardMeta::parse(&meta[..meta.len() - 1], &t, path()),
        Err(FormatError::Checksum { .. })
    ));
    // valid JSON with a wrong record count, its CRC matching
    let text = String::from_utf8(meta.clone())
        .unwrap()
        .replace("\"records\":5", "\"records\":6");
    let mut t6 = t;
    t6.meta_crc = crc32c(text.as_bytes());
    t6.meta_len = text.len() as u64;
    let e = ShardMeta::parse(text.as_bytes(), &t6, path()).unwrap_err();
    assert!(
        matches!(&e, FormatError::Corrupt { offset, .. } if *offset == t.meta_offset),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("meta says 6 records, trailer says 5"),
        "{e}"
    );
    for at in 0..index.len() {
        let mut x = index.clone();
        x[at] ^= 0x80;
        let e = parse_index(&x, &t, 1, &limits, path()).unwrap_err();
        assert!(
            matches!(e, FormatError::Checksum { start, .. } if start == t.index_offset),
            "{e}"
        );
    }
    // entries out of order, CRC matching: entry 2 names its own offset
    let mut x = index.clone();
    x.copy_within(16..24, 32);
    let mut t2 = t;
    t2.index_crc = crc32c(&x);
    let e = parse_index(&x, &t2, 1, &limits, path()).unwrap_err();
    assert!(
        matches!(&e, FormatError::Corrupt { offset, what, .. } if *offset == t.index_offset + 32 && what == "index entry 2"),
        "{e}"
    );
    // an entry whose offset + length overflows: corrupt, no panic
    let mut x = index.clone();
    x[64..72].copy_from_slice(&(u64::MAX - 2).to_le_bytes());
    let mut t2 = t;
    t2.index_crc = crc32c(&x);
    assert!(matches!(
        parse_index(&x, &t2, 1, &limits, path()),
        Err(FormatError::Corrupt { .. })
    ));
    // a misaligned record under an alignment of 64
    let e = parse_index(&index, &t, 64, &limits, path()).unwrap_err();
    assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
    // a record over the limit
    let tiny = Limits {
        max_record_bytes: 4,
        ..Limits::default()
    };
    assert!(matches!(
        parse_index(&index, &t, 1, &tiny, path()),
        Err(FormatError::LimitExceeded { .. })
    ));
}

#[test]
fn from_source_reports_what_the_parse_functions_report() {
    let b = shard(1);
    let open = |b: Vec<u8>| ShardReader::from_source(PATH, memory_source(b), Limits::default());
    let mut h = b.clone();
    h[0] = b'X';
    assert!(matches!(
        open(h),
        Err(FormatError::BadMagic { offset: 0, .. })
    ));
    let mut t = b.clone();
    let n = t.len();
    t[n - 1] ^= 1;
    assert!(matches!(open(t), Err(FormatError::Checksum { what, .. }) if what == "trailer"));
    assert!(matches!(
        open(b[..70].to_vec()),
        Err(FormatError::Truncated {
            end: 80,
            file_len: 70,
            ..
        })
    ));
}

/// Drive a [`ShardOpening`] over `b` (whose real length may differ from `claimed`), counting its
/// steps.
fn open_in_steps(
    b: &[u8],
    claimed: u64,
    tail: u64,
) -> Result<(stokehold_format::ShardStructure, usize), FormatError> {
    let mut opening = ShardOpening::new(PATH, claimed, Limits::default(), tail)?;
    let mut steps = 0;
    loop {
        match opening.step()? {
            OpenStep::Done(s) => return Ok((s, steps)),
            OpenStep::Read(reads) => {
                steps += 1;
                assert!(steps <= 2, "a shard opens in at most two steps");
                for r in reads {
                    assert!(r.offset + r.len <= claimed, "{r:?} within the file");
                    match b.get(r.offset as usize..(r.offset + r.len) as usize) {
                        Some(bytes) => opening.supply(r.offset, bytes.to_vec()),
                        None => {
                            let eof = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                            return Err(opening.read_error(&r, eof));
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn an_opening_in_steps_gives_the_reader_from_any_tail_and_asks_only_for_what_it_lacks() {
    for align in [1, 64] {
        let b = shard(align);
        let len = b.len() as u64;
        let r =
            ShardReader::from_source(PATH, memory_source(b.clone()), Limits::default()).unwrap();
        let t = Trailer::parse(trailer_of(&b), len, &Limits::default(), path()).unwrap();
        // the trailer alone: then the meta block and the index, in one step
        let (s, steps) = open_in_steps(&b, len, 64).unwrap();
        assert_eq!(steps, 2);
        assert_eq!((&s.meta, &s.index[..]), (r.meta(), r.index()));
        // a tail that holds the index but not all of the meta block
        let (s, steps) = open_in_steps(&b, len, t.start() - t.meta_offset - 1 + 64).unwrap();
        assert_eq!(steps, 2);
        assert_eq!(s.index, r.index());
        // a tail that holds all: one step; tails past the file are clamped
        for tail in [len - t.meta_offset, len, u64::MAX] {
            let (s, steps) = open_in_steps(&b, len, tail).unwrap();
            assert_eq!(
                (steps, &s.meta, &s.trailer),
                (1, r.meta(), &t),
                "tail {tail}"
            );
            let again =
                ShardReader::from_structure(PATH, memory_source(b.clone()), s, Limits::default());
            let (mut x, mut y) = (Vec::new(), Vec::new());
            for i in 0..r.len() {
                again.read_record(i, &mut x, true).unwrap();
                r.read_record(i, &mut y, true).unwrap();
                assert_eq!(x, y, "record {i}");
            }
        }
    }
}

#[test]
fn an_opening_in_steps_reports_what_from_source_reports() {
    let b = shard(1);
    let len = b.len() as u64;
    let mut h = b.clone();
    h[0] = b'X';
    assert!(matches!(
        open_in_steps(&h, len, len),
        Err(FormatError::BadMagic { offset: 0, .. })
    ));
    let mut m = b.clone();
    let t = Trailer::parse(trailer_of(&b), len, &Limits::default(), path()).unwrap();
    m[t.meta_offset as usize] ^= 1;
    for tail in [64, len] {
        assert!(matches!(
            open_in_steps(&m, len, tail),
            Err(FormatError::Checksum { what, .. }) if what == "meta block"
        ));
    }
    assert!(matches!(
        ShardOpening::new(PATH, 70, Limits::default(), 64),
        Err(FormatError::Truncated {
            end: 80,
            file_len: 70,
            ..
        })
    ));
    // a file shorter than its stated length: the read that passes its end says what it wanted
    let short = &b[..b.len() - 10];
    assert!(matches!(
        open_in_steps(short, len, 64),
        Err(FormatError::Truncated { what, file_len, .. }) if what == "trailer" && file_len == len
    ));
}
