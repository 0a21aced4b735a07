"""PyTorch integration: :class:`IterableDataset`, an adapter for code built around
``torch.utils.data.DataLoader``.

Importing this module imports torch; ``import stokehold`` alone never does. stokehold runs its own
native threads, so use the DataLoader with ``batch_size=None`` (stokehold already batches) and
``num_workers=0``::

    loader = stokehold.Loader("train", batch_size=256, seed=0)
    dl = torch.utils.data.DataLoader(stokehold.torch.IterableDataset(loader), batch_size=None)
"""

from typing import Any, Dict, Iterator, Mapping, Union

import numpy as np
import torch
import torch.utils.data

from ._loader import Loader
from ._sequence import SequenceLoader
from ._native import StokeholdError

__all__ = ["IterableDataset", "to_torch"]


def to_torch(batch: Mapping[str, Any]) -> Dict[str, Any]:
    """A numpy batch as torch tensors, without copying (``torch.from_numpy``); list columns stay
    lists, with numpy arrays in them converted."""
    out: Dict[str, Any] = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray):
            out[k] = torch.from_numpy(v)
        elif isinstance(v, list):
            out[k] = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in v]
        else:
            out[k] = v
    return out


class IterableDataset(torch.utils.data.IterableDataset):
    """Wraps a :class:`stokehold.Loader` (or :class:`stokehold.SequenceLoader`) as a
    ``torch.utils.data.IterableDataset`` yielding whole batches (dicts of tensors).

    Give it to ``DataLoader(adapter, batch_size=None, num_workers=0)``: batching, shuffling,
    threads and rank splitting are the Loader's. ``set_epoch``, ``state_dict`` and
    ``load_state_dict`` go to the Loader. More than one DataLoader worker process would load every
    batch once per worker, so it is refused.
    """

    def __init__(self, loader: Union[Loader, SequenceLoader]) -> None:
        super().__init__()
        if not isinstance(loader, (Loader, SequenceLoader)):
            raise TypeError(f"IterableDataset wraps a stokehold.Loader, got {type(loader).__name__}")
        self.loader = loader

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise StokeholdError(
                "stokehold.torch.IterableDataset runs its own threads: use DataLoader(..., num_workers=0) "
                f"(got {info.num_workers} workers, which would each load every batch)"
            )
        convert = self.loader._to == "numpy"
        for batch in self.loader:
            yield to_torch(batch) if convert else batch

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)

    def state_dict(self) -> Dict[str, Any]:
        return self.loader.state_dict()

    def load_state_dict(self, state: Union[Mapping[str, Any], str]) -> None:
        self.loader.load_state_dict(state)
