"""The committed reference runs: their reports and their diff are what this kit renders from their
committed records, byte for byte (the pages carry no time of their own).

Which runs are the reference runs is read from the runs index, results/README.md, section
"Reference runs (current kit)": the rows whose name is a folder under results/. The diff between
the first two (the default profile against --cores 1) is reports/diff/<second>__vs__<first>/.
"""

from __future__ import annotations

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


def kit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelkit", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("run", RUNS or ["none"])
def test_a_reference_runs_report_is_what_this_kit_renders_from_its_records(run, tmp_path):
    done = kit("report", f"results/{run}", "--figures", f"reports/{run}/figures",
               "--markdown", str(tmp_path / "report.md"), "--html", str(tmp_path / "report.html"))
    assert done.returncode == 0, done.stderr
    for name in ("report.md", "report.html"):
        assert (tmp_path / name).read_bytes() == (REPO / "reports" / run / name).read_bytes(), name


@pytest.mark.skipif(len(RUNS) < 2, reason="the reference diff needs the two reference runs of the default config")
def test_the_reference_diff_is_what_this_kit_renders_from_the_two_runs(tmp_path):
    first, second = RUNS[:2]
    done = kit("diff", f"results/{first}", f"results/{second}",
               "--markdown", str(tmp_path / "diff.md"), "--html", str(tmp_path / "diff.html"))
    assert done.returncode == 0, done.stderr
    folder = REPO / "reports" / "diff" / f"{first}__vs__{second}"
    for name in ("diff.md", "diff.html"):
        assert (tmp_path / name).read_bytes() == (folder / name).read_bytes(), name
