"""torch.distributed training on CPU (gloo): a 2-rank DDP / FSDP2 run reaches the same LoRA
weights after k steps as the 1-rank run over the same global batch (fp32 tolerance), and the
update loop (`training.update.run_update`) keeps every rank in every collective whatever
its data, with the documented gradient and one gradient reduction per optimizer step.

The ranks are real processes started by `torchrun` on loopback; the first script uses only
`genalign.training.distributed` (rank facts from the environment, group sharding, gradient
averaging by `replicate` / `fully_shard`, per-rank accumulation, full-state gathering) around
a frozen base layer with a trainable low-rank adapter — the structure LoRA training has.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered, launch_script, reorder_tolerance

pytestmark = pytest.mark.distributed

SCRIPT = r"""
import sys, torch
from safetensors.torch import save_file
from genalign.training import distributed as dist
from genalign.preflight.step_sizes import per_rank_accumulation

strategy, out = sys.argv[1], sys.argv[2]
info = dist.init_distributed(strategy if strategy != "single" else "ddp", backend="gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2, bias=False), torch.nn.Linear(2, 8, bias=False))
model[0].requires_grad_(False)  # the frozen base; [1], [2] are the adapter's A and B
class Adapted(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.base, self.lora_A, self.lora_B = layers
    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x))
module = dist.wrap_for_training(Adapted(model), strategy if strategy != "single" else "none")
params = [p for p in module.parameters() if p.requires_grad]
# eps = 1 (default 1e-8): AdamW's step lr·m̂/(sqrt(v̂) + eps) then has a slope of about lr/eps in the
# gradients, so a gradient rounding difference moves a weight by a rounding-sized amount; at
# eps = 1e-8 a gradient near zero would turn it into up to 2·lr (tests/support.py)
optimizer = torch.optim.AdamW(params, lr=1e-2, eps=1.0)
group_size, accumulation, micro = 2, 4, 2  # 8 samples/step = 4 micro-batches = 1 optimizer step
accumulation_here = per_rank_accumulation(accumulation, info.world_size)
for step in range(3):
    g = torch.Generator().manual_seed(step)
    inputs, targets = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)  # the step's global batch
    mine = dist.rank_positions(8, group_size, info)
    rewards = dist.all_gather_cat(targets[mine].sum(1), info)  # whole-batch statistics on every rank
    assert torch.equal(rewards, targets.sum(1))
    x, y = inputs[mine], targets[mine]
    for position, start in enumerate(range(0, len(mine), micro)):
        loss = ((module(x[start:start + micro]) - y[start:start + micro]) ** 2).mean()
        (loss / accumulation_here).backward()
        if (position + 1) % accumulation_here == 0:
            optimizer.step()
            optimizer.zero_grad()
state = dist.full_state({n: p for n, p in module.named_parameters() if p.requires_grad})
if info.is_main:
    save_file(state, out)
dist.barrier(info)
dist.shutdown()
"""


def run_ranks(tmp_path: Path, strategy: str, nproc: int) -> dict[str, torch.Tensor]:
    out = tmp_path / f"{strategy}_{nproc}.safetensors"
    launch_script(tmp_path, SCRIPT, nproc, strategy, str(out))
    return load_file(out)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_match_one_rank_on_the_same_global_batch(tmp_path, strategy):
    single = run_ranks(tmp_path, "single", 1)
    double = run_ranks(tmp_path, strategy, 2)
    assert sorted(single) == sorted(double) == ["lora_A.weight", "lora_B.weight"]
    for name in single:
        # 2 ranks only regroup the gradient sums (all-reduce of two halves): rounding through forward
        # and backward, carried by AdamW steps of bounded slope (eps = 1, the script's comment) and
        # relative to the weights' magnitude
        assert_close_reordered(double[name], single[name], length=TINY_REDUCTION, depth=2 * TINY_DEPTH)
    torch.manual_seed(0)  # the script's initialisation: training must have moved the adapter
    initial = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2, bias=False))[1].weight
    assert (single["lora_A.weight"] - initial).abs().max() > 1e-3


# ---------------------------------------------------------------- the update loop under asymmetry
UPDATE_SCRIPT = r"""
import copy, json, sys, torch
from types import SimpleNamespace
from genalign.algorithms.base import AlgorithmBase
from genalign.training import distributed as dist
from genalign.training.config import ActorConfig
from genalign.training.precision import build_grad_scaler
from genalign.training.update import UpdateContext, run_update

strategy, case, out, normalisation = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
info = dist.init_distributed(strategy, backend="gloo", timeout_s=60)
POSITIONS, LR = [0, 1], 0.1

class Units:  # what run_update needs of a batch: len, index, to, prompts
    def __init__(self, x, prompts):
        self.x, self.prompts = x, prompts
    def __len__(self):
        return len(self.x)
    def index(self, i):
        i = torch.as_tensor(i)
        return Units(self.x[i], [self.prompts[k] for k in i.tolist()])
    def to(self, device):
        return self

class InfGrad(torch.autograd.Function):  # identity whose gradient is inf: an fp16 overflow on one rank
    @staticmethod
    def forward(ctx, x):
        return x.clone()
    @staticmethod
    def backward(ctx, g):
        return g * float("inf")

class Regression(AlgorithmBase):  # ℓ_unit,j = (Σ module(x + j) − adv)², the loss a micro-batch mean of it
    def __init__(self, module, overflow=False, drop_zero_advantage=False):
        self.module, self.overflow, self.calls = module, overflow, 0
        self.cfg = SimpleNamespace(drop_zero_advantage=drop_zero_advantage)
    def train_step_indices(self, batch):
        return POSITIONS
    def prepare_update(self, policy, batch, step_indices, micro_batch_size):
        return batch
    def compute_loss(self, policy, batch, advantages, j):
        self.calls += 1
        out = self.module(batch.x + j)  # [b, 4]
        if self.overflow and self.calls == 1:  # output 0 only: the gradient of weight row 0 (rank 0's FSDP2 shard)
            out = torch.cat([InfGrad.apply(out[:, :1]), out[:, 1:]], 1)
        return ((out.sum(1) - advantages) ** 2).mean(), {}

# each case: units per rank, advantages (0 = constant-reward sample), accumulation, drop_zero_advantage
g = torch.Generator().manual_seed(0)
if case == "drop_zero":  # rank 1's samples all have advantage 0 (a constant scorer): it trains nothing
    counts, accumulation, drop = [4, 4], 2, True
    xs = torch.randn(8, 4, generator=g)
    adv = torch.cat([torch.randn(4, generator=g), torch.zeros(4)])
elif case == "unequal":  # rank 0 trains 4 units, rank 1 2, all in one optimizer step
    counts, accumulation, drop = [4, 2], 2, False
    xs, adv = torch.randn(6, 4, generator=g), torch.randn(6, generator=g)
elif case == "uneven":  # online DPO: rank 0 has 5 pairs, rank 1 none (it replays the filler with weight 0)
    counts, accumulation, drop = [5, 0], 2, False
    xs, adv = torch.randn(5, 4, generator=g), torch.randn(5, generator=g)
else:  # symmetric: 4 units per rank; "count": one optimizer step, "overflow": two
    counts, accumulation, drop = [4, 4], 2 if case == "count" else 1, False
    xs, adv = torch.randn(8, 4, generator=g), torch.randn(8, generator=g)
start = sum(counts[:info.rank])
mine = slice(start, start + counts[info.rank])
units = Units(xs[mine], [f"p{k}" for k in range(start, start + counts[info.rank])])
filler = Units(torch.zeros(1, 4), ["filler"])

torch.manual_seed(0)
plain = torch.nn.Linear(4, 4, bias=False)
reference = copy.deepcopy(plain)
module = dist.wrap_for_training(plain, strategy)
params = [p for p in module.parameters()]
reductions = []
if strategy == "ddp":
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    def counting_hook(state, bucket):
        reductions.append(1)
        return allreduce_hook(state, bucket)
    module.register_comm_hook(None, counting_hook)
else:
    reduce_scatter = torch.distributed.reduce_scatter_single
    def counting_reduce_scatter(*args, **kwargs):
        reductions.append(1)
        return reduce_scatter(*args, **kwargs)
    torch.distributed.reduce_scatter_single = counting_reduce_scatter
scaler = build_grad_scaler(torch.float16 if case == "overflow" else torch.float32, torch.device("cpu"), True)
actor = ActorConfig(gradient_accumulation_steps=accumulation, max_grad_norm=1e9, num_inner_epochs=1,
                    shuffle_samples=False, loss_normalisation=normalisation)
policy = type("Policy", (), {"device": torch.device("cpu")})()
algorithm = Regression(module, overflow=case == "overflow" and info.rank == 1, drop_zero_advantage=drop)
context = UpdateContext(policy, algorithm, torch.optim.SGD(params, lr=LR), params, actor, scaler, info, module)
result = run_update(context, units, adv[mine], 2, torch.Generator().manual_seed(0), filler=filler)
weight = dist.full_state(dict(module.named_parameters()))["weight"]

# the documented gradient, on one process: per optimizer step, the mean of each unit's loss
# averaged over positions, over the step's trained units on all ranks (global_unit_mean) or
# over each rank's own units and then over ranks (rank_mean); SGD steps in the same order
trained = [k for k in range(len(xs)) if not drop or adv[k] != 0]
per_rank = [[k for k in trained if sum(counts[:r]) <= k < sum(counts[:r + 1])] for r in range(len(counts))]
slots = max((len(ks) + 1) // 2 for ks in per_rank)
steps = [[ks[2 * first:2 * (first + accumulation)] for ks in per_rank] for first in range(0, slots, accumulation)]
if case == "overflow":
    steps = steps[1:]  # the first step's gradient is inf on one rank: every rank skips it
optimizer = torch.optim.SGD(reference.parameters(), lr=LR)
def mean_loss(ks):
    return sum(((reference(xs[ks] + j).sum(1) - adv[ks]) ** 2).mean() for j in POSITIONS) / len(POSITIONS)
for parts in steps:
    if normalisation == "global_unit_mean":
        loss = mean_loss([k for ks in parts for k in ks])
    else:  # a rank without units in the step adds zero and still counts in DDP's average
        loss = sum(mean_loss(ks) for ks in parts if ks) / len(parts)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
with open(f"{out}.{info.rank}.json", "w") as f:
    json.dump({"weight": weight.tolist(), "reference": reference.weight.tolist(), "reductions": len(reductions),
               "optimizer_steps": result.optimizer_steps, "skipped_steps": result.skipped_steps,
               "grad_scale": result.grad_scale, "initial": plain.weight.tolist() if strategy == "none" else None}, f)
dist.barrier(info)
dist.shutdown()
"""


UPDATE_REDUCTION = 64
"""The longest reduction of the script's update: a weight gradient sums 8 units x 2 positions
x 4 inputs; the ranks and the one-process reference group those sums differently."""
UPDATE_DEPTH = 4
"""Chained reductions: forward, loss, backward, and up to two SGD steps on the result."""


def run_update_ranks(tmp_path: Path, strategy: str, case: str, normalisation: str = "global_unit_mean") -> list[dict]:
    import json

    out = tmp_path / f"{case}_{normalisation}"
    launch_script(tmp_path, UPDATE_SCRIPT, 2, strategy, case, str(out), normalisation)
    return [json.loads(Path(f"{out}.{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.parametrize(
    "case,strategy",
    [  # each case under one strategy in the default suite, the other two in the slow pass
        ("drop_zero", "fsdp2"),
        ("uneven", "ddp"),
        pytest.param("drop_zero", "ddp", marks=pytest.mark.slow),
        pytest.param("uneven", "fsdp2", marks=pytest.mark.slow),
    ],
)
def test_a_rank_with_less_to_train_takes_part_and_the_step_is_the_global_sample_mean(tmp_path, strategy, case):
    """drop_zero: rank 1 has no trainable sample; uneven: rank 0 has 3 micro-batches (2, 2, 1)
    and rank 1 none. The run completes (no hang: a missing collective would wait until the
    timeout), both ranks hold the same weights, and they equal one process's SGD on the mean
    over each optimizer step's trained units."""
    ranks = run_update_ranks(tmp_path, strategy, case)
    assert ranks[0]["optimizer_steps"] == ranks[1]["optimizer_steps"] == (1 if case == "drop_zero" else 2)
    first, second, reference = (
        torch.tensor(r) for r in (ranks[0]["weight"], ranks[1]["weight"], ranks[0]["reference"])
    )
    assert torch.equal(first, second)
    assert_close_reordered(first, reference, length=UPDATE_REDUCTION, depth=UPDATE_DEPTH)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_unequal_ranks_rank_mean_is_the_reference_and_global_unit_mean_the_union(tmp_path, strategy):
    """Rank 0 trains 4 units, rank 1 2, in one optimizer step. global_unit_mean: the weights
    equal one process's SGD on the mean over the union of the 6 units; rank_mean (the default,
    Flow-GRPO's per-process mean under DDP): on the average of the two ranks' own means, where
    each of rank 1's units weighs twice one of rank 0's. The two references differ by far more
    than the tolerance, so each comparison tells the modes apart."""
    global_ranks = run_update_ranks(tmp_path, strategy, "unequal", "global_unit_mean")
    rank_ranks = run_update_ranks(tmp_path, strategy, "unequal", "rank_mean")
    for ranks in (global_ranks, rank_ranks):
        assert [r["optimizer_steps"] for r in ranks] == [1, 1]
        assert ranks[0]["weight"] == ranks[1]["weight"]
        assert_close_reordered(
            torch.tensor(ranks[0]["weight"]),
            torch.tensor(ranks[0]["reference"]),
            length=UPDATE_REDUCTION,
            depth=UPDATE_DEPTH,
        )
    union, per_rank = torch.tensor(global_ranks[0]["reference"]), torch.tensor(rank_ranks[0]["reference"])
    bound = reorder_tolerance(float(union.abs().max()), UPDATE_REDUCTION, UPDATE_DEPTH)
    assert (union - per_rank).abs().max() > 100 * bound


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_accumulation_reduces_gradients_once_per_optimizer_step(tmp_path, strategy):
    """4 units per rank in micro-batches of 2 at 2 positions with accumulation 2: 4 backward
    calls per optimizer step and exactly one gradient reduction (DDP all-reduce through the
    comm hook; FSDP2 reduce-scatter)."""
    ranks = run_update_ranks(tmp_path, strategy, "count")
    assert [r["optimizer_steps"] for r in ranks] == [1, 1]
    assert [r["reductions"] for r in ranks] == [1, 1]
    assert_close_reordered(
        torch.tensor(ranks[0]["weight"]),
        torch.tensor(ranks[0]["reference"]),
        length=UPDATE_REDUCTION,
        depth=UPDATE_DEPTH,
    )


@pytest.mark.parametrize("strategy", [pytest.param("ddp", marks=pytest.mark.slow), "fsdp2"])
def test_an_fp16_overflow_on_one_rank_skips_the_step_on_every_rank(tmp_path, strategy):
    """Rank 1's first backward gives an inf gradient in weight row 0 only — under FSDP2 that
    row is rank 0's shard, so only rank 0 sees it. The loss scaler's skip decision is agreed:
    both ranks skip the first of two steps, back the scale off once, and take the second."""
    ranks = run_update_ranks(tmp_path, strategy, "overflow")
    for r in ranks:
        assert (r["optimizer_steps"], r["skipped_steps"], r["grad_scale"]) == (2, 1, 2.0**15)
    assert ranks[0]["weight"] == ranks[1]["weight"]
    assert_close_reordered(
        torch.tensor(ranks[0]["weight"]),
        torch.tensor(ranks[0]["reference"]),
        length=UPDATE_REDUCTION,
        depth=UPDATE_DEPTH,
    )
