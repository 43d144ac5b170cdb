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


def config_from_checkpoint(data: Any, source: str, allow_import: list[str], overrides: list[str] | tuple[str, ...] = (),
                           check_machine: bool = True, model_allow_import: list[str] | tuple[str, ...] = ()
                           ) -> ExperimentConfig:
    """A checkpoint's stored config, validated exactly like a user's, as data, never as code.

    A config.yaml can be edited by anyone who hands you a checkpoint, so its own
    `reward.allow_import` is ignored and replaced by `allow_import` (the list on the user's
    command line or recipe): a dotted reward path in it imports nothing unless the user allowed
    it; its `model.allow_import` likewise by `model_allow_import` (a user's model family).
    `check_machine=False` skips the resource planning against this machine (a resumed run
    is planned from the user's config; the checkpoint's only has to be sound)."""
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: a config must be a mapping, got {type(data).__name__}"])
    trusted = without_retired_keys(ExperimentConfig, copy.deepcopy(data))  # written before they were retired
    if isinstance(trusted.get("reward"), dict):
        trusted["reward"]["allow_import"] = list(allow_import)
    if isinstance(trusted.get("model"), dict):
        trusted["model"]["allow_import"] = list(model_allow_import)
    config = config_from_dict(trusted, source, overrides)
    problems = validate(config, check_machine=check_machine)
    if problems:
        raise ConfigError([f"{source}: {problem}" for problem in problems])
    return config
