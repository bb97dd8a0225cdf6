"""Compare two runs, per configuration (kernel, shape, layout) with all its repeats: what changed
in the setup, and which timings changed beyond noise. Repeats show between-process noise, so B/A's
interval resamples processes too, and a side whose repeats all ran in one process claims no change;
intervals are Bonferroni-corrected for the whole table. Rendering is kernelkit.diff_document's."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from kernelkit import KitError
from kernelkit.diff_inputs import RunFiles, card, disturbed_count, load_run, samples_by_process, saw_foreign_work
from kernelkit.stats import (DIFF_CONFIDENCE, DIFF_THRESHOLD, RatioInterval, bonferroni, geometric_mean, process_order,
                             ratio_interval, verdict)
from kernelkit.units import sort_key

__all__ = ["Comparison", "DiffResult", "RunFiles", "compare", "load_run"]

ENVIRONMENT_FIELDS = [
    ("GPU model", ("cuda", "device_name")), ("GPU UUID", ("gpu", "uuid")), ("Driver", ("gpu", "driver_version")),
    ("CUDA driver API", ("cuda", "cuda_driver_version")), ("CUDA runtime", ("cuda", "cuda_runtime_version")),
    ("NVRTC", ("cuda", "nvrtc_version")), ("CuPy", ("cuda", "cupy_version")), ("NumPy", ("host", "numpy_version")),
    ("Max SM clock (MHz)", ("gpu", "sm_clock_max_mhz")), ("Application SM clock (MHz)", ("gpu", "sm_clock_application_mhz")),
    ("Application memory clock (MHz)", ("gpu", "memory_clock_application_mhz")), ("Clocks locked", ("clocks_locked",)),
    ("Power limit (W)", ("gpu", "power_limit_w")), ("ECC", ("gpu", "ecc_mode_current")), ("MIG", ("gpu", "mig_mode_current")),
]
NOT_RECORDED = "not recorded"


def _lookup(record: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        record = record.get(key, NOT_RECORDED) if isinstance(record, dict) else NOT_RECORDED
    return record


def _sm_clock_range(run: RunFiles) -> str:
    seen = [snap["sm_clock_mhz"] for r in run.timings.values()
            for snap in (r.get("nvml_before"), r.get("nvml_after")) if isinstance(snap, dict)
            and isinstance(snap.get("sm_clock_mhz"), (int, float)) and not isinstance(snap["sm_clock_mhz"], bool)]
    return f"{min(seen)}-{max(seen)}" if seen else NOT_RECORDED


@dataclass
class Comparison:
    """One configuration timed in both runs, with its verdict and what qualifies it."""

    kernel: str
    shape: str
    layout: str
    median_a: float
    median_b: float
    repeats_a: int
    repeats_b: int
    interval: RatioInterval
    verdict: str
    threshold: float = DIFF_THRESHOLD
    foreign_work: list[str] = field(default_factory=list)  # "A rep1", ... : processes that saw foreign GPU work
    disturbed: list[str] = field(default_factory=list)  # "A rep1: 3 of 15", ... : throttled or low-clock samples
    cards: tuple[list[str], list[str]] | None = None  # the cards of A and of B, when they differ
    card_spread: float | None = None  # how far apart those cards are (card_spread), added to the threshold
    # The sides whose repeats all ran in one process, and the FASTER or SLOWER not claimed for it.
    one_process: list[str] = field(default_factory=list)
    unclaimed: str | None = None

    @property
    def change(self) -> float:
        """B/A - 1, signed: +0.017 is 1.7% slower."""
        return self.interval.ratio - 1.0

    @property
    def below_threshold(self) -> bool:
        """SAME, yet the interval excludes 1: a measured change smaller than the threshold tolerates."""
        return self.verdict == "SAME" and (self.interval.low > 1.0 or self.interval.high < 1.0)

    @property
    def label(self) -> str:
        """The verdict with what qualifies it, e.g. "SAME (+1.7%, below the 2% threshold)"."""
        text = self.verdict
        if self.below_threshold:
            text += f" ({self.change:+.1%}, below the {round(self.threshold * 100, 1):g}% threshold)"
        if self.unclaimed:
            text += f" (would be {self.unclaimed}, but {self.one_process_text})"
        if self.foreign_work:
            text += f"; {', '.join(self.foreign_work)} saw foreign GPU work"
        elif self.disturbed and self.verdict == "AMBIGUOUS":
            text += f"; disturbed samples in {', '.join(d.split(':')[0] for d in self.disturbed)}"
        if self.cards:
            text += "; compares different cards"
            if self.card_spread is not None:
                text += f" ({self.card_spread:.1%} apart on the kit's ceilings, added to the threshold)"
        return text

    @property
    def one_process_text(self) -> str:
        """E.g. "A's 2 repeats ran in one process"."""
        counts = {"A": self.repeats_a, "B": self.repeats_b}
        return " and ".join(f"{side}'s {counts[side]} repeats ran in one process" for side in self.one_process)

    @property
    def notes(self) -> list[str]:
        notes: list[str] = []
        if self.foreign_work:
            notes.append(f"{', '.join(self.foreign_work)} saw foreign GPU work")
        if self.one_process:
            notes.append(self.one_process_text)
        if self.disturbed:
            notes.append("disturbed samples (throttled, low clock or foreign work): " + ", ".join(self.disturbed))
        if self.cards:
            notes.append(f"A ran on {', '.join(self.cards[0])}, B on {', '.join(self.cards[1])}")
        return notes


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

    @property
    def gpu_changed(self) -> tuple[Any, Any] | None:
        """The two GPU UUIDs when both are recorded and differ: every verdict then compares cards too."""
        uuid_a, uuid_b = _run_card(self.a), _run_card(self.b)
        return None if None in (uuid_a, uuid_b) or uuid_a == uuid_b else (uuid_a, uuid_b)

    @property
    def row_confidence(self) -> float:
        return bonferroni(self.confidence, len(self.comparisons))

    def by_change(self) -> list[Comparison]:
        """Rows by the size of their change, largest first (|log B/A|, so 2x and 0.5x weigh alike)."""
        return sorted(self.comparisons, key=lambda c: -abs(math.log(c.interval.ratio)))

    def geometric_means(self) -> dict[str, float]:
        """Geometric mean of B/A per kernel, and over every configuration under the key ''."""
        return {kernel: geometric_mean([c.interval.ratio for c in self.comparisons if kernel in ("", c.kernel)])
                for kernel in ["", *dict.fromkeys(c.kernel for c in self.comparisons)]}


def _run_card(run: RunFiles) -> str | None:
    """The card of a run whose timing records predate naming theirs: its environment's (one card then)."""
    uuid = _lookup(run.environment, ("gpu", "uuid"))
    return uuid if isinstance(uuid, str) and uuid != NOT_RECORDED else None


def card_spread(a: RunFiles, b: RunFiles, cards_a: list[str], cards_b: list[str]) -> float | None:
    """The largest |B/A - 1| of the per-card ceiling medians over every pair of cards, on ceilings
    both measured the same way (else a change of method counts as one of card); None when a pair has none."""
    spreads = []
    for card_a, card_b in itertools.product(cards_a, cards_b):
        ceilings_a, ceilings_b = a.card_ceilings.get(card_a, {}), b.card_ceilings.get(card_b, {})
        common = [kind for kind in set(ceilings_a) & set(ceilings_b) if ceilings_a[kind][1] == ceilings_b[kind][1]]
        if not common:
            return None
        spreads.append(max(abs(ceilings_b[kind][0] / ceilings_a[kind][0] - 1.0) for kind in common))
    return max(spreads)


def _compare_config(a: RunFiles, b: RunFiles, config: tuple[str, str, str], threshold: float, confidence: float
                    ) -> Comparison:
    keys_a = [k for k in sorted(a.timings) if k[:3] == config]
    keys_b = [k for k in sorted(b.timings) if k[:3] == config]
    sides = [("A", a, keys_a), ("B", b, keys_b)]
    groups_a = samples_by_process((k, a.timings[k]) for k in keys_a)
    groups_b = samples_by_process((k, b.timings[k]) for k in keys_b)
    interval = ratio_interval(groups_a, groups_b, confidence=confidence)
    one_process = [s for (s, _, keys), found in zip(sides, (groups_a, groups_b)) if len(keys) > 1 and len(found) == 1]
    foreign = [f"{s} rep{k[3]}" for s, run, keys in sides for k in keys if saw_foreign_work(run.timings[k])]
    disturbed = [f"{s} rep{k[3]}: {disturbed_count(run.timings[k])} of {len(run.timings[k]['samples_us'])}"
                 for s, run, keys in sides for k in keys if disturbed_count(run.timings[k])]
    cards_a, cards_b = (sorted({c for k in keys if (c := card(run.timings[k]) or _run_card(run))})
                        for _, run, keys in sides)
    cards = (cards_a, cards_b) if cards_a and cards_b and cards_a != cards_b else None
    # Across cards, a change the cards themselves show on the kit's ceilings is not the code's.
    spread = card_spread(a, b, cards_a, cards_b) if cards else None
    threshold_used = threshold + (spread or 0.0)
    called = verdict(interval, threshold_used, process_order(groups_a, groups_b))
    # Repeats that ran in one process cannot show whether a process stayed slow all its life.
    unclaimed = called if called in ("FASTER", "SLOWER") and one_process else None
    return Comparison(
        *config, median_a=median(s for g in groups_a for s in g), median_b=median(s for g in groups_b for s in g),
        repeats_a=len(keys_a), repeats_b=len(keys_b), interval=interval,
        verdict="AMBIGUOUS" if unclaimed else called, threshold=threshold_used,
        foreign_work=foreign, disturbed=disturbed, cards=cards, card_spread=spread, one_process=one_process,
        unclaimed=unclaimed)


def compare(a: RunFiles, b: RunFiles, threshold: float = DIFF_THRESHOLD, confidence: float = DIFF_CONFIDENCE
            ) -> DiffResult:
    """Everything the diff says, as data; KitError when the runs share no configuration."""
    result = DiffResult(a, b, threshold, confidence)
    shared = sorted(set(a.timings) & set(b.timings), key=sort_key)
    if not (configs := sorted({k[:3] for k in shared}, key=sort_key)):
        raise KitError(f"runs {a.dir} and {b.dir} have no timed configuration (kernel, shape, layout) in common, "
                       "so there is nothing to compare")
    fields = [(label, _lookup(a.environment, path), _lookup(b.environment, path)) for label, path in ENVIRONMENT_FIELDS]
    fields.append(("SM clock seen around timed targets (MHz)", _sm_clock_range(a), _sm_clock_range(b)))
    result.environment = [(label, value_a, value_b) for label, value_a, value_b in fields if value_a != value_b]

    changed_configs: dict[tuple[str, str, str], dict[str, None]] = {}  # dict as an ordered set
    for key in shared:
        for field_name, label, short in (("source_sha256", "source", 12), ("compile_options", "compile options", None),
                                         ("method", "method", None)):
            before, after = (run.timings[key].get(field_name, NOT_RECORDED) for run in (a, b))
            if before != after:
                before, after = (str(value)[:short] for value in (before, after))
                changed_configs.setdefault(key[:3], {})[f"{label} {before} -> {after}"] = None
    result.source_changes = [(" ".join(k), "; ".join(v)) for k, v in changed_configs.items()]

    for (found_a, found_b), outcome, check in (((a.correctness, b.correctness), "passed", "correctness {}"),
                                               ((a.controls, b.controls), "caught", "negative control {} caught")):
        for key in sorted(set(found_a) | set(found_b), key=sort_key):
            pa, pb = (found.get(key, {}).get(outcome, "missing") for found in (found_a, found_b))
            if pa != pb:
                result.outcome_changes.append((check.format(" ".join(key)), str(pa), str(pb)))

    name = lambda key: f"{key[0]} {key[1]} {key[2]} rep{key[3]}"  # noqa: E731
    result.only_in_a = [name(k) for k in sorted(set(a.timings) - set(b.timings), key=sort_key)]
    result.only_in_b = [name(k) for k in sorted(set(b.timings) - set(a.timings), key=sort_key)]

    corrected = bonferroni(confidence, len(configs))
    result.comparisons = [_compare_config(a, b, config, threshold, corrected) for config in configs]
    return result
