"""Name -> implementation tables with lazy imports.

Where it fits: model families, rewards and algorithms are chosen in config by short name.
Entries are "module:attr" strings so that naming `ocr` never imports CLIP. A name that is not
registered can be a dotted path ("my_pkg.rewards:MyReward"), the escape hatch for user code,
only in a registry built with `dotted_key` (rewards: `reward.allow_import`) and only when the
caller passes it in `allow_import`: importing a module runs its code, so a config that came
from somewhere else (a checkpoint's config.yaml) must never be able to pick one.
Registering a name twice is an error; a miss lists the valid choices.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from genalign.config.errors import UserError


class RegistryError(UserError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class Registry:
    def __init__(self, kind: str, config_key: str, dotted_key: str | None = None):
        self.kind = kind
        """What the entries are, for messages: "reward", "model family"."""
        self.config_key = config_key
        """The config key that selects an entry, for messages: "reward.components"."""
        self.dotted_key = dotted_key
        """The allow-list key under which dotted "module:attr" names are accepted; None: never."""
        self._entries: dict[str, str] = {}

    def register(self, name: str, target: str) -> None:
        """Register `name` -> "module:attr" (imported only when first resolved)."""
        if ":" not in target:
            raise ValueError(f"{self.kind} {name!r}: target {target!r} must look like 'package.module:attr'")
        if name in self._entries and self._entries[name] != target:
            raise RegistryError(
                f"{self.kind} {name!r} is already registered to {self._entries[name]!r}; "
                f"refusing to re-register it to {target!r}"
            )
        self._entries[name] = target

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def check(self, name: str, allow_import: list[str] | tuple[str, ...] = ()) -> str | None:
        """Return an error message for an unknown or not-allowed name, or None when it resolves.

        A dotted path resolves only when this registry takes them and it is in `allow_import`."""
        if name in self._entries:
            return None
        if is_dotted_path(name) and self.dotted_key:
            if name in allow_import:  # never imported here: preflight.files.import_problems checks it
                return None
            return (
                f"{self.config_key}: {name!r} is a Python import path; importing it runs code, so it is "
                f"accepted only when listed in {self.dotted_key} on your own command line or recipe (never "
                f"from a checkpoint), e.g. {self.dotted_key}=[{name}]"
            )
        close = difflib.get_close_matches(name, self.names(), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        dotted = f" (or a dotted path 'package.module:attr' listed in {self.dotted_key})" if self.dotted_key else ""
        return f"{self.config_key}: unknown {self.kind} {name!r}{hint} Valid: {', '.join(self.names())}{dotted}"

    def resolve(self, name: str, allow_import: list[str] | tuple[str, ...] = ()) -> Any:
        message = self.check(name, allow_import)
        if message:
            raise RegistryError(message)
        target = self._entries.get(name, name)
        module_name, attr = target.split(":", 1)
        module = importlib.import_module(module_name)
        try:
            return getattr(module, attr)
        except AttributeError as exc:
            raise RegistryError(f"{self.kind} {name!r}: module {module_name!r} has no attribute {attr!r}") from exc


def import_problem(config_key: str, name: str, expected: type | None = None) -> str | None:
    """Why the allowed dotted path `name` ("package.module:Class") cannot be used, or None:
    its module must import, have the attribute, and the attribute must be a class (or, with
    `expected`, an instance of it: a model family's `FamilySpec`)."""
    module_name, attr = name.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return f"{config_key}: {name!r}: module {module_name!r} cannot be imported ({exc})"
    except Exception as exc:  # noqa: BLE001 - the user's module ran and failed: its error, in one line
        return f"{config_key}: {name!r}: importing module {module_name!r} raised {type(exc).__name__}: {exc}"
    target = getattr(module, attr, None)
    if target is None:
        return f"{config_key}: {name!r}: module {module_name!r} has no attribute {attr!r}"
    if expected is not None:
        if not isinstance(target, expected):
            return f"{config_key}: {name!r} is a {type(target).__name__}, not a {expected.__name__}"
    elif not isinstance(target, type):
        return f"{config_key}: {name!r} is a {type(target).__name__}, not a class"
    return None


def is_dotted_path(name: str) -> bool:
    return ":" in name and all(part.isidentifier() for part in name.replace(":", ".").split("."))
