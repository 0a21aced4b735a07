"""Random video clips: stokehold's Loader against torchcodec's VideoDecoder in a torch DataLoader.

Issue #54's benchmark. The script makes its own videos with the ``ffmpeg`` command from JPEGs
the repository makes (bench-data/inet when present, else ``stokehold sample-data``): one set
per resolution (480p, 1080p), each video 10 to 60 s at 25 fps, H.264 with x264's default
keyframe interval (or ``--keyint K``; ``--pack-keyint K`` keeps the default interval and packs
with ``stokehold pack --video-keyint K``, so stokehold loads the re-encoded videos and torchcodec
the originals: what the re-encode buys; ``--content shots``: 10-second shots panning across a
photograph, as camera footage, instead of a new photograph every frame). It packs each set (``stokehold pack``: the files with
their frame index) and loads random 16-frame clips, stride 2, resized to 224 (shorter side) and
centre-cropped to 224x224:

- stokehold: ``Loader(ds, transforms={"video": [Clip(16, stride=2), Resize(224),
  CenterCrop(224)]}, threads=T)``;
- torchcodec: ``VideoDecoder(path).get_frames_at(indices)`` in a torch ``Dataset``, the same
  resize and crop with torch, ``DataLoader(num_workers=T)``.

It reports per set: CPU-seconds per clip of each (this process and its worker processes, user +
system), their ratio, clips per second, and stokehold's bytes read per clip against the bytes of
the keyframe intervals the clips touch (the packets from the keyframe at or before a clip's first
frame to the frame before the keyframe after its last one).

With ``--in-place``, stokehold reads the videos where they are instead of packed: a JSONL table
naming each video file (``{"video": "all/v000.mp4", "name": "v000"}``), each file's frame index
made at the table's first scan and kept; a clip reads the kept index and its keyframe intervals
from the file.

With ``--lerobot``, instead: a LeRobot-layout dataset (v3.0, 3 cameras of the same videos at
480p, episodes one after another in each camera's file, a step table with pyarrow), loaded by
stokehold's Loader with 1 camera asked for against all 3, and against LeRobot's own way (a torch
``Dataset`` whose step decodes every camera with torchcodec's ``get_frames_at(round(t * fps))``
from a decoder kept per file, in a ``DataLoader``): CPU-seconds per step and their ratios.

    python scripts/bench_video.py                       # the full benchmark (quiet machine)
    python scripts/bench_video.py --tiny                # a smoke run (seconds)
    python scripts/bench_video.py --lerobot [--tiny]    # 3 cameras, loading 1 vs all 3
"""

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _bench import BENCH_DATA, require, run_or_exit  # noqa: E402

CLI = [sys.executable, "-m", "stokehold._cli"]
SIZES = {"480p": (854, 480), "1080p": (1920, 1080)}


def cpu_seconds() -> float:
    """User + system seconds of this process and of its children that have ended."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def jpegs(work: str, need: int) -> list:
    inet = os.path.join(BENCH_DATA, "inet")
    files = sorted(glob.glob(os.path.join(inet, "**", "*.JPEG"), recursive=True))
    files += sorted(glob.glob(os.path.join(inet, "**", "*.jpg"), recursive=True))
    if len(files) < need:
        out = os.path.join(work, "jpegs")
        if not os.path.isdir(out):
            run_or_exit([*CLI, "sample-data", out, "--images", str(min(need, 2000)), "--size", "640x480"])
        files = sorted(glob.glob(os.path.join(out, "**", "*.jpg"), recursive=True))
    return files


SHOT_FRAMES = 250  # 10 s at 25 fps: a cut no more often than x264's default keyframe interval


def make_video(path: str, frames: list, size, keyint, content: str = "photos") -> None:
    """One video from `frames` (JPEG paths, one per frame) at 25 fps (a numbered sequence of
    links, read by ffmpeg's image2 demuxer; each scaled and cropped to `size`).

    ``content="photos"``: one photograph per frame, every frame a new picture (no two frames
    alike: x264 codes them as P-frames of mostly intra blocks, no B-frames; the worst case for
    any decoder). ``content="shots"``: one photograph per 10-second shot, filmed with a slow
    zoom and pan across it (ffmpeg's zoompan over the photograph scaled to 1.5x the frame), a
    cut between shots: what camera footage looks like to a codec (frames alike from one to the
    next, x264's default B-frames, a keyframe at each cut)."""
    seq = path + ".frames"
    os.makedirs(seq, exist_ok=True)
    if content == "shots":
        frames = frames[::SHOT_FRAMES]
    for k, p in enumerate(frames):
        os.symlink(os.path.abspath(p), os.path.join(seq, f"{k:06d}.jpg"))
    w, h = size
    if content == "shots":
        bw, bh = (w * 3 // 4) * 2, (h * 3 // 4) * 2  # 1.5x, even
        d = SHOT_FRAMES
        vf = (f"scale={bw}:{bh}:force_original_aspect_ratio=increase,crop={bw}:{bh},"
              f"zoompan=z='1.0+0.15*on/{d}':x='(iw-iw/zoom)*on/{d}':y='(ih-ih/zoom)/2'"
              f":d={d}:s={w}x{h}:fps=25,setsar=1")
        rate = f"25/{d}"
    else:
        vf = f"scale={w}:{h}:force_original_aspect_ratio=increase,crop={w}:{h},setsar=1"
        rate = "25"
    cmd = ["ffmpeg", "-v", "error", "-y", "-framerate", rate, "-i", os.path.join(seq, "%06d.jpg"),
           "-vf", vf, "-c:v", "libx264", "-pix_fmt", "yuv420p"]
    if keyint:
        cmd += ["-g", str(keyint)]
    run_or_exit(cmd + [path])
    for name in os.listdir(seq):
        os.remove(os.path.join(seq, name))
    os.rmdir(seq)


def make_set(work: str, name: str, args) -> str:
    """The set's videos in a class folder, packed; returns (dataset dir, videos dir)."""
    tag = f"{name}-k{args.keyint or 'default'}-n{args.videos}-s{args.min_seconds}-{args.max_seconds}"
    if args.content != "photos":
        tag += f"-{args.content}"
    if args.pack_keyint:
        tag += f"-p{args.pack_keyint}"
    src = os.path.join(work, tag, "videos")
    ds = os.path.join(work, tag, "ds")
    if not os.path.exists(os.path.join(ds, "manifest.json")):
        pool = jpegs(work, 200)
        if not pool:
            sys.exit("error: no JPEGs to make videos from")
        os.makedirs(os.path.join(src, "all"), exist_ok=True)
        for i in range(args.videos):
            span = args.max_seconds - args.min_seconds
            seconds = args.min_seconds + (span * i // max(1, args.videos - 1) if span else 0)
            n = int(seconds * 25)
            frames = [pool[(i * 7919 + k) % len(pool)] for k in range(n)]
            make_video(os.path.join(src, "all", f"v{i:03d}.mp4"), frames, SIZES[name], args.keyint,
                       args.content)
        # --pack-keyint: stokehold reads videos re-encoded by pack, torchcodec the originals
        again = ["--video-keyint", str(args.pack_keyint)] if args.pack_keyint else []
        run_or_exit([*CLI, "pack", src, ds, "--overwrite", *again])
    return ds, src


def keyframe_interval_bytes(video, first: float, last: float) -> int:
    """Bytes of the packets from the keyframe at or before `first` up to (not including) the
    keyframe after `last` (presentation order)."""
    import numpy as np

    pts, key, size = video.pts_seconds, video.keyframes, video.packet_sizes
    a = int(np.searchsorted(pts, first, side="right")) - 1
    while a > 0 and not key[a]:
        a -= 1
    b = int(np.searchsorted(pts, last, side="right"))
    while b < len(pts) and not key[b]:
        b += 1
    return int(size[a:b].sum())


def bench_stokehold(ds_dir: str, src: str, args) -> dict:
    import stokehold
    from stokehold.image import CenterCrop, Resize
    from stokehold.video import Clip, VideoFile

    ds = stokehold.Dataset(ds_dir)
    loader = stokehold.Loader(
        ds, args.batch, threads=args.threads, seed=0, drop_last=False,
        transforms={"video": [Clip(frames=16, stride=2), Resize(224), CenterCrop(224)]},
    )
    videos = {}
    if args.pack_keyint:
        # the intervals are those of the videos as packed (re-encoded), not of the originals
        import struct

        packed = os.path.join(ds_dir + "-containers")
        os.makedirs(packed, exist_ok=True)
        for i in range(len(ds)):
            s = ds[i]
            (index_len,) = struct.unpack("<I", s["video"][8:12])
            name = os.path.join(packed, f"{i}.mp4")
            with open(name, "wb") as f:
                f.write(s["video"][12 + index_len:])
            videos[s["path"]] = VideoFile(name)
    clips, interval_bytes = 0, 0
    c0, t0 = cpu_seconds(), time.perf_counter()
    epoch = 0
    while clips < args.clips:
        loader.set_epoch(epoch)
        for b in loader:
            names = b["path"] if "path" in b else [f"all/{n}.mp4" for n in b["name"]]
            for k in range(len(names)):
                path = names[k]
                if path not in videos:
                    videos[path] = VideoFile(os.path.join(src, path))
                ts = b["video_timestamps"][k]
                interval_bytes += keyframe_interval_bytes(videos[path], ts[0], ts[-1])
            clips += len(names)
            if clips >= args.clips:
                break
        epoch += 1
    cpu, wall = cpu_seconds() - c0, time.perf_counter() - t0
    # the bytes actually read (a clip reads its record's header and frame index, then only the
    # keyframe intervals it decodes), per record read: the loader reads ahead past the clips
    # counted here
    stats = loader.stats()
    read = stats["bytes_read"] / max(1, stats["records_read"])
    del loader
    return {
        "clips": clips,
        "cpu_s_per_clip": cpu / clips,
        "clips_per_s": clips / wall,
        "bytes_read_per_clip": read,
        "keyframe_interval_bytes_per_clip": interval_bytes / clips,
        "bytes_ratio": read / max(1, interval_bytes / clips),
    }


class _TorchcodecClips:
    """A torch Dataset: a random 16-frame clip, stride 2, of video i, resized and cropped."""

    def __init__(self, paths, seed=0):
        self.paths, self.seed = paths, seed

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        import numpy as np
        import torch
        import torch.nn.functional as F
        from torchcodec.decoders import VideoDecoder

        dec = VideoDecoder(self.paths[i], seek_mode="exact")
        n = dec.metadata.num_frames
        rng = np.random.default_rng((self.seed, i))
        start = int(rng.integers(0, n - 31))
        frames = dec.get_frames_at(list(range(start, start + 32, 2))).data  # [16, 3, H, W] uint8
        h, w = frames.shape[-2:]
        s = 224 / min(h, w)
        x = F.interpolate(frames.float(), size=(max(224, round(h * s)), max(224, round(w * s))),
                          mode="bilinear", antialias=True, align_corners=False)
        top, left = (x.shape[-2] - 224) // 2, (x.shape[-1] - 224) // 2
        return x[..., top:top + 224, left:left + 224].round().clamp(0, 255).to(torch.uint8)


def torch_loop(dataset_of_epoch, count, args):
    """Batches of a torch DataLoader (``args.threads`` workers) over ``dataset_of_epoch(epoch)``,
    epoch after epoch, until ``count(batch)`` adds up to ``args.clips``: (items, CPU-seconds,
    wall seconds)."""
    import torch
    from torch.utils.data import DataLoader

    n = 0
    c0, t0 = cpu_seconds(), time.perf_counter()
    epoch = 0
    while n < args.clips:
        dl = DataLoader(dataset_of_epoch(epoch), batch_size=args.batch, shuffle=True,
                        num_workers=args.threads, generator=torch.Generator().manual_seed(epoch))
        for b in dl:
            n += count(b)
            if n >= args.clips:
                break
        del dl  # its workers end here, so their CPU time is counted
        epoch += 1
    return n, cpu_seconds() - c0, time.perf_counter() - t0


def bench_torchcodec(src: str, args) -> dict:
    paths = sorted(glob.glob(os.path.join(src, "**", "*.mp4"), recursive=True))
    clips, cpu, wall = torch_loop(lambda e: _TorchcodecClips(paths, seed=e), lambda b: b.shape[0], args)
    return {"clips": clips, "cpu_s_per_clip": cpu / clips, "clips_per_s": clips / wall}


LEROBOT_CAMERAS = ["observation.images.front", "observation.images.wrist", "observation.images.top"]


def make_lerobot(work: str, args) -> str:
    """A LeRobot v3.0 dataset: `args.videos` episodes of `min_seconds` at 25 fps, each camera's
    episodes in one MP4 (made from the JPEGs as the clip sets are), one data file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = os.path.join(work, f"lerobot-n{args.videos}-s{args.min_seconds}-k{args.keyint or 'default'}")
    if os.path.exists(os.path.join(root, "meta", "info.json")):
        return root
    fps, steps = 25, args.min_seconds * 25
    pool = jpegs(work, 200)
    if not pool:
        sys.exit("error: no JPEGs to make videos from")
    total = steps * args.videos
    for c, key in enumerate(LEROBOT_CAMERAS):
        path = os.path.join(root, "videos", key, "chunk-000", "file-000.mp4")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        make_video(path, [pool[(c * 7919 + k) % len(pool)] for k in range(total)], SIZES["480p"], args.keyint)
    n = list(range(total))
    ep = [i // steps for i in n]
    f = [i % steps for i in n]
    data = pa.table({
        "observation.state": pa.array([[float(i)] * 6 for i in n], pa.list_(pa.float32(), 6)),
        "action": pa.array([[float(i)] * 6 for i in n], pa.list_(pa.float32(), 6)),
        "timestamp": pa.array([x / fps for x in f], pa.float32()),
        "frame_index": f, "episode_index": ep, "index": n, "task_index": [0] * total,
    })
    os.makedirs(os.path.join(root, "data", "chunk-000"))
    pq.write_table(data, os.path.join(root, "data", "chunk-000", "file-000.parquet"))
    episodes = {"episode_index": list(range(args.videos)), "length": [steps] * args.videos,
                "data/chunk_index": [0] * args.videos, "data/file_index": [0] * args.videos,
                "dataset_from_index": [e * steps for e in range(args.videos)],
                "dataset_to_index": [(e + 1) * steps for e in range(args.videos)]}
    for key in LEROBOT_CAMERAS:
        episodes[f"videos/{key}/chunk_index"] = [0] * args.videos
        episodes[f"videos/{key}/file_index"] = [0] * args.videos
        episodes[f"videos/{key}/from_timestamp"] = [e * steps / fps for e in range(args.videos)]
        episodes[f"videos/{key}/to_timestamp"] = [(e + 1) * steps / fps for e in range(args.videos)]
    os.makedirs(os.path.join(root, "meta", "episodes", "chunk-000"))
    pq.write_table(pa.table(episodes), os.path.join(root, "meta", "episodes", "chunk-000", "file-000.parquet"))
    w, h = SIZES["480p"]
    features = {k: {"dtype": "float32", "shape": [6]} for k in ("observation.state", "action")}
    features.update({k: {"dtype": "video", "shape": [h, w, 3]} for k in LEROBOT_CAMERAS})
    info = {"codebase_version": "v3.0", "fps": fps, "chunks_size": 1000, "features": features,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"}
    with open(os.path.join(root, "meta", "info.json"), "w") as out:
        json.dump(info, out)
    return root


def bench_lerobot_stokehold(root: str, cameras: list, args) -> dict:
    import stokehold

    loader = stokehold.Loader(root, args.batch, threads=args.threads, seed=0,
                              fields=[*cameras, "observation.state", "action"])
    steps = 0
    c0, t0 = cpu_seconds(), time.perf_counter()
    epoch = 0
    while steps < args.clips:
        loader.set_epoch(epoch)
        for b in loader:
            steps += len(b["action"])
            if steps >= args.clips:
                break
        epoch += 1
    cpu, wall = cpu_seconds() - c0, time.perf_counter() - t0
    del loader
    return {"steps": steps, "cpu_s_per_step": cpu / steps, "steps_per_s": steps / wall}


class _LeRobotStyleSteps:
    """A torch Dataset as LeRobot's reads a step: its row, and every camera's frame by
    torchcodec's ``get_frames_at(round((from_timestamp + t) * fps))``, decoders kept per file."""

    def __init__(self, root):
        import pyarrow.parquet as pq

        self.root = root
        t = pq.read_table(os.path.join(root, "data", "chunk-000", "file-000.parquet")).to_pydict()
        e = pq.read_table(os.path.join(root, "meta", "episodes", "chunk-000", "file-000.parquet")).to_pydict()
        self.rows, self.episodes, self.decoders = t, e, {}

    def __len__(self):
        return len(self.rows["index"])

    def __getitem__(self, i):
        import torch
        from torchcodec.decoders import VideoDecoder

        ep, ts = self.rows["episode_index"][i], self.rows["timestamp"][i]
        item = {k: torch.tensor(self.rows[k][i]) for k in ("observation.state", "action")}
        for key in LEROBOT_CAMERAS:
            path = os.path.join(self.root, "videos", key, "chunk-000", "file-000.mp4")
            dec = self.decoders.get(path)
            if dec is None:
                dec = self.decoders[path] = VideoDecoder(path, seek_mode="approximate")
            t = self.episodes[f"videos/{key}/from_timestamp"][ep] + ts
            item[key] = dec.get_frames_at(indices=[round(t * dec.metadata.average_fps)]).data[0]
        return item


def bench_lerobot_style(root: str, args) -> dict:
    steps, cpu, wall = torch_loop(lambda e: _LeRobotStyleSteps(root), lambda b: b["action"].shape[0], args)
    return {"steps": steps, "cpu_s_per_step": cpu / steps, "steps_per_s": steps / wall}


def main_lerobot(args) -> None:
    require("stokehold", "numpy", "pyarrow", *([] if args.skip_torchcodec else ["torch", "torchcodec"]))
    root = make_lerobot(args.work, args)
    row = {
        "stokehold_1_camera": bench_lerobot_stokehold(root, LEROBOT_CAMERAS[:1], args),
        "stokehold_3_cameras": bench_lerobot_stokehold(root, LEROBOT_CAMERAS, args),
    }
    one = row["stokehold_1_camera"]["cpu_s_per_step"]
    row["cpu_ratio_3_over_1"] = row["stokehold_3_cameras"]["cpu_s_per_step"] / one
    if not args.skip_torchcodec:
        row["lerobot_style_3_cameras"] = bench_lerobot_style(root, args)
        row["cpu_ratio_lerobot_style_over_stokehold_1_camera"] = row["lerobot_style_3_cameras"]["cpu_s_per_step"] / one
    print(json.dumps({"lerobot": row, "threads": args.threads, "keyint": args.keyint or "default"}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default=os.path.join(BENCH_DATA, "video"), help="where the videos and datasets go")
    ap.add_argument("--sets", default="480p,1080p")
    ap.add_argument("--videos", type=int, default=16, help="videos per set")
    ap.add_argument("--min-seconds", type=int, default=10)
    ap.add_argument("--max-seconds", type=int, default=60)
    ap.add_argument("--content", choices=["photos", "shots"], default="photos",
                    help="photos: a new photograph every frame (no B-frames; the worst case); "
                         "shots: 10-second shots panning across a photograph, as camera footage")
    ap.add_argument("--keyint", type=int, default=None, help="x264 keyframe interval (default: x264's, 250)")
    ap.add_argument("--pack-keyint", type=int, default=None,
                    help="pack with --video-keyint K: stokehold loads the re-encoded videos, torchcodec the originals")
    ap.add_argument("--clips", type=int, default=256, help="clips loaded by each loader")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2, help="stokehold threads = DataLoader workers")
    ap.add_argument("--skip-torchcodec", action="store_true")
    ap.add_argument("--in-place", action="store_true",
                    help="stokehold reads the video files in place (a JSONL table naming them), not packed")
    ap.add_argument("--tiny", action="store_true", help="a smoke run: 2 short 480p videos, 8 clips")
    ap.add_argument("--lerobot", action="store_true",
                    help="a LeRobot-layout dataset of 3 cameras (--videos episodes of --min-seconds): 1 camera vs 3")
    args = ap.parse_args()
    if args.in_place and args.pack_keyint:
        sys.exit("error: --in-place reads the videos as they are: --pack-keyint re-encodes them in a pack")
    if args.tiny:
        args.sets, args.videos, args.min_seconds, args.max_seconds, args.clips, args.batch = "480p", 2, 2, 3, 8, 4
    if args.lerobot:
        if not subprocess.run(["which", "ffmpeg"], capture_output=True).returncode == 0:
            sys.exit("error: this script needs the ffmpeg command (make sysdeps installs it)")
        os.makedirs(args.work, exist_ok=True)
        return main_lerobot(args)
    require("stokehold", "numpy", *([] if args.skip_torchcodec else ["torch", "torchcodec"]))
    if not subprocess.run(["which", "ffmpeg"], capture_output=True).returncode == 0:
        sys.exit("error: this script needs the ffmpeg command (make sysdeps installs it)")
    os.makedirs(args.work, exist_ok=True)
    report = {}
    for name in args.sets.split(","):
        ds, src = make_set(args.work, name, args)
        if args.in_place:
            ds = os.path.join(src, "clips.jsonl")
            with open(ds, "w") as f:
                for v in sorted(os.listdir(os.path.join(src, "all"))):
                    if v.endswith(".mp4"):
                        # (a "path" key naming the file would be a second video field)
                        f.write(json.dumps({"video": f"all/{v}", "name": v[:-4]}) + "\n")
        row = {"stokehold": bench_stokehold(ds, src, args)}
        if not args.skip_torchcodec:
            row["torchcodec"] = bench_torchcodec(src, args)
            row["cpu_ratio_torchcodec_over_stokehold"] = (
                row["torchcodec"]["cpu_s_per_clip"] / row["stokehold"]["cpu_s_per_clip"]
            )
        report[name] = row
        print(name, json.dumps(row, indent=1), flush=True)
    print(json.dumps({"content": args.content, "keyint": args.keyint or "default", "pack_keyint": args.pack_keyint,
                      "in_place": args.in_place, "threads": args.threads,
                      "sets": report}))


if __name__ == "__main__":
    main()
