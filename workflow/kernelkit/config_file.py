"""Reading a config file strictly: the YAML its author wrote, or one sentence with the line.

PyYAML keeps the last of two equal keys and reads 0x128 as 296; both would pass validation
silently, so this loader refuses the first and remembers how the second was written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kernelkit import KitError


class YamlNumber(int):
    """An integer YAML read from text that does not look like one (0x128, 1_000, 1:30), with that text."""

    source = ""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last silently) and remembers how
    integers written as hex, octal or sexagesimal looked, so that a shape 0x128 can be explained."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = key in first_line
        except TypeError:  # an unhashable key: construct_mapping says so below
            continue
        if seen:
            raise KitError(f"the key '{key}' appears twice in one mapping, at lines {first_line[key]} and "
                           f"{key_node.start_mark.line + 1}; YAML would silently keep only the last")
        first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


def _integer_with_source(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    value = loader.construct_yaml_int(node)
    if node.value.strip() != str(value):
        marked = YamlNumber(value)
        marked.source = node.value
        return marked
    return value


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _integer_with_source)


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content; KitError with the file, and the line and column where YAML can give them."""
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.load(handle, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except FileNotFoundError:
        raise KitError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise KitError(f"config file {path} is a directory, not a YAML file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise KitError(f"config file {path} cannot be read ({type(error).__name__}: {error})") from None
    except KitError as error:
        raise KitError(f"config file {path}: {error}") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise KitError(f"config file {path} is not valid YAML: {error.problem or error.context}{where}") from None
    except yaml.YAMLError as error:
        raise KitError(f"config file {path} is not valid YAML ({' '.join(str(error).split())})") from None
