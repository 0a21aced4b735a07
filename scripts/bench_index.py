"""Index build of files read in place against reading the same files (issue #50, item 11).

A folder of JPEGs (``make bench-data``'s ImageNet-like set, or any image folder with class
sub-folders) is written once as one TFRecord file of ``tf.train.Example``s (a writer of our own:
no TensorFlow) and as 8 WebDataset tars, then, warm page cache, best of ``--rounds`` each and
alternated: ``stokehold index --rebuild`` (its own "scanned in" time, and the whole command)
against reading the files once with 16 MiB reads. The ratio is read speed / index speed's
inverse: 1.0 means indexing costs what reading the bytes costs.

    python scripts/bench_index.py --images bench-data/inet/train --cli target/release/stokehold
"""

import argparse
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
from test_inplace import example, masked  # noqa: E402  (the tests' TFRecord writer and Example encoder)

TARS = 8


def images(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    out = []
    for label, c in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, c))):
            out.append((os.path.join(root, c, f), label))
    return out


def write_tfrecord(items, path):
    with open(path, "wb") as f:
        for p, label in items:
            data = example({"image/encoded": open(p, "rb").read(), "image/class/label": [label]})
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data)))


def write_tars(items, out):
    os.makedirs(out, exist_ok=True)
    per = -(-len(items) // TARS)
    for t in range(TARS):
        with tarfile.open(os.path.join(out, f"train-{t:04d}.tar"), "w", format=tarfile.USTAR_FORMAT) as tar:
            for i, (p, label) in enumerate(items[t * per:(t + 1) * per], t * per):
                for ext, data in (("jpg", open(p, "rb").read()), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{i:07d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, BytesIO(data))


def read_once(files, buf):
    t = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as h:
            while h.readinto(buf):
                pass
    return time.perf_counter() - t


def index_once(cli, path, index_dir):
    t = time.perf_counter()
    p = subprocess.run([cli, "index", path, "--index-dir", index_dir, "--rebuild"], check=True, capture_output=True, text=True)
    whole = time.perf_counter() - t
    return float(p.stdout.split(" scanned in ")[1].split(" s")[0]), whole


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", required=True)
    ap.add_argument("--cli", default="target/release/stokehold")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="bench-index-")
    os.makedirs(work, exist_ok=True)
    items = images(a.images)
    tfr = os.path.join(work, "train.tfrecord")
    tars = os.path.join(work, "tars")
    if not os.path.exists(tfr):
        write_tfrecord(items, tfr)
    if not os.path.isdir(tars):
        write_tars(items, tars)
    buf = bytearray(16 << 20)
    for kind, path in (("tfrecord", tfr), ("tar", tars)):
        files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".tar")]
        size = sum(os.path.getsize(f) for f in files)
        ix = os.path.join(work, f"ix-{kind}")
        read_once(files, buf)  # warm the page cache
        index_once(a.cli, path, ix)
        read = scan = whole = 1e9
        for _ in range(a.rounds):
            read = min(read, read_once(files, buf))
            s, w = index_once(a.cli, path, ix)
            scan, whole = min(scan, s), min(whole, w)
        print(f"index build ({kind}, {len(items):,} images, {size / 2**20:,.0f} MiB, best of {a.rounds}, warm page cache): "
              f"stokehold index {scan:.4f} s ({whole:.3f} s with the command's start), reading the files once {read:.4f} s: "
              f"{read / scan:.2f}x the speed of reading them (target >= 0.8)", flush=True)


if __name__ == "__main__":
    main()
