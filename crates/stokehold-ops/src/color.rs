//! Colour operations on packed 8-bit RGB: brightness, contrast, saturation (torchvision's
//! definitions), grayscale.

use crate::jpeg::luma;

/// Multiply every value by `factor` (brightness).
pub fn brightness(px: &mut [u8], factor: f32) {
    for v in px {
        *v = (f32::from(*v) * factor).round().clamp(0.0, 255.0) as u8;
    }
}

/// Blend with the mean luma (contrast): `mean + factor * (v - mean)`.
pub fn contrast(px: &mut [u8], factor: f32) {
    let n = px.len() / 3;
    if n == 0 {
        return;
    }
    let sum: u64 = px
        .chunks_exact(3)
        .map(|p| u64::from(luma(p[0], p[1], p[2])))
        .sum();
    let mean = sum as f32 / n as f32;
    for v in px {
        *v = (mean + factor * (f32::from(*v) - mean))
            .round()
            .clamp(0.0, 255.0) as u8;
    }
}

/// Blend each pixel with its own luma (saturation).
pub fn saturation(px: &mut [u8], factor: f32) {
    for p in px.chunks_exact_mut(3) {
        let l = f32::from(luma(p[0], p[1], p[2]));
        for v in p {
            *v = (l + factor * (f32::from(*v) - l)).round().clamp(0.0, 255.0) as u8;
        }
    }
}

/// RGB → one channel of luma, in place; returns the new length.
pub fn to_gray(px: &mut [u8]) -> usize {
    let n = px.len() / 3;
    for i in 0..n {
        px[i] = luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ycc_conversion_is_jfif_and_the_same_with_and_without_avx2() {
        // grey stays grey; pure chroma extremes clamp; the AVX2 build computes the same bytes
        let n = 4096;
        let y: Vec<u8> = (0..n).map(|i| (i * 7 % 256) as u8).collect();
        let cb: Vec<u8> = (0..n).map(|i| (i * 13 % 256) as u8).collect();
        let cr: Vec<u8> = (0..n).map(|i| (i * 29 % 256) as u8).collect();
        let mut fast = vec![0u8; 3 * n];
        let mut plain = vec![0u8; 3 * n];
        ycc_to_rgb_planes(&y, &cb, &cr, &mut fast);
        ycc(&y, &cb, &cr, &mut plain);
        assert_eq!(fast, plain);
        let mut one = [0u8; 3];
        ycc_to_rgb_planes(&[128], &[128], &[128], &mut one);
        assert_eq!(one, [128, 128, 128]);
        ycc_to_rgb_planes(&[76], &[85], &[255], &mut one); // JFIF red
        assert!(one[0] >= 253 && one[1] <= 2 && one[2] <= 2, "{one:?}");
        ycc_to_rgb_planes(&[255], &[255], &[0], &mut one);
        assert_eq!((one[0], one[2]), (76, 255), "clamped");
    }

    #[test]
    fn ycc_conversion_is_within_one_level_of_the_exact_jfif_transform() {
        // every chroma pair, at luma levels where clamping and rounding both show
        let cb: Vec<u8> = (0..65536).map(|i| (i >> 8) as u8).collect();
        let cr: Vec<u8> = (0..65536).map(|i| i as u8).collect();
        let mut rgb = vec![0u8; 3 * cb.len()];
        for level in [0u8, 1, 77, 128, 200, 254, 255] {
            let y = vec![level; cb.len()];
            ycc_to_rgb_planes(&y, &cb, &cr, &mut rgb);
            for i in 0..cb.len() {
                let (yy, u, v) = (
                    f64::from(level),
                    f64::from(cb[i]) - 128.0,
                    f64::from(cr[i]) - 128.0,
                );
                let exact = [
                    yy + 1.402 * v,
                    yy - 0.344_136 * u - 0.714_136 * v,
                    yy + 1.772 * u,
                ];
                for (c, e) in exact.iter().enumerate() {
                    let got = f64::from(rgb[c * cb.len() + i]);
                    assert!(
                        (got - e.round().clamp(0.0, 255.0)).abs() <= 1.0,
                        "Y {level} Cb {} Cr {}: channel {c} {got} vs {e}",
                        cb[i],
                        cr[i]
                    );
                }
            }
        }
    }

    #[test]
    fn identities_and_extremes() {
        let orig = vec![10u8, 100, 250, 0, 0, 0, 255, 255, 255];
        for f in [brightness, contrast, saturation] {
            let mut p = orig.clone();
            f(&mut p, 1.0);
            assert_eq!(p, orig);
        }
        let mut p = orig.clone();
        brightness(&mut p, 0.0);
        assert!(p.iter().all(|&v| v == 0));
        let mut p = orig.clone();
        saturation(&mut p, 0.0);
        assert!(p.chunks(3).all(|c| c[0] == c[1] && c[1] == c[2]));
        let mut p = orig.clone();
        assert_eq!(to_gray(&mut p), 3);
        assert_eq!(&p[..3], &[luma(10, 100, 250), 0, 255]);
    }
}

/// JFIF YCbCr → RGB on planes: `y`, `cb`, `cr` of `n` bytes each into `rgb` (`3n` bytes: the R, G
/// and B planes), with libjpeg-turbo's SIMD formulation of the JFIF coefficients in 16-bit lanes
/// (each product rounded to nearest, then clamped; within one level of the exact transform).
/// Compiled twice, with and without AVX2 (chosen at run time); both compute the same bytes.
pub fn ycc_to_rgb_planes(y: &[u8], cb: &[u8], cr: &[u8], rgb: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected at run time just above.
        unsafe { ycc_avx2(y, cb, cr, rgb) };
        return;
    }
    ycc(y, cb, cr, rgb);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn ycc_avx2(y: &[u8], cb: &[u8], cr: &[u8], rgb: &mut [u8]) {
    ycc(y, cb, cr, rgb);
}

/// `round(x * c / 65536)` for |x| ≤ 128, in a form the compiler turns into `pmulhw` on 16-bit
/// lanes: the high half of `2x * c`, plus one, halved.
#[inline(always)]
fn mul_q16(x: i16, c: i16) -> i16 {
    let hi = ((i32::from(x * 2) * i32::from(c)) >> 16) as i16;
    (hi + 1) >> 1
}

#[inline(always)]
fn ycc(y: &[u8], cb: &[u8], cr: &[u8], rgb: &mut [u8]) {
    // R = Y + Cr + 0.40200 Cr; G = Y - 0.34414 Cb + 0.28586 Cr - Cr; B = Y + 2 Cb - 0.22800 Cb
    // (the fractions of 65536: 26345, -22554, 18734, -14942), as libjpeg-turbo's SIMD code does,
    // so every product fits 16 bits.
    let n = y.len();
    let (r, rest) = rgb.split_at_mut(n);
    let (g, b) = rest.split_at_mut(n);
    let planes = r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut());
    for ((((r, g), b), &yy), (&u, &v)) in planes.zip(y).zip(cb.iter().zip(cr)) {
        let yy = i16::from(yy);
        let (u, v) = (i16::from(u) - 128, i16::from(v) - 128);
        *r = (yy + v + mul_q16(v, 26345)).clamp(0, 255) as u8;
        *g = (yy + mul_q16(u, -22554) + mul_q16(v, 18734) - v).clamp(0, 255) as u8;
        *b = (yy + 2 * u + mul_q16(u, -14942)).clamp(0, 255) as u8;
    }
}
