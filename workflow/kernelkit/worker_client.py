"""What a workflow job's own process does with a GPU stage: hand it to the GPU's worker pool
(kernelkit.worker) and print what the pool ran, or say that it runs the stage itself.

Apart from the pool, and on the standard library only: a job's process pays Python's start and
nothing more before its arguments are on their way, and the modules the stages import (the
sanitizer's children read WORKER_VARIABLE) do not import the pool, which runs those stages.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kernelkit.jobstart import process_started_unix_s, start_ticks
from kernelkit.membership import DEFAULT_LOCK_DIR, LOCK_DIR_VARIABLE

WORKER_VARIABLE = "KERNELKIT_WORKER"
# The checks that go to their pool's socket for the jobs served first (first_served_address), as
# first_served_checks writes them.
FIRST_SERVED_VARIABLE = "KERNELKIT_WORKER_FIRST"
PROCESSES_VARIABLE = "KERNELKIT_WORKER_PROCESSES"
# How many pools a GPU may have at once (one per repeat, REPEATED): they share the host's memory.
POOLS_VARIABLE = "KERNELKIT_WORKER_POOLS"
IDLE_VARIABLE = "KERNELKIT_WORKER_IDLE_S"
# The stages whose jobs are many and whose cost is mostly set-up. The sanitizer's and Nsight
# Compute's children run under their tool, so they must stay processes of their own
# (kernelkit.tools gives them KERNELKIT_WORKER=0); the sanitizer's job itself only starts them,
# and in the pool it starts them 0.6 s sooner, which is one target's critical path (H200: its
# racecheck child ends last). The report's stages touch no GPU, but each
# paid 1-1.5 s of imports (Matplotlib, pandas) of its 2 s: nine of them one after the other end
# every `--cores 1` run (18 s of the H200 run h200-s3), and the workflow sends them to the
# first card's pool, warm by then.
DELEGATED = frozenset({"time", "span", "correctness", "control", "sanitize", "summary", "figure", "clock-figure",
                       "report"})
# Environment that decides what a job does on which GPU, and how many processes share its work
# (KERNELKIT_WORKER_PROCESSES): a pool serves only jobs that agree on it. Why the size: a
# `--cores 1` run started within `idle_exit_s` of a parallel one otherwise took the parallel run's
# pool of eight, and its library layouts imported Torch in six processes instead of one (H200
# run of 2026-12-01: 197.7 s, against 174.9 s alone).
KEYED_PREFIXES = ("KERNELKIT_", "CUDA_", "CUPY_", "TRITON_", "TORCH", "NVIDIA_", "PYTHON", "LD_", "SLURM_JOB_ID",
                  "SLURM_STEP_ID")
UNKEYED = frozenset({WORKER_VARIABLE, IDLE_VARIABLE, FIRST_SERVED_VARIABLE})
START_TIMEOUT_S = 60.0
CONNECT_RETRY_S = 0.05
DEFAULT_IDLE_EXIT_S = 30.0
# A pool's processes when the config names none: the run's --cores, at most this many. Why not more:
# each process makes a CUDA context for its first GPU job, and one GPU makes them one after
# another. In one timing target built from scratch, the first job of each process spent a median
# 0.97-0.98 s making its context and loading modules with eight processes, 0.39-0.45 s with four, and
# the build took 4.33-5.56 s with eight, 3.71-4.86 s with four (seven pairs, two H200s,
# 2026-12-01). A full default run lost nothing: 112.2 s with eight, 110.3 s with four (h200-q8b,
# h200-q4b, one H200, warm caches, no pool up before), their diff 0 FASTER, 0 SLOWER.
DEFAULT_MAX_PROCESSES = 4
EXIT_INTERNAL = 3
# The worker log grows by a few lines per pool; past this size a new one is begun.
LOG_KEEP_BYTES = 1 << 20


def idle_exit_s() -> float:
    """How long a pool's process, or a sanitizer's child started ahead (kernelkit.standby), waits
    for a job before it leaves (IDLE_VARIABLE, at least a second)."""
    try:
        return max(1.0, float(os.environ.get(IDLE_VARIABLE, DEFAULT_IDLE_EXIT_S)))
    except ValueError:
        return DEFAULT_IDLE_EXIT_S


def default_processes(cores: int) -> int:
    """A pool's processes when the config names none (DEFAULT_MAX_PROCESSES says why)."""
    return max(1, min(cores, DEFAULT_MAX_PROCESSES))


def kit_fingerprint(keyed_prefixes: tuple[str, ...] = KEYED_PREFIXES) -> str:
    """The kit's own code as this process would import it (path, size and change time of each
    module), the Python, and the environment variables that begin with `keyed_prefixes`."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"{sys.executable}\0{package}\0".encode())
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(package)}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
    for name in sorted(os.environ):
        if name.startswith(keyed_prefixes) and name not in UNKEYED:
            digest.update(f"{name}={os.environ[name]}\0".encode())
    return digest.hexdigest()[:24]


# Commands whose `--repeat N` names a repeat of the run. A repeat is a process of its own: the
# diff resamples repeats as processes, because a process can land where a kernel runs slower for
# its whole life (kernelkit.stats.verdict). So repeat N > 1 runs in a pool of its own, and
# repeat 1 in the pool of the checks. Why: with one pool, a `--cores 1` run timed both repeats of
# every target in its one worker, and a parallel run often did too; rmsnorm 512x8193 t256 then
# took 16.02 us in both repeats of one run and 15.27/14.95 us in the other's one worker, and the
# diff of the two runs (H200, 2026-12-01, h200-s9 against h200-p13) called it FASTER.
REPEATED = frozenset({"time", "span"})


def _option(argv: Sequence[str], name: str) -> str | None:
    """The value of option `name` (`--name VALUE` or `--name=VALUE`) in a command's arguments."""
    for index, word in enumerate(argv):
        if word == name and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def repeat_of(argv: Sequence[str]) -> int | None:
    """The repeat a command's arguments name, or None (not a repeated stage, or no number)."""
    if not argv or argv[0] not in REPEATED:
        return None
    value = _option(argv, "--repeat")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def pool_address(argv: Sequence[str] = ()) -> str:
    """The abstract socket name of the pool the job with these arguments belongs to (see the
    module's docstring): one per repeat beyond the first (REPEATED)."""
    repeat = repeat_of(argv)
    suffix = f"-repeat{repeat}" if repeat is not None and repeat > 1 else ""
    return f"\0kernelkit-worker-{os.geteuid()}-{kit_fingerprint()}{suffix}"


def first_served_address(address: str) -> str:
    """The pool's second socket: an idle worker takes a job waiting there before any job waiting
    at `address` (kernelkit.worker.next_job).

    Why: the checks whose job waits on a compute-sanitizer child (the sanitizer's, and a control
    whose bug only racecheck shows) are the longest of one timing target built from scratch, and
    jobs reach a pool's socket in the order their processes happen to start: in 9 of 11 such
    builds a worker took one of them, or both, only after it had finished a shorter check. Served
    first, they were the first two jobs taken in 30 of 30 builds (five H200s, 2026-12-02). The
    workflow names those checks in its jobs' environment (FIRST_SERVED_VARIABLE, served_first)."""
    return address + "-first"


def _check_name(command: str, kernel: str | None = None, control: str | None = None) -> str:
    """A check's name in FIRST_SERVED_VARIABLE: `sanitize` for every sanitizer job, or
    `control:<kernel>:<control>`. One spelling for the workflow that writes it and the job that reads it."""
    return command if command != "control" else f"control:{kernel}:{control}"


def first_served_checks(racecheck_controls: Iterable[tuple[str, str]]) -> str:
    """FIRST_SERVED_VARIABLE's value: every sanitizer job, and the controls (kernel, control)
    whose bug only racecheck shows."""
    return " ".join([_check_name("sanitize"), *(_check_name("control", *pair) for pair in racecheck_controls)])


def served_first(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether the job with these arguments is one of the checks FIRST_SERVED_VARIABLE names."""
    if not argv or argv[0] not in ("sanitize", "control"):
        return False
    listed = (os.environ if environ is None else environ).get(FIRST_SERVED_VARIABLE, "").split()
    return _check_name(argv[0], _option(argv, "--kernel"), _option(argv, "--control")) in listed


def enabled(command: str | None) -> bool:
    return os.environ.get(WORKER_VARIABLE) == "1" and command in DELEGATED


class _PoolGone(Exception):
    """The pool closed the connection before taking the job: it was ending; start another."""


def _connect(address: str) -> socket.socket | None:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(address)
    except (ConnectionRefusedError, FileNotFoundError):
        client.close()
        return None
    return client


def worker_log() -> Path:
    """The pools' log of this user, in the lock directory."""
    return Path(os.environ.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR) / f"kernelkit-worker-{os.geteuid()}.log"


def _spawn_pool(address: str, options: Sequence[str] = ()) -> None:
    """Start a pool in a session of its own, so that the job's end (or Snakemake's) does not end it;
    its output goes to the lock directory's worker log, not to this job's log. `options`: what
    kernelkit.worker.pool_main reads after the address (ContextsAhead.options)."""
    path = worker_log()
    log_dir = path.parent
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size > LOG_KEEP_BYTES:
            path.replace(path.with_name(path.name + ".1"))  # one older log is kept; a pool writing it goes on
        log = open(path, "ab")  # noqa: SIM115 - handed to the child
    except OSError:
        log = open(os.devnull, "ab")  # noqa: SIM115
    with log:
        subprocess.Popen(
            [sys.executable, "-c", "from kernelkit.worker import pool_main; pool_main()", address[1:], *options],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(Path(__file__).resolve().parents[1]),
                                                                          os.environ.get("PYTHONPATH"))))},
        )


def read_line(stream: Any) -> dict[str, Any] | None:
    line = stream.readline()
    return json.loads(line) if line else None


def _exchange(client: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
    with client, client.makefile("rb") as replies:
        try:
            client.sendall(json.dumps(request).encode() + b"\n")
            taken = read_line(replies)
        except (ConnectionResetError, BrokenPipeError):
            taken = None
        if taken is None:
            raise _PoolGone
        try:
            reply = read_line(replies)
        except ConnectionResetError:
            reply = None
    if reply is None:
        return {"rc": EXIT_INTERNAL, "stdout": "",
                "stderr": f"kernelkit {request['argv'][0]}: internal error: the kit's worker process "
                          f"{taken.get('pid')} ended while running this job (its log is in the GPU lock directory)\n"}
    return reply


def delegated_exit_code(argv: Sequence[str]) -> int | None:
    """Run this command in the pool and return its exit code, having printed its output; None when
    this command is not delegated, or no pool started in time (the caller then runs it itself)."""
    if not argv or not enabled(argv[0]):
        return None
    address = pool_address(argv)
    queue = first_served_address(address) if served_first(argv) else address
    request = {"argv": list(argv), "cwd": os.getcwd(), "started_unix_s": process_started_unix_s() or time.time(),
               "client_pid": os.getpid()}
    deadline = time.monotonic() + START_TIMEOUT_S
    spawned = False
    while time.monotonic() < deadline:
        client = _connect(queue)
        if client is None:
            if not spawned:
                _spawn_pool(address)
                spawned = True
            time.sleep(CONNECT_RETRY_S)
            continue
        try:
            reply = _exchange(client, request)
        except _PoolGone:
            spawned = False
            continue
        sys.stdout.write(reply.get("stdout", ""))
        sys.stderr.write(reply.get("stderr", ""))
        sys.stdout.flush()
        sys.stderr.flush()
        return int(reply.get("rc", EXIT_INTERNAL))
    print(f"kernelkit {argv[0]}: no kit worker answered within {START_TIMEOUT_S:.0f} s; running in this process",
          file=sys.stderr)
    return None


def start_pool(argv: Sequence[str] = ("correctness",), workflow_pid: int | None = None,
               contexts_ahead: ContextsAhead | None = None) -> None:
    """Start the pool a job with these arguments would use, and send it no job; a pool already
    there keeps its name and the new one leaves at once. The worker log says who asked.
    `workflow_pid`: the pool, new or already there, waits for jobs while that workflow process
    runs (keep_for_workflow). `contexts_ahead`: a new pool's processes make their CUDA contexts
    before their first job.

    Why: the workflow calls it (in a process started as its jobs are, so that the pool's name is
    theirs) while Snakemake still reads the workflow, for a command that surely runs GPU jobs.
    Started by the first jobs instead, a pool's workers came up 0.6-0.8 s after them, on the
    critical path of one timing target built from scratch (H200, 2026-12-01); started from the
    workflow, its first process began 0.15-0.31 s before the first job in 25 such builds run
    alone (once, under the GPU test suite, 0.01 s after it: a race, which either side may win)."""
    address, path = pool_address(argv), worker_log()
    if workflow_pid is not None:
        keep_for_workflow(address, workflow_pid)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} kernelkit workflow {workflow_pid or os.getppid()} starts "
                      f"pool {address[1:]} before its jobs{contexts_ahead.describe() if contexts_ahead else ''}\n")
    _spawn_pool(address, contexts_ahead.options() if contexts_ahead else ())


class ContextsAhead:
    """A pool whose processes make their CUDA context (and the timing's other context,
    `other_context`) under a shared hold before their first job.

    Why: the pools of repeats 2 and 3 (REPEATED) began when their first timing job came, a
    minute and more into a full default run, and their sixteen processes made their contexts
    then, beside each other, holding the GPU shared while every timing waited: their timing jobs'
    `load_modules` took up to 2.8 s, 16.4 and 19.4 s in all (h200-p14). Made while the run's
    first jobs only check kernels, at most 0.04 s, 0.3 s in all (h200-p19a)."""

    OPTION = "contexts-ahead"

    def __init__(self, other_context: bool) -> None:
        self.other_context = other_context

    def options(self) -> list[str]:
        return [f"{self.OPTION}={int(self.other_context)}"]

    @classmethod
    def from_options(cls, options: Sequence[str]) -> "ContextsAhead | None":
        """The setting `options` give, or None when they give none (a pool a job started)."""
        for option in options:
            name, _, value = option.partition("=")
            if name == cls.OPTION and value in ("0", "1"):
                return cls(value == "1")
        return None

    def describe(self) -> str:
        return f", contexts made ahead{' with the other context' if self.other_context else ''}"


def _workflows_note(address: str) -> Path:
    """Beside the worker log: the workflow processes a pool is kept for, one `pid start_ticks` a line."""
    return worker_log().with_name(f"{address.lstrip(chr(0))}.workflows")


def _noted_workflows(note: Path) -> list[tuple[int, int]]:
    try:
        lines = note.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    noted = []
    for line in lines:
        with contextlib.suppress(ValueError):
            pid, ticks = map(int, line.split())
            noted.append((pid, ticks))
    return noted


def _running(pid: int, ticks: int) -> bool:
    return start_ticks(pid) == ticks


def keep_for_workflow(address: str, workflow_pid: int) -> None:
    """Keep the pool at `address` waiting for jobs while process `workflow_pid` runs, instead of
    leaving after `idle_exit_s` without a job (kernelkit.worker.serve asks kept_for_workflow).

    Why: a full default run times its repeats one after the other, each in a pool of its own
    (REPEATED). A pool started ahead of its repeat waits 80 s and more for its first job, and the
    first repeat's pool idles while the later repeats are timed, then runs the report's jobs at
    the end (DELEGATED). A run that finds the pool of an earlier one keeps it for itself too: in
    the run right after another (H200, 2026-12-01), repeat 3's pool of the run before idled out
    before repeat 3 began, and a new one made its contexts while every timing waited."""
    from kernelkit.records import write_text_atomic  # not on a job's path: its client imports this module

    ticks = start_ticks(workflow_pid)
    if ticks is None:
        return
    note = _workflows_note(address)
    kept = [entry for entry in _noted_workflows(note) if entry != (workflow_pid, ticks) and _running(*entry)]
    with contextlib.suppress(OSError):
        write_text_atomic(note, "".join(f"{pid} {start}\n" for pid, start in [*kept, (workflow_pid, ticks)]))


def kept_for_workflow(address: str) -> bool:
    """Whether a workflow process the pool at `address` is kept for still runs (keep_for_workflow)."""
    return any(_running(pid, ticks) for pid, ticks in _noted_workflows(_workflows_note(address)))


def start_repeat_pools(workflow_pid: int, repeats: Sequence[int], other_context: bool) -> None:
    """Start the pools of these repeats (REPEATED; each beyond the first has its own) ahead of
    their jobs, kept for the workflow process `workflow_pid`, their contexts made ahead."""
    for repeat in repeats:
        start_pool(("time", "--repeat", str(repeat)), workflow_pid, ContextsAhead(other_context))
