"""Transform stages as the engine takes them: one function, :func:`stage_specs`, that the loaders
and a :class:`~stokehold.Mixture`'s sources share (a leaf: it imports nothing of the package)."""

from typing import Any, Dict, Mapping, Optional, Tuple

__all__ = ["stage_specs"]


def stage_specs(transforms: Optional[Mapping[str, Any]], stages: Optional[list] = None) -> Tuple[Dict[str, Any], list]:
    """Each field's stages as specs (``{"name", "params"}``), and the Python callables among them
    as ``(callable, rng, name)`` tuples, referred to by index from ``{"name": "python"}`` specs
    (appended to ``stages`` when given: a mixture's sources share one list)."""
    specs: Dict[str, Any] = {}
    stages = [] if stages is None else stages
    for field, value in (transforms or {}).items():
        if not isinstance(field, str):
            raise TypeError(f"transforms must map field names (str) to lists of stages, got key {field!r}")
        items = [value] if hasattr(value, "_spec") or callable(value) else list(value)
        out = []
        for stage in items:
            if hasattr(stage, "_spec"):
                out.append(stage._spec())
                continue
            if hasattr(stage, "_stokehold_callable"):
                stages.append((stage._stokehold_callable, stage._stokehold_rng, stage.name))
            elif callable(stage):
                stages.append((stage, None, getattr(stage, "__name__", "callable")))
            else:
                raise TypeError(
                    f"field {field!r}: a transform stage must be a stokehold.transforms.Lambda, a callable, "
                    f"or a built-in stage object (one with _spec()), got {stage!r}"
                )
            out.append({"name": "python", "params": {"index": len(stages) - 1}})
        specs[field] = out
    _resolve_clocks(specs)
    return specs, stages


def _resolve_clocks(specs: Dict[str, Any]) -> None:
    """Clips given ``sync=True`` on several fields share one clock: the first of those fields
    (in the order given); each synced clip's ``sync`` becomes ``clock: <that field>``."""
    clock = None
    for field, chain in specs.items():
        for spec in chain:
            params = spec.get("params") or {}
            if spec.get("name") == "clip" and params.pop("sync", False):
                clock = field if clock is None else clock
                params["clock"] = clock
