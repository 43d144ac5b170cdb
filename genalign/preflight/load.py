"""Load a config and run every check on it: the entry point from a command to a checked run.

Where it fits: `genalign train|config` and the tests call `load_config` (a checkpoint's stored
config goes through `stored_config.py` instead). Composing and type-checking is
config/loader.py's; the checks across keys (`validate.py`) and of the files, checkpoint and run
directory the config names (`files.py`) are this package's, which sits above the registries
they check against.
"""

from __future__ import annotations

from genalign.config.errors import ConfigError
from genalign.config.loader import compose_config
from genalign.config.schema import ExperimentConfig
from genalign.preflight.files import file_problems
from genalign.preflight.validate import validate


def load_config(
    recipe: str | None, overrides: list[str] | tuple[str, ...] = (), check_files: bool = False
) -> ExperimentConfig:
    """Compose `recipe` (default: the CPU demo) with `overrides`; validate; raise every problem.

    `check_files=True` (the CLI) also checks the files the config names (manifests, model
    path, output_dir, trainer.resume_from) so those mistakes, too, surface before anything loads."""
    config = compose_config(recipe, overrides)
    problems = validate(config)
    if not problems and check_files:
        problems = file_problems(config)
    if problems:
        raise ConfigError(problems)
    return config
