"""NVIDIA tools, used when present: compute-sanitizer on a few correctness cases (gating timing), and
Nsight Compute counters of one warmed call. Each runs the kit's own command as its child, so what is
checked is what the workflow runs; a missing tool or a refusal is recorded as skipped in its own words."""

from __future__ import annotations

import argparse
import csv
import io
import re
import shutil
import subprocess
from typing import Any, Sequence

from kernelkit import KitError, spec as specs
from kernelkit.cases import hold_gpu, sanitizer_cases
from kernelkit.gpulock import LockSettings, add_arguments as add_lock_argument
from kernelkit.nvml import Nvml
from kernelkit.records import write_record
from kernelkit.sanitizer import SANITIZER_TOOLS, _kit, _run_tool, _tail, findings, layout_results

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


def sanitize(kernel: str, layouts: Sequence[str], timeout_s: float = 900) -> dict[str, Any]:
    """memcheck and racecheck over the layouts' sanitizer cases, or why they were skipped, with the SHA-256
    of each layout's build. All layouts run in one child per tool (each child pays seconds to start);
    when a tool finds something, `by_layout` holds each layout's own run, which says which it was."""
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
        if spec.is_baseline(layout):  # which refuses a layout the spec does not define
            raise KitError(f"the sanitizer checks hand-written kernels; '{layout}' is a library baseline")
    if shutil.which("compute-sanitizer"):
        hold_gpu(LockSettings().with_dir(args.lock_dir), clock)  # the children run under this process's hold
    cases = [f"{specs.shape_name(shape)} {pattern}" for shape, pattern in sanitizer_cases(spec)]
    with clock.phase("tools"):
        checked = sanitize(spec.name, args.layout)
    record = {"kernel": spec.name, "layouts": args.layout, "source_sha256": spec.source_sha256(), "cases": cases, **checked}
    if "skipped" in record:
        print(f"sanitizer skipped: {record['skipped']}; timing goes on, and the report says races were not checked")
    else:
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
    if "skipped" not in record:
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
    from kernelkit import device, gpujob, library
    from kernelkit.inputs import timing_inputs

    spec = specs.load(args.kernel)
    spec.layout(args.layout)
    shape = spec.parse_shape(args.shape)
    cp = device.cupy()
    bus_id = cp.cuda.Device().pci_bus_id
    if spec.is_baseline(args.layout):
        device.compile_layout(spec, args.layout)  # imports the package, seconds of CPU work, before the lock
    host_inputs = timing_inputs(spec, args.shape)
    with gpujob.exclusive_gpu(Nvml(bus_id), bus_id, LockSettings(), gpujob.JobClock()):
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


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("sanitize", help="compute-sanitizer memcheck and racecheck over hand-written layouts' "
                                               "correctness cases")
    p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
    p.add_argument("--layout", action="append", required=True,
                   help="a hand-written layout of the kernel, repeatable: all of them run in one child per tool")
    p.add_argument("--output", required=True, help="where to write the sanitizer record (JSON)")
    add_lock_argument(p)
    p.set_defaults(func=cmd_sanitize)
    for command, summary, func in (
        ("profile", "Nsight Compute counters of one warmed call (clocks not controlled)", cmd_profile),
        ("profile-call", "(run under ncu) one warmed call between cudaProfilerStart and Stop", cmd_profile_call),
    ):
        p = subparsers.add_parser(command, help=summary)
        p.add_argument("--kernel", required=True, help="a kernel folder under kernels/")
        p.add_argument("--shape", required=True, help="one shape of the kernel, e.g. 512x128")
        p.add_argument("--layout", required=True, help="one layout of the kernel")
        if command == "profile":
            p.add_argument("--output", required=True, help="where to write the profile record (JSON)")
        p.set_defaults(func=func)
