"""What a kernel folder declares, and how the kit finds it: `kernels/<name>/` holds a CUDA source
and a `spec.py` defining `SPEC = KernelSpec(...)`, everything the kit needs to check, time and
report it, so adding an operation means adding a folder."""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kernelkit import KitError, sha256_text
from kernelkit.inputs import PATTERNS

Shape = tuple[int, ...]

SHAPE_PATTERN = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*)*$")
# A sweep point's name, `base[p1=v1,p2=v2]`, or `base@p1=v1,p2=v2` in paths (glob reads `[` `]`).
POINT_PATTERN = re.compile(r"^(?P<base>[A-Za-z0-9_]+)(?:\[(?P<bracket>[^\]]*)\]|@(?P<file>.*))$")


def point_name(base: str, values: Mapping[str, Any]) -> str:
    """`base[p1=v1,p2=v2]`: the swept parameters only, in the grid's declaration order."""
    return f"{base}[{','.join(f'{p}={v}' for p, v in values.items())}]"


def parse_point(name: str) -> tuple[str, dict[str, str]] | None:
    """(base, {param: value text}) of a point name in either spelling; None for a plain layout name."""
    match = POINT_PATTERN.match(name)
    if match is None:
        return None
    body = match.group("bracket") if match.group("bracket") is not None else match.group("file")
    pairs = [item.partition("=") for item in body.split(",")] if body else []
    if not pairs or any(not p or not sep or not v for p, sep, v in pairs):
        raise KitError(f"layout '{name}' is not a sweep point name; write it as base[param=value,...]")
    return match.group("base"), {p: v for p, _, v in pairs}


def file_name(layout: str) -> str:
    """The spelling of a layout in paths and wildcards: `tiled[bm=64]` -> `tiled@bm=64`."""
    parsed = parse_point(layout)
    return layout if parsed is None else f"{parsed[0]}@{','.join(f'{p}={v}' for p, v in parsed[1].items())}"


def display_name(layout: str) -> str:
    """The spelling of a layout in reports: `tiled@bm=64` -> `tiled[bm=64]`."""
    parsed = parse_point(layout)
    return layout if parsed is None else point_name(*parsed)


@dataclass(frozen=True)
class Sweep:
    """A base layout's grid expanded: valid points (name, full parameters) and refused ones (name, sentence)."""

    base: str
    valid: tuple[tuple[str, Mapping[str, Any]], ...]
    invalid: tuple[tuple[str, str], ...]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.valid]


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int = 0


@dataclass(frozen=True)
class Mutation:
    """A negative control: one exact text edit of the source that the checks must catch. The text
    must occur exactly once, so that an edit of the kernel breaks the control loudly instead of
    silently turning it into the correct kernel."""

    find: str
    replace: str
    why: str
    # Why the CPU emulation cannot show this bug (a race needs threads), or "": the CPU tests say so.
    needs_gpu_to_show: str = ""

    def apply(self, source: str) -> str:
        count = source.count(self.find)
        if count != 1:
            raise KitError(f"negative-control text {self.find!r} occurs {count} times in the source, expected once")
        return source.replace(self.find, self.replace)


@dataclass(frozen=True)
class Baseline:
    """A library implementation timed beside the hand-written kernels: `make_call(buffers, shape)`, run
    untimed, returns a callable that enqueues one evaluation and returns the float32 output it allocated."""

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
    # Options a layout's parameters add (`-DBM=128`), so one source serves every point of a grid.
    layout_options: Callable[[Mapping[str, Any]], tuple[str, ...]] = lambda layout: ()
    # For reductions, FP32 rounding error scales with the sum of the absolute terms, not |reference|
    # (which cancellation can make tiny): the relative tolerance applies to what this returns.
    error_scale: Callable[[Mapping[str, np.ndarray]], np.ndarray] | None = None
    baselines: Mapping[str, Baseline] = field(default_factory=dict)
    # Layouts whose bits may differ between identical launches (atomics), each with the reason.
    nondeterministic: Mapping[str, str] = field(default_factory=dict)
    # The float64 reference on CuPy arrays; None: `reference` itself is tried (kernelkit.verify).
    device_reference: Callable[[Mapping[str, Any]], Any] | None = None
    # The correctness shapes compute-sanitizer runs (pattern `normal`); None: see sanitizer_shapes_used.
    sanitizer_shapes: tuple[Shape, ...] | None = None
    # bytes_moved counts each datum once; gathers that re-read rows state what they issue here.
    bytes_issued: Callable[[Shape], int] | None = None
    # Layout -> elements per vector access: at a width not a multiple, it takes its scalar path.
    vector_width: Mapping[str, int] = field(default_factory=dict)
    # Layout -> parameter -> values: the grid its sweep spans; each point overrides the layout's own.
    sweeps: Mapping[str, Mapping[str, Sequence[Any]]] = field(default_factory=dict)
    folder: Path = field(default=Path("."))

    @property
    def source_path(self) -> Path:
        return self.folder / self.source

    def source_text(self, mutation: str | None = None) -> str:
        text = self.source_path.read_text(encoding="utf-8")
        return text if mutation is None else self.mutation(mutation).apply(text)

    def source_sha256(self, mutation: str | None = None) -> str:
        return sha256_text(self.source_text(mutation))

    @property
    def all_layouts(self) -> tuple[str, ...]:
        """Hand-written layouts first, then the library baselines."""
        return (*self.layouts, *self.baselines)

    def layout(self, name: str) -> Mapping[str, Any]:
        """A layout's parameters as recorded with its results; a baseline's say which library call it is;
        a sweep point's are its base's with the point's values (in either spelling of its name)."""
        if name in self.layouts:
            return self.layouts[name]
        if name in self.baselines:
            return {"library": self.baselines[name].package, "call": self.baselines[name].call}
        parsed = parse_point(name)
        if parsed is not None:
            return self._point(name, *parsed)
        raise KitError(f"layout '{name}' is not defined for kernel '{self.name}'; allowed: {', '.join(self.all_layouts)}")

    def _point(self, name: str, base: str, texts: Mapping[str, str]) -> Mapping[str, Any]:
        if base not in self.sweeps or base not in self.layouts:
            raise KitError(f"layout '{name}' names the sweep '{base}', which kernel '{self.name}' does not define; "
                           f"allowed: {', '.join(self.sweeps) or '(none)'}")
        grid = self.sweeps[base]
        if list(texts) != list(grid):
            raise KitError(f"layout '{name}' must name every parameter of the '{base}' grid, in its order: "
                           f"{', '.join(grid)}")
        values = {}
        for param, text in texts.items():
            matches = [v for v in grid[param] if str(v) == text]
            if not matches:
                raise KitError(f"layout '{name}' sets {param}={text}, which the '{base}' grid does not hold; "
                               f"allowed: {', '.join(map(str, grid[param]))}")
            values[param] = matches[0]
        return {**self.layouts[base], **values}

    def sweep(self, base: str, shapes: Sequence[Shape] = ()) -> Sweep:
        """Every point of a base layout's grid, split into those the spec accepts and those its `layout_options`
        or `launch` refuse (at a correctness shape or one of `shapes`), which never become targets."""
        if base not in self.sweeps or base not in self.layouts:
            raise KitError(f"kernel '{self.name}' defines no sweep '{base}'; allowed: {', '.join(self.sweeps) or '(none)'}")
        grid = self.sweeps[base]
        valid, invalid = [], []
        for combination in itertools.product(*grid.values()):
            name = point_name(base, dict(zip(grid, combination)))
            parameters = self.layout(name)
            try:
                self.layout_options(parameters)
                for shape in (*self.correctness_shapes, *shapes):
                    self.launch(parameters, shape)
            except KitError as refusal:
                invalid.append((name, str(refusal)))
            else:
                valid.append((name, parameters))
        return Sweep(base, tuple(valid), tuple(invalid))

    def is_baseline(self, name: str) -> bool:
        self.layout(name)
        return name in self.baselines

    def entry_of(self, layout: str) -> str:
        """The kernel function a layout launches: its own `entry`, else the spec's."""
        return str(self.layout(layout).get("entry", self.entry))

    def sanitizer_shapes_used(self) -> tuple[Shape, ...]:
        """The spec's `sanitizer_shapes`, else every correctness shape but the largest (at least one):
        the others still reach every code path, and the largest costs most under instrumentation."""
        if self.sanitizer_shapes is not None:
            return tuple(self.sanitizer_shapes)
        if len(self.correctness_shapes) < 2:
            return tuple(self.correctness_shapes)
        largest = max(self.correctness_shapes, key=lambda shape: (int(np.prod(self.output_shape(shape))), shape))
        return tuple(shape for shape in self.correctness_shapes if shape != largest)

    def compile_options_of(self, layout: str) -> tuple[str, ...]:
        """The NVRTC options a hand-written layout is built with: the spec's, then its own."""
        return (*self.compile_options, *self.layout_options(self.layout(layout)))

    def mutation(self, name: str) -> Mutation:
        if name not in self.mutations:
            raise KitError(f"negative control '{name}' is not defined for kernel '{self.name}'; "
                           f"allowed: {', '.join(self.mutations)}")
        return self.mutations[name]

    def parse_shape(self, text: str) -> Shape:
        """`512x128` -> (512, 128), with one dimension per entry of `dims`."""
        dims = "x".join(d.upper() for d in self.dims)
        if not SHAPE_PATTERN.match(text):
            raise KitError(f"shape '{text}' of kernel '{self.name}' is malformed; write it as {dims} "
                           "with positive integers, e.g. " + "x".join(["512", "128", "64"][: len(self.dims)]))
        shape = tuple(int(part) for part in text.split("x"))
        if len(shape) != len(self.dims):
            raise KitError(f"shape '{text}' of kernel '{self.name}' has {len(shape)} dimensions; "
                           f"it needs {len(self.dims)} ({dims})")
        return shape


def shape_name(shape: Shape) -> str:
    return "x".join(str(n) for n in shape)


def kernels_dir() -> Path:
    """The `kernels/` folder: $KERNELKIT_KERNELS, else `kernels/` under the working directory."""
    return Path(os.environ.get("KERNELKIT_KERNELS", "kernels"))


def available(root: Path | None = None) -> list[str]:
    root = kernels_dir() if root is None else root
    return sorted(p.name for p in root.iterdir() if (p / "spec.py").is_file()) if root.is_dir() else []


EMULATION_FILE = "emulation.py"


def _module(name: str, path: Path) -> Any:
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def load_emulation(spec: KernelSpec) -> Callable[..., tuple[np.ndarray, np.ndarray | None]]:
    """The kernel folder's CPU emulation, the CPU tests' stand-in for the GPU: `emulate(inputs, layout,
    control=None)` returns the float32 output and a mask of elements left unwritten (or None)."""
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
    for layout, reason in spec.nondeterministic.items():
        if layout not in spec.all_layouts or not str(reason).strip():
            raise KitError(f"kernels/{name}/spec.py declares layout '{layout}' nondeterministic; name a layout of the "
                           f"spec ({', '.join(spec.all_layouts)}) and say why, e.g. {{'{layout}': 'atomics add in arrival order'}}")
    return replace(spec, folder=folder.resolve())
