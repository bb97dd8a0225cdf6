"""The files a person asks a reader for (`report`, `diff`, `history`): where they may go and how
they are written, apart from the records, which the stages write (kernelkit.records)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kernelkit import KitError
from kernelkit.records import printable, write_temp


def check_outputs(paths: list[str | os.PathLike[str]]) -> list[Path]:
    """The output paths of one command, or one sentence on why they may not be written: the same
    file twice, a folder, a path through a symbolic link, or one inside a run folder (evidence)."""
    chosen = [Path(p) for p in paths]
    seen: dict[str, Path] = {}
    try:
        for path in chosen:
            if path.name in ("", ".", "..") or str(path).endswith(os.sep) or path.is_dir():
                raise KitError(f"output {printable(str(path))} is a folder; name a file")
            resolved = os.path.realpath(path)
            if resolved in seen:
                raise KitError(f"outputs {printable(str(seen[resolved]))} and {printable(str(path))} are the same "
                               "file; give each its own path")
            seen[resolved] = path
            lexical = Path(os.path.abspath(path))
            for ancestor in [lexical, *lexical.parents]:
                if ancestor.is_symlink():
                    raise KitError(f"output {printable(str(path))} goes through the symbolic link "
                                   f"{printable(str(ancestor))}; write to a real folder")
            for ancestor in lexical.parents:
                if (ancestor / "environment.json").is_file() or (ancestor / "config.json").is_file():
                    raise KitError(f"output {printable(str(path))} lies inside the run folder "
                                   f"{printable(str(ancestor))}; a run's records are evidence, so write reports "
                                   "elsewhere (reports/<run>/)")
    except OSError as error:
        raise KitError(f"cannot write {printable(str(error.filename or paths[0]))} ({error.strerror or error})") from None
    return chosen


def write_outputs(outputs: list[tuple[str | os.PathLike[str], str]]) -> None:
    """Write a command's outputs so that they are replaced together: SIGINT and SIGTERM wait from
    the first write to the last rename, so an interrupt leaves the old outputs or the new ones,
    never a mix. Writers of the same folder take turns (an flock on it)."""
    import fcntl
    import signal

    paths = check_outputs([path for path, _ in outputs])
    held: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread: Python cannot hold signals there
        pass
    pending: list[tuple[str, Path]] = []
    locked: dict[str, int] = {}
    path: Path | None = None  # the one being written, named if it cannot be
    try:
        for path, (_, text) in zip(paths, outputs):
            path.parent.mkdir(parents=True, exist_ok=True)
            folder = os.path.realpath(path.parent)
            if folder not in locked:
                locked[folder] = os.open(folder, os.O_RDONLY | os.O_CLOEXEC)
                fcntl.flock(locked[folder], fcntl.LOCK_EX)
            pending.append((write_temp(path, text.encode("utf-8")), path))
        for tmp, path in pending:
            os.replace(tmp, path)
    except OSError as error:
        raise KitError(f"cannot write {printable(str(path))} ({error.strerror or error})") from None
    finally:
        for tmp, _ in pending:
            Path(tmp).unlink(missing_ok=True)
        for fd in locked.values():
            os.close(fd)
        for number, handler in previous.items():
            signal.signal(number, handler)
        if held:
            signal.raise_signal(held[0])
