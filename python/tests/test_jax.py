"""stokehold with real JAX (CPU): batches as jax arrays through DLPack, and a few steps of a
jitted linear model fed by the loader."""

import os
import sys

import numpy as np
import pytest

if os.environ.get("CI") and not os.environ.get("STOKEHOLD_ALLOW_NO_JAX"):
    import jax  # CI installs jax (make setup): a missing jax must fail, not skip
else:
    jax = pytest.importorskip("jax", reason="JAX is not installed (pip install jax)")
import jax.numpy as jnp  # noqa: E402

import stokehold  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _loader_helpers import write  # noqa: E402


def test_batches_are_jax_arrays_with_the_right_values(tmp_path):
    ds = write(tmp_path / "ds", 64)
    loader = stokehold.Loader(ds, 16, shuffle=True, seed=1, to="jax", include_ids=True)
    seen = []
    for b in loader:
        assert isinstance(b["x"], jax.Array) and b["x"].shape == (16,)
        ids = np.asarray(b["id"])
        np.testing.assert_allclose(np.asarray(b["x"]), ids * 0.5)
        assert all(isinstance(a, jax.Array) for a in b["img"])
        seen.extend(ids.tolist())
    assert sorted(seen) == list(range(64))


def test_a_jitted_model_learns_from_the_loader(tmp_path):
    # y = 3x - 1 with noise-free targets: a linear fit must converge
    schema = {"x": "float64", "y": "float64"}
    with stokehold.ShardWriter(tmp_path / "lin", schema) as w:
        for i in range(512):
            x = (i % 97) / 97.0
            w.write({"x": x, "y": 3.0 * x - 1.0})
    loader = stokehold.Loader(str(tmp_path / "lin"), 64, shuffle=True, to="jax")

    @jax.jit
    def step(params, x, y):
        def loss(p):
            return jnp.mean((p[0] * x + p[1] - y) ** 2)

        l, g = jax.value_and_grad(loss)(params)
        return params - 0.5 * g, l

    params = jnp.zeros(2)
    losses = []
    for _ in range(8):
        for b in loader:
            params, l = step(params, b["x"], b["y"])
            losses.append(float(l))
    assert losses[-1] < 0.01 * losses[0], losses[::8]
    np.testing.assert_allclose(np.asarray(params), [3.0, -1.0], atol=0.1)
