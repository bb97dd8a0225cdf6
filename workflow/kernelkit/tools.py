"""Optional NVIDIA tools, used when present: compute-sanitizer on the correctness cases, and
Nsight Compute counters for one warmed call of a timed configuration.

Each runs the kit's own command line in a child process under the tool, so what is checked
or counted is exactly what the workflow runs. A missing tool, a device it does not support
or a refusal (no access to performance counters) is recorded as skipped with the tool's own
words; parsing the tools' output is plain text work, tested on the CPU.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import shutil
import subprocess
import sys
from typing import Any

from kernelkit import KitError, spec as specs
from kernelkit.records import write_record

SANITIZER_TOOLS = ("memcheck", "racecheck")
NCU_METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_throughput_pct_of_peak",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
    "smsp__inst_executed.sum": "instructions_executed",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared_bank_conflicts",
    "gpu__time_duration.sum": "duration_ns",
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


def sanitize(kernel: str, layout: str, timeout_s: float = 900) -> dict[str, Any]:
    """memcheck and racecheck over the layout's correctness cases."""
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return {"skipped": "compute-sanitizer is not on the PATH"}
    results = {}
    for tool in SANITIZER_TOOLS:
        done = subprocess.run([exe, "--tool", tool, "--print-limit", "20", *_kit("correctness", "--kernel", kernel,
                                                                                  "--layout", layout)],
                              capture_output=True, text=True, timeout=timeout_s)
        output = done.stdout + done.stderr
        errors = sanitizer_errors(output)
        results[tool] = {"exit_code": done.returncode, "errors": errors, "tail": _tail(output),
                         "status": "ran" if errors is not None else "did not run to its summary"}
    return {"tools": results}


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


def _card() -> dict[str, Any]:
    from kernelkit import device

    return device.card()


def cmd_sanitize(args: argparse.Namespace) -> int:
    spec = specs.load(args.kernel)
    if spec.is_baseline(args.layout):
        raise KitError(f"the sanitizer checks hand-written kernels; '{args.layout}' is a library baseline")
    record = {"kernel": spec.name, "layout": args.layout, "source_sha256": spec.source_sha256(),
              **sanitize(spec.name, args.layout)}
    write_record(args.output, {**record, **_card()})
    if "skipped" in record:
        print(f"sanitizer skipped: {record['skipped']}")
    else:
        print("; ".join(f"{tool}: {r['errors']} errors ({r['status']})" for tool, r in record["tools"].items()))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    spec = specs.load(args.kernel)
    spec.layout(args.layout)
    spec.parse_shape(args.shape)
    record = {"kernel": spec.name, "shape": args.shape, "layout": args.layout,
              **profile(spec.name, args.shape, args.layout)}
    write_record(args.output, {**record, **_card()})
    print(f"profile skipped: {record['skipped']}" if "skipped" in record else
          f"profiled {len(record['launches'])} kernel launches in one call")
    return 0


def cmd_profile_call(args: argparse.Namespace) -> int:
    """The program ncu runs: warm up, then one call between cudaProfilerStart and Stop."""
    from kernelkit import device, library
    from kernelkit.timing import inputs_on_device

    spec = specs.load(args.kernel)
    spec.layout(args.layout)
    cp = device.cupy()
    shape, buffers = inputs_on_device(spec, args.shape)
    out = cp.empty(spec.output_shape(shape), dtype=cp.float32)
    implementation = device.implementation(spec, args.layout, shape, buffers, out)
    stream = cp.cuda.Stream(non_blocking=True)
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
                    "--layout": "one layout of the kernel (for the sanitizer, a hand-written one)"}


def register(subparsers: Any) -> None:
    commands = (
        ("sanitize", "compute-sanitizer memcheck and racecheck over a layout's correctness cases", cmd_sanitize,
         ("--kernel", "--layout"), "the sanitizer record"),
        ("profile", "Nsight Compute counters of one warmed call (clocks not controlled)", cmd_profile,
         ("--kernel", "--shape", "--layout"), "the profile record"),
        ("profile-call", "(run under ncu) one warmed call between cudaProfilerStart and Stop", cmd_profile_call,
         ("--kernel", "--shape", "--layout"), None),
    )
    for command, summary, func, target, output in commands:
        p = subparsers.add_parser(command, help=summary)
        for name in target:
            p.add_argument(name, required=True, help=TARGET_ARGUMENTS[name])
        if output:
            p.add_argument("--output", required=True, help=f"where to write {output} (JSON)")
        p.set_defaults(func=func)
