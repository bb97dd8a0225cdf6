"""Bad input, by class: each case gets exit 2, one sentence naming the file or key, no traceback,
and nothing written outside results/ and reports/ (or, where the input is valid after all, a
correct result). The classes: config files, names that are paths, corrupted records (the report
and the diff refuse each with the same sentence), unbounded work, writes that could destroy
evidence, text injection, and the scaffold. Each command runs as a user runs it, in a process of
its own, in a scratch project folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

import synthetic

REPO = Path(__file__).resolve().parent.parent
KIT = [sys.executable, "-m", "kernelkit"]


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """One small synthetic run (two kernels, sanitizer, span, ceilings) that every case copies."""
    root = tmp_path_factory.mktemp("base")
    return synthetic.write_run(root, "base", spans=("rmsnorm",), sanitizer=True)


@pytest.fixture
def project(tmp_path, base_run) -> Path:
    """A scratch project: results/a and results/b (copies of the base run) and an empty reports/."""
    for name in ("a", "b"):
        shutil.copytree(base_run, tmp_path / "results" / name)
    (tmp_path / "reports").mkdir()
    return tmp_path


def tree(folder: Path) -> set[str]:
    """Every file under `folder` outside results/ and reports/."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and p.relative_to(folder).parts[0] not in ("results", "reports")}


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO / "workflow"), **env})


def refused(done: subprocess.CompletedProcess, *named: str) -> str:
    """The refusal's one sentence, after checking exit 2, one line, no traceback and the names."""
    err = done.stderr.strip()
    assert done.returncode == 2, (done.returncode, done.stdout[-500:], err[-1000:])
    assert "Traceback" not in err and "internal error" not in err, err
    assert err.count("\n") == 0, err
    assert "\x1b" not in err, "a control character reached the terminal"
    for name in named:
        assert name in err, (name, err)
    return err


@pytest.fixture
def kit(monkeypatch, capsys) -> Callable[..., subprocess.CompletedProcess]:
    """`kernelkit ARGS` in the folder given, in this process (the CLI's own entry, a process's
    worth of start-up less per case); it checks that nothing was written outside results/ and reports/."""
    from kernelkit.cli import main

    def call(folder: Path, *args: str) -> subprocess.CompletedProcess:
        before = tree(folder)
        monkeypatch.chdir(folder)
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exit:  # argparse's own refusals
            code = exit.code
        out, err = capsys.readouterr()
        assert tree(folder) == before, f"written outside results/ and reports/: {tree(folder) - before}"
        return subprocess.CompletedProcess(["kernelkit", *args], code, out, err)

    return call


# --- Config files -------------------------------------------------------------------------------

DEFAULT = (REPO / "config" / "config.yaml").read_text()
BOMB = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"]
                 + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)])


def nested_list(depth: int) -> str:
    return "x: " + "[" * depth + "]" * depth


def nested_map(depth: int) -> str:
    return "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "v: 1\n"


CONFIG_FILES: dict[str, tuple[bytes | str | None, tuple[str, ...]]] = {
    # name: (content, or None for no file at all; the words the sentence must hold)
    "missing file": (None, ("bad.yaml", "does not exist")),
    "a folder": ("<folder>", ("bad.yaml", "directory")),
    "not UTF-8": (b"run: \xff\xfe\n", ("bad.yaml",)),
    "a list": ("- a\n- b\n", ("bad.yaml",)),
    "a scalar": ("42\n", ("bad.yaml",)),
    "YAML syntax": ("kernels: [a, b\n", ("bad.yaml", "line")),
    "tab indentation": ("kernels:\n\trmsnorm: {}\n", ("bad.yaml",)),
    "duplicate key": (DEFAULT + "run: again\n", ("bad.yaml", "twice")),
    "alias bomb": (BOMB, ("bad.yaml", "aliases")),
    "many aliases": ("a: &a 1\n" + "".join(f"k{i}: *a\n" for i in range(150)), ("bad.yaml", "aliases")),
    "self-referencing alias": ("a: &a [*a]\n", ("bad.yaml",)),
    "list 2000 deep": (nested_list(2000), ("bad.yaml", "deeper")),
    "list 60 deep": (nested_list(60), ("bad.yaml", "deeper")),
    "mapping 80 deep": (nested_map(80), ("bad.yaml", "deeper")),
    "larger than 1 MiB": ("# " + "x" * (1024 * 1024 + 10) + "\n", ("bad.yaml", "larger")),
    "unknown top-level key": (DEFAULT + "colour: blue\n", ("colour",)),
    "run with a slash": (DEFAULT.replace("run: local", "run: a/b"), ("run",)),
    "run named diff": (DEFAULT.replace("run: local", "run: diff"), ("run",)),
    "run too long": (DEFAULT.replace("run: local", "run: " + "r" * 200), ("run",)),
    "run empty": (DEFAULT.replace("run: local", "run: ''"), ("run",)),
    "unknown kernel": (DEFAULT.replace("  rmsnorm:\n", "  nosuch:\n"), ("nosuch",)),
    "unknown layout": (DEFAULT.replace("[t32, t256,", "[t33, t256,"), ("t33",)),
    "shape as a number": (DEFAULT.replace("      - 512x128\n", "      - 512\n"), ("shape",)),
    "shape of wrong rank": (DEFAULT.replace("      - 512x128\n", "      - 512x128x4\n"), ("512x128x4",)),
    "shape zero": (DEFAULT.replace("      - 512x128\n", "      - 0x128\n"), ("0x128",)),
    "samples zero": (DEFAULT.replace("  samples: 15", "  samples: 0"), ("samples",)),
    "samples float": (DEFAULT.replace("  samples: 15", "  samples: 15.0"), ("samples",)),
    "samples text": (DEFAULT.replace("  samples: 15", "  samples: many"), ("samples",)),
    "samples huge": (DEFAULT.replace("  samples: 15", "  samples: 100000000"), ("samples",)),
    "repeats zero": (DEFAULT.replace("  repeats: 3", "  repeats: 0"), ("repeats",)),
    "repeats negative": (DEFAULT.replace("  repeats: 3", "  repeats: -2"), ("repeats",)),
    "threshold above 1": (DEFAULT.replace("  threshold: 0.02", "  threshold: 2.0"), ("threshold",)),
    "confidence zero": (DEFAULT.replace("  confidence: 0.95", "  confidence: 0"), ("confidence",)),
    "hypothesis of an unknown layout": (DEFAULT.replace("    faster: t256", "    faster: t999"), ("t999",)),
    "hypothesis of an unknown kernel": (DEFAULT.replace("  - kernel: rmsnorm\n", "  - kernel: nosuch\n"), ("nosuch",)),
    "control character in run": (DEFAULT.replace("run: local", 'run: "a\\x1bb"'), ("run",)),
    "layouts empty": (DEFAULT.replace("[t32, t256, vec, torch, triton]", "[]"), ("layouts",)),
    "layouts not a list": (DEFAULT.replace("[t32, t256, vec, torch, triton]", "t32"), ("layouts",)),
    "span kernels unknown": (DEFAULT.replace("kernels: [matmul, layernorm,", "kernels: [nosuch, layernorm,"), ("nosuch",)),
    "warmup negative": (DEFAULT.replace("  warmup_launches: 20", "  warmup_launches: -1"), ("warmup_launches",)),
}


@pytest.mark.parametrize("case", sorted(CONFIG_FILES))
def test_check_config_refuses_a_bad_file_in_one_sentence_within_seconds(tmp_path, kit, case):
    content, words = CONFIG_FILES[case]
    path = tmp_path / "bad.yaml"
    if content == "<folder>":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    refused(kit(tmp_path, "check-config", str(path)), *words)


def test_the_default_configs_pass_the_same_check(tmp_path):
    """Every whole config of the kit passes (overlays, which lack `run`, are read with config.yaml)."""
    for path in sorted(p for p in (REPO / "config").glob("*.yaml") if "\nrun:" in "\n" + p.read_text()):
        done = run([*KIT, "check-config", str(path)], tmp_path)
        assert done.returncode == 0, (path, done.stderr)


# --- The workflow refuses what the check refuses, and names that are paths ---------------------------

SNAKEMAKE = shutil.which("snakemake")


@pytest.mark.skipif(SNAKEMAKE is None, reason="needs snakemake on the PATH")
@pytest.mark.parametrize("config, words", [
    ("run=README.md", ("README.md",)),
    ("run=../outside", ("run",)),
    ("run=a/b", ("run",)),
    ("timing={'repeats':0}", ("repeats",)),
])
def test_the_workflow_refuses_a_bad_config_value_in_one_line(config, words):
    done = run([SNAKEMAKE, "-n", "--config", config], REPO)
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("kernelkit:")]
    assert lines and all(word in lines[-1] for word in words), done.stdout[-800:] + done.stderr[-800:]
    assert "Traceback" not in done.stderr


@pytest.mark.skipif(SNAKEMAKE is None, reason="needs snakemake on the PATH")
def test_the_workflow_refuses_an_alias_bomb_within_seconds(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB)
    done = run([SNAKEMAKE, "-n", "--configfile", str(bomb)], REPO)
    assert done.returncode != 0 and "aliases" in done.stderr, done.stderr[-800:]


# --- Corrupted records: the report and the diff refuse each with the same sentence --------------------

def as_list(record: dict) -> None:
    """Marks the edit that wraps the record in a list (a JSON array where an object belongs)."""


def set_field(key: str, value: Any) -> Callable[[dict], None]:
    return lambda record: record.__setitem__(key, value)


def drop_field(key: str) -> Callable[[dict], None]:
    return lambda record: record.pop(key)


TIMING = "timing/rmsnorm/512x128/t32/rep1.json"
RECORDS: dict[str, tuple[str, Callable[[dict], None] | bytes, tuple[str, ...]]] = {
    # name: (the record, relative to the run; an edit of its JSON, or raw bytes; words of the sentence)
    "format version 99": (TIMING, set_field("format_version", 99), ("format_version",)),
    "format version as text": (TIMING, set_field("format_version", "2"), ("format_version",)),
    "format version 0": (TIMING, set_field("format_version", 0), ("format_version",)),
    "negative sample": (TIMING, lambda r: r["samples_us"].__setitem__(0, -1.0), ("samples_us", "sample 0")),
    "zero samples": (TIMING, lambda r: r.__setitem__("samples_us", [0.0] * 15), ("samples_us",)),
    "text sample": (TIMING, lambda r: r["samples_us"].__setitem__(3, "fast"), ("samples_us", "sample 3")),
    "boolean sample": (TIMING, lambda r: r["samples_us"].__setitem__(1, True), ("samples_us", "sample 1")),
    "absurd sample": (TIMING, lambda r: r["samples_us"].__setitem__(2, 1e300), ("samples_us",)),
    "empty samples": (TIMING, set_field("samples_us", []), ("samples_us",)),
    "samples not a list": (TIMING, set_field("samples_us", 3.0), ("samples_us",)),
    "samples missing": (TIMING, drop_field("samples_us"), ("samples_us",)),
    "too many samples": (TIMING, set_field("samples_us", [1.0] * 1_000_001), ("samples_us", "at most")),
    "kernel of another record": (TIMING, set_field("kernel", "matmul"), ("its path",)),
    "layout of another record": (TIMING, set_field("layout", "t256"), ("its path",)),
    "shape of another record": (TIMING, set_field("shape", "4096x4096"), ("its path",)),
    "repeat of another record": (TIMING, set_field("repeat", 2), ("its path",)),
    "repeat zero": (TIMING, set_field("repeat", 0), ("repeat",)),
    "repeat as text": (TIMING, set_field("repeat", "1"), ("repeat",)),
    "kernel missing": (TIMING, drop_field("kernel"), ("kernel",)),
    "kernel with a newline": (TIMING, set_field("kernel", "rms\nkernelkit: all SAME"), ("kernel",)),
    "layout with an ANSI escape": (TIMING, set_field("layout", "t32\x1b[31m"), ("layout",)),
    "bytes negative": (TIMING, set_field("bytes_moved", -5), ("bytes_moved",)),
    "method not an object": (TIMING, set_field("method", "graph"), ("method",)),
    "a list, not an object": (TIMING, as_list, ("object",)),
    "not JSON": (TIMING, b"{ not json", ("JSON",)),
    "truncated": (TIMING, b'{"kernel": "rmsnorm", "samples_us": [1.0, 2.', ("JSON",)),
    "not UTF-8": (TIMING, b'{"kernel": "\xff"}', ("cannot be read",)),
    "empty file": (TIMING, b"", ("JSON",)),
    "NaN sample": (TIMING, b"NaN-sample", ("sample",)),
    "nested 100000 deep": (TIMING, b"[" * 100000 + b"]" * 100000, ("cannot be read",)),
    "correctness of another kernel": ("correctness/rmsnorm/t32.json", set_field("kernel", "matmul"), ("its path",)),
    "correctness case without its layout": ("correctness/rmsnorm/t32.json", lambda r: r["cases"][0].pop("layout"),
                                            ("case 0",)),
    "correctness cases not a list": ("correctness/rmsnorm/t32.json", set_field("cases", {}), ("cases",)),
    "correctness layouts not a list": ("correctness/rmsnorm/t32.json", set_field("layouts", "t32"), ("layouts",)),
    "control of another name": ("controls/rmsnorm/tail.json", set_field("control", "epsilon"), ("its path",)),
    "control without its name": ("controls/rmsnorm/tail.json", drop_field("control"), ("control",)),
    "environment a list": ("environment.json", as_list, ("object",)),
    "environment of a newer kit": ("environment.json", set_field("format_version", 7), ("format_version",)),
}


def corrupt(run_dir: Path, relative: str, change: Callable[[dict], None] | bytes) -> Path:
    path = run_dir / relative
    if isinstance(change, bytes):
        if change == b"NaN-sample":
            text = path.read_text().replace('"samples_us": [', '"samples_us": [NaN, ', 1)
            path.write_text(text)
        else:
            path.write_bytes(change)
        return path
    record = json.loads(path.read_text())
    if change is as_list:
        record = [record]
    else:
        change(record)
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize("case", sorted(RECORDS))
def test_report_and_diff_refuse_a_corrupted_record_with_the_same_sentence(project, kit, case):
    relative, change, words = RECORDS[case]
    path = corrupt(project / "results" / "b", relative, change)
    report = refused(kit(project, "report", "results/b", "--markdown", "reports/b/report.md"), *words)
    diff = refused(kit(project, "diff", "results/a", "results/b", "--markdown", "reports/d.md"), *words)
    named = str(Path("results/b") / relative)
    assert named in report and named in diff, (report, diff)
    assert report.split(": ", 1)[1] == diff.split(": ", 1)[1], (report, diff)
    assert not (project / "reports" / "b" / "report.md").exists() and not (project / "reports" / "d.md").exists()
    assert path.exists()


def test_a_corrupted_record_in_a_process_of_its_own_is_the_same_one_sentence(project):
    """The cases above call the CLI's entry in this process; this one runs `python -m kernelkit`."""
    corrupt(project / "results" / "b", TIMING, set_field("format_version", 99))
    refused(run([*KIT, "diff", "results/a", "results/b"], project), "format_version", TIMING)


def test_a_gap_in_the_repeats_is_refused_by_both(project, kit):
    rep2 = sorted((project / "results" / "b").glob("timing/rmsnorm/512x128/t32/rep2.json"))[0]
    rep2.rename(rep2.with_name("rep3.json"))
    record = json.loads(rep2.with_name("rep3.json").read_text())
    record["repeat"] = 3
    rep2.with_name("rep3.json").write_text(json.dumps(record))
    for args in (("report", "results/b", "--markdown", "reports/b.md"),
                 ("diff", "results/a", "results/b", "--markdown", "reports/d.md")):
        refused(kit(project, *args), "rep3.json", "repeat 2")


# --- Bounded work ---------------------------------------------------------------------------------

def test_a_record_of_a_million_samples_diffs_in_bounded_time(project, kit):
    import time

    path = project / "results" / "b" / TIMING
    record = json.loads(path.read_text())
    record["samples_us"] = [record["samples_us"][i % 15] for i in range(1_000_000)]
    record.pop("sample_placement", None)
    path.write_text(json.dumps(record))
    began = time.monotonic()
    done = kit(project, "diff", "results/a", "results/b", "--markdown", "reports/d.md")
    assert done.returncode == 0, done.stderr[-500:]
    assert time.monotonic() - began < 60


# --- Writes that could destroy evidence -------------------------------------------------------------

@pytest.mark.parametrize("command", ["report", "diff"])
@pytest.mark.parametrize("where, words", [
    ("results/a/report.md", ("inside the run folder",)),
    ("results/a/timing/extra.md", ("inside the run folder",)),
    ("results/b/summary.md", ("inside the run folder",)),
    ("reports", ("folder",)),
    ("reports/sub/../", ("folder",)),
    ("reports/afile/report.md", ("cannot write",)),
    ("/proc/kernelkit-cannot-write/report.md", ("cannot write",)),
    ("reports/" + "n" * 300 + ".md", ("cannot write",)),
])
def test_outputs_that_would_overwrite_evidence_or_cannot_be_written_are_one_sentence(project, kit, command, where, words):
    (project / "reports" / "afile").write_text("a file where a folder must be")
    args = ["report", "results/a"] if command == "report" else ["diff", "results/a", "results/b"]
    before = {p: p.read_bytes() for p in (project / "results").rglob("*") if p.is_file()}
    refused(kit(project, *args, "--markdown", where), *words)
    assert {p: p.read_bytes() for p in (project / "results").rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("command", ["report", "diff"])
def test_the_same_path_for_markdown_and_html_is_refused(project, kit, command):
    args = ["report", "results/a"] if command == "report" else ["diff", "results/a", "results/b"]
    refused(kit(project, *args, "--markdown", "reports/x.md", "--html", "reports/./x.md"), "same file")


@pytest.mark.parametrize("command", ["report", "diff"])
def test_a_symlinked_reports_folder_is_not_followed(project, kit, tmp_path_factory, command):
    outside = tmp_path_factory.mktemp("outside")
    shutil.rmtree(project / "reports")
    (project / "reports").symlink_to(outside)
    args = ["report", "results/a"] if command == "report" else ["diff", "results/a", "results/b"]
    refused(kit(project, *args, "--markdown", "reports/x.md"), "symbolic link")
    assert list(outside.iterdir()) == []


def test_a_valid_report_and_diff_still_write_both_outputs(project, kit):
    assert kit(project, "report", "results/a", "--markdown", "reports/a/report.md", "--html",
               "reports/a/report.html").returncode == 0
    assert kit(project, "diff", "results/a", "results/b", "--markdown", "reports/diff/d.md", "--html",
               "reports/diff/d.html").returncode == 0
    names = sorted(p.name for p in (project / "reports").rglob("*") if p.is_file())
    assert names == ["d.html", "d.md", "report.html", "report.md"], names


# --- Text injection ----------------------------------------------------------------------------------

def test_a_control_character_in_a_run_folder_name_is_escaped(project, kit):
    odd = project / "results" / "b\x1b[31mred"
    (project / "results" / "b").rename(odd)
    done = kit(project, "diff", "results/a", str(odd.relative_to(project)), "--markdown", "reports/d.md")
    assert "\x1b" not in done.stdout + done.stderr
    assert "\x1b" not in (project / "reports" / "d.md").read_text()


@pytest.mark.parametrize("svg, words", [
    ('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', ("script",)),
    ('<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"></svg>', ("onload",)),
    ('<svg xmlns="http://www.w3.org/2000/svg"><image href="https://example.org/x.png"/></svg>', ("href",)),
    ('<svg xmlns="http://www.w3.org/2000/svg"><a xlink:href="javascript:alert(1)">x</a></svg>', ("href",)),
    ('<svg xmlns="http://www.w3.org/2000/svg"><foreignObject><p>x</p></foreignObject></svg>', ("foreignObject",)),
    ("<html>not an svg</html>", ("no <svg>",)),
])
def test_a_figure_that_could_act_is_refused(project, kit, svg, words):
    figures = project / "reports" / "figs"
    figures.mkdir()
    (figures / "rmsnorm.svg").write_text(svg)
    refused(kit(project, "report", "results/a", "--markdown", "reports/a.md", "--html", "reports/a.html",
                "--figures", "reports/figs"), "rmsnorm.svg", *words)
    assert not (project / "reports" / "a.html").exists()


# --- The scaffold ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, words", [
    ("a" * 300, ("kernel name",)),
    ("Upper", ("kernel name",)),
    ("9lives", ("kernel name",)),
    ("../escape", ("kernel name",)),
    ("has-dash", ("kernel name",)),
    ("", ("kernel name",)),
    ("clocks", ("reserved",)),
])
def test_kernelkit_new_refuses_a_bad_name(tmp_path, kit, name, words):
    (tmp_path / "kernels").mkdir()
    refused(kit(tmp_path, "new", name, "--kernels", str(tmp_path / "kernels")), *words)
    assert list((tmp_path / "kernels").iterdir()) == []


def test_kernelkit_new_refuses_a_file_as_kernels_folder_and_an_existing_folder(tmp_path, kit):
    (tmp_path / "afile").write_text("x")
    refused(kit(tmp_path, "new", "fresh", "--kernels", str(tmp_path / "afile")), "is a file")
    (tmp_path / "kernels" / "taken").mkdir(parents=True)
    refused(kit(tmp_path, "new", "taken", "--kernels", str(tmp_path / "kernels")), "already exists")


def test_the_config_snippet_kernelkit_new_prints_is_accepted_as_printed(tmp_path):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    done = run([*KIT, "new", "scaled", "--kernels", str(kernels)], tmp_path)
    assert done.returncode == 0, done.stderr
    import yaml

    snippet = yaml.safe_load(done.stdout[done.stdout.index("  kernels:"):])  # as printed, quotes and all
    config = yaml.safe_load(DEFAULT)
    config["kernels"] = snippet["kernels"]
    config.pop("hypotheses", None)
    config["span"]["kernels"] = ["scaled"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    checked = run([*KIT, "check-config", str(tmp_path / "config.yaml")], tmp_path, KERNELKIT_KERNELS=str(kernels))
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.2])
def test_sigterm_during_the_write_leaves_the_old_pair_or_the_new_pair_and_no_temporary_file(tmp_path, delay_s):
    """A SIGTERM that lands before, inside or after the writing of report.md and report.html: the
    folder holds the old pair or the new pair, never one of each, and no temporary file."""
    (tmp_path / "report.md").write_text("old")
    (tmp_path / "report.html").write_text("old")
    child = (
        "import os, signal, sys, threading, time\n"
        "from kernelkit.outputs import write_outputs\n"
        "big = 'new' + 'x' * 40_000_000\n"
        f"threading.Timer({delay_s}, os.kill, (os.getpid(), signal.SIGTERM)).start()\n"
        "write_outputs([(sys.argv[1] + '/report.md', big), (sys.argv[1] + '/report.html', big)])\n"
        "time.sleep(5)\n"
    )
    done = run([sys.executable, "-c", child, str(tmp_path)], tmp_path)
    assert done.returncode == -15, done.stderr
    texts = {(tmp_path / name).read_text()[:3] for name in ("report.md", "report.html")}
    assert texts in ({"old"}, {"new"}), texts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.md"]
