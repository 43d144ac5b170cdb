"""Layer composition, overrides, group swaps, provenance-aware strict typing, round trips.

The OCR recipe tests read the packaged layers; edge cases use YAML files under tmp_path,
either as a recipe path (defaults still resolve against the packaged configs/) or as a
whole config root (`layer_root` points the loader at tmp_path).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from genalign.config import loader
from genalign.config.errors import ConfigError
from genalign.config.loader import config_from_dict, config_to_dict, config_to_yaml, diff_configs
from genalign.config.schema import ExperimentConfig
from genalign.preflight.load import load_config

OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def problems_of(recipe: str, overrides: list[str] = ()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(recipe, list(overrides))
    return info.value.problems


@pytest.fixture
def layer_root(tmp_path, monkeypatch):
    """A private configs/ tree: group /g has options a and b; /h has option x."""
    write(tmp_path / "g/a.yaml", "trainer: {seed: 1, num_steps: 10}\n")
    write(tmp_path / "g/b.yaml", "trainer: {seed: 2}\n")
    write(tmp_path / "h/x.yaml", "defaults:\n  - /g: a\ntrainer: {save_every: 5}\n")
    write(
        tmp_path / "experiment/r.yaml",
        "defaults:\n  - /h: x\n  - /g: a\nreward: {components: {ocr: 1.0}}\ntrainer: {output_dir: out}\n",
    )
    monkeypatch.setattr(loader, "CONFIG_ROOT", tmp_path)
    return tmp_path


# ------------------------------------------------------------------ the packaged OCR recipe
def test_ocr_recipe_composes_to_the_seed_values():
    cfg = load_config(OCR)
    assert (cfg.model.family, cfg.model.path, cfg.model.dtype) == (
        "sd3",
        "stabilityai/stable-diffusion-3.5-medium",
        "bfloat16",
    )
    assert cfg.model.max_sequence_length == 128  # Flow-GRPO's train_sd3.py
    # train_sd3.py keeps the gradient through both CFG branches (upstream "fix cfg gradient detach")
    assert (cfg.algorithm.detach_uncond, cfg.algorithm.drop_zero_advantage) == (False, True)
    assert (cfg.actor.ema.decay, cfg.actor.ema.update_every, cfg.actor.ema.warmup, cfg.actor.ema.cadence) == (
        0.9,
        8,
        True,
        "micro_batch",
    )
    assert (cfg.model.train_mode, cfg.model.lora.rank, cfg.model.lora.alpha, cfg.model.lora.init) == (
        "lora",
        32,
        64.0,
        "gaussian",
    )
    assert cfg.model.lora.target_modules == [
        "attn.to_q",
        "attn.to_k",
        "attn.to_v",
        "attn.to_out.0",
        "attn.add_q_proj",
        "attn.add_k_proj",
        "attn.add_v_proj",
        "attn.to_add_out",
    ]
    r = cfg.rollout
    assert (r.height, r.width, r.num_steps, r.guidance_scale) == (512, 512, 10, 4.5)
    assert (r.n, r.rollout_batch_size, r.sample_batch_size) == (8, 8, 8)
    assert (r.kernel, r.noise_level, r.engine, r.num_workers) == ("flow_sde", 0.7, "ray", 1)
    assert cfg.reward.components == {"ocr": 1.0}
    assert (cfg.data.manifest, cfg.data.eval_manifest) == ("datasets/ocr/train.txt", "datasets/ocr/test.txt")
    a = cfg.algorithm
    assert (a.name, a.clip_range, a.adv_clip_max, a.kl_beta, a.timestep_fraction) == ("grpo", 1e-4, 5.0, 0.04, 0.99)
    assert (a.advantage.global_std, a.advantage.std, a.advantage.eps) == (True, "population", 1e-4)
    act = cfg.actor
    assert (act.lr, act.weight_decay, act.max_grad_norm, act.gradient_accumulation_steps) == (3e-4, 1e-4, 1.0, 4)
    assert (act.ema.enabled, act.ema.decay, act.ema.update_every) == (True, 0.9, 8)
    e = cfg.eval
    assert (e.every, e.num_steps, e.max_prompts, e.seed, e.use_ema) == (60, 40, 16, 20260504, True)
    assert (cfg.trainer.output_dir, cfg.trainer.save_every) == ("outputs/sd3_5_ocr_grpo", 60)
    d = cfg.distributed
    assert (d.preset, d.colocated, d.cross_node) == ("ray_rollout_colocated_single_gpu", True, False)
    assert (d.resources.trainer.num_gpus, d.resources.rollout.num_gpus, d.resources.rollout.num_workers) == (1, 1, 1)


def test_packaged_recipe_found_by_name_with_suffix_and_by_path():
    by_name = config_to_dict(load_config(OCR))
    assert config_to_dict(load_config(OCR + ".yaml")) == by_name
    assert config_to_dict(load_config(str(loader.CONFIG_ROOT / (OCR + ".yaml")))) == by_name


# ------------------------------------------------------------------ overrides and swaps
def test_last_override_wins_and_values_are_parsed_as_yaml():
    cfg = load_config(
        OCR,
        [
            "rollout.n=2",
            "rollout.n=4",
            "trainer.resume_from=null",
            "model.lora.target_modules=[a, b]",
            "distributed.resources.visible_devices=[0,1,2,3]",
            "eval.use_ema=false",
        ],
    )
    assert cfg.rollout.n == 4
    assert cfg.trainer.resume_from is None
    assert cfg.model.lora.target_modules == ["a", "b"]  # lists replace, never append
    assert cfg.distributed.resources.visible_devices == [0, 1, 2, 3]
    assert cfg.eval.use_ema is False


def test_override_adds_dict_keys_and_free_form_kwargs():
    cfg = load_config(
        OCR,
        [
            "reward.components.ocr=0.0",
            "reward.components.aesthetic=1.0",
            "reward.kwargs.aesthetic.model_name=openai/clip-vit-large-patch14",
        ],
    )
    assert cfg.reward.components == {"ocr": 0.0, "aesthetic": 1.0}
    assert cfg.reward.kwargs == {"aesthetic": {"model_name": "openai/clip-vit-large-patch14"}}


def test_group_swap_replaces_the_option_wherever_it_appears():
    cfg = load_config(OCR, ["/base/distributed=ray_rollout", "distributed.resources.rollout.num_gpus=auto"])
    assert (cfg.distributed.preset, cfg.distributed.colocated) == ("ray_rollout", False)
    assert cfg.distributed.resources.rollout.num_gpus == "auto"  # float | Literal["auto"] keeps the string
    assert load_config(OCR, ["/base/distributed=local"]).rollout.engine == "local"
    # a preset that extends another of its group (fsdp2_8_ranks: fsdp2 with 8 ranks) swaps in whole
    cfg = load_config(OCR, ["/base/distributed=fsdp2_8_ranks"])
    assert (cfg.distributed.preset, cfg.distributed.training.strategy) == ("fsdp2_8_ranks", "fsdp2")
    assert cfg.distributed.resources.trainer.num_gpus == 8


def test_defaults_order_then_own_keys_then_overrides(layer_root):
    # r: defaults [/h: x (which pulls /g: a), /g: a], then its own keys.
    cfg = load_config("experiment/r")
    assert (cfg.trainer.seed, cfg.trainer.num_steps, cfg.trainer.save_every) == (1, 10, 5)
    # The swap reaches both /g entries (the nested one too); a's num_steps is gone with it.
    cfg = load_config("experiment/r", ["/g=b"])
    assert (cfg.trainer.seed, cfg.trainer.num_steps) == (2, ExperimentConfig().trainer.num_steps)
    assert load_config("experiment/r", ["/g=b", "trainer.seed=7"]).trainer.seed == 7


def test_deep_merge_keeps_sibling_keys(tmp_path):
    recipe = write(
        tmp_path / "r.yaml",
        "defaults:\n  - /model/diffusion/sd3_5: medium\nmodel: {lora: {rank: 8}}\nreward: {components: {ocr: 1.0}}\n",
    )
    cfg = load_config(str(recipe))
    assert (cfg.model.lora.rank, cfg.model.lora.alpha, cfg.model.family) == (8, 64.0, "sd3")


# ------------------------------------------------------------------ errors
def test_unknown_key_names_key_layer_file_and_suggestion(tmp_path):
    recipe = write(tmp_path / "typo.yaml", "defaults:\n  - /reward: ocr\nrollout:\n  nosie_level: 0.5\n")
    (problem,) = problems_of(str(recipe))
    assert "rollout.nosie_level: unknown key" in problem
    assert str(recipe) in problem
    assert "did you mean 'rollout.noise_level'" in problem


def test_unknown_key_in_a_packaged_layer_names_it_relative_to_configs(layer_root):
    write(layer_root / "g/a.yaml", "trainer: {sed: 1}\n")
    (problem,) = problems_of("experiment/r")
    assert "trainer.sed: unknown key (set in g/a.yaml)" in problem and "'trainer.seed'" in problem


def test_nested_typo_from_the_command_line():
    (problem,) = problems_of(OCR, ["actor.ema.decy=0.5"])
    assert "actor.ema.decy: unknown key (set in command line `actor.ema.decy=0.5`)" in problem
    assert "did you mean 'actor.ema.decay'" in problem


def test_environment_facts_are_not_config_keys():
    (problem,) = problems_of(OCR, ["distributed.ray_address=10.0.0.1:6379"])
    assert "RAY_ADDRESS environment variable" in problem


def test_wrong_types_are_all_reported_with_key_source_expected_and_value(tmp_path):
    recipe = write(tmp_path / "types.yaml", "defaults:\n  - /reward: ocr\nrollout: {n: eight}\n")
    problems = problems_of(str(recipe), ["rollout.guidance_scale=true", "eval.seed=1.5", "rollout.num_steps=yes"])
    assert len(problems) == 4
    by_key = {p.split(":")[0]: p for p in problems}
    assert "expected int, got 'eight'" in by_key["rollout.n"] and str(recipe) in by_key["rollout.n"]
    assert "expected float, got True" in by_key["rollout.guidance_scale"]  # bool is not a number
    assert "command line `rollout.guidance_scale=true`" in by_key["rollout.guidance_scale"]
    assert "expected int, got 1.5" in by_key["eval.seed"]
    assert "expected int, got True" in by_key["rollout.num_steps"]  # YAML 1.1 `yes` is a bool, not 1


def test_a_literal_choice_is_checked_alone_in_a_union_and_in_a_list():
    # Literal alone: the key, where it was set, the nearest choice and every choice
    (problem,) = problems_of(OCR, ["rollout.kernel=flow"])
    assert problem == (
        "rollout.kernel='flow' is not supported (set in command line `rollout.kernel=flow`); "
        "did you mean 'flow_sde'? Choose one of: flow_sde, dance_sde, em_sde, cps, cps_gaussian"
    )
    # in `float | Literal["auto"]`: a number or the choice; a near-miss string gets the choice's message
    cfg = load_config(OCR, ["distributed.resources.rollout.num_gpus=2", "distributed.resources.trainer.num_gpus=1"])
    assert (cfg.distributed.resources.rollout.num_gpus, cfg.distributed.resources.trainer.num_gpus) == (2.0, 1.0)
    (problem,) = problems_of(OCR, ["distributed.resources.rollout.num_gpus=autp"])
    assert (
        problem.startswith("distributed.resources.rollout.num_gpus='autp' is not supported")
        and "did you mean 'auto'?" in problem
    )
    (problem,) = problems_of(OCR, ["distributed.resources.rollout.num_gpus=[1]"])
    assert "distributed.resources.rollout.num_gpus: expected float | 'auto', got [1]" in problem
    (problem,) = problems_of(OCR, ["distributed.resources.trainer.num_gpus=auto"])  # "auto" is the rollout's
    assert problem.startswith("distributed.resources.trainer.num_gpus: expected float, got 'auto'")
    # in `Literal | None` and in `list[Literal]`: null stays null, each item is checked
    assert load_config(OCR, ["trainer.wandb.mode=null"]).trainer.wandb.mode is None
    (problem,) = problems_of(OCR, ["trainer.loggers=[csv,tensorbord]"])
    assert problem.startswith("trainer.loggers[1]='tensorbord' is not supported")
    # a bool is not a string choice, and a number that prints like one is not it either
    (problem,) = problems_of(OCR, ["model.dtype=true"])
    assert problem.startswith("model.dtype=True is not supported")


def test_a_choice_spelled_off_is_the_choice_not_yaml_false(tmp_path):
    """YAML 1.1 reads `off` as False: `mode=off` (command line) and `mode: off` (a file) mean
    the choice "off"; a bool where no choice is spelled as a YAML bool word stays a problem."""
    cfg = load_config(OCR, ["algorithm.rollout_correction.mode=off", "rollout.overlap=off"])
    assert (cfg.algorithm.rollout_correction.mode, cfg.rollout.overlap) == ("off", "off")
    recipe = write(
        tmp_path / "off.yaml", "defaults:\n  - /reward: ocr\nalgorithm:\n  rollout_correction: {mode: off}\n"
    )
    assert load_config(str(recipe)).algorithm.rollout_correction.mode == "off"
    (problem,) = problems_of(OCR, ["algorithm.rollout_correction.mode=on"])
    assert problem.startswith("algorithm.rollout_correction.mode=True is not supported")


def test_scalar_turned_into_mapping_blames_the_override():
    (problem,) = problems_of(OCR, ["rollout.n.x=3"])
    assert problem.startswith("rollout.n: expected int") and "command line `rollout.n.x=3`" in problem


def test_unknown_group_and_unknown_option(layer_root):
    (problem,) = problems_of("experiment/r", ["/gg=a"])
    assert "no config group /gg" in problem and "did you mean '/g'" in problem and "Groups: /g, /h" in problem
    (problem,) = problems_of("experiment/r", ["/g=c"])
    assert "command line `/g=c`" in problem and "group /g has no option 'c'" in problem and "Options: a, b" in problem
    write(layer_root / "experiment/bad.yaml", "defaults:\n  - /hh: x\n")
    (problem,) = problems_of("experiment/bad")
    assert "experiment/bad.yaml: unknown config group '/hh'" in problem and "did you mean '/h'" in problem


def test_recipe_not_found_suggests_the_nearest():
    (problem,) = problems_of("experiment/diffusion/sd3_5/online_grpo_ocrr")
    assert "no recipe" in problem and f"Did you mean '{OCR}'" in problem


def test_malformed_override_and_defaults_cycle(layer_root):
    assert "expected key=value" in problems_of("experiment/r", ["rollout.n"])[0]
    write(layer_root / "g/a.yaml", "defaults:\n  - /h: x\n")
    assert any("cycle" in p for p in problems_of("experiment/r"))


def test_scientific_notation_strings_coerce_to_float(tmp_path):
    # PyYAML 1.1 reads `1e-4` (no dot) as the string "1e-4".
    assert yaml.safe_load("lr: 1e-4")["lr"] == "1e-4"
    recipe = write(
        tmp_path / "sci.yaml", "defaults:\n  - /reward: ocr\nactor: {lr: 1e-4}\nalgorithm: {clip_range: 2e-5}\n"
    )
    cfg = load_config(str(recipe), ["actor.weight_decay=5e-3"])
    assert (cfg.actor.lr, cfg.algorithm.clip_range, cfg.actor.weight_decay) == (1e-4, 2e-5, 5e-3)
    assert isinstance(cfg.actor.lr, float)
    assert "expected float, got 'fast'" in problems_of(str(recipe), ["actor.lr=fast"])[0]


def test_int_is_accepted_for_float_and_converted():
    cfg = load_config(OCR, ["rollout.guidance_scale=3"])
    assert cfg.rollout.guidance_scale == 3.0 and isinstance(cfg.rollout.guidance_scale, float)


def test_structural_problems_are_collected_into_one_error(tmp_path):
    recipe = write(tmp_path / "many.yaml", "defaults:\n  - /reward: ocr\nrolout: {n: 2}\nactor: {lr: x}\n")
    problems = problems_of(str(recipe), ["trainer.sed=1"])
    assert len(problems) == 3
    assert str(ConfigError(problems)).count("\n") == 2  # one line per problem


# ------------------------------------------------------------------ dict round trip and diffs
def test_config_from_dict_round_trips_every_field():
    cfg = load_config(
        OCR,
        [
            "actor.micro_batch_size=4",
            "/base/distributed=ray_rollout",
            "distributed.resources.rollout.num_gpus=auto",
            "reward.kwargs.ocr.num_threads=2",
        ],
    )
    tree = config_to_dict(cfg)
    assert config_from_dict(tree) == cfg
    assert config_from_dict(yaml.safe_load(config_to_yaml(cfg))) == cfg  # what checkpoints store


def test_config_from_dict_is_strict_and_names_its_source():
    tree = config_to_dict(load_config(OCR))
    tree["actor"]["lrr"] = 0.1
    tree["rollout"]["n"] = "8"
    with pytest.raises(ConfigError) as info:
        config_from_dict(tree, source="ckpt/config.yaml")
    problems = info.value.problems
    assert len(problems) == 2 and all("ckpt/config.yaml" in p for p in problems)
    assert any("actor.lrr: unknown key" in p and "'actor.lr'" in p for p in problems)


def test_diff_configs_lists_dotted_keys_limited_to_prefixes():
    a = config_to_dict(load_config(OCR))
    b = config_to_dict(
        load_config(
            OCR, ["rollout.n=4", "actor.lr=1e-3", "trainer.output_dir=elsewhere", "reward.components.aesthetic=0.5"]
        )
    )
    assert diff_configs(a, a) == []
    assert diff_configs(a, b) == ["actor.lr", "reward.components.aesthetic", "rollout.n", "trainer.output_dir"]
    assert diff_configs(a, b, keys=["rollout", "actor.lr", "model"]) == ["actor.lr", "rollout.n"]
    assert diff_configs({"x": None}, {}) == ["x"]  # absent is not the same as null


def test_a_duplicate_key_is_an_error_not_a_silently_dropped_block(tmp_path):
    recipe = tmp_path / "dup.yaml"
    recipe.write_text("actor:\n  lr: 0.001\nrollout:\n  n: 4\nactor:\n  eps: 1.0e-6\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(recipe))
    assert info.value.problems == [
        f"{recipe}: not valid YAML (duplicate key 'actor' (also at line 1; merge the two) at line 5, column 1)"
    ]


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("actor.betas=[0.9,", "override actor.betas=[0.9,: the value is not valid YAML (expected the node content"),
        ("trainer.output_dir=@foo", "found character '@' that cannot start any token at line 1, column 1"),
    ],
)
def test_an_override_that_is_not_yaml_is_one_line(override, fragment):
    with pytest.raises(ConfigError) as info:
        load_config(None, [override])
    (problem,) = info.value.problems
    assert fragment in problem and "\n" not in problem


def test_config_from_dict_applies_overrides_like_load_config():
    tree = config_to_dict(load_config(None))
    assert config_from_dict(tree, "ckpt", ["eval.max_prompts=3"]).eval.max_prompts == 3
    with pytest.raises(ConfigError, match=r"eval\.foo: unknown key \(set in command line `eval\.foo\.bar=1`\)"):
        config_from_dict(tree, "ckpt", ["eval.foo.bar=1"])
