"""Parquet read in place under a global shuffle vs the same images packed, in one run (#50: target >= 0.8).

The images are a seeded sample of an image folder, written as ``pyarrow.parquet.write_table``
writes them by default (what Hugging Face and most tools leave behind): files of ROWS rows, an
``image`` binary column and an int64 ``label``. The same files are then packed
(``pack --no-restart-markers``: the JPEGs as given, so both read the same bytes) and both are
streamed through the training pipeline (shuffle, RandomResizedCrop 224, flip) on one thread, in
alternating runs: in place with the cache of decoded pages (the default), packed, and in place
with that cache off (``STOKEHOLD_PARQUET_PAGE_CACHE=0``, how it read before).

Usage: python scripts/bench_parquet_inplace.py IMAGE_FOLDER [--images 200] [--rows 100]
       [--seed 1] [--rounds 3] [--epochs 5] [--cli target/release/stokehold]
"""

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq


def images_of(folder):
    """(path, label) of every file under ``folder``'s class sub-folders, sorted."""
    classes = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
    out = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(folder, c))):
            out.append((os.path.join(folder, c, f), label))
    return out


def throughput(cli, dataset, epochs, env=None):
    """Samples per second the bench reports for ``dataset``."""
    cmd = [cli, "bench", dataset, "--threads", "1", "--epochs", str(epochs), "--shuffle",
           "--random-resized-crop", "224", "--flip", "--batch-size", "32", "--no-storage",
           "--index-dir", os.path.join(os.path.dirname(dataset), "index")]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                         env={**os.environ, **(env or {})}).stdout
    m = re.search(r"([\d,.]+) samples/s", out)
    if not m:
        raise SystemExit(f"no throughput in the bench's output:\n{out}")
    return float(m.group(1).replace(",", ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--cli", default="target/release/stokehold")
    a = ap.parse_args()
    chosen = random.Random(a.seed).sample(images_of(a.folder), a.images)
    work = tempfile.mkdtemp(prefix="pq-inplace-")
    try:
        pqdir = os.path.join(work, "pq")
        os.mkdir(pqdir)
        for i in range(0, len(chosen), a.rows):
            part = chosen[i : i + a.rows]
            table = pa.table({
                "image": pa.array([open(p, "rb").read() for p, _ in part], pa.binary()),
                "label": pa.array([l for _, l in part], pa.int64()),
            })
            pq.write_table(table, os.path.join(pqdir, f"part-{i // a.rows:05d}.parquet"))
        packed = os.path.join(work, "packed")
        subprocess.run([a.cli, "pack", pqdir, packed, "--no-restart-markers"], check=True,
                       capture_output=True)
        size = sum(os.path.getsize(os.path.join(pqdir, f)) for f in os.listdir(pqdir)) >> 20
        print(f"{a.images} images of {a.folder} (seed {a.seed}) in {len(os.listdir(pqdir))} files "
              f"of {a.rows} rows ({size} MiB, pyarrow {pa.__version__} defaults); {os.cpu_count()} "
              f"cores, 1 thread, {a.epochs} epochs, shuffle + RandomResizedCrop 224 + flip, "
              f"{a.rounds} alternating rounds")
        throughput(a.cli, pqdir, 1)  # keeps the index, warms the page cache
        runs = {"in place": [], "packed": [], "in place, page cache off": []}
        for _ in range(a.rounds):
            runs["in place"].append(throughput(a.cli, pqdir, a.epochs))
            runs["packed"].append(throughput(a.cli, packed, a.epochs))
            runs["in place, page cache off"].append(
                throughput(a.cli, pqdir, a.epochs, {"STOKEHOLD_PARQUET_PAGE_CACHE": "0"}))
        base = statistics.median(runs["packed"])
        for what, xs in runs.items():
            ratios = ", ".join(f"{x / p:.2f}" for x, p in zip(xs, runs["packed"]))
            print(f"  {what:26s} median {statistics.median(xs):7.1f} samples/s  "
                  f"{statistics.median(xs) / base:.2f}x packed (per round: {ratios})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
