"""A clip reads of its packed record only the keyframe intervals it decodes (issue #54): the
record's header, the video's frame index, and those intervals, each checked against its CRC-32C
in the index (version 2); a damaged interval fails only the clips that read it; a value packed
with a version-1 index (no interval checksums) still loads, read whole."""

import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

import stokehold
from stokehold.video import Clip, VideoFile

pytestmark = pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs the ffmpeg command")

CLI = [sys.executable, "-m", "stokehold._cli"]
FRAMES = 100  # 4 s at 25 fps
KEYINT = 8


def _index(value):
    """(index_len, flags, frames as (pts, key, offset, size), container start) of a video value."""
    flags = value[5]
    (index_len,) = struct.unpack("<I", value[8:12])
    at = 12 + 16
    (extra,) = struct.unpack("<I", value[at - 4:at])
    at += extra
    (n,) = struct.unpack("<I", value[at:at + 4])
    at += 4
    frames = []
    for k in range(n):
        pts, _dts, _dur, fl, off, size = struct.unpack("<qqIBQI", value[at + 33 * k:at + 33 * (k + 1)])
        frames.append((pts, fl & 1, off, size))
    return index_len, flags, frames, 12 + index_len


@pytest.fixture(scope="module")
def keyint_ds(tmp_path_factory):
    """One 4 s H.264 video packed with a keyframe every 8 frames: (dataset dir, its video value,
    the container's bytes written to a file)."""
    root = tmp_path_factory.mktemp("partial")
    src = root / "src" / "a"
    src.mkdir(parents=True)
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=duration=4:size=320x240:rate=25",
         "-c:v", "libx264", "-pix_fmt", "yuv420p", str(src / "v.mp4")],
        check=True,
    )
    out = root / "ds"
    subprocess.run([*CLI, "pack", str(root / "src"), str(out), "--video-keyint", str(KEYINT)],
                   check=True, capture_output=True)
    value = stokehold.Dataset(str(out))[0]["video"]
    _, _, _, start = _index(value)
    container = root / "container.mp4"
    container.write_bytes(value[start:])
    return out, value, str(container)


def _interval_bytes(frames, first_pts, last_pts):
    """Bytes of the keyframe intervals (decode order) holding the frames shown from `first_pts`
    to `last_pts`: from the keyframe before the first to the keyframe after the last."""
    keys = [d for d, f in enumerate(frames) if f[1]] + [len(frames)]
    wanted = [d for d, f in enumerate(frames) if first_pts <= f[0] <= last_pts]
    lo = max(k for k in keys if k <= min(wanted))
    hi = min(k for k in keys if k > max(wanted))
    return sum(f[3] for f in frames[lo:hi])


def test_a_clip_reads_only_its_keyframe_intervals(keyint_ds):
    ds_dir, value, container = keyint_ds
    index_len, flags, frames, _ = _index(value)
    assert flags == 1  # version 2: interval checksums
    keys = [d for d, f in enumerate(frames) if f[1]]
    assert keys == list(range(0, FRAMES, KEYINT))
    assert index_len == 4 + 4 + 2 + 2 + 4 + _extradata_len(value) + 4 + 33 * FRAMES + 4 * (len(keys) + 2)
    ds = stokehold.Dataset(str(ds_dir))
    record = len(value)
    timescale = struct.unpack("<I", value[16:20])[0]
    v = VideoFile(container)
    spec = {"video": [Clip(frames=4, stride=2)]}
    loader = stokehold.Loader(ds, 1, threads=1, seed=3, transforms=spec)
    for epoch in range(6):
        loader.set_epoch(epoch)
        (batch,) = list(loader)
        ts = batch["video_timestamps"][0]
        # the frames are those torchcodec's rule gives on the whole file
        ref, pts = v.frames_played_at(ts.tolist())
        np.testing.assert_array_equal(batch["video"][0], ref.transpose(0, 3, 1, 2))
        np.testing.assert_array_equal(pts, ts)
    stats = loader.stats()
    read, records = stats["bytes_read"], stats["records_read"]
    assert records >= 6  # and the next epoch's clip, read ahead
    # the clips of every epoch read (the same whatever loader draws them)
    need = 0
    for epoch in range(records):
        again = stokehold.Loader(ds, 1, threads=1, seed=3, transforms=spec)
        again.set_epoch(epoch)
        ts = next(iter(again))["video_timestamps"][0]
        need += _interval_bytes(frames, round(ts[0] * timescale), round(ts[-1] * timescale))
    assert read <= 1.5 * need, (read, need)
    assert read / records < record / 3, (read, records, record)


def _extradata_len(value):
    return struct.unpack("<I", value[24:28])[0]


def _flip(ds_dir, value, interval):
    """Flip one byte inside keyframe interval `interval`'s second packet of the first record
    holding `value` in the dataset at `ds_dir`: (the byte's offset in the shard file, its name)."""
    (shard,) = [p for p in ds_dir.iterdir() if p.name != "manifest.json" and p.is_file()]
    data = bytearray(shard.read_bytes())
    base = bytes(data).find(value[:256])
    assert base > 0
    _, _, frames, start = _index(value)
    _, _, off, size = frames[interval * KEYINT + 1]
    at = base + start + off + size // 2
    data[at] ^= 0xFF
    shard.write_bytes(bytes(data))
    return at, shard.name


def _damaged_copy(tmp_path, ds_dir, value, interval):
    """A copy of the dataset with one byte flipped inside keyframe interval `interval`:
    (copy, the byte's offset in the shard file, the shard's name)."""
    copy = tmp_path / "damaged"
    shutil.copytree(ds_dir, copy)
    return (copy, *_flip(copy, value, interval))


def _middle_loads_and_a_long_clip_fails(ds, container):
    """With keyframe interval 1 (frames 8..16) of `ds`'s one video damaged: the middle clip
    (frames ~48..52, not touching it) loads and is right; a clip over frames 5..94 reads it and
    fails: the error's message."""
    loader = stokehold.Loader(ds, 1, threads=1, seed=0,
                              transforms={"video": [Clip(frames=4, start="uniform")]})
    (batch,) = list(loader)
    ts = batch["video_timestamps"][0]
    assert ts[0] > 1.0
    ref, _ = VideoFile(container).frames_played_at(ts.tolist())
    np.testing.assert_array_equal(batch["video"][0], ref.transpose(0, 3, 1, 2))
    loader = stokehold.Loader(ds, 1, threads=1, seed=0,
                              transforms={"video": [Clip(frames=90, start="uniform")]})
    with pytest.raises(stokehold.CorruptDataError) as e:
        list(loader)
    assert e.value.sample_id == 0
    return str(e.value)


def test_a_damaged_interval_fails_the_clip_that_reads_it_and_no_other(keyint_ds, tmp_path):
    ds_dir, value, container = keyint_ds
    copy, at, shard = _damaged_copy(tmp_path, ds_dir, value, interval=1)  # frames 8..16
    ds = stokehold.Dataset(str(copy))
    msg = _middle_loads_and_a_long_clip_fails(ds, container)
    assert shard in msg and "keyframe interval 1" in msg and "checksum" in msg.lower(), msg
    assert "record 0" in msg, msg
    # the interval's bytes in the shard file hold the damaged byte
    lo, hi = (int(x) for x in msg.split(", bytes ")[1].split(":")[0].split(".."))
    assert lo <= at < hi, msg
    # two records of the video, the first damaged: with on_error="skip" it is replaced
    two = tmp_path / "two"
    with stokehold.ShardWriter(str(two), [("video", "video"), ("label", "int64")]) as w:
        w.write({"video": value, "label": 0})
        w.write({"video": value, "label": 1})
    _flip(two, value, interval=1)
    skipping = stokehold.Loader(stokehold.Dataset(str(two)), 2, shuffle=False, on_error="skip",
                                max_skip_fraction=1.0,
                                transforms={"video": [Clip(frames=90, start="uniform")]})
    (batch,) = list(skipping)
    assert list(batch["label"]) == [1, 1]


def _v1(value):
    """The same value with a version-1 index: no interval checksums."""
    index_len, flags, frames, start = _index(value)
    keys = sum(f[1] for f in frames)
    table = 4 * (keys + 2)
    assert flags == 1
    out = bytearray(value[:start - table] + value[start:])
    out[5] = 0
    out[8:12] = struct.pack("<I", index_len - table)
    return bytes(out)


def test_an_old_index_without_interval_checksums_loads_whole(keyint_ds, tmp_path):
    ds_dir, value, container = keyint_ds
    old = _v1(value)
    out = tmp_path / "old"
    with stokehold.ShardWriter(str(out), [("video", "video"), ("label", "int64")]) as w:
        w.write({"video": old, "label": 7})
    results = []
    for d in (str(ds_dir), str(out)):
        loader = stokehold.Loader(stokehold.Dataset(d), 1, threads=1, seed=5, fields=["video"],
                                  transforms={"video": [Clip(frames=4, stride=2)]})
        (batch,) = list(loader)
        results.append((batch["video"][0], batch["video_timestamps"][0], loader.stats()["bytes_read"]))
    (new_frames, new_ts, new_read), (old_frames, old_ts, old_read) = results
    np.testing.assert_array_equal(new_ts, old_ts)
    np.testing.assert_array_equal(new_frames, old_frames)
    assert old_read >= len(old)  # read whole
    assert new_read < len(value) / 3


def test_a_camera_left_out_has_only_its_index_read(keyint_ds, tmp_path):
    ds_dir, value, container = keyint_ds
    out = tmp_path / "cams"
    with stokehold.ShardWriter(str(out), [("front", "video"), ("wrist", "video")]) as w:
        w.write({"front": value, "wrist": value})
    loader = stokehold.Loader(stokehold.Dataset(str(out)), 1, threads=1, seed=2, fields=["front"],
                              transforms={"front": [Clip(frames=4, stride=2)]})
    (batch,) = list(loader)
    ts = batch["front_timestamps"][0]
    ref, _ = VideoFile(container).frames_played_at(ts.tolist())
    np.testing.assert_array_equal(batch["front"][0], ref.transpose(0, 3, 1, 2))
    stats = loader.stats()
    # per record: both indices and one clip's intervals, far from the two videos' bytes
    assert stats["bytes_read"] / stats["records_read"] < len(value) / 3


def _table(tmp_path, container, name="clips.jsonl"):
    """A JSONL table naming a copy of `container` (a video with a keyframe every 8 frames), read
    in place: (the table, the copy)."""
    import json

    root = tmp_path / "inplace"
    root.mkdir(exist_ok=True)
    video = root / "v.mp4"
    shutil.copyfile(container, video)
    table = root / name
    table.write_text(json.dumps({"video": "v.mp4", "label": 7}) + "\n")
    return table, video


def test_a_jsonl_table_of_videos_reads_only_the_intervals_of_its_clips(keyint_ds, tmp_path, monkeypatch):
    """Files read in place too: a clip of a video named by a JSONL table reads the frame index
    kept at the scan and the keyframe intervals it decodes from the video file, not the file
    whole; the frames are those of the whole file."""
    monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / "kept"))
    _, value, container = keyint_ds
    _, _, frames, _ = _index(value)
    table, video = _table(tmp_path, container)
    size = video.stat().st_size
    ds = stokehold.Dataset(str(table))
    timescale = struct.unpack("<I", value[16:20])[0]
    spec = {"video": [Clip(frames=4, stride=2)]}
    v = VideoFile(str(video))
    loader = stokehold.Loader(ds, 1, threads=1, seed=3, transforms=spec)
    batches, rchar = [], _rchar()
    for epoch in range(6):
        loader.set_epoch(epoch)
        batches.extend(loader)
    # what the process read (its threads included), the loader's own count aside
    rchar = _rchar() - rchar
    for batch in batches:
        ts = batch["video_timestamps"][0]
        ref, pts = v.frames_played_at(ts.tolist())
        np.testing.assert_array_equal(batch["video"][0], ref.transpose(0, 3, 1, 2))
        np.testing.assert_array_equal(pts, ts)
        assert list(batch["label"]) == [7]
    stats = loader.stats()
    read, records = stats["bytes_read"], stats["records_read"]
    assert records >= 6  # and the next epoch's clip, read ahead
    need = 0
    for epoch in range(records):
        again = stokehold.Loader(stokehold.Dataset(str(table)), 1, threads=1, seed=3, transforms=spec)
        again.set_epoch(epoch)
        ts = next(iter(again))["video_timestamps"][0]
        need += _interval_bytes(frames, round(ts[0] * timescale), round(ts[-1] * timescale))
    # the JSONL line (read whole) and the intervals: far from the whole file per clip
    line = table.stat().st_size
    assert read <= 1.5 * need + records * line, (read, need)
    assert rchar <= 1.5 * need + records * line + (64 << 10), (rchar, need)
    assert rchar < records * size / 3, (rchar, records, size)


def _rchar():
    """Bytes this process has read through read(2)-like calls so far (/proc/self/io)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_a_jsonl_table_of_videos_in_object_storage_reads_its_clips_intervals_from_the_store(
        keyint_ds, tmp_path, monkeypatch):
    """A JSONL table in a real S3 server naming videos beside it (relative to its prefix): the
    scan indexes each video once, a clip reads its keyframe intervals with ranged GETs, the frames
    are the local table's; a video replaced in the store is an error naming it, never a mix."""
    import json

    from conftest import moto_s3

    monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / "kept"))
    _, value, container = keyint_ds
    _, _, frames, _ = _index(value)
    timescale = struct.unpack("<I", value[16:20])[0]
    table, video = _table(tmp_path, container)
    lines = [{"video": "v.mp4", "label": 7}, {"video": "./sub/v.mp4", "label": 8}, {"video": "../v.mp4", "label": 9}]
    key, secret = "stokehold-test", "stokehold-test-secret"
    spec = {"video": [Clip(frames=4, stride=2)]}
    with moto_s3(key, secret, bucket="videos") as (endpoint, client):
        options = {"key": key, "secret": secret, "region_name": "us-east-1", "endpoint_url": endpoint,
                   "allow_http": "true"}
        body = "".join(json.dumps(x) + "\n" for x in lines)
        client.put_object(Bucket="videos", Key="t/clips.jsonl", Body=body.encode())
        client.upload_file(str(video), "videos", "t/v.mp4")
        client.upload_file(str(video), "videos", "t/sub/v.mp4")
        client.upload_file(str(video), "videos", "v.mp4")  # outside the table's folder: not read
        url = "s3://videos/t/clips.jsonl"
        ds = stokehold.Dataset(url, storage_options=options, index_dir=tmp_path / "ix")
        assert ds.schema["video"] == "video" and len(ds) == 3
        notes = " ".join(ds.manifest["source"]["notes"])
        assert "line 3 (sample 2)" in notes and "s3://videos/t/../v.mp4: a path through `..`" in notes, notes
        v = VideoFile(str(video))
        loader = stokehold.Loader(ds, 3, threads=1, seed=3, transforms=spec, shuffle=False,
                                  on_error="skip", max_skip_fraction=0.5, include_ids=True)
        need, clips = 0, []
        for epoch in range(3):
            loader.set_epoch(epoch)
            (batch,) = list(loader)
            # the third sample: skipped (a copy of another in its place, marked), counted
            assert [bool(p) for p in batch["is_padding"]] == [False, False, True]
            assert list(batch["label"][:2]) == [7, 8]
            clips.extend((batch["video"][k], batch["video_timestamps"][k]) for k in range(2))
        for clip, ts in clips:
            ref, pts = v.frames_played_at(ts.tolist())
            np.testing.assert_array_equal(clip, ref.transpose(0, 3, 1, 2))
            np.testing.assert_array_equal(pts, ts)
            need += _interval_bytes(frames, round(ts[0] * timescale), round(ts[-1] * timescale))
        stats = loader.stats()
        assert stats["skipped"] and set(stats["skipped"]) == {2}, stats  # the `..` line
        # what the store sent: the line and the intervals, far from the whole files
        read, records = stats["bytes_read"], stats["records_read"]
        assert read <= 1.5 * need + records * len(body) + records * (64 << 10), (read, need)
        assert read < records * video.stat().st_size / 2, (read, records)
        # the same clip as the table on a local disk gives its sample
        local = stokehold.Loader(stokehold.Dataset(str(table)), 1, threads=1, seed=3, transforms=spec,
                                 shuffle=False)
        (mine,) = list(local)
        np.testing.assert_array_equal(mine["video"][0], clips[0][0])
        # the kept index: a second open reads no video to index it
        again = stokehold.Dataset(url, storage_options=options, index_dir=tmp_path / "ix")
        assert again.schema == ds.schema and len(again) == 3
        # a video replaced in the store (same size, one interval changed): a dataset that saw it
        # refuses the new object by its ETag; a new one finds the damaged interval by its CRC
        data = bytearray(video.read_bytes())
        _, _, off, size = frames[1 * KEYINT + 1]
        data[off + size // 2] ^= 0xFF
        client.put_object(Bucket="videos", Key="t/v.mp4", Body=bytes(data))
        long = {"video": [Clip(frames=FRAMES // 2, stride=2)]}
        with pytest.raises(stokehold.StokeholdError, match="changed since it was opened") as e:
            list(stokehold.Loader(ds, 1, threads=1, seed=0, transforms=long, shuffle=False))
        assert "t/v.mp4" in str(e.value), e.value
        fresh = stokehold.Dataset(url, storage_options=options, index_dir=tmp_path / "ix")
        with pytest.raises(stokehold.CorruptDataError, match="keyframe interval 1") as e:
            list(stokehold.Loader(fresh, 1, threads=1, seed=0, transforms=long, shuffle=False))
        assert "s3://videos/t/v.mp4" in str(e.value) and "line 1" in str(e.value), e.value


def test_a_damaged_interval_of_a_video_read_in_place_fails_only_the_clips_that_read_it(
        keyint_ds, tmp_path, monkeypatch):
    monkeypatch.setenv("STOKEHOLD_INDEX_DIR", str(tmp_path / "kept"))
    _, value, container = keyint_ds
    _, _, frames, _ = _index(value)
    table, video = _table(tmp_path, container)
    ds = stokehold.Dataset(str(table))  # indexed now, before the damage
    data = bytearray(video.read_bytes())
    _, _, off, size = frames[1 * KEYINT + 1]  # inside keyframe interval 1 (frames 8..16)
    data[off + size // 2] ^= 0xFF
    video.write_bytes(bytes(data))  # the same size: only the interval's checksum tells
    msg = _middle_loads_and_a_long_clip_fails(ds, container)
    assert "v.mp4" in msg and "keyframe interval 1" in msg and "line 1" in msg, msg
    # a file whose size changed: named, as when read whole
    with open(video, "ab") as f:
        f.write(b"\0" * 10)
    with pytest.raises(stokehold.CorruptDataError, match="changed since") as e:
        list(stokehold.Loader(ds, 1, threads=1, seed=0, transforms={"video": [Clip(frames=4)]}))
    assert "v.mp4" in str(e.value)
