"""Supervised fine-tuning data, end to end (issue #52's performance figure): template + tokenize +
mask + pack whole conversations into rows of `--seq-len` tokens.

- stokehold: `SequenceLoader(shards, seq_len, batch_size, text=ChatTemplate(...),
  packing="whole")` on `--threads` native threads, one epoch, every row delivered;
- the peers' way: `datasets.Dataset.map(apply_chat_template(..., return_assistant_tokens_mask=True),
  num_proc=--threads)` then best-fit-decreasing packing in Python as TRL's `pack_dataset(...,
  strategy="bfd")` does it (conversations longer than a row truncated; each packed into the row
  with the least room that holds it, rows in order of creation), rows built as `input_ids`,
  `labels` (-100 outside the mask) and `position_ids`.

CPU seconds of the process and its finished children (datasets' map workers) per conversation,
and the fill (tokens that are not padding) of each. Conversations are generated (seeded) as in
bench_chat.py; the tokenizer is trained here. Nothing is downloaded. Run it on a quiet machine.

    .venv/bin/python scripts/bench_sft.py --conversations 20000
    .venv/bin/python scripts/bench_sft.py --conversations 4000 --long
"""

import argparse
import bisect
import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import require  # noqa: E402
from bench_chat import conversations, make_tokenizer  # noqa: E402


def cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def bfd(lengths, seq_len):
    """Best-fit-decreasing: (row of each item, in packing order) — TRL's strategy: items by length,
    longest first, each into the open row with the least room that still holds it, else a new
    row."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rooms, ids = [], []  # sorted free room of open rows, and their row numbers
    rows = []
    for i in order:
        n = min(lengths[i], seq_len)
        k = bisect.bisect_left(rooms, n)
        if k == len(rooms):
            rows.append([i])
            row, room = len(rows) - 1, seq_len - n
        else:
            row, room = ids.pop(k), rooms.pop(k) - n
            rows[row].append(i)
        k = bisect.bisect_left(rooms, room)
        rooms.insert(k, room)
        ids.insert(k, row)
    return rows


def peers(convs, root, seq_len, threads):
    import datasets
    import numpy as np
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(root)

    def encode(row):
        out = tok.apply_chat_template(row["messages"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        return {"input_ids": out["input_ids"], "assistant_masks": out["assistant_masks"]}

    ds = datasets.Dataset.from_list([{"messages": c} for c in convs])
    enc = ds.map(encode, num_proc=threads, remove_columns=["messages"])
    ids, masks = enc["input_ids"], enc["assistant_masks"]
    rows = bfd([len(x) for x in ids], seq_len)
    filled = 0
    for row in rows:
        input_ids = np.zeros(seq_len, np.int64)
        labels = np.full(seq_len, -100, np.int64)
        position_ids = np.zeros(seq_len, np.int64)
        at = 0
        for i in row:
            x = np.asarray(ids[i][:seq_len - at])
            m = np.asarray(masks[i][:len(x)])
            input_ids[at:at + len(x)] = x
            labels[at:at + len(x)] = np.where(m == 1, x, -100)
            position_ids[at:at + len(x)] = np.arange(len(x))
            at += len(x)
        filled += at
    return filled / (len(rows) * seq_len)


def ours(convs, root, seq_len, threads, tmp):
    import stokehold
    from stokehold.text import ChatTemplate

    path = os.path.join(tmp, "convs")
    with stokehold.ShardWriter(path, {"messages": "string"}) as w:
        for c in convs:
            w.write({"messages": json.dumps(c, ensure_ascii=False)})

    def run():
        loader = stokehold.SequenceLoader(path, seq_len=seq_len, batch_size=8, text=ChatTemplate(root),
                                          packing="whole", threads=threads, drop_last=False)
        for _ in loader:
            pass
        return loader.stats()["packing"]["fill"]

    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=20000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--long", action="store_true", help="8-24 turns a conversation")
    args = p.parse_args()
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    require("stokehold", "tokenizers", "transformers", "datasets")
    with tempfile.TemporaryDirectory() as tmp:
        root = make_tokenizer(tmp)
        convs = conversations(args.conversations, args.long)
        n = len(convs)
        run_ours = ours(convs, root, args.seq_len, args.threads, tmp)
        print(f"{n} conversations ({'long' if args.long else 'short'}), rows of {args.seq_len} tokens, "
              f"{args.threads} threads / processes")
        results = {}
        for name, fn in (("stokehold SequenceLoader(packing='whole')", run_ours),
                         ("datasets.map(apply_chat_template) + BFD", lambda: peers(convs, root, args.seq_len, args.threads))):
            c0, w0 = cpu(), time.perf_counter()
            fill = fn()
            c, w = cpu() - c0, time.perf_counter() - w0
            results[name] = c / n
            print(f"{name:<44} {c / n * 1e6:9.1f} CPU µs/conv {w / n * 1e6:9.1f} wall µs/conv  fill {fill:.4f}")
        a, b = results.values()
        print(f"stokehold: {b / a:.2f}x less CPU per conversation (the issue asks >= 5x)")


if __name__ == "__main__":
    main()
