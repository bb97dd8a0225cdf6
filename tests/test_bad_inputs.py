"""Bad input, as a new user types it: every case exits non-zero with one sentence on stderr,
no traceback, and writes nothing outside its own temporary directory.

Each case runs `python -m kernelkit ...` in a fresh process, as a user or CI would, with the
temporary directory as its working directory. Result-file cases corrupt one file of a copy of a
synthetic run B (tests/synthetic.py) and diff it against a synthetic run A of the same configurations.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
from conftest import REPO, kit_env

CONFIG = REPO / "config" / "config.yaml"
TIMING = "timing/rmsnorm/512x128/t32/rep1.json"
# The synthetic runs every case reads, written once for the module (`runs`); cases are made before
# the fixture runs, so they name the runs by these placeholders, filled in when a case is made.
RUNS: dict[str, Path] = {}


def kernelkit(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = kit_env(REPO, KERNELKIT_KERNELS=str(REPO / "kernels"))
    env.pop("KERNELKIT_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "kernelkit", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


# Where the kit writes (its run folders, reports, logs, Snakemake's state) and the checkout's top
# level, where a relative output path would land.
OUTPUT_PLACES = ("results/", "reports/", "logs/", ".snakemake/")


def repo_state() -> set[str]:
    """The paths git sees changed or new where the kit could write into the checkout: a case that
    writes there adds one. Taken around each case, and only there: someone editing the sources
    meanwhile (staging, committing, adding a module) is not the case's doing."""
    done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                          text=True, check=True)
    paths = {line[3:] for line in done.stdout.splitlines() if "D" not in line[:2]}  # a deletion is no write
    return {path for path in paths if path.startswith(OUTPUT_PLACES) or "/" not in path.rstrip("/")}


def assert_one_sentence(done: subprocess.CompletedProcess, expected: str) -> None:
    err = done.stderr
    assert done.returncode != 0, f"exit 0 for bad input; stderr: {err!r}"
    assert "Traceback" not in err and "Traceback" not in done.stdout
    assert err.endswith("\n") and err.count("\n") == 1, f"not one line: {err!r}"
    assert err.startswith("kernelkit"), err
    assert not re.search(r"[.;]\s+[A-Z][a-z]", err.split(": ", 1)[1]), f"more than one sentence: {err!r}"
    assert expected in err, f"{expected!r} missing from {err!r}"


def config_text(edit: Callable[[str], str]) -> Callable[[Path], list[str]]:
    """A case that writes the default config, edited, into the case's directory and checks it."""
    def make(tmp: Path) -> list[str]:
        path = tmp / "bad.yaml"
        text = edit(CONFIG.read_text())
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return ["check-config", str(path)]
    return make


def replace_once(old: str, new: str) -> Callable[[str], str]:
    def edit(text: str) -> str:
        assert old in text, f"{old!r} is no longer in config/config.yaml"
        return text.replace(old, new, 1)
    return edit


def corrupt(relative: str, change: Callable[[Path], None]) -> Callable[[Path], list[str]]:
    """A case that diffs run A against a copy of run B with one file changed."""
    def make(tmp: Path) -> list[str]:
        run = tmp / "b"
        shutil.copytree(RUNS["b"], run)
        change(run / relative)
        return ["diff", str(RUNS["a"]), str(run)]
    return make


def edit_record(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def change(path: Path) -> None:
        record = json.loads(path.read_text())
        edit(record)
        path.write_text(json.dumps(record))  # allows NaN and Infinity, as a careless writer would
    return change


def set_sample(value: object) -> Callable[[Path], None]:
    return edit_record(lambda r: r["samples_us"].__setitem__(3, value))


def fixed(*args: str) -> Callable[[Path], list[str]]:
    return lambda tmp: [arg.format(tmp=tmp, a=RUNS["a"], b=RUNS["b"]) for arg in args]


def no_common_configuration(tmp: Path) -> list[str]:
    run = tmp / "other"
    shutil.copytree(RUNS["b"], run, ignore=shutil.ignore_patterns("timing"))
    source = RUNS["b"] / TIMING
    target = run / "timing/rmsnorm/512x128/t999/rep1.json"
    target.parent.mkdir(parents=True)
    record = json.loads(source.read_text())
    record["layout"] = "t999"
    target.write_text(json.dumps(record))
    return ["diff", str(RUNS["a"]), str(run)]


CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    # Config files, through `kernelkit check-config`.
    ("config that does not exist", fixed("check-config", "{tmp}/nosuch.yaml"), "nosuch.yaml does not exist"),
    ("config that is a directory", fixed("check-config", "{tmp}"), "is a directory, not a YAML file"),
    ("samples as 15.0", config_text(replace_once("samples: 15", "samples: 15.0")), "not 15.0"),
    ("repeats as 3.0", config_text(replace_once("repeats: 3", "repeats: 3.0")), "'timing.repeats'"),
    ("duplicate top-level key", config_text(lambda t: t + "\nrun: again\n"), "the key 'run' appears twice"),
    ("duplicate kernel", config_text(lambda t: t.replace("kernels:\n", "kernels:\n  rmsnorm: {layouts: [t32], shapes: [8x8]}\n", 1)),
     "the key 'rmsnorm' appears twice"),
    ("run name with a newline", config_text(replace_once("run: local", 'run: "local\\n"')), "newline"),
    ("shape with a newline", config_text(replace_once("- 512x128", '- "512x128\\n"')), "newline"),
    ("hex shape", config_text(replace_once("- 512x128", "- 0x128")), "shape 0x128 was read by YAML as the number 296"),
    ("huge shape", config_text(replace_once("- 512x128", "- 99999999999x99999999999")), "above 2147483647"),
    ("a billion samples", config_text(replace_once("samples: 15", "samples: 1000000000")), "1 to 100000"),
    ("300-character run name", config_text(replace_once("run: local", "run: " + "a" * 300)), "at most 100"),
    ("unclosed bracket", config_text(replace_once("timing:", "timing: [")), "is not valid YAML"),
    ("tab indentation", config_text(replace_once("  samples: 15", "\tsamples: 15")), ", column "),
    ("unknown top-level key", config_text(lambda t: t + "\nwarmup: 3\n"), "'warmup' is not known"),
    ("unknown layout", config_text(replace_once("[t32, t256, vec", "[t32, t64, vec")), "'kernels.rmsnorm.layouts'"),
    ("empty config file", config_text(lambda t: ""), "config key 'run' is missing"),
    ("config that is a list", config_text(lambda t: "- run\n- kernels\n"), "config key '(top level)'"),
    ("config in Latin-1", config_text(lambda t: b"run: caf\xe9\n"), "cannot be read (UnicodeDecodeError"),
    ("reserved run name", config_text(replace_once("run: local", "run: diff")), "not 'diff'"),
    ("two config files", fixed("check-config", "a.yaml", "b.yaml"), "unrecognized arguments: b.yaml"),
    # Arguments of `kernelkit diff` and `kernelkit report`.
    ("threshold 0", fixed("diff", "{a}", "{b}", "--threshold", "0"), "argument --threshold: must be a number strictly"),
    ("threshold -1", fixed("diff", "{a}", "{b}", "--threshold=-1"), "between 0 and 1, not '-1'"),
    ("threshold in words", fixed("diff", "{a}", "{b}", "--threshold", "two"), "not 'two'"),
    ("confidence 1.5", fixed("diff", "{a}", "{b}", "--confidence", "1.5"), "argument --confidence: must be"),
    ("one run only", fixed("diff", "{a}"), "the following arguments are required: run_b"),
    ("unknown option", fixed("diff", "{a}", "{b}", "--fail-on-faster"), "unrecognized arguments: --fail-on-faster"),
    ("run that does not exist", fixed("diff", "{a}", "{tmp}/nosuch"), "run directory"),
    ("file as a run directory", fixed("diff", "{a}/environment.json", "{b}"),
     "environment.json is a file, not a run directory"),
    ("empty run directory", fixed("diff", "{a}", "{tmp}"), "holds no timing records"),
    ("runs with nothing in common", no_common_configuration, "have no timed configuration (kernel, shape, layout) in common"),
    ("report without --markdown", fixed("report", "{b}"), "the following arguments are required: --markdown"),
    ("report of a missing run", fixed("report", "{tmp}/nosuch", "--markdown", "{tmp}/r.md"), "does not exist"),
    ("no subcommand", fixed(), "the following arguments are required: command"),
    # Result files, through `kernelkit diff`.
    ("samples as strings", corrupt(TIMING, edit_record(lambda r: r.update(samples_us=[str(s) for s in r["samples_us"]]))),
     "holds sample 0 = '"),
    ("samples as a dict", corrupt(TIMING, edit_record(lambda r: r.update(samples_us={"median": 1.0}))),
     "field 'samples_us' must be a non-empty list of numbers"),
    ("empty samples", corrupt(TIMING, edit_record(lambda r: r.update(samples_us=[]))), "non-empty list"),
    ("NaN sample", corrupt(TIMING, set_sample(float("nan"))), "holds sample 3 = nan"),
    ("infinite sample", corrupt(TIMING, set_sample(float("inf"))), "holds sample 3 = inf"),
    ("zero sample", corrupt(TIMING, set_sample(0)), "holds sample 3 = 0"),
    ("negative sample", corrupt(TIMING, set_sample(-2.5)), "holds sample 3 = -2.5"),
    ("boolean sample", corrupt(TIMING, set_sample(True)), "holds sample 3 = True"),
    ("no samples key", corrupt(TIMING, edit_record(lambda r: r.pop("samples_us"))), "lacks the field(s) samples_us"),
    ("no kernel key", corrupt(TIMING, edit_record(lambda r: r.pop("kernel"))), "lacks the field(s) kernel"),
    ("repeat as text", corrupt(TIMING, edit_record(lambda r: r.update(repeat="1"))), "field 'repeat' must be an integer from 1, not '1'"),
    ("record of another target", corrupt(TIMING, edit_record(lambda r: r.update(shape="4096x128"))),
     "not the rmsnorm 512x128 t32 rep1 its path names"),
    ("truncated timing file", corrupt(TIMING, lambda p: p.write_text(p.read_text()[:200])), "is not valid JSON"),
    ("timing file holding a list", corrupt(TIMING, lambda p: p.write_text("[1, 2, 3]")), "holds a JSON list"),
    ("environment missing", corrupt("environment.json", lambda p: p.unlink()), "environment.json: does not exist"),
    ("environment a string", corrupt("environment.json", lambda p: p.write_text('"H200"')), "holds a JSON str"),
    ("correctness layouts not a list", corrupt("correctness/rmsnorm/t32.json", edit_record(lambda r: r.update(layouts=7))),
     "field 'layouts' must be a list of layout names"),
    ("control without its name", corrupt("controls/rmsnorm/tail.json", edit_record(lambda r: r.pop("control"))),
     "lacks the field(s) control"),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    from synthetic import write_run

    root = tmp_path_factory.mktemp("bad-inputs")
    RUNS.update(a=write_run(root, "a"), b=write_run(root, "b", seed=1))
    yield RUNS
    RUNS.clear()


@pytest.mark.parametrize("name, make_args, expected", CASES, ids=[case[0] for case in CASES])
def test_bad_input_gets_one_sentence_and_writes_nothing_outside(tmp_path, runs, name, make_args, expected):
    work = tmp_path / "work"
    work.mkdir()
    args = make_args(work)
    repo_before = repo_state()
    done = kernelkit(args, cwd=work)
    assert_one_sentence(done, expected)
    assert done.returncode == 2, f"{name}: exit {done.returncode}, expected 2 for unusable input"
    assert repo_state() <= repo_before

