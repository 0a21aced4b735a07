"""stokehold.Loader: the Python front of the native loading engine (``_native._Engine``)."""

import atexit
import json
import operator
import os
import sys
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import _native, _options
from ._mixture import Mixture
from ._native import ConfigError, Dataset
from ._options import LOADER, byte_count as _size, to_int as _int
from ._stages import stage_specs as _stage_specs

if TYPE_CHECKING:
    from .lerobot import LeRobotDataset

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


_U32 = 2**32 - 1
_U64 = 2**64 - 1


def _seed(seed: Any) -> int:
    return _int("seed", seed, 0, _U64, "an int from 0 to 2**64 - 1 (e.g. seed=0)")


def _rank_world(rank: Any, world_size: Any) -> Tuple[int, int]:
    """``(rank, world_size)`` as given (both or neither), else :func:`default_rank_world_size`."""
    if (rank is None) != (world_size is None):
        raise ConfigError(
            f"give both rank and world_size, or neither (default: {default_rank_world_size.__name__}()); "
            f"got rank={rank!r}, world_size={world_size!r}"
        )
    if rank is None:
        return default_rank_world_size()
    world = _int("world_size", world_size, 1, _U32, "the number of processes loading, an int >= 1")
    r = _int("rank", rank, 0, _U32, f"this process's rank, an int from 0 to world_size - 1 ({world - 1})")
    # rank >= world_size: the engine's check (LoaderConfig::validate), for every front
    return r, world


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


def _on_error(on_error: str, max_skip_fraction: Any) -> Any:
    if isinstance(max_skip_fraction, bool) or not isinstance(max_skip_fraction, (int, float)) or not 0 <= max_skip_fraction <= 1:
        raise ConfigError(f"max_skip_fraction must be a number from 0 to 1 (0.05: 5% of an epoch), got {max_skip_fraction!r}")
    if on_error == "fail":
        return "fail"
    if on_error == "skip":
        return {"skip": {"max_fraction": float(max_skip_fraction), "max_consecutive": 64}}
    raise ConfigError(f'on_error must be "fail" or "skip", got {on_error!r}')


def _make_engine(dataset: Union[Dataset, Mixture, "LeRobotDataset"], spec: Any, stages: list, include_ids: bool) -> Any:
    """The native engine of ``spec`` (an ``EngineSpec``: loader options and what a sample is; a
    dict, or its JSON)."""
    try:
        text = spec if isinstance(spec, str) else json.dumps(spec)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"the loader configuration is not plain data: {e}") from None
    # a LeRobot folder is read in place by the engine (the spec names it): no stokehold dataset
    target = list(dataset.datasets) if isinstance(dataset, Mixture) else (
        dataset if isinstance(dataset, (Dataset, Mixture)) else None
    )
    try:
        return _native._Engine(target, text, stages, include_ids)
    except OverflowError as e:  # pragma: no cover - JSON carries big ints; serde says out of range
        raise ConfigError(f"an option is out of range: {e}") from None


def _open_dataset(dataset: Any, storage_options: Optional[Mapping[str, Any]]) -> Union[Dataset, Mixture]:
    """A front's ``dataset``: a :class:`Dataset` or :class:`Mixture` as given, a path or URL
    opened with ``storage_options``. Options given with a dataset already open are refused (they
    would be ignored)."""
    if isinstance(dataset, (Dataset, Mixture)):
        if storage_options is not None:
            raise ConfigError(
                "storage_options applies to a dataset given as a path or URL; this one is already "
                "open with its own: give storage_options to Dataset(...) (or to the Mixture's "
                "sources' Dataset(...)), or pass the path"
            )
        return dataset
    if storage_options is None:
        return Dataset(dataset)
    return Dataset(dataset, storage_options=storage_options)


def _shared_config(o: Dict[str, Any], batch_size: int, shuffle: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The engine's configuration from the options every front takes alike (``o``, from
    :func:`stokehold._options.given`, which gets the resolved rank, world size and seed back):
    the ``LoaderConfig`` keys, and the spec's own keys (the shard cache on disk). ``shuffle`` is
    the front's order, already as the engine spells it."""
    if o["to"] not in _TARGETS:
        raise ConfigError(f'to must be "numpy", "torch" or "jax", got {o["to"]!r}')
    _check_installed(o["to"])
    # memory_budget=0: the engine's check (LoaderConfig::validate), for every front
    o["seed"] = _seed(o["seed"])
    o["rank"], o["world_size"] = _rank_world(o["rank"], o["world_size"])
    _warn_pin(o["pin_memory"], o["to"])
    node = _node_budget(o["memory_budget"])
    loader = dict(
        batch_size=batch_size,
        seed=o["seed"],
        shuffle=shuffle,
        tail="drop" if o["drop_last"] else "pad",
        rank=o["rank"],
        world_size=o["world_size"],
        **_workers(o["threads"], o["prefetch"]),
        memory_budget="auto" if o["memory_budget"] is None or node is not None else o["memory_budget"],
        profile=o["profile"],
        trace_capacity=TRACE_CAPACITY if o["trace"] is not None else 0,
        on_error=_on_error(o["on_error"], o["max_skip_fraction"]),
        cache_bytes=_cache_budget(o["cache"]),
        io_uring=o["io_uring"],
    )
    if node is not None:
        loader["node_memory_budget"] = node
    disk = dict(cache_dir=o["cache_dir"], cache_dir_limit=_dir_limit(o["cache_dir"], o["cache_dir_limit"]))
    return loader, disk


def _node_budget(memory_budget: Any) -> Any:
    """The node's budget of ``memory_budget="node:8GiB"`` (the bytes after ``node:``), or None;
    ``STOKEHOLD_NODE_MEMORY_BUDGET`` (``"8GiB"``), set once for the job, stands for it when the
    loader names no budget."""
    if memory_budget is None:
        env = os.environ.get("STOKEHOLD_NODE_MEMORY_BUDGET")
        return env.strip() if env else None
    if isinstance(memory_budget, str) and memory_budget.strip().lower().startswith("node:"):
        size = memory_budget.strip()[5:].strip()
        if not size:
            raise ConfigError('memory_budget="node:SIZE" needs a size, e.g. "node:8GiB"')
        return int(size) if size.isdigit() else size
    return None


# what to= needs, and how to get it: the library is looked up (not imported) when the loader is
# made, so that a missing one is named there and not at the first batch
_INSTALL = {
    "torch": ("torch", "pip install torch (or PyTorch's CPU build, about 0.7 GB instead of 5 GB: "
              "pip install torch --index-url https://download.pytorch.org/whl/cpu)"),
    "jax": ("jax", "pip install jax"),
}


def _check_installed(to: str) -> None:
    """A ConfigError naming what to install when ``to`` needs a library that is missing."""
    if to not in _INSTALL:
        return
    import importlib.util

    module, how = _INSTALL[to]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(f'to="{to}" needs {module}, which is not installed here: {how}; or to="numpy"')


def _dir_limit(cache_dir: Any, cache_dir_limit: Union[int, str]) -> Optional[Union[int, str]]:
    """``cache_dir_limit`` as the spec's ``cache_dir_limit`` (None: the dataset's size)."""
    limit = None if cache_dir_limit == "auto" else cache_dir_limit
    if cache_dir is not None and limit in (0, "0"):
        raise ConfigError("cache_dir_limit must be positive")
    return limit


def _warn_pin(pin_memory: bool, to: str) -> None:
    if pin_memory and to != "torch":
        warnings.warn(f"pin_memory only applies to to='torch' (ignored with to={to!r})", stacklevel=4)


def _shuffle_mode(shuffle: Union[bool, str]) -> str:
    if shuffle is True:
        return "global"
    if shuffle is False:
        return "sequential"
    if isinstance(shuffle, str) and shuffle in ("global", "sequential", "shard_block"):
        return shuffle
    raise ConfigError(f'shuffle must be True, False, "global", "sequential" or "shard_block", got {shuffle!r}')


_F = TypeVar("_F", bound="_Front")


class _Front:
    """What :class:`Loader` and :class:`stokehold.SequenceLoader` share: a native engine
    (``self._engine``) with epochs, resume state and statistics, and the configuration
    (``self._config``) with ``rank`` and ``world_size``.

    This module is also the loaders' type stub (``__init__.pyi`` re-exports it), so their
    docstrings are written once, here, and ``help()`` shows them at run time."""

    _engine: Any
    _config: Dict[str, Any]
    _dataset: Union[Dataset, Mixture, "LeRobotDataset"]
    _stages: list
    _to: str = "numpy"
    _pin: bool = False
    _trace: Optional[str] = None

    def _start(self, dataset: Union[Dataset, Mixture, "LeRobotDataset"], config: Dict[str, Any], spec: Any, stages: list) -> None:
        """Make the native engine of ``spec`` (an ``EngineSpec`` as a dict, or its JSON) with the
        Python stages ``stages``; ``config`` is the options as given (checked)."""
        self._dataset = dataset
        self._config = config
        self._stages = stages
        self._to = config["to"]
        self._pin = config["pin_memory"]
        self._trace = config["trace"]
        self._engine = _make_engine(dataset, spec, stages, config["include_ids"])
        _LIVE.add(self)

    def __reduce__(self):
        """Pickles as its engine's configuration (``config``), its Python stages and its state:
        unpickling makes a new, idle loader of the same configuration that continues from the same
        position (for spawn-based worker processes). Python stages must be picklable
        (module-level functions)."""
        return (_unpickle, (type(self), self._dataset, self._engine.config_json, self._stages, self._config, self.state_dict()))

    def _batches(self) -> Iterator[Dict[str, Any]]:
        """The native iterator (reporting each batch to ``on_step`` when given), converted to
        ``to``'s arrays."""
        it = self._native_iter()
        if getattr(self._dataset, "_pad_suffix", None):
            # a LeRobot dataset's window masks (`<key>_is_pad`): bool, as LeRobot gives them (the
            # engine's 0/1 bytes, viewed without a copy)
            it = _converted(it, _bool_masks)
        if self._to != "numpy":
            it = _converted(it, _converter(self._to, self._pin))
        return it

    def _native_iter(self) -> Any:
        """The engine's iterator for (the rest of) the epoch; it calls ``on_step`` itself after
        each batch (no Python layer between the engine and the loop)."""
        hook = self._config.get("on_step")
        if hook is not None and not callable(hook):
            raise ConfigError(f"on_step must be a callable taking one dict, got {hook!r}")
        return self._engine.iter(hook, self._config["rank"])

    def samples_at(
        self, step: int, rank: Optional[int] = None, details: bool = False, epoch: Optional[int] = None
    ) -> Any:
        """The samples of step ``step`` on rank ``rank`` (this loader's own when None) of the
        current epoch (or ``epoch``), computed from the order alone, without loading anything
        and without any log: an int64 array equal to that step's ``batch["id"]`` with
        ``include_ids=True``.

        ``step`` counts the epoch's steps from its start across every resume, whatever the world
        size of each run: the state saved by :meth:`state_dict` keeps where each run of one
        world size began (``runs``), so step 41877 is the 41878th batch the ranks took
        together in this epoch. With ``details=True``, a list of dicts instead, one per sample:
        ``id``, ``is_padding``, and where it comes from (``shard`` and ``record``, ``file`` and
        byte ``offset`` (``in_place`` for files read in place), a mixture's ``source`` and
        ``source_name`` with the ``index`` in that source, token windows' ``token``, ``tokens``
        and ``document``, and the ``key`` or ``path`` kept at pack time when the records have
        one (read from storage).

        :raises ConfigError: ``step`` past the end of the epoch, or ``rank`` outside the world
            of that step.
        """
        step = _int("step", step, 0, _U64, "an int >= 0 (the epoch's first step is 0)")
        if rank is not None:
            rank = _int("rank", rank, 0, 2**32 - 1, "an int >= 0")
        if epoch is not None:
            epoch = _int("epoch", epoch, 0, _U64, "an int >= 0")
        ids, padding, described = self._engine.samples_at(step, rank, epoch, bool(details))
        if not details:
            return np.asarray(ids, dtype=np.int64)
        out = []
        for i, p, d in zip(ids, padding, described):
            entry = {"id": i, "is_padding": p}
            entry.update(json.loads(d))
            out.append(entry)
        return out

    def _refuse_empty_epoch(self, batch_size: int, drop_last: bool, unit: str) -> None:
        """A ConfigError when ``drop_last`` leaves an epoch of samples without a single batch
        (one step of ``batch_size`` x ``world_size`` is more than the epoch holds): iterating
        would silently give nothing."""
        # len() first: packed conversations counted lazily plan their whole epoch for `samples`
        if not drop_last or len(self._engine) > 0:
            return
        samples = self._engine.samples
        if samples == 0 or len(self._engine) > 0:
            return
        world = self._config["world_size"]
        step = batch_size * world
        ranks = f" x world_size {world} = {step}" if world > 1 else ""
        self._engine.close()
        if samples < world:
            raise ConfigError(
                f"world_size {world} is more than the {samples} {unit} of an epoch, and drop_last=True "
                f"drops a batch that is not full, so no rank would get a batch: use at most {samples} "
                f"ranks (world_size <= {samples}), or drop_last=False (each rank's batches are padded "
                f"with repeats, flagged in is_padding)"
            )
        raise ConfigError(
            f"batch_size {batch_size}{ranks} is more than the {samples} {unit} of an epoch, and "
            f"drop_last=True drops a batch that is not full, so an epoch would have no batches: "
            f"use batch_size <= {samples // world}, or drop_last=False (the last batch is "
            f"padded with repeats, flagged in is_padding)"
        )

    def __len__(self) -> int:
        """Batches per epoch for this rank. With ``packing="whole"``, while the conversations are
        still being counted, an estimate; exact once the epoch is planned
        (``stats()["packing"]["exact"]``; docs/text.md)."""
        return len(self._engine)

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` (an int >= 0) at the next iteration, from its beginning (a resumed position
        is kept when ``epoch`` is already the current epoch). Stops a running iteration."""
        self._engine.set_epoch(_int("epoch", epoch, 0, _U64, "an int >= 0 (the first epoch is 0)"))

    @property
    def epoch(self) -> int:
        """The epoch the next (or the running) iteration belongs to."""
        return self._engine.epoch

    @property
    def dataset(self) -> Union[Dataset, Mixture, "LeRobotDataset"]:
        """The dataset (or the :class:`Mixture`, or the LeRobot dataset read in place)."""
        return self._dataset

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._config["rank"]

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return self._config["world_size"]

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is, after the batches delivered so far: a small JSON-serialisable dict
        (``version``, ``dataset`` fingerprint, ``seed``, ``shuffle``, ``epoch``, ``position``).
        The position is global, so any rank's state resumes any number of ranks."""
        return json.loads(self._engine.state_json())

    @property
    def config(self) -> Dict[str, Any]:
        """The whole configuration the native engine runs, as plain data (an ``EngineSpec``: the
        loader's options, what a sample is, the disk cache); ``repr(loader)`` shows it, and
        ``stokehold bench --config FILE`` runs it."""
        return json.loads(self._engine.config_json)

    def load_state_dict(self, state: Union[Mapping[str, Any], str]) -> None:
        """Continue from a saved state (a dict or its JSON). Stops a running iteration.

        :raises IncompatibleStateError: the state is of another dataset, seed, order or version
            (``.field`` names it).
        :raises TypeError: ``state`` is neither a dict nor a str (``None``, say).
        """
        if isinstance(state, str):
            text = state
        elif isinstance(state, Mapping):
            text = json.dumps(dict(state))
        else:
            raise TypeError(
                f"load_state_dict needs a state that state_dict() returned (a dict, or its JSON "
                f"string), got {type(state).__name__}: pass the dict saved with your checkpoint "
                f"(to start from the beginning instead, skip this call or use set_epoch())"
            )
        self._engine.load_state_json(text)

    def stats(self) -> Dict[str, Any]:
        """Statistics since the loader was made: ``stages`` (a list of dicts with ``name``,
        ``items``, ``busy`` seconds summed over threads, ``share`` of the busy time, and ``p50``/``p99``
        seconds per item),
        ``batches``, ``samples``, ``consumer_wait`` (seconds the training loop waited for data),
        ``worker_wait``, ``mean_queue``, ``skipped`` (sample ids), ``threads``, ``active_threads``,
        ``prefetch`` (the depth now), ``bytes_read`` and ``records_read`` (what the pipeline took
        from storage), ``profiled`` (whether stages were timed) and ``caches`` (``"records"``,
        ``"decoded"``, ``"decoded-disk"``, ``"disk"`` -> ``hits``, ``misses``, ``bytes``, ``budget``, ``entries``,
        ``saved`` seconds of worker time; ``"decoded-disk"`` also ``shared``, its hits on images other
        processes wrote) and ``storage`` (``None`` for a local dataset; from object
        storage: ``requests``, ``http_requests``, ``retries``, ``failures``, ``short_bodies``,
        ``bytes``, and ``prefetch`` -> ``requests``, ``bytes``, ``hits``, ``misses``,
        ``wasted_bytes``, ``refused``: the ranges fetched ahead of the reads)."""
        return self._engine.stats()

    def report(self) -> str:
        """The statistics as a readable table (``print(loader.report())``)."""
        return self._engine.report()

    def export_trace(self, path: Union[None, str, "os.PathLike[str]"] = None) -> str:
        """Write the stage spans kept so far as Chrome Trace Event JSON to ``path`` (default: the
        ``trace`` path); returns the path.

        :raises ConfigError: the loader was made without ``trace``, or no path is known.
        """
        target = self._trace if path is None else os.fspath(path)
        if target is None:
            raise ConfigError("no trace path: pass one, or make the loader with trace=PATH")
        text = self._engine.trace_json()
        if text is None:
            raise ConfigError("tracing is off: make the loader with trace=PATH")
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        return target

    def close(self) -> None:
        """Stop a running iteration and join its worker threads (the position is kept); with
        ``trace``, write the trace."""
        self._engine.close()
        if self._trace is not None:
            self.export_trace()

    def __enter__(self: _F) -> _F:
        return self

    def __exit__(self, *exc: Any) -> None:
        """:meth:`close`."""
        self.close()


class _Converted:
    """A loader's batches converted (to torch or jax) one by one, keeping the native iterator's
    ``__length_hint__`` (batches left in the epoch) for progress bars."""

    __slots__ = ("_it", "_convert")

    def __init__(self, it: Any, convert: Any) -> None:
        self._it = it
        self._convert = convert

    def __iter__(self) -> "_Converted":
        return self

    def __next__(self) -> Dict[str, Any]:
        return self._convert(next(self._it))

    def __length_hint__(self) -> int:
        return operator.length_hint(self._it)

    def close(self) -> None:
        self._it.close()


class Loader(_Front):
    """An iterable of batches over a :class:`Dataset`, read, transformed and collated on native
    threads, in an order that is a pure function of (dataset, seed, epoch, rank, world size).

    Iterating runs the current epoch (continuing from the current position); when an epoch ends
    the loader moves to the next one, so ``for batch in loader`` in an outer loop walks the
    epochs. One iteration runs at a time: a new ``iter(loader)`` stops the previous one (which
    then raises if used) and continues from the last batch delivered.

    Fixed columns are numpy arrays over the batch's own memory (no copy; the memory is returned
    to the loader's pool when Python drops the array). Blocking waits release the GIL; Ctrl-C
    raises ``KeyboardInterrupt`` within about 100 ms and stops the worker threads.

    :param dataset: a :class:`Dataset`, a dataset path, or a :class:`Mixture` of datasets; or a
        LeRobot dataset read in place: a :class:`stokehold.lerobot.LeRobotDataset`, or the path
        of a folder holding ``meta/info.json`` (docs/video.md).
    :param batch_size: samples per batch, per rank.
    :param shuffle: ``True`` (a new global permutation each epoch), ``False`` (stored order), or
        ``"shard_block"`` (shards in random windows of ``shuffle_window`` shards, shuffled within
        each window: for streaming reads).
    :param shuffle_window: shards per window for ``"shard_block"`` (default 4).
    :param seed: seed of the order and of every random stage (an int from 0 to 2**64 - 1).
    :param drop_last: drop the end of the epoch that does not fill a step of all ranks; ``False``
        pads it with repeats of the epoch's first samples, flagged in ``is_padding``. A step
        (``batch_size`` x ``world_size``) larger than the whole dataset is refused with
        ``drop_last=True``, as an epoch would have no batches.
    :param transforms: field name -> list of stages: :class:`stokehold.transforms.Lambda` (or
        any callable), or built-in stage objects (anything with ``_spec()``). Other fields come
        out as stored.
    :param fields: the fields (a list of names) that come out in the batch, in the dataset's
        order; default: every field. A field with ``transforms`` must be among them. The others
        are not read out of their records: a video (a camera) not asked for is neither copied
        nor decoded. For a LeRobot dataset, the features (cameras, ``action``, ...) to load.
    :param threads: ``"auto"`` (default): up to one thread per core, fewer while the training
        loop is slower than the loader (saves CPU; never makes the loop wait); an int fixes the
        number (0: one per core).
    :param prefetch: ``"auto"`` (default): batches prepared ahead start at 4 and the depth
        moves while running: deeper when the training loop waits for data while the workers sit
        blocked on the prefetch window, never beyond ``memory_budget``; an int fixes it.
    :param rank: this process's rank; with ``world_size``. Default:
        :func:`default_rank_world_size`.
    :param world_size: number of ranks.
    :param on_error: ``"fail"`` (raise at the first failed sample) or ``"skip"`` (replace it with
        a copy of another sample of the batch, flagged as padding, and report its id in
        ``stats()["skipped"]``; fails past ``max_skip_fraction`` of the epoch or 64 in a row).
        Samples of files read in place that lack a required field are such failed samples.
    :param max_skip_fraction: with ``on_error="skip"``, the largest fraction of an epoch's
        samples (on this rank) that may be skipped before the loader fails (default 0.05).
    :param include_ids: add ``batch["id"]`` (int64 global sample ids) and ``batch["is_padding"]``.
    :param to: ``"numpy"``, ``"torch"`` (``torch.from_numpy``, no copy) or ``"jax"`` (DLPack
        where jax accepts the buffer, else a copy).
    :param pin_memory: with ``to="torch"`` and CUDA, put tensors in page-locked memory (a copy)
        for ``.cuda(non_blocking=True)``; ignored without CUDA.
    :param memory_budget: bytes (an int or a string like ``"512MiB"``) the batches prepared ahead may take with ``prefetch="auto"``
        (default: 10% of physical memory, at most 2 GiB): the depth stays at or below the budget
        over the bytes of one batch (at least 1).
        ``"node:8GiB"``: a budget shared by every loader of every process on this node that
        names it (or ``STOKEHOLD_NODE_MEMORY_BUDGET=8GiB`` in the environment, set once for the
        job): each takes what its prefetch window could use, or what is left (at least one
        batch), returned when the loader is garbage-collected or its process dies; a lease file under
        ``STOKEHOLD_NODE_BUDGET_DIR`` (else the temporary directory). ``stats()["memory_budget"]``
        is this loader's share.
    :param profile: time every stage of every sample (``stats()``, ``report()``); ``False``
        saves the clock reads (stage figures then stay zero).
    :param trace: a path: keep the newest 1,000,000 stage spans (stage, thread, start, duration,
        sample id; 32 MB) and write them as Chrome Trace Event JSON there on :meth:`close` (or
        with :meth:`export_trace`), for chrome://tracing or ui.perfetto.dev.
    :param cache: RAM cache of the shards' bytes, shared by the loaders of this process that read
        the same dataset: ``True`` (up to half the RAM), a byte budget (``"16GiB"`` or an int), or
        ``False`` (default: the page cache serves local files). Shards that fit are loaded whole,
        in the background, the first time they are needed; the rest are read from storage.
    :param decoded_cache: keep each image after its deterministic prefix (decoded, resized to this
        shorter side in pixels) in RAM; the random stages (crop, flip, jitter) then start from it
        instead of the JPEG. Output is the same whether a sample was cached or not, but differs
        from the uncached pipeline (crops come from the resized image, as with FFCV's
        ``max_resolution``). ``stats()["caches"]["decoded"]["saved"]`` is the worker time saved.
    :param decoded_cache_budget: its byte budget (``"auto"``: half the RAM).
    :param decoded_cache_dir: also keep the decoded images in this local directory (fast local
        disk), across runs and shared by the processes of a node: a later run reads them instead
        of decoding (``stats()["caches"]["decoded-disk"]``). Written in checksummed parts,
        published atomically; damaged parts or images are computed again, never served.
    :param decoded_cache_dir_limit: the most bytes the directory may hold for this dataset and
        size (``"auto"``: no limit of its own; writing always stops with 5% of the filesystem
        free). Images beyond it are computed each time.
    :param decoded_cache_keep_free: the free bytes the directory's filesystem keeps: writing
        stops below (``"auto"``: 5% of the filesystem, at most 1 GiB). ``STOKEHOLD_KEEP_FREE``
        in the environment, when set, overrides it (docs/storage.md).
    :param on_step: a callable given, after each batch, a plain dict: ``epoch``, ``step`` (as
        :meth:`samples_at` counts it), ``rank``, ``wait`` (seconds the loop waited for the batch),
        ``step_time`` (seconds since the batch before) and ``bound`` (the stage that took most
        worker time meanwhile); for the user's own logger.
    :param io_uring: submit a task's reads that need the device together through ``io_uring``
        where the kernel allows it (reads from the page cache are plain reads either way);
        ``False``: one ``pread`` each. ``STOKEHOLD_IO_URING=0`` turns it off for the process.
    :param cache_dir: a local directory caching the shard files of a dataset on slow storage (a
        network filesystem): shards are copied there in the background (atomically, checked,
        shared safely by several processes) and read from there once copied.
    :param cache_dir_limit: its size limit (``"auto"``: the dataset's size); entries of other
        datasets are evicted, least recently used first, to make room.
    :param storage_options: when ``dataset`` is a path or URL: the options it is opened with, as
        :class:`Dataset`'s (credentials, endpoint, ``anon``, ...; values a str, bool or number).
        A dataset already open keeps its own (give them to ``Dataset(...)`` instead).
    :raises ConfigError: an invalid option, field or stage, or ``drop_last=True`` with a step
        larger than the dataset.
    :raises TypeError: a stage that is not a stage.
    """

    def __init__(
        self,
        dataset: Union[Dataset, Mixture, "LeRobotDataset", str, "os.PathLike[str]"],
        batch_size: int,
        *,
        shuffle: Union[bool, str] = True,
        shuffle_window: Optional[int] = None,
        seed: int = 0,
        drop_last: bool = True,
        transforms: Optional[Mapping[str, Any]] = None,
        fields: Optional[Sequence[str]] = None,
        threads: Union[int, str] = "auto",
        prefetch: Union[int, str] = "auto",
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        on_error: str = "fail",
        max_skip_fraction: float = 0.05,
        include_ids: bool = False,
        to: str = "numpy",
        pin_memory: bool = False,
        cache: Union[bool, int, str] = False,
        decoded_cache: Optional[int] = None,
        decoded_cache_budget: Union[int, str] = "auto",
        decoded_cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        decoded_cache_dir_limit: Union[int, str] = "auto",
        decoded_cache_keep_free: Union[int, str] = "auto",
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        cache_dir_limit: Union[int, str] = "auto",
        memory_budget: Union[None, int, str] = None,
        profile: bool = True,
        trace: Union[None, str, "os.PathLike[str]"] = None,
        on_step: Optional[Callable[[Dict[str, Any]], Any]] = None,
        io_uring: bool = True,
        storage_options: Optional[Mapping[str, Any]] = None,
    ) -> None:
        o = _options.given(LOADER, locals())
        from .lerobot import LeRobotDataset, is_lerobot

        if not isinstance(dataset, (Dataset, Mixture, LeRobotDataset)) and is_lerobot(dataset):
            dataset = LeRobotDataset(dataset)
        if isinstance(dataset, LeRobotDataset):
            o.pop("storage_options")
            if transforms:
                raise ConfigError("transforms on a LeRobot dataset's features are not supported yet")
        else:
            dataset = _open_dataset(dataset, o.pop("storage_options"))
        batch_size = _int("batch_size", batch_size, 1, _U32, "a positive int (at most 2**32 - 1)")
        mode = _shuffle_mode(shuffle)
        if o["shuffle_window"] is not None and mode != "shard_block":
            raise ConfigError('shuffle_window only applies to shuffle="shard_block"')
        window = 4 if o["shuffle_window"] is None else o["shuffle_window"]
        if transforms is not None and not isinstance(transforms, Mapping):
            raise ConfigError("transforms must be a dict field name -> list of stages")
        o["transforms"] = None if transforms is None else dict(transforms)
        loader_config, disk = _shared_config(
            o, batch_size, {"shard_block": {"window": window}} if mode == "shard_block" else mode
        )
        if o["decoded_cache_dir"] is not None and decoded_cache is None:
            raise ConfigError("decoded_cache_dir needs decoded_cache (the shorter side of the cached images)")
        if decoded_cache is not None:
            decoded: Dict[str, Any] = dict(size=o["decoded_cache"], budget=o["decoded_cache_budget"])
            if o["decoded_cache_dir"] is not None:
                decoded["dir"] = o["decoded_cache_dir"]
            if o["decoded_cache_dir_limit"] != "auto":
                if o["decoded_cache_dir_limit"] in (0, "0"):
                    raise ConfigError("decoded_cache_dir_limit must be positive")
                decoded["dir_limit"] = o["decoded_cache_dir_limit"]
            if o["decoded_cache_keep_free"] != "auto":
                decoded["keep_free"] = o["decoded_cache_keep_free"]
            loader_config["decoded_cache"] = decoded
        specs, stages = _stage_specs(o["transforms"])
        samples: Dict[str, Any] = dict(kind="records", transforms=specs)
        if o["fields"] is not None:
            samples["fields"] = _field_names(o["fields"])
        if isinstance(dataset, LeRobotDataset):
            samples = dataset._spec(None if o["fields"] is None else _field_names(o["fields"]))
        spec = dict(loader=loader_config, samples=samples, **disk)
        if isinstance(dataset, Mixture):
            spec["mixture"] = dataset._spec(stages)
        self._start(dataset, dict(o, batch_size=batch_size), spec, stages)
        self._refuse_empty_epoch(batch_size, o["drop_last"], "samples")

    # --- iteration -------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """Run (the rest of) the current epoch.

        :raises CorruptDataError: a damaged record (``.sample_id`` set), or too many under
            ``on_error="skip"``.
        :raises SampleError: a stage failed on a sample (``.sample_id`` set).
        :raises StokeholdError: the loader was running when the process forked (in the child), or
            the iterator was superseded by a newer one.
        """
        return self._batches()

    @property
    def batch_size(self) -> int:
        """Samples per batch."""
        return self._config["batch_size"]

    def __repr__(self) -> str:
        return (
            f"Loader({self._dataset.path!r}, batch_size={self.batch_size}, "
            f"{len(self)} batches per epoch, rank {self.rank}/{self.world_size}, to={self._to!r}, "
            f"config={self._engine.config_json})"
        )


def _bool_masks(batch: Dict[str, Any]) -> Dict[str, Any]:
    """A LeRobot batch with its ``*_is_pad`` masks viewed as bool."""
    for k, v in batch.items():
        if k.endswith("_is_pad") and isinstance(v, np.ndarray) and v.dtype == np.uint8:
            batch[k] = v.view(np.bool_)
    return batch


def _field_names(fields: Any) -> list:
    """``fields=`` as a list of names (one name alone is a list of one)."""
    if isinstance(fields, str):
        return [fields]
    try:
        names = list(fields)
    except TypeError:
        raise ConfigError(f"fields must be a list of field names, got {fields!r}") from None
    if not all(isinstance(n, str) for n in names):
        raise ConfigError(f"fields must be a list of field names (str), got {fields!r}")
    return names


def _unpickle(cls: Any, dataset: Union[Dataset, Mixture], spec: str, stages: list, config: Dict[str, Any], state: Dict[str, Any]) -> Any:
    loader = cls.__new__(cls)
    loader._start(dataset, config, spec, stages)
    loader.load_state_dict(state)
    return loader


def _converted(it: Iterator[Dict[str, Any]], convert) -> Iterator[Dict[str, Any]]:
    return _Converted(it, convert)


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
