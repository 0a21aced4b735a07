//! The clip sampling rule: `Clip(frames=16, stride=2 | fps=8, start="random"|"uniform"|"all")`,
//! a pure function of (seed, sample id, the video's frame times) to the clips' timestamps, so
//! the same sample gives the same clip whatever the thread count or the order samples are read.

/// How a clip's frames are spaced.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Every `n`-th frame of the video (presentation order): frames `s, s+n, ..., s+(T-1)n`.
    Stride(u32),
    /// Timestamps `1/fps` seconds apart: `t0, t0 + 1/fps, ...`, each mapped to the frame played
    /// then (so a 30 fps video sampled at 8 fps skips frames unevenly, as any player does).
    Fps(f64),
}

/// Where clips start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// One clip, its start drawn uniformly from every start that fits, from (seed, sample id).
    Random,
    /// `n` clips with starts at the centres of `n` equal parts of the starts that fit (`n = 1`:
    /// the middle clip). No randomness.
    Uniform(u32),
    /// Every clip that fits, back to back without overlap, from the first frame.
    All,
}

/// A clip that does not fit, or a rule that makes no sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ClipError {
    /// The video is shorter than one clip.
    #[error("a clip of {frames} frames with {step} needs {needed}, the video has {available}")]
    TooShort {
        /// Frames per clip.
        frames: u32,
        /// The spacing, in words.
        step: String,
        /// What one clip needs (frames, or seconds).
        needed: String,
        /// What the video has.
        available: String,
    },
    /// A rule such as `frames=0`, `stride=0` or `fps=0`.
    #[error("invalid clip rule: {0}")]
    Invalid(String),
}

/// The sampling rule for clips of a video.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clip {
    /// Frames per clip (T).
    pub frames: u32,
    /// Their spacing.
    pub step: Step,
    /// Where clips start.
    pub start: Start,
}

/// SplitMix64's finaliser: a well-mixed 64-bit value from any input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The random value of (seed, sample): the same on every machine and thread.
fn draw(seed: u64, sample: u64) -> u64 {
    mix(mix(seed) ^ sample.rotate_left(17) ^ 0x636c_6970) // "clip"
}

impl Clip {
    /// A rule, checked: at least one frame, a stride of at least 1, a finite positive fps, at
    /// least one uniform clip.
    pub fn new(frames: u32, step: Step, start: Start) -> Result<Clip, ClipError> {
        if frames == 0 {
            return Err(ClipError::Invalid("frames must be at least 1".into()));
        }
        match step {
            Step::Stride(0) => return Err(ClipError::Invalid("stride must be at least 1".into())),
            Step::Fps(f) if !(f.is_finite() && f > 0.0) => {
                return Err(ClipError::Invalid(format!(
                    "fps must be a positive number, not {f}"
                )));
            }
            _ => {}
        }
        if start == Start::Uniform(0) {
            return Err(ClipError::Invalid("uniform needs at least 1 clip".into()));
        }
        Ok(Clip {
            frames,
            step,
            start,
        })
    }

    /// The timestamps (seconds) of the clips of sample `sample` under `seed`, for a video whose
    /// frames are presented at `frame_times` (seconds, ascending, at least one) and whose last
    /// frame ends at `end`. Each timestamp is one torchcodec's `get_frames_played_at` (and
    /// [`crate::VideoFile::frames_played_at`]) maps to the intended frame: with a stride, the
    /// frames' own presentation times.
    pub fn timestamps(
        &self,
        frame_times: &[f64],
        end: f64,
        seed: u64,
        sample: u64,
    ) -> Result<Vec<Vec<f64>>, ClipError> {
        let Some(&begin) = frame_times.first() else {
            return Err(self.too_short("frames".into(), "no frames".into()));
        };
        let t = u64::from(self.frames);
        match self.step {
            Step::Stride(stride) => {
                let n = frame_times.len() as u64;
                let span = (t - 1) * u64::from(stride) + 1;
                if span > n {
                    return Err(self.too_short(format!("{span} frames"), format!("{n} frames")));
                }
                let starts = n - span + 1; // >= 1
                let firsts: Vec<u64> = match self.start {
                    Start::Random => {
                        vec![((u128::from(draw(seed, sample)) * u128::from(starts)) >> 64) as u64]
                    }
                    Start::Uniform(k) => {
                        let k = u64::from(k);
                        (0..k).map(|i| (2 * i + 1) * starts / (2 * k)).collect()
                    }
                    Start::All => (0..n / span).map(|i| i * span).collect(),
                };
                Ok(firsts
                    .into_iter()
                    .map(|s| {
                        (0..t)
                            .map(|j| frame_times[(s + j * u64::from(stride)) as usize])
                            .collect()
                    })
                    .collect())
            }
            Step::Fps(fps) => {
                let length = (t - 1) as f64 / fps; // from the first timestamp to the last
                let room = end - begin - length; // starts lie in [begin, begin + room)
                if room.is_nan() || room <= 0.0 {
                    return Err(self.too_short(
                        format!("more than {length} s"),
                        format!("{} s", end - begin),
                    ));
                }
                let firsts: Vec<f64> = match self.start {
                    Start::Random => {
                        // 53 random bits: u in [0, 1)
                        let u = (draw(seed, sample) >> 11) as f64 / (1u64 << 53) as f64;
                        vec![begin + u * room]
                    }
                    Start::Uniform(k) => (0..k)
                        .map(|i| begin + room * (2 * i + 1) as f64 / (2 * k) as f64)
                        .collect(),
                    Start::All => {
                        let every = t as f64 / fps;
                        let count = (room / every).ceil().max(1.0) as u64;
                        (0..count).map(|i| begin + i as f64 * every).collect()
                    }
                };
                Ok(firsts
                    .into_iter()
                    .map(|t0| {
                        let times: Vec<f64> = (0..t).map(|j| t0 + j as f64 / fps).collect();
                        // rounding must not carry the last one to the end: then start earlier
                        if times.last().is_some_and(|&l| l >= end) {
                            (0..t).map(|j| begin + j as f64 / fps).collect()
                        } else {
                            times
                        }
                    })
                    .collect())
            }
        }
    }

    fn too_short(&self, needed: String, available: String) -> ClipError {
        ClipError::TooShort {
            frames: self.frames,
            step: match self.step {
                Step::Stride(s) => format!("stride {s}"),
                Step::Fps(f) => format!("fps {f}"),
            },
            needed,
            available,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(n: usize, fps: f64) -> Vec<f64> {
        (0..n).map(|i| i as f64 / fps).collect()
    }

    #[test]
    fn a_random_clip_is_a_function_of_seed_and_sample() {
        let t = times(250, 25.0);
        let c = Clip::new(16, Step::Stride(2), Start::Random).unwrap();
        let a = c.timestamps(&t, 10.0, 7, 3).unwrap();
        // the same (seed, sample) from another thread gives the same clip
        let b = std::thread::spawn(move || c.timestamps(&t, 10.0, 7, 3).unwrap())
            .join()
            .unwrap();
        assert_eq!(a, b);
        let t = times(250, 25.0);
        // stride 2 over the frames' own times
        let clip = &a[0];
        assert_eq!(clip.len(), 16);
        let s = t.iter().position(|&x| x == clip[0]).unwrap();
        for (j, &x) in clip.iter().enumerate() {
            assert_eq!(x, t[s + 2 * j]);
        }
        // the starts spread over every start that fits (250 - 31 + 1 = 220 of them)
        let starts: std::collections::BTreeSet<usize> = (0..2000)
            .map(|i| {
                let c = c.timestamps(&t, 10.0, 7, i).unwrap();
                t.iter().position(|&x| x == c[0][0]).unwrap()
            })
            .collect();
        assert_eq!(*starts.iter().next().unwrap(), 0);
        assert_eq!(*starts.iter().last().unwrap(), 219);
        assert!(starts.len() > 200, "{}", starts.len());
        // another seed, another clip (for most samples)
        let differ = (0..100)
            .filter(|&i| c.timestamps(&t, 10.0, 7, i) != c.timestamps(&t, 10.0, 8, i))
            .count();
        assert!(differ > 90, "{differ}");
    }

    #[test]
    fn uniform_and_all_clips_cover_the_video() {
        let t = times(100, 10.0);
        let c = Clip::new(10, Step::Stride(1), Start::All).unwrap();
        let all = c.timestamps(&t, 10.0, 0, 0).unwrap();
        assert_eq!(all.len(), 10);
        assert_eq!(all.concat(), t);
        let middle = Clip::new(10, Step::Stride(1), Start::Uniform(1))
            .unwrap()
            .timestamps(&t, 10.0, 0, 0)
            .unwrap();
        assert_eq!(middle[0][0], t[45]); // 91 starts, the middle one
        let three = Clip::new(4, Step::Fps(2.0), Start::Uniform(3))
            .unwrap()
            .timestamps(&t, 10.0, 0, 0)
            .unwrap();
        assert_eq!(three.len(), 3);
        for c in &three {
            assert!(c[0] >= 0.0 && c[3] < 10.0);
            assert!((c[1] - c[0] - 0.5).abs() < 1e-12);
        }
        let fps_all = Clip::new(4, Step::Fps(2.0), Start::All)
            .unwrap()
            .timestamps(&t, 10.0, 0, 0)
            .unwrap();
        assert_eq!(fps_all.len(), 5); // starts 0, 2, 4, 6, 8
        assert!(fps_all.iter().all(|c| c[3] < 10.0));
    }

    #[test]
    fn a_clip_longer_than_the_video_is_refused() {
        let t = times(20, 10.0);
        let e = Clip::new(16, Step::Stride(2), Start::Random)
            .unwrap()
            .timestamps(&t, 2.0, 0, 0)
            .unwrap_err();
        assert!(
            e.to_string().contains("31 frames") && e.to_string().contains("20 frames"),
            "{e}"
        );
        let e = Clip::new(16, Step::Fps(5.0), Start::Random)
            .unwrap()
            .timestamps(&t, 2.0, 0, 0)
            .unwrap_err();
        assert!(matches!(e, ClipError::TooShort { .. }), "{e}");
        assert!(Clip::new(0, Step::Stride(1), Start::All).is_err());
        assert!(Clip::new(1, Step::Stride(0), Start::All).is_err());
        assert!(Clip::new(1, Step::Fps(f64::NAN), Start::All).is_err());
        assert!(Clip::new(1, Step::Fps(0.0), Start::All).is_err());
        // random fps clips stay inside the video
        let c = Clip::new(8, Step::Fps(4.0), Start::Random).unwrap();
        for s in 0..500 {
            let ts = &c.timestamps(&t, 2.0, 1, s).unwrap()[0];
            assert!(ts[0] >= 0.0 && ts[7] < 2.0, "{ts:?}");
        }
    }
}
