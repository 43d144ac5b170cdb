"""A checkpoint's stored config, rebuilt as data and checked exactly like a user's.

Where it fits: `genalign eval` and `files.resume_problems` read a checkpoint's config.yaml
through `config_from_checkpoint` before anything is built from it.
"""

from __future__ import annotations

import copy
from typing import Any

from genalign.config.errors import ConfigError
from genalign.config.loader import config_from_dict, without_retired_keys
from genalign.config.schema import ExperimentConfig
from genalign.preflight.validate import validate

ALLOW_IMPORT_BLOCKS = ("reward", "model", "algorithm")
"""The config blocks whose `allow_import` list lets a dotted path to the user's own code be
imported (a reward, a model family, an algorithm): permissions of one invocation, never read
from a checkpoint."""
ALLOW_IMPORT_KEYS = tuple(f"{block}.allow_import" for block in ALLOW_IMPORT_BLOCKS)


def allow_lists(cfg: ExperimentConfig) -> dict[str, list[str]]:
    """Each block's allow-list of `cfg` (the user's own config), by block name."""
    return {block: list(getattr(cfg, block).allow_import) for block in ALLOW_IMPORT_BLOCKS}


def split_allow_overrides(overrides: list[str], source: str) -> tuple[dict[str, list[str]], list[str]]:
    """The user's `<block>.allow_import=[...]` overrides, typed exactly as the config keys, by
    block name; and the other overrides."""
    allowing = [item for item in overrides if item.startswith(tuple(f"{key}=" for key in ALLOW_IMPORT_KEYS))]
    return allow_lists(config_from_dict({}, source, allowing)), [item for item in overrides if item not in allowing]


def config_from_checkpoint(
    data: Any,
    source: str,
    allowed: dict[str, list[str]],
    overrides: list[str] | tuple[str, ...] = (),
    check_machine: bool = True,
) -> ExperimentConfig:
    """A checkpoint's stored config, validated exactly like a user's, as data, never as code.

    A config.yaml can be edited by anyone who hands you a checkpoint, so its own allow-lists
    (`reward.allow_import`, `model.allow_import`, `algorithm.allow_import`) are ignored and
    replaced by `allowed[block]` (the lists on the user's command line or recipe; a block not
    given allows nothing): a dotted path in it imports nothing unless the user allowed it.
    `check_machine=False` skips the resource planning against this machine (a resumed run
    is planned from the user's config; the checkpoint's only has to be sound)."""
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: a config must be a mapping, got {type(data).__name__}"])
    trusted = without_retired_keys(ExperimentConfig, copy.deepcopy(data))  # written before they were retired
    for block in ALLOW_IMPORT_BLOCKS:
        section = trusted.setdefault(block, {})
        if isinstance(section, dict):  # anything else: config_from_dict names the block
            section["allow_import"] = list(allowed.get(block, []))
    config = config_from_dict(trusted, source, overrides)
    problems = validate(config, check_machine=check_machine)
    if problems:
        raise ConfigError([f"{source}: {problem}" for problem in problems])
    return config
