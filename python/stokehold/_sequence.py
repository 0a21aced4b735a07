"""stokehold.SequenceLoader: packed (or per-document) token batches for language-model training,
over a token dataset made by ``stokehold pack --tokenizer``. The same native engine as
:class:`stokehold.Loader` (``_native._Engine``), with token samples instead of records."""

import json
import os
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Union

import numpy as np

from . import _options
from ._loader import _U32, _converted, _converter, _Front, _int, _open_dataset, _shared_config
from ._mixture import Mixture
from ._native import ConfigError, Dataset
from ._options import SEQUENCE

__all__ = ["SequenceLoader"]


def _positive(name: str, v: Any) -> int:
    """``v`` as a Python int from 1 to 2**32 - 1 (numpy integers accepted)."""
    return _int(name, v, 1, _U32, "a positive int (at most 2**32 - 1)")


class SequenceLoader(_Front):
    """Batches of token sequences from a token dataset (``stokehold pack --tokenizer``), made on
    native threads, in an order that is a pure function of (dataset, seed, epoch, rank, world
    size, configuration); resumable to the exact token on any number of ranks.

    **Packed** (default): the documents form one token stream; each sample is a window of
    ``seq_len + 1`` tokens starting at a multiple of ``seq_len``, giving ``input_ids`` and
    ``labels`` (the next tokens), each ``[batch_size, seq_len]``; windows are shuffled per epoch.
    **Documents** (``max_len`` given): one document per sample, truncated to ``max_len + 1``
    tokens and padded to the longest in the batch: ``input_ids`` (``pad_id``), ``labels`` (-100
    where padded) and ``attention_mask`` (1/0).

    :param dataset: a token :class:`Dataset`, its path, or a :class:`Mixture` of token datasets.
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
    :param pin_memory: with ``to="torch"`` and CUDA, put tensors in page-locked memory (a copy)
        for ``.cuda(non_blocking=True)``; ignored without CUDA.
    :param memory_budget: bytes (an int or a string like ``"512MiB"``) the batches prepared
        ahead may take with ``prefetch="auto"`` (default: 10% of physical memory, at most 2 GiB).
        ``"node:8GiB"``: a budget shared by every loader of every process on this node that
        names it (or ``STOKEHOLD_NODE_MEMORY_BUDGET=8GiB`` in the environment, set once for the
        job): each takes what its prefetch window could use, or what is left (at least one
        batch), returned when the loader is garbage-collected or its process dies; a lease file under
        ``STOKEHOLD_NODE_BUDGET_DIR`` (else the temporary directory). ``stats()["memory_budget"]``
        is this loader's share.
    :param profile: time every stage of every sample (``stats()``, ``report()``); ``False``
        saves the clock reads.
    :param trace: a path: keep the newest 1,000,000 stage spans and write them as Chrome Trace
        Event JSON there on :meth:`close` (or with :meth:`export_trace`).
    :param on_error: ``"fail"`` (default) or ``"skip"``: a damaged window or document is replaced by
        another of its batch, flagged as padding, counted in ``stats()["skipped"]`` (at most
        ``max_skip_fraction`` of the epoch).
    :param max_skip_fraction: with ``on_error="skip"``, the largest fraction of an epoch's
        samples (on this rank) that may be skipped before the loader fails (default 0.05).
    :param cache_dir: read the shards through a local copy in this directory (for slow or network
        filesystems).
    :param cache_dir_limit: its size limit (``"auto"``: the dataset's size); entries of other
        datasets are evicted, least recently used first, to make room.
    :param cache: keep whole shards in RAM once read (``True``: up to half of physical memory; a
        byte count such as ``"8GiB"``); windows are then slices of memory, no reads.
    :param on_step: a callable given, after each batch, a plain dict: ``epoch``, ``step`` (as
        :meth:`samples_at` counts it), ``rank``, ``wait`` (seconds the loop waited for the batch),
        ``step_time`` (seconds since the batch before) and ``bound`` (the stage that took most
        worker time meanwhile); for the user's own logger.
    :param io_uring: submit a task's reads that need the device together through ``io_uring``
        where the kernel allows it; ``False``: one ``pread`` each (``STOKEHOLD_IO_URING=0`` turns
        it off for the process).
    :param storage_options: when ``dataset`` is a path or URL: the options it is opened with, as
        :class:`Dataset`'s (credentials, endpoint, ``anon``, ...; values a str, bool or number).
        A dataset already open keeps its own (give them to ``Dataset(...)`` instead).
    :param text: a :class:`stokehold.text.ChatTemplate`: ``dataset`` is then a dataset of
        records whose field ``text.messages`` holds a conversation (the UTF-8 JSON text of its list
        of messages), rendered, tokenized and masked on the loader's threads; needs
        ``packing="whole"``. A :class:`stokehold.text.Documents` instead: plain text, each record
        one document. With a :class:`Mixture`, one of these for every source, or a dict
        ``{source name: ChatTemplate or Documents}`` (conversations mixed with plain text): the
        sources are blended by weight, conversation by conversation, then packed
        (``batch["doc_sources"]``, ``stats()["packing"]["sources"]``; docs/text.md).
    :param packing: ``"whole"``: rows of ``seq_len`` tokens hold whole conversations, chosen
        best-fit-decreasing over windows of ``window`` conversations of the shuffled order
        (docs/text.md, "Supervised fine-tuning"). Batches: ``input_ids`` int32, ``labels`` int64
        (-100 outside the loss mask and in padding), ``position_ids`` int64 (0 at every
        conversation and at the padding), ``segment_ids`` int32 (the conversation's index in its
        row, -1 in padding), ``doc_ids`` int64 ``[batch_size, K]`` (the rows' conversations,
        -1 padded), ``cu_seqlens`` int32 and ``max_seqlen`` (varlen attention over the batch
        flattened; padding is a sequence of its own). ``stats()["packing"]`` reports the fill.
    :param overlong: ``packing="whole"``: a conversation longer than ``seq_len`` is
        ``"truncate"``: cut to ``seq_len`` tokens (a row of its own); ``"drop"``: left out; counted in
        ``stats()["packing"]``.
    :param window: ``packing="whole"``: conversations of the shuffled order packed together.
    :param keep_encodings: ``packing="whole"``: bytes (an int or a string like ``"2GiB"``; 5 a
        token) of the encodings the count pass at construction keeps, so that filling a row does
        not encode those conversations again (and later epochs serve them from memory);
        ``"auto"``: 10% of physical memory, at most 1 GiB; 0: none.
    :param max_image_tokens: ``packing="whole"`` with a ``ChatTemplate(images=, vision=)``: the
        most image tokens a row holds (rows are packed within it and ``seq_len``; a conversation
        with more is left out and counted as dropped). Batches then also hold ``pixel_values``
        float32 ``[patches, row]`` and ``image_grid_thw`` int64 ``[images, 3]``: the images of the
        batch in row, conversation and image order, as ``Qwen2VLProcessor`` gives them
        (docs/vision.md, "Packed with images").
    :raises ConfigError: not a token dataset, an invalid option, or ``drop_last=True`` with a
        step larger than the epoch.
    """

    def __init__(
        self,
        dataset: Union[Dataset, Mixture, str, "os.PathLike[str]"],
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
        max_skip_fraction: float = 0.05,
        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
        cache: Union[bool, int, str] = False,
        pin_memory: bool = False,
        memory_budget: Union[None, int, str] = None,
        profile: bool = True,
        trace: Union[None, str, "os.PathLike[str]"] = None,
        cache_dir_limit: Union[int, str] = "auto",
        on_step: Optional[Callable[[Dict[str, Any]], Any]] = None,
        io_uring: bool = True,
        storage_options: Optional[Mapping[str, Any]] = None,
        text: Any = None,
        packing: Optional[str] = None,
        overlong: str = "truncate",
        window: int = 1024,
        keep_encodings: Union[int, str] = "auto",
        max_image_tokens: Optional[int] = None,
    ) -> None:
        o = _options.given(SEQUENCE, locals())
        dataset = _open_dataset(dataset, o.pop("storage_options"))
        if packing is not None or text is not None:
            self._start_chats(dataset, o, seq_len, batch_size)
            return
        if dtype not in ("int32", "int64"):
            raise ConfigError(f'dtype must be "int32" or "int64", got {dtype!r}')
        if not isinstance(shuffle, bool):
            raise ConfigError(f"shuffle must be True or False, got {shuffle!r}")
        seq_len = _positive("seq_len", seq_len)
        batch_size = _positive("batch_size", batch_size)
        o["pad_id"] = _int("pad_id", pad_id, 0, _U32, "a token id, an int from 0 to 2**32 - 1")
        loader_config, disk = _shared_config(o, batch_size, "global" if shuffle else "sequential")
        if o["max_len"] is None:
            mode: Dict[str, Any] = dict(kind="packed", seq_len=seq_len)
        else:
            mode = dict(kind="documents", max_len=o["max_len"], pad_id=o["pad_id"], bucket=o["bucket"])
        samples = dict(
            kind="tokens",
            mode=mode,
            dtype="i32" if dtype == "int32" else "i64",
            position_ids=o["position_ids"],
            segment_ids=o["segment_ids"],
        )
        spec = dict(loader=loader_config, samples=samples, **disk)
        if isinstance(dataset, Mixture):
            if o["max_len"] is not None and o["bucket"] > 1:
                raise ConfigError("bucket > 1 (length bucketing) is not available for a Mixture: use bucket=1")
            spec["mixture"] = dataset._spec(None)
        self._start(dataset, dict(o, seq_len=seq_len, batch_size=batch_size), spec, [])
        self._refuse_empty_epoch(batch_size, o["drop_last"], "documents" if max_len is not None else f"windows of seq_len {seq_len}")

    def _start_chats(self, dataset: Any, o: Dict[str, Any], seq_len: int, batch_size: int) -> None:
        """``packing="whole"`` with ``text=ChatTemplate``: rows of whole conversations."""
        from .text import ChatTemplate, Documents

        text, packing = o["text"], o["packing"]
        if packing != "whole":
            raise ConfigError(f'packing must be "whole" (whole conversations per row) with text=, got {packing!r}')
        own: Dict[str, Any] = {}
        if isinstance(text, Mapping):
            # a Mixture's sources, each with its own template (or Documents)
            if not isinstance(dataset, Mixture):
                raise ConfigError("text= as a dict (source name -> ChatTemplate or Documents) is for a Mixture; give one dataset one ChatTemplate")
            unknown = [n for n in text if n not in dataset.names]
            if unknown:
                raise ConfigError(f"text= names {unknown[0]!r}, which is not a source of the Mixture (they are {', '.join(dataset.names)})")
            missing = [n for n in dataset.names if n not in text]
            if missing:
                raise ConfigError(f"text= gives no ChatTemplate or Documents for the source {missing[0]!r}: give one per source")
            own = dict(text)
            text = own[dataset.names[0]]
        for t in (own or {"": text}).values():
            if not isinstance(t, (ChatTemplate, Documents)):
                raise ConfigError(f'packing="whole" needs text=stokehold.text.ChatTemplate(...) (or text.Documents(...) for plain text), got {t!r}')
        for name, default in (("max_len", None), ("bucket", 1), ("dtype", "int32"), ("cache_dir", None)):
            if o[name] != default:
                raise ConfigError(f'{name} is not an option of packing="whole" (leave it at {default!r})')
        seq_len = _positive("seq_len", seq_len)
        batch_size = _positive("batch_size", batch_size)
        if not isinstance(o["shuffle"], bool):
            raise ConfigError(f"shuffle must be True or False, got {o['shuffle']!r}")
        pad_id = _int("pad_id", o["pad_id"], 0, 2**31 - 1, "a token id, an int from 0 to 2**31 - 1")
        loader_config, disk = _shared_config(o, batch_size, "global" if o["shuffle"] else "sequential")
        chat = text._spec()
        samples = dict(kind="chats", chat=chat, seq_len=seq_len, window=o["window"], overlong=o["overlong"], pad_id=pad_id, keep_encodings=o["keep_encodings"])
        if o["max_image_tokens"] is not None:
            samples["max_image_tokens"] = _int("max_image_tokens", o["max_image_tokens"], 1, 2**32 - 1, "a count of image tokens per row")
        spec = dict(loader=loader_config, samples=samples, **disk)
        if isinstance(dataset, Mixture):
            spec["mixture"] = mix = dataset._spec(None)
            for src in mix["sources"]:
                if src["name"] in own:
                    src["text"] = own[src["name"]]._spec()
        config = dict(o, seq_len=seq_len, batch_size=batch_size)
        self._start(dataset, config, spec, [])
        self._refuse_empty_epoch(batch_size, o["drop_last"], f"rows of seq_len {seq_len}")

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        """Run (the rest of) the current epoch.

        :raises CorruptDataError: a damaged token record (the message names shard and record).
        """
        if self._config.get("packing") is None:
            return self._batches()
        rows = (_varlen(b) for b in self._native_iter())
        if self._to == "numpy":
            return rows
        return _converted(rows, _converter(self._to, self._pin))

    def stats(self) -> Dict[str, Any]:
        """As :meth:`stokehold.Loader.stats`; with ``packing="whole"`` also ``packing``:
        ``conversations``, ``rows`` (of the current epoch's plan), ``fill`` (tokens that are not
        padding over ``rows * seq_len``), ``truncated`` and ``dropped`` (``overlong``), ``skipped``
        (conversations that could not be read or encoded, under ``on_error="skip"``),
        ``skipped_examples`` (``[id, why]``, the first 100), ``counted`` (conversations counted so
        far: they are counted lazily, a window as its rows are first needed, the rest in the
        background) and ``exact`` (whether the epoch's rows are all planned: until then ``rows``
        and ``fill`` are those planned so far, and ``len(loader)`` is an estimate)."""
        s = super().stats()
        packing = self._engine.packing_json()
        if packing is not None:
            s["packing"] = json.loads(packing)
        return s

    @property
    def total_tokens(self) -> int:
        """Tokens in the dataset."""
        return self._engine.total_tokens

    @property
    def documents(self) -> int:
        """Documents in the dataset."""
        return self._engine.documents

    @property
    def samples(self) -> int:
        """Windows, documents or packed rows per epoch over all ranks."""
        return self._engine.samples

    def __repr__(self) -> str:
        mode = f"seq_len={self._config['seq_len']}" if self._config["max_len"] is None else f"max_len={self._config['max_len']}"
        return (
            f"SequenceLoader({self._dataset.path!r}, {mode}, batch_size={self._config['batch_size']}, "
            f"{len(self)} batches per epoch, rank {self.rank}/{self.world_size}, to={self._to!r}, "
            f"config={self._engine.config_json})"
        )

    def state_dict(self) -> Dict[str, Any]:
        """Where the loader is, after the batches delivered so far (a global position in windows,
        exact to the token; any rank's state resumes any number of ranks)."""
        return super().state_dict()

    def load_state_dict(self, state: Union[Mapping[str, Any], str]) -> None:
        """Continue from a saved state (a dict or its JSON). Stops a running iteration.

        :raises IncompatibleStateError: the state is of another dataset, ``seq_len``/``max_len``,
            seed or order.
        :raises TypeError: ``state`` is neither a dict nor a str (``None``, say).
        """
        super().load_state_dict(state)


def _varlen(batch: Dict[str, Any]) -> Dict[str, Any]:
    """Add ``cu_seqlens`` (int32: where each sequence of the batch flattened to one row starts,
    then the total) and ``max_seqlen`` (int) to a batch of packed conversations: every
    conversation, and the padding of each row, starts at position 0."""
    pos = batch["position_ids"].reshape(-1)
    starts = np.flatnonzero(pos == 0)
    cu = np.empty(len(starts) + 1, dtype=np.int32)
    cu[:-1] = starts
    cu[-1] = pos.size
    batch["cu_seqlens"] = cu
    batch["max_seqlen"] = int(np.diff(cu).max()) if len(starts) else 0
    mrope = batch.get("mrope_position_ids")
    if mrope is not None:
        # [4, B, N]: the text positions (the packed attention mask is made from them), then
        # temporal, height, width: what Qwen2-VL-family models take as position_ids for packed rows
        batch["mrope_position_ids"] = np.concatenate([batch["position_ids"][None], mrope.transpose(1, 0, 2)])
    # each row's images, one after another: what the model's forward takes for the batch (the
    # engine writes the rows' patches in place into one array; the grids are small)
    grids = batch.get("image_grid_thw")
    if isinstance(grids, list):
        batch["image_grid_thw"] = grids[0] if len(grids) == 1 else np.concatenate(grids)
    return batch
