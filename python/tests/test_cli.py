"""The ``stokehold`` command as pip installs it, and packing of archives checked against Python's
own ``tarfile`` (rows B2/B3 of the reliability matrix)."""

import io
import json
import os
import pickle
import signal
import subprocess
import sys
import tarfile
import time

import stokehold

CLI = [sys.executable, "-m", "stokehold._cli"]


def run(*args, check=True):
    p = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"{args}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def make_images(tmp_path, n=24, classes=3):
    out = tmp_path / "imgs"
    run("sample-data", out, "--images", n, "--classes", classes, "--size", "32x24")
    return out


def test_pack_verify_inspect_through_the_installed_command(tmp_path):
    imgs = make_images(tmp_path)
    ds_dir = tmp_path / "ds"
    out = run("pack", imgs, ds_dir, "--shard-size", "8KiB", "--no-restart-markers").stdout
    assert out.startswith("packed 24 samples from image-folder"), out
    assert run("verify", ds_dir).stdout.startswith("ok: ")
    ds = stokehold.Dataset(str(ds_dir))
    assert len(ds) == 24 and ds.classes == ["class_000", "class_001", "class_002"]
    # --no-restart-markers: the JPEGs are stored byte for byte
    assert all(ds[i]["image"] == (imgs / ds[i]["path"]).read_bytes() for i in range(len(ds)))
    manifest = json.loads(run("inspect", ds_dir, "--json").stdout)
    assert manifest["total_records"] == 24
    assert manifest["source"]["restart_markers"] is False
    # by default pack rewrites the JPEGs losslessly with restart markers (a DRI segment)
    run("pack", imgs, ds_dir, "--overwrite")
    ds = stokehold.Dataset(str(ds_dir))
    original = (imgs / ds[0]["path"]).read_bytes()
    assert b"\xff\xdd" not in original.split(b"\xff\xda")[0]
    assert b"\xff\xdd" in ds[0]["image"].split(b"\xff\xda")[0]
    manifest = json.loads(run("inspect", ds_dir, "--json").stdout)
    assert manifest["source"]["restart_markers"] is True


def test_verify_exit_status_and_message_name_the_fault(tmp_path):
    imgs = make_images(tmp_path, n=12, classes=2)
    ds_dir = tmp_path / "ds"
    run("pack", imgs, ds_dir, "--shard-size", "4KiB")
    shard = ds_dir / "shard-000002.skh"
    b = bytearray(shard.read_bytes())
    b[40] ^= 0x04
    shard.write_bytes(bytes(b))
    p = run("verify", ds_dir, check=False)
    assert p.returncode == 1
    assert "shard-000002.skh" in p.stdout and "checksum mismatch in record 0" in p.stdout, p.stdout
    assert run("verify", "--help").returncode == 0
    assert run("verify", check=False).returncode == 2  # usage error


def add(tf, name, data, **kw):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in kw.items():
        setattr(info, k, v)
    tf.addfile(info, io.BytesIO(data))


def test_webdataset_member_grouping_matches_python_tarfile(tmp_path):
    long_dir = "d" * 120  # longer than ustar's 100-byte name: needs a PAX or GNU long name
    names = [f"{long_dir}/000.txt", f"{long_dir}/000.cls", "../up/001.txt", "../up/001.cls",
             "/abs/002.txt", "/abs/002.cls", "x.y/003.txt", "x.y/003.cls"]
    for fmt, suffix in [(tarfile.PAX_FORMAT, "pax"), (tarfile.GNU_FORMAT, "gnu")]:
        path = tmp_path / f"{suffix}.tar"
        with tarfile.open(path, "w", format=fmt) as tf:
            for i, n in enumerate(names):
                add(tf, n, str(i).encode() if n.endswith(".cls") else f"text {i}".encode())
            link = tarfile.TarInfo("004.txt")
            link.type = tarfile.SYMTYPE
            link.linkname = "/etc/passwd"
            tf.addfile(link)
        ds_dir = tmp_path / f"ds-{suffix}"
        # the refused link is 1 of 5 inputs: over the default skip limit of 1%, so allow it
        out = run("pack", path, ds_dir, "--max-skip-fraction", "1").stdout
        assert "1 input skipped" in out, out
        # Python's view of the archive: regular members, grouped into samples the WebDataset way
        with tarfile.open(path) as tf:
            regular = [m.name for m in tf.getmembers() if m.isreg()]
        expected_keys = []
        for n in regular:
            base = n.rsplit("/", 1)
            key = (base[0] + "/" if len(base) == 2 else "") + base[-1].split(".", 1)[0]
            if key not in expected_keys:
                expected_keys.append(key)
        ds = stokehold.Dataset(str(ds_dir))
        assert [ds[i]["__key__"] for i in range(len(ds))] == expected_keys
        assert [ds[i]["cls"] for i in range(len(ds))] == [1, 3, 5, 7]
        # nothing was created from member names
        assert not (tmp_path.parent / "up").exists() and not os.path.exists("/abs")


class _Marker:
    """Unpickling this writes a marker file: proof that something unpickled the member."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickle_members_are_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled-marker"
    payload = pickle.dumps(_Marker(str(marker)))
    path = tmp_path / "p.tar"
    with tarfile.open(path, "w") as tf:
        for i in range(3):
            add(tf, f"{i:03}.txt", b"hello")
            add(tf, f"{i:03}.pyd", payload)
    out = run("pack", path, tmp_path / "a").stdout
    assert "3 pickle members" in out and "--keep-pickle" in out, out
    assert stokehold.Dataset(str(tmp_path / "a")).schema == {"__key__": "string", "txt": "string"}
    run("pack", path, tmp_path / "b", "--keep-pickle")
    ds = stokehold.Dataset(str(tmp_path / "b"))
    assert ds.schema["pyd"] == "bytes"
    assert all(ds[i]["pyd"] == payload for i in range(len(ds)))  # opaque bytes, as stored
    assert not marker.exists()


def test_interrupted_pack_leaves_nothing_that_looks_like_a_dataset(tmp_path):
    imgs = make_images(tmp_path, n=300, classes=3)
    dest = tmp_path / "ds"
    # a tiny shard size makes the pack long enough to interrupt
    p = subprocess.Popen([*CLI, "pack", str(imgs), str(dest), "--shard-size", "1KiB", "--threads", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not any(n.name.startswith(".ds.partial-") for n in tmp_path.iterdir()):
        time.sleep(0.002)
    p.send_signal(signal.SIGINT)
    p.wait(timeout=30)
    if p.returncode == 0:
        # it finished before the signal arrived: then it must be complete and valid
        assert run("verify", dest).returncode == 0
    else:
        assert p.returncode == -signal.SIGINT
        assert not dest.exists()
        # the next pack sweeps the dead process's staging directory and succeeds
        run("pack", imgs, dest)
        assert not any(n.name.startswith(".ds.partial-") for n in tmp_path.iterdir())
        assert len(stokehold.Dataset(str(dest))) == 300


def test_a_closed_pipe_ends_the_installed_command_quietly_with_status_0(tmp_path):
    # `stokehold inspect DS | head -0`: the reader is gone before the command writes
    imgs = make_images(tmp_path, n=6, classes=2)
    ds_dir = tmp_path / "ds"
    run("pack", imgs, ds_dir)
    for extra in ([], ["--json"]):
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([*CLI, "inspect", str(ds_dir), *extra], stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(w)
        assert p.returncode == 0 and p.stderr == "", (extra, p.returncode, p.stderr)


def test_reading_a_folder_that_is_not_a_dataset_says_to_pack_it_first(tmp_path):
    imgs = make_images(tmp_path, n=2, classes=1)
    p = run("inspect", imgs, check=False)
    assert p.returncode == 1
    assert p.stderr.startswith(f"error: {imgs} is not a stokehold dataset"), p.stderr
    assert f"`stokehold pack {imgs} DATASET_DIR`" in p.stderr and "os error" not in p.stderr, p.stderr
