"""Sanitizer children started before their plan (kernelkit.standby), on the CPU: the real start,
shell, claim and hand-over, the real waiting child (kernelkit.driver_launch --wait) on a stand-in
driver (tests/stand_in_cuda.py), and a stand-in compute-sanitizer that runs its program and
prints the tool's summary. That a waiting child on a GPU runs the kernels and racecheck sees the
`barrier` control through it is checked there (tests/test_gpu_race_checks.py, tests/test_gpu.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import kill_waiting_children

from kernelkit import driver_launch, gpulock, standby, tools

STAND_IN = Path(__file__).with_name("stand_in_cuda.py")
sys.path.insert(0, str(STAND_IN.parent))
from stand_in_cuda import KEY  # noqa: E402

SUMMARY = {"racecheck": "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)",
           "memcheck": "========= ERROR SUMMARY: 0 errors"}


def waiting_program(directory: Path) -> list[str]:
    return [sys.executable, str(STAND_IN), "--wait", str(directory)]


@pytest.fixture
def tool(tmp_path, monkeypatch):
    """A compute-sanitizer on the PATH that runs its program and then prints its tool's summary;
    the lock directory (and so the children's) in tmp_path. Children left at the end are killed."""
    monkeypatch.setenv("KERNELKIT_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("KERNELKIT_WORKER_IDLE_S", "30")
    folder = tmp_path / "bin"
    folder.mkdir()
    exe = folder / "compute-sanitizer"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        "arguments = sys.argv[1:]\n"
        "tool = arguments[arguments.index('--tool') + 1]\n"
        "program = arguments[arguments.index('--print-limit') + 2:]\n"
        "code = subprocess.call(program)\n"
        f"print({SUMMARY!r}[tool], flush=True)\n"
        "sys.exit(code)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    yield exe
    kill_waiting_children(tmp_path / "locks")


def wait_until(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def tiny_plan(folder: Path, lock: dict) -> Path:
    """One launch of a stand-in binary, with the lock a job's plan names."""
    folder.mkdir()
    (folder / "k.cubin").write_bytes(b"\x7fELF stand-in")
    plan = {"version": driver_launch.PLAN_VERSION, "lock": lock, "binaries": {"t32": str(folder / "k.cubin")},
            "buffers": {}, "launches": [{"label": "k t32 8x1 normal", "binary": "t32", "entry": "k", "grid": [1],
                                         "block": [32], "shared_mem": 0,
                                         "arguments": [{"output_bytes": 32, "fill": 0}, {"scalar": "int32", "value": 8}]}]}
    (folder / driver_launch.PLAN_FILE).write_text(json.dumps(plan))
    return folder


def job_lock(key: str = KEY) -> dict:
    return {"key": key, "settings": asdict(gpulock.shared_hold_settings())}


def test_a_waiting_child_runs_the_plan_of_the_job_that_claims_it(tmp_path, tool):
    began = time.time()
    (directory,) = standby.start({"racecheck": 1}, waiting_program)
    assert wait_until(lambda: (directory / standby.READY).exists())
    ready = json.loads((directory / standby.READY).read_text())
    assert ready["key"] == KEY and ready["lock_path"] == str(tmp_path / "locks" / gpulock.lock_name(KEY))

    result = tools._run_tool(str(tool), "racecheck", tiny_plan(tmp_path / "plan", job_lock()), job_lock(), 60)
    assert (result["exit_code"], result["errors"], result["launches"], result["status"]) == (0, 0, 1, "ran")
    waited = result["waiting_child"]
    assert set(waited) == {"started_unix_s", "context_s", "waited_for_its_context_s", "ready_before_claim_s"}
    assert began - 0.01 <= waited["started_unix_s"] <= began + 5
    assert "launched k t32 8x1 normal" in result["tail"] and "plan handed over after" in result["tail"]
    assert not directory.exists() and standby.waiting("racecheck") == 0


def test_a_job_claims_a_child_still_making_its_context_and_waits_for_it(tmp_path, tool):
    (directory,) = standby.start({"memcheck": 1}, waiting_program)
    result = tools._run_tool(str(tool), "memcheck", tiny_plan(tmp_path / "plan", job_lock()), job_lock(), 60)
    assert result["exit_code"] == 0 and result["errors"] == 0 and result["launches"] == 1
    assert result["waiting_child"]["waited_for_its_context_s"] >= 0 and not directory.exists()


def test_a_child_that_made_its_context_under_another_lock_is_sent_away(tmp_path, tool):
    (directory,) = standby.start({"racecheck": 1}, waiting_program)
    other = job_lock("GPU-another-card")
    result = tools._run_tool(str(tool), "racecheck", tiny_plan(tmp_path / "plan", other), other, 60)
    assert "waiting_child" not in result  # the job started a child of its own
    assert wait_until(lambda: not directory.exists())


def test_one_child_goes_to_one_claimant_only(tmp_path, tool):
    (directory,) = standby.start({"racecheck": 1}, waiting_program)
    first = standby.claim("racecheck", str(tool))
    assert first is not None and first.directory == directory
    assert standby.claim("racecheck", str(tool)) is None
    assert standby.claim("memcheck", str(tool)) is None
    assert standby.claim("racecheck", "/another/compute-sanitizer") is None
    first.send_away()
    assert wait_until(lambda: not directory.exists())


def test_a_child_nobody_claims_leaves_after_the_idle_time(tmp_path, tool, monkeypatch):
    monkeypatch.setenv("KERNELKIT_WORKER_IDLE_S", "1")
    (directory,) = standby.start({"racecheck": 1}, waiting_program)
    assert wait_until(lambda: (directory / standby.READY).exists())
    assert wait_until(lambda: not directory.exists(), timeout_s=20)
    assert standby.claim("racecheck", str(tool)) is None


def test_a_child_whose_claimant_died_leaves(tmp_path, tool):
    (directory,) = standby.start({"racecheck": 1}, waiting_program)
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert standby.take_claim(directory, {"pid": gone.pid})
    assert wait_until(lambda: not directory.exists())


def test_no_more_children_wait_than_one_target_needs_and_stale_ones_are_removed(tmp_path, tool):
    started = standby.start({"racecheck": 5, "memcheck": 3}, waiting_program)
    assert sorted(path.name.split("-")[0] for path in started) == ["memcheck", "racecheck", "racecheck"]
    assert standby.start({"racecheck": 2, "memcheck": 1}, waiting_program) == []
    assert (standby.waiting("racecheck"), standby.waiting("memcheck")) == (2, 1)
    stale = standby.root() / "racecheck-0-0-0"
    stale.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (stale / standby.SUPERVISOR).write_text(str(gone.pid))
    standby.remove_stale()
    assert not stale.exists() and all(path.exists() for path in started)
    for _ in started:
        claimed = standby.claim("racecheck", str(tool)) or standby.claim("memcheck", str(tool))
        claimed.send_away()
    assert wait_until(lambda: not any(path.exists() for path in started))


def test_without_compute_sanitizer_no_child_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELKIT_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert standby.start({"racecheck": 2}, waiting_program) == []


def test_the_starter_refuses_a_bad_word_in_one_sentence(capsys):
    assert standby.main(["racecheck=two"]) == 2
    assert capsys.readouterr().err == "kernelkit.standby: 'racecheck=two' is not TOOL=COUNT; tools: memcheck, racecheck\n"


def test_a_worker_finds_the_children_the_workflow_started_for_its_card(monkeypatch, tmp_path):
    """A pool's processes run with the kit's path first on PYTHONPATH (kernelkit.worker_client),
    the workflow's starter with the jobs' own: both must look in one place. A card of its own
    (CUDA_VISIBLE_DEVICES) is another place."""
    monkeypatch.setenv("KERNELKIT_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("PYTHONPATH", "/the/jobs/path")
    jobs = standby.root()
    monkeypatch.setenv("PYTHONPATH", "/the/kit:/the/jobs/path")
    assert standby.root() == jobs
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert standby.root() != jobs
