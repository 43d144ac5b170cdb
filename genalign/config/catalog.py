"""What ships under `genalign/configs/`: the recipes and the config groups, with descriptions.

Where it fits: the loader resolves `--config` names and `/group=option` swaps against these
lists (and names them in its errors); `genalign train --help` prints them. A layer's
description is the first sentence of the comment block at the top of its file.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

CONFIG_ROOT = Path(__file__).resolve().parent.parent / "configs"
RECIPE_GROUP = "experiment"
"""Recipes are the layers under configs/experiment/ (they may also be used as a group)."""


def layer_description(path: Path, limit: int = 100) -> str:
    """The first sentence of the leading `#` comment block of a YAML layer ("" without one)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    sentence = re.split(r"(?<=[a-z0-9)])\. (?=[A-Z])", text, maxsplit=1)[0].rstrip(".")
    return textwrap.shorten(sentence, width=limit, placeholder="...") if sentence else ""


VALIDATION_KEY = "validation"
"""A recipe's top-level block naming how far it has been validated (read here, for `genalign
train --help` and the docs' recipe table; the loader drops it before building the config)."""
VALIDATION_LEVELS = {
    "tiny-model": "the whole loop on a tiny random model of the family's architecture (CPU tests)",
    "real-shapes-gpu": "the family's exact shapes (random weights) trained on a GPU, plus the tiny-model loop",
    "real-weights": "trained from real pretrained weights with the reward measured to move",
}
"""Validation levels, weakest first. A recipe claims the level its evidence supports."""


@dataclass(frozen=True)
class RecipeValidation:
    level: str
    """One of VALIDATION_LEVELS."""
    evidence: str
    """What shows it: the tests, benchmarks or measured runs, by file."""


def recipe_validation(path: Path) -> RecipeValidation:
    """The `validation: {level, evidence}` block of a recipe file; a clear error naming the file
    when it is missing or malformed (a test checks every shipped recipe)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    block = data.get(VALIDATION_KEY) if isinstance(data, dict) else None
    if not isinstance(block, dict) or set(block) != {"level", "evidence"}:
        raise ValueError(
            f"{path}: a recipe needs a top-level `{VALIDATION_KEY}:` block with exactly `level` and `evidence`"
        )
    level, evidence = block["level"], str(block["evidence"]).strip()
    if level not in VALIDATION_LEVELS or not evidence:
        raise ValueError(
            f"{path}: {VALIDATION_KEY}.level={level!r} must be one of {list(VALIDATION_LEVELS)} "
            f"with a non-empty evidence"
        )
    return RecipeValidation(level, evidence)


def recipe_paths(root: Path = CONFIG_ROOT) -> dict[str, Path]:
    return {str(path.relative_to(root))[:-5]: path for path in sorted(root.glob(f"{RECIPE_GROUP}/**/*.yaml"))}


def validation_table(root: Path = CONFIG_ROOT) -> str:
    """The docs' recipe table (docs/recipes.md embeds it; a test keeps the two equal)."""
    rows = ["| recipe | validation level | evidence |", "|---|---|---|"]
    for name, path in recipe_paths(root).items():
        found = recipe_validation(path)
        rows.append(f"| `{name}` | {found.level} | {' '.join(found.evidence.split())} |")
    return "\n".join(rows)


def recipes(root: Path = CONFIG_ROOT) -> dict[str, str]:
    """Recipe name (`experiment/toy/shapes_grpo`) -> description, sorted by name."""
    return {
        str(path.relative_to(root))[:-5]: layer_description(path)
        for path in sorted(root.glob(f"{RECIPE_GROUP}/**/*.yaml"))
    }


def groups(root: Path = CONFIG_ROOT, include_recipes: bool = True) -> dict[str, list[str]]:
    """Config group (`/base/distributed`) -> its options, for every directory holding layers."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.yaml")):
        group = "/" + str(path.parent.relative_to(root))
        if include_recipes or not group.startswith(f"/{RECIPE_GROUP}"):
            found.setdefault(group, []).append(path.stem)
    return dict(sorted(found.items()))


def describe() -> str:
    """The help text listing every recipe and every (non-recipe) group with its options."""
    recipe_list = recipes()
    width = max(map(len, recipe_list)) + 2
    levels = {name: recipe_validation(path).level for name, path in recipe_paths().items()}
    level_width = max(map(len, VALIDATION_LEVELS)) + 2
    lines = ["recipes (--config NAME, or a path to your own YAML file), with how far each is validated:"]
    lines += [f"  {level}: {meaning}" for level, meaning in VALIDATION_LEVELS.items()]
    lines += ["  (evidence per recipe: docs/recipes.md)", ""]
    lines += [
        f"  {name:<{width}}{'[' + levels[name] + ']':<{level_width + 2}}{text}" for name, text in recipe_list.items()
    ]
    group_list = groups(include_recipes=False)
    width = max(map(len, group_list)) + 2
    lines += ["", "config groups (swap one with /group=option; options are the layer names):"]
    for group, options in group_list.items():
        described = [
            (option, layer_description(CONFIG_ROOT / group.strip("/") / f"{option}.yaml", 70)) for option in options
        ]
        lines.append(f"  {group:<{width}}" + ", ".join(option for option, _ in described))
        lines += [f"  {'':<{width}}  {option}: {text}" for option, text in described if text]
    return "\n".join(lines)
