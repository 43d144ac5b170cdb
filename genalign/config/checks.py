"""The wording of the range checks config blocks share.

Where it fits: each config block's `problems()` (beside its fields, in the package's
`config.py`) lists what is wrong with its own values; `preflight/validate.py` collects them
with the checks across blocks. One wording per kind of rule, so `genalign config` reads alike
whatever block a key is in.
"""

from __future__ import annotations


def positive_problems(sizes: dict[str, float]) -> list[str]:
    """`key must be positive, got value` for each size that is 0 or below."""
    return [f"{key} must be positive, got {value}" for key, value in sizes.items() if value <= 0]


def non_negative_problems(values: dict[str, float], meaning: str = "") -> list[str]:
    """`key must be >= 0 ..., got value` for each negative value; `meaning` says what 0 does."""
    return [f"{key} must be >= 0{meaning}, got {value}" for key, value in values.items() if value < 0]


def empty_path_problems(paths: dict[str, str]) -> list[str]:
    """A path that is empty or blank: "" is the working directory to pathlib, never what was meant."""
    return [f"{key} is empty; set it to a path" for key, value in paths.items() if not value.strip()]
