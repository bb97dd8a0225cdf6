"""Record formats and the result layout: one version stamp, one upgrade path, one set of paths."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, default_config

from kernelkit import KitError, layout, records
from kernelkit.cli import build_parser
from kernelkit.timing import TimingSettings

RUNS = sorted(path for path in (REPO / "results").iterdir() if (path / "config.json").exists())


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


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_every_committed_timing_record_upgrades_to_the_current_format(run):
    files = layout.run_result_files(run, "timing") + layout.run_result_files(run, "cold")
    assert files, f"{run} has no timing records"
    for path in files:
        record = records.read_record(path)
        assert record["format_version"] == records.FORMAT_VERSION
        if "skipped" not in record:
            assert {"name", "launches_per_sample", "cache", "stopped_by"} <= set(record["method_used"])


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_the_layout_templates_name_every_committed_result_file(run):
    """Every JSON result of a committed run is found by exactly one kind's glob, or is a card's
    environment or ceiling under one of the run's card directories (gpus/<i>/ beyond the first)."""
    found = [path for kind in layout.KINDS for path in layout.run_result_files(run, kind)]
    assert len(found) == len(set(found))
    cards = layout.card_dirs(run)[1:]
    per_card = {path for card in cards for path in [card / "environment.json", *(card / "ceilings").glob("*.json")]}
    every = {path for path in run.rglob("*.json") if "logs" not in path.parts} - {run / "config.json",
                                                                                  run / "environment.json"}
    assert every == set(found) | per_card


def test_log_paths_mirror_their_results():
    assert layout.log(layout.TIMING) == "results/{run}/logs/{view}/{kernel}/{shape}/{layout}/rep{n}.log"
    assert layout.log(layout.FIGURE, "figures/{kernel}") == "results/{run}/logs/figures/{kernel}.log"
    with pytest.raises(ValueError):
        layout.log(layout.FIGURE)


def test_timing_max_sample_ms_goes_from_the_schema_default_to_the_method_recorded():
    """A config without timing.max_sample_ms gets the schema's default, the rule's settings param
    carries it, and the method the record stores (its "method" key) is built from that param."""
    from kernelkit import config as kit_config

    config = default_config()
    given = {**config, "timing": {key: value for key, value in config["timing"].items() if key != "max_sample_ms"}}
    validated = kit_config.validate(given)
    assert validated["timing"]["max_sample_ms"] == kit_config.schema_default("timing", "max_sample_ms")
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


def test_the_default_config_still_gives_the_method_and_sampler_h200_s5a_recorded():
    """Moving the defaults into the schema changed no setting: the default config's settings params
    describe exactly what the last full default run (h200-s5a) wrote into its records, but for the
    host lead and the context switch added after it (`timing.host_lead_us`, `timing.context_switch`),
    which its records do not name."""

    def before_the_lead(method):
        assert method["host_lead_us"] > 0 and method["context_switch"] is True
        return {key: value for key, value in method.items() if key not in ("host_lead_us", "context_switch")}

    from kernelkit.ceilings import CeilingSettings
    from kernelkit.span import SpanSettings

    config, run = default_config(), REPO / "results" / "h200-s5a"
    timing = TimingSettings.from_json(TimingSettings.json_from_config(config))
    span = SpanSettings.from_json(SpanSettings.json_from_config(config))
    ceiling = CeilingSettings.from_json(CeilingSettings.json_from_config(config))
    for path in layout.run_result_files(run, "timing"):
        record = records.read_record(path)
        assert "host_lead_us" not in record["method"] and "context_switch" not in record["method"], path
        assert (record["method"], record["sampler"]) == (before_the_lead(timing.method.describe()), timing.sampler.describe()), path
    for path in layout.run_result_files(run, "span"):
        record = records.read_record(path)
        assert (record["method"], record["sampler"]) == (span.method.describe(), span.sampler.describe()), path
    for path in layout.run_result_files(run, "ceilings"):
        assert records.read_record(path)["method"] == before_the_lead(ceiling.method.describe()), path
