//! Fuzzes the image decoders and the fused pipeline: arbitrary bytes as an encoded image.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_ops::fuzzing::fuzz_image(data);
});
