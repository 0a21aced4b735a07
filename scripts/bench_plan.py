#!/usr/bin/env python3
"""Planning packed conversations (issues #52, #53): the first open of a JSONL of short
conversations indexes its lines and counts (render + tokenize) only the window of conversations
the first rows need, the rest in the background; the second plans from the counts kept on disk. Prints, for each, the time from `SequenceLoader(...)` to its first batch, and for the
first, the time until every conversation is counted (`len(loader)` is exact from then).

    .venv/bin/python scripts/bench_plan.py --conversations 1000000 [--work /tmp/bench-plan]
    .venv/bin/python scripts/bench_plan.py --conversations 1000000 --gigabytes 10 [--cold]

`--gigabytes G` opens a JSONL of at least G GB (the 1 M conversations repeated) the first time
and stops at its first batch (the issue asks <= 5 s for 10 GB on a local NVMe-class disk).

Makes its own data (deterministic; kept in --work for later runs) with the tokenizer and template
of scripts/bench_chat.py. `--images K`: conversations with images instead (a packed dataset of
`messages` and a `list:image` field; 20% text-only, else 1 to K JPEGs of photo sizes, 640x480 to
2048x1536, small solid-colour files), planned with `Qwen2VL(max_pixels=1280 * 28 * 28)` from the
sizes kept in the shards; the image tokens are kept with the counts. Needs a release build (`make install`). The issue asks <= 2 s to plan a
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


def write_vl(path, n, k):
    import io

    from PIL import Image

    sizes = [(640, 480), (1024, 768), (800, 600), (1280, 720), (500, 375), (1920, 1080), (333, 500), (2048, 1536)]
    pool = []
    for i, size in enumerate(sizes):
        b = io.BytesIO()
        Image.new("RGB", size, (40 * i, 90, 200 - 20 * i)).save(b, format="JPEG", quality=30)
        pool.append(b.getvalue())
    rng = random.Random(5)
    with stokehold.ShardWriter(path, {"messages": "json", "images": "list:image"}) as w:
        for _ in range(n):
            images = [] if rng.random() < 0.2 else [rng.choice(pool) for _ in range(rng.randint(1, k))]
            parts = [{"type": "image"} for _ in images] + [{"type": "text", "text": words(rng, 2, 20)}]
            msgs = [{"role": "user", "content": parts}, {"role": "assistant", "content": words(rng, 2, 40)}]
            w.write({"messages": json.dumps(msgs), "images": images})


def grow(data, gigabytes):
    """`data` repeated into a file of at least `gigabytes` GB (made once)."""
    out = data.replace(".jsonl", f"-x{gigabytes:g}GB.jsonl")
    if not os.path.exists(out):
        unit = os.path.getsize(data)
        with open(out + ".part", "wb") as f:
            for _ in range(max(1, -(-int(gigabytes * 1e9) // unit))):
                with open(data, "rb") as src:
                    while chunk := src.read(1 << 24):
                        f.write(chunk)
        os.replace(out + ".part", out)
    return out


def first_batch(data, model, threads, images=False, **kw):
    t0 = time.perf_counter()
    if images:
        from stokehold.vision import Qwen2VL

        text = ChatTemplate(model, images="images", vision=Qwen2VL(max_pixels=1280 * 28 * 28))
        seq_len = 8192
    else:
        text, seq_len = ChatTemplate(model), 4096
    loader = stokehold.SequenceLoader(stokehold.Dataset(data), seq_len=seq_len, batch_size=8, packing="whole",
                                      text=text, threads=threads, rank=0, world_size=1, **kw)
    opened = time.perf_counter() - t0
    next(iter(loader))
    return opened, time.perf_counter() - t0, loader


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conversations", type=int, default=1_000_000)
    ap.add_argument("--work", default="/tmp/bench-plan")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--images", type=int, default=0, help="conversations with 1 to this many images (80%%)")
    ap.add_argument("--gigabytes", type=float, default=0,
                    help="a JSONL of at least this many GB: the --conversations file repeated (first open only)")
    ap.add_argument("--cold", action="store_true", help="drop the page cache before the first open (root)")
    ap.add_argument("--skip", action="store_true",
                    help='on_error="skip" (max_skip_fraction 0.01): the first open only')
    a = ap.parse_args()
    if a.gigabytes and a.images:
        ap.error("--gigabytes repeats the JSONL of plain conversations; it does not go with --images")
    os.makedirs(a.work, exist_ok=True)
    data = os.path.join(a.work, f"convs-{a.conversations}.jsonl" if not a.images else f"vl-{a.conversations}-{a.images}")
    model = os.path.join(a.work, "model-vl" if a.images else "model")
    if not os.path.exists(os.path.join(model, "tokenizer.json")):
        os.makedirs(model, exist_ok=True)
        if a.images:
            from bench_vlm import make_model  # the Qwen2-VL-style template and vision tokens

            make_model(model)
        else:
            make_tokenizer(model)
    if not os.path.exists(data):
        if a.images:
            write_vl(data, a.conversations, a.images)
        else:
            write(data, a.conversations)
    if a.gigabytes:
        data = grow(data, a.gigabytes)
    kept = os.path.join(a.work, "kept")
    os.environ["STOKEHOLD_INDEX_DIR"] = kept
    import shutil

    shutil.rmtree(kept, ignore_errors=True)
    if a.cold:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    skip = dict(on_error="skip", max_skip_fraction=0.01) if a.skip else {}
    opened, first, loader = first_batch(data, model, a.threads, a.images > 0, **skip)
    counted = loader.stats()["packing"].get("counted")
    size = os.path.getsize(data) if os.path.isfile(data) else 0
    print(f"first open{' of %.2f GB' % (size / 1e9) if size else ''}{' (page cache dropped)' if a.cold else ''} "
          f"(line index, then conversations counted as rows need them): {opened:.2f} s to open, "
          f"{first:.2f} s to the first batch ({counted} conversations counted by then)"
          f"{' on_error=skip' if a.skip else ''}")
    if a.gigabytes or a.skip:
        loader.close()
        return
    # the rest are counted in the background; the epoch's length is exact once they are
    t0 = time.perf_counter()
    while (loader.stats()["packing"].get("counted") or a.conversations) < a.conversations \
            and time.perf_counter() - t0 < 900:
        time.sleep(0.5)
    print(f"  every conversation counted {time.perf_counter() - t0 + first:.2f} s after opening; "
          f"{len(loader)} batches, fill {loader.stats()['packing']['fill']:.4f}")
    loader.close()
    opened, first, loader = first_batch(data, model, a.threads, a.images > 0)
    print(f"second open (kept index, kept counts):                {opened:.2f} s to plan, "
          f"{first:.2f} s to the first batch; {len(loader)} batches")
    t0 = time.perf_counter()
    loader.set_epoch(1)
    next(iter(loader))
    print(f"another epoch's plan and first batch:                 {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
