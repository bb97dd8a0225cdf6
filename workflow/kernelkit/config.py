"""The workflow's configuration: validation with one-sentence errors, and the target plan.

The Snakefile and the command line both go through `validate`, so a bad key is reported
the same way wherever it is found, before any GPU work starts.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kernelkit import KitError, spec as specs

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"


def load(path: str | Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle)
    except FileNotFoundError:
        raise KitError(f"config file {path} does not exist") from None
    except yaml.YAMLError as error:
        raise KitError(f"config file {path} is not valid YAML ({error})") from None
    return validate(config if config is not None else {})


def validate(config: Any, kernels_root: Path | None = None) -> dict[str, Any]:
    """Return the config unchanged, or raise KitError naming the bad key and what is allowed."""
    import jsonschema

    schema = yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise KitError(_sentence(errors[0], schema))
    _check_against_specs(config, kernels_root)
    return config


def _key(path: Any) -> str:
    return ".".join(str(part) for part in path) or "(top level)"


def _description(schema: dict[str, Any], path: list[Any]) -> str:
    """The description of the schema node at `path`, or of its nearest described ancestor."""
    node, found = schema, schema.get("description", "see config/README.md")
    for part in path:
        if node.get("type") == "array":
            node = node.get("items", {})
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        else:
            extra = node.get("additionalProperties")
            node = extra if isinstance(extra, dict) else {}
        found = node.get("description", found)
    return found


def _sentence(error: Any, schema: dict[str, Any]) -> str:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return (
            f"config key '{_key(path + [extra[0]])}' is not known; "
            f"allowed keys{' under ' + repr(_key(path)) if path else ''}: {', '.join(allowed)}"
        )
    if error.validator == "required":
        missing = next(key for key in error.validator_value if key not in error.instance)
        description = _description(schema, path + [missing])
        return f"config key '{_key(path + [missing])}' is missing; it must be {description}"
    return f"config key '{_key(path)}' must be {_description(schema, path)}, not {error.instance!r}"


def _check_against_specs(config: dict[str, Any], kernels_root: Path | None) -> None:
    known = specs.available(kernels_root)
    for kernel, entry in config["kernels"].items():
        if kernel == "clocks":
            raise KitError("config key 'kernels.clocks' is reserved: reports/<run>/figures/clocks.svg is the clock figure")
        if kernel not in known:
            raise KitError(f"config key 'kernels.{kernel}' names no kernel folder; allowed: {', '.join(known) or '(none)'}")
        spec = specs.load(kernel, kernels_root)
        for layout in entry["layouts"]:
            if layout not in spec.all_layouts:
                raise KitError(
                    f"config key 'kernels.{kernel}.layouts' lists '{layout}', which {kernel} does not define; "
                    f"allowed: {', '.join(spec.all_layouts)}"
                )
        for shape in entry["shapes"]:
            try:
                spec.parse_shape(shape)
            except KitError as error:
                raise KitError(f"config key 'kernels.{kernel}.shapes': {error}") from None
    span_repeats = config.get("span", {}).get("repeats", 1)
    if span_repeats > config["timing"]["repeats"]:
        raise KitError(
            f"config key 'span.repeats' is {span_repeats}; it must be at most timing.repeats ({config['timing']['repeats']}), "
            "because span repeat n runs after the timed targets of repeat n"
        )
    for kernel in config.get("span", {}).get("kernels", []):
        if kernel not in config["kernels"]:
            raise KitError(
                f"config key 'span.kernels' names '{kernel}', which is not configured; allowed: {', '.join(config['kernels'])}"
            )
    for index, hypothesis in enumerate(config.get("hypotheses", [])):
        kernel = hypothesis["kernel"]
        if kernel not in config["kernels"]:
            raise KitError(
                f"config key 'hypotheses.{index}.kernel' names '{kernel}', which is not configured; "
                f"allowed: {', '.join(config['kernels'])}"
            )
        for side in ("faster", "slower"):
            if hypothesis[side] not in config["kernels"][kernel]["layouts"]:
                raise KitError(
                    f"config key 'hypotheses.{index}.{side}' names layout '{hypothesis[side]}'; "
                    f"allowed: {', '.join(config['kernels'][kernel]['layouts'])}"
                )


@dataclass(frozen=True)
class TimedTarget:
    kernel: str
    shape: str
    layout: str
    repeat: int
    order_key: int
    cache: str = "warm"

    @property
    def key(self) -> tuple[str, str, str, int, str]:
        return (self.kernel, self.shape, self.layout, self.repeat, self.cache)

    def priority(self, repeats: int) -> int:
        """Snakemake priority: every target of repeat r before any of repeat r+1, then by order key."""
        return (repeats - self.repeat) * 2**32 + (2**32 - 1 - self.order_key)


def configurations(config: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (kernel, shape, layout)
        for kernel, entry in config["kernels"].items()
        for shape in entry["shapes"]
        for layout in entry["layouts"]
    ]


def span_kernels(config: dict[str, Any]) -> list[str]:
    """Kernels with span targets: `span.kernels`, else every configured kernel; none without `span`."""
    if "span" not in config:
        return []
    return list(config["span"].get("kernels", config["kernels"]))


def caches(config: dict[str, Any]) -> list[str]:
    """The cache states timed: `timing.cache` warm (default), cold or both."""
    return {"warm": ["warm"], "cold": ["cold"], "both": ["warm", "cold"]}[config["timing"].get("cache", "warm")]


def order_key(seed: int, repeat: int, kernel: str, shape: str, layout: str, cache: str = "warm") -> int:
    """A seeded pseudo-random key; within a repeat, targets run in ascending key order.

    A key per target (rather than a shuffled list) keeps each target's place stable when
    other configurations are added, and gives every repeat its own order, so that slow
    drift lands on different layouts in different repeats instead of always favouring
    whichever runs first.
    """
    suffix = "" if cache == "warm" else f"/{cache}"  # warm keys are those of runs made before cold existed
    return zlib.crc32(f"{seed}/{repeat}/{kernel}/{shape}/{layout}{suffix}".encode())


def timing_plan(config: dict[str, Any]) -> list[TimedTarget]:
    """Every timed target in the order the workflow runs them: repeats in turn, each shuffled."""
    seed = config["timing"]["order_seed"]
    plan = []
    for repeat in range(1, config["timing"]["repeats"] + 1):
        targets = [TimedTarget(k, s, l, repeat, order_key(seed, repeat, k, s, l, c), c)
                   for k, s, l in configurations(config) for c in caches(config)]
        plan += sorted(targets, key=lambda t: t.order_key)
    return plan
