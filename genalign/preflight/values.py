"""Value checks over the whole tree, and what the selected scorers and the family need.

Where it fits: `validate` runs these after the typed build, beside its cross-field checks, so
`genalign config` reports them and a run never starts with them: a NaN or an integer past 64
bits anywhere in the tree (`non_finite_problems`, `int64_problems`; a NaN learning rate trains
NaNs, a seed of 10^20 overflows torch), a selected scorer's package that is not installed
(`reward_package_problems`), and the family's kind the algorithm checks read (`family_kind`).
The range of each value is its block's (`problems()` beside its fields: `actor.betas=[0.5]`
fails inside AdamW, `rollout.height=100000` tries multi-GB allocations).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any

from genalign.config.extras import missing_package_problem
from genalign.config.schema import ExperimentConfig
from genalign.models.spec import families_with, spec_or_none
from genalign.rewards.options import parse_options
from genalign.rewards.registry import REWARD_OPTIONS


def family_kind(cfg: ExperimentConfig) -> str | None:
    """ "token" or "flow": what `model.family` samples (its `FamilySpec.sampler`), compared with
    an algorithm's `policy_kind`; None when the family does not resolve, which `validate`
    reports once under model.family rather than again in every check that reads the kind."""
    spec = spec_or_none(cfg.model.family, cfg.model.allow_import)
    return None if spec is None else spec.sampler


def token_family_names() -> list[str]:
    """The registered families that sample image tokens (for messages)."""
    return families_with(lambda spec: spec.sampler == "token")


def selected_reward_options(cfg: ExperimentConfig) -> list[tuple[str, str, Any]]:
    """(config key, scorer name, parsed options) of every selected registered scorer
    (reward.components and eval.gold_rewards with a non-zero weight, eval.quality_metrics); a
    zero weight is never built, and options that do not parse are left to reward_option_problems."""
    selected = {
        "reward.components": list(cfg.reward.active_components()),
        "eval.gold_rewards": list(cfg.eval.active_gold_rewards()),
        "eval.quality_metrics": list(cfg.eval.quality_metrics),
    }
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
    return [
        f"{key} must be a finite number, got {value}"
        for key, value in config_leaves(node)
        if isinstance(value, float) and not math.isfinite(value)
    ]


INT64_RANGE = (-(2**63), 2**63 - 1)
"""What torch, numpy and the seeds' hash take as an integer."""


def int64_problems(node: Any) -> list[str]:
    """`key: does not fit in 64 bits` for every integer YAML read as arbitrarily large
    (trainer.seed=99999999999999999999 overflows torch.manual_seed; a LoRA rank of 10^20 could
    never be allocated): Python's ints are unbounded, the libraries that take them are not."""
    return [
        f"{key}={value} does not fit in a 64-bit integer (|value| < 2**63); use a smaller number"
        for key, value in config_leaves(node)
        if isinstance(value, int) and not isinstance(value, bool) and not INT64_RANGE[0] <= value <= INT64_RANGE[1]
    ]
