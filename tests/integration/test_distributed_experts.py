"""A denoiser of two experts (Wan 2.2 A14B's `DenoiserExperts`) under torchrun on gloo: the family
calls one expert at a time, never the container's forward, so DDP must hook each expert's
forward (a container wrapped whole never reduced its experts' gradients). A step that runs one
expert on every rank (each rank its own data) gives every rank the gradient averaged over the
ranks, the other expert none; with gradient accumulation, one reduction over both micro-batches.
FSDP2 is refused for experts: ranks training steps of different experts would all-gather
different units."""

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


def test_fsdp2_over_experts_is_refused_naming_the_key():
    from genalign.config.errors import ConfigError
    from genalign.training.distributed import wrap_for_training

    experts = DenoiserExperts({"transformer": Expert(), "transformer_2": Expert()}, ("transformer",))
    with pytest.raises(ConfigError, match="distributed.training.strategy=fsdp2: the denoiser is several experts"):
        wrap_for_training(experts, "fsdp2", ("Block",))
