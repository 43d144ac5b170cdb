"""Cross-field validation: each problem is caught, named by its keys, and all come at once."""

from __future__ import annotations

import dataclasses

import pytest

from genalign.config.errors import ConfigError
from genalign.config.schema import ExperimentConfig
from genalign.preflight.load import load_config
from genalign.preflight.validate import validate

OCR = "experiment/diffusion/sd3_5/online_grpo_ocr"


@pytest.fixture
def cfg() -> ExperimentConfig:
    return load_config(OCR)  # valid: every test breaks one thing on a fresh copy


def only(problems: list[str], *fragments: str) -> str:
    assert len(problems) == 1, problems
    for fragment in fragments:
        assert fragment in problems[0], (fragment, problems[0])
    return problems[0]


def test_the_ocr_recipe_and_the_schema_defaults_are_valid(cfg):
    assert validate(cfg) == []
    defaults = ExperimentConfig()
    defaults.reward.components = {"ocr": 1.0}
    assert validate(defaults) == []


def test_samples_per_step_must_split_into_rollout_micro_batches(cfg):
    cfg.rollout.sample_batch_size = 5  # 64 samples
    only(validate(cfg), "rollout.sample_batch_size=5", "64 samples")


def test_samples_per_step_must_split_into_train_micro_batches(cfg):
    cfg.actor.micro_batch_size = 6
    only(validate(cfg), "actor.micro_batch_size=6", "64")


def test_micro_batches_must_split_into_optimizer_steps(cfg):
    cfg.actor.gradient_accumulation_steps = 3  # 8 micro-batches
    only(validate(cfg), "actor.gradient_accumulation_steps=3", "8 micro-batches")
    cfg.actor.num_inner_epochs = 3  # 24 micro-batches: divisible again
    assert validate(cfg) == []


@pytest.mark.parametrize(
    "key",
    [
        "rollout.n",
        "rollout.sample_batch_size",
        "rollout.num_steps",
        "actor.gradient_accumulation_steps",
        "actor.micro_batch_size",
        "trainer.num_steps",
    ],
)
def test_sizes_must_be_positive(cfg, key):
    block, field = key.split(".")
    setattr(getattr(cfg, block), field, 0)
    only(validate(cfg), f"{key} must be positive, got 0")


def test_scalar_ranges(cfg):
    cfg.rollout.noise_level = -0.1
    cfg.algorithm.clip_range = 0.0
    cfg.algorithm.timestep_fraction = 1.5
    cfg.eval.every = -1
    problems = validate(cfg)
    assert len(problems) == 4
    assert any("rollout.noise_level must be >= 0" in p for p in problems)
    assert any("algorithm.clip_range must be > 0" in p for p in problems)
    assert any("algorithm.timestep_fraction must be in (0, 1]" in p for p in problems)
    assert any("eval.every must be >= 0" in p for p in problems)


def test_a_fraction_that_trains_no_step(cfg):
    cfg.algorithm.timestep_fraction = 0.05  # int(10 * 0.05) = 0
    only(validate(cfg), "algorithm.timestep_fraction=0.05", "0 denoising steps")


def load_problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(OCR, list(overrides))
    return info.value.problems


@pytest.mark.parametrize(
    "key, bad",
    [
        ("reward.aggregation", "sum"),
        ("reward.runtime", "remote"),
        ("rollout.engine", "vllm"),
        ("rollout.kernel", "ddim"),
        ("model.train_mode", "qlora"),
        ("model.dtype", "fp16"),
        ("algorithm.kl_type", "k3"),
        ("algorithm.advantage.std", "sample"),
        ("distributed.training.strategy", "fsdp"),
        ("actor.loss_normalisation", "mean"),
        ("model.lora.init", "kaiming"),
        ("reward.video_reduction", "max"),
        ("algorithm.nft.adv_mode", "some"),
        ("algorithm.dpo.source", "web"),
    ],
)
def test_closed_choices_are_refused_by_the_loader_naming_key_source_and_choices(key, bad):
    only(
        load_problems(f"{key}={bad}"),
        f"{key}={bad!r} is not supported (set in command line `{key}={bad}`)",
        "Choose one of:",
    )


def test_close_choice_gets_a_suggestion():
    only(
        load_problems("distributed.training.strategy=fsdp"), "did you mean 'fsdp2'?", "Choose one of: none, ddp, fsdp2"
    )


def test_a_choice_set_in_a_layer_file_names_the_file(tmp_path):
    recipe = tmp_path / "bad_kernel.yaml"
    recipe.write_text("defaults:\n  - /reward: ocr\nrollout:\n  kernel: flow_sd\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(recipe))
    only(
        info.value.problems,
        f"rollout.kernel='flow_sd' is not supported (set in {recipe})",
        "did you mean 'flow_sde'?",
        "Choose one of: flow_sde, dance_sde, em_sde, cps, cps_gaussian",
    )


def test_registry_names_are_checked_with_suggestions(cfg):
    cfg.model.family = "sd35"
    cfg.algorithm.name = "grp"
    cfg.reward.components = {"ocr": 1.0, "aesthetc": 0.5}
    cfg.eval.gold_rewards = {"pickscor": 1.0}
    problems = validate(cfg)
    assert len(problems) == 4
    assert any(p.startswith("model.family: unknown model family 'sd35'") for p in problems)
    assert any("unknown algorithm 'grp'" in p and "'grpo'" in p for p in problems)
    assert any(p.startswith("reward.components: unknown reward 'aesthetc'") and "'aesthetic'" in p for p in problems)
    assert any(p.startswith("eval.gold_rewards: unknown reward 'pickscor'") and "'pickscore'" in p for p in problems)


def test_dotted_paths_are_accepted_only_when_allowed(cfg):
    cfg.reward.components = {"my_pkg.rewards:MyReward": 1.0}
    only(
        validate(cfg),
        "reward.components: 'my_pkg.rewards:MyReward' is a Python import path",
        "reward.allow_import=[my_pkg.rewards:MyReward]",
    )
    cfg.reward.allow_import = ["my_pkg.rewards:MyReward"]
    assert validate(cfg) == []  # listed: the user's own code (validation never imports it)
    cfg.eval.gold_rewards = {"other.mod:Judge": 1.0}
    only(validate(cfg), "eval.gold_rewards: 'other.mod:Judge'")


def test_reward_kwargs_must_name_a_configured_reward(cfg):
    cfg.reward.kwargs = {"orc": {"engine": "rapidocr"}, "ocr": {"engine": "rapidocr"}}
    only(validate(cfg), "reward.kwargs.orc", "did you mean reward.kwargs.ocr")
    cfg.reward.kwargs = {"pickscore": {}}
    cfg.eval.gold_rewards = {"pickscore": 1.0}  # gold rewards take kwargs too
    assert validate(cfg) == []


def test_empty_or_all_zero_reward(cfg):
    cfg.reward.components = {}
    only(validate(cfg), "reward.components is empty")
    cfg.reward.components = {"ocr": 0.0}
    only(validate(cfg), "every weight is 0")


def test_named_choices_are_checked():
    only(load_problems("actor.ema.cadence=epoch"), "actor.ema.cadence='epoch'", "micro_batch, optimizer_step")
    only(load_problems("model.compile_mode=blocks"), "model.compile_mode='blocks'", "regional, full")
    only(load_problems("model.cfg_batch=both"), "model.cfg_batch='both'", "joint, split")


def test_ray_pool_size_is_stated_once(cfg):
    cfg.rollout.num_workers = 2
    only(validate(cfg), "rollout.num_workers=2", "distributed.resources.rollout.num_workers=1")


def test_several_problems_are_reported_together(cfg):
    cfg.rollout.sample_batch_size = 5
    cfg.algorithm.clip_range = -1.0
    cfg.eval.every = -1
    cfg.reward.components = {"ocrr": 1.0}
    assert len(validate(cfg)) == 4


def test_load_config_raises_every_validation_problem():
    with pytest.raises(ConfigError) as info:
        load_config(OCR, ["rollout.sample_batch_size=5", "algorithm.clip_range=0", "eval.every=-1"])
    assert len(info.value.problems) == 3
    assert str(info.value).count("\n- ") == 2


def test_keys_types_and_choices_come_first_all_together():
    # the loader's problems (unknown keys, wrong types, values outside a Literal) are raised
    # together, before the checks across keys (which read typed values)
    with pytest.raises(ConfigError) as info:
        load_config(OCR, ["rollout.sample_batch_size=5", "model.dtype=half", "rollout.n=eight", "actor.lrr=1"])
    assert [problem.split(":")[0].split("=")[0] for problem in info.value.problems] == [
        "model.dtype",
        "rollout.n",
        "actor.lrr",
    ]  # in schema order


def test_every_block_owns_its_problems_beside_its_fields():
    defaults = ExperimentConfig()
    for field in dataclasses.fields(defaults):
        block = getattr(defaults, field.name)
        if dataclasses.is_dataclass(block):  # recipe is a string
            assert callable(getattr(block, "problems", None)), f"{type(block).__name__} has no problems()"
    assert defaults.reward.problems() == [
        "reward.components is empty: name at least one reward, e.g. reward.components.ocr=1.0"
    ]
    assert [
        block.problems()
        for block in (
            defaults.model,
            defaults.rollout,
            defaults.actor,
            defaults.algorithm,
            defaults.data,
            defaults.eval,
            defaults.trainer,
            defaults.distributed,
        )
    ] == [[]] * 8


def test_block_problems_come_in_schema_order_and_bad_sizes_hide_only_what_divides_by_them(cfg):
    cfg.trainer.keep_last = 0
    cfg.rollout.n = 0
    cfg.rollout.sde_window.size = -1
    cfg.algorithm.advantage.eps = -1e-4  # was only found by group_advantages, after the model loaded
    cfg.model.lora.rank = 0
    cfg.actor.gradient_accumulation_steps = 3  # would not divide 8 micro-batches; rollout.n = 0 hides that
    assert validate(cfg) == [
        "model.lora.rank must be positive, got 0",
        "rollout.n must be positive, got 0",
        "rollout.sde_window.size must be >= 0 (0 = no window), got -1",
        "algorithm.advantage.eps must be >= 0, got -0.0001",
        "trainer.keep_last=0 must be >= 1 (null keeps every checkpoint)",
    ]
