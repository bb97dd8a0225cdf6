"""Published claims as data: `kernels/<op>/claims.yaml` holds what a write-up states, with its source.

Per claim the report measures the same layouts in this run, says whether the published order
of speed reproduces, sets published and measured numbers side by side, and says where this
run's GPU or shape is not the claim's. Nothing about a claim is written in code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kernelkit import KitError
from kernelkit import document as doc
from kernelkit import spec as specs
from kernelkit.report import units
from kernelkit.report.run import Run


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


def claims_file(kernel: str) -> Path:
    return specs.kernels_dir() / kernel / "claims.yaml"


def read_claims(kernel: str) -> dict[str, Any]:
    """The kernel folder's claims file, or {} when it has none."""
    path = claims_file(kernel)
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise KitError(f"claims file {path} is not valid YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("claims", []), list):
        raise KitError(f"claims file {path} must be a mapping with a list under 'claims'")
    return data


def change_of(kernel: str) -> tuple[str, str] | None:
    """The (before, after) layouts of the operation's change, as its claims file declares them."""
    change = read_claims(kernel).get("change")
    if isinstance(change, dict) and {"before", "after"} <= set(change):
        return str(change["before"]), str(change["after"])
    return None


def evaluate(run: Run, kernel: str, claim: dict[str, Any]) -> ClaimResult:
    order = [str(layout) for layout in claim.get("faster_to_slower", [])]
    wanted = claim.get("shape")
    shapes = run.shapes(kernel)
    differences = []
    gpu = claim.get("gpu")
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
    missing = [layout for layout in order if layout not in run.layouts(kernel)]
    if missing:
        differences.append(f"layouts not timed in this run: {', '.join(missing)}")
    mixed = [shape for shape in shapes if shape in run.mixed_card_shapes(kernel)]
    if mixed:
        differences.append(f"timings of {', '.join(mixed)} come from several cards, so the layouts are compared "
                           "across cards")
    measured, reproduced = {}, {}
    for shape in shapes:
        values = {layout: run.pooled_median(kernel, shape, layout) for layout in order}
        measured[shape] = values
        known = [values[layout] for layout in order]
        reproduced[shape] = (None if any(v is None for v in known) or len(known) < 2
                             else all(a < b for a, b in zip(known, known[1:])))
    source = claim.get("source", {})
    return ClaimResult(kernel, str(claim.get("statement", "")), str(source.get("file", "")),
                       str(source.get("quote", "")), {str(k): float(v) for k, v in claim.get("published_us", {}).items()},
                       order, measured, reproduced, differences)


def all_claims(run: Run) -> list[ClaimResult]:
    return [evaluate(run, kernel, claim) for kernel in run.kernels for claim in read_claims(kernel).get("claims", [])]


def verdict_text(result: ClaimResult) -> str:
    counted = [v for v in result.reproduced.values() if v is not None]
    if not counted:
        return "not measurable here"
    held = sum(counted)
    if held == len(counted):
        return "reproduced" if len(counted) == 1 else f"reproduced on all {len(counted)} shapes"
    if held == 0:
        return "not reproduced" if len(counted) == 1 else f"not reproduced on any of {len(counted)} shapes"
    return f"reproduced on {held} of {len(counted)} shapes"


def claim_rows(results: list[ClaimResult]) -> list[list[str]]:
    rows = []
    for result in results:
        published = ", ".join(f"{layout} {result.published[layout]} us" for layout in result.order
                              if layout in result.published)
        measured = "; ".join(
            f"{shape}: " + ", ".join(f"{layout} {units.duration(value)}" for layout, value in values.items())
            for shape, values in result.measured.items())
        rows.append([result.kernel, result.statement, ", ".join(result.order), published, measured,
                     verdict_text(result), "; ".join(result.differences) or "same GPU and shape"])
    return rows


def section_claims(run: Run) -> doc.Section | None:
    results = all_claims(run)
    if not results:
        return None
    sources = sorted({f"{r.source}" for r in results})
    return doc.Section("Published claims", [
        doc.Paragraph("Claims copied from the write-ups this experiment reproduces (the claims.yaml of each kernel folder, each "
                      "with its source file and quote). A claim reproduces where this run's pooled medians put the "
                      "layouts in the published order of speed (fastest first). Published numbers come from another "
                      "GPU and method; compare directions, not values. Sources: " + ", ".join(sources) + "."),
        doc.Table(["Kernel", "Claim", "Published order (fastest first)", "Published", "Measured here (median)", "Verdict",
                   "Differs from the claim"], claim_rows(results)),
        doc.Bullets([f"{r.kernel}: \"{r.quote}\" ({r.source})" for r in results]),
    ])
