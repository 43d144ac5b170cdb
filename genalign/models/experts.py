"""A denoiser made of several diffusers models, each used at some steps (Wan 2.2 A14B's experts).

Where it fits: the loop trains one module, `policy.transformer` (LoRA, the optimizer's
parameters, checkpoints, EMA, the Ray weight sync and its fingerprint, the reference copy all
take it whole). A two-expert checkpoint keeps that contract by wrapping its experts in one
`DenoiserExperts` module whose children are named as the pipeline's components
(`transformer` = the high-noise expert, `transformer_2` = the low-noise expert, as WanPipeline
names them), so every trained tensor's name says which expert it belongs to and the
weight sync moves both experts with no code of its own. Which expert a step uses is the
family's business (its `velocity`); what is trained (`model.experts`) and how each expert is
exported (its own folder, loadable as that pipeline component) is read here.
"""

from __future__ import annotations

from typing import Callable, get_args

import torch

from genalign.models.config import Experts

EXPERT_COMPONENTS = {"high_noise": "transformer", "low_noise": "transformer_2"}
"""`model.experts` value -> the pipeline component holding that expert (diffusers' WanPipeline
and WanImageToVideoPipeline: `transformer` runs at timesteps >= the boundary, `transformer_2`
below it)."""
SINGLE = "transformer"
"""The component name of a one-model denoiser (every other family, Wan 2.1, TI2V-5B)."""


def trained_components(experts: str, present: tuple[str, ...]) -> tuple[str, ...]:
    """The pipeline components `model.experts=experts` trains among the denoiser components
    `present` ("both": all of them)."""
    if experts not in get_args(Experts):
        raise ValueError(f"model.experts={experts!r}: choose one of {list(get_args(Experts))}")
    if experts == "both":
        return present
    return tuple(name for name in present if name == EXPERT_COMPONENTS[experts])


class DenoiserExperts(torch.nn.Module):
    """The experts of one denoiser as one module: children named by their pipeline component,
    `trained` naming those whose weights train (the others stay frozen, LoRA-free)."""

    def __init__(self, experts: dict[str, torch.nn.Module], trained: tuple[str, ...]):
        super().__init__()
        unknown = sorted(set(trained) - set(experts))
        if unknown or not trained:
            raise ValueError(f"trained experts {list(trained)} must be a non-empty subset of {sorted(experts)}")
        for name, module in experts.items():
            self.add_module(name, module)
        self.trained = tuple(trained)
        self.lockstep: Callable[[list[float]], list[float]] | None = None
        """Set when the experts are sharded (FSDP2, `training.distributed.wrap_for_training`):
        each expert's forward all-gathers its shards, so every rank must run the same experts in
        every call. It maps this rank's per-expert flags (1: this call has rows for it) to their
        maximum over the ranks, a collective every rank enters at every call."""

    def experts_to_run(self, needed: dict[str, bool]) -> dict[str, bool]:
        """{expert: whether this call runs it} from {expert: whether this call has rows for it}:
        the same on every rank under `lockstep` (an expert some rank needs runs everywhere, on a
        rank without rows for it as a zero-weighted filler row), else `needed` itself."""
        if self.lockstep is None:
            return needed
        agreed = self.lockstep([float(flag) for flag in needed.values()])
        return {name: value > 0 for name, value in zip(needed, agreed)}

    def separately_called(self) -> list[torch.nn.Module]:
        """The experts: the family calls each on its own, never this module's forward, so a
        distributed wrapper hooks each (`training.distributed.forward_units`)."""
        return list(self.children())

    def enable_gradient_checkpointing(self) -> None:
        """Every expert's (a frozen expert keeps no activations for backward anyway)."""
        for module in self.children():
            module.enable_gradient_checkpointing()


def shard_local(param: torch.Tensor) -> torch.Tensor:
    """This rank's own part of `param`: an FSDP2 shard (DTensor) outside its forward as a plain
    tensor (autograd reaches the DTensor through it, no collective), else `param` itself."""
    to_local = getattr(param, "to_local", None)
    return to_local() if to_local is not None else param


def denoiser_parts(module: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """{pipeline component: model} of what trains in `module`: the trained experts of a
    `DenoiserExperts`, else `{"transformer": module}`."""
    if isinstance(module, DenoiserExperts):
        return {name: getattr(module, name) for name in module.trained}
    return {SINGLE: module}


def part_state(state: dict[str, torch.Tensor], module: torch.nn.Module, name: str) -> dict[str, torch.Tensor]:
    """The tensors of `state` (named as `module`'s parameters) that belong to part `name`,
    renamed as that part's own parameters (the prefix `name.` dropped for an expert)."""
    if not isinstance(module, DenoiserExperts):
        return state
    prefix = f"{name}."
    return {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}
