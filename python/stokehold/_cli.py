"""The ``stokehold`` console command installed by pip: the Rust command line, run in-process."""

import signal
import sys

from ._native import run_cli


def main() -> None:
    # Ctrl-C ends the process at once, as for the cargo-built binary: a pack interrupted this way
    # leaves only its hidden staging directory, never something that looks like a dataset.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(run_cli(sys.argv))


if __name__ == "__main__":
    main()
