"""Parameter sweeps as tracked targets: a spec declares grids per base layout, the config picks
which to expand, and every valid point becomes a layout of its own (`base@p=v,...` in paths) with
its own targets. Points the spec refuses are left out; the report counts them."""

from __future__ import annotations

from typing import Any, Mapping

from kernelkit import KitError, spec as specs


def configured_sweeps(spec: specs.KernelSpec, entry: Mapping[str, Any]) -> list[specs.Sweep]:
    """The expanded grids a kernel's config entry selects, checked at its configured shapes."""
    shapes = [spec.parse_shape(shape) for shape in entry["shapes"]]
    return [spec.sweep(base, shapes) for base in entry.get("sweeps", [])]


def layouts(spec: specs.KernelSpec, entry: Mapping[str, Any]) -> list[str]:
    """Every layout a kernel's targets run: the configured ones, then each selected sweep's valid points."""
    points = [specs.file_name(name) for sweep in configured_sweeps(spec, entry) for name in sweep.names]
    return [*entry["layouts"], *(p for p in points if p not in entry["layouts"])]


def control_layouts(spec: specs.KernelSpec, entry: Mapping[str, Any]) -> list[str]:
    """The layouts each negative control runs: every hand-written layout of the spec (a mutation may aim
    at one not configured), and the first valid point of each selected sweep (every point would
    multiply each control by the grid for no new kind of evidence)."""
    firsts = [specs.file_name(sweep.names[0]) for sweep in configured_sweeps(spec, entry) if sweep.names]
    return [*spec.layouts, *firsts]


def check_config(kernel: str, entry: Mapping[str, Any], spec: specs.KernelSpec) -> None:
    """One sentence for a sweep the spec does not define, or one whose every point it refuses."""
    for index, base in enumerate(entry.get("sweeps", [])):
        if base not in spec.sweeps:
            raise KitError(f"config key 'kernels.{kernel}.sweeps.{index}' names '{base}', which {kernel} defines no "
                           f"sweep for; allowed: {', '.join(spec.sweeps) or '(none)'}")
    for sweep in configured_sweeps(spec, entry):
        if not sweep.valid:
            raise KitError(f"config key 'kernels.{kernel}.sweeps' selects '{sweep.base}', whose every point the spec "
                           f"refuses at the configured shapes, e.g. {sweep.invalid[0][1]}")
