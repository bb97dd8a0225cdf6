"""Config validation: every bad input gets one sentence naming the key and what is allowed."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO, snakemake

from kernelkit import KitError
from kernelkit import config as kit_config
from kernelkit import spec as specs


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
    ("wrong type", lambda c: c["timing"].update(samples="many"), ["'timing.samples'", "integer >= 1", "'many'"]),
    ("zero samples", lambda c: c["timing"].update(samples=0), ["'timing.samples'", "integer >= 1"]),
    ("shape with 'by'", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("512by128"),
     ["'kernels.rmsnorm.shapes.9'", "joined by 'x'", "512by128"]),
    ("zero rows", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("0x128"), ["kernels.rmsnorm.shapes", "0x128"]),
    ("negative rows", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("-4x8"), ["kernels.rmsnorm.shapes", "-4x8"]),
    ("three dims for a 2-D kernel", lambda c: c["kernels"]["rmsnorm"]["shapes"].append("4x8x2"),
     ["kernels.rmsnorm.shapes", "needs 2", "ROWSxCOLS"]),
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
    assert kit_config.configurations(good)[0] == ("rmsnorm", "512x128", "t32")


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
