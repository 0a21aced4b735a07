//! Fuzzes the shard reader: arbitrary bytes read as a shard.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_format::fuzzing::fuzz_shard(data);
});
