#!/usr/bin/env python3
"""Per-core throughput of the image pipeline: stokehold vs torchvision, side by side in one run.

    .venv/bin/python scripts/bench_image_per_core.py [--src bench-data/inet/train] [--files 1000]
        [--passes 3] [--work bench-data/work/per-core] [--core 0]

``make bench`` runs it (``--core 1 --passes 5``) on the images of ``make bench-data``; it needs
torchvision and Pillow (``make bench-setup`` installs them into .venv) and a release build of
the Python package (``make develop-release``).

Every pipeline runs on ONE core (the whole process is pinned with ``os.sched_setaffinity``, every
existing thread included, before any pipeline starts; threads created later inherit the mask) and
one thread; each figure is the median of ``--passes`` passes over the same ``--files`` JPEGs
(warm page cache: warm it first with ``cat``). Passes are interleaved (a, b, c, a, b, c, ...) so
that drift in the machine hits every pipeline alike.

(a) torchvision + PIL, from bytes already in memory: ``PIL.Image.open(BytesIO(b)).convert("RGB")``
    -> ``RandomResizedCrop(224)`` -> ``RandomHorizontalFlip()`` -> ``PILToTensor()`` (uint8 CHW),
    then ``torch.stack`` of every 50 (what a DataLoader's collate does), so that both sides hand
    out [50, 3, 224, 224] uint8 batches.
(b) stokehold: the same files packed into their own dataset as given (``stokehold pack
    --no-restart-markers`` of a folder of copies), ``stokehold.Loader(ds, 50, threads=1, shuffle=False, transforms={"image":
    [RandomResizedCrop(224), RandomHorizontalFlip()]}, prefetch=2)``; timed from ``iter(loader)``
    to the last batch (loader creation is timed apart and printed).
(d) stokehold as (b), over the same files packed by a plain ``stokehold pack`` (its default adds
    restart markers, losslessly: same pixels; crops then Huffman-decode only the rows and columns
    they need).
(c) reference: ``torchvision.io.decode_jpeg`` (RGB) -> ``RandomResizedCrop(224)`` on the uint8
    tensor (antialias) -> ``RandomHorizontalFlip()``, then ``torch.stack`` of every 50.

Target: (b) >= 4x (a) per core (and (d), the same pipeline on losslessly prepared files).
"""

import argparse
import io
import os

# Everything runs on one core: keep BLAS/OpenMP pools (numpy, torch) to one thread each, so that
# no idle pool spins on the measured core.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import shutil
import statistics
import sys
import time

from _bench import BENCH_DATA, require, run_or_exit


def pin_process(core: int) -> None:
    """Pin every thread of this process (not only the calling one) to ``core``."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except OSError:
            pass
    os.sched_setaffinity(0, {core})


def pick_files(src: str, n: int):
    """``n`` files spread evenly over the sorted list of every file under ``src``."""
    files = sorted(
        os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.lower().endswith((".jpg", ".jpeg"))
    )
    if not files:
        sys.exit(f"error: no JPEGs under {src}: make them with `make bench-data` (or pass --src DIR)")
    if len(files) < n:
        sys.exit(f"error: {src} holds {len(files)} JPEGs, fewer than --files {n}")
    step = len(files) / n
    return [files[int(i * step)] for i in range(n)]


def make_subset(files, src: str, work: str, name: str = "shards", extra=()) -> str:
    """Copy ``files`` (keeping class folders) under ``work`` and pack them; returns the dataset."""
    folder = os.path.join(work, "folder")
    shards = os.path.join(work, name)
    shutil.rmtree(folder, ignore_errors=True)
    for f in files:
        dst = os.path.join(folder, os.path.relpath(f, src))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(f, dst)
    cmd = [sys.executable, "-m", "stokehold._cli", "pack", folder, shards, "--overwrite", *extra]
    out = run_or_exit(cmd)
    print("  " + out.strip().replace("\n", "\n  "))
    return shards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=os.path.join(BENCH_DATA, "inet", "train"), help="ImageNet-like JPEGs")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--work", default=os.path.join(BENCH_DATA, "work", "per-core"), help="scratch directory")
    ap.add_argument("--core", type=int, default=0)
    args = ap.parse_args()
    if args.files % args.batch:
        sys.exit("error: --files must be a multiple of --batch (stokehold drops a partial last batch)")
    require("numpy", "PIL", "torch", "torchvision", "stokehold")

    print(f"selecting {args.files} files from {args.src}, packing them into {args.work}/shards")
    files = pick_files(args.src, args.files)
    shards = make_subset(files, args.src, args.work, "shards", ["--no-restart-markers"])
    marked = make_subset(files, args.src, args.work, "shards-rst")
    blobs = [open(f, "rb").read() for f in files]
    mib = sum(map(len, blobs)) / 2**20

    # Imports before pinning (they may start thread pools, which pin_process then pins too).
    import numpy as np
    import PIL
    import torch
    import torchvision
    from PIL import Image
    from torchvision import transforms as T

    import stokehold
    from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    pin_process(args.core)
    torch.manual_seed(0)

    ds = stokehold.Dataset(shards)
    ds_marked = stokehold.Dataset(marked)
    assert len(ds) == args.files == len(ds_marked), (len(ds), args.files)
    with Image.open(io.BytesIO(blobs[0])) as im0:
        size0 = im0.size
    print(
        f"versions: python {sys.version.split()[0]}, torch {torch.__version__}, torchvision "
        f"{torchvision.__version__}, Pillow {PIL.__version__}, numpy {np.__version__}, stokehold "
        f"{stokehold.__version__}"
    )
    print(
        f"data: {args.files} JPEGs, {mib:.1f} MiB (first is {size0[0]}x{size0[1]}); pinned to core "
        f"{args.core} (affinity {sorted(os.sched_getaffinity(0))}), torch threads "
        f"{torch.get_num_threads()}; batch {args.batch}; {args.passes} passes, median"
    )

    pil_tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])

    def run_pil():
        check = 0
        for i in range(0, len(blobs), args.batch):
            imgs = [pil_tf(Image.open(io.BytesIO(b)).convert("RGB")) for b in blobs[i : i + args.batch]]
            batch = torch.stack(imgs)
            check += int(batch[:, :, 112, 112].sum())
        assert batch.shape == (args.batch, 3, 224, 224) and batch.dtype == torch.uint8
        return check / (len(blobs) * 3)

    stages = [RandomResizedCrop(224), RandomHorizontalFlip()]
    create_times = []
    last_loader = []

    def run_stokehold(dataset=ds):
        t0 = time.perf_counter()
        loader = stokehold.Loader(
            dataset, args.batch, threads=1, shuffle=False, transforms={"image": stages}, prefetch=2
        )
        create_times.append(time.perf_counter() - t0)
        return loader

    def iterate_stokehold(loader):
        check = 0
        n = 0
        for batch in loader:
            img = batch["image"]
            check += int(img[:, :, 112, 112].sum(dtype=np.int64))
            n += len(img)
        assert n == args.files, n
        assert img.shape == (args.batch, 3, 224, 224) and img.dtype == np.uint8, (img.shape, img.dtype)
        last_loader[:] = [loader]
        return check / (n * 3)

    try:
        from torchvision.io import ImageReadMode, decode_jpeg

        tv_crop = T.Compose([T.RandomResizedCrop(224, antialias=True), T.RandomHorizontalFlip()])
        tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]

        def run_tvio():
            check = 0
            for i in range(0, len(tensors), args.batch):
                imgs = [tv_crop(decode_jpeg(t, mode=ImageReadMode.RGB)) for t in tensors[i : i + args.batch]]
                batch = torch.stack(imgs)
                check += int(batch[:, :, 112, 112].sum())
            assert batch.shape == (args.batch, 3, 224, 224) and batch.dtype == torch.uint8
            return check / (len(tensors) * 3)

        run_tvio()  # a first call loads the codec
    except Exception as e:  # pragma: no cover - torchvision without its image extension
        print(f"(c) torchvision.io.decode_jpeg unavailable: {type(e).__name__}: {e}")
        run_tvio = None

    # warm-up: the first batch of each (libraries, allocator, codec tables)
    for b in blobs[: args.batch]:
        pil_tf(Image.open(io.BytesIO(b)).convert("RGB"))
    warm = run_stokehold()
    next(iter(warm))
    warm.close()
    del warm

    names = {
        "a": "torchvision PIL (a)",
        "b": "stokehold (b)",
        "d": "stokehold, restart markers (d)",
        "c": "torchvision.io decode_jpeg (c)",
    }
    rates = {"a": [], "b": [], "c": [], "d": []}
    means = {"a": [], "b": [], "c": [], "d": []}
    for p in range(args.passes):
        t0 = time.perf_counter()
        means["a"].append(run_pil())
        rates["a"].append(args.files / (time.perf_counter() - t0))

        loader = run_stokehold()
        t0 = time.perf_counter()
        means["b"].append(iterate_stokehold(loader))
        rates["b"].append(args.files / (time.perf_counter() - t0))

        loader = run_stokehold(ds_marked)
        t0 = time.perf_counter()
        means["d"].append(iterate_stokehold(loader))
        rates["d"].append(args.files / (time.perf_counter() - t0))

        if run_tvio is not None:
            t0 = time.perf_counter()
            means["c"].append(run_tvio())
            rates["c"].append(args.files / (time.perf_counter() - t0))
        print(
            f"pass {p + 1}: "
            + ", ".join(f"{k} {rates[k][-1]:.0f} img/s" for k in "abdc" if rates[k])
        )
    assert os.sched_getaffinity(0) == {args.core}

    print()
    print(f"{'pipeline (1 core, 1 thread)':34} {'median img/s':>12} {'ms/img':>7}  {'passes':22} {'mean px':>7}")
    med = {}
    for k in "abdc":
        if not rates[k]:
            continue
        med[k] = statistics.median(rates[k])
        print(
            f"{names[k]:34} {med[k]:12.0f} {1000 / med[k]:7.2f}  "
            f"{', '.join(f'{r:.0f}' for r in rates[k]):22} {statistics.mean(means[k]):7.1f}"
        )
    print(f"stokehold Loader creation: median {statistics.median(create_times) * 1000:.2f} ms (not in its img/s)")
    print()
    # per-pass ratios (a pass runs every pipeline back to back, so drift hits them alike)
    per_pass = {k: statistics.median(r / a for r, a in zip(rates[k], rates["a"])) for k in "bd"}
    print(
        "median of per-pass ratios to (a): "
        + ", ".join(f"{k} {v:.2f}x" for k, v in per_pass.items())
    )
    ratio = med["b"] / med["a"]
    print(f"stokehold / torchvision PIL:        {ratio:.2f}x  (target >= 4x: {'met' if ratio >= 4 else 'NOT met'})")
    ratio_d = med["d"] / med["a"]
    print(
        f"stokehold, restart markers / PIL:   {ratio_d:.2f}x  (target >= 4x: {'met' if ratio_d >= 4 else 'NOT met'})"
    )
    if "c" in med:
        print(f"stokehold / torchvision.io:         {med['b'] / med['c']:.2f}x")
        print(f"torchvision.io / torchvision PIL:   {med['c'] / med['a']:.2f}x")
    if last_loader:
        print()
        print("stokehold stage profile (last pass):")
        print(last_loader[0].report())


if __name__ == "__main__":
    main()
