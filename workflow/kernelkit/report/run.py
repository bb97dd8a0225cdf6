"""The result files of one run, loaded once: `Run` refuses, with one sentence naming the file, every
record whose samples or identifying keys are unusable, so that a section may index a record freely.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any, Iterable

from kernelkit import KitError, sanitizer, stats
from kernelkit import spec as specs
from kernelkit.nvml import is_unavailable
from kernelkit.layout import card_dirs, run_result_files
from kernelkit.records import read_checked, read_run_records, split_skipped
from kernelkit.summary import natural_key, summarize_records

def load(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    """The records of one kind, through the kit's one reader (kernelkit.records.read_checked)."""
    return [record for _, record in read_run_records(run_dir, kind)]


def card_label(record: dict[str, Any]) -> str | None:
    """'GPU <index> (<UUID>)', or None for records from before cards were named."""
    uuid, index = record.get("gpu_uuid"), record.get("gpu_index")
    if not uuid and index is None:
        return None
    return f"GPU {index if index is not None else '?'}" + (f" ({uuid})" if uuid else "")


class Card:
    """One card's ceiling rates, UUID and label (layout.card_dirs): the run's first card, or gpus/<i>/."""

    def __init__(self, directory: Path) -> None:
        environment = read_checked(directory / "environment.json", "environment")
        self.rates = stats.rates({r["kind"]: r for r in load(directory, "ceilings")})
        gpu = environment.get("gpu", {})
        self.uuid = environment.get("gpu_uuid") or (gpu.get("uuid") if isinstance(gpu, dict) else None)
        self.label = card_label({"gpu_uuid": self.uuid, "gpu_index": environment.get("gpu_index")})


class Run:
    """The result files of one run directory, loaded once."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        if not self.dir.is_dir():
            raise KitError(f"run directory {self.dir} does not exist")
        self.name = self.dir.name
        self.config = read_checked(self.dir / "config.json", "config")
        self.environment = read_checked(self.dir / "environment.json", "environment")
        self.correctness = load(self.dir, "correctness")
        self.controls = load(self.dir, "controls")
        self.timings, self.skipped = split_skipped(load(self.dir, "timing"))
        self.spans = load(self.dir, "span")
        self.cold, cold_skipped = split_skipped(load(self.dir, "cold"))
        self.skipped += cold_skipped
        self.ceilings = {r["kind"]: r for r in load(self.dir, "ceilings")}
        self.ceiling = stats.rates(self.ceilings)
        # The first card's records are the two above; a multi-GPU run adds gpus/<i>/ for the others.
        self.cards = [Card(directory) for directory in card_dirs(self.dir)[1:]]
        # One entry per layout, whether the run wrote a record per kernel or, before that, per layout.
        self.sanitizer = [entry for kind in ("sanitizer", "sanitizer_per_layout")
                          for p in run_result_files(self.dir, kind) for entry in sanitizer.per_layout(read_checked(p, "sanitizer"))]
        self.profiles = [read_checked(p, "profile") for p in run_result_files(self.dir, "profile")]
        if not self.timings:
            raise KitError(f"run directory {self.dir} holds no timing files with samples")
        # In natural order (kernel, shape, layout, repeat), which groupby(sort=False) keeps.
        self.table = summarize_records(self.timings)
        self._configs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for record in self.timings:
            self._configs.setdefault((record["kernel"], record["shape"], record["layout"]), []).append(record)
        self._specs: dict[str, specs.KernelSpec | None] = {}
        self._spec_bytes: dict[tuple[str, str], tuple[int, int] | None] = {}

    @property
    def kernels(self) -> list[str]:
        return sorted({record["kernel"] for record in self.timings})

    @property
    def device(self) -> str:
        return str(self.environment.get("cuda", {}).get("device_name", "unknown GPU"))

    @property
    def l2_bytes(self) -> int | None:
        value = self.environment.get("cuda", {}).get("l2_cache_bytes")
        return value if isinstance(value, int) else None

    def spec(self, kernel: str) -> specs.KernelSpec | None:
        """The kernel folder's spec where this checkout has it (byte counts, vector widths), else None."""
        if kernel not in self._specs:
            try:
                self._specs[kernel] = specs.load(kernel)
            except (KitError, ImportError, OSError):
                self._specs[kernel] = None
        return self._specs[kernel]

    def layouts(self, kernel: str) -> list[str]:
        """Layouts in the config's order, then any other timed one."""
        order = list(self.config.get("kernels", {}).get(kernel, {}).get("layouts", []))
        timed = {r["layout"] for r in self.timings if r["kernel"] == kernel}
        return [l for l in order if l in timed] + sorted(timed - set(order), key=natural_key)

    def shapes(self, kernel: str) -> list[str]:
        return sorted({r["shape"] for r in self.timings if r["kernel"] == kernel}, key=natural_key)

    def libraries(self, kernel: str) -> set[str]:
        """Layouts whose timing files name a library: baselines, not hand-written kernels."""
        return {r["layout"] for r in self.timings if r["kernel"] == kernel and "library" in r}

    def records(self, kernel: str, shape: str, layout: str) -> list[dict[str, Any]]:
        return self._configs.get((kernel, shape, layout), [])

    def pooled_median(self, kernel: str, shape: str, layout: str) -> float | None:
        samples = [s for r in self.records(kernel, shape, layout) for s in r["samples_us"]]
        return median(samples) if samples else None

    def repeat_medians(self, kernel: str, shape: str, layout: str) -> dict[int, float]:
        """Each repeat's median of one configuration, by repeat number."""
        return {r["repeat"]: median(r["samples_us"]) for r in self.records(kernel, shape, layout)}

    def repeat_ratios(self, kernel: str, shape: str, top: str, bottom: str) -> list[float]:
        """top / bottom median per repeat, over the repeats both have."""
        a, b = self.repeat_medians(kernel, shape, top), self.repeat_medians(kernel, shape, bottom)
        return [a[n] / b[n] for n in sorted(set(a) & set(b))]

    def medians(self, kernel: str, shape: str) -> dict[str, float]:
        """Pooled median per timed layout at a shape, in the layouts' order."""
        return {layout: m for layout in self.layouts(kernel) if (m := self.pooled_median(kernel, shape, layout))}

    def fastest(self, kernel: str, shape: str) -> tuple[tuple[str, float] | None, tuple[str, float] | None]:
        """The fastest hand-written and the fastest library layout at a shape, each with its pooled median."""
        medians, libraries = self.medians(kernel, shape), self.libraries(kernel)
        def best(names: Iterable[str]) -> tuple[str, float] | None:
            return min(((name, medians[name]) for name in names), key=lambda item: item[1], default=None)
        return best(l for l in medians if l not in libraries), best(l for l in medians if l in libraries)

    def byte_counts(self, record: dict[str, Any]) -> tuple[int, int]:
        """Compulsory and issued bytes of a target: the spec's counts when its folder is here, else the record's.
        The spec's are counted once per (kernel, shape): the sections ask for them hundreds of times."""
        key, spec = (record["kernel"], record["shape"]), self.spec(record["kernel"])
        if spec is not None and key not in self._spec_bytes:
            try:
                shape = spec.parse_shape(record["shape"])
                compulsory = int(spec.bytes_moved(shape))
                self._spec_bytes[key] = compulsory, int(spec.bytes_issued(shape)) if spec.bytes_issued else compulsory
            except (KitError, TypeError, ValueError):
                self._spec_bytes[key] = None
        return self._spec_bytes.get(key) or (int(record["bytes_moved"]), int(record["bytes_moved"]))

    def rates_for(self, records: list[dict[str, Any]]) -> dict[str, float]:
        """The ceilings of the card that timed these records: the card whose UUID they name, else
        the run's own (one-card runs and runs from before cards were named)."""
        uuids = {r.get("gpu_uuid") for r in records}
        return next((card.rates for card in self.cards if uuids == {card.uuid}), self.ceiling)

    def cards_of(self, kernel: str, shape: str) -> list[str]:
        """The cards that timed one shape of a kernel, as the records name them."""
        return sorted({label for r in self.timings if (r["kernel"], r["shape"]) == (kernel, shape)
                       if (label := card_label(r))})

    def mixed_card_shapes(self, kernel: str) -> list[str]:
        """Shapes whose timings come from more than one card: comparing their layouts compares cards."""
        return [shape for shape in self.shapes(kernel) if len(self.cards_of(kernel, shape)) > 1]

    def fits_in_l2(self, working_set: int) -> bool | None:
        return None if self.l2_bytes is None else working_set <= self.l2_bytes


def fmt(value: Any) -> str:
    """A field of a record as the report prints it: "n/a" for None, floats short, lists joined."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:g}"
    return (", ".join(map(str, value)) or "none") if isinstance(value, list) else str(value)


def unavailable_fields(record: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Every field of a nested record that says why it could not be read, by its dotted name."""
    if isinstance(record, dict):
        return [found for key, value in record.items() for found in unavailable_fields(value, f"{prefix}{key}.")]
    return [(prefix.rstrip("."), record)] if is_unavailable(record) else []


def snapshots(run: Run) -> Iterable[tuple[dict[str, Any], str, dict[str, Any]]]:
    for record in run.timings:
        yield record, "before", record["nvml_before"]
        yield record, "after", record["nvml_after"]


def target_name(record: dict[str, Any]) -> str:
    return f"{record['kernel']} {record['shape']} {record['layout']} rep{record['repeat']}"


def method_used(record: dict[str, Any]) -> str:
    """How a file's samples were taken (files from before the fallback existed used graph replay)."""
    used = record.get("method_used", {"name": "cuda_graph_replay",
                                      "launches_per_sample": record["method"]["launches_per_graph"]})
    name = "graph replay" if used["name"] == "cuda_graph_replay" else "back-to-back events"
    return f"{name}, {used['launches_per_sample']} per sample"


def rated_bandwidth_gb_s(run: Run) -> float | None:
    """Rated DRAM bandwidth from the environment record's bus width and memory clock, where it has both."""
    width, clock = run.environment.get("cuda", {}).get("memory_bus_width_bits"), run.environment.get("gpu", {}).get(
        "memory_clock_max_mhz")
    known = isinstance(width, int) and isinstance(clock, (int, float))
    return 2 * clock * 1e6 * width / 8 / 1e9 if known else None  # double data rate
