"""Data and child-process scripts shared by the loader tests."""

import numpy as np

import stokehold

SCHEMA = {"x": "float64", "label": "int64", "blob": "bytes", "img": "ndarray:u8", "name": "string"}


def sample(i: int) -> dict:
    return {
        "x": float(i) * 0.5,
        "label": i * 3 - 7,
        "blob": bytes([(i * 7 + k) % 256 for k in range(i % 11 + 40)]),
        "img": np.full((4, 4), i % 251, dtype=np.uint8),
        "name": f"sample-{i:05d}",
    }


def write(path, n: int, shard_size: int = 8192) -> "stokehold.Dataset":
    with stokehold.ShardWriter(path, SCHEMA, shard_size=shard_size) as w:
        for i in range(n):
            w.write(sample(i))
    return stokehold.Dataset(path)


def plus_noise(x, rng):
    """A Lambda with the sample's numpy generator (module level: picklable)."""
    return np.float64(x + rng.random())


def upper(s):
    return s.upper()
