"""stokehold: a data loading engine for ML training (typed interface of the public package)."""

import os
from types import TracebackType
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Type, Union, final

import numpy as np

__version__: str
__all__ = [
    "ConfigError",
    "CorruptDataError",
    "Dataset",
    "IncompatibleStateError",
    "LimitExceededError",
    "Loader",
    "SampleError",
    "SchemaError",
    "SequenceLoader",
    "ShardWriter",
    "StokeholdError",
    "StokeholdIOError",
    "UnsupportedVersionError",
    "__version__",
    "default_rank_world_size",
    "image",
    "text",
    "transforms",
]

from . import image as image, text as text, transforms as transforms

#: A field value as returned by :meth:`Dataset.__getitem__`: ``bytes`` for bytes and image
#: fields, ``str``, ``int``, ``float``, or a numpy array for ndarray fields.
_Value = Union[bytes, str, int, float, np.ndarray]
#: A schema: field name -> type spec (``"image:jpeg"``, ``"int64"``, ``"string+zstd"``,
#: ``"ndarray:f32"``, ...), in field order; or a list of (name, spec) pairs.
_SchemaSpec = Union[Mapping[str, str], Iterable[Tuple[str, str]]]

@final
class Dataset:
    """A dataset directory opened for reading.

    ``len(ds)`` samples; ``ds[i]`` (negative ``i`` counts from the end) is a dict field name ->
    value; iterating yields every sample in order. File reads and decoding release the GIL.
    Pickles as "reopen the same path with the same options", so it can be sent to spawn-based
    worker processes.

    :param path: the dataset directory (holding ``manifest.json`` and the shards).
    :param access: how shards are read: ``"auto"`` (default: positional reads through the page
        cache, or direct I/O when the dataset is larger than half the RAM), ``"pread"``,
        ``"mmap"`` (the files must not change while open), ``"direct"`` (``O_DIRECT``, bypassing
        the page cache) or ``"memory"`` (every shard read into memory at open).
    :param mmap: shorthand for ``access="mmap"``.
    :param in_memory: shorthand for ``access="memory"``; takes precedence over ``mmap``.
    :param verify: check each record's CRC-32C when it is read.
    :param storage_options: for a dataset in object storage (``path`` a URL such as
        ``"s3://bucket/prefix"``): credentials, endpoint, region, ``retries``, named as fsspec
        users know them (``key``, ``secret``, ``token``, ``endpoint_url``, ``region_name``,
        ``anon``) or as object_store names them (``allow_http``, ``aws_region``, ...); they
        override the environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...). See
        docs/storage.md, "Remote storage".
    :raises StokeholdIOError: the directory or a file cannot be read (``errno`` set).
    :raises CorruptDataError: a shard is truncated or damaged, or the manifest is invalid or
        disagrees with a shard.
    :raises UnsupportedVersionError: written by a newer format version.
    """

    def __new__(
        cls,
        path: Union[str, "os.PathLike[str]"],
        *,
        access: Optional[str] = None,
        mmap: bool = False,
        in_memory: bool = False,
        verify: bool = True,
        storage_options: Optional[Dict[str, str]] = None,
    ) -> "Dataset": ...
    @property
    def access(self) -> str:
        """How the shards are read (after the automatic choice): ``"pread"``, ``"mmap"``,
        ``"direct"`` or ``"memory"``; ``"remote"`` for ranged GETs from object storage."""
    def __len__(self) -> int:
        """The number of samples."""
    def __getitem__(self, i: int, /) -> Dict[str, _Value]:
        """Sample ``i`` as a dict field name -> value, in schema order: ``bytes`` for bytes and
        image fields, ``str`` for string, ``int`` for int64, ``float`` for float64, and a new
        numpy array (dtype uint8, int32, int64, float16, float32 or float64, with the stored
        shape) for ndarray fields.

        :raises IndexError: ``i`` is out of range.
        :raises CorruptDataError: the record is damaged (the message names the shard file, the
            record, the global sample index and the byte range).
        """
    def __iter__(self) -> Iterator[Dict[str, _Value]]:
        """Every sample, in order."""
    @property
    def path(self) -> str:
        """The path the dataset was opened from, as given."""
    @property
    def schema(self) -> Dict[str, str]:
        """Field name -> type spec, in field order, e.g. ``{"image": "image:jpeg", "label":
        "int64"}``."""
    @property
    def classes(self) -> Optional[List[str]]:
        """Class names by integer label, or None when the dataset has none."""
    @property
    def manifest(self) -> Dict[str, Any]:
        """The parsed ``manifest.json``: format, version, schema, shards, total_records, ..."""
    def record_bytes(self, i: int) -> bytes:
        """Sample ``i``'s stored record bytes (checksum checked when opened with ``verify``)."""
    def __repr__(self) -> str: ...
    def __getnewargs_ex__(self) -> Tuple[Tuple[str], Dict[str, bool]]: ...
    def __reduce__(self) -> Tuple[Any, ...]: ...

@final
class ShardWriter:
    """Writes a new dataset directory at ``path``, atomically.

    Everything is staged in a hidden ``.NAME.partial-PID`` directory beside ``path`` and
    published with one rename by :meth:`close`; :meth:`abort` (or leaving a ``with`` block with
    an exception) removes it, so nothing that looks like a dataset is left behind.

    ``path`` may be an object-storage URL (``s3://bucket/prefix``, ``gs://...``, ``az://...``):
    shards are uploaded as they close (multipart), the manifest last, so the dataset exists only
    once :meth:`close` returns; :meth:`abort` aborts the upload and deletes what was uploaded.

    :param path: the destination; it must not exist (or be an empty directory) unless
        ``overwrite``.
    :param schema: field name -> type spec, in field order (a dict, or a list of (name, spec)
        pairs). Specs: ``bytes``, ``string``, ``int64``, ``float64``,
        ``ndarray:{u8,i32,i64,f16,f32,f64}``, ``image:{jpeg,png,webp,auto}``; non-image fields
        may add ``+zstd``.
    :param shard_size: a shard is closed once it holds at least this many bytes.
    :param align: every record starts at a multiple of this (a power of two up to 1 MiB).
    :param zstd_level: the zstd level of ``+zstd`` fields.
    :param overwrite: replace an existing dataset at ``path`` (only once the new one is complete).
    :param classes: class names by integer label, stored in the manifest.
    :param storage_options: for a URL, options of the object store, as for :class:`Dataset`
        (plus ``upload_part_bytes``, default 8 MiB); credentials otherwise from the environment.
    :raises SchemaError: the schema or an option is invalid.
    :raises StokeholdIOError: ``path`` exists (``errno`` EEXIST) or cannot be written.
    """

    def __new__(
        cls,
        path: Union[str, "os.PathLike[str]"],
        schema: _SchemaSpec,
        *,
        shard_size: int = 256 * 2**20,
        align: int = 1,
        zstd_level: int = 3,
        overwrite: bool = False,
        classes: Optional[List[str]] = None,
        storage_options: Optional[Dict[str, str]] = None,
    ) -> "ShardWriter": ...
    def write(self, sample: Dict[str, Any]) -> int:
        """Append one sample, a dict with exactly the schema's fields; returns its index.

        Values by field type: bytes, bytearray or memoryview for bytes and image fields; str for
        string; int for int64; float (or int) for float64; a numpy array of exactly the field's
        dtype for ndarray fields (any strides: it is stored in C order).

        :raises SchemaError: a field is missing or unknown, or a value does not fit its field
            (the message names the field); nothing was written.
        :raises StokeholdError: the writer is closed.
        """
    def close(self) -> Dict[str, Any]:
        """Finish: close the last shard, write the manifest and publish the dataset at ``path``.
        Returns the manifest.

        :raises StokeholdError: the writer is already closed.
        """
    def abort(self) -> None:
        """Give up and remove everything written so far. Does nothing on a closed writer."""
    @property
    def closed(self) -> bool:
        """True once closed or aborted."""
    @property
    def path(self) -> str:
        """The destination directory."""
    def __len__(self) -> int:
        """The number of samples written."""
    def __enter__(self) -> "ShardWriter": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool:
        """Close when the block ends normally; abort when an exception propagates."""

class StokeholdError(Exception):
    """Root of every error raised by stokehold."""

class CorruptDataError(StokeholdError):
    """Stored data is damaged: a checksum mismatch, a truncated or corrupt shard, bad magic
    bytes, or an invalid or inconsistent manifest. The message names the file and, where there
    is one, the record, the global sample index and the byte range."""

class UnsupportedVersionError(StokeholdError):
    """A shard or manifest written in a format version this build cannot read."""

class LimitExceededError(StokeholdError):
    """A size, count or length read from a file is over a configured limit."""

class SchemaError(StokeholdError, ValueError):
    """An invalid schema, or a sample that does not fit it (the message names the field)."""

class StokeholdIOError(StokeholdError, OSError):
    """An operating-system error while reading or writing a dataset (``errno`` set when the
    system gave one), or a write destination that already exists (``errno`` EEXIST)."""

class SampleError(StokeholdError):
    """A loader stage (a transform or a Python callable) failed on one sample, or panicked (the
    panic was caught at the sample boundary). The message names the stage and the column."""

    sample_id: int
    """The global id of the sample."""

class ConfigError(StokeholdError, ValueError):
    """An invalid loader configuration: a bad option, a transform for a field the dataset does not
    have, or an unknown transform stage."""

class IncompatibleStateError(StokeholdError, ValueError):
    """A resume state that does not belong to this loader (another dataset, seed, shuffle mode or
    version, or a position past the end), or not a state at all."""

    field: Optional[str]
    """The field that differs (``"version"``, ``"dataset"``, ``"seed"``, ``"shuffle"``,
    ``"position"``), or None when the state could not be parsed."""

#: A batch: field name -> numpy array (fixed columns: int64/float64 fields, fixed tensors) or
#: list (bytes, strings, varying arrays, Python-stage results); with ``include_ids``, ``"id"``
#: (int64) and ``"is_padding"`` (bool). With ``to="torch"`` / ``"jax"`` arrays are tensors.
_Batch = Dict[str, Any]

def default_rank_world_size() -> Tuple[int, int]:
    """This process's (rank, world size): from ``torch.distributed`` when it is initialised, else
    the ``RANK`` / ``WORLD_SIZE`` environment variables, else (0, 1). Never imports torch."""

class Loader:
    """An iterable of batches over a :class:`Dataset`, read, transformed and collated on native
    threads, in an order that is a pure function of (dataset, seed, epoch, rank, world size).

    Iterating runs the current epoch (continuing from the current position); when an epoch ends
    the loader moves to the next one, so ``for batch in loader`` in an outer loop walks the
    epochs. One iteration runs at a time: a new ``iter(loader)`` stops the previous one (which
    then raises if used) and continues from the last batch delivered.

    Fixed columns are numpy arrays over the batch's own memory (no copy; the memory is returned
    to the loader's pool when Python drops the array). Blocking waits release the GIL; Ctrl-C
    raises ``KeyboardInterrupt`` within about 100 ms and stops the worker threads.

    :param dataset: a :class:`Dataset` or a dataset path.
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
        ``stats()["skipped"]``; fails past 5% of the epoch or 64 in a row).
    :param include_ids: add ``batch["id"]`` (int64 global sample ids) and ``batch["is_padding"]``.
    :param to: ``"numpy"``, ``"torch"`` (``torch.from_numpy``, no copy) or ``"jax"`` (DLPack
        where jax accepts the buffer, else a copy).
    :param pin_memory: with ``to="torch"`` and CUDA, put tensors in page-locked memory (a copy)
        for ``.cuda(non_blocking=True)``; ignored without CUDA.
    :param memory_budget: bytes (an int or a string like ``"512MiB"``) the batches prepared ahead may take with ``prefetch="auto"``
        (default: 10% of physical memory, at most 2 GiB): the depth stays at or below the budget
        over the bytes of one batch (at least 1).
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
    :param cache_dir: a local directory caching the shard files of a dataset on slow storage (a
        network filesystem): shards are copied there in the background (atomically, checked,
        shared safely by several processes) and read from there once copied.
    :param cache_dir_limit: its size limit (``"auto"``: the dataset's size); entries of other
        datasets are evicted, least recently used first, to make room.
    :raises ConfigError: an invalid option, field or stage, or ``drop_last=True`` with a step
        larger than the dataset.
    :raises TypeError: a stage that is not a stage.
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
        memory_budget: Union[None, int, str] = None,
        profile: bool = True,
        trace: Union[None, str, "os.PathLike[str]"] = None,
        cache: Union[bool, int, str] = False,
        decoded_cache: Optional[int] = None,
        decoded_cache_budget: Union[int, str] = "auto",
        decoded_cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        decoded_cache_dir_limit: Union[int, str] = "auto",
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        cache_dir_limit: Union[int, str] = "auto",
    ) -> None: ...
    def __iter__(self) -> Iterator[_Batch]:
        """Run (the rest of) the current epoch.

        :raises CorruptDataError: a damaged record (``.sample_id`` set), or too many under
            ``on_error="skip"``.
        :raises SampleError: a stage failed on a sample (``.sample_id`` set).
        :raises StokeholdError: the loader was running when the process forked (in the child), or
            the iterator was superseded by a newer one.
        """
    def __len__(self) -> int:
        """Batches per epoch for this rank."""
    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` (an int >= 0) at the next iteration, from its beginning (a resumed position
        is kept when ``epoch`` is already the current epoch). Stops a running iteration."""
    @property
    def epoch(self) -> int:
        """The epoch the next (or the running) iteration belongs to."""
    @property
    def dataset(self) -> Dataset:
        """The dataset."""
    @property
    def batch_size(self) -> int:
        """Samples per batch."""
    @property
    def rank(self) -> int:
        """This process's rank."""
    @property
    def world_size(self) -> int:
        """Number of ranks."""
    @property
    def config(self) -> Dict[str, Any]:
        """The whole configuration the native engine runs, as plain data (an ``EngineSpec``: the
        loader's options, what a sample is, the disk cache); ``repr(loader)`` shows it, and
        ``stokehold bench --config FILE`` runs it."""
    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is, after the batches delivered so far: a small JSON-serialisable dict
        (``version``, ``dataset`` fingerprint, ``seed``, ``shuffle``, ``epoch``, ``position``).
        The position is global, so any rank's state resumes any number of ranks."""
    def load_state_dict(self, state: Union[Mapping[str, Any], str]) -> None:
        """Continue from a saved state (a dict or its JSON). Stops a running iteration.

        :raises IncompatibleStateError: the state is of another dataset, seed, order or version
            (``.field`` names it).
        :raises TypeError: ``state`` is neither a dict nor a str (``None``, say).
        """
    def stats(self) -> Dict[str, Any]:
        """Statistics since the loader was made: ``stages`` (a list of dicts with ``name``,
        ``items``, ``busy`` seconds summed over threads, ``share`` of the busy time, and ``p50``/``p99``
        seconds per item),
        ``batches``, ``samples``, ``consumer_wait`` (seconds the training loop waited for data),
        ``worker_wait``, ``mean_queue``, ``skipped`` (sample ids), ``threads``, ``active_threads``,
        ``prefetch`` (the depth now), ``bytes_read`` and ``records_read`` (what the pipeline took
        from storage), ``profiled`` (whether stages were timed) and ``caches`` (``"records"``,
        ``"decoded"``, ``"decoded-disk"``, ``"disk"`` -> ``hits``, ``misses``, ``bytes``, ``budget``, ``entries``,
        ``saved`` seconds of worker time) and ``storage`` (``None`` for a local dataset; from object
        storage: ``requests``, ``http_requests``, ``retries``, ``failures``, ``short_bodies``,
        ``bytes``, and ``prefetch`` -> ``requests``, ``bytes``, ``hits``, ``misses``,
        ``wasted_bytes``, ``refused``: the ranges fetched ahead of the reads)."""
    def report(self) -> str:
        """The statistics as a readable table (``print(loader.report())``)."""
    def export_trace(self, path: Union[None, str, "os.PathLike[str]"] = None) -> str:
        """Write the stage spans kept so far as Chrome Trace Event JSON to ``path`` (default: the
        ``trace`` path); returns the path.

        :raises ConfigError: the loader was made without ``trace``, or no path is known.
        """
    def close(self) -> None:
        """Stop a running iteration and join its worker threads (the position is kept); with
        ``trace``, write the trace."""
    def __enter__(self) -> "Loader": ...
    def __exit__(self, *exc: Any) -> None:
        """:meth:`close`."""
    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickles as its configuration and state: unpickling makes a new, idle loader that
        continues from the same position (for spawn-based worker processes). Transforms must be
        picklable (module-level functions)."""

class SequenceLoader:
    """Batches of token sequences from a token dataset (``stokehold pack --tokenizer``), made on
    native threads, in an order that is a pure function of (dataset, seed, epoch, rank, world
    size, configuration); resumable to the exact token on any number of ranks.

    **Packed** (default): the documents form one token stream; each sample is a window of
    ``seq_len + 1`` tokens starting at a multiple of ``seq_len``, giving ``input_ids`` and
    ``labels`` (the next tokens), each ``[batch_size, seq_len]``; windows are shuffled per epoch.
    **Documents** (``max_len`` given): one document per sample, truncated to ``max_len + 1``
    tokens and padded to the longest in the batch: ``input_ids`` (``pad_id``), ``labels`` (-100
    where padded) and ``attention_mask`` (1/0).

    :param dataset: a token :class:`Dataset` or its path.
    :param seq_len: tokens per packed sample.
    :param batch_size: samples per batch, per rank.
    :param shuffle: shuffle the windows (or documents) every epoch.
    :param seed: seed of the order (an int from 0 to 2**64 - 1).
    :param rank: this process's rank; with ``world_size``. Default:
        :func:`default_rank_world_size`.
    :param world_size: number of ranks.
    :param dtype: ``"int32"`` or ``"int64"`` output.
    :param position_ids: add ``position_ids``: 0 at the window start and at every document start
        inside it (documents mode: 0, 1, ... within the document).
    :param segment_ids: add ``segment_ids`` (packed): the index within the window of each input
        token's document, for cross-document attention masking.
    :param drop_last: drop the end of the epoch that does not fill a step of all ranks; ``False``
        pads it with repeats. A step (``batch_size`` x ``world_size``) larger than the epoch's
        windows (or documents) is refused with ``drop_last=True``, as an epoch would have no
        batches.
    :param max_len: documents mode: longest sample (input tokens).
    :param pad_id: documents mode: the input id of padding.
    :param bucket: documents mode: sort runs of this many epoch positions by length (length
        bucketing; 1 = off).
    :param threads: ``"auto"`` (default): up to one thread per core, fewer while the training
        step is the slower side; an int fixes the count (0: one per core), as in :class:`Loader`.
    :param prefetch: ``"auto"`` (default): batches prepared ahead start at 4 and deepen within
        the memory budget; an int fixes the depth.
    :param include_ids: add ``batch["id"]`` (window or document indices) and ``batch["is_padding"]``.
    :param to: ``"numpy"``, ``"torch"`` or ``"jax"``.
    :param on_error: ``"fail"`` (default) or ``"skip"``: a damaged window or document is replaced by
        another of its batch, flagged as padding, counted in ``stats()["skipped"]`` (at most 5% of
        the epoch).
    :param cache_dir: read the shards through a local copy in this directory (for slow or network
        filesystems).
    :param cache: keep whole shards in RAM once read (``True``: up to half of physical memory; a
        byte count such as ``"8GiB"``); windows are then slices of memory, no reads.
    :raises ConfigError: not a token dataset, an invalid option, or ``drop_last=True`` with a
        step larger than the epoch.
    """

    def __init__(
        self,
        dataset: Union[Dataset, str, "os.PathLike[str]"],
        seq_len: int = 2048,
        batch_size: int = 32,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        dtype: str = "int32",
        position_ids: bool = False,
        segment_ids: bool = False,
        drop_last: bool = True,
        max_len: Optional[int] = None,
        pad_id: int = 0,
        bucket: int = 1,
        threads: Union[int, str] = "auto",
        prefetch: Union[int, str] = "auto",
        include_ids: bool = False,
        to: str = "numpy",
        on_error: str = "fail",
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        cache: Union[bool, int, str] = False,
    ) -> None: ...
    def __iter__(self) -> Iterator[_Batch]:
        """Run (the rest of) the current epoch.

        :raises CorruptDataError: a damaged token record (the message names shard and record).
        """
    def __len__(self) -> int:
        """Batches per epoch for this rank."""
    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` (an int >= 0) at the next iteration, from its beginning (a resumed position
        is kept when ``epoch`` is already the current epoch). Stops a running iteration."""
    @property
    def epoch(self) -> int:
        """The epoch the next (or the running) iteration belongs to."""
    @property
    def dataset(self) -> Dataset:
        """The dataset."""
    @property
    def total_tokens(self) -> int:
        """Tokens in the dataset."""
    @property
    def documents(self) -> int:
        """Documents in the dataset."""
    @property
    def samples(self) -> int:
        """Windows (or documents) per epoch over all ranks."""
    @property
    def rank(self) -> int:
        """This process's rank."""
    @property
    def world_size(self) -> int:
        """Number of ranks."""
    @property
    def config(self) -> Dict[str, Any]:
        """The whole configuration the native engine runs, as plain data (an ``EngineSpec``: the
        loader's options, what a sample is, the disk cache); ``repr(loader)`` shows it, and
        ``stokehold bench --config FILE`` runs it."""
    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is, after the batches delivered so far (a global position in windows,
        exact to the token; any rank's state resumes any number of ranks)."""
    def load_state_dict(self, state: Union[Mapping[str, Any], str]) -> None:
        """Continue from a saved state (a dict or its JSON). Stops a running iteration.

        :raises IncompatibleStateError: the state is of another dataset, ``seq_len``/``max_len``,
            seed or order.
        :raises TypeError: ``state`` is neither a dict nor a str (``None``, say).
        """
    def stats(self) -> Dict[str, Any]:
        """Statistics since the loader was made: ``stages`` (a list of dicts with ``name``,
        ``items``, ``busy`` seconds summed over threads, ``share`` of the busy time, and ``p50``/``p99``
        seconds per item),
        ``batches``, ``samples``, ``consumer_wait`` (seconds the training loop waited for data),
        ``worker_wait``, ``mean_queue``, ``skipped`` (sample ids), ``threads``, ``active_threads``,
        ``prefetch`` (the depth now), ``bytes_read`` and ``records_read`` (what the pipeline took
        from storage), ``profiled`` (whether stages were timed) and ``caches`` (``"records"``,
        ``"decoded"``, ``"decoded-disk"``, ``"disk"`` -> ``hits``, ``misses``, ``bytes``, ``budget``, ``entries``,
        ``saved`` seconds of worker time) and ``storage`` (``None`` for a local dataset; from object
        storage: ``requests``, ``http_requests``, ``retries``, ``failures``, ``short_bodies``,
        ``bytes``, and ``prefetch`` -> ``requests``, ``bytes``, ``hits``, ``misses``,
        ``wasted_bytes``, ``refused``: the ranges fetched ahead of the reads)."""
    def close(self) -> None:
        """Stop a running iteration and join its worker threads (the position is kept)."""
    def __enter__(self) -> "SequenceLoader": ...
    def __exit__(self, *exc: Any) -> None:
        """:meth:`close`."""
    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickles as its configuration and state."""
