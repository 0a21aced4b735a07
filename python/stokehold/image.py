"""Image stages for :class:`stokehold.Loader`, mirroring torchvision's names.

They run natively on the loader's threads, without the GIL, as one fused stage: the crop is chosen
from the JPEG header, only the needed region is decoded, at the smallest DCT scale (1/8, 1/4, 1/2
or 1) that still covers the output, then resized (SIMD, bilinear with antialiasing), augmented,
and written straight into the batch tensor. Every random choice comes from the sample's own
generator, so output is the same whatever the thread count.

A chain needs a fixed output size: :class:`RandomResizedCrop`, or :class:`Resize` with a
``(height, width)``, or :class:`Resize` (shorter side) followed by :class:`CenterCrop`. It may end
with :class:`ToTensor` (uint8, the default) or :class:`Normalize` (float32 or float16)::

    train = [RandomResizedCrop(224), RandomHorizontalFlip(), ColorJitter(0.4, 0.4, 0.4)]
    val = [Resize(256), CenterCrop(224), Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    loader = stokehold.Loader(ds, 256, transforms={"image": train})
    batch["image"]  # uint8 [256, 3, 224, 224]
"""

import operator
from typing import Any, Dict, Optional, Sequence, Tuple, Union

__all__ = [
    "CenterCrop",
    "ColorJitter",
    "Grayscale",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Normalize",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "Resize",
    "ToTensor",
]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

Size = Union[int, Tuple[int, int], Sequence[int]]


_MAX_SIDE = 65535


def _side(v: Any) -> Optional[int]:
    """``v`` as an int from 1 to 65535 (numpy integers accepted), else None."""
    if isinstance(v, bool):
        return None
    try:
        n = operator.index(v)
    except TypeError:
        return None
    return n if 1 <= n <= _MAX_SIDE else None


def _size(size: Size, stage: str) -> Union[int, list]:
    """``size`` as the engine takes it (an int, or ``[height, width]``), checked here so that a bad
    value fails where it is written, naming the stage."""
    n = _side(size)
    if n is not None:
        return n
    hw = None
    if not isinstance(size, (int, str, bytes)):
        try:
            s = list(size)  # type: ignore[arg-type]
        except TypeError:
            s = []
        if len(s) == 2:
            h, w = _side(s[0]), _side(s[1])
            if h is not None and w is not None:
                hw = [h, w]
    if hw is None:
        raise ValueError(
            f"{stage}: size must be a positive int (a square, or the shorter side for Resize) or "
            f"(height, width), each from 1 to {_MAX_SIDE}; got {size!r}"
        )
    return hw


class _Stage:
    _name = ""

    def _params(self) -> Dict[str, Any]:
        return {}

    def _spec(self) -> Dict[str, Any]:
        return {"name": self._name, "params": self._params()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._spec() == self._spec()  # type: ignore[attr-defined]

    def __reduce__(self):
        return (_rebuild, (type(self), self._params()))


def _rebuild(cls, params):
    obj = cls.__new__(cls)
    obj.__dict__.update(params)
    return obj


class RandomResizedCrop(_Stage):
    """A random area fraction in ``scale`` and aspect ratio in ``ratio`` (log-uniform), resized to
    ``size`` (an int for a square, or ``(height, width)``), as torchvision's, fused with decoding."""

    _name = "random_resized_crop"

    def __init__(self, size: Size, scale: Tuple[float, float] = (0.08, 1.0), ratio: Tuple[float, float] = (3 / 4, 4 / 3)) -> None:
        self.size = _size(size, "RandomResizedCrop")
        self.scale = [float(scale[0]), float(scale[1])]
        self.ratio = [float(ratio[0]), float(ratio[1])]

    def _params(self) -> Dict[str, Any]:
        return {"size": self.size, "scale": self.scale, "ratio": self.ratio}


class Resize(_Stage):
    """An int resizes the shorter side to it (follow with :class:`CenterCrop`); ``(height,
    width)`` resizes the whole image to that size."""

    _name = "resize"

    def __init__(self, size: Size) -> None:
        self.size = _size(size, "Resize")

    def _params(self) -> Dict[str, Any]:
        return {"size": self.size}


class CenterCrop(_Stage):
    """The centre ``size`` of the image resized by the :class:`Resize` before it."""

    _name = "center_crop"

    def __init__(self, size: Size) -> None:
        self.size = _size(size, "CenterCrop")

    def _params(self) -> Dict[str, Any]:
        return {"size": self.size}


class RandomHorizontalFlip(_Stage):
    """Mirror the image with probability ``p``."""

    _name = "random_horizontal_flip"

    def __init__(self, p: float = 0.5) -> None:
        self.p = float(p)

    def _params(self) -> Dict[str, Any]:
        return {"p": self.p}


class ColorJitter(_Stage):
    """Random brightness, contrast and saturation factors from ``[max(0, 1 - s), 1 + s]``."""

    _name = "color_jitter"

    def __init__(self, brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0) -> None:
        self.brightness = float(brightness)
        self.contrast = float(contrast)
        self.saturation = float(saturation)

    def _params(self) -> Dict[str, Any]:
        return {"brightness": self.brightness, "contrast": self.contrast, "saturation": self.saturation}


class Grayscale(_Stage):
    """One channel of luma (ITU-R 601, as PIL's ``convert("L")``)."""

    _name = "grayscale"


class ToTensor(_Stage):
    """uint8 output in ``layout`` "CHW" (default, PyTorch's) or "HWC"; values 0..255."""

    _name = "to_tensor"

    def __init__(self, layout: str = "CHW") -> None:
        self.layout = layout

    def _params(self) -> Dict[str, Any]:
        return {"layout": self.layout}


class Normalize(_Stage):
    """Float output ``(v / 255 - mean) / std`` per channel, in ``dtype`` "float32" or "float16",
    ``layout`` "CHW" or "HWC"."""

    _name = "normalize"

    def __init__(self, mean: Sequence[float] = IMAGENET_MEAN, std: Sequence[float] = IMAGENET_STD, dtype: str = "float32", layout: str = "CHW") -> None:
        self.mean = [float(x) for x in mean]
        self.std = [float(x) for x in std]
        self.dtype = dtype
        self.layout = layout

    def _params(self) -> Dict[str, Any]:
        return {"mean": self.mean, "std": self.std, "dtype": self.dtype, "layout": self.layout}
