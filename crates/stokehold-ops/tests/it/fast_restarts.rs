//! Our patch to libjpeg-turbo (vendor/turbojpeg-sys/STOKEHOLD.md) keeps the fast Huffman decoder
//! on inside restart intervals. It must change nothing but speed: every image, restart-marked as
//! `stokehold pack` does, and thousands of damaged variants decode to the same pixels or the same
//! error with the patch switched on and off (upstream's behaviour), in one binary.
//!
//! The switch is process-wide, so everything here runs in one test (this file is its own
//! process, and nothing else in it decodes concurrently).

use stokehold_ops::fuzzing::fuzz_fast_restarts;
use stokehold_ops::jpeg::{Decoder, Pixels, Scale, patched_huffman_decoding, with_restarts};
use stokehold_ops::restart::RestartIndex;

use crate::common;
use common::picture;

/// How to make one test JPEG.
#[derive(Clone, Copy)]
struct Spec {
    w: u16,
    h: u16,
    seed: u64,
    noise: u64,
    quality: u8,
    progressive: bool,
    sampling: jpeg_encoder::SamplingFactor,
    gray: bool,
}

fn encode(s: Spec) -> Vec<u8> {
    let rgb = picture(s.w, s.h, s.seed, s.noise);
    let mut out = Vec::new();
    let mut e = jpeg_encoder::Encoder::new(&mut out, s.quality);
    e.set_progressive(s.progressive);
    e.set_sampling_factor(s.sampling);
    if s.gray {
        let luma: Vec<u8> = rgb.chunks(3).map(|p| p[1]).collect();
        e.encode(&luma, s.w, s.h, jpeg_encoder::ColorType::Luma)
            .unwrap();
    } else {
        e.encode(&rgb, s.w, s.h, jpeg_encoder::ColorType::Rgb)
            .unwrap();
    }
    out
}

/// Test images: sizes that do and do not fill their last MCU, every common chroma sampling,
/// grayscale, progressive (rewritten by the transcoder), smooth and noisy, low and high quality.
fn images() -> Vec<(String, Vec<u8>)> {
    use jpeg_encoder::SamplingFactor as S;
    let mut v = Vec::new();
    let mut seed = 0;
    for (w, h) in [
        (224u16, 224u16),
        (500, 375),
        (97, 61),
        (16, 16),
        (333, 250),
        (8, 300),
    ] {
        let base = Spec {
            w,
            h,
            seed,
            noise: 32,
            quality: 90,
            progressive: false,
            sampling: S::R_4_4_4,
            gray: false,
        };
        for (sampling, name) in [
            (S::R_4_4_4, "444"),
            (S::R_4_2_0, "420"),
            (S::R_4_2_2, "422"),
        ] {
            for (noise, quality) in [(16, 90), (96, 97), (0, 50)] {
                seed += 1;
                v.push((
                    format!("{w}x{h} {name} noise {noise} q{quality}"),
                    encode(Spec {
                        seed,
                        noise,
                        quality,
                        sampling,
                        ..base
                    }),
                ));
            }
        }
        seed += 1;
        v.push((
            format!("{w}x{h} gray"),
            encode(Spec {
                seed,
                gray: true,
                ..base
            }),
        ));
        seed += 1;
        v.push((
            format!("{w}x{h} progressive"),
            encode(Spec {
                seed,
                progressive: true,
                sampling: S::R_4_2_0,
                ..base
            }),
        ));
    }
    for f in ["baseline.jpg", "progressive.jpg", "truncated.jpg"] {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/image")
            .join(f);
        v.push((f.to_string(), std::fs::read(p).unwrap()));
    }
    v
}

fn decode(d: &mut Decoder, data: &[u8]) -> Pixels {
    let mut px = Pixels::default();
    d.decode(data, Scale::FULL, None, false, 1 << 30, &mut px)
        .unwrap();
    px
}

/// Roughly where a JPEG's entropy-coded data lies: after its (first) SOS marker, before EOI.
fn entropy_coded(file: &[u8]) -> std::ops::Range<usize> {
    let scan = file.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
    scan + 2..file.len() - 2
}

#[test]
fn the_patched_decoder_gives_exactly_what_upstream_gives() {
    assert!(patched_huffman_decoding(), "the patch is on by default");
    let mut d = Decoder::new().unwrap();
    let mut marked_count = 0;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (name, src) in images() {
        eprintln!("{name}");
        // valid images: plain and restart-marked, full, scaled, cropped, every pipeline geometry
        fuzz_fast_restarts(&src);
        let Ok(marked) = with_restarts(&src) else {
            assert_eq!(name, "truncated.jpg", "only the cut file is refused");
            continue;
        };
        assert!(RestartIndex::parse(&marked).is_some(), "{name}");
        marked_count += 1;
        // and the marked file decodes, with the patch on, to the pixels of the file as given
        assert!(patched_huffman_decoding());
        let plain = decode(&mut d, &src);
        assert_eq!(decode(&mut d, &marked), plain, "{name}: same pixels");
        fuzz_fast_restarts(&marked);

        // damaged variants of the marked file (and some of the file as given, which the one-lookup
        // tables decode without restart markers): the same pixels or the same error either way
        for (file, variants) in [(&marked, 40), (&src, 12)] {
            let body = entropy_coded(file);
            for k in 0..variants {
                let mut m = file.clone();
                match k % 4 {
                    // a few random bytes of entropy-coded data changed
                    0 | 1 => {
                        for _ in 0..1 + rand() % 3 {
                            let at = body.start + (rand() as usize) % body.len();
                            m[at] = (rand() >> 24) as u8;
                        }
                    }
                    // one bit flipped
                    2 => {
                        let at = body.start + (rand() as usize) % body.len();
                        m[at] ^= 1 << (rand() % 8);
                    }
                    // cut short
                    _ => m.truncate(body.start + (rand() as usize) % body.len()),
                }
                fuzz_fast_restarts(&m);
            }
        }
        let body = entropy_coded(&marked);
        // a restart marker removed, and one duplicated
        if let Some(at) = marked[body.clone()]
            .windows(2)
            .position(|w| w[0] == 0xFF && (0xD0..=0xD7).contains(&w[1]))
        {
            let at = body.start + at;
            let mut cut = marked.clone();
            cut.drain(at..at + 2);
            fuzz_fast_restarts(&cut);
            let mut twice = marked.clone();
            twice.splice(at..at, marked[at..at + 2].to_vec());
            fuzz_fast_restarts(&twice);
        }
    }
    assert!(marked_count >= 40, "{marked_count} images restart-marked");
    assert!(patched_huffman_decoding(), "left switched on");
}
