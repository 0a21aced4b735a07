//! Row A4 of the reliability matrix: hostile lengths, counts and offsets are rejected before any
//! allocation of the size they claim. A counting allocator records the largest single allocation
//! made by this thread while a hostile shard is opened and read.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::fs;
use std::path::Path;

use stokehold_format::{FormatError, Limits, ShardReader, crc};
use stokehold_storage::OpenShard;

struct Counting;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every method forwards to the system allocator unchanged; the only addition is a
// thread-local counter that neither allocates nor touches the returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(layout.size())));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(new_size)));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Run `f` and return the largest single allocation it made on this thread.
fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|l| l.set(0));
    let r = f();
    (r, LARGEST.with(Cell::get))
}

/// Rewrite the trailer of `bytes` with `patch`, recomputing the trailer checksum so that the
/// reader's logic (not the checksum) has to catch the lie.
fn patch_trailer(bytes: &mut [u8], patch: impl FnOnce(&mut [u8])) {
    let n = bytes.len();
    let t = &mut bytes[n - 64..];
    patch(t);
    let c = crc::crc32c(&t[..60]);
    t[60..64].copy_from_slice(&c.to_le_bytes());
}

fn open_bytes(dir: &Path, bytes: &[u8]) -> (Result<ShardReader, FormatError>, usize) {
    let p = dir.join("hostile.skh");
    fs::write(&p, bytes).unwrap();
    largest_allocation(|| {
        let r = ShardReader::open(&p, Limits::default());
        if let Ok(reader) = &r {
            let mut buf = Vec::new();
            for i in 0..reader.len() {
                if reader.read_record(i, &mut buf, true).is_ok() {
                    let _ = reader.decode(i, &buf);
                }
            }
        }
        r
    })
}

const CAP: usize = 64 << 10;

#[test]
fn hostile_lengths_never_size_an_allocation() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = common::write_dataset(tmp.path(), "ds", 10, 1 << 30, 1);
    let good = fs::read(dest.join("shard-000000.skh")).unwrap();
    assert!(good.len() < CAP);

    let put = |t: &mut [u8], at: usize, v: u64| t[at..at + 8].copy_from_slice(&v.to_le_bytes());
    type Patch = Box<dyn Fn(&mut [u8])>;
    let cases: Vec<(&str, Patch)> = vec![
        ("record count 2^40", Box::new(move |t| put(t, 24, 1 << 40))),
        ("record count 2^63", Box::new(move |t| put(t, 24, 1 << 63))),
        ("meta length 2^62", Box::new(move |t| put(t, 8, 1 << 62))),
        (
            "meta offset past the end",
            Box::new(move |t| put(t, 0, u64::MAX - 4)),
        ),
        ("index offset 0", Box::new(move |t| put(t, 16, 0))),
        ("everything zero", Box::new(move |t| t[..32].fill(0))),
    ];
    for (name, patch) in &cases {
        let mut bad = good.clone();
        patch_trailer(&mut bad, patch);
        let (r, largest) = open_bytes(tmp.path(), &bad);
        let err = r.expect_err(name);
        assert!(err.to_string().contains("hostile.skh"), "{name}: {err}");
        assert!(largest < CAP, "{name}: allocated {largest} bytes");
    }

    // An index entry claiming a 4 GiB record (index checksum recomputed so that the entry is
    // trusted as far as checksums go).
    let reader = ShardReader::open(dest.join("shard-000000.skh"), Limits::default()).unwrap();
    let (meta_end, index_at) = (
        reader.data_end(),
        good.len() - 64 - 16 * reader.len() as usize,
    );
    assert!(meta_end > 0);
    let mut bad = good.clone();
    bad[index_at + 8..index_at + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let c = crc::crc32c(&bad[index_at..good.len() - 64]);
    patch_trailer(&mut bad, |t| t[36..40].copy_from_slice(&c.to_le_bytes()));
    let (r, largest) = open_bytes(tmp.path(), &bad);
    let err = r.expect_err("4 GiB record");
    assert!(err.to_string().contains("index entry 0"), "{err}");
    assert!(largest < CAP, "allocated {largest} bytes");
}

#[test]
fn a_zstd_field_claiming_a_huge_size_is_refused_before_allocating() {
    use stokehold_format::{FieldValue, RecordEncoder, Schema, ShardWriter, WriteOptions};
    let schema = Schema::from_specs([("t", "string+zstd")]).unwrap();
    let mut rec = Vec::new();
    RecordEncoder::new(3)
        .encode(
            &schema,
            &[FieldValue::String("x".repeat(100).into())],
            &mut rec,
        )
        .unwrap();
    // The zstd frame starts after the 4-byte field table; its header stores the content size.
    // Rewrite the frame header to claim 2^40 bytes (single-segment flag with an 8-byte size).
    let frame = &mut rec[4..];
    assert_eq!(&frame[..4], &[0x28, 0xB5, 0x2F, 0xFD]);
    let mut hostile = frame[..4].to_vec();
    hostile.push(0b1110_0000); // FCS 8 bytes, single segment
    hostile.extend_from_slice(&(1u64 << 40).to_le_bytes());
    hostile.extend_from_slice(&[1, 0, 0]); // an empty last raw block
    let mut record = Vec::new();
    record.extend_from_slice(&(hostile.len() as u32).to_le_bytes());
    record.extend_from_slice(&hostile);
    let mut shard = Vec::new();
    let mut w = ShardWriter::new(&mut shard, schema, WriteOptions::default()).unwrap();
    w.write_encoded(&record).unwrap();
    w.finish().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("z.skh");
    fs::write(&p, &shard).unwrap();
    let reader = ShardReader::open(&p, Limits::default()).unwrap();
    let (r, largest) = largest_allocation(|| {
        let mut buf = Vec::new();
        reader.read_record(0, &mut buf, true).unwrap();
        reader.decode(0, &buf).map(|_| ())
    });
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("over the limit") && err.contains("z.skh") && err.contains("record 0"),
        "{err}"
    );
    assert!(largest < CAP, "allocated {largest} bytes");
}
