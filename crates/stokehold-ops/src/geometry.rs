//! Where to crop: torchvision-compatible RandomResizedCrop parameters and centre crops, in source
//! pixel coordinates.

/// A crop box in source pixels (fractional edges allowed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Crop {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub w: f64,
    /// Height.
    pub h: f64,
}

/// Random numbers for the pipeline's choices (the engine passes the sample's generator).
pub trait Random {
    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64;
    /// Uniform integer in 0..=n.
    fn int_inclusive(&mut self, n: u64) -> u64;
}

/// A small seeded [`Random`] (a 64-bit LCG) for tests, benchmarks and fuzzing; the engine passes
/// each sample's own generator instead.
#[derive(Debug, Clone)]
pub struct SeededRandom(pub u64);

impl Random for SeededRandom {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
    fn int_inclusive(&mut self, n: u64) -> u64 {
        ((self.uniform(0.0, 1.0) * (n as f64 + 1.0)) as u64).min(n)
    }
}

/// torchvision's `RandomResizedCrop.get_params`: up to 10 tries of an area fraction from `scale`
/// and a log-uniform aspect ratio from `ratio`, then a centre crop clamped to `ratio`.
pub fn random_resized_crop(
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
    rng: &mut dyn Random,
) -> Crop {
    let (fw, fh) = (f64::from(width), f64::from(height));
    let area = fw * fh;
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * rng.uniform(scale.0, scale.1);
        let aspect = rng.uniform(lr0, lr1).exp();
        let w = (target * aspect).sqrt().round();
        let h = (target / aspect).sqrt().round();
        if w > 0.0 && h > 0.0 && w <= fw && h <= fh {
            let y = rng.int_inclusive((fh - h) as u64) as f64;
            let x = rng.int_inclusive((fw - w) as u64) as f64;
            return Crop { x, y, w, h };
        }
    }
    // fallback: the whole image, cut to the ratio range
    let in_ratio = fw / fh;
    let (w, h) = if in_ratio < ratio.0 {
        (fw, (fw / ratio.0).round())
    } else if in_ratio > ratio.1 {
        ((fh * ratio.1).round(), fh)
    } else {
        (fw, fh)
    };
    Crop {
        x: ((fw - w) / 2.0).floor(),
        y: ((fh - h) / 2.0).floor(),
        w,
        h,
    }
}

/// `Resize(shorter)` then `CenterCrop(out_h, out_w)`, expressed as one crop of the source: the
/// region that, resized by the shorter-side factor, becomes the centre crop.
pub fn resize_center_crop(width: u32, height: u32, shorter: u32, out_w: u32, out_h: u32) -> Crop {
    let (fw, fh) = (f64::from(width), f64::from(height));
    let f = f64::from(shorter) / fw.min(fh);
    let (rw, rh) = ((fw * f).round(), (fh * f).round());
    let (cw, ch) = (f64::from(out_w).min(rw), f64::from(out_h).min(rh));
    let (left, top) = (((rw - cw) / 2.0).round(), ((rh - ch) / 2.0).round());
    Crop {
        x: left / f,
        y: top / f,
        w: cw / f,
        h: ch / f,
    }
}

/// The whole image.
pub fn full(width: u32, height: u32) -> Crop {
    Crop {
        x: 0.0,
        y: 0.0,
        w: f64::from(width),
        h: f64::from(height),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_crops_stay_inside_and_respect_the_ranges() {
        let mut rng = SeededRandom(1);
        for (w, h) in [(500u32, 375u32), (375, 500), (32, 32), (1, 1), (4000, 30)] {
            for _ in 0..500 {
                let c = random_resized_crop(w, h, (0.08, 1.0), (0.75, 4.0 / 3.0), &mut rng);
                assert!(
                    c.x >= 0.0 && c.y >= 0.0 && c.w >= 1.0 && c.h >= 1.0,
                    "{c:?}"
                );
                assert!(
                    c.x + c.w <= f64::from(w) && c.y + c.h <= f64::from(h),
                    "{w}x{h}: {c:?}"
                );
            }
        }
    }

    #[test]
    fn center_crop_maps_back_to_the_source() {
        // 500x375, shorter side to 256 (factor 0.6827), centre 224: the source box is 328x328
        let c = resize_center_crop(500, 375, 256, 224, 224);
        assert!((c.w - 224.0 / (256.0 / 375.0)).abs() < 1e-9);
        assert!(
            (c.x + c.w / 2.0 - 250.0).abs() < 1.0 && (c.y + c.h / 2.0 - 187.5).abs() < 1.0,
            "{c:?}"
        );
    }
}
