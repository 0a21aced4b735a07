"""Ray Data and stokehold: write a stokehold dataset from any Ray Dataset, read one as a Ray
Dataset (``pip install stokehold[ray]``; docs/scale.md has the recipes)::

    import ray, stokehold.ray

    ds = ray.data.read_binary_files("s3://bucket/jpegs/", include_paths=True)
    ds = ds.map_batches(resize_and_label)                     # {"image": bytes, "label": int}
    ds.write_datasink(stokehold.ray.Datasink("s3://bucket/train", overrides={"image": "image:jpeg"}))

    rows = stokehold.ray.read("s3://bucket/train")            # a Ray Dataset: one read task per shard

**How a write commits.** ``on_write_start`` checks the destination and draws the job's run
tag; each write task writes its own shards, named ``shard-<run>-<task>-<k>.skh`` (a retried task
writes the same names again, so its shards replace the failed attempt's: no duplicate records);
``on_write_complete`` checks every shard and writes ``manifest.json`` last (the commit point),
listing the shards by task, then shard number; ``on_write_failed`` removes the job's shards, so a
failed job leaves nothing that looks like a dataset.
"""

import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

try:
    import numpy as np
    import pyarrow as pa  # type: ignore[import-untyped]
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import ray.data
    from ray.data import Datasink as _RayDatasink
    from ray.data.block import Block, BlockAccessor, BlockMetadata
    from ray.data.datasource import Datasource as _RayDatasource
    from ray.data.datasource import ReadTask
except ImportError as _e:  # pragma: no cover - exercised by a test without Ray
    raise ImportError(
        f"stokehold.ray needs Ray Data and pyarrow ({_e}): pip install stokehold[ray]"
    ) from _e

from ._native import (
    DEFAULT_RESTART_MARKERS,
    Dataset,
    PartWriter,
    SchemaError,
    _arrow_field_types,
    abort_parts,
    commit_parts,
    prepare_parts,
)
from .text import Tokenizer

__all__ = ["Datasink", "Datasource", "read", "schema_from_arrow"]

_PathLike = Union[str, "os.PathLike[str]"]

_NUMPY_OF = {"u8": "<u1", "i32": "<i4", "i64": "<i8", "f16": "<f2", "f32": "<f4", "f64": "<f8"}


def _derived(schema: "pa.Schema") -> Dict[str, str]:
    """Each column's stokehold type spec, by the mapping ``pack`` uses for Parquet (in Rust:
    ``stokehold_ingest::arrow``), for an Arrow schema whose every column has one."""
    out = {}
    for name, spec, arrow_type in _arrow_field_types(schema):
        if spec is None and _null_typed(schema.field(name).type):
            raise SchemaError(
                f"column {name!r} holds only nulls or empty lists here ({arrow_type}), so its "
                f"type cannot be told from the data: give it in overrides={{{name!r}: ...}} "
                "(e.g. 'list:image' for lists of images), or schema="
            )
        if spec is None:
            raise SchemaError(
                f"column {name!r} has Arrow type {arrow_type}, which has no stokehold type: "
                "convert it in map_batches, or give its type in overrides={...} (bytes, string, "
                "int64, float64, ndarray:<u8|i32|i64|f16|f32|f64>, image:<jpeg|png|webp|auto>, "
                "list:image, list:bytes, list:string)"
            )
        out[name] = spec
    return out


def schema_from_arrow(
    schema: "pa.Schema", overrides: Optional[Mapping[str, str]] = None
) -> Dict[str, str]:
    """The stokehold schema (field name → type spec, in column order) of an Arrow schema, by
    the mapping ``stokehold pack`` uses for Parquet: binary → ``bytes``, Hugging Face's image
    struct (``{bytes, path}``) → ``image:auto``, string → ``string``, integers and booleans →
    ``int64``, floats → ``float64``, fixed-shape tensors and lists of numbers →
    ``ndarray:<dtype>`` (``u8`` for uint8 and bool, ``i32`` for the other narrow integers,
    ``i64``, ``f16``, ``f32``, ``f64``), lists of image structs (Hugging Face's
    ``Sequence(Image())``) → ``list:image:auto``, lists of binary → ``list:bytes`` (the
    :class:`Datasink` looks at the first items: images make it ``list:image:auto``), lists of
    strings → ``list:string``; ``overrides`` (e.g. ``{"image": "image:jpeg"}``) replace the
    derived spec of the columns they name.

    :raises SchemaError: a column has a type with no stokehold type and no override, or an
        override names no column.
    """
    overrides = dict(overrides or {})
    unknown = [k for k in overrides if k not in schema.names]
    if unknown:
        raise SchemaError(
            f"overrides name column(s) {unknown} that the data does not have "
            f"(its columns are {schema.names})"
        )
    rest = [f for f in schema if f.name not in overrides]
    derived = _derived(pa.schema(rest))
    return {f.name: overrides[f.name] if f.name in overrides else derived[f.name] for f in schema}


#: Items of a list-of-binary column looked at to tell lists of images from other bytes.
_SNIFF_ITEMS = 32


def _is_image(b: Any) -> bool:
    """Whether ``b`` starts as a JPEG, PNG or WebP does."""
    b = bytes(b[:12])
    return (b.startswith(b"\xff\xd8\xff") or b.startswith(b"\x89PNG\r\n\x1a\n")
            or (b[:4] == b"RIFF" and b[8:12] == b"WEBP"))


def _image_lists(table: "pa.Table", schema: Dict[str, str], overrides: Mapping[str, str]) -> Dict[str, str]:
    """``schema`` with each derived ``list:bytes`` column whose first items (up to
    ``_SNIFF_ITEMS``) are mostly images made ``list:image:auto``, as ``pack`` tells a list of
    binary images from other bytes."""
    out = dict(schema)
    for name, spec in schema.items():
        if spec != "list:bytes" or name in overrides:
            continue
        items = pc.list_flatten(table.column(name)).slice(0, _SNIFF_ITEMS).to_pylist()
        items = [b for b in items if b is not None]
        if items and 2 * sum(map(_is_image, items)) > len(items):
            out[name] = "list:image:auto"
    return out


def _list_items(col: Any, name: str) -> List[Any]:
    """A list column's rows as lists of items; items that are image structs become their bytes
    (an item with no bytes, a path only, is an error naming the row and the item)."""
    rows = col.to_pylist()
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) or not pa.types.is_struct(
        col.type.value_type
    ):
        return rows
    out: List[Any] = []
    for i, items in enumerate(rows):
        if items is None:
            out.append(None)
            continue
        row = []
        for k, item in enumerate(items):
            if item is None or item.get("bytes") is None:
                raise SchemaError(
                    f"column {name!r}, row {i}, item {k}: an image with no bytes "
                    f"({'null' if item is None else 'path ' + repr(item.get('path'))}): the "
                    "Datasink writes images' bytes; read the files in map_batches"
                )
            row.append(item["bytes"])
        out.append(row)
    return out


def _null_typed(t: "pa.DataType") -> bool:
    """Whether ``t`` is Arrow's null type, or a list of it (what pyarrow makes of a block's
    column of empty lists)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.types.is_null(t.value_type)
    return pa.types.is_null(t)


def _column_values(block: "pa.Table", name: str, spec: str) -> Sequence[Any]:
    """The values of one column, one per row, as the writer takes them."""
    col = block.column(name)
    if pa.types.is_struct(col.type) and spec.startswith("image:"):
        # Hugging Face's image struct: the image is its bytes
        return col.combine_chunks().field("bytes").to_pylist()
    if spec.startswith("list:"):
        return _list_items(col.combine_chunks(), name)
    if spec.startswith("ndarray:"):
        dtype = np.dtype(_NUMPY_OF[spec.split(":", 1)[1].split("+", 1)[0]])
        if isinstance(col.type, pa.ExtensionType):
            arr = BlockAccessor.for_block(block.select([name])).to_numpy(name)
            if isinstance(arr, np.ndarray) and arr.dtype != object:
                return list(arr.astype(dtype, copy=False))
            return [np.asarray(a).astype(dtype, copy=False) for a in arr]
        return [None if v is None else np.asarray(v, dtype=dtype) for v in col.to_pylist()]
    return col.to_pylist()


def _token_bytes(values: Sequence[Any], name: str, dtype: str, vocab: int) -> List[bytes]:
    """Token ids per row (arrays, lists, or bytes already in the dataset's width) as the
    little-endian bytes of a token record; ids outside the vocabulary are refused."""
    out = []
    width = np.dtype(dtype).newbyteorder("<")
    for i, v in enumerate(values):
        if isinstance(v, (bytes, bytearray, memoryview)):
            b = bytes(v)
            if len(b) % width.itemsize:
                raise SchemaError(
                    f"column {name!r}, row {i}: {len(b)} bytes are not whole {dtype} tokens"
                )
            out.append(b)
            continue
        ids = np.asarray(v)
        if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
            raise SchemaError(
                f"column {name!r}, row {i}: token ids must be a 1-d sequence of integers, "
                f"got {ids.dtype} of shape {ids.shape}"
            )
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise SchemaError(
                f"column {name!r}, row {i}: token id {int(ids.max())} is outside the "
                f"tokenizer's vocabulary of {vocab}"
            )
        out.append(ids.astype(width, copy=False).tobytes())
    return out


class Datasink(_RayDatasink):  # type: ignore[misc]
    """A Ray Data datasink writing a stokehold dataset at ``path`` (a directory every worker
    can write, or an object-storage URL ``s3://bucket/prefix``)::

        ds.write_datasink(stokehold.ray.Datasink("s3://b/out", overrides={"image": "image:jpeg"}))

    :param path: the destination: it must not hold a dataset, nor anything a dataset writer
        does not write (a dead job's leftovers are removed).
    :param schema: field name → type spec; default: derived from the first block's Arrow schema
        (:func:`schema_from_arrow`) with ``overrides``.
    :param overrides: column → type spec replacing the derived one (``{"image": "image:jpeg"}``).
    :param storage_options: object-store options, as for :class:`stokehold.Dataset`.
    :param shard_size: a shard closes once it holds this many bytes (each write task writes its
        own shards, so a task's last shard may be smaller).
    :param align: record alignment. :param zstd_level: level of ``+zstd`` fields.
    :param classes: class names by label, stored in the manifest.
    :param tokenizer: write a *token dataset* (docs/format.md §9) read by
        :class:`stokehold.SequenceLoader`: the data's one column ``tokens`` holds each document's
        ids (from :meth:`stokehold.text.Tokenizer.encode_batch` in a ``map_batches``); this is
        that tokenizer (or the path of its ``tokenizer.json``), copied into the dataset.
    :param text_field: the input field the text came from (recorded in the manifest).
    :param min_rows_per_write: rows Ray gathers for one write task (fewer, larger tasks).
    :param restart_markers: rewrite every JPEG in an image field losslessly with restart markers,
        as ``stokehold pack`` does by default (crops then decode only their share of the file);
        ``False`` stores the bytes as given. A file the rewrite refuses is kept as given and
        counted in the manifest's ``source.kept_as_is``.
    """

    def __init__(
        self,
        path: _PathLike,
        schema: Optional[Mapping[str, str]] = None,
        *,
        overrides: Optional[Mapping[str, str]] = None,
        storage_options: Optional[Dict[str, str]] = None,
        shard_size: int = 256 * 2**20,
        align: int = 1,
        zstd_level: int = 3,
        classes: Optional[List[str]] = None,
        tokenizer: Union[Tokenizer, _PathLike, None] = None,
        text_field: str = "text",
        min_rows_per_write: Optional[int] = None,
        restart_markers: bool = DEFAULT_RESTART_MARKERS,
    ) -> None:
        self.path = os.fspath(path)
        self.restart_markers = restart_markers
        self.overrides = dict(overrides or {})
        self.storage_options = dict(storage_options or {})
        self.shard_size = shard_size
        self.align = align
        self.zstd_level = zstd_level
        self.classes = classes
        self.text_field = text_field
        self._min_rows = min_rows_per_write
        if tokenizer is not None and not isinstance(tokenizer, Tokenizer):
            tokenizer = Tokenizer(tokenizer)
        self.tokenizer: Optional[Tokenizer] = tokenizer
        if tokenizer is not None:
            if schema is not None and dict(schema) != {"tokens": "bytes"}:
                raise SchemaError("a token dataset's schema is {'tokens': 'bytes'}; give no schema")
            schema = {"tokens": "bytes"}
        self.schema: Optional[Dict[str, str]] = dict(schema) if schema is not None else None
        self.run: Optional[str] = None

    @property
    def min_rows_per_write(self) -> Optional[int]:
        return self._min_rows

    def get_name(self) -> str:
        return "Stokehold"

    def on_write_start(self, schema: Optional["pa.Schema"] = None) -> None:
        """Check the destination, remove a dead job's leftovers, draw the run tag, and fix the
        schema (from the first block's Arrow schema unless given)."""
        # The schema Ray passes is that of the first input bundle, which is the input of the
        # operators fused with the write (a map_batches before it), not what is written: unless
        # given, each task derives the schema from its first block, and the commit checks that
        # every task's agrees.
        del schema
        self.run = prepare_parts(self.path, self.storage_options)

    def write(self, blocks: Iterable[Block], ctx: Any) -> Dict[str, Any]:
        """Write one task's blocks into its own shards; returns their entries."""
        if self.run is None:
            raise RuntimeError("stokehold.ray.Datasink.write ran before on_write_start")
        task = int(ctx.task_idx)
        writer: Optional[PartWriter] = None
        schema = self.schema
        rows = tokens = 0
        try:
            for b, block in enumerate(blocks):
                table = BlockAccessor.for_block(block).to_arrow()
                if table.num_rows == 0:
                    continue
                if schema is None:
                    try:
                        schema = schema_from_arrow(table.schema, self.overrides)
                        schema = _image_lists(table, schema, self.overrides)
                    except SchemaError as e:
                        raise SchemaError(f"block {b} of write task {task}: {e}") from None
                if writer is None:
                    writer = PartWriter(
                        self.path,
                        schema,
                        run=self.run,
                        task=task,
                        shard_size=self.shard_size,
                        align=self.align,
                        zstd_level=self.zstd_level,
                        storage_options=self.storage_options,
                        restart_markers=self.restart_markers,
                    )
                self._check_block(schema, table.schema, task, b)
                columns = {n: _column_values(table, n, s) for n, s in schema.items()}
                if self.tokenizer is not None:
                    meta = self.tokenizer.meta()
                    columns["tokens"] = _token_bytes(
                        columns["tokens"], "tokens", self.tokenizer.dtype, meta["vocab_size"]
                    )
                    tokens += sum(len(t) for t in columns["tokens"]) // np.dtype(
                        self.tokenizer.dtype
                    ).itemsize
                try:
                    rows += writer.write_columns(columns)
                except SchemaError as e:
                    raise SchemaError(f"block {b} of write task {task}: {e}") from None
            shards = writer.finish() if writer is not None else []
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        kept = writer.kept_as_is if writer is not None else 0
        return {"task": task, "rows": rows, "tokens": tokens, "shards": shards, "schema": schema,
                "kept_as_is": kept}

    def _check_block(
        self, schema: Dict[str, str], arrow: "pa.Schema", task: int, block: int
    ) -> None:
        """Refuse a block whose columns or column types do not give the dataset's schema."""
        names = list(arrow.names)
        if sorted(names) != sorted(schema):
            missing = [n for n in schema if n not in names]
            extra = [n for n in names if n not in schema]
            raise SchemaError(
                f"block {block} of write task {task} does not match the dataset's schema "
                f"{schema}: missing column(s) {missing}, unknown column(s) {extra}"
            )
        # (a block whose values are all null, or whose lists are all empty, has a null type:
        # it fits any type)
        checked = [f for f in arrow if f.name not in self.overrides and not _null_typed(f.type)]
        try:
            derived = _derived(pa.schema(checked))
        except SchemaError as e:
            raise SchemaError(f"block {block} of write task {task}: {e}") from None
        for f in checked:
            want = schema[f.name]
            got = derived[f.name]
            if self.tokenizer is not None and f.name == "tokens":
                continue
            if got.split("+")[0] != want.split("+")[0] and not (
                (want.startswith("image:") and got == "bytes")
                or (want.startswith("list:image") and got == "list:bytes")
            ):
                raise SchemaError(
                    f"block {block} of write task {task}: column {f.name!r} is {f.type} "
                    f"({got}), but the dataset's schema has {want!r} for it (blocks must share "
                    "one schema: cast the column in map_batches, or pass schema=/overrides=)"
                )

    def on_write_complete(self, write_result: Any) -> None:
        """Commit: check every shard and write the manifest (listing the shards by task, then
        shard number)."""
        assert self.run is not None
        results = sorted(
            (r for r in write_result.write_returns if r is not None and r["rows"]),
            key=lambda r: r["task"],
        )
        schema = self.schema or (results[0]["schema"] if results else None)
        if schema is None:
            raise SchemaError(
                f"Datasink({self.path!r}): no rows were written and no schema= was given"
            )
        for r in results:
            if r["schema"] != schema:
                col = next(
                    c for c in list(schema) + list(r["schema"])
                    if schema.get(c) != r["schema"].get(c)
                )
                raise SchemaError(
                    f"block 0 of write task {r['task']}: column {col!r} is "
                    f"{r['schema'].get(col)!r} there, but {schema.get(col)!r} in write task "
                    f"{results[0]['task']} (blocks must share one schema: cast the column in "
                    "map_batches, or pass schema=/overrides=)"
                )
        shards = [s for r in results for s in r["shards"]]
        source: Dict[str, Any] = {"kind": "ray"}
        if any(spec.startswith(("image", "list:image")) for spec in schema.values()):
            # as pack records it: whether the JPEGs carry restart markers, and how many were
            # kept as given because the rewrite refused them
            source["restart_markers"] = self.restart_markers
            source["kept_as_is"] = sum(r.get("kept_as_is", 0) for r in results)
        files: Dict[str, bytes] = {}
        if self.tokenizer is not None:
            source = self.tokenizer.source(
                self.text_field,
                documents=sum(r["rows"] for r in results),
                total_tokens=sum(r["tokens"] for r in results),
            )
            with open(self.tokenizer.path, "rb") as f:
                files["tokenizer.json"] = f.read()
        commit_parts(
            self.path,
            schema,
            shards,
            run=self.run,
            align=self.align,
            classes=self.classes,
            source=json.dumps(source),
            files=files,
            storage_options=self.storage_options,
        )

    def on_write_failed(self, error: Exception) -> None:
        """Remove the job's shards: no manifest was written, and no shard remains."""
        if self.run is not None:
            abort_parts(self.path, self.run, self.storage_options)


class Datasource(_RayDatasource):  # type: ignore[misc]
    """A Ray Data datasource over a stokehold dataset: one read task per range of shards, rows
    as dicts of the fields (images and bytes as ``bytes``, ndarrays as arrays, token datasets'
    ``tokens`` as arrays of ids). Use :func:`read`."""

    def __init__(self, path: _PathLike, storage_options: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.storage_options = dict(storage_options or {})
        ds = self._open()
        manifest = ds.manifest
        self._shards = [(s["records"], s["bytes"]) for s in manifest["shards"]]

    def _open(self) -> Dataset:
        if self.storage_options:
            return Dataset(self.path, storage_options=self.storage_options)
        return Dataset(self.path)

    def get_name(self) -> str:
        return "Stokehold"

    def estimate_inmemory_data_size(self) -> Optional[int]:
        return sum(b for _, b in self._shards)

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: Optional[int] = None,
        data_context: Any = None,
    ) -> List["ReadTask"]:
        """One read task per shard, or per run of consecutive shards when there are more
        shards than ``parallelism``."""
        n = len(self._shards)
        if n == 0:
            return []
        groups = max(1, min(n, parallelism))
        starts: List[int] = [0]
        for s in self._shards:
            starts.append(starts[-1] + s[0])
        tasks = []
        for g in range(groups):
            lo_shard, hi_shard = g * n // groups, (g + 1) * n // groups
            lo, hi = starts[lo_shard], starts[hi_shard]
            meta = BlockMetadata(
                num_rows=hi - lo,
                size_bytes=sum(b for _, b in self._shards[lo_shard:hi_shard]),
                input_files=None,
                exec_stats=None,
            )
            limit = {} if per_task_row_limit is None else {"per_task_row_limit": per_task_row_limit}
            tasks.append(ReadTask(self._reader(lo, hi), meta, **limit))
        return tasks

    def _reader(self, lo: int, hi: int) -> Any:
        path, options = self.path, self.storage_options

        def read_fn() -> Iterable[Block]:
            ds = Dataset(path, storage_options=options) if options else Dataset(path)
            for start in range(lo, hi, _BLOCK_ROWS):
                yield _block(ds, start, min(hi, start + _BLOCK_ROWS))

        return read_fn


#: Rows per block of a read task (records read and decoded in Rust, one Arrow batch each).
_BLOCK_ROWS = 1024

#: The suffix of the column of shapes that Rust puts beside an array column (see
#: ``crates/stokehold-py/src/arrow_out.rs``).
_SHAPE = ".__shape__"


class _CArray:
    """The ``__arrow_c_array__`` protocol over a capsule pair made in Rust."""

    def __init__(self, capsules: Any) -> None:
        self._capsules = capsules

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return self._capsules


def _block(ds: Dataset, lo: int, hi: int) -> Block:
    """Records ``[lo, hi)`` as a Ray block: the Arrow batch Rust builds (bytes, strings and
    numbers as Arrow columns, no Python object per value), each array column (with its shapes)
    turned into Ray's tensor column, so rows hold numpy arrays as ``ds[i]`` does."""
    from ray.data.extensions import ArrowTensorArray

    batch = pa.record_batch(_CArray(ds._arrow_batch(lo, hi)))
    names = [n for n in batch.schema.names if not n.endswith(_SHAPE)]
    columns = []
    for name in names:
        col = batch.column(name)
        if name + _SHAPE in batch.schema.names:
            col = ArrowTensorArray.from_numpy(_arrays(col, batch.column(name + _SHAPE)))
        columns.append(col)
    return pa.Table.from_arrays(columns, names=names)


def _arrays(lists: Any, shapes: Any) -> Any:
    """A list column and its shapes as numpy: one array ``[rows, *shape]`` when every row has
    the same shape (one copy of the elements), else a list of arrays of their own shapes."""
    values = lists.values.to_numpy(zero_copy_only=False)
    offsets = lists.offsets.to_numpy()
    dims = shapes.values.to_numpy()
    dim_offsets = shapes.offsets.to_numpy()
    n = len(lists)
    rank = np.diff(dim_offsets)
    if n and (rank == rank[0]).all():
        per_row = dims.reshape(n, int(rank[0])) if rank[0] else np.zeros((n, 0), dtype=dims.dtype)
        if (per_row == per_row[0]).all():
            return values.reshape((n,) + tuple(int(d) for d in per_row[0]))
    return [
        values[offsets[i]:offsets[i + 1]].reshape(tuple(int(d) for d in dims[dim_offsets[i]:dim_offsets[i + 1]]))
        for i in range(n)
    ]


def read(
    path: _PathLike,
    storage_options: Optional[Dict[str, str]] = None,
    *,
    override_num_blocks: Optional[int] = None,
) -> "ray.data.Dataset":
    """The stokehold dataset at ``path`` (a directory or an object-storage URL) as a Ray
    Dataset: one read task per shard (or range of shards), rows as dicts of the fields."""
    return ray.data.read_datasource(
        Datasource(path, storage_options), override_num_blocks=override_num_blocks
    )
