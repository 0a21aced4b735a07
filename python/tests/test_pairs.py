"""Prompt/completion pairs (TRL's prompt-completion form, issue #52): `ChatTemplate(...,
completion="completion")` encodes each pair as TRL's `SFTTrainer` does with `transformers`, and
`SequenceLoader(packing="whole")` packs them."""

import json
import random

import numpy as np
import pytest

import stokehold
from stokehold import ConfigError
from stokehold.text import ChatTemplate

pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

from test_chat import CHATML, model_dir, train_tokenizer, words  # noqa: E402
from test_sft import check_row  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """ChatML over a byte-level BPE whose post-processor adds `<s>` (as Llama's adds BOS): the
    plain-text pairs' special tokens are then visible."""
    from tokenizers import Tokenizer, processors

    root = tmp_path_factory.mktemp("pairs")
    path = train_tokenizer(root, "bytelevel")
    tok = Tokenizer.from_file(str(path))
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B", special_tokens=[("<s>", bos)]),
    ])
    tok.save(str(path))
    return model_dir(root, path, "chatml", CHATML)


def pairs(n, seed, conversational):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        if conversational:
            prompt = []
            for _ in range(rng.randint(0, 2)):
                prompt += [{"role": "user", "content": words(rng, 1, 12)},
                           {"role": "assistant", "content": words(rng, 1, 12)}]
            prompt.append({"role": "user", "content": words(rng, 1, 12)})
            completion = [{"role": "assistant", "content": words(rng, 1, 20)}]
        else:
            prompt = words(rng, 1, 15) + rng.choice([" ", "\n", ""])
            completion = words(rng, 1, 20) + rng.choice(["", "</s>"])
        out.append({"prompt": prompt, "completion": completion})
    return out


def trl(tok, prompt, completion):
    """What TRL's SFTTrainer computes for a pair (its tokenize step, completion_only_loss):
    input_ids and the completion mask."""
    if isinstance(prompt, list):
        p = tok.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=True)["input_ids"]
        ids = tok.apply_chat_template(prompt + completion, tokenize=True, return_dict=True)["input_ids"]
    else:
        if not completion.endswith(tok.eos_token):
            completion = completion + tok.eos_token
        p = tok(text=prompt)["input_ids"]
        ids = tok(text=prompt + completion)["input_ids"]
    return list(ids), [0] * len(p) + [1] * (len(ids) - len(p))


@pytest.mark.parametrize("conversational", [True, False])
def test_pairs_encode_as_trl_does(model, conversational):
    tok = transformers.AutoTokenizer.from_pretrained(str(model))
    ours = ChatTemplate(model, messages="prompt", completion="completion")
    assert ours.loss_on == "completion"
    every = ChatTemplate(model, messages="prompt", completion="completion", loss_on="all")
    examples = pairs(40, seed=1 if conversational else 2, conversational=conversational)
    batch = ours.encode_batch(examples, threads=2)
    for i, ex in enumerate(examples):
        ids, mask = trl(tok, ex["prompt"], ex["completion"])
        got = ours.encode(ex)
        assert got["input_ids"].tolist() == ids, i
        assert got["assistant_masks"].tolist() == mask, i
        a, b = batch["offsets"][i], batch["offsets"][i + 1]
        assert batch["input_ids"][a:b].tolist() == ids
        assert every.encode((ex["prompt"], ex["completion"]))["assistant_masks"].tolist() == [1] * len(ids)
    if not conversational:
        assert all(ours.encode(ex)["input_ids"][0] == tok.convert_tokens_to_ids("<s>") for ex in examples)


def test_pair_options_and_bad_pairs_are_named(model):
    with pytest.raises(ConfigError, match="completion"):
        ChatTemplate(model, loss_on="completion")  # not a pair
    with pytest.raises(ConfigError, match="prompt/completion pairs take"):
        ChatTemplate(model, messages="prompt", completion="completion", loss_on="assistant")
    t = ChatTemplate(model, messages="prompt", completion="completion")
    with pytest.raises(ConfigError, match="conversation 0.*two lists of messages or two strings"):
        t.encode({"prompt": "text", "completion": [{"role": "assistant", "content": "x"}]})
    with pytest.raises(ConfigError, match='without the field "completion"'):
        t.encode({"prompt": "text"})


@pytest.mark.parametrize("conversational", [True, False])
def test_pairs_pack_whole_as_encoded(tmp_path, model, conversational):
    examples = pairs(60, seed=3, conversational=conversational)
    kind = "json" if conversational else "string"
    with stokehold.ShardWriter(tmp_path / "ds", {"prompt": kind, "completion": kind}) as w:
        for ex in examples:
            w.write({k: json.dumps(v) if conversational else v for k, v in ex.items()})
    tmpl = ChatTemplate(model, messages="prompt", completion="completion")
    encs = [tmpl.encode(ex) for ex in examples]
    ld = stokehold.SequenceLoader(stokehold.Dataset(tmp_path / "ds"), seq_len=128, batch_size=2, text=tmpl,
                                  packing="whole", rank=0, world_size=1, seed=4, drop_last=False)
    seen, rows, tokens = [], set(), 0
    for b in ld:
        for r, row in enumerate(b["doc_ids"]):
            docs = [int(d) for d in row if d >= 0]
            n = check_row(b, r, docs, encs, 128)
            if docs and tuple(docs) not in rows:  # (a padded last batch repeats a row)
                rows.add(tuple(docs))
                tokens += n
                seen += docs
    assert sorted(seen) == list(range(len(examples))), ld.stats()["packing"]
    assert np.isclose(ld.stats()["packing"]["fill"], tokens / (len(rows) * 128))
