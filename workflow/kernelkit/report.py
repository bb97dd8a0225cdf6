"""The report of one run, built from `results/<run>/` alone, as Markdown and as HTML.

Every number printed is read from a result file of the run: timing tables are recomputed
from the raw samples, not read back from summary.csv, so each traces to its samples.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any, Iterable

import pandas as pd

from kernelkit import ceilings, sampler
from kernelkit.tools import sanitizer_errors
from kernelkit import document as doc
from kernelkit.environment import is_unavailable
from kernelkit.layout import run_result_files
from kernelkit.records import read_json, split_skipped
from kernelkit.summary import natural_key, summarize_records


class Run:
    """The result files of one run directory, loaded once."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.name = self.dir.name
        self.config = read_json(self.dir / "config.json")
        self.environment = read_json(self.dir / "environment.json")
        self.correctness = [read_json(p) for p in run_result_files(self.dir, "correctness")]
        self.controls = [read_json(p) for p in run_result_files(self.dir, "controls")]
        self.timings, self.skipped = split_skipped([read_json(p) for p in run_result_files(self.dir, "timing")])
        self.spans = [read_json(p) for p in run_result_files(self.dir, "span")]
        self.cold, cold_skipped = split_skipped([read_json(p) for p in run_result_files(self.dir, "cold")])
        self.skipped += cold_skipped
        self.ceilings = {r["kind"]: r for r in map(read_json, run_result_files(self.dir, "ceilings"))}
        self.ceiling = ceilings.rates(self.ceilings)
        self.sanitizer = [read_json(p) for p in run_result_files(self.dir, "sanitizer")]
        self.profiles = [read_json(p) for p in run_result_files(self.dir, "profile")]
        self.table = summarize_records(self.timings)

    @property
    def kernels(self) -> list[str]:
        return sorted({record["kernel"] for record in self.timings})


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


def _snapshots(run: Run) -> Iterable[tuple[dict[str, Any], str, dict[str, Any]]]:
    for record in run.timings:
        yield record, "before", record["nvml_before"]
        yield record, "after", record["nvml_after"]


def _target(record: dict[str, Any]) -> str:
    return f"{record['kernel']} {record['shape']} {record['layout']} rep{record['repeat']}"


def section_method(run: Run) -> doc.Section:
    timing = run.config["timing"]
    methods = {tuple(sorted(r["method"].items())) for r in run.timings}
    method = dict(next(iter(methods))) if len(methods) == 1 else None
    patterns = sorted({r["input_pattern"] for r in run.timings})
    text = (
        f"Each timed target ran in its own process: compile the kernel with NVRTC, allocate and upload its inputs "
        f"(pattern: {', '.join(patterns)}), then {timing['warmup_launches']} warm-up launches, capture "
        f"{timing['launches_per_graph']} launches of the kernel on the same buffers into one CUDA graph, replay the "
        f"graph {method['untimed_replays'] if method else 1} time(s) untimed, and time {timing['samples']} replays, "
        f"each between two CUDA events recorded on the same stream. A sample is one replay's event time divided by "
        f"{timing['launches_per_graph']}: an average per launch inside a replay, not a single-launch latency. "
        "Inside the timed interval: the graph replay only. Outside it: compilation, allocation, host-to-device copies, "
        "warm-up launches, graph capture and upload, the NVML snapshots. Buffers are reused across launches, so the "
        "caches are warm. "
        f"Every configuration was timed in {timing['repeats']} separate processes (repeats); within a repeat the targets "
        f"ran in a seeded shuffled order (seed {timing['order_seed']}; each repeat has its own order, recorded as the "
        "order key in every timing file). The kit does not change clocks or power settings."
    )
    blocks: list[doc.Block] = [doc.Paragraph(text)]
    if method is None:
        blocks.append(doc.Paragraph(f"Warning: the timing files record {len(methods)} different method settings."))
    fewer = [r for r in run.timings if r.get("method_used", {}).get("launches_per_sample", timing["launches_per_graph"])
             < timing["launches_per_graph"]]
    if fewer:
        blocks.append(doc.Paragraph(
            f"Calls so long that {timing['launches_per_graph']} of them would exceed "
            f"{timing.get('max_sample_ms', 20)} ms per sample were put fewer to a sample (at least one), each file "
            f"recording the count: {len(fewer)} timed targets, e.g. " + "; ".join(
                f"{_target(r)} ({r['method_used']['launches_per_sample']})" for r in fewer[:4]) + "."))
    events = [r for r in run.timings if r.get("method_used", {}).get("name") == "back_to_back_events"]
    if events:
        blocks.append(doc.Paragraph(
            f"{len(events)} timed targets could not be captured in a CUDA graph and were timed as the same number of "
            "back-to-back calls between two events on the same stream instead (the host enqueues them while the GPU "
            "runs, so launch overhead is hidden unless a call is shorter than its launch). Why capture failed, "
            f"from the files: {sorted({r['method_used']['capture_error'] for r in events})[0]} "
            f"({', '.join(sorted({r['kernel'] + ' ' + r['layout'] for r in events}))})."))
    if run.spans:
        span = run.config["span"]
        blocks.append(doc.Paragraph(
            f"Span view: one process per kernel, shape and repeat times every configured layout of that shape: "
            f"{span['warmup_calls']} untimed calls of each, then {span['rounds']} rounds; round r starts with the "
            f"r-th layout, and in its turn a layout gets one untimed call, then {span['samples_per_round']} samples, "
            "each a pair of CUDA events around one call followed by a synchronisation."))
    return doc.Section("Method", blocks)


def section_environment(run: Run) -> doc.Section:
    env = run.environment
    gpu, cuda, host, snap = env["gpu"], env["cuda"], env["host"], env["snapshot"]
    rows = [
        ("GPU", f"{cuda['device_name']} (compute capability {cuda['compute_capability']}, {cuda['sm_count']} SMs)"),
        ("UUID / PCI bus", f"{_fmt(gpu['uuid'])} / {_fmt(gpu['pci_bus_id'])}"),
        ("Memory / L2", f"{_fmt(cuda['global_memory_bytes'])} bytes / {_fmt(cuda['l2_cache_bytes'])} bytes"),
        ("Driver / CUDA driver API", f"{_fmt(gpu['driver_version'])} / {_fmt(cuda['cuda_driver_version'])}"),
        ("CUDA runtime / NVRTC", f"{_fmt(cuda['cuda_runtime_version'])} / {_fmt(cuda['nvrtc_version'])}"),
        ("CuPy / NumPy / Python", f"{cuda['cupy_version']} / {host['numpy_version']} / {host['python_version']}"),
        *([("Baseline packages", "; ".join(f"{name} {_fmt(version)}" for name, version in env["baseline_packages"].items()))]
          if "baseline_packages" in env else []),
        ("SM clock at capture: now / max / application",
         f"{_fmt(snap['sm_clock_mhz'])} / {_fmt(gpu['sm_clock_max_mhz'])} / {_fmt(gpu['sm_clock_application_mhz'])} MHz"),
        ("Memory clock at capture: now / max / application",
         f"{_fmt(snap['memory_clock_mhz'])} / {_fmt(gpu['memory_clock_max_mhz'])} / "
         f"{_fmt(gpu['memory_clock_application_mhz'])} MHz"),
        ("Clocks locked", _fmt(env["clocks_locked"])),
        ("Power draw / limit at capture", f"{_fmt(snap['power_draw_w'])} / {_fmt(gpu['power_limit_w'])} W"),
        ("Temperature / performance state at capture", f"{_fmt(snap['temperature_c'])} C / {_fmt(snap['performance_state'])}"),
        ("Clock-event reasons at capture", _fmt(snap["clock_event_reasons"])),
        ("Persistence / ECC / MIG", f"{_fmt(gpu['persistence_mode'])} / {_fmt(gpu['ecc_mode_current'])} / "
         f"{_fmt(gpu['mig_mode_current'])}"),
        ("Host", f"{host['os']}; {host['cpu']} ({host['cpu_count']} CPUs)"),
        ("Kit commit", f"{host['kit_commit']}" + (" (tree had uncommitted changes)" if host["kit_tree_dirty"] is True else "")),
        ("Config sha256", env["config_sha256"]),
        ("Captured (UTC)", env["captured_utc"]),
    ]
    blocks: list[doc.Block] = [doc.Table(("Field", "Value"), rows)]

    clock_rows = []
    for key, label in (("sm_clock_mhz", "SM clock (MHz)"), ("memory_clock_mhz", "Memory clock (MHz)"),
                       ("temperature_c", "Temperature (C)"), ("power_draw_w", "Power draw (W)")):
        seen = [s[key] for _, _, s in _snapshots(run) if isinstance(s.get(key), (int, float))]
        clock_rows.append((label, f"{min(seen):g}" if seen else "not recorded", f"{max(seen):g}" if seen else "not recorded"))
    reasons = sorted({r for _, _, s in _snapshots(run) if isinstance(s.get("clock_event_reasons"), list)
                      for r in s["clock_event_reasons"]})
    blocks += [
        doc.Paragraph(f"NVML snapshots right before and after each of the {len(run.timings)} timed targets "
                      "(they do not show what happened between them):"),
        doc.Table(("Quantity", "Min seen", "Max seen"), clock_rows),
        doc.Paragraph(f"Clock-event reasons seen in those snapshots: {', '.join(reasons) or 'none'}."),
    ]
    if not env["nvml_available"]:
        blocks.append(doc.Paragraph(f"NVML was not usable ({env['nvml_error']}): clocks, power, temperature and "
                                    "clock-event reasons are not recorded for this run."))
    missing = _unavailable_fields({k: env[k] for k in ("gpu", "cuda", "host", "snapshot")})
    if missing and env["nvml_available"]:
        blocks.append(doc.Paragraph("Fields that could not be read: "
                                    + "; ".join(f"{key} ({why})" for key, why in missing) + "."))
    return doc.Section("Environment", blocks)


def section_correctness(run: Run) -> doc.Section:
    rows, cases = [], [case for record in run.correctness for case in record["cases"]]
    for record in run.correctness:
        per_layout: dict[str, list[dict[str, Any]]] = {}
        for case in record["cases"]:
            per_layout.setdefault(case["layout"], []).append(case)
        for layout, layout_cases in per_layout.items():
            largest = max(layout_cases, key=lambda c: c["max_abs_error"])
            rows.append((record["kernel"], layout, f"{sum(c['passed'] for c in layout_cases)}/{len(layout_cases)}",
                         f"{largest['max_abs_error']:.4e}",
                         f"{largest['shape']} {largest['pattern']} at {largest['worst_index']}"))
    blocks: list[doc.Block] = []
    if cases:
        worst = max(cases, key=lambda c: c["max_abs_error"])
        blocks.append(doc.Paragraph(
            "Float64 NumPy reference from the exact FP32 inputs on the device; a case passes when every output element "
            "is finite and |err| <= abs + rel * scale, where scale is |ref|, or for reductions the sum of the absolute "
            "terms (the magnitude FP32 rounding grows with), every element was overwritten (no sentinel left) and the "
            "guard regions before and after the output are unchanged. A library baseline allocates its own output: "
            "its result is copied into the guarded buffer before the check, so guards do not apply to it, but a "
            f"result of the wrong shape or type leaves the sentinel. {len(cases)} cases in all, "
            f"{sum(c['passed'] for c in cases)} passed; largest absolute error {worst['max_abs_error']:.4e} "
            f"({worst['kernel']} {worst['layout']} {worst['shape']} {worst['pattern']})."))
        tolerances = sorted({(r["kernel"], r["tolerance"]["abs"], r["tolerance"]["rel"]) for r in run.correctness})
        blocks.append(doc.Paragraph("Tolerances (abs, rel): " + "; ".join(
            f"{kernel} {abs_:g}, {rel:g}" for kernel, abs_, rel in tolerances) + "."))
    blocks.append(doc.Table(("Kernel", "Layout", "Passed", "Largest abs error", "Where"), rows))
    blocks += [doc.Paragraph(text) for text in (_determinism_sentence(cases), _verified_sentence(run.timings + run.cold))
               if text]
    skipped = [f"{r['kernel']} {layout}: {reason}" for r in run.correctness for layout, reason in r.get("skipped", {}).items()]
    if skipped:
        blocks.append(doc.Paragraph("Skipped, neither checked nor timed: " + "; ".join(skipped) + "."))
    return doc.Section("Correctness", blocks)


def _determinism_sentence(cases: list[dict[str, Any]]) -> str | None:
    from kernelkit import determinism

    found = determinism.summarize(cases)
    if found is None:
        return None
    text = (f"Determinism: each of {found['cases']} cases was launched {', '.join(map(str, found['launches']))} times on a "
            f"freshly filled output; {len(found['differing'])} did not repeat their bits"
            + (f" ({'; '.join(found['differing'])})" if found["differing"] else "") + ".")
    return text + (f" Declared nondeterministic: {'; '.join(found['exempt'])}." if found["exempt"] else "")


def _verified_sentence(records: list[dict[str, Any]]) -> str | None:
    from kernelkit import verify

    found = verify.summarize(records)
    if found is None:
        return None
    text = (f"Timed shapes: {found['verified']} of {found['records']} timing records verified their own output once at "
            f"the timed shape against a float64 reference ({', '.join(found['references']) or 'none'})")
    if found["worst"]:
        worst = found["worst"]
        text += (f", largest |error| {worst['max_abs_error']:.4e} ({worst['kernel']} {worst['shape']} {worst['layout']})")
    text += "."
    if found["not_verified"]:
        text += f" Not verified: {'; '.join(found['not_verified'])}."
    if found["without"]:
        text += f" {found['without']} records predate the verification."
    return text


def symptom_kind(symptom: str) -> str:
    """'NaN in 8 and Inf in 0 output elements' -> 'NaN': the class of failure, without counts."""
    for kind, name in (("guard", "guard overwritten"), ("sentinel", "sentinel left"), ("NaN", "NaN"),
                       ("error above tolerance", "error above tolerance")):
        if kind in symptom:
            return name
    return symptom


def section_controls(run: Run) -> doc.Section:
    rows = []
    for control in run.controls:
        caught = [case for case in control["cases"] if not case["passed"]]
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for case in caught:
            by_kind.setdefault(symptom_kind(case["symptom"]), []).append(case)
        how = "; ".join(f"{kind} ({len(cs)} cases; patterns {', '.join(sorted({c['pattern'] for c in cs}))})"
                        for kind, cs in sorted(by_kind.items()))
        first = control["caught_by"]
        where = " ".join(str(first[key]) for key in ("layout", "shape", "pattern") if key in first)
        # Records since the determinism check and racecheck joined the controls name the check per layout.
        checks = control.get("caught_in_layouts")
        by = (" (caught by " + ", ".join(f"{layout}: {check or 'nothing'}" for layout, check in checks.items()) + ")"
              if checks else "")
        rows.append((control["kernel"], control["control"], control["mutation"]["why"],
                     f"{len(caught)}/{len(control['cases'])}", how or "none", f"{where}: {first['symptom']}{by}"))
    return doc.Section("Negative controls", [
        doc.Paragraph("Mutated builds of the same source; each must be caught before anything is timed: by the "
                      "correctness cases, by their repeated launches disagreeing (determinism) or, for a race the "
                      "cases cannot show, by compute-sanitizer's racecheck."),
        doc.Table(("Kernel", "Control", "Mutation", "Cases failed", "Symptoms", "First failing case"), rows),
    ])


def faster_layouts(table: pd.DataFrame, kernel: str) -> list[dict[str, Any]]:
    """Per shape: the fastest layout in each repeat, its margin over the runner-up, and agreement."""
    rows_k = table[table["kernel"] == kernel]
    result = []
    for shape in sorted(rows_k["shape"].unique(), key=natural_key):
        winners = []
        for repeat in sorted(rows_k["repeat"].unique()):
            hit = rows_k[(rows_k["shape"] == shape) & (rows_k["repeat"] == repeat)].sort_values("median_us")
            if len(hit) >= 2:
                winners.append((int(repeat), hit.iloc[0]["layout"], hit.iloc[1]["median_us"] / hit.iloc[0]["median_us"]))
        if winners:
            result.append({"shape": shape, "winners": winners, "agree": len({w[1] for w in winners}) == 1})
    return result


def throughput_rows(run: Run, kernel: str) -> list[list[str]]:
    """Per shape and layout: pooled median, and bytes / median and FLOPs / median."""
    pooled: dict[tuple[str, str], dict[str, Any]] = {}
    for record in run.timings:
        if record["kernel"] == kernel:
            entry = pooled.setdefault((record["shape"], record["layout"]), {"samples": [], "record": record})
            entry["samples"] += record["samples_us"]
    rows = []
    for (shape, layout), entry in sorted(pooled.items(), key=lambda i: (natural_key(i[0][0]), natural_key(i[0][1]))):
        median_s = float(pd.Series(entry["samples"]).median()) * 1e-6
        record = entry["record"]
        l2_bytes = run.environment["cuda"].get("l2_cache_bytes")
        fits = "yes" if isinstance(l2_bytes, int) and record["bytes_moved"] <= l2_bytes else "no"
        row = [shape, layout, f"{median_s * 1e6:.3f}", f"{record['bytes_moved'] / median_s / 1e9:.1f}",
               f"{record['flops'] / median_s / 1e9:.1f}", fits]
        if run.ceiling:
            row += roofline_cells(run, record["bytes_moved"], record["flops"], median_s * 1e6)
        rows.append(row)
    return rows


def roofline_cells(run: Run, bytes_moved: int, flops: int, median_us: float) -> list[str]:
    """Bound, fraction of the run's own ceiling, and the flags a reader must see."""
    verdict = ceilings.roofline(bytes_moved, flops, median_us, run.ceiling)
    flags = []
    if verdict["impossible"]:
        flags.append("ABOVE CEILING: cache reuse or artefact, not a win")
    elif verdict["at_ceiling"]:
        flags.append(f"at its ceiling (within {ceilings.CEILING_TOLERANCE:.0%})")
    if ceilings.near_floor(median_us, run.ceiling.get("floor_us")):
        flags.append("within 3x the harness floor")
    fraction = verdict["fraction"]
    return [verdict["bound"], "n/a" if fraction is None else f"{fraction:.2f}", "; ".join(flags)]


def resource_rows(run: Run, kernel: str) -> list[list[Any]]:
    """One row per hand-written layout; a layout whose targets disagree (they should not) shows every variant."""
    seen: dict[str, set[tuple]] = {}
    for record in run.timings:
        if record["kernel"] == kernel and "launch" in record:
            attributes, launch = record["kernel_attributes"], record["launch"]
            seen.setdefault(record["layout"], set()).add((
                attributes.get("num_regs", "n/a"), attributes.get("shared_size_bytes", "n/a"),
                launch["shared_mem_bytes"], attributes.get("local_size_bytes", "n/a"),
                attributes.get("max_threads_per_block", "n/a"), "x".join(map(str, launch["block"]))))
    return [[layout, *variant] for layout in sorted(seen, key=natural_key) for variant in sorted(seen[layout])]


def method_used(record: dict[str, Any]) -> str:
    """How a timing file's samples were taken (files from before the fallback existed used graph replay)."""
    used = record.get("method_used", {"name": "cuda_graph_replay",
                                      "launches_per_sample": record["method"]["launches_per_graph"]})
    name = "graph replay" if used["name"] == "cuda_graph_replay" else "back-to-back events"
    return f"{name}, {used['launches_per_sample']} per sample"


def library_rows(run: Run, kernel: str) -> list[list[str]]:
    """One row per library layout: package, version, the call, and how its kernel time was taken."""
    seen: dict[str, tuple[str, str, str, set[str]]] = {}
    for record in run.timings:
        if record["kernel"] == kernel and "library" in record:
            library = record["library"]
            entry = seen.setdefault(record["layout"], (library["package"], library["version"], library["call"], set()))
            entry[3].add(method_used(record))
    for record in run.skipped:
        if record["kernel"] == kernel:
            seen.setdefault(record["layout"], ("skipped", "", record["skipped"], set()))
    return [[layout, package, version, call, "; ".join(sorted(methods)) or "not timed"]
            for layout, (package, version, call, methods) in sorted(seen.items())]


def two_view_rows(run: Run, kernel: str) -> list[dict[str, Any]]:
    """Per shape and layout: pooled kernel-time median, pooled span median, and the span's round means."""
    kernel_time: dict[tuple[str, str], list[float]] = {}
    for record in run.timings:
        if record["kernel"] == kernel:
            kernel_time.setdefault((record["shape"], record["layout"]), []).extend(record["samples_us"])
    spans: dict[tuple[str, str], list[dict[str, float]]] = {}
    for record in run.spans:
        if record["kernel"] == kernel:
            for layout, entry in record["layouts"].items():
                spans.setdefault((record["shape"], layout), []).extend(
                    {"round": (record["repeat"], s["round"]), "us": s["us"]} for s in entry["samples"])
    order = list(run.config["kernels"].get(kernel, {}).get("layouts", []))
    rows = []
    for key in sorted(set(kernel_time) | set(spans),
                      key=lambda k: (natural_key(k[0]), order.index(k[1]) if k[1] in order else len(order), k[1])):
        samples = spans.get(key, [])
        rounds: dict[Any, list[float]] = {}
        for sample in samples:
            rounds.setdefault(sample["round"], []).append(sample["us"])
        round_means = [sum(v) / len(v) for v in rounds.values()]
        rows.append({
            "shape": key[0], "layout": key[1],
            "kernel_us": median(kernel_time[key]) if key in kernel_time else None,
            "span_us": median(s["us"] for s in samples) if samples else None,
            "span_rounds": (min(round_means), max(round_means)) if round_means else None,
            "span_samples": len(samples),
        })
    return rows


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def seed_tables(run: Run) -> list[doc.Block]:
    """The seed's layout: one row per operation and shape, the libraries and the hand-written layouts as columns."""
    libraries = [name for name in ("cupy", "torch", "triton")]
    kernels = sorted({r["kernel"] for r in run.spans})
    blocks: list[doc.Block] = []
    for view, key in (("Kernel time", "kernel_us"), ("Span", "span_us")):
        rows = []
        for kernel in kernels:
            by_shape: dict[str, dict[str, float | None]] = {}
            for row in two_view_rows(run, kernel):
                by_shape.setdefault(row["shape"], {})[row["layout"]] = row[key]
            for shape, values in by_shape.items():
                written = [f"{layout} {_us(value)}" for layout, value in values.items() if layout not in libraries]
                rows.append([f"{kernel} {shape}", *(_us(values.get(name)) for name in libraries), "; ".join(written)])
        blocks.append(doc.Paragraph(f"{view} (median, us), as the seed tabulates it:"))
        blocks.append(doc.Table(["Operation and shape", *libraries, "Hand-written layouts"], rows))
    return blocks


def section_two_views(run: Run) -> doc.Section | None:
    """Seed 000's tables: kernel time and span side by side, per operation, and why they differ."""
    if not run.spans:
        return None
    blocks: list[doc.Block] = [doc.Paragraph(
        "Kernel time is the per-call time inside a CUDA-graph replay, or over back-to-back calls between two events "
        "where the call cannot be captured: launch overhead is amortised or hidden behind the previous call. The span "
        "is one warmed call between two events, synchronised after every call, so it also holds the launch latency, "
        "the host's submission of every kernel a library call enqueues, and the gaps between them. Spans are pooled "
        "over every round of every repeat; the range is that of the round means (the seed's whiskers), not a "
        "confidence interval. Both are medians in microseconds.")]
    blocks += seed_tables(run)
    excess = []
    for kernel in sorted({r["kernel"] for r in run.spans}):
        rows = two_view_rows(run, kernel)
        table_rows = []
        for row in rows:
            ratio = (row["span_us"] / row["kernel_us"]) if row["span_us"] and row["kernel_us"] else None
            if ratio is not None:
                excess.append((row["span_us"] - row["kernel_us"], ratio, f"{kernel} {row['shape']} {row['layout']}",
                               row["kernel_us"]))
            rounds = row["span_rounds"]
            table_rows.append([row["shape"], row["layout"], _us(row["kernel_us"]), _us(row["span_us"]),
                               f"{rounds[0]:.3f} to {rounds[1]:.3f}" if rounds else "n/a",
                               f"{ratio:.2f}" if ratio is not None else "n/a"])
        blocks.append(doc.Paragraph(f"{kernel}:"))
        blocks.append(doc.Table(["Shape", "Layout", "Kernel time", "Span", "Span round means", "Span / kernel time"],
                                table_rows))
    if excess:
        gaps = sorted(e[0] for e in excess)
        short = [e for e in excess if e[3] < 20]
        long = [e for e in excess if e[3] >= 200]
        text = (f"Across {len(excess)} configurations the span exceeds kernel time by a median of "
                f"{gaps[len(gaps) // 2]:.2f} us (from {gaps[0]:.2f} to {gaps[-1]:.2f} us).")
        if short:
            text += (f" For the {len(short)} calls under 20 us of kernel time the span is "
                     f"{min(e[1] for e in short):.2f}x to {max(e[1] for e in short):.2f}x the kernel time:"
                     " there the fixed cost per call dominates.")
        if long:
            text += (f" For the {len(long)} calls of 200 us or more the ratio is "
                     f"{min(e[1] for e in long):.2f}x to {max(e[1] for e in long):.2f}x.")
        largest = max(excess, key=lambda e: e[0])
        text += f" The largest gap is {largest[2]} ({largest[0]:.2f} us)."
        blocks.append(doc.Paragraph(text))
    return doc.Section("Kernel time and span", blocks)


def section_timings(run: Run, figures: dict[str, doc.Figure]) -> list[doc.Section]:
    sections = [doc.Section("Timings", [doc.Paragraph(
        "Median per-launch time in microseconds with the minimum and maximum sample, per repeat.")])]
    table = run.table
    for kernel in run.kernels:
        rows_k = table[table["kernel"] == kernel]
        repeats = sorted(rows_k["repeat"].unique())
        rows = []
        for (shape, layout), group in sorted(rows_k.groupby(["shape", "layout"]),
                                             key=lambda item: (natural_key(item[0][0]), natural_key(item[0][1]))):
            cells = {int(r["repeat"]): f"{r['median_us']:.3f} [{r['min_us']:.3f}, {r['max_us']:.3f}]"
                     for _, r in group.iterrows()}
            rows.append([shape, layout] + [cells.get(int(r), "missing") for r in repeats])
        blocks: list[doc.Block] = [figures[kernel]] if kernel in figures else []
        blocks.append(doc.Table(["Shape", "Layout"] + [f"rep{r} median [min, max]" for r in repeats], rows))
        blocks.append(doc.Paragraph(
            "Achieved rates from the median of all repeats' samples, using the bytes and FLOPs the spec counts "
            "(compulsory traffic, not measured traffic). Where those bytes fit in the L2 cache the environment "
            "records, the buffers stay cache-resident between calls, so GB/s there says nothing about DRAM and can "
            "exceed its bandwidth:"))
        roof = ["Bound", "Of its ceiling", "Flags"] if run.ceiling else []
        blocks.append(doc.Table(["Shape", "Layout", "Median (us)", "GB/s", "GFLOP/s", "Bytes fit in L2", *roof],
                                throughput_rows(run, kernel)))
        blocks.append(doc.Paragraph("Resources of the compiled kernel, read from the function and the launch:"))
        blocks.append(doc.Table(
            ["Layout", "Registers per thread", "Static shared (bytes)", "Dynamic shared (bytes)", "Local memory (bytes)",
             "Max threads per block", "Block"], resource_rows(run, kernel)))
        libraries = library_rows(run, kernel)
        if libraries:
            blocks.append(doc.Paragraph("Library baselines (their kernels are the library's: no resources are read):"))
            blocks.append(doc.Table(["Layout", "Package", "Version", "Call", "Kernel time taken by"], libraries))
        blocks.append(doc.Paragraph(
            "Faster layout per shape; the margin is the runner-up's median divided by the winner's:"))
        blocks.append(doc.Table(
            ["Shape", "Faster layout per repeat (margin)", "Same in every repeat"],
            [[f["shape"], ", ".join(f"rep{r}: {w} ({m:.2f}x)" + above_ceiling(run, kernel, f["shape"], w, r)
                                    for r, w, m in f["winners"]), "yes" if f["agree"] else "no"]
             for f in faster_layouts(table, kernel)]))
        sections.append(doc.Section(kernel, blocks, level=3))
    return sections


def target_roofline(run: Run, record: dict[str, Any]) -> dict[str, Any]:
    """One timed target's median against the run's own ceilings."""
    return ceilings.roofline(record["bytes_moved"], record["flops"], median(record["samples_us"]), run.ceiling)


def above_ceiling(run: Run, kernel: str, shape: str, layout: str, repeat: int) -> str:
    """' (above ceiling: not a win)' when that winner's timing beats the run's own ceiling."""
    for record in run.timings:
        if (record["kernel"], record["shape"], record["layout"], record["repeat"]) == (kernel, shape, layout, repeat):
            return " (above ceiling: not a win)" if target_roofline(run, record)["impossible"] else ""
    return ""


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


def section_hypotheses(run: Run) -> doc.Section:
    hypotheses = run.config.get("hypotheses", [])
    if not hypotheses:
        return doc.Section("Hypotheses", [doc.Paragraph("The config states none.")])
    rows = []
    for hypothesis in hypotheses:
        for verdict in hypothesis_verdicts(run.table, hypothesis):
            rows.append((f"\"{hypothesis['statement']}\" ({hypothesis['kernel']}: {hypothesis['faster']} faster than "
                         f"{hypothesis['slower']})", f"rep{verdict['repeat']}",
                         "holds" if verdict["holds"] else "fails",
                         "; ".join(verdict["counter_examples"]) or f"none in {verdict['shapes']} shapes"))
    return doc.Section("Hypotheses", [doc.Table(("Hypothesis", "Repeat", "Verdict", "Counter-examples"), rows)])


def section_ceilings(run: Run) -> doc.Section | None:
    """The run's own limits, measured before any kernel, and what they say about the timings."""
    if not run.ceilings:
        return None
    rows = []
    for kind, record in sorted(run.ceilings.items()):
        median_us = median(record["samples_us"])
        value = {"copy": f"{run.ceiling.get('copy_gb_s', 0):.1f} GB/s", "gemm": f"{run.ceiling.get('gemm_gflop_s', 0):.1f} GFLOP/s",
                 "floor": f"{median_us:.3f} us per launch"}[kind]
        rows.append([kind, record["what"], f"{median_us:.3f}", value, method_used(record)])
    blocks: list[doc.Block] = [
        doc.Paragraph("Measured in this run, on this GPU, with the method every target uses. Every timing is divided by "
                      "the ceiling that bounds it (memory when the spec's FLOPs per byte lie below the ridge point "
                      "GEMM rate / copy rate, else arithmetic); above 1 is impossible for data in DRAM: more than "
                      f"{ceilings.CEILING_TOLERANCE:.0%} above is flagged, never counted as a win, and up to that is "
                      "at the ceiling (the ceiling is a measurement too). Each ceiling is the fastest of the ways "
                      "listed below, so a weak way of copying cannot set it. The floor is the cost of launching nothing: timings within 3x of it "
                      "measure the harness as much as the kernel."),
        doc.Table(["Ceiling", "What", "Median (us)", "Rate", "Taken by"], rows),
    ]
    for kind, label, work, unit in (("copy", "Copy", "bytes", "GB/s"), ("gemm", "GEMM", "flops", "GFLOP/s")):
        record = run.ceilings.get(kind, {})
        if "variants" in record:
            blocks.append(doc.Paragraph(f"{label} variants: " + "; ".join(
                f"{name} {record[work] / (median(v['samples_us']) * 1e-6) / 1e9:.1f} {unit}"
                for name, v in sorted(record["variants"].items())) + f" (the ceiling is the fastest, {record['best']})."))
    if "copy_gb_s" in run.ceiling and "gemm_gflop_s" in run.ceiling:
        blocks.append(doc.Paragraph(f"Ridge point: {run.ceiling['gemm_gflop_s'] / run.ceiling['copy_gb_s']:.2f} FLOPs per byte."))
    flagged, largest = [], {}
    for record in run.timings:
        verdict = target_roofline(run, record)
        if verdict["impossible"]:
            flagged.append(f"{_target(record)} ({verdict['fraction']:.2f} of the {verdict['bound']} ceiling)")
        if verdict["bound"] == "memory":
            key = (record["kernel"], record["layout"])
            shape_bytes = record["bytes_moved"]
            if key not in largest or shape_bytes > largest[key][0]:
                largest[key] = (shape_bytes, record["shape"], [])
            if largest[key][1] == record["shape"]:
                largest[key][2].append(verdict["fraction"])
    if flagged:
        blocks.append(doc.Paragraph(f"Above their ceiling ({len(flagged)} timed targets): " + "; ".join(flagged) + "."))
    if largest:
        blocks.append(doc.Paragraph("Memory-bound layouts at their largest shape, as a fraction of the measured copy "
                                    "bandwidth (median over repeats):"))
        blocks.append(doc.Table(["Kernel", "Layout", "Shape", "Fraction of copy bandwidth"], [
            [kernel, layout, shape, f"{sorted(fractions)[len(fractions) // 2]:.2f}"]
            for (kernel, layout), (_, shape, fractions) in sorted(largest.items())]))
    return doc.Section("Ceilings and roofline", blocks)


def disturbed_targets(records: list[dict[str, Any]]) -> list[str]:
    """Targets with samples a throttle reason or a low SM clock touched, with the count."""
    return [f"{_target(r)}: {len(r['disturbed_samples'])} of {len(r['samples_us'])} samples"
            + (f" ({', '.join(sorted({x for t in r['sample_tags'] for x in t.get('reasons') or []}))})"
               if any(t.get("reasons") for t in r["sample_tags"]) else " (low SM clock)")
            for r in records if r.get("disturbed_samples")]


def section_clocks(run: Run, figure: doc.Figure | None) -> doc.Section | None:
    """What the background NVML sampler saw while the samples were taken."""
    sampled = [r for r in run.timings + run.cold if r.get("clock_trace")]
    if not sampled:
        return None
    settings = sampled[0]["sampler"]
    points = sum(len(r["clock_trace"]) for r in sampled)
    clocks = [p["sm_clock_mhz"] for r in sampled for p in r["clock_trace"] if isinstance(p["sm_clock_mhz"], (int, float))]
    reasons = sorted({x for r in sampled for p in r["clock_trace"] if isinstance(p["reasons"], list) for x in p["reasons"]})
    blocks: list[doc.Block] = [figure] if figure else []
    blocks.append(doc.Paragraph(
        f"NVML read every {settings['interval_ms']:g} ms on a background thread during the samples of "
        f"{len(sampled)} timed targets ({points} readings; SM clock {min(clocks):g} to {max(clocks):g} MHz; reasons seen: "
        f"{', '.join(reasons) or 'none'}). A sample is disturbed when a reading within one interval of it showed a "
        f"throttle reason ({', '.join(sorted(sampler.THROTTLE_REASONS))}) or an SM clock below "
        f"{settings['min_sm_clock_fraction']:g} of the maximum."))
    affected = disturbed_targets(sampled)
    blocks.append(doc.Bullets(affected) if affected else doc.Paragraph("No sample was disturbed."))
    waits = [r["method_used"]["clock_wait"] for r in sampled if r["method_used"].get("clock_wait", {}).get("enabled")]
    if waits:
        blocks.append(doc.Paragraph(
            f"Waiting for the clock was on: {len(waits)} targets waited {sum(w['waited_s'] for w in waits):.3f} s in all; "
            f"{sum(1 for w in waits if w['ready'] is False)} gave up at the timeout."))
    return doc.Section("Clocks during timing", blocks)


def noise_rows(run: Run) -> list[list[str]]:
    """Per configuration: spread inside each process, and between the processes' medians (both relative)."""
    rows = []
    for (kernel, shape, layout), group in sorted(run.table.groupby(["kernel", "shape", "layout"]),
                                                 key=lambda i: (i[0][0], natural_key(i[0][1]), natural_key(i[0][2]))):
        within = float(((group["max_us"] - group["min_us"]) / group["median_us"]).median())
        medians = group["median_us"]
        between = float((medians.max() - medians.min()) / medians.mean()) if len(group) > 1 else float("nan")
        rows.append([kernel, shape, layout, f"{100 * within:.2f}%",
                     "n/a" if between != between else f"{100 * between:.2f}%",
                     "between" if between > within else "within"])
    return rows


def section_noise(run: Run) -> doc.Section | None:
    rows = noise_rows(run)
    if not rows:
        return None
    larger = sum(1 for r in rows if r[-1] == "between")
    return doc.Section("Noise: within and between processes", [
        doc.Paragraph("Within: (max - min) / median of one process's samples, the median over repeats. Between: the "
                      "range of the repeats' medians over their mean. Where between exceeds within, a second process "
                      f"tells more than more samples would: {larger} of {len(rows)} configurations."),
        doc.Table(["Kernel", "Shape", "Layout", "Within a process", "Between processes", "Larger"], rows)])


def section_placements(run: Run) -> doc.Section | None:
    """Per timed target with more than one placement: each placement's median and their range."""
    from kernelkit.stats import DIFF_THRESHOLD, placement_medians, relative_range

    placed = [r for r in run.timings + run.cold if len(r.get("placements", [])) > 1]
    if not placed:
        return None
    rows = []
    for record in sorted(placed, key=lambda r: (r["kernel"], natural_key(r["shape"]), natural_key(r["layout"]),
                                                r["method_used"].get("cache", "warm"), r["repeat"])):
        medians = placement_medians(record["samples_us"], record["sample_placement"])
        spread = relative_range(medians)
        rows.append([record["kernel"], record["shape"], record["layout"], record["method_used"].get("cache", "warm"),
                     str(record["repeat"]), ", ".join(f"{m:.3f}" for m in medians), f"{100 * spread:.2f}%",
                     "depends on placement" if spread > DIFF_THRESHOLD else ""])
    sensitive = sorted({" ".join(r[:3]) for r in rows if r[-1]})
    count = len(placed[0]["placements"])
    return doc.Section("Buffer placement", [
        doc.Paragraph(
            f"Every timed target sampled {count} placements in its process: fresh copies of its buffers, placement i "
            "taken after i MiB more of the memory pool, so that they land at other addresses (each file records them). "
            "A fresh process puts its first buffers in the same kind of place every time, so repeats alone cannot show "
            "how much the time depends on where the data lies. Range: slowest placement median over fastest, minus "
            f"one; above the diff threshold ({DIFF_THRESHOLD:.0%}) the target is marked. The target's median pools "
            f"every placement's samples. Marked: {len(sensitive)} of {len({' '.join(r[:3]) for r in rows})} "
            "configurations" + (f" ({'; '.join(sensitive)})." if sensitive else ".")),
        doc.Table(["Kernel", "Shape", "Layout", "Cache", "Repeat", "Median per placement (us)", "Range", ""], rows)])


def section_cold(run: Run) -> doc.Section | None:
    """Warm and cold cache side by side: the same configuration with L2 evicted before every sample."""
    if not run.cold:
        return None
    pooled: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for cache, records in (("warm", run.timings), ("cold", run.cold)):
        for record in records:
            entry = pooled.setdefault((record["kernel"], record["shape"], record["layout"]), {"warm": [], "cold": []})
            entry[cache] += record["samples_us"]
    rows = []
    for (kernel, shape, layout), entry in sorted(pooled.items(), key=lambda i: (i[0][0], natural_key(i[0][1]), i[0][2])):
        warm = median(entry["warm"]) if entry["warm"] else None
        cold = median(entry["cold"]) if entry["cold"] else None
        rows.append([kernel, shape, layout, _us(warm), _us(cold),
                     f"{cold / warm:.2f}" if warm and cold else "n/a"])
    flush = next((r["method_used"].get("flush") for r in run.cold if r["method_used"].get("flush")), {})
    return doc.Section("Cold and warm cache", [
        doc.Paragraph("Cold: before every sample the kit writes a buffer of "
                      f"{flush.get('flush_bytes', 'n/a')} bytes (twice the L2 size the device reports, "
                      f"{flush.get('l2_bytes', 'n/a')} bytes) outside the timed interval, and reset persisting L2 lines "
                      f"({flush.get('persisting_l2_reset', 'n/a')}); each cold sample is a single call, so launch "
                      "overhead is not amortised as in the warm view. Medians in microseconds, pooled over repeats."),
        doc.Table(["Kernel", "Shape", "Layout", "Warm", "Cold", "Cold / warm"], rows)])


def section_tools(run: Run) -> list[doc.Section]:
    """compute-sanitizer and Nsight Compute results, where the config asked for them."""
    sections = []
    if run.sanitizer:
        rows = []
        for record in run.sanitizer:
            if "skipped" in record:
                rows.append([record["kernel"], record["layout"], "skipped", "skipped", record["skipped"]])
                continue
            # Counted from the tool's own output kept in the file, so a later reading of the
            # summary line (racecheck words it differently from memcheck) applies to old runs too.
            counts = {t: sanitizer_errors(record["tools"][t]["tail"]) for t in ("memcheck", "racecheck")}
            rows.append([record["kernel"], record["layout"],
                         *(str(counts[t]) if counts[t] is not None else "no summary line" for t in counts),
                         "; ".join(f"{t} exit {record['tools'][t]['exit_code']}" for t in counts
                                   if record["tools"][t]["exit_code"] != 0)])
        subset = all("cases" in record for record in run.sanitizer if "skipped" not in record)
        over = ("the cases each record lists (KernelSpec.sanitizer_shapes_used: a few correctness shapes, pattern normal)"
                " of each hand-written layout, gating its timing" if subset else
                "every correctness case of each hand-written layout")
        sections.append(doc.Section("Sanitizer", [
            doc.Paragraph(f"compute-sanitizer over {over} (the kit's own "
                          "correctness command run under the tool): memcheck's ERROR SUMMARY count, and racecheck's "
                          "errors plus warnings from its RACECHECK SUMMARY line, read from the output kept in the file."),
            doc.Table(["Kernel", "Layout", "memcheck errors", "racecheck hazards", "Note"], rows)]))
    else:
        runs = sorted({r.get("determinism_runs", 1) for r in run.correctness})
        repeated = (f"; each correctness case was launched {', '.join(map(str, runs))} times and had to repeat its bits"
                    if runs != [1] else "")
        sections.append(doc.Section("Sanitizer", [doc.Paragraph(
            "compute-sanitizer did not run in this run (config `sanitize` false or older kit): races and out-of-bounds "
            f"accesses were not checked by a tool, only through the correctness cases{repeated}.")]))
    if run.profiles:
        medians: dict[tuple[str, str, str], list[float]] = {}
        for record in run.timings:
            medians.setdefault((record["kernel"], record["shape"], record["layout"]), []).extend(record["samples_us"])
        rows = []
        for record in sorted(run.profiles, key=lambda r: (r["kernel"], natural_key(r["shape"]), r["layout"])):
            key = (record["kernel"], record["shape"], record["layout"])
            timed = _us(median(medians[key])) if key in medians else "n/a"
            if "skipped" in record:
                rows.append([*key, timed, "", "", "", "", f"skipped: {record['skipped']}"])
                continue
            launches = record["launches"]

            def total(name: str) -> str:
                values = [x[name] for x in launches if isinstance(x.get(name), float)]
                return f"{sum(values):.0f}" if values else "n/a"

            def weighted(name: str) -> str:
                pairs = [(x[name], x.get("duration_ns", 1.0)) for x in launches if isinstance(x.get(name), float)]
                weight = sum(w for _, w in pairs)
                return f"{sum(v * w for v, w in pairs) / weight:.1f}" if pairs and weight else "n/a"

            rows.append([*key, timed, weighted("dram_throughput_pct_of_peak"), weighted("achieved_occupancy_pct"),
                         total("instructions_executed"), total("shared_bank_conflicts"),
                         f"{len(launches)} kernel launch(es)"])
        sections.append(doc.Section("Counters (Nsight Compute)", [
            doc.Paragraph("One warmed call per configuration under ncu --clock-control none (the clocks as the timing "
                          "saw them); percentages are duration-weighted over the kernels the call launched, counts "
                          "are summed. The median is the kernel time of the timing targets, not ncu's replayed duration."),
            doc.Table(["Kernel", "Shape", "Layout", "Median (us)", "DRAM % of peak", "Achieved occupancy %",
                       "Instructions", "Shared bank conflicts", "Note"], rows)]))
    return sections


def caveats(run: Run) -> list[str]:
    """What a reader must know before trusting the numbers, derived from the files only."""
    found = []
    locked = run.environment["clocks_locked"]
    if locked is not True:
        found.append("Clocks were not locked" if locked is False else f"Whether clocks were locked is unknown ({locked})")
    changed = [f"{_target(r)} ({r['nvml_before']['sm_clock_mhz']} -> {r['nvml_after']['sm_clock_mhz']} MHz)"
               for r in run.timings if r["nvml_before"].get("sm_clock_mhz") != r["nvml_after"].get("sm_clock_mhz")]
    if changed:
        found.append(f"SM clock differed before and after {len(changed)} timed targets: " + "; ".join(changed))
    throttled: dict[str, list[str]] = {}
    for record, when, snap in _snapshots(run):
        reasons = snap.get("clock_event_reasons")
        for reason in reasons if isinstance(reasons, list) else []:
            throttled.setdefault(reason, []).append(f"{_target(record)} ({when})")
    for reason, where in sorted(throttled.items()):
        found.append(f"Clock-event reason {reason} seen in {len(where)} snapshots: " + "; ".join(where))
    table = run.table
    for (kernel, shape, layout), group in table.groupby(["kernel", "shape", "layout"]):
        if len(group) < 2:
            continue
        spread = float((group["max_us"] - group["min_us"]).max())
        gap = float(group["median_us"].max() - group["median_us"].min())
        if gap > spread:
            found.append(f"Repeats of {kernel} {shape} {layout} differ by more than the spread inside either: medians "
                         + ", ".join(f"{m:.3f}" for m in group["median_us"]) + f" us (gap {gap:.3f}, widest spread "
                         f"{spread:.3f})")
    from kernelkit.config import timing_plan

    plan = [t.key[:4] for t in timing_plan(run.config) if t.cache == "warm"]
    executed = [(r["kernel"], r["shape"], r["layout"], r["repeat"]) for r in sorted(run.timings, key=lambda r: r["started_utc"])]
    if len(executed) == len(plan) and executed != plan:
        moved = sum(a != b for a, b in zip(executed, plan))
        runs_of_kernels = 1 + sum(a[0] != b[0] for a, b in zip(executed, executed[1:]))
        found.append(f"Timed targets did not run in the planned shuffled order ({moved} of {len(plan)} out of place; "
                     f"{runs_of_kernels} stretches of one kernel): drift over the run can favour the kernels timed at "
                     "the same time")
    skipped = sorted({f"{r['kernel']} {r['layout']} ({r['skipped']})" for r in run.skipped})
    if skipped:
        found.append("Layouts skipped because their library is missing here: " + "; ".join(skipped))
    asked = run.config["timing"]["samples"]
    short = [f"{_target(r)} ({len(r['samples_us'])})" for r in run.timings if len(r["samples_us"]) < asked]
    if short:
        found.append(f"Fewer samples than the config asked ({asked}): " + "; ".join(short))
    return found


def section_caveats(run: Run) -> doc.Section:
    items = caveats(run)
    return doc.Section("Caveats", [doc.Bullets(items) if items else doc.Paragraph("None found in the recorded files.")])


def build(run_dir: Path, figure_dir: Path | None = None) -> tuple[str, list[doc.Section]]:
    """The report's title and sections; figures are read from `figure_dir/<kernel>.svg` when present."""
    run = Run(run_dir)
    figures = {}
    for kernel in run.kernels:
        path = figure_dir / f"{kernel}.svg" if figure_dir else None
        if path and path.exists():
            figures[kernel] = doc.Figure(path.read_text(encoding="utf-8"), f"{figure_dir.name}/{kernel}.svg",
                                         f"{kernel}: every sample per shape, layout and repeat")
    intro = doc.Section("About this report", [doc.Paragraph(
        f"Generated from results/{run.name}/ only. Every timing is recomputed from the raw samples in "
        "timing/<kernel>/<shape>/<layout>/rep<n>.json.")])
    clock_path = figure_dir / "clocks.svg" if figure_dir else None
    clock_figure = (doc.Figure(clock_path.read_text(encoding="utf-8"), f"{figure_dir.name}/clocks.svg",
                               "SM clock of every NVML reading during the timed samples")
                    if clock_path and clock_path.exists() else None)
    optional = [section_two_views(run), section_cold(run), section_ceilings(run), section_clocks(run, clock_figure),
                section_noise(run), section_placements(run), *section_tools(run)]
    sections = [intro, section_method(run), section_environment(run), section_correctness(run), section_controls(run),
                *section_timings(run, figures), *[section for section in optional if section], section_hypotheses(run),
                section_caveats(run)]
    return f"kernelkit report: run {run.name}", sections


def render_markdown(run_dir: Path, figure_dir: Path | None = None) -> str:
    return doc.render_markdown(*build(run_dir, figure_dir))


def render_html(run_dir: Path, figure_dir: Path | None = None) -> str:
    return doc.render_html(*build(run_dir, figure_dir))
