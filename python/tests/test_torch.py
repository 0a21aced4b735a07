"""stokehold with real PyTorch (CPU): tensors without copies, the DataLoader adapter, and a
small CNN trained for a few steps on batches from the loader."""

import os
import sys

import numpy as np
import pytest

if os.environ.get("CI") and not os.environ.get("STOKEHOLD_ALLOW_NO_TORCH"):
    import torch  # CI installs torch (make setup): a missing torch must fail, not skip
else:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch, or .[test])")

import stokehold  # noqa: E402
import stokehold.torch as sht  # noqa: E402
from stokehold.transforms import Lambda  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from _loader_helpers import write  # noqa: E402


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    return write(tmp_path_factory.mktemp("torch") / "ds", 400)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """16x16 grayscale images of two classes: a bright square top-left (0) or bottom-right (1),
    on noise, stored as ndarray:u8 with an int64 label."""
    path = tmp_path_factory.mktemp("torch") / "images"
    rng = np.random.default_rng(0)
    with stokehold.ShardWriter(path, {"image": "ndarray:u8", "label": "int64"}, shard_size=1 << 16) as w:
        for i in range(512):
            label = i % 2
            img = rng.integers(0, 80, size=(16, 16), dtype=np.uint8)
            if label == 0:
                img[2:8, 2:8] = 220
            else:
                img[8:14, 8:14] = 220
            w.write({"image": img, "label": label})
    return stokehold.Dataset(path)


def test_to_torch_gives_tensors_sharing_the_batch_memory(ds):
    loader = stokehold.Loader(ds, 50, to="torch", include_ids=True)
    batch = next(iter(loader))
    label = batch["label"]
    assert isinstance(label, torch.Tensor) and label.dtype == torch.int64 and label.shape == (50,)
    assert batch["is_padding"].dtype == torch.bool
    assert isinstance(batch["img"], list) and isinstance(batch["img"][0], torch.Tensor)
    for k, i in enumerate(batch["id"].tolist()):
        assert label[k].item() == ds[i]["label"]
    # zero copy: the tensor's memory is the numpy view's, which is the Rust buffer
    plain = stokehold.Loader(ds, 50)
    arr = next(iter(plain))["label"]
    t = torch.from_numpy(arr)
    assert t.data_ptr() == arr.base.address


def test_iterable_dataset_through_torch_dataloader(ds):
    loader = stokehold.Loader(ds, 40, seed=2, include_ids=True)
    adapter = sht.IterableDataset(loader)
    dl = torch.utils.data.DataLoader(adapter, batch_size=None, num_workers=0)
    assert len(dl) == 10
    ids = torch.cat([b["id"] for b in dl])
    assert sorted(ids.tolist()) == list(range(400))
    assert adapter.state_dict()["epoch"] == 1
    adapter.set_epoch(1)
    second = torch.cat([b["id"] for b in dl])
    assert sorted(second.tolist()) == list(range(400)) and second.tolist() != ids.tolist()


def test_a_small_cnn_learns_from_the_loader(images):
    torch.manual_seed(0)
    to_float = Lambda(lambda a: (a.astype(np.float32) / 255.0)[None], name="to_float")
    loader = stokehold.Loader(images, 32, seed=1, threads=2, to="torch", transforms={"image": [to_float]})
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 2),
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        for batch in loader:
            x = torch.stack(batch["image"])  # list column of [1, 16, 16] float32 tensors
            y = batch["label"]
            assert x.shape == (32, 1, 16, 16) and x.dtype == torch.float32
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    assert len(losses) == 3 * (512 // 32)
    first, last = np.mean(losses[:5]), np.mean(losses[-5:])
    assert last < first * 0.5, (first, last)


def test_the_gpu_training_step_script_runs_its_three_ways_on_the_cpu(tmp_path):
    """scripts/gpu_train_step.py (the GPU check of the speed issue, run where a GPU is lent) on
    the CPU with its small CNN: it makes and packs JPEGs, and counts what each way ran."""
    import json
    import subprocess

    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "gpu_train_step.py")
    out = tmp_path / "gpu.json"
    r = subprocess.run(
        [sys.executable, script, "--device", "cpu", "--model", "tiny", "--amp", "none", "--images", "48",
         "--batch", "8", "--steps", "6", "--warmup", "1", "--threads", "1,2", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["model"] == "tiny" and res["device"] == "cpu" and res["batch"] == 8
    assert res["ceiling_images"] == 6 * 8 and res["ceiling_images_per_s"] > 0
    assert [row["threads"] for row in res["rows"]] == [1, 2]
    for row in res["rows"]:
        # 48 images in batches of 8: 6 per epoch, so the 7 drawn (1 + 6) run into a second epoch
        assert row["fed_images"] == row["loader_images"] == 6 * 8
        assert 0 <= row["data_stall_pct"] <= 100 and 0 <= row["in_next_pct"] <= 100
        assert row["loader_cpu_ms_per_image"] > 0
        expected = row["loader_cpu_ms_per_image"] / 1e3 * res["ceiling_images_per_s"]
        assert abs(row["cores_needed_at_ceiling"] - expected) < 1e-6 * max(1.0, expected)
    assert "host cores feed the ceiling" in r.stdout
