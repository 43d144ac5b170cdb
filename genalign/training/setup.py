"""Building the parts of a run from a validated config (policy, EMA, rewards, data, sinks, evaluator).

Kept apart from `trainer.py` so the loop stays a loop. Nothing here runs a training step.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch

from genalign.algorithms.registry import algorithm_class
from genalign.config.loader import config_to_dict
from genalign.config.schema import ExperimentConfig
from genalign.data.prompts import load_manifest
from genalign.evaluation.evaluator import Evaluator
from genalign.evaluation.sharded import Shard
from genalign.finite import NonFiniteError, first_non_finite
from genalign.models.base import Policy
from genalign.models.experts import denoiser_parts
from genalign.models.spec import family_spec
from genalign.preflight.step_sizes import StepSizes, per_rank_accumulation
from genalign.rewards.composite import build_reward_runtime
from genalign.rollout.collector import SamplingSpec
from genalign.rollout.engine import LocalRolloutEngine, RolloutEngine
from genalign.rollout.ray_engine import RayRolloutEngine
from genalign.sampling.windows import WindowSchedule
from genalign.tracking.sinks import CSVSink, MetricsSink, MultiSink, NullSink, PrefixedSink
from genalign.tracking.trackers import MlflowSink, TensorBoardSink, WandbSink
from genalign.training.config import EMAConfig
from genalign.training.distributed import gather_to_main
from genalign.training.ema import EMA
from genalign.training.precision import compile_denoiser, configure_backends, convert_to_float8, make_master_weights
from genalign.training.sources import OfflineImages, OfflinePreferences, OneStepAhead, OnlineRollout, Sync
from genalign.training.update import UpdateContext
from genalign.weights.lora import apply_lora, freeze_for_full_finetune, trainable_state_dict
from genalign.weights.reference import ReferencePolicy

log = logging.getLogger(__name__)


def build_policy(cfg: ExperimentConfig) -> Policy:
    """Load the family's policy, make only the trained weights require grad (as float32
    masters), then optionally convert its linear layers to float8 matmuls, enable gradient
    checkpointing and compile the denoiser."""
    configure_backends(cfg.model.allow_tf32)
    spec = family_spec(cfg.model.family, cfg.model.allow_import)
    policy = spec.policy_class().from_config(cfg.model)
    if spec.rollout_sampler:  # the family's sampler reads rollout.* once, here, on every copy
        policy.configure_rollout(cfg.rollout)
    bad = first_non_finite(dict(policy.transformer.named_parameters()))
    if bad is not None:  # one check per tensor at load; a NaN weight would otherwise train on silently
        raise NonFiniteError(
            f"model.path={cfg.model.path}: the denoiser's weight {bad!r} holds NaN or inf; "
            "these weights cannot be trained"
        )
    for part in denoiser_parts(policy.transformer).values():  # the trained experts of a two-expert denoiser
        if cfg.model.train_mode == "lora":
            apply_lora(part, cfg.model.lora, policy.lora_target_modules)
        else:
            freeze_for_full_finetune(part)
    if cfg.model.offload_text_encoders:  # on the device only while prompts are encoded (`encoding_prompts`)
        policy.offloaded_text_encoders = tuple(encoder.to("cpu") for encoder in policy.text_encoders)
    cast = make_master_weights(policy.transformer)
    if cast:
        log.info(
            "trained weights: %d tensors kept as float32 masters; the denoiser computes in %s", cast, cfg.model.dtype
        )
    if cfg.model.float8 != "none":  # after the masters: Float8Linear keeps the same parameters
        converted = convert_to_float8(policy.transformer, cfg.model.float8, cfg.model.float8_emulate)
        log.info(
            "model.float8: %s scaling in %d linear layers of the denoiser%s",
            cfg.model.float8,
            converted,
            " (emulated: float32 matmuls of the float8-rounded values, no speedup)" if cfg.model.float8_emulate else "",
        )
    if cfg.model.gradient_checkpointing:
        if not spec.gradient_checkpointing:
            raise ValueError(f"model.gradient_checkpointing: family {cfg.model.family!r} does not support it")
        policy.transformer.enable_gradient_checkpointing()
    if cfg.model.compile:
        compiled = compile_denoiser(policy.transformer, cfg.model.compile_mode, policy.repeated_blocks)
        log.info(
            "model.compile: %s compilation of %d module(s); the first steps include compile time",
            cfg.model.compile_mode,
            compiled,
        )
    return policy


def build_reference(cfg: ExperimentConfig, policy: Policy) -> ReferencePolicy | None:
    """The frozen initial policy, when the algorithm's `reference_kind` asks for it (a KL term);
    taken before the denoiser is wrapped for training."""
    frozen = algorithm_class(cfg).reference_kind(cfg.algorithm) == "frozen"
    return ReferencePolicy(policy, cfg.model.train_mode) if frozen else None


def build_rollout_engine(cfg: ExperimentConfig, policy: Policy) -> RolloutEngine:
    if cfg.rollout.engine == "local":
        return LocalRolloutEngine(policy)
    if cfg.rollout.engine == "ray":  # workers start from the trainer's weights (version 0)
        # colocated: the engine parks this policy's modules on the CPU while workers hold theirs
        return RayRolloutEngine(cfg, trainable_state_dict(policy.transformer), build_policy, trainer_policy=policy)
    raise ValueError(f"rollout.engine={cfg.rollout.engine!r}: choose local or ray")


def build_batch_source(
    cfg: ExperimentConfig,
    sizes: StepSizes,
    policy: Policy,
    engine: RolloutEngine,
    rewards,
    algorithm,
    spec: SamplingSpec,
    ranks,
    sync: Sync,
):
    """The step's training data, as the algorithm's `data_source` declares: the online rollout
    (begun a step ahead with rollout.overlap=one_step), a preference dataset (offline Flow-DPO)
    or an image–prompt dataset (flow-matching SFT). `sync`: the trainer's, which the source
    calls when the rollout needs the weights."""
    source = algorithm.data_source(cfg.algorithm)
    datasets = {"offline": OfflinePreferences, "images": OfflineImages}
    if source in datasets:
        return datasets[source](cfg, sizes, policy, ranks, sync)
    if source != "online":
        raise ValueError(f"{algorithm.title} declares data_source {source!r}: choose online, offline or images")
    online = OneStepAhead if cfg.rollout.overlap == "one_step" else OnlineRollout
    return online(cfg, sizes, engine, rewards, algorithm, spec, ranks, sync)


def named_trainable_parameters(module: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return {name: p for name, p in module.named_parameters() if p.requires_grad}


def build_ema(cfg: EMAConfig, parameters: dict[str, torch.nn.Parameter]) -> EMA | None:
    """The EMA of the trained weights (None when actor.ema.enabled is false)."""
    return EMA(parameters, cfg.decay, cfg.update_every, cfg.warmup, cfg.cadence) if cfg.enabled else None


def rollout_spec(cfg: ExperimentConfig) -> SamplingSpec:
    """The training sampler; `SamplingSpec.at_step(step)` places the step's SDE window. What
    the rollout records beyond the trajectory (kernel means, which token log-prob) is what the
    algorithm declares it reads."""
    algorithm, r = algorithm_class(cfg), cfg.rollout
    window = None
    if r.sde_window.size > 0:
        lo, hi = r.sde_window.bounds_range(r.num_steps)
        window = WindowSchedule(
            r.sde_window.schedule,
            r.sde_window.size,
            lo,
            hi,
            cfg.trainer.seed,
            r.sde_window.shift_every,
            r.sde_window.shift_by,
            r.sde_window.draw,
        )
    return SamplingSpec(
        height=r.height,
        width=r.width,
        num_steps=r.num_steps,
        guidance_scale=r.guidance_scale,
        noise_level=r.noise_level,
        chunk_size=r.sample_batch_size,
        kernel=r.kernel,
        sa_solver=r.sa_solver if r.sampler == "sa_solver" else None,
        window=window,
        ode_final_step=r.ode_final_step,
        temperature=r.temperature,
        guided_log_probs=algorithm.guided_log_probs(cfg.algorithm),
        record_means=algorithm.needs_rollout_means,
    )


def eval_spec(cfg: ExperimentConfig) -> SamplingSpec:
    """The evaluation sampler: deterministic ODE (noise 0), eval.num_steps, fixed guidance; a
    token family samples at rollout.temperature with the fixed eval seeds (so it repeats)."""
    guidance = cfg.eval.guidance_scale if cfg.eval.guidance_scale is not None else cfg.rollout.guidance_scale
    height = cfg.eval.height if cfg.eval.height is not None else cfg.rollout.height
    width = cfg.eval.width if cfg.eval.width is not None else cfg.rollout.width
    return SamplingSpec(
        height=height,
        width=width,
        num_steps=cfg.eval.num_steps,
        guidance_scale=guidance,
        noise_level=0.0,
        chunk_size=cfg.eval.batch_size,
        temperature=cfg.rollout.temperature,
    )


def build_trackers(cfg: ExperimentConfig, output_dir: Path, first_step: int, run_id: str) -> list[MetricsSink]:
    """The trackers of `trainer.loggers` besides csv (rank 0 only). `first_step` is the first
    step this start writes (TensorBoard hides older events at or after it: a resume redoes
    them); `run_id` names the W&B run, the same one across resumes."""
    trackers: list[MetricsSink] = []
    if "tensorboard" in cfg.trainer.loggers:
        trackers.append(TensorBoardSink(output_dir / "tensorboard", purge_step=first_step if first_step > 0 else None))
    if "wandb" in cfg.trainer.loggers:
        trackers.append(WandbSink(cfg.trainer.wandb, output_dir, run_id, config_to_dict(cfg)))
    if "mlflow" in cfg.trainer.loggers:
        trackers.append(MlflowSink(cfg.trainer.mlflow, output_dir, run_id, config_to_dict(cfg)))
    if trackers:
        log.info(
            "trackers: %s (metrics.csv stays the record)",
            ", ".join(name for name in cfg.trainer.loggers if name != "csv"),
        )
    return trackers


def build_metrics_sink(path: Path, resume: bool, trackers: list[MetricsSink], prefix: str) -> MetricsSink:
    """The CSV file at `path` (the record) plus every tracker under `prefix/`."""
    return MultiSink([CSVSink(path, resume=resume), *(PrefixedSink(tracker, prefix) for tracker in trackers)])


def update_context(
    cfg: ExperimentConfig,
    policy: Policy,
    algorithm,
    optimizer: torch.optim.Optimizer,
    parameters: dict[str, torch.nn.Parameter],
    scaler: torch.amp.GradScaler,
    ema: EMA | None,
    ranks,
) -> UpdateContext:
    """What every optimizer round shares: each rank runs its 1/world of an optimizer step's
    micro-batches (gradients are averaged over ranks)."""
    accumulation = per_rank_accumulation(cfg.actor.gradient_accumulation_steps, ranks.world_size)
    actor = dataclasses.replace(cfg.actor, gradient_accumulation_steps=accumulation)
    return UpdateContext(
        policy, algorithm, optimizer, list(parameters.values()), actor, scaler, ranks, policy.transformer, ema
    )


def build_sinks(
    cfg: ExperimentConfig, reward_runtime, device: torch.device, resumed_at: int | None, run_id: str, ranks
) -> tuple[list[MetricsSink], MetricsSink, Evaluator]:
    """The trackers, the training metrics sink and the evaluator of this start. `resumed_at`:
    the first step a resumed start writes (None: a fresh run); ranks other than 0 get no
    trackers and sinks that write nothing; the evaluation is sharded over `ranks`."""
    writes = ranks.is_main
    output_dir, resume = Path(cfg.trainer.output_dir), resumed_at is not None
    trackers = build_trackers(cfg, output_dir, resumed_at or 0, run_id) if writes else []
    metrics = build_metrics_sink(output_dir / "metrics.csv", resume, trackers, "train") if writes else NullSink()
    evaluator = build_evaluator(
        cfg, device, reward_runtime, output_dir, resume, writes=writes, trackers=trackers, ranks=ranks
    )
    return trackers, metrics, evaluator


def build_evaluator(
    cfg: ExperimentConfig,
    device: torch.device,
    reward_runtime,
    output_dir: Path,
    resume: bool,
    writes: bool = True,
    trackers: list[MetricsSink] = (),
    ranks=None,
) -> Evaluator:
    """`writes=False` (ranks other than 0) evaluates without writing metrics or sheets; `ranks`
    (a `distributed.RankInfo`; None: one process) shards the samples over the ranks."""
    gold = (
        build_reward_runtime(cfg.reward, device, components=cfg.eval.gold_rewards)
        if cfg.eval.active_gold_rewards()
        else None
    )  # every weight 0: gold monitoring is off
    quality = (
        build_reward_runtime(cfg.reward, device, components=dict.fromkeys(cfg.eval.quality_metrics, 1.0))
        if cfg.eval.quality_metrics
        else None
    )
    sink = build_metrics_sink(output_dir / "eval_metrics.csv", resume, list(trackers), "eval") if writes else NullSink()
    return Evaluator(
        cfg.eval,
        load_manifest(cfg.data.eval_manifest, "data.eval_manifest"),
        eval_spec(cfg),
        reward_runtime,
        gold,
        output_dir if writes else None,
        sink,
        quality,
        progress_bar=cfg.trainer.progress_bar and writes,  # one bar per job
        shard=evaluation_shard(ranks),
    )


def evaluation_shard(ranks) -> Shard:
    """This rank's place in a sharded evaluation, with the gather collective (one process: none)."""
    if ranks is None or ranks.world_size == 1:
        return Shard()

    return Shard(ranks.rank, ranks.world_size, lambda tensor: gather_to_main(tensor, ranks))
