//! Writes the seed corpora for the fuzz targets in `fuzz/`: small valid and malformed tar,
//! TFRecord and tf.train.Example inputs.
//!
//! Run once from the workspace root and commit the files:
//!
//! ```text
//! cargo run -p stokehold-ingest --example make_fuzz_corpus [OUT_DIR]
//! ```
//!
//! `OUT_DIR` defaults to `fuzz/corpus` next to this crate's workspace. Every file is under 8 KiB.

use std::io;
use std::path::{Path, PathBuf};

use stokehold_ingest::example::{Example, Feature, encode_example};
use stokehold_ingest::tfrecord::{masked_crc32c, write_record};

const MAX_FILE: usize = 8 * 1024;

fn header(kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h
}

fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) -> io::Result<()> {
    let mut h = header(tar::EntryType::Regular, data.len() as u64);
    b.append_data(&mut h, name, data)
}

fn two_members() -> io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    file(&mut b, "000001.jpg", b"\xff\xd8\xff\xe0 not really a jpeg")?;
    file(&mut b, "000001.cls", b"7")?;
    b.into_inner()
}

fn tar_corpus() -> io::Result<Vec<(&'static str, Vec<u8>)>> {
    let valid = two_members()?;

    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([
        ("path", "pax/ünïcode/".repeat(12).as_bytes()),
        ("size", b"5".as_slice()),
    ])?;
    let mut h = tar::Header::new_ustar();
    h.set_size(5);
    h.set_path("placeholder")?;
    h.set_cksum();
    b.append(&h, &b"hello"[..])?;
    let pax = b.into_inner()?;

    let mut b = tar::Builder::new(Vec::new());
    file(
        &mut b,
        &format!("{}/sample.txt", "long".repeat(40)),
        b"gnu long name",
    )?;
    let gnu_long = b.into_inner()?;

    let mut b = tar::Builder::new(Vec::new());
    let mut dir = header(tar::EntryType::Directory, 0);
    b.append_data(&mut dir, "shard/", io::empty())?;
    let mut sym = header(tar::EntryType::Symlink, 0);
    b.append_link(&mut sym, "shard/link", "../../etc/passwd")?;
    let mut hard = header(tar::EntryType::Link, 0);
    b.append_link(&mut hard, "shard/hard", "shard/link")?;
    file(&mut b, "shard/a.txt", b"a")?;
    let links = b.into_inner()?;

    let truncated = valid[..valid.len() / 2 + 100].to_vec();

    let mut bad_checksum = valid.clone();
    bad_checksum[0] ^= 0x20;

    let mut hostile_size = valid.clone();
    hostile_size[124..136].copy_from_slice(b"77777777777\0");
    reseal(&mut hostile_size[..512]);

    let mut base256 = valid.clone();
    base256[124..136].copy_from_slice(&[0x80, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0]);
    reseal(&mut base256[..512]);

    let mut bad_pax = pax.clone();
    bad_pax[512] = b'9'; // the first record's length field no longer matches

    Ok(vec![
        ("valid_two_members.tar", valid),
        ("pax_path_and_size.tar", pax),
        ("gnu_long_name.tar", gnu_long),
        ("dir_symlink_hardlink.tar", links),
        ("truncated.tar", truncated),
        ("bad_checksum.tar", bad_checksum),
        ("hostile_octal_size.tar", hostile_size),
        ("hostile_base256_size.tar", base256),
        ("bad_pax_length.tar", bad_pax),
        ("one_zero_block.tar", vec![0; 512]),
        (
            "garbage.tar",
            (0..1024u32).map(|i| (i * 31 % 256) as u8).collect(),
        ),
    ])
}

/// Recomputes a header block's checksum after editing it.
fn reseal(block: &mut [u8]) {
    block[148..156].fill(b' ');
    let sum: u32 = block.iter().map(|&b| u32::from(b)).sum();
    block[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
}

fn tfrecord_corpus() -> io::Result<Vec<(&'static str, Vec<u8>)>> {
    let mut valid = Vec::new();
    for data in [&b""[..], b"hello", &[0x5a; 200]] {
        write_record(&mut valid, data)?;
    }
    let mut bad_len_crc = valid.clone();
    bad_len_crc[16] ^= 1;
    let mut bad_data_crc = valid.clone();
    bad_data_crc[16 + 12] ^= 0xff;
    let truncated = valid[..valid.len() - 7].to_vec();
    let header_only = valid[..6].to_vec();
    let len = 1u64 << 63;
    let mut hostile = len.to_le_bytes().to_vec();
    hostile.extend_from_slice(&masked_crc32c(&len.to_le_bytes()).to_le_bytes());
    hostile.extend_from_slice(b"tiny");
    let gzip = vec![
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x03, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00,
    ];
    let mut examples = Vec::new();
    write_record(&mut examples, &encode_example(&sample_example()))?;
    Ok(vec![
        ("valid_three_records.tfrecord", valid),
        ("bad_length_crc.tfrecord", bad_len_crc),
        ("bad_data_crc.tfrecord", bad_data_crc),
        ("truncated.tfrecord", truncated),
        ("truncated_header.tfrecord", header_only),
        ("hostile_length.tfrecord", hostile),
        ("gzip.tfrecord.gz", gzip),
        ("example_record.tfrecord", examples),
    ])
}

fn sample_example() -> Example {
    Example::from_features([
        ("image/encoded", Feature::bytes([b"\xff\xd8jpeg".to_vec()])),
        ("label", Feature::int64s(vec![3, -1])),
        ("bbox", Feature::floats(vec![0.1, 0.2, 0.9, 0.8])),
    ])
}

fn example_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let valid = encode_example(&sample_example());
    let truncated = valid[..valid.len() - 3].to_vec();
    vec![
        ("valid.pb", valid),
        ("empty.pb", Vec::new()),
        ("truncated.pb", truncated),
        (
            "hostile_length.pb",
            vec![
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00,
            ],
        ),
        ("garbage.pb", b"this is not a protobuf\xff\xff".to_vec()),
    ]
}

fn write_all(dir: &Path, files: Vec<(&str, Vec<u8>)>) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in files {
        assert!(bytes.len() < MAX_FILE, "{name} is {} bytes", bytes.len());
        std::fs::write(dir.join(name), bytes)?;
    }
    Ok(())
}

fn main() -> io::Result<()> {
    let out = std::env::args_os().nth(1).map_or_else(
        || PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus")),
        PathBuf::from,
    );
    write_all(&out.join("tar"), tar_corpus()?)?;
    write_all(&out.join("tfrecord"), tfrecord_corpus()?)?;
    write_all(&out.join("example"), example_corpus())?;
    println!("wrote seed corpora under {}", out.display());
    Ok(())
}
