//! Vision-language image processors: an image becomes the rows of patches a vision encoder takes
//! (issue #53). [`Qwen2Vl`] is Qwen2-VL's processor (the same parameters serve Qwen2.5-VL and
//! Qwen3-VL): the "smart resize" to a multiple of `patch_size * merge_size` within a pixel
//! budget, a bicubic resize, rescale and normalise, then the patches in the model's order:
//! `pixel_values` rows of `3 * temporal_patch_size * patch_size²` floats, one per patch, and the
//! image's grid `(t, h, w)` in patches. [`FixedSize`] is the fixed-size processor of
//! SigLIP/CLIP/LLaVA-style encoders (resize, optional pad to square, normalise).
//!
//! The reference is `transformers`' processors. The resize is Pillow's bicubic resampling as its
//! C code reads (its filter, its window arithmetic, its 22-bit fixed-point weights, horizontal
//! then vertical passes with 8-bit intermediates; here each channel resized as its own plane, the
//! layout the patches are read from), and the decode is libjpeg-turbo's (as
//! Pillow's): a JPEG decoded at full size gives the `Qwen2VLImageProcessorPil` values bit for
//! bit at most sizes (253 of 323 size pairs tried with Pillow 13; at the others a pixel differs
//! by at most 6 of 255, no more than the PIL and torchvision processors differ from each other,
//! which the tests bound). Where the target is at most a quarter of the image, the JPEG is
//! decoded at a DCT scale of 1/2, 1/4 or 1/8 first (still at least twice the target) (what makes large photographs cheap); that changes values
//! by what a different reduction filter does, also bounded by the tests. The grid depends only
//! on the image's size, so a packer plans image tokens from stored sizes without decoding ([`Qwen2Vl::grid`]).

use crate::decode::{Format, sniff};
use crate::error::{OpsError, Result};
use crate::jpeg::{Decoder, Pixels, PixelsRef, Scale};

/// OpenAI CLIP's mean, the default of Qwen2-VL's processor.
pub const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
/// OpenAI CLIP's standard deviation.
pub const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

/// Fixed-point precision of Pillow's 8-bit resampling weights (`PRECISION_BITS`).
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Pillow's bicubic filter (`a = -0.5`, support 2).
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// One axis of Pillow's resampling: output `i` reads `len[i]` samples from `start[i]`, with
/// the fixed-point weights `k[i * ksize..][..len[i]]`.
#[derive(Debug, Default)]
struct Coeffs {
    start: Vec<usize>,
    len: Vec<usize>,
    k: Vec<i32>,
    ksize: usize,
    scratch: Vec<f64>,
    /// Every window is `ksize` wide (`len[i] == ksize`).
    padded: bool,
}

impl Coeffs {
    /// Pillow's `precompute_coeffs` and `normalize_coeffs_8bpc` for `in_size` samples onto
    /// `out_size`, over the whole axis.
    fn compute(&mut self, in_size: usize, out_size: usize) {
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = 2.0 * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        self.ksize = ksize;
        self.start.clear();
        self.len.clear();
        self.k.clear();
        self.k.resize(out_size * ksize, 0);
        self.scratch.resize(ksize, 0.0);
        let ss = 1.0 / filterscale;
        for xx in 0..out_size {
            let center = (xx as f64 + 0.5) * scale;
            // C's (int) truncates toward zero, as `as i64` does
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let n = xmax.saturating_sub(xmin).min(ksize);
            let mut ww = 0.0;
            for x in 0..n {
                let w = bicubic((x as f64 + xmin as f64 - center + 0.5) * ss);
                self.scratch[x] = w;
                ww += w;
            }
            let row = &mut self.k[xx * ksize..xx * ksize + n];
            for (x, q) in row.iter_mut().enumerate() {
                let mut w = self.scratch[x];
                if ww != 0.0 {
                    w /= ww;
                }
                let f = w * f64::from(1u32 << PRECISION_BITS);
                *q = if w < 0.0 {
                    (-0.5 + f) as i32
                } else {
                    (0.5 + f) as i32
                };
            }
            self.start.push(xmin);
            self.len.push(n);
        }
        // the same windows, `ksize` wide where the axis allows (moved left at the far edge, the
        // weights shifted with them and zero around): the same products, a fixed-length loop
        self.padded = ksize <= in_size;
        if self.padded {
            for xx in 0..out_size {
                let (s, n) = (self.start[xx], self.len[xx]);
                let fixed = s.min(in_size - ksize);
                let shift = s - fixed;
                if shift > 0 {
                    let row = &mut self.k[xx * ksize..(xx + 1) * ksize];
                    row.copy_within(0..n, shift);
                    row[..shift].fill(0);
                }
                self.start[xx] = fixed;
                self.len[xx] = ksize;
            }
        }
    }
}

/// Pillow's `clip8`: a fixed-point sum back to a byte.
#[inline]
fn clip8(v: i32) -> u8 {
    if v >= (1 << PRECISION_BITS << 8) {
        255
    } else if v <= 0 {
        0
    } else {
        (v >> PRECISION_BITS) as u8
    }
}

/// Pillow's bicubic resize (`Image.resize(size, Image.BICUBIC)`), bit for bit, with its scratch
/// buffers; one per thread.
#[derive(Debug, Default)]
pub struct Bicubic {
    x: Coeffs,
    y: Coeffs,
    mid: Vec<u8>,
    /// The horizontal pass's rows transposed (columns as rows), and its output so.
    cols: Vec<u8>,
    cols_out: Vec<u8>,
    /// [`Bicubic::resize_planes`]' source channels, one plane each.
    split: [Vec<u8>; 3],
}

impl Bicubic {
    /// A resampler.
    pub fn new() -> Bicubic {
        Bicubic::default()
    }

    /// `src` (packed, 1 or 3 channels) resized to `out_w`×`out_h` into `dst` (packed, resized to
    /// fit). The same size copies.
    pub fn resize(
        &mut self,
        src: PixelsRef<'_>,
        out_w: u32,
        out_h: u32,
        dst: &mut Vec<u8>,
    ) -> Result<()> {
        let c = usize::from(src.channels);
        let (sw, sh) = (src.width as usize, src.height as usize);
        let (ow, oh) = (out_w as usize, out_h as usize);
        if !(c == 1 || c == 3) || sw == 0 || sh == 0 || src.data.len() != sw * sh * c {
            return Err(OpsError::Invalid(format!(
                "source image: {sw}x{sh}x{c} with {} bytes",
                src.data.len()
            )));
        }
        if ow == 0 || oh == 0 {
            return Err(OpsError::Invalid(format!("output size {ow}x{oh}")));
        }
        // every byte is written below: a buffer of the right size is reused as it is
        dst.resize(ow * oh * c, 0);
        if (sw, sh) == (ow, oh) {
            dst.copy_from_slice(src.data);
            return Ok(());
        }
        self.x.compute(sw, ow);
        self.y.compute(sh, oh);
        self.run(src, ow, oh, dst);
        Ok(())
    }

    /// Packed RGB `src` resized to `out_w`×`out_h` as [`Bicubic::resize`] does (the same bytes),
    /// into three planes (R, G, B; `out_w * out_h` bytes each, resized to fit): the channels
    /// are split first and each resized as a one-channel image, whose passes move bytes, not
    /// 3-byte pixels (what a planar consumer such as a patchify wants anyway).
    pub fn resize_planes(
        &mut self,
        src: PixelsRef<'_>,
        out_w: u32,
        out_h: u32,
        planes: &mut [Vec<u8>; 3],
    ) -> Result<()> {
        let (sw, sh) = (src.width as usize, src.height as usize);
        let (ow, oh) = (out_w as usize, out_h as usize);
        if src.channels != 3 || sw == 0 || sh == 0 || src.data.len() != sw * sh * 3 {
            return Err(OpsError::Invalid(format!(
                "source image for planes: {sw}x{sh}x{} with {} bytes",
                src.channels,
                src.data.len()
            )));
        }
        if ow == 0 || oh == 0 {
            return Err(OpsError::Invalid(format!("output size {ow}x{oh}")));
        }
        let mut split = std::mem::take(&mut self.split);
        let [r, g, b] = &mut split;
        let (r, g, b) = (
            scratch(r, sw * sh),
            scratch(g, sw * sh),
            scratch(b, sw * sh),
        );
        deinterleave(src.data, r, g, b);
        let same = (sw, sh) == (ow, oh);
        if !same {
            self.x.compute(sw, ow);
            self.y.compute(sh, oh);
        }
        for (plane, out) in split.iter().zip(planes.iter_mut()) {
            let plane = &plane[..sw * sh];
            out.resize(ow * oh, 0);
            if same {
                out.copy_from_slice(plane);
                continue;
            }
            let view = PixelsRef {
                width: src.width,
                height: src.height,
                channels: 1,
                data: plane,
            };
            self.run(view, ow, oh, out);
        }
        self.split = split;
        Ok(())
    }

    /// The two passes of a validated resize whose coefficients are computed (`dst` of the
    /// output's size).
    fn run(&mut self, src: PixelsRef<'_>, ow: usize, oh: usize, dst: &mut [u8]) {
        let c = usize::from(src.channels);
        let (sw, sh) = (src.width as usize, src.height as usize);
        let need_h = ow != sw;
        let need_v = oh != sh;
        // the source rows the vertical pass reads
        let first = self.y.start[0];
        let last = self.y.start[oh - 1] + self.y.len[oh - 1];
        let (rows, rows_from, row_w): (&[u8], usize, usize) = if need_h {
            let (lo, hi) = if need_v { (first, last) } else { (0, sh) };
            let n = hi - lo;
            let mid = scratch(&mut self.mid, n * ow * c);
            if n >= 8 {
                // the horizontal pass as a vertical one over the transposed rows (the same
                // sums, in the loop that vectorises), then transposed back
                // (every byte is written below: scratch reused as it is, never zeroed again)
                let cols = scratch(&mut self.cols, sw * n * c);
                transpose(&src.data[lo * sw * c..hi * sw * c], n, sw, c, cols);
                let cols_out = scratch(&mut self.cols_out, ow * n * c);
                vertical(cols, n * c, 0, &self.x, ow, cols_out);
                transpose(cols_out, ow, n, c, mid);
            } else {
                horizontal(src.data, sw * c, lo..hi, &self.x, c, ow, mid);
            }
            (&self.mid[..n * ow * c], lo, ow)
        } else {
            (src.data, 0, sw)
        };
        if need_v {
            vertical(rows, row_w * c, rows_from, &self.y, oh, dst);
        } else {
            dst.copy_from_slice(&rows[..oh * row_w * c]);
        }
    }
}

/// The first `n` elements of scratch buffer `v`, which is grown to hold them and never cut: a
/// buffer reused for images of varying sizes is not zeroed again each time it grows back (the
/// callers write every element they read).
fn scratch<T: Copy + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    if v.len() < n {
        v.resize(n, T::default());
    }
    &mut v[..n]
}

/// `src`, `rows` rows of `cols` pixels of `c` bytes, transposed into `out` (`cols` rows of
/// `rows` pixels), in tiles that stay in cache.
fn transpose(src: &[u8], rows: usize, cols: usize, c: usize, out: &mut [u8]) {
    match c {
        3 => transpose_px::<3>(src, rows, cols, out),
        1 => transpose_bytes(src, rows, cols, out),
        _ => transpose_px_any(src, rows, cols, c, out),
    }
}

/// [`transpose`] of one-byte pixels: blocks of 8×8 bytes (with SSE2's byte, word and dword
/// interleaves where the target has them, else eight `u64`s and three rounds of masked swaps),
/// the edges that make no whole block byte by byte.
fn transpose_bytes(src: &[u8], rows: usize, cols: usize, out: &mut [u8]) {
    assert!(src.len() >= rows * cols && out.len() >= rows * cols);
    let (r8, c8) = (rows / 8 * 8, cols / 8 * 8);
    // tiles of TILE × TILE bytes, each its 8×8 blocks: a tile writes whole cache lines of
    // TILE bytes to TILE output rows (a band of 8 rows across a wide image would write 8 bytes
    // to each of thousands of output rows, pages apart, before coming back to them)
    const TILE: usize = 64;
    for t0 in (0..r8).step_by(TILE) {
        let t1 = (t0 + TILE).min(r8);
        for u0 in (0..c8).step_by(TILE) {
            let u1 = (u0 + TILE).min(c8);
            for r0 in (t0..t1).step_by(8) {
                for c0 in (u0..u1).step_by(8) {
                    block8(src, r0 * cols + c0, cols, out, c0 * rows + r0, rows);
                }
            }
        }
    }
    for r0 in (0..r8).step_by(8) {
        for c in c8..cols {
            for r in r0..r0 + 8 {
                out[c * rows + r] = src[r * cols + c];
            }
        }
    }
    for r in r8..rows {
        for c in 0..cols {
            out[c * rows + r] = src[r * cols + c];
        }
    }
}

/// The 8×8 bytes of `src` from `at` (rows `stride` apart) transposed into `out` from `to`
/// (rows `out_stride` apart).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn block8(src: &[u8], at: usize, stride: usize, out: &mut [u8], to: usize, out_stride: usize) {
    use std::arch::x86_64::*;
    assert!(at + 7 * stride + 8 <= src.len() && to + 7 * out_stride + 8 <= out.len());
    // SAFETY: SSE2 is part of every x86_64 target; the eight 8-byte loads lie in `src` and the
    // eight 8-byte stores in `out` (both checked just above); unaligned loads and stores.
    unsafe {
        let p = src.as_ptr().add(at);
        let row = |i: usize| _mm_loadl_epi64(p.add(i * stride) as *const __m128i);
        let b0 = _mm_unpacklo_epi8(row(0), row(1));
        let b1 = _mm_unpacklo_epi8(row(2), row(3));
        let b2 = _mm_unpacklo_epi8(row(4), row(5));
        let b3 = _mm_unpacklo_epi8(row(6), row(7));
        let c0 = _mm_unpacklo_epi16(b0, b1);
        let c1 = _mm_unpackhi_epi16(b0, b1);
        let c2 = _mm_unpacklo_epi16(b2, b3);
        let c3 = _mm_unpackhi_epi16(b2, b3);
        // each holds two output rows (columns of the source), 8 bytes each
        let d = [
            _mm_unpacklo_epi32(c0, c2),
            _mm_unpackhi_epi32(c0, c2),
            _mm_unpacklo_epi32(c1, c3),
            _mm_unpackhi_epi32(c1, c3),
        ];
        let q = out.as_mut_ptr().add(to);
        for (k, v) in d.into_iter().enumerate() {
            _mm_storel_epi64(q.add(2 * k * out_stride) as *mut __m128i, v);
            _mm_storel_epi64(
                q.add((2 * k + 1) * out_stride) as *mut __m128i,
                _mm_unpackhi_epi64(v, v),
            );
        }
    }
}

/// [`block8`] without SSE2: eight `u64`s, three rounds of masked swaps (1-, 2-, then 4-byte
/// elements between rows 1, 2, then 4 apart).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn block8(src: &[u8], at: usize, stride: usize, out: &mut [u8], to: usize, out_stride: usize) {
    let round = |a: &mut [u64; 8], d: usize, shift: u32, mask: u64| {
        for i in (0..8).filter(|i| i & d == 0) {
            let t = ((a[i] >> shift) ^ a[i + d]) & mask;
            a[i + d] ^= t;
            a[i] ^= t << shift;
        }
    };
    let mut a = [0u64; 8];
    for (i, v) in a.iter_mut().enumerate() {
        let from = at + i * stride;
        *v = u64::from_le_bytes(src[from..from + 8].try_into().expect("8 bytes"));
    }
    round(&mut a, 1, 8, 0x00ff_00ff_00ff_00ff);
    round(&mut a, 2, 16, 0x0000_ffff_0000_ffff);
    round(&mut a, 4, 32, 0x0000_0000_ffff_ffff);
    for (j, v) in a.iter().enumerate() {
        let from = to + j * out_stride;
        out[from..from + 8].copy_from_slice(&v.to_le_bytes());
    }
}

/// Packed RGB `src` split into the planes `r`, `g`, `b` (each as long as the pixels). The loop
/// is compiled twice, once for AVX2 (whose byte shuffles it vectorises into), chosen at run
/// time; both copy the same bytes.
fn deinterleave(src: &[u8], r: &mut [u8], g: &mut [u8], b: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected at run time just above.
        unsafe { deinterleave_avx2(src, r, g, b) };
        return;
    }
    deinterleave_body(src, r, g, b);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn deinterleave_avx2(src: &[u8], r: &mut [u8], g: &mut [u8], b: &mut [u8]) {
    deinterleave_body(src, r, g, b);
}

#[inline(always)]
fn deinterleave_body(src: &[u8], r: &mut [u8], g: &mut [u8], b: &mut [u8]) {
    const N: usize = 32;
    let n = src.len() / 3;
    let whole = n / N * N;
    let chunks = src[..whole * 3]
        .chunks_exact(3 * N)
        .zip(r.chunks_exact_mut(N))
        .zip(g.chunks_exact_mut(N))
        .zip(b.chunks_exact_mut(N));
    for (((px, r), g), b) in chunks {
        let px: &[u8; 3 * N] = px.try_into().expect("3N bytes");
        let (r, g, b): (&mut [u8; N], &mut [u8; N], &mut [u8; N]) = (
            r.try_into().expect("N bytes"),
            g.try_into().expect("N bytes"),
            b.try_into().expect("N bytes"),
        );
        for i in 0..N {
            r[i] = px[3 * i];
            g[i] = px[3 * i + 1];
            b[i] = px[3 * i + 2];
        }
    }
    for i in whole..n {
        (r[i], g[i], b[i]) = (src[3 * i], src[3 * i + 1], src[3 * i + 2]);
    }
}

/// [`transpose`] of pixels of `C` bytes (copied as arrays: no call per pixel).
fn transpose_px<const C: usize>(src: &[u8], rows: usize, cols: usize, out: &mut [u8]) {
    const T: usize = 32;
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                let n = T.min(cols - c0);
                let from = &src[(r * cols + c0) * C..(r * cols + c0 + n) * C];
                for (j, px) in from.chunks_exact(C).enumerate() {
                    let px: [u8; C] = px.try_into().expect("C bytes");
                    let at = ((c0 + j) * rows + r) * C;
                    let to: &mut [u8; C] = (&mut out[at..at + C]).try_into().expect("C bytes");
                    *to = px;
                }
            }
        }
    }
}

fn transpose_px_any(src: &[u8], rows: usize, cols: usize, c: usize, out: &mut [u8]) {
    const T: usize = 32;
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                let from = &src[(r * cols + c0) * c..];
                for (j, px) in from.chunks_exact(c).take(T.min(cols - c0)).enumerate() {
                    let at = ((c0 + j) * rows + r) * c;
                    out[at..at + c].copy_from_slice(px);
                }
            }
        }
    }
}

/// Pillow's `ImagingResampleHorizontal_8bpc` over source rows `rows` of `src` (`stride` bytes a
/// row), into `out` (rows of `ow * c` bytes).
fn horizontal(
    src: &[u8],
    stride: usize,
    rows: std::ops::Range<usize>,
    x: &Coeffs,
    c: usize,
    ow: usize,
    out: &mut [u8],
) {
    let half = 1i32 << (PRECISION_BITS - 1);
    for (r, line) in rows.zip(out.chunks_exact_mut(ow * c)) {
        let row = &src[r * stride..(r + 1) * stride];
        if c == 3 && x.padded {
            let ks = x.ksize;
            for (xx, o) in line.chunks_exact_mut(3).enumerate() {
                let s = x.start[xx];
                let k = &x.k[xx * ks..(xx + 1) * ks];
                let px = &row[s * 3..(s + ks) * 3];
                let (mut s0, mut s1, mut s2) = (half, half, half);
                for (p, &w) in px.chunks_exact(3).zip(k) {
                    s0 += i32::from(p[0]) * w;
                    s1 += i32::from(p[1]) * w;
                    s2 += i32::from(p[2]) * w;
                }
                o.copy_from_slice(&[clip8(s0), clip8(s1), clip8(s2)]);
            }
            continue;
        }
        for xx in 0..ow {
            let (s, n) = (x.start[xx], x.len[xx]);
            let k = &x.k[xx * x.ksize..xx * x.ksize + n];
            let px = &row[s * c..(s + n) * c];
            for ch in 0..c {
                let mut ss = half;
                for (j, &w) in k.iter().enumerate() {
                    ss += i32::from(px[j * c + ch]) * w;
                }
                line[xx * c + ch] = clip8(ss);
            }
        }
    }
}

/// Pillow's `ImagingResampleVertical_8bpc`: `rows` holds source rows from `rows_from` on
/// (`stride` bytes each); output rows `0..oh` into `out`. The loop is compiled twice, once for
/// AVX2 (eight 32-bit lanes), chosen at run time; both compute the same integers.
fn vertical(rows: &[u8], stride: usize, rows_from: usize, y: &Coeffs, oh: usize, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected at run time just above.
        unsafe { vertical_avx2(rows, stride, rows_from, y, oh, out) };
        return;
    }
    vertical_body(rows, stride, rows_from, y, oh, out);
}

/// [`vertical_body`]'s sums with AVX2, 16 bytes of a row at a time kept in registers over all
/// the taps. A 22-bit weight `w` is split as `wh · 2^15 + wl` (`wl` in `0..2^15`, both fit
/// 16 bits), so two taps of 16 pixels are four `vpmaddwd`s; `Σ p·wl` stays in `i32` for up to
/// 257 taps (wider windows take the plain loop) and `(Σ p·wh) · 2^15 + Σ p·wl` is the exact sum
/// (wrapping arithmetic, and the true sum fits `i32`), so the bytes are [`vertical_body`]'s.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn vertical_avx2(
    rows: &[u8],
    stride: usize,
    rows_from: usize,
    y: &Coeffs,
    oh: usize,
    out: &mut [u8],
) {
    use std::arch::x86_64::*;

    if y.ksize > 256 || stride < 16 {
        vertical_body(rows, stride, rows_from, y, oh, out);
        return;
    }
    let half = _mm256_set1_epi32(1i32 << (PRECISION_BITS - 1));
    let chunks = stride / 16;
    // the weights of a row as (wl, wh) pairs of taps, each broadcast over the lanes
    let mut pairs: Vec<(__m256i, __m256i)> = Vec::with_capacity(y.ksize.div_ceil(2));
    for (yy, line) in out.chunks_exact_mut(stride).enumerate().take(oh) {
        let (s, n) = (y.start[yy] - rows_from, y.len[yy]);
        let k = &y.k[yy * y.ksize..yy * y.ksize + n];
        // every source row this output row reads lies in `rows`
        assert!((s + n) * stride <= rows.len(), "rows cover the window");
        pairs.clear();
        for t in k.chunks(2) {
            let (a, b) = (t[0], t.get(1).copied().unwrap_or(0));
            let lo = |w: i32| (w & 0x7FFF) as i16;
            let hi = |w: i32| (w >> 15) as i16;
            pairs.push((
                _mm256_set1_epi32(i32::from(lo(a)) as u16 as i32 | i32::from(lo(b)) << 16),
                _mm256_set1_epi32(i32::from(hi(a)) as u16 as i32 | i32::from(hi(b)) << 16),
            ));
        }
        for ch in 0..chunks {
            let x = ch * 16;
            let (mut lo0, mut lo1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            let (mut hi0, mut hi1) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for (i, &(wl, wh)) in pairs.iter().enumerate() {
                let j = 2 * i;
                // the second row of an odd last pair is the first again, with weight 0
                let j1 = if j + 1 < n { j + 1 } else { j };
                // SAFETY: rows `s + j` and `s + j1` are inside `rows` (asserted above), and
                // `x + 16 <= stride`: each load reads 16 bytes of one row.
                let (a, b) = unsafe {
                    (
                        _mm_loadu_si128(rows.as_ptr().add((s + j) * stride + x).cast()),
                        _mm_loadu_si128(rows.as_ptr().add((s + j1) * stride + x).cast()),
                    )
                };
                let p0 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b));
                let p1 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(a, b));
                lo0 = _mm256_add_epi32(lo0, _mm256_madd_epi16(p0, wl));
                lo1 = _mm256_add_epi32(lo1, _mm256_madd_epi16(p1, wl));
                hi0 = _mm256_add_epi32(hi0, _mm256_madd_epi16(p0, wh));
                hi1 = _mm256_add_epi32(hi1, _mm256_madd_epi16(p1, wh));
            }
            let t0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi0, 15), lo0), half);
            let t1 = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi1, 15), lo1), half);
            // clip8: the sum >> 22, saturated to 0..=255 (as clip8's two bounds)
            let s16 = _mm256_packs_epi32(
                _mm256_srai_epi32(t0, PRECISION_BITS as i32),
                _mm256_srai_epi32(t1, PRECISION_BITS as i32),
            );
            let s16 = _mm256_permute4x64_epi64(s16, 0b11_01_10_00);
            let bytes = _mm_packus_epi16(
                _mm256_castsi256_si128(s16),
                _mm256_extracti128_si256(s16, 1),
            );
            // SAFETY: `x + 16 <= stride == line.len()`.
            unsafe { _mm_storeu_si128(line.as_mut_ptr().add(x).cast(), bytes) };
        }
        // the last bytes of the row, as the plain loop does
        let half = 1i32 << (PRECISION_BITS - 1);
        for x in chunks * 16..stride {
            let mut ss = half;
            for (j, &w) in k.iter().enumerate() {
                ss += i32::from(rows[(s + j) * stride + x]) * w;
            }
            line[x] = clip8(ss);
        }
    }
}

#[inline(always)]
fn vertical_body(
    rows: &[u8],
    stride: usize,
    rows_from: usize,
    y: &Coeffs,
    oh: usize,
    out: &mut [u8],
) {
    let half = 1i32 << (PRECISION_BITS - 1);
    let mut acc = vec![0i32; stride];
    for (yy, line) in out.chunks_exact_mut(stride).enumerate().take(oh) {
        let (s, n) = (y.start[yy] - rows_from, y.len[yy]);
        let k = &y.k[yy * y.ksize..yy * y.ksize + n];
        acc.fill(half);
        for (j, &w) in k.iter().enumerate() {
            let src = &rows[(s + j) * stride..(s + j + 1) * stride];
            for (a, &p) in acc.iter_mut().zip(src) {
                *a += i32::from(p) * w;
            }
        }
        for (o, &a) in line.iter_mut().zip(&acc) {
            *o = clip8(a);
        }
    }
}

/// Python's `round` (half to even) of a non-negative quotient, as `smart_resize` computes it.
fn py_round(x: f64) -> f64 {
    x.round_ties_even()
}

/// Qwen2-VL's `smart_resize`: the size, multiples of `factor`, closest to `height`×`width` in
/// aspect with at least `min_pixels` and at most `max_pixels` pixels, computed in the same
/// floating point as `transformers` (so the grid is exactly theirs). An aspect ratio over 200 is
/// refused, as there.
pub fn smart_resize(
    height: u32,
    width: u32,
    factor: u32,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(u32, u32)> {
    if height == 0 || width == 0 || factor == 0 {
        return Err(OpsError::Invalid(format!(
            "smart_resize of {width}x{height} to multiples of {factor}"
        )));
    }
    let (h, w, f) = (f64::from(height), f64::from(width), f64::from(factor));
    if h.max(w) / h.min(w) > 200.0 {
        return Err(OpsError::Invalid(format!(
            "{width}x{height}: absolute aspect ratio must be smaller than 200, got {}",
            h.max(w) / h.min(w)
        )));
    }
    let mut h_bar = py_round(h / f) * f;
    let mut w_bar = py_round(w / f) * f;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = ((h * w) / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    if !(1.0..=f64::from(u32::MAX)).contains(&h_bar)
        || !(1.0..=f64::from(u32::MAX)).contains(&w_bar)
    {
        return Err(OpsError::Invalid(format!(
            "smart_resize of {width}x{height} gave {w_bar}x{h_bar}"
        )));
    }
    Ok((h_bar as u32, w_bar as u32))
}

/// Qwen2-VL's image processor (Qwen2.5-VL's and Qwen3-VL's too), as parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen2Vl {
    /// Fewest pixels after the resize (`size["shortest_edge"]`, `min_pixels`).
    pub min_pixels: u64,
    /// Most pixels after the resize (`size["longest_edge"]`, `max_pixels`).
    pub max_pixels: u64,
    /// A patch's side in pixels.
    pub patch_size: u32,
    /// Patches merged into one token per side (`merge_size²` patches a token).
    pub merge_size: u32,
    /// Frames a patch spans (an image is repeated to fill them).
    pub temporal_patch_size: u32,
    /// Per-channel mean subtracted after rescaling to [0, 1].
    pub mean: [f32; 3],
    /// Per-channel standard deviation divided by.
    pub std: [f32; 3],
    /// Decode JPEGs at a DCT scale (1/2, 1/4, 1/8) where the target is at most that fraction
    /// of the image: much cheaper on photographs, values within the bound the tests state.
    pub dct_scaling: bool,
}

impl Default for Qwen2Vl {
    fn default() -> Qwen2Vl {
        Qwen2Vl {
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            patch_size: 14,
            merge_size: 2,
            temporal_patch_size: 2,
            mean: CLIP_MEAN,
            std: CLIP_STD,
            dct_scaling: true,
        }
    }
}

/// A thread's decoder and buffers for the processors.
#[derive(Debug)]
pub struct VisionWorkspace {
    decoder: Decoder,
    decoded: Pixels,
    /// The resized image's channels (R, G, B).
    planes: [Vec<u8>; 3],
    bicubic: Bicubic,
}

impl VisionWorkspace {
    /// A workspace (one per thread).
    pub fn new() -> Result<VisionWorkspace> {
        Ok(VisionWorkspace {
            decoder: Decoder::new()?,
            decoded: Pixels {
                width: 0,
                height: 0,
                channels: 3,
                data: Vec::new(),
            },
            planes: Default::default(),
            bicubic: Bicubic::new(),
        })
    }

    /// The width and height an encoded image declares (a JPEG's through this thread's decoder).
    pub fn dimensions(&mut self, data: &[u8]) -> Result<(u32, u32)> {
        if sniff(data)? == Format::Jpeg {
            let hdr = self.decoder.header(data)?;
            Ok((hdr.width, hdr.height))
        } else {
            crate::decode::dimensions(data)
        }
    }

    /// `data` decoded as RGB, at a DCT scale when `target` (width, height) is at most a quarter
    /// of it in both axes and `dct_scaling` (the decoded image at least twice the target); then
    /// resized to `target` with Pillow's bicubic, into `self.planes` (R, G, B).
    fn decode_resized(
        &mut self,
        data: &[u8],
        target: (u32, u32),
        dct_scaling: bool,
        max_pixels: u64,
    ) -> Result<()> {
        self.decode(data, Some(target), dct_scaling, max_pixels)?;
        self.bicubic
            .resize_planes(self.decoded.view(), target.0, target.1, &mut self.planes)
    }

    /// `data` decoded as RGB into `self.decoded`, at the DCT scale [`Self::decode_resized`]
    /// says for `target`.
    fn decode(
        &mut self,
        data: &[u8],
        target: Option<(u32, u32)>,
        dct_scaling: bool,
        max_pixels: u64,
    ) -> Result<()> {
        let fmt = sniff(data)?;
        if fmt == Format::Jpeg {
            let hdr = self.decoder.header(data)?;
            let scale = match target {
                // at least twice the target, so that the bicubic's own reduction (its
                // antialiasing) still does half the work: values stay close to a full decode's
                Some((tw, th)) if dct_scaling => Scale::smallest_covering(
                    f64::from(hdr.width),
                    f64::from(hdr.height),
                    tw.saturating_mul(2),
                    th.saturating_mul(2),
                ),
                _ => Scale::FULL,
            };
            self.decoder
                .decode(data, scale, None, false, max_pixels, &mut self.decoded)?;
        } else {
            crate::decode::decode_full(
                &mut self.decoder,
                data,
                false,
                max_pixels,
                &mut self.decoded,
            )?;
        }
        Ok(())
    }
}

impl Qwen2Vl {
    /// The pixel side the resized image is a multiple of.
    pub fn factor(&self) -> u32 {
        self.patch_size * self.merge_size
    }

    fn check(&self) -> Result<()> {
        if self.patch_size == 0 || self.merge_size == 0 || self.temporal_patch_size == 0 {
            return Err(OpsError::Invalid(format!(
                "patch_size {}, merge_size {} and temporal_patch_size {} must be at least 1",
                self.patch_size, self.merge_size, self.temporal_patch_size
            )));
        }
        if self.min_pixels > self.max_pixels {
            return Err(OpsError::Invalid(format!(
                "min_pixels {} is over max_pixels {}",
                self.min_pixels, self.max_pixels
            )));
        }
        if self.std.contains(&0.0) {
            return Err(OpsError::Invalid("a standard deviation of 0".into()));
        }
        Ok(())
    }

    /// The grid `(t, h, w)` in patches of a `width`×`height` image, from its size alone.
    pub fn grid(&self, width: u32, height: u32) -> Result<[u32; 3]> {
        self.check()?;
        let (h, w) = smart_resize(
            height,
            width,
            self.factor(),
            self.min_pixels,
            self.max_pixels,
        )?;
        Ok([1, h / self.patch_size, w / self.patch_size])
    }

    /// Tokens the image becomes in the language model (`t·h·w / merge_size²`): what its
    /// placeholder expands to.
    pub fn tokens(&self, width: u32, height: u32) -> Result<u64> {
        let [t, h, w] = self.grid(width, height)?;
        Ok(u64::from(t) * u64::from(h) * u64::from(w)
            / u64::from(self.merge_size * self.merge_size))
    }

    /// Floats a row of `pixel_values` holds.
    pub fn row_len(&self) -> usize {
        3 * (self.temporal_patch_size * self.patch_size * self.patch_size) as usize
    }

    /// Process one encoded image: its patches appended to `pixel_values` (rows of
    /// [`Qwen2Vl::row_len`] floats, `t·h·w` of them), its grid returned. `max_pixels_decoded`
    /// bounds the declared size before anything is allocated.
    pub fn process(
        &self,
        ws: &mut VisionWorkspace,
        data: &[u8],
        max_pixels_decoded: u64,
        pixel_values: &mut Vec<f32>,
    ) -> Result<[u32; 3]> {
        let grid = self.image_grid(ws, data, max_pixels_decoded)?;
        let at = pixel_values.len();
        pixel_values.resize(at + self.values(grid), 0.0);
        self.process_into(ws, data, max_pixels_decoded, grid, &mut pixel_values[at..])?;
        Ok(grid)
    }

    /// The grid of an encoded image, from its header (nothing decoded); its declared size
    /// checked against `max_pixels_decoded`.
    pub fn image_grid(
        &self,
        ws: &mut VisionWorkspace,
        data: &[u8],
        max_pixels_decoded: u64,
    ) -> Result<[u32; 3]> {
        self.check()?;
        let (w, h) = ws.dimensions(data)?;
        crate::jpeg::check_pixels(u64::from(w), u64::from(h), max_pixels_decoded)?;
        self.grid(w, h)
    }

    /// Floats of `pixel_values` an image of grid `grid` fills.
    pub fn values(&self, grid: [u32; 3]) -> usize {
        grid.iter().map(|&g| g as usize).product::<usize>() * self.row_len()
    }

    /// Process one encoded image whose grid ([`Qwen2Vl::image_grid`] of the same bytes) is
    /// `grid` into `out`, exactly [`Qwen2Vl::values`] floats (a slice of a batch's buffer: no
    /// copy after).
    pub fn process_into(
        &self,
        ws: &mut VisionWorkspace,
        data: &[u8],
        max_pixels_decoded: u64,
        grid: [u32; 3],
        out: &mut [f32],
    ) -> Result<()> {
        // the grid is the caller's from `image_grid` (the header is not parsed twice); any grid
        // of the right size is safe: the image is resized to it, the decode bounded as ever
        if out.len() != self.values(grid) {
            return Err(OpsError::Invalid(format!(
                "{} floats for an image of grid {grid:?}",
                out.len()
            )));
        }
        let (th, tw) = (grid[1] * self.patch_size, grid[2] * self.patch_size);
        ws.decode_resized(data, (tw, th), self.dct_scaling, max_pixels_decoded)?;
        self.patchify(&ws.planes, tw as usize, th as usize, out);
        Ok(())
    }

    /// Rescale, normalise and lay out the RGB planes `px` (`w`×`h`, multiples of the factor) as
    /// `transformers` does: rows in (block row, block column, row in block, column in block)
    /// order, each row (channel, frame, y, x); the image repeated over the frames. Values as
    /// the PIL processor computes them: `f32(p · (1/255) in f64)`, then `(v − mean) / std` in
    /// `f32`.
    ///
    /// Each patch's lines are read from the planes once (one table lookup a byte) and written
    /// straight into `out` (exactly the image's floats), each line into every frame while it is
    /// in registers (no copy of a frame after: `out` is written once, front to back).
    fn patchify(&self, px: &[Vec<u8>; 3], w: usize, h: usize, out: &mut [f32]) {
        let (ps, m, tps) = (
            self.patch_size as usize,
            self.merge_size as usize,
            self.temporal_patch_size as usize,
        );
        let (gh, gw) = (h / ps, w / ps);
        debug_assert_eq!(out.len(), gh * gw * self.row_len());
        // the value of every byte per channel, once
        let mut lut = [[0f32; 256]; 3];
        for (c, t) in lut.iter_mut().enumerate() {
            for (p, v) in t.iter_mut().enumerate() {
                let r = (p as f64 * (1.0 / 255.0)) as f32;
                *v = (r - self.mean[c]) / self.std[c];
            }
        }
        let plane = ps * ps;
        // one patch channel's frames, made here before they are streamed out (zeroed once)
        let mut buf = [0f32; PATCH_FLOATS];
        let mut rows = out.chunks_exact_mut(3 * tps * plane);
        for bh in 0..gh / m {
            for bw in 0..gw / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let (y0, x0) = ((bh * m + mh) * ps, (bw * m + mw) * ps);
                        let row = rows.next().expect("out holds every patch");
                        for (c, frames) in row.chunks_exact_mut(tps * plane).enumerate() {
                            // the common patch sides and frame counts with known lengths:
                            // loops unrolled
                            let (plane_c, lut_c) = (&px[c], &lut[c]);
                            match (ps, tps) {
                                (14, 2) => patch_lines::<14, 2>(
                                    plane_c, w, y0, x0, lut_c, &mut buf, frames,
                                ),
                                (14, 1) => patch_lines::<14, 1>(
                                    plane_c, w, y0, x0, lut_c, &mut buf, frames,
                                ),
                                (16, 2) => patch_lines::<16, 2>(
                                    plane_c, w, y0, x0, lut_c, &mut buf, frames,
                                ),
                                (16, 1) => patch_lines::<16, 1>(
                                    plane_c, w, y0, x0, lut_c, &mut buf, frames,
                                ),
                                _ => {
                                    let (first, rest) = frames.split_at_mut(plane);
                                    for (py, line) in first.chunks_exact_mut(ps).enumerate() {
                                        let src = &plane_c[(y0 + py) * w + x0..][..ps];
                                        for (v, &p) in line.iter_mut().zip(src) {
                                            *v = lut_c[usize::from(p)];
                                        }
                                    }
                                    for frame in rest.chunks_exact_mut(plane) {
                                        frame.copy_from_slice(first);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        stream_fence();
    }
}

/// The `PS` lines of `PS` bytes of the patch at (`y0`, `x0`) of `plane` (`w` bytes a line),
/// through `lut`, into each of the `TPS` frames of `out` (`TPS * PS * PS` floats, at most
/// [`PATCH_FLOATS`]): made in `buf`, then streamed out ([`stream_out`]).
#[inline(always)]
fn patch_lines<const PS: usize, const TPS: usize>(
    plane: &[u8],
    w: usize,
    y0: usize,
    x0: usize,
    lut: &[f32; 256],
    buf: &mut [f32; PATCH_FLOATS],
    out: &mut [f32],
) {
    let frames = &mut buf[..TPS * PS * PS];
    for py in 0..PS {
        let line: &[u8; PS] = plane[(y0 + py) * w + x0..][..PS]
            .try_into()
            .expect("PS bytes");
        let mut v = [0f32; PS];
        for (v, &p) in v.iter_mut().zip(line) {
            *v = lut[usize::from(p)];
        }
        for f in 0..TPS {
            frames[(f * PS + py) * PS..][..PS].copy_from_slice(&v);
        }
    }
    stream_out(frames, out);
}

/// The most floats [`patch_lines`] makes for one channel of a patch (two frames of 16×16).
const PATCH_FLOATS: usize = 2 * 16 * 16;

/// `src` copied into `dst` (the same length), with non-temporal stores where `dst` is 16-byte
/// aligned (x86-64): a batch's `pixel_values` are written once and read much later by another
/// thread (or copied to an accelerator), so they go around the cache instead of each line being
/// read in first (half the memory traffic of the 24 bytes a pixel the patches take).
/// [`Qwen2Vl::patchify`] fences the stores once at its end.
#[inline(always)]
fn stream_out(src: &[f32], dst: &mut [f32]) {
    assert_eq!(src.len(), dst.len(), "stream_out copies equal lengths");
    #[cfg(target_arch = "x86_64")]
    if (dst.as_ptr() as usize).is_multiple_of(16) {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_stream_ps};
        let n = dst.len() / 4 * 4;
        for i in (0..n).step_by(4) {
            // SAFETY: `i + 4 <= n <= dst.len() == src.len()`, so both 16-byte accesses are in
            // bounds; `dst + i` is 16-byte aligned (`dst` is, and `i` is a multiple of 4 floats),
            // as `_mm_stream_ps` needs; SSE is part of every x86-64 CPU.
            unsafe { _mm_stream_ps(dst.as_mut_ptr().add(i), _mm_loadu_ps(src.as_ptr().add(i))) };
        }
        dst[n..].copy_from_slice(&src[n..]);
        return;
    }
    dst.copy_from_slice(src);
}

/// Order the non-temporal stores of [`stream_out`] before whatever follows (the batch handed
/// to another thread).
#[inline]
fn stream_fence() {
    // SAFETY: SSE (which `sfence` belongs to) is part of every x86-64 CPU.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
}

/// The fixed-size processor of SigLIP/CLIP/LLaVA-style encoders: the image resized to
/// `size`×`size` with Pillow's bicubic (after padding it to a square of `pad` when given, as
/// LLaVA's `expand2square` does with the mean colour), rescaled and normalised, as `[3, size,
/// size]` floats.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedSize {
    /// The output side.
    pub size: u32,
    /// Pad to a square first, with this RGB colour.
    pub pad: Option<[u8; 3]>,
    /// Per-channel mean subtracted after rescaling to [0, 1].
    pub mean: [f32; 3],
    /// Per-channel standard deviation divided by.
    pub std: [f32; 3],
}

impl FixedSize {
    /// Process one encoded image into `out` (`3 * size * size` floats, channels first).
    pub fn process(
        &self,
        ws: &mut VisionWorkspace,
        data: &[u8],
        max_pixels_decoded: u64,
        out: &mut [f32],
    ) -> Result<()> {
        let s = self.size as usize;
        if s == 0 || out.len() != 3 * s * s || self.std.contains(&0.0) {
            return Err(OpsError::Invalid(format!(
                "fixed-size processor of side {s} into {} floats",
                out.len()
            )));
        }
        let (w, h) = ws.dimensions(data)?;
        crate::jpeg::check_pixels(u64::from(w), u64::from(h), max_pixels_decoded)?;
        match self.pad {
            None => {
                ws.decode_resized(data, (self.size, self.size), true, max_pixels_decoded)?;
            }
            Some(colour) => {
                ws.decode(data, None, false, max_pixels_decoded)?;
                let (w, h) = (ws.decoded.width as usize, ws.decoded.height as usize);
                let side = w.max(h);
                let mut square = Vec::with_capacity(side * side * 3);
                for _ in 0..side * side {
                    square.extend_from_slice(&colour);
                }
                let (ox, oy) = ((side - w) / 2, (side - h) / 2);
                for y in 0..h {
                    let from = &ws.decoded.data[y * w * 3..(y + 1) * w * 3];
                    square[((oy + y) * side + ox) * 3..][..w * 3].copy_from_slice(from);
                }
                let view = PixelsRef {
                    width: side as u32,
                    height: side as u32,
                    channels: 3,
                    data: &square,
                };
                ws.bicubic
                    .resize_planes(view, self.size, self.size, &mut ws.planes)?;
            }
        }
        for (c, plane) in out.chunks_exact_mut(s * s).enumerate() {
            for (o, p) in plane.iter_mut().zip(&ws.planes[c]) {
                let r = (f64::from(*p) * (1.0 / 255.0)) as f32;
                *o = (r - self.mean[c]) / self.std[c];
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_resize_keeps_multiples_of_the_factor_within_the_budget() {
        // values computed by transformers' smart_resize
        assert_eq!(
            smart_resize(224, 224, 28, 3136, 1_003_520).unwrap(),
            (224, 224)
        );
        assert_eq!(
            smart_resize(375, 500, 28, 3136, 1_003_520).unwrap(),
            (364, 504)
        );
        // over the budget: scaled down, floor
        let (h, w) = smart_resize(3000, 4000, 28, 3136, 1_003_520).unwrap();
        assert!(
            h % 28 == 0 && w % 28 == 0 && u64::from(h * w) <= 1_003_520,
            "{h}x{w}"
        );
        // under the minimum: scaled up, ceil
        let (h, w) = smart_resize(10, 20, 28, 3136, 1_003_520).unwrap();
        assert!(
            h % 28 == 0 && w % 28 == 0 && u64::from(h * w) >= 3136,
            "{h}x{w}"
        );
        // Python's round: half to even (14 / 28 = 0.5 -> 0, 42 / 28 = 1.5 -> 2)
        assert_eq!(py_round(0.5), 0.0);
        assert_eq!(py_round(1.5), 2.0);
        assert!(smart_resize(1, 300, 28, 3136, 1_003_520).is_err());
        assert!(smart_resize(0, 300, 28, 3136, 1_003_520).is_err());
    }

    #[test]
    fn the_grid_and_token_count_follow_from_the_size() {
        let q = Qwen2Vl::default();
        assert_eq!(q.grid(500, 375).unwrap(), [1, 26, 36]);
        assert_eq!(q.tokens(500, 375).unwrap(), 26 * 36 / 4);
        assert_eq!(q.row_len(), 3 * 2 * 14 * 14);
        let bad = Qwen2Vl {
            merge_size: 0,
            ..Qwen2Vl::default()
        };
        assert!(bad.grid(100, 100).is_err());
    }

    #[test]
    fn the_vertical_pass_gives_the_plain_loops_bytes_at_every_width_and_window() {
        // a fixed pseudo-random image, with edges at 0 and 255 (the clamps of clip8)
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut byte = || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            match (state >> 60) as u8 {
                0 => 0,
                1 => 255,
                _ => (state >> 33) as u8,
            }
        };
        // strides around the 16-byte chunks; up, slight and strong reductions, and a window
        // wider than the SIMD loop takes (> 256 taps)
        for (stride, ih, oh) in [
            (1, 9, 20),
            (15, 40, 41),
            (16, 40, 39),
            (17, 100, 31),
            (47, 375, 364),
            (96, 64, 128),
            (33, 3000, 7),
            (18, 20000, 30),
        ] {
            let rows: Vec<u8> = (0..stride * ih).map(|_| byte()).collect();
            let mut y = Coeffs::default();
            y.compute(ih, oh);
            let mut simd = vec![0u8; stride * oh];
            let mut plain = vec![1u8; stride * oh];
            vertical(&rows, stride, 0, &y, oh, &mut simd);
            vertical_body(&rows, stride, 0, &y, oh, &mut plain);
            assert!(
                simd == plain,
                "stride {stride}, {ih} -> {oh} rows (ksize {})",
                y.ksize
            );
        }
    }

    #[test]
    fn the_byte_transpose_is_the_plain_one_at_every_shape() {
        for (rows, cols) in [
            (1, 1),
            (8, 8),
            (9, 17),
            (16, 8),
            (23, 41),
            (64, 3),
            (3, 64),
            (130, 200),
            (71, 257),
            (200, 65),
        ] {
            let src: Vec<u8> = (0..rows * cols).map(|i| (i * 7 + i / 5) as u8).collect();
            let (mut fast, mut plain) = (vec![0u8; rows * cols], vec![0u8; rows * cols]);
            transpose(&src, rows, cols, 1, &mut fast);
            transpose_px_any(&src, rows, cols, 1, &mut plain);
            assert_eq!(fast, plain, "{rows}x{cols}");
        }
    }

    #[test]
    fn planes_are_the_packed_resize_split() {
        let (w, h) = (37usize, 29usize);
        let data: Vec<u8> = (0..w * h * 3)
            .map(|i| ((i * 31) ^ (i >> 3)) as u8)
            .collect();
        let view = PixelsRef {
            width: w as u32,
            height: h as u32,
            channels: 3,
            data: &data,
        };
        let mut b = Bicubic::new();
        for (ow, oh) in [(37, 29), (56, 28), (20, 61), (37, 12), (9, 29)] {
            let mut packed = Vec::new();
            b.resize(view, ow, oh, &mut packed).unwrap();
            let mut planes: [Vec<u8>; 3] = Default::default();
            b.resize_planes(view, ow, oh, &mut planes).unwrap();
            for (c, plane) in planes.iter().enumerate() {
                let want: Vec<u8> = packed.iter().skip(c).step_by(3).copied().collect();
                assert_eq!(plane, &want, "channel {c} at {ow}x{oh}");
            }
        }
    }

    #[test]
    fn bicubic_keeps_flat_areas_flat_and_copies_the_same_size() {
        let src = vec![77u8; 40 * 30 * 3];
        let view = PixelsRef {
            width: 40,
            height: 30,
            channels: 3,
            data: &src,
        };
        let mut b = Bicubic::new();
        let mut out = Vec::new();
        for (w, h) in [(17, 9), (80, 61), (40, 7), (3, 30), (40, 30)] {
            b.resize(view, w, h, &mut out).unwrap();
            assert_eq!(out.len(), (w * h * 3) as usize);
            assert!(out.iter().all(|&v| v == 77), "{w}x{h}");
        }
        // a ramp stays monotonic and within its range
        let ramp: Vec<u8> = (0..64u32).flat_map(|x| [(x * 4) as u8; 3]).collect();
        let view = PixelsRef {
            width: 64,
            height: 1,
            channels: 3,
            data: &ramp,
        };
        b.resize(view, 16, 1, &mut out).unwrap();
        let r: Vec<u8> = out.iter().step_by(3).copied().collect();
        assert!(r.windows(2).all(|p| p[0] <= p[1]), "{r:?}");
        assert!(b.resize(view, 0, 1, &mut out).is_err());
    }

    #[test]
    fn streamed_patches_are_the_plain_copy_at_every_alignment_and_length() {
        // a 16-byte aligned start, then 1-3 floats past it (the plain copy), with lengths that
        // leave 0-3 floats after the last whole 16 bytes
        let mut store = vec![0f32; 1024];
        let aligned = store.as_ptr().align_offset(16);
        assert!(aligned < 4, "a Vec<f32> is 4-byte aligned");
        let floats = &mut store[aligned..];
        for at in 0..4 {
            for len in [0, 1, 3, 4, 5, 196, 392, 395] {
                let src: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 7.0).collect();
                floats.fill(f32::NAN);
                stream_out(&src, &mut floats[at..at + len]);
                stream_fence();
                assert_eq!(&floats[at..at + len], &src[..], "at {at}, {len} floats");
                assert!(floats[..at].iter().all(|v| v.is_nan()), "nothing before");
                assert!(
                    floats[at + len..].iter().all(|v| v.is_nan()),
                    "nothing after"
                );
            }
        }
    }

    #[test]
    fn patches_are_laid_out_in_the_models_order() {
        // a 56x28 image whose pixel value encodes its position: check where pixels land
        let q = Qwen2Vl {
            mean: [0.0; 3],
            std: [1.0; 3],
            ..Qwen2Vl::default()
        };
        let (w, h) = (56usize, 28usize);
        let px: [Vec<u8>; 3] = [
            (0..w * h).map(|i| ((i % w) * 4) as u8).collect(),
            (0..w * h).map(|i| ((i / w) * 8) as u8).collect(),
            vec![200; w * h],
        ];
        let mut out = vec![0f32; (w / 14) * (h / 14) * q.row_len()];
        q.patchify(&px, w, h, &mut out);
        let row_len = q.row_len();
        assert_eq!(out.len(), 2 * 4 * row_len); // grid 2x4 patches
        let v = |p: u8| (f64::from(p) * (1.0 / 255.0)) as f32;
        // row 5: block (0, 1), within it (mh 0, mw 1): patch at y 0, x (1*2+1)*14 = 42
        let r = &out[5 * row_len..6 * row_len];
        assert_eq!(r[0], v(42 * 4)); // channel 0, frame 0, (0, 0)
        assert_eq!(r[3], v(45 * 4)); // x + 3
        assert_eq!(r[196], r[0]); // frame 1 repeats frame 0
        assert_eq!(r[2 * 196 + 14], v(8)); // channel 1 (y * 8), frame 0, (1, 0)
        assert_eq!(r[4 * 196], v(200)); // channel 2
        // row 2: block (0, 0), (mh 1, mw 0): y 14, x 0
        assert_eq!(out[2 * row_len + 2 * 196], v(14 * 8));
    }

    #[test]
    fn the_fixed_size_processor_resizes_pads_and_normalises() {
        // a 20x40 image of one colour, padded to a 40x40 square of another, then 32x32
        let img = Pixels {
            width: 20,
            height: 40,
            channels: 3,
            data: [200u8, 40, 90].repeat(20 * 40),
        };
        let jpeg = crate::jpeg::encode(&img, 100).unwrap();
        let mut ws = VisionWorkspace::new().unwrap();
        let norm = |p: u8, c: usize, f: &FixedSize| {
            ((f64::from(p) * (1.0 / 255.0)) as f32 - f.mean[c]) / f.std[c]
        };
        let plain = FixedSize {
            size: 32,
            pad: None,
            mean: CLIP_MEAN,
            std: CLIP_STD,
        };
        let mut out = vec![0f32; 3 * 32 * 32];
        plain.process(&mut ws, &jpeg, u64::MAX, &mut out).unwrap();
        // one colour everywhere (within JPEG's rounding of a flat colour: 2 levels)
        for (c, plane) in out.chunks_exact(32 * 32).enumerate() {
            let want = norm([200u8, 40, 90][c], c, &plain);
            let tol = 2.0 / 255.0 / plain.std[c];
            assert!(plane.iter().all(|v| (v - want).abs() <= tol), "channel {c}");
        }
        let padded = FixedSize {
            pad: Some([0, 255, 0]),
            ..plain.clone()
        };
        padded.process(&mut ws, &jpeg, u64::MAX, &mut out).unwrap();
        // the image in the middle columns, the pad colour at the sides
        let at = |c: usize, y: usize, x: usize| out[c * 32 * 32 + y * 32 + x];
        let tol = 3.0 / 255.0 / plain.std[1];
        assert!((at(1, 16, 0) - norm(255, 1, &padded)).abs() <= tol);
        assert!((at(1, 16, 31) - norm(255, 1, &padded)).abs() <= tol);
        assert!((at(1, 16, 16) - norm(40, 1, &padded)).abs() <= tol);
        // wrong output sizes and a zero std are refused
        assert!(
            padded
                .process(&mut ws, &jpeg, u64::MAX, &mut out[1..])
                .is_err()
        );
        let bad = FixedSize {
            std: [0.0; 3],
            ..plain
        };
        assert!(bad.process(&mut ws, &jpeg, u64::MAX, &mut out).is_err());
    }
}
