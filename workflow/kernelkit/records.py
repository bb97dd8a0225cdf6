"""The record formats: every result is written beside itself and renamed into place, so an
interrupted job leaves the old file or nothing; `read_record` brings a record of any earlier
`format_version` to the current one, here and nowhere else, so readers see one format."""

from __future__ import annotations

import json
import math
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import Any

from kernelkit import KitError, sha256_text


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = write_temp(target, data)
    try:
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone after the rename; left by a failed one


def write_temp(target: Path, data: bytes) -> str:
    """A synced temporary file beside `target` holding `data`, for the caller to rename into place."""
    prefix = f".{target.name}.tmp-{socket.gethostname()}-{os.getpid()}-"
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; results are for everyone to read
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


# The writer's host and pid are in the temporary name, so the cleanup of a later run can tell an
# abandoned temporary file (its writer is gone) from one a live job is writing right now.
_TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.tmp-(?P<host>.+)-(?P<pid>[0-9]+)-[A-Za-z0-9_]+$")


def remove_abandoned_temps(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files of interrupted atomic writes under a run directory, and say which: only
    those whose writer ran on this host and is gone (another host's writer cannot be checked from here)."""
    removed = []
    for candidate in Path(run_dir).rglob(".*.tmp-*"):
        match = _TEMP_NAME.match(candidate.name)
        if match and match["host"] == socket.gethostname() and candidate.is_file():
            try:
                os.kill(int(match["pid"]), 0)
            except ProcessLookupError:  # its writer is gone (PermissionError: another user's, alive)
                candidate.unlink(missing_ok=True)
                removed.append(candidate)
            except PermissionError:
                pass
    return removed


def write_json_atomic(path: str | os.PathLike[str], payload: Any) -> None:
    # allow_nan=False: a NaN in a result is a bug, and strict JSON readers must parse every file.
    write_text_atomic(path, json.dumps(payload, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise KitError(f"result file {path} does not exist") from None
    except json.JSONDecodeError as error:
        raise KitError(f"result file {path} is not valid JSON ({error.msg} at line {error.lineno})") from None


# 1: every record written before records carried a version (no `format_version` key).
# 2: `format_version` added; nothing else changed.
FORMAT_VERSION = 2


def write_record(path: str | os.PathLike[str], record: dict[str, Any]) -> None:
    """Write one stage record, stamped with the current format version."""
    write_json_atomic(path, {**record, "format_version": FORMAT_VERSION})


def read_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """One record, brought to the current format version."""
    return upgrade(read_json(path), path)


def upgrade(record: dict[str, Any], where: Any = "record") -> dict[str, Any]:
    """A record of any known version in the current format; KitError for one from a newer kit.
    Version 1 timings lacked what did not exist yet (a missing `disturbed_samples` is not zero)."""
    version = record.get("format_version", 1)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise KitError(f"{where} has format version {version!r}; this kit reads versions 1 to {FORMAT_VERSION}")
    if version == 1 and "samples_us" in record and "order" in record:
        used = dict(record.get("method_used", {}))
        used.setdefault("name", "cuda_graph_replay")
        used.setdefault("launches_per_sample", record["method"]["launches_per_graph"])
        used.setdefault("cache", "warm")
        used.setdefault("stopped_by", "fixed_count")
        record = {**record, "method_used": used}
    return {**record, "format_version": FORMAT_VERSION}


def split_skipped(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Timing records with samples, and those of layouts skipped because their library is missing."""
    return [r for r in records if "skipped" not in r], [r for r in records if "skipped" in r]


def canonical_hash(payload: Any) -> str:
    """Hash of a JSON-able value that ignores key order, so equal configs hash equal."""
    return sha256_text(json.dumps(payload, sort_keys=True, separators=(",", ":")))


def run_time(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's wall time and its jobs' waits for the GPU lock, from the records' "job" fields; a
    process that wrote several records counts once, with its latest clock."""
    from statistics import median

    latest: dict[Any, dict[str, Any]] = {}
    for index, record in enumerate(records):
        job = record.get("job")
        if not isinstance(job, dict):
            continue
        process = job.get("process") or {}
        key = (process.get("pid"), process.get("started_unix_s")) if process.get("pid") else ("record", index)
        if key not in latest or job.get("ended_unix_s", 0) >= latest[key].get("ended_unix_s", 0):
            latest[key] = job
    jobs = list(latest.values())
    with_job = sum(1 for record in records if isinstance(record.get("job"), dict))
    if not jobs:
        return {"jobs": 0, "without_job_time": len(records), "wall_s": None, "lock_waited_s": None}
    ends = [job.get("ended_unix_s", job["started_unix_s"] + job["wall_s"]) for job in jobs]
    waits = [job["lock_waited_s"] for job in jobs]
    return {
        "jobs": len(jobs),
        "without_job_time": len(records) - with_job,
        "started_unix_s": min(job["started_unix_s"] for job in jobs),
        "ended_unix_s": max(ends),
        "wall_s": max(ends) - min(job["started_unix_s"] for job in jobs),
        "job_wall_s_total": sum(job["wall_s"] for job in jobs),
        "lock_waited_s": {"total": sum(waits), "median": median(waits), "max": max(waits)},
        "lock_held_s_total": sum(job["lock_held_s"] for job in jobs),
    }


def printable(text: str) -> str:
    """Text as a terminal may show it: control characters (ANSI escapes, newlines) written as
    escapes, so a name from a file or a log can print no line or colour of its own choosing."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


# --- The one reader of a run's records: what it refuses is refused everywhere, in one sentence ---
# Larger files are refused before they are parsed: a record of the default config is ~40 KB.
MAX_RECORD_BYTES = 256 * 1024 * 1024
# Plausible sample durations in microseconds (a femtosecond to about 11 days): zero, negative or
# absurd values are broken files, and bounding them keeps every ratio of two medians finite.
SAMPLE_RANGE_US = (1e-9, 1e12)
# The most samples one record may hold: ten times the config's maximum (timing.samples).
MAX_SAMPLES = 1_000_000

# The keys each kind must hold, by what readers use.
REQUIRED = {
    "timing": ("kernel", "shape", "layout", "repeat", "samples_us", "bytes_moved", "flops", "method", "order",
               "nvml_before", "nvml_after", "started_utc", "source_sha256"),
    "cold": ("kernel", "shape", "layout", "repeat", "samples_us", "bytes_moved", "flops", "method"),
    "skipped": ("kernel", "shape", "layout", "repeat", "skipped"),
    "span": ("kernel", "shape", "repeat", "layouts", "method"),
    "ceilings": ("kind", "samples_us"),
    "correctness": ("kernel", "cases", "tolerance"),
    "controls": ("kernel", "control", "cases", "mutation", "caught_by"),
}
CASE_KEYS = {
    "correctness": ("layout", "passed", "max_abs_error", "shape", "pattern", "worst_index"),
    "controls": ("layout", "passed", "symptom", "pattern"),
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _refuse(kind: str, path: Any, what: str) -> KitError:
    return KitError(f"{kind} record {printable(str(path))}: {what}")


def _text(record: dict[str, Any], key: str, kind: str, path: Any) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value or not value.isprintable():
        raise _refuse(kind, path, f"field '{key}' must be a non-empty printable name, not {printable(repr(value))[:60]}")
    return value


def check_samples(samples: Any, kind: str, path: Any, field: str = "samples_us") -> list[float]:
    """Samples a ratio can be taken of."""
    if not isinstance(samples, list) or not samples:
        raise _refuse(kind, path, f"field '{field}' must be a non-empty list of numbers")
    if len(samples) > MAX_SAMPLES:
        raise _refuse(kind, path, f"field '{field}' holds {len(samples)} samples; a record holds at most {MAX_SAMPLES}")
    low, high = SAMPLE_RANGE_US
    for index, value in enumerate(samples):
        if not _number(value) or not math.isfinite(value) or not low <= value <= high:
            raise _refuse(kind, path, f"field '{field}' holds sample {index} = {printable(repr(value))[:40]}; every "
                                      f"sample must be a finite number of microseconds from {low:g} to {high:g}")
    return samples


def _agree(kind: str, path: Path, named: tuple[str, ...], recorded: tuple[Any, ...]) -> None:
    """The record's own fields must name the target its path names."""
    if tuple(named) != tuple(str(part) for part in recorded):
        raise _refuse(kind, path, f"its fields name {printable(' '.join(map(str, recorded)))}, not the "
                                  f"{printable(' '.join(named))} its path names")


def read_checked(path: str | os.PathLike[str], kind: str) -> dict[str, Any]:
    """One record of a run (kind: a key of layout.KINDS, environment or config), checked for what every
    reader needs (its fields must name the target its path names), in the current format."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise _refuse(kind, path, "does not exist") from None
    except OSError as error:
        raise _refuse(kind, path, f"cannot be read ({error.strerror})") from None
    if not path.is_file():
        raise _refuse(kind, path, "is not a file")
    if size > MAX_RECORD_BYTES:
        raise _refuse(kind, path, f"is {size} bytes; a record holds at most {MAX_RECORD_BYTES}")
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except json.JSONDecodeError as error:
        raise _refuse(kind, path, f"is not valid JSON ({error.msg} at line {error.lineno})") from None
    except (OSError, UnicodeDecodeError, RecursionError, ValueError) as error:
        raise _refuse(kind, path, f"cannot be read ({type(error).__name__})") from None
    if not isinstance(record, dict):
        raise _refuse(kind, path, f"holds a JSON {type(record).__name__}, not an object")
    version = record.get("format_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= FORMAT_VERSION:
        raise _refuse(kind, path, f"field 'format_version' is {printable(repr(version))[:20]}; this kit reads "
                                  f"versions 1 to {FORMAT_VERSION}")
    if kind in ("timing", "cold") and "method" in record and not isinstance(record["method"], dict):
        raise _refuse(kind, path, "field 'method' must be an object")
    try:
        record = upgrade(record, path)
    except (KeyError, TypeError) as error:
        raise _refuse(kind, path, f"lacks what its format version needs ({type(error).__name__}: {error})") from None
    own = "skipped" if kind in ("timing", "cold") and "skipped" in record else kind
    missing = [key for key in REQUIRED.get(own, ()) if key not in record]
    if missing:
        raise _refuse(kind, path, f"lacks the field(s) {', '.join(missing)}")
    if kind in ("timing", "cold", "span"):
        fields = ("kernel", "shape") if kind == "span" else ("kernel", "shape", "layout")
        names = tuple(_text(record, key, kind, path) for key in fields)
        repeat = record.get("repeat")
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise _refuse(kind, path, f"field 'repeat' must be an integer from 1, not {printable(repr(repeat))[:40]}")
        _agree(kind, path, path.parts[-len(fields) - 1:-1] + (path.stem,), names + (f"rep{repeat}",))
    if kind in ("timing", "cold"):
        if own == "skipped":
            if not isinstance(record["skipped"], str):
                raise _refuse(kind, path, "field 'skipped' must be the reason, a text")
        else:
            check_samples(record["samples_us"], kind, path)
            placement = record.get("sample_placement")
            if placement is not None and (not isinstance(placement, list) or len(placement) != len(record["samples_us"])
                                          or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0
                                                     for p in placement)):
                raise _refuse(kind, path, "field 'sample_placement' must give a placement index (0, 1, ...) for "
                                          "every sample")
            for key in ("bytes_moved", "flops"):
                if not _number(record[key]) or record[key] < 0:
                    raise _refuse(kind, path, f"field '{key}' must be a number of at least 0")
    elif kind == "span":
        layouts = record["layouts"]
        if not isinstance(layouts, dict) or not layouts:
            raise _refuse(kind, path, "field 'layouts' must be an object of layouts")
        for layout, entry in layouts.items():
            samples = entry.get("samples") if isinstance(entry, dict) else None
            if not (isinstance(samples, list) and samples and all(isinstance(s, dict) and "round" in s for s in samples)):
                raise _refuse(kind, path, f"layout {printable(layout)} needs 'samples', a list of rounds with times")
            check_samples([s.get("us") for s in samples], kind, path, f"layouts.{printable(layout)}.samples")
    elif kind in ("correctness", "controls"):
        kernel = _text(record, "kernel", kind, path)
        if kind == "controls":
            _agree(kind, path, (path.parts[-2], path.stem), (kernel, _text(record, "control", kind, path)))
        else:
            _agree(kind, path, (path.parts[-2],), (kernel,))
            layouts = record.get("layouts", [])
            if not isinstance(layouts, list) or not all(isinstance(name, str) for name in layouts):
                raise _refuse(kind, path, "field 'layouts' must be a list of layout names")
        cases = record["cases"]
        if not isinstance(cases, list):
            raise _refuse(kind, path, "field 'cases' must be a list")
        for index, case in enumerate(cases):
            lacking = [key for key in CASE_KEYS[kind] if not isinstance(case, dict) or key not in case]
            if lacking:
                raise _refuse(kind, path, f"case {index} lacks {', '.join(lacking)}")
    elif kind == "ceilings":
        kind_name = _text(record, "kind", kind, path)
        _agree(kind, path, (path.stem,), (kind_name,))
        check_samples(record["samples_us"], kind, path)
    return record


def read_run_records(run_dir: str | os.PathLike[str], kind: str) -> list[tuple[Path, dict[str, Any]]]:
    """Every record of one kind in a run folder with its path; each configuration's repeats must be
    numbered without a gap (a record of another run copied in, or one removed by hand)."""
    from kernelkit.layout import run_result_files

    found = [(path, read_checked(path, kind)) for path in run_result_files(run_dir, kind)]
    if kind in ("timing", "cold", "span"):
        repeats: dict[tuple[str, ...], dict[int, Path]] = {}
        for path, record in found:
            repeats.setdefault(tuple(path.parts[:-1]), {})[record["repeat"]] = path
        for numbered in repeats.values():
            for number, path in sorted(numbered.items()):
                if number > 1 and number - 1 not in numbered:
                    raise _refuse(kind, path, f"is repeat {number}, but repeat {number - 1} of the same configuration "
                                              "is missing from the run")
    return found
