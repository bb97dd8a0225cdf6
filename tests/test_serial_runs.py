"""The committed pair h200-s3 (`--cores 1`) / h200-p3 (default profile): one kit, one card, and
every measurement started after a tiny piece of work in a second CUDA context of the timing
process (device.OtherContext), which the serial run's single worker never saw otherwise."""

from __future__ import annotations

import statistics

import pytest
from conftest import REPO, committed_timings

from kernelkit import diff

SERIAL, PARALLEL = "h200-s3", "h200-p3"


@pytest.mark.parametrize("run", [SERIAL, PARALLEL])
def test_every_timed_target_switched_contexts_before_its_samples(run):
    found = committed_timings(run)
    assert len(found) == 174
    for record in found:
        assert record["method"]["context_switch"] is True
        assert record["method_used"]["context_switch"] == "other context", (record["kernel"], record["shape"], record["layout"])


def pooled_median(run: str, kernel: str, shape: str, layout: str) -> float:
    samples = [s for r in committed_timings(run) if (r["kernel"], r["shape"], r["layout"]) == (kernel, shape, layout)
               for s in r["samples_us"]]
    return statistics.median(samples)


def test_the_small_kernel_the_serial_worker_slowed_down_times_alike_in_both_runs():
    """rmsnorm 512x128 vec took 1.838 us serially against 1.659 us in parallel before the switch
    (h200-s2/h200-p2, git history); with it both runs agree within 1%."""
    serial, parallel = (pooled_median(run, "rmsnorm", "512x128", "vec") for run in (SERIAL, PARALLEL))
    assert serial == pytest.approx(parallel, rel=0.01)


def test_against_the_serial_run_the_parallel_one_claims_no_change():
    """A = serial, B = parallel: no FASTER or SLOWER row. Torch's rms_norm at 512x8193 moved by -5.8%,
    but the serial run's one worker timed both its repeats, so the diff claims no change from one
    process (h200-s2 against h200-p2, before the context switch: 16 FASTER, 2 SLOWER)."""
    result = diff.compare(diff.load_run(REPO / "results" / SERIAL), diff.load_run(REPO / "results" / PARALLEL))
    verdicts = [c.verdict for c in result.comparisons]
    assert len(verdicts) == 87 and "SLOWER" not in verdicts and "FASTER" not in verdicts
    assert [(c.kernel, c.shape, c.layout, c.unclaimed) for c in result.comparisons if c.unclaimed] == [
        ("rmsnorm", "512x8193", "torch", "FASTER")]


def test_the_report_method_says_how_many_targets_switched_contexts_and_older_runs_say_nothing():
    from kernelkit.report.run import Run
    from kernelkit.report.setup import context_switch_paragraph

    paragraph = context_switch_paragraph(Run(REPO / "results" / SERIAL))
    assert paragraph is not None and paragraph.text.startswith("Before its warm-up, each of 174 timed targets")
    assert "could not switch" not in paragraph.text
    assert context_switch_paragraph(Run(REPO / "results" / "h200-p5a")) is None


@pytest.mark.parametrize("run, lead", [
    (SERIAL, "Each timed target ran as one job of 1 long-lived worker process "),
    (PARALLEL, "Each timed target ran as one job of 8 long-lived worker processes "),
    ("h200-f1", "Each timed target ran in its own process"),
])
def test_the_report_method_says_which_processes_ran_the_timed_targets(run, lead):
    """Counted from the timing records' job clocks (h200-f1 predates the workers)."""
    from kernelkit.report.run import Run
    from kernelkit.report.setup import section_method

    assert section_method(Run(REPO / "results" / run)).blocks[0].text.startswith(lead)
