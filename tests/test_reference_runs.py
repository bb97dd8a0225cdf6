"""The committed reference runs: their reports (figures included) and their diff are what this kit
renders from their committed records, byte for byte (the pages carry no time of their own).

Which runs are the reference runs is read from the runs index, results/README.md, section
"Reference runs (current kit)": the rows whose name is a folder under results/. The diff between
the first two (the default profile against --cores 1) is reports/diff/<first>__vs__<second>/.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def reference_runs() -> list[str]:
    text = (REPO / "results" / "README.md").read_text(encoding="utf-8")
    section = text.split("## Reference runs", 1)[1].split("\n## ", 1)[0] if "## Reference runs" in text else ""
    names = re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE)
    return [name for name in names if (REPO / "results" / name).is_dir()]


RUNS = reference_runs()
pytestmark = pytest.mark.skipif(not RUNS, reason="no reference run is committed yet (results/README.md lists none)")


def kit(tree: Path, *args: str) -> subprocess.CompletedProcess:
    """The kit's command run in `tree`, a checkout's layout whose results/ and kernels/ are this
    checkout's (linked): the pages link to records by relative path, so they are written where the
    committed ones stand, relative to the records."""
    (tree / "results").mkdir(exist_ok=True)
    for run in RUNS:
        if not (tree / "results" / run).exists():
            (tree / "results" / run).symlink_to(REPO / "results" / run)
    if not (tree / "kernels").exists():
        (tree / "kernels").symlink_to(REPO / "kernels")
    return subprocess.run([sys.executable, "-m", "kernelkit", *args], cwd=tree, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO / "workflow"), "KERNELKIT_KERNELS": "kernels"})


@pytest.mark.parametrize("run", RUNS or ["none"])
def test_a_reference_runs_report_is_what_this_kit_renders_from_its_records(run, tmp_path):
    out = tmp_path / "reports" / run
    committed = REPO / "reports" / run
    # The figures first (each from its kernel's timing records; the order of the files does not matter).
    for figure in sorted((committed / "figures").glob("*.svg")):
        records = sorted(map(str, (REPO / "results" / run / "timing").glob(
            "*/*/*/rep*.json" if figure.stem == "clocks" else f"{figure.stem}/*/*/rep*.json")))
        command = ["clock-figure"] if figure.stem == "clocks" else ["figure", "--kernel", figure.stem]
        done = kit(tmp_path, *command, "--output", f"reports/{run}/figures/{figure.name}", *records)
        assert done.returncode == 0, done.stderr
        assert (out / "figures" / figure.name).read_bytes() == figure.read_bytes(), figure.name
    done = kit(tmp_path, "report", f"results/{run}", "--figures", f"reports/{run}/figures",
               "--markdown", f"reports/{run}/report.md", "--html", f"reports/{run}/report.html")
    assert done.returncode == 0, done.stderr
    for name in ("report.md", "report.html"):
        assert (out / name).read_bytes() == (committed / name).read_bytes(), name


@pytest.mark.skipif(len(RUNS) < 2, reason="the reference diff needs the two reference runs of the default config")
def test_the_reference_diff_is_what_this_kit_renders_from_the_two_runs(tmp_path):
    first, second = RUNS[:2]
    pair = f"reports/diff/{first}__vs__{second}"
    (tmp_path / pair).mkdir(parents=True)
    done = kit(tmp_path, "diff", f"results/{first}", f"results/{second}",
               "--markdown", f"{pair}/diff.md", "--html", f"{pair}/diff.html")
    assert done.returncode == 0, done.stderr
    for name in ("diff.md", "diff.html"):
        assert (tmp_path / pair / name).read_bytes() == (REPO / pair / name).read_bytes(), name
