"""The fill of SequenceLoader(packing="whole") (tokens that are not padding, over rows x seq_len)
on conversations whose lengths are drawn log-normal, like real SFT sets (median a few hundred
tokens, a long tail): not a timing, a property of the plan.

    .venv/bin/python scripts/sft_fill.py --conversations 5000 --seq-len 4096 --median 350 --sigma 1.0

The tokenizer is scripts/bench_chat.py's (trained here; nothing is downloaded); each conversation
is one user and one assistant turn whose assistant text is drawn to reach its length.
"""

import argparse
import json
import math
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import require  # noqa: E402
from bench_chat import WORDS, make_tokenizer  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--conversations", type=int, default=5000)
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--median", type=float, default=350.0, help="median words of a conversation")
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--window", type=int, default=1024)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    require("stokehold", "tokenizers")
    import stokehold
    from stokehold.text import ChatTemplate

    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = make_tokenizer(tmp)
        path = os.path.join(tmp, "chats")
        with stokehold.ShardWriter(path, {"messages": "string"}) as w:
            for _ in range(args.conversations):
                n = max(1, int(round(math.exp(math.log(args.median) + args.sigma * rng.gauss(0, 1)))))
                user = " ".join(rng.choice(WORDS) for _ in range(max(1, n // 10)))
                answer = " ".join(rng.choice(WORDS) for _ in range(n))
                conv = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
                w.write({"messages": json.dumps(conv)})
        loader = stokehold.SequenceLoader(path, seq_len=args.seq_len, batch_size=1, text=ChatTemplate(root),
                                          packing="whole", window=args.window, threads=args.threads,
                                          rank=0, world_size=1)
        packing = loader.stats()["packing"]
        print(json.dumps({k: v for k, v in packing.items() if k != "skipped_examples"}))
        print(f"fill {packing['fill']:.4f} at seq_len {args.seq_len} (window {args.window}); "
              f"the issue asks >= 0.97")


if __name__ == "__main__":
    main()
