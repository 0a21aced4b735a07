//! The faster one-pass restart-marker rewrite (issue #50) against the one it replaced
//! (`rst_reference`, kept as it was): on every input the same output byte for byte, or the same
//! refusal. Generated JPEGs of every chroma sampling the rewrite takes, grayscale, low to
//! lossless-like quality, standard and optimised Huffman tables, sizes that do and do not fill
//! their last MCU; files it refuses (progressive, already restart-marked); and damaged variants
//! (bit flips, overwritten bytes, truncations) of them, where both must agree on refusing too.

use proptest::prelude::*;
use stokehold_ops::rst_insert::insert_restarts;

use crate::common::picture;
use crate::rst_reference;

#[derive(Clone, Copy, Debug)]
struct Spec {
    w: u16,
    h: u16,
    seed: u64,
    noise: u64,
    quality: u8,
    sampling: u8,
    gray: bool,
    optimized: bool,
    progressive: bool,
    restart: u16,
}

const SAMPLINGS: [jpeg_encoder::SamplingFactor; 8] = {
    use jpeg_encoder::SamplingFactor as S;
    [
        S::F_1_1,
        S::F_2_1,
        S::F_1_2,
        S::F_2_2,
        S::F_4_1,
        S::F_4_2,
        S::F_1_4,
        S::F_2_4,
    ]
};

fn encode(s: Spec) -> Vec<u8> {
    let rgb = picture(s.w, s.h, s.seed, s.noise);
    let mut out = Vec::new();
    let mut e = jpeg_encoder::Encoder::new(&mut out, s.quality);
    e.set_sampling_factor(SAMPLINGS[usize::from(s.sampling) % SAMPLINGS.len()]);
    e.set_optimized_huffman_tables(s.optimized);
    e.set_progressive(s.progressive);
    if s.restart > 0 {
        e.set_restart_interval(s.restart);
    }
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

/// Both rewrites of `data`, which must agree; whether they rewrote it.
fn same(data: &[u8], what: &str) -> bool {
    let new = insert_restarts(data);
    let old = rst_reference::insert_restarts(data);
    assert!(
        new == old,
        "{what}: the rewrite {} where the reference {}",
        match &new {
            Some(v) => format!("gave {} bytes", v.len()),
            None => "refused".into(),
        },
        match &old {
            Some(v) => format!("gave {} bytes", v.len()),
            None => "refused".into(),
        }
    );
    new.is_some()
}

#[test]
fn the_rewrite_gives_what_the_reference_gives_on_generated_jpegs() {
    let mut rewritten = 0;
    let mut seed = 0;
    for (w, h) in [
        (500u16, 375u16),
        (97, 61),
        (16, 16),
        (8, 300),
        (333, 250),
        (1, 1),
    ] {
        for sampling in 0..SAMPLINGS.len() as u8 {
            for (quality, noise, optimized) in [
                (95u8, 40u64, false),
                (30, 0, false),
                (100, 90, false),
                (75, 10, true),
            ] {
                seed += 1;
                let s = Spec {
                    w,
                    h,
                    seed,
                    noise,
                    quality,
                    sampling,
                    gray: sampling == 0 && quality == 30,
                    optimized,
                    progressive: false,
                    restart: 0,
                };
                rewritten += usize::from(same(&encode(s), &format!("{s:?}")));
            }
        }
    }
    // both refuse some (optimised tables without a code for a DC difference that a restart
    // makes, some 4x samplings: the caller then transcodes); enough are rewritten to compare
    assert!(rewritten >= 60, "{rewritten} of 192 rewritten");
    // refused by both: progressive, already restart-marked
    for (progressive, restart) in [(true, 0), (false, 3)] {
        let s = Spec {
            w: 120,
            h: 90,
            seed: 7,
            noise: 20,
            quality: 90,
            sampling: 3,
            gray: false,
            optimized: false,
            progressive,
            restart,
        };
        assert!(!same(&encode(s), &format!("{s:?}")));
    }
}

#[test]
fn the_rewrite_gives_what_the_reference_gives_on_damaged_jpegs() {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut accepted, mut tried) = (0, 0);
    for (i, sampling) in [3u8, 0, 1, 4].into_iter().enumerate() {
        let src = encode(Spec {
            w: 160,
            h: 120,
            seed: 40 + i as u64,
            noise: 30,
            quality: 90,
            sampling,
            gray: false,
            optimized: i % 2 == 1,
            progressive: false,
            restart: 0,
        });
        for _ in 0..300 {
            let mut d = src.clone();
            let at = (next() % d.len() as u64) as usize;
            match next() % 4 {
                0 => d[at] ^= 1 << (next() % 8),
                1 => d[at] = next() as u8,
                2 => d.truncate(at),
                _ => {
                    // a run of bytes overwritten inside the entropy-coded data's likely range
                    let end = (at + 1 + (next() % 16) as usize).min(d.len());
                    for b in &mut d[at..end] {
                        *b = next() as u8;
                    }
                }
            }
            tried += 1;
            accepted += usize::from(same(&d, &format!("sampling {sampling}, damage at {at}")));
        }
    }
    // damage in the entropy-coded data often still parses: both must then give the same bytes
    assert!(accepted > tried / 10, "{accepted} of {tried} accepted");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_rewrite_gives_what_the_reference_gives(
        w in 1u16..260,
        h in 1u16..200,
        seed in any::<u64>(),
        noise in 0u64..100,
        quality in 1u8..=100,
        sampling in 0u8..8,
        gray in any::<bool>(),
        optimized in any::<bool>(),
    ) {
        let s = Spec { w, h, seed, noise, quality, sampling, gray, optimized, progressive: false, restart: 0 };
        same(&encode(s), &format!("{s:?}"));
    }
}
