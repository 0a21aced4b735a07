//! The image kernels on generated photograph-like JPEGs: decode, SIMD in use, the fused path
//! against the reference path (PSNR), limits, corrupt input, every layout and codec.

use stokehold_ops::decode::{decode_full, dimensions, sniff};
use stokehold_ops::jpeg::{Decoder, Pixels, Scale, simd_in_use};
use stokehold_ops::{Geometry, ImageOps, Jitter, OpsError, OutDType, OutSpec, Workspace, run};

use crate::common;

/// A deterministic photograph-like RGB image (gradients, waves, discs, noise).
fn picture(w: u16, h: u16, seed: u64) -> Vec<u8> {
    common::picture(w, h, seed, 16)
}

fn jpeg(w: u16, h: u16, seed: u64, progressive: bool) -> Vec<u8> {
    jpeg_sampled(
        w,
        h,
        seed,
        progressive,
        jpeg_encoder::SamplingFactor::R_4_4_4,
    )
}

/// With 4:2:0 chroma, as most photographs are.
fn jpeg420(w: u16, h: u16, seed: u64) -> Vec<u8> {
    jpeg_sampled(w, h, seed, false, jpeg_encoder::SamplingFactor::R_4_2_0)
}

fn jpeg_sampled(
    w: u16,
    h: u16,
    seed: u64,
    progressive: bool,
    sampling: jpeg_encoder::SamplingFactor,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = jpeg_encoder::Encoder::new(&mut out, 90);
    e.set_progressive(progressive);
    e.set_sampling_factor(sampling);
    e.encode(&picture(w, h, seed), w, h, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    out
}

use stokehold_ops::geometry::SeededRandom as Rng;

fn rrc(size: u32) -> ImageOps {
    ImageOps {
        geometry: Geometry::RandomResizedCrop {
            width: size,
            height: size,
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        },
        flip_p: 0.5,
        jitter: None,
        gray: false,
        out: OutSpec::default(),
        max_pixels: 100_000_000,
        fused: true,
    }
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    if mse == 0.0 {
        f64::INFINITY
    } else {
        10.0 * (255.0f64 * 255.0 / mse).log10()
    }
}

#[test]
fn libjpeg_turbo_is_linked_with_simd() {
    assert!(
        simd_in_use(),
        "the SIMD inverse DCT must be in use on this CPU"
    );
}

#[test]
fn full_decode_matches_the_encoded_picture() {
    let data = jpeg(120, 80, 1, false);
    let mut d = Decoder::new().unwrap();
    let h = d.header(&data).unwrap();
    assert_eq!((h.width, h.height, h.progressive), (120, 80, false));
    let mut px = Pixels::default();
    d.decode(&data, Scale::FULL, None, false, 1 << 30, &mut px)
        .unwrap();
    assert_eq!((px.width, px.height, px.channels), (120, 80, 3));
    assert!(
        psnr(&px.data, &picture(120, 80, 1)) > 30.0,
        "quality-90 round trip"
    );
    // the fast DCT gives nearly the same picture
    let mut fast = Decoder::new().unwrap();
    fast.set_fast(true).unwrap();
    let mut fpx = Pixels::default();
    fast.decode(&data, Scale::FULL, None, false, 1 << 30, &mut fpx)
        .unwrap();
    assert!(psnr(&fpx.data, &px.data) > 35.0);
    // scaled: 1/2 gives 60x40
    d.decode(&data, Scale(4), None, false, 1 << 30, &mut px)
        .unwrap();
    assert_eq!((px.width, px.height), (60, 40));
    let p = jpeg(64, 48, 2, true);
    assert!(d.header(&p).unwrap().progressive);
}

#[test]
fn the_fused_path_matches_full_decode_crop_resize() {
    // Same crops (same random draws) through both paths; the fused one decodes less, at a lower
    // DCT scale. The worst PSNR over 60 images and crops must stay above 30 dB.
    let mut ws = Workspace::new();
    let mut worst = f64::INFINITY;
    for seed in 0..60u64 {
        let (w, h) = if seed % 3 == 0 {
            (375, 500)
        } else {
            (500, 375)
        };
        let data = jpeg(w, h, seed, seed % 7 == 0);
        let fused = rrc(112);
        let reference = ImageOps {
            fused: false,
            ..fused.clone()
        };
        let mut a = vec![0u8; fused.slot_bytes()];
        let mut b = vec![0u8; fused.slot_bytes()];
        run(&fused, &data, &mut Rng(seed), &mut ws, &mut a).unwrap();
        run(&reference, &data, &mut Rng(seed), &mut ws, &mut b).unwrap();
        worst = worst.min(psnr(&a, &b));
    }
    assert!(worst >= 30.0, "worst PSNR {worst:.1} dB");
}

#[test]
fn same_draws_same_output_and_flip_mirrors() {
    let data = jpeg(200, 150, 3, false);
    let mut ws = Workspace::new();
    let ops = ImageOps {
        flip_p: 0.0,
        ..rrc(32)
    };
    let mut a = vec![0u8; ops.slot_bytes()];
    let mut b = vec![0u8; ops.slot_bytes()];
    run(&ops, &data, &mut Rng(9), &mut ws, &mut a).unwrap();
    run(&ops, &data, &mut Rng(9), &mut ws, &mut b).unwrap();
    assert_eq!(a, b);
    // flip_p = 1 with the same crop draws: a mirror image (the flip is drawn after the crop)
    let flipped = ImageOps {
        flip_p: 1.0,
        ..ops.clone()
    };
    run(&flipped, &data, &mut Rng(9), &mut ws, &mut b).unwrap();
    for c in 0..3 {
        for y in 0..32 {
            for x in 0..32 {
                assert_eq!(a[(c * 32 + y) * 32 + x], b[(c * 32 + y) * 32 + 31 - x]);
            }
        }
    }
}

#[test]
fn center_crop_layouts_dtypes_gray_and_jitter() {
    let data = jpeg(300, 200, 4, false);
    let mut ws = Workspace::new();
    let base = ImageOps {
        geometry: Geometry::ResizeCenterCrop {
            shorter: 64,
            width: 56,
            height: 48,
        },
        flip_p: 0.0,
        jitter: None,
        gray: false,
        out: OutSpec::default(),
        max_pixels: 1 << 30,
        fused: true,
    };
    assert_eq!(base.shape(), [3, 48, 56]);
    let mut chw = vec![0u8; base.slot_bytes()];
    run(&base, &data, &mut Rng(1), &mut ws, &mut chw).unwrap();
    let hwc_ops = ImageOps {
        out: OutSpec {
            chw: false,
            ..OutSpec::default()
        },
        ..base.clone()
    };
    assert_eq!(hwc_ops.shape(), [48, 56, 3]);
    let mut hwc = vec![0u8; hwc_ops.slot_bytes()];
    run(&hwc_ops, &data, &mut Rng(1), &mut ws, &mut hwc).unwrap();
    assert_eq!(chw[(2 * 48 + 5) * 56 + 7], hwc[(5 * 56 + 7) * 3 + 2]);
    let f32_ops = ImageOps {
        out: OutSpec {
            dtype: OutDType::F32,
            mean: [0.5; 3],
            std: [0.5; 3],
            chw: true,
        },
        ..base.clone()
    };
    let mut f = vec![0u8; f32_ops.slot_bytes()];
    run(&f32_ops, &data, &mut Rng(1), &mut ws, &mut f).unwrap();
    let v = f32::from_le_bytes(f[40..44].try_into().unwrap());
    assert!((v - (f32::from(chw[10]) / 255.0 - 0.5) / 0.5).abs() < 1e-5);
    let gray = ImageOps {
        gray: true,
        ..base.clone()
    };
    assert_eq!(gray.shape(), [1, 48, 56]);
    let mut g = vec![0u8; gray.slot_bytes()];
    run(&gray, &data, &mut Rng(1), &mut ws, &mut g).unwrap();
    let jit = ImageOps {
        jitter: Some(Jitter {
            brightness: 0.4,
            contrast: 0.4,
            saturation: 0.4,
        }),
        ..base.clone()
    };
    let mut j1 = vec![0u8; jit.slot_bytes()];
    let mut j2 = vec![0u8; jit.slot_bytes()];
    run(&jit, &data, &mut Rng(1), &mut ws, &mut j1).unwrap();
    run(&jit, &data, &mut Rng(2), &mut ws, &mut j2).unwrap();
    assert_ne!(j1, chw, "jitter changes pixels");
    assert_ne!(j1, j2, "different draws, different jitter");
}

#[test]
fn png_and_webp_go_through_the_general_path() {
    let px = picture(40, 30, 5);
    let mut png_bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut png_bytes, 40, 30);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.write_header().unwrap().write_image_data(&px).unwrap();
    }
    let mut d = Decoder::new().unwrap();
    let mut out = Pixels::default();
    decode_full(&mut d, &png_bytes, false, 1 << 20, &mut out).unwrap();
    assert_eq!(out.data, px, "PNG is lossless");
    let mut webp_bytes = Vec::new();
    image_webp::WebPEncoder::new(&mut webp_bytes)
        .encode(&px, 40, 30, image_webp::ColorType::Rgb8)
        .unwrap();
    decode_full(&mut d, &webp_bytes, false, 1 << 20, &mut out).unwrap();
    assert_eq!(out.data, px, "lossless WebP");
    // the header alone gives the size a pixel limit is checked against
    assert_eq!(dimensions(&png_bytes).unwrap(), (40, 30));
    assert_eq!(dimensions(&webp_bytes).unwrap(), (40, 30));
    assert!(dimensions(&png_bytes[..20]).is_err());
    let ops = ImageOps {
        geometry: Geometry::Resize {
            width: 20,
            height: 15,
        },
        ..rrc(1)
    };
    let mut slot = vec![0u8; ops.slot_bytes()];
    run(
        &ops,
        &png_bytes,
        &mut Rng(0),
        &mut Workspace::new(),
        &mut slot,
    )
    .unwrap();
}

#[test]
fn a_header_over_the_pixel_limit_is_refused_before_decoding() {
    // A valid JPEG whose frame header is patched to claim 60000x60000.
    let mut data = jpeg(16, 16, 6, false);
    let sof = data.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    data[sof + 5..sof + 7].copy_from_slice(&60000u16.to_be_bytes());
    data[sof + 7..sof + 9].copy_from_slice(&60000u16.to_be_bytes());
    let mut slot = vec![0u8; rrc(8).slot_bytes()];
    let err = run(
        &rrc(8),
        &data,
        &mut Rng(0),
        &mut Workspace::new(),
        &mut slot,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            OpsError::TooLarge {
                width: 60000,
                height: 60000,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn corrupt_and_truncated_images_are_errors_not_garbage() {
    let data = jpeg(64, 64, 7, false);
    // A whole-image geometry decodes every row, so any truncation is seen. (A random crop stops
    // reading after its last row: damage below the crop cannot affect its pixels and is not
    // noticed; the record checksum is what catches such damage.)
    let ops = ImageOps {
        geometry: Geometry::Resize {
            width: 16,
            height: 16,
        },
        ..rrc(16)
    };
    let mut ws = Workspace::new();
    let mut slot = vec![0u8; ops.slot_bytes()];
    for cut in [10, 100, data.len() / 2, data.len() - 10, data.len() - 1] {
        let err = run(&ops, &data[..cut], &mut Rng(0), &mut ws, &mut slot).unwrap_err();
        assert!(
            matches!(err, OpsError::Decode { codec: "JPEG", .. }),
            "truncated at {cut}: {err}"
        );
    }
    let mut garbled = data.clone();
    for b in &mut garbled[600..700] {
        *b = 0xFF;
    }
    assert!(
        run(&ops, &garbled, &mut Rng(0), &mut ws, &mut slot).is_err(),
        "garbled entropy data"
    );
    assert!(matches!(
        sniff(b"GIF89a...."),
        Err(OpsError::UnknownFormat(_))
    ));
    // the decoder is still usable after errors
    run(&ops, &data, &mut Rng(0), &mut ws, &mut slot).unwrap();
}

#[test]
fn lossless_baseline_transcode_keeps_every_pixel() {
    let prog = jpeg(96, 64, 8, true);
    let base = stokehold_ops::jpeg::to_baseline(&prog).unwrap();
    let mut d = Decoder::new().unwrap();
    assert!(d.header(&prog).unwrap().progressive);
    assert!(!d.header(&base).unwrap().progressive);
    let mut a = Pixels::default();
    let mut b = a.clone();
    d.decode(&prog, Scale::FULL, None, false, 1 << 30, &mut a)
        .unwrap();
    d.decode(&base, Scale::FULL, None, false, 1 << 30, &mut b)
        .unwrap();
    assert_eq!(a, b, "same coefficients, same pixels");
    assert!(stokehold_ops::jpeg::to_baseline(b"\xff\xd8\xff\xe0garbage").is_err());
    // re-encoding (the lossy max-side path) gives a decodable baseline JPEG of the same size
    let re = stokehold_ops::jpeg::encode(&a, 90).unwrap();
    let h = d.header(&re).unwrap();
    assert_eq!((h.width, h.height, h.progressive), (96, 64, false));
}

/// The seed corpus of the image fuzz target: written here if missing (deterministic content),
/// then replayed, together with random mutations of a valid JPEG (rows A6, C1–C3: no panic).
#[test]
fn image_fuzz_corpus_and_mutations_never_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/image");
    let valid = jpeg(24, 16, 11, false);
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("baseline.jpg", valid.clone()),
        ("progressive.jpg", jpeg(24, 16, 12, true)),
        ("truncated.jpg", valid[..valid.len() / 2].to_vec()),
        (
            "header-only.jpg",
            valid[..valid.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap()].to_vec(),
        ),
        (
            "garbage.bin",
            (0..300u32).map(|i| (i * 7919 % 256) as u8).collect(),
        ),
    ];
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in &seeds {
        let p = dir.join(name);
        if !p.exists() {
            std::fs::write(&p, bytes).unwrap();
        }
    }
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        stokehold_ops::fuzzing::fuzz_image(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n >= 5);
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..300 {
        let mut m = valid.clone();
        for _ in 0..1 + state % 4 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = (state % m.len() as u64) as usize;
            m[at] = (state >> 32) as u8;
        }
        stokehold_ops::fuzzing::fuzz_image(&m);
    }
}

#[test]
fn grayscale_and_cmyk_jpegs_decode_to_rgb() {
    let mut d = Decoder::new().unwrap();
    let mut out = Pixels::default();
    // grayscale JPEG → RGB with equal channels
    let gray: Vec<u8> = (0..32 * 24).map(|k| (k * 5 % 256) as u8).collect();
    let mut g = Vec::new();
    jpeg_encoder::Encoder::new(&mut g, 95)
        .encode(&gray, 32, 24, jpeg_encoder::ColorType::Luma)
        .unwrap();
    assert!(d.header(&g).unwrap().is_gray());
    d.decode(&g, Scale::FULL, None, false, 1 << 20, &mut out)
        .unwrap();
    assert_eq!(out.channels, 3);
    assert!(out.data.chunks(3).all(|p| p[0] == p[1] && p[1] == p[2]));
    // CMYK JPEG → RGB. jpeg-encoder takes ink amounts (255 = full ink) and stores them inverted,
    // with an Adobe marker, as Photoshop does.
    let (w, h) = (32u16, 24u16);
    let mut cmyk = Vec::new();
    for _ in 0..usize::from(w) * usize::from(h) {
        cmyk.extend_from_slice(&[0, 255, 0, 0]); // full magenta ink only
    }
    let mut c = Vec::new();
    jpeg_encoder::Encoder::new(&mut c, 95)
        .encode(&cmyk, w, h, jpeg_encoder::ColorType::Cmyk)
        .unwrap();
    assert!(d.header(&c).unwrap().is_cmyk());
    d.decode(&c, Scale::FULL, None, false, 1 << 20, &mut out)
        .unwrap();
    assert_eq!((out.channels, out.data.len()), (3, 32 * 24 * 3));
    let p = &out.data[(12 * 32 + 16) * 3..(12 * 32 + 16) * 3 + 3];
    assert!(p[0] > 200 && p[1] < 60 && p[2] > 200, "magenta, got {p:?}");
    // and through the pipeline, cropped
    let ops = rrc(8);
    let mut slot = vec![0u8; ops.slot_bytes()];
    run(&ops, &c, &mut Rng(3), &mut Workspace::new(), &mut slot).unwrap();
}

#[test]
fn restart_markers_are_lossless_and_indexable() {
    use stokehold_ops::restart::RestartIndex;
    let mut d = Decoder::new().unwrap();
    for (w, h, seed) in [
        (500u16, 375u16, 1u64),
        (375, 500, 2),
        (97, 61, 3),
        (16, 16, 4),
        (333, 250, 5),
    ] {
        for (progressive, sub420) in [(false, false), (true, false), (false, true)] {
            let src = if sub420 {
                jpeg420(w, h, seed)
            } else {
                jpeg(w, h, seed, progressive)
            };
            assert!(RestartIndex::parse(&src).is_none(), "no markers yet");
            let rst = stokehold_ops::jpeg::with_restarts(&src).unwrap();
            let idx = RestartIndex::parse(&rst).unwrap_or_else(|| panic!("{w}x{h} indexable"));
            assert!(!d.header(&rst).unwrap().progressive);
            let mut a = Pixels::default();
            let mut b = a.clone();
            d.decode(&src, Scale::FULL, None, false, 1 << 30, &mut a)
                .unwrap();
            d.decode(&rst, Scale::FULL, None, false, 1 << 30, &mut b)
                .unwrap();
            assert_eq!(a, b, "{w}x{h}: same pixels with markers");
            // baseline files take the one-pass rewrite (tables kept: each marker costs its two
            // bytes, the padding of a byte and the re-encoded DC differences of three
            // components); progressive ones libjpeg-turbo's transcoder (tables optimised)
            let fast = stokehold_ops::rst_insert::insert_restarts(&src);
            assert_eq!(fast.is_some(), !progressive, "{w}x{h}");
            if let Some(fast) = fast {
                assert!(
                    fast == rst,
                    "{w}x{h}: with_restarts is the one-pass rewrite"
                );
                let markers = idx.rows() as usize * idx.bands() as usize - 1;
                assert!(
                    rst.len() <= src.len() + 9 * markers + 6,
                    "{w}x{h}: {} vs {} with {markers} markers",
                    rst.len(),
                    src.len()
                );
            } else {
                assert!(
                    rst.len() < src.len() * 21 / 20 + 600,
                    "{} vs {}",
                    rst.len(),
                    src.len()
                );
            }
            // every sub-rectangle of rows and bands decodes to the same pixels as that part of
            // the whole image (the interior, away from upsampling edges)
            let (rows, bands) = (idx.rows(), idx.bands());
            let mut sub = Vec::new();
            for (r0, r1, b0, b1) in [
                (0, rows, 0, bands),
                (1, rows.min(3), 0, 1),
                (rows / 2, rows, bands / 2, bands),
            ] {
                if r0 >= r1 || b0 >= b1 {
                    continue;
                }
                assert!(idx.extract(&rst, r0..r1, b0..b1, &mut sub));
                // EOI, then the room the fast Huffman decoder wants, which decoding ignores
                let eoi = sub.len() - stokehold_ops::restart::CUT_TAIL;
                assert_eq!(sub[eoi - 2..eoi], [0xFF, 0xD9]);
                assert!(sub[eoi..].iter().all(|&b| b == 0));
                let mut c = a.clone();
                d.decode(&sub, Scale::FULL, None, false, 1 << 30, &mut c)
                    .unwrap_or_else(|e| panic!("{w}x{h} rows {r0}..{r1} bands {b0}..{b1}: {e}"));
                let (x0, y0) = (b0 * idx.band_w(), r0 * idx.mcu_h);
                assert_eq!(c.width, (b1 * idx.band_w()).min(u32::from(w)) - x0);
                assert_eq!(c.height, (r1 * idx.mcu_h).min(u32::from(h)) - y0);
                // compare rows and columns at least one MCU away from a cut edge
                let m = idx.mcu_h.max(idx.mcu_w);
                for y in 0..c.height {
                    let gy = y + y0;
                    if (r0 > 0 && y < m) || (r1 < rows && y + m >= c.height) {
                        continue;
                    }
                    for x in 0..c.width {
                        if (b0 > 0 && x < m) || (b1 < bands && x + m >= c.width) {
                            continue;
                        }
                        let gx = x + x0;
                        let p = ((y * c.width + x) * 3) as usize;
                        let q = ((gy * a.width + gx) * 3) as usize;
                        assert_eq!(c.data[p..p + 3], a.data[q..q + 3], "{w}x{h} at {gx},{gy}");
                    }
                }
            }
            assert!(
                !idx.extract(&rst, 0..rows + 1, 0..1, &mut sub),
                "out of range"
            );
        }
    }
}

#[test]
fn the_fused_path_on_restart_marked_files_matches_the_plain_file() {
    // Same draws through the same pipeline, on a file and on its restart-marked transcode (which
    // decodes only the rows and bands each crop needs). Packed (HWC) output goes through the RGB
    // decode of the cut: it agrees with the plain file to within the upsampling differences at
    // cut edges. Planar u8 output (CHW) takes the Y/Cb/Cr planes of the cut instead (chroma
    // resized from its own resolution, colour converted at the output size): close, not equal.
    let mut ws = Workspace::new();
    let (mut worst_rgb, mut worst_ycc, mut identical, mut planar_differs) =
        (f64::INFINITY, f64::INFINITY, 0, 0);
    for seed in 0..40u64 {
        let (w, h) = if seed % 3 == 0 {
            (375, 500)
        } else {
            (500, 375)
        };
        let data = if seed % 2 == 0 {
            jpeg420(w, h, seed)
        } else {
            jpeg(w, h, seed, false)
        };
        let rst = stokehold_ops::jpeg::with_restarts(&data).unwrap();
        let chw = rrc(112);
        let hwc = ImageOps {
            out: OutSpec {
                chw: false,
                ..OutSpec::default()
            },
            ..chw.clone()
        };
        let run_on = |ops: &ImageOps, file: &[u8], ws: &mut Workspace| {
            let mut out = vec![0u8; ops.slot_bytes()];
            run(ops, file, &mut Rng(seed), ws, &mut out).unwrap();
            out
        };
        let (a, b) = (run_on(&hwc, &data, &mut ws), run_on(&hwc, &rst, &mut ws));
        identical += usize::from(a == b);
        worst_rgb = worst_rgb.min(psnr(&a, &b));
        // planes of the plain file (RGB decode) vs planes of the restart-marked one (Y/Cb/Cr)
        let (p, q) = (run_on(&chw, &data, &mut ws), run_on(&chw, &rst, &mut ws));
        worst_ycc = worst_ycc.min(psnr(&p, &q));
        let n = 112 * 112;
        let b_as_planes: Vec<u8> = (0..3 * n).map(|i| b[(i % n) * 3 + i / n]).collect();
        planar_differs += usize::from(q != b_as_planes);
    }
    assert!(worst_rgb >= 40.0, "RGB cut: worst PSNR {worst_rgb:.1} dB");
    assert!(identical >= 30, "{identical} of 40 bit-identical");
    assert!(
        worst_ycc >= 38.0,
        "planar cut: worst PSNR {worst_ycc:.1} dB"
    );
    assert!(
        planar_differs >= 30,
        "the planar path was taken {planar_differs} of 40 times"
    );
}

#[test]
fn planar_ycc_decode_and_colour_conversion_match_the_rgb_decode() {
    // 4:4:4 (no upsampling involved): Y/Cb/Cr planes + our conversion = libjpeg-turbo's RGB
    // decode to within its SIMD rounding; 4:2:0 planes have the chroma at half size.
    let mut d = Decoder::new().unwrap();
    let data = jpeg(90, 70, 5, false);
    let mut rgb = Pixels::default();
    d.decode(&data, Scale::FULL, None, false, 1 << 30, &mut rgb)
        .unwrap();
    let mut ycc = stokehold_ops::jpeg::YccPlanes::default();
    assert!(d.decode_ycc(&data, Scale::FULL, 1 << 30, &mut ycc).unwrap());
    assert_eq!(
        (ycc.width, ycc.height, ycc.factor),
        ([90; 3], [70; 3], (1, 1))
    );
    let n = 90 * 70;
    let mut planes = vec![0u8; 3 * n];
    stokehold_ops::color::ycc_to_rgb_planes(ycc.plane(0), ycc.plane(1), ycc.plane(2), &mut planes);
    let worst = (0..3 * n)
        .map(|i| (i32::from(planes[i]) - i32::from(rgb.data[(i % n) * 3 + i / n])).abs())
        .max()
        .unwrap();
    assert!(worst <= 1, "off by {worst}");
    let sub = jpeg420(91, 71, 6);
    assert!(d.decode_ycc(&sub, Scale(4), 1 << 30, &mut ycc).unwrap());
    assert_eq!(ycc.image, (46, 36));
    assert_eq!(
        (ycc.width, ycc.height, ycc.factor),
        ([46, 23, 23], [36, 18, 18], (2, 2))
    );
    // the buffers stay at the larger image's size; the planes are this image's
    let lens = [0, 1, 2].map(|c| ycc.plane(c).len());
    assert_eq!(lens, [46 * 36, 23 * 18, 23 * 18]);
    let mut alone = stokehold_ops::jpeg::YccPlanes::default();
    assert!(d.decode_ycc(&sub, Scale(4), 1 << 30, &mut alone).unwrap());
    for c in 0..3 {
        assert_eq!(ycc.plane(c), alone.plane(c), "plane {c}");
    }
    // gray images are not for this path
    let mut gray = Vec::new();
    jpeg_encoder::Encoder::new(&mut gray, 90)
        .encode(&[128u8; 32 * 16], 32, 16, jpeg_encoder::ColorType::Luma)
        .unwrap();
    assert!(!d.decode_ycc(&gray, Scale::FULL, 1 << 30, &mut ycc).unwrap());
    // corrupt data is an error, not planes of garbage
    let cut = &data[..data.len() / 2];
    assert!(d.decode_ycc(cut, Scale::FULL, 1 << 30, &mut ycc).is_err());
}

#[test]
fn restart_index_refuses_what_it_cannot_cut() {
    use stokehold_ops::restart::RestartIndex;
    let data = jpeg(200, 100, 9, false);
    let rst = stokehold_ops::jpeg::with_restarts(&data).unwrap();
    assert!(RestartIndex::parse(&rst).is_some());
    // truncated, or with a marker renumbered, or garbage: not indexable (the normal path then
    // reports the damage)
    assert!(RestartIndex::parse(&rst[..rst.len() - 20]).is_none());
    let at = rst.windows(2).rposition(|w| w == [0xFF, 0xD3]).unwrap();
    let mut bad = rst.clone();
    bad[at + 1] = 0xD5;
    assert!(RestartIndex::parse(&bad).is_none());
    assert!(RestartIndex::parse(b"\xff\xd8\xff\xdb\x00").is_none());
    assert!(RestartIndex::parse(&[]).is_none());
    for i in (0..rst.len()).step_by(7) {
        let mut m = rst.clone();
        m[i] ^= 0x5A;
        let _ = RestartIndex::parse(&m); // never panics
        let mut ws = Workspace::new();
        let mut out = vec![0u8; rrc(32).slot_bytes()];
        let _ = run(&rrc(32), &m, &mut Rng(i as u64), &mut ws, &mut out);
    }
}

/// The one-pass restart-marker rewrite on damaged files: bit flips, overwritten and truncated
/// bytes anywhere in real baseline JPEGs never panic, and whatever it accepts is a JPEG the
/// restart index takes, which decodes to exactly what libjpeg-turbo decodes from the damaged
/// input when that decodes without a warning.
#[test]
fn restart_rewrite_leaves_tables_with_oversized_values_to_the_transcoder() {
    // an extra AC table (id 3, unused by the scan) whose one symbol has 11 value bits, more than
    // 8-bit data can have: the one-pass rewrite's reader relies on that bound, so it refuses the
    // file, and `with_restarts` still gives the same pixels through libjpeg-turbo's transcoder
    let src = jpeg(97, 61, 7, false);
    let mut odd = src[..2].to_vec();
    odd.extend_from_slice(&[0xFF, 0xC4, 0x00, 0x14, 0x13, 1]);
    odd.extend_from_slice(&[0; 15]);
    odd.push(0x0B);
    odd.extend_from_slice(&src[2..]);
    assert!(stokehold_ops::rst_insert::insert_restarts(&src).is_some());
    assert!(stokehold_ops::rst_insert::insert_restarts(&odd).is_none());
    let rst = stokehold_ops::jpeg::with_restarts(&odd).unwrap();
    assert!(stokehold_ops::restart::RestartIndex::parse(&rst).is_some());
    let mut d = Decoder::new().unwrap();
    let (mut a, mut b) = (Pixels::default(), Pixels::default());
    d.decode(&odd, Scale::FULL, None, false, 1 << 24, &mut a)
        .unwrap();
    d.decode(&rst, Scale::FULL, None, false, 1 << 24, &mut b)
        .unwrap();
    assert_eq!(a, b);
}

#[test]
fn restart_rewrite_survives_damaged_files() {
    use stokehold_ops::restart::RestartIndex;
    use stokehold_ops::rst_insert::insert_restarts;
    let mut d = Decoder::new().unwrap();
    let (mut a, mut b) = (Pixels::default(), Pixels::default());
    let (mut accepted, mut exact) = (0, 0);
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for (i, src) in [
        jpeg(97, 61, 1, false),
        jpeg420(160, 120, 2),
        jpeg(64, 48, 3, false),
    ]
    .iter()
    .enumerate()
    {
        assert!(insert_restarts(src).is_some(), "file {i} is in scope");
        for _ in 0..700 {
            let mut m = src.clone();
            match next() % 3 {
                0 => {
                    let at = next() as usize % m.len();
                    m[at] ^= 1 << (next() % 8);
                }
                1 => {
                    let at = next() as usize % m.len();
                    m[at] = next() as u8;
                }
                _ => m.truncate(next() as usize % m.len()),
            }
            let Some(out) = insert_restarts(&m) else {
                continue;
            };
            accepted += 1;
            assert!(
                RestartIndex::parse(&out).is_some(),
                "file {i}: accepted output indexable"
            );
            if d.decode(&m, Scale::FULL, None, false, 1 << 24, &mut a)
                .is_ok()
            {
                d.decode(&out, Scale::FULL, None, false, 1 << 24, &mut b)
                    .unwrap();
                assert_eq!(a, b, "file {i}: same pixels as the damaged input");
                exact += 1;
            }
        }
    }
    // the mutations in headers and padding leave many files decodable: both branches ran
    assert!(
        accepted > 100 && exact > 50,
        "{accepted} accepted, {exact} compared"
    );
}
