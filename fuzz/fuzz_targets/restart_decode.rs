//! Differential fuzzing of our libjpeg-turbo patch (vendor/turbojpeg-sys/STOKEHOLD.md): any
//! bytes, and the same rewritten with restart markers, must decode to the same pixels or the
//! same error with the fast Huffman decoder inside restart intervals and without it.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_ops::fuzzing::fuzz_fast_restarts(data);
});
