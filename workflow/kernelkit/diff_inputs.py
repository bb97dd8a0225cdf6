"""The result files a diff reads, checked before any number is computed from them: a diff gates
CI, so an unusable file stops it with one sentence (exit 2) instead of a verdict (a NaN sample makes
the verdict SAME). Fields only displayed, or that older kits lack, are read defensively where used."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Iterable

from kernelkit import KitError
from kernelkit.layout import card_dirs, run_result_files
from kernelkit.records import printable, read_checked, read_json, read_run_records

@dataclass
class RunFiles:
    dir: Path
    environment: dict[str, Any]
    correctness: dict[tuple[str, str], dict[str, Any]]
    controls: dict[tuple[str, str], dict[str, Any]]
    timings: dict[tuple[str, str, str, int], dict[str, Any]]
    # Per card UUID and ceiling: the median microseconds, and how it was measured (see _card_ceilings).
    card_ceilings: dict[str, dict[str, tuple[float, str]]] = field(default_factory=dict)


def _card_ceilings(root: Path) -> dict[str, dict[str, tuple[float, str]]]:
    found: dict[str, dict[str, tuple[float, str]]] = {}
    for directory in card_dirs(root):
        try:  # runs made before ceiling records named their card: the card of the directory's environment
            environment = read_json(directory / "environment.json")
            directory_card = environment.get("gpu", {}).get("uuid") if isinstance(environment, dict) else None
        except (KitError, AttributeError):
            directory_card = None
        for path in run_result_files(directory, "ceilings"):
            try:
                record = read_json(path)
            except KitError:
                continue
            if not isinstance(record, dict):
                continue
            uuid, samples = record.get("gpu_uuid") or directory_card, record.get("samples_us")
            if isinstance(uuid, str) and uuid and isinstance(samples, list) and samples and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in samples):
                # How it was measured, as far as it decides the number: the timing method's name and host
                # lead, and the sizes (sample counts and the fastest variant may differ between cards).
                method = record.get("method") if isinstance(record.get("method"), dict) else {}
                measure = json.dumps([method.get("name"), method.get("host_lead_us", 0.0), record.get("sizes")],
                                     sort_keys=True, default=str)
                found.setdefault(uuid, {})[record.get("kind", path.stem)] = (float(median(samples)), measure)
    return found


def by_process(keyed: Iterable[tuple[Any, dict[str, Any]]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """The records of each process that timed these (key, record) pairs, in order of first appearance:
    the process its job clock names (an earlier kit's `worker`), else the record's own."""
    found: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for key, record in keyed:
        job = record.get("job") if isinstance(record.get("job"), dict) else {}
        named = [p for p in (job.get("process"), job.get("worker")) if isinstance(p, dict) and p.get("pid") is not None]
        process = ("process", named[0]["pid"], named[0].get("started_unix_s")) if named else ("own process", key)
        found.setdefault(process, []).append(record)
    return found


def samples_by_process(keyed: Iterable[tuple[Any, dict[str, Any]]]) -> list[list[float]]:
    """The samples of each process, pooled: repeats one worker ran are one list."""
    return [[s for record in records for s in record["samples_us"]] for records in by_process(keyed).values()]


def shared_processes(processes: dict[tuple[Any, ...], list[dict[str, Any]]]) -> tuple[int, int]:
    """How many configurations these processes timed, and in how many two repeats shared a process."""
    configurations: dict[tuple[Any, ...], list[Any]] = {}
    for process, records in processes.items():
        for r in records:
            configurations.setdefault((r.get("kernel"), r.get("shape"), r.get("layout")), []).append(process)
    return len(configurations), sum(len(set(found)) < len(found) for found in configurations.values())


def saw_foreign_work(record: dict[str, Any]) -> bool:
    """Whether the process timing this record saw another process's work on its GPU (its summary or a sample's tag)."""
    from kernelkit import foreign

    tags = record.get("sample_tags")
    return bool(foreign.saw_foreign_work(record)) or (
        isinstance(tags, list) and any(isinstance(tag, dict) and tag.get("foreign") for tag in tags))


def disturbed_count(record: dict[str, Any]) -> int:
    disturbed = record.get("disturbed_samples")
    return len(disturbed) if isinstance(disturbed, list) else 0


def card(record: dict[str, Any]) -> str | None:
    """The card a target ran on, where its record says: the UUID, else the index on its host."""
    uuid, index = record.get("gpu_uuid"), record.get("gpu_index")
    return (uuid if isinstance(uuid, str) and uuid
            else f"GPU index {index}" if isinstance(index, int) and not isinstance(index, bool) else None)


def load_run(path: str | Path) -> RunFiles:
    """Every result file of a run directory; KitError naming the directory or file that is unusable."""
    root = Path(path)
    if root.is_file():
        raise KitError(f"{printable(str(root))} is a file, not a run directory (results/<run>)")
    if not root.is_dir():
        raise KitError(f"run directory {printable(str(root))} does not exist")
    # A layout skipped for a library missing on that machine shows up as "only in" the other run.
    if not (timings := {(r["kernel"], r["shape"], r["layout"], r["repeat"]): r
                        for _, r in read_run_records(root, "timing") if "skipped" not in r}):
        raise KitError(f"run directory {printable(str(root))} holds no timing records "
                       "(timing/<kernel>/<shape>/<layout>/rep<n>.json)")
    return RunFiles(dir=root, environment=read_checked(root / "environment.json", "environment"),
                    correctness={(r["kernel"], layout): r for _, r in read_run_records(root, "correctness")
                                 for layout in r.get("layouts", [])},
                    controls={(r["kernel"], r["control"]): r for _, r in read_run_records(root, "controls")},
                    timings=timings, card_ceilings=_card_ceilings(root))
