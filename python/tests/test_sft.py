"""SequenceLoader(..., text=ChatTemplate(...), packing="whole"): whole conversations packed into
rows (supervised fine-tuning).

The rows are compared with a pure-Python reference of the plan (best-fit-decreasing over windows
of the epoch's order) and with ChatTemplate.encode per conversation; the tokenizer and templates
are made here as in test_chat.py (nothing is downloaded)."""

import json
import random

import numpy as np
import pytest

import stokehold
from stokehold import ConfigError, StokeholdError
from stokehold.text import ChatTemplate

pytest.importorskip("tokenizers")

from test_chat import CHATML, STRICT, model_dir, train_tokenizer, words  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-models")
    tok = train_tokenizer(root, "bytelevel")
    return {name: model_dir(root, tok, name, t) for name, t in (("chatml", CHATML), ("strict", STRICT))}


def make_convs(n, seed=0, long_every=0):
    """`n` conversations of varied lengths (some very short, some long when `long_every`)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        conv = []
        for _ in range(rng.randint(1, 3)):
            hi = 60 if long_every and i % long_every == 0 else 12
            conv.append({"role": "user", "content": words(rng, 1, hi)})
            conv.append({"role": "assistant", "content": words(rng, 1, hi)})
        out.append(conv)
    return out


def write(path, convs, field="messages"):
    with stokehold.ShardWriter(path, {field: "string", "n": "int64"}, shard_size=4096) as w:
        for i, c in enumerate(convs):
            w.write({field: c if isinstance(c, str) else json.dumps(c), "n": i})
    return stokehold.Dataset(path)


def reference_rows(counts, seq_len, window, overlong="truncate"):
    """The plan of an unshuffled epoch, in Python: windows of the dataset order, each packed
    best-fit-decreasing (longest first, ties by order; the fullest row that holds it, ties by the
    row made first)."""
    rows = []
    for at in range(0, len(counts), window):
        items = []
        for i in range(at, min(at + window, len(counts))):
            c = counts[i]
            if c > seq_len:
                if overlong == "drop":
                    continue
                c = seq_len
            if c > 0:
                items.append((c, i))
        items.sort(key=lambda x: (-x[0], x[1]))
        made, room = [], []
        for c, i in items:
            fits = [(room[r], r) for r in range(len(made)) if room[r] >= c]
            if fits:
                _, r = min(fits)
                made[r].append(i)
                room[r] -= c
            else:
                made.append([i])
                room.append(seq_len - c)
        rows.extend(made)
    return rows


def encodings(tmpl, convs):
    return [tmpl.encode(c) for c in convs]


def loader(ds, tmpl, **kw):
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return stokehold.SequenceLoader(ds, text=tmpl, packing="whole", **kw)


def rows_of(batches):
    """Each delivered row's conversations (doc_ids without the -1 padding)."""
    return [[int(d) for d in row if d >= 0] for b in batches for row in b["doc_ids"]]


def two_ranks_then_three(make, full, rows_of=rows_of):
    """Two ranks (``make(rank, world_size)`` makes each one's loader, batches of 2) run 2 steps,
    which must be the uninterrupted run's first 8 rows (``full``); three ranks continue from rank
    0's state (through JSON). ``rows_of`` reads a list of batches' rows. Returns each of the
    three ranks' batches, after checking that their
    rows, step by step and rank by rank, continue ``full`` to its last whole step."""
    two = [make(r, 2) for r in range(2)]
    its = [iter(l) for l in two]
    done = []
    for _ in range(2):
        for it in its:
            done += rows_of([next(it)])
    assert done == full[:8]
    state = json.loads(json.dumps(two[0].state_dict()))
    three = [make(r, 3) for r in range(3)]
    for l in three:
        l.load_state_dict(state)
    per_rank = [list(l) for l in three]
    after = []
    for s in range(len(per_rank[0])):
        for r in range(3):
            after += rows_of(per_rank[r][s:s + 1])
    assert after == full[8: 8 + len(after)]
    assert len(after) == (len(full) - 8) // 6 * 6
    return per_rank


def check_row(b, r, docs, encs, seq_len, pad_id=0):
    """Row `r` of batch `b` holds the conversations `docs` one after another, as encoded."""
    at = 0
    for s, d in enumerate(docs):
        ids = encs[d]["input_ids"][:seq_len - at]
        mask = encs[d]["assistant_masks"][: len(ids)]
        n = len(ids)
        assert (b["input_ids"][r, at:at + n] == ids).all()
        assert (b["labels"][r, at:at + n] == np.where(mask == 1, ids, -100)).all()
        assert (b["position_ids"][r, at:at + n] == np.arange(n)).all()
        assert (b["segment_ids"][r, at:at + n] == s).all()
        at += n
    assert (b["input_ids"][r, at:] == pad_id).all()
    assert (b["labels"][r, at:] == -100).all()
    assert (b["position_ids"][r, at:] == np.arange(seq_len - at)).all()
    assert (b["segment_ids"][r, at:] == -1).all()
    return at


def test_rows_equal_a_python_reference_of_the_plan(tmp_path, models):
    """Unshuffled: the rows are the reference's best-fit-decreasing plan, each row's tokens the
    conversations' ChatTemplate.encode one after another (overlong ones truncated), labels -100
    where the mask is 0 and in padding, positions restarting per conversation; cu_seqlens and
    max_seqlen describe the batch flattened."""
    convs = make_convs(90, seed=1, long_every=11)
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["chatml"])
    encs = encodings(tmpl, convs)
    counts = [len(e["input_ids"]) for e in encs]
    seq_len, window = 96, 16
    assert max(counts) > seq_len, "some conversations are longer than a row"
    expected = reference_rows(counts, seq_len, window)
    ld = loader(ds, tmpl, seq_len=seq_len, batch_size=4, shuffle=False, window=window, pad_id=3, drop_last=False)
    batches = list(ld)
    got = rows_of(batches)
    assert got[: len(expected)] == expected
    assert len(ld) == -(-len(expected) // 4)
    real = 0
    for b in batches:
        assert b["input_ids"].dtype == np.int32 and b["input_ids"].shape == (4, seq_len)
        assert b["labels"].dtype == np.int64 and b["position_ids"].dtype == np.int64
        assert b["doc_ids"].dtype == np.int64 and b["doc_ids"].shape[0] == 4
        lens = []
        for r in range(4):
            if b.get("is_padding") is not None and b["is_padding"][r]:
                continue
            docs = [int(d) for d in b["doc_ids"][r] if d >= 0]
            used = check_row(b, r, docs, encs, seq_len, pad_id=3)
            lens += [min(counts[d], seq_len) for d in docs] + ([seq_len - used] if used < seq_len else [])
            real += used
        cu = b["cu_seqlens"]
        assert cu.dtype == np.int32 and cu[0] == 0 and cu[-1] == 4 * seq_len
        assert b["max_seqlen"] == int(np.diff(cu).max())
        if len(lens) == 4 * len(lens) // 4 and not b.get("is_padding", np.zeros(4, bool)).any():
            assert list(np.diff(cu)) == lens
    packing = ld.stats()["packing"]
    assert packing["conversations"] == 90 and packing["rows"] == len(expected)
    assert packing["truncated"] == sum(c > seq_len for c in counts) and packing["dropped"] == 0
    tokens = sum(min(c, seq_len) for c in counts)
    assert packing["fill"] == pytest.approx(tokens / (len(expected) * seq_len))


def test_overlong_drop_leaves_long_conversations_out_and_counts_them(tmp_path, models):
    convs = make_convs(60, seed=2, long_every=7)
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["chatml"])
    counts = [len(e["input_ids"]) for e in encodings(tmpl, convs)]
    seq_len = 96
    long = {i for i, c in enumerate(counts) if c > seq_len}
    assert long
    ld = loader(ds, tmpl, seq_len=seq_len, batch_size=2, shuffle=False, window=8, overlong="drop", drop_last=False)
    got = rows_of(list(ld))
    assert got[: len(reference_rows(counts, seq_len, 8, "drop"))] == reference_rows(counts, seq_len, 8, "drop")
    seen = {d for row in got for d in row}
    assert not (seen & long) and seen == set(range(60)) - long
    assert ld.stats()["packing"]["dropped"] == len(long)
    with pytest.raises(ConfigError, match="overlong"):
        loader(ds, tmpl, seq_len=seq_len, batch_size=2, overlong="split")


def test_shuffled_rows_are_the_same_whatever_the_thread_count(tmp_path, models):
    """Deterministic from the seed: 1 and 3 worker threads give the same batches; every
    conversation is in exactly one row of an epoch; another seed or epoch gives other rows."""
    convs = make_convs(120, seed=3, long_every=13)
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["chatml"])
    runs = []
    for threads in (1, 3):
        ld = loader(ds, tmpl, seq_len=128, batch_size=3, seed=5, window=32, threads=threads, drop_last=False)
        runs.append([{k: v for k, v in b.items()} for b in ld])
    a, b = runs
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for k in ("input_ids", "labels", "position_ids", "segment_ids", "doc_ids", "cu_seqlens"):
            assert (x[k] == y[k]).all(), k
    rows = rows_of(a)
    flat = [d for row in rows for d in row]
    # the last batch may repeat rows as padding (drop_last=False)
    unique_rows = []
    for r in rows:
        if r not in unique_rows:
            unique_rows.append(r)
    assert sorted(d for r in unique_rows for d in r) == list(range(120))
    other = rows_of(list(loader(ds, tmpl, seq_len=128, batch_size=3, seed=6, window=32, drop_last=False)))
    assert other != rows
    assert len(flat) >= 120


def test_resume_is_exact_at_any_step_and_from_two_ranks_to_three(tmp_path, models):
    convs = make_convs(150, seed=4, long_every=9)
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["chatml"])
    kw = dict(seq_len=128, seed=11, window=24)
    full = rows_of(list(loader(ds, tmpl, batch_size=2, **kw)))
    assert len(full) > 20
    for k in (1, 3, 6):
        ld = loader(ds, tmpl, batch_size=2, **kw)
        it = iter(ld)
        head = [next(it) for _ in range(k)]
        state = ld.state_dict()
        del it
        resumed = loader(ds, tmpl, batch_size=2, **kw)
        resumed.load_state_dict(json.loads(json.dumps(state)))
        assert rows_of(head) + rows_of(list(resumed)) == full, k
    # two ranks run 2 steps, three ranks continue from rank 0's state
    two_ranks_then_three(lambda r, w: loader(ds, tmpl, batch_size=2, rank=r, world_size=w, **kw), full)


def test_a_bad_conversation_is_named_or_skipped(tmp_path, models):
    """A record that is not JSON, and a conversation the template raises on (a bad role): with
    on_error="fail" the error of the batch that needs it names the conversation; with "skip" they are left out
    and counted in stats()["packing"], unless more than max_skip_fraction of them are bad."""
    convs = make_convs(40, seed=5)
    convs[7] = "{not json"
    convs[19] = [{"role": "tool", "content": "x"}]
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["strict"])
    with pytest.raises(StokeholdError, match="conversation 7"):
        # counted lazily: the batch whose window holds it fails
        list(loader(ds, tmpl, seq_len=128, batch_size=2))
    with pytest.raises(StokeholdError, match="max_skip_fraction"):
        loader(ds, tmpl, seq_len=128, batch_size=2, on_error="skip", max_skip_fraction=0.04)
    ld = loader(ds, tmpl, seq_len=128, batch_size=2, on_error="skip", max_skip_fraction=0.05, drop_last=False)
    packing = ld.stats()["packing"]
    assert packing["skipped"] == 2
    assert [e[0] for e in packing["skipped_examples"]] == [7, 19]
    assert "Only user and assistant roles" in packing["skipped_examples"][1][1]
    seen = {d for row in rows_of(list(ld)) for d in row}
    assert seen == set(range(40)) - {7, 19}


def test_packing_options_are_checked(tmp_path, models):
    ds = write(tmp_path / "ds", make_convs(10))
    tmpl = ChatTemplate(models["chatml"], messages="messages")
    with pytest.raises(ConfigError, match="ChatTemplate"):
        stokehold.SequenceLoader(ds, seq_len=64, packing="whole", rank=0, world_size=1)
    with pytest.raises(ConfigError, match="packing"):
        stokehold.SequenceLoader(ds, seq_len=64, text=tmpl, packing="greedy", rank=0, world_size=1)
    with pytest.raises(ConfigError, match="max_len"):
        loader(ds, tmpl, seq_len=64, max_len=10)
    with pytest.raises(ConfigError, match="no field"):
        loader(ds, ChatTemplate(models["chatml"], messages="conversation"), seq_len=64)
    # a template with images over a dataset without its list of images: refused, naming the field
    from stokehold.vision import Qwen2VL

    with_images = ChatTemplate(models["chatml"], vision=Qwen2VL(), image_token="<|im_end|>")
    with pytest.raises(ConfigError, match='no field "images"'):
        loader(ds, with_images, seq_len=64)


def test_torch_batches_and_pickling(tmp_path, models):
    torch = pytest.importorskip("torch")
    import pickle

    ds = write(tmp_path / "ds", make_convs(30, seed=6))
    tmpl = ChatTemplate(models["chatml"])
    ld = loader(ds, tmpl, seq_len=64, batch_size=2, to="torch", seed=1)
    it = iter(ld)
    first = next(it)
    assert first["input_ids"].dtype == torch.int32 and first["cu_seqlens"].dtype == torch.int32
    assert isinstance(first["max_seqlen"], int)
    rest = [b["doc_ids"].tolist() for b in it]
    again = pickle.loads(pickle.dumps(loader(ds, tmpl, seq_len=64, batch_size=2, to="torch", seed=1)))
    assert [b["doc_ids"].tolist() for b in again] == [first["doc_ids"].tolist()] + rest


def test_conversations_from_parquet_in_place_give_the_rows_of_their_pack(tmp_path, models):
    """A Parquet file with the conversations as JSON text, read in place, gives the same rows as
    the same conversations written to a packed dataset."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    # long conversations in 6 row groups: the column is read from the file (nothing kept in the
    # index), a file that was refused ("a schema has 1 to 1024 fields, this one has 0")
    convs = make_convs(40, seed=8, long_every=6)
    pq.write_table(pa.table({"messages": [json.dumps(c) for c in convs]}), tmp_path / "c.parquet", row_group_size=7)
    in_place = stokehold.Dataset(tmp_path / "c.parquet", index_dir=tmp_path / "ix")
    assert in_place.in_place == "parquet"
    tmpl = ChatTemplate(models["chatml"])
    kw = dict(seq_len=128, batch_size=2, seed=3, drop_last=False)
    a = list(loader(in_place, tmpl, **kw))
    b = list(loader(write(tmp_path / "packed", convs), tmpl, **kw))
    assert rows_of(a) == rows_of(b) and len(a) == len(b)
    for x, y in zip(a, b):
        assert (x["input_ids"] == y["input_ids"]).all() and (x["labels"] == y["labels"]).all()


def test_kept_encodings_and_encoding_again_give_the_same_rows(tmp_path, models, monkeypatch):
    """The count pass keeps encodings within keep_encodings (filling then does not encode them
    again); without it (0), or past the budget, rows are encoded again: the same batches. Then
    an open that finds the counts kept on disk encodes nothing at open (kept 0) and gives them
    again."""
    convs = make_convs(80, seed=9, long_every=10)
    ds = write(tmp_path / "ds", convs)
    tmpl = ChatTemplate(models["chatml"])
    kw = dict(seq_len=128, batch_size=3, seed=2, window=20, drop_last=False)
    runs, kept = [], []
    for i, keep in enumerate(("auto", 0, 6000, "auto")):
        # each of the first three counts (no counts kept from the one before); the last finds
        # the third's counts
        monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / f"kept{min(i, 2)}"))
        ld = loader(ds, tmpl, keep_encodings=keep, **kw)
        runs.append(list(ld))
        kept.append(ld.stats()["packing"]["kept"])
    assert kept[0] == 80 and kept[1] == 0 and 0 < kept[2] < 80 and kept[3] == 0
    assert len(list((tmp_path / "kept2" / "counts").glob("*.skcc"))) == 1
    for other in runs[1:]:
        assert len(other) == len(runs[0])
        for x, y in zip(runs[0], other):
            for k in ("input_ids", "labels", "position_ids", "segment_ids", "doc_ids"):
                assert (x[k] == y[k]).all(), k
    with pytest.raises(ConfigError, match="\"lots\" is not a byte count"):
        loader(ds, tmpl, keep_encodings="lots", **kw)
