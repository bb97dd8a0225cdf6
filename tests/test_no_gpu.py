"""Without a GPU the kit says so in one sentence and writes nothing."""

from __future__ import annotations

import pytest
from conftest import gpu_unavailable_reason

from kernelkit.cli import main


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is visible here; this test is for machines without one")
@pytest.mark.parametrize("argv, output", [
    (["environment"], "--output"),
    (["correctness", "--kernel", "rmsnorm"], "--output-dir"),
    (["control", "--kernel", "rmsnorm", "--layout", "t32", "--layout", "t256"], "--output-dir"),
])
def test_gpu_stages_fail_with_one_sentence_and_no_file(tmp_path, capsys, argv, output):
    written = tmp_path / "out"
    assert main([*argv, output, str(written)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "CuPy is not installed" in err or "no usable NVIDIA GPU or driver" in err
    assert not written.exists()


@pytest.mark.parametrize("key, value, expected", [
    ("placements", 17, "'timing.placements' must be an integer from 1 to 16"),
    ("placements", 0, "'timing.placements' must be an integer from 1 to 16"),
    ("max_sample_ms", 0, "'timing.max_sample_ms' must be a number > 0"),
])
def test_time_refuses_a_setting_out_of_range_before_any_gpu_work(tmp_path, capsys, key, value, expected):
    """Checked against the config schema first, so the answer is the same sentence with or without a GPU."""
    from conftest import default_config

    from kernelkit.timing import TimingSettings

    from kernelkit import spec as specs

    config = default_config()
    config["timing"][key] = value
    correctness, controls = _checked_records(tmp_path, specs.load("rmsnorm"))
    output = tmp_path / "out"
    argv = ["time", "--kernel", "rmsnorm", "--shape", "512x128", "--layout", "t32", "--layout", "vec", "--repeat", "1",
            "--order-seed", "0", "--order-key", "0", "--cache", "warm", "--settings", TimingSettings.json_from_config(config),
            "--correctness", *correctness, "--controls", *controls, "--output-dir", str(output)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err and err.endswith(f"not {value}\n")
    assert not output.exists()


@pytest.mark.parametrize("interval_ms", [5, 100])
def test_span_refuses_a_sampler_interval_outside_the_schema_bounds(tmp_path, capsys, interval_ms):
    """The schema's 10 to 50 ms is the one bound, for the workflow and the command alike."""
    from conftest import default_config

    from kernelkit.span import SpanSettings

    config = default_config()
    config["sampler"]["interval_ms"] = interval_ms
    output = tmp_path / "out.json"
    argv = ["span", "--kernel", "matmul", "--shape", "1024x1024x1024", "--layout", "tile16", "--correctness",
            str(tmp_path / "missing.json"), "--repeat", "1", "--settings", SpanSettings.json_from_config(config),
            "--output", str(output)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'sampler.interval_ms' must be a number of milliseconds from 10 to 50" in err
    assert not output.exists()


def test_a_settings_slice_missing_a_key_without_default_is_named(tmp_path, capsys):
    """Keys with a schema default are filled in (ceilings: {} is complete); the others must be given."""
    argv = ["ceiling", "--kind", "floor", "--settings", '{"timing": {"samples": 3}, "ceilings": {}}',
            "--output", str(tmp_path / "out.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'timing.warmup_launches' is missing" in err


def _checked_records(tmp_path, spec):
    """Correctness records (one per hand-written layout, <layout>.json) and control records as the
    checks stages write them, for the current source."""
    from kernelkit.records import write_record

    (tmp_path / "correctness").mkdir()
    (tmp_path / "controls").mkdir()
    correctness = []
    for layout in spec.layouts:
        correctness.append(str(tmp_path / "correctness" / f"{layout}.json"))
        write_record(correctness[-1], {"passed": True, "layouts": [layout], "skipped": {},
                                       "source_sha256": spec.source_sha256()})
    controls = []
    for control in spec.mutations:
        controls.append(str(tmp_path / "controls" / f"{control}.json"))
        write_record(controls[-1], {"control": control, "caught": True})
    return correctness, controls


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is visible here; this test is for machines without one")
def test_time_span_and_ceiling_with_valid_settings_stop_at_the_gpu_with_one_sentence(tmp_path, capsys):
    """The workflow's own settings params parse and the checks pass; the first GPU call is what stops them."""
    from conftest import default_config

    from kernelkit import spec as specs
    from kernelkit.ceilings import CeilingSettings
    from kernelkit.span import SpanSettings
    from kernelkit.timing import TimingSettings

    config, spec = default_config(), specs.load("rmsnorm")
    correctness, controls = _checked_records(tmp_path, spec)
    t32 = next(name for name in correctness if name.endswith("/t32.json"))
    output = tmp_path / "out"
    commands = [
        ["time", "--kernel", "rmsnorm", "--shape", "512x128", "--layout", "t32", "--layout", "vec", "--repeat", "1",
         "--order-seed", "0", "--order-key", "0", "--cache", "warm", "--settings", TimingSettings.json_from_config(config),
         "--correctness", *correctness, "--controls", *controls, "--output-dir"],
        ["span", "--kernel", "rmsnorm", "--shape", "512x128", "--layout", "t32", "--correctness", t32,
         "--controls", *controls, "--repeat", "1",
         "--settings", SpanSettings.json_from_config({**config, "span": {"warmup_calls": 1, "rounds": 1,
                                                                          "samples_per_round": 1}}), "--output"],
        ["ceiling", "--kind", "copy", "--settings", CeilingSettings.json_from_config(config), "--output"],
    ]
    for argv in commands:
        assert main([*argv, str(output)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("CuPy is not installed" in err or "no usable NVIDIA GPU or driver" in err), err
        assert not output.exists()


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is visible here; this test is for machines without one")
def test_without_a_driver_the_other_context_is_a_reason_not_an_error():
    """The context switch before each measurement (device.OtherContext) goes through the kit's one
    driver wrapper; where no driver loads, the record gets the reason, which names it."""
    from kernelkit import device

    device._other_contexts.clear()
    reason = device._other_context(0)
    assert isinstance(reason, str) and reason.startswith("unavailable: no GPU/driver: libcuda.so.1 cannot be loaded")
    device._other_contexts.clear()


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="a GPU is visible here; this test is for machines without one")
def test_the_workflow_check_says_what_a_gpu_stage_would_say(tmp_path, capsys):
    """device.gpu_problem (the workflow's check before it plans GPU jobs, without CuPy's import)
    gives the sentence a GPU stage itself ends with here."""
    from kernelkit import device

    problem = device.gpu_problem()
    assert main(["environment", "--output", str(tmp_path / "out.json")]) == 2
    stage = capsys.readouterr().err.strip()
    assert problem is not None and "\n" not in problem
    kinds = ("CuPy is not installed", "no usable NVIDIA GPU or driver", "no NVIDIA GPU is visible")
    assert [kind for kind in kinds if problem.startswith(kind)] == [kind for kind in kinds if kind in stage], (problem, stage)
    if problem == device.NO_CUPY:
        assert stage.endswith(problem)


def test_a_driver_without_a_cuda_library_is_named_in_one_sentence(monkeypatch):
    import importlib.util

    from kernelkit import device

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: object())  # as if CuPy were installed
    monkeypatch.setattr(device.Driver.__init__, "__defaults__", ("libcuda-not-on-this-machine.so.1",))
    problem = device.gpu_problem()
    assert problem.startswith("no usable NVIDIA GPU or driver: libcuda-not-on-this-machine.so.1 cannot be loaded")
    assert "\n" not in problem


@pytest.mark.parametrize("driver_version, wheel, expected", [
    (12080, "cupy-cuda13x", "no usable NVIDIA GPU or driver: the driver supports CUDA 12.8 and CuPy (cupy-cuda13x) "
                            "needs CUDA 13; install envs/requirements-cuda12.txt"),
    (11080, "cupy-cuda12x", "no usable NVIDIA GPU or driver: the driver supports CUDA 11.8 and CuPy (cupy-cuda12x) "
                            "needs CUDA 12; update the driver"),
    (13000, "cupy-cuda13x", None),
    (13020, "cupy-cuda12x", None),
    (11080, None, None),  # CuPy built from source: its own start says what it needs
])
def test_a_driver_older_than_cupys_cuda_is_refused_with_the_requirements_that_fit(driver_version, wheel, expected):
    from kernelkit import device

    assert device.driver_too_old(driver_version, wheel) == expected
