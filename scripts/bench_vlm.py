"""Vision-language SFT, whole samples (issue #53): template + tokens + images + packing.

stokehold's `SequenceLoader(text=ChatTemplate(images=, vision=Qwen2VL(...)), packing="whole")` on
`--workers` threads against the usual pipeline: `transformers`' `Qwen2VLProcessor.apply_chat_template`
(tokens, assistant mask, pixel_values, image_grid_thw per conversation, images decoded with
Pillow) in a torch DataLoader of `--workers` persistent workers, then the same best-fit-decreasing
packing (windows of 1,024 conversations, rows of `--seq-len`) and per batch the rows'
input_ids/labels/position_ids and the concatenated pixel_values. CPU seconds per conversation:
this process (all its threads) and the DataLoader's workers (read from /proc while they live).
The issue asks >= 4x.

    .venv/bin/python scripts/bench_vlm.py --images bench-data/inet/train --large bench-data/inet/large

Each round makes a new loader (its count pass is part of the cost) and reads one epoch of
`--conversations` (480 by default: a loader prepares a few batches of the next epoch while the
last are read, work a round of one short epoch pays for and never reads; at 120 conversations
that is ~10% of stokehold's time, in a real epoch nothing).

Conversations (deterministic from `--seed`): 1-3 turns of text, 20% text-only, else 1-8 images
in the user turns; images drawn from `--images` (and one in ten from `--large`, photographs of
>= 1 MP, when given). `max_pixels = 1280 * 28 * 28`. The tokenizer and the Qwen2-VL-style chat
template are made here (nothing is downloaded). Both sides give the same tokens for the same
conversations (checked on the token totals). Also prints the fill of the rows. Build the
extension in release mode first (`make install`) and run on a quiet machine.
"""

import argparse
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import require  # noqa: E402

require("stokehold", "tokenizers", "transformers", "torch", "PIL")

from bench_chat import WORDS  # noqa: E402
from bench_sft import bfd_rows  # noqa: E402  (TRL's best-fit-decreasing)
from bench_vision import _WORKERS, cpu, files  # noqa: E402  (CPU of this process and the workers)

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|image_pad|>", "<|video_pad|>"]
PARTS = ("{%- if message.content is string %}{{ message.content }}{%- else %}{%- for part in message.content %}"
         "{%- if part.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
         "{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}{%- endfor %}{%- endif %}<|im_end|>")
TEMPLATE = ("{%- for message in messages %}<|im_start|>{{ message.role }}\n"
            "{%- if message.role == 'assistant' %}{% generation %}" + PARTS + "{% endgeneration %}"
            "{%- else %}" + PARTS + "{%- endif %}\n{%- endfor %}")


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def make_model(root):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(1)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((words(rng, 5, 60) for _ in range(20000)), trainer)
    tok.save(os.path.join(root, "tokenizer.json"))
    with open(os.path.join(root, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 20,
                   "bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "chat_template": TEMPLATE}, f)
    return root


def samples(n, images, large, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        conv, ims = [], []
        text_only = rng.random() < 0.2
        k = 0 if text_only else rng.randint(1, 8)
        turns = rng.randint(1, 3)
        for t in range(turns):
            parts = [{"type": "text", "text": words(rng, 5, 60)}]
            here = k if t == turns - 1 else rng.randint(0, k)
            k -= here
            for _ in range(here):
                parts.insert(rng.randint(0, len(parts)), {"type": "image"})
                pool = large if large and rng.random() < 0.1 else images
                ims.append(rng.choice(pool))
            conv.append({"role": "user", "content": parts})
            conv.append({"role": "assistant", "content": words(rng, 10, 120)})
        out.append((conv, ims))
    return out


class _Convs:
    """The DataLoader's dataset: one conversation through Qwen2VLProcessor.apply_chat_template."""

    def __init__(self, data, model, kw):
        self.data, self.model, self.kw, self.proc = data, model, kw, None

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        from PIL import Image

        if self.proc is None:
            import torch
            from transformers import PreTrainedTokenizerFast
            from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
            from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
            from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

            torch.set_num_threads(1)
            tok = PreTrainedTokenizerFast.from_pretrained(self.model)
            self.proc = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**self.kw), tokenizer=tok,
                                         video_processor=Qwen2VLVideoProcessor(), chat_template=TEMPLATE)
        conv, ims = self.data[i]
        kw = {"images": [Image.open(io.BytesIO(b)).convert("RGB") for b in ims]} if ims else {}
        out = self.proc.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                            return_tensors="np", **kw)
        ids = out["input_ids"][0]
        pv = out.get("pixel_values")
        grid = out.get("image_grid_thw")
        return ids, out["assistant_masks"][0], pv, grid


def peer_epoch(loader, seq_len, batch):
    import numpy as np

    encs = [x for x in loader]  # the conversations, in the DataLoader's order
    tokens = 0
    for w in range(0, len(encs), 1024):
        window = encs[w:w + 1024]
        rows = bfd_rows([len(e[0]) for e in window], seq_len)
        for b in range(0, len(rows), batch):
            inp = np.zeros((batch, seq_len), np.int32)
            lab = np.full((batch, seq_len), -100, np.int64)
            pos = np.zeros((batch, seq_len), np.int64)
            pvs, grids = [], []
            for r, row in enumerate(rows[b:b + batch]):  # the last batch may be short
                at = 0
                for i in row:
                    ids, mask, pv, grid = window[i]
                    x = ids[:seq_len - at]
                    n = len(x)
                    inp[r, at:at + n] = x
                    lab[r, at:at + n] = np.where(mask[:n] == 1, x, -100)
                    pos[r, at:at + n] = np.arange(n)
                    at += n
                    if pv is not None:
                        pvs.append(pv)
                        grids.append(grid)
                tokens += at
            if pvs:
                np.concatenate(pvs)
                np.concatenate(grids)
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", required=True, help="a folder of JPEGs (ImageNet-like)")
    ap.add_argument("--large", help="a folder of photographs of >= 1 MP (one image in ten)")
    ap.add_argument("--conversations", type=int, default=480)
    ap.add_argument("--seq-len", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-pixels", type=int, default=1280 * 28 * 28)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", choices=("pack", "writer", "writer-rewrite"), default="pack",
                    help="how stokehold's dataset is made: `stokehold pack` of a JSONL naming the image files "
                         "(its defaults: JPEGs rewritten losslessly as baseline with restart markers), "
                         "ShardWriter with the bytes as given, or ShardWriter(restart_markers=True)")
    a = ap.parse_args()

    import torch
    from torch.utils.data import DataLoader

    import stokehold
    from stokehold.text import ChatTemplate
    from stokehold.vision import Qwen2VL

    torch.set_num_threads(1)
    tmp = tempfile.TemporaryDirectory(prefix="bench-vlm-")
    model = make_model(tmp.name)
    pool = files(a.images, 400, a.seed)
    data = samples(a.conversations, pool, files(a.large, 40, a.seed) if a.large else [], a.seed)
    kw = dict(min_pixels=56 * 56, max_pixels=a.max_pixels)
    path = os.path.join(tmp.name, "vlm")
    pack_s = None
    if a.store == "pack":
        # the documented way: a LLaVA-style JSONL naming the image files, packed with stokehold's
        # defaults (every JPEG rewritten losslessly as baseline with restart markers: the same
        # pixels; a progressive photograph's entropy decoding ~3x cheaper)
        src = os.path.join(tmp.name, "src")
        os.makedirs(os.path.join(src, "imgs"))
        with open(os.path.join(src, "convs.jsonl"), "w") as f:
            n = 0
            for conv, ims in data:
                names = []
                for b in ims:
                    names.append(f"imgs/{n}.jpg")
                    with open(os.path.join(src, names[-1]), "wb") as img:
                        img.write(b)
                    n += 1
                f.write(json.dumps({"messages": conv, "images": names}) + "\n")
        t0 = time.perf_counter()
        cli = os.path.join(os.path.dirname(sys.executable), "stokehold")
        subprocess.run([cli, "pack", os.path.join(src, "convs.jsonl"), path, "--threads", str(a.workers)],
                       check=True, stdout=subprocess.DEVNULL)
        pack_s = time.perf_counter() - t0
    else:
        # --store writer-rewrite: ShardWriter's own lossless rewrite, what pack does by default
        rewrite = a.store == "writer-rewrite"
        with stokehold.ShardWriter(path, {"messages": "json", "images": "list:image"}, restart_markers=rewrite) as w:
            for conv, ims in data:
                w.write({"messages": json.dumps(conv), "images": ims})

    n_images = sum(len(ims) for _, ims in data)
    from PIL import Image

    mp = statistics.mean(Image.open(io.BytesIO(b)).size[0] * Image.open(io.BytesIO(b)).size[1]
                         for _, ims in data for b in ims) / 1e6

    def ours():
        # a new loader each round: its count pass (template + tokens + image sizes) is part of the cost;
        # closed at the epoch's end, as a job that stops there (a loader left open goes on preparing
        # the next epoch, which this round never reads: the peer's persistent workers wait instead)
        with stokehold.SequenceLoader(path, seq_len=a.seq_len, batch_size=a.batch, packing="whole",
                                      text=ChatTemplate(model, images="images", vision=Qwen2VL(**kw)),
                                      threads=a.workers, rank=0, world_size=1, drop_last=False,
                                      include_ids=True) as ld:
            tokens = 0
            for b in ld:
                tokens += int((b["segment_ids"][~b["is_padding"]] >= 0).sum())
            return tokens, ld.stats()["packing"]["fill"]

    dl = DataLoader(_Convs(data, model, kw), batch_size=None, num_workers=a.workers, persistent_workers=True)
    peer_epoch(dl, a.seq_len, a.batch)  # start and warm the workers (a training job's steady state)
    _WORKERS.extend(w.pid for w in dl._iterator._workers)
    ours()  # warm
    runs = {"stokehold": [], "Qwen2VLProcessor + BFD": []}
    fill, toks = None, {}
    for _ in range(a.rounds):
        for label, fn in (("stokehold", ours), ("Qwen2VLProcessor + BFD", lambda: (peer_epoch(dl, a.seq_len, a.batch), None))):
            c0, t0 = cpu(), time.perf_counter()
            tokens, f = fn()
            runs[label].append(((cpu() - c0) / len(data), (time.perf_counter() - t0) / len(data)))
            toks[label] = tokens
            fill = f if f is not None else fill
    print(f"VL SFT whole samples: {len(data)} conversations, {n_images} images (mean {mp:.2f} MP), seq_len {a.seq_len}, "
          f"max_pixels {a.max_pixels}, {a.workers} workers/threads, batches of {a.batch}, {os.cpu_count()} CPUs, "
          f"{a.rounds} alternating rounds; CPU seconds per conversation (median, workers included)")
    ours_cpu = statistics.median(c for c, _ in runs["stokehold"])
    for label, xs in runs.items():
        c = statistics.median(x for x, _ in xs)
        w = statistics.median(y for _, y in xs)
        extra = "" if label == "stokehold" else f"  stokehold is {c / ours_cpu:.2f}x per CPU-second"
        print(f"  {label:26s} {c * 1e3:8.1f} ms CPU/conv ({w * 1e3:7.1f} ms wall)  tokens {toks[label]}{extra}")
    print(f"  stokehold's fill: {fill:.4f}; its dataset made by "
          + (f"stokehold pack ({pack_s:.2f} s on {a.workers} threads, once)" if pack_s is not None
             else "ShardWriter(restart_markers=True)" if a.store == "writer-rewrite"
             else "ShardWriter (the JPEGs as given)"))


if __name__ == "__main__":
    main()
