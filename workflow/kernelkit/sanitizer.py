"""compute-sanitizer over the correctness cases, each tool in a child process of this one, and its
records read back: which findings forbid timing a layout (`require_clean`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from kernelkit import KitError

SANITIZER_TOOLS = ("memcheck", "racecheck")


def _kit(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelkit", *args]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def sanitizer_errors(output: str) -> int | None:
    """The error count of compute-sanitizer's summary line, or None without one (racecheck's
    'RACECHECK SUMMARY: H hazards displayed (E errors, W warnings)' counts E + W)."""
    race = re.findall(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)", output)
    if race:
        return int(race[-1][0]) + int(race[-1][1])
    found = re.findall(r"ERROR SUMMARY: (\d+) error", output)
    return int(found[-1]) if found else None


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


def racecheck_control(kernel: str, layouts: list[str], control: str, timeout_s: float = 900) -> dict[str, Any]:
    """racecheck over a negative control's mutated build of the layouts, in one child: `layouts`,
    and `hazards` (errors + warnings) for them all, or `skipped`; a control asks only whether
    racecheck sees the race, not in which layout."""
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
    """Each layout's sanitizer result in a record (`tools`, or `skipped`): a record covers a
    kernel's layouts checked together, a layout's own run deciding where the joint run found
    something; runs made before that hold one record per layout."""
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
    record, or the one named <layout>.json (earlier kits); None when none was given."""
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
