"""The SD3.5 AWM recipes: the reference's geneval_sd3_no_cfg_1node / ocr_sd3_no_cfg_1node
(scxue/advantage_weighted_matching config/dgx_awm.py, be51372) as one global batch."""

import pytest

from genalign.preflight.load import load_config
from genalign.preflight.step_sizes import StepSizes

# the reference, per config: (KL to the base, evaluation every)
REFERENCE = {"geneval": (1e-3, 50), "ocr": (3e-3, 20)}


@pytest.mark.parametrize("task", sorted(REFERENCE))
def test_sd3_awm_recipe_is_the_reference_s(task):
    cfg = load_config(f"experiment/diffusion/sd3_5/online_awm_{task}")
    plan = StepSizes.from_config(cfg)
    # 8 GPUs x 6 prompts x 36 sampling batches, 24 images per prompt; train micro-batch 3 and one
    # optimizer update per epoch (its accumulation = every micro-batch: on-policy)
    assert (cfg.rollout.n, plan.samples_per_step, plan.train_micro_batch) == (24, 8 * 6 * 36, 3)
    assert plan.optimizer_steps_per_step == 1 and plan.num_train_timesteps == 6
    assert (cfg.rollout.num_steps, cfg.rollout.guidance_scale, cfg.rollout.noise_level) == (14, 1.0, 0.0)
    assert (cfg.rollout.height, cfg.rollout.width) == (512, 512)
    # use_sa_solver=True: τ = sample.noise_level 0.4 on t in [0.3, 0.9], orders 2 and 2 (PEC)
    sa = cfg.rollout.sa_solver
    assert cfg.rollout.sampler == "sa_solver"
    assert (sa.tau, sa.tau_sigma_min, sa.tau_sigma_max, sa.predictor_order, sa.corrector_order) == (0.4, 0.3, 0.9, 2, 2)
    algorithm, awm = cfg.algorithm, cfg.algorithm.awm
    assert (algorithm.name, algorithm.kl_beta, algorithm.kl_type) == ("awm", REFERENCE[task][0], "velocity")
    assert (algorithm.timestep_fraction, algorithm.adv_clip_max, algorithm.drop_zero_advantage) == (0.9, 5.0, False)
    assert algorithm.advantage.global_std and algorithm.advantage.std == "population"
    assert (awm.train_timesteps, awm.time_sampling, awm.weighting, awm.ghuber_power) == (
        6,
        "discrete_wo_init",
        "ghuber",
        0.25,
    )
    assert (awm.advantage_max, awm.anchor_kl_beta, awm.anchor_decay_rate, awm.anchor_decay_max) == (1.0, 1.0, 1e-3, 0.3)
    assert (cfg.actor.lr, cfg.actor.weight_decay, cfg.actor.max_grad_norm) == (3e-4, 1e-4, 1.0)
    assert cfg.actor.ema.enabled and cfg.actor.ema.decay == 0.99 and cfg.eval.use_ema
    assert (cfg.model.lora.rank, cfg.model.lora.alpha) == (32, 64)
    assert (cfg.eval.every, cfg.eval.num_steps, cfg.eval.guidance_scale) == (REFERENCE[task][1], 40, 1.0)
