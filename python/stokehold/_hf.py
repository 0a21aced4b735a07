"""``stokehold.from_hf``: pack a Hugging Face ``datasets.Dataset`` into a stokehold dataset.

The dataset's Arrow table is written batch by batch to a temporary Parquet file (no compression,
the images' bytes embedded as ``save_to_disk`` embeds them), which the same Rust packer as
``stokehold pack data.parquet`` reads; memory stays at one batch, and no sample ever becomes a
Python object (docs/python.md, "Hugging Face datasets").
"""

import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._native import DEFAULT_RESTART_MARKERS, _pack

#: Rows of the dataset taken at a time are chosen so that one batch holds about this many bytes.
_BATCH_BYTES = 32 << 20


def _load(dataset: Any) -> Any:
    """The ``datasets.Dataset`` that ``dataset`` is or names (a ``save_to_disk`` directory)."""
    import datasets  # type: ignore[import]

    if isinstance(dataset, (str, os.PathLike)):
        dataset = datasets.load_from_disk(os.fspath(dataset))
    if isinstance(dataset, (datasets.DatasetDict, datasets.IterableDatasetDict)):
        raise TypeError(
            f"from_hf packs one split; this DatasetDict holds {sorted(dataset)}: "
            f"pass one of them, e.g. from_hf(ds[{sorted(dataset)[0]!r}], path)"
        )
    if not isinstance(dataset, datasets.Dataset):
        raise TypeError(
            f"from_hf takes a datasets.Dataset or the path of one saved with save_to_disk, "
            f"not {type(dataset).__name__}"
        )
    return dataset


def _rows_per_batch(dataset: Any) -> int:
    """Rows per batch: about ``_BATCH_BYTES`` of the table, from 1 to 10,000 rows."""
    rows = max(len(dataset), 1)
    nbytes = max(int(dataset.data.nbytes), 1)
    return max(1, min(10_000, _BATCH_BYTES * rows // nbytes))


def _write_parquet(dataset: Any, file: str) -> None:
    """Write ``dataset`` (its rows in order, the indices of ``select``/``shuffle`` applied) to the
    Parquet file ``file``, one row group per batch."""
    import pyarrow.parquet as pq  # type: ignore[import]
    from datasets.table import embed_table_storage  # type: ignore[import]

    # the features' schema carries Hugging Face's metadata (ClassLabel names become classes)
    schema = dataset.features.arrow_schema
    rows = _rows_per_batch(dataset)
    with pq.ParquetWriter(file, schema, compression="none", write_statistics=True) as writer:
        for table in dataset.with_format("arrow").iter(batch_size=rows):
            # images given as file paths: their bytes, read now (relative to the working
            # directory, as datasets reads them)
            table = embed_table_storage(table.replace_schema_metadata(schema.metadata))
            if not table.schema.equals(schema, check_metadata=False):
                table = table.cast(schema)
            writer.write_table(table, row_group_size=rows)


def from_hf(
    dataset: Any,
    path: Union[str, "os.PathLike[str]"],
    *,
    fields: Optional[Union[str, Sequence[str]]] = None,
    overwrite: bool = False,
    shard_size: Union[int, str] = "256MiB",
    align: int = 1,
    zstd_level: int = 3,
    threads: int = 0,
    strict: bool = False,
    max_skip_fraction: float = 0.01,
    max_pixels: Optional[int] = None,
    baseline: bool = False,
    max_side: Optional[int] = None,
    jpeg_quality: int = 90,
    restart_markers: bool = DEFAULT_RESTART_MARKERS,
    storage_options: Optional[Mapping[str, str]] = None,
    tmp_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
) -> Dict[str, Any]:
    """Pack a Hugging Face dataset into a stokehold dataset at ``path``, as ``stokehold pack
    data.parquet path`` packs a Parquet file: each column becomes a field (``Image`` → image,
    ``Value("string")`` → string, integers and ``ClassLabel`` → int64 with the class names as the
    dataset's classes, floats → float64, lists of numbers → ndarray, binary → bytes or image;
    ``Sequence(Image())`` → ``list:image`` (several images per sample, each one's size kept in
    the index: ``Dataset.image_sizes``), lists of binary → ``list:bytes`` (``list:image`` when
    they are images), lists of strings → ``list:string``; structs and lists of structs, a chat
    dataset's ``messages`` → json: each row's value as canonical JSON text).

    The dataset's Arrow table is written batch by batch to a temporary Parquet file (in
    ``tmp_dir``, by default next to ``path``; removed at the end), with image files named by path
    embedded, and packed in parallel by the Rust packer; memory holds a batch, never the dataset.

    :param dataset: a ``datasets.Dataset`` (in memory, memory-mapped, or with ``select`` /
        ``shuffle`` indices: its rows in their order), or the directory of one saved with
        ``save_to_disk``. A ``DatasetDict`` is refused: pass one split.
    :param path: the dataset directory to create, or an object-storage URL (``s3://...``).
    :param fields: the columns to pack, as ``"image,label,caption?"`` or a list of names;
        ``NAME?`` marks a text, bytes or list column whose nulls are stored empty. Default: every
        column of a supported type that at least half the rows hold.
    :param overwrite: replace ``path`` if it is a stokehold dataset.
    :param shard_size: target shard size, bytes or a size such as ``"256MiB"``.
    :param align: align every record to this many bytes (a power of two).
    :param zstd_level: zstd level of compressed fields.
    :param threads: threads that read and encode (0: one per core).
    :param strict: fail on the first unusable row instead of skipping and counting it.
    :param max_skip_fraction: fail, writing nothing, when more than this fraction of the rows is
        skipped (an undecodable image, a null in a required column).
    :param max_pixels: skip images of more pixels than this (default: the loader's limit).
    :param baseline: rewrite progressive JPEGs as baseline, losslessly.
    :param max_side: re-encode images whose longer side is over this (lossy).
    :param jpeg_quality: JPEG quality of images re-encoded by ``max_side``.
    :param restart_markers: rewrite JPEGs losslessly with restart markers (faster random
        crops; the default, as in `stokehold pack`). False stores them as given.
    :param storage_options: credentials and endpoint of an object-storage ``path``.
    :param tmp_dir: where the temporary Parquet file goes (it takes about the dataset's size).
    :returns: the report: ``samples`` and ``shards`` written, ``input_bytes``, ``skipped`` (a
        list of ``(row, reason)``, rows named ``"row N"`` with N the dataset's row number), ``notes``, ``classes``.
    :raises TypeError: ``dataset`` is not a ``datasets.Dataset`` or the path of one.
    :raises ConfigError: a bad option, or a column in ``fields`` that is missing or unsupported.
    :raises StokeholdError: too many rows skipped, or (``strict``) one row skipped; nothing is
        written.
    """
    ds = _load(dataset)
    if isinstance(fields, str) or fields is None:
        field_spec = fields
    else:
        field_spec = ",".join(fields)
    dest = os.fspath(path)
    if tmp_dir is None and "://" not in dest:
        tmp_dir = os.path.dirname(os.path.abspath(dest))
    options: Dict[str, Any] = dict(
        fields=field_spec,
        overwrite=overwrite,
        shard_size=shard_size,
        align=align,
        zstd_level=zstd_level,
        threads=threads,
        strict=strict,
        max_skip_fraction=max_skip_fraction,
        baseline=baseline,
        max_side=max_side,
        jpeg_quality=jpeg_quality,
        restart_markers=restart_markers,
        storage_options=dict(storage_options) if storage_options is not None else None,
    )
    if max_pixels is not None:
        options["max_pixels"] = max_pixels
    with tempfile.TemporaryDirectory(prefix=".stokehold-from-hf-", dir=tmp_dir) as tmp:
        file = os.path.join(tmp, "data.parquet")
        _write_parquet(ds, file)
        report: Dict[str, Any] = _pack([file], dest, "parquet", **options)
    # name rows by the dataset's row number, not the temporary file
    prefix = f"{file} "
    skipped: List[Tuple[str, str]] = [
        (row[len(prefix) :] if row.startswith(prefix) else row, reason)
        for row, reason in report["skipped"]
    ]
    report["skipped"] = skipped
    return report
