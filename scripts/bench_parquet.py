"""Parquet packing vs packing the same images as a folder, measured in one run (target >= 0.70).

The Parquet file is made here from the image folder with pyarrow, as Hugging Face stores an
image dataset: an ``image`` column of ``{bytes, path}`` structs, an int64 ``label`` (the class
sub-directory), row groups of 100 rows (what ``datasets`` writes for images), pyarrow's default
compression (snappy).

Usage: python scripts/bench_parquet.py [STOKEHOLD_BIN] [IMAGE_FOLDER]
IMAGE_FOLDER defaults to $BENCH_SRC, else to 3,000 generated sample images in $BENCH_WORK
(default bench-data/work/parquet).
"""

import os
import shutil
import statistics
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq


def timed(cmd, out, runs):
    """The median wall seconds of ``runs`` runs of ``cmd`` (``out`` removed before each)."""
    times = []
    for _ in range(runs):
        shutil.rmtree(out, ignore_errors=True)
        os.sync()
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def write_parquet(src, dest):
    """The image folder ``src`` (``CLASS/FILE``, or files directly) as an HF-style Parquet file;
    returns the number of rows."""
    classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
    rows = []
    for label, c in enumerate(classes or [""]):
        for root, _, files in sorted(os.walk(os.path.join(src, c))):
            for f in sorted(files):
                rows.append((os.path.join(root, f), label))
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    schema = pa.schema([("image", image_type), ("label", pa.int64())])
    with pq.ParquetWriter(dest, schema) as w:
        for start in range(0, len(rows), 100):
            part = rows[start : start + 100]
            images = [{"bytes": open(p, "rb").read(), "path": os.path.basename(p)} for p, _ in part]
            w.write_table(
                pa.table(
                    {"image": pa.array(images, type=image_type), "label": [l for _, l in part]},
                    schema=schema,
                )
            )
    return len(rows)


def main():
    bin_ = sys.argv[1] if len(sys.argv) > 1 else "target/release/stokehold"
    work = os.environ.get("BENCH_WORK", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench-data", "work", "parquet"))
    runs = int(os.environ.get("RUNS", "3"))
    os.makedirs(work, exist_ok=True)
    src = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("BENCH_SRC", "")
    if not src:
        src = os.path.join(work, "sample")
        if not os.path.isdir(src):
            subprocess.run(
                [bin_, "sample-data", src, "--images", "3000", "--classes", "30"],
                check=True,
                stdout=subprocess.DEVNULL,
            )
    parquet = os.path.join(work, "images.parquet")
    n = write_parquet(src, parquet)
    # warm the page cache for both
    for root, _, files in os.walk(src):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                fh.read()
    with open(parquet, "rb") as fh:
        while fh.read(1 << 24):
            pass
    out = os.path.join(work, "out")
    size = os.path.getsize(parquet) >> 20
    print(f"source: {src} ({n} images; as Parquet {size} MiB, row groups of 100, snappy), "
          f"{os.cpu_count()} cores, hot page cache, median of {runs} runs")
    # pack's default (JPEGs rewritten with restart markers, which takes most of the time), and
    # the bytes as given (what reading each source costs)
    for what, extra in (("default", []), ("--no-restart-markers", ["--no-restart-markers"])):
        t_folder = timed([bin_, "pack", src, out, *extra], out, runs)
        t_parquet = timed([bin_, "pack", parquet, out, *extra], out, runs)
        print(
            f"parquet ({what}): {t_parquet:.3f} s vs the folder {t_folder:.3f} s: packing Parquet runs at "
            f"{t_folder / t_parquet:.2f}x the speed of packing the folder (target >= 0.70)"
        )
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
