"""On a real GPU (issue 12, items 2 and 3): a reduction without its in-loop barrier, and a kernel
wrong only beyond the correctness shapes, are both stopped before anything is timed.

Run with `pytest -m gpu tests/test_gpu_race_checks.py`; without a GPU every test is skipped with
the reason. The broken kernels are copies of kernels/ written by tests/fixtures/broken_kernels.py.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from conftest import default_config

from kernelkit import device, spec as specs, verify
from kernelkit.cli import main
from kernelkit.records import read_json

pytestmark = pytest.mark.gpu

CHECKS = {"correctness", "determinism", "racecheck"}


def _fixtures():
    module_spec = importlib.util.spec_from_file_location("broken", Path(__file__).parent / "fixtures" / "broken_kernels.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _time(shape, layout, correctness, controls, sanitizer, output):
    from kernelkit.timing import TimingSettings

    config = default_config()
    config["timing"].update(samples=5)
    return main(["time", "--kernel", "rmsnorm", "--shape", shape, "--layout", layout, "--repeat", "1",
                 "--order-seed", "0", "--order-key", "0", "--cache", "warm",
                 "--settings", TimingSettings.json_from_config(config), "--correctness", str(correctness),
                 "--controls", *map(str, controls), "--sanitizer", *map(str, sanitizer), "--output", str(output)])


def _controls(tmp_path, spec):
    paths = []
    for control in sorted(spec.mutations):
        paths.append(tmp_path / f"{control}.json")
        hand_written = [arg for layout in spec.layouts for arg in ("--layout", layout)]  # vec_* mutate only vec
        assert main(["control", "--kernel", "rmsnorm", "--control", control, *hand_written,
                     "--output", str(paths[-1])]) == 0, control
    return paths


@pytest.mark.parametrize("layout", ["t32", "t256"])
def test_barrier_control_is_caught_in_each_layout_alone(tmp_path, layout):
    output = tmp_path / "barrier.json"
    assert main(["control", "--kernel", "rmsnorm", "--control", "barrier", "--layout", layout,
                 "--output", str(output)]) == 0
    record = read_json(output)
    # Caught by the layout's own cases, or by racecheck run over that layout alone.
    raced = record["racecheck"] is not None and record["racecheck"]["layouts"] == [layout] and record["racecheck"]["hazards"]
    assert record["caught"] and (record["caught_in_layouts"][layout] in CHECKS or raced), record["racecheck"]
    assert record["caught_by"]["check"] in CHECKS


@pytest.mark.parametrize("layout", ["t32", "t256"])
def test_barrier_removed_build_is_stopped_before_timing(tmp_path, monkeypatch, capsys, layout):
    """The barrier removed from the real source: correctness with determinism, or the sanitizer,
    refuses it, and `kernelkit time` then writes nothing."""
    kernels = tmp_path / "kernels"
    _fixtures().write_barrier_removed(kernels)
    monkeypatch.setenv("KERNELKIT_KERNELS", str(kernels))
    spec = specs.load("rmsnorm")
    assert "__syncthreads();\n    }" not in spec.source_text()  # the loop's barrier is gone
    controls = _controls(tmp_path, spec)
    correctness, sanitizer = tmp_path / f"{layout}.json", tmp_path / f"sanitizer-{layout}.json"
    stopped_by = None
    if main(["correctness", "--kernel", "rmsnorm", "--layout", layout, "--output", str(correctness)]) != 0:
        stopped_by = "correctness or determinism"
    elif main(["sanitize", "--kernel", "rmsnorm", "--layout", layout, "--output", str(sanitizer)]) != 0:
        stopped_by = "sanitizer"
    out = capsys.readouterr()
    if stopped_by is None:
        reason = read_json(sanitizer).get("skipped", "its memcheck and racecheck found nothing")
        pytest.fail(f"the barrier-removed {layout} passed correctness, determinism and the sanitizer ({reason})")
    assert not (correctness.exists() and sanitizer.exists())
    sentence = out.err.strip().splitlines()[-1]
    print(f"{layout}: stopped by {stopped_by}: {sentence}")
    # Stopped for the race, not for a broken tool run: a failed case, or a reported error or hazard.
    assert ("correctness cases failed" in sentence) if stopped_by != "sanitizer" else (" reports " in sentence), sentence
    timing = tmp_path / "rep1.json"
    assert _time("512x4096", layout, correctness, controls, [sanitizer], timing) == 2
    assert not timing.exists()


def test_kernel_wrong_only_beyond_the_checked_shapes_is_stopped_at_its_timed_shape(tmp_path, monkeypatch, capsys):
    kernels = tmp_path / "kernels"
    _fixtures().write_wrong_beyond_checks(kernels)
    monkeypatch.setenv("KERNELKIT_KERNELS", str(kernels))
    spec = specs.load("rmsnorm")
    controls = _controls(tmp_path, spec)  # every control, the barrier included, is still caught
    correctness, sanitizer = tmp_path / "t256.json", tmp_path / "sanitizer.json"
    assert main(["correctness", "--kernel", "rmsnorm", "--layout", "t256", "--output", str(correctness)]) == 0
    assert main(["sanitize", "--kernel", "rmsnorm", "--layout", "t256", "--output", str(sanitizer)]) == 0
    capsys.readouterr()

    inside = tmp_path / "inside.json"  # the widest checked width: right, verified and timed
    assert _time("512x8193", "t256", correctness, controls, [sanitizer], inside) == 0
    verified = read_json(inside)["verified"]
    assert verified["passed"] is True and verified["reference"] == "float64 on GPU"

    beyond = tmp_path / "beyond.json"
    assert _time("512x16384", "t256", correctness, controls, [sanitizer], beyond) == 2
    err = capsys.readouterr().err
    assert "rmsnorm 512x16384 t256: output at the timed shape differs from the float64 reference in " in err
    assert err.rstrip().endswith("nothing timed") and len(err.strip().splitlines()) == 1
    assert not beyond.exists()


@pytest.mark.parametrize("kernel, shape, layout, where", [
    ("rmsnorm", "16384x8193", "t32", "float64 on GPU"), ("matmul", "1024x1024x1024", "cupy", "float64 on GPU"),
    ("neighbor", "65536x128", "gather", "float64 on GPU"), ("rmsnorm", "512x128", "t32", verify.CPU_SMALL)])
def test_timing_records_the_verification_of_its_own_output(tmp_path, kernel, shape, layout, where):
    from kernelkit import library
    from kernelkit.timing import TimingSettings

    spec = specs.load(kernel)
    if spec.is_baseline(layout) and library.missing_reason(spec.baselines[layout].package):
        pytest.skip(library.missing_reason(spec.baselines[layout].package))
    correctness = tmp_path / "correctness.json"
    assert main(["correctness", "--kernel", kernel, "--layout", layout, "--output", str(correctness)]) == 0
    hand_written = [arg for name in spec.layouts for arg in ("--layout", name)]
    controls = []
    for control in sorted(spec.mutations):
        controls.append(str(tmp_path / f"{control}.json"))
        assert main(["control", "--kernel", kernel, "--control", control, *hand_written, "--output", controls[-1]]) == 0
    config = default_config()
    config["timing"].update(samples=3)
    output = tmp_path / "rep1.json"
    assert main(["time", "--kernel", kernel, "--shape", shape, "--layout", layout, "--repeat", "1", "--order-seed", "0",
                 "--order-key", "0", "--cache", "warm", "--settings", TimingSettings.json_from_config(config),
                 "--correctness", str(correctness), "--controls", *controls, "--output", str(output)]) == 0
    verified = read_json(output)["verified"]
    assert verified["passed"] is True and verified["mismatched"] == 0
    # Every kernel's reference runs on CuPy arrays (neighbor's through library.array_module); a small
    # shape's is computed on the CPU before the lock.
    assert verified["reference"] == where, verified["reference"]


def test_sanitizer_runs_only_the_chosen_cases_and_is_clean_on_the_real_kernels(tmp_path):
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on the PATH (the sanitizer target then records skipped)")
    for kernel in specs.available():
        spec = specs.load(kernel)
        for layout in spec.layouts:
            output = tmp_path / f"{kernel}-{layout}.json"
            assert main(["sanitize", "--kernel", kernel, "--layout", layout, "--output", str(output)]) == 0, (kernel, layout)
            record = read_json(output)
            assert len(record["cases"]) == len(spec.sanitizer_shapes_used())
            assert {tool: result["errors"] for tool, result in record["tools"].items()} == {"memcheck": 0, "racecheck": 0}
            # Every case launched under each tool, and the binary checked is the one a timing loads.
            assert {tool: result["launches"] for tool, result in record["tools"].items()} == {
                "memcheck": len(record["cases"]), "racecheck": len(record["cases"])}
            assert record["binaries"] == {layout: device.compile_layout(spec, layout).binary_sha256}


def test_a_waiting_child_sees_the_race_a_new_child_sees(tmp_path, monkeypatch):
    """A racecheck child started before its plan (kernelkit.standby) and claimed by the `barrier`
    control's run finds the race a child started by that run finds, over the same launches."""
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on the PATH (no child is started then)")
    from kernelkit import standby, tools

    monkeypatch.setenv("KERNELKIT_LOCK_DIR", str(tmp_path / "locks"))
    assert len(standby.start({"racecheck": 1, "memcheck": 1})) == 2
    waited = tools.racecheck_control("rmsnorm", ["t32", "t256", "vec"], "barrier")
    fresh = tools.racecheck_control("rmsnorm", ["t32", "t256", "vec"], "barrier")
    assert "waiting_child" in waited and "waiting_child" not in fresh
    assert waited["hazards"] > 0 and fresh["hazards"] > 0 and waited["launches"] == fresh["launches"] > 0
    record = tools.sanitize("rmsnorm", ["t32", "t256"])  # the memcheck child waits; racecheck's is new
    assert "waiting_child" in record["tools"]["memcheck"] and "waiting_child" not in record["tools"]["racecheck"]
    assert {tool: result["errors"] for tool, result in record["tools"].items()} == {"memcheck": 0, "racecheck": 0}
    assert not list((tmp_path / "locks").glob("kernelkit-standby-*/*/*"))


def test_the_waiting_childs_lock_key_from_the_driver_is_the_jobs():
    """driver_launch.lock_key (the driver's UUID, no NVML, no context) names the lock that the
    kit's jobs name through NVML (kernelkit.gpujob.gpu_key), so a waiting child made its context
    holding the jobs' lock."""
    from kernelkit import driver_launch, environment, gpujob

    driver = driver_launch.Driver()
    bus_id = device.cupy().cuda.Device(0).pci_bus_id
    assert driver_launch.lock_key(driver, driver_launch.first_device(driver)) == gpujob.gpu_key(environment.Nvml(bus_id), bus_id)
