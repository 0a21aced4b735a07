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
