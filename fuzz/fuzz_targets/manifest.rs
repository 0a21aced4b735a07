//! Fuzzes the manifest reader: arbitrary bytes read as a manifest.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_format::fuzzing::fuzz_manifest(data);
});
