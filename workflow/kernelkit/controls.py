"""The negative-control stage: a mutated build of a kernel's source (its spec's `mutations`) run
through the same correctness cases, launched `checks.determinism_runs` times each, and, for a race
the cases cannot show, through compute-sanitizer's racecheck. The checks must catch every mutation
before anything of that kernel is timed (kernelkit.checks.require_checked reads these records).
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Mapping

from kernelkit import KitError, determinism, environment, spec as specs
from kernelkit.checks import add_check_settings, print_cases, run_suite, settings_lock_and_clock, suite_record
from kernelkit.records import write_record


def catching_check(case: Mapping[str, Any]) -> str:
    """Which check a failing case failed: determinism when only the repeated launches disagreed."""
    return "determinism" if case["symptom"] == determinism.DIFFER_SYMPTOM else "correctness"


def cmd_control(args: argparse.Namespace) -> int:
    from kernelkit import device, gpujob, tools

    settings, lock, clock = settings_lock_and_clock(args)
    spec = specs.load(args.kernel)
    mutation = spec.mutation(args.control)
    for layout in args.layout:
        if spec.is_baseline(layout):
            raise KitError(f"negative controls mutate the CUDA source; the library layout '{layout}' has none")
    # Races often give right, repeatable answers: racecheck looks at the layouts nothing else caught,
    # for a control that declares a bug only threads show, or when no layout caught it at all (a
    # control aimed at one layout need not fail in the others). Its child is a `kernelkit correctness`
    # process that shares the GPU lock itself, so this process never waits for a child while holding
    # the lock: a timing process waiting for the GPU would close the gate on the child while waiting
    # for this parent (see kernelkit.gpulock). For a bug only threads show, the child starts beside
    # this process's own cases, which seldom catch it, instead of after them: the `barrier` control
    # took 4.6 s building one timing target from scratch on an H200 (2026-11-30), 2.6 s of it its
    # racecheck children after its cases.
    with ThreadPoolExecutor(max_workers=1) as beside:
        early = (beside.submit(tools.racecheck_control, spec.name, list(args.layout), args.control,
                               lock_dir=args.lock_dir) if mutation.needs_gpu_to_show else None)
        cases = run_suite(spec, args.layout, args.control, settings.determinism_runs, lock=lock, clock=clock)
        print_cases(cases)
        record = suite_record(spec, cases, args.control)
        caught = [case for case in record["cases"] if not case["passed"]]
        by_layout: dict[str, str | None] = {layout: None for layout in args.layout}
        for case in reversed(caught):
            by_layout[case["layout"]] = catching_check(case)
        look = bool(mutation.needs_gpu_to_show) or not caught
        unseen = [layout for layout, check in by_layout.items() if check is None and look]
        with clock.phase("racecheck"):
            if early is not None:
                racecheck: dict[str, Any] | None = early.result()
            elif unseen:
                racecheck = tools.racecheck_control(spec.name, unseen, args.control, lock_dir=args.lock_dir)
            else:
                racecheck = None
    raced = bool(racecheck and racecheck.get("hazards"))
    if not caught and not raced:
        unchecked = f" (racecheck {racecheck['skipped']})" if racecheck and "skipped" in racecheck else ""
        raise KitError(
            f"negative control '{args.control}' of {spec.name} ({mutation.why}) passed all {len(cases)} correctness "
            f"cases, {settings.determinism_runs} identical launches each, and racecheck{unchecked}: the checks cannot "
            "see this bug, so no timing will run"
        )
    bus_id = device.cupy().cuda.Device().pci_bus_id
    gpujob.share_until_exit(environment.Nvml(bus_id), bus_id, lock, clock)
    if caught:
        first = {key: caught[0][key] for key in ("layout", "shape", "pattern", "symptom", "worst_index")}
        first["check"] = catching_check(caught[0])
    else:
        first = {"layouts": racecheck["layouts"], "check": "racecheck", "symptom": tools.racecheck_symptom(racecheck)}
    if args.output:
        write_record(
            args.output,
            {
                **record,
                **environment.card(),
                "control": args.control,
                "mutation": {"find": mutation.find, "replace": mutation.replace, "why": mutation.why},
                "layouts": args.layout,
                "determinism_runs": settings.determinism_runs,
                "caught": True,
                "caught_by": first,
                # The checks that caught the mutation in each layout on its own; racecheck's one
                # run over several layouts says only that it saw the race in them (`racecheck`).
                "caught_in_layouts": by_layout,
                "racecheck": racecheck,
                "job": clock.describe(),
            },
        )
    if caught:
        print(f"negative control '{args.control}' caught in {len(caught)} of {len(cases)} cases"
              f"{'; ' + tools.racecheck_symptom(racecheck) if raced else ''}; by layout: "
              f"{', '.join(f'{k}: {v}' for k, v in by_layout.items())}; first: {first['layout']} {first['shape']} "
              f"{first['pattern']}: {first['symptom']}")
    else:
        print(f"negative control '{args.control}' caught by racecheck: {first['symptom']} "
              f"(its {len(cases)} correctness cases all passed)")
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "control", help="run a negative control (a mutated build): exits 0 when the checks catch it, "
                        "non-zero when they do NOT (then nothing may be timed)")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--control", required=True, help="a negative control named in the kernel's spec.py")
    p.add_argument("--layout", action="append", required=True,
                   help="a hand-written layout to build with the mutation, repeatable")
    p.add_argument("--output", help="where to write the control record (JSON); default: print only")
    add_check_settings(p)
    p.set_defaults(func=cmd_control)
