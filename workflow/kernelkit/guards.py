"""What the workflow checks before its first job starts and says after a failure, apart from
common.smk so that it stays a plan."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any, Iterable

from kernelkit import records


def before_first_job(jobs: list[Any], run: str, run_dir: str, frozen: bool, local: bool) -> str | None:
    """The sentence that stops the run before any job starts (a GPU job in a committed run, or GPU jobs
    here without a usable GPU, refused at once), or None, once abandoned temporary files are removed."""
    measuring = [job for job in jobs if dict(job.resources).get("gpu", 0)]  # every GPU rule asks for gpu=1
    if measuring and frozen:
        return (f"run '{run}' is committed (git tracks files in {run_dir}/) and this command would run "
                f"{len(measuring)} GPU job{'s' if len(measuring) != 1 else ''} in it (first: {measuring[0].output[0]}); "
                "name a new run with --config run=NAME, or add --config overwrite=True to replace its evidence")
    if measuring and local:
        from kernelkit import device

        problem = device.gpu_problem()
        if problem:
            return f"{problem} ({len(measuring)} planned jobs need the GPU)"
    for removed in records.remove_abandoned_temps(run_dir):
        print(f"kernelkit: removed {removed}, left by an interrupted write", file=sys.stderr)
    return None


def failure_lines(failed: Iterable[Any]) -> list[str]:
    """Each failed job's own sentence, the last line of its log, on screen; a failed group job (a
    SLURM allocation) stands for its jobs that left an output missing."""
    lines = []
    jobs = [inner for job in failed for inner in getattr(job, "jobs", [job])
            if inner is job or not all(os.path.exists(name) for name in inner.output)]
    for job in sorted(jobs, key=lambda job: str(job.log)):
        for name in job.log:
            try:
                with open(name, encoding="utf-8", errors="replace") as handle:
                    text = [line.strip() for line in handle if line.strip()]
            except OSError:
                continue
            if text:
                lines.append(f"kernelkit: {job.rule.name} failed ({name}): {records.printable(text[-1])}")
    return lines


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children, ...), read from /proc."""
    from kernelkit.gpulock import parent_of

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        parent = parent_of(entry) if entry.isdigit() else None
        if parent is not None:
            children.setdefault(parent, []).append(int(entry))
    found = [pid]
    for parent in found:  # the loop reaches the children it appends, and theirs
        found += children.get(parent, [])
    return found[1:]


def stop_jobs_on_signals() -> None:
    """On SIGINT or SIGTERM to Snakemake alone, end the jobs too (else it waits minutes for them),
    then let Snakemake handle the signal; records are atomic and the lock a flock, so none is left half."""
    for number in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(number)

        def handler(signum: int, frame: Any, previous: Any = previous) -> None:
            for pid in descendants(os.getpid()):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            if callable(previous):
                previous(signum, frame)
            else:
                raise KeyboardInterrupt

        signal.signal(number, handler)
