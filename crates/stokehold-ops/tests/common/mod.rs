//! Helpers shared by the image integration tests.

/// A `w`×`h` RGB picture: gradients, a disc, and noise of `noise` levels (0: smooth), so the
/// entropy-coded data has short and long Huffman codes.
pub fn picture(w: u16, h: u16, seed: u64, noise: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let (cx, cy, r) = (
        (next() % u64::from(w)) as f32,
        (next() % u64::from(h)) as f32,
        5.0 + (next() % 60) as f32,
    );
    let mut px = Vec::with_capacity(usize::from(w) * usize::from(h) * 3);
    for y in 0..h {
        for x in 0..w {
            let (fx, fy) = (f32::from(x), f32::from(y));
            let wave = (fx * 0.05).sin() * (fy * 0.07).cos() * 40.0;
            let inside = (fx - cx).powi(2) + (fy - cy).powi(2) < r * r;
            for k in 0..3 {
                let base = 60.0 + 40.0 * k as f32 + fx * 0.2 + fy * 0.1 + wave;
                let grain = if noise == 0 { 0 } else { next() % noise };
                let v = if inside { 255.0 - base } else { base } + grain as f32;
                px.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    px
}
