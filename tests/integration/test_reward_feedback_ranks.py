"""Reward feedback on 2 gloo ranks with one idle (tests/integration/test_distributed_training.py
pattern): rank 0 holds 4 trajectories of the toy demo model, rank 1 none, so it replays a
filler unit with weight 0 through the whole chain (denoiser steps, decode, reward) and still
enters every collective. Both ranks end with the same weights, equal to one process's SGD step
on rank 0's units alone (the mean loss over the step's 4 units: global_unit_mean)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support import assert_close_reordered, launch_script

pytestmark = pytest.mark.distributed

SCRIPT = r"""
import copy, json, sys, torch
from genalign.algorithms.config import AlgorithmConfig, RewardFeedbackConfig
from genalign.algorithms.reward_feedback import RewardFeedback
from genalign.models.base import SharedCondition
from genalign.models.toy.policy import ToyPolicy
from genalign.rewards.composite import LocalRewardRuntime
from genalign.rewards.toy import ToyShapeReward
from genalign.rollout.batch import TrajectoryBatch
from genalign.sampling.trajectory import sample_trajectory
from genalign.training import distributed as dist
from genalign.training.config import ActorConfig
from genalign.training.update import UpdateContext, run_update

out = sys.argv[1]
info = dist.init_distributed("ddp", backend="gloo")
torch.manual_seed(0)
policy = ToyPolicy.from_pretrained()
trained = policy.transformer.proj_out
trained.requires_grad_(True)
reference = copy.deepcopy(trained)
prompts = ["a red circle", "a blue square", "a green triangle", "a yellow cross"]
cond = policy.encode_prompts(prompts, with_negative=False)
sigmas = policy.sigmas(4, (3, 32, 32))
seeds = torch.arange(4) + 100
generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
noise = torch.stack([torch.randn(3, 32, 32, generator=g) for g in generators])
with torch.no_grad():
    sampled = sample_trajectory(policy, cond, noise, generators, sigmas, 1.0, 0.0, torch.zeros(4, dtype=torch.bool))
whole = TrajectoryBatch(prompts, torch.arange(4), torch.arange(4), seeds, SharedCondition.of(cond, torch.arange(4)),
                        sampled.latents, sampled.log_probs, sigmas, torch.zeros(4, 4, dtype=torch.bool),
                        torch.zeros(4, 3, 32, 32, dtype=torch.uint8))
units = whole if info.rank == 0 else whole.index(torch.arange(0))
module = dist.wrap_for_training(policy.transformer, "ddp")
cfg = AlgorithmConfig(name="reward_feedback", drop_zero_advantage=False)
cfg.reward_feedback = RewardFeedbackConfig(**json.loads(sys.argv[2]))
algorithm = RewardFeedback(cfg)
algorithm.attach_rewards(LocalRewardRuntime({"toy_shape": ToyShapeReward()}, {"toy_shape": 1.0}, 64))
params = list(trained.parameters())
actor = ActorConfig(gradient_accumulation_steps=2, max_grad_norm=1e9, num_inner_epochs=1, shuffle_samples=False,
                    loss_normalisation="global_unit_mean")
context = UpdateContext(policy, algorithm, torch.optim.SGD(params, lr=0.5), params, actor, None, info, module)
result = run_update(context, units, torch.zeros(len(units)), 2, torch.Generator().manual_seed(0),
                    filler=whole.index(torch.tensor([0])))
# one process, rank 0's 4 units: SGD on the mean loss, computed with the same functions
policy.transformer.proj_out = reference
loss, _ = algorithm.compute_loss(policy, whole, torch.zeros(4), 0)
loss.backward()
with torch.no_grad():
    for p in reference.parameters():
        p -= 0.5 * p.grad
with open(f"{out}.{info.rank}.json", "w") as f:
    json.dump({"weight": params[0].tolist(), "reference": reference.weight.tolist(),
               "optimizer_steps": result.optimizer_steps, "trained": result.trained_samples}, f)
dist.barrier(info)
dist.shutdown()
"""


@pytest.mark.parametrize(
    "options",
    [
        {"truncation": "fixed", "truncation_steps": 2},
        # DRTune: the whole chain of 4 from the noise, input detached, grad at 2 of its steps;
        # the idle rank's filler runs its no-grad and its grad forwards alike
        {"truncation": "full", "supervised_steps": 2, "stop_input_gradient": True},
    ],
    ids=["draft_2", "drtune"],
)
def test_an_idle_rank_enters_every_collective_and_the_step_is_rank_zeros_mean(tmp_path, options):
    out = tmp_path / "ranks"
    launch_script(tmp_path, SCRIPT, 2, str(out), json.dumps(options))
    ranks = [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(2)]
    assert [r["trained"] for r in ranks] == [4, 0]
    assert ranks[0]["optimizer_steps"] == ranks[1]["optimizer_steps"] == 1  # micro-batches 2 + 2 on rank 0
    first, second, reference = (
        torch.tensor(r) for r in (ranks[0]["weight"], ranks[1]["weight"], ranks[0]["reference"])
    )
    assert torch.equal(first, second)
    # the ranks sum two micro-batch gradients and DDP's average; the reference one 4-sample mean.
    # proj_out's weight gradient sums 4 samples x 256 tokens; the chain of 2 denoiser steps with
    # grad (DRaFT's last 2, DRTune's 2 supervised), the reward classifier, backward and the SGD
    # step chain about 8 such reductions
    assert_close_reordered(first, reference, length=1024, depth=8)
