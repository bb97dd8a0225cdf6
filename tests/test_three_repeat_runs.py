"""The committed runs of the default config with three repeats, one H200 per session (issue 13's
evidence): h200-p14 (default profile, empty kernel caches) and h200-s10 (`snakemake --cores 1`),
then h200-tw7-solo alone and h200-tw7-a / h200-tw7-b started at once in one directory (kit
2a152123); h200-p20b (default profile, a fresh copy of the checkout, warm kernel caches, no pool up)
and h200-s20 (`--cores 1`, right after it) of kit 063b2e81; h200-q8b and h200-q4b, pools of eight
and of four processes, each from a fresh copy with warm caches, one card (kit 13ef21b2); h200-p22b
and h200-s22, the same pair as h200-p20b and h200-s20 with the default pools of four (kit b762ef66).

Every number checked here is computed from the committed records."""

from __future__ import annotations

import functools

import pytest
from conftest import REPO, above_and_within_one_percent, committed_timings

from kernelkit import diff
from kernelkit.records import run_time

PAIRS = (("h200-s10", "h200-p14"), ("h200-s20", "h200-p20b"), ("h200-s22", "h200-p22b"))
SOLO, TWINS = "h200-tw7-solo", ("h200-tw7-a", "h200-tw7-b")
POOLS_OF_EIGHT, POOLS_OF_FOUR = "h200-q8b", "h200-q4b"
RUNS = (*(run for pair in PAIRS for run in pair), SOLO, *TWINS, POOLS_OF_EIGHT, POOLS_OF_FOUR)


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


@pytest.mark.parametrize("serial", [serial for serial, _ in PAIRS])
def test_the_serial_run_had_one_worker_per_repeat(serial):
    processes = {(r["job"]["worker"]["pid"], r["job"]["worker"]["started_unix_s"]) for r in committed_timings(serial)}
    assert len(processes) == 3


@functools.lru_cache(maxsize=None)
def _within_one_percent(serial: str, parallel: str) -> tuple[diff.DiffResult, list, list]:
    """The diff (A = serial, B = parallel), its configurations above 5 us, and those of them whose
    pooled medians lie within 1% of each other (issue 13's measure). Each pair is loaded and
    compared once for all the tests that ask about it."""
    result = diff.compare(load(serial), load(parallel))
    return result, *above_and_within_one_percent(result)


@pytest.mark.parametrize("serial, parallel", PAIRS)
def test_the_parallel_run_claims_no_change_against_the_serial_one(serial, parallel):
    result, _, _ = _within_one_percent(serial, parallel)
    assert result.count("FASTER") == result.count("SLOWER") == 0
    assert not [c for c in result.comparisons if c.unclaimed or c.one_process]


@pytest.mark.parametrize("serial, parallel", [PAIRS[0], PAIRS[2]])
def test_the_pair_has_nine_in_ten_configurations_within_one_percent(serial, parallel):
    _, above, within = _within_one_percent(serial, parallel)
    assert len(within) >= 0.9 * len(above) and len(above) > 60


def test_the_second_pair_misses_nine_in_ten_by_one_configuration():
    """What the README reports of h200-s20 against h200-p20b: 68 of 76 within 1% (the goal asks for
    69). Beyond it: the L2-resident rmsnorm 512x8193, whose time keeps a state for a process's life,
    and five more within 2.2%."""
    _, above, within = _within_one_percent(*PAIRS[1])
    assert (len(within), len(above)) == (68, 76)
    beyond = [c for c in above if c not in within]
    assert all(abs(c.change) <= 0.022 for c in beyond if c.shape != "512x8193")


def test_the_current_defaults_pair_is_what_the_readme_reports():
    """h200-s22 against h200-p22b: 72 of 76 within 1%. Beyond it: the L2-resident rmsnorm 512x8193,
    whose time keeps a state for a process's life (the serial run's t32 repeats took 92.3, 107.9 and
    117.8 us), and bias_gelu `vec4` within 2.1%."""
    _, above, within = _within_one_percent(*PAIRS[2])
    assert (len(within), len(above)) == (72, 76)
    beyond = [c for c in above if c not in within]
    assert all(abs(c.change) <= 0.021 for c in beyond if c.shape != "512x8193")
    assert {c.shape for c in beyond} == {"512x8193", "8192x4096"}


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


def _processes_per_pool(run: str) -> list[int]:
    """How many worker processes timed each repeat of a run: one pool per repeat."""
    pools: dict[int, set[int]] = {}
    for record in committed_timings(run):
        pools.setdefault(record["repeat"], set()).add(record["job"]["worker"]["pid"])
    return [len(pools[repeat]) for repeat in sorted(pools)]


def test_pools_of_four_ran_the_full_run_no_slower_than_pools_of_eight_and_agree_with_them():
    """kernelkit.worker_client.DEFAULT_MAX_PROCESSES: the same card, one after the other, each from
    a fresh copy with warm kernel caches. Three pools a run (one per repeat), of the size asked for;
    the run with pools of four took no longer, and its diff against the other claims no change."""
    assert _processes_per_pool(POOLS_OF_EIGHT) == [8, 8, 8]
    assert _processes_per_pool(POOLS_OF_FOUR) == [4, 4, 4]
    eight, four = (run_time(committed_timings(run)) for run in (POOLS_OF_EIGHT, POOLS_OF_FOUR))
    assert four["wall_s"] <= eight["wall_s"]
    result = diff.compare(load(POOLS_OF_EIGHT), load(POOLS_OF_FOUR))
    assert result.count("FASTER") == result.count("SLOWER") == 0
