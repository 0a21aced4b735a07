"""``stokehold.Mixture``: several datasets loaded as one, blended by weights that may change
during the run (docs/mixtures.md)."""

import math
import numbers
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _options
from ._native import ConfigError, Dataset
from ._options import MIXTURE
from ._stages import stage_specs

_Source = Union[Dataset, str, "os.PathLike[str]"]
_Weights = Union[Mapping[str, float], Sequence[float]]

# the spec's keys that an option gives as it is (unit, epoch_samples, source_column, on_change),
# from the option table; the schedule and each source's own keys are built below
_SPEC_KEYS = tuple(k for k in map(_options.spec_key, _options.options(MIXTURE)) if "[" not in k and k != "schedule")


class Mixture:
    """Several datasets (images, token datasets, files read in place, from local disk or object
    storage) loaded as one: pass it to :class:`stokehold.Loader` or
    :class:`stokehold.SequenceLoader` where a dataset goes (also datasets of conversations or
    plain text with ``SequenceLoader(mix, text=..., packing="whole")``: blended conversation by
    conversation, then packed; docs/text.md).

    The order is a function of the seed, the weights and the position only: each sample of the
    blended stream goes to the source furthest behind its share (error diffusion, exact in
    integers), so every prefix of the stream holds each source's share to within one sample.
    Each source is shuffled on its own, a new permutation every pass: a small source repeats, a
    large one need never finish. An epoch is a slice of ``epoch_samples`` of the endless stream.
    Batches carry a ``source`` column (int64: the source's index in the order given);
    ``stats()["sources"]`` gives each source's samples, bytes, failures, time and passes.
    ``state_dict()`` resumes exactly, on any number of ranks, and remembers the weights up to
    its position.

    :param sources: ``{"name": dataset, ...}`` (a :class:`Dataset`, a path or a URL each); or a
        list of them, named ``"0"``, ``"1"``, ... The sources must give the same fields (those the
        loader reads) with the same shapes after their transforms.
    :param weights: one weight per source (``{"name": w}`` naming every source, 0 to leave one
        out, or a list in the sources' order), any finite numbers >= 0, normalised; ``None``: in
        proportion to the sources' samples.
    :param schedule: weights that change: ``[(step, weights), ...]`` in increasing steps; the
        weights hold from that step on (a step is one batch of all ranks together:
        ``batch_size * world_size`` samples, counted from the start of the run, across epochs).
        An entry at step 0 gives the first weights (then leave ``weights`` out).
    :param schedule_unit: ``"steps"`` (default) or ``"samples"`` (the schedule counts samples
        of the blended stream).
    :param epoch_samples: samples per epoch (``None``: the sources' samples summed). It must
        stay the same across a resume.
    :param source_column: add the ``source`` column.
    :param transforms: a source's own stages (``{"name": {field: [stages]}}``), instead of the
        loader's ``transforms`` for that source (a different crop for a second image set, say).
    :param max_skip_fraction: under the loader's ``on_error="skip"``, a source's own budget:
        ``{"name": fraction}``, the largest fraction of its share of an epoch (its weight times
        the rank's samples) that may be skipped; more fails the loader with an error naming the
        source (the loader's own 5% of the epoch holds too).
    :param on_change: what :meth:`~stokehold.Loader.load_state_dict` does with a state whose
        blend differs before its position (a source added or removed, or weights changed in the
        past): ``"refuse"`` (default: an :class:`IncompatibleStateError` that says what
        differs) or ``"reblend"`` (a new blend from the state's position, each source continuing
        its passes where it was).
    :raises ConfigError: an invalid source or option here, a weight that is not a finite number
        >= 0; no source, an empty name, an unknown source in the weights, a source left out of
        weights by name, weights all 0 or steps out of order when the loader is made (the engine
        checks them for every front).
    """

    def __init__(
        self,
        sources: Union[Mapping[str, _Source], Sequence[_Source]],
        weights: Optional[_Weights] = None,
        *,
        schedule: Optional[Sequence[Tuple[int, _Weights]]] = None,
        schedule_unit: str = "steps",
        epoch_samples: Optional[int] = None,
        source_column: bool = True,
        transforms: Optional[Mapping[str, Mapping[str, Any]]] = None,
        max_skip_fraction: Optional[Mapping[str, float]] = None,
        on_change: str = "refuse",
    ) -> None:
        o = _options.given(MIXTURE, locals())
        if isinstance(sources, Mapping):
            items = list(sources.items())
        elif isinstance(sources, (list, tuple)):
            items = [(str(i), s) for i, s in enumerate(sources)]
        else:
            raise ConfigError(
                f"a Mixture's sources are a dict name -> dataset (or path), or a list of them; got {type(sources).__name__}"
            )
        # an empty mixture, an empty or repeated name: the engine's checks, for every front
        names: List[str] = []
        for name, _ in items:
            if not isinstance(name, str):
                raise ConfigError(f"a Mixture's source names must be non-empty strings, got {name!r}")
            names.append(name)
        self._names = names
        self._datasets = [d if isinstance(d, Dataset) else Dataset(d) for _, d in items]
        entries: List[Tuple[int, Any]] = []
        for entry in schedule or []:
            if not isinstance(entry, (tuple, list)) or len(entry) != 2:
                raise ConfigError(f"a schedule entry is a (step, weights) pair, got {entry!r}")
            at, w = entry
            if isinstance(at, bool) or not isinstance(at, int) or at < 0:
                raise ConfigError(f"a schedule's step must be an int >= 0, got {at!r}")
            entries.append((at, self._weights(w, f"schedule at {at}")))
        if entries and entries[0][0] == 0:
            if weights is not None:
                raise ConfigError("give the first weights either as weights= or as the schedule's entry at step 0, not both")
            first = entries.pop(0)[1]
        else:
            first = [] if weights is None else self._weights(weights, "weights")
        self._schedule = [(0, first)] + entries
        # the options the spec takes as given (checked by the option table): by its keys
        self._given = {
            _options.spec_key(opt): o[opt.name] for opt in _options.options(MIXTURE) if _options.spec_key(opt) in _SPEC_KEYS
        }
        self._transforms: Dict[str, Mapping[str, Any]] = {}
        for name, t in (transforms or {}).items():
            if name not in names:
                raise ConfigError(f"transforms for {name!r}, which is not a source (they are {', '.join(names)})")
            if not isinstance(t, Mapping):
                raise ConfigError(f"source {name!r}: transforms must be a dict field name -> list of stages")
            self._transforms[name] = dict(t)
        self._skip: Dict[str, float] = {}
        for name, f in (max_skip_fraction or {}).items():
            if name not in names:
                raise ConfigError(f"max_skip_fraction for {name!r}, which is not a source (they are {', '.join(names)})")
            if isinstance(f, bool) or not isinstance(f, (int, float)):
                raise ConfigError(f"source {name!r}: max_skip_fraction must be a number, got {f!r}")
            self._skip[name] = float(f)

    @staticmethod
    def _weights(w: Any, what: str) -> Any:
        """``w`` as the engine takes it (a list, or a dict by source name), each weight a finite
        number >= 0 (checked here: NaN, infinities and strings do not survive the engine's JSON
        as themselves); the engine checks the names, for every front alike, when the loader is
        made."""
        if isinstance(w, Mapping):
            return {k: Mixture._weight(v, f"{what}: the weight of {k!r}") for k, v in w.items()}
        if isinstance(w, (list, tuple)):
            return [Mixture._weight(v, f"{what}: weight {i}") for i, v in enumerate(w)]
        raise ConfigError(f"{what}: weights are a dict name -> weight or a list, got {type(w).__name__}")

    @staticmethod
    def _weight(v: Any, what: str) -> float:
        """One weight as a float (NumPy numbers included): a finite number >= 0."""
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ConfigError(f"{what} must be a number >= 0 (0 leaves the source out), got {v!r}")
        f = float(v)
        if not math.isfinite(f) or f < 0:
            raise ConfigError(f"{what} must be a finite number >= 0 (0 leaves the source out), got {v!r}")
        return f

    def _spec(self, stages: Optional[list]) -> Dict[str, Any]:
        """The engine's ``mixture`` spec; a source's own Python stages are appended to
        ``stages`` (the loader's list)."""
        sources = []
        for name, ds in zip(self._names, self._datasets):
            src: Dict[str, Any] = dict(name=name, path=str(ds.path))
            if name in self._transforms:
                if stages is None:
                    raise ConfigError(f"source {name!r}: token sources take no transforms")
                src["transforms"] = stage_specs(self._transforms[name], stages)[0]
            if name in self._skip:
                src["max_skip_fraction"] = self._skip[name]
            sources.append(src)
        return dict(sources=sources, schedule=[dict(at=at, weights=w) for at, w in self._schedule], **self._given)

    @property
    def names(self) -> List[str]:
        """The sources' names, in order (a name's index is the ``source`` column's value)."""
        return list(self._names)

    @property
    def datasets(self) -> List[Dataset]:
        """The sources' datasets, in order."""
        return list(self._datasets)

    @property
    def schedule(self) -> List[Tuple[int, Any]]:
        """The weights from each step (or sample) on, as given (a list or a dict by name; an empty
        list: in proportion to the sources' samples)."""
        return [(at, w.copy()) for at, w in self._schedule]

    @property
    def path(self) -> str:
        """The sources, for ``repr`` (``web=s3://b/web, code=code-ds``)."""
        return ", ".join(f"{n}={d.path}" for n, d in zip(self._names, self._datasets))

    def __repr__(self) -> str:
        return f"Mixture({self.path}; schedule={self._schedule!r}, unit={self._given['unit']!r})"
