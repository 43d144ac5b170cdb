"""OmegaConf interpolation in config values and the schema facts `+key=value` checks.

Where it fits: `load_config` composes the YAML layers and the overrides into a plain tree,
then `resolve_interpolations` resolves every `${...}` in it with OmegaConf (`${oc.env:VAR}`,
`${oc.env:VAR,default}`, `${oc.decode:${oc.env:VAR}}` for a number, `${trainer.output_dir}`
for another key), and the typed validator checks the result exactly as if the value had been
written out. A failure is one problem naming the key, the text and where it was set.
A checkpoint's stored config is already resolved and is data: it is never resolved again.

`plus_override_problem` is Hydra's `+key=value` rule on our schema: `+` adds a key that is
not set yet, under an open mapping (a `dict` field such as `reward.components` or
`reward.kwargs`, or anything below a free-form value); a dataclass field always exists, so
`+` on it, or on a name the dataclass does not have, is an error naming the key.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from typing import Any

INTERPOLATION = "${"


def _has_interpolation(value: Any) -> bool:
    if isinstance(value, str):
        return INTERPOLATION in value
    if isinstance(value, dict):
        return any(_has_interpolation(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_interpolation(item) for item in value)
    return False


def resolve_interpolations(tree: dict, provenance: dict[str, str], problems: list[str]) -> dict:
    """`tree` with every `${...}` value resolved by OmegaConf; the unresolvable ones are left as
    written and reported in `problems`. A tree without `${` is returned as is (no import)."""
    if not _has_interpolation(tree):
        return tree
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    def source_of(dotted: str) -> str:
        listed = dotted.split("[")[0]  # a list item's source is the list's
        return (
            provenance.get(dotted)
            or provenance.get(listed)
            or next((v for k, v in provenance.items() if k.startswith(dotted + ".")), "unknown source")
        )

    try:
        conf = OmegaConf.create(tree, flags={"allow_objects": True})
    except OmegaConfBaseException as exc:  # a `${` that is not valid interpolation syntax, usually
        bad = [
            (dotted, raw)
            for dotted, raw in _interpolated_leaves(tree, [])
            if not _parses(OmegaConf, OmegaConfBaseException, raw)
        ]
        problems.extend(
            f"{dotted}: {raw!r} is not a valid ${{...}} interpolation (escape a literal as \\${{...}}; "
            f"set in {source_of(dotted)})"
            for dotted, raw in bad
        )
        if not bad:
            problems.append(f"cannot resolve the ${{...}} interpolations of this config: {str(exc).splitlines()[0]}")
        return tree

    def resolve_leaf(container: Any, key: Any, raw: str, dotted: str) -> Any:
        try:
            value = container[key]
        except OmegaConfBaseException as exc:
            message = str(exc).splitlines()[0].rstrip(".")
            hint = " (give a default: ${oc.env:VAR,default})" if "oc.env" in raw else ""
            problems.append(f"{dotted}: cannot resolve {raw!r}: {message}{hint} (set in {source_of(dotted)})")
            return raw
        if isinstance(value, str) and "oc.env" in raw and "oc.decode" not in raw and _looks_typed(value):
            # a typed key then says "expected int, got '4' (str; ...)": say why and what to write
            provenance[dotted] = (
                f"{source_of(dotted)}; oc.env gives a string, for a number or bool write ${{oc.decode:${{oc.env:VAR}}}}"
            )
        return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value

    def resolve(raw: dict | list, container: Any, path: list) -> dict | list:
        resolved = {}
        for key, value in raw.items() if isinstance(raw, dict) else enumerate(raw):
            if isinstance(value, str) and INTERPOLATION in value:
                resolved[key] = resolve_leaf(container, key, value, _dotted([*path, key]))
            elif isinstance(value, (dict, list)):
                resolved[key] = resolve(value, container[key], [*path, key])
            else:
                resolved[key] = value
        return resolved if isinstance(raw, dict) else list(resolved.values())

    return resolve(tree, conf, [])


def _interpolated_leaves(value: Any, path: list) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [(_dotted(path), value)] if INTERPOLATION in value else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    return [leaf for key, item in items for leaf in _interpolated_leaves(item, [*path, key])]


def _parses(omegaconf, error: type, text: str) -> bool:
    try:
        omegaconf.create({"value": text})
    except error:
        return False
    return True


def _looks_typed(text: str) -> bool:
    """Whether YAML would read `text` as a number or bool (an override's value would be one)."""
    import yaml

    try:
        return isinstance(yaml.safe_load(text), (int, float, bool))
    except yaml.YAMLError:
        return False


def _dotted(path: list) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _unwrap(tp: Any) -> Any:
    """`X | None` -> X (the schema's optional fields)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        return args[0] if len(args) == 1 else Any
    return tp


def plus_override_problem(root: type, key: str, tree: dict, source: str) -> str | None:
    """Why `+key=value` may not be applied to `tree` (None when it may): the key must be new
    and its parent an open mapping of the schema rooted at dataclass `root`."""
    parts = key.split(".")
    if _present(tree, parts):
        return (
            f"override {source}: {key} is already set; `+` only adds a new key, so drop the `+` to change "
            "it (or use ++ to add-or-change)"
        )
    tp: Any = root
    for depth, part in enumerate(parts):
        tp = _unwrap(tp)
        if tp is Any:
            return None  # below a free-form value everything is open
        if typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
            continue
        if dataclasses.is_dataclass(tp):
            names = [field.name for field in dataclasses.fields(tp)]
            here = ".".join(parts[: depth + 1])
            if part not in names:
                close = difflib.get_close_matches(part, names, n=1)
                hint = f"; did you mean {'.'.join([*parts[:depth], close[0]])!r}?" if close else ""
                return (
                    f"override {source}: {here}: unknown key{hint} (`+` adds keys only to open mappings such as "
                    "reward.components and reward.kwargs)"
                )
            if depth == len(parts) - 1:
                return (
                    f"override {source}: {here} is a field of {tp.__name__}, always present; set it with "
                    f"{key}=... (no `+`)"
                )
            tp = typing.get_type_hints(tp)[part]
            continue
        return f"override {source}: {'.'.join(parts[:depth])} has type {getattr(tp, '__name__', tp)}, not a mapping"
    return None


def _present(tree: dict, parts: list[str]) -> bool:
    node: Any = tree
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True
