"""Config checks that depend on the model family, read from its `FamilySpec`.

Where it fits: the config validation calls `family_problems(cfg)` once, beside its other value
checks, so every family-dependent rule (sizes, video frames, negative prompt, guidance
embedding, text-encoder offload, gradient checkpointing, the source images' size, config keys
the family does not read, a family's own size rule) comes from what the family declares, never from
a table of family names.
Checks that need the loaded checkpoint (a guidance embedding present, Wan's 4k + 1 frames,
Janus' exact size) run when the model loads.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from genalign.config.registry import import_problem, is_dotted_path
from genalign.models.spec import FamilySpec, families_with, spec_or_none
from genalign.rollout.config import MAX_IMAGE_SIDE

if TYPE_CHECKING:
    from genalign.config.schema import ExperimentConfig


def family_problems(cfg: "ExperimentConfig") -> list[str]:
    """model.* and rollout.height/width against what `cfg.model.family` declares (empty when
    they fit, or when the family itself is unknown: the registry check reports that)."""
    model = cfg.model
    if is_dotted_path(model.family) and model.family in model.allow_import:
        problem = import_problem("model.family", model.family, FamilySpec)
        if problem:
            return [problem]
    spec = spec_or_none(model.family, model.allow_import)
    if spec is None:
        return []
    problems = []
    guidance = model.embedded_guidance  # its range (> 0) is ModelConfig.problems'
    if guidance is not None and not spec.guidance_embedding:
        problems.append(
            f"model.embedded_guidance={guidance}: model.family={spec.name} has no guidance "
            f"embedding (only {families_with(lambda s: s.guidance_embedding)}); set it to null"
        )
    if model.offload_text_encoders and not spec.text_encoders:
        problems.append(
            f"model.offload_text_encoders=true: model.family={spec.name} has no separate text "
            f"encoders (only {', '.join(families_with(lambda s: s.text_encoders))}); set it to false"
        )
    if model.gradient_checkpointing and not spec.gradient_checkpointing:
        problems.append(
            f"model.gradient_checkpointing=true: model.family={spec.name} does not support it; set it to false"
        )
    if not spec.experts:
        experts = ", ".join(families_with(lambda s: s.experts))
        if model.experts != "both":
            problems.append(
                f"model.experts={model.experts}: model.family={spec.name} has one denoiser, no experts "
                f"(families with experts: {experts}); remove it"
            )
        if model.low_noise_guidance_scale is not None:
            problems.append(
                f"model.low_noise_guidance_scale={model.low_noise_guidance_scale}: model.family={spec.name} "
                f"has no low-noise expert (families with experts: {experts}); set it to null"
            )
    if model.source_resolution != "run" and spec.pipeline_source_size is None:
        resizing = ", ".join(families_with(lambda s: s.pipeline_source_size is not None))
        problems.append(
            f"model.source_resolution={model.source_resolution}: model.family={spec.name} encodes its "
            f"sources at the run's size only (families with a pipeline resize: {resizing}); set it to run"
        )
    if model.given_frames != "stepped" and not spec.decode_reads_condition:
        giving = ", ".join(families_with(lambda s: s.decode_reads_condition))
        problems.append(
            f"model.given_frames={model.given_frames}: model.family={spec.name}'s condition gives no latent "
            f"frames (families whose does: {giving}); remove it"
        )
    problems += size_problems(spec, cfg.rollout.height, cfg.rollout.width)
    if not problems and (rule := spec.size_problem(model.path, cfg.rollout.height, cfg.rollout.width)):
        problems.append(rule)
    problems += media_problems(spec, model.num_frames, model.negative_prompt)
    problems += unread_key_problems(spec, cfg)
    problems += spec.rollout_sampler_problems(cfg.rollout)
    if spec.rollout_sampler and cfg.eval.num_steps != cfg.rollout.num_steps:
        # the walk is built into the policy once (`configure_rollout`), and evaluation samples
        # with that policy: another eval.num_steps would be a key nothing reads
        problems.append(
            f"eval.num_steps={cfg.eval.num_steps}: model.family={spec.name} evaluates with the walk its "
            f"policy is built with, rollout.num_steps={cfg.rollout.num_steps}; set eval.num_steps="
            f"{cfg.rollout.num_steps} (or eval.num_steps: ${{rollout.num_steps}}, as its model preset does)"
        )
    return problems


def unread_key_problems(spec: FamilySpec, cfg: "ExperimentConfig") -> list[str]:
    """A `spec.unread_keys` key set away from its default: the family would ignore it."""
    problems, defaults = [], type(cfg)()
    for key in spec.unread_keys:
        try:
            value, default = attrgetter(key)(cfg), attrgetter(key)(defaults)
        except AttributeError:  # a user's family spec with a typo
            problems.append(f"model.family={spec.name}: its FamilySpec's unread_keys names {key!r}, not a config key")
            continue
        if value != default:
            problems.append(
                f"{key}={value}: model.family={spec.name} does not read it ({spec.unread_reason}); remove it "
                f"(or set it to its default, {default})"
            )
    return problems


def size_problems(spec: FamilySpec, height: int, width: int) -> list[str]:
    """rollout.height/width against the family's size (sides already in (0, MAX_IMAGE_SIDE]
    are checked; others are reported by the range checks)."""
    if not all(0 < side <= MAX_IMAGE_SIDE for side in (height, width)):
        return []
    side = spec.fixed_size
    if side is not None and (height, width) != (side, side):
        return [
            f"rollout.height/width: model.family={spec.name} generates {side}x{side} images, got "
            f"{height}x{width}; set rollout.height={side} rollout.width={side}"
        ]
    problems = []
    multiple = spec.size_multiple
    for name, value in (("height", height), ("width", width)):
        if value % multiple:
            lower = max(multiple, value // multiple * multiple)
            problems.append(
                f"rollout.{name}={value} must be a multiple of {multiple} for model.family={spec.name} "
                f"(latent patch); e.g. {lower} or {lower + multiple}"
            )
    return problems


def media_problems(spec: FamilySpec, num_frames: int, negative_prompt: str) -> list[str]:
    """model.num_frames and model.negative_prompt against what the family reads (num_frames >= 1
    is ModelConfig.problems')."""
    problems = []
    video = ", ".join(families_with(lambda s: s.media == "video"))
    negative = ", ".join(families_with(lambda s: s.negative_prompt))
    if num_frames > 1 and spec.media != "video":
        problems.append(
            f"model.num_frames={num_frames}: model.family={spec.name} generates images; set "
            f"model.num_frames=1 (video families: {video})"
        )
    if negative_prompt and not spec.negative_prompt:
        problems.append(
            f"model.negative_prompt is set but model.family={spec.name} uses a fixed negative prompt for "
            f"CFG; remove it (families that read it: {negative})"
        )
    return problems
