"""Kernel binaries: each hand-written build is compiled once per machine to a cubin kept on disk,
and every process that runs it loads those very bytes, the compute-sanitizer children too.

Why not CuPy's RawKernel: the sanitizer must check the binary that is timed, and a sanitizer
child that imports CuPy took twice as long as one that only calls the driver (H200). Records
carry the binary's SHA-256. KIT_OPTIONS (`-ftz=true`) is what RawKernel added to every build.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from kernelkit.records import write_bytes_atomic

KIT_OPTIONS = ("-ftz=true",)
CACHE_VARIABLE = "KERNELKIT_BINARY_CACHE"
ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class Binary:
    """A compiled build on disk: a cubin, or PTX where NVRTC cannot target the GPU's architecture."""

    path: Path
    sha256: str


def cache_dir() -> Path:
    """KERNELKIT_BINARY_CACHE, else kernelkit/binaries under XDG_CACHE_HOME (default ~/.cache)."""
    chosen = os.environ.get(CACHE_VARIABLE)
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kernelkit" / "binaries"


def build_options(options: Sequence[str]) -> tuple[str, ...]:
    """The options a build is compiled with: the given ones, then the kit's own not already among them."""
    return (*options, *(option for option in KIT_OPTIONS if option not in options))


def cache_key(source: str, options: Sequence[str], arch: str, nvrtc_version: str, cupy_version: str) -> str:
    """The name of a build's binary in the cache: a hash of everything its bytes depend on."""
    described = json.dumps({"source": source, "options": list(options), "arch": arch, "nvrtc": nvrtc_version,
                            "cupy": cupy_version}, sort_keys=True)
    return hashlib.sha256(described.encode("utf-8")).hexdigest()


def cached(key: str, directory: Path | None = None) -> Binary | None:
    """The binary stored under `key`, or None."""
    folder = directory or cache_dir()
    for suffix in (".cubin", ".ptx"):
        path = folder / f"{key}{suffix}"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        return Binary(path, hashlib.sha256(data).hexdigest())
    return None


def store(key: str, data: bytes | str, directory: Path | None = None) -> Binary:
    """Keep a compiled build under `key`, written atomically: two processes compiling the same build
    at once both write whole files, and the second rename leaves the same bytes."""
    data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if not data.startswith(ELF_MAGIC) and not data.endswith(b"\0"):
        data += b"\0"  # the driver reads PTX as a C string
    path = (directory or cache_dir()) / f"{key}{'.cubin' if data.startswith(ELF_MAGIC) else '.ptx'}"
    write_bytes_atomic(path, data)
    return Binary(path, hashlib.sha256(data).hexdigest())
