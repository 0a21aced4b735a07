"""TFRecord files and WebDataset tars read in place (issue #36): written here by Python's own code
(a TFRecord writer with its CRC-32C and a hand-encoded ``tf.train.Example``, ``tarfile`` for the
tars), opened by ``stokehold.Dataset`` without ``pack``, and checked against ``stokehold pack
--no-restart-markers`` of the same files: the same samples, the same batches through a real image
pipeline, pickling, and the damage named."""

import glob
import io
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest

import stokehold
from stokehold.image import RandomResizedCrop

from test_cli import run  # the installed `stokehold` command

N = 24
PER_FILE = 8


# --- a TFRecord writer of our own (CRC-32C, Castagnoli, reflected 0x82F63B78) -----------------


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 as protobuf writes it: two's complement, 10 bytes when negative
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def example(features: dict) -> bytes:
    """A ``tf.train.Example``: ``bytes`` values become a BytesList, ``int`` an Int64List (packed)."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, bytes):
            feature = field(1, field(1, value))
        else:
            feature = field(3, field(1, b"".join(varint(v) for v in value)))
        entries += field(1, field(1, name.encode()) + field(2, feature))
    return field(1, entries)


def write_tfrecord(path, records):
    """Returns each record's byte offset in the file."""
    offsets = []
    with open(path, "wb") as f:
        for data in records:
            offsets.append(f.tell())
            length = struct.pack("<Q", len(data))
            f.write(length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data)))
    return offsets


# --- data ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    out = tmp_path_factory.mktemp("imgs")
    run("sample-data", out, "--images", N, "--classes", 1, "--size", "48x40")
    return [open(p, "rb").read() for p in sorted(glob.glob(f"{out}/**/*.jpg", recursive=True))]


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory, jpegs):
    """Three TFRecord files in ImageNet's naming; a caption that some records lack."""
    d = tmp_path_factory.mktemp("tfr")
    offsets = []
    for part in range(N // PER_FILE):
        records = []
        for k in range(PER_FILE):
            i = part * PER_FILE + k
            features = {"image/encoded": jpegs[i], "image/class/label": [i % 3]}
            if i % 4:
                features["caption"] = f"photo {i}".encode()
            records.append(example(features))
        offsets.append(write_tfrecord(d / f"train-{part:05d}-of-{N // PER_FILE:05d}", records))
    return d, offsets


@pytest.fixture(scope="module")
def tars(tmp_path_factory, jpegs):
    d = tmp_path_factory.mktemp("wds")
    for part in range(N // PER_FILE):
        with tarfile.open(d / f"shard-{part:04d}.tar", "w") as t:
            for k in range(PER_FILE):
                i = part * PER_FILE + k
                for ext, data in [("jpg", jpegs[i]), ("cls", str(i % 3).encode())]:
                    info = tarfile.TarInfo(f"s{i:05d}.{ext}")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
    return d


def packed(src, tmp_path, *args):
    out = tmp_path / "packed"
    run("pack", src, out, "--no-restart-markers", *args)
    return stokehold.Dataset(out)


def same_samples(a, b):
    assert len(a) == len(b)
    for i in range(len(a)):
        x, y = a[i], b[i]
        assert x.keys() == y.keys(), i
        for k in x:
            if isinstance(x[k], np.ndarray):
                np.testing.assert_array_equal(x[k], y[k])
            else:
                assert x[k] == y[k], (i, k)


def same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], np.ndarray):
                np.testing.assert_array_equal(x[k], y[k], err_msg=k)
            elif isinstance(x[k], list):  # a column of values of varying shape
                assert len(x[k]) == len(y[k]), k
                for u, v in zip(x[k], y[k]):
                    np.testing.assert_array_equal(u, v, err_msg=k)
            else:
                assert x[k] == y[k], k


# --- tests ---------------------------------------------------------------------------------------


def test_tfrecords_in_place_are_the_samples_pack_stores(tfrecords, jpegs, tmp_path):
    d, _ = tfrecords
    ds = stokehold.Dataset(d, index_dir=tmp_path / "ix")
    assert ds.in_place == "tfrecord"
    assert len(ds) == N
    # the types pack chooses: an image, an int, a string (valid UTF-8) that records may lack
    assert ds.schema == {"image/encoded": "image:auto", "image/class/label": "int64", "caption": "string"}
    # the JPEGs are the files' own bytes, the labels the ints written, a missing caption empty
    for i in range(N):
        s = ds[i]
        assert s["image/encoded"] == jpegs[i]
        assert s["image/class/label"] == i % 3
        assert s["caption"] == (f"photo {i}" if i % 4 else "")
    same_samples(ds, packed(d, tmp_path))
    assert stokehold.Dataset(packed(d, tmp_path / "again").path).in_place is None


def test_a_loader_over_files_in_place_gives_the_batches_of_their_pack(tfrecords, tars, tmp_path):
    d, _ = tfrecords
    for src, fields in [(d, "image/encoded,image/class/label"), (tars, "jpg,cls")]:
        names = fields.split(",")
        in_place = stokehold.Dataset(src, fields=names, index_dir=tmp_path / "ix")
        out = tmp_path / f"p-{in_place.in_place}"
        run("pack", src, out, "--no-restart-markers", "--fields", fields)
        image = names[0]
        for ds in (in_place, stokehold.Dataset(out)):
            assert ds.schema[image] == "image:auto"
        go = lambda ds, threads: list(  # noqa: E731
            stokehold.Loader(ds, 5, shuffle=True, seed=11, threads=threads, include_ids=True, drop_last=False, transforms={image: [RandomResizedCrop(16)]})
        )
        a = go(in_place, 2)
        same_batches(a, go(stokehold.Dataset(out), 2))
        same_batches(a, go(in_place, 1))  # whatever the thread count
        assert a[0][image].shape == (5, 3, 16, 16)  # CHW, as torchvision gives
        assert sorted(np.concatenate([b["id"][~b["is_padding"]] for b in a]).tolist()) == list(range(N))


def test_tars_globs_lists_and_pickling(tars, tfrecords, tmp_path):
    ix = tmp_path / "ix"
    ds = stokehold.Dataset(tars, index_dir=ix)
    assert ds.in_place == "webdataset" and len(ds) == N
    assert ds.schema == {"__key__": "string", "jpg": "image:auto", "cls": "int64"}
    assert [(ds[i]["__key__"], ds[i]["cls"]) for i in range(N)] == [(f"s{i:05d}", i % 3) for i in range(N)]
    same_samples(ds, packed(tars, tmp_path))
    files = sorted(str(p) for p in tars.glob("*.tar"))
    two = stokehold.Dataset(files[1:], index_dir=ix)
    assert len(two) == 2 * PER_FILE and two[0] == ds[PER_FILE]
    g = stokehold.Dataset(str(tars / "shard-000[02].tar"), index_dir=ix)
    assert len(g) == 2 * PER_FILE and g[PER_FILE] == ds[2 * PER_FILE]
    # pickles as "open the same files with the same options" (spawned workers)
    d, _ = tfrecords
    tf = stokehold.Dataset(d, fields="image/class/label", index_dir=ix)
    back = pickle.loads(pickle.dumps(tf))
    assert back.in_place == "tfrecord" and back.schema == {"image/class/label": "int64"}
    assert [back[i] for i in range(N)] == [tf[i] for i in range(N)]
    back = pickle.loads(pickle.dumps(two))
    assert len(back) == len(two) and back[3] == two[3]


def test_the_index_is_kept_beside_or_in_the_index_dir_and_rebuilt_when_a_file_changes(tfrecords, tmp_path):
    d, _ = tfrecords
    ix = tmp_path / "ix"
    stokehold.Dataset(d, index_dir=ix)
    kept = [p for p in ix.rglob("*") if p.is_file()]
    assert len(kept) == N // PER_FILE
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in sorted(d.iterdir()):
        (copy / p.name).write_bytes(p.read_bytes())
    ds = stokehold.Dataset(copy, index_beside=True)
    assert sorted(p.name for p in copy.iterdir() if p.name.endswith(".skhidx")) == [f"train-{k:05d}-of-00003.skhidx" for k in range(3)]
    # a file that grows by one record: its kept index no longer describes it and is rebuilt
    first = sorted(p for p in copy.iterdir() if "skhidx" not in p.name)[0]
    extra = example({"image/encoded": ds[0]["image/encoded"], "image/class/label": [7], "caption": b"new"})
    with open(first, "ab") as f:
        length = struct.pack("<Q", len(extra))
        f.write(length + struct.pack("<I", masked(length)) + extra + struct.pack("<I", masked(extra)))
    grown = stokehold.Dataset(copy, index_beside=True)
    assert len(grown) == N + 1
    assert grown[PER_FILE]["image/class/label"] == 7 and grown[PER_FILE]["caption"] == "new"


def test_damage_in_place_names_the_file_the_sample_and_the_bytes(tfrecords, tmp_path):
    d, offsets = tfrecords
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in sorted(d.iterdir()):
        (bad / p.name).write_bytes(p.read_bytes())
    victim = sorted(bad.iterdir())[1]
    data = bytearray(victim.read_bytes())
    start = offsets[1][3] + 12  # record 3 of the second file: its data begins after the header
    data[start + 40] ^= 0x10
    victim.write_bytes(bytes(data))
    ds = stokehold.Dataset(bad, index_dir=tmp_path / "ix")
    assert len(ds) == N  # the file is indexed whole: the damage is met when the record is read
    assert ds[PER_FILE + 2]["image/class/label"] == (PER_FILE + 2) % 3
    with pytest.raises(stokehold.CorruptDataError) as e:
        ds[PER_FILE + 3]
    msg = str(e.value)
    assert victim.name in msg and f"sample {PER_FILE + 3}" in msg and f"bytes {start}.." in msg, msg
    # a loader fails on it by default, and skips and counts it when asked
    with pytest.raises(stokehold.CorruptDataError, match=victim.name):
        list(stokehold.Loader(ds, 4, shuffle=False, threads=1))
    loader = stokehold.Loader(ds, 4, shuffle=False, threads=1, on_error="skip", include_ids=True)
    ids = np.concatenate([b["id"][~b["is_padding"]] for b in loader]).tolist()
    assert PER_FILE + 3 not in ids and len(ids) == N - 1
    assert loader.stats()["skipped"] == [PER_FILE + 3]


def test_what_in_place_cannot_do_is_said(tfrecords, tmp_path):
    d, _ = tfrecords
    ds = stokehold.Dataset(d, index_dir=tmp_path / "ix")
    # names the options that do work in place (the Loader's cache= and decoded_cache=)
    with pytest.raises(stokehold.ConfigError, match="cache_dir copies.*in-memory `cache` and `decoded_cache` options"):
        stokehold.Loader(ds, 4, cache_dir=tmp_path / "c")
    with pytest.raises(stokehold.StokeholdError, match="format="):
        (tmp_path / "x-00000-of-00001").write_bytes(b"neither")
        stokehold.Dataset(tmp_path / "x-00000-of-00001", index_dir=tmp_path / "ix")
    gz = tmp_path / "a.tfrecord.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00")
    with pytest.raises(stokehold.StokeholdError, match="gzip"):
        stokehold.Dataset(gz, index_dir=tmp_path / "ix")
    with pytest.raises(stokehold.StokeholdError, match="nope"):
        stokehold.Dataset(d, fields=["nope"], index_dir=tmp_path / "ix")
    assert sorted(os.listdir(d)) == [f"train-{k:05d}-of-00003" for k in range(3)]  # nothing written beside


def test_a_mistake_in_the_files_given_is_a_config_error_and_damage_stays_corrupt_data(tfrecords, tmp_path):
    """Issue #51: what the user gave that cannot be used reaches Python as ConfigError (it was
    CorruptDataError), each saying what to give instead; a damaged file stays CorruptDataError."""
    d, _ = tfrecords
    ix = tmp_path / "ix"
    (tmp_path / "x-00000-of-00001").write_bytes(b"neither")
    gz = tmp_path / "a.tfrecord.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00")
    other = tmp_path / "other"
    other.mkdir()
    first = sorted(d.iterdir())[0]
    (other / "c.tfrecord").write_bytes(first.read_bytes())
    for given, kw, says in [
        (tmp_path / "x-00000-of-00001", {}, "format="),
        (gz, {}, "gzip"),
        (d, {"fields": ["nope"]}, "nope"),
        ([first, other / "c.tfrecord"], {}, "one directory"),
    ]:
        with pytest.raises(stokehold.ConfigError, match=says) as e:
            stokehold.Dataset(given, index_dir=ix, **kw)
        assert not isinstance(e.value, stokehold.CorruptDataError), e.value
    # damage: a TFRecord file whose framing breaks at its first record, named by its extension
    bad = tmp_path / "bad"
    bad.mkdir()
    data = bytearray(first.read_bytes())
    data[8] ^= 0xFF  # the first record's length CRC
    (bad / "a.tfrec").write_bytes(bytes(data))
    with pytest.raises(stokehold.CorruptDataError, match="a.tfrec"):
        stokehold.Dataset(bad / "a.tfrec", index_dir=ix)


def test_files_in_object_storage_are_read_in_place_like_local_ones(tfrecords, tars, parquets, tmp_path):
    """TFRecord files, tars and Parquet files in a real S3-compatible server (moto, on 127.0.0.1): the same
    samples and batches as the local files, the index kept (keyed by the ETag) and reused, a
    replaced object scanned again, and the loader's reads announced ahead (prefetch)."""
    from conftest import moto_s3

    d, _ = tfrecords
    key, secret = "stokehold-test", "stokehold-test-secret"
    with moto_s3(key, secret, bucket="inplace") as (endpoint, client):
        options = {"key": key, "secret": secret, "region_name": "us-east-1", "endpoint_url": endpoint, "allow_http": "true"}
        for src, prefix in [(d, "tfr"), (tars, "wds"), (parquets, "pq")]:
            for p in sorted(src.iterdir()):
                client.upload_file(str(p), "inplace", f"{prefix}/{p.name}")
        ix = tmp_path / "ix"
        cases = [
            ("s3://inplace/tfr/train-*", d, dict(format="tfrecord")),
            # ImageNet's extension-less names found by their first bytes, without format=
            ("s3://inplace/tfr/train-*", d, {}),
            ("s3://inplace/wds/*.tar", tars, {}),
            ("s3://inplace/wds/", tars, {}),
            ("s3://inplace/pq", parquets, {}),
        ]
        for url, local_dir, extra in cases:
            remote = stokehold.Dataset(url, storage_options=options, index_dir=ix, **extra)
            local = stokehold.Dataset(local_dir, index_dir=tmp_path / "local-ix", **extra)
            assert remote.access == "remote" and remote.in_place == local.in_place
            assert remote.schema == local.schema
            same_samples(remote, local)
            go = lambda ds: list(stokehold.Loader(ds, 5, shuffle=True, seed=3, threads=2, drop_last=False))  # noqa: E731
            fresh = stokehold.Dataset(url, storage_options=options, index_dir=ix, **extra)
            loader = stokehold.Loader(fresh, 5, shuffle=True, seed=3, threads=2, drop_last=False)
            same_batches(list(loader), go(local))
            st = loader.stats()["storage"]
            assert st["prefetch"]["requests"] > 0 and st["prefetch"]["hits"] > 0, st
        # `index` and `verify` take a prefix with or without its slash, as Dataset does
        so = [f"--storage-option={k}={v}" for k, v in options.items()]
        for url in ("s3://inplace/wds", "s3://inplace/wds/"):
            r = run("index", url, "--index-dir", ix, *so)
            assert r.stdout.startswith(f"indexed {N // PER_FILE} webdataset files"), r.stdout
            r = run("verify", url, "--index-dir", ix, *so)
            assert r.stdout.startswith(f"ok: {N // PER_FILE} webdataset files, {N} samples"), r.stdout
        # the remote indexes are kept, one per object (the two tar cases share theirs)
        kept = sorted(p.name for p in ix.iterdir() if p.name.endswith(".skhidx"))
        assert len(kept) == 3 * (N // PER_FILE), kept
        stamp = {p: p.stat().st_mtime_ns for p in ix.iterdir()}
        stokehold.Dataset("s3://inplace/wds/*.tar", storage_options=options, index_dir=ix)
        assert {p: p.stat().st_mtime_ns for p in ix.iterdir()} == stamp, "kept indexes are reused"
        # an object replaced by another (new ETag): its index is rebuilt and its samples are new
        first = sorted(tars.glob("*.tar"))[0]
        swapped = tmp_path / "swapped.tar"
        with tarfile.open(swapped, "w") as t:
            for ext, data in [("jpg", stokehold.Dataset(tars, index_dir=ix)[0]["jpg"]), ("cls", b"2")]:
                info = tarfile.TarInfo(f"new.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        client.upload_file(str(swapped), "inplace", f"wds/{first.name}")
        ds = stokehold.Dataset("s3://inplace/wds/*.tar", storage_options=options, index_dir=ix)
        assert len(ds) == N - PER_FILE + 1
        assert ds[0]["__key__"] == "new" and ds[0]["cls"] == 2
        # a prefix without a trailing slash: a dataset when it holds a manifest, else its files
        # in place, else the manifest's error
        assert len(stokehold.Dataset("s3://inplace/wds", storage_options=options, index_dir=ix)) == len(ds)
        with pytest.raises(stokehold.StokeholdIOError, match="s3://inplace/nothing/manifest.json.*not found"):
            stokehold.Dataset("s3://inplace/nothing", storage_options=options, index_dir=ix)


# --- Parquet -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def parquets(tmp_path_factory, jpegs):
    """Three Parquet files written by pyarrow in three ways (snappy with dictionary pages and
    their fallback to plain pages, v2 pages in gzip, uncompressed plain pages), in small pages
    and row groups: a Hugging Face ``Image`` struct, a label, a caption null in every 5th row, a
    list of floats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path_factory.mktemp("pq")
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array([{"bytes": jpegs[i], "path": f"{i}.jpg"} for i in range(N)], type=image_type),
            "label": pa.array([i % 3 for i in range(N)], type=pa.int64()),
            "caption": [None if i % 5 == 0 else f"photo {i}" for i in range(N)],
            "emb": pa.array([[i + k / 4 for k in range(i % 3 + 1)] for i in range(N)], type=pa.list_(pa.float32())),
        }
    )
    ways = [
        dict(compression="snappy", use_dictionary=True, dictionary_pagesize_limit=3000),
        dict(compression="gzip", data_page_version="2.0"),
        dict(compression="none", use_dictionary=False),
    ]
    for k, way in enumerate(ways):
        part = table.slice(k * PER_FILE, PER_FILE)
        # pages of one row (each write batch of one row closes a page): a damaged page is one sample
        pq.write_table(part, d / f"train-{k:05d}-of-00003.parquet", row_group_size=5, data_page_size=100, write_batch_size=1, **way)
    return d


def test_parquet_files_in_place_are_the_samples_and_batches_pack_makes_of_them(parquets, jpegs, tmp_path):
    ds = stokehold.Dataset(parquets, index_dir=tmp_path / "ix")
    assert ds.in_place == "parquet" and len(ds) == N
    assert ds.schema == {"caption": "string", "emb": "ndarray:f32", "image": "image:auto", "label": "int64"}
    assert [ds[i]["image"] for i in range(N)] == jpegs  # the files' own bytes
    assert [ds[i]["caption"] for i in range(N)] == ["" if i % 5 == 0 else f"photo {i}" for i in range(N)]
    same_samples(ds, packed(parquets, tmp_path))
    # a real image pipeline over them gives the batches of their pack, whatever the thread count
    go = lambda ds, threads: list(  # noqa: E731
        stokehold.Loader(ds, 5, shuffle=True, seed=4, threads=threads, drop_last=False, transforms={"image": [RandomResizedCrop(16)]})
    )
    a = go(ds, 2)
    same_batches(a, go(stokehold.Dataset(tmp_path / "packed"), 2))
    same_batches(a, go(ds, 1))
    # fields as pack takes them: with the caption required, the rows without one are corrupt
    # samples (counted, named), never rows that vanish
    some = stokehold.Dataset(str(parquets / "*.parquet"), fields=["image", "caption"], index_dir=tmp_path / "ix")
    assert len(some) == N and some.schema == {"image": "image:auto", "caption": "string"}
    assert some.manifest["source"]["lacking_required"] == sum(1 for i in range(N) if i % 5 == 0)
    with pytest.raises(stokehold.CorruptDataError, match='column "caption" is null'):
        some[0]
    back = pickle.loads(pickle.dumps(some))
    assert [back[i] for i in range(N) if i % 5] == [some[i] for i in range(N) if i % 5]


def test_a_hugging_face_dataset_in_parquet_is_read_in_place(jpegs, tmp_path):
    """A dataset made with ``datasets`` (an ``Image`` and a ``ClassLabel`` feature) and written
    with its own ``to_parquet``: read in place with its class names, as ``pack`` stores it."""
    datasets = pytest.importorskip("datasets") if not os.environ.get("CI") else __import__("datasets")
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog", "cow"])})
    # the images embedded (as a dataset pushed to the Hub stores them), not only their paths
    images = [{"bytes": b, "path": f"{i:03d}.jpg"} for i, b in enumerate(jpegs)]
    hf = datasets.Dataset.from_dict({"image": images, "label": [i % 3 for i in range(N)]}, features=features)
    out = tmp_path / "hf"
    out.mkdir()
    hf.to_parquet(str(out / "train-00000-of-00001.parquet"))
    ds = stokehold.Dataset(out, index_dir=tmp_path / "ix")
    assert ds.in_place == "parquet" and len(ds) == N
    assert ds.schema == {"image": "image:auto", "label": "int64"}
    assert ds.classes == ["cat", "dog", "cow"]
    assert [ds[i]["label"] for i in range(N)] == [i % 3 for i in range(N)]
    assert ds[7]["image"] == jpegs[7]
    same_samples(ds, packed(out, tmp_path))


def test_a_damaged_parquet_page_is_named_and_skipped_by_policy(parquets, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in sorted(parquets.iterdir()):
        (bad / p.name).write_bytes(p.read_bytes())
    ds = stokehold.Dataset(bad, index_dir=tmp_path / "ix")
    victim = sorted(bad.iterdir())[2]  # uncompressed plain pages of one row: the JPEGs as they are
    data = bytearray(victim.read_bytes())
    # the middle of the first image's bytes (the file's first copy of them), found through another
    # opening: `ds` has decoded no page yet (a page it holds decoded is served as it was checked)
    first = stokehold.Dataset(bad, index_dir=tmp_path / "ix")[2 * PER_FILE]["image"]
    at = bytes(data).index(first[200:240]) + 10
    data[at] ^= 0x40
    victim.write_bytes(bytes(data))
    with pytest.raises(stokehold.CorruptDataError) as e:
        ds[2 * PER_FILE]
    assert victim.name in str(e.value) and "checksum" in str(e.value), str(e.value)
    loader = stokehold.Loader(ds, 4, shuffle=False, threads=1, on_error="skip", include_ids=True)
    ids = np.concatenate([b["id"][~b["is_padding"]] for b in loader]).tolist()
    assert 2 * PER_FILE not in ids and len(ids) == N - 1
    assert loader.stats()["skipped"] == [2 * PER_FILE]


# --- issue #50: samples that lack a required field are corrupt samples, never gone unseen --------


def _lacking_sets(tmp_path, jpegs):
    """A TFRecord file whose records 4, 9, 15 lack their label (3 of 20); a tar whose samples
    1, 3, 5, 7, 11, 13, 17 lack their .cls (7 of 20); a Parquet file whose image is null in rows
    6 and 30 (2 of 40)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tfr, tar, par = (tmp_path / n for n in ("tfr", "wds", "pq"))
    for d in (tfr, tar, par):
        d.mkdir()
    no_label = {4, 9, 15}
    records = []
    for i in range(20):
        features = {"image/encoded": jpegs[i]}
        if i not in no_label:
            features["label"] = [i % 3]
        records.append(example(features))
    write_tfrecord(tfr / "train.tfrecord", records)
    no_cls = {1, 3, 5, 7, 11, 13, 17}
    with tarfile.open(tar / "shard-0000.tar", "w") as t:
        for i in range(20):
            members = [("jpg", jpegs[i])] + ([] if i in no_cls else [("cls", str(i % 3).encode())])
            for ext, data in members:
                info = tarfile.TarInfo(f"s{i:05d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    null_image = {6, 30}
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    images = [None if i in null_image else {"bytes": jpegs[i % N], "path": f"{i}.jpg"} for i in range(40)]
    table = pa.table({"image": pa.array(images, type=image_type), "label": pa.array([i % 3 for i in range(40)], type=pa.int64())})
    pq.write_table(table, par / "train.parquet", row_group_size=10)
    return [
        (tfr, ["image/encoded", "label"], 20, no_label, "train.tfrecord", 'feature "label" is missing'),
        (tar, ["jpg", "cls"], 20, no_cls, "shard-0000.tar", "no .cls member"),
        (par, ["image", "label"], 40, null_image, "train.parquet", 'column "image" is null'),
    ]


def test_samples_lacking_a_required_field_are_counted_skipped_by_policy_and_named_by_verify(jpegs, tmp_path, capfd):
    for d, fields, total, lacking, name, why in _lacking_sets(tmp_path, jpegs):
        for given in (fields, None):  # with fields= and with pack's own choice of fields
            capfd.readouterr()
            ds = stokehold.Dataset(d, fields=given, index_dir=tmp_path / "ix")
            assert len(ds) == total, (name, given)
            assert ds.manifest["source"]["lacking_required"] == len(lacking), (name, given)
            err = capfd.readouterr().err
            assert f"{len(lacking)} of {total}" in err and "lack a required field" in err, err
            for i in lacking:
                with pytest.raises(stokehold.CorruptDataError, match=why) as e:
                    ds[i]
                assert name in str(e.value) and f"sample {i}" in str(e.value), str(e.value)
        # the loader fails on the first one by default, naming it
        with pytest.raises(stokehold.CorruptDataError, match=why):
            list(stokehold.Loader(ds, 4, shuffle=False, threads=1))
        # skipped and counted within a budget that allows them; over a smaller one, an error
        loader = stokehold.Loader(ds, 4, shuffle=True, threads=2, on_error="skip", max_skip_fraction=0.4, include_ids=True)
        ids = np.concatenate([b["id"][~b["is_padding"]] for b in loader]).tolist()
        assert sorted(ids) == sorted(set(range(total)) - lacking), name
        assert sorted(loader.stats()["skipped"]) == sorted(lacking), name
        with pytest.raises(stokehold.CorruptDataError, match="samples skipped this epoch"):
            list(stokehold.Loader(ds, 4, shuffle=False, threads=1, on_error="skip", max_skip_fraction=0.01))
        # verify --all names each of them and exits 1
        r = run("verify", d, "--all", "--index-dir", tmp_path / "ix", "--fields", ",".join(fields), check=False)
        assert r.returncode == 1, r.stdout
        assert r.stdout.count(why) == len(lacking) and f"FAILED: {len(lacking)} faults" in r.stdout, r.stdout
    with pytest.raises(stokehold.ConfigError, match="max_skip_fraction"):
        stokehold.Loader(ds, 4, on_error="skip", max_skip_fraction=2)


def test_parquet_page_checksums_are_checked_and_help_documents_every_option(jpegs, tmp_path):
    """Issue #50: a byte flipped in a Parquet page before the file was ever indexed is caught by
    the CRC its writer stored (``write_page_checksum=True``), named by file and row, and
    ``verify --all`` fails; a glob that matches nothing says so; ``help(Dataset)`` documents the
    options of files read in place."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "pq"
    d.mkdir()
    table = pa.table({"image": pa.array(jpegs[:12], type=pa.binary()), "label": pa.array([i % 3 for i in range(12)], type=pa.int64())})
    f = d / "crc.parquet"
    # no statistics: a page header would hold copies of its values (min and max)
    pq.write_table(table, f, compression="none", use_dictionary=False, write_page_checksum=True, data_page_size=100,
                   write_batch_size=1, write_statistics=False)
    data = bytearray(f.read_bytes())
    assert bytes(data).count(jpegs[5][-300:-260]) == 1
    at = bytes(data).index(jpegs[5][-300:-260]) + 7  # inside row 5's image, in its own page
    data[at] ^= 0x08
    f.write_bytes(bytes(data))
    ds = stokehold.Dataset(d, index_dir=tmp_path / "ix")
    assert len(ds) == 12
    with pytest.raises(stokehold.CorruptDataError, match="crc.parquet"):
        ds[5]
    assert [ds[i]["image"] for i in range(12) if i != 5] == [jpegs[i] for i in range(12) if i != 5]
    r = run("verify", d, "--all", "--index-dir", tmp_path / "ix", check=False)
    assert r.returncode == 1 and "sample 5" in r.stdout and "FAILED: 1 fault" in r.stdout, r.stdout
    # a glob that matches nothing: a FileNotFoundError-like error naming the pattern
    with pytest.raises(stokehold.StokeholdIOError, match="no file matches") as e:
        stokehold.Dataset(str(d / "val-*.parquet"), index_dir=tmp_path / "ix")
    assert e.value.errno == 2 and "val-*.parquet" in str(e.value)
    # help() shows what the stub says, every option of files read in place among it
    import ast
    import inspect

    stub = ast.parse((Path(stokehold.__file__).parent / "__init__.pyi").read_text())
    cls = next(n for n in stub.body if isinstance(n, ast.ClassDef) and n.name == "Dataset")
    doc = inspect.getdoc(stokehold.Dataset)
    assert " ".join(doc.split()) == " ".join(ast.get_docstring(cls).split())
    for option in ("fields", "format", "index_dir", "index_beside", "storage_options"):
        assert f":param {option}:" in doc, option
