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
