"""Transform stages for :class:`stokehold.Loader` (``transforms={"field": [stage, ...]}``).

Built-in stages (image decoding, crops, flips, ...) run natively on the loader's threads without
the GIL. :class:`Lambda` runs any Python callable as a stage, for what stokehold does not ship;
it holds the GIL while it runs (see its documentation for the cost).
"""

from typing import Any, Callable, Optional

__all__ = ["Lambda"]

_RNG_MODES = (None, "seed", "numpy")


class Lambda:
    """A Python callable as a transform stage.

    ``fn(value)`` receives the field's value as :class:`stokehold.Dataset` returns it (``bytes``,
    ``str``, ``int``, ``float`` or a numpy array; or the previous stage's result) and returns the
    new value: ``bytes``, ``str``, ``int``, ``float`` or a numpy array (uint8, int32, int64,
    float16, float32 or float64). A column with a Lambda stage comes out as a list, one value per
    sample.

    For random augmentations, ask for the sample's own random numbers, so that the output stays a
    pure function of (seed, epoch, sample) whatever the thread count:

    - ``rng="seed"``: ``fn(value, seed)``, with a 64-bit integer seed;
    - ``rng="numpy"``: ``fn(value, rng)``, with a fresh ``numpy.random.Generator`` (PCG64) seeded
      from it (creating it costs a few microseconds).

    **Cost.** The callable runs on the loader's worker threads but holds the GIL, so Python
    stages of all threads run one at a time, and they compete with the training loop for the
    GIL. Expect roughly the throughput of a single Python thread for the Python part (plus about
    1-2 microseconds per call to convert the value in and out). Keep heavy work in built-in
    stages, or in numpy calls that release the GIL.

    :param fn: the callable.
    :param rng: ``None`` (default), ``"seed"`` or ``"numpy"``.
    :param name: the stage's name in statistics and errors (default: ``fn.__name__``).
    """

    __slots__ = ("_stokehold_callable", "_stokehold_rng", "name")

    def __init__(self, fn: Callable[..., Any], *, rng: Optional[str] = None, name: Optional[str] = None) -> None:
        if not callable(fn):
            raise TypeError(f"Lambda needs a callable, got {type(fn).__name__}")
        if rng not in _RNG_MODES:
            raise ValueError(f'rng must be None, "seed" or "numpy", got {rng!r}')
        self._stokehold_callable = fn
        self._stokehold_rng = rng
        self.name = name if name is not None else getattr(fn, "__name__", "lambda")

    @property
    def fn(self) -> Callable[..., Any]:
        """The callable."""
        return self._stokehold_callable

    @property
    def rng(self) -> Optional[str]:
        """``None``, ``"seed"`` or ``"numpy"``."""
        return self._stokehold_rng

    def __repr__(self) -> str:
        extra = f", rng={self._stokehold_rng!r}" if self._stokehold_rng else ""
        return f"Lambda({self.name}{extra})"

    def __reduce__(self):
        return (_make_lambda, (self._stokehold_callable, self._stokehold_rng, self.name))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Lambda)
            and other._stokehold_callable == self._stokehold_callable
            and other._stokehold_rng == self._stokehold_rng
            and other.name == self.name
        )

    __hash__ = None  # type: ignore[assignment]


def _make_lambda(fn, rng, name):
    return Lambda(fn, rng=rng, name=name)
