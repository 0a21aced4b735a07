//! Per-sample random numbers. Every random choice a transform makes comes from a [`SampleRng`]
//! seeded by (loader seed, epoch, sample id, column), so output never depends on which thread ran
//! the sample, or when.

/// SplitMix64's finaliser: a strong 64-bit mixer.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small, fast generator (xoshiro256++), seeded per sample.
#[derive(Debug, Clone)]
pub struct SampleRng {
    s: [u64; 4],
}

impl SampleRng {
    /// The generator for one (seed, epoch, sample, stream) tuple.
    pub fn for_sample(seed: u64, epoch: u64, id: u64, stream: u64) -> SampleRng {
        let mut x = mix64(seed ^ 0x5354_4F4B_4548_4F4C)
            ^ mix64(epoch.wrapping_add(0x9E37_79B9_7F4A_7C15))
            ^ mix64(id.wrapping_mul(0xD1B5_4A32_D192_ED03))
            ^ mix64(stream.wrapping_add(0x8CB9_2BA7_2F3D_8DD7));
        let mut s = [0u64; 4];
        for v in &mut s {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            *v = mix64(x);
        }
        SampleRng { s }
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let r = (self.s[0].wrapping_add(self.s[3]))
            .rotate_left(23)
            .wrapping_add(self.s[0]);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// A uniform float in [0, 1).
    #[inline]
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform float in [lo, hi).
    #[inline]
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit_f64()
    }

    /// True with probability `p`.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit_f64() < p
    }

    /// A uniform integer in 0..n (n > 0), without modulo bias worth mentioning for n < 2^32.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map(|_| SampleRng::for_sample(1, 2, 3, 0).next_u64())
            .collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        let x = SampleRng::for_sample(1, 2, 3, 0).next_u64();
        for other in [
            SampleRng::for_sample(0, 2, 3, 0),
            SampleRng::for_sample(1, 3, 3, 0),
            SampleRng::for_sample(1, 2, 4, 0),
            SampleRng::for_sample(1, 2, 3, 1),
        ] {
            assert_ne!(other.clone().next_u64(), x);
        }
    }

    #[test]
    fn uniform_values_stay_in_range_and_average_out() {
        let mut r = SampleRng::for_sample(9, 0, 0, 0);
        let n = 100_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let u = r.unit_f64();
            assert!((0.0..1.0).contains(&u));
            sum += u;
            assert!(r.below(7) < 7);
        }
        assert!((sum / n as f64 - 0.5).abs() < 0.01);
    }
}
