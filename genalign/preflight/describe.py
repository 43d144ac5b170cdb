"""`genalign config --describe [PREFIX]`: every config key with its type, default, allowed
values and the first line of its docstring.

Where it fits: the keys are the fields of `ExperimentConfig` and the dataclasses under it,
each documented by the string literal under the field (the convention of every config
dataclass here; `field_docs` reads it from the source with `ast`, the way Sphinx reads
attribute docstrings). Allowed values are read from the field's type: a closed set of options
is a `Literal[...]` annotation, which the loader checks a value against, so the help cannot
drift from what a run accepts; a name resolved by a registry (model.family, algorithm.name)
lists the registered names. A test requires a docstring for every key.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from genalign.algorithms.registry import ALGORITHMS
from genalign.config.schema import ExperimentConfig
from genalign.models.registry import MODEL_FAMILIES


@dataclass(frozen=True)
class KeyHelp:
    key: str
    """Dotted config key, e.g. trainer.wandb.mode."""
    type: str
    """The field's type as written in the dataclass (str | None, list[str], ...)."""
    default: Any
    """The dataclass default (before any recipe sets it)."""
    choices: tuple[str, ...]
    """Allowed values where the set is closed; empty otherwise."""
    doc: str
    """The field's docstring (whole); `summary` is its first sentence."""

    @property
    def summary(self) -> str:
        first = " ".join(self.doc.split("\n\n")[0].split())
        end = first.find(". ")
        return first if end < 0 else first[: end + 1]


@cache
def field_docs(cls: type) -> dict[str, str]:
    """{field name: the string literal right under it} for a dataclass, read from its source."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, following in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def registered_names() -> dict[str, tuple[str, ...]]:
    """Keys whose value a registry resolves: its registered names (your own dotted path,
    listed in allow_import, is accepted too, so these are the shipped choices, not all)."""
    return {"model.family": tuple(MODEL_FAMILIES.names()), "algorithm.name": tuple(ALGORITHMS.names())}


def choices_of(hint: Any) -> tuple[Any, ...]:
    """The closed set of values a field's type allows: a `Literal`'s (also inside `X | None` and
    `list[X]`); empty when the set is open (str, float, `float | Literal["auto"]`)."""
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return typing.get_args(hint)
    if origin is list:
        return choices_of(typing.get_args(hint)[0])
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return choices_of(members[0]) if len(members) == 1 else ()
    return ()


def type_text(hint: Any) -> str:
    """A field's type as a user reads it: a `Literal` of strings is `str` (its choices are
    listed beside it), except in a union with another type, where its values are shown
    (`float | 'auto'`)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " | ".join(dict.fromkeys(type(arg).__name__ for arg in args))
    if origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        shown = [
            " | ".join(map(repr, typing.get_args(arg)))
            if typing.get_origin(arg) is typing.Literal and len(members) > 1
            else type_text(arg)
            for arg in members
        ]
        return " | ".join(shown + (["None"] if len(members) < len(args) else []))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_text(arg) for arg in args)}]"
    return "Any" if hint is Any else getattr(hint, "__name__", str(hint))


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def describe_keys(root: type | None = None, prefix: str = "") -> list[KeyHelp]:
    """Every leaf key under `root` (default: ExperimentConfig), in declaration order."""
    if root is None:
        root = ExperimentConfig
    hints = typing.get_type_hints(root)
    docs = field_docs(root)
    registered = registered_names()
    keys: list[KeyHelp] = []
    for field in dataclasses.fields(root):
        key = f"{prefix}{field.name}"
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            keys += describe_keys(hint, f"{key}.")
            continue
        choices = choices_of(hint) or registered.get(key, ())
        keys.append(KeyHelp(key, type_text(hint), _default(field), tuple(choices), docs.get(field.name, "")))
    return keys


def format_keys(keys: list[KeyHelp]) -> str:
    """Per key: `key  (type, default X[; one of: a, b])`, then its docstring's first sentence,
    indented and wrapped at 100 columns."""
    import yaml

    lines = []
    for item in keys:
        default = yaml.safe_dump(item.default, default_flow_style=True, width=10_000).strip()
        default = default.removesuffix("\n...").removesuffix("...").strip()
        extra = f"; one of: {', '.join(item.choices)}" if item.choices else ""
        lines.append(f"{item.key}  ({item.type}, default {default}{extra})")
        lines.append(
            textwrap.fill(item.summary or "(undocumented)", width=100, initial_indent="    ", subsequent_indent="    ")
        )
    return "\n".join(lines)


def describe(prefix: str = "") -> str:
    """The help text of every key equal to `prefix` or under it ("" : all keys); a prefix that
    matches nothing is a ValueError listing the top-level groups."""
    keys = [k for k in describe_keys() if not prefix or k.key == prefix or k.key.startswith(prefix.rstrip(".") + ".")]
    if not keys:
        groups = sorted({k.key.split(".")[0] for k in describe_keys()})
        raise ValueError(
            f"--describe {prefix}: no config key is or starts with {prefix!r}; top-level groups: {', '.join(groups)}"
        )
    return format_keys(keys)
