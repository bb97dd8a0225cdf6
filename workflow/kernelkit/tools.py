"""NVIDIA tools, used when present: compute-sanitizer on a few correctness cases (gating timing), and
Nsight Compute counters for one warmed call of a timed configuration.

Each runs a child process under the tool, so what is checked or counted is exactly what the
workflow runs: compute-sanitizer the kit's own `kernelkit correctness --sanitizer-cases` over the
very builds the timing loads, Nsight Compute the kit's own `profile-call`. The parent holds the
GPU lock while its child runs, and the child runs under that hold (kernelkit.gpulock).
A missing tool, a device it does not support or a refusal (no access to performance counters) is
recorded as skipped with the tool's own words; parsing the tools' output is plain text work,
tested on the CPU.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from kernelkit import KitError, spec as specs
from kernelkit.nvml import Nvml
from kernelkit.records import write_record

SANITIZER_TOOLS = ("memcheck", "racecheck")
NCU_METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct_of_peak",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "smsp__inst_executed.sum": "instructions_executed",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared_bank_conflicts",
    "gpu__time_duration.sum": "duration_ns",
    # Speed of light: which unit works closest to its peak names the limiter (report.quality).
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_throughput_pct_of_peak",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_throughput_pct_of_peak",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "l1_throughput_pct_of_peak",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma_pipe_pct_of_peak",
    "launch__registers_per_thread": "registers_per_thread",
}


def _kit(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelkit", *args]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def sanitizer_errors(output: str) -> int | None:
    """The error count of compute-sanitizer's summary line, or None without one.

    memcheck ends with 'ERROR SUMMARY: N errors'; racecheck with 'RACECHECK SUMMARY: H hazards
    displayed (E errors, W warnings)', where the count that matters is E + W.
    """
    race = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", output)
    if race:
        return int(race[-1][0]) + int(race[-1][1])
    found = re.findall(r"ERROR SUMMARY: (\d+) error", output)
    return int(found[-1]) if found else None


def sanitizer_cases(spec: Any) -> list[tuple[tuple[int, ...], str]]:
    """The few cases compute-sanitizer runs (spec.KernelSpec.sanitizer_shapes_used): the values a
    pattern gives change no code path of these kernels, so one pattern, `normal`."""
    return [(shape, "normal") for shape in spec.sanitizer_shapes_used()]


def hold_gpu(lock: Any, clock: Any) -> None:
    """Take this process's GPU lock (`lock`: gpulock.LockSettings) before starting children on the
    GPU; it is kept until this process exits, and the children run under it
    (kernelkit.gpulock.child_environment)."""
    from kernelkit import device, gpujob

    bus_id = device.cupy().cuda.Device().pci_bus_id
    with gpujob.shared_gpu(Nvml(bus_id), bus_id, lock, clock):
        pass


def _run_tool(exe: str, tool: str, kernel: str, layouts: Sequence[str], control: str | None,
              timeout_s: float) -> dict[str, Any]:
    """One sanitizer tool over the layouts' sanitizer cases, in one `kernelkit correctness` child."""
    from kernelkit.gpulock import child_environment

    program = _kit("correctness", "--kernel", kernel, "--sanitizer-cases",
                   *[part for layout in layouts for part in ("--layout", layout)],
                   *(("--control", control) if control else ()))
    started = time.monotonic()
    try:
        done = subprocess.run([exe, "--tool", tool, *program], capture_output=True, text=True,
                              timeout=timeout_s, env=child_environment())
    except subprocess.TimeoutExpired as error:
        output = error.stdout.decode(errors="replace") if isinstance(error.stdout, bytes) else (error.stdout or "")
        return {"exit_code": None, "errors": None, "tail": _tail(output), "status": f"did not finish within {timeout_s:g} s"}
    output = done.stdout + done.stderr
    errors = sanitizer_errors(output)
    return {"exit_code": done.returncode, "errors": errors, "tail": _tail(output),
            "wall_s": round(time.monotonic() - started, 3),
            "status": "ran" if errors is not None else "did not run to its summary"}


def sanitize(kernel: str, layouts: Sequence[str], timeout_s: float = 900) -> dict[str, Any]:
    """memcheck and racecheck over the layouts' sanitizer cases, or why they were skipped; `binaries`:
    the SHA-256 of each layout's build, the one its timing loads.

    All layouts run in one child per tool, one tool after the other: each child pays the tool's
    start, Python's and a CUDA context, so one per layout would multiply that. When a tool finds
    something, `by_layout` holds each layout's own run of both tools, which says which it was.
    """
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return {"skipped": "compute-sanitizer is not on the PATH"}
    spec = specs.load(kernel)

    def both_tools(chosen: Sequence[str]) -> dict[str, Any]:
        return {"tools": {tool: _run_tool(exe, tool, kernel, chosen, None, timeout_s) for tool in SANITIZER_TOOLS}}

    record = both_tools(layouts)
    if findings(record) and len(layouts) > 1:
        record["by_layout"] = {layout: both_tools([layout]) for layout in layouts}
    from kernelkit import binaries, device

    built = {layout: device.compile_binary(spec.source_text(), binaries.build_options(spec.compile_options_of(layout)))
             for layout in layouts}
    return {**record, "binaries": {layout: binary.sha256 for layout, binary in built.items()}}


def racecheck_control(kernel: str, layouts: list[str], control: str, timeout_s: float = 900) -> dict[str, Any]:
    """racecheck over a negative control's mutated build of the layouts, in one child: `layouts`,
    and `hazards` (errors + warnings) for them all, or `skipped`. The control needs to know that
    racecheck sees the race, not in which layout (the sanitizer job says that for the unmutated
    layouts)."""
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return {"layouts": layouts, "skipped": "compute-sanitizer is not on the PATH"}
    result = _run_tool(exe, "racecheck", kernel, layouts, control, timeout_s)
    return {"layouts": layouts, **result, "hazards": result["errors"]}


def racecheck_symptom(racecheck: dict[str, Any]) -> str:
    """What a control's racecheck run saw, naming the layouts it ran over."""
    layouts = racecheck["layouts"]
    over = layouts[0] if len(layouts) == 1 else f"{', '.join(layouts[:-1])} and {layouts[-1]} in one run"
    return f"racecheck reports {racecheck['hazards']} shared-memory hazards over {over}"


def findings(record: dict[str, Any]) -> list[str]:
    """What in a sanitizer record forbids timing: a reported error or hazard, a non-zero exit, or a
    tool that never reached its summary line (then nothing was checked). Empty when clean or skipped."""
    found = []
    for tool, result in record.get("tools", {}).items():
        what = "hazards" if tool == "racecheck" else "errors"
        if result.get("errors"):
            found.append(f"{tool} reports {result['errors']} {what}")
        elif result.get("exit_code") != 0:
            found.append(f"{tool} exited with code {result.get('exit_code')} ({result.get('status')})")
        elif result.get("errors") is None:
            found.append(f"{tool} {result.get('status', 'did not run to its summary')}")
    return found


def layout_results(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each layout's sanitizer result in a record: `tools`, or `skipped`.

    A record covers a kernel's layouts, checked together (`sanitize`); where the joint run found
    something, a layout's own run decides. Runs made before that hold one record per layout.
    """
    if "layouts" not in record:
        return {record["layout"]: record}
    if "skipped" in record:
        return {layout: {"skipped": record["skipped"]} for layout in record["layouts"]}
    own = record.get("by_layout", {})
    return {layout: own.get(layout, {"tools": record["tools"]}) for layout in record["layouts"]}


def per_layout(record: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per layout, as the record of one layout reads (kernel, layout, cases, tools or skipped)."""
    common = {key: value for key, value in record.items() if key not in ("layouts", "tools", "by_layout", "skipped")}
    own = record.get("by_layout", {})
    # `checked_together`: the layouts whose joint run these counts are (a layout's own run has none).
    together = {"checked_together": record["layouts"]} if "layouts" in record and "tools" in record else {}
    return [{**common, **result, "layout": layout, **({} if layout in own else together)}
            for layout, result in layout_results(record).items()]


def record_for(files: Sequence[str], layout: str) -> str | None:
    """Which of the sanitizer records given to a timed stage covers `layout`: the kernel's one
    record, or, for a run of an earlier kit, the one named <layout>.json. None: none was given
    (`sanitize` off)."""
    if not files:
        return None
    if len(files) == 1:
        return files[0]
    named = [name for name in files if Path(name).stem == layout]
    if not named:
        raise KitError(f"no sanitizer record of layout '{layout}' among {', '.join(files)}; nothing will be timed")
    return named[0]


def require_clean(spec: Any, layout: str, path: str) -> None:
    """Refuse to time a layout whose sanitizer record is missing, stale or has findings; a record
    saying the tool is absent here lets timing go on (the report shows it as skipped)."""
    from kernelkit.records import read_record

    record = read_record(path)
    results = layout_results(record)
    if layout not in results or record.get("source_sha256") != spec.source_sha256():
        raise KitError(f"{path} is not a sanitizer record of layout '{layout}' on this source; rerun the sanitizer first")
    found = findings(results[layout])
    if found:
        raise KitError(f"{path}: {'; '.join(found)}; nothing will be timed")


def ncu_metrics(csv_text: str) -> list[dict[str, Any]]:
    """One entry per profiled kernel launch: its name and the metrics named in NCU_METRICS."""
    start = csv_text.find('"ID"')
    if start < 0:
        return []
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO(csv_text[start:])):
        name = NCU_METRICS.get(row.get("Metric Name", ""))
        if name is None:
            continue
        entry = launches.setdefault(row["ID"], {"kernel": row.get("Kernel Name", ""), "block": row.get("Block Size"),
                                                "grid": row.get("Grid Size")})
        value = row.get("Metric Value", "").replace(",", "")
        try:
            entry[name] = float(value)
        except ValueError:
            entry[name] = value
    return list(launches.values())


def profile(kernel: str, shape: str, layout: str, timeout_s: float = 900) -> dict[str, Any]:
    """Nsight Compute counters of one warmed call, clocks left as they are (--clock-control none)."""
    exe = shutil.which("ncu")
    if exe is None:
        return {"skipped": "ncu (Nsight Compute) is not on the PATH"}
    ncu_arguments = ["--clock-control", "none", "--profile-from-start", "off", "--csv", "--page", "details",
                     "--metrics", ",".join(NCU_METRICS)]
    program = _kit("profile-call", "--kernel", kernel, "--shape", shape, "--layout", layout)
    done = subprocess.run([exe, *ncu_arguments, *program], capture_output=True, text=True, timeout=timeout_s)
    output = done.stdout + done.stderr
    launches = ncu_metrics(done.stdout)
    if not launches:
        refusal = re.search(r"==ERROR==.*", output)
        return {"skipped": f"ncu profiled nothing (exit {done.returncode}): "
                           + (refusal.group(0) if refusal else _tail(output, 3)), "tail": _tail(output)}
    return {"ncu_arguments": ncu_arguments, "program": program[1:], "launches": launches, "exit_code": done.returncode}


def cmd_sanitize(args: argparse.Namespace) -> int:
    from kernelkit import device, gpujob

    clock = gpujob.JobClock()
    spec = specs.load(args.kernel)
    for layout in args.layout:
        spec.layout(layout)
        if spec.is_baseline(layout):
            raise KitError(f"the sanitizer checks hand-written kernels; '{layout}' is a library baseline")
    if shutil.which("compute-sanitizer"):
        from kernelkit.gpulock import LockSettings

        hold_gpu(LockSettings().with_dir(args.lock_dir), clock)  # the children run under this process's hold
    cases = [f"{specs.shape_name(shape)} {pattern}" for shape, pattern in sanitizer_cases(spec)]
    with clock.phase("tools"):
        checked = sanitize(spec.name, args.layout)
    record = {"kernel": spec.name, "layouts": args.layout, "source_sha256": spec.source_sha256(), "cases": cases, **checked}
    if "skipped" in record:
        print(f"sanitizer skipped: {record['skipped']}; timing goes on, and the report says races were not checked")
        write_record(args.output, {**record, **device.card(), "job": clock.describe()})
        return 0
    for tool, result in record["tools"].items():
        print(f"--- {tool}, {', '.join(args.layout)} ---\n{result['tail']}")
    for layout, own in record.get("by_layout", {}).items():
        for tool, result in own["tools"].items():
            print(f"--- {tool}, {layout} alone ---\n{result['tail']}")
    found = {layout: findings(result) for layout, result in layout_results(record).items()}
    if any(found.values()):
        named = "; ".join(f"{layout}: {', '.join(items)}" for layout, items in found.items() if items)
        raise KitError(f"{spec.name} {named} over {len(cases)} cases; nothing of {spec.name} will be timed")
    write_record(args.output, {**record, **device.card(), "job": clock.describe()})
    print(f"memcheck and racecheck clean over {len(cases)} cases ({', '.join(cases)}) of {', '.join(args.layout)}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from kernelkit import device

    spec = specs.load(args.kernel)
    spec.layout(args.layout)
    spec.parse_shape(args.shape)
    record = {"kernel": spec.name, "shape": args.shape, "layout": args.layout,
              **profile(spec.name, args.shape, args.layout)}
    write_record(args.output, {**record, **device.card()})
    print(f"profile skipped: {record['skipped']}" if "skipped" in record else
          f"profiled {len(record['launches'])} kernel launches in one call")
    return 0


def cmd_profile_call(args: argparse.Namespace) -> int:
    """The program ncu runs: warm up, then one call between cudaProfilerStart and Stop. This child
    holds the GPU lock (its parent `profile` must not: it would wait on its own child)."""
    from kernelkit import device, gpujob, gpulock, library
    from kernelkit.inputs import timing_inputs

    spec = specs.load(args.kernel)
    spec.layout(args.layout)
    shape = spec.parse_shape(args.shape)
    cp = device.cupy()
    bus_id = cp.cuda.Device().pci_bus_id
    if spec.is_baseline(args.layout):
        device.compile_layout(spec, args.layout)  # imports the package, seconds of CPU work, before the lock
    host_inputs = timing_inputs(spec, args.shape)
    with gpujob.exclusive_gpu(Nvml(bus_id), bus_id, gpulock.LockSettings(), gpujob.JobClock()):
        kernel = device.compile_layout(spec, args.layout)  # the context and the module: GPU work (kernelkit.gpulock)
        buffers = device.upload(host_inputs)
        out = cp.empty(spec.output_shape(shape), dtype=cp.float32)
        implementation = device.implementation(spec, args.layout, shape, buffers, out, kernel=kernel)
        stream = device.measurement_stream()
        with library.on_stream(stream):
            for _ in range(5):
                implementation.call()
            stream.synchronize()
            cp.cuda.profiler.start()
            implementation.call()
            stream.synchronize()
            cp.cuda.profiler.stop()
    return 0


TARGET_ARGUMENTS = {"--kernel": "a kernel folder under kernels/", "--shape": "one shape of the kernel, e.g. 512x128",
                    "--layout": "one layout of the kernel"}


def register(subparsers: Any) -> None:
    commands = (
        ("sanitize", "compute-sanitizer memcheck and racecheck over hand-written layouts' correctness cases",
         cmd_sanitize, ("--kernel",), "the sanitizer record"),
        ("profile", "Nsight Compute counters of one warmed call (clocks not controlled)", cmd_profile,
         ("--kernel", "--shape", "--layout"), "the profile record"),
        ("profile-call", "(run under ncu) one warmed call between cudaProfilerStart and Stop", cmd_profile_call,
         ("--kernel", "--shape", "--layout"), None),
    )
    for command, summary, func, target, output in commands:
        p = subparsers.add_parser(command, help=summary)
        for name in target:
            p.add_argument(name, required=True, help=TARGET_ARGUMENTS[name])
        if command == "sanitize":
            p.add_argument("--layout", action="append", required=True,
                           help="a hand-written layout of the kernel, repeatable: all of them run in one child per tool")
        if output:
            p.add_argument("--output", required=True, help=f"where to write {output} (JSON)")
        if command == "sanitize":
            from kernelkit.gpulock import add_arguments as add_lock_argument

            add_lock_argument(p)
        p.set_defaults(func=func)
