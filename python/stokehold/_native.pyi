"""The ``stokehold._native`` extension module (typed interface).

The public classes are defined here at runtime but carry ``__module__ == "stokehold"`` and are
documented in the package stub (``__init__.pyi``); this stub re-exports them from there and types
the private parts used by ``_loader.py`` and ``_cli.py``.
"""

import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union, final

from typing_extensions import disjoint_base

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
DEFAULT_RESTART_MARKERS: bool
"""Whether packing rewrites JPEGs with restart markers unless told otherwise (``True``)."""
__all__ = [
    "_ChatTemplate",
    "__version__",
    "DEFAULT_RESTART_MARKERS",
    "Dataset",
    "FixedSize",
    "Qwen2VL",
    "VideoFile",
    "DatasetIterator",
    "ShardWriter",
    "PartWriter",
    "Tokenizer",
    "prepare_parts",
    "_arrow_field_types",
    "commit_parts",
    "abort_parts",
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
    restart_markers: bool = ...,
    storage_options: Optional[Mapping[str, Union[str, bool, int, float]]] = None,
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
        dataset: Union[Dataset, List[Dataset], None],
        config: str,
        python_stages: Optional[List[Tuple[Any, Optional[str], str]]] = ...,
        include_ids: bool = ...,
    ) -> "_Engine": ...
    def packing_json(self) -> Optional[str]: ...
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
    def iter(self, on_step: Optional[Callable[[Dict[str, Any]], Any]] = None, rank: int = 0) -> "_EngineIter":
        """Start (or continue) the current epoch; the returned iterator yields batch dicts. A run
        already in progress is stopped first (its iterator raises if used again). ``on_step``,
        when given, is called after each batch with its exposed wait (``last_wait``'s dict with
        ``rank``); its exceptions propagate."""
    def __len__(self) -> int:
        """Batches per epoch for this rank (packed conversations still being counted: an
        estimate, exact once the epoch is planned)."""
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
    def last_wait(self) -> Optional[Dict[str, Any]]:
        """The last batch's exposed wait (``epoch``, ``step``, ``wait``, ``step_time``,
        ``bound``), or None before the first batch."""
    def samples_at(
        self, step: int, rank: Optional[int] = None, epoch: Optional[int] = None, details: bool = False
    ) -> Tuple[List[int], List[bool], Optional[List[str]]]:
        """The sample ids of a step's batch on a rank, their padding flags, and with ``details``
        each one's description as JSON."""
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

@final
class _ChatTemplate:
    """The native half of :class:`stokehold.text.ChatTemplate` (chat templates rendered,
    tokenized and masked in Rust).

    :raises ConfigError: the tokenizer, its config or the template cannot be loaded, or a
        conversation cannot be encoded (the message names its index).
    """

    def __new__(
        cls,
        tokenizer: Union[str, "os.PathLike[str]"],
        template: Optional[str] = None,
        messages: str = "messages",
        loss_on: str = "assistant",
        add_generation_prompt: bool = False,
        template_kwargs: Optional[Dict[str, Any]] = None,
        completion: Optional[str] = None,
    ) -> "_ChatTemplate": ...
    def render(self, conversation: Any) -> str:
        """The rendered text of one conversation."""
    def encode(self, conversation: Any, expand: Optional[Tuple[int, List[int]]] = None) -> Tuple[Any, Any]:
        """``(input_ids int32, assistant_masks uint8)`` numpy arrays of one conversation."""
    def encode_batch(
        self, conversations: Any, threads: int = 0, expand: Optional[Tuple[int, List[List[int]]]] = None
    ) -> Tuple[Any, Any, Any]:
        """``(input_ids int32, assistant_masks uint8, offsets int64 [n + 1])`` of many
        conversations, encoded on native threads without the GIL."""
    @property
    def has_generation(self) -> bool: ...
    @property
    def template(self) -> str: ...
    @property
    def special_tokens(self) -> List[Tuple[str, str]]: ...
    def token_id(self, token: str) -> Optional[int]: ...


@final
class Qwen2VL:
    """Qwen2-VL's image processor (also Qwen2.5-VL's and Qwen3-VL's), natively (re-exported as
    ``stokehold.vision.Qwen2VL``): the smart resize to multiples of ``patch_size * merge_size``
    within ``[min_pixels, max_pixels]``, Pillow's bicubic resize, rescale and normalise, and the
    patches in the model's order.

    :raises ConfigError: parameters that cannot work (a size of 0, ``min_pixels > max_pixels``).
    """

    def __new__(
        cls,
        *,
        min_pixels: int = 3136,
        max_pixels: int = 1003520,
        patch_size: int = 14,
        merge_size: int = 2,
        temporal_patch_size: int = 2,
        image_mean: Optional[Sequence[float]] = None,
        image_std: Optional[Sequence[float]] = None,
        dct_scaling: bool = True,
    ) -> "Qwen2VL": ...
    def grid(self, width: int, height: int) -> Tuple[int, int, int]:
        """The grid ``(t, h, w)`` in patches of a ``width`` x ``height`` image (its size alone)."""
    def _spec(self) -> Dict[str, Any]: ...
    def __getnewargs_ex__(self) -> Tuple[Tuple[()], Dict[str, Any]]: ...
    def dimensions(self, data: bytes) -> Tuple[int, int]:
        """The ``(width, height)`` an encoded image declares (its header alone)."""
    def num_tokens(self, width: int, height: int) -> int:
        """The tokens such an image becomes in the language model (``t*h*w // merge_size**2``)."""
    def __call__(self, images: List[bytes], *, threads: int = 2) -> Tuple[Any, Any]:
        """``(pixel_values, image_grid_thw)`` of encoded images, float32 ``[patches, 3 *
        temporal_patch_size * patch_size**2]`` and int64 ``[images, 3]``."""

@final
class FixedSize:
    """The fixed-size processor of SigLIP/CLIP/LLaVA-style vision encoders, natively (re-exported
    as ``stokehold.vision.FixedSize``): each image resized to ``size`` x ``size`` with Pillow's
    bicubic (padded to a square of the colour ``pad`` first, as LLaVA's ``expand2square``),
    rescaled to [0, 1] and normalised with ``image_mean``/``image_std``, channels first.

    :raises ConfigError: a size of 0 or over 8192, a standard deviation that is not positive.
    """

    def __new__(
        cls,
        size: int,
        *,
        pad: Optional[Sequence[int]] = None,
        image_mean: Sequence[float] = ...,
        image_std: Sequence[float] = ...,
    ) -> "FixedSize": ...
    def _spec(self) -> Dict[str, Any]: ...
    def __getnewargs_ex__(self) -> Tuple[Tuple[int], Dict[str, Any]]: ...
    def __call__(self, images: List[bytes], *, threads: int = 2) -> Any:
        """float32 ``[images, 3, size, size]`` of encoded images, in their order."""

@final
class Tokenizer:
    """A Hugging Face ``tokenizer.json``, encoding as ``stokehold pack --tokenizer`` does (re-exported
    as ``stokehold.text.Tokenizer``): each text's ids without the tokenizer's own special tokens,
    ``bos`` before and ``eos`` after, as numpy arrays of the token dataset's width (``uint16``
    for vocabularies up to 65,536 entries, else ``uint32``). Pickles as "load the same file".

    :raises ConfigError: the file cannot be read or parsed, or ``bos``/``eos`` is not a token.
    """

    def __new__(
        cls,
        path: Union[str, "os.PathLike[str]"],
        *,
        bos: Optional[str] = None,
        eos: Optional[str] = None,
    ) -> "Tokenizer": ...
    def encode_batch(self, texts: List[str]) -> List[Any]:
        """The ids of each text (numpy arrays of :attr:`dtype`)."""
    def encode(self, text: str) -> Any:
        """The ids of one text (a numpy array of :attr:`dtype`)."""
    def meta(self, *, documents: int = 0, total_tokens: int = 0) -> Dict[str, Any]:
        """What a token dataset's manifest says of this tokenizer and its data (``source.tokens``):
        ``dtype``, ``vocab_size``, ``tokenizer``, ``tokenizer_fingerprint``, ``bos_id``,
        ``eos_id``, ``documents``, ``total_tokens`` (the counts 0 unless given)."""
    def source(
        self, text_field: str, *, documents: int, total_tokens: int, kind: str = "ray"
    ) -> Dict[str, Any]:
        """The manifest's ``source`` of a token dataset made with this tokenizer from the field
        ``text_field`` by ``kind`` (the keys ``stokehold pack --tokenizer`` writes)."""
    @property
    def path(self) -> str:
        """The ``tokenizer.json`` it was loaded from."""
    @property
    def dtype(self) -> str:
        """``"uint16"`` or ``"uint32"``."""
    def __reduce__(self) -> Tuple[Any, ...]: ...

@final
class PartWriter:
    """One write task's writer of a dataset written by many (``stokehold.ray.Datasink``):
    shards named ``shard-<run>-<task>-<k>.skh`` written straight into ``path`` (a directory made
    by :func:`prepare_parts`, or an object-storage URL); no manifest (:func:`commit_parts` writes
    it). A writer aborted or dropped unfinished removes the shards it wrote. With
    ``restart_markers=True`` every JPEG in an image field is rewritten losslessly with restart
    markers as ``stokehold pack`` does (one it refuses is kept as given, counted in
    :attr:`kept_as_is`); the default is pack's, :data:`DEFAULT_RESTART_MARKERS`.

    :raises SchemaError: the schema, an option or the run tag is invalid.
    """

    def __new__(
        cls,
        path: Union[str, "os.PathLike[str]"],
        schema: Any,
        *,
        run: str,
        task: int,
        shard_size: int = 256 * 2**20,
        align: int = 1,
        zstd_level: int = 3,
        storage_options: Optional[Mapping[str, Union[str, bool, int, float]]] = None,
        restart_markers: bool = ...,
    ) -> "PartWriter": ...
    @property
    def kept_as_is(self) -> int:
        """JPEGs stored as given so far because the restart-marker rewrite refused them."""
    def write(self, sample: Dict[str, Any]) -> int:
        """Append one sample (a dict with exactly the schema's fields); returns its index."""
    def write_columns(self, columns: Dict[str, Sequence[Any]]) -> int:
        """Append the rows of a batch (field -> sequence, every field, equal lengths); returns
        the number of rows."""
    def finish(self) -> List[Dict[str, Any]]:
        """Close the last shard; returns the shards written, in order (``file``, ``records``,
        ``bytes``, ``crc32c``)."""
    def abort(self) -> None:
        """Remove the shards written. Does nothing on a finished writer."""
    def __len__(self) -> int:
        """Samples written (0 once finished)."""

def _arrow_field_types(schema: Any) -> List[Tuple[str, Optional[str], str]]:
    """Each column of an Arrow schema (anything with ``__arrow_c_schema__``) as ``(name, type
    spec or None, Arrow type)``, by the mapping ``stokehold pack`` uses for Parquet."""

def prepare_parts(
    path: Union[str, "os.PathLike[str]"], storage_options: Optional[Mapping[str, Union[str, bool, int, float]]] = None
) -> str:
    """Start a job writing the dataset at ``path`` with many :class:`PartWriter`: check the
    destination (no dataset, nothing a dataset writer does not write), remove a dead job's
    leftovers, make the directory; returns the job's run tag."""

def commit_parts(
    path: Union[str, "os.PathLike[str]"],
    schema: Any,
    shards: List[Dict[str, Any]],
    *,
    run: str,
    align: int = 1,
    classes: Optional[List[str]] = None,
    source: Optional[str] = None,
    files: Optional[Dict[str, bytes]] = None,
    storage_options: Optional[Mapping[str, Union[str, bool, int, float]]] = None,
) -> Dict[str, Any]:
    """Commit the dataset at ``path``: check each listed shard (it exists; trailer, size,
    schema and alignment agree with its entry), remove the run's unlisted files, write the extra
    ``files`` and then the manifest (the commit point). ``source`` is the manifest's ``source``
    as JSON. Returns the manifest."""

def abort_parts(
    path: Union[str, "os.PathLike[str]"],
    run: str,
    storage_options: Optional[Mapping[str, Union[str, bool, int, float]]] = None,
) -> int:
    """Remove every shard of run ``run`` at ``path`` (unless a manifest was committed); returns
    how many."""


@disjoint_base
class VideoFile:
    """An MP4, Matroska or WebM file's frame index and a decoder for its frames (``stokehold.video.VideoFile``)."""

    def __new__(cls, path: Union[str, os.PathLike[str]], *, threads: int = 1) -> "VideoFile": ...
    def __len__(self) -> int: ...
    @property
    def codec(self) -> str: ...
    @property
    def size(self) -> Tuple[int, int]: ...
    @property
    def pts_seconds(self) -> Any: ...
    @property
    def keyframes(self) -> Any: ...
    @property
    def packet_sizes(self) -> Any: ...
    @property
    def begin_seconds(self) -> float: ...
    @property
    def end_seconds(self) -> float: ...
    def frame_played_at(self, seconds: float) -> int: ...
    def frames_played_at(self, seconds: Sequence[float]) -> Tuple[Any, Any]: ...
    def frames_at(self, indices: Sequence[int]) -> Tuple[Any, Any]: ...
    def _clip_timestamps(
        self,
        frames: int,
        stride: Optional[int],
        fps: Optional[float],
        start: str,
        clips: int,
        seed: int,
        sample: int,
    ) -> List[List[float]]: ...
