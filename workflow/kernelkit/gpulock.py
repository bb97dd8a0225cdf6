"""One GPU, one kit process at a time: an exclusive `flock` on one file per GPU.

Why: `snakemake --cores N` overlaps the CPU side of many jobs, but two processes on one GPU
disturb each other's timings, and so do processes that create contexts, load modules or allocate
memory (up to +70% on a copy, H200). So a process takes its GPU's lock before it creates its CUDA
context and keeps it until it exits; the kernel drops it when the process dies, even by SIGKILL.

The lock file is `<lock_dir>/kernelkit-gpu-<uuid>.lock`, in /tmp/kernelkit-locks (mode 1777) by
default so every clone and user of a host meets the same lock; `gpu_lock.dir` or
KERNELKIT_LOCK_DIR (which wins) moves it. Its text names the last holder, for people and for
kernelkit.foreign, never for deciding who holds it. Children a holder starts on its GPU
(compute-sanitizer and its kit process) find their ancestor in HELD_BY_VARIABLE and take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import stat
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from kernelkit import KitError

DEFAULT_LOCK_DIR = "/tmp/kernelkit-locks"
LOCK_DIR_VARIABLE = "KERNELKIT_LOCK_DIR"
HELD_BY_VARIABLE = "KERNELKIT_GPU_HELD_BY"
# Sticky and writable by all, like /tmp: every user may create a lock file, none may delete another's.
LOCK_DIR_MODE = 0o1777
LOCK_FILE_MODE = 0o666

# The `gpu_lock` keys in each GPU stage's settings param; not `dir`, which changes no result, so
# moving it must not rerun any target (it travels as KERNELKIT_LOCK_DIR or --lock-dir).
LOCK_KEYS = ("enabled", "wait_for_idle", "idle_timeout_s", "idle_poll_s")


def _schema_default(key: str) -> Any:
    from kernelkit.config_file import schema_default

    return schema_default("gpu_lock", key)


@dataclass(frozen=True)
class LockSettings:
    """The `gpu_lock` section of the config; the defaults are the schema's."""

    enabled: bool = field(default_factory=lambda: _schema_default("enabled"))
    dir: str | None = field(default_factory=lambda: _schema_default("dir"))
    wait_for_idle: bool = field(default_factory=lambda: _schema_default("wait_for_idle"))
    idle_timeout_s: float = field(default_factory=lambda: _schema_default("idle_timeout_s"))
    idle_poll_s: float = field(default_factory=lambda: _schema_default("idle_poll_s"))

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None, lock_dir: str | None = None) -> "LockSettings":
        """From the validated `gpu_lock` section or a stage's slice; `lock_dir` (--lock-dir) wins."""
        return cls(**dict(section or {})).with_dir(lock_dir)

    def with_dir(self, lock_dir: str | None) -> "LockSettings":
        return replace(self, dir=lock_dir) if lock_dir else self

    def lock_dir(self) -> Path:
        return Path(os.environ.get(LOCK_DIR_VARIABLE) or self.dir or DEFAULT_LOCK_DIR)

    def lock_path(self, key: str) -> Path:
        return self.lock_dir() / lock_name(key)

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "lock_dir": str(self.lock_dir())}


def add_arguments(parser: Any) -> None:
    """The lock's one option outside a stage's --settings: where the lock files live."""
    parser.add_argument("--lock-dir", help=f"directory of the per-GPU lock files (default: gpu_lock.dir, else "
                                           f"{DEFAULT_LOCK_DIR}; {LOCK_DIR_VARIABLE} wins over both)")


@dataclass
class GpuWork:
    """What taking the GPU cost, recorded with the result it produced."""

    key: str
    lock_path: str
    enabled: bool = True
    # True: this process held the GPU already (or its parent does), so nothing was taken here.
    nested: bool = False
    waited_s: float = 0.0
    held_s: float = 0.0
    contended: bool = False
    mode: str = "exclusive"
    acquired_unix_s: float | None = None
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
    if info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) != LOCK_DIR_MODE:
        os.chmod(path, LOCK_DIR_MODE)
    if not os.access(path, os.W_OK | os.X_OK):
        raise KitError(f"the GPU lock directory {path} is not writable by this user; "
                       f"set gpu_lock.dir or {LOCK_DIR_VARIABLE} to a shared writable directory")
    return path


def open_lock_file(path: Path) -> int:
    """A descriptor on a lock file, created readable and writable by all. flock needs no write
    access, so a file another user made and did not share still locks."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    with contextlib.suppress(PermissionError):
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, LOCK_FILE_MODE)
    return fd


def _read_holder(fd: int) -> dict[str, str]:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode(errors="replace")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _write_holder(fd: int, fields: Mapping[str, Any]) -> None:
    text = "".join(f"{key}={value}\n" for key, value in fields.items())
    with contextlib.suppress(OSError):  # a read-only descriptor: the lock holds all the same
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode(), 0)


# GPUs this process holds: key -> (descriptor, the record of taking it). In a command's own
# process the kernel closes the descriptor at exit, after the CUDA context is gone; a command run
# inside a longer-lived process (the tests) lets it go after the body.
_held: dict[str, tuple[int, GpuWork]] = {}
_command_is_process = False


def command_is_process() -> None:
    """Called by the command-line entry point when a command runs as its own process."""
    global _command_is_process
    _command_is_process = True


def parent_of(pid: int | str) -> int | None:
    """A process's parent pid from /proc (field 4 of its stat), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def ancestors() -> list[int]:
    """The pids above this process (its parent, the parent's parent, ...)."""
    found: list[int] = []
    current: int | None = os.getpid()
    while current is not None and current > 1 and len(found) < 64:
        current = parent_of(current)
        if current is not None:
            found.append(current)
    return found


def held_by_ancestor() -> bool:
    """Whether this process works under a holder's hold: the holder named in HELD_BY_VARIABLE is
    one of its ancestors (compute-sanitizer stands between the holder and the kit's process it runs)."""
    holder = os.environ.get(HELD_BY_VARIABLE, "")
    return holder.isdigit() and int(holder) in ancestors()


def child_environment() -> dict[str, str]:
    """The environment for a child this process starts on the GPU it holds: under this process's
    hold, and running this checkout's kit first, whatever else PYTHONPATH names (a tool's child
    must check the code this job runs, not another installed copy)."""
    kit_root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(part for part in (kit_root, os.environ.get("PYTHONPATH", "")) if part)
    return {**os.environ, "PYTHONPATH": path, HELD_BY_VARIABLE: str(os.getpid())}


@contextlib.contextmanager
def gpu_work(key: str, settings: LockSettings) -> Iterator[GpuWork]:
    """Hold the GPU with this key for the body and, in a command's own process, until it exits;
    blocks until the holder before has exited. A second stretch in the same process, or one in a
    child under its parent's hold, takes nothing. Disabled: unlocked, and the record says so."""
    path = settings.lock_path(key)
    record = GpuWork(key=key, lock_path=str(path), enabled=settings.enabled)
    began = time.monotonic()
    if not settings.enabled or key in _held or held_by_ancestor():
        record.nested = settings.enabled
        if key in _held:
            outer = _held[key][1]
            record.acquired_unix_s, record.previous_holder = outer.acquired_unix_s, dict(outer.previous_holder)
        try:
            yield record
        finally:
            record.held_s = round(time.monotonic() - began, 6)
        return
    ensure_lock_dir(settings.lock_dir())
    fd = open_lock_file(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record.contended = True
            fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    got = time.monotonic()
    record.waited_s = round(got - began, 6)
    record.acquired_unix_s = time.time()
    record.previous_holder = _read_holder(fd)
    _write_holder(fd, {"pid": os.getpid(), "host": socket.gethostname(), "acquired_unix_s": record.acquired_unix_s})
    _held[key] = (fd, record)
    try:
        yield record
    finally:
        record.held_s = round(time.monotonic() - got, 6)
        if not _command_is_process:
            os.close(_held.pop(key)[0])
