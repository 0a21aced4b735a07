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
/// and B planes), with libjpeg's coefficients in 16-bit fixed point (rounded, clamped). Compiled
/// twice, with and without AVX2 (chosen at run time); both compute the same bytes.
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

#[inline(always)]
fn ycc(y: &[u8], cb: &[u8], cr: &[u8], rgb: &mut [u8]) {
    let n = y.len();
    let (r, rest) = rgb.split_at_mut(n);
    let (g, b) = rest.split_at_mut(n);
    let planes = r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut());
    for ((((r, g), b), &yy), (&u, &v)) in planes.zip(y).zip(cb.iter().zip(cr)) {
        let yy = i32::from(yy);
        let (u, v) = (i32::from(u) - 128, i32::from(v) - 128);
        *r = (yy + ((91881 * v + 32768) >> 16)).clamp(0, 255) as u8;
        *g = (yy + ((-22554 * u - 46802 * v + 32768) >> 16)).clamp(0, 255) as u8;
        *b = (yy + ((116130 * u + 32768) >> 16)).clamp(0, 255) as u8;
    }
}
