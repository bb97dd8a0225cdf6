"""The Markdown report of one run, built from `results/<run>/` alone.

Every number printed here is read from a result file of the run (the summary table is
recomputed from the raw samples, not read back from summary.csv), so a reader can trace
each one to its samples.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd

from kernelkit.environment import is_unavailable
from kernelkit.results import read_json
from kernelkit.summary import natural_key, summarize_records


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in rows]
    return "\n".join(lines)


class Run:
    """The result files of one run directory, loaded once."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir
        self.name = run_dir.name
        self.config = read_json(run_dir / "config.json")
        self.environment = read_json(run_dir / "environment.json")
        self.correctness = [read_json(p) for p in sorted(run_dir.glob("correctness/*/*.json"))]
        self.controls = [read_json(p) for p in sorted(run_dir.glob("controls/*/*.json"))]
        self.timings = [read_json(p) for p in sorted(run_dir.glob("timing/*/*/*/rep*.json"))]
        self.table = summarize_records(self.timings)


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if is_unavailable(value):
        return str(value)
    if isinstance(value, float):
        return f"{value:g}{unit}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return f"{value}{unit}"


def _unavailable_fields(record: Any, prefix: str = "") -> list[tuple[str, str]]:
    found = []
    if isinstance(record, dict):
        for key, value in record.items():
            found += _unavailable_fields(value, f"{prefix}{key}.")
    elif is_unavailable(record):
        found.append((prefix.rstrip("."), record))
    return found


def section_environment(run: Run) -> str:
    env = run.environment
    gpu, cuda, host, snap = env["gpu"], env["cuda"], env["host"], env["snapshot"]
    rows = [
        ("GPU", f"{cuda['device_name']} (compute capability {cuda['compute_capability']}, {cuda['sm_count']} SMs)"),
        ("UUID / PCI bus", f"{_fmt(gpu['uuid'])} / {_fmt(gpu['pci_bus_id'])}"),
        ("Memory / L2", f"{_fmt(cuda['global_memory_bytes'])} bytes / {_fmt(cuda['l2_cache_bytes'])} bytes"),
        ("Driver / CUDA driver API", f"{_fmt(gpu['driver_version'])} / {_fmt(cuda['cuda_driver_version'])}"),
        ("CUDA runtime / NVRTC", f"{_fmt(cuda['cuda_runtime_version'])} / {_fmt(cuda['nvrtc_version'])}"),
        ("CuPy / NumPy / Python", f"{cuda['cupy_version']} / {host['numpy_version']} / {host['python_version']}"),
        ("SM clock: now / max / application", f"{_fmt(snap['sm_clock_mhz'])} / {_fmt(gpu['sm_clock_max_mhz'])} / "
         f"{_fmt(gpu['sm_clock_application_mhz'])} MHz"),
        ("Memory clock: now / max / application", f"{_fmt(snap['memory_clock_mhz'])} / {_fmt(gpu['memory_clock_max_mhz'])} / "
         f"{_fmt(gpu['memory_clock_application_mhz'])} MHz"),
        ("Clocks locked", _fmt(env["clocks_locked"])),
        ("Power draw / limit", f"{_fmt(snap['power_draw_w'])} / {_fmt(gpu['power_limit_w'])} W"),
        ("Temperature / performance state", f"{_fmt(snap['temperature_c'])} C / {_fmt(snap['performance_state'])}"),
        ("Clock-event reasons at capture", _fmt(snap["clock_event_reasons"])),
        ("Persistence / ECC / MIG", f"{_fmt(gpu['persistence_mode'])} / {_fmt(gpu['ecc_mode_current'])} / "
         f"{_fmt(gpu['mig_mode_current'])}"),
        ("Host", f"{host['os']}; {host['cpu']} ({host['cpu_count']} CPUs)"),
        ("Kit commit", f"{host['kit_commit']}" + (" (tree had uncommitted changes)" if host["kit_tree_dirty"] is True else "")),
        ("Config sha256", env["config_sha256"]),
        ("Captured (UTC)", env["captured_utc"]),
    ]
    text = "## Environment\n\n" + markdown_table(("Field", "Value"), rows)
    if not env["nvml_available"]:
        text += f"\n\n**NVML was not usable** ({env['nvml_error']}): clocks, power, temperature and clock-event reasons are not recorded for this run."
    missing = _unavailable_fields({k: env[k] for k in ("gpu", "cuda", "host", "snapshot")})
    if missing and env["nvml_available"]:
        text += "\n\nFields that could not be read: " + "; ".join(f"`{key}` ({why})" for key, why in missing) + "."
    return text


def section_method(run: Run) -> str:
    timing = run.config["timing"]
    text = (
        "## Method\n\n"
        f"Each timed target: {timing['warmup_launches']} warm-up launches, then one CUDA graph of "
        f"{timing['launches_per_graph']} launches of the same kernel on the same buffers, replayed once untimed and then "
        f"{timing['samples']} times between two CUDA events; a sample is one replay's event time divided by "
        f"{timing['launches_per_graph']}. Compilation, allocation, host-to-device copies, warm-up and graph construction "
        "happen before the first event. Buffers are reused, so this is a warm-cache measurement. "
        f"Every configuration is timed in {timing['repeats']} separate processes (repeats); within each repeat the "
        f"targets run in a seeded shuffled order (seed {timing['order_seed']}). The NVML snapshot is taken right "
        "before and after each target. Clocks are not changed by the kit."
    )
    return text


def section_correctness(run: Run) -> str:
    rows, total, worst = [], 0, None
    for record in run.correctness:
        cases = record["cases"]
        total += len(cases)
        for case in cases:
            if worst is None or case["max_abs_error"] > worst["max_abs_error"]:
                worst = case
        per_layout: dict[str, list[dict[str, Any]]] = {}
        for case in cases:
            per_layout.setdefault(case["layout"], []).append(case)
        for layout, layout_cases in per_layout.items():
            passed = sum(case["passed"] for case in layout_cases)
            largest = max(layout_cases, key=lambda c: c["max_abs_error"])
            rows.append((record["kernel"], layout, f"{passed}/{len(layout_cases)}", f"{largest['max_abs_error']:.4e}",
                         f"{largest['shape']} {largest['pattern']} at {largest['worst_index']}"))
    text = "## Correctness\n\n"
    if run.correctness:
        tol = run.correctness[0]["tolerance"]
        text += (
            f"Float64 NumPy reference from the exact FP32 inputs on the device; a case passes when every output element "
            f"is finite and |err| <= {tol['abs']:g} + {tol['rel']:g} * |ref|, every element was overwritten (sentinel "
            f"gone), and the guard regions before and after the output are unchanged. {total} cases in all; largest "
            f"absolute error {worst['max_abs_error']:.4e} ({worst['kernel']} {worst['layout']} {worst['shape']} "
            f"{worst['pattern']}).\n\n"
        )
    return text + markdown_table(("Kernel", "Layout", "Passed", "Largest abs error", "Where"), rows)


def symptom_kind(symptom: str) -> str:
    """'NaN in 8 and Inf in 0 output elements' -> 'NaN': the class of failure, without counts."""
    for kind in ("guard", "sentinel", "NaN", "error above tolerance"):
        if kind in symptom:
            return {"guard": "guard overwritten", "sentinel": "sentinel left"}.get(kind, kind)
    return symptom


def section_controls(run: Run) -> str:
    rows = []
    for control in run.controls:
        caught = [case for case in control["cases"] if not case["passed"]]
        by_kind: dict[str, set[str]] = {}
        for case in caught:
            by_kind.setdefault(symptom_kind(case["symptom"]), set()).add(case["pattern"])
        how = "; ".join(
            f"{kind} ({sum(symptom_kind(c['symptom']) == kind for c in caught)} cases; patterns {', '.join(sorted(p))})"
            for kind, p in sorted(by_kind.items())
        )
        first = control["caught_by"]
        rows.append((control["kernel"], control["control"], control["mutation"]["why"],
                     f"{len(caught)}/{len(control['cases'])}", how,
                     f"{first['layout']} {first['shape']} {first['pattern']}: {first['symptom']}"))
    return (
        "## Negative controls\n\nMutated builds of the same source; each must fail the correctness suite before "
        "anything is timed.\n\n"
        + markdown_table(("Kernel", "Control", "Mutation", "Cases failed", "Symptoms", "First failing case"), rows)
    )


def section_timings(run: Run) -> str:
    table = run.table
    parts = ["## Timings\n\nMedian per-launch time in microseconds, with the minimum and maximum sample, per repeat."]
    for kernel in sorted(table["kernel"].unique()):
        rows_k = table[table["kernel"] == kernel]
        repeats = sorted(rows_k["repeat"].unique())
        layouts = sorted(rows_k["layout"].unique(), key=natural_key)
        shapes = sorted(rows_k["shape"].unique(), key=natural_key)
        header = ["Shape", "Layout"] + [f"rep{r} median [min, max]" for r in repeats]
        rows = []
        for shape in shapes:
            for layout in layouts:
                cells = []
                for r in repeats:
                    hit = rows_k[(rows_k["shape"] == shape) & (rows_k["layout"] == layout) & (rows_k["repeat"] == r)]
                    cells.append("missing" if hit.empty else
                                 f"{hit.iloc[0]['median_us']:.3f} [{hit.iloc[0]['min_us']:.3f}, {hit.iloc[0]['max_us']:.3f}]")
                rows.append([shape, layout] + cells)
        parts.append(f"### {kernel}\n\n" + markdown_table(header, rows))

        fastest_rows = []
        for shape in shapes:
            winners = []
            for r in repeats:
                hit = rows_k[(rows_k["shape"] == shape) & (rows_k["repeat"] == r)].sort_values("median_us")
                if len(hit) >= 2:
                    best, second = hit.iloc[0], hit.iloc[1]
                    winners.append((best["layout"], second["median_us"] / best["median_us"]))
            if not winners:
                continue
            agree = len({w for w, _ in winners}) == 1
            fastest_rows.append([shape, ", ".join(f"rep{r}: {w} ({m:.2f}x)" for r, (w, m) in zip(repeats, winners)),
                                 "yes" if agree else "no"])
        parts.append(
            f"Faster layout per shape ({kernel}; in brackets, the runner-up's median divided by the winner's):\n\n"
            + markdown_table(["Shape", "Faster layout per repeat", "Same in every repeat"], fastest_rows)
        )
    return "\n\n".join(parts)


def hypothesis_verdicts(table: pd.DataFrame, hypothesis: dict[str, Any]) -> list[dict[str, Any]]:
    """Per repeat: does `faster` have the lower median than `slower` on every shape?"""
    rows = table[table["kernel"] == hypothesis["kernel"]]
    verdicts = []
    for repeat in sorted(rows["repeat"].unique()):
        counter = []
        medians = rows[rows["repeat"] == repeat].pivot(index="shape", columns="layout", values="median_us")
        shapes = sorted(medians.index, key=natural_key)
        for shape in shapes:
            fast, slow = medians.loc[shape, hypothesis["faster"]], medians.loc[shape, hypothesis["slower"]]
            if not fast < slow:
                counter.append(f"{shape} ({hypothesis['faster']} {fast:.3f} us vs {hypothesis['slower']} {slow:.3f} us)")
        verdicts.append({"repeat": int(repeat), "holds": not counter, "shapes": len(shapes), "counter_examples": counter})
    return verdicts


def section_hypotheses(run: Run) -> str:
    hypotheses = run.config.get("hypotheses", [])
    if not hypotheses:
        return "## Hypotheses\n\nThe config states none."
    rows = []
    for hypothesis in hypotheses:
        for verdict in hypothesis_verdicts(run.table, hypothesis):
            rows.append((f"\"{hypothesis['statement']}\"", f"rep{verdict['repeat']}",
                         "holds" if verdict["holds"] else "fails",
                         "; ".join(verdict["counter_examples"]) or f"none in {verdict['shapes']} shapes"))
    return "## Hypotheses\n\n" + markdown_table(("Hypothesis", "Repeat", "Verdict", "Counter-examples"), rows)


def section_clocks(run: Run) -> str:
    def values(key: str) -> list[float]:
        found = []
        for record in run.timings:
            for snap in (record["nvml_before"], record["nvml_after"]):
                if isinstance(snap.get(key), (int, float)):
                    found.append(snap[key])
        return found

    reasons = sorted({r for t in run.timings for s in (t["nvml_before"], t["nvml_after"])
                      if isinstance(s.get("clock_event_reasons"), list) for r in s["clock_event_reasons"]})
    rows = []
    for key, label in (("sm_clock_mhz", "SM clock (MHz)"), ("memory_clock_mhz", "Memory clock (MHz)"),
                       ("temperature_c", "Temperature (C)"), ("power_draw_w", "Power draw (W)")):
        seen = values(key)
        rows.append((label, f"{min(seen):g}" if seen else "not recorded", f"{max(seen):g}" if seen else "not recorded"))
    return (
        "## Clocks around the timed targets\n\nFrom the NVML snapshots before and after each of the "
        f"{len(run.timings)} timed targets (they do not show what happened between them).\n\n"
        + markdown_table(("Quantity", "Min seen", "Max seen"), rows)
        + f"\n\nClock-event reasons seen: {', '.join(reasons) or 'none'}."
    )


def render_markdown(run_dir: Path) -> str:
    run = Run(run_dir)
    sections = [
        f"# kernelkit report: run `{run.name}`\n\nGenerated from `results/{run.name}/` only; every timing below is "
        "recomputed from the raw samples in `timing/<kernel>/<shape>/<layout>/rep<n>.json`.",
        section_environment(run),
        section_method(run),
        section_correctness(run),
        section_controls(run),
        section_timings(run),
        section_hypotheses(run),
        section_clocks(run),
    ]
    return "\n\n".join(sections) + "\n"
