//! Image benchmarks on one core, each against a baseline measured in the same run:
//! raw libjpeg-turbo full decode (TurboJPEG 3 called directly) is the baseline for
//! 1. our decoder wrapper's full decode (target: within 5%),
//! 2. RandomResizedCrop(224) + flip → u8 CHW through the fused pipeline (target: >= 1.0x on
//!    ImageNet-like files, >= 1.8x on large photographs).
//!
//! `STOKEHOLD_BENCH_IMAGES=DIR` (ImageNet-like JPEGs, searched recursively; default
//! bench-data/inet/train in the workspace, made by `make bench-data`, i.e.
//! scripts/make_imagenet_like.py) and `STOKEHOLD_BENCH_LARGE=DIR` (default bench-data/inet/large).
//! Pin to one core with `taskset -c 0 cargo bench -p stokehold-ops --bench image`.

use std::hint::black_box;
use std::os::raw::c_int;
use std::path::{Path, PathBuf};
use std::time::Instant;

use stokehold_ops::jpeg::{Decoder, Pixels, Scale};
use stokehold_ops::{Geometry, ImageOps, OutSpec, Workspace, run};
use turbojpeg_sys as tj;

fn jpegs(dir: &Path, max: usize, out: &mut Vec<Vec<u8>>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if out.len() >= max {
            return;
        }
        if p.is_dir() {
            jpegs(&p, max, out);
        } else if p
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
        {
            out.push(std::fs::read(&p).unwrap());
        }
    }
}

/// Raw TurboJPEG: header + full RGB decode into a reused buffer.
fn raw_full(files: &[Vec<u8>]) -> f64 {
    // SAFETY: plain TurboJPEG usage: a handle from tj3Init, buffers sized from the header.
    unsafe {
        let h = tj::tj3Init(tj::TJINIT_TJINIT_DECOMPRESS as c_int);
        let mut buf: Vec<u8> = Vec::new();
        let t = Instant::now();
        for f in files {
            assert_eq!(tj::tj3DecompressHeader(h, f.as_ptr(), f.len() as _), 0);
            let w = tj::tj3Get(h, tj::TJPARAM_TJPARAM_JPEGWIDTH as c_int) as usize;
            let ht = tj::tj3Get(h, tj::TJPARAM_TJPARAM_JPEGHEIGHT as c_int) as usize;
            buf.resize(w * ht * 3, 0);
            let r = tj::tj3Decompress8(
                h,
                f.as_ptr(),
                f.len() as _,
                buf.as_mut_ptr(),
                0,
                tj::TJPF_TJPF_RGB as c_int,
            );
            assert_eq!(r, 0);
            black_box(&buf);
        }
        let s = t.elapsed().as_secs_f64();
        tj::tj3Destroy(h);
        s
    }
}

fn ours_full(files: &[Vec<u8>]) -> f64 {
    let mut d = Decoder::new().unwrap();
    let mut px = Pixels {
        width: 0,
        height: 0,
        channels: 3,
        data: Vec::new(),
    };
    let t = Instant::now();
    for f in files {
        d.decode(f, Scale::FULL, None, false, u64::MAX, &mut px)
            .unwrap();
        black_box(&px.data);
    }
    t.elapsed().as_secs_f64()
}

use stokehold_ops::geometry::SeededRandom as Rng;

fn rrc(files: &[Vec<u8>], fused: bool) -> f64 {
    let ops = ImageOps {
        geometry: Geometry::RandomResizedCrop {
            width: 224,
            height: 224,
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        },
        flip_p: 0.5,
        jitter: None,
        gray: false,
        out: OutSpec::default(),
        max_pixels: u64::MAX,
        fused,
    };
    let mut ws = Workspace::new();
    let mut slot = vec![0u8; ops.slot_bytes()];
    let mut rng = Rng(1);
    let t = Instant::now();
    for f in files {
        run(&ops, f, &mut rng, &mut ws, &mut slot).unwrap();
        black_box(&slot);
    }
    t.elapsed().as_secs_f64()
}

fn best_of(n: usize, mut f: impl FnMut() -> f64) -> f64 {
    (0..n).map(|_| f()).fold(f64::INFINITY, f64::min)
}

fn report(name: &str, files: &[Vec<u8>], runs: usize, rrc_target: f64) {
    let n = files.len() as f64;
    let mb: f64 = files.iter().map(|f| f.len() as f64).sum::<f64>() / 1e6;
    // the lossless restart-marker rewrite: the one-pass insertion (what pack uses) against
    // libjpeg-turbo's transcoder, alternating; then both outputs decoded and compared
    let (mut t_fast, mut t_tj) = (f64::INFINITY, f64::INFINITY);
    let (mut marked, mut marked_tj) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let t = Instant::now();
        marked = files
            .iter()
            .map(|f| stokehold_ops::jpeg::with_restarts(f).unwrap_or_else(|_| f.clone()))
            .collect::<Vec<_>>();
        t_fast = t_fast.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        marked_tj = files
            .iter()
            .map(|f| stokehold_ops::jpeg::with_restarts_transcoded(f).unwrap_or_else(|_| f.clone()))
            .collect::<Vec<_>>();
        t_tj = t_tj.min(t.elapsed().as_secs_f64());
    }
    let one_pass = files
        .iter()
        .filter(|f| stokehold_ops::rst_insert::insert_restarts(f).is_some())
        .count();
    let mut d = Decoder::new().unwrap();
    let (mut a, mut b) = (Pixels::default(), Pixels::default());
    let same = files
        .iter()
        .zip(&marked)
        .filter(|(f, m)| {
            d.decode(f, Scale::FULL, None, false, u64::MAX, &mut a)
                .is_ok()
                && d.decode(m, Scale::FULL, None, false, u64::MAX, &mut b)
                    .is_ok()
                && a == b
        })
        .count();
    println!(
        "{name}: restart markers added in {:.0} us/file ({one_pass} of {} in one pass), libjpeg-turbo's transcoder {:.0} us/file: {:.1}x faster; same pixels as the original: {same} of {}",
        1e6 * t_fast / files.len() as f64,
        files.len(),
        1e6 * t_tj / files.len() as f64,
        t_tj / t_fast,
        files.len()
    );
    // interleave the measurements so drift affects all alike
    // `cut_slow`, `full_marked_slow`: the restart-marked files with our libjpeg-turbo patch
    // switched off (upstream's slow Huffman decoder wherever there are restart markers)
    let (mut raw, mut ours, mut fused, mut naive, mut cut, mut cut_tj) = (
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
        f64::INFINITY,
    );
    let (mut cut_slow, mut full_marked, mut full_marked_slow) =
        (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    for _ in 0..runs {
        raw = raw.min(raw_full(files));
        ours = ours.min(ours_full(files));
        fused = fused.min(rrc(files, true));
        naive = naive.min(best_of(1, || rrc(files, false)));
        cut = cut.min(rrc(&marked, true));
        cut_tj = cut_tj.min(rrc(&marked_tj, true));
        full_marked = full_marked.min(raw_full(&marked));
        stokehold_ops::jpeg::set_patched_huffman_decoding(false);
        cut_slow = cut_slow.min(rrc(&marked, true));
        full_marked_slow = full_marked_slow.min(raw_full(&marked));
        stokehold_ops::jpeg::set_patched_huffman_decoding(true);
    }
    println!(
        "{name}: {} JPEGs, {:.1} MB, best of {runs} passes, one thread",
        files.len(),
        mb
    );
    println!(
        "  raw libjpeg-turbo full decode     {:8.0} images/s  (baseline)",
        n / raw
    );
    println!(
        "  our wrapper, full decode          {:8.0} images/s  {:.3}x (target: within 5%)",
        n / ours,
        raw / ours
    );
    println!(
        "  RandomResizedCrop(224)+flip, u8 CHW, fused   {:8.0} images/s  {:.2}x raw full decode (target >= {rrc_target})",
        n / fused,
        raw / fused
    );
    println!(
        "  same, full decode then crop+resize (naive)   {:8.0} images/s  {:.2}x",
        n / naive,
        raw / naive
    );
    let grown = marked.iter().map(|f| f.len() as f64).sum::<f64>() / 1e6 / mb;
    println!(
        "  same, restart-marked (`stokehold pack`'s default, {:+.1}% bytes)   {:8.0} images/s  {:.2}x raw full decode, {:.2}x the fused path",
        100.0 * (grown - 1.0),
        n / cut,
        raw / cut,
        fused / cut
    );
    println!(
        "  same, restart-marked, unpatched libjpeg-turbo (slow Huffman)   {:8.0} images/s  the patch: {:.2}x",
        n / cut_slow,
        cut_slow / cut
    );
    println!(
        "  full decode of the restart-marked files: patched {:8.0} images/s, unpatched {:8.0} images/s  the patch: {:.2}x",
        n / full_marked,
        n / full_marked_slow,
        full_marked_slow / full_marked
    );
    let grown_tj = marked_tj.iter().map(|f| f.len() as f64).sum::<f64>() / 1e6 / mb;
    println!(
        "  same, marked by libjpeg-turbo's transcoder (tables optimised, {:+.1}% bytes)   {:8.0} images/s  {:.2}x the one-pass rewrite's files",
        100.0 * (grown_tj - 1.0),
        n / cut_tj,
        cut / cut_tj
    );
}

/// The directory in `var`, else `default` under the workspace's bench-data/ (`make bench-data`).
fn data_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../bench-data")
            .join(default)
    })
}

fn main() {
    let dir = data_dir("STOKEHOLD_BENCH_IMAGES", "inet/train");
    let large = data_dir("STOKEHOLD_BENCH_LARGE", "inet/large");
    let mut small = Vec::new();
    jpegs(&dir, 1000, &mut small);
    let mut big = Vec::new();
    jpegs(&large, 40, &mut big);
    for (files, dir, var) in [
        (&small, &dir, "STOKEHOLD_BENCH_IMAGES"),
        (&big, &large, "STOKEHOLD_BENCH_LARGE"),
    ] {
        if files.is_empty() {
            println!(
                "no JPEGs in {}: make them with `make bench-data` (or set {var}=DIR)",
                dir.display()
            );
            std::process::exit(1);
        }
    }
    report("ImageNet-like", &small, 5, 1.0);
    report(
        "large photographs, as shipped (mostly progressive)",
        &big,
        2,
        1.8,
    );
    let baseline: Vec<Vec<u8>> = big
        .iter()
        .map(|f| stokehold_ops::jpeg::to_baseline(f).unwrap())
        .collect();
    report(
        "large photographs after the lossless baseline transcode (`stokehold pack --baseline`)",
        &baseline,
        2,
        1.8,
    );
}
