"""`${oc.env:...}` interpolation (OmegaConf) in layers and overrides, and Hydra's `+key=value`."""

from __future__ import annotations

import pytest

from genalign.config.errors import ConfigError
from genalign.config.loader import config_to_yaml
from genalign.preflight.load import load_config

OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


def problems_of(overrides, recipe=None):
    with pytest.raises(ConfigError) as info:
        load_config(recipe, overrides)
    return info.value.problems


def test_env_interpolation_in_overrides_with_default_decode_and_key_references(monkeypatch):
    monkeypatch.setenv("GA_TEST_OUT", "/data/runs")
    monkeypatch.setenv("GA_TEST_N", "4")
    monkeypatch.delenv("GA_TEST_UNSET", raising=False)
    cfg = load_config(
        OCR,
        [
            "trainer.output_dir=${oc.env:GA_TEST_OUT}/ocr",
            "rollout.n=${oc.decode:${oc.env:GA_TEST_N}}",
            "trainer.wandb.name=${oc.env:GA_TEST_UNSET,nightly}",
            "trainer.wandb.project=${trainer.output_dir}",
            r"trainer.wandb.entity=\${literal}",
        ],
    )
    assert cfg.trainer.output_dir == "/data/runs/ocr" and cfg.rollout.n == 4
    assert (cfg.trainer.wandb.name, cfg.trainer.wandb.project, cfg.trainer.wandb.entity) == (
        "nightly",
        "/data/runs/ocr",
        "${literal}",
    )
    assert "${" not in config_to_yaml(cfg).replace("${literal}", "")  # the printed/saved config is resolved


def test_env_interpolation_in_a_yaml_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("GA_TEST_MANIFEST_DIR", "datasets/ocr")
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(
        "defaults:\n  - /experiment/toy: shapes_grpo\n"
        "data:\n  eval_manifest: ${oc.env:GA_TEST_MANIFEST_DIR}/test.txt\n"
        "trainer:\n  output_dir: ${oc.env:GA_TEST_ROOT,outputs}/mine\n"
    )
    cfg = load_config(str(recipe))
    assert cfg.data.eval_manifest == "datasets/ocr/test.txt" and cfg.trainer.output_dir == "outputs/mine"
    assert cfg.recipe == str(recipe)


def test_unresolvable_interpolations_name_the_key_and_where_it_was_set(tmp_path, monkeypatch):
    monkeypatch.delenv("GA_TEST_UNSET", raising=False)
    monkeypatch.setenv("GA_TEST_N", "4")
    assert problems_of(["trainer.output_dir=${oc.env:GA_TEST_UNSET}"]) == [
        "trainer.output_dir: cannot resolve '${oc.env:GA_TEST_UNSET}': KeyError raised while resolving interpolation: "
        "\"Environment variable 'GA_TEST_UNSET' not found\" (give a default: ${oc.env:VAR,default}) "
        "(set in command line `trainer.output_dir=${oc.env:GA_TEST_UNSET}`)"
    ]
    assert problems_of(["rollout.n=${oc.env:GA_TEST_N}"]) == [
        "rollout.n: expected int, got '4' (str; set in command line `rollout.n=${oc.env:GA_TEST_N}`; oc.env gives "
        "a string, for a number or bool write ${oc.decode:${oc.env:VAR}})"
    ]
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("defaults:\n  - /experiment/toy: shapes_grpo\ntrainer:\n  output_dir: ${oops\n")
    assert problems_of([], str(recipe)) == [
        f"trainer.output_dir: '${{oops' is not a valid ${{...}} interpolation (escape a literal as \\${{...}}; "
        f"set in {recipe})"
    ]


def test_plus_adds_keys_to_open_mappings_only():
    cfg = load_config(None, ["+reward.components.random=0.5", "+reward.kwargs.random.seed=3"])
    assert cfg.reward.components == {"toy_shape": 1.0, "random": 0.5} and cfg.reward.kwargs["random"] == {"seed": 3}
    assert load_config(None, ["++trainer.seed=7", "++reward.components.random=0.5"]).trainer.seed == 7
    assert problems_of(["+reward.components.toy_shape=0.5"]) == [
        "override +reward.components.toy_shape=0.5: reward.components.toy_shape is already set; `+` only adds a new "
        "key, so drop the `+` to change it (or use ++ to add-or-change)"
    ]
    assert problems_of(["+trainer.keep_last=3"]) == [
        "override +trainer.keep_last=3: trainer.keep_last is a field of TrainerConfig, always present; set it with "
        "trainer.keep_last=... (no `+`)"
    ]
    assert problems_of(["+trainer.sed=3"]) == [
        "override +trainer.sed=3: trainer.sed: unknown key; did you mean 'trainer.seed'? (`+` adds keys only to open "
        "mappings such as reward.components and reward.kwargs)"
    ]
    assert problems_of(["+rollout.n.x=3"]) == ["override +rollout.n.x=3: rollout.n has type int, not a mapping"]
    assert problems_of(["+/base/distributed=local"]) == [
        "override '+/base/distributed=local': `+` adds a key (+key=value); a group is swapped with /group=option"
    ]


def test_recipe_is_recorded_and_not_settable():
    assert load_config(None).recipe == "experiment/toy/shapes_grpo"
    assert load_config(OCR).recipe == OCR
    assert problems_of(["recipe=mine"]) == [
        "recipe: set by the loader from --config, not a key to set (set in command line `recipe=mine`); remove it"
    ]
