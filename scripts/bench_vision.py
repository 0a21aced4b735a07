"""stokehold.vision.Qwen2VL against transformers' Qwen2-VL image processors, per CPU-second
(issue #53's image part: >= 5x the PIL-based processor, >= 2x the torchvision-based one).

Each side turns the same JPEG bytes into `pixel_values` (decode included: Pillow's decoder for the
PIL processor, torchvision.io.decode_jpeg for the torchvision one), with the same parameters
(`max_pixels = 1280 * 28 * 28` by default). CPU seconds are the process's own and its finished
children's (user + system, all threads: resource.getrusage), so the ratio holds on a busy machine
better than wall time. Rounds alternate; the median of each side counts.

Two settings: `--inline` runs every side in this process, one image at a time, one thread (the
kernels alone); the default is the issue's setting: the peers in a torch DataLoader with
`--workers` worker processes (batches of `--batch` images, `pixel_values` concatenated as
transformers' processors return them), stokehold's Loader over the same images (a dataset
written once) with the Qwen2VL stage on `--workers` threads, each batch delivered that way.

    python scripts/bench_vision.py --images bench-data/inet/train --large bench-data/inet/large
"""

import argparse
import io
import os
import random
import resource
import statistics
import time


_WORKERS = []  # pids of live DataLoader workers, whose CPU counts too


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    total = r.ru_utime + r.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in _WORKERS:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


class _Images:
    """A map-style dataset of encoded images for the DataLoader side (decode in the worker)."""

    def __init__(self, data, kind, kw):
        self.data, self.kind, self.kw, self.proc = data, kind, kw, None

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        import torch
        import torchvision
        from PIL import Image

        if self.proc is None:
            torch.set_num_threads(1)
            if self.kind == "pil":
                from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

                self.proc = Qwen2VLImageProcessorPil(**self.kw)
            else:
                from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

                self.proc = Qwen2VLImageProcessor(**self.kw)
        d = self.data[i]
        if self.kind == "pil":
            out = self.proc(images=[Image.open(io.BytesIO(d)).convert("RGB")], return_tensors="pt")
        else:
            t = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(d), dtype=torch.uint8),
                                           mode=torchvision.io.ImageReadMode.RGB)
            out = self.proc(images=[t], return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]


def _collate(items):
    import torch

    return torch.cat([p for p, _ in items]), torch.cat([g for _, g in items])


def files(folder, n, seed):
    out = []
    for root, _, names in os.walk(folder):
        out.extend(os.path.join(root, f) for f in names if f.lower().endswith((".jpg", ".jpeg")))
    out.sort()
    random.Random(seed).shuffle(out)
    return [open(p, "rb").read() for p in out[:n]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", required=True, help="a folder of ImageNet-like JPEGs")
    ap.add_argument("--large", help="a folder of large photographs (>= 1 MP)")
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-pixels", type=int, default=1280 * 28 * 28)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--inline", action="store_true", help="every side in this process, one thread, one image at a time")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers / stokehold threads")
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()

    import torch
    import torchvision
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    from stokehold.vision import Qwen2VL

    torch.set_num_threads(1)
    kw = dict(min_pixels=56 * 56, max_pixels=a.max_pixels)
    pil_proc, tv_proc = Qwen2VLImageProcessorPil(**kw), Qwen2VLImageProcessor(**kw)
    ours = Qwen2VL(max_pixels=a.max_pixels)

    def run_ours(data):
        for d in data:
            ours([d], threads=1)

    def run_pil(data):
        for d in data:
            pil_proc(images=[Image.open(io.BytesIO(d)).convert("RGB")], return_tensors="np")

    def run_tv(data):
        for d in data:
            t = torchvision.io.decode_jpeg(torch.frombuffer(bytearray(d), dtype=torch.uint8),
                                           mode=torchvision.io.ImageReadMode.RGB)
            tv_proc(images=[t], return_tensors="pt")

    if not a.inline:
        from torch.utils.data import DataLoader

        loaders = {}

        def loader_of(kind):
            # persistent workers, started and warmed once per image set (a training job's
            # steady state): their CPU is read from /proc while they live
            def run(data):
                key = (kind, id(data))
                if key not in loaders:
                    dl = DataLoader(_Images(data, kind, kw), batch_size=a.batch, num_workers=a.workers,
                                    collate_fn=_collate, persistent_workers=True)
                    for _ in dl:
                        pass
                    loaders[key] = dl
                    _WORKERS.extend(w.pid for w in dl._iterator._workers)
                for _ in loaders[key]:
                    pass
            return run

        import tempfile

        import stokehold

        tmp = tempfile.TemporaryDirectory(prefix="bench-vision-")
        ours_loaders = {}

        def run_ours(data):  # noqa: F811 (the DataLoader setting's own)
            # the images as a dataset, through a Loader with the Qwen2VL stage on its threads
            # (made once per image set, as the peers' workers are)
            key = id(data)
            if key not in ours_loaders:
                path = os.path.join(tmp.name, f"set-{len(ours_loaders)}")
                with stokehold.ShardWriter(path, {"image": "image:jpeg"}) as w:
                    for d in data:
                        w.write({"image": d})
                ours_loaders[key] = stokehold.Loader(path, a.batch, transforms={"image": ours}, shuffle=False,
                                                     threads=a.workers, drop_last=False)
            for batch in ours_loaders[key]:
                # delivered as the processor returns them: pixel_values and the grids
                batch["image"], batch["image_grid_thw"]

        run_pil, run_tv = loader_of("pil"), loader_of("tv")

    sets = [("ImageNet-like", files(a.images, a.n, a.seed))]
    if a.large:
        sets.append(("large photographs", files(a.large, max(a.n // 10, 10), a.seed)))
    setting = ("one thread each, in this process" if a.inline else
               f"peers in a torch DataLoader of {a.workers} workers, stokehold's Loader with the Qwen2VL stage on {a.workers} threads, "
               f"batches of {a.batch}")
    print(f"Qwen2-VL processor, max_pixels {a.max_pixels}, {os.cpu_count()} CPUs, {a.rounds} alternating "
          f"rounds, {setting} (torch.set_num_threads(1)); CPU seconds per image (median, workers included)")
    for name, data in sets:
        mp = statistics.mean(Image.open(io.BytesIO(d)).size[0] * Image.open(io.BytesIO(d)).size[1] for d in data) / 1e6
        runs = {"stokehold": [], "PIL processor": [], "torchvision processor": []}
        for fn in (run_ours, run_pil, run_tv):  # warm-up
            fn(data[:3])
        for _ in range(a.rounds):
            for label, fn in (("stokehold", run_ours), ("PIL processor", run_pil), ("torchvision processor", run_tv)):
                c0, t0 = cpu(), time.perf_counter()
                fn(data)
                runs[label].append(((cpu() - c0) / len(data), (time.perf_counter() - t0) / len(data)))
        ours_cpu = statistics.median(c for c, _ in runs["stokehold"])
        print(f"{name}: {len(data)} images, mean {mp:.2f} MP")
        for label, xs in runs.items():
            c = statistics.median(x for x, _ in xs)
            w = statistics.median(y for _, y in xs)
            extra = "" if label == "stokehold" else f"  stokehold is {c / ours_cpu:.2f}x per CPU-second"
            print(f"  {label:22s} {c * 1e3:8.2f} ms CPU/image ({w * 1e3:7.2f} ms wall){extra}")


if __name__ == "__main__":
    main()
