"""Operating at scale: which samples a step held (samples_at, computed from the order alone) and
how long each step waited for its batch (stats()["waits"], on_step, stokehold.torch.wait_report)."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from stokehold import ConfigError, Loader, Mixture, SequenceLoader

from _loader_helpers import write


def delivered(loader, n=None):
    """The ids of the batches the loader delivers (the first n, or the rest of the epoch)."""
    out = []
    for b in loader:
        out.append(np.asarray(b["id"]).copy())
        if n is not None and len(out) == n:
            break
    return out


def test_samples_at_is_each_steps_batch_id_on_every_rank_with_a_padded_tail(tmp_path):
    ds = write(tmp_path / "ds", 203, shard_size=3000)
    for world in (1, 3):
        for rank in range(world):
            kw = dict(seed=4, rank=rank, world_size=world, drop_last=False, include_ids=True, threads=2)
            loader = Loader(ds, 8, **kw)
            got = delivered(loader)
            # after the epoch, the loader is in epoch 1: ask for epoch 0 by name
            for step, ids in enumerate(got):
                np.testing.assert_array_equal(loader.samples_at(step, epoch=0), ids)
            other = Loader(ds, 8, **dict(kw, rank=0))
            np.testing.assert_array_equal(other.samples_at(len(got) - 1, rank=rank), got[-1])
            with pytest.raises(ConfigError, match="past the end"):
                loader.samples_at(len(got), epoch=0)
            with pytest.raises(ConfigError, match="out of range"):
                loader.samples_at(0, rank=world)


def test_samples_at_counts_steps_across_resumes_on_other_world_sizes(tmp_path):
    ds = write(tmp_path / "ds", 300, shard_size=4000)
    kw = dict(seed=11, drop_last=True, include_ids=True, threads=2)
    one = Loader(ds, 6, rank=0, world_size=1, **kw)
    head = delivered(one, 7)  # steps 0..6 on one rank
    state = json.loads(json.dumps(one.state_dict()))
    # steps 7.. on three ranks of 4: where the state left off
    ranks = [Loader(ds, 4, rank=r, world_size=3, **kw) for r in range(3)]
    for r in ranks:
        r.load_state_dict(state)
    parts = [delivered(r, 5) for r in ranks]
    mid = ranks[1].state_dict()
    assert mid["runs"] == [[0, 0, 1, 6], [7, 42, 3, 4]]
    # and steps 12.. on two ranks of 6
    two = [Loader(ds, 6, rank=r, world_size=2, **kw) for r in range(2)]
    for t in two:
        t.load_state_dict(mid)
    tail = [delivered(t, 3) for t in two]
    probe = two[0]
    for step, ids in enumerate(head):
        np.testing.assert_array_equal(probe.samples_at(step, rank=0), ids)
    for r in range(3):
        for k, ids in enumerate(parts[r]):
            np.testing.assert_array_equal(probe.samples_at(7 + k, rank=r), ids)
    for r in range(2):
        for k, ids in enumerate(tail[r]):
            np.testing.assert_array_equal(two[1].samples_at(12 + k, rank=r), ids)
    # rank 2 existed at steps 7..11 only
    with pytest.raises(ConfigError, match="out of range"):
        probe.samples_at(12, rank=2)
    # nothing repeated, nothing lost across the three runs
    seen = np.concatenate(head + [x for p in parts for x in p] + [x for t in tail for x in t])
    assert len(set(seen.tolist())) == len(seen) == 42 + 60 + 36


def test_samples_at_of_a_mixture_names_each_sample_source_shard_and_record(tmp_path):
    a = write(tmp_path / "a", 120, shard_size=2000)
    b = write(tmp_path / "b", 40, shard_size=2000)
    mix = lambda: Mixture({"a": a, "b": b}, weights={"a": 0.7, "b": 0.3})
    loader = Loader(mix(), 5, seed=3, include_ids=True, threads=2, drop_last=False)
    got = delivered(loader, 9)
    state = loader.state_dict()
    resumed = Loader(mix(), 5, seed=3, include_ids=True, threads=2, drop_last=False)
    resumed.load_state_dict(state)
    more = delivered(resumed, 4)
    for step, ids in enumerate(got + more):
        np.testing.assert_array_equal(resumed.samples_at(step), ids)
    details = resumed.samples_at(3, details=True)
    assert [d["id"] for d in details] == got[3].tolist()
    for d in details:
        src = a if d["source_name"] == "a" else b
        assert d["source"] == (0 if d["source_name"] == "a" else 1)
        assert d["id"] == d["index"] + (0 if d["source"] == 0 else 120)
        # the record the details name is the sample: its stored name says its index
        assert src[d["index"]]["name"] == f"sample-{d['index']:05d}"
        assert d["record"] <= d["index"] and d["file"].endswith(".skh") and d["in_place"] is False
        assert isinstance(d["offset"], int) and d["offset"] > 0


def test_samples_at_of_sequence_windows_after_a_resume(tmp_path):
    pytest.importorskip("tokenizers")
    from test_text import make_docs, train
    from stokehold._native import run_cli

    docs = make_docs(200)
    train(docs, tmp_path / "tok.json")
    with open(tmp_path / "c.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    assert run_cli(["stokehold", "pack", str(tmp_path / "c.jsonl"), str(tmp_path / "t"), "--from", "jsonl",
                    "--text-field", "text", "--tokenizer", str(tmp_path / "tok.json"), "--threads", "2"]) == 0
    kw = dict(seq_len=16, batch_size=3, seed=2, include_ids=True, threads=2)
    first = SequenceLoader(tmp_path / "t", rank=0, world_size=1, **kw)
    head = delivered(first, 5)
    rest = SequenceLoader(tmp_path / "t", rank=1, world_size=2, **kw)
    rest.load_state_dict(first.state_dict())
    tail = delivered(rest, 4)
    for step, ids in enumerate(head):
        np.testing.assert_array_equal(rest.samples_at(step, rank=0), ids)
    for k, ids in enumerate(tail):
        np.testing.assert_array_equal(rest.samples_at(5 + k), ids)
    d = rest.samples_at(5, details=True)[0]
    assert d["token"] == d["id"] * 16 and d["tokens"] == 17 and d["document"] >= 0


def test_each_step_records_its_wait_and_on_step_gets_it_as_a_plain_dict(tmp_path):
    ds = write(tmp_path / "ds", 64)
    seen = []
    loader = Loader(ds, 8, seed=1, threads=2, on_step=seen.append, rank=1, world_size=2)
    n = len(delivered_plain(loader))
    assert [s["step"] for s in seen] == list(range(n))
    assert all(set(s) == {"epoch", "step", "rank", "wait", "step_time", "bound"} for s in seen)
    assert all(s["rank"] == 1 and s["epoch"] == 0 and s["wait"] >= 0 for s in seen)
    json.dumps(seen)  # plain data
    waits = loader.stats()["waits"]
    assert waits["step"] == list(range(n)) and waits["wait"] == [s["wait"] for s in seen]
    with pytest.raises(ConfigError, match="on_step"):
        list(Loader(ds, 8, on_step="print"))


def delivered_plain(loader):
    return [b for b in loader]


@pytest.mark.skipif(sys.platform != "linux", reason="gloo over localhost")
def test_wait_report_names_the_slow_rank_over_a_gloo_group(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed  # noqa: F401

    write(tmp_path / "ds", 96)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, sys, time
        import torch.distributed as dist
        import stokehold, stokehold.torch
        from stokehold.transforms import Lambda

        def slow(x):
            time.sleep(0.05)  # far above any other stage, even on a loaded machine
            return x

        rank = int(sys.argv[1])
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=rank, world_size=2)
        transforms = {{"x": [Lambda(slow)]}} if rank == 1 else None
        loader = stokehold.Loader({str(tmp_path / 'ds')!r}, 4, threads=1, prefetch=1, transforms=transforms)
        for b in loader:
            time.sleep(0.002)
        report = stokehold.torch.wait_report(loader)
        print(json.dumps(dict(line=str(report), slowest=report.slowest_rank, stage=report.stage, share=report.share)))
        dist.destroy_process_group()
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, str(script), str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    # every rank gets the same report, naming rank 1 and its Python stage
    assert reports[0] == reports[1]
    r = reports[0]
    assert r["slowest"] == 1 and "rank 1" in r["line"]
    assert r["stage"] is not None and "slow" in r["stage"], r
    assert r["share"] > 0.5


def test_stokehold_explain_lists_a_steps_samples_on_each_rank_from_a_saved_state(tmp_path):
    ds = write(tmp_path / "ds", 120, shard_size=2500)
    kw = dict(seed=6, include_ids=True, threads=2)
    first = Loader(ds, 5, rank=0, world_size=1, **kw)
    head = delivered(first, 3)
    ranks = [Loader(ds, 4, rank=r, world_size=2, **kw) for r in range(2)]
    for r in ranks:
        r.load_state_dict(first.state_dict())
    parts = [delivered(r, 2) for r in ranks]
    (tmp_path / "state.json").write_text(json.dumps(ranks[0].state_dict()))
    (tmp_path / "config.json").write_text(json.dumps(ranks[0].config))

    def explain(*args):
        cmd = [sys.executable, "-m", "stokehold._cli", "explain", str(tmp_path / "ds"), "--config",
               str(tmp_path / "config.json"), "--state", str(tmp_path / "state.json"), "--json", *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return [json.loads(line) for line in out.stdout.splitlines()]

    rows = explain("--step", "4")  # the second step on two ranks: both ranks listed
    for r in range(2):
        mine = [x for x in rows if x["rank"] == r]
        assert [x["id"] for x in mine] == parts[r][1].tolist()
        assert all(x["step"] == 4 and x["record"] >= 0 and x["shard"] >= 0 for x in mine)
    rows = explain("--step", "1", "--rank", "0")  # before the resume: one rank of 5
    assert [x["id"] for x in rows] == head[1].tolist()


def test_four_processes_stay_inside_one_node_memory_budget_and_a_dead_ones_share_returns(tmp_path):
    ds = write(tmp_path / "ds", 256)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), STOKEHOLD_NODE_BUDGET_DIR=str(tmp_path / "node"))
    env.pop("STOKEHOLD_NODE_MEMORY_BUDGET", None)
    holder = textwrap.dedent(f"""
        import sys, time, stokehold
        try:
            loader = stokehold.Loader({str(tmp_path / 'ds')!r}, 16, memory_budget=sys.argv[1], threads=1)
        except stokehold.ConfigError as e:
            print("refused", e, flush=True)
            sys.exit(0)
        sum(1 for _ in loader)  # it runs within its share
        print(loader.stats()["memory_budget"], flush=True)
        sys.stdin.read()  # hold the share until told to go
    """)

    def start(budget):
        p = subprocess.Popen([sys.executable, "-c", holder, budget], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, text=True)
        return p, p.stdout.readline().strip()

    # what one loader takes from a budget large enough: its deepest window's bytes
    probe, line = start("node:1TiB")
    want = int(line)
    probe.stdin.close()
    probe.wait(timeout=60)
    total = want * 5 // 2
    procs, grants = [], []
    for _ in range(3):
        p, line = start(f"node:{total}")
        procs.append(p)
        grants.append(int(line))
    assert grants == [want, want, total - 2 * want]
    p4, line = start(f"node:{total}")
    assert line.startswith("refused") and "node memory budget" in line and "less than one batch" in line
    p4.wait(timeout=60)
    procs[1].kill()  # dies holding its share: the lease is released with the process
    procs[1].wait(timeout=60)
    p5, line = start(f"node:{total}")
    assert int(line) == want
    for p in procs[::2] + [p5]:
        p.stdin.close()
        p.wait(timeout=60)


def test_a_node_budget_without_a_size_is_refused(tmp_path):
    ds = write(tmp_path / "ds", 32)
    with pytest.raises(ConfigError, match="needs a size"):
        Loader(ds, 8, memory_budget="node:")


def test_a_state_whose_runs_do_not_follow_each_other_is_refused_naming_runs(tmp_path):
    from stokehold import IncompatibleStateError

    ds = write(tmp_path / "ds", 100)
    loader = Loader(ds, 4, seed=1, threads=1)
    delivered_plain_n(loader, 3)
    state = loader.state_dict()
    assert state["runs"] == [[0, 0, 1, 4]] and state["position"] == 12
    for runs in ([[0, 0, 0, 4]], [[0, 0, 1, 4], [0, 8, 2, 4]], [[0, 0, 1, 4], [5, 40, 1, 4]], "x"):
        with pytest.raises(IncompatibleStateError) as e:
            Loader(ds, 4, seed=1).load_state_dict(dict(state, runs=runs))
        assert e.value.field == "runs", runs
    # a state saved before runs existed: its steps counted in the resuming loader's shape
    old = {k: v for k, v in state.items() if k != "runs"}
    again = Loader(ds, 4, seed=1, include_ids=True, threads=1)
    again.load_state_dict(old)
    got = np.asarray(next(iter(again))["id"])
    np.testing.assert_array_equal(again.samples_at(3), got)


def delivered_plain_n(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_on_step_reports_every_packed_batch_and_its_errors_propagate(tmp_path):
    """Conversations packed whole go through the same native hook (it was once skipped there)."""
    pytest.importorskip("tokenizers")
    import test_sft
    from stokehold.text import ChatTemplate

    root = tmp_path / "model"
    root.mkdir()
    tok = test_sft.train_tokenizer(root, "bytelevel")
    tmpl = ChatTemplate(test_sft.model_dir(root, tok, "chatml", test_sft.CHATML))
    ds = test_sft.write(tmp_path / "ds", test_sft.make_convs(30, seed=3))
    seen = []
    ld = SequenceLoader(ds, seq_len=64, batch_size=2, text=tmpl, packing="whole", on_step=seen.append, rank=0, world_size=1)
    n = len(list(ld))
    assert n > 1 and [s["step"] for s in seen] == list(range(n)) and {s["rank"] for s in seen} == {0}

    def boom(_):
        raise RuntimeError("the user's logger failed")

    with pytest.raises(RuntimeError, match="logger failed"):
        list(Loader(write(tmp_path / "plain", 16), 4, on_step=boom))


def test_the_ram_caches_keep_within_what_the_node_budget_leaves(tmp_path, monkeypatch):
    """Two loaders of one process with RAM caches under one node budget: the first caches its
    whole dataset, the second only what is left, and the leases never pass the budget."""
    monkeypatch.setenv("STOKEHOLD_NODE_BUDGET_DIR", str(tmp_path / "node"))
    monkeypatch.delenv("STOKEHOLD_NODE_MEMORY_BUDGET", raising=False)
    a, b = write(tmp_path / "a", 512, shard_size=4096), write(tmp_path / "b", 512, shard_size=4096)
    size = sum(f.stat().st_size for f in (tmp_path / "a").glob("*.skh"))
    assert size > 8 * 4096
    probe = Loader(a, 16, memory_budget="node:1TiB", threads=1)
    window = probe.stats()["memory_budget"]
    probe.close()
    del probe
    total = 2 * window + size + size // 2

    def leased():
        return sum(int(f.read_text()) for f in (tmp_path / "node" / "memory").glob("lease-*"))

    kept = []
    loaders = []
    for ds in (a, b):
        ld = Loader(ds, 16, memory_budget=f"node:{total}", cache=10 * size, threads=1)
        seen = []
        while len(seen) < 3 or seen[-1] != seen[-3]:  # epochs until the background loads settle
            sum(1 for _ in ld)
            time.sleep(0.05)
            seen.append(ld.stats()["caches"]["records"]["bytes"])
            assert len(seen) < 200, seen
        kept.append(seen[-1])
        loaders.append(ld)
        assert leased() <= total
    assert kept[0] == size  # everything fitted
    assert 0 < kept[1] < size  # only what the first left
    assert kept[1] <= total - 2 * window - size
