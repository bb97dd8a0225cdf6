"""Library baselines (CuPy, torch, Triton) running on the kit's streams and buffers.

Baselines share the hand-written kernels' inputs without copies (DLPack views) and run on
the stream the kit times, so a CUDA event pair brackets them exactly as it brackets a raw
launch. A baseline whose package is missing is skipped with the import error as its reason.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator, Mapping

PACKAGES = ("cupy", "torch", "triton")


def missing_reason(package: str) -> str | None:
    """Why a baseline's package cannot run here, or None when it can."""
    try:
        module = importlib.import_module(package)
    except Exception as error:  # an ImportError, or a broken install failing while it loads
        return f"{package} cannot be imported ({type(error).__name__}: {error})"
    if package == "torch" and not module.cuda.is_available():
        return "torch is installed without CUDA support or sees no GPU"
    if package == "triton" and (torch_missing := missing_reason("torch")):
        return f"triton kernels take torch tensors, and {torch_missing}"
    return None


def preload(package: str) -> None:
    """Import a baseline's package (and torch under Triton) now: seconds of CPU work that would
    otherwise happen inside make_call, while the process holds the GPU lock."""
    importlib.import_module(package)
    if package == "triton":
        importlib.import_module("torch")


def version(package: str) -> str:
    module = sys.modules.get(package) or importlib.import_module(package)
    return str(getattr(module, "__version__", "unknown"))


UNKNOWN_VERSION = "unknown (no version module or package metadata)"
VERSION_ASSIGNMENT = re.compile(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def installed_version(package: str) -> str | None:
    """What `version` would say, without importing the package: from its version module's text
    (Torch's carries its CUDA build, which its metadata leaves out), else from its distribution's
    metadata. None: not installed."""
    from importlib import metadata

    # Looked up on sys.path by hand: find_spec is an import attempt as far as import hooks can tell.
    folder = next((Path(entry or ".") / package for entry in sys.path
                   if (Path(entry or ".") / package / "__init__.py").is_file()), None)
    for name in ("version.py", "_version.py") if folder is not None else ():
        path = folder / name
        match = VERSION_ASSIGNMENT.search(path.read_text(errors="replace")) if path.is_file() else None
        if match:
            return match.group(1)
    distributions = metadata.packages_distributions().get(package) or []
    if not distributions:
        return None if folder is None else UNKNOWN_VERSION
    try:
        return metadata.version(distributions[0])
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def torch_views(buffers: Mapping[str, Any]) -> dict[str, Any]:
    """torch tensors sharing the buffers' memory (no copy), with FP32 matmuls kept in FP32; NumPy
    arrays give CPU tensors, for the CPU tests of the torch and (interpreted) Triton baselines."""
    import torch

    # TF32 would trade the FP32 comparison for a 10-bit mantissa; the kit compares FP32 to FP32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return {name: torch.from_dlpack(array) for name, array in buffers.items()}


def as_cupy(result: Any) -> Any:
    """A baseline's output as a CuPy array on the same memory."""
    import cupy as cp

    return result if isinstance(result, cp.ndarray) else cp.from_dlpack(result)


@contextlib.contextmanager
def on_stream(stream: Any) -> Iterator[None]:
    """Make `stream` current for CuPy and, when torch is loaded, for torch and Triton too."""
    with stream:
        torch = sys.modules.get("torch")
        if torch is None:
            yield
            return
        with torch.cuda.stream(torch.cuda.ExternalStream(stream.ptr)):
            yield


def kernel_module(spec_file: str, filename: str) -> ModuleType:
    """The Triton kernel module `filename` beside the spec file `spec_file`, imported once per process."""
    path = Path(spec_file).resolve().parent / filename
    name = f"kernelkit_kernels.{path.parent.name}.{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    return module


def array_module(array: Any) -> ModuleType:
    """CuPy for device arrays, NumPy for host arrays: CuPy baselines written once run on both,
    so the CPU tests check their arithmetic against the float64 reference."""
    module = type(array).__module__.split(".")[0]
    return importlib.import_module("cupy" if module == "cupy" else "numpy")


def sparse_module(array: Any) -> ModuleType:
    """cupyx.scipy.sparse (cuSPARSE) for device arrays, scipy.sparse for host arrays."""
    return importlib.import_module("cupyx.scipy.sparse" if array_module(array).__name__ == "cupy" else "scipy.sparse")
