#!/usr/bin/env python3
"""Ray conversion vs `stokehold pack` of the same JPEG folder, in one run (issue #16).

    python scripts/bench_ray.py [--images DIR] [--limit N] [--workers 1,2,4] [--cpus 2]

DIR is an image folder (class sub-folders of JPEGs, e.g. one made by
../shared/bench/make-imagenet-like, or `stokehold sample-data`); without it a sample set is
generated. Both sides write the same schema (image:jpeg + label) to local disk:

- pack: `stokehold pack` (in-process, --threads = the CPUs);
- ray:  read_binary_files → map_batches (label from the path) → stokehold.ray.Datasink, on a
        local Ray cluster of --cpus CPUs (started before timing; its start is reported apart),
        with 1, 2 and 4 concurrent tasks (each asks for cpus/tasks CPUs, so 4 tasks share 2).

Prints images/s and MB/s of each, the ratio ray/pack, and the per-task figures the scaling model
of docs/scale.md uses (rows and seconds per task, task throughput).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", default="/work/imnet/train" if os.path.isdir("/work/imnet/train") else None)
    ap.add_argument("--limit", type=int, default=3000, help="images used (sorted, first N)")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    import numpy as np
    import ray

    import stokehold
    import stokehold.ray as sray
    from stokehold._native import run_cli

    tmp = tempfile.mkdtemp(prefix="bench-ray-")
    try:
        src = args.images
        if src is None:
            src = os.path.join(tmp, "sample")
            assert run_cli(["stokehold", "sample-data", src, "--images", str(args.limit), "--classes", "10"]) == 0
        paths = sorted(
            os.path.join(root, f)
            for root, _, files in os.walk(src)
            for f in files
            if f.lower().endswith((".jpg", ".jpeg"))
        )[: args.limit]
        # the same files for both: a folder of links to the subset
        subset = os.path.join(tmp, "subset")
        for p in paths:
            d = os.path.join(subset, os.path.basename(os.path.dirname(p)))
            os.makedirs(d, exist_ok=True)
            os.link(p, os.path.join(d, os.path.basename(p))) if _same_fs(p, tmp) else shutil.copy(p, d)
        paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(subset) for f in fs)
        classes = sorted(os.listdir(subset))
        nbytes = sum(os.path.getsize(p) for p in paths)
        n = len(paths)
        print(f"{n} JPEGs, {nbytes / 2**20:.1f} MiB, {len(classes)} classes, {args.cpus} CPUs")

        def timed(fn):
            t = time.perf_counter()
            fn()
            return time.perf_counter() - t

        # pack (warm the page cache first: both sides read the files from memory)
        for p in paths:
            with open(p, "rb") as f:
                f.read()
        pack_out = os.path.join(tmp, "pack")
        pack_s = timed(lambda: run_cli(["stokehold", "pack", subset, pack_out, "--threads", str(args.cpus),
                                        "--shard-size", "64MiB"]) == 0 or sys.exit("pack failed"))
        assert len(stokehold.Dataset(pack_out)) == n

        t = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                 object_store_memory=512 * 2**20, configure_logging=False)
        ray_start_s = time.perf_counter() - t
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False

        def label(batch):
            return {
                "image": batch["bytes"],
                "label": np.array([classes.index(p.rsplit("/", 2)[-2]) for p in batch["path"]], np.int64),
            }

        results = {"images": n, "bytes": nbytes, "cpus": args.cpus, "pack_s": pack_s,
                   "ray_start_s": ray_start_s, "ray": {}}
        for w in [int(x) for x in args.workers.split(",")]:
            out = os.path.join(tmp, f"ray{w}")
            tasks = max(w * 2, 4)
            per = max(1, n // tasks)

            def convert():
                ds = ray.data.read_binary_files(paths, include_paths=True, override_num_blocks=tasks)
                ds = ds.map_batches(label, batch_size=per, num_cpus=args.cpus / w, concurrency=w)
                ds.write_datasink(sray.Datasink(out, overrides={"image": "image:jpeg"}, classes=classes),
                                  concurrency=w, ray_remote_args={"num_cpus": args.cpus / w})

            s = timed(convert)
            got = stokehold.Dataset(out)
            assert len(got) == n
            shards = len(got.manifest["shards"])
            results["ray"][w] = {"s": s, "tasks": tasks, "shards": shards}
            shutil.rmtree(out)
        ray.shutdown()

        print(f"\n{'':24}{'seconds':>9}{'images/s':>10}{'MiB/s':>8}{'vs pack':>9}")
        print(f"{'stokehold pack':24}{pack_s:9.2f}{n / pack_s:10.0f}{nbytes / 2**20 / pack_s:8.1f}{1.0:9.2f}x")
        for w, r in results["ray"].items():
            s = r["s"]
            print(f"{f'ray, {w} worker(s)':24}{s:9.2f}{n / s:10.0f}{nbytes / 2**20 / s:8.1f}{pack_s / s:9.2f}x"
                  f"   ({r['tasks']} tasks, {n / r['tasks']:.0f} images and "
                  f"{nbytes / r['tasks'] / 2**20:.1f} MiB per task, {r['shards']} shards)")
        print(f"(ray cluster start, not in the figures: {ray_start_s:.1f} s)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _same_fs(a: str, b: str) -> bool:
    return os.stat(a).st_dev == os.stat(b).st_dev


if __name__ == "__main__":
    sys.exit(main())
