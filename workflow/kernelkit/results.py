"""Reading and writing result files.

Every result is written to a temporary file in the same directory and renamed into
place, so an interrupted job leaves either the old file, or nothing, never half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from kernelkit import KitError


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are for everyone to read
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike[str], payload: Any) -> None:
    # allow_nan=False: a NaN that slipped into a result is a bug, and strict JSON
    # readers (and diffs) must be able to parse every file the kit writes.
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise KitError(f"result file {path} does not exist") from None
    except json.JSONDecodeError as error:
        raise KitError(f"result file {path} is not valid JSON ({error.msg} at line {error.lineno})") from None


def run_result_files(run_dir: str | os.PathLike[str], kind: str) -> list[Path]:
    """The result files of one kind ('timing', 'cold', 'span', 'correctness', 'controls', 'ceilings') in a run directory, sorted."""
    pattern = {"timing": "timing/*/*/*/rep*.json", "cold": "cold/*/*/*/rep*.json", "span": "span/*/*/rep*.json",
               "correctness": "correctness/*/*.json", "controls": "controls/*/*.json", "ceilings": "ceilings/*.json",
               "sanitizer": "sanitizer/*/*.json", "profile": "profile/*/*/*.json"}
    return sorted(Path(run_dir).glob(pattern[kind]))


def split_skipped(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Timing records with samples, and those of layouts skipped because their library is missing."""
    return [r for r in records if "skipped" not in r], [r for r in records if "skipped" in r]


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical_hash(payload: Any) -> str:
    """Hash of a JSON-able value that ignores key order, so equal configs hash equal."""
    return sha256_text(json.dumps(payload, sort_keys=True, separators=(",", ":")))
