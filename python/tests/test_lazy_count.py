"""Packed conversations counted lazily (issue #52 item 4): the loader is made without counting
its conversations; each window of the epoch's order is counted when a batch needs its rows (the
rest in the background), so the first batch comes before the dataset is counted. The rows are the
same as those of counting at open (the eager path: STOKEHOLD_CHAT_COUNT_AT_OPEN=1), len() is an estimate until
the epoch is planned and exact after, and a resume while counting is exact on another number of
ranks. Under on_error="skip" too: a conversation that cannot be read or encoded is left out when its
window is counted, with the rows of counting at open.

The background counter is switched off (STOKEHOLD_CHAT_COUNT_AHEAD=0) where a test counts what
the first batches needed: `stats()["packing"]["counted"]` is then only what planning counted."""

import json
import os

import pytest

from stokehold import StokeholdError

from stokehold.text import ChatTemplate

pytest.importorskip("tokenizers")

from test_sft import loader, make_convs, models, rows_of, two_ranks_then_three, write  # noqa: E402,F401
from test_chat import vl_model  # noqa: E402,F401  (vl_model: a fixture)

KW = dict(seq_len=128, window=24, seed=7)


@pytest.fixture
def no_kept(tmp_path, monkeypatch):
    """Each loader made by `lazy` or `eager` keeps its counts in a directory of its own (it finds
    none kept by another), the background counter off: only planning counts."""
    monkeypatch.setenv("STOKEHOLD_CHAT_COUNT_AHEAD", "0")
    made = iter(range(1 << 30))

    def fresh():
        monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / f"kept{next(made)}"))

    return fresh


def lazy(fresh, ds, tmpl, **kw):
    fresh()
    return loader(ds, tmpl, **kw)


def eager(fresh, ds, tmpl, **kw):
    """Counted at open (STOKEHOLD_CHAT_COUNT_AT_OPEN=1: every conversation counted first)."""
    fresh()
    os.environ["STOKEHOLD_CHAT_COUNT_AT_OPEN"] = "1"
    try:
        return loader(ds, tmpl, **kw)
    finally:
        del os.environ["STOKEHOLD_CHAT_COUNT_AT_OPEN"]


def same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for k in ("input_ids", "labels", "position_ids", "segment_ids", "doc_ids", "cu_seqlens"):
            assert (x[k] == y[k]).all(), k


def test_lazy_and_eager_counting_give_the_same_batches_on_one_and_two_ranks(tmp_path, models, no_kept,
                                                                            monkeypatch):  # noqa: F811
    ds = write(tmp_path / "ds", make_convs(200, seed=21, long_every=9))
    tmpl = ChatTemplate(models["chatml"])
    for world in (1, 2):
        for rank in range(world):
            kw = dict(KW, batch_size=3, rank=rank, world_size=world, drop_last=False)
            first = eager(no_kept, ds, tmpl, **kw)
            assert first.stats()["packing"]["counted"] == 200
            want = list(first)
            ld = lazy(no_kept, ds, tmpl, **kw)
            assert ld.stats()["packing"]["counted"] == KW["window"]
            same_batches(list(ld), want)
            # the background counter on: the same again
            monkeypatch.setenv("STOKEHOLD_CHAT_COUNT_AHEAD", "1")
            same_batches(list(lazy(no_kept, ds, tmpl, **kw)), want)
            monkeypatch.setenv("STOKEHOLD_CHAT_COUNT_AHEAD", "0")


def test_bad_conversations_are_skipped_as_their_windows_are_counted(tmp_path, models, no_kept):  # noqa: F811
    """on_error="skip" no longer counts the whole dataset at open: the loader is made with the
    first window counted; the bad conversations are left out as their windows are counted, and
    the epoch's rows, the skipped ones and their reasons are those of counting at open; past
    max_skip_fraction the loader fails (at open or with the batch whose window crosses it)."""
    convs = make_convs(120, seed=23)
    bad = [5, 50, 97]
    for i in bad:
        convs[i] = "{not json"
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["chatml"])
    kw = dict(KW, batch_size=3, drop_last=False, on_error="skip", max_skip_fraction=0.05)
    first = eager(no_kept, ds, tmpl, **kw)
    packing = first.stats()["packing"]
    assert packing["counted"] == 120 and packing["skipped"] == 3
    want = list(first)
    ld = lazy(no_kept, ds, tmpl, **kw)
    assert ld.stats()["packing"]["counted"] == KW["window"] < 120
    same_batches(list(ld), want)
    got = ld.stats()["packing"]
    assert got["counted"] == 120 and got["skipped"] == 3
    assert [e[0] for e in got["skipped_examples"]] == bad
    assert got["skipped_examples"] == first.stats()["packing"]["skipped_examples"]
    with pytest.raises(StokeholdError, match="max_skip_fraction"):
        list(lazy(no_kept, ds, tmpl, **dict(kw, max_skip_fraction=0.02)))


def test_the_first_batch_counts_only_the_window_its_rows_need(tmp_path, models, no_kept):  # noqa: F811
    """Unshuffled, batches of 2 rows, one batch prepared ahead, one thread: the loader is made
    with the first window counted (len() estimates from it), the first batches' rows are in that
    window (24 conversations of ~20-70 tokens make more than 4 rows of 128), so when the first
    batch is returned still only that window is counted; the epoch's end has counted them all,
    and len() is then the batches delivered."""
    n = 600
    ds = write(tmp_path / "ds", make_convs(n, seed=22))
    tmpl = ChatTemplate(models["chatml"])
    ld = lazy(no_kept, ds, tmpl, batch_size=2, shuffle=False, threads=1, prefetch=1, drop_last=False, **KW)
    packing = ld.stats()["packing"]
    assert packing["counted"] == KW["window"] and not packing["exact"]
    estimate = len(ld)
    assert 0 < estimate < n // 2
    it = iter(ld)
    next(it)
    packing = ld.stats()["packing"]
    assert packing["counted"] == KW["window"], packing
    assert not packing["exact"] and packing["rows"] >= 4
    rest = list(it)
    packing = ld.stats()["packing"]
    assert packing["counted"] == n and packing["exact"]
    assert len(ld) == len(rest) + 1 == -(-packing["rows"] // 2)


def test_resume_while_counting_is_exact_from_two_ranks_to_three(tmp_path, models, no_kept):  # noqa: F811
    ds = write(tmp_path / "ds", make_convs(300, seed=23, long_every=7))
    tmpl = ChatTemplate(models["chatml"])
    full = rows_of(list(eager(no_kept, ds, tmpl, batch_size=2, **KW)))
    made = []

    def make(rank, world):
        ld = lazy(no_kept, ds, tmpl, batch_size=2, rank=rank, world_size=world, **KW)
        made.append(ld)
        return ld

    # one rank resumes from its own state mid-epoch, counting still going
    ld = make(0, 1)
    it = iter(ld)
    head = [next(it) for _ in range(3)]
    state = json.loads(json.dumps(ld.state_dict()))
    assert ld.stats()["packing"]["counted"] < 300
    del it
    again = make(0, 1)
    again.load_state_dict(state)
    assert again.stats()["packing"]["counted"] < 300
    assert rows_of(head) + rows_of(list(again)) == full
    # two ranks run 2 steps (counting only the first windows), three continue from rank 0's state
    two_ranks_then_three(make, full)
    assert made[2].stats()["packing"]["counted"] < 300


def test_a_lazily_counted_epoch_keeps_its_counts_for_the_next_open(tmp_path, models, monkeypatch):  # noqa: F811
    """Counted lazily to the end, the counts are kept (.skcc): the next open plans from them,
    counted and exact before its first batch, the same rows."""
    monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / "kept"))
    monkeypatch.setenv("STOKEHOLD_CHAT_COUNT_AHEAD", "0")
    ds = write(tmp_path / "ds", make_convs(90, seed=24, long_every=6))
    tmpl = ChatTemplate(models["chatml"])
    for overlong in ("truncate", "drop"):
        kw = dict(KW, batch_size=2, drop_last=False, overlong=overlong)
        ld = loader(ds, tmpl, **kw)
        first = list(ld)
        was = ld.stats()["packing"]
        assert was["counted"] == 90 and (was["truncated"] if overlong == "truncate" else was["dropped"]) > 0
        again = loader(ds, tmpl, **kw)
        packing = again.stats()["packing"]
        assert packing["counted"] == 90 and packing["exact"] and packing["kept"] == 0
        assert len(again) == len(first)
        same_batches(list(again), first)
        # (stats() after an epoch: the next epoch's plan, in both)
        packing = again.stats()["packing"]
        for k in ("rows", "truncated", "dropped", "fill"):
            assert packing[k] == was[k], k
    assert len(list((tmp_path / "kept").glob("counts/*.skcc"))) == 2


def test_a_bad_conversation_counted_lazily_fails_the_batch_that_needs_it(tmp_path, models, no_kept):  # noqa: F811
    convs = make_convs(100, seed=25)
    convs[60] = "{not json"
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["chatml"])
    ld = lazy(no_kept, ds, tmpl, batch_size=2, shuffle=False, **KW)
    it = iter(ld)
    next(it)  # the first window holds no bad conversation
    from stokehold import StokeholdError
    with pytest.raises(StokeholdError, match="conversation 60"):
        list(it)


def test_conversations_with_images_counted_lazily_give_the_rows_of_counting_at_open(tmp_path, vl_model, no_kept):  # noqa: F811
    """Images: an overlong conversation cut before an image, one over max_image_tokens left
    out; lazily and at open, on 1 and 2 ranks, the same rows, pixels and counts of what was
    cut or left out; the counts a lazy epoch kept give them again."""
    pytest.importorskip("PIL.Image")
    import numpy as np
    from test_vlm_pack import long_with_images, photo, template, vl_samples
    from test_vlm_pack import write as write_vl

    long = long_with_images()
    big = ([{"role": "user", "content": [{"type": "image"}] * 8 + [{"type": "text", "text": "all"}]},
            {"role": "assistant", "content": "yes"}], [photo((400, 300), 99 + k) for k in range(8)])
    samples = vl_samples(30, seed=31, max_images=2)
    samples[4], samples[17] = long, big
    ds = write_vl(tmp_path / "ds", samples)
    ct = template(vl_model)
    keys = ("input_ids", "labels", "segment_ids", "doc_ids", "mrope_position_ids", "pixel_values", "image_grid_thw")
    for world in (1, 2):
        for rank in range(world):
            kw = dict(seq_len=256, window=8, seed=3, max_image_tokens=200, batch_size=2, rank=rank,
                      world_size=world, drop_last=False)
            first = eager(no_kept, ds, ct, **kw)
            want, was = list(first), first.stats()["packing"]
            assert was["truncated"] >= 1 and was["dropped"] >= 1
            ld = lazy(no_kept, ds, ct, **kw)
            assert ld.stats()["packing"]["counted"] < 30
            got = list(ld)
            assert len(got) == len(want)
            for x, y in zip(got, want):
                for k in keys:
                    assert np.array_equal(x[k], y[k]), k
            packing = ld.stats()["packing"]
            for k in ("rows", "truncated", "dropped", "fill", "counted"):
                assert packing[k] == was[k], k
            # the lazy epoch kept its counts: an open from them says the same
            again = loader(ds, ct, **kw)
            kept = again.stats()["packing"]
            assert kept["kept"] == 0 and kept["exact"]
            assert len(list(again)) == len(want)
            kept = again.stats()["packing"]
            for k in ("rows", "truncated", "dropped", "fill", "counted"):
                assert kept[k] == was[k], k


def test_a_mixture_counts_each_window_of_its_stream_as_counting_at_open_would(tmp_path, models, no_kept,
                                                                              monkeypatch):  # noqa: F811
    """SequenceLoader(Mixture(...), packing="whole") counts lazily too: the loader is made with the
    first window of the blended stream counted (the sources' counted conversations sum to the
    window, len() an estimate), the batches are those of counting at open on one and two ranks
    (the background counter off and on), the epoch's end has counted every source, and bad
    conversations of a source are skipped as their windows are counted, as at open."""
    from stokehold import Mixture

    a_convs, b_convs = make_convs(150, seed=31, long_every=9), make_convs(90, seed=32)
    b_convs[40] = "{not json"
    a, b = write(tmp_path / "a", a_convs), write(tmp_path / "b", b_convs)
    tmpl = ChatTemplate(models["chatml"])

    def mix():
        return Mixture({"a": a, "b": b})  # weights in proportion: each conversation once an epoch

    for world in (1, 2):
        for rank in range(world):
            kw = dict(KW, batch_size=3, rank=rank, world_size=world, drop_last=False, on_error="skip")
            first = eager(no_kept, mix(), tmpl, **kw)
            packing = first.stats()["packing"]
            assert packing["counted"] == 240 and packing["exact"]
            want = list(first)
            ld = lazy(no_kept, mix(), tmpl, **kw)
            packing = ld.stats()["packing"]
            assert packing["counted"] == KW["window"] and not packing["exact"]
            assert sum(s["conversations"] for s in packing["sources"].values()) <= KW["window"]
            same_batches(list(ld), want)
            packing = ld.stats()["packing"]
            assert packing["counted"] == 240 and packing["exact"]
            assert packing["sources"]["b"]["skipped"] == 1
            assert packing["skipped_examples"] == first.stats()["packing"]["skipped_examples"]
            assert "source 'b'" in packing["skipped_examples"][0][1]
            monkeypatch.setenv("STOKEHOLD_CHAT_COUNT_AHEAD", "1")
            same_batches(list(lazy(no_kept, mix(), tmpl, **kw)), want)
            monkeypatch.setenv("STOKEHOLD_CHAT_COUNT_AHEAD", "0")
