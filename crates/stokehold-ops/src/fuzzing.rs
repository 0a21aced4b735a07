//! Entry point for the image fuzz target in `fuzz/`, also run over the stored corpus and random
//! mutations by `cargo test`: any bytes through the decoders and the fused pipeline must give an
//! image or an error, never a panic, within a bounded pixel budget.

use crate::geometry::SeededRandom;
use crate::pipeline::{Geometry, ImageOps, Workspace, run};
use crate::{OutDType, OutSpec};

/// Decode arbitrary bytes through every geometry. Must never panic.
pub fn fuzz_image(data: &[u8]) {
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
    let variants = [
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
    ];
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
