"""``stokehold.video`` against torchcodec: the same frames (``VideoDecoder(path)
.get_frames_played_at(seconds)``, exact seek mode) for the same timestamps, with the same FFmpeg,
on videos made here by the ``ffmpeg`` command (``make sysdeps`` installs it and the libraries
both libraries load)."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import stokehold
from stokehold.video import Clip, VideoFile, decode_clip

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command")

torchcodec_decoders = pytest.importorskip("torchcodec.decoders")


def make(path, seconds, size, rate, *codec):
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i",
         f"testsrc2=duration={seconds}:size={size}:rate={rate}", *codec, str(path)],
        check=True,
    )
    return str(path)


VP9 = ["-c:v", "libvpx-vp9", "-g", "10", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "200k"]

CASES = [
    # H.264 with B-frames and the default keyframe interval (250): 12 s at 25 fps
    ("h264-b.mp4", 12, "160x120", "25", ["-c:v", "libx264", "-pix_fmt", "yuv420p"]),
    # a short keyframe interval
    ("h264-g8.mp4", 3, "160x120", "25", ["-c:v", "libx264", "-g", "8", "-pix_fmt", "yuv420p"]),
    # 30000/1001
    ("h264-ntsc.mp4", 3, "160x120", "30000/1001", ["-c:v", "libx264", "-pix_fmt", "yuv420p"]),
    # open keyframe intervals (MPEG-4 part 2 with B-frames)
    ("mpeg4.mp4", 3, "160x120", "25", ["-c:v", "mpeg4", "-g", "12", "-bf", "2"]),
    # Matroska: H.264 with B-frames; VP9 in WebM
    ("h264-b.mkv", 4, "160x120", "25", ["-c:v", "libx264", "-g", "30", "-pix_fmt", "yuv420p"]),
    ("vp9.webm", 3, "160x120", "25", VP9),
]


def timestamps(v, rng, n):
    """Frame starts, times inside frames, and the last instant before the end."""
    pts = v.pts_seconds
    inside = rng.uniform(v.begin_seconds, v.end_seconds, n)
    starts = rng.choice(pts, n)
    last = np.nextafter(v.end_seconds, 0)
    return np.concatenate([starts, inside, [pts[0], last]])


@pytest.mark.parametrize("name,seconds,size,rate,codec", CASES, ids=[c[0] for c in CASES])
def test_frames_are_torchcodecs_frames(tmp_path, name, seconds, size, rate, codec):
    path = make(tmp_path / name, seconds, size, rate, *codec)
    v = VideoFile(path)
    ref = torchcodec_decoders.VideoDecoder(path)
    assert len(v) == ref.metadata.num_frames
    rng = np.random.default_rng(0)
    for trial in range(3):
        ts = timestamps(v, rng, 12)
        frames, pts = v.frames_played_at(ts.tolist())
        want = ref.get_frames_played_at(ts.tolist())
        # the frame chosen for each timestamp: exactly torchcodec's
        np.testing.assert_array_equal(pts, want.pts_seconds.numpy())
        # its pixels: exactly torchcodec's (both convert with swscale, as torchcodec does for
        # widths that are multiples of 32)
        np.testing.assert_array_equal(frames, want.data.permute(0, 2, 3, 1).numpy())


@pytest.mark.parametrize("size", ["200x120", "198x110"])
def test_frames_of_widths_torchcodec_converts_with_its_filter_graph(tmp_path, size):
    # widths that are not multiples of 32 (odd sizes too): torchcodec converts with libavfilter's
    # format filter, we with swscale into 64-byte aligned rows; the same pixels all the same
    path = make(tmp_path / "w.mp4", 2, size, "25", "-c:v", "libx264", "-pix_fmt", "yuv420p")
    v = VideoFile(path)
    ref = torchcodec_decoders.VideoDecoder(path)
    ts = timestamps(v, np.random.default_rng(1), 10).tolist()
    frames, pts = v.frames_played_at(ts)
    want = ref.get_frames_played_at(ts)
    np.testing.assert_array_equal(pts, want.pts_seconds.numpy())
    np.testing.assert_array_equal(frames, want.data.permute(0, 2, 3, 1).numpy())


def test_clips_are_a_function_of_seed_and_sample(tmp_path):
    path = make(tmp_path / "c.mp4", 12, "160x120", "25", "-c:v", "libx264", "-pix_fmt", "yuv420p")
    v = VideoFile(path)
    clip = Clip(frames=16, stride=2, start="random")
    a = clip.timestamps(v, seed=3, sample=5)
    assert a.shape == (1, 16)
    np.testing.assert_array_equal(a, clip.timestamps(VideoFile(path), seed=3, sample=5))
    frames, pts = v.frames_played_at(a[0].tolist())
    assert frames.shape == (16, 120, 160, 3) and frames.dtype == np.uint8
    np.testing.assert_array_equal(pts, a[0])  # stride clips are the frames' own times
    ref = torchcodec_decoders.VideoDecoder(path).get_frames_played_at(a[0].tolist())
    np.testing.assert_array_equal(frames, ref.data.permute(0, 2, 3, 1).numpy())
    # fps and uniform / all
    u = Clip(frames=8, fps=4.0, start="uniform", clips=3).timestamps(v)
    assert u.shape == (3, 8) and (np.diff(u, axis=1) > 0).all()
    assert len(Clip(frames=25, stride=1, start="all").timestamps(v)) == 12
    # a clip longer than the video
    with pytest.raises(ValueError, match="c.mp4"):
        Clip(frames=16, stride=40).timestamps(v)
    with pytest.raises(stokehold.ConfigError):
        Clip(frames=4, stride=2, fps=3.0).timestamps(v)


def test_bad_video_raises_errors_naming_the_file(tmp_path):
    path = make(tmp_path / "ok.mp4", 1, "64x48", "25", "-c:v", "libx264", "-movflags", "+faststart")
    v = VideoFile(path)
    with pytest.raises(ValueError, match=r"ok\.mp4.*5 s"):
        v.frames_played_at([0.0, 5.0])
    with pytest.raises(ValueError):
        decode_clip(path, [-1.0])
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(open(path, "rb").read()[:-2000])
    with pytest.raises(stokehold.CorruptDataError, match="cut.mp4"):
        VideoFile(str(cut))
    audio = tmp_path / "audio.mp4"
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "sine=duration=1",
                    "-c:a", "aac", str(audio)], check=True)
    with pytest.raises(stokehold.StokeholdError, match="no video track"):
        VideoFile(str(audio))


def test_without_ffmpeg_import_works_and_decoding_says_how_to_install_it(tmp_path):
    path = make(tmp_path / "v.mp4", 1, "64x48", "25", "-c:v", "libx264")
    code = (
        "import stokehold, sys\n"
        "from stokehold.video import VideoFile\n"
        f"v = VideoFile({path!r})\n"
        "assert len(v) == 25\n"
        "try:\n"
        "    v.frames_played_at([0.0])\n"
        "except stokehold.StokeholdError as e:\n"
        "    print(e)\n"
        "    sys.exit(0 if 'apt install ffmpeg' in str(e) and 'v.mp4' in str(e) else 1)\n"
        "sys.exit(2)\n"
    )
    env = dict(os.environ, STOKEHOLD_FFMPEG_DIR=str(tmp_path / "no-ffmpeg-here"))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_damaged_packet_raises_corrupt_data_naming_the_file_and_byte(tmp_path):
    path = make(tmp_path / "ok.mp4", 2, "64x48", "25", "-c:v", "libx264", "-g", "10", "-bf", "0")
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pos,size",
         "-of", "csv=p=0", path],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    packets = [tuple(int(x) for x in line.split(",")) for line in out]
    data = bytearray(open(path, "rb").read())
    rng = np.random.default_rng(5)
    for size, pos in packets[10:20]:  # the second keyframe interval (ffprobe: size, pos)
        data[pos:pos + size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    bad = tmp_path / "damaged.mp4"
    bad.write_bytes(bytes(data))
    v = VideoFile(str(bad))
    good, _ = VideoFile(path).frames_at([3, 12, 25])
    frames, _ = v.frames_at([3])
    np.testing.assert_array_equal(frames[0], good[0])  # before the damage: intact
    try:
        frames, _ = v.frames_at([12])
    except stokehold.CorruptDataError as e:
        assert "damaged.mp4" in str(e) and "byte" in str(e) and "0.4" in str(e), str(e)
    else:  # FFmpeg concealed the damage: not the picture
        assert not np.array_equal(frames[0], good[1])
    frames, _ = v.frames_at([25])  # after it: intact again
    np.testing.assert_array_equal(frames[0], good[2])


# --- videos packed with their frame index, clips in the loader -----------------------------------

CLI = [sys.executable, "-m", "stokehold._cli"]


@pytest.fixture(scope="module")
def video_ds(tmp_path_factory):
    """A folder of two classes, two H.264 videos each (B-frames, the default keyframe interval;
    one 30000/1001), packed: fields video, label, path."""
    root = tmp_path_factory.mktemp("videos")
    src = root / "src"
    for cls, specs in {"cats": [(3, "25"), (2, "30000/1001")], "dogs": [(3, "25"), (4, "24")]}.items():
        (src / cls).mkdir(parents=True)
        for i, (seconds, rate) in enumerate(specs):
            make(src / cls / f"v{i}.mp4", seconds, "160x120", rate, "-c:v", "libx264", "-pix_fmt", "yuv420p")
    out = root / "ds"
    subprocess.run([*CLI, "pack", str(src), str(out)], check=True, capture_output=True)
    return src, stokehold.Dataset(str(out))


def test_a_video_folder_packs_video_label_path(video_ds):
    src, ds = video_ds
    assert len(ds) == 4
    s = ds[0]
    assert sorted(s) == ["label", "path", "video"]
    assert s["path"] == "cats/v0.mp4" and s["label"] == 0
    value = s["video"]
    # the value: "SKV1", the frame index, then the file's bytes as given
    assert value[:4] == b"SKV1"
    assert value.endswith((src / "cats" / "v0.mp4").read_bytes())


def test_loader_clips_are_torchcodecs_frames(video_ds):
    src, ds = video_ds
    loader = stokehold.Loader(
        ds, 2, shuffle=False, threads=2, seed=4,
        transforms={"video": [Clip(frames=8, stride=2)]},
    )
    seen = 0
    for batch in loader:
        ts = batch["video_timestamps"]
        assert ts.dtype == np.float64 and ts.shape == (2, 8)
        for k in range(2):
            path = str(src / batch["path"][k])
            frames = batch["video"][k]
            assert frames.dtype == np.uint8 and frames.shape == (8, 3, 120, 160)
            ref = torchcodec_decoders.VideoDecoder(path).get_frames_played_at(ts[k].tolist())
            assert np.array_equal(frames, ref.data.numpy())
            np.testing.assert_array_equal(ts[k], ref.pts_seconds.numpy())
            # stride 2: every other frame of the video
            pts = VideoFile(path).pts_seconds
            first = int(np.searchsorted(pts, ts[k][0]))
            np.testing.assert_array_equal(ts[k], pts[first:first + 16:2])
            seen += 1
    assert seen == 4


def _clip_loader(ds, threads, **kw):
    from stokehold.image import CenterCrop, RandomHorizontalFlip, Resize

    return stokehold.Loader(
        ds, 2, threads=threads, seed=11,
        transforms={"video": [Clip(frames=4, stride=3), Resize(64), CenterCrop(48), RandomHorizontalFlip()]},
        **kw,
    )


def test_clips_are_the_same_for_any_thread_count_and_resume_exactly(video_ds):
    _, ds = video_ds

    def run(loader, epochs=2):
        out = []
        for e in range(epochs):
            loader.set_epoch(e)
            out += [(b["video"].copy(), b["video_timestamps"].copy(), list(b["path"])) for b in loader]
        return out

    one = run(_clip_loader(ds, 1))
    assert one[0][0].shape == (2, 4, 3, 48, 48) and one[0][0].dtype == np.uint8
    two = run(_clip_loader(ds, 2))
    assert len(one) == len(two) == 4
    for a, b in zip(one, two):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
    # another epoch draws other clips
    assert not all(np.array_equal(one[i][1], one[i + 2][1]) for i in range(2))
    # resume mid-epoch: the state after the first batch gives the second batch exactly
    first = _clip_loader(ds, 2)
    it = iter(first)
    next(it)
    state = first.state_dict()
    rest = _clip_loader(ds, 1)
    rest.load_state_dict(state)
    resumed = [(b["video"].copy(), b["video_timestamps"].copy()) for b in rest]
    assert len(resumed) == 1
    assert np.array_equal(resumed[0][0], one[1][0]) and np.array_equal(resumed[0][1], one[1][1])


def test_a_clip_longer_than_the_video_is_named_or_skipped(video_ds):
    _, ds = video_ds
    # 40 frames with stride 2 need 79: only the 4 s video (96 frames) has them
    loader = stokehold.Loader(ds, 1, shuffle=False, transforms={"video": [Clip(frames=40, stride=2)]})
    with pytest.raises(Exception) as e:
        list(loader)
    msg = str(e.value)
    assert "needs 79 frames, the video has 75 frames" in msg, msg
    assert "shard" in msg or ".skh" in msg, msg
    skipping = stokehold.Loader(
        ds, 4, shuffle=False, on_error="skip", max_skip_fraction=1.0,
        transforms={"video": [Clip(frames=40, stride=2)]},
    )
    # the three short videos are replaced by the one that fits
    (batch,) = list(skipping)
    assert batch["video"].shape == (4, 40, 3, 120, 160) if hasattr(batch["video"], "shape") else len(batch["video"]) == 4
    assert list(batch["path"]) == ["dogs/v1.mp4"] * 4


def test_a_jsonl_naming_videos_reads_in_place_as_its_pack(video_ds, tmp_path):
    """A JSONL table naming video files (``{"video": "cats/v0.mp4", ...}``) read in place: each
    file's frame index made once and kept with the file's index; samples, clips and their stages
    are those of ``pack`` of the same table; a video changed since, or missing, is an error
    naming its file."""
    import json

    from stokehold.image import CenterCrop, Resize

    src, _ = video_ds
    root = tmp_path / "v"
    shutil.copytree(src, root)
    names = ["cats/v0.mp4", "dogs/v1.mp4", "cats/v1.mp4", "dogs/v0.mp4"]
    table = root / "clips.jsonl"
    table.write_text("".join(
        json.dumps({"video": n, "label": i % 2, "caption": f"clip {i}"}) + "\n" for i, n in enumerate(names)
    ))
    subprocess.run([*CLI, "pack", str(table), str(tmp_path / "packed")], check=True, capture_output=True)
    packed = stokehold.Dataset(str(tmp_path / "packed"))
    ds = stokehold.Dataset(str(table))
    assert ds.schema == packed.schema and ds.schema["video"] == "video", (ds.schema, packed.schema)
    assert len(ds) == len(packed) == 4
    for i, n in enumerate(names):
        assert ds[i] == packed[i]
        assert ds[i]["video"].endswith((root / n).read_bytes())
    kw = dict(threads=2, seed=5, transforms={"video": [Clip(frames=4, stride=2), Resize(64), CenterCrop(48)]})
    got = list(stokehold.Loader(ds, 2, **kw))
    want = list(stokehold.Loader(packed, 2, **kw))
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert g["video"].shape == (2, 4, 3, 48, 48)
        assert np.array_equal(g["video"], w["video"])
        assert np.array_equal(g["video_timestamps"], w["video_timestamps"])
        assert list(g["label"]) == list(w["label"])
    # the index is kept: a video whose bytes changed since is named, not decoded as garbage
    with open(root / "dogs/v1.mp4", "ab") as f:
        f.write(b"\0" * 10)
    again = stokehold.Dataset(str(table))
    with pytest.raises(Exception) as e:
        again[1]
    assert "dogs/v1.mp4" in str(e.value) and "changed" in str(e.value), str(e.value)
    assert again[0] == packed[0]
    # a line naming a file that is not there: the dataset opens, its sample's error names it
    missing = root / "missing.jsonl"
    missing.write_text(json.dumps({"video": "cats/v0.mp4"}) + "\n" + json.dumps({"video": "cats/gone.mp4"}) + "\n")
    ds = stokehold.Dataset(str(missing))
    assert ds.schema["video"] == "video"
    assert ds[0]["video"].endswith((root / "cats/v0.mp4").read_bytes())
    with pytest.raises(Exception) as e:
        ds[1]
    assert "cats/gone.mp4" in str(e.value) and "line 2" in str(e.value), str(e.value)


def test_clip_on_a_field_that_is_not_video_is_refused(video_ds):
    _, ds = video_ds
    with pytest.raises(Exception, match="clip needs a video field"):
        stokehold.Loader(ds, 1, transforms={"path": [Clip(frames=2)]})


def test_matroska_and_webm_pack_and_clip_as_torchcodec_decodes_them(tmp_path):
    """A folder of .mkv (H.264) and .webm (VP9) videos packs (container code 2) and its clips in
    the loader are the frames torchcodec gives for their timestamps, from the files as they are."""
    src = tmp_path / "src"
    src.mkdir()
    make(src / "a.mkv", 3, "160x120", "25", "-c:v", "libx264", "-g", "12", "-pix_fmt", "yuv420p")
    make(src / "b.webm", 3, "160x120", "25", *VP9)
    out = tmp_path / "ds"
    subprocess.run([*CLI, "pack", str(src), str(out)], check=True, capture_output=True)
    ds = stokehold.Dataset(str(out))
    assert len(ds) == 2
    for s in (ds[0], ds[1]):
        value = s["video"]
        assert value[:5] == b"SKV1\x02"
        assert value.endswith((src / s["path"]).read_bytes())
    loader = stokehold.Loader(ds, 2, shuffle=False, threads=2, seed=3,
                              transforms={"video": [Clip(frames=6, stride=2)]})
    for epoch in range(2):
        loader.set_epoch(epoch)
        (batch,) = list(loader)
        for k in range(2):
            path = str(src / batch["path"][k])
            ts = batch["video_timestamps"][k]
            ref = torchcodec_decoders.VideoDecoder(path).get_frames_played_at(ts.tolist())
            assert np.array_equal(batch["video"][k], ref.data.numpy()), path
            np.testing.assert_array_equal(ts, ref.pts_seconds.numpy())
            # stride 2 over the file's own index
            pts = VideoFile(path).pts_seconds
            first = int(np.searchsorted(pts, ts[0]))
            np.testing.assert_array_equal(ts, pts[first:first + 12:2])
    # a table naming them packs them as video fields too
    (tmp_path / "t.jsonl").write_text(
        '{"video": "src/a.mkv", "label": 0}\n{"video": "src/b.webm", "label": 1}\n')
    subprocess.run([*CLI, "pack", str(tmp_path / "t.jsonl"), str(tmp_path / "t")], check=True,
                   capture_output=True)
    t = stokehold.Dataset(str(tmp_path / "t"))
    assert [t[i]["video"] == ds[i]["video"] for i in range(2)] == [True, True]
    # a cut file is named with the element and byte where it breaks
    cut = tmp_path / "cut.mkv"
    cut.write_bytes((src / "a.mkv").read_bytes()[:5000])
    with pytest.raises(stokehold.CorruptDataError, match=r"cut\.mkv.*Matroska .*at byte"):
        VideoFile(str(cut))
    # and packing it names the file, the element and the byte (--strict: fatal, else skipped)
    bad = tmp_path / "bad"
    bad.mkdir()
    cut.rename(bad / "cut.mkv")
    r = subprocess.run([*CLI, "pack", str(bad), str(tmp_path / "b"), "--strict"], capture_output=True,
                       text=True)
    assert r.returncode != 0
    assert "cut.mkv" in r.stderr and "Matroska" in r.stderr and "at byte" in r.stderr, r.stderr


def test_pack_video_keyint_reencodes_with_a_keyframe_every_k_frames(tmp_path):
    """stokehold pack --video-keyint 8: each video re-encoded (H.264, CRF 18) with keyframes at
    frames 0, 8, 16, ... exactly, the same frame count and times, pixels within a few levels of
    the original; the manifest says so; without ffmpeg's x264 it would fail naming the file."""
    import json as _json
    import struct

    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    orig = make(src / "v.mp4", 4, "160x120", "25", "-c:v", "libx264", "-pix_fmt", "yuv420p")
    assert np.flatnonzero(VideoFile(orig).keyframes).tolist() == [0]  # x264's default interval: one keyframe here
    out = tmp_path / "ds"
    subprocess.run([*CLI, "pack", str(tmp_path / "src"), str(out), "--video-keyint", "8"], check=True,
                   capture_output=True)
    value = stokehold.Dataset(str(out))[0]["video"]
    assert value[:4] == b"SKV1"
    (index_len,) = struct.unpack("<I", value[8:12])
    again = tmp_path / "again.mp4"
    again.write_bytes(value[12 + index_len:])
    v, o = VideoFile(str(again)), VideoFile(orig)
    assert len(v) == len(o) == 100
    assert np.flatnonzero(v.keyframes).tolist() == list(range(0, 100, 8))
    assert np.allclose(v.pts_seconds, o.pts_seconds)
    a, _ = v.frames_at([0, 13, 57, 99])
    b, _ = o.frames_at([0, 13, 57, 99])
    assert np.abs(a.astype(np.int16) - b.astype(np.int16)).mean() < 3
    manifest = _json.loads((out / "manifest.json").read_text())
    assert manifest["source"]["video_keyint"] == 8 and manifest["source"]["video_crf"] == 18


# --- several cameras in one sample: only the fields asked for, clips aligned in time ------------

CAMERAS = {"front": "25", "wrist": "15", "top": "10"}  # different frame rates


@pytest.fixture(scope="module")
def cameras_ds(tmp_path_factory):
    """Three episodes of three cameras (25, 15 and 10 fps, 3 s each), one sample per episode with
    a video field per camera, written with ShardWriter from the values `pack` makes."""
    root = tmp_path_factory.mktemp("cameras")
    values = {}
    paths = {}
    for cam, rate in CAMERAS.items():
        src = root / "src" / cam
        (src / "all").mkdir(parents=True)
        for ep in range(3):
            paths[cam, ep] = make(src / "all" / f"ep{ep}.mp4", 3, "96x64", rate,
                                  "-c:v", "libx264", "-pix_fmt", "yuv420p")
        subprocess.run([*CLI, "pack", str(src), str(root / f"packed-{cam}")], check=True, capture_output=True)
        packed = stokehold.Dataset(str(root / f"packed-{cam}"))
        for i in range(len(packed)):
            s = packed[i]
            values[cam, int(s["path"][len("all/ep"):-len(".mp4")])] = s["video"]
    out = root / "ds"
    schema = [("episode", "int64")] + [(cam, "video") for cam in CAMERAS]
    with stokehold.ShardWriter(str(out), schema) as w:
        for ep in range(3):
            w.write({"episode": ep, **{cam: values[cam, ep] for cam in CAMERAS}})
    return paths, stokehold.Dataset(str(out))


def test_synced_clips_are_the_frames_played_at_the_clocks_times_on_every_camera(cameras_ds):
    paths, ds = cameras_ds
    loader = stokehold.Loader(
        ds, 1, shuffle=False, seed=2, fields=["episode", "front", "wrist"],
        transforms={"front": [Clip(frames=5, stride=3, sync=True)], "wrist": [Clip(frames=5, stride=3, sync=True)]},
    )
    seen = 0
    for batch in loader:
        # only the fields asked for: the top camera is neither decoded nor copied out
        assert sorted(batch) == ["episode", "front", "front_timestamps", "wrist", "wrist_timestamps"]
        ep = int(batch["episode"][0])
        clock = batch["front_timestamps"][0]  # stride 3 on the clock (front): its own frame times
        front = torchcodec_decoders.VideoDecoder(paths["front", ep]).get_frames_played_at(clock.tolist())
        np.testing.assert_array_equal(clock, front.pts_seconds.numpy())
        assert np.array_equal(batch["front"][0], front.data.numpy())
        # the wrist camera (15 fps): the frames played at the same times
        wrist = torchcodec_decoders.VideoDecoder(paths["wrist", ep]).get_frames_played_at(clock.tolist())
        np.testing.assert_array_equal(batch["wrist_timestamps"][0], wrist.pts_seconds.numpy())
        assert np.array_equal(batch["wrist"][0], wrist.data.numpy())
        seen += 1
    assert seen == 3


def test_synced_fps_clips_show_one_instant_on_every_camera(cameras_ds):
    from stokehold.image import Resize

    _, ds = cameras_ds
    synced = {cam: [Clip(frames=6, fps=5.0, sync=True), Resize([32, 48])] for cam in CAMERAS}
    batches = list(stokehold.Loader(ds, 3, shuffle=False, seed=9, transforms=synced))
    assert len(batches) == 1
    b = batches[0]
    assert b["top"].shape == (3, 6, 3, 32, 48)
    ts = {cam: b[f"{cam}_timestamps"] for cam in CAMERAS}
    # each timestamp of the clock lies inside the frame each camera shows: the frames' spans
    # [pts, pts + 1/fps) of the three cameras share an instant
    lo = np.maximum.reduce([ts[c] for c in CAMERAS])
    hi = np.minimum.reduce([ts[c] + 1.0 / float(CAMERAS[c]) for c in CAMERAS])
    assert (lo < hi).all(), (lo, hi)


def test_synced_clips_of_other_rules_and_fields_left_out_are_refused(cameras_ds):
    _, ds = cameras_ds
    with pytest.raises(stokehold.ConfigError, match="another rule"):
        stokehold.Loader(ds, 1, transforms={"front": [Clip(4, stride=2, sync=True)], "wrist": [Clip(4, stride=3, sync=True)]})
    with pytest.raises(stokehold.ConfigError, match="fields= leaves out"):
        stokehold.Loader(ds, 1, fields=["front"], transforms={"wrist": [Clip(4)]})
    with pytest.raises(stokehold.ConfigError, match="does not have"):
        stokehold.Loader(ds, 1, fields=["front", "side"])


def test_a_synced_time_outside_another_cameras_video_is_the_samples_error(tmp_path):
    # the clock (front) runs 3 s, the wrist camera 1 s: a 4-frame clip, stride 10, on the clock
    # ends past 1.2 s, where the wrist shows nothing
    values = {}
    for cam, seconds in {"front": 3, "wrist": 1}.items():
        src = tmp_path / cam / "all"
        src.mkdir(parents=True)
        make(src / "e.mp4", seconds, "64x48", "25", "-c:v", "libx264", "-pix_fmt", "yuv420p")
        subprocess.run([*CLI, "pack", str(tmp_path / cam), str(tmp_path / f"p-{cam}")], check=True, capture_output=True)
        values[cam] = stokehold.Dataset(str(tmp_path / f"p-{cam}"))[0]["video"]
    with stokehold.ShardWriter(str(tmp_path / "ds"), [("front", "video"), ("wrist", "video")]) as w:
        w.write(values)
    loader = stokehold.Loader(
        str(tmp_path / "ds"), 1,
        transforms={cam: [Clip(frames=4, stride=10, sync=True)] for cam in ("front", "wrist")},
    )
    with pytest.raises(stokehold.SampleError, match=r"no frame is played at .* the video's frames run from 0 s to 1 s"):
        list(loader)
