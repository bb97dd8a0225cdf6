"""The tidy table of a run: one row per kernel / shape / layout / repeat."""

from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from kernelkit.stats import placement_medians, relative_range, summarize
from kernelkit.units import natural_key

COLUMNS = [
    "kernel", "shape", "layout", "repeat", "n", "median_us", "min_us", "max_us",
    "order_key", "order_position", "method", "calls_per_sample", "cache", "disturbed_samples", "stopped_by",
    "placements", "placement_spread",
    "sm_clock_before_mhz", "sm_clock_after_mhz", "started_utc", "source_sha256",
]


def _number(value: Any) -> Any:
    return value if isinstance(value, (int, float)) else None


def summarize_records(records: Iterable[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for record in records:
        stats = summarize(record["samples_us"])
        medians = placement_medians(record["samples_us"], record.get("sample_placement"))
        # Files from before the event fallback existed were all graph replays of launches_per_graph.
        used = {"name": "cuda_graph_replay", "launches_per_sample": record["method"]["launches_per_graph"],
                "cache": "warm", "stopped_by": "fixed_count", **record.get("method_used", {})}
        rows.append({
            "kernel": record["kernel"], "shape": record["shape"], "layout": record["layout"], "repeat": record["repeat"],
            "n": stats.n, "median_us": stats.median, "min_us": stats.min, "max_us": stats.max,
            "order_key": record["order"]["key"], "method": used["name"], "calls_per_sample": used["launches_per_sample"],
            "cache": used["cache"],
            # None where the file predates the sampler: not measured, which is not the same as zero.
            "disturbed_samples": len(record["disturbed_samples"]) if "disturbed_samples" in record else None,
            "stopped_by": used["stopped_by"], "placements": len(medians),
            # None with one placement: nothing to compare, which is not a spread of zero.
            "placement_spread": relative_range(medians) if len(medians) > 1 else None,
            "sm_clock_before_mhz": _number(record["nvml_before"].get("sm_clock_mhz")),
            "sm_clock_after_mhz": _number(record["nvml_after"].get("sm_clock_mhz")),
            "started_utc": record["started_utc"], "source_sha256": record["source_sha256"]})
    table = pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "order_position"])
    # Where each target ran within its repeat: ascending order key, as the workflow schedules it.
    table["order_position"] = table.groupby("repeat")["order_key"].rank(method="first").astype(int) - 1
    table["disturbed_samples"] = table["disturbed_samples"].astype("Int64")
    return table[COLUMNS].sort_values(["kernel", "shape", "layout", "cache", "repeat"], kind="stable", key=lambda c: (
        c.map(natural_key) if c.name in ("shape", "layout") else c)).reset_index(drop=True)
