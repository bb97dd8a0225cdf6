"""The diff as a document: the answer first (what changed, by how much), the evidence after.

Only rendering lives here; every number and verdict comes from kernelkit.diff's DiffResult.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelkit import document as doc

if TYPE_CHECKING:  # the data comes from kernelkit.diff, which calls build(): no import back at run time
    from kernelkit.diff import Comparison, DiffResult

VERDICT_ORDER = ("SAME", "FASTER", "SLOWER", "AMBIGUOUS")


def _name(c: Comparison) -> str:
    return f"{c.kernel} {c.shape} {c.layout}"


def _verdict_cell(c: Comparison) -> doc.Marked:
    return doc.Marked(c.label, "verdict-measured" if c.below_threshold else f"verdict-{c.verdict.lower()}")


def gpu_banner(result: DiffResult) -> doc.Paragraph | None:
    """One sentence above the verdicts when A and B ran on different cards, which every verdict then compares too."""
    mixed = [c for c in result.comparisons if c.cards]
    changed = result.gpu_changed
    if not changed and not mixed:
        return None
    parts = []
    if changed:
        parts.append(f"A ran on {changed[0]} and B on {changed[1]}")
    if mixed and (not changed or len(mixed) < len(result.comparisons)):
        parts.append(f"{len(mixed)} of {len(result.comparisons)} configurations were timed on different cards in A "
                     "and B (their notes name the cards)")
    models_differ = any(label == "GPU model" for label, _, _ in result.environment)
    why = "The GPU models differ" if models_differ else "Two cards of one model can differ in speed"
    spreads = [c.card_spread for c in mixed if c.card_spread is not None]
    allowance = ""
    if spreads:
        allowance = (f" Where both runs measured ceilings on the cards, a row across cards is FASTER or SLOWER only "
                     f"beyond the threshold plus how far apart the two cards are on those measured the same way (copy, "
                     f"L2, GEMM, harness floor): here {min(spreads):.1%} to {max(spreads):.1%}, named in each row's verdict.")
    if len(spreads) < len(mixed):
        allowance += (f" For {len(mixed) - len(spreads)} rows no ceiling was measured the same way on both cards, "
                      "and their threshold is not widened.")
    return doc.Paragraph(
        "Different GPUs: " + "; ".join(parts) + f". {why}, so every verdict below compares the cards as well as the "
        "code." + allowance, css_class="banner")


def _summary(result: DiffResult) -> list[doc.Block]:
    a, b = result.a.dir.name, result.b.dir.name
    m = len(result.comparisons)
    counts = ", ".join(f"{result.count(v)} {v}" for v in VERDICT_ORDER)
    blocks: list[doc.Block] = [doc.Paragraph(f"A = results/{a}, B = results/{b}. {m} configurations timed in both: {counts}.")]
    not_same = [c for c in result.by_change() if c.verdict != "SAME"]
    blocks.append(doc.Paragraph(
        "Not SAME: " + "; ".join(f"{_name(c)} {c.label} ({c.change:+.1%})" for c in not_same) + "."
        if not_same else "Every configuration is SAME."))
    measured = [c for c in result.by_change() if c.below_threshold]
    if measured:
        blocks.append(doc.Paragraph(
            "Measured changes inside the threshold (the interval excludes 1 but lies within 1 +- "
            f"{result.threshold:g}): " + "; ".join(f"{_name(c)} {c.change:+.1%}" for c in measured) + "."))
    unclaimed = [c for c in result.by_change() if c.unclaimed]
    if unclaimed:
        blocks.append(doc.Paragraph(
            "Not claimed, because a run's repeats of the configuration all ran in one worker process: "
            + "; ".join(f"{_name(c)} ({c.change:+.1%}, {c.one_process_text})" for c in unclaimed)
            + ". The interval lies beyond the threshold, but one process can stay in a slower state for its whole life, "
              "and one process per side cannot tell that from a change."))
    foreign = [c for c in result.comparisons if c.foreign_work]
    if foreign:
        blocks.append(doc.Paragraph(
            "Foreign GPU work was seen while timing " + "; ".join(f"{_name(c)} ({', '.join(c.foreign_work)})"
                                                                  for c in foreign) + ": their verdicts may be off."))
    means = result.geometric_means()
    blocks.append(doc.Table(
        ("Kernel", "Configurations", "Geometric mean of B/A", "Change"),
        [(kernel or "all", sum(c.kernel == kernel or not kernel for c in result.comparisons), f"{mean:.4f}",
          f"{mean - 1:+.1%}") for kernel, mean in sorted(means.items(), key=lambda item: (not item[0], item[0]))]))
    return blocks


def _method(result: DiffResult) -> doc.Paragraph:
    m = len(result.comparisons)
    return doc.Paragraph(
        "The ratio is B/A of the pooled medians (below 1: B is faster); the change is B/A - 1. Its interval is a "
        "percentile bootstrap that resamples processes (repeats; repeats that one worker process ran count as one) "
        "and then samples inside each, at "
        f"{result.confidence:.0%} for the whole table (Bonferroni: {1 - (1 - result.confidence) / max(1, m):.4%} per "
        f"row). Verdicts: SAME when the interval lies inside 1 +- {result.threshold:g} (with the change named when the "
        f"interval excludes 1); SLOWER or FASTER when it lies wholly beyond 1 +- {result.threshold:g} and every process "
        "(repeat) of B is slower, or faster, than every process of A, and neither run timed all its repeats in one "
        "process; AMBIGUOUS otherwise (too wide, too mixed or too few processes to decide). Rows run from the largest "
        "change to the smallest.")


def build(result: DiffResult) -> tuple[str, list[doc.Section]]:
    a, b = result.a.dir.name, result.b.dir.name
    banner = gpu_banner(result)
    sections = [
        doc.Section("Summary", ([banner] if banner else []) + _summary(result)),
        doc.Section("Timings", ([banner] if banner else []) + [_method(result), doc.Table(
            ("Kernel", "Shape", "Layout", "Median A (us)", "Median B (us)", "Change", "B/A", "Interval", "Repeats A/B",
             "Verdict", "Notes"),
            [(c.kernel, c.shape, c.layout, f"{c.median_a:.3f}", f"{c.median_b:.3f}", f"{c.change:+.2%}",
              f"{c.interval.ratio:.4f}", f"[{c.interval.low:.4f}, {c.interval.high:.4f}]", f"{c.repeats_a}/{c.repeats_b}",
              _verdict_cell(c), "; ".join(c.notes)) for c in result.by_change()])]),
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
    ]
    return f"kernelkit diff: {a} vs {b}", sections
