"""The ``stokehold._native`` extension module (typed interface).

The public classes are defined here at runtime but carry ``__module__ == "stokehold"`` and are
documented in the package stub (``__init__.pyi``); this stub re-exports them from there and types
the private parts used by ``_loader.py`` and ``_cli.py``.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, final

from . import (
    ConfigError as ConfigError,
    CorruptDataError as CorruptDataError,
    Dataset as Dataset,
    IncompatibleStateError as IncompatibleStateError,
    LimitExceededError as LimitExceededError,
    SampleError as SampleError,
    SchemaError as SchemaError,
    ShardWriter as ShardWriter,
    StokeholdError as StokeholdError,
    StokeholdIOError as StokeholdIOError,
    UnsupportedVersionError as UnsupportedVersionError,
    _Value,
)

__version__: str
__all__ = [
    "__version__",
    "Dataset",
    "DatasetIterator",
    "ShardWriter",
    "run_cli",
    "_pack",
    "_Engine",
    "_EngineIter",
    "_BatchBuffer",
    "_after_fork_in_child",
    "StokeholdError",
    "CorruptDataError",
    "UnsupportedVersionError",
    "LimitExceededError",
    "SchemaError",
    "StokeholdIOError",
    "SampleError",
    "ConfigError",
    "IncompatibleStateError",
]

def run_cli(argv: Sequence[str]) -> int:
    """Run the ``stokehold`` command line with ``argv`` (program name first) and return its exit
    status (0, 1 or 2). The GIL is released while it runs."""

def _pack(
    sources: Sequence[str],
    dest: str,
    kind: Optional[str] = None,
    *,
    fields: Optional[str] = None,
    overwrite: bool = False,
    shard_size: Optional[Union[int, str]] = None,
    align: int = 1,
    zstd_level: int = 3,
    threads: int = 0,
    strict: bool = False,
    max_skip_fraction: float = ...,
    max_pixels: int = ...,
    baseline: bool = False,
    max_side: Optional[int] = None,
    jpeg_quality: int = 90,
    restart_markers: bool = False,
    storage_options: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Pack ``sources`` (of ``kind``, or told from their names) into a new dataset at ``dest``,
    as ``stokehold pack`` does; returns the report (``samples``, ``shards``, ``input_bytes``,
    ``skipped``, ``notes``, ``classes``). The GIL is released while it runs."""

def _after_fork_in_child() -> None:
    """Called by ``os.register_at_fork(after_in_child=...)``: every loader running at the fork is
    unusable in the child."""

@final
class DatasetIterator:
    """The iterator of a :class:`Dataset`: every sample, in order."""

    def __iter__(self) -> "DatasetIterator": ...
    def __next__(self) -> Dict[str, _Value]: ...
    def __length_hint__(self) -> int: ...

@final
class _BatchBuffer:
    """The owner of a fixed column's memory: a numpy array's ``base``. Dropped (with the last
    array viewing it), it gives the buffer back to the loader's pool."""

    @property
    def nbytes(self) -> int:
        """Bytes held."""
    @property
    def address(self) -> int:
        """Address of the memory (the numpy arrays of this buffer view it in place)."""

@final
class _Engine:
    """The one loading engine of a ``stokehold.Loader`` or ``stokehold.SequenceLoader``."""

    def __new__(
        cls,
        dataset: Dataset,
        config: str,
        python_stages: Optional[List[Tuple[Any, Optional[str], str]]] = ...,
        include_ids: bool = ...,
    ) -> "_Engine": ...
    @property
    def config_json(self) -> str:
        """The loader's whole configuration as JSON (the ``EngineSpec``)."""
    @property
    def samples(self) -> int:
        """Samples per epoch over all ranks (records, windows or documents)."""
    @property
    def total_tokens(self) -> Optional[int]:
        """Tokens in a token dataset's stream (None for records)."""
    @property
    def documents(self) -> Optional[int]:
        """Documents in a token dataset (None for records)."""
    def iter(self) -> "_EngineIter":
        """Start (or continue) the current epoch; the returned iterator yields batch dicts. A run
        already in progress is stopped first (its iterator raises if used again)."""
    def __len__(self) -> int:
        """Batches per epoch for this rank."""
    @property
    def epoch(self) -> int:
        """The epoch the next iteration runs (or the one running)."""
    @property
    def running(self) -> bool:
        """True while an epoch is running (worker threads exist)."""
    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` at the next iteration. Stops a running epoch."""
    def state_json(self) -> str:
        """The resume state as JSON (after the batches delivered so far)."""
    def load_state_json(self, json: str) -> None:
        """Continue from a state saved by ``state_json``. Stops a running epoch."""
    def stats(self) -> Dict[str, Any]:
        """Statistics since the loader was made, as a dict."""
    def report(self) -> str:
        """The statistics as a readable table."""
    def trace_json(self) -> Optional[str]:
        """The stage spans kept so far as Chrome Trace Event JSON, or None when tracing is off."""
    def _drain(self) -> int:
        """Benchmark helper: run the rest of the current epoch in Rust, dropping each batch;
        returns the number of batches."""
    def close(self) -> None:
        """Stop a running epoch and join its worker threads (the position is kept)."""

@final
class _EngineIter:
    """The iterator of one run of an ``_Engine``."""

    def __iter__(self) -> "_EngineIter": ...
    def __next__(self) -> Dict[str, Any]: ...
    def __length_hint__(self) -> int:
        """Batches left in this epoch (0 once finished)."""
    def close(self) -> None:
        """Stop this run now (its worker threads are joined); the loader keeps its position."""
