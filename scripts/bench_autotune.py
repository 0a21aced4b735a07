#!/usr/bin/env python3
"""Autotuning against the best fixed setting, and what profiling costs, on two pipelines.

  (a) decode-bound JPEGs: RandomResizedCrop(224) + flip over an ImageNet-like dataset;
  (b) cheap token batches: int32 ndarray records of 2,048 tokens, copy-only (generated here).

For each: `stokehold bench DS --sweep --autotune` (the sweep over threads x prefetch, then the
best fixed setting and the autotuned loader, each from a cold start and measured after 5 s, in
alternating rounds), and `stokehold bench DS --overhead N` (stage timing on vs off, alternating
runs). Every figure is a ratio within one run of the
command, so machine load drifts cancel as far as they can.

    python scripts/bench_autotune.py [--jpeg bench-data/inet-shards] [--tokens bench-data/prof-tokens] \
        [--cli target/release/stokehold] [--duration 15] [--rounds 7]

`make bench` runs it on the dataset of `make bench-data`; the token dataset is made on first use.
"""

import argparse
import os
import re
import shutil
import sys
import time

from _bench import BENCH_DATA, ROOT, require, run_or_exit


def make_tokens(path: str, n: int, length: int) -> None:
    """A dataset of `n` int32 token sequences of `length` tokens (and an int64 label)."""
    import numpy as np

    import stokehold

    rng = np.random.default_rng(0)
    with stokehold.ShardWriter(path, {"tokens": "ndarray:i32", "label": "int64"}, shard_size=64 << 20) as w:
        for i in range(n):
            w.write({"tokens": rng.integers(0, 50_000, size=length, dtype=np.int32), "label": i % 10})


def run(cmd):
    t0 = time.time()
    out = run_or_exit(cmd)
    return out, time.time() - t0


def figure(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    return m.group(1) if m else "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--jpeg", default=os.path.join(BENCH_DATA, "inet-shards"), help="a packed ImageNet-like dataset"
    )
    ap.add_argument(
        "--tokens", default=os.path.join(BENCH_DATA, "prof-tokens"), help="token dataset (made if missing)"
    )
    ap.add_argument("--token-samples", type=int, default=40_000)
    ap.add_argument("--cli", default=os.path.join(ROOT, "target", "release", "stokehold"))
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of each compared run")
    ap.add_argument("--rounds", type=int, default=7, help="--overhead rounds (cheap pipeline)")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-sweep", action="store_true")
    a = ap.parse_args()
    if not os.access(a.cli, os.X_OK):
        return f"error: no stokehold command at {a.cli}: `make build` builds it (or pass --cli PATH)"
    if not os.path.exists(os.path.join(a.jpeg, "manifest.json")):
        return f"error: no dataset at {a.jpeg}: make it with `make bench-data` (or pass --jpeg DIR)"
    if not os.path.exists(os.path.join(a.tokens, "manifest.json")):
        require("numpy", "stokehold")  # to make the token dataset
        print(f"making {a.tokens} ({a.token_samples} x 2048 int32 tokens)", flush=True)
        partial = a.tokens + ".partial"
        shutil.rmtree(partial, ignore_errors=True)
        make_tokens(partial, a.token_samples, 2048)
        shutil.rmtree(a.tokens, ignore_errors=True)
        os.rename(partial, a.tokens)
    pipelines = [
        ("jpeg RRC(224)+flip", a.jpeg, ["--batch-size", "64", "--random-resized-crop", "224", "--flip", "--shuffle"], 1, 3),
        ("tokens 2048 x int32", a.tokens, ["--batch-size", "256", "--shuffle"], 5, a.rounds),
    ]
    for name, ds, flags, epochs, rounds in pipelines:
        print(f"== {name}: {ds}", flush=True)
        if not a.skip_sweep:
            out, secs = run([a.cli, "bench", ds, *flags, "--sweep", "--autotune", "--duration", str(a.duration)])
            print(out, end="")
            best = figure(r"best\s+([\d,]+) samples/s", out)
            ratio = figure(r"autotuned\s+([\d.]+) of the best fixed setting", out)
            reached = re.findall(r"90% reached after ([\d.]+) s", out)
            print(
                f"-> autotuned/best fixed {ratio} (median of the rounds; sweep's best {best} samples/s); "
                f"90% reached after {', '.join(reached) or 'never'} s [{secs:.0f} s]",
                flush=True,
            )
        if not a.skip_overhead:
            out, secs = run([a.cli, "bench", ds, *flags, "--epochs", str(epochs), "--overhead", str(rounds)])
            print(out, end="")
            cost = figure(r"stage timing costs (-?[\d.]+)%", out)
            print(f"-> profiling cost {cost}% [{secs:.0f} s]", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
