"""stokehold: a data loading engine for ML training.

A dataset is a directory of checksummed shard files and a ``manifest.json``. Write one with
:class:`ShardWriter`, read it back with :class:`Dataset`::

    import numpy as np
    import stokehold

    schema = {"image": "image:jpeg", "label": "int64", "emb": "ndarray:f32"}
    with stokehold.ShardWriter("data/train", schema, classes=["cat", "dog"]) as w:
        for jpeg_bytes, label, emb in samples:
            w.write({"image": jpeg_bytes, "label": label, "emb": np.asarray(emb, np.float32)})

    ds = stokehold.Dataset("data/train")
    print(ds, ds.classes)          # Dataset('data/train', 1200 samples, 1 shard, ...)
    sample = ds[-1]                # {"image": b"\\xff\\xd8...", "label": 1, "emb": array(...)}

Stream it into a training loop with :class:`Loader` (native threads, zero-copy numpy arrays,
deterministic order, exact resume)::

    loader = stokehold.Loader("data/train", batch_size=256, seed=0, include_ids=True)
    for epoch in range(10):
        loader.set_epoch(epoch)
        for batch in loader:          # {"label": int64 array, "emb": [arrays], "id": ..., ...}
            ...

For language models, ``stokehold pack corpus.jsonl tok --tokenizer tokenizer.json`` makes a token
dataset and :class:`SequenceLoader` streams packed windows from it (``docs/text.md``)::

    loader = stokehold.SequenceLoader("tok", seq_len=2048, batch_size=32, seed=0)
    for batch in loader:          # {"input_ids": int32 [32, 2048], "labels": int32 [32, 2048]}
        ...

A Hugging Face dataset (in memory, or a ``save_to_disk`` directory) packs with :func:`from_hf`
(``stokehold pack data.parquet out`` packs Parquet files)::

    report = stokehold.from_hf(datasets.load_from_disk("cifar10/train"), "data/cifar10")

Errors derive from :class:`StokeholdError`; damaged data raises :class:`CorruptDataError`, whose
message names the shard file, the record and the byte range.
"""

from ._native import (
    ConfigError,
    CorruptDataError,
    Dataset,
    IncompatibleStateError,
    LimitExceededError,
    SampleError,
    SchemaError,
    ShardWriter,
    StokeholdError,
    StokeholdIOError,
    UnsupportedVersionError,
    __version__,
)
from . import image, lerobot, text, transforms, video, vision
from ._hf import from_hf
from ._loader import Loader, default_rank_world_size
from ._mixture import Mixture
from ._sequence import SequenceLoader

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
