"""A recipe's defaults list, written as Hydra users write it: `- /group/option`, `- _self_`,
`- override /group: option`, `- optional /group: option`."""

from __future__ import annotations

import pytest

from genalign.config.errors import ConfigError
from genalign.config.loader import compose_config, config_to_dict


def recipe(tmp_path, text: str):
    path = tmp_path / "my_recipe.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_a_recipe_built_on_a_shipped_one_with_hydra_forms(tmp_path):
    mine = recipe(
        tmp_path,
        """
defaults:
  - /experiment/toy/shapes_grpo          # a shipped recipe, as one path
  - override /base/algorithm: nft        # swap a group that recipe chooses
  - _self_
  - /sampling/image/384                  # after _self_: its rollout.height wins over mine
rollout:
  height: 48
trainer:
  num_steps: 7
""",
    )
    cfg = compose_config(mine)
    assert cfg.algorithm.name == "nft" and cfg.trainer.num_steps == 7
    assert cfg.rollout.height == 384 and cfg.rollout.n == 8  # the shipped recipe's own keys came through
    assert compose_config(mine, ["/base/algorithm=grpo"]).algorithm.name == "grpo"  # the command line wins


def test_own_keys_merge_last_without_self_and_the_colon_and_path_forms_agree(tmp_path):
    path_form = recipe(
        tmp_path, "defaults:\n  - /experiment/toy/shapes_grpo\n  - /sampling/image/384\nrollout:\n  height: 48\n"
    )
    assert compose_config(path_form).rollout.height == 48  # Hydra 1.1: _self_ last by default
    colon_form = config_to_dict(compose_config(recipe(tmp_path, "defaults:\n  - experiment/toy: shapes_grpo\n")))
    shipped = config_to_dict(compose_config("experiment/toy/shapes_grpo"))
    assert {**colon_form, "recipe": None} == {**shipped, "recipe": None}


def test_optional_entries_and_malformed_ones(tmp_path):
    cfg = compose_config(
        recipe(tmp_path, "defaults:\n  - /experiment/toy/shapes_grpo\n  - optional /sampling/image: 1024\n")
    )  # no such file: skipped
    assert cfg.rollout.height == 32
    with pytest.raises(ConfigError) as err:
        compose_config(
            recipe(
                tmp_path,
                "defaults:\n  - /experiment/toy/shapes_grpo\n  - _self_\n  - _self_\n"
                "  - override /model/diffusion/flux: dev\n  - [nested]\n",
            )
        )
    problems = err.value.problems
    assert any("defaults entry ['nested'] must look like `- /group/path: option`" in p for p in problems)
    assert any("`_self_` is listed more than once" in p for p in problems)
    assert any("`override /model/diffusion/flux: dev` overrides nothing" in p for p in problems)


def test_the_documented_recipe_composes_and_validates(tmp_path):
    import re
    from pathlib import Path

    from genalign.preflight.load import load_config

    page = (Path(__file__).resolve().parents[3] / "docs" / "running.md").read_text(encoding="utf-8")
    [text] = re.findall(r"```yaml\n(# my_recipe.yaml.*?)```", page, re.S)
    cfg = load_config(recipe(tmp_path, text), check_files=False)  # prompts/train.txt is the reader's own file
    assert (cfg.algorithm.name, cfg.trainer.num_steps, cfg.data.manifest) == ("nft", 300, "prompts/train.txt")
    assert cfg.model.path == "stabilityai/stable-diffusion-3.5-medium"
