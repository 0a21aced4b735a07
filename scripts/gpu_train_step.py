#!/usr/bin/env python3
"""A real training step on the GPU fed by stokehold, against the same step's own ceiling.

    python scripts/gpu_train_step.py [--shards DIR] [--images 8000] [--model resnet50]
        [--batch 256] [--steps 50] [--warmup 10] [--threads 2,4,8] [--amp bf16]
        [--device cuda] [--json OUT]

The step: a torchvision model (ResNet-50 by default, channels-last), mixed precision
(`torch.autocast`, bf16 by default), SGD with momentum, cross-entropy; uint8 batches normalised on
the device. It runs three ways, each after `--warmup` untimed steps:

1. **ceiling**: on one synthetic uint8 batch already on the device (no input pipeline at all:
   what the model alone can do);
2. **fed**, per `--threads` T: `stokehold.Loader(shards, batch, threads=T, to="torch",
   pin_memory=True)` with RandomResizedCrop(224) + flip, each batch copied to the device with
   `non_blocking=True`;
3. **loader alone**, per T: the same loader iterated with no model (what it supplies, and the
   host CPU it costs per image).

Reported per T: images/s fed, **data stall** = 1 - fed / ceiling (the share of the model's
ceiling lost to input), the time the training loop sat in `next()` (a lower bound of the stall:
the GPU runs ahead of the loop), the loader's own images/s and CPU per image, and the **host
cores needed** to feed the ceiling: CPU per image x ceiling images/s.

Without `--shards` it makes `--images` generated ImageNet-sized JPEGs (`stokehold sample-data`)
and packs them (restart markers, the default) in a temporary folder, so it needs nothing but
the package, torch and torchvision. On the project's device machine (which has torch and
torchvision, and no network), from the repository root, after `make wheel`:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site dist/stokehold-*.whl &&
      PYTHONPATH=/tmp/site python3 scripts/gpu_train_step.py --json $OUT/gpu.json

`--device cpu --model tiny` runs the same code on a small CNN without a GPU (the test suite does,
to keep the script working); its figures say nothing about a GPU.
"""

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from bench_vs_torch_dataloader import cpu

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def make_shards(work: str, images: int) -> str:
    """Generated JPEGs packed into shards under ``work``; the shards' folder."""
    src, shards = os.path.join(work, "images"), os.path.join(work, "shards")
    cli = [sys.executable, "-m", "stokehold._cli"]
    for cmd in (["sample-data", src, "--images", str(images), "--classes", "100"], ["pack", src, shards]):
        r = subprocess.run(cli + cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"gpu_train_step: `stokehold {' '.join(cmd)}` failed: {r.stderr.strip()}")
    return shards


def build_model(name: str, device, num_classes: int):
    import torch
    from torch import nn

    if name == "tiny":
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, num_classes)
        )
    else:
        import torchvision

        model = getattr(torchvision.models, name)(num_classes=num_classes)
    return model.to(device).to(memory_format=torch.channels_last)


def make_step(model, device, amp):
    """One training step on a uint8 NCHW batch and its labels, both on ``device``."""
    import torch
    from torch import nn

    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-5)
    loss_fn = nn.CrossEntropyLoss()
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "none": None}[amp]
    scaler = torch.amp.GradScaler(device.type, enabled=dtype is torch.float16)

    def step(images, labels):
        x = images.float().sub_(mean).div_(std).contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type=device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(x), labels)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return step


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(batches, step, steps: int, warmup: int, device):
    """``warmup`` untimed steps, then ``steps`` timed ones (``step`` None: only draw batches)."""
    it = iter(batches)
    for _ in range(warmup):
        x, y = next(it)
        if step is not None:
            step(x, y)
    synchronize(device)
    t0, c0, blocked, images = time.perf_counter(), cpu(resource.RUSAGE_SELF), 0.0, 0
    for _ in range(steps):
        t = time.perf_counter()
        x, y = next(it)
        blocked += time.perf_counter() - t
        if step is not None:
            step(x, y)
        images += len(y)
    synchronize(device)
    wall = time.perf_counter() - t0
    return dict(images=images, seconds=wall, images_per_s=images / wall, cpu_s=cpu(resource.RUSAGE_SELF) - c0,
                blocked_s=blocked)


def synthetic(batch: int, device, num_classes: int):
    import torch

    gen = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, 224, 224), dtype=torch.uint8, generator=gen).to(device)
    y = torch.randint(0, num_classes, (batch,), generator=gen).to(device)
    while True:
        yield x, y


def fed(shards: str, batch: int, threads: int, device, to_device: bool):
    """Endless batches (epoch after epoch) from a stokehold loader, on ``device`` if asked."""
    import stokehold
    from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

    pin = device.type == "cuda"
    with stokehold.Loader(shards, batch, threads=threads, shuffle=True, seed=0, drop_last=True, to="torch",
                          pin_memory=pin, transforms={"image": [RandomResizedCrop(224), RandomHorizontalFlip()]}) as loader:
        for epoch in itertools.count():
            loader.set_epoch(epoch)
            for b in loader:
                x, y = b["image"], b["label"].long()
                if to_device:
                    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                yield x, y


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", help="a packed image dataset (default: generated and packed here)")
    ap.add_argument("--images", type=int, default=8000, help="images to generate without --shards")
    ap.add_argument("--model", default="resnet50", help="a torchvision.models name, or tiny")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", default="2,4,8", help="comma-separated loader thread counts")
    ap.add_argument("--amp", default="bf16", choices=["bf16", "fp16", "none"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()

    import torch

    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_train_step: no CUDA device (use --device cpu --model tiny to try the script without one)")
    torch.backends.cudnn.benchmark = True
    num_classes = 1000
    threads = [int(t) for t in a.threads.split(",")]
    with tempfile.TemporaryDirectory() as work:
        shards = a.shards or make_shards(work, a.images)
        model = build_model(a.model, device, num_classes)
        step = make_step(model, device, a.amp)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        print(f"{a.model}, batch {a.batch}, amp {a.amp}, {name}, {os.cpu_count()} host CPUs; "
              f"{a.warmup} warm-up + {a.steps} timed steps per row", flush=True)
        ceiling = timed(synthetic(a.batch, device, num_classes), step, a.steps, a.warmup, device)
        print(f"ceiling (synthetic batches on the device): {ceiling['images_per_s']:,.0f} images/s", flush=True)
        rows = []
        for t in threads:
            run = timed(fed(shards, a.batch, t, device, True), step, a.steps, a.warmup, device)
            alone = timed(fed(shards, a.batch, t, device, False), None, a.steps, a.warmup, device)
            cpu_per_image = alone["cpu_s"] / alone["images"]
            row = dict(
                threads=t,
                fed_images_per_s=run["images_per_s"],
                data_stall_pct=100 * max(0.0, 1 - run["images_per_s"] / ceiling["images_per_s"]),
                in_next_pct=100 * run["blocked_s"] / run["seconds"],
                loader_images_per_s=alone["images_per_s"],
                loader_cpu_ms_per_image=1e3 * cpu_per_image,
                cores_needed_at_ceiling=cpu_per_image * ceiling["images_per_s"],
                fed_images=run["images"],
                loader_images=alone["images"],
            )
            rows.append(row)
            print(f"threads {t:>2}: fed {row['fed_images_per_s']:,.0f} images/s, data stall "
                  f"{row['data_stall_pct']:.1f}% (in next() {row['in_next_pct']:.1f}%); the loader alone "
                  f"{row['loader_images_per_s']:,.0f} images/s at {row['loader_cpu_ms_per_image']:.2f} ms of "
                  f"CPU per image: {row['cores_needed_at_ceiling']:.1f} host cores feed the ceiling", flush=True)
    result = dict(model=a.model, batch=a.batch, amp=a.amp, device=name, host_cpus=os.cpu_count(),
                  ceiling_images_per_s=ceiling["images_per_s"], ceiling_images=ceiling["images"], rows=rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
