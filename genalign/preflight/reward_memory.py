"""Reward models in the memory plan: where each runtime puts them, and how large they are.

Where it fits: `preflight/memory_plan.py` asks this module which reward models sit on the
trainer's GPU and when. The sizes come from the scorers' own declarations
(`<Options>.device_models`, counted by `rewards/model_sizes.py` from published configs).

Where they are, by `reward.runtime`:
- local: every scorer is built on the trainer's device. The training reward is offloaded to
  the CPU while the policy samples (`training/sources.py`) and onloaded to score, so it is on
  the device through replay, the optimizer step and evaluation; with `reward.async_scoring`
  it scores while the policy samples and never leaves. The evaluator's gold rewards and
  quality metrics are built once and never offloaded: on the device from start to end.
- ray: each scorer in its own actors; with `reward.num_gpus_per_worker > 0` on a GPU Ray
  assigns (a role of its own in the plan), else on the CPU.
- http: on the reward server's machine; nothing here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from genalign.config.errors import ConfigError
from genalign.preflight.memory_math import Line
from genalign.rewards.model_sizes import RewardModelUnknown, image_gradient_bytes, model_sizes
from genalign.rewards.options import parse_options
from genalign.rewards.registry import REWARD_OPTIONS


class NoMemoryEstimate(ConfigError):
    """No estimate can be made: one line naming what is not described and how to describe it."""

    def __init__(self, problem: str):
        super().__init__([problem], hint="docs/memory_plan.md says what the plan needs")


SKIP_CHECK = "or set distributed.resources.gpu_memory_fraction=null to run without a memory check"


@dataclass(frozen=True)
class RewardMemory:
    training: tuple[Line, ...]
    """The training reward's models on the trainer's GPU (reward.runtime=local)."""
    evaluation: tuple[Line, ...]
    """The gold rewards' and quality metrics' models on the trainer's GPU (local): never offloaded."""
    always_resident: bool
    """reward.async_scoring: the training reward scores while the policy samples, so it stays."""
    actor_lines: tuple[tuple[str, tuple[Line, ...]], ...]
    """(name, lines) of each Ray reward pool on a GPU of its own (reward.runtime=ray)."""
    notes: tuple[str, ...]
    """Where the reward models are when they are not on these GPUs, and what is not counted."""


def reward_memory(cfg) -> RewardMemory:
    """Which reward models sit where, for the config's reward runtime."""
    pools = {
        "training reward": cfg.reward.active_components(),
        "gold rewards": cfg.eval.active_gold_rewards(),
        "quality metrics": dict.fromkeys(cfg.eval.quality_metrics, 1.0),
    }
    runtime = cfg.reward.runtime
    if runtime == "http":
        return RewardMemory(
            (),
            (),
            False,
            (),
            ("reward models: on the reward server at reward.url (reward.runtime=http), none on these GPUs",),
        )
    notes = [note for names in pools.values() for name in names for note in _unknown_scorer(name)]
    if runtime == "ray":
        return _ray_memory(cfg, pools, notes)
    training = tuple(line for name in pools["training reward"] for line in scorer_lines(cfg, name))
    evaluation = tuple(
        line
        for pool in ("gold rewards", "quality metrics")
        for name in pools[pool]
        for line in scorer_lines(cfg, name, pool)
    )
    return RewardMemory(training, evaluation, cfg.reward.async_scoring, (), tuple(notes))


def _ray_memory(cfg, pools: dict[str, dict], notes: list[str]) -> RewardMemory:
    gpus = cfg.reward.num_gpus_per_worker
    if gpus <= 0:
        return RewardMemory(
            (),
            (),
            False,
            (),
            (*notes, "reward models: in Ray actors on the CPU (reward.runtime=ray, reward.num_gpus_per_worker=0)"),
        )
    actors = tuple(
        (
            f"Ray reward actor of {pool} {name} (each of reward.num_workers={cfg.reward.num_workers}, "
            f"{gpus:g} GPU each)",
            lines,
        )
        for pool, names in pools.items()
        for name in names
        if (lines := tuple(scorer_lines(cfg, name)))
    )
    return RewardMemory((), (), False, actors, tuple(notes))


def _options_class(name: str):
    """The registered scorer's options dataclass; None for your own scorer (a dotted path)."""
    target = REWARD_OPTIONS.get(name)
    if target is None:
        return None
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)


def _unknown_scorer(name: str) -> list[str]:
    if _options_class(name) is not None:
        return []
    return [f"reward {name} (your own scorer): its models are not counted; budget for them beside the plan"]


def scorer_lines(cfg, name: str, pool: str = "training reward") -> list[Line]:
    """(what, bytes) of each model scorer `name` holds on its device, from its options'
    `device_models`; a model no config describes is a `NoMemoryEstimate`."""
    options_cls = _options_class(name)
    if options_cls is None:
        return []
    options = parse_options(name, options_cls, dict(cfg.reward.kwargs.get(name, {})))
    try:
        sizes = [size for model in options.device_models(name) for size in model_sizes(name, model)]
    except RewardModelUnknown as exc:
        raise NoMemoryEstimate(
            f"memory plan: {exc}; point it at a local directory with the model's config.json, {SKIP_CHECK}"
        ) from exc
    return [(f"{pool} {name} ({size.what}, {size.dtype})", size.bytes) for size in sizes]


def scorer_gradient_lines(cfg, rows: int) -> list[Line]:
    """Reward feedback back-propagates each training scorer's score into the pixels: (what,
    bytes) of the activations its models' image towers keep under grad for `rows` images
    (`image_gradient_bytes`); a model without an image forward the plan knows gets a line
    saying it is not counted."""
    lines: list[Line] = []
    for name in cfg.reward.active_components():
        options_cls = _options_class(name)
        if options_cls is None:
            lines.append((f"training reward {name} under grad (your own scorer): not counted", 0.0))
            continue
        options = parse_options(name, options_cls, dict(cfg.reward.kwargs.get(name, {})))
        for model in options.device_models(name):
            size = image_gradient_bytes(name, model, rows)
            source = (
                model.source.replace("\\", "/").rsplit("/", 1)[-1]
                if model.source.endswith(".safetensors")
                else model.source
            )
            what = f"training reward {name} ({source}) activations under grad, {rows} images"
            lines.append((what, size) if size is not None else (f"{what}: not counted (no image tower known)", 0.0))
    return lines
