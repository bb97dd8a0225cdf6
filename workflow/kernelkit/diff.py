"""Compare two runs: what changed in the setup, and which timings changed beyond noise.

The unit of comparison is a configuration (kernel, shape, layout) with all its repeats:
repeats are separate processes and exist to show between-process noise, so the interval
for B/A resamples processes as well as samples (kernelkit.stats.ratio_interval). Intervals
are Bonferroni-corrected so that the whole table, not each row, has the stated confidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit.layout import run_result_files
from kernelkit.records import read_json
from kernelkit.stats import DIFF_CONFIDENCE, DIFF_THRESHOLD, RatioInterval, process_order, ratio_interval, verdict
from kernelkit.summary import natural_key

ENVIRONMENT_FIELDS = [
    ("GPU model", ("cuda", "device_name")),
    ("GPU UUID", ("gpu", "uuid")),
    ("Driver", ("gpu", "driver_version")),
    ("CUDA driver API", ("cuda", "cuda_driver_version")),
    ("CUDA runtime", ("cuda", "cuda_runtime_version")),
    ("NVRTC", ("cuda", "nvrtc_version")),
    ("CuPy", ("cuda", "cupy_version")),
    ("NumPy", ("host", "numpy_version")),
    ("Max SM clock (MHz)", ("gpu", "sm_clock_max_mhz")),
    ("Application SM clock (MHz)", ("gpu", "sm_clock_application_mhz")),
    ("Application memory clock (MHz)", ("gpu", "memory_clock_application_mhz")),
    ("Clocks locked", ("clocks_locked",)),
    ("Power limit (W)", ("gpu", "power_limit_w")),
    ("ECC", ("gpu", "ecc_mode_current")),
    ("MIG", ("gpu", "mig_mode_current")),
]


@dataclass
class RunFiles:
    dir: Path
    environment: dict[str, Any]
    correctness: dict[tuple[str, str], dict[str, Any]]
    controls: dict[tuple[str, str], dict[str, Any]]
    timings: dict[tuple[str, str, str, int], dict[str, Any]]


def load_run(path: str | Path) -> RunFiles:
    """Every result file of a run directory; KitError naming the directory or file that is unusable."""
    root = Path(path)
    if not root.is_dir():
        raise KitError(f"run directory {root} does not exist")
    timings = {}
    for file in run_result_files(root, "timing"):
        record = read_json(file)
        if "skipped" in record:  # a library missing on that machine: shows up as "only in" the other run
            continue
        try:
            timings[(record["kernel"], record["shape"], record["layout"], int(record["repeat"]))] = record
            if not record["samples_us"]:
                raise KitError(f"timing file {file} holds no samples")
        except (KeyError, TypeError, ValueError) as error:
            raise KitError(f"timing file {file} lacks a field the diff needs ({error})") from None
    if not timings:
        raise KitError(f"run directory {root} holds no timing files (timing/<kernel>/<shape>/<layout>/rep<n>.json)")
    return RunFiles(
        dir=root,
        environment=read_json(root / "environment.json"),
        correctness={(r["kernel"], layout): r for r in map(read_json, run_result_files(root, "correctness"))
                     for layout in r.get("layouts", [])},
        controls={(r["kernel"], r["control"]): r for r in map(read_json, run_result_files(root, "controls"))},
        timings=timings,
    )


def _lookup(record: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        record = record.get(key, "not recorded") if isinstance(record, dict) else "not recorded"
    return record


def _sm_clock_range(run: RunFiles) -> str:
    seen = [snap["sm_clock_mhz"] for r in run.timings.values() for snap in (r["nvml_before"], r["nvml_after"])
            if isinstance(snap.get("sm_clock_mhz"), (int, float))]
    return f"{min(seen)}-{max(seen)}" if seen else "not recorded"


@dataclass
class Comparison:
    kernel: str
    shape: str
    layout: str
    median_a: float
    median_b: float
    repeats_a: int
    repeats_b: int
    interval: RatioInterval
    verdict: str


@dataclass
class DiffResult:
    a: RunFiles
    b: RunFiles
    threshold: float
    confidence: float
    environment: list[tuple[str, Any, Any]] = field(default_factory=list)
    source_changes: list[tuple[str, str]] = field(default_factory=list)
    outcome_changes: list[tuple[str, str, str]] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    def count(self, name: str) -> int:
        return sum(c.verdict == name for c in self.comparisons)


def _config_key(key: tuple[str, str, str, int]) -> tuple[str, str, str]:
    return key[:3]


def _sort_key(key: tuple) -> tuple:
    return tuple(natural_key(str(part)) for part in key)


def compare(
    a: RunFiles, b: RunFiles, threshold: float = DIFF_THRESHOLD, confidence: float = DIFF_CONFIDENCE, seed: int = 0
) -> DiffResult:
    result = DiffResult(a, b, threshold, confidence)
    for label, path in ENVIRONMENT_FIELDS:
        value_a, value_b = _lookup(a.environment, path), _lookup(b.environment, path)
        if value_a != value_b:
            result.environment.append((label, value_a, value_b))
    range_a, range_b = _sm_clock_range(a), _sm_clock_range(b)
    if range_a != range_b:
        result.environment.append(("SM clock seen around timed targets (MHz)", range_a, range_b))

    shared = sorted(set(a.timings) & set(b.timings), key=_sort_key)
    changed_configs: dict[tuple[str, str, str], dict[str, None]] = {}  # dict as an ordered set
    for key in shared:
        ra, rb = a.timings[key], b.timings[key]
        for field_name, label, short in (("source_sha256", "source", 12), ("compile_options", "compile options", None),
                                         ("method", "method", None)):
            if ra[field_name] != rb[field_name]:
                before, after = (str(r[field_name])[:short] for r in (ra, rb))
                changed_configs.setdefault(_config_key(key), {})[f"{label} {before} -> {after}"] = None
    result.source_changes = [(" ".join(k), "; ".join(v)) for k, v in changed_configs.items()]

    for key in sorted(set(a.correctness) | set(b.correctness), key=_sort_key):
        pa, pb = (side.correctness.get(key, {}).get("passed", "missing") for side in (a, b))
        if pa != pb:
            result.outcome_changes.append((f"correctness {' '.join(key)}", str(pa), str(pb)))
    for key in sorted(set(a.controls) | set(b.controls), key=_sort_key):
        ca, cb = (side.controls.get(key, {}).get("caught", "missing") for side in (a, b))
        if ca != cb:
            result.outcome_changes.append((f"negative control {' '.join(key)} caught", str(ca), str(cb)))

    name = lambda key: f"{key[0]} {key[1]} {key[2]} rep{key[3]}"  # noqa: E731
    result.only_in_a = [name(k) for k in sorted(set(a.timings) - set(b.timings), key=_sort_key)]
    result.only_in_b = [name(k) for k in sorted(set(b.timings) - set(a.timings), key=_sort_key)]

    configs = sorted({_config_key(k) for k in shared}, key=_sort_key)
    corrected = 1.0 - (1.0 - confidence) / max(1, len(configs))
    for config in configs:
        groups_a = [a.timings[k]["samples_us"] for k in sorted(a.timings) if _config_key(k) == config]
        groups_b = [b.timings[k]["samples_us"] for k in sorted(b.timings) if _config_key(k) == config]
        interval = ratio_interval(groups_a, groups_b, confidence=corrected, seed=seed)
        pooled_a = [s for g in groups_a for s in g]
        pooled_b = [s for g in groups_b for s in g]
        result.comparisons.append(Comparison(
            *config, median_a=median(pooled_a), median_b=median(pooled_b), repeats_a=len(groups_a),
            repeats_b=len(groups_b), interval=interval,
            verdict=verdict(interval, threshold, process_order(groups_a, groups_b))))
    return result


def build(result: DiffResult) -> tuple[str, list[doc.Section]]:
    a, b = result.a.dir.name, result.b.dir.name
    m = len(result.comparisons)
    counts = ", ".join(f"{result.count(v)} {v}" for v in ("SAME", "FASTER", "SLOWER", "AMBIGUOUS"))
    sections = [
        doc.Section("Summary", [doc.Paragraph(
            f"A = results/{a}, B = results/{b}. {m} configurations timed in both: {counts}. "
            f"The ratio is B/A of the pooled medians (below 1: B is faster). Its interval is a percentile bootstrap "
            f"that resamples processes (repeats) and then samples inside each, at {result.confidence:.0%} for the whole "
            f"table (Bonferroni: {1 - (1 - result.confidence) / max(1, m):.4%} per row). Verdicts: SAME when the "
            f"interval lies inside 1 +- {result.threshold:g}; SLOWER or FASTER when it lies wholly beyond "
            f"1 +- {result.threshold:g} and every process (repeat) of B is slower, or faster, than every process "
            "of A; AMBIGUOUS otherwise (too wide or too mixed to decide).")]),
        doc.Section("Environment differences", [
            doc.Table(("Field", "A", "B"), result.environment) if result.environment
            else doc.Paragraph("None among GPU, UUID, driver, CUDA, NVRTC, CuPy, NumPy, clocks, power limit, ECC, MIG.")]),
        doc.Section("Kernel source, compile options and method", [
            doc.Table(("Configuration", "Change"), result.source_changes) if result.source_changes
            else doc.Paragraph("Identical source hashes, compile options and timing method for every shared target.")]),
        doc.Section("Correctness and negative-control outcomes", [
            doc.Table(("Check", "A", "B"), result.outcome_changes) if result.outcome_changes
            else doc.Paragraph("No outcome changed.")]),
        doc.Section("Targets in only one run", [doc.Paragraph(
            f"Only in A: {', '.join(result.only_in_a) or 'none'}. Only in B: {', '.join(result.only_in_b) or 'none'}.")]),
        doc.Section("Timings", [doc.Table(
            ("Kernel", "Shape", "Layout", "Median A (us)", "Median B (us)", "B/A", "Interval", "Repeats A/B", "Verdict"),
            [(c.kernel, c.shape, c.layout, f"{c.median_a:.3f}", f"{c.median_b:.3f}", f"{c.interval.ratio:.4f}",
              f"[{c.interval.low:.4f}, {c.interval.high:.4f}]", f"{c.repeats_a}/{c.repeats_b}", c.verdict)
             for c in result.comparisons])]),
    ]
    return f"kernelkit diff: {a} vs {b}", sections
