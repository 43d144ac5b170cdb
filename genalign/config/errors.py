"""User errors: mistakes in a config, a file or a command line, as opposed to bugs.

Where it fits: `load_config` / `config_from_dict` / `RunPlan.from_config` raise `ConfigError`;
manifests (`ManifestError`), checkpoints (`CheckpointError`) and resume (`ResumeError`)
derive from the same `UserError`. The CLI's one top-level handler prints a `UserError` as one
readable line (plus an optional `hint:` line) and exits 2; any other exception is a bug and
keeps its traceback. One `ConfigError` carries all problems so a user fixes a recipe in one
pass instead of one crash per typo.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix: the message says what, where, and how. `hint` is an
    optional second line (e.g. the command that would fix it)."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class ConfigError(UserError, ValueError):
    """A config that cannot run. `problems` holds one self-contained message per problem
    (key, where it was set, how to fix); `str(err)` lists them, one per line."""

    def __init__(self, problems: list[str], hint: str | None = None):
        self.problems = list(problems)
        super().__init__("\n".join(f"- {p}" for p in self.problems), hint)
