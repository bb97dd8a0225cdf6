"""The committed reference runs: their reports (figures included) and their diff are what this kit
renders from their committed records, byte for byte (the pages carry no time of their own).

Which runs are the reference runs is read from the runs index, results/README.md, section
"Reference runs (current kit)": the rows whose name is a folder under results/. The diff between
the first two (the default profile against --cores 1) is reports/diff/<first>__vs__<second>/.
"""

from __future__ import annotations

import re
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


@pytest.fixture
def kit(tmp_path, monkeypatch):
    """The kit's command line, run in `tmp_path` laid out as a checkout whose results/ and kernels/
    are this checkout's (linked): the pages link to records by relative path, so they are written
    where the committed ones stand, relative to the records. In this process: one import of the kit
    and matplotlib serves every figure."""
    from kernelkit.cli import main

    (tmp_path / "results").mkdir()
    for run in RUNS:
        (tmp_path / "results" / run).symlink_to(REPO / "results" / run)
    (tmp_path / "kernels").symlink_to(REPO / "kernels")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KERNELKIT_KERNELS", "kernels")
    return lambda *args: main(list(args))


@pytest.mark.parametrize("run", RUNS or ["none"])
def test_a_reference_runs_report_is_what_this_kit_renders_from_its_records(run, tmp_path, kit):
    out = tmp_path / "reports" / run
    committed = REPO / "reports" / run
    # The figures first (each from its kernel's timing records; the order of the files does not matter).
    for figure in sorted((committed / "figures").glob("*.svg")):
        records = sorted(map(str, (REPO / "results" / run / "timing").glob(
            "*/*/*/rep*.json" if figure.stem == "clocks" else f"{figure.stem}/*/*/rep*.json")))
        command = ["clock-figure"] if figure.stem == "clocks" else ["figure", "--kernel", figure.stem]
        assert kit(*command, "--output", f"reports/{run}/figures/{figure.name}", *records) == 0
        assert (out / "figures" / figure.name).read_bytes() == figure.read_bytes(), figure.name
    assert kit("report", f"results/{run}", "--figures", f"reports/{run}/figures",
               "--markdown", f"reports/{run}/report.md", "--html", f"reports/{run}/report.html") == 0
    for name in ("report.md", "report.html"):
        assert (out / name).read_bytes() == (committed / name).read_bytes(), name


@pytest.mark.skipif(len(RUNS) < 2, reason="the reference diff needs the two reference runs of the default config")
def test_the_reference_diff_is_what_this_kit_renders_from_the_two_runs(tmp_path, kit):
    first, second = RUNS[:2]
    pair = f"reports/diff/{first}__vs__{second}"
    (tmp_path / pair).mkdir(parents=True)
    assert kit("diff", f"results/{first}", f"results/{second}", "--markdown", f"{pair}/diff.md",
               "--html", f"{pair}/diff.html") == 0
    for name in ("diff.md", "diff.html"):
        assert (tmp_path / pair / name).read_bytes() == (REPO / pair / name).read_bytes(), name
