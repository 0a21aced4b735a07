//! The one-pass restart-marker rewrite alone, over the JPEGs given, for profiling with
//! `valgrind --tool=callgrind` (instruction counts; see docs/pipeline.md):
//!
//!     cargo build --release -p stokehold-ops --example rst_rewrite
//!     valgrind --tool=callgrind target/release/examples/rst_rewrite FILE.jpg ...
//!
//! Prints how many files the rewrite took, their bytes in and out, and an FNV-1a hash of all the
//! outputs (equal hashes: byte-identical outputs, e.g. before and after a change).

fn main() {
    let (mut taken, mut bytes_in, mut bytes_out, mut hash) =
        (0usize, 0usize, 0usize, 0xcbf2_9ce4_8422_2325u64);
    let files: Vec<Vec<u8>> = std::env::args()
        .skip(1)
        .map(|p| std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .collect();
    for data in &files {
        bytes_in += data.len();
        if let Some(out) = stokehold_ops::rst_insert::insert_restarts(data) {
            taken += 1;
            bytes_out += out.len();
            for &b in &out {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    println!(
        "{taken} of {} rewritten, {bytes_in} -> {bytes_out} bytes, hash {hash:016x}",
        files.len()
    );
}
