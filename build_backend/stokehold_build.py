"""The PEP 517 build backend of stokehold: maturin's, behind a check of the system tools.

A source build compiles libjpeg-turbo with its SIMD code, which needs ``cmake`` and ``nasm``
besides Rust and a C compiler. Without them maturin fails minutes into the build with the cause
buried in a long log; this backend says what is missing, and how to get it, before anything
compiles. Only ``pip install`` / ``pip wheel`` from a checkout or an sdist come through here
(``maturin build`` and ``maturin develop`` read ``[tool.maturin]`` directly).
"""

from __future__ import annotations

import shutil
import sys
from typing import Any, Dict, Optional

import maturin
from maturin import *  # noqa: F401,F403  (every other hook of the backend, unchanged)

# the tool, why the build needs it, and where it usually comes from
_NEEDED = (
    ("cargo", "builds the Rust extension", "https://rustup.rs"),
    ("rustc", "compiles the Rust extension", "https://rustup.rs"),
    ("cc", "a C compiler, compiles libjpeg-turbo and zstd", "apt-get install build-essential"),
    ("cmake", "configures libjpeg-turbo's build", "apt-get install cmake (or pip install cmake)"),
    ("nasm", "assembles libjpeg-turbo's SIMD code", "apt-get install nasm"),
)


def missing_tools() -> list:
    """The tools a source build needs that are not on PATH, with why and how to get each."""
    out = []
    for tool, why, how in _NEEDED:
        if tool == "cc" and any(shutil.which(c) for c in ("cc", "gcc", "clang")):
            continue
        if shutil.which(tool) is None:
            out.append((tool, why, how))
    return out


def _check() -> None:
    gone = missing_tools()
    if not gone:
        return
    lines = [
        "stokehold: cannot build from source: "
        + ", ".join(t for t, _, _ in gone)
        + (" is" if len(gone) == 1 else " are")
        + " not installed."
    ]
    lines += [f"  {t} ({why}): {how}" for t, why, how in gone]
    lines.append(
        "  Or install a prebuilt wheel, which needs none of them (`make wheel` on a machine with "
        "the tools makes one in dist/)."
    )
    print("\n".join(lines), file=sys.stderr)
    raise SystemExit(1)


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    _check()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    _check()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    _check()  # pip asks for metadata first, and maturin already needs Rust for that
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Optional[Dict[str, Any]] = None
) -> str:
    _check()
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)
