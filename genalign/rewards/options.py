"""Typed constructor options for scorers: `reward.kwargs.<name>.<key>` -> a dataclass.

Where it fits: `build_reward_runtime` constructs each scorer as `Scorer(device, **kwargs)` with
the user's `reward.kwargs.<name>` mapping. Every scorer declares its options as a dataclass and
parses them here, so a typo is a TypeError that names the exact config key (with a "did you
mean") instead of Python's bare "unexpected keyword argument", and the accepted keys are
documented in one place (the dataclass fields).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import typing
from typing import Any, TypeVar

from genalign.config.loader import _convert
from genalign.rewards.registry import REWARD_OPTIONS

OptionsT = TypeVar("OptionsT")


def parse_options(reward_name: str, options_cls: type[OptionsT], kwargs: dict[str, Any]) -> OptionsT:
    """Build `options_cls(**kwargs)`; an unknown key is a TypeError naming reward.kwargs.<name>.<key>."""
    valid = [f.name for f in dataclasses.fields(options_cls)]
    unknown = [key for key in kwargs if key not in valid]
    if unknown:
        problems = []
        for key in unknown:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"reward.kwargs.{reward_name}.{key}{hint}")
        raise TypeError(
            f"unknown option(s) for reward {reward_name!r}: {', '.join(problems)}. "
            f"Valid: {', '.join(valid) or '(none)'}"
        )
    return options_cls(**kwargs)


def reward_option_problems(cfg) -> list[str]:
    """`reward.kwargs.<name>.<key>` against each registered scorer's options dataclass:
    unknown keys (with a "did you mean") and values of the wrong type. `cfg` is an
    ExperimentConfig: preflight runs this with the other value checks, and `genalign
    serve-reward` on the served scorers' options."""
    problems: list[str] = []
    for name, options in cfg.reward.kwargs.items():
        target = REWARD_OPTIONS.get(name)
        if target is None:  # a dotted-path reward, or a name validate already reports
            continue
        if not isinstance(options, dict):
            problems.append(f"reward.kwargs.{name} must be a mapping of options, got {options!r}")
            continue
        module_name, attr = target.split(":")
        options_cls = getattr(importlib.import_module(module_name), attr)  # scorer modules import no model
        hints = typing.get_type_hints(options_cls)
        valid = [f.name for f in dataclasses.fields(options_cls)]
        for key, value in options.items():
            dotted = f"reward.kwargs.{name}.{key}"
            if key not in valid:
                close = difflib.get_close_matches(str(key), valid, n=1)
                hint = f"; did you mean reward.kwargs.{name}.{close[0]}?" if close else ""
                problems.append(
                    f"{dotted}: unknown option for reward {name!r}{hint} Valid: {', '.join(valid) or '(none)'}"
                )
                continue
            _convert(hints[key], value, dotted, f"reward.kwargs.{name}", problems, {})
    return problems
