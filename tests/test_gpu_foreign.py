"""On a real GPU: NVML sees another process computing, the kit's own work is not foreign, and
the lock serialises two processes' GPU work. Checks the NVML assumptions kernelkit.foreign is
built on (timestamped per-process samples, NotFound when none are new, pids in NVML's list).

Run with `pytest -m gpu`; without a GPU every test here is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from conftest import REPO, kit_env

from kernelkit import foreign, gpujob, gpulock, quiet_gpu

pytestmark = pytest.mark.gpu

BUSY_LOOP = """
import sys, time
import cupy as cp
a = cp.ones((4096, 4096), dtype=cp.float32)
# The loop's body once: cuBLAS loads at its first call (seconds from a cold disk), and CuPy builds
# the multiply and the add at theirs (NVRTC, or its kernel cache). Before "ready", not in the loop.
a = a @ a * 1e-3 + 1.0
cp.cuda.Device().synchronize()
print("ready", flush=True)
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    a = a @ a * 1e-3 + 1.0
    cp.cuda.Device().synchronize()
"""


def nvml_here():
    from kernelkit import device
    from kernelkit.nvml import Nvml

    cp = device.cupy()
    nvml = Nvml(cp.cuda.Device().pci_bus_id)
    if nvml.error:
        pytest.skip(f"GPU test skipped: {nvml.error}")
    return cp, nvml


def start_busy(seconds: float, after_s: float = 0.0) -> subprocess.Popen:
    """A process with a CUDA context that computes for `seconds`, `after_s` after it says ready.
    Ready means its loop's body has run once: started by the loop instead, cuBLAS's first call or
    CuPy's first compiles could outlast a short test's stretch, and the process computed nothing
    while the test looked. With the matmul alone run before "ready", the loop's work reached the
    GPU 0.25-0.45 s after a 50 ms stretch begun at "ready" had ended, and the look's device sample
    read 0% in 2 of 5 looks (H200, 2026-12-02)."""
    busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, str(seconds), str(after_s)], stdout=subprocess.PIPE, text=True)
    assert busy.stdout.readline().strip() == "ready"
    return busy


def test_nvml_names_another_process_computing_and_not_this_one():
    cp, nvml = nvml_here()
    started = time.time()
    busy = start_busy(4.0)
    try:
        watcher = foreign.ProcessWatcher(nvml, since_unix_s=started)
        x = cp.ones((2048, 2048), dtype=cp.float32)
        readings = []
        end = time.time() + 2.5
        while time.time() < end:
            x = x @ x * 1e-3
            cp.cuda.Device().synchronize()
            readings.append(watcher.read())
            time.sleep(0.05)
    finally:
        busy.wait(timeout=30)
    if all(isinstance(r["processes"], str) for r in readings):
        pytest.skip(f"GPU test skipped: NVML has no per-process utilisation here ({readings[-1]['processes']})")
    found = sorted({pid for r in readings for pid in r["foreign_pids"] or []})
    rule = readings[-1]["foreign_rule"]
    assert found, f"the busy process was never seen as foreign ({rule}); last reading {readings[-1]}"
    if rule == "by_pid":
        assert found == [busy.pid] and os.getpid() not in found


def test_idle_contexts_of_other_processes_are_not_foreign():
    cp, nvml = nvml_here()
    idle = subprocess.Popen([sys.executable, "-c", "import cupy as cp, time; cp.ones(1); print('ready', flush=True);"
                             " time.sleep(4)"], stdout=subprocess.PIPE, text=True)
    assert idle.stdout.readline().strip() == "ready"
    try:
        watcher = foreign.ProcessWatcher(nvml, since_unix_s=time.time())
        x = cp.ones((2048, 2048), dtype=cp.float32)
        readings = []
        for _ in range(30):
            x = x @ x * 1e-3
            cp.cuda.Device().synchronize()
            readings.append(watcher.read())
            time.sleep(0.05)
    finally:
        idle.wait(timeout=30)
    assert idle.pid in readings[-1]["compute_pids"] or readings[-1]["foreign_rule"] == "by_count"
    assert all(not r["foreign_pids"] for r in readings if r["foreign_pids"] is not None)


def test_two_processes_take_turns_on_the_gpu_each_until_it_exits(tmp_path, monkeypatch):
    """Each process takes the lock before its CUDA context and, as a command's own process, keeps it
    until it exits (its context dies inside the lock): the other's hold begins after that."""
    import json

    _, nvml = nvml_here()
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(tmp_path))
    key = gpujob.gpu_key(nvml)
    program = ("import sys, time, json; from kernelkit import gpulock\n"
               "gpulock.command_is_process()\n"
               "with gpulock.gpu_work(sys.argv[1], gpulock.LockSettings()) as w:\n"
               "    import cupy as cp\n"
               "    a = cp.ones((4096, 4096), dtype=cp.float32)\n"
               "    for _ in range(200): a = a @ a * 1e-3\n"
               "    cp.cuda.Device().synchronize()\n"
               "time.sleep(0.5)  # still holding: the context and the lock last until the process exits\n"
               "import os; print(json.dumps({**w.describe(), 'pid': os.getpid(), 'exiting_unix_s': time.time()}))")
    env = kit_env(REPO)
    runs = [subprocess.Popen([sys.executable, "-c", program, key], stdout=subprocess.PIPE, text=True, env=env)
            for _ in range(2)]
    first, second = sorted((json.loads(r.communicate(timeout=120)[0]) for r in runs),
                           key=lambda w: w["acquired_unix_s"])
    assert not first["nested"] and not second["nested"] and second["contended"]
    assert second["acquired_unix_s"] >= first["exiting_unix_s"] >= first["acquired_unix_s"] + first["held_s"] + 0.5
    assert second["previous_holder"]["pid"] == str(first["pid"])


def test_two_timing_jobs_at_once_take_turns_and_record_their_waits(tmp_path, monkeypatch):
    """The wiring: `kernelkit time` (two layouts each) started twice at once holds the GPU one process
    after the other, each from its first GPU work until it exits, records the lock it took (this
    GPU's UUID), its waits and wall time, and sees no foreign work from the other kit process (which
    waited for the lock before it made a context, or had exited)."""
    import json

    from conftest import default_config

    from kernelkit import spec as specs
    from kernelkit.cli import main
    from kernelkit.records import read_json, run_time
    from kernelkit.timing import TimingSettings

    _, nvml = nvml_here()
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(tmp_path / "locks"))
    rmsnorm = specs.load("rmsnorm")
    layouts = ["t32", "vec"]
    assert main(["correctness", "--kernel", "rmsnorm", *[a for name in layouts for a in ("--layout", name)],
                 "--output-dir", str(tmp_path / "correctness")]) == 0
    # Every hand-written layout, as the workflow runs controls (the vec_* controls mutate only vec).
    every_layout = [arg for layout in rmsnorm.layouts for arg in ("--layout", layout)]
    assert main(["control", "--kernel", "rmsnorm", *every_layout, "--output-dir", str(tmp_path / "controls")]) == 0
    correctness = [str(tmp_path / "correctness" / f"{name}.json") for name in layouts]
    controls = [str(tmp_path / "controls" / f"{name}.json") for name in rmsnorm.mutations]
    settings = TimingSettings.json_from_config(default_config())
    env = kit_env(REPO)
    output = tmp_path / "timing"
    jobs = [subprocess.Popen([sys.executable, "-m", "kernelkit", "time", "--kernel", "rmsnorm", "--shape", "4096x4096",
                              *[a for name in layouts for a in ("--layout", name)], "--repeat", str(n), "--order-seed", "0",
                              "--order-key", "0", "--cache", "warm", "--settings", settings, "--correctness", *correctness,
                              "--controls", *controls, "--output-dir", str(output)], env=env)
            for n in (1, 2)]
    assert [job.wait(timeout=300) for job in jobs] == [0, 0]
    by_repeat = {n: [read_json(output / name / f"rep{n}.json") for name in layouts] for n in (1, 2)}
    records = [record for n in (1, 2) for record in by_repeat[n]]
    holds = {}
    for n, mine in by_repeat.items():
        # One process timed both layouts; it took the lock once (its first stretch) and held it on.
        assert len({json.dumps(r["job"]["process"], sort_keys=True) for r in mine}) == 1
        last = max(mine, key=lambda r: r["job"]["ended_unix_s"])
        works = last["job"]["gpu_work"]
        assert not works[0]["nested"] and all(w["nested"] for w in works[1:]) and len(works) == 2 * len(layouts)
        assert all(w["mode"] == "exclusive" and w["enabled"] for w in works)
        holds[n] = (works[0]["acquired_unix_s"], last["job"]["ended_unix_s"])
    # Neither process's hold (acquisition to its last record, before it exited) overlaps the other's.
    (a_start, a_end), (b_start, b_end) = sorted(holds.values())
    assert b_start >= a_end, holds
    for record in records:
        assert record["job"]["gpu_keys"] == [gpujob.gpu_key(nvml)]
        assert record["job"]["wall_s"] >= record["job"]["lock_waited_s"] + record["job"]["lock_held_s"]
        assert record["idle_wait"] is None
        # The other kit process is never seen as foreign work (the machine's own processes may be).
        kit_pids = {r["job"]["process"]["pid"] for r in records}
        if isinstance(record["foreign_work"]["processes"], list):
            assert not kit_pids & {p["pid"] for p in record["foreign_work"]["processes"]}, json.dumps(record["foreign_work"])
    assert read_json(correctness[0])["job"]["gpu_keys"] == [gpujob.gpu_key(nvml)]
    summary = run_time(records)
    # A process counts once however many records it wrote. Both are rounded to microseconds from
    # different sums, so they may differ in the last place.
    assert summary["jobs"] == 2 and summary["wall_s"] >= max(r["job"]["wall_s"] for r in records) - 1e-6


def _look_after_a_short_stretch_beside(seconds: float, after_s: float) -> tuple[int, float, dict]:
    """Another process that computes for `seconds` from `after_s` after it is ready; beside it 50 ms
    of small launches with the watcher reading, as a short timing does, then the look after them,
    launching nothing. Its pid, the stretch's end and the look. Skips where NVML's pids are not this
    process's (a container) or NVML keeps no device utilisation samples."""
    cp, nvml = nvml_here()
    other = start_busy(seconds, after_s=after_s)
    try:
        watcher = foreign.ProcessWatcher(nvml, since_unix_s=time.time(), members=lambda: {os.getpid()})
        x = cp.ones((1 << 20,), dtype=cp.float32)
        readings, end = [], time.time() + 0.05
        while time.time() < end:
            for _ in range(20):
                x = x * 0.999 + 0.001
            cp.cuda.Device().synchronize()
            readings.append(watcher.read())
        ended = time.time()
        if watcher.outsiders is None:
            pytest.skip(f"GPU test skipped: NVML's pids are not this process's here ({readings[-1]['foreign_rule']})")
        assert other.pid in watcher.outsiders
        look = quiet_gpu.look_after(watcher, ended)
    finally:
        other.wait(timeout=30)
    if not look["looked"]:
        pytest.skip(f"GPU test skipped: no device utilisation samples here ({look['reason']})")
    return other.pid, ended, look


def test_work_begun_inside_a_short_stretch_is_found_by_the_look_after_it():
    """The blind spot of h200-fq2-nowait: a loop that begins 20 ms into a 50 ms stretch."""
    pid, ended, look = _look_after_a_short_stretch_beside(2.0, after_s=0.02)
    assert look["busy"] and look["device_util_pct"] > 0 and pid in look["outsiders"], look
    assert look["period_unix_s"][0] >= ended


def test_an_idle_context_of_another_process_is_looked_at_and_found_idle():
    _, _, look = _look_after_a_short_stretch_beside(0.0, after_s=3.0)
    assert look["busy"] is False and look["device_util_pct"] == 0, look
