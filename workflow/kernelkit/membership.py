"""Who is the kit on a GPU: the `.members` file beside the GPU's lock, which every kit process
that used the GPU holds a shared flock on until it exits, and the `.left` log an ending one writes
to first.

Why apart from kernelkit.gpulock: the lock decides who may use the GPU now; the membership says
which processes are the kit at all, for kernelkit.foreign, which must not call the kit's own
processes foreign (a waiting job's idle context, or an ending racecheck child whose context NVML
still lists). gpulock makes a process a member when it first locks a GPU; foreign reads the
members from the kernel's table of locks (`lock_members`) and the leavers from the log
(`recent_leavers`). Both files, like the lock files, are shared by every user of the host.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

# Where the shared files live (kernelkit.gpulock.LockSettings.lock_dir; the config's gpu_lock.dir
# reaches the jobs through the variable).
DEFAULT_LOCK_DIR = "/tmp/kernelkit-locks"
LOCK_DIR_VARIABLE = "KERNELKIT_LOCK_DIR"
# Readable and writable by all: every user's kit processes lock and log in the same files.
LOCK_FILE_MODE = 0o666


def _descriptor(path: Path, flags: int) -> int:
    """A descriptor on a shared file, creating it readable and writable by all (its owner makes
    it so again, should a umask have narrowed it)."""
    fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, LOCK_FILE_MODE)
    with contextlib.suppress(PermissionError):
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, LOCK_FILE_MODE)
    return fd


def open_lock_file(path: Path) -> int:
    """A descriptor on a lock file. flock needs no write access, so a file another user made and
    did not share still locks."""
    try:
        return _descriptor(path, os.O_RDWR)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


def members_path(lock_path: Path) -> Path:
    """The file every kit process using this GPU shares a lock on until it exits."""
    return lock_path.with_suffix(".members")


def leavers_path(members: Path) -> Path:
    """The log of kit processes that are ending: `pid unix_time` per line (kernelkit.foreign.recent_leavers)."""
    return members.with_suffix(".left")


# The `.members` file of each GPU this process has used, held shared until it exits: the kernel's
# list of locks then names every kit process on that GPU (kernelkit.foreign.lock_members).
_joined: dict[Path, int] = {}


def join(lock_path: Path) -> None:
    """Make this process a member on the GPU of `lock_path`, once, until it exits."""
    members = members_path(lock_path)
    if members not in _joined:
        _joined[members] = open_lock_file(members)
        fcntl.flock(_joined[members], fcntl.LOCK_SH)  # no one takes it exclusively: never waits


def lock_paths() -> list[Path]:
    """The lock files of the GPUs this process is a member on."""
    return [members.with_suffix(".lock") for members in _joined]


def has_joined() -> bool:
    """Whether this process has done GPU work under the lock (it is a member on some GPU)."""
    return bool(_joined)


def note_leaving() -> None:
    """Log this process as a kit member that is ending, before its membership goes: the kernel drops
    the flock at exit before the driver has torn down the CUDA context, and NVML lists the pid
    meanwhile (an H200 run of 2026-11-30 called exiting racecheck children foreign)."""
    line = f"{os.getpid()} {time.time():.3f}\n".encode()
    for members in _joined:
        with contextlib.suppress(OSError):  # a log another user did not share: this pid stays unexcused
            fd = _descriptor(leavers_path(members), os.O_WRONLY | os.O_APPEND)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
