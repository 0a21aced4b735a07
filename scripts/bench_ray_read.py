#!/usr/bin/env python3
"""`stokehold.ray.read` against the row-by-row reader it replaced, in one run (issue #34).

    python scripts/bench_ray_read.py [--rows N] [--rounds R] [--cpus 2]

Writes a dataset of N rows (4 KiB of bytes, a caption, a label, a float32 [8, 8] array, like an
image set with an embedding) and reads it through Ray Data on a local cluster of --cpus CPUs,
`ds.materialize()` of every row, in interleaved rounds:

- rust: `stokehold.ray.read` (each block of 1,024 records read with one positional read per shard
        and decoded in Rust into one Arrow batch, arrays as Ray tensor columns);
- rows: the reader before it, the same read tasks, each block built in Python from `ds[i]` dicts
        (the code is here, as it was).

Prints rows/s of each side (medians of the rounds) and rust/rows.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2)
    args = ap.parse_args()

    import ray
    import stokehold
    import stokehold.ray as sray
    from ray.data.block import BlockAccessor

    class RowsSource(sray.Datasource):
        """The reader as it was before the Arrow batches: a dict per row, columns in Python."""

        def _reader(self, lo, hi):
            path = self.path
            fields = list(stokehold.Dataset(path).schema)

            def read_fn():
                ds = stokehold.Dataset(path)
                for start in range(lo, hi, 1024):
                    rows = [ds[i] for i in range(start, min(hi, start + 1024))]
                    batch = {f: column([r[f] for r in rows]) for f in fields}
                    yield BlockAccessor.batch_to_block(batch)

            return read_fn

    def column(values):
        if values and isinstance(values[0], np.ndarray):
            first = values[0]
            if all(v.shape == first.shape and v.dtype == first.dtype for v in values):
                return np.stack(values)
        if values and isinstance(values[0], (np.ndarray, bytes, str)):
            out = np.empty(len(values), dtype=object)
            out[:] = values
            return out
        return np.asarray(values)

    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "ds"
        rng = np.random.default_rng(0)
        blob = rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()
        schema = {"image": "bytes", "caption": "string", "label": "int64", "emb": "ndarray:f32"}
        with stokehold.ShardWriter(dest, schema, shard_size=16 << 20) as w:
            for i in range(args.rows):
                w.write({"image": blob, "caption": f"sample {i}", "label": i % 1000,
                         "emb": np.full((8, 8), i, dtype=np.float32)})
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        sides = {
            "rust": lambda: sray.read(dest),
            "rows": lambda: ray.data.read_datasource(RowsSource(dest)),
        }
        for make in sides.values():  # warm-up: workers started, imports done, pages cached
            make().materialize()
        rates = {k: [] for k in sides}
        for _ in range(args.rounds):
            for name, make in sides.items():
                t = time.perf_counter()
                n = make().materialize().count()
                rates[name].append(n / (time.perf_counter() - t))
                assert n == args.rows
        ray.shutdown()
    med = {k: statistics.median(v) for k, v in rates.items()}
    for k, v in rates.items():
        print(f"{k}: median {med[k]:,.0f} rows/s (rounds: {', '.join(f'{x:,.0f}' for x in v)})")
    print(f"rust/rows: {med['rust'] / med['rows']:.2f}x ({args.rows:,} rows, {args.cpus} CPUs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
