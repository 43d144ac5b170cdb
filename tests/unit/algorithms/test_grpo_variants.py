"""GRPO variants on one replay path: parity and ratio 1 for every kernel and window,
DanceGRPO timestep selection, GRPO-Guard, and rollout correction of a stale rollout."""

import copy

import pytest
import torch
from support import make_groups

from genalign.algorithms.config import AlgorithmConfig, GuardConfig, RolloutCorrectionConfig
from genalign.algorithms.grpo import FlowGRPO, GRPOGuard
from genalign.algorithms.replay import replay_log_probs
from genalign.rollout.collector import SamplingSpec, generate
from genalign.sampling.kernels import KERNELS, ode_step
from genalign.sampling.windows import WindowSchedule
from genalign.training.parity import replay_parity

WINDOWS = {
    "none": None,
    "fast": WindowSchedule("random", 2, 0, 3, seed=42),
    "mix": WindowSchedule("progressive", 2, 0, 5, seed=0, shift_every=1),
}


def rollout(
    policy, kernel="flow_sde", window=None, step=1, guidance=1.0, record_means=False, ode_final_step=False, num_steps=6
):
    spec = SamplingSpec(
        height=4,
        width=4,
        num_steps=num_steps,
        guidance_scale=guidance,
        noise_level=0.7,
        chunk_size=3,
        kernel=kernel,
        window=window,
        record_means=record_means,
        ode_final_step=ode_final_step,
    ).at_step(step)
    return generate(policy, make_groups(), spec)


@pytest.mark.parametrize("kernel", sorted(KERNELS))
@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_parity_and_ratio_one_for_every_kernel_and_window(linear_policy, kernel, window):
    for step in (1, 3):
        batch = rollout(linear_policy, kernel, WINDOWS[window], step=step, guidance=4.5)
        assert batch.kernel == kernel
        algo = FlowGRPO(AlgorithmConfig(clip_range=1e-4))
        steps = algo.train_step_indices(batch)
        assert steps and batch.sde_mask.gather(1, algo.trained_steps(batch)).all()  # each sample's own steps
        parity = replay_parity(linear_policy, batch, steps, chunk_size=3, replay=algo.replay_log_probs)
        assert max(parity.values()) == 0.0
        _, stats = algo.compute_loss(linear_policy, batch.index(slice(0, 3)), torch.ones(3), steps[0])
        assert torch.equal(stats["ratio"], torch.ones(3))


def test_window_steps_outside_are_euler_with_zero_log_prob(linear_policy):
    batch = rollout(linear_policy, window=WINDOWS["mix"], step=3)  # window [2, 4)
    assert batch.sde_mask.tolist() == [[False, False, True, True, False, False]] * 6
    assert (batch.log_probs[:, [0, 1, 4, 5]] == 0).all() and (batch.log_probs[:, 2:4] != 0).all()
    cond = linear_policy.encode_prompts(batch.prompts, with_negative=False)
    sigma = torch.full((6,), float(batch.sigmas[0]))
    velocity = linear_policy.velocity(batch.latents[:, 0], sigma, cond, 1.0)
    torch.testing.assert_close(
        batch.latents[:, 1], ode_step(batch.latents[:, 0], velocity, batch.sigmas[0], batch.sigmas[1])
    )
    assert FlowGRPO(AlgorithmConfig()).train_step_indices(batch) == [0, 1]  # positions
    assert FlowGRPO(AlgorithmConfig()).trained_steps(batch).tolist() == [[2, 3]] * 6


def test_dance_random_timestep_selection(linear_policy):
    batch = rollout(linear_policy, kernel="dance_sde", ode_final_step=True, num_steps=10)
    assert batch.sde_mask.tolist() == [[True] * 9 + [False]] * 6
    algo = FlowGRPO(AlgorithmConfig(timestep_fraction=0.6, timestep_selection="random"))
    chosen = algo.trained_steps(batch)  # [6 samples, 6 steps]
    assert algo.train_step_indices(batch) == list(range(6))
    for row in chosen.tolist():
        assert len(set(row)) == 6 and row == sorted(row) and 9 not in row
    assert len({tuple(row) for row in chosen.tolist()}) > 1  # DanceGRPO: a permutation per sample
    assert torch.equal(chosen, algo.trained_steps(batch))  # every caller (parity, update) sees the same table
    # a micro-batch's rows are the whole batch's rows: the draw is a function of each sample alone
    assert torch.equal(algo.trained_steps(batch.index([4, 1])), chosen[[4, 1]])
    other = FlowGRPO(AlgorithmConfig(timestep_fraction=0.6)).trained_steps(batch)
    assert other.tolist() == [[0, 1, 2, 3, 4, 5]] * 6
    # a different step's samples draw a different subset (with overwhelming probability)
    later = rollout(linear_policy, kernel="dance_sde", ode_final_step=True, num_steps=10)
    later.seeds = later.seeds + 1
    assert not torch.equal(algo.trained_steps(later), chosen)


def test_grpo_guard_on_policy_and_step_weight(linear_policy):
    batch = rollout(linear_policy, record_means=True)
    assert batch.means.shape == batch.latents[:, 1:].shape
    algo = GRPOGuard(AlgorithmConfig(name="grpo_guard", clip_range=2e-6))
    micro = batch.index(slice(0, 3))
    advantages = torch.tensor([1.0, -1.0, 0.5])
    loss, stats = algo.compute_loss(linear_policy, micro, advantages, 1)
    assert torch.equal(stats["ratio"], torch.ones(3))
    # ratio 1 -> policy loss −mean(A), divided by |Δσ_1|
    delta_sigma = float(batch.sigmas[1] - batch.sigmas[2])
    assert loss.item() == pytest.approx(-advantages.mean().item() / delta_sigma, rel=1e-6)
    plain = GRPOGuard(AlgorithmConfig(name="grpo_guard", guard=GuardConfig(reweight=False)))
    assert plain.compute_loss(linear_policy, micro, advantages, 1)[0].item() == pytest.approx(-advantages.mean().item())
    # after a change of weights the normalised ratio is exp(mean(ε ⊙ δ)), not the plain ratio
    with torch.no_grad():
        linear_policy.transformer.latent.bias.add_(0.05)
    _, guarded = algo.compute_loss(linear_policy, micro, advantages, 1)
    _, unguarded = FlowGRPO(AlgorithmConfig()).compute_loss(linear_policy, micro, advantages, 1)
    assert not torch.equal(guarded["ratio"], unguarded["ratio"])
    with pytest.raises(ValueError, match="kernel means"):
        algo.compute_loss(linear_policy, rollout(linear_policy).index(slice(0, 3)), advantages, 1)


def test_rollout_correction_of_a_stale_rollout(linear_policy):
    """A rollout sampled by an older adapter: the truncated importance weight is
    min(exp(ℓ_current − ℓ_stale), C), and the PPO ratio is taken against the current policy."""
    stale_policy = copy.deepcopy(linear_policy)
    batch = rollout(stale_policy, guidance=4.5)  # behaviour log-probs of the stale weights
    with torch.no_grad():  # the trained policy has moved on since
        linear_policy.transformer.latent.weight.mul_(1.02)
    cfg = AlgorithmConfig(rollout_correction=RolloutCorrectionConfig(mode="truncate", threshold=1.05))
    algo = FlowGRPO(cfg)
    steps = algo.train_step_indices(batch)
    prepared = algo.prepare_update(linear_policy, batch, steps, micro_batch_size=3)
    current = replay_log_probs(linear_policy, batch, steps, chunk_size=3)  # [B, T]
    assert torch.equal(prepared.proximal_log_probs, current)
    micro = prepared.index(slice(0, 3))
    advantages = torch.tensor([1.0, -1.0, 0.5])
    loss, stats = algo.compute_loss(linear_policy, micro, advantages, 2)
    assert torch.equal(stats["ratio"], torch.ones(3))  # on-policy w.r.t. the current weights
    weights = torch.exp(current[:3, 2] - batch.log_probs[:3, 2]).clamp(max=1.05)
    assert not torch.allclose(weights, torch.ones(3))  # the rollout really was stale
    torch.testing.assert_close(stats["rollout_is_weight"], weights)
    torch.testing.assert_close(loss, -(weights * advantages).mean())
    # without correction the same batch is scored against the stale log-probs: ratio != 1
    _, uncorrected = FlowGRPO(AlgorithmConfig()).compute_loss(linear_policy, batch.index(slice(0, 3)), advantages, 2)
    assert not torch.equal(uncorrected["ratio"], torch.ones(3))
    # off by default: prepare_update leaves the batch alone
    assert FlowGRPO(AlgorithmConfig()).prepare_update(linear_policy, batch, steps, 3) is batch


@pytest.mark.parametrize("fraction", [0.6, 0.99])
def test_dance_trained_step_count_is_its_reference_formula_at_every_step_count(fraction):
    """DanceGRPO (train_grpo_flux.py) trains int(len(timesteps) * timestep_fraction) steps of a
    random permutation per sample. With the recipe's Euler final step (rollout.ode_final_step)
    and the final step excluded, every sample's count still equals the formula for every T
    from 1 to 60."""
    from types import SimpleNamespace

    from genalign.sampling.windows import sde_step_mask

    algorithm = FlowGRPO(AlgorithmConfig(timestep_fraction=fraction, timestep_selection="random"))
    for steps in range(1, 61):
        mask = sde_step_mask(steps, 0.3, None, ode_final_step=True).expand(8, -1)  # [8, T]
        batch = SimpleNamespace(sde_mask=mask, num_steps=steps, seeds=torch.arange(8))
        table = algorithm.trained_steps(batch)  # [8, K]
        assert algorithm.train_step_indices(batch) == list(range(int(steps * fraction))), steps
        assert table.shape == (8, int(steps * fraction)), steps
        for row in table.tolist():
            assert len(set(row)) == len(row) and all(0 <= j < steps - 1 for j in row)
