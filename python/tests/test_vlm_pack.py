"""SequenceLoader(..., text=ChatTemplate(..., images=, vision=Qwen2VL(...)), packing="whole"):
conversations with images packed whole into rows, planned from the stored image sizes, with each
batch's pixel_values and image_grid_thw (issue #53, item 4).

Rows are checked against ChatTemplate.encode per conversation (itself checked against
Qwen2VLProcessor.apply_chat_template in test_chat.py), pixel values against the Qwen2VL processor
called on the same images in the same order, and one batch against transformers'
Qwen2VLImageProcessor (nothing is downloaded: the tokenizer and template are made here)."""

import io
import json
import random

import numpy as np
import pytest

import stokehold
from stokehold import StokeholdError
from stokehold.text import ChatTemplate

pytest.importorskip("tokenizers")
PIL = pytest.importorskip("PIL.Image")

from test_chat import text, vl_model  # noqa: E402,F401  (vl_model: a fixture)
from test_sft import check_row, loader, rows_of, two_ranks_then_three  # noqa: E402

from stokehold.vision import Qwen2VL  # noqa: E402

BUDGET = dict(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 64)


def photo(size, seed):
    """A JPEG of `size` with texture (smooth gradients plus noise), so that pixel values differ."""
    w, h = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * (3 + c) + y * (5 - c)) % 256 for c in range(3)], axis=-1)
    img = np.clip(base + rng.integers(-30, 30, (h, w, 3)), 0, 255).astype(np.uint8)
    b = io.BytesIO()
    PIL.fromarray(img).save(b, format="JPEG", quality=90)
    return b.getvalue()


def vl_samples(n, seed, max_images=3, text_only=0.2):
    """`n` (conversation, images) pairs: 0..max_images images in user turns (a fraction
    text-only), sizes from tiny to a few hundred pixels."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        conv, images = [], []
        for _t in range(rng.randint(1, 2)):
            parts = [{"type": "text", "text": text(rng, "user")}]
            k = 0 if rng.random() < text_only else rng.randint(0, max_images)
            for _ in range(k):
                parts.insert(rng.randint(0, len(parts)), {"type": "image"})
                images.append(photo((rng.randint(30, 400), rng.randint(30, 300)), seed * 1000 + i * 10 + len(images)))
            conv.append({"role": "user", "content": parts})
            conv.append({"role": "assistant", "content": text(rng, "assistant")})
        out.append((conv, images))
    return out


def write(path, samples):
    with stokehold.ShardWriter(path, {"messages": "json", "images": "list:image", "n": "int64"}, shard_size=1 << 20) as w:
        for i, (conv, images) in enumerate(samples):
            w.write({"messages": json.dumps(conv), "images": images, "n": i})
    return stokehold.Dataset(path)


def template(vl_model, **kw):
    return ChatTemplate(vl_model, images="images", vision=Qwen2VL(**{**BUDGET, **kw}))


def expected_images(samples, docs, proc):
    """pixel_values and image_grid_thw of the conversations `docs` (in order), by the processor."""
    images = [im for d in docs for im in samples[d][1]]
    if not images:
        return np.zeros((0, 3 * 2 * 14 * 14), np.float32), np.zeros((0, 3), np.int64)
    return proc(images, threads=1)


def test_rows_hold_each_conversations_tokens_and_its_images_pixels_in_order(tmp_path, vl_model):
    samples = vl_samples(40, seed=1)
    ds = write(tmp_path / "ds", samples)
    ct = template(vl_model)
    proc = Qwen2VL(**BUDGET)
    encs = [ct.encode(conv, images=images) for conv, images in samples]
    placeholder = int(ct._image_token_id)
    seq_len = 512
    batches = list(loader(ds, ct, seq_len=seq_len, batch_size=3, seed=4, threads=2, window=16))
    seen = []
    for b in batches:
        rows = rows_of([b])
        for r, docs in enumerate(rows):
            check_row(b, r, docs, encs, seq_len)
        want_pv, want_grid = expected_images(samples, [d for row in rows for d in row], proc)
        assert b["pixel_values"].dtype == np.float32 and b["image_grid_thw"].dtype == np.int64
        assert b["image_grid_thw"].tolist() == np.asarray(want_grid).tolist()
        assert b["pixel_values"].shape == want_pv.shape
        assert np.array_equal(b["pixel_values"], want_pv)
        # every placeholder of the batch is one of its images' tokens
        assert int((b["input_ids"] == placeholder).sum()) == int(np.prod(b["image_grid_thw"], axis=1).sum()) // 4
        seen += [d for row in rows for d in row]
    assert sorted(seen) == list(range(len(samples)))
    assert sum(len(im) for _, im in samples) > 30


def test_mrope_positions_equal_qwen2vl_get_rope_index_of_each_conversation(tmp_path, vl_model):
    """batch["mrope_position_ids"] [4, B, N]: position_ids, then the 3-D positions transformers'
    Qwen2-VL model computes (get_rope_index) for each conversation of the row on its own."""
    import torch
    from transformers import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    text_config = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                       intermediate_size=64, vocab_size=4000, rope_scaling={"type": "mrope", "mrope_section": [2, 1, 1]})
    model = Qwen2VLModel(Qwen2VLConfig(text_config=text_config,
                                       vision_config=dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, mlp_ratio=2)))
    samples = vl_samples(24, seed=12)
    ds = write(tmp_path / "ds", samples)
    ct = template(vl_model)
    placeholder = int(ct._image_token_id)
    checked = 0
    for b in loader(ds, ct, seq_len=600, batch_size=2, seed=3, overlong="truncate"):
        pos = b["mrope_position_ids"]
        assert pos.shape == (4,) + b["input_ids"].shape and pos.dtype == np.int64
        assert np.array_equal(pos[0], b["position_ids"])
        grids = iter(b["image_grid_thw"].tolist())
        for r in range(b["input_ids"].shape[0]):
            seg = b["segment_ids"][r]
            for s in range(int(seg.max()) + 1):
                ids = torch.as_tensor(b["input_ids"][r][seg == s], dtype=torch.long)[None]
                types = (ids == placeholder).int()
                n_images = 0
                mine = []
                while int(types.sum()) > sum(t * h * w // 4 for t, h, w in mine):
                    mine.append(next(grids))
                    n_images += 1
                kw = {"image_grid_thw": torch.tensor(mine)} if mine else {}
                if mine:
                    want, _ = model.get_rope_index(ids, mm_token_type_ids=types, **kw)
                    want = want[:, 0].numpy()
                else:
                    want = np.broadcast_to(np.arange(ids.shape[1]), (3, ids.shape[1]))
                assert np.array_equal(pos[1:, r][:, seg == s], want), (r, s)
                checked += n_images
    assert checked > 10


def test_a_batch_equals_transformers_qwen2vl_image_processor(tmp_path, vl_model):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    samples = vl_samples(12, seed=2, max_images=2, text_only=0.0)
    ds = write(tmp_path / "ds", samples)
    b = next(iter(loader(ds, template(vl_model), seq_len=512, batch_size=2, seed=0)))
    docs = [d for row in rows_of([b]) for d in row]
    images = [PIL.open(io.BytesIO(im)).convert("RGB") for d in docs for im in samples[d][1]]
    assert len(images) >= 4
    want = Qwen2VLImageProcessor(**BUDGET)(images=images, return_tensors="np")
    assert b["image_grid_thw"].tolist() == np.asarray(want["image_grid_thw"]).tolist()
    diff = np.abs(b["pixel_values"] - np.asarray(want["pixel_values"], dtype=np.float32))
    # the bound docs/vision.md states for the processor (resampling filters differ by a few levels)
    assert diff.max() <= 0.1 and diff.mean() < 0.01, (diff.max(), diff.mean())


def test_rows_keep_within_max_image_tokens_and_a_conversation_over_it_is_dropped(tmp_path, vl_model):
    samples = vl_samples(30, seed=3, max_images=2, text_only=0.1)
    # one conversation with many large images: more image tokens than the budget
    big = [photo((400, 300), 99 + k) for k in range(8)]
    samples.append(([{"role": "user", "content": [{"type": "image"}] * 8 + [{"type": "text", "text": "all"}]},
                     {"role": "assistant", "content": "yes"}], big))
    ds = write(tmp_path / "ds", samples)
    ct = template(vl_model)
    proc = Qwen2VL(**BUDGET)
    tokens = [sum(proc.num_tokens(*PIL.open(io.BytesIO(im)).size) for im in images) for _, images in samples]
    budget = max(tokens[:-1])
    assert tokens[-1] > budget
    ld = loader(ds, ct, seq_len=1024, batch_size=1, seed=1, max_image_tokens=budget)
    rows = rows_of(list(ld))
    assert sorted(d for r in rows for d in r) == [i for i in range(len(samples)) if i != len(samples) - 1]
    for row in rows:
        assert sum(tokens[d] for d in row) <= budget
    assert ld.stats()["packing"]["dropped"] == 1
    # an epoch's samples are its planned rows (fewer than the conversations)
    assert ld.samples == ld.stats()["packing"]["rows"] == len(rows) < len(samples)
    # without the budget, rows hold more images than it allows
    free = rows_of(list(loader(ds, ct, seq_len=1024, batch_size=1, seed=1)))
    assert max(sum(tokens[d] for d in row) for row in free) > budget


def long_with_images():
    """A conversation of 6 images of 200x150 between texts, and its images: longer than 256
    tokens, with an image across token 256."""
    rng = random.Random(5)
    images = [photo((200, 150), 500 + k) for k in range(6)]
    parts = []
    for _ in images:
        parts += [{"type": "text", "text": text(rng, "user")}, {"type": "image"}]
    return [{"role": "user", "content": parts}, {"role": "assistant", "content": "ok"}], images


def test_an_overlong_conversation_is_cut_before_the_image_that_would_cross_the_row(tmp_path, vl_model):
    long = long_with_images()
    images = long[1]
    samples = [long] + vl_samples(6, seed=6)
    ds = write(tmp_path / "ds", samples)
    ct = template(vl_model)
    placeholder = int(ct._image_token_id)
    full = ct.encode(long[0], images=long[1])["input_ids"]
    seq_len = 256
    others = sum(len(ct.encode(c, images=im)["input_ids"]) > seq_len for c, im in samples[1:])
    assert len(full) > seq_len
    # the row's end falls inside an image's tokens
    assert full[seq_len - 1] == placeholder and full[seq_len] == placeholder
    ld = loader(ds, ct, seq_len=seq_len, batch_size=1, shuffle=False)
    for b in ld:
        if 0 not in rows_of([b])[0]:
            continue
        cut = int((b["segment_ids"][0] == 0).sum())
        assert cut < seq_len
        assert b["input_ids"][0, :cut].tolist() == full[:cut].tolist()
        assert full[cut] == placeholder and full[cut - 1] != placeholder
        kept = int((b["input_ids"][0, :cut] == placeholder).sum())
        assert kept == int(np.prod(b["image_grid_thw"], axis=1).sum()) // 4
        assert len(b["image_grid_thw"]) < len(images)
        break
    else:
        pytest.fail("the long conversation was not in any row")
    assert ld.stats()["packing"]["truncated"] == 1 + others


def test_planning_reads_sizes_only_and_a_damaged_image_is_named_when_its_row_is_filled(tmp_path, vl_model):
    samples = vl_samples(8, seed=7, text_only=0.0)
    conv, images = samples[3]
    assert images
    # a JPEG whose header is whole (its size readable) and whose scan data is cut: planning,
    # which reads sizes only, takes it; decoding it for its row fails
    good = images[0]
    sos = good.index(b"\xff\xda")
    samples[3] = (conv, [good[: sos + 40]] + images[1:])
    ds = write(tmp_path / "ds", samples)
    ld = loader(ds, template(vl_model), seq_len=2048, batch_size=1, seed=0)
    assert ld.stats()["packing"]["rows"] >= 1
    with pytest.raises(StokeholdError, match="conversation 3"):
        list(ld)
    # on_error="skip": the row is left out, counted, and its slot is another row of its batch,
    # flagged as padding; a batch with no other row says so
    ld = loader(ds, template(vl_model), seq_len=512, batch_size=2, seed=0, on_error="skip",
                max_skip_fraction=0.5, include_ids=True, drop_last=False)
    batches = list(ld)
    delivered = [d for b in batches for r, row in enumerate(rows_of([b])) if not b["is_padding"][r] for d in row]
    assert 3 not in delivered and len(set(delivered)) == len(delivered)
    assert len(delivered) >= len(samples) - max(len(row) for row in rows_of(batches))
    assert len(ld.stats()["skipped"]) == 1
    with pytest.raises(StokeholdError, match="every sample of a batch of 1 failed"):
        list(loader(ds, template(vl_model), seq_len=512, batch_size=1, seed=0, on_error="skip", max_skip_fraction=0.5))


def test_resume_with_images_is_exact_from_two_ranks_to_three(tmp_path, vl_model):
    samples = vl_samples(48, seed=8, max_images=2)
    ds = write(tmp_path / "ds", samples)
    ct = template(vl_model)
    kw = dict(seq_len=384, seed=11, window=12, max_image_tokens=160)
    full = rows_of(list(loader(ds, ct, batch_size=2, **kw)))
    assert len(full) > 14
    per_rank = two_ranks_then_three(lambda r, w: loader(ds, ct, batch_size=2, rank=r, world_size=w, **kw), full)
    # the rows after the resume are the uninterrupted run's (checked above), and so are their images
    proc = Qwen2VL(**BUDGET)
    for batches in per_rank:
        for b in batches:
            want_pv, want_grid = expected_images(samples, [d for r in rows_of([b]) for d in r], proc)
            assert b["image_grid_thw"].tolist() == np.asarray(want_grid).tolist()
            assert np.array_equal(b["pixel_values"], want_pv)


def test_a_mixture_of_conversations_with_images_and_text_only_ones(tmp_path, vl_model):
    vl = vl_samples(20, seed=9)
    plain = [([{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}], []) for i in range(15)]
    mix = stokehold.Mixture({"vl": write(tmp_path / "vl", vl), "text": write(tmp_path / "text", plain)}, weights={"vl": 0.6, "text": 0.4})
    ct = template(vl_model)
    plain_ct = ChatTemplate(vl_model)
    ld = stokehold.SequenceLoader(mix, seq_len=512, batch_size=2, text={"vl": ct, "text": plain_ct}, packing="whole", seed=2, rank=0, world_size=1)
    proc = Qwen2VL(**BUDGET)
    sources = {0: vl, 1: plain}
    n_images = 0
    for b in ld:
        images = []
        for r in range(len(b["doc_ids"])):
            for d, s in zip(b["doc_ids"][r], b["doc_sources"][r]):
                if d >= 0:
                    images += sources[int(s)][int(d)][1]
        if images:
            want_pv, want_grid = proc(images, threads=1)
            assert np.array_equal(b["pixel_values"], want_pv)
            assert b["image_grid_thw"].tolist() == np.asarray(want_grid).tolist()
        else:
            assert b["pixel_values"].shape[0] == 0 and b["image_grid_thw"].shape == (0, 3)
        n_images += len(images)
    assert n_images >= sum(len(im) for _, im in vl) // 2


def test_options_of_packing_with_images_are_checked(tmp_path, vl_model):
    samples = vl_samples(4, seed=10)
    ds = write(tmp_path / "ds", samples)
    with pytest.raises(stokehold.ConfigError, match="max_image_tokens is for conversations with images"):
        loader(ds, ChatTemplate(vl_model), seq_len=256, max_image_tokens=10)
    with pytest.raises(stokehold.ConfigError, match="no field \"pics\""):
        loader(ds, ChatTemplate(vl_model, images="pics", vision=Qwen2VL(**BUDGET)), seq_len=256)
    with pytest.raises(stokehold.ConfigError, match="not a list of images"):
        loader(ds, ChatTemplate(vl_model, images="messages", vision=Qwen2VL(**BUDGET)), seq_len=256)


def test_counting_reads_a_large_records_conversation_not_its_images(tmp_path, vl_model):
    """With the image sizes in the shards, counting reads only the first bytes of a large record
    (its conversation, before its images): a record whose image bytes are damaged on disk is
    counted and planned, and the damage is found (its checksum) only when its row is filled."""
    samples = vl_samples(6, seed=13, text_only=0.0)
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 255, (500, 600, 3), dtype=np.uint8)
    b = io.BytesIO()
    PIL.fromarray(noise).save(b, format="JPEG", quality=95)
    big = b.getvalue()
    assert len(big) > 128 << 10
    conv, images = samples[2]
    samples[2] = (conv, [big] + images[1:])
    ds = write(tmp_path / "ds", samples)
    shard = next((tmp_path / "ds").glob("*.skh"))
    data = bytearray(shard.read_bytes())
    at = data.index(big) + len(big) // 2
    data[at] ^= 0xFF
    shard.write_bytes(bytes(data))
    ld = loader(stokehold.Dataset(tmp_path / "ds"), template(vl_model), seq_len=4096, batch_size=1, seed=0)
    assert ld.stats()["packing"]["conversations"] == 6
    with pytest.raises(StokeholdError, match="checksum"):
        list(ld)


def test_a_hugging_face_vision_chat_dataset_packs_and_loads_with_its_images(tmp_path, vl_model):
    """The SFT recipe from a Hugging Face dataset in the multimodal chat form (messages whose
    content is a list of parts, images as Sequence(Image())): from_hf, then packed rows whose
    tokens are ChatTemplate.encode's and whose pixel values are the processor's of the images."""
    datasets = pytest.importorskip("datasets")
    samples = vl_samples(10, seed=14, text_only=0.0)
    part = {"type": datasets.Value("string"), "text": datasets.Value("string")}
    features = datasets.Features({
        "messages": [{"role": datasets.Value("string"), "content": [part]}],
        "images": datasets.Sequence(datasets.Image()),
    })
    rows = {"messages": [], "images": []}
    for conv, images in samples:
        rows["messages"].append([{"role": m["role"], "content": m["content"] if isinstance(m["content"], list)
                                  else [{"type": "text", "text": m["content"]}]} for m in conv])
        rows["images"].append([{"bytes": b, "path": None} for b in images])
    hf = datasets.Dataset.from_dict(rows, features=features)
    stokehold.from_hf(hf, tmp_path / "hf")
    ds = stokehold.Dataset(tmp_path / "hf")
    ct = template(vl_model)
    proc = Qwen2VL(**BUDGET)
    seen = []
    for b in loader(ds, ct, seq_len=1024, batch_size=2, seed=0, drop_last=False, include_ids=True):
        docs = [d for r, row in enumerate(rows_of([b])) if not b["is_padding"][r] for d in row]
        if all(not p for p in b["is_padding"]):
            want_pv, want_grid = expected_images(samples, [d for row in rows_of([b]) for d in row], proc)
            assert b["image_grid_thw"].tolist() == np.asarray(want_grid).tolist()
            assert np.array_equal(b["pixel_values"], want_pv)
        for r, row in enumerate(rows_of([b])):
            if b["is_padding"][r]:
                continue
            at = 0
            for d in row:
                # None-valued keys of Arrow structs (text of an image part) render as nothing
                want = ct.encode(json.loads(ds[d]["messages"]), images=samples[d][1])["input_ids"]
                assert want.tolist() == ct.encode(samples[d][0], images=samples[d][1])["input_ids"].tolist()
                assert b["input_ids"][r, at:at + len(want)].tolist() == want.tolist()
                at += len(want)
        seen += docs
    assert sorted(seen) == list(range(len(samples)))
