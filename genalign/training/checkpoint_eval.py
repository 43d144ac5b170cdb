"""`genalign eval --checkpoint DIR`: the fixed evaluation of a saved checkpoint.

Rebuilds the policy from the checkpoint's own config, loads its trained (or EMA) weights and
runs the same `Evaluator` the trainer runs, so the numbers are comparable with the run's
`eval_metrics.csv`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from genalign.config.errors import ConfigError
from genalign.config.loader import safe_load_unique
from genalign.placement.ray_pools import start_ray_for_run, stop_ray_for_run
from genalign.preflight.files import file_problems, output_dir_problems
from genalign.preflight.stored_config import ALLOW_IMPORT_KEYS, config_from_checkpoint, split_allow_overrides
from genalign.rewards.composite import build_reward_runtime
from genalign.runs.checkpoint import CheckpointError, checkpoint_problems, load_checkpoint
from genalign.training import setup
from genalign.weights.lora import load_trainable_state_dict

log = logging.getLogger(__name__)

EVAL_OVERRIDE_KEYS = ("eval.", *(f"{key}=" for key in ALLOW_IMPORT_KEYS))
"""What `genalign eval` may change: the evaluation protocol, and which dotted reward and
model-family paths the user (never the checkpoint) allows to be imported."""


def evaluate_checkpoint(checkpoint_dir: str, output_dir: str | None, overrides: list[str]) -> dict[str, float]:
    cfg = checkpoint_eval_config(checkpoint_dir, output_dir, overrides)  # every mistake before a model loads
    checkpoint = load_checkpoint(checkpoint_dir, "--checkpoint")
    torch.manual_seed(cfg.trainer.seed)
    policy = setup.build_policy(cfg)
    use_ema = cfg.eval.use_ema and checkpoint.ema is not None
    try:
        load_trainable_state_dict(policy.transformer, checkpoint.ema if use_ema else checkpoint.trainable)
    except ValueError as exc:  # names and shapes are known only now, with the model built
        name = "ema.safetensors" if use_ema else "trainable.safetensors"
        raise CheckpointError(f"--checkpoint: {checkpoint.path}/{name}: {exc}") from None
    out = Path(output_dir) if output_dir else checkpoint.path / "eval"

    owns_ray = start_ray_for_run(cfg)  # sized for the reward, gold and metric pools together
    try:
        rewards = build_reward_runtime(cfg.reward, policy.device)
        try:
            evaluator = setup.build_evaluator(cfg, policy.device, rewards, out, resume=False)
            try:
                metrics = evaluator.evaluate(policy, checkpoint.step)
            finally:
                evaluator.close()
        finally:  # its threads, actors or HTTP sessions, on success and on failure
            rewards.close()
    finally:  # a Ray this evaluation started does not outlive it (an in-process caller goes on)
        stop_ray_for_run(owns_ray)
    log.info("evaluated %s (%s weights) -> %s", checkpoint.path, "EMA" if use_ema else "trained", out)
    for key, value in sorted(metrics.items()):
        print(f"{key}\t{value:.6g}")
    return metrics


def checkpoint_eval_config(checkpoint_dir: str, output_dir: str | None, overrides: list[str]):
    """The checkpoint's config with `overrides`, validated like a user's (with the user's
    reward.allow_import, model.allow_import and algorithm.allow_import only), plus the files it names; raises
    `CheckpointError`/`ConfigError`."""
    bad = [item for item in overrides if not item.startswith(EVAL_OVERRIDE_KEYS)]
    if bad:
        raise ConfigError(
            [
                f"genalign eval: override {item!r} must be eval.<key>=<value>, reward.allow_import=[...], "
                "model.allow_import=[...] or algorithm.allow_import=[...]"
                for item in bad
            ]
        )
    problems = checkpoint_problems(checkpoint_dir, "--checkpoint")
    if problems:
        raise CheckpointError(problems[0] if len(problems) == 1 else "; ".join(problems))
    # the user's own lists, typed exactly as the config keys; the checkpoint's lists are never read
    allowed, rest = split_allow_overrides(overrides, "genalign eval")
    config_path = Path(checkpoint_dir).expanduser() / "config.yaml"
    # eval runs one process on model.device: the checkpoint's distributed.* plan is not this machine's
    cfg = config_from_checkpoint(
        safe_load_unique(config_path.read_text(encoding="utf-8")), str(config_path), allowed, rest, check_machine=False
    )
    out = Path(output_dir).expanduser() if output_dir else Path(checkpoint_dir).expanduser() / "eval"
    problems = file_problems(cfg, manifests=("eval_manifest",), output_dir=False, resume=False)
    problems += [p.replace("trainer.output_dir", "--output-dir") for p in output_dir_problems(str(out))]
    if problems:
        raise ConfigError([f"{config_path}: {p}" if not p.startswith("--") else p for p in problems])
    return cfg
