"""Bounds on the shapes a config may name: what no GPU can run is refused before any job starts,
and what this device cannot hold is refused by a stage that knows the device's memory."""

from __future__ import annotations

import math

from kernelkit import KitError, spec as specs

# Bounds no sensible experiment reaches, so that a typo stops here instead of in every job.
MAX_DIMENSION = 2**31 - 1  # the kernels take their sizes as 32-bit integers
MAX_OUTPUT_BYTES = 2**40  # 1 TiB for a float32 output alone


def check_bounds(spec: specs.KernelSpec, shape: specs.Shape) -> None:
    """Refuse shapes no GPU can run, before a job tries (the device's memory is `check_fits`'s)."""
    text = specs.shape_name(shape)
    if max(shape) > MAX_DIMENSION:
        raise KitError(f"shape '{text}' of kernel '{spec.name}' has a dimension above {MAX_DIMENSION} "
                       "(the kernels take sizes as 32-bit integers)")
    output = _output_bytes(spec, shape)
    if output > MAX_OUTPUT_BYTES:
        raise KitError(f"shape '{text}' of kernel '{spec.name}' has a float32 output of {_gib(output)}, "
                       f"more than the {_gib(MAX_OUTPUT_BYTES)} any shape may have")


def _output_bytes(spec: specs.KernelSpec, shape: specs.Shape) -> int:
    return 4 * math.prod(spec.output_shape(shape))


def _gib(count: float) -> str:
    return f"{count / 2**30:,.1f} GiB"


def check_fits(spec: specs.KernelSpec, shape: specs.Shape, device_bytes: int, copies: int = 1) -> None:
    """One sentence when a shape cannot fit in the device's memory; only the float32 output of every copy
    counts, a lower bound, as an estimate that over-counted (a gather's rows) would refuse shapes that fit."""
    needed = copies * _output_bytes(spec, shape)
    if needed > device_bytes:
        copies_text = f" in {copies} copies" if copies > 1 else ""
        raise KitError(f"shape '{specs.shape_name(shape)}' of kernel '{spec.name}' needs at least {_gib(needed)} for its "
                       f"float32 output{copies_text}, more than the device's {_gib(device_bytes)} of memory")
