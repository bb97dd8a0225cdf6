"""What a kernel folder declares, and how the kit finds it.

An operation lives in `kernels/<name>/`: a CUDA source and a `spec.py` that defines
`SPEC = KernelSpec(...)`. The kit never special-cases an operation; everything it needs
to check, time and report a kernel comes from this object, so adding an operation means
adding a folder.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from kernelkit import KitError
from kernelkit.inputs import PATTERNS
from kernelkit.records import sha256_text

Shape = tuple[int, ...]

SHAPE_PATTERN = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int = 0


@dataclass(frozen=True)
class Mutation:
    """A negative control: one exact text edit of the source that the checks must catch.

    The text to find must occur exactly once, so that an edit of the kernel that moves it
    breaks the control loudly instead of silently turning it into the correct kernel.
    """

    find: str
    replace: str
    why: str

    def apply(self, source: str) -> str:
        count = source.count(self.find)
        if count != 1:
            raise KitError(f"negative-control text {self.find!r} occurs {count} times in the source, expected once")
        return source.replace(self.find, self.replace)


@dataclass(frozen=True)
class Baseline:
    """A library implementation timed beside the hand-written kernels (a layout with no CUDA source).

    `make_call(buffers, shape)` runs untimed: it may convert the CuPy input buffers, build
    sparse matrices or compile a Triton kernel, and returns a zero-argument callable that
    enqueues one evaluation on the current stream and returns the output array (CuPy or
    torch, float32, in the output shape). The library allocates that output itself, so
    guard regions do not apply; the sentinel check still sees a result of the wrong size.
    """

    package: str
    call: str
    make_call: Callable[[Mapping[str, Any], Shape], Callable[[], Any]]


@dataclass(frozen=True)
class Tolerance:
    """Pass when |out - ref| <= abs + rel * |ref|; NaN or Inf never passes."""

    abs: float
    rel: float


@dataclass(frozen=True)
class KernelSpec:
    name: str
    source: str
    entry: str
    dims: tuple[str, ...]
    layouts: Mapping[str, Mapping[str, Any]]
    correctness_shapes: tuple[Shape, ...]
    tolerance: Tolerance
    mutations: Mapping[str, Mutation]
    make_inputs: Callable[[Shape, str, np.random.Generator], dict[str, np.ndarray]]
    reference: Callable[[Mapping[str, np.ndarray]], np.ndarray]
    launch: Callable[[Mapping[str, Any], Shape], Launch]
    arguments: Callable[[Mapping[str, Any], Any, Shape], tuple]
    bytes_moved: Callable[[Shape], int]
    flops: Callable[[Shape], int]
    patterns: tuple[str, ...] = PATTERNS
    timing_pattern: str = "normal"
    output_shape: Callable[[Shape], Shape] = lambda shape: shape
    compile_options: tuple[str, ...] = ("--std=c++17",)
    # Extra options a layout's parameters ask for (e.g. `-DBM=128` for a tile size), so that
    # one source serves every point of a parameter grid; appended to `compile_options`.
    layout_options: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda layout: ()
    # For reductions, the size an FP32 rounding error scales with is the sum of the absolute
    # terms, not |reference| (which cancellation can make tiny); a spec that reduces returns
    # that sum here and the relative tolerance applies to it.
    error_scale: Callable[[Mapping[str, np.ndarray]], np.ndarray] | None = None
    baselines: Mapping[str, Baseline] = field(default_factory=dict)
    # bytes_moved counts compulsory traffic (each datum once); a layout family that must issue
    # more (gathers re-reading rows) states that count here, and the report shows both.
    bytes_issued: Callable[[Shape], int] | None = None
    # Layout -> elements per vector access along the last dimension: at a width that is not a
    # multiple, that layout takes its scalar path, which the report then names as a reason.
    vector_width: Mapping[str, int] = field(default_factory=dict)
    folder: Path = field(default=Path("."))

    @property
    def source_path(self) -> Path:
        return self.folder / self.source

    def source_text(self, mutation: str | None = None) -> str:
        text = self.source_path.read_text(encoding="utf-8")
        if mutation is None:
            return text
        return self.mutation(mutation).apply(text)

    def source_sha256(self, mutation: str | None = None) -> str:
        return sha256_text(self.source_text(mutation))

    @property
    def all_layouts(self) -> tuple[str, ...]:
        """Hand-written layouts first, then the library baselines."""
        return (*self.layouts, *self.baselines)

    def layout(self, name: str) -> Mapping[str, Any]:
        """A layout's parameters as recorded with its results; a baseline's say which library call it is."""
        if name in self.layouts:
            return self.layouts[name]
        if name in self.baselines:
            return {"library": self.baselines[name].package, "call": self.baselines[name].call}
        raise KitError(f"layout '{name}' is not defined for kernel '{self.name}'; allowed: {', '.join(self.all_layouts)}")

    def is_baseline(self, name: str) -> bool:
        self.layout(name)
        return name in self.baselines

    def entry_of(self, layout: str) -> str:
        """The kernel function a layout launches: its own `entry`, else the spec's."""
        return str(self.layout(layout).get("entry", self.entry))

    def compile_options_of(self, layout: str) -> tuple[str, ...]:
        """The NVRTC options a hand-written layout is built with: the spec's, then its own."""
        return (*self.compile_options, *self.layout_options(self.layout(layout)))

    def mutation(self, name: str) -> Mutation:
        if name not in self.mutations:
            raise KitError(
                f"negative control '{name}' is not defined for kernel '{self.name}'; allowed: {', '.join(self.mutations)}"
            )
        return self.mutations[name]

    def parse_shape(self, text: str) -> Shape:
        """`512x128` -> (512, 128), with one dimension per entry of `dims`."""
        if not SHAPE_PATTERN.match(text):
            raise KitError(
                f"shape '{text}' of kernel '{self.name}' is malformed; write it as {'x'.join(d.upper() for d in self.dims)} "
                "with positive integers, e.g. " + "x".join(["512", "128", "64"][: len(self.dims)])
            )
        shape = tuple(int(part) for part in text.split("x"))
        if len(shape) != len(self.dims):
            raise KitError(
                f"shape '{text}' of kernel '{self.name}' has {len(shape)} dimensions; "
                f"it needs {len(self.dims)} ({'x'.join(d.upper() for d in self.dims)})"
            )
        return shape


def shape_name(shape: Shape) -> str:
    return "x".join(str(n) for n in shape)


def kernels_dir() -> Path:
    """The `kernels/` folder: $KERNELKIT_KERNELS, else `kernels/` under the working directory."""
    return Path(os.environ.get("KERNELKIT_KERNELS", "kernels"))


def available(root: Path | None = None) -> list[str]:
    root = kernels_dir() if root is None else root
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "spec.py").is_file())


EMULATION_FILE = "emulation.py"


def _module(name: str, path: Path) -> Any:
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def load_emulation(spec: KernelSpec) -> Callable[..., tuple[np.ndarray, np.ndarray | None]]:
    """The kernel folder's CPU emulation (kernels/<name>/emulation.py): the CPU test suite's
    stand-in for the GPU, never used on it.

    `emulate(inputs, layout, control=None)` returns (output, unwritten): the kernel's arithmetic in
    float32, and a boolean mask of output elements the kernel would leave unwritten (or None);
    with `control`, the same for the mutated source. The tests check that it passes every
    correctness case and that each control fails one, which shows the spec's tolerance is neither
    too tight for FP32 nor loose enough to hide the bugs.
    """
    path = spec.folder / EMULATION_FILE
    if not path.is_file():
        raise KitError(f"kernels/{spec.name} has no {EMULATION_FILE}; every kernel folder carries its CPU emulation")
    emulate = getattr(_module(f"kernelkit_kernels.{spec.name}_emulation", path), "emulate", None)
    if not callable(emulate):
        raise KitError(f"kernels/{spec.name}/{EMULATION_FILE} defines no emulate(inputs, layout, control=None)")
    return emulate


def load(name: str, root: Path | None = None) -> KernelSpec:
    root = kernels_dir() if root is None else root
    folder = root / name
    if not (folder / "spec.py").is_file():
        raise KitError(f"kernel '{name}' is not defined; allowed: {', '.join(available(root)) or '(none found in ' + str(root) + ')'}")
    spec = getattr(_module(f"kernelkit_kernels.{name}", folder / "spec.py"), "SPEC", None)
    if not isinstance(spec, KernelSpec):
        raise KitError(f"kernels/{name}/spec.py defines no SPEC = KernelSpec(...)")
    if spec.name != name:
        raise KitError(f"kernels/{name}/spec.py names its kernel '{spec.name}'; it must match its folder '{name}'")
    return replace(spec, folder=folder.resolve())
