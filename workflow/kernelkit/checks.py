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
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from kernelkit import KitError, determinism, spec as specs
from kernelkit import config as kit_config
from kernelkit.inputs import rng_for
from kernelkit.records import read_record, write_record
from kernelkit.spec import KernelSpec, Shape, Tolerance, shape_name

# A signalling NaN with a recognisable payload: kernels produce quiet NaNs (0x7fc00000 and
# up) or finite values, never these bits, so "still the sentinel" means "never written".
SENTINEL_BITS = np.uint32(0x7FA5A5A5)
GUARD_ELEMENTS = 1024


@dataclass(frozen=True)
class CheckSettings(kit_config.StageSettings):
    """The config's `checks` section: how many identical launches each correctness case gets."""

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]] = {"checks": ("determinism_runs",)}
    determinism_runs: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "CheckSettings":
        return cls(int(config["checks"]["determinism_runs"]))


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
    # Determinism: identical launches on fresh buffers, elements whose bits differed among them,
    # and the spec's reason where the layout is declared nondeterministic ("" otherwise).
    deterministic: bool = True
    launches: int = 1
    differing_elements: int = 0
    nondeterministic_reason: str = ""


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


def run_case(spec: KernelSpec, kernel: Any, layout_name: str, shape: Shape, pattern: str, runs: int = 1) -> CaseResult:
    """`runs` launches (or library calls, whose result is copied in) on the GPU, each on a freshly
    sentinel-filled buffer; the first is judged by `check_case`, all must agree bit for bit."""
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
    out = padded[GUARD_ELEMENTS : GUARD_ELEMENTS + elements].view(cp.float32).reshape(out_shape)
    if spec.is_baseline(layout_name):
        from kernelkit import library

        call = spec.baselines[layout_name].make_call(buffers, shape)

        def launch_once() -> None:
            result = library.as_cupy(call())
            # A result of another shape or type is not copied: its case then fails as unwritten.
            if result.dtype == cp.float32 and tuple(result.shape) == tuple(out_shape):
                out[...] = result
    else:
        launch_once, _ = device.launcher(spec, kernel, spec.layout(layout_name), shape, buffers, out)

    launches = []
    for _ in range(max(1, runs)):
        padded.fill(int(SENTINEL_BITS))
        launch_once()
        cp.cuda.Device().synchronize()
        launches.append(device.download(padded))

    scale = spec.error_scale(on_device) if spec.error_scale else None
    verdict = check_case(launches[0], reference, spec.tolerance, scale=scale)
    verdict = determinism.judge(verdict, determinism.compare_launches(launches), spec.nondeterministic.get(layout_name))
    worst_index = [int(i) for i in np.unravel_index(verdict.pop("worst_flat_index"), out_shape)]
    return CaseResult(
        kernel=spec.name, layout=layout_name, shape=shape_name(shape), pattern=pattern, worst_index=worst_index, **verdict
    )


def run_suite(spec: KernelSpec, layouts: list[str], mutation: str | None = None, runs: int = 1,
              cases: Sequence[tuple[Shape, str]] | None = None) -> list[CaseResult]:
    """Every correctness shape x pattern (or the `cases` given) for each layout, with the (possibly
    mutated) source, each case launched `runs` times."""
    from kernelkit import device

    entries = {spec.entry_of(layout) for layout in layouts if not spec.is_baseline(layout)}
    compiled = {entry: device.compile_kernel(spec, mutation, entry) for entry in sorted(entries)}
    return [
        run_case(spec, None if spec.is_baseline(layout) else compiled[spec.entry_of(layout)], layout, shape, pattern, runs)
        for layout in layouts
        for shape, pattern in (cases if cases is not None else correctness_cases(spec))
    ]


def correctness_cases(spec: KernelSpec) -> list[tuple[Shape, str]]:
    return [(shape, pattern) for shape in spec.correctness_shapes for pattern in spec.patterns]


def sanitizer_cases(spec: KernelSpec) -> list[tuple[Shape, str]]:
    """The few cases compute-sanitizer runs (see KernelSpec.sanitizer_shapes_used): the values a
    pattern gives change no code path of these kernels, so one pattern, `normal`."""
    return [(shape, "normal") for shape in spec.sanitizer_shapes_used()]


def suite_record(spec: KernelSpec, cases: list[CaseResult], mutation: str | None = None) -> dict[str, Any]:
    """The JSON body shared by correctness and control files."""
    failed = [case for case in cases if not case.passed]
    return {
        "kernel": spec.name,
        "source_sha256": spec.source_sha256(mutation),
        "compile_options": list(spec.compile_options),
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
    settings = CheckSettings.from_json(args.settings)
    spec = specs.load(args.kernel)
    layouts = args.layout or list(spec.all_layouts)
    for layout in layouts:
        spec.layout(layout)
    if args.control is not None:
        spec.mutation(args.control)
        if any(spec.is_baseline(layout) for layout in layouts) or args.output:
            raise KitError("--control builds hand-written layouts with a mutation and writes nothing; "
                           "name hand-written layouts with --layout and leave out --output")
    skipped = _skipped_baselines(spec, layouts)
    for layout, reason in skipped.items():
        print(f"skipped {layout}: {reason}")
    layouts = [layout for layout in layouts if layout not in skipped]
    chosen = sanitizer_cases(spec) if args.sanitizer_cases else None
    cases = run_suite(spec, layouts, args.control, settings.determinism_runs, chosen) if layouts else []
    _print_cases(cases)
    record = {**suite_record(spec, cases), "layouts": layouts, "skipped": skipped, "negative_control": None,
              "determinism_runs": settings.determinism_runs}
    failed = record["failed_count"]
    if failed:
        raise KitError(f"{spec.name}: {failed} of {len(cases)} correctness cases failed; nothing will be timed")
    if args.output:
        write_record(args.output, {**record, "passed": bool(layouts)})
    if layouts:
        print(f"{spec.name} {', '.join(layouts)}: all {len(cases)} cases passed, largest |error| {record['max_abs_error']:.4e}")
    return 0


def catching_check(case: Mapping[str, Any]) -> str:
    """Which check a failing case failed: determinism when only the repeated launches disagreed."""
    return "determinism" if case["symptom"] == determinism.DIFFER_SYMPTOM else "correctness"


def cmd_control(args: argparse.Namespace) -> int:
    from kernelkit import tools

    settings = CheckSettings.from_json(args.settings)
    spec = specs.load(args.kernel)
    mutation = spec.mutation(args.control)
    for layout in args.layout:
        if spec.is_baseline(layout):
            raise KitError(f"negative controls mutate the CUDA source; the library layout '{layout}' has none")
    cases = run_suite(spec, args.layout, args.control, settings.determinism_runs)
    _print_cases(cases)
    record = suite_record(spec, cases, args.control)
    caught = [case for case in record["cases"] if not case["passed"]]
    by_layout: dict[str, str | None] = {layout: None for layout in args.layout}
    for case in reversed(caught):
        by_layout[case["layout"]] = catching_check(case)
    # Races often give right, repeatable answers: racecheck looks at the layouts nothing else caught,
    # for a control that declares a bug only threads show (every layout must show it), or when no
    # layout caught it at all (a control aimed at one layout need not fail in the others).
    # It runs a child `kernelkit correctness` process that takes the GPU lock itself: this process
    # must not hold the lock here, or the child waits on its parent (see kernelkit.gpulock).
    look = bool(mutation.needs_gpu_to_show) or not caught
    racecheck = {layout: tools.racecheck_control(spec.name, layout, args.control)
                 for layout, check in by_layout.items() if check is None and look}
    for layout, result in racecheck.items():
        if result.get("hazards"):
            by_layout[layout] = "racecheck"
    if not any(by_layout.values()):
        unchecked = "; ".join(f"racecheck {r['skipped']}" for r in racecheck.values() if "skipped" in r)
        raise KitError(
            f"negative control '{args.control}' of {spec.name} ({mutation.why}) passed all {len(cases)} correctness "
            f"cases, {settings.determinism_runs} identical launches each, and racecheck"
            f"{' (' + unchecked + ')' if unchecked else ''}: the checks cannot see this bug, so no timing will run"
        )
    if caught:
        first = {key: caught[0][key] for key in ("layout", "shape", "pattern", "symptom", "worst_index")}
        first["check"] = catching_check(caught[0])
    else:
        layout = next(name for name, check in by_layout.items() if check)
        first = {"layout": layout, "check": "racecheck",
                 "symptom": f"racecheck reports {racecheck[layout]['hazards']} shared-memory hazards"}
    if args.output:
        write_record(
            args.output,
            {
                **record,
                "control": args.control,
                "mutation": {"find": mutation.find, "replace": mutation.replace, "why": mutation.why},
                "layouts": args.layout,
                "determinism_runs": settings.determinism_runs,
                "caught": True,
                "caught_by": first,
                "caught_in_layouts": by_layout,
                "racecheck": racecheck,
            },
        )
    print(f"negative control '{args.control}' caught in {len(caught)} of {len(cases)} cases"
          f"{' and by racecheck' if first['check'] == 'racecheck' else ''}; by layout: "
          f"{', '.join(f'{k}: {v}' for k, v in by_layout.items())}; first: {first['layout']} {first.get('shape', '')} "
          f"{first.get('pattern', '')}: {first['symptom']}")
    return 0


def require_checked(spec: KernelSpec, layout: str, correctness_file: str, control_files: list[str],
                    sanitizer_file: str | None = None) -> str | None:
    """Refuse to time a kernel whose correctness, controls and (when given) sanitizer record did not
    pass in this run, on this source.

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
    if sanitizer_file:
        from kernelkit import tools

        tools.require_clean(spec, layout, sanitizer_file)
    return None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("correctness", help="run the correctness suite; exits non-zero when a case fails")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--layout", action="append", help="a layout of the kernel, repeatable; default: every layout")
    p.add_argument("--output", help="where to write the correctness record (JSON); default: print only")
    p.add_argument("--sanitizer-cases", action="store_true",
                   help="run only the few cases compute-sanitizer runs (KernelSpec.sanitizer_shapes_used, pattern normal)")
    p.add_argument("--control", help="build with this negative control's mutation (print only; for racecheck)")
    _add_settings_argument(p)
    p.set_defaults(func=cmd_correctness)

    p = subparsers.add_parser(
        "control", help="run a negative control (a mutated build): exits 0 when the checks catch it, "
                        "non-zero when they do NOT (then nothing may be timed)")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--control", required=True, help="a negative control named in the kernel's spec.py")
    p.add_argument("--layout", action="append", required=True,
                   help="a hand-written layout to build with the mutation, repeatable")
    p.add_argument("--output", help="where to write the control record (JSON); default: print only")
    _add_settings_argument(p)
    p.set_defaults(func=cmd_control)


def _add_settings_argument(parser: Any) -> None:
    parser.add_argument("--settings", default='{"checks": {}}',
                        help="the checks settings as JSON, a slice of the validated config (checks: determinism_runs); "
                             "default: the schema's defaults")
