"""PyTorch integration: :class:`IterableDataset`, an adapter for code built around
``torch.utils.data.DataLoader``.

Importing this module imports torch; ``import stokehold`` alone never does. stokehold runs its own
native threads, so use the DataLoader with ``batch_size=None`` (stokehold already batches) and
``num_workers=0``::

    loader = stokehold.Loader("train", batch_size=256, seed=0)
    dl = torch.utils.data.DataLoader(stokehold.torch.IterableDataset(loader), batch_size=None)
"""

from typing import Any, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np
import torch
import torch.utils.data

from ._loader import Loader
from ._sequence import SequenceLoader
from ._native import StokeholdError

__all__ = ["IterableDataset", "WaitReport", "to_torch", "wait_report"]


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


class WaitReport(NamedTuple):
    """Which rank waited longest for its batches over the last steps (:func:`wait_report`);
    ``str()`` is the one line to log."""

    #: the rank that waited longest
    slowest_rank: int
    #: its seconds waited, and the seconds its steps took, over ``steps`` steps
    wait: float
    step_time: float
    steps: int
    #: ``wait / step_time``: the share of its steps spent waiting for data
    share: float
    #: the stage that took most worker time while it waited (None without profiling)
    stage: Optional[str]
    #: each rank's ``(wait, step_time, steps, stage)``, by rank
    ranks: List[Tuple[float, float, int, Optional[str]]]

    def __str__(self) -> str:
        others = [r[0] for i, r in enumerate(self.ranks) if i != self.slowest_rank]
        rest = f"; the other ranks waited {min(others):.3f}-{max(others):.3f} s" if others else ""
        stage = f"bound by stage '{self.stage}'" if self.stage else "no stage timed (profile=False)"
        return (
            f"slowest rank {self.slowest_rank} of {len(self.ranks)}: waited {self.wait:.3f} s of "
            f"{self.step_time:.3f} s over its last {self.steps} steps ({self.share:.0%} of the step), "
            f"{stage}{rest}"
        )


def _local_waits(loader: Any, last: Optional[int]) -> Tuple[float, float, int, Optional[str]]:
    """This rank's (seconds waited, seconds of its steps, steps, bounding stage) over its last
    ``last`` steps (all kept when None): the bounding stage is the one that bounded the most
    waited time."""
    w = loader.stats()["waits"]
    n = len(w["wait"])
    first = 0 if last is None else max(0, n - last)
    waits, times, bounds = w["wait"][first:], w["step_time"][first:], w["bound"][first:]
    by_stage: Dict[str, float] = {}
    for wait, bound in zip(waits, bounds):
        if bound is not None:
            by_stage[bound] = by_stage.get(bound, 0.0) + wait
    stage = max(by_stage, key=lambda k: by_stage[k]) if by_stage else None
    # a step's time includes its wait; the first step of an iteration has no step before it
    step_time = sum(max(t, x) for t, x in zip(times, waits))
    return (float(sum(waits)), float(step_time), len(waits), stage)


def wait_report(loader: Any, last: Optional[int] = None) -> WaitReport:
    """Which rank waited longest for its batches over its last ``last`` steps (the whole
    history ``stats()["waits"]`` keeps, 1000 steps, when None): the exposed wait of each rank,
    all-gathered over ``torch.distributed`` when it is initialised (every rank must call it
    then, as for any collective), else this process's alone. ``print(wait_report(loader))``
    names the slowest rank, its share of the step spent waiting, and the stage that bounded it.
    """
    mine = _local_waits(loader, last)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        ranks: List[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, mine)
    else:
        ranks = [mine]
    ranks = [tuple(r) for r in ranks]
    slowest = max(range(len(ranks)), key=lambda i: (ranks[i][0], -i))
    wait, step_time, steps, stage = ranks[slowest]
    return WaitReport(
        slowest_rank=slowest,
        wait=wait,
        step_time=step_time,
        steps=steps,
        share=wait / step_time if step_time > 0 else 0.0,
        stage=stage,
        ranks=ranks,
    )
