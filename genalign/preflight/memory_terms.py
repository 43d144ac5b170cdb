"""The lines of a memory plan, computed once from a config: weights, trained state, working sets.

Where it fits: `memory_plan.py` places these lines in roles and phases by the run's placement.
Sizes come from the model's architecture (`models/architecture.py`) and the activation
calibration (the family's `calibration.json`, read through its `FamilySpec`); a model
neither describes is a `NoMemoryEstimate` naming what to add.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from genalign.algorithms.registry import algorithm_class
from genalign.models.architecture import TRANSFORMER, decoder_gradient_bytes, load_architecture, lora_parameters
from genalign.models.experts import trained_components
from genalign.models.spec import OUTSIDE_BLOCKS, OUTSIDE_BLOCKS_STEPS, MissingCalibration, family_spec
from genalign.preflight.memory_math import (
    DTYPE_BYTES,
    FLOAT32_COMPONENTS,
    MASTER_BYTES,
    TEXT_ENCODER,
    Line,
    adamw_temporary_bytes,
    autocast_cache_bytes,
    chain_activation_bytes,
    kv_cache_bytes,
    outside_blocks_bytes,
    outside_blocks_step_scale,
    replay_activation_bytes,
    replay_coefficient,
    replay_rows,
    rollout_working_bytes,
    shard,
    tokens_per_row,
    trainable_state_bytes,
    weight_bytes,
)
from genalign.preflight.reward_memory import SKIP_CHECK, NoMemoryEstimate, scorer_gradient_lines
from genalign.preflight.step_sizes import StepSizes


@dataclass(frozen=True)
class Terms:
    """Every line the roles are built from, computed once from the config (per GPU)."""

    arch: object
    """The model's `Architecture` (models/architecture.py)."""
    calibration: dict
    ranks: int
    fsdp: bool
    trained: int
    """Trained parameters (LoRA, or the whole transformer)."""
    frozen: tuple[Line, ...]
    """The trainer's frozen weights, the reference copy included."""
    encoders: float
    """Text encoders parked on the CPU except while prompts are encoded (0: not parked)."""
    state: tuple[Line, ...]
    """Trained state: masters, gradients, AdamW, EMA, algorithm copies (FSDP2: this rank's shard)."""
    micro: Line
    replay: tuple[Line, ...]
    """Replay's working lines: activations (+ the reference forward), a full fine-tune's
    gathered FSDP2 block."""
    sampling: Line
    evaluation: Line | None
    """The evaluation sampler's working set (None: the run never evaluates)."""
    cache: Line | None
    """Autocast's casts of the trained weights (None at float32 compute: nothing is cast)."""
    optimizer: Line
    ema_swap: Line | None
    """The live weights kept while evaluation swaps the EMA in."""


def plan_terms(cfg) -> Terms:
    """The lines of `cfg`'s plan; `NoMemoryEstimate` when the model is not described."""
    arch, calibration = _described(cfg)
    run = StepSizes.from_config(cfg)
    ranks, fsdp = trainer_ranks(cfg), cfg.distributed.training.strategy == "fsdp2"
    split = ranks if fsdp else 1  # FSDP2 shards the transformer and its trained state; DDP replicates
    trained, base = _trained_parameters(cfg, arch)
    frozen, encoders = _frozen_lines(cfg, arch, base, split)
    replay = [_activation_line(cfg, arch, calibration, run), *_feedback_lines(cfg, run)]
    if cfg.model.train_mode == "full" and split > 1:  # one unit's float32 parameters and gradients
        block = weight_bytes(arch.component(TRANSFORMER).parameters, 2 * MASTER_BYTES) / max(arch.num_layers, 1)
        replay.append(("FSDP2 gathered block (fp32 parameters + gradients of one block)", block))
    return Terms(
        arch,
        calibration,
        ranks,
        fsdp,
        trained,
        tuple(frozen),
        encoders,
        tuple(_state_lines(cfg, trained, split, fsdp)),
        _micro_line(cfg, arch, run),
        tuple(replay),
        _sampling_line(cfg, arch, calibration, run.rollout_micro_batch, run.uses_cfg, "rollout"),
        _evaluation_line(cfg, arch, calibration),
        _cache_line(cfg, trained),
        ("AdamW step temporary (fp32 sqrt of exp_avg_sq)", shard(adamw_temporary_bytes(trained), split)),
        _ema_swap_line(cfg, trained, split),
    )


def _described(cfg):
    """(architecture, calibration) of the model, both keyed by the family's name (a user's
    family: its spec's); `NoMemoryEstimate` naming what is missing."""
    m, spec = cfg.model, family_spec_of(cfg)
    family = m.family if m.family == spec.name else f"{m.family} ({spec.name})"
    try:
        calibration = spec.calibration()
    except MissingCalibration as missing:
        raise NoMemoryEstimate(
            f"memory plan: model.family={family}: {missing} (its activation bytes per token): add one "
            "measured as benchmarks/calibrate_memory.py measures the shipped families "
            f"(docs/memory_plan.md, 'Calibrating a family'), {SKIP_CHECK}"
        ) from None
    arch = load_architecture(spec, m.path, m.path == spec.builtin_path)
    if arch is None:
        raise NoMemoryEstimate(
            f"memory plan: model.path={m.path} (model.family={family}): no architecture config "
            "describes it (not a local save_pretrained directory, not in the Hugging Face cache, no "
            f"file in the family's {spec.folder or 'folder'}/architectures/); download it and set "
            f"model.path to the directory, {SKIP_CHECK}"
        )
    return arch, calibration


def _trained_parameters(cfg, arch) -> tuple[int, int]:
    """(trained parameters, frozen denoiser parameters): LoRA's adapters over the frozen
    transformer, or a full fine-tune's whole transformer (float32 masters, none frozen). With
    two experts (`arch.denoisers`) both are resident; `model.experts` says which train (an
    adapter each, or its whole weights), the other is frozen."""
    m = cfg.model
    trained = trained_components(m.experts, arch.denoisers)
    weights = {name: arch.component(name).parameters for name in arch.denoisers}
    if m.train_mode != "lora":
        return sum(weights[name] for name in trained), sum(weights[n] for n in arch.denoisers if n not in trained)
    targets = m.lora.target_modules or family_spec_of(cfg).policy_class().lora_target_modules
    return len(trained) * lora_parameters(arch.linear_shapes, targets, m.lora.rank), sum(weights.values())


def _frozen_lines(cfg, arch, base: int, shards: int) -> tuple[list[Line], float]:
    """(the frozen weights on the trainer's GPU, the parked text encoders' bytes)."""
    m, dtype_bytes = cfg.model, DTYPE_BYTES[cfg.model.dtype]
    lines, encoders = [], 0.0
    denoisers = [arch.component(name) for name in arch.denoisers]
    if base:  # a full fine-tune's transformer is all trained: float32 masters in the state lines
        base_bytes = weight_bytes(base + sum(d.buffer_elements for d in denoisers), dtype_bytes)
        if shards > 1:  # per-block fully_shard: the rank's shard plus one block gathered at a time
            base_bytes = shard(base_bytes, shards) + base_bytes / max(arch.num_layers, 1)
        lines.append(
            (f"transformer base weights ({m.dtype}{', FSDP2 shard + 1 block' if shards > 1 else ''})", base_bytes)
        )
    for c in arch.components:
        if c.name in arch.denoisers:
            continue
        at = 4 if c.name in FLOAT32_COMPONENTS else dtype_bytes  # the VAE / VQ decoder computes in float32
        size = weight_bytes(c.parameters + c.buffer_elements, at)
        if m.offload_text_encoders and c.name.startswith(TEXT_ENCODER):
            encoders += size
        else:
            lines.append((f"{c.name} (frozen, {'float32' if at == 4 else m.dtype})", size))
    if m.train_mode == "full" and algorithm_class(cfg).reference_kind(cfg.algorithm) == "frozen":
        copy = sum(d.parameters for d in denoisers)  # the whole denoiser, both experts
        lines.append((f"reference transformer copy ({m.dtype})", weight_bytes(copy, dtype_bytes)))
    return lines, encoders


def _state_lines(cfg, trained: int, shards: int, fsdp: bool) -> list[Line]:
    state = trainable_state_bytes(trained, cfg.actor.ema.enabled, algorithm_class(cfg).trainable_copies)
    return [(f"{what}{', FSDP2 shard' if fsdp else ''}", shard(value, shards)) for what, value in state.items()]


def _activation_line(cfg, arch, calibration: dict, run) -> Line:
    """Replay's activations over one micro-batch; with a reference (a KL term, DPO) its no-grad
    forward over the same rows runs while they live."""
    m, dtype_bytes = cfg.model, DTYPE_BYTES[cfg.model.dtype]
    tokens = _tokens(cfg, arch)
    cfg_batch = m.cfg_batch if family_spec_of(cfg).split_cfg else "joint"
    rows = replay_rows(run.train_micro_batch, run.uses_cfg, cfg_batch, cfg.algorithm.detach_uncond)
    mode, per_unit = replay_coefficient(calibration, m.compile)
    activations = replay_activation_bytes(
        rows,
        tokens,
        arch.num_layers,
        arch.hidden_size,
        dtype_bytes,
        per_unit,
        calibration["replay_checkpointed"],
        m.gradient_checkpointing,
    )
    image_tokens = arch.geometry.image_tokens(cfg.rollout.height, cfg.rollout.width, m.num_frames)
    walk = outside_blocks_step_scale(cfg.rollout.num_steps, calibration.get(OUTSIDE_BLOCKS_STEPS))
    activations += outside_blocks_bytes(rows, image_tokens, dtype_bytes, calibration.get(OUTSIDE_BLOCKS, 0.0) * walk)
    forwards, chain_checkpointed = algorithm_class(cfg).backprop_forwards(cfg.algorithm, cfg.rollout.num_steps)
    chain = ""
    if forwards > 1:  # reward feedback: the backward runs through `forwards` sampling steps at once
        latents = float(rows * latent_elements(arch, cfg) * 4)  # float32 latents kept per step
        activations = chain_activation_bytes(activations, forwards, chain_checkpointed, latents)
        chain = f" x {forwards} chained steps{' (each step checkpointed)' if chain_checkpointed else ''}"
    if run.needs_reference:
        activations += rollout_working_bytes(rows, tokens, arch.hidden_size, dtype_bytes, calibration["rollout_peak"])
    return (
        f"replay activations ({rows} rows x {tokens} tokens, {mode}"
        f"{', checkpointed' if m.gradient_checkpointing else ''}{chain}"
        f"{' + the reference forward' if run.needs_reference else ''})",
        activations,
    )


def _feedback_lines(cfg, run) -> list[Line]:
    """Reward feedback (an algorithm that `needs_reward_gradients`): the micro-batch's x̂0 is
    decoded and scored with grad, so the VAE decoder's and the reward models' activations live
    beside the chain's until the backward."""
    if not algorithm_class(cfg).needs_reward_gradients:
        return []
    rows, spec = run.train_micro_batch, family_spec_of(cfg)
    decode = decoder_gradient_bytes(
        spec, cfg.model.path, cfg.model.path == spec.builtin_path, rows, cfg.rollout.height, cfg.rollout.width
    )
    lines = [(f"VAE decode under grad ({rows} images, float32)", decode)] if decode else []
    return lines + scorer_gradient_lines(cfg, rows)


def _sampling_line(cfg, arch, calibration: dict, batch: int, uses_cfg: bool, what: str) -> Line:
    """A no-grad sampling forward over `batch` samples (x2 for joint CFG); a token family's
    key-value cache at its longest plus the prompt's prefill."""
    dtype_bytes, per_unit = DTYPE_BYTES[cfg.model.dtype], calibration["rollout_peak"]
    cfg_batch = cfg.model.cfg_batch if family_spec_of(cfg).split_cfg else "joint"
    rows = batch * (2 if uses_cfg and cfg_batch == "joint" else 1)
    tokens, text_tokens = _tokens(cfg, arch), arch.geometry.text_tokens(cfg.model.max_sequence_length)
    if arch.geometry.kv_cache:
        working = kv_cache_bytes(
            rows, tokens, arch.num_layers, arch.kv_heads, arch.head_dim, dtype_bytes
        ) + rollout_working_bytes(rows, text_tokens, arch.hidden_size, dtype_bytes, per_unit)
    else:
        working = rollout_working_bytes(rows, tokens, arch.hidden_size, dtype_bytes, per_unit)
    return (
        f"{what} working set ({rows} rows x {tokens} tokens{', KV cache' if arch.geometry.kv_cache else ''})",
        working,
    )


def _evaluation_line(cfg, arch, calibration: dict) -> Line | None:
    e = cfg.eval
    if not (e.every > 0 or e.at_start):
        return None
    guidance = e.guidance_scale if e.guidance_scale is not None else cfg.rollout.guidance_scale
    return _sampling_line(cfg, arch, calibration, e.batch_size, guidance > 1.0, "evaluation")


def _cache_line(cfg, trained: int) -> Line | None:
    cache = autocast_cache_bytes(trained, DTYPE_BYTES[cfg.model.dtype])
    return (f"autocast's {cfg.model.dtype} casts of the fp32 trained weights", cache) if cache else None


def _ema_swap_line(cfg, trained: int, shards: int) -> Line | None:
    """Evaluating the EMA weights swaps them in and keeps a float32 copy of the live ones."""
    if not (cfg.actor.ema.enabled and cfg.eval.use_ema):
        return None
    return ("live weights kept while the EMA is swapped in (fp32)", shard(float(trained * MASTER_BYTES), shards))


def _micro_line(cfg, arch, run) -> Line:
    text_tokens = arch.geometry.text_tokens(cfg.model.max_sequence_length)
    condition = (2 if run.uses_cfg else 1) * text_tokens * arch.text_width * DTYPE_BYTES[cfg.model.dtype]
    return (
        "replayed micro-batch (latents, condition)",
        float(run.train_micro_batch * (2 * latent_elements(arch, cfg) * 4 + condition)),
    )


def _tokens(cfg, arch) -> int:
    m = cfg.model
    image_tokens = arch.geometry.image_tokens(cfg.rollout.height, cfg.rollout.width, m.num_frames)
    if arch.geometry.source_images:  # an editing family's source tokens ride beside the target's, at the size encoded
        source = family_spec_of(cfg).source_size(m.source_resolution, cfg.rollout.height, cfg.rollout.width)
        image_tokens += arch.geometry.source_images * arch.geometry.image_tokens(*source, m.num_frames)
    return tokens_per_row(
        image_tokens, arch.geometry.text_tokens(m.max_sequence_length), arch.geometry.text_in_sequence
    )


def trainer_ranks(cfg) -> int:
    if cfg.distributed.training.strategy == "none":
        return 1
    world = os.environ.get("WORLD_SIZE")
    if world:
        return int(world)
    gpus = cfg.distributed.resources.trainer.num_gpus
    return max(1, int(gpus)) if not isinstance(gpus, str) else 1


def family_spec_of(cfg):
    """The model family's `FamilySpec` (what it supports: split CFG, checkpointing, offload)."""
    return family_spec(cfg.model.family, cfg.model.allow_import)


def latent_elements(arch, cfg) -> int:
    """Latent elements of one sample: the transformer's image tokens x patch volume x the VAE's channels."""
    pt, ph, pw = arch.geometry.patch
    tokens = arch.geometry.image_tokens(cfg.rollout.height, cfg.rollout.width, cfg.model.num_frames)
    return tokens * pt * ph * pw * arch.latent_channels
