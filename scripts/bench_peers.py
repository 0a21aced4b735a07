#!/usr/bin/env python3
"""stokehold beside the other loaders people use, on the same images, in one run (issue #18).

    make bench-peers     (installs the peers into .venv-peers, makes bench-data/, runs this)
    python scripts/bench_peers.py --images DIR [--pipeline train|val|both] [--rounds 3]
        [--threads 2] [--batch 256] [--peers stokehold,stokehold-plain,tfdata,dali,torchvision,pil]

DIR is an image folder with one sub-folder per class (``make bench-data`` makes an ImageNet-like
one). Workload: one epoch of decode + RandomResizedCrop(224) + horizontal flip ("train") or
Resize(256) + CenterCrop(224) ("val") into uint8 batches of ``--batch``, shuffled, with
``--threads`` worker threads or processes each. Every trial is a fresh process (interpreter start
and imports included in its time to first batch); the loaders are interleaved round by round
(A B C ..., A B C ...), so slow drift on a shared machine hits them alike, and each figure is the
median of its rounds. Peers that are not installed are left out with a line saying so.

- ``stokehold``: ``stokehold.Loader`` over ``stokehold pack DIR`` (native threads; the JPEGs
  rewritten losslessly with restart markers, pack's default);
- ``stokehold-plain``: the same over ``stokehold pack --no-restart-markers DIR`` (bytes as given);
- ``stokehold-tfrecord``: the same over the TFRecord file tf.data reads, opened in place
  (``stokehold.Dataset(file)``, no pack: its record index built once by ``stokehold index``, timed
  against reading the file once); needs TensorFlow, whose writer makes the file;
- ``stokehold-wds``: the same over WebDataset tars of the same files (written here by
  ``tarfile``, 8 tars), opened in place;
- ``webdataset``: the ``webdataset`` package over those tars, its shards split over
  ``--threads`` DataLoader workers, a 1,000-sample shuffle buffer, ``torchvision.io.decode_jpeg``
  and ``transforms.v2`` as in ``torchvision``, batched in the workers (``pip install webdataset``);
- ``tfdata``: ``tf.data`` over TFRecords of the same files written here (``tf.io.TFRecordWriter``;
  the conversion is timed beside ``stokehold pack``), ``decode_and_crop_jpeg`` with
  ``sample_distorted_bounding_box`` for the random crop (tf.data's fastest form, decoding only the
  window), bilinear resize without antialiasing (``tf.image.resize``'s default, as in TF's own
  ImageNet input pipelines; stokehold and torchvision antialias, which costs them more), flip,
  AUTOTUNE, a private thread pool of ``--threads`` (``pip install tensorflow-cpu``);
- ``dali``: NVIDIA DALI's CPU pipeline (``device_id=None``): file reader,
  ``decoders.image_random_crop`` (ROI decode), resize, flip, ``--threads`` threads (``pip install
  nvidia-dali-cuda120``);
- ``torchvision``: a ``DataLoader`` with ``--threads`` workers over the files, ``torchvision.io.
  decode_jpeg`` and ``torchvision.transforms.v2`` on tensors;
- ``pil``: a ``DataLoader`` with ``--threads`` workers over ``ImageFolder`` (PIL decode),
  ``RandomResizedCrop`` + ``RandomHorizontalFlip`` + ``PILToTensor``: the classic recipe.

Layouts are each loader's own (CHW for stokehold and torch, HWC for tf.data and DALI). Figures:
images/s over the epoch from iterator creation; images per CPU-second (CPU of the trial's whole
process tree over its whole life: what the loader costs the machine); peak PSS of the process tree
(from ``/proc/PID/smaps_rollup``, sampled every 50 ms or less often: the sampler keeps within 2%
of one core, since one sample of a process that has imported torch or TensorFlow costs tens of
ms; each trial prints the sampler's CPU and any "foreign" CPU, the machine's other busy time);
time to the first batch from process start.
Under the table, the in-place pairs: each stokehold loader over files in place against
stokehold over their pack and against the peer that reads the same files.
The table ends with each loader's ratio to the best peer (the best non-stokehold loader by
median); a line under it gives each stokehold loader's median against the fastest single round of
any peer, and its own spread, since a peer whose rounds differ a lot makes the ratio of medians
fragile.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from bench_vs_torch_dataloader import busy_seconds, cpu, sample_peak_pss

T0_ENV = "STOKEHOLD_BENCH_T0"
PEERS = ["stokehold", "stokehold-plain", "stokehold-tfrecord", "tfdata", "stokehold-wds", "webdataset", "dali", "torchvision", "pil"]
MODULE = {"tfdata": "tensorflow", "stokehold-tfrecord": "tensorflow", "webdataset": "webdataset", "dali": "nvidia.dali",
          "torchvision": "torchvision", "pil": "torchvision"}
TARS = 8


# --- children: one epoch of one loader -------------------------------------------------------


def files_and_labels(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for i, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            out.append((os.path.join(root, c, f), i))
    return out


def loader_stokehold(a, shards, image="image", label="label"):
    """``shards``: a packed dataset's directory, or files to read in place (``image`` and
    ``label`` then name their fields)."""
    import stokehold
    from stokehold.image import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize

    if image != "image" or not os.path.isdir(shards):
        shards = stokehold.Dataset(shards, fields=[image, label], index_dir=a.index_dir)
    stages = [RandomResizedCrop(224), RandomHorizontalFlip()] if a.pipeline == "train" else [Resize(256), CenterCrop(224)]
    loader = stokehold.Loader(shards, a.batch, threads=a.threads, shuffle=True, seed=0, drop_last=False,
                              transforms={image: stages})
    return ((b[image], b[label]) for b in loader)


def loader_webdataset(a, _):
    import torch
    import webdataset as wds
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.transforms import v2

    if a.pipeline == "train":
        tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    else:
        tf = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224)])

    def sample(s):
        data = torch.frombuffer(bytearray(s["jpg"]), dtype=torch.uint8)
        return tf(decode_jpeg(data, mode=ImageReadMode.RGB)), int(s["cls"])

    urls = sorted(os.path.join(a.tars, f) for f in os.listdir(a.tars) if f.endswith(".tar"))
    ds = (wds.WebDataset(urls, shardshuffle=len(urls), seed=0, workersplitter=wds.split_by_worker, empty_check=False)
          .shuffle(1000).map(sample).batched(a.batch, partial=True))
    return iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=a.threads))


def loader_tfdata(a, _):
    import tensorflow as tf

    def parse(rec):
        ex = tf.io.parse_single_example(rec, {"image": tf.io.FixedLenFeature([], tf.string),
                                              "label": tf.io.FixedLenFeature([], tf.int64)})
        data = ex["image"]
        if a.pipeline == "train":
            shape = tf.image.extract_jpeg_shape(data)
            begin, size, _ = tf.image.sample_distorted_bounding_box(
                shape, tf.zeros([0, 0, 4], tf.float32), area_range=(0.08, 1.0),
                aspect_ratio_range=(3 / 4, 4 / 3), max_attempts=10, use_image_if_no_bounding_boxes=True)
            window = tf.stack([begin[0], begin[1], size[0], size[1]])
            img = tf.image.decode_and_crop_jpeg(data, window, channels=3)
            img = tf.image.resize(img, [224, 224])
            img = tf.image.random_flip_left_right(img)
        else:
            img = tf.io.decode_jpeg(data, channels=3)
            shape = tf.shape(img)
            scale = 256.0 / tf.cast(tf.minimum(shape[0], shape[1]), tf.float32)
            new = tf.cast(tf.round(tf.cast(shape[:2], tf.float32) * scale), tf.int32)
            img = tf.image.resize(img, new)
            img = tf.image.resize_with_crop_or_pad(img, 224, 224)
        return tf.cast(tf.clip_by_value(img, 0, 255), tf.uint8), ex["label"]

    opts = tf.data.Options()
    opts.threading.private_threadpool_size = a.threads
    ds = (tf.data.TFRecordDataset(a.tfrecords).with_options(opts).shuffle(2048, seed=0)
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE).batch(a.batch).prefetch(tf.data.AUTOTUNE))
    return ((x.numpy(), y.numpy()) for x, y in ds)


def loader_dali(a, _):
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.base_iterator import LastBatchPolicy  # noqa: F401  (DALI present)

    @pipeline_def(batch_size=a.batch, num_threads=a.threads, device_id=None, seed=0)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=a.images, random_shuffle=True, name="r")
        if a.pipeline == "train":
            img = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                                random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
            img = fn.resize(img, resize_x=224, resize_y=224)
            img = fn.flip(img, horizontal=fn.random.coin_flip())
        else:
            img = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
            img = fn.resize(img, resize_shorter=256)
            img = fn.crop(img, crop=(224, 224))
        return img, labels

    p = pipe()
    p.build()
    n = p.epoch_size("r")

    def batches():
        seen = 0
        while seen < n:
            img, lab = p.run()
            k = min(len(img), n - seen)
            seen += k
            yield img.as_array()[:k], lab.as_array()[:k]
    return batches()


class _Files:
    def __init__(self, items, tf):
        self.items, self.tf = items, tf

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        path, label = self.items[i]
        with open(path, "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        return self.tf(decode_jpeg(data, mode=ImageReadMode.RGB)), label


def loader_torch(a, kind):
    import torch
    from torchvision import datasets
    from torchvision.transforms import v2

    if a.pipeline == "train":
        geo = [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()]
    else:
        geo = [v2.Resize(256, antialias=True), v2.CenterCrop(224)]
    if kind == "pil":
        ds = datasets.ImageFolder(a.images, transform=v2.Compose([*geo, v2.PILToTensor()]))
    else:
        ds = _Files(files_and_labels(a.images), v2.Compose(geo))
    g = torch.Generator().manual_seed(0)
    return iter(torch.utils.data.DataLoader(ds, batch_size=a.batch, num_workers=a.threads, shuffle=True, generator=g))


def child(a):
    t0 = float(os.environ[T0_ENV])
    import numpy  # noqa: F401  (every loader's process has it)

    t_create = time.time()
    if a.child == "stokehold-tfrecord":
        it = loader_stokehold(a, a.tfrecords)
    elif a.child == "stokehold-wds":
        it = loader_stokehold(a, a.tars, "jpg", "cls")
    elif a.child.startswith("stokehold"):
        it = loader_stokehold(a, a.shards_plain if a.child == "stokehold-plain" else a.shards)
    elif a.child == "webdataset":
        it = loader_webdataset(a, None)
    elif a.child == "tfdata":
        it = loader_tfdata(a, None)
    elif a.child == "dali":
        it = loader_dali(a, None)
    else:
        it = loader_torch(a, a.child)
    t_iter = time.time()
    images, t_first, shape, first_n = 0, None, None, 0
    for img, label in it:
        if t_first is None:
            t_first, shape, first_n = time.time(), tuple(img.shape), len(label)
        images += len(label)
    t_end = time.time()
    # the rate after the first batch: the loader's steady state, without its warm-up (imports
    # are before t_iter; graph building, autotuning and the first decodes are in the first batch)
    steady = (images - first_n) / max(t_end - t_first, 1e-9)
    print(json.dumps(dict(images=images, rate=images / (t_end - t_iter), first=t_first - t0,
                          create=t_iter - t_create, shape=shape, steady=steady)), flush=True)


# --- parent ----------------------------------------------------------------------------------


def trial(name, a, interval=0.05):
    """One fresh process of loader ``name``; its peak PSS sampled by ``sample_peak_pss`` (at most
    every ``interval`` s, within 2% of one core)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name]
    for k in ("images", "shards", "shards_plain", "tfrecords", "tars", "index_dir", "pipeline"):
        cmd += [f"--{k.replace('_', '-')}", str(getattr(a, k))]
    cmd += ["--batch", str(a.batch), "--threads", str(a.threads)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **{T0_ENV: repr(time.time())})
    c0, s0, b0 = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF), busy_seconds()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = sample_peak_pss(p, interval)[0]
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit(f"{name}: the trial failed (exit {p.returncode}):\n{err[-3000:]}")
    r = json.loads(out.strip().splitlines()[-1])
    child, sampler = cpu(resource.RUSAGE_CHILDREN) - c0, cpu(resource.RUSAGE_SELF) - s0
    r.update(cpu=child, pss_mib=peak / 1024, sampler=sampler,
             foreign=max(0.0, busy_seconds() - b0 - child - sampler))
    return r


def prepare(a, work, peers):
    """Pack the images for stokehold (restart-marked, the default, and plain) and write TFRecords
    for tf.data, timing each conversion: the files are read once first (a warm page cache for
    all), the conversions alternate for ``CONVERSION_ROUNDS`` rounds and the best time of each
    counts. tf.data's is timed inside its process after ``import tensorflow`` (which takes
    seconds) and also with it."""
    for path, _ in files_and_labels(a.images):
        with open(path, "rb") as f:
            f.read()
    # the installed package's command, or the one given (--cli target/release/stokehold)
    exe = [a.cli] if a.cli else [sys.executable, "-m", "stokehold._cli"]
    packs = (("stokehold pack", [], "shards"), ("stokehold pack --no-restart-markers", ["--no-restart-markers"], "shards-plain"))
    a.shards, a.shards_plain = os.path.join(work, "shards"), os.path.join(work, "shards-plain")
    a.tfrecords = os.path.join(work, "train.tfrecord")
    code = (
        "import sys, time, tensorflow as tf\n"
        "sys.path.insert(0, sys.argv[3]); from bench_peers import files_and_labels\n"
        "t = time.time()\n"
        "with tf.io.TFRecordWriter(sys.argv[2]) as w:\n"
        "    for path, label in files_and_labels(sys.argv[1]):\n"
        "        data = open(path, 'rb').read()\n"
        "        f = {'image': tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),\n"
        "             'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}\n"
        "        w.write(tf.train.Example(features=tf.train.Features(feature=f)).SerializeToString())\n"
        "print(time.time() - t)\n"
    )
    times = {}
    for _ in range(CONVERSION_ROUNDS):
        for name, extra, dest in packs:
            t = time.time()
            subprocess.run([*exe, "pack", a.images, os.path.join(work, dest), "--overwrite", *extra],
                           check=True, capture_output=True)
            times[name] = min(times.get(name, 1e9), time.time() - t)
        if {"tfdata", "stokehold-tfrecord"} & set(peers):
            t = time.time()
            p = subprocess.run([sys.executable, "-c", code, a.images, a.tfrecords, os.path.dirname(os.path.abspath(__file__))],
                               check=True, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
            whole = time.time() - t
            times[TF_CONVERSION] = min(times.get(TF_CONVERSION, 1e9), float(p.stdout.split()[-1]))
            times[TF_CONVERSION_IMPORTS] = min(times.get(TF_CONVERSION_IMPORTS, 1e9), whole)
    a.tars, a.index_dir = os.path.join(work, "tars"), os.path.join(work, "index")
    if {"stokehold-wds", "webdataset"} & set(peers):
        write_tars(a.images, a.tars)
    in_place = [(f, k) for f, k, p in ((a.tfrecords, "tfrecord", "stokehold-tfrecord"), (a.tars, "tar", "stokehold-wds")) if p in peers]
    a.index_report = [index_vs_read(exe, path, kind, a.index_dir) for path, kind in in_place]
    return times


def write_tars(images, out):
    """The images as WebDataset tars (``KEY.jpg``, ``KEY.cls``), ``TARS`` of them, in file order."""
    import tarfile
    from io import BytesIO

    os.makedirs(out, exist_ok=True)
    items = files_and_labels(images)
    per = -(-len(items) // TARS)
    for t in range(TARS):
        with tarfile.open(os.path.join(out, f"train-{t:04d}.tar"), "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (path, label) in enumerate(items[t * per:(t + 1) * per], t * per):
                for ext, data in (("jpg", open(path, "rb").read()), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{i:07d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, BytesIO(data))


def index_vs_read(exe, path, kind, index_dir, rounds=3):
    """``stokehold index`` of ``path`` (every file scanned: ``--rebuild``) against reading its
    files once, warm page cache, best of ``rounds`` each; the index is left in ``index_dir`` for
    the trials."""
    files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".tar")]
    size = sum(os.path.getsize(f) for f in files)
    buf = bytearray(16 << 20)
    read = scan = whole = 1e9
    for _ in range(rounds):
        t = time.time()
        for f in files:
            with open(f, "rb", buffering=0) as h:
                while h.readinto(buf):
                    pass
        read = min(read, time.time() - t)
        t = time.time()
        p = subprocess.run([*exe, "index", path, "--index-dir", index_dir, "--rebuild"], check=True, capture_output=True, text=True)
        whole = min(whole, time.time() - t)
        scan = min(scan, float(p.stdout.split(" scanned in ")[1].split(" s")[0]) if " scanned in " in p.stdout else whole)
    return (f"index build ({kind}, {size / 2**20:,.0f} MiB, best of {rounds}, warm page cache): stokehold index {scan:.3f} s "
            f"({whole:.3f} s with the command's start), reading the files once {read:.3f} s: "
            f"{read / scan:.2f}x the speed of reading them ({read / whole:.2f}x with the start)")


CONVERSION_ROUNDS = 2
TF_CONVERSION = "tf.data TFRecord conversion"
TF_CONVERSION_IMPORTS = "the same with Python and TensorFlow's start"


def available(name):
    mod = MODULE.get(name)
    if mod is None:
        return True
    r = subprocess.run([sys.executable, "-c", f"import {mod}"], capture_output=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return r.returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", required=True, help="image folder, one sub-folder per class")
    ap.add_argument("--pipeline", default="train", choices=["train", "val", "both"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--work", help="where the packed copies go (default: a temporary directory)")
    ap.add_argument("--cli", help="the stokehold command to pack with (default: the installed package's)")
    ap.add_argument("--conversion-only", action="store_true",
                    help="time the conversions (pack vs tf.data's TFRecord writing) and stop")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    for k in ("shards", "shards-plain", "tfrecords", "tars", "index-dir"):
        ap.add_argument(f"--{k}", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    if not os.path.isdir(a.images):
        sys.exit(f"bench_peers: --images {a.images} is not a directory (make bench-data makes one)")
    peers = []
    for name in a.peers.split(","):
        if name not in PEERS:
            sys.exit(f"bench_peers: unknown peer {name!r}; choose from {', '.join(PEERS)}")
        if available(name):
            peers.append(name)
        else:
            print(f"{name}: not installed ({MODULE[name]}); left out")
    with tempfile.TemporaryDirectory(dir=a.work) as work:
        times = prepare(a, work, peers)
        n = len(files_and_labels(a.images))
        print(f"{n:,} images in {a.images}; {a.threads} threads/workers per loader, batch {a.batch}, "
              f"{a.rounds} interleaved rounds, a fresh process per trial; {os.cpu_count()} CPUs")
        print(f"conversion (best of {CONVERSION_ROUNDS}, warm page cache): " + "; ".join(f"{k} {v:.2f} s" for k, v in times.items()))
        if TF_CONVERSION in times:
            print(f"  stokehold pack (restart markers, command start included) vs tf.data's conversion: "
                  f"{times[TF_CONVERSION] / times['stokehold pack']:.2f}x faster "
                  f"({times[TF_CONVERSION_IMPORTS] / times['stokehold pack']:.2f}x with TensorFlow's start)")
        print(f"  stokehold pack vs pack --no-restart-markers: "
              f"{times['stokehold pack --no-restart-markers'] / times['stokehold pack']:.2f}x its speed")
        for line in a.index_report:
            print(line)
        if a.conversion_only:
            return
        for pipeline in (["train", "val"] if a.pipeline == "both" else [a.pipeline]):
            a.pipeline = pipeline
            res = {p: [] for p in peers}
            for r in range(a.rounds):
                for p in peers:
                    res[p].append(trial(p, a))
                    x = res[p][-1]
                    print(f"  {pipeline} round {r + 1} {p:14} {x['rate']:7.0f} images/s  first batch {x['first']:.2f} s  "
                          f"PSS {x['pss_mib']:5.0f} MiB  sampler CPU {x['sampler']:.2f} s  foreign CPU {x['foreign']:.1f} s", flush=True)
            table(pipeline, res, a)


def table(pipeline, res, a):
    med = {p: {k: statistics.median(x[k] for x in xs) for k in ("rate", "first", "pss_mib", "steady")}
           for p, xs in res.items()}
    for p, xs in res.items():
        med[p]["per_cpu"] = statistics.median(x["images"] / x["cpu"] for x in xs)
    others = [p for p in med if not p.startswith("stokehold")]
    best = max(others, key=lambda p: med[p]["rate"]) if others else None
    what = "RandomResizedCrop(224) + flip" if pipeline == "train" else "Resize(256) + CenterCrop(224)"
    print(f"\n{pipeline}: decode + {what}, medians of {a.rounds} rounds"
          + (f"; best peer: {best}" if best else ""))
    print(f"| loader ({a.threads} threads/workers) | images/s | x best peer | images per CPU-s | x best peer | peak PSS MiB | first batch s | after the first batch, images/s |")
    print("|---|---|---|---|---|---|---|---|")
    for p, m in sorted(med.items(), key=lambda kv: -kv[1]["rate"]):
        rb = f"{m['rate'] / med[best]['rate']:.2f}" if best else "-"
        cb = f"{m['per_cpu'] / med[best]['per_cpu']:.2f}" if best else "-"
        print(f"| {p} | {m['rate']:,.0f} | {rb} | {m['per_cpu']:,.0f} | {cb} | {m['pss_mib']:,.0f} | {m['first']:.2f} | {m['steady']:,.0f} |")
    if best:
        # what a peer gains on a longer epoch: its rate once the first batch is out, against its
        # rate over the whole epoch (a short epoch is dominated by a slow start)
        print(f"{best}: {med[best]['steady'] / med[best]['rate']:.2f}x its whole-epoch rate after its first batch "
              f"({med[best]['first']:.1f} s to it)")
    pairs = (("stokehold-tfrecord", ("stokehold-plain", "tfdata")), ("stokehold-wds", ("stokehold-plain", "webdataset")))
    for p, against in pairs:
        for q in (q for q in against if p in med and q in med):
            print(f"in place: {p} vs {q}: {med[p]['rate'] / med[q]['rate']:.2f}x images/s, "
                  f"{med[p]['per_cpu'] / med[q]['per_cpu']:.2f}x images per CPU-s, {med[p]['pss_mib'] / med[q]['pss_mib']:.2f}x peak PSS")
    if others:
        # a peer whose rounds differ a lot (tf.data runs at one of two speeds from one process to
        # the next) makes the ratio of medians fragile: say also what it is against any peer's
        # fastest round
        top, fastest = max((max(x["rate"] for x in res[p]), p) for p in others)
        for p in (p for p in med if p.startswith("stokehold")):
            lo, hi = min(x["rate"] for x in res[p]), max(x["rate"] for x in res[p])
            print(f"{p}: median {med[p]['rate'] / top:.2f}x the fastest single round of any peer "
                  f"({fastest}, {top:,.0f} images/s); its own rounds {lo:,.0f}-{hi:,.0f}")


if __name__ == "__main__":
    main()
