"""torch.distributed training on CPU (gloo): a 2-rank DDP / FSDP2 run reaches the same LoRA
weights after k steps as the 1-rank run over the same global batch (fp32 tolerance).

The ranks are real processes started by `torchrun` on loopback; the script below uses only
`genalign.training.distributed` (rank facts from the environment, group sharding, gradient
averaging by `replicate` / `fully_shard`, per-rank accumulation, full-state gathering) around
a frozen base layer with a trainable low-rank adapter — the structure LoRA training has.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

import torch

from support import TINY_DEPTH, TINY_REDUCTION, assert_close_reordered

pytestmark = pytest.mark.distributed

SCRIPT = r'''
import sys, torch
from safetensors.torch import save_file
from genalign.training import distributed as dist

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
optimizer = torch.optim.AdamW(params, lr=1e-2)
group_size, accumulation, micro = 2, 4, 2  # 8 samples/step = 4 micro-batches = 1 optimizer step
accumulation_here = dist.per_rank_accumulation(accumulation, info)
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
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ranks(tmp_path: Path, strategy: str, nproc: int) -> dict[str, torch.Tensor]:
    script = tmp_path / "train_ranks.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"{strategy}_{nproc}.safetensors"
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
               f"--master_port={_free_port()}", "--master_addr=127.0.0.1", str(script), strategy, str(out)]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return load_file(out)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_match_one_rank_on_the_same_global_batch(tmp_path, strategy):
    single = run_ranks(tmp_path, "single", 1)
    double = run_ranks(tmp_path, strategy, 2)
    assert sorted(single) == sorted(double) == ["lora_A.weight", "lora_B.weight"]
    for name in single:
        # 2 ranks only regroup the gradient sums (all-reduce of two halves): rounding through forward,
        # backward and the optimizer step, relative to the weights' magnitude
        assert_close_reordered(double[name], single[name], length=TINY_REDUCTION, depth=2 * TINY_DEPTH)
    torch.manual_seed(0)  # the script's initialisation: training must have moved the adapter
    initial = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2, bias=False))[1].weight
    assert (single["lora_A.weight"] - initial).abs().max() > 1e-3
