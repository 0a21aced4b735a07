"""stokehold.vision.Qwen2VL against transformers' Qwen2-VL image processors (issue #53, item 3).

The images are made here (smooth gradients with noise, JPEG-encoded by Pillow); the references
are `transformers`' `Qwen2VLImageProcessorPil` (Pillow's bicubic) and `Qwen2VLImageProcessor`
(torchvision's), both real, both given the same decoded image.
"""

import io
import pickle

import numpy as np
import pytest

import stokehold
from stokehold.vision import Qwen2VL

import transformers  # noqa: E402,F401  (a test requirement: python/requirements/test-tools.txt)
from PIL import Image  # noqa: E402  (transformers' PIL processor needs Pillow anyway)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor  # noqa: E402

MAX = 28 * 28 * 1280


def jpeg(w, h, seed=0, quality=90):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / max(w - 1, 1), y * 255 / max(h - 1, 1), ((x + y) % 64) * 4], -1)
    a = np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)
    b = io.BytesIO()
    Image.fromarray(a).save(b, "JPEG", quality=quality)
    return b.getvalue()


def references(data, max_pixels):
    img = Image.open(io.BytesIO(data)).convert("RGB")
    kw = dict(min_pixels=56 * 56, max_pixels=max_pixels)
    pil = Qwen2VLImageProcessorPil(**kw)(images=[img], return_tensors="np")
    tv = Qwen2VLImageProcessor(**kw)(images=[img], return_tensors="np")
    return pil, tv


# (width, height, max_pixels): ImageNet-like, tiny (scaled up to min_pixels), over the budget,
# a small budget, a panorama
SIZES = [(500, 375, MAX), (61, 37, MAX), (1200, 900, MAX), (1200, 900, 128 * 28 * 28),
         (333, 1000, MAX), (2000, 300, 256 * 28 * 28), (640, 480, 64 * 28 * 28)]


@pytest.mark.parametrize("w,h,max_pixels", SIZES)
def test_qwen2vl_gives_transformers_grid_and_values_within_the_two_references_difference(w, h, max_pixels):
    data = jpeg(w, h, seed=w * 7 + h)
    pil, tv = references(data, max_pixels)
    pv, grid = Qwen2VL(max_pixels=max_pixels, dct_scaling=False)([data])
    # the grid exactly, the layout exactly (same number of rows of the same width)
    assert grid.dtype == np.int64 and (grid == pil["image_grid_thw"]).all(), (grid, pil["image_grid_thw"])
    assert pv.dtype == np.float32 and pv.shape == pil["pixel_values"].shape
    gap = np.abs(pil["pixel_values"] - tv["pixel_values"]).max()  # what the references disagree by
    d_pil = np.abs(pv - pil["pixel_values"])
    d_tv = np.abs(pv - tv["pixel_values"])
    # one level of 255 in the normalised units is 1 / 255 / std ~ 0.0146: Pillow's own
    # arithmetic gives most sizes bit for bit, the others within a few levels
    assert d_pil.max() <= max(gap, 0.1) + 1e-6, (d_pil.max(), gap)
    assert d_pil.mean() < 0.005 and d_tv.mean() < 0.005, (d_pil.mean(), d_tv.mean())
    # and the token count the placeholder expands to follows from the size alone
    t, gh, gw = grid[0]
    assert Qwen2VL(max_pixels=max_pixels).num_tokens(w, h) == t * gh * gw // 4
    assert Qwen2VL(max_pixels=max_pixels).grid(w, h) == (t, gh, gw)


def test_most_sizes_are_pillows_values_bit_for_bit():
    exact = 0
    sizes = [(w, h) for w in range(40, 700, 61) for h in range(40, 700, 67)]
    proc = Qwen2VL(max_pixels=200_000, dct_scaling=False)
    for w, h in sizes:
        data = jpeg(w, h, seed=w + h)
        pil, _ = references(data, 200_000)
        pv, _ = proc([data])
        exact += bool((pv == pil["pixel_values"]).all())
    # 253 of 323 pairs on a denser grid with Pillow 13 (the others within a few levels, above)
    assert exact >= len(sizes) // 2, (exact, len(sizes))


@pytest.mark.parametrize("w,h,max_pixels", [(4000, 3000, 128 * 28 * 28), (3000, 2000, 256 * 28 * 28),
                                            (2400, 1800, 64 * 28 * 28)])
def test_dct_scaling_of_large_photographs_stays_close_to_the_full_decode(w, h, max_pixels):
    data = jpeg(w, h, seed=3)
    pil, _ = references(data, max_pixels)
    full, g1 = Qwen2VL(max_pixels=max_pixels, dct_scaling=False)([data])
    scaled, g2 = Qwen2VL(max_pixels=max_pixels)([data])
    assert (g1 == g2).all() and (g2 == pil["image_grid_thw"]).all()
    d = np.abs(scaled - pil["pixel_values"])
    assert not np.array_equal(scaled, full)  # the scaled decode did run
    # measured: mean 0.006-0.010, max 0.058-0.100 (up to 7 levels of 255)
    assert d.mean() < 0.015 and d.max() < 0.15, (d.mean(), d.max())


def test_several_images_keep_their_order_on_any_number_of_threads():
    images = [jpeg(w, h, seed=i) for i, (w, h) in enumerate([(300, 200), (64, 64), (800, 600), (200, 900)])]
    proc = Qwen2VL()
    one, g1 = proc(images, threads=1)
    three, g3 = proc(images, threads=3)
    assert np.array_equal(one, three) and np.array_equal(g1, g3)
    parts = [proc([im])[0] for im in images]
    assert np.array_equal(np.concatenate(parts), one)
    assert one.shape[0] == int((g1[:, 0] * g1[:, 1] * g1[:, 2]).sum())


def test_bad_images_and_bad_parameters_are_named():
    good = jpeg(100, 100)
    with pytest.raises(stokehold.CorruptDataError, match="image 1"):
        Qwen2VL()([good, good[: len(good) // 3]])
    with pytest.raises(stokehold.CorruptDataError, match="image 0"):
        Qwen2VL()([b"not an image at all"])
    with pytest.raises(stokehold.SampleError, match="aspect ratio"):
        Qwen2VL()([jpeg(3000, 10)])
    with pytest.raises(stokehold.ConfigError, match="min_pixels"):
        Qwen2VL(min_pixels=10_000, max_pixels=100)
    with pytest.raises(stokehold.ConfigError):
        Qwen2VL(patch_size=0)


def test_the_processor_as_a_loader_stage_gives_the_calls_values_in_the_models_order(tmp_path):
    """Loader(transforms={"image": Qwen2VL(...)}) on 2 threads: each batch's pixel_values
    (batch["image"]) and image_grid_thw are what the processor's call gives the batch's images,
    laid out as transformers' processor lays them out; collate() of per-image arrays gives the
    same pair, and refuses the delivered column with a clear error."""
    from stokehold.vision import collate

    sizes = [(300, 200), (64, 64), (640, 480), (200, 900), (37, 501), (1200, 800), (90, 90), (500, 375)]
    images = [jpeg(w, h, seed=i) for i, (w, h) in enumerate(sizes)]
    with stokehold.ShardWriter(tmp_path / "ds", {"image": "image:jpeg", "n": "int64"}, shard_size=3) as w:
        for i, im in enumerate(images):
            w.write({"image": im, "n": i})
    proc = Qwen2VL(max_pixels=28 * 28 * 300)
    loader = stokehold.Loader(str(tmp_path / "ds"), 4, transforms={"image": proc}, shuffle=True, seed=5, threads=2)
    seen = []
    for batch in loader:
        pv, grid = batch["image"], batch["image_grid_thw"]
        assert pv.dtype == np.float32 and grid.dtype == np.int64 and grid.shape == (len(batch["n"]), 3)
        want_pv, want_grid = proc([images[n] for n in batch["n"]], threads=1)
        assert np.array_equal(grid, want_grid) and np.array_equal(pv, want_pv)
        ref = Qwen2VLImageProcessorPil(min_pixels=56 * 56, max_pixels=28 * 28 * 300)
        pil = ref(images=[Image.open(io.BytesIO(images[n])).convert("RGB") for n in batch["n"]], return_tensors="np")
        assert np.array_equal(pil["image_grid_thw"], grid) and pil["pixel_values"].shape == pv.shape
        seen += list(batch["n"])
    assert sorted(seen) == list(range(len(images)))
    # per-image arrays, as the loader assembled them: the same pair
    m = 2
    arrays, at = [], 0
    for t, h, w in want_grid:
        n = t * h * w
        arrays.append(want_pv[at:at + n].reshape(h // m, w // m, m * m * t, -1))
        at += n
    cpv, cgrid = collate(arrays)
    assert np.array_equal(cpv, want_pv) and np.array_equal(cgrid, want_grid)
    with pytest.raises(TypeError, match="_grid_thw"):
        collate(pv)
    with pytest.raises(stokehold.ConfigError, match="qwen2vl: must be the only stage"):
        stokehold.Loader(str(tmp_path / "ds"), 4, transforms={"image": [proc, proc]})
    with pytest.raises(stokehold.ConfigError, match="qwen2vl needs encoded image bytes, and the field is of type int64"):
        stokehold.Loader(str(tmp_path / "ds"), 4, transforms={"n": proc})


def test_a_damaged_image_under_skip_is_stood_in_for_in_the_patches_and_the_grids(tmp_path):
    """on_error="skip" with one truncated JPEG: its slot repeats another sample's image (marked
    padding), and the delivered pixel_values and image_grid_thw stay consistent: the grids'
    patches add up to the rows, each batch is what the processor gives its (stood-in) images."""
    sizes = [(300, 200), (64, 64), (640, 480), (200, 900), (90, 90), (500, 375)]
    images = [jpeg(w, h, seed=i) for i, (w, h) in enumerate(sizes)]
    images[2] = images[2][: len(images[2]) // 3]
    with stokehold.ShardWriter(tmp_path / "ds", {"image": "image:jpeg", "n": "int64"}) as w:
        for i, im in enumerate(images):
            w.write({"image": im, "n": i})
    proc = Qwen2VL(max_pixels=28 * 28 * 300)
    loader = stokehold.Loader(str(tmp_path / "ds"), 3, transforms={"image": proc}, shuffle=False, threads=2,
                              on_error="skip", max_skip_fraction=0.5, include_ids=True)
    padded = 0
    for batch in loader:
        pv, grid = batch["image"], batch["image_grid_thw"]
        assert grid.shape == (3, 3) and pv.shape[0] == int(np.prod(grid, axis=1).sum())
        ns = list(batch["n"])
        padded += int(batch["is_padding"].sum())
        assert 2 not in [n for n, p in zip(ns, batch["is_padding"]) if not p]
        want_pv, want_grid = proc([images[n] for n in ns], threads=1)
        assert np.array_equal(grid, want_grid) and np.array_equal(pv, want_pv)
    assert padded == 1
    assert len(loader.stats()["skipped"]) == 1


def test_fixed_size_gives_siglip_and_llava_processors_values_and_runs_as_a_loader_stage(tmp_path):
    """FixedSize(size) against transformers' SigLIP processor (bicubic to size x size, mean and
    std 0.5) and LLaVA's (expand2square with the mean colour, then CLIP's processor at a square
    size), both with Pillow: values within the bound docs/vision.md states for the resize (a few
    levels of 255, more where the JPEG is decoded at a DCT scale first); as a loader stage, each
    sample the call's values."""
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    from stokehold.vision import FixedSize

    sizes = [(500, 375), (61, 37), (1200, 900), (333, 1000), (384, 384)]
    images = [jpeg(w, h, seed=i) for i, (w, h) in enumerate(sizes)]
    pils = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
    siglip = FixedSize(96)
    got = siglip(images, threads=2)
    assert got.shape == (len(images), 3, 96, 96) and got.dtype == np.float32
    want = SiglipImageProcessorPil(size={"height": 96, "width": 96})(images=pils, return_tensors="np")["pixel_values"]
    diff = np.abs(got - want)
    assert diff.max() <= 0.1 and diff.mean() < 0.01, (diff.max(), diff.mean())

    mean, std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    colour = [int(x * 255) for x in mean]
    llava = FixedSize(64, pad=colour, image_mean=mean, image_std=std)

    def expand2square(img):
        w, h = img.size
        side = max(w, h)
        out = Image.new(img.mode, (side, side), tuple(colour))
        out.paste(img, ((side - w) // 2, (side - h) // 2))
        return out

    clip = CLIPImageProcessorPil(size={"shortest_edge": 64}, crop_size={"height": 64, "width": 64})
    want = clip(images=[expand2square(p) for p in pils], return_tensors="np")["pixel_values"]
    diff = np.abs(llava(images) - want)
    assert diff.max() <= 0.1 and diff.mean() < 0.01, (diff.max(), diff.mean())

    # the same values on any number of threads; pickled, the same processor
    assert np.array_equal(siglip(images, threads=1), got)
    again = pickle.loads(pickle.dumps(llava))
    assert again == llava and np.array_equal(again(images[:2]), llava(images[:2]))
    with pytest.raises(stokehold.ConfigError, match="size 0"):
        FixedSize(0)
    with pytest.raises(stokehold.CorruptDataError, match="image 1"):
        siglip([images[0], b"\xff\xd8\xff not a jpeg"])

    with stokehold.ShardWriter(tmp_path / "ds", {"image": "image:jpeg", "n": "int64"}) as w:
        for i, im in enumerate(images):
            w.write({"image": im, "n": i})
    loader = stokehold.Loader(str(tmp_path / "ds"), 2, transforms={"image": siglip}, shuffle=True, seed=1,
                              threads=2, drop_last=False)
    for batch in loader:
        assert batch["image"].shape == (2, 3, 96, 96)
        assert np.array_equal(batch["image"], got[batch["n"]])
    with pytest.raises(stokehold.ConfigError, match="fixed_size needs encoded image bytes"):
        stokehold.Loader(str(tmp_path / "ds"), 2, transforms={"n": siglip})


def test_packed_images_rewritten_as_baseline_give_the_originals_pixel_values(tmp_path):
    # `stokehold pack` rewrites every JPEG losslessly (baseline, restart markers): a progressive
    # photograph's patches, at full size and DCT-scaled, are exactly the original's
    import json
    import subprocess
    import sys

    originals = []
    for i, (w, h, progressive) in enumerate([(2400, 1800, True), (640, 480, True), (500, 375, False)]):
        img = Image.open(io.BytesIO(jpeg(w, h, seed=i)))
        b = io.BytesIO()
        img.save(b, "JPEG", quality=90, progressive=progressive)
        originals.append(b.getvalue())
        (tmp_path / f"{i}.jpg").write_bytes(originals[-1])
    (tmp_path / "convs.jsonl").write_text(json.dumps({"messages": [], "images": ["0.jpg", "1.jpg", "2.jpg"]}) + "\n")
    subprocess.run([sys.executable, "-m", "stokehold._cli", "pack", tmp_path / "convs.jsonl", tmp_path / "ds"],
                   check=True, capture_output=True)
    packed = [bytes(b) for b in stokehold.Dataset(str(tmp_path / "ds"))[0]["images"]]
    assert [Image.open(io.BytesIO(b)).info.get("progressive", 0) for b in packed] == [0, 0, 0]
    assert packed[0] != originals[0]  # rewritten
    for dct in (True, False):
        proc = Qwen2VL(max_pixels=256 * 28 * 28, dct_scaling=dct)
        got, g1 = proc(packed)
        want, g2 = proc(originals)
        assert np.array_equal(g1, g2) and np.array_equal(got, want), dct


def test_shard_writer_rewrites_jpegs_as_pack_does_only_when_asked(tmp_path):
    # restart_markers=True: every JPEG of a list of images rewritten losslessly (baseline with
    # restart markers, the same pixel_values); a PNG kept; the default stores the bytes as given
    originals = []
    for i, (w, h) in enumerate([(900, 700), (320, 240)]):
        b = io.BytesIO()
        Image.open(io.BytesIO(jpeg(w, h, seed=i))).save(b, "JPEG", quality=90, progressive=True)
        originals.append(b.getvalue())
    png = io.BytesIO()
    Image.new("RGB", (40, 30), (10, 200, 30)).save(png, "PNG")
    items = originals + [png.getvalue()]
    for rewrite in (True, False):
        path = str(tmp_path / f"ds-{rewrite}")
        with stokehold.ShardWriter(path, {"images": "list:image"}, restart_markers=rewrite) as w:
            w.write({"images": items})
            assert w.kept_as_is == 0
        stored = [bytes(b) for b in stokehold.Dataset(path)[0]["images"]]
        assert stored[2] == items[2]
        if not rewrite:
            assert stored == items
            continue
        assert [Image.open(io.BytesIO(b)).info.get("progressive", 0) for b in stored[:2]] == [0, 0]
        assert all(b"\xff\xd0" in b for b in stored[:2])  # restart markers
        proc = Qwen2VL(max_pixels=128 * 28 * 28)
        got, g1 = proc(stored)
        want, g2 = proc(items)
        assert np.array_equal(g1, g2) and np.array_equal(got, want)
