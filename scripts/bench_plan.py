#!/usr/bin/env python3
"""Planning packed conversations from kept counts (issues #52, #53): the first open of a JSONL of
short conversations counts them all (render + tokenize), the second plans from the counts kept
on disk. Prints, for each, the time from `SequenceLoader(...)` to its first batch, and the time
to plan a whole epoch's rows (`len(loader)` is known at open: the plan is made then).

    .venv/bin/python scripts/bench_plan.py --conversations 1000000 [--work /tmp/bench-plan]

Makes its own data (deterministic; kept in --work for later runs) with the tokenizer and template
of scripts/bench_chat.py. Needs a release build (`make install`). The issue asks <= 2 s to plan a
1 M-conversation epoch from the index.
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import require  # noqa: E402

require("stokehold", "tokenizers")

import stokehold  # noqa: E402
from bench_chat import make_tokenizer, words  # noqa: E402
from stokehold.text import ChatTemplate  # noqa: E402


def write(path, n):
    rng = random.Random(5)
    with open(path, "w") as f:
        for _ in range(n):
            msgs = []
            for _ in range(rng.randint(1, 3)):
                msgs.append({"role": "user", "content": words(rng, 2, 20)})
                msgs.append({"role": "assistant", "content": words(rng, 2, 40)})
            f.write(json.dumps({"messages": msgs}) + "\n")


def first_batch(data, model, threads):
    t0 = time.perf_counter()
    loader = stokehold.SequenceLoader(stokehold.Dataset(data), seq_len=4096, batch_size=8, packing="whole",
                                      text=ChatTemplate(model), threads=threads, rank=0, world_size=1)
    opened = time.perf_counter() - t0
    next(iter(loader))
    return opened, time.perf_counter() - t0, loader


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=1_000_000)
    ap.add_argument("--work", default="/tmp/bench-plan")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    data = os.path.join(a.work, f"convs-{a.conversations}.jsonl")
    model = os.path.join(a.work, "model")
    if not os.path.exists(os.path.join(model, "tokenizer.json")):
        os.makedirs(model, exist_ok=True)
        make_tokenizer(model)
    if not os.path.exists(data):
        write(data, a.conversations)
    kept = os.path.join(a.work, "kept")
    os.environ["STOKEHOLD_INDEX_DIR"] = kept
    import shutil

    shutil.rmtree(kept, ignore_errors=True)
    opened, first, loader = first_batch(data, model, a.threads)
    print(f"first open (line index + every conversation counted): {opened:.2f} s to plan, "
          f"{first:.2f} s to the first batch; {len(loader)} batches, fill {loader.stats()['packing']['fill']:.4f}")
    loader.close()
    opened, first, loader = first_batch(data, model, a.threads)
    print(f"second open (kept index, kept counts):                {opened:.2f} s to plan, "
          f"{first:.2f} s to the first batch; {len(loader)} batches")
    t0 = time.perf_counter()
    loader.set_epoch(1)
    next(iter(loader))
    print(f"another epoch's plan and first batch:                 {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
