"""Flow-GRPO-Fast's per-sampling-batch SDE windows, from rollout through replay and the update.

flow_grpo's `train_sd3_fast.py` draws a window in every sampling pipeline call, and trains
each sample at the steps of its own window. Here: a step of 4 sampling batches (chunks of 3)
draws distinct windows, every sample is stochastic exactly in its batch's window, and the
replay and the update score each sample at exactly its own window's steps.
"""

from __future__ import annotations

import pytest
import torch
from support import LinearPolicy, assert_close_reordered, make_groups

from genalign.algorithms.config import AlgorithmConfig
from genalign.algorithms.grpo import FlowGRPO
from genalign.rollout.collector import SamplingSpec, generate
from genalign.sampling.windows import WindowSchedule
from genalign.training.config import ActorConfig
from genalign.training.parity import replay_parity
from genalign.training.update import UpdateContext, run_update

CHUNK = 3
WINDOW = WindowSchedule("random", 2, 0, 5, seed=42)  # 2 steps in the high-noise half of 10


def fast_rollout(policy: LinearPolicy, step: int):
    spec = SamplingSpec(
        height=4, width=4, num_steps=10, guidance_scale=4.5, noise_level=0.7, chunk_size=CHUNK, window=WINDOW
    ).at_step(step)
    return generate(policy, make_groups(prompts_per_step=4, samples_per_prompt=3), spec)  # 12 samples


def windows_of_step(step: int) -> list[tuple[int, int]]:
    return [WINDOW.bounds(step, first) for first in range(0, 12, CHUNK)]


# the first training step whose 4 sampling batches draw at least 3 different windows (a pure
# function of (seed, step, batch), so this is the same step on every machine)
STEP = next(step for step in range(1, 50) if len(set(windows_of_step(step))) >= 3)


@pytest.fixture
def policy():
    return LinearPolicy()


def test_each_sampling_batch_is_stochastic_in_its_own_window(policy):
    batch = fast_rollout(policy, STEP)
    for sample in range(len(batch)):
        start, stop = windows_of_step(STEP)[sample // CHUNK]
        expected = [start <= j < stop for j in range(10)]
        assert batch.sde_mask[sample].tolist() == expected, sample
        assert ((batch.log_probs[sample] != 0).tolist()) == expected, sample  # Euler steps: log-prob 0
    # the trained steps are each sample's window (Flow-GRPO-Fast trains the whole window)
    algorithm = FlowGRPO(AlgorithmConfig(timestep_fraction=0.99))
    expected_steps = [list(range(*windows_of_step(STEP)[s // CHUNK])) for s in range(len(batch))]
    assert algorithm.trained_steps(batch).tolist() == expected_steps
    assert algorithm.train_step_indices(batch) == [0, 1]


def test_replay_scores_each_sample_at_exactly_its_window(policy):
    batch = fast_rollout(policy, STEP)
    algorithm = FlowGRPO(AlgorithmConfig(timestep_fraction=0.99))
    positions = algorithm.train_step_indices(batch)
    # unchanged weights: replayed in the rollout's chunks, the log-probs equal the rollout's bit for
    # bit (the same computation); in chunks that mix windows (5, 12 samples) the same values up to
    # how the BLAS groups a GEMM of another height (the linear policy's 32-wide products, then the
    # log-prob, a mean over its 32 dimensions), and the Euler steps stay exactly 0
    assert torch.equal(algorithm.replay_log_probs(policy, batch, positions, CHUNK), batch.log_probs)
    for chunk in (5, 12):
        replayed = algorithm.replay_log_probs(policy, batch, positions, chunk)
        assert torch.equal(replayed != 0, batch.sde_mask)
        assert_close_reordered(replayed, batch.log_probs, length=32, depth=2)
    parity = replay_parity(policy, batch, positions, CHUNK, replay=algorithm.replay_log_probs)
    assert max(parity.values()) == 0.0
    # moved weights: exactly each sample's window entries are recomputed, nothing else
    with torch.no_grad():
        policy.transformer.latent.bias.add_(0.05)
    moved = algorithm.replay_log_probs(policy, batch, positions, CHUNK)
    assert torch.equal(moved != batch.log_probs, batch.sde_mask)


def test_an_update_trains_each_sample_at_its_own_window_steps(policy):
    batch = fast_rollout(policy, STEP)
    algorithm = FlowGRPO(AlgorithmConfig(timestep_fraction=0.99, clip_range=1e-4))
    parameters = [p for p in policy.transformer.parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(parameters, lr=0.1)
    actor = ActorConfig(gradient_accumulation_steps=4, num_inner_epochs=1, shuffle_samples=True)
    advantages = torch.linspace(-1.0, 1.0, len(batch))  # [12]
    context = UpdateContext(policy, algorithm, optimizer, parameters, actor)
    result = run_update(context, batch, advantages, micro_batch_size=CHUNK, generator=torch.Generator().manual_seed(0))
    # one optimizer step after all replays (4 micro-batches, shuffled across sampling batches):
    # every replay scored the weights that sampled, at each sample's own window step, so the
    # ratio is exactly 1 and the log-prob drift exactly 0 (a step outside a sample's window
    # would compare a replayed log-prob with the Euler step's stored 0)
    assert result.optimizer_steps == 1
    ratios, drifts = torch.cat(result.stats["ratio"]), torch.cat(result.stats["log_prob_drift"])
    assert len(ratios) == len(batch) * 2  # every sample at both of its window's steps
    assert torch.equal(ratios, torch.ones_like(ratios)) and torch.equal(drifts, torch.zeros_like(drifts))
    assert result.grad_norms[0] > 0


def test_a_micro_batch_of_three_windows_replays_three_steps_at_each_position(policy):
    batch = fast_rollout(policy, STEP)
    algorithm = FlowGRPO(AlgorithmConfig(timestep_fraction=0.99, clip_range=1e-4))
    micro = batch.index([0, 3, 6, 9])  # one sample of each sampling batch
    assert len({tuple(row) for row in algorithm.trained_steps(micro).tolist()}) >= 3
    for position in algorithm.train_step_indices(micro):
        loss, stats = algorithm.compute_loss(policy, micro, torch.tensor([1.0, -1.0, 0.5, 2.0]), position)
        assert torch.equal(stats["ratio"], torch.ones(4)) and torch.equal(stats["log_prob_drift"], torch.zeros(4))
        loss.backward()
