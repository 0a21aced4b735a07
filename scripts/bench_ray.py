#!/usr/bin/env python3
"""Ray conversion vs `stokehold pack` of the same JPEG folder, in one run (issue #16).

    python scripts/bench_ray.py [--images DIR] [--limit N] [--workers 1,2,4] [--cpus 2]

DIR is an image folder (class sub-folders of JPEGs, e.g. one made by
../shared/bench/make-imagenet-like, or `stokehold sample-data`); without it a sample set is
generated. Both sides write the same schema (image:jpeg + label) to local disk:

- pack: `stokehold pack --no-restart-markers` (in-process, --threads = the CPUs; the Datasink with restart_markers=False, bytes as given on both sides);
- ray:  paths → map_batches (read the file, label from the path) → stokehold.ray.Datasink, on a
        local Ray cluster of --cpus CPUs (started before timing; its start is reported apart),
        with 1, 2 and 4 concurrent tasks (each asks for cpus/tasks CPUs, so 4 tasks share 2); the
        files are read in the tasks (paths → map_batches with open()); one more row reads them
        with ray.data.read_binary_files. A warm-up job runs first (worker start, imports).

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
    from _bench import BENCH_DATA

    ap.add_argument("--images", default=os.path.join(BENCH_DATA, "inet", "train"),
                    help="an image folder (default: make bench-data's)")
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
        # --no-restart-markers, and the Datasink's restart_markers=False: bytes as given on both sides
        pack_s = timed(lambda: run_cli(["stokehold", "pack", subset, pack_out, "--threads", str(args.cpus),
                                        "--shard-size", "64MiB", "--no-restart-markers"]) == 0
                       or sys.exit("pack failed"))
        assert len(stokehold.Dataset(pack_out)) == n

        t = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
                 object_store_memory=512 * 2**20, configure_logging=False)
        ray_start_s = time.perf_counter() - t
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False

        class_of = {c: i for i, c in enumerate(classes)}

        def label(batch):
            return {
                "image": batch["bytes"],
                "label": np.array([class_of[p.rsplit("/", 2)[-2]] for p in batch["path"]], np.int64),
            }

        def load(batch):
            # the files read in the task with open(): Ray's read_binary_files costs ~3 ms a file
            images = []
            for p in batch["path"]:
                with open(p, "rb") as f:
                    images.append(f.read())
            return label({"bytes": images, "path": batch["path"]})

        def convert(out, w, reader="paths", part=paths):
            tasks = max(w * 2, 4)
            if reader == "paths":
                ds = ray.data.from_items([{"path": p} for p in part], override_num_blocks=tasks)
                ds = ds.map_batches(load, batch_size=None, num_cpus=args.cpus / w)
            else:
                ds = ray.data.read_binary_files(part, include_paths=True, override_num_blocks=tasks)
                ds = ds.map_batches(label, batch_size=None, num_cpus=args.cpus / w)
            ds.write_datasink(sray.Datasink(out, overrides={"image": "image:jpeg"}, classes=classes,
                                            restart_markers=False),
                              ray_remote_args={"num_cpus": args.cpus / w})
            return tasks

        # warm-up (not timed): Ray starts its worker processes and they import numpy, pyarrow
        # and stokehold on the first job
        t = time.perf_counter()
        convert(os.path.join(tmp, "warm"), 1, part=paths[:200])
        convert(os.path.join(tmp, "warm2"), 4, part=paths[:200])
        results = {"images": n, "bytes": nbytes, "cpus": args.cpus, "pack_s": pack_s,
                   "ray_start_s": ray_start_s, "warmup_s": time.perf_counter() - t, "ray": {}}
        runs = [(int(x), "paths") for x in args.workers.split(",")] + [(2, "read_binary_files")]
        for w, reader in runs:
            out = os.path.join(tmp, f"ray{w}{reader}")
            start = time.perf_counter()
            tasks = convert(out, w, reader)
            s = time.perf_counter() - start
            got = stokehold.Dataset(out)
            assert len(got) == n
            results["ray"][f"{w} {reader}"] = {"s": s, "tasks": tasks, "shards": len(got.manifest["shards"])}
            shutil.rmtree(out)
        ray.shutdown()

        print(f"\n{'':24}{'seconds':>9}{'images/s':>10}{'MiB/s':>8}{'vs pack':>9}")
        print(f"{'stokehold pack':24}{pack_s:9.2f}{n / pack_s:10.0f}{nbytes / 2**20 / pack_s:8.1f}{1.0:9.2f}x")
        for key, r in results["ray"].items():
            w, reader = key.split(" ")
            s = r["s"]
            name = f"ray, {w} task(s)" + (", read_binary_files" if reader != "paths" else "")
            print(f"{name:24}{s:9.2f}{n / s:10.0f}{nbytes / 2**20 / s:8.1f}{pack_s / s:9.2f}x"
                  f"   ({r['tasks']} tasks, {n / r['tasks']:.0f} images and "
                  f"{nbytes / r['tasks'] / 2**20:.1f} MiB per task, {s * int(w) / r['tasks']:.2f} s per task)")
        print(f"(not in the figures: ray cluster start {ray_start_s:.1f} s, warm-up jobs {results['warmup_s']:.1f} s)")
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
