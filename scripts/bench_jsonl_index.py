"""JSON Lines in place (issue #52): the first open of a large JSONL of conversations (its line
index built) against reading the file once, and the time from opening it to the first batch.

A JSONL of generated conversations of about ``--gb`` GB is written once (deterministic; kept for
later runs), then, warm page cache, best of ``--rounds``: reading the file once in 16 MiB reads;
``stokehold.Dataset(file, rebuild_index=True)`` (the scan: a newline search and a CRC-32C per
line, split among the cores); the first batch of a ``Loader`` after a first open with an empty
index directory; and an open that reuses the kept index. The issue asks for the first batch of
a 10 GB file within 5 s of opening it the first time on an NVMe-class disk (for a cold cache,
drop it first: ``echo 3 > /proc/sys/vm/drop_caches``, then ``--rounds 1``).

    make install   # a release build of the extension
    python scripts/bench_jsonl_index.py --gb 10 --dir /nvme/tmp
"""

import argparse
import json
import os
import shutil
import tempfile
import time

import stokehold


def write(path, gb):
    target = int(gb * 1e9)
    with open(path, "w") as f:
        n = 0
        while f.tell() < target:
            turns = 2 + n % 7
            msgs = [{"role": "system", "content": "You are a helpful assistant."}]
            for t in range(turns):
                msgs.append({"role": "user", "content": f"Question {n}.{t}: " + "lorem ipsum " * (5 + (n * 7 + t) % 60)})
                msgs.append({"role": "assistant", "content": f"Answer {n}.{t}: " + "dolor sit amet " * (10 + (n * 13 + t) % 120)})
            f.write(json.dumps({"id": n, "messages": msgs, "source": "synthetic"}) + "\n")
            n += 1
    return n


def best(rounds, fn):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    path = os.path.join(a.dir, f"stokehold-convs-{a.gb:g}gb.jsonl")
    if not os.path.exists(path):
        print(f"writing {path} ...", flush=True)
        print(f"  {write(path, a.gb)} conversations", flush=True)
    size = os.path.getsize(path)

    def read():
        with open(path, "rb", buffering=0) as f:
            while f.read(16 << 20):
                pass

    ix = tempfile.mkdtemp(prefix="skh-ix-")

    def scan():
        stokehold.Dataset(path, index_dir=ix, rebuild_index=True)

    def first_batch():
        fresh = tempfile.mkdtemp(prefix="skh-ix-")
        try:
            ds = stokehold.Dataset(path, index_dir=fresh)
            next(iter(stokehold.Loader(ds, 64, shuffle=True, seed=0, threads=2)))
        finally:
            shutil.rmtree(fresh)

    def reopen():
        stokehold.Dataset(path, index_dir=ix)

    r = best(a.rounds, read)
    s = best(a.rounds, scan)
    f = best(a.rounds, first_batch)
    o = best(a.rounds, reopen)
    gb = size / 1e9
    print(f"file {gb:.2f} GB, {len(stokehold.Dataset(path, index_dir=ix)):,} lines, {os.cpu_count()} cores")
    print(f"read once        {r:7.2f} s  {gb / r:6.2f} GB/s")
    print(f"index (scan)     {s:7.2f} s  {gb / s:6.2f} GB/s  ({r / s:.2f}x the read's speed)")
    print(f"first batch      {f:7.2f} s  (first open, empty index directory, 64 conversations)")
    print(f"reopen (kept)    {o:7.2f} s")
    shutil.rmtree(ix)


if __name__ == "__main__":
    main()
