"""`genalign config --describe [PREFIX]`: every config key with its type, default, allowed
values and the first line of its docstring.

Where it fits: the keys are the fields of `ExperimentConfig` and the dataclasses under it,
each documented by the string literal under the field (the convention of every config
dataclass here; `field_docs` reads it from the source with `ast`, the way Sphinx reads
attribute docstrings). Allowed values come from the same tables `validate` checks against, so
the help cannot drift from what a run accepts. A test requires a docstring for every key.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any


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
        return first if end < 0 else first[:end + 1]


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
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def allowed_values() -> dict[str, tuple[str, ...]]:
    """Dotted key -> the closed set of values `validate` accepts for it."""
    from genalign.algorithms.registry import ALGORITHMS
    from genalign.preflight.validate import CHOICES
    from genalign.models.registry import MODEL_FAMILIES
    from genalign.tracking.config import LOGGERS, WANDB_MODES

    return {**CHOICES, "model.family": tuple(MODEL_FAMILIES.names()), "algorithm.name": tuple(ALGORITHMS.names()),
            "trainer.loggers": LOGGERS, "trainer.wandb.mode": WANDB_MODES}


def _type_name(hint: Any) -> str:
    text = hint if isinstance(hint, str) else getattr(hint, "__name__", None) or repr(hint)
    return str(text).replace("typing.", "")


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def describe_keys(root: type | None = None, prefix: str = "") -> list[KeyHelp]:
    """Every leaf key under `root` (default: ExperimentConfig), in declaration order."""
    if root is None:
        from genalign.config.schema import ExperimentConfig

        root = ExperimentConfig
    hints = typing.get_type_hints(root)
    docs = field_docs(root)
    choices = allowed_values()
    keys: list[KeyHelp] = []
    for field in dataclasses.fields(root):
        key = f"{prefix}{field.name}"
        hint = hints[field.name]
        if dataclasses.is_dataclass(hint):
            keys += describe_keys(hint, f"{key}.")
            continue
        keys.append(KeyHelp(key, _type_name(field.type), _default(field), tuple(choices.get(key, ())),
                            docs.get(field.name, "")))
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
        lines.append(textwrap.fill(item.summary or "(undocumented)", width=100, initial_indent="    ",
                                   subsequent_indent="    "))
    return "\n".join(lines)


def describe(prefix: str = "") -> str:
    """The help text of every key equal to `prefix` or under it ("" : all keys); a prefix that
    matches nothing is a ValueError listing the top-level groups."""
    keys = [k for k in describe_keys() if not prefix or k.key == prefix or k.key.startswith(prefix.rstrip(".") + ".")]
    if not keys:
        groups = sorted({k.key.split(".")[0] for k in describe_keys()})
        raise ValueError(f"--describe {prefix}: no config key is or starts with {prefix!r}; "
                         f"top-level groups: {', '.join(groups)}")
    return format_keys(keys)
