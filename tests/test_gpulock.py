"""The per-GPU lock with real flock across real processes: who waits, for how long, and what a
killed holder leaves behind (nothing)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import REPO, kit_env

from kernelkit import KitError, gpujob, gpulock, membership

KEY = "GPU-12345678-abcd-ef01-2345-6789abcdef01"

HOLDER = """
import json, sys, time
from pathlib import Path
from kernelkit import gpujob, gpulock
with gpulock.gpu_work(sys.argv[1], gpulock.LockSettings()) as work:
    Path(sys.argv[2]).write_text("held")
    time.sleep(float(sys.argv[3]))
print(json.dumps(work.describe()))
"""


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    path = tmp_path / "locks"
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(path))
    return path


def start_holder(tmp_path: Path, hold_s: float) -> tuple[subprocess.Popen, Path]:
    ready = tmp_path / f"ready-{time.monotonic_ns()}"
    env = kit_env(REPO)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, KEY, str(ready), str(hold_s)], env=env,
                              stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert holder.poll() is None, "the holder process ended before taking the lock"
        assert time.monotonic() < deadline, "the holder never took the lock"
        time.sleep(0.01)
    return holder, ready


def lock_is_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_a_second_process_waits_until_the_first_releases(lock_dir, tmp_path):
    holder, _ = start_holder(tmp_path, hold_s=0.8)
    asked = time.time()
    with gpulock.gpu_work(KEY, gpulock.LockSettings()) as work:
        pass
    out, _ = holder.communicate(timeout=30)
    held = json.loads(out)
    # The waiter got the lock only after the holder let it go, and its record says it waited.
    assert work.acquired_unix_s >= held["released_unix_s"]
    assert work.contended and work.waited_s >= held["released_unix_s"] - asked - 0.05 > 0.3
    assert work.previous_holder["pid"] == str(holder.pid)
    assert held["held_s"] >= 0.8 and not held["contended"]


JOB = """
import json, sys, time
from kernelkit import gpujob, gpulock
clock = gpujob.JobClock()
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all jobs reach the GPU together
for _ in range(3):
    time.sleep(0.02)  # the CPU side of the job, outside the lock
    with gpulock.gpu_work(sys.argv[1], gpulock.LockSettings()) as work:
        clock.add(work)
        time.sleep(float(sys.argv[3]) if len(sys.argv) > 3 else 0.05)
print(json.dumps(clock.describe()))
"""


def test_many_jobs_never_hold_the_gpu_at_once(lock_dir):
    env = kit_env(REPO)
    start = str(time.time() + 4.0)  # late enough that all three have started, even on a loaded machine
    jobs = [subprocess.Popen([sys.executable, "-c", JOB, KEY, start], env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(4)]
    records = [json.loads(job.communicate(timeout=60)[0]) for job in jobs]
    stretches = sorted((w["acquired_unix_s"], w["released_unix_s"]) for r in records for w in r["gpu_work"])
    assert len(stretches) == 12
    assert all(released <= next_acquired for (_, released), (next_acquired, _) in zip(stretches, stretches[1:]))
    # 12 holds of 50 ms in a row: together the jobs waited, and each job's wall time holds its own waits.
    assert sum(r["lock_waited_s"] for r in records) > 0.1
    assert all(r["wall_s"] >= r["lock_waited_s"] + r["lock_held_s"] for r in records)


def test_run_time_is_first_start_to_last_end_with_every_jobs_lock_wait(lock_dir):
    """records.run_time over the "job" fields real jobs wrote: three jobs that each hold the GPU
    3 x 200 ms can finish no sooner than 1.8 s after the first began, and they wait for each other
    (holds this long overlap even when a loaded machine starts the processes unevenly)."""
    from kernelkit.records import run_time

    env = kit_env(REPO)
    start = str(time.time() + 4.0)  # late enough that all three have started, even on a loaded machine
    jobs = [subprocess.Popen([sys.executable, "-c", JOB, KEY, start, "0.2"], env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(3)]
    clocks = [json.loads(job.communicate(timeout=60)[0]) for job in jobs]
    summary = run_time([{"job": clock} for clock in clocks] + [{"kernel": "written before jobs were timed"}])
    assert summary["jobs"] == 3 and summary["without_job_time"] == 1
    assert summary["started_unix_s"] == min(c["started_unix_s"] for c in clocks)
    assert summary["wall_s"] == max(c["ended_unix_s"] for c in clocks) - summary["started_unix_s"]
    assert summary["wall_s"] >= 1.8  # nine holds of 200 ms, one after another
    waits = sorted(c["lock_waited_s"] for c in clocks)
    assert summary["lock_waited_s"] == {"total": pytest.approx(sum(waits)), "median": waits[1], "max": waits[2]}
    assert waits[2] > 0, "jobs that reach the GPU together queue for it"
    assert summary["lock_held_s_total"] == pytest.approx(sum(c["lock_held_s"] for c in clocks))
    assert summary["lock_held_s_total"] >= 1.8
    assert run_time([{"kernel": "old"}]) == {"jobs": 0, "without_job_time": 1, "wall_s": None, "lock_waited_s": None}


def test_a_killed_holder_releases_the_lock(lock_dir, tmp_path):
    holder, _ = start_holder(tmp_path, hold_s=60)
    path = lock_dir / gpulock.lock_name(KEY)
    assert not lock_is_free(path)
    killer = threading.Timer(0.5, lambda: os.kill(holder.pid, signal.SIGKILL))
    killer.start()
    with gpulock.gpu_work(KEY, gpulock.LockSettings()) as work:
        assert holder.wait(timeout=5) == -signal.SIGKILL
    killer.join()
    assert work.contended and 0.3 < work.waited_s < 30
    # The dead holder's text is still in the file, but the lock is free: the file is not the lock.
    assert work.previous_holder["pid"] == str(holder.pid) and "released_unix_s" not in work.previous_holder
    assert lock_is_free(path)


def test_lock_dir_and_file_are_shared_with_every_user(tmp_path, monkeypatch):
    path = tmp_path / "a" / "locks"
    monkeypatch.delenv(gpulock.LOCK_DIR_VARIABLE, raising=False)
    old = os.umask(0o077)
    try:
        with gpulock.gpu_work(KEY, gpulock.LockSettings(dir=str(path))) as work:
            assert not lock_is_free(Path(work.lock_path))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o1777
    assert stat.S_IMODE(Path(work.lock_path).stat().st_mode) == 0o666
    assert Path(work.lock_path).name == f"kernelkit-gpu-{KEY}.lock" and Path(work.lock_path).parent == path


def test_environment_variable_wins_over_config(tmp_path, monkeypatch):
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(tmp_path / "from-env"))
    assert gpulock.LockSettings(dir=str(tmp_path / "from-config")).lock_dir() == tmp_path / "from-env"
    monkeypatch.delenv(gpulock.LOCK_DIR_VARIABLE)
    assert gpulock.LockSettings(dir=str(tmp_path / "from-config")).lock_dir() == tmp_path / "from-config"
    assert gpulock.LockSettings().lock_dir() == Path(gpulock.DEFAULT_LOCK_DIR)


def test_an_unusable_lock_dir_is_one_sentence(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(blocker / "locks"))
    with pytest.raises(KitError, match="cannot be created"):
        with gpulock.gpu_work(KEY, gpulock.LockSettings()):
            pass


def test_nested_work_in_one_process_does_not_wait_on_itself(lock_dir):
    with gpulock.gpu_work(KEY, gpulock.LockSettings()) as outer:
        with gpulock.gpu_work(KEY, gpulock.LockSettings()) as inner:
            assert inner.nested and inner.waited_s == 0.0
        assert not lock_is_free(Path(outer.lock_path))
    assert not outer.nested and lock_is_free(Path(outer.lock_path))


def test_disabled_lock_runs_unlocked_and_says_so(lock_dir):
    with gpulock.gpu_work(KEY, gpulock.LockSettings(enabled=False)) as work:
        pass
    assert not work.enabled and not lock_dir.exists()


def test_job_clock_sums_the_waits(lock_dir, tmp_path):
    clock = gpujob.JobClock()
    holder, _ = start_holder(tmp_path, hold_s=0.4)
    with gpulock.gpu_work(KEY, gpulock.LockSettings()) as first:
        clock.add(first)
        time.sleep(0.05)
    holder.communicate(timeout=30)
    with gpulock.gpu_work(KEY, gpulock.LockSettings()) as second:
        clock.add(second)
    record = clock.describe()
    assert record["lock_waited_s"] == pytest.approx(first.waited_s + second.waited_s, abs=1e-5)
    assert first.waited_s > 0.2 and record["lock_held_s"] >= 0.05
    # Wall time runs from the process's start, so it holds the waits, the holds and the imports.
    assert record["wall_s"] >= record["lock_waited_s"] + record["lock_held_s"]
    assert [w["held_s"] for w in record["gpu_work"]] == [first.held_s, second.held_s]


def test_gpu_key_prefers_the_uuid_and_falls_back_to_the_bus_id():
    class Nvml:
        error = None

        def __init__(self, uuid):
            self.uuid = uuid

        def read(self, getter):
            return self.uuid

    assert gpujob.gpu_key(Nvml(KEY), "0000:19:00.0") == KEY
    assert gpujob.gpu_key(Nvml("unavailable: NVMLError_NoPermission"), "0000:19:00.0") == "pci-0000:19:00.0"
    with pytest.raises(KitError, match="cannot be locked"):
        gpujob.gpu_key(Nvml("unavailable: x"), None)
    assert gpulock.lock_name("GPU-a/b c") == "kernelkit-gpu-GPU-a_b_c.lock"
    with pytest.raises(KitError):
        gpulock.lock_name("..")


def test_lock_settings_come_from_each_gpu_stage_s_settings_param_without_the_directory(tmp_path, monkeypatch):
    """The schema holds the defaults; every GPU stage's one settings param carries the lock keys
    that can change a result, never the directory (moving the lock files must rerun nothing)."""
    from conftest import default_config

    from kernelkit import config
    from kernelkit.ceilings import CeilingSettings
    from kernelkit.checks import CheckSettings
    from kernelkit.span import SpanSettings
    from kernelkit.timing import TimingSettings

    defaults = config.schema()["properties"]["gpu_lock"]["properties"]
    assert gpulock.LockSettings() == gpulock.LockSettings(**{key: entry["default"] for key, entry in defaults.items()})
    base = default_config()
    moved = config.validate({**base, "gpu_lock": {"dir": str(tmp_path), "wait_for_idle": True, "idle_timeout_s": 5}})
    for stage in (TimingSettings, SpanSettings, CeilingSettings, CheckSettings):
        assert stage.json_from_config(base) == stage.json_from_config({**base, "gpu_lock": {**moved["gpu_lock"],
                                                                                            "wait_for_idle": False,
                                                                                            "idle_timeout_s": 60.0}})
        lock = stage.from_json(stage.json_from_config(moved)).lock
        assert lock == gpulock.LockSettings(wait_for_idle=True, idle_timeout_s=5)
        assert lock.with_dir("/x").dir == "/x" and lock.with_dir(None) == lock
    with pytest.raises(KitError, match="'gpu_lock.idle_poll_s' must be a number of seconds from 0.01 to 5"):
        CheckSettings.from_json('{"gpu_lock": {"idle_poll_s": 60}}')
    with pytest.raises(KitError, match="'gpu_lock.dir' is not known"):
        CheckSettings.from_json('{"gpu_lock": {"dir": "/x"}}')
    assert gpulock.LockSettings.from_config({"dir": "/y", "enabled": False}) == gpulock.LockSettings(False, "/y")
    assert gpulock.LockSettings.from_config({"dir": "/y"}, lock_dir="/z").dir == "/z"


KEEPER = """
import sys, time
from pathlib import Path
from kernelkit import gpujob, gpulock
if sys.argv[3] == "process":
    gpulock.command_is_process()
with gpulock.gpu_work(sys.argv[1], gpulock.LockSettings(), until_exit=True) as work:
    pass
Path(sys.argv[2]).write_text(str(work.held_s))
time.sleep(1.0)  # what comes after the body: writing records, then the context's teardown at exit
"""


@pytest.mark.parametrize("mode, held_after_body", [("process", True), ("in_process", False)])
def test_a_lock_kept_until_exit_is_released_by_the_exit_not_the_body(lock_dir, tmp_path, mode, held_after_body):
    """A command that is its own process keeps the lock past its body until it exits (its CUDA
    context dies at exit, inside the lock); run inside a longer-lived process it releases at the
    end of the body, so that the caller can start GPU processes afterwards."""
    done = tmp_path / "body-done"
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER, KEY, str(done), mode], env=kit_env(REPO))
    deadline = time.monotonic() + 30
    while not done.exists():
        assert keeper.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    path = lock_dir / gpulock.lock_name(KEY)
    assert lock_is_free(path) is (not held_after_body)
    assert keeper.wait(timeout=30) == 0
    assert lock_is_free(path)


STRETCH = """
import json, sys, time
from kernelkit import gpujob, gpulock
plan = json.loads(sys.argv[2])
if plan.get("process"):
    gpulock.command_is_process()
time.sleep(max(0.0, plan["at"] - time.time()))
inner = None
with gpulock.gpu_work(sys.argv[1], gpulock.LockSettings(), plan.get("until_exit", False), plan["mode"]) as outer:
    time.sleep(plan["hold_s"])
    if "exclusive_s" in plan:
        with gpulock.gpu_work(sys.argv[1], gpulock.LockSettings(), mode="exclusive") as inner:
            time.sleep(plan["exclusive_s"])
        time.sleep(plan.get("shared_after_s", 0.0))
print(json.dumps({"outer": outer.describe(), "inner": inner.describe() if inner else None}), flush=True)
time.sleep(plan.get("after_body_s", 0.0))
"""


def run_stretches(plans: list[dict]) -> list[dict]:
    """Each plan in its own process, all started before the earliest plan's `at`; their records."""
    env = kit_env(REPO)
    processes = [subprocess.Popen([sys.executable, "-c", STRETCH, KEY, json.dumps(plan)], env=env,
                                  stdout=subprocess.PIPE, text=True) for plan in plans]
    return [json.loads(process.communicate(timeout=60)[0]) for process in processes]


def interval(work: dict) -> tuple[float, float]:
    return work["acquired_unix_s"], work["released_unix_s"]


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_shared_holders_overlap_each_other_and_never_an_exclusive_one(lock_dir):
    at = time.time() + 4.0  # late enough that every process has started, even on a loaded machine
    shared_a, shared_b, exclusive = run_stretches([
        {"at": at, "mode": "shared", "hold_s": 0.6},
        {"at": at, "mode": "shared", "hold_s": 0.6},
        {"at": at + 0.2, "mode": "exclusive", "hold_s": 0.3},
    ])
    a, b, x = interval(shared_a["outer"]), interval(shared_b["outer"]), interval(exclusive["outer"])
    assert overlap(a, b), "two shared holders ran one after the other"
    assert not overlap(x, a) and not overlap(x, b)
    assert exclusive["outer"]["contended"] and exclusive["outer"]["waited_s"] > 0.2
    assert [shared_a["outer"]["mode"], exclusive["outer"]["mode"]] == ["shared", "exclusive"]


def test_a_waiting_exclusive_holder_goes_before_shared_holders_that_came_after_it(lock_dir):
    """The gate: without it, shared holders arriving one after another would keep the lock shared
    for ever, and a timing process would never get the GPU."""
    at = time.time() + 4.0
    first, exclusive, later = run_stretches([
        {"at": at, "mode": "shared", "hold_s": 1.0},
        {"at": at + 0.3, "mode": "exclusive", "hold_s": 0.3},
        {"at": at + 0.6, "mode": "shared", "hold_s": 0.3},
    ])
    assert first["outer"]["released_unix_s"] <= exclusive["outer"]["acquired_unix_s"]
    assert exclusive["outer"]["released_unix_s"] <= later["outer"]["acquired_unix_s"]
    assert later["outer"]["contended"] and later["outer"]["waited_s"] > 0.5


def test_an_exclusive_stretch_inside_a_shared_hold_excludes_others_and_shares_again_after(lock_dir):
    """A timing job: shared while it loads and checks, exclusive while it times, shared again
    until it exits (its context is destroyed at exit)."""
    at = time.time() + 4.0
    path = lock_dir / gpulock.lock_name(KEY)
    env = kit_env(REPO)
    job = subprocess.Popen([sys.executable, "-c", STRETCH, KEY, json.dumps(
        {"at": at, "mode": "shared", "hold_s": 0.3, "exclusive_s": 0.5, "until_exit": True, "process": True,
         "after_body_s": 1.5})], env=env, stdout=subprocess.PIPE, text=True)
    neighbour = run_stretches([{"at": at + 0.1, "mode": "shared", "hold_s": 0.6}])[0]
    record = json.loads(job.stdout.readline())
    inner = record["inner"]
    assert inner["mode"] == "exclusive" and not inner["nested"] and not inner["kept_until_exit"]
    assert not overlap(interval(inner), interval(neighbour["outer"]))
    # After the body the job still shares the GPU: no exclusive holder can come in, a shared one can.
    assert record["outer"]["kept_until_exit"] and record["outer"]["released_unix_s"] is None
    assert not lock_is_free(path)
    probe = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
    finally:
        os.close(probe)
    assert job.wait(timeout=30) == 0
    assert lock_is_free(path)


def test_nested_stretches_within_one_process_do_not_wait_on_themselves(lock_dir):
    with gpulock.gpu_work(KEY, gpulock.LockSettings(), mode=gpulock.EXCLUSIVE) as outer:
        with gpulock.gpu_work(KEY, gpulock.LockSettings(), mode=gpulock.SHARED) as inner:
            pass
    assert inner.nested and not outer.nested
    with pytest.raises(ValueError, match="mode must be"):
        with gpulock.gpu_work(KEY, gpulock.LockSettings(), mode="both"):
            pass
    assert lock_is_free(lock_dir / gpulock.lock_name(KEY))


def test_a_job_clock_counts_an_upgrade_once_and_its_wait_as_waiting(lock_dir, tmp_path):
    """The upgrade lies within its shared stretch; while it waits the process holds nothing."""
    holder, _ = start_holder(tmp_path, hold_s=0.6)  # exclusive, so even the shared hold waits
    clock = gpujob.JobClock()
    with gpulock.gpu_work(KEY, gpulock.LockSettings(), mode=gpulock.SHARED) as shared:
        clock.add(shared)
        time.sleep(0.1)
        with gpulock.gpu_work(KEY, gpulock.LockSettings(), mode=gpulock.EXCLUSIVE) as exclusive:
            clock.add(exclusive)
            time.sleep(0.2)
    holder.communicate(timeout=30)
    job = clock.describe()
    assert exclusive.upgraded and not shared.upgraded and shared.waited_s > 0.3
    assert job["lock_waited_s"] == pytest.approx(shared.waited_s + exclusive.waited_s, abs=1e-5)
    assert job["lock_held_s"] == pytest.approx(shared.held_s - exclusive.waited_s, abs=1e-5)
    assert job["exclusive_held_s"] == pytest.approx(exclusive.held_s, abs=1e-6) and exclusive.held_s >= 0.2
    assert job["wall_s"] >= job["lock_waited_s"] + job["lock_held_s"]


ENDER = """
import sys, time
from kernelkit import gpujob, gpulock
gpulock.command_is_process()
with gpulock.gpu_work(sys.argv[1], gpulock.LockSettings(), until_exit=True, mode="shared"):
    pass
print("body done", flush=True)
gpulock.end_process(7)
time.sleep(60)  # not reached: the process ends in end_process
"""


def test_a_command_keeping_its_hold_ends_at_once_with_its_code_and_lets_go(lock_dir):
    began = time.monotonic()
    ender = subprocess.Popen([sys.executable, "-c", ENDER, KEY], env=kit_env(REPO), stdout=subprocess.PIPE, text=True)
    out, _ = ender.communicate(timeout=60)
    assert ender.returncode == 7 and out == "body done\n"
    assert time.monotonic() - began < 30
    assert lock_is_free(lock_dir / gpulock.lock_name(KEY))
    # It logged its leaving first, so a watcher still seeing its context counts it as the kit.
    from kernelkit import foreign

    members = membership.members_path(lock_dir / gpulock.lock_name(KEY))
    assert foreign.recent_leavers(membership.leavers_path(members)) == {ender.pid}
    gpulock.end_process(0)  # this process keeps nothing: it returns


def test_every_process_that_used_the_gpu_is_a_member_until_it_exits(lock_dir, tmp_path):
    """The kernel's own table of locks names the kit's processes on a GPU (kernelkit.foreign)."""
    from kernelkit import foreign

    members = membership.members_path(lock_dir / gpulock.lock_name(KEY))
    holder, _ = start_holder(tmp_path, hold_s=0.5)
    if foreign.lock_members(members) is None:
        holder.communicate(timeout=30)
        pytest.skip("this kernel has no readable /proc/locks")
    assert holder.pid in foreign.lock_members(members)
    holder.communicate(timeout=30)
    assert holder.pid not in foreign.lock_members(members)
    with gpulock.gpu_work(KEY, gpulock.LockSettings(), mode=gpulock.SHARED):
        pass
    assert os.getpid() in foreign.lock_members(members)  # after its stretch, for as long as it lives
