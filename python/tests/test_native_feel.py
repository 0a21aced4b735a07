"""Loaders behave as Python objects do: ``help()`` documents every parameter at run time (the same
words as the stub), and iterators of converted batches keep their length hint. (``len(loader)``,
which progress bars such as tqdm take their total from, and ``repr(loader)`` already worked.)"""

import ast
import inspect
import operator
import os
import pydoc
import sys

import pytest

import stokehold
from stokehold import Loader, SequenceLoader

sys.path.insert(0, os.path.dirname(__file__))
from _loader_helpers import write  # noqa: E402

STUB = os.path.join(os.path.dirname(stokehold.__file__), "__init__.pyi")
# the public classes and functions written in Python (Dataset and ShardWriter are native)
PYTHON_DEFINED = ("Loader", "SequenceLoader", "default_rank_world_size")


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write(tmp_path_factory.mktemp("feel") / "ds", 10)


def stub_docs():
    """name or Class.member -> docstring, for everything in the stub that has one."""
    tree = ast.parse(open(STUB, encoding="utf-8").read())
    docs = {}
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in PYTHON_DEFINED:
            docs[node.name] = ast.get_docstring(node)
            for member in getattr(node, "body", []) if isinstance(node, ast.ClassDef) else []:
                if isinstance(member, ast.FunctionDef) and ast.get_docstring(member) is not None:
                    docs[f"{node.name}.{member.name}"] = ast.get_docstring(member)
    return docs


def runtime_doc(name):
    cls_name, _, member = name.partition(".")
    obj = getattr(stokehold, cls_name)
    if member:
        # the attribute as defined on the class or a base (a property stays a property)
        obj = next(c.__dict__[member] for c in obj.__mro__ if member in c.__dict__)
    return inspect.cleandoc(obj.__doc__) if obj.__doc__ else None


def test_runtime_docstrings_are_the_stubs():
    docs = stub_docs()
    assert {"Loader", "Loader.load_state_dict", "SequenceLoader.stats"} <= set(docs)
    differ = [name for name, doc in docs.items() if runtime_doc(name) != doc]
    assert not differ, f"runtime docstrings differ from __init__.pyi: {differ}"


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

