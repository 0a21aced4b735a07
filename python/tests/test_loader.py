"""stokehold.Loader: zero-copy batches, order, determinism, resume, errors, signals, fork."""

import gc
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import stokehold
from stokehold import (
    ConfigError,
    CorruptDataError,
    IncompatibleStateError,
    Loader,
    SampleError,
    StokeholdError,
)
from stokehold.transforms import Lambda

sys.path.insert(0, os.path.dirname(__file__))
from _loader_helpers import plus_noise, sample, upper, write  # noqa: E402

N = 1000
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write(tmp_path_factory.mktemp("loader") / "ds", N)


def run_child(code: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env, **kw
    )


# --- batches ---------------------------------------------------------------------------------


def test_fixed_columns_are_zero_copy_views_of_the_batch_buffer(ds):
    loader = Loader(ds, 64, threads=2)
    it = iter(loader)
    batch = next(it)
    label = batch["label"]
    assert isinstance(label, np.ndarray) and label.dtype == np.int64 and label.shape == (64,)
    owner = label.base
    # the array's memory is the Rust buffer itself, not a copy of it
    assert type(owner).__name__ == "_BatchBuffer"
    assert not label.flags.owndata
    assert label.ctypes.data == owner.address and label.nbytes == owner.nbytes
    view = label[10:20]
    assert np.shares_memory(view, label)
    expected = label.copy()
    # the buffer outlives the iterator and the loader
    del it, loader, batch
    gc.collect()
    assert (label == expected).all()
    label[0] = 12345  # writable, as a batch should be
    assert view.base is label or np.shares_memory(view, label)


def test_buffers_are_recycled_once_python_drops_them(ds):
    loader = Loader(ds, 50, threads=2, prefetch=2)
    addresses = set()
    batches = 0
    for batch in loader:
        addresses.add(batch["x"].base.address)
        batches += 1
        del batch
    # at most prefetch + a few batches' buffers exist at once; the rest are reused
    assert batches == N // 50
    assert len(addresses) < batches


def test_values_match_the_dataset_for_every_id(ds):
    loader = Loader(ds, 100, threads=2, include_ids=True, seed=3)
    seen = 0
    for batch in loader:
        assert set(batch) == {"x", "label", "blob", "img", "name", "id", "is_padding"}
        assert batch["x"].dtype == np.float64 and isinstance(batch["blob"], list)
        for k, i in enumerate(batch["id"].tolist()):
            want = ds[i]
            assert batch["x"][k] == want["x"]
            assert batch["label"][k] == want["label"]
            assert batch["blob"][k] == want["blob"]
            assert batch["name"][k] == want["name"]
            assert np.array_equal(batch["img"][k], want["img"]) and batch["img"][k].dtype == np.uint8
            seen += 1
    assert seen == N


def test_every_sample_once_per_epoch_and_a_new_order_each_epoch(ds):
    loader = Loader(ds, 100, include_ids=True, seed=9)
    assert len(loader) == N // 100
    orders = []
    for epoch in range(2):
        assert loader.epoch == epoch
        ids = np.concatenate([b["id"] for b in loader])
        assert sorted(ids.tolist()) == list(range(N))
        orders.append(ids.tolist())
    assert orders[0] != orders[1]
    assert loader.epoch == 2
    loader.set_epoch(0)
    assert np.concatenate([b["id"] for b in loader]).tolist() == orders[0]


def test_sequential_order_and_shard_block(ds):
    seq = Loader(ds, 100, shuffle=False, include_ids=True)
    assert np.concatenate([b["id"] for b in seq]).tolist() == list(range(N))
    blocks = Loader(ds, 100, shuffle="shard_block", shuffle_window=2, include_ids=True)
    ids = np.concatenate([b["id"] for b in blocks]).tolist()
    assert sorted(ids) == list(range(N)) and ids != list(range(N))


def test_padding_and_ids_without_drop_last(ds):
    loader = Loader(ds, 64, drop_last=False, include_ids=True)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-N // 64)
    pad = np.concatenate([b["is_padding"] for b in batches])
    ids = np.concatenate([b["id"] for b in batches])
    assert pad.dtype == np.bool_ and ids.dtype == np.int64
    assert pad.sum() == 64 * len(batches) - N
    assert sorted(ids[~pad].tolist()) == list(range(N))
    assert not pad[:-64].any()  # padding only in the last batch


@pytest.mark.parametrize("rank_env", [("1", "3")])
def test_rank_from_environment(ds, monkeypatch, rank_env):
    monkeypatch.setenv("RANK", rank_env[0])
    monkeypatch.setenv("WORLD_SIZE", rank_env[1])
    loader = Loader(ds, 10, include_ids=True)
    assert (loader.rank, loader.world_size) == (1, 3)
    assert len(loader) == N // 30
    all_ids = []
    for r in range(3):
        all_ids += np.concatenate([b["id"] for b in Loader(ds, 10, rank=r, world_size=3, include_ids=True)]).tolist()
    assert len(set(all_ids)) == len(all_ids) == 30 * (N // 30)


def test_same_output_for_any_thread_count(ds):
    def run(threads):
        loader = Loader(
            ds,
            50,
            threads=threads,
            prefetch=3,
            seed=5,
            include_ids=True,
            transforms={"x": [Lambda(plus_noise, rng="numpy")], "name": [Lambda(upper)]},
        )
        return [(b["id"].tolist(), b["label"].tolist(), b["x"], b["name"]) for b in loader]

    one = run(1)
    assert run(2) == one
    assert run(4) == one
    # the Lambda saw the stored value and the sample's own generator
    ids, _, xs, names = one[0]
    assert all(sample(i)["x"] <= x < sample(i)["x"] + 1 for i, x in zip(ids, xs))
    assert names == [sample(i)["name"].upper() for i in ids]


# --- Python stages -----------------------------------------------------------------------------


def test_lambda_stage_values_seed_mode_and_stats(ds):
    seen_types = set()

    def double(a):
        seen_types.add(type(a))
        return (a.astype(np.int32) * 2).astype(np.int32)

    loader = Loader(
        ds,
        100,
        shuffle=False,
        threads=2,
        transforms={"img": [double, Lambda(lambda a, seed: a + np.int32(seed % 2), rng="seed", name="plus_bit")]},
    )
    batch = next(iter(loader))
    for i, a in enumerate(batch["img"]):
        base = (sample(i)["img"].astype(np.int32)) * 2
        assert a.dtype == np.int32 and a.shape == (4, 4)
        assert (a - base).min() == (a - base).max() and (a - base).max() in (0, 1)
    assert seen_types == {np.ndarray}
    names = [s["name"] for s in loader.stats()["stages"]]
    assert "img/double" in names and "img/plus_bit" in names


def test_lambda_failure_names_the_sample(ds):
    def boom(x):
        if x == 21.0:
            raise ValueError("no 42 please")
        return x

    loader = Loader(ds, 100, shuffle=False, transforms={"x": [Lambda(boom)]})
    with pytest.raises(SampleError) as e:
        list(loader)
    assert e.value.sample_id == 42
    assert "no 42 please" in str(e.value) and "ValueError" in str(e.value)
    assert isinstance(e.value, StokeholdError)
    # the stage's own exception is kept, as the cause
    assert isinstance(e.value.__cause__, ValueError) and str(e.value.__cause__) == "no 42 please"
    # skipped under the skip policy
    skipping = Loader(ds, 100, shuffle=False, on_error="skip", include_ids=True, transforms={"x": [boom]})
    batches = list(skipping)
    assert skipping.stats()["skipped"] == [42]
    assert len(batches) == 10
    assert batches[0]["is_padding"][42] and batches[0]["id"][42] != 42


def test_bad_return_value_and_bad_stage(ds):
    loader = Loader(ds, 100, transforms={"x": [Lambda(lambda x: object())]})
    with pytest.raises(SampleError, match="must return"):
        next(iter(loader))
    with pytest.raises(TypeError, match="transform stage"):
        Loader(ds, 100, transforms={"x": [42]})


def test_unknown_spec_stage_gives_the_planners_error(ds):
    class Future:
        def _spec(self):
            return {"name": "random_wobble", "params": {"amount": 3}}

    with pytest.raises(ConfigError, match="random_wobble") as e:
        Loader(ds, 10, transforms={"img": [Future()]})
    assert isinstance(e.value, ValueError)
    with pytest.raises(ConfigError, match="nope"):
        Loader(ds, 10, transforms={"nope": [Lambda(upper)]})


def test_config_errors(ds):
    with pytest.raises(ConfigError):
        Loader(ds, 0)
    with pytest.raises(ConfigError):
        Loader(ds, 10, on_error="ignore")
    with pytest.raises(ConfigError):
        Loader(ds, 10, rank=3, world_size=2)
    with pytest.raises(ConfigError):
        Loader(ds, 10, to="tensorflow")
    with pytest.raises(ConfigError):
        Loader(ds, 10, shuffle="sometimes")


# --- state -----------------------------------------------------------------------------------


def test_state_dict_resumes_and_is_json(ds):
    full = Loader(ds, 100, seed=4, include_ids=True)
    expected = [b["id"].tolist() for b in full]
    loader = Loader(ds, 100, seed=4, include_ids=True)
    it = iter(loader)
    got = [next(it)["id"].tolist() for _ in range(3)]
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["position"] == 300 and state["epoch"] == 0
    fresh = Loader(ds, 100, seed=4, include_ids=True)
    fresh.load_state_dict(state)
    fresh.set_epoch(0)  # the current epoch: keeps the resumed position
    got += [b["id"].tolist() for b in fresh]
    assert got == expected
    assert fresh.state_dict()["epoch"] == 1 and fresh.state_dict()["position"] == 0


def test_incompatible_state_names_the_field(ds):
    state = Loader(ds, 100, seed=1).state_dict()
    with pytest.raises(IncompatibleStateError) as e:
        Loader(ds, 100, seed=2).load_state_dict(state)
    assert e.value.field == "seed" and isinstance(e.value, ValueError)
    with pytest.raises(IncompatibleStateError) as e:
        Loader(ds, 100, seed=1, shuffle=False).load_state_dict(state)
    assert e.value.field == "shuffle"
    with pytest.raises(IncompatibleStateError) as e:
        Loader(ds, 100, seed=1).load_state_dict(dict(state, dataset="0" * 16))
    assert e.value.field == "dataset"
    with pytest.raises(IncompatibleStateError) as e:
        Loader(ds, 100, seed=1).load_state_dict("not json")
    assert e.value.field is None


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"position": -1}, "position", "got -1"),
        ({"position": 2**64}, "position", "0 to 2^64"),
        ({"position": "3"}, "position", 'got "3"'),
        ({"epoch": 10**30}, "epoch", "0 to 2^64"),
        ({"seed": "five"}, "seed", '"five"'),
        ({"dataset": 7}, "dataset", "fingerprint"),
        ({"shuffle": "sideways"}, "shuffle", "sideways"),
        ({"bogus": 1}, "bogus", "unknown key"),
        ({"skipped": -2}, "skipped", "got -2"),
    ],
)
def test_a_malformed_state_names_its_field(ds, change, field, words):
    state = Loader(ds, 100, seed=1).state_dict()
    with pytest.raises(IncompatibleStateError) as e:
        Loader(ds, 100, seed=1).load_state_dict(dict(state, **change))
    assert e.value.field == field and words in str(e.value), str(e.value)
    missing = {k: v for k, v in state.items() if k != "position"}
    with pytest.raises(IncompatibleStateError) as e:
        Loader(ds, 100, seed=1).load_state_dict(missing)
    assert e.value.field == "position" and "missing" in str(e.value)


def test_a_new_iteration_supersedes_the_old_one(ds):
    loader = Loader(ds, 100, include_ids=True, shuffle=False)
    old = iter(loader)
    first = next(old)["id"].tolist()
    new = iter(loader)  # continues after the batch delivered
    assert next(new)["id"][0] == 100
    with pytest.raises(StokeholdError, match="superseded"):
        next(old)
    assert first[0] == 0


def test_pickle_round_trip_of_dataset_and_loader(ds):
    ds2 = pickle.loads(pickle.dumps(ds))
    assert len(ds2) == len(ds) and ds2[5]["blob"] == ds[5]["blob"] and ds2.path == ds.path
    loader = Loader(ds, 100, seed=8, include_ids=True, transforms={"name": [Lambda(upper)]})
    it = iter(loader)
    next(it)
    next(it)
    clone = pickle.loads(pickle.dumps(loader))
    assert clone.state_dict() == loader.state_dict()
    assert len(clone) == len(loader) and clone.batch_size == 100
    rest_a = [(b["id"].tolist(), b["name"]) for b in clone]
    rest_b = [(b["id"].tolist(), b["name"]) for b in it]
    assert rest_a == rest_b and len(rest_a) == 8


# --- damaged data ----------------------------------------------------------------------------


def test_corrupt_record_fails_or_is_skipped(tmp_path):
    d = write(tmp_path / "ds", 300, shard_size=4096)
    victim = 123
    k, start = 0, 0
    for k, shard in enumerate(d.manifest["shards"]):
        if start + shard["records"] > victim:
            break
        start += shard["records"]
    path = tmp_path / "ds" / d.manifest["shards"][k]["file"]
    rec = d.record_bytes(victim)
    data = bytearray(path.read_bytes())
    at = data.find(rec)
    assert at > 0
    data[at + len(rec) // 2] ^= 0x10
    path.write_bytes(bytes(data))
    damaged = stokehold.Dataset(tmp_path / "ds")
    with pytest.raises(CorruptDataError) as e:
        list(Loader(damaged, 50, shuffle=False))
    assert e.value.sample_id == victim
    loader = Loader(damaged, 50, on_error="skip", include_ids=True)
    ids = np.concatenate([b["id"][~b["is_padding"]] for b in loader]).tolist()
    assert loader.stats()["skipped"] == [victim]
    assert sorted(ids) == [i for i in range(300) if i != victim]


# --- stats -----------------------------------------------------------------------------------


def test_stats_and_report(ds):
    loader = Loader(ds, 100, threads=2)
    for _ in loader:
        pass
    st = loader.stats()
    assert st["batches"] == 10 and st["samples"] == 1000 and st["threads"] == 2
    assert {"read", "parse", "x/collate"} <= {s["name"] for s in st["stages"]}
    assert abs(sum(s["share"] for s in st["stages"]) - 1.0) < 1e-6
    assert st["consumer_wait"] >= 0 and st["skipped"] == []
    text = loader.report()
    assert "read" in text and "consumer waited" in text


# --- processes: kill + resume (G2), Ctrl-C (F3), fork (F4) -------------------------------------

KILL_CHILD = """
import json, os, signal, sys
import stokehold
path, state_file, out_file, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
loader = stokehold.Loader(path, 50, seed=11, threads=2, include_ids=True)
if os.path.exists(state_file):
    with open(state_file) as f:
        loader.load_state_dict(json.load(f))
step = 0
with open(out_file, "a") as out:
    for batch in loader:
        out.write(json.dumps(batch["id"].tolist()) + "\\n")
        out.flush()
        tmp = state_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(loader.state_dict(), f)
        os.replace(tmp, state_file)
        step += 1
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
print("finished")
"""


@pytest.mark.timeout(120)
def test_resume_after_sigkill_equals_the_uninterrupted_run(ds, tmp_path):
    reference = [b["id"].tolist() for b in Loader(ds.path, 50, seed=11, threads=2, include_ids=True)]
    rng = np.random.default_rng(2024)
    state_file, out_file = str(tmp_path / "state.json"), str(tmp_path / "out.jsonl")
    kills = 0
    for _ in range(10):
        kill_at = int(rng.integers(1, 6))
        p = subprocess.run(
            [sys.executable, "-c", KILL_CHILD, ds.path, state_file, out_file, str(kill_at)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if p.returncode == -signal.SIGKILL:
            kills += 1
            continue
        assert p.returncode == 0, p.stderr
        assert "finished" in p.stdout
        break
    assert kills >= 2
    with open(out_file) as f:
        got = [json.loads(line) for line in f]
    assert got == reference


SIGINT_CHILD = """
import sys, time
import stokehold
from stokehold.transforms import Lambda

def slow(x):
    time.sleep(0.05)
    return x

loader = stokehold.Loader(sys.argv[1], 64, threads=2, transforms={"x": [Lambda(slow)]})
print("ready", flush=True)
for batch in loader:
    pass
print("not interrupted", flush=True)
"""


@pytest.mark.timeout(60)
def test_ctrl_c_interrupts_within_a_second_with_one_traceback(ds):
    p = subprocess.Popen(
        [sys.executable, "-c", SIGINT_CHILD, ds.path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # blocked waiting for the slow first batch
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    assert p.returncode != 0
    assert err.count("Traceback") == 1, err
    assert err.strip().endswith("KeyboardInterrupt"), err
    assert elapsed < 1.0, elapsed


# fork: python/tests/test_every_kind.py runs the fork test against every kind of samples.


def test_config_is_the_one_configuration_and_rebuilds_the_loader(ds):
    loader = Loader(ds, 50, shuffle=False, drop_last=False, threads=2, prefetch=3, on_error="skip",
                    transforms={"x": [Lambda(lambda v: v)]})
    spec = loader.config
    assert spec["loader"]["batch_size"] == 50 and spec["loader"]["tail"] == "pad"
    assert spec["loader"]["shuffle"] == "sequential" and spec["loader"]["prefetch"] == 3
    assert spec["loader"]["on_error"] == {"skip": {"max_fraction": 0.05, "max_consecutive": 64}}
    # a Python stage is referred to by index, never by a name in a string
    assert spec["samples"] == {"kind": "records", "transforms": {"x": [{"name": "python", "params": {"index": 0}}]}}
    # the spec alone makes an engine that gives the same batches (without the Python stage)
    plain = Loader(ds, 50, shuffle=False, drop_last=False, threads=2, prefetch=3, on_error="skip")
    again = stokehold._native._Engine(ds, json.dumps(plain.config), [], False)
    a = [b["x"] for b in plain]
    b = [b["x"] for b in again.iter()]
    assert len(a) == len(b) == 20 and all(np.array_equal(x, y) for x, y in zip(a, b))
    with pytest.raises(ConfigError, match="unknown field"):
        stokehold._native._Engine(ds, json.dumps({**plain.config, "bogus": 1}), [], False)
    # repr shows it; byte sizes are ints or strings through the engine's one parser
    assert json.loads(repr(plain).split("config=", 1)[1][:-1]) == plain.config
    sized = Loader(ds, 50, memory_budget="1KiB", cache="2MiB", threads=1)
    assert sized.config["loader"]["memory_budget"] == 1024 and sized.config["loader"]["cache_bytes"] == 2 << 20
    assert Loader(ds, 50, cache=True).config["loader"]["cache_bytes"] == "auto"
    with pytest.raises(ConfigError, match=r"loader\.memory_budget.*not a byte count"):
        Loader(ds, 50, memory_budget="lots")


INTERRUPTED_CHILD = """
import os, signal, sys, time
import numpy as np
import stokehold
from stokehold.transforms import Lambda

def slow(x):
    time.sleep(0.02)
    return x

tasks = lambda: len(os.listdir("/proc/self/task"))
def settled(limit):
    # a joined thread can be listed for a moment after it ended
    deadline = time.monotonic() + 1.0
    while tasks() > limit and time.monotonic() < deadline:
        time.sleep(0.01)
    return tasks()

before = tasks()
make = lambda: stokehold.Loader(sys.argv[1], 16, shuffle=False, threads=2, include_ids=True,
                                transforms={"x": [Lambda(slow)]})
out = {}
# 1. Ctrl-C while the loop waits for a batch
loader = make()
seen = []
signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGINT))
signal.setitimer(signal.ITIMER_REAL, 0.4)
try:
    for b in loader:
        seen.extend(b["id"].tolist())
except KeyboardInterrupt:
    pass
out["wait"] = settled(before) - before
# the position is after the last batch delivered: the next iteration continues there
first = next(iter(loader))["id"].tolist()
out["wait_continues"] = first == list(range(len(seen), len(seen) + 16))
loader.close()
# 2. Ctrl-C in the training step (the iteration abandoned mid-epoch)
loader = make()
def step_loop():
    for i, b in enumerate(loader):
        if i == 3:
            raise KeyboardInterrupt
try:
    step_loop()
except KeyboardInterrupt:
    pass
out["step"] = settled(before) - before
out["step_continues"] = next(iter(loader))["id"].tolist()[0] == 4 * 16
loader.close()
# 3. a whole epoch: the next one's run is prepared ahead (its workers wait on the prefetch
# window) until close() joins it
loader = stokehold.Loader(sys.argv[1], 16, shuffle=False, threads=2)  # no Python stage
for b in loader:
    pass
out["prepared"] = tasks() - before
loader.close()
out["closed"] = settled(before) - before
print(out, flush=True)
"""


@pytest.mark.timeout(120)
def test_an_interrupted_loop_leaves_no_worker_running_and_continues_where_it_stopped(ds):
    """Issue #50, item 7: a KeyboardInterrupt, while the loop waits for a batch or in the
    training step, joins every worker of the iteration without close(), and the next iteration
    continues after the last batch delivered; the run prepared ahead at an epoch's end waits on
    its prefetch window until close() joins it."""
    p = subprocess.run([sys.executable, "-c", INTERRUPTED_CHILD, ds.path], capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr
    out = eval(p.stdout.strip().splitlines()[-1])
    assert out["wait"] <= 0 and out["step"] <= 0, out
    assert out["wait_continues"] and out["step_continues"], out
    assert out["prepared"] >= 2 and out["closed"] <= 0, out
