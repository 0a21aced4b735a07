"""Frame-exact video frames and clips from MP4, Matroska and WebM files
(``docs/video.md``)::

    from stokehold.video import VideoFile, Clip

    v = VideoFile("episode.mp4")
    frames, pts = v.frames_played_at([0.0, 0.5, 1.0])   # uint8 [T, H, W, 3], float64 [T]
    clip = Clip(frames=16, stride=2, start="random")
    for seconds in clip.timestamps(v, seed=0, sample=7):
        frames, pts = v.frames_played_at(seconds)

The frames are those torchcodec's ``VideoDecoder(path).get_frames_played_at(seconds)`` returns
(same FFmpeg). The frame index is read from the file's ``moov`` box (MP4) or its element headers
(Matroska); decoding feeds the packets from the keyframe before the first wanted frame to the last
one to FFmpeg's libavcodec, which is loaded at run time: ``import stokehold`` works without FFmpeg,
and decoding without it raises ``StokeholdError`` saying how to install it (``apt install
ffmpeg``, ``conda install -c conda-forge ffmpeg``).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ._native import VideoFile as _VideoFile

__all__ = ["Clip", "VideoFile", "decode_clip"]


class VideoFile(_VideoFile):
    """An MP4, Matroska or WebM file's frame index (``pts_seconds``, ``keyframes``, ``codec``, ``size``,
    ``begin_seconds``, ``end_seconds``) and a decoder for its frames (``frames_played_at``,
    ``frames_at``). ``threads``: FFmpeg's own decoding threads (1: only the calling thread)."""


class Clip:
    """The clip sampling rule: ``frames`` per clip, spaced every ``stride``-th frame or at
    ``fps`` frames a second; ``start="random"`` (one clip, its start drawn from ``seed`` and the
    sample id: the same whatever the thread count), ``"uniform"`` (``clips`` clips evenly spread,
    1: the middle one) or ``"all"`` (every clip, back to back).

    As a loader stage, first in a video field's list (``transforms={"video": [Clip(16, stride=2),
    Resize(128), CenterCrop(112), Normalize(...)]}``): one clip per sample (``"random"`` or
    ``"uniform"`` with ``clips=1``), drawn from (seed, epoch, sample); the batch holds the frames,
    ``[B, T, 3, H, W]``, and ``batch["video_timestamps"]``, float64 ``[B, T]``.

    ``sync=True`` on the clips of several video fields (a robot episode's cameras): one set of
    timestamps per sample, drawn from the video of the first of those fields in the
    ``transforms`` dict (the clock); every synced field's frames are those played at the same
    times (``get_frames_played_at``), whatever each camera's frame rate. Synced clips take the
    same rule (``frames``, ``stride`` or ``fps``, ``start``)."""

    def __init__(
        self,
        frames: int = 16,
        stride: Optional[int] = None,
        fps: Optional[float] = None,
        start: str = "random",
        clips: int = 1,
        sync: bool = False,
    ):
        self.frames, self.stride, self.fps, self.start, self.clips = frames, stride, fps, start, clips
        if not isinstance(sync, bool):
            raise TypeError(f"sync must be True or False, got {sync!r}")
        self.sync = sync

    def timestamps(self, video: VideoFile, seed: int = 0, sample: int = 0) -> np.ndarray:
        """float64 ``[clips, frames]``: each clip's timestamps in seconds, for
        ``video.frames_played_at``. A video shorter than one clip raises ``ValueError``."""
        t = video._clip_timestamps(
            self.frames, self.stride, self.fps, self.start, self.clips, seed, sample
        )
        return np.asarray(t, dtype=np.float64).reshape(len(t), self.frames)

    def _spec(self) -> dict:
        # as a loader's stage (transforms={"video": [Clip(...), Resize(...), ...]}): one clip per
        # sample, its frames [T, 3, H, W] and batch["<field>_timestamps"] float64 [T]
        params = {"frames": self.frames, "start": self.start, "clips": self.clips}
        if self.stride is not None:
            params["stride"] = self.stride
        if self.fps is not None:
            params["fps"] = self.fps
        if self.sync:
            # replaced by the clock field's name when the loader's stages are gathered
            params["sync"] = True
        return {"name": "clip", "params": params}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._spec() == self._spec()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        step = f"fps={self.fps}" if self.fps is not None else f"stride={self.stride or 1}"
        sync = ", sync=True" if self.sync else ""
        return f"Clip(frames={self.frames}, {step}, start={self.start!r}, clips={self.clips}{sync})"


def decode_clip(path: str, seconds: Sequence[float]) -> Tuple[np.ndarray, np.ndarray]:
    """The frames of ``path`` played at ``seconds``: uint8 ``[T, H, W, 3]`` and their
    presentation times, float64 ``[T]``."""
    return VideoFile(path).frames_played_at(list(seconds))
