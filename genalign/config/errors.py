"""`ConfigError`: every problem of a config, reported at once, before anything is built."""

from __future__ import annotations


class ConfigError(ValueError):
    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(f"- {p}" for p in self.problems))
