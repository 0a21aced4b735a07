"""LeRobot datasets read in place (v3.0 and v2.1 layouts) against what LeRobot's own dataset
class gives: the steps' columns, each camera's frame chosen as LeRobot's torchcodec decoder
chooses it (``get_frames_at(round(t * fps))``, the frame nearest the query time), windows of
``delta_timestamps`` clamped to the episode with ``<key>_is_pad``. The datasets are made here:
Parquet with pyarrow, MP4s with the ``ffmpeg`` command."""

import json
import pickle
import shutil
import subprocess

import numpy as np
import pytest

import stokehold
from stokehold.lerobot import LeRobotDataset

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command")

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torchcodec_decoders = pytest.importorskip("torchcodec.decoders")

FPS = 10
CAMERAS = {  # key -> frame size (each camera its own size)
    "observation.images.front": (64, 48),
    "observation.images.wrist": (96, 64),
    "observation.images.top": (80, 48),
}
LENGTHS = [12, 7, 15]  # steps per episode
FRONT = "observation.images.front"


def video(path, size, start, frames):
    """Frames ``start .. start + frames`` of a moving test pattern, H.264 at FPS."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w, h = size
    src = (f"testsrc2=size={w}x{h}:rate={FPS},trim=start_frame={start}:end_frame={start + frames},"
           "setpts=PTS-STARTPTS")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", src, "-c:v", "libx264",
                    "-pix_fmt", "yuv420p", str(path)], check=True)


def steps():
    """The step table: per episode its steps, with values that say which step they are."""
    rows = []
    index = 0
    for ep, n in enumerate(LENGTHS):
        for f in range(n):
            rows.append({
                "observation.state": [index, f, ep, 0.5],
                "action": [index + 0.25, -f, ep],
                "timestamp": f / FPS,
                "frame_index": f,
                "episode_index": ep,
                "index": index,
                "task_index": ep % 2,
            })
            index += 1
    return rows


def table(rows):
    return pa.table({
        "observation.state": pa.array([r["observation.state"] for r in rows], pa.list_(pa.float32(), 4)),
        "action": pa.array([r["action"] for r in rows], pa.list_(pa.float32(), 3)),
        "timestamp": pa.array([r["timestamp"] for r in rows], pa.float32()),
        "frame_index": pa.array([r["frame_index"] for r in rows], pa.int64()),
        "episode_index": pa.array([r["episode_index"] for r in rows], pa.int64()),
        "index": pa.array([r["index"] for r in rows], pa.int64()),
        "task_index": pa.array([r["task_index"] for r in rows], pa.int64()),
    })


def features():
    f = {
        "observation.state": {"dtype": "float32", "shape": [4], "names": None},
        "action": {"dtype": "float32", "shape": [3], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    for key, (w, h) in CAMERAS.items():
        f[key] = {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"]}
    return f


def info(version, data_path, video_path):
    return {
        "codebase_version": version, "robot_type": "test", "fps": FPS, "chunks_size": 1000,
        "total_episodes": len(LENGTHS), "total_frames": sum(LENGTHS), "total_tasks": 2,
        "splits": {"train": f"0:{len(LENGTHS)}"}, "data_path": data_path, "video_path": video_path,
        "features": features(),
    }


def make_v3(root):
    """v3.0: episodes 0 and 1 in data file-000 and video file-000 (one after the other), episode 2
    in file-001; meta/episodes/chunk-000/file-000.parquet says where each is."""
    rows = steps()
    starts = np.cumsum([0] + LENGTHS)
    files = [[0, 1], [2]]  # episodes per file
    for k, eps in enumerate(files):
        part = [r for r in rows if r["episode_index"] in eps]
        path = root / "data" / "chunk-000" / f"file-{k:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table(part), path)
        for key, size in CAMERAS.items():
            first = int(starts[eps[0]])
            video(root / "videos" / key / "chunk-000" / f"file-{k:03d}.mp4", size, first,
                  sum(LENGTHS[e] for e in eps))
    ep_rows = {"episode_index": [], "tasks": [], "length": [], "data/chunk_index": [],
               "data/file_index": [], "dataset_from_index": [], "dataset_to_index": []}
    for key in CAMERAS:
        for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
            ep_rows[f"videos/{key}/{c}"] = []
    for ep, n in enumerate(LENGTHS):
        k = 0 if ep in files[0] else 1
        offset = sum(LENGTHS[e] for e in files[k] if e < ep) / FPS
        ep_rows["episode_index"].append(ep)
        ep_rows["tasks"].append([f"task {ep % 2}"])
        ep_rows["length"].append(n)
        ep_rows["data/chunk_index"].append(0)
        ep_rows["data/file_index"].append(k)
        ep_rows["dataset_from_index"].append(int(starts[ep]))
        ep_rows["dataset_to_index"].append(int(starts[ep + 1]))
        for key in CAMERAS:
            ep_rows[f"videos/{key}/chunk_index"].append(0)
            ep_rows[f"videos/{key}/file_index"].append(k)
            ep_rows[f"videos/{key}/from_timestamp"].append(offset)
            ep_rows[f"videos/{key}/to_timestamp"].append(offset + n / FPS)
    path = root / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table(ep_rows), path)
    pq.write_table(pa.table({"task_index": [0, 1], "task": ["task 0", "task 1"]}), root / "meta" / "tasks.parquet")
    (root / "meta" / "info.json").write_text(json.dumps(info(
        "v3.0", "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4")))
    return {(key, ep): (root / "videos" / key / "chunk-000" / f"file-{0 if ep < 2 else 1:03d}.mp4",
                        ep_rows[f"videos/{key}/from_timestamp"][ep])
            for key in CAMERAS for ep in range(len(LENGTHS))}


def make_v21(root):
    """v2.1: one data file and one video per episode and camera; meta/episodes.jsonl."""
    rows = steps()
    starts = np.cumsum([0] + LENGTHS)
    (root / "meta").mkdir(parents=True)
    where = {}
    with open(root / "meta" / "episodes.jsonl", "w") as f:
        for ep, n in enumerate(LENGTHS):
            f.write(json.dumps({"episode_index": ep, "tasks": [f"task {ep % 2}"], "length": n}) + "\n")
            path = root / "data" / "chunk-000" / f"episode_{ep:06d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table([r for r in rows if r["episode_index"] == ep]), path)
            for key, size in CAMERAS.items():
                v = root / "videos" / "chunk-000" / key / f"episode_{ep:06d}.mp4"
                video(v, size, int(starts[ep]), n)
                where[key, ep] = (v, 0.0)
    with open(root / "meta" / "tasks.jsonl", "w") as f:
        for t in range(2):
            f.write(json.dumps({"task_index": t, "task": f"task {t}"}) + "\n")
    (root / "meta" / "info.json").write_text(json.dumps(info(
        "v2.1", "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
        "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4")))
    return where


@pytest.fixture(scope="module", params=["v3.0", "v2.1"])
def robot(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    where = (make_v3 if request.param == "v3.0" else make_v21)(root)
    return root, where


def lerobot_frames(where, key, ep, timestamps):
    """The frames LeRobot's torchcodec decoder gives: get_frames_at(round(t * average_fps)) with
    t the episode's start in its file plus the step's timestamp, then the tolerance check."""
    path, offset = where[key, ep]
    dec = torchcodec_decoders.VideoDecoder(str(path))
    ts = [offset + float(np.float32(t)) for t in timestamps]
    got = dec.get_frames_at(indices=[round(t * dec.metadata.average_fps) for t in ts])
    assert np.all(np.abs(got.pts_seconds.numpy() - ts) < 1e-4)
    return got.data.numpy()


def test_steps_and_every_cameras_frame_are_lerobots(robot):
    root, where = robot
    rows = steps()
    loader = stokehold.Loader(str(root), 4, shuffle=False, threads=2, drop_last=False, include_ids=True)
    seen = 0
    for batch in loader:
        assert batch["action"].dtype == np.float32 and batch["action"].shape[1:] == (3,)
        assert batch["observation.state"].shape[1:] == (4,)
        assert batch["timestamp"].dtype == np.float32 and batch["timestamp"].ndim == 1
        for j, i in enumerate(batch["id"]):
            if batch["is_padding"][j]:
                continue
            r = rows[i]
            np.testing.assert_array_equal(batch["action"][j], np.float32(r["action"]))
            np.testing.assert_array_equal(batch["observation.state"][j], np.float32(r["observation.state"]))
            for c in ("frame_index", "episode_index", "index", "task_index"):
                assert batch[c][j] == r[c], c
            for key, (w, h) in CAMERAS.items():
                frame = batch[key][j]
                assert frame.shape == (3, h, w) and frame.dtype == np.uint8
                want = lerobot_frames(where, key, r["episode_index"], [r["timestamp"]])[0]
                assert np.array_equal(frame, want), (key, i)
            seen += 1
    assert seen == sum(LENGTHS)


def test_delta_timestamps_windows_are_clamped_to_the_episode_with_pads(robot):
    root, where = robot
    rows = steps()
    ds = LeRobotDataset(root, delta_timestamps={FRONT: [-0.2, 0.0], "action": [0.0, 0.1, 0.2]})
    assert ds.num_frames == sum(LENGTHS) and ds.num_episodes == len(LENGTHS) and ds.fps == FPS
    assert ds.video_keys == list(CAMERAS)
    loader = stokehold.Loader(ds, 5, shuffle=False, drop_last=False, include_ids=True,
                              fields=[FRONT, "action", "episode_index", "frame_index"])
    pads = 0
    for batch in loader:
        assert sorted(batch) == sorted(["id", "is_padding", FRONT, f"{FRONT}_is_pad", "action",
                                        "action_is_pad", "episode_index", "frame_index"])
        assert batch["action"].shape[1:] == (3, 3) and batch[FRONT].shape[1:] == (2, 3, 48, 64)
        assert batch["action_is_pad"].dtype == np.bool_ and batch["action_is_pad"].shape[1:] == (3,)
        for j, i in enumerate(batch["id"]):
            r = rows[i]
            ep, f, n = r["episode_index"], r["frame_index"], LENGTHS[r["episode_index"]]
            first = i - f
            for k, d in enumerate([0, 1, 2]):
                q = first + min(max(f + d, 0), n - 1)
                np.testing.assert_array_equal(batch["action"][j, k], np.float32(rows[q]["action"]))
                assert batch["action_is_pad"][j, k] == (f + d >= n)
            qs = [first + min(max(f + d, 0), n - 1) for d in (-2, 0)]
            want = lerobot_frames(where, FRONT, ep, [rows[q]["timestamp"] for q in qs])
            assert np.array_equal(batch[FRONT][j], want)
            np.testing.assert_array_equal(batch[f"{FRONT}_is_pad"][j], [f - 2 < 0, False])
            if not batch["is_padding"][j]:
                pads += int(batch["action_is_pad"][j].sum() + batch[f"{FRONT}_is_pad"][j].sum())
    # each episode: 1 + 2 padded action offsets at its end (+0.1 s on its last step, +0.2 s on
    # its last two), and 2 frame offsets at its start (-0.2 s on its first two steps)
    assert pads == 5 * len(LENGTHS)


def test_only_the_cameras_asked_for_are_opened_and_decoded(robot):
    root, _ = robot
    one = stokehold.Loader(str(root), 4, shuffle=False, drop_last=False, fields=[FRONT, "action"])
    for batch in one:
        assert sorted(batch) == ["action", FRONT]
    caches = one.stats()["caches"]
    videos = {k: v for k, v in caches.items() if k.startswith("video:")}
    assert list(videos) == [f"video:{FRONT}"]
    # one frame decoded per sample (the last batch padded with repeats; the next epoch may have
    # started ahead, in the background)
    slots = -(-sum(LENGTHS) // 4) * 4
    assert videos[f"video:{FRONT}"]["misses"] >= slots
    assert one.stats()["bytes_read"] > 0  # the packets read from the video files
    assert videos[f"video:{FRONT}"]["entries"] == (2 if "3.0" in root.name else len(LENGTHS))
    every = stokehold.Loader(str(root), 4, shuffle=False, drop_last=False)
    for _ in every:
        pass
    videos = {k: v["misses"] for k, v in every.stats()["caches"].items() if k.startswith("video:")}
    assert sorted(videos) == sorted(f"video:{key}" for key in CAMERAS)
    assert all(n >= slots for n in videos.values())


def test_video_files_are_not_held_open_so_many_episodes_fit_the_open_file_limit(tmp_path):
    """A v2.1 dataset has a video file per episode and camera (the largest have hundreds of
    thousands): a loader holds none of them open between reads, so it loads with fewer file
    descriptors left than the dataset has videos (9 here, 8 descriptors left: holding each one
    open fails with "Too many open files")."""
    root = tmp_path / "v21"
    make_v21(root)
    script = tmp_path / "limited.py"
    script.write_text(
        "import os, resource, sys\n"
        "import stokehold\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "opened = len(os.listdir('/proc/self/fd'))\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (opened + 8, hard))\n"
        "loader = stokehold.Loader(sys.argv[1], 4, shuffle=False, threads=2, drop_last=False)\n"
        "print(sum(len(b['index']) for b in loader))\n"
    )
    import sys
    done = subprocess.run([sys.executable, str(script), str(root)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == -(-sum(LENGTHS) // 4) * 4


def test_batches_are_the_same_for_the_same_seed_whatever_the_thread_count(robot):
    root, _ = robot
    ds = LeRobotDataset(root, delta_timestamps={"action": [-0.1, 0.0, 0.1]})

    def run(threads):
        loader = stokehold.Loader(ds, 4, seed=7, threads=threads, include_ids=True,
                                  fields=["observation.images.wrist", "action"])
        return [{k: v.copy() for k, v in b.items()} for e in range(2) for b in (loader.set_epoch(e) or loader)]

    a, b = run(1), run(3)
    assert len(a) == len(b) == 2 * (sum(LENGTHS) // 4)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k]), k
    assert not np.array_equal(a[0]["id"], a[len(a) // 2]["id"])  # another epoch, another order
    # a pickled loader (spawned workers) continues from the same position with the same batches
    loader = stokehold.Loader(ds, 4, seed=7, threads=2, include_ids=True,
                              fields=["observation.images.wrist", "action"])
    it = iter(loader)
    next(it)
    again = pickle.loads(pickle.dumps(loader))
    rest = [b["id"].copy() for b in again]
    assert [list(x) for x in rest] == [list(x["id"]) for x in a[1:len(a) // 2]]


def test_video_indexes_are_kept_and_made_again_only_for_a_changed_file(tmp_path, monkeypatch):
    """Each video file's frame index is kept under $STOKEHOLD_INDEX_DIR/videos (one file per
    video) and used by later opens while the video is unchanged: the camera's `hits` count the
    files whose kept index was used instead of parsing their `moov` box again. A video with a new
    modification time is indexed again (its kept file replaced); a damaged kept file is a miss."""
    import os

    root = tmp_path / "v21"
    where = make_v21(root)
    kept = tmp_path / "kept"
    monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(kept))

    def run():
        loader = stokehold.Loader(str(root), 4, shuffle=False, drop_last=False, include_ids=True,
                                  fields=[FRONT, "action"])
        batches = [{k: v.copy() for k, v in b.items()} for b in loader]
        return batches, loader.stats()["caches"][f"video:{FRONT}"]

    def files():
        return {p.name: p.read_bytes() for p in (kept / "videos").iterdir()}

    def same(a, b):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert x.keys() == y.keys()
            for k in x:
                assert np.array_equal(x[k], y[k]), k

    n = len(LENGTHS)
    first, stats = run()
    assert (stats["entries"], stats["hits"]) == (n, 0)
    made = files()
    assert len(made) == n  # one per video of the camera asked for (the others never opened)
    second, stats = run()
    assert (stats["entries"], stats["hits"]) == (n, n)
    assert files() == made
    same(first, second)
    # a video with a new modification time: indexed again, its kept file replaced, the others used
    video = where[FRONT, 1][0]
    st = video.stat()
    os.utime(video, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    third, stats = run()
    assert (stats["entries"], stats["hits"]) == (n, n - 1)
    now = files()
    assert now.keys() == made.keys()
    assert sum(now[k] != made[k] for k in made) == 1
    same(first, third)
    # damaged, cut or foreign kept files are misses: indexed again, kept again, the same batches
    for i, (name, data) in enumerate(sorted(now.items())):
        bad = [bytes(len(data)), data[: len(data) // 2], data[:-1] + bytes([data[-1] ^ 1])][i % 3]
        (kept / "videos" / name).write_bytes(bad)
    fourth, stats = run()
    assert (stats["entries"], stats["hits"]) == (n, 0)
    assert files() == now
    same(first, fourth)


def test_bad_layouts_name_the_file(tmp_path):
    root = tmp_path / "bad"
    make_v21(root)
    info_path = root / "meta" / "info.json"
    good = json.loads(info_path.read_text())
    # a camera's video file missing: named when the camera is asked for, not otherwise
    missing = root / "videos" / "chunk-000" / "observation.images.top" / "episode_000001.mp4"
    missing.unlink()
    with pytest.raises(stokehold.ConfigError, match="episode_000001.mp4"):
        stokehold.Loader(str(root), 2)
    stokehold.Loader(str(root), 2, fields=[FRONT, "action"])
    # info.json without its fps, or without codebase_version
    info_path.write_text(json.dumps({k: v for k, v in good.items() if k != "fps"}))
    with pytest.raises(stokehold.ConfigError, match=r"info\.json.*fps"):
        stokehold.Loader(str(root), 2, fields=["action"])
    info_path.write_text(json.dumps({k: v for k, v in good.items() if k != "codebase_version"}))
    with pytest.raises(stokehold.ConfigError, match=r"info\.json.*codebase_version"):
        stokehold.Loader(LeRobotDataset(root), 2, fields=["action"])
    # a data file missing
    info_path.write_text(json.dumps(good))
    (root / "data" / "chunk-000" / "episode_000002.parquet").unlink()
    with pytest.raises(stokehold.ConfigError, match="episode_000002.parquet"):
        stokehold.Loader(str(root), 2, fields=["action"])
    # a data file that is not Parquet
    info_path.write_text(json.dumps(good))
    (root / "data" / "chunk-000" / "episode_000002.parquet").write_bytes(b"")
    with pytest.raises(stokehold.ConfigError, match="episode_000002.parquet"):
        stokehold.Loader(str(root), 2, fields=["action"])


def test_dataset_and_the_cli_say_a_lerobot_folder_is_loaded_by_the_loader(tmp_path):
    """stokehold.Dataset(path) and the CLI's commands take stokehold datasets: on a LeRobot
    folder they say what it is and how to load it, not only "not a stokehold dataset"."""
    import sys

    root = tmp_path / "robot"
    make_v21(root)
    with pytest.raises(stokehold.StokeholdError, match=r"is a LeRobot dataset \(it has meta/info.json\).*stokehold.Loader"):
        stokehold.Dataset(str(root))
    r = subprocess.run([sys.executable, "-m", "stokehold._cli", "inspect", str(root)], capture_output=True, text=True)
    assert r.returncode != 0 and "is a LeRobot dataset" in r.stderr, r.stderr
