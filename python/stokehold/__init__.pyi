"""stokehold: a data loading engine for ML training (typed interface of the public package)."""

import os
from types import TracebackType
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Type, Union, final

import numpy as np

__version__: str
__all__ = [
    "ConfigError",
    "CorruptDataError",
    "Dataset",
    "IncompatibleStateError",
    "LimitExceededError",
    "Loader",
    "Mixture",
    "SampleError",
    "SchemaError",
    "SequenceLoader",
    "ShardWriter",
    "StokeholdError",
    "StokeholdIOError",
    "UnsupportedVersionError",
    "__version__",
    "default_rank_world_size",
    "from_hf",
    "image",
    "lerobot",
    "text",
    "video",
    "vision",
    "transforms",
]

from . import image as image, lerobot as lerobot, text as text, transforms as transforms, video as video, vision as vision

#: A field value as returned by :meth:`Dataset.__getitem__`: ``bytes`` for bytes and image
#: fields, ``str``, ``int``, ``float``, or a numpy array for ndarray fields.
_Value = Union[bytes, str, int, float, np.ndarray]
#: A schema: field name -> type spec (``"image:jpeg"``, ``"int64"``, ``"string+zstd"``,
#: ``"ndarray:f32"``, ...), in field order; or a list of (name, spec) pairs.
_SchemaSpec = Union[Mapping[str, str], Iterable[Tuple[str, str]]]

@final
class Dataset:
    """A dataset opened for reading: a directory ``stokehold pack`` made, or TFRecord files,
    WebDataset tars or Parquet files read in place.

    ``len(ds)`` samples; ``ds[i]`` (negative ``i`` counts from the end) is a dict field name ->
    value; iterating yields every sample in order. File reads and decoding release the GIL.
    Pickles as "reopen the same path with the same options", so it can be sent to spawn-based
    worker processes.

    :param path: the dataset directory (holding ``manifest.json`` and the shards); or, to read
        in place without packing, a TFRecord file (``*.tfrecord``, ``*.tfrecords`` or an
        extension-less ``train-00000-of-01024``), a WebDataset tar, a directory of them, a glob
        (``"data/train-*"``) or a list of paths. Each file is indexed once (its records' offsets, kept in
        ``index_dir`` and reused while the file is unchanged); samples
        are those ``stokehold pack --no-restart-markers`` of the same files would hold, in the
        same order. See docs/storage.md, "Files in place".
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
        override the environment (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ...). Values are
        str, bool (``{"anon": True}``) or numbers. See docs/storage.md, "Remote storage".
    :param format: for files read in place, ``"tfrecord"``, ``"webdataset"`` or ``"parquet"``
        when neither the names nor the first bytes say which.
    :param fields: for files read in place, the fields to load, as ``stokehold pack --fields``
        takes them: TFRecord feature names, tar member extensions or Parquet columns, ``"txt?"``
        for one a sample may lack (a string or a list). Default: every field the first files'
        records share.
    :param index_dir: where the record indexes of files read in place are kept (default:
        ``$STOKEHOLD_INDEX_DIR``, else ``~/.cache/stokehold/index``).
    :param index_beside: keep each index next to its file instead (``FILE.skhidx``).
    :param rebuild_index: scan every file again, ignoring the indexes kept before.
    :raises StokeholdIOError: the directory or a file cannot be read (``errno`` set).
    :raises CorruptDataError: a shard is truncated or damaged, or the manifest is invalid or
        disagrees with a shard.
    :raises UnsupportedVersionError: written by a newer format version.
    :raises ConfigError: files to read in place that cannot be used as given (in two
        directories, of mixed formats, gzip-compressed, or a ``fields`` choice no sample fits).
    """

    def __new__(
        cls,
        path: Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]],
        *,
        access: Optional[str] = None,
        mmap: bool = False,
        in_memory: bool = False,
        verify: bool = True,
        storage_options: Optional[Mapping[str, Union[str, bool, int, float]]] = None,
        format: Optional[str] = None,
        fields: Optional[Union[str, Sequence[str]]] = None,
        index_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        index_beside: bool = False,
        rebuild_index: bool = False,
    ) -> "Dataset": ...
    @property
    def in_place(self) -> Optional[str]:
        """The format of files read in place (``"tfrecord"``, ``"webdataset"``, ``"parquet"``), or None for a
        packed dataset."""
    @property
    def access(self) -> str:
        """How the shards are read (after the automatic choice): ``"pread"``, ``"mmap"``,
        ``"direct"`` or ``"memory"``; ``"remote"`` for ranged GETs from object storage."""
    def __len__(self) -> int:
        """The number of samples."""
    def __getitem__(self, i: int, /) -> Dict[str, _Value]:
        """Sample ``i`` as a dict field name -> value, in schema order: ``bytes`` for bytes and
        image fields, ``str`` for string and json (the JSON text), a ``list`` of those for list fields, ``int`` for int64, ``float`` for float64, and a new
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
    def image_sizes(self, i: int, field: str = "images") -> Optional[List[Tuple[int, int]]]:
        """``(width, height)`` of each image of sample ``i``'s list of images ``field``, kept in
        the shards' meta blocks when written (read from each image's header): nothing is read
        or decoded. None where the files keep no sizes (files read in place).

        :raises SchemaError: ``field`` is not a list of images.
        """
    @property
    def classes(self) -> Optional[List[str]]:
        """Class names by integer label, or None when the dataset has none."""
    @property
    def manifest(self) -> Dict[str, Any]:
        """The parsed ``manifest.json``: format, version, schema, shards, total_records, ..."""
    def record_bytes(self, i: int) -> bytes:
        """Sample ``i``'s stored record bytes (checksum checked when opened with ``verify``)."""
    def _arrow_batch(self, lo: int, hi: int) -> Tuple[Any, Any]:
        """Records ``[lo, hi)`` as one Arrow record batch built in Rust: the ``(schema, array)``
        PyCapsules of the Arrow C data interface (for ``stokehold.ray.read``)."""
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
        pairs). Specs: ``bytes``, ``string``, ``json``, ``int64``, ``float64``,
        ``ndarray:{u8,i32,i64,f16,f32,f64}``, ``image:{jpeg,png,webp,auto}``; non-image fields
        may add ``+zstd``.
    :param shard_size: a shard is closed once it holds at least this many bytes.
    :param align: every record starts at a multiple of this (a power of two up to 1 MiB).
    :param zstd_level: the zstd level of ``+zstd`` fields.
    :param overwrite: replace an existing dataset at ``path`` (only once the new one is complete).
    :param classes: class names by integer label, stored in the manifest.
    :param storage_options: for a URL, options of the object store, as for :class:`Dataset`
        (plus ``upload_part_bytes``, default 8 MiB); credentials otherwise from the environment.
    :param restart_markers: rewrite every JPEG (in an image field or a list of images)
        losslessly as ``stokehold pack`` does by default: baseline with restart markers, the
        same pixels; progressive photographs then decode ~3x faster and crops read only their
        rows. Off by default: the bytes are stored as given. A JPEG the rewrite refuses is
        stored as given and counted in :attr:`kept_as_is`.
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
        storage_options: Optional[Mapping[str, Union[str, bool, int, float]]] = None,
        restart_markers: bool = False,
    ) -> "ShardWriter": ...
    @property
    def kept_as_is(self) -> int:
        """With ``restart_markers=True``, the JPEGs stored as given so far because the lossless
        rewrite refused them; 0 otherwise."""
    def write(self, sample: Dict[str, Any]) -> int:
        """Append one sample, a dict with exactly the schema's fields; returns its index.

        Values by field type: bytes, bytearray or memoryview for bytes and image fields; str for
        string; for json, a value ``json.dumps`` takes (a list, a dict, ...) or a str of JSON
        text (checked, stored canonical: compact, keys in order); int for int64; float (or int) for float64; a numpy array of exactly the field's
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
    have, or an unknown transform stage; or files to read in place that cannot be used as given."""

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

# The loaders are Python classes: their typed source is their stub (one copy of their
# documentation, which help() shows at run time too).
from ._hf import from_hf as from_hf
from ._loader import Loader as Loader, default_rank_world_size as default_rank_world_size
from ._mixture import Mixture as Mixture
from ._sequence import SequenceLoader as SequenceLoader
