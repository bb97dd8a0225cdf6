"""compute-sanitizer children started ahead of their jobs: the first sanitizer and racecheck runs of
a workflow find one waiting with its tool, Python, CuPy and CUDA context up, and give it their command.

Why: a sanitizer child pays its tool's start, Python's and CuPy's imports and a CUDA context under
the tool before it runs anything: `compute-sanitizer --tool racecheck` around a CuPy process that
makes one array took 1.99 s on an H200 (2026-12-01), 0.95 s without the tool. One timing target
built from scratch waits for three such children (the kernel's sanitizer job runs memcheck and
racecheck, rmsnorm's `barrier` control racecheck), started with its other checks: 2.4-3.1 s each,
most of the checks' 3.4 s. Started while Snakemake reads the workflow and builds the DAG, that
start-up overlaps Snakemake's own.

How: the workflow's `kernelkit pool-start` (kernelkit.worker_client) calls `start_children`. Each child
is `compute-sanitizer --tool T --log-file LOG python -m kernelkit sanitizer-child NAME LOG`: it binds
the abstract socket NAME (tool, slot, user and the kit's fingerprint, as a worker pool's), makes its
CUDA context under a shared hold of the GPU lock meanwhile, and takes one connection. `run` (called by
kernelkit.tools before it would start a child of its own) sends the command; the child runs it as
its own process would, replies with its exit code and output, and exits, so that the tool's
summary in LOG covers that one command, as for a child of the job's own. A child nobody used
within IDLE_EXIT_S exits; a command that finds none, or one that is taken, starts its own child.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from kernelkit.membership import DEFAULT_LOCK_DIR, LOCK_DIR_VARIABLE
from kernelkit.worker_client import SANITIZER_CHILD_COMMAND, WORKER_VARIABLE, kit_fingerprint, read_line

# Children started ahead per tool: one timing target built from scratch runs memcheck once (the
# sanitizer job) and racecheck twice (the sanitizer job, and a control of a race).
SLOTS = {"memcheck": 1, "racecheck": 2}
IDLE_EXIT_S = 60.0
# The tool's own summary line, the last thing it writes: the command's result is complete.
SUMMARY_MARKERS = ("ERROR SUMMARY:", "RACECHECK SUMMARY:")
# Logs of children nobody used are removed by a later start after this long.
STALE_LOG_S = 3600.0


def child_environment() -> dict[str, str]:
    """The environment of a tool's child: this process's package first on the path, so the child
    under the tool runs this kit even where another copy is installed; and no worker pool, since
    the tool must watch the child's own process (kernelkit.worker). The same from a job's own
    process and from a worker (whose path already starts with the package)."""
    package_parent = str(Path(__file__).resolve().parent.parent)
    others = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry and entry != package_parent]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([package_parent, *others]), WORKER_VARIABLE: "0"}


def address(tool: str, slot: int) -> str:
    """The socket name of a waiting child: only a command whose own child would run the same kit,
    as the same user, in the same keyed environment (what decides the GPU and the lock) finds it."""
    return f"\0kernelkit-sanitizer-{os.geteuid()}-{tool}-{slot}-{kit_fingerprint(child_environment())}"


def _log_dir() -> Path:
    return Path(os.environ.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR)


def _name_free(name: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.bind(name)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def start_children() -> int:
    """Start a waiting child for each free slot of each tool, where compute-sanitizer is on the
    PATH; returns how many were started."""
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return 0
    log_dir = _log_dir()
    with contextlib.suppress(OSError):
        log_dir.mkdir(parents=True, exist_ok=True)
        for old in log_dir.glob("kernelkit-sanitizer-*.log"):
            if time.time() - old.stat().st_mtime > STALE_LOG_S:
                old.unlink()
    started = 0
    for tool, slots in SLOTS.items():
        for slot in range(slots):
            name = address(tool, slot)
            if not _name_free(name):
                continue
            log = log_dir / f"kernelkit-sanitizer-{uuid.uuid4().hex}.log"
            with contextlib.suppress(OSError):
                subprocess.Popen(
                    [exe, "--tool", tool, "--print-limit", "20", "--log-file", str(log),
                     sys.executable, "-m", "kernelkit", SANITIZER_CHILD_COMMAND, name[1:], str(log)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True, env=child_environment(),
                )
                started += 1
    return started


def _warm_up() -> None:
    """The CUDA context and a first kernel under the tool, holding the GPU shared (it is GPU work);
    where that fails (no GPU), the command the child is given fails as it would anywhere."""
    with contextlib.suppress(Exception):
        from kernelkit import device, environment, gpujob
        from kernelkit.gpulock import LockSettings

        cp = device.cupy()
        bus_id = cp.cuda.Device().pci_bus_id
        with gpujob.shared_gpu(environment.Nvml(bus_id), bus_id, LockSettings(), gpujob.JobClock()):
            cp.zeros(1, dtype=cp.float32).fill(1)
            cp.cuda.Device().synchronize()


def serve_one(name: str, log: str) -> int:
    """The child's life: take the socket (or leave: another child has it), warm up while waiting for
    a connection, take the first one (later ones are refused at once and try another child), run
    the command it brings, reply, and exit so that the tool writes its summary."""
    from kernelkit import cli
    from kernelkit.worker import _peer_uid, _working_directory

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
    except OSError:
        return 0
    listener.listen(8)
    warming = threading.Thread(target=_warm_up)
    warming.start()
    listener.settimeout(IDLE_EXIT_S)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            warming.join()
            return 0
        if _peer_uid(connection) == os.geteuid():
            break
        connection.close()
    listener.close()
    warming.join()
    with connection, connection.makefile("rb") as requests:
        connection.settimeout(None)
        request = read_line(requests)
        if request is None:
            return 0
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _working_directory(request["cwd"]):
            try:
                code = cli.main(request["argv"])
            except SystemExit as ended:
                code = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 2)
        with contextlib.suppress(OSError):
            connection.sendall(json.dumps({"rc": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                                           "log": log}).encode() + b"\n")
    return 0


def _tool_output(log: Path, timeout_s: float) -> str | None:
    """The tool's log once its summary is in it; None when none came within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            text = log.read_text(errors="replace")
            if any(marker in text for marker in SUMMARY_MARKERS):
                with contextlib.suppress(OSError):
                    log.unlink()
                return text
        time.sleep(0.02)
    return None


def run(tool: str, argv: Sequence[str], timeout_s: float) -> tuple[int | None, str] | None:
    """Give `kernelkit argv` to a waiting child of `tool`: (its exit code, the tool's log followed by
    the command's output), exit code None when the tool wrote no summary in time; None when no child
    took the command (the caller starts its own)."""
    for slot in range(SLOTS.get(tool, 0)):
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(address(tool, slot))
        except OSError:
            client.close()
            continue
        with client, client.makefile("rb") as replies:
            try:
                client.sendall(json.dumps({"argv": list(argv), "cwd": os.getcwd()}).encode() + b"\n")
                client.settimeout(timeout_s)
                reply = read_line(replies)
            except OSError:
                reply = None
        if reply is None:
            continue  # taken by another command, or gone: the next slot, or a child of our own
        output = _tool_output(Path(reply["log"]), timeout_s)
        return (reply["rc"] if output is not None else None), (output or "") + reply["stdout"] + reply["stderr"]
    return None
