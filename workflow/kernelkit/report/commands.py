"""The report stage's commands: `summary`, `figure`, `clock-figure` and `report`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kernelkit import KitError, sha256_text
from kernelkit.outputs import check_outputs, write_outputs
from kernelkit.records import read_checked, split_skipped, write_text_atomic


def _timed(paths: list[str]) -> list[dict[str, Any]]:
    return split_skipped([read_checked(path, "cold" if Path(path).parts[-5:-4] == ("cold",) else "timing")
                          for path in paths])[0]


def cmd_summary(args: argparse.Namespace) -> int:
    from kernelkit import summary

    table = summary.summarize_records(_timed(args.timing))
    write_text_atomic(args.output, table.to_csv(index=False, float_format="%.6f"))
    return 0


def cmd_figure(args: argparse.Namespace) -> int:
    """The timing figure of --kernel, or (clock-figure) the figure of every NVML reading."""
    from kernelkit import figures

    timed = _timed(args.timing)
    write_text_atomic(args.output, figures.timing_figure(timed, args.kernel) if args.kernel else figures.clock_figure(timed))
    return 0


MARKDOWN_HASH = "kernelkit-markdown-sha256"


def cmd_report(args: argparse.Namespace) -> int:
    from kernelkit import document
    from kernelkit.report.assemble import build

    check_outputs([args.markdown, *([args.html] if args.html else [])])  # before the work, not after
    try:
        title, sections = build(Path(args.run_dir), Path(args.figures) if args.figures else None,
                                report_dir=Path(args.markdown).resolve().parent)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as error:
        # Run checks every record it reads; what still slips through is named, never a traceback.
        raise KitError(f"a result file under {args.run_dir} cannot be reported ({type(error).__name__}: {error})") from None
    markdown = document.render_markdown(title, sections)
    write_outputs([(args.markdown, markdown), *([(args.html, document.render_html(
        title, sections, meta={MARKDOWN_HASH: sha256_text(markdown)}))] if args.html else [])])
    return 0


def register(subparsers: Any) -> None:
    """Add the report stage's subcommands to the kit's parser."""
    p = subparsers.add_parser("summary", help="one tidy row per timed target")
    p.add_argument("--output", required=True, help="the CSV to write")
    p.add_argument("timing", nargs="+", help="timing files (rep<n>.json) to summarise")
    p.set_defaults(func=cmd_summary)

    p = subparsers.add_parser("figure", help="the timing figure (SVG) of one kernel")
    p.add_argument("--kernel", required=True, help="the kernel whose timing files to draw")
    p.add_argument("--output", required=True, help="the SVG to write")
    p.add_argument("timing", nargs="+", help="timing files (rep<n>.json); other kernels' are ignored")
    p.set_defaults(func=cmd_figure)

    p = subparsers.add_parser("clock-figure", help="the SVG of every NVML reading taken during the timed samples")
    p.add_argument("--output", required=True, help="the SVG to write")
    p.add_argument("timing", nargs="+", help="timing files (rep<n>.json) holding clock traces")
    p.set_defaults(func=cmd_figure, kernel=None)

    p = subparsers.add_parser("report", help="the report of one run directory, as Markdown and optionally HTML")
    p.add_argument("run_dir", help="results/<run>")
    p.add_argument("--markdown", required=True, help="report.md to write")
    p.add_argument("--html", help="report.html to write beside it (self-contained, holds the Markdown's sha256)")
    p.add_argument("--figures", help="folder holding <kernel>.svg figures to include")
    p.set_defaults(func=cmd_report)
