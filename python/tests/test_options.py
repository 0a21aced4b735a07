"""The loaders' option table (stokehold/_options.py) against everything that spells the options
again: the fronts' signatures and docstrings (which are also the type stub), docs/python.md, and
the engine's own defaults (Rust's LoaderConfig). Each test fails when one of them drifts."""

import inspect
import json
import pickle
from pathlib import Path

import pytest

import stokehold
from stokehold import ConfigError, Loader, SequenceLoader, _native, _options
from stokehold._options import LOADER, MIXTURE, SEQUENCE

from _loader_helpers import write

DOCS = Path(__file__).resolve().parents[2] / "docs" / "python.md"
FRONTS = {LOADER: Loader, SEQUENCE: SequenceLoader}


@pytest.mark.parametrize("front", [LOADER, SEQUENCE])
def test_each_front_takes_exactly_its_options_with_the_table_defaults_and_documents_each(front):
    cls = FRONTS[front]
    params = inspect.signature(cls.__init__).parameters
    keyword = {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    table = {o.name: o.default for o in _options.options(front)}
    assert keyword == table
    doc = inspect.getdoc(cls)
    missing = [n for n in table if f":param {n}:" not in doc]
    assert not missing, f"{front}'s docstring does not document {missing}"


def test_docs_python_md_lists_each_front_as_the_table_does():
    text = DOCS.read_text()
    for front in (LOADER, SEQUENCE):
        assert _options.listing(front) in text, (
            f"docs/python.md's listing of {front} differs from the option table: paste\n"
            + _options.listing(front)
        )


def test_the_python_defaults_are_the_engines_own_but_where_the_front_chooses_auto(tmp_path):
    ds = write(tmp_path / "ds", 64)
    given = Loader(ds, 32, rank=0, world_size=1).config["loader"]
    bare = json.dumps({"loader": {"batch_size": 32}, "samples": {"kind": "records"}})
    engine = json.loads(_native._Engine(ds, bare, [], False).config_json)["loader"]
    assert given.keys() == engine.keys()
    differ = {k for k in engine if given[k] != engine[k]}
    # threads="auto" and prefetch="auto" are the fronts' defaults; the engine's are fixed
    assert differ == {"autotune", "prefetch_auto"}, {k: (given[k], engine[k]) for k in differ}


@pytest.mark.parametrize("option", [o.name for o in _options.options(LOADER) if o.kind == "bool"])
def test_a_bool_option_given_anything_but_a_bool_is_refused_by_name(tmp_path, option):
    ds = write(tmp_path / "ds", 64)
    with pytest.raises(ConfigError, match=f"{option} must be True or False, got 'False'"):
        Loader(ds, 8, rank=0, world_size=1, **{option: "False"})


def test_sequence_options_are_checked_like_the_loaders(tmp_path):
    # the options are checked before the engine asks for a token dataset
    ds = write(tmp_path / "ds", 64)
    for option in ("position_ids", "segment_ids", "drop_last", "profile"):
        with pytest.raises(ConfigError, match=f"{option} must be True or False"):
            SequenceLoader(ds, 8, 4, rank=0, world_size=1, **{option: 1})
    for option in ("bucket", "max_len"):
        with pytest.raises(ConfigError, match=f"{option} must be an int >= 1, got 0"):
            SequenceLoader(ds, 8, 4, rank=0, world_size=1, **{option: 0})
    with pytest.raises(ConfigError, match="cache_dir must be a path"):
        SequenceLoader(ds, 8, 4, rank=0, world_size=1, cache_dir=3)


def test_a_pickled_loader_is_rebuilt_from_its_engine_configuration_not_from_its_arguments(tmp_path, monkeypatch):
    ds = write(tmp_path / "ds", 200)
    loader = Loader(ds, 16, seed=3, shuffle="shard_block", threads=1, include_ids=True, rank=0, world_size=1)
    next(iter(loader))
    data = pickle.dumps(loader)

    # the constructor is not run again: an unpickled loader never re-checks or re-converts options
    def refuse(*a, **k):
        raise AssertionError("unpickling ran Loader.__init__")

    monkeypatch.setattr(Loader, "__init__", refuse)
    clone = pickle.loads(data)
    assert clone.config == loader.config and clone.state_dict() == loader.state_dict()
    assert (clone.batch_size, clone.rank, clone.world_size) == (16, 0, 1)
    assert [b["id"].tolist() for b in clone] == [b["id"].tolist() for b in loader]
    loader.close()
    clone.close()


# --- the mixture's options: Python, the CLI's mixture file and the engine's MixtureSpec ---------

MIXTURE_DOCS = DOCS.parent / "mixtures.md"


def test_the_mixture_takes_exactly_its_options_with_the_table_defaults_and_documents_each():
    params = inspect.signature(stokehold.Mixture.__init__).parameters
    given = {n: p.default for n, p in params.items() if n not in ("self", "sources")}
    assert given == {o.name: o.default for o in _options.options(MIXTURE)}
    doc = inspect.getdoc(stokehold.Mixture)
    missing = [n for n in given if f":param {n}:" not in doc]
    assert not missing, f"Mixture's docstring does not document {missing}"


def test_the_docs_show_the_mixtures_options_in_their_three_spellings_as_the_table_does():
    assert _options.mixture_table() in MIXTURE_DOCS.read_text(), (
        "docs/mixtures.md's table of options differs from the option table: paste\n" + _options.mixture_table()
    )
    assert _options.listing(MIXTURE) in DOCS.read_text(), (
        "docs/python.md's listing of Mixture differs from the option table: paste\n" + _options.listing(MIXTURE)
    )


def test_the_mixture_defaults_and_keys_are_the_engines_own(tmp_path):
    a, b = write(tmp_path / "a", 8), write(tmp_path / "b", 8)
    keys = {_options.spec_key(o): o for o in _options.options(MIXTURE)}
    own = {k: o for k, o in keys.items() if "[" not in k}  # the spec's own keys
    each = {k.split("].", 1)[1]: o for k, o in keys.items() if k.startswith("sources[].")}
    # a bare spec: the engine fills in its own defaults
    bare = {"loader": {"batch_size": 2}, "samples": {"kind": "records"},
            "mixture": {"sources": [{"name": "a"}, {"name": "b"}], "schedule": [{"at": 0, "weights": []}]}}
    engine = json.loads(_native._Engine([a, b], json.dumps(bare), [], False).config_json)["mixture"]
    assert set(engine) == set(own) | {"sources"}
    for key, o in own.items():
        if key != "schedule":
            assert engine[key] == o.default, (o.name, engine[key], o.default)
    # every key the table gives a source is one the engine takes (it refuses unknown ones)
    bare["mixture"]["sources"][0].update({"transforms": {}, "max_skip_fraction": 0.5})
    assert set(each) == {"transforms", "max_skip_fraction"}
    source = json.loads(_native._Engine([a, b], json.dumps(bare), [], False).config_json)["mixture"]["sources"][0]
    assert set(each) <= set(source)
    # and Python's Mixture, given nothing, asks the engine for exactly its defaults
    made = Loader(stokehold.Mixture([a, b]), 2, rank=0, world_size=1)
    assert {k: v for k, v in made.config["mixture"].items() if k != "sources"} == {k: v for k, v in engine.items() if k != "sources"}
    made.close()


def test_the_mixtures_checks_come_from_the_table_with_their_messages():
    with pytest.raises(ConfigError, match=r'^schedule_unit must be "steps" or "samples", got \'days\'$'):
        stokehold.Mixture({}, schedule_unit="days")
    with pytest.raises(ConfigError, match=r'^on_change must be "refuse" or "reblend", got None$'):
        stokehold.Mixture({}, on_change=None)
    with pytest.raises(ConfigError, match=r"^epoch_samples must be a positive int \(or None\), got 0$"):
        stokehold.Mixture({}, epoch_samples=0)
    with pytest.raises(ConfigError, match=r"^source_column must be True or False, got 'yes'$"):
        stokehold.Mixture({}, source_column="yes")


def test_an_empty_mixture_is_refused_by_the_engine_as_for_every_front(tmp_path):
    with pytest.raises(ConfigError, match="a mixture needs at least one source"):
        Loader(stokehold.Mixture({}), 2, rank=0, world_size=1)
