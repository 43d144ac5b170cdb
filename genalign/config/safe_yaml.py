"""YAML as genalign reads it: safe (no tags), no duplicate keys, and bounded.

Where it fits: every YAML text genalign parses goes through `safe_load_unique` — recipe
layers, `--config` files, the value of each `key=value` override, a checkpoint's and a run
directory's `config.yaml`. A file handed to you must not be able to run code (SafeLoader),
silently drop a block (duplicate keys) or exhaust memory (aliases nested in aliases, a huge
or deeply nested document): each is a `yaml.YAMLError` whose `yaml_error_line` is one line.
"""

from __future__ import annotations

from typing import Any

import yaml


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a key repeated in one mapping: PyYAML keeps the last
    one, which silently drops a whole earlier block of a config file."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (also at line {seen[key].line + 1}; merge the two)",
                    key_node.start_mark,
                )
            if isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


MAX_YAML_CHARS = 1_000_000
"""The largest YAML text genalign reads (a recipe or a checkpoint's config.yaml is a few KB)."""
MAX_YAML_NODES = 100_000
"""The most values a YAML document may expand to, aliases counted at every use: a 2 KB file of
nested aliases ("billion laughs") otherwise expands to 10^9 strings when it is walked."""


class YAMLTooLarge(yaml.YAMLError):
    """A YAML text over MAX_YAML_CHARS, expanding past MAX_YAML_NODES, or nested too deep."""


def _expanded_size(root: yaml.Node) -> int:
    """How many nodes `root` stands for with every alias expanded (memoised, so a shared node
    is counted once per use without being walked again); refuses a node that contains itself."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise YAMLTooLarge("an alias refers to a node that contains it (a recursive structure)")
        open_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(key) + size(value) for key, value in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(item) for item in node.value)
        else:
            total = 1
        open_nodes.discard(id(node))
        if total > MAX_YAML_NODES:
            raise YAMLTooLarge(
                f"it expands to more than {MAX_YAML_NODES} values (aliases nested inside aliases); "
                "write the values out instead"
            )
        sizes[id(node)] = total
        return total

    return size(root)


def safe_load_unique(text: str) -> Any:
    """`yaml.safe_load` that raises on duplicate mapping keys (config files, checkpoint configs),
    bounded: over MAX_YAML_CHARS characters, MAX_YAML_NODES expanded values or Python's
    nesting depth it raises `YAMLTooLarge` (a `yaml.YAMLError`) before building anything."""
    if len(text) > MAX_YAML_CHARS:
        raise YAMLTooLarge(f"it is {len(text)} characters long, over the {MAX_YAML_CHARS} a config may have")
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YAMLTooLarge("it is nested too deeply") from None
    finally:
        loader.dispose()


def yaml_error_line(exc: yaml.YAMLError) -> str:
    """A YAML error in one line: "<problem> at line L, column C" (PyYAML's own text spans
    several lines and quotes the source)."""
    if isinstance(exc, YAMLTooLarge):
        return str(exc)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = exc.problem or exc.context or "syntax error"
        return f"{what}{where}"
    return str(exc).replace("\n", " ")
