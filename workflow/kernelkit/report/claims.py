"""Published claims as data: `kernels/<op>/claims.yaml` holds what a write-up states, with its source.

A stated ratio of two layouts' times is compared as a ratio within TOLERANCE; a single published
time only after scaling it by the cards' ratio of the ceiling that bounds it, since the seed's card
(the claims file's `card`) is not this run's (its environment record).
"""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit import spec as specs
from kernelkit import units
from kernelkit.report.bounds import judge
from kernelkit.report.run import Run, rated_bandwidth_gb_s

# A published ratio reproduces when this run's lies within this factor of it (10%: wider than the
# 2% the diff resolves between runs of one card, since a seed's card and method differ).
TOLERANCE = 0.10

# FP32 results per clock per SM by compute capability (CUDA C++ Programming Guide, "Arithmetic
# Instructions": 32-bit floating-point add, multiply, multiply-add), for the FP32 peak of a card.
FP32_LANES_PER_SM = {"6.0": 64, "6.1": 128, "7.0": 64, "7.2": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.7": 128,
                     "8.9": 128, "9.0": 128, "10.0": 128, "10.3": 128, "11.0": 128, "12.0": 128, "12.1": 128}


@dataclass
class CardFacts:
    """One card as the cards table shows it: the seed's (claims file) or this run's (environment)."""

    name: str
    sm_count: int | None
    clock_mhz: float | None            # boost clock (seed, specification) or the maximum SM clock (NVML)
    fp32_lanes_per_sm: int | None
    bandwidth_gb_s: float | None       # rated DRAM bandwidth
    l2_bytes: int | None
    driver: str | None
    compute_capability: str | None
    source: str                        # where the facts come from

    @property
    def fp32_peak_gflop_s(self) -> float | None:
        """SMs x clock x FP32 lanes per SM x 2 (a multiply-add is two FLOPs)."""
        facts = (self.sm_count, self.clock_mhz, self.fp32_lanes_per_sm)
        return None if None in facts else math.prod(facts) * 2 / 1e3  # type: ignore[arg-type]


def claims_file(kernel: str) -> Path:
    return specs.kernels_dir() / kernel / "claims.yaml"


def read_claims(kernel: str) -> dict[str, Any]:
    """The kernel folder's claims file, or {} when it has none."""
    path = claims_file(kernel)
    return copy.deepcopy(_parse(path, path.read_text(encoding="utf-8"))) if path.is_file() else {}


@functools.lru_cache(maxsize=64)
def _parse(path: Path, text: str) -> dict[str, Any]:
    """A claims file's text parsed once per process (a report reads each dozens of times); an edited one anew."""
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise KitError(f"claims file {path} is not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("claims", []), list):
        raise KitError(f"claims file {path} must be a mapping with a list under 'claims'")
    if "card" in data and not isinstance(data["card"], dict):
        raise KitError(f"claims file {path}: 'card' must be a mapping of the seed card's facts")
    return data


def change_of(kernel: str) -> tuple[str, str] | None:
    """The (before, after) layouts of the operation's change, as its claims file declares them."""
    change = read_claims(kernel).get("change")
    if isinstance(change, dict) and {"before", "after"} <= set(change):
        return str(change["before"]), str(change["after"])
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _whole(value: Any) -> int | None:
    return int(value) if (value := _number(value)) else None


def seed_card(kernel: str) -> CardFacts | None:
    """The card the kernel's seed measured on, from its claims file's `card`, or None."""
    card = read_claims(kernel).get("card")
    if not isinstance(card, dict) or not card.get("name"):
        return None
    source = card.get("source", {}) if isinstance(card.get("source"), dict) else {}
    text = lambda key: str(card[key]) if card.get(key) else None  # noqa: E731
    return CardFacts(str(card["name"]), _whole(card.get("sm_count")), _number(card.get("boost_clock_mhz")),
                     _whole(card.get("fp32_lanes_per_sm")), _number(card.get("memory_bandwidth_gb_s")),
                     _whole(card.get("l2_bytes")), text("driver"), text("compute_capability"),
                     f"seed {str(source.get('file', '?')).split('_')[0]}; {card.get('specification', 'the maker specification')}")


def seed_cards(run: Run) -> list[CardFacts]:
    """The seeds' cards of the run's kernels, each model once."""
    cards = list(filter(None, map(seed_card, run.kernels)))
    return [card for i, card in enumerate(cards) if card.name not in {c.name for c in cards[:i]}]


def run_card(run: Run) -> CardFacts:
    """This run's first card, from its environment record: FP32 lanes from the compute capability."""
    cuda, gpu = run.environment.get("cuda", {}), run.environment.get("gpu", {})
    capability, sms, l2 = cuda.get("compute_capability"), cuda.get("sm_count"), cuda.get("l2_cache_bytes")
    return CardFacts(run.device, sms if isinstance(sms, int) else None, _number(gpu.get("sm_clock_max_mhz")),
                     FP32_LANES_PER_SM.get(str(capability)), rated_bandwidth_gb_s(run), l2 if isinstance(l2, int) else None,
                     str(gpu["driver_version"]) if isinstance(gpu.get("driver_version"), str) else None,
                     str(capability) if capability else None, "environment.json")


@dataclass
class RatioJudgement:
    """One ratio a claim states at one shape: `other`'s time over `first`'s (above 1: first faster)."""

    shape: str
    first: str
    other: str
    published: float
    measured: float | None
    per_repeat: list[float]
    verdict: str


@dataclass
class TimeJudgement:
    """A single published time, scaled to this run's card by the ratio of the ceiling that bounds it."""

    shape: str
    layout: str
    published_us: float
    ceiling: str                 # "memory bandwidth" or "FP32 peak"
    scale: float | None          # seed card's ceiling over this card's
    measured_us: float | None
    per_repeat: list[float]
    verdict: str

    @property
    def scaled_us(self) -> float | None:
        return self.published_us * self.scale if self.scale is not None else None


@dataclass
class ClaimResult:
    kernel: str
    statement: str
    source: str
    quote: str
    published: dict[str, float]
    order: list[str]
    # shape -> layout -> pooled median (us) in this run, for the shapes the claim is compared at
    measured: dict[str, dict[str, float | None]]
    reproduced: dict[str, bool | None]
    differences: list[str] = field(default_factory=list)
    gpu: str | None = None
    ratios: list[RatioJudgement] = field(default_factory=list)
    times: list[TimeJudgement] = field(default_factory=list)

    @property
    def names_shape(self) -> bool:
        """Whether the claim names its shape (then it is judged there only)."""
        return not any("names no shape" in d for d in self.differences)


def _within(factor: float) -> bool:
    return abs(math.log(factor)) <= math.log(1 + TOLERANCE)


def ratio_verdict(published: float, measured: float | None, per_repeat: list[float]) -> str:
    """How a measured ratio stands against a published one (both: other time / first time)."""
    if measured is None:
        return "not measurable here"
    if per_repeat and min(per_repeat) < 1 < max(per_repeat):
        return "undecided (the repeats disagree on the direction)"
    if (measured > 1) != (published > 1):
        return "reversed"
    factor = measured / published
    if _within(factor):
        return f"reproduced within {TOLERANCE:.0%}"
    # The size of an effect is how far its ratio lies from 1, on either side.
    larger = abs(math.log(measured)) > abs(math.log(published))
    return f"same direction, {max(factor, 1 / factor):.2g}x {'larger' if larger else 'smaller'}"


def time_verdict(scaled_us: float | None, measured_us: float | None) -> str:
    if scaled_us is None or measured_us is None:
        return "not comparable (a card fact is missing)" if measured_us is not None else "not measurable here"
    factor = measured_us / scaled_us
    if _within(factor):
        return f"reproduced within {TOLERANCE:.0%} after scaling"
    return f"{1 / factor:.2g}x faster than the scaled time" if factor < 1 else f"{factor:.2g}x slower than the scaled time"


def card_scale(seed: CardFacts | None, here: CardFacts, ceiling: str) -> float | None:
    """The seed card's ceiling over this card's: a published time times this is the time at this card's speed."""
    if seed is None:
        return None
    pair = ((seed.fp32_peak_gflop_s, here.fp32_peak_gflop_s) if ceiling == "FP32 peak"
            else (seed.bandwidth_gb_s, here.bandwidth_gb_s))
    return pair[0] / pair[1] if pair[0] and pair[1] else None


def evaluate(run: Run, kernel: str, claim: dict[str, Any]) -> ClaimResult:
    order = [str(layout) for layout in claim.get("faster_to_slower", [])]
    wanted, shapes, gpu = claim.get("shape"), run.shapes(kernel), claim.get("gpu")
    differences = []
    if gpu and str(gpu).lower() not in run.device.lower():
        differences.append(f"the claim was measured on {gpu}, this run on {run.device}")
    if wanted is None:
        differences.append("the source names no shape: every shape of this run is compared")
    elif str(wanted) not in shapes:
        # A claim about one shape says nothing about another: judging it there would be a verdict
        # on a claim nobody made.
        differences.append(f"the claim's shape {wanted} was not run here, so it is not judged")
        shapes = []
    else:
        shapes = [str(wanted)]
    if missing := [layout for layout in order if layout not in run.layouts(kernel)]:
        differences.append(f"layouts not timed in this run: {', '.join(missing)}")
    if mixed := [shape for shape in shapes if shape in run.mixed_card_shapes(kernel)]:
        differences.append(f"timings of {', '.join(mixed)} come from several cards, so the layouts are compared "
                           "across cards")
    published = {str(k): float(v) for k, v in claim.get("published_us", {}).items()}
    stated = [layout for layout in order if layout in published]
    card, here = seed_card(kernel), run_card(run)
    result = ClaimResult(kernel, str(claim.get("statement", "")), str(claim.get("source", {}).get("file", "")),
                         str(claim.get("source", {}).get("quote", "")), published, order, {}, {}, differences,
                         str(gpu) if gpu else None)
    for shape in shapes:
        values = result.measured[shape] = {layout: run.pooled_median(kernel, shape, layout) for layout in order}
        known = [values[layout] for layout in order]
        result.reproduced[shape] = (None if None in known or len(known) < 2
                                    else all(a < b for a, b in zip(known, known[1:])))
        for other in stated[1:]:
            first = stated[0]
            value = values[other] / values[first] if values.get(other) and values.get(first) else None
            per = run.repeat_ratios(kernel, shape, other, first) if value is not None else []
            pub = published[other] / published[first]
            result.ratios.append(RatioJudgement(shape, first, other, pub, value, per, ratio_verdict(pub, value, per)))
        if len(stated) == 1:
            layout = stated[0]
            # FP32 peak where this run judges the configuration bound by arithmetic, else memory bandwidth.
            bound = judge(run, kernel, shape, layout).bound if run.records(kernel, shape, layout) else None
            ceiling = "FP32 peak" if bound == "arithmetic" else "memory bandwidth"
            scale = card_scale(card, here, ceiling)
            result.times.append(TimeJudgement(
                shape, layout, published[layout], ceiling, scale, values.get(layout),
                sorted(run.repeat_medians(kernel, shape, layout).values()),
                time_verdict(published[layout] * scale if scale is not None else None, values.get(layout))))
    return result


def all_claims(run: Run) -> list[ClaimResult]:
    return [evaluate(run, kernel, claim) for kernel in run.kernels for claim in read_claims(kernel).get("claims", [])]


def size_verdict(result: ClaimResult, shape: str) -> str:
    """The claim's verdict by size at one shape: its ratios' (the worst of them) or its scaled time's."""
    if not (ratios := [r for r in result.ratios if r.shape == shape]):
        return next((t.verdict for t in result.times if t.shape == shape), "not measurable here")
    verdicts = [r.verdict for r in ratios]
    for worst in ("reversed", "undecided", "not measurable"):
        if hits := [r.other for r in ratios if r.verdict.startswith(worst)]:
            return verdicts[0] if len(ratios) == 1 else f"{worst} for {', '.join(hits)}"
    factors = [r.measured / r.published for r in ratios if r.measured]
    span = f"ratios {min(factors):.2g}x to {max(factors):.2g}x the seed's"
    if result.reproduced.get(shape) is False:
        # Each layout is still slower than the first, but not in the published order among themselves.
        return f"{ratios[0].first} still fastest, the others in another order; {span}"
    return verdicts[0] if len(set(verdicts)) == 1 else f"same order; {span}"


def _published_cell(result: ClaimResult) -> str:
    values = ", ".join(f"{layout} {units.short(result.published[layout])}" for layout in result.order
                       if layout in result.published)
    return f"{values} ({result.gpu})" if result.gpu else values


def claim_rows(results: list[ClaimResult]) -> list[list[Any]]:
    """One row per claim: the published ratio or scaled time, this run's per shape, their ratio and the verdicts."""
    rows: list[list[Any]] = []
    for result in results:
        if not result.measured:
            # Nothing measured, so no order of speed either (result.reproduced is empty).
            rows.append([result.kernel, result.statement, _published_cell(result), "not timed here", "", "",
                         "not measurable here"])
            continue
        shapes = list(result.measured)
        at = (lambda shape: f"{shape}: ") if len(shapes) > 1 else (lambda shape: "")  # noqa: E731
        # The published cell is the same at every shape but a scaled time's, which the last shape's gives.
        stated, here, factor, order, verdict = _published_cell(result), [], [], [], []
        for shape in shapes:
            if ratios := [r for r in result.ratios if r.shape == shape]:
                stated = "; ".join(f"{r.other}/{r.first} {r.published:.2f}x" for r in ratios)
                here.append(at(shape) + "; ".join(f"{r.other}/{r.first} {units.ratio(r.measured)} "
                                                  f"({units.spread(r.per_repeat, 'x')})" for r in ratios))
                factor.append(at(shape) + ", ".join(f"{r.measured / r.published:.2f}" if r.measured else "n/a"
                                                    for r in ratios))
            elif t := next((t for t in result.times if t.shape == shape), None):
                stated = (f"{t.layout} {units.short(t.published_us)}; x {t.scale:.3g} ({t.ceiling} ratio) = "
                          f"{units.short(t.scaled_us)}" if t.scaled_us is not None
                          else f"{t.layout} {units.short(t.published_us)} (not scaled: a card fact is missing)")
                here.append(at(shape) + f"{t.layout} {units.short(t.measured_us)} ({units.spread(t.per_repeat, ' us')})")
                factor.append(at(shape) + (f"{t.measured_us / t.scaled_us:.2f}" if t.scaled_us and t.measured_us
                                           else "n/a"))
            held = result.reproduced.get(shape)
            order.append(at(shape) + ("reproduced" if held else "not reproduced" if held is False else "n/a"))
            verdict.append(at(shape) + size_verdict(result, shape))
        where = "" if len(shapes) > 1 or not result.names_shape else f"{shapes[0]}: "
        rows.append([result.kernel, result.statement, where + stated, "; ".join(here), "; ".join(factor),
                     "; ".join(order), "; ".join(verdict)])
    return rows


def section_claims(results: list[ClaimResult]) -> list[doc.Block]:
    """The claims judged by size, as blocks of the answers' tables (empty when no kernel has claims)."""
    if not results:
        return []
    return [
        doc.Paragraph(f"Published claims (kernels/<op>/claims.yaml, copied from the seeds), judged by size: a "
                      f"published ratio of two layouts' times against this run's ratio of pooled medians, reproduced "
                      f"within {TOLERANCE:.0%}; a single published time only after scaling it by the cards' ratio of the "
                      "ceiling that bounds it (memory bandwidth or FP32 peak, table below)."),
        doc.Table(["Kernel", "Claim", "Published", "This run (range over repeats)", "Measured / published",
                   "Order of speed", "Verdict by size"], claim_rows(results)),
        doc.Details("The quotes the claims were copied from",
                    [doc.Bullets([f"{r.kernel}: \"{r.quote}\" ({r.source})" for r in results])]),
    ]


def card_rows(run: Run) -> tuple[list[str], list[list[str]]]:
    """The seeds' cards (one column each) and this run's card: the facts the claims' scaling uses."""
    cards, here = seed_cards(run), run_card(run)
    rate = lambda v, unit: f"{v:,.0f} {unit}" if v else "n/a"  # noqa: E731
    facts = [("SMs", lambda c: str(c.sm_count) if c.sm_count else "n/a"),
             ("Clock (boost; this run: max SM clock)", lambda c: rate(c.clock_mhz, "MHz")),
             ("FP32 lanes per SM", lambda c: str(c.fp32_lanes_per_sm) if c.fp32_lanes_per_sm else "n/a"),
             ("FP32 peak (SMs x clock x lanes x 2)",
              lambda c: f"{c.fp32_peak_gflop_s / 1e3:.1f} TFLOP/s" if c.fp32_peak_gflop_s else "n/a"),
             ("Memory bandwidth (rated)", lambda c: rate(c.bandwidth_gb_s, "GB/s")),
             ("L2", lambda c: units.size(c.l2_bytes) if c.l2_bytes else "n/a"),
             ("Driver", lambda c: c.driver or "not stated"),
             ("Compute capability", lambda c: c.compute_capability or "n/a"), ("Source", lambda c: c.source)]
    rows = [[label, *map(cell, [*cards, here])] for label, cell in facts]
    copy, gemm = run.ceiling.get("copy_gb_s"), run.ceiling.get("gemm_gflop_s")
    rows.append(["Measured here: copy / SGEMM", *("-" for _ in cards),
                 f"{rate(copy, 'GB/s')} / {gemm / 1e3:.1f} TFLOP/s" if copy and gemm else "not measured"])
    return ["", *(f"{c.name} (seed)" for c in cards), f"{here.name} (this run)"], rows


def card_difference(run: Run) -> str | None:
    """The one sentence on how this run's card differs from the seeds' cards."""
    here, cards = run_card(run), seed_cards(run)
    if not cards:
        return None
    same = [card.name for card in cards if card.name.split(" (")[0].lower() in here.name.lower()]
    share = lambda mine, theirs, what: (f"{mine / theirs:.2g}x the {what}" if mine and theirs  # noqa: E731
                                        else f"an unknown share of the {what}")
    parts = [f"{share(here.bandwidth_gb_s, card.bandwidth_gb_s, 'memory bandwidth')} and "
             f"{share(here.fp32_peak_gflop_s, card.fp32_peak_gflop_s, 'FP32 peak')} of the {card.name}"
             for card in cards if card.name not in same]
    text = (f"This run's {here.name} is the model the seed measured on ({', '.join(same)}); its clocks, driver and "
            "method may still differ. " if same else "")
    if parts:
        text += f"The published numbers come from other cards than this run's {here.name}, which has {'; '.join(parts)}. "
    return text + ("So a published ratio is compared as a ratio, and a published time only after scaling it by the "
                   "ratio of the ceiling that bounds it.")
