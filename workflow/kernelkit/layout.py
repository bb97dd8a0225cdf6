"""The result layout: where each record of a run lives, spelled out once, as templates whose
parts are Snakemake wildcards, so that rules, the plan and the readers share them. A log mirrors
its result under results/{run}/logs/."""

from __future__ import annotations

import os
import re
from pathlib import Path

RUN_DIR = "results/{run}"
CONFIG = f"{RUN_DIR}/config.json"
ENVIRONMENT = f"{RUN_DIR}/environment.json"
CEILING = f"{RUN_DIR}/ceilings/{{ceiling}}.json"
# The ceilings a run measures (kernelkit.ceilings), each a record at CEILING.
CEILING_KINDS = ("copy", "l2", "gemm", "floor")
# Several GPUs: the run's first card records at the two paths above, every further card i under gpus/i/.
CARD_DIR = f"{RUN_DIR}/gpus/{{gpu}}"
CARD_ENVIRONMENT = f"{CARD_DIR}/environment.json"
CARD_CEILING = f"{CARD_DIR}/ceilings/{{ceiling}}.json"
CORRECTNESS = f"{RUN_DIR}/correctness/{{kernel}}/{{layout}}.json"
CONTROL = f"{RUN_DIR}/controls/{{kernel}}/{{control}}.json"
# view: "timing" for warm-cache targets, "cold" for cold ones (see timing_view).
TIMING = f"{RUN_DIR}/{{view}}/{{kernel}}/{{shape}}/{{layout}}/rep{{n}}.json"
SPAN = f"{RUN_DIR}/span/{{kernel}}/{{shape}}/rep{{n}}.json"
# One record per kernel; runs made before hold one per layout, which readers still load.
SANITIZER = f"{RUN_DIR}/sanitizer/{{kernel}}.json"
SANITIZER_PER_LAYOUT = f"{RUN_DIR}/sanitizer/{{kernel}}/{{layout}}.json"
PROFILE = f"{RUN_DIR}/profile/{{kernel}}/{{shape}}/{{layout}}.json"
SUMMARY = f"{RUN_DIR}/summary.csv"

REPORT_DIR = "reports/{run}"
FIGURE = f"{REPORT_DIR}/figures/{{kernel}}.svg"
CLOCK_FIGURE = f"{REPORT_DIR}/figures/clocks.svg"
REPORT_MARKDOWN = f"{REPORT_DIR}/report.md"
REPORT_HTML = f"{REPORT_DIR}/report.html"
DIFF_MARKDOWN = "reports/diff/{a}__vs__{b}/diff.md"
DIFF_HTML = "reports/diff/{a}__vs__{b}/diff.html"

# The kinds of record in a run directory, as readers ask for them: each one's glob in the run directory.
KINDS = {kind: re.sub(r"\{\w+\}", "*", template[len(RUN_DIR) + 1:]) for kind, template in (
    ("timing", TIMING.replace("{view}", "timing")), ("cold", TIMING.replace("{view}", "cold")),
    ("span", SPAN), ("correctness", CORRECTNESS), ("controls", CONTROL), ("ceilings", CEILING),
    ("sanitizer", SANITIZER), ("sanitizer_per_layout", SANITIZER_PER_LAYOUT), ("profile", PROFILE))}


def timing_view(cache: str) -> str:
    """Warm targets live under timing/, cold ones under cold/."""
    return "timing" if cache == "warm" else "cold"


def path(template: str, **parts: object) -> str:
    """One concrete path of a template, every wildcard given."""
    return template.format(**parts)


def log(template: str) -> str:
    """The log of a result under results/{run}/: the same path under results/{run}/logs/, ending
    .log; the rules of results outside results/ spell theirs out."""
    prefix = RUN_DIR + "/"
    if not template.startswith(prefix):
        raise ValueError(f"{template} is not under {RUN_DIR}; name its log")
    return f"{RUN_DIR}/logs/{os.path.splitext(template[len(prefix):])[0]}.log"


def run_result_files(run_dir: str | os.PathLike[str], kind: str) -> list[Path]:
    """The result files of one kind (a key of KINDS) in a run directory, sorted."""
    return sorted(Path(run_dir).glob(KINDS[kind]))


def card_dirs(run_dir: str | os.PathLike[str]) -> list[Path]:
    """The directories holding a card's environment.json and ceilings/: the run's own, then gpus/<i>/."""
    root = Path(run_dir)
    return [root, *sorted((p for p in root.glob("gpus/*") if p.name.isdigit()), key=lambda p: int(p.name))]
