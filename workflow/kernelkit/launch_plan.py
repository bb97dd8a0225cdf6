"""The plans kernelkit.driver_launch runs under compute-sanitizer: the binaries of the layouts'
builds (the bytes the timing loads, kernelkit.binaries), the inputs of the sanitizer's cases as
the correctness stage draws them, and each launch's geometry and arguments as the spec gives them.

Why a plan and not the kit's own command in the child: see kernelkit.driver_launch. The parent
does the work that needs NumPy and CuPy (inputs, NVRTC), none of which needs a CUDA context, so
the plan is written outside the GPU lock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from kernelkit import KitError, binaries
from kernelkit.driver_launch import PLAN_FILE, PLAN_VERSION, SCALAR_TYPES
from kernelkit.inputs import rng_for
from kernelkit.output_check import SENTINEL_BITS
from kernelkit.spec import KernelSpec, Shape, shape_name


class _Output:
    """Stands for the output buffer in the spec's `arguments`; each launch gets a fresh one."""


def _argument(value: Any, output: _Output, output_bytes: int, buffer_names: dict[int, str], launch: str) -> dict[str, Any]:
    if value is output:
        return {"output_bytes": output_bytes, "fill": int(SENTINEL_BITS)}
    if isinstance(value, np.ndarray) and id(value) in buffer_names:
        return {"buffer": buffer_names[id(value)]}
    if isinstance(value, np.generic) and value.dtype.name in SCALAR_TYPES:
        return {"scalar": value.dtype.name, "value": value.item()}
    raise KitError(f"{launch}: the spec's arguments give {type(value).__name__} "
                   f"{getattr(value, 'dtype', '')}, which a launch plan cannot pass; "
                   f"allowed: input arrays, the output, NumPy scalars of {', '.join(SCALAR_TYPES)}")


def write_plan(spec: KernelSpec, layouts: Sequence[str], cases: Sequence[tuple[Shape, str]], directory: Path,
               mutation: str | None = None, lock: dict[str, Any] | None = None) -> dict[str, str]:
    """Write the plan of every case of every hand-written layout into `directory`; returns each
    layout's binary SHA-256. `lock`: the GPU lock the child shares (`key` and `settings`), or None."""
    from kernelkit import device

    directory.mkdir(parents=True, exist_ok=True)
    built = {layout: device.compile_binary(spec.source_text(mutation), binaries.build_options(spec.compile_options_of(layout)))
             for layout in layouts}
    buffers: dict[str, dict[str, Any]] = {}
    launches = []
    for shape, pattern in cases:
        host_inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, shape_name(shape), pattern))
        names = {}
        for input_name, array in host_inputs.items():
            name = f"{shape_name(shape)}-{pattern}-{input_name}"
            (directory / f"{name}.bin").write_bytes(np.ascontiguousarray(array).tobytes())
            buffers[name] = {"file": f"{name}.bin"}
            names[id(array)] = name
        output_bytes = int(np.prod(spec.output_shape(shape))) * np.dtype(np.float32).itemsize
        for layout in layouts:
            label = f"{spec.name} {layout} {shape_name(shape)} {pattern}"
            output = _Output()
            geometry = spec.launch(spec.layout(layout), shape)
            arguments = [_argument(value, output, output_bytes, names, label)
                         for value in spec.arguments(host_inputs, output, shape)]
            launches.append({"label": label, "binary": layout, "entry": spec.entry_of(layout),
                             "grid": list(geometry.grid), "block": list(geometry.block),
                             "shared_mem": int(geometry.shared_mem), "arguments": arguments})
    plan = {"version": PLAN_VERSION, "lock": lock, "binaries": {layout: str(binary.path) for layout, binary in built.items()},
            "buffers": buffers, "launches": launches}
    (directory / PLAN_FILE).write_text(json.dumps(plan, indent=1), encoding="utf-8")
    return {layout: binary.sha256 for layout, binary in built.items()}
