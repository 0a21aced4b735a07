"""Loaders behave as Python objects do: ``help()`` documents every parameter at run time, and
iterators of converted batches keep their length hint. (``len(loader)``, which progress bars
such as tqdm take their total from, and ``repr(loader)`` already worked.)"""

import inspect
import operator
import os
import pydoc
import sys

import pytest

from stokehold import Loader, SequenceLoader

sys.path.insert(0, os.path.dirname(__file__))
from _loader_helpers import write  # noqa: E402


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write(tmp_path_factory.mktemp("feel") / "ds", 10)


@pytest.mark.parametrize("cls", [Loader, SequenceLoader])
def test_help_documents_every_parameter(cls):
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    missing = [p for p in params if f":param {p}:" not in text]
    assert not missing, f"help({cls.__name__}) does not document {missing}"


def test_converted_batches_keep_the_length_hint(ds):
    pytest.importorskip("torch")
    loader = Loader(ds, 3, to="torch")
    it = iter(loader)
    assert operator.length_hint(it) == 3
    assert type(next(it)["label"]).__name__ == "Tensor"
    assert operator.length_hint(it) == 2

