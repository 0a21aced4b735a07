"""Text stages for :class:`stokehold.Loader`: tokenization on the loader's native threads, for
datasets of text too small to be worth packing (``stokehold pack --tokenizer`` and
:class:`stokehold.SequenceLoader` are the way for pre-training corpora)::

    loader = stokehold.Loader(ds, 64, transforms={"text": [Tokenize("tokenizer.json", max_length=128)]})
    batch["text"]  # int32 [64, 128], padded with pad_id

Without ``max_length`` each sample is a 1-d array of its own length (a list column).
"""

import os
from typing import Any, Dict, Optional, Union

from ._native import Tokenizer

__all__ = ["Tokenize", "Tokenizer"]


class Tokenize:
    """Tokenize a string field with a Hugging Face ``tokenizer.json`` (any model), natively.

    :param tokenizer: path of the ``tokenizer.json``.
    :param max_length: truncate to this many ids and pad to it (a fixed ``[batch, max_length]``
        column); ``None`` gives variable-length arrays.
    :param dtype: ``"int32"`` or ``"int64"``.
    :param pad_id: the padding id (default: the id of ``<pad>`` or ``[PAD]``, else 0).
    :param bos: a token name put before the text (e.g. ``"<s>"``).
    :param eos: a token name put after it (e.g. ``"</s>"``).
    The tokenizer's own post-processor (special tokens) is not applied: ``bos``/``eos`` are explicit.
    """

    def __init__(
        self,
        tokenizer: Union[str, "os.PathLike[str]"],
        max_length: Optional[int] = None,
        *,
        dtype: str = "int32",
        pad_id: Optional[int] = None,
        bos: Optional[str] = None,
        eos: Optional[str] = None,
    ) -> None:
        self.tokenizer = os.fspath(tokenizer)
        self.max_length = max_length
        self.dtype = dtype
        self.pad_id = pad_id
        self.bos = bos
        self.eos = eos

    def _params(self) -> Dict[str, Any]:
        return {
            "tokenizer": self.tokenizer,
            "max_length": self.max_length,
            "dtype": self.dtype,
            "pad_id": self.pad_id,
            "bos": self.bos,
            "eos": self.eos,
        }

    def _spec(self) -> Dict[str, Any]:
        return {"name": "tokenize", "params": self._params()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._params().items())
        return f"Tokenize({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenize) and other._spec() == self._spec()
