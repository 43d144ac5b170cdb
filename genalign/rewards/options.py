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
from typing import Any, TypeVar

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
        raise TypeError(f"unknown option(s) for reward {reward_name!r}: {', '.join(problems)}. "
                        f"Valid: {', '.join(valid) or '(none)'}")
    return options_cls(**kwargs)
