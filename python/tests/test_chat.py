"""stokehold.text.ChatTemplate against transformers' apply_chat_template.

The tokenizer (a byte-level BPE, as Qwen's and Llama 3's are) is trained here with the `tokenizers`
package on text the test makes, with the templates' special tokens added; the chat templates are
written here in the style of those models' templates. Nothing is downloaded.
"""

import json
import pickle
import random

import numpy as np
import pytest

from stokehold import ConfigError
from stokehold.text import ChatTemplate

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

SPECIALS = [
    "<unk>", "<s>", "</s>", "<pad>",
    "<|im_start|>", "<|im_end|>", "<|vision_pad|>",
    "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
]

WORDS = (
    "the a data loader reads shards from disk and model trains on tokens every step while "
    "workers decode why how what is it yes no maybe please thanks hello world assistant user "
    "naïve café 日本語 テキスト Ünïcödé emoji 😀 🚀 → ≤ ü ß 42 3.14 1e-7 print(x) {json: true} "
    "<b>bold</b> \"quoted\" back\\slash"
).split()

# ChatML in Qwen's style: a default system prompt, tools listed with tojson, content as a string
# or a list of parts
CHATML = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Quill, a careful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- else %}
        {{- '<|im_start|>system\\nYou are Quill, a careful assistant.<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "system" and loop.first %}
    {%- elif message.role in ["user", "system", "assistant"] %}
        {{- '<|im_start|>' + message.role + '\\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for part in message.content %}
                {%- if part.type == 'text' %}{{- part.text }}{%- elif part.type == 'image' %}{{- '<|vision_pad|>' }}{%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# Llama 3 style: headers, the date, the system message taken out of the list, contents trimmed
LLAMA3 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# Llama 2 style with a default system prompt folded into the first user turn, .strip()
SYSDEFAULT = """{%- if messages[0]['role'] == 'system' %}
    {%- set loop_messages = messages[1:] %}
    {%- set system_message = messages[0]['content'] %}
{%- else %}
    {%- set loop_messages = messages %}
    {%- set system_message = 'You are a helpful, respectful and honest assistant.' %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if loop.index0 == 0 %}
        {%- set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}
    {%- else %}
        {%- set content = message['content'] %}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {{- bos_token + '[INST] ' + content.strip() + ' [/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + content.strip() + ' ' + eos_token }}
    {%- endif %}
{%- endfor %}
"""

# Mistral style: raises on a role it does not know and on turns that do not alternate
STRICT = """{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message['role'] not in ['user', 'assistant'] %}
        {{- raise_exception('Only user and assistant roles are supported, got ' + message['role'] + '.') }}
    {%- endif %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- else %}
        {{- ' ' + message['content'] + eos_token }}
    {%- endif %}
{%- endfor %}
"""

# ChatML with {% generation %} blocks, as training templates mark the assistant's tokens
GENERATION = """{%- for message in messages %}
    {%- if loop.first and message['role'] != 'system' %}
        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}
    {%- endif %}
    {%- if message['role'] == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
            {%- if message['content'] is string %}
                {{- message['content'] }}
            {%- else %}
                {%- for part in message['content'] %}
                    {%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}
                {%- endfor %}
            {%- endif %}
            {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- else %}
        {{- '<|im_start|>' + message['role'] + '\\n' }}
        {%- if message['content'] is string %}{{- message['content'] }}{%- else %}{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] }}{%- elif part['type'] == 'image' %}{{- '<|vision_pad|>' }}{%- endif %}{%- endfor %}{%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""

# generation blocks without whitespace control: trim_blocks and lstrip_blocks shape the text
GENERATION_PLAIN = """{% for message in messages %}
{% if message.role == 'assistant' %}
<|im_start|>assistant
    {% generation %}
{{ message.content }}<|im_end|>
    {% endgeneration %}

{% else %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{% endfor %}
"""

# the same rendering as LLAMA3 / SYSDEFAULT / CHATML with {% generation %} around what our
# loss_on="assistant" masks for the templates without it: transformers' mask of these is ours
LLAMA3_TWIN = LLAMA3.replace(
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}",
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- if message['role'] == 'assistant' %}{% generation %}{{- message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    "{%- else %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endif %}",
)
SYSDEFAULT_TWIN = SYSDEFAULT.replace(
    "{{- ' ' + content.strip() + ' ' + eos_token }}",
    "{{- ' ' }}{% generation %}{{- content.strip() + ' ' + eos_token }}{% endgeneration %}",
)
CHATML_TWIN = CHATML.replace(
    "{%- if message.content is string %}\n            {{- message.content }}",
    "{%- if message.content is string and message.role == 'assistant' %}\n"
    "            {% generation %}{{- message.content + '<|im_end|>' }}{% endgeneration %}{{- '\\n' }}\n"
    "        {%- elif message.content is string %}\n            {{- message.content }}",
).replace(
    "        {{- '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endfor %}",
    "        {%- if not (message.content is string and message.role == 'assistant') %}{{- '<|im_end|>\\n' }}{%- endif %}\n"
    "    {%- endif %}\n{%- endfor %}",
)
for _twin in (LLAMA3_TWIN, SYSDEFAULT_TWIN, CHATML_TWIN):
    assert "{% generation %}" in _twin  # the replacements above took

TEMPLATES = {
    "chatml": CHATML,
    "llama3": LLAMA3,
    "sysdefault": SYSDEFAULT,
    "strict": STRICT,
    "generation": GENERATION,
    "generation_plain": GENERATION_PLAIN,
}
# which templates read content given as a list of parts
PARTS = {"chatml", "generation"}
KWARGS = {"llama3": {"date_string": "05 Dec 2026"}}


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def text(rng, role):
    r = rng.random()
    if r < 0.08:
        return ""
    s = words(rng, 1, 30)
    if r < 0.2 and role != "assistant":
        s = rng.choice(["  ", "\n", "\n\n "]) + s
    if r > 0.9:
        s = s + rng.choice([" ", "\n", "  \n"])
    if rng.random() < 0.1:
        s = s.replace(" ", "\n", 2)
    return s


def conversations(name, n=50, seed=0):
    """`n` conversations: multi-turn, with or without a system message, empty contents, unicode,
    the parts form where the template reads it; alternating roles (the strict template raises
    otherwise)."""
    rng = random.Random(f"{name}-{seed}")
    out = []
    for i in range(n):
        conv = []
        if rng.random() < 0.4:
            conv.append({"role": "system", "content": words(rng, 1, 12)})
        turns = rng.randint(1, 4)
        for t in range(turns):
            for role in ("user", "assistant"):
                if role == "assistant" and t == turns - 1 and rng.random() < 0.15:
                    break
                content = text(rng, role)
                if name in PARTS and rng.random() < 0.25:
                    parts = [{"type": "text", "text": content}]
                    if role == "user" or rng.random() < 0.5:
                        parts.insert(rng.randint(0, 1), {"type": "image"})
                    if rng.random() < 0.5:
                        parts.append({"type": "text", "text": words(rng, 1, 5)})
                    content = parts
                conv.append({"role": role, "content": content})
        out.append(conv)
    return out


def train_tokenizer(root, kind):
    """A byte-level BPE (as Qwen's and Llama 3's) or a SentencePiece-style one (Metaspace
    pre-tokenizer, byte fallback, as Llama 2's and Mistral's), with the templates' special
    tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    rng = random.Random(7)
    corpus = [words(rng, 5, 40) for _ in range(3000)]
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
        alphabet = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=SPECIALS, initial_alphabet=alphabet)
    tok.train_from_iterator(corpus, trainer)
    path = root / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("chat-tok"), "bytelevel")


@pytest.fixture(scope="module")
def sp_models(tmp_path_factory):
    """The templates over a SentencePiece-style tokenizer."""
    root = tmp_path_factory.mktemp("chat-sp")
    tok = train_tokenizer(root, "metaspace")
    return {name: model_dir(root, tok, name, TEMPLATES[name]) for name in ("chatml", "sysdefault", "strict", "generation")}


def model_dir(root, tokenizer_file, name, template, **config):
    d = root / name
    d.mkdir(exist_ok=True)
    (d / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1 << 20,
        "bos_token": {"content": "<s>", "special": True, "__type": "AddedToken"},
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "chat_template": template,
    }
    if name.startswith("llama3"):
        cfg["bos_token"] = "<|begin_of_text|>"
        cfg["eos_token"] = "<|eot_id|>"
    cfg.update(config)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def hf(d):
    return transformers.AutoTokenizer.from_pretrained(str(d))


def hf_encode(tok, conv, **kwargs):
    out = tok.apply_chat_template(
        conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **kwargs
    )
    return list(out["input_ids"]), list(out["assistant_masks"])


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizer_file):
    root = tmp_path_factory.mktemp("chat-models")
    dirs = {name: model_dir(root, tokenizer_file, name, t) for name, t in TEMPLATES.items()}
    for name, t in {"llama3_twin": LLAMA3_TWIN, "sysdefault_twin": SYSDEFAULT_TWIN,
                    "chatml_twin": CHATML_TWIN}.items():
        dirs[name] = model_dir(root, tokenizer_file, name, t)
    return dirs


def ours(models, name, **kw):
    return ChatTemplate(models[name], template_kwargs=KWARGS.get(name), **kw)


@pytest.mark.parametrize(
    "name, tokenizer",
    [(name, "bytelevel") for name in sorted(TEMPLATES)]
    + [(name, "metaspace") for name in ("chatml", "generation", "strict", "sysdefault")],
)
def test_tokens_match_transformers(models, sp_models, name, tokenizer):
    """The same input_ids as apply_chat_template on ~50 conversations per template, one at a
    time and in a batch on native threads; for templates with {% generation %}, the same mask."""
    if tokenizer == "metaspace":
        models = sp_models
    tok = hf(models[name])
    ct = ours(models, name)
    assert ct.has_generation == name.startswith("generation")
    convs = conversations(name)
    expected = [hf_encode(tok, c, **KWARGS.get(name, {})) for c in convs]
    for i, (c, (ids, mask)) in enumerate(zip(convs, expected)):
        assert ct.render(c) == tok.apply_chat_template(c, tokenize=False, **KWARGS.get(name, {})), i
        got = ct.encode(c)
        assert got["input_ids"].dtype == np.int32 and got["assistant_masks"].dtype == np.uint8
        assert got["input_ids"].tolist() == ids, f"conversation {i}: {c!r}"
        assert len(got["assistant_masks"]) == len(ids)
        if ct.has_generation:
            assert got["assistant_masks"].tolist() == mask, f"conversation {i}: {c!r}"
            assert sum(mask) > 0 or not any(m["role"] == "assistant" for m in c)
    batch = ct.encode_batch(convs, threads=3)
    off = batch["offsets"]
    assert off.dtype == np.int64 and len(off) == len(convs) + 1
    for i, (ids, mask) in enumerate(expected):
        assert batch["input_ids"][off[i]:off[i + 1]].tolist() == ids
        if ct.has_generation:
            assert batch["assistant_masks"][off[i]:off[i + 1]].tolist() == mask


def simple_assistant(conv):
    return all(
        isinstance(m["content"], str) and m["content"].strip() and m["content"] == m["content"].lstrip()
        for m in conv if m["role"] == "assistant"
    )


@pytest.mark.parametrize("name", ["chatml", "llama3", "sysdefault"])
def test_mask_without_generation_blocks_is_content_and_end_of_turn(models, name):
    """For a template without {% generation %}, loss_on="assistant" masks what transformers masks
    for the same template with the assistant's content and end-of-turn token in a generation
    block (the twin renders the same text)."""
    twin = hf(models[name + "_twin"])
    ct = ours(models, name)
    convs = [c for c in conversations(name, n=80, seed=1) if simple_assistant(c)]
    assert len(convs) >= 20
    checked = 0
    for i, c in enumerate(convs):
        ids, mask = hf_encode(twin, c, **KWARGS.get(name, {}))
        got = ct.encode(c)
        assert got["input_ids"].tolist() == ids, i
        assert got["assistant_masks"].tolist() == mask, f"conversation {i}: {c!r}"
        checked += sum(mask) > 0
    assert checked >= 10


def generation_spans(tok, conv):
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, spans = render_jinja_template(
        conversations=[conv], chat_template=tok.chat_template,
        return_assistant_tokens_mask=True, **tok.special_tokens_map)
    return rendered[0], spans[0]


@pytest.mark.parametrize("name", ["generation", "generation_plain"])
def test_loss_on_last_and_all(models, name):
    """"last": transformers' overlap rule applied to the last generation block only; "all": every
    token."""
    tok = hf(models[name])
    last = ours(models, name, loss_on="last")
    every = ours(models, name, loss_on="all")
    for i, c in enumerate(conversations(name, n=30, seed=2)):
        text, spans = generation_spans(tok, c)
        enc = tok(text, add_special_tokens=False)
        expected = [0] * len(enc["input_ids"])
        if spans:
            s, e = spans[-1]
            for t, (ts, te) in enumerate(enc.encodings[0].offsets):
                if ts < e and te > s:
                    expected[t] = 1
        got = last.encode(c)
        assert got["input_ids"].tolist() == enc["input_ids"]
        assert got["assistant_masks"].tolist() == expected, f"conversation {i}: {c!r}"
        assert every.encode(c)["assistant_masks"].tolist() == [1] * len(expected)


def test_bad_role_raises_config_error_naming_the_conversation(models):
    tok = hf(models["strict"])
    ct = ours(models, "strict")
    good = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "world"}]
    bad = [{"role": "user", "content": "hello"}, {"role": "tool", "content": "42"}]
    with pytest.raises(Exception) as hf_err:
        tok.apply_chat_template(bad, tokenize=True)
    template_message = str(hf_err.value)
    assert "Only user and assistant roles are supported, got tool." in template_message
    with pytest.raises(ConfigError) as err:
        ct.encode_batch([good, good, good, bad, good], threads=2)
    msg = str(err.value)
    assert "conversation 3" in msg and template_message in msg, msg
    with pytest.raises(ConfigError, match="conversation 0.*roles must alternate"):
        ct.encode([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    with pytest.raises(ConfigError, match="empty conversation"):
        ct.encode([])
    with pytest.raises(ConfigError, match="message 0 is"):
        ct.encode(["not a message"])


def test_errors_of_construction(models, tokenizer_file, tmp_path):
    with pytest.raises(ConfigError, match="loss_on"):
        ChatTemplate(models["chatml"], loss_on="everything")
    with pytest.raises(ConfigError, match="does not compile"):
        ChatTemplate(models["chatml"], template="{% for m in messages %}")
    # a bare tokenizer.json without a config: a template must be given
    bare = tmp_path / "tokenizer.json"
    bare.write_bytes(tokenizer_file.read_bytes())
    with pytest.raises(ConfigError, match="no chat template"):
        ChatTemplate(bare)
    ct = ChatTemplate(bare, template="{% for m in messages %}{{ m.content }}|{% endfor %}")
    assert ct.render([{"role": "user", "content": "a"}, {"role": "x", "content": "b"}]) == "a|b|"
    with pytest.raises(ConfigError, match="cannot read"):
        ChatTemplate(tmp_path / "missing" / "tokenizer.json", template="x")


def test_named_templates_rows_tools_and_pickle(models, tokenizer_file, tmp_path):
    """A config's list of named templates ("default" by default, others by name), rows holding the
    conversation under `messages`, tools passed as transformers passes them, pickling."""
    d = model_dir(tmp_path, tokenizer_file, "named",
                  [{"name": "default", "template": GENERATION}, {"name": "tool_use", "template": CHATML}])
    ct = ChatTemplate(d, messages="turns")
    assert ct.has_generation
    tool_ct = ChatTemplate(d, template="tool_use")
    assert tool_ct.template == CHATML
    conv = conversations("chatml", n=1, seed=5)[0]
    tok = hf(models["chatml"])
    tools = [{"type": "function", "function": {"name": "météo", "description": "weather → \"now\"",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}}]
    with_tools = ChatTemplate(models["chatml"], template_kwargs={"tools": tools})
    assert with_tools.render(conv) == tok.apply_chat_template(conv, tools=tools, tokenize=False)
    ids, _ = hf_encode(tok, conv, tools=tools)
    assert with_tools.encode(conv)["input_ids"].tolist() == ids
    row = {"turns": conv, "id": 3}
    assert ct.encode(row)["input_ids"].tolist() == ct.encode(conv)["input_ids"].tolist()
    with pytest.raises(ConfigError, match='conversation 1: a dict without the field "turns"'):
        ct.encode_batch([row, {"messages": conv}])
    again = pickle.loads(pickle.dumps(with_tools))
    assert again.render(conv) == with_tools.render(conv)


def test_python_values_as_transformers_sees_them(models):
    """None-valued keys dropped, numpy scalars as numbers, other objects as "<TypeName>"."""
    t = "{% for m in messages %}{{ m | tojson }};{% endfor %}"
    ct = ChatTemplate(models["chatml"], template=t)
    tok = hf(models["chatml"])
    conv = [{"role": "user", "content": "x", "tool_calls": None, "n": np.int64(3), "f": np.float32(0.5),
             "b": np.bool_(False), "t": (1, 2), "o": object()}]
    assert ct.render(conv) == tok.apply_chat_template(conv, chat_template=t, tokenize=False)


def test_printing_is_pythons(models):
    """Values printed with {{ }} read as Jinja2 prints them: Python's repr of lists and dicts,
    True/False/None, floats as repr."""
    t = ("{% for m in messages %}{{ m }}|{{ m.get('b') }}|{{ m.get('zz') }}|{{ [1, \"it's\", none, 2.5, 1e-7] }}"
         "|{{ m.role == 'user' }}|{{ 3 / 2 }}|{{ {'k': ['v']} }}{% endfor %}")
    ct = ChatTemplate(models["chatml"], template=t)
    tok = hf(models["chatml"])
    conv = [{"role": "user", "content": "a\tb\n'c'", "b": np.bool_(True), "n": 1.0, "u": "ü\x07"}]
    assert ct.render(conv) == tok.apply_chat_template(conv, chat_template=t, tokenize=False)


# Qwen2-VL style: each image part renders <|vision_start|><|image_pad|><|vision_end|>, assistant
# turns (their image parts too) inside generation blocks
VL_PARTS = ("{%- if message.content is string %}{{ message.content }}{%- else %}{%- for part in message.content %}"
            "{%- if part.type == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
            "{%- elif part.type == 'text' %}{{ part.text }}{%- endif %}{%- endfor %}{%- endif %}<|im_end|>")
QWEN_VL = ("{%- for message in messages %}<|im_start|>{{ message.role }}\n"
           "{%- if message.role == 'assistant' %}{% generation %}" + VL_PARTS + "{% endgeneration %}"
           "{%- else %}" + VL_PARTS + "{%- endif %}\n{%- endfor %}")


@pytest.fixture(scope="module")
def vl_model(tmp_path_factory):
    """A tokenizer with Qwen2-VL's vision tokens, and the template above in its config."""
    global SPECIALS
    root = tmp_path_factory.mktemp("chat-vl")
    saved = SPECIALS
    SPECIALS = saved + ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>"]
    try:
        tok = train_tokenizer(root, "bytelevel")
    finally:
        SPECIALS = saved
    return model_dir(root, tok, "qwen_vl", QWEN_VL, eos_token="<|im_end|>")


def vl_conversations(n, seed):
    """Conversations with 0-3 images in user (and some assistant) turns; the images' sizes."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        conv, sizes = [], []
        for _t in range(rng.randint(1, 3)):
            for role in ("user", "assistant"):
                parts = [{"type": "text", "text": text(rng, role)}]
                for _k in range(rng.choice([0, 0, 1, 2]) if role == "user" else rng.choice([0, 0, 0, 1])):
                    parts.insert(rng.randint(0, len(parts)), {"type": "image"})
                    sizes.append((rng.randint(20, 900), rng.randint(20, 700)))
                conv.append({"role": role, "content": parts if len(parts) > 1 or rng.random() < 0.5 else parts[0]["text"]})
        out.append((conv, sizes))
    return out


def jpeg_of(size):
    import io

    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", size, (90, 140, 200)).save(b, format="JPEG")
    return b.getvalue()


def test_image_placeholders_expand_as_qwen2vl_processor_does(vl_model):
    """input_ids and assistant_masks equal Qwen2VLProcessor.apply_chat_template's: each
    <|image_pad|> expanded to its image's tokens (grid from the size alone, images given as
    encoded bytes whose header is read, or as (width, height)), expanded tokens in a generation
    block masked as the processor masks them."""
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    from stokehold.vision import Qwen2VL

    budget = dict(min_pixels=56 * 56, max_pixels=28 * 28 * 256)
    proc = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(**budget), tokenizer=hf(vl_model),
                            video_processor=Qwen2VLVideoProcessor(), chat_template=QWEN_VL)
    ct = ChatTemplate(vl_model, images="images", vision=Qwen2VL(**budget))
    convs = vl_conversations(40, seed=3)
    assert sum(len(s) for _, s in convs) > 30
    for i, (conv, sizes) in enumerate(convs):
        kw = {"images": [Image.new("RGB", s) for s in sizes]} if sizes else {}
        want = proc.apply_chat_template(conv, tokenize=True, return_dict=True, return_assistant_tokens_mask=True, **kw)
        ids, mask = np.asarray(want["input_ids"])[0].tolist(), np.asarray(want["assistant_masks"])[0].tolist()
        got = ct.encode({"messages": conv, "images": [jpeg_of(s) for s in sizes]})
        assert got["input_ids"].tolist() == ids, i
        assert got["assistant_masks"].tolist() == mask, i
        assert ct.encode(conv, images=sizes)["input_ids"].tolist() == ids
    batch = ct.encode_batch([c for c, _ in convs], threads=3, images=[s for _, s in convs])
    for i, (conv, sizes) in enumerate(convs):
        one = ct.encode(conv, images=sizes)["input_ids"]
        assert batch["input_ids"][batch["offsets"][i]:batch["offsets"][i + 1]].tolist() == one.tolist()


def test_image_placeholders_that_do_not_match_the_images_are_named(vl_model, tokenizer_file, tmp_path):
    from stokehold.vision import Qwen2VL

    ct = ChatTemplate(vl_model, vision=Qwen2VL())
    conv = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hello"}]}]
    with pytest.raises(ConfigError, match=r"conversation 0: 1 image placeholders \(token \d+\) for 2 images"):
        ct.encode(conv, images=[(64, 64), (64, 64)])
    with pytest.raises(ConfigError, match=r"conversation 1: 1 image placeholders \(token \d+\) for 0 images"):
        ct.encode_batch([[{"role": "user", "content": "no image"}], conv], images=[[], []])
    with pytest.raises(ConfigError, match="image 0 is neither encoded bytes nor a"):
        ct.encode(conv, images=["cat.jpg"])
    with pytest.raises(ConfigError, match="images= needs vision="):
        ChatTemplate(vl_model, images="images")
    with pytest.raises(ConfigError, match="is not a token of the tokenizer"):
        ChatTemplate(vl_model, vision=Qwen2VL(), image_token="<|no_such|>")
    again = pickle.loads(pickle.dumps(ChatTemplate(vl_model, images="images", vision=Qwen2VL(max_pixels=28 * 28 * 64))))
    assert again.encode(conv, images=[(640, 480)])["input_ids"].tolist() == \
        ChatTemplate(vl_model, vision=Qwen2VL(max_pixels=28 * 28 * 64)).encode(conv, images=[(640, 480)])["input_ids"].tolist()
