//! Fuzzes the format's one checked parser of our own containers (a decoded part's footer and
//! index, a sealed container's magic and checksum, kept token counts, a kept video index).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_format::fuzzing::fuzz_containers(data);
});
