//! Integration tests of the foreign-format parsers: tar, TFRecord, tf.train.Example, and the
//! fuzzing entry points with their seed corpora.

use std::io::{self, Read};
use std::path::Path;

use proptest::prelude::*;
use stokehold_ingest::example::{
    BytesList, Example, ExampleError, Feature, FloatList, Int64List, decode_example,
    encode_example, feature,
};
use stokehold_ingest::fuzzing::{fuzz_example, fuzz_tar, fuzz_tfrecord, replay_corpus};
use stokehold_ingest::tar::{EntryKind, TarEntry, TarError, TarLimits, TarReader};
use stokehold_ingest::tfrecord::{TfRecordError, TfRecordReader, masked_crc32c, write_record};

// ---------------------------------------------------------------------------------------------
// tar helpers

/// Reads every entry and its data; on error returns the entries read so far with the error.
fn read_tar(bytes: &[u8], limits: TarLimits) -> (Vec<(TarEntry, Vec<u8>)>, Option<TarError>) {
    read_tar_from(bytes, limits)
}

fn read_tar_from<R: Read>(r: R, limits: TarLimits) -> (Vec<(TarEntry, Vec<u8>)>, Option<TarError>) {
    let mut reader = TarReader::new(r, limits);
    let mut out = Vec::new();
    loop {
        match reader.next_entry() {
            Ok(Some(entry)) => match reader.read_data() {
                Ok(data) => out.push((entry, data)),
                Err(e) => return (out, Some(e)),
            },
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

/// Reads every entry, skipping data.
fn entries_only(bytes: &[u8]) -> Result<Vec<TarEntry>, TarError> {
    let mut reader = TarReader::new(bytes, TarLimits::default());
    let mut out = Vec::new();
    while let Some(e) = reader.next_entry()? {
        out.push(e);
    }
    Ok(out)
}

fn ok_tar(bytes: &[u8]) -> Vec<(TarEntry, Vec<u8>)> {
    let (entries, err) = read_tar(bytes, TarLimits::default());
    assert!(err.is_none(), "unexpected error: {err:?}");
    entries
}

fn gnu(kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h
}

fn ustar(kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h
}

fn add_file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = gnu(tar::EntryType::Regular, data.len() as u64);
    b.append_data(&mut h, name, data).unwrap();
}

/// A header whose name field holds `name` verbatim (bypassing the tar crate's path checks).
fn raw_header(name: &[u8], kind: u8, size: u64) -> tar::Header {
    let mut h = gnu(tar::EntryType::Regular, size);
    let bytes = h.as_mut_bytes();
    bytes[..100].fill(0);
    bytes[..name.len()].copy_from_slice(name);
    bytes[156] = kind;
    h.set_cksum();
    h
}

/// The stored checksum of a header block.
fn stored_cksum(block: &[u8]) -> u64 {
    let s = std::str::from_utf8(&block[148..155]).unwrap();
    u64::from_str_radix(s.trim_matches(|c| c == '\0' || c == ' '), 8).unwrap()
}

fn recompute_cksum(block: &mut [u8]) {
    block[148..156].fill(b' ');
    let sum: u64 = block[..512].iter().map(|&b| u64::from(b)).sum();
    let field = format!("{sum:06o}\0 ");
    block[148..156].copy_from_slice(field.as_bytes());
}

/// A reader that hands out at most one byte per call and interrupts every other call.
struct Trickle<'a> {
    data: &'a [u8],
    interrupt: bool,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.interrupt = !self.interrupt;
        if self.interrupt {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "again"));
        }
        if buf.is_empty() || self.data.is_empty() {
            return Ok(0);
        }
        buf[0] = self.data[0];
        self.data = &self.data[1..];
        Ok(1)
    }
}

/// A reader that fails once `ok` bytes have been read.
struct FailAfter<'a> {
    data: &'a [u8],
    ok: usize,
}

impl Read for FailAfter<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ok == 0 {
            return Err(io::Error::other("disk on fire"));
        }
        let n = buf.len().min(self.ok).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        self.ok -= n;
        Ok(n)
    }
}

/// dir "d/", "d/a.txt" (5 bytes), "b.bin" (1000 bytes), "empty" (0 bytes).
fn basic_archive() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = gnu(tar::EntryType::Directory, 0);
    b.append_data(&mut dir, "d/", io::empty()).unwrap();
    add_file(&mut b, "d/a.txt", b"hello");
    let big: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    add_file(&mut b, "b.bin", &big);
    add_file(&mut b, "empty", b"");
    b.into_inner().unwrap()
}

// ---------------------------------------------------------------------------------------------
// tar

#[test]
fn tar_round_trip_regular_files_and_directories() {
    let bytes = basic_archive();
    let entries = ok_tar(&bytes);
    let summary: Vec<_> = entries
        .iter()
        .map(|(e, d)| (e.name.as_str(), e.kind, e.header_offset, e.size, d.len()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("d/", EntryKind::Directory, 0, 0, 0),
            ("d/a.txt", EntryKind::Regular, 512, 5, 5),
            ("b.bin", EntryKind::Regular, 1536, 1000, 1000),
            ("empty", EntryKind::Regular, 3072, 0, 0),
        ]
    );
    for (e, _) in &entries {
        assert_eq!(e.data_offset, e.header_offset + 512);
    }
    assert_eq!(entries[1].1, b"hello");
    let big: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(entries[2].1, big);
    // Data really is where data_offset says.
    assert_eq!(&bytes[1536 + 512..1536 + 512 + 1000], &big[..]);

    // Skipping the data (never calling read_data) yields the same headers.
    let skipped = entries_only(&bytes).unwrap();
    let read: Vec<_> = entries.into_iter().map(|(e, _)| e).collect();
    assert_eq!(skipped, read);
}

#[test]
fn tar_reads_through_short_and_interrupted_reads() {
    let bytes = basic_archive();
    let (slow, err) = read_tar_from(
        Trickle {
            data: &bytes,
            interrupt: false,
        },
        TarLimits::default(),
    );
    assert!(err.is_none(), "{err:?}");
    assert_eq!(slow, ok_tar(&bytes));
}

#[test]
fn tar_io_error_carries_offset() {
    let bytes = basic_archive();
    // Fail in the middle of b.bin's data (header at 1536, data at 2048).
    let (entries, err) = read_tar_from(
        FailAfter {
            data: &bytes,
            ok: 2100,
        },
        TarLimits::default(),
    );
    assert_eq!(entries.len(), 2);
    match err {
        Some(TarError::Io { offset, source }) => {
            assert_eq!(offset, 2100);
            assert_eq!(source.to_string(), "disk on fire");
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn tar_gnu_long_name() {
    let long = format!("{}/{}", "x".repeat(120), "sample.jpg");
    let mut b = tar::Builder::new(Vec::new());
    add_file(&mut b, &long, b"jpeg");
    add_file(&mut b, "short", b"s");
    let bytes = b.into_inner().unwrap();
    assert_eq!(
        bytes[156], b'L',
        "the tar crate should have written a GNU long name"
    );
    let entries = ok_tar(&bytes);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].0.name, long);
    // 'L' header at 0, its 132-byte payload in one block, the member header at 1024.
    assert_eq!(entries[0].0.header_offset, 1024);
    assert_eq!(entries[0].1, b"jpeg");
    assert_eq!(entries[1].0.name, "short");
    assert_eq!(entries[1].0.header_offset, 2048);
}

#[test]
fn tar_pax_long_name_and_global_header() {
    let long = format!("{}/{}", "p".repeat(300), "ünïcode.txt");
    let mut b = tar::Builder::new(Vec::new());
    // A global header: parsed and ignored.
    let mut g = ustar(tar::EntryType::XGlobalHeader, 0);
    let global = b"20 comment=ignored!\n";
    g.set_size(global.len() as u64);
    g.set_cksum();
    b.append(&g, &global[..]).unwrap();
    b.append_pax_extensions([("path", long.as_bytes()), ("mtime", b"1.5".as_slice())])
        .unwrap();
    let mut h = ustar(tar::EntryType::Regular, 3);
    b.append_data(&mut h, "placeholder", &b"pax"[..]).unwrap();
    add_file(&mut b, "after", b"a");
    let bytes = b.into_inner().unwrap();
    let entries = ok_tar(&bytes);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].0.name, long);
    assert_eq!(entries[0].1, b"pax");
    // g at 0 (+1 payload block), x at 1024 (+1 payload block), member at 2048.
    assert_eq!(entries[0].0.header_offset, 2048);
    // The pax path applies to the next entry only.
    assert_eq!(entries[1].0.name, "after");
}

#[test]
fn tar_ustar_prefix_field() {
    let dir = "a".repeat(90);
    let name = format!("{dir}/{}", "b".repeat(80));
    let mut b = tar::Builder::new(Vec::new());
    let mut h = ustar(tar::EntryType::Regular, 2);
    b.append_data(&mut h, &name, &b"ok"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    assert_eq!(
        &bytes[345..435],
        dir.as_bytes(),
        "name should be split into prefix"
    );
    assert_eq!(&bytes[257..263], b"ustar\0");
    let entries = ok_tar(&bytes);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0.name, name);
    assert_eq!(entries[0].0.header_offset, 0);
    assert_eq!(entries[0].1, b"ok");
}

#[test]
fn tar_old_gnu_header_ignores_prefix_bytes() {
    // Old GNU headers keep atime/ctime where ustar has the prefix: those bytes are not a name.
    let mut h = raw_header(b"gnu-name", b'0', 1);
    assert_eq!(&h.as_bytes()[257..265], b"ustar  \0");
    h.as_mut_bytes()[345..357].copy_from_slice(b"14720000000\0");
    h.set_cksum();
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(b"z");
    bytes.resize(512 * 4, 0);
    let entries = ok_tar(&bytes);
    assert_eq!(entries[0].0.name, "gnu-name");
    assert_eq!(entries[0].1, b"z");
}

#[test]
fn tar_link_and_device_kinds() {
    let mut b = tar::Builder::new(Vec::new());
    let mut sym = gnu(tar::EntryType::Symlink, 0);
    b.append_link(&mut sym, "link", "../../etc/passwd").unwrap();
    let mut hard = gnu(tar::EntryType::Link, 0);
    b.append_link(&mut hard, "hard", "link").unwrap();
    let mut dev = gnu(tar::EntryType::Char, 0);
    b.append_data(&mut dev, "tty", io::empty()).unwrap();
    let mut fifo = gnu(tar::EntryType::Fifo, 0);
    b.append_data(&mut fifo, "fifo", io::empty()).unwrap();
    add_file(&mut b, "file", b"f");
    let bytes = b.into_inner().unwrap();
    let kinds: Vec<_> = ok_tar(&bytes)
        .into_iter()
        .map(|(e, d)| (e.name, e.kind, d.len()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("link".to_owned(), EntryKind::Symlink, 0),
            ("hard".to_owned(), EntryKind::HardLink, 0),
            ("tty".to_owned(), EntryKind::Other(b'3'), 0),
            ("fifo".to_owned(), EntryKind::Other(b'6'), 0),
            ("file".to_owned(), EntryKind::Regular, 1),
        ]
    );
}

#[test]
fn tar_keeps_dotdot_and_absolute_names_as_opaque_keys() {
    let mut bytes = Vec::new();
    for (name, data) in [
        (&b"../x"[..], &b"1"[..]),
        (b"/abs/path", b"22"),
        (b"./a/../../b", b"333"),
    ] {
        let h = raw_header(name, b'0', data.len() as u64);
        bytes.extend_from_slice(h.as_bytes());
        bytes.extend_from_slice(data);
        bytes.resize(bytes.len().next_multiple_of(512), 0);
    }
    bytes.extend_from_slice(&[0; 1024]);
    let names: Vec<_> = ok_tar(&bytes)
        .into_iter()
        .map(|(e, d)| (e.name, d))
        .collect();
    assert_eq!(
        names,
        vec![
            ("../x".to_owned(), b"1".to_vec()),
            ("/abs/path".to_owned(), b"22".to_vec()),
            ("./a/../../b".to_owned(), b"333".to_vec()),
        ]
    );
}

#[test]
fn tar_old_style_directory_by_trailing_slash() {
    let h = raw_header(b"olddir/", 0, 0);
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(&[0; 1024]);
    let entries = entries_only(&bytes).unwrap();
    assert_eq!(entries[0].kind, EntryKind::Directory);
    let h = raw_header(b"oldfile", 0, 0);
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(&[0; 1024]);
    assert_eq!(entries_only(&bytes).unwrap()[0].kind, EntryKind::Regular);
}

#[test]
fn tar_pax_size_overrides_header_size() {
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("size", b"700".as_slice())])
        .unwrap();
    let data: Vec<u8> = (0..700u32).map(|i| (i % 7) as u8).collect();
    // The header claims 3 bytes; the pax record says 700, and 700 bytes follow.
    let mut h = ustar(tar::EntryType::Regular, 3);
    h.set_path("sized").unwrap();
    h.set_cksum();
    b.append(&h, &data[..]).unwrap();
    add_file(&mut b, "next", b"n");
    let bytes = b.into_inner().unwrap();
    let entries = ok_tar(&bytes);
    assert_eq!(entries[0].0.name, "sized");
    assert_eq!(entries[0].0.size, 700);
    assert_eq!(entries[0].1, data);
    // With the header's size the reader would have landed mid-data; it found "next" instead.
    assert_eq!(entries[1].0.name, "next");
    assert_eq!(entries[1].0.header_offset, 1024 + 512 + 1024);
    assert_eq!(entries[1].1, b"n");
}

#[test]
fn tar_bad_checksum_reports_header_offset() {
    let mut bytes = basic_archive();
    // Corrupt the third header (b.bin at 1536) without fixing its checksum.
    let stored = stored_cksum(&bytes[1536..2048]);
    let old = bytes[1536];
    bytes[1536] = b'c';
    let (entries, err) = read_tar(&bytes, TarLimits::default());
    assert_eq!(entries.len(), 2);
    let err = err.expect("checksum error");
    let expected = stored - u64::from(old) + u64::from(b'c');
    match &err {
        TarError::Checksum {
            offset,
            stored: s,
            computed,
        } => {
            assert_eq!(*offset, 1536);
            assert_eq!(*s, stored);
            assert_eq!(*computed, expected);
        }
        other => panic!("expected Checksum, got {other:?}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "tar header at byte 1536: checksum mismatch (stored {stored:#o}, computed {expected:#o})"
        )
    );
    assert_eq!(err.offset(), 1536);
}

#[test]
fn tar_accepts_signed_checksum() {
    // Historic writers summed bytes as signed chars; tarfile accepts both sums.
    let mut h = raw_header(b"signed", b'0', 0);
    let block = h.as_mut_bytes();
    block[265..269].copy_from_slice(&[0xe9, 0xe9, 0xe9, 0xe9]); // uname bytes >= 0x80
    block[148..156].fill(b' ');
    let signed: i64 = block.iter().map(|&b| i64::from(b as i8)).sum();
    let unsigned: u64 = block.iter().map(|&b| u64::from(b)).sum();
    assert_ne!(signed as u64, unsigned);
    block[148..156].copy_from_slice(format!("{signed:06o}\0 ").as_bytes());
    let mut bytes = block.to_vec();
    bytes.extend_from_slice(&[0; 1024]);
    assert_eq!(entries_only(&bytes).unwrap()[0].name, "signed");
    // A checksum that is neither sum is refused.
    bytes[148..156].copy_from_slice(format!("{:06o}\0 ", signed + 1).as_bytes());
    assert!(matches!(
        entries_only(&bytes),
        Err(TarError::Checksum { offset: 0, .. })
    ));
}

#[test]
fn tar_garbage_block_is_an_error_not_an_entry() {
    let mut bytes = vec![0xa5u8; 512];
    bytes.extend_from_slice(&[0; 1024]);
    let err = entries_only(&bytes).unwrap_err();
    assert!(
        matches!(
            err,
            TarError::BadNumber {
                offset: 0,
                field: "checksum"
            }
        ),
        "{err:?}"
    );
    // A plausible checksum field but wrong sum.
    let mut h = raw_header(b"x", b'0', 0);
    h.as_mut_bytes()[148..156].copy_from_slice(b"000001\0 ");
    let mut bytes = basic_archive();
    bytes.splice(512..512, h.as_bytes().iter().copied());
    assert!(matches!(
        entries_only(&bytes),
        Err(TarError::Checksum {
            offset: 512,
            stored: 1,
            ..
        })
    ));
}

/// Member start offsets (first header of each logical entry) and end-marker offset of the
/// archive used for the truncation test.
fn truncation_archive() -> (Vec<u8>, Vec<u64>, u64) {
    let mut b = tar::Builder::new(Vec::new());
    add_file(&mut b, "first", b"0123456789"); // 0
    b.append_pax_extensions([("path", "pax/name".as_bytes())])
        .unwrap(); // 1024
    let mut h = ustar(tar::EntryType::Regular, 600);
    b.append_data(&mut h, "ph", &[7u8; 600][..]).unwrap(); // 2048, data to 3584
    add_file(&mut b, &"L".repeat(140), b"long"); // 3584 (L), 4608 member
    let mut d = gnu(tar::EntryType::Directory, 0);
    b.append_data(&mut d, "dir/", io::empty()).unwrap(); // 5632
    let bytes = b.into_inner().unwrap(); // end marker at 6144, len 7168
    (bytes, vec![0, 1024, 3584, 5632], 6144)
}

#[test]
fn tar_truncation_at_every_length() {
    let (full, starts, end) = truncation_archive();
    assert_eq!(full.len() as u64, end + 1024);
    let complete = ok_tar(&full);
    assert_eq!(complete.len(), 4);
    assert_eq!(complete[1].0.name, "pax/name");
    assert_eq!(complete[2].0.name, "L".repeat(140));

    for cut in 0..=full.len() {
        let c = cut as u64;
        let (entries, err) = read_tar(&full[..cut], TarLimits::default());
        // Entries read are always a prefix of the complete archive's.
        assert_eq!(entries[..], complete[..entries.len()], "cut {cut}");
        // Clean ends: at a member boundary, right after the first zero block, or after both.
        let clean = starts.contains(&c) || c == end || c == end + 512 || c == end + 1024;
        if clean {
            assert!(err.is_none(), "cut {cut}: {err:?}");
            let expected = starts.iter().filter(|&&s| s < c).count();
            assert_eq!(entries.len(), expected, "cut {cut}");
        } else {
            let Some(TarError::Truncated { offset }) = err else {
                panic!("cut {cut}: expected Truncated, got {err:?}");
            };
            assert_eq!(offset % 512, 0, "cut {cut}");
            if c > end {
                // Inside the end marker: the partial zero block is reported.
                assert_eq!(entries.len(), 4, "cut {cut}");
                assert_eq!(offset, if c < end + 512 { end } else { end + 512 });
            } else {
                // The reported header belongs to the entry the cut falls in. That entry's data
                // was returned if the cut falls in its padding.
                let within = starts.iter().filter(|&&s| s < c).count();
                let last = &complete[within - 1].0;
                let expected = if last.data_offset + last.size <= c && last.header_offset < c {
                    within
                } else {
                    within - 1
                };
                assert_eq!(entries.len(), expected, "cut {cut}");
                assert!(
                    (starts[within - 1]..c).contains(&offset),
                    "cut {cut}: offset {offset}"
                );
            }
        }
    }
}

#[test]
fn tar_end_of_archive_variants() {
    let bytes = basic_archive(); // 3584 bytes of members, then 1024 zero bytes
    assert_eq!(bytes.len(), 3584 + 1024);
    // No end marker at all: EOF at a block boundary ends the archive.
    assert_eq!(ok_tar(&bytes[..3584]).len(), 4);
    // One zero block, then EOF.
    assert_eq!(ok_tar(&bytes[..3584 + 512]).len(), 4);
    // Anything after the end marker is not read.
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(b"garbage that is not a tar header");
    assert_eq!(ok_tar(&trailing).len(), 4);
    // Empty input: an empty archive.
    assert!(ok_tar(&[]).is_empty());
    // After the end, next_entry keeps returning None.
    let mut r = TarReader::new(&bytes[..], TarLimits::default());
    while r.next_entry().unwrap().is_some() {}
    assert!(r.next_entry().unwrap().is_none());
    assert_eq!(r.position(), 3584 + 1024);
}

#[test]
fn tar_extended_header_without_member_is_truncation() {
    let mut b = tar::Builder::new(Vec::new());
    add_file(&mut b, "a", b"a");
    b.append_pax_extensions([("path", b"orphan".as_slice())])
        .unwrap();
    let bytes = b.into_inner().unwrap(); // pax at 1024, zero blocks at 2048
    let (entries, err) = read_tar(&bytes, TarLimits::default());
    assert_eq!(entries.len(), 1);
    assert!(
        matches!(err, Some(TarError::Truncated { offset: 1024 })),
        "{err:?}"
    );
    let (_, err) = read_tar(&bytes[..2048], TarLimits::default());
    assert!(
        matches!(err, Some(TarError::Truncated { offset: 1024 })),
        "{err:?}"
    );
}

/// A GNU header for "huge" whose size field is `size_field`, followed by 3 data bytes and EOF.
fn hostile_size_archive(size_field: &[u8; 12]) -> Vec<u8> {
    let mut h = raw_header(b"huge", b'0', 0);
    h.as_mut_bytes()[124..136].copy_from_slice(size_field);
    h.set_cksum();
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(b"abc");
    bytes
}

#[test]
fn tar_hostile_size_field_is_refused_or_truncated_without_allocating() {
    let bytes = hostile_size_archive(b"77777777777\0");
    // Default limits: 8 GiB - 1 is over the 1 GiB cap.
    let err = entries_only(&bytes).unwrap_err();
    match err {
        TarError::TooLarge { offset, size, max } => {
            assert_eq!((offset, size, max), (0, 0o77777777777, 1 << 30));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }

    // Without a cap the header is accepted, but reading stops at the 3 bytes present.
    let unlimited = TarLimits {
        max_member_size: u64::MAX,
        ..TarLimits::default()
    };
    let mut r = TarReader::new(&bytes[..], unlimited);
    let e = r.next_entry().unwrap().unwrap();
    assert_eq!(e.size, 0o77777777777);
    assert!(matches!(
        r.read_data(),
        Err(TarError::Truncated { offset: 0 })
    ));
    assert!(
        r.next_entry().unwrap().is_none(),
        "reader is finished after an error"
    );

    // GNU base-256: 2^62 bytes. Preallocating that would abort the test process; reading
    // through take() fails cleanly.
    let mut field = [0u8; 12];
    field[0] = 0x80;
    field[4] = 0x40;
    let bytes = hostile_size_archive(&field);
    let mut r = TarReader::new(&bytes[..], unlimited);
    let e = r.next_entry().unwrap().unwrap();
    assert_eq!(e.size, 1 << 62);
    assert!(matches!(
        r.read_data(),
        Err(TarError::Truncated { offset: 0 })
    ));
    // Skipping instead of reading: also Truncated.
    let mut r = TarReader::new(&bytes[..], unlimited);
    r.next_entry().unwrap().unwrap();
    assert!(matches!(
        r.next_entry(),
        Err(TarError::Truncated { offset: 0 })
    ));

    // A negative base-256 size is invalid.
    let mut neg = [0xffu8; 12];
    neg[11] = 0xfe;
    let err = entries_only(&hostile_size_archive(&neg)).unwrap_err();
    assert!(matches!(
        err,
        TarError::BadNumber {
            offset: 0,
            field: "size"
        }
    ));
}

#[test]
fn tar_base256_size_is_read() {
    let mut field = [0u8; 12];
    field[0] = 0x80;
    field[11] = 3;
    let mut bytes = hostile_size_archive(&field);
    bytes.resize(512 * 4, 0);
    let entries = ok_tar(&bytes);
    assert_eq!(entries[0].1, b"abc");
}

/// A pax header with `payload` followed by a 1-byte member "m", and the end marker.
fn pax_archive(payload: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    add_file(&mut b, "first", b"1"); // 0
    let mut x = ustar(tar::EntryType::XHeader, payload.len() as u64);
    x.set_cksum();
    b.append(&x, payload).unwrap(); // 1024
    add_file(&mut b, "m", b"m");
    b.into_inner().unwrap()
}

#[test]
fn tar_malformed_pax_headers() {
    // Sanity: a well-formed record works.
    assert_eq!(ok_tar(&pax_archive(b"10 path=p\n"))[1].0.name, "p");

    for (payload, reason_has) in [
        (&b"11 path=p\n"[..], "disagrees"),
        (b"9 path=pp\n", "disagrees"),
        (b"999999999999999999999999 path=p\n", "overflows"),
        (b"x path=p\n", "does not start"),
        (b"8 pathp\n", "no `=`"),
        (b"11 size=1x\n", "not a decimal"),
        (b"11 size=-1\n", "not a decimal"),
        (b"9 size= \n", "not a decimal"),
    ] {
        let what = String::from_utf8_lossy(payload);
        let (entries, err) = read_tar(&pax_archive(payload), TarLimits::default());
        assert_eq!(entries.len(), 1, "{what}");
        match err {
            Some(TarError::BadPax { offset, reason }) => {
                assert_eq!(offset, 1024, "{what}");
                assert!(reason.contains(reason_has), "{what}: {reason}");
            }
            other => panic!("{what}: expected BadPax, got {other:?}"),
        }
    }

    // A pax size over the member limit: TooLarge at the member's header.
    let (_, err) = read_tar(
        &pax_archive(b"16 size=2000000\n"),
        TarLimits {
            max_member_size: 1_000_000,
            ..TarLimits::default()
        },
    );
    assert!(
        matches!(
            err,
            Some(TarError::TooLarge {
                offset: 2048,
                size: 2_000_000,
                max: 1_000_000
            })
        ),
        "{err:?}"
    );

    // A pax payload over the extension cap, refused before it is read.
    let (_, err) = read_tar(
        &pax_archive(b"10 path=p\n"),
        TarLimits {
            max_header_ext: 9,
            ..TarLimits::default()
        },
    );
    assert!(
        matches!(
            err,
            Some(TarError::ExtTooLarge {
                offset: 1024,
                size: 10,
                max: 9
            })
        ),
        "{err:?}"
    );

    // A non-UTF-8 pax path.
    let (_, err) = read_tar(&pax_archive(b"11 path=\xff\xfe\n"), TarLimits::default());
    assert!(
        matches!(err, Some(TarError::BadName { offset: 1024 })),
        "{err:?}"
    );
}

#[test]
fn tar_non_utf8_names_are_errors() {
    let mut bytes = raw_header(b"caf\xe9", b'0', 0).as_bytes().to_vec();
    bytes.extend_from_slice(&[0; 1024]);
    assert!(matches!(
        entries_only(&bytes),
        Err(TarError::BadName { offset: 0 })
    ));

    // In a GNU long name.
    let mut long = vec![b'n'; 150];
    long[10] = 0xff;
    let mut l = raw_header(b"././@LongLink", b'L', long.len() as u64);
    l.set_cksum();
    let mut bytes = vec![0u8; 0];
    let mut b = tar::Builder::new(Vec::new());
    add_file(&mut b, "ok", b"");
    bytes.extend_from_slice(&b.into_inner().unwrap()[..512]);
    bytes.extend_from_slice(l.as_bytes());
    bytes.extend_from_slice(&long);
    bytes.resize(1536, 0);
    bytes.extend_from_slice(raw_header(b"short", b'0', 0).as_bytes());
    bytes.extend_from_slice(&[0; 1024]);
    let (entries, err) = read_tar(&bytes, TarLimits::default());
    assert_eq!(entries.len(), 1);
    assert!(
        matches!(err, Some(TarError::BadName { offset: 512 })),
        "{err:?}"
    );
}

#[test]
fn tar_read_data_misuse() {
    let bytes = basic_archive();
    let mut r = TarReader::new(&bytes[..], TarLimits::default());
    assert!(matches!(
        r.read_data(),
        Err(TarError::NoCurrentEntry { offset: 0 })
    ));
    r.next_entry().unwrap().unwrap(); // d/
    r.next_entry().unwrap().unwrap(); // d/a.txt
    assert_eq!(r.read_data().unwrap(), b"hello");
    assert!(matches!(
        r.read_data(),
        Err(TarError::NoCurrentEntry { offset: 1029 })
    ));
    // The misuse is not fatal: the next entry still reads.
    assert_eq!(r.next_entry().unwrap().unwrap().name, "b.bin");
}

// ---------------------------------------------------------------------------------------------
// TFRecord

fn three_records() -> (Vec<u8>, Vec<Vec<u8>>) {
    let records = vec![b"".to_vec(), b"hello".to_vec(), vec![0x5a; 1000]];
    let mut out = Vec::new();
    for r in &records {
        write_record(&mut out, r).unwrap();
    }
    (out, records)
}

fn read_records(bytes: &[u8]) -> (Vec<(u64, Vec<u8>)>, Option<TfRecordError>) {
    let mut r = TfRecordReader::new(bytes, 1 << 20);
    let mut out = Vec::new();
    let mut buf = Vec::new();
    loop {
        match r.next_record(&mut buf) {
            Ok(Some(off)) => out.push((off, buf.clone())),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[test]
fn tfrecord_round_trip() {
    let (bytes, records) = three_records();
    assert_eq!(bytes.len(), 16 + 21 + 1016);
    let mut r = TfRecordReader::new(&bytes[..], 1 << 20);
    let mut buf = vec![9u8; 50]; // stale contents must be cleared
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(0));
    assert_eq!(buf, records[0]);
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(16));
    assert_eq!(buf, records[1]);
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(37));
    assert_eq!(buf, records[2]);
    assert_eq!(r.next_record(&mut buf).unwrap(), None);
    assert_eq!(r.next_record(&mut buf).unwrap(), None);
    assert_eq!(r.position(), bytes.len() as u64);
}

#[test]
fn tfrecord_bad_length_crc() {
    let (mut bytes, records) = three_records();
    bytes[16] ^= 0x01; // second record's length: 5 -> 4
    let mut r = TfRecordReader::new(&bytes[..], 1 << 20);
    let mut buf = Vec::new();
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(0));
    assert_eq!(buf, records[0]);
    let err = r.next_record(&mut buf).unwrap_err();
    assert!(
        matches!(err, TfRecordError::LengthCrc { offset: 16 }),
        "{err:?}"
    );
    assert_eq!(err.offset(), 16);
    assert!(err.to_string().contains("byte 16"), "{err}");
    // The stream cannot be resynchronised: the reader is finished.
    assert_eq!(r.next_record(&mut buf).unwrap(), None);

    // A flipped bit in the stored CRC itself.
    let (mut bytes, _) = three_records();
    bytes[37 + 9] ^= 0x80;
    let (ok, err) = read_records(&bytes);
    assert_eq!(ok.len(), 2);
    assert!(
        matches!(err, Some(TfRecordError::LengthCrc { offset: 37 })),
        "{err:?}"
    );
}

#[test]
fn tfrecord_bad_data_crc_then_next_record_reads() {
    let (mut bytes, records) = three_records();
    bytes[16 + 12 + 1] ^= 0xff; // "hello" -> "h?llo"
    let mut r = TfRecordReader::new(&bytes[..], 1 << 20);
    let mut buf = Vec::new();
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(0));
    let err = r.next_record(&mut buf).unwrap_err();
    assert!(
        matches!(err, TfRecordError::DataCrc { offset: 16, .. }),
        "{err:?}"
    );
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(37));
    assert_eq!(buf, records[2]);
    assert_eq!(r.next_record(&mut buf).unwrap(), None);

    // A corrupt data CRC field (not the data) is reported the same way.
    let (mut bytes, _) = three_records();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x10;
    let (ok, err) = read_records(&bytes);
    assert_eq!(ok.len(), 2);
    assert!(
        matches!(err, Some(TfRecordError::DataCrc { offset: 37, .. })),
        "{err:?}"
    );
}

#[test]
fn tfrecord_truncation_at_every_length() {
    let (bytes, records) = three_records();
    let starts = [0u64, 16, 37];
    for cut in 0..=bytes.len() {
        let c = cut as u64;
        let (ok, err) = read_records(&bytes[..cut]);
        let complete = starts.iter().filter(|&&s| s < c).count();
        if starts.contains(&c) || cut == bytes.len() {
            assert!(err.is_none(), "cut {cut}: {err:?}");
            assert_eq!(ok.len(), complete, "cut {cut}");
        } else {
            let cut_record = complete - 1;
            assert_eq!(ok.len(), cut_record, "cut {cut}");
            match err {
                Some(TfRecordError::Truncated { offset }) => {
                    assert_eq!(offset, starts[cut_record], "cut {cut}")
                }
                other => panic!("cut {cut}: expected Truncated, got {other:?}"),
            }
        }
        for (i, (off, data)) in ok.iter().enumerate() {
            assert_eq!((*off, data), (starts[i], &records[i]));
        }
    }
}

/// A record header claiming `len` bytes, with a correct length CRC, followed by `tail`.
fn hostile_length(len: u64, tail: &[u8]) -> Vec<u8> {
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(&masked_crc32c(&len.to_le_bytes()).to_le_bytes());
    out.extend_from_slice(tail);
    out
}

#[test]
fn tfrecord_hostile_length_is_refused_before_allocation() {
    let bytes = hostile_length(1 << 63, b"tiny");
    let mut r = TfRecordReader::new(&bytes[..], 1 << 30);
    let mut buf = Vec::new();
    match r.next_record(&mut buf) {
        Err(TfRecordError::TooLarge { offset, len, max }) => {
            assert_eq!((offset, len, max), (0, 1 << 63, 1 << 30));
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(buf.capacity(), 0, "nothing was reserved");
    // Only the 12 header bytes were consumed.
    assert_eq!(r.position(), 12);

    // With no cap, the payload is read through take(): preallocating 2^63 bytes would abort,
    // instead the reader reports truncation after the 4 bytes present.
    let mut r = TfRecordReader::new(&bytes[..], u64::MAX);
    let err = r.next_record(&mut buf).unwrap_err();
    assert!(
        matches!(err, TfRecordError::Truncated { offset: 0 }),
        "{err:?}"
    );
    assert!(buf.capacity() < 1 << 20);
}

#[test]
fn tfrecord_detects_gzip() {
    // gzip of the empty string.
    let gz = [
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x03, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    let (ok, err) = read_records(&gz);
    assert!(ok.is_empty());
    let err = err.expect("gzip must be refused");
    assert!(
        matches!(err, TfRecordError::Compressed { offset: 0 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("decompress"), "{err}");
    // Even a tiny gzip prefix.
    let (_, err) = read_records(&gz[..4]);
    assert!(matches!(err, Some(TfRecordError::Compressed { offset: 0 })));
    // Gzip magic later in the file is just a corrupt record.
    let (mut bytes, _) = three_records();
    bytes[16] = 0x1f;
    bytes[17] = 0x8b;
    let (_, err) = read_records(&bytes);
    assert!(matches!(err, Some(TfRecordError::LengthCrc { offset: 16 })));
}

#[test]
fn tfrecord_io_error_carries_record_offset() {
    let (bytes, _) = three_records();
    let mut r = TfRecordReader::new(
        FailAfter {
            data: &bytes,
            ok: 40,
        },
        1 << 20,
    );
    let mut buf = Vec::new();
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(0));
    assert_eq!(r.next_record(&mut buf).unwrap(), Some(16));
    match r.next_record(&mut buf) {
        Err(TfRecordError::Io { offset, source }) => {
            assert_eq!(offset, 37);
            assert_eq!(source.to_string(), "disk on fire");
        }
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn tfrecord_reads_through_short_and_interrupted_reads() {
    let (bytes, records) = three_records();
    let mut r = TfRecordReader::new(
        Trickle {
            data: &bytes,
            interrupt: false,
        },
        1 << 20,
    );
    let mut buf = Vec::new();
    for (i, start) in [0u64, 16, 37].into_iter().enumerate() {
        assert_eq!(r.next_record(&mut buf).unwrap(), Some(start));
        assert_eq!(buf, records[i]);
    }
    assert_eq!(r.next_record(&mut buf).unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// tf.train.Example

fn sample_example() -> Example {
    Example::from_features([
        (
            "image/encoded",
            Feature::bytes([b"\xff\xd8jpeg".to_vec(), vec![]]),
        ),
        ("label", Feature::int64s(vec![7, -1, i64::MAX, i64::MIN])),
        ("bbox", Feature::floats(vec![0.25, -1.5, f32::MAX, 0.0])),
        ("empty", Feature { kind: None }),
    ])
}

#[test]
fn example_round_trip() {
    let ex = sample_example();
    let bytes = encode_example(&ex);
    let back = decode_example(&bytes).unwrap();
    assert_eq!(back, ex);
    let names: Vec<_> = back
        .features
        .as_ref()
        .unwrap()
        .feature
        .keys()
        .cloned()
        .collect();
    assert_eq!(names, ["bbox", "empty", "image/encoded", "label"]);
    match &back.feature("image/encoded").unwrap().kind {
        Some(feature::Kind::BytesList(BytesList { value })) => {
            assert_eq!(value, &[b"\xff\xd8jpeg".to_vec(), vec![]]);
        }
        other => panic!("{other:?}"),
    }
    match &back.feature("label").unwrap().kind {
        Some(feature::Kind::Int64List(Int64List { value })) => {
            assert_eq!(value, &[7, -1, i64::MAX, i64::MIN]);
        }
        other => panic!("{other:?}"),
    }
    match &back.feature("bbox").unwrap().kind {
        Some(feature::Kind::FloatList(FloatList { value })) => {
            assert_eq!(value, &[0.25, -1.5, f32::MAX, 0.0]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(back.feature("empty").unwrap().kind, None);
    assert!(back.feature("missing").is_none());
    // Encoding is deterministic.
    assert_eq!(encode_example(&back), bytes);
}

#[test]
fn example_inside_tfrecord() {
    let ex = sample_example();
    let mut file = Vec::new();
    write_record(&mut file, &encode_example(&ex)).unwrap();
    write_record(&mut file, &encode_example(&Example::default())).unwrap();
    let (records, err) = read_records(&file);
    assert!(err.is_none());
    assert_eq!(decode_example(&records[0].1).unwrap(), ex);
    assert_eq!(decode_example(&records[1].1).unwrap(), Example::default());
}

#[test]
fn example_packed_floats_from_hand_bytes() {
    // Example{features{feature{"f": Feature{float_list{value: [1.0, 2.0]}}}}}
    let mut float_list = vec![0x0a, 0x08];
    float_list.extend_from_slice(&1.0f32.to_le_bytes());
    float_list.extend_from_slice(&2.0f32.to_le_bytes());
    let mut feat = vec![0x12, float_list.len() as u8];
    feat.extend_from_slice(&float_list);
    let mut entry = vec![0x0a, 0x01, b'f', 0x12, feat.len() as u8];
    entry.extend_from_slice(&feat);
    let mut features = vec![0x0a, entry.len() as u8];
    features.extend_from_slice(&entry);
    let mut ex = vec![0x0a, features.len() as u8];
    ex.extend_from_slice(&features);
    let decoded = decode_example(&ex).unwrap();
    assert_eq!(
        decoded,
        Example::from_features([("f", Feature::floats(vec![1.0, 2.0]))])
    );
}

#[test]
fn example_garbage_is_an_error() {
    for garbage in [
        &[0xffu8; 16][..],             // invalid wire type 7
        &[0x0a, 0x05, 0x01][..],       // length 5, 1 byte present
        &[0x0b][..],                   // start group with no end
        b"this is not a protobuf\x00", // arbitrary text
        &[0x0a, 0x02, 0x0a, 0x05][..], // nested length beyond parent
    ] {
        match decode_example(garbage) {
            Err(ExampleError::Decode { len, .. }) => assert_eq!(len, garbage.len()),
            Ok(ex) => panic!("{garbage:?} decoded as {ex:?}"),
        }
    }
}

#[test]
fn example_hostile_length_varint_does_not_allocate() {
    // Example.features with a length varint of about 2^63.
    let top = [
        0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00,
    ];
    assert!(decode_example(&top).is_err());
    // A well-formed path down to a BytesList value whose length claims 4 GiB - 1.
    let bytes_list = [0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, b'x'];
    let mut feat = vec![0x0a, bytes_list.len() as u8];
    feat.extend_from_slice(&bytes_list);
    let mut entry = vec![0x0a, 0x01, b'k', 0x12, feat.len() as u8];
    entry.extend_from_slice(&feat);
    let mut features = vec![0x0a, entry.len() as u8];
    features.extend_from_slice(&entry);
    let mut ex = vec![0x0a, features.len() as u8];
    ex.extend_from_slice(&features);
    let err = decode_example(&ex).unwrap_err();
    assert!(
        err.to_string().contains("invalid tf.train.Example"),
        "{err}"
    );
    // A packed int64 list claiming 2^40 bytes.
    let packed = [0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0x01];
    assert!(<Int64List as prost::Message>::decode(&packed[..]).is_err());
}

// ---------------------------------------------------------------------------------------------
// fuzzing entry points and seed corpora

#[test]
fn seed_corpora_replay_without_panics() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus"));
    let tar = replay_corpus(&root.join("tar"), fuzz_tar);
    let tfrecord = replay_corpus(&root.join("tfrecord"), fuzz_tfrecord);
    let example = replay_corpus(&root.join("example"), fuzz_example);
    assert!(tar >= 5, "tar corpus has {tar} files");
    assert!(tfrecord >= 4, "tfrecord corpus has {tfrecord} files");
    assert!(example >= 3, "example corpus has {example} files");
}

fn corpus_file(kind: &str, name: &str) -> Vec<u8> {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus"));
    std::fs::read(root.join(kind).join(name)).unwrap()
}

/// Each seed file exercises the path its name promises (so the seeds stay meaningful).
#[test]
fn seed_corpora_hit_the_intended_paths() {
    let tar = |name: &str| read_tar(&corpus_file("tar", name), TarLimits::default());
    let names = |entries: Vec<(TarEntry, Vec<u8>)>| -> Vec<String> {
        entries.into_iter().map(|(e, _)| e.name).collect()
    };

    let (e, err) = tar("valid_two_members.tar");
    assert!(err.is_none());
    assert_eq!(names(e), ["000001.jpg", "000001.cls"]);
    let (e, err) = tar("pax_path_and_size.tar");
    assert!(err.is_none());
    assert_eq!(
        (e[0].0.name.clone(), e[0].1.clone()),
        ("pax/ünïcode/".repeat(12), b"hello".to_vec())
    );
    let (e, err) = tar("gnu_long_name.tar");
    assert!(err.is_none());
    assert_eq!(names(e), [format!("{}/sample.txt", "long".repeat(40))]);
    let (e, err) = tar("dir_symlink_hardlink.tar");
    assert!(err.is_none());
    let kinds: Vec<_> = e.iter().map(|(e, _)| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::Directory,
            EntryKind::Symlink,
            EntryKind::HardLink,
            EntryKind::Regular
        ]
    );
    assert!(matches!(
        tar("truncated.tar").1,
        Some(TarError::Truncated { offset: 1024 })
    ));
    assert!(matches!(
        tar("bad_checksum.tar").1,
        Some(TarError::Checksum { offset: 0, .. })
    ));
    assert!(matches!(
        tar("hostile_octal_size.tar").1,
        Some(TarError::TooLarge {
            offset: 0,
            size: 0o77777777777,
            ..
        })
    ));
    assert!(matches!(
        tar("hostile_base256_size.tar").1,
        Some(TarError::TooLarge {
            offset: 0,
            size: 0x4000_0000_0000_0000,
            ..
        })
    ));
    assert!(matches!(
        tar("bad_pax_length.tar").1,
        Some(TarError::BadPax { offset: 0, .. })
    ));
    let (e, err) = tar("one_zero_block.tar");
    assert!(e.is_empty() && err.is_none());
    assert!(matches!(tar("garbage.tar").1, Some(e) if e.offset() == 0));

    let tfr = |name: &str| read_records(&corpus_file("tfrecord", name));
    let (r, err) = tfr("valid_three_records.tfrecord");
    assert_eq!((r.len(), err.is_none()), (3, true));
    assert!(matches!(
        tfr("bad_length_crc.tfrecord").1,
        Some(TfRecordError::LengthCrc { offset: 16 })
    ));
    assert!(matches!(
        tfr("bad_data_crc.tfrecord").1,
        Some(TfRecordError::DataCrc { offset: 16, .. })
    ));
    assert!(matches!(
        tfr("truncated.tfrecord").1,
        Some(TfRecordError::Truncated { offset: 37 })
    ));
    assert!(matches!(
        tfr("truncated_header.tfrecord").1,
        Some(TfRecordError::Truncated { offset: 0 })
    ));
    // hostile_length claims 2^63 bytes, over read_records' 1 MiB cap.
    assert!(matches!(
        tfr("hostile_length.tfrecord").1,
        Some(TfRecordError::TooLarge { offset: 0, .. })
    ));
    assert!(matches!(
        tfr("gzip.tfrecord.gz").1,
        Some(TfRecordError::Compressed { offset: 0 })
    ));
    let (r, err) = tfr("example_record.tfrecord");
    assert!(err.is_none());
    assert_eq!(
        decode_example(&r[0].1).unwrap(),
        decode_example(&corpus_file("example", "valid.pb")).unwrap()
    );

    let ex = |name: &str| decode_example(&corpus_file("example", name));
    let valid = ex("valid.pb").unwrap();
    assert_eq!(valid.features.as_ref().unwrap().feature.len(), 3);
    assert_eq!(ex("empty.pb").unwrap(), Example::default());
    for bad in ["truncated.pb", "hostile_length.pb", "garbage.pb"] {
        assert!(ex(bad).is_err(), "{bad}");
    }
}

#[test]
fn replay_corpus_counts_files_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a"), b"1").unwrap();
    std::fs::write(dir.path().join("b"), b"22").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    assert_eq!(replay_corpus(dir.path(), |d| assert!(!d.is_empty())), 2);
    assert_eq!(replay_corpus(&dir.path().join("missing"), fuzz_tar), 0);
}

fn mutate(base: &[u8], edits: &[(usize, u8)], cut: usize) -> Vec<u8> {
    let mut data = base.to_vec();
    for &(i, b) in edits {
        let i = i % data.len();
        data[i] = b;
    }
    data.truncate(cut % (data.len() + 1));
    data
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        fuzz_tar(&data);
        fuzz_tfrecord(&data);
        fuzz_example(&data);
    }

    #[test]
    fn mutated_tar_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in any::<usize>(),
        fix_checksums in any::<bool>(),
    ) {
        let (base, _, _) = truncation_archive();
        let mut data = mutate(&base, &edits, cut);
        if fix_checksums {
            // Re-seal the mutated headers so the mutation reaches the field parsers.
            for header in [0usize, 1024, 2048, 3584, 4608, 5632] {
                if let Some(block) = data.get_mut(header..header + 512) {
                    recompute_cksum(block);
                }
            }
        }
        fuzz_tar(&data);
    }

    #[test]
    fn mutated_tfrecord_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in any::<usize>(),
    ) {
        let (base, _) = three_records();
        fuzz_tfrecord(&mutate(&base, &edits, cut));
    }

    #[test]
    fn mutated_example_never_panics(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in any::<usize>(),
    ) {
        let base = encode_example(&sample_example());
        fuzz_example(&mutate(&base, &edits, cut));
    }
}
