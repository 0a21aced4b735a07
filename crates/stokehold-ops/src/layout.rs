//! Writing packed 8-bit pixels into an output slot: optional horizontal flip, CHW or HWC layout,
//! u8 or normalised f32/f16/bf16, in one pass.

use half::{bf16, f16};

use crate::error::{OpsError, Result};

/// Element type of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutDType {
    /// 0..=255, as decoded.
    U8,
    /// `(v / 255 - mean) / std`.
    F32,
    /// As F32, stored as IEEE half.
    F16,
    /// As F32, stored as bfloat16.
    BF16,
}

impl OutDType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            OutDType::U8 => 1,
            OutDType::F32 => 4,
            OutDType::F16 | OutDType::BF16 => 2,
        }
    }
}

/// How to lay out the output.
#[derive(Debug, Clone, PartialEq)]
pub struct OutSpec {
    /// Channels first (`[C, H, W]`, PyTorch's layout) or last (`[H, W, C]`).
    pub chw: bool,
    /// Element type.
    pub dtype: OutDType,
    /// Per-channel mean, for float outputs (on the 0..1 scale).
    pub mean: [f32; 3],
    /// Per-channel standard deviation, for float outputs.
    pub std: [f32; 3],
}

impl Default for OutSpec {
    fn default() -> Self {
        OutSpec {
            chw: true,
            dtype: OutDType::U8,
            mean: [0.0; 3],
            std: [1.0; 3],
        }
    }
}

/// Pixels per block of the RGB de-interleave: fixed-size blocks let the compiler use vector
/// shuffles (a per-pixel loop runs at a third of the speed).
const BLOCK: usize = 16;

/// Split one packed RGB row into its three planes' rows, mirrored when `flip`.
fn deinterleave_row(row: &[u8], r: &mut [u8], g: &mut [u8], b: &mut [u8], flip: bool) {
    let w = r.len();
    let full = w / BLOCK;
    for j in 0..full {
        let p: &[u8; 3 * BLOCK] = row[j * 3 * BLOCK..(j + 1) * 3 * BLOCK]
            .try_into()
            .expect("block size");
        let (mut rb, mut gb, mut bb) = ([0u8; BLOCK], [0u8; BLOCK], [0u8; BLOCK]);
        for i in 0..BLOCK {
            rb[i] = p[3 * i];
            gb[i] = p[3 * i + 1];
            bb[i] = p[3 * i + 2];
        }
        if flip {
            rb.reverse();
            gb.reverse();
            bb.reverse();
            let d = w - (j + 1) * BLOCK;
            r[d..d + BLOCK].copy_from_slice(&rb);
            g[d..d + BLOCK].copy_from_slice(&gb);
            b[d..d + BLOCK].copy_from_slice(&bb);
        } else {
            let d = j * BLOCK;
            r[d..d + BLOCK].copy_from_slice(&rb);
            g[d..d + BLOCK].copy_from_slice(&gb);
            b[d..d + BLOCK].copy_from_slice(&bb);
        }
    }
    for x in full * BLOCK..w {
        let d = if flip { w - 1 - x } else { x };
        r[d] = row[3 * x];
        g[d] = row[3 * x + 1];
        b[d] = row[3 * x + 2];
    }
}

/// Write `src` (packed `w`×`h`×`c`) into `slot`, flipped horizontally when `flip`.
pub fn write(
    src: &[u8],
    w: usize,
    h: usize,
    c: usize,
    flip: bool,
    spec: &OutSpec,
    slot: &mut [u8],
) -> Result<()> {
    let n = w * h * c;
    if src.len() != n || slot.len() != n * spec.dtype.size() {
        return Err(OpsError::Invalid(format!(
            "layout of a {w}x{h}x{c} image: {} source bytes and a {}-byte slot",
            src.len(),
            slot.len()
        )));
    }
    // (destination element index, source element index) for every element
    let index = |y: usize, x: usize, ch: usize| -> (usize, usize) {
        let sx = if flip { w - 1 - x } else { x };
        let s = (y * w + sx) * c + ch;
        let d = if spec.chw {
            (ch * h + y) * w + x
        } else {
            (y * w + x) * c + ch
        };
        (d, s)
    };
    match spec.dtype {
        OutDType::U8 => {
            if !flip && !spec.chw {
                slot.copy_from_slice(src);
                return Ok(());
            }
            if spec.chw && c == 3 {
                // one pass over each source row, writing the three planes' rows
                let plane = w * h;
                let (r_plane, rest) = slot.split_at_mut(plane);
                let (g_plane, b_plane) = rest.split_at_mut(plane);
                for y in 0..h {
                    let row = &src[y * w * 3..(y + 1) * w * 3];
                    let (r, g, b) = (
                        &mut r_plane[y * w..(y + 1) * w],
                        &mut g_plane[y * w..(y + 1) * w],
                        &mut b_plane[y * w..(y + 1) * w],
                    );
                    deinterleave_row(row, r, g, b, flip);
                }
            } else if spec.chw {
                // channel-major loops: contiguous writes
                for ch in 0..c {
                    for y in 0..h {
                        let row = &src[y * w * c..(y + 1) * w * c];
                        let dst = &mut slot[(ch * h + y) * w..(ch * h + y + 1) * w];
                        if flip {
                            for (x, d) in dst.iter_mut().enumerate() {
                                *d = row[(w - 1 - x) * c + ch];
                            }
                        } else {
                            for (x, d) in dst.iter_mut().enumerate() {
                                *d = row[x * c + ch];
                            }
                        }
                    }
                }
            } else {
                for y in 0..h {
                    for x in 0..w {
                        for ch in 0..c {
                            let (d, s) = index(y, x, ch);
                            slot[d] = src[s];
                        }
                    }
                }
            }
        }
        dt => {
            let scale: Vec<f32> = (0..c)
                .map(|ch| 1.0 / (255.0 * spec.std[ch.min(2)]))
                .collect();
            let shift: Vec<f32> = (0..c)
                .map(|ch| spec.mean[ch.min(2)] / spec.std[ch.min(2)])
                .collect();
            for y in 0..h {
                for x in 0..w {
                    for ch in 0..c {
                        let (d, s) = index(y, x, ch);
                        let v = f32::from(src[s]) * scale[ch] - shift[ch];
                        match dt {
                            OutDType::F32 => {
                                slot[4 * d..4 * d + 4].copy_from_slice(&v.to_le_bytes())
                            }
                            OutDType::F16 => slot[2 * d..2 * d + 2]
                                .copy_from_slice(&f16::from_f32(v).to_le_bytes()),
                            OutDType::BF16 => slot[2 * d..2 * d + 2]
                                .copy_from_slice(&bf16::from_f32(v).to_le_bytes()),
                            OutDType::U8 => unreachable!("handled above"),
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // a 2x2 RGB image: pixel (y, x) has channels (10y+x, 100+10y+x, 200+10y+x)
    fn img() -> Vec<u8> {
        let mut v = Vec::new();
        for y in 0..2u8 {
            for x in 0..2u8 {
                v.extend([10 * y + x, 100 + 10 * y + x, 200 + 10 * y + x]);
            }
        }
        v
    }

    #[test]
    fn chw_hwc_and_flip() {
        let mut out = vec![0u8; 12];
        write(&img(), 2, 2, 3, false, &OutSpec::default(), &mut out).unwrap();
        assert_eq!(out, [0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211]);
        write(&img(), 2, 2, 3, true, &OutSpec::default(), &mut out).unwrap();
        assert_eq!(out, [1, 0, 11, 10, 101, 100, 111, 110, 201, 200, 211, 210]);
        let hwc = OutSpec {
            chw: false,
            ..OutSpec::default()
        };
        write(&img(), 2, 2, 3, true, &hwc, &mut out).unwrap();
        assert_eq!(&out[..6], &[1, 101, 201, 0, 100, 200]);
    }

    #[test]
    fn normalised_floats() {
        let spec = OutSpec {
            dtype: OutDType::F32,
            mean: [0.5, 0.5, 0.5],
            std: [0.25, 0.25, 0.25],
            ..OutSpec::default()
        };
        let mut out = vec![0u8; 48];
        write(&img(), 2, 2, 3, false, &spec, &mut out).unwrap();
        let f: Vec<f32> = out
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert!((f[0] - (0.0 / 255.0 - 0.5) / 0.25).abs() < 1e-6);
        assert!((f[11] - (211.0 / 255.0 - 0.5) / 0.25).abs() < 1e-5);
        let half = OutSpec {
            dtype: OutDType::BF16,
            ..spec
        };
        let mut out = vec![0u8; 24];
        write(&img(), 2, 2, 3, false, &half, &mut out).unwrap();
        let b = bf16::from_le_bytes([out[22], out[23]]).to_f32();
        assert!((b - (211.0 / 255.0 - 0.5) / 0.25).abs() < 0.02);
        assert!(write(&img(), 2, 2, 3, false, &spec, &mut [0u8; 47]).is_err());
    }
}

/// Assert that `planes` (`[c, h, w]`) holds `packed` (`[h, w, c]`), each row mirrored when
/// `flip`: the definition of the CHW output that the fast paths are tested against.
#[cfg(test)]
pub(crate) fn assert_planes_of(
    planes: &[u8],
    packed: &[u8],
    (w, h, c): (usize, usize, usize),
    flip: bool,
    what: &str,
) {
    for y in 0..h {
        for x in 0..w {
            let sx = if flip { w - 1 - x } else { x };
            for ch in 0..c {
                assert_eq!(
                    planes[(ch * h + y) * w + x],
                    packed[(y * w + sx) * c + ch],
                    "{what} flip {flip} at {x},{y} channel {ch}"
                );
            }
        }
    }
}

#[cfg(test)]
mod deinterleave_tests {
    use super::*;

    #[test]
    fn blocked_rgb_planes_match_the_per_pixel_definition_at_every_width() {
        for w in [1usize, 2, 15, 16, 17, 31, 33, 47, 224, 225] {
            let h = 3;
            let src: Vec<u8> = (0..w * h * 3).map(|i| (i * 37 + i / 7) as u8).collect();
            for flip in [false, true] {
                let mut slot = vec![0u8; w * h * 3];
                write(&src, w, h, 3, flip, &OutSpec::default(), &mut slot).unwrap();
                assert_planes_of(&slot, &src, (w, h, 3), flip, &format!("w {w}"));
            }
        }
    }
}
