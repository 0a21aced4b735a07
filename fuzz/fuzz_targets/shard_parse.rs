//! Fuzzes the pure shard parse functions (header, trailer, meta, index) and the token-range planner
//! over a parsed index.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_format::fuzzing::fuzz_shard_parse(data);
});
