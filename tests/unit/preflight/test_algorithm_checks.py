"""What each algorithm needs from the rollout and data is checked at config time."""

import pytest

from genalign.config.errors import ConfigError
from genalign.preflight.load import load_config


def problems(recipe, *overrides):
    with pytest.raises(ConfigError) as error:
        load_config(recipe, list(overrides))
    return str(error.value)


def test_recipes_validate_and_forward_algorithms_accept_the_ode():
    assert load_config("experiment/toy/shapes_nft").rollout.noise_level == 0.0
    assert load_config("experiment/toy/shapes_dpo").algorithm.name == "dpo"
    assert load_config("experiment/toy/offline_dpo").algorithm.dpo.source == "offline"
    # nft with the Flow-GRPO SDE sampler is fine too (any sampler)
    assert load_config("experiment/toy/shapes_nft", ["rollout.noise_level=0.7"]).rollout.noise_level == 0.7


def test_time_to_target_recipes_train_what_their_comments_say():
    from genalign.preflight.step_sizes import StepSizes

    fast = StepSizes.from_config(load_config("experiment/toy/shapes_nft_fast"))
    # 3 of the 10 σ's per sample, no base-model forward (no KL), the old policy still kept
    assert (fast.num_train_timesteps, fast.needs_reference) == (3, False)
    nft = StepSizes.from_config(load_config("experiment/toy/shapes_nft"))
    assert (nft.num_train_timesteps, nft.needs_reference) == (9, True)
    assert StepSizes.from_config(load_config("experiment/toy/shapes_grpo_all_steps")).num_train_timesteps == 9
    assert StepSizes.from_config(load_config("experiment/toy/shapes_grpo")).num_train_timesteps == 3
    # Flow-GRPO with CFG as on SD3.5: both branches in the rollout and the replay, CFG in the eval
    cfg = load_config("experiment/toy/shapes_grpo_cfg")
    plan = StepSizes.from_config(cfg)
    assert (plan.uses_cfg, plan.num_train_timesteps, cfg.rollout.guidance_scale, cfg.eval.guidance_scale) == (
        True,
        3,
        3.0,
        3.0,
    )
    assert not StepSizes.from_config(load_config("experiment/toy/shapes_grpo")).uses_cfg


def test_grpo_still_needs_sde_log_probs():
    assert "rollout.noise_level=0" in problems("experiment/toy/shapes_grpo", "rollout.noise_level=0")


def test_nft_is_cfg_free_and_its_kl_is_on_the_velocity():
    assert "rollout.guidance_scale=1.0" in problems("experiment/toy/shapes_nft", "rollout.guidance_scale=4.5")
    assert "algorithm.kl_type=velocity" in problems("experiment/toy/shapes_nft", "algorithm.kl_type=latent_mean")
    assert "algorithm.nft.beta" in problems("experiment/toy/shapes_nft", "algorithm.nft.beta=0")
    assert "algorithm.nft.adv_mode" in problems("experiment/toy/shapes_nft", "algorithm.nft.adv_mode=sign")
    assert "old_decay_max" in problems("experiment/toy/shapes_nft", "algorithm.nft.old_decay_max=1.0")


def test_awm_reads_its_own_options_and_trains_its_strata():
    from genalign.preflight.step_sizes import StepSizes

    cfg = load_config("experiment/toy/shapes_awm")
    assert (cfg.algorithm.name, cfg.rollout.noise_level, cfg.algorithm.drop_zero_advantage) == ("awm", 0.0, False)
    # 6 stratified σ's per sample whatever the schedule (10 steps, fraction 0.9 would be 9)
    assert StepSizes.from_config(cfg).num_train_timesteps == 6
    assert "algorithm.kl_type=velocity" in problems("experiment/toy/shapes_awm", "algorithm.kl_type=latent_mean")
    assert "algorithm.awm.ghuber_power" in problems("experiment/toy/shapes_awm", "algorithm.awm.ghuber_power=0")
    assert "algorithm.awm.weighting" in problems("experiment/toy/shapes_awm", "algorithm.awm.weighting=Uniform")
    assert "anchor_decay_max" in problems("experiment/toy/shapes_awm", "algorithm.awm.anchor_decay_max=1.0")
    # index 0 skipped: a 1-step schedule leaves no index to draw from
    assert "raise rollout.num_steps" in problems("experiment/toy/shapes_awm", "rollout.num_steps=1")
    assert "is an AWM option" in problems("experiment/toy/shapes_grpo", "algorithm.awm.train_timesteps=3")


def test_dpo_needs_pairs():
    assert "rollout.n must be >= 2" in problems(
        "experiment/toy/shapes_dpo", "rollout.n=1", "rollout.sample_batch_size=8"
    )
    assert "needs data.preference_manifest" in problems("experiment/toy/shapes_dpo", "algorithm.dpo.source=offline")
    assert "algorithm.dpo.source" in problems("experiment/toy/shapes_dpo", "algorithm.dpo.source=disk")
    assert "algorithm.dpo.sample_with='old'" in problems("experiment/toy/shapes_dpo", "algorithm.dpo.sample_with=old")
    assert "algorithm.dpo.tied_groups='skip'" in problems("experiment/toy/shapes_dpo", "algorithm.dpo.tied_groups=skip")
    assert "ref_update_step must be >= 0" in problems("experiment/toy/shapes_dpo", "algorithm.dpo.ref_update_step=-1")
    assert "unused by algorithm.name=dpo" in problems("experiment/toy/shapes_dpo", "algorithm.kl_beta=0.1")
    message = problems("experiment/toy/shapes_grpo", "data.preference_manifest=datasets/toy/preferences/pairs.jsonl")
    assert "only algorithm.name=dpo" in message
    assert "gradient_accumulation_steps=3" in problems(
        "experiment/toy/offline_dpo",
        "actor.gradient_accumulation_steps=3",
        "actor.micro_batch_size=2",
        "rollout.sample_batch_size=2",
    )


def test_offline_manifest_problems_are_found_before_model_load(tmp_path):
    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text('{"prompt": "a red circle", "chosen": "nope.png", "rejected": "nope.png"}\n')
    with pytest.raises(ConfigError) as error:
        load_config(
            "experiment/toy/offline_dpo",
            [f"data.preference_manifest={manifest}", f"trainer.output_dir={tmp_path / 'out'}"],
            check_files=True,
        )
    assert f"{manifest}:1" in str(error.value) and "does not exist" in str(error.value)
