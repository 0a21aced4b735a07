//! A generator of sample image folders: photograph-like JPEGs (smooth gradients, shapes, texture
//! and noise, so they compress like real photos rather than flat colour) in class sub-folders. The
//! demo and the tests use it; nothing is downloaded.

use std::path::Path;

/// What to generate.
#[derive(Debug, Clone, Copy)]
pub struct SampleSpec {
    /// Number of images.
    pub images: usize,
    /// Number of classes (sub-folders).
    pub classes: usize,
    /// Shorter and longer side ranges are drawn around these (ImageNet-like: ~500×375).
    pub width: u16,
    /// Height of the base size.
    pub height: u16,
    /// JPEG quality (1..=100).
    pub quality: u8,
    /// Seed: the same seed gives the same files.
    pub seed: u64,
}

impl Default for SampleSpec {
    fn default() -> Self {
        SampleSpec {
            images: 1000,
            classes: 10,
            width: 500,
            height: 375,
            quality: 90,
            seed: 0,
        }
    }
}

/// SplitMix64: a tiny, well-mixed generator; enough for test pictures.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// One picture of `w`×`h` as RGB bytes.
fn picture(w: u16, h: u16, rng: &mut Rng) -> Vec<u8> {
    let (w, h) = (usize::from(w), usize::from(h));
    let base: [f32; 3] = [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0];
    let grad: [f32; 3] = [rng.unit() - 0.5, rng.unit() - 0.5, rng.unit() - 0.5];
    let freq = 0.01 + rng.unit() * 0.05;
    let circles: Vec<(f32, f32, f32, [f32; 3])> = (0..4)
        .map(|_| {
            (
                rng.unit() * w as f32,
                rng.unit() * h as f32,
                10.0 + rng.unit() * (w.min(h) as f32 / 3.0),
                [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0],
            )
        })
        .collect();
    let mut px = vec![0u8; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (x as f32, y as f32);
            let wave = ((fx * freq).sin() * (fy * freq * 1.3).cos()) * 30.0;
            let noise = (rng.next() & 0x1F) as f32 - 16.0;
            let mut c = [0f32; 3];
            for k in 0..3 {
                c[k] = base[k] + grad[k] * (fx + fy) * 0.4 + wave + noise;
            }
            for (cx, cy, r, col) in &circles {
                let d2 = (fx - cx).powi(2) + (fy - cy).powi(2);
                if d2 < r * r {
                    for k in 0..3 {
                        c[k] = 0.5 * c[k] + 0.5 * col[k];
                    }
                }
            }
            let o = (y * w + x) * 3;
            for k in 0..3 {
                px[o + k] = c[k].clamp(0.0, 255.0) as u8;
            }
        }
    }
    px
}

/// Write `spec.images` JPEGs into `out/class_NNN/NNNNNN.jpg`. Returns the bytes written.
pub fn write_image_folder(out: &Path, spec: SampleSpec) -> std::io::Result<u64> {
    let classes = spec.classes.max(1);
    for c in 0..classes {
        std::fs::create_dir_all(out.join(format!("class_{c:03}")))?;
    }
    use rayon::prelude::*;
    (0..spec.images)
        .into_par_iter()
        .map(|i| write_one(out, spec, classes, i))
        .try_reduce(|| 0, |a, b| Ok(a + b))
}

fn write_one(out: &Path, spec: SampleSpec, classes: usize, i: usize) -> std::io::Result<u64> {
    {
        let mut rng = Rng(spec.seed ^ (i as u64).wrapping_mul(0xA076_1D64_78BD_642F));
        // sizes vary by up to ±30% around the base, and half the images are portrait
        let jitter = |b: u16, r: &mut Rng| -> u16 {
            (f32::from(b) * (0.7 + 0.6 * r.unit())).max(8.0) as u16
        };
        let (mut w, mut h) = (jitter(spec.width, &mut rng), jitter(spec.height, &mut rng));
        if rng.below(2) == 1 {
            std::mem::swap(&mut w, &mut h);
        }
        let px = picture(w, h, &mut rng);
        let mut jpeg = Vec::new();
        jpeg_encoder::Encoder::new(&mut jpeg, spec.quality)
            .encode(&px, w, h, jpeg_encoder::ColorType::Rgb)
            .map_err(std::io::Error::other)?;
        let path = out
            .join(format!("class_{:03}", i % classes))
            .join(format!("{i:06}.jpg"));
        std::fs::write(path, &jpeg)?;
        Ok(jpeg.len() as u64)
    }
}

/// A copy of `jpeg` whose frame header declares `width` × `height` (its data stays that of the
/// small image): a few kilobytes that claim to be a huge image, for testing pixel limits without
/// the memory a real one needs. None when `jpeg` has no frame header.
pub fn with_declared_size(jpeg: &[u8], width: u16, height: u16) -> Option<Vec<u8>> {
    let info = crate::jpeg::parse_header(jpeg).ok()?;
    // the frame header: FF Cn, length (2), precision (1), height (2), width (2)
    let sof = (2..jpeg.len().saturating_sub(8)).find(|&i| {
        jpeg[i] == 0xFF
            && matches!(jpeg[i + 1], 0xC0..=0xCF)
            && !matches!(jpeg[i + 1], 0xC4 | 0xC8 | 0xCC)
            && jpeg[i + 5..i + 9]
                == [info.height.to_be_bytes(), info.width.to_be_bytes()].concat()[..]
    })?;
    let mut out = jpeg.to_vec();
    out[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    out[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_declared_size_is_what_the_header_says() {
        let tmp = tempfile::tempdir().unwrap();
        let spec = SampleSpec {
            images: 1,
            classes: 1,
            width: 16,
            height: 8,
            quality: 70,
            seed: 1,
        };
        write_image_folder(tmp.path(), spec).unwrap();
        let small = std::fs::read(tmp.path().join("class_000/000000.jpg")).unwrap();
        let huge = with_declared_size(&small, 20000, 30000).unwrap();
        let h = crate::jpeg::parse_header(&huge).unwrap();
        assert_eq!((h.width, h.height), (20000, 30000));
        assert_eq!(huge.len(), small.len());
        assert!(with_declared_size(b"not a jpeg", 1, 1).is_none());
    }
}
