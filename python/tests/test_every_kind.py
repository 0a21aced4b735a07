"""One suite, every kind of samples: images through random stages (`Loader`), packed token windows
and padded, length-bucketed documents (`SequenceLoader`) all run on the one engine, so each must
keep the same promises: determinism whatever the thread count, exact mid-epoch resume, elastic
resume, the skip policy (also across a resume), iterators that join their workers when dropped,
`close()` that joins every thread, Ctrl-C, and fork."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zlib

import pytest

import stokehold
from stokehold._native import run_cli
from stokehold.image import RandomHorizontalFlip, RandomResizedCrop

tokenizers = pytest.importorskip("tokenizers")

KINDS = ["images", "tokens-packed", "tokens-documents"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """An image dataset (generated JPEGs) and a token dataset (a tokenizer trained here)."""
    root = tmp_path_factory.mktemp("kinds")
    assert run_cli(["stokehold", "sample-data", str(root / "imgs"), "--images", "40", "--classes", "2",
                    "--size", "64x48"]) == 0
    assert run_cli(["stokehold", "pack", str(root / "imgs"), str(root / "images"), "--shard-size", "32KiB"]) == 0
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    words = "one two three four five six seven eight nine ten".split()
    docs = [" ".join(words[(i * 7 + k * 3) % 10] for k in range(5 + (i * 37) % 90)) for i in range(160)]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(docs, trainers.WordLevelTrainer(special_tokens=["[UNK]", "</s>"]))
    tok.save(str(root / "tokenizer.json"))
    with open(root / "corpus.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    assert run_cli(["stokehold", "pack", str(root / "corpus.jsonl"), str(root / "tokens"), "--tokenizer",
                    str(root / "tokenizer.json"), "--append-eos", "</s>", "--shard-size", "8KiB"]) == 0
    return {"images": str(root / "images"), "tokens": str(root / "tokens")}


def source(kind, data):
    return data["images"] if kind == "images" else data["tokens"]


def make(kind, path, **kw):
    """A loader of `kind` over `path` (8 samples a batch, seed 5, ids included)."""
    kw.setdefault("include_ids", True)
    kw.setdefault("seed", 5)
    if kind == "images":
        stages = [RandomResizedCrop(24), RandomHorizontalFlip()]
        return stokehold.Loader(path, 8, transforms={"image": stages}, **kw)
    if kind == "tokens-packed":
        return stokehold.SequenceLoader(path, seq_len=16, batch_size=8, **kw)
    return stokehold.SequenceLoader(path, max_len=24, bucket=4, batch_size=8, **kw)


def digest(batch):
    """A batch as (ids, padding flags, a checksum of every other array)."""
    crc = 0
    for k in sorted(batch):
        if k in ("id", "is_padding"):
            continue
        v = batch[k]
        raw = repr(v).encode() if isinstance(v, list) else bytes(memoryview(v).cast("B"))
        crc = zlib.crc32(k.encode() + raw, crc)
    return (tuple(batch["id"].tolist()), tuple(batch["is_padding"].tolist()), crc)


def epoch(loader):
    return [digest(b) for b in loader]


def task_ids():
    """The ids of the engine's threads alive in this process (named ``stokehold-...``; counting
    only those keeps threads that other libraries start or end meanwhile, e.g. torch's pools,
    out of it)."""
    ids = set()
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().startswith("stokehold"):
                    ids.add(t)
        except OSError:  # the thread ended while we looked
            pass
    return ids


@pytest.mark.parametrize("kind", KINDS)
def test_output_is_a_function_of_the_seed_not_of_the_thread_count(kind, data):
    path = source(kind, data)
    one = make(kind, path, threads=1)
    three = make(kind, path, threads=3, prefetch=2)
    a, b = epoch(one), epoch(three)
    assert a == b and len(a) == len(one) > 3
    one.set_epoch(1)
    assert epoch(one) != a, "a new epoch is a new order"
    other = epoch(make(kind, path, threads=2, seed=6))
    assert other != a


@pytest.mark.parametrize("kind", KINDS)
def test_resume_mid_epoch_gives_exactly_the_rest(kind, data):
    path = source(kind, data)
    full = epoch(make(kind, path, threads=2))
    loader = make(kind, path, threads=2)
    it = iter(loader)
    head = [digest(next(it)) for _ in range(3)]
    state = loader.state_dict()
    del it
    again = make(kind, path, threads=1)
    again.load_state_dict(json.loads(json.dumps(state)))
    assert head + epoch(again) == full


@pytest.mark.parametrize("kind", KINDS)
def test_elastic_resume_from_two_ranks_to_one_repeats_and_loses_nothing(kind, data):
    path = source(kind, data)
    ranks = [make(kind, path, threads=1, rank=r, world_size=2) for r in range(2)]
    its = [iter(r) for r in ranks]
    seen = []
    for _ in range(1):  # one step of 2 ranks (the image epoch has only 2)
        for it in its:
            seen.extend(i for i, pad in zip(*digest(next(it))[:2]) if not pad)
    state = ranks[0].state_dict()
    assert state == ranks[1].state_dict(), "the state is global: every rank's is the same"
    del its
    solo = make(kind, path, threads=2, rank=0, world_size=1)
    solo.load_state_dict(state)
    after = [i for ids, pads, _ in epoch(solo) for i, pad in zip(ids, pads) if not pad]
    whole = [i for ids, pads, _ in epoch(make(kind, path, threads=2, world_size=1, rank=0)) for i, pad in zip(ids, pads) if not pad]
    assert len(set(after)) == len(after) and not set(after) & set(seen)
    # what the one rank still reads is what the uninterrupted one-rank epoch reads after the
    # same step of 2 ranks (16 positions)
    assert after == whole[len(seen):]


@pytest.fixture(scope="module")
def damaged(data, tmp_path_factory):
    """Copies of both datasets with one byte flipped inside one record of the first shard."""
    root = tmp_path_factory.mktemp("damaged")
    out = {}
    for name, path in data.items():
        copy = root / name
        shutil.copytree(path, copy)
        ds = stokehold.Dataset(str(copy))
        shard = sorted(f for f in os.listdir(copy) if f.endswith(".skh"))[0]
        raw = bytearray((copy / shard).read_bytes())
        # a record in the middle of the shard's data: the index and trailer are at the end
        pos = len(raw) // 3
        raw[pos] ^= 0x5A
        (copy / shard).write_bytes(bytes(raw))
        out[name] = (str(copy), shard, len(ds))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_damage_fails_naming_the_shard_or_is_skipped_and_counted(kind, damaged):
    path, shard, _ = damaged["images" if kind == "images" else "tokens"]
    with pytest.raises(stokehold.StokeholdError) as e:
        epoch(make(kind, path, threads=2))
    assert shard in str(e.value), str(e.value)
    skipping = make(kind, path, threads=2, on_error="skip")
    got = epoch(skipping)
    assert len(got) == len(skipping)
    skipped = skipping.stats()["skipped"]
    assert 0 < len(skipped) <= 0.05 * len(skipping) * 8
    # the skipped slots are padding, every other slot a real sample
    pads = sum(sum(p) for _, p, _ in got)
    assert pads >= len(skipped)


@pytest.mark.parametrize("kind", KINDS)
def test_a_skip_run_resumes_late_in_the_epoch_exactly_as_it_would_have_run(kind, damaged):
    path, _, _ = damaged["images" if kind == "images" else "tokens"]
    policy = dict(on_error="skip")
    full = epoch(make(kind, path, threads=2, **policy))
    loader = make(kind, path, threads=2, **policy)
    it = iter(loader)
    k = len(loader) - 1
    head = [digest(next(it)) for _ in range(k)]
    state = loader.state_dict()
    del it
    again = make(kind, path, threads=1, **policy)
    again.load_state_dict(state)
    assert head + epoch(again) == full
    # the skip count is the epoch's: the state carries what was skipped before it, so the
    # resumed run's budget is the uninterrupted run's
    total = make_and_run_skipped(kind, path)
    assert state.get("skipped", 0) + len(again.stats()["skipped"]) == len(total)


def make_and_run_skipped(kind, path):
    loader = make(kind, path, threads=2, on_error="skip")
    epoch(loader)
    return loader.stats()["skipped"]


@pytest.mark.parametrize("kind", KINDS)
def test_dropping_an_iterator_or_closing_the_loader_joins_every_thread(kind, data):
    path = source(kind, data)
    # by thread id, not by count: threads of earlier tests' loaders may still be ending
    before = task_ids()
    # one batch prepared ahead: after the first batch the workers wait for the consumer (with a
    # deeper window they could finish this small epoch, and exit, before the check below)
    loader = make(kind, path, threads=3, prefetch=1)
    it = iter(loader)
    next(it)
    assert task_ids() - before, "the loader's threads run"
    del it
    deadline = time.monotonic() + 10
    while task_ids() - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not task_ids() - before, "a dropped iterator's workers are joined"
    # an epoch read to its end starts the next one ahead; close() joins that run too
    epoch(loader)
    loader.close()
    # a joined thread can still be listed for a moment: the kernel wakes the joiner before it
    # has removed the exited thread from /proc (a thread close() left running stays listed)
    deadline = time.monotonic() + 2
    while task_ids() - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not task_ids() - before, "close() joins every thread it owns, the next epoch's included"


CHILD = """
import os, sys, time, signal
import stokehold
from stokehold.image import RandomHorizontalFlip, RandomResizedCrop
from stokehold.transforms import Lambda
kind, path = sys.argv[1], sys.argv[2]

def make(**kw):
    if kind == "images":
        def slow(x):
            time.sleep(0.02)
            return x
        return stokehold.Loader(path, 8, transforms={"image": [RandomResizedCrop(24), RandomHorizontalFlip()],
                                                     "label": [Lambda(slow)]}, **kw)
    if kind == "tokens-packed":
        return stokehold.SequenceLoader(path, seq_len=16, batch_size=8, **kw)
    return stokehold.SequenceLoader(path, max_len=24, bucket=4, batch_size=8, **kw)
"""

CTRL_C = CHILD + """
tasks = lambda: len(os.listdir("/proc/self/task"))
before = tasks()
loader = make(threads=2)
print("ready", flush=True)
try:
    e = 0
    while True:
        loader.set_epoch(e)
        for batch in loader:
            pass
        e += 1
except KeyboardInterrupt:
    loader.close()
    # a joined thread can still be listed for a moment (see the test above); one that close()
    # left running stays listed
    deadline = time.monotonic() + 0.5
    while tasks() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    print("joined" if tasks() <= before else f"left {tasks() - before} threads", flush=True)
    raise
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_interrupts_with_one_traceback_and_close_joins(kind, data):
    p = subprocess.Popen([sys.executable, "-c", CTRL_C, kind, source(kind, data)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert time.monotonic() - t0 < 2.0
    assert p.returncode != 0 and err.count("Traceback") == 1, err
    assert err.strip().endswith("KeyboardInterrupt"), err
    assert out.strip() == "joined", (out, err)


FORK = CHILD + """
loader = make(threads=2, include_ids=True)
n = len(loader)
it = iter(loader)
next(it)  # running: worker threads exist
idle = make(threads=2)
pid = os.fork()
if pid == 0:
    code = 0
    try:
        next(it)
        code = 10
    except stokehold.StokeholdError as e:
        if "create a new Loader in the child" not in str(e):
            code = 11
    try:
        iter(loader)
        code = 12
    except stokehold.StokeholdError:
        pass
    if sum(1 for _ in make(threads=2)) != n:
        code = 13
    if sum(1 for _ in idle) != n:  # idle at the fork: works in the child
        code = 14
    os._exit(code)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), sum(1 for _ in it) + 1 == n, flush=True)
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", KINDS)
def test_fork_child_gets_a_clear_error_and_a_new_loader_works(kind, data):
    p = subprocess.run([sys.executable, "-c", FORK, kind, source(kind, data)], capture_output=True, text=True,
                       timeout=50)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["0", "True"], (p.stdout, p.stderr)
