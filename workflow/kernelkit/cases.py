"""The correctness cases and the suite that runs them, shared by the checks stage and the negative
controls (mutated builds through the same cases), and the gate that reads their records back:
nothing is timed without both (`require_checked`). Each case fills the output and guard regions
around it with a sentinel NaN, launches, and is judged by kernelkit.output_check.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from kernelkit import KitError, determinism
from kernelkit import config as kit_config
from kernelkit.gpulock import LOCK_KEYS, LockSettings
from kernelkit.gpulock import add_arguments as add_lock_argument
from kernelkit.inputs import rng_for
from kernelkit.output_check import GUARD_ELEMENTS, SENTINEL_BITS, check_case
from kernelkit.records import read_record
from kernelkit.spec import KernelSpec, Shape, shape_name


@dataclass(frozen=True)
class CheckSettings(kit_config.StageSettings):
    """The config's `checks` section (identical launches per correctness case) and how the
    correctness and control runs hold the GPU (`gpu_lock`, less its directory)."""

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {"checks": ("determinism_runs",), "gpu_lock": LOCK_KEYS}
    determinism_runs: int
    lock: LockSettings

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "CheckSettings":
        return cls(int(config["checks"]["determinism_runs"]), LockSettings.from_config(config["gpu_lock"]))


@dataclass
class CaseResult:
    kernel: str
    layout: str
    shape: str
    pattern: str
    passed: bool
    symptom: str
    max_abs_error: float
    max_rel_error: float
    worst_index: list[int]
    elements: int
    out_of_tolerance: int
    nonfinite: int
    sentinel_left: int
    guard_overwritten: int
    # Determinism over identical launches; the spec's reason where the layout is declared nondeterministic.
    deterministic: bool = True
    launches: int = 1
    differing_elements: int = 0
    nondeterministic_reason: str = ""


@dataclass
class PreparedCase:
    """One correctness case's CPU side, made before the GPU lock is taken: the host inputs and
    their float64 reference (uploading copies the bits as they are)."""

    layout: str
    shape: Shape
    pattern: str
    host_inputs: dict[str, np.ndarray]
    reference: np.ndarray
    scale: np.ndarray | None


def prepare_case(spec: KernelSpec, layout_name: str, shape: Shape, pattern: str) -> PreparedCase:
    host_inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, shape_name(shape), pattern))
    return PreparedCase(layout_name, shape, pattern, host_inputs, spec.reference(host_inputs),
                        spec.error_scale(host_inputs) if spec.error_scale else None)


def prepare_cases(spec: KernelSpec, layouts: Sequence[str], cases: Sequence[tuple[Shape, str]]) -> list[PreparedCase]:
    """Every layout's cases, each (shape, pattern)'s inputs and reference made once and shared by
    the layouts, which the judgement only reads (matmul's four layouts made each 1000^3 reference
    four times)."""
    made = {case: prepare_case(spec, layouts[0], *case) for case in dict.fromkeys(cases)} if layouts else {}
    return [replace(made[case], layout=layout) for layout in layouts for case in cases]


def launch_case(spec: KernelSpec, kernel: Any, case: PreparedCase, runs: int = 1) -> list[np.ndarray]:
    """The GPU side of one case: upload, then `runs` times a sentinel fill, one launch or library
    call (its result copied in) and a download of [guard | output | guard]'s raw bits."""
    from kernelkit import device

    cp = device.cupy()
    buffers = device.upload(case.host_inputs)
    out_shape = spec.output_shape(case.shape)
    elements = int(np.prod(out_shape))
    padded = cp.empty(GUARD_ELEMENTS + elements + GUARD_ELEMENTS, dtype=cp.uint32)
    out = padded[GUARD_ELEMENTS : GUARD_ELEMENTS + elements].view(cp.float32).reshape(out_shape)
    if spec.is_baseline(case.layout):
        from kernelkit import library

        call = spec.baselines[case.layout].make_call(buffers, case.shape)

        def launch_once() -> None:
            result = library.as_cupy(call())
            # A result of another shape or type is not copied: its case then fails as unwritten.
            if result.dtype == cp.float32 and tuple(result.shape) == tuple(out_shape):
                out[...] = result
    else:
        launch_once, _ = device.launcher(spec, kernel, spec.layout(case.layout), case.shape, buffers, out)

    launches = []
    for _ in range(max(1, runs)):
        padded.fill(int(SENTINEL_BITS))
        launch_once()
        cp.cuda.Device().synchronize()
        launches.append(device.download(padded))
    return launches


def judge_case(spec: KernelSpec, case: PreparedCase, launches: Sequence[np.ndarray]) -> CaseResult:
    """The first launch judged by `check_case`; all launches must agree bit for bit unless the
    spec declares the layout nondeterministic."""
    verdict = check_case(launches[0], case.reference, spec.tolerance, scale=case.scale)
    verdict = determinism.judge(verdict, determinism.compare_launches(launches), spec.nondeterministic.get(case.layout))
    worst_index = [int(i) for i in np.unravel_index(verdict.pop("worst_flat_index"), spec.output_shape(case.shape))]
    return CaseResult(kernel=spec.name, layout=case.layout, shape=shape_name(case.shape), pattern=case.pattern,
                      worst_index=worst_index, **verdict)


def compile_builds(spec: KernelSpec, layouts: Sequence[str], mutation: str | None, clock: Any) -> None:
    """Every hand-written layout's build of the (possibly mutated) source, compiled into the kit's
    binary cache before the GPU lock is taken (NVRTC needs no context), so that a compile never
    holds the GPU from other jobs and under the lock device.compile_kernel only loads."""
    from kernelkit import binaries, device

    with clock.phase("compile"):
        for options in sorted({spec.compile_options_of(layout) for layout in layouts if not spec.is_baseline(layout)}):
            device.compile_binary(spec.source_text(mutation), binaries.build_options(options))


def run_suite(spec: KernelSpec, layouts: list[str], mutation: str | None = None, runs: int = 1,
              cases: Sequence[tuple[Shape, str]] | None = None, lock: Any = None,
              clock: Any = None) -> list[CaseResult]:
    """Every correctness shape x pattern (or the `cases` given) for each layout, with the (possibly
    mutated) source, each case launched `runs` times: inputs, references and compiles first; then,
    holding the GPU lock, the context, the loads and every launch; then the judgement."""
    from kernelkit import device, gpujob, gpulock, library
    from kernelkit.nvml import Nvml

    def build(layout: str) -> tuple[str, tuple[str, ...]]:
        return spec.entry_of(layout), spec.compile_options_of(layout)

    clock = clock or gpujob.JobClock()
    builds = {build(layout) for layout in layouts if not spec.is_baseline(layout)}
    with clock.phase("import_library"):
        for package in sorted({spec.baselines[layout].package for layout in layouts if spec.is_baseline(layout)}):
            library.preload(package)
    with clock.phase("inputs_and_references"):
        prepared = prepare_cases(spec, layouts, cases if cases is not None else correctness_cases(spec))
    if not prepared:
        return []
    compile_builds(spec, layouts, mutation, clock)
    bus_id = device.cupy().cuda.Device().pci_bus_id
    with gpujob.shared_gpu(Nvml(bus_id), bus_id, lock or gpulock.LockSettings(), clock):
        with clock.phase("load"):
            compiled = {key: device.compile_kernel(spec, mutation, *key) for key in sorted(builds)}
        with clock.phase("launches"):
            launches = [launch_case(spec, None if spec.is_baseline(case.layout) else compiled[build(case.layout)],
                                    case, runs) for case in prepared]
    with clock.phase("judge"):
        return [judge_case(spec, case, case_launches) for case, case_launches in zip(prepared, launches)]


def correctness_cases(spec: KernelSpec) -> list[tuple[Shape, str]]:
    return [(shape, pattern) for shape in spec.correctness_shapes for pattern in spec.patterns]


def sanitizer_cases(spec: Any) -> list[tuple[tuple[int, ...], str]]:
    """The few cases compute-sanitizer runs, in one pattern: values change no code path here."""
    return [(shape, "normal") for shape in spec.sanitizer_shapes_used()]


def suite_record(spec: KernelSpec, cases: list[CaseResult], mutation: str | None = None) -> dict[str, Any]:
    """The JSON body shared by correctness and control files."""
    failed = [case for case in cases if not case.passed]
    return {
        "kernel": spec.name,
        "source_sha256": spec.source_sha256(mutation),
        "compile_options": list(spec.compile_options),
        # Layouts whose parameters add options (tile sizes as -D...) were built with these.
        "layout_compile_options": {
            layout: list(spec.compile_options_of(layout))
            for layout in dict.fromkeys(case.layout for case in cases)
            if not spec.is_baseline(layout) and spec.compile_options_of(layout) != tuple(spec.compile_options)
        },
        "tolerance": asdict(spec.tolerance),
        "cases": [asdict(case) for case in cases],
        "case_count": len(cases),
        "failed_count": len(failed),
        "max_abs_error": max((case.max_abs_error for case in cases), default=0.0),
    }


def print_cases(cases: list[CaseResult]) -> None:
    for case in cases:
        mark = "ok  " if case.passed else "FAIL"
        print(
            f"{mark} {case.layout:>6} {case.shape:>8} {case.pattern:<12} max|err| {case.max_abs_error:.3e}"
            f"  worst {case.worst_index}  {'' if case.passed else case.symptom}"
        )


def hold_gpu(lock: Any, clock: Any) -> None:
    """Take this process's GPU lock before starting children on the GPU, who run under it
    (kernelkit.gpulock.child_environment) until this process exits."""
    from kernelkit import device, gpujob
    from kernelkit.nvml import Nvml

    bus_id = device.cupy().cuda.Device().pci_bus_id
    with gpujob.shared_gpu(Nvml(bus_id), bus_id, lock, clock):
        pass


def settings_lock_and_clock(args: argparse.Namespace) -> tuple[CheckSettings, LockSettings, Any]:
    """The stage's settings, its lock settings with --lock-dir applied, and a fresh job clock."""
    from kernelkit import gpujob

    settings = CheckSettings.from_json(args.settings)
    return settings, settings.lock.with_dir(args.lock_dir), gpujob.JobClock()


def require_checked(spec: KernelSpec, layout: str, correctness_file: str, control_files: list[str],
                    sanitizer_file: str | None = None) -> str | None:
    """Refuse to time a kernel whose correctness, controls and (when given) sanitizer record did not
    pass in this run, on this source; the reason when the layout was skipped, else None."""
    record = read_record(correctness_file)
    if layout in record.get("skipped", {}):
        return record["skipped"][layout]
    if not record.get("passed") or layout not in record.get("layouts", []):
        raise KitError(f"{correctness_file} does not record a pass for layout '{layout}'; nothing will be timed")
    if record["source_sha256"] != spec.source_sha256():
        raise KitError(f"{correctness_file} was made from another version of {spec.source_path}; rerun correctness first")
    checked = set()
    for path in control_files:
        control = read_record(path)
        if not control.get("caught"):
            raise KitError(f"{path} does not record the negative control as caught; nothing will be timed")
        checked.add(control["control"])
    missing = set(spec.mutations) - checked
    if missing:
        raise KitError(f"negative controls {', '.join(sorted(missing))} of {spec.name} have no result; nothing will be timed")
    if sanitizer_file:
        from kernelkit import sanitizer

        sanitizer.require_clean(spec, layout, sanitizer_file)
    return None


def add_check_settings(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settings", default=json.dumps({"checks": {}, "gpu_lock": {}}),
                        help="the stage's settings as JSON, a slice of the validated config (checks: determinism_runs; "
                             f"gpu_lock: {', '.join(LOCK_KEYS)}); default: the schema's defaults. "
                             "config/README.md explains each key")
    add_lock_argument(parser)
