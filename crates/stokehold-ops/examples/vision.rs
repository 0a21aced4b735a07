//! Qwen2-VL's processor over JPEG files, for profiling (`perf`, callgrind): prints the CPU time
//! per image and a checksum of the values.
//!
//! `cargo run --release -p stokehold-ops --example vision -- [--no-dct] FILES...`

use std::time::Instant;

use stokehold_ops::vision::{Qwen2Vl, VisionWorkspace};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let dct = !args.iter().any(|a| a == "--no-dct");
    args.retain(|a| a != "--no-dct");
    let files: Vec<Vec<u8>> = args.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let q = Qwen2Vl {
        dct_scaling: dct,
        ..Qwen2Vl::default()
    };
    let mut ws = VisionWorkspace::new().unwrap();
    let mut out = Vec::new();
    let mut sum = 0f64;
    let t = Instant::now();
    for f in &files {
        out.clear();
        q.process(&mut ws, f, u64::MAX, &mut out).unwrap();
        sum += out.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    let per = t.elapsed().as_secs_f64() / files.len().max(1) as f64;
    println!(
        "{} images, {:.3} ms each, checksum {sum:.3}",
        files.len(),
        per * 1e3
    );
}
