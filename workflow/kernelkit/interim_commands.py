"""Interim home of the report and diff commands, until report/ and diff.py register their own.

Another branch turns report.py into the report package and moves these commands there (each
stage module owns its command: `report.register`, `diff.register`); when it lands, cli.py lists
those two and this module goes. Nothing here computes anything.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kernelkit import config as kit_config
from kernelkit.records import read_record, split_skipped, write_text_atomic


def cmd_summary(args: argparse.Namespace) -> int:
    from kernelkit import summary

    timed, _ = split_skipped([read_record(path) for path in args.timing])
    table = summary.summarize_records(timed)
    write_text_atomic(args.output, table.to_csv(index=False, float_format="%.6f"))
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    from kernelkit import figures

    timed, _ = split_skipped([read_record(path) for path in args.timing])
    write_text_atomic(args.output, figures.timing_figure(timed, args.kernel))
    return 0


def cmd_clock_figure(args: argparse.Namespace) -> int:
    from kernelkit import figures

    timed, _ = split_skipped([read_record(path) for path in args.timing])
    write_text_atomic(args.output, figures.clock_figure(timed))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from kernelkit import document, report

    title, sections = report.build(Path(args.run_dir), Path(args.figures) if args.figures else None)
    write_text_atomic(args.markdown, document.render_markdown(title, sections))
    if args.html:
        write_text_atomic(args.html, document.render_html(title, sections))
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    from kernelkit import diff, document

    result = diff.compare(diff.load_run(args.run_a), diff.load_run(args.run_b), args.threshold, args.confidence)
    title, sections = diff.build(result)
    markdown = document.render_markdown(title, sections)
    if args.markdown:
        write_text_atomic(args.markdown, markdown)
    else:
        print(markdown, end="")
    if args.html:
        write_text_atomic(args.html, document.render_html(title, sections))
    slower = result.count("SLOWER")
    print(f"{len(result.comparisons)} configurations: " + ", ".join(
        f"{result.count(v)} {v}" for v in ("SAME", "FASTER", "SLOWER", "AMBIGUOUS")), file=sys.stderr)
    return 1 if slower and args.fail_on_slower else 0


def register_report(subparsers: Any) -> None:
    p = subparsers.add_parser("summary", help="one tidy row per timed target (CSV)")
    p.add_argument("--output", required=True, help="where to write the CSV")
    p.add_argument("timing", nargs="+", help="the run's timing records")
    p.set_defaults(func=cmd_summary)

    p = subparsers.add_parser("figure", help="the timing figure (SVG) of one kernel")
    p.add_argument("--kernel", required=True, help="the kernel the figure shows")
    p.add_argument("--output", required=True, help="where to write the SVG")
    p.add_argument("timing", nargs="+", help="the kernel's timing records")
    p.set_defaults(func=cmd_figure)

    p = subparsers.add_parser("clock-figure", help="the SVG of every NVML reading taken during the timed samples")
    p.add_argument("--output", required=True, help="where to write the SVG")
    p.add_argument("timing", nargs="+", help="the run's timing records")
    p.set_defaults(func=cmd_clock_figure)

    p = subparsers.add_parser("report", help="the report of one run directory, as Markdown and optionally HTML")
    p.add_argument("run_dir", help="the run directory, results/<run>")
    p.add_argument("--markdown", required=True, help="where to write the Markdown report")
    p.add_argument("--html", help="also write a self-contained HTML report here")
    p.add_argument("--figures", help="folder holding <kernel>.svg figures to include")
    p.set_defaults(func=cmd_report)


def register_diff(subparsers: Any) -> None:
    threshold = kit_config.schema_default("diff", "threshold")
    confidence = kit_config.schema_default("diff", "confidence")
    p = subparsers.add_parser("diff", help="compare two run directories; exit 2 on unusable input")
    p.add_argument("run_a", help="the first run directory (A), results/<run>")
    p.add_argument("run_b", help="the second run directory (B), results/<run>")
    p.add_argument("--threshold", type=float, default=threshold,
                   help=f"SAME when B/A lies within 1 +- this (config key diff.threshold, default {threshold})")
    p.add_argument("--confidence", type=float, default=confidence,
                   help=f"family-wise confidence of the intervals (config key diff.confidence, default {confidence})")
    p.add_argument("--fail-on-slower", action="store_true", help="exit 1 when any configuration is SLOWER")
    p.add_argument("--markdown", help="write the Markdown here instead of standard output")
    p.add_argument("--html", help="also write a self-contained HTML page")
    p.set_defaults(func=cmd_diff)
