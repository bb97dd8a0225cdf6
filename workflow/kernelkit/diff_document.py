"""The diff as a document, and its command: what differs between the runs (kit, card, driver,
clocks, config, processes), then the verdicts, then the rows. Every number comes from kernelkit.diff."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from kernelkit import KitError, document as doc
from kernelkit.diff import ENVIRONMENT_FIELDS, Comparison, DiffResult, compare
from kernelkit.diff_inputs import by_process, load_run, shared_processes
from kernelkit.outputs import check_outputs, write_outputs
from kernelkit.records import read_checked
from kernelkit.stats import DIFF_CONFIDENCE, DIFF_THRESHOLD

VERDICT_ORDER = ("SAME", "FASTER", "SLOWER", "AMBIGUOUS")


def _name(c: Comparison) -> str:
    return f"{c.kernel} {c.shape} {c.layout}"


def gpu_banner(result: DiffResult) -> doc.Paragraph | None:
    """One sentence above the verdicts when A and B ran on different cards, which every verdict then compares too."""
    mixed, changed = [c for c in result.comparisons if c.cards], result.gpu_changed
    if not changed and not mixed:
        return None
    parts = [f"A ran on {changed[0]} and B on {changed[1]}"] if changed else []
    if mixed and (not changed or len(mixed) < len(result.comparisons)):
        parts.append(f"{len(mixed)} of {len(result.comparisons)} configurations were timed on different cards in A "
                     "and B (their notes name the cards)")
    why = ("The GPU models differ" if any(label == "GPU model" for label, _, _ in result.environment)
           else "Two cards of one model can differ in speed")
    spreads = [c.card_spread for c in mixed if c.card_spread is not None]
    allowance = (f" Where both runs measured ceilings on the cards, a row across cards is FASTER or SLOWER only "
                 f"beyond the threshold plus how far apart the two cards are on those measured the same way (copy, "
                 f"L2, GEMM, harness floor): here {min(spreads):.1%} to {max(spreads):.1%}, named in each row's verdict."
                 ) if spreads else ""
    if len(spreads) < len(mixed):
        allowance += (f" For {len(mixed) - len(spreads)} rows no ceiling was measured the same way on both cards, "
                      "and their threshold is not widened.")
    return doc.Paragraph(
        "Different GPUs: " + "; ".join(parts) + f". {why}, so every verdict below compares the cards as well as the "
        "code." + allowance, css_class="banner")


def _counts(result: DiffResult) -> str:
    return ", ".join(f"{result.count(v)} {v}" for v in VERDICT_ORDER)


def _summary(result: DiffResult) -> list[doc.Block]:
    by_change = result.by_change()
    not_same = [c for c in by_change if c.verdict != "SAME"]
    texts = [f"A = results/{result.a.dir.name}, B = results/{result.b.dir.name}. {len(result.comparisons)} configurations "
             f"timed in both: {_counts(result)}.",
             "Not SAME: " + "; ".join(f"{_name(c)} {c.label} ({c.change:+.1%})" for c in not_same) + "."
             if not_same else "Every configuration is SAME."]
    if measured := [c for c in by_change if c.below_threshold]:
        texts.append("Measured changes inside the threshold (the interval excludes 1 but lies within 1 +- "
                     f"{result.threshold:g}): " + "; ".join(f"{_name(c)} {c.change:+.1%}" for c in measured) + ".")
    if unclaimed := [c for c in by_change if c.unclaimed]:
        texts.append("Not claimed, because a run's repeats of the configuration all ran in one worker process: "
                     + "; ".join(f"{_name(c)} ({c.change:+.1%}, {c.one_process_text})" for c in unclaimed)
                     + ". The interval lies beyond the threshold, but one process can stay in a slower state for its "
                       "whole life, and one process per side cannot tell that from a change.")
    if foreign := [c for c in result.comparisons if c.foreign_work]:
        texts.append("Foreign GPU work was seen while timing " + "; ".join(
            f"{_name(c)} ({', '.join(c.foreign_work)})" for c in foreign) + ": their verdicts may be off.")
    means = sorted(result.geometric_means().items(), key=lambda item: (not item[0], item[0]))
    return [*map(doc.Paragraph, texts), doc.Table(
        ("Kernel", "Configurations", "Geometric mean of B/A", "Change"),
        [(kernel or "all", sum(c.kernel == kernel or not kernel for c in result.comparisons), f"{mean:.4f}",
          f"{mean - 1:+.1%}") for kernel, mean in means])]


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flatten(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def _config(run: Any) -> dict[str, Any] | None:
    try:
        return read_checked(run.dir / "config.json", "config")
    except KitError:
        return None


def _processes(run: Any) -> str:
    """How many processes timed a run's records, and whether repeats shared one, from the records."""
    processes = by_process(run.timings.items())
    if not any(p[0] == "process" for p in processes):
        return f"{len(run.timings)} timing records naming no process (an older kit)"
    configurations, shared = shared_processes(processes)
    return (f"{len(run.timings)} timing records from {len(processes)} process{'es' if len(processes) != 1 else ''}; "
            + (f"repeats shared a process in {shared} of {configurations} configurations" if shared
               else "every repeat in a process of its own"))


def _kit(environment: dict[str, Any]) -> str:
    host = environment.get("host", {}) if isinstance(environment.get("host"), dict) else {}
    commit, dirty = host.get("kit_commit"), host.get("kit_tree_dirty")
    return ((str(commit)[:12] if isinstance(commit, str) and commit else "not recorded")
            + (" with uncommitted changes" if dirty is True else " (clean tree)" if dirty is False else ""))


def _card(environment: dict[str, Any]) -> str:
    cuda, gpu = (environment.get(key) if isinstance(environment.get(key), dict) else {} for key in ("cuda", "gpu"))
    return f"{cuda.get('device_name', 'not recorded')} ({gpu.get('uuid', 'no UUID recorded')})"


def what_differs(result: DiffResult) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The rows where A and B differ (kit, card, environment, config, processes), and the names of the same."""
    rows: list[tuple[str, str, str]] = []
    same: list[str] = []

    def compare(label: str, a: Any, b: Any) -> None:
        if a != b:
            rows.append((label, str(a), str(b)))
        else:
            same.append(label)

    compare("Kit commit", _kit(result.a.environment), _kit(result.b.environment))
    compare("Card (model and UUID)", _card(result.a.environment), _card(result.b.environment))
    shown = {"GPU model", "GPU UUID"}  # in the card's row
    rows += [(label, str(a), str(b)) for label, a, b in result.environment if label not in shown]
    same += [label for label, _ in ENVIRONMENT_FIELDS if label not in shown | {row[0] for row in result.environment}]
    config_a, config_b = (_config(run) for run in (result.a, result.b))
    if config_a is None or config_b is None:
        rows.append(("Config", "read" if config_a else "unreadable", "read" if config_b else "unreadable"))
    else:
        flat_a, flat_b = (_flatten({k: v for k, v in config.items() if k != "run"}) for config in (config_a, config_b))
        keys = sorted(k for k in set(flat_a) | set(flat_b) if flat_a.get(k, "absent") != flat_b.get(k, "absent"))
        if keys:
            listed = ["; ".join(f"{k} = {flat.get(k, 'absent')}" for k in keys[:6]) + ("; ..." if len(keys) > 6 else "")
                      for flat in (flat_a, flat_b)]
            rows.append((f"Config ({len(keys)} {'keys differ' if len(keys) != 1 else 'key differs'})", *listed))
        else:
            same.append("Config (but for the run's name)")
    compare("Processes that timed the targets", _processes(result.a), _processes(result.b))
    return rows, same


def _method(result: DiffResult) -> doc.Paragraph:
    return doc.Paragraph(
        "The ratio is B/A of the pooled medians (below 1: B is faster); the change is B/A - 1. Its interval is a "
        "percentile bootstrap that resamples processes (repeats; repeats that one worker process ran count as one) "
        f"and then samples inside each, at {result.confidence:.0%} for the whole table (Bonferroni: "
        f"{result.row_confidence:.4%} per row). Verdicts: SAME when the interval "
        f"lies inside 1 +- {result.threshold:g} (with the change named when the interval excludes 1); SLOWER or "
        f"FASTER when it lies wholly beyond 1 +- {result.threshold:g} and every process (repeat) of B is slower, or "
        "faster, than every process of A, and neither run timed all its repeats in one process; AMBIGUOUS otherwise "
        "(too wide, too mixed or too few processes to decide). Rows run from the largest change to the smallest.")


def build(result: DiffResult) -> tuple[str, list[doc.Section]]:
    banner, (rows, same) = gpu_banner(result), what_differs(result)
    sections = [
        doc.Section("What differs", [*([doc.Table(("What differs", "A", "B"), rows)] if rows else []), doc.Paragraph(
            ("The same in A and B: " + ", ".join(same) + ".") if same else "Nothing else compared is the same.")]),
        doc.Section("Summary", ([banner] if banner else []) + _summary(result)),
        doc.Section("Timings", ([banner] if banner else []) + [_method(result), doc.Table(
            ("Kernel", "Shape", "Layout", "Median A (us)", "Median B (us)", "Change", "B/A", "Interval", "Repeats A/B",
             "Verdict", "Notes"),
            [(c.kernel, c.shape, c.layout, f"{c.median_a:.3f}", f"{c.median_b:.3f}", f"{c.change:+.2%}",
              f"{c.interval.ratio:.4f}", f"[{c.interval.low:.4f}, {c.interval.high:.4f}]", f"{c.repeats_a}/{c.repeats_b}",
              doc.Marked(c.label, "verdict-measured" if c.below_threshold else f"verdict-{c.verdict.lower()}"),
              "; ".join(c.notes)) for c in result.by_change()])]),
        doc.Section("Kernel source, compile options and method", [
            doc.Table(("Configuration", "Change"), result.source_changes) if result.source_changes
            else doc.Paragraph("Identical source hashes, compile options and timing method for every shared target.")]),
        doc.Section("Correctness and negative-control outcomes", [
            doc.Table(("Check", "A", "B"), result.outcome_changes) if result.outcome_changes
            else doc.Paragraph("No outcome changed.")]),
        doc.Section("Targets in only one run", [doc.Paragraph(
            f"Only in A: {', '.join(result.only_in_a) or 'none'}. Only in B: {', '.join(result.only_in_b) or 'none'}.")]),
    ]
    return f"kernelkit diff: {result.a.dir.name} vs {result.b.dir.name}", sections


# Exit codes of `kernelkit diff`, which CI gates on (README, "Compare two runs").
EXIT_OK, EXIT_SLOWER = 0, 1


def open_fraction(text: str) -> float:
    """The argparse type of --threshold and --confidence: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value < 1.0:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a number strictly between 0 and 1, not {text!r}")
    return value


def run_command(args: argparse.Namespace) -> int:
    """`kernelkit diff`: 0 done, 1 SLOWER with --fail-on-slower; unusable input raises KitError (exit 2)
    and anything unexpected is an internal error (exit 3), both turned into one sentence by the CLI."""
    check_outputs([path for path in (args.markdown, args.html) if path])  # before the work, not after
    result = compare(load_run(args.run_a), load_run(args.run_b), args.threshold, args.confidence)
    title, sections = build(result)
    markdown = doc.render_markdown(title, sections)
    if not args.markdown:
        print(markdown, end="")
    write_outputs([(path, text) for path, text in ((args.markdown, markdown),
                                                   (args.html, doc.render_html(title, sections) if args.html else None))
                   if path])
    print(f"{len(result.comparisons)} configurations: {_counts(result)}", file=sys.stderr)
    return EXIT_SLOWER if result.count("SLOWER") and args.fail_on_slower else EXIT_OK


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("diff", help="compare two run directories; exit 1 on SLOWER with --fail-on-slower, "
                                           "2 on unusable input, 3 on an internal error")
    p.add_argument("run_a", help="run directory A (results/<run>), the reference")
    p.add_argument("run_b", help="run directory B (results/<run>), compared against A")
    p.add_argument("--threshold", type=open_fraction, default=DIFF_THRESHOLD,
                   help=f"SAME when B/A lies within 1 +- this, in (0, 1) (default {DIFF_THRESHOLD})")
    p.add_argument("--confidence", type=open_fraction, default=DIFF_CONFIDENCE,
                   help=f"family-wise confidence of the intervals, in (0, 1) (default {DIFF_CONFIDENCE})")
    p.add_argument("--fail-on-slower", action="store_true", help="exit 1 when any configuration is SLOWER")
    p.add_argument("--markdown", help="write the Markdown here instead of standard output")
    p.add_argument("--html", help="also write a self-contained HTML page")
    p.set_defaults(func=run_command)
