"""`ConfigError`: every problem of a config, reported at once, before anything is built.

Where it fits: `load_config` / `config_from_dict` / `RunPlan.from_config` raise it; the CLI
prints it and exits non-zero. One error carries all problems so a user fixes a recipe in one
pass instead of one crash per typo.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config that cannot run. `problems` holds one self-contained message per problem
    (key, where it was set, how to fix); `str(err)` lists them, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(f"- {p}" for p in self.problems))
