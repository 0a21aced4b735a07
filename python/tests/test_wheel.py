"""The shipped wheel on a machine without a compiler (issue #17, items 1-2).

``make test`` builds the wheel (``make wheel``: release, abi3, manylinux_2_17, stripped) and passes
its path in ``STOKEHOLD_WHEEL``. This test installs it into a fresh virtual environment whose
PATH holds nothing but that environment (no Rust, cc, cmake or nasm can be found), runs the
``stokehold`` command it installed (``sample-data``, ``pack``, ``verify``, ``inspect``) and a
``Loader`` to a torch batch, and checks the wheel's size, its tags and, with auditwheel, that it
links no library outside the manylinux policy (run by hand without ``STOKEHOLD_WHEEL``, these
two skip); and that a source build without cmake or nasm stops at once naming them.

The fresh environment gets numpy from the package index (the wheel's one dependency) and sees
torch through a ``.pth`` line naming the test environment's site-packages, placed after its own
site-packages, so ``stokehold`` itself is imported from the fresh environment (asserted).
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest

WHEEL = os.environ.get("STOKEHOLD_WHEEL")
needs_wheel = pytest.mark.skipif(not WHEEL, reason="set STOKEHOLD_WHEEL to a built wheel (make test does)")

MAX_WHEEL_BYTES = 15 * 2**20
COMPILERS = ("cargo", "rustc", "cc", "gcc", "clang", "cmake", "nasm", "zig")


@needs_wheel
def test_the_wheel_is_portable_small_and_self_contained():
    wheel = Path(WHEEL)
    assert wheel.is_file(), f"STOKEHOLD_WHEEL={WHEEL} does not exist"
    size = wheel.stat().st_size
    assert size <= MAX_WHEEL_BYTES, f"{wheel.name}: {size / 2**20:.1f} MiB > 15 MiB"
    # the file name and the WHEEL metadata say abi3 and manylinux_2_17 (or older)
    assert "-cp39-abi3-" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        tags = [l.split(": ", 1)[1] for l in z.read(meta).decode().splitlines() if l.startswith("Tag: ")]
        names = z.namelist()
        native = [n for n in names if n.endswith(".so")]
    assert tags and all(t.startswith("cp39-abi3-manylinux") for t in tags), tags
    assert any("manylinux_2_17_x86_64" in t or "manylinux2014_x86_64" in t for t in tags), tags
    assert native == ["stokehold/_native.abi3.so"], native
    assert "stokehold/__init__.pyi" in names and "stokehold/py.typed" in names
    # auditwheel (from PyPI) reads the extension's dynamic symbols and libraries
    audit = shutil.which("auditwheel", path=os.path.dirname(sys.executable))
    assert audit, "auditwheel is not installed in the test environment (make setup installs it)"
    p = subprocess.run([audit, "show", str(wheel)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    text = " ".join(p.stdout.split())
    assert 'consistent with the following platform tag: "manylinux_2_17_x86_64"' in text, text
    assert "system-provided shared libraries" not in text or "libjpeg" not in text, text


@needs_wheel
def test_the_wheel_installs_and_runs_without_a_compiler(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bindir = venv / "bin"
    # PATH: the fresh environment only; nothing that could compile anything is reachable
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "CC", "CXX")}
    env["PATH"] = str(bindir)
    for tool in COMPILERS:
        assert shutil.which(tool, path=env["PATH"]) is None, tool

    t0 = time.monotonic()
    p = subprocess.run(
        [str(bindir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", WHEEL],
        env=env, capture_output=True, text=True, timeout=600,
    )
    install_s = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    print(f"pip install of the wheel (with numpy) into a fresh venv: {install_s:.1f} s")

    def cli(*args):
        r = subprocess.run([str(bindir / "stokehold"), *map(str, args)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"stokehold {args}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    cli("sample-data", "imgs", "--images", "40", "--classes", "4", "--size", "64x48")
    assert cli("pack", "imgs", "shards", "--shard-size", "32KiB").startswith("packed 40 samples")
    assert cli("verify", "shards").startswith("ok: ")
    manifest = json.loads(cli("inspect", "shards", "--json"))
    assert manifest["total_records"] == 40 and len(manifest["shards"]) > 1

    # torch from the test environment, after the fresh one's own packages
    purelib = sysconfig.get_paths()["purelib"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "zz_test_env.pth").write_text(purelib + "\n")
    script = """
import stokehold, torch, sys
from stokehold.image import RandomResizedCrop
assert stokehold.__file__.startswith(sys.prefix), stokehold.__file__
loader = stokehold.Loader("shards", batch_size=16, shuffle=True, seed=0,
                          transforms={"image": [RandomResizedCrop(32)]}, to="torch")
batch = next(iter(loader))
assert isinstance(batch["image"], torch.Tensor), type(batch["image"])
assert tuple(batch["image"].shape) == (16, 3, 32, 32), batch["image"].shape
assert batch["image"].dtype == torch.uint8 and batch["label"].dtype == torch.int64
assert int(batch["label"].max()) < 4
print(stokehold.__file__)
"""
    r = subprocess.run([str(bindir / "python"), "-c", script], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().startswith(str(venv)), r.stdout


@pytest.mark.parametrize("source", ["checkout", "sdist"])
def test_a_source_build_without_cmake_or_nasm_says_what_to_install(tmp_path, source):
    """``pip install .`` and the sdist: the build backend names the missing tools before compiling."""
    repo = Path(__file__).resolve().parents[2]
    bindir = os.path.dirname(sys.executable)
    if source == "sdist":
        subprocess.run([os.path.join(bindir, "maturin"), "sdist", "-o", str(tmp_path / "sdist")],
                       cwd=repo, check=True, capture_output=True, timeout=300)
        (target,) = (tmp_path / "sdist").glob("stokehold-*.tar.gz")
        # it carries the patched libjpeg-turbo the root Cargo.toml points [patch.crates-io] at
        import tarfile

        with tarfile.open(target) as t:
            names = set(t.getnames())
        root = target.name[: -len(".tar.gz")]
        for f in ("Cargo.toml", "vendor/turbojpeg-sys/Cargo.toml",
                  "vendor/turbojpeg-sys/libjpeg-turbo/src/jdhuff.c",
                  "vendor/turbojpeg-sys/libjpeg-turbo/simd/CMakeLists.txt"):
            assert f"{root}/{f}" in names, f
    else:
        target = repo
    # a PATH with python, pip and Rust but without cmake, nasm or a C compiler
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("cargo", "rustc"):
        found = shutil.which(tool)
        if found:
            (tools / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([str(tools), bindir])
    p = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
         str(tmp_path / "out"), str(target)],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert p.returncode != 0
    out = p.stdout + p.stderr
    assert "stokehold: cannot build from source" in out, out
    assert "cmake (configures libjpeg-turbo's build): apt-get install cmake" in out, out
    assert "nasm (assembles libjpeg-turbo's SIMD code): apt-get install nasm" in out, out
    assert "cargo (" not in out and "rustc (" not in out, out  # Rust was there: not named
    # stopped before compiling anything: no wheel, and no cargo build was started
    assert not list(tmp_path.glob("out/*.whl"))
    assert "Compiling" not in out, out
