"""On a real GPU (issue 12, items 2 and 3): a reduction without its in-loop barrier, and a kernel
wrong only beyond the correctness shapes, are both stopped before anything is timed.

Run with `pytest -m gpu tests/test_gpu_race_checks.py`; without a GPU every test is skipped with
the reason. The broken kernels are copies of kernels/ written by tests/fixtures/broken_kernels.py.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import time
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


def _time(shape, layout, correctness, controls, sanitizer, output_dir):
    """`kernelkit time` of one layout; its record goes to output_dir/<layout>/rep1.json."""
    from kernelkit.timing import TimingSettings

    config = default_config()
    config["timing"].update(samples=5)
    return main(["time", "--kernel", "rmsnorm", "--shape", shape, "--layout", layout, "--repeat", "1",
                 "--order-seed", "0", "--order-key", "0", "--cache", "warm",
                 "--settings", TimingSettings.json_from_config(config), "--correctness", str(correctness),
                 "--controls", *map(str, controls), "--sanitizer", *map(str, sanitizer), "--output-dir", str(output_dir)])


def _controls(tmp_path, spec):
    """Every control of the spec in one `control` process, over every hand-written layout (vec_*
    mutate only vec), as the workflow's negative_controls job runs them: their records."""
    hand_written = [arg for layout in spec.layouts for arg in ("--layout", layout)]
    assert main(["control", "--kernel", "rmsnorm", *hand_written, "--output-dir", str(tmp_path / "controls")]) == 0
    return [tmp_path / "controls" / f"{control}.json" for control in spec.mutations]


def _correctness(tmp_path, kernel, layout):
    """`kernelkit correctness` of one layout: its exit code and where its record goes (<layout>.json)."""
    code = main(["correctness", "--kernel", kernel, "--layout", layout, "--output-dir", str(tmp_path / "correctness")])
    return code, tmp_path / "correctness" / f"{layout}.json"


@pytest.mark.parametrize("layout", ["t32", "t256"])
def test_barrier_control_is_caught_in_each_layout_alone(tmp_path, layout):
    output = tmp_path / "controls" / "barrier.json"
    assert main(["control", "--kernel", "rmsnorm", "--control", "barrier", "--layout", layout,
                 "--output-dir", str(output.parent)]) == 0
    assert [path.name for path in output.parent.iterdir()] == ["barrier.json"]
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
    sanitizer = tmp_path / f"sanitizer-{layout}.json"
    stopped_by = None
    code, correctness = _correctness(tmp_path, "rmsnorm", layout)
    if code != 0:
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
    timing = tmp_path / "timing"
    assert _time("512x4096", layout, correctness, controls, [sanitizer], timing) == 2
    assert not timing.exists()


def test_kernel_wrong_only_beyond_the_checked_shapes_is_stopped_at_its_timed_shape(tmp_path, monkeypatch, capsys):
    kernels = tmp_path / "kernels"
    _fixtures().write_wrong_beyond_checks(kernels)
    monkeypatch.setenv("KERNELKIT_KERNELS", str(kernels))
    spec = specs.load("rmsnorm")
    controls = _controls(tmp_path, spec)  # every control, the barrier included, is still caught
    sanitizer = tmp_path / "sanitizer.json"
    code, correctness = _correctness(tmp_path, "rmsnorm", "t256")
    assert code == 0
    assert main(["sanitize", "--kernel", "rmsnorm", "--layout", "t256", "--output", str(sanitizer)]) == 0
    capsys.readouterr()

    inside = tmp_path / "inside"  # the widest checked width: right, verified and timed
    assert _time("512x8193", "t256", correctness, controls, [sanitizer], inside) == 0
    verified = read_json(inside / "t256" / "rep1.json")["verified"]
    assert verified["passed"] is True and verified["reference"] == "float64 on GPU"

    beyond = tmp_path / "beyond"
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
    code, correctness = _correctness(tmp_path, kernel, layout)
    assert code == 0
    hand_written = [arg for name in spec.layouts for arg in ("--layout", name)]
    assert main(["control", "--kernel", kernel, *hand_written, "--output-dir", str(tmp_path / "controls")]) == 0
    controls = [str(tmp_path / "controls" / f"{control}.json") for control in spec.mutations]
    config = default_config()
    config["timing"].update(samples=3)
    output = tmp_path / "timing"
    assert main(["time", "--kernel", kernel, "--shape", shape, "--layout", layout, "--repeat", "1", "--order-seed", "0",
                 "--order-key", "0", "--cache", "warm", "--settings", TimingSettings.json_from_config(config),
                 "--correctness", str(correctness), "--controls", *controls, "--output-dir", str(output)]) == 0
    verified = read_json(output / layout / "rep1.json")["verified"]
    assert verified["passed"] is True and verified["mismatched"] == 0
    # Every kernel's reference runs on CuPy arrays (neighbor's through library.array_module); a small
    # shape's is computed on the CPU before the lock.
    assert verified["reference"] == where, verified["reference"]


def test_sanitizer_runs_only_the_chosen_cases_and_is_clean_on_the_real_kernels(tmp_path):
    """As the workflow's sanitize job runs it: every hand-written layout of a kernel in one
    `kernelkit correctness --sanitizer-cases` child per tool."""
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on the PATH (the sanitizer target then records skipped)")
    for kernel in specs.available():
        spec = specs.load(kernel)
        layouts = list(spec.layouts)
        output = tmp_path / f"{kernel}.json"
        assert main(["sanitize", "--kernel", kernel, *[a for name in layouts for a in ("--layout", name)],
                     "--output", str(output)]) == 0, kernel
        record = read_json(output)
        assert record["layouts"] == layouts and len(record["cases"]) == len(spec.sanitizer_shapes_used())
        assert {tool: result["errors"] for tool, result in record["tools"].items()} == {"memcheck": 0, "racecheck": 0}
        assert {tool: (result["status"], result["exit_code"]) for tool, result in record["tools"].items()} == {
            "memcheck": ("ran", 0), "racecheck": ("ran", 0)}
        assert "by_layout" not in record  # nothing found, so no tool ran each layout alone
        # The binary checked is the one a timing loads.
        assert record["binaries"] == {layout: device.compile_layout(spec, layout).binary_sha256 for layout in layouts}


def _own_process(argv: list[str], lock_dir: Path, timeout_s: float = 600) -> tuple[subprocess.CompletedProcess, float]:
    """`python -m kernelkit ARGV` as the workflow runs it: a process of its own, which keeps its GPU
    hold until it exits; with this test's lock directory. Its result and wall time."""
    from conftest import REPO, kit_env

    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kernelkit", *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s, env=kit_env(REPO, KERNELKIT_LOCK_DIR=str(lock_dir)))
    return done, time.monotonic() - began


def test_the_sanitizer_job_holds_the_gpu_and_its_tools_children_run_under_its_hold(tmp_path):
    """The sanitize command, its own process, takes the GPU lock and keeps it until it exits; each
    tool's `kernelkit correctness` child runs under that hold (kernelkit.gpulock.child_environment),
    though compute-sanitizer, not the holder, is its parent. Waiting for the lock there would last
    until the tool's timeout (900 s)."""
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on the PATH (no child is started then)")
    output = tmp_path / "rmsnorm.json"
    done, seconds = _own_process(["sanitize", "--kernel", "rmsnorm", "--layout", "t32", "--layout", "t256",
                                  "--output", str(output)], tmp_path / "locks")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    record = read_json(output)
    assert {tool: result["errors"] for tool, result in record["tools"].items()} == {"memcheck": 0, "racecheck": 0}
    assert seconds < 300 and all(result["wall_s"] < 120 for result in record["tools"].values()), record["tools"]
    assert not record["job"]["gpu_work"][0]["nested"]


def test_the_barrier_control_as_its_own_process_sees_the_race_under_its_hold(tmp_path):
    """The `barrier` control's racecheck child runs beside the control's own cases, under the hold
    its parent took first (kernelkit.cases.hold_gpu), as in the workflow's negative_controls job."""
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer is not on the PATH (no child is started then)")
    folder = tmp_path / "controls"
    done, seconds = _own_process(["control", "--kernel", "rmsnorm", "--control", "barrier", "--layout", "t32",
                                  "--layout", "t256", "--layout", "vec", "--output-dir", str(folder)], tmp_path / "locks")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    racecheck = read_json(folder / "barrier.json")["racecheck"]
    assert racecheck["status"] == "ran" and racecheck["hazards"] > 0 and racecheck["wall_s"] < 120, racecheck
    assert seconds < 300
