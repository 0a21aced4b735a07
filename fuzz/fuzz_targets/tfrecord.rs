//! Fuzzes the tfrecord parser: arbitrary bytes read as a TFRecord file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_ingest::fuzzing::fuzz_tfrecord(data);
});
