"""JSONL of conversations with image paths (LLaVA-style: ``{"messages": [...], "images":
["a.jpg", ...]}``) read in place (issue #53, item 1): the path lists are lists of images, each
image's size kept in the file's index (read from its header when the file is indexed), the
images' bytes read when a sample is read; the samples and the packed vision-language rows are
those of ``pack`` of the same file."""

import json

import numpy as np
import pytest

import stokehold
from stokehold import StokeholdError
from stokehold._native import _pack

pytest.importorskip("tokenizers")
pytest.importorskip("PIL.Image")

from test_chat import vl_model  # noqa: E402,F401  (a fixture)
from test_sft import rows_of  # noqa: E402
from test_vlm_pack import BUDGET, expected_images, loader, template, vl_samples  # noqa: E402

from stokehold.vision import Qwen2VL  # noqa: E402


def write_jsonl(root, samples):
    """``samples`` as ``root/data.jsonl``, each image a file under ``root/imgs`` named by a path
    relative to the JSONL file's folder. Returns the JSONL file and each sample's paths."""
    (root / "imgs").mkdir(parents=True)
    lines, paths = [], []
    for i, (conv, images) in enumerate(samples):
        names = []
        for k, b in enumerate(images):
            name = f"imgs/{i}_{k}.jpg"
            (root / name).write_bytes(b)
            names.append(name)
        paths.append(names)
        lines.append(json.dumps({"messages": conv, "images": names}))
    src = root / "data.jsonl"
    src.write_text("\n".join(lines) + "\n")
    return src, paths


def test_jsonl_image_paths_read_in_place_are_packs_samples_and_rows(tmp_path, vl_model):
    samples = vl_samples(16, seed=21, max_images=3)
    src, _ = write_jsonl(tmp_path / "src", samples)
    _pack([str(src)], str(tmp_path / "packed"), restart_markers=False)
    packed = stokehold.Dataset(tmp_path / "packed")
    ds = stokehold.Dataset(src)
    assert ds.schema == packed.schema
    assert ds.schema["images"] == "list:image:auto"
    assert len(ds) == len(packed) == len(samples)
    for i, (_conv, images) in enumerate(samples):
        assert ds[i] == packed[i]
        assert ds[i]["images"] == images
        assert ds.image_sizes(i) == packed.image_sizes(i)
    assert sum(len(im) for _, im in samples) > 10
    # packed rows: the same tokens and the same pixels as from the packed copy
    ct = template(vl_model)
    proc = Qwen2VL(**BUDGET)
    kw = dict(seq_len=768, batch_size=2, seed=3, drop_last=False)
    got = list(loader(ds, ct, **kw))
    want = list(loader(packed, ct, **kw))
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            assert np.array_equal(np.asarray(g[k]), np.asarray(w[k])), k
        docs = [d for row in rows_of([g]) for d in row]
        want_pv, want_grid = expected_images(samples, docs, proc)
        assert g["image_grid_thw"].tolist() == np.asarray(want_grid).tolist()
        assert np.array_equal(g["pixel_values"], want_pv)


def test_jsonl_in_object_storage_reads_its_images_from_its_own_prefix(tmp_path, vl_model):
    """The same JSONL file and images in a real S3 server: the scan reads each image's header
    from the store (sizes kept as for the local file), samples and packed rows are the local
    file's; an image gone from the store is an error naming its URL and line."""
    from conftest import moto_s3

    samples = vl_samples(10, seed=23, max_images=3, text_only=0.0)
    root = tmp_path / "src"
    src, paths = write_jsonl(root, samples)
    local = stokehold.Dataset(src, index_dir=tmp_path / "local-ix")
    key, secret = "stokehold-test", "stokehold-test-secret"
    with moto_s3(key, secret, bucket="vlm") as (endpoint, client):
        options = {"key": key, "secret": secret, "region_name": "us-east-1", "endpoint_url": endpoint,
                   "allow_http": "true"}
        client.upload_file(str(src), "vlm", "sft/data.jsonl")
        for names in paths:
            for n in names:
                client.upload_file(str(root / n), "vlm", f"sft/{n}")
        ds = stokehold.Dataset("s3://vlm/sft/data.jsonl", storage_options=options, index_dir=tmp_path / "ix")
        assert ds.schema == local.schema and ds.schema["images"] == "list:image:auto"
        for i in range(len(samples)):
            assert ds.image_sizes(i) == local.image_sizes(i)
            assert ds[i] == local[i]
        kw = dict(seq_len=1024, batch_size=2, seed=5, drop_last=False)
        got, want = list(loader(ds, template(vl_model), **kw)), list(loader(local, template(vl_model), **kw))
        assert len(got) == len(want) > 0
        for g, w in zip(got, want):
            for k in w:
                assert np.array_equal(np.asarray(g[k]), np.asarray(w[k])), k
        j = next(i for i in range(3, len(paths)) if paths[i])
        client.delete_object(Bucket="vlm", Key=f"sft/{paths[j][0]}")
        again = stokehold.Dataset("s3://vlm/sft/data.jsonl", storage_options=options, index_dir=tmp_path / "ix")
        assert again.image_sizes(j) == local.image_sizes(j)  # planned from the kept index
        with pytest.raises(StokeholdError, match=rf"line {j + 1}.*s3://vlm/sft/{paths[j][0]}"):
            again[j]


def test_planning_reads_no_image_and_a_missing_image_names_file_line_and_path(tmp_path, vl_model):
    samples = vl_samples(8, seed=22, text_only=0.0)
    root = tmp_path / "src"
    src, paths = write_jsonl(root, samples)
    ds = stokehold.Dataset(src)
    sizes = [ds.image_sizes(i) for i in range(len(ds))]
    assert all(len(s) == len(p) for s, p in zip(sizes, paths))
    # every image file gone once the file is indexed: planning (from the sizes the index keeps)
    # reads none, so it still plans every conversation; reading a sample names the line and path
    for names in paths:
        for n in names:
            (root / n).unlink()
    again = stokehold.Dataset(src)
    assert [again.image_sizes(i) for i in range(len(again))] == sizes
    ld = loader(again, template(vl_model), seq_len=2048, batch_size=1, seed=0)
    assert ld.stats()["packing"]["conversations"] == len(samples)
    with pytest.raises(StokeholdError, match=rf"data\.jsonl.*line 3.*{paths[2][0]}"):
        again[2]
    with pytest.raises(StokeholdError, match="No such file"):
        list(ld)


def test_a_missing_image_when_indexed_is_noted_and_skipped_when_loading(tmp_path):
    root = tmp_path / "src"
    (root / "imgs").mkdir(parents=True)
    from test_vlm_pack import photo

    for k in range(3):
        (root / f"imgs/{k}.jpg").write_bytes(photo((40 + k, 30), k))
    rows = [{"text": "a", "images": ["imgs/0.jpg"]},
            {"text": "b", "images": ["imgs/1.jpg", "imgs/gone.jpg"]},
            {"text": "c", "images": ["imgs/2.jpg", str(root / "imgs/0.jpg")]}]
    src = root / "rows.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows))
    ds = stokehold.Dataset(src)
    assert ds.schema["images"] == "list:image:auto"
    notes = " ".join(ds.manifest["source"]["notes"])
    assert "line 2 (sample 1)" in notes and "imgs/gone.jpg" in notes
    # an absolute path is read as given; the sample with the missing file lists no sizes
    assert ds.image_sizes(2) == [(42, 30), (40, 30)]
    assert ds.image_sizes(1) == []
    with pytest.raises(StokeholdError, match=r"rows\.jsonl.*line 2.*imgs/gone\.jpg"):
        ds[1]
    # the skip policy applies when loading: replaced by a copy of another sample, its id counted
    ld = stokehold.Loader(ds, 3, shuffle=False, on_error="skip", max_skip_fraction=0.5, include_ids=True)
    (batch,) = list(ld)
    assert ld.stats()["skipped"] == [1]
    assert [bool(p) for p in batch["is_padding"]] == [False, True, False]
    assert batch["text"][0] == "a" and batch["text"][2] == "c"
    assert batch["images"][2] == [(root / "imgs/2.jpg").read_bytes(), (root / "imgs/0.jpg").read_bytes()]
