"""What the bench scripts share: the repository's bench-data/ paths, and one-line errors.

The scripts run as ``python scripts/NAME.py``, so this folder is on ``sys.path``.
"""

import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# made by `make bench-data` (scripts/make_imagenet_like.py and `stokehold pack`); gitignored
BENCH_DATA = os.path.join(ROOT, "bench-data")


def require(*modules: str) -> None:
    """Exit with one line naming what to install when one of ``modules`` cannot be imported."""
    packages = {"PIL": "Pillow"}
    missing = [packages.get(m, m) for m in modules if m != "stokehold" and importlib.util.find_spec(m) is None]
    if missing:
        sys.exit(
            f"error: this script needs {' and '.join(missing)}: `make bench-setup` installs what the "
            "benches need into .venv (run it with .venv/bin/python)"
        )
    if "stokehold" in modules and importlib.util.find_spec("stokehold") is None:
        sys.exit("error: the stokehold package is not importable: `make install` builds the wheel and installs it into .venv")


def run_or_exit(cmd, cwd=None) -> str:
    """Run ``cmd`` and return its standard output; on failure exit with one line: its last."""
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"error: cannot run {cmd[0]}: {e.strerror}")
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
        sys.exit(f"error: `{' '.join(map(str, cmd))}` failed: {last}")
    return r.stdout
