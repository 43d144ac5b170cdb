"""A denoiser of two experts (Wan 2.2 A14B's `DenoiserExperts`) under torchrun on gloo: the family
calls one expert at a time, never the container's forward, so DDP must hook each expert's
forward (a container wrapped whole never reduced its experts' gradients). A step that runs one
expert on every rank (each rank its own data) gives every rank the gradient averaged over the
ranks, the other expert none; with gradient accumulation, one reduction over both micro-batches.

Under FSDP2 each expert's forward all-gathers its shards: the tiny Wan 2.2 A14B's velocity runs
the experts in lockstep over the ranks (an expert another rank needs runs on a filler row that
contributes nothing), so ranks whose micro-batches use different experts still reach the
one-process gradients over the union of their data, clipped over both experts' shards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support import launch_script

from genalign.models.experts import DenoiserExperts

pytestmark = pytest.mark.distributed

SCRIPT = r"""
import json, sys, torch
import torch.distributed as dist
from genalign.models.experts import DenoiserExperts
from genalign.training import distributed

strategy, out = sys.argv[1], sys.argv[2]
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/.."]  # this test's folder and `support`'s
from test_distributed_experts import Expert  # the test's two-layer expert, one definition

dist.init_process_group("gloo")
rank = dist.get_rank()

torch.manual_seed(0)
experts = DenoiserExperts({"transformer": Expert(), "transformer_2": Expert()}, ("transformer", "transformer_2"))
distributed.wrap_for_training(experts, strategy, ("Block",))
inputs = [torch.full((1, 2, 3), float(r + 1)) for r in range(2)]  # each rank its own data

def grads():
    state = {name: (p.grad if p.grad is not None else torch.zeros_like(p)) for name, p in experts.named_parameters()}
    return {name: t.tolist() for name, t in distributed.full_state(state).items()}

# a step of one expert on every rank (each rank its own data)
with distributed.gradient_sync(experts, True):
    experts.transformer(inputs[rank]).sum().backward()
one_expert = grads()
for p in experts.parameters():
    p.grad = None
# gradient accumulation: a micro-batch that reduces nothing, then the one that reduces, each
# through both experts (a micro-batch holds every trained position of its samples)
with distributed.gradient_sync(experts, False):
    (experts.transformer(inputs[rank]).sum() + experts.transformer_2(inputs[rank]).sum()).backward()
with distributed.gradient_sync(experts, True):
    (experts.transformer(2 * inputs[rank]).sum() + experts.transformer_2(2 * inputs[rank]).sum()).backward()
accumulated = grads()
for p in experts.parameters():
    p.grad = None
# each rank runs the other expert in the same backward (rank 0 the high-noise one, rank 1 the low)
with distributed.gradient_sync(experts, True):
    (experts.transformer if rank == 0 else experts.transformer_2)(inputs[rank]).sum().backward()
crossed = grads()
results = {"one_expert": one_expert, "accumulated": accumulated, "crossed": crossed}
json.dump(results, open(f"{out}/rank{rank}.json", "w"))
dist.destroy_process_group()
"""


class Block(torch.nn.Module):
    """The repeated block (what FSDP2 would shard as a unit)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.linear(x)


class Expert(torch.nn.Module):
    """A conv stem outside the repeated block, as a diffusers transformer has."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv1d(2, 4, 1)
        self.block = Block()

    def forward(self, x):
        return self.block(self.stem(x))


def one_process_grads(calls) -> dict[str, torch.Tensor]:
    """The gradients of the same experts (seed 0) after `calls(experts)` backward in one process."""
    torch.manual_seed(0)
    experts = DenoiserExperts({"transformer": Expert(), "transformer_2": Expert()}, ("transformer", "transformer_2"))
    calls(experts).backward()
    return {name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in experts.named_parameters()}


def test_each_expert_called_alone_averages_its_gradients_over_the_ranks(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    launch_script(tmp_path, SCRIPT, 2, "ddp", str(out), str(Path(__file__).parent))
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    x = [torch.full((1, 2, 3), value) for value in (1.0, 2.0)]  # rank 0's and rank 1's data
    # the mean over ranks of each rank's loss = one process's loss over both ranks' data / 2
    one_expert = one_process_grads(lambda e: (e.transformer(x[0]).sum() + e.transformer(x[1]).sum()) / 2)
    accumulated = one_process_grads(
        lambda e: sum(e.transformer(k * v).sum() + e.transformer_2(k * v).sum() for v in x for k in (1, 2)) / 2
    )
    crossed = one_process_grads(lambda e: (e.transformer(x[0]).sum() + e.transformer_2(x[1]).sum()) / 2)
    for rank in ranks:  # ranks that ran different experts: both hold both experts' mean gradients
        for name, expected in crossed.items():
            torch.testing.assert_close(torch.tensor(rank["crossed"][name]), expected, rtol=1e-5, atol=1e-6, msg=name)
    for rank in ranks:  # every rank holds the averaged gradient; the expert that did not run, none
        for name, expected in [*one_expert.items()]:
            # a few products of small integers and the seed-0 weights: float32 rounding only
            torch.testing.assert_close(torch.tensor(rank["one_expert"][name]), expected, rtol=1e-5, atol=1e-6, msg=name)
        for name, expected in accumulated.items():
            torch.testing.assert_close(
                torch.tensor(rank["accumulated"][name]), expected, rtol=1e-5, atol=1e-6, msg=name
            )
    assert all(v == 0 for row in ranks[0]["one_expert"]["transformer_2.block.linear.weight"] for v in row)


WAN_SCRIPT = r"""
import json, sys, torch
import torch.distributed as dist
from genalign.training import distributed

strategy, model_dir, out, experts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]
sys.path[:0] = [sys.argv[4], sys.argv[4] + "/.."]  # this test's folder and `support`'s
from test_distributed_experts import MAX_NORM, MICRO_BATCHES, adapted_wan22, micro_batch_loss

dist.init_process_group("gloo")
rank = dist.get_rank()
policy = adapted_wan22(model_dir, experts)
module = distributed.wrap_for_training(policy.transformer, strategy, policy.repeated_blocks)
with torch.no_grad():  # a forward that trains nothing (an old policy's log-probs): experts crossed too
    micro_batch_loss(policy, 0, rank)
for index in range(len(MICRO_BATCHES)):
    with distributed.gradient_sync(module, index == len(MICRO_BATCHES) - 1):
        micro_batch_loss(policy, index, rank).backward()
params = [p for p in module.parameters() if p.requires_grad]
norm = torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
grads = distributed.full_state({n: p.grad for n, p in module.named_parameters() if p.requires_grad})
json.dump({"norm": norm, "grads": {n: g.tolist() for n, g in grads.items()}}, open(f"{out}/rank{rank}.json", "w"))
dist.destroy_process_group()
"""

MICRO_BATCHES = [  # (rank 0's sigmas, rank 1's) per micro-batch; the boundary is σ = 0.875
    ([0.9], [0.4]),  # rank 0 only the high-noise expert, rank 1 only the low-noise one
    ([0.9, 0.4], [0.95, 0.9]),  # rank 0 both, rank 1 the high-noise one only
    ([0.9], [0.95]),  # the last backward, which reduces, runs no rank's low-noise expert
]
MAX_NORM = 1e-3
"""Below the gradient's norm: clipping scales both experts' gradients by the norm over both."""


def adapted_wan22(model_dir, experts: str):
    """The tiny Wan 2.2 T2V-A14B with a LoRA (random B, so every adapter tensor has a gradient) on
    the `experts` it trains (`model.experts`), the same in every process."""
    from support import perturb_lora_b

    from genalign.models.config import LoraConfig
    from genalign.models.experts import denoiser_parts
    from genalign.models.wan.policy import WanPolicy
    from genalign.weights.lora import apply_lora

    torch.manual_seed(0)
    policy = WanPolicy.from_pretrained(
        model_dir, max_sequence_length=16, num_frames=3, low_noise_guidance_scale=3.0, experts=experts
    )
    for part in denoiser_parts(policy.transformer).values():
        apply_lora(part, LoraConfig(rank=4, alpha=8), policy.lora_target_modules)
    perturb_lora_b(policy.transformer)
    return policy


def micro_batch_loss(policy, index: int, rank: int) -> torch.Tensor:
    """A fixed linear function of the guided velocity of `rank`'s rows in micro-batch `index`."""
    sigmas = MICRO_BATCHES[index][rank]
    generator = torch.Generator().manual_seed(10 * index + rank)
    latents = torch.randn(len(sigmas), *policy.latent_shape(32, 32), generator=generator)  # [b, C, F_lat, h, w]
    target = torch.randn(latents.shape, generator=generator)
    cond = policy.encode_prompts(["a red car driving", "two cats"][: len(sigmas)], with_negative=True)
    return (policy.velocity(latents, torch.tensor(sigmas), cond, 5.0) * target).sum()


@pytest.mark.parametrize(
    ("strategy", "experts"),
    [  # a frozen expert is sharded too: it runs in lockstep, its backward reduces nothing
        ("fsdp2", "both"),
        pytest.param("fsdp2", "low_noise", marks=pytest.mark.slow),
        pytest.param("ddp", "both", marks=pytest.mark.slow),
    ],
)
def test_wan22_ranks_on_different_experts_reach_the_one_process_gradients(tiny_wan22_dirs, tmp_path, strategy, experts):
    """Two ranks whose micro-batches use different experts (`MICRO_BATCHES`: crossed, one rank on
    both, a last backward without the low-noise expert), gradients accumulated over the three and
    clipped over every trained tensor, equal one process over the union of the data: under FSDP2
    a rank without rows for an expert its peer runs takes part by a filler row (without lockstep
    the ranks' all-gathers mismatch and the job fails)."""
    from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, reorder_tolerance

    out = tmp_path / "out"
    out.mkdir()
    here = str(Path(__file__).parent)
    launch_script(tmp_path, WAN_SCRIPT, 2, strategy, str(tiny_wan22_dirs["a14b"]), str(out), here, experts)
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    # one process over the union of the data: the mean over the ranks of each rank's summed losses
    policy = adapted_wan22(tiny_wan22_dirs["a14b"], experts)
    loss = sum(micro_batch_loss(policy, i, r) for i in range(len(MICRO_BATCHES)) for r in range(2)) / 2
    loss.backward()
    params = {n: p for n, p in policy.transformer.named_parameters() if p.requires_grad}
    norm = float(torch.nn.utils.clip_grad_norm_(list(params.values()), MAX_NORM))
    trained = {"both": {"transformer", "transformer_2"}, "low_noise": {"transformer_2"}}[experts]
    assert norm > MAX_NORM and {n.split(".")[0] for n in params} == trained
    # forward and backward through the experts' blocks, regrouped over ranks and micro-batches
    depth = 2 * TINY_DEPTH
    for rank in ranks:
        assert sorted(rank["grads"]) == sorted(params)
        assert abs(rank["norm"] - norm) <= reorder_tolerance(norm, TINY_REDUCTION, depth), (rank["norm"], norm)
        for name, param in params.items():
            assert_close_reordered(torch.tensor(rank["grads"][name]), param.grad, length=TINY_REDUCTION, depth=depth)
        assert all(torch.tensor(rank["grads"][n]).abs().max() > 0 for n in params), "an expert got no gradient"
