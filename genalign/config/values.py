"""Value checks: numbers that type-check but would fail (or silently misbehave) later.

Where it fits: `validate` runs these after the typed build, beside its cross-field checks, so
`genalign config` reports them and a run never starts with them. Each check exists because
the value got through before and broke something after the model had loaded: a NaN learning
rate trains NaNs, `actor.betas=[0.5]` fails inside AdamW, `rollout.height=100000` tries
multi-GB allocations, `reward.kwargs.random.sed=1` was a TypeError when the scorer was built.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import math
import re
import typing
from typing import Any

from genalign.config.schema import ExperimentConfig

MAX_IMAGE_SIDE = 4096
"""Largest rollout/eval side accepted: above it one image's latents and activations no longer
fit any accelerator we target; a typo like 100000 should fail here, not in an allocator."""

IMAGE_MULTIPLE = {"sd3": 16, "flux": 16, "qwen_image": 16, "wan": 16, "cosmos": 16, "toy": 16, "janus": 16}
"""Pixels per latent patch of each family: the VAE factor (8) x the transformer patch (2) for
SD3/3.5, Wan and Cosmos, x the 2x2 latent packing for FLUX and Qwen-Image; the toy model samples in
pixel space with patch 4 at exactly 32 x 32 (TOY_SIDE, = data.toy_shapes.IMAGE_SIZE). Janus-Pro
decodes 16 pixels per image token (384 = 24 x 16); its exact size is the checkpoint's, checked
when it loads."""
TOKEN_FAMILIES = ("janus",)
"""Token-autoregressive families: they sample image tokens (`TokenPolicy`), train with a token
algorithm (`policy_kind = "token"`) and read rollout.temperature."""


def family_kind(family: str) -> str:
    """"token" or "flow": what the family samples, compared with an algorithm's `policy_kind`."""
    return "token" if family in TOKEN_FAMILIES else "flow"
GUIDANCE_EMBEDDING_FAMILIES = ("flux", "qwen_image")
"""Families whose transformer may carry a distilled-guidance embedding (model.embedded_guidance);
whether the loaded one does is checked when it loads."""
VIDEO_FAMILIES = ("wan", "cosmos")
"""Families that generate video (model.num_frames > 1 allowed); the exact frame rule (Wan and
Cosmos: 4k + 1) comes from the checkpoint's VAE and is checked when the model loads."""
NEGATIVE_PROMPT_FAMILIES = ("wan", "cosmos")
"""Families whose CFG branch reads model.negative_prompt (SD3, FLUX and the toy use the empty
prompt, Qwen-Image its pipeline's fixed " ")."""
TEXT_ENCODER_FAMILIES = ("sd3", "flux", "qwen_image", "wan", "cosmos")
"""Families with separate frozen text encoders (model.offload_text_encoders can park them)."""
TOY_SIDE = 32
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
    if not DEVICE.match(cfg.model.device):
        problems.append(f"model.device={cfg.model.device!r} is not a device; use auto, cpu, cuda or cuda:<index>")
    guidance = cfg.model.embedded_guidance
    if guidance is not None and cfg.model.family not in GUIDANCE_EMBEDDING_FAMILIES:
        problems.append(f"model.embedded_guidance={guidance}: model.family={cfg.model.family} has no guidance "
                        f"embedding (only {list(GUIDANCE_EMBEDDING_FAMILIES)}); set it to null")
    elif guidance is not None and guidance <= 0:
        problems.append(f"model.embedded_guidance must be > 0 (FLUX.1-dev: 3.5) or null, got {guidance}")
    if cfg.model.offload_text_encoders and cfg.model.family not in TEXT_ENCODER_FAMILIES:
        problems.append(f"model.offload_text_encoders=true: model.family={cfg.model.family} has no separate text "
                        f"encoders (only {', '.join(TEXT_ENCODER_FAMILIES)}); set it to false")
    problems += image_size_problems(cfg.model.family, cfg.rollout.height, cfg.rollout.width)
    problems += media_problems(cfg.model.family, cfg.model.num_frames, cfg.model.negative_prompt)
    problems += reward_option_problems(cfg)
    return problems


def reward_package_problems(cfg: ExperimentConfig) -> list[str]:
    """Every selected scorer (reward.components, eval.gold_rewards, eval.quality_metrics) whose
    options need a package that is not installed: a config error naming the extra."""
    from genalign.config.extras import missing_package_problem
    from genalign.rewards.options import parse_options
    from genalign.rewards.registry import REWARD_OPTIONS

    problems: list[str] = []
    # a zero weight is never built (the runtime skips it), so it needs no package
    selected = {"reward.components": [name for name, weight in cfg.reward.components.items() if weight],
                "eval.gold_rewards": [name for name, weight in cfg.eval.gold_rewards.items() if weight],
                "eval.quality_metrics": list(cfg.eval.quality_metrics)}
    for key, names in selected.items():
        for name in names:
            if name not in REWARD_OPTIONS:
                continue
            module_name, attr = REWARD_OPTIONS[name].split(":")
            options_cls = getattr(importlib.import_module(module_name), attr)  # scorer modules import no model
            try:
                options = parse_options(name, options_cls, dict(cfg.reward.kwargs.get(name) or {}))
            except (TypeError, ValueError):
                continue  # reward_option_problems reports bad options
            needed = options.required_package() if hasattr(options, "required_package") else None
            missing = needed and missing_package_problem(f"{key}.{name}", *needed)
            if missing:
                problems.append(missing)
    return problems


def non_finite_problems(node: Any, key: str = "") -> list[str]:
    """`key: must be a finite number` for every NaN/inf float in the config tree."""
    if dataclasses.is_dataclass(node):
        return [p for f in dataclasses.fields(node) for p in non_finite_problems(getattr(node, f.name),
                                                                          f"{key}.{f.name}" if key else f.name)]
    if isinstance(node, dict):
        return [p for name, value in node.items() for p in non_finite_problems(value, f"{key}.{name}")]
    if isinstance(node, list):
        return [p for i, value in enumerate(node) for p in non_finite_problems(value, f"{key}[{i}]")]
    if isinstance(node, float) and not math.isfinite(node):
        return [f"{key} must be a finite number, got {node}"]
    return []


def image_size_problems(family: str, height: int, width: int) -> list[str]:
    """rollout.height/width against the family's latent patch and the global size bound."""
    problems = [f"rollout.{name}={side} is too large (max {MAX_IMAGE_SIDE} pixels a side)"
                for name, side in (("height", height), ("width", width)) if side > MAX_IMAGE_SIDE]
    if problems or height <= 0 or width <= 0:
        return problems  # non-positive sizes are reported by validate
    if family == "toy" and (height, width) != (TOY_SIDE, TOY_SIDE):
        return [f"rollout.height/width: the toy model generates {TOY_SIDE}x{TOY_SIDE} images, got {height}x{width}; "
                f"set rollout.height={TOY_SIDE} rollout.width={TOY_SIDE}"]
    multiple = IMAGE_MULTIPLE.get(family)
    if multiple:
        for name, side in (("height", height), ("width", width)):
            if side % multiple:
                lower = max(multiple, side // multiple * multiple)
                problems.append(f"rollout.{name}={side} must be a multiple of {multiple} for model.family={family} "
                                f"(latent patch); e.g. {lower} or {lower + multiple}")
    return problems


def media_problems(family: str, num_frames: int, negative_prompt: str) -> list[str]:
    """model.num_frames and model.negative_prompt against what the family reads."""
    problems = []
    if num_frames < 1:
        problems.append(f"model.num_frames must be >= 1, got {num_frames}")
    elif num_frames > 1 and family not in VIDEO_FAMILIES:
        problems.append(f"model.num_frames={num_frames}: model.family={family} generates images; set "
                        f"model.num_frames=1 (video families: {', '.join(VIDEO_FAMILIES)})")
    if negative_prompt and family not in NEGATIVE_PROMPT_FAMILIES:
        problems.append(f"model.negative_prompt is set but model.family={family} uses a fixed negative prompt for CFG; "
                        f"remove it (families that read it: {', '.join(NEGATIVE_PROMPT_FAMILIES)})")
    return problems


def reward_option_problems(cfg: ExperimentConfig) -> list[str]:
    """`reward.kwargs.<name>.<key>` against each registered scorer's options dataclass:
    unknown keys (with a "did you mean") and values of the wrong type."""
    from genalign.config.loader import _convert
    from genalign.rewards.registry import REWARD_OPTIONS

    problems: list[str] = []
    for name, options in cfg.reward.kwargs.items():
        target = REWARD_OPTIONS.get(name)
        if target is None:  # a dotted-path reward, or a name validate already reports
            continue
        if not isinstance(options, dict):
            problems.append(f"reward.kwargs.{name} must be a mapping of options, got {options!r}")
            continue
        module_name, attr = target.split(":")
        options_cls = getattr(importlib.import_module(module_name), attr)  # scorer modules import no model
        hints = typing.get_type_hints(options_cls)
        valid = [f.name for f in dataclasses.fields(options_cls)]
        for key, value in options.items():
            dotted = f"reward.kwargs.{name}.{key}"
            if key not in valid:
                close = difflib.get_close_matches(str(key), valid, n=1)
                hint = f"; did you mean reward.kwargs.{name}.{close[0]}?" if close else ""
                problems.append(f"{dotted}: unknown option for reward {name!r}{hint} "
                                f"Valid: {', '.join(valid) or '(none)'}")
                continue
            _convert(hints[key], value, dotted, f"reward.kwargs.{name}", problems, {})
    return problems
