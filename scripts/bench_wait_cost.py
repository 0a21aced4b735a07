#!/usr/bin/env python3
"""What recording the exposed wait costs a batch (issue #55): the token and the image pipeline,
each run with and without ``on_step`` (the per-step record itself is always on; its own cost is
measured with callgrind, see docs/pipeline.md "Operating at scale").

    .venv/bin/python scripts/bench_wait_cost.py [--work /tmp/wait-cost] [--passes 5] [--threads 2]

Makes its own data under ``--work`` (``stokehold sample-data`` JPEGs packed into a dataset; a
synthetic corpus packed with a word-level tokenizer), then times each pipeline's epoch with and
without the hook, interleaved (a, b, a, b, ...), and prints the median per-batch time of each and
the difference as a share of a batch. Needs a release build (``make develop-release``) and a
quiet machine; ``tokenizers`` for the token corpus.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

from _bench import require

require("stokehold", "tokenizers")

import stokehold  # noqa: E402
from stokehold.image import RandomHorizontalFlip, RandomResizedCrop  # noqa: E402


def make(work: str) -> tuple:
    images, tokens = os.path.join(work, "images-ds"), os.path.join(work, "tokens-ds")
    cli = [sys.executable, "-m", "stokehold._cli"]
    if not os.path.exists(images):
        subprocess.run(cli + ["sample-data", os.path.join(work, "jpegs"), "--images", "2000"], check=True)
        subprocess.run(cli + ["pack", os.path.join(work, "jpegs"), images], check=True)
    if not os.path.exists(tokens):
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers

        rng = random.Random(0)
        words = [f"w{i}" for i in range(5000)]
        docs = [" ".join(rng.choice(words) for _ in range(rng.randint(50, 2000))) for _ in range(4000)]
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.train_from_iterator(docs, trainers.WordLevelTrainer(special_tokens=["[UNK]", "</s>"]))
        tok.save(os.path.join(work, "tok.json"))
        with open(os.path.join(work, "c.jsonl"), "w") as f:
            for d in docs:
                f.write(json.dumps({"text": d}) + "\n")
        subprocess.run(cli + ["pack", os.path.join(work, "c.jsonl"), tokens, "--from", "jsonl", "--text-field", "text",
                              "--tokenizer", os.path.join(work, "tok.json")], check=True)
    return images, tokens


def per_batch(make_loader, hook, epochs: int) -> float:
    """Seconds per batch over ``epochs`` epochs, timed from the first batch (the loader's
    start-up, the same with and without the hook, is left out)."""
    loader = make_loader(hook)
    n, t0 = 0, None
    for _ in range(epochs):
        for _ in loader:
            if t0 is None:
                t0 = time.perf_counter()
            else:
                n += 1
    dt = time.perf_counter() - t0
    loader.close()
    return dt / max(n, 1)


def consumer_cpu(make_loader, hook, epochs: int) -> float:
    """CPU seconds of the consuming thread per batch (`time.thread_time` around each `next`):
    what the hook adds to the training loop's thread, whatever the machine's load."""
    loader = make_loader(hook)
    n, cpu = 0, 0.0
    for _ in range(epochs):
        it = iter(loader)
        while True:
            t = time.thread_time()
            try:
                next(it)
            except StopIteration:
                break
            cpu += time.thread_time() - t
            n += 1
    loader.close()
    return cpu / max(n, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/wait-cost")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    images, tokens = make(a.work)
    seen = []
    pipelines = {
        "image": (1, lambda hook: stokehold.Loader(images, 64, threads=a.threads, on_step=hook, transforms={
            "image": [RandomResizedCrop(224), RandomHorizontalFlip()]})),
        # an epoch of the token corpus is ~130 batches of a few tens of µs: 40 epochs a pass
        "token": (40, lambda hook: stokehold.SequenceLoader(tokens, seq_len=2048, batch_size=16, threads=a.threads, on_step=hook)),
    }
    # provenance: step 10^6 (batch 16, one rank) of a two-source mixture, looked up cold, then
    # a neighbouring step (from the kept marks), and any step of one dataset
    mix = stokehold.Mixture({"a": images, "b": images + "/"}, weights=[0.7, 0.3], epoch_samples=20_000_000)
    loader = stokehold.Loader(mix, 16, rank=0, world_size=1)
    for what, step in (("cold", 10**6), ("warm", 10**6 + 1)):
        t0 = time.perf_counter()
        loader.samples_at(step)
        print(f"samples_at({step}) of a two-source mixture ({what}): {time.perf_counter() - t0:.3f} s")
    one = stokehold.Loader(images, 16)
    t0 = time.perf_counter()
    one.samples_at(len(one) - 1)
    print(f"samples_at(last step) of one dataset: {time.perf_counter() - t0:.4f} s")
    for name, (epochs, mk) in pipelines.items():
        with_hook, without = [], []
        for _ in range(a.passes):
            without.append(per_batch(mk, None, epochs))
            with_hook.append(per_batch(mk, seen.append, epochs))
            seen.clear()
        base, hooked = statistics.median(without), statistics.median(with_hook)
        print(f"{name}: {base * 1e3:.3f} ms a batch without on_step, {hooked * 1e3:.3f} ms with "
              f"({(hooked - base) / base:+.2%} of a batch)")
        without = [consumer_cpu(mk, None, epochs) for _ in range(3)]
        with_hook = [consumer_cpu(mk, seen.append, epochs) for _ in range(3)]
        seen.clear()
        extra = statistics.median(with_hook) - statistics.median(without)
        print(f"{name}: on_step adds {extra * 1e6:.2f} µs of the consuming thread's CPU a batch "
              f"({extra / base:.2%} of a batch's wall time)")


if __name__ == "__main__":
    main()
