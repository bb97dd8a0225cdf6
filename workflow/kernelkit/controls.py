"""The negative-control stage: a mutated build of a kernel's source (its spec's `mutations`) run
through the same correctness cases, `checks.determinism_runs` launches each, and, for a race the
cases cannot show, compute-sanitizer's racecheck. The checks must catch every mutation before
anything of that kernel is timed."""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

from kernelkit import KitError, determinism, spec as specs
from kernelkit.cases import add_check_settings, compile_builds, hold_gpu, print_cases, run_suite, settings_lock_and_clock, suite_record
from kernelkit.records import write_record
from kernelkit.sanitizer import racecheck_control, racecheck_symptom


def catching_check(case: Mapping[str, Any]) -> str:
    """Which check a failing case failed: determinism when only the repeated launches disagreed."""
    return "determinism" if case["symptom"] == determinism.DIFFER_SYMPTOM else "correctness"


def run_control(spec: specs.KernelSpec, control: str, layouts: list[str], settings: Any, lock: Any,
                clock: Any) -> dict[str, Any]:
    """One negative control over the layouts: its record when the checks caught it, else KitError."""
    from kernelkit import device

    mutation = spec.mutation(control)
    # Races often give right, repeatable answers: racecheck looks at the layouts nothing else caught
    # when the control declares a bug only threads show (then its child runs beside this process's
    # cases, under this process's GPU hold) or when no layout caught it at all.
    if mutation.needs_gpu_to_show:
        hold_gpu(lock, clock)
    with ThreadPoolExecutor(max_workers=1) as beside:
        early = (beside.submit(racecheck_control, spec.name, layouts, control)
                 if mutation.needs_gpu_to_show else None)
        cases = run_suite(spec, layouts, control, settings.determinism_runs, lock=lock, clock=clock)
        print_cases(cases)
        record = suite_record(spec, cases, control)
        caught = [case for case in record["cases"] if not case["passed"]]
        by_layout: dict[str, str | None] = {layout: None for layout in layouts}
        for case in reversed(caught):
            by_layout[case["layout"]] = catching_check(case)
        look = bool(mutation.needs_gpu_to_show) or not caught
        unseen = [layout for layout, check in by_layout.items() if check is None and look]
        with clock.phase("racecheck"):
            if early is not None:
                racecheck: dict[str, Any] | None = early.result()
            elif unseen:
                hold_gpu(lock, clock)
                racecheck = racecheck_control(spec.name, unseen, control)
            else:
                racecheck = None
    raced = bool(racecheck and racecheck.get("hazards"))
    if not caught and not raced:
        unchecked = f" (racecheck {racecheck['skipped']})" if racecheck and "skipped" in racecheck else ""
        raise KitError(
            f"negative control '{control}' of {spec.name} ({mutation.why}) passed all {len(cases)} correctness "
            f"cases, {settings.determinism_runs} identical launches each, and racecheck{unchecked}: the checks cannot "
            "see this bug, so no timing will run"
        )
    if caught:
        first = {key: caught[0][key] for key in ("layout", "shape", "pattern", "symptom", "worst_index")}
        first["check"] = catching_check(caught[0])
        print(f"negative control '{control}' caught in {len(caught)} of {len(cases)} cases"
              f"{'; ' + racecheck_symptom(racecheck) if raced else ''}; by layout: "
              f"{', '.join(f'{k}: {v}' for k, v in by_layout.items())}; first: {first['layout']} {first['shape']} "
              f"{first['pattern']}: {first['symptom']}")
    else:
        first = {"layouts": racecheck["layouts"], "check": "racecheck", "symptom": racecheck_symptom(racecheck)}
        print(f"negative control '{control}' caught by racecheck: {first['symptom']} "
              f"(its {len(cases)} correctness cases all passed)")
    return {
        **record,
        **device.card(),
        "control": control,
        "mutation": {"find": mutation.find, "replace": mutation.replace, "why": mutation.why},
        "layouts": layouts,
        "determinism_runs": settings.determinism_runs,
        "caught": True,
        "caught_by": first,
        # The checks that caught the mutation in each layout on its own (racecheck's joint run: `racecheck`).
        "caught_in_layouts": by_layout,
        "racecheck": racecheck,
    }


def cmd_control(args: argparse.Namespace) -> int:
    """Every named control of one kernel in this one process, a record each (`--output-dir`/<control>.json).
    The records are written only once every control was caught: one that was not stops the kernel."""
    settings, lock, clock = settings_lock_and_clock(args)
    spec = specs.load(args.kernel)
    for layout in args.layout:
        if spec.is_baseline(layout):
            raise KitError(f"negative controls mutate the CUDA source; the library layout '{layout}' has none")
    controls = args.control or list(spec.mutations)
    for control in controls:  # all of them before the first control takes the GPU lock
        compile_builds(spec, args.layout, control, clock)
    records = {control: run_control(spec, control, list(args.layout), settings, lock, clock) for control in controls}
    if args.output_dir:
        for control, record in records.items():
            write_record(os.path.join(args.output_dir, f"{control}.json"), {**record, "job": clock.describe()})
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "control", help="run a negative control (a mutated build): exits 0 when the checks catch it, "
                        "non-zero when they do NOT (then nothing may be timed)")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--control", action="append", help="a negative control named in the kernel's spec.py, repeatable; "
                                                      "default: every control of the spec")
    p.add_argument("--layout", action="append", required=True,
                   help="a hand-written layout to build with the mutation, repeatable")
    p.add_argument("--output-dir", help="where to write one record per control, <control>.json; default: print only")
    add_check_settings(p)
    p.set_defaults(func=cmd_control)
