"""Text: `stokehold pack --tokenizer`, stokehold.SequenceLoader, stokehold.text.Tokenize.

The tokenizer is trained here with the `tokenizers` package on text the test makes; nothing is
downloaded."""

import json
import pickle
import random
import time

import numpy as np
import pytest

import stokehold
from stokehold import ConfigError, IncompatibleStateError, SequenceLoader
from stokehold._native import run_cli
from stokehold.text import Tokenize

tokenizers = pytest.importorskip("tokenizers")

WORDS = "the a data loader reads shards from disk and model trains on tokens every step while workers decode".split()


def make_docs(n, seed=1):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 120))) for _ in range(n)]


def train(docs, path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(docs, trainers.WordLevelTrainer(special_tokens=["[UNK]", "<s>", "</s>", "<pad>"]))
    tok.save(str(path))
    return tok


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    docs = make_docs(400)
    tok = train(docs, root / "tokenizer.json")
    with open(root / "corpus.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
    dest = root / "tok"
    code = run_cli(["stokehold", "pack", str(root / "corpus.jsonl"), str(dest), "--from", "jsonl",
                    "--text-field", "text", "--tokenizer", str(root / "tokenizer.json"),
                    "--append-eos", "</s>", "--shard-size", "16KiB", "--threads", "2"])
    assert code == 0
    return root, docs, tok, dest


def stream(docs, tok):
    eos = tok.token_to_id("</s>")
    out = []
    for d in docs:
        out.extend(tok.encode(d, add_special_tokens=False).ids)
        out.append(eos)
    return np.array(out, dtype=np.int64)


def test_pack_writes_a_token_dataset(corpus):
    root, docs, tok, dest = corpus
    ds = stokehold.Dataset(dest)
    assert len(ds) == len(docs)
    m = json.loads((dest / "manifest.json").read_text())
    assert m["source"]["tokens"]["dtype"] == "u16"
    assert m["source"]["tokens"]["total_tokens"] == len(stream(docs, tok))
    ids = ds[3]["tokens"]
    assert isinstance(ids, np.ndarray) and ids.dtype == np.dtype("<u2")
    assert ids.shape == (len(tok.encode(docs[3], add_special_tokens=False).ids) + 1,)
    assert tok.decode(ids[:-1].tolist()) == tok.decode(tok.encode(docs[3]).ids)


def test_packed_windows_are_the_stream_with_shifted_labels(corpus):
    root, docs, tok, dest = corpus
    s = stream(docs, tok)
    T = 32
    loader = SequenceLoader(dest, seq_len=T, batch_size=4, shuffle=True, seed=3, include_ids=True,
                            position_ids=True, segment_ids=True, rank=0, world_size=1)
    assert loader.total_tokens == len(s)
    seen = []
    for b in loader:
        x, y = b["input_ids"], b["labels"]
        assert x.dtype == np.int32 and x.shape == (4, T) and y.shape == (4, T)
        for r, w in enumerate(b["id"]):
            start = int(w) * T
            np.testing.assert_array_equal(x[r], s[start:start + T])
            np.testing.assert_array_equal(y[r], s[start + 1:start + T + 1])
            assert b["position_ids"][r][0] == 0 and b["segment_ids"][r][0] == 0
            seen.append(int(w))
    n = (len(s) - 1) // T
    assert len(seen) == n // 4 * 4 and len(set(seen)) == len(seen)
    assert seen != sorted(seen)
    assert loader.epoch == 1


def test_resume_mid_epoch_and_other_world_size(corpus):
    _, _, _, dest = corpus
    kw = dict(seq_len=16, batch_size=2, seed=5, rank=0, world_size=1)
    full = [b["input_ids"].copy() for b in SequenceLoader(dest, **kw)]
    loader = SequenceLoader(dest, **kw)
    it = iter(loader)
    head = [next(it)["input_ids"].copy() for _ in range(7)]
    state = loader.state_dict()
    state = pickle.loads(pickle.dumps(state))
    again = SequenceLoader(dest, **kw)
    again.load_state_dict(state)
    rest = [b["input_ids"].copy() for b in again]
    assert len(head) + len(rest) == len(full)
    for a, b in zip(head + rest, full):
        np.testing.assert_array_equal(a, b)
    # two ranks of batch 1 share the rest of the epoch
    rows = []
    for rank in range(2):
        l2 = SequenceLoader(dest, seq_len=16, batch_size=1, seed=5, rank=rank, world_size=2)
        l2.load_state_dict(state)
        rows += [tuple(b["input_ids"][0]) for b in l2]
    want = {tuple(r) for b in full[7:] for r in b}
    assert set(rows) == want and len(rows) == len(want)
    other = SequenceLoader(dest, seq_len=8, batch_size=2, seed=5, rank=0, world_size=1)
    with pytest.raises(IncompatibleStateError):
        other.load_state_dict(state)


def test_documents_mode_and_torch(corpus):
    torch = pytest.importorskip("torch")
    _, docs, tok, dest = corpus
    pad = tok.token_to_id("<pad>")
    loader = SequenceLoader(dest, batch_size=8, max_len=50, pad_id=pad, bucket=64, dtype="int64",
                            shuffle=False, include_ids=True, to="torch", rank=0, world_size=1)
    n = 0
    for b in loader:
        x, y, m = b["input_ids"], b["labels"], b["attention_mask"]
        assert isinstance(x, torch.Tensor) and x.dtype == torch.int64
        for r, d in enumerate(b["id"].tolist()):
            ids = tok.encode(docs[d], add_special_tokens=False).ids + [tok.token_to_id("</s>")]
            ids = ids[:51]
            k = len(ids) - 1
            assert x[r, :k].tolist() == ids[:-1] and y[r, :k].tolist() == ids[1:]
            assert int(m[r].sum()) == k
            assert (x[r, k:] == pad).all() and (y[r, k:] == -100).all()
            n += 1
    assert n == len(docs) // 8 * 8


def test_tokenize_stage_in_loader(tmp_path):
    docs = make_docs(50, seed=2)
    tok = train(docs, tmp_path / "tokenizer.json")
    with stokehold.ShardWriter(tmp_path / "ds", {"text": "string"}) as w:
        for d in docs:
            w.write({"text": d})
    loader = stokehold.Loader(tmp_path / "ds", 10, shuffle=False, include_ids=True, rank=0, world_size=1,
                              transforms={"text": [Tokenize(tmp_path / "tokenizer.json", max_length=16, eos="</s>")]})
    pad = tok.token_to_id("<pad>")
    for b in loader:
        assert b["text"].dtype == np.int32 and b["text"].shape == (10, 16)
        for r, i in enumerate(b["id"]):
            ids = (tok.encode(docs[i], add_special_tokens=False).ids + [tok.token_to_id("</s>")])[:16]
            ids += [pad] * (16 - len(ids))
            assert b["text"][r].tolist() == ids
    ragged = stokehold.Loader(tmp_path / "ds", 10, shuffle=False, include_ids=True, rank=0, world_size=1,
                              transforms={"text": [Tokenize(tmp_path / "tokenizer.json", dtype="int64")]})
    for b in ragged:
        for r, i in enumerate(b["id"]):
            assert b["text"][r].dtype == np.int64
            assert b["text"][r].tolist() == tok.encode(docs[i], add_special_tokens=False).ids
    with pytest.raises(ConfigError, match="nope.json"):
        stokehold.Loader(tmp_path / "ds", 10, transforms={"text": [Tokenize(tmp_path / "nope.json")]})


def test_not_a_token_dataset_and_bad_options(corpus, tmp_path):
    _, _, _, dest = corpus
    with stokehold.ShardWriter(tmp_path / "x", {"x": "int64"}) as w:
        w.write({"x": 1})
    with pytest.raises(ConfigError, match="not a token dataset"):
        SequenceLoader(tmp_path / "x")
    with pytest.raises(ConfigError):
        SequenceLoader(dest, dtype="float32")
    with pytest.raises(ConfigError):
        SequenceLoader(dest, seq_len=0)


def test_a_step_larger_than_the_epoch_and_bad_ids_are_refused_with_the_fix(corpus):
    _, docs, _, dest = corpus
    windows = SequenceLoader(dest, seq_len=64, batch_size=1).samples
    with pytest.raises(ConfigError) as e:
        SequenceLoader(dest, seq_len=64, batch_size=windows + 1)
    msg = str(e.value)
    assert msg.startswith(f"batch_size {windows + 1} is more than the {windows} windows of seq_len 64 of an epoch, and drop_last=True"), msg
    assert f"use batch_size <= {windows}, or drop_last=False" in msg
    with pytest.raises(ConfigError, match=rf"^batch_size {len(docs)} x world_size 2 = {2 * len(docs)} is more than the {len(docs)} documents"):
        SequenceLoader(dest, max_len=50, batch_size=len(docs), rank=0, world_size=2)
    assert len(SequenceLoader(dest, seq_len=64, batch_size=windows + 1, drop_last=False)) == 1
    with pytest.raises(ConfigError, match=r"^pad_id must be a token id, an int from 0 to 2\*\*32 - 1, got -1$"):
        SequenceLoader(dest, max_len=50, pad_id=-1)
    with pytest.raises(ConfigError, match=r"^seed must be an int from 0 to 2\*\*64 - 1"):
        SequenceLoader(dest, seed=-1)


def test_torch_adapter_and_jax(corpus):
    torch = pytest.importorskip("torch")
    import stokehold.torch as st

    _, _, _, dest = corpus
    loader = SequenceLoader(dest, seq_len=64, batch_size=4, rank=0, world_size=1, segment_ids=True)
    dl = torch.utils.data.DataLoader(st.IterableDataset(loader), batch_size=None)
    batches = list(dl)
    assert len(batches) == len(loader) > 0
    b = batches[0]
    assert isinstance(b["input_ids"], torch.Tensor) and b["input_ids"].shape == (4, 64)
    assert torch.equal(b["input_ids"][:, 1:], b["labels"][:, :-1])
    # a block-diagonal mask from segment ids
    seg = b["segment_ids"]
    mask = seg[:, :, None] == seg[:, None, :]
    assert mask.shape == (4, 64, 64) and bool(mask[:, 0, 0].all())

    jnp = pytest.importorskip("jax.numpy")
    jl = SequenceLoader(dest, seq_len=64, batch_size=4, rank=0, world_size=1, to="jax")
    first = next(iter(jl))
    assert first["input_ids"].shape == (4, 64) and first["input_ids"].dtype == jnp.int32


def test_sequence_loader_is_the_one_engine_with_its_stats_and_skip_policy(corpus):
    _, _, _, dest = corpus
    loader = stokehold.SequenceLoader(str(dest), seq_len=32, batch_size=4, threads=2, on_error="skip")
    spec = loader.config
    assert spec["samples"]["kind"] == "tokens"
    assert spec["samples"]["mode"] == {"kind": "packed", "seq_len": 32}
    assert spec["loader"]["on_error"]["skip"]["max_fraction"] == 0.05
    # a RAM cache of whole shards gives the same windows, then serves them from memory
    plain = [b["input_ids"].copy() for b in stokehold.SequenceLoader(str(dest), seq_len=32, batch_size=4, threads=2)]
    cached = stokehold.SequenceLoader(str(dest), seq_len=32, batch_size=4, threads=2, cache="64MiB")
    assert cached.config["loader"]["cache_bytes"] == 64 << 20
    for _ in range(200):  # the shards load in the background: until reads hit RAM
        cached.set_epoch(0)
        got = [b["input_ids"].copy() for b in cached]
        assert len(got) == len(plain) and all(np.array_equal(a, b) for a, b in zip(got, plain))
        if cached.stats()["caches"]["records"]["hits"] > 0:
            break
        time.sleep(0.01)
    assert cached.stats()["caches"]["records"]["hits"] > 0
    # the same defaults as Loader: threads and prefetch "auto"
    auto = stokehold.SequenceLoader(str(dest), seq_len=32, batch_size=4).config["loader"]
    assert auto["autotune"] and auto["prefetch_auto"] and auto["threads"] == 0
    n = sum(1 for _ in loader)
    st = loader.stats()
    # the same statistics as Loader: per-stage figures, batches, samples, skipped ids
    assert st["batches"] == n == len(loader) and st["samples"] == 4 * n
    # (the next epoch, started ahead, may have filled a few windows already)
    # (the task's read, timed once per task and shared by its windows, then the windows)
    assert [s["name"] for s in st["stages"]] == ["read", "window"]
    assert all(s["items"] >= 4 * n for s in st["stages"])
    assert st["skipped"] == [] and st["bytes_read"] > 0


def test_sequence_loader_takes_the_loader_options_that_apply_to_tokens(corpus, tmp_path):
    """memory_budget, profile, trace (with report() and export_trace()), pin_memory and
    cache_dir_limit mean what they mean for Loader, and reach the same engine options."""
    _, _, _, dest = corpus
    kw = dict(seq_len=32, batch_size=4, threads=2, seed=4)
    plain = [b["input_ids"].copy() for b in SequenceLoader(dest, **kw)]
    trace = tmp_path / "trace.json"
    loader = SequenceLoader(dest, memory_budget="3MiB", profile=False, trace=trace,
                            cache_dir=tmp_path / "cache", cache_dir_limit="64MiB", **kw)
    spec = loader.config
    assert spec["loader"]["memory_budget"] == 3 << 20
    assert spec["loader"]["profile"] is False and spec["loader"]["trace_capacity"] > 0
    assert spec["cache_dir_limit"] == 64 << 20
    got = [b["input_ids"].copy() for b in loader]
    assert len(got) == len(plain) and all(np.array_equal(a, b) for a, b in zip(got, plain))
    # profile=False: no stage figures; the report says what it has
    assert loader.stats()["profiled"] is False
    assert "batches" in loader.report()
    loader.close()  # with trace=: the trace is written
    assert "traceEvents" in json.loads(trace.read_text())
    other = loader.export_trace(tmp_path / "again.json")
    assert other == str(tmp_path / "again.json")
    # profiled and traced: the trace holds the windows' spans
    traced = SequenceLoader(dest, trace=tmp_path / "t2.json", **kw)
    n = sum(1 for _ in traced)
    traced.close()
    events = json.loads((tmp_path / "t2.json").read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("name") == "window") >= 4 * n > 0
    # without trace=, export_trace() has nothing to write
    with pytest.raises(ConfigError, match="trace=PATH"):
        SequenceLoader(dest, **kw).export_trace(tmp_path / "none.json")
    with pytest.raises(ConfigError, match="memory_budget"):
        SequenceLoader(dest, memory_budget=0, **kw)
    with pytest.raises(ConfigError, match="cache_dir_limit"):
        SequenceLoader(dest, cache_dir=tmp_path / "c2", cache_dir_limit=0, **kw)
    with pytest.warns(UserWarning, match="pin_memory"):
        SequenceLoader(dest, pin_memory=True, **kw)
    # pickled and restored with every option
    again = pickle.loads(pickle.dumps(SequenceLoader(dest, memory_budget="3MiB", profile=False, **kw)))
    assert again.config["loader"]["memory_budget"] == 3 << 20 and again.config["loader"]["profile"] is False
