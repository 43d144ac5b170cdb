"""Flow-GRPO replay: parity with the rollout, exact on-policy ratio, KL zero at the start."""

import pytest
import torch
from support import make_groups

from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.grpo import FlowGRPO
from genalign.rollout.collector import SamplingSpec, generate
from genalign.training.parity import replay_parity
from genalign.weights.reference import ReferencePolicy


def rollout(policy, guidance=1.0, chunk=3, kernel="flow_sde"):
    spec = SamplingSpec(
        height=4, width=4, num_steps=4, guidance_scale=guidance, noise_level=0.7, chunk_size=chunk, kernel=kernel
    )
    return generate(policy, make_groups(), spec)


def test_train_steps_follow_timestep_fraction(linear_policy):
    batch = rollout(linear_policy)
    assert FlowGRPO(AlgorithmConfig(timestep_fraction=0.99)).train_step_indices(batch) == [0, 1, 2]
    assert FlowGRPO(AlgorithmConfig(timestep_fraction=0.5)).train_step_indices(batch) == [0, 1]


def test_replay_with_unchanged_weights_is_bitwise_equal(linear_policy):
    for guidance in (1.0, 4.5):
        batch = rollout(linear_policy, guidance)
        gaps = replay_parity(linear_policy, batch, [0, 1, 2, 3], chunk_size=3)
        assert max(gaps.values()) == 0.0


def test_ratio_is_exactly_one_before_the_first_update(linear_policy):
    batch = rollout(linear_policy, guidance=4.5)
    algo = FlowGRPO(AlgorithmConfig(clip_range=1e-4))
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, 0.0])
    micro = batch.index(slice(0, 3))
    loss, stats = algo.compute_loss(linear_policy, micro, advantages[:3], 1)
    assert torch.equal(stats["ratio"], torch.ones(3))
    assert torch.equal(stats["log_prob_drift"], torch.zeros(3))
    # ratio 1 -> loss = -mean(A)
    assert torch.isclose(loss, -advantages[:3].mean())
    loss.backward()
    grads = [p.grad for p in linear_policy.transformer.parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("kernel", ["flow_sde", "dance_sde", "em_sde", "cps"])
def test_kl_to_reference_is_zero_before_update_and_positive_after(linear_policy, kernel):
    # the latent-mean KL divides by the kernel's own noise scale (CPS: c = σ_next·sin(aπ/2))
    batch = rollout(linear_policy, guidance=4.5, kernel=kernel)
    reference = ReferencePolicy(linear_policy, train_mode="full")
    algo = FlowGRPO(AlgorithmConfig(kl_beta=0.04), reference)
    micro = batch.index(slice(0, 3))
    _, stats = algo.compute_loss(linear_policy, micro, torch.ones(3), 0)
    assert torch.equal(stats["kl"], torch.zeros(3))
    with torch.no_grad():
        linear_policy.transformer.latent.bias.add_(0.1)
    loss, stats = algo.compute_loss(linear_policy, micro, torch.ones(3), 0)
    assert torch.isfinite(stats["kl"]).all() and (stats["kl"] > 0).all()
    # the reference pass restored the trained weights
    assert linear_policy.transformer is not reference._frozen_copy
