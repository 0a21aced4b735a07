"""stokehold.Loader: the Python front of the native loading engine (``_native._Engine``)."""

import atexit
import json
import os
import sys
import warnings
import weakref
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._native import ConfigError, Dataset

__all__ = ["Loader", "default_rank_world_size"]

_TARGETS = ("numpy", "torch", "jax")

# prefetch="auto" starts at this depth, then moves within the memory budget
_AUTO_PREFETCH_START = 4

# Stage spans kept in memory with trace=PATH (32 bytes each: 32 MB; older spans are dropped)
TRACE_CAPACITY = 1_000_000

# Every live loader, so that interpreter exit can stop their worker threads first.
_LIVE: "weakref.WeakSet[_Front]" = weakref.WeakSet()


def _close_all() -> None:
    for loader in list(_LIVE):
        try:
            loader.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass


atexit.register(_close_all)
if hasattr(os, "register_at_fork"):
    # Worker threads do not survive fork(): loaders running at the fork refuse to work in the
    # child with a clear error (idle ones keep working and start their own threads).
    os.register_at_fork(after_in_child=_native._after_fork_in_child)


def default_rank_world_size() -> Tuple[int, int]:
    """This process's (rank, world size): from ``torch.distributed`` when it is initialised, else
    the ``RANK`` / ``WORLD_SIZE`` environment variables, else (0, 1). Never imports torch."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank()), int(dist.get_world_size())
        except Exception:  # pragma: no cover - a broken torch install
            pass
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is not None and world is not None:
        try:
            return int(rank), int(world)
        except ValueError:
            raise ConfigError(f"RANK={rank!r} / WORLD_SIZE={world!r} are not integers") from None
    return 0, 1


def _size(value: Any, name: str) -> Any:
    """A byte count as given (an int, or a string such as ``"16GiB"`` that the engine parses:
    one parser for Python, the CLI and configuration files), after the checks that only Python
    can make; ``"auto"`` passes through."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"{name} must be a byte count (int or a string like '16GiB'), got {value!r}")
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"{name} must be a byte count, not negative: {value}")
    return value


def _cache_budget(cache: Any) -> Any:
    """The engine's ``cache_bytes`` for ``cache=``: True is ``"auto"`` (half of physical memory,
    resolved by the engine), False or None is 0 (off), else a byte count."""
    if cache is True:
        return "auto"
    if cache is False or cache is None:
        return 0
    return _size(cache, "cache")


def _workers(threads: Any, prefetch: Any) -> Dict[str, Any]:
    """The engine's thread and prefetch keys for ``threads`` / ``prefetch`` (each ``"auto"`` or an
    int): ``"auto"`` threads are one per core, adjusted while running; ``"auto"`` prefetch starts
    shallow and deepens within the memory budget."""
    if (
        (threads != "auto" and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0))
        or (prefetch != "auto" and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1))
    ):
        raise ConfigError(
            f'threads must be "auto" or an int >= 0, and prefetch "auto" or an int >= 1; got {threads!r} and {prefetch!r}'
        )
    return dict(
        threads=0 if threads == "auto" else threads,
        autotune=threads == "auto",
        prefetch=_AUTO_PREFETCH_START if prefetch == "auto" else prefetch,
        prefetch_auto=prefetch == "auto",
    )


def _on_error(on_error: str) -> Any:
    if on_error == "fail":
        return "fail"
    if on_error == "skip":
        return {"skip": {"max_fraction": 0.05, "max_consecutive": 64}}
    raise ConfigError(f'on_error must be "fail" or "skip", got {on_error!r}')


def _stage_specs(transforms: Optional[Mapping[str, Any]]) -> Tuple[Dict[str, Any], list]:
    """Each field's stages as specs (``{"name", "params"}``), and the Python callables among them
    as ``(callable, rng, name)`` tuples, referred to by index from ``{"name": "python"}`` specs."""
    specs: Dict[str, Any] = {}
    stages: list = []
    for field, value in (transforms or {}).items():
        if not isinstance(field, str):
            raise TypeError(f"transforms must map field names (str) to lists of stages, got key {field!r}")
        items = [value] if hasattr(value, "_spec") or callable(value) else list(value)
        out = []
        for stage in items:
            if hasattr(stage, "_spec"):
                out.append(stage._spec())
                continue
            if hasattr(stage, "_stokehold_callable"):
                stages.append((stage._stokehold_callable, stage._stokehold_rng, stage.name))
            elif callable(stage):
                stages.append((stage, None, getattr(stage, "__name__", "callable")))
            else:
                raise TypeError(
                    f"field {field!r}: a transform stage must be a stokehold.transforms.Lambda, a callable, "
                    f"or a built-in stage object (one with _spec()), got {stage!r}"
                )
            out.append({"name": "python", "params": {"index": len(stages) - 1}})
        specs[field] = out
    return specs, stages


def _make_engine(dataset: Dataset, spec: Dict[str, Any], stages: list, include_ids: bool) -> Any:
    """The native engine of ``spec`` (an ``EngineSpec``: loader options and what a sample is)."""
    try:
        text = json.dumps(spec)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"the loader configuration is not plain data: {e}") from None
    try:
        return _native._Engine(dataset, text, stages, include_ids)
    except OverflowError as e:  # pragma: no cover - JSON carries big ints; serde says out of range
        raise ConfigError(f"an option is out of range: {e}") from None


def _shuffle_mode(shuffle: Union[bool, str]) -> str:
    if shuffle is True:
        return "global"
    if shuffle is False:
        return "sequential"
    if isinstance(shuffle, str) and shuffle in ("global", "sequential", "shard_block"):
        return shuffle
    raise ConfigError(f'shuffle must be True, False, "global", "sequential" or "shard_block", got {shuffle!r}')


class _Front:
    """What :class:`Loader` and :class:`stokehold.SequenceLoader` share: a native engine
    (``self._engine``) with epochs, resume state and statistics, and the configuration
    (``self._config``) with ``rank`` and ``world_size``."""

    _engine: Any
    _config: Dict[str, Any]
    _dataset: Dataset

    def __len__(self) -> int:
        return len(self._engine)

    def set_epoch(self, epoch: int) -> None:
        self._engine.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._engine.epoch

    @property
    def dataset(self) -> Dataset:
        return self._dataset

    @property
    def rank(self) -> int:
        return self._config["rank"]

    @property
    def world_size(self) -> int:
        return self._config["world_size"]

    def state_dict(self) -> Dict[str, Any]:
        return json.loads(self._engine.state_json())

    @property
    def config(self) -> Dict[str, Any]:
        """The whole configuration the engine runs, as plain data (``EngineSpec``: the loader's
        options, what a sample is, the disk cache)."""
        return json.loads(self._engine.config_json)

    def load_state_dict(self, state: Union[Mapping[str, Any], str]) -> None:
        text = state if isinstance(state, str) else json.dumps(dict(state))
        self._engine.load_state_json(text)

    def stats(self) -> Dict[str, Any]:
        return self._engine.stats()

    def close(self) -> None:
        self._engine.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Loader(_Front):
    """An iterable of batches over a :class:`Dataset`, loaded on native threads.

    See ``help(stokehold)`` and ``docs/python.md``; the stub (``__init__.pyi``) documents every
    parameter.
    """

    def __init__(
        self,
        dataset: Union[Dataset, str, "os.PathLike[str]"],
        batch_size: int,
        *,
        shuffle: Union[bool, str] = True,
        shuffle_window: Optional[int] = None,
        seed: int = 0,
        drop_last: bool = True,
        transforms: Optional[Mapping[str, Any]] = None,
        threads: Union[int, str] = "auto",
        prefetch: Union[int, str] = "auto",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        on_error: str = "fail",
        include_ids: bool = False,
        to: str = "numpy",
        pin_memory: bool = False,
        cache: Union[bool, int, str] = False,
        decoded_cache: Optional[int] = None,
        decoded_cache_budget: Union[int, str] = "auto",
        decoded_cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        decoded_cache_dir_limit: Union[int, str] = "auto",
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        cache_dir_limit: Union[int, str] = "auto",
        memory_budget: Union[None, int, str] = None,
        profile: bool = True,
        trace: Union[None, str, "os.PathLike[str]"] = None,
    ) -> None:
        if not isinstance(dataset, Dataset):
            dataset = Dataset(dataset)
        if to not in _TARGETS:
            raise ConfigError(f'to must be "numpy", "torch" or "jax", got {to!r}')
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
        mode = _shuffle_mode(shuffle)
        if shuffle_window is not None and mode != "shard_block":
            raise ConfigError('shuffle_window only applies to shuffle="shard_block"')
        window = 4 if shuffle_window is None else shuffle_window
        if (rank is None) != (world_size is None):
            raise ConfigError("give both rank and world_size, or neither")
        if rank is None:
            rank, world_size = default_rank_world_size()
        assert world_size is not None  # for type checkers: given together with rank, or defaulted above
        workers = _workers(threads, prefetch)
        if memory_budget is not None and (_size(memory_budget, "memory_budget") in (0, "0")):
            raise ConfigError(f"memory_budget must be a positive number of bytes, got {memory_budget!r}")
        if transforms is not None and not isinstance(transforms, Mapping):
            raise ConfigError("transforms must be a dict field name -> list of stages")
        cache_bytes = _cache_budget(cache)
        if decoded_cache is not None and (
            isinstance(decoded_cache, bool) or not isinstance(decoded_cache, int) or decoded_cache < 1
        ):
            raise ConfigError(f"decoded_cache must be the shorter side in pixels (an int >= 1), got {decoded_cache!r}")
        decoded_budget = _size(decoded_cache_budget, "decoded_cache_budget")
        if decoded_cache_dir is not None and decoded_cache is None:
            raise ConfigError("decoded_cache_dir needs decoded_cache (the shorter side of the cached images)")
        decoded_dir_limit = None if decoded_cache_dir_limit == "auto" else _size(decoded_cache_dir_limit, "decoded_cache_dir_limit")
        if decoded_dir_limit in (0, "0"):
            raise ConfigError("decoded_cache_dir_limit must be positive")
        dir_limit = None if cache_dir_limit == "auto" else _size(cache_dir_limit, "cache_dir_limit")
        if cache_dir is not None and dir_limit in (0, "0"):
            raise ConfigError("cache_dir_limit must be positive")
        self._config: Dict[str, Any] = dict(
            shuffle=shuffle,
            shuffle_window=shuffle_window,
            seed=seed,
            drop_last=drop_last,
            transforms=dict(transforms) if transforms is not None else None,
            threads=threads,
            prefetch=prefetch,
            memory_budget=memory_budget,
            profile=profile,
            trace=trace,
            rank=rank,
            world_size=world_size,
            on_error=on_error,
            include_ids=include_ids,
            to=to,
            pin_memory=pin_memory,
            cache=cache,
            decoded_cache=decoded_cache,
            decoded_cache_budget=decoded_cache_budget,
            decoded_cache_dir=None if decoded_cache_dir is None else os.fspath(decoded_cache_dir),
            decoded_cache_dir_limit=decoded_cache_dir_limit,
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            cache_dir_limit=cache_dir_limit,
        )
        if pin_memory and to != "torch":
            warnings.warn(f"pin_memory only applies to to='torch' (ignored with to={to!r})", stacklevel=2)
        self._dataset = dataset
        self._batch_size = batch_size
        self._to = to
        self._pin = bool(pin_memory)
        self._trace = None if trace is None else os.fspath(trace)
        loader_config: Dict[str, Any] = dict(
            batch_size=batch_size,
            seed=seed,
            shuffle={"shard_block": {"window": window}} if mode == "shard_block" else mode,
            tail="drop" if drop_last else "pad",
            rank=rank,
            world_size=world_size,
            **workers,
            memory_budget="auto" if memory_budget is None else memory_budget,
            profile=bool(profile),
            trace_capacity=TRACE_CAPACITY if trace is not None else 0,
            on_error=_on_error(on_error),
            cache_bytes=cache_bytes,
        )
        if decoded_cache is not None:
            decoded: Dict[str, Any] = dict(size=decoded_cache, budget=decoded_budget)
            if decoded_cache_dir is not None:
                decoded["dir"] = os.fspath(decoded_cache_dir)
            if decoded_dir_limit is not None:
                decoded["dir_limit"] = decoded_dir_limit
            loader_config["decoded_cache"] = decoded
        specs, stages = _stage_specs(self._config["transforms"])
        spec: Dict[str, Any] = dict(
            loader=loader_config,
            samples=dict(kind="records", transforms=specs),
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            cache_dir_limit=dir_limit,
        )
        self._engine = _make_engine(dataset, spec, stages, include_ids)
        _LIVE.add(self)

    # --- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        it = self._engine.iter()
        if self._to == "numpy":
            return it
        return _converted(it, _converter(self._to, self._pin))

    @property
    def batch_size(self) -> int:
        return self._batch_size

    def report(self) -> str:
        return self._engine.report()

    def export_trace(self, path: Union[None, str, "os.PathLike[str]"] = None) -> str:
        target = self._trace if path is None else os.fspath(path)
        if target is None:
            raise ConfigError("no trace path: pass one, or make the Loader with trace=PATH")
        text = self._engine.trace_json()
        if text is None:
            raise ConfigError("tracing is off: make the Loader with trace=PATH")
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        return target

    def close(self) -> None:
        super().close()
        if self._trace is not None:
            self.export_trace()

    def __repr__(self) -> str:
        return (
            f"Loader({self._dataset.path!r}, batch_size={self._batch_size}, "
            f"{len(self)} batches per epoch, rank {self.rank}/{self.world_size}, to={self._to!r}, "
            f"config={self._engine.config_json})"
        )

    # --- pickling (spawn-based workers) ----------------------------------------------------

    def __reduce__(self):
        return (_restore, (self._dataset, self._batch_size, self._config, self.state_dict()))


def _restore(dataset: Dataset, batch_size: int, config: Dict[str, Any], state: Dict[str, Any]) -> Loader:
    loader = Loader(dataset, batch_size, **config)
    loader.load_state_dict(state)
    return loader


def _converted(it: Iterator[Dict[str, Any]], convert) -> Iterator[Dict[str, Any]]:
    for batch in it:
        yield convert(batch)


def _converter(to: str, pin: bool):
    if to == "torch":
        import torch

        # page-locked memory needs CUDA; without it, pin_memory is ignored (as torch does)
        pin = pin and torch.cuda.is_available()
        from_numpy = torch.from_numpy

        def one(v):
            if isinstance(v, np.ndarray):
                t = from_numpy(v)
                return t.pin_memory() if pin else t
            if isinstance(v, list):
                return [from_numpy(x) if isinstance(x, np.ndarray) else x for x in v]
            return v

        return lambda batch: {k: one(v) for k, v in batch.items()}
    if to == "jax":
        import jax.numpy as jnp

        def arr(a):
            try:
                return jnp.from_dlpack(a)  # zero-copy where jax accepts the buffer
            except Exception:
                return jnp.asarray(a)

        def one(v):
            if isinstance(v, np.ndarray):
                return arr(v)
            if isinstance(v, list):
                return [arr(x) if isinstance(x, np.ndarray) else x for x in v]
            return v

        return lambda batch: {k: one(v) for k, v in batch.items()}
    raise ConfigError(f"unknown target {to!r}")  # pragma: no cover
