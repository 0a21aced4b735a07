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


CASES = [
    # H.264 with B-frames and the default keyframe interval (250): 12 s at 25 fps
    ("h264-b.mp4", 12, "160x120", "25", ["-c:v", "libx264", "-pix_fmt", "yuv420p"]),
    # a short keyframe interval
    ("h264-g8.mp4", 3, "160x120", "25", ["-c:v", "libx264", "-g", "8", "-pix_fmt", "yuv420p"]),
    # 30000/1001
    ("h264-ntsc.mp4", 3, "160x120", "30000/1001", ["-c:v", "libx264", "-pix_fmt", "yuv420p"]),
    # open keyframe intervals (MPEG-4 part 2 with B-frames)
    ("mpeg4.mp4", 3, "160x120", "25", ["-c:v", "mpeg4", "-g", "12", "-bf", "2"]),
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
