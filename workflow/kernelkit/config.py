"""The workflow's configuration: the Snakefile and the command line both go through `validate`, so a
bad key gets the same one sentence wherever it is found, and both see the schema's defaults filled in."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from kernelkit import KitError, spec as specs, sweeps
from kernelkit.config_file import YamlNumber, read_yaml, schema, schema_default
from kernelkit.records import write_json_atomic
from kernelkit.shape_bounds import check_bounds


def load(path: str | Path) -> dict[str, Any]:
    config = read_yaml(path)
    return validate(config if config is not None else {})


def _check_schema(instance: Any, node: dict[str, Any]) -> None:
    """KitError with the first error of Draft 2020-12 that fills in each absent property's `default`
    before it checks it, 'integer' meaning an int (else `samples: 15.0` fails every timing job)."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def properties_with_defaults(validator: Any, properties: dict[str, Any], instance: Any,
                                 node: dict[str, Any]) -> Iterator[Any]:
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema:
                    instance.setdefault(name, copy.deepcopy(subschema["default"]))
        yield from check_properties(validator, properties, instance, node)

    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _, instance: isinstance(instance, int) and not isinstance(instance, bool))
    validator = jsonschema.validators.extend(base, {"properties": properties_with_defaults}, type_checker=checker)
    errors = sorted(validator(node).iter_errors(instance),
                    key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise KitError(_sentence(errors[0], node))


def validate(config: Any, kernels_root: Path | None = None) -> dict[str, Any]:
    """A copy of the config with the schema's defaults filled in, or KitError naming the bad key."""
    _check_control_characters(config, [])
    config = copy.deepcopy(config)
    _check_schema(config, schema())
    _check_against_specs(config, kernels_root)
    return config


class StageSettings:
    """Base of each stage's settings, handed to its rule as one JSON param of the config keys in
    SECTIONS, so that Snakemake reruns exactly the targets whose settings changed."""

    SECTIONS: ClassVar[Mapping[str, Sequence[str]]]

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Any:
        raise NotImplementedError

    @classmethod
    def json_from_config(cls, config: Mapping[str, Any]) -> str:
        """The rule's one settings param: the keys the stage uses, out of the validated config."""
        return json.dumps({section: {key: config[section][key] for key in keys if key in config[section]}
                           for section, keys in cls.SECTIONS.items()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Any:
        """What the stage's command builds from its --settings argument, checked against the whole
        config's schema cut to the stage's slice (defaults filled in, no key outside the slice)."""
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as error:
            raise KitError(f"--settings is not valid JSON ({error.msg})") from None
        whole = schema()
        # A section whose every key has a default (gpu_lock) may be left out, like in the config.
        required = [section for section in cls.SECTIONS if whole["properties"][section].get("default") != {}]
        node: dict[str, Any] = {"type": "object", "additionalProperties": False, "required": required,
                                "description": f"a mapping with the keys {', '.join(cls.SECTIONS)}", "properties": {}}
        for section, keys in cls.SECTIONS.items():
            part = copy.deepcopy(whole["properties"][section])
            part["properties"] = {key: value for key, value in part["properties"].items() if key in keys}
            part["required"] = [key for key in part.get("required", []) if key in keys]
            if section in required:
                part.pop("default", None)
            node["properties"][section] = part
        _check_schema(payload, node)
        return cls.from_config(payload)


def add_settings_argument(parser: argparse.ArgumentParser, sections: Mapping[str, Sequence[str]]) -> None:
    keys = "; ".join(f"{section}: {', '.join(keys)}" for section, keys in sections.items())
    parser.add_argument("--settings", required=True,
                        help=f"the stage's settings as JSON, a slice of the validated config ({keys}); "
                             "config/README.md explains each key")


def _check_control_characters(node: Any, path: list[Any]) -> None:
    """Names may not hold a control character. The schema's patterns cannot say so: in re.search
    '$' also matches before a final newline, and `run: "local\\n"` would make results/local<newline>/."""
    if path[-1:] == ["statement"]:
        return  # a hypothesis statement is prose, and YAML's folded text ends in a newline
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, value in items:
        for text in (key, value):
            if isinstance(text, str) and any(ord(c) < 32 or ord(c) == 127 for c in text):
                shown = _key(path + [key]).encode("unicode_escape").decode("ascii")
                raise KitError(f"config key '{shown}' holds {text!r}, with a newline or other control "
                               "character; names are plain text on one line")
        _check_control_characters(value, path + [key])


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
    """One sentence: the key, and what the schema allows there."""
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return (f"config key '{_key(path + [extra[0]])}' is not known; "
                f"allowed keys{' under ' + repr(_key(path)) if path else ''}: {', '.join(allowed)}")
    if error.validator == "required":
        missing = next(key for key in error.validator_value if key not in error.instance)
        return f"config key '{_key(path + [missing])}' is missing; it must be {_description(schema, path + [missing])}"
    instance = error.instance
    if isinstance(instance, YamlNumber) or (isinstance(instance, int) and path[-2:-1] == ["shapes"]):
        shape = path[-2:-1] == ["shapes"]
        advice = "write shapes as quoted strings like '512x128'" if shape else "write it in quotes"
        if not isinstance(instance, YamlNumber):  # parsed by Snakemake: how it was written is lost
            return (f"config key '{_key(path)}' is the number {instance}: YAML reads some unquoted text as numbers "
                    f"(0x128 as the hex number 296); {advice}")
        return (f"config key '{_key(path)}': {'shape ' if shape else ''}{instance.source} was read by YAML as the "
                f"number {int(instance)}; {advice}")
    hint = " (write it without a decimal point)" if isinstance(instance, float) and instance.is_integer() else ""
    return f"config key '{_key(path)}' must be {_description(schema, path)}, not {instance!r}{hint}"


def _check_against_specs(config: dict[str, Any], kernels_root: Path | None) -> None:
    known, configured = specs.available(kernels_root), ", ".join(config["kernels"])
    for kernel, entry in config["kernels"].items():
        if kernel == "clocks":
            raise KitError("config key 'kernels.clocks' is reserved: reports/<run>/figures/clocks.svg is the clock figure")
        if kernel not in known:
            raise KitError(f"config key 'kernels.{kernel}' names no kernel folder; allowed: {', '.join(known) or '(none)'}")
        spec = specs.load(kernel, kernels_root)
        for layout in entry["layouts"]:
            if layout not in spec.all_layouts:
                raise KitError(f"config key 'kernels.{kernel}.layouts' lists '{layout}', which {kernel} does not "
                               f"define; allowed: {', '.join(spec.all_layouts)}")
        for index, shape in enumerate(entry["shapes"]):
            try:
                check_bounds(spec, spec.parse_shape(shape))
            except KitError as error:
                raise KitError(f"config key 'kernels.{kernel}.shapes.{index}': {error}") from None
        sweeps.check_config(kernel, entry, spec)
    span_repeats = config.get("span", {}).get("repeats", 1)  # no span: nothing to check
    if span_repeats > config["timing"]["repeats"]:
        raise KitError(f"config key 'span.repeats' is {span_repeats}; it must be at most timing.repeats ("
                       f"{config['timing']['repeats']}), because span repeat n runs after the timed targets of repeat n")
    def must_be_configured(key: str, kernel: str) -> None:
        if kernel not in config["kernels"]:
            raise KitError(f"config key '{key}' names '{kernel}', which is not configured; allowed: {configured}")

    for kernel in config.get("span", {}).get("kernels", []):
        must_be_configured("span.kernels", kernel)
    for index, hypothesis in enumerate(config.get("hypotheses", [])):
        must_be_configured(f"hypotheses.{index}.kernel", hypothesis["kernel"])
        allowed = config["kernels"][hypothesis["kernel"]]["layouts"]
        for side in ("faster", "slower"):
            if hypothesis[side] not in allowed:
                raise KitError(f"config key 'hypotheses.{index}.{side}' names layout '{hypothesis[side]}'; "
                               f"allowed: {', '.join(allowed)}")


def kernel_layouts(config: Mapping[str, Any], kernel: str) -> list[str]:
    """A kernel's configured layouts, then the valid points of its selected sweeps (file-safe names)."""
    entry = config["kernels"][kernel]
    return sweeps.layouts(specs.load(kernel), entry) if entry.get("sweeps") else list(entry["layouts"])


def caches(config: dict[str, Any]) -> list[str]:
    """The cache states timed: `timing.cache` warm, cold or both. A run's config.json written before
    defaults were filled in may lack the key; the schema's default applies then too."""
    chosen = config["timing"].get("cache", schema_default("timing", "cache"))
    return {"warm": ["warm"], "cold": ["cold"], "both": ["warm", "cold"]}[chosen]


def cmd_check_config(args: argparse.Namespace) -> int:
    try:
        load(args.config)
    except KitError as error:
        if str(error).startswith("config file "):
            raise
        raise KitError(f"config file {args.config}: {error}") from None
    print(f"{args.config}: valid")
    return 0


def cmd_write_config(args: argparse.Namespace) -> int:
    try:
        given = json.loads(args.json)
    except json.JSONDecodeError as error:
        raise KitError(f"--json is not valid JSON ({error.msg})") from None
    write_json_atomic(args.output, validate(given))
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("check-config", help="validate a config file and exit")
    p.add_argument("config", nargs="?", default="config/config.yaml", help="the config file (YAML) to check")
    p.set_defaults(func=cmd_check_config)

    p = subparsers.add_parser("write-config", help="validate a config given as JSON and store it with the run")
    p.add_argument("--json", required=True, help="the whole config as one JSON text")
    p.add_argument("--output", required=True, help="where to write the validated config (JSON)")
    p.set_defaults(func=cmd_write_config)
