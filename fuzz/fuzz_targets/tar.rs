//! Fuzzes the tar parser: arbitrary bytes read as a tar archive (WebDataset shard).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_ingest::fuzzing::fuzz_tar(data);
});
