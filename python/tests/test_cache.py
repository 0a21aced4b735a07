"""Caches and storage access from Python: Dataset(access=...), Loader(cache=, decoded_cache=,
decoded_cache_dir=, cache_dir=): same batches as without them, and their figures in stats()."""

import gc
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import stokehold
from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

from _loader_helpers import write


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    path = tmp_path_factory.mktemp("tbl") / "ds"
    write(path, 300, shard_size=4096)
    return str(path)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("img")
    cli = [sys.executable, "-m", "stokehold._cli"]
    subprocess.run([*cli, "sample-data", root / "imgs", "--images", "32", "--classes", "2", "--size", "96x72"], check=True, capture_output=True)
    subprocess.run([*cli, "pack", root / "imgs", root / "ds", "--shard-size", "64KiB"], check=True, capture_output=True)
    return str(root / "ds")


def epoch(loader):
    return [{k: np.array(v) for k, v in b.items()} for b in loader]


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if x[k].dtype == object:
                assert list(x[k]) == list(y[k]), k
            else:
                np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def test_every_access_mode_reads_the_same_batches(table):
    ref = epoch(stokehold.Loader(table, 16, seed=1, threads=2))
    for access in ("pread", "mmap", "memory", "auto"):
        ds = stokehold.Dataset(table, access=access)
        assert ds.access in ("pread", "mmap", "memory")
        if access != "auto":
            assert ds.access == access
        same(epoch(stokehold.Loader(ds, 16, seed=1, threads=2)), ref)
    with pytest.raises(stokehold.ConfigError, match="access must be one of"):
        stokehold.Dataset(table, access="nvme")


def test_dataset_access_survives_pickling(table):
    import pickle

    ds = pickle.loads(pickle.dumps(stokehold.Dataset(table, access="mmap")))
    assert ds.access == "mmap"


def test_ram_cache_changes_nothing_and_reports_hits(table):
    ref = stokehold.Loader(table, 20, seed=2, threads=2)
    cached = stokehold.Loader(table, 20, seed=2, threads=2, cache="64MiB")
    for _ in range(2):
        same(epoch(cached), epoch(ref))
    c = cached.stats()["caches"]["records"]
    assert c["budget"] == 64 << 20
    assert c["hits"] > 0 and c["entries"] >= 1
    assert "records cache:" in cached.report()
    assert "caches" in ref.stats() and ref.stats()["caches"] == {}


@pytest.mark.parametrize("bad", ["lots", -5, "12XB", True])
def test_byte_options_are_checked(table, bad):
    with pytest.raises(stokehold.ConfigError, match="byte count|negative"):
        stokehold.Loader(table, 4, cache=bad) if bad is not True else stokehold.Loader(table, 4, cache_dir="x", cache_dir_limit=bad)


def test_decoded_cache_is_deterministic_cold_or_warm_and_saves_work(images):
    chain = [RandomResizedCrop(32), RandomHorizontalFlip()]
    loader = stokehold.Loader(images, 8, seed=4, threads=2, transforms={"image": chain}, decoded_cache=64, include_ids=True)
    loader.set_epoch(0)
    cold = epoch(loader)
    loader.set_epoch(0)
    warm = epoch(loader)
    same(cold, warm)
    d = loader.stats()["caches"]["decoded"]
    assert d["entries"] == 32 and d["hits"] >= 32 and d["saved"] > 0
    del loader  # a cache lives as long as a loader holds it
    gc.collect()
    other = stokehold.Loader(images, 8, seed=4, threads=1, transforms={"image": chain}, decoded_cache=64, decoded_cache_budget=1, include_ids=True)
    other.set_epoch(0)
    same(epoch(other), cold)  # nothing fits in 1 byte: computed every time, same pixels
    assert other.stats()["caches"]["decoded"]["entries"] == 0
    with pytest.raises(stokehold.ConfigError, match="decoded_cache"):
        stokehold.Loader(images, 8, decoded_cache=0, transforms={"image": chain})
    with pytest.raises(stokehold.ConfigError, match="decoded_cache"):
        stokehold.Loader(images, 8, decoded_cache=64)  # no image stages


FILL_DECODED_DIR = """
import sys
import stokehold
from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

chain = [RandomResizedCrop(32), RandomHorizontalFlip()]
loader = stokehold.Loader(sys.argv[1], 8, seed=4, threads=2, transforms={"image": chain}, decoded_cache=64,
                          decoded_cache_dir=sys.argv[2])
loader.set_epoch(0)
n = sum(len(b["image"]) for b in loader)
print(loader.stats()["caches"]["decoded-disk"]["misses"], n)
"""


def test_a_full_disk_stops_the_decoded_cache_dir_with_one_message_and_the_same_pixels(images, tmp_path):
    """STOKEHOLD_KEEP_FREE above what any disk has free: nothing is written, the run's pixels are
    those of a run without the directory, and the reason is said once."""
    env = dict(os.environ, STOKEHOLD_KEEP_FREE="1000000TiB")
    root = tmp_path / "decoded"
    p = subprocess.run([sys.executable, "-c", FILL_DECODED_DIR, images, str(root)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["32", "32"], p.stdout
    assert p.stderr.count("would keep less than") == 1, p.stderr
    assert "STOKEHOLD_KEEP_FREE" in p.stderr
    assert not [f for f in root.rglob("part-*")], list(root.rglob("*"))


def test_a_decoded_cache_dir_that_cannot_be_written_only_stops_writing_and_names_the_directory(images, tmp_path):
    """A directory that cannot be created or written (a file in its place here, as a read-only
    directory is for a user other than root): the loader is made and runs with the same pixels;
    one message names the directory given, not a hash folder in it."""
    root = tmp_path / "decoded"
    root.write_bytes(b"not a directory")
    p = subprocess.run([sys.executable, "-c", FILL_DECODED_DIR, images, str(root)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split()[1] == "32", p.stdout
    assert p.stderr.count(f"decoded_cache_dir {root}: cannot write there") == 1, p.stderr
    assert "give a directory this user can write" in p.stderr, p.stderr


def test_decoded_cache_dir_is_read_by_a_later_process_with_the_same_pixels(images, tmp_path):
    chain = [RandomResizedCrop(32), RandomHorizontalFlip()]
    ram_only = stokehold.Loader(images, 8, seed=4, threads=2, transforms={"image": chain}, decoded_cache=64, include_ids=True)
    ram_only.set_epoch(0)
    reference = epoch(ram_only)
    del ram_only
    gc.collect()
    root = tmp_path / "decoded"
    # another process decodes every image and leaves them in the directory
    p = subprocess.run([sys.executable, "-c", FILL_DECODED_DIR, images, str(root)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["32", "32"], p.stdout
    loader = stokehold.Loader(images, 8, seed=4, threads=1, transforms={"image": chain}, decoded_cache=64,
                              decoded_cache_dir=root, include_ids=True)
    loader.set_epoch(0)
    same(epoch(loader), reference)
    disk = loader.stats()["caches"]["decoded-disk"]
    assert (disk["hits"], disk["misses"], disk["entries"]) == (32, 0, 32)
    assert "decoded-disk cache: 100.0% hits" in loader.report()
    with pytest.raises(stokehold.ConfigError, match="decoded_cache_dir needs decoded_cache"):
        stokehold.Loader(images, 8, transforms={"image": chain}, decoded_cache_dir=root)
    with pytest.raises(stokehold.ConfigError, match="decoded_cache_dir_limit"):
        stokehold.Loader(images, 8, transforms={"image": chain}, decoded_cache=64, decoded_cache_dir=root, decoded_cache_dir_limit=0)


def test_cache_dir_copies_the_shards_and_gives_the_same_batches(table, tmp_path):
    ref = epoch(stokehold.Loader(table, 16, seed=5, threads=2))
    cache_dir = tmp_path / "cache"
    loader = stokehold.Loader(table, 16, seed=5, threads=2, cache_dir=cache_dir)
    same(epoch(loader), ref)
    total = len([f for f in os.listdir(table) if f.endswith(".skh")])
    deadline = time.monotonic() + 60
    while loader.stats()["caches"]["disk"]["entries"] < total and time.monotonic() < deadline:
        time.sleep(0.01)  # the copies are made in the background
    disk = loader.stats()["caches"]["disk"]
    assert disk["entries"] == total and disk["misses"] + disk["hits"] == total, disk
    shards = [f for f in os.listdir(cache_dir) if f.endswith(".skh") and ".tmp-" not in f]
    assert len(shards) == total
    loader.set_epoch(0)
    same(epoch(loader), ref)  # now from the copies
    # a second loader finds the copies
    again = stokehold.Loader(table, 16, seed=5, threads=2, cache_dir=cache_dir)
    same(epoch(again), ref)
    with pytest.raises(stokehold.ConfigError, match="below the largest shard"):
        stokehold.Loader(table, 16, cache_dir=tmp_path / "small", cache_dir_limit=100)


def _copies_ready(loader, total, timeout=60.0):
    deadline = time.monotonic() + timeout
    while loader.stats()["caches"]["disk"]["entries"] < total and time.monotonic() < deadline:
        time.sleep(0.01)
    return loader.stats()["caches"]["disk"]["entries"] == total


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_a_damaged_cache_dir_copy_is_discarded_reported_by_its_name_and_read_from_the_source(
    table, tmp_path, capfd, policy
):
    ref = epoch(stokehold.Loader(table, 16, seed=5, threads=2))
    total = len([f for f in os.listdir(table) if f.endswith(".skh")])
    cache_dir = tmp_path / "cache"
    first = stokehold.Loader(table, 16, seed=5, threads=2, cache_dir=cache_dir)
    same(epoch(first), ref)
    assert _copies_ready(first, total)
    del first
    # damage one copy between runs: a byte inside its first record (its source stays sound)
    copies = sorted(f for f in os.listdir(cache_dir) if f.endswith(".skh") and ".tmp-" not in f)
    damaged = cache_dir / copies[0]
    raw = bytearray(damaged.read_bytes())
    raw[200] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    capfd.readouterr()
    again = stokehold.Loader(table, 16, seed=5, threads=2, cache_dir=cache_dir, on_error=policy)
    assert _copies_ready(again, total)  # every shard reads its copy, the damaged one included
    same(epoch(again), ref)  # repaired from the source: no error, nothing skipped
    assert again.stats()["skipped"] == []
    err = capfd.readouterr().err
    assert err.count("is damaged") == 1 and str(damaged) in err, err
    assert not damaged.exists(), "the damaged copy is deleted"
    # the next run copies it anew
    third = stokehold.Loader(table, 16, seed=5, threads=2, cache_dir=cache_dir)
    same(epoch(third), ref)
    assert _copies_ready(third, total) and damaged.exists()
    assert damaged.read_bytes() != bytes(raw)


def _flip(path, at):
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("layer", ["source", "disk copy", "RAM cache over a disk copy", "decoded cache dir"])
def test_damage_at_every_layer_is_detected_repaired_from_a_clean_copy_and_reported_by_name(
    table, images, tmp_path, capfd, layer
):
    """The standing test of caches' trust: each layer damaged on its own; a layer with a clean
    copy under it is repaired, the damage reported once under the damaged file's name; damage
    to the source itself is an error naming the source (or a counted skip)."""
    if layer == "decoded cache dir":
        chain = [RandomResizedCrop(32), RandomHorizontalFlip()]
        kw = dict(seed=4, threads=1, transforms={"image": chain}, decoded_cache=64, include_ids=True)
        ref = epoch(stokehold.Loader(images, 8, **kw))
        root = tmp_path / "decoded"
        fill = stokehold.Loader(images, 8, decoded_cache_dir=root, **kw)
        same(epoch(fill), ref)
        fill.close()
        del fill
        gc.collect()
        parts = sorted((p for p in root.rglob("*") if p.is_file() and p.stat().st_size > 4096),
                       key=lambda p: -p.stat().st_size)
        assert parts, list(root.rglob("*"))
        _flip(parts[0], parts[0].stat().st_size // 3)
        capfd.readouterr()
        again = stokehold.Loader(images, 8, decoded_cache_dir=root, **kw)
        same(epoch(again), ref)  # computed again from the source
        err = capfd.readouterr().err
        assert parts[0].name in err and "fails its checksum" in err, err
        return
    src = tmp_path / "src"
    shutil.copytree(table, src)
    ref = epoch(stokehold.Loader(str(src), 16, seed=5, threads=2))
    shards = sorted(f for f in os.listdir(src) if f.endswith(".skh"))
    if layer == "source":
        _flip(src / shards[0], 200)
        with pytest.raises(stokehold.CorruptDataError) as e:
            epoch(stokehold.Loader(str(src), 16, seed=5, threads=2))
        assert str(src / shards[0]) in str(e.value) and "checksum" in str(e.value)
        skipping = stokehold.Loader(str(src), 16, seed=5, threads=2, on_error="skip")
        assert len(epoch(skipping)) == len(ref) and len(skipping.stats()["skipped"]) == 1
        return
    cache_dir = tmp_path / "cache"
    first = stokehold.Loader(str(src), 16, seed=5, threads=2, cache_dir=cache_dir)
    epoch(first)
    assert _copies_ready(first, len(shards))
    del first
    copy = cache_dir / sorted(f for f in os.listdir(cache_dir) if f.endswith(".skh") and ".tmp-" not in f)[0]
    _flip(copy, 200)
    capfd.readouterr()
    kw = dict(cache=True) if layer.startswith("RAM") else {}
    again = stokehold.Loader(str(src), 16, seed=5, threads=2, cache_dir=cache_dir, **kw)
    assert _copies_ready(again, len(shards))
    for _ in range(2):  # the second pass reads the RAM cache, when there is one
        again.set_epoch(0)
        same(epoch(again), ref)
    err = capfd.readouterr().err
    assert err.count("is damaged") == 1 and str(copy) in err and str(src) in err, err


RANK = """
import hashlib, json, os, sys, time
import numpy as np
import stokehold
from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

images, root, rank, world, epochs, sync, pause = sys.argv[1:8]
rank, world, epochs, pause = int(rank), int(world), int(epochs), float(pause)
kw = dict(seed=4, threads=2, rank=rank, world_size=world, decoded_cache=64, include_ids=True,
          transforms={"image": [RandomResizedCrop(32), RandomHorizontalFlip()]})
if root != "-":
    kw["decoded_cache_dir"] = root
loader = stokehold.Loader(images, 8, **kw)
# the ranks of a node start together
open(os.path.join(sync, f"ready-{rank}-{os.getpid()}"), "w").close()
while len([f for f in os.listdir(sync) if f.startswith("ready-")]) < world:
    time.sleep(0.005)
digests = []
for e in range(epochs):
    loader.set_epoch(e)
    for b in loader:
        digests.append(hashlib.sha256(np.ascontiguousarray(b["image"]).tobytes() + np.asarray(b["id"]).tobytes()).hexdigest())
        time.sleep(pause)
st = loader.stats()["caches"]
disk = st.get("decoded-disk", {"misses": st["decoded"]["misses"], "shared": 0})
print(json.dumps({"digests": digests, "decoded": disk["misses"], "shared": disk["shared"]}))
"""


@pytest.fixture(scope="module")
def more_images(tmp_path_factory):
    root = tmp_path_factory.mktemp("img120")
    cli = [sys.executable, "-m", "stokehold._cli"]
    subprocess.run([*cli, "sample-data", root / "imgs", "--images", "120", "--classes", "2", "--size", "64x48"], check=True, capture_output=True)
    subprocess.run([*cli, "pack", root / "imgs", root / "ds", "--shard-size", "64KiB"], check=True, capture_output=True)
    return str(root / "ds")


def ranks(images, root, world, tmp, epochs=3, pause=0.02):
    """``world`` ranks of one node started together, each taking ``pause`` s a step (a training step:
    the ranks overlap as a job's do); each one's batch digests and counts."""
    sync = tmp / f"sync-{time.monotonic_ns()}"
    sync.mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", RANK, images, str(root), str(r), str(world), str(epochs), str(sync), str(pause)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r in range(world)
    ]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append(__import__("json").loads(stdout))
    return out


def part_bytes(root):
    return sum(p.stat().st_size for p in root.rglob("part-*.skdc"))


@pytest.mark.parametrize("world", [2, 3])
def test_the_ranks_of_a_node_share_the_decoded_directory_within_a_run(more_images, tmp_path, world):
    """Ranks started together, 3 epochs, one directory: every batch is the batch without the
    directory, each image is decoded about once per node (the other ranks read what one decoded
    in an earlier epoch), the directory holds one copy, and a process killed while writing its
    part leaves nothing half-written."""
    n = 120
    reference = ranks(more_images, "-", world, tmp_path)
    root = tmp_path / "decoded"
    # a process killed while its part is being written (its images are not yet published)
    sync = tmp_path / "killed"
    sync.mkdir()
    victim = subprocess.Popen([sys.executable, "-c", RANK, more_images, str(root), "0", "1", "1", str(sync), "0.2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(root.rglob("part-*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.01)
    victim.kill()
    victim.wait()
    assert list(root.rglob("part-*.tmp")), "the victim was writing"
    got = ranks(more_images, root, world, tmp_path)
    for r in range(world):
        assert got[r]["digests"] == reference[r]["digests"], f"rank {r}"
    decoded = sum(g["decoded"] for g in got)
    assert decoded <= 1.05 * n, (decoded, [g["decoded"] for g in got])
    assert sum(g["shared"] for g in got) > 0
    assert not list(root.rglob("part-*.tmp")), "the killed part was swept"
    # one copy: what one process alone leaves for the same images
    alone = tmp_path / "alone"
    p = subprocess.run([sys.executable, "-c", FILL_DECODED_DIR, more_images, str(alone)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert part_bytes(root) <= 1.05 * part_bytes(alone), (part_bytes(root), part_bytes(alone))
