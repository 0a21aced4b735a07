//! Fuzzes the example parser: arbitrary bytes read as a serialized tf.train.Example.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    stokehold_ingest::fuzzing::fuzz_example(data);
});
