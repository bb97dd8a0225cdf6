"""Sanitizer children started before their plan: each waits, its tool, Python and CUDA context up,
for the one job that claims it, and then runs that job's plan (kernelkit.driver_launch).

Why: under compute-sanitizer a child pays the tool's start, Python's and a CUDA context before its
first launch, and its context is the slow part: on an H200 (2026-12-01) racecheck's took 0.67-0.85 s
(0.12 s without the tool), memcheck's 0.17-0.24 s; 15 launches and the exit took 0.3 s more. These
children are the critical path of every timed target: one target built from scratch waits for
the sanitizer's job and the `barrier` control, which each wait for a racecheck child (2.1-2.4 s
beside the other checks' new contexts). Started by the workflow while it reads the workflow,
for the targets it surely builds (guards.smk `start_sanitizer_children_ahead`), and as its first
jobs start, for what the DAG wants beyond those (`start_waiting_sanitizer_children`), a child is
ready about when its job has written the plan.

How, with files only, so that any process of the job may claim (a worker, or the job's own):
each child has a directory under `<lock dir>/kernelkit-standby-<uid>/<kit fingerprint>/`, named
`<tool>-<start time>-<starter pid>-<n>`. A small shell supervises the tool: it writes the tool's
exit code when the child ran a plan, and removes the directory when it did not. The child writes
`ready` (the GPU key and lock file it used for its context) and waits. A claimant creates `claim`
(exclusively, by link), checks that `ready` names the lock it would use itself, and writes `go`
with its plan's directory, or a `go` without one to send the child away. A child that nobody
claimed within the pool's idle time, or whose claimant died, leaves: nothing waits for ever.

The same tool, the same options, the same program and the same plan as a child started by its
job: only the moment it started differs, which the record says (`waiting_child`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from kernelkit.membership import DEFAULT_LOCK_DIR, LOCK_DIR_VARIABLE
from kernelkit.records import process_alive
from kernelkit.worker_client import WORKER_VARIABLE, idle_exit_s, kit_fingerprint

TOOLS = ("memcheck", "racecheck")
# What every sanitizer run of the kit passes its tool, waiting or not (kernelkit.tools). No option
# makes racecheck's context faster: alone on an H200 (compute-sanitizer 2025.3.1, 2026-12-02), a
# ctypes child's took 0.45-0.67 s under each of 11 option sets (no backtraces, callers,
# memcpy-async or API-access tracking, bulk-copy or NVTX checks; error-level detection; no CUDA-init
# requirement; application-only; eager or lazy module loading), 0.46 and 0.61 s with none after a
# first 0.91 s, 0.11 s without the tool.
TOOL_OPTIONS = ("--print-limit", "20")
# The most children of one tool that wait on one GPU: a one-target build needs two racecheck
# children (the sanitizer's job and the `barrier` control) and one memcheck child. More would
# each make a context under their tool at the start of a larger run, beside its first jobs.
MOST_WAITING = {"racecheck": 2, "memcheck": 1}
POLL_S = 0.005
SPEC, SUPERVISOR, READY, CLAIM, GO, OUTPUT, EXIT_CODE = (
    "spec.json", "supervisor", "ready", "claim", "go", "output.txt", "exit_code")
# The tool's output into the directory; its exit code when the child ran a plan, else the
# directory removed (a child that left unclaimed, or was sent away).
SUPERVISE = ('d="$1"; shift; "$@" > "$d/output.txt" 2>&1; code=$?; '
             'if [ -e "$d/go" ]; then echo "$code" > "$d/exit_code.new" && mv "$d/exit_code.new" "$d/exit_code"; '
             'else rm -rf "$d"; fi')


def child_environment() -> dict[str, str]:
    """The environment for a child `kernelkit` under a tool: this process's package first on the
    path, so the child runs this kit even where another copy is installed; and no worker pool,
    since the tool must watch the child's own process (kernelkit.worker)."""
    package_parent = str(Path(__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": package_parent + (os.pathsep + path if path else ""), WORKER_VARIABLE: "0"}


def child_program(plan_or_directory: Path, waiting: bool = False) -> list[str]:
    """The program a tool runs: kernelkit.driver_launch over a plan, or waiting for one in `directory`.
    -S: it needs the standard library and this package only (its path comes from the environment)."""
    return [sys.executable, "-S", "-m", "kernelkit.driver_launch", *(["--wait"] if waiting else []), str(plan_or_directory)]


# The environment a child's launches depend on, beside the kit and the Python. Not all that keys a
# worker pool: a pool's processes run with the kit's path put first on PYTHONPATH, and their
# jobs must find the children the workflow started with the jobs' own environment. Which GPU a
# child is on is checked when it is claimed (its lock key).
CHILD_KEYED_PREFIXES = ("CUDA_", "LD_")


def root() -> Path:
    """Where this user's waiting children of this kit, Python and CUDA environment are."""
    lock_dir = Path(os.environ.get(LOCK_DIR_VARIABLE) or DEFAULT_LOCK_DIR)
    return lock_dir / f"kernelkit-standby-{os.geteuid()}" / kit_fingerprint(CHILD_KEYED_PREFIXES)


def read_json(path: Path) -> Any:
    """A file's JSON, or None while it is missing or not yet whole."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_json(path: Path, value: Any) -> None:
    """Written whole or not at all: readers poll for these files. Not records.write_json_atomic,
    whose fsync would put a disk's flush between a claimant and its child: nothing reads these
    files after a crash."""
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(value), encoding="utf-8")
    os.replace(partial, path)


def take_claim(directory: Path, value: Mapping[str, Any]) -> bool:
    """Create `claim` with `value` if no one has: by link, so that it appears whole and only once."""
    partial = directory / f".claim.{os.getpid()}"
    try:
        partial.write_text(json.dumps(dict(value)), encoding="utf-8")
        os.link(partial, directory / CLAIM)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()


def _supervisor(directory: Path) -> int | None:
    """The pid of the child's shell; None until its starter has written it."""
    pid = read_json(directory / SUPERVISOR)
    return pid if isinstance(pid, int) else None


def _children(tool: str | None = None) -> list[Path]:
    """This kit's children, oldest first (their names begin with the tool and the start time)."""
    try:
        return sorted(path for path in root().iterdir()
                      if not path.name.startswith(".") and (tool is None or path.name.startswith(f"{tool}-")))
    except OSError:
        return []


# A directory whose starter has not named its shell after this long was left by a starter that died.
STARTING_S = 60.0


def _started_unix_s(directory: Path) -> float:
    try:
        return int(directory.name.split("-")[1]) / 1e9
    except (IndexError, ValueError):
        return 0.0


def remove_stale() -> None:
    """Directories whose shell is gone (a host that stopped, a kill): nothing will remove them else."""
    for directory in _children():
        if _supervisor(directory) is None and time.time() - _started_unix_s(directory) < STARTING_S:
            continue  # another starter is starting it
        if not _running(directory):
            shutil.rmtree(directory, ignore_errors=True)


def waiting(tool: str) -> int:
    """How many children of `tool` are there for a claimant: alive and not claimed."""
    return sum(1 for directory in _children(tool) if not (directory / CLAIM).exists() and _running(directory))


def _running(directory: Path) -> bool:
    supervisor = _supervisor(directory)
    return supervisor is not None and process_alive(supervisor)


def start(wanted: Mapping[str, int], program: Callable[[Path], list[str]] | None = None) -> list[Path]:
    """Start children of each tool until `wanted` (at most MOST_WAITING) wait; their directories.
    Nothing without compute-sanitizer on the PATH. `program`: what the tool runs given the child's
    directory, the kit's waiting child by default (tests run it with a stand-in driver)."""
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        return []
    remove_stale()
    base = root()
    base.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        base.parent.chmod(0o700)
    started = []
    for tool in TOOLS:
        for number in range(min(wanted.get(tool, 0), MOST_WAITING[tool]) - waiting(tool)):
            directory = base / f"{tool}-{time.time_ns()}-{os.getpid()}-{number}"
            directory.mkdir()
            write_json(directory / SPEC, {"tool": tool, "exe": exe, "idle_s": idle_exit_s()})
            arguments = (program or (lambda folder: child_program(folder, waiting=True)))(directory)
            shell = subprocess.Popen(["sh", "-c", SUPERVISE, "sh", str(directory), exe, "--tool", tool, *TOOL_OPTIONS, *arguments],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True, close_fds=True, env=child_environment())
            write_json(directory / SUPERVISOR, shell.pid)  # from here on a claimant may take it
            started.append(directory)
    return started


class Claimed:
    """A waiting child this process claimed: hand it a plan, or send it away."""

    def __init__(self, directory: Path, supervisor: int) -> None:
        self.directory = directory
        self.supervisor = supervisor
        self.claimed = time.monotonic()
        self.claimed_unix_s = time.time()

    def _wait_for(self, name: str, deadline: float) -> Any:
        """The file's JSON once it is there; None when the child's shell ended without it or time ran out."""
        path = self.directory / name
        while time.monotonic() < deadline:
            value = read_json(path)
            if value is not None:
                return value
            if not process_alive(self.supervisor):
                return read_json(path)
            time.sleep(POLL_S)
        return None

    def send_away(self) -> None:
        with contextlib.suppress(OSError):
            write_json(self.directory / GO, {"plan": None})

    def run(self, plan: Path, key: str, lock_path: str, timeout_s: float) -> dict[str, Any] | None:
        """Run `plan` in the child: its exit code (None: it did not end in time, and it was
        killed), output, when it started and its waits; or None, the child sent away or gone
        before its context was up, when the caller must start a child of its own."""
        deadline = self.claimed + timeout_s
        ready = self._wait_for(READY, deadline)
        if not isinstance(ready, dict) or (ready.get("key"), ready.get("lock_path")) != (key, lock_path):
            self.send_away()
            return None
        handed = time.monotonic()
        write_json(self.directory / GO, {"plan": str(plan)})
        code = self._wait_for(EXIT_CODE, deadline)
        if code is None:
            with contextlib.suppress(OSError):
                os.killpg(self.supervisor, signal.SIGKILL)
        output = ""
        with contextlib.suppress(OSError):
            output = (self.directory / OUTPUT).read_text(encoding="utf-8", errors="replace")
        shutil.rmtree(self.directory, ignore_errors=True)
        return {"exit_code": code if isinstance(code, int) else None, "output": output,
                "waiting_child": {"started_unix_s": round(_started_unix_s(self.directory), 3),
                                  "context_s": ready.get("context_s"),
                                  "waited_for_its_context_s": round(handed - self.claimed, 3),
                                  "ready_before_claim_s": round(max(0.0, self.claimed_unix_s - float(ready.get("ready_unix_s", 0))), 3)}}


def claim(tool: str, exe: str) -> Claimed | None:
    """The oldest child of `tool` (started with the tool at `exe`) that nobody claimed, claimed
    for this process; a child still making its context is taken too (it is ready sooner than a
    new one). None when there is none."""
    for directory in _children(tool):
        spec = read_json(directory / SPEC)
        if not isinstance(spec, dict) or spec.get("exe") != exe or (directory / CLAIM).exists() or not _running(directory):
            continue
        if take_claim(directory, {"pid": os.getpid(), "claimed_unix_s": time.time()}):
            return Claimed(directory, _supervisor(directory))
    return None


def run_in_waiting_child(tool: str, exe: str, plan: Path, lock: Mapping[str, Any] | None,
                         timeout_s: float) -> dict[str, Any] | None:
    """`plan` run by a waiting child of `tool` claimed here (Claimed.run says what comes back);
    None when no such child can run it, and the caller starts one. A plan that shares no lock
    takes none: a waiting child made its context holding one."""
    from kernelkit import gpulock

    claimed = claim(tool, exe) if lock else None
    if claimed is None:
        return None
    lock_path = gpulock.LockSettings(**lock["settings"]).lock_path(lock["key"])
    return claimed.run(plan, lock["key"], str(lock_path), timeout_s)


# The child's side (kernelkit.driver_launch --wait), on the standard library only.

def wait_for_go(directory: Path, idle_s: float, poll_s: float = POLL_S) -> dict[str, Any] | None:
    """Wait for a claimant's `go`; None when the child should leave instead: nobody claimed it
    within `idle_s` (it then claims itself, so no claimant can come after), or its claimant died
    before handing it a plan."""
    deadline = time.monotonic() + idle_s
    while True:
        go = read_json(directory / GO)
        if isinstance(go, dict):
            return go
        claimed = read_json(directory / CLAIM)
        if claimed is None:
            if time.monotonic() > deadline and take_claim(directory, {"pid": os.getpid(), "left_unclaimed": True}):
                return None
        elif isinstance(claimed, dict) and (claimed.get("left_unclaimed") or not process_alive(int(claimed.get("pid", 0)))):
            return None
        time.sleep(poll_s)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m kernelkit.standby memcheck=N racecheck=M`: start children until so many wait
    (the workflow runs it through a job's shell and card prefix, so they are on the job's GPU)."""
    wanted: dict[str, int] = {}
    for word in sys.argv[1:] if argv is None else argv:
        tool, _, count = word.partition("=")
        if tool not in TOOLS or not count.isdigit():
            print(f"kernelkit.standby: '{word}' is not TOOL=COUNT; tools: {', '.join(TOOLS)}", file=sys.stderr)
            return 2
        wanted[tool] = int(count)
    start(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
