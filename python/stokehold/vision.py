"""Vision-language image processors, natively on the loader's threads (``docs/vision.md``)::

    from stokehold.vision import Qwen2VL
    proc = Qwen2VL(min_pixels=256 * 28 * 28, max_pixels=1280 * 28 * 28)
    pixel_values, image_grid_thw = proc([open("cat.jpg", "rb").read()])
    proc.num_tokens(640, 480)  # the image's tokens, from its size alone (no decode)

``Qwen2VL`` gives what ``transformers``' ``Qwen2VLImageProcessor`` gives (Qwen2.5-VL and Qwen3-VL
take the same parameters): a JPEG decoded at full size gives the PIL processor's values bit for
bit; with ``dct_scaling`` (the default) a JPEG at least twice the target in both axes is decoded
at 1/2, 1/4 or 1/8 scale first, within the bound ``docs/vision.md`` states.

As a loader stage, ``Loader(ds, 16, transforms={"image": Qwen2VL(...)})`` runs it on the loader's
threads, and each batch holds what the processor's call returns for the batch's images:
``batch["image"]`` is ``pixel_values`` (float32 ``[patches, row]``, the images' rows one after
another in the model's order) and ``batch["image_grid_thw"]`` the grids (int64 ``[B, 3]``),
assembled in Rust into a recycled buffer (no per-image arrays, no concatenation in Python).
:func:`collate` turns a list of per-image patch arrays (``[grid_h / m, grid_w / m, m * m, row]``)
into the same pair.

``FixedSize(384)`` is the fixed-size processor of SigLIP/CLIP-style encoders (resize to a square
with Pillow's bicubic, rescale, normalise; ``pad=`` a colour pads to a square first, as LLaVA's
``expand2square``): float32 ``[images, 3, size, size]`` from a call, ``[B, 3, size, size]`` as a
loader stage.
"""

from typing import Any, Sequence, Tuple

import numpy as np

from ._native import FixedSize, Qwen2VL

__all__ = ["FixedSize", "Qwen2VL", "collate"]


def collate(images: Sequence[Any], merge_size: int = 2) -> Tuple[Any, Any]:
    """``(pixel_values, image_grid_thw)`` of per-image patch arrays ``[grid_h / m, grid_w / m,
    m * m, row]`` (rows in the model's order): float32 ``[patches, row]`` (the images' rows one
    after the other) and int64 ``[images, 3]``, what ``Qwen2VLImageProcessor`` returns for the
    same images. (A loader's ``Qwen2VL`` column is delivered as that pair already.)"""
    if isinstance(images, np.ndarray) and images.ndim == 2:
        raise TypeError(
            "collate() takes a list of per-image patch arrays; a loader's Qwen2VL column is "
            "already pixel_values, with its grids in batch[<column> + '_grid_thw']"
        )
    arrays = [np.asarray(a) for a in images]
    for a in arrays:
        if a.ndim != 4 or a.shape[2] % (merge_size * merge_size):
            raise ValueError(f"not a Qwen2VL stage output of merge_size {merge_size}: shape {a.shape}")
    rows = [a.reshape(-1, a.shape[-1]) for a in arrays]
    grids = [(a.shape[2] // (merge_size * merge_size), a.shape[0] * merge_size, a.shape[1] * merge_size) for a in arrays]
    pixel_values = np.concatenate(rows) if rows else np.zeros((0, 0), np.float32)
    return pixel_values, np.asarray(grids, dtype=np.int64).reshape(-1, 3)
