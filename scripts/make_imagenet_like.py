#!/usr/bin/env python3
"""Make the benchmarks' ImageNet-like image folder from real photographs.

    python scripts/make_imagenet_like.py [OUT] [--images 5000] [--classes 50] [--seed 0]
        [--cache DIR] [--cli target/release/stokehold] [--synthetic]

`make bench-data` runs it (OUT = bench-data/inet) and packs OUT/train into bench-data/inet-shards.

The photographs come from Debian's wallpaper packages, fetched with `apt-get download` and
unpacked with `dpkg -x` into the cache directory (default bench-data/cache; nothing is installed
system-wide, no root needed once the package lists are there). Random crops of them are resized to
ImageNet's size distribution (shorter side 333-500 px, mostly 500x375 or 375x500) and saved as
baseline JPEG, quality 90, 4:2:0, in class sub-folders. The original photographs of at least one
megapixel are kept as they ship (some progressive) as the second benchmark set.

    OUT/train/class_000/000000.jpg ...   the ImageNet-like crops
    OUT/large/000-NAME.jpg ...           the original photographs
    OUT/SOURCES.md                       where every photograph came from, and totals

Same seed, same Pillow: same files. OUT is written beside itself (OUT.partial) and renamed when
complete, so an OUT that exists is complete; the script then does nothing (--force remakes it).

When the packages cannot be fetched (no apt, offline, no package lists) it says so and falls back
to `stokehold sample-data`: generated photo-like JPEGs of the same sizes, and large generated ones.
Figures measured on those are not comparable with the README's (--synthetic forces the fallback).
"""

import argparse
import glob
import os
import random
import shutil
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor

from _bench import BENCH_DATA, ROOT, require, run_or_exit
PACKAGES = [
    "lomiri-wallpapers-16.04",
    "lomiri-wallpapers-20.04",
    "mate-backgrounds",
    "plasma-workspace-wallpapers",
]
MIN_LARGE_PIXELS = 1_000_000


class FetchError(Exception):
    """The wallpaper packages could not be fetched or unpacked."""


def run_quiet(cmd, cwd=None) -> None:
    """Run ``cmd``; on failure raise FetchError with the last line it printed."""
    try:
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    except OSError as e:
        raise FetchError(f"{cmd[0]}: {e.strerror}") from None
    if r.returncode != 0:
        last = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
        raise FetchError(f"`{' '.join(cmd)}` failed: {last}")


def fetch_photos(cache: str):
    """Download and unpack the wallpaper packages; return [(package, path)] of large JPEGs."""
    os.makedirs(cache, exist_ok=True)
    missing = [p for p in PACKAGES if not glob.glob(os.path.join(cache, p + "_*.deb"))]
    if missing:
        print(f"fetching {', '.join(missing)} with apt-get download into {cache}", flush=True)
        if shutil.which("apt-get") is None:
            raise FetchError("no apt-get on PATH")
        try:
            run_quiet(["apt-get", "download", "-qq", *missing], cwd=cache)
        except FetchError:
            # the package lists may be missing or stale: refresh them (needs root) and try again
            if os.geteuid() == 0:
                subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
            run_quiet(["apt-get", "download", "-qq", *missing], cwd=cache)
    photos = []
    for pkg in PACKAGES:
        debs = sorted(glob.glob(os.path.join(cache, pkg + "_*.deb")))
        if not debs:
            raise FetchError(f"{pkg}: no .deb in {cache} after apt-get download")
        root = os.path.join(cache, "x", pkg)
        if not os.path.isdir(root):
            shutil.rmtree(root + ".partial", ignore_errors=True)
            os.makedirs(root + ".partial")
            run_quiet(["dpkg", "-x", debs[-1], root + ".partial"])
            os.rename(root + ".partial", root)
        for p in sorted(glob.glob(os.path.join(root, "**", "*.jp*g"), recursive=True)):
            if not os.path.islink(p) and os.path.getsize(p) > 200_000:
                photos.append((pkg, os.path.basename(debs[-1]), p))
    # plasma ships each wallpaper at many resolutions: keep the largest file per wallpaper folder
    best = {}
    for pkg, deb, p in photos:
        key = os.path.dirname(p) if "/contents/images" in p else p
        if key not in best or os.path.getsize(p) > os.path.getsize(best[key][2]):
            best[key] = (pkg, deb, p)
    if not best:
        raise FetchError(f"no photographs found in the packages under {cache}")
    return sorted(best.values(), key=lambda t: t[2])


def imagenet_size(rng: random.Random):
    """A (width, height) drawn from ImageNet's distribution (shorter side 333-500)."""
    u = rng.random()
    aspect = 4 / 3 if u < 0.6 else 3 / 2 if u < 0.75 else 1.0 if u < 0.85 else rng.uniform(1.0, 1.5)
    long_side = 500 if rng.random() < 0.9 else rng.randint(400, 500)
    short_side = max(333, round(long_side / aspect))
    return (long_side, short_side) if rng.random() < 0.75 else (short_side, long_side)


def plan(sizes, n_images: int, n_classes: int, seed: int):
    """Every crop to make, decided up front from ``seed``: (n, source, box, flip, size, path)."""
    rng = random.Random(seed)
    crops = []
    for n in range(n_images):
        src = rng.randrange(len(sizes))
        sw, sh = sizes[src]
        tw, th = imagenet_size(rng)
        aspect = tw / th
        max_w = min(sw, int(sh * aspect))
        min_w = min(max_w, tw)
        cw = int(min_w + (max_w - min_w) * rng.random() ** 0.5)
        ch = max(1, int(cw / aspect))
        x0, y0 = rng.randint(0, sw - cw), rng.randint(0, sh - ch)
        flip = rng.random() < 0.5
        rel = os.path.join(f"class_{n % n_classes:03d}", f"{n:06d}.jpg")
        crops.append((n, src, (x0, y0, x0 + cw, y0 + ch), flip, (tw, th), rel))
    return crops


def make_crops(job):
    """Decode one photograph and write its crops; returns the bytes written."""
    from PIL import Image

    path, crops, train = job
    with Image.open(path) as im:
        src = im.convert("RGB")
    total = 0
    for _, _, box, flip, size, rel in crops:
        crop = src.crop(box)
        if flip:
            crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        out = os.path.join(train, rel)
        crop.resize(size, Image.Resampling.BICUBIC, reducing_gap=3.0).save(
            out, "JPEG", quality=90, progressive=False, subsampling="4:2:0"
        )
        total += os.path.getsize(out)
    return total


def from_photographs(out: str, photos, a) -> None:
    from PIL import Image

    train, large = os.path.join(out, "train"), os.path.join(out, "large")
    os.makedirs(large)
    sizes = []
    for i, (_, _, p) in enumerate(photos):
        with Image.open(p) as im:
            sizes.append(im.size)
        if sizes[-1][0] * sizes[-1][1] >= MIN_LARGE_PIXELS:
            shutil.copyfile(p, os.path.join(large, f"{i:03d}-{os.path.basename(p)}"))
    crops = plan(sizes, a.images, a.classes, a.seed)
    for c in range(a.classes):
        os.makedirs(os.path.join(train, f"class_{c:03d}"))
    jobs = [(p, [c for c in crops if c[1] == i], train) for i, (_, _, p) in enumerate(photos)]
    jobs = [j for j in jobs if j[1]]
    print(f"cutting {a.images} crops from {len(photos)} photographs", flush=True)
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        total = sum(pool.map(make_crops, jobs))
    with open(os.path.join(out, "SOURCES.md"), "w") as f:
        f.write("# Sources\n\nCrops of these photographs, from Debian packages (licenses: each package's\n")
        f.write("usr/share/doc/PACKAGE/copyright, under the cache directory's x/PACKAGE):\n\n")
        for pkg, deb, p in photos:
            f.write(f"- {pkg} ({deb}): {os.path.relpath(p, os.path.join(a.cache, 'x', pkg))}\n")
        f.write(
            f"\n{a.images} crops in {a.classes} classes, {total / a.images / 1024:.1f} KiB mean, "
            f"seed {a.seed}; made by scripts/make_imagenet_like.py.\n"
        )


def cli_command(cli):
    """How to run the stokehold command: --cli, the release build, PATH, or the Python package."""
    for c in [cli, os.path.join(ROOT, "target", "release", "stokehold"), shutil.which("stokehold")]:
        if c and os.access(c, os.X_OK):
            return [c]
    return [sys.executable, "-m", "stokehold._cli"]


def synthetic(out: str, a) -> None:
    cli = cli_command(a.cli)
    train, large = os.path.join(out, "train"), os.path.join(out, "large")
    for dest, args in [
        (train, ["--images", str(a.images), "--classes", str(a.classes), "--size", "500x375"]),
        (large, ["--images", "20", "--classes", "1", "--size", "3000x2000"]),
    ]:
        run_or_exit([*cli, "sample-data", dest, "--quality", "90", "--seed", str(a.seed), *args])
    # sample-data writes class folders: the large set is flat, as with the photographs
    for i, p in enumerate(sorted(glob.glob(os.path.join(large, "*", "*.jpg")))):
        os.rename(p, os.path.join(large, f"{i:03d}-synthetic.jpg"))
    for d in glob.glob(os.path.join(large, "*", "")):
        os.rmdir(d)
    with open(os.path.join(out, "SOURCES.md"), "w") as f:
        f.write(
            "# Sources\n\nSYNTHETIC: generated by `stokehold sample-data` (--synthetic, or the Debian wallpaper packages "
            f"could not be fetched).\n\n{a.images} images in {a.classes} classes, seed {a.seed}; "
            "large/: 20 generated 3000x2000 images.\n"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=os.path.join(BENCH_DATA, "inet"))
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--classes", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(BENCH_DATA, "cache"),
                    help="where the .deb files are downloaded and unpacked (kept for the next run)")
    ap.add_argument("--cli", help="the stokehold command, for the synthetic fallback")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes cutting crops")
    ap.add_argument("--synthetic", action="store_true", help="use generated images, fetch nothing")
    ap.add_argument("--force", action="store_true", help="remake OUT if it exists")
    a = ap.parse_args()
    if a.images < 1 or a.classes < 1:
        sys.exit("error: --images and --classes must be at least 1")
    out = os.path.abspath(a.out)
    if os.path.exists(out) and not a.force:
        print(f"{out} exists: nothing to do (--force remakes it)")
        return 0

    photos = None
    if not a.synthetic:
        require("PIL")  # --synthetic needs only the stokehold command
        try:
            photos = fetch_photos(os.path.abspath(a.cache))
        except FetchError as e:
            print(
                f"NOTE: the Debian wallpaper packages could not be fetched ({e}).\n"
                "NOTE: falling back to `stokehold sample-data`: SYNTHETIC photo-like images. Figures "
                "measured on them are not comparable with the README's.",
                flush=True,
            )
    partial = out + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    if photos:
        from_photographs(partial, photos, a)
    else:
        synthetic(partial, a)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.rename(partial, out)
    files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(out, "train")) for f in fs]
    n_large = len(os.listdir(os.path.join(out, "large")))
    mib = sum(map(os.path.getsize, files)) / 2**20
    kind = "from photographs" if photos else "SYNTHETIC"
    print(f"done: {len(files)} ImageNet-like JPEGs ({mib:.1f} MiB, {kind}) in {out}/train, {n_large} large in {out}/large")
    return 0


if __name__ == "__main__":
    sys.exit(main())
