"""The list field type (docs/format.md §3, §4.2-4.3): several images per sample through
ShardWriter, read back in order, their sizes from the shards' meta blocks without decoding."""

import io

import pytest
from PIL import Image

import stokehold


def jpeg(w, h, color=(200, 30, 40)):
    b = io.BytesIO()
    Image.new("RGB", (w, h), color).save(b, format="JPEG")
    return b.getvalue()


def test_several_images_per_sample_round_trip_with_their_sizes_in_the_index(tmp_path):
    out = tmp_path / "ds"
    samples = [[(64, 48), (17, 33)], [], [(300, 20)]]
    with stokehold.ShardWriter(out, {"id": "int64", "images": "list:image", "names": "list:string"}) as w:
        for i, sizes in enumerate(samples):
            w.write({"id": i, "images": [jpeg(*s) for s in sizes], "names": [f"n{k}" for k in range(len(sizes))]})
        with pytest.raises(stokehold.SchemaError, match="images"):
            w.write({"id": 9, "images": [b"GIF89a not an image"], "names": []})
        with pytest.raises(stokehold.SchemaError, match="a list of items"):
            w.write({"id": 9, "images": jpeg(2, 2), "names": []})  # bytes, not a list of them
    ds = stokehold.Dataset(out)
    assert ds.schema == {"id": "int64", "images": "list:image:auto", "names": "list:string"}
    assert len(ds) == 3
    for i, sizes in enumerate(samples):
        s = ds[i]
        assert [Image.open(io.BytesIO(b)).size for b in s["images"]] == sizes
        assert s["names"] == [f"n{k}" for k in range(len(sizes))]
        assert ds.image_sizes(i) == sizes
    with pytest.raises(stokehold.SchemaError, match="not a list of images"):
        ds.image_sizes(0, "names")
    with pytest.raises(IndexError):
        ds.image_sizes(3)
    # in a loader's batch: a list of each sample's list
    batch = next(iter(stokehold.Loader(out, batch_size=3, shuffle=False)))
    assert batch["images"] == [ds[i]["images"] for i in range(3)]
    assert batch["names"] == [["n0", "n1"], [], ["n0"]]


# ---- pack into list fields: Parquet / Hugging Face, JSONL, WebDataset --------------------------

import json  # noqa: E402
import tarfile  # noqa: E402

from stokehold._native import _pack  # noqa: E402


def encoded(w, h, fmt, seed=0):
    """A ``w`` × ``h`` image encoded as ``fmt`` (JPEG, PNG or WEBP), different for each seed."""
    b = io.BytesIO()
    Image.new("RGB", (w, h), (seed * 40 % 256, 90, 200 - seed)).save(b, format=fmt)
    return b.getvalue()


# per sample: its images, of several sizes and formats (and a sample with none)
SAMPLES = [
    [encoded(64, 48, "JPEG", 1), encoded(17, 33, "PNG", 2)],
    [],
    [encoded(30, 20, "WEBP", 3), encoded(8, 9, "JPEG", 4), encoded(300, 7, "PNG", 5)],
]


def check_lists(out, samples, field="images"):
    """Dataset ``out`` holds ``samples``' images as given, in order, and each image's size as PIL
    reads it, from the index."""
    ds = stokehold.Dataset(out)
    assert ds.schema[field] == "list:image:auto"
    assert len(ds) == len(samples)
    for i, imgs in enumerate(samples):
        assert ds[i][field] == imgs
        assert ds.image_sizes(i, field) == [Image.open(io.BytesIO(b)).size for b in imgs]
    return ds


def test_hugging_face_sequences_of_images_pack_into_a_list_of_images(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"images": datasets.Sequence(datasets.Image()), "text": datasets.Value("string")}
    )
    hf = datasets.Dataset.from_dict(
        {"images": [[{"bytes": b, "path": None} for b in s] for s in SAMPLES],
         "text": [f"t{i}" for i in range(len(SAMPLES))]},
        features=features,
    )
    report = stokehold.from_hf(hf, tmp_path / "hf", restart_markers=False)
    assert report["samples"] == 3
    ds = check_lists(tmp_path / "hf", SAMPLES)
    assert ds[2]["text"] == "t2"
    # images given by their path only: the files' bytes
    for k, b in enumerate(SAMPLES[2]):
        (tmp_path / f"{k}.img").write_bytes(b)
    paths = datasets.Dataset.from_dict(
        {"images": [[str(tmp_path / f"{k}.img") for k in range(3)]]},
        features=datasets.Features({"images": datasets.Sequence(datasets.Image())}),
    )
    stokehold.from_hf(paths, tmp_path / "paths", restart_markers=False)
    check_lists(tmp_path / "paths", [SAMPLES[2]])


def test_parquet_lists_of_binary_and_strings_pack_into_list_fields(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "photos": pa.array(SAMPLES, type=pa.list_(pa.binary())),
        "blobs": pa.array([[b"x", b""], [], [b"yz"]], type=pa.list_(pa.large_binary())),
        "tags": pa.array([["a", "b"], [], ["c"]], type=pa.list_(pa.string())),
    })
    pq.write_table(table, tmp_path / "t.parquet")
    _pack([str(tmp_path / "t.parquet")], str(tmp_path / "ds"), restart_markers=False)
    ds = check_lists(tmp_path / "ds", SAMPLES, "photos")
    assert ds.schema == {"photos": "list:image:auto", "blobs": "list:bytes", "tags": "list:string"}
    assert [ds[i]["blobs"] for i in range(3)] == [[b"x", b""], [], [b"yz"]]
    assert [ds[i]["tags"] for i in range(3)] == [["a", "b"], [], ["c"]]
    # read in place: the same samples, the sizes from the file's index
    in_place = stokehold.Dataset(str(tmp_path / "t.parquet"), index_dir=tmp_path / "ix")
    assert in_place.schema == ds.schema
    for i in range(3):
        assert in_place[i] == ds[i]
        assert in_place.image_sizes(i, "photos") == ds.image_sizes(i, "photos")
    # a bad item: its row is skipped, named with the column and the item
    bad = pa.table({"photos": pa.array([SAMPLES[0], [SAMPLES[0][0], b"GIF89a..."]],
                                       type=pa.list_(pa.binary()))})
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(Exception, match=r"bad\.parquet row 1.*column \"photos\".*item 1"):
        _pack([str(tmp_path / "bad.parquet")], str(tmp_path / "no"), strict=True)


def ext_of(b):
    """The file extension of an encoded image's format."""
    return {b"\xff\xd8": "jpg", b"\x89P": "png", b"RI": "webp"}[b[:2]]


def write_files(folder, samples):
    """Each sample's images as files ``s{i}_{k}.<ext>`` under ``folder``; their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, imgs in enumerate(samples):
        names.append([])
        for k, b in enumerate(imgs):
            ext = ext_of(b)
            (folder / f"s{i}_{k}.{ext}").write_bytes(b)
            names[-1].append(f"{folder.name}/s{i}_{k}.{ext}")
    return names


def test_jsonl_lists_of_image_paths_pack_into_a_list_of_images(tmp_path):
    names = write_files(tmp_path / "imgs", SAMPLES)
    rows = [{"id": i, "images": n, "messages": [{"role": "user", "content": "hi"}]}
            for i, n in enumerate(names)]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    report = _pack([str(tmp_path / "rows.jsonl")], str(tmp_path / "ds"), restart_markers=False)
    assert any("list:image" in n for n in report["notes"])
    ds = check_lists(tmp_path / "ds", SAMPLES)
    assert ds.schema == {"id": "int64", "images": "list:image:auto", "messages": "json"}
    # a missing file: the line and the path
    rows[1]["images"] = ["imgs/nowhere.jpg"]
    (tmp_path / "bad.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(Exception, match=r"bad\.jsonl:2.*item 0.*imgs/nowhere\.jpg"):
        _pack([str(tmp_path / "bad.jsonl")], str(tmp_path / "no"), strict=True)


def test_webdataset_numbered_image_members_pack_into_a_list_of_images(tmp_path):
    path = tmp_path / "shard-000.tar"
    with tarfile.open(path, "w") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        for i, imgs in enumerate(SAMPLES):
            # written out of order: the numbers give the order
            for k in reversed(range(len(imgs))):
                add(f"sample{i:03d}.{k}.{ext_of(imgs[k])}", imgs[k])
            add(f"sample{i:03d}.txt", f"caption {i}".encode())
    _pack([str(path)], str(tmp_path / "ds"), restart_markers=False)
    ds = check_lists(tmp_path / "ds", SAMPLES)
    assert ds.schema == {"__key__": "string", "images": "list:image:auto", "txt": "string"}
    assert ds[1]["txt"] == "caption 1"
    # read in place: the same samples, the sizes read from the headers by the scan
    in_place = stokehold.Dataset(str(path), index_dir=tmp_path / "ix")
    assert in_place.schema == ds.schema
    assert [in_place[i] for i in range(3)] == [ds[i] for i in range(3)]
    assert [in_place.image_sizes(i) for i in range(3)] == [ds.image_sizes(i) for i in range(3)]
