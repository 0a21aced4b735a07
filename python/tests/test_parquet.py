"""Parquet files written by pyarrow and Hugging Face datasets made here (no downloads), packed
by ``stokehold pack`` and ``stokehold.from_hf`` and read back with ``stokehold.Dataset``."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stokehold

from test_cli import run  # the installed `stokehold` command

if os.environ.get("CI"):
    import datasets  # CI installs it (make setup): a missing datasets must fail, not skip
else:
    datasets = pytest.importorskip("datasets", reason="datasets is not installed (pip install datasets[vision] pyarrow)")


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    """24 small JPEG files (sorted paths)."""
    out = tmp_path_factory.mktemp("imgs")
    run("sample-data", out, "--images", 24, "--classes", 1, "--size", "32x24")
    return sorted(str(p) for p in out.rglob("*.jpg"))


def same_image(stored, path):
    """``stored`` is the JPEG at ``path`` as ``stokehold pack`` stores it by default: rewritten
    losslessly with restart markers (a DRI segment before the scan), the same pixels (PIL's
    libjpeg-turbo decodes both)."""
    from io import BytesIO

    from PIL import Image

    original = open(path, "rb").read()
    assert b"\xff\xdd" in stored.split(b"\xff\xda")[0], "restart markers"
    assert b"\xff\xdd" not in original.split(b"\xff\xda")[0]
    decode = lambda b: np.asarray(Image.open(BytesIO(b)).convert("RGB"))  # noqa: E731
    np.testing.assert_array_equal(decode(stored), decode(original))
    return True


N = 24
CORRUPT = 5  # an image that is not one: skipped and counted
NULL_IMAGE = 9  # a null image: skipped (a required field)
NULL_CAPTION = 14  # stored as "" (a string column with few nulls is optional)


def emb(i):
    return [float(i) + k / 8 for k in range(i % 3 + 1)]


def hf_style_table(jpegs):
    """An HF-style ``Image`` struct column, an int label, a string with a null, a float, a list
    of floats."""
    images = []
    for i, p in enumerate(jpegs[:N]):
        if i == CORRUPT:
            truncated = open(p, "rb").read()[:30]  # a JPEG cut inside its headers
            images.append({"bytes": truncated, "path": "broken.jpg"})
        elif i == NULL_IMAGE:
            images.append(None)
        else:
            images.append({"bytes": open(p, "rb").read(), "path": os.path.basename(p)})
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    return pa.table(
        {
            "image": pa.array(images, type=image_type),
            "label": pa.array([i % 3 for i in range(N)], type=pa.int64()),
            "caption": [None if i == NULL_CAPTION else f"photo {i}" for i in range(N)],
            "score": pa.array([i / 4 for i in range(N)], type=pa.float64()),
            "emb": pa.array([emb(i) for i in range(N)], type=pa.list_(pa.float32())),
        }
    )


def test_pack_of_a_pyarrow_parquet_file_maps_columns_and_counts_bad_rows(tmp_path, jpegs):
    src = tmp_path / "train.parquet"
    pq.write_table(hf_style_table(jpegs), src, row_group_size=5)  # snappy, pyarrow's default
    out = tmp_path / "ds"
    r = run("pack", src, out, "--max-skip-fraction", "0.1")
    assert r.stdout.startswith("packed 22 samples from parquet"), r.stdout
    assert f"{src} row {CORRUPT}: column \"image\": corrupt JPEG" in r.stdout, r.stdout
    assert f"{src} row {NULL_IMAGE}: column \"image\" is null" in r.stdout, r.stdout
    ds = stokehold.Dataset(str(out))
    assert len(ds) == N - 2
    kept = [i for i in range(N) if i not in (CORRUPT, NULL_IMAGE)]
    for stored, i in enumerate(kept):
        s = ds[stored]
        assert same_image(s["image"], jpegs[i])
        assert s["label"] == i % 3
        assert s["caption"] == ("" if i == NULL_CAPTION else f"photo {i}")
        assert s["score"] == i / 4
        assert s["emb"].dtype == np.float32
        np.testing.assert_array_equal(s["emb"], np.array(emb(i), dtype=np.float32))
    skipped = (out / "skipped.txt").read_text().splitlines()
    assert [line.split("\t")[0] for line in skipped] == [f"{src} row {CORRUPT}", f"{src} row {NULL_IMAGE}"]
    # the default limit (1%) refuses this pack, writing nothing
    r = run("pack", src, tmp_path / "refused", check=False)
    assert r.returncode == 1 and "2 of 24 inputs were skipped" in r.stderr, r.stderr
    assert not (tmp_path / "refused").exists()


def test_fields_strict_and_a_damaged_file(tmp_path, jpegs):
    parts = tmp_path / "parts"
    parts.mkdir()
    table = hf_style_table(jpegs)
    pq.write_table(table.slice(0, 12), parts / "0.parquet", compression="zstd")
    pq.write_table(table.slice(12), parts / "1.parquet", compression="gzip")
    out = tmp_path / "ds"
    r = run("pack", parts, out, "--from", "parquet", "--fields", "image,caption", "--max-skip-fraction", "0.2")
    ds = stokehold.Dataset(str(out))
    assert ds.schema == {"image": "image:auto", "caption": "string"}
    # the null caption (row 2 of the second file) is now a required field's null: skipped
    assert len(ds) == N - 3, r.stdout
    assert f"{parts / '1.parquet'} row {NULL_CAPTION - 12}: column \"caption\" is null" in r.stdout
    r = run("pack", parts, tmp_path / "strict", "--strict", check=False)
    assert r.returncode == 1
    assert f"0.parquet row {CORRUPT}" in r.stderr and "--strict" in r.stderr, r.stderr
    # damage the middle of the file: the error names the file and the row group
    src = tmp_path / "one.parquet"
    pq.write_table(table, src, row_group_size=8, compression="none")
    meta = pq.ParquetFile(src).metadata
    col = meta.row_group(1).column(0)  # image.bytes of rows 8..15
    data = bytearray(src.read_bytes())
    start = col.data_page_offset
    data[start : start + col.total_compressed_size] = b"\xa5" * col.total_compressed_size
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    r = run("pack", bad, tmp_path / "never", check=False)
    assert r.returncode == 1 and f"{bad}, row group 1" in r.stderr, r.stderr
    assert not (tmp_path / "never").exists()


def features():
    return datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=["cat", "dog", "cow"]),
            "text": datasets.Value("string"),
            "emb": datasets.List(datasets.Value("float32")),
        }
    )


def hf_dataset(jpegs, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image at all")
    paths = [str(broken) if i == CORRUPT else p for i, p in enumerate(jpegs[:N])]
    return datasets.Dataset.from_dict(
        {
            "image": paths,  # files named by path: their bytes are embedded when packed
            "label": [i % 3 for i in range(N)],
            "text": [f"t{i}" for i in range(N)],
            "emb": [emb(i) for i in range(N)],
        },
        features=features(),
    )


def check_hf_pack(out, jpegs, rows):
    ds = stokehold.Dataset(str(out))
    assert ds.classes == ["cat", "dog", "cow"]
    assert ds.schema == {"emb": "ndarray:f32", "image": "image:auto", "label": "int64", "text": "string"}
    assert len(ds) == len(rows)
    for stored, i in enumerate(rows):
        s = ds[stored]
        assert same_image(s["image"], jpegs[i]), i
        assert (s["label"], s["text"]) == (i % 3, f"t{i}")
        np.testing.assert_array_equal(s["emb"], np.array(emb(i), dtype=np.float32))


def test_from_hf_in_memory_selected_and_saved_to_disk(tmp_path, jpegs):
    hf = hf_dataset(jpegs, tmp_path)
    report = stokehold.from_hf(hf, tmp_path / "mem", max_skip_fraction=0.1, shard_size="8KiB")
    assert report["samples"] == N - 1 and report["shards"] > 1
    assert report["classes"] == ["cat", "dog", "cow"]
    assert [row for row, _ in report["skipped"]] == [f"row {CORRUPT}"]
    assert "not an image" in report["skipped"][0][1]
    check_hf_pack(tmp_path / "mem", jpegs, [i for i in range(N) if i != CORRUPT])
    # the no-temporary-file-left rule: only the dataset is next to it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.jpg", "mem"]
    # select/shuffle indices: the rows in the dataset's order
    picked = hf.select([7, 2, 11])
    stokehold.from_hf(picked, tmp_path / "picked", fields=["image", "label", "text", "emb"])
    check_hf_pack(tmp_path / "picked", jpegs, [7, 2, 11])
    # restart_markers=False (as `pack --no-restart-markers`): the bytes exactly as given
    stokehold.from_hf(picked, tmp_path / "as-given", restart_markers=False)
    as_given = stokehold.Dataset(str(tmp_path / "as-given"))
    assert [as_given[k]["image"] for k in range(3)] == [open(jpegs[i], "rb").read() for i in (7, 2, 11)]
    assert as_given.manifest["source"]["restart_markers"] is False
    # save_to_disk (Arrow files, images embedded) and from_hf of the path: the same dataset
    hf.save_to_disk(str(tmp_path / "saved"))
    stokehold.from_hf(tmp_path / "saved", tmp_path / "disk", max_skip_fraction=0.1, shard_size=8192)
    a, b = stokehold.Dataset(str(tmp_path / "mem")), stokehold.Dataset(str(tmp_path / "disk"))
    assert len(a) == len(b) and all(
        a[i]["image"] == b[i]["image"] and a[i]["label"] == b[i]["label"] for i in range(len(a))
    )
    # a Hugging Face to_parquet file (image paths, not bytes) packs with the command as well
    hf.select([0, 1, 2, 3]).to_parquet(str(tmp_path / "hf.parquet"))
    run("pack", tmp_path / "hf.parquet", tmp_path / "from-cli")
    check_hf_pack(tmp_path / "from-cli", jpegs, [0, 1, 2, 3])


def test_from_hf_refuses_what_it_cannot_pack(tmp_path, jpegs):
    hf = hf_dataset(jpegs, tmp_path)
    with pytest.raises(TypeError, match=r"one split.*ds\['train'\]"):
        stokehold.from_hf(datasets.DatasetDict({"train": hf}), tmp_path / "x")
    with pytest.raises(TypeError, match="datasets.Dataset"):
        stokehold.from_hf([1, 2, 3], tmp_path / "x")
    # the corrupt image is over the default 1% limit: nothing is written
    with pytest.raises(stokehold.StokeholdError, match="1 of 24 inputs were skipped"):
        stokehold.from_hf(hf, tmp_path / "limit")
    assert not (tmp_path / "limit").exists()
    with pytest.raises(stokehold.ConfigError, match='no sample has column "nope"'):
        stokehold.from_hf(hf, tmp_path / "x", fields="image,nope")
    with pytest.raises(stokehold.ConfigError, match="shard_size"):
        stokehold.from_hf(hf, tmp_path / "x", shard_size="lots")
