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
