"""SequenceLoader(Mixture(...), text=..., packing="whole"): conversations of several datasets (and
plain-text documents, text.Documents) blended by weight, then packed whole into rows.

The rows are compared with a pure-Python reference of the blend (error diffusion on exact
weights) and of the plan (best-fit-decreasing over windows of the blended stream), and with
ChatTemplate.encode / the tokenizer per conversation or document."""

import json
import random

import numpy as np
import pytest

import stokehold
from stokehold import ConfigError
from stokehold.text import ChatTemplate, Documents

pytest.importorskip("tokenizers")

from test_chat import CHATML, STRICT, model_dir, train_tokenizer, words  # noqa: E402
from test_sft import make_convs, two_ranks_then_three, write  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft-mix-models")
    tok = train_tokenizer(root, "bytelevel")
    return {name: model_dir(root, tok, name, t) for name, t in (("chatml", CHATML), ("strict", STRICT))}


def write_docs(path, texts):
    with stokehold.ShardWriter(path, {"text": "string"}, shard_size=4096) as w:
        for t in texts:
            w.write({"text": t})
    return stokehold.Dataset(path)


def make_texts(n, seed=0):
    rng = random.Random(seed)
    return [words(rng, 1, 50 if i % 5 == 0 else 15) for i in range(n)]


def blend(lens, weights, n, later=()):
    """The first `n` (source, index) of the blended stream, unshuffled: sample g goes to the
    source with the largest deficit T_s(g + 1) - c_s, T_s the sum of its weight over the samples
    so far (each with the weights in force at it: `weights`, then `later`'s (at, weights) from
    sample `at` on; exact: weights are multiples of 1/8 here), ties to the lower index; a
    source's k-th sample is its sample k mod len."""
    phases = [(0, weights), *later]
    counts, target = [0] * len(lens), [0] * len(lens)
    out = []
    for g in range(n):
        w = [int(x * 8) for x in [ws for at, ws in phases if at <= g][-1]]
        assert sum(w) == 8
        target = [t + x for t, x in zip(target, w)]
        best = None
        for i in range(len(lens)):
            d = target[i] - 8 * counts[i]
            if w[i] and (best is None or d > best[0]):
                best = (d, i)
        s = best[1]
        out.append((s, counts[s] % lens[s]))
        counts[s] += 1
    return out


def pack(stream, count, seq_len, window):
    """Best-fit-decreasing over windows of `stream` (overlong truncated, empty left out)."""
    rows = []
    for at in range(0, len(stream), window):
        items = [(min(count(x), seq_len), i, x) for i, x in enumerate(stream[at:at + window]) if count(x) > 0]
        items.sort(key=lambda t: (-t[0], t[1]))
        made, room = [], []
        for c, _, x in items:
            fits = [(room[r], r) for r in range(len(made)) if room[r] >= c]
            if fits:
                _, r = min(fits)
                made[r].append(x)
                room[r] -= c
            else:
                made.append([x])
                room.append(seq_len - c)
        rows.extend(made)
    return rows


def loader(mix, text, **kw):
    kw.setdefault("rank", 0)
    kw.setdefault("world_size", 1)
    return stokehold.SequenceLoader(mix, text=text, packing="whole", **kw)


def rows_of(batches):
    """Each delivered row's conversations as (source, index in its dataset)."""
    return [
        [(int(s), int(d)) for s, d in zip(srcs, docs) if d >= 0]
        for b in batches
        for srcs, docs in zip(b["doc_sources"], b["doc_ids"])
    ]


def check_row(b, r, docs, encs, seq_len, pad_id=0):
    at = 0
    for j, (s, d) in enumerate(docs):
        ids, mask = encs[s][d]
        ids, mask = ids[: seq_len - at], mask[: seq_len - at]
        n = len(ids)
        assert (b["input_ids"][r, at:at + n] == ids).all()
        assert (b["labels"][r, at:at + n] == np.where(mask == 1, ids, -100)).all()
        assert (b["position_ids"][r, at:at + n] == np.arange(n)).all()
        assert (b["segment_ids"][r, at:at + n] == j).all()
        at += n
    assert (b["input_ids"][r, at:] == pad_id).all()
    assert (b["labels"][r, at:] == -100).all()
    assert (b["segment_ids"][r, at:] == -1).all()


def test_conversations_and_documents_blend_then_pack_as_a_python_reference(tmp_path, models):
    """Two conversation sets (each its own template) and one of plain text (Documents, eos after
    each): unshuffled, the rows are the reference's blend of the stream by weights 1/2, 1/4, 1/4
    packed best-fit-decreasing per window; each row's tokens are the conversations' encodings
    (labels where the mask is 1) and the documents' tokens with eos (labels on every token);
    stats()["packing"]["sources"] counts each source's conversations and tokens in the plan."""
    from tokenizers import Tokenizer

    a_convs = make_convs(30, seed=21, long_every=7)
    b_convs = make_convs(12, seed=22)
    texts = make_texts(20, seed=23)
    mix = stokehold.Mixture(
        {"a": write(tmp_path / "a", a_convs), "b": write(tmp_path / "b", b_convs), "web": write_docs(tmp_path / "web", texts)},
        weights={"a": 0.5, "b": 0.25, "web": 0.25},
    )
    chatml, strict = ChatTemplate(models["chatml"]), ChatTemplate(models["strict"])
    docs = Documents(models["chatml"] / "tokenizer.json", eos="</s>")
    tok = Tokenizer.from_file(str(models["chatml"] / "tokenizer.json"))
    eos = tok.token_to_id("</s>")
    encs = [
        [(np.array(e["input_ids"]), np.array(e["assistant_masks"])) for e in (chatml.encode(c) for c in a_convs)],
        [(np.array(e["input_ids"]), np.array(e["assistant_masks"])) for e in (strict.encode(c) for c in b_convs)],
        [(np.array(tok.encode(t, add_special_tokens=False).ids + [eos]), None) for t in texts],
    ]
    encs[2] = [(ids, np.ones_like(ids)) for ids, _ in encs[2]]
    seq_len, window = 96, 16
    stream = blend([30, 12, 20], [0.5, 0.25, 0.25], 62)
    expected = pack(stream, lambda x: len(encs[x[0]][x[1]][0]), seq_len, window)
    ld = loader(mix, {"a": chatml, "b": strict, "web": docs}, seq_len=seq_len, batch_size=4, shuffle=False, window=window, drop_last=False)
    batches = list(ld)
    ld.set_epoch(0)
    packing = ld.stats()["packing"]  # the plan of the epoch just run (planned as its rows were asked for)
    assert packing["exact"]
    got = rows_of(batches)
    assert got[: len(expected)] == expected
    assert len(ld) == -(-len(expected) // 4)
    for i, b in enumerate(batches):
        assert b["doc_sources"].dtype == np.int64 and b["doc_sources"].shape == b["doc_ids"].shape
        for r in range(b["input_ids"].shape[0]):
            if 4 * i + r < len(expected):
                check_row(b, r, expected[4 * i + r], encs, seq_len)
    assert packing["rows"] == len(expected)
    for s, name in enumerate(["a", "b", "web"]):
        mine = [x for row in expected for x in row if x[0] == s]
        src = packing["sources"][name]
        assert src["index"] == s
        assert src["conversations"] == len(mine)
        assert src["tokens"] == sum(min(len(encs[s][d][0]), seq_len) for _, d in mine)
    assert packing["sources"]["a"]["weight"] == 0.5
    # b (12 conversations) is a quarter of 62: it repeats within the epoch
    passes = packing["sources"]["b"]["passes"]
    assert passes == pytest.approx(sum(x[0] == 1 for x in stream) / 12) and passes > 1


def test_mixture_resume_is_exact_at_any_step_and_from_two_ranks_to_three(tmp_path, models):
    """Shuffled, three sources (one of plain text): a state after k steps continues with exactly
    the rows of the uninterrupted run, and two ranks' state continues on three ranks."""
    mix = stokehold.Mixture(
        {
            "a": write(tmp_path / "a", make_convs(80, seed=31, long_every=9)),
            "b": write(tmp_path / "b", make_convs(40, seed=32)),
            "web": write_docs(tmp_path / "web", make_texts(50, seed=33)),
        },
        weights={"a": 0.5, "b": 0.3, "web": 0.2},
    )
    tmpl = ChatTemplate(models["chatml"])
    text = {"a": tmpl, "b": tmpl, "web": Documents(models["chatml"], eos="</s>")}
    kw = dict(seq_len=128, seed=11, window=24)
    full = rows_of(list(loader(mix, text, batch_size=2, **kw)))
    assert len(full) > 20
    assert {s for row in full for s, _ in row} == {0, 1, 2}
    for k in (1, 3, 6):
        ld = loader(mix, text, batch_size=2, **kw)
        it = iter(ld)
        head = [next(it) for _ in range(k)]
        state = ld.state_dict()
        del it
        resumed = loader(mix, text, batch_size=2, **kw)
        resumed.load_state_dict(json.loads(json.dumps(state)))
        assert rows_of(head) + rows_of(list(resumed)) == full, k
    two_ranks_then_three(lambda r, w: loader(mix, text, batch_size=2, rank=r, world_size=w, **kw), full, rows_of)
    # another blend (other weights) is not this run: its state is refused
    other = loader(stokehold.Mixture(dict(zip(mix.names, mix.datasets)), weights={"a": 0.2, "b": 0.3, "web": 0.5}), text, batch_size=2, **kw)
    with pytest.raises(stokehold.IncompatibleStateError):
        other.load_state_dict(state)


def test_the_same_rows_whatever_the_thread_count_and_one_template_for_all(tmp_path, models):
    """One ChatTemplate for every source; 1 or 3 threads give the same batches."""
    mix = stokehold.Mixture([write(tmp_path / "a", make_convs(40, seed=41)), write(tmp_path / "b", make_convs(25, seed=42))])
    tmpl = ChatTemplate(models["chatml"])
    runs = [list(loader(mix, tmpl, seq_len=96, batch_size=3, seed=5, threads=t, drop_last=False)) for t in (1, 3)]
    assert rows_of(runs[0]) == rows_of(runs[1])
    for x, y in zip(*runs):
        assert (x["input_ids"] == y["input_ids"]).all() and (x["labels"] == y["labels"]).all()
    # no weights: each source in proportion to its conversations, one pass of each per epoch
    seen = sorted({x for row in rows_of(runs[0]) for x in row})
    assert seen == [(0, i) for i in range(40)] + [(1, i) for i in range(25)]


def test_mixture_of_conversations_options_are_checked(tmp_path, models):
    a, b = write(tmp_path / "a", make_convs(10)), write(tmp_path / "b", make_convs(10, seed=1))
    tmpl = ChatTemplate(models["chatml"])
    mix = stokehold.Mixture({"a": a, "b": b}, weights={"a": 1, "b": 1})
    with pytest.raises(ConfigError, match="not a source"):
        loader(mix, {"a": tmpl, "c": tmpl}, seq_len=64)
    with pytest.raises(ConfigError, match="for the source 'b'"):
        loader(mix, {"a": tmpl}, seq_len=64)
    with pytest.raises(ConfigError, match="is for a Mixture"):
        loader(a, {"a": tmpl}, seq_len=64)
    with pytest.raises(ConfigError, match="schedule in steps"):
        loader(stokehold.Mixture({"a": a, "b": b}, weights=[1, 1], schedule=[(5, [1, 0])]), tmpl, seq_len=64)
    with pytest.raises(ConfigError, match="reblend"):
        loader(stokehold.Mixture({"a": a, "b": b}, on_change="reblend"), tmpl, seq_len=64)
    with pytest.raises(ConfigError, match="source 'b'.*no field"):
        loader(mix, {"a": tmpl, "b": Documents(models["chatml"], field="body")}, seq_len=64)
    with pytest.raises(ConfigError, match="source 'b'"):
        loader(mix, {"a": tmpl, "b": Documents(models["chatml"], eos="<no such token>")}, seq_len=64)


def test_documents_alone_are_packed_whole(tmp_path, models):
    """text=Documents(...) over one dataset of plain text: each document whole in a row, bos and
    eos around it, the loss on every token."""
    from tokenizers import Tokenizer

    texts = make_texts(30, seed=51)
    ds = write_docs(tmp_path / "web", texts)
    tok = Tokenizer.from_file(str(models["chatml"] / "tokenizer.json"))
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    ld = stokehold.SequenceLoader(ds, seq_len=64, batch_size=2, text=Documents(models["chatml"], bos="<s>", eos="</s>"), packing="whole", rank=0, world_size=1, drop_last=False)
    seen = set()
    for b in ld:
        for r in range(2):
            at = 0
            for j, d in enumerate(int(x) for x in b["doc_ids"][r] if x >= 0):
                ids = ([bos] + tok.encode(texts[d], add_special_tokens=False).ids + [eos])[: 64 - at]
                assert (b["input_ids"][r, at:at + len(ids)] == ids).all()
                assert (b["labels"][r, at:at + len(ids)] == ids).all()
                assert (b["segment_ids"][r, at:at + len(ids)] == j).all()
                at += len(ids)
                seen.add(d)
    assert seen == set(range(30))


def test_bad_conversations_of_a_source_are_skipped_within_its_budget_and_named_with_it(tmp_path, models):
    """Under on_error="skip", a source's unreadable conversations are left out of the rows and
    listed with the source's name; a source's own max_skip_fraction holds it to its budget; a
    source of weight 0 gives no conversation; epoch_samples sets the stream's slice."""
    a_convs = make_convs(30, seed=61)
    b_convs = make_convs(20, seed=62)
    b_convs[4] = "{not json"
    a, b, c = write(tmp_path / "a", a_convs), write(tmp_path / "b", b_convs), write(tmp_path / "c", make_convs(10, seed=63))
    tmpl = ChatTemplate(models["chatml"])
    # counted lazily: at open when its window is the first, else with the batch that needs it
    with pytest.raises(stokehold.StokeholdError, match="conversation 4"):
        list(loader(stokehold.Mixture({"a": a, "b": b}), tmpl, seq_len=96, batch_size=2))
    with pytest.raises(stokehold.StokeholdError, match="max_skip_fraction"):
        list(loader(stokehold.Mixture({"a": a, "b": b}, max_skip_fraction={"b": 0.01}), tmpl, seq_len=96, batch_size=2, on_error="skip"))
    mix = stokehold.Mixture({"a": a, "b": b, "c": c}, weights={"a": 0.5, "b": 0.5, "c": 0}, epoch_samples=40)
    ld = loader(mix, tmpl, seq_len=96, batch_size=2, on_error="skip", drop_last=False, shuffle=False)
    packing = ld.stats()["packing"]
    assert packing["conversations"] == 40
    assert packing["skipped"] == 1 and packing["sources"]["b"]["skipped"] == 1
    assert "source 'b'" in packing["skipped_examples"][0][1] and "conversation 4" in packing["skipped_examples"][0][1]
    rows = rows_of(list(ld))
    seen = [x for row in rows for x in row]
    assert (1, 4) not in seen and not any(s == 2 for s, _ in seen)
    # 40 conversations of the stream, 20 of each source (b's 4 left out), each once
    assert sorted(set(seen)) == [(0, i) for i in range(20)] + [(1, i) for i in range(20) if i != 4]
    assert packing["sources"]["c"]["conversations"] == 0 and packing["sources"]["c"]["weight"] == 0


def test_a_schedule_in_conversations_changes_the_weights_at_its_conversation(tmp_path, models):
    """schedule_unit="samples" counts conversations of the stream: unshuffled, the rows are the
    reference's blend with the weights switched at conversation 24 (3/4 a, then 1/4 a), packed
    per window; the state of this run is refused by a mixture whose schedule differs."""
    a_convs, b_convs = make_convs(40, seed=71), make_convs(40, seed=72)
    tmpl = ChatTemplate(models["chatml"])
    encs = [[tmpl.encode(c)["input_ids"] for c in convs] for convs in (a_convs, b_convs)]
    datasets = {"a": write(tmp_path / "a", a_convs), "b": write(tmp_path / "b", b_convs)}
    mix = stokehold.Mixture(datasets, weights={"a": 0.75, "b": 0.25}, schedule=[(24, {"a": 0.25, "b": 0.75})], schedule_unit="samples", epoch_samples=48)
    seq_len, window = 96, 8
    stream = blend([40, 40], [0.75, 0.25], 48, later=[(24, [0.25, 0.75])])
    assert sum(s == 0 for s, _ in stream[:24]) == 18 and sum(s == 0 for s, _ in stream[24:]) == 6
    expected = pack(stream, lambda x: len(encs[x[0]][x[1]]), seq_len, window)
    ld = loader(mix, tmpl, seq_len=seq_len, batch_size=2, shuffle=False, window=window, drop_last=False)
    assert rows_of(list(ld))[: len(expected)] == expected
    run = loader(mix, tmpl, seq_len=seq_len, batch_size=2, window=window)
    it = iter(run)
    next(it)
    state = run.state_dict()
    del it
    other = stokehold.Mixture(datasets, weights={"a": 0.75, "b": 0.25}, schedule=[(30, {"a": 0.25, "b": 0.75})], schedule_unit="samples", epoch_samples=48)
    with pytest.raises(stokehold.IncompatibleStateError):
        loader(other, tmpl, seq_len=seq_len, batch_size=2, window=window).load_state_dict(state)


def test_a_mixture_loader_with_a_template_per_source_pickles(tmp_path, models):
    """A loader of conversations and documents, each source with its own text=, pickled (as a
    DataLoader's workers or Ray get it) gives the same rows."""
    import pickle

    mix = stokehold.Mixture({"a": write(tmp_path / "a", make_convs(20, seed=81)), "w": write_docs(tmp_path / "w", make_texts(10, seed=82))})
    text = {"a": ChatTemplate(models["chatml"]), "w": Documents(models["chatml"], eos="</s>")}
    ld = loader(mix, text, seq_len=64, batch_size=2, seed=4)
    again = pickle.loads(pickle.dumps(ld))
    assert rows_of(list(ld)) == rows_of(list(again))
