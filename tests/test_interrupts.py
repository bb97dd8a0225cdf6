"""Interruptions on the CPU, with a fake GPU step: a job that takes the kit's GPU lock, sleeps,
then writes its record atomically. The workflow here has the kit's own onstart hook
(kernelkit.guards.stop_jobs_on_signals), as the kit's Snakefile does; the GPU machine checks the
real workflow the same way."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SNAKEMAKE = shutil.which("snakemake")
pytestmark = pytest.mark.skipif(SNAKEMAKE is None or not Path("/proc").is_dir(),
                                reason="needs snakemake on the PATH and /proc (Linux)")

FAKE_JOB = textwrap.dedent("""
    import sys, time
    from kernelkit import gpulock
    from kernelkit.records import write_record
    gpulock.command_is_process()
    with gpulock.gpu_work("GPU-fake", gpulock.LockSettings(enabled=True, dir=None, wait_for_idle=False,
                                                           idle_timeout_s=1, idle_poll_s=0.1)):
        time.sleep(float(sys.argv[2]))
    write_record(sys.argv[1], {"slept": float(sys.argv[2])})
""")


def workflow(folder: Path, seconds: float) -> Path:
    folder.mkdir(parents=True)
    (folder / "fake_job.py").write_text(FAKE_JOB)
    (folder / "Snakefile").write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / "workflow")!r})
        onstart:
            from kernelkit import guards
            guards.stop_jobs_on_signals()
        rule all:
            input: expand("out/{{x}}.json", x=["a", "b", "c"])
        rule job:
            output: "out/{{x}}.json"
            shell: "{sys.executable} fake_job.py {{output}} {seconds}"
    """))
    return folder


def start(folder: Path, tmp_path: Path) -> subprocess.Popen:
    env = {**os.environ, "KERNELKIT_LOCK_DIR": str(tmp_path / "locks"),
           "PYTHONPATH": str(REPO / "workflow")}
    return subprocess.Popen([SNAKEMAKE, "--cores", "3"], cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def fake_jobs(folder: Path) -> list[int]:
    """The pids of this test's fake jobs still running."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if "fake_job.py" in cmdline and cwd == str(folder):
                found.append(int(entry))
    return found


def wait_until(condition, timeout_s: float) -> float | None:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if condition():
            return time.monotonic() - began
        time.sleep(0.05)
    return None


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in (folder / "out").glob("*")] if (folder / "out").exists() else []


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_snakemake_alone_stops_every_job_within_five_seconds(tmp_path, number):
    folder = workflow(tmp_path / "wf", seconds=60)
    snakemake = start(folder, tmp_path)
    assert wait_until(lambda: len(fake_jobs(folder)) == 3, 30) is not None, "the three jobs never started"
    snakemake.send_signal(number)  # to Snakemake's pid alone, not its process group
    took = wait_until(lambda: not fake_jobs(folder), 5)
    assert took is not None, f"jobs still running 5 s after the signal: {fake_jobs(folder)}"
    snakemake.wait(timeout=30)
    assert snakemake.returncode != 0
    assert leftovers(folder) == [], "an interrupted job left a file behind"


def test_after_kill_9_the_jobs_end_on_their_own_and_unlock_then_rerun_completes(tmp_path):
    folder = workflow(tmp_path / "wf", seconds=1.5)
    snakemake = start(folder, tmp_path)
    assert wait_until(lambda: len(fake_jobs(folder)) == 3, 30) is not None, "the three jobs never started"
    snakemake.kill()
    snakemake.wait()
    # One lock: the jobs finish one after another (3 x 1.5 s), then nothing of theirs is left.
    assert wait_until(lambda: not fake_jobs(folder), 20) is not None, "a job outlived its work"
    assert not [p for p in (folder / "out").glob(".*tmp*")], "a partial record was left"
    env = {**os.environ, "KERNELKIT_LOCK_DIR": str(tmp_path / "locks"), "PYTHONPATH": str(REPO / "workflow")}
    # The README's recovery: unlock, then the same command (the kit's profile sets --rerun-incomplete).
    subprocess.run([SNAKEMAKE, "--unlock"], cwd=folder, env=env, check=True, capture_output=True)
    done = subprocess.run([SNAKEMAKE, "--cores", "3", "--rerun-incomplete"], cwd=folder, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(leftovers(folder)) == ["a.json", "b.json", "c.json"]


def test_one_lock_serialises_the_fake_gpu_steps(tmp_path):
    """Three jobs at once, one GPU: their locked stretches never overlap."""
    folder = workflow(tmp_path / "wf", seconds=1)
    began = time.monotonic()
    snakemake = start(folder, tmp_path)
    output, _ = snakemake.communicate(timeout=120)
    assert snakemake.returncode == 0, output
    assert time.monotonic() - began >= 3.0
