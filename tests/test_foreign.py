"""Foreign-work detection on the CPU: a simulated device answers the NVML calls the kit makes
(contexts, timestamped per-process utilisation, device utilisation) from processes with busy
intervals, and the kit's readings, tags and summaries are computed from those answers."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import pytest

from conftest import sampler_settings

from kernelkit import foreign, gpujob, gpulock, quiet_gpu, sampler

SELF, WAITING_KIT, OTHER, PREVIOUS = 4100, 4200, 9300, 4000
SETTINGS = sampler_settings(interval_ms=10.0)


class NVMLError_NotFound(Exception):  # noqa: N801 - named as pynvml names it: the kit matches the name
    pass


class NVMLError_NotSupported(Exception):  # noqa: N801
    pass


class NVMLError(Exception):
    """pynvml raises its base class with value 0 when the driver reports success and no samples."""

    value = 0


@dataclass
class Sample:
    pid: int
    timeStamp: int  # noqa: N815 - NVML's field names
    smUtil: int  # noqa: N815
    memUtil: int = 0  # noqa: N815


@dataclass
class SimulatedDevice:
    """Processes with contexts and busy intervals (unix seconds); the driver samples every `period_s`."""

    busy: dict[int, list[tuple[float, float]]]
    period_s: float = 0.02
    per_process: bool = True
    not_found_error: bool = True
    # Processes that have exited: the driver still returns their last samples, but no context.
    gone: tuple[int, ...] = ()
    # As the H200's driver 580 does: each per-process sample names one of the busy processes (in
    # turn), however many compute.
    one_per_tick: bool = False
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def now(self) -> float:
        return time.time()

    def _util(self, pid: int, end: float) -> int:
        start = end - self.period_s
        overlap = sum(max(0.0, min(b, end) - max(a, start)) for a, b in self.busy[pid])
        return round(100 * overlap / self.period_s)

    # The NVML functions the kit calls, with pynvml's signatures.
    def nvmlDeviceGetComputeRunningProcesses(self, handle):  # noqa: N802
        return [type("Process", (), {"pid": pid, "usedGpuMemory": 1 << 28}) for pid in self.busy if pid not in self.gone]

    def _ticks(self, since_us: int) -> list[float]:
        first = math.floor(since_us / 1e6 / self.period_s) + 1
        last = math.floor(self.now() / self.period_s)
        return [k * self.period_s for k in range(first - 1, last + 1) if int(k * self.period_s * 1e6) > since_us]

    def nvmlDeviceGetProcessUtilization(self, handle, since_us):  # noqa: N802
        if not self.per_process:
            raise NVMLError_NotSupported("Not Supported")
        samples = []
        for t in self._ticks(since_us):
            named = [Sample(pid, int(t * 1e6), self._util(pid, t)) for pid in self.busy]
            if self.one_per_tick:
                busy = [sample for sample in named if sample.smUtil > 0]
                named = [busy[round(t / self.period_s) % len(busy)]] if busy else []
            samples += named
        if not samples:
            raise NVMLError_NotFound("Not Found") if self.not_found_error else NVMLError("NVML Error with code 0")
        return samples

    def _device_util(self, end: float) -> int:
        """The share of the period before `end` in which any process computed."""
        covered, reach = 0.0, end - self.period_s
        for a, b in sorted(interval for intervals in self.busy.values() for interval in intervals):
            a, b = max(a, reach), min(b, end)
            if b > a:
                covered += b - a
                reach = b
        return round(100 * covered / self.period_s)

    def nvmlDeviceGetSamples(self, handle, sample_type, since_us):  # noqa: N802
        """Device utilisation samples, each stored twice a millisecond apart as the H200's driver does."""
        assert sample_type == self.NVML_GPU_UTILIZATION_SAMPLES
        values = [type("Sample", (), {"timeStamp": int(t * 1e6) + repeat, "sampleValue": type("Value", (), {"uiVal": self._device_util(t)})})
                  for t in self._ticks(since_us) for repeat in (0, 1000)]
        if not values:
            raise NVMLError_NotFound("Not Found")
        return 1, values

    def nvmlDeviceGetUUID(self, handle):  # noqa: N802
        return "GPU-simulated-0"

    def nvmlDeviceGetUtilizationRates(self, handle):  # noqa: N802
        end = math.floor(self.now() / self.period_s) * self.period_s
        return type("Utilization", (), {"gpu": max((self._util(pid, end) for pid in self.busy), default=0), "memory": 0})


class FakeNvml:
    """kernelkit.nvml.Nvml's surface over a simulated device."""

    error = None
    handle = "device-0"

    def __init__(self, device: SimulatedDevice) -> None:
        self.nvml = device

    def read(self, getter):
        return getter(self.nvml, self.handle)

    def snapshot(self):
        return {"sm_clock_mhz": 1980, "memory_clock_mhz": 3201, "power_draw_w": 300.0, "temperature_c": 40,
                "clock_event_reasons": []}


def test_judge_by_pid_ignores_idle_contexts_and_the_kit_itself():
    samples = [{"pid": SELF, "sm_util": 97}, {"pid": WAITING_KIT, "sm_util": 0}, {"pid": OTHER, "sm_util": 40},
               {"pid": PREVIOUS, "sm_util": 12}]
    assert foreign.judge(samples, SELF, True, True, kit_pids=(PREVIOUS,)) == ([OTHER], "by_pid")
    assert foreign.judge(samples[:2], SELF, True, True) == ([], "by_pid")


def test_judge_by_count_when_this_pid_is_not_in_nvmls_pid_space():
    one_busy = [{"pid": 77, "sm_util": 97}, {"pid": 78, "sm_util": 0}]
    # While the kit computes, one busy process is the kit itself; while it is idle, it is someone else.
    assert foreign.judge(one_busy, SELF, False, self_busy=True) == ([], "by_count")
    assert foreign.judge(one_busy, SELF, False, self_busy=False) == ([77], "by_count")
    two_busy = one_busy + [{"pid": 79, "sm_util": 5}]
    assert foreign.judge(two_busy, SELF, False, self_busy=True) == ([77, 79], "by_count")
    assert foreign.judge("unavailable: NVMLError_NotSupported", SELF, True, True) == (
        None, "unavailable: NVMLError_NotSupported")


def test_watcher_reads_only_new_samples_and_names_the_foreign_process():
    t0 = time.time()
    device = SimulatedDevice({SELF: [(t0, t0 + 10)], WAITING_KIT: [], OTHER: [(t0 + 0.05, t0 + 10)]})
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0)
    time.sleep(0.03)
    first = watcher.read()
    time.sleep(0.09)
    second = watcher.read()
    assert first["compute_pids"] == [SELF, WAITING_KIT, OTHER] and watcher.self_visible
    # Every sample is newer than the previous reading's last one: nothing is counted twice.
    assert min(s["t_us"] for s in second["processes"]) > max(s["t_us"] for s in first["processes"])
    assert first["foreign_pids"] == [] and second["foreign_pids"] == [OTHER]
    assert second["device_util_pct"] == 100 and second["foreign_rule"] == "by_pid"


def test_the_previous_holders_last_period_is_not_judged_even_where_pids_cannot_be_told_apart():
    """Earlier kit holders computed until they released; the first sample of each after the
    acquisition still covers that work. It is recorded, never judged, pid or no pid."""
    period = 0.05
    # The lock taken half a driver period after a sample: the next sample's period holds 50% of the
    # previous holder's work (taken at any moment, it could round to 0% and the test see nothing).
    t0 = (math.floor(time.time() / period) + 0.5) * period
    device = SimulatedDevice({PREVIOUS: [(t0 - 1, t0)], WAITING_KIT: [], OTHER: [(t0 + 0.3, t0 + 10)]}, period_s=period)
    time.sleep(1.5 * period)
    for self_visible_pid in (SELF, 1):  # 1: this process is not in NVML's pid space (a container)
        watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=self_visible_pid, since_unix_s=t0)
        watcher.self_busy = False
        first = watcher.read()
        trailing = [s for s in first["processes"] if s["pid"] == PREVIOUS and s["sm_util"] > 0]
        assert trailing and not any(s["judged"] for s in trailing)
        assert first["foreign_pids"] == []
    time.sleep(max(0.0, 0.3 + 2 * period - (time.time() - t0)))
    later = watcher.read()
    assert later["foreign_pids"] == [OTHER] and later["foreign_rule"] == "by_count"


def test_no_new_sample_is_an_empty_reading_however_pynvml_says_it():
    for not_found_error in (True, False):
        device = SimulatedDevice({SELF: [], OTHER: []}, period_s=60, not_found_error=not_found_error)
        watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF)
        watcher._last_us = int(time.time() * 1e6)  # past the last sample the device has
        reading = watcher.read()
        assert reading["processes"] == [] and reading["foreign_pids"] == []


def test_a_sample_returned_twice_is_read_once():
    """Were the driver to return the last sample again, its period would seem to start at itself."""
    period = 0.2
    # Half a period before the latest tick: the tick after t0 sees PREVIOUS busy for half its
    # period (t0 taken at any time, it could fall just after a tick and the overlap round to 0%).
    t0 = (math.floor(time.time() / period) - 0.5) * period
    device = SimulatedDevice({PREVIOUS: [(t0 - 1, t0)], SELF: []}, period_s=period)
    time.sleep(0.3)
    samples = device.nvmlDeviceGetProcessUtilization(None, int((t0 - 0.5) * 1e6))
    device.nvmlDeviceGetProcessUtilization = lambda handle, since_us: samples
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0)
    watcher.self_busy = False
    first, again = watcher.read(), watcher.read()
    assert any(s["pid"] == PREVIOUS and s["sm_util"] > 0 for s in first["processes"])
    assert again["processes"] == [] and again["foreign_pids"] == [] and first["foreign_pids"] == []


def test_without_per_process_utilisation_the_reading_says_why_and_tags_stay_unknown():
    t0 = time.time()
    device = SimulatedDevice({SELF: [(t0, t0 + 10)], OTHER: [(t0, t0 + 10)]}, per_process=False)
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0)
    reading = watcher.read()
    assert reading["foreign_pids"] is None and reading["processes"].startswith("unavailable: NVMLError_NotSupported")
    point = {"t": 1.0, "sm_clock_mhz": 1980, "reasons": [], **reading}
    tag = sampler.tag_samples([(1.0, 1.001)], [point], SETTINGS, 1980)[0]
    assert tag["foreign"] is None and not sampler.is_disturbed(tag)
    summary = foreign.foreign_work([point], [tag], busy_before_pct=reading["device_util_pct"])
    assert summary["processes"].startswith("unavailable: NVMLError_NotSupported") and summary["samples_disturbed"] is None
    assert foreign.saw_foreign_work({"foreign_work": summary}) is None and foreign.saw_foreign_work({}) is None


def test_samples_taken_while_another_process_computes_are_disturbed():
    """The kit times for 0.4 s; another process computes from 0.15 s to 0.25 s of it."""
    t0 = time.time()
    device = SimulatedDevice({SELF: [(t0, t0 + 1)], WAITING_KIT: [], OTHER: [(t0 + 0.15, t0 + 0.25)]})
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, kit_pids=(PREVIOUS,), since_unix_s=t0)
    windows = []
    with sampler.ClockSampler(FakeNvml(device), SETTINGS, watcher) as clocks:
        while time.time() < t0 + 0.4:
            opened = time.time()
            time.sleep(0.004)
            windows.append((opened, time.time()))
    tags = sampler.tag_samples(windows, clocks.trace, SETTINGS, 1980)
    disturbed = set(sampler.disturbed(tags))
    mid = [(a + b) / 2 - t0 for a, b in windows]
    # Well inside the foreign work: disturbed. Well outside (allowing one driver period and one
    # sampler interval on each side): clean. Nothing is blamed on the kit's own busy context.
    inside = {i for i, m in enumerate(mid) if 0.17 <= m <= 0.23}
    outside = {i for i, m in enumerate(mid) if m <= 0.12 or m >= 0.30}
    assert inside and inside <= disturbed
    assert outside and not outside & disturbed
    assert all(tags[i]["foreign_pids"] == [OTHER] for i in disturbed)
    summary = foreign.foreign_work(clocks.trace, tags, busy_before_pct=0)
    assert summary["processes"][0]["pid"] == OTHER and summary["processes"][0]["max_sm_util"] == 100
    assert summary["samples_disturbed"] == len(disturbed) and summary["rule"] == "by_pid"
    assert sampler.causes(tags) == [f"foreign work (pid {OTHER})"]
    assert foreign.saw_foreign_work({"foreign_work": summary}) is True
    clean = foreign.foreign_work(clocks.trace, [t for i, t in enumerate(tags) if i in outside], busy_before_pct=0)
    assert clean["samples_disturbed"] == 0


def test_wait_for_idle_waits_out_the_foreign_work_and_records_the_wait():
    t0 = time.time()
    device = SimulatedDevice({SELF: [], OTHER: [(t0 - 1, t0 + 0.15)]})
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0)
    waited = quiet_gpu.wait_for_idle(watcher, timeout_s=5, poll_s=0.02)
    assert waited["idle"] is True and 0.1 <= waited["waited_s"] < 1 and waited["polls"] >= 3
    assert watcher.self_busy, "the watcher judges the timing that follows as the kit computing"


def test_wait_for_idle_gives_up_at_the_timeout():
    t0 = time.time()
    device = SimulatedDevice({SELF: [], OTHER: [(t0 - 1, t0 + 60)]})
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0)
    waited = quiet_gpu.wait_for_idle(watcher, timeout_s=0.1, poll_s=0.02)
    assert waited["idle"] is False and waited["waited_s"] >= 0.1 and waited["last_foreign_pids"] == [OTHER]


def test_wait_for_idle_does_not_wait_on_what_it_cannot_see():
    class Blind(FakeNvml):
        error = "unavailable: NVML could not be used (NVMLError_LibraryNotFound)"

    watcher = foreign.ProcessWatcher(Blind(SimulatedDevice({})), self_pid=SELF)
    waited = quiet_gpu.wait_for_idle(watcher, timeout_s=5, poll_s=0.02)
    assert waited["idle"] is None and waited["polls"] == 1 and "LibraryNotFound" in waited["reason"]


def test_previous_holder_pid_comes_from_the_lock_file_text():
    assert foreign.previous_holder_pids({"pid": "4000", "host": "h"}) == (4000,)
    assert foreign.previous_holder_pids({}) == ()


def test_a_stage_holding_the_gpu_waits_for_foreign_work_then_sees_none(tmp_path, monkeypatch):
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(tmp_path))
    t0 = time.time()
    me = os.getpid()
    device = SimulatedDevice({me: [], OTHER: [(t0 - 1, t0 + 0.15)]})
    settings = gpulock.LockSettings(wait_for_idle=True, idle_timeout_s=5, idle_poll_s=0.02)
    clock = gpujob.JobClock()
    with gpujob.exclusive_gpu(FakeNvml(device), None, settings, clock) as gpu:
        assert gpu.busy_before_pct == 100 and gpu.idle_wait["idle"] is True
        # The timing that follows: this process computes, the other one no longer does.
        device.busy[me].append((time.time(), time.time() + 0.2))
        time.sleep(0.1)
        reading = gpu.watcher.read()
        # Holding the lock, no other kit process of this lock directory has a context on the GPU:
        # with this process in NVML's pid space, every other process with a context is an outsider.
        assert reading["foreign_pids"] == []
        assert reading["foreign_rule"] == "by_pid_and_members"
        assert any(s["pid"] == me and s["sm_util"] > 0 and s["judged"] for s in reading["processes"])
    record = clock.describe()
    assert record["gpu_work"][0]["lock_path"].endswith("kernelkit-gpu-GPU-simulated-0.lock")
    assert record["lock_held_s"] >= gpu.idle_wait["waited_s"] >= 0.1


GONE = 4400


def test_holding_the_lock_a_busy_outsider_is_foreign_even_in_a_stretch_shorter_than_a_driver_period():
    """The driver samples processes every so often (here 2 s); a timed stretch of 50 ms sees no
    sample that began after it, so the period rule judges nothing. Holding the lock (no other kit
    process has a context: members are none), the outsider busy across the stretch is named, while
    the previous holder busy until just before (its work ended as it let the lock go; the lock file
    names it), an idle context and a process that has exited are not. The stretch lies half a
    period from the ticks on either side; a machine so loaded that the reads end past the next
    tick has not made a short stretch, and the stretch is made again (three times at most)."""
    period = 2.0
    members: set[int] = set()
    for _ in range(3):
        t0 = (math.floor(time.time() / period) + 0.5) * period
        time.sleep(max(0.0, t0 - time.time()))
        device = SimulatedDevice({SELF: [(t0, t0 + 10)], PREVIOUS: [(t0 - 5, t0)], GONE: [(t0 - 5, t0)],
                                  WAITING_KIT: [], OTHER: [(t0 - 5, t0 + 10)]}, period_s=period, gone=(GONE,))
        time.sleep(0.05)
        by_period = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, kit_pids=(PREVIOUS,), since_unix_s=t0).read()
        watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, kit_pids=(PREVIOUS,), since_unix_s=t0,
                                         members=lambda: members)
        reading = watcher.read()
        if time.time() - t0 < period / 2:
            break
    else:
        pytest.fail("three times the reads took longer than half a driver period: no short stretch was made")
    assert by_period["foreign_pids"] == [] and by_period["foreign_rule"] == "by_pid"
    assert reading["foreign_pids"] == [OTHER] and reading["foreign_rule"] == "by_pid_and_members"
    assert {s["pid"] for s in reading["foreign_samples"]} == {OTHER}
    assert all(s["sm_util"] > 0 and s["t_us"] < t0 * 1e6 for s in reading["foreign_samples"])
    # The record's summary names it with the utilisation those samples showed.
    summary = foreign.foreign_work([reading], [{"foreign": True}], busy_before_pct=100)
    assert summary["processes"] == [{"pid": OTHER, "max_sm_util": 100, "readings": 1}]
    assert summary["rule"] == "by_pid_and_members" and summary["samples_disturbed"] == 1
    # A process the members name (the kit's, were there any) is not foreign.
    members.add(OTHER)
    assert watcher.read()["foreign_pids"] == []


def test_holding_the_lock_an_outsider_that_stopped_long_ago_is_not_foreign():
    period = 0.2
    t0 = time.time()
    device = SimulatedDevice({SELF: [(t0, t0 + 10)], OTHER: [(t0 - 10, t0 - foreign.WINDOW_S - 1)]}, period_s=period)
    time.sleep(0.25)
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0, members=lambda: set())
    assert watcher.read()["foreign_pids"] == []
    # With the lock disabled (no members known, kernelkit.gpujob.exclusive_gpu): the period rule, as before.
    unknown = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0, members=None)
    assert unknown.read()["foreign_rule"] == "by_pid"


def _lingering_previous_holder(period: float) -> tuple[float, SimulatedDevice]:
    """A stretch that starts 0.1 s before a driver tick, just after the previous holder (OTHER)
    ended: its context is still listed, and that tick's sample holds the last 0.05 s of its work."""
    t0 = (math.floor(time.time() / period) + 1) * period - 0.1
    time.sleep(max(0.0, t0 - time.time()))
    device = SimulatedDevice({SELF: [(t0, t0 + 10)], OTHER: [(t0 - 1.0, t0 - 0.05)]}, period_s=period)
    time.sleep(0.25)
    return t0, device


def test_the_previous_holder_is_no_outsider_while_its_context_lingers():
    """Seen on an H200: the kernel drops a process's lock before the driver has torn down its
    context, and meanwhile NVML lists it with the busy samples of its last (locked) work, just
    before the next holder's timing began. The lock file names the previous holder (kit_pids)."""
    t0, device = _lingering_previous_holder(0.2)
    excused = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, kit_pids=foreign.previous_holder_pids(
        {"pid": str(OTHER), "host": "h"}), since_unix_s=t0, members=lambda: set())
    assert excused.read()["foreign_pids"] == []
    # Not named by the lock file, it is an outsider whose latest recent sample was busy.
    blamed = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0, members=lambda: set())
    assert blamed.read()["foreign_pids"] == [OTHER]


def test_the_timing_stages_exclusive_stretch_inside_its_shared_hold_excuses_the_previous_holder(tmp_path, monkeypatch):
    """The timing and span stages take the GPU (gpujob.shared_gpu: context, modules, verification),
    then, inside that hold, sample it (gpujob.exclusive_gpu), whose stretch takes no lock of its own.
    The watcher of that stretch must still excuse the holder before this process, which the lock
    file named when the hold was taken."""
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(tmp_path))
    me = os.getpid()
    settings = gpulock.LockSettings(enabled=True, dir=None, wait_for_idle=False, idle_timeout_s=1, idle_poll_s=0.1)
    settings.lock_path("GPU-simulated-0").write_text(f"pid={OTHER}\nhost=h\nacquired_unix_s=0\n")
    t0, device = _lingering_previous_holder(0.2)
    device.busy[me] = device.busy.pop(SELF)
    clock = gpujob.JobClock()
    with gpujob.shared_gpu(FakeNvml(device), None, settings, clock) as held:
        assert held.previous_holder["pid"] == str(OTHER)
        with gpujob.exclusive_gpu(FakeNvml(device), None, settings, clock) as gpu:
            assert OTHER in gpu.watcher.kit_pids, (gpu.work.describe(), gpu.watcher.kit_pids)
            assert gpu.watcher.read()["foreign_pids"] == []


def _short_stretch(period: float) -> float:
    """A start 0.05 s after a driver tick, so that a 0.05 s stretch holds no tick."""
    t0 = (math.floor(time.time() / period) + 1) * period + 0.05
    time.sleep(max(0.0, t0 - time.time()))
    return t0


def test_an_outsider_that_begins_inside_a_short_stretch_is_found_by_the_look_after_it():
    """H200, h200-fq2-nowait: a CuPy loop that began inside 40-60 ms timings was sampled only
    after them, since the driver samples processes every 0.2 s and names one per sample. The
    readings during the stretch cannot see it; the device sample wholly after the stretch, while
    the kit launches nothing, can. Made again (three times at most) where the machine was so
    loaded that the reads ran into the next tick."""
    period = 0.2
    for _ in range(3):
        t0 = _short_stretch(period)
        device = SimulatedDevice({SELF: [(t0, t0 + 0.05)], WAITING_KIT: [], OTHER: [(t0 + 0.03, t0 + 5)]},
                                 period_s=period, one_per_tick=True)
        watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0,
                                         members=lambda: {SELF, WAITING_KIT})
        trace = []
        for at in (t0 + 0.01, t0 + 0.05):
            time.sleep(max(0.0, at - time.time()))
            trace.append({"t": time.time(), "sm_clock_mhz": 1980, "reasons": [], **watcher.read()})
        if time.time() < t0 + period - 0.05:
            break
    else:
        pytest.fail("three times the reads ran into the next driver tick: no short stretch was made")
    assert [point["foreign_pids"] for point in trace] == [[], []]  # blind while it lasts
    look = quiet_gpu.look_after(watcher, t0 + 0.05)
    assert look["looked"] and look["busy"] and look["outsiders"] == [OTHER] and look["device_util_pct"] == 100
    assert look["period_unix_s"][0] >= t0 + 0.05 and look["waited_s"] <= 2 * period + 0.1
    windows = [(t0 + 0.01, t0 + 0.02), (t0 + 0.04, t0 + 0.045)]
    tags = sampler.tag_samples(windows, trace, SETTINGS, 1980, foreign.busy_after(look))
    assert [(tag["foreign"], tag["foreign_pids"], tag["foreign_right_after"]) for tag in tags] == [(True, [], [OTHER])] * 2
    assert sampler.disturbed(tags) == [0, 1]
    assert sampler.causes(tags) == [f"foreign work right after the timing, perhaps begun during it (pid {OTHER})"]
    summary = foreign.foreign_work(trace, tags, busy_before_pct=0, after=look)
    assert summary["processes"] == [{"pid": OTHER, "max_sm_util": 0, "readings": 0, "right_after": True}]
    assert summary["samples_disturbed"] == 2 and summary["after"] == look
    assert foreign.saw_foreign_work({"foreign_work": summary}) is True
    # Where the readings saw it during the stretch too, it is named as working during it.
    seen = [{**trace[0], "foreign_pids": [OTHER]}]
    tags = sampler.tag_samples(windows[:1], seen, SETTINGS, 1980, foreign.busy_after(look))
    assert tags[0]["foreign_pids"] == [OTHER] and "foreign_right_after" not in tags[0]
    assert sampler.causes(tags) == [f"foreign work (pid {OTHER})"]
    assert foreign.foreign_work(seen, tags, 0, look)["processes"] == [{"pid": OTHER, "max_sm_util": 0, "readings": 1}]


def test_an_idle_outsider_context_is_looked_at_and_not_blamed_and_without_one_nobody_waits():
    period = 0.1
    t0 = _short_stretch(period)
    device = SimulatedDevice({SELF: [(t0, t0 + 0.05)], OTHER: []}, period_s=period, one_per_tick=True)
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0, members=lambda: {SELF})
    time.sleep(max(0.0, t0 + 0.05 - time.time()))
    trace = [{"t": time.time(), "sm_clock_mhz": 1980, "reasons": [], **watcher.read()}]
    look = quiet_gpu.look_after(watcher, t0 + 0.05)
    assert look["looked"] and look["busy"] is False and look["outsiders"] == [OTHER]
    tags = sampler.tag_samples([(t0 + 0.04, t0 + 0.05)], trace, SETTINGS, 1980, foreign.busy_after(look))
    assert tags[0]["foreign"] is False and "foreign_right_after" not in tags[0]
    assert foreign.saw_foreign_work({"foreign_work": foreign.foreign_work(trace, tags, 0, look)}) is False
    # Only the kit's contexts: nothing to look at, and no wait for a device sample.
    alone = foreign.ProcessWatcher(FakeNvml(SimulatedDevice({SELF: [(t0, t0 + 0.05)]}, period_s=period)),
                                   self_pid=SELF, since_unix_s=t0, members=lambda: {SELF})
    alone.read()
    began = time.monotonic()
    look = quiet_gpu.look_after(alone, time.time())
    assert look == {"looked": False, "reason": "no process but the kit's held a context"}
    assert time.monotonic() - began < 0.05
    # Members that cannot be listed: no outsider can be named, so no look.
    unknown = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0, members=lambda: None)
    unknown.read()
    assert quiet_gpu.look_after(unknown, time.time())["looked"] is False


def test_device_periods_leave_out_the_drivers_repeated_samples():
    # As read on an H200: every sample stored twice, 1 ms apart, every 0.2 s.
    samples = [(1_000_000, 0), (1_001_000, 0), (1_200_000, 30), (1_201_000, 30), (1_400_000, 99), (1_401_000, 99)]
    assert quiet_gpu.periods(samples) == [(1_000_000, 1_200_000, 30), (1_200_000, 1_400_000, 99)]
    assert quiet_gpu.first_period_after(samples, 1_100_000) == (1_200_000, 1_400_000, 99)
    assert quiet_gpu.first_period_after(samples, 1_300_000) is None


def test_with_members_known_the_wait_for_idle_needs_an_idle_device_period_not_only_quiet_process_samples():
    """The wait that let a loop through (h200-fq2-wait): its process held a context and had not
    been sampled yet, so its samples showed no work. Now the wait ends on a device sample wholly
    within it that reads 0, or at once where no other process holds a context."""
    period = 0.05
    t0 = time.time()
    device = SimulatedDevice({SELF: [], OTHER: [(t0 - 0.01, t0 + 0.3)]}, period_s=period, one_per_tick=True)
    watcher = foreign.ProcessWatcher(FakeNvml(device), self_pid=SELF, since_unix_s=t0, members=lambda: {SELF})
    waited = quiet_gpu.wait_for_idle(watcher, timeout_s=5, poll_s=0.02)
    assert waited["idle"] is True and waited["waited_s"] >= 0.3 - 0.02
    assert waited["reason"] == "the device was idle over a sampling period with only other processes' contexts on it"
    idle_context = foreign.ProcessWatcher(FakeNvml(SimulatedDevice({SELF: [], OTHER: []}, period_s=period)),
                                          self_pid=SELF, since_unix_s=time.time(), members=lambda: {SELF})
    assert quiet_gpu.wait_for_idle(idle_context, timeout_s=5, poll_s=0.02)["idle"] is True
    alone = foreign.ProcessWatcher(FakeNvml(SimulatedDevice({SELF: []}, period_s=period)), self_pid=SELF,
                                   since_unix_s=time.time(), members=lambda: {SELF})
    waited = quiet_gpu.wait_for_idle(alone, timeout_s=5, poll_s=0.02)
    assert waited["idle"] is True and waited["polls"] == 1 and waited["reason"] == "no process but the kit's held a context"
    busy = foreign.ProcessWatcher(FakeNvml(SimulatedDevice({SELF: [], OTHER: [(t0, t0 + 60)]}, period_s=period)),
                                  self_pid=SELF, since_unix_s=time.time(), members=lambda: {SELF})
    assert quiet_gpu.wait_for_idle(busy, timeout_s=0.2, poll_s=0.02)["idle"] is False


def test_with_waiting_enabled_a_stretch_foreign_work_touched_is_taken_again_a_bounded_number_of_times(tmp_path, monkeypatch):
    monkeypatch.setenv(gpulock.LOCK_DIR_VARIABLE, str(tmp_path))
    device = SimulatedDevice({os.getpid(): []}, period_s=0.02)
    waiting = gpulock.LockSettings(wait_for_idle=True, idle_timeout_s=5, idle_poll_s=0.02)
    with gpujob.exclusive_gpu(FakeNvml(device), None, waiting, gpujob.JobClock()) as gpu:
        assert gpu.again_after_foreign([{"foreign": False}, {"foreign": None}], lambda: {"samples_us": [1.0]}) is False
        for attempt in range(gpujob.FOREIGN_RETIMES):
            assert gpu.again_after_foreign([{"foreign": False}, {"foreign": True}], lambda: {"samples_us": [float(attempt)]})
        assert gpu.again_after_foreign([{"foreign": True}], lambda: {"samples_us": [9.0]}) is False
    assert [entry["samples_us"] for entry in gpu.retimed] == [[0.0], [1.0]][:gpujob.FOREIGN_RETIMES]
    assert all(entry["then_waited"]["idle"] is True for entry in gpu.retimed)
    # Without waiting, foreign work is tagged, never waited out.
    with gpujob.exclusive_gpu(FakeNvml(device), None, gpulock.LockSettings(), gpujob.JobClock()) as gpu:
        assert gpu.again_after_foreign([{"foreign": True}], dict) is False and gpu.retimed == []
