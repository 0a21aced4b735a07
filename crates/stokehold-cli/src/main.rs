//! The `stokehold` command.

fn main() -> std::process::ExitCode {
    stokehold_cli::main_from_args(std::env::args_os())
}
