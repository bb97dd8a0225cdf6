"""Mistakes made at the `snakemake` command line: each stops with the kit's one sentence, a
non-zero exit, no traceback and no InputFunctionException block, in a few lines.

Snakemake itself prints one line first in every case ("Using workflow specific profile ..."),
and "Config file ... is extended ..." when --config or --configfile is given: both come before
the Snakefile is read, so the kit cannot change them, and the tests allow them.
Bad targets and config files are dry runs in the checkout; the no-GPU and committed-run cases
run for real in a temporary copy (they stop before any job, with the kit's sentence last).
"""

from __future__ import annotations

import os
import shutil
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, kit_env

# Lines Snakemake prints before it reads the Snakefile.
SNAKEMAKE_PREAMBLE = ("Using workflow specific profile", "Config file ")
TIMING = "results/local/timing/rmsnorm/512x128/t32/rep1.json"


def snakemake(*args: str, cwd: Path = REPO, **extra_env: str) -> subprocess.CompletedProcess:
    exe = shutil.which("snakemake") or str(Path(sys.executable).with_name("snakemake"))
    env = kit_env(cwd, KERNELKIT_KERNELS=str(cwd / "kernels"), **extra_env)
    return subprocess.run([exe, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def kit_lines(done: subprocess.CompletedProcess) -> list[str]:
    """What the command printed, less Snakemake's preamble."""
    lines = (done.stdout + done.stderr).splitlines()
    return [line for line in lines if line.strip() and not line.startswith(SNAKEMAKE_PREAMBLE)]


def assert_one_sentence(done: subprocess.CompletedProcess, expected: str) -> None:
    output = done.stdout + done.stderr
    assert done.returncode != 0, f"exit 0; output: {output}"
    assert "Traceback" not in output and "InputFunctionException" not in output, output
    lines = kit_lines(done)
    assert len(lines) == 1, f"not one line: {lines}"
    assert lines[0].startswith("kernelkit: "), lines[0]
    assert expected in lines[0], f"{expected!r} missing from {lines[0]!r}"


# Each sentence the plan gives a bad target is tested in tests/test_plan.py; here two of them (a
# part of a record's path, and a path outside the checkout) reach the command line as one line.
@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (TIMING.replace("t32", "t99"), "layout 't99' is not configured for kernel 'rmsnorm'; allowed: t32, t256"),
        (f"../{TIMING}", "is outside this checkout"),
    ],
)
def test_bad_target_gets_one_sentence(target, expected):
    assert_one_sentence(snakemake("-n", "--cores", "1", target), expected)


def test_per_card_targets_name_the_run_cards():
    """results/{run}/gpus/{i}/ holds the records of a further card: one the run uses is planned,
    another is refused with the cards allowed."""
    card_ceiling = "results/local/gpus/1/ceilings/copy.json"
    done = snakemake("-n", "--cores", "1", card_ceiling, "--config", "gpus=[0,1]")
    assert done.returncode == 0 and "card_ceiling" in done.stdout, done.stdout + done.stderr
    assert_one_sentence(
        snakemake("-n", "--cores", "1", card_ceiling.replace("/1/", "/2/"), "--config", "gpus=[0,1]"),
        "card '2' is not a further card of this run (config key 'gpus'",
    )


def test_good_targets_still_plan():
    done = snakemake("-n", "--cores", "1", TIMING, "reports/local/figures/clocks.svg")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rule timing_rmsnorm:" in done.stdout and "clock_figure" in done.stdout


def test_duplicate_key_in_a_configfile_names_both_lines(tmp_path):
    text = (REPO / "config" / "config.yaml").read_text()
    path = tmp_path / "dup.yaml"
    path.write_text(text + "\nrun: second\n")
    first = 1 + next(i for i, line in enumerate(text.splitlines()) if line.startswith("run:"))
    done = snakemake("-n", "--cores", "1", "--configfile", str(path))
    assert_one_sentence(done, f"the key 'run' appears twice in one mapping, at lines {first} and")


def test_bad_config_value_gets_one_sentence():
    done = snakemake("-n", "--cores", "1", "--config", "run=a/b")
    assert_one_sentence(done, "config key 'run'")


def test_snakemake_own_config_errors_stay_short_where_the_kit_cannot_reach(tmp_path):
    """A missing file or a YAML syntax error stops Snakemake before it reads the Snakefile, so
    the kit cannot word them (README says so); this pins what a user sees."""
    missing = snakemake("-n", "--configfile", str(tmp_path / "nosuch.yaml"))
    assert missing.returncode != 0
    assert "No such file or directory" in missing.stdout + missing.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("run: [a\n")
    syntax = snakemake("-n", "--configfile", str(broken))
    assert syntax.returncode != 0
    assert "Config file is not valid JSON or YAML" in syntax.stdout + syntax.stderr


def checkout_copy(tmp_path: Path, runs: list[str], synthetic_runs: tuple[str, ...] = ()) -> Path:
    """The workflow's tracked files (as in this working tree), the named runs and synthetic runs
    of these names (tests/synthetic.py: rmsnorm only, two of its controls), in a new git repository
    where the runs are committed."""
    copy = tmp_path / "checkout"
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in listed.decode().split("\0"):
        if not name or (name.startswith(("results/", "reports/")) and name.split("/")[1] not in runs):
            continue
        source = REPO / name
        if not source.exists() and not source.is_symlink():
            continue
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), copy / name)
        else:
            shutil.copy2(source, copy / name)
    for untracked in (REPO / "workflow").rglob("*"):
        target = copy / untracked.relative_to(REPO)
        if untracked.is_file() and "__pycache__" not in untracked.parts and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(untracked, target)
    if synthetic_runs:
        import synthetic

        for name in synthetic_runs:
            synthetic.write_run(copy, name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    subprocess.run([*git, "add", "-A"], cwd=copy, check=True)
    subprocess.run([*git, "commit", "-qm", "copy"], cwd=copy, check=True)
    return copy


def cuda_usable() -> bool:
    sys.path.insert(0, str(REPO / "workflow"))
    from kernelkit import KitError, device

    try:
        device.cupy()
    except KitError:
        return False
    return True


# What the workflow says of a committed run before it plans anything (common.smk).
COMMITTED_NOTE = re.compile(r"kernelkit: run '[^']+' is committed evidence: ")


def assert_stopped_before_any_job(done: subprocess.CompletedProcess, expected: str) -> str:
    """A real run that the kit stopped once the jobs were planned (kernelkit.guards.before_first_job):
    non-zero, no traceback, no job started, and the kit's one sentence as the last line; returns it."""
    output = done.stdout + done.stderr
    assert done.returncode != 0, f"exit 0; output: {output}"
    assert "Traceback" not in output and "InputFunctionException" not in output, output
    assert not re.search(r"^(local)?rule \w+:", output, re.M), "a job started"
    said = [line for line in kit_lines(done) if line.startswith("kernelkit") and not COMMITTED_NOTE.match(line)]
    assert len(said) == 1 and said[0] == kit_lines(done)[-1], said
    assert expected in said[0], f"{expected!r} missing from {said[0]!r}"
    return said[0]


@pytest.mark.skipif(cuda_usable(), reason="this machine has CuPy and a GPU: the no-GPU message cannot appear")
@pytest.mark.parametrize("cards", [[], ["gpus=allocated"], ["gpus=[0]"]])
def test_no_gpu_stops_the_run_before_any_job_with_one_sentence(tmp_path, cards):
    """Whoever picks the card (NVML, an allocation, the config): the check before the first job
    (Snakefile's onstart) names what is missing and how many planned jobs need the GPU."""
    copy = checkout_copy(tmp_path, runs=[])
    done = snakemake("--cores", "1", "--config", "run=x", *cards, cwd=copy)
    said = assert_stopped_before_any_job(done, "CuPy is not installed")
    assert said.endswith("(78 planned jobs need the GPU)"), said
    assert not (copy / "results" / "x").exists()
    assert not list((copy / ".snakemake" / "locks").glob("*")) if (copy / ".snakemake" / "locks").exists() else True


def test_committed_run_is_not_overwritten(tmp_path):
    """The config has kernels, layouts and controls that the committed run never recorded, so naming
    it asks for GPU jobs: without overwrite they are refused in one sentence before any job starts,
    and the committed files stay as they are."""
    copy = checkout_copy(tmp_path, runs=[], synthetic_runs=("h200-s5a",))
    before = {p: p.read_bytes() for p in (copy / "results" / "h200-s5a").rglob("*") if p.is_file()}
    done = snakemake("--cores", "1", "--config", "run=h200-s5a", cwd=copy)
    last = assert_stopped_before_any_job(done, "run 'h200-s5a' is committed")
    # Said once before Snakemake plans anything, and once more, with the jobs counted, before the first.
    assert COMMITTED_NOTE.match(kit_lines(done)[0]) and "'h200-s5a'" in kit_lines(done)[0], kit_lines(done)[:3]
    assert last.startswith(
        "kernelkit: run 'h200-s5a' is committed (git tracks files in results/h200-s5a/) and this command would run "
    ), last
    assert last.endswith("name a new run with --config run=NAME, or add --config overwrite=True to replace its evidence")
    after = {p: p.read_bytes() for p in (copy / "results" / "h200-s5a").rglob("*") if p.is_file()}
    assert after == before
    forced = snakemake("-n", "--cores", "1", "--config", "run=h200-s5a", "overwrite=True", cwd=copy)
    assert forced.returncode == 0 and re.search(r"^rule timing_\w+:", forced.stdout, re.M), forced.stdout[-2000:]


def test_a_committed_run_is_reported_from_the_controls_it_ran(tmp_path):
    """Kernel folders gained negative controls after a run was made (the synthetic run holds two of
    rmsnorm's): rebuilding its report must not ask the GPU for the others."""
    import json

    copy = checkout_copy(tmp_path, runs=[], synthetic_runs=("h200-e2",))
    recorded = json.loads((copy / "results" / "h200-e2" / "config.json").read_text())
    config = copy / "e2.yaml"
    config.write_text(json.dumps({key: recorded[key] for key in ("kernels", "timing", "span", "hypotheses", "gpus")
                                  if key in recorded}))
    ran = {p.stem for p in (copy / "results" / "h200-e2" / "controls" / "rmsnorm").glob("*.json")}
    sys.path.insert(0, str(REPO / "workflow"))
    from kernelkit import spec as specs

    assert set(specs.load("rmsnorm").mutations) - ran, "the test needs a control the run lacks"
    done = snakemake("reports/h200-e2/report.md", "-n", "--cores", "1", "--configfile", str(config),
                     "--config", "run=h200-e2", cwd=copy)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-2000:]
    assert not re.search(r"^rule (correctness|negative_controls|sanitize|timing)_\w+:", output, re.M), output[-3000:]
    assert "rule report:" in output


def test_abandoned_temporary_files_go_and_live_ones_stay(tmp_path, monkeypatch):
    """The atomic writer names its host and pid; the cleanup at a run's start deletes a temp
    file only when that writer ran here and is gone."""
    sys.path.insert(0, str(REPO / "workflow"))
    import socket

    from kernelkit import records

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(gone.stdout)
    folder = tmp_path / "timing" / "rmsnorm"
    folder.mkdir(parents=True)
    host = socket.gethostname()
    abandoned = folder / f".rep1.json.tmp-{host}-{dead_pid}-abc123_x"
    live = folder / f".rep2.json.tmp-{host}-{os.getpid()}-abc123_y"
    elsewhere = folder / f".rep3.json.tmp-{host}.other-{dead_pid}-abc123_z"
    foreign = folder / ".rep4.json.tmp-q1w2e3r4"  # a name the writer never makes
    for path in (abandoned, live, elsewhere, foreign):
        path.write_text("{")
    assert records.remove_abandoned_temps(tmp_path) == [abandoned]
    assert not abandoned.exists() and live.exists() and elsewhere.exists() and foreign.exists()

    written = folder / "rep5.json"
    seen = []
    original = os.replace

    def spy(source, target):
        seen.append(Path(source).name)
        original(source, target)

    monkeypatch.setattr(records.os, "replace", spy)
    records.write_json_atomic(written, {"a": 1})
    assert records._TEMP_NAME.match(seen[0])["pid"] == str(os.getpid())
    assert records._TEMP_NAME.match(seen[0])["host"] == host
