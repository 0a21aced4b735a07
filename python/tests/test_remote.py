"""Datasets in object storage from Python, against a real S3-compatible server (moto's, started
here on 127.0.0.1; `make setup` installs moto[server])."""

import os
import time

import numpy as np
import pytest

import stokehold
from _loader_helpers import write
from conftest import moto_s3

KEY, SECRET = "stokehold-test", "stokehold-test-secret"


@pytest.fixture(scope="module")
def s3():
    with moto_s3(KEY, SECRET, bucket="pyds") as (endpoint, client):
        options = {
            "key": KEY,
            "secret": SECRET,
            "region_name": "us-east-1",
            "endpoint_url": endpoint,
            "allow_http": "true",
        }
        yield client, options


def upload(client, local, prefix):
    for name in sorted(os.listdir(local)):
        client.upload_file(os.path.join(local, name), "pyds", f"{prefix}/{name}")


def test_a_dataset_in_s3_reads_and_loads_like_the_local_one(s3, tmp_path):
    client, options = s3
    local = write(tmp_path / "ds", 300, shard_size=4096)
    assert len(local.manifest["shards"]) > 3
    upload(client, tmp_path / "ds", "data/ds")

    remote = stokehold.Dataset("s3://pyds/data/ds", storage_options=options)
    assert remote.access == "remote" and local.access == "pread"
    assert len(remote) == len(local) == 300
    assert remote.manifest == local.manifest
    for i in range(len(local)):
        assert remote.record_bytes(i) == local.record_bytes(i)
    assert remote[7]["name"] == local[7]["name"]
    assert SECRET not in repr(remote)

    def batches(ds):
        loader = stokehold.Loader(ds, 32, seed=5, threads=2)
        return [b for b in loader], loader.stats()

    # a dataset opened afresh: its request counts are the loader's alone
    fresh = stokehold.Dataset("s3://pyds/data/ds", storage_options=options)
    (got, remote_stats), (want, local_stats) = batches(fresh), batches(local)
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            np.testing.assert_equal(g[k], w[k])
    # the loader announced its batches ahead: most reads found their bytes already fetched
    assert local_stats["storage"] is None
    st = remote_stats["storage"]
    assert st["prefetch"]["requests"] > 0 and st["prefetch"]["hits"] > st["prefetch"]["misses"], st
    assert st["bytes"] >= st["prefetch"]["bytes"] > 0, st
    assert "object storage:" in stokehold.Loader(remote, 32).report()


def test_missing_objects_and_bad_options_are_one_clear_error(s3):
    client, options = s3
    with pytest.raises(stokehold.StokeholdIOError, match="s3://pyds/nothing/manifest.json.*not found"):
        stokehold.Dataset("s3://pyds/nothing", storage_options=options)
    with pytest.raises(stokehold.ConfigError, match="no_such_option") as e:
        stokehold.Dataset("s3://pyds/nothing", storage_options={**options, "no_such_option": "hunter2"})
    assert "hunter2" not in str(e.value)


def test_cache_dir_keeps_a_local_copy_of_an_s3_dataset_for_later_runs(s3, tmp_path):
    client, options = s3
    local = write(tmp_path / "ds", 300, shard_size=4096)
    upload(client, tmp_path / "ds", "cached/ds")
    url = "s3://pyds/cached/ds"
    want = [b for b in stokehold.Loader(local, 32, seed=3, threads=2)]

    def run():
        ds = stokehold.Dataset(url, storage_options=options)
        loader = stokehold.Loader(ds, 32, seed=3, threads=2, cache_dir=tmp_path / "cache")
        got = [b for b in loader]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            for k in w:
                np.testing.assert_equal(g[k], w[k])
        return loader

    first = run()
    # the copies land in the background while the first run streams (it may end first)
    deadline = time.monotonic() + 30
    while True:
        copies = [p for p in (tmp_path / "cache").iterdir() if p.name.endswith(".skh")]
        if len(copies) == len(local.manifest["shards"]) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(copies) == len(local.manifest["shards"]), copies
    first.close()
    # a later run: the shards come from the local copies, no GET for records
    st = run().stats()
    assert st["caches"]["disk"]["hits"] == len(copies), st["caches"]
    assert st["storage"]["prefetch"]["requests"] == 0, st["storage"]


def test_shard_writer_writes_to_s3_and_the_dataset_exists_only_after_close(s3, tmp_path):
    client, options = s3
    url = "s3://pyds/written/ds"
    rows = [{"b": bytes([i % 251]) * (100 + i), "n": i} for i in range(200)]
    w = stokehold.ShardWriter(url, {"b": "bytes", "n": "int64"}, shard_size=4096, storage_options=options)
    for r in rows:
        w.write(r)
    with pytest.raises(stokehold.StokeholdIOError, match="manifest.json"):
        stokehold.Dataset(url, storage_options=options)
    w.close()
    ds = stokehold.Dataset(url, storage_options=options)
    assert len(ds) == 200 and len(ds.manifest["shards"]) > 3
    assert [ds[i]["n"] for i in range(200)] == list(range(200))
    assert ds[123]["b"] == rows[123]["b"]

    # abort (or an exception in a with block) leaves no object under the prefix
    with pytest.raises(RuntimeError):
        with stokehold.ShardWriter("s3://pyds/aborted/ds", {"b": "bytes"}, shard_size=1024, storage_options=options) as w:
            for i in range(100):
                w.write({"b": b"x" * 200})
            raise RuntimeError("stop")
    assert client.list_objects_v2(Bucket="pyds", Prefix="aborted/").get("KeyCount", 0) == 0


def test_wrong_credentials_are_one_clear_error_naming_the_url(s3, tmp_path):
    client, options = s3
    write(tmp_path / "ds", 20, shard_size=4096)
    upload(client, tmp_path / "ds", "auth/ds")
    # moto checks credentials once its count of unauthenticated actions is used up: make it 0
    from moto import settings

    old = settings.INITIAL_NO_AUTH_ACTION_COUNT
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    try:
        with pytest.raises(stokehold.StokeholdIOError) as e:
            stokehold.Dataset("s3://pyds/auth/ds", storage_options={**options, "secret": "not-the-secret"})
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT = old
    msg = str(e.value)
    assert "s3://pyds/auth/ds/manifest.json" in msg and "access denied (check the credentials)" in msg, msg
    assert "not-the-secret" not in msg and SECRET not in msg
    # the same dataset reads with the right credentials
    assert len(stokehold.Dataset("s3://pyds/auth/ds", storage_options=options)) == 20


def test_writes_to_s3_without_credentials_say_which_are_missing_as_reads_do(s3, monkeypatch):
    client, options = s3
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    # no keys; the chain's last source (instance metadata) on the loopback, never 169.254.169.254
    bare = {k: v for k, v in options.items() if k not in ("key", "secret")}
    bare.update(aws_metadata_endpoint="http://127.0.0.1:9", retries=0)
    for make in (
        lambda: stokehold.ShardWriter("s3://pyds/nocreds/ds", {"n": "int64"}, storage_options=bare),
        lambda: stokehold.Dataset("s3://pyds/nocreds/*.tfrecord", storage_options=bare),
        lambda: stokehold.Dataset("s3://pyds/nocreds/ds", storage_options=bare),
    ):
        with pytest.raises(stokehold.StokeholdError) as e:
            make()
        msg = str(e.value)
        assert "no credentials were found for s3://pyds/nocreds" in msg and "AWS_ACCESS_KEY_ID" in msg, msg
        assert "anon=true" in msg and "169.254" not in msg, msg


def test_storage_options_take_bools_and_numbers_and_the_loaders_take_them_for_a_url(s3, tmp_path):
    client, options = s3
    write(tmp_path / "ds", 40, shard_size=4096)
    upload(client, tmp_path / "ds", "opts/ds")
    # {"anon": False}, {"retries": 3}: as fsspec users write them (not "'bool' object is not an
    # instance of 'str'")
    ds = stokehold.Dataset("s3://pyds/opts/ds", storage_options={**options, "anon": False, "retries": 3})
    assert len(ds) == 40
    # {"anon": True} is taken as true: requests go unsigned, which this private bucket refuses
    with pytest.raises(stokehold.StokeholdIOError, match="access denied to s3://pyds/opts/ds"):
        stokehold.Dataset("s3://pyds/opts/ds", storage_options={**options, "anon": True, "retries": 0})
    with pytest.raises(stokehold.ConfigError, match=r"storage_options\['retries'\] must be a str, a bool or a number, got a list"):
        stokehold.Dataset("s3://pyds/opts/ds", storage_options={**options, "retries": [3]})
    with pytest.raises(stokehold.ConfigError, match="storage_options must be a dict"):
        stokehold.Dataset("s3://pyds/opts/ds", storage_options="anon=true")
    # the Loader (and SequenceLoader) open a URL with storage_options, as messages say
    loader = stokehold.Loader("s3://pyds/opts/ds", 8, storage_options=options, shuffle=False)
    assert sum(len(b["label"]) for b in loader) == 40
    assert SECRET not in repr(loader)
    with pytest.raises(stokehold.ConfigError, match="storage_options applies to a dataset given as a path"):
        stokehold.Loader(ds, 8, storage_options=options)
    with pytest.raises(stokehold.StokeholdIOError, match="manifest.json"):
        stokehold.SequenceLoader("s3://pyds/opts/none", seq_len=8, batch_size=2, storage_options=options)
