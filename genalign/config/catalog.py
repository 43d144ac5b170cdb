"""What ships under `genalign/configs/`: the recipes and the config groups, with descriptions.

Where it fits: the loader resolves `--config` names and `/group=option` swaps against these
lists (and names them in its errors); `genalign train --help` prints them. A layer's
description is the first sentence of the comment block at the top of its file.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

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


def recipes(root: Path = CONFIG_ROOT) -> dict[str, str]:
    """Recipe name (`experiment/toy/shapes_grpo`) -> description, sorted by name."""
    return {str(path.relative_to(root))[:-5]: layer_description(path)
            for path in sorted(root.glob(f"{RECIPE_GROUP}/**/*.yaml"))}


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
    lines = ["recipes (--config NAME, or a path to your own YAML file):"]
    lines += [f"  {name:<{width}}{text}" for name, text in recipe_list.items()]
    group_list = groups(include_recipes=False)
    width = max(map(len, group_list)) + 2
    lines += ["", "config groups (swap one with /group=option; options are the layer names):"]
    for group, options in group_list.items():
        described = [(option, layer_description(CONFIG_ROOT / group.strip("/") / f"{option}.yaml", 70))
                     for option in options]
        lines.append(f"  {group:<{width}}" + ", ".join(option for option, _ in described))
        lines += [f"  {'':<{width}}  {option}: {text}" for option, text in described if text]
    return "\n".join(lines)
