"""`genalign eval --checkpoint DIR`: the fixed evaluation of a saved checkpoint.

Rebuilds the policy from the checkpoint's own config, loads its trained (or EMA) weights and
runs the same `Evaluator` the trainer runs, so the numbers are comparable with the run's
`eval_metrics.csv`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import yaml

from genalign.config.loader import config_from_dict, config_to_dict
from genalign.rewards.composite import build_reward_runtime
from genalign.training import setup
from genalign.training.checkpoint import load_checkpoint
from genalign.training.lora import load_trainable_state_dict

log = logging.getLogger(__name__)


def evaluate_checkpoint(checkpoint_dir: str, output_dir: str | None, overrides: list[str]) -> dict[str, float]:
    checkpoint = load_checkpoint(checkpoint_dir)
    tree = config_to_dict(config_from_dict(checkpoint.config, source=str(checkpoint.path / "config.yaml")))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("eval."):
            raise ValueError(f"genalign eval: override {item!r} must be eval.<key>=<value>")
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = yaml.safe_load(value)
    cfg = config_from_dict(tree, source="genalign eval overrides")
    torch.manual_seed(cfg.trainer.seed)
    policy = setup.build_policy(cfg)
    use_ema = cfg.eval.use_ema and checkpoint.ema is not None
    load_trainable_state_dict(policy.transformer, checkpoint.ema if use_ema else checkpoint.trainable)
    out = Path(output_dir) if output_dir else checkpoint.path / "eval"
    rewards = build_reward_runtime(cfg.reward, policy.device)
    evaluator = setup.build_evaluator(cfg, policy.device, rewards, out, resume=False)
    metrics = evaluator.evaluate(policy, checkpoint.step)
    evaluator.sink.close()
    log.info("evaluated %s (%s weights) -> %s", checkpoint.path, "EMA" if use_ema else "trained", out)
    for key, value in sorted(metrics.items()):
        print(f"{key}\t{value:.6g}")
    return metrics
