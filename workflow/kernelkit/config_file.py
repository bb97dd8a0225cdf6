"""Reading a config file strictly, or one sentence with the line (PyYAML keeps the last of two
equal keys and reads 0x128 as 296, both silently); and the schema, which holds every default
(read here, so that a module needing one default does not import the whole validation).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

from kernelkit import KitError

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "config.schema.yaml"


@functools.cache
def schema() -> dict[str, Any]:
    # libyaml's loader where PyYAML has it: every job reads the schema, and it parses in 2 ms instead of 15.
    return yaml.load(SCHEMA_PATH.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def schema_default(*path: str) -> Any:
    """The schema's default of one key, e.g. schema_default("timing", "stop", "max_seconds")."""
    node = schema()
    for part in path:
        node = node["properties"][part]
    return node["default"]


class YamlNumber(int):
    """An integer YAML read from text that does not look like one (0x128, 1_000, 1:30), with that text."""

    source = ""


# A config is a few hundred lines: bounds checked while it is composed, so that an alias bomb or a
# list 2,000 deep is refused within a second, before anything walks it.
MAX_ALIASES = 100
MAX_DEPTH = 50
# Nodes the document holds once every alias is expanded (the default config has about 300).
MAX_NODES = 100_000
MAX_CONFIG_BYTES = 1024 * 1024


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, more than MAX_ALIASES aliases and nesting deeper
    than MAX_DEPTH, and remembers how integers written as hex, octal or sexagesimal looked."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise KitError(f"more than {MAX_ALIASES} aliases (*name) at line {mark.line + 1}; a config needs few, "
                               "and this many can expand to more than memory holds")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise KitError(f"nesting deeper than {MAX_DEPTH} levels at line {mark.line + 1}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


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
    if node.value.strip() == str(value):
        return value
    marked = YamlNumber(value)
    marked.source = node.value
    return marked


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _integer_with_source)


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes `node` stands for with every alias expanded; each distinct node (an alias is
    the same object) is counted once, so the count costs only the nodes written."""
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a node that contains itself counts once, not forever
        if isinstance(node, yaml.SequenceNode):
            sizes[id(node)] += sum(_expanded_size(child, sizes) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            sizes[id(node)] += sum(_expanded_size(key, sizes) + _expanded_size(value, sizes) for key, value in node.value)
        sizes[id(node)] = min(sizes[id(node)], MAX_NODES + 1)
    return sizes[id(node)]


def read_yaml(path: str | Path) -> Any:
    """A YAML file's content; KitError with the file, and the line and column where YAML can give them."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_CONFIG_BYTES + 1)
        if len(text) > MAX_CONFIG_BYTES:
            raise KitError(f"config file {path} is larger than {MAX_CONFIG_BYTES} bytes; a config is a few hundred lines")
        loader = _StrictLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            if _expanded_size(node, {}) > MAX_NODES:
                raise KitError(f"config file {path} expands to more than {MAX_NODES} values through its aliases "
                               "(*name); a config holds a few hundred")
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except FileNotFoundError:
        raise KitError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise KitError(f"config file {path} is a directory, not a YAML file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise KitError(f"config file {path} cannot be read ({type(error).__name__}: {error})") from None
    except KitError as error:
        if str(error).startswith(f"config file {path}"):
            raise
        raise KitError(f"config file {path}: {error}") from None
    except RecursionError:
        raise KitError(f"config file {path} nests deeper than {MAX_DEPTH} levels") from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise KitError(f"config file {path} is not valid YAML: {error.problem or error.context}{where}") from None
    except yaml.YAMLError as error:
        raise KitError(f"config file {path} is not valid YAML ({' '.join(str(error).split())})") from None
