"""LeRobot datasets read in place (``docs/video.md``, "LeRobot datasets")::

    import stokehold
    from stokehold.lerobot import LeRobotDataset

    ds = LeRobotDataset("path/to/lerobot_dataset",
                        delta_timestamps={"observation.images.front": [-0.2, 0.0],
                                          "action": [0.0, 0.1, 0.2]})
    loader = stokehold.Loader(ds, batch_size=32, threads=8,
                              fields=["observation.images.front", "observation.state", "action"])
    for batch in loader:
        frames = batch["observation.images.front"]      # uint8 [B, 2, 3, H, W]
        pad = batch["observation.images.front_is_pad"]  # bool [B, 2]: outside the episode

``stokehold.Loader("path/to/lerobot_dataset", ...)`` opens it too (a folder holding
``meta/info.json``). Layouts v3.0 (several episodes per data and video file) and v2.1 / v2.0 (one
file per episode). A sample is one step: its numeric columns and, for each camera loaded, the
frame nearest the step's timestamp (within ``tolerance_s``), decoded from the episode's video
file in place. Only the cameras in ``fields`` are opened and decoded.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._native import ConfigError

__all__ = ["LeRobotDataset", "is_lerobot"]


def is_lerobot(path: Any) -> bool:
    """Whether ``path`` is a local folder holding a LeRobot dataset (``meta/info.json``)."""
    try:
        return os.path.isfile(os.path.join(os.fspath(path), "meta", "info.json"))
    except TypeError:
        return False


class LeRobotDataset:
    """A LeRobot dataset's folder, read in place by :class:`stokehold.Loader`.

    :param path: the folder (it holds ``meta/info.json``, ``data/`` and ``videos/``).
    :param delta_timestamps: feature -> offsets in seconds from the sampled step, as LeRobot's
        ``LeRobotDataset(delta_timestamps=...)``: each feature then holds one value (or frame)
        per offset, clamped to the episode's steps, with ``<feature>_is_pad`` (bool, True where
        the offset fell outside the episode). Offsets must be multiples of ``1 / fps`` within
        ``tolerance_s``.
    :param tolerance_s: the largest distance (seconds) between a query time and the frame
        chosen for it (LeRobot's default, 1e-4).
    """

    #: the batch's window masks end so; the loader gives them as bool
    _pad_suffix = "_is_pad"

    def __init__(
        self,
        path: Union[str, "os.PathLike[str]"],
        delta_timestamps: Optional[Mapping[str, Sequence[float]]] = None,
        tolerance_s: float = 1e-4,
    ) -> None:
        self.path = os.fspath(path)
        info = os.path.join(self.path, "meta", "info.json")
        try:
            with open(info, encoding="utf-8") as f:
                self.info: Dict[str, Any] = json.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{info}: no such file: a LeRobot dataset's folder holds meta/info.json") from None
        except ValueError as e:
            raise ConfigError(f"{info}: not JSON: {e}") from None
        if "codebase_version" not in self.info:
            raise ConfigError(f"{info}: no \"codebase_version\": not a LeRobot info.json")
        self.delta_timestamps = {
            str(k): [float(x) for x in v] for k, v in (delta_timestamps or {}).items()
        }
        self.tolerance_s = float(tolerance_s)

    @property
    def version(self) -> str:
        """``codebase_version`` (``"v3.0"``, ``"v2.1"``)."""
        return str(self.info["codebase_version"])

    @property
    def fps(self) -> float:
        """Steps per second."""
        return float(self.info["fps"])

    @property
    def num_frames(self) -> Optional[int]:
        """Steps in the dataset, as ``info.json`` says (``total_frames``)."""
        n = self.info.get("total_frames")
        return int(n) if n is not None else None

    @property
    def num_episodes(self) -> Optional[int]:
        """Episodes in the dataset, as ``info.json`` says (``total_episodes``)."""
        n = self.info.get("total_episodes")
        return int(n) if n is not None else None

    @property
    def video_keys(self) -> List[str]:
        """The cameras (features of dtype ``video``)."""
        return [k for k, f in self.info.get("features", {}).items() if f.get("dtype") == "video"]

    def _spec(self, fields: Optional[List[str]]) -> Dict[str, Any]:
        spec: Dict[str, Any] = dict(
            kind="lerobot", root=os.path.abspath(self.path),
            delta_timestamps=self.delta_timestamps, tolerance_s=self.tolerance_s,
        )
        if fields is not None:
            spec["fields"] = fields
        return spec

    def __repr__(self) -> str:
        return f"LeRobotDataset({self.path!r}, {self.version}, cameras={self.video_keys})"
