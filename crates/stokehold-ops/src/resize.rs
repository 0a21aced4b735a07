//! Resizing a crop box of packed 8-bit pixels to an output size: separable bilinear resampling
//! (PIL's definition: output pixel `i` is centred on `x0 + (i + 0.5) * scale` in the source),
//! with antialiasing when an axis is reduced by more than 2× (the filter's support then grows
//! with the scale factor, like PIL's and torchvision's).
//!
//! Why our own and not a general resizer: the pipeline's resize always has the same shape — a
//! fractional crop box of an RGB image, reduced by at most 2× after DCT scaling, to a small
//! output — and its result goes into planes (CHW), mirrored half the time. A general
//! resizer (fast_image_resize 6, measured) spent about 2 million instructions (~130 µs) per
//! 224² crop, most of it per-call set-up and a horizontal-first order, then a separate pass to
//! de-interleave and flip. Here the vertical pass runs first (fewer rows for the costly
//! horizontal pass), over only the columns the crop needs, and the horizontal pass writes the
//! output planes directly, mirrored when asked. Both passes use 14-bit fixed-point weights; the
//! SIMD kernels (SSE2, and SSSE3 for the horizontal pass, detected at run time) compute exactly
//! what the scalar ones compute, which the tests check.

use crate::error::{OpsError, Result};
use crate::geometry::Crop;
use crate::jpeg::PixelsRef;

/// Fixed-point precision of the weights: they sum to `1 << BITS`.
const BITS: u32 = 14;
const ONE: i32 = 1 << BITS;
const HALF: i32 = 1 << (BITS - 1);
/// Bytes of slack after the intermediate image, so that 16-byte loads of its last pixels stay
/// inside the buffer (the lanes past a row's end get zero weights).
const SLACK: usize = 32;

/// One axis's filter: output `i` reads `taps` source samples starting at `start[i]`, weighted by
/// `weights[i * taps..][..taps]` (summing to `ONE`; zero where the window is shorter).
#[derive(Debug, Default)]
struct Axis {
    start: Vec<u32>,
    weights: Vec<i16>,
    taps: usize,
    scratch: Vec<f64>,
    /// The arguments of the last `compute` (`size`, the bits of `x0` and `len`, `out`): the
    /// same arguments again (the Cr plane after the Cb plane) keep the filter as it is.
    key: Option<AxisKey>,
}

/// What an [`Axis`] filter is a function of.
type AxisKey = (u32, u64, u64, u32);

impl Axis {
    /// The filter mapping `len` source samples from `x0` (of `size`) onto `out` samples.
    fn compute(&mut self, size: u32, x0: f64, len: f64, out: u32) {
        let key = (size, x0.to_bits(), len.to_bits(), out);
        if self.key == Some(key) {
            return;
        }
        self.key = Some(key);
        let scale = len / f64::from(out);
        // More than 2× down: antialias (support grows with the factor). Up to 2×: plain bilinear
        // interpolation (the fused pipeline's DCT scaling leaves at most 2× to the resizer).
        let fs = if scale > 2.0 { scale } else { 1.0 };
        let support = fs;
        // a window [c - s + 1/2, c + s + 1/2) holds at most ceil(2s) samples
        let taps = ((2.0 * support).ceil() as usize).min(size as usize).max(1);
        self.taps = taps;
        self.start.clear();
        self.weights.clear();
        self.weights.resize(out as usize * taps, 0);
        if fs == 1.0 && taps == 2 {
            self.interpolate(size, x0, scale, out);
            return;
        }
        self.scratch.resize(taps, 0.0);
        for i in 0..out as usize {
            let center = x0 + (i as f64 + 0.5) * scale;
            // (`as u32` of a non-negative value is its floor, without a libm call)
            let lo = ((center - support + 0.5).max(0.0) as u32).min(size - 1);
            let hi = ((center + support + 0.5).min(f64::from(size)) as u32)
                .max(lo + 1)
                .min(lo + taps as u32);
            let k = &mut self.scratch[..(hi - lo) as usize];
            let mut sum = 0.0;
            for (j, w) in k.iter_mut().enumerate() {
                let d = (f64::from(lo) + j as f64 - center + 0.5) / fs;
                *w = (1.0 - d.abs()).max(0.0);
                sum += *w;
            }
            if sum <= 0.0 {
                // a window without weight (a degenerate box): the nearest sample
                k.fill(0.0);
                let nearest = (center.max(0.0) as u32).clamp(lo, hi - 1);
                k[(nearest - lo) as usize] = 1.0;
                sum = 1.0;
            }
            // the window must fit inside the source: move it left at the right edge
            let start = lo.min(size - taps as u32);
            let row = &mut self.weights[i * taps..(i + 1) * taps];
            let off = (lo - start) as usize;
            let mut total = 0i32;
            let (mut big, mut big_at) = (0i32, off);
            for (j, &w) in k.iter().enumerate() {
                let q = (w / sum * f64::from(ONE) + 0.5) as i32; // rounded (non-negative)
                row[off + j] = q as i16;
                total += q;
                if q > big {
                    (big, big_at) = (q, off + j);
                }
            }
            // exact sum: flat areas stay exactly flat
            row[big_at] = (i32::from(row[big_at]) + ONE - total) as i16;
            self.start.push(start);
        }
    }

    /// The two-tap filter of plain interpolation (the common case, without the general window
    /// arithmetic): output `i` at source position `c = x0 + (i + 0.5) * scale - 0.5` blends samples
    /// `floor(c)` and `floor(c) + 1` by `1 - t`, `t` (its fraction); past either edge, the edge
    /// sample alone. The same weights as the general path, up to the rounding of the last bit.
    fn interpolate(&mut self, size: u32, x0: f64, scale: f64, out: u32) {
        let last = f64::from(size - 1);
        for (i, w) in self.weights.chunks_exact_mut(2).enumerate() {
            let c = x0 + (i as f64 + 0.5) * scale - 0.5;
            let (start, w0) = if c <= 0.0 {
                (0, ONE)
            } else if c >= last {
                (size - 2, 0)
            } else {
                let lo = c as u32; // floor (c > 0)
                let t = c - f64::from(lo);
                (lo, ((1.0 - t) * f64::from(ONE) + 0.5) as i32)
            };
            w[0] = w0 as i16;
            w[1] = (ONE - w0) as i16;
            self.start.push(start);
        }
        debug_assert_eq!(self.start.len(), out as usize);
    }

    /// The source range every output reads from.
    fn span(&self) -> (usize, usize) {
        let lo = self.start.iter().copied().min().unwrap_or(0) as usize;
        let hi = self.start.iter().copied().max().unwrap_or(0) as usize + self.taps;
        (lo, hi)
    }
}

/// Where the horizontal pass writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// Packed `[H, W, C]`.
    Packed,
    /// `C` planes of `[H, W]`, each row mirrored when `flip`.
    Planes { flip: bool },
}

/// A resizer with its scratch buffers; one per worker thread.
#[derive(Debug, Default)]
pub struct Resizer {
    x: Axis,
    y: Axis,
    /// The vertical pass's output: `out_h` rows of the needed source columns.
    mid: Vec<u8>,
    /// The horizontal weights and offsets in the SSSE3 kernel's layout.
    xw: Vec<i16>,
    offs: Vec<u32>,
    /// The planar path: `mid` split into planes, and the horizontal filter as byte gathers.
    planes: Vec<u8>,
    gather: Gather,
}

impl Resizer {
    /// A resizer.
    pub fn new() -> Resizer {
        Resizer::default()
    }

    /// Resize `crop` of `src` to `out_w`×`out_h` into `dst` (packed, same channel count as
    /// `src`, `out_w * out_h * channels` bytes).
    pub fn resize(
        &mut self,
        src: PixelsRef<'_>,
        crop: Crop,
        out_w: u32,
        out_h: u32,
        dst: &mut [u8],
    ) -> Result<()> {
        self.run(src, crop, out_w, out_h, Out::Packed, dst)
    }

    /// As [`Resizer::resize`], but written as `channels` planes (`[C, H, W]`), each row mirrored
    /// when `flip`: the layout and flip of the pipeline's output, without another pass.
    pub fn resize_planes(
        &mut self,
        src: PixelsRef<'_>,
        crop: Crop,
        out_w: u32,
        out_h: u32,
        flip: bool,
        dst: &mut [u8],
    ) -> Result<()> {
        self.run(src, crop, out_w, out_h, Out::Planes { flip }, dst)
    }

    fn run(
        &mut self,
        src: PixelsRef<'_>,
        crop: Crop,
        out_w: u32,
        out_h: u32,
        out: Out,
        dst: &mut [u8],
    ) -> Result<()> {
        let c = usize::from(src.channels);
        if !(c == 1 || c == 3) {
            return Err(OpsError::Unsupported(format!("{c} channels")));
        }
        let (sw, sh) = (src.width as usize, src.height as usize);
        if sw == 0 || sh == 0 || src.data.len() != sw * sh * c {
            return Err(OpsError::Invalid(format!(
                "source image: {sw}x{sh}x{c} with {} bytes",
                src.data.len()
            )));
        }
        let (ow, oh) = (out_w as usize, out_h as usize);
        if ow == 0 || oh == 0 || dst.len() != ow * oh * c {
            return Err(OpsError::Invalid(format!(
                "output image: {ow}x{oh}x{c} with {} bytes",
                dst.len()
            )));
        }
        let x = crop.x.clamp(0.0, src.width as f64 - 1.0);
        let y = crop.y.clamp(0.0, src.height as f64 - 1.0);
        let w = crop.w.min(src.width as f64 - x).max(1.0);
        let h = crop.h.min(src.height as f64 - y).max(1.0);
        if !(x.is_finite() && y.is_finite() && w.is_finite() && h.is_finite()) {
            return Err(OpsError::Invalid(format!("crop box {crop:?}")));
        }
        self.x.compute(src.width, x, w, out_w);
        self.y.compute(src.height, y, h, out_h);
        // vertical pass over the columns the horizontal pass reads
        let (x0, x1) = self.x.span();
        let row = (x1 - x0) * c;
        // every byte the kernels read is written first (or, in the slack, weighed by zero)
        grow(&mut self.mid, oh * row + SLACK);
        vertical(src.data, sw * c, x0 * c, row, &self.y, &mut self.mid);
        #[cfg(target_arch = "x86_64")]
        if let Out::Planes { flip } = out
            && self.x.taps <= 2
            && std::arch::is_x86_feature_detected!("ssse3")
            && gather_groups(&self.x, x0, flip, &mut self.gather)
        {
            let wide = x1 - x0;
            // SAFETY: SSSE3 was detected at run time just above.
            unsafe {
                // one channel: `mid` is the plane already
                let planes = if c == 3 {
                    grow(&mut self.planes, c * oh * wide + SLACK);
                    split_rgb_ssse3(&self.mid[..oh * row], &mut self.planes, oh * wide);
                    &self.planes
                } else {
                    &self.mid
                };
                for (ch, plane) in dst.chunks_exact_mut(ow * oh).enumerate() {
                    let from = &planes[ch * oh * wide..];
                    gather_plane(from, wide, &self.gather, ow, oh, plane);
                }
            }
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if c == 3 && std::arch::is_x86_feature_detected!("ssse3") {
            pack_weights(&self.x, x0, &mut self.xw, &mut self.offs);
            let (xw, offs) = (&self.xw, &self.offs);
            // SAFETY: SSSE3 was detected at run time just above.
            unsafe {
                horizontal_rgb_ssse3(&self.mid, row, x0, &self.x, xw, offs, ow, oh, out, dst)
            };
            return Ok(());
        }
        #[cfg(target_arch = "x86_64")]
        if c == 1 && std::arch::is_x86_feature_detected!("ssse3") {
            pack_weights_gray(&self.x, x0, &mut self.xw, &mut self.offs);
            let (xw, offs) = (&self.xw, &self.offs);
            let flip = matches!(out, Out::Planes { flip: true });
            // SAFETY: SSSE3 was detected at run time just above.
            unsafe {
                horizontal_gray_ssse3(&self.mid, row, x0, &self.x, xw, offs, ow, oh, flip, dst)
            };
            return Ok(());
        }
        horizontal_scalar(&self.mid, row, x0, &self.x, c, (ow, oh), 0..ow, out, dst);
        Ok(())
    }
}

/// Whether the CPU has AVX2 (detected once; the detection macro caches it).
#[cfg(target_arch = "x86_64")]
fn avx2() -> bool {
    #[cfg(test)]
    if tests::NO_AVX2.load(std::sync::atomic::Ordering::Relaxed) {
        return false;
    }
    std::arch::is_x86_feature_detected!("avx2")
}

/// Make `buf` at least `n` bytes long without clearing what it holds.
fn grow(buf: &mut Vec<u8>, n: usize) {
    if buf.len() < n {
        buf.resize(n, 0);
    }
}

/// The vertical pass: `mid` row `i` = the weighted sum of source rows `start[i]..+taps`, over the
/// `row` bytes from byte `col0` of each source row.
fn vertical(src: &[u8], stride: usize, col0: usize, row: usize, ay: &Axis, mid: &mut [u8]) {
    let t = ay.taps;
    #[cfg(target_arch = "x86_64")]
    let avx2 = avx2();
    for (i, &s) in ay.start.iter().enumerate() {
        let w = &ay.weights[i * t..(i + 1) * t];
        let out = &mut mid[i * row..(i + 1) * row];
        let first = s as usize * stride + col0;
        let src_row = |k: usize| &src[first + k * stride..first + k * stride + row];
        let done = match t {
            1 => {
                out.copy_from_slice(src_row(0));
                row
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: SSE2 is part of the x86_64 baseline: every x86_64 CPU has it.
            2 => unsafe {
                let (a, b) = (src_row(0), src_row(1));
                // (AVX2 only when detected at run time)
                let n = if avx2 {
                    vertical2_avx2(a, b, w[0], w[1], out)
                } else {
                    0
                };
                // fewer than 16 bytes left: redo the last 16 (same values) rather than go scalar
                let from = if row - n < 16 && row >= 16 {
                    row - 16
                } else {
                    n
                };
                from + vertical2_sse2(&a[from..], &b[from..], w[0], w[1], &mut out[from..])
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above.
            _ => unsafe { vertical_any_sse2(src, first, stride, w, out) },
            #[cfg(not(target_arch = "x86_64"))]
            _ => 0,
        };
        for (j, o) in out.iter_mut().enumerate().skip(done) {
            let mut acc = HALF;
            for (k, &wk) in w.iter().enumerate() {
                acc += i32::from(src[first + k * stride + j]) * i32::from(wk);
            }
            *o = (acc >> BITS).clamp(0, 255) as u8;
        }
    }
}

/// Sixteen bytes from the start of `s` (which must hold at least 16).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn load16(s: &[u8]) -> std::arch::x86_64::__m128i {
    let b: &[u8; 16] = s[..16].try_into().expect("16 bytes");
    // SAFETY: `b` is 16 readable bytes; the load is unaligned.
    unsafe { std::arch::x86_64::_mm_loadu_si128(b.as_ptr().cast()) }
}

/// Round, shift and pack four i32x4 accumulators into 16 bytes, stored at the start of `out`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn store_packed(a: [std::arch::x86_64::__m128i; 4], out: &mut [u8]) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline.
    unsafe {
        let s0 = _mm_packs_epi32(
            _mm_srai_epi32::<{ BITS as i32 }>(a[0]),
            _mm_srai_epi32::<{ BITS as i32 }>(a[1]),
        );
        let s1 = _mm_packs_epi32(
            _mm_srai_epi32::<{ BITS as i32 }>(a[2]),
            _mm_srai_epi32::<{ BITS as i32 }>(a[3]),
        );
        let o: &mut [u8; 16] = (&mut out[..16]).try_into().expect("16 bytes");
        // the store is unaligned into 16 writable bytes
        _mm_storeu_si128(o.as_mut_ptr().cast(), _mm_packus_epi16(s0, s1));
    }
}

/// Accumulate `pair` (i16 weights `[wa, wb]` repeated) times the interleaved bytes of `va`, `vb`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn madd_rows(
    acc: &mut [std::arch::x86_64::__m128i; 4],
    va: std::arch::x86_64::__m128i,
    vb: std::arch::x86_64::__m128i,
    pair: std::arch::x86_64::__m128i,
) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline.
    unsafe {
        let zero = _mm_setzero_si128();
        let lo = _mm_unpacklo_epi8(va, vb);
        let hi = _mm_unpackhi_epi8(va, vb);
        acc[0] = _mm_add_epi32(acc[0], _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), pair));
        acc[1] = _mm_add_epi32(acc[1], _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), pair));
        acc[2] = _mm_add_epi32(acc[2], _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), pair));
        acc[3] = _mm_add_epi32(acc[3], _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), pair));
    }
}

/// i16 lanes `[wa, wb]` repeated.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn pair(wa: i16, wb: i16) -> std::arch::x86_64::__m128i {
    // SAFETY: SSE2 is part of the x86_64 baseline.
    unsafe { std::arch::x86_64::_mm_set1_epi32((i32::from(wb) << 16) | i32::from(wa as u16)) }
}

/// A two-tap vertical row (plain interpolation, the common case), 16 bytes at a time; returns
/// how many bytes it wrote (the rest is left to the scalar loop).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn vertical2_sse2(a: &[u8], b: &[u8], wa: i16, wb: i16, out: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let p = pair(wa, wb);
    let round = _mm_set1_epi32(HALF);
    let len = out.len();
    for ((o, a), b) in out
        .chunks_exact_mut(16)
        .zip(a.chunks_exact(16))
        .zip(b.chunks_exact(16))
    {
        let mut acc = [round; 4];
        madd_rows(&mut acc, load16(a), load16(b), p);
        store_packed(acc, o);
    }
    if len.is_multiple_of(16) || len < 16 {
        return len / 16 * 16;
    }
    // the last bytes: one more group ending at the row's end (overlapping the previous one,
    // which it rewrites with the same values)
    let at = len - 16;
    let mut acc = [round; 4];
    madd_rows(&mut acc, load16(&a[at..]), load16(&b[at..]), p);
    store_packed(acc, &mut out[at..]);
    len
}

/// A vertical row with any number of taps, two source rows at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn vertical_any_sse2(src: &[u8], first: usize, stride: usize, w: &[i16], out: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let round = _mm_set1_epi32(HALF);
    let t = w.len();
    let n = out.len() / 16 * 16;
    for (i, o) in out.chunks_exact_mut(16).enumerate() {
        let i = i * 16;
        let mut acc = [round; 4];
        let mut k = 0;
        while k < t {
            let (k1, w1) = if k + 1 < t { (k + 1, w[k + 1]) } else { (k, 0) };
            let va = load16(&src[first + k * stride + i..]);
            let vb = load16(&src[first + k1 * stride + i..]);
            madd_rows(&mut acc, va, vb, pair(w[k], w1));
            k += 2;
        }
        store_packed(acc, o);
    }
    n
}

/// The horizontal filter of a two-tap axis as byte gathers, four outputs per group, in output
/// order (mirrored when flipping): group `g` loads 16 bytes of a plane row at `base[g]`, picks
/// each output's two samples with `pshufb` (`mask[g]`, zero-extending them to 16-bit lanes) and
/// weighs them with `pmaddwd` (`weights[g]`).
#[derive(Debug, Default)]
struct Gather {
    base: Vec<u32>,
    mask: Vec<[i8; 16]>,
    weights: Vec<[i16; 8]>,
    /// The last `ow % 4` outputs: first sample and its two weights.
    tail: Vec<(u32, [i16; 2])>,
    /// How far into a row the groups' 16-byte loads reach.
    reach: usize,
    /// The axis (its [`Axis::key`]), `x0` and flip the groups were built for, when they could
    /// be: the same again (the Cr plane after the Cb plane) keeps them.
    key: Option<(AxisKey, usize, bool)>,
}

/// Build [`Gather`] groups for the whole groups of 4 outputs (the last `ow % 4` outputs are done
/// one at a time from `tail`); `false` when some group's samples do not fit in 16 bytes.
fn gather_groups(ax: &Axis, x0: usize, flip: bool, g: &mut Gather) -> bool {
    let key = ax.key.map(|k| (k, x0, flip));
    if key.is_some() && g.key == key {
        return true;
    }
    g.key = None;
    let (t, ow) = (ax.taps, ax.start.len());
    g.base.clear();
    g.mask.clear();
    g.weights.clear();
    // output position j reads the filter of axis index x(j)
    let x_of = |j: usize| if flip { ow - 1 - j } else { j };
    for j0 in (0..ow / 4 * 4).step_by(4) {
        let base = (j0..j0 + 4).map(|j| ax.start[x_of(j)]).min().unwrap_or(0);
        let mut mask = [-1i8; 16];
        let mut w = [0i16; 8];
        for k in 0..4 {
            let x = x_of(j0 + k);
            let at = (ax.start[x] - base) as usize;
            if at + 1 >= 16 {
                return false;
            }
            mask[4 * k] = at as i8;
            mask[4 * k + 2] = (at + 1) as i8;
            w[2 * k] = ax.weights[x * t];
            w[2 * k + 1] = if t > 1 { ax.weights[x * t + 1] } else { 0 };
        }
        g.base.push(base - x0 as u32);
        g.mask.push(mask);
        g.weights.push(w);
    }
    g.reach = g.base.iter().max().map_or(0, |&b| b as usize + 16);
    g.tail.clear();
    for j in ow / 4 * 4..ow {
        let x = x_of(j);
        let w1 = if t > 1 { ax.weights[x * t + 1] } else { 0 };
        g.tail
            .push((ax.start[x] - x0 as u32, [ax.weights[x * t], w1]));
    }
    g.key = key;
    true
}

/// Split `n` packed RGB pixels of `src` into three planes of `n` bytes in `planes` (SSSE3, 16
/// pixels at a time; the rest one by one). Callers check for SSSE3 at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
fn split_rgb_ssse3(src: &[u8], planes: &mut [u8], n: usize) {
    use std::arch::x86_64::*;
    assert!(src.len() >= 3 * n && planes.len() >= 3 * n, "buffer sizes");
    // mask[p][v]: the bytes of plane p that come from the v-th 16 bytes of 48
    let mut masks = [[-1i8; 16]; 9];
    for p in 0..3 {
        for abs in (p..48).step_by(3) {
            masks[p * 3 + abs / 16][abs / 3] = (abs % 16) as i8;
        }
    }
    let m: [__m128i; 9] = std::array::from_fn(|k| {
        // SAFETY: each mask is 16 readable bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(masks[k].as_ptr().cast()) }
    });
    let (head, rest) = planes.split_at_mut(n);
    let (mid, tail) = rest.split_at_mut(n);
    let outs: [&mut [u8]; 3] = [head, mid, &mut tail[..n]];
    let blocks = n / 16;
    let [r, g, b] = outs;
    for i in 0..blocks {
        let chunk = &src[48 * i..48 * i + 48];
        let (a, bb, cc) = (load16(chunk), load16(&chunk[16..]), load16(&chunk[32..]));
        for (p, plane) in [&mut *r, &mut *g, &mut *b].into_iter().enumerate() {
            let v = _mm_or_si128(
                _mm_or_si128(
                    _mm_shuffle_epi8(a, m[3 * p]),
                    _mm_shuffle_epi8(bb, m[3 * p + 1]),
                ),
                _mm_shuffle_epi8(cc, m[3 * p + 2]),
            );
            let o: &mut [u8; 16] = (&mut plane[16 * i..16 * i + 16]).try_into().expect("16");
            // SAFETY: `o` is 16 writable bytes; the store is unaligned.
            unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), v) };
        }
    }
    for i in blocks * 16..n {
        r[i] = src[3 * i];
        g[i] = src[3 * i + 1];
        b[i] = src[3 * i + 2];
    }
}

/// The horizontal pass of one plane through [`Gather`] groups: `oh` rows of `wide` bytes in
/// `from` (followed by slack) to `oh` rows of `ow` bytes in `plane`; eight groups at a time
/// where the CPU has AVX2. Callers check for SSSE3 at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
fn gather_plane(from: &[u8], wide: usize, g: &Gather, ow: usize, oh: usize, plane: &mut [u8]) {
    let avx2 = avx2();
    for y in 0..oh {
        let row = &from[y * wide..];
        let out = &mut plane[y * ow..(y + 1) * ow];
        let done = if avx2 {
            // SAFETY: AVX2 was detected at run time (`avx2()`).
            unsafe { gather_row_avx2(row, g, out) }
        } else {
            0
        };
        gather_row_ssse3(row, g, out, done);
    }
}

/// One row of [`gather_plane`] with SSSE3, from group `k0` on, and the tail.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
fn gather_row_ssse3(row: &[u8], g: &Gather, out: &mut [u8], k0: usize) {
    use std::arch::x86_64::*;
    let round = _mm_set1_epi32(HALF);
    let groups = g.base.len();
    let one = |k: usize| -> __m128i {
        let v = load16(&row[g.base[k] as usize..]);
        // SAFETY: the mask and weights are 16 readable bytes each; the loads are unaligned.
        let (mask, w) = unsafe {
            (
                _mm_loadu_si128(g.mask[k].as_ptr().cast()),
                _mm_loadu_si128(g.weights[k].as_ptr().cast()),
            )
        };
        _mm_add_epi32(round, _mm_madd_epi16(_mm_shuffle_epi8(v, mask), w))
    };
    let mut k = k0;
    while k + 4 <= groups {
        store_packed(
            [one(k), one(k + 1), one(k + 2), one(k + 3)],
            &mut out[4 * k..],
        );
        k += 4;
    }
    for k in k..groups {
        let v = _mm_srai_epi32::<{ BITS as i32 }>(one(k));
        let v = _mm_packus_epi16(_mm_packs_epi32(v, v), v);
        let b = _mm_cvtsi128_si32(v).to_le_bytes();
        out[4 * k..4 * k + 4].copy_from_slice(&b);
    }
    for (j, &(at, [w0, w1])) in (groups * 4..).zip(&g.tail) {
        let at = at as usize;
        let acc =
            HALF + i32::from(row[at]) * i32::from(w0) + i32::from(row[at + 1]) * i32::from(w1);
        out[j] = (acc >> BITS).clamp(0, 255) as u8;
    }
}

/// One row of [`gather_plane`] with AVX2, eight groups (32 outputs) at a time; returns the first
/// group it left to [`gather_row_ssse3`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn gather_row_avx2(row: &[u8], g: &Gather, out: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let round = _mm256_set1_epi32(HALF);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let n = g.base.len();
    let groups = n / 8 * 8;
    if g.reach > row.len() || out.len() < 4 * groups || g.mask.len() != n || g.weights.len() != n {
        return 0; // (not expected: the SSSE3 kernel, with its checks, does the row)
    }
    let (r, base, masks, weights) = (
        row.as_ptr(),
        g.base.as_ptr(),
        g.mask.as_ptr(),
        g.weights.as_ptr(),
    );
    // two groups per 256-bit register: group k in the low lane, k + 1 in the high one (a macro,
    // not a closure: closures are not inlined into `target_feature` functions reliably)
    macro_rules! two {
        ($k:expr) => {{
            let k = $k;
            // k + 1 < groups <= n == g.base.len() == g.mask.len() == g.weights.len(): the base,
            // mask and weight reads are in bounds (masks and weights are 16-byte arrays, two
            // adjacent ones are 32 contiguous bytes); every base + 16 <= g.reach <= row.len():
            // both 16-byte row loads are inside `row`.
            // SAFETY: every read is in bounds (just above); all loads are unaligned.
            let (v, mask, w) = unsafe {
                (
                    _mm256_loadu2_m128i(
                        r.add(*base.add(k + 1) as usize).cast(),
                        r.add(*base.add(k) as usize).cast(),
                    ),
                    _mm256_loadu_si256(masks.add(k).cast()),
                    _mm256_loadu_si256(weights.add(k).cast()),
                )
            };
            let acc = _mm256_add_epi32(round, _mm256_madd_epi16(_mm256_shuffle_epi8(v, mask), w));
            _mm256_srai_epi32::<{ BITS as i32 }>(acc)
        }};
    }
    let mut k = 0;
    while k + 8 <= groups {
        // lanes: [k | k+1], [k+2 | k+3], ... → packs interleave the lanes' halves, so the packed
        // dwords come out as k, k+2, k+4, k+6 | k+1, k+3, k+5, k+7: `order` puts them right
        let s0 = _mm256_packs_epi32(two!(k), two!(k + 2));
        let s1 = _mm256_packs_epi32(two!(k + 4), two!(k + 6));
        let v = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(s0, s1), order);
        let o: &mut [u8; 32] = (&mut out[4 * k..4 * k + 32]).try_into().expect("32");
        // SAFETY: `o` is 32 writable bytes; the store is unaligned.
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), v) };
        k += 8;
    }
    k
}

/// A two-tap vertical row with AVX2, 32 bytes at a time; returns how many bytes it wrote.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn vertical2_avx2(a: &[u8], b: &[u8], wa: i16, wb: i16, out: &mut [u8]) -> usize {
    use std::arch::x86_64::*;
    let p = _mm256_set1_epi32((i32::from(wb) << 16) | i32::from(wa as u16));
    let round = _mm256_set1_epi32(HALF);
    let zero = _mm256_setzero_si256();
    let n = out.len() / 32 * 32;
    for ((o, a), b) in out
        .chunks_exact_mut(32)
        .zip(a.chunks_exact(32))
        .zip(b.chunks_exact(32))
    {
        // SAFETY: `a` and `b` are 32 readable bytes each; the loads are unaligned.
        let (va, vb) = unsafe {
            (
                _mm256_loadu_si256(a.as_ptr().cast()),
                _mm256_loadu_si256(b.as_ptr().cast()),
            )
        };
        // in-lane unpacks and packs: each 128-bit lane keeps its own 16 bytes in order
        let (lo, hi) = (_mm256_unpacklo_epi8(va, vb), _mm256_unpackhi_epi8(va, vb));
        let m = |v: __m256i| {
            let acc = _mm256_add_epi32(round, _mm256_madd_epi16(v, p));
            _mm256_srai_epi32::<{ BITS as i32 }>(acc)
        };
        let s0 = _mm256_packs_epi32(
            m(_mm256_unpacklo_epi8(lo, zero)),
            m(_mm256_unpackhi_epi8(lo, zero)),
        );
        let s1 = _mm256_packs_epi32(
            m(_mm256_unpacklo_epi8(hi, zero)),
            m(_mm256_unpackhi_epi8(hi, zero)),
        );
        // SAFETY: `o` is 32 writable bytes; the store is unaligned.
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().cast(), _mm256_packus_epi16(s0, s1)) };
    }
    n
}

/// The horizontal pass, one pixel at a time, for the output columns `cols` (any channel count;
/// the fallback, the SIMD kernel's last columns, and the reference it is tested against).
#[allow(clippy::too_many_arguments)]
fn horizontal_scalar(
    mid: &[u8],
    row: usize,
    x0: usize,
    ax: &Axis,
    c: usize,
    (ow, oh): (usize, usize),
    cols: std::ops::Range<usize>,
    out: Out,
    dst: &mut [u8],
) {
    let t = ax.taps;
    for y in 0..oh {
        let r = &mid[y * row..(y + 1) * row];
        for x in cols.clone() {
            let s = ax.start[x];
            let w = &ax.weights[x * t..(x + 1) * t];
            let base = (s as usize - x0) * c;
            for ch in 0..c {
                let mut acc = HALF;
                for (k, &wk) in w.iter().enumerate() {
                    acc += i32::from(r[base + k * c + ch]) * i32::from(wk);
                }
                let v = (acc >> BITS).clamp(0, 255) as u8;
                let d = match out {
                    Out::Packed => (y * ow + x) * c + ch,
                    Out::Planes { flip } => {
                        let xo = if flip { ow - 1 - x } else { x };
                        (ch * oh + y) * ow + xo
                    }
                };
                dst[d] = v;
            }
        }
    }
}

/// The horizontal weights and offsets for [`horizontal_gray_ssse3`]: per output pixel, the offset
/// of its first tap in a `mid` row, and per group of 8 taps one vector of 8 i16 weights (0 past
/// the last tap).
fn pack_weights_gray(ax: &Axis, x0: usize, xw: &mut Vec<i16>, offs: &mut Vec<u32>) {
    let t = ax.taps;
    let groups = t.div_ceil(8);
    xw.clear();
    offs.clear();
    for (x, &s) in ax.start.iter().enumerate() {
        let w = &ax.weights[x * t..(x + 1) * t];
        xw.extend((0..groups * 8).map(|k| w.get(k).copied().unwrap_or(0)));
        offs.push(s - x0 as u32);
    }
}

/// The horizontal pass for one channel (a gray image, or one plane of the planar path) with
/// SSSE3, any number of taps: per output pixel, 8 source bytes per group of 8 taps, widened to
/// 16-bit lanes and multiplied with `pmaddwd`; four pixels' sums at a time are added across
/// lanes (`phaddd`), rounded, packed and stored (mirrored when `flip`). The last `ow % 4` pixels
/// of each row take the scalar path. Callers check for SSSE3 at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
#[allow(clippy::too_many_arguments)]
fn horizontal_gray_ssse3(
    mid: &[u8],
    row: usize,
    x0: usize,
    ax: &Axis,
    xw: &[i16],
    offs: &[u32],
    ow: usize,
    oh: usize,
    flip: bool,
    dst: &mut [u8],
) {
    use std::arch::x86_64::*;
    let groups = ax.taps.div_ceil(8);
    // Every load below reads 8 bytes at `y * row + offs[x] + 8 * g` (g < groups) and every
    // weight load 8 lanes at `(x * groups + g) * 8`: check once that all of them lie inside
    // `mid` and `xw`, so that the loop can use unchecked pointers.
    let reach = offs.iter().copied().max().unwrap_or(0) as usize + 8 * groups;
    assert!(
        oh > 0 && (oh - 1) * row + reach <= mid.len(),
        "horizontal loads inside the buffer"
    );
    assert!(
        offs.len() == ow && xw.len() == ow * groups * 8,
        "one weight set per pixel"
    );
    assert!(dst.len() == ow * oh, "output size");
    let zero = _mm_setzero_si128();
    let round = _mm_set1_epi32(HALF);
    let (m, wp) = (mid.as_ptr(), xw.as_ptr());
    let pixel = |r: usize, x: usize| -> __m128i {
        let mut acc = zero;
        for g in 0..groups {
            // `r + offs[x] + 8 * g + 8 <= (oh - 1) * row + reach <= mid.len()` (checked above,
            // with r = y * row, y < oh), and the weights' `(x * groups + g) * 8 + 8 <= xw.len()`.
            // SAFETY: both loads are in bounds (just above) and unaligned.
            let (v, w) = unsafe {
                (
                    _mm_loadl_epi64(m.add(r + *offs.get_unchecked(x) as usize + 8 * g).cast()),
                    _mm_loadu_si128(wp.add((x * groups + g) * 8).cast()),
                )
            };
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_unpacklo_epi8(v, zero), w));
        }
        acc
    };
    let quads = ow / 4 * 4;
    for y in 0..oh {
        let r = y * row;
        for x in (0..quads).step_by(4) {
            let sums = _mm_hadd_epi32(
                _mm_hadd_epi32(pixel(r, x), pixel(r, x + 1)),
                _mm_hadd_epi32(pixel(r, x + 2), pixel(r, x + 3)),
            );
            let v = _mm_srai_epi32::<{ BITS as i32 }>(_mm_add_epi32(sums, round));
            let px = _mm_packus_epi16(_mm_packs_epi32(v, zero), zero);
            let mut b = (_mm_cvtsi128_si32(px) as u32).to_le_bytes();
            let at = if flip {
                b.reverse();
                ow - 4 - x
            } else {
                x
            };
            dst[y * ow + at..y * ow + at + 4].copy_from_slice(&b);
        }
    }
    // the last (ow % 4) columns, one pixel at a time (one channel: planes and packed are the
    // same layout)
    horizontal_scalar(
        mid,
        row,
        x0,
        ax,
        1,
        (ow, oh),
        quads..ow,
        Out::Planes { flip },
        dst,
    );
}

/// The horizontal weights and offsets for [`horizontal_rgb_ssse3`]: per output pixel, the byte
/// offset of its first tap in a `mid` row, and per group of 4 taps two vectors of i16 lanes
/// `[w0 w1 w0 w1 w0 w1 0 0]` and `[w2 w3 w2 w3 w2 w3 0 0]`.
fn pack_weights(ax: &Axis, x0: usize, xw: &mut Vec<i16>, offs: &mut Vec<u32>) {
    let t = ax.taps;
    let groups = t.div_ceil(4);
    xw.clear();
    offs.clear();
    for (x, &s) in ax.start.iter().enumerate() {
        let w = &ax.weights[x * t..(x + 1) * t];
        let at = |k: usize| w.get(k).copied().unwrap_or(0);
        for g in 0..groups {
            for half in 0..2 {
                let (a, b) = (at(4 * g + 2 * half), at(4 * g + 2 * half + 1));
                xw.extend_from_slice(&[a, b, a, b, a, b, 0, 0]);
            }
        }
        offs.push(3 * (s - x0 as u32));
    }
}

/// The horizontal pass for RGB with SSSE3: per output pixel, 16 source bytes (4 pixels and a
/// byte) per group of 4 taps, shuffled into (R, G, B) pairs of 16-bit lanes and multiplied with
/// `pmaddwd`; four pixels at a time are rounded, packed and stored (as planes, mirrored when
/// asked, or packed). The last `ow % 4` pixels of each row take the scalar path. Callers check for
/// SSSE3 at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "ssse3")]
#[allow(clippy::too_many_arguments)]
fn horizontal_rgb_ssse3(
    mid: &[u8],
    row: usize,
    x0: usize,
    ax: &Axis,
    xw: &[i16],
    offs: &[u32],
    ow: usize,
    oh: usize,
    out: Out,
    dst: &mut [u8],
) {
    use std::arch::x86_64::*;
    let groups = ax.taps.div_ceil(4);
    // Every load below reads 16 bytes at `y * row + offs[x] + 12 * g` (g < groups) and every
    // weight load 8 lanes at `(x * groups + g) * 16 (+ 8)`: check once that all of them lie
    // inside `mid` and `xw`, so that the loop can use unchecked pointers.
    let reach = offs.iter().copied().max().unwrap_or(0) as usize + 12 * groups + 4;
    assert!(
        oh > 0 && (oh - 1) * row + reach <= mid.len(),
        "horizontal loads inside the buffer"
    );
    assert!(
        offs.len() == ow && xw.len() == ow * groups * 16,
        "one weight set per pixel"
    );
    assert!(dst.len() == ow * oh * 3, "output size");
    let z = -1i8; // pshufb: a negative index writes zero
    let first = _mm_setr_epi8(0, z, 3, z, 1, z, 4, z, 2, z, 5, z, z, z, z, z);
    let second = _mm_setr_epi8(6, z, 9, z, 7, z, 10, z, 8, z, 11, z, z, z, z, z);
    let round = _mm_set1_epi32(HALF);
    // from [R0 G0 B0 _ R1 G1 B1 _ R2 G2 B2 _ R3 G3 B3 _] to planes, to mirrored planes, to packed
    let planes = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, z, z, z, z);
    let mirrored = _mm_setr_epi8(12, 8, 4, 0, 13, 9, 5, 1, 14, 10, 6, 2, z, z, z, z);
    let packed = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, z, z, z, z);
    let (m, wp) = (mid.as_ptr(), xw.as_ptr());
    let pixel = |r: usize, x: usize| -> __m128i {
        let mut acc = round;
        for g in 0..groups {
            // `r + offs[x] + 12 * g + 16 <= (oh - 1) * row + reach <= mid.len()` (checked above,
            // with r = y * row, y < oh), and the weights' `(x * groups + g) * 16 + 16 <= xw.len()`.
            // SAFETY: both loads are in bounds (just above) and unaligned.
            let (v, w0, w1) = unsafe {
                let at = (x * groups + g) * 16;
                (
                    _mm_loadu_si128(m.add(r + *offs.get_unchecked(x) as usize + 12 * g).cast()),
                    _mm_loadu_si128(wp.add(at).cast()),
                    _mm_loadu_si128(wp.add(at + 8).cast()),
                )
            };
            acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, first), w0));
            if ax.taps > 2 || g > 0 {
                acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, second), w1));
            }
        }
        _mm_srai_epi32::<{ BITS as i32 }>(acc)
    };
    let plane = ow * oh;
    let quads = ow / 4 * 4;
    for y in 0..oh {
        let r = y * row;
        for x in (0..quads).step_by(4) {
            let p01 = _mm_packs_epi32(pixel(r, x), pixel(r, x + 1));
            let p23 = _mm_packs_epi32(pixel(r, x + 2), pixel(r, x + 3));
            let px = _mm_packus_epi16(p01, p23);
            let mut b = [0u8; 16];
            match out {
                Out::Planes { flip } => {
                    let (mask, at) = if flip {
                        (mirrored, ow - 4 - x)
                    } else {
                        (planes, x)
                    };
                    // SAFETY: `b` is 16 writable bytes; the store is unaligned.
                    unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), _mm_shuffle_epi8(px, mask)) };
                    for ch in 0..3 {
                        let d = ch * plane + y * ow + at;
                        dst[d..d + 4].copy_from_slice(&b[4 * ch..4 * ch + 4]);
                    }
                }
                Out::Packed => {
                    // SAFETY: as above.
                    unsafe {
                        _mm_storeu_si128(b.as_mut_ptr().cast(), _mm_shuffle_epi8(px, packed))
                    };
                    let d = (y * ow + x) * 3;
                    dst[d..d + 12].copy_from_slice(&b[..12]);
                }
            }
        }
    }
    // the last (ow % 4) columns, one pixel at a time
    horizontal_scalar(mid, row, x0, ax, 3, (ow, oh), quads..ow, out, dst);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Turns the AVX2 kernels off, so that the SSE ones are tested on machines with AVX2 too (the
    /// kernels compute the same bytes, so other tests running meanwhile are not affected).
    pub(super) static NO_AVX2: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);

    fn image(w: u32, h: u32, c: u8, seed: u32) -> Vec<u8> {
        (0..w * h * u32::from(c))
            .map(|i| {
                let v = i.wrapping_mul(2654435761).wrapping_add(seed) >> 13;
                // smooth-ish content plus noise
                ((i / u32::from(c) % w) * 3 + (v & 31)) as u8
            })
            .collect()
    }

    /// PIL's bilinear resample in floating point: the definition the fixed-point kernels
    /// approximate.
    fn reference(src: &[u8], w: u32, h: u32, c: usize, crop: Crop, ow: u32, oh: u32) -> Vec<f64> {
        let taps = |size: u32, x0: f64, len: f64, out: u32| -> Vec<Vec<(usize, f64)>> {
            let scale = len / f64::from(out);
            let fs = if scale > 2.0 { scale } else { 1.0 };
            (0..out)
                .map(|i| {
                    let center = x0 + (f64::from(i) + 0.5) * scale;
                    let lo = (center - fs + 0.5).floor().max(0.0) as i64;
                    let hi = ((center + fs + 0.5).floor() as i64).min(i64::from(size));
                    let ks: Vec<(usize, f64)> = (lo..hi)
                        .map(|j| {
                            (
                                j as usize,
                                (1.0 - ((j as f64 - center + 0.5) / fs).abs()).max(0.0),
                            )
                        })
                        .collect();
                    let s: f64 = ks.iter().map(|k| k.1).sum();
                    ks.into_iter().map(|(j, k)| (j, k / s)).collect()
                })
                .collect()
        };
        let tx = taps(w, crop.x, crop.w, ow);
        let ty = taps(h, crop.y, crop.h, oh);
        let mut out = vec![0.0; (ow * oh) as usize * c];
        for (y, ky) in ty.iter().enumerate() {
            for (x, kx) in tx.iter().enumerate() {
                for ch in 0..c {
                    let mut v = 0.0;
                    for &(sy, wy) in ky {
                        for &(sx, wx) in kx {
                            v += wy * wx * f64::from(src[(sy * w as usize + sx) * c + ch]);
                        }
                    }
                    out[(y * ow as usize + x) * c + ch] = v;
                }
            }
        }
        out
    }

    fn boxes() -> Vec<(u32, u32, Crop, u32, u32)> {
        let b = |x, y, w, h| Crop { x, y, w, h };
        vec![
            (500, 375, b(10.3, 7.9, 330.0, 300.0), 224, 224), // ≤ 2x: interpolation
            (500, 375, b(0.0, 0.0, 500.0, 375.0), 224, 224),  // > 2x in x: antialias
            (500, 375, b(37.5, 11.25, 112.0, 99.0), 224, 224), // upscale
            (300, 200, b(299.0, 199.0, 1.0, 1.0), 7, 5),      // one source pixel
            (33, 17, b(0.0, 0.0, 33.0, 17.0), 227, 3),        // odd widths, tails
            (5, 4, b(1.5, 0.5, 3.5, 3.5), 9, 9),
            (1, 1, b(0.0, 0.0, 1.0, 1.0), 4, 4),
            (640, 480, b(3.0, 5.0, 600.0, 470.0), 64, 48), // ~9x down
        ]
    }

    #[test]
    fn fixed_point_matches_the_floating_point_definition() {
        for (i, (w, h, crop, ow, oh)) in boxes().into_iter().enumerate() {
            for c in [1u8, 3] {
                let src = image(w, h, c, i as u32);
                let mut got = vec![0u8; (ow * oh) as usize * usize::from(c)];
                let px = PixelsRef {
                    width: w,
                    height: h,
                    channels: c,
                    data: &src,
                };
                Resizer::new().resize(px, crop, ow, oh, &mut got).unwrap();
                let want = reference(&src, w, h, usize::from(c), crop, ow, oh);
                for (j, (&g, &r)) in got.iter().zip(&want).enumerate() {
                    // two roundings of 14-bit weights: at most 1 off (plus float noise)
                    assert!(
                        (f64::from(g) - r).abs() <= 1.5,
                        "box {i} c {c} at {j}: got {g}, want {r:.2}"
                    );
                }
            }
        }
    }

    /// A resizer reused for boxes that differ in one argument at a time (its filters are kept
    /// while the arguments repeat, as from the Cb plane to the Cr plane) writes what a fresh one
    /// writes, flipped or not.
    #[test]
    fn a_reused_resizer_writes_what_a_fresh_one_writes() {
        let b = |x, y, w, h| Crop { x, y, w, h };
        let base = b(10.3, 7.9, 330.0, 300.0);
        let steps = [
            (250, base, 224, 224, false),
            (250, base, 224, 224, false), // the same again: filters kept
            (250, base, 224, 224, true),  // flipped: the gathers mirrored
            (250, b(10.5, 7.9, 330.0, 300.0), 224, 224, true), // x0
            (250, b(10.5, 8.1, 330.0, 300.0), 224, 224, true), // y0
            (250, b(10.5, 8.1, 331.0, 300.0), 224, 224, true), // width
            (250, b(10.5, 8.1, 331.0, 300.0), 220, 224, true), // output width
            (250, b(10.5, 8.1, 331.0, 300.0), 220, 224, false),
            (260, b(10.5, 8.1, 331.0, 300.0), 220, 224, false), // source size
        ];
        let mut reused = Resizer::new();
        for (i, &(sh, crop, ow, oh, flip)) in steps.iter().enumerate() {
            let (w, h) = (500, sh);
            let src = image(w, h, 1, 3);
            let px = PixelsRef {
                width: w,
                height: h,
                channels: 1,
                data: &src,
            };
            let n = (ow * oh) as usize;
            let (mut a, mut fresh) = (vec![0u8; n], vec![0u8; n]);
            reused
                .resize_planes(px, crop, ow, oh, flip, &mut a)
                .unwrap();
            Resizer::new()
                .resize_planes(px, crop, ow, oh, flip, &mut fresh)
                .unwrap();
            assert!(a == fresh, "step {i}: the reused resizer differs");
        }
    }

    #[test]
    fn planes_and_mirroring_match_the_packed_output_and_simd_matches_scalar() {
        for no_avx2 in [false, true] {
            NO_AVX2.store(no_avx2, std::sync::atomic::Ordering::Relaxed);
            planes_and_mirroring_once();
        }
        NO_AVX2.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    fn planes_and_mirroring_once() {
        let mut rs = Resizer::new();
        for (i, (w, h, crop, ow, oh)) in boxes().into_iter().enumerate() {
            for c in [1u8, 3] {
                let src = image(w, h, c, 7 + i as u32);
                let px = PixelsRef {
                    width: w,
                    height: h,
                    channels: c,
                    data: &src,
                };
                let n = (ow * oh) as usize * usize::from(c);
                let mut packed = vec![0u8; n];
                rs.resize(px, crop, ow, oh, &mut packed).unwrap();
                // the scalar kernel from the same intermediate rows gives the same bytes
                let mut scalar = vec![0u8; n];
                let (x0, x1) = rs.x.span();
                let rb = (x1 - x0) * usize::from(c);
                let size = (ow as usize, oh as usize);
                let (m, a) = (&rs.mid, &rs.x);
                horizontal_scalar(
                    m,
                    rb,
                    x0,
                    a,
                    usize::from(c),
                    size,
                    0..size.0,
                    Out::Packed,
                    &mut scalar,
                );
                assert_eq!(packed, scalar, "box {i} c {c}: SIMD and scalar differ");
                // and the vertical pass's SIMD part computes the scalar formula
                let t = rs.y.taps;
                let stride = w as usize * usize::from(c);
                for (yo, &sy) in rs.y.start.iter().enumerate() {
                    for j in 0..rb {
                        let mut acc = HALF;
                        for k in 0..t {
                            let v = src[(sy as usize + k) * stride + x0 * usize::from(c) + j];
                            acc += i32::from(v) * i32::from(rs.y.weights[yo * t + k]);
                        }
                        let want = (acc >> BITS).clamp(0, 255) as u8;
                        assert_eq!(rs.mid[yo * rb + j], want, "box {i} c {c} mid {yo},{j}");
                    }
                }
                for flip in [false, true] {
                    let mut planes = vec![0u8; n];
                    rs.resize_planes(px, crop, ow, oh, flip, &mut planes)
                        .unwrap();
                    crate::layout::assert_planes_of(
                        &planes,
                        &packed,
                        (ow as usize, oh as usize, usize::from(c)),
                        flip,
                        &format!("box {i}"),
                    );
                }
            }
        }
    }

    #[test]
    fn flat_images_stay_flat_and_bad_sizes_are_errors() {
        let src = vec![200u8; 90 * 70 * 3];
        let px = PixelsRef {
            width: 90,
            height: 70,
            channels: 3,
            data: &src,
        };
        let mut out = vec![0u8; 31 * 29 * 3];
        let crop = Crop {
            x: 3.7,
            y: 1.1,
            w: 80.2,
            h: 60.9,
        };
        Resizer::new().resize(px, crop, 31, 29, &mut out).unwrap();
        assert!(out.iter().all(|&v| v == 200));
        assert!(
            Resizer::new()
                .resize(px, crop, 31, 29, &mut out[1..])
                .is_err()
        );
        let four = PixelsRef {
            width: 9,
            height: 7,
            channels: 4,
            data: &[0u8; 9 * 7 * 4],
        };
        assert!(
            Resizer::new()
                .resize(four, crop, 2, 2, &mut [0u8; 16])
                .is_err()
        );
        let short = PixelsRef {
            width: 90,
            height: 70,
            channels: 3,
            data: &src[1..],
        };
        assert!(
            Resizer::new()
                .resize(short, crop, 31, 29, &mut out)
                .is_err()
        );
    }
}
