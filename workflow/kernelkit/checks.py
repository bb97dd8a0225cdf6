"""The checks stage: correctness of each kernel layout against its float64 reference, every case
of the suite (kernelkit.cases) launched in this one process, a record per layout."""

from __future__ import annotations

import argparse
import os
from typing import Any

from kernelkit import KitError, spec as specs
from kernelkit.cases import add_check_settings, print_cases, run_suite, sanitizer_cases, settings_lock_and_clock, suite_record
from kernelkit.records import write_record
from kernelkit.spec import KernelSpec


def _skipped_baselines(spec: KernelSpec, layouts: list[str]) -> dict[str, str]:
    """Baseline layouts whose package cannot run here, with the reason; nothing else is skipped."""
    from kernelkit import library

    reasons = {layout: library.missing_reason(spec.baselines[layout].package)
               for layout in layouts if spec.is_baseline(layout)}
    return {layout: reason for layout, reason in reasons.items() if reason}


def cmd_correctness(args: argparse.Namespace) -> int:
    """Every named layout of one kernel in this one process; with --output-dir, a record per layout
    (<layout>.json), written only when every case of every layout passed: a failure stops the kernel."""
    settings, lock, clock = settings_lock_and_clock(args)
    spec = specs.load(args.kernel)
    layouts = args.layout or list(spec.all_layouts)
    for layout in layouts:
        spec.layout(layout)
    if args.control is not None:
        spec.mutation(args.control)
        if any(spec.is_baseline(layout) for layout in layouts) or args.output_dir:
            raise KitError("--control builds hand-written layouts with a mutation and writes nothing; "
                           "name hand-written layouts with --layout and leave out --output-dir")
    skipped = _skipped_baselines(spec, layouts)
    for layout, reason in skipped.items():
        print(f"skipped {layout}: {reason}")
    runnable = [layout for layout in layouts if layout not in skipped]
    chosen = sanitizer_cases(spec) if args.sanitizer_cases else None
    cases = run_suite(spec, runnable, args.control, settings.determinism_runs, chosen, lock=lock, clock=clock) if runnable else []
    print_cases(cases)
    failed = [case for case in cases if not case.passed]
    if failed:
        bad = sorted({case.layout for case in failed})
        raise KitError(f"{spec.name}: {len(failed)} of {len(cases)} correctness cases failed (layouts {', '.join(bad)}); "
                       f"nothing of {spec.name} will be timed")
    if args.output_dir:
        from kernelkit import device

        job = clock.describe()
        for layout in layouts:
            own = [case for case in cases if case.layout == layout]
            record = {**suite_record(spec, own), "layouts": [layout] if layout in runnable else [],
                      "skipped": {layout: skipped[layout]} if layout in skipped else {},
                      "negative_control": None, "determinism_runs": settings.determinism_runs}
            write_record(os.path.join(args.output_dir, f"{layout}.json"),
                         {**record, **device.card(), "passed": layout in runnable, "job": job})
    if runnable:
        print(f"{spec.name} {', '.join(runnable)}: all {len(cases)} cases passed, "
              f"largest |error| {max((case.max_abs_error for case in cases), default=0.0):.4e}")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("correctness", help="run the correctness suite; exits non-zero when a case fails")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--layout", action="append", help="a layout of the kernel, repeatable; default: every layout")
    p.add_argument("--output-dir", help="where to write one correctness record per layout, <layout>.json; default: print only")
    p.add_argument("--sanitizer-cases", action="store_true",
                   help="run only the few cases compute-sanitizer runs (KernelSpec.sanitizer_shapes_used, pattern normal)")
    p.add_argument("--control", help="build with this negative control's mutation (print only; for racecheck)")
    add_check_settings(p)
    p.set_defaults(func=cmd_correctness)
