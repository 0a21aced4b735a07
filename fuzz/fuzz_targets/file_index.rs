//! Fuzzes the kept index of a file read in place (`.skhidx`), read through the format's checked
//! container parser.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_ingest::fuzzing::fuzz_file_index(data);
});
