"""Compose YAML layers + command-line overrides into a typed `ExperimentConfig`.

Where it fits: the first thing `genalign train|config` does, through preflight
(`preflight/load.py:load_config` composes here, then runs every check; nothing is built from
an unchecked config). This module only composes and type-checks: it imports nothing above
config/. Layers live under `genalign/configs/`. A layer holds keys at the root
of the experiment tree and may start with a `defaults:` list, written as Hydra users write it:
`- /group/path: option` (e.g. `- /base/algorithm: grpo` -> `configs/base/algorithm/grpo.yaml`;
the leading `/` is optional), `- /group/path/option` (the same entry as one path),
`- override /group/path: option` (swap the option of a group that an included layer chooses,
e.g. a recipe built on a shipped one; the command line's `/group=option` still wins),
`- optional /group/path: option` (skipped when that file does not exist) and `- _self_` (where
the file's own keys merge; default: after every entry, as in Hydra 1.1). Entries apply in
order, recursively. Then overrides apply left to right (last
wins): `a.b.c=value` (value parsed as YAML), `+a.b.c=value` (adds a key that is not set yet
under an open mapping, as in Hydra; `++` adds or changes) and group swaps `/group/path=option`,
which replace the option of that group wherever it appears in the defaults tree. Then every
`${...}` value (`${oc.env:VAR}`, `${oc.env:VAR,default}`, other keys) is resolved by OmegaConf
(`interpolation.py`) before the typed build.

Every leaf remembers which layer file or override set it last, so an unknown key or a wrong
type names the key, where it came from and a "did you mean". All problems are collected
and raised together as one `ConfigError`.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from genalign.config.catalog import CONFIG_ROOT, VALIDATION_KEY, groups, recipes
from genalign.config.errors import ConfigError
from genalign.config.interpolation import plus_override_problem, resolve_interpolations
from genalign.config.safe_yaml import YAMLTooLarge, safe_load_unique, yaml_error_line
from genalign.config.schema import ExperimentConfig
from genalign.rewards.config import REWARD_PATH_OPTIONS

DEFAULT_RECIPE = "experiment/toy/shapes_grpo"


# ------------------------------------------------------------------ composition
@dataclass(frozen=True)
class DefaultsEntry:
    kind: str
    """"group" (`- /group: option`), "optional", "override" or "self" (`- _self_`)."""
    group: str = ""
    option: str = ""


def _defaults_entry(item: Any, where: str, problems: list[str]) -> DefaultsEntry | None:
    """One `defaults:` item as Hydra writes it, or None (a problem recorded) when it is not one."""
    if item == "_self_":
        return DefaultsEntry("self")
    if isinstance(item, str):  # `- /group/path/option`: the last part is the option
        group, _, option = item.strip().strip("/").rpartition("/")
        if group and option and " " not in item.strip():
            return DefaultsEntry("group", "/" + group, option)
    elif isinstance(item, dict) and len(item) == 1:
        key, option = next(iter(item.items()))
        words = str(key).split()
        kind = words[0] if len(words) == 2 and words[0] in ("override", "optional") else "group"
        group = words[-1] if kind != "group" else str(key)
        if option is not None and (kind != "group" or len(words) == 1):
            return DefaultsEntry(kind, "/" + group.strip("/"), str(option))
    problems.append(
        f"{where}: defaults entry {item!r} must look like `- /group/path: option`, `- /group/path/option`, "
        "`- override /group/path: option`, `- optional /group/path: option` or `- _self_`"
    )
    return None


class _Composer:
    def __init__(self, swaps: dict[str, str]):
        self.swaps = swaps
        self.used_swaps: set[str] = set()
        self.file_swaps: dict[str, tuple[str, str]] = {}
        """`override /group: option` entries of the files composed so far: group -> (option, file)."""
        self.used_file_swaps: set[str] = set()
        self.seen_groups: set[str] = set()
        self.tree: dict[str, Any] = {}
        self.provenance: dict[str, str] = {}
        self.problems: list[str] = []

    def compose(self, path: Path, stack: tuple[Path, ...] = ()) -> None:
        if path in stack:
            self.problems.append(f"{_rel(path)}: defaults form a cycle through {[_rel(p) for p in stack]}")
            return
        data = _read_yaml(path, self.problems)
        if data is None:
            return
        data.pop(VALIDATION_KEY, None)  # recipe metadata for help and docs (config/catalog.py), not config
        defaults = data.pop("defaults", []) or []
        if not isinstance(defaults, list):
            self.problems.append(f"{_rel(path)}: `defaults` must be a list of `- /group: option` entries")
            defaults = []
        where = _rel(path)
        entries = [entry for entry in (_defaults_entry(item, where, self.problems) for item in defaults) if entry]
        if sum(entry.kind == "self" for entry in entries) > 1:
            self.problems.append(f"{where}: `_self_` is listed more than once in its defaults")
        for entry in entries:  # a file's `override` entries hold for everything it includes
            if entry.kind == "override":
                self.file_swaps.setdefault(entry.group, (entry.option, where))
        if not any(entry.kind == "self" for entry in entries):
            entries.append(DefaultsEntry("self"))  # Hydra 1.1's default: the file's own keys last
        for entry in entries:
            if entry.kind == "self":
                _merge(self.tree, data, where, "", self.provenance)
            elif entry.kind != "override":
                self.include(entry, path, stack)

    def include(self, entry: "DefaultsEntry", path: Path, stack: tuple[Path, ...]) -> None:
        """Compose the layer a group entry names, with the command line's (else a file's) swap."""
        group, option, where = entry.group, entry.option, _rel(path)
        self.seen_groups.add(group)
        # a swapped-in option that extends another of its group (`fsdp2_8_ranks` names `fsdp2`)
        # keeps that entry: the swap already chose the layer that holds it
        extending = group in self.swaps and _rel(path) == f"{group.strip('/')}/{self.swaps[group]}.yaml"
        if group in self.swaps and not extending:
            option = self.swaps[group]
            self.used_swaps.add(group)
            where = f"command line `{group}={option}`"
        elif group in self.file_swaps:
            option, source = self.file_swaps[group]
            self.used_file_swaps.add(group)
            where = f"{source} `override {group}: {option}`"
        if entry.kind == "optional" and not (CONFIG_ROOT / group.strip("/") / f"{option}.yaml").is_file():
            return
        layer = _group_option_path(group, str(option), self.problems, where=where)
        if layer is not None:
            self.compose(layer, stack + (path,))

    def override(self, key: str, raw_value: str) -> None:
        try:
            value = safe_load_unique(raw_value) if raw_value != "" else ""
        except yaml.YAMLError as exc:
            if isinstance(exc, YAMLTooLarge):
                shown = raw_value if len(raw_value) <= 60 else raw_value[:60] + "..."
                self.problems.append(f"override {key}={shown}: the value is refused ({yaml_error_line(exc)})")
                return
            self.problems.append(
                f"override {key}={raw_value}: the value is not valid YAML ({yaml_error_line(exc)}); "
                f"fix it, or quote it to pass a string: {key}='\"{raw_value}\"'"
            )
            return
        node = self.tree
        parts = key.split(".")
        source = f"command line `{key}={raw_value}`"
        for depth, part in enumerate(parts[:-1]):
            if not isinstance(node.get(part), dict):
                # A scalar (or nothing) becomes a mapping: this override now owns that key.
                node[part] = {}
                _set_provenance(self.provenance, ".".join(parts[: depth + 1]), {}, source)
            node = node[part]
        if value == {} and isinstance(node.get(parts[-1]), dict) and node[parts[-1]]:
            held = ", ".join(map(str, node[parts[-1]]))
            self.problems.append(
                f"override {key}={raw_value}: an empty mapping changes nothing (a mapping override "
                f"merges into {key}, which holds {held}); to turn an entry off set its weight to 0, "
                f"e.g. {key}.{next(iter(node[parts[-1]]))}=0"
            )
            return
        if isinstance(value, dict) and isinstance(node.get(parts[-1]), dict):
            _merge(node[parts[-1]], value, source, key, self.provenance)
        else:
            node[parts[-1]] = value
            _set_provenance(self.provenance, key, value, source)


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(CONFIG_ROOT))
    except ValueError:
        return str(path)


def read_text_file(path: Path) -> str:
    """UTF-8 text of a config file, or a one-line `ConfigError` naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [f"{_rel(path)} is not UTF-8 text ({exc.reason} at byte {exc.start}); re-save it as UTF-8"]
        ) from None
    except IsADirectoryError:
        raise ConfigError([f"{_rel(path)} is a directory, not a YAML file"]) from None
    except OSError as exc:
        raise ConfigError([f"cannot read {_rel(path)} ({exc.strerror})"]) from None


def _read_yaml(path: Path, problems: list[str]) -> dict | None:
    try:
        data = safe_load_unique(read_text_file(path))
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None
    except yaml.YAMLError as exc:
        problems.append(f"{_rel(path)}: not valid YAML ({yaml_error_line(exc)})")
        return None
    if data is None:
        return {}
    if not isinstance(data, dict):
        problems.append(f"{_rel(path)}: a config layer must be a mapping, got {type(data).__name__}")
        return None
    return data


def _group_option_path(group: str, option: str, problems: list[str], where: str) -> Path | None:
    directory = CONFIG_ROOT / group.strip("/")
    path = directory / f"{option}.yaml"
    if path.exists():
        return path
    if not directory.is_dir():
        groups = _known_groups()
        close = difflib.get_close_matches(group, groups, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        problems.append(
            f"{where}: unknown config group {group!r} (no directory {_rel(directory)}){hint} "
            f"Groups: {', '.join(groups)}"
        )
        return None
    options = sorted(p.stem for p in directory.glob("*.yaml"))
    close = difflib.get_close_matches(option, options, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    problems.append(f"{where}: group {group} has no option {option!r}{hint} Options: {', '.join(options)}")
    return None


def _known_groups() -> list[str]:
    """Every directory under configs/ that holds layer files, as `/group/path`."""
    return list(groups(CONFIG_ROOT))


def _set_provenance(provenance: dict[str, str], key: str, value: Any, source: str) -> None:
    for existing in [k for k in provenance if k.startswith(key + ".")]:
        del provenance[existing]
    if isinstance(value, dict):
        for child, child_value in value.items():
            _set_provenance(provenance, f"{key}.{child}", child_value, source)
        if not value:
            provenance[key] = source
    else:
        provenance[key] = source


def _merge(target: dict, incoming: dict, source: str, prefix: str, provenance: dict[str, str]) -> None:
    """Deep-merge `incoming` into `target`: dicts merge, lists and scalars replace."""
    for key, value in incoming.items():
        key = str(key)
        dotted = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value, source, dotted, provenance)
        else:
            target[key] = value
            _set_provenance(provenance, dotted, value, source)


def _recipe_name(path: Path) -> str:
    """A packaged recipe by its name (experiment/toy/shapes_grpo), any other file by its path."""
    relative = _rel(path)
    return relative[:-5] if relative != str(path) and relative.endswith(".yaml") else str(path)


def find_recipe(recipe: str) -> Path:
    """A recipe name under configs/ (with or without .yaml) or a path to a YAML file."""
    as_path = Path(recipe).expanduser()
    if as_path.suffix in (".yaml", ".yml") and as_path.is_file():
        return as_path.resolve()
    if as_path.suffix in (".yaml", ".yml") and (as_path.is_absolute() or as_path.is_dir()):
        what = "is a directory" if as_path.is_dir() else "does not exist"
        raise ConfigError([f"--config {recipe!r}: the YAML file {as_path} {what}"])
    name = recipe[:-5] if recipe.endswith(".yaml") else recipe
    candidate = CONFIG_ROOT / f"{name.strip('/')}.yaml"
    if candidate.is_file():
        return candidate
    known = list(recipes(CONFIG_ROOT))
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    # a suggestion alone when there is one: the full list (now dozens of recipes) would bury it
    listing = (
        f"Did you mean {close[0]!r}? `genalign train --help` lists all {len(known)} recipes"
        if close
        else f"Recipes: {', '.join(known)}"
    )
    raise ConfigError([f"--config {recipe!r}: no recipe {_rel(candidate)} and no such YAML file. {listing}"])


# ------------------------------------------------------------------ typed validation
# Deployment facts live in the environment, never in the experiment tree (docs/architecture.md §4: a
# config must mean the same run on any machine). An unknown key that looks like one says so.
ENVIRONMENT_FACTS = {
    "ray_address": "RAY_ADDRESS",
    "cuda_visible_devices": "CUDA_VISIBLE_DEVICES",
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "local_rank": "LOCAL_RANK",
    "hf_home": "HF_HOME",
    "hf_hub_cache": "HF_HUB_CACHE",
}


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is typing.Literal:
        return " | ".join(repr(choice) for choice in typing.get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(tp: Any, value: Any, key: str, source: str, problems: list[str], provenance: dict[str, str]) -> Any:
    """`value` as schema type `tp`; a value that is not one is a problem naming `key` and its
    `source` (the returned None then lets the dataclass default stand in)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping of {tp.__name__} fields, got {value!r} (set in {source})")
            return tp()
        return _build(tp, value, key, provenance, problems)
    if origin is typing.Literal:
        return _choice(tp, value, key, source, problems)
    if origin in (typing.Union, types.UnionType):
        return _convert_union(tp, value, key, source, problems, provenance)
    if origin is list:
        (item_type,) = typing.get_args(tp)
        if not isinstance(value, list):
            problems.append(f"{key}: expected a list, got {value!r} (set in {source})")
            return []
        return [_convert(item_type, item, f"{key}[{i}]", source, problems, provenance) for i, item in enumerate(value)]
    if origin is dict:
        _, value_type = typing.get_args(tp)
        if not isinstance(value, dict):
            problems.append(f"{key}: expected a mapping, got {value!r} (set in {source})")
            return {}
        return {
            str(k): _convert(value_type, v, f"{key}.{k}", provenance.get(f"{key}.{k}", source), problems, provenance)
            for k, v in value.items()
        }
    return _convert_scalar(tp, value, key, source, problems)


YAML_BOOL_WORDS = {False: ("off", "no", "false", "n"), True: ("on", "yes", "true", "y")}
"""The words YAML 1.1 (PyYAML's safe_load) reads as a bool."""


def _choice(tp: Any, value: Any, key: str, source: str, problems: list[str]) -> Any:
    """A `Literal[...]` field: the value must be one of its choices (the annotation is the one
    place a closed set of options is written; `--describe` lists it from there too)."""
    choices = typing.get_args(tp)
    if any(value == choice and type(value) is type(choice) for choice in choices):  # True is not 1
        return value
    if isinstance(value, bool) and not any(isinstance(choice, bool) for choice in choices):
        # YAML 1.1 reads off/no/false (on/yes/true) as a bool, so `mode: off` or `mode=off`
        # arrives as False: take the choice spelled as one of those words
        spelled = [choice for choice in choices if str(choice).lower() in YAML_BOOL_WORDS[value]]
        if len(spelled) == 1:
            return spelled[0]
    close = difflib.get_close_matches(str(value), [str(choice) for choice in choices], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    problems.append(
        f"{key}={value!r} is not supported (set in {source}){hint} Choose one of: {', '.join(map(str, choices))}"
    )
    return None


def _convert_union(tp: Any, value: Any, key: str, source: str, problems: list[str], provenance: dict[str, str]) -> Any:
    """`X | Y | None`: the first member type the value converts to. A string that no member
    takes, where a member is a `Literal`, gets that Literal's message (its choices)."""
    args = typing.get_args(tp)
    if value is None:
        if type(None) in args:
            return None
        problems.append(f"{key}: must not be null (set in {source})")
        return None
    for arg in (a for a in args if a is not type(None)):
        attempt: list[str] = []
        converted = _convert(arg, value, key, source, attempt, provenance)
        if not attempt:
            return converted
    literal = next((a for a in args if typing.get_origin(a) is typing.Literal), None)
    if literal is not None and isinstance(value, str):
        return _choice(literal, value, key, source, problems)
    problems.append(f"{key}: expected {' | '.join(_type_name(a) for a in args)}, got {value!r} (set in {source})")
    return None


def _convert_scalar(tp: Any, value: Any, key: str, source: str, problems: list[str]) -> Any:
    """bool, int, float (an int or a numeric string is taken) or str, exactly."""
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # PyYAML reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    else:
        raise TypeError(f"config schema: unsupported annotation {tp!r} for {key}")
    problems.append(f"{key}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__}; set in {source})")
    return None


def _build(cls: type, data: dict, prefix: str, provenance: dict[str, str], problems: list[str]) -> Any:
    """Instantiate dataclass `cls` from `data`, appending every unknown key / wrong type to `problems`."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            source = provenance.get(dotted) or next(
                (v for k, v in provenance.items() if k.startswith(dotted + ".")), "unknown source"
            )
            retired = getattr(cls, "RETIRED_KEYS", {}).get(str(key))  # a key this config no longer has: why
            if retired:
                problems.append(f"{dotted}: not a config key (set in {source}): {retired}")
                continue
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f"; did you mean {(prefix + '.' if prefix else '') + close[0]!r}?" if close else ""
            env = ENVIRONMENT_FACTS.get(str(key).lower())
            if env:
                hint += f"; {env} is a deployment fact: set the {env} environment variable, not a config key"
            problems.append(f"{dotted}: unknown key (set in {source}){hint}")
            continue
        source = provenance.get(dotted, "unknown source")
        written_form = getattr(cls, "INPUT_FORMS", {}).get(key)  # a shorthand the config accepts (a scalar list)
        if written_form is not None:
            value = written_form(value)
        kwargs[key] = _convert(hints[key], value, dotted, source, problems, provenance)
    # A None here means the problem was already recorded; the dataclass default stands in.
    return cls(**{k: v for k, v in kwargs.items() if v is not None or _allows_none(hints[k])})


def _allows_none(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


# ------------------------------------------------------------------ public API
def compose_config(recipe: str | None, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Compose `recipe` (default: the CPU demo) with `overrides` into a typed config; raise every
    unknown key, wrong type and bad override together. Types and keys only: the checks across
    keys, files and this machine are preflight's (`preflight/load.py:load_config`)."""
    path = find_recipe(recipe or DEFAULT_RECIPE)
    swaps, dotlist, problems = {}, [], []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            problems.append(f"override {item!r}: expected key=value, +key=value or /group=option")
        elif key.startswith("/"):
            swaps["/" + key.strip("/")] = value
        elif key.lstrip("+").startswith("/") or not key.lstrip("+"):
            problems.append(f"override {item!r}: `+` adds a key (+key=value); a group is swapped with /group=option")
        else:  # "++key": add or change (Hydra); "+key": add a new key to an open mapping
            dotlist.append(
                (
                    key[2:] if key.startswith("++") else key.lstrip("+"),
                    value,
                    key.startswith("+") and not key.startswith("++"),
                )
            )
    composer = _Composer(swaps)
    composer.compose(path)
    for group in sorted(set(composer.file_swaps) - composer.used_file_swaps - set(swaps)):
        option, source = composer.file_swaps[group]
        problems.append(
            f"{source}: `override {group}: {option}` overrides nothing: no included layer chooses an "
            f"option of {group} (Groups: {', '.join(sorted(composer.seen_groups))}); include it with "
            f"`- {group}: {option}` instead"
        )
    for group in sorted(set(swaps) - composer.used_swaps):
        close = difflib.get_close_matches(group, sorted(composer.seen_groups), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        problems.append(
            f"override {group}={swaps[group]}: the recipe has no config group {group}{hint} "
            f"Groups: {', '.join(sorted(composer.seen_groups))}"
        )
    for key, value, adding in dotlist:
        problem = plus_override_problem(ExperimentConfig, key, composer.tree, f"+{key}={value}") if adding else None
        if problem:
            problems.append(problem)
        else:
            composer.override(key, value)
    if "recipe" in composer.tree:
        problems.append(
            f"recipe: set by the loader from --config, not a key to set (set in "
            f"{composer.provenance.get('recipe', 'a layer')}); remove it"
        )
    composer.tree["recipe"] = _recipe_name(path)
    composer.provenance["recipe"] = "--config"
    composer.tree = resolve_interpolations(composer.tree, composer.provenance, problems)
    problems = composer.problems + problems
    config = _build(ExperimentConfig, composer.tree, "", composer.provenance, problems)
    if problems:
        raise ConfigError(list(dict.fromkeys(problems)))  # a group used twice fails the same way twice
    return expand_home(config)


PATH_KEYS = (
    "model.path",
    "data.manifest",
    "data.eval_manifest",
    "data.preference_manifest",
    "data.image_manifest",
    "trainer.output_dir",
    "trainer.resume_from",
)
"""Keys that name a local file or directory: a leading `~` is expanded once, when the config
is built, so every reader and writer sees the same path (a directory literally named `~`
was written while the report expanded it)."""


def expand_home(config: ExperimentConfig) -> ExperimentConfig:
    """Expand a leading `~` / `~user` in PATH_KEYS and in the reward options that name files."""

    def expanded(value: Any) -> Any:
        return os.path.expanduser(value) if isinstance(value, str) and value.startswith("~") else value

    for key in PATH_KEYS:
        group, name = key.split(".")
        section = getattr(config, group)
        setattr(section, name, expanded(getattr(section, name)))
    for reward, option in REWARD_PATH_OPTIONS.items():
        options = config.reward.kwargs.get(reward)
        if isinstance(options, dict) and option in options:
            options[option] = expanded(options[option])
    return config


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """The dataclass tree as plain dicts/lists/scalars (what checkpoints store)."""
    return dataclasses.asdict(cfg)


def config_to_yaml(cfg: Any) -> str:
    """The fully composed config as YAML in schema field order (`genalign config` prints it)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)


def config_from_dict(
    data: dict, source: str = "<dict>", overrides: list[str] | tuple[str, ...] = ()
) -> ExperimentConfig:
    """Strictly rebuild a config from a plain dict (e.g. a checkpoint's config.yaml), then apply
    `key=value` overrides exactly as `compose_config` does. Types and keys only: cross-field
    validation (`validate`) is the caller's."""
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: a config must be a mapping, got {type(data).__name__}"])
    composer = _Composer({})
    composer.tree = copy.deepcopy(data)
    for key, value in data.items():
        _set_provenance(composer.provenance, str(key), value, source)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key or key.startswith("/"):
            composer.problems.append(f"override {item!r}: expected key=value")
        else:
            composer.override(key, value)
    problems = list(composer.problems)
    config = _build(ExperimentConfig, composer.tree, "", composer.provenance, problems)
    if problems:
        raise ConfigError(problems)
    return expand_home(config)


def without_retired_keys(cls: type, data: Any) -> Any:
    """`data` less the keys a config dataclass retired (`RETIRED_KEYS`), at every depth: they
    never did anything, so a checkpoint's config that still lists them loads as it was."""
    if not isinstance(data, dict) or not dataclasses.is_dataclass(cls):
        return data
    hints, retired = typing.get_type_hints(cls), getattr(cls, "RETIRED_KEYS", {})
    return {key: without_retired_keys(hints.get(key), value) for key, value in data.items() if key not in retired}


def diff_configs(a: dict, b: dict, keys: list[str] | None = None) -> list[str]:
    """Dotted keys whose values differ between two config dicts, sorted.

    `keys` limits the answer to those keys and everything under them (e.g. the keys a resume
    must not change). A key present on one side only differs, even if the other side's
    value would be None.
    """
    missing = object()
    differing: list[str] = []

    def walk(x: Any, y: Any, prefix: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y), key=str):
                walk(x.get(key, missing), y.get(key, missing), f"{prefix}.{key}" if prefix else str(key))
        elif x != y:
            differing.append(prefix)

    walk(a, b, "")
    if keys is not None:
        differing = [d for d in differing if any(d == k or d.startswith(k + ".") for k in keys)]
    return differing
