"""torch.distributed plumbing: the only module that touches process groups.

Where it fits: around the loop when `distributed.training.strategy` is `ddp` or `fsdp2`
(launched by `torchrun --nproc_per_node=N -m genalign.train ...`). The trainer calls:
`init_distributed` once (rank facts from torchrun's RANK / WORLD_SIZE / LOCAL_RANK
environment, never from YAML), `wrap_for_training` on the denoiser, `shard_groups` to take
this rank's prompt groups, `gather_scores` so advantages see whole groups, and
`full_state` / `barrier` around rank-0-only checkpoints, `reduce_totals` so a
step's metrics row is the whole job's, and `max_over_ranks` so every rank stops after the same
step (`runs/stopping.py`). With strategy `none` every helper is the identity, so
the loop has one code path. Rank 0 alone prints the job's INFO lines (step, evaluation,
phases); the other ranks print warnings and errors only.

Numerics: each rank holds `1/world_size` of the step's groups and runs
`gradient_accumulation_steps / world_size` micro-batches per optimizer step; DDP and FSDP2
average gradients over ranks (once per optimizer step: `gradient_sync`; FSDP2-sharded experts at
every backward, `_REDUCED_EVERY_BACKWARD`), which makes a k-rank step the same update as the
1-process step over the same global batch (to fp32 reduction order). A collective that waits
longer than `distributed.training.timeout_s` fails the rank.
The CUDA device helpers live in placement/devices.py, the copy into a shard in
weights/sharded.py.
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
import weakref
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch

from genalign.placement.devices import use_cuda_device

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- process groups
@dataclass(frozen=True)
class RankInfo:
    """This process's place in the job (torchrun's RANK / WORLD_SIZE / LOCAL_RANK)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0 alone writes metrics, evaluation artefacts and checkpoints."""
        return self.rank == 0


def rank_info_from_env() -> RankInfo:
    env = os.environ
    return RankInfo(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))


def init_distributed(
    strategy: str, backend: str = "auto", cuda_indices: tuple[int, ...] = (), timeout_s: float = 600.0
) -> RankInfo:
    """Join the torchrun job for `distributed.training.strategy` (identity for "none") and make
    `cuda` this process's device: entry LOCAL_RANK of `cuda_indices` (the trainer's planned
    devices, `Placement.trainer_cuda_indices`), else cuda:LOCAL_RANK under NCCL."""
    if strategy == "none":
        use_cuda_device(cuda_indices[0] if cuda_indices else None)
        return RankInfo()
    if "WORLD_SIZE" not in os.environ:
        raise RuntimeError(
            f"distributed.training.strategy={strategy} needs a torchrun launch: "
            "torchrun --nproc_per_node=N -m genalign.train --config ..."
        )
    info = rank_info_from_env()
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if cuda_indices:
        if info.local_rank >= len(cuda_indices):
            raise RuntimeError(
                f"local rank {info.local_rank} has no trainer GPU: the plan gives the trainer "
                f"{len(cuda_indices)} device(s); launch torchrun --nproc_per_node={len(cuda_indices)} "
                "or raise distributed.resources.trainer.num_gpus"
            )
        use_cuda_device(cuda_indices[info.local_rank])
    elif backend == "nccl":
        use_cuda_device(info.local_rank)
    if not torch.distributed.is_initialized():
        # a collective that waits longer than this raises (gloo) or aborts the process (NCCL's
        # watchdog): a rank that hangs or is lost ends the job instead of stalling it
        torch.distributed.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    log.info(
        "rank %d/%d (local %d), backend %s, strategy %s", info.rank, info.world_size, info.local_rank, backend, strategy
    )
    if not info.is_main:
        # one console for the job: rank 0 prints the step and evaluation lines, whose figures are
        # the job's (`reduce_totals`); a rank's warnings and errors still reach the console
        logging.getLogger("genalign").setLevel(logging.WARNING)
    return info


def wrap_for_training(module: torch.nn.Module, strategy: str, blocks: tuple[str, ...] = ()) -> torch.nn.Module:
    """Make `module` average its gradients over ranks, in place (names and attributes stay,
    so LoRA state dicts and the family's code see the same module).

    ddp: composable `replicate` (DDP's reducer without a wrapper class); fsdp2:
    `fully_shard` (parameters become sharded DTensors; use `full_state` to read them) on every
    submodule whose class is named in `blocks` (the family's repeated transformer blocks),
    then on the root, as torchtitan shards: one block's weights are gathered at a time, so a
    rank holds its shard plus one block rather than the whole denoiser. A denoiser of experts
    (`forward_units`) has each expert sharded so, and its experts run in lockstep over the ranks
    (`DenoiserExperts.lockstep`)."""
    if strategy == "none":
        return module
    if strategy == "ddp":
        from torch.distributed._composable.replicate import replicate

        if len(forward_units(module)) > 1:
            # DDP's reducer is readied by each wrapped module's forward: ranks whose samples
            # train steps of different experts would ready different ones and wait on each
            # other's buckets; such a denoiser's gradients are averaged once per optimizer step
            # instead, every trained tensor in one fixed order (`gradient_sync`)
            _AVERAGED_AFTER_BACKWARD.add(module)
            return module
        return replicate(module)
    if strategy == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        device_type = "cuda" if torch.cuda.is_available() else "cpu"
        mesh = init_device_mesh(device_type, (torch.distributed.get_world_size(),))
        units = forward_units(module)
        for unit in units:  # a denoiser of experts: each expert sharded as one denoiser is
            for block in [m for m in unit.modules() if type(m).__name__ in blocks]:
                fully_shard(block, mesh=mesh)
            fully_shard(unit, mesh=mesh)
        if len(units) > 1:
            # each expert's forward all-gathers its shards and its backward reduce-scatters: every
            # rank runs the experts any rank's call needs (`DenoiserExperts.lockstep`), and every
            # backward reduces what it ran (`gradient_sync`)
            module.lockstep = lambda flags: max_over_ranks(flags, rank_info_from_env())
            _REDUCED_EVERY_BACKWARD.add(module)
        return module
    raise ValueError(f"distributed.training.strategy={strategy!r}: choose none, ddp or fsdp2")


_AVERAGED_AFTER_BACKWARD: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
"""Modules under DDP whose gradients `gradient_sync` averages itself (a denoiser of experts)."""

_REDUCED_EVERY_BACKWARD: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
"""Denoisers of FSDP2-sharded experts: every backward reduce-scatters the experts it ran. Deferred
to the optimizer step's last backward, the gradient an expert accumulated in an earlier one would
never be reduced if that last backward did not run it (FSDP2 reduces in an expert's post-backward)."""

BUCKET_ELEMENTS = 25 * 2**20
"""Gradient elements averaged by one all-reduce (DDP's default bucket is 25 MiB)."""


def average_gradients(module: torch.nn.Module) -> None:
    """Every rank's gradients of `module`'s trainable parameters replaced by their mean over the
    ranks, in buckets, the parameters in their fixed registration order; a parameter this rank's
    backward did not reach counts as a zero gradient (so every rank reduces the same tensors)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    world = torch.distributed.get_world_size()
    bucket: list[torch.Tensor] = []
    filled = 0
    for index, p in enumerate(params):
        bucket.append(p.grad)
        filled += p.grad.numel()
        if filled >= BUCKET_ELEMENTS or index == len(params) - 1:
            flat = torch.cat([g.reshape(-1) for g in bucket])
            torch.distributed.all_reduce(flat)
            flat /= world
            for grad, part in zip(bucket, flat.split([g.numel() for g in bucket])):
                grad.copy_(part.view_as(grad))
            bucket, filled = [], 0


def forward_units(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules whose forward the family calls: `module` itself, or the parts it names with
    `separately_called()` (a denoiser of experts, `models/experts.py`, whose container's forward
    never runs). DDP's and FSDP2's hooks live on forward: a wrapped container whose forward never
    runs would leave its parts' gradients unreduced (DDP) or their weights sharded (FSDP2)."""
    separately_called = getattr(module, "separately_called", None)
    return list(separately_called()) if separately_called is not None else [module]


@contextmanager
def gradient_sync(module: torch.nn.Module | None, enabled: bool) -> Iterator[None]:
    """Within the block, backward reduces gradients over ranks only when `enabled`: DDP's
    `no_sync` / FSDP2's `set_requires_gradient_sync(False)` for all but the last backward of
    an optimizer step (gradients accumulate locally, one reduction per step). A module that
    is not wrapped (one process) is left as is; FSDP2-sharded experts reduce in every backward
    (`_REDUCED_EVERY_BACKWARD`), their sharded gradients accumulating."""
    if module is not None and module in _AVERAGED_AFTER_BACKWARD:
        yield
        if enabled:  # after the optimizer step's last backward, on every rank
            average_gradients(module)
        return
    every_backward = module is not None and module in _REDUCED_EVERY_BACKWARD
    if enabled or module is None or every_backward or not hasattr(module, "set_requires_gradient_sync"):
        yield
        return
    module.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        module.set_requires_gradient_sync(True)


def full_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Whole tensors from possibly sharded (FSDP2 DTensor) ones; every rank must call it."""
    from torch.distributed.tensor import DTensor

    return {name: (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu() for name, t in state.items()}


def full_optimizer_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """`optimizer.state_dict()` with whole tensors (every rank calls it: under FSDP2 the moment
    tensors are shards and are gathered), keyed by parameter index as for one process."""
    from torch.distributed.tensor import DTensor

    state = optimizer.state_dict()
    state["state"] = {
        index: {key: (value.full_tensor() if isinstance(value, DTensor) else value) for key, value in entries.items()}
        for index, entries in state["state"].items()
    }
    return state


def load_full_optimizer_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Inverse of `full_optimizer_state`: whole moment tensors are re-sharded like their
    parameters under FSDP2, then loaded as usual."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = [p for group in optimizer.param_groups for p in group["params"]]
    entries_by_index = {}
    for index, entries in state["state"].items():
        param = params[int(index)]
        if isinstance(param, DTensor):
            entries = {
                key: (
                    distribute_tensor(value.to(param.device), param.device_mesh, param.placements)
                    if torch.is_tensor(value) and value.shape == param.shape
                    else value
                )
                for key, value in entries.items()
            }
        entries_by_index[int(index)] = entries
    optimizer.load_state_dict({"state": entries_by_index, "param_groups": state["param_groups"]})


def rank_positions(num_samples: int, group_size: int, info: RankInfo) -> list[int]:
    """This rank's contiguous sample positions: an equal number of whole groups per rank."""
    num_groups = num_samples // group_size
    if num_groups % info.world_size:
        raise ValueError(
            f"rollout.rollout_batch_size={num_groups} prompt groups cannot be split evenly over "
            f"WORLD_SIZE={info.world_size} ranks"
        )
    per_rank = num_samples // info.world_size
    return list(range(info.rank * per_rank, (info.rank + 1) * per_rank))


def collective_device() -> torch.device:
    """Where a collective's tensors must live: this rank's GPU under NCCL, else the CPU."""
    if torch.distributed.is_initialized() and torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def max_over_ranks(values: list[float], info: RankInfo) -> list[float]:
    """The element-wise maximum of every rank's `values` (one all-reduce; `values` itself on
    one process): how the ranks agree to stop (`runs/stopping.py:MaxOverRanks`)."""
    if info.world_size == 1:
        return values
    flags = torch.tensor(values, dtype=torch.float64, device=collective_device())  # [n]
    torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
    return flags.cpu().tolist()


def all_gather_cat(tensor: torch.Tensor, info: RankInfo) -> torch.Tensor:
    """Concatenate equally shaped per-rank tensors in rank order ([n, ...] -> [world*n, ...]),
    on `tensor`'s device (the exchange itself goes through `collective_device`)."""
    if info.world_size == 1:
        return tensor
    mine = tensor.to(collective_device()).contiguous()
    parts = [torch.empty_like(mine) for _ in range(info.world_size)]
    torch.distributed.all_gather(parts, mine)
    return torch.cat(parts).to(tensor.device)


def gather_to_main(tensor: torch.Tensor, info: RankInfo) -> list[torch.Tensor] | None:
    """Every rank's `tensor` (one shape on every rank), in rank order, on rank 0's CPU; None
    on the other ranks. A collective: every rank calls it (evaluation/sharded.py pads shards so
    the shapes agree)."""
    if info.world_size == 1:
        return [tensor]
    mine = tensor.to(collective_device()).contiguous()
    parts = [torch.empty_like(mine) for _ in range(info.world_size)] if info.is_main else None
    torch.distributed.gather(mine, parts, dst=0)
    return [part.cpu() for part in parts] if parts is not None else None


@dataclass
class RankTotals:
    """Named per-rank figures of a step in a form that combines over ranks: `sums` are added,
    `maxima` and `minima` taken over ranks. A mean is a sum over a count, both summed."""

    sums: dict[str, float] = field(default_factory=dict)
    maxima: dict[str, float] = field(default_factory=dict)
    minima: dict[str, float] = field(default_factory=dict)

    def names(self) -> tuple[tuple[str, ...], ...]:
        return tuple(sorted(self.sums)), tuple(sorted(self.maxima)), tuple(sorted(self.minima))

    def packed(self) -> torch.Tensor:
        """[3 + S + X + N] float64: a fingerprint of the names (their count per kind and a
        CRC-32), then the sums, the maxima and the negated minima, each in name order."""
        names = self.names()
        fingerprint = zlib.crc32("\n\n".join("\n".join(kind) for kind in names).encode())
        values = (
            [float(len(names[0])), float(len(names[1])), float(fingerprint)]
            + [self.sums[n] for n in names[0]]
            + [self.maxima[n] for n in names[1]]
            + [-self.minima[n] for n in names[2]]
        )
        return torch.tensor(values, dtype=torch.float64)


def combine_totals(totals: RankTotals, packed_by_rank: torch.Tensor) -> RankTotals:
    """The job's totals from every rank's `packed()` row ([world, L], rank order), named as
    `totals` (this rank's). Ranks that named different figures are an error: a rank's figures
    would be added to another's."""
    header = packed_by_rank[:, :3]  # [world, 3]
    differing = [rank for rank in range(len(header)) if not torch.equal(header[rank], header[0])]
    if differing:
        raise RuntimeError(
            f"rank {differing[0]} reports other metric names than rank 0 for this step (count or "
            "CRC-32 of the names differ): what a step logs must be named alike on every rank, e.g. "
            "the statistics an algorithm's compute_loss returns must not depend on the rank's data"
        )
    sums, maxima, minima = totals.names()
    body = packed_by_rank[:, 3:]  # [world, S + X + N]
    added = body[:, : len(sums)].sum(0).tolist()
    largest = body[:, len(sums) :].max(0).values.tolist()  # maxima, then the negated minima
    return RankTotals(
        dict(zip(sums, added)),
        dict(zip(maxima, largest[: len(maxima)])),
        {name: -value for name, value in zip(minima, largest[len(maxima) :])},
    )


def reduce_totals(totals: RankTotals, info: RankInfo) -> RankTotals:
    """The job's totals: every rank's sums added, maxima and minima taken over ranks, in one
    all-gather. A collective: every rank calls it once per step, whatever it trained."""
    if info.world_size == 1:
        return totals
    return combine_totals(totals, all_gather_cat(totals.packed()[None], info))


def barrier(info: RankInfo) -> None:
    if info.world_size > 1:
        torch.distributed.barrier()


def shutdown() -> None:
    """Destroy the process group, collecting garbage before and after.

    Why the collections: without them a finished 2-rank gloo run died at interpreter exit with
    `terminate called without an active exception` (SIGABRT) in 9 of 172 launches on CPU with
    torch 2.13, DDP and FSDP2 alike; with them, 0 of 120. The crash comes after this function
    returns, during interpreter finalisation, as pytorch/pytorch#179291 describes: objects
    holding gloo work and tensors are left for finalisation (presumably reference cycles, which
    `gc.collect` frees while the interpreter is still whole)."""
    if torch.distributed.is_initialized():
        gc.collect()
        torch.distributed.destroy_process_group()
        gc.collect()
