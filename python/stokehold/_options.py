"""The options of the loaders and of :class:`~stokehold.Mixture`, declared once: each option's
name, default, the fronts that take it, what kind of value it is, the one-line summary that
docs/python.md (and docs/mixtures.md) lists, and for the mixture the name the engine's
``MixtureSpec`` and the mixture file of ``stokehold bench`` give it.

The fronts' signatures spell the options again, as Python must for ``help()``, editors and the type
stub (``__init__.pyi`` re-exports the fronts' own source); ``python/tests/test_options.py`` fails
when a signature, a docstring, docs/python.md or the engine's own defaults (Rust's
``LoaderConfig``) drift from this table. The options both fronts take are turned into the engine's
configuration by one function, :func:`stokehold._loader._shared_config`; the mixture's by
:meth:`stokehold.Mixture._spec`, with the keys this table names. The same test fails when
``Mixture``'s signature, docs/mixtures.md or ``MixtureSpec``'s defaults drift; the CLI's own test
(``bench/mixture.rs``) holds the mixture file's keys to ``MixtureSpec``'s.
"""

import operator
import os
from typing import Any, Dict, Mapping, NamedTuple, Optional, Tuple

from ._native import ConfigError

LOADER = "Loader"
SEQUENCE = "SequenceLoader"
MIXTURE = "Mixture"
BOTH = (LOADER, SEQUENCE)

_U32 = 2**32 - 1
_U64 = 2**64 - 1


class Option(NamedTuple):
    """One keyword option of the loaders or of a Mixture."""

    name: str
    default: Any
    fronts: Tuple[str, ...]
    #: what :func:`given` checks: ``"bool"`` (a bool: a string such as ``"False"`` is a mistake,
    #: not a truthy value), ``"count"`` (None or an int >= 1, at most ``high``), ``"path"`` (None
    #: or a path, kept as a str), ``"bytes"`` (a byte count, an int or a string like ``"16GiB"``,
    #: or ``"auto"``; None where that is the default), ``"choice"`` (one of ``choices``);
    #: ``"value"``: checked where it is converted
    kind: str
    summary: str
    #: what a value of a ``"count"`` option must be, in its error message
    what: str = "an int >= 1"
    #: the engine's key (``MixtureSpec``; ``sources[].KEY``: each source's own); None: the
    #: option's own name
    spec: Optional[str] = None
    #: the key of the mixture file of ``stokehold bench`` (None: ``spec``'s)
    file: Optional[str] = None
    #: the values of a ``"choice"`` option
    choices: Tuple[str, ...] = ()
    #: the largest value of a ``"count"`` option
    high: int = _U32


OPTIONS: Tuple[Option, ...] = (
    Option("shuffle", True, BOTH, "value", "True: a new permutation per epoch; False: stored order; Loader: or \"shard_block\""),
    Option("shuffle_window", None, (LOADER,), "count", "shards per window for \"shard_block\" (default 4)", "a number of shards >= 1"),
    Option("seed", 0, BOTH, "value", "the order and every random stage"),
    Option("drop_last", True, BOTH, "bool", "False: pad the last step with repeats, flagged in is_padding"),
    Option("transforms", None, (LOADER,), "value", "{\"field\": [stage, ...]}"),
    Option("fields", None, (LOADER,), "value", "the fields in the batch (default: all); the others are not read out (a camera not asked for is not decoded)"),
    Option("threads", "auto", BOTH, "value", "up to one per core, fewer while the training loop is the slower side; or an int (at most 4 per core)"),
    Option("prefetch", "auto", BOTH, "value", "batches prepared ahead: starts at 4, deepened when the loop starves; or an int"),
    Option("memory_budget", None, BOTH, "bytes", "bytes batches prepared ahead may take (default 10% of RAM, at most 2 GiB); \"node:8GiB\": shared by the node's loaders"),
    Option("rank", None, BOTH, "value", "default: torch.distributed, else RANK/WORLD_SIZE, else 0"),
    Option("world_size", None, BOTH, "value", "number of ranks (given with rank)"),
    Option("on_error", "fail", BOTH, "value", "or \"skip\": replace a failed sample, count its id"),
    Option("max_skip_fraction", 0.05, BOTH, "value", "on_error=\"skip\" fails past this fraction of an epoch's samples (this rank)"),
    Option("include_ids", False, BOTH, "bool", "adds batch[\"id\"] (int64) and batch[\"is_padding\"] (bool)"),
    Option("to", "numpy", BOTH, "value", "or \"torch\", \"jax\""),
    Option("pin_memory", False, BOTH, "bool", "to=\"torch\" with CUDA: page-locked tensors"),
    Option("cache", False, BOTH, "value", "RAM cache of whole shards: True (up to half the RAM) or a budget \"16GiB\""),
    Option("decoded_cache", None, (LOADER,), "count", "keep images decoded + resized to this shorter side (e.g. 256) in RAM", "the shorter side in pixels (an int >= 1)"),
    Option("decoded_cache_budget", "auto", (LOADER,), "bytes", "its budget (half the RAM)"),
    Option("decoded_cache_dir", None, (LOADER,), "path", "also keep them in this local directory, for later runs and processes"),
    Option("decoded_cache_dir_limit", "auto", (LOADER,), "bytes", "its size limit (none of its own; stops at 5% disk free)"),
    Option("decoded_cache_keep_free", "auto", (LOADER,), "bytes", "free space the directory's filesystem keeps (5%, at most 1 GiB)"),
    Option("cache_dir", None, BOTH, "path", "local directory caching the shards of a dataset on slow storage"),
    Option("cache_dir_limit", "auto", BOTH, "bytes", "its size limit (the dataset's size)"),
    Option("profile", True, BOTH, "bool", "count and time the stages (a thread's first sample, then one in 8, is timed)"),
    Option("trace", None, BOTH, "path", "a path: Chrome trace of every sample's stage spans, written on close()"),
    Option("on_step", None, BOTH, "value", "a callable given a plain dict per batch: epoch, step, rank, wait, step_time, bound"),
    Option("io_uring", True, BOTH, "bool", "a task's reads that need the device go out together (io_uring); False: one pread each"),
    Option("storage_options", None, BOTH, "value", "a dataset given as a URL: credentials, endpoint (as Dataset's)"),
    Option("dtype", "int32", (SEQUENCE,), "value", "or \"int64\": the token arrays' type"),
    Option("position_ids", False, (SEQUENCE,), "bool", "adds position_ids (0 at each document start)"),
    Option("segment_ids", False, (SEQUENCE,), "bool", "adds segment_ids (packed: each token's document within the window)"),
    Option("max_len", None, (SEQUENCE,), "count", "documents mode: one document per sample, at most this many input tokens"),
    Option("pad_id", 0, (SEQUENCE,), "value", "documents mode: the input id of padding"),
    Option("bucket", 1, (SEQUENCE,), "count", "documents mode: sort runs of this many positions by length (1: off)"),
    Option("text", None, (SEQUENCE,), "value", "a text.ChatTemplate (text.Documents: plain text); a Mixture: {source: either}"),
    Option("packing", None, (SEQUENCE,), "value", "\"whole\" (with text=ChatTemplate): whole conversations per row, best-fit-decreasing"),
    Option("overlong", "truncate", (SEQUENCE,), "choice", "packing=\"whole\": a conversation longer than seq_len is cut to it, or \"drop\": left out", choices=("truncate", "drop")),
    Option("window", 1024, (SEQUENCE,), "count", "packing=\"whole\": conversations of the shuffled order packed together"),
    Option("keep_encodings", "auto", (SEQUENCE,), "bytes", "packing=\"whole\": encodings kept from the count pass for filling (10% of RAM, at most 1 GiB; 0: none)"),
    Option("max_image_tokens", None, (SEQUENCE,), "count", "packing=\"whole\" with images: the most image tokens a row holds"),
)

#: ``stokehold.Mixture``'s options after ``sources``: the Python name, the spec's key
#: (``MixtureSpec``: ``pipeline/config.rs``) and the mixture file's (``stokehold bench mix.toml``)
MIXTURE_OPTIONS: Tuple[Option, ...] = (
    Option("weights", None, (MIXTURE,), "value", "one per source: {name: w} or a list; None: by the sources' sizes", spec="schedule[0].weights", file="weights"),
    Option("schedule", None, (MIXTURE,), "value", "[(step, weights), ...]: the weights from each step on", spec="schedule"),
    Option("schedule_unit", "steps", (MIXTURE,), "choice", "or \"samples\": what the schedule's steps count", spec="unit", choices=("steps", "samples")),
    Option("epoch_samples", None, (MIXTURE,), "count", "samples per epoch (default: the sources' samples summed)", "a positive int (or None)", spec="epoch_samples", high=_U64),
    Option("source_column", True, (MIXTURE,), "bool", "adds batch[\"source\"] (int64: the source's index)", spec="source_column"),
    Option("transforms", None, (MIXTURE,), "value", "{name: {field: [stage, ...]}}: a source's own stages", spec="sources[].transforms"),
    Option("max_skip_fraction", None, (MIXTURE,), "value", "{name: fraction}: a source's own skip budget (on_error=\"skip\")", spec="sources[].max_skip_fraction"),
    Option("on_change", "refuse", (MIXTURE,), "choice", "or \"reblend\": a resume state whose blend differs", spec="on_change", choices=("refuse", "reblend")),
)

_BY_NAME = {o.name: o for o in OPTIONS}


def options(front: str) -> Tuple[Option, ...]:
    """The keyword options of ``front`` (``"Loader"``, ``"SequenceLoader"`` or ``"Mixture"``), in
    table order."""
    if front == MIXTURE:
        return MIXTURE_OPTIONS
    return tuple(o for o in OPTIONS if front in o.fronts)


def given(front: str, values: Mapping[str, Any]) -> Dict[str, Any]:
    """``front``'s keyword options out of ``values`` (a constructor's ``locals()``), each checked
    as its kind says (see :class:`Option`); paths come back as str, numpy bools as bool."""
    out = {}
    for o in options(front):
        v = values[o.name]
        if o.kind == "bool":
            if not isinstance(v, bool) and type(v).__name__ != "bool_":
                raise ConfigError(f"{o.name} must be True or False, got {v!r}")
            v = bool(v)
        elif o.kind == "choice":
            if not isinstance(v, str) or v not in o.choices:
                raise ConfigError(f"{o.name} must be {_either(o.choices)}, got {v!r}")
        elif v is None or (o.kind == "bytes" and v == "auto"):
            pass
        elif o.kind == "count":
            v = to_int(o.name, v, 1, o.high, o.what)
        elif o.kind == "path":
            try:
                v = os.fspath(v)
            except TypeError:
                raise ConfigError(f"{o.name} must be a path (str or os.PathLike), got {v!r}") from None
        elif o.kind == "bytes":
            v = byte_count(v, o.name)
        out[o.name] = v
    return out


def _either(choices: Tuple[str, ...]) -> str:
    """``"a" or "b"``, ``"a", "b" or "c"``."""
    quoted = [f'"{c}"' for c in choices]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def to_int(name: str, value: Any, low: int, high: int, what: str) -> int:
    """``value`` as a Python int (numpy integers accepted) from ``low`` to ``high``, else a
    ConfigError naming the option, the value and what to give (``what``)."""
    try:
        n = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        n = None
    if n is None or not low <= n <= high:
        raise ConfigError(f"{name} must be {what}, got {value!r}")
    return n


def byte_count(value: Any, name: str) -> Any:
    """A byte count as given (an int, or a string such as ``"16GiB"`` that the engine parses:
    one parser for Python, the CLI and configuration files), after the checks that only Python
    can make; ``"auto"`` passes through."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"{name} must be a byte count (int or a string like '16GiB'), got {value!r}")
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"{name} must be a byte count, not negative: {value}")
    return value


def spec_key(option: Option) -> str:
    """The engine's key of ``option`` (its own name unless the table gives another)."""
    return option.spec or option.name


def default(name: str) -> Any:
    """The default of option ``name``."""
    return _BY_NAME[name].default


# What the listings in docs/python.md show before the keyword options: the positional parameters.
_POSITIONAL = {
    MIXTURE: (("sources", "{name: Dataset, path or URL} or a list of them"),),
    LOADER: (("dataset", "a stokehold.Dataset or a path"), ("batch_size", "per rank")),
    SEQUENCE: (
        ("dataset", "a token dataset (stokehold pack --tokenizer) or its path"),
        ("seq_len=2048", "tokens per packed sample"),
        ("batch_size=32", "per rank"),
    ),
}


def _literal(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def listing(front: str) -> str:
    """``front``'s call with every option, its default and its summary: the code block of
    docs/python.md (``python -c 'import stokehold._options as o; print(o.listing("Loader"))'``
    prints it; the test of this table checks that the documentation holds it)."""
    variable = "mix" if front == MIXTURE else "loader"
    lines = [f"{variable} = stokehold.{front}("]
    items = [(p, s) for p, s in _POSITIONAL[front]]
    items += [(f"{o.name}={_literal(o.default)}", o.summary) for o in options(front)]
    for arg, summary in items:
        head = f"    {arg},"
        lines.append(f"{head:<29}# {summary}" if len(head) < 29 else f"{head}  # {summary}")
    lines.append(")")
    return "\n".join(lines)


def mixture_table() -> str:
    """The mixture's options in their three spellings (Python, the mixture file of ``stokehold
    bench``, the engine's ``MixtureSpec``): the table of docs/mixtures.md, which the test of this
    table checks."""
    rows = ["| `Mixture(...)` | mixture file | `MixtureSpec` | default |", "|---|---|---|---|"]
    for o in MIXTURE_OPTIONS:
        rows.append(f"| `{o.name}` | `{o.file or spec_key(o)}` | `{spec_key(o)}` | `{_literal(o.default)}` |")
    return "\n".join(rows)
