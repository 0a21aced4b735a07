"""The decoded cache on disk shared by the ranks of a node (issue #39): 2 ranks of one node,
started together, 3 epochs of decode + RandomResizedCrop(224) + flip with ``decoded_cache=256``
from a cold directory, against the same ranks each with a directory of its own (what a cold
first run did before the ranks shared one: no rank saw the other's parts within the run) and
against RAM only (no directory).

Reported, medians of ``--rounds`` interleaved rounds: the CPU seconds of both ranks together
(user + system, the whole processes), the images decoded on the node (the directory's misses),
the bytes the directory(ies) hold, and the first epoch's wall time (the one that fills the
directory) against RAM only.

    python scripts/bench_decoded_ranks.py --shards bench-data/inet-shards
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, os, resource, sys, time
import stokehold
from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

shards, root, rank, world, epochs, sync = sys.argv[1:7]
rank, world, epochs = int(rank), int(world), int(epochs)
kw = dict(seed=1, threads=1, rank=rank, world_size=world, decoded_cache=256,
          transforms={"image": [RandomResizedCrop(224), RandomHorizontalFlip()]})
if root != "-":
    kw["decoded_cache_dir"] = root
loader = stokehold.Loader(shards, 64, **kw)
open(os.path.join(sync, f"ready-{rank}"), "w").close()
while len([f for f in os.listdir(sync) if f.startswith("ready-")]) < world:
    time.sleep(0.002)
times = []
for e in range(epochs):
    loader.set_epoch(e)
    t = time.perf_counter()
    n = sum(len(b["label"]) for b in loader)
    times.append(time.perf_counter() - t)
caches = loader.stats()["caches"]
decoded = caches["decoded-disk"]["misses"] if "decoded-disk" in caches else caches["decoded"]["misses"]
ru = resource.getrusage(resource.RUSAGE_SELF)
# the decode prefix's mean time on a miss: what its hits saved, per hit, in RAM and on disk
saved = sum(c["saved"] for k, c in caches.items() if k.startswith("decoded"))
hits = sum(c["hits"] for k, c in caches.items() if k.startswith("decoded"))
print(json.dumps({"times": times, "decoded": decoded, "cpu": ru.ru_utime + ru.ru_stime,
                  "decode_cpu": decoded * saved / hits if hits else 0.0,
                  "shared": caches.get("decoded-disk", {}).get("shared", 0)}))
"""


def run(shards, mode, work, epochs, world=2):
    """One run of ``world`` ranks; ``mode``: "shared" (one directory), "separate" (one each),
    "ram" (none)."""
    sync = tempfile.mkdtemp(dir=work)
    roots = []
    procs = []
    for r in range(world):
        root = {"shared": os.path.join(work, "shared"), "separate": os.path.join(work, f"own-{r}"), "ram": "-"}[mode]
        roots.append(root)
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, shards, root, str(r), str(world), str(epochs), sync],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=1800)
        if p.returncode:
            raise SystemExit(f"{mode}: a rank failed:\n{stderr}")
        out.append(json.loads(stdout))
    disk = 0
    for root in set(roots) - {"-"}:
        for dirpath, _, files in os.walk(root):
            disk += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files if f.endswith(".skdc"))
        shutil.rmtree(root)
    shutil.rmtree(sync)
    return {
        "cpu": sum(o["cpu"] for o in out),
        "decode_cpu": sum(o["decode_cpu"] for o in out),
        "decoded": sum(o["decoded"] for o in out),
        "first_epoch": max(o["times"][0] for o in out),
        "shared": sum(o["shared"] for o in out),
        "disk": disk,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", required=True, help="a packed image dataset (make bench-data)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="stokehold-decoded-ranks-")
    os.makedirs(work, exist_ok=True)
    os.environ.setdefault("STOKEHOLD_KEEP_FREE", "0")
    res = {m: [] for m in ("separate", "shared", "ram")}
    for k in range(a.rounds):
        for mode in res:
            r = run(a.shards, mode, work, a.epochs)
            res[mode].append(r)
            print(f"round {k + 1} {mode:8} CPU {r['cpu']:.1f} s (decode {r['decode_cpu']:.1f} s)  decoded {r['decoded']}  first epoch {r['first_epoch']:.2f} s  "
                  f"shared hits {r['shared']}  on disk {r['disk'] / 2**20:,.0f} MiB", flush=True)
    med = {m: {k: statistics.median(r[k] for r in v) for k in v[0]} for m, v in res.items()}
    n = None
    try:
        n = json.load(open(os.path.join(a.shards, "manifest.json")))["total_records"]
    except OSError:
        pass
    s, o, ram = med["shared"], med["separate"], med["ram"]
    print(f"\n2 ranks, {a.epochs} epochs, decode + RandomResizedCrop(224) + flip, decoded_cache=256, medians of {a.rounds} rounds"
          + (f", {n:,} images" if n else ""))
    print(f"decode CPU, both ranks (images decoded x the prefix's mean time): shared directory {s['decode_cpu']:.1f} s vs a "
          f"directory each {o['decode_cpu']:.1f} s: {s['decode_cpu'] / o['decode_cpu']:.2f}x (target <= 0.6)")
    print(f"whole-process CPU, both ranks (start, reads, crops of cached pixels included): {s['cpu']:.1f} s vs "
          f"{o['cpu']:.1f} s: {s['cpu'] / o['cpu']:.2f}x")
    print(f"images decoded on the node: {s['decoded']:.0f} vs {o['decoded']:.0f}" + (f" ({s['decoded'] / n:.3f} / {o['decoded'] / n:.3f} per image)" if n else ""))
    print(f"on disk: {s['disk'] / 2**20:,.0f} MiB vs {o['disk'] / 2**20:,.0f} MiB")
    print(f"the epoch that fills the directory: {s['first_epoch']:.2f} s vs RAM only {ram['first_epoch']:.2f} s: "
          f"{ram['first_epoch'] / s['first_epoch']:.2f}x its speed (target >= 0.9)")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
