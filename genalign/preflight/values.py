"""Value checks: numbers that type-check but would fail (or silently misbehave) later.

Where it fits: `validate` runs these after the typed build, beside its cross-field checks, so
`genalign config` reports them and a run never starts with them. Each check exists because
the value got through before and broke something after the model had loaded: a NaN learning
rate trains NaNs, `actor.betas=[0.5]` fails inside AdamW, `rollout.height=100000` tries
multi-GB allocations, `reward.kwargs.random.sed=1` was a TypeError when the scorer was built.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import re
from typing import Any

from genalign.config.schema import ExperimentConfig
from genalign.models.family_checks import MAX_IMAGE_SIDE, family_problems
from genalign.rewards.options import reward_option_problems

def family_kind(cfg: ExperimentConfig) -> str | None:
    """"token" or "flow": what `model.family` samples (its `FamilySpec.sampler`), compared with
    an algorithm's `policy_kind`; None when the family does not resolve, which `validate`
    reports once under model.family rather than again in every check that reads the kind."""
    from genalign.models.spec import spec_or_none

    spec = spec_or_none(cfg.model.family, cfg.model.allow_import)
    return None if spec is None else spec.sampler


def token_family_names() -> list[str]:
    """The registered families that sample image tokens (for messages)."""
    from genalign.models.spec import families_with

    return families_with(lambda spec: spec.sampler == "token")


DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
"""`model.device` values `resolve_device` accepts (whether that device exists is a machine check)."""


def value_problems(cfg: ExperimentConfig) -> list[str]:
    """Optimizer and EMA ranges, CFG scales, image sizes and reward options (empty when every
    value can run). Call on a config without non-finite numbers (`non_finite_problems`)."""
    problems: list[str] = []
    actor = cfg.actor
    if actor.lr <= 0:
        problems.append(f"actor.lr must be > 0, got {actor.lr}")
    if len(actor.betas) != 2 or not all(0 <= beta < 1 for beta in actor.betas):
        problems.append(f"actor.betas must be two numbers in [0, 1) (AdamW's beta1, beta2), got {actor.betas}; "
                        "e.g. actor.betas=[0.9,0.999]")
    if actor.eps <= 0:
        problems.append(f"actor.eps must be > 0, got {actor.eps}")
    if actor.weight_decay < 0:
        problems.append(f"actor.weight_decay must be >= 0, got {actor.weight_decay}")
    if cfg.algorithm.adv_clip_max <= 0:  # clamp(A, -0, 0) zeroes every advantage: nothing would train
        problems.append(f"algorithm.adv_clip_max must be > 0 (advantages are clamped to ±it), got "
                        f"{cfg.algorithm.adv_clip_max}")
    if actor.max_grad_norm <= 0:
        problems.append(f"actor.max_grad_norm must be > 0 (gradients are clipped to it), got {actor.max_grad_norm}")
    if not 0 <= actor.ema.decay < 1:
        problems.append(f"actor.ema.decay must be in [0, 1) (1 would never move the average), got {actor.ema.decay}")
    if cfg.rollout.guidance_scale < 1:
        problems.append(f"rollout.guidance_scale must be >= 1 (1.0 turns CFG off), got {cfg.rollout.guidance_scale}")
    if cfg.eval.guidance_scale is not None and cfg.eval.guidance_scale < 1:
        problems.append(f"eval.guidance_scale must be >= 1 (1.0 turns CFG off) or null (the rollout's), "
                        f"got {cfg.eval.guidance_scale}")
    if cfg.eval.samples_per_prompt <= 0:
        problems.append(f"eval.samples_per_prompt must be positive, got {cfg.eval.samples_per_prompt}")
    if cfg.reward.timeout_s <= 0:
        problems.append(f"reward.timeout_s must be > 0, got {cfg.reward.timeout_s}")
    if not 0 <= cfg.model.lora.dropout < 1:
        problems.append(f"model.lora.dropout must be in [0, 1), got {cfg.model.lora.dropout}")
    for key, value in {"data.manifest": cfg.data.manifest, "data.eval_manifest": cfg.data.eval_manifest,
                       "model.path": cfg.model.path, "trainer.output_dir": cfg.trainer.output_dir}.items():
        if not value.strip():  # "" is the working directory to pathlib: never what was meant
            problems.append(f"{key} is empty; set it to a path")
    fraction = cfg.distributed.resources.gpu_memory_fraction
    if fraction is not None and not 0 < fraction <= 1:
        problems.append(f"distributed.resources.gpu_memory_fraction must be in (0, 1] (the share of a GPU a planned "
                        f"peak may fill) or null (no memory check), got {fraction}")
    gib = cfg.distributed.resources.gpu_memory_gib
    if gib is not None and gib <= 0:
        problems.append(f"distributed.resources.gpu_memory_gib must be > 0 (one GPU's memory) or null, got {gib}")
    if not DEVICE.match(cfg.model.device):
        problems.append(f"model.device={cfg.model.device!r} is not a device; use auto, cpu, cuda or cuda:<index>")
    problems += image_size_problems(cfg.rollout.height, cfg.rollout.width)
    problems += family_problems(cfg)  # sizes, frames, negative prompt, guidance, offload: the family's spec
    problems += reward_option_problems(cfg)  # rewards/options.py
    return problems


def selected_reward_options(cfg: ExperimentConfig) -> list[tuple[str, str, Any]]:
    """(config key, scorer name, parsed options) of every selected registered scorer
    (reward.components and eval.gold_rewards with a non-zero weight, eval.quality_metrics); a
    zero weight is never built, and options that do not parse are left to reward_option_problems."""
    from genalign.rewards.options import parse_options
    from genalign.rewards.registry import REWARD_OPTIONS

    selected = {"reward.components": [name for name, weight in cfg.reward.components.items() if weight],
                "eval.gold_rewards": [name for name, weight in cfg.eval.gold_rewards.items() if weight],
                "eval.quality_metrics": list(cfg.eval.quality_metrics)}
    found = []
    for key, names in selected.items():
        for name in names:
            if name not in REWARD_OPTIONS:
                continue
            module_name, attr = REWARD_OPTIONS[name].split(":")
            options_cls = getattr(importlib.import_module(module_name), attr)  # scorer modules import no model
            try:
                found.append((key, name, parse_options(name, options_cls, dict(cfg.reward.kwargs.get(name) or {}))))
            except (TypeError, ValueError):
                continue
    return found


def reward_package_problems(cfg: ExperimentConfig) -> list[str]:
    """Every selected scorer (reward.components, eval.gold_rewards, eval.quality_metrics) whose
    options need a package that is not installed: a config error naming the extra."""
    from genalign.config.extras import missing_package_problem

    problems: list[str] = []
    for key, name, options in selected_reward_options(cfg):
        needed = options.required_package() if hasattr(options, "required_package") else None
        missing = needed and missing_package_problem(f"{key}.{name}", *needed)
        if missing:
            problems.append(missing)
    return problems


def config_leaves(node: Any, key: str = ""):
    """(dotted key, value) of every leaf of a config tree: dataclass fields, mapping entries
    (`key.name`), list items (`key[i]`)."""
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            yield from config_leaves(getattr(node, f.name), f"{key}.{f.name}" if key else f.name)
    elif isinstance(node, dict):
        for name, value in node.items():
            yield from config_leaves(value, f"{key}.{name}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from config_leaves(value, f"{key}[{i}]")
    else:
        yield key, node


def non_finite_problems(node: Any) -> list[str]:
    """`key: must be a finite number` for every NaN/inf float in the config tree."""
    return [f"{key} must be a finite number, got {value}" for key, value in config_leaves(node)
            if isinstance(value, float) and not math.isfinite(value)]


INT64_RANGE = (-2**63, 2**63 - 1)
"""What torch, numpy and the seeds' hash take as an integer."""


def int64_problems(node: Any) -> list[str]:
    """`key: does not fit in 64 bits` for every integer YAML read as arbitrarily large
    (trainer.seed=99999999999999999999 overflows torch.manual_seed; a LoRA rank of 10^20 could
    never be allocated): Python's ints are unbounded, the libraries that take them are not."""
    return [f"{key}={value} does not fit in a 64-bit integer (|value| < 2**63); use a smaller number"
            for key, value in config_leaves(node)
            if isinstance(value, int) and not isinstance(value, bool) and not INT64_RANGE[0] <= value <= INT64_RANGE[1]]


def image_size_problems(height: int, width: int) -> list[str]:
    """rollout.height/width against the global size bound (the family's own sizes:
    `family_problems`)."""
    return [f"rollout.{name}={side} is too large (max {MAX_IMAGE_SIDE} pixels a side)"
            for name, side in (("height", height), ("width", width)) if side > MAX_IMAGE_SIDE]
