"""One GPU, many jobs: a per-GPU lock, exclusive while the kit times and shared while it only
sets up, held only while that GPU does the kit's work.

Why: `snakemake --cores N` overlaps the CPU side of many jobs (process start, imports, NVRTC
compilation, input generation, float64 references, writing records), but two processes on one
GPU disturb each other's timings. The lock lets the CPU side and the untimed GPU side run in
parallel and keeps timed work alone on the GPU, across Snakemake invocations, clones and users
of one host.

How: `fcntl.flock` on `<lock_dir>/kernelkit-gpu-<uuid>.lock`, shared or exclusive. Two more
files order the holders (`_take`): while a process wants the GPU alone (`.want`), no new shared
holder comes in, and exclusive holders pass a `.gate` one at a time. A fourth, `.members`, every
kit process using the GPU shares until it exits, so the kernel's table of locks names them
(kernelkit.membership, read by kernelkit.foreign). The kernel drops a lock when the holder's
file is closed, which it does when the process dies (even by SIGKILL), so there is no stale pid
file to clean up. The directory is system-wide by default (/tmp/kernelkit-locks, mode 1777 like
/tmp) so every clone and user meets the same lock; `gpu_lock.dir` in the config or
KERNELKIT_LOCK_DIR in the environment moves it (the variable wins, so one shell can isolate a
test). The file's text names the last exclusive holder (pid, host, times); that is for people
and for excluding its trailing utilisation samples, never for deciding who holds it.

Exclusive (nothing else of the kit on the GPU): warm-up and timed samples (graph upload,
  untimed replays, clock wait) and the uploads of later buffer placements, spans, ceilings,
  the harness floor, and Nsight Compute's run of the kit (taken by the child `profile-call`
  process, not by the parent, which would otherwise wait on its own child).
Shared (beside other untimed kit work, never beside a timing): creating the CUDA context,
  loading modules (NVRTC compiles there, coupled to the load by CuPy; a layout's first build is
  its correctness job's, and later processes find the binary in CuPy's disk cache), allocating
  and uploading inputs, the check of the timed output, correctness and negative-control launches
  and their downloads (also in the sanitizer's `kernelkit correctness` children, which share
  with their parent), and a library baseline's `make_call` (Triton compiles there, and may
  allocate and launch).
Outside the lock (the CPU works): imports, spec loading, argument and config checks, reading
  correctness/control records, input generation, float64 references on the host and the checks
  on downloaded bits, tagging, summaries, writing records.

Why the untimed GPU work is locked at all: measured on an H200 (a 1 GB copy timed while eight
other processes looped, 2026-11-30), processes creating contexts made 30 of 191 samples more
than 5% slower (up to +70%), processes loading modules slowed every sample by 13%, and processes
allocating and freeing device memory by 11%; pinning host memory changed nothing. A process
that waits for the exclusive lock holds an idle context, which disturbs nothing. The GPU stages
keep their shared hold until the process ends (`until_exit`): the CUDA context is destroyed
then, and that must not overlap a timing either. `end_process` destroys it explicitly, lets the
hold go and exits, so the next timing does not wait for the interpreter's teardown.
A job run by a worker process (kernelkit.worker) keeps nothing past its end: the worker frees
the job's memory and, when it ends, destroys its context, each inside a shared hold
(`used_gpus_shared`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import stat
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from kernelkit import KitError, membership
from kernelkit.membership import DEFAULT_LOCK_DIR, LOCK_DIR_VARIABLE, open_lock_file

# Sticky and writable by all, like /tmp: every user may create a lock file, none may delete another's.
LOCK_DIR_MODE = 0o1777


def _schema_default(key: str) -> Any:
    from kernelkit.config import schema_default

    return schema_default("gpu_lock", key)


# The keys of the `gpu_lock` section that go into each GPU stage's settings param. `dir` does not:
# where the lock files live changes no result, so moving them must not rerun any target; the
# workflow hands it on through KERNELKIT_LOCK_DIR (and a person through --lock-dir).
LOCK_KEYS = ("enabled", "wait_for_idle", "idle_timeout_s", "idle_poll_s")


@dataclass(frozen=True)
class LockSettings:
    """The `gpu_lock` section of the config; the defaults are the schema's."""

    # Read when a default is needed, not at import: a process that names every field (the
    # sanitizer's child, kernelkit.driver_launch) then never imports the config and NumPy.
    enabled: bool = field(default_factory=lambda: _schema_default("enabled"))
    dir: str | None = field(default_factory=lambda: _schema_default("dir"))
    wait_for_idle: bool = field(default_factory=lambda: _schema_default("wait_for_idle"))
    idle_timeout_s: float = field(default_factory=lambda: _schema_default("idle_timeout_s"))
    idle_poll_s: float = field(default_factory=lambda: _schema_default("idle_poll_s"))

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, lock_dir: str | None = None) -> "LockSettings":
        """From the validated `gpu_lock` section or the slice of it a stage gets (LOCK_KEYS);
        `lock_dir` (the --lock-dir option) wins over the section's `dir`."""
        return cls(**dict(section or {})).with_dir(lock_dir)

    def with_dir(self, lock_dir: str | None) -> "LockSettings":
        """These settings with the --lock-dir option's directory, when one was given."""
        return replace(self, dir=lock_dir) if lock_dir else self

    def lock_dir(self) -> Path:
        return Path(os.environ.get(LOCK_DIR_VARIABLE) or self.dir or DEFAULT_LOCK_DIR)

    def lock_path(self, key: str) -> Path:
        """The lock file of the GPU with this key."""
        return self.lock_dir() / lock_name(key)

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "lock_dir": str(self.lock_dir())}


def shared_hold_settings() -> LockSettings:
    """Settings for a process that only ever holds the GPU shared and reads no config (a waiting
    sanitizer child, kernelkit.standby; a pool process making its context ahead of its jobs): a
    shared hold reads `enabled` and the directory alone, and the directory comes from the
    environment, as the jobs' does."""
    return LockSettings(enabled=True, dir=None, wait_for_idle=False, idle_timeout_s=0.0, idle_poll_s=0.0)


def add_arguments(parser: Any) -> None:
    """The lock's one option outside a stage's --settings: where the lock files live."""
    parser.add_argument("--lock-dir", help=f"directory of the per-GPU lock files (default: gpu_lock.dir, else "
                                           f"{DEFAULT_LOCK_DIR}; {LOCK_DIR_VARIABLE} wins over both)")


@dataclass
class GpuWork:
    """What one stretch of GPU work cost in waiting, recorded with the result it produced."""

    key: str
    lock_path: str
    enabled: bool = True
    nested: bool = False
    # True: an exclusive stretch inside this process's shared hold, which it let go while waiting.
    upgraded: bool = False
    waited_s: float = 0.0
    held_s: float = 0.0
    contended: bool = False
    # "exclusive": nobody else's kit work on the GPU; "shared": only beside other shared work.
    mode: str = "exclusive"
    # True: the lock was kept past held_s until the process exited (released_unix_s is then None).
    kept_until_exit: bool = False
    acquired_unix_s: float | None = None
    released_unix_s: float | None = None
    previous_holder: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return asdict(self)


def lock_name(key: str) -> str:
    """The lock file's name for a GPU key (UUID like 'GPU-8f3c...', or a PCI bus id as fallback)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", key.strip())
    if not safe.strip("._"):
        raise KitError(f"GPU key {key!r} cannot name a lock file; expected a UUID such as GPU-xxxxxxxx-...")
    return f"kernelkit-gpu-{safe}.lock"


def ensure_lock_dir(path: Path) -> Path:
    """Create the lock directory with mode 1777 when missing; fail with one sentence when it is unusable."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise KitError(f"the GPU lock directory {path} cannot be created ({error.strerror}); "
                       f"set gpu_lock.dir or {LOCK_DIR_VARIABLE} to a writable directory") from None
    info = path.stat()
    # Only the owner can change the mode; a directory another user made is left as it is.
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != LOCK_DIR_MODE:
        os.chmod(path, LOCK_DIR_MODE)
    if not os.access(path, os.W_OK | os.X_OK):
        raise KitError(f"the GPU lock directory {path} is not writable by this user; "
                       f"set gpu_lock.dir or {LOCK_DIR_VARIABLE} to a shared writable directory")
    return path


def _read_holder(fd: int) -> dict[str, str]:
    """The key=value lines the last holder wrote, or nothing."""
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode(errors="replace")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _write_holder(fd: int, fields: Mapping[str, Any]) -> None:
    text = "".join(f"{key}={value}\n" for key, value in fields.items())
    with contextlib.suppress(OSError):  # a read-only descriptor: the lock holds all the same
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)


SHARED = "shared"
EXCLUSIVE = "exclusive"


@dataclass
class _Hold:
    """This process's hold on one GPU: the descriptors of the lock, its gate and its want file, and the mode."""

    lock_fd: int
    gate_fd: int
    want_fd: int
    mode: str
    kept_until_exit: bool = False


# GPUs this process holds now, so nested stages do not wait on themselves (a second flock on a
# new descriptor of the same file conflicts even within one process).
_held: dict[str, _Hold] = {}
# Only a command that is its own process keeps a lock until it exits: a caller that runs a
# command inside a longer-lived process (the tests) may start GPU processes after it.
_command_is_process = False


def command_is_process() -> None:
    """Called by the command-line entry point when a command runs as its own process."""
    global _command_is_process
    _command_is_process = True


def _flock(fd: int, operation: int, record: GpuWork) -> None:
    """flock, noting in the record whether someone else held a conflicting lock at the time."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        record.contended = True
        fcntl.flock(fd, operation)


def _take(hold: _Hold, mode: str, record: GpuWork) -> None:
    """Take the GPU in `mode`, the descriptors holding nothing yet.

    Three files: the lock itself (shared or exclusive), a `.want` file that every process waiting
    for or holding the exclusive lock shares, and a `.gate` that exclusive holders pass one at a
    time. A shared holder comes in only when no one wants the GPU alone (it takes `.want`
    exclusively for a moment): the exclusive work is what every other job waits for, so it goes
    first, and a stream of shared holders cannot starve it. Shared holders cannot starve in turn:
    a process wants the GPU alone only after its own shared setup.
    """
    if mode == EXCLUSIVE:
        _flock(hold.want_fd, fcntl.LOCK_SH, record)
        _flock(hold.gate_fd, fcntl.LOCK_EX, record)
        _flock(hold.lock_fd, fcntl.LOCK_EX, record)
    else:
        _flock(hold.want_fd, fcntl.LOCK_EX, record)
        try:
            _flock(hold.lock_fd, fcntl.LOCK_SH, record)
        finally:
            fcntl.flock(hold.want_fd, fcntl.LOCK_UN)
    hold.mode = mode


def _share_after_exclusive(hold: _Hold) -> None:
    """From exclusive to shared. The gate is still closed, so no other exclusive holder can come
    in between (flock converts by releasing first); then the gate opens and the want ends."""
    fcntl.flock(hold.lock_fd, fcntl.LOCK_SH)
    fcntl.flock(hold.gate_fd, fcntl.LOCK_UN)
    fcntl.flock(hold.want_fd, fcntl.LOCK_UN)
    hold.mode = SHARED


def _open_hold(lock_path: Path, mode: str) -> _Hold:
    """Descriptors on a GPU's lock, gate and want files, holding nothing yet."""
    return _Hold(open_lock_file(lock_path), open_lock_file(lock_path.with_suffix(".gate")),
                 open_lock_file(lock_path.with_suffix(".want")), mode)


def _close(hold: _Hold) -> None:
    for fd in (hold.lock_fd, hold.gate_fd, hold.want_fd):
        os.close(fd)


def end_process(code: int) -> None:
    """End a command: log it as leaving its GPUs (membership.note_leaving); then, when it keeps a GPU hold
    until exit, destroy its CUDA context inside the hold, let the hold go, and exit at once with
    `code`. Returns when no hold is kept.

    Why not a plain exit: the next exclusive holder waits for this process to let go, and the
    interpreter's teardown (module finalisers, CuPy's and Torch's exit handlers) takes a tenth of
    a second or more, with the context still alive and the lock still held. Records are closed
    files by now, and the output streams are flushed first. Where the context cannot be
    destroyed explicitly, the process exits normally and the kernel drops the hold at exit.
    """
    membership.note_leaving()
    kept = [key for key, hold in _held.items() if hold.kept_until_exit]
    if not kept:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    cupy = sys.modules.get("cupy")
    try:
        if cupy is not None:
            cupy.cuda.runtime.deviceSynchronize()
            cupy.cuda.runtime.deviceReset()
    except Exception:  # noqa: BLE001 - no context to destroy, or a driver that refuses: exit normally
        return
    for key in kept:
        _close(_held.pop(key))
    os._exit(code)


@contextlib.contextmanager
def used_gpus_shared() -> Iterator[None]:
    """Hold every GPU this process has used, shared, for GPU work between jobs in a process that
    outlives them (kernelkit.worker): freeing cached memory, destroying the context. A GPU this
    process holds already is not taken again (a second flock of its own would wait on itself)."""
    holds: list[_Hold] = []
    try:
        if not _held:
            for path in membership.lock_paths():
                hold = _open_hold(path, SHARED)
                holds.append(hold)
                _take(hold, SHARED, GpuWork(key=path.name, lock_path=str(path), mode=SHARED))
        yield
    finally:
        for hold in holds:
            _close(hold)


@contextlib.contextmanager
def gpu_work(key: str, settings: LockSettings, until_exit: bool = False, mode: str = EXCLUSIVE) -> Iterator[GpuWork]:
    """Hold the GPU for the body, shared or exclusive; the yielded record gets waited_s and held_s.

    Exclusive: no other kit process does anything on this GPU (timed samples, spans, ceilings).
    Shared: GPU work that disturbs a timing but is not itself timed (creating the CUDA context,
    loading modules, allocating, uploading, correctness launches): shared holders overlap each
    other, never an exclusive holder. An exclusive stretch inside a shared one lets the shared
    hold go while it waits (two processes that both wait to upgrade would otherwise deadlock)
    and is shared again afterwards.

    `until_exit`: keep the GPU shared after the body, until the process exits: its CUDA context
    is destroyed at exit, which is GPU work too; held_s counts the body only.

    Blocks until the conflicting holders have finished (the kernel wakes the waiters; no
    polling). With `settings.enabled` false the body runs unlocked and the record says so, so a
    run made that way can be told apart.
    """
    if mode not in (SHARED, EXCLUSIVE):
        raise ValueError(f"mode must be {SHARED!r} or {EXCLUSIVE!r}, not {mode!r}")
    until_exit = until_exit and _command_is_process
    if settings.enabled:
        ensure_lock_dir(settings.lock_dir())
    path = settings.lock_path(key)
    record = GpuWork(key=key, lock_path=str(path), enabled=settings.enabled, mode=mode)
    hold = _held.get(key)
    if not settings.enabled or (hold is not None and (hold.mode == EXCLUSIVE or mode == SHARED)):
        record.nested = hold is not None
        began = time.monotonic()
        try:
            yield record
        finally:
            record.held_s = round(time.monotonic() - began, 6)
        return
    upgrading = record.upgraded = hold is not None
    membership.join(path)
    if hold is None:
        hold = _held[key] = _open_hold(path, mode)
    else:
        fcntl.flock(hold.lock_fd, fcntl.LOCK_UN)
    kept = False
    try:
        asked = time.monotonic()
        _take(hold, mode, record)
        got = time.monotonic()
        record.waited_s = round(got - asked, 6)
        record.acquired_unix_s = time.time()
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "acquired_unix_s": record.acquired_unix_s}
        if mode == EXCLUSIVE:
            record.previous_holder = _read_holder(hold.lock_fd)
            _write_holder(hold.lock_fd, holder)
        try:
            yield record
        finally:
            record.held_s = round(time.monotonic() - got, 6)
            if mode == EXCLUSIVE:
                _write_holder(hold.lock_fd, {**holder, "released_unix_s": "at exit" if until_exit and not upgrading
                                             else time.time()})
            if upgrading or until_exit:
                if mode == EXCLUSIVE:
                    _share_after_exclusive(hold)
                kept = True
                record.kept_until_exit = until_exit and not upgrading
                hold.kept_until_exit = hold.kept_until_exit or record.kept_until_exit
            if not record.kept_until_exit:
                record.released_unix_s = time.time()
    finally:
        # Closing the descriptors releases the hold; one kept until exit is let go by end_process,
        # after the CUDA context is destroyed, or else by the kernel when the process ends.
        if not kept and _held.get(key) is hold:
            del _held[key]
            _close(hold)
