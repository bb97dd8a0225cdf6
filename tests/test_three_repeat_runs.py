"""The committed runs of the default config with three repeats, one kit, one H200 (issue 13's
evidence): h200-p14 (default profile, empty kernel caches) and h200-s10 (`snakemake --cores 1`),
then h200-tw7-solo alone and h200-tw7-a / h200-tw7-b started at once in one directory.

Every number checked here is computed from the committed records."""

from __future__ import annotations


import pytest
from conftest import REPO, committed_timings

from kernelkit import diff
from kernelkit.records import run_time

SERIAL, PARALLEL = "h200-s10", "h200-p14"
SOLO, TWINS = "h200-tw7-solo", ("h200-tw7-a", "h200-tw7-b")
RUNS = (SERIAL, PARALLEL, SOLO, *TWINS)


def load(run: str) -> diff.RunFiles:
    return diff.load_run(REPO / "results" / run)


@pytest.mark.parametrize("run", RUNS)
def test_each_repeat_of_every_target_ran_in_a_worker_process_of_its_own(run):
    """One pool per repeat (kernelkit.worker_client.REPEATED): no two repeats of a target share a
    process, so the diff's resampling of repeats as processes is what happened."""
    workers: dict[tuple[str, str, str], dict[int, tuple]] = {}
    for record in committed_timings(run):
        worker = record["job"]["worker"]
        workers.setdefault((record["kernel"], record["shape"], record["layout"]), {})[record["repeat"]] = (
            worker["pid"], worker["started_unix_s"])
    assert len(workers) == 87
    for target, by_repeat in workers.items():
        assert sorted(by_repeat) == [1, 2, 3] and len(set(by_repeat.values())) == 3, target


def test_the_serial_run_had_one_worker_per_repeat():
    processes = {(r["job"]["worker"]["pid"], r["job"]["worker"]["started_unix_s"]) for r in committed_timings(SERIAL)}
    assert len(processes) == 3


def test_the_parallel_run_agrees_with_the_serial_one():
    """A = serial, B = parallel: no FASTER or SLOWER row, and at least 90% of the configurations
    above 5 us within 1% (issue 13's goal)."""
    result = diff.compare(load(SERIAL), load(PARALLEL))
    assert result.count("FASTER") == result.count("SLOWER") == 0
    assert not [c for c in result.comparisons if c.unclaimed or c.one_process]
    above = [c for c in result.comparisons if min(c.median_a, c.median_b) > 5.0]
    within = [c for c in above if abs(c.change) <= 0.01]
    assert len(within) >= 0.9 * len(above) and len(above) > 60


@pytest.mark.parametrize("twin", TWINS)
def test_each_of_two_runs_at_once_agrees_with_the_solo_run(twin):
    result = diff.compare(load(SOLO), load(twin))
    assert result.count("FASTER") == result.count("SLOWER") == 0
    assert not [c for c in result.comparisons if c.unclaimed]


def test_two_runs_at_once_overlapped_and_waited_for_the_one_gpu_lock():
    """The pair really ran at once: their job clocks overlap for most of either run, and both
    waited for the lock longer in all than the solo run's jobs did."""
    clocks = {run: run_time(committed_timings(run)) for run in (SOLO, *TWINS)}
    a, b = (clocks[twin] for twin in TWINS)
    overlap = min(a["ended_unix_s"], b["ended_unix_s"]) - max(a["started_unix_s"], b["started_unix_s"])
    assert overlap > 0.8 * min(a["wall_s"], b["wall_s"])
    for twin in TWINS:
        assert clocks[twin]["lock_waited_s"]["total"] > clocks[SOLO]["lock_waited_s"]["total"]
