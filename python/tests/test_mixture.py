"""stokehold.Mixture: datasets blended by weights that may change, through Loader and
SequenceLoader, from local disk and from a real S3 server (moto): the source column, the shares,
per-source transforms and statistics, exact and elastic resume, a schedule extended past the
position, a changed past refused or reblended."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import stokehold
from stokehold import ConfigError, IncompatibleStateError, Loader, Mixture, SequenceLoader
from stokehold.image import CenterCrop, RandomResizedCrop, Resize

from _loader_helpers import write


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two small JPEG datasets of different sizes (80x60 and 64x48 images)."""
    root = tmp_path_factory.mktemp("mix-img")
    cli = [sys.executable, "-m", "stokehold._cli"]
    out = []
    for name, n, size, seed in (("a", 40, "80x60", "1"), ("b", 12, "64x48", "2")):
        subprocess.run([*cli, "sample-data", root / f"{name}-imgs", "--images", str(n), "--classes", "3", "--size", size, "--seed", seed], check=True, capture_output=True)
        subprocess.run([*cli, "pack", root / f"{name}-imgs", root / name, "--shard-size", "32KiB"], check=True, capture_output=True)
        out.append(str(root / name))
    return out


def records(tmp_path, sizes):
    return [str(write(tmp_path / f"r{i}", n).path) for i, n in enumerate(sizes)]


def run(loader, steps=None):
    out = []
    for b in loader:
        out.append({k: (v.copy() if isinstance(v, np.ndarray) else list(v)) for k, v in b.items()})
        if steps is not None and len(out) == steps:
            break
    return out


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], np.ndarray):
                np.testing.assert_array_equal(x[k], y[k], err_msg=k)
            else:
                assert len(x[k]) == len(y[k]), k
                for u, v in zip(x[k], y[k]):
                    assert np.array_equal(u, v) if isinstance(u, np.ndarray) else u == v, k


def test_a_two_source_image_mixture_tags_each_sample_and_keeps_the_shares(images):
    mix = Mixture({"big": images[0], "small": images[1]}, weights={"big": 0.75, "small": 0.25})
    t = [RandomResizedCrop(32)]
    loader = Loader(mix, 8, seed=3, transforms={"image": t}, threads=2, include_ids=True)
    epoch = run(loader)
    assert len(epoch) == 52 // 8
    counts = np.zeros(2)
    g = 0
    for b in epoch:
        assert b["image"].shape == (8, 3, 32, 32)
        assert b["source"].dtype == np.int64
        for s in b["source"]:
            counts[s] += 1
            g += 1
            assert np.all(np.abs(counts - np.array([0.75, 0.25]) * g) < 1.0 + 1e-9), (counts, g)
    # the same on one thread; the next epoch differs
    same(run(Loader(mix, 8, seed=3, transforms={"image": t}, threads=1, include_ids=True)), epoch)
    assert not np.array_equal(run(loader)[0]["source"].tolist() + run(loader)[0]["id"].tolist(), epoch[0]["source"].tolist() + epoch[0]["id"].tolist())
    s = loader.stats()["sources"]
    assert list(s) == ["big", "small"]
    assert s["small"]["index"] == 1 and s["small"]["weight"] == pytest.approx(0.25, abs=1e-6)
    assert s["big"]["samples"] + s["small"]["samples"] == loader.stats()["samples"]
    assert s["small"]["bytes"] > 0 and s["small"]["passes"] > 1.0
    assert "small" in loader.report()


def test_each_source_may_bring_its_own_transforms_and_disagreeing_fields_are_named(images, tmp_path):
    # the small source's images are center-cropped, the big one's random-resized: both 24x24
    mix = Mixture([images[0], images[1]], [1, 1], transforms={"1": {"image": [Resize(28), CenterCrop(24)]}})
    loader = Loader(mix, 4, transforms={"image": [RandomResizedCrop(24)]}, threads=2)
    b = next(iter(loader))
    assert b["image"].shape == (4, 3, 24, 24)
    # without: the shapes differ (24 vs 20), and the error names both sources and the field
    mix = Mixture({"a": images[0], "b": images[1]}, transforms={"b": {"image": [Resize(28), CenterCrop(20)]}})
    with pytest.raises(ConfigError, match=r"'b'.*'image'.*'a'|'image'.*'b'"):
        Loader(mix, 4, transforms={"image": [RandomResizedCrop(24)]})
    # a source without the loader's field
    other = records(tmp_path, [10])[0]
    with pytest.raises(ConfigError, match="'other' has no field 'image'|'other'.*image"):
        Loader(Mixture({"imgs": images[0], "other": other}), 4)
    with pytest.raises(ConfigError, match="'c' is not a source"):
        Loader(Mixture({"a": images[0], "b": images[1]}, {"a": 1, "c": 1}), 4)
    with pytest.raises(ConfigError, match="must not all be 0"):
        Loader(Mixture({"a": images[0], "b": images[1]}, [0, 0]), 4)


def test_resume_is_exact_on_another_number_of_ranks_and_after_a_schedule_change(tmp_path):
    paths = records(tmp_path, [30, 7, 50])
    sched = [(0, [0.5, 0.2, 0.3]), (4, [0.0, 1.0, 0.0]), (7, [1, 1, 1])]

    def loader(rank=0, world=1, threads=2, schedule=sched):
        return Loader(Mixture(paths, schedule=schedule), 4, seed=9, rank=rank, world_size=world, threads=threads, drop_last=False, include_ids=True)

    full = run(loader())
    assert all(set(b["source"].tolist()) == {1} for b in full[4:7])
    for k in (2, 4, 5, 8):
        a = loader()
        same(run(a, k), full[:k])
        state = json.loads(json.dumps(a.state_dict()))
        assert state["mixture"]["sources"] == ["0", "1", "2"]
        b = loader(threads=1)
        b.load_state_dict(state)
        same(run(b), full[k:])
    # 2 ranks for 3 steps, then 3 ranks from rank 0's state: exactly the ids of one rank's epoch
    reference = sorted(i for b in full for i, p in zip(b["id"], b["is_padding"]) if not p)
    got = []
    for rank in range(2):
        l2 = loader(rank, 2)
        for b in run(l2, 3):
            got += [i for i, p in zip(b["id"], b["is_padding"]) if not p]
        if rank == 0:
            state = l2.state_dict()
    for rank in range(3):
        l3 = loader(rank, 3)
        l3.load_state_dict(state)
        for b in run(l3):
            got += [i for i, p in zip(b["id"], b["is_padding"]) if not p]
    # the schedule is in steps of batch_size x world_size: on 2 ranks a step is 8 samples, so
    # compare with the one-rank run of the same schedule in samples
    one = Loader(Mixture(paths, schedule=[(0, sched[0][1]), (32, sched[1][1]), (56, sched[2][1])], schedule_unit="samples"),
                 4, seed=9, drop_last=False, include_ids=True)
    assert sorted(got) == sorted(i for b in run(one) for i, p in zip(b["id"], b["is_padding"]) if not p)
    assert reference  # (the one-rank, steps-of-4 run differs in where its switches fall)


def test_a_schedule_extended_later_continues_exactly_and_a_changed_past_is_refused_or_reblended(tmp_path):
    paths = records(tmp_path, [20, 20])
    extended = [(0, [1, 1]), (6, [0, 1])]
    uninterrupted = run(Loader(Mixture(paths, schedule=extended), 2, seed=1))
    a = Loader(Mixture(paths, [1, 1]), 2, seed=1)
    head = run(a, 4)
    same(head, uninterrupted[:4])
    state = a.state_dict()
    b = Loader(Mixture(paths, schedule=extended), 2, seed=1)
    b.load_state_dict(state)
    same(run(b), uninterrupted[4:])
    # a change at step 2, before the state's step 4
    past = [(0, [1, 1]), (2, [1, 0])]
    c = Loader(Mixture(paths, schedule=past), 2, seed=1)
    with pytest.raises(IncompatibleStateError, match="reblend") as e:
        c.load_state_dict(state)
    assert e.value.field == "mixture"
    d = Loader(Mixture(paths, schedule=past, on_change="reblend"), 2, seed=1)
    d.load_state_dict(state)
    rest = run(d)
    assert all(set(x["source"].tolist()) == {0} for x in rest)
    assert d.state_dict()["mixture"]["origin"] == 8
    # a one-dataset state into a mixture, and back
    one = Loader(paths[0], 2)
    with pytest.raises(IncompatibleStateError):
        one.load_state_dict(state)
    with pytest.raises(IncompatibleStateError):
        Loader(Mixture(paths), 2).load_state_dict(one.state_dict())


def test_a_mixture_pickles_with_its_loader_and_continues(tmp_path):
    import pickle

    paths = records(tmp_path, [15, 9])
    a = Loader(Mixture({"x": paths[0], "y": paths[1]}, [2, 1]), 3, seed=4)
    full = run(Loader(Mixture({"x": paths[0], "y": paths[1]}, [2, 1]), 3, seed=4))
    run(a, 2)
    b = pickle.loads(pickle.dumps(a))
    same(run(b), full[2:])
    assert "x=" in repr(b)


@pytest.fixture(scope="module")
def token_sets(tmp_path_factory):
    pytest.importorskip("tokenizers")
    from test_text import make_docs, train

    from stokehold._native import run_cli

    root = tmp_path_factory.mktemp("mix-tok")
    docs = make_docs(200)
    train(docs, root / "tokenizer.json")
    out = []
    for name, part in (("web", docs[:150]), ("code", docs[150:])):
        with open(root / f"{name}.jsonl", "w") as f:
            for d in part:
                f.write(json.dumps({"text": d}) + "\n")
        assert run_cli(["stokehold", "pack", str(root / f"{name}.jsonl"), str(root / name), "--from", "jsonl", "--text-field", "text",
                        "--tokenizer", str(root / "tokenizer.json"), "--shard-size", "16KiB"]) == 0
        out.append(str(root / name))
    return out


def test_token_windows_mix_and_resume_exactly(token_sets):
    mix = lambda: Mixture({"web": token_sets[0], "code": token_sets[1]}, {"web": 0.6, "code": 0.4})  # noqa: E731
    full = run(SequenceLoader(mix(), seq_len=32, batch_size=4, seed=2, threads=2))
    assert full[0]["input_ids"].shape == (4, 32) and full[0]["source"].shape == (4,)
    a = SequenceLoader(mix(), seq_len=32, batch_size=4, seed=2)
    run(a, 3)
    b = SequenceLoader(mix(), seq_len=32, batch_size=4, seed=2, threads=1)
    b.load_state_dict(a.state_dict())
    same(run(b), full[3:])
    assert b.total_tokens == sum(SequenceLoader(t, seq_len=32, batch_size=1).total_tokens for t in token_sets)
    with pytest.raises(ConfigError, match="bucket"):
        SequenceLoader(mix(), max_len=64, bucket=4)


def test_a_mixture_from_object_storage_gives_what_the_local_sources_give(tmp_path, images, token_sets):
    from conftest import moto_s3

    paths = records(tmp_path, [25, 6])
    with moto_s3("k", "s", bucket="mix") as (endpoint, client):
        for i, p in enumerate(paths + images + token_sets):
            for f in sorted(os.listdir(p)):
                client.upload_file(os.path.join(p, f), "mix", f"r{i}/{f}")
        opts = {"key": "k", "secret": "s", "region_name": "us-east-1", "endpoint_url": endpoint, "allow_http": "true"}
        remote = [stokehold.Dataset(f"s3://mix/r{i}", storage_options=opts) for i in range(2)]
        loader = Loader(Mixture({"a": remote[0], "b": remote[1]}, [3, 1]), 4, seed=5, threads=2)
        got = run(loader)
        stats_storage = loader.stats()["storage"]
        # images and token windows from the same server
        ds = lambda i: stokehold.Dataset(f"s3://mix/r{i}", storage_options=opts)  # noqa: E731
        t = [RandomResizedCrop(24)]
        got_images = run(Loader(Mixture([ds(2), ds(3)], [2, 1]), 4, seed=6, transforms={"image": t}, threads=2))
        got_tokens = run(SequenceLoader(Mixture([ds(4), ds(5)], [1, 1]), seq_len=16, batch_size=4, seed=7, threads=2))
    same(got_images, run(Loader(Mixture(images, [2, 1]), 4, seed=6, transforms={"image": t}, threads=1)))
    same(got_tokens, run(SequenceLoader(Mixture(token_sets, [1, 1]), seq_len=16, batch_size=4, seed=7)))
    assert any(1 in b["source"] for b in got_images) and any(1 in b["source"] for b in got_tokens)
    local = run(Loader(Mixture({"a": paths[0], "b": paths[1]}, [3, 1]), 4, seed=5))
    same(got, local)
    assert stats_storage is not None and stats_storage["requests"] > 0


def test_a_source_budget_and_the_schedule_show_in_the_loader_config(tmp_path):
    paths = records(tmp_path, [10, 10])
    mix = Mixture({"a": paths[0], "b": paths[1]}, schedule=[(0, [1, 0]), (3, {"a": 0, "b": 1})], max_skip_fraction={"b": 0.01})
    cfg = Loader(mix, 2, on_error="skip").config["mixture"]
    assert [s["name"] for s in cfg["sources"]] == ["a", "b"]
    assert cfg["sources"][1]["max_skip_fraction"] == 0.01 and "max_skip_fraction" not in cfg["sources"][0]
    assert cfg["schedule"] == [{"at": 0, "weights": [1, 0]}, {"at": 3, "weights": {"a": 0, "b": 1}}]
    with pytest.raises(ConfigError, match="max_skip_fraction"):
        Loader(Mixture({"a": paths[0]}, max_skip_fraction={"a": 2}), 2)
    with pytest.raises(ConfigError, match="steps must increase"):
        Loader(Mixture({"a": paths[0], "b": paths[1]}, schedule=[(0, [1, 1]), (5, [1, 0]), (5, [0, 1])]), 2)


def test_each_source_is_read_in_the_loaders_order_shard_block_included(tmp_path):
    paths = records(tmp_path, [40, 7])
    for shuffle in ("shard_block", False):
        loader = Loader(Mixture({"a": paths[0], "b": paths[1]}, [1, 1]), 4, shuffle=shuffle, seed=2, include_ids=True)
        xs = [x for b in run(loader) for x, s in zip(b["x"], b["source"]) if s == 1]
        # the small source's passes are each a permutation of its 7 records
        for k in range(0, len(xs) - 6, 7):
            assert sorted(xs[k:k + 7]) == sorted(float(i) * 0.5 for i in range(7))
        if shuffle is False:
            assert xs[:7] == [float(i) * 0.5 for i in range(7)]  # in stored order, pass after pass


def test_a_source_left_out_of_weights_is_refused_and_weights_that_are_not_numbers_are_named(tmp_path):
    paths = records(tmp_path, [10, 10, 10])
    srcs = {"web": paths[0], "code": paths[1], "books": paths[2]}
    # left out: refused (it would silently weigh 0 yet count in the epoch); an explicit 0 is fine
    with pytest.raises(ConfigError, match="weights: no weight for 'books'.*'books': 0"):
        Loader(Mixture(srcs, {"web": 0.7, "code": 0.3}), 2)
    with pytest.raises(ConfigError, match="schedule's weights at 3: no weight for 'code', 'books'"):
        Loader(Mixture(srcs, [1, 1, 1], schedule=[(3, {"web": 1})]), 2)
    loader = Loader(Mixture(srcs, {"web": 0.7, "code": 0.3, "books": 0}), 2, seed=1)
    assert 2 not in {int(s) for b in run(loader) for s in b["source"]}
    # NaN, infinities, strings, bools: named with the entry and the source, not serde's text
    for bad in (float("nan"), float("inf"), "0.5", True, -1):
        with pytest.raises(ConfigError) as e:
            Mixture(srcs, {"web": 1, "code": bad, "books": 0})
        msg = str(e.value)
        assert msg.startswith("weights: the weight of 'code' must be a") and repr(bad) in msg, msg
        assert "line 1 column" not in msg and "schedule[0]" not in msg, msg
        with pytest.raises(ConfigError, match=r"schedule at 5: weight 1 must be a"):
            Mixture(srcs, [1, 1, 1], schedule=[(5, [1, bad, 0])])
    # numpy numbers are numbers
    mix = Mixture(srcs, {"web": np.float32(0.5), "code": np.int64(1), "books": 0})
    assert len(Loader(mix, 2)) > 0

