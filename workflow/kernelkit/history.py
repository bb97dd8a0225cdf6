"""`kernelkit history results/`: every configuration's median across all the runs in a folder, by
date, with each run's card and kit commit, to see a regression across many runs. Records are read
only through the kit's validating reader: a run it refuses is named with its sentence, never guessed at."""

from __future__ import annotations

import argparse
import csv
import io
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from statistics import median
from typing import Any

from kernelkit import KitError, units
from kernelkit.outputs import check_outputs, write_outputs
from kernelkit.records import printable, read_checked, read_run_records
from kernelkit.units import natural_key, sort_key

CSV_COLUMNS = ("run", "date_utc", "card", "gpu_uuid", "driver", "kit_commit", "kit_tree_dirty", "kernel", "shape",
               "layout", "repeats", "median_us", "repeat_min_us", "repeat_max_us")


@dataclass
class RunSummary:
    """One run of the folder: when, on what, by which kit, and every configuration's numbers."""

    name: str
    date: str                       # captured_utc of the environment record (ISO 8601)
    card: str
    uuid: str
    driver: str
    kit_commit: str
    kit_tree_dirty: Any             # True, False, or what the record says (an older kit: missing)
    # (kernel, shape, layout) -> (pooled median, repeats' medians)
    medians: dict[tuple[str, str, str], tuple[float, list[float]]] = field(default_factory=dict)

    @property
    def timestamp(self) -> float:
        try:
            return datetime.fromisoformat(self.date).timestamp()
        except ValueError:
            return 0.0


def _text(value: Any, missing: str = "not recorded") -> str:
    return str(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value) else missing


def read_run(path: Path) -> RunSummary:
    """One run folder through the kit's reader: its environment and every warm timing record."""
    environment = read_checked(path / "environment.json", "environment")
    cuda, gpu, host = (environment.get(key) if isinstance(environment.get(key), dict) else {}
                       for key in ("cuda", "gpu", "host"))
    pooled: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for _, record in read_run_records(path, "timing"):
        if "skipped" not in record:
            pooled.setdefault((record["kernel"], record["shape"], record["layout"]), []).append(record)
    if not pooled:
        raise KitError(f"run directory {printable(str(path))} holds no timing records with samples")
    return RunSummary(path.name, _text(environment.get("captured_utc"), ""), _text(cuda.get("device_name")),
                      _text(gpu.get("uuid")), _text(gpu.get("driver_version")), _text(host.get("kit_commit")),
                      host.get("kit_tree_dirty"), {
                          key: (median([s for r in records for s in r["samples_us"]]),
                                [median(r["samples_us"]) for r in sorted(records, key=lambda r: r["repeat"])])
                          for key, records in pooled.items()})


def collect(folder: Path) -> tuple[list[RunSummary], list[tuple[str, str]]]:
    """Every run folder under `folder` (one with environment.json) by date, and those refused with why."""
    if not folder.is_dir():
        raise KitError(f"{printable(str(folder))} is not a folder of runs (results/)")
    runs, refused = [], []
    for path in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "environment.json").is_file()):
        try:
            runs.append(read_run(path))
        except KitError as error:
            refused.append((path.name, printable(str(error))))
    if not runs:
        raise KitError(f"{printable(str(folder))} holds no run the kit can read"
                       + (f" ({len(refused)} refused: {refused[0][1]})" if refused else " (no folder with environment.json)"))
    runs.sort(key=lambda run: (run.timestamp, run.name))
    return runs, refused


def csv_text(runs: list[RunSummary]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    writer.writerows([run.name, run.date, run.card, run.uuid, run.driver, run.kit_commit,
                      run.kit_tree_dirty if isinstance(run.kit_tree_dirty, bool) else "not recorded",
                      *key, len(per), f"{pooled:.6f}", f"{min(per):.6f}", f"{max(per):.6f}"] for run in runs
                     for key, (pooled, per) in sorted(run.medians.items(), key=lambda i: sort_key(i[0])))
    return out.getvalue()


def _latest_change(runs: list[RunSummary], key: tuple[str, str, str]) -> str:
    """The latest run's median over the median of the earlier runs on the same card model."""
    *timed, latest = [run for run in runs if key in run.medians]
    if not timed:
        return "one run"
    earlier = [run.medians[key][0] for run in timed if run.card == latest.card]
    return f"{latest.medians[key][0] / median(earlier) - 1:+.1%}" if earlier else "no earlier run on this card model"


def build(folder: Path, runs: list[RunSummary], refused: list[tuple[str, str]]) -> tuple[str, list[Any]]:
    from kernelkit import document as doc, figures

    cards = sorted({run.card for run in runs})
    commits = sorted({run.kit_commit for run in runs})
    blocks: list[doc.Block] = [doc.Paragraph(
        f"{len(runs)} runs in {folder}, from {runs[0].date[:10] or 'an unknown date'} to "
        f"{runs[-1].date[:10] or 'an unknown date'}, on {len(cards)} card model{'s' if len(cards) != 1 else ''} "
        f"({', '.join(cards)}) and {len(commits)} kit commit{'s' if len(commits) != 1 else ''}; ordered by the date "
        "each run's environment record was captured. A median pools every sample of every repeat; the range is the "
        "min-max of the repeats' medians. Latest change: the latest run's median over the median of the earlier runs "
        "on the same card model."),
        doc.Table(["Run", "Date (UTC)", "Card", "Driver", "Kit commit", "Configurations"], [
            [run.name, run.date[:19].replace("T", " "), f"{run.card} ({run.uuid[:12]})", run.driver,
             run.kit_commit[:12] + (" (uncommitted changes)" if run.kit_tree_dirty is True else ""),
             str(len(run.medians))] for run in runs], numeric=(5,))]
    if refused:
        blocks.insert(1, doc.Paragraph(f"Not read ({len(refused)}): " + "; ".join(
            f"{name}: {why}" for name, why in refused) + "."))
    pairs = sorted({(k, s) for run in runs for (k, s, _) in run.medians}, key=sort_key)
    figure_blocks: list[doc.Block] = []
    table_blocks: list[doc.Block] = []
    for kernel, shape in pairs:
        layouts = sorted({l for run in runs for (k, s, l) in run.medians if (k, s) == (kernel, shape)}, key=natural_key)
        keys = {layout: (kernel, shape, layout) for layout in layouts}
        series = {layout: [(i, run.medians[key][0]) for i, run in enumerate(runs) if key in run.medians]
                  for layout, key in keys.items()}
        timed = sorted({x for points in series.values() for x, _ in points})
        firsts = list({runs[x].date[:10]: x for x in reversed(timed)}.items())[::-1]  # each date at its first run
        ticks = [(x, date[5:]) for date, x in firsts[::max(1, -(-len(firsts) // 6))]]
        svg = figures.history_figure(f"{kernel} {shape}", series, ticks)
        figure_blocks.append(doc.Figure(svg, None, f"{kernel} {shape}: median per run and layout", small=True))
        rows = [[layout, _latest_change(runs, key), "; ".join(
            f"{run.name} {units.short(run.medians[key][0])} ({units.spread(run.medians[key][1])})"
            for run in runs if key in run.medians)] for layout, key in keys.items()]
        table_blocks.append(doc.Details(f"{kernel} {shape}: every run's median per layout", [
            doc.Table(["Layout", "Latest change", "Median per run, by date (range over repeats)"], rows)]))
    return f"kernelkit history: {folder}", [doc.Section("Runs", blocks),
                                            doc.Section("Configurations", figure_blocks + table_blocks)]


def run_command(args: argparse.Namespace) -> int:
    from kernelkit import document

    if not (outputs := [path for path in (args.markdown, args.html, args.csv) if path]):
        raise KitError("name at least one output: --markdown, --html or --csv")
    check_outputs(outputs)  # before the work, not after
    folder = Path(args.folder)
    runs, refused = collect(folder)
    written: list[tuple[str, str]] = []
    if args.markdown or args.html:
        title, sections = build(folder, runs, refused)
        written = [(path, render(title, sections)) for path, render in
                   ((args.markdown, document.render_markdown), (args.html, document.render_html)) if path]
    if args.csv:
        written.append((args.csv, csv_text(runs)))
    write_outputs(written)
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("history", help="every configuration's median across all the runs in a folder, by date")
    p.add_argument("folder", help="the folder of runs (results/)")
    p.add_argument("--markdown", help="the page to write, as Markdown")
    p.add_argument("--html", help="the page to write, as self-contained HTML")
    p.add_argument("--csv", help="one row per run and configuration")
    p.set_defaults(func=run_command)
