"""threads="auto" (the default): the loader tunes its working threads; output is unchanged."""

import os
import sys

import numpy as np
import pytest

import stokehold

sys.path.insert(0, os.path.dirname(__file__))
from _loader_helpers import write  # noqa: E402


def test_auto_threads_give_the_same_batches_and_report_active_threads(tmp_path):
    ds = write(tmp_path / "ds", 300)
    auto = list(stokehold.Loader(ds, 10, seed=4, include_ids=True))
    fixed = list(stokehold.Loader(ds, 10, seed=4, include_ids=True, threads=1))
    assert len(auto) == len(fixed) == 30
    for a, b in zip(auto, fixed):
        np.testing.assert_array_equal(a["id"], b["id"])
        np.testing.assert_array_equal(a["x"], b["x"])
    loader = stokehold.Loader(ds, 10)
    list(loader)
    st = loader.stats()
    assert 1 <= st["active_threads"] <= st["threads"]
    with pytest.raises(stokehold.ConfigError, match="auto"):
        stokehold.Loader(ds, 10, threads="many")


def test_auto_prefetch_is_the_default_and_stays_within_the_memory_budget(tmp_path):
    ds = write(tmp_path / "ds", 300)
    fixed = list(stokehold.Loader(ds, 10, seed=4, include_ids=True, threads=2, prefetch=2))
    loader = stokehold.Loader(ds, 10, seed=4, include_ids=True, memory_budget=1)
    auto = list(loader)
    assert len(auto) == len(fixed) == 30
    for a, b in zip(auto, fixed):
        np.testing.assert_array_equal(a["id"], b["id"])
        np.testing.assert_array_equal(a["x"], b["x"])
    # a budget below one batch: the depth stays at its floor, 1
    assert loader.stats()["prefetch"] == 1
    assert stokehold.Loader(ds, 10, prefetch=3).stats()["prefetch"] == 3
    for bad in ("deep", 0, True):
        with pytest.raises(stokehold.ConfigError, match="prefetch"):
            stokehold.Loader(ds, 10, prefetch=bad)
    with pytest.raises(stokehold.ConfigError, match="memory_budget"):
        stokehold.Loader(ds, 10, memory_budget=0)


def test_stats_count_bytes_read_and_profiling_can_be_switched_off(tmp_path):
    ds = write(tmp_path / "ds", 120)
    on = stokehold.Loader(ds, 10, shuffle=False)
    list(on)
    st = on.stats()
    assert st["records_read"] >= 120 and st["bytes_read"] > 0
    assert st["profiled"] is True
    assert all(s["items"] >= 120 for s in st["stages"])
    off = stokehold.Loader(ds, 10, shuffle=False, profile=False)
    list(off)
    st = off.stats()
    assert st["profiled"] is False and st["bytes_read"] > 0
    assert all(s["items"] == 0 for s in st["stages"])
    assert "timing was off" in off.report()


def test_trace_is_written_as_chrome_trace_json(tmp_path):
    import json

    ds = write(tmp_path / "ds", 40)
    path = tmp_path / "trace.json"
    with stokehold.Loader(ds, 10, shuffle=False, trace=path) as loader:
        list(loader)
    doc = json.loads(path.read_text())
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {s["name"] for s in spans}
    assert {"read", "parse"} <= names
    assert {s["args"]["id"] for s in spans if s["name"] == "read"} >= set(range(40))
    other = tmp_path / "again.json"
    assert loader.export_trace(other) == str(other)
    assert json.loads(other.read_text())["traceEvents"]
    plain = stokehold.Loader(ds, 10)
    with pytest.raises(stokehold.ConfigError, match="trace"):
        plain.export_trace(tmp_path / "none.json")
