"""Long-lived processes that run the kit's GPU stages for many jobs: one pool per GPU and kit.

Why: a timing job's own work is a fraction of a second, but as a process of its own it paid
Python's start, CuPy's and Torch's imports (1 to 6 s), and a CUDA context and module loads
(1.4 s median, H200 full run of 2026-11-30) that it must do holding the GPU lock shared, which
no timing may overlap. A `snakemake --cores 16` run spent 163 of its 186 s timing 174 targets one
after the other, each behind such a set-up. In a worker the imports, the context and the loaded
modules stay, so each job brings only its own GPU work.

How: `python -m kernelkit time|span|correctness|control ...`, in a workflow job (the workflow sets
KERNELKIT_WORKER=1), sends (kernelkit.worker_client) its arguments, working directory and process start to a pool over a
Unix socket and prints what the pool ran, with its exit code. The pool is started by the first
job that finds none, as a session of its own; it listens on an abstract socket named by the
user, the kit's source files, the Python and the environment that decides which GPU and lock
the jobs get (CUDA_VISIBLE_DEVICES, KERNELKIT_*, SLURM's job id), so a job only meets a pool
that would do exactly what the job's own process would, and on a second socket for the jobs it
serves first (kernelkit.worker_client.first_served_address). Its processes share the sockets
(every idle process wakes for a connection and one takes it; one without a CUDA context lets one
that has it go first, `next_job`), each runs one job at a time, and each ends after `idle_exit_s`
without a job once no workflow it is kept for runs (kernelkit.worker_client.keep_for_workflow).
The socket names vanish with its last process, and a second starter finds them taken and leaves.

What stays per job: the command and its records, the GPU lock (held by the worker process for
that job's stretches, never across jobs), the job's clock (from the client's process start, so a
record's wall time still counts the whole job) and its memory: after each job the worker returns
every device and pinned block to the driver, inside a shared hold, so the next job's buffers land
as they would in a new process. A job that ends in an internal error, or leaves the device in
error, ends its worker after the reply: a CUDA fault poisons the context for every later job.
A job whose pool cannot start within `START_TIMEOUT_S` runs in its own process, as before.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import select
import socket
import struct
import sys
import threading
import time
from typing import Any, Iterator, Sequence

from kernelkit import membership
from kernelkit.jobstart import process_started_unix_s
from kernelkit.worker_client import (EXIT_INTERNAL, POOLS_VARIABLE, PROCESSES_VARIABLE, ContextsAhead,
                                     first_served_address, idle_exit_s, kept_for_workflow, read_line)

# The exit status of a worker that ended because the job it ran lost its own process.
EXIT_JOB_GONE = 4


# When this pool's first process started (before its imports): set by pool_main.
_pool_started_unix_s: float | None = None


class Worker:
    """One process of a pool: runs one job at a time and keeps what jobs can share."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.started_unix_s = time.time()
        self.jobs = 0
        self.took_job_unix_s: float | None = None
        self.had_used_gpu = False

    def describe(self) -> dict[str, Any]:
        """What the job's record says about the process that ran it: `started_unix_s` when it was
        ready for jobs, `pool_started_unix_s` when its pool began (before the imports), which
        says how long a job waited for a pool that its own start, or the workflow's, began;
        `took_job_unix_s` when it took this job, which says how long the job waited for a worker,
        and `had_used_gpu`: whether an earlier job of this process used the GPU, whose CUDA
        context this job then found made."""
        pool_started = round(_pool_started_unix_s, 3) if _pool_started_unix_s is not None else None
        took = round(self.took_job_unix_s, 3) if self.took_job_unix_s is not None else None
        return {"pid": self.pid, "started_unix_s": round(self.started_unix_s, 3), "job_number": self.jobs,
                "pool_started_unix_s": pool_started, "took_job_unix_s": took, "had_used_gpu": self.had_used_gpu}

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """The job: its command, parsed and run as `kernelkit` would, its output captured."""
        from kernelkit import cli, gpujob

        self.jobs += 1
        self.took_job_unix_s = time.time()
        self.had_used_gpu = membership.has_joined()
        out, err = io.StringIO(), io.StringIO()
        code: int
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _working_directory(request["cwd"]):
            with gpujob.started_at(float(request["started_unix_s"]), self.describe()):
                try:
                    code = cli.main(request["argv"])
                except SystemExit as ended:  # argparse's one sentence
                    code = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 2)
                except BaseException:  # noqa: BLE001 - KERNELKIT_DEBUG=1 lets the traceback out of cli
                    import traceback

                    traceback.print_exc()
                    code = EXIT_INTERNAL
        healthy = release_device_memory()
        return {"rc": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                "ends_worker": code == EXIT_INTERNAL or not healthy}


@contextlib.contextmanager
def _working_directory(path: str) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def release_device_memory() -> bool:
    """Give every cached device and pinned block back to the driver, holding each GPU this process
    used shared (freeing is GPU work that must not overlap a timing); False when the device is in
    error, which no later job can recover from."""
    import gc

    from kernelkit import gpulock

    gc.collect()
    cupy = sys.modules.get("cupy")
    torch = sys.modules.get("torch")
    torch_on_gpu = torch is not None and torch.cuda.is_initialized()
    cached = cupy is not None and (cupy.get_default_memory_pool().total_bytes() > 0
                                   or cupy.get_default_pinned_memory_pool().n_free_blocks() > 0)
    if not (membership.has_joined() or cached or torch_on_gpu):
        return True  # a job that never reached the GPU: asking the device would create a context
    try:
        with gpulock.used_gpus_shared():
            if cupy is not None:
                cupy.cuda.runtime.deviceSynchronize()
                cupy.get_default_memory_pool().free_all_blocks()
                cupy.get_default_pinned_memory_pool().free_all_blocks()
            if torch_on_gpu:
                torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - a sticky CUDA error: this context is done for
        return False
    return True


def _peer_uid(connection: socket.socket) -> int:
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", credentials)[1]


# How often a worker looks whether the job it runs still has its own process.
CLIENT_POLL_S = 0.5


def _end_with_the_job(connection: socket.socket, running: threading.Event) -> None:
    """End this worker when the job's own process has gone (Snakemake stopped, a timeout, a kill)
    while the worker still runs the job. Why: a job in its own process stopped its GPU work and
    let its lock go by dying; a worker that went on with a job nobody waits for, and perhaps a
    kernel that never ends, would hold the GPU from every later job. Its records are written
    atomically, so nothing is left half-written."""
    while running.is_set():
        time.sleep(CLIENT_POLL_S)
        try:
            gone = connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            gone = False
        except OSError:
            gone = True
        if gone and running.is_set():
            membership.note_leaving()
            os._exit(EXIT_JOB_GONE)


# How long a worker without a CUDA context leaves a waiting job to the pool's workers that have
# one. Why: a job's first GPU work in a new process makes the context, 0.38 s of a 0.67 s timing
# job in the pool's one worker that had none (the sanitizer's, whose children use the GPU): the
# last job of one timing target built from scratch (H200, 2026-12-01). An idle worker with a
# context takes a waiting job within a millisecond of its arrival; without one idle, the job
# waits this long more.
WITHOUT_CONTEXT_DEFER_S = 0.02


def next_job(listeners: Sequence[socket.socket], idle_exit_s: float, defer_s: float) -> socket.socket:
    """The next job's connection from the pool's shared sockets, from the first of `listeners` that
    has one waiting (the pool lists the socket of the jobs served first before its other one), or
    TimeoutError when none came for `idle_exit_s`. The sockets are non-blocking (pool_main). Every
    idle worker wakes when a job arrives, and one of them takes it: a worker that defers
    (`defer_s` > 0) takes it only if it is still there `defer_s` later."""
    deadline = time.monotonic() + idle_exit_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select(listeners, [], [], remaining)[0]:
            raise TimeoutError
        if defer_s > 0:
            time.sleep(defer_s)
        for listener in listeners:
            try:
                return listener.accept()[0]
            except BlockingIOError:
                continue  # none waits there, or another worker took it


def serve(listeners: Sequence[socket.socket], idle_exit_s: float, address: str,
          contexts_ahead: ContextsAhead | None = None) -> None:
    """Take jobs from the shared sockets (next_job) until none came for `idle_exit_s` and no
    workflow the pool is kept for runs (kernelkit.worker_client.keep_for_workflow), or a job
    ended this worker.
    `contexts_ahead`: first make the CUDA contexts, unless a job waits already."""
    worker = Worker()
    if contexts_ahead is not None and not select.select(listeners, [], [], 0)[0]:
        make_contexts_ahead(contexts_ahead.other_context)
    while True:
        try:
            # A worker has a CUDA context once it has used a GPU (kernelkit.membership joins it then).
            connection = next_job(listeners, idle_exit_s,
                                  0.0 if membership.has_joined() else WITHOUT_CONTEXT_DEFER_S)
        except TimeoutError:
            if kept_for_workflow(address):
                continue
            break
        with connection, connection.makefile("rb") as requests:
            connection.settimeout(None)
            if _peer_uid(connection) != os.geteuid():
                continue  # another user's process: it could run commands as this user
            request = read_line(requests)
            if request is None:
                continue
            connection.sendall(json.dumps({"pid": worker.pid}).encode() + b"\n")
            running = threading.Event()
            running.set()
            threading.Thread(target=_end_with_the_job, args=(connection, running), daemon=True).start()
            reply = worker.run(request)
            running.clear()
            with contextlib.suppress(OSError):
                connection.sendall(json.dumps(reply).encode() + b"\n")
        if reply["ends_worker"]:
            break
    retire()


def make_contexts_ahead(other_context: bool) -> None:
    """Make this process's CUDA context, its measurement stream and, with `other_context`, the
    timing's other context (kernelkit.device.prepare_measurement), holding the GPU shared as a job
    does for its own (they are GPU work no timing may overlap). Anything that fails here fails
    again in the job, which says it in its own sentence."""
    from kernelkit import device, environment, gpujob, gpulock

    try:
        cupy = device.cupy()
        bus_id = cupy.cuda.Device().pci_bus_id
        key = gpujob.gpu_key(environment.Nvml(bus_id), bus_id)
        with gpulock.gpu_work(key, gpulock.shared_hold_settings(), mode=gpulock.SHARED):
            cupy.cuda.runtime.free(0)
            device.prepare_measurement(other_context)
    except Exception:  # noqa: BLE001,S110 - see the docstring
        pass


def retire() -> None:
    """Destroy this worker's CUDA context inside a shared hold (its teardown must not overlap a
    timing), note it as leaving the GPU's members, and exit."""
    from kernelkit import gpulock

    cupy = sys.modules.get("cupy")
    with contextlib.suppress(Exception), gpulock.used_gpus_shared():
        if cupy is not None:
            cupy.cuda.runtime.deviceReset()
    membership.note_leaving()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _count(variable: str) -> int:
    try:
        return max(1, int(os.environ.get(variable, "1")))
    except ValueError:
        return 1


def pool_size() -> int:
    return _count(PROCESSES_VARIABLE)


def pools_per_gpu() -> int:
    """How many pools of this size a GPU may have at once: one per repeat (kernelkit.worker_client.REPEATED)."""
    return _count(POOLS_VARIABLE)


# Imported by each GPU job at its first use, not by kernelkit.cli: the check of the job's settings
# (jsonschema) and the GPU's key (NVML). Imported by the pool instead, a new worker's first job
# took 0.02-0.24 s from taking the job to taking the GPU lock, against 0.24-0.44 s (H200,
# 2026-12-02, 19 and 21 such jobs); the pool's processes were ready that much later, so one timing
# target built from scratch, which waits for them, was no faster (4.73-5.61 s in five builds).
FIRST_USE_IMPORTS = ("jsonschema", "pynvml", "cupy")


def pool_main() -> None:
    """Entry of a pool's first process: take the socket name (or leave: another pool has it) and
    the name of its socket for the jobs served first (kernelkit.worker_client.first_served_address),
    fork the other processes before anything touches CUDA, and serve."""
    global _pool_started_unix_s
    _pool_started_unix_s = process_started_unix_s() or time.time()
    address = "\0" + sys.argv[1]
    contexts_ahead = ContextsAhead.from_options(sys.argv[2:])
    listeners = []
    for name in (first_served_address(address), address):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(name)
        except OSError:
            return
        listener.listen(128)
        # Shared by every process of the pool (one open file): each only polls and tries to accept.
        listener.setblocking(False)
        listeners.append(listener)
    for _ in range(pool_size() - 1):
        if os.fork() == 0:
            break
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} kernelkit worker {os.getpid()} serving {sys.argv[1]}\n"
    os.write(sys.stdout.fileno(), line.encode())  # one write: the processes' lines stay whole
    # The imports every job needs, before the first job arrives (jobs wait in the sockets' queues).
    import kernelkit.cli  # noqa: F401
    from kernelkit import inputs

    inputs.kept = inputs.KeptInputs(kept_input_bytes(pool_size() * pools_per_gpu()))
    for module in FIRST_USE_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    serve(listeners, idle_exit_s(), address, contexts_ahead)


KEPT_INPUTS_MAX_BYTES = 4 << 30


def kept_input_bytes(processes: int) -> int:
    """What each worker may keep of timing inputs (kernelkit.inputs.KeptInputs): at most 4 GiB,
    and all the pool's processes together at most a quarter of the host's memory."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
    return min(KEPT_INPUTS_MAX_BYTES, memory // (4 * processes))
