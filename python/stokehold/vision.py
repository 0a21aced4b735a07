"""Vision-language image processors, natively on the loader's threads (``docs/vision.md``)::

    from stokehold.vision import Qwen2VL
    proc = Qwen2VL(min_pixels=256 * 28 * 28, max_pixels=1280 * 28 * 28)
    pixel_values, image_grid_thw = proc([open("cat.jpg", "rb").read()])
    proc.num_tokens(640, 480)  # the image's tokens, from its size alone (no decode)

``Qwen2VL`` gives what ``transformers``' ``Qwen2VLImageProcessor`` gives (Qwen2.5-VL and Qwen3-VL
take the same parameters): a JPEG decoded at full size gives the PIL processor's values bit for
bit; with ``dct_scaling`` (the default) a JPEG at least twice the target in both axes is decoded
at 1/2, 1/4 or 1/8 scale first, within the bound ``docs/vision.md`` states.
"""

from ._native import Qwen2VL

__all__ = ["Qwen2VL"]
