"""stokehold.SequenceLoader: packed (or per-document) token batches for language-model training,
over a token dataset made by ``stokehold pack --tokenizer``. The same native engine as
:class:`stokehold.Loader` (``_native._Engine``), with token samples instead of records."""

import os
from typing import Any, Dict, Iterator, Optional, Union

from ._loader import (
    _LIVE,
    _TARGETS,
    _cache_budget,
    _converted,
    _converter,
    _Front,
    _make_engine,
    _on_error,
    _workers,
    default_rank_world_size,
)
from ._native import ConfigError, Dataset

__all__ = ["SequenceLoader"]


def _positive(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{name} must be a positive int, got {v!r}")
    return v


class SequenceLoader(_Front):
    """Batches of token sequences from a token dataset.

    See the stub (``__init__.pyi``) and ``docs/text.md`` for every parameter.
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
    ) -> None:
        if not isinstance(dataset, Dataset):
            dataset = Dataset(dataset)
        if to not in _TARGETS:
            raise ConfigError(f'to must be "numpy", "torch" or "jax", got {to!r}')
        if dtype not in ("int32", "int64"):
            raise ConfigError(f'dtype must be "int32" or "int64", got {dtype!r}')
        if not isinstance(shuffle, bool):
            raise ConfigError(f"shuffle must be True or False, got {shuffle!r}")
        _positive("seq_len", seq_len)
        _positive("batch_size", batch_size)
        workers = _workers(threads, prefetch)
        cache_bytes = _cache_budget(cache)
        _positive("bucket", bucket)
        if max_len is not None:
            _positive("max_len", max_len)
        if (rank is None) != (world_size is None):
            raise ConfigError("give both rank and world_size, or neither")
        if rank is None:
            rank, world_size = default_rank_world_size()
        assert world_size is not None
        self._config: Dict[str, Any] = dict(
            seq_len=seq_len,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
            dtype=dtype,
            position_ids=position_ids,
            segment_ids=segment_ids,
            drop_last=drop_last,
            max_len=max_len,
            pad_id=pad_id,
            bucket=bucket,
            threads=threads,
            prefetch=prefetch,
            include_ids=include_ids,
            to=to,
            on_error=on_error,
            cache_dir=None if cache_dir is None else os.fspath(cache_dir),
            cache=cache,
        )
        self._dataset = dataset
        self._to = to
        if max_len is None:
            mode: Dict[str, Any] = dict(kind="packed", seq_len=seq_len)
        else:
            mode = dict(kind="documents", max_len=max_len, pad_id=pad_id, bucket=bucket)
        spec: Dict[str, Any] = dict(
            loader=dict(
                batch_size=batch_size,
                seed=seed,
                shuffle="global" if shuffle else "sequential",
                tail="drop" if drop_last else "pad",
                rank=rank,
                world_size=world_size,
                **workers,
                cache_bytes=cache_bytes,
                on_error=_on_error(on_error),
            ),
            samples=dict(
                kind="tokens",
                mode=mode,
                dtype="i32" if dtype == "int32" else "i64",
                position_ids=bool(position_ids),
                segment_ids=bool(segment_ids),
            ),
            cache_dir=self._config["cache_dir"],
        )
        self._engine = _make_engine(dataset, spec, [], include_ids)
        _LIVE.add(self)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        it = self._engine.iter()
        if self._to == "numpy":
            return it
        return _converted(it, _converter(self._to, False))

    @property
    def total_tokens(self) -> int:
        return self._engine.total_tokens

    @property
    def documents(self) -> int:
        return self._engine.documents

    @property
    def samples(self) -> int:
        return self._engine.samples

    def __repr__(self) -> str:
        mode = f"seq_len={self._config['seq_len']}" if self._config["max_len"] is None else f"max_len={self._config['max_len']}"
        return (
            f"SequenceLoader({self._dataset.path!r}, {mode}, batch_size={self._config['batch_size']}, "
            f"{len(self)} batches per epoch, rank {self.rank}/{self.world_size}, to={self._to!r}, "
            f"config={self._engine.config_json})"
        )

    def __reduce__(self):
        return (_restore, (self._dataset, self._config, self.state_dict()))


def _restore(dataset: Dataset, config: Dict[str, Any], state: Dict[str, Any]) -> SequenceLoader:
    loader = SequenceLoader(dataset, **config)
    loader.load_state_dict(state)
    return loader
