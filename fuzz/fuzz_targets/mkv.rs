//! Fuzzes the Matroska/WebM frame index (the EBML walk over hostile element sizes).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_ingest::fuzzing::fuzz_mkv(data);
});
