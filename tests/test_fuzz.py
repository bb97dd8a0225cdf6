"""Seeded random corruption of a run's files: the diff never shows a traceback.

A copy of a synthetic run B (tests/synthetic.py) gets one corruption at a time (truncation, flipped bytes, a value of
the wrong type, NaN or infinity, a missing key, a file of another JSON type), and the command
runs over it in-process. Every outcome must be an exit code the kit documents for it: the diff
gives 0 or 1 when the corruption did not touch what it reads, 2 with one sentence when it did;
3 (internal error) or an escaping exception is a bug. `fuzz_command` takes any command line, so
that `kernelkit report` can be fuzzed the same way once it takes corrupted runs.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelkit.cli import main

BAD_VALUES: list[Any] = [None, "x", "", {}, [], True, float("nan"), float("inf"), -float("inf"), 0, -1, 1e308,
                         5e-324, [1, "a"], {"a": 1}, 2**70]


@dataclass
class Outcome:
    corruption: str
    code: int
    stderr: str


def _random_path(node: Any, rng: random.Random) -> tuple:
    """A path to a value inside a JSON document: stop at each level with some chance, else go into a
    random child, so that top-level fields are hit as often as deep ones."""
    path: tuple = ()
    while isinstance(node, (dict, list)) and node and (not path or rng.random() < 0.6):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path, node = path + (key,), node[key]
    return path


def _set(document: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return document


def _delete(document: Any, path: tuple) -> Any:
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return document


def corrupt(path: Path, rng: random.Random) -> str:
    """Apply one seeded corruption to a JSON file; say what was done."""
    raw = path.read_bytes()
    kind = rng.choice(["truncate", "flip byte", "wrong value", "wrong value", "delete key", "other type", "bad sample"])
    if kind == "truncate":
        cut = rng.randrange(len(raw))
        path.write_bytes(raw[:cut])
        return f"{kind} at byte {cut}"
    if kind == "flip byte":
        where = rng.randrange(len(raw))
        path.write_bytes(raw[:where] + bytes([rng.randrange(256)]) + raw[where + 1:])
        return f"{kind} {where}"
    document = json.loads(raw)
    if kind == "other type":
        value = rng.choice([[], [1, 2], "text", 3.5, None, True])
        path.write_text(json.dumps(value))
        return f"{kind}: {value!r}"
    if kind == "bad sample" and isinstance(document, dict) and isinstance(document.get("samples_us"), list):
        index, value = rng.randrange(len(document["samples_us"])), rng.choice(BAD_VALUES)
        document["samples_us"][index] = value
        path.write_text(json.dumps(document))
        return f"{kind}: samples_us[{index}] = {value!r}"
    target = _random_path(document, rng)
    if kind == "delete key" and target:
        path.write_text(json.dumps(_delete(document, target)))
        return f"{kind} {'/'.join(map(str, target))}"
    value = rng.choice(BAD_VALUES)
    path.write_text(json.dumps(_set(document, target, value)))
    return f"wrong value {'/'.join(map(str, target))} = {value!r}"


def run_in_process(argv: list[str]) -> tuple[int, str]:
    """`kernelkit argv` in this process: its exit code and stderr. An escaping exception fails the test."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exited:
            code = exited.code if isinstance(exited.code, int) else 2
    return code, err.getvalue()


# The files `kernelkit diff` reads; a fuzz of `kernelkit report` would add config.json, ceilings/ and span/.
DIFF_INPUTS = ("timing/*/*/*/rep*.json", "environment.json", "correctness/*/*.json", "controls/*/*.json")


def fuzz_command(tmp_path: Path, source: Path, argv_for: Callable[[Path], list[str]], cases: int, seed: int,
                 inputs: tuple[str, ...] = DIFF_INPUTS) -> list[Outcome]:
    """Corrupt one file of a copy of `source` per case, run `kernelkit argv_for(copy)`, restore the file.

    Each case picks a kind of input (a pattern of `inputs`) and then a file of that kind, so that the
    single environment.json is hit as often as the many timing files.
    """
    run = tmp_path / source.name
    shutil.copytree(source, run)
    kinds = [sorted(run.glob(pattern)) for pattern in inputs]
    rng = random.Random(seed)
    outcomes = []
    for _ in range(cases):
        path = rng.choice(rng.choice([files for files in kinds if files]))
        original = path.read_bytes()
        what = f"{path.relative_to(run)}: {corrupt(path, rng)}"
        code, stderr = run_in_process(argv_for(run))
        outcomes.append(Outcome(what, code, stderr))
        path.write_bytes(original)
    return outcomes


def test_diff_of_randomly_corrupted_runs_never_shows_a_traceback(tmp_path):
    from synthetic import write_run

    # Two small runs of the same configurations (the diff's bootstrap is most of a case's time); the
    # reference stays untouched.
    kernels = {"rmsnorm": {"layouts": ["t32", "t256"], "shapes": ["512x128", "4096x4096"]}}
    reference, source = (write_run(tmp_path, name, kernels=kernels, seed=seed) for name, seed in (("a", 0), ("b", 1)))
    outcomes = fuzz_command(tmp_path / "fuzz", source, lambda run: ["diff", str(reference), str(run)], cases=80,
                            seed=20261130)
    for outcome in outcomes:
        assert "Traceback" not in outcome.stderr, outcome
        assert outcome.code in (0, 1, 2), outcome
        if outcome.code == 2:
            assert outcome.stderr.startswith("kernelkit diff: ") and outcome.stderr.count("\n") == 1, outcome
    refused = sum(o.code == 2 for o in outcomes)
    # The fuzzer must reach both sides: corruptions the diff refuses, and ones it does not read.
    assert 0 < refused < len(outcomes), [o.corruption for o in outcomes]
