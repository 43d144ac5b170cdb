"""Every recipe names its validation level and evidence; help and docs/recipes.md show them."""

from pathlib import Path

import pytest

from genalign.config.catalog import (
    CONFIG_ROOT,
    VALIDATION_LEVELS,
    describe,
    recipe_paths,
    recipe_validation,
    validation_table,
)
from genalign.preflight.load import load_config

DOCS = Path(__file__).resolve().parents[3] / "docs" / "recipes.md"


def test_every_recipe_has_a_validation_level_with_evidence():
    for name, path in recipe_paths().items():
        found = recipe_validation(path)
        assert found.level in VALIDATION_LEVELS and len(found.evidence) > 20, name


def test_help_and_docs_show_the_levels():
    text = describe()
    for name, path in recipe_paths().items():
        line = next(line for line in text.splitlines() if line.strip().startswith(name + " "))
        assert f"[{recipe_validation(path).level}]" in line
    doc = DOCS.read_text(encoding="utf-8")
    table = doc.split("<!-- validation-table:start -->\n")[1].split("\n<!-- validation-table:end -->")[0]
    assert table == validation_table(), "docs/recipes.md is stale: regenerate its table from the recipes"


def test_only_the_toy_recipes_claim_real_weights():
    claimed = {name for name, path in recipe_paths().items() if recipe_validation(path).level == "real-weights"}
    assert claimed and all(name.startswith("experiment/toy/") for name in claimed)


def test_a_bad_block_is_a_clear_error_and_the_block_is_not_config(tmp_path):
    bad = tmp_path / "r.yaml"
    bad.write_text("validation: {level: great, evidence: trust me}\n")
    with pytest.raises(ValueError, match="r.yaml: validation.level='great'"):
        recipe_validation(bad)
    bad.write_text("trainer: {num_steps: 1}\n")
    with pytest.raises(ValueError, match="needs a top-level `validation:` block"):
        recipe_validation(bad)
    assert not hasattr(load_config("experiment/toy/shapes_grpo"), "validation")
    assert CONFIG_ROOT.is_dir()
