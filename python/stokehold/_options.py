"""The loaders' keyword options, declared once: each option's name, default, the fronts that take
it, what kind of value it is, and the one-line summary that docs/python.md lists.

The fronts' signatures spell the options again, as Python must for ``help()``, editors and the type
stub (``__init__.pyi`` re-exports the fronts' own source); ``python/tests/test_options.py`` fails
when a signature, a docstring, docs/python.md or the engine's own defaults (Rust's
``LoaderConfig``) drift from this table. The options both fronts take are turned into the engine's
configuration by one function, :func:`stokehold._loader._shared_config`.
"""

import operator
import os
from typing import Any, Dict, Mapping, NamedTuple, Tuple

from ._native import ConfigError

LOADER = "Loader"
SEQUENCE = "SequenceLoader"
BOTH = (LOADER, SEQUENCE)


class Option(NamedTuple):
    """One keyword option of the loaders."""

    name: str
    default: Any
    fronts: Tuple[str, ...]
    #: what :func:`given` checks: ``"bool"`` (a bool: a string such as ``"False"`` is a mistake,
    #: not a truthy value), ``"count"`` (None or an int >= 1), ``"path"`` (None or a path, kept as
    #: a str), ``"bytes"`` (a byte count, an int or a string like ``"16GiB"``, or ``"auto"``; None
    #: where that is the default); ``"value"``: checked where it is converted
    kind: str
    summary: str
    #: what a value of a ``"count"`` option must be, in its error message
    what: str = "an int >= 1"


OPTIONS: Tuple[Option, ...] = (
    Option("shuffle", True, BOTH, "value", "True: a new permutation per epoch; False: stored order; Loader: or \"shard_block\""),
    Option("shuffle_window", None, (LOADER,), "count", "shards per window for \"shard_block\" (default 4)", "a number of shards >= 1"),
    Option("seed", 0, BOTH, "value", "the order and every random stage"),
    Option("drop_last", True, BOTH, "bool", "False: pad the last step with repeats, flagged in is_padding"),
    Option("transforms", None, (LOADER,), "value", "{\"field\": [stage, ...]}"),
    Option("threads", "auto", BOTH, "value", "up to one per core, fewer while the training loop is the slower side; or an int (at most 4 per core)"),
    Option("prefetch", "auto", BOTH, "value", "batches prepared ahead: starts at 4, deepened when the loop starves; or an int"),
    Option("memory_budget", None, BOTH, "bytes", "bytes batches prepared ahead may take (default 10% of RAM, at most 2 GiB)"),
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
    Option("io_uring", True, BOTH, "bool", "a task's reads that need the device go out together (io_uring); False: one pread each"),
    Option("storage_options", None, BOTH, "value", "a dataset given as a URL: credentials, endpoint (as Dataset's)"),
    Option("dtype", "int32", (SEQUENCE,), "value", "or \"int64\": the token arrays' type"),
    Option("position_ids", False, (SEQUENCE,), "bool", "adds position_ids (0 at each document start)"),
    Option("segment_ids", False, (SEQUENCE,), "bool", "adds segment_ids (packed: each token's document within the window)"),
    Option("max_len", None, (SEQUENCE,), "count", "documents mode: one document per sample, at most this many input tokens"),
    Option("pad_id", 0, (SEQUENCE,), "value", "documents mode: the input id of padding"),
    Option("bucket", 1, (SEQUENCE,), "count", "documents mode: sort runs of this many positions by length (1: off)"),
)

_BY_NAME = {o.name: o for o in OPTIONS}


def options(front: str) -> Tuple[Option, ...]:
    """The keyword options of ``front`` (``"Loader"`` or ``"SequenceLoader"``), in table order."""
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
        elif v is None or (o.kind == "bytes" and v == "auto"):
            pass
        elif o.kind == "count":
            v = to_int(o.name, v, 1, _U32, o.what)
        elif o.kind == "path":
            try:
                v = os.fspath(v)
            except TypeError:
                raise ConfigError(f"{o.name} must be a path (str or os.PathLike), got {v!r}") from None
        elif o.kind == "bytes":
            v = byte_count(v, o.name)
        out[o.name] = v
    return out


_U32 = 2**32 - 1


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


def default(name: str) -> Any:
    """The default of option ``name``."""
    return _BY_NAME[name].default


# What the listings in docs/python.md show before the keyword options: the positional parameters.
_POSITIONAL = {
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
    variable = "loader"
    lines = [f"{variable} = stokehold.{front}("]
    items = [(p, s) for p, s in _POSITIONAL[front]]
    items += [(f"{o.name}={_literal(o.default)}", o.summary) for o in options(front)]
    for arg, summary in items:
        head = f"    {arg},"
        lines.append(f"{head:<29}# {summary}" if len(head) < 29 else f"{head}  # {summary}")
    lines.append(")")
    return "\n".join(lines)
