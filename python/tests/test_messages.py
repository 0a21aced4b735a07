"""What a newcomer sees when an argument is wrong: the message names the option, what was wrong
with it and what to give instead (no Rust type names, no serde or ``Some(...)`` wording)."""

import errno
import os
import sys

import numpy as np
import pytest

from stokehold import ConfigError, Dataset, IncompatibleStateError, Loader, SchemaError, SequenceLoader, ShardWriter, StokeholdIOError
from stokehold.image import CenterCrop, RandomResizedCrop, Resize

sys.path.insert(0, os.path.dirname(__file__))
from _loader_helpers import write  # noqa: E402

N = 10


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write(tmp_path_factory.mktemp("messages") / "ds", N)


@pytest.mark.parametrize("seed", [-1, 2**64, 1.5, "0", True])
def test_a_seed_out_of_range_names_the_option_and_the_range(ds, seed):
    with pytest.raises(ConfigError) as e:
        Loader(ds, 2, seed=seed)
    assert str(e.value) == f"seed must be an int from 0 to 2**64 - 1 (e.g. seed=0), got {seed!r}"


def test_numpy_integers_are_ints(ds):
    loader = Loader(ds, 2, seed=np.uint64(2**64 - 1), rank=np.int64(1), world_size=np.int32(2))
    assert loader.config["loader"]["seed"] == 2**64 - 1 and (loader.rank, loader.world_size) == (1, 2)


def test_other_negative_ints_name_their_option(ds):
    with pytest.raises(ConfigError, match=r"^world_size must be the number of processes loading, an int >= 1, got -2$"):
        Loader(ds, 2, rank=0, world_size=-2)
    with pytest.raises(ConfigError, match=r"^rank must be this process's rank, an int from 0 to world_size - 1 \(1\), got -1$"):
        Loader(ds, 2, rank=-1, world_size=2)
    with pytest.raises(ConfigError, match=r"^shuffle_window must be a number of shards >= 1, got -1$"):
        Loader(ds, 2, shuffle="shard_block", shuffle_window=-1)
    loader = Loader(ds, 2)
    with pytest.raises(ConfigError, match=r"^epoch must be an int >= 0 \(the first epoch is 0\), got -1$"):
        loader.set_epoch(-1)


def test_a_rank_outside_the_world_is_refused_naming_rank_world_size_and_the_range(ds, monkeypatch):
    # the engine's check (LoaderConfig::validate), for every front, and for RANK / WORLD_SIZE
    # from the environment too
    for rank in (2, 5):
        expected = rf"^invalid configuration: rank {rank} is out of range for world_size 2: ranks are numbered 0 to world_size - 1$"
        with pytest.raises(ConfigError, match=expected):
            Loader(ds, 2, rank=rank, world_size=2)
        with pytest.raises(ConfigError, match=expected):
            SequenceLoader(ds, 8, 2, rank=rank, world_size=2)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match=r"^invalid configuration: rank 3 is out of range for world_size 2: "):
        Loader(ds, 2)


@pytest.mark.parametrize(
    "make, given",
    [
        (lambda: RandomResizedCrop(0), "0"),
        (lambda: RandomResizedCrop((224, -1)), "(224, -1)"),
        (lambda: Resize(70000), "70000"),
        (lambda: CenterCrop("224"), "'224'"),
    ],
)
def test_an_image_size_out_of_range_fails_where_it_is_written(make, given):
    with pytest.raises(ValueError) as e:
        make()
    msg = str(e.value)
    assert "size must be a positive int" in msg and msg.endswith(f"each from 1 to 65535; got {given}"), msg
    assert "Some(" not in msg and "Number(" not in msg


def test_load_state_dict_of_not_a_state_says_what_it_needs(ds):
    loader = Loader(ds, 2)
    for bad in (None, 5, [("position", 0)]):
        with pytest.raises(TypeError) as e:
            loader.load_state_dict(bad)
        msg = str(e.value)
        assert msg.startswith("load_state_dict needs a state that state_dict() returned (a dict, or its JSON string), got "), msg
        assert type(bad).__name__ in msg


def test_a_batch_larger_than_the_dataset_with_drop_last_is_refused(ds):
    with pytest.raises(ConfigError) as e:
        Loader(ds, N + 1)
    msg = str(e.value)
    assert msg.startswith(f"batch_size {N + 1} is more than the {N} samples of an epoch, and drop_last=True"), msg
    assert f"use batch_size <= {N}, or drop_last=False" in msg
    # two ranks: the step is batch_size x world_size
    with pytest.raises(ConfigError, match=rf"^batch_size 6 x world_size 2 = 12 is more than the {N} samples .* use batch_size <= 5,"):
        Loader(ds, 6, rank=0, world_size=2)
    # more ranks than samples: the number of ranks is what to change (not "batch_size <= 0")
    with pytest.raises(ConfigError) as e:
        Loader(ds, 1, rank=0, world_size=N * 100)
    msg = str(e.value)
    assert msg.startswith(f"world_size {N * 100} is more than the {N} samples of an epoch"), msg
    assert f"world_size <= {N}" in msg and "drop_last=False" in msg and "<= 0" not in msg, msg
    # what the message offers works
    assert len(Loader(ds, N)) == 1 and len(Loader(ds, 5, rank=1, world_size=2)) == 1
    assert len(Loader(ds, 1, rank=0, world_size=N * 100, drop_last=False)) == 1
    padded = Loader(ds, N + 1, drop_last=False, include_ids=True)
    (batch,) = list(padded)
    assert len(batch["id"]) == N + 1 and batch["is_padding"].sum() == 1


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("shard_size", -1, "shard_size must be a number of bytes >= 1 (e.g. 256 * 2**20), got -1"),
        ("shard_size", 0, "shard_size must be a number of bytes >= 1 (e.g. 256 * 2**20), got 0"),
        ("align", -1, "align must be a power of two from 1 to 1048576, got -1"),
        ("align", 2**40, f"align must be a power of two from 1 to 1048576, got {2**40}"),
    ],
)
def test_writer_options_out_of_range_name_the_option(tmp_path, option, value, expected):
    with pytest.raises(SchemaError) as e:
        ShardWriter(tmp_path / "w", {"x": "int64"}, **{option: value})
    assert str(e.value) == expected
    assert not (tmp_path / "w").exists()


def test_opening_a_folder_that_is_not_a_dataset_says_how_to_make_one(tmp_path):
    (tmp_path / "photos").mkdir()
    for path, what in [
        (tmp_path / "photos", f"{tmp_path / 'photos'} is not a stokehold dataset (it has no manifest.json)"),
        (tmp_path / "nope", f"{tmp_path / 'nope'}: no such directory (a dataset is a directory with a manifest.json)"),
    ]:
        with pytest.raises(StokeholdIOError) as e:
            Dataset(path)
        assert e.value.errno == errno.ENOENT
        assert str(e.value) == (
            f"{what}: make one with `stokehold pack SOURCE DIR` (an image folder, JSONL/CSV, tars or TFRecords) or stokehold.ShardWriter, then open DIR; "
            "TFRecord files, WebDataset tars, Parquet files and JSONL files can also be opened in place (a file, a directory of them, a glob or a list)"
        )


def test_a_state_of_another_shuffle_names_both_in_their_python_words(ds):
    state = Loader(ds, 2, shuffle="shard_block").state_dict()
    with pytest.raises(IncompatibleStateError) as e:
        Loader(ds, 2, shuffle=True).load_state_dict(state)
    assert e.value.field == "shuffle"
    assert str(e.value) == (
        "incompatible resume state: shuffle is shard_block (window 4) in the state but global here; load a state "
        "into a loader made like the one that saved it (same dataset, seed and shuffle), or start without it"
    )


def test_a_thread_count_beyond_four_per_core_is_refused_with_the_bound(ds):
    for threads in (10**6, 100_000):
        with pytest.raises(ConfigError, match=r"threads must be at most \d+ on this machine \(4 per core"):
            Loader(ds, 2, rank=0, world_size=1, threads=threads)
        with pytest.raises(ConfigError, match=r"threads must be at most \d+ on this machine"):
            SequenceLoader(ds, 8, 2, rank=0, world_size=1, threads=threads)


@pytest.mark.parametrize("to,module", [("torch", "torch"), ("jax", "jax")])
def test_to_a_framework_that_is_not_installed_is_refused_when_the_loader_is_made(ds, monkeypatch, to, module):
    # None in sys.modules is how Python marks a module that cannot be imported
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ConfigError, match=f'to="{to}" needs {module}, which is not installed here: pip install {module}'):
        Loader(ds, 2, to=to)
    with pytest.raises(ConfigError, match=f'to="{to}" needs {module}'):
        SequenceLoader(ds, 2, 2, to=to)


def test_an_image_stage_on_a_number_field_is_refused_when_the_loader_is_made(ds):
    with pytest.raises(ConfigError, match=r'column "label": image stages \(random_resized_crop\) need encoded image bytes, and the field is of type int64'):
        Loader(ds, 2, transforms={"label": [RandomResizedCrop(8)]})


def test_a_misspelt_stage_parameter_is_refused_naming_the_known_ones(ds):
    from stokehold import _native
    import json

    spec = {"loader": {"batch_size": 2}, "samples": {"kind": "records", "transforms": {
        "blob": [{"name": "random_resized_crop", "params": {"size": 8, "ratios": [0.5, 2.0]}}]}}}
    with pytest.raises(ConfigError, match=r"unknown field `ratios`, expected one of `size`, `scale`, `ratio`"):
        _native._Engine(ds, json.dumps(spec), [], False)


def test_a_prefetch_or_budget_that_could_take_the_machine_down_is_refused_with_the_bound(ds):
    with pytest.raises(ConfigError, match=r"prefetch must be at most 256 batches, got 100000"):
        Loader(ds, 2, prefetch=100_000)
    with pytest.raises(ConfigError, match=r"memory_budget .* is more than this machine's memory"):
        Loader(ds, 2, memory_budget="1000TiB")
    with pytest.raises(ConfigError, match=r"the RAM cache's budget \(cache=\) .* is more than this machine's memory"):
        SequenceLoader(ds, 2, 2, cache="1000TiB")
    # a fixed window of large batches: refused when it would hold more than half the memory
    with pytest.raises(ConfigError, match=r"prefetch 256 batches of about .* more than half this machine's memory"):
        Loader(ds, 10, prefetch=256, transforms={"blob": [RandomResizedCrop(4096)]})
    # one batch too large for the machine, whatever the prefetch (the tail padded, so not refused
    # as larger than the dataset)
    with pytest.raises(ConfigError, match=r"one batch of 1000000 samples would take about .* give a smaller batch_size"):
        Loader(ds, 1_000_000, drop_last=False, transforms={"blob": [RandomResizedCrop(1024)]})


def test_batch_size_and_seq_len_take_numpy_ints_and_refuse_what_does_not_fit_by_name(tmp_path):
    """numpy integers are ints (as rank, world_size and seed take them); a bool, a float, zero or
    a value past 2**32 - 1 is refused naming the option and the value, before the engine."""
    ds = write(tmp_path / "ds", 16)
    batch = next(iter(Loader(ds, np.int64(4), rank=0, world_size=1)))
    assert len(batch["label"]) == 4
    fronts = {
        "batch_size": lambda b: Loader(ds, b, rank=0, world_size=1),
        "batch_size ": lambda b: SequenceLoader(ds, 8, b, rank=0, world_size=1),
        "seq_len": lambda b: SequenceLoader(ds, b, 4, rank=0, world_size=1),
    }
    for name, front in fronts.items():
        for bad in (0, -1, 1.5, True, "8", 2**32, 2**64):
            with pytest.raises(ConfigError) as e:
                front(bad)
            assert str(e.value) == f"{name.strip()} must be a positive int (at most 2**32 - 1), got {bad!r}"
