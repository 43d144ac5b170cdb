"""DGPO (docs/algorithms.md §9): its formulas against a transcription of the reference's
computation, its draws, and the algorithm class on the linear test policy."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from support import make_groups

from genalign.algorithms.config import AlgorithmConfig, DGPOConfig
from genalign.algorithms.dgpo import DGPO, group_samples
from genalign.algorithms.forward_draws import first_member_seeds, group_draws
from genalign.algorithms.forward_losses import dgpo_clip_mask, dgpo_group_weights, dgpo_policy_loss, velocity_error
from genalign.algorithms.losses import velocity_kl
from genalign.preflight.load import load_config
from genalign.rollout.collector import SamplingSpec, generate
from genalign.weights.reference import ReferencePolicy

F32 = torch.finfo(torch.float32).eps


def reference_dgpo_step(
    model_v, ref_v, old_v, target_v, advantages, group_ids, group_size, beta_dpo, clip_range, kl_beta
):
    """Transcription, in our words, of one micro-batch of Luo-Yihong/DGPO scripts/train_sd3_dgpo.py
    at 01ceb4b8 (one process, so its all-reduce is the identity; clip_dsm on, clip_kl off):
    the error, the PPO-style clip against the EMA ("old") error, `compute_group_dgpo_loss_allreduce`
    and the KL."""
    b = model_v.shape[0]
    dsm = (target_v - model_v).square().reshape(b, -1).mean(dim=1)
    old_dsm = (target_v - old_v).square().reshape(b, -1).mean(dim=1)
    ratio = torch.exp(-dsm + old_dsm)
    should_clip = torch.where(advantages > 0, ratio > 1.0 + clip_range, ratio < 1.0 - clip_range)
    dsm = torch.where(should_clip, dsm.detach(), dsm)
    with torch.no_grad():
        ref_dsm = (target_v - ref_v).square().reshape(b, -1).mean(dim=1)
    delta = dsm.detach() - ref_dsm.detach()
    per_sample = advantages * beta_dpo * delta / group_size
    _, inverse = torch.unique(group_ids, return_inverse=True)
    sums = torch.zeros(int(inverse.max()) + 1).scatter_add_(0, inverse, per_sample)
    weights = torch.sigmoid(sums)[inverse]
    loss = (weights.detach() * advantages * dsm).mean()
    kl = (model_v - ref_v).square().reshape(b, -1).mean(dim=1).mean()
    return loss + kl_beta * kl, should_clip


def random_case(seed=0, groups=3, size=4, shape=(2, 3, 3)):
    g = torch.Generator().manual_seed(seed)
    b = groups * size
    target = torch.randn(b, *shape, generator=g)
    ref = target + 0.3 * torch.randn(b, *shape, generator=g)
    old = target + 0.3 * torch.randn(b, *shape, generator=g)
    model = (old + 0.1 * torch.randn(b, *shape, generator=g)).requires_grad_(True)
    rewards = torch.randn(b, generator=g)
    group_ids = torch.arange(groups).repeat_interleave(size)[torch.randperm(b, generator=g)]  # interleaved
    return model, ref, old, target, rewards, group_ids


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_loss_and_its_gradient_equal_the_reference_computation(seed):
    model, ref, old, target, advantages, group_ids = random_case(seed)
    beta, clip_range, kl_beta, size = 100.0, 1e-2, 0.02, 4
    expected, expected_clip = reference_dgpo_step(
        model, ref, old, target, advantages, group_ids, size, beta, clip_range, kl_beta
    )
    (expected_grad,) = torch.autograd.grad(expected, model)

    error = velocity_error(model, target)
    dense = torch.unique(group_ids, return_inverse=True)[1]
    weights = dgpo_group_weights(
        advantages, error - velocity_error(ref, target), dense, torch.full_like(dense, size), beta
    )
    clip = dgpo_clip_mask(error, velocity_error(old, target), advantages, clip_range)
    ours = dgpo_policy_loss(error, weights, advantages, clip) + kl_beta * velocity_kl(model, ref).mean()
    (grad,) = torch.autograd.grad(ours, model)

    assert torch.equal(clip, expected_clip) and clip.any() and not clip.all()  # the clip acts on some samples
    # the same float32 operations up to summation order: 18-term means, 4-term group sums
    torch.testing.assert_close(ours, expected, rtol=64 * F32, atol=0.0)
    torch.testing.assert_close(grad, expected_grad, rtol=64 * F32, atol=64 * F32 * float(expected_grad.abs().max()))


def test_group_weight_is_the_sigmoid_of_the_group_logit_by_hand():
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    gap = torch.tensor([-0.02, 0.01, 0.04, 0.0])  # e_θ − e_ref
    groups = torch.tensor([0, 0, 1, 1])
    weights = dgpo_group_weights(advantages, gap, groups, torch.tensor([2, 2, 2, 2]), beta=100.0)
    # group 0: 100·(1·−0.02 + −1·0.01)/2 = −1.5; group 1: 100·(0.5·0.04)/2 = 1.0
    expected = torch.sigmoid(torch.tensor([-1.5, -1.5, 1.0, 1.0]))
    torch.testing.assert_close(weights, expected, rtol=8 * F32, atol=0.0)


def test_the_clip_stops_the_gradient_only_where_the_move_is_already_large_in_the_advantages_direction():
    error = torch.tensor([1.0, 1.0, 1.0, 1.0], requires_grad=True)
    old = torch.tensor([1.5, 1.005, 0.5, 0.995])  # ρ = e^0.5, e^0.005, e^-0.5, e^-0.005
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    clip = dgpo_clip_mask(error, old, advantages, 1e-2)
    assert clip.tolist() == [True, False, True, False]
    loss = dgpo_policy_loss(error, torch.full((4,), 0.5), advantages, clip)
    (grad,) = torch.autograd.grad(loss, error)
    assert grad.tolist() == [0.0, 0.5 / 4, 0.0, -0.5 / 4]


def test_a_group_shares_its_sigma_and_noise_and_the_draws_do_not_depend_on_the_batch():
    seeds = torch.tensor([101, 102, 103, 201, 202, 203])
    group_ids = torch.tensor([4, 4, 4, 7, 7, 7])
    keys = first_member_seeds(seeds, group_ids)
    assert keys.tolist() == [101, 101, 101, 201, 201, 201]
    sigmas = torch.linspace(1.0, 0.0, 11)
    columns = [group_draws(keys, seeds, j, sigmas, 7, (2, 2), torch.device("cpu")) for j in range(4)]
    for sigma, noise in columns:
        assert sigma[:3].unique().numel() == 1 and sigma[3:].unique().numel() == 1
        assert torch.equal(noise[0], noise[2]) and torch.equal(noise[3], noise[5])
        assert not torch.equal(noise[0], noise[3])
        assert bool((sigma >= sigmas[6]).all())  # the 7 noisiest entries only
    per_group = torch.stack([sigma for sigma, _ in columns])[:, 0]  # [4] distinct positions of group 4
    assert per_group.unique().numel() == 4
    alone_sigma, alone_noise = group_draws(keys[4:5], seeds[4:5], 2, sigmas, 7, (2, 2), torch.device("cpu"))
    assert alone_sigma[0] == columns[2][0][4] and torch.equal(alone_noise[0], columns[2][1][4])
    _, own = group_draws(keys, seeds, 0, sigmas, 7, (2, 2), torch.device("cpu"), shared_noise=False)
    assert not torch.equal(own[0], own[1])  # per-sample ε, the σ still the group's


def trainable(policy):
    return {name: p for name, p in policy.transformer.named_parameters() if p.requires_grad}


def ode_rollout(policy, groups=2, size=3):
    spec = SamplingSpec(height=4, width=4, num_steps=8, guidance_scale=1.0, noise_level=0.0, chunk_size=4)
    return generate(policy, make_groups(groups, size), spec)


def dgpo_config(**dgpo):
    return AlgorithmConfig(name="dgpo", kl_beta=0.02, kl_type="velocity", dgpo=DGPOConfig(**dgpo))


def build(policy, cfg):
    reference = ReferencePolicy(policy, train_mode="full")
    return DGPO(cfg, reference=reference, parameters=trainable(policy))


def test_at_the_start_every_group_weight_is_one_half_and_micro_batches_add_up(linear_policy):
    """θ = θ_ema = θ_ref: the gap is 0 (weights σ(0)), nothing is clipped, the KL is 0; the
    weights do not depend on the chunking, and the loss of two halves averages to the whole's."""
    batch = ode_rollout(linear_policy)
    algo = build(linear_policy, dgpo_config())
    advantages = torch.tensor([1.0, -0.5, -0.5, 0.3, 0.0, -0.3])
    units, unit_advantages = algo.training_batch(batch, advantages)
    whole = algo.prepare_update(linear_policy, units, algo.train_step_indices(units), 6)
    chunked = algo.prepare_update(linear_policy, units, algo.train_step_indices(units), 2)
    assert whole.group_weights.shape == (6, 4)
    torch.testing.assert_close(whole.group_weights, torch.full((6, 4), 0.5), rtol=0, atol=1e-6)
    torch.testing.assert_close(chunked.group_weights, whole.group_weights, rtol=0, atol=1e-6)
    loss, stats = algo.compute_loss(linear_policy, whole, unit_advantages, 1)
    assert not stats["dgpo_clip_fraction"].any() and float(stats["kl"].abs().max()) < 1e-10
    halves = [
        algo.compute_loss(linear_policy, whole.index(part), unit_advantages[part], 1)[0]
        for part in ([0, 1, 2], [3, 4, 5])
    ]
    torch.testing.assert_close((halves[0] + halves[1]) / 2, loss, rtol=16 * F32, atol=1e-9)
    expected = 0.5 * (unit_advantages * stats["dgpo_velocity_error"]).mean()
    torch.testing.assert_close(loss, expected, rtol=16 * F32, atol=1e-9)


def test_the_ema_weights_follow_the_reference_schedule_and_the_rollout_switches_to_them(linear_policy):
    params = trainable(linear_policy)
    algo = build(linear_policy, dgpo_config(sample_with_ema_after=2))
    first = {n: p.detach().clone() for n, p in params.items()}
    with torch.no_grad():
        for p in params.values():
            p.add_(1.0)
    assert algo.after_update(1) == {"dgpo_ema_decay": 0.0}  # η = min(0.001·0, 0.3): a hard copy
    for name, p in params.items():
        assert torch.equal(algo.ema.shadow[name], p.detach())
    assert algo.after_update(0) == {"dgpo_ema_decay": 1.0}  # no optimizer step: unchanged
    copied = {n: t.clone() for n, t in algo.ema.shadow.items()}
    with torch.no_grad():
        for p in params.values():
            p.add_(1.0)
    assert algo.after_update(1) == {"dgpo_ema_decay": pytest.approx(0.001)}
    for name, p in params.items():
        torch.testing.assert_close(algo.ema.shadow[name], 0.001 * copied[name] + 0.999 * p.detach())
    live = {n: p.detach().clone() for n, p in params.items()}
    with algo.rollout_weights():  # 2 optimizer steps done: not yet more than 2
        assert all(torch.equal(p.detach(), live[n]) for n, p in params.items())
    algo.after_update(1)
    with algo.rollout_weights():
        assert all(torch.equal(p.detach(), algo.ema.shadow[n]) for n, p in params.items())
    assert all(torch.equal(p.detach(), live[n]) for n, p in params.items())  # restored
    assert not torch.equal(live["latent.bias"], first["latent.bias"])


def test_the_state_round_trips(linear_policy):
    params = trainable(linear_policy)
    algo = build(linear_policy, dgpo_config())
    with torch.no_grad():
        for p in params.values():
            p.add_(0.5)
    algo.after_update(3)
    algo.after_update(2)
    restored = build(linear_policy, dgpo_config())
    restored.load_state_dict(algo.state_dict())
    assert restored.optimizer_steps == 5
    assert all(torch.equal(restored.ema.shadow[n], algo.ema.shadow[n]) for n in params)


def test_the_ema_reference_needs_no_frozen_model_without_a_kl(linear_policy):
    cfg = dataclasses.replace(dgpo_config(ema_reference=True), kl_beta=0.0)
    assert DGPO.reference_kind(cfg) == "none"
    assert DGPO.reference_kind(dgpo_config()) == DGPO.reference_kind(dgpo_config(ema_reference=True)) == "frozen"
    algo = DGPO(cfg, parameters=trainable(linear_policy))
    batch = ode_rollout(linear_policy)
    units, advantages = algo.training_batch(batch, torch.linspace(-1, 1, len(batch)))
    prepared = algo.prepare_update(linear_policy, units, [0, 1], 3)
    torch.testing.assert_close(prepared.group_weights, torch.full((6, 2), 0.5), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="frozen initial model"):
        DGPO(dgpo_config(), parameters=trainable(linear_policy))


def test_group_samples_know_their_group_and_its_key(linear_policy):
    batch = ode_rollout(linear_policy, groups=2, size=3)
    units = group_samples(batch, torch.zeros(6))
    assert units.group_index.tolist() == [0, 0, 0, 1, 1, 1] and units.group_sizes.tolist() == [3] * 6
    assert units.group_seeds.tolist() == [int(batch.seeds[0])] * 3 + [int(batch.seeds[3])] * 3
    assert torch.equal(units.clean, batch.latents[:, -1])
    part = units.index([4, 1])
    assert part.group_index.tolist() == [1, 0] and part.prompts == [batch.prompts[4], batch.prompts[1]]


REFERENCE_DEFAULTS = {
    # Luo-Yihong/DGPO config/dgpo.py at 01ceb4b8: general_ocr_sd3_4gpu (its README's default run,
    # scripts/single_node/sd3_dgpo_ocr.sh) over `compressibility` over config/base.py
    "beta": 100.0,  # config.train.beta_dpo
    "num_timesteps": 4,  # config.num_train_timesteps
    "max_timestep_index": 6,  # config.trunc_steps
    "shared_noise": True,  # config.use_shared_noise
    "clip_range": 1e-2,  # config.clip_range
    "clip_error": True,  # config.clip_dsm
    "clip_kl": False,  # config.clip_kl
    "ema_reference": False,  # config.use_ema_ref (base.py)
    "reference_guidance_scale": 1.0,  # config.kl_cfg (base.py)
    "ema_decay_rate": 0.001,  # ema_ref_decay = min(0.3, 0.001 * global_step)
    "ema_decay_max": 0.3,
    "sample_with_ema_after": 200,  # config.switch_ema_ref
}


def test_defaults_are_the_reference_recipe():
    assert dataclasses.asdict(DGPOConfig()) == REFERENCE_DEFAULTS
    cfg = load_config("experiment/toy/shapes_dgpo")
    assert dataclasses.asdict(cfg.algorithm.dgpo) == REFERENCE_DEFAULTS
    algorithm = cfg.algorithm
    assert (algorithm.kl_beta, algorithm.kl_type, algorithm.adv_clip_max) == (0.02, "velocity", 5.0)  # train.beta
    assert algorithm.drop_zero_advantage is False  # the reference computes the mask but never applies it
    assert algorithm.advantage.global_std is True  # sample.global_std in general_ocr_sd3_4gpu
    assert cfg.rollout.noise_level == 0.0  # sample.noise_level: a deterministic sampler


def test_config_problems():
    cfg = load_config("experiment/toy/shapes_dgpo")
    assert DGPO.config_problems(cfg) == []

    def problems(**changes):
        algorithm = dataclasses.replace(cfg.algorithm, **changes)
        return DGPO.config_problems(dataclasses.replace(cfg, algorithm=algorithm))

    assert any("kl_type=velocity" in p for p in problems(kl_type="latent_mean"))
    dgpo = cfg.algorithm.dgpo
    assert any(
        "0..algorithm.dgpo.max_timestep_index" in p for p in problems(dgpo=dataclasses.replace(dgpo, num_timesteps=8))
    )
    assert any(
        "reference_guidance_scale" in p for p in problems(dgpo=dataclasses.replace(dgpo, reference_guidance_scale=4.5))
    )
    single = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, n=1))
    assert any("rollout.n must be >= 2" in p for p in DGPO.config_problems(single))
    short = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, num_steps=6))
    assert any("max_timestep_index=6 indexes" in p for p in DGPO.config_problems(short))


def test_the_step_sizes_count_dgpo_s_own_positions():
    from genalign.preflight.step_sizes import StepSizes

    cfg = load_config("experiment/toy/shapes_dgpo")
    assert StepSizes.from_config(cfg).num_train_timesteps == 4  # not int(10 · timestep_fraction)
    assert StepSizes.from_config(load_config("experiment/toy/shapes_nft")).num_train_timesteps == 9


def test_timestep_fraction_does_not_limit_dgpo_s_positions():
    """3 schedule steps at the toy's timestep_fraction 0.3 train int(0.9) = 0 stored steps: an
    error for an algorithm that counts by it, not for DGPO, which draws its own σ's."""
    from genalign.config.errors import ConfigError

    short = ["rollout.num_steps=3", "algorithm.dgpo.num_timesteps=2", "algorithm.dgpo.max_timestep_index=2"]
    assert load_config("experiment/toy/shapes_dgpo", short).algorithm.timestep_fraction == 0.3
    with pytest.raises(ConfigError, match="trains int"):
        load_config("experiment/toy/shapes_grpo", ["rollout.num_steps=3"])
