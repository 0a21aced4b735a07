#!/usr/bin/env python3
"""stokehold.Loader vs torch.utils.data.DataLoader on ImageNet-like JPEGs, side by side in one run.

    .venv/bin/python scripts/bench_vs_torch_dataloader.py [--root bench-data/inet/train]
        [--shards bench-data/inet-shards] [--batch 256] [--workers 2] [--runs 2] [--clean-runs 2]
        [--interval 0.05] [--quiet-wait 60]

``make bench`` runs it on the data of ``make bench-data`` (the folder and its ``stokehold pack``);
it needs torchvision and Pillow (``make bench-setup`` installs them into .venv) and a release
build of the Python package (``make develop-release``).

One epoch of decode + RandomResizedCrop(224) + RandomHorizontalFlip, uint8 CHW, batch 256,
shuffle, drop_last, 2 workers / threads. Each side runs in its own subprocess (separate memory),
``--runs`` times, alternating (torch, stokehold, torch, stokehold, ...):

- torch:     ``DataLoader(ImageFolder(root, transform=Compose([RandomResizedCrop(224),
             RandomHorizontalFlip(), PILToTensor()])), batch_size=256, num_workers=2,
             shuffle=True, drop_last=True)`` (worker processes, PIL decoding from the files);
- stokehold: ``stokehold.Loader(shards, 256, threads=2, shuffle=True, drop_last=True,
             transforms={"image": [RandomResizedCrop(224), RandomHorizontalFlip()]},
             to="torch")`` (native threads in the process, from the packed shards).

Both children import torch before creating their loader (a training process has it anyway).
Figures per run:

- images/s over the epoch, from iterator creation (``iter(loader)``: for torch this forks the
  workers) to the last batch, nothing excluded;
- time to the first batch from process start (the parent's clock just before it starts the
  child: interpreter start and every import included) and from loader creation (building the
  dataset object and the loader: ImageFolder's directory scan / opening the shards);
- peak memory: PSS summed over the child and all its descendants (DataLoader workers), from
  ``/proc/PID/smaps_rollup``, sampled by the parent every ``--interval`` s or less often (the sampler
  keeps within 2% of one core, ``sample_peak_pss``); the max is kept.

Reading smaps_rollup is not free: for a process that has imported torch it walks ~0.5 GiB of
mappings (5-30 ms a read, more when the process is busy), so on a small machine the sampler takes a
good part of a core from the loaders. Hence ``--clean-runs`` more runs per side without the
sampler (PSS not measured) for the throughput and latency figures. Every run also records CPU
seconds: the child's process tree (``RUSAGE_CHILDREN``: the DataLoader workers are waited for by
the child, so they are included), the sampler's, and "foreign" CPU (all busy CPU time from
``/proc/stat`` minus those two: other processes on the machine), which shows contention.

Before each child the parent waits (up to ``--quiet-wait`` s) until the machine is quiet (under
0.15 busy cores over 0.5 s), and prints how long it waited.

The summary takes, per side, the run with the higher images/s (every run is printed as well).
Targets: stokehold >= 3x the images/s, lower peak PSS, first batch < 0.5 s from loader creation.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from _bench import BENCH_DATA, require

T0_ENV = "STOKEHOLD_BENCH_T0"


# --- child -------------------------------------------------------------------------------------


def child(side: str, args) -> None:
    t0 = float(os.environ[T0_ENV])
    t_main = time.time()
    import torch  # both sides: a training process has torch imported anyway

    if side == "torch":
        import torchvision
        from torchvision import datasets
        from torchvision import transforms as T

        t_imports = time.time()
        t_create = time.time()
        ds = datasets.ImageFolder(
            args.root,
            transform=T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()]),
        )
        loader = torch.utils.data.DataLoader(
            ds, batch_size=args.batch, num_workers=args.workers, shuffle=True, drop_last=True
        )
        extra = {"torchvision": torchvision.__version__}
    else:
        import stokehold
        from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

        t_imports = time.time()
        t_create = time.time()
        loader = stokehold.Loader(
            args.shards,
            args.batch,
            threads=args.workers,
            shuffle=True,
            drop_last=True,
            transforms={"image": [RandomResizedCrop(224), RandomHorizontalFlip()]},
            to="torch",
        )
        extra = {"stokehold": stokehold.__version__}

    t_iter = time.time()
    t_first = None
    images = batches = 0
    for batch in loader:
        if side == "torch":
            img, label = batch
        else:
            img, label = batch["image"], batch["label"]
        if t_first is None:
            t_first = time.time()
            assert img.shape == (args.batch, 3, 224, 224) and img.dtype == torch.uint8, (img.shape, img.dtype)
            assert isinstance(img, torch.Tensor) and isinstance(label, torch.Tensor)
            first_mean = float(img.float().mean())
        images += len(label)
        batches += 1
    t_end = time.time()
    report = None
    if side == "stokehold":
        report = loader.report()
        loader.close()
    print(
        json.dumps(
            dict(
                side=side,
                images=images,
                batches=batches,
                startup=t_main - t0,
                imports=t_imports - t_main,
                create_to_iter=t_iter - t_create,
                proc_to_first=t_first - t0,
                create_to_first=t_first - t_create,
                iter_to_first=t_first - t_iter,
                epoch=t_end - t_iter,
                rate=images / (t_end - t_iter),
                first_mean=first_mean,
                torch=torch.__version__,
                report=report,
                **extra,
            )
        ),
        flush=True,
    )


# --- parent ------------------------------------------------------------------------------------


def tree(pid: int):
    """``pid`` and all its live descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                try:
                    with open(f"/proc/{p}/task/{tid}/children") as f:
                        todo.extend(int(c) for c in f.read().split())
                except OSError:
                    pass
        except OSError:
            pass
    return out


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def sample_peak_pss(proc, interval: float, budget: float = 0.02):
    """Sample the PSS of ``proc``'s process tree until it exits; return (peak KiB, processes at the
    peak, samples, seconds spent sampling). Samples come at most every ``interval`` s and the
    sampler keeps within ``budget`` of one core: one sample of a tree that has imported torch or
    TensorFlow walks gigabytes of mappings (tens of ms of kernel time), and every 50 ms that took
    most of a core from the loader under test (far more from the peers than from stokehold)."""
    peak, peak_procs, samples, cost = 0, 0, 0, 0.0
    while proc.poll() is None:
        t = time.thread_time()
        pids = tree(proc.pid)
        total = sum(pss_kib(p) for p in pids)
        spent = time.thread_time() - t
        cost += spent
        samples += 1
        if total > peak:
            peak, peak_procs = total, len(pids)
        time.sleep(max(interval, spent / budget))
    return peak, peak_procs, samples, cost


def busy_seconds() -> float:
    """Busy CPU time of the whole machine, from /proc/stat (every state but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def cpu(who) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def wait_quiet(limit: float) -> float:
    """Wait until the whole machine is under 0.15 busy cores over 0.5 s, at most ``limit`` s."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        b0, w0 = busy_seconds(), time.monotonic()
        time.sleep(0.5)
        if (busy_seconds() - b0) / (time.monotonic() - w0) < 0.15:
            break
    return time.monotonic() - t0


def run_child(side: str, args, sample: bool):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", side]
    cmd += ["--root", args.root, "--shards", args.shards, "--batch", str(args.batch), "--workers", str(args.workers)]
    env = dict(os.environ)
    c0, s0_cpu, b0 = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF), busy_seconds()
    env[T0_ENV] = repr(time.time())
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak, peak_procs, samples, sample_cost = sample_peak_pss(proc, args.interval) if sample else (0, 0, 0, 0.0)
    out, err = proc.communicate()
    child_cpu = cpu(resource.RUSAGE_CHILDREN) - c0
    self_cpu = cpu(resource.RUSAGE_SELF) - s0_cpu
    foreign = max(0.0, busy_seconds() - b0 - child_cpu - self_cpu)
    if proc.returncode != 0:
        sys.exit(f"{side} child failed ({proc.returncode}):\n{err}")
    res = json.loads(out.strip().splitlines()[-1])
    res.update(
        sampled=sample,
        child_cpu=child_cpu,
        sampler_cpu=self_cpu,
        foreign_cpu=foreign,
        peak_pss_mib=peak / 1024 if sample else None, peak_procs=peak_procs, samples=samples, sample_ms=1000 * sample_cost / max(1, samples))
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(BENCH_DATA, "inet", "train"), help="ImageNet-like class folders")
    ap.add_argument("--shards", default=os.path.join(BENCH_DATA, "inet-shards"), help="the same images packed")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2, help="runs per side with the PSS sampler")
    ap.add_argument("--clean-runs", type=int, default=2, help="more runs per side without it")
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--quiet-wait", type=float, default=60.0, help="max seconds to wait for an idle machine")
    ap.add_argument("--child", choices=["torch", "stokehold"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args)
        return
    check_inputs(args)

    import PIL

    print(
        f"ImageNet-like JPEGs: {args.root} (files) / {args.shards} (packed); decode + "
        f"RandomResizedCrop(224) + RandomHorizontalFlip, uint8 CHW, batch {args.batch}, shuffle, "
        f"drop_last, {args.workers} workers/threads, 1 epoch; {os.cpu_count()} CPUs; "
        f"PSS sampled every {args.interval * 1000:.0f} ms or less often (within 2% of a core)"
    )
    results = []
    plan = [True] * args.runs + [False] * args.clean_runs
    for r, sample in enumerate(plan):
        for side in ("torch", "stokehold"):
            waited = wait_quiet(args.quiet_wait)
            res = run_child(side, args, sample)
            res["run"] = r + 1
            res["waited"] = waited
            results.append(res)
            pss = f"peak PSS {res['peak_pss_mib']:.0f} MiB" if sample else "no PSS sampling"
            print(
                f"  run {r + 1} {side:9}: {res['rate']:7.0f} img/s, first batch {res['create_to_first']:.3f} s "
                f"after loader creation, {pss} (waited {waited:.1f} s for a quiet machine; foreign CPU "
                f"during the run {res['foreign_cpu']:.1f} s)",
                flush=True,
            )
    r0 = results[0]
    print(f"versions: torch {r0['torch']}, torchvision {r0.get('torchvision') or results[1].get('torchvision')}, "
          f"Pillow {PIL.__version__}, stokehold {results[1].get('stokehold')}, python {sys.version.split()[0]}")

    print()
    hdr = (
        f"{'loader':10} {'run':>3} {'images':>6} {'batches':>7} {'epoch s':>7} {'img/s':>7} "
        f"{'start→1st':>9} {'create→1st':>10} {'iter→1st':>8} {'imports':>7} {'peak PSS':>9} {'procs':>5} "
        f"{'CPU s':>6} {'img/CPU-s':>9} {'sampler':>7} {'foreign':>7} {'mean px':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for res in results:
        print(
            f"{res['side']:10} {res['run']:3d} {res['images']:6d} {res['batches']:7d} {res['epoch']:7.2f} "
            f"{res['rate']:7.0f} {res['proc_to_first']:8.3f}s {res['create_to_first']:9.3f}s "
            f"{res['iter_to_first']:7.3f}s {res['imports']:6.2f}s "
            + (f"{res['peak_pss_mib']:5.0f} MiB {res['peak_procs']:5d} " if res["sampled"] else f"{'-':>9} {'-':>5} ")
            + f"{res['child_cpu']:6.1f} {res['images'] / res['child_cpu']:9.0f} {res['sampler_cpu']:6.1f}s "
            f"{res['foreign_cpu']:6.1f}s {res['first_mean']:7.1f}"
        )
    print(
        "(start→1st: from the parent starting the child process, interpreter start and imports "
        "included; create→1st: from building the dataset + loader objects; img/s from iter(loader); "
        "procs: processes in the tree at the PSS peak; CPU s: CPU time of the child's process tree, "
        "whole process life; img/CPU-s: images per CPU second of it; sampler: the parent's CPU time "
        "(PSS sampling); foreign: other processes' CPU time during the run; mean px: mean pixel of "
        "the first batch)"
    )
    sampled = [r for r in results if r["sampled"]]
    if sampled:
        n = sum(r["samples"] for r in sampled)
        print(f"PSS sampling: {n} samples, {sum(r['sample_ms'] * r['samples'] for r in sampled) / max(1, n):.2f} ms each on average")
    if sampled:
        summary(sampled, f"runs with the PSS sampler, best of {args.runs} per side by img/s", True)
    clean = [r for r in results if not r["sampled"]]
    if clean:
        summary(clean, f"runs without the sampler, best of {args.clean_runs} per side by img/s", False)
    s = max((r for r in results if r["side"] == "stokehold"), key=lambda r: r["rate"])
    print()
    print(f"stokehold stage profile (its fastest run, run {s['run']}):")
    print(s["report"])


def check_inputs(args) -> None:
    """Exit with one line saying what to do when a module or an input of the bench is missing."""
    require("PIL", "torch", "torchvision", "stokehold")
    if not os.path.isdir(args.root) or not any(e.is_dir() for e in os.scandir(args.root)):
        sys.exit(f"error: no class folders in {args.root}: make them with `make bench-data` (or pass --root DIR)")
    if not os.path.exists(os.path.join(args.shards, "manifest.json")):
        sys.exit(
            f"error: no dataset at {args.shards}: `make bench-data` packs it (or `stokehold pack "
            f"{args.root} {args.shards}`)"
        )


def summary(results, title: str, with_pss: bool) -> None:
    best = {s: max((r for r in results if r["side"] == s), key=lambda r: r["rate"]) for s in ("torch", "stokehold")}
    t, s = best["torch"], best["stokehold"]
    print()
    print(f"{title}:")
    print(f"{'':32}{'torch DataLoader':>18} {'stokehold.Loader':>18}   ratio / target")
    print(f"images/s (from iter)            {t['rate']:18.0f} {s['rate']:18.0f}   {s['rate'] / t['rate']:.2f}x (>= 3x: {'met' if s['rate'] >= 3 * t['rate'] else 'NOT met'})")
    print(f"process start → first batch     {t['proc_to_first']:17.3f}s {s['proc_to_first']:17.3f}s   {t['proc_to_first'] / s['proc_to_first']:.2f}x sooner")
    print(f"loader creation → first batch   {t['create_to_first']:17.3f}s {s['create_to_first']:17.3f}s   (< 0.5 s: {'met' if s['create_to_first'] < 0.5 else 'NOT met'})")
    if with_pss:
        print(f"peak PSS, process tree          {t['peak_pss_mib']:14.0f} MiB {s['peak_pss_mib']:14.0f} MiB   {s['peak_pss_mib'] / t['peak_pss_mib']:.2f}x (lower: {'met' if s['peak_pss_mib'] < t['peak_pss_mib'] else 'NOT met'})")
    ti, si = (max(r["images"] / r["child_cpu"] for r in results if r["side"] == x) for x in ("torch", "stokehold"))
    print(f"images per CPU second (best)    {ti:18.0f} {si:18.0f}   {si / ti:.2f}x")
    print(f"foreign CPU during those runs   {t['foreign_cpu']:17.1f}s {s['foreign_cpu']:17.1f}s")


if __name__ == "__main__":
    main()
