//! The `stokehold` command line (placeholder while being written).
use std::ffi::OsString;
use std::process::ExitCode;

/// Run the command line with `args` (program name first).
pub fn main_from_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let _ = args.into_iter().count();
    ExitCode::SUCCESS
}
