#!/usr/bin/env python3
"""Per-batch Python overhead of stokehold.Loader (issue 5), side by side with the engine alone.

    .venv/bin/python scripts/bench_python.py [--samples 262144] [--batch 256] [--threads 2]

(part of ``make bench``; its dataset is written to a temporary directory and removed.)

Dataset: int64 records (a passthrough column), opened in memory. Three figures in one run:
- ``native``: the same loader configuration driven from Rust (``_native._Engine`` drained by
  ``_drain``: batches made and dropped without any Python object) -- the engine's own rate;
- ``python``: ``for batch in loader`` with the zero-copy numpy batch dicts;
- the difference per batch is the Python overhead (target <= 50 us per batch of 256).
"""

import argparse
import os
import tempfile
import time

from _bench import require

require("numpy", "stokehold")
import numpy as np  # noqa: E402, F401

import stokehold  # noqa: E402
from stokehold import _native  # noqa: E402, F401


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1 << 18)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ints")
        with stokehold.ShardWriter(path, {"label": "int64"}) as w:
            for i in range(args.samples):
                w.write({"label": i})
        ds = stokehold.Dataset(path, in_memory=True)

        def loader():
            return stokehold.Loader(ds, args.batch, threads=args.threads, seed=0)

        def best(fn):
            times = []
            for _ in range(args.epochs):
                t0 = time.perf_counter()
                n = fn()
                times.append((time.perf_counter() - t0) / n)
            return min(times), n

        def native():
            return loader()._engine._drain()

        def python():
            n = 0
            for batch in loader():
                batch["label"]
                n += 1
            return n

        def python_ids():
            n = 0
            for batch in stokehold.Loader(ds, args.batch, threads=args.threads, seed=0, include_ids=True):
                batch["label"]
                n += 1
            return n

        rust, n = best(native)
        py, _ = best(python)
        py_ids, _ = best(python_ids)
        print(f"{args.samples} int64 samples in memory, batch {args.batch}, {args.threads} threads, {n} batches/epoch, best of {args.epochs}")
        print(f"  engine alone (Rust):       {rust * 1e6:8.1f} us/batch  {args.batch / rust / 1e6:6.2f} M samples/s")
        print(f"  Python loop (numpy):       {py * 1e6:8.1f} us/batch  {args.batch / py / 1e6:6.2f} M samples/s")
        print(f"  Python loop + ids:         {py_ids * 1e6:8.1f} us/batch  {args.batch / py_ids / 1e6:6.2f} M samples/s")
        print(f"  Python overhead per batch: {(py - rust) * 1e6:8.1f} us (target <= 50 us); with ids {(py_ids - rust) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
