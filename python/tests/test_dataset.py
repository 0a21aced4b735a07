"""Round trips and error paths of stokehold.Dataset / stokehold.ShardWriter."""

import errno
import json
import multiprocessing
import os
import pickle
import struct
import zlib

import numpy as np
import pytest

import stokehold
from stokehold import (
    CorruptDataError,
    Dataset,
    LimitExceededError,
    SchemaError,
    ShardWriter,
    StokeholdError,
    StokeholdIOError,
    UnsupportedVersionError,
)

# --- sample data -------------------------------------------------------------------------------


def png_bytes(width: int, height: int, seed: int) -> bytes:
    """A real grayscale PNG (the format only sniffs magic bytes, but keep the data honest)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes((seed + x + y) % 256 for x in range(width)) for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg_bytes(seed: int) -> bytes:
    return b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(seed % 7, 40)) + b"\xff\xd9"


def webp_bytes(seed: int) -> bytes:
    body = b"WEBPVP8 " + bytes([seed % 256]) * 10
    return b"RIFF" + struct.pack("<I", len(body)) + body


ALL_TYPES = {
    "jpeg": "image:jpeg",
    "png": "image:png",
    "webp": "image:webp",
    "auto": "image:auto",
    "raw": "bytes",
    "raw_z": "bytes+zstd",
    "text": "string",
    "text_z": "string+zstd",
    "label": "int64",
    "score": "float64",
    "u8": "ndarray:u8",
    "i32": "ndarray:i32",
    "i64": "ndarray:i64+zstd",
    "f16": "ndarray:f16",
    "f32": "ndarray:f32",
    "f64": "ndarray:f64",
}


def make_sample(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "jpeg": jpeg_bytes(i),
        "png": png_bytes(3 + i % 4, 2, i),
        "webp": webp_bytes(i),
        "auto": png_bytes(2, 2, i) if i % 2 else jpeg_bytes(i),
        "raw": bytes([i % 256, 0, 255]) * (i % 5),
        "raw_z": b"z" * (100 + i),
        "text": f"sample {i} \u00e9\u4e2d\U0001f600",
        "text_z": "repetitive text " * (i + 1),
        "label": (-1) ** i * (i * 1_000_003) + (2**62 if i == 3 else 0),
        "score": i / 7.0 - 1e300 * (i == 5),
        "u8": rng.integers(0, 256, size=(i % 3 + 1, 4), dtype=np.uint8),
        "i32": np.arange(i, dtype=np.int32) - 7,
        "i64": np.full((2, 3, 2), -(2**40) * i, dtype=np.int64),
        "f16": rng.standard_normal((5,)).astype(np.float16),
        "f32": rng.standard_normal((2, 2)).astype(np.float32),
        "f64": np.array(float(i) * np.pi),  # 0-d
    }


def assert_sample_equal(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k, w in want.items():
        g = got[k]
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray), k
            assert g.dtype == w.dtype, k
            assert g.shape == w.shape, k
            np.testing.assert_array_equal(g, w)
        else:
            assert type(g) is type(w), k
            assert g == w, k


def write_dataset(dest, schema, samples, **kw):
    with ShardWriter(dest, schema, **kw) as w:
        for i, s in enumerate(samples):
            assert w.write(s) == i
        assert len(w) == len(samples)
    return Dataset(dest)


@pytest.fixture
def small_ds(tmp_path):
    """A 10-sample, multi-shard dataset of (raw bytes, label)."""
    samples = [{"raw": bytes([i]) * 64, "label": i} for i in range(10)]
    ds = write_dataset(tmp_path / "small", {"raw": "bytes", "label": "int64"}, samples, shard_size=200)
    return ds, samples


# --- round trips --------------------------------------------------------------------------------


def test_every_field_type_round_trips_across_shards(tmp_path):
    samples = [make_sample(i) for i in range(12)]
    dest = tmp_path / "all"
    ds = write_dataset(dest, ALL_TYPES, samples, shard_size=1500, classes=["cat", "dog", "emu"])

    assert len(ds) == 12
    assert ds.schema == ALL_TYPES
    assert list(ds.schema) == list(ALL_TYPES)  # field order kept
    assert ds.classes == ["cat", "dog", "emu"]
    assert ds.path == str(dest)
    m = ds.manifest
    assert m["format"] == "stokehold-dataset"
    assert m["total_records"] == 12
    assert len(m["shards"]) > 1
    assert sum(s["records"] for s in m["shards"]) == 12
    assert sorted(os.listdir(dest)) == sorted(["manifest.json"] + [s["file"] for s in m["shards"]])
    for i, want in enumerate(samples):
        assert_sample_equal(ds[i], want)
    # the same through a memory map, without per-record checksums
    mm = Dataset(dest, mmap=True, verify=False)
    for i, want in enumerate(samples):
        assert_sample_equal(mm[i], want)


def test_schema_as_pairs_and_input_conversions(tmp_path):
    schema = [("b", "bytes"), ("img", "image:jpeg"), ("x", "float64"), ("n", "int64"), ("a", "ndarray:f32")]
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = base[::2, ::3]  # not contiguous
    assert not strided.flags["C_CONTIGUOUS"]
    fortran = np.asfortranarray(base)
    ds = write_dataset(
        tmp_path / "conv",
        schema,
        [
            {"b": bytearray(b"abc"), "img": memoryview(jpeg_bytes(1)), "x": 3, "n": np.int64(-5), "a": strided},
            {"b": memoryview(b"xyz")[1:], "img": jpeg_bytes(2), "x": np.float64(0.5), "n": True, "a": fortran},
            {"b": b"", "img": jpeg_bytes(3), "x": -0.0, "n": 2**63 - 1, "a": np.zeros((0, 3), np.float32)},
        ],
    )
    assert list(ds.schema.items()) == schema
    s0, s1, s2 = ds[0], ds[1], ds[2]
    assert s0["b"] == b"abc" and s0["img"] == jpeg_bytes(1)
    assert s0["x"] == 3.0 and type(s0["x"]) is float
    assert s0["n"] == -5 and type(s0["n"]) is int
    np.testing.assert_array_equal(s0["a"], np.array([[0, 3], [12, 15]], np.float32))
    assert s0["a"].flags["C_CONTIGUOUS"] and s0["a"].flags["WRITEABLE"]
    assert s1["b"] == b"yz" and s1["x"] == 0.5 and s1["n"] == 1
    np.testing.assert_array_equal(s1["a"], base)
    assert s2["b"] == b"" and s2["n"] == 2**63 - 1
    assert s2["a"].shape == (0, 3) and s2["a"].dtype == np.float32
    assert ds.classes is None


def test_negative_indices_and_index_error(small_ds):
    ds, samples = small_ds
    assert len(ds) == 10
    assert ds[-1] == samples[9]
    assert ds[-10] == samples[0]
    assert ds[3] == samples[3]
    for bad in (10, -11, 2**40, -(2**40)):
        with pytest.raises(IndexError, match="out of range"):
            ds[bad]
    with pytest.raises(IndexError):
        ds.record_bytes(10)


def test_iteration(small_ds):
    ds, samples = small_ds
    assert list(ds) == samples
    it = iter(ds)
    assert next(it) == samples[0]
    assert [s["label"] for s in it] == list(range(1, 10))
    with pytest.raises(StopIteration):
        next(it)


def test_record_bytes_and_repr(small_ds, tmp_path):
    ds, samples = small_ds
    rec = ds.record_bytes(4)
    # record := u32 end of each field, then the payload: raw bytes, then the int64
    assert rec == struct.pack("<II", 64, 72) + samples[4]["raw"] + struct.pack("<q", 4)
    assert ds.record_bytes(-1)[8:72] == samples[9]["raw"]
    shards = len(ds.manifest["shards"])
    assert shards > 1
    assert repr(ds) == f"Dataset({str(tmp_path / 'small')!r}, 10 samples, {shards} shards, raw: bytes, label: int64)"


def test_pickle_reopens(small_ds, tmp_path):
    ds, samples = small_ds
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        copy = pickle.loads(pickle.dumps(ds, protocol=protocol))
        assert isinstance(copy, Dataset) and copy is not ds
        assert copy.path == ds.path and len(copy) == 10
        assert copy[7] == samples[7]
    mm = Dataset(tmp_path / "small", mmap=True, verify=False)
    args, kwargs = pickle.loads(pickle.dumps(mm)).__getnewargs_ex__()
    assert args == (str(tmp_path / "small"),)
    assert kwargs == {"access": "mmap", "verify": False}


def _read_labels(ds):
    return [s["label"] for s in ds]


def test_dataset_survives_spawn_workers(small_ds):
    ds, _ = small_ds
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.apply(_read_labels, (ds,)) == list(range(10))


# --- writer behaviour ---------------------------------------------------------------------------


def test_with_block_that_raises_leaves_nothing(tmp_path):
    dest = tmp_path / "aborted"
    with pytest.raises(RuntimeError, match="boom"):
        with ShardWriter(dest, {"n": "int64"}, shard_size=16) as w:
            for i in range(20):
                w.write({"n": i})
            assert any(p.startswith(".aborted.partial-") for p in os.listdir(tmp_path))
            raise RuntimeError("boom")
    assert not dest.exists()
    assert os.listdir(tmp_path) == []
    assert w.closed


def test_abort_and_close_return_manifest(tmp_path):
    w = ShardWriter(tmp_path / "a", {"n": "int64"})
    w.write({"n": 1})
    w.abort()
    w.abort()  # no-op
    assert os.listdir(tmp_path) == []
    w = ShardWriter(tmp_path / "b", {"n": "int64"}, classes=["x"])
    w.write({"n": 1})
    manifest = w.close()
    assert manifest["total_records"] == 1 and manifest["classes"] == ["x"]
    with open(tmp_path / "b" / "manifest.json") as f:
        assert json.load(f) == manifest
    assert Dataset(tmp_path / "b").manifest == manifest


def test_writer_used_after_close(tmp_path):
    w = ShardWriter(tmp_path / "c", {"n": "int64"})
    w.write({"n": 5})
    w.close()
    assert w.closed and len(w) == 1
    with pytest.raises(StokeholdError, match="closed"):
        w.write({"n": 6})
    with pytest.raises(StokeholdError, match="closed"):
        w.close()
    with pytest.raises(StokeholdError, match="closed"):
        with w:
            pass
    assert Dataset(tmp_path / "c")[0] == {"n": 5}


def test_destination_exists(small_ds, tmp_path):
    with pytest.raises(StokeholdIOError, match="already exists") as e:
        ShardWriter(tmp_path / "small", {"n": "int64"})
    assert isinstance(e.value, OSError) and e.value.errno == errno.EEXIST
    with ShardWriter(tmp_path / "small", {"n": "int64"}, overwrite=True) as w:
        w.write({"n": 42})
    assert list(Dataset(tmp_path / "small")) == [{"n": 42}]


def test_schema_errors_name_the_field(tmp_path):
    w = ShardWriter(tmp_path / "s", {"img": "image:png", "emb": "ndarray:f32", "n": "int64", "t": "string"})
    good = {"img": png_bytes(2, 2, 0), "emb": np.zeros(3, np.float32), "n": 1, "t": "x"}
    cases = [
        ({**good, "emb": np.zeros(3, np.float64)}, ["emb", "f32", "float64"]),
        ({**good, "emb": [0.0, 1.0]}, ["emb", "numpy array"]),
        ({k: v for k, v in good.items() if k != "n"}, ["missing", "'n'"]),
        ({**good, "extra": 1}, ["unknown", "'extra'"]),
        ({**good, "n": "1"}, ['"n"', "int"]),
        ({**good, "n": 1.5}, ['"n"', "int"]),
        ({**good, "n": 2**64}, ['"n"', "too large"]),
        ({**good, "t": b"bytes"}, ['"t"', "str"]),
        ({**good, "img": "not bytes"}, ['"img"', "bytes"]),
        ({**good, "img": jpeg_bytes(0)}, ['"img"', "not png"]),
    ]
    for sample, words in cases:
        with pytest.raises(SchemaError) as e:
            w.write(sample)
        assert isinstance(e.value, ValueError) and isinstance(e.value, StokeholdError)
        for word in words:
            assert word in str(e.value), (word, str(e.value))
    assert len(w) == 0
    assert w.write(good) == 0  # the writer goes on after a rejected sample
    w.close()
    assert len(Dataset(tmp_path / "s")) == 1


def test_invalid_schemas_and_options(tmp_path):
    for schema, word in [
        ({"a": "complex"}, "complex"),
        ({"a": "image+zstd"}, "zstd"),
        ({}, "1 to"),
        ("a:int64", "str"),
        ([("a",)], "pairs"),
        ({"a": 3}, "type specs"),
    ]:
        with pytest.raises(SchemaError, match=word):
            ShardWriter(tmp_path / "bad", schema)
    with pytest.raises(SchemaError, match="align"):
        ShardWriter(tmp_path / "bad", {"a": "int64"}, align=3)
    assert not (tmp_path / "bad").exists()


# --- damaged data -------------------------------------------------------------------------------


def test_flipped_byte_in_a_record_is_corrupt_data(small_ds, tmp_path):
    ds, samples = small_ds
    shard = ds.manifest["shards"][1]
    first = ds.manifest["shards"][0]["records"]
    path = tmp_path / "small" / shard["file"]
    rec = ds.record_bytes(first)  # first record of shard 1
    data = bytearray(path.read_bytes())
    at = data.find(rec)
    assert at > 0
    data[at + 20] ^= 0x40
    path.write_bytes(bytes(data))
    for reopened in (Dataset(tmp_path / "small"), Dataset(tmp_path / "small", mmap=True)):
        assert reopened[0] == samples[0]  # other records still read
        with pytest.raises(CorruptDataError) as e:
            reopened[first]
        msg = str(e.value)
        assert shard["file"] in msg and "record" in msg and "checksum" in msg, msg
        with pytest.raises(CorruptDataError, match=shard["file"]):
            list(reopened)
    # with verification off the flipped byte comes through
    unchecked = Dataset(tmp_path / "small", verify=False)[first]["raw"]
    assert unchecked != samples[first]["raw"] and len(unchecked) == 64


def test_missing_manifest(small_ds, tmp_path):
    os.remove(tmp_path / "small" / "manifest.json")
    with pytest.raises(StokeholdError, match="manifest.json") as e:
        Dataset(tmp_path / "small")
    assert isinstance(e.value, StokeholdIOError) and e.value.errno == errno.ENOENT
    with pytest.raises(StokeholdIOError, match="manifest.json"):
        Dataset(tmp_path / "does-not-exist")


def test_truncated_shard_fails_at_open(small_ds, tmp_path):
    ds, _ = small_ds
    path = tmp_path / "small" / ds.manifest["shards"][-1]["file"]
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 10)
    with pytest.raises(CorruptDataError, match=path.name):
        Dataset(tmp_path / "small")


def test_bad_manifests(small_ds, tmp_path):
    mpath = tmp_path / "small" / "manifest.json"
    manifest = json.loads(mpath.read_text())
    mpath.write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(UnsupportedVersionError, match="99"):
        Dataset(tmp_path / "small")
    mpath.write_text(json.dumps({**manifest, "total_records": 11}))
    with pytest.raises(CorruptDataError, match="total_records"):
        Dataset(tmp_path / "small")
    mpath.write_text("{not json")
    with pytest.raises(CorruptDataError, match="manifest.json"):
        Dataset(tmp_path / "small")


def test_exception_hierarchy():
    for cls in (CorruptDataError, UnsupportedVersionError, LimitExceededError, SchemaError, StokeholdIOError):
        assert issubclass(cls, StokeholdError)
        assert cls.__module__ == "stokehold" and getattr(stokehold, cls.__name__) is cls
    assert issubclass(SchemaError, ValueError)
    assert issubclass(StokeholdIOError, OSError)
    assert issubclass(StokeholdError, Exception) and not issubclass(StokeholdError, ValueError)
    e = pickle.loads(pickle.dumps(CorruptDataError("shard-000001.skh: record 3")))
    assert type(e) is CorruptDataError and str(e) == "shard-000001.skh: record 3"
    assert isinstance(stokehold.__version__, str) and stokehold.__version__.count(".") == 2


def test_writers_refuse_urls_and_busy_or_foreign_destinations(tmp_path):
    # object stores are written (test_remote.py); other schemes are refused
    with pytest.raises(stokehold.ConfigError, match="ftp:// URLs are not taken here: give a local path"):
        stokehold.ShardWriter("ftp://bucket/x", {"b": "bytes"})
    with pytest.raises(stokehold.ConfigError, match="URLs are not taken here"):
        stokehold.Dataset("file:///bucket/x")  # object stores are read: test_remote.py
    assert not (tmp_path / "s3:").exists() and not (tmp_path / "ftp:").exists()
    first = stokehold.ShardWriter(tmp_path / "ds", {"b": "bytes"})
    with pytest.raises(OSError) as e:  # another writer is writing it
        stokehold.ShardWriter(tmp_path / "ds", {"b": "bytes"}, overwrite=True)
    assert e.value.errno == 16, e.value
    first.write({"b": b"x"})
    first.close()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(OSError) as e:  # not a dataset: never replaced
        stokehold.ShardWriter(tmp_path / "other", {"b": "bytes"}, overwrite=True)
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"
