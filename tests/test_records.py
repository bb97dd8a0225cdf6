"""Record formats and the result layout: one version stamp, one upgrade path, one set of paths."""

from __future__ import annotations

import json

import pytest
from conftest import default_config
from synthetic import write_run

from kernelkit import KitError, layout, records
from kernelkit.cli import build_parser
from kernelkit.records import write_record
from kernelkit.timing import TimingSettings


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A synthetic run of every kind of record (cold timings, spans, ceilings with the L2's, the
    sanitizer, counters, a second card), and one as a kit before format versions wrote it."""
    root = tmp_path_factory.mktemp("records")
    full = write_run(root, "full", kernels={"rmsnorm": {"layouts": ["t32", "t256"], "shapes": ["512x128", "16384x8193"]},
                                            "layernorm": {"layouts": ["warp", "triton"], "shapes": ["4096x1024"]}},
                     spans=["layernorm"], ceilings=("copy", "l2", "gemm", "floor"), cold=True, sanitizer=True, profile=True,
                     cards={("rmsnorm", "16384x8193"): 1})
    # A sanitizer record per layout, as kits before the per-kernel record wrote them, beside the kernel's one.
    write_record(full / "sanitizer" / "layernorm" / "warp.json", {"kernel": "layernorm", "layout": "warp", "tools": {}})
    return {"full": full, "legacy": write_run(root, "legacy", legacy=True, cold=True)}


def test_a_written_record_carries_the_format_version_and_reads_back_unchanged(tmp_path):
    path = tmp_path / "r.json"
    records.write_record(path, {"kernel": "rmsnorm"})
    assert json.loads(path.read_text())["format_version"] == records.FORMAT_VERSION
    assert records.read_record(path) == {"kernel": "rmsnorm", "format_version": records.FORMAT_VERSION}


def test_a_record_from_a_newer_kit_is_refused_in_one_sentence(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"format_version": records.FORMAT_VERSION + 1}))
    with pytest.raises(KitError, match="this kit reads versions 1 to"):
        records.read_record(path)


def test_a_version_1_timing_record_without_method_used_reads_as_the_graph_replay_it_was():
    old = {"samples_us": [1.0], "order": {"seed": 0, "key": 1}, "method": {"launches_per_graph": 64}}
    upgraded = records.upgrade(old)
    assert upgraded["method_used"] == {"name": "cuda_graph_replay", "launches_per_sample": 64, "cache": "warm",
                                       "stopped_by": "fixed_count"}
    assert "disturbed_samples" not in upgraded  # not measured is not zero


@pytest.mark.parametrize("name", ["full", "legacy"])
def test_every_timing_record_upgrades_to_the_current_format(runs, name):
    run = runs[name]
    files = layout.run_result_files(run, "timing") + layout.run_result_files(run, "cold")
    assert files and layout.run_result_files(run, "cold"), f"{run} has no timing records of both views"
    for path in files:
        assert ("format_version" in json.loads(path.read_text())) == (name == "full")
        record = records.read_record(path)
        assert record["format_version"] == records.FORMAT_VERSION
        if "skipped" not in record:
            assert {"name", "launches_per_sample", "cache", "stopped_by"} <= set(record["method_used"])
    if name == "legacy":
        # What the older kit did, read back: graph replays of launches_per_graph, a fixed count, warm.
        assert {records.read_record(p)["method_used"]["stopped_by"] for p in files} == {"fixed_count"}


@pytest.mark.parametrize("name", ["full", "legacy"])
def test_the_layout_templates_name_every_result_file(runs, name):
    """Every JSON result of a run is found by exactly one kind's glob, or is a card's environment or
    ceiling under one of the run's card directories (gpus/<i>/ beyond the first)."""
    run = runs[name]
    found = [path for kind in layout.KINDS for path in layout.run_result_files(run, kind)]
    assert len(found) == len(set(found))
    cards = layout.card_dirs(run)[1:]
    assert bool(cards) == (name == "full")
    per_card = {path for card in cards for path in [card / "environment.json", *(card / "ceilings").glob("*.json")]}
    every = {path for path in run.rglob("*.json") if "logs" not in path.parts} - {run / "config.json",
                                                                                  run / "environment.json"}
    assert every == set(found) | per_card
    if name == "full":
        assert {kind for kind in layout.KINDS if layout.run_result_files(run, kind)} == set(layout.KINDS)


def test_log_paths_mirror_their_results():
    assert layout.log(layout.TIMING) == "results/{run}/logs/{view}/{kernel}/{shape}/{layout}/rep{n}.log"
    with pytest.raises(ValueError):
        layout.log(layout.FIGURE)


def test_timing_max_sample_ms_goes_from_the_schema_default_to_the_method_recorded():
    """A config without timing.max_sample_ms gets the schema's default, the rule's settings param
    carries it, and the method the record stores (its "method" key) is built from that param."""
    from kernelkit import config as kit_config
    from kernelkit.config_file import schema_default

    config = default_config()
    given = {**config, "timing": {key: value for key, value in config["timing"].items() if key != "max_sample_ms"}}
    validated = kit_config.validate(given)
    assert validated["timing"]["max_sample_ms"] == schema_default("timing", "max_sample_ms")
    param = TimingSettings.json_from_config(validated)
    assert json.loads(param)["timing"]["max_sample_ms"] == validated["timing"]["max_sample_ms"]
    method = TimingSettings.from_json(param).method.describe()
    assert method["max_sample_ms"] == validated["timing"]["max_sample_ms"]
    changed = kit_config.validate({**given, "timing": {**given["timing"], "max_sample_ms": 7}})
    assert TimingSettings.json_from_config(changed) != param  # so Snakemake reruns the timing targets


def _arguments(parser):
    for action in parser._actions:
        if hasattr(action, "choices") and isinstance(action.choices, dict):
            for name, sub in action.choices.items():
                yield from ((f"{name} {a.dest}", a) for a in sub._actions)


def test_every_command_line_argument_has_a_help_text():
    missing = [name for name, action in _arguments(build_parser()) if action.dest != "help" and not action.help]
    assert not missing


def test_the_default_config_still_gives_the_method_and_sampler_the_kit_has_always_recorded():
    """Moving the defaults into the schema changed no setting: the default config's settings params
    describe exactly the method and sampler the full default runs recorded before (the values below,
    as their records hold them), but for the host lead and the context switch added after them
    (`timing.host_lead_us`, `timing.context_switch`)."""
    from kernelkit.ceilings import CeilingSettings
    from kernelkit.span import SpanSettings

    method = {"launches_per_graph": 64, "max_sample_ms": 20.0, "name": "cuda_graph_replay", "samples": 15,
              "stop_max_samples": 200, "stop_max_seconds": 10.0, "stop_relative_spread": None, "untimed_replays": 1,
              "warmup_launches": 20}
    sampler = {"enabled": True, "interval_ms": 20.0, "min_sm_clock_fraction": 0.9, "wait_for_clock": False,
               "wait_timeout_s": 10.0}
    span_method = {"name": "event_span_rotating_rounds", "rounds": 3, "samples_per_round": 50, "warmup_calls": 10}

    def before_the_lead(described):
        assert described["host_lead_us"] > 0 and described["context_switch"] is True
        return {key: value for key, value in described.items() if key not in ("host_lead_us", "context_switch")}

    config = default_config()
    timing = TimingSettings.from_json(TimingSettings.json_from_config(config))
    span = SpanSettings.from_json(SpanSettings.json_from_config(config))
    ceiling = CeilingSettings.from_json(CeilingSettings.json_from_config(config))
    assert (before_the_lead(timing.method.describe()), timing.sampler.describe()) == (method, sampler)
    assert (span.method.describe(), span.sampler.describe()) == (span_method, sampler)
    assert before_the_lead(ceiling.method.describe()) == method
