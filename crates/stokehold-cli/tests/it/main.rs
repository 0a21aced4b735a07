//! The command's integration tests (each runs the built `stokehold` binary), in one binary.
//! Tests that need the S3 test server are in `s3`, so `make check` can leave them out with
//! `--skip s3`.

mod bench_config;
mod cli;
mod inplace;
mod messages;
mod pack_matrix;
mod s3;
