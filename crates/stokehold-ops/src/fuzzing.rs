//! Entry points for the image fuzz targets in `fuzz/`, also run over the stored corpus and random
//! mutations by `cargo test`: any bytes through the decoders and the fused pipeline must give an
//! image or an error, never a panic, within a bounded pixel budget; and libjpeg-turbo with our
//! patch (fast Huffman decoding inside restart intervals) must give exactly what it gives
//! without it.

use crate::geometry::SeededRandom;
use crate::pipeline::{Geometry, ImageOps, Workspace, run};
use crate::{OutDType, OutSpec};

/// Decode arbitrary bytes through every geometry. Must never panic.
pub fn fuzz_image(data: &[u8]) {
    let variants = variants();
    let mut ws = Workspace::new();
    for ops in &variants {
        let mut slot = vec![0u8; ops.slot_bytes()];
        let _ = run(
            ops,
            data,
            &mut SeededRandom(data.len() as u64),
            &mut ws,
            &mut slot,
        );
    }
    let _ = crate::jpeg::to_baseline(data);
    // the fast restart-marker rewrite: any bytes, no panic; what it makes is a JPEG
    // RestartIndex accepts
    if let Some(out) = crate::rst_insert::insert_restarts(data) {
        assert!(crate::restart::RestartIndex::parse(&out).is_some());
    }
}

/// Differential check of the patched libjpeg-turbo (vendor/turbojpeg-sys/STOKEHOLD.md): `data`,
/// and the same bytes rewritten with restart markers where the rewrite takes them, decode to the
/// same result (the same pixels, or an error) with the fast Huffman decoder inside restart
/// intervals (the patch) and without it (upstream's behaviour), through a plain full decode, a
/// cropped and DCT-scaled decode and every geometry of the fused pipeline.
///
/// Flips a process-wide switch: call it from one thread at a time, with no other decoding going
/// on in the process (a fuzz target, or one test that holds a lock).
pub fn fuzz_fast_restarts(data: &[u8]) {
    use crate::jpeg::{Decoder, Pixels, Scale, set_patched_huffman_decoding};
    let marked = crate::rst_insert::insert_restarts(data);
    let inputs = [Some(data), marked.as_deref()];
    let variants = variants();
    let mut ws = Workspace::new();
    // everything one input decodes to, in order; an error as its message
    let outcome = |input: &[u8], ws: &mut Workspace| -> Vec<std::result::Result<Vec<u8>, String>> {
        let mut d = match Decoder::new() {
            Ok(d) => d,
            Err(e) => return vec![Err(e.to_string())],
        };
        let mut all = Vec::new();
        let crop = d
            .header(input)
            .ok()
            .filter(|h| h.width >= 4 && h.height >= 4)
            .map(|h| (h.width / 4, h.height / 4, h.width / 2, h.height / 2));
        for (scale, crop) in [(Scale::FULL, None), (Scale(4), None), (Scale::FULL, crop)] {
            let mut px = Pixels {
                width: 0,
                height: 0,
                channels: 3,
                data: Vec::new(),
            };
            all.push(
                d.decode(input, scale, crop, false, 1 << 22, &mut px)
                    .map(|x_offset| {
                        let mut v = px.data;
                        v.extend(x_offset.to_le_bytes());
                        v
                    })
                    .map_err(|e| e.to_string()),
            );
        }
        for ops in &variants {
            let mut slot = vec![0u8; ops.slot_bytes()];
            all.push(
                run(
                    ops,
                    input,
                    &mut SeededRandom(input.len() as u64),
                    ws,
                    &mut slot,
                )
                .map(|()| slot)
                .map_err(|e| e.to_string()),
            );
        }
        all
    };
    for input in inputs.into_iter().flatten() {
        set_patched_huffman_decoding(false);
        let upstream = outcome(input, &mut ws);
        set_patched_huffman_decoding(true);
        let patched = outcome(input, &mut ws);
        // the same pixels, or the same error; libjpeg-turbo counts the bytes left over before a
        // marker in a damaged interval from where its reader is, which differs between the two
        // decoders by the stuffed bytes (FF 00) already read ahead: only the count may differ
        let differ = |k: usize| match (&upstream[k], &patched[k]) {
            (Err(a), Err(b)) => {
                let tail = |m: &str| m.split(" extraneous bytes").nth(1).map(str::to_owned);
                a != b && (tail(a).is_none() || tail(a) != tail(b))
            }
            (a, b) => a != b,
        };
        if let Some(k) = (0..upstream.len()).find(|&k| differ(k)) {
            let show = |r: &std::result::Result<Vec<u8>, String>| match r {
                Ok(v) => format!("{} bytes of pixels", v.len()),
                Err(e) => format!("error {e:?}"),
            };
            panic!(
                "the patched decoder differs from upstream on a {}-byte input, decode {k}: \
                 upstream {}, patched {}",
                input.len(),
                show(&upstream[k]),
                show(&patched[k])
            );
        }
    }
}

/// The pipeline variants the image fuzz targets run.
fn variants() -> [ImageOps; 4] {
    let base = ImageOps {
        geometry: Geometry::RandomResizedCrop {
            width: 16,
            height: 16,
            scale: (0.08, 1.0),
            ratio: (0.75, 4.0 / 3.0),
        },
        flip_p: 0.5,
        jitter: None,
        gray: false,
        out: OutSpec::default(),
        max_pixels: 1 << 22,
        fused: true,
    };
    [
        base.clone(),
        ImageOps {
            geometry: Geometry::Resize {
                width: 8,
                height: 8,
            },
            gray: true,
            ..base.clone()
        },
        ImageOps {
            geometry: Geometry::ResizeCenterCrop {
                shorter: 12,
                width: 8,
                height: 8,
            },
            out: OutSpec {
                dtype: OutDType::F32,
                ..OutSpec::default()
            },
            ..base.clone()
        },
        ImageOps {
            fused: false,
            ..base
        },
    ]
}
