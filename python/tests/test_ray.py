"""stokehold.ray on a real local Ray cluster (started once for this module, 2 CPUs): the Datasink
and its commit protocol, the reader, the recipes of docs/scale.md, and the faults of issue #16
(a write task killed mid-shard, the driver killed before the commit, mixed schemas), writing to
local disk and to the moto S3 server of test_remote."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

if os.environ.get("CI"):
    import ray  # CI installs it (make setup): a missing ray must fail, not skip
else:
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install stokehold[ray])")

import stokehold  # noqa: E402
import stokehold.ray as sray  # noqa: E402
from stokehold._native import run_cli  # noqa: E402
from test_remote import s3  # noqa: E402,F401  (the moto server fixture)


@pytest.fixture(scope="module")
def cluster():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 2**20,
        log_to_driver=False,
        configure_logging=False,
    )
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.execution_options.preserve_order = True
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def rows(n):
    return [
        {
            "image": bytes([i % 251]) * (50 + i % 17),
            "caption": f"sample {i}",
            "label": i % 5,
            "score": i / 4,
            "emb": np.arange(6, dtype=np.float32).reshape(2, 3) + i,
            "id": i,
        }
        for i in range(n)
    ]


def files_in(path):
    return sorted(os.listdir(path))


def test_datasink_writes_each_row_once_in_order_and_reads_back(cluster, tmp_path):
    items = rows(300)
    dest = tmp_path / "ds"
    ds = ray.data.from_items(items, override_num_blocks=6)
    ds.write_datasink(
        sray.Datasink(dest, overrides={"image": "image:auto"}, shard_size=4096, classes=list("abcde"))
    )
    out = stokehold.Dataset(dest)
    assert out.schema == {
        "image": "image:auto",
        "caption": "string",
        "label": "int64",
        "score": "float64",
        "emb": "ndarray:f32",
        "id": "int64",
    }
    assert len(out) == 300 and out.classes == list("abcde")
    for i in (0, 1, 149, 299):
        got, want = out[i], items[i]
        assert got["image"] == want["image"] and got["caption"] == want["caption"]
        assert (got["label"], got["score"], got["id"]) == (want["label"], want["score"], i)
        np.testing.assert_array_equal(got["emb"], want["emb"])
    assert [out[i]["id"] for i in range(300)] == list(range(300))
    manifest = out.manifest
    shards = [s["file"] for s in manifest["shards"]]
    # several tasks, several shards each, named by run, task and shard; listed in that order
    run = shards[0].split("-")[1]
    assert all(s.startswith(f"shard-{run}-") for s in shards) and shards == sorted(shards)
    assert len({s.split("-")[2] for s in shards}) > 1 and len(shards) > 6
    assert files_in(dest) == sorted(shards + ["manifest.json"])
    # an image field (bytes that are not JPEGs: nothing to rewrite, stored as given)
    assert manifest["source"] == {"kind": "ray", "restart_markers": True, "kept_as_is": 0}
    assert run_cli(["stokehold", "verify", str(dest)]) == 0

    # and back into Ray: one read task per shard range, the same rows
    back = sray.read(dest).take_all()
    assert [r["id"] for r in back] == list(range(300))
    assert back[7]["image"] == items[7]["image"] and back[7]["caption"] == "sample 7"
    np.testing.assert_array_equal(back[7]["emb"], items[7]["emb"])
    assert sray.read(dest, override_num_blocks=3).materialize().num_blocks() >= 3

    # a second job to the same place is refused: it holds a dataset
    with pytest.raises(Exception, match="already exists"):
        ray.data.from_items(items[:5]).write_datasink(sray.Datasink(dest))


KILLER = """
def kill_once(batch, marker={marker!r}):
    import os
    if batch["id"][0] >= {at} and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)   # the worker process dies mid-task, mid-shard; Ray retries the task
    return batch
"""


def test_a_write_task_killed_mid_shard_is_retried_and_every_row_is_written_once(cluster, tmp_path):
    marker = tmp_path / "killed"
    scope = {}
    exec(KILLER.format(marker=str(marker), at=130), scope)
    dest = tmp_path / "ds"
    ds = ray.data.from_items([{"id": i, "blob": bytes([i % 256]) * 300} for i in range(400)],
                             override_num_blocks=2)
    ds = ds.map_batches(scope["kill_once"], batch_size=20, max_retries=3)
    ds.write_datasink(sray.Datasink(dest, shard_size=2000))
    assert marker.exists(), "the task was not killed"
    out = stokehold.Dataset(dest)
    assert [out[i]["id"] for i in range(len(out))] == list(range(400))
    # nothing but the listed shards: the dead attempt's temporary file and extra shards are gone
    listed = sorted(s["file"] for s in out.manifest["shards"])
    assert files_in(dest) == sorted(listed + ["manifest.json"])


DRIVER = """
import os, signal, sys
import ray, stokehold.ray as sray
ray.init(address={address!r}, log_to_driver=False, configure_logging=False)
ray.data.DataContext.get_current().enable_progress_bars = False

class DiesBeforeCommit(sray.Datasink):
    def on_write_complete(self, result):
        print("SHARDS", sum(len(r["shards"]) for r in result.write_returns), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

ray.data.from_items([{{"id": i}} for i in range(500)], override_num_blocks=2).write_datasink(
    DiesBeforeCommit({dest!r}, shard_size=512))
"""


def test_the_driver_killed_before_the_commit_leaves_no_dataset(cluster, tmp_path):
    dest = tmp_path / "ds"
    script = DRIVER.format(address=cluster, dest=str(dest))
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr[-2000:]
    assert "SHARDS" in p.stdout
    leftovers = files_in(dest)
    assert leftovers and "manifest.json" not in leftovers  # shards, but no dataset
    with pytest.raises(stokehold.StokeholdIOError, match="not a stokehold dataset"):
        stokehold.Dataset(dest)
    # the next job removes the dead one's shards and commits its own
    ray.data.from_items([{"id": i} for i in range(10)]).write_datasink(sray.Datasink(dest))
    out = stokehold.Dataset(dest)
    assert len(out) == 10
    assert files_in(dest) == sorted([s["file"] for s in out.manifest["shards"]] + ["manifest.json"])


def test_mixed_schemas_are_one_clear_error_naming_column_and_block_and_leave_nothing(cluster, tmp_path):
    dest = tmp_path / "ds"
    ints = ray.data.from_items([{"x": i, "y": b"a"} for i in range(20)])
    strs = ray.data.from_items([{"x": str(i), "y": b"b"} for i in range(20)])
    with pytest.raises(Exception) as e:
        ints.union(strs).write_datasink(sray.Datasink(dest))
    msg = str(e.value)
    assert re.search(r"block \d+ of write task \d+: column 'x' is", msg) and "int64" in msg, msg
    assert not (dest / "manifest.json").exists()
    assert not [f for f in files_in(dest) if f.startswith("shard-")]

    # a column with no stokehold type is named, with the way out
    with pytest.raises(Exception, match=r"column 'm'.*overrides"):
        ray.data.from_items([{"m": {"k": 1}}]).write_datasink(sray.Datasink(tmp_path / "m"))


def test_datasink_to_s3_and_read_back(cluster, s3):
    client, options = s3
    url = "s3://pyds/ray/ds"
    items = rows(120)
    ray.data.from_items(items, override_num_blocks=3).write_datasink(
        sray.Datasink(url, shard_size=2048, storage_options=options)
    )
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="pyds", Prefix="ray/ds/")["Contents"]]
    out = stokehold.Dataset(url, storage_options=options)
    assert sorted(k.split("/")[-1] for k in keys) == sorted(
        [s["file"] for s in out.manifest["shards"]] + ["manifest.json"]
    )
    assert [out[i]["id"] for i in range(120)] == list(range(120))
    assert out[5]["image"] == items[5]["image"]
    back = sray.read(url, storage_options=options).take_all()
    assert [r["id"] for r in back] == list(range(120))

    # a failed job to S3 leaves no object
    bad = ray.data.from_items([{"x": 1}]).union(ray.data.from_items([{"x": "s"}]))
    with pytest.raises(Exception, match="column 'x'"):
        bad.write_datasink(sray.Datasink("s3://pyds/ray/bad", storage_options=options))
    assert client.list_objects_v2(Bucket="pyds", Prefix="ray/bad/").get("KeyCount", 0) == 0


# --- recipes (docs/scale.md) ---


def test_recipe_jpeg_files_to_a_dataset_the_loader_decodes(cluster, tmp_path):
    images = tmp_path / "images"
    assert run_cli(["stokehold", "sample-data", str(images), "--images", "24", "--classes", "3",
                    "--size", "80x60"]) == 0
    classes = sorted(os.listdir(images))

    def label(batch):
        # keep the JPEG bytes (re-encode here with PIL if the set needs resizing)
        return {
            "image": batch["bytes"],
            "label": np.array([classes.index(p.split("/")[-2]) for p in batch["path"]], np.int64),
        }

    dest = tmp_path / "ds"
    paths = sorted(str(p) for p in images.rglob("*.jpg"))
    ds = ray.data.read_binary_files(paths, include_paths=True).map_batches(label)
    ds.write_datasink(sray.Datasink(dest, overrides={"image": "image:jpeg"}, classes=classes))
    out = stokehold.Dataset(dest)
    assert len(out) == 24 and out.schema == {"image": "image:jpeg", "label": "int64"}
    from stokehold.image import CenterCrop, Resize

    loader = stokehold.Loader(dest, 8, seed=0, transforms={"image": [Resize(32), CenterCrop(32)]})
    labels = np.concatenate([b["label"] for b in loader])
    assert sorted(labels.tolist()) == sorted(classes.index(p.split("/")[-2]) for p in paths)
    assert next(iter(loader))["image"].shape == (8, 3, 32, 32)  # CHW by default


def test_datasink_gives_jpegs_restart_markers_as_pack_does(cluster, tmp_path):
    from test_parquet import same_image

    images = tmp_path / "images"
    assert run_cli(["stokehold", "sample-data", str(images), "--images", "12", "--classes", "2",
                    "--size", "96x64"]) == 0
    paths = sorted(str(p) for p in images.rglob("*.jpg"))
    items = [{"image": open(p, "rb").read(), "id": i} for i, p in enumerate(paths)]
    # a truncated JPEG: the lossless rewrite refuses it, so it is kept as given and counted
    items.append({"image": items[0]["image"][: len(items[0]["image"]) // 2], "id": len(items)})
    overrides = {"image": "image:jpeg"}
    marked, plain = tmp_path / "marked", tmp_path / "plain"
    ray.data.from_items(items, override_num_blocks=3).write_datasink(
        sray.Datasink(marked, overrides=overrides))
    ray.data.from_items(items, override_num_blocks=3).write_datasink(
        sray.Datasink(plain, overrides=overrides, restart_markers=False))
    out, given = stokehold.Dataset(marked), stokehold.Dataset(plain)
    assert out.manifest["source"] == {"kind": "ray", "restart_markers": True, "kept_as_is": 1}
    assert given.manifest["source"] == {"kind": "ray", "restart_markers": False, "kept_as_is": 0}
    for i, p in enumerate(paths):
        assert out[i]["id"] == i
        same_image(out[i]["image"], p)  # restart markers, the same pixels
        assert given[i]["image"] == items[i]["image"]  # as given
    assert out[len(paths)]["image"] == items[-1]["image"]


def test_recipe_tokenized_on_ray_is_byte_identical_to_pack(cluster, tmp_path):
    import tokenizers  # installed by make setup, like the rest of test_text
    from test_text import make_docs, train

    docs = make_docs(300, seed=3)
    train(docs, tmp_path / "tokenizer.json")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    packed = tmp_path / "packed"
    assert run_cli(["stokehold", "pack", str(corpus), str(packed), "--from", "jsonl",
                    "--tokenizer", str(tmp_path / "tokenizer.json"), "--append-eos", "</s>"]) == 0

    tok = stokehold.text.Tokenizer(tmp_path / "tokenizer.json", eos="</s>")
    on_ray = tmp_path / "on_ray"
    (ray.data.read_json(str(corpus), override_num_blocks=4)
        .map_batches(lambda b: {"tokens": tok.encode_batch(list(b["text"]))}, batch_size=64)
        .write_datasink(sray.Datasink(on_ray, tokenizer=tok, shard_size=8192)))

    a, b = stokehold.Dataset(packed), stokehold.Dataset(on_ray)
    assert len(a) == len(b) == 300
    assert all(a.record_bytes(i) == b.record_bytes(i) for i in range(300))
    assert a.manifest["source"]["tokens"] == b.manifest["source"]["tokens"]
    # the whole source as pack writes it (its keys spelled once, in Rust), but for who wrote it
    assert {**a.manifest["source"], "kind": "ray"} == b.manifest["source"]
    assert (packed / "tokenizer.json").read_bytes() == (on_ray / "tokenizer.json").read_bytes()
    assert len(b.manifest["shards"]) > 1
    # read back through Ray: each document's tokens as the dataset gives them
    back = sray.read(on_ray).take_all()
    assert len(back) == 300
    for i in (0, 1, 150, 299):
        np.testing.assert_array_equal(np.asarray(back[i]["tokens"]), b[i]["tokens"])
        assert np.asarray(back[i]["tokens"]).dtype == b[i]["tokens"].dtype
    kw = dict(seq_len=32, batch_size=4, seed=1, rank=0, world_size=1)
    for x, y in zip(stokehold.SequenceLoader(packed, **kw), stokehold.SequenceLoader(on_ray, **kw)):
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])


def test_read_gives_each_row_as_the_dataset_does_for_every_field_type(cluster, tmp_path):
    """ray.read's rows (records read and decoded in Rust into Arrow batches) equal ds[i], field
    for field, type for type: bytes, strings, numbers, arrays of one shape and of varying shapes;
    a damaged record is an error naming its shard file, not a wrong row."""
    schema = {"raw": "bytes", "s": "string", "n": "int64", "x": "float64",
              "fixed": "ndarray:f32", "ragged": "ndarray:i64", "h": "ndarray:f16", "u": "ndarray:u8"}
    dest = tmp_path / "typed"
    rng = np.random.default_rng(5)
    with stokehold.ShardWriter(dest, schema, shard_size=2048) as w:
        for i in range(90):
            w.write({
                "raw": bytes(rng.integers(0, 256, i % 13, dtype=np.uint8)),
                "s": f"row {i} é",
                "n": i * 7 - 300,
                "x": i / 3,
                "fixed": np.arange(12, dtype=np.float32).reshape(3, 4) * i,
                "ragged": np.arange(i % 5 * 2, dtype=np.int64).reshape(i % 5, 2),
                "h": np.full((2,), i, dtype=np.float16),
                "u": np.arange(i % 4, dtype=np.uint8),
            })
    ds = stokehold.Dataset(dest)
    assert len(ds.manifest["shards"]) > 3
    back = sray.read(dest, override_num_blocks=2).take_all()
    assert len(back) == 90
    for i, row in enumerate(back):
        want = ds[i]
        assert set(row) == set(want)
        for k, v in want.items():
            g = row[k]
            if isinstance(v, np.ndarray):
                g = np.asarray(g)
                assert (g.dtype, g.shape) == (v.dtype, v.shape), (i, k, g.dtype, g.shape)
                np.testing.assert_array_equal(g, v)
            else:
                assert type(g) is type(v) and g == v, (i, k, g, v)
    # a damaged record (its checksum no longer holds): the read fails naming the shard file
    shard = dest / ds.manifest["shards"][1]["file"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the records (the header is first, the index last)
    shard.write_bytes(bytes(data))
    with pytest.raises(Exception, match=f"checksum.*{re.escape(shard.name)}|{re.escape(shard.name)}.*checksum"):
        sray.read(dest).take_all()


WORKER = """
import json, pickle, sys
import stokehold
path, rank, world, steps, state_in, state_out = sys.argv[1:]
loader = stokehold.Loader(path, batch_size=4, seed=7, include_ids=True, rank=int(rank), world_size=int(world))
if state_in != "-":
    loader.load_state_dict(pickle.load(open(state_in, "rb")))
ids = []
it = iter(loader)
for step, batch in enumerate(it):
    ids += batch["id"].tolist()
    if step + 1 == int(steps):
        break
if state_out != "-":
    pickle.dump(loader.state_dict(), open(state_out, "wb"))
print(json.dumps(ids))
"""


def test_recipe_training_workers_resume_on_another_worker_count(cluster, tmp_path):
    dest = tmp_path / "ds"
    ray.data.from_items([{"id": i, "x": float(i)} for i in range(88)], override_num_blocks=3).write_datasink(
        sray.Datasink(dest, shard_size=512)
    )

    def worker(rank, world, steps, state_in="-", state_out="-"):
        p = subprocess.run([sys.executable, "-c", WORKER, str(dest), str(rank), str(world), str(steps),
                            state_in, state_out], capture_output=True, text=True, timeout=120, check=True)
        return json.loads(p.stdout.splitlines()[-1])

    # two workers, 5 steps each; each saves its state (the same position on every rank)
    first = []
    for rank in range(2):
        first += worker(rank, 2, 5, state_out=str(tmp_path / f"state{rank}"))
    # resumed by three workers: the rest of the epoch (48 = 4 steps of 3 x 4), every sample
    # exactly once
    rest = []
    for rank in range(3):
        rest += worker(rank, 3, 10**6, state_in=str(tmp_path / "state0"))
    assert len(first) == 40
    assert sorted(first + rest) == list(range(88))


def test_stokehold_ray_without_ray_is_an_import_error_naming_the_extra():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["ray"] = None
        try:
            import stokehold.ray
        except ImportError as e:
            print(e)
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install stokehold[ray]" in p.stdout, p.stdout + p.stderr


def test_one_arrow_table_gives_the_same_schema_and_records_through_pack_from_hf_and_the_datasink(tmp_path, cluster):
    """The ingest contract: one Arrow → stokehold mapping (Rust's, stokehold_ingest::arrow) for
    every writer that takes Arrow data."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 30
    table = pa.table({
        "blob": pa.array([bytes([i]) * (3 + i % 5) for i in range(n)], pa.binary()),
        "text": pa.array([f"row {i}" for i in range(n)], pa.large_string()),
        "flag": pa.array([i % 2 == 0 for i in range(n)]),
        "small": pa.array([i - 20 for i in range(n)], pa.int8()),
        "big": pa.array([i * 10**12 for i in range(n)], pa.uint64()),
        "half": pa.array(np.arange(n, dtype=np.float16)),
        "x": pa.array([i / 3 for i in range(n)], pa.float32()),
        "ids16": pa.array([[i, -i, 7] for i in range(n)], pa.list_(pa.int16())),
        "mask": pa.array([[i % 2 == 0, True] for i in range(n)], pa.list_(pa.bool_())),
        "u32": pa.array([[i, 2**31 + i] for i in range(n)], pa.list_(pa.uint32())),
        "emb": pa.array([[i / 2, 1.5] for i in range(n)], pa.list_(pa.float32(), 2)),
        "f64s": pa.array([[float(i)] * (i % 3) for i in range(n)], pa.list_(pa.float64())),
    })
    expected = {
        "blob": "bytes", "text": "string", "flag": "int64", "small": "int64", "big": "int64",
        "half": "float64", "x": "float64", "ids16": "ndarray:i32", "mask": "ndarray:u8",
        "u32": "ndarray:i64", "emb": "ndarray:f32", "f64s": "ndarray:f64",
    }
    assert sray.schema_from_arrow(table.schema) == expected

    pq.write_table(table, tmp_path / "t.parquet")
    assert run_cli(["stokehold", "pack", str(tmp_path / "t.parquet"), str(tmp_path / "packed")]) == 0
    stokehold.from_hf(datasets.Dataset(table), tmp_path / "hf")
    ray.data.from_arrow(table).write_datasink(sray.Datasink(str(tmp_path / "ray")))

    def plain(v):
        return (str(v.dtype), v.tolist()) if isinstance(v, np.ndarray) else v

    made = {w: stokehold.Dataset(tmp_path / w) for w in ("packed", "hf", "ray")}
    for writer, ds in made.items():
        assert ds.schema == expected, writer
        assert [{k: plain(v) for k, v in ds[i].items()} for i in range(len(ds))] == [
            {k: plain(v) for k, v in made["packed"][i].items()} for i in range(n)
        ], writer
    assert made["ray"][3]["ids16"].tolist() == [3, -3, 7] and made["ray"][3]["mask"].dtype == np.uint8


def test_datasink_writes_lists_of_images_and_read_gives_them_back(cluster, tmp_path):
    """A column of lists of image bytes, or of Hugging Face image structs, is a ``list:image``
    field (schema_from_arrow and the first items say so), each image's size kept in the index;
    ``stokehold.ray.read`` gives the lists back."""
    import io

    import pyarrow as pa
    from PIL import Image

    def encoded(w, h, fmt):
        b = io.BytesIO()
        Image.new("RGB", (w, h), (w % 256, h % 256, 7)).save(b, format=fmt)
        return b.getvalue()

    lists = [[encoded(10 + i, 5 + k, "JPEG" if k % 2 else "PNG") for k in range(i % 3)]
             for i in range(12)]
    lists[0] = [encoded(40, 30, "WEBP")]
    items = [{"images": imgs, "tags": [f"t{i}"] * (i % 2), "id": i} for i, imgs in enumerate(lists)]
    plain = tmp_path / "plain"
    ray.data.from_items(items, override_num_blocks=2).write_datasink(
        sray.Datasink(plain, restart_markers=False))
    ds = stokehold.Dataset(plain)
    assert ds.schema == {"images": "list:image:auto", "tags": "list:string", "id": "int64"}
    assert ds.manifest["source"]["restart_markers"] is False
    for i, imgs in enumerate(lists):
        assert ds[i]["id"] == i and ds[i]["images"] == imgs
        assert ds.image_sizes(i) == [Image.open(io.BytesIO(b)).size for b in imgs]
    # read back through Arrow: the same lists
    back = sorted(sray.read(plain, override_num_blocks=2).take_all(), key=lambda r: r["id"])
    assert [list(r["images"]) for r in back] == lists
    assert [list(r["tags"]) for r in back] == [ds[i]["tags"] for i in range(12)]

    # Hugging Face's Sequence(Image()) storage: a list of {bytes, path} structs
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table({
        "frames": pa.array([[{"bytes": b, "path": None} for b in imgs] for imgs in lists],
                           type=pa.list_(image)),
        "id": list(range(12)),
    })
    assert sray.schema_from_arrow(table.schema) == {"frames": "list:image:auto", "id": "int64"}
    marked = tmp_path / "marked"
    ray.data.from_arrow(table).write_datasink(sray.Datasink(marked))
    out = stokehold.Dataset(marked)
    assert out.manifest["source"]["restart_markers"] is True
    for i, imgs in enumerate(lists):
        got = out[i]["frames"]
        # JPEGs rewritten with restart markers (as pack does), PNG and WebP as given; the sizes
        # are the images'
        assert [Image.open(io.BytesIO(b)).size for b in got] == out.image_sizes(i, "frames") == [
            Image.open(io.BytesIO(b)).size for b in imgs]
        for g, b in zip(got, imgs):
            assert (b"\xff\xdd" in g.split(b"\xff\xda")[0]) if b[:2] == b"\xff\xd8" else g == b
    # a write task whose first block's lists are all empty (pyarrow types it list<null>) cannot
    # tell their type: an error saying to give it, and with it given, the lists are written
    mixed = [{"images": lists[1], "id": 0}, {"images": lists[2], "id": 1},
             {"images": [], "id": 2}, {"images": [], "id": 3}]
    with pytest.raises(Exception, match=r"column 'images' holds only nulls or empty lists.*overrides"):
        ray.data.from_items(mixed, override_num_blocks=2).write_datasink(
            sray.Datasink(tmp_path / "unknown"))
    ray.data.from_items(mixed, override_num_blocks=2).write_datasink(
        sray.Datasink(tmp_path / "empties", overrides={"images": "list:image"},
                      restart_markers=False))
    empties = stokehold.Dataset(tmp_path / "empties")
    assert empties.schema["images"] == "list:image:auto"  # (list:image is list:image:auto)
    assert [empties[i]["images"] for i in range(4)] == [lists[1], lists[2], [], []]
    # an item with only a path: an error naming the column, row and item
    table = pa.table({"frames": pa.array([[{"bytes": None, "path": "x.jpg"}]], type=pa.list_(image))})
    with pytest.raises(Exception, match=r"column 'frames', row 0, item 0: an image with no bytes"):
        ray.data.from_arrow(table).write_datasink(sray.Datasink(tmp_path / "no"))
