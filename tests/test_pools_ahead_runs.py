"""The committed full default runs of the kit whose later repeats' pools start ahead of their jobs
(kernelkit.worker_client.ContextsAhead, keep_for_workflow), one H200, one session:
h200-p19a with empty kernel caches and no pool running, then h200-p19b right after it, in the same
checkout. h200-p14 is the earlier kit's run with empty caches, whose later pools started with
their first job.

Every number checked here is computed from the committed records."""

from __future__ import annotations

from conftest import REPO, above_and_within_one_percent, committed_timings

from kernelkit import diff

AHEAD_COLD, AHEAD_WARM, EARLIER = "h200-p19a", "h200-p19b", "h200-p14"


def load_modules_by_repeat(run: str) -> dict[int, list[float]]:
    """Each timing job's `load_modules` phase (the CUDA context where the worker had none, and the
    kernel's modules), per repeat."""
    phases: dict[int, list[float]] = {}
    for record in committed_timings(run):
        seconds = record["job"].get("phases_s", {}).get("load_modules")
        if seconds is not None:
            phases.setdefault(record["repeat"], []).append(seconds)
    return phases


def test_later_repeats_found_their_contexts_made_ahead():
    """Repeats 2 and 3 ran in pools whose processes had made their contexts before their first
    job: no timing job of theirs made one (the earlier kit's made them then, seconds each)."""
    for record in committed_timings(AHEAD_COLD):
        assert record["job"]["worker"]["had_used_gpu"], (record["kernel"], record["shape"], record["layout"], record["repeat"])
    ahead, earlier = load_modules_by_repeat(AHEAD_COLD), load_modules_by_repeat(EARLIER)
    for repeat in (2, 3):
        assert max(ahead[repeat]) < 0.1 and sum(ahead[repeat]) < 1.0
        assert max(earlier[repeat]) > 1.0 and sum(earlier[repeat]) > 10 * sum(ahead[repeat])


def test_a_run_right_after_another_in_the_same_checkout_found_every_pool_waiting():
    """The pools of h200-p19a were kept while it ran and waited for h200-p19b: each of its timing
    jobs ran in a process that began before it and had made its context."""
    records = committed_timings(AHEAD_WARM)
    first_job = min(record["job"]["started_unix_s"] for record in records)
    for record in records:
        worker = record["job"]["worker"]
        assert worker["had_used_gpu"] and worker["pool_started_unix_s"] < first_job
    assert len({record["job"]["worker"]["pool_started_unix_s"] for record in records}) == 3


def test_the_two_runs_agree():
    """A = empty caches and new pools, B = warm: no FASTER or SLOWER row, and at least 90% of the
    configurations above 5 us within 1% (the parallel run against itself under other start-up)."""
    result = diff.compare(diff.load_run(REPO / "results" / AHEAD_COLD), diff.load_run(REPO / "results" / AHEAD_WARM))
    assert result.count("FASTER") == result.count("SLOWER") == 0
    above, within = above_and_within_one_percent(result)
    assert len(within) >= 0.9 * len(above) and len(above) > 60
