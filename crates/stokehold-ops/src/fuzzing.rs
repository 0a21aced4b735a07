//! Entry point for the image fuzz target in `fuzz/`, also run over the stored corpus and random
//! mutations by `cargo test`: any bytes through the decoders and the fused pipeline must give an
//! image or an error, never a panic, within a bounded pixel budget.

use crate::pipeline::{Geometry, ImageOps, Random, Workspace, run};
use crate::{OutDType, OutSpec};

struct Counter(u64);

impl Random for Counter {
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (hi - lo) * ((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
    fn int_inclusive(&mut self, n: u64) -> u64 {
        ((self.uniform(0.0, 1.0) * (n as f64 + 1.0)) as u64).min(n)
    }
}

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
            &mut Counter(data.len() as u64),
            &mut ws,
            &mut slot,
        );
    }
    let _ = crate::jpeg::to_baseline(data);
}
