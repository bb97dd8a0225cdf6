"""Config validation: every bad input gets one sentence naming the key and what is allowed."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from conftest import REPO, snakemake

from kernelkit import KitError
from kernelkit import config as kit_config
from kernelkit import spec as specs
from kernelkit import shape_bounds


@pytest.fixture
def good():
    return kit_config.load(REPO / "config" / "config.yaml")


def broken(good, edit):
    config = copy.deepcopy(good)
    edit(config)
    return config


CASES = [
    ("unknown top-level key", lambda c: c.update(warmup=3), ["'warmup'", "allowed keys", "timing"]),
    ("mistyped timing key", lambda c: c["timing"].update(sample=5), ["'timing.sample'", "samples"]),
    ("missing key", lambda c: c["timing"].pop("repeats"), ["'timing.repeats'", "missing", "integer from 1 to 60"]),
    ("too many repeats", lambda c: c["timing"].update(repeats=61), ["'timing.repeats'", "integer from 1 to 60", "61"]),
    ("unknown cache state", lambda c: c["timing"].update(cache="hot"), ["'timing.cache'", "warm, cold, both", "'hot'"]),
    ("too many placements", lambda c: c["timing"].update(placements=17),
     ["'timing.placements'", "integer from 1 to 16", "17"]),
    ("sampler too slow", lambda c: c.update(sampler={"interval_ms": 100}), ["'sampler.interval_ms'", "10 to 50"]),
    ("sanitize as text", lambda c: c.update(sanitize="yes"), ["'sanitize'", "true or false", "'yes'"]),
    ("span kernel not configured", lambda c: c.update(span={"warmup_calls": 1, "rounds": 1, "samples_per_round": 1,
                                                             "kernels": ["nope"]}), ["'span.kernels'", "nope"]),
    ("kernel named clocks", lambda c: c["kernels"].update(clocks={"layouts": ["t32"], "shapes": ["8x8"]}),
     ["'kernels.clocks'", "reserved"]),
    ("wrong type", lambda c: c["timing"].update(samples="many"), ["'timing.samples'", "integer from 1 to 100000", "'many'"]),
    ("zero samples", lambda c: c["timing"].update(samples=0), ["'timing.samples'", "integer from 1 to 100000"]),
    ("a billion samples", lambda c: c["timing"].update(samples=10**9), ["'timing.samples'", "1 to 100000", "1000000000"]),
    ("samples as a float", lambda c: c["timing"].update(samples=15.0),
     ["'timing.samples'", "not 15.0", "without a decimal point"]),
    ("repeats as a float", lambda c: c["timing"].update(repeats=2.0), ["'timing.repeats'", "not 2.0"]),
    ("run name of 300 characters", lambda c: c.update(run="a" * 300), ["'run'", "at most 100"]),
    ("run name ending in a newline", lambda c: c.update(run="local\n"), ["'run'", "'local\\n'", "newline"]),
    ("shape ending in a newline", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("512x128\n"),
     ["'kernels.rmsnorm.shapes.9'", "newline"]),
    ("kernel name ending in a newline", lambda c: c["kernels"].update({"rmsnorm\n": c["kernels"]["rmsnorm"]}),
     ["'kernels.rmsnorm\\n'", "newline"]),
    ("shape beyond 32-bit sizes", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("99999999999x99999999999"),
     ["'kernels.rmsnorm.shapes.9'", "above 2147483647"]),
    ("shape with a 4 TiB output", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("1048576x1048576"),
     ["'kernels.rmsnorm.shapes.9'", "4,096.0 GiB", "1,024.0 GiB"]),
    ("shape read as a number", lambda c: c["kernels"]["rmsnorm"]["shapes"].append(296),
     ["'kernels.rmsnorm.shapes.9' is the number 296", "(0x128 as the hex number 296)", "'512x128'"]),
    ("shape with 'by'", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("512by128"),
     ["'kernels.rmsnorm.shapes.9'", "joined by 'x'", "512by128"]),
    ("zero rows", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("0x128"), ["kernels.rmsnorm.shapes", "0x128"]),
    ("negative rows", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("-4x8"), ["kernels.rmsnorm.shapes", "-4x8"]),
    ("three dims for a 2-D kernel", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("4x8x2"),
     ["kernels.rmsnorm.shapes", "needs 2", "ROWSxCOLS"]),
    ("span rounds beyond bound", lambda c: c["span"].update(rounds=10**6), ["'span.rounds'", "1 to 1000"]),
    ("unknown kernel", lambda c: c["kernels"].update(softmax={"layouts": ["t32"], "shapes": ["4x4"]}),
     ["'kernels.softmax'", "allowed: " + ", ".join(specs.available())]),
    ("unknown layout", lambda c: c["kernels"]["rmsnorm"]["layouts"].append("t64"),
     ["'kernels.rmsnorm.layouts'", "t64", "allowed: t32, t256"]),
    ("hypothesis on an unconfigured layout", lambda c: c["hypotheses"][0].update(faster="t128"),
     ["'hypotheses.0.faster'", "allowed: t32, t256"]),
    ("reserved run name", lambda c: c.update(run="diff"), ["'run'", "not 'diff'"]),
    ("run name with a slash", lambda c: c.update(run="a/b"), ["'run'", "letters, digits"]),
]


@pytest.mark.parametrize("name, edit, expected", CASES, ids=[case[0] for case in CASES])
def test_bad_config_names_key_and_allowed_values(good, name, edit, expected):
    with pytest.raises(KitError) as raised:
        kit_config.validate(broken(good, edit))
    message = str(raised.value)
    assert "\n" not in message
    for fragment in expected:
        assert fragment in message, f"{fragment!r} missing from: {message}"


def test_default_config_is_valid(good):
    assert good["run"] == "local"
    first = next(iter(good["kernels"]))
    assert (first, good["kernels"][first]["shapes"][0], kit_config.kernel_layouts(good, first)[0]) == (
        "rmsnorm", "512x128", "t32")


def test_snakemake_stops_on_bad_config_before_any_job(tmp_path, good):
    bad = broken(good, lambda c: c["kernels"]["rmsnorm"]["shapes"].append("512by128"))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    done = snakemake("-n", "--cores", "1", "--configfile", str(path))
    assert done.returncode != 0
    assert "config key 'kernels.rmsnorm.shapes.9' must be" in done.stdout + done.stderr
    assert "Job stats" not in done.stdout


def test_cli_check_config_exits_nonzero_with_one_line(tmp_path, good, capsys):
    from kernelkit.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(broken(good, lambda c: c["timing"].update(warmup=3))))
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'timing.warmup' is not known" in err


@pytest.mark.parametrize("path", sorted(p.name for p in (REPO / "config").glob("*.yaml")))
def test_every_whole_config_file_is_valid(path):
    """Whole configs (those naming kernels) must validate; overlays only add keys to one."""
    loaded = yaml.safe_load((REPO / "config" / path).read_text())
    if "kernels" not in loaded:
        base = yaml.safe_load((REPO / "config" / "quality-check.yaml").read_text())
        for key, value in loaded.items():
            base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
        loaded = base
    kit_config.validate(loaded)


YAML_CASES = [
    ("duplicate top-level key", lambda text: text + "\nrun: other\n",
     "the key 'run' appears twice in one mapping, at lines 2 and "),
    ("duplicate nested key", lambda text: text.replace("  repeats: 3\n", "  repeats: 3\n  repeats: 2\n", 1),
     "the key 'repeats' appears twice in one mapping"),
    ("hex shape", lambda text: text.replace("- 512x128", "- 0x128", 1),
     "config key 'kernels.rmsnorm.shapes.0': shape 0x128 was read by YAML as the number 296; "
     "write shapes as quoted strings like '512x128'"),
    ("unclosed bracket", lambda text: text.replace("timing:", "timing: [", 1), "is not valid YAML: expected ',' or ']'"),
    ("tab indentation", lambda text: text.replace("  samples: 15", "\tsamples: 15", 1), "is not valid YAML: "),
]


@pytest.mark.parametrize("name, edit, expected", YAML_CASES, ids=[case[0] for case in YAML_CASES])
def test_bad_yaml_gets_one_sentence_with_its_line(tmp_path, name, edit, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(edit((REPO / "config" / "config.yaml").read_text()))
    with pytest.raises(KitError) as raised:
        kit_config.load(path)
    message = str(raised.value)
    assert "\n" not in message and expected in message, message
    if "YAML" in expected and "number" not in expected:
        assert re.search(r"at line \d+, column \d+$", message), message


def test_a_duplicate_key_names_both_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("run: a\nkernels: {}\nrun: b\n")
    with pytest.raises(KitError, match="the key 'run' appears twice in one mapping, at lines 1 and 3;"):
        kit_config.load(path)


@pytest.mark.parametrize("where, expected", [("nosuch.yaml", "does not exist"), (".", "is a directory, not a YAML file")])
def test_a_config_path_that_is_no_file(tmp_path, where, expected):
    with pytest.raises(KitError, match=expected):
        kit_config.load(tmp_path / where)


def test_check_fits_compares_the_output_with_the_recorded_device_memory():
    from synthetic import environment_record

    env = environment_record({"run": "fits"})  # an environment record of an H200-sized card
    device = env["gpu"]["memory_total_bytes"]
    spec = specs.load("rmsnorm")
    shape_bounds.check_fits(spec, (16384, 8193), device)  # a timed shape of that run: fits
    rows = device // (4 * 8192) + 1  # one row more than the float32 output can hold
    with pytest.raises(KitError) as raised:
        shape_bounds.check_fits(spec, (rows, 8192), device)
    assert f"needs at least {4 * rows * 8192 / 2**30:,.1f} GiB for its float32 output" in str(raised.value)
    assert f"the device's {device / 2**30:,.1f} GiB of memory" in str(raised.value)
    with pytest.raises(KitError, match="in 4 copies"):
        shape_bounds.check_fits(spec, (rows // 3, 8192), device, copies=4)


def test_every_config_file_of_the_checkout_still_validates():
    checked = 0
    for path in sorted((REPO / "config").glob("*.yaml")):
        config = kit_config.read_yaml(path)
        if {"run", "kernels", "timing"} <= set(config):
            kit_config.validate(config)
            checked += 1
    assert checked > 0
