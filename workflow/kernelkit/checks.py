"""The checks stage: correctness of each kernel layout against its float64 reference, and the
negative controls (mutated sources the checks must catch). Nothing is timed without both.

Each case fills the output, and guard regions on both sides of it, with a sentinel NaN
whose bit pattern no arithmetic produces, launches once, and then demands that every
output element was overwritten with a finite value within tolerance and that no guard
element changed. The check itself (`check_case`) is plain NumPy so it is tested on the CPU.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from kernelkit import KitError, spec as specs
from kernelkit.inputs import rng_for
from kernelkit.records import read_record, write_record
from kernelkit.spec import KernelSpec, Shape, Tolerance, shape_name

# A signalling NaN with a recognisable payload: kernels produce quiet NaNs (0x7fc00000 and
# up) or finite values, never these bits, so "still the sentinel" means "never written".
SENTINEL_BITS = np.uint32(0x7FA5A5A5)
GUARD_ELEMENTS = 1024


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


def check_case(
    bits: np.ndarray,
    reference: np.ndarray,
    tolerance: Tolerance,
    guard: int = GUARD_ELEMENTS,
    scale: np.ndarray | None = None,
) -> dict[str, Any]:
    """Judge one launch from the raw uint32 bits of [guard | output | guard].

    An element passes when |out - ref| <= abs + rel * scale, where scale is |ref| unless the
    spec gives the magnitude its rounding error grows with (see KernelSpec.error_scale).
    """
    bits = np.asarray(bits, dtype=np.uint32)
    body_bits = bits[guard : bits.size - guard]
    guard_bits = np.concatenate([bits[:guard], bits[bits.size - guard :]])
    reference = np.asarray(reference, dtype=np.float64).reshape(-1)
    if body_bits.size != reference.size:
        raise ValueError(f"output holds {body_bits.size} elements, the reference {reference.size}")
    with np.errstate(invalid="ignore"):  # widening the signalling-NaN sentinel raises "invalid"
        out = body_bits.view(np.float32).astype(np.float64)

    sentinel = body_bits == SENTINEL_BITS
    finite = np.isfinite(out)
    abs_error = np.where(finite, np.abs(out - reference), np.inf)
    magnitude = np.abs(reference) if scale is None else np.asarray(scale, dtype=np.float64).reshape(-1)
    allowed = tolerance.abs + tolerance.rel * magnitude
    bad = ~(abs_error <= allowed)
    nonzero_reference = finite & (reference != 0)
    rel_error = np.divide(abs_error, np.abs(reference), out=np.zeros_like(abs_error), where=nonzero_reference)

    counts = {
        "guard_overwritten": int(np.count_nonzero(guard_bits != SENTINEL_BITS)),
        "sentinel_left": int(np.count_nonzero(sentinel)),
        "nonfinite": int(np.count_nonzero(~finite & ~sentinel)),
        "out_of_tolerance": int(np.count_nonzero(bad)),
    }
    finite_errors = abs_error[finite]
    # Worst = furthest beyond its own allowance; unwritten and non-finite elements rank first.
    worst = int(np.argmax(abs_error / allowed)) if abs_error.size else 0
    symptom = _symptom(counts, out, sentinel)
    return {
        "passed": symptom == "none",
        "symptom": symptom,
        "max_abs_error": float(finite_errors.max()) if finite_errors.size else 0.0,
        "max_rel_error": float(rel_error.max()) if rel_error.size else 0.0,
        "worst_flat_index": worst,
        "elements": int(reference.size),
        **counts,
    }


def _symptom(counts: Mapping[str, int], out: np.ndarray, sentinel: np.ndarray) -> str:
    """The first thing a reader should hear about a failing case."""
    if counts["guard_overwritten"]:
        return f"{counts['guard_overwritten']} guard elements overwritten"
    if counts["sentinel_left"]:
        return f"sentinel left in {counts['sentinel_left']} output elements"
    if counts["nonfinite"]:
        nan = int(np.count_nonzero(np.isnan(out) & ~sentinel))
        return f"NaN in {nan} and Inf in {counts['nonfinite'] - nan} output elements"
    if counts["out_of_tolerance"]:
        return f"error above tolerance in {counts['out_of_tolerance']} output elements"
    return "none"


def run_case(spec: KernelSpec, kernel: Any, layout_name: str, shape: Shape, pattern: str) -> CaseResult:
    """One launch (or one library call, whose result is copied in) on the GPU, judged by `check_case`."""
    from kernelkit import device

    cp = device.cupy()
    host_inputs = spec.make_inputs(shape, pattern, rng_for(spec.name, shape_name(shape), pattern))
    buffers = device.upload(host_inputs)
    # The reference starts from the exact FP32 values that sit on the device.
    on_device = {name: device.download(array) for name, array in buffers.items()}
    reference = spec.reference(on_device)
    out_shape = spec.output_shape(shape)
    elements = int(np.prod(out_shape))

    padded = cp.empty(GUARD_ELEMENTS + elements + GUARD_ELEMENTS, dtype=cp.uint32)
    padded.fill(int(SENTINEL_BITS))
    out = padded[GUARD_ELEMENTS : GUARD_ELEMENTS + elements].view(cp.float32).reshape(out_shape)
    if spec.is_baseline(layout_name):
        from kernelkit import library

        result = library.as_cupy(spec.baselines[layout_name].make_call(buffers, shape)())
        # A result of another shape or type is not copied: its case then fails as unwritten.
        if result.dtype == cp.float32 and tuple(result.shape) == tuple(out_shape):
            out[...] = result
    else:
        launch_once, _ = device.launcher(spec, kernel, spec.layout(layout_name), shape, buffers, out)
        launch_once()
    cp.cuda.Device().synchronize()

    scale = spec.error_scale(on_device) if spec.error_scale else None
    verdict = check_case(device.download(padded), reference, spec.tolerance, scale=scale)
    worst_index = [int(i) for i in np.unravel_index(verdict.pop("worst_flat_index"), out_shape)]
    return CaseResult(
        kernel=spec.name, layout=layout_name, shape=shape_name(shape), pattern=pattern, worst_index=worst_index, **verdict
    )


def run_suite(spec: KernelSpec, layouts: list[str], mutation: str | None = None) -> list[CaseResult]:
    """Every correctness shape x pattern for each layout, with the (possibly mutated) source."""
    from kernelkit import device

    def build(layout: str) -> tuple[str, tuple[str, ...]]:
        return spec.entry_of(layout), spec.compile_options_of(layout)

    builds = {build(layout) for layout in layouts if not spec.is_baseline(layout)}
    compiled = {key: device.compile_kernel(spec, mutation, *key) for key in sorted(builds)}
    return [
        run_case(spec, None if spec.is_baseline(layout) else compiled[build(layout)], layout, shape, pattern)
        for layout in layouts
        for shape in spec.correctness_shapes
        for pattern in spec.patterns
    ]


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


def _print_cases(cases: list[CaseResult]) -> None:
    for case in cases:
        mark = "ok  " if case.passed else "FAIL"
        print(
            f"{mark} {case.layout:>6} {case.shape:>8} {case.pattern:<12} max|err| {case.max_abs_error:.3e}"
            f"  worst {case.worst_index}  {'' if case.passed else case.symptom}"
        )


def _skipped_baselines(spec: KernelSpec, layouts: list[str]) -> dict[str, str]:
    """Baseline layouts whose package cannot run here, with the reason; nothing else is skipped."""
    from kernelkit import library

    skipped = {}
    for layout in layouts:
        if spec.is_baseline(layout):
            reason = library.missing_reason(spec.baselines[layout].package)
            if reason:
                skipped[layout] = reason
    return skipped


def cmd_correctness(args: argparse.Namespace) -> int:
    spec = specs.load(args.kernel)
    layouts = args.layout or list(spec.all_layouts)
    for layout in layouts:
        spec.layout(layout)
    skipped = _skipped_baselines(spec, layouts)
    for layout, reason in skipped.items():
        print(f"skipped {layout}: {reason}")
    layouts = [layout for layout in layouts if layout not in skipped]
    cases = run_suite(spec, layouts) if layouts else []
    _print_cases(cases)
    record = {**suite_record(spec, cases), "layouts": layouts, "skipped": skipped, "negative_control": None}
    failed = record["failed_count"]
    if failed:
        raise KitError(f"{spec.name}: {failed} of {len(cases)} correctness cases failed; nothing will be timed")
    if args.output:
        write_record(args.output, {**record, **_card(), "passed": bool(layouts)})
    if layouts:
        print(f"{spec.name} {', '.join(layouts)}: all {len(cases)} cases passed, largest |error| {record['max_abs_error']:.4e}")
    return 0


def _card() -> dict[str, Any]:
    from kernelkit import device

    return device.card()


def cmd_control(args: argparse.Namespace) -> int:
    spec = specs.load(args.kernel)
    mutation = spec.mutation(args.control)
    for layout in args.layout:
        if spec.is_baseline(layout):
            raise KitError(f"negative controls mutate the CUDA source; the library layout '{layout}' has none")
    cases = run_suite(spec, args.layout, args.control)
    _print_cases(cases)
    record = suite_record(spec, cases, args.control)
    caught = [case for case in record["cases"] if not case["passed"]]
    if not caught:
        raise KitError(
            f"negative control '{args.control}' of {spec.name} ({mutation.why}) passed all {len(cases)} correctness "
            "cases: the checks cannot see this bug, so no timing will run"
        )
    first = caught[0]
    if args.output:
        write_record(
            args.output,
            {
                **record,
                **_card(),
                "control": args.control,
                "mutation": {"find": mutation.find, "replace": mutation.replace, "why": mutation.why},
                "layouts": args.layout,
                "caught": True,
                "caught_by": {key: first[key] for key in ("layout", "shape", "pattern", "symptom", "worst_index")},
            },
        )
    print(f"negative control '{args.control}' caught in {len(caught)} of {len(cases)} cases; first: {first['layout']} "
          f"{first['shape']} {first['pattern']}: {first['symptom']}")
    return 0


def require_checked(spec: KernelSpec, layout: str, correctness_file: str, control_files: list[str]) -> str | None:
    """Refuse to time a kernel whose correctness and controls did not pass in this run, on this source.

    Returns the reason when the layout was skipped (its library is missing here), else None.
    """
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
    return None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("correctness", help="run the correctness suite; exits non-zero when a case fails")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--layout", action="append", help="a layout of the kernel, repeatable; default: every layout")
    p.add_argument("--output", help="where to write the correctness record (JSON); default: print only")
    p.set_defaults(func=cmd_correctness)

    p = subparsers.add_parser(
        "control", help="run a negative control (a mutated build): exits 0 when the checks catch it, "
                        "non-zero when they do NOT (then nothing may be timed)")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--control", required=True, help="a negative control named in the kernel's spec.py")
    p.add_argument("--layout", action="append", required=True,
                   help="a hand-written layout to build with the mutation, repeatable")
    p.add_argument("--output", help="where to write the control record (JSON); default: print only")
    p.set_defaults(func=cmd_control)
