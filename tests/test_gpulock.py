"""The GPU lock (kernelkit.gpulock) on the CPU, with a made-up GPU key: one exclusive flock per GPU,
held by a command's own process until it exits (killed or not), taken by nobody else meanwhile,
and passed on to the children the holder starts on its GPU."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kernelkit import gpulock

REPO = Path(__file__).resolve().parent.parent
KEY = "GPU-fake"

# A command's own process: takes the lock (enabled or not, argv[3]), says so with its record, sleeps
# argv[1] s holding it, leaves the body, sleeps argv[2] s more, and says when it exits.
HOLDER = textwrap.dedent("""
    import json, sys, time
    from kernelkit import gpulock
    gpulock.command_is_process()
    settings = gpulock.LockSettings(enabled=sys.argv[3] == "on", dir=None, wait_for_idle=False,
                                    idle_timeout_s=1, idle_poll_s=0.1)
    with gpulock.gpu_work("GPU-fake", settings) as work:
        print("HELD", json.dumps(work.describe()), flush=True)
        time.sleep(float(sys.argv[1]))
    print("BODY_DONE", time.time(), flush=True)
    time.sleep(float(sys.argv[2]))
    print("EXIT", time.time(), flush=True)
""")


def environment(lock_dir: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO / "workflow"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path, gpulock.LOCK_DIR_VARIABLE: str(lock_dir)}
    env.pop(gpulock.HELD_BY_VARIABLE, None)
    return env


class Holder(subprocess.Popen):
    """A HOLDER process whose lines a thread reads as they come."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        super().__init__(argv, env=env, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(text.strip()) for text in self.stdout], daemon=True).start()

    def line(self, timeout_s: float = 30.0) -> str | None:
        """The next line of output, or None when none came within `timeout_s`."""
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            return None

    def held(self, timeout_s: float = 30.0) -> dict | None:
        """The lock's record once the process holds it, or None when it did not within `timeout_s`."""
        text = self.line(timeout_s)
        if text is None:
            return None
        assert text.startswith("HELD "), text
        return json.loads(text.split(" ", 1)[1])

    def stamp(self, word: str) -> float:
        text = self.line()
        assert text is not None and text.startswith(f"{word} "), text
        return float(text.split()[1])


def start(lock_dir: Path, inside_s: float, after_s: float, enabled: bool = True, **extra_env: str) -> Holder:
    argv = [sys.executable, "-c", HOLDER, str(inside_s), str(after_s), "on" if enabled else "off"]
    return Holder(argv, {**environment(lock_dir), **extra_env})


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    folder = tmp_path / "locks"
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(folder))
    monkeypatch.delenv(gpulock.HELD_BY_VARIABLE, raising=False)
    return folder


@pytest.fixture
def processes():
    started: list[Holder] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        process.stdout.close()


def test_a_second_process_waits_until_the_first_has_exited_not_only_left_its_body(lock_dir, processes):
    first = start(lock_dir, 0.3, 1.0)
    processes.append(first)
    mine = first.held()
    assert mine["enabled"] and not mine["nested"] and not mine["contended"]
    assert mine["lock_path"] == str(lock_dir / "kernelkit-gpu-GPU-fake.lock")
    began = time.time()
    second = start(lock_dir, 0.0, 0.0)
    processes.append(second)
    body_done, exited = first.stamp("BODY_DONE"), first.stamp("EXIT")
    theirs = second.held()
    assert first.wait(timeout=30) == 0 and second.wait(timeout=30) == 0
    # The second took the lock only after the first had exited, a second after its body ended.
    assert theirs["contended"] and theirs["acquired_unix_s"] >= exited >= body_done + 1.0
    assert theirs["waited_s"] > 0.5, (theirs, exited - began)
    # The lock file names the last holder for people and kernelkit.foreign, never for deciding.
    assert theirs["previous_holder"]["pid"] == str(first.pid)
    print(f"waited {theirs['waited_s']:.3f} s for a holder that exited {exited - began:.3f} s after the second began")


def test_a_killed_holder_lets_the_next_process_in_at_once(lock_dir, processes):
    first = start(lock_dir, 60.0, 0.0)
    processes.append(first)
    assert first.held() is not None
    second = start(lock_dir, 0.0, 0.0)
    processes.append(second)
    assert second.held(timeout_s=1.5) is None, "the second process took a lock that another holds"
    killed = time.time()
    first.send_signal(signal.SIGKILL)
    theirs = second.held(timeout_s=10)
    assert theirs is not None and theirs["contended"]
    assert theirs["acquired_unix_s"] - killed < 1.0, theirs["acquired_unix_s"] - killed
    assert second.wait(timeout=30) == 0 and first.wait(timeout=30) == -signal.SIGKILL


def run_child_of_a_holder(lock_dir: Path, child: str) -> dict:
    """A holder that keeps the lock until it exits and starts `child` (a shell command line, where
    PROGRAM stands for the child program) with child_environment(); what the child said, or that
    it did not finish within 10 s."""
    program = textwrap.dedent(f"""
        import json, shlex, subprocess, sys, time
        from kernelkit import gpulock
        gpulock.command_is_process()
        settings = gpulock.LockSettings(enabled=True, dir=None, wait_for_idle=False, idle_timeout_s=1, idle_poll_s=0.1)
        with gpulock.gpu_work("GPU-fake", settings):
            pass
        command = {child!r}.replace("PROGRAM", shlex.join([sys.executable, "-c", {HOLDER!r}, "0", "0", "on"]))
        began = time.monotonic()
        try:
            done = subprocess.run(["sh", "-c", command], env=gpulock.child_environment(), capture_output=True,
                                  text=True, timeout=10)
        except subprocess.TimeoutExpired:
            print(json.dumps({{"finished": False}}))
        else:
            print(json.dumps({{"finished": True, "output": done.stdout, "seconds": time.monotonic() - began}}))
    """)
    done = subprocess.run([sys.executable, "-c", program], env=environment(lock_dir), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_child_started_with_the_holders_environment_runs_under_its_hold(lock_dir):
    ran = run_child_of_a_holder(lock_dir, "exec PROGRAM")
    assert ran["finished"], "the child waited for the lock its own parent holds"
    work = json.loads(ran["output"].splitlines()[0].split(" ", 1)[1])
    assert work["nested"] and work["enabled"] and not work["contended"] and work["waited_s"] == 0.0
    assert work["acquired_unix_s"] is None


def test_a_child_started_through_a_wrapper_runs_under_the_holders_hold_too(lock_dir):
    """compute-sanitizer starts the kit's command (kernelkit.sanitizer._run_tool) as a child of its own, so the process
    that needs the holder's hold is its grandchild; a shell that forks stands in for the tool here."""
    ran = run_child_of_a_holder(lock_dir, "PROGRAM; true")
    assert ran["finished"], "the grandchild waited for the lock its grandparent holds (until the holder exits)"
    assert json.loads(ran["output"].splitlines()[0].split(" ", 1)[1])["nested"]


def test_a_process_not_started_by_the_holder_waits_even_with_the_variable_set(lock_dir, processes):
    """The variable names the holder's pid: another process that inherited it elsewhere takes no
    hold it does not have."""
    first = start(lock_dir, 60.0, 0.0)
    processes.append(first)
    assert first.held() is not None
    second = start(lock_dir, 0.0, 0.0, **{gpulock.HELD_BY_VARIABLE: str(first.pid)})
    processes.append(second)
    assert second.held(timeout_s=1.5) is None


def test_with_the_lock_disabled_nothing_is_taken_and_the_record_says_so(lock_dir, processes):
    settings = gpulock.LockSettings(enabled=False, dir=None, wait_for_idle=False, idle_timeout_s=1, idle_poll_s=0.1)
    with gpulock.gpu_work(KEY, settings) as work:
        pass
    assert not lock_dir.exists(), "a disabled lock made its directory"
    record = work.describe()
    assert record["enabled"] is False and record["nested"] is False and record["contended"] is False
    assert record["waited_s"] == 0.0 and record["acquired_unix_s"] is None and record["previous_holder"] == {}
    # Beside a holder, a disabled process does not wait.
    first = start(lock_dir, 60.0, 0.0)
    processes.append(first)
    assert first.held() is not None
    unlocked = start(lock_dir, 0.0, 0.0, enabled=False)
    processes.append(unlocked)
    theirs = unlocked.held(timeout_s=10)
    assert theirs is not None and theirs["enabled"] is False and not theirs["contended"] and theirs["waited_s"] == 0.0


def test_in_a_longer_lived_process_the_lock_goes_after_the_body_and_a_second_stretch_nests(lock_dir, processes):
    """The tests run commands inside pytest's process: there the hold ends with its body, so that the
    next command (or another process) can take it; inside the body, a second stretch takes nothing."""
    settings = gpulock.LockSettings(enabled=True, dir=None, wait_for_idle=False, idle_timeout_s=1, idle_poll_s=0.1)
    with gpulock.gpu_work(KEY, settings) as outer:
        with gpulock.gpu_work(KEY, settings) as inner:
            pass
    assert not outer.nested and inner.nested and inner.waited_s == 0.0
    assert KEY not in gpulock._held
    after = start(lock_dir, 0.0, 0.0)
    processes.append(after)
    theirs = after.held(timeout_s=10)
    assert theirs is not None and not theirs["contended"]
    assert theirs["previous_holder"]["pid"] == str(os.getpid())
